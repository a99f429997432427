//! Ports of different MTUs: a packet larger than the MTU of the port it
//! would leave by is answered, before any rewrite, with the ICMP
//! "fragmentation needed" (IPv4 with DF) or ICMPv6 "packet too big" that
//! carries that MTU back to its sender, out of the port it came in by
//! (`too_big_sent`); one that may not be answered is `mtu_exceeded`. A new connection's too-big first packet
//! opens nothing, and a connection whose next hop is cached declines to the
//! general path.

use super::*;

/// [`snapshot`]'s services with MTU `mtu0` on the clients' port 0 and
/// `mtu1` on the backends' port 1.
fn mtus(mtu0: u16, mtu1: u16) -> Snapshot {
    snapshot_with(|b| {
        b.mtu(0, mtu0).mtu(1, mtu1);
    })
}

/// A UDP datagram of `payload` bytes from `src` to `dst`, received from
/// `mac` on the port of `dst_mac`, with DF as `df`.
fn udp_sized(
    src: (&str, u16),
    dst: (&str, u16),
    payload: usize,
    df: bool,
    mac: [u8; 6],
    dst_mac: [u8; 6],
) -> Vec<u8> {
    let (s, d): (Ipv4Addr, Ipv4Addr) = (src.0.parse().unwrap(), dst.0.parse().unwrap());
    let mut out = Vec::new();
    etherparse::PacketBuilder::ethernet2(mac, dst_mac)
        .ipv4(s.octets(), d.octets(), 64)
        .udp(src.1, dst.1)
        .write(&mut out, &vec![0x5a; payload])
        .unwrap();
    if !df {
        out[20] &= !0x40;
        out[24..26].fill(0);
        let c = checksum::checksum(&out[14..34]);
        out[24..26].copy_from_slice(&c.to_be_bytes());
    }
    out
}

/// `f`, an untagged IPv4 frame without options, with TTL `ttl`.
fn with_ttl(mut f: Vec<u8>, ttl: u8) -> Vec<u8> {
    f[22] = ttl;
    f[24..26].fill(0);
    let c = checksum::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f
}

/// Asserts that `out` is the ICMP error of `kind` (IPv4 type 3 code 4, or
/// ICMPv6 type 2) carrying `mtu`, from `from` to `to`, sent back to
/// `to_mac` from `from_mac`, quoting the start of `original`'s IP packet.
#[allow(clippy::too_many_arguments)]
fn assert_too_big(
    out: &[u8],
    original: &[u8],
    from: &str,
    to: &str,
    from_mac: [u8; 6],
    to_mac: [u8; 6],
    mtu: u16,
) {
    assert_checksums(out);
    assert_eq!((&out[..6], &out[6..12]), (&to_mac[..], &from_mac[..]));
    let s = etherparse::SlicedPacket::from_ethernet(out).unwrap();
    let (quote, max, headers) = match s.transport {
        Some(etherparse::TransportSlice::Icmpv4(i)) => {
            assert_eq!(
                i.icmp_type(),
                etherparse::Icmpv4Type::DestinationUnreachable(
                    etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: mtu }
                )
            );
            (i.payload().to_vec(), 576, 28)
        }
        Some(etherparse::TransportSlice::Icmpv6(i)) => {
            assert_eq!(
                i.icmp_type(),
                etherparse::Icmpv6Type::PacketTooBig { mtu: u32::from(mtu) }
            );
            (i.payload().to_vec(), 1280, 48)
        }
        t => panic!("an ICMP error, got {t:?}"),
    };
    let p = wire::parse(out).unwrap();
    assert_eq!((p.src, p.dst), (v4(from), v4(to)));
    let ip_len = p.end as usize - p.l3_offset as usize;
    let original_ip = &original[14..];
    // As much of the packet as the error may hold.
    assert_eq!(quote.len(), original_ip.len().min(max - headers));
    assert_eq!(ip_len, headers + quote.len());
    assert_eq!(
        &quote[..],
        &original_ip[..quote.len()],
        "the quote is the packet as received"
    );
}

