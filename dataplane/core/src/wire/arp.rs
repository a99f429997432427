//! ARP for Ethernet/IPv4 only (RFC 826), the one kind lbd answers.
//!
//! `new_checked` accepts only hardware type 1, protocol 0x0800, lengths 6
//! and 4 (`MalformedArp` otherwise) in a buffer of at least 28 bytes
//! (`Truncated`), so every accessor reads fixed offsets safely.

use std::net::Ipv4Addr;

use super::ethernet::{self, MacAddr, ETHERTYPE_ARP, ETHERTYPE_IPV4};
use super::{be16, be32};
use crate::DropReason;

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;
/// ARP operation: request.
pub const OP_REQUEST: u16 = 1;
/// ARP operation: reply.
pub const OP_REPLY: u16 = 2;

/// Byte offsets of the ARP fields.
pub mod field {
    use std::ops::Range;
    /// Hardware type (1 = Ethernet).
    pub const HTYPE: Range<usize> = 0..2;
    /// Protocol type (0x0800 = IPv4).
    pub const PTYPE: Range<usize> = 2..4;
    /// Hardware address length.
    pub const HLEN: usize = 4;
    /// Protocol address length.
    pub const PLEN: usize = 5;
    /// Operation.
    pub const OPER: Range<usize> = 6..8;
    /// Sender hardware address.
    pub const SHA: Range<usize> = 8..14;
    /// Sender protocol address.
    pub const SPA: Range<usize> = 14..18;
    /// Target hardware address.
    pub const THA: Range<usize> = 18..24;
    /// Target protocol address.
    pub const TPA: Range<usize> = 24..28;
}

/// A view of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone)]
pub struct ArpPacket<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wrap without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        ArpPacket { buffer }
    }

    /// Wrap after checking the length and the Ethernet/IPv4 type fields.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let p = Self::new_unchecked(buffer);
        let b = p.buffer.as_ref();
        if b.len() < PACKET_LEN {
            return Err(DropReason::Truncated);
        }
        if be16(&b[field::HTYPE]) != 1
            || be16(&b[field::PTYPE]) != ETHERTYPE_IPV4
            || b[field::HLEN] != 6
            || b[field::PLEN] != 4
        {
            return Err(DropReason::MalformedArp);
        }
        Ok(p)
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Operation ([`OP_REQUEST`], [`OP_REPLY`], ...).
    #[inline]
    pub fn operation(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::OPER])
    }

    /// Sender hardware address.
    #[inline]
    pub fn sender_mac(&self) -> MacAddr {
        mac_at(self.buffer.as_ref(), field::SHA.start)
    }

    /// Sender protocol address.
    #[inline]
    pub fn sender_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(be32(&self.buffer.as_ref()[field::SPA]))
    }

    /// Target hardware address.
    #[inline]
    pub fn target_mac(&self) -> MacAddr {
        mac_at(self.buffer.as_ref(), field::THA.start)
    }

    /// Target protocol address.
    #[inline]
    pub fn target_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(be32(&self.buffer.as_ref()[field::TPA]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Set the operation.
    #[inline]
    pub fn set_operation(&mut self, op: u16) {
        self.buffer.as_mut()[field::OPER].copy_from_slice(&op.to_be_bytes());
    }

    /// Set the sender hardware address.
    #[inline]
    pub fn set_sender_mac(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&mac.0);
    }

    /// Set the sender protocol address.
    #[inline]
    pub fn set_sender_ip(&mut self, ip: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&ip.octets());
    }

    /// Set the target hardware address.
    #[inline]
    pub fn set_target_mac(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&mac.0);
    }

    /// Set the target protocol address.
    #[inline]
    pub fn set_target_ip(&mut self, ip: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&ip.octets());
    }
}

#[inline]
fn mac_at(b: &[u8], at: usize) -> MacAddr {
    MacAddr([b[at], b[at + 1], b[at + 2], b[at + 3], b[at + 4], b[at + 5]])
}

