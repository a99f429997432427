//! Golden tests: every input frame and every expected output frame is built
//! independently with etherparse (which computes all checksums from
//! scratch), the rewrite must produce the expected bytes exactly, and every
//! checksum of the output is verified again by full recomputation.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{
    IpFragOffset, IpHeaders, IpNumber, Ipv4Header, Ipv6Extensions, Ipv6Header, Ipv6RawExtHeader,
    Ipv6RoutingExtensions, PacketBuilder, PacketBuilderStep, VlanId,
};

use super::*;
use crate::checksum::{self, fold, pseudo_header_v4, pseudo_header_v6, verify_l4};
use crate::conntrack::Endpoint;
use crate::wire::parse;

pub(super) const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
pub(super) const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

/// The transport of a test packet. For echo, the identifier is `sport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tp {
    Tcp,
    Udp,
    EchoReq,
    EchoRep,
}

/// A test packet, as etherparse should build it.
#[derive(Debug, Clone)]
pub(super) struct Spec {
    pub src: Endpoint,
    pub dst: Endpoint,
    pub ttl: u8,
    pub tp: Tp,
    pub vlan: Option<u16>,
    /// IPv4: a 4-byte router-alert option. IPv6: a destination-options header.
    pub ip_ext: bool,
    /// UDP over IPv4 sent without a checksum.
    pub udp_no_checksum: bool,
    pub payload: Vec<u8>,
}

impl Spec {
    pub fn new(tp: Tp, src: Endpoint, dst: Endpoint) -> Spec {
        Spec {
            src,
            dst,
            ttl: 64,
            tp,
            vlan: None,
            ip_ext: false,
            udp_no_checksum: false,
            payload: b"payload bytes".to_vec(),
        }
    }

    /// What the packet must look like after `rw`: new endpoints (for echo the
    /// identifier per the module doc's rule) and TTL - 1.
    pub fn translated(&self, rw: &Rewrite) -> Spec {
        let mut s = self.clone();
        s.ttl -= 1;
        s.src = rw.src;
        s.dst = rw.dst;
        match self.tp {
            Tp::EchoReq => s.src.1 = rw.src.1,
            Tp::EchoRep => s.src.1 = rw.dst.1,
            _ => {}
        }
        s
    }

    pub fn build(&self) -> Vec<u8> {
        let eth = PacketBuilder::ethernet2(MAC_A, MAC_B);
        let ip = match (self.src.0, self.dst.0) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut h = Ipv4Header::new(0, self.ttl, IpNumber::TCP, s.octets(), d.octets()).unwrap();
                h.identification = 0x4242;
                if self.ip_ext {
                    h.options = [0x94u8, 4, 0, 0].into();
                }
                IpHeaders::Ipv4(h, Default::default())
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let h = Ipv6Header {
                    hop_limit: self.ttl,
                    source: s.octets(),
                    destination: d.octets(),
                    ..Default::default()
                };
                let mut ext = Ipv6Extensions::default();
                if self.ip_ext {
                    // PadN option, 8 bytes in all.
                    ext.destination_options =
                        Some(Ipv6RawExtHeader::new_raw(IpNumber::TCP, &[1, 4, 0, 0, 0, 0]).unwrap());
                }
                IpHeaders::Ipv6(h, ext)
            }
            _ => panic!("mixed families in a spec"),
        };
        let b = match self.vlan {
            Some(id) => eth.single_vlan(VlanId::try_new(id).unwrap()).ip(ip),
            None => eth.ip(ip),
        };
        let mut v = write_l4(
            b,
            self.tp,
            self.src.0.is_ipv6(),
            self.src.1,
            self.dst.1,
            &self.payload,
        );
        if self.udp_no_checksum {
            let p = parse(&v).unwrap();
            let at = usize::from(p.l4_offset) + 6;
            v[at..at + 2].copy_from_slice(&[0, 0]);
        }
        v
    }
}

