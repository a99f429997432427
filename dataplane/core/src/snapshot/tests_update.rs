//! [`Snapshot::with_services`]: only the named services change;
//! [`Snapshot::with_neighbors`] and [`Snapshot::route`]; epochs and the
//! IPv4 and IPv6 hop indices.

use std::sync::Arc;

use super::tests::{add_service, base, be, fe, ip, routed, MAC0, MAC1};
use super::*;

fn two() -> Snapshot {
    let mut b = base();
    add_service(&mut b, "default/web", "192.0.2.1", 3);
    add_service(&mut b, "default/api", "192.0.2.2", 2);
    b.build().unwrap()
}

#[test]
fn replaces_only_the_named_services() {
    let s1 = two();
    let mut x = be("10.1.0.2", 8080);
    x.weight = 5;
    let s2 = s1
        .with_services(
            8,
            vec![(
                ServiceSpec::new("default/api"),
                vec![be("10.1.0.1", 8080), x, be("10.9.0.1", 80)],
            )],
        )
        .unwrap();
    assert_eq!(s2.revision(), 8);
    assert!(Arc::ptr_eq(&s1.services()[0], &s2.services()[0]));
    let (old, new) = (&s1.services()[1], &s2.services()[1]);
    assert!(!Arc::ptr_eq(old.ring(Family::V4), new.ring(Family::V4)));
    assert_eq!(new.backends().len(), 3);
    // Slots carried for the same backends, a fresh one above all others.
    assert_eq!(new.backends()[0].stats_slot, old.backends()[0].stats_slot);
    assert_eq!(new.backends()[1].stats_slot, old.backends()[1].stats_slot);
    assert_eq!(new.backends()[2].stats_slot, s1.backend_slots());
    assert_eq!(s2.backend_slots(), s1.backend_slots() + 1);
    let (_, svc) = s2.lookup(ip("192.0.2.2"), 80, Proto::Tcp).unwrap();
    assert_eq!(svc.find_backend(ip("10.1.0.2"), 8080).unwrap().weight, 5);
    // Same eligible set: the ring is shared.
    let s3 = s2
        .with_services(
            9,
            vec![(
                ServiceSpec::new("default/api"),
                new.backends()
                    .iter()
                    .map(|b| {
                        let mut spec = BackendSpec::new(b.addr, b.port);
                        spec.weight = b.weight;
                        spec
                    })
                    .collect(),
            )],
        )
        .unwrap();
    assert!(Arc::ptr_eq(
        new.ring(Family::V4),
        s3.services()[1].ring(Family::V4)
    ));
}

#[test]
fn rechecks_the_replaced_services_frontends() {
    let mut b = SnapshotBuilder::new(1);
    b.interface(0, MAC0, "10.0.0.1/24".parse().unwrap(), None);
    add_service(&mut b, "default/web", "192.0.2.1", 1);
    let s1 = b.build().unwrap();
    let mut spec = ServiceSpec::new("default/web");
    spec.mode = ForwardMode::FullNat;
    assert!(matches!(
        s1.with_services(2, vec![(spec, vec![])]),
        Err(BuildError::NoSnatAddress { .. })
    ));
    let mut spec = ServiceSpec::new("default/web");
    spec.source_ranges = vec!["2001:db8::/32".parse().unwrap()];
    assert!(matches!(
        s1.with_services(2, vec![(spec, vec![])]),
        Err(BuildError::SourceRangeFamily { .. })
    ));
    assert_eq!(
        s1.with_services(2, vec![(ServiceSpec::new("default/nope"), vec![])])
            .unwrap_err(),
        BuildError::NotInSnapshot {
            name: "default/nope".into()
        }
    );
    let _ = fe("192.0.2.1", 80, Proto::Tcp);
    // A backend at one of the node's own addresses (interface, a VIP of
    // any service, SNAT), or at loopback: refused here as by a full build.
    let s1 = two();
    for a in [
        "10.0.0.1",
        "192.0.2.1",
        "192.0.2.2",
        "10.0.0.100",
        "2001:db8::100",
        "127.0.0.1",
        // The broadcast address of port 0's 10.0.0.1/24.
        "10.0.0.255",
    ] {
        let e = s1
            .with_services(2, vec![(ServiceSpec::new("default/api"), vec![be(a, 8080)])])
            .unwrap_err();
        assert!(matches!(e, BuildError::BackendIsLocal { .. }), "{a}: {e}");
    }
}

