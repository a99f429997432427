//! Snapshot build cost at control-plane scale: 10,000 services × 10
//! backends, built from scratch and rebuilt with `reuse_from` after one
//! backend changed (one ring rebuilt, 9,999 shared).
//!
//! `cargo bench -p lb-dataplane --bench snapshot`. The control plane's
//! republish target is 5 ms for the incremental rebuild; both numbers
//! include making the specs, as the control plane does.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use lb_dataplane::flow::Proto;
use lb_dataplane::snapshot::{BackendSpec, FrontendKind, FrontendSpec, ServiceSpec};
use lb_dataplane::{Snapshot, SnapshotBuilder};

const SERVICES: u32 = 10_000;
const BACKENDS: u32 = 10;

/// With `change`, service 1234's backend 5 moves to port 8081.
fn fill(prev: Option<&Snapshot>, change: bool) -> SnapshotBuilder<'_> {
    let mut b = SnapshotBuilder::new(1);
    if let Some(p) = prev {
        b.reuse_from(p);
    }
    b.interface(0, [2, 0, 0, 0, 0, 1], "10.0.0.1/8".parse().unwrap(), None);
    for i in 0..SERVICES {
        let id = b
            .service(ServiceSpec::new(format!("ns-{}/svc-{i}", i % 50)))
            .unwrap();
        let vip = IpAddr::V4(Ipv4Addr::from(0x6440_0000 + i));
        b.frontend(
            id,
            FrontendSpec::new(vip, 80, Proto::Tcp, FrontendKind::LoadBalancer),
        )
        .unwrap();
        for j in 0..BACKENDS {
            let addr = IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + i * BACKENDS + j));
            let port = if change && i == 1234 && j == 5 { 8081 } else { 8080 };
            b.backend(id, BackendSpec::new(addr, port)).unwrap();
        }
    }
    b
}

fn build(prev: Option<&Snapshot>, change: bool) -> Snapshot {
    fill(prev, change).build().unwrap()
}

fn snapshot(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot_10k_services_x10");
    g.bench_function("full_build", |b| b.iter(|| build(None, false)));
    let prev = build(None, false);
    // Every iteration rebuilds against the same `prev` with the same single
    // change: exactly one ring is built. Dropping the result is part of the
    // measured work, as on the control thread.
    g.bench_function("incremental_reuse_from", |b| {
        b.iter(|| build(Some(black_box(&prev)), true))
    });
    // The same split into its parts: making the specs (the control plane's
    // share), and `build` alone with the result dropped outside the timing.
    g.bench_function("incremental_specs_only", |b| {
        b.iter(|| fill(Some(black_box(&prev)), true))
    });
    g.bench_function("incremental_build_only", |b| {
        b.iter_batched(
            || fill(Some(&prev), true),
            |builder| builder.build().unwrap(),
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, snapshot);
criterion_main!(benches);
