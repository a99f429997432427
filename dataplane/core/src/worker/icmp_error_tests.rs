//! ICMP errors that quote a tracked connection: translated towards the
//! client or the backend (outer and quoted headers), never passed on when
//! forged or advice for lbd, leaving the connection's state and timer as
//! they are, and held like any frame when the next hop is unresolved.

use etherparse::icmpv4::DestUnreachableHeader;

use super::route_tests::backends_resolved;
use super::*;

/// An ICMPv4 destination unreachable of `kind` from `src` to `dst` in a
/// frame between `macs`, quoting `quote`.
fn icmp4_error(
    macs: ([u8; 6], [u8; 6]),
    src: [u8; 4],
    dst: [u8; 4],
    kind: DestUnreachableHeader,
    quote: &[u8],
) -> Vec<u8> {
    let mut err = Vec::new();
    etherparse::PacketBuilder::ethernet2(macs.0, macs.1)
        .ipv4(src, dst, 64)
        .icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(kind))
        .write(&mut err, quote)
        .unwrap();
    err
}

/// [`icmp4_error`] "fragmentation needed", next-hop MTU 1,400.
fn frag_needed4(macs: ([u8; 6], [u8; 6]), src: [u8; 4], dst: [u8; 4], quote: &[u8]) -> Vec<u8> {
    icmp4_error(
        macs,
        src,
        dst,
        DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1400 },
        quote,
    )
}

/// An ICMPv6 packet too big (MTU 1,400) from `src` to `dst` in a frame
/// between `macs`, quoting `quote`.
fn too_big6(macs: ([u8; 6], [u8; 6]), src: [u8; 16], dst: [u8; 16], quote: &[u8]) -> Vec<u8> {
    let mut err = Vec::new();
    etherparse::PacketBuilder::ethernet2(macs.0, macs.1)
        .ipv6(src, dst, 64)
        .icmpv6(etherparse::Icmpv6Type::PacketTooBig { mtu: 1400 })
        .write(&mut err, quote)
        .unwrap();
    err
}

/// An ICMP "fragmentation needed" from a router on the backend side,
/// quoting a full-NAT'ed segment, reaches the client with the VIP and the
/// client's own ports in the quote.
#[test]
fn icmp_frag_needed_reaches_the_client_translated() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    let mut syn = tcp4(("10.0.0.2", 40000), ("10.0.0.100", 80), "S", 64, b"");
    run(&mut w, &snap, 0, &mut syn, 0);
    let sent = wire::parse(&syn).unwrap();
    // The quote: the translated packet's IP header and first 8 L4 bytes.
    let ip_and_8 = &syn[14..14 + 20 + 8];
    let mut err = frag_needed4((BACKEND_MAC, MAC1), [10, 1, 0, 254], [10, 1, 0, 100], ip_and_8);
    assert!(
        matches!(
            run(&mut w, &snap, 5, &mut err, 1),
            Verdict::Transmit { port: 0, .. }
        ),
        "{:?}",
        w.counters().nonzero_drops().collect::<Vec<_>>()
    );
    let p = wire::parse(&err).unwrap();
    assert_eq!(p.dst, v4("10.0.0.2"));
    assert_checksums(&err);
    let q = p.quoted(&err).unwrap();
    assert_eq!(
        (q.src, q.src_port, q.dst, q.dst_port),
        (v4("10.0.0.2"), 40000, v4("10.0.0.100"), 80)
    );
    assert_ne!(sent.src, q.src);
    // An error quoting nothing tracked is dropped with its reason.
    let mut stray = Vec::new();
    let fake = tcp4(("10.1.0.100", 1234), ("10.1.0.11", 8080), "S", 64, b"");
    etherparse::PacketBuilder::ethernet2(BACKEND_MAC, MAC1)
        .ipv4([10, 1, 0, 254], [10, 1, 0, 100], 64)
        .icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::Host,
        ))
        .write(&mut stray, &fake[14..14 + 28])
        .unwrap();
    assert_eq!(
        run(&mut w, &snap, 5, &mut stray, 1),
        Verdict::Drop(DropReason::IcmpErrorUntracked)
    );
    let _ = ROUTER_MAC;
}

