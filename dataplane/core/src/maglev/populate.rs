//! Fills a Maglev ring: the turns of [`MaglevRing::build`](super::MaglevRing::build),
//! with exactly the result of the plain algorithm (`tests.rs` compares the
//! two on random inputs), only faster.
//!
//! Turns come in rounds of the weighted credit scheme ([`turns`]). A turn
//! probes its backend's permutation until a free slot; with `E` empty slots
//! that takes `M / E` probes on average, so the work moves from bookkeeping
//! to probing as the ring fills, and each phase is shaped for its share. The
//! enemy is the branch that ends a turn's probing: its outcome is random, and
//! a mispredict costs as much as a dozen probes.
//! 1. `E > M/2`: the slots themselves are the map of taken slots (no second
//!    map to keep in step). A turn tests its next two entries (three below
//!    11/16 M) without a branch, and branches only when all are taken, at
//!    most a turn in eight.
//! 2. `E > M/8`: a byte map of taken slots with a mirror ([`Taken`]); a turn
//!    tests 4, then 8 entries without a branch, then loops if all are taken.
//! 3. `E > √M`: turns are taken a *window* at a time (consecutive turns of
//!    one round, hence of distinct backends). First, every backend of the
//!    window finds the first free entry of its permutation against the map
//!    as it was at the start of the window, in passes of 8, 16 or 32 probes
//!    without a branch; only the backends still without a candidate take the
//!    next pass. Then the window commits in turn order: a backend whose
//!    candidate an earlier turn of the window has claimed probes on from
//!    there. Slots only ever become taken, so what it skipped was taken
//!    before and still is: the result is the slot that probing turn by turn
//!    would find. Each turn's random-length probing becomes a few loop passes
//!    per window.
//! 4. `E ≤ √M`: the tail ([`tail`]) compares the distances to every empty
//!    slot instead of probing ~M/E entries.
//!
//! # Invariants
//!
//! - A walker's `pos` is `< M`, and every entry of its permutation before
//!   `pos` is a taken slot.
//! - From phase 2 on, byte `p` of [`Taken`] is 1 iff slot `p mod M` is
//!   taken, for `p < 2M`.
//! - A turn claims the first free entry from `pos` against the slots as they
//!   are at that turn; a candidate found earlier is only a place to resume.
//! - Only speed depends on the phase boundaries, batch and window sizes and
//!   the tail threshold, never the result.

mod tail;
mod turns;

use std::num::NonZeroU16;

use tail::fill_tail;
#[cfg(test)]
pub(super) use tail::mod_inverse;
pub(super) use tail::Barrett;
use turns::{Turns, Window};

/// One backend with weight > 0, as the population sees it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entrant {
    /// `h1 mod M`: the first slot of its permutation.
    pub(super) offset: u32,
    /// `h2 mod (M − 1) + 1`: the step of its permutation.
    pub(super) skip: u32,
    /// Weight, > 0.
    pub(super) weight: u32,
    /// What its slots store: the caller's index + 1.
    pub(super) value: NonZeroU16,
}

/// Probes per batch; each backend keeps the first `BATCH + 1` multiples of
/// its step.
const BATCH: usize = 8;

/// The most turns in a window (a power of two: indices are masked, not
/// bounds-checked).
const WINDOW: usize = 256;

/// Per-backend probing state, in canonical order.
#[derive(Debug, Clone, Copy)]
struct Walker {
    /// Next entry of the permutation to try, `< M`.
    pos: u32,
    /// Step of the permutation, in `1..M`.
    skip: u32,
    value: NonZeroU16,
}

/// `k · skip mod M` for k in `0..=BATCH`: entry `k` from `pos` is slot
/// `pos + strides[k]` of the mirrored map.
type Strides = [u32; BATCH + 1];

/// The tail starts at this many empty slots.
fn tail_threshold(m: u32) -> u32 {
    // Probing costs ~M/E probes per turn with E empty slots; the tail ~E
    // multiplies. They cross near sqrt(M), which also measured best.
    f64::from(m).sqrt() as u32
}

