//! ICMP for IPv4 (RFC 792): echo and the error messages lbd must translate.
//!
//! `new_checked` guarantees the 8-byte header (`MalformedIcmp`); the buffer
//! must be exactly the ICMP message (the IP payload), since the checksum
//! covers all of it. For error messages, [`Icmpv4Packet::quoted`] is the
//! offending packet as quoted by the sender and [`parse_quoted_v4`] reads
//! its IP header and first 8 bytes of L4 without trusting its lengths.

use std::net::IpAddr;

use super::ipv4::Ipv4Packet;
use super::{be16, ip_proto};
use crate::checksum;
use crate::DropReason;

/// Header length (type, code, checksum, 4 bytes of rest-of-header).
pub const HEADER_LEN: usize = 8;

/// ICMPv4 message types lbd names.
pub mod msg_type {
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination unreachable (code 4: fragmentation needed, carries MTU).
    pub const DEST_UNREACHABLE: u8 = 3;
    /// Source quench (deprecated, still an error).
    pub const SOURCE_QUENCH: u8 = 4;
    /// Redirect.
    pub const REDIRECT: u8 = 5;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter problem.
    pub const PARAMETER_PROBLEM: u8 = 12;
}

/// Byte offsets of the ICMPv4 header fields.
pub mod field {
    use std::ops::Range;
    /// Type.
    pub const TYPE: usize = 0;
    /// Code.
    pub const CODE: usize = 1;
    /// Checksum over the whole message.
    pub const CHECKSUM: Range<usize> = 2..4;
    /// Echo identifier.
    pub const ECHO_IDENT: Range<usize> = 4..6;
    /// Echo sequence number.
    pub const ECHO_SEQ: Range<usize> = 6..8;
    /// Next-hop MTU of "fragmentation needed" (RFC 1191).
    pub const NEXT_HOP_MTU: Range<usize> = 6..8;
    /// Quoted packet of an error message.
    pub const QUOTED: usize = 8;
}

/// A view of an ICMPv4 message.
#[derive(Debug, Clone)]
pub struct Icmpv4Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Wrap without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv4Packet { buffer }
    }

    /// Wrap after checking the 8-byte header is present.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, DropReason> {
        let p = Self::new_unchecked(buffer);
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(DropReason::MalformedIcmp);
        }
        Ok(p)
    }

    /// The wrapped buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// Code.
    #[inline]
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::CHECKSUM])
    }

    /// Echo identifier (meaningful for echo request/reply).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::ECHO_IDENT])
    }

    /// Echo sequence number.
    #[inline]
    pub fn echo_seq(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::ECHO_SEQ])
    }

    /// Next-hop MTU (meaningful for type 3 code 4).
    #[inline]
    pub fn next_hop_mtu(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::NEXT_HOP_MTU])
    }

    /// Whether this is an error message that quotes a packet (the set Linux's
    /// `icmp_is_err` uses).
    #[inline]
    pub fn is_error(&self) -> bool {
        is_error_type(self.msg_type())
    }

    /// The bytes after the 8-byte header: echo data, or an error's quote.
    #[inline]
    pub fn quoted(&self) -> &[u8] {
        &self.buffer.as_ref()[field::QUOTED..]
    }

    /// Whether the checksum over the whole message is correct.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::sum(self.buffer.as_ref())) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    /// Set the type (checksum untouched).
    #[inline]
    pub fn set_msg_type(&mut self, t: u8) {
        self.buffer.as_mut()[field::TYPE] = t;
    }

    /// Set the code (checksum untouched).
    #[inline]
    pub fn set_code(&mut self, c: u8) {
        self.buffer.as_mut()[field::CODE] = c;
    }

    /// Set the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    /// Set the echo identifier (checksum untouched).
    #[inline]
    pub fn set_echo_ident(&mut self, v: u16) {
        self.buffer.as_mut()[field::ECHO_IDENT].copy_from_slice(&v.to_be_bytes());
    }

    /// Set the echo sequence number (checksum untouched).
    #[inline]
    pub fn set_echo_seq(&mut self, v: u16) {
        self.buffer.as_mut()[field::ECHO_SEQ].copy_from_slice(&v.to_be_bytes());
    }

    /// Set type and code and update the checksum incrementally.
    ///
    /// RFC 1624's update never yields `0xFFFF`, which is what an all-zero
    /// message must carry (an echo reply with identifier, sequence and
    /// data all zero); ICMPv4 has no pseudo-header to make a word non-zero.
    /// So a result of zero, which only a message summing to `0xFFFF` gets
    /// (about one in 65,536), is recomputed over the whole message.
    #[inline]
    pub fn set_type_code_update_checksum(&mut self, t: u8, c: u8) {
        let old = u16::from_be_bytes([self.msg_type(), self.code()]);
        let sum = checksum::update16(self.checksum(), old, u16::from_be_bytes([t, c]));
        self.set_msg_type(t);
        self.set_code(c);
        if sum == 0 {
            self.fill_checksum();
        } else {
            self.set_checksum(sum);
        }
    }

    /// Recompute the checksum over the whole message.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }

    /// Mutable bytes after the header.
    #[inline]
    pub fn quoted_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::QUOTED..]
    }
}

