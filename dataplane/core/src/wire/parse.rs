//! The per-packet parse: one pass over Ethernet, 802.1Q, ARP/IPv4/IPv6 and
//! the L4 header into a small `Copy` [`Parsed`], with no allocation.
//!
//! What `parse` guarantees on `Ok`: every header named in `Parsed` is inside
//! the frame, `l4_offset..end` is the L4 header plus data, and `end` never
//! exceeds the frame (Ethernet padding lies beyond `end`). What it rejects:
//! see each `DropReason` below; in particular a non-first fragment (IPv4 or
//! IPv6) is `Err(Fragment)`, because without reassembly it carries no ports
//! and cannot be matched to a flow. UDP over IPv6 with a zero checksum is
//! `MalformedUdp` (RFC 8200 §8.1). IPv4 options are walked: a malformed
//! list is `MalformedIpv4`, and a source route with addresses left is
//! `Ipv4SourceRoute`, as an IPv6 routing header with segments left is
//! `Ipv6ExtensionHeader` (see [`super::ipv4::check_options`]). L4
//! checksums are not verified: the balancer rewrites incrementally, which
//! keeps a bad checksum bad for the receiver to catch. The IPv4 header checksum is verified unless the NIC
//! already did it ([`ChecksumOffload::rx_ipv4_verified`]).

use std::net::IpAddr;

use super::ethernet::{EthernetFrame, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use super::icmpv4::{self, Quoted};
use super::icmpv6;
use super::ipv4::Ipv4Packet;
use super::ipv6::{self, Ipv6Packet};
use super::tcp::{TcpFlags, TcpPacket};
use super::udp::UdpPacket;
use super::{arp::ArpPacket, be16, ip_proto};
use crate::checksum::ChecksumOffload;
use crate::DropReason;

/// The network layer of a parsed frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L3 {
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
    /// Ethernet/IPv4 ARP: `src`/`dst` are the sender/target protocol
    /// addresses, there is no L4 (`l4_offset == end`, ports 0).
    Arp,
}

/// Fragment status of a parsed packet (non-first fragments are rejected).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fragment {
    /// A whole datagram.
    None,
    /// The first fragment of a datagram: it has the L4 header, not all data.
    First,
}

/// The per-packet summary `parse` produces. Offsets are from the frame start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed {
    /// Network layer.
    pub l3: L3,
    /// 802.1Q VLAN id, if the frame was tagged.
    pub vlan: Option<u16>,
    /// Offset of the IP (or ARP) header: 14, or 18 when tagged.
    pub l3_offset: u16,
    /// Offset of the L4 header (after IPv4 options / IPv6 extensions).
    pub l4_offset: u16,
    /// End of the IP packet (total length / payload length): where padding starts.
    pub end: u32,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol / upper-layer next header; 0 for ARP.
    pub protocol: u8,
    /// TCP/UDP source port; the identifier for ICMP(v6) echo; else 0.
    pub src_port: u16,
    /// TCP/UDP destination port; the identifier for ICMP(v6) echo; else 0.
    pub dst_port: u16,
    /// TCP flags; empty for anything else.
    pub tcp_flags: TcpFlags,
    /// ICMP(v6) type; 0 for non-ICMP (check `protocol` first).
    pub icmp_type: u8,
    /// ICMP(v6) code.
    pub icmp_code: u8,
    /// IPv4 TTL or IPv6 hop limit; 0 for ARP.
    pub ttl: u8,
    /// Fragment status.
    pub fragment: Fragment,
    /// Whether this is an ICMP(v6) error quoting another packet.
    pub icmp_error: bool,
}

impl Parsed {
    /// The L4 header and data (`l4_offset..end`) of the frame this came from.
    #[inline]
    pub fn l4<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        frame
            .get(usize::from(self.l4_offset)..self.end as usize)
            .unwrap_or(&[])
    }

    /// For an ICMP(v6) error, the flow of the quoted packet.
    pub fn quoted(&self, frame: &[u8]) -> Result<Quoted, DropReason> {
        if !self.icmp_error {
            return Err(DropReason::MalformedIcmp);
        }
        let quote = self
            .l4(frame)
            .get(icmpv4::HEADER_LEN..)
            .ok_or(DropReason::MalformedIcmp)?;
        match self.l3 {
            L3::Ipv4 => icmpv4::parse_quoted_v4(quote),
            _ => icmpv6::parse_quoted_v6(quote),
        }
    }
}