/// Takes the turns described at `MaglevRing::build` until every slot is
/// full. `entrants` is in canonical order, non-empty, every weight > 0, and
/// `entrants.len() <= slots.len()`; every slot starts `None`.
pub(super) fn populate(entrants: &[Entrant], slots: &mut [Option<NonZeroU16>]) {
    let m = slots.len() as u32;
    debug_assert!(!entrants.is_empty() && entrants.len() <= slots.len());
    debug_assert!(slots.iter().all(Option::is_none));
    let mut walkers: Vec<Walker> = entrants
        .iter()
        .map(|e| Walker {
            pos: e.offset,
            skip: e.skip,
            value: e.value,
        })
        .collect();
    let strides: Vec<Strides> = entrants
        .iter()
        .map(|e| {
            let mut s = [0u32; BATCH + 1];
            for k in 1..=BATCH {
                s[k] = reduce(s[k - 1] + e.skip, m);
            }
            s
        })
        .collect();
    let mut turns = Turns::new(entrants);
    let tail = tail_threshold(m);
    let mut w = Population {
        walkers: &mut walkers,
        strides: &strides,
        turns: &mut turns,
        slots,
        empty: m,
    };
    w.phase1((m / 2).max(tail));
    let mut taken = Taken::new(w.slots);
    w.phase2::<4>(&mut taken, (m / 4).max(tail));
    w.phase2::<8>(&mut taken, (m / 8).max(tail));
    w.phase3(&mut taken, tail);
    if w.empty > 0 {
        fill_tail(&mut walkers, &mut turns, &taken, slots);
    }
}

/// The state the phases share.
struct Population<'a> {
    walkers: &'a mut [Walker],
    strides: &'a [Strides],
    turns: &'a mut Turns,
    slots: &'a mut [Option<NonZeroU16>],
    /// How many slots are still empty.
    empty: u32,
}

impl Population<'_> {
    /// Phase 1, until `until` slots are empty.
    #[inline(never)]
    fn phase1(&mut self, until: u32) {
        // Two entries a turn while more than 11/16 of the slots are empty,
        // three after: either way all are taken in at most a turn in eight
        // ((5/16)² and (1/2)³).
        let three_from = ((self.slots.len() / 16 * 11) as u32).max(until);
        while self.empty > until {
            if self.empty > three_from {
                let window = self.turns.window((self.empty - three_from) as usize);
                window.for_each(self.walkers, self.strides, &mut Early { slots: self.slots });
                self.empty -= window.len() as u32;
            } else {
                let window = self.turns.window((self.empty - until) as usize);
                window.for_each(self.walkers, self.strides, &mut Early3 { slots: self.slots });
                self.empty -= window.len() as u32;
            }
        }
    }

    /// Phase 2, until `until` slots are empty.
    #[inline(never)]
    fn phase2<const B: usize>(&mut self, taken: &mut Taken, until: u32) {
        while self.empty > until {
            let window = self.turns.window((self.empty - until) as usize);
            window.for_each(
                self.walkers,
                self.strides,
                &mut Take::<B> {
                    taken,
                    slots: self.slots,
                },
            );
            self.empty -= window.len() as u32;
        }
    }

    /// Phase 3, until `until` slots are empty.
    #[inline(never)]
    fn phase3(&mut self, taken: &mut Taken, until: u32) {
        let m = taken.m;
        let mut cand = [0u32; WINDOW];
        let mut pending = [0u64; WINDOW];
        while self.empty > until {
            // Few conflicts: a window claims at most an eighth of the empty
            // slots.
            let cap = ((self.empty / 8) as usize)
                .clamp(1, WINDOW)
                .min((self.empty - until) as usize);
            let window = self.turns.window(cap);
            let mut w = WindowTurns {
                walkers: self.walkers,
                strides: self.strides,
                taken,
                slots: self.slots,
                cand: &mut cand,
                pending: &mut pending,
            };
            // Passes of about as many probes as a turn needs on average
            // (M / empty): fewer passes without much waste.
            if self.empty > m / 16 {
                w.take::<8, 1>(window);
            } else if self.empty > m / 64 {
                w.take::<16, 2>(window);
            } else {
                w.take::<32, 4>(window);
            }
            self.empty -= window.len() as u32;
        }
    }
}

