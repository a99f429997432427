//! An independent packet builder and checksum checker for the golden tests.
//!
//! Every byte of every frame comes from etherparse (headers, lengths and
//! checksums), never from `lb_dataplane::wire` or `lb_dataplane::checksum`,
//! so a bug in our own wire code cannot cancel out between input, output
//! and expectation. [`Pkt`] is a description of one frame that a case can
//! copy and edit (new addresses, ports, TTL, MACs) to state the expected
//! output; [`verify_checksums`] recomputes every checksum of a frame,
//! including those of the packet quoted in an ICMP error.

#![allow(dead_code)]

use std::net::IpAddr;

use etherparse::{
    ArpEthIpv4Packet, ArpOperation, EtherType, Ethernet2Header, IcmpEchoHeader, Icmpv4Header, Icmpv4Type,
    Icmpv6Header, Icmpv6Type, IpFragOffset, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6FragmentHeader,
    Ipv6Header, Ipv6RawExtHeader, NetSlice, SingleVlanHeader, SlicedPacket, TcpHeader, TransportSlice,
    UdpHeader, VlanId, VlanPcp,
};

/// An endpoint as the tables write it: ("10.0.0.2", 40000).
pub type Ep = (&'static str, u16);

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("bad address {s}: {e}"))
}

/// Which part of the datagram this packet carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frag {
    /// The whole datagram.
    Whole,
    /// The first fragment: the first `len` bytes of the L4 datagram (a
    /// multiple of 8), more-fragments set.
    First { len: usize },
    /// A later fragment: L4 bytes from `offset` (a multiple of 8) to the
    /// end, more-fragments clear.
    Last { offset: usize },
}

/// The transport layer of a [`Pkt`].
#[derive(Clone, Debug)]
pub enum L4 {
    /// TCP; `flags` holds any of "SAFRP", and '0' for a zero window.
    Tcp {
        sport: u16,
        dport: u16,
        seq: u32,
        ack: u32,
        flags: &'static str,
        payload: Vec<u8>,
    },
    /// UDP; `zero_checksum` sends checksum 0 ("none", IPv4 only).
    Udp {
        sport: u16,
        dport: u16,
        zero_checksum: bool,
        payload: Vec<u8>,
    },
    /// ICMPv4 of any type, with `payload` after the 8-byte header.
    Icmp4 { ty: Icmpv4Type, payload: Vec<u8> },
    /// ICMPv6 of any type, with `payload` after the 8-byte header.
    Icmp6 { ty: Icmpv6Type, payload: Vec<u8> },
}

/// One Ethernet/IP frame, described field by field.
#[derive(Clone, Debug)]
pub struct Pkt {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub vlan: Option<u16>,
    pub src: IpAddr,
    pub dst: IpAddr,
    /// TTL or hop limit.
    pub ttl: u8,
    /// IPv4 identification / IPv6 fragment identification.
    pub ident: u16,
    /// IPv4 options (a multiple of 4 bytes).
    pub v4_options: Vec<u8>,
    /// IPv6 destination-options header data (6, 14, 22... bytes).
    pub v6_dest_opts: Option<Vec<u8>>,
    pub frag: Frag,
    pub l4: L4,
    /// Zero bytes after the IP packet (Ethernet padding).
    pub pad: usize,
}

impl Pkt {
    fn new(src: IpAddr, dst: IpAddr, l4: L4) -> Pkt {
        assert_eq!(src.is_ipv4(), dst.is_ipv4(), "one family per packet");
        Pkt {
            src_mac: [0; 6],
            dst_mac: [0; 6],
            vlan: None,
            src,
            dst,
            ttl: 64,
            ident: 0,
            v4_options: Vec::new(),
            v6_dest_opts: None,
            frag: Frag::Whole,
            l4,
            pad: 0,
        }
    }

    /// A TCP segment with `flags` (any of "SAFRP"), seq 1000, ack 1 when 'A'.
    pub fn tcp(src: Ep, dst: Ep, flags: &'static str) -> Pkt {
        let l4 = L4::Tcp {
            sport: src.1,
            dport: dst.1,
            seq: 1000,
            ack: if flags.contains('A') { 1 } else { 0 },
            flags,
            payload: Vec::new(),
        };
        Pkt::new(ip(src.0), ip(dst.0), l4)
    }

