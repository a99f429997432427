//! Tests of [`super`]: golden request → reply rewrites checked by etherparse
//! and full checksum recomputation, every truncation, random corruption.

use super::*;
use crate::checksum;
use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
use proptest::prelude::*;

const OUR_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xaa]);
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x01];
pub(super) const OUR_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
pub(super) const PEER_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

fn our_v6() -> Ipv6Addr {
    "2001:db8::10".parse().unwrap()
}
fn peer_v6() -> Ipv6Addr {
    "2001:db8::1".parse().unwrap()
}
pub(super) fn local() -> LocalAddrs {
    LocalAddrs::new(
        OUR_MAC,
        [
            IpAddr::V4(OUR_V4),
            IpAddr::V6(our_v6()),
            IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7)),
        ],
    )
    .unwrap()
}

fn arp_frame(op: u16, sender: Ipv4Addr, target: Ipv4Addr, vlan: Option<u16>) -> Vec<u8> {
    let repr = ArpRepr {
        operation: op,
        sender_mac: MacAddr(PEER_MAC),
        sender_ip: sender,
        target_mac: MacAddr::ZERO,
        target_ip: target,
    };
    let mut buf = vec![0u8; 64];
    let n = repr.emit_frame(&mut buf, MacAddr::BROADCAST, vlan).unwrap();
    buf.truncate(n);
    buf
}

pub(super) fn echo_v4_frame(vlan: Option<u16>) -> Vec<u8> {
    let mut v = Vec::new();
    let b = PacketBuilder::ethernet2(PEER_MAC, OUR_MAC.0);
    match vlan {
        Some(id) => b
            .single_vlan(etherparse::VlanId::try_new(id).unwrap())
            .ipv4(PEER_V4.octets(), OUR_V4.octets(), 3)
            .icmpv4_echo_request(0x4242, 7)
            .write(&mut v, b"abcdefgh"),
        None => b
            .ipv4(PEER_V4.octets(), OUR_V4.octets(), 3)
            .icmpv4_echo_request(0x4242, 7)
            .write(&mut v, b"abcdefgh"),
    }
    .unwrap();
    v
}

fn echo_v6_frame() -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, OUR_MAC.0)
        .ipv6(peer_v6().octets(), our_v6().octets(), 9)
        .icmpv6_echo_request(0x99, 1)
        .write(&mut v, b"ping6")
        .unwrap();
    v
}

/// An NS for `target` from `src` to `dst`, with a source link-layer option if `slla`.
fn ns_frame(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr, slla: bool, hop: u8) -> Vec<u8> {
    let mut body = target.octets().to_vec();
    if slla {
        body.extend_from_slice(&[1, 1]);
        body.extend_from_slice(&PEER_MAC);
    }
    let mut v = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, MacAddr::ipv6_multicast(&dst.octets()).0)
        .ipv6(src.octets(), dst.octets(), hop)
        .icmpv6_raw(135, 0, [0; 4])
        .write(&mut v, &body)
        .unwrap();
    v
}

fn reply(frame: &mut [u8]) -> usize {
    match handle_local(Tick::ZERO, frame, &local()) {
        LocalVerdict::Reply { len } | LocalVerdict::ReplyToNeighbor { len, .. } => len,
        other => panic!("expected a reply, got {other:?}"),
    }
}

/// Checks every checksum of an IP frame by recomputation with etherparse.
pub(super) fn assert_checksums_valid(frame: &[u8]) {
    let s = SlicedPacket::from_ethernet(frame).unwrap();
    match s.net.as_ref().unwrap() {
        etherparse::NetSlice::Ipv4(ip) => {
            let h = ip.header().to_header();
            assert_eq!(
                h.header_checksum,
                h.calc_header_checksum(),
                "IPv4 header checksum"
            );
            if let Some(TransportSlice::Icmpv4(icmp)) = &s.transport {
                assert_eq!(
                    icmp.checksum(),
                    icmp.header().icmp_type.calc_checksum(icmp.payload())
                );
                assert_eq!(checksum::checksum(icmp.slice()), 0);
            }
        }
        etherparse::NetSlice::Ipv6(ip) => {
            let (src, dst) = (ip.header().source(), ip.header().destination());
            let Some(TransportSlice::Icmpv6(icmp)) = &s.transport else {
                panic!("not icmpv6")
            };
            assert_eq!(
                icmp.checksum(),
                icmp.header()
                    .icmp_type
                    .calc_checksum(src, dst, icmp.payload())
                    .unwrap()
            );
        }
        etherparse::NetSlice::Arp(_) => {}
    }
}

