//! The conntrack index's bucket: one cache line of eight index slots,
//! the unit the index is probed by (see the parent module's invariants).

use super::NONE;

/// An index slot: the key's 32-bit hash (also gives its home bucket) and
/// `slab index << 1 | direction`, or `NONE`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdxSlot {
    pub(super) hash: u32,
    pub(super) val: u32,
}

pub(super) const EMPTY: IdxSlot = IdxSlot { hash: 0, val: NONE };

/// Index slots per bucket: eight slots of 8 bytes, one cache line.
pub(super) const BUCKET: usize = 8;

/// One cache line of the index, the unit it probes by: its occupied
/// slots first, empty ones after them. The hashes and the values are kept
/// apart, eight of each, so that a search compares a bucket's eight hashes
/// (or values) with one key at once.
///
/// Where in its bucket a key sits is random, so a loop that stopped at
/// its slot would mispredict its exit (15-20 cycles each time; with such
/// loops a DNAT SYN took 40-50 ns longer than with the slot-by-slot probing
/// before the buckets, bench/RESULTS.md). The searches below therefore
/// have no branch. Those that insertions and removals make ([`Bucket::len`],
/// [`Bucket::position_of`]) compare all eight lanes in two 128-bit vector
/// compares ([`eq_mask`], SSE2, which every x86-64 CPU has) and take the
/// answer from the bit mask, and so does the burst's
/// [`Bucket::first_with_masked`]. [`Bucket::first_with`], whose answer a
/// lookup of one packet loads the entry with, is written as eight selects
/// instead: from the bucket's load to the value, the vector compare, mask
/// and bit scan take ~8 cycles longer, and the 1k established forward path
/// was 4 ns slower with it (bench/RESULTS.md). LLVM lowers those selects
/// to a chain of branches (x86's cmov conversion), which predicts well
/// where keys sit first in their buckets (a sparse table, as below
/// `BURST_LOOKUP_MIN_LEN` live connections) and not in a loaded one: in
/// the burst's stage 2 at 1M connections they cost 0.84 mispredicts a
/// lookup (callgrind's branch simulation), hence the masked form there.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Bucket {
    pub(super) hash: [u32; BUCKET],
    pub(super) val: [u32; BUCKET],
}

pub(super) const EMPTY_BUCKET: Bucket = Bucket {
    hash: [EMPTY.hash; BUCKET],
    val: [EMPTY.val; BUCKET],
};

/// Bit `i` set iff `lanes[i] == x`, from vector compares (`wide`'s safe
/// SIMD types: the crate's lints forbid calling the `core::arch`
/// intrinsics). Compiles to two `pcmpeqd`, two packs and a `pmovmskb` on
/// x86-64: ~10 instructions, where the bisection (`len`) and the
/// conditional-move loop (`position_of`) took 10-30.
#[inline(always)]
fn eq_mask(lanes: &[u32; BUCKET], x: u32) -> u32 {
    wide::u32x8::new(*lanes)
        .simd_eq(wide::u32x8::splat(x))
        .to_bitmask()
}

impl Bucket {
    /// Slot `i`.
    #[inline(always)]
    pub(super) fn slot(&self, i: usize) -> IdxSlot {
        IdxSlot {
            hash: self.hash[i],
            val: self.val[i],
        }
    }

    /// Stores `s` in slot `i`.
    #[inline(always)]
    pub(super) fn put(&mut self, i: usize, s: IdxSlot) {
        self.hash[i] = s.hash;
        self.val[i] = s.val;
    }

    /// The occupied slots, in order.
    #[cfg(test)]
    pub(super) fn occupied(&self) -> impl Iterator<Item = IdxSlot> + '_ {
        (0..self.len()).map(|i| self.slot(i))
    }

    /// How many slots are occupied: where the first empty one is.
    #[inline(always)]
    pub(super) fn len(&self) -> usize {
        (eq_mask(&self.val, NONE) | 1 << BUCKET).trailing_zeros() as usize
    }

    /// True if every slot is occupied: probe runs go on past it.
    #[inline(always)]
    pub(super) fn is_full(&self) -> bool {
        self.val[BUCKET - 1] != NONE
    }

    /// Where the slot holding `val` (not `NONE`) is, or `BUCKET`.
    #[inline(always)]
    pub(super) fn position_of(&self, val: u32) -> usize {
        (eq_mask(&self.val, val) | 1 << BUCKET).trailing_zeros() as usize
    }

    /// The slots with `hash`, as a bit mask.
    #[inline(always)]
    pub(super) fn with_hash(&self, hash: u32) -> u32 {
        eq_mask(&self.hash, hash)
    }

    /// The value of the first slot with `hash`, or `NONE`: an occupied
    /// slot if any occupied slot matches, since those come first (an
    /// empty slot's hash is 0, its value `NONE`). Selects, not
    /// [`eq_mask`], compiled to branches: see [`Bucket`].
    #[inline(always)]
    pub(super) fn first_with(&self, hash: u32) -> u32 {
        let mut val = NONE;
        for i in (0..BUCKET).rev() {
            val = if self.hash[i] == hash { self.val[i] } else { val };
        }
        val
    }

    /// [`Bucket::first_with`] from [`eq_mask`]: the first lane with `hash`
    /// by a bit scan, then its value, with no branch at all
    /// (`select_unpredictable` keeps the last select a conditional move).
    /// For the burst's stage 2 ([`Table::peek`](super::Table::peek)),
    /// whose lookups overlap, so the longer latency costs nothing and a
    /// mispredict would.
    #[inline(always)]
    pub(super) fn first_with_masked(&self, hash: u32) -> u32 {
        let i = (eq_mask(&self.hash, hash) | 1 << BUCKET).trailing_zeros() as usize;
        std::hint::select_unpredictable(i < BUCKET, self.val[i & (BUCKET - 1)], NONE)
    }

    /// Removes slot `at` of the `len` occupied ones, moving the last into
    /// its place.
    #[inline(always)]
    pub(super) fn take(&mut self, at: usize, len: usize) -> IdxSlot {
        let s = self.slot(at);
        self.put(at, self.slot(len - 1));
        self.put(len - 1, EMPTY);
        s
    }
}
