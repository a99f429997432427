//! IPv4 headers (RFC 791), options allowed.
//!
//! `new_checked` guarantees: at least 20 bytes (`Truncated`), version 4 and
//! IHL >= 5 (`MalformedIpv4`), the IHL-sized header in the buffer
//! (`Truncated`), total length >= header length (`MalformedIpv4`) and total
//! length within the buffer (`Truncated`). It does not verify the header
//! checksum; [`Ipv4Packet::verify_checksum`] does, so a caller with NIC
//! offload can skip it. The payload ends at the total length, never at the
//! buffer's end (Ethernet padding).
//!
//! Nor does it look into the options; [`check_options`] walks them (RFC 791
//! §3.1): an option list that runs past the header is `MalformedIpv4`, and
//! a loose or strict source route (LSRR, SSRR) with route addresses left is
//! `Ipv4SourceRoute`: lbd is not the packet's final destination, does not
//! forward source routes, and the L4 pseudo-header holds the route's last
//! address, not the destination NAT would rewrite (the IPv4 twin of an IPv6
//! routing header with segments left).

use std::net::Ipv4Addr;

use super::{be16, be32};
use crate::checksum::{self, ChecksumDelta};
use crate::DropReason;

/// Length of a header without options.
pub const MIN_HEADER_LEN: usize = 20;

/// Byte offsets of the IPv4 header fields.
pub mod field {
    use std::ops::Range;
    /// Version (high nibble) and IHL (low nibble).
    pub const VER_IHL: usize = 0;
    /// DSCP and ECN.
    pub const DSCP_ECN: usize = 1;
    /// Total length.
    pub const TOTAL_LEN: Range<usize> = 2..4;
    /// Identification.
    pub const IDENT: Range<usize> = 4..6;
    /// Flags (3 bits) and fragment offset (13 bits, in 8-byte units).
    pub const FLAGS_FRAG: Range<usize> = 6..8;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: Range<usize> = 10..12;
    /// Source address.
    pub const SRC: Range<usize> = 12..16;
    /// Destination address.
    pub const DST: Range<usize> = 16..20;
}

/// IPv4 option types [`check_options`] tells apart (RFC 791 §3.1).
pub mod option {
    /// End of option list: what follows is padding.
    pub const END: u8 = 0;
    /// No operation: one byte, no length.
    pub const NOP: u8 = 1;
    /// Record route.
    pub const RR: u8 = 7;
    /// Internet timestamp.
    pub const TIMESTAMP: u8 = 68;
    /// Loose source and record route.
    pub const LSRR: u8 = 131;
    /// Strict source and record route.
    pub const SSRR: u8 = 137;
}