#[test]
fn arp_request_for_us_becomes_reply() {
    for vlan in [None, Some(300)] {
        let mut f = arp_frame(arp::OP_REQUEST, PEER_V4, OUR_V4, vlan);
        // The asker named its address and MAC: a hint for the neighbor table.
        let LocalVerdict::ReplyToNeighbor { len, ip, mac } = handle_local(Tick::ZERO, &mut f, &local())
        else {
            panic!("not answered with the asker's hint")
        };
        assert_eq!((ip, mac), (IpAddr::V4(PEER_V4), MacAddr(PEER_MAC)));
        assert_eq!(len, 60);
        let s = SlicedPacket::from_ethernet(&f[..len]).unwrap();
        let eth = s.link.as_ref().unwrap().to_header().unwrap().ethernet2().unwrap();
        assert_eq!((eth.source, eth.destination), (OUR_MAC.0, PEER_MAC));
        assert_eq!(s.vlan_ids().first().map(|v| v.value()), vlan);
        let Some(etherparse::NetSlice::Arp(a)) = s.net else {
            panic!("not arp")
        };
        let a = a.to_packet().try_eth_ipv4().unwrap();
        assert_eq!(a.operation, etherparse::ArpOperation::REPLY);
        assert_eq!((a.sender_mac, a.sender_ipv4), (OUR_MAC.0, OUR_V4.octets()));
        assert_eq!((a.target_mac, a.target_ipv4), (PEER_MAC, PEER_V4.octets()));
    }
}

#[test]
fn an_arp_probe_is_answered_without_a_hint() {
    // RFC 5227 probe: sender address 0.0.0.0 names nobody to learn.
    let mut f = arp_frame(arp::OP_REQUEST, Ipv4Addr::UNSPECIFIED, OUR_V4, None);
    assert_eq!(
        handle_local(Tick::ZERO, &mut f, &local()),
        LocalVerdict::Reply { len: 60 }
    );
}

#[test]
fn arp_other_outcomes() {
    let l = local();
    let mut f = arp_frame(arp::OP_REQUEST, PEER_V4, Ipv4Addr::new(192, 0, 2, 99), None);
    assert_eq!(
        handle_local(Tick::ZERO, &mut f, &l),
        LocalVerdict::Drop(DropReason::ArpNotForUs)
    );
    let mut f = arp_frame(arp::OP_REPLY, PEER_V4, OUR_V4, None);
    assert_eq!(
        handle_local(Tick::ZERO, &mut f, &l),
        LocalVerdict::Neighbor {
            ip: IpAddr::V4(PEER_V4),
            mac: MacAddr(PEER_MAC),
            announced: false
        }
    );
    // Announcements: sender and target address the same, request or reply.
    for op in [arp::OP_REQUEST, arp::OP_REPLY] {
        let mut f = arp_frame(op, PEER_V4, PEER_V4, None);
        let want = LocalVerdict::Neighbor {
            ip: IpAddr::V4(PEER_V4),
            mac: MacAddr(PEER_MAC),
            announced: true,
        };
        assert_eq!(handle_local(Tick::ZERO, &mut f, &l), want, "op {op}");
    }
    // Another station announcing, asking from, or answering for, one of
    // our addresses: a conflict.
    for (op, target) in [
        (arp::OP_REQUEST, OUR_V4),
        (arp::OP_REQUEST, PEER_V4),
        (arp::OP_REPLY, OUR_V4),
        (arp::OP_REPLY, PEER_V4),
    ] {
        let mut f = arp_frame(op, OUR_V4, target, None);
        assert_eq!(
            handle_local(Tick::ZERO, &mut f, &l),
            LocalVerdict::Drop(DropReason::LocalUnhandled),
            "op {op} target {target}"
        );
    }
    let mut f = arp_frame(3, PEER_V4, OUR_V4, None);
    assert_eq!(
        handle_local(Tick::ZERO, &mut f, &l),
        LocalVerdict::Drop(DropReason::MalformedArp)
    );
    // A sender MAC no station has (all zeros) is neither learned nor
    // answered.
    for (op, target) in [
        (arp::OP_REPLY, OUR_V4),
        (arp::OP_REQUEST, PEER_V4),
        (arp::OP_REQUEST, OUR_V4),
    ] {
        let mut f = arp_frame(op, PEER_V4, target, None);
        f[14 + 8..14 + 14].fill(0);
        assert_eq!(
            handle_local(Tick::ZERO, &mut f, &l),
            LocalVerdict::Drop(DropReason::MalformedArp),
            "op {op} target {target}"
        );
    }
}

