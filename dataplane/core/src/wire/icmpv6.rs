//! ICMPv6 (RFC 4443) and the neighbor discovery messages lbd answers (RFC 4861).
//!
//! `new_checked` guarantees the 8-byte header (`MalformedIcmp`); the buffer
//! must be exactly the ICMPv6 message, since the checksum (over an IPv6
//! pseudo-header) covers all of it. ND accessors (`nd_target`, `nd_options`)
//! need 24 bytes: check [`Icmpv6Packet::check_nd_len`] first.

use std::net::{IpAddr, Ipv6Addr};

use super::ethernet::MacAddr;
use super::icmpv4::{quoted_ports, Quoted};
use super::ipv6::Ipv6Packet;
use super::{be16, ip_proto};
use crate::checksum;
use crate::DropReason;

/// Header length (type, code, checksum, 4 bytes of message body).
pub const HEADER_LEN: usize = 8;
/// Length of a neighbor solicitation/advertisement without options.
pub const ND_LEN: usize = 24;

/// ICMPv6 message types lbd names.
pub mod msg_type {
    /// Destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 1;
    /// Packet too big (carries the MTU).
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter problem.
    pub const PARAMETER_PROBLEM: u8 = 4;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 129;
    /// Multicast listener query (RFC 2710, RFC 3810).
    pub const MLD_QUERY: u8 = 130;
    /// Multicast listener report, version 1.
    pub const MLD_REPORT: u8 = 131;
    /// Multicast listener done.
    pub const MLD_DONE: u8 = 132;
    /// Router solicitation.
    pub const ROUTER_SOLICIT: u8 = 133;
    /// Router advertisement.
    pub const ROUTER_ADVERT: u8 = 134;
    /// Neighbor solicitation.
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    /// Neighbor advertisement.
    pub const NEIGHBOR_ADVERT: u8 = 136;
    /// Redirect.
    pub const REDIRECT: u8 = 137;
    /// Multicast listener report, version 2 (RFC 3810).
    pub const MLD2_REPORT: u8 = 143;
    /// Multicast router advertisement (RFC 4286).
    pub const MRD_ADVERT: u8 = 151;
    /// Multicast router solicitation.
    pub const MRD_SOLICIT: u8 = 152;
    /// Multicast router termination.
    pub const MRD_TERMINATE: u8 = 153;
}

/// ND option types.
pub mod nd_option {
    /// Source link-layer address.
    pub const SOURCE_LL_ADDR: u8 = 1;
    /// Target link-layer address.
    pub const TARGET_LL_ADDR: u8 = 2;
}

/// Neighbor advertisement flags (byte 4).
pub mod na_flags {
    /// Router.
    pub const ROUTER: u8 = 0x80;
    /// Solicited.
    pub const SOLICITED: u8 = 0x40;
    /// Override.
    pub const OVERRIDE: u8 = 0x20;
}

/// Byte offsets of the ICMPv6 fields.
pub mod field {
    use std::ops::Range;
    /// Type.
    pub const TYPE: usize = 0;
    /// Code.
    pub const CODE: usize = 1;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 2..4;
    /// Echo identifier.
    pub const ECHO_IDENT: Range<usize> = 4..6;
    /// Echo sequence number.
    pub const ECHO_SEQ: Range<usize> = 6..8;
    /// MTU of "packet too big".
    pub const MTU: Range<usize> = 4..8;
    /// Neighbor advertisement flags.
    pub const NA_FLAGS: usize = 4;
    /// NS/NA target address.
    pub const ND_TARGET: Range<usize> = 8..24;
    /// Quoted packet of an error message.
    pub const QUOTED: usize = 8;
    /// First ND option.
    pub const ND_OPTIONS: usize = 24;
}

