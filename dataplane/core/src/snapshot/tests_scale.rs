//! The scale test (10,000 services × 10 backends, then one backend changed
//! with `reuse_from`: exactly one ring rebuilt) and the property test that
//! the builder never panics and upholds the snapshot invariants on
//! arbitrary input.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use proptest::prelude::*;

use super::tests::{ip, MAC0, MAC1};
use super::*;

const SERVICES: u32 = 10_000;
const BACKENDS: u32 = 10;

/// 10k services × 10 backends; with `change`, service 1234's backend 5
/// moves to port 8081.
fn build_10k(prev: Option<&Snapshot>, change: bool) -> Snapshot {
    let mut b = SnapshotBuilder::new(if change { 2 } else { 1 });
    if let Some(p) = prev {
        b.reuse_from(p);
    }
    b.interface(0, MAC0, "10.0.0.1/8".parse().unwrap(), Some(ip("10.0.0.254")))
        .snat_address(ip("10.0.0.100"));
    for i in 0..SERVICES {
        let mut spec = ServiceSpec::new(format!("ns-{}/svc-{i}", i % 50));
        spec.mode = if i % 2 == 0 {
            ForwardMode::Dnat
        } else {
            ForwardMode::FullNat
        };
        let id = b.service(spec).unwrap();
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
    b.build().unwrap()
}

#[test]
fn ten_thousand_services_rebuild_one_ring() {
    // Timing is the control plane's bench (control/benches/plane.rs).
    let s1 = build_10k(None, false);
    let s2 = build_10k(Some(&s1), true);

    assert_eq!(s1.services().len(), SERVICES as usize);
    assert_eq!(s1.services()[0].ring(Family::V4).size(), 1021);
    let rebuilt: Vec<&str> = s1
        .services()
        .iter()
        .zip(s2.services())
        .filter(|(a, b)| !Arc::ptr_eq(a.ring(Family::V4), b.ring(Family::V4)))
        .map(|(_, b)| b.name())
        .collect();
    assert_eq!(rebuilt, vec!["ns-34/svc-1234"]);
    // Slots survive: every backend present in both keeps its slot.
    for (a, b) in s1.services().iter().zip(s2.services()) {
        for be in b.backends() {
            if let Some(old) = a.find_backend(be.addr, be.port) {
                assert_eq!(old.stats_slot, be.stats_slot);
            }
        }
    }
    assert_eq!(s2.backend_slots(), SERVICES * BACKENDS);
    assert!(s2.is_owned(ip("100.64.39.15")));
}

/// Small pools so that collisions (duplicates, SNAT = VIP, gateways in and
/// out of prefixes) are frequent.
fn any_addr() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        (0u8..4, 0u8..4).prop_map(|(a, b)| IpAddr::V4(Ipv4Addr::new(10, 0, a, b))),
        Just(ip("0.0.0.0")),
        Just(ip("255.255.255.255")),
        Just(ip("224.0.0.1")),
        (0u16..4).prop_map(|a| IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, a))),
        Just(ip("ff02::1")),
    ]
}

fn any_proto() -> impl Strategy<Value = Proto> {
    prop_oneof![
        Just(Proto::Tcp),
        Just(Proto::Udp),
        Just(Proto::Icmp),
        Just(Proto::Icmpv6)
    ]
}