#[test]
fn icmpv4_echo_becomes_reply() {
    for vlan in [None, Some(7)] {
        let orig = echo_v4_frame(vlan);
        let mut f = orig.clone();
        let len = reply(&mut f);
        assert_eq!(
            len,
            orig.len(),
            "a short test frame has no room for padding; the NIC pads"
        );
        assert_checksums_valid(&f[..len]);
        let p = parse(&f[..len]).unwrap();
        assert_eq!(
            (p.src, p.dst, p.ttl, p.vlan),
            (IpAddr::V4(OUR_V4), IpAddr::V4(PEER_V4), 64, vlan)
        );
        assert_eq!((p.icmp_type, p.src_port), (icmpv4::msg_type::ECHO_REPLY, 0x4242));
        assert_eq!(&f[..6], &PEER_MAC);
        assert_eq!(&f[6..12], &OUR_MAC.0);
        assert_eq!(&f[len - 8..len], b"abcdefgh", "data echoed");
    }
    // A frame padded to 60 bytes with stale bytes: sent at 60, padding zeroed.
    let mut f = echo_v4_frame(None);
    f.resize(60, 0xee);
    assert_eq!(reply(&mut f), 60);
    assert!(f[50..].iter().all(|&b| b == 0));
    assert_checksums_valid(&f);
}

#[test]
fn icmpv4_other_outcomes() {
    let l = local();
    let mut f = echo_v4_frame(None);
    let last = f.len() - 1;
    f[last] ^= 0xff;
    assert_eq!(
        handle_local(Tick::ZERO, &mut f, &l),
        LocalVerdict::Drop(DropReason::BadChecksum)
    );
    // To an address we do not own: the pipeline's business.
    let mut v = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, OUR_MAC.0)
        .ipv4(PEER_V4.octets(), [203, 0, 113, 1], 64)
        .icmpv4_echo_request(1, 1)
        .write(&mut v, &[])
        .unwrap();
    assert_eq!(handle_local(Tick::ZERO, &mut v, &l), LocalVerdict::NotLocal);
    // TCP to an owned address (a VIP): also the pipeline's.
    let mut v = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, OUR_MAC.0)
        .ipv4(PEER_V4.octets(), OUR_V4.octets(), 64)
        .tcp(1, 80, 0, 100)
        .syn()
        .write(&mut v, &[])
        .unwrap();
    assert_eq!(handle_local(Tick::ZERO, &mut v, &l), LocalVerdict::NotLocal);
    // Echo reply to us: nothing to do.
    let mut v = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, OUR_MAC.0)
        .ipv4(PEER_V4.octets(), OUR_V4.octets(), 64)
        .icmpv4_echo_reply(1, 1)
        .write(&mut v, &[])
        .unwrap();
    assert_eq!(
        handle_local(Tick::ZERO, &mut v, &l),
        LocalVerdict::Drop(DropReason::LocalUnhandled)
    );
    // An ICMP error to us goes on, to be translated.
    let mut v = Vec::new();
    let quote = echo_v4_frame(None);
    PacketBuilder::ethernet2(PEER_MAC, OUR_MAC.0)
        .ipv4(PEER_V4.octets(), OUR_V4.octets(), 64)
        .icmpv4_raw(11, 0, [0; 4])
        .write(&mut v, &quote[14..42])
        .unwrap();
    assert_eq!(handle_local(Tick::ZERO, &mut v, &l), LocalVerdict::NotLocal);
}

