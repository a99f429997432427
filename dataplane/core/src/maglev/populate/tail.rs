//! The tail of the population (phase 4 in `populate.rs`): the last ~√M
//! turns, where probing would cost ~M/E steps each with E empty slots.
//!
//! A turn instead computes, for each empty slot `e`, how far it is on its
//! backend's permutation, `(e − pos) · skip⁻¹ mod M`, and claims the
//! nearest. Every slot before `pos` on the permutation is taken, so the
//! nearest empty slot is exactly the one probing would reach. The distances
//! are compared as wrapping 64-bit products, one multiply per empty slot
//! (see [`step_scale`] for why they sort alike), and the inverses of the
//! steps come from one extended Euclid for the whole tail
//! ([`batch_inverse`]).
//!
//! Invariants: at most `2^12` empty slots (the tail starts at `√M < 2^12`
//! of them); the index of an empty slot in the list rides in the low 12 bits
//! of its key.

use std::num::NonZeroU16;

use super::turns::Turns;
use super::{reduce, Taken, Walker};

/// Takes the remaining turns by comparing the distances to every empty slot
/// (see the module doc).
pub(super) fn fill_tail(
    walkers: &mut [Walker],
    turns: &mut Turns,
    taken: &Taken,
    slots: &mut [Option<NonZeroU16>],
) {
    let m = slots.len() as u32;
    let mut empties = taken.free_slots();
    assert!(
        empties.len() <= 1 << TAIL_INDEX_BITS,
        "the tail is at most sqrt(M) < 2^12 slots"
    );
    // The remaining turns, and the scales of the backends that take them
    // (0: takes no turn; 1: listed in `who`; a scale is at least 2^40).
    let order: Vec<usize> = (0..empties.len()).map(|_| turns.window(1).walker(0)).collect();
    let mut scale = vec![0u64; walkers.len()];
    let mut who: Vec<usize> = Vec::new();
    for &i in &order {
        if scale[i] == 0 {
            scale[i] = 1;
            who.push(i);
        }
    }
    let barrett = Barrett::new(m);
    let skips: Vec<u32> = who.iter().map(|&i| walkers[i].skip).collect();
    for (&i, inv) in who.iter().zip(batch_inverse(&skips, barrett)) {
        // Clear the low bits, so that the products have them clear too and
        // the index fits there (see `step_scale`).
        scale[i] = step_scale(inv, barrett) & !TAIL_INDEX_MASK;
    }
    for i in order {
        let w = &mut walkers[i];
        let (phi, pos) = (scale[i], u64::from(w.pos));
        let key = |at: usize, e: u32| u64::from(e).wrapping_sub(pos).wrapping_mul(phi) | at as u64;
        // Four minima, so that the compares do not form one chain.
        let mut best = [u64::MAX; 4];
        let chunks = empties.chunks_exact(4);
        let rest = chunks.remainder();
        for (at, chunk) in chunks.enumerate() {
            for k in 0..4 {
                best[k] = best[k].min(key(4 * at + k, chunk[k]));
            }
        }
        let base = empties.len() - rest.len();
        for (k, &e) in rest.iter().enumerate() {
            best[k] = best[k].min(key(base + k, e));
        }
        let best = best[0].min(best[1]).min(best[2].min(best[3]));
        let c = empties.swap_remove((best & TAIL_INDEX_MASK) as usize);
        slots[c as usize] = Some(w.value);
        w.pos = reduce(c + w.skip, m);
    }
}

/// The tail keys carry an index into the empty slots in their low bits.
const TAIL_INDEX_BITS: u32 = 12;
const TAIL_INDEX_MASK: u64 = (1 << TAIL_INDEX_BITS) - 1;

/// `Φ = ⌊2^64 · inv / M⌋ + 1` for `inv = skip⁻¹ mod M`: the scale that makes
/// a wrapping multiply order slots by their distance on a permutation.
///
/// For an offset `d` in `0..M` from `pos` the distance is
/// `k = d · inv mod M`, and `d · Φ mod 2^64 = k · 2^64/M + d·δ` with
/// `0 < δ < 1`: so the keys are the distances scaled by `2^64/M`, up to an
/// error below `M`. The tail uses `Φ' = Φ − φ` with the low 12 bits
/// cleared (`φ < 2^12`), takes `d` as the wrapping difference `e − pos`
/// (which is `d − M` when `e < pos`, shifting the key by `M·(δ − φ)`), and
/// sets the low 12 bits to an index. In all, a key is off its scaled
/// distance by less than `M · 2^14 < 2^38` for `M < 2^24`, far less than
/// half the gap `2^64/M > 2^40` between consecutive distances: the keys sort
/// like the distances, and `k = 0` (d = 0) gives the smallest key.
fn step_scale(inv: u64, barrett: Barrett) -> u64 {
    let (m, r) = (barrett.m, barrett.r);
    // 2^64 / M = r + s / M with s = 2^64 mod M; inv · r < 2^64 as inv < M.
    let s = (r * m).wrapping_neg();
    inv * r + inv * s / m + 1
}

