//! In-place NAT rewriting of parsed frames: addresses, ports (or the ICMP
//! echo identifier), TTL, every checksum, the Ethernet addresses, and the
//! translation of ICMP errors that quote a tracked flow ([`rewrite_icmp_error`]).
//!
//! Everything here is a pure function over a `&mut [u8]` frame and the
//! [`Parsed`] that `wire::parse` produced for it. Invariants:
//!
//! - **No panic, whatever the input.** Every offset is bounds-checked against
//!   the frame before the first byte is written; a `Parsed` that does not
//!   belong to the frame gives an error or a garbled packet, never a panic.
//! - **All or nothing.** On `Err` the frame is unchanged: every check (family,
//!   bounds, protocol, TTL) runs before the first write.
//! - **No allocation, no clock, no logging.**
//! - The family never changes: an IPv4 packet gets an IPv4 [`Rewrite`] and an
//!   IPv6 packet an IPv6 one; a mismatch is `Err(UnsupportedProtocol)`, as
//!   is ARP and any ICMP message that is neither echo nor (for
//!   [`rewrite_icmp_error`]) an error.
//! - TTL / hop limit is decremented, and a packet that arrives with `ttl <= 1`
//!   is `Err(TtlExceeded)`: a router must not forward it.
//!
//! # Checksums
//!
//! Checksums are updated incrementally (RFC 1624 eqn. 3, as [`ChecksumDelta`](crate::checksum::ChecksumDelta)): the
//! address change goes into the IPv4 header checksum and, through the
//! pseudo-header, into the TCP/UDP/ICMPv6 checksum; the port / identifier
//! change only into the L4 checksum; the TTL change only into the IPv4 header
//! checksum. ICMPv4 has no pseudo-header, so its checksum only sees the
//! identifier. Incremental updates keep a bad checksum bad, for the receiver
//! to catch, and cost the same for a 64-byte and a 9000-byte frame.
//!
//! UDP over IPv4 with a zero checksum ("none") keeps a zero checksum; a
//! computed zero is written as `0xFFFF` ([`crate::checksum::ChecksumDelta::apply_udp`]).
//!
//! A first fragment ([`Fragment::First`]) is rewritten like a whole packet:
//! its L4 checksum covers the whole datagram, but the words that change (the
//! pseudo-header and the ports) are all in this fragment, so the delta is the
//! same.
//!
//! # Checksum offload ([`ChecksumOffload`])
//!
//! | flags                          | IPv4 header checksum | TCP/UDP checksum field                                  |
//! |--------------------------------|----------------------|---------------------------------------------------------|
//! | none                           | incremental          | incremental (full checksum in, full checksum out)       |
//! | `tx_ipv4`                      | `0` (NIC fills it)   | (per the L4 flags)                                      |
//! | `tx_l4`                        |                      | [`offload_pseudo_v4`]/[`offload_pseudo_v6`] of the new header, for the NIC to complete |
//! | `rx_l4_partial`, not `tx_l4`   |                      | partial in: [`crate::checksum::ChecksumDelta::apply_partial`] with the address change, then completed in software over the L4 bytes (O(length)), so a full checksum goes out |
//!
//! Both L4 flags take the length UDP's checksum covers from the UDP length
//! field, not the IP payload length, which is longer when the datagram has
//! trailing bytes (RFC 768): the `tx_l4` pseudo-header holds the UDP length,
//! and `rx_l4_partial` sums the datagram only.
//!
//! For a first fragment both L4 flags are ignored (plain incremental): a NIC
//! cannot checksum a datagram it sees only part of, and no sender fragments a
//! datagram whose checksum is still partial. The shell must not request L4
//! transmit offload for fragments. ICMP and ICMPv6 checksums are always done
//! in software: DPDK has no offload for them.
//!
//! # ICMP echo
//!
//! The echo identifier plays the role of both ports (conntrack keys an echo
//! flow with `src_port == dst_port == identifier`). It names the *requester*,
//! so it follows the requester's endpoint: an echo **request** (client → VIP,
//! travelling from the requester) gets the identifier `rw.src.1`, an echo
//! **reply** (backend → client, travelling to the requester) gets `rw.dst.1`.
//! With conntrack's rewrites that maps a full-NAT'ed request's identifier to
//! the SNAT port and the reply's back to the client's identifier; with DNAT
//! both stay the client's.
//!
//! IPv6 packets with a routing header that still has segments left never
//! get here: parsing refuses them (`Ipv6ExtensionHeader`, see
//! [`walk_extensions`](crate::wire::ipv6::walk_extensions)); nor do IPv4
//! packets with a source route that has addresses left (`Ipv4SourceRoute`,
//! see [`check_options`](crate::wire::ipv4::check_options)): their L4
//! checksum covers the route's last address, not the one NAT rewrites.