/// Walk the IPv4 options `opts` (the header bytes after the first 20).
/// End of list stops the walk and no-operation is one byte; every other
/// option has a length byte, at least 2, and must lie inside `opts`, else
/// `MalformedIpv4`. A source route (LSRR, SSRR) whose pointer (1-based,
/// from the option's start) is not past the option's end still has
/// addresses to visit: `Ipv4SourceRoute`. One whose pointer is past it is
/// spent: the destination address is the final one, as in a packet
/// without the option.
#[inline]
pub fn check_options(opts: &[u8]) -> Result<(), DropReason> {
    let mut i = 0;
    while let Some(&kind) = opts.get(i) {
        match kind {
            option::END => break,
            option::NOP => i += 1,
            _ => {
                let len = opts.get(i + 1).map_or(0, |&l| usize::from(l));
                if len < 2 || len > opts.len() - i {
                    return Err(DropReason::MalformedIpv4);
                }
                if kind == option::LSRR || kind == option::SSRR {
                    // Type, length, pointer, then the route: a length of 2
                    // leaves no room for the pointer.
                    let pointer = opts.get(i + 2).filter(|_| len >= 3);
                    match pointer {
                        None => return Err(DropReason::MalformedIpv4),
                        Some(&p) if usize::from(p) <= len => return Err(DropReason::Ipv4SourceRoute),
                        Some(_) => {}
                    }
                }
                i += len;
            }
        }
    }
    Ok(())
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const FRAG_OFFSET_MASK: u16 = 0x1fff;

/// A view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wrap without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wrap after the checks listed in the module doc.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let p = Self::new_unchecked(buffer);
        p.check_header()?;
        if usize::from(p.total_len()) > p.buffer.as_ref().len() {
            return Err(DropReason::Truncated);
        }
        Ok(p)
    }

    /// Check everything but the total length against the buffer: enough for
    /// the header accessors, and what an ICMP error's quoted header (cut
    /// short by the sender) can satisfy.
    #[inline]
    pub fn check_header(&self) -> Result<(), DropReason> {
        let b = self.buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(DropReason::Truncated);
        }
        if b[field::VER_IHL] >> 4 != 4 || b[field::VER_IHL] & 0x0f < 5 {
            return Err(DropReason::MalformedIpv4);
        }
        let hl = self.header_len();
        if b.len() < hl {
            return Err(DropReason::Truncated);
        }
        if usize::from(self.total_len()) < hl {
            return Err(DropReason::MalformedIpv4);
        }
        Ok(())
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The version field (4 once checked).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes, options included (IHL * 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// DSCP and ECN byte.
    #[inline]
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    /// Total length (header and payload).
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::TOTAL_LEN])
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::IDENT])
    }

    #[inline]
    fn flags_frag(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::FLAGS_FRAG])
    }

    /// Don't-fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & FLAG_DF != 0
    }

    /// More-fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.flags_frag() & FLAG_MF != 0
    }

    /// Fragment offset in bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (self.flags_frag() & FRAG_OFFSET_MASK) << 3
    }

    /// Whether this is any fragment of a larger datagram.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.flags_frag() & (FLAG_MF | FRAG_OFFSET_MASK) != 0
    }

    /// Whether this is the first fragment (offset 0, MF set): the one that
    /// carries the L4 header. False for an unfragmented packet.
    #[inline]
    pub fn is_first_fragment(&self) -> bool {
        self.flags_frag() & (FLAG_MF | FRAG_OFFSET_MASK) == FLAG_MF
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload.
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(be32(&self.buffer.as_ref()[field::SRC]))
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(be32(&self.buffer.as_ref()[field::DST]))
    }

    /// Whether the header checksum is correct.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::sum(&self.buffer.as_ref()[..self.header_len()])) == 0xffff
    }

    /// The options bytes (empty when IHL is 5).
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..self.header_len()]
    }

    /// [`check_options`] of this header's options. Needs a view that
    /// passed [`Self::check_header`].
    #[inline]
    pub fn check_options(&self) -> Result<(), DropReason> {
        check_options(self.options())
    }

    /// The payload, up to the total length. Clamped to the buffer so it is
    /// also safe on a view that passed only [`Self::check_header`].
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = usize::from(self.total_len()).min(b.len());
        &b[self.header_len()..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Set version 4 and the header length in bytes (a multiple of 4).
    #[inline]
    pub fn set_version_and_header_len(&mut self, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0x0f);
    }

    /// Set the DSCP/ECN byte.
    #[inline]
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = v;
    }

    /// Set the total length.
    #[inline]
    pub fn set_total_len(&mut self, len: u16) {
        self.buffer.as_mut()[field::TOTAL_LEN].copy_from_slice(&len.to_be_bytes());
    }

    /// Set the identification.
    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        self.buffer.as_mut()[field::IDENT].copy_from_slice(&v.to_be_bytes());
    }

    /// Set DF, MF and the fragment offset (bytes, a multiple of 8).
    #[inline]
    pub fn set_flags_frag(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let v = (offset >> 3) | if dont_frag { FLAG_DF } else { 0 } | if more_frags { FLAG_MF } else { 0 };
        self.buffer.as_mut()[field::FLAGS_FRAG].copy_from_slice(&v.to_be_bytes());
    }

    /// Set the TTL, leaving the checksum alone.
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Set the TTL and update the header checksum incrementally.
    #[inline]
    pub fn set_ttl_update_checksum(&mut self, ttl: u8) {
        let b = self.buffer.as_ref();
        let old = be16(&b[field::TTL..field::PROTOCOL + 1]);
        let new = u16::from_be_bytes([ttl, b[field::PROTOCOL]]);
        let c = checksum::update16(self.checksum(), old, new);
        self.set_ttl(ttl);
        self.set_checksum(c);
    }

    /// Set the protocol.
    #[inline]
    pub fn set_protocol(&mut self, p: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = p;
    }

    /// Set the header checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    /// Set the source address, leaving the checksum alone.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    /// Set the destination address, leaving the checksum alone.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }

    /// Set the destination address and update the header checksum; returns
    /// the delta so the caller can apply it to the L4 checksum too.
    #[inline]
    pub fn rewrite_dst_addr(&mut self, a: Ipv4Addr) -> ChecksumDelta {
        let d = ChecksumDelta::new().add_ipv4(self.dst_addr(), a);
        self.set_dst_addr(a);
        self.set_checksum(d.apply(self.checksum()));
        d
    }

    /// Set the source address and update the header checksum; returns the
    /// delta for the L4 checksum.
    #[inline]
    pub fn rewrite_src_addr(&mut self, a: Ipv4Addr) -> ChecksumDelta {
        let d = ChecksumDelta::new().add_ipv4(self.src_addr(), a);
        self.set_src_addr(a);
        self.set_checksum(d.apply(self.checksum()));
        d
    }

    /// The options bytes, mutable (empty when IHL is 5).
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[MIN_HEADER_LEN..end]
    }

    /// Recompute the header checksum from scratch.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(&self.buffer.as_ref()[..self.header_len()]);
        self.set_checksum(c);
    }

    /// Mutable payload up to the total length (clamped to the buffer).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (start, total) = (self.header_len(), usize::from(self.total_len()));
        let b = self.buffer.as_mut();
        let end = total.min(b.len());
        &mut b[start..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 192.168.0.1 -> 192.168.0.199, UDP, total length 0x73, checksum b861.
    const HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0,
        0xa8, 0x00, 0xc7,
    ];

    fn packet() -> Vec<u8> {
        let mut v = HEADER.to_vec();
        v.resize(0x73 + 6, 0xee); // 6 bytes of Ethernet-style padding
        v
    }

    #[test]
    fn deconstruct() {
        let buf = packet();
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 0x73);
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment() && !p.is_first_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), 17);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(192, 168, 0, 199));
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 0x73 - 20, "padding excluded");
    }

    #[test]
    fn fragments() {
        let mut buf = packet();
        let mut p = Ipv4Packet::new_checked(&mut buf[..]).unwrap();
        p.set_flags_frag(false, true, 0);
        assert!(p.is_fragment() && p.is_first_fragment());
        p.set_flags_frag(false, true, 1480);
        assert!(p.is_fragment() && !p.is_first_fragment());
        assert_eq!(p.frag_offset(), 1480);
        p.set_flags_frag(false, false, 2960);
        assert!(p.is_fragment() && !p.is_first_fragment() && !p.more_frags());
    }

    #[test]
    fn rejects() {
        let buf = packet();
        for n in 0..20 {
            assert_eq!(
                Ipv4Packet::new_checked(&buf[..n]).unwrap_err(),
                DropReason::Truncated
            );
        }
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..0x72]).unwrap_err(),
            DropReason::Truncated
        );
        let mut b = packet();
        b[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            DropReason::MalformedIpv4
        );
        b[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            DropReason::MalformedIpv4
        );
        b[0] = 0x4f; // 60-byte header but only 20 bytes before total length 0x73: fine
        assert!(Ipv4Packet::new_checked(&b[..]).is_ok());
        assert_eq!(
            Ipv4Packet::new_checked(&b[..40]).unwrap_err(),
            DropReason::Truncated
        );
        let mut b = packet();
        b[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            DropReason::MalformedIpv4
        );
    }

    #[test]
    fn construct_and_rewrite_keep_checksum_valid() {
        let mut buf = packet();
        let mut p = Ipv4Packet::new_checked(&mut buf[..]).unwrap();
        p.set_ttl_update_checksum(3);
        assert!(p.verify_checksum());
        p.rewrite_dst_addr(Ipv4Addr::new(10, 1, 2, 3));
        p.rewrite_src_addr(Ipv4Addr::new(172, 16, 0, 9));
        assert!(p.verify_checksum());
        let c = p.checksum();
        p.fill_checksum();
        assert_eq!(c, p.checksum());
        let h = etherparse::Ipv4HeaderSlice::from_slice(&buf).unwrap();
        assert_eq!(h.header_checksum(), h.to_header().calc_header_checksum());
        assert_eq!(h.destination(), [10, 1, 2, 3]);
    }
}
