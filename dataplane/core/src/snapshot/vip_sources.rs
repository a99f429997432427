//! [`VipSources`]: per VIP address, the clients that may learn which of
//! its ports no frontend serves.
//!
//! A TCP segment to a VIP port without a frontend is refused with a RST;
//! a client that a service's source ranges deny gets silence on that
//! service's ports. Were the RST sent to everyone, a denied client would
//! map the VIP's served ports (RST on closed ones, silence on served ones).
//! So the RST goes only to a client that at least one service with a
//! frontend on the address (any port, either protocol) allows, and the
//! table answers that in O(log n) per segment, whatever the number of
//! frontends: a SYN flood to closed ports costs no scan of them.
//!
//! Per VIP address it holds the union of those services' source ranges of
//! the address's family, a service without ranges counting as the whole
//! family (`0.0.0.0/0` or `::/0`), reduced to disjoint prefixes (host bits
//! cleared, duplicates and prefixes inside another removed) sorted by
//! network. A client is inside the union exactly when the last prefix
//! whose network is not above it holds it: any prefix holding the client
//! starts at or below it, and one starting between that prefix's network
//! and the client would lie inside it, so was removed.
//!
//! It is a function of the frontends and the services' source ranges:
//! [`SnapshotBuilder::build`](super::SnapshotBuilder::build) makes it, and
//! [`Snapshot::with_services`](super::Snapshot::with_services) makes it
//! again when a changed service's ranges changed.

use std::net::IpAddr;
use std::ops::BitAnd;
use std::sync::Arc;

use hashbrown::HashMap;

use super::cidr::{mask_v4, mask_v6};
use super::flat::FlatMap;
use super::{Frontend, Service};

/// A VIP's prefixes: `prefixes[start..start + len]` of its family's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u32,
    len: u32,
}

/// Per VIP address, the union of its services' source ranges. See the
/// module doc.
#[derive(Debug, Clone, Default)]
pub(crate) struct VipSources {
    v4: FlatMap<u32, Span>,
    /// (network, mask), host order; each VIP's span disjoint and sorted.
    prefixes_v4: Box<[(u32, u32)]>,
    v6: HashMap<u128, Span>,
    prefixes_v6: Box<[(u128, u128)]>,
}

