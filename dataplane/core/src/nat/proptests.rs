//! Property tests: for random addresses, ports, payloads and header shapes
//! the incremental rewrite equals the packet built from scratch, and no
//! input, however mangled, makes the rewrite panic or half-write a frame.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::icmp_error_tests::{all_err_cases, error_frame, quote_of, quoted_translated};
use super::tests::{assert_checksums_valid, Spec, Tp};
use super::*;
use crate::conntrack::Endpoint;
use crate::wire::parse;

fn tp() -> impl Strategy<Value = Tp> {
    prop_oneof![Just(Tp::Tcp), Just(Tp::Udp), Just(Tp::EchoReq), Just(Tp::EchoRep)]
}

/// Four endpoints of one family: packet source, destination, new source, new destination.
fn endpoints() -> impl Strategy<Value = [Endpoint; 4]> {
    prop_oneof![
        any::<[(u32, u16); 4]>().prop_map(|e| e.map(|(a, p)| (IpAddr::V4(Ipv4Addr::from(a)), p))),
        any::<[(u128, u16); 4]>().prop_map(|e| e.map(|(a, p)| (IpAddr::V6(Ipv6Addr::from(a)), p))),
    ]
}

fn spec() -> impl Strategy<Value = (Spec, Rewrite)> {
    (
        tp(),
        endpoints(),
        2u8..=255,
        proptest::option::of(0u16..4095),
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(tp, e, ttl, vlan, ip_ext, no_csum, payload)| {
            let spec = Spec {
                src: e[0],
                dst: e[1],
                ttl,
                tp,
                vlan,
                ip_ext,
                udp_no_checksum: no_csum && tp == Tp::Udp && e[0].0.is_ipv4(),
                payload,
            };
            (spec, Rewrite { src: e[2], dst: e[3] })
        })
}

/// Apply both rewrites with a `Parsed` that may not match `frame`: never a
/// panic, and an error leaves the frame as it was.
fn no_panic_no_half_write(frame: &mut [u8], p: &Parsed, r: &Rewrite, offload: &ChecksumOffload) {
    let before = frame.to_vec();
    if rewrite(frame, p, r, offload).is_err() {
        assert_eq!(frame, &before[..]);
    }
    let before = frame.to_vec();
    let inner = inner_rewrite(r);
    if rewrite_icmp_error(frame, p, r, &inner, offload).is_err() {
        assert_eq!(frame, &before[..]);
    }
}

