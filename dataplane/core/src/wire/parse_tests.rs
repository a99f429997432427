//! Tests of [`super::parse`]: frames built with etherparse, every truncation,
//! and proptests that arbitrary or mutated bytes never panic.

use super::*;
use crate::wire::ethernet::MacAddr;
use etherparse::PacketBuilder;
use proptest::prelude::*;
use std::net::Ipv6Addr;

const SRC_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const DST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const C4: [u8; 4] = [10, 0, 0, 1];
const V4: [u8; 4] = [192, 0, 2, 10];
const C6: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const V6: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10];

fn build<B: FnOnce(&mut Vec<u8>)>(f: B) -> Vec<u8> {
    let mut v = Vec::new();
    f(&mut v);
    v
}

pub(crate) fn tcp_v4(payload: &[u8]) -> Vec<u8> {
    build(|v| {
        PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
            .ipv4(C4, V4, 64)
            .tcp(40000, 443, 1, 65535)
            .syn()
            .write(v, payload)
            .unwrap()
    })
}

fn tcp_v6_vlan() -> Vec<u8> {
    build(|v| {
        PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
            .single_vlan(etherparse::VlanId::try_new(42).unwrap())
            .ipv6(C6, V6, 63)
            .tcp(40000, 80, 1, 65535)
            .ack(5)
            .write(v, b"GET /")
            .unwrap()
    })
}

#[test]
fn tcp_ipv4() {
    let mut f = tcp_v4(&[]);
    f.resize(60, 0); // Ethernet padding
    let p = parse(&f).unwrap();
    assert_eq!(p.l3, L3::Ipv4);
    assert_eq!((p.vlan, p.l3_offset, p.l4_offset, p.end), (None, 14, 34, 54));
    assert_eq!(p.src, IpAddr::from(C4));
    assert_eq!(p.dst, IpAddr::from(V4));
    assert_eq!((p.protocol, p.src_port, p.dst_port, p.ttl), (6, 40000, 443, 64));
    assert!(p.tcp_flags.is_syn_only());
    assert_eq!(p.fragment, Fragment::None);
    assert!(!p.icmp_error);
    assert_eq!(p.l4(&f).len(), 20);
}

#[test]
fn tcp_ipv6_vlan() {
    let f = tcp_v6_vlan();
    let p = parse(&f).unwrap();
    assert_eq!(
        (p.l3, p.vlan, p.l3_offset, p.l4_offset),
        (L3::Ipv6, Some(42), 18, 58)
    );
    assert_eq!(p.dst, IpAddr::from(V6));
    assert_eq!((p.src_port, p.dst_port, p.ttl), (40000, 80, 63));
    assert!(p.tcp_flags.contains(TcpFlags::ACK));
    assert_eq!(p.end as usize, f.len());
}

#[test]
fn udp_and_icmp() {
    let f = build(|v| {
        PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
            .ipv4(C4, V4, 5)
            .udp(5353, 53)
            .write(v, b"q")
            .unwrap()
    });
    let p = parse(&f).unwrap();
    assert_eq!((p.protocol, p.src_port, p.dst_port, p.ttl), (17, 5353, 53, 5));

    let f = build(|v| {
        PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
            .ipv4(C4, V4, 64)
            .icmpv4_echo_request(0x77, 3)
            .write(v, b"ping")
            .unwrap()
    });
    let p = parse(&f).unwrap();
    assert_eq!(
        (p.protocol, p.icmp_type, p.src_port, p.dst_port, p.icmp_error),
        (1, 8, 0x77, 0x77, false)
    );

    let f = build(|v| {
        PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
            .ipv6(C6, V6, 64)
            .icmpv6_echo_reply(9, 3)
            .write(v, b"pong")
            .unwrap()
    });
    let p = parse(&f).unwrap();
    assert_eq!((p.protocol, p.icmp_type, p.src_port), (58, 129, 9));
}

#[test]
fn icmp_error_quotes_flow() {
    let inner = tcp_v4(&[0; 64]);
    let f = build(|v| {
        PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
            .ipv4([198, 51, 100, 1], C4, 64)
            .icmpv4_raw(3, 4, [0, 0, 0x05, 0xdc])
            .write(v, &inner[14..14 + 28])
            .unwrap()
    });
    let p = parse(&f).unwrap();
    assert!(p.icmp_error);
    assert_eq!((p.icmp_type, p.icmp_code, p.src_port), (3, 4, 0));
    let q = p.quoted(&f).unwrap();
    assert_eq!(
        (q.src, q.dst, q.src_port, q.dst_port),
        (IpAddr::from(C4), IpAddr::from(V4), 40000, 443)
    );
}

