//! One address family's storage: a slab of entries, an open-addressing
//! index holding their keys, and the cells of [`ReplyPorts`] holding the
//! reply keys routed there (full-NAT replies: see that module).
//!
//! Invariants:
//! - the slab, the index and the cells are allocated once, in
//!   [`Table::new`], and never resized; the index has at least
//!   `INDEX_SLOTS_PER_ENTRY * capacity` slots, in buckets of [`BUCKET`]
//!   (one cache line; at least one bucket), so at full occupancy it is at
//!   most half full and every probe sequence ends at a bucket with room;
//! - every in-use slab slot has its original key in the index, and its
//!   reply key in the cell that key is routed to if it is routed to one,
//!   in the index otherwise; the index and the cells hold nothing else,
//!   and `routed_originals` counts the in-use slots whose original key is
//!   routed to a cell;
//! - linear probing by bucket: a key goes into the first bucket from its
//!   home (chosen by its hash) that has room, each bucket keeps its
//!   occupied slots first, and a key sits past its home bucket only if
//!   every bucket from its home to its own is full. So a lookup reads the
//!   home bucket's line and goes on only past a full one (the next line
//!   is needed a few times in a hundred at full occupancy, where probing
//!   slot by slot from a random home crossed into it 16% of the time);
//! - deletion moves back a key that had gone on past the bucket it frees
//!   room in (and so on): no tombstones, so probe lengths never degrade
//!   over a long-running table's churn;
//! - free slab slots are chained through `tags[0]`, so the free list costs
//!   no memory of its own.

mod bucket;
mod key;

use core::mem::size_of;

use super::reply_ports::{ReplyPorts, NO_CELL};
use super::Direction;
use crate::flow::{fast_range, Proto};
use crate::nat::NatDelta;
use crate::prefetch::Prefetch;

pub(crate) use bucket::IdxSlot;
use bucket::{Bucket, BUCKET, EMPTY_BUCKET};
pub(crate) use key::{Addr, RawKey};

/// Index slots per slab entry: two directions at a maximum load of 0.5.
pub(crate) const INDEX_SLOTS_PER_ENTRY: usize = 4;

/// A free-list or index "nothing here" value.
const NONE: u32 = u32::MAX;

/// The [`Table::pick_victim`] key of a slot that must not be evicted.
pub(crate) const NEVER_EVICT: u64 = u64::MAX;

/// Slab flags.
pub(crate) const IN_USE: u8 = 1;
pub(crate) const FULL_NAT: u8 = 2;
pub(crate) const FIN_BY_REPLY: u8 = 4;
/// Set by [`Table::insert`]: the original key is routed to a cell (and
/// counted in `routed_originals`).
const ORIGINAL_ROUTED: u8 = 8;
/// Set by [`Table::insert`]: the reply key is in its cell, not the index.
const REPLY_IN_CELL: u8 = 16;

/// What the worker's fast paths computed for an entry from one snapshot
/// (`worker/fast.rs`, `worker/fast6.rs`): for each direction, the index of
/// the resolved next hop ([`Snapshot::next_hop_index_v4`], or `_v6` in an
/// IPv6 entry) that its packets go to, cached only after every owner and frontend check of that direction
/// passed, so a cached direction needs neither again. Valid only while the
/// worker's snapshot has [`Snapshot::epoch`] `epoch` (never for epoch 0):
/// a snapshot with another epoch may answer differently.
///
/// [`Snapshot::next_hop_index_v4`]: crate::snapshot::Snapshot::next_hop_index_v4
/// [`Snapshot::epoch`]: crate::snapshot::Snapshot::epoch
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct HopCache {
    /// The snapshot epoch both `hops` were computed for; 0 for none.
    pub epoch: u64,
    /// Per direction (original, reply): the hop index, or `NONE`.
    pub hops: [u32; 2],
}

impl HopCache {
    /// Nothing cached: what a new (and a freed) entry holds.
    pub const UNCACHED: HopCache = HopCache {
        epoch: 0,
        hops: [NONE; 2],
    };

    /// The cached hop of `dir` if it was computed for `epoch` (non-zero).
    #[inline(always)]
    pub fn get(&self, dir: Direction, epoch: u64) -> Option<u32> {
        let hop = self.hops[dir_bit(dir) as usize];
        (self.epoch == epoch && epoch != 0 && hop != NONE).then_some(hop)
    }

