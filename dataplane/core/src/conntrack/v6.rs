//! The IPv6 accessors of [`Conntrack`] for the worker's IPv6 fast path
//! (`worker/fast6.rs`): raw octets in and out, as `v4.rs` has them for
//! IPv4, so an established IPv6 packet never builds a
//! [`FlowKey`](crate::flow::FlowKey) or an `IpAddr` to find its entry.
//!
//! They read the same table as [`Conntrack::lookup`] and
//! [`Conntrack::rewrite`] and give the same answers (a test compares them
//! on every entry of a busy table).
//!
//! The entry's flow cache ([`Conntrack::touch_cached_v6`],
//! [`Conntrack::set_cached_hop_v6`]) is the IPv4 one's (`v4.rs`), with
//! indices into the snapshot's IPv6 next hops.

use std::net::Ipv6Addr;

use super::{
    raw_key, raw_rewrite, set_cached, touch_cached, warm_in, warm_victims_in, Conntrack, Direction, EntryId,
    KeyHash, Tags, V6_BIT,
};
use crate::flow::Proto;
use crate::nat::NatDelta;
use crate::prefetch::Prefetch;
use crate::Tick;

/// [`Rewrite`](super::Rewrite) of an IPv6 connection, as octets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RewriteV6 {
    /// New source address.
    pub src: [u8; 16],
    /// New source port.
    pub src_port: u16,
    /// New destination address.
    pub dst: [u8; 16],
    /// New destination port.
    pub dst_port: u16,
}

impl Conntrack {
    /// [`Conntrack::lookup`] of the IPv6 key `src:sport → dst:dport` with
    /// IP protocol `proto`.
    #[inline(always)]
    pub fn lookup_v6(
        &self,
        src: [u8; 16],
        dst: [u8; 16],
        sport: u16,
        dport: u16,
        proto: u8,
    ) -> Option<(EntryId, Direction)> {
        let k = raw_key(src, dst, sport, dport, proto);
        self.v6
            .find(&k, self.v6.locate(&k))
            .map(|(i, d)| (EntryId(i | V6_BIT), d))
    }

    /// [`Conntrack::warm_v4`] of the IPv6 key `src:sport → dst:dport`: warms
    /// the index line of its probe run (or its reply cell), a key about to
    /// be looked up and inserted (the burst path's new IPv6 connections'
    /// reply keys), and returns its place for
    /// [`Conntrack::insert_missed_v6`].
    #[inline]
    pub(crate) fn warm_v6(
        &self,
        p: &impl Prefetch,
        src: [u8; 16],
        dst: [u8; 16],
        sport: u16,
        dport: u16,
        proto: u8,
    ) -> KeyHash {
        warm_in(&self.v6, p, raw_key(src, dst, sport, dport, proto))
    }

    /// [`Conntrack::warm_victims_v4`] in the IPv6 table: warms the index
    /// slots the next `n` evictions from a full table will edit, and
    /// passes the SNAT pair and protocol of each full-NAT one to `snat`.
    /// Reads only.
    #[inline]
    pub fn warm_victims_v6(&self, p: &impl Prefetch, n: u32, snat: impl FnMut(Ipv6Addr, u16, Proto)) {
        warm_victims_in(&self.v6, p, n, snat)
    }

    /// [`Conntrack::rewrite`] of an IPv6 connection; `None` for a stale or
    /// IPv4 id.
    #[inline(always)]
    pub fn rewrite_v6(&self, id: EntryId, dir: Direction) -> Option<RewriteV6> {
        if !id.is_v6() {
            return None;
        }
        let ((src, src_port), (dst, dst_port)) = raw_rewrite(self.v6.get(id.0 & !V6_BIT)?, dir);
        Some(RewriteV6 {
            src,
            src_port,
            dst,
            dst_port,
        })
    }

    /// The next-hop index cached for the IPv6 entry's `dir` under `epoch`
    /// (`None` if none, or for a stale or IPv4 id): what tests read the
    /// cache with.
    #[cfg(test)]
    pub(crate) fn cached_hop_v6(&self, id: EntryId, dir: Direction, epoch: u64) -> Option<u32> {
        if !id.is_v6() {
            return None;
        }
        self.v6.get(id.0 & !V6_BIT)?.cache.get(dir, epoch)
    }