/// `x mod m` for `x < 2m`, without a branch: below `m`, `x − m` wraps
/// above `x`.
#[inline(always)]
fn reduce(x: u32, m: u32) -> u32 {
    x.min(x.wrapping_sub(m))
}

/// Which slots are taken, from phase 2 on: byte `p` is 1 iff slot `p mod M`
/// is taken, for `p < 2M`. A byte per slot makes a probe one load, and the
/// mirror lets a probe at `pos + stride` (`< 2M`) skip the reduction mod M.
#[derive(Debug)]
struct Taken {
    bytes: Vec<u8>,
    m: u32,
}

impl Taken {
    /// The map of the taken `slots`.
    fn new(slots: &[Option<NonZeroU16>]) -> Self {
        let m = slots.len();
        let mut bytes = vec![0u8; 2 * m];
        let (low, high) = bytes.split_at_mut(m);
        for ((a, b), s) in low.iter_mut().zip(high).zip(slots) {
            *a = u8::from(s.is_some());
            *b = *a;
        }
        Taken { bytes, m: m as u32 }
    }

    /// Whether slot `p` (`< 2M`) is taken.
    #[inline(always)]
    fn get(&self, p: u32) -> bool {
        self.bytes[p as usize] != 0
    }

    /// Marks slot `p` (`< M`) taken.
    #[inline(always)]
    fn set(&mut self, p: u32) {
        self.bytes[p as usize] = 1;
        self.bytes[(p + self.m) as usize] = 1;
    }

    /// The slots still free, in increasing order.
    fn free_slots(&self) -> Vec<u32> {
        let bytes = &self.bytes[..self.m as usize];
        let mut out = Vec::new();
        let chunks = bytes.chunks_exact(8);
        let rest = chunks.remainder();
        for (at, chunk) in chunks.enumerate() {
            if u64::from_le_bytes(chunk.try_into().expect("8 bytes")) != 0x0101_0101_0101_0101 {
                out.extend((0..8).filter(|&k| chunk[k] == 0).map(|k| (at * 8 + k) as u32));
            }
        }
        let base = bytes.len() - rest.len();
        out.extend(
            (0..rest.len())
                .filter(|&k| rest[k] == 0)
                .map(|k| (base + k) as u32),
        );
        out
    }

    /// Tests entries `0..B` of a permutation from `pos` (`B <= BATCH`) and
    /// returns `(pos + strides[k], k)` for the first free entry `k`, or
    /// `(pos + strides[B], B)` (the entry to resume from) when all are
    /// taken; the position is `< 2M`. No branch: the tests are independent,
    /// and the CPU overlaps them with the next turn's.
    #[inline(always)]
    fn probe<const B: usize>(&self, pos: u32, strides: &Strides) -> (u32, usize) {
        let from = &self.bytes[pos as usize..];
        // Bit k of `full` is entry k's; bit B is clear, which bounds the
        // count of trailing ones.
        let mut full = 0u32;
        for &s in strides[..B].iter().rev() {
            full = full * 2 + u32::from(from[s as usize]);
        }
        let k = full.trailing_ones() as usize;
        (pos + strides[k.min(BATCH)], k)
    }