    /// Caches `hop` for `dir` under `epoch`. A cache of another epoch is
    /// dropped first (the other direction becomes uncached), so a direction
    /// never validates with a hop from an older snapshot.
    #[inline]
    pub fn set(&mut self, dir: Direction, epoch: u64, hop: u32) {
        if self.epoch != epoch {
            *self = HopCache {
                epoch,
                hops: [NONE; 2],
            };
        }
        self.hops[dir_bit(dir) as usize] = hop;
    }
}

impl Default for HopCache {
    fn default() -> HopCache {
        HopCache::UNCACHED
    }
}

/// One connection: 64 bytes, exactly one cache line, for IPv4; 128 (two
/// lines) for IPv6 (asserted in tests).
///
/// `repr(C)` fixes the order: what the original-direction compare reads
/// comes first, `expires`, `tags` and the flow cache last. The 64-byte
/// alignment keeps an IPv4 entry in one line (at 48 bytes, half the entries
/// straddled two, a second miss at a million connections), so the burst
/// lookup warms it with one load.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
pub(crate) struct Slot<A> {
    pub client: A,
    pub vip: A,
    pub client_port: u16,
    pub vip_port: u16,
    pub proto: u8,
    /// A [`crate::conntrack::ConnState`] discriminant.
    pub state: u8,
    /// `IN_USE | FULL_NAT | FIN_BY_REPLY | ORIGINAL_ROUTED | REPLY_IN_CELL`.
    pub flags: u8,
    pub backend: A,
    /// Unused (zero) for DNAT.
    pub snat: A,
    pub backend_port: u16,
    pub snat_port: u16,
    /// The checksum change of the original direction's translation
    /// ([`NatDelta::reversed`] for the reply's), valid once a direction's
    /// next hop is cached (stored with it); in what was padding before
    /// `expires`.
    pub delta: NatDelta,
    /// Expiry in milliseconds (a [`crate::Tick`]).
    pub expires: u64,
    /// The caller's opaque tags; `tags[0]` is the next free slot when free.
    pub tags: [u32; 2],
    /// [`HopCache::UNCACHED`] in a new entry.
    pub cache: HopCache,
}

impl<A: Addr> Slot<A> {
    #[inline]
    pub fn in_use(&self) -> bool {
        self.flags & IN_USE != 0
    }

    /// The protocol (a slot only ever stores a [`Proto`]'s number; TCP
    /// for a byte that is none).
    #[inline]
    pub fn proto(&self) -> Proto {
        Proto::from_u8(self.proto).unwrap_or(Proto::Tcp)
    }

    #[inline]
    pub fn original_key(&self) -> RawKey<A> {
        RawKey {
            src: self.client,
            dst: self.vip,
            sport: self.client_port,
            dport: self.vip_port,
            proto: self.proto,
        }
    }

    /// What the backend sends back: to the client (DNAT) or to the SNAT
    /// endpoint (full-NAT).
    #[inline]
    pub fn reply_key(&self) -> RawKey<A> {
        let (dst, dport) = if self.flags & FULL_NAT != 0 {
            (self.snat, self.snat_port)
        } else {
            (self.client, self.client_port)
        };
        RawKey {
            src: self.backend,
            dst,
            sport: self.backend_port,
            dport,
            proto: self.proto,
        }
    }

    #[inline]
    fn key(&self, dir: Direction) -> RawKey<A> {
        match dir {
            Direction::Original => self.original_key(),
            Direction::Reply => self.reply_key(),
        }
    }
}

/// Where a key is looked for: the [`ReplyPorts`] cell it is routed to
/// ([`NO_CELL`] for none), and a hash. For a key not routed to a cell,
/// its index hash; for a routed one, a stand-in made from the cell
/// ([`cell_hash`]), which serves the insert filter ([`Table::mark`]) as
/// well. A routed key's index hash is needed only while an original key
/// is routed too, and is computed there ([`Table::index_hash`]), which
/// saves a reply ~10 instructions. Depends only on the key and the
/// table's construction, so it stays valid whatever is inserted or
/// removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Loc {
    pub hash: u32,
    pub cell: u32,
}

/// The [`Loc::hash`] of a key routed to `cell`: spread over the top bits,
/// which the insert filter reads.
#[inline(always)]
fn cell_hash(cell: u32) -> u32 {
    cell.wrapping_mul(0x9E37_79B9)
}

impl Default for Loc {
    fn default() -> Loc {
        Loc {
            hash: 0,
            cell: NO_CELL,
        }
    }
}