mod icmp_error;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::checksum::{
    combine, finish, fold, offload_pseudo_v4, offload_pseudo_v6, sum, udp_finish, ChecksumOffload,
};
use crate::conntrack::Rewrite;
use crate::wire::{icmpv4, icmpv6, ip_proto, ipv4, ipv6, Fragment, Parsed, L3};
use crate::DropReason;

pub use icmp_error::{inner_rewrite, rewrite_icmp_error};

/// Set the Ethernet source and destination addresses of `frame`, leaving an
/// 802.1Q tag and the EtherType as they are (they follow the addresses).
/// A frame shorter than 12 bytes, which `parse` never accepts, is left
/// unchanged.
#[inline]
pub fn set_l2(frame: &mut [u8], src_mac: [u8; 6], dst_mac: [u8; 6]) {
    if let Some(macs) = frame.get_mut(..12) {
        macs[..6].copy_from_slice(&dst_mac);
        macs[6..].copy_from_slice(&src_mac);
    }
}

/// Rewrite a TCP, UDP or ICMP(v6) echo packet in place to carry `rw`'s
/// addresses and ports (for echo, the identifier: see the module doc), with
/// TTL / hop limit decremented and every checksum updated per `offload`.
///
/// `p` must be the result of parsing `frame` (with `parse_with(frame,
/// offload)`). Errors, with `frame` left unchanged: `TtlExceeded` if the
/// TTL / hop limit is 1 or 0; `UnsupportedProtocol` for an address family
/// mismatch between `p` and `rw`, ARP, an ICMP error (use
/// [`rewrite_icmp_error`]) or an ICMP message other than echo;
/// `Truncated` if `p`'s offsets do not fit `frame`.
#[inline]
pub fn rewrite(
    frame: &mut [u8],
    p: &Parsed,
    rw: &Rewrite,
    offload: &ChecksumOffload,
) -> Result<(), DropReason> {
    match (p.l3, rw.src.0, rw.dst.0) {
        (L3::Ipv4, IpAddr::V4(src), IpAddr::V4(dst)) => {
            rewrite_v4(frame, p, (src, rw.src.1), (dst, rw.dst.1), offload)
        }
        (L3::Ipv6, IpAddr::V6(src), IpAddr::V6(dst)) => {
            rewrite_v6(frame, p, (src, rw.src.1), (dst, rw.dst.1), offload)
        }
        _ => Err(DropReason::UnsupportedProtocol),
    }
}

/// The L4 header kinds NAT rewrites, with where their fields are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum L4 {
    Tcp,
    Udp,
    /// ICMP or ICMPv6 echo; `request` decides which endpoint's port becomes
    /// the identifier.
    Echo {
        request: bool,
    },
}

impl L4 {
    /// Offset of the checksum field in the L4 header.
    #[inline]
    fn checksum_at(self) -> usize {
        match self {
            L4::Tcp => 16,
            L4::Udp => 6,
            L4::Echo { .. } => 2,
        }
    }

