//! [`Worker::handle_burst`]: the pipeline over an rx burst, with the
//! conntrack misses of the whole burst overlapped.
//!
//! At a million connections a lookup is two dependent DRAM misses (index
//! slot, then entry). Packet by packet they serialize; here the burst is
//! parsed first, the 5-tuples of its TCP/UDP packets go through
//! [`Conntrack::lookup_burst`](crate::conntrack::Conntrack::lookup_burst)
//! (all index slots warmed, then all entries), and only then is each
//! packet processed, in order, exactly as [`Worker::handle_packet`] would.
//! How a line is warmed, a prefetch instruction or a plain load, is the
//! caller's [`Prefetch`] ([`crate::prefetch`]).
//!
//! Same verdicts, same frames, same counters as `handle_packet` called on
//! each frame in turn (a test feeds random traffic through both). What makes
//! that hold although the lookups run before earlier packets of the burst
//! are processed: processing only changes the conntrack index through
//! inserts (a new flow), the evictions an insert may cause, and the
//! removal of an entry that a client SYN reopens. An insert
//! moves no index slot, so a hit found ahead stays valid; a miss may not (an
//! earlier packet of the burst may have opened that very flow, or have
//! this key as its reply key), so a miss is looked up again if its key may
//! have been inserted since stage 2: each table keeps a small filter of
//! the hashes it indexed since the burst's mark
//! ([`Conntrack::maybe_inserted_since_mark`](crate::conntrack::Conntrack::maybe_inserted_since_mark)).
//! A removal never adds a key, so a miss needs nothing else. After a slot
//! was freed (an eviction, or an entry a client SYN reopens) every hit is
//! looked up again (the slot may hold another connection by now),
//! detected through the tables' own flag
//! ([`Conntrack::discarded_since_mark`](crate::conntrack::Conntrack::discarded_since_mark)). Looking up again starts from the key's hash kept from
//! stage 2 ([`Conntrack::lookup_hashed`](crate::conntrack::Conntrack::lookup_hashed)),
//! on index lines stage 2 warmed.
//!
//! Frames the IPv4 fast path (`fast.rs`) can read skip the parse: their
//! 5-tuple comes from [`fast::read_v4`] and is kept in the table's own
//! form ([`KeyV4`]), looked up by the IPv4-only
//! [`Conntrack::lookup_burst_v4`](crate::conntrack::Conntrack::lookup_burst_v4)
//! (no `FlowKey` built, no match on the family per key and stage: 35
//! instructions a packet fewer), and in stage 3 they go through the fast
//! path with their lookup; only if it declines are they parsed, then, and
//! handed to the general path with the same lookup. Frames the IPv6 fast
//! path (`fast6.rs`) can read skip the parse too: their key is built from
//! [`fast6::read_v6_at`]'s read, the rest of the read is kept beside it,
//! and in stage 3 they go through the IPv6 fast paths (established and
//! new connections) with their lookup, parsed only if those decline
//! (callgrind: an established IPv6 packet at 1M 791 → 598 instructions,
//! a new IPv6 connection 1,916 → 1,727). The keys of the IPv6 and parsed
//! frames take the general lookup, which a burst of IPv4 fast frames
//! skips.
//!
//! A packet that misses and may open a connection will, in stage 3, look up
//! and insert its reply key: another cold index slot. Stage 2b warms those
//! slots for the whole burst too, with the backend Maglev picks and a guess
//! at the SNAT pairs the allocator will hand out next
//! ([`SnatPorts::warm_alloc_v4`](crate::flow::SnatPorts::warm_alloc_v4),
//! which warms the in-use words those allocations set), and, when the
//! table is full, the index slots of the entries those inserts will evict
//! (the next ones from the eviction hand) and the in-use words of their
//! SNAT ports, which the evictions release. It only reads: a wrong
//! guess wastes a prefetch and changes no answer. The Maglev picks it makes
//! are handed to stage 3's open, which would make the same ones. IPv6
//! frames the IPv6 fast path read are warmed the same way, out of line
//! (`Worker::warm_opens_v6`: [`SnatPorts::warm_alloc_v6`](crate::flow::SnatPorts::warm_alloc_v6),
//! [`Conntrack::warm_victims_v6`](crate::conntrack::Conntrack::warm_victims_v6)),
//! their picks and hashes handed to `fast_open_v6`, on tagged nodes too
//! (a SYN flood to a DNAT service into a full table ~1.15-1.65x faster a
//! SYN in `pipeline_v6`, full-NAT floods and other new flows mixed; an
//! established IPv6 packet at 1M pays 14 instructions, bench/RESULTS.md).
//!
//! Below [`BURST_LOOKUP_MIN_LEN`] live connections (the default of
//! [`WorkerConfig::burst_lookup_min_len`](super::WorkerConfig::burst_lookup_min_len))
//! the table's hot part stays in cache, the staged lookup only adds work
//! (parsed headers kept for a burst, keys hashed ahead: ~130 instructions
//! a packet, callgrind on an established forward packet, 518 staged
//! against 385 packet by packet, bench/RESULTS.md), and the burst is
//! handled packet by packet instead.

