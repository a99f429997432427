//! Unit tests of the snapshot and builder: lookups, ring
//! eligibility, traffic policy, source ranges, next hops, owned
//! addresses, ring sharing and stable counter slots.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::maglev::client_hash;

pub(super) const MAC0: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub(super) const MAC1: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
pub(super) const NMAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];
pub(super) const GMAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xfe];

pub(super) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub(super) fn cidr(s: &str) -> Cidr {
    s.parse().unwrap()
}

/// Port 0 with v4 and v6 prefixes and gateways, SNAT addresses of both
/// families.
pub(super) fn base<'p>() -> SnapshotBuilder<'p> {
    let mut b = SnapshotBuilder::new(7);
    b.interface(0, MAC0, cidr("10.0.0.1/24"), Some(ip("10.0.0.254")))
        .interface(0, MAC0, cidr("2001:db8::1/64"), Some(ip("2001:db8::fe")))
        .snat_address(ip("10.0.0.100"))
        .snat_address(ip("2001:db8::100"));
    b
}

pub(super) fn fe(addr: &str, port: u16, proto: Proto) -> FrontendSpec {
    FrontendSpec::new(ip(addr), port, proto, FrontendKind::LoadBalancer)
}

pub(super) fn be(addr: &str, port: u16) -> BackendSpec {
    BackendSpec::new(ip(addr), port)
}

/// A service with one frontend and `n` active backends 10.1.x.y:8080.
pub(super) fn add_service(b: &mut SnapshotBuilder<'_>, name: &str, vip: &str, n: u32) -> ServiceId {
    let id = b.service(ServiceSpec::new(name)).unwrap();
    b.frontend(id, fe(vip, 80, Proto::Tcp)).unwrap();
    for i in 0..n {
        b.backend(id, be(&format!("10.1.{}.{}", i / 250, i % 250 + 1), 8080))
            .unwrap();
    }
    id
}

#[test]
fn valid_build_and_lookups() {
    let mut b = base();
    let web = add_service(&mut b, "default/web", "192.0.2.1", 3);
    b.frontend(web, fe("2001:db8:1::1", 80, Proto::Tcp)).unwrap();
    let dns = b.service(ServiceSpec::new("kube-system/dns")).unwrap();
    b.frontend(dns, fe("192.0.2.1", 80, Proto::Udp)).unwrap();
    b.backend(dns, be("2001:db8:2::53", 53)).unwrap();
    let s = b.build().unwrap();

    assert_eq!(s.revision(), 7);
    assert_eq!(s.services().len(), 2);
    assert_eq!(s.frontend_count(), 3);
    assert_eq!(s.service_by_name("default/web"), Some(web));
    assert_eq!(s.service_by_name("default/nope"), None);

    // TCP and UDP on the same address and port are different frontends.
    let (f, svc) = s.lookup(ip("192.0.2.1"), 80, Proto::Tcp).unwrap();
    assert_eq!((f.service, svc.name()), (web, "default/web"));
    assert_eq!(f.kind, FrontendKind::LoadBalancer);
    let (f, svc) = s.lookup(ip("192.0.2.1"), 80, Proto::Udp).unwrap();
    assert_eq!((f.service, svc.name()), (dns, "kube-system/dns"));
    let f6 = s.frontend(ip("2001:db8:1::1"), 80, Proto::Tcp).unwrap();
    assert_eq!(s.service(f6.service).name(), "default/web");
    assert!(s.frontend(ip("192.0.2.1"), 81, Proto::Tcp).is_none());
    assert!(s.frontend(ip("192.0.2.2"), 80, Proto::Tcp).is_none());
    assert!(s.frontend(ip("2001:db8:1::2"), 80, Proto::Tcp).is_none());

    let svc = s.service(web);
    assert_eq!(svc.backends().len(), 3);
    assert_eq!(svc.eligible_count(), 3);
    assert_eq!(svc.ring(Family::V4).size(), ring_size_for(3, DEFAULT_RING_SIZE));
    for h in [0u64, 1, u64::MAX / 3, u64::MAX] {
        let picked = svc.pick(h, Family::V4).unwrap();
        assert!(svc.backends().contains(picked));
        assert_eq!(svc.pick(h, Family::V4), Some(picked), "deterministic");
    }
    assert_eq!(
        svc.find_backend(ip("10.1.0.2"), 8080).unwrap().addr,
        ip("10.1.0.2")
    );
    assert!(svc.find_backend(ip("10.1.0.2"), 8081).is_none());
    assert!(s.backend(dns, ip("2001:db8:2::53"), 53).is_some());
    assert!(s.get_service(ServiceId(9)).is_none());
    // Dense automatic slots.
    let mut fs: Vec<u32> = s.frontends().map(|f| f.stats_slot).collect();
    fs.sort_unstable();
    assert_eq!(fs, vec![0, 1, 2]);
    assert_eq!((s.frontend_slots(), s.backend_slots()), (3, 4));
}