    pub fn udp(src: Ep, dst: Ep, payload: &[u8]) -> Pkt {
        let l4 = L4::Udp {
            sport: src.1,
            dport: dst.1,
            zero_checksum: false,
            payload: payload.to_vec(),
        };
        Pkt::new(ip(src.0), ip(dst.0), l4)
    }

    /// An ICMP (IPv4) or ICMPv6 echo request or reply.
    pub fn echo(src: &str, dst: &str, reply: bool, id: u16, seq: u16, payload: &[u8]) -> Pkt {
        let (src, dst) = (ip(src), ip(dst));
        let echo = IcmpEchoHeader { id, seq };
        let payload = payload.to_vec();
        let l4 = match (src.is_ipv4(), reply) {
            (true, false) => L4::Icmp4 {
                ty: Icmpv4Type::EchoRequest(echo),
                payload,
            },
            (true, true) => L4::Icmp4 {
                ty: Icmpv4Type::EchoReply(echo),
                payload,
            },
            (false, false) => L4::Icmp6 {
                ty: Icmpv6Type::EchoRequest(echo),
                payload,
            },
            (false, true) => L4::Icmp6 {
                ty: Icmpv6Type::EchoReply(echo),
                payload,
            },
        };
        Pkt::new(src, dst, l4)
    }

    pub fn icmp4(src: &str, dst: &str, ty: Icmpv4Type, payload: Vec<u8>) -> Pkt {
        Pkt::new(ip(src), ip(dst), L4::Icmp4 { ty, payload })
    }

    pub fn icmp6(src: &str, dst: &str, ty: Icmpv6Type, payload: Vec<u8>) -> Pkt {
        Pkt::new(ip(src), ip(dst), L4::Icmp6 { ty, payload })
    }

    pub fn macs(mut self, src: [u8; 6], dst: [u8; 6]) -> Pkt {
        self.src_mac = src;
        self.dst_mac = dst;
        self
    }

    pub fn ttl(mut self, ttl: u8) -> Pkt {
        self.ttl = ttl;
        self
    }

    pub fn vlan(mut self, id: u16) -> Pkt {
        self.vlan = Some(id);
        self
    }

    pub fn ident(mut self, ident: u16) -> Pkt {
        self.ident = ident;
        self
    }

    pub fn v4_options(mut self, opts: &[u8]) -> Pkt {
        self.v4_options = opts.to_vec();
        self
    }

    pub fn v6_dest_opts(mut self, data: &[u8]) -> Pkt {
        self.v6_dest_opts = Some(data.to_vec());
        self
    }

    pub fn frag(mut self, frag: Frag) -> Pkt {
        self.frag = frag;
        self
    }

    pub fn pad(mut self, n: usize) -> Pkt {
        self.pad = n;
        self
    }

    pub fn payload(mut self, data: &[u8]) -> Pkt {
        match &mut self.l4 {
            L4::Tcp { payload, .. } | L4::Udp { payload, .. } => *payload = data.to_vec(),
            L4::Icmp4 { payload, .. } | L4::Icmp6 { payload, .. } => *payload = data.to_vec(),
        }
        self
    }

    pub fn seq_ack(mut self, s: u32, a: u32) -> Pkt {
        if let L4::Tcp { seq, ack, .. } = &mut self.l4 {
            *seq = s;
            *ack = a;
        }
        self
    }

    pub fn zero_udp_checksum(mut self) -> Pkt {
        if let L4::Udp { zero_checksum, .. } = &mut self.l4 {
            *zero_checksum = true;
        }
        self
    }

    /// New addresses and ports (the echo identifier is not touched).
    pub fn endpoints(mut self, src: Ep, dst: Ep) -> Pkt {
        self.src = ip(src.0);
        self.dst = ip(dst.0);
        match &mut self.l4 {
            L4::Tcp { sport, dport, .. } | L4::Udp { sport, dport, .. } => {
                *sport = src.1;
                *dport = dst.1;
            }
            L4::Icmp4 { .. } | L4::Icmp6 { .. } => {}
        }
        self
    }

    /// New addresses only.
    pub fn addrs(mut self, src: &str, dst: &str) -> Pkt {
        self.src = ip(src);
        self.dst = ip(dst);
        self
    }

