//! Refusing a TCP connection to a VIP port that no frontend serves: the
//! frame is turned, in place, into the RST a host with no listener would
//! send (RFC 9293 §3.10.7.1), back to where it came from, so the client
//! fails at once ("connection refused") instead of retrying into silence.
//! Only to a client that some service on the VIP address allows: the
//! worker asks [`Snapshot::vip_allows_source`](crate::snapshot::Snapshot::vip_allows_source)
//! first, so a client the source ranges deny cannot map the served ports.
//!
//! UDP to such a port is dropped (`no_frontend`) without an ICMP port
//! unreachable: the answer would be larger than the frame it replaces, and
//! a balancer that answers UDP probes of every VIP port helps scanners more
//! than clients.
//!
//! And refusing a packet too large for the port it would leave by: the
//! frame is turned, in place, into the ICMP "fragmentation needed" (IPv4,
//! RFC 792, RFC 1191) or ICMPv6 "packet too big" (RFC 4443 §3.2) that a
//! router sends, carrying the port's MTU back to the sender so that
//! path-MTU discovery works across ports of different MTUs
//! ([`write_too_big`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::checksum::{checksum, l4_checksum_v4, l4_checksum_v6};
use crate::snapshot::PortConfig;
use crate::wire::{self, EthernetFrame, Parsed, TcpFlags, L3};

const TCP_HEADER: usize = 20;
const TTL: u8 = 64;
/// An ICMP error's IPv4 header and ICMP header.
const ICMP_V4_HEADERS: usize = 20 + 8;
/// An ICMPv6 error's IPv6 header and ICMPv6 header.
const ICMP_V6_HEADERS: usize = 40 + 8;
/// The most an IPv4 ICMP error may be (RFC 1812 §4.3.2.3: "not exceed
/// 576 bytes"), quoting as much of the packet as fits.
const ICMP_V4_MAX: usize = 576;
/// The most an ICMPv6 error may be: IPv6's minimum MTU (RFC 4443 §2.4 (c)).
const ICMP_V6_MAX: usize = 1280;

