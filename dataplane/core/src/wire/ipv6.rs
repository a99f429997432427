//! IPv6 headers (RFC 8200) and the extension-header walker.
//!
//! `new_checked` guarantees 40 bytes (`Truncated`), version 6
//! (`MalformedIpv6`) and 40 + payload length within the buffer
//! (`Truncated`); jumbograms (payload length 0 with a hop-by-hop jumbo
//! option) are not supported and read as an empty payload.
//!
//! [`walk_extensions`] follows hop-by-hop (first only), routing, destination
//! options and fragment headers, at most [`MAX_EXTENSION_HEADERS`] of them,
//! and stops at the first header that is not one: the upper layer. It stops
//! early at a non-first fragment, whose payload is not an upper-layer header.
//! ESP, AH, "no next header", other known extension types, truncated and
//! overlong chains are `Ipv6ExtensionHeader`, and so is a routing header with
//! segments left: lbd is not the packet's final destination, does not
//! forward source routes (RFC 8200 §4.4 discards an unrecognised one), and
//! the L4 pseudo-header holds the route's last address, not the destination
//! NAT would rewrite. Checked here, before any connection opens.

use std::net::Ipv6Addr;

use super::ip_proto;
use super::{be16, be32};
use crate::DropReason;

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;
/// Longest extension chain the walker follows.
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// Byte offsets of the IPv6 header fields.
pub mod field {
    use std::ops::Range;
    /// Version, traffic class, flow label.
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    /// Payload length.
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    /// Next header.
    pub const NEXT_HEADER: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address.
    pub const SRC: Range<usize> = 8..24;
    /// Destination address.
    pub const DST: Range<usize> = 24..40;
}

/// A view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wrap without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wrap after the checks listed in the module doc.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let p = Self::new_unchecked(buffer);
        p.check_header()?;
        if HEADER_LEN + usize::from(p.payload_len()) > p.buffer.as_ref().len() {
            return Err(DropReason::Truncated);
        }
        Ok(p)
    }

    /// Check the fixed header only (for quoted packets in ICMPv6 errors).
    #[inline]
    pub fn check_header(&self) -> Result<(), DropReason> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(DropReason::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(DropReason::MalformedIpv6);
        }
        Ok(())
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version (6 once checked).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Traffic class.
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (be16(&self.buffer.as_ref()[0..2]) >> 4) as u8
    }

    /// Flow label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::VER_TC_FLOW]) & 0x000f_ffff
    }

    /// Payload length (extension headers included).
    #[inline]
    pub fn payload_len(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::PAYLOAD_LEN])
    }

    /// Next header of the fixed header.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(addr_at(self.buffer.as_ref(), field::SRC.start))
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(addr_at(self.buffer.as_ref(), field::DST.start))
    }

    /// The payload (extension headers and upper layer), up to the payload
    /// length, clamped to the buffer.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = (HEADER_LEN + usize::from(self.payload_len())).min(b.len());
        &b[HEADER_LEN..end]
    }

    /// Walk the extension headers of the payload.
    #[inline]
    pub fn upper_layer(&self) -> Result<Ipv6Upper, DropReason> {
        walk_extensions(self.next_header(), self.payload())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Set version 6, traffic class and flow label.
    #[inline]
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let v = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&v.to_be_bytes());
    }

    /// Set the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, len: u16) {
        self.buffer.as_mut()[field::PAYLOAD_LEN].copy_from_slice(&len.to_be_bytes());
    }

    /// Set the next header.
    #[inline]
    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = nh;
    }

    /// Set the hop limit (not covered by any checksum).
    #[inline]
    pub fn set_hop_limit(&mut self, h: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = h;
    }

    /// Set the source address (the caller fixes the L4 checksum).
    #[inline]
    pub fn set_src_addr(&mut self, a: &Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    /// Set the destination address (the caller fixes the L4 checksum).
    #[inline]
    pub fn set_dst_addr(&mut self, a: &Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }

    /// Mutable payload up to the payload length (clamped to the buffer).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        let b = self.buffer.as_mut();
        let end = end.min(b.len());
        &mut b[HEADER_LEN..end]
    }
}

#[inline]
fn addr_at(b: &[u8], at: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    a
}

/// An IPv6 fragment header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Fragment {
    /// Fragment offset in bytes.
    pub offset: u16,
    /// More-fragments flag.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

