//! Ethernet II frames with at most one 802.1Q tag.
//!
//! [`EthernetFrame`] exposes the MAC addresses, the VLAN id if tagged, the
//! EtherType *after* the tag and the L3 offset (14 or 18). A second tag
//! (QinQ) is not unwrapped: its inner EtherType reads as 0x8100/0x88A8 and
//! the parser calls that unsupported. After `new_checked` the whole header,
//! tag included, is in the buffer.

use std::fmt;

use super::be16;
use crate::DropReason;

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// EtherType (TPID) of an 802.1Q tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;

/// Length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = 14;
/// Length of one 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;
/// Minimum frame length on the wire without the FCS; shorter frames are padded.
pub const MIN_FRAME_LEN: usize = 60;

/// Byte offsets of the Ethernet header fields.
pub mod field {
    use std::ops::Range;
    /// Destination MAC.
    pub const DST: Range<usize> = 0..6;
    /// Source MAC.
    pub const SRC: Range<usize> = 6..12;
    /// EtherType, or TPID 0x8100 when tagged.
    pub const ETHERTYPE: Range<usize> = 12..14;
    /// 802.1Q tag control information (PCP, DEI, VLAN id), when tagged.
    pub const TCI: Range<usize> = 14..16;
    /// EtherType after the tag, when tagged.
    pub const INNER_ETHERTYPE: Range<usize> = 16..18;
}

/// A MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// 00:00:00:00:00:00.
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// Whether the group bit is set (multicast or broadcast).
    #[inline]
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }

    /// Whether this can be one station's address: not multicast or
    /// broadcast, and not all zeros.
    #[inline]
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast() && !matches!(self.0, [0, 0, 0, 0, 0, 0])
    }

    /// The Ethernet multicast MAC for an IPv6 multicast address (RFC 2464 §7).
    #[inline]
    pub const fn ipv6_multicast(addr: &[u8; 16]) -> MacAddr {
        MacAddr([0x33, 0x33, addr[12], addr[13], addr[14], addr[15]])
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A view of an Ethernet II frame with an optional single 802.1Q tag.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wrap without checking; accessors may panic on a short buffer.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wrap after checking that the header (and tag, if any) is present.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// `Truncated` unless the full header, tag included, is in the buffer.
    #[inline]
    pub fn check_len(&self) -> Result<(), DropReason> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < self.header_len() {
            return Err(DropReason::Truncated);
        }
        Ok(())
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC.
    #[inline]
    pub fn dst_addr(&self) -> MacAddr {
        let b = &self.buffer.as_ref()[field::DST];
        MacAddr([b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    /// Source MAC.
    #[inline]
    pub fn src_addr(&self) -> MacAddr {
        let b = &self.buffer.as_ref()[field::SRC];
        MacAddr([b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    /// The EtherType at offset 12: 0x8100 when tagged.
    #[inline]
    pub fn outer_ethertype(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::ETHERTYPE])
    }

    /// Whether an 802.1Q tag follows the source MAC.
    #[inline]
    pub fn is_vlan_tagged(&self) -> bool {
        self.outer_ethertype() == ETHERTYPE_VLAN
    }

    /// The 12-bit VLAN id, if tagged.
    #[inline]
    pub fn vlan_id(&self) -> Option<u16> {
        if self.is_vlan_tagged() {
            Some(be16(&self.buffer.as_ref()[field::TCI]) & 0x0fff)
        } else {
            None
        }
    }

    /// The EtherType of the payload, after the tag if there is one.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        if self.is_vlan_tagged() {
            be16(&self.buffer.as_ref()[field::INNER_ETHERTYPE])
        } else {
            self.outer_ethertype()
        }
    }

    /// Header length including the tag: the offset of the L3 header.
    /// Reads only the first 14 bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        if self.is_vlan_tagged() {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Everything after the header (and tag).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Set the destination MAC.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&addr.0);
    }

    /// Set the source MAC.
    #[inline]
    pub fn set_src_addr(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&addr.0);
    }

    /// Set the VLAN id of a tagged frame, keeping the tag's priority and
    /// drop-eligible bits; an untagged frame is left alone.
    #[inline]
    pub fn set_vlan_id(&mut self, vid: u16) {
        if !self.is_vlan_tagged() {
            return;
        }
        // Checked frames hold their tag; an unchecked short one is left.
        if let Some(tci) = self.buffer.as_mut().get_mut(field::TCI) {
            let v = (u16::from_be_bytes([tci[0], tci[1]]) & 0xf000) | (vid & 0x0fff);
            tci.copy_from_slice(&v.to_be_bytes());
        }
    }

    /// Set the payload EtherType (after the tag if tagged).
    #[inline]
    pub fn set_ethertype(&mut self, ethertype: u16) {
        let at = if self.is_vlan_tagged() {
            field::INNER_ETHERTYPE
        } else {
            field::ETHERTYPE
        };
        self.buffer.as_mut()[at].copy_from_slice(&ethertype.to_be_bytes());
    }

    /// Mutable payload after the header (and tag).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let at = self.header_len();
        &mut self.buffer.as_mut()[at..]
    }
}