#[test]
fn empty_snapshot_misses_everything() {
    let s = Snapshot::empty();
    assert_eq!(s.revision(), 0);
    assert!(s.frontend(ip("1.2.3.4"), 80, Proto::Tcp).is_none());
    assert!(!s.is_owned(ip("1.2.3.4")));
    assert!(s.next_hop(ip("1.2.3.4")).is_none());
    assert!(s.port(0).is_none());
}

#[test]
fn snapshot_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Snapshot>();
    assert_send_sync::<Arc<Snapshot>>();
}

#[test]
fn only_active_weighted_backends_get_slots() {
    let mut b = base();
    let a = b.service(ServiceSpec::new("default/a")).unwrap();
    let states = [
        BackendState::Active,
        BackendState::Terminating,
        BackendState::Quarantined,
        BackendState::Maintenance,
    ];
    for (i, st) in states.into_iter().enumerate() {
        b.backend(
            a,
            BackendSpec {
                state: st,
                ..be(&format!("10.1.0.{}", i + 1), 80)
            },
        )
        .unwrap();
    }
    b.backend(
        a,
        BackendSpec {
            weight: 0,
            ..be("10.1.0.9", 80)
        },
    )
    .unwrap();
    b.backend(a, be("10.1.0.8", 80)).unwrap();
    let drain = b.service(ServiceSpec::new("default/drain")).unwrap();
    for i in 1..=3 {
        b.backend(
            drain,
            BackendSpec {
                state: BackendState::Terminating,
                ..be(&format!("10.2.0.{i}"), 80)
            },
        )
        .unwrap();
    }
    let s = b.build().unwrap();
    let svc = s.service(a);
    assert_eq!(svc.backends().len(), 6, "every backend stays listed");
    assert_eq!(svc.eligible_count(), 2);
    let mut seen = std::collections::BTreeSet::new();
    for k in 0..2000u64 {
        seen.insert(
            svc.pick(k.wrapping_mul(0x9e37_79b9_7f4a_7c15), Family::V4)
                .unwrap()
                .addr,
        );
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        vec![ip("10.1.0.1"), ip("10.1.0.8")]
    );
    let svc = s.service(drain);
    assert_eq!(svc.eligible_count(), 0);
    assert!((0..100u64).all(|k| svc.pick(k << 58, Family::V4).is_none()));
    // Terminating backends can still be found for attribution.
    assert_eq!(
        svc.find_backend(ip("10.2.0.2"), 80).unwrap().state,
        BackendState::Terminating
    );
}

fn local_policy_snapshot(local: Option<&str>) -> Snapshot {
    let mut b = base();
    if let Some(n) = local {
        b.local_node(n);
    }
    let mut spec = ServiceSpec::new("default/local");
    spec.traffic_policy = TrafficPolicy::Local;
    let a = b.service(spec).unwrap();
    for (i, node) in [Some("node-a"), Some("node-b"), None, Some("node-a")]
        .into_iter()
        .enumerate()
    {
        b.backend(
            a,
            BackendSpec {
                node: node.map(String::from),
                zone: Some("z1".into()),
                ..be(&format!("10.1.0.{}", i + 1), 80)
            },
        )
        .unwrap();
    }
    b.build().unwrap()
}