    /// [`Conntrack::touch_cached_v4`] of an IPv6 entry: `hops` is the
    /// snapshot's IPv6 next-hop table. `None`, with nothing changed, for
    /// a stale or IPv4 id or when the cache does not answer.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn touch_cached_v6<'h, H>(
        &mut self,
        id: EntryId,
        dir: Direction,
        epoch: u64,
        hops: &'h [H],
        takes: impl Fn(&H) -> bool,
        tcp_flags: u8,
        now: Tick,
    ) -> Option<(RewriteV6, &'h H, Tags, NatDelta)> {
        if !id.is_v6() {
            return None;
        }
        let timeout_ms = &self.timeout_ms;
        let s = self.v6.get_mut(id.0 & !V6_BIT)?;
        let (((src, src_port), (dst, dst_port)), hop, tags, delta) =
            touch_cached(s, dir, epoch, hops, takes, tcp_flags, now, timeout_ms)?;
        let rw = RewriteV6 {
            src,
            src_port,
            dst,
            dst_port,
        };
        Some((rw, hop, tags, delta))
    }

    /// [`Conntrack::set_cached_hop_v4`] of an IPv6 entry, `hop` an index
    /// into the snapshot's IPv6 next hops; false for a stale or IPv4 id.
    #[inline(always)]
    pub(crate) fn set_cached_hop_v6(
        &mut self,
        id: EntryId,
        dir: Direction,
        epoch: u64,
        hop: u32,
        delta: NatDelta,
    ) -> bool {
        if !id.is_v6() {
            return false;
        }
        let Some(s) = self.v6.get_mut(id.0 & !V6_BIT) else {
            return false;
        };
        set_cached(s, dir, epoch, hop, delta);
        true
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::conntrack::{Config, Nat, Tags};
    use crate::flow::{FlowKey, Proto};
    use crate::Tick;

    fn octets(ip: IpAddr) -> [u8; 16] {
        match ip {
            IpAddr::V6(a) => a.octets(),
            IpAddr::V4(_) => panic!("IPv6 only"),
        }
    }

    /// Every key of a table holding DNAT and full-NAT connections, and
    /// keys it does not hold: `lookup_v6` and `rewrite_v6` answer as
    /// `lookup` and `rewrite` do, and decline IPv4 ids.
    #[test]
    fn v6_accessors_agree_with_the_general_ones() {
        let mut ct = Conntrack::new(Config::new(64, 256)).unwrap();
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let mut keys = Vec::new();
        for i in 0..200u16 {
            let client = (ip(&format!("2001:db8::{:x}", i + 1)), 1000 + i);
            let proto = if i % 3 == 0 { Proto::Udp } else { Proto::Tcp };
            let key = FlowKey::new(client, (ip("fd00::100"), 80), proto).unwrap();
            let backend = (ip(&format!("fd01::{:x}", 11 + i % 5)), 8080);
            let nat = if i % 2 == 0 {
                Nat::Dnat { backend }
            } else {
                Nat::FullNat {
                    backend,
                    snat: (ip("fd01::100"), 2000 + i),
                }
            };
            let id = ct
                .insert(key, nat, Tags::default(), Tick(0), |_| {})
                .expect("room");
            keys.push(key);
            let reply = ct.get(id).unwrap().reply();
            keys.push(reply);
            // Keys held nowhere: another port, another protocol.
            keys.push(FlowKey::new((client.0, client.1 ^ 1), (ip("fd00::100"), 80), proto).unwrap());
        }
        let v4 = FlowKey::new((ip("10.0.0.2"), 1), (ip("10.0.0.100"), 80), Proto::Tcp).unwrap();
        let v4_id = ct.insert(
            v4,
            Nat::Dnat {
                backend: (ip("10.1.0.11"), 80),
            },
            Tags::default(),
            Tick(0),
            |_| {},
        );
        for key in keys {
            let FlowKey::V6(k) = key else { unreachable!() };
            let raw = ct.lookup_v6(k.src.octets(), k.dst.octets(), k.sport, k.dport, k.proto as u8);
            assert_eq!(raw, ct.lookup(&key), "{key:?}");
            if let Some((id, dir)) = raw {
                let rw = ct.rewrite(id, dir).unwrap();
                let expect = RewriteV6 {
                    src: octets(rw.src.0),
                    src_port: rw.src.1,
                    dst: octets(rw.dst.0),
                    dst_port: rw.dst.1,
                };
                assert_eq!(ct.rewrite_v6(id, dir), Some(expect), "{key:?}");
            }
        }
        let v4_id = v4_id.expect("room");
        assert_eq!(ct.rewrite_v6(v4_id, Direction::Original), None);
    }
}