/// An error from a source no router reports from (loopback, a group, 0/8,
/// a connected prefix's broadcast address) is `martian_source`, whatever
/// it quotes; from a router, the same error is translated.
#[test]
fn icmp_errors_from_martian_sources_are_dropped() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    let mut syn = tcp4(("10.0.0.2", 40000), ("10.0.0.100", 80), "S", 64, b"");
    run(&mut w, &snap, 0, &mut syn, 0);
    let ip_and_8 = syn[14..14 + 20 + 8].to_vec();
    let frag_needed = DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1400 };
    for src in [
        [127, 0, 0, 1],
        [224, 0, 0, 1],
        [0, 1, 2, 3],
        [10, 1, 0, 255],
        [10, 0, 0, 255],
    ] {
        let mut err = icmp4_error(
            (BACKEND_MAC, MAC1),
            src,
            [10, 1, 0, 100],
            frag_needed.clone(),
            &ip_and_8,
        );
        assert_eq!(
            run(&mut w, &snap, 5, &mut err, 1),
            Verdict::Drop(DropReason::MartianSource),
            "{src:?}"
        );
    }
    let mut err = icmp4_error(
        (BACKEND_MAC, MAC1),
        [10, 1, 0, 254],
        [10, 1, 0, 100],
        frag_needed.clone(),
        &ip_and_8,
    );
    assert!(matches!(
        run(&mut w, &snap, 5, &mut err, 1),
        Verdict::Transmit { port: 0, .. }
    ));
    let mut quote6 = tcp6(("fd00::2", 40000), ("fd00::100", 80), "S", b"");
    run(&mut w, &snap, 0, &mut quote6, 0);
    let quote6 = quote6[14..14 + 40 + 8].to_vec();
    for src in ["::1", "ff02::1", "::ffff:10.1.0.254"] {
        let src: Ipv6Addr = src.parse().unwrap();
        let mut err = too_big6((BACKEND_MAC, MAC1), src.octets(), v6o("fd01::100"), &quote6);
        assert_eq!(
            run(&mut w, &snap, 5, &mut err, 1),
            Verdict::Drop(DropReason::MartianSource),
            "{src}"
        );
    }
    let mut err = too_big6((BACKEND_MAC, MAC1), v6o("fd01::fe"), v6o("fd01::100"), &quote6);
    assert!(matches!(
        run(&mut w, &snap, 5, &mut err, 1),
        Verdict::Transmit { port: 0, .. }
    ));
    assert_eq!(w.counters().drops_of(DropReason::MartianSource), 8);
}

fn v6o(a: &str) -> [u8; 16] {
    a.parse::<Ipv6Addr>().unwrap().octets()
}

/// Errors that quote a tracked connection but must not reach its far end:
/// one addressed to anyone but the quoted packet's source (forged: a real
/// one goes to the sender), a redirect or source quench (advice for lbd,
/// the router that forwarded the packet), a quoted non-first fragment.
#[test]
fn icmp_errors_not_passed_on() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    let mut syn = tcp4(("10.0.0.2", 40000), ("10.0.0.100", 80), "S", 64, b"");
    run(&mut w, &snap, 0, &mut syn, 0);
    let ip_and_8 = syn[14..14 + 20 + 8].to_vec();
    let error = |to: [u8; 4], t: etherparse::Icmpv4Type, quote: &[u8]| {
        let mut err = Vec::new();
        etherparse::PacketBuilder::ethernet2(BACKEND_MAC, MAC1)
            .ipv4([10, 1, 0, 254], to, 64)
            .icmpv4(t)
            .write(&mut err, quote)
            .unwrap();
        err
    };
    let frag_needed = || {
        etherparse::Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1400 },
        )
    };
    // To the VIP instead of the SNAT address the segment came from.
    let mut forged = error([10, 0, 0, 100], frag_needed(), &ip_and_8);
    assert_eq!(
        run(&mut w, &snap, 5, &mut forged, 1),
        Verdict::Drop(DropReason::IcmpErrorUntracked)
    );
    let redirect = etherparse::Icmpv4Type::Redirect(etherparse::icmpv4::RedirectHeader {
        code: etherparse::icmpv4::RedirectCode::RedirectForHost,
        gateway_internet_address: [10, 1, 0, 253],
    });
    let mut r = error([10, 1, 0, 100], redirect, &ip_and_8);
    assert_eq!(
        run(&mut w, &snap, 5, &mut r, 1),
        Verdict::Drop(DropReason::IcmpNotTranslated)
    );
    let mut quench = error([10, 1, 0, 100], frag_needed(), &ip_and_8);
    let icmp = 14 + 20;
    quench[icmp] = wire::icmpv4::msg_type::SOURCE_QUENCH;
    quench[icmp + 1] = 0;
    quench[icmp + 2..icmp + 4].fill(0);
    let c = checksum::checksum(&quench[icmp..]);
    quench[icmp + 2..icmp + 4].copy_from_slice(&c.to_be_bytes());
    assert_eq!(
        run(&mut w, &snap, 5, &mut quench, 1),
        Verdict::Drop(DropReason::IcmpNotTranslated)
    );
    // The quote made a later fragment (offset 8 bytes), checksum fixed.
    let mut frag = ip_and_8.clone();
    frag[6..8].copy_from_slice(&1u16.to_be_bytes());
    frag[10..12].fill(0);
    let c = checksum::checksum(&frag[..20]);
    frag[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = error([10, 1, 0, 100], frag_needed(), &frag);
    assert_eq!(
        run(&mut w, &snap, 5, &mut f, 1),
        Verdict::Drop(DropReason::IcmpErrorUntracked)
    );
    // The same error, addressed right, is translated.
    let mut ok = error([10, 1, 0, 100], frag_needed(), &ip_and_8);
    assert!(matches!(
        run(&mut w, &snap, 5, &mut ok, 1),
        Verdict::Transmit { port: 0, .. }
    ));
}