#[test]
fn local_traffic_policy_uses_only_local_backends() {
    let s = local_policy_snapshot(Some("node-a"));
    assert_eq!(s.local_node(), Some("node-a"));
    let svc = &s.services()[0];
    assert_eq!(svc.traffic_policy(), TrafficPolicy::Local);
    assert_eq!(svc.eligible_count(), 2);
    for k in 0..500u64 {
        let b = svc
            .pick(k.wrapping_mul(0x9e37_79b9_7f4a_7c15), Family::V4)
            .unwrap();
        assert_eq!(b.node.as_deref(), Some("node-a"));
    }
    let s = local_policy_snapshot(Some("node-c"));
    assert!(s.services()[0].pick(42, Family::V4).is_none());
    let s = local_policy_snapshot(None);
    assert!(s.services()[0].pick(42, Family::V4).is_none());
}

#[test]
fn source_ranges_allow_and_deny() {
    let mut b = base();
    let mut spec = ServiceSpec::new("default/a");
    spec.source_ranges = vec![
        cidr("10.0.0.0/8"),
        cidr("192.168.1.0/24"),
        cidr("2001:db8:aa::/48"),
    ];
    let a = b.service(spec).unwrap();
    b.frontend(a, fe("192.0.2.1", 80, Proto::Tcp)).unwrap();
    b.frontend(a, fe("2001:db8:1::1", 80, Proto::Tcp)).unwrap();
    let open = b.service(ServiceSpec::new("default/open")).unwrap();
    let s = b.build().unwrap();
    let svc = s.service(a);
    for ok in ["10.200.0.1", "192.168.1.77", "2001:db8:aa:1::5"] {
        assert!(svc.allows_source(ip(ok)), "{ok}");
    }
    for no in ["11.0.0.1", "192.168.2.1", "2001:db8:ab::1", "::ffff:10.0.0.1"] {
        assert!(!svc.allows_source(ip(no)), "{no}");
    }
    assert!(s.service(open).allows_source(ip("203.0.113.9")));
    assert!(s.service(open).allows_source(ip("2001:db8::9")));
}

#[test]
fn client_ip_affinity_hashes_the_client() {
    let mut b = base();
    let mut spec = ServiceSpec::new("default/sticky");
    spec.affinity = SessionAffinity::ClientIp {
        timeout: Duration::from_secs(10800),
    };
    let a = b.service(spec).unwrap();
    let plain = add_service(&mut b, "default/plain", "192.0.2.9", 2);
    let s = b.build().unwrap();
    let c = ip("198.51.100.7");
    for svc in [a, plain] {
        let svc = s.service(svc);
        let by_hash = svc.pick(client_hash(c), Family::V4).map(|b| b.addr);
        assert_eq!(svc.pick_for_client(c, Family::V4).map(|b| b.addr), by_hash);
    }
    assert!(s.service(plain).pick_for_client(c, Family::V4).is_some());
}

pub(super) fn routed() -> Snapshot {
    let mut b = base();
    b.interface(1, MAC1, cidr("10.0.0.129/25"), None)
        .interface(1, MAC1, cidr("172.16.0.1/16"), None)
        .neighbor(ip("10.0.0.7"), NMAC)
        .neighbor(ip("10.0.0.200"), NMAC)
        .neighbor(ip("10.0.0.254"), GMAC)
        .neighbor(ip("2001:db8::7"), NMAC);
    b.build().unwrap()
}

