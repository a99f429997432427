//! The IPv4 accessors of [`Conntrack`] for the worker's fast path
//! (`worker/fast.rs`): raw octets in and out, so an established packet
//! never builds a [`FlowKey`](crate::flow::FlowKey) or an `IpAddr`.
//!
//! They read the same table as [`Conntrack::lookup`] and
//! [`Conntrack::rewrite`] and give the same answers (a test compares them
//! on every entry of a busy table).
//!
//! The entry's flow cache ([`Conntrack::touch_cached_v4`],
//! [`Conntrack::set_cached_hop_v4`]) holds, per direction, the next hop
//! the fast path resolved for it and the snapshot epoch it did so under;
//! the fast path trusts it only under that same epoch.

use std::net::Ipv4Addr;

use super::table::RawKey;
use super::{
    raw_key, raw_rewrite, set_cached, touch_cached, warm_in, warm_victims_in, Conntrack, Direction, EntryId,
    KeyHash, Tags, BURST,
};
use crate::flow::Proto;
use crate::nat::NatDelta;
use crate::prefetch::Prefetch;
use crate::Tick;

/// An IPv4 key as the burst path's fast frames hold it, for
/// [`Conntrack::lookup_burst_v4`]: the table's own form, so a burst's
/// lookups neither build a [`FlowKey`](crate::flow::FlowKey) nor convert
/// one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyV4(RawKey<[u8; 4]>);

impl KeyV4 {
    /// Fills unused slots of a burst's keys; never looked up.
    pub(crate) const UNUSED: KeyV4 = KeyV4(RawKey {
        src: [0; 4],
        dst: [0; 4],
        sport: 0,
        dport: 0,
        proto: 0,
    });

    /// The key `src:sport → dst:dport` with IP protocol `proto`.
    #[inline(always)]
    pub(crate) fn new(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, proto: u8) -> KeyV4 {
        KeyV4(raw_key(src, dst, sport, dport, proto))
    }
}

/// [`Rewrite`](super::Rewrite) of an IPv4 connection, as octets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RewriteV4 {
    /// New source address.
    pub src: [u8; 4],
    /// New source port.
    pub src_port: u16,
    /// New destination address.
    pub dst: [u8; 4],
    /// New destination port.
    pub dst_port: u16,
}

impl Conntrack {
    /// [`Conntrack::lookup`] of the IPv4 key `src:sport → dst:dport` with
    /// IP protocol `proto`.
    #[inline(always)]
    pub fn lookup_v4(
        &self,
        src: [u8; 4],
        dst: [u8; 4],
        sport: u16,
        dport: u16,
        proto: u8,
    ) -> Option<(EntryId, Direction)> {
        let k = raw_key(src, dst, sport, dport, proto);
        self.v4.find(&k, self.v4.locate(&k)).map(|(i, d)| (EntryId(i), d))
    }

    /// [`Conntrack::lookup_burst_hashed`] of IPv4 keys only, in the
    /// table's form: the same three stages (every home line warmed, then
    /// every peeked entry, then the lookups), without the per-key match on
    /// the address family and the conversion of each key.
    #[inline(always)]
    pub(crate) fn lookup_burst_v4(
        &self,
        p: &impl Prefetch,
        keys: &[KeyV4],
        out: &mut [Option<(EntryId, Direction)>],
        hashes: &mut [KeyHash],
    ) {
        let n = keys.len().min(out.len()).min(hashes.len()).min(BURST);
        let (keys, out, hashes) = (&keys[..n], &mut out[..n], &mut hashes[..n]);
        for (k, h) in keys.iter().zip(hashes.iter_mut()) {
            h.0 = self.v4.locate(&k.0);
            self.v4.prefetch_home(p, h.0);
        }
        let mut peeked = [0u32; BURST];
        for (h, v) in hashes.iter().zip(peeked.iter_mut()) {
            *v = self.v4.peek(h.0);
            self.v4.prefetch_slot(p, *v);
        }
        // Nothing changed since the peeks: each lookup starts from its own.
        for (((k, h), o), &v) in keys.iter().zip(hashes.iter()).zip(out.iter_mut()).zip(&peeked) {
            *o = self.v4.find_peeked(&k.0, h.0, v).map(|(i, d)| (EntryId(i), d));
        }
    }

