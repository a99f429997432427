//! Flow keys, flow ownership across workers, and per-worker SNAT ports.
//!
//! This module owns three things:
//! - [`FlowKey`]: the 5-tuple of one direction of a flow, with separate IPv4
//!   and IPv6 forms so the IPv4 conntrack table stays compact. ICMP echo flows
//!   carry the echo identifier in both port fields, so `reversed()` of an
//!   echo request's key is the key of its reply.
//! - Ownership: every flow belongs to exactly one worker.
//!   [`owner_of_client`] hashes the client endpoint (both directions of a
//!   DNAT flow carry it), [`owner_of_snat_port`] reads the owner out of a
//!   full-NAT SNAT port (`port & mask == worker`, DPVS's `sa_pool` idea), so
//!   a reply that lands on the wrong queue can be handed to its owner without
//!   any lookup.
//! - [`SnatPorts`]: one worker's share of SNAT ports, in `snat_ports.rs`
//!   with its invariants.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod snat_ports;

pub(crate) use snat_ports::v4_home;
pub use snat_ports::{AllocGuess, SnatFreeError, SnatNewError, SnatPorts};

/// A worker (lcore) index, dense from 0 to `n_workers - 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WorkerId(pub u16);

/// The L4 protocols the balancer tracks; discriminants are IP protocol numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Proto {
    /// ICMP (IPv4); only echo flows are tracked.
    Icmp = 1,
    /// TCP.
    Tcp = 6,
    /// UDP.
    Udp = 17,
    /// ICMPv6; only echo flows are tracked.
    Icmpv6 = 58,
}

impl Proto {
    /// The protocol for an IP protocol number, `None` if not tracked.
    #[inline]
    pub const fn from_u8(n: u8) -> Option<Proto> {
        match n {
            1 => Some(Proto::Icmp),
            6 => Some(Proto::Tcp),
            17 => Some(Proto::Udp),
            58 => Some(Proto::Icmpv6),
            _ => None,
        }
    }

    /// True for ICMP and ICMPv6, whose "ports" are the echo identifier.
    #[inline]
    pub const fn is_icmp(self) -> bool {
        matches!(self, Proto::Icmp | Proto::Icmpv6)
    }
}

/// One direction of an IPv4 flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKeyV4 {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Source port, or the echo identifier for ICMP.
    pub sport: u16,
    /// Destination port, or the echo identifier for ICMP.
    pub dport: u16,
    /// L4 protocol.
    pub proto: Proto,
}

impl FlowKeyV4 {
    /// The key of an ICMP echo request or reply: the identifier is both ports.
    #[inline]
    pub const fn icmp_echo(src: Ipv4Addr, dst: Ipv4Addr, ident: u16) -> Self {
        FlowKeyV4 {
            src,
            dst,
            sport: ident,
            dport: ident,
            proto: Proto::Icmp,
        }
    }

    /// The same flow seen from the other direction.
    #[inline]
    pub const fn reversed(&self) -> Self {
        FlowKeyV4 {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            proto: self.proto,
        }
    }
}

/// One direction of an IPv6 flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKeyV6 {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Source port, or the echo identifier for ICMPv6.
    pub sport: u16,
    /// Destination port, or the echo identifier for ICMPv6.
    pub dport: u16,
    /// L4 protocol.
    pub proto: Proto,
}

impl FlowKeyV6 {
    /// The key of an ICMPv6 echo request or reply: the identifier is both ports.
    #[inline]
    pub const fn icmp_echo(src: Ipv6Addr, dst: Ipv6Addr, ident: u16) -> Self {
        FlowKeyV6 {
            src,
            dst,
            sport: ident,
            dport: ident,
            proto: Proto::Icmpv6,
        }
    }

    /// The same flow seen from the other direction.
    #[inline]
    pub const fn reversed(&self) -> Self {
        FlowKeyV6 {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            proto: self.proto,
        }
    }
}

/// One direction of a flow, IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowKey {
    /// An IPv4 flow.
    V4(FlowKeyV4),
    /// An IPv6 flow.
    V6(FlowKeyV6),
}