    /// Bytes of L4 header the rewrite touches.
    #[inline]
    fn min_len(self) -> usize {
        match self {
            L4::Tcp => 18,
            L4::Udp | L4::Echo { .. } => 8,
        }
    }

    /// The kind of the L4 header `l4` of IP protocol `protocol`, checked
    /// to hold the `min_len` bytes the rewrite touches.
    #[inline(always)]
    fn of(protocol: u8, l4: &[u8], v6: bool) -> Result<L4, DropReason> {
        let echo = |t: Option<&u8>, req: u8, rep: u8| match t {
            Some(&t) if t == req => Ok(L4::Echo { request: true }),
            Some(&t) if t == rep => Ok(L4::Echo { request: false }),
            _ => Err(DropReason::UnsupportedProtocol),
        };
        let kind = match protocol {
            ip_proto::TCP => L4::Tcp,
            ip_proto::UDP => L4::Udp,
            ip_proto::ICMP if !v6 => echo(
                l4.first(),
                icmpv4::msg_type::ECHO_REQUEST,
                icmpv4::msg_type::ECHO_REPLY,
            )?,
            ip_proto::ICMPV6 if v6 => echo(
                l4.first(),
                icmpv6::msg_type::ECHO_REQUEST,
                icmpv6::msg_type::ECHO_REPLY,
            )?,
            _ => return Err(DropReason::UnsupportedProtocol),
        };
        if l4.len() < kind.min_len() {
            return Err(DropReason::Truncated);
        }
        Ok(kind)
    }
}

#[inline(always)]
fn be16_at(b: &[u8], at: usize) -> u16 {
    let mut w = [0u8; 2];
    w.copy_from_slice(&b[at..at + 2]);
    u16::from_be_bytes(w)
}

#[inline(always)]
fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
fn be32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(w)
}

#[inline(always)]
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// An unfolded sum of RFC 1624 `~m + m'` terms. [`crate::checksum::ChecksumDelta::add16`]
/// folds after every word, a serial chain that was most of a rewrite's
/// cost; this sums 16- and 32-bit terms into a `u64` and folds once, as
/// [`crate::checksum::sum`] does for data (2^16 ≡ 1 modulo 2^16 - 1, so a
/// 32-bit `~m + m'` is its two 16-bit ones). Applying it ends with
/// `checksum`'s own [`finish`], [`udp_finish`] and [`fold`]. Either
/// representation of zero the sum may reach gives the same result on any
/// checksum a real message can have.
#[derive(Debug, Clone, Copy, Default)]
struct Wide(u64);

impl Wide {
    #[inline(always)]
    fn add16(self, old: u16, new: u16) -> Wide {
        Wide(self.0 + u64::from(!old) + u64::from(new))
    }

    #[inline(always)]
    fn add32(self, old: u32, new: u32) -> Wide {
        Wide(self.0 + u64::from(!old) + u64::from(new))
    }

    /// The sum of two accumulations.
    #[inline(always)]
    fn plus(self, other: Wide) -> Wide {
        Wide(self.0 + other.0)
    }

    #[inline(always)]
    fn add128(self, old: u128, new: u128) -> Wide {
        self.add32((old >> 96) as u32, (new >> 96) as u32)
            .add32((old >> 64) as u32, (new >> 64) as u32)
            .add32((old >> 32) as u32, (new >> 32) as u32)
            .add32(old as u32, new as u32)
    }

    /// The accumulation plus `word`, reduced to a `u32` partial sum.
    #[inline(always)]
    fn sum_with(self, word: u16) -> u32 {
        let x = self.0 + u64::from(word);
        // 2^32 ≡ 1 as well: an end-around-carry add of the two halves.
        combine(x as u32, (x >> 32) as u32)
    }