impl Ipv6Fragment {
    /// Whether this fragment carries the start of the upper-layer header.
    #[inline]
    pub fn is_first(&self) -> bool {
        self.offset == 0
    }

    /// An atomic fragment (offset 0, no more fragments): a whole datagram
    /// with a fragment header, processed as unfragmented (RFC 8200 §4.5,
    /// RFC 6946).
    #[inline]
    pub fn is_atomic(&self) -> bool {
        self.offset == 0 && !self.more
    }
}

/// Where the extension-header walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Upper {
    /// The upper-layer protocol (TCP, UDP, ICMPv6, ...).
    pub protocol: u8,
    /// Offset of the upper-layer header (or, for a non-first fragment, of the
    /// fragment data) from the start of the IPv6 payload.
    pub offset: usize,
    /// The fragment header, if the chain had one.
    pub fragment: Option<Ipv6Fragment>,
}

/// Walk the extension headers in `payload` (the bytes after the fixed header)
/// starting from `next_header`. See the module doc for what is accepted.
#[inline]
pub fn walk_extensions(mut next_header: u8, payload: &[u8]) -> Result<Ipv6Upper, DropReason> {
    let mut offset = 0usize;
    let mut fragment = None;
    for n in 0..=MAX_EXTENSION_HEADERS {
        let len = match next_header {
            ip_proto::HOPOPT if n == 0 => ext_len(payload, offset)?,
            ip_proto::IPV6_ROUTE => {
                let len = ext_len(payload, offset)?;
                // Segments left (`ext_len` checked the header's 8 bytes).
                if payload[offset + 3] != 0 {
                    return Err(DropReason::Ipv6ExtensionHeader);
                }
                len
            }
            ip_proto::IPV6_OPTS => ext_len(payload, offset)?,
            ip_proto::IPV6_FRAG => {
                let h = payload.get(offset..offset + 8).ok_or(DropReason::Ipv6ExtensionHeader)?;
                if fragment.is_some() {
                    return Err(DropReason::Ipv6ExtensionHeader);
                }
                let off_flags = be16(&h[2..4]);
                let frag = Ipv6Fragment { offset: off_flags & 0xfff8, more: off_flags & 1 != 0, ident: be32(&h[4..8]) };
                fragment = Some(frag);
                if !frag.is_first() {
                    // The rest is the middle of the datagram: stop here.
                    return Ok(Ipv6Upper { protocol: h[0], offset: offset + 8, fragment });
                }
                8
            }
            // A hop-by-hop header anywhere but first is invalid (RFC 8200 §4.3);
            // the rest are extension-like headers lbd does not walk.
            ip_proto::HOPOPT
            | ip_proto::ESP
            | ip_proto::AH
            | ip_proto::IPV6_NONXT
            | 135 // mobility
            | 139 // HIP
            | 140 // shim6
            | 253
            | 254 => return Err(DropReason::Ipv6ExtensionHeader),
            protocol => return Ok(Ipv6Upper { protocol, offset, fragment }),
        };
        next_header = payload[offset];
        offset += len;
    }
    Err(DropReason::Ipv6ExtensionHeader)
}