fn offload() -> impl Strategy<Value = ChecksumOffload> {
    any::<[bool; 3]>().prop_map(|[a, b, c]| ChecksumOffload {
        rx_ipv4_verified: false,
        rx_l4_partial: a,
        tx_ipv4: b,
        tx_l4: c,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn incremental_rewrite_equals_building_from_scratch((spec, r) in spec()) {
        let mut frame = spec.build();
        let expected = spec.translated(&r).build();
        let p = parse(&frame).unwrap();
        rewrite(&mut frame, &p, &r, &ChecksumOffload::NONE).unwrap();
        prop_assert_eq!(&frame, &expected);
        assert_checksums_valid(&frame);
    }

    #[test]
    fn icmp_error_translation_equals_building_from_scratch(
        case in 0..all_err_cases().len(),
        e4 in any::<[(u32, u16); 4]>(),
        e6 in any::<[(u128, u16); 4]>(),
        payload in proptest::collection::vec(any::<u8>(), 0..200),
        cut in 0usize..300,
    ) {
        // Reuse a golden case's shape (ICMP type, transport, family, header
        // extensions) with random endpoints, payload and quote length.
        let c = &all_err_cases()[case];
        let e: [Endpoint; 4] = if c.from.is_ipv4() {
            e4.map(|(a, p)| (IpAddr::V4(Ipv4Addr::from(a)), p))
        } else {
            e6.map(|(a, p)| (IpAddr::V6(Ipv6Addr::from(a)), p))
        };
        let quoted = Spec { src: e[0], dst: e[1], payload, ..c.quoted.clone() };
        let r = Rewrite { src: e[2], dst: e[3] };
        let outer = Rewrite { src: (e[3].0, 0), dst: r.dst };
        // The quote must hold the IP header (and extensions) and 8 bytes of L4.
        let min = match (e[0].0.is_ipv4(), quoted.ip_ext) {
            (true, false) => 20,
            (true, true) => 24,
            (false, false) => 40,
            (false, true) => 48,
        } + 8;
        // Even: a quote cut between the two bytes of the TCP checksum cannot
        // be updated (the high byte depends on the carry from the low one),
        // and senders cut at even lengths (576 - 28, 1280 - 48) anyway.
        let cut = Some(min + cut / 2 * 2);
        let input = error_frame(c.from, e[1].0, 60, c.icmp, &quote_of(&quoted, cut));
        let expected = error_frame(outer.src.0, outer.dst.0, 59, c.icmp,
                                   &quote_of(&quoted_translated(&quoted, &inner_rewrite(&r)), cut));
        let mut frame = input.clone();
        let p = parse(&frame).unwrap();
        rewrite_icmp_error(&mut frame, &p, &outer, &inner_rewrite(&r), &ChecksumOffload::NONE).unwrap();
        prop_assert_eq!(&frame, &expected);
        assert_checksums_valid(&frame);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200),
                                e in endpoints(), off in offload()) {
        let mut frame = bytes;
        if let Ok(p) = parse(&frame) {
            no_panic_no_half_write(&mut frame, &p, &Rewrite { src: e[0], dst: e[1] }, &off);
        }
    }

    /// Valid frames (ICMP errors included) mangled after parsing: bytes
    /// flipped and the frame cut short, with the original `Parsed`.
    #[test]
    fn mangled_frames_never_panic((spec, r) in spec(), case in 0..all_err_cases().len(), use_err in any::<bool>(),
                                  flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
                                  cut in any::<usize>(), off in offload()) {
        let mut frame = if use_err { all_err_cases()[case].input() } else { spec.build() };
        let p = parse(&frame).unwrap();
        let n = frame.len();
        for (at, b) in flips {
            frame[at % n] ^= b;
        }
        frame.truncate(cut % (n + 1));
        no_panic_no_half_write(&mut frame, &p, &r, &off);
        if let Ok(p2) = parse(&frame) {
            no_panic_no_half_write(&mut frame, &p2, &r, &off);
        }
    }
}

/// An IPv4 header and a TCP (20 bytes) or UDP (8 bytes) header with
/// payload carrying `t` (source, destination, ports), every other byte
/// as given (the checksums arbitrary), TTL above 1.
fn v4_packet(t: (u32, u32, [u16; 2]), tcp: bool, ttl: u8, bytes: &[u8]) -> ([u8; 20], Vec<u8>) {
    let mut ip = [0u8; 20];
    ip.copy_from_slice(&bytes[..20]);
    ip[8] = ttl.max(2);
    ip[9] = if tcp { ip_proto::TCP } else { ip_proto::UDP };
    ip[12..16].copy_from_slice(&t.0.to_be_bytes());
    ip[16..20].copy_from_slice(&t.1.to_be_bytes());
    let mut l4 = bytes[20..].to_vec();
    l4[0..2].copy_from_slice(&t.2[0].to_be_bytes());
    l4[2..4].copy_from_slice(&t.2[1].to_be_bytes());
    (ip, l4)
}

/// Rewrites a copy of `(ip, l4)` to `to`, with `delta` or summing the
/// replaced words itself; returns the bytes and the delta applied.
fn rewritten(
    (ip, l4): &([u8; 20], Vec<u8>),
    tcp: bool,
    to: (u32, u32, [u16; 2]),
    delta: Option<NatDelta>,
    offload: &ChecksumOffload,
) -> ([u8; 20], Vec<u8>, NatDelta) {
    let (mut ip, mut l4) = (*ip, l4.clone());
    let src = (Ipv4Addr::from(to.0), to.2[0]);
    let dst = (Ipv4Addr::from(to.1), to.2[1]);
    let applied = rewrite_v4_whole(&mut ip, &mut l4, tcp, src, dst, delta, offload);
    (ip, l4, applied)
}

/// The checksum change from `a` to `b` (source, destination, ports),
/// summed word by word as RFC 1624 writes it (`~m + m'`) and folded: the
/// reference for what `rewrite_v4_whole` returns.
fn delta_of(a: (u32, u32, [u16; 2]), b: (u32, u32, [u16; 2])) -> NatDelta {
    let words = |t: (u32, u32, [u16; 2])| [(t.0 >> 16) as u16, t.0 as u16, (t.1 >> 16) as u16, t.1 as u16];
    let change = |old: &[u16], new: &[u16]| -> u32 {
        old.iter()
            .zip(new)
            .map(|(&m, &n)| u32::from(!m) + u32::from(n))
            .sum()
    };
    let addrs = change(&words(a), &words(b));
    NatDelta {
        ip: fold(addrs),
        l4: fold(addrs + change(&a.2, &b.2)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// A connection's precomputed checksum change gives the same bytes as
    /// summing the replaced addresses and ports, both ways: `a → b` with
    /// the delta, `b → a` with its reverse; and a rewrite that sums them
    /// returns that very delta (what the flow cache keeps).
    #[test]
    fn precomputed_delta_equals_summing_the_replaced_words(
        a in any::<(u32, u32, [u16; 2])>(),
        b in any::<(u32, u32, [u16; 2])>(),
        tcp in any::<bool>(),
        ttl in any::<u8>(),
        bytes in proptest::collection::vec(any::<u8>(), 48..=64),
        csum in prop_oneof![any::<u16>(), Just(0u16), Just(0xFFFF)],
        off in offload(),
    ) {
        let d = delta_of(a, b);
        for (from, to, delta) in [(a, b, d), (b, a, d.reversed())] {
            let mut pkt = v4_packet(from, tcp, ttl, &bytes);
            let at = if tcp { 16 } else { 6 };
            pkt.1[at..at + 2].copy_from_slice(&csum.to_be_bytes());
            let summed = rewritten(&pkt, tcp, to, None, &off);
            prop_assert_eq!(summed.2, delta);
            prop_assert_eq!(rewritten(&pkt, tcp, to, Some(delta), &off), summed);
        }
    }
}

/// The reverse of a change whose sum is a nonzero multiple of 0xFFFF (the
/// source and destination swapped, a folded 0xFFFF) is 0xFFFF too, not the
/// 0 a bare complement gives; the two differ on a checksum field of 0xFFFF.
#[test]
fn the_reverse_of_a_swap_is_the_nonzero_zero() {
    let a = (0x0a00_0001, 0x0a00_0064, [40000, 80]);
    let b = (a.1, a.0, [a.2[1], a.2[0]]);
    let d = delta_of(a, b);
    assert_eq!(
        d,
        NatDelta {
            ip: 0xFFFF,
            l4: 0xFFFF
        }
    );
    assert_eq!(d.reversed(), d);
    let off = ChecksumOffload::default();
    for tcp in [true, false] {
        let mut pkt = v4_packet(b, tcp, 64, &[0x45; 48]);
        let at = if tcp { 16 } else { 6 };
        pkt.1[at..at + 2].copy_from_slice(&0xFFFFu16.to_be_bytes());
        pkt.0[10..12].copy_from_slice(&0xFFFFu16.to_be_bytes());
        assert_eq!(
            rewritten(&pkt, tcp, a, Some(d.reversed()), &off),
            rewritten(&pkt, tcp, a, None, &off)
        );
    }
}