#[test]
fn a_datagram_too_big_for_the_backends_port_is_answered_with_its_mtu() {
    let snap = mtus(1500, 1280);
    let mut w = worker(1, 0);
    let client = ("10.0.0.2", 5000);
    let dns = ("10.0.0.101", 53);
    // 1,280 bytes fit: forwarded; the fast path caches the flow's hop.
    let mut fits = udp_sized(client, dns, 1280 - 28, true, CLIENT_MAC, MAC0);
    assert!(matches!(
        run(&mut w, &snap, 0, &mut fits, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    // One more byte, on the cached flow: answered out of port 0, from
    // the port's address.
    let mut big = udp_sized(client, dns, 1280 - 27, true, CLIENT_MAC, MAC0);
    let original = big.clone();
    let Verdict::Transmit { port: 0, len } = run(&mut w, &snap, 1, &mut big, 0) else {
        panic!("answered out of port 0")
    };
    assert_too_big(
        &big[..len],
        &original,
        "10.0.0.1",
        "10.0.0.2",
        MAC0,
        CLIENT_MAC,
        1280,
    );
    assert_eq!(w.counters().too_big_sent.get(), 1);
    assert_eq!(w.counters().nonzero_drops().count(), 0);
    // Without DF: dropped, untouched (lbd does not fragment).
    let mut no_df = udp_sized(client, dns, 1400, false, CLIENT_MAC, MAC0);
    let before = no_df.clone();
    assert_eq!(
        run(&mut w, &snap, 2, &mut no_df, 0),
        Verdict::Drop(DropReason::MtuExceeded)
    );
    assert_eq!(no_df, before);
    // A new flow's first datagram too big: answered, opening nothing (no
    // entry, no SNAT port); the client's smaller datagram opens it.
    let other = ("10.0.0.2", 5001);
    let mut first = udp_sized(other, dns, 3000, true, CLIENT_MAC, MAC0);
    assert!(matches!(
        run(&mut w, &snap, 3, &mut first, 0),
        Verdict::Transmit { port: 0, .. }
    ));
    assert_eq!(w.counters().new_connections.get(), 1);
    assert_eq!(w.conntrack.len(), 1);
    let mut next = udp_sized(other, dns, 100, true, CLIENT_MAC, MAC0);
    assert!(matches!(
        run(&mut w, &snap, 4, &mut next, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    assert_eq!(w.counters().new_connections.get(), 2);
    // TTL 1: dropped as such, not answered (as a router decides).
    let mut last_hop = with_ttl(udp_sized(client, dns, 1400, true, CLIENT_MAC, MAC0), 1);
    assert_eq!(
        run(&mut w, &snap, 5, &mut last_hop, 0),
        Verdict::Drop(DropReason::TtlExceeded)
    );
    assert_eq!(w.counters().too_big_sent.get(), 2);
    assert_eq!(w.counters().drops[DropReason::MtuExceeded as usize].get(), 1);
}

/// The quote stops at 576 bytes in all (IPv4), and a backend's reply too
/// big for the clients' port is answered to the backend, from port 1's
/// address.
#[test]
fn a_reply_too_big_for_the_clients_port_is_answered_to_the_backend() {
    let snap = mtus(1280, 9000);
    let mut w = worker(1, 0);
    let mut q = udp_sized(("10.0.0.2", 5000), ("10.0.0.101", 53), 10, true, CLIENT_MAC, MAC0);
    run(&mut w, &snap, 0, &mut q, 0);
    let backend = wire::parse(&q).unwrap().dst;
    let backend = backend.to_string();
    let mut reply = udp_sized((&backend, 53), ("10.0.0.2", 5000), 8000, true, BACKEND_MAC, MAC1);
    let original = reply.clone();
    let Verdict::Transmit { port: 1, len } = run(&mut w, &snap, 1, &mut reply, 1) else {
        panic!("answered out of port 1")
    };
    assert_eq!(len, 14 + 576);
    assert_too_big(
        &reply[..len],
        &original,
        "10.1.0.1",
        &backend,
        MAC1,
        BACKEND_MAC,
        1280,
    );
    // A reply too big whose TTL runs out here: dropped as such.
    let mut last_hop = with_ttl(original.clone(), 1);
    assert_eq!(
        run(&mut w, &snap, 1, &mut last_hop, 1),
        Verdict::Drop(DropReason::TtlExceeded)
    );
    // Within 9,000 the other way: forwarded.
    let mut jumbo = udp_sized(
        ("10.0.0.2", 5000),
        ("10.0.0.101", 53),
        8000,
        true,
        CLIENT_MAC,
        MAC0,
    );
    let v = run(&mut w, &snap, 2, &mut jumbo, 0);
    assert!(
        matches!(v, Verdict::Transmit { port: 1, len } if len == jumbo.len()),
        "{v:?}"
    );
}

/// IPv6: "packet too big", 1,280 bytes at most, on an established
/// full-NAT connection; the connection goes on with smaller segments.
#[test]
fn ipv6_segment_too_big_gets_packet_too_big() {
    let snap = mtus(1500, 1280);
    let mut w = worker(1, 0);
    let (client, vip) = (("fd00::2", 40000), ("fd00::100", 80));
    let mut syn = tcp6(client, vip, "S", b"");
    assert!(matches!(
        run(&mut w, &snap, 0, &mut syn, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    let mut big = tcp6(client, vip, "A", &[7; 1300]);
    let original = big.clone();
    let Verdict::Transmit { port: 0, len } = run(&mut w, &snap, 1, &mut big, 0) else {
        panic!("answered out of port 0")
    };
    assert_eq!(len, 14 + 1280);
    assert_too_big(
        &big[..len],
        &original,
        "fd00::1",
        "fd00::2",
        MAC0,
        CLIENT_MAC,
        1280,
    );
    let mut small = tcp6(client, vip, "A", &[7; 1200]);
    assert!(matches!(
        run(&mut w, &snap, 2, &mut small, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    assert_eq!(w.counters().too_big_sent.get(), 1);
}

/// The same through the staged burst (the fast path declines, the general
/// path answers), established TCP over IPv4.
#[test]
fn burst_answers_too_big_segments() {
    let snap = mtus(1500, 1400);
    let mut w = worker(1, 0);
    let (client, vip) = (("10.0.0.2", 40000), ("10.0.0.100", 80));
    let mut syn = tcp4(client, vip, "S", 64, b"");
    assert!(matches!(
        run(&mut w, &snap, 0, &mut syn, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    let mut frames: Vec<Vec<u8>> = (0..8)
        .map(|i| tcp4(client, vip, "A", 64, &vec![1; 1350 + 10 * i]))
        .collect();
    let originals = frames.clone();
    let metas = vec![meta(0); frames.len()];
    let mut verdicts = vec![Verdict::Drop(DropReason::Truncated); frames.len()];
    {
        let mut refs: Vec<&mut [u8]> = frames.iter_mut().map(|f| &mut f[..]).collect();
        w.handle_burst(Tick(1), &snap, &mut refs, &metas, &mut verdicts);
    }
    for (i, v) in verdicts.iter().enumerate() {
        // 1,350 + 10 i bytes of data, 40 of headers: two fit in 1,400.
        if 1350 + 10 * i + 40 <= 1400 {
            assert!(matches!(v, Verdict::Transmit { port: 1, .. }), "{i}: {v:?}");
        } else {
            let Verdict::Transmit { port: 0, len } = *v else {
                panic!("{i}: answered out of port 0, got {v:?}")
            };
            assert_too_big(
                &frames[i][..len],
                &originals[i],
                "10.0.0.1",
                "10.0.0.2",
                MAC0,
                CLIENT_MAC,
                1400,
            );
        }
    }
    assert_eq!(w.counters().too_big_sent.get(), 6);
}

/// An ICMP error too big for the port is dropped, never answered with
/// another error.
#[test]
fn an_icmp_error_too_big_is_dropped() {
    let snap = mtus(1280, 1500);
    let mut w = worker(1, 0);
    let mut syn = tcp4(("10.0.0.2", 40000), ("10.0.0.100", 80), "S", 64, b"");
    run(&mut w, &snap, 0, &mut syn, 0);
    let mut quoted = syn[14..].to_vec();
    quoted.resize(1400, 0);
    let mut err = Vec::new();
    etherparse::PacketBuilder::ethernet2(BACKEND_MAC, MAC1)
        .ipv4([10, 1, 0, 254], [10, 1, 0, 100], 64)
        .icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::Host,
        ))
        .write(&mut err, &quoted)
        .unwrap();
    // Its TTL running out here, dropped as such.
    let mut last_hop = with_ttl(err.clone(), 1);
    assert_eq!(
        run(&mut w, &snap, 1, &mut last_hop, 1),
        Verdict::Drop(DropReason::TtlExceeded)
    );
    assert_eq!(
        run(&mut w, &snap, 1, &mut err, 1),
        Verdict::Drop(DropReason::MtuExceeded)
    );
    assert_eq!(w.counters().too_big_sent.get(), 0);
}

#[test]
fn port_mtus_are_checked() {
    let build = |f: &dyn Fn(&mut SnapshotBuilder)| {
        let mut b = ports_and_neighbors(1);
        f(&mut b);
        b.build()
            .map(|s| s.port(1).map(|p| p.mtu()))
            .map_err(|e| e.to_string())
    };
    assert_eq!(build(&|_| {}), Ok(Some(crate::snapshot::DEFAULT_MTU)));
    assert_eq!(
        build(&|b| {
            b.mtu(1, 9216);
        }),
        Ok(Some(9216))
    );
    for (mtu, why) in [
        (67, "port 1: field mtu: 67: not an MTU lbd takes (68-9216)"),
        (9217, "port 1: field mtu: 9217: not an MTU lbd takes (68-9216)"),
        (
            1279,
            "port 1: field mtu: 1279: below IPv6's minimum of 1280, and the port has an IPv6 address",
        ),
    ] {
        assert_eq!(
            build(&|b| {
                b.mtu(1, mtu);
            }),
            Err(why.to_string())
        );
    }
    assert_eq!(
        build(&|b| {
            b.mtu(1, 1500).mtu(1, 1400);
        }),
        Err("port 1: field mtu: 1400: the port has another MTU already".to_string())
    );
    assert_eq!(
        build(&|b| {
            b.mtu(5, 1500);
        }),
        Err("port 5: field mtu: 1500: the port has no interface".to_string())
    );
}