/// The slab index and direction an index value names.
#[inline(always)]
fn decode(val: u32) -> (u32, Direction) {
    let dir = if val & 1 == 0 {
        Direction::Original
    } else {
        Direction::Reply
    };
    (val >> 1, dir)
}

#[inline]
fn dir_bit(dir: Direction) -> u32 {
    match dir {
        Direction::Original => 0,
        Direction::Reply => 1,
    }
}

/// Bytes one connection costs: its slab slot plus its share of the index.
pub(crate) const fn bytes_per_conn<A>() -> usize {
    size_of::<Slot<A>>() + INDEX_SLOTS_PER_ENTRY * size_of::<IdxSlot>()
}

/// The per-family table.
#[derive(Debug)]
pub(crate) struct Table<A> {
    slots: Box<[Slot<A>]>,
    index: Box<[Bucket]>,
    free_head: u32,
    len: u32,
    seeds: [u64; 4],
    /// Where the next eviction search starts (CLOCK hand).
    evict_hand: u32,
    /// Where the next search for a full-NAT entry to give its SNAT pair
    /// back starts ([`Table::pick_snat_victim`]), among the cells of the
    /// protocol's space.
    reclaim_hand: u32,
    /// The hashes indexed since the last [`Table::mark`].
    indexed: Indexed,
    /// Whether a slot was freed since the last [`Table::mark`] (a lookup
    /// that hit before it may name a slot another entry now holds).
    discarded: Discarded,
    /// The reply keys routed to a cell.
    ports: ReplyPorts<A>,
    /// In-use slots whose original key is routed to a cell (kept in the
    /// index): while there are none, a routed key is looked for in its
    /// cell only.
    routed_originals: u32,
}

/// A 1024-bit filter of hashes, one bit a hash (its top ten bits): a
/// hint for the burst path, not part of the table's contents, so two
/// tables holding the same entries print alike whatever it holds. At 256
/// bits, a burst of new connections looked a miss up again for nothing
/// often enough that the branch on it mispredicted 0.13 times a new
/// connection (callgrind's branch simulation; 0.03 at 1024 bits).
#[derive(Clone, Copy, Default)]
struct Indexed([u64; 16]);

impl Indexed {
    #[inline(always)]
    fn bit(hash: u32) -> (usize, u64) {
        ((hash >> 28) as usize, 1 << ((hash >> 22) & 63))
    }

    #[inline(always)]
    fn add(&mut self, hash: u32) {
        let (w, b) = Indexed::bit(hash);
        self.0[w] |= b;
    }

    #[inline(always)]
    fn may_hold(&self, hash: u32) -> bool {
        let (w, b) = Indexed::bit(hash);
        self.0[w] & b != 0
    }
}

/// [`Table::discarded_since_mark`]: like [`Indexed`], a hint for the
/// burst path that two tables holding the same entries need not share.
#[derive(Clone, Copy, Default)]
struct Discarded(bool);

impl core::fmt::Debug for Discarded {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Discarded(..)")
    }
}

impl core::fmt::Debug for Indexed {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Indexed(..)")
    }
}

impl<A: Addr> Table<A> {
    /// Allocates everything (`ports` is allocated already); `capacity`
    /// must be below 2^30.
    pub fn new(capacity: u32, seeds: [u64; 4], ports: ReplyPorts<A>) -> Self {
        let mut slots = vec![Slot::<A>::default(); capacity as usize].into_boxed_slice();
        for (i, s) in slots.iter_mut().enumerate() {
            s.tags[0] = if i + 1 < capacity as usize {
                i as u32 + 1
            } else {
                NONE
            };
        }
        let n_index = (capacity as usize * INDEX_SLOTS_PER_ENTRY)
            .div_ceil(BUCKET)
            .max(1);
        Table {
            slots,
            index: vec![EMPTY_BUCKET; n_index].into_boxed_slice(),
            free_head: if capacity > 0 { 0 } else { NONE },
            len: 0,
            seeds,
            evict_hand: 0,
            reclaim_hand: 0,
            indexed: Indexed::default(),
            discarded: Discarded(false),
            ports,
            routed_originals: 0,
        }
    }

    #[inline]
    pub fn len(&self) -> u32 {
        self.len
    }

    #[inline]
    pub fn capacity(&self) -> u32 {
        self.slots.len() as u32
    }

    #[inline]
    pub fn is_full(&self) -> bool {
        self.free_head == NONE
    }

