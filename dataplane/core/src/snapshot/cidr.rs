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
    /// The text is not `address/prefix` (nor, where allowed, an address).
    #[error("{text:?} is not an address/prefix CIDR")]
    Syntax {
        /// The text given.
        text: String,
    },
    /// The part before the `/` is not an IP address.
    #[error("{text:?} is not an IP address")]
    Address {
        /// That part.
        text: String,
    },
    /// The part after the `/` is not a number from 0 to the family's
    /// length (digits only: no sign, no spaces).
    #[error("prefix length {text:?} is not a number from 0 to {max}")]
    Prefix {
        /// That part.
        text: String,
        /// 32 or 128.
        max: u8,
    },
    /// An address where a prefix length is required
    /// ([`Cidr::parse_prefixed`]).
    #[error("\"{addr}\" has no prefix length (write e.g. {addr}/{example})")]
    NoPrefix {
        /// The address given.
        addr: IpAddr,
        /// 24 for IPv4, 64 for IPv6.
        example: u8,
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

impl Cidr {
    /// Parses `address/prefix`, the prefix required: an interface's
    /// address and subnet, a source range. The one parser for every
    /// configuration and API field that takes a CIDR.
    pub fn parse_prefixed(s: &str) -> Result<Cidr, CidrError> {
        parse(s, false)
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    /// Parses `address/prefix`; a bare address is a host prefix (/32 or
    /// /128), as Kubernetes and `ip route` accept.
    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        parse(s, true)
    }
}

fn parse(s: &str, bare_is_host: bool) -> Result<Cidr, CidrError> {
    let Some((a, p)) = s.split_once('/') else {
        let Ok(addr) = s.parse::<IpAddr>() else {
            return Err(CidrError::Syntax { text: s.to_owned() });
        };
        if bare_is_host {
            return Ok(Cidr {
                addr,
                prefix: max_prefix(addr),
            });
        }
        let example = if addr.is_ipv4() { 24 } else { 64 };
        return Err(CidrError::NoPrefix { addr, example });
    };
    let addr: IpAddr = a.parse().map_err(|_| CidrError::Address { text: a.to_owned() })?;
    let max = max_prefix(addr);
    p.parse::<u8>()
        .ok()
        // Digits only: `u8::from_str` would also take "+8".
        .filter(|_| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        .filter(|&n| n <= max)
        .map(|prefix| Cidr { addr, prefix })
        .ok_or_else(|| CidrError::Prefix {
            text: p.to_owned(),
            max,
        })
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
    fn the_prefixed_parser_requires_the_prefix_and_names_the_part() {
        let e = |s: &str| Cidr::parse_prefixed(s).unwrap_err().to_string();
        assert_eq!(Cidr::parse_prefixed("10.0.0.5/24"), Ok(c("10.0.0.5/24")));
        assert_eq!(Cidr::parse_prefixed("::/0"), Ok(c("::/0")));
        assert_eq!(
            e("10.0.0.5"),
            "\"10.0.0.5\" has no prefix length (write e.g. 10.0.0.5/24)"
        );
        assert_eq!(
            e("fd00::1"),
            "\"fd00::1\" has no prefix length (write e.g. fd00::1/64)"
        );
        assert_eq!(e("web"), "\"web\" is not an address/prefix CIDR");
        assert_eq!(e("10.0.0/8"), "\"10.0.0\" is not an IP address");
        for (bad, part, max) in [
            ("10.0.0.0/33", "33", 32),
            ("10.0.0.0/+8", "+8", 32),
            ("10.0.0.0/", "", 32),
            ("10.0.0.0/ 8", " 8", 32),
            ("::/129", "129", 128),
            ("10.0.0.0/8/8", "8/8", 32),
        ] {
            assert_eq!(
                e(bad),
                format!("prefix length {part:?} is not a number from 0 to {max}"),
                "{bad}"
            );
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