/// The inverses mod M of `values` (each in `1..M`): one extended Euclid and
/// three multiplications each (Montgomery's trick), not one Euclid each.
fn batch_inverse(values: &[u32], barrett: Barrett) -> Vec<u64> {
    let mut prefix = Vec::with_capacity(values.len());
    let mut acc = 1u64;
    for &v in values {
        prefix.push(acc);
        acc = barrett.rem(acc * u64::from(v));
    }
    // The inverse of the product of all, then peel one value at a time.
    let mut inv = mod_inverse(acc as u32, barrett.m as u32);
    let mut out = vec![0u64; values.len()];
    for k in (0..values.len()).rev() {
        out[k] = barrett.rem(inv * prefix[k]);
        inv = barrett.rem(inv * u64::from(values[k]));
    }
    out
}

/// `x mod m` without a division (Barrett reduction).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Barrett {
    m: u64,
    /// ⌊(2^64 − 1) / m⌋: ⌊2^64 / m⌋ when m is not a power of two, one less
    /// when it is (M − 1 = 2^16 for the default ring).
    r: u64,
}

impl Barrett {
    pub(crate) fn new(m: u32) -> Self {
        Barrett {
            m: u64::from(m),
            r: u64::MAX / u64::from(m),
        }
    }

    /// `x mod m`, for every `x`. The estimate `q = ⌊x·r / 2^64⌋` is `⌊x/m⌋`
    /// or one less, since `r > 2^64/m − 1` gives
    /// `x·r / 2^64 > x/m − x/2^64 > x/m − 1`; one subtraction fixes it.
    #[inline(always)]
    pub(crate) fn rem(self, x: u64) -> u64 {
        let q = ((u128::from(x) * u128::from(self.r)) >> 64) as u64;
        let r = x - q * self.m;
        if r >= self.m {
            r - self.m
        } else {
            r
        }
    }
}

/// `a⁻¹ mod m` for prime `m` and `0 < a < m` (extended Euclid).
pub(crate) fn mod_inverse(a: u32, m: u32) -> u64 {
    // 32-bit divisions, which are faster than 64-bit ones.
    let (mut r0, mut r1) = (m, a);
    let (mut t0, mut t1) = (0i64, 1i64);
    while r1 != 0 {
        let q = r0 / r1;
        (r0, r1) = (r1, r0 - q * r1);
        (t0, t1) = (t1, t0 - i64::from(q) * t1);
    }
    debug_assert_eq!(r0, 1, "skip and a prime ring size are coprime");
    t0.rem_euclid(i64::from(m)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64, for inputs.
    fn mix(x: &mut u64) -> u64 {
        *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    const SIZES: [u32; 6] = [7, 251, 65537, 1_048_573, 8_388_593, crate::maglev::MAX_RING_SIZE];

    /// Exact for every `x`, also when `m` is a power of two (`M − 1` for
    /// the default ring is 2^16).
    #[test]
    fn barrett_is_exact_for_powers_of_two_and_large_x() {
        let mut x = 1u64;
        for m in [1u32, 2, 6, 1 << 16, 65536 + 1, (1 << 24) - 3, u32::MAX] {
            let b = Barrett::new(m);
            for v in [0, 1, u64::from(m) - 1, u64::from(m), u64::MAX, u64::MAX - 1] {
                assert_eq!(b.rem(v), v % u64::from(m), "{v} mod {m}");
            }
            for _ in 0..10_000 {
                let v = mix(&mut x);
                assert_eq!(b.rem(v), v % u64::from(m), "{v} mod {m}");
            }
        }
    }

    #[test]
    fn batch_inverse_inverts() {
        let mut x = 7u64;
        for m in SIZES {
            let values: Vec<u32> = (0..300)
                .map(|_| (mix(&mut x) % u64::from(m - 1)) as u32 + 1)
                .collect();
            let b = Barrett::new(m);
            for (&v, inv) in values.iter().zip(batch_inverse(&values, b)) {
                assert_eq!(inv, mod_inverse(v, m), "{v} mod {m}");
            }
        }
        assert!(batch_inverse(&[], Barrett::new(7)).is_empty());
    }

    /// The keys of the tail sort empty slots exactly by their distance on the
    /// permutation, `(e − pos) · skip⁻¹ mod M`, at the largest sizes too.
    #[test]
    fn keys_sort_like_distances() {
        let mut x = 11u64;
        for m in SIZES {
            let b = Barrett::new(m);
            let m64 = u64::from(m);
            for _ in 0..20 {
                let skip = (mix(&mut x) % (m64 - 1)) as u32 + 1;
                let inv = mod_inverse(skip, m);
                let phi = step_scale(inv, b) & !TAIL_INDEX_MASK;
                let pos = mix(&mut x) % m64;
                let mut slots: Vec<u64> = (0..200).map(|_| mix(&mut x) % m64).collect();
                slots.push(pos);
                slots.push((pos + 1) % m64);
                slots.push((pos + m64 - 1) % m64);
                slots.sort_unstable();
                slots.dedup();
                let distance = |e: u64| (e + m64 - pos) % m64 * inv % m64;
                let key = |at: usize, e: u64| e.wrapping_sub(pos).wrapping_mul(phi) | at as u64;
                let mut by_key: Vec<usize> = (0..slots.len()).collect();
                by_key.sort_by_key(|&at| key(at, slots[at]));
                let mut by_distance: Vec<usize> = (0..slots.len()).collect();
                by_distance.sort_by_key(|&at| distance(slots[at]));
                assert_eq!(by_key, by_distance, "M={m} skip={skip} pos={pos}");
                assert_eq!(slots[by_key[0]], pos, "distance 0 is the smallest key");
            }
        }
    }
}