    /// Apply to a complemented checksum field (IPv4 header, TCP, ICMP):
    /// RFC 1624 eqn. 3, `HC' = ~(~HC + Σ(~m + m'))`, as
    /// [`crate::checksum::ChecksumDelta::apply`] does.
    #[inline(always)]
    fn apply(self, csum: u16) -> u16 {
        finish(self.sum_with(!csum))
    }

    /// Apply to a UDP checksum field: zero ("none") stays zero, and a
    /// computed zero goes out as `0xFFFF` ([`udp_finish`]), as
    /// [`crate::checksum::ChecksumDelta::apply_udp`] does.
    #[inline(always)]
    fn apply_udp(self, csum: u16) -> u16 {
        if csum == 0 {
            return 0;
        }
        udp_finish(self.sum_with(!csum))
    }

    /// Folded to 16 bits: the same residue modulo 2^16 - 1, zero only if
    /// the sum is ([`NatDelta`]).
    #[inline(always)]
    fn folded(self) -> u16 {
        fold(self.sum_with(0))
    }

    /// Apply to a field holding a non-complemented pseudo-header sum, as
    /// [`crate::checksum::ChecksumDelta::apply_partial`] does.
    #[inline(always)]
    fn apply_partial(self, partial: u16) -> u16 {
        fold(self.sum_with(partial))
    }
}

/// What a connection's translation does to checksums, folded, so that
/// its packets need not sum the addresses and ports they replace: `ip`,
/// the change of the addresses (the IPv4 header's; in IPv6, which has no
/// header checksum, the pseudo-header's part), and `l4`, the TCP or UDP
/// checksum's (addresses and ports). [`rewrite_v4_whole`] and
/// [`rewrite_v6_whole`] return the one they applied; the fast path keeps it in the connection's entry with the
/// flow cache and gives it back for the connection's later packets.
/// Applied as the unfolded sum of the same terms would be: a folded sum
/// keeps the residue modulo 2^16 - 1 and is zero only if the sum is, and
/// the result of [`Wide`]'s applications depends on nothing else.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NatDelta {
    pub ip: u16,
    pub l4: u16,
}

impl NatDelta {
    /// The change of the way back (the reply's translation undoes the
    /// forward one): the negation modulo 2^16 - 1, which is what the
    /// reverse terms fold to, since `~m + m` is 0xFFFF for every word;
    /// never 0, as their sum is not unless every word the reply replaces
    /// is 0xFFFF and every word it writes 0 (addresses 255.255.255.255
    /// becoming 0.0.0.0).
    #[inline(always)]
    pub(crate) fn reversed(self) -> NatDelta {
        let neg = |x: u16| if x == 0xFFFF { 0xFFFF } else { !x };
        NatDelta {
            ip: neg(self.ip),
            l4: neg(self.l4),
        }
    }
}

/// The change of the ports (TCP/UDP, bytes 0-3) or of the echo identifier
/// and the unchanged sequence number (bytes 4-7) of one L4 header: one
/// 32-bit word either way.
#[derive(Debug, Clone, Copy)]
struct PortChange {
    at: usize,
    old: u32,
    new: u32,
}

impl PortChange {
    /// The change that gives the L4 header `l4` of `kind` these ports; for
    /// echo the identifier is `src_port` for a request, else `dst_port`.
    #[inline(always)]
    fn new(l4: &[u8], kind: L4, src_port: u16, dst_port: u16) -> PortChange {
        match kind {
            L4::Tcp | L4::Udp => PortChange {
                at: 0,
                old: be32_at(l4, 0),
                new: u32::from(src_port) << 16 | u32::from(dst_port),
            },
            L4::Echo { request } => {
                let id = if request { src_port } else { dst_port };
                let old = be32_at(l4, 4);
                PortChange {
                    at: 4,
                    old,
                    new: u32::from(id) << 16 | (old & 0xffff),
                }
            }
        }
    }

    /// `base` plus this change.
    #[inline(always)]
    fn delta(&self, base: Wide) -> Wide {
        base.add32(self.old, self.new)
    }