    /// [`Conntrack::maybe_inserted_since_mark`] of an IPv4 key with `hash`
    /// from [`Conntrack::lookup_burst_v4`].
    #[inline(always)]
    pub(crate) fn maybe_inserted_since_mark_v4(&self, hash: KeyHash) -> bool {
        self.v4.maybe_indexed_since_mark(hash.0.hash)
    }

    /// [`Conntrack::lookup_hashed`] of an IPv4 key with its hash from
    /// [`Conntrack::lookup_burst_v4`].
    #[inline(always)]
    pub(crate) fn lookup_hashed_v4(&self, key: &KeyV4, hash: KeyHash) -> Option<(EntryId, Direction)> {
        self.v4.find(&key.0, hash.0).map(|(i, d)| (EntryId(i), d))
    }

    /// Warms the index line of the probe run at the home bucket of the IPv4
    /// key `src:sport → dst:dport` (or its reply cell), a key about to be
    /// looked up (likely in vain) and inserted: the burst path's new
    /// connections' reply keys. Returns the key's place, for
    /// [`Conntrack::insert_missed`].
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn warm_v4(
        &self,
        p: &impl Prefetch,
        src: [u8; 4],
        dst: [u8; 4],
        sport: u16,
        dport: u16,
        proto: u8,
    ) -> KeyHash {
        warm_in(&self.v4, p, raw_key(src, dst, sport, dport, proto))
    }

    /// Warms the index slots the next `n` evictions from a full IPv4 table
    /// will edit, when they can be foreseen (a SYN flood: the entries from
    /// the eviction hand on), and passes the SNAT pair and protocol of each
    /// full-NAT one to `snat`, for the caller to warm what releasing it
    /// will touch. Reads only.
    #[inline]
    pub fn warm_victims_v4(&self, p: &impl Prefetch, n: u32, snat: impl FnMut(Ipv4Addr, u16, Proto)) {
        warm_victims_in(&self.v4, p, n, snat)
    }

    /// [`Conntrack::rewrite`] of an IPv4 connection; `None` for a stale or
    /// IPv6 id.
    #[inline(always)]
    pub fn rewrite_v4(&self, id: EntryId, dir: Direction) -> Option<RewriteV4> {
        if id.is_v6() {
            return None;
        }
        let ((src, src_port), (dst, dst_port)) = raw_rewrite(self.v4.get(id.0)?, dir);
        Some(RewriteV4 {
            src,
            src_port,
            dst,
            dst_port,
        })
    }

    /// [`Conntrack::rewrite_v4`] and, in the same visit to the entry, the
    /// next-hop index cached for `dir` by
    /// [`set_cached_hop_v4`](Self::set_cached_hop_v4) under snapshot epoch
    /// `epoch`: `Some` only if the entry's cache was filled for that very
    /// epoch, which is not 0, and for `dir`. `None` for a stale or IPv6 id.
    /// Tests read the cache through it; the fast path uses
    /// [`touch_cached_v4`](Self::touch_cached_v4).
    #[cfg(test)]
    pub(crate) fn rewrite_cached_v4(
        &self,
        id: EntryId,
        dir: Direction,
        epoch: u64,
    ) -> Option<(RewriteV4, Option<u32>)> {
        if id.is_v6() {
            return None;
        }
        let s = self.v4.get(id.0)?;
        let ((src, src_port), (dst, dst_port)) = raw_rewrite(s, dir);
        let rw = RewriteV4 {
            src,
            src_port,
            dst,
            dst_port,
        };
        Some((rw, s.cache.get(dir, epoch)))
    }