/// A view of an ICMPv6 message.
#[derive(Debug, Clone)]
pub struct Icmpv6Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Wrap without checking.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv6Packet { buffer }
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

    /// `MalformedIcmp` unless the message is long enough for NS/NA fields.
    #[inline]
    pub fn check_nd_len(&self) -> Result<(), DropReason> {
        if self.buffer.as_ref().len() < ND_LEN {
            return Err(DropReason::MalformedIcmp);
        }
        Ok(())
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

    /// Echo identifier.
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::ECHO_IDENT])
    }

    /// Echo sequence number.
    #[inline]
    pub fn echo_seq(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::ECHO_SEQ])
    }

    /// MTU of "packet too big".
    #[inline]
    pub fn mtu(&self) -> u32 {
        super::be32(&self.buffer.as_ref()[field::MTU])
    }

    /// Whether this is an error message (types below 128 quote a packet).
    #[inline]
    pub fn is_error(&self) -> bool {
        self.msg_type() < 128
    }

    /// The bytes after the 8-byte header: echo data, or an error's quote.
    #[inline]
    pub fn quoted(&self) -> &[u8] {
        &self.buffer.as_ref()[field::QUOTED..]
    }

    /// NA flags byte (needs [`Self::check_nd_len`]).
    #[inline]
    pub fn na_flags(&self) -> u8 {
        self.buffer.as_ref()[field::NA_FLAGS]
    }

    /// NS/NA target address (needs [`Self::check_nd_len`]).
    #[inline]
    pub fn nd_target(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::ND_TARGET]);
        Ipv6Addr::from(a)
    }

    /// NS/NA options (needs [`Self::check_nd_len`]).
    #[inline]
    pub fn nd_options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::ND_OPTIONS..]
    }

    /// Whether the checksum over the pseudo-header and message is correct.
    #[inline]
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        checksum::verify_l4(
            checksum::pseudo_header_v6(src, dst, ip_proto::ICMPV6, b.len() as u32),
            b,
        )
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
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

    /// Set type and code and update the checksum incrementally.
    #[inline]
    pub fn set_type_code_update_checksum(&mut self, t: u8, c: u8) {
        let old = u16::from_be_bytes([self.msg_type(), self.code()]);
        let sum = checksum::update16(self.checksum(), old, u16::from_be_bytes([t, c]));
        self.set_msg_type(t);
        self.set_code(c);
        self.set_checksum(sum);
    }

    /// Set the NA flags byte and clear the 3 reserved bytes after it.
    #[inline]
    pub fn set_na_flags(&mut self, flags: u8) {
        self.buffer.as_mut()[field::NA_FLAGS..field::NA_FLAGS + 4].copy_from_slice(&[flags, 0, 0, 0]);
    }

    /// Set the NS/NA target address.
    #[inline]
    pub fn set_nd_target(&mut self, a: &Ipv6Addr) {
        self.buffer.as_mut()[field::ND_TARGET].copy_from_slice(&a.octets());
    }

    /// Recompute the checksum over the pseudo-header and the whole message.
    #[inline]
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let c = checksum::l4_checksum_v6(src, dst, ip_proto::ICMPV6, self.buffer.as_ref());
        self.set_checksum(c);
    }

    /// Mutable bytes after the header.
    #[inline]
    pub fn quoted_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::QUOTED..]
    }
}

/// Find a link-layer address option of `kind` in ND `options`, validating
/// the whole option list as RFC 4861 §7.1.1 asks (no zero-length option, no
/// option past the end): `MalformedIcmp` otherwise.
pub fn nd_link_layer_option(options: &[u8], kind: u8) -> Result<Option<MacAddr>, DropReason> {
    let mut rest = options;
    let mut found = None;
    while !rest.is_empty() {
        let len = usize::from(*rest.get(1).ok_or(DropReason::MalformedIcmp)?) * 8;
        if len == 0 || len > rest.len() {
            return Err(DropReason::MalformedIcmp);
        }
        if rest[0] == kind && len == 8 && found.is_none() {
            found = Some(MacAddr([rest[2], rest[3], rest[4], rest[5], rest[6], rest[7]]));
        }
        rest = &rest[len..];
    }
    Ok(found)
}

/// Write a link-layer address option (8 bytes) into `buf`.
#[inline]
pub fn emit_link_layer_option(buf: &mut [u8], kind: u8, mac: MacAddr) {
    buf[0] = kind;
    buf[1] = 1;
    buf[2..8].copy_from_slice(&mac.0);
}

