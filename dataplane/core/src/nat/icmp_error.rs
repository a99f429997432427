//! Translation of ICMP and ICMPv6 errors that quote a packet of a tracked
//! flow, so that PMTU discovery ("fragmentation needed", "packet too big"),
//! traceroute ("time exceeded") and unreachables reach the right host, with
//! a quote that host recognises.
//!
//! # Which rewrite is which
//!
//! An error travels in the opposite direction to the packet it quotes. The
//! pipeline looks conntrack up with the quoted flow *reversed*: that is the
//! key of the error's own direction. Example, full-NAT: the client sent
//! `C:c → VIP:v`, the balancer forwarded `SNAT:s → B:b`, and a router
//! between the balancer and the backend answers with "fragmentation needed"
//! from `R` to `SNAT`, quoting `SNAT:s → B:b`. Reversed, the quote is
//! `B:b → SNAT:s`, the connection's reply key, so the error travels in the
//! reply direction and `rw = conntrack.rewrite(id, Reply) = {VIP:v → C:c}`.
//!
//! - `outer` is applied to the error's IP header: its destination must be
//!   `rw.dst` (the client). Its ports are ignored. For the source, pass
//!   `(p.src, 0)` to keep the reporting router's address (what Linux's NAT
//!   does) or `rw.src` to make the error come from the VIP / SNAT address.
//! - `inner` is applied to the quoted packet, which travelled the other way:
//!   it is `rw` with source and destination swapped ([`inner_rewrite`]),
//!   here `{C:c → VIP:v}`, exactly what the client sent.
//!
//! The same recipe covers DNAT and the other direction (an error from the
//! client's side quoting `VIP:v → C:c` finds the original key, and
//! `rewrite(id, Original)` sends it to the backend with the quote turned back
//! into `B:b → C:c` or `B:b → SNAT:s`). A quoted echo request gets the
//! identifier `inner.src.1` and a quoted echo reply `inner.dst.1`, the same
//! rule as [`super::rewrite`], so quoted echo flows map like live ones.
//!
//! # What is rewritten
//!
//! Outer IP addresses and TTL / hop limit (with the IPv4 header checksum, or
//! 0 under `offload.tx_ipv4`); the quoted IP addresses and, for IPv4, the
//! quoted header checksum (incrementally; the quoted TTL is left as quoted);
//! the quoted ports or echo identifier; the quoted L4 checksum when the quote
//! holds it: always for UDP (bytes 6-7) and ICMP echo (2-3), for TCP (16-17)
//! only if at least 18 bytes of TCP were quoted (RFC 792 guarantees only 8;
//! RFC 1812 routers and all ICMPv6 senders quote more; a quote cut between
//! the checksum's two bytes leaves the first one as it was, since its new
//! value depends on the carry from the missing one); and the ICMP
//! checksum, incrementally with every word changed in the quote (plus, for
//! ICMPv6, the outer addresses in the pseudo-header). Incremental beats a
//! full pass: the quote is up to 548 bytes (ICMPv4) or 1232 (ICMPv6), the
//! changed words a dozen. The quoted checksums are always software-updated;
//! the L4 offload flags do not apply to ICMP.

use std::net::IpAddr;

use super::{be128_at, be16_at, be32_at, put16, PortChange, Wide, L4};
use crate::checksum::ChecksumOffload;
use crate::conntrack::Rewrite;
use crate::wire::{icmpv4, icmpv6, ip_proto, ipv4, ipv6, Parsed, L3};
use crate::DropReason;

/// The rewrite for the packet quoted in an error travelling with `rw` (the
/// conntrack rewrite of the error's direction): source and destination
/// swapped. See the module doc of [`rewrite_icmp_error`].
#[inline]
pub fn inner_rewrite(rw: &Rewrite) -> Rewrite {
    Rewrite {
        src: rw.dst,
        dst: rw.src,
    }
}