/// Rewrites the TCP segment `p` (parsed from `frame`, received on a port
/// whose MAC is `port_mac`) into its reset, sent from `port_mac` back to
/// the MAC it came from; returns the new frame length, or `None` when `p`
/// must not be answered: a RST (never answered), not TCP, a fragment, a
/// source that names no single host (unspecified, loopback, multicast,
/// limited broadcast or IPv4-mapped IP: RFC 1122 §4.2.3.10,
/// `names_one_host`), or a frame received on a
/// link-layer multicast or broadcast address (RFC 1122 §3.3.6).
pub fn write_tcp_reset(frame: &mut [u8], p: &Parsed, port_mac: [u8; 6]) -> Option<usize> {
    if p.protocol != wire::ip_proto::TCP
        || p.tcp_flags.0 & TcpFlags::RST.0 != 0
        || p.fragment != wire::Fragment::None
    {
        return None;
    }
    let eth = EthernetFrame::new_checked(&*frame).ok()?;
    if eth.dst_addr().is_multicast() || eth.src_addr().is_multicast() {
        return None;
    }
    if !names_one_host(p.src) {
        return None;
    }
    let l3 = usize::from(p.l3_offset);
    let l4 = usize::from(p.l4_offset);
    let end = (p.end as usize).min(frame.len());
    let seg = frame.get(l4..end)?;
    if seg.len() < TCP_HEADER {
        return None;
    }
    let seq = u32::from_be_bytes(seg[4..8].try_into().ok()?);
    let ack = u32::from_be_bytes(seg[8..12].try_into().ok()?);
    let data_off = usize::from(seg[12] >> 4) * 4;
    let flags = p.tcp_flags.0;
    // SYN and FIN each take one sequence number.
    let seg_len = seg.len().saturating_sub(data_off) as u32
        + u32::from(flags & TcpFlags::SYN.0 != 0)
        + u32::from(flags & TcpFlags::FIN.0 != 0);
    let (rst_seq, rst_ack, rst_flags) = if flags & TcpFlags::ACK.0 != 0 {
        (ack, 0, TcpFlags::RST.0)
    } else {
        (0, seq.wrapping_add(seg_len), TcpFlags::RST.0 | TcpFlags::ACK.0)
    };

    // Layer 2: back to the sender, from the port (the frame's destination
    // MAC need not be the port's: with `--promiscuous`, or on a virtual
    // device, every frame on the segment arrives).
    let (dst, src) = frame.split_at_mut(6);
    dst.copy_from_slice(&src[..6]);
    src[..6].copy_from_slice(&port_mac);

    // Layer 3: addresses swapped, no options, fresh TTL.
    let ip_len = match (p.l3, p.src, p.dst) {
        (L3::Ipv4, IpAddr::V4(s), IpAddr::V4(d)) => {
            let new_l4 = l3 + 20;
            let h = frame.get_mut(l3..new_l4 + TCP_HEADER)?;
            h[0] = 0x45;
            h[1] = 0;
            h[2..4].copy_from_slice(&(20 + TCP_HEADER as u16).to_be_bytes());
            h[4..6].copy_from_slice(&0u16.to_be_bytes()); // id
            h[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF
            h[8] = TTL;
            h[9] = wire::ip_proto::TCP;
            h[10..12].copy_from_slice(&[0, 0]);
            h[12..16].copy_from_slice(&d.octets());
            h[16..20].copy_from_slice(&s.octets());
            let c = checksum(&h[..20]);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            let tcp = &mut h[20..];
            write_tcp(tcp, p.dst_port, p.src_port, rst_seq, rst_ack, rst_flags);
            let c = l4_checksum_v4(d, s, wire::ip_proto::TCP, tcp);
            tcp[16..18].copy_from_slice(&c.to_be_bytes());
            new_l4 + TCP_HEADER
        }
        (L3::Ipv6, IpAddr::V6(s), IpAddr::V6(d)) => {
            let new_l4 = l3 + 40;
            let h = frame.get_mut(l3..new_l4 + TCP_HEADER)?;
            h[0..4].copy_from_slice(&0x6000_0000u32.to_be_bytes());
            h[4..6].copy_from_slice(&(TCP_HEADER as u16).to_be_bytes());
            h[6] = wire::ip_proto::TCP;
            h[7] = TTL;
            h[8..24].copy_from_slice(&d.octets());
            h[24..40].copy_from_slice(&s.octets());
            let tcp = &mut h[40..];
            write_tcp(tcp, p.dst_port, p.src_port, rst_seq, rst_ack, rst_flags);
            let c = l4_checksum_v6(&d, &s, wire::ip_proto::TCP, tcp);
            tcp[16..18].copy_from_slice(&c.to_be_bytes());
            new_l4 + TCP_HEADER
        }
        _ => return None,
    };
    // Not padded to the Ethernet minimum: the frame may be shorter than
    // that (virtual devices deliver 54-byte segments), and NICs pad on
    // transmit.
    Some(ip_len)
}

/// Rewrites the IP packet `p` (parsed from `frame`, received on the port
/// `port`), larger than `mtu`, the MTU of the port it would leave by, into
/// the ICMP error that tells its sender so: "fragmentation needed and DF
/// set" with `mtu` as the next-hop MTU (IPv4, RFC 1191 §4), or "packet too
/// big" with `mtu` (IPv6), from the receiving port's address of the
/// family (the longest of its prefixes holding the sender, else the
/// first), back to the MAC the frame came from, quoting as much of the
/// packet as the error may hold (576 bytes in all for IPv4, 1,280 for
/// IPv6). Returns the new frame length, or `None` when `p` must not be
/// answered: an IPv4 packet without DF (a router would fragment it; lbd
/// does not), a non-first fragment, an ICMP error (never answered with
/// another, RFC 1122 §3.2.2, RFC 4443 §2.4 (e)), a source that names no
/// single host, a frame received on a link-layer multicast or broadcast
/// address, or a port without an address of the family.
pub fn write_too_big(frame: &mut [u8], p: &Parsed, port: &PortConfig, mtu: u16) -> Option<usize> {
    if p.icmp_error {
        return None;
    }
    let eth = EthernetFrame::new_checked(&*frame).ok()?;
    if eth.dst_addr().is_multicast() || eth.src_addr().is_multicast() {
        return None;
    }
    let l3 = usize::from(p.l3_offset);
    let end = (p.end as usize).min(frame.len());
    let packet_len = end.checked_sub(l3)?;
    // The longest of the port's prefixes of the family holding the
    // sender, else its first of the family that is not link-local (no
    // router forwards that to an off-link sender), else its first.
    let own = |v6: bool| {
        let of_family = port.cidrs().iter().filter(move |c| c.addr().is_ipv6() == v6);
        of_family
            .clone()
            .filter(|c| c.contains(p.src))
            .max_by_key(|c| c.prefix())
            .map(|c| c.addr())
            .or_else(|| routable_own_address(port.cidrs(), v6))
            .or_else(|| of_family.clone().next().map(|c| c.addr()))
    };
    let new_end = match (p.l3, p.src) {
        (L3::Ipv4, IpAddr::V4(s)) => {
            let df = frame.get(l3 + 6).is_some_and(|f| f & 0x40 != 0);
            let first = frame
                .get(l3 + 6..l3 + 8)
                .is_some_and(|f| f[0] & 0x1f == 0 && f[1] == 0);
            if !df || !first || !names_one_host(p.src) {
                return None;
            }
            let IpAddr::V4(from) = own(false)? else {
                return None;
            };
            let ihl = usize::from(frame[l3] & 0x0f) * 4;
            let room = frame.len().checked_sub(l3 + ICMP_V4_HEADERS)?;
            let quote = packet_len.min(ICMP_V4_MAX - ICMP_V4_HEADERS).min(room);
            // The header and 64 bits of data at least (RFC 792).
            if quote < ihl + 8 {
                return None;
            }
            frame.copy_within(l3..l3 + quote, l3 + ICMP_V4_HEADERS);
            write_icmp_v4(&mut frame[l3..l3 + ICMP_V4_HEADERS + quote], from, s, mtu);
            l3 + ICMP_V4_HEADERS + quote
        }
        (L3::Ipv6, IpAddr::V6(s)) => {
            if !names_one_host(p.src) {
                return None;
            }
            let IpAddr::V6(from) = own(true)? else { return None };
            let room = frame.len().checked_sub(l3 + ICMP_V6_HEADERS)?;
            let quote = packet_len.min(ICMP_V6_MAX - ICMP_V6_HEADERS).min(room);
            if quote < 40 {
                return None;
            }
            frame.copy_within(l3..l3 + quote, l3 + ICMP_V6_HEADERS);
            write_icmp_v6(&mut frame[l3..l3 + ICMP_V6_HEADERS + quote], from, s, mtu);
            l3 + ICMP_V6_HEADERS + quote
        }
        _ => return None,
    };
    let (dst, src) = frame.split_at_mut(6);
    dst.copy_from_slice(&src[..6]);
    src[..6].copy_from_slice(&port.mac());
    Some(new_end)
}

/// Whether `ip`, a packet's source, names one host that an answer could
/// reach (RFC 1122 §3.2.2, RFC 1812 §4.3.2.7, RFC 4443 §2.4 (e)): not
/// unspecified ("this network", 0/8), loopback, multicast or the limited
/// broadcast, nor an IPv4-mapped IPv6 address (`::ffff:0:0/96`, RFC 4291
/// §2.5.5.2: an IPv4 node's address inside a host's sockets, never on the
/// wire; Linux drops every packet from one). IPv4's reserved 240/4 is a
/// host, as Linux has taken it since 2.6.25: networks use it for hosts
/// (Kubernetes pod ranges among them). (A directed broadcast of a prefix
/// lbd does not know cannot be told from a host.) Every address lbd owns
/// is one ([`crate::snapshot::is_host_address`]).
pub(crate) fn names_one_host(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            let first = a.octets()[0];
            first != 0 && !a.is_loopback() && !a.is_multicast() && !a.is_broadcast()
        }
        IpAddr::V6(a) => {
            !a.is_unspecified() && !a.is_loopback() && !a.is_multicast() && a.to_ipv4_mapped().is_none()
        }
    }
}

