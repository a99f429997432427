//! The frames lb-bench sends and the checks on the frames it receives.
//!
//! Every generated packet carries, where the balancer does not touch it,
//! a 32-bit TSC timestamp and the flow's index: in the TCP sequence and
//! acknowledgment numbers (TCP), or the first 8 payload bytes (UDP). The
//! emulated backend swaps them into its reply (seq ↔ ack for TCP, the
//! payload as is for UDP), so the client side gets both back.

use std::net::Ipv4Addr;

use lb_dataplane::checksum::{checksum, l4_checksum_v4};
use lb_dataplane::wire::{self, ip_proto, TcpFlags};

/// Ethernet + IPv4 header bytes.
pub const L3_END: usize = 14 + 20;

/// The L4 protocol of the benchmark traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Proto {
    /// TCP segments (ACK, or SYN for new flows).
    Tcp,
    /// UDP datagrams.
    Udp,
}

/// One packet to write.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// Source and destination MACs.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source address and port.
    pub src: (Ipv4Addr, u16),
    /// Destination address and port.
    pub dst: (Ipv4Addr, u16),
    /// Protocol.
    pub proto: Proto,
    /// TCP flags (ignored for UDP).
    pub flags: u8,
    /// The two 32-bit words carried: (timestamp, flow) as sent by a client.
    pub words: (u32, u32),
    /// Frame length without FCS (at least 60).
    pub len: usize,
}

/// Writes `s` into `buf` (which must hold `s.len` bytes) with valid
/// checksums; returns the length.
pub fn write(buf: &mut [u8], s: &Spec) -> usize {
    // TCP carries the words in its header; UDP in 8 bytes of payload.
    let l4_min = match s.proto {
        Proto::Tcp => 20,
        Proto::Udp => 8 + 8,
    };
    let len = s.len.max(L3_END + l4_min);
    let f = &mut buf[..len];
    f[0..6].copy_from_slice(&s.dst_mac);
    f[6..12].copy_from_slice(&s.src_mac);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (len - 14) as u16;
    let (head, l4) = f.split_at_mut(L3_END);
    let ip = &mut head[14..];
    ip[0] = 0x45;
    ip[1] = 0;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[4..8].copy_from_slice(&[0, 0, 0x40, 0]);
    ip[8] = 64;
    ip[9] = match s.proto {
        Proto::Tcp => ip_proto::TCP,
        Proto::Udp => ip_proto::UDP,
    };
    ip[10..12].copy_from_slice(&[0, 0]);
    ip[12..16].copy_from_slice(&s.src.0.octets());
    ip[16..20].copy_from_slice(&s.dst.0.octets());
    let c = checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    l4[0..2].copy_from_slice(&s.src.1.to_be_bytes());
    l4[2..4].copy_from_slice(&s.dst.1.to_be_bytes());
    match s.proto {
        Proto::Tcp => {
            l4[4..8].copy_from_slice(&s.words.0.to_be_bytes());
            l4[8..12].copy_from_slice(&s.words.1.to_be_bytes());
            l4[12] = 5 << 4;
            l4[13] = s.flags;
            l4[14..16].copy_from_slice(&64000u16.to_be_bytes());
            l4[16..20].fill(0);
            l4[20..].fill(0);
        }
        Proto::Udp => {
            let ulen = l4.len() as u16;
            l4[4..6].copy_from_slice(&ulen.to_be_bytes());
            l4[6..8].fill(0);
            l4[8..12].copy_from_slice(&s.words.0.to_be_bytes());
            l4[12..16].copy_from_slice(&s.words.1.to_be_bytes());
            l4[16..].fill(0);
        }
    }
    let c = l4_checksum_v4(s.src.0, s.dst.0, ip[9], l4);
    let at = if s.proto == Proto::Tcp { 16 } else { 6 };
    // UDP: a computed 0 is sent as 0xffff.
    let c = if s.proto == Proto::Udp && c == 0 {
        0xffff
    } else {
        c
    };
    l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
    len
}

/// What a received frame is, after full checksum verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Source address and port.
    pub src: (Ipv4Addr, u16),
    /// Destination address and port.
    pub dst: (Ipv4Addr, u16),
    /// TCP or UDP.
    pub proto: Proto,
    /// TCP flags (0 for UDP).
    pub flags: u8,
    /// The carried words, in wire order (seq, ack) / payload order.
    pub words: (u32, u32),
}