/// Translate an ICMP or ICMPv6 error in place: the outer IP header gets
/// `outer`'s addresses (ports ignored) and a decremented TTL / hop limit;
/// the quoted packet gets `inner`'s addresses and ports (for a quoted echo,
/// the identifier); every checksum that covers a changed word is updated.
/// Which is which: look conntrack up with the quoted flow reversed (the
/// key of the error's own direction) and take that direction's rewrite
/// `rw`; `outer` is `rw` (or `(p.src, 0)` as source to keep the reporting
/// router's address) and `inner` is [`inner_rewrite`]`(&rw)`, since the
/// quoted packet travelled the other way.
///
/// `p` must be the result of parsing `frame`. Errors, with `frame` left
/// unchanged: `MalformedIcmp` if `p` is not an ICMP error or its quote is
/// unreadable (and whatever [`Parsed::quoted`] returns); `TtlExceeded`;
/// `UnsupportedProtocol` for a family mismatch between the packet and either
/// rewrite, or a quote that is neither TCP, UDP nor ICMP(v6) echo;
/// `Truncated` if `p`'s offsets do not fit `frame`.
pub fn rewrite_icmp_error(
    frame: &mut [u8],
    p: &Parsed,
    outer: &Rewrite,
    inner: &Rewrite,
    offload: &ChecksumOffload,
) -> Result<(), DropReason> {
    if !p.icmp_error {
        return Err(DropReason::MalformedIcmp);
    }
    let v6 = match p.l3 {
        L3::Ipv4 => false,
        L3::Ipv6 => true,
        L3::Arp => return Err(DropReason::UnsupportedProtocol),
    };
    if [outer.src.0, outer.dst.0, inner.src.0, inner.dst.0]
        .iter()
        .any(|a| a.is_ipv6() != v6)
    {
        return Err(DropReason::UnsupportedProtocol);
    }
    let q = p.quoted(frame)?;
    let l3 = usize::from(p.l3_offset);
    let l4_at = usize::from(p.l4_offset);
    let end = p.end as usize;
    let ip_min = if v6 {
        ipv6::HEADER_LEN
    } else {
        ipv4::MIN_HEADER_LEN
    };
    // The quoted IP header starts after the 8-byte ICMP header.
    let qip_at = l4_at + icmpv4::HEADER_LEN;
    let ql4_at = qip_at + q.l4_offset;
    // `quoted` succeeding implies most of this; checked again so that no
    // index below can panic, whatever `p` holds.
    if end > frame.len() || l3 + ip_min > l4_at || q.l4_offset < ip_min || ql4_at + 8 > end {
        return Err(DropReason::Truncated);
    }
    let kind = match (q.protocol, frame[ql4_at]) {
        (ip_proto::TCP, _) => L4::Tcp,
        (ip_proto::UDP, _) => L4::Udp,
        (ip_proto::ICMP, icmpv4::msg_type::ECHO_REQUEST) if !v6 => L4::Echo { request: true },
        (ip_proto::ICMP, icmpv4::msg_type::ECHO_REPLY) if !v6 => L4::Echo { request: false },
        (ip_proto::ICMPV6, icmpv6::msg_type::ECHO_REQUEST) if v6 => L4::Echo { request: true },
        (ip_proto::ICMPV6, icmpv6::msg_type::ECHO_REPLY) if v6 => L4::Echo { request: false },
        _ => return Err(DropReason::UnsupportedProtocol),
    };
    let quoted_l4_checksum = ql4_at + kind.min_len() <= end;
    // The quoted header has the same layout as the outer one.
    let (src_at, dst_at, ttl_at) = if v6 {
        (
            ipv6::field::SRC.start,
            ipv6::field::DST.start,
            ipv6::field::HOP_LIMIT,
        )
    } else {
        (ipv4::field::SRC.start, ipv4::field::DST.start, ipv4::field::TTL)
    };
    let ttl = frame[l3 + ttl_at];
    if ttl <= 1 {
        return Err(DropReason::TtlExceeded);
    }
    // --- no error past this point: the frame is written from here on ---

    // Outer IP header.
    let ip = &mut frame[l3..l4_at];
    let outer_addrs = swap_addrs(ip, src_at, dst_at, outer, Wide::default());
    ip[ttl_at] = ttl - 1;
    if !v6 {
        let c = if offload.tx_ipv4 {
            0
        } else {
            let proto = ip[ipv4::field::PROTOCOL];
            outer_addrs
                .add16(
                    u16::from_be_bytes([ttl, proto]),
                    u16::from_be_bytes([ttl - 1, proto]),
                )
                .apply(be16_at(ip, ipv4::field::CHECKSUM.start))
        };
        put16(ip, ipv4::field::CHECKSUM.start, c);
    }

    // `icmp` collects every change the ICMP checksum covers: for ICMPv6 the
    // pseudo-header, then every word changed in the quote.
    let mut icmp = if v6 { outer_addrs } else { Wide::default() };

    // Quoted IP header.
    let qip = &mut frame[qip_at..ql4_at];
    let inner_addrs = swap_addrs(qip, src_at, dst_at, inner, Wide::default());
    icmp = icmp.plus(inner_addrs);
    if !v6 {
        let at = ipv4::field::CHECKSUM.start;
        let old = be16_at(qip, at);
        let new = inner_addrs.apply(old);
        put16(qip, at, new);
        icmp = icmp.add16(old, new);
    }

    // Quoted L4 header.
    let ql4 = &mut frame[ql4_at..end];
    let ports = PortChange::new(ql4, kind, inner.src.1, inner.dst.1);
    ports.write(ql4);
    icmp = ports.delta(icmp);
    if quoted_l4_checksum {
        // ICMPv4 echo has no pseudo-header.
        let base = if !v6 && matches!(kind, L4::Echo { .. }) {
            Wide::default()
        } else {
            inner_addrs
        };
        let all = ports.delta(base);
        let at = kind.checksum_at();
        let old = be16_at(ql4, at);
        let new = if kind == L4::Udp {
            all.apply_udp(old)
        } else {
            all.apply(old)
        };
        put16(ql4, at, new);
        icmp = icmp.add16(old, new);
    }

    // The error's own checksum.
    let msg = &mut frame[l4_at..end];
    let at = icmpv4::field::CHECKSUM.start;
    put16(msg, at, icmp.apply(be16_at(msg, at)));
    Ok(())
}