/// An ICMP error is translated but is not the peer's answer: a port
/// unreachable for a UDP flow leaves it unreplied (30 s, evictable), and
/// no error restarts a connection's idle timer.
#[test]
fn icmp_error_leaves_the_connection_state_and_timer() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    let mut q = udp4(("10.0.0.2", 5353), ("10.0.0.101", 53), b"query");
    let p = wire::parse(&q).unwrap();
    let orig = crate::flow::FlowKey::new((p.src, p.src_port), (p.dst, p.dst_port), Proto::Udp).unwrap();
    assert!(matches!(
        run(&mut w, &snap, 0, &mut q, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    let sent = wire::parse(&q).unwrap();
    let IpAddr::V4(backend) = sent.dst else {
        panic!("{sent:?}")
    };
    let (id, _) = w.conntrack().lookup(&orig).unwrap();
    // The backend's port is closed: its unreachable, every 10 s, quoting
    // the datagram it got, goes back to the client translated.
    for t in [10_000, 20_000, 29_000] {
        let mut err = icmp4_error(
            (BACKEND_MAC, MAC1),
            backend.octets(),
            [10, 0, 0, 2],
            DestUnreachableHeader::Port,
            &q[14..sent.end as usize],
        );
        assert!(matches!(
            run(&mut w, &snap, t, &mut err, 1),
            Verdict::Transmit { port: 0, .. }
        ));
        assert_checksums(&err);
        // The backend reported itself: the client hears it from the VIP.
        let out = wire::parse(&err).unwrap();
        assert_eq!((out.src, out.dst), (v4("10.0.0.101"), v4("10.0.0.2")));
        assert_eq!(w.conntrack().state(id), Some(ConnState::UdpUnreplied));
    }
    // Still 30 s from the datagram, not from the last error.
    assert_eq!(w.handle_tick(Tick(30_500), 10_000).expired, 1);
    assert_eq!(w.conntrack().len(), 0);
}

#[test]
fn icmp_error_to_an_unresolved_client_is_resolve() {
    let snap = backends_resolved();
    let mut w = worker(1, 0);
    let mut syn = tcp4(("10.0.0.2", 40000), ("10.0.0.100", 80), "S", 64, b"");
    assert!(matches!(
        run(&mut w, &snap, 0, &mut syn, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    let mut err = frag_needed4(
        (ROUTER_MAC, MAC1),
        [10, 1, 0, 254],
        [10, 1, 0, 100],
        &syn[14..14 + 28],
    );
    assert_eq!(
        run(&mut w, &snap, 5, &mut err, 1),
        Verdict::Resolve {
            port: 0,
            len: err.len(),
            via: v4("10.0.0.2")
        }
    );
    let p = wire::parse(&err).unwrap();
    assert_eq!(p.dst, v4("10.0.0.2"));
    assert_checksums(&err);
    assert_eq!((&err[..6], &err[6..12]), (&[0u8; 6][..], &MAC0[..]));
}

/// An error from a router that reports from a link-local address (no other
/// address on that link) reaches the client from the VIP, and a backend
/// from lbd's address on the backend's port: no router forwards a
/// link-local source off its link (RFC 3927, RFC 4291 §2.5.6). Both
/// families, both directions.
#[test]
fn an_error_from_a_link_local_router_is_sent_from_lbd() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    let mut syn = tcp4(("10.0.0.2", 40000), ("10.0.0.100", 80), "S", 64, b"");
    run(&mut w, &snap, 0, &mut syn, 0);
    let mut err = frag_needed4(
        (BACKEND_MAC, MAC1),
        [169, 254, 0, 1],
        [10, 1, 0, 100],
        &syn[14..14 + 28],
    );
    assert!(matches!(
        run(&mut w, &snap, 5, &mut err, 1),
        Verdict::Transmit { port: 0, .. }
    ));
    let p = wire::parse(&err).unwrap();
    assert_eq!((p.src, p.dst), (v4("10.0.0.100"), v4("10.0.0.2")));
    assert_checksums(&err);

    let mut syn = tcp6(("fd00::2", 40000), ("fd00::100", 80), "S", b"");
    run(&mut w, &snap, 0, &mut syn, 0);
    let sent = wire::parse(&syn).unwrap();
    let IpAddr::V6(snat) = sent.src else {
        panic!("{sent:?}")
    };
    let router: Ipv6Addr = "fe80::1".parse().unwrap();
    let mut err = too_big6((BACKEND_MAC, MAC1), router.octets(), snat.octets(), &syn[14..]);
    assert!(
        matches!(
            run(&mut w, &snap, 5, &mut err, 1),
            Verdict::Transmit { port: 0, .. }
        ),
        "{:?}",
        w.counters().nonzero_drops().collect::<Vec<_>>()
    );
    let p = wire::parse(&err).unwrap();
    assert_eq!(
        (p.src, p.dst),
        ("fd00::100".parse().unwrap(), "fd00::2".parse().unwrap())
    );
    assert_checksums(&err);
    // A router with a routable address keeps it.
    // Towards a DNAT backend: a client-side router's error about the
    // backend's reply comes from lbd's address on the backend's port.
    let mut q = udp4(("10.0.0.2", 40000), ("10.0.0.101", 53), b"query");
    run(&mut w, &snap, 0, &mut q, 0);
    let to_backend = wire::parse(&q).unwrap();
    let backend = to_backend.dst.to_string();
    let mut answer = udp4((&backend, 53), ("10.0.0.2", 40000), b"answer");
    answer[..12].copy_from_slice(&[MAC1, BACKEND_MAC].concat());
    assert!(matches!(
        run(&mut w, &snap, 1, &mut answer, 1),
        Verdict::Transmit { port: 0, .. }
    ));
    let mut err = frag_needed4(
        (CLIENT_MAC, MAC0),
        [169, 254, 0, 9],
        [10, 0, 0, 101],
        &answer[14..14 + 28],
    );
    assert!(
        matches!(
            run(&mut w, &snap, 5, &mut err, 0),
            Verdict::Transmit { port: 1, .. }
        ),
        "{:?}",
        w.counters().nonzero_drops().collect::<Vec<_>>()
    );
    let p = wire::parse(&err).unwrap();
    assert_eq!((p.src, p.dst), (v4("10.1.0.1"), to_backend.dst));
    assert_checksums(&err);
    let routed: Ipv6Addr = "fd01::fe".parse().unwrap();
    let mut err = too_big6((BACKEND_MAC, MAC1), routed.octets(), snat.octets(), &syn[14..]);
    assert!(matches!(
        run(&mut w, &snap, 5, &mut err, 1),
        Verdict::Transmit { port: 0, .. }
    ));
    assert_eq!(
        wire::parse(&err).unwrap().src,
        "fd01::fe".parse::<IpAddr>().unwrap()
    );
}

/// An error about the host's own traffic (quoting a packet from an
/// interface address, such as its BGP session) goes to the host, as that
/// traffic does; one quoting a VIP's traffic that nothing tracks is still
/// dropped.
#[test]
fn an_error_about_the_hosts_own_traffic_goes_to_the_host() {
    let snap = snapshot();
    let mut w = worker(2, 1);
    let own = tcp4(("10.0.0.1", 179), ("10.0.0.254", 50000), "A", 64, b"");
    let err = frag_needed4(
        (ROUTER_MAC, MAC0),
        [10, 0, 0, 254],
        [10, 0, 0, 1],
        &own[14..14 + 28],
    );
    assert_eq!(run(&mut w, &snap, 5, &mut err.clone(), 0), Verdict::ToHost);
    let vip = tcp4(("10.0.0.100", 80), ("10.0.0.2", 40000), "SA", 64, b"");
    let mut err = icmp4_error(
        (ROUTER_MAC, MAC0),
        [10, 0, 0, 254],
        [10, 0, 0, 100],
        DestUnreachableHeader::Host,
        &vip[14..14 + 28],
    );
    // (One worker: with two, its owner might be the other.)
    let mut w = worker(1, 0);
    assert_eq!(
        run(&mut w, &snap, 5, &mut err, 0),
        Verdict::Drop(DropReason::IcmpErrorUntracked)
    );
}