impl VipSources {
    /// The table for `frontends`, whose `service`s index `services`. A
    /// frontend whose service is missing allows nobody (a snapshot's
    /// frontends always have one).
    pub(crate) fn new<'a>(
        frontends: impl Iterator<Item = &'a Frontend>,
        services: &[Arc<Service>],
    ) -> VipSources {
        // VIP address → its services, each once.
        let mut by_vip: HashMap<IpAddr, Vec<u32>> = HashMap::new();
        for f in frontends {
            by_vip.entry(f.addr).or_default().push(f.service.0);
        }
        let mut v4 = Vec::new();
        let mut prefixes_v4 = Vec::new();
        let mut v6 = HashMap::new();
        let mut prefixes_v6 = Vec::new();
        for (vip, mut ids) in by_vip {
            ids.sort_unstable();
            ids.dedup();
            let ranges = || {
                ids.iter()
                    .filter_map(|&id| services.get(id as usize))
                    .map(|s| s.source_ranges())
            };
            match vip {
                IpAddr::V4(a) => {
                    let start = prefixes_v4.len();
                    for r in ranges() {
                        if r.is_empty() {
                            prefixes_v4.push((0, 0));
                        }
                        prefixes_v4.extend(r.iter().filter_map(|c| match c.network() {
                            IpAddr::V4(n) => Some((u32::from(n), mask_v4(c.prefix()))),
                            IpAddr::V6(_) => None,
                        }));
                    }
                    v4.push((u32::from(a), disjoint(&mut prefixes_v4, start)));
                }
                IpAddr::V6(a) => {
                    let start = prefixes_v6.len();
                    for r in ranges() {
                        if r.is_empty() {
                            prefixes_v6.push((0, 0));
                        }
                        prefixes_v6.extend(r.iter().filter_map(|c| match c.network() {
                            IpAddr::V6(n) => Some((u128::from(n), mask_v6(c.prefix()))),
                            IpAddr::V4(_) => None,
                        }));
                    }
                    v6.insert(u128::from(a), disjoint(&mut prefixes_v6, start));
                }
            }
        }
        VipSources {
            v4: FlatMap::new(v4),
            prefixes_v4: prefixes_v4.into_boxed_slice(),
            v6,
            prefixes_v6: prefixes_v6.into_boxed_slice(),
        }
    }

    /// Whether some service with a frontend on `vip` allows `client`;
    /// false when `vip` is no frontend's address, or `client` is of the
    /// other family. O(log prefixes), no allocation.
    #[inline]
    pub(crate) fn allows(&self, vip: IpAddr, client: IpAddr) -> bool {
        match (vip, client) {
            (IpAddr::V4(v), IpAddr::V4(c)) => self
                .v4
                .get(u32::from(v))
                .is_some_and(|&s| holds(&self.prefixes_v4, s, u32::from(c))),
            (IpAddr::V6(v), IpAddr::V6(c)) => self
                .v6
                .get(&u128::from(v))
                .is_some_and(|&s| holds(&self.prefixes_v6, s, u128::from(c))),
            _ => false,
        }
    }

    /// The prefixes of `vip` as (network, prefix length), for tests.
    #[cfg(test)]
    pub(crate) fn prefixes(&self, vip: IpAddr) -> Option<Vec<(IpAddr, u32)>> {
        let span = |s: &Span| s.start as usize..(s.start + s.len) as usize;
        match vip {
            IpAddr::V4(v) => {
                let s = self.v4.get(u32::from(v))?;
                let p = self.prefixes_v4.get(span(s))?;
                Some(
                    p.iter()
                        .map(|&(n, m)| (IpAddr::V4(n.into()), m.count_ones()))
                        .collect(),
                )
            }
            IpAddr::V6(v) => {
                let s = self.v6.get(&u128::from(v))?;
                let p = self.prefixes_v6.get(span(s))?;
                Some(
                    p.iter()
                        .map(|&(n, m)| (IpAddr::V6(n.into()), m.count_ones()))
                        .collect(),
                )
            }
        }
    }
}

/// Sorts `prefixes[start..]` (network, mask pairs) by network, widest
/// first among equal networks, and keeps only those outside every prefix
/// kept before them: disjoint prefixes with the same union. Returns their
/// span.
fn disjoint<T: Copy + Ord + BitAnd<Output = T>>(prefixes: &mut Vec<(T, T)>, start: usize) -> Span {
    // A wider prefix has the numerically smaller mask.
    prefixes[start..].sort_unstable();
    let mut kept = start;
    for i in start..prefixes.len() {
        let (net, _) = prefixes[i];
        // Kept prefixes are disjoint and sorted, so a later prefix can only
        // lie inside the last one kept.
        let inside = kept > start && {
            let (last_net, last_mask) = prefixes[kept - 1];
            net & last_mask == last_net
        };
        if !inside {
            prefixes[kept] = prefixes[i];
            kept += 1;
        }
    }
    prefixes.truncate(kept);
    // u32 indices: a table of 2^32 prefixes would take 32 GiB.
    Span {
        start: start as u32,
        len: (kept - start) as u32,
    }
}