/// The fields of an Ethernet/IPv4 ARP packet, for building one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    /// [`OP_REQUEST`] or [`OP_REPLY`].
    pub operation: u16,
    /// Sender hardware address.
    pub sender_mac: MacAddr,
    /// Sender protocol address.
    pub sender_ip: Ipv4Addr,
    /// Target hardware address.
    pub target_mac: MacAddr,
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// Read a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Self {
        ArpRepr {
            operation: p.operation(),
            sender_mac: p.sender_mac(),
            sender_ip: p.sender_ip(),
            target_mac: p.target_mac(),
            target_ip: p.target_ip(),
        }
    }

    /// Write into the first [`PACKET_LEN`] bytes of `buf` (which must hold them).
    pub fn emit(&self, buf: &mut [u8]) {
        buf[field::HTYPE].copy_from_slice(&1u16.to_be_bytes());
        buf[field::PTYPE].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        buf[field::HLEN] = 6;
        buf[field::PLEN] = 4;
        let mut p = ArpPacket::new_unchecked(buf);
        p.set_operation(self.operation);
        p.set_sender_mac(self.sender_mac);
        p.set_sender_ip(self.sender_ip);
        p.set_target_mac(self.target_mac);
        p.set_target_ip(self.target_ip);
    }

    /// Write a complete Ethernet frame carrying this ARP packet, padded to
    /// the 60-byte minimum; returns its length, or `None` if `buf` is short.
    pub fn emit_frame(&self, buf: &mut [u8], eth_dst: MacAddr, vlan: Option<u16>) -> Option<usize> {
        let hdr = ethernet::HEADER_LEN + if vlan.is_some() { ethernet::VLAN_TAG_LEN } else { 0 };
        let len = (hdr + PACKET_LEN).max(ethernet::MIN_FRAME_LEN);
        let frame = buf.get_mut(..len)?;
        let at = ethernet::emit_header(frame, eth_dst, self.sender_mac, vlan, ETHERTYPE_ARP);
        self.emit(&mut frame[at..]);
        frame[at + PACKET_LEN..].fill(0);
        Some(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Who has 10.0.0.1? Tell 10.0.0.2 (02:00:00:00:00:02).
    const REQUEST: [u8; 28] = [
        0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 2, 10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1,
    ];

    #[test]
    fn deconstruct() {
        let p = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(p.operation(), OP_REQUEST);
        assert_eq!(p.sender_mac(), MacAddr([2, 0, 0, 0, 0, 2]));
        assert_eq!(p.sender_ip(), Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(p.target_mac(), MacAddr::ZERO);
        assert_eq!(p.target_ip(), Ipv4Addr::new(10, 0, 0, 1));
    }

    #[test]
    fn construct_round_trips() {
        let repr = ArpRepr::parse(&ArpPacket::new_checked(&REQUEST[..]).unwrap());
        let mut buf = [0xaau8; 28];
        repr.emit(&mut buf);
        assert_eq!(buf, REQUEST);
    }

    #[test]
    fn rejects_bad_types_and_short() {
        for n in 0..28 {
            assert_eq!(
                ArpPacket::new_checked(&REQUEST[..n]).unwrap_err(),
                DropReason::Truncated
            );
        }
        for i in [1usize, 2, 4, 5] {
            let mut b = REQUEST;
            b[i] ^= 0x10;
            assert_eq!(
                ArpPacket::new_checked(&b[..]).unwrap_err(),
                DropReason::MalformedArp
            );
        }
    }

    #[test]
    fn frame_is_padded_and_parses_with_etherparse() {
        let repr = ArpRepr::parse(&ArpPacket::new_checked(&REQUEST[..]).unwrap());
        let mut buf = [0xaau8; 64];
        let n = repr.emit_frame(&mut buf, MacAddr::BROADCAST, Some(7)).unwrap();
        assert_eq!(n, 60);
        let sliced = etherparse::SlicedPacket::from_ethernet(&buf[..n]).unwrap();
        let Some(etherparse::NetSlice::Arp(arp)) = sliced.net else {
            panic!("not arp")
        };
        let arp = arp.to_packet().try_eth_ipv4().unwrap();
        assert_eq!(arp.target_ipv4, [10, 0, 0, 1]);
        assert!(buf[18 + 28..60].iter().all(|&b| b == 0));
        assert!(repr
            .emit_frame(&mut [0u8; 59], MacAddr::BROADCAST, None)
            .is_none());
    }
}