    fn v4(&self) -> ([u8; 4], [u8; 4]) {
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => (s.octets(), d.octets()),
            _ => panic!("not IPv4"),
        }
    }

    fn v6(&self) -> ([u8; 16], [u8; 16]) {
        match (self.src, self.dst) {
            (IpAddr::V6(s), IpAddr::V6(d)) => (s.octets(), d.octets()),
            _ => panic!("not IPv6"),
        }
    }

    fn protocol(&self) -> IpNumber {
        match self.l4 {
            L4::Tcp { .. } => IpNumber::TCP,
            L4::Udp { .. } => IpNumber::UDP,
            L4::Icmp4 { .. } => IpNumber::ICMP,
            L4::Icmp6 { .. } => IpNumber::IPV6_ICMP,
        }
    }

    /// The whole L4 datagram with its checksum, computed by etherparse.
    pub fn l4_bytes(&self) -> Vec<u8> {
        let v4 = self.src.is_ipv4();
        let mut out = Vec::new();
        match &self.l4 {
            L4::Tcp {
                sport,
                dport,
                seq,
                ack,
                flags,
                payload,
            } => {
                let window = if flags.contains('0') { 0 } else { 64000 };
                let mut h = TcpHeader::new(*sport, *dport, *seq, window);
                h.acknowledgment_number = *ack;
                h.syn = flags.contains('S');
                h.ack = flags.contains('A');
                h.fin = flags.contains('F');
                h.rst = flags.contains('R');
                h.psh = flags.contains('P');
                h.checksum = if v4 {
                    let (s, d) = self.v4();
                    h.calc_checksum_ipv4_raw(s, d, payload).unwrap()
                } else {
                    let (s, d) = self.v6();
                    h.calc_checksum_ipv6_raw(s, d, payload).unwrap()
                };
                out.extend_from_slice(&h.to_bytes());
                out.extend_from_slice(payload);
            }
            L4::Udp {
                sport,
                dport,
                zero_checksum,
                payload,
            } => {
                let mut h = UdpHeader {
                    source_port: *sport,
                    destination_port: *dport,
                    length: (8 + payload.len()) as u16,
                    checksum: 0,
                };
                if !*zero_checksum {
                    h.checksum = if v4 {
                        let (s, d) = self.v4();
                        h.calc_checksum_ipv4_raw(s, d, payload).unwrap()
                    } else {
                        let (s, d) = self.v6();
                        h.calc_checksum_ipv6_raw(s, d, payload).unwrap()
                    };
                }
                out.extend_from_slice(&h.to_bytes());
                out.extend_from_slice(payload);
            }
            L4::Icmp4 { ty, payload } => {
                let h = Icmpv4Header::with_checksum(ty.clone(), payload);
                out.extend_from_slice(&h.to_bytes());
                out.extend_from_slice(payload);
            }
            L4::Icmp6 { ty, payload } => {
                let (s, d) = self.v6();
                let h = Icmpv6Header::with_checksum(*ty, s, d, payload).unwrap();
                out.extend_from_slice(&h.to_bytes());
                out.extend_from_slice(payload);
            }
        }
        out
    }

    /// The IP packet (headers and this fragment of the L4 datagram).
    pub fn ip_bytes(&self) -> Vec<u8> {
        let l4 = self.l4_bytes();
        let (part, offset, more) = match self.frag {
            Frag::Whole => (&l4[..], 0, false),
            Frag::First { len } => (&l4[..len], 0, true),
            Frag::Last { offset } => (&l4[offset..], offset, false),
        };
        let mut out = Vec::new();
        if self.src.is_ipv4() {
            let (s, d) = self.v4();
            let mut h = Ipv4Header::new(0, self.ttl, self.protocol(), s, d).unwrap();
            h.options = self.v4_options[..].try_into().unwrap();
            h.set_payload_len(part.len()).unwrap();
            h.identification = self.ident;
            h.more_fragments = more;
            h.fragment_offset = IpFragOffset::try_new((offset / 8) as u16).unwrap();
            h.header_checksum = h.calc_header_checksum();
            out.extend_from_slice(&h.to_bytes());
        } else {
            let (s, d) = self.v6();
            let mut exts = Vec::new();
            let mut next = self.protocol();
            if self.frag != Frag::Whole {
                let f = Ipv6FragmentHeader {
                    next_header: next,
                    fragment_offset: IpFragOffset::try_new((offset / 8) as u16).unwrap(),
                    more_fragments: more,
                    identification: u32::from(self.ident),
                };
                exts.splice(0..0, f.to_bytes());
                next = IpNumber::IPV6_FRAGMENTATION_HEADER;
            }
            if let Some(data) = &self.v6_dest_opts {
                let h = Ipv6RawExtHeader::new_raw(next, data).unwrap();
                exts.splice(0..0, h.to_bytes());
                next = IpNumber::IPV6_DESTINATION_OPTIONS;
            }
            let h = Ipv6Header {
                traffic_class: 0,
                flow_label: Ipv6FlowLabel::ZERO,
                payload_length: (exts.len() + part.len()) as u16,
                next_header: next,
                hop_limit: self.ttl,
                source: s,
                destination: d,
            };
            out.extend_from_slice(&h.to_bytes());
            out.extend_from_slice(&exts);
        }
        out.extend_from_slice(part);
        out
    }

    /// The Ethernet frame.
    pub fn frame(&self) -> Vec<u8> {
        let ether_type = if self.src.is_ipv4() {
            EtherType::IPV4
        } else {
            EtherType::IPV6
        };
        let mut out = l2(self.src_mac, self.dst_mac, self.vlan, ether_type);
        out.extend_from_slice(&self.ip_bytes());
        out.resize(out.len() + self.pad, 0);
        out
    }
}

