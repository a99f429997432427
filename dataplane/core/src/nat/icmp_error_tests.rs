//! Golden tests for [`rewrite_icmp_error`]: the error and its quote are
//! built with etherparse before and after translation, compared byte for
//! byte, and every checksum (outer IPv4, ICMP, quoted IPv4 header, and the
//! quoted L4 checksum when the whole packet is quoted) is recomputed.

use std::net::IpAddr;

use etherparse::PacketBuilder;

use super::tests::{assert_checksums_valid, rw, v4, v6, Spec, Tp, MAC_A, MAC_B};
use super::*;
use crate::conntrack::Endpoint;
use crate::wire::parse;

/// An ICMP(v6) error frame from `src` to `dst` carrying `quote`.
pub(super) fn error_frame(
    src: IpAddr,
    dst: IpAddr,
    ttl: u8,
    icmp: (u8, u8, [u8; 4]),
    quote: &[u8],
) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2(MAC_A, MAC_B);
    let mut v = Vec::new();
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => eth
            .ipv4(s.octets(), d.octets(), ttl)
            .icmpv4_raw(icmp.0, icmp.1, icmp.2)
            .write(&mut v, quote),
        (IpAddr::V6(s), IpAddr::V6(d)) => eth
            .ipv6(s.octets(), d.octets(), ttl)
            .icmpv6_raw(icmp.0, icmp.1, icmp.2)
            .write(&mut v, quote),
        _ => panic!("mixed families"),
    }
    .unwrap();
    v
}

/// The quote of `spec`: its IP packet, cut to `cut` bytes if given.
pub(super) fn quote_of(spec: &Spec, cut: Option<usize>) -> Vec<u8> {
    let f = spec.build();
    let ip = &f[14..];
    ip[..cut.unwrap_or(ip.len()).min(ip.len())].to_vec()
}

/// The quoted packet after `inner`: new endpoints, same TTL.
pub(super) fn quoted_translated(spec: &Spec, inner: &Rewrite) -> Spec {
    let mut s = spec.translated(inner);
    s.ttl = spec.ttl;
    s
}

pub(super) struct ErrCase {
    pub desc: &'static str,
    /// Outer source and destination, as received.
    pub from: IpAddr,
    pub to: IpAddr,
    pub icmp: (u8, u8, [u8; 4]),
    /// The packet quoted, as it was on the wire.
    pub quoted: Spec,
    pub cut: Option<usize>,
    /// The conntrack rewrite of the error's direction.
    pub rw: Rewrite,
    /// Keep the reporting router's address as the outer source.
    pub keep_source: bool,
}

impl ErrCase {
    pub fn outer(&self) -> Rewrite {
        let src: Endpoint = if self.keep_source {
            (self.from, 0)
        } else {
            self.rw.src
        };
        Rewrite {
            src,
            dst: self.rw.dst,
        }
    }

    pub fn input(&self) -> Vec<u8> {
        error_frame(
            self.from,
            self.to,
            60,
            self.icmp,
            &quote_of(&self.quoted, self.cut),
        )
    }

    pub fn expected(&self) -> Vec<u8> {
        let outer = self.outer();
        let q = quoted_translated(&self.quoted, &inner_rewrite(&self.rw));
        error_frame(outer.src.0, outer.dst.0, 59, self.icmp, &quote_of(&q, self.cut))
    }
}

const R4: [u8; 4] = [203, 0, 113, 1];
const R6: &str = "2001:db8:77::1";