/// Why a received frame is not a valid benchmark packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// Not IPv4 TCP/UDP, or too short for the carried words: ignored.
    Other,
    /// A checksum (IPv4 header or L4) is wrong: a violation.
    Checksum,
}

/// Parses `frame` and verifies every checksum by full recomputation.
pub fn read(frame: &[u8]) -> Result<Seen, Bad> {
    let p = match wire::parse(frame) {
        Ok(p) => p,
        Err(lb_dataplane::DropReason::BadChecksum | lb_dataplane::DropReason::MalformedIpv4) => {
            return Err(Bad::Checksum)
        }
        Err(_) => return Err(Bad::Other),
    };
    let (std::net::IpAddr::V4(src), std::net::IpAddr::V4(dst)) = (p.src, p.dst) else {
        return Err(Bad::Other);
    };
    let proto = match p.protocol {
        ip_proto::TCP => Proto::Tcp,
        ip_proto::UDP => Proto::Udp,
        _ => return Err(Bad::Other),
    };
    let l4 = p.l4(frame);
    let words_at = if proto == Proto::Tcp { 4 } else { 8 };
    if l4.len() < words_at + 8 {
        return Err(Bad::Other);
    }
    let sum = l4_checksum_v4(src, dst, p.protocol, l4);
    if sum != 0 && !(proto == Proto::Udp && l4[6..8] == [0, 0]) {
        return Err(Bad::Checksum);
    }
    let w = |i: usize| u32::from_be_bytes(l4[i..i + 4].try_into().unwrap_or([0; 4]));
    Ok(Seen {
        src_mac: frame[6..12].try_into().unwrap_or([0; 6]),
        src: (src, p.src_port),
        dst: (dst, p.dst_port),
        proto,
        flags: if proto == Proto::Tcp { p.tcp_flags.0 } else { 0 },
        words: (w(words_at), w(words_at + 4)),
    })
}

/// The flags of a client's established-flow segment.
pub const ACK: u8 = TcpFlags::ACK.0;
/// The flags of a new flow's first segment.
pub const SYN: u8 = TcpFlags::SYN.0;

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{SlicedPacket, TransportSlice};

    fn spec(proto: Proto, len: usize) -> Spec {
        Spec {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: ("10.128.0.7".parse().unwrap(), 10001),
            dst: ("10.0.0.100".parse().unwrap(), 80),
            proto,
            flags: ACK,
            words: (0xdead_beef, 42),
            len,
        }
    }

    #[test]
    fn written_frames_are_valid_and_read_back() {
        for (proto, len) in [(Proto::Tcp, 60), (Proto::Tcp, 508), (Proto::Udp, 60)] {
            let mut buf = [0u8; 600];
            let n = write(&mut buf, &spec(proto, len));
            assert_eq!(n, len);
            {
                // etherparse, an independent parser, agrees on every field
                // and checksum.
                let s = SlicedPacket::from_ethernet(&buf[..n]).unwrap();
                let (src, dst) = ([10, 128, 0, 7], [10, 0, 0, 100]);
                match s.transport {
                    Some(TransportSlice::Tcp(t)) => {
                        assert_eq!(
                            (t.sequence_number(), t.acknowledgment_number()),
                            (0xdead_beef, 42)
                        );
                        assert_eq!(t.checksum(), t.calc_checksum_ipv4(src, dst).unwrap());
                    }
                    Some(TransportSlice::Udp(u)) => {
                        assert_eq!(u.payload()[..8], [0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 42]);
                        let h = u.to_header();
                        assert_eq!(
                            h.checksum,
                            h.calc_checksum_ipv4_raw(src, dst, u.payload()).unwrap()
                        );
                    }
                    _ => panic!("no transport"),
                }
                match s.net {
                    Some(etherparse::NetSlice::Ipv4(ip)) => {
                        let h = ip.header().to_header();
                        assert_eq!(h.header_checksum, h.calc_header_checksum());
                    }
                    _ => panic!("not IPv4"),
                }
            }
            let seen = read(&buf[..n]).unwrap();
            assert_eq!(seen.words, (0xdead_beef, 42));
            assert_eq!(seen.dst.1, 80);
            // One flipped bit in the L4 part is a checksum violation.
            buf[n - 1] ^= 1;
            assert_eq!(read(&buf[..n]), Err(Bad::Checksum));
        }
    }
}