#[test]
fn fragments() {
    let mut f = tcp_v4(&[0; 16]);
    let mut ip = Ipv4Packet::new_checked(&mut f[14..]).unwrap();
    ip.set_flags_frag(false, true, 0);
    ip.fill_checksum();
    assert_eq!(parse(&f).unwrap().fragment, Fragment::First);
    let mut ip = Ipv4Packet::new_checked(&mut f[14..]).unwrap();
    ip.set_flags_frag(false, false, 8);
    ip.fill_checksum();
    assert_eq!(parse(&f), Err(DropReason::Fragment));
}

/// IPv6 UDP from C6 to V6 with one byte of payload, no extension header.
fn udp6() -> Vec<u8> {
    build(|v| {
        PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
            .ipv6(C6, V6, 64)
            .udp(1, 2)
            .write(v, b"x")
            .unwrap()
    })
}

/// Puts the 8-byte extension header `ext` first in `f`'s IPv6 chain, with
/// `next` as the fixed header's next header.
fn insert_ext(f: &mut Vec<u8>, ext: [u8; 8], next: u8) {
    f.splice(54..54, ext);
    f[20] = next;
    let pl = u16::from_be_bytes([f[18], f[19]]) + 8;
    f[18..20].copy_from_slice(&pl.to_be_bytes());
}

#[test]
fn ipv6_extension_headers_and_fragments() {
    // IPv6 with a destination-options header, then UDP.
    let mut f = udp6();
    insert_ext(&mut f, [ip_proto::UDP, 0, 1, 4, 0, 0, 0, 0], ip_proto::IPV6_OPTS);
    let p = parse(&f).unwrap();
    assert_eq!(
        (p.protocol, p.l4_offset, p.src_port, p.fragment),
        (17, 62, 1, Fragment::None)
    );
    // A first fragment header in front: UDP length no longer checked.
    insert_ext(
        &mut f,
        [ip_proto::IPV6_OPTS, 0, 0, 1, 0, 0, 0, 9],
        ip_proto::IPV6_FRAG,
    );
    let p = parse(&f).unwrap();
    assert_eq!((p.l4_offset, p.fragment), (70, Fragment::First));
    f[56..58].copy_from_slice(&[0x05, 0xc8]);
    assert_eq!(parse(&f), Err(DropReason::Fragment));
    // ESP
    f[20] = ip_proto::ESP;
    assert_eq!(parse(&f), Err(DropReason::Ipv6ExtensionHeader));
}

/// An atomic fragment (offset 0, M = 0) is a whole datagram (RFC 8200
/// §4.5, RFC 6946), UDP length checked; a routing header is walked when
/// spent and refused while it has segments left.
#[test]
fn ipv6_atomic_fragments_and_routing_headers() {
    let mut f = udp6();
    insert_ext(&mut f, [ip_proto::UDP, 0, 0, 0, 0, 0, 0, 9], ip_proto::IPV6_FRAG);
    let p = parse(&f).unwrap();
    assert_eq!((p.l4_offset, p.fragment), (62, Fragment::None));
    // Whole, so the UDP length must match.
    f[62 + 4..62 + 6].copy_from_slice(&100u16.to_be_bytes());
    assert_eq!(parse(&f), Err(DropReason::MalformedUdp));
    // Offset 0 with more to come is a first fragment, as before.
    let mut f = udp6();
    insert_ext(&mut f, [ip_proto::UDP, 0, 0, 1, 0, 0, 0, 9], ip_proto::IPV6_FRAG);
    assert_eq!(parse(&f).unwrap().fragment, Fragment::First);

    // Routing header (type 4), segments left 0: spent, walked.
    let mut f = udp6();
    insert_ext(&mut f, [ip_proto::UDP, 0, 4, 0, 0, 0, 0, 0], ip_proto::IPV6_ROUTE);
    let p = parse(&f).unwrap();
    assert_eq!((p.protocol, p.l4_offset), (17, 62));
    // One segment left: lbd is not the final destination.
    f[54 + 3] = 1;
    assert_eq!(parse(&f), Err(DropReason::Ipv6ExtensionHeader));
}