fn err_cases() -> Vec<ErrCase> {
    let r4 = IpAddr::from(R4);
    let r6: IpAddr = R6.parse().unwrap();
    // The full-NAT'ed TCP segment SNAT:61001 -> B:8443, as forwarded.
    let fwd_tcp4 = Spec {
        ttl: 63,
        payload: vec![0x11; 40],
        ..Spec::new(Tp::Tcp, v4([10, 255, 0, 1], 61001), v4([10, 1, 2, 3], 8443))
    };
    let frag_needed = (3, 4, [0, 0, 0x05, 0x78]);
    let reply4 = rw(v4([192, 0, 2, 10], 443), v4([198, 51, 100, 7], 40000));
    let mut v = vec![];
    for (desc, cut) in [
        (
            "ICMPv4 frag-needed, full-NAT TCP, 8 bytes of TCP quoted (no TCP checksum)",
            Some(28),
        ),
        (
            "ICMPv4 frag-needed, full-NAT TCP, 18 bytes of TCP quoted (checksum present)",
            Some(38),
        ),
        ("ICMPv4 frag-needed, full-NAT TCP, whole segment quoted", None),
    ] {
        v.push(ErrCase {
            desc,
            from: r4,
            to: IpAddr::from([10, 255, 0, 1]),
            icmp: frag_needed,
            quoted: fwd_tcp4.clone(),
            cut,
            rw: reply4,
            keep_source: true,
        });
    }
    // DNAT: the backend itself says "port unreachable" to the client about
    // C:5353 -> B:5300 (UDP without checksum); it must come from the VIP.
    v.push(ErrCase {
        desc: "ICMPv4 port unreachable from a DNAT backend, UDP without checksum",
        from: IpAddr::from([10, 1, 2, 3]),
        to: IpAddr::from([198, 51, 100, 7]),
        icmp: (3, 3, [0; 4]),
        quoted: Spec {
            udp_no_checksum: true,
            ..Spec::new(Tp::Udp, v4([198, 51, 100, 7], 5353), v4([10, 1, 2, 3], 5300))
        },
        cut: None,
        rw: rw(v4([192, 0, 2, 10], 53), v4([198, 51, 100, 7], 5353)),
        keep_source: false,
    });
    v.push(ErrCase {
        desc: "ICMPv4 time exceeded quoting a full-NAT'ed echo request",
        from: r4,
        to: IpAddr::from([10, 255, 0, 1]),
        icmp: (11, 0, [0; 4]),
        quoted: Spec {
            ttl: 1,
            ..Spec::new(Tp::EchoReq, v4([10, 255, 0, 1], 61004), v4([10, 1, 2, 3], 61004))
        },
        cut: None,
        rw: rw(v4([192, 0, 2, 10], 0x1234), v4([198, 51, 100, 7], 0x1234)),
        keep_source: false,
    });
    // The client side: the reply VIP:53 -> C:5353 was too big for a link
    // near the client; the error goes back to the full-NAT backend.
    let udp6_reply = Spec {
        ttl: 63,
        payload: vec![0x22; 1300],
        ..Spec::new(Tp::Udp, v6("2001:db8:f::10", 53), v6("2001:db8:c::7", 5353))
    };
    let original6 = rw(v6("fd00:ff::1", 61003), v6("fd00:1::3", 5300));
    for (desc, cut) in [
        (
            "ICMPv6 packet too big, full-NAT UDP reply, quote cut at 1232 bytes",
            Some(1232),
        ),
        (
            "ICMPv6 packet too big, full-NAT UDP reply, 8 bytes of UDP quoted",
            Some(48),
        ),
    ] {
        v.push(ErrCase {
            desc,
            from: r6,
            to: "2001:db8:f::10".parse().unwrap(),
            icmp: (2, 0, 1280u32.to_be_bytes()),
            quoted: udp6_reply.clone(),
            cut,
            rw: original6,
            keep_source: true,
        });
    }
    v.push(ErrCase {
        desc: "ICMPv6 unreachable quoting a whole full-NAT TCP segment with extension header",
        from: r6,
        to: "fd00:ff::1".parse().unwrap(),
        icmp: (1, 3, [0; 4]),
        quoted: Spec {
            ip_ext: true,
            ..Spec::new(Tp::Tcp, v6("fd00:ff::1", 61001), v6("fd00:1::3", 8443))
        },
        cut: None,
        rw: rw(v6("2001:db8:f::10", 443), v6("2001:db8:c::7", 40000)),
        keep_source: false,
    });
    v.push(ErrCase {
        desc: "ICMPv6 time exceeded quoting an echo reply (back to the backend)",
        from: r6,
        to: "2001:db8:f::10".parse().unwrap(),
        icmp: (3, 0, [0; 4]),
        quoted: Spec::new(
            Tp::EchoRep,
            v6("2001:db8:f::10", 0x1234),
            v6("2001:db8:c::7", 0x1234),
        ),
        cut: None,
        rw: rw(v6("fd00:ff::1", 61004), v6("fd00:1::3", 61004)),
        keep_source: true,
    });
    v
}