use std::net::Ipv6Addr;

use crate::conntrack::{Direction, EntryId, KeyHash, KeyV4, BURST};
use crate::flow::{FlowKey, FlowKeyV4, FlowKeyV6, Proto};
use crate::prefetch::{Loads, Prefetch};
use crate::snapshot::Snapshot;
use crate::wire::{self, Parsed, L3};
use crate::{DropReason, Tick};

use super::fast::{self, FastV4};
use super::fast6::{self, FastV6};
use super::fast_open::Pick;
use super::{PacketMeta, Verdict, Worker};

/// Live connections from which the staged lookup pays (measured with
/// `benches/pipeline.rs` in a 1M-entry table: 3-5% slower at 1k live
/// connections, 1.7-2.3x faster at 20k, 100k and 1M): the default of
/// [`WorkerConfig::burst_lookup_min_len`](super::WorkerConfig::burst_lookup_min_len).
/// The crate's unit tests use 0, so the staged path is what they check
/// (tests outside it, and the `burst` fuzz target, set the field to 0).
pub const BURST_LOOKUP_MIN_LEN: usize = if cfg!(test) { 0 } else { 1 << 12 };

// A burst's frames fit the bit masks of `burst_chunk`.
const _: () = assert!(BURST <= 32);

/// The burst's general keys, their lookups and their hashes (stage 2).
type LookedUp<'a> = (&'a [FlowKey], &'a [Option<(EntryId, Direction)>], &'a [KeyHash]);

/// Fills unused key slots; never looked up.
const NO_KEY: FlowKey = FlowKey::V4(FlowKeyV4 {
    src: std::net::Ipv4Addr::UNSPECIFIED,
    dst: std::net::Ipv4Addr::UNSPECIFIED,
    sport: 0,
    dport: 0,
    proto: Proto::Tcp,
});

/// The key `paths::forward` and `paths::reply` look up for `p`, if `p` can
/// take either path (TCP or UDP, not ARP, not an ICMP error).
#[inline(always)]
fn own_key(p: &Parsed) -> Option<FlowKey> {
    if p.l3 == L3::Arp || p.icmp_error {
        return None;
    }
    let proto = match Proto::from_u8(p.protocol) {
        Some(pr @ (Proto::Tcp | Proto::Udp)) => pr,
        _ => return None,
    };
    FlowKey::new((p.src, p.src_port), (p.dst, p.dst_port), proto)
}

impl Worker {
    /// Handles a burst of frames: `verdicts[i]` is what
    /// [`Worker::handle_packet`]`(now, snap, frames[i], &metas[i])` would
    /// have returned had the frames been handled one by one in order, and
    /// frames and counters end up the same. Handles the first
    /// `min(frames.len(), metas.len(), verdicts.len())` frames; any length
    /// works, in chunks of [`BURST`].
    ///
    /// `F` is anything that lends its bytes mutably: `&mut [u8]`, `Vec<u8>`,
    /// or the shell's mbuf wrapper. Lines are warmed by plain loads
    /// ([`Loads`]); [`Worker::handle_burst_with`] takes a prefetch.
    pub fn handle_burst<F: AsMut<[u8]>>(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frames: &mut [F],
        metas: &[PacketMeta],
        verdicts: &mut [Verdict],
    ) {
        self.handle_burst_with(&Loads, now, snap, frames, metas, verdicts)
    }