/// Whether `ip` is link-local (169.254/16, fe80::/10): valid on its link
/// alone (RFC 3927, RFC 4291 §2.5.6).
pub(crate) fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => a.is_unicast_link_local(),
    }
}

/// A port's first address of the family (`v6`) that is not link-local:
/// the source of what lbd sends from that port to another link.
pub(crate) fn routable_own_address(cidrs: &[crate::snapshot::Cidr], v6: bool) -> Option<IpAddr> {
    cidrs
        .iter()
        .map(|c| c.addr())
        .find(|a| a.is_ipv6() == v6 && !is_link_local(*a))
}

/// Writes the IPv4 and ICMP headers of a "fragmentation needed" from
/// `from` to `to` in front of the quote that fills the rest of `h`.
fn write_icmp_v4(h: &mut [u8], from: Ipv4Addr, to: Ipv4Addr, mtu: u16) {
    let total = h.len() as u16; // at most ICMP_V4_MAX
    h[0] = 0x45;
    h[1] = 0xc0; // internetwork control, as routers send their errors
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[4..8].fill(0); // id, flags, fragment offset
    h[8] = TTL;
    h[9] = wire::ip_proto::ICMP;
    h[10..12].fill(0);
    h[12..16].copy_from_slice(&from.octets());
    h[16..20].copy_from_slice(&to.octets());
    let c = checksum(&h[..20]);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    let icmp = &mut h[20..];
    icmp[0] = wire::icmpv4::msg_type::DEST_UNREACHABLE;
    icmp[1] = 4; // fragmentation needed and DF set
    icmp[2..6].fill(0); // checksum, unused
    icmp[6..8].copy_from_slice(&mtu.to_be_bytes());
    let c = checksum(icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
}

/// Writes the IPv6 and ICMPv6 headers of a "packet too big" from `from` to
/// `to` in front of the quote that fills the rest of `h`.
fn write_icmp_v6(h: &mut [u8], from: Ipv6Addr, to: Ipv6Addr, mtu: u16) {
    let payload = (h.len() - 40) as u16; // at most ICMP_V6_MAX - 40
    h[0..4].copy_from_slice(&0x6000_0000u32.to_be_bytes());
    h[4..6].copy_from_slice(&payload.to_be_bytes());
    h[6] = wire::ip_proto::ICMPV6;
    h[7] = TTL;
    h[8..24].copy_from_slice(&from.octets());
    h[24..40].copy_from_slice(&to.octets());
    let icmp = &mut h[40..];
    icmp[0] = wire::icmpv6::msg_type::PACKET_TOO_BIG;
    icmp[1] = 0;
    icmp[2..4].fill(0);
    icmp[4..8].copy_from_slice(&u32::from(mtu).to_be_bytes());
    let c = l4_checksum_v6(&from, &to, wire::ip_proto::ICMPV6, icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
}

fn write_tcp(t: &mut [u8], sport: u16, dport: u16, seq: u32, ack: u32, flags: u8) {
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    t[12] = (TCP_HEADER as u8 / 4) << 4;
    t[13] = flags;
    t[14..20].fill(0); // window, checksum, urgent pointer
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};

    const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const LB_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
    /// Another host's MAC: a promiscuous port sees frames to it.
    const OTHER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];

    fn syn_v4(payload: &[u8], syn: bool, ack: Option<u32>) -> Vec<u8> {
        let b = PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
            .ipv4([10, 0, 0, 2], [10, 0, 0, 100], 61)
            .tcp(40000, 81, 1000, 64240);
        let b = if syn { b.syn() } else { b };
        let b = match ack {
            Some(a) => b.ack(a),
            None => b,
        };
        let mut v = Vec::new();
        b.write(&mut v, payload).unwrap();
        v
    }

    fn check(frame: &mut [u8], want_seq: u32, want_ack: Option<u32>) {
        let p = wire::parse(frame).unwrap();
        let n = write_tcp_reset(frame, &p, LB_MAC).expect("answered");
        let out = &frame[..n];
        assert_eq!(out[..6], CLIENT_MAC);
        assert_eq!(out[6..12], LB_MAC);
        // Our own parser verifies every checksum.
        let q = wire::parse(out).expect("valid reset");
        assert_eq!((q.src, q.dst), (p.dst, p.src));
        assert_eq!((q.src_port, q.dst_port), (81, 40000));
        let s = SlicedPacket::from_ethernet(out).unwrap();
        let Some(TransportSlice::Tcp(t)) = s.transport else {
            panic!("tcp")
        };
        assert!(t.rst());
        assert_eq!(t.sequence_number(), want_seq);
        assert_eq!(t.ack(), want_ack.is_some());
        if let Some(a) = want_ack {
            assert_eq!(t.acknowledgment_number(), a);
        }
        match s.net {
            Some(NetSlice::Ipv4(ip)) => assert_eq!(ip.header().ttl(), TTL),
            Some(NetSlice::Ipv6(ip)) => assert_eq!(ip.header().hop_limit(), TTL),
            _ => panic!("ip"),
        }
    }

    #[test]
    fn syn_gets_rst_ack_of_its_sequence_plus_one() {
        let mut f = syn_v4(&[], true, None);
        check(&mut f, 0, Some(1001));
    }

    #[test]
    fn data_segment_with_ack_gets_rst_at_its_ack() {
        let mut f = syn_v4(b"hello", false, Some(777));
        check(&mut f, 777, None);
        let mut f = syn_v4(b"hello", false, None);
        check(&mut f, 0, Some(1005));
    }

    #[test]
    fn ipv6_syn() {
        let b = PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
            .ipv6([0xfd; 16], [0xfe; 16], 61)
            .tcp(40000, 81, 5, 64240)
            .syn();
        let mut f = Vec::new();
        b.write(&mut f, &[]).unwrap();
        check(&mut f, 0, Some(6));
    }

    #[test]
    fn resets_udp_and_fragments_are_not_answered() {
        let b = PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
            .ipv4([10, 0, 0, 2], [10, 0, 0, 100], 61)
            .tcp(40000, 81, 5, 64240)
            .rst();
        let mut f = Vec::new();
        b.write(&mut f, &[]).unwrap();
        let p = wire::parse(&f).unwrap();
        assert_eq!(write_tcp_reset(&mut f, &p, LB_MAC), None);
        let b = PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
            .ipv4([10, 0, 0, 2], [10, 0, 0, 100], 61)
            .udp(40000, 81);
        let mut f = Vec::new();
        b.write(&mut f, b"x").unwrap();
        let p = wire::parse(&f).unwrap();
        assert_eq!(write_tcp_reset(&mut f, &p, LB_MAC), None);
    }

    #[test]
    fn the_reset_comes_from_the_ports_mac() {
        let mut f = syn_v4(&[], true, None);
        f[..6].copy_from_slice(&OTHER_MAC);
        // `check` wants LB_MAC as the source, whatever the SYN was sent to.
        check(&mut f, 0, Some(1001));
    }

    #[test]
    fn sources_that_name_no_host_and_link_broadcasts_are_not_answered() {
        let syn = |eth_dst: [u8; 6], eth_src: [u8; 6], src: [u8; 4]| {
            let b = PacketBuilder::ethernet2(eth_src, eth_dst)
                .ipv4(src, [10, 0, 0, 100], 61)
                .tcp(40000, 81, 1000, 64240)
                .syn();
            let mut v = Vec::new();
            b.write(&mut v, &[]).unwrap();
            v
        };
        let cases = [
            ("IPv4 broadcast source", syn(LB_MAC, CLIENT_MAC, [255; 4])),
            ("multicast source", syn(LB_MAC, CLIENT_MAC, [224, 0, 0, 1])),
            ("unspecified source", syn(LB_MAC, CLIENT_MAC, [0; 4])),
            (
                "multicast Ethernet source",
                syn(LB_MAC, [1, 0, 0x5e, 0, 0, 1], [10, 0, 0, 2]),
            ),
            (
                "to the Ethernet broadcast",
                syn([0xff; 6], CLIENT_MAC, [10, 0, 0, 2]),
            ),
            (
                "to an Ethernet multicast",
                syn([0x33, 0x33, 0, 0, 0, 1], CLIENT_MAC, [10, 0, 0, 2]),
            ),
        ];
        for (what, mut f) in cases {
            let p = wire::parse(&f).unwrap();
            assert_eq!(write_tcp_reset(&mut f, &p, LB_MAC), None, "{what}");
        }
        let b = PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
            .ipv6(
                [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                [0xfe; 16],
                61,
            )
            .tcp(40000, 81, 5, 64240)
            .syn();
        let mut f = Vec::new();
        b.write(&mut f, &[]).unwrap();
        let p = wire::parse(&f).unwrap();
        assert_eq!(write_tcp_reset(&mut f, &p, LB_MAC), None, "IPv6 multicast source");
        // The same SYN from a unicast host is answered.
        let mut f = syn(LB_MAC, CLIENT_MAC, [10, 0, 0, 2]);
        let p = wire::parse(&f).unwrap();
        assert!(write_tcp_reset(&mut f, &p, LB_MAC).is_some());
    }

    /// What lbd sends to another link comes from a port address that is
    /// not link-local, where the port has one.
    #[test]
    fn the_routable_address_of_a_port() {
        let cidrs: Vec<crate::snapshot::Cidr> = ["169.254.0.1/16", "fe80::1/64", "10.0.0.1/24", "fd00::1/64"]
            .iter()
            .map(|c| crate::snapshot::Cidr::parse_prefixed(c).unwrap())
            .collect();
        assert_eq!(
            routable_own_address(&cidrs, false),
            Some("10.0.0.1".parse().unwrap())
        );
        assert_eq!(
            routable_own_address(&cidrs, true),
            Some("fd00::1".parse().unwrap())
        );
        assert_eq!(routable_own_address(&cidrs[..2], true), None);
        assert!(is_link_local("169.254.9.9".parse().unwrap()) && is_link_local("fe80::2".parse().unwrap()));
        assert!(!is_link_local("10.0.0.1".parse().unwrap()) && !is_link_local("fec0::1".parse().unwrap()));
    }

    /// Sources an answer cannot reach, in both families, are not hosts.
    #[test]
    fn which_sources_name_one_host() {
        for (ip, host) in [
            ("10.0.0.2", true),
            ("192.0.2.1", true),
            ("239.255.255.255", false),
            ("0.0.0.0", false),
            ("0.1.2.3", false),
            ("127.0.0.1", false),
            ("224.0.0.1", false),
            ("240.0.0.1", true),
            ("255.255.255.254", true),
            ("255.255.255.255", false),
            ("fd00::2", true),
            ("::", false),
            ("::1", false),
            ("ff02::1", false),
            ("::ffff:127.0.0.1", false),
            ("::ffff:10.0.0.2", false),
            ("64:ff9b::a00:2", true),
        ] {
            assert_eq!(names_one_host(ip.parse().unwrap()), host, "{ip}");
        }
    }
}
