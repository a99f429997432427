//! Next hops: a packet whose next hop (backend, client or gateway) is not
//! resolved yet is `Resolve`, translated, with its hop to ask for; no route
//! at all is a counted drop before any rewrite, and a new connection to a
//! backend nothing routes to opens nothing.

use super::*;

#[test]
fn unresolved_next_hop_is_resolve_with_the_frame_translated() {
    let snap = snapshot().with_neighbors(&[]).unwrap();
    let mut w = worker(1, 0);
    let mut f = tcp4(("10.0.0.2", 5000), ("10.0.0.100", 80), "S", 64, b"");
    let v = run(&mut w, &snap, 0, &mut f, 0);
    let Verdict::Resolve { port, len, via } = v else {
        panic!("expected Resolve, got {v:?}")
    };
    assert_eq!(port, 1);
    assert_eq!(len, f.len());
    let p = wire::parse(&f).unwrap();
    assert_eq!(via, p.dst, "the backend is on a connected subnet");
    assert_eq!(f[..6], [0; 6], "destination MAC left for the shell");
    assert_eq!(f[6..12], snap.port(1).unwrap().mac());
    assert_eq!(
        w.conntrack().len(),
        1,
        "the connection is tracked as for Transmit"
    );
    assert_eq!(w.counters().total_drops(), 0);
}

/// The backends' neighbor entries only: clients and the gateway unresolved.
pub(super) fn backends_resolved() -> Snapshot {
    let backends: Vec<(IpAddr, [u8; 6])> = (11..=13)
        .flat_map(|i| {
            [
                (v4(&format!("10.1.0.{i}")), BACKEND_MAC),
                (v4(&format!("fd01::{i}")), BACKEND_MAC),
            ]
        })
        .collect();
    snapshot().with_neighbors(&backends).unwrap()
}

#[test]
fn reply_via_an_unresolved_gateway_is_resolve_then_transmit() {
    let snap = backends_resolved();
    let mut w = worker(1, 0);
    let mut q = udp4(("172.16.0.9", 5353), ("10.0.0.101", 53), b"query");
    assert!(matches!(
        run(&mut w, &snap, 0, &mut q, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    let backend = wire::parse(&q).unwrap().dst.to_string();
    let answer = udp4((&backend, 53), ("172.16.0.9", 5353), b"answer");
    let mut reply = answer.clone();
    assert_eq!(
        run(&mut w, &snap, 1, &mut reply, 1),
        Verdict::Resolve {
            port: 0,
            len: reply.len(),
            via: v4("10.0.0.254")
        },
        "off-link: the gateway is what to resolve"
    );
    let r = wire::parse(&reply).unwrap();
    assert_eq!((r.src, r.src_port), (v4("10.0.0.101"), 53));
    assert_checksums(&reply);
    assert_eq!((&reply[..6], &reply[6..12]), (&[0u8; 6][..], &MAC0[..]));
    let id = w.conntrack().lookup(&key_of(&q)).unwrap().0;
    assert_eq!(
        w.conntrack().state(id),
        Some(ConnState::UdpAnswered),
        "the reply counts as seen, as for Transmit"
    );
    // Once the gateway is resolved, the next reply goes out directly,
    // byte for byte what the held one becomes with the MAC written in.
    let mut neighbors = vec![(v4("10.0.0.254"), ROUTER_MAC)];
    neighbors.extend((11..=13).map(|i| (v4(&format!("10.1.0.{i}")), BACKEND_MAC)));
    let snap = snap.with_neighbors(&neighbors).unwrap();
    let mut again = answer;
    assert_eq!(
        run(&mut w, &snap, 2, &mut again, 1),
        Verdict::Transmit {
            port: 0,
            len: again.len()
        }
    );
    reply[..6].copy_from_slice(&ROUTER_MAC);
    assert_eq!(again, reply);
    assert_eq!(w.counters().total_drops(), 0);
}

#[test]
fn no_route_is_a_counted_drop_before_any_rewrite() {
    // No IPv6 gateway: a client off fd00::/64 cannot be answered.
    let snap = snapshot();
    let mut w = worker(1, 0);
    let mut syn = tcp6(("fd99::9", 40000), ("fd00::100", 80), "S", b"");
    assert!(matches!(
        run(&mut w, &snap, 0, &mut syn, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    let p = wire::parse(&syn).unwrap();
    let mut sa = tcp6(
        (&p.dst.to_string(), p.dst_port),
        (&p.src.to_string(), p.src_port),
        "SA",
        b"",
    );
    let before = sa.clone();
    assert_eq!(
        run(&mut w, &snap, 1, &mut sa, 1),
        Verdict::Drop(DropReason::NoRoute)
    );
    assert_eq!(sa, before, "dropped frames are not rewritten");
    assert_eq!(w.counters().drops_of(DropReason::NoRoute), 1);
    assert_eq!(w.counters().drops_of(DropReason::NoNeighbor), 0);
}

/// A new connection to a backend nothing routes to (no IPv6 gateway, not
/// on a connected prefix) is dropped before it takes an entry or a SNAT
/// port, full-NAT or DNAT.
#[test]
fn no_route_to_the_backend_opens_nothing() {
    let snap = snapshot_with(|b| {
        for (name, vip, mode) in [
            ("default/lost", "fd00::200", ForwardMode::FullNat),
            ("default/lostd", "fd00::201", ForwardMode::Dnat),
        ] {
            let mut spec = ServiceSpec::new(name);
            spec.mode = mode;
            let s = b.service(spec).unwrap();
            b.frontend(
                s,
                FrontendSpec::new(v4(vip), 80, Proto::Tcp, FrontendKind::LoadBalancer),
            )
            .unwrap();
            b.backend(s, BackendSpec::new(v4("fd99::1"), 8080)).unwrap();
        }
    });
    let mut w = worker(1, 0);
    let snat = v4("fd01::100");
    let free = w.snat_ports().available(snat, Proto::Tcp);
    for vip in ["fd00::200", "fd00::201"] {
        let mut syn = tcp6(("fd00::2", 40000), (vip, 80), "S", b"");
        let before = syn.clone();
        assert_eq!(
            run(&mut w, &snap, 0, &mut syn, 0),
            Verdict::Drop(DropReason::NoRoute)
        );
        assert_eq!(syn, before, "dropped frames are not rewritten");
    }
    assert_eq!(w.counters().drops_of(DropReason::NoRoute), 2);
    assert_eq!(w.conntrack().len(), 0);
    assert_eq!(w.snat_ports().available(snat, Proto::Tcp), free);
    assert_eq!(w.counters().new_connections.get(), 0);
}