    /// [`Worker::handle_burst`] with the staged lookups' cache lines warmed
    /// by `p` (`lbd` passes a `prefetcht0`; [`crate::prefetch`] says why).
    /// The verdicts, frames and counters do not depend on `p`.
    pub fn handle_burst_with<F: AsMut<[u8]>>(
        &mut self,
        p: &impl Prefetch,
        now: Tick,
        snap: &Snapshot,
        frames: &mut [F],
        metas: &[PacketMeta],
        verdicts: &mut [Verdict],
    ) {
        let n = frames.len().min(metas.len()).min(verdicts.len());
        if snap.vlan_tagged() {
            self.handle_tagged_burst(p, now, snap, &mut frames[..n], &metas[..n], &mut verdicts[..n]);
            return;
        }
        if self.conntrack.len() < self.burst_lookup_min_len {
            let each = frames[..n].iter_mut().zip(metas).zip(verdicts.iter_mut());
            for ((frame, meta), v) in each {
                self.handle_one(now, snap, frame.as_mut(), meta, v);
            }
            return;
        }
        self.staged::<_, 0>(p, now, snap, &mut frames[..n], &metas[..n], &mut verdicts[..n]);
    }

    /// [`Worker::handle_burst_with`] on tagged ports (the three slices of
    /// the same length): as untagged ones, staged ([`Worker::burst_chunk`]
    /// with `TAG` [`fast::VLAN_TAG`]) or frame by frame
    /// (`handle_tagged`). Out of line, so that the untagged burst is laid
    /// out as without it.
    #[cold]
    #[inline(never)]
    fn handle_tagged_burst<F: AsMut<[u8]>>(
        &mut self,
        p: &impl Prefetch,
        now: Tick,
        snap: &Snapshot,
        frames: &mut [F],
        metas: &[PacketMeta],
        verdicts: &mut [Verdict],
    ) {
        if self.conntrack.len() < self.burst_lookup_min_len {
            for ((frame, meta), v) in frames.iter_mut().zip(metas).zip(verdicts.iter_mut()) {
                *v = self.handle_tagged(now, snap, frame.as_mut(), meta, true);
            }
            return;
        }
        self.staged::<_, { fast::VLAN_TAG }>(p, now, snap, frames, metas, verdicts);
    }

    /// The three slices (of the same length) in chunks of [`BURST`], each
    /// through [`Worker::burst_chunk`].
    #[inline(always)]
    fn staged<F: AsMut<[u8]>, const TAG: usize>(
        &mut self,
        p: &impl Prefetch,
        now: Tick,
        snap: &Snapshot,
        frames: &mut [F],
        metas: &[PacketMeta],
        verdicts: &mut [Verdict],
    ) {
        let chunks = frames
            .chunks_mut(BURST)
            .zip(metas.chunks(BURST))
            .zip(verdicts.chunks_mut(BURST));
        for ((frames, metas), verdicts) in chunks {
            self.burst_chunk::<_, TAG>(p, now, snap, frames, metas, verdicts);
        }
    }