#[test]
fn with_neighbors_resolves_next_hops_and_the_gateway() {
    let s1 = two();
    // base(): port 0 is 10.0.0.1/24 via 10.0.0.254 and 2001:db8::1/64.
    assert_eq!(s1.next_hop(ip("10.0.0.7")), None);
    let u = s1.unresolved_hop(ip("10.0.0.7")).unwrap();
    assert_eq!((u.port, u.via), (0, ip("10.0.0.7")));
    // Off-link: the gateway is what must be resolved.
    assert_eq!(
        s1.unresolved_hop(ip("198.51.100.1")).unwrap().via,
        ip("10.0.0.254")
    );
    let mac = [2, 0, 0, 0, 0, 0x77];
    let gw = [2, 0, 0, 0, 0, 0xfe];
    let s2 = s1
        .with_neighbors(&[(ip("10.0.0.7"), mac), (ip("10.0.0.254"), gw)])
        .unwrap();
    assert_eq!(s2.revision(), s1.revision());
    assert!(Arc::ptr_eq(&s1.services()[0], &s2.services()[0]));
    assert_eq!(s2.next_hop(ip("10.0.0.7")).unwrap().dst_mac, mac);
    assert_eq!(s2.next_hop(ip("198.51.100.1")).unwrap().dst_mac, gw);
    // An empty set forgets them again.
    let s3 = s2.with_neighbors(&[]).unwrap();
    assert_eq!(s3.next_hop(ip("10.0.0.7")), None);
    // Invalid: not connected, multicast MAC, conflicting duplicates.
    assert!(matches!(
        s1.with_neighbors(&[(ip("172.31.0.1"), mac)]),
        Err(BuildError::NeighborNotConnected { .. })
    ));
    assert!(s1
        .with_neighbors(&[(ip("10.0.0.8"), [1, 0, 0, 0, 0, 1])])
        .is_err());
    assert!(s1
        .with_neighbors(&[(ip("10.0.0.8"), mac), (ip("10.0.0.8"), gw)])
        .is_err());
}

#[test]
fn route_is_the_next_hop_or_what_to_resolve() {
    // Port 0 (v4 gateway 10.0.0.254) and port 1 (IPv6 only, no gateway):
    // an IPv6 destination off both prefixes has a gateway on port 0, one
    // of a family no port has a gateway for has no route.
    let mut b = SnapshotBuilder::new(1);
    b.interface(
        0,
        MAC0,
        Cidr::new(ip("10.0.0.1"), 24).unwrap(),
        Some(ip("10.0.0.254")),
    );
    b.interface(1, MAC1, Cidr::new(ip("fd01::1"), 64).unwrap(), None);
    // Each route carries its port's MTU; port 0 has the default.
    b.mtu(1, 9000);
    let mtu = |port| if port == 1 { 9000 } else { super::DEFAULT_MTU };
    let s1 = b.build().unwrap();
    let unresolved = |port, src_mac, via: &str| {
        Some(Route::Unresolved(UnresolvedHop {
            port,
            src_mac,
            via: ip(via),
            mtu: mtu(port),
        }))
    };
    assert_eq!(s1.route(ip("10.0.0.7")), unresolved(0, MAC0, "10.0.0.7"));
    assert_eq!(s1.route(ip("198.51.100.1")), unresolved(0, MAC0, "10.0.0.254"));
    assert_eq!(s1.route(ip("fd01::7")), unresolved(1, MAC1, "fd01::7"));
    assert_eq!(s1.route(ip("2001:db8::7")), None, "no IPv6 gateway");

    let (mac, gw) = ([2, 0, 0, 0, 0, 0x77], [2, 0, 0, 0, 0, 0xfe]);
    let s2 = s1
        .with_neighbors(&[(ip("fd01::7"), mac), (ip("10.0.0.254"), gw)])
        .unwrap();
    let resolved = |port, src_mac, dst_mac| {
        Some(Route::Resolved(NextHop {
            port,
            src_mac,
            dst_mac,
            mtu: mtu(port),
        }))
    };
    assert_eq!(s2.route(ip("fd01::7")), resolved(1, MAC1, mac));
    assert_eq!(s2.route(ip("198.51.100.1")), resolved(0, MAC0, gw));
    // A connected destination is never sent to the gateway.
    assert_eq!(s2.route(ip("10.0.0.7")), unresolved(0, MAC0, "10.0.0.7"));
    let r = s2.route(ip("fd01::7")).unwrap();
    assert_eq!((r.port(), r.src_mac(), r.dst_mac()), (1, MAC1, Some(mac)));
    let r = s2.route(ip("10.0.0.7")).unwrap();
    assert_eq!((r.port(), r.src_mac(), r.dst_mac()), (0, MAC0, None));
}

