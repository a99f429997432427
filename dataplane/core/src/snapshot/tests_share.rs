//! Per-family rings (a dual-stack service never picks across families) and
//! whole-service sharing with `keep_service`.

use std::sync::Arc;

use super::tests::{add_service, base, be, fe, ip};
use super::*;

fn spread(k: u64) -> u64 {
    k.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

#[test]
fn dual_stack_service_picks_within_the_family() {
    let mut b = base();
    let id = b.service(ServiceSpec::new("default/web")).unwrap();
    b.frontend(id, fe("192.0.2.1", 80, Proto::Tcp)).unwrap();
    b.frontend(id, fe("2001:db8:1::1", 80, Proto::Tcp)).unwrap();
    for a in [
        "10.1.0.1",
        "10.1.0.2",
        "2001:db8:2::1",
        "2001:db8:2::2",
        "2001:db8:2::3",
    ] {
        b.backend(id, be(a, 8080)).unwrap();
    }
    let s = b.build().unwrap();
    let svc = &s.services()[0];
    assert_eq!(svc.eligible_in(Family::V4), 2);
    assert_eq!(svc.eligible_in(Family::V6), 3);
    assert_eq!(svc.eligible_count(), 5);
    let (mut v4, mut v6) = (std::collections::HashSet::new(), std::collections::HashSet::new());
    for k in 0..2000 {
        let a = svc.pick(spread(k), Family::V4).unwrap().addr;
        assert!(a.is_ipv4(), "{a}");
        v4.insert(a);
        let a = svc.pick(spread(k), Family::V6).unwrap().addr;
        assert!(a.is_ipv6(), "{a}");
        v6.insert(a);
    }
    assert_eq!(
        (v4.len(), v6.len()),
        (2, 3),
        "every backend of each family is used"
    );
    assert_eq!(Family::of(ip("::1")), Family::V6);

    // A v4-only service has an empty v6 ring: no pick, no panic.
    let mut b = base();
    add_service(&mut b, "default/v4", "192.0.2.2", 3);
    let s = b.build().unwrap();
    assert!((0..100).all(|k| s.services()[0].pick(spread(k), Family::V6).is_none()));
}

#[test]
fn changing_one_family_keeps_the_other_ring() {
    let build = |extra: bool, prev: Option<&Snapshot>| {
        let mut b = base();
        if let Some(p) = prev {
            b.reuse_from(p);
        }
        let id = b.service(ServiceSpec::new("default/web")).unwrap();
        b.frontend(id, fe("192.0.2.1", 80, Proto::Tcp)).unwrap();
        b.backend(id, be("10.1.0.1", 8080)).unwrap();
        b.backend(id, be("2001:db8:2::1", 8080)).unwrap();
        if extra {
            b.backend(id, be("2001:db8:2::2", 8080)).unwrap();
        }
        b.build().unwrap()
    };
    let s1 = build(false, None);
    let s2 = build(true, Some(&s1));
    let (a, b) = (&s1.services()[0], &s2.services()[0]);
    assert!(Arc::ptr_eq(a.ring(Family::V4), b.ring(Family::V4)));
    assert!(!Arc::ptr_eq(a.ring(Family::V6), b.ring(Family::V6)));
}

#[test]
fn kept_services_are_shared_whole() {
    let build = |prev: Option<&Snapshot>, n_web: u32| {
        let mut b = base();
        match prev {
            Some(p) => {
                b.reuse_from(p);
                let dns = p
                    .service_arc(p.service_by_name("kube-system/dns").unwrap())
                    .unwrap();
                let id = b.keep_service(dns).unwrap();
                b.frontend(id, fe("192.0.2.53", 53, Proto::Udp)).unwrap();
            }
            None => {
                add_service(&mut b, "kube-system/dns", "192.0.2.53", 2);
            }
        }
        let web = add_service(&mut b, "default/web", "192.0.2.1", n_web);
        let _ = web;
        b.build().unwrap()
    };
    let mut b = base();
    let dns = add_service(&mut b, "kube-system/dns", "192.0.2.53", 2);
    b.frontend(dns, fe("192.0.2.53", 53, Proto::Udp)).unwrap();
    add_service(&mut b, "default/web", "192.0.2.1", 3);
    let s1 = b.build().unwrap();
    let s2 = build(Some(&s1), 4);
    let dns1 = s1
        .service_arc(s1.service_by_name("kube-system/dns").unwrap())
        .unwrap();
    let dns2 = s2
        .service_arc(s2.service_by_name("kube-system/dns").unwrap())
        .unwrap();
    assert!(Arc::ptr_eq(dns1, dns2), "the kept service is the same allocation");
    let web2 = s2.service(s2.service_by_name("default/web").unwrap());
    assert_eq!(web2.backends().len(), 4);
    // Slots: the kept service's backends keep theirs; the new backend gets
    // one nobody else has.
    let mut slots: Vec<u32> = s2
        .services()
        .iter()
        .flat_map(|s| s.backends().iter().map(|b| b.stats_slot))
        .collect();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), 6);
    assert!(slots.iter().all(|&s| s < s2.backend_slots()));
    // Lookups work through the kept service.
    let (f, svc) = s2.lookup(ip("192.0.2.53"), 53, Proto::Udp).unwrap();
    assert_eq!(svc.name(), "kube-system/dns");
    assert!(svc.pick(7, Family::V4).is_some());
    assert_eq!(s2.service(f.service).name(), "kube-system/dns");
    assert_eq!(build(None, 1).services().len(), 2);

    // Adding a backend to a kept service turns it into a specified one.
    let mut b = base();
    b.reuse_from(&s2);
    let id = b.keep_service(dns2).unwrap();
    b.frontend(id, fe("192.0.2.53", 80, Proto::Tcp)).unwrap();
    b.backend(id, be("10.1.9.9", 8080)).unwrap();
    assert_eq!(
        b.keep_service(dns2).unwrap_err(),
        BuildError::DuplicateService {
            name: "kube-system/dns".into()
        }
    );
    let s3 = b.build().unwrap();
    assert_eq!(s3.services()[0].backends().len(), 3);
    assert!(!Arc::ptr_eq(&s3.services()[0], dns2));
    assert_eq!(
        s3.services()[0].backends()[..2]
            .iter()
            .map(|b| b.stats_slot)
            .collect::<Vec<_>>(),
        dns2.backends().iter().map(|b| b.stats_slot).collect::<Vec<_>>()
    );
}

#[test]
fn kept_services_are_rebuilt_for_another_node() {
    let mut b = base();
    b.local_node("a");
    let mut spec = ServiceSpec::new("default/local");
    spec.traffic_policy = TrafficPolicy::Local;
    let id = b.service(spec).unwrap();
    b.frontend(id, fe("192.0.2.1", 80, Proto::Tcp)).unwrap();
    let mut x = be("10.1.0.1", 8080);
    x.node = Some("b".into());
    b.backend(id, x).unwrap();
    let s1 = b.build().unwrap();
    assert_eq!(s1.services()[0].eligible_count(), 0);
    let mut b = base();
    b.local_node("b").reuse_from(&s1);
    let id = b.keep_service(&s1.services()[0]).unwrap();
    b.frontend(id, fe("192.0.2.1", 80, Proto::Tcp)).unwrap();
    let s2 = b.build().unwrap();
    assert_eq!(s2.services()[0].eligible_count(), 1);
}