/// Whether one of the disjoint, sorted prefixes of `span` in `table` holds
/// `a`: the last whose network is not above `a` (module doc).
#[inline]
fn holds<T: Copy + Ord + BitAnd<Output = T>>(table: &[(T, T)], span: Span, a: T) -> bool {
    let Some(prefixes) =
        table.get(span.start as usize..(span.start as usize).saturating_add(span.len as usize))
    else {
        return false;
    };
    let i = prefixes.partition_point(|&(net, _)| net <= a);
    i.checked_sub(1)
        .and_then(|j| prefixes.get(j))
        .is_some_and(|&(net, mask)| a & mask == net)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{base, be, cidr, fe, ip};
    use super::super::{ServiceSpec, Snapshot, SnapshotBuilder};
    use super::*;
    use crate::flow::Proto;

    /// A service `name` with `ranges` and the frontends `fes` (address,
    /// port, protocol), one backend.
    fn service(b: &mut SnapshotBuilder<'_>, name: &str, ranges: &[&str], fes: &[(&str, u16, Proto)]) {
        let mut spec = ServiceSpec::new(name);
        spec.source_ranges = ranges.iter().map(|r| cidr(r)).collect();
        let id = b.service(spec).unwrap();
        for &(addr, port, proto) in fes {
            b.frontend(id, fe(addr, port, proto)).unwrap();
        }
        b.backend(id, be("10.1.0.1", 8080)).unwrap();
    }

    /// 192.0.2.1 and 2001:db8:1::1: a TCP service and a UDP one, each with
    /// ranges of both families, nested and overlapping ones included;
    /// 192.0.2.2: one of them and an open service.
    fn snapshot() -> Snapshot {
        let mut b = base();
        service(
            &mut b,
            "default/tcp",
            &["198.51.100.0/24", "10.9.0.7/16", "2001:db8:aa::/48"],
            &[
                ("192.0.2.1", 80, Proto::Tcp),
                ("192.0.2.1", 443, Proto::Tcp),
                ("2001:db8:1::1", 80, Proto::Tcp),
                ("192.0.2.2", 80, Proto::Tcp),
            ],
        );
        service(
            &mut b,
            "default/udp",
            &[
                "10.9.1.0/24",
                "198.51.100.0/24",
                "203.0.113.0/24",
                "2001:db8::/32",
            ],
            &[("192.0.2.1", 53, Proto::Udp), ("2001:db8:1::1", 53, Proto::Udp)],
        );
        service(&mut b, "default/open", &[], &[("192.0.2.2", 8080, Proto::Tcp)]);
        b.build().unwrap()
    }

    fn prefixes(s: &Snapshot, vip: &str) -> Vec<String> {
        let p = s.vip_source_prefixes(ip(vip)).unwrap_or_default();
        p.into_iter().map(|(n, len)| format!("{n}/{len}")).collect()
    }

    #[test]
    fn a_vip_holds_the_union_of_its_services_ranges_of_its_family() {
        let s = snapshot();
        // Both protocols' services, deduplicated, nested ones folded in,
        // host bits cleared, the other family's left out.
        assert_eq!(
            prefixes(&s, "192.0.2.1"),
            ["10.9.0.0/16", "198.51.100.0/24", "203.0.113.0/24"]
        );
        assert_eq!(prefixes(&s, "2001:db8:1::1"), ["2001:db8::/32"]);
        // One open service opens the address to everyone.
        assert_eq!(prefixes(&s, "192.0.2.2"), ["0.0.0.0/0"]);
        assert_eq!(s.vip_source_prefixes(ip("192.0.2.3")), None);
        for (vip, client, want) in [
            ("192.0.2.1", "10.9.200.1", true),
            ("192.0.2.1", "203.0.113.9", true),
            ("192.0.2.1", "10.8.0.1", false),
            ("192.0.2.1", "2001:db8::1", false),
            ("2001:db8:1::1", "2001:db8:ffff::1", true),
            ("2001:db8:1::1", "2001:db9::1", false),
            ("2001:db8:1::1", "10.9.0.1", false),
            ("192.0.2.2", "1.2.3.4", true),
            // Not a VIP: nobody.
            ("192.0.2.3", "10.9.0.1", false),
            ("10.0.0.1", "10.9.0.1", false),
        ] {
            assert_eq!(s.vip_allows_source(ip(vip), ip(client)), want, "{vip} {client}");
        }
    }

    #[test]
    fn with_services_follows_changed_ranges() {
        let s1 = snapshot();
        let mut tcp = ServiceSpec::new("default/tcp");
        tcp.source_ranges = vec![cidr("10.8.0.0/16"), cidr("2001:db9::/32")];
        let s2 = s1
            .with_services(8, vec![(tcp, vec![be("10.1.0.1", 8080)])])
            .unwrap();
        assert_eq!(
            prefixes(&s2, "192.0.2.1"),
            ["10.8.0.0/16", "10.9.1.0/24", "198.51.100.0/24", "203.0.113.0/24"]
        );
        assert_eq!(prefixes(&s2, "2001:db8:1::1"), ["2001:db8::/32", "2001:db9::/32"]);
        assert_eq!(prefixes(&s2, "192.0.2.2"), ["0.0.0.0/0"]);
        assert!(s2.vip_allows_source(ip("192.0.2.1"), ip("10.8.0.1")));
        assert!(!s2.vip_allows_source(ip("192.0.2.1"), ip("10.9.0.1")));
        // The UDP service opened: both its addresses are open.
        let s3 = s2
            .with_services(
                9,
                vec![(ServiceSpec::new("default/udp"), vec![be("10.1.0.2", 53)])],
            )
            .unwrap();
        assert_eq!(prefixes(&s3, "192.0.2.1"), ["0.0.0.0/0"]);
        assert_eq!(prefixes(&s3, "2001:db8:1::1"), ["::/0"]);
        // A change of backends only keeps the table.
        let mut udp = ServiceSpec::new("default/udp");
        udp.source_ranges = vec![cidr("10.9.1.0/24"), cidr("2001:db8::/32")];
        let s4 = s3.with_services(10, vec![(udp.clone(), vec![])]).unwrap();
        let s5 = s4
            .with_services(11, vec![(udp, vec![be("10.1.0.3", 53)])])
            .unwrap();
        for s in [&s4, &s5] {
            assert_eq!(prefixes(s, "192.0.2.1"), ["10.8.0.0/16", "10.9.1.0/24"]);
            assert_eq!(prefixes(s, "2001:db8:1::1"), ["2001:db8::/32", "2001:db9::/32"]);
        }
    }

    #[test]
    fn a_rebuild_with_kept_services_has_the_same_table() {
        let s1 = snapshot();
        let mut b = base();
        b.reuse_from(&s1);
        // Kept `tcp` (its frontend on 192.0.2.2 dropped), `udp` gone.
        let id = b.keep_service(&s1.services()[0]).unwrap();
        b.frontend(id, fe("192.0.2.1", 80, Proto::Tcp)).unwrap();
        let s2 = b.build().unwrap();
        assert_eq!(prefixes(&s2, "192.0.2.1"), ["10.9.0.0/16", "198.51.100.0/24"]);
        assert_eq!(s2.vip_source_prefixes(ip("192.0.2.2")), None);
        assert_eq!(s2.vip_source_prefixes(ip("2001:db8:1::1")), None);
    }

    #[test]
    fn nested_and_duplicate_prefixes_collapse_to_disjoint_ones() {
        let mut p: Vec<(u32, u32)> = vec![
            (0xdead_beef, 0), // kept before start: untouched
            (0x0a01_0000, mask_v4(16)),
            (0x0a00_0000, mask_v4(8)),
            (0xc0a8_0000, mask_v4(16)),
            (0x0a00_0000, mask_v4(8)),
            (0xc0a8_0100, mask_v4(24)),
            (0xc0a9_0000, mask_v4(16)),
        ];
        let s = disjoint(&mut p, 1);
        assert_eq!(s, Span { start: 1, len: 3 });
        assert_eq!(
            p,
            vec![
                (0xdead_beef, 0),
                (0x0a00_0000, mask_v4(8)),
                (0xc0a8_0000, mask_v4(16)),
                (0xc0a9_0000, mask_v4(16)),
            ]
        );
        for (a, want) in [
            (0x0a01_0203, true),
            (0x0aff_ffff, true),
            (0x0b00_0000, false),
            (0x0900_0000, false),
            (0xc0a8_0101, true),
            (0xc0a9_ffff, true),
            (0xc0aa_0000, false),
            (0, false),
            (u32::MAX, false),
        ] {
            assert_eq!(holds(&p, s, a), want, "{a:#x}");
        }
    }

    #[test]
    fn everyone_swallows_every_other_prefix() {
        let mut p: Vec<(u128, u128)> = vec![(1 << 120, mask_v6(8)), (0, 0), (5, mask_v6(128))];
        let s = disjoint(&mut p, 0);
        assert_eq!(p, vec![(0, 0)]);
        assert!(holds(&p, s, u128::MAX) && holds(&p, s, 0));
    }

    #[test]
    fn an_empty_or_out_of_range_span_holds_nothing() {
        let p: Vec<(u32, u32)> = vec![(0, 0)];
        assert!(!holds(&p, Span { start: 0, len: 0 }, 1));
        assert!(!holds(&p, Span { start: 1, len: 1 }, 1));
        assert!(!holds(
            &p,
            Span {
                start: u32::MAX,
                len: u32::MAX
            },
            1
        ));
    }
}