#[test]
fn icmpv6_echo_becomes_reply() {
    let orig = echo_v6_frame();
    let mut f = orig.clone();
    let len = reply(&mut f);
    assert_eq!(len, orig.len());
    assert_checksums_valid(&f[..len]);
    let p = parse(&f[..len]).unwrap();
    assert_eq!(
        (p.src, p.dst, p.ttl),
        (IpAddr::V6(our_v6()), IpAddr::V6(peer_v6()), 64)
    );
    assert_eq!((p.icmp_type, p.src_port), (icmpv6::msg_type::ECHO_REPLY, 0x99));
}

/// An echo request from a source no answer may go to (loopback,
/// IPv4-mapped, multicast, unspecified) is not answered, as for IPv4.
#[test]
fn icmpv6_echo_from_no_host_is_not_answered() {
    for src in ["::1", "::ffff:10.0.0.9", "ff02::1", "::"] {
        let src: Ipv6Addr = src.parse().unwrap();
        let mut v = Vec::new();
        PacketBuilder::ethernet2(PEER_MAC, OUR_MAC.0)
            .ipv6(src.octets(), our_v6().octets(), 9)
            .icmpv6_echo_request(0x99, 1)
            .write(&mut v, b"ping6")
            .unwrap();
        assert_eq!(
            handle_local(Tick::ZERO, &mut v, &local()),
            LocalVerdict::Drop(DropReason::LocalUnhandled),
            "{src}"
        );
    }
}

#[test]
fn neighbor_solicit_with_slla_becomes_advert() {
    let orig = ns_frame(peer_v6(), solicited_node(&our_v6()), our_v6(), true, 255);
    let mut f = orig.clone();
    let LocalVerdict::ReplyToNeighbor { len, ip, mac } = handle_local(Tick::ZERO, &mut f, &local()) else {
        panic!("not answered with the asker's hint")
    };
    assert_eq!((ip, mac), (IpAddr::V6(peer_v6()), MacAddr(PEER_MAC)));
    assert_eq!(len, orig.len(), "32 bytes of ICMPv6 either way");
    assert_checksums_valid(&f[..len]);
    let p = parse(&f[..len]).unwrap();
    assert_eq!(
        (p.src, p.dst, p.ttl, p.icmp_type),
        (IpAddr::V6(our_v6()), IpAddr::V6(peer_v6()), 255, 136)
    );
    assert_eq!(&f[..6], &PEER_MAC);
    let na = Icmpv6Packet::new_checked(p.l4(&f)).unwrap();
    assert_eq!(na.na_flags(), na_flags::SOLICITED | na_flags::OVERRIDE);
    assert_eq!(na.nd_target(), our_v6());
    assert_eq!(
        icmpv6::nd_link_layer_option(na.nd_options(), nd_option::TARGET_LL_ADDR),
        Ok(Some(OUR_MAC))
    );
    // Our own NA, fed back, is a conflict, never news (as ARP's twin);
    // on a port without that address it teaches our MAC.
    assert_eq!(
        handle_local(Tick::ZERO, &mut f[..len], &local()),
        LocalVerdict::Drop(DropReason::LocalUnhandled)
    );
    let other = LocalAddrs::new(MacAddr([2, 0, 0, 0, 0, 0xbb]), []).unwrap();
    assert_eq!(
        handle_local(Tick::ZERO, &mut f[..len], &other),
        LocalVerdict::Neighbor {
            ip: IpAddr::V6(our_v6()),
            mac: OUR_MAC,
            announced: false
        }
    );
}

/// A solicitation from one of our own addresses (another node using it,
/// or ours come back) is a conflict, as the ARP request is: not answered.
#[test]
fn neighbor_solicit_from_our_address_is_a_conflict() {
    let mut f = ns_frame(our_v6(), our_v6(), our_v6(), true, 255);
    assert_eq!(
        handle_local(Tick::ZERO, &mut f, &local()),
        LocalVerdict::Drop(DropReason::LocalUnhandled)
    );
    // From a peer, the same solicitation is answered.
    let mut f = ns_frame(peer_v6(), our_v6(), our_v6(), true, 255);
    assert!(matches!(
        handle_local(Tick::ZERO, &mut f, &local()),
        LocalVerdict::ReplyToNeighbor { .. }
    ));
}