/// Whether an ICMPv4 type is an error message quoting a packet.
#[inline]
pub const fn is_error_type(t: u8) -> bool {
    matches!(
        t,
        msg_type::DEST_UNREACHABLE
            | msg_type::SOURCE_QUENCH
            | msg_type::REDIRECT
            | msg_type::TIME_EXCEEDED
            | msg_type::PARAMETER_PROBLEM
    )
}

/// The flow of a packet quoted in an ICMP or ICMPv6 error, as sent by us or
/// toward us: its addresses are the *original* packet's, so a reply-direction
/// lookup swaps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quoted {
    /// Source address of the quoted packet.
    pub src: IpAddr,
    /// Destination address of the quoted packet.
    pub dst: IpAddr,
    /// Upper-layer protocol of the quoted packet.
    pub protocol: u8,
    /// Offset of the quoted L4 header from the start of the quote.
    pub l4_offset: usize,
    /// TCP/UDP source port; the echo identifier for quoted ICMP echo; else 0.
    pub src_port: u16,
    /// TCP/UDP destination port; the echo identifier for quoted ICMP echo; else 0.
    pub dst_port: u16,
}

/// Read the quote of an ICMPv4 error: an IPv4 header (whose total length may
/// exceed the quote, since senders cut it short) and at least 8 bytes of L4.
/// Anything else is `MalformedIcmp`; a quoted non-first fragment is
/// `Fragment`, since it has no ports to match.
#[inline]
pub fn parse_quoted_v4(quote: &[u8]) -> Result<Quoted, DropReason> {
    let ip = Ipv4Packet::new_unchecked(quote);
    ip.check_header().map_err(|_| DropReason::MalformedIcmp)?;
    if ip.frag_offset() != 0 {
        return Err(DropReason::Fragment);
    }
    let l4_offset = ip.header_len();
    let l4 = quote
        .get(l4_offset..l4_offset + 8)
        .ok_or(DropReason::MalformedIcmp)?;
    let (src_port, dst_port) = quoted_ports(ip.protocol(), l4, msg_type::ECHO_REQUEST, msg_type::ECHO_REPLY);
    Ok(Quoted {
        src: IpAddr::V4(ip.src_addr()),
        dst: IpAddr::V4(ip.dst_addr()),
        protocol: ip.protocol(),
        l4_offset,
        src_port,
        dst_port,
    })
}