    /// Write the new word into `l4`.
    #[inline(always)]
    fn write(&self, l4: &mut [u8]) {
        put32(l4, self.at, self.new);
    }
}

/// How many bytes of `l4`, a whole datagram's L4 header and data up to the
/// IP end, its checksum covers, which is also the length its pseudo-header
/// holds: all of them for TCP; for UDP the length field's count, which may
/// stop short of the IP end (trailing bytes the parse allows, outside the
/// UDP checksum, RFC 768). The parse and the fast path checked
/// `8 <= length <= l4.len()`; another value (a `Parsed` of another frame)
/// counts as all of `l4`. Needs the 8 bytes `L4::of` checked.
#[inline(always)]
fn covered_len(l4: &[u8], kind: L4) -> usize {
    if kind != L4::Udp {
        return l4.len();
    }
    let n = usize::from(be16_at(l4, 4));
    if (8..=l4.len()).contains(&n) {
        n
    } else {
        l4.len()
    }
}

/// Update the L4 checksum of `l4` (the L4 header and data up to the IP end).
/// `all` is every change the checksum covers (pseudo-header and ports),
/// `addrs` the pseudo-header part alone, for a partial checksum; `pseudo` is
/// the offload pseudo-header sum of the new header for an L4 length
/// ([`covered_len`]), computed only when the NIC is to finish the job. See
/// the module doc's offload table.
#[inline(always)]
fn update_l4_checksum(
    l4: &mut [u8],
    kind: L4,
    addrs: Wide,
    all: Wide,
    fragment: Fragment,
    offload: &ChecksumOffload,
    pseudo: impl FnOnce(usize) -> u16,
) {
    let at = kind.checksum_at();
    let old = be16_at(l4, at);
    let whole = fragment == Fragment::None;
    let new = match kind {
        L4::Echo { .. } => all.apply(old),
        L4::Tcp | L4::Udp if offload.tx_l4 && whole => pseudo(covered_len(l4, kind)),
        L4::Tcp | L4::Udp if offload.rx_l4_partial && whole => {
            // The field holds the pseudo-header sum: move it to the new
            // addresses (the NIC would sum the ports itself), then do what
            // the NIC would have done, so that a full checksum leaves.
            put16(l4, at, addrs.apply_partial(old));
            let s = sum(&l4[..covered_len(l4, kind)]);
            if kind == L4::Udp {
                udp_finish(s)
            } else {
                finish(s)
            }
        }
        L4::Tcp => all.apply(old),
        L4::Udp => all.apply_udp(old),
    };
    put16(l4, at, new);
}

/// Split `frame` into the fixed IP header of `N` bytes at `p.l3_offset` and
/// the L4 bytes `p.l4_offset..p.end`, checking every bound once so that the
/// fixed-offset accesses that follow compile without checks.
#[inline(always)]
fn split<'a, const N: usize>(
    frame: &'a mut [u8],
    p: &Parsed,
) -> Result<(&'a mut [u8; N], &'a mut [u8]), DropReason> {
    let l3 = usize::from(p.l3_offset);
    let l4_at = usize::from(p.l4_offset);
    let frame = frame.get_mut(..p.end as usize).ok_or(DropReason::Truncated)?;
    let (head, l4) = frame.split_at_mut_checked(l4_at).ok_or(DropReason::Truncated)?;
    let ip = head
        .get_mut(l3..l3 + N)
        .and_then(|h| <&mut [u8; N]>::try_from(h).ok())
        .ok_or(DropReason::Truncated)?;
    Ok((ip, l4))
}