#[test]
fn next_hop_connected_gateway_and_unknown() {
    let s = routed();
    let hop = |port, src_mac, dst_mac| {
        Some(NextHop {
            port,
            src_mac,
            dst_mac,
            mtu: super::DEFAULT_MTU,
        })
    };
    assert_eq!(s.next_hop(ip("10.0.0.7")), hop(0, MAC0, NMAC));
    // 10.0.0.200 is in both 10.0.0.0/24 (port 0) and 10.0.0.128/25 (port
    // 1): the longer prefix wins.
    assert_eq!(s.next_hop(ip("10.0.0.200")), hop(1, MAC1, NMAC));
    assert_eq!(s.next_hop(ip("2001:db8::7")), hop(0, MAC0, NMAC));
    // Off-link: via the gateway's neighbor entry, out of the port the
    // gateway is configured on (even though port 1's /25 holds it too).
    assert_eq!(s.next_hop(ip("8.8.8.8")), hop(0, MAC0, GMAC));
    assert_eq!(s.next_hop(ip("10.0.0.254")), hop(1, MAC1, GMAC));
    // Connected but unknown: not via the gateway.
    assert_eq!(s.next_hop(ip("10.0.0.8")), None);
    assert_eq!(s.next_hop(ip("172.16.3.3")), None);
    // IPv6 gateway without a neighbor entry: no route.
    assert_eq!(s.next_hop(ip("2001:4860::8888")), None);
    assert_eq!(s.connected_port(ip("10.0.0.200")), Some(1));
    assert_eq!(s.port(1).unwrap().cidrs().len(), 2);
    assert_eq!(
        s.port(0).unwrap().gateway_v4(),
        Some("10.0.0.254".parse().unwrap())
    );
    assert_eq!(s.port_count(), 2);
}

#[test]
fn owned_addresses() {
    let mut b = base();
    b.interface(1, MAC1, cidr("172.16.0.1/16"), None);
    add_service(&mut b, "default/a", "192.0.2.1", 1);
    // A NodePort VIP on the interface address: both kinds.
    let np = b.service(ServiceSpec::new("default/np")).unwrap();
    b.frontend(
        np,
        FrontendSpec::new(ip("10.0.0.1"), 30080, Proto::Tcp, FrontendKind::NodePort),
    )
    .unwrap();
    let s = b.build().unwrap();
    assert_eq!(s.owner_kind(ip("192.0.2.1")), Some(OwnerKind::VIP));
    assert_eq!(s.owner_kind(ip("10.0.0.100")), Some(OwnerKind::SNAT));
    assert_eq!(s.owner_kind(ip("2001:db8::100")), Some(OwnerKind::SNAT));
    assert_eq!(s.owner_kind(ip("2001:db8::1")), Some(OwnerKind::INTERFACE));
    let both = s.owner_kind(ip("10.0.0.1")).unwrap();
    assert!(both.contains(OwnerKind::INTERFACE) && both.contains(OwnerKind::VIP));
    assert!(!both.contains(OwnerKind::SNAT));
    assert!(s.is_owned(ip("172.16.0.1")));
    assert!(!s.is_owned(ip("10.0.0.2")));
    assert!(!s.is_owned(ip("2001:db8::2")));
    assert_eq!(
        s.snat_v4(),
        &["10.0.0.100".parse::<std::net::Ipv4Addr>().unwrap()]
    );
    assert_eq!(s.snat_v6().len(), 1);
    // Each port answers for its own interface addresses, VIPs and SNAT.
    let l0 = s.port(0).unwrap().local_addrs();
    let l1 = s.port(1).unwrap().local_addrs();
    assert_eq!(l0.mac().0, MAC0);
    for a in [
        "10.0.0.1",
        "192.0.2.1",
        "10.0.0.100",
        "2001:db8::100",
        "2001:db8::1",
    ] {
        assert!(l0.owns(ip(a)), "{a}");
    }
    assert!(!l0.owns(ip("172.16.0.1")));
    assert!(l1.owns(ip("172.16.0.1")) && l1.owns(ip("192.0.2.1")) && !l1.owns(ip("2001:db8::1")));
    // The node port's address is port 0's interface address: port 1 does
    // not answer for it.
    assert!(!l1.owns(ip("10.0.0.1")));
    // Nor does port 0 for an SNAT address that is port 1's own.
    let mut b = base();
    b.interface(1, MAC1, cidr("172.16.0.1/16"), None)
        .snat_address(ip("172.16.0.1"));
    let s = b.build().unwrap();
    let (l0, l1) = (s.port(0).unwrap().local_addrs(), s.port(1).unwrap().local_addrs());
    assert!(l1.owns(ip("172.16.0.1")) && !l0.owns(ip("172.16.0.1")));
    assert!(l0.owns(ip("10.0.0.100")) && l1.owns(ip("10.0.0.100")));
}