/// Read the quote of an ICMPv6 error: an IPv6 header (payload length not
/// trusted), its extension headers and at least 8 bytes of L4. Anything else
/// is `MalformedIcmp` (or `Ipv6ExtensionHeader`/`Fragment` for the chain).
pub fn parse_quoted_v6(quote: &[u8]) -> Result<Quoted, DropReason> {
    let ip = Ipv6Packet::new_unchecked(quote);
    ip.check_header().map_err(|_| DropReason::MalformedIcmp)?;
    // The quote is cut short by the sender, so walk what is there.
    let rest = &quote[super::ipv6::HEADER_LEN..];
    let up = super::ipv6::walk_extensions(ip.next_header(), rest)?;
    if up.fragment.is_some_and(|f| !f.is_first()) {
        return Err(DropReason::Fragment);
    }
    let l4_offset = super::ipv6::HEADER_LEN + up.offset;
    let l4 = quote
        .get(l4_offset..l4_offset + 8)
        .ok_or(DropReason::MalformedIcmp)?;
    let (src_port, dst_port) = quoted_ports(up.protocol, l4, msg_type::ECHO_REQUEST, msg_type::ECHO_REPLY);
    Ok(Quoted {
        src: IpAddr::V6(ip.src_addr()),
        dst: IpAddr::V6(ip.dst_addr()),
        protocol: up.protocol,
        l4_offset,
        src_port,
        dst_port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs() -> (Ipv6Addr, Ipv6Addr) {
        ("fe80::1".parse().unwrap(), "ff02::1:ff00:2".parse().unwrap())
    }

    /// NS for 2001:db8::2 with a source link-layer option.
    fn ns() -> Vec<u8> {
        let mut v = vec![135, 0, 0, 0, 0, 0, 0, 0];
        v.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        v.extend_from_slice(&[1, 1, 2, 0, 0, 0, 0, 1]);
        v
    }

    #[test]
    fn neighbor_solicit_deconstruct() {
        let (s, d) = addrs();
        let mut b = ns();
        let mut p = Icmpv6Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum(&s, &d);
        assert!(p.verify_checksum(&s, &d));
        p.check_nd_len().unwrap();
        assert_eq!(p.nd_target(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(
            nd_link_layer_option(p.nd_options(), nd_option::SOURCE_LL_ADDR),
            Ok(Some(MacAddr([2, 0, 0, 0, 0, 1])))
        );
        assert_eq!(
            nd_link_layer_option(p.nd_options(), nd_option::TARGET_LL_ADDR),
            Ok(None)
        );
        let h = etherparse::Icmpv6Slice::from_slice(&b).unwrap();
        assert_eq!(
            h.checksum(),
            h.header()
                .icmp_type
                .calc_checksum(s.octets(), d.octets(), h.payload())
                .unwrap()
        );
    }

    #[test]
    fn bad_options() {
        assert_eq!(
            nd_link_layer_option(&[1, 0, 0, 0, 0, 0, 0, 0], 1),
            Err(DropReason::MalformedIcmp)
        );
        assert_eq!(
            nd_link_layer_option(&[1, 2, 0, 0, 0, 0, 0, 0], 1),
            Err(DropReason::MalformedIcmp)
        );
        assert_eq!(nd_link_layer_option(&[1], 1), Err(DropReason::MalformedIcmp));
        assert_eq!(nd_link_layer_option(&[], 1), Ok(None));
    }

    #[test]
    fn echo_type_change_keeps_checksum() {
        let (s, d) = addrs();
        let mut b = vec![128, 0, 0, 0, 0xab, 0xcd, 0, 9, 1, 2, 3];
        let mut p = Icmpv6Packet::new_checked(&mut b[..]).unwrap();
        p.fill_checksum(&s, &d);
        p.set_type_code_update_checksum(msg_type::ECHO_REPLY, 0);
        assert!(p.verify_checksum(&s, &d));
        assert_eq!((p.echo_ident(), p.echo_seq(), p.is_error()), (0xabcd, 9, false));
    }

    #[test]
    fn quoted_error() {
        let inner = etherparse::PacketBuilder::ipv6(
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            64,
        )
        .udp(5000, 53);
        let mut v = Vec::new();
        inner.write(&mut v, &[0u8; 1400]).unwrap();
        let mut msg = vec![2, 0, 0, 0, 0, 0, 0x05, 0x00];
        msg.extend_from_slice(&v[..1232]);
        let p = Icmpv6Packet::new_checked(&msg[..]).unwrap();
        assert!(p.is_error());
        assert_eq!(p.mtu(), 1280);
        let q = parse_quoted_v6(p.quoted()).unwrap();
        assert_eq!(
            (q.protocol, q.l4_offset, q.src_port, q.dst_port),
            (17, 40, 5000, 53)
        );
        assert_eq!(parse_quoted_v6(&p.quoted()[..47]), Err(DropReason::MalformedIcmp));
        assert_eq!(parse_quoted_v6(&p.quoted()[..39]), Err(DropReason::MalformedIcmp));
    }

    #[test]
    fn rejects_short() {
        let b = ns();
        for n in 0..8 {
            assert_eq!(
                Icmpv6Packet::new_checked(&b[..n]).unwrap_err(),
                DropReason::MalformedIcmp
            );
        }
        assert!(Icmpv6Packet::new_checked(&b[..23])
            .unwrap()
            .check_nd_len()
            .is_err());
    }
}