    /// For a packet of the IPv4 entry `id` travelling `dir` whose cached
    /// next hop under `epoch` is an index into `hops` (the snapshot's hop
    /// table) that `takes` the packet (its MTU): accounts the packet as
    /// [`Conntrack::touch`] does and returns the rewrite, that hop, the tags
    /// and the rewrite's checksum change ([`NatDelta`]), all in one visit
    /// to the entry.
    /// `None`, with nothing changed, when the cache does not hold such a
    /// hop (or the id is stale or IPv6): the caller then checks, and
    /// touches, the slow way.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn touch_cached_v4<'h, H>(
        &mut self,
        id: EntryId,
        dir: Direction,
        epoch: u64,
        hops: &'h [H],
        takes: impl Fn(&H) -> bool,
        tcp_flags: u8,
        now: Tick,
    ) -> Option<(RewriteV4, &'h H, Tags, NatDelta)> {
        if id.is_v6() {
            return None;
        }
        let timeout_ms = &self.timeout_ms;
        let s = self.v4.get_mut(id.0)?;
        let (((src, src_port), (dst, dst_port)), hop, tags, delta) =
            touch_cached(s, dir, epoch, hops, takes, tcp_flags, now, timeout_ms)?;
        Some((
            RewriteV4 {
                src,
                src_port,
                dst,
                dst_port,
            },
            hop,
            tags,
            delta,
        ))
    }

    /// Caches `hop` as the next hop of the IPv4 entry's `dir` under
    /// snapshot epoch `epoch`, with `delta`, the checksum change of `dir`'s
    /// translation that the packet which resolved it was rewritten with
    /// (what [`touch_cached_v4`](Self::touch_cached_v4) gives back; a
    /// property of the connection, so the other direction's, its reverse,
    /// is not lost). If the entry's cache holds another epoch, the other
    /// direction is uncached first, so no direction validates with a hop
    /// from an older snapshot. Does nothing for epoch 0 (an empty snapshot,
    /// never cached) and returns false for a stale or IPv6 id.
    #[inline(always)]
    pub(crate) fn set_cached_hop_v4(
        &mut self,
        id: EntryId,
        dir: Direction,
        epoch: u64,
        hop: u32,
        delta: NatDelta,
    ) -> bool {
        if id.is_v6() {
            return false;
        }
        let Some(s) = self.v4.get_mut(id.0) else {
            return false;
        };
        set_cached(s, dir, epoch, hop, delta);
        true
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;
    use crate::conntrack::{Config, Nat, Tags};
    use crate::flow::{FlowKey, FlowKeyV4, Proto};
    use crate::Tick;

    fn octets(ip: IpAddr) -> [u8; 4] {
        match ip {
            IpAddr::V4(a) => a.octets(),
            IpAddr::V6(_) => panic!("IPv4 only"),
        }
    }

    fn one_entry() -> (Conntrack, EntryId) {
        let mut ct = Conntrack::new(Config::new(16, 16)).unwrap();
        let key = FlowKey::V4(FlowKeyV4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(192, 0, 2, 1),
            sport: 1234,
            dport: 80,
            proto: Proto::Tcp,
        });
        let backend = (IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1)), 8080);
        let id = ct.insert(key, Nat::Dnat { backend }, Tags::default(), Tick(0), |_| {});
        (ct, id.unwrap())
    }

    fn cached(ct: &Conntrack, id: EntryId, dir: Direction, epoch: u64) -> Option<u32> {
        ct.rewrite_cached_v4(id, dir, epoch).unwrap().1
    }

    #[test]
    fn the_flow_cache_answers_only_for_its_epoch_and_direction() {
        use Direction::{Original, Reply};
        let (mut ct, id) = one_entry();
        // New: uncached, whatever the epoch (0 included).
        for e in [0, 1, 7] {
            assert_eq!(cached(&ct, id, Original, e), None);
            assert_eq!(cached(&ct, id, Reply, e), None);
        }
        assert!(ct.set_cached_hop_v4(id, Original, 7, 3, NatDelta::default()));
        assert_eq!(cached(&ct, id, Original, 7), Some(3));
        assert_eq!(cached(&ct, id, Reply, 7), None);
        assert_eq!(cached(&ct, id, Original, 8), None);
        assert!(ct.set_cached_hop_v4(id, Reply, 7, 4, NatDelta::default()));
        assert_eq!(
            (cached(&ct, id, Original, 7), cached(&ct, id, Reply, 7)),
            (Some(3), Some(4))
        );
        // A new epoch for one direction uncaches the other.
        assert!(ct.set_cached_hop_v4(id, Reply, 9, 5, NatDelta::default()));
        assert_eq!(cached(&ct, id, Reply, 9), Some(5));
        assert_eq!(cached(&ct, id, Original, 9), None);
        assert_eq!(cached(&ct, id, Original, 7), None);
        assert_eq!(cached(&ct, id, Reply, 7), None);
        // Epoch 0 (the empty snapshot) is never cached nor answered.
        assert!(ct.set_cached_hop_v4(id, Original, 0, 6, NatDelta::default()));
        assert_eq!(cached(&ct, id, Original, 0), None);
        assert_eq!(cached(&ct, id, Reply, 9), Some(5));
        // The rewrite is the plain one.
        for dir in [Original, Reply] {
            assert_eq!(
                ct.rewrite_cached_v4(id, dir, 9).unwrap().0,
                ct.rewrite_v4(id, dir).unwrap()
            );
        }
        // The checksum change cached with a direction's hop comes back for
        // that direction, and reversed for the other: one connection's.
        let d = NatDelta {
            ip: 0x1234,
            l4: 0xFFFF,
        };
        let touched = |ct: &mut Conntrack, dir| {
            let hops = [(); 8];
            ct.touch_cached_v4(id, dir, 11, &hops, |_| true, 0, Tick(1))
                .map(|t| t.3)
        };
        assert!(ct.set_cached_hop_v4(id, Reply, 11, 2, d));
        assert_eq!(touched(&mut ct, Reply), Some(d));
        assert!(ct.set_cached_hop_v4(id, Original, 11, 1, d.reversed()));
        assert_eq!(touched(&mut ct, Original), Some(d.reversed()));
        assert_eq!(touched(&mut ct, Reply), Some(d));
        assert!(ct.set_cached_hop_v4(id, Original, 11, 1, d));
        assert_eq!(touched(&mut ct, Reply), Some(d.reversed()));
    }

    #[test]
    fn a_reused_slot_starts_uncached() {
        let (mut ct, id) = one_entry();
        assert!(ct.set_cached_hop_v4(id, Direction::Original, 7, 3, NatDelta::default()));
        ct.remove(id).unwrap();
        assert_eq!(ct.rewrite_cached_v4(id, Direction::Original, 7), None);
        assert!(!ct.set_cached_hop_v4(id, Direction::Original, 7, 3, NatDelta::default()));
        let key = FlowKey::V4(FlowKeyV4 {
            src: Ipv4Addr::new(10, 0, 0, 2),
            dst: Ipv4Addr::new(192, 0, 2, 1),
            sport: 1234,
            dport: 80,
            proto: Proto::Udp,
        });
        let backend = (IpAddr::V4(Ipv4Addr::new(10, 9, 0, 2)), 8080);
        let id2 = ct
            .insert(key, Nat::Dnat { backend }, Tags::default(), Tick(0), |_| {})
            .unwrap();
        assert_eq!(id2, id, "the freed slot is reused");
        assert_eq!(cached(&ct, id2, Direction::Original, 7), None);
    }

    #[test]
    fn raw_accessors_agree_with_the_general_ones() {
        let mut ct = Conntrack::new(Config::new(512, 16)).unwrap();
        let mut keys = Vec::new();
        for i in 0..400u32 {
            let key = FlowKey::V4(FlowKeyV4 {
                src: Ipv4Addr::from(0x0a00_0000 + i % 37),
                dst: Ipv4Addr::new(192, 0, 2, 1 + (i % 3) as u8),
                sport: 1024 + i as u16,
                dport: 80,
                proto: if i % 4 == 0 { Proto::Udp } else { Proto::Tcp },
            });
            let backend = (IpAddr::V4(Ipv4Addr::new(10, 9, 0, (i % 5) as u8)), 8080);
            let nat = if i % 2 == 0 {
                Nat::Dnat { backend }
            } else {
                let snat = (IpAddr::V4(Ipv4Addr::new(10, 8, 0, 1)), 2000 + i as u16);
                Nat::FullNat { backend, snat }
            };
            ct.insert(key, nat, Tags::default(), Tick(0), |_| {}).unwrap();
            keys.push(key);
            keys.push(nat.reply_key(&key).unwrap());
        }
        // Keys that are not tracked, too.
        keys.push(FlowKey::V4(FlowKeyV4 {
            src: Ipv4Addr::new(1, 2, 3, 4),
            dst: Ipv4Addr::new(192, 0, 2, 1),
            sport: 1,
            dport: 80,
            proto: Proto::Tcp,
        }));
        for key in keys {
            let FlowKey::V4(k) = key else { unreachable!() };
            let raw = ct.lookup_v4(k.src.octets(), k.dst.octets(), k.sport, k.dport, k.proto as u8);
            assert_eq!(raw, ct.lookup(&key), "{key:?}");
            let Some((id, dir)) = raw else { continue };
            let rw = ct.rewrite(id, dir).unwrap();
            let got = ct.rewrite_v4(id, dir).unwrap();
            assert_eq!(
                (got.src, got.src_port, got.dst, got.dst_port),
                (octets(rw.src.0), rw.src.1, octets(rw.dst.0), rw.dst.1)
            );
        }
    }
}