pub(super) fn write_l4(
    b: PacketBuilderStep<IpHeaders>,
    tp: Tp,
    v6: bool,
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut v = Vec::new();
    match (tp, v6) {
        (Tp::Tcp, _) => b
            .tcp(sport, dport, 0x0102_0304, 8192)
            .ack(77)
            .write(&mut v, payload),
        (Tp::Udp, _) => b.udp(sport, dport).write(&mut v, payload),
        (Tp::EchoReq, false) => b.icmpv4_echo_request(sport, 9).write(&mut v, payload),
        (Tp::EchoRep, false) => b.icmpv4_echo_reply(sport, 9).write(&mut v, payload),
        (Tp::EchoReq, true) => b.icmpv6_echo_request(sport, 9).write(&mut v, payload),
        (Tp::EchoRep, true) => b.icmpv6_echo_reply(sport, 9).write(&mut v, payload),
    }
    .unwrap();
    v
}

pub(super) fn v4(a: [u8; 4], port: u16) -> Endpoint {
    (IpAddr::V4(Ipv4Addr::from(a)), port)
}

pub(super) fn v6(a: &str, port: u16) -> Endpoint {
    (IpAddr::V6(a.parse::<Ipv6Addr>().unwrap()), port)
}

pub(super) fn rw(src: Endpoint, dst: Endpoint) -> Rewrite {
    Rewrite { src, dst }
}

/// Verify every checksum of a TCP/UDP/ICMP frame by full recomputation:
/// the IPv4 header, and the L4 checksum over the pseudo-header (ICMPv4:
/// over the message alone). A UDP/IPv4 zero checksum is accepted as "none".
/// For ICMP errors the quoted IPv4 header checksum is checked too.
pub(super) fn assert_checksums_valid(frame: &[u8]) {
    let p = parse(frame).expect("output parses (IPv4 header checksum included)");
    let l3 = &frame[usize::from(p.l3_offset)..usize::from(p.l4_offset)];
    let l4 = p.l4(frame);
    let len = l4.len();
    let pseudo = match (p.src, p.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            assert_eq!(fold(checksum::sum(l3)), 0xffff, "IPv4 header checksum");
            pseudo_header_v4(s, d, p.protocol, len as u16)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => pseudo_header_v6(&s, &d, p.protocol, len as u32),
        _ => unreachable!(),
    };
    match p.protocol {
        ip_proto::UDP if p.l3 == L3::Ipv4 && l4[6..8] == [0, 0] => {}
        ip_proto::ICMP => assert_eq!(fold(checksum::sum(l4)), 0xffff, "ICMPv4 checksum"),
        _ => assert!(verify_l4(pseudo, l4), "L4 checksum, protocol {}", p.protocol),
    }
    if p.icmp_error && p.l3 == L3::Ipv4 {
        let q = &l4[8..];
        let ihl = usize::from(q[0] & 0xf) * 4;
        assert_eq!(
            fold(checksum::sum(&q[..ihl])),
            0xffff,
            "quoted IPv4 header checksum"
        );
    }
}

/// One golden case: `input` rewritten with `rw` must equal `expected`.
struct Case {
    desc: &'static str,
    input: Spec,
    rw: Rewrite,
}

const C4: [u8; 4] = [198, 51, 100, 7];
const VIP4: [u8; 4] = [192, 0, 2, 10];
const B4: [u8; 4] = [10, 1, 2, 3];
const SNAT4: [u8; 4] = [10, 255, 0, 1];
const C6: &str = "2001:db8:c::7";
const VIP6: &str = "2001:db8:f::10";
const B6: &str = "fd00:1::3";
const SNAT6: &str = "fd00:ff::1";

