//! [`Cidr`]: an address with a prefix length, one family each.
//!
//! Invariant: the prefix length fits the family (≤ 32 for IPv4, ≤ 128 for
//! IPv6); [`Cidr::new`] and `FromStr` are the only constructors, so every
//! `Cidr` in a snapshot is valid and [`Cidr::contains`] never panics. The
//! address keeps its host bits: an interface CIDR such as `10.0.0.5/24` is
//! both the port's own address and its connected subnet.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IPv4 or IPv6 prefix, e.g. `10.0.0.0/8` or `2001:db8::1/64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// Why a [`Cidr`] could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// The prefix length is longer than the family's address.
    #[error("prefix length {prefix} is too long for {addr} (max {max})")]
    PrefixTooLong {
        /// The address given.
        addr: IpAddr,
        /// The prefix length given.
        prefix: u8,
        /// 32 or 128.
        max: u8,
    },
    /// The text is not `address/prefix`.
    #[error("{text:?} is not an address/prefix CIDR")]
    Syntax {
        /// The text given.
        text: String,
    },
}

impl Cidr {
    /// `addr/prefix`; fails if `prefix` exceeds 32 (IPv4) or 128 (IPv6).
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Cidr, CidrError> {
        let max = max_prefix(addr);
        if prefix > max {
            return Err(CidrError::PrefixTooLong { addr, prefix, max });
        }
        Ok(Cidr { addr, prefix })
    }

    /// The address as given, host bits included.
    #[inline]
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    #[inline]
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether this is an IPv4 prefix.
    #[inline]
    pub fn is_v4(&self) -> bool {
        self.addr.is_ipv4()
    }

    /// The network address: `addr` with the host bits cleared.
    pub fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask_v4(self.prefix))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask_v6(self.prefix))),
        }
    }

    /// Whether `ip` lies in the prefix. Always false across families (an
    /// IPv4-mapped IPv6 address is not in an IPv4 prefix: the pipeline sees
    /// the two families as different packets).
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let m = mask_v4(self.prefix);
                u32::from(n) & m == u32::from(a) & m
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let m = mask_v6(self.prefix);
                u128::from(n) & m == u128::from(a) & m
            }
            _ => false,
        }
    }
}

/// 32 for IPv4, 128 for IPv6.
fn max_prefix(addr: IpAddr) -> u8 {
    if addr.is_ipv4() {
        32
    } else {
        128
    }
}

/// The IPv4 netmask for `prefix` (≤ 32) as a host-order integer.
#[inline]
pub(crate) fn mask_v4(prefix: u8) -> u32 {
    // checked_shl avoids the overflowing shift of a /0.
    u32::MAX.checked_shl(32 - u32::from(prefix.min(32))).unwrap_or(0)
}

/// The IPv6 netmask for `prefix` (≤ 128) as a host-order integer.
#[inline]
pub(crate) fn mask_v6(prefix: u8) -> u128 {
    u128::MAX
        .checked_shl(128 - u32::from(prefix.min(128)))
        .unwrap_or(0)
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    /// Parses `address/prefix`; a bare address is a host prefix (/32 or
    /// /128), as Kubernetes and `ip route` accept.
    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let syntax = || CidrError::Syntax { text: s.to_owned() };
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => {
                let addr: IpAddr = a.parse().map_err(|_| syntax())?;
                // Reject "+8" and friends that u8::from_str would take.
                if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(syntax());
                }
                (addr, p.parse::<u8>().map_err(|_| syntax())?)
            }
            None => {
                let addr: IpAddr = s.parse().map_err(|_| syntax())?;
                (addr, max_prefix(addr))
            }
        };
        Cidr::new(addr, prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn parse_and_display() {
        assert_eq!(c("10.0.0.5/24").to_string(), "10.0.0.5/24");
        assert_eq!(c("10.0.0.5").prefix(), 32);
        assert_eq!(c("2001:db8::1").prefix(), 128);
        assert_eq!(c("10.0.0.5/24").network(), "10.0.0.0".parse::<IpAddr>().unwrap());
        assert_eq!(
            c("2001:db8::1/64").network(),
            "2001:db8::".parse::<IpAddr>().unwrap()
        );
        for bad in [
            "",
            "/8",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0.0/33",
            "::/129",
            "x/8",
            "10.0.0.0/8/8",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn contains_v4_v6_and_edges() {
        assert!(c("10.0.0.0/8").contains("10.255.1.2".parse().unwrap()));
        assert!(!c("10.0.0.0/8").contains("11.0.0.1".parse().unwrap()));
        assert!(c("0.0.0.0/0").contains("1.2.3.4".parse().unwrap()));
        assert!(!c("0.0.0.0/0").contains("::1".parse().unwrap()));
        assert!(c("1.2.3.4/32").contains("1.2.3.4".parse().unwrap()));
        assert!(!c("1.2.3.4/32").contains("1.2.3.5".parse().unwrap()));
        assert!(c("2001:db8::/32").contains("2001:db8:ffff::1".parse().unwrap()));
        assert!(!c("2001:db8::/32").contains("2001:db9::1".parse().unwrap()));
        assert!(c("::/0").contains("::1".parse().unwrap()));
        assert!(!c("::/0").contains("1.2.3.4".parse().unwrap()));
        assert!(c("::1/128").contains("::1".parse().unwrap()));
    }

    #[test]
    fn masks() {
        assert_eq!(mask_v4(0), 0);
        assert_eq!(mask_v4(24), 0xffff_ff00);
        assert_eq!(mask_v4(32), u32::MAX);
        assert_eq!(mask_v6(0), 0);
        assert_eq!(mask_v6(128), u128::MAX);
        assert_eq!(mask_v6(64), u128::MAX << 64);
    }
}