/// Ports of a quoted L4 header (8 bytes): TCP/UDP ports, or an echo id.
#[inline]
pub(crate) fn quoted_ports(protocol: u8, l4: &[u8], echo_req: u8, echo_rep: u8) -> (u16, u16) {
    match protocol {
        ip_proto::TCP | ip_proto::UDP => (be16(&l4[0..2]), be16(&l4[2..4])),
        ip_proto::ICMP | ip_proto::ICMPV6 if l4[0] == echo_req || l4[0] == echo_rep => {
            let id = be16(&l4[4..6]);
            (id, id)
        }
        _ => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    // Echo request id 0x1234 seq 1 with "abcd"; checksum filled in the test.
    const ECHO: [u8; 12] = [8, 0, 0, 0, 0x12, 0x34, 0, 1, b'a', b'b', b'c', b'd'];

    #[test]
    fn echo_deconstruct_and_checksum() {
        let mut b = ECHO;
        let mut p = Icmpv4Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!(
            (p.msg_type(), p.code(), p.echo_ident(), p.echo_seq()),
            (8, 0, 0x1234, 1)
        );
        assert!(!p.is_error());
        p.set_type_code_update_checksum(msg_type::ECHO_REPLY, 0);
        assert!(p.verify_checksum());
        let h = etherparse::Icmpv4Slice::from_slice(&b).unwrap();
        assert_eq!(h.checksum(), h.header().icmp_type.calc_checksum(h.payload()));
    }

    /// The reply to an all-zero echo request (identifier, sequence and
    /// data zero: checksum 0xF7FF) is all zero but its checksum, which must
    /// be 0xFFFF; the incremental update alone gave 0x0000. A message that
    /// truly sums to 0xFFFF keeps 0x0000.
    #[test]
    fn echo_reply_of_an_all_zero_request() {
        for data in [&[][..], &[0u8; 56][..]] {
            let mut b = [&[8u8, 0, 0, 0, 0, 0, 0, 0][..], data].concat();
            let mut p = Icmpv4Packet::new_checked(&mut b[..]).unwrap();
            p.fill_checksum();
            assert_eq!(p.checksum(), 0xF7FF);
            p.set_type_code_update_checksum(msg_type::ECHO_REPLY, 0);
            assert_eq!(p.checksum(), 0xFFFF);
            assert!(p.verify_checksum());
        }
        let mut b = [8u8, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF];
        let mut p = Icmpv4Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum();
        p.set_type_code_update_checksum(msg_type::ECHO_REPLY, 0);
        assert_eq!(p.checksum(), 0x0000);
        assert!(p.verify_checksum());
        let h = etherparse::Icmpv4Slice::from_slice(&b).unwrap();
        assert_eq!(h.checksum(), h.header().icmp_type.calc_checksum(h.payload()));
    }

    #[test]
    fn quoted_error() {
        // Frag-needed quoting 10.0.0.1:40000 -> 192.0.2.7:443 TCP, cut at 8 L4 bytes.
        let inner =
            etherparse::PacketBuilder::ipv4([10, 0, 0, 1], [192, 0, 2, 7], 64).tcp(40000, 443, 7, 1000);
        let mut v = Vec::new();
        inner.write(&mut v, &[0u8; 100]).unwrap();
        let mut msg = vec![3, 4, 0, 0, 0, 0, 0x05, 0xdc];
        msg.extend_from_slice(&v[..28]);
        let p = Icmpv4Packet::new_checked(&msg[..]).unwrap();
        assert!(p.is_error());
        assert_eq!(p.next_hop_mtu(), 1500);
        let q = parse_quoted_v4(p.quoted()).unwrap();
        assert_eq!(q.src, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(
            (q.protocol, q.l4_offset, q.src_port, q.dst_port),
            (6, 20, 40000, 443)
        );
        for n in 0..28 {
            assert_eq!(
                parse_quoted_v4(&p.quoted()[..n]),
                Err(DropReason::MalformedIcmp),
                "{n}"
            );
        }
    }

    #[test]
    fn rejects_short() {
        for n in 0..8 {
            assert_eq!(
                Icmpv4Packet::new_checked(&ECHO[..n]).unwrap_err(),
                DropReason::MalformedIcmp
            );
        }
    }
}