/// Ethernet header, with an 802.1Q tag when `vlan` is set.
pub fn l2(src: [u8; 6], dst: [u8; 6], vlan: Option<u16>, ether_type: EtherType) -> Vec<u8> {
    let mut out = Vec::new();
    let outer = if vlan.is_some() {
        EtherType::VLAN_TAGGED_FRAME
    } else {
        ether_type
    };
    out.extend_from_slice(
        &Ethernet2Header {
            source: src,
            destination: dst,
            ether_type: outer,
        }
        .to_bytes(),
    );
    if let Some(id) = vlan {
        let tag = SingleVlanHeader {
            pcp: VlanPcp::ZERO,
            drop_eligible_indicator: false,
            vlan_id: VlanId::try_new(id).unwrap(),
            ether_type,
        };
        out.extend_from_slice(&tag.to_bytes());
    }
    out
}

/// An Ethernet/IPv4 ARP frame.
#[derive(Clone, Debug)]
pub struct Arp {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub vlan: Option<u16>,
    pub reply: bool,
    pub sender: ([u8; 6], &'static str),
    pub target: ([u8; 6], &'static str),
    pub pad: usize,
}

impl Arp {
    pub fn frame(&self) -> Vec<u8> {
        let v4 = |s: &str| match ip(s) {
            IpAddr::V4(a) => a.octets(),
            _ => panic!("ARP is IPv4"),
        };
        let p = ArpEthIpv4Packet {
            operation: if self.reply {
                ArpOperation::REPLY
            } else {
                ArpOperation::REQUEST
            },
            sender_mac: self.sender.0,
            sender_ipv4: v4(self.sender.1),
            target_mac: self.target.0,
            target_ipv4: v4(self.target.1),
        };
        let mut out = l2(self.src_mac, self.dst_mac, self.vlan, EtherType::ARP);
        out.extend_from_slice(&p.to_bytes());
        out.resize(out.len() + self.pad, 0);
        out
    }
}

/// Recomputes, with etherparse, every checksum of `frame`: the IPv4 header,
/// TCP/UDP/ICMP/ICMPv6, and for ICMP errors the quoted IPv4 header and the
/// quoted L4 checksum when the quote holds the whole datagram. Fragments'
/// L4 checksums cover bytes that are not in the frame; the golden
/// comparison covers them.
pub fn verify_checksums(frame: &[u8]) -> Result<(), String> {
    let s =
        SlicedPacket::from_ethernet(frame).map_err(|e| format!("etherparse cannot parse the output: {e}"))?;
    verify_sliced(&s, "outer")
}

fn verify_sliced(s: &SlicedPacket, what: &str) -> Result<(), String> {
    let (v4, v6) = match &s.net {
        Some(NetSlice::Ipv4(ip)) => {
            let h = ip.header().to_header();
            if h.calc_header_checksum() != h.header_checksum {
                return Err(format!(
                    "{what} IPv4 header checksum {:#06x} is wrong",
                    h.header_checksum
                ));
            }
            (Some((h.source, h.destination)), None)
        }
        Some(NetSlice::Ipv6(ip)) => {
            let h = ip.header();
            (None, Some((h.source(), h.destination())))
        }
        Some(NetSlice::Arp(_)) => return Ok(()),
        None => return Err(format!("{what}: no IP header")),
    };
    let Some(t) = &s.transport else {
        // A fragment: nothing more to check here.
        return Ok(());
    };
    let (ok, name) = match t {
        TransportSlice::Tcp(tcp) => {
            let h = tcp.to_header();
            let want = match (v4, v6) {
                (Some((a, b)), _) => h.calc_checksum_ipv4_raw(a, b, tcp.payload()),
                (_, Some((a, b))) => h.calc_checksum_ipv6_raw(a, b, tcp.payload()),
                _ => unreachable!(),
            }
            .map_err(|e| e.to_string())?;
            (want == tcp.checksum(), "TCP")
        }
        TransportSlice::Udp(udp) => {
            let h = udp.to_header();
            let ok = match (v4, v6) {
                (Some(_), _) if udp.checksum() == 0 => true,
                (Some((a, b)), _) => {
                    h.calc_checksum_ipv4_raw(a, b, udp.payload())
                        .map_err(|e| e.to_string())?
                        == udp.checksum()
                }
                (_, Some((a, b))) => {
                    h.calc_checksum_ipv6_raw(a, b, udp.payload())
                        .map_err(|e| e.to_string())?
                        == udp.checksum()
                }
                _ => unreachable!(),
            };
            (ok, "UDP")
        }
        TransportSlice::Icmpv4(icmp) => {
            let want = Icmpv4Header::with_checksum(icmp.icmp_type(), icmp.payload()).checksum;
            if want != icmp.checksum() {
                return Err(format!("{what} ICMP checksum is wrong"));
            }
            if icmp_v4_is_error(icmp.icmp_type()) {
                verify_quote(icmp.payload(), what)?;
            }
            (true, "ICMP")
        }
        TransportSlice::Icmpv6(icmp) => {
            let (a, b) = v6.ok_or("ICMPv6 over IPv4")?;
            if !icmp.is_checksum_valid(a, b) {
                return Err(format!("{what} ICMPv6 checksum is wrong"));
            }
            if icmp.type_u8() < 128 {
                verify_quote(icmp.payload(), what)?;
            }
            (true, "ICMPv6")
        }
        _ => return Err(format!("{what}: unexpected transport")),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{what} {name} checksum is wrong"))
    }
}

fn icmp_v4_is_error(t: Icmpv4Type) -> bool {
    matches!(
        t,
        Icmpv4Type::DestinationUnreachable(_)
            | Icmpv4Type::TimeExceeded(_)
            | Icmpv4Type::ParameterProblem(_)
            | Icmpv4Type::Redirect(_)
    )
}

/// The packet quoted in an ICMP error: IPv4 header checksum always; the
/// L4 checksum when the whole datagram is quoted.
fn verify_quote(quote: &[u8], what: &str) -> Result<(), String> {
    let what = format!("{what} quoted");
    let whole_len = match quote.first().map(|b| b >> 4) {
        Some(4) => {
            let h = etherparse::Ipv4HeaderSlice::from_slice(quote).map_err(|e| format!("{what}: {e}"))?;
            let h = h.to_header();
            if h.calc_header_checksum() != h.header_checksum {
                return Err(format!("{what} IPv4 header checksum is wrong"));
            }
            usize::from(h.total_len)
        }
        Some(6) if quote.len() >= 40 => 40 + usize::from(u16::from_be_bytes([quote[4], quote[5]])),
        _ => return Err(format!("{what}: not an IP packet")),
    };
    if whole_len <= quote.len() {
        let s = SlicedPacket::from_ip(&quote[..whole_len]).map_err(|e| format!("{what}: {e}"))?;
        verify_sliced(&s, &what)?;
    }
    Ok(())
}