/// Parse a frame with all checksums checked in software.
#[inline]
pub fn parse(frame: &[u8]) -> Result<Parsed, DropReason> {
    parse_with(frame, &ChecksumOffload::NONE)
}

/// Parse a frame, skipping the checks the NIC has already done.
#[inline]
pub fn parse_with(frame: &[u8], offload: &ChecksumOffload) -> Result<Parsed, DropReason> {
    let eth = EthernetFrame::new_checked(frame)?;
    let l3 = eth.header_len();
    let vlan = eth.vlan_id();
    match eth.ethertype() {
        ETHERTYPE_IPV4 => parse_ipv4(frame, l3, vlan, !offload.rx_ipv4_verified),
        ETHERTYPE_IPV6 => parse_ipv6(frame, l3, vlan),
        ETHERTYPE_ARP => parse_arp(frame, l3, vlan),
        _ => Err(DropReason::UnsupportedEtherType),
    }
}

#[inline(always)]
fn parse_ipv4(frame: &[u8], l3: usize, vlan: Option<u16>, verify: bool) -> Result<Parsed, DropReason> {
    let ip = Ipv4Packet::new_checked(&frame[l3..])?;
    if verify && !ip.verify_checksum() {
        return Err(DropReason::MalformedIpv4);
    }
    if ip.header_len() > super::ipv4::MIN_HEADER_LEN {
        ip.check_options()?;
    }
    let fragment = if !ip.is_fragment() {
        Fragment::None
    } else if ip.is_first_fragment() {
        Fragment::First
    } else {
        return Err(DropReason::Fragment);
    };
    let l4_offset = l3 + ip.header_len();
    let end = l3 + usize::from(ip.total_len());
    let mut p = Parsed {
        l3: L3::Ipv4,
        vlan,
        l3_offset: l3 as u16,
        l4_offset: l4_offset as u16,
        end: end as u32,
        src: IpAddr::V4(ip.src_addr()),
        dst: IpAddr::V4(ip.dst_addr()),
        protocol: ip.protocol(),
        src_port: 0,
        dst_port: 0,
        tcp_flags: TcpFlags::default(),
        icmp_type: 0,
        icmp_code: 0,
        ttl: ip.ttl(),
        fragment,
        icmp_error: false,
    };
    fill_l4(&mut p, &frame[l4_offset..end], false)?;
    Ok(p)
}

#[inline(always)]
fn parse_ipv6(frame: &[u8], l3: usize, vlan: Option<u16>) -> Result<Parsed, DropReason> {
    let ip = Ipv6Packet::new_checked(&frame[l3..])?;
    let next = ip.next_header();
    let (protocol, ext_len, fragment) = match next {
        // Fast path: no extension headers.
        ip_proto::TCP | ip_proto::UDP | ip_proto::ICMPV6 => (next, 0, Fragment::None),
        _ => {
            let up = ip.upper_layer()?;
            let fragment = match up.fragment {
                None => Fragment::None,
                Some(f) if f.is_atomic() => Fragment::None,
                Some(f) if f.is_first() => Fragment::First,
                Some(_) => return Err(DropReason::Fragment),
            };
            (up.protocol, up.offset, fragment)
        }
    };
    let l4_offset = l3 + ipv6::HEADER_LEN + ext_len;
    let end = l3 + ipv6::HEADER_LEN + usize::from(ip.payload_len());
    let mut p = Parsed {
        l3: L3::Ipv6,
        vlan,
        l3_offset: l3 as u16,
        l4_offset: l4_offset as u16,
        end: end as u32,
        src: IpAddr::V6(ip.src_addr()),
        dst: IpAddr::V6(ip.dst_addr()),
        protocol,
        src_port: 0,
        dst_port: 0,
        tcp_flags: TcpFlags::default(),
        icmp_type: 0,
        icmp_code: 0,
        ttl: ip.hop_limit(),
        fragment,
        icmp_error: false,
    };
    fill_l4(&mut p, &frame[l4_offset..end], true)?;
    Ok(p)
}