    /// At most [`BURST`] frames; all three slices have the same length.
    /// `TAG`: 0 on an untagged node; [`fast::VLAN_TAG`] on a tagged one,
    /// where a frame without its port's VLAN id is dropped first
    /// (`vlan_mismatch`, as `handle_tagged` does) and the fast path reads
    /// tagged frames.
    #[inline(always)]
    fn burst_chunk<F: AsMut<[u8]>, const TAG: usize>(
        &mut self,
        p: &impl Prefetch,
        now: Tick,
        snap: &Snapshot,
        frames: &mut [F],
        metas: &[PacketMeta],
        verdicts: &mut [Verdict],
    ) {
        // Stage 1: parse everything, collect the 5-tuples.
        // Results stored as returned (no move out of the `Result`: a
        // `Parsed` move costs ~50 instructions); the filler is never read.
        let mut parsed: [Result<Parsed, DropReason>; BURST] = [Err(DropReason::Truncated); BURST];
        // Frames the IPv4 or IPv6 fast path can read are not parsed here
        // (see below).
        let mut fast: [Option<FastV4>; BURST] = [None; BURST];
        // Bit i: frame i was read by the IPv6 fast path, whose 5-tuple is
        // its key in `keys` and the rest of its read (TCP flags, IP end) in
        // `rest6[i]`: an array of `FastV6`s cost every IPv4 packet at 1M 8
        // instructions.
        let mut six = 0u32;
        let mut rest6 = [(0u8, 0u32); BURST];
        // The keys of the frames the fast path read, in the table's form,
        // and those of the parsed ones.
        let mut keys4 = [KeyV4::UNUSED; BURST];
        let mut keys = [NO_KEY; BURST];
        // `key_of[i]`: index of frame i's key in `keys4` if the fast path
        // read it, else in `keys`; BURST for none.
        let mut key_of = [BURST as u8; BURST];
        let (mut n4, mut nk) = (0, 0);
        // Bit i: frame i was read by the fast path and may open a connection
        // (untagged nodes: what stage 2b warms); `opens6` for IPv6 (on
        // every node).
        let mut opens = 0u32;
        let mut opens6 = 0u32;
        for (i, (frame, meta)) in frames.iter_mut().zip(metas).enumerate() {
            if TAG != 0 && !self.has_ports_vlan(snap, frame.as_mut(), meta) {
                verdicts[i] = self.drop(DropReason::VlanMismatch);
                continue;
            }
            if let Some(k) = fast::read_v4_at::<TAG>(frame.as_mut(), meta) {
                // Untagged nodes only: a second caller of the warming took
                // its inlining into the untagged burst (+26 instructions a
                // new flow).
                if TAG == 0 {
                    opens |= u32::from(k.may_open()) << i;
                }
                keys4[n4] = KeyV4::new(k.src, k.dst, k.sport, k.dport, k.proto as u8);
                key_of[i] = n4 as u8;
                n4 += 1;
                fast[i] = Some(k);
                continue;
            }
            if let Some(k) = fast6::read_v6_at::<TAG>(frame.as_mut()) {
                keys[nk] = FlowKey::V6(FlowKeyV6 {
                    src: k.src.into(),
                    dst: k.dst.into(),
                    sport: k.sport,
                    dport: k.dport,
                    proto: k.proto,
                });
                key_of[i] = nk as u8;
                nk += 1;
                six |= 1 << i;
                // Tagged nodes too: the warming is out of line.
                opens6 |= u32::from(k.may_open()) << i;
                rest6[i] = (k.flags, k.end as u32);
                continue;
            }
            parsed[i] = wire::parse_with(frame.as_mut(), &meta.offload);
            match &parsed[i] {
                Ok(p) => {
                    if let Some(k) = own_key(p) {
                        keys[nk] = k;
                        key_of[i] = nk as u8;
                        nk += 1;
                    }
                }
                Err(reason) => verdicts[i] = self.drop(*reason),
            }
        }
        // Stage 2: the conntrack misses of the whole burst, overlapped.
        let mut found4: [Option<(EntryId, Direction)>; BURST] = [None; BURST];
        let mut hashes4 = [KeyHash::default(); BURST];
        self.conntrack
            .lookup_burst_v4(p, &keys4[..n4], &mut found4[..n4], &mut hashes4[..n4]);
        let mut found: [Option<(EntryId, Direction)>; BURST] = [None; BURST];
        let mut hashes = [KeyHash::default(); BURST];
        if nk > 0 {
            self.conntrack
                .lookup_burst_hashed(p, &keys[..nk], &mut found[..nk], &mut hashes[..nk]);
        }
        // Stage 2b: the reply-key index slots of the new connections the
        // fast path will open, loaded together too; what the warming finds
        // (frontend, service, Maglev pick) is kept for stage 3.
        let mut guess = self.snat.alloc_guess();
        let mut n_open = 0;
        let mut picks: [Option<Pick<'_>>; BURST] = [None; BURST];
        while opens != 0 {
            let i = opens.trailing_zeros() as usize;
            opens &= opens - 1;
            if let (Some(k), Some(None)) = (&fast[i], found4.get(usize::from(key_of[i]))) {
                let hash = hashes4[usize::from(key_of[i])];
                // Only a pick opens (and in a full table evicts): a miss
                // to no frontend, or to a service without a backend,
                // warms no victim.
                let picked = self.warm_open_v4(p, snap, k, hash, &mut guess, &mut picks[i]);
                n_open += u32::from(picked);
            }
        }
        // In a full table each of them evicts: the victims' index slots
        // too, and the in-use words of their SNAT ports.
        let snat = &self.snat;
        self.conntrack
            .warm_victims_v4(p, n_open, |a, port, proto| snat.warm_free_v4(p, a, port, proto));
        // The same for the IPv6 ones, in the IPv6 table.
        let mut picks6: [Option<Pick<'_, Ipv6Addr>>; BURST] = [None; BURST];
        if opens6 != 0 {
            self.warm_opens_v6(p, snap, opens6, (&keys, &found, &hashes), &key_of, &mut picks6);
        }
        self.conntrack.mark();
        // Stage 3: each packet in order, with its lookup, done again (from
        // its hash, on a line stage 2 loaded) where it may have changed: a
        // hit after an eviction, a miss if its key may have been inserted.
        for (i, (frame, meta)) in frames.iter_mut().zip(metas).enumerate() {
            let k = usize::from(key_of[i]);
            let frame = frame.as_mut();
            if let Some(fk) = &fast[i] {
                // Every frame the fast path read has a key (k < n4).
                let f = found4[k];
                let again = match f {
                    Some(_) => self.conntrack.discarded_since_mark_v4(),
                    None => self.conntrack.maybe_inserted_since_mark_v4(hashes4[k]),
                };
                let hint = if again {
                    self.conntrack.lookup_hashed_v4(&keys4[k], hashes4[k])
                } else {
                    f
                };
                if let Some(v) =
                    self.fast_v4_read::<TAG>(now, snap, frame, meta, fk, Some(hint), picks[i].as_ref())
                {
                    verdicts[i] = v;
                    continue;
                }
                // Declined, nothing written: the general path, parsed now
                // (the parse accepts every frame `read_v4` accepts).
                verdicts[i] = match &wire::parse_with(frame, &meta.offload) {
                    Ok(p) => self.dispatch(now, snap, frame, p, meta, Some(hint)),
                    Err(reason) => self.drop(*reason),
                };
                continue;
            }
            let hint = match found.get(k) {
                Some(&f)
                    if match f {
                        Some(_) => self.conntrack.discarded_since_mark(),
                        None => self.conntrack.maybe_inserted_since_mark(&keys[k], hashes[k]),
                    } =>
                {
                    Some(self.conntrack.lookup_hashed(&keys[k], hashes[k]))
                }
                Some(&f) => Some(f),
                None => None,
            };
            if let (true, Some(FlowKey::V6(key))) = (six & 1 << i != 0, keys.get(k)) {
                let (flags, end) = rest6[i];
                let k = FastV6 {
                    src: key.src.octets(),
                    dst: key.dst.octets(),
                    sport: key.sport,
                    dport: key.dport,
                    proto: key.proto,
                    flags,
                    end: end as usize,
                };
                // The IPv6 fast path with its lookup (its tagged
                // instantiation on a tagged node); if it declines, the
                // general path, parsed now, as for IPv4.
                if let Some(v) =
                    self.fast_v6_read::<TAG>(now, snap, frame, meta, &k, hint, picks6[i].as_ref())
                {
                    verdicts[i] = v;
                    continue;
                }
                verdicts[i] = match &wire::parse_with(frame, &meta.offload) {
                    Ok(p) => self.dispatch(now, snap, frame, p, meta, hint),
                    Err(reason) => self.drop(*reason),
                };
                continue;
            }
            let Ok(p) = &parsed[i] else { continue };
            verdicts[i] = self.dispatch(now, snap, frame, p, meta, hint);
        }
    }

    /// Stage 2b for the IPv6 frames of a burst: each frame `i` of `opens`
    /// (read by the IPv6 fast path, may open) whose key `keys[key_of[i]]`
    /// missed is warmed as a new connection ([`Worker::warm_open_v6`], its
    /// pick left in `picks[i]`), and in a full table the victims its
    /// insert will evict. Out of line: bursts without IPv6 openings do not
    /// carry it.
    #[inline(never)]
    fn warm_opens_v6<'s>(
        &self,
        p: &impl Prefetch,
        snap: &'s Snapshot,
        mut opens: u32,
        looked_up: LookedUp<'_>,
        key_of: &[u8; BURST],
        picks: &mut [Option<Pick<'s, Ipv6Addr>>; BURST],
    ) {
        let (keys, found, hashes) = looked_up;
        let mut guess = self.snat.alloc_guess_v6();
        let mut n_open = 0;
        while opens != 0 {
            let i = opens.trailing_zeros() as usize;
            opens &= opens - 1;
            let k = usize::from(key_of[i]);
            if let (Some(FlowKey::V6(key)), Some(None), Some(&hash)) =
                (keys.get(k), found.get(k), hashes.get(k))
            {
                let picked = self.warm_open_v6(p, snap, key, hash, &mut guess, &mut picks[i]);
                n_open += u32::from(picked);
            }
        }
        let snat = &self.snat;
        self.conntrack
            .warm_victims_v6(p, n_open, |a, port, proto| snat.warm_free_v6(p, a, port, proto));
    }
}

#[cfg(test)]
#[path = "burst_tests.rs"]
pub(super) mod tests;