#[test]
fn neighbor_solicit_without_slla_uses_tailroom_if_any() {
    let orig = ns_frame(peer_v6(), our_v6(), our_v6(), false, 255);
    let mut f = orig.clone();
    // No source link-layer option: a plain reply, nothing to learn.
    let LocalVerdict::Reply { len } = handle_local(Tick::ZERO, &mut f, &local()) else {
        panic!("not a plain reply")
    };
    assert_eq!(len, orig.len(), "no room: NA without the option");
    assert_checksums_valid(&f[..len]);
    let mut f = orig.clone();
    f.extend_from_slice(&[0xee; 16]); // tailroom
    let len = reply(&mut f);
    assert_eq!(len, orig.len() + 8);
    assert_checksums_valid(&f[..len]);
    let na = Icmpv6Packet::new_checked(&f[54..len]).unwrap();
    assert_eq!(
        icmpv6::nd_link_layer_option(na.nd_options(), nd_option::TARGET_LL_ADDR),
        Ok(Some(OUR_MAC))
    );
}

#[test]
fn dad_probe_is_answered_to_all_nodes() {
    let mut f = ns_frame(
        Ipv6Addr::UNSPECIFIED,
        solicited_node(&our_v6()),
        our_v6(),
        false,
        255,
    );
    // The room a shell gives it (RFC 4861 §7.2.4: the answer to a
    // multicast solicitation carries the target link-layer option).
    f.resize(f.len() + reply_room(&f), 0);
    let len = reply(&mut f);
    assert_checksums_valid(&f[..len]);
    let p = parse(&f[..len]).unwrap();
    assert_eq!(p.dst, IpAddr::V6("ff02::1".parse().unwrap()));
    assert_eq!(&f[..6], &[0x33, 0x33, 0, 0, 0, 1]);
    let na = Icmpv6Packet::new_checked(p.l4(&f)).unwrap();
    assert_eq!(na.na_flags(), na_flags::OVERRIDE);
    assert_eq!(
        icmpv6::nd_link_layer_option(na.nd_options(), nd_option::TARGET_LL_ADDR),
        Ok(Some(OUR_MAC))
    );
}