impl FlowKey {
    /// Builds a key from endpoints; `None` if the address families differ.
    pub fn new(src: (IpAddr, u16), dst: (IpAddr, u16), proto: Proto) -> Option<FlowKey> {
        match (src.0, dst.0) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Some(FlowKey::V4(FlowKeyV4 {
                src: s,
                dst: d,
                sport: src.1,
                dport: dst.1,
                proto,
            })),
            (IpAddr::V6(s), IpAddr::V6(d)) => Some(FlowKey::V6(FlowKeyV6 {
                src: s,
                dst: d,
                sport: src.1,
                dport: dst.1,
                proto,
            })),
            _ => None,
        }
    }

    /// The same flow seen from the other direction.
    #[inline]
    pub const fn reversed(&self) -> FlowKey {
        match self {
            FlowKey::V4(k) => FlowKey::V4(k.reversed()),
            FlowKey::V6(k) => FlowKey::V6(k.reversed()),
        }
    }

    /// Source endpoint.
    #[inline]
    pub fn src(&self) -> (IpAddr, u16) {
        match self {
            FlowKey::V4(k) => (IpAddr::V4(k.src), k.sport),
            FlowKey::V6(k) => (IpAddr::V6(k.src), k.sport),
        }
    }

    /// Destination endpoint.
    #[inline]
    pub fn dst(&self) -> (IpAddr, u16) {
        match self {
            FlowKey::V4(k) => (IpAddr::V4(k.dst), k.dport),
            FlowKey::V6(k) => (IpAddr::V6(k.dst), k.dport),
        }
    }

    /// L4 protocol.
    #[inline]
    pub const fn proto(&self) -> Proto {
        match self {
            FlowKey::V4(k) => k.proto,
            FlowKey::V6(k) => k.proto,
        }
    }

    /// True for an IPv4 key.
    #[inline]
    pub const fn is_v4(&self) -> bool {
        matches!(self, FlowKey::V4(_))
    }
}

/// 64×64→128 multiply folded to 64 bits: the mixing step of wyhash.
#[inline]
pub(crate) const fn fold_mul(a: u64, b: u64) -> u64 {
    let r = (a as u128).wrapping_mul(b as u128);
    (r as u64) ^ ((r >> 64) as u64)
}

/// Maps a 32-bit hash onto `0..n` without a division (Lemire's fastrange).
#[inline]
pub(crate) const fn fast_range(hash: u32, n: u32) -> u32 {
    ((hash as u64 * n as u64) >> 32) as u32
}

/// Fixed, seedless constants: ownership must agree on every worker and every
/// `lbd` version, so it must never depend on a per-process seed.
const OWNER_K0: u64 = 0x9E37_79B9_7F4A_7C15;
const OWNER_K1: u64 = 0xD6E8_FEB8_6659_FD93;

/// The worker that owns a flow by its client endpoint.
///
/// Both directions of a DNAT flow carry the client endpoint (the source of
/// the forward packet, the destination of the reply), so both land on the
/// same owner. The hash is fixed: changing it would re-home live flows on a
/// restart with mixed versions. `n_workers == 0` is treated as one worker.
#[inline]
pub fn owner_of_client(client: IpAddr, client_port: u16, n_workers: u16) -> WorkerId {
    let folded = match client {
        IpAddr::V4(a) => u32::from_be_bytes(a.octets()) as u64,
        IpAddr::V6(a) => {
            let b = u128::from_be_bytes(a.octets());
            fold_mul((b >> 64) as u64 ^ OWNER_K1, b as u64 ^ OWNER_K0)
        }
    };
    let h = fold_mul(folded ^ OWNER_K0, (client_port as u64) ^ OWNER_K1);
    WorkerId(fast_range((h >> 32) as u32, n_workers.max(1) as u32) as u16)
}

/// The ownership mask for `n_workers`: `next_power_of_two(n) - 1`.
#[inline]
pub const fn snat_port_mask(n_workers: u16) -> u16 {
    let n = if n_workers == 0 { 1 } else { n_workers };
    // n <= 65535 so the next power of two fits in u32.
    ((n as u32).next_power_of_two() - 1) as u16
}