/// Two services; returns the builder's snapshot.
fn two_services(prev: Option<&Snapshot>, a_backends: &[&str], b_weight: u32) -> Snapshot {
    let mut b = base();
    if let Some(p) = prev {
        b.reuse_from(p);
    }
    let a = b.service(ServiceSpec::new("default/a")).unwrap();
    b.frontend(a, fe("192.0.2.1", 80, Proto::Tcp)).unwrap();
    for addr in a_backends {
        b.backend(a, be(addr, 80)).unwrap();
    }
    let s2 = b.service(ServiceSpec::new("default/b")).unwrap();
    b.frontend(s2, fe("192.0.2.2", 80, Proto::Tcp)).unwrap();
    b.backend(s2, be("10.3.0.1", 80)).unwrap();
    b.backend(
        s2,
        BackendSpec {
            weight: b_weight,
            ..be("10.3.0.2", 80)
        },
    )
    .unwrap();
    b.build().unwrap()
}

fn ring_of<'s>(s: &'s Snapshot, name: &str) -> &'s Arc<MaglevRing> {
    s.service(s.service_by_name(name).unwrap()).ring(Family::V4)
}

#[test]
fn reuse_from_shares_unchanged_rings() {
    let s1 = two_services(None, &["10.2.0.1", "10.2.0.2"], 1);
    // Same eligible set, listed in another order: shared.
    let s2 = two_services(Some(&s1), &["10.2.0.2", "10.2.0.1"], 1);
    assert!(Arc::ptr_eq(ring_of(&s1, "default/a"), ring_of(&s2, "default/a")));
    assert!(Arc::ptr_eq(ring_of(&s1, "default/b"), ring_of(&s2, "default/b")));
    for k in 0..200u64 {
        let h = k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        assert_eq!(
            s1.services()[0].pick(h, Family::V4).unwrap().addr,
            s2.services()[0].pick(h, Family::V4).unwrap().addr
        );
    }
    // A backend added to a: a rebuilt, b shared.
    let s3 = two_services(Some(&s2), &["10.2.0.2", "10.2.0.1", "10.2.0.3"], 1);
    assert!(!Arc::ptr_eq(ring_of(&s2, "default/a"), ring_of(&s3, "default/a")));
    assert!(Arc::ptr_eq(ring_of(&s2, "default/b"), ring_of(&s3, "default/b")));
    // A weight change in b: b rebuilt.
    let s4 = two_services(Some(&s3), &["10.2.0.2", "10.2.0.1", "10.2.0.3"], 2);
    assert!(Arc::ptr_eq(ring_of(&s3, "default/a"), ring_of(&s4, "default/a")));
    assert!(!Arc::ptr_eq(ring_of(&s3, "default/b"), ring_of(&s4, "default/b")));
    // A non-eligible backend added: still shared, and picks stay right.
    let mut b = base();
    b.reuse_from(&s4);
    let a = b.service(ServiceSpec::new("default/a")).unwrap();
    b.backend(
        a,
        BackendSpec {
            state: BackendState::Maintenance,
            ..be("10.2.0.0", 80)
        },
    )
    .unwrap();
    for addr in ["10.2.0.3", "10.2.0.1", "10.2.0.2"] {
        b.backend(a, be(addr, 80)).unwrap();
    }
    let s5 = b.build().unwrap();
    assert!(Arc::ptr_eq(ring_of(&s4, "default/a"), ring_of(&s5, "default/a")));
    for k in 0..200u64 {
        let h = k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        assert_eq!(
            s4.services()[0].pick(h, Family::V4).unwrap().addr,
            s5.services()[0].pick(h, Family::V4).unwrap().addr
        );
    }
    // A different max ring size: rebuilt.
    let mut b = base();
    b.reuse_from(&s5).max_ring_size(251);
    add_service(&mut b, "default/a", "192.0.2.1", 3);
    let s6 = b.build().unwrap();
    assert_eq!(s6.services()[0].ring(Family::V4).size(), 251);
}