#[test]
fn reply_room_is_asked_only_for_a_whole_solicitation_without_options() {
    let dad = ns_frame(
        Ipv6Addr::UNSPECIFIED,
        solicited_node(&our_v6()),
        our_v6(),
        false,
        255,
    );
    assert_eq!(reply_room(&dad), 8);
    let mut room = dad.clone();
    room.extend_from_slice(&[0; 3]);
    assert_eq!(reply_room(&room), 5, "part of the room is there");
    room.extend_from_slice(&[0; 5]);
    assert_eq!(reply_room(&room), 0);
    // 802.1Q-tagged: the same 8 bytes.
    let mut tagged = dad[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
    tagged.extend_from_slice(&dad[12..]);
    assert_eq!(reply_room(&tagged), 8);
    let mut f = tagged.clone();
    f.resize(f.len() + 8, 0);
    let len = reply(&mut f);
    assert_eq!(len, tagged.len() + 8);
    assert_checksums_valid(&f[..len]);
    // Nothing for a solicitation with an option (it is the NA's size), for
    // a truncated one (zeros must not complete it: it stays a drop), nor
    // for anything else.
    let with_slla = ns_frame(peer_v6(), solicited_node(&our_v6()), our_v6(), true, 255);
    assert_eq!(reply_room(&with_slla), 0);
    for cut in 1..=dad.len() {
        assert_eq!(reply_room(&dad[..dad.len() - cut]), 0, "cut {cut}");
    }
    assert_eq!(reply_room(&echo_v6_frame()), 0);
    assert_eq!(reply_room(&echo_v4_frame(None)), 0);
    assert_eq!(reply_room(&arp_frame(arp::OP_REQUEST, PEER_V4, OUR_V4, None)), 0);
}

#[test]
fn neighbor_solicit_rejections() {
    let l = local();
    let other: Ipv6Addr = "2001:db8::99".parse().unwrap();
    let mut f = ns_frame(peer_v6(), solicited_node(&other), other, true, 255);
    assert_eq!(
        handle_local(Tick::ZERO, &mut f, &l),
        LocalVerdict::Drop(DropReason::NdNotForUs)
    );
    let mut f = ns_frame(peer_v6(), solicited_node(&our_v6()), our_v6(), true, 64);
    assert_eq!(
        handle_local(Tick::ZERO, &mut f, &l),
        LocalVerdict::Drop(DropReason::MalformedIcmp)
    );
    // DAD with a source link-layer option is invalid (RFC 4861 §7.1.1).
    let mut f = ns_frame(
        Ipv6Addr::UNSPECIFIED,
        solicited_node(&our_v6()),
        our_v6(),
        true,
        255,
    );
    assert_eq!(
        handle_local(Tick::ZERO, &mut f, &l),
        LocalVerdict::Drop(DropReason::MalformedIcmp)
    );
    // A source that is no one host: a multicast address, or (without a
    // source link-layer option) a multicast Ethernet source.
    let group: Ipv6Addr = "ff05::2".parse().unwrap();
    let mut f = ns_frame(group, solicited_node(&our_v6()), our_v6(), true, 255);
    assert_eq!(
        handle_local(Tick::ZERO, &mut f, &l),
        LocalVerdict::Drop(DropReason::MalformedIcmp)
    );
    let mut f = ns_frame(peer_v6(), solicited_node(&our_v6()), our_v6(), false, 255);
    f[6] |= 1;
    assert_eq!(
        handle_local(Tick::ZERO, &mut f, &l),
        LocalVerdict::Drop(DropReason::MalformedIcmp)
    );
    // Nor one no answer may go to, as for echo.
    for src in ["::1", "::ffff:10.0.0.9"] {
        let mut f = ns_frame(
            src.parse().unwrap(),
            solicited_node(&our_v6()),
            our_v6(),
            true,
            255,
        );
        assert_eq!(
            handle_local(Tick::ZERO, &mut f, &l),
            LocalVerdict::Drop(DropReason::LocalUnhandled),
            "{src}"
        );
    }
    let mut f = ns_frame(peer_v6(), solicited_node(&our_v6()), our_v6(), true, 255);
    f[70] ^= 1; // inside the target: checksum no longer matches
    assert_eq!(
        handle_local(Tick::ZERO, &mut f, &l),
        LocalVerdict::Drop(DropReason::BadChecksum)
    );
}

/// The Ethernet/IPv4 ARP packet in `frame`, as etherparse reads it.
fn arp_of(frame: &[u8]) -> etherparse::ArpEthIpv4Packet {
    let s = SlicedPacket::from_ethernet(frame).unwrap();
    let Some(etherparse::NetSlice::Arp(a)) = s.net else {
        panic!("not arp")
    };
    a.to_packet().try_eth_ipv4().unwrap()
}

#[test]
fn builders() {
    let mut buf = [0xaau8; 128];
    let n = write_gratuitous_arp(&mut buf, OUR_MAC, OUR_V4, Some(5)).unwrap();
    assert_eq!(n, 60);
    let a = arp_of(&buf[..n]);
    assert_eq!(
        (a.sender_ipv4, a.target_ipv4, a.sender_mac),
        (OUR_V4.octets(), OUR_V4.octets(), OUR_MAC.0)
    );
    assert_eq!(
        write_gratuitous_arp(&mut buf[..59], OUR_MAC, OUR_V4, None),
        Err(BuildError::BufferTooSmall { need: 60, have: 59 })
    );

    // An ARP request: broadcast, who-has target, tell us; the neighbor's
    // view of it (handle_local on the target) answers it.
    let target = Ipv4Addr::new(10, 0, 0, 77);
    let n = write_arp_request(&mut buf, OUR_MAC, OUR_V4, target, None).unwrap();
    assert_eq!(n, 60);
    assert_eq!(buf[..6], [0xff; 6]);
    let a = arp_of(&buf[..n]);
    assert_eq!(
        (a.sender_ipv4, a.target_ipv4, a.sender_mac),
        (OUR_V4.octets(), target.octets(), OUR_MAC.0)
    );
    assert_eq!(
        (a.operation, a.target_mac),
        (etherparse::ArpOperation::REQUEST, [0; 6])
    );
    // The crate's own parser reads the same request.
    let p = crate::wire::parse(&buf[..n]).unwrap();
    assert_eq!(p.l3, crate::wire::L3::Arp);
    let r = ArpRepr::parse(&ArpPacket::new_checked(&buf[p.l3_offset as usize..n]).unwrap());
    assert_eq!(
        (r.operation, r.sender_mac, r.sender_ip, r.target_mac, r.target_ip),
        (arp::OP_REQUEST, OUR_MAC, OUR_V4, MacAddr::ZERO, target)
    );
    let neighbor = LocalAddrs::new(MacAddr([2, 0, 0, 0, 0, 0xcc]), [IpAddr::V4(target)]).unwrap();
    assert!(matches!(
        handle_local(Tick::ZERO, &mut buf[..n], &neighbor),
        LocalVerdict::ReplyToNeighbor {
            ip: IpAddr::V4(OUR_V4),
            mac: OUR_MAC,
            ..
        }
    ));
    assert!(write_arp_request(&mut buf[..59], OUR_MAC, OUR_V4, target, None).is_err());

    let n = write_unsolicited_na(&mut buf, OUR_MAC, &our_v6(), None).unwrap();
    assert_eq!(n, 14 + 40 + 32);
    assert_checksums_valid(&buf[..n]);
    let other = LocalAddrs::new(MacAddr([2, 0, 0, 0, 0, 0xbb]), []).unwrap();
    assert_eq!(
        handle_local(Tick::ZERO, &mut buf[..n], &other),
        LocalVerdict::Neighbor {
            ip: IpAddr::V6(our_v6()),
            mac: OUR_MAC,
            announced: true
        }
    );
    assert!(write_unsolicited_na(&mut buf[..85], OUR_MAC, &our_v6(), None).is_err());
}

#[test]
fn neighbor_solicitation_is_answered_and_the_answer_learned() {
    let mut buf = [0u8; 128];
    let target: Ipv6Addr = "fd00:1::abcd:1234".parse().unwrap();
    let n = write_neighbor_solicitation(&mut buf, OUR_MAC, &our_v6(), &target, None).unwrap();
    assert_eq!(n, 14 + 40 + 32);
    assert_checksums_valid(&buf[..n]);
    // To the solicited-node group of the target and its multicast MAC.
    let group: Ipv6Addr = "ff02::1:ffcd:1234".parse().unwrap();
    assert_eq!(&buf[..6], &MacAddr::ipv6_multicast(&group.octets()).0);
    {
        let e = SlicedPacket::from_ethernet(&buf[..n]).unwrap();
        let Some(etherparse::NetSlice::Ipv6(ip)) = &e.net else {
            panic!("not IPv6: {e:?}")
        };
        assert_eq!(
            (
                ip.header().source_addr(),
                ip.header().destination_addr(),
                ip.header().hop_limit()
            ),
            (our_v6(), group, 255)
        );
    }
    // The target's own handling answers it, to us, with its MAC...
    let their_mac = MacAddr([2, 0, 0, 0, 0, 0xcc]);
    let neighbor = LocalAddrs::new(their_mac, [IpAddr::V6(target)]).unwrap();
    let LocalVerdict::ReplyToNeighbor { len, ip, mac } = handle_local(Tick::ZERO, &mut buf[..n], &neighbor)
    else {
        panic!("the solicitation was not answered")
    };
    // The solicitation named our MAC: the target may refresh its entry.
    assert_eq!((ip, mac), (IpAddr::V6(our_v6()), OUR_MAC));
    // ... which we learn.
    let ours = LocalAddrs::new(OUR_MAC, [IpAddr::V6(our_v6())]).unwrap();
    assert_eq!(
        handle_local(Tick::ZERO, &mut buf[..len], &ours),
        LocalVerdict::Neighbor {
            ip: IpAddr::V6(target),
            mac: their_mac,
            announced: false
        }
    );
    // The same advertisement with an all-zero target link-layer address
    // is not learned.
    let mut zero = buf[..len].to_vec();
    zero[54 + 26..54 + 32].fill(0);
    Icmpv6Packet::new_unchecked(&mut zero[54..]).fill_checksum(&target, &our_v6());
    assert_checksums_valid(&zero);
    assert_eq!(
        handle_local(Tick::ZERO, &mut zero, &ours),
        LocalVerdict::Drop(DropReason::LocalUnhandled)
    );
    // The same advertisement to all-nodes with its Solicited flag is
    // invalid (RFC 4861 7.1.2): not learned.
    let mut multi = buf[..len].to_vec();
    let all_nodes: Ipv6Addr = "ff02::1".parse().unwrap();
    multi[14 + 24..14 + 40].copy_from_slice(&all_nodes.octets());
    Icmpv6Packet::new_unchecked(&mut multi[54..]).fill_checksum(&target, &all_nodes);
    assert_checksums_valid(&multi);
    assert_eq!(
        handle_local(Tick::ZERO, &mut multi, &ours),
        LocalVerdict::Drop(DropReason::MalformedIcmp)
    );
    let n = write_neighbor_solicitation(&mut buf, OUR_MAC, &our_v6(), &target, Some(7)).unwrap();
    assert_eq!(n, 18 + 40 + 32);
    assert_checksums_valid(&buf[..n]);
    assert!(write_neighbor_solicitation(&mut buf[..85], OUR_MAC, &our_v6(), &target, None).is_err());
}

#[test]
fn local_addrs_validation() {
    assert_eq!(
        LocalAddrs::new(MacAddr::BROADCAST, []),
        Err(LocalAddrsError::MulticastMac(MacAddr::BROADCAST))
    );
    for bad in [
        "255.255.255.255",
        "0.1.2.3",
        "127.0.0.1",
        "::1",
        "::ffff:10.0.0.1",
        "ff02::1",
    ] {
        let bad: IpAddr = bad.parse().unwrap();
        assert_eq!(
            LocalAddrs::new(OUR_MAC, [bad]),
            Err(LocalAddrsError::InvalidAddress(bad))
        );
    }
    let l = local();
    assert!(l.owns(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7))) && !l.owns(IpAddr::V4(PEER_V4)));
    assert_eq!(l.ipv4().len(), 2);
}