fn cases() -> Vec<Case> {
    let tcp4 = Spec::new(Tp::Tcp, v4(C4, 40000), v4(VIP4, 443));
    let udp4 = Spec::new(Tp::Udp, v4(C4, 5353), v4(VIP4, 53));
    let tcp6 = Spec::new(Tp::Tcp, v6(C6, 40000), v6(VIP6, 443));
    let udp6 = Spec::new(Tp::Udp, v6(C6, 5353), v6(VIP6, 53));
    let dnat4 = rw(v4(C4, 40000), v4(B4, 8443));
    let full4 = rw(v4(SNAT4, 61001), v4(B4, 8443));
    let full6 = rw(v6(SNAT6, 61001), v6(B6, 8443));
    let mut v = vec![
        Case {
            desc: "DNAT v4 TCP",
            input: tcp4.clone(),
            rw: dnat4,
        },
        Case {
            desc: "full-NAT v4 TCP",
            input: tcp4.clone(),
            rw: full4,
        },
        Case {
            desc: "reply v4 TCP (backend -> client, un-NAT)",
            input: Spec::new(Tp::Tcp, v4(B4, 8443), v4(SNAT4, 61001)),
            rw: rw(v4(VIP4, 443), v4(C4, 40000)),
        },
        Case {
            desc: "UDP v4 with checksum",
            input: udp4.clone(),
            rw: rw(v4(SNAT4, 61002), v4(B4, 5300)),
        },
        Case {
            desc: "UDP v4 without checksum (zero stays zero)",
            input: Spec {
                udp_no_checksum: true,
                ..udp4.clone()
            },
            rw: rw(v4(SNAT4, 61002), v4(B4, 5300)),
        },
        Case {
            desc: "DNAT v6 TCP",
            input: tcp6.clone(),
            rw: rw(v6(C6, 40000), v6(B6, 8443)),
        },
        Case {
            desc: "full-NAT v6 TCP",
            input: tcp6.clone(),
            rw: full6,
        },
        Case {
            desc: "full-NAT v6 UDP",
            input: udp6.clone(),
            rw: rw(v6(SNAT6, 61003), v6(B6, 5300)),
        },
        Case {
            desc: "ICMPv4 echo request, full-NAT: identifier := rw.src.1",
            input: Spec::new(Tp::EchoReq, v4(C4, 0x1234), v4(VIP4, 0x1234)),
            rw: rw(v4(SNAT4, 61004), v4(B4, 61004)),
        },
        Case {
            desc: "ICMPv4 echo reply, back to the client: identifier := rw.dst.1",
            input: Spec::new(Tp::EchoRep, v4(B4, 61004), v4(SNAT4, 61004)),
            rw: rw(v4(VIP4, 0x1234), v4(C4, 0x1234)),
        },
        Case {
            desc: "ICMPv6 echo request, full-NAT",
            input: Spec::new(Tp::EchoReq, v6(C6, 0x1234), v6(VIP6, 0x1234)),
            rw: rw(v6(SNAT6, 61004), v6(B6, 61004)),
        },
        Case {
            desc: "ICMPv6 echo reply, back to the client",
            input: Spec::new(Tp::EchoRep, v6(B6, 61004), v6(SNAT6, 61004)),
            rw: rw(v6(VIP6, 0x1234), v6(C6, 0x1234)),
        },
        Case {
            desc: "802.1Q-tagged v4 TCP",
            input: Spec {
                vlan: Some(42),
                ..tcp4.clone()
            },
            rw: full4,
        },
        Case {
            desc: "802.1Q-tagged v6 UDP",
            input: Spec {
                vlan: Some(7),
                ..udp6.clone()
            },
            rw: full6,
        },
        Case {
            desc: "IPv4 with options",
            input: Spec {
                ip_ext: true,
                ..tcp4.clone()
            },
            rw: full4,
        },
        Case {
            desc: "IPv6 with a destination-options header",
            input: Spec { ip_ext: true, ..tcp6 },
            rw: full6,
        },
        Case {
            desc: "IPv4 with options, UDP, tagged",
            input: Spec {
                ip_ext: true,
                vlan: Some(100),
                ..udp4
            },
            rw: full4,
        },
        Case {
            desc: "TTL 2 becomes 1",
            input: Spec {
                ttl: 2,
                ..tcp4.clone()
            },
            rw: dnat4,
        },
        Case {
            desc: "empty TCP payload",
            input: Spec {
                payload: vec![],
                ..tcp4.clone()
            },
            rw: full4,
        },
        Case {
            desc: "odd-length UDP v6 payload",
            input: Spec {
                payload: vec![0xab; 333],
                ..udp6
            },
            rw: full6,
        },
        Case {
            desc: "1460-byte TCP payload",
            input: Spec {
                payload: vec![0x5a; 1460],
                ..tcp4
            },
            rw: full4,
        },
    ];
    // A UDP/IPv4 rewrite whose checksum comes out as zero must send 0xFFFF:
    // pick the destination port that makes the full checksum 0xFFFF.
    let base = Spec::new(Tp::Udp, v4(C4, 1), v4(VIP4, 53));
    let port = (0..=u16::MAX)
        .find(|&pt| {
            let out = Spec {
                dst: v4(B4, pt),
                ..base.clone()
            }
            .translated(&rw(v4(C4, 1), v4(B4, pt)))
            .build();
            let p = parse(&out).unwrap();
            out[usize::from(p.l4_offset) + 6..usize::from(p.l4_offset) + 8] == [0xff, 0xff]
        })
        .unwrap();
    v.push(Case {
        desc: "UDP v4 computed zero goes out as 0xFFFF",
        input: base,
        rw: rw(v4(C4, 1), v4(B4, port)),
    });
    v
}