#[inline]
fn rewrite_v4(
    frame: &mut [u8],
    p: &Parsed,
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    offload: &ChecksumOffload,
) -> Result<(), DropReason> {
    let (ip, l4) = split::<{ ipv4::MIN_HEADER_LEN }>(frame, p)?;
    let kind = L4::of(ip[ipv4::field::PROTOCOL], l4, false)?;
    if ip[ipv4::field::TTL] <= 1 {
        return Err(DropReason::TtlExceeded);
    }
    // --- no error past this point: the frame is written from here on ---
    write_v4(ip, l4, kind, p.fragment, src, dst, None, offload);
    Ok(())
}

/// [`rewrite`] of a whole (unfragmented) IPv4 TCP or UDP packet whose
/// fixed header is `ip` and whose L4 header and data up to the IP end are
/// `l4`, for the worker's fast path, which has checked what [`rewrite`]
/// checks: the L4 header holds at least its `min_len` bytes (18 for TCP, 8
/// for UDP) and the TTL is above 1. Same bytes out as [`rewrite`]. `delta`,
/// if given, is the [`NatDelta`] of the packet's addresses and ports
/// (those of the connection's direction it belongs to) to `src` and
/// `dst`: the sums of what is replaced are not done again. Returns the
/// delta applied (the one given, or the one summed).
#[inline(always)]
pub(crate) fn rewrite_v4_whole(
    ip: &mut [u8; ipv4::MIN_HEADER_LEN],
    l4: &mut [u8],
    tcp: bool,
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    delta: Option<NatDelta>,
    offload: &ChecksumOffload,
) -> NatDelta {
    let kind = if tcp { L4::Tcp } else { L4::Udp };
    write_v4(ip, l4, kind, Fragment::None, src, dst, delta, offload)
}

/// The writing half of [`rewrite_v4`]: every check is done; `l4` holds at
/// least `kind.min_len()` bytes and the TTL is above 1. `delta`: see
/// [`rewrite_v4_whole`]; only for TCP and UDP. Returns the delta applied
/// (for echo, the identifier's change in `l4`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn write_v4(
    ip: &mut [u8; ipv4::MIN_HEADER_LEN],
    l4: &mut [u8],
    kind: L4,
    fragment: Fragment,
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    delta: Option<NatDelta>,
    offload: &ChecksumOffload,
) -> NatDelta {
    debug_assert!(delta.is_none() || matches!(kind, L4::Tcp | L4::Udp));
    let ttl = ip[ipv4::field::TTL];
    let (new_src, new_dst) = (u32::from(src.0), u32::from(dst.0));
    let addrs = match delta {
        Some(d) => Wide(u64::from(d.ip)),
        None => Wide::default()
            .add32(be32_at(ip, 12), new_src)
            .add32(be32_at(ip, 16), new_dst),
    };
    put32(ip, 12, new_src);
    put32(ip, 16, new_dst);
    let proto = ip[ipv4::field::PROTOCOL];
    ip[ipv4::field::TTL] = ttl - 1;
    let ip_csum = if offload.tx_ipv4 {
        0
    } else {
        // TTL shares a 16-bit word with the protocol: `ttl << 8 | proto`
        // becomes one less in the high byte.
        addrs.add16(0x100, 0).apply(be16_at(ip, 10))
    };
    put16(ip, 10, ip_csum);

    // ICMPv4 has no pseudo-header: its checksum only sees the identifier.
    let base = if matches!(kind, L4::Echo { .. }) {
        Wide::default()
    } else {
        addrs
    };
    let ports = PortChange::new(l4, kind, src.1, dst.1);
    ports.write(l4);
    let all = match delta {
        Some(d) => Wide(u64::from(d.l4)),
        None => ports.delta(base),
    };
    update_l4_checksum(l4, kind, addrs, all, fragment, offload, |len| {
        offload_pseudo_v4(src.0, dst.0, proto, len as u16)
    });
    match delta {
        Some(d) => d,
        None => NatDelta {
            ip: addrs.folded(),
            l4: all.folded(),
        },
    }
}