    /// The in-use slot at `idx`, if any.
    #[inline]
    pub fn get(&self, idx: u32) -> Option<&Slot<A>> {
        self.slots.get(idx as usize).filter(|s| s.in_use())
    }

    /// The in-use slot at `idx`, if any.
    #[inline]
    pub fn get_mut(&mut self, idx: u32) -> Option<&mut Slot<A>> {
        self.slots.get_mut(idx as usize).filter(|s| s.in_use())
    }

    #[inline]
    pub fn hash(&self, k: &RawKey<A>) -> u32 {
        A::hash_key(k, &self.seeds)
    }

    /// Where `k` is looked for.
    #[inline(always)]
    pub fn locate(&self, k: &RawKey<A>) -> Loc {
        let cell = self.ports.cell(k);
        Loc {
            hash: if cell == NO_CELL {
                self.hash(k)
            } else {
                cell_hash(cell)
            },
            cell,
        }
    }

    /// The index hash of `k` at `loc`.
    #[inline(always)]
    fn index_hash(&self, k: &RawKey<A>, loc: Loc) -> u32 {
        if loc.cell == NO_CELL {
            loc.hash
        } else {
            self.hash(k)
        }
    }

    /// True if a key at `loc` may be in the index: it is not routed to a
    /// cell, or some original key routed to one is indexed.
    #[inline(always)]
    fn maybe_indexed(&self, loc: Loc) -> bool {
        loc.cell == NO_CELL || self.routed_originals != 0
    }