#[test]
fn golden_rewrites() {
    for c in cases() {
        let mut frame = c.input.build();
        let expected = c.input.translated(&c.rw).build();
        let p = parse(&frame).unwrap_or_else(|e| panic!("{}: input does not parse: {e:?}", c.desc));
        rewrite(&mut frame, &p, &c.rw, &ChecksumOffload::NONE)
            .unwrap_or_else(|e| panic!("{}: {e:?}", c.desc));
        assert_eq!(frame, expected, "{}", c.desc);
        assert_checksums_valid(&frame);
    }
}

#[test]
fn ttl_or_hop_limit_of_one_is_dropped_unchanged() {
    for (ttl, spec) in [
        (1, Spec::new(Tp::Tcp, v4(C4, 1), v4(VIP4, 2))),
        (0, Spec::new(Tp::Udp, v4(C4, 1), v4(VIP4, 2))),
        (1, Spec::new(Tp::Tcp, v6(C6, 1), v6(VIP6, 2))),
        (1, Spec::new(Tp::EchoReq, v6(C6, 1), v6(VIP6, 1))),
    ] {
        let spec = Spec { ttl, ..spec };
        let mut frame = spec.build();
        let before = frame.clone();
        let p = parse(&frame).unwrap();
        let r = if p.l3 == L3::Ipv4 {
            rw(v4(SNAT4, 3), v4(B4, 4))
        } else {
            rw(v6(SNAT6, 3), v6(B6, 4))
        };
        assert_eq!(
            rewrite(&mut frame, &p, &r, &ChecksumOffload::NONE),
            Err(DropReason::TtlExceeded)
        );
        assert_eq!(frame, before);
    }
}

#[test]
fn errors_leave_the_frame_unchanged() {
    let tcp4 = Spec::new(Tp::Tcp, v4(C4, 1), v4(VIP4, 2)).build();
    let tcp6 = Spec::new(Tp::Tcp, v6(C6, 1), v6(VIP6, 2)).build();
    let none = ChecksumOffload::NONE;
    let mut cases: Vec<(&str, Vec<u8>, Rewrite, DropReason)> = vec![
        (
            "v6 rewrite on v4",
            tcp4.clone(),
            rw(v6(SNAT6, 3), v6(B6, 4)),
            DropReason::UnsupportedProtocol,
        ),
        (
            "mixed rewrite on v4",
            tcp4.clone(),
            rw(v4(SNAT4, 3), v6(B6, 4)),
            DropReason::UnsupportedProtocol,
        ),
        (
            "v4 rewrite on v6",
            tcp6.clone(),
            rw(v4(SNAT4, 3), v4(B4, 4)),
            DropReason::UnsupportedProtocol,
        ),
    ];
    // ICMP that is not echo: a timestamp request, and an error.
    let mut ts = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4(C4, VIP4, 64)
        .icmpv4_raw(13, 0, [0, 1, 0, 1])
        .write(&mut ts, &[0; 12])
        .unwrap();
    cases.push((
        "ICMP timestamp",
        ts,
        rw(v4(SNAT4, 3), v4(B4, 4)),
        DropReason::UnsupportedProtocol,
    ));
    let mut unreach = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4(C4, VIP4, 64)
        .icmpv4_raw(3, 1, [0; 4])
        .write(&mut unreach, &tcp4[14..14 + 28])
        .unwrap();
    cases.push((
        "ICMP error via rewrite()",
        unreach,
        rw(v4(SNAT4, 3), v4(B4, 4)),
        DropReason::UnsupportedProtocol,
    ));
    // A segment routing header with one segment left.
    let mut srh = Vec::new();
    let ext = Ipv6Extensions {
        routing: Some(Ipv6RoutingExtensions {
            routing: Ipv6RawExtHeader::new_raw(IpNumber::TCP, &[4, 1, 0, 0, 0, 0]).unwrap(),
            final_destination_options: None,
        }),
        ..Default::default()
    };
    let h = Ipv6Header {
        hop_limit: 64,
        source: [1; 16],
        destination: [2; 16],
        ..Default::default()
    };
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ip(IpHeaders::Ipv6(h, ext))
        .tcp(1, 2, 3, 4)
        .write(&mut srh, &[])
        .unwrap();
    // Parsing refuses it, so no rewrite ever sees it.
    assert_eq!(parse(&srh), Err(DropReason::Ipv6ExtensionHeader));
    for (desc, mut frame, r, want) in cases {
        let before = frame.clone();
        let p = parse(&frame).unwrap_or_else(|e| panic!("{desc}: {e:?}"));
        assert_eq!(rewrite(&mut frame, &p, &r, &none), Err(want), "{desc}");
        assert_eq!(frame, before, "{desc}");
    }
    // A `Parsed` from a longer frame: truncated, unchanged.
    let long = Spec {
        payload: vec![1; 200],
        ..Spec::new(Tp::Tcp, v4(C4, 1), v4(VIP4, 2))
    }
    .build();
    let p = parse(&long).unwrap();
    let mut short = long[..100].to_vec();
    let before = short.clone();
    assert_eq!(
        rewrite(&mut short, &p, &rw(v4(SNAT4, 3), v4(B4, 4)), &none),
        Err(DropReason::Truncated)
    );
    assert_eq!(short, before);
}

