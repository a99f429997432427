//! The raw form of a flow key the table compares, and the two address
//! families ([`Addr`]) the table is generic over.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::flow::{fold_mul, FlowKey, FlowKeyV4, FlowKeyV6, Proto};

/// An address as raw octets: `[u8; 4]` or `[u8; 16]`.
pub(crate) trait Addr: Copy + Eq + Default + core::fmt::Debug + AsRef<[u8]> {
    /// Hashes a key of this family with the table's seeds.
    fn hash_key(k: &RawKey<Self>, seeds: &[u64; 4]) -> u32;
    /// As a std address.
    fn to_ip(self) -> IpAddr;
    /// From a std address, `None` for the other family.
    fn from_ip(ip: IpAddr) -> Option<Self>;
    /// As a public flow key.
    fn flow_key(k: &RawKey<Self>, proto: Proto) -> FlowKey;
    /// The address folded to 32 bits, for a small map's hash.
    fn fold(self) -> u32;
}

#[inline]
fn ports_word(k: &RawKey<impl Addr>) -> u64 {
    ((k.sport as u64) << 32) | ((k.dport as u64) << 16) | k.proto as u64
}

impl Addr for [u8; 4] {
    #[inline]
    fn hash_key(k: &RawKey<Self>, s: &[u64; 4]) -> u32 {
        let a = ((u32::from_ne_bytes(k.src) as u64) << 32) | u32::from_ne_bytes(k.dst) as u64;
        let h = fold_mul(a ^ s[0], ports_word(k) ^ s[1]);
        (fold_mul(h ^ s[2], s[3]) >> 32) as u32
    }
    #[inline]
    fn to_ip(self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(self))
    }
    #[inline]
    fn from_ip(ip: IpAddr) -> Option<Self> {
        match ip {
            IpAddr::V4(a) => Some(a.octets()),
            IpAddr::V6(_) => None,
        }
    }
    #[inline]
    fn flow_key(k: &RawKey<Self>, proto: Proto) -> FlowKey {
        FlowKey::V4(FlowKeyV4 {
            src: k.src.into(),
            dst: k.dst.into(),
            sport: k.sport,
            dport: k.dport,
            proto,
        })
    }
    #[inline(always)]
    fn fold(self) -> u32 {
        u32::from_ne_bytes(self)
    }
}

impl Addr for [u8; 16] {
    #[inline]
    fn hash_key(k: &RawKey<Self>, s: &[u64; 4]) -> u32 {
        let (src, dst) = (u128::from_ne_bytes(k.src), u128::from_ne_bytes(k.dst));
        let x = fold_mul(src as u64 ^ s[0], (src >> 64) as u64 ^ s[1]);
        let y = fold_mul(dst as u64 ^ s[2], (dst >> 64) as u64 ^ s[3]);
        let h = fold_mul(x ^ ports_word(k) ^ s[1], y ^ s[0]);
        (fold_mul(h ^ s[2], s[3]) >> 32) as u32
    }
    #[inline]
    fn to_ip(self) -> IpAddr {
        IpAddr::V6(Ipv6Addr::from(self))
    }
    #[inline]
    fn from_ip(ip: IpAddr) -> Option<Self> {
        match ip {
            IpAddr::V6(a) => Some(a.octets()),
            IpAddr::V4(_) => None,
        }
    }
    #[inline]
    fn flow_key(k: &RawKey<Self>, proto: Proto) -> FlowKey {
        FlowKey::V6(FlowKeyV6 {
            src: k.src.into(),
            dst: k.dst.into(),
            sport: k.sport,
            dport: k.dport,
            proto,
        })
    }
    #[inline(always)]
    fn fold(self) -> u32 {
        let w = u128::from_ne_bytes(self);
        let x = (w as u64) ^ (w >> 64) as u64;
        (x as u32) ^ (x >> 32) as u32
    }
}

/// A flow key in raw form, the way the table compares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawKey<A> {
    pub src: A,
    pub dst: A,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
}
