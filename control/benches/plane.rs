//! The control plane at scale: a resync of 10,000 services × 10 backends
//! from an empty state (validate, compile, publish), then one backend
//! weight change through `apply` (the commit-to-publication path that the
//! incremental compiler keeps to one service), without and with the state
//! file.
//!
//! `cargo bench -p lb-control --bench plane`

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use lb_control::model::{
    Backend, BackendKey, BackendState, Change, Frontend, FrontendKey, FrontendType, Mode, Protocol, Service,
    Source, TrafficPolicy,
};
use lb_control::plane::{ControlPlane, InterfaceConfig, NodeConfig};

const SERVICES: u32 = 10_000;
const BACKENDS: u32 = 10;

fn node() -> NodeConfig {
    NodeConfig {
        node_name: Some("node-a".into()),
        interfaces: vec![InterfaceConfig {
            port: 0,
            mac: [2, 0, 0, 0, 0, 1],
            cidr: "10.0.0.1/8".parse().unwrap(),
            gateway: Some("10.0.0.254".parse().unwrap()),
            vlan: None,
            mtu: None,
        }],
        snat_addresses: vec!["10.0.0.100".parse().unwrap()],
        ..NodeConfig::default()
    }
}

type Objects = (Vec<Service>, Vec<Frontend>, Vec<Backend>);

fn objects() -> Objects {
    let mut services = Vec::new();
    let mut frontends = Vec::new();
    let mut backends = Vec::new();
    for i in 0..SERVICES {
        let name = format!("ns-{}/svc-{i}", i % 50);
        services.push(Service {
            name: name.clone(),
            mode: if i % 2 == 0 { Mode::Dnat } else { Mode::FullNat },
            traffic_policy: TrafficPolicy::Cluster,
            affinity_timeout_seconds: None,
            source_ranges: vec![],
            source: Source::K8s,
        });
        frontends.push(Frontend {
            service: name.clone(),
            key: FrontendKey {
                addr: IpAddr::V4(Ipv4Addr::from(0x6440_0000 + i)),
                port: 80,
                protocol: Protocol::Tcp,
            },
            kind: FrontendType::LoadBalancer,
            source: Source::K8s,
        });
        for j in 0..BACKENDS {
            backends.push(Backend {
                key: BackendKey {
                    service: name.clone(),
                    addr: IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + i * BACKENDS + j)),
                    port: 8080,
                },
                weight: 1,
                state: BackendState::Active,
                operator_state: None,
                node: None,
                zone: None,
                source: Source::K8s,
            });
        }
    }
    (services, frontends, backends)
}

fn loaded(state_file: Option<&std::path::Path>) -> ControlPlane {
    let mut p = ControlPlane::open(node(), state_file).unwrap();
    let (s, f, b) = objects();
    p.resync(Source::K8s, s, f, b).unwrap();
    p
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("plane");
    g.sample_size(10);
    let objs = objects();
    g.bench_function("resync_10k_services_x10_from_empty", |b| {
        b.iter_batched(
            || (ControlPlane::open(node(), None).unwrap(), objs.clone()),
            |(mut p, (s, f, bs))| {
                black_box(p.resync(Source::K8s, s, f, bs).unwrap());
                p
            },
            BatchSize::PerIteration,
        )
    });

    let mut weight = 1;
    let mut change = |p: &mut ControlPlane| {
        weight = 3 - weight;
        let b = Backend {
            key: BackendKey {
                service: "ns-34/svc-1234".into(),
                addr: IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + 1234 * BACKENDS + 5)),
                port: 8080,
            },
            weight,
            state: BackendState::Active,
            operator_state: None,
            node: None,
            zone: None,
            source: Source::K8s,
        };
        p.apply(Source::K8s, vec![Change::UpsertBackend(b)], None)
            .unwrap()
    };
    let mut p = loaded(None);
    g.bench_function("one_backend_weight_change_10k_no_state_file", |b| {
        b.iter(|| black_box(change(&mut p)))
    });
    eprintln!("last_publish (no state file): {:?}", p.last_publish());
    drop(p);

    let dir = tempfile::tempdir().unwrap();
    let mut p = loaded(Some(&dir.path().join("state.json")));
    g.bench_function("one_backend_weight_change_10k_with_state_file", |b| {
        b.iter(|| black_box(change(&mut p)))
    });
    eprintln!("last_publish (state file): {:?}", p.last_publish());
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
