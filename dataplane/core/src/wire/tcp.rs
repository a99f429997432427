//! TCP headers (RFC 9293).
//!
//! `new_checked` guarantees 20 bytes, a data offset of 5..=15 words and the
//! whole header (options included) in the buffer; every failure is
//! `MalformedTcp`. The buffer should be the IP payload, so the segment
//! length used for the checksum is the buffer length.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{be16, be32, ip_proto};
use crate::checksum;
use crate::DropReason;

/// Length of a header without options.
pub const MIN_HEADER_LEN: usize = 20;

/// Byte offsets of the TCP header fields.
pub mod field {
    use std::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Sequence number.
    pub const SEQ: Range<usize> = 4..8;
    /// Acknowledgment number.
    pub const ACK: Range<usize> = 8..12;
    /// Data offset (high nibble) and reserved bits.
    pub const DATA_OFFSET: usize = 12;
    /// Flags (CWR ECE URG ACK PSH RST SYN FIN).
    pub const FLAGS: usize = 13;
    /// Window.
    pub const WINDOW: Range<usize> = 14..16;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 16..18;
    /// Urgent pointer.
    pub const URGENT: Range<usize> = 18..20;
}

/// The eight TCP flag bits of byte 13.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// FIN.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// SYN.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// RST.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// PSH.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// ACK.
    pub const ACK: TcpFlags = TcpFlags(0x10);
    /// URG.
    pub const URG: TcpFlags = TcpFlags(0x20);
    /// ECE.
    pub const ECE: TcpFlags = TcpFlags(0x40);
    /// CWR.
    pub const CWR: TcpFlags = TcpFlags(0x80);

    /// Whether every bit of `other` is set.
    #[inline]
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// A SYN without ACK: the only segment that may open a connection.
    #[inline]
    pub const fn is_syn_only(self) -> bool {
        self.0 & (Self::SYN.0 | Self::ACK.0 | Self::RST.0) == Self::SYN.0
    }
}

impl std::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

/// A view of a TCP segment.
#[derive(Debug, Clone)]
pub struct TcpPacket<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wrap without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    /// Wrap after checking the header length.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let p = Self::new_unchecked(buffer);
        let len = p.buffer.as_ref().len();
        if len < MIN_HEADER_LEN {
            return Err(DropReason::MalformedTcp);
        }
        let hl = p.header_len();
        if hl < MIN_HEADER_LEN || hl > len {
            return Err(DropReason::MalformedTcp);
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

    /// Sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::SEQ])
    }

    /// Acknowledgment number.
    #[inline]
    pub fn ack_number(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::ACK])
    }

    /// Header length in bytes (data offset * 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFFSET] >> 4) * 4
    }

    /// Flags.
    #[inline]
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.buffer.as_ref()[field::FLAGS])
    }

    /// Window.
    #[inline]
    pub fn window(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::WINDOW])
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// Urgent pointer.
    #[inline]
    pub fn urgent(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::URGENT])
    }

    /// Options bytes.
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..self.header_len()]
    }

    /// Segment data after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// Verify the checksum over an IPv4 pseudo-header.
    #[inline]
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let b = self.buffer.as_ref();
        checksum::verify_l4(
            checksum::pseudo_header_v4(src, dst, ip_proto::TCP, b.len() as u16),
            b,
        )
    }

    /// Verify the checksum over an IPv6 pseudo-header.
    #[inline]
    pub fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        checksum::verify_l4(
            checksum::pseudo_header_v6(src, dst, ip_proto::TCP, b.len() as u32),
            b,
        )
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
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

    /// Set the sequence number.
    #[inline]
    pub fn set_seq_number(&mut self, v: u32) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&v.to_be_bytes());
    }

    /// Set the acknowledgment number.
    #[inline]
    pub fn set_ack_number(&mut self, v: u32) {
        self.buffer.as_mut()[field::ACK].copy_from_slice(&v.to_be_bytes());
    }

    /// Set the header length in bytes (a multiple of 4), clearing reserved bits.
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        self.buffer.as_mut()[field::DATA_OFFSET] = ((len / 4) as u8) << 4;
    }

    /// Set the flags.
    #[inline]
    pub fn set_flags(&mut self, f: TcpFlags) {
        self.buffer.as_mut()[field::FLAGS] = f.0;
    }

    /// Set the window.
    #[inline]
    pub fn set_window(&mut self, v: u16) {
        self.buffer.as_mut()[field::WINDOW].copy_from_slice(&v.to_be_bytes());
    }

    /// Set the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    /// Set the urgent pointer.
    #[inline]
    pub fn set_urgent(&mut self, v: u16) {
        self.buffer.as_mut()[field::URGENT].copy_from_slice(&v.to_be_bytes());
    }

    /// Recompute the checksum over an IPv4 pseudo-header.
    #[inline]
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum_v4(src, dst, ip_proto::TCP, self.buffer.as_ref());
        self.set_checksum(c);
    }

    /// Recompute the checksum over an IPv6 pseudo-header.
    #[inline]
    pub fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum_v6(src, dst, ip_proto::TCP, self.buffer.as_ref());
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 1234 -> 80, seq 1, ack 0, data offset 6 (MSS option), SYN, window 64240.
    const SYN: [u8; 24] = [
        0x04, 0xd2, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x60, 0x02, 0xfa, 0xf0, 0, 0, 0, 0, 2, 4, 5, 0xb4,
    ];

    #[test]
    fn deconstruct() {
        let p = TcpPacket::new_checked(&SYN[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (1234, 80));
        assert_eq!((p.seq_number(), p.ack_number()), (1, 0));
        assert_eq!(p.header_len(), 24);
        assert!(p.flags().is_syn_only() && p.flags().contains(TcpFlags::SYN));
        assert_eq!(p.window(), 64240);
        assert_eq!(p.options(), &[2, 4, 5, 0xb4]);
        assert!(p.payload().is_empty());
    }

    #[test]
    fn checksum_matches_etherparse() {
        let (s, d) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut b = SYN.to_vec();
        b.extend_from_slice(b"hello");
        let mut p = TcpPacket::new_checked(&mut b[..]).unwrap();
        p.fill_checksum_v4(s, d);
        assert!(p.verify_checksum_v4(s, d));
        let h = etherparse::TcpHeaderSlice::from_slice(&b).unwrap().to_header();
        assert_eq!(
            h.checksum,
            h.calc_checksum_ipv4_raw(s.octets(), d.octets(), b"hello")
                .unwrap()
        );
        let (s6, d6): (Ipv6Addr, Ipv6Addr) = ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap());
        let mut p = TcpPacket::new_checked(&mut b[..]).unwrap();
        p.fill_checksum_v6(&s6, &d6);
        assert!(p.verify_checksum_v6(&s6, &d6));
        assert!(!p.verify_checksum_v4(s, d));
        let h = etherparse::TcpHeaderSlice::from_slice(&b).unwrap().to_header();
        assert_eq!(
            h.checksum,
            h.calc_checksum_ipv6_raw(s6.octets(), d6.octets(), b"hello")
                .unwrap()
        );
    }

    #[test]
    fn rejects() {
        for n in 0..24 {
            assert_eq!(
                TcpPacket::new_checked(&SYN[..n]).unwrap_err(),
                DropReason::MalformedTcp,
                "{n}"
            );
        }
        let mut b = SYN;
        b[12] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&b[..]).unwrap_err(),
            DropReason::MalformedTcp
        );
    }
}