#[test]
fn every_new_snapshot_has_a_new_epoch_and_a_clone_keeps_it() {
    assert_eq!(Snapshot::empty().epoch(), 0);
    assert_eq!(Snapshot::default().epoch(), 0);
    let s1 = two();
    let s2 = two();
    assert_ne!(s1.epoch(), 0);
    assert_ne!(s1.epoch(), s2.epoch());
    assert_eq!(s1.clone().epoch(), s1.epoch());
    let s3 = s1.with_neighbors(&[]).unwrap();
    let s4 = s1
        .with_services(
            8,
            vec![(ServiceSpec::new("default/api"), vec![be("10.1.0.1", 8080)])],
        )
        .unwrap();
    let mut seen = vec![s1.epoch(), s2.epoch(), s3.epoch(), s4.epoch()];
    assert!(seen.iter().all(|&e| e != 0));
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 4, "epochs are unique");
    // Failed updates hand out nothing that could be mistaken for `s1`.
    assert!(s1.with_neighbors(&[(ip("172.31.0.1"), MAC0)]).is_err());
}

#[test]
fn the_ipv4_hop_index_names_the_resolved_route() {
    let s1 = routed();
    let (mac, gw) = ([2, 0, 0, 0, 0, 0x77], [2, 0, 0, 0, 0, 0xfe]);
    let s2 = s1
        .with_neighbors(&[
            (ip("10.0.0.7"), mac),
            (ip("10.0.0.200"), mac),
            (ip("10.0.0.254"), gw),
        ])
        .unwrap();
    let s3 = s1.with_neighbors(&[]).unwrap();
    let dsts = [
        "10.0.0.7",
        "10.0.0.8",
        "10.0.0.200",
        "10.0.0.254",
        "172.16.3.3",
        "8.8.8.8",
        "198.51.100.1",
        "0.0.0.0",
        "255.255.255.255",
    ];
    for s in [&s1, &s2, &s3, &Snapshot::empty()] {
        for d in dsts {
            let IpAddr::V4(a) = ip(d) else { unreachable!() };
            let a = u32::from(a);
            let by_index = s
                .next_hop_index_v4(a)
                .map(|i| *s.hop_v4(i).expect("index in range"));
            let by_route = match s.route_v4(a) {
                Some(Route::Resolved(h)) => Some(h),
                _ => None,
            };
            assert_eq!(by_index, by_route, "{d}");
            assert_eq!(by_index, s.next_hop(ip(d)), "{d}");
        }
    }
    // The default route shares its gateway's neighbor hop when they are
    // equal; in `routed()` the gateway's neighbor entry is out of port 1
    // (longest prefix) but the default route out of port 0.
    let idx = |s: &Snapshot, d: &str| {
        let IpAddr::V4(a) = ip(d) else { unreachable!() };
        s.next_hop_index_v4(u32::from(a))
    };
    assert_ne!(idx(&s1, "8.8.8.8"), idx(&s1, "10.0.0.254"));
    let s4 = two().with_neighbors(&[(ip("10.0.0.254"), gw)]).unwrap();
    assert!(idx(&s4, "8.8.8.8").is_some());
    assert_eq!(idx(&s4, "8.8.8.8"), idx(&s4, "10.0.0.254"));
    assert_eq!(s4.hops_v4.len(), 1);
    assert!(s1.hop_v4(u32::MAX).is_none());
}