/// Fill the L4 fields of `p` from `l4`. Writing straight into the result,
/// rather than returning a small struct to copy, keeps the compiler from
/// reloading that struct with one wide load over several narrow stores (a
/// store-forwarding stall that cost ~10 ns per packet).
#[inline(always)]
fn fill_l4(p: &mut Parsed, l4: &[u8], v6: bool) -> Result<(), DropReason> {
    match p.protocol {
        ip_proto::TCP => {
            let tcp = TcpPacket::new_checked(l4)?;
            p.src_port = tcp.src_port();
            p.dst_port = tcp.dst_port();
            p.tcp_flags = tcp.flags();
        }
        ip_proto::UDP => {
            // A first fragment holds only part of the datagram the UDP length
            // describes, so only the header can be checked there.
            let udp = if p.fragment == Fragment::None {
                UdpPacket::new_checked(l4)?
            } else if l4.len() >= super::udp::HEADER_LEN {
                UdpPacket::new_unchecked(l4)
            } else {
                return Err(DropReason::MalformedUdp);
            };
            if v6 && udp.checksum() == 0 {
                return Err(DropReason::MalformedUdp);
            }
            p.src_port = udp.src_port();
            p.dst_port = udp.dst_port();
        }
        ip_proto::ICMP if !v6 => {
            let t = fill_icmp(p, l4)?;
            let echo = t == icmpv4::msg_type::ECHO_REQUEST || t == icmpv4::msg_type::ECHO_REPLY;
            p.icmp_error = icmpv4::is_error_type(t);
            fill_echo_id(p, l4, echo);
        }
        ip_proto::ICMPV6 if v6 => {
            let t = fill_icmp(p, l4)?;
            let echo = t == icmpv6::msg_type::ECHO_REQUEST || t == icmpv6::msg_type::ECHO_REPLY;
            p.icmp_error = t < 128;
            fill_echo_id(p, l4, echo);
        }
        _ => return Err(unsupported(p.dst)),
    }
    Ok(())
}

/// The drop of a protocol the pipeline does not read: `NotUnicast` to a
/// group or martian address (IGMP queries and reports, routing protocols'
/// hellos: a segment's chatter), `UnsupportedProtocol` otherwise.
#[cold]
#[inline(never)]
fn unsupported(dst: IpAddr) -> DropReason {
    if crate::reject::names_one_host(dst) {
        DropReason::UnsupportedProtocol
    } else {
        DropReason::NotUnicast
    }
}

#[inline(always)]
fn fill_icmp(p: &mut Parsed, l4: &[u8]) -> Result<u8, DropReason> {
    if l4.len() < icmpv4::HEADER_LEN {
        return Err(DropReason::MalformedIcmp);
    }
    p.icmp_type = l4[0];
    p.icmp_code = l4[1];
    Ok(l4[0])
}

#[inline(always)]
fn fill_echo_id(p: &mut Parsed, l4: &[u8], echo: bool) {
    if echo {
        let id = be16(&l4[4..6]);
        p.src_port = id;
        p.dst_port = id;
    }
}

#[inline]
fn parse_arp(frame: &[u8], l3: usize, vlan: Option<u16>) -> Result<Parsed, DropReason> {
    let arp = ArpPacket::new_checked(&frame[l3..])?;
    let end = l3 + super::arp::PACKET_LEN;
    Ok(Parsed {
        l3: L3::Arp,
        vlan,
        l3_offset: l3 as u16,
        l4_offset: end as u16,
        end: end as u32,
        src: IpAddr::V4(arp.sender_ip()),
        dst: IpAddr::V4(arp.target_ip()),
        protocol: 0,
        src_port: 0,
        dst_port: 0,
        tcp_flags: TcpFlags::default(),
        icmp_type: 0,
        icmp_code: 0,
        ttl: 0,
        fragment: Fragment::None,
        icmp_error: false,
    })
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