    /// [`probe`](Self::probe) over `J ≤ 4` batches of [`BATCH`] entries,
    /// with `J · BATCH` for "all taken"; the position to resume from is then
    /// reduced (`< M`).
    #[inline(always)]
    fn probe_wide<const J: usize>(&self, pos: u32, strides: &Strides) -> (u32, usize) {
        // bases[j]: entry j · BATCH; bases[J] is where to resume.
        let mut bases = [pos; 5];
        let mut full = 0u64;
        for j in 0..J {
            let from = &self.bytes[bases[j] as usize..];
            let mut f = 0u32;
            for &s in strides[..BATCH].iter().rev() {
                f = f * 2 + u32::from(from[s as usize]);
            }
            full |= u64::from(f) << (BATCH * j);
            bases[j + 1] = reduce(bases[j] + strides[BATCH], self.m);
        }
        let k = full.trailing_ones() as usize;
        // k = J · BATCH gives bases[J] + strides[0] = bases[J].
        (bases[k / BATCH] + strides[k % BATCH], k)
    }
}

/// The first free entry at or after `pos` (`< M`) of a permutation, `< M`.
/// For the rare turn whose batch found nothing, or whose candidate an
/// earlier turn of its window claimed.
#[inline(never)]
fn first_free(taken: &Taken, mut pos: u32, strides: &Strides) -> u32 {
    loop {
        let (c, k) = taken.probe::<BATCH>(pos, strides);
        let c = reduce(c, taken.m);
        if k < BATCH {
            return c;
        }
        pos = c;
    }
}

/// What a loop over a window does for each turn. A trait rather than a
/// closure so that the body is inlined into both loops of
/// [`Window::for_each`].
trait Turn {
    fn turn(&mut self, w: &mut Walker, s: &Strides);
}

/// A turn of phase 1: the slots are the map. Entries 0 and 1 are tested
/// without a branch; a branch only when both are taken.
struct Early<'a> {
    slots: &'a mut [Option<NonZeroU16>],
}

impl Turn for Early<'_> {
    #[inline(always)]
    fn turn(&mut self, w: &mut Walker, _: &Strides) {
        let m = self.slots.len() as u32;
        let p0 = w.pos;
        let p1 = reduce(p0 + w.skip, m);
        let full =
            u32::from(self.slots[p0 as usize].is_some()) | u32::from(self.slots[p1 as usize].is_some()) << 1;
        // Arithmetic, not a branch: p0 if free, else p1. (Written so, LLVM
        // keeps it; written as `if`, it branched on p0 and mispredicted up
        // to a turn in three.)
        let mask = (full & 1).wrapping_neg();
        let mut c = (p1 & mask) | (p0 & !mask);
        if full == 3 {
            c = early_free(self.slots, p1, w.skip);
        }
        self.slots[c as usize] = Some(w.value);
        w.pos = reduce(c + w.skip, m);
    }
}

/// [`Early`] with three entries.
struct Early3<'a> {
    slots: &'a mut [Option<NonZeroU16>],
}

impl Turn for Early3<'_> {
    #[inline(always)]
    fn turn(&mut self, w: &mut Walker, s: &Strides) {
        let m = self.slots.len() as u32;
        let p0 = w.pos;
        let p1 = reduce(p0 + s[1], m);
        let p2 = reduce(p0 + s[2], m);
        let full = u32::from(self.slots[p0 as usize].is_some())
            | u32::from(self.slots[p1 as usize].is_some()) << 1
            | u32::from(self.slots[p2 as usize].is_some()) << 2;
        // p0 if free, else p1 if free, else p2, with masks as in `Early`.
        let m0 = (full & 1).wrapping_neg();
        let m1 = (full & (full >> 1) & 1).wrapping_neg();
        let c = (p1 & m0) | (p0 & !m0);
        let mut c = (p2 & m1) | (c & !m1);
        if full == 7 {
            c = early_free(self.slots, p2, w.skip);
        }
        self.slots[c as usize] = Some(w.value);
        w.pos = reduce(c + w.skip, m);
    }
}