#[test]
fn golden_icmp_errors() {
    for c in err_cases() {
        let mut frame = c.input();
        let expected = c.expected();
        let p = parse(&frame).unwrap_or_else(|e| panic!("{}: {e:?}", c.desc));
        assert!(p.icmp_error, "{}", c.desc);
        let inner = inner_rewrite(&c.rw);
        rewrite_icmp_error(&mut frame, &p, &c.outer(), &inner, &ChecksumOffload::NONE)
            .unwrap_or_else(|e| panic!("{}: {e:?}", c.desc));
        assert_eq!(frame, expected, "{}", c.desc);
        assert_checksums_valid(&frame);
        if c.cut.is_none() {
            // The whole packet is quoted: its own checksums must hold too.
            let mut q = frame[..14].to_vec();
            q.extend_from_slice(&frame[usize::from(p.l4_offset) + 8..p.end as usize]);
            assert_checksums_valid(&q);
        }
        // The quote now names the flow as the error's receiver knows it.
        let quoted = p.quoted(&frame).unwrap();
        assert_eq!((quoted.src, quoted.dst), (inner.src.0, inner.dst.0), "{}", c.desc);
    }
}

#[test]
fn icmp_error_offload_and_failures() {
    let c = &err_cases()[0];
    let inner = inner_rewrite(&c.rw);
    // tx_ipv4: outer header checksum left to the NIC; the quoted one is ours.
    let mut frame = c.input();
    let p = parse(&frame).unwrap();
    let tx = ChecksumOffload {
        tx_ipv4: true,
        tx_l4: true,
        ..ChecksumOffload::NONE
    };
    rewrite_icmp_error(&mut frame, &p, &c.outer(), &inner, &tx).unwrap();
    let mut want = c.expected();
    want[24..26].copy_from_slice(&[0, 0]);
    assert_eq!(frame, want);

    let v6rw = rw(v6("::1", 1), v6("::2", 2));
    let failures: Vec<(&str, Vec<u8>, Rewrite, Rewrite, DropReason)> = vec![
        (
            "TTL 1",
            error_frame(
                IpAddr::from(R4),
                IpAddr::from([10, 255, 0, 1]),
                1,
                c.icmp,
                &quote_of(&c.quoted, c.cut),
            ),
            c.outer(),
            inner,
            DropReason::TtlExceeded,
        ),
        (
            "v6 outer on v4",
            c.input(),
            v6rw,
            inner,
            DropReason::UnsupportedProtocol,
        ),
        (
            "v6 inner on v4",
            c.input(),
            c.outer(),
            v6rw,
            DropReason::UnsupportedProtocol,
        ),
        (
            "not an error",
            Spec::new(Tp::EchoReq, v4([1, 1, 1, 1], 5), v4([2, 2, 2, 2], 5)).build(),
            c.outer(),
            inner,
            DropReason::MalformedIcmp,
        ),
        (
            "quote neither TCP, UDP nor echo",
            error_frame(IpAddr::from(R4), IpAddr::from([10, 255, 0, 1]), 60, c.icmp, &{
                let mut q = quote_of(&c.quoted, Some(28));
                q[9] = 47; // GRE
                q
            }),
            c.outer(),
            inner,
            DropReason::UnsupportedProtocol,
        ),
    ];
    for (desc, mut frame, outer, inner, want) in failures {
        let before = frame.clone();
        let p = parse(&frame).unwrap_or_else(|e| panic!("{desc}: {e:?}"));
        assert_eq!(
            rewrite_icmp_error(&mut frame, &p, &outer, &inner, &ChecksumOffload::NONE),
            Err(want),
            "{desc}"
        );
        assert_eq!(frame, before, "{desc}");
    }
}

pub(super) fn all_err_cases() -> Vec<ErrCase> {
    err_cases()
}