/// Write an Ethernet header (with a tag when `vlan` is set) at the start of
/// `buf`; returns the header length. `buf` must hold at least 18 bytes.
#[inline]
pub fn emit_header(buf: &mut [u8], dst: MacAddr, src: MacAddr, vlan: Option<u16>, ethertype: u16) -> usize {
    buf[field::DST].copy_from_slice(&dst.0);
    buf[field::SRC].copy_from_slice(&src.0);
    match vlan {
        Some(id) => {
            buf[field::ETHERTYPE].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
            buf[field::TCI].copy_from_slice(&(id & 0x0fff).to_be_bytes());
            buf[field::INNER_ETHERTYPE].copy_from_slice(&ethertype.to_be_bytes());
            HEADER_LEN + VLAN_TAG_LEN
        }
        None => {
            buf[field::ETHERTYPE].copy_from_slice(&ethertype.to_be_bytes());
            HEADER_LEN
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNTAGGED: [u8; 16] = [
        0x02, 0, 0, 0, 0, 1, // dst
        0x02, 0, 0, 0, 0, 2, // src
        0x08, 0x00, // IPv4
        0x45, 0x00,
    ];
    const TAGGED: [u8; 20] = [
        0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x81, 0x00, 0xa0, 0x64, // PCP 5, VLAN 100
        0x86, 0xdd, 0x60, 0x00,
    ];

    #[test]
    fn deconstruct_untagged() {
        let f = EthernetFrame::new_checked(&UNTAGGED[..]).unwrap();
        assert_eq!(f.dst_addr(), MacAddr([2, 0, 0, 0, 0, 1]));
        assert_eq!(f.src_addr().to_string(), "02:00:00:00:00:02");
        assert_eq!(f.ethertype(), ETHERTYPE_IPV4);
        assert_eq!(f.vlan_id(), None);
        assert_eq!(f.header_len(), 14);
        assert_eq!(f.payload(), &[0x45, 0x00]);
    }

    #[test]
    fn deconstruct_tagged() {
        let f = EthernetFrame::new_checked(&TAGGED[..]).unwrap();
        assert_eq!(f.vlan_id(), Some(100));
        assert_eq!(f.ethertype(), ETHERTYPE_IPV6);
        assert_eq!(f.header_len(), 18);
        assert_eq!(f.payload(), &[0x60, 0x00]);
    }

    #[test]
    fn truncated() {
        for n in 0..14 {
            assert_eq!(
                EthernetFrame::new_checked(&UNTAGGED[..n]).unwrap_err(),
                DropReason::Truncated
            );
        }
        for n in 0..18 {
            assert_eq!(
                EthernetFrame::new_checked(&TAGGED[..n]).unwrap_err(),
                DropReason::Truncated
            );
        }
    }

    #[test]
    fn construct_matches_fixture() {
        let mut buf = [0u8; 18];
        let n = emit_header(
            &mut buf,
            MacAddr([2, 0, 0, 0, 0, 1]),
            MacAddr([2, 0, 0, 0, 0, 2]),
            Some(100),
            ETHERTYPE_IPV6,
        );
        assert_eq!(n, 18);
        buf[14] = 0xa0; // PCP bits are not emitted; the fixture has them
        assert_eq!(&buf[..], &TAGGED[..18]);
        let mut f = EthernetFrame::new_checked(&mut buf[..]).unwrap();
        f.set_ethertype(ETHERTYPE_IPV4);
        f.set_src_addr(MacAddr::BROADCAST);
        assert_eq!(f.ethertype(), ETHERTYPE_IPV4);
        assert!(f.src_addr().is_multicast());
    }
}
