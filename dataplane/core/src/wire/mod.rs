//! Zero-copy packet views, smoltcp-style, and the per-packet [`parse`](fn@parse).
//!
//! Each view (`EthernetFrame`, `ArpPacket`, `Ipv4Packet`, `Ipv6Packet`,
//! `TcpPacket`, `UdpPacket`, `Icmpv4Packet`, `Icmpv6Packet`) wraps a buffer
//! `T: AsRef<[u8]>`; getters need only that, setters need `AsMut<[u8]>` too,
//! so the type decides who may write. Field offsets live in each module's
//! `mod field`; accessors are `#[inline]` fixed-offset big-endian reads.
//!
//! Contract: `new_unchecked` wraps any buffer (accessors may then panic on a
//! short one); `new_checked` validates lengths and the fields those lengths
//! depend on, and after it succeeds **no accessor panics**. It returns the
//! precise [`DropReason`](crate::DropReason): a frame or IP header that runs past the end is
//! `Truncated`; an invalid IP header is `MalformedIpv4`/`MalformedIpv6`; L4
//! problems, truncation included, are the protocol's own reason
//! (`MalformedTcp`, `MalformedUdp`, `MalformedIcmp`), since the counters must
//! say which layer was bad.
//!
//! Buffers may extend past the packet (Ethernet padding, mbuf tailroom): IP
//! views bound their payload by the IP length fields, never by the buffer.

pub mod arp;
pub mod ethernet;
pub mod icmpv4;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
mod parse;
pub mod tcp;
pub mod udp;

pub use arp::ArpPacket;
pub use ethernet::{EthernetFrame, MacAddr};
pub use icmpv4::Icmpv4Packet;
pub use icmpv6::Icmpv6Packet;
pub use ipv4::Ipv4Packet;
pub use ipv6::{Ipv6Fragment, Ipv6Packet, Ipv6Upper};
pub use parse::{parse, parse_with, Fragment, Parsed, L3};
pub use tcp::{TcpFlags, TcpPacket};
pub use udp::UdpPacket;

/// IP protocol numbers (IPv4 protocol / IPv6 next header) that lbd names.
pub mod ip_proto {
    /// IPv6 hop-by-hop options.
    pub const HOPOPT: u8 = 0;
    /// ICMP for IPv4.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 routing header.
    pub const IPV6_ROUTE: u8 = 43;
    /// IPv6 fragment header.
    pub const IPV6_FRAG: u8 = 44;
    /// Encapsulating security payload.
    pub const ESP: u8 = 50;
    /// Authentication header.
    pub const AH: u8 = 51;
    /// ICMP for IPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 "no next header".
    pub const IPV6_NONXT: u8 = 59;
    /// IPv6 destination options.
    pub const IPV6_OPTS: u8 = 60;
}

/// Big-endian `u16` from the first two bytes of `b`.
#[inline(always)]
pub(crate) fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// Big-endian `u32` from the first four bytes of `b`.
#[inline(always)]
pub(crate) fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