/// Length of a (hdr ext len + 1) * 8 extension header at `offset`, checked to
/// lie within `payload`.
#[inline]
fn ext_len(payload: &[u8], offset: usize) -> Result<usize, DropReason> {
    let h = payload
        .get(offset..offset + 2)
        .ok_or(DropReason::Ipv6ExtensionHeader)?;
    let len = (usize::from(h[1]) + 1) * 8;
    if offset + len > payload.len() {
        return Err(DropReason::Ipv6ExtensionHeader);
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0x60, 0, 0, 0];
        v.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        v.extend_from_slice(&[next, 64]);
        v.extend_from_slice(&Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).octets());
        v.extend_from_slice(&Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2).octets());
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn deconstruct_and_construct() {
        let buf = header(ip_proto::UDP, &[0; 8]);
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.payload_len(), 8);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.dst_addr(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(
            p.upper_layer().unwrap(),
            Ipv6Upper {
                protocol: ip_proto::UDP,
                offset: 0,
                fragment: None
            }
        );
        let mut b2 = vec![0u8; 48];
        let mut q = Ipv6Packet::new_unchecked(&mut b2[..]);
        q.set_version_tc_flow(0, 0);
        q.set_payload_len(8);
        q.set_next_header(ip_proto::UDP);
        q.set_hop_limit(64);
        q.set_src_addr(&"2001:db8::1".parse().unwrap());
        q.set_dst_addr(&"2001:db8::2".parse().unwrap());
        assert_eq!(b2, buf);
        let eth = etherparse::Ipv6HeaderSlice::from_slice(&buf).unwrap();
        assert_eq!(eth.payload_length(), 8);
    }

    #[test]
    fn rejects() {
        let buf = header(ip_proto::TCP, &[0; 20]);
        for n in 0..buf.len() {
            assert_eq!(
                Ipv6Packet::new_checked(&buf[..n]).unwrap_err(),
                DropReason::Truncated,
                "{n}"
            );
        }
        let mut b = buf.clone();
        b[0] = 0x40;
        assert_eq!(
            Ipv6Packet::new_checked(&b[..]).unwrap_err(),
            DropReason::MalformedIpv6
        );
    }

    #[test]
    fn walks_a_chain() {
        // hop-by-hop (8) -> dest opts (16) -> routing (8) -> fragment (first) -> TCP
        let mut p = vec![ip_proto::IPV6_OPTS, 0, 1, 4, 0, 0, 0, 0];
        p.extend_from_slice(&[ip_proto::IPV6_ROUTE, 1]);
        p.extend_from_slice(&[0; 14]);
        p.extend_from_slice(&[ip_proto::IPV6_FRAG, 0, 0, 0, 0, 0, 0, 0]);
        p.extend_from_slice(&[ip_proto::TCP, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef]);
        p.extend_from_slice(&[0; 20]);
        let up = walk_extensions(ip_proto::HOPOPT, &p).unwrap();
        assert_eq!(up.protocol, ip_proto::TCP);
        assert_eq!(up.offset, 40);
        assert_eq!(
            up.fragment,
            Some(Ipv6Fragment {
                offset: 0,
                more: true,
                ident: 0xdeadbeef
            })
        );
        // Every truncation of the chain itself is an extension-header drop.
        for n in 0..40 {
            assert_eq!(
                walk_extensions(ip_proto::HOPOPT, &p[..n]),
                Err(DropReason::Ipv6ExtensionHeader),
                "{n}"
            );
        }
    }

    #[test]
    fn non_first_fragment_stops_the_walk() {
        let p = [ip_proto::UDP, 0, 0x05, 0xc8, 0, 0, 0, 7, 1, 2, 3];
        let up = walk_extensions(ip_proto::IPV6_FRAG, &p).unwrap();
        assert_eq!(
            up,
            Ipv6Upper {
                protocol: ip_proto::UDP,
                offset: 8,
                fragment: Some(Ipv6Fragment {
                    offset: 1480,
                    more: false,
                    ident: 7
                })
            }
        );
    }

    #[test]
    fn rejects_bad_chains() {
        let opts = |next: u8| [next, 0, 1, 4, 0, 0, 0, 0];
        for bad in [ip_proto::ESP, ip_proto::AH, ip_proto::IPV6_NONXT, 135] {
            assert_eq!(
                walk_extensions(bad, &[0; 64]),
                Err(DropReason::Ipv6ExtensionHeader)
            );
        }
        // hop-by-hop not first
        assert_eq!(
            walk_extensions(ip_proto::IPV6_OPTS, &opts(ip_proto::HOPOPT).repeat(2)),
            Err(DropReason::Ipv6ExtensionHeader)
        );
        // too long: 9 destination-options headers
        let chain: Vec<u8> = (0..9)
            .flat_map(|_| opts(ip_proto::IPV6_OPTS))
            .chain([0u8; 8])
            .collect();
        assert_eq!(
            walk_extensions(ip_proto::IPV6_OPTS, &chain),
            Err(DropReason::Ipv6ExtensionHeader)
        );
        // exactly the limit is fine
        let mut chain: Vec<u8> = (0..7).flat_map(|_| opts(ip_proto::IPV6_OPTS)).collect();
        chain.extend_from_slice(&opts(ip_proto::UDP));
        assert_eq!(walk_extensions(ip_proto::IPV6_OPTS, &chain).unwrap().offset, 64);
        // two fragment headers
        let two = [
            ip_proto::IPV6_FRAG,
            0,
            0,
            1,
            0,
            0,
            0,
            1,
            ip_proto::UDP,
            0,
            0,
            1,
            0,
            0,
            0,
            1,
        ];
        assert_eq!(
            walk_extensions(ip_proto::IPV6_FRAG, &two),
            Err(DropReason::Ipv6ExtensionHeader)
        );
    }
}