fn any_state() -> impl Strategy<Value = BackendState> {
    prop_oneof![
        Just(BackendState::Active),
        Just(BackendState::Terminating),
        Just(BackendState::Quarantined),
        Just(BackendState::Maintenance),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Service(String, bool, bool, Vec<(IpAddr, u8)>),
    Frontend(u32, IpAddr, u16, Proto, Option<u32>),
    Backend(u32, IpAddr, u16, u32, BackendState, Option<u8>, Option<u32>),
    Interface(u16, [u8; 6], IpAddr, u8, Option<IpAddr>),
    Snat(IpAddr),
    Neighbor(IpAddr, [u8; 6]),
    MaxRing(u32),
}

fn any_op() -> impl Strategy<Value = Op> {
    let name = prop_oneof![
        (0u8..4).prop_map(|i| format!("ns/s{i}")),
        Just("bad".to_string()),
        Just("Bad/x".to_string()),
        ".{0,12}",
    ];
    let slot = prop::option::of(prop_oneof![0u32..8, Just(u32::MAX), Just(MAX_STATS_SLOT)]);
    let mac = prop_oneof![Just(MAC0), Just(MAC1), Just([0u8; 6]), Just([1, 0, 0, 0, 0, 1])];
    prop_oneof![
        (
            name,
            any::<bool>(),
            any::<bool>(),
            prop::collection::vec((any_addr(), 0u8..130), 0..3)
        )
            .prop_map(|(n, full, local, r)| Op::Service(n, full, local, r)),
        (
            0u32..5,
            any_addr(),
            prop_oneof![Just(0u16), Just(80), Just(443)],
            any_proto(),
            slot.clone()
        )
            .prop_map(|(s, a, p, pr, sl)| Op::Frontend(s, a, p, pr, sl)),
        (
            0u32..5,
            any_addr(),
            prop_oneof![Just(0u16), Just(8080), Just(9090)],
            prop_oneof![0u32..4, Just(MAX_WEIGHT), Just(MAX_WEIGHT + 1), Just(u32::MAX)],
            any_state(),
            prop::option::of(0u8..2),
            slot,
        )
            .prop_map(|(s, a, p, w, st, n, sl)| Op::Backend(s, a, p, w, st, n, sl)),
        (
            prop_oneof![0u16..3, Just(MAX_PORTS), Just(u16::MAX)],
            mac.clone(),
            any_addr(),
            0u8..130,
            prop::option::of(any_addr())
        )
            .prop_map(|(p, m, a, l, g)| Op::Interface(p, m, a, l, g)),
        any_addr().prop_map(Op::Snat),
        (any_addr(), mac).prop_map(|(a, m)| Op::Neighbor(a, m)),
        prop_oneof![Just(0u32), Just(7), 1u32..300, Just(u32::MAX)].prop_map(Op::MaxRing),
    ]
}

/// Applies `ops`; errors from individual calls are ignored (the call had
/// no effect), as a control plane that skips bad objects would.
fn apply(ops: &[Op], prev: Option<&Snapshot>) -> Result<Snapshot, BuildError> {
    let mut b = SnapshotBuilder::new(1);
    b.local_node("node-0");
    if let Some(p) = prev {
        b.reuse_from(p);
    }
    for op in ops.iter().cloned() {
        match op {
            Op::Service(name, full, local, ranges) => {
                let mut spec = ServiceSpec::new(name);
                spec.mode = if full {
                    ForwardMode::FullNat
                } else {
                    ForwardMode::Dnat
                };
                spec.traffic_policy = if local {
                    TrafficPolicy::Local
                } else {
                    TrafficPolicy::Cluster
                };
                spec.source_ranges = ranges
                    .into_iter()
                    .filter_map(|(a, l)| Cidr::new(a, l).ok())
                    .collect();
                let _ = b.service(spec);
            }
            Op::Frontend(s, addr, port, proto, stats_slot) => {
                let spec = FrontendSpec {
                    stats_slot,
                    ..FrontendSpec::new(addr, port, proto, FrontendKind::ClusterIp)
                };
                let _ = b.frontend(ServiceId(s), spec);
            }
            Op::Backend(s, addr, port, weight, state, node, stats_slot) => {
                let spec = BackendSpec {
                    weight,
                    state,
                    node: node.map(|n| format!("node-{n}")),
                    stats_slot,
                    ..BackendSpec::new(addr, port)
                };
                let _ = b.backend(ServiceId(s), spec);
            }
            Op::Interface(port, mac, addr, len, gw) => {
                if let Ok(c) = Cidr::new(addr, len) {
                    b.interface(port, mac, c, gw);
                }
            }
            Op::Snat(a) => {
                b.snat_address(a);
            }
            Op::Neighbor(a, m) => {
                b.neighbor(a, m);
            }
            Op::MaxRing(m) => {
                b.max_ring_size(m);
            }
        }
    }
    b.build()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn builder_never_panics_and_keeps_invariants(ops in prop::collection::vec(any_op(), 0..40)) {
        let Ok(s) = apply(&ops, None) else { return Ok(()) };
        for f in s.frontends() {
            let svc = s.get_service(f.service).expect("frontend's service exists");
            prop_assert!(matches!(f.proto, Proto::Tcp | Proto::Udp) && f.port != 0);
            prop_assert!(f.stats_slot < s.frontend_slots());
            prop_assert!(s.is_owned(f.addr));
            prop_assert!(!s.owner_kind(f.addr).unwrap().contains(OwnerKind::SNAT));
            prop_assert_eq!(s.frontend(f.addr, f.port, f.proto), Some(f));
            let has_snat = if f.addr.is_ipv4() { !s.snat_v4().is_empty() } else { !s.snat_v6().is_empty() };
            prop_assert!(svc.mode() == ForwardMode::Dnat || has_snat);
        }
        for svc in s.services() {
            for b in svc.backends() {
                prop_assert!(b.stats_slot < s.backend_slots());
            }
            for k in 0..64u64 {
                if let Some(b) = svc.pick(k.wrapping_mul(0x9e37_79b9_7f4a_7c15), Family::V4) {
                    prop_assert!(b.state == BackendState::Active && b.weight > 0);
                    prop_assert!(svc.traffic_policy() == TrafficPolicy::Cluster
                        || b.node.as_deref() == Some("node-0"));
                }
            }
        }
        for a in [ip("10.0.0.1"), ip("8.8.8.8"), ip("2001:db8::1"), ip("2001:4860::1")] {
            if let Some(h) = s.next_hop(a) {
                prop_assert_eq!(s.port(h.port).map(PortConfig::mac), Some(h.src_mac));
            }
        }
        // The same input again, reusing: every ring shared, every slot kept.
        let s2 = apply(&ops, Some(&s)).expect("same input builds again");
        for (a, b) in s.services().iter().zip(s2.services()) {
            prop_assert!(Arc::ptr_eq(a.ring(Family::V4), b.ring(Family::V4)) || a.eligible_count() == 0);
            let slots = |s: &Service| s.backends().iter().map(|b| b.stats_slot).collect::<Vec<_>>();
            prop_assert_eq!(slots(a), slots(b));
        }
        for f in s.frontends() {
            prop_assert_eq!(s2.frontend(f.addr, f.port, f.proto).map(|f| f.stats_slot), Some(f.stats_slot));
        }
    }
}