/// TCP/IPv4 from C4 to V4 with the IPv4 options `opts` (a multiple of 4
/// bytes, at most 40), every checksum computed by etherparse.
fn tcp_v4_options(opts: &[u8]) -> Vec<u8> {
    let mut h = etherparse::Ipv4Header::new(0, 64, etherparse::IpNumber::TCP, C4, V4).unwrap();
    h.options = opts.try_into().unwrap();
    build(|v| {
        PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
            .ip(etherparse::IpHeaders::Ipv4(h, Default::default()))
            .tcp(40000, 443, 1, 65535)
            .syn()
            .write(v, b"data")
            .unwrap()
    })
}

/// Options lbd passes through: the L4 header starts after them.
#[test]
fn ipv4_options_are_walked_and_kept() {
    const ROUTE: [u8; 4] = [192, 0, 2, 1];
    let r = ROUTE;
    for (desc, opts) in [
        ("router alert", vec![0x94, 4, 0, 0]),
        // Pointer 8 is past the 7-byte option: the route is spent and the
        // destination is the final one.
        ("spent LSRR", vec![131, 7, 8, r[0], r[1], r[2], r[3], 0]),
        (
            "spent SSRR after a NOP",
            vec![1, 137, 7, 8, r[0], r[1], r[2], r[3]],
        ),
        ("record route, room left", vec![7, 7, 4, 0, 0, 0, 0, 0]),
        // Timestamp: pointer 5, no overflow, flag 0, room for two stamps.
        ("timestamp", vec![68, 12, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        // After the end of the list comes padding, never read as options.
        ("end of list, then junk", vec![0, 131, 7, 4]),
        (
            "40 bytes: record route, NOPs, spent LSRR",
            [
                vec![7, 27, 4],
                vec![0; 24],
                vec![1; 6],
                vec![131, 7, 8, r[0], r[1], r[2], r[3]],
            ]
            .concat(),
        ),
    ] {
        let f = tcp_v4_options(&opts);
        let p = parse(&f).unwrap_or_else(|e| panic!("{desc}: {e:?}"));
        assert_eq!(usize::from(p.l4_offset), 14 + 20 + opts.len(), "{desc}");
        assert_eq!((p.dst, p.dst_port), (IpAddr::from(V4), 443), "{desc}");
        assert_eq!(p.l4(&f).len(), 20 + 4, "{desc}");
    }
}

/// A source route with addresses left names another final destination,
/// whose address the L4 checksum covers: refused, like an IPv6 routing
/// header with segments left.
#[test]
fn ipv4_unspent_source_routes_are_refused() {
    let r = [192, 0, 2, 1];
    for (desc, opts) in [
        (
            "LSRR, one address left",
            vec![131, 7, 4, r[0], r[1], r[2], r[3], 0],
        ),
        (
            "SSRR, one address left",
            vec![137, 7, 4, r[0], r[1], r[2], r[3], 0],
        ),
        (
            "LSRR, second of two addresses left",
            vec![131, 11, 8, 1, 1, 1, 1, r[0], r[1], r[2], r[3], 1],
        ),
        // A pointer before the route data still points into the option.
        ("LSRR, pointer 1", vec![131, 7, 1, r[0], r[1], r[2], r[3], 0]),
        (
            "unspent LSRR after a record route",
            vec![7, 3, 4, 131, 7, 4, r[0], r[1], r[2], r[3], 0, 0],
        ),
    ] {
        assert_eq!(
            parse(&tcp_v4_options(&opts)),
            Err(DropReason::Ipv4SourceRoute),
            "{desc}"
        );
    }
}

#[test]
fn malformed_ipv4_options_are_dropped() {
    for (desc, opts) in [
        ("length past the options", vec![0x94, 8, 0, 0]),
        ("length 0", vec![7, 0, 0, 0]),
        ("length 1", vec![68, 1, 0, 0]),
        ("no length byte", vec![1, 1, 1, 7]),
        ("LSRR without a pointer", vec![131, 2, 0, 0]),
        ("second option runs past", vec![1, 7, 8, 4, 0, 0, 0, 0]),
    ] {
        assert_eq!(
            parse(&tcp_v4_options(&opts)),
            Err(DropReason::MalformedIpv4),
            "{desc}"
        );
    }
}

#[test]
fn arp() {
    let mut buf = [0u8; 60];
    let repr = crate::wire::arp::ArpRepr {
        operation: crate::wire::arp::OP_REQUEST,
        sender_mac: MacAddr(SRC_MAC),
        sender_ip: C4.into(),
        target_mac: MacAddr::ZERO,
        target_ip: V4.into(),
    };
    let n = repr.emit_frame(&mut buf, MacAddr::BROADCAST, None).unwrap();
    let p = parse(&buf[..n]).unwrap();
    assert_eq!(
        (p.l3, p.src, p.dst, p.protocol),
        (L3::Arp, IpAddr::from(C4), IpAddr::from(V4), 0)
    );
}

#[test]
fn rejections() {
    let good = tcp_v4(&[]);
    let mut f = good.clone();
    f[24] ^= 1; // IPv4 header checksum
    assert_eq!(parse(&f), Err(DropReason::MalformedIpv4));
    let offload = ChecksumOffload {
        rx_ipv4_verified: true,
        ..ChecksumOffload::NONE
    };
    assert!(parse_with(&f, &offload).is_ok());
    let mut f = good.clone();
    f[12] = 0x88;
    assert_eq!(parse(&f), Err(DropReason::UnsupportedEtherType));
    let f = build(|v| {
        PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
            .ipv4(C4, V4, 64)
            .write(v, etherparse::IpNumber(47), b"gre!")
            .unwrap()
    });
    assert_eq!(parse(&f), Err(DropReason::UnsupportedProtocol));
    let mut f = build(|v| {
        PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
            .ipv6(C6, V6, 64)
            .udp(1, 2)
            .write(v, b"x")
            .unwrap()
    });
    f[60..62].copy_from_slice(&[0, 0]);
    assert_eq!(parse(&f), Err(DropReason::MalformedUdp));
}

#[test]
fn every_truncation_is_a_reasoned_drop() {
    // Lengths are checked outside-in, so every cut is `Truncated`: the
    // Ethernet header, then the IP header, then the IP length vs the buffer.
    for f in [tcp_v4(b"data"), tcp_v6_vlan()] {
        for n in 0..f.len() {
            assert_eq!(parse(&f[..n]), Err(DropReason::Truncated), "prefix {n}");
        }
        assert!(parse(&f).is_ok());
    }
}

#[test]
fn agrees_with_etherparse_on_addresses() {
    let f = tcp_v6_vlan();
    let p = parse(&f).unwrap();
    let s = etherparse::SlicedPacket::from_ethernet(&f).unwrap();
    let Some(etherparse::NetSlice::Ipv6(ip)) = s.net else {
        panic!()
    };
    assert_eq!(p.src, IpAddr::V6(Ipv6Addr::from(ip.header().source())));
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse(&data);
    }

    /// Any option bytes: no panic, and only the option reasons refuse.
    #[test]
    fn arbitrary_ipv4_options_never_panic(words in 1usize..=10, bytes in proptest::collection::vec(any::<u8>(), 40)) {
        let opts = &bytes[..4 * words];
        let f = tcp_v4_options(opts);
        match parse(&f) {
            Ok(p) => prop_assert_eq!(usize::from(p.l4_offset), 34 + opts.len()),
            Err(e) => prop_assert!(
                matches!(e, DropReason::MalformedIpv4 | DropReason::Ipv4SourceRoute),
                "{:?}", e
            ),
        }
    }

    /// Valid frames with a few random byte changes: no panic, and whenever
    /// parse accepts, its offsets lie inside the frame.
    #[test]
    fn mutated_frames_never_panic(idx in proptest::collection::vec((0usize..100, any::<u8>()), 1..4),
                                  which in 0usize..2, cut in 0usize..120) {
        let mut f = if which == 0 { tcp_v4(b"0123456789") } else { tcp_v6_vlan() };
        for (i, b) in idx {
            let i = i % f.len();
            f[i] = b;
        }
        f.truncate(cut.max(1));
        if let Ok(p) = parse(&f) {
            prop_assert!(usize::from(p.l3_offset) <= usize::from(p.l4_offset));
            prop_assert!(usize::from(p.l4_offset) <= p.end as usize);
            prop_assert!(p.end as usize <= f.len());
            let _ = p.quoted(&f);
        }
    }
}
