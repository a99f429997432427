//! A sequence of `SnapshotBuilder` calls derived with `arbitrary`:
//! interfaces, SNAT addresses, neighbors, services, frontends, backends,
//! local node, ring size. `build` must never panic; when it succeeds, the
//! snapshot answers lookups consistently, and a second build that reuses
//! the first (`reuse_from`, ring sharing and stable slots) gives the same
//! answers.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use arbitrary::Arbitrary;
use lb_dataplane::flow::Proto;
use lb_dataplane::snapshot::{
    BackendSpec, BackendState, Cidr, Family, ForwardMode, FrontendKind, FrontendSpec, ServiceId, ServiceSpec,
    SessionAffinity, TrafficPolicy,
};
use lb_dataplane::{Snapshot, SnapshotBuilder};
use libfuzzer_sys::fuzz_target;

/// Addresses biased towards a small set, so frontends, backends,
/// interfaces and neighbors collide and overlap often.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Addr {
    Small4(u8),
    Small6(u8),
    Any4([u8; 4]),
    Any6([u8; 16]),
}

impl Addr {
    fn ip(self) -> IpAddr {
        match self {
            Addr::Small4(x) => IpAddr::V4(Ipv4Addr::new(10, x >> 6, 0, x & 0x3f)),
            Addr::Small6(x) => IpAddr::V6(Ipv6Addr::new(
                0xfd00,
                0,
                0,
                u16::from(x >> 6),
                0,
                0,
                0,
                u16::from(x & 0x3f),
            )),
            Addr::Any4(b) => IpAddr::V4(Ipv4Addr::from(b)),
            Addr::Any6(b) => IpAddr::V6(Ipv6Addr::from(b)),
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
enum Op {
    Interface {
        port: u16,
        mac: [u8; 6],
        addr: Addr,
        prefix: u8,
        gateway: Option<Addr>,
    },
    Snat(Addr),
    Neighbor(Addr, [u8; 6]),
    Service {
        name: u8,
        long_name: Option<String>,
        full_nat: bool,
        local: bool,
        affinity: Option<u32>,
        ranges: Vec<(Addr, u8)>,
    },
    Frontend {
        service: u8,
        addr: Addr,
        port: u16,
        proto: u8,
        kind: u8,
        slot: Option<u32>,
    },
    Backend {
        service: u8,
        addr: Addr,
        port: u16,
        weight: u32,
        state: u8,
        node: Option<u8>,
        slot: Option<u32>,
    },
    LocalNode(u8),
    MaxRingSize(u16),
}

#[derive(Arbitrary, Debug)]
struct Input {
    ops: Vec<Op>,
    /// Extra ops for the second, `reuse_from` build.
    changes: Vec<Op>,
    probes: Vec<(Addr, u16, bool, u64)>,
}

fn proto(x: u8) -> Proto {
    match x % 4 {
        0 => Proto::Tcp,
        1 => Proto::Udp,
        2 => Proto::Icmp,
        _ => Proto::Icmpv6,
    }
}

fn apply(b: &mut SnapshotBuilder<'_>, ids: &mut Vec<ServiceId>, op: &Op) {
    match op {
        Op::Interface {
            port,
            mac,
            addr,
            prefix,
            gateway,
        } => {
            if let Ok(c) = Cidr::new(addr.ip(), *prefix) {
                b.interface(*port, *mac, c, gateway.map(Addr::ip));
            }
        }
        Op::Snat(a) => {
            b.snat_address(a.ip());
        }
        Op::Neighbor(a, mac) => {
            b.neighbor(a.ip(), *mac);
        }
        Op::Service {
            name,
            long_name,
            full_nat,
            local,
            affinity,
            ranges,
        } => {
            let name = long_name.clone().unwrap_or_else(|| format!("ns/svc{name}"));
            let mut s = ServiceSpec::new(name);
            s.mode = if *full_nat {
                ForwardMode::FullNat
            } else {
                ForwardMode::Dnat
            };
            s.traffic_policy = if *local {
                TrafficPolicy::Local
            } else {
                TrafficPolicy::Cluster
            };
            if let Some(t) = affinity {
                s.affinity = SessionAffinity::ClientIp {
                    timeout: Duration::from_secs(u64::from(*t)),
                };
            }
            s.source_ranges = ranges
                .iter()
                .filter_map(|(a, p)| Cidr::new(a.ip(), *p).ok())
                .collect();
            if let Ok(id) = b.service(s) {
                ids.push(id);
            }
        }
        Op::Frontend {
            service,
            addr,
            port,
            proto: p,
            kind,
            slot,
        } => {
            let Some(&id) = ids.get(usize::from(*service) % ids.len().max(1)) else {
                return;
            };
            let kind = match kind % 4 {
                0 => FrontendKind::ClusterIp,
                1 => FrontendKind::NodePort,
                2 => FrontendKind::LoadBalancer,
                _ => FrontendKind::ExternalIp,
            };
            let mut f = FrontendSpec::new(addr.ip(), *port, proto(*p), kind);
            f.stats_slot = *slot;
            let _ = b.frontend(id, f);
        }
        Op::Backend {
            service,
            addr,
            port,
            weight,
            state,
            node,
            slot,
        } => {
            let Some(&id) = ids.get(usize::from(*service) % ids.len().max(1)) else {
                return;
            };
            let mut be = BackendSpec::new(addr.ip(), *port);
            be.weight = *weight;
            be.state = match state % 4 {
                0 => BackendState::Active,
                1 => BackendState::Terminating,
                2 => BackendState::Quarantined,
                _ => BackendState::Maintenance,
            };
            be.node = node.map(|n| format!("node{n}"));
            be.stats_slot = *slot;
            let _ = b.backend(id, be);
        }
        Op::LocalNode(n) => {
            b.local_node(format!("node{n}"));
        }
        Op::MaxRingSize(m) => {
            b.max_ring_size(u32::from(*m));
        }
    }
}

/// Every lookup the pipeline makes, for each probe; returns a summary to
/// compare two snapshots built from the same calls.
fn probe(snap: &Snapshot, probes: &[(Addr, u16, bool, u64)]) -> Vec<String> {
    let mut out = Vec::new();
    for fe in snap.frontends() {
        let (f, svc) = snap
            .lookup(fe.addr, fe.port, fe.proto)
            .expect("a listed frontend is found");
        assert_eq!(f, fe);
        assert_eq!(snap.service(fe.service).name(), svc.name());
        assert!(snap.is_owned(fe.addr), "a VIP is an owned address");
        for h in [0, 1, u64::MAX] {
            if let Some(be) = new_flow_pick(svc, fe.addr, h) {
                assert!(
                    svc.backends().contains(be),
                    "picked backend belongs to its service"
                );
                out.push(format!("{} {h} -> {}:{}", svc.name(), be.addr, be.port));
            }
        }
    }
    for &(a, port, tcp, h) in probes {
        let ip = a.ip();
        let p = if tcp { Proto::Tcp } else { Proto::Udp };
        if let Some((_, svc)) = snap.lookup(ip, port, p) {
            let _ = svc.allows_source(ip);
            if let Some(be) = new_flow_pick(svc, ip, h) {
                out.push(format!("{ip} {port} {h} -> {}:{}", be.addr, be.port));
            }
        }
        out.push(format!(
            "{ip} owner {:?} hop {:?}",
            snap.owner_kind(ip),
            snap.next_hop(ip)
        ));
        let _ = snap.connected_port(ip);
    }
    for i in 0..snap.port_count() as u16 {
        let _ = snap.port(i);
    }
    out
}

fuzz_target!(|input: Input| {
    let mut ids = Vec::new();
    let mut b = SnapshotBuilder::new(1);
    for op in &input.ops {
        apply(&mut b, &mut ids, op);
    }
    let Ok(first) = b.build() else {
        return;
    };
    let first_answers = probe(&first, &input.probes);

    // The same calls again, reusing the first snapshot: same answers.
    let mut ids = Vec::new();
    let mut b = SnapshotBuilder::new(2);
    b.reuse_from(&first);
    for op in &input.ops {
        apply(&mut b, &mut ids, op);
    }
    let again = b.build().expect("the same calls build again");
    assert_eq!(
        probe(&again, &input.probes),
        first_answers,
        "reuse_from changes no answer"
    );

    // Then with changes on top: must not panic.
    let mut ids = Vec::new();
    let mut b = SnapshotBuilder::new(3);
    b.reuse_from(&again);
    for op in input.ops.iter().chain(&input.changes) {
        apply(&mut b, &mut ids, op);
    }
    if let Ok(changed) = b.build() {
        probe(&changed, &input.probes);
    }
});

/// The backend the pipeline starts from for a new flow of `client` (its
/// family's ring) with flow hash `h`: the flow hash's pick, or under
/// client-IP affinity the pick for the client address, where its pin starts.
fn new_flow_pick(
    svc: &lb_dataplane::snapshot::Service,
    client: IpAddr,
    h: u64,
) -> Option<&lb_dataplane::snapshot::Backend> {
    match svc.affinity() {
        SessionAffinity::None => svc.pick(h, Family::of(client)),
        SessionAffinity::ClientIp { .. } => svc.pick_for_client(client, Family::of(client)),
    }
}