/// The IPv6 hop index, as the IPv4 one: `next_hop` of every destination
/// (neighbor, connected without an entry, behind the gateway, none) is
/// the hop the index names, on snapshots with and without the gateway's
/// entry; the default route shares its gateway's hop when they are equal
/// (here the gateway is on the default route's own port).
#[test]
fn the_ipv6_hop_index_names_the_resolved_route() {
    let s1 = routed();
    let (mac, gw) = ([2, 0, 0, 0, 0, 0x77], [2, 0, 0, 0, 0, 0xfe]);
    let s2 = s1
        .with_neighbors(&[(ip("2001:db8::7"), mac), (ip("2001:db8::fe"), gw)])
        .unwrap();
    let s3 = s1.with_neighbors(&[]).unwrap();
    let hop = |port, dst_mac| NextHop {
        port,
        src_mac: MAC0,
        dst_mac,
        mtu: super::DEFAULT_MTU,
    };
    let cases: [(&Snapshot, &str, Option<NextHop>); 9] = [
        (&s1, "2001:db8::7", Some(hop(0, super::tests::NMAC))),
        (&s1, "2001:db8::8", None),
        (&s1, "2001:db8:1::1", None),
        (&s2, "2001:db8::7", Some(hop(0, mac))),
        (&s2, "2001:db8::fe", Some(hop(0, gw))),
        (&s2, "2001:db8:1::1", Some(hop(0, gw))),
        (&s2, "2001:db8::8", None),
        (&s3, "2001:db8::7", None),
        (&Snapshot::empty(), "2001:db8::7", None),
    ];
    for (s, d, want) in cases {
        let IpAddr::V6(a) = ip(d) else { unreachable!() };
        let by_index = s
            .next_hop_index_v6(u128::from(a))
            .map(|i| *s.hop_v6(i).expect("index in range"));
        assert_eq!(by_index, want, "{d}");
        assert_eq!(s.next_hop(ip(d)), want, "{d}");
    }
    let idx = |s: &Snapshot, d: &str| {
        let IpAddr::V6(a) = ip(d) else { unreachable!() };
        s.next_hop_index_v6(u128::from(a))
    };
    assert_eq!(idx(&s2, "2001:db8:1::1"), idx(&s2, "2001:db8::fe"));
    assert_eq!(s2.hops_v6().len(), 2);
    assert!(s2.hop_v6(u32::MAX).is_none());
}

/// The IPv6 default route gets a hop of its own when its gateway's
/// neighbor hop is another: here the gateway is in a longer prefix on
/// port 1, the default route out of port 0, which configures it.
#[test]
fn the_ipv6_default_route_keeps_its_own_hop() {
    let mut b = base();
    b.interface(1, MAC1, super::tests::cidr("2001:db8::81/121"), None)
        .neighbor(ip("2001:db8::fe"), super::tests::GMAC);
    let s = b.build().unwrap();
    let idx = |d: &str| {
        let IpAddr::V6(a) = ip(d) else { unreachable!() };
        s.next_hop_index_v6(u128::from(a))
    };
    let (gw, default) = (idx("2001:db8::fe").unwrap(), idx("2001:db8:9::1").unwrap());
    assert_ne!(gw, default);
    assert_eq!(s.hops_v6().len(), 2);
    assert_eq!(s.hop_v6(gw).map(|h| (h.port, h.src_mac)), Some((1, MAC1)));
    assert_eq!(s.hop_v6(default).map(|h| (h.port, h.src_mac)), Some((0, MAC0)));
    assert_eq!(s.next_hop(ip("2001:db8:9::1")), s.hop_v6(default).copied());
}