/// The worker that owns a full-NAT flow by its SNAT port: `port & mask`.
///
/// When `n_workers` is not a power of two, ports whose low bits name no
/// worker are never allocated (DPVS wastes them the same way); a stray
/// packet to one is mapped into range (`% n_workers`) so it still has an
/// owner, which will miss in conntrack and drop it.
#[inline]
pub const fn owner_of_snat_port(port: u16, n_workers: u16) -> WorkerId {
    let n = if n_workers == 0 { 1 } else { n_workers };
    // `% n` without a division: the mask is below 2n, so one subtraction
    // is the whole reduction.
    let low = port & snat_port_mask(n);
    WorkerId(if low >= n { low - n } else { low })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    #[test]
    fn proto_numbers_round_trip() {
        for p in [Proto::Icmp, Proto::Tcp, Proto::Udp, Proto::Icmpv6] {
            assert_eq!(Proto::from_u8(p as u8), Some(p));
        }
        assert_eq!(Proto::from_u8(47), None);
        assert!(Proto::Icmpv6.is_icmp() && !Proto::Udp.is_icmp());
    }

    #[test]
    fn reversed_swaps_endpoints_and_is_an_involution() {
        let k = FlowKey::new((v4(10, 0, 0, 1), 40000), (v4(192, 0, 2, 1), 80), Proto::Tcp).unwrap();
        let r = k.reversed();
        assert_eq!(r.src(), k.dst());
        assert_eq!(r.dst(), k.src());
        assert_eq!(r.reversed(), k);
        let k6 = FlowKey::new(
            ("2001:db8::1".parse().unwrap(), 1),
            ("2001:db8::2".parse().unwrap(), 2),
            Proto::Udp,
        )
        .unwrap();
        assert_eq!(k6.reversed().reversed(), k6);
        assert!(!k6.is_v4());
        assert_eq!(
            FlowKey::new((v4(1, 1, 1, 1), 1), ("::1".parse().unwrap(), 1), Proto::Tcp),
            None
        );
    }

    #[test]
    fn icmp_echo_key_reverses_to_the_reply_key() {
        let a = Ipv4Addr::new(10, 0, 0, 1);
        let b = Ipv4Addr::new(10, 0, 0, 2);
        let req = FlowKeyV4::icmp_echo(a, b, 0x1234);
        assert_eq!(req.reversed(), FlowKeyV4::icmp_echo(b, a, 0x1234));
        let req6 = FlowKeyV6::icmp_echo(Ipv6Addr::LOCALHOST, Ipv6Addr::UNSPECIFIED, 7);
        assert_eq!((req6.sport, req6.dport, req6.proto), (7, 7, Proto::Icmpv6));
    }

    #[test]
    fn owner_of_client_is_deterministic_in_range_and_spreads() {
        let mut hist = [0u32; 6];
        for port in 0..6000u16 {
            let w = owner_of_client(v4(10, 1, 2, 3), port, 6);
            assert_eq!(w, owner_of_client(v4(10, 1, 2, 3), port, 6));
            hist[w.0 as usize] += 1;
        }
        // Each of 6 workers gets roughly 1000 of 6000 ports.
        assert!(hist.iter().all(|&n| (800..1200).contains(&n)), "{hist:?}");
        let v6: IpAddr = "2001:db8::7".parse().unwrap();
        assert!(owner_of_client(v6, 443, 3).0 < 3);
        assert_eq!(owner_of_client(v6, 443, 0), WorkerId(0));
        // Pinned: the hash must never change (see the function's docs).
        let pinned: Vec<u16> = (0..8)
            .map(|p| owner_of_client(v4(192, 0, 2, 1), p, 16).0)
            .collect();
        assert_eq!(pinned, PINNED_OWNERS);
    }

    /// Golden values for `owner_of_client(192.0.2.1, 0..8, 16)`.
    const PINNED_OWNERS: [u16; 8] = [14, 4, 10, 0, 5, 11, 1, 7];

    #[test]
    fn snat_port_owner_is_the_low_bits() {
        assert_eq!(snat_port_mask(1), 0);
        assert_eq!(snat_port_mask(4), 3);
        assert_eq!(snat_port_mask(6), 7);
        assert_eq!(owner_of_snat_port(0x1235, 4), WorkerId(1));
        assert_eq!(owner_of_snat_port(0x1235, 1), WorkerId(0));
        // 6 workers, mask 7: port ...110 names worker 6, which does not exist.
        assert!(owner_of_snat_port(6, 6).0 < 6);
        // The documented rule, `(port & mask) % n`, for every port and
        // worker count up to 64.
        for n in 1..=64u16 {
            for port in 0..=u16::MAX {
                let want = (port & snat_port_mask(n)) % n;
                assert_eq!(
                    owner_of_snat_port(port, n),
                    WorkerId(want),
                    "port {port}, {n} workers"
                );
            }
        }
    }
}