/// Set the L4 checksum field of `frame` to `v`.
fn set_l4_checksum(frame: &mut [u8], v: u16) {
    let p = parse(frame).unwrap();
    let at = usize::from(p.l4_offset) + if p.protocol == ip_proto::TCP { 16 } else { 6 };
    frame[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn offload_pseudo(frame: &[u8]) -> u16 {
    let p = parse_with(
        frame,
        &ChecksumOffload {
            rx_l4_partial: true,
            ..ChecksumOffload::NONE
        },
    )
    .unwrap();
    let len = p.end as usize - usize::from(p.l4_offset);
    match (p.src, p.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => offload_pseudo_v4(s, d, p.protocol, len as u16),
        (IpAddr::V6(s), IpAddr::V6(d)) => offload_pseudo_v6(&s, &d, p.protocol, len as u32),
        _ => unreachable!(),
    }
}

use crate::wire::parse_with;

#[test]
fn checksum_offload_conventions() {
    let specs = [
        (
            Spec::new(Tp::Tcp, v4(C4, 40000), v4(VIP4, 443)),
            rw(v4(SNAT4, 61001), v4(B4, 8443)),
        ),
        (
            Spec::new(Tp::Udp, v4(C4, 5353), v4(VIP4, 53)),
            rw(v4(SNAT4, 61001), v4(B4, 5300)),
        ),
        (
            Spec::new(Tp::Tcp, v6(C6, 40000), v6(VIP6, 443)),
            rw(v6(SNAT6, 61001), v6(B6, 8443)),
        ),
        (
            Spec {
                payload: vec![7; 101],
                ..Spec::new(Tp::Udp, v6(C6, 5353), v6(VIP6, 53))
            },
            rw(v6(SNAT6, 61001), v6(B6, 5300)),
        ),
    ];
    for (spec, r) in specs {
        let full_in = spec.build();
        let full_out = spec.translated(&r).build();
        let mut partial_in = full_in.clone();
        set_l4_checksum(&mut partial_in, offload_pseudo(&full_in));
        let mut pseudo_out = full_out.clone();
        set_l4_checksum(&mut pseudo_out, offload_pseudo(&full_out));
        let v4 = spec.src.0.is_ipv4();

        // Partial in, no TX offload: completed in software.
        let rx_partial = ChecksumOffload {
            rx_l4_partial: true,
            ..ChecksumOffload::NONE
        };
        let mut f = partial_in.clone();
        let p = parse_with(&f, &rx_partial).unwrap();
        rewrite(&mut f, &p, &r, &rx_partial).unwrap();
        assert_eq!(f, full_out, "{:?} partial -> full", spec.tp);
        assert_checksums_valid(&f);

        // Partial in, TX offload: the pseudo-header sum of the new header.
        let both = ChecksumOffload {
            rx_l4_partial: true,
            tx_l4: true,
            ..ChecksumOffload::NONE
        };
        let mut f = partial_in.clone();
        rewrite(&mut f, &p, &r, &both).unwrap();
        assert_eq!(f, pseudo_out, "{:?} partial -> pseudo", spec.tp);

        // Full in, TX offload, and the IPv4 header checksum left to the NIC.
        let tx = ChecksumOffload {
            tx_l4: true,
            tx_ipv4: true,
            ..ChecksumOffload::NONE
        };
        let mut f = full_in.clone();
        let p = parse(&f).unwrap();
        rewrite(&mut f, &p, &r, &tx).unwrap();
        let mut want = pseudo_out.clone();
        if v4 {
            want[14 + 10..14 + 12].copy_from_slice(&[0, 0]);
        }
        assert_eq!(f, want, "{:?} full -> pseudo, IP checksum 0", spec.tp);
    }
}

/// `frame` (one IP packet) with `n` bytes of 0xa5 after its end, inside the
/// IP packet: the IP length grows, the UDP length does not.
fn with_trailing_bytes(mut frame: Vec<u8>, n: usize) -> Vec<u8> {
    let p = parse(&frame).unwrap();
    assert_eq!(p.end as usize, frame.len(), "no padding to keep");
    let l3 = usize::from(p.l3_offset);
    let at = l3 + if p.l3 == L3::Ipv4 { 2 } else { 4 };
    let len = u16::from_be_bytes([frame[at], frame[at + 1]]) + n as u16;
    frame[at..at + 2].copy_from_slice(&len.to_be_bytes());
    if p.l3 == L3::Ipv4 {
        frame[l3 + 10..l3 + 12].copy_from_slice(&[0, 0]);
        let c = checksum::checksum(&frame[l3..usize::from(p.l4_offset)]);
        frame[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
    }
    frame.resize(frame.len() + n, 0xa5);
    frame
}

/// The UDP datagram of `frame` (up to its length field) and the full
/// pseudo-header sum for it.
fn udp_datagram(frame: &[u8]) -> (&[u8], u32) {
    let p = parse(frame).unwrap();
    let l4 = p.l4(frame);
    let ulen = usize::from(u16::from_be_bytes([l4[4], l4[5]]));
    let pseudo = match (p.src, p.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => pseudo_header_v4(s, d, ip_proto::UDP, ulen as u16),
        (IpAddr::V6(s), IpAddr::V6(d)) => pseudo_header_v6(&s, &d, ip_proto::UDP, ulen as u32),
        _ => unreachable!(),
    };
    (&l4[..ulen], pseudo)
}

/// UDP with a length of 12 in an IP payload of 20: its checksum and
/// pseudo-header cover the 12 bytes of the datagram only, under either L4
/// offload flag. The results are checked by full recomputation over the
/// UDP length.
#[test]
fn checksum_offload_covers_the_udp_length_not_the_ip_payload() {
    for (spec, r) in [
        (
            Spec::new(Tp::Udp, v4(C4, 5353), v4(VIP4, 53)),
            rw(v4(SNAT4, 61001), v4(B4, 5300)),
        ),
        (
            Spec::new(Tp::Udp, v6(C6, 5353), v6(VIP6, 53)),
            rw(v6(SNAT6, 61001), v6(B6, 5300)),
        ),
    ] {
        let spec = Spec {
            payload: b"abcd".to_vec(),
            ..spec
        };
        let full_in = with_trailing_bytes(spec.build(), 8);
        let full_out = with_trailing_bytes(spec.translated(&r).build(), 8);
        let p = parse(&full_in).unwrap();
        assert_eq!((p.l4(&full_in).len(), udp_datagram(&full_in).0.len()), (20, 12));
        let (dgram, pseudo) = udp_datagram(&full_in);
        assert!(verify_l4(pseudo, dgram), "input checksum");
        let family = if p.l3 == L3::Ipv4 { "v4" } else { "v6" };
        // What a sender with a partial checksum puts in the field.
        let partial = |f: &[u8]| fold(udp_datagram(f).1);

        // rx_l4_partial: the sum is completed in software over the datagram.
        let rx_partial = ChecksumOffload {
            rx_l4_partial: true,
            ..ChecksumOffload::NONE
        };
        let mut f = full_in.clone();
        set_l4_checksum(&mut f, partial(&full_in));
        let p = parse_with(&f, &rx_partial).unwrap();
        rewrite(&mut f, &p, &r, &rx_partial).unwrap();
        let (dgram, pseudo) = udp_datagram(&f);
        assert!(verify_l4(pseudo, dgram), "{family} rx_l4_partial: UDP checksum");
        assert_eq!(f, full_out, "{family} rx_l4_partial");

        // tx_l4: the pseudo-header sum over the UDP length, which the NIC
        // completes over the datagram (done here as it would).
        let tx = ChecksumOffload {
            tx_l4: true,
            ..ChecksumOffload::NONE
        };
        let mut f = full_in.clone();
        let p = parse(&f).unwrap();
        rewrite(&mut f, &p, &r, &tx).unwrap();
        assert_eq!(
            u16::from_be_bytes([f[usize::from(p.l4_offset) + 6], f[usize::from(p.l4_offset) + 7]]),
            partial(&f),
            "{family} tx_l4: pseudo-header sum"
        );
        let at = usize::from(p.l4_offset) + 6;
        let nic = checksum::udp_finish(checksum::sum(udp_datagram(&f).0));
        f[at..at + 2].copy_from_slice(&nic.to_be_bytes());
        let (dgram, pseudo) = udp_datagram(&f);
        assert!(verify_l4(pseudo, dgram), "{family} tx_l4: UDP checksum");
        assert_eq!(f, full_out, "{family} tx_l4, completed");
    }
}

/// A first IPv4 fragment of a UDP datagram: the first `keep` bytes of the
/// UDP datagram, MF set, checksum over the whole datagram.
fn first_fragment(spec: &Spec, keep: usize) -> Vec<u8> {
    let whole = spec.build();
    let (mut h, _) = Ipv4Header::from_slice(&whole[14..]).unwrap();
    h.more_fragments = true;
    h.fragment_offset = IpFragOffset::ZERO;
    h.set_payload_len(keep).unwrap();
    h.header_checksum = h.calc_header_checksum();
    let mut v = whole[..14].to_vec();
    h.write(&mut v).unwrap();
    v.extend_from_slice(&whole[14 + h.header_len()..14 + h.header_len() + keep]);
    v
}

#[test]
fn first_fragment_checksum_covers_the_whole_datagram() {
    let spec = Spec {
        payload: vec![0x33; 400],
        ..Spec::new(Tp::Udp, v4(C4, 5353), v4(VIP4, 53))
    };
    let r = rw(v4(SNAT4, 61001), v4(B4, 5300));
    let mut frame = first_fragment(&spec, 8 + 96);
    let expected = first_fragment(&spec.translated(&r), 8 + 96);
    let p = parse(&frame).unwrap();
    assert_eq!(p.fragment, Fragment::First);
    // The L4 offload flags are ignored for fragments.
    let offload = ChecksumOffload {
        tx_l4: true,
        rx_l4_partial: true,
        ..ChecksumOffload::NONE
    };
    rewrite(&mut frame, &p, &r, &offload).unwrap();
    assert_eq!(frame, expected);
    assert_eq!(fold(checksum::sum(&frame[14..34])), 0xffff);
}

#[test]
fn set_l2_keeps_the_vlan_tag() {
    let spec = Spec {
        vlan: Some(42),
        ..Spec::new(Tp::Tcp, v4(C4, 1), v4(VIP4, 2))
    };
    let mut frame = spec.build();
    let before = frame.clone();
    set_l2(&mut frame, [0xaa; 6], [0xbb; 6]);
    assert_eq!(&frame[..6], &[0xbb; 6]);
    assert_eq!(&frame[6..12], &[0xaa; 6]);
    assert_eq!(&frame[12..], &before[12..]);
    let mut tiny = [1u8; 11];
    set_l2(&mut tiny, [0; 6], [0; 6]);
    assert_eq!(tiny, [1; 11]);
}