#[test]
fn stats_slots_are_stable_across_rebuilds() {
    let s1 = two_services(None, &["10.2.0.1", "10.2.0.2", "10.2.0.3"], 1);
    let slot = |s: &Snapshot, svc: &str, addr: &str| {
        s.backend(s.service_by_name(svc).unwrap(), ip(addr), 80)
            .unwrap()
            .stats_slot
    };
    let fslot = |s: &Snapshot, vip: &str| s.frontend(ip(vip), 80, Proto::Tcp).unwrap().stats_slot;
    // Remove 10.2.0.2, add 10.2.0.4 first in the list.
    let s2 = two_services(Some(&s1), &["10.2.0.4", "10.2.0.1", "10.2.0.3"], 1);
    for addr in ["10.2.0.1", "10.2.0.3"] {
        assert_eq!(slot(&s1, "default/a", addr), slot(&s2, "default/a", addr));
    }
    for addr in ["10.3.0.1", "10.3.0.2"] {
        assert_eq!(slot(&s1, "default/b", addr), slot(&s2, "default/b", addr));
    }
    // The new backend reuses the freed slot rather than growing the array.
    assert_eq!(
        slot(&s2, "default/a", "10.2.0.4"),
        slot(&s1, "default/a", "10.2.0.2")
    );
    assert_eq!(s2.backend_slots(), s1.backend_slots());
    assert_eq!(fslot(&s1, "192.0.2.1"), fslot(&s2, "192.0.2.1"));
    assert_eq!(fslot(&s1, "192.0.2.2"), fslot(&s2, "192.0.2.2"));

    // Explicit slots are used as is; a carried slot taken by an explicit
    // one moves to the lowest free slot.
    let taken = fslot(&s2, "192.0.2.2");
    let mut b = base();
    b.reuse_from(&s2);
    let a = b.service(ServiceSpec::new("default/a")).unwrap();
    let spec = FrontendSpec {
        stats_slot: Some(taken),
        ..fe("192.0.2.1", 80, Proto::Tcp)
    };
    b.frontend(a, spec).unwrap();
    let c = b.service(ServiceSpec::new("default/b")).unwrap();
    b.frontend(c, fe("192.0.2.2", 80, Proto::Tcp)).unwrap();
    b.backend(
        c,
        BackendSpec {
            stats_slot: Some(1000),
            ..be("10.3.0.1", 80)
        },
    )
    .unwrap();
    let s3 = b.build().unwrap();
    assert_eq!(fslot(&s3, "192.0.2.1"), taken);
    assert_ne!(fslot(&s3, "192.0.2.2"), taken);
    assert_eq!(slot(&s3, "default/b", "10.3.0.1"), 1000);
    assert_eq!(s3.backend_slots(), 1001);

    // A frontend that moved to another service gets a new slot.
    let mut b = base();
    b.reuse_from(&s1);
    let other = b.service(ServiceSpec::new("other/x")).unwrap();
    b.frontend(other, fe("192.0.2.5", 80, Proto::Tcp)).unwrap();
    b.frontend(other, fe("192.0.2.2", 80, Proto::Tcp)).unwrap();
    let keep = b.service(ServiceSpec::new("default/a")).unwrap();
    b.frontend(keep, fe("192.0.2.1", 80, Proto::Tcp)).unwrap();
    let s4 = b.build().unwrap();
    assert_eq!(fslot(&s4, "192.0.2.1"), fslot(&s1, "192.0.2.1"));
    // Not carried: slots go in insertion order after the carried one.
    assert_eq!(fslot(&s1, "192.0.2.2"), 1);
    assert_eq!((fslot(&s4, "192.0.2.5"), fslot(&s4, "192.0.2.2")), (1, 2));
}

use crate::maglev::{ring_size_for, MaglevRing, DEFAULT_RING_SIZE};