    #[inline]
    fn home(&self, hash: u32) -> usize {
        fast_range(hash, self.index.len() as u32) as usize
    }

    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.index.len() {
            0
        } else {
            i + 1
        }
    }

    /// Burst stage 2: the value (`slab index << 1 | direction`) of the
    /// entry a key at `loc` most likely names: its cell's, if it is routed
    /// to one, else that of the first slot of its home bucket with its
    /// hash; else `NONE`. Branch-free on the loaded values, so the loads
    /// of a whole burst are in flight together instead of serializing
    /// behind mispredicted branches. [`Table::find_peeked`] starts from
    /// it.
    #[inline]
    pub fn peek(&self, loc: Loc) -> u32 {
        if loc.cell != NO_CELL {
            // NONE stays NONE.
            return (self.ports.peek(loc.cell) << 1) | 1;
        }
        self.index[self.home(loc.hash)].first_with_masked(loc.hash)
    }

    /// Burst stage 1: warms the line [`Table::peek`] reads for `loc`.
    #[inline(always)]
    pub fn prefetch_home(&self, p: &impl Prefetch, loc: Loc) {
        if loc.cell != NO_CELL {
            self.ports.prefetch(p, loc.cell);
        } else {
            p.prefetch(&self.index[self.home(loc.hash)]);
        }
    }

    /// Warms what looking the key `k` at `loc` up in vain and inserting
    /// it as a reply key reads: its cell, if it is routed to one, and the
    /// probe run of its hash if it may be in the index
    /// ([`Table::prefetch_run`]).
    #[inline(always)]
    pub fn prefetch_key(&self, p: &impl Prefetch, k: &RawKey<A>, loc: Loc) {
        if loc.cell != NO_CELL {
            self.ports.prefetch(p, loc.cell);
        }
        if self.maybe_indexed(loc) {
            self.prefetch_run(p, self.index_hash(k, loc));
        }
    }

    /// Warms the index line a walk of the probe run at `hash`'s home reads:
    /// its home bucket. A walk goes on into the next bucket only when the
    /// home bucket is full.
    #[inline(always)]
    fn prefetch_run(&self, p: &impl Prefetch, hash: u32) {
        p.prefetch(&self.index[self.home(hash)]);
    }

    /// Burst stage 2: warms the slot `val` names (an IPv4 slot is one cache
    /// line; for an IPv6 slot, both of its lines). Any `val` is accepted.
    #[inline(always)]
    pub fn prefetch_slot(&self, p: &impl Prefetch, val: u32) {
        let Some(last) = self.slots.len().checked_sub(1) else {
            return;
        };
        let s = &self.slots[((val >> 1) as usize).min(last)];
        p.prefetch(s);
        if size_of::<Slot<A>>() > 64 {
            // `tags` sits in the second line of a 128-byte slot.
            p.prefetch(&s.tags);
        }
    }

    /// Finds the entry holding `k` (at `loc`) in either direction. Always
    /// inlined: on the per-packet path the call itself cost ~25
    /// instructions.
    #[inline(always)]
    pub fn find(&self, k: &RawKey<A>, loc: Loc) -> Option<(u32, Direction)> {
        if loc.cell != NO_CELL {
            if let Some(idx) = self.ports.get(loc.cell) {
                if self.slots[idx as usize].reply_key() == *k {
                    return Some((idx, Direction::Reply));
                }
            }
            if self.routed_originals == 0 {
                return None;
            }
            return self.find_indexed(k, self.hash(k));
        }
        self.find_indexed(k, loc.hash)
    }

    /// [`Table::find`] given what [`Table::peek`] answered for `loc` with
    /// the table as it is now (not changed since).
    #[inline(always)]
    pub fn find_peeked(&self, k: &RawKey<A>, loc: Loc, peeked: u32) -> Option<(u32, Direction)> {
        if loc.cell != NO_CELL {
            return self.find(k, loc);
        }
        if peeked != NONE {
            if let Some(hit) = self.holds(peeked, k) {
                return Some(hit);
            }
        } else if !self.index[self.home(loc.hash)].is_full() {
            // No slot of the home bucket has the hash, and nothing went on
            // past it.
            return None;
        }
        self.find_indexed(k, loc.hash)
    }

    /// [`Table::find`] in the index only.
    #[inline(always)]
    fn find_indexed(&self, k: &RawKey<A>, hash: u32) -> Option<(u32, Direction)> {
        let mut b = self.home(hash);
        loop {
            let bucket = &self.index[b];
            let val = bucket.first_with(hash);
            if val != NONE {
                if let Some(hit) = self.holds(val, k) {
                    return Some(hit);
                }
                // Another key with the same hash came first (rare): all.
                let mut same = bucket.with_hash(hash) & ((1 << bucket.len()) - 1);
                while same != 0 {
                    let i = same.trailing_zeros() as usize;
                    if let Some(hit) = self.holds(bucket.val[i], k) {
                        return Some(hit);
                    }
                    same &= same - 1;
                }
            }
            if !bucket.is_full() {
                return None;
            }
            b = self.next(b);
        }
    }

    /// The entry and direction the index value `val` names, if its key in
    /// that direction is `k`.
    #[inline(always)]
    fn holds(&self, val: u32, k: &RawKey<A>) -> Option<(u32, Direction)> {
        let (idx, dir) = decode(val);
        (self.slots[idx as usize].key(dir) == *k).then_some((idx, dir))
    }

    /// Always inlined: f726446 (code elsewhere, in the SNAT reclaim) made
    /// LLVM call it out of `fast_open_v4`, +12 instructions a new flow.
    #[inline(always)]
    fn index_insert(&mut self, hash: u32, val: u32) {
        let mut b = self.home(hash);
        // The index is at most half full, so a bucket with room exists.
        loop {
            let len = self.index[b].len();
            if len < BUCKET {
                self.index[b].put(len, IdxSlot { hash, val });
                return;
            }
            b = self.next(b);
        }
    }

    /// Removes the index slot holding exactly `val`, then moves back keys
    /// that had overflowed past its bucket, so no tombstone is left.
    fn index_remove(&mut self, hash: u32, val: u32) {
        let n = self.index.len();
        let mut hole = self.home(hash);
        let at = loop {
            let i = self.index[hole].position_of(val);
            if i < BUCKET {
                break i;
            }
            // A bucket with room ends every run: the entry is missing. An
            // invariant broken somewhere must not hang the packet path in
            // a release build.
            if self.index[hole].len() < BUCKET {
                debug_assert!(false, "index entry missing");
                return;
            }
            hole = self.next(hole);
        };
        let len = self.index[hole].len();
        self.index[hole].take(at, len);
        if len < BUCKET {
            // Nothing overflowed past a bucket that had room.
            return;
        }
        // The bucket was full: the nearest key after it that overflowed
        // from it or from before it moves into its free slot, and so on
        // from the bucket that key left, until a bucket that had room.
        let dist = |from: usize, to: usize| if to >= from { to - from } else { to + n - from };
        let mut j = self.next(hole);
        loop {
            let len = self.index[j].len();
            let d = dist(hole, j);
            let back = self.index[j].hash[..len]
                .iter()
                .position(|&h| dist(self.home(h), j) >= d);
            if let Some(i) = back {
                let s = self.index[j].take(i, len);
                self.index[hole].put(BUCKET - 1, s);
                hole = j;
            }
            if len < BUCKET {
                return;
            }
            j = self.next(j);
        }
    }

    /// True if the reply key `k` (at `loc`) of a new entry cannot be
    /// stored: it is present, in either direction, or it is routed to a
    /// cell that is taken (by a reply key equal to it or not). Which
    /// entries are in the way: [`Table::reply_conflicting`].
    #[inline(always)]
    pub fn reply_conflicts(&self, k: &RawKey<A>, loc: Loc) -> bool {
        if loc.cell != NO_CELL {
            if self.ports.get(loc.cell).is_some() {
                return true;
            }
            return self.routed_originals != 0 && self.find_indexed(k, self.hash(k)).is_some();
        }
        self.find_indexed(k, loc.hash).is_some()
    }

    /// The entries that keep the reply key `k` (at `loc`) of a new entry
    /// from being stored ([`Table::reply_conflicts`]), by slab index: the
    /// one in the cell `k` is routed to (its reply key equal to `k` or
    /// not), and one holding `k` in the index, in either direction (at
    /// most one). `[None, None]`: `k` can be stored. Off the fast path:
    /// only after a refused insert.
    pub fn reply_conflicting(&self, k: &RawKey<A>, loc: Loc) -> [Option<u32>; 2] {
        if loc.cell != NO_CELL {
            let cell = self.ports.get(loc.cell);
            let indexed = if self.routed_originals == 0 {
                None
            } else {
                self.find_indexed(k, self.hash(k)).map(|(idx, _)| idx)
            };
            return [cell, indexed.filter(|&i| Some(i) != cell)];
        }
        [self.find_indexed(k, loc.hash).map(|(idx, _)| idx), None]
    }

    /// Stores `slot` (flag `IN_USE` set by this call) in a free slab slot
    /// and indexes both keys (at `orig` and `reply`), the reply key in its
    /// cell if it is routed to one. The caller has checked that neither
    /// key is present, that the reply key's cell is free
    /// ([`Table::reply_conflicts`]) and that the two keys differ.
    #[inline(always)]
    pub fn insert(&mut self, mut slot: Slot<A>, orig: Loc, reply: Loc) -> Option<u32> {
        let idx = self.free_head;
        if idx == NONE {
            return None;
        }
        self.free_head = self.slots[idx as usize].tags[0];
        slot.flags |= IN_USE;
        if orig.cell != NO_CELL {
            slot.flags |= ORIGINAL_ROUTED;
            self.routed_originals += 1;
        }
        let h_orig = self.index_hash(&slot.original_key(), orig);
        if reply.cell != NO_CELL {
            slot.flags |= REPLY_IN_CELL;
            self.ports.set(reply.cell, idx);
        } else {
            self.index_insert(reply.hash, (idx << 1) | 1);
        }
        self.slots[idx as usize] = slot;
        self.index_insert(h_orig, idx << 1);
        self.indexed.add(orig.hash);
        self.indexed.add(reply.hash);
        self.len += 1;
        Some(idx)
    }

    /// Starts over the record of the hashes [`Table::insert`] indexes.
    #[inline]
    pub fn mark(&mut self) {
        self.indexed = Indexed::default();
        self.discarded = Discarded(false);
    }

    /// Whether a slot was freed (an eviction, a removal) since the last
    /// [`Table::mark`].
    #[inline(always)]
    pub fn discarded_since_mark(&self) -> bool {
        self.discarded.0
    }

    /// False only if no key with hash `hash` was indexed since the last
    /// [`Table::mark`] (true for some that were not: a filter).
    #[inline(always)]
    pub fn maybe_indexed_since_mark(&self, hash: u32) -> bool {
        self.indexed.may_hold(hash)
    }

    /// Removes an in-use slot, returning a copy of it.
    pub fn remove(&mut self, idx: u32) -> Option<Slot<A>> {
        let slot = *self.get(idx)?;
        self.discard(idx);
        Some(slot)
    }

    /// [`Table::remove`] without the copy (two slot-sized moves on the
    /// expiry path, where the caller has read what it needs); false if
    /// `idx` is not in use.
    pub fn discard(&mut self, idx: u32) -> bool {
        let Some(s) = self.get(idx) else {
            return false;
        };
        let (orig, reply, flags) = (s.original_key(), s.reply_key(), s.flags);
        let ho = self.hash(&orig);
        self.routed_originals -= u32::from(flags & ORIGINAL_ROUTED != 0);
        self.index_remove(ho, (idx << 1) | dir_bit(Direction::Original));
        if flags & REPLY_IN_CELL != 0 {
            self.ports.clear(self.ports.cell(&reply), idx);
        } else {
            let hr = self.hash(&reply);
            self.index_remove(hr, (idx << 1) | dir_bit(Direction::Reply));
        }
        let s = &mut self.slots[idx as usize];
        *s = Slot::default();
        s.tags[0] = self.free_head;
        self.free_head = idx;
        self.len -= 1;
        self.discarded = Discarded(true);
        true
    }

    /// Examines up to `window` slab slots from the CLOCK hand and returns
    /// the first in-use one whose `key` is below `take_at_once`, or else the
    /// one with the smallest `key` (the first of equals), where
    /// [`NEVER_EVICT`] means "never evict"; the caller packs its ranking
    /// into the key (class in the top bits, expiry below: see
    /// `conntrack::evict_key`). The hand then moves to just past the
    /// victim, or past the whole window when it holds none, so a table of
    /// unevictable entries is not rescanned from the same place.
    ///
    /// A `u64` minimum rather than a generic ranking: under a SYN flood
    /// every insert evicts, and comparing `(rank, expiry)` tuples through
    /// `Option`s cost ~40 instructions a slot, ~1,300 an eviction. The
    /// early stop makes a flood's eviction one slot (~20 instructions)
    /// instead of the window's ~660 (the slot at the hand is embryonic).
    ///
    /// Never inlined: where LLVM inlined it into the new-connection fast
    /// path (`fast_open_v4`, after unrelated changes elsewhere), that path
    /// spilled more and took ~19 more instructions a new flow with a table
    /// not full (bench/RESULTS.md).
    #[inline(never)]
    pub fn pick_victim(
        &mut self,
        window: u32,
        take_at_once: u64,
        key: impl Fn(&Slot<A>) -> u64,
    ) -> Option<u32> {
        let cap = self.capacity();
        if cap == 0 {
            return None;
        }
        let start = self.evict_hand;
        // `start < cap <= 2^30` and `window.min(cap) <= cap`: no overflow.
        let end = start + window.min(cap);
        let mut best = (NEVER_EVICT, NONE);
        // The window, then its part wrapped past the end of the slab.
        let runs = [(start, end.min(cap)), (0, end.saturating_sub(cap))];
        'scan: for (from, to) in runs {
            for (j, s) in self.slots[from as usize..to as usize].iter().enumerate() {
                let k = if s.in_use() { key(s) } else { NEVER_EVICT };
                if k < best.0 {
                    best = (k, from + j as u32);
                    if k < take_at_once {
                        break 'scan;
                    }
                }
            }
        }
        if best.0 == NEVER_EVICT {
            self.evict_hand = if end >= cap { end - cap } else { end };
            return None;
        }
        // On from just past the victim: the next window shares the rest of
        // this one (still cached) and adds one slot, where moving past the
        // whole window read `window` fresh slots per eviction, ~2 KiB a SYN
        // under a flood.
        self.evict_hand = if best.1 + 1 == cap { 0 } else { best.1 + 1 };
        Some(best.1)
    }

    /// [`Table::pick_victim`] among the full-NAT entries whose SNAT pairs
    /// are of protocol number `proto` and ports in `ports` (all of them in
    /// use: the worker's pool is exhausted), read through their reply
    /// cells: `window` of
    /// them from the reclaim hand, which then moves past the last one
    /// read. The first whose `key` is below `take_at_once`, else the
    /// smallest below [`NEVER_EVICT`].
    pub fn pick_snat_victim(
        &mut self,
        proto: u8,
        ports: &core::ops::RangeInclusive<u16>,
        window: u32,
        take_at_once: u64,
        key: impl Fn(&Slot<A>) -> u64,
    ) -> Option<u32> {
        let n = self.ports.space_cells(proto, ports);
        if n == 0 {
            return None;
        }
        let mut best = (NEVER_EVICT, NONE);
        let mut c = self.reclaim_hand % n;
        for _ in 0..window.min(n) {
            let cell = self.ports.space_cell(proto, ports, c);
            c = if c + 1 == n { 0 } else { c + 1 };
            let Some(s) = self.ports.get(cell).and_then(|idx| Some((idx, self.get(idx)?))) else {
                continue;
            };
            if s.1.flags & FULL_NAT == 0 {
                continue;
            }
            let k = key(s.1);
            if k < best.0 {
                best = (k, s.0);
                if k < take_at_once {
                    break;
                }
            }
        }
        self.reclaim_hand = c;
        (best.0 != NEVER_EVICT).then_some(best.1)
    }

    /// Burst warming: when the table is full, warms the probe runs
    /// ([`Table::prefetch_run`]) of both keys (the reply key's cell
    /// instead, if it is routed to one) of the `n` in-use slots from
    /// the CLOCK hand, the next victims of a SYN flood (every insert evicts
    /// the first embryonic entry from the hand and the hand moves just past
    /// it). The slots themselves are read (their keys give the hashes),
    /// and each is passed to `each` (for what else its eviction will touch).
    /// Reads only.
    pub fn warm_victims(&self, p: &impl Prefetch, n: u32, mut each: impl FnMut(&Slot<A>)) {
        let cap = self.capacity();
        if !self.is_full() || cap == 0 {
            return;
        }
        let mut i = self.evict_hand;
        for _ in 0..n.min(cap) {
            let s = &self.slots[i as usize];
            if s.in_use() {
                self.prefetch_run(p, self.hash(&s.original_key()));
                let reply = s.reply_key();
                if s.flags & REPLY_IN_CELL != 0 {
                    self.ports.prefetch(p, self.ports.cell(&reply));
                } else {
                    self.prefetch_run(p, self.hash(&reply));
                }
                each(s);
            }
            i = if i + 1 == cap { 0 } else { i + 1 };
        }
    }

    /// Checks every invariant in the module docs; for tests.
    #[cfg(test)]
    pub fn check(&self) {
        let mut seen = 0;
        for (b, bucket) in self.index.iter().enumerate() {
            let len = bucket.len();
            assert!(
                (len..BUCKET).all(|i| bucket.val[i] == NONE && bucket.hash[i] == 0),
                "a bucket's occupied slots are not a prefix"
            );
            for s in bucket.occupied() {
                assert_ne!(s.val, NONE);
                self.check_indexed(b, &s);
            }
            seen += len;
        }
        let mut in_cells = 0;
        for (cell, idx) in self.ports.occupied() {
            in_cells += 1;
            let slot = self.get(idx).expect("a cell names a free slot");
            let key = slot.reply_key();
            assert_eq!(self.ports.cell(&key), cell, "a reply key in another cell");
            assert_ne!(slot.flags & REPLY_IN_CELL, 0);
            assert_eq!(self.find(&key, self.locate(&key)), Some((idx, Direction::Reply)));
        }
        let in_use = self.slots.iter().filter(|s| s.in_use()).count();
        assert_eq!(in_use as u32, self.len);
        assert_eq!(seen + in_cells, 2 * in_use);
        let routed = self
            .slots
            .iter()
            .filter(|s| s.in_use() && self.ports.cell(&s.original_key()) != NO_CELL);
        assert_eq!(routed.count() as u32, self.routed_originals);
        for s in self.slots.iter().filter(|s| s.in_use()) {
            let routed = self.ports.cell(&s.original_key()) != NO_CELL;
            assert_eq!(s.flags & ORIGINAL_ROUTED != 0, routed);
        }
        let mut free = 0;
        let mut f = self.free_head;
        while f != NONE {
            assert!(!self.slots[f as usize].in_use());
            free += 1;
            f = self.slots[f as usize].tags[0];
        }
        assert_eq!(free + in_use, self.slots.len());
    }

    /// Checks the index slot `s`, in bucket `b`; for [`Table::check`].
    #[cfg(test)]
    fn check_indexed(&self, b: usize, s: &IdxSlot) {
        let (idx, dir) = decode(s.val);
        let slot = self.get(idx).expect("index points at a free slot");
        let key = slot.key(dir);
        assert_eq!(s.hash, self.hash(&key));
        if dir == Direction::Reply {
            assert_eq!(self.ports.cell(&key), NO_CELL, "a routed reply key indexed");
            assert_eq!(slot.flags & REPLY_IN_CELL, 0);
        }
        // Reachable: every bucket from its home to here is full.
        let mut j = self.home(s.hash);
        while j != b {
            assert_eq!(self.index[j].len(), BUCKET, "probe run broken");
            j = self.next(j);
        }
        assert_eq!(self.find(&key, self.locate(&key)), Some((idx, dir)));
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