/// The first free slot at or after `pos` on a permutation with step
/// `skip`, probing the slots (phase 1).
#[inline(never)]
fn early_free(slots: &[Option<NonZeroU16>], mut pos: u32, skip: u32) -> u32 {
    let m = slots.len() as u32;
    while slots[pos as usize].is_some() {
        pos = reduce(pos + skip, m);
    }
    pos
}

/// A turn of phase 2: a batch of `B` probes without a branch, then batches
/// until a free slot (a mispredicted branch) if all were taken.
struct Take<'a, const B: usize> {
    taken: &'a mut Taken,
    slots: &'a mut [Option<NonZeroU16>],
}

impl<const B: usize> Turn for Take<'_, B> {
    #[inline(always)]
    fn turn(&mut self, w: &mut Walker, s: &Strides) {
        let m = self.taken.m;
        let (c, k) = self.taken.probe::<B>(w.pos, s);
        let c = if k < B {
            reduce(c, m)
        } else {
            first_free(self.taken, reduce(c, m), s)
        };
        self.taken.set(c);
        self.slots[c as usize] = Some(w.value);
        w.pos = reduce(c + w.skip, m);
    }
}

/// The commit of a window's candidates (phase 3), in turn order.
struct Commit<'a> {
    taken: &'a mut Taken,
    slots: &'a mut [Option<NonZeroU16>],
    cand: &'a [u32; WINDOW],
    j: usize,
}

impl Turn for Commit<'_> {
    #[inline(always)]
    fn turn(&mut self, w: &mut Walker, s: &Strides) {
        let mut c = reduce(self.cand[self.j & (WINDOW - 1)], self.taken.m);
        self.j += 1;
        if self.taken.get(c) {
            c = first_free(self.taken, c, s);
        }
        self.taken.set(c);
        self.slots[c as usize] = Some(w.value);
        w.pos = reduce(c + w.skip, self.taken.m);
    }
}

/// The state of phase 3.
struct WindowTurns<'a> {
    walkers: &'a mut [Walker],
    strides: &'a [Strides],
    taken: &'a mut Taken,
    slots: &'a mut [Option<NonZeroU16>],
    /// The candidate of each turn of the window, `< 2M`.
    cand: &'a mut [u32; WINDOW],
    /// The turns still without a candidate, as `pos | walker << 32 |
    /// turn << 48` (a walker index fits 16 bits: `MAX_BACKENDS`).
    pending: &'a mut [u64; WINDOW],
}

impl WindowTurns<'_> {
    /// Takes the turns of `window` (at most [`WINDOW`]): candidates in passes
    /// of `B` probes (`J` batches of [`BATCH`] when `B > BATCH`), then the
    /// commit.
    #[inline(always)]
    fn take<const B: usize, const J: usize>(&mut self, window: Window<'_>) {
        debug_assert!(B <= BATCH || B == J * BATCH);
        let m = self.taken.m;
        let len = window.len();
        for j in 0..len {
            let i = window.walker(j);
            self.pending[j & (WINDOW - 1)] =
                u64::from(self.walkers[i].pos) | (i as u64) << 32 | (j as u64) << 48;
        }
        let mut left = len;
        while left > 0 {
            let mut still = 0usize;
            for x in 0..left {
                let e = self.pending[x & (WINDOW - 1)];
                let (pos, i, j) = (e as u32, (e >> 32) as u16 as usize, (e >> 48) as usize);
                let (c, k) = if B <= BATCH {
                    self.taken.probe::<B>(pos, &self.strides[i])
                } else {
                    self.taken.probe_wide::<J>(pos, &self.strides[i])
                };
                self.cand[j & (WINDOW - 1)] = c;
                self.pending[still & (WINDOW - 1)] = e & !0xFFFF_FFFF | u64::from(reduce(c, m));
                still += usize::from(k == B);
            }
            left = still;
        }
        let mut commit = Commit {
            taken: self.taken,
            slots: self.slots,
            cand: self.cand,
            j: 0,
        };
        window.for_each(self.walkers, self.strides, &mut commit);
    }
}