#[inline]
fn rewrite_v6(
    frame: &mut [u8],
    p: &Parsed,
    src: (Ipv6Addr, u16),
    dst: (Ipv6Addr, u16),
    offload: &ChecksumOffload,
) -> Result<(), DropReason> {
    let (ip, l4) = split::<{ ipv6::HEADER_LEN }>(frame, p)?;
    let kind = L4::of(p.protocol, l4, true)?;
    if ip[ipv6::field::HOP_LIMIT] <= 1 {
        return Err(DropReason::TtlExceeded);
    }
    // --- no error past this point ---
    write_v6(ip, l4, kind, p.protocol, p.fragment, src, dst, None, offload);
    Ok(())
}

/// [`rewrite`] of a whole (unfragmented) IPv6 TCP or UDP packet without
/// extension headers, whose fixed header is `ip` and whose L4 header and
/// data up to the IP end are `l4`, for the worker's IPv6 fast path, which
/// has checked what [`rewrite`] checks (as [`rewrite_v4_whole`]'s caller
/// does). Same bytes out as [`rewrite`]. `delta`: as for
/// [`rewrite_v4_whole`], whose `ip` half is here the change of the
/// addresses alone (the pseudo-header's; IPv6 has no header checksum).
/// Returns the delta applied.
#[inline(always)]
pub(crate) fn rewrite_v6_whole(
    ip: &mut [u8; ipv6::HEADER_LEN],
    l4: &mut [u8],
    tcp: bool,
    src: (Ipv6Addr, u16),
    dst: (Ipv6Addr, u16),
    delta: Option<NatDelta>,
    offload: &ChecksumOffload,
) -> NatDelta {
    let (kind, proto) = if tcp {
        (L4::Tcp, ip_proto::TCP)
    } else {
        (L4::Udp, ip_proto::UDP)
    };
    write_v6(ip, l4, kind, proto, Fragment::None, src, dst, delta, offload)
}

/// The writing half of [`rewrite_v6`]: every check is done; `l4` holds at
/// least `kind.min_len()` bytes, `proto` is its IP protocol and the hop
/// limit is above 1. `delta`: see [`rewrite_v6_whole`]; only for TCP and
/// UDP. Returns the delta applied.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn write_v6(
    ip: &mut [u8; ipv6::HEADER_LEN],
    l4: &mut [u8],
    kind: L4,
    proto: u8,
    fragment: Fragment,
    src: (Ipv6Addr, u16),
    dst: (Ipv6Addr, u16),
    delta: Option<NatDelta>,
    offload: &ChecksumOffload,
) -> NatDelta {
    debug_assert!(delta.is_none() || matches!(kind, L4::Tcp | L4::Udp));
    let (new_src, new_dst) = (u128::from(src.0), u128::from(dst.0));
    let addrs = match delta {
        Some(d) => Wide(u64::from(d.ip)),
        None => Wide::default()
            .add128(be128_at(ip, 8), new_src)
            .add128(be128_at(ip, 24), new_dst),
    };
    ip[ipv6::field::SRC].copy_from_slice(&new_src.to_be_bytes());
    ip[ipv6::field::DST].copy_from_slice(&new_dst.to_be_bytes());
    ip[ipv6::field::HOP_LIMIT] -= 1;

    let ports = PortChange::new(l4, kind, src.1, dst.1);
    ports.write(l4);
    let all = match delta {
        Some(d) => Wide(u64::from(d.l4)),
        None => ports.delta(addrs),
    };
    update_l4_checksum(l4, kind, addrs, all, fragment, offload, |len| {
        offload_pseudo_v6(&src.0, &dst.0, proto, len as u32)
    });
    match delta {
        Some(d) => d,
        None => NatDelta {
            ip: addrs.folded(),
            l4: all.folded(),
        },
    }
}

#[inline(always)]
fn be128_at(b: &[u8], at: usize) -> u128 {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    u128::from_be_bytes(a)
}

#[cfg(test)]
mod icmp_error_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