/// Write `rw`'s addresses into the IP header `ip` at `src_at`/`dst_at` and
/// return `base` plus the change. Families were checked by the caller.
#[inline]
fn swap_addrs(ip: &mut [u8], src_at: usize, dst_at: usize, rw: &Rewrite, base: Wide) -> Wide {
    let d = add_addrs(base, ip, src_at, dst_at, rw);
    put_ip(ip, src_at, rw.src.0);
    put_ip(ip, dst_at, rw.dst.0);
    d
}

/// `base` plus the change from the addresses in `ip` to `rw`'s.
#[inline]
fn add_addrs(base: Wide, ip: &[u8], src_at: usize, dst_at: usize, rw: &Rewrite) -> Wide {
    add_ip(add_ip(base, ip, src_at, rw.src.0), ip, dst_at, rw.dst.0)
}

#[inline]
fn add_ip(d: Wide, ip: &[u8], at: usize, new: IpAddr) -> Wide {
    match new {
        IpAddr::V4(new) => d.add32(be32_at(ip, at), u32::from(new)),
        IpAddr::V6(new) => d.add128(be128_at(ip, at), u128::from(new)),
    }
}

#[inline]
fn put_ip(ip: &mut [u8], at: usize, a: IpAddr) {
    match a {
        IpAddr::V4(a) => ip[at..at + 4].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => ip[at..at + 16].copy_from_slice(&a.octets()),
    }
}