fn valid_requests() -> Vec<Vec<u8>> {
    vec![
        arp_frame(arp::OP_REQUEST, PEER_V4, OUR_V4, None),
        arp_frame(arp::OP_REQUEST, PEER_V4, OUR_V4, Some(9)),
        echo_v4_frame(None),
        echo_v4_frame(Some(9)),
        echo_v6_frame(),
        ns_frame(peer_v6(), solicited_node(&our_v6()), our_v6(), true, 255),
        ns_frame(peer_v6(), our_v6(), our_v6(), false, 255),
    ]
}

#[test]
fn every_truncation_is_a_drop() {
    let l = local();
    for orig in valid_requests() {
        let end = parse(&orig).unwrap().end as usize;
        for n in 0..end {
            let mut f = orig[..n].to_vec();
            match handle_local(Tick::ZERO, &mut f, &l) {
                LocalVerdict::Drop(_) => {}
                other => panic!("prefix {n} of a {}-byte frame gave {other:?}", orig.len()),
            }
        }
    }
}

proptest! {
    /// Corrupted requests: never a panic, and any reply stays in the buffer
    /// and is itself a frame that parses (or, with a reversed source route,
    /// one `parse` refuses for its route, which has addresses left).
    #[test]
    fn corrupted_requests_never_panic(which in 0usize..7, flips in proptest::collection::vec((0usize..96, any::<u8>()), 1..4), extra in 0usize..16) {
        let mut f = valid_requests().swap_remove(which);
        for (i, b) in flips {
            let i = i % f.len();
            f[i] = b;
        }
        f.extend(std::iter::repeat_n(0xee, extra));
        if let LocalVerdict::Reply { len } | LocalVerdict::ReplyToNeighbor { len, .. } = handle_local(Tick::ZERO, &mut f, &local()) {
            prop_assert!(len <= f.len());
            prop_assert!(matches!(parse(&f[..len]), Ok(_) | Err(DropReason::Ipv4SourceRoute)));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(mut data in proptest::collection::vec(any::<u8>(), 0..160)) {
        let _ = handle_local(Tick::ZERO, &mut data, &local());
    }
}
