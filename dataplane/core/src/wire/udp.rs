//! UDP headers (RFC 768).
//!
//! `new_checked` guarantees 8 bytes and a length field of 8..=buffer length;
//! every failure is `MalformedUdp`. The payload ends at the length field. A
//! zero checksum means "none" over IPv4 and is invalid over IPv6; see
//! [`crate::checksum`] for the rewrite rules.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{be16, ip_proto};
use crate::checksum;
use crate::DropReason;

/// Header length.
pub const HEADER_LEN: usize = 8;

/// Byte offsets of the UDP header fields.
pub mod field {
    use std::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Length of header and data.
    pub const LENGTH: Range<usize> = 4..6;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 6..8;
}

/// A view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct UdpPacket<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wrap without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wrap after checking the header and the length field.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let p = Self::new_unchecked(buffer);
        let len = p.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(DropReason::MalformedUdp);
        }
        let l = usize::from(p.len());
        if l < HEADER_LEN || l > len {
            return Err(DropReason::MalformedUdp);
        }
        Ok(p)
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::SRC_PORT])
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::DST_PORT])
    }

    /// Length field (header and data).
    #[inline]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::LENGTH])
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// Data after the header, up to the length field.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }

    /// Verify over an IPv4 pseudo-header; a zero checksum ("none") passes.
    #[inline]
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let d = &self.buffer.as_ref()[..usize::from(self.len())];
        self.checksum() == 0
            || checksum::verify_l4(checksum::pseudo_header_v4(src, dst, ip_proto::UDP, self.len()), d)
    }

    /// Verify over an IPv6 pseudo-header; a zero checksum fails.
    #[inline]
    pub fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let d = &self.buffer.as_ref()[..usize::from(self.len())];
        self.checksum() != 0
            && checksum::verify_l4(
                checksum::pseudo_header_v6(src, dst, ip_proto::UDP, u32::from(self.len())),
                d,
            )
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Set the source port (checksum untouched).
    #[inline]
    pub fn set_src_port(&mut self, p: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&p.to_be_bytes());
    }

    /// Set the destination port (checksum untouched).
    #[inline]
    pub fn set_dst_port(&mut self, p: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&p.to_be_bytes());
    }

    /// Set the length field.
    #[inline]
    pub fn set_len(&mut self, l: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&l.to_be_bytes());
    }

    /// Set the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    /// Recompute over an IPv4 pseudo-header (a computed 0 becomes 0xFFFF).
    #[inline]
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let len = self.len();
        let s = checksum::pseudo_header_v4(src, dst, ip_proto::UDP, len)
            + checksum::sum(&self.buffer.as_ref()[..usize::from(len)]);
        self.set_checksum(checksum::udp_finish(s));
    }

    /// Recompute over an IPv6 pseudo-header (a computed 0 becomes 0xFFFF).
    #[inline]
    pub fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let len = self.len();
        let s = checksum::pseudo_header_v6(src, dst, ip_proto::UDP, u32::from(len))
            + checksum::sum(&self.buffer.as_ref()[..usize::from(len)]);
        self.set_checksum(checksum::udp_finish(s));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 5353 -> 53, length 12, checksum 0 ("none"), 4 data bytes, 2 bytes beyond.
    const DGRAM: [u8; 14] = [0x14, 0xe9, 0x00, 0x35, 0x00, 0x0c, 0, 0, 1, 2, 3, 4, 0xee, 0xee];

    #[test]
    fn deconstruct() {
        let p = UdpPacket::new_checked(&DGRAM[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (5353, 53, 12));
        assert_eq!(p.payload(), &[1, 2, 3, 4]);
        let (s, d) = (Ipv4Addr::new(1, 1, 1, 1), Ipv4Addr::new(2, 2, 2, 2));
        assert!(p.verify_checksum_v4(s, d), "zero means none over IPv4");
        assert!(
            !p.verify_checksum_v6(&Ipv6Addr::LOCALHOST, &Ipv6Addr::LOCALHOST),
            "zero invalid over IPv6"
        );
    }

    #[test]
    fn checksum_matches_etherparse() {
        let (s, d) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut b = DGRAM;
        let mut p = UdpPacket::new_checked(&mut b[..]).unwrap();
        p.fill_checksum_v4(s, d);
        assert!(p.verify_checksum_v4(s, d));
        let h = etherparse::UdpHeaderSlice::from_slice(&b).unwrap().to_header();
        assert_eq!(
            h.checksum,
            h.calc_checksum_ipv4_raw(s.octets(), d.octets(), &[1, 2, 3, 4])
                .unwrap()
        );
    }

    #[test]
    fn rejects() {
        for n in 0..12 {
            assert_eq!(
                UdpPacket::new_checked(&DGRAM[..n]).unwrap_err(),
                DropReason::MalformedUdp,
                "{n}"
            );
        }
        let mut b = DGRAM;
        b[5] = 7;
        assert_eq!(
            UdpPacket::new_checked(&b[..]).unwrap_err(),
            DropReason::MalformedUdp
        );
    }
}
