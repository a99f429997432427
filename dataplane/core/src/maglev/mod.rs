//! The Maglev consistent-hash ring (Eisenbud et al., "Maglev: A Fast and
//! Reliable Software Network Load Balancer", NSDI'16, §3.4).
//!
//! A [`MaglevRing`] maps a flow hash to one backend of a service in O(1)
//! with no allocation: `slots[slot_for_hash(hash, size)]`. The control thread
//! builds rings; workers only look them up.
//!
//! # The cross-node contract
//!
//! Several `lbd` nodes behind ECMP must pick the same backend for a flow,
//! even while they run different versions during a rollout. So the ring is a
//! pure function of the *set* of backends (address, port, weight) and the
//! ring size, and everything that feeds it is fixed and documented:
//!
//! - backend identity: the canonical encoding of `(family, address, port)`:
//!   `[4, a, b, c, d, port_hi, port_lo]` for IPv4 and
//!   `[6, 16 address bytes, port_hi, port_lo]` for IPv6 (addresses as given:
//!   an IPv4-mapped IPv6 address is not its IPv4 address), never a position
//!   in a list or a process-local id. The build sorts by these bytes, so the
//!   order of the caller's slice does not matter; slots then hold indices
//!   into the caller's slice.
//! - permutation: `offset = h1(key) % M`, `skip = h2(key) % (M - 1) + 1`,
//!   where `h1`/`h2` are SipHash-2-4 of the encoding under the constant keys
//!   `(k0, k1)` = `u64::from_le_bytes` of `("lbd:mglv", "offset:1")` and of
//!   `("lbd:mglv", "skip::v1")`.
//! - population: the NSDI'16 round-robin with weighted turns (see
//!   [`MaglevRing::build`]).
//! - hash to slot: [`slot_for_hash`], `(hash * M) >> 64` on 128 bits.
//! - flow hashes: [`flow_hash_v4`], [`flow_hash_v6`], [`client_hash`].
//!
//! Changing any of these is a new [`RING_VERSION`], and the golden test
//! (`tests/maglev_golden.rs`) fails until the change is deliberate.
//!
//! # Invariants
//!
//! - The ring size `M` is a prime in `MIN_RING_SIZE..=MAX_RING_SIZE` (prime
//!   so that every `skip` in `1..M` walks a full permutation).
//! - Every slot is `None` (an empty ring only) or the index of a backend with
//!   weight > 0; a ring built from at least one such backend has no `None`.
//! - A slot is 2 bytes (`Option<NonZeroU16>` holding index + 1): 10,000
//!   services × 65,537 slots is 1.3 GB, and [`ring_size_for`] keeps most
//!   rings far smaller.

mod hash;
mod populate;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::IpAddr;
use std::num::NonZeroU16;

use hash::BackendKey;
pub use hash::{client_hash, flow_hash_v4, flow_hash_v6};
#[cfg(test)]
use populate::mod_inverse;
use populate::{Barrett, Entrant};

/// The version of the ring contract above. Two `lbd` builds with the same
/// version map every flow to the same backend. Bump it (and document why)
/// whenever the golden test has to change.
pub const RING_VERSION: u32 = 1;

/// The ring size of the paper and of most deployments: prime, and at least
/// 100 × 655 backends.
pub const DEFAULT_RING_SIZE: u32 = 65537;

/// The smallest accepted ring size.
pub const MIN_RING_SIZE: u32 = 7;

/// The largest accepted ring size (prime, just under 2^24; 32 MiB of slots).
/// The largest useful size is 100 × [`MAX_BACKENDS`] ≈ 6.6 M.
pub const MAX_RING_SIZE: u32 = 16_777_213;

/// The most backends one ring can index: a slot stores `index + 1` in a
/// `NonZeroU16`.
pub const MAX_BACKENDS: usize = u16::MAX as usize;

/// The ring sizes [`ring_size_for`] chooses from: a prime just under each
/// power of two from 2^8 (and 65537 = 2^16 + 1, the paper's size).
pub const RING_SIZES: [u32; 17] = [
    251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65537, 131_071, 262_139, 524_287, 1_048_573, 2_097_143,
    4_194_301, 8_388_593, 16_777_213,
];

// The memory budget above relies on the niche: no tag byte.
const _: () = assert!(std::mem::size_of::<Option<NonZeroU16>>() == 2);

/// One backend as the ring sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MaglevBackend {
    /// Address; with `port`, the backend's identity for hashing.
    pub addr: IpAddr,
    /// Port; with `addr`, the backend's identity for hashing.
    pub port: u16,
    /// Relative share of slots. 0 means no slots: the backend takes no new
    /// flows (drain) but keeps its index, so callers need not renumber.
    pub weight: u32,
}

impl MaglevBackend {
    /// A backend at `addr:port` with `weight`.
    pub fn new(addr: IpAddr, port: u16, weight: u32) -> Self {
        MaglevBackend { addr, port, weight }
    }
}

/// Why a ring could not be built. Each variant names the offending input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MaglevError {
    /// The ring size is not prime, so some `skip` values would not visit
    /// every slot.
    #[error("Maglev ring size {size} is not prime")]
    SizeNotPrime {
        /// The requested size.
        size: u32,
    },
    /// The ring size is below [`MIN_RING_SIZE`].
    #[error("Maglev ring size {size} is below the minimum {MIN_RING_SIZE}")]
    SizeTooSmall {
        /// The requested size.
        size: u32,
    },
    /// The ring size is above [`MAX_RING_SIZE`].
    #[error("Maglev ring size {size} is above the maximum {MAX_RING_SIZE}")]
    SizeTooLarge {
        /// The requested size.
        size: u32,
    },
    /// Fewer slots than backends: some backend could get no slot.
    #[error("Maglev ring size {size} is smaller than the number of backends {backends}")]
    SizeBelowBackends {
        /// The requested size.
        size: u32,
        /// The number of backends given.
        backends: usize,
    },
    /// More than [`MAX_BACKENDS`] backends.
    #[error("{count} backends exceed the Maglev maximum of {MAX_BACKENDS}")]
    TooManyBackends {
        /// The number of backends given.
        count: usize,
    },
    /// Backends were given but all have weight 0. Pass an empty slice to
    /// build a ring that takes no new flows; this error keeps that choice
    /// explicit in the caller.
    #[error("all {backends} backends have weight 0")]
    ZeroTotalWeight {
        /// The number of backends given.
        backends: usize,
    },
    /// Two backends share an address and port, so they would share an
    /// identity (and a permutation).
    #[error("duplicate backend {addr} port {port} at indices {first} and {second}")]
    DuplicateBackend {
        /// The shared address.
        addr: IpAddr,
        /// The shared port.
        port: u16,
        /// The lower of the two indices in the caller's slice.
        first: usize,
        /// The higher of the two indices in the caller's slice.
        second: usize,
    },
}

/// The hash-to-slot reduction of the contract: `(hash * size) >> 64`,
/// computed on 128 bits (Lemire's multiply-shift). It reads the *high* bits
/// of `hash`, costs one multiply instead of a division, and gives every
/// slot either ⌊2^64 / size⌋ or ⌈2^64 / size⌉ hash values. The result is
/// `< size` for every `size > 0`.
#[inline]
pub fn slot_for_hash(hash: u64, size: u32) -> u32 {
    ((u128::from(hash) * u128::from(size)) >> 64) as u32
}

/// The ring size for a service with `n_backends`: the smallest of
/// [`RING_SIZES`] that is ≥ 100 × `n_backends`, capped at `max`.
///
/// Why 100×: each backend gets ⌊M/N⌋ or ⌈M/N⌉ slots (equal weights), so
/// the slot imbalance is at most 1/⌊M/N⌋ ≈ N/M, ≲ 1% at M ≥ 100N; a larger
/// ring also moves fewer extra flows when a backend changes. A smaller ring
/// costs less memory and build time: 10,000 services with 10 backends each
/// need 1,021-slot rings (2 KiB each) instead of 65,537-slot ones (128 KiB).
///
/// When the pick exceeds `max`, the result is the largest prime ≤ `max`
/// (`max` itself when prime), but never below [`MIN_RING_SIZE`] nor above
/// [`MAX_RING_SIZE`]. The result is always a valid ring size; it is smaller
/// than `n_backends` only if `max` is, and then [`MaglevRing::build`] says so.
pub fn ring_size_for(n_backends: usize, max: u32) -> u32 {
    let want = (n_backends as u64).saturating_mul(100);
    let pick = RING_SIZES
        .iter()
        .copied()
        .find(|&p| u64::from(p) >= want)
        .unwrap_or(MAX_RING_SIZE);
    if pick <= max {
        return pick;
    }
    let mut m = max.clamp(MIN_RING_SIZE, MAX_RING_SIZE);
    while !is_prime(m) {
        m -= 1; // Terminates: MIN_RING_SIZE is prime.
    }
    m
}

/// Deterministic trial division; at most ~1,400 steps for sizes ≤ 2^24.
pub(crate) fn is_prime(n: u32) -> bool {
    if n < 4 {
        return n >= 2;
    }
    if n.is_multiple_of(2) || n.is_multiple_of(3) {
        return false;
    }
    let mut d = 5u32;
    while u64::from(d) * u64::from(d) <= u64::from(n) {
        if n.is_multiple_of(d) || n.is_multiple_of(d + 2) {
            return false;
        }
        d += 6;
    }
    true
}

/// A built Maglev lookup table: `size()` slots, each naming a backend by its
/// index in the slice given to [`MaglevRing::build`].
///
/// Immutable once built, so a snapshot can share it between workers (and
/// between snapshots, when a service did not change).
#[derive(Clone, PartialEq, Eq)]
pub struct MaglevRing {
    slots: Box<[Option<NonZeroU16>]>,
    n_backends: u32,
}

impl fmt::Debug for MaglevRing {
    // Never print 65,537 slots into a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaglevRing")
            .field("size", &self.size())
            .field("backends", &self.n_backends)
            .finish_non_exhaustive()
    }
}

impl MaglevRing {
    /// Builds the ring for `backends` with `size` slots.
    ///
    /// Backends are ordered by their canonical identity (address family,
    /// address, port) whatever the slice order, and those with weight > 0
    /// take turns in that order, round after round, until every slot is
    /// full. In a turn, a backend claims the first still-empty slot of its
    /// permutation `offset, offset + skip, offset + 2·skip, ... (mod M)`.
    ///
    /// Weights (Katran's weighted Maglev): with `max_w` the largest weight,
    /// each round every backend adds its weight to a credit starting at 0;
    /// a backend whose credit reaches `max_w` pays `max_w` and takes a turn.
    /// So after `r` rounds backend `i` has had ⌊r·wᵢ/max_w⌋ turns, and as
    /// every turn claims exactly one slot, with `W = Σw` and `N` backends:
    /// `M·wᵢ/W − 2 < slotsᵢ < M·wᵢ/W + N·wᵢ/W + 1`. With equal weights every
    /// backend gets ⌊M/N⌋ or ⌈M/N⌉ slots. A weight-0 backend gets none.
    ///
    /// An empty `backends` gives a ring whose every lookup is `None`: the
    /// pipeline drops new flows with `NoBackend`, while established flows
    /// continue, since conntrack stores the backend's address.
    ///
    /// Cost: O(M log M) probes, and per round one credit check per distinct
    /// weight, plus a scan of the backends when some but not all weights
    /// take turns; rounds ≈ M · max_w / W (≤ M). 65,537 slots with 1,000
    /// equal-weight backends take about 0.65 ms on one core, one backend at
    /// 1000× the others about 1 ms (see `benches/maglev.rs`); many distinct
    /// light weights beside a heavy one still cost up to N per round, tens
    /// of milliseconds at worst. Builds run on the control thread, and
    /// unchanged services reuse their ring. How the population is made fast
    /// without changing its result: `populate.rs`.
    pub fn build(backends: &[MaglevBackend], size: u32) -> Result<MaglevRing, MaglevError> {
        check_size(size)?;
        if backends.len() > MAX_BACKENDS {
            return Err(MaglevError::TooManyBackends {
                count: backends.len(),
            });
        }
        if backends.len() as u64 > u64::from(size) {
            return Err(MaglevError::SizeBelowBackends {
                size,
                backends: backends.len(),
            });
        }
        let mut order: Vec<(BackendKey, usize)> = backends
            .iter()
            .enumerate()
            .map(|(i, b)| (BackendKey::new(b.addr, b.port), i))
            .collect();
        order.sort_unstable();
        for pair in order.windows(2) {
            if pair[0].0 == pair[1].0 {
                let (first, second) = (pair[0].1, pair[1].1);
                let b = &backends[first];
                return Err(MaglevError::DuplicateBackend {
                    addr: b.addr,
                    port: b.port,
                    first,
                    second,
                });
            }
        }
        let n_backends = backends.len() as u32;
        let mut slots = vec![None; size as usize].into_boxed_slice();
        if backends.is_empty() {
            return Ok(MaglevRing { slots, n_backends });
        }
        // Exact `% M` and `% (M − 1)` without a division per backend.
        let (offset_mod, skip_mod) = (Barrett::new(size), Barrett::new(size - 1));
        let entrants: Vec<Entrant> = order
            .iter()
            .filter(|&&(_, i)| backends[i].weight > 0)
            .map(|&(key, i)| Entrant {
                offset: offset_mod.rem(key.offset_hash()) as u32,
                skip: skip_mod.rem(key.skip_hash()) as u32 + 1,
                weight: backends[i].weight,
                // i < MAX_BACKENDS = u16::MAX, so i + 1 fits and is non-zero.
                value: NonZeroU16::new(i as u16 + 1).expect("index + 1 > 0"),
            })
            .collect();
        if entrants.is_empty() {
            return Err(MaglevError::ZeroTotalWeight {
                backends: backends.len(),
            });
        }
        populate::populate(&entrants, &mut slots);
        Ok(MaglevRing { slots, n_backends })
    }

    /// A ring of `size` slots with no backend: every lookup is `None`.
    /// Same as `build(&[], size)`.
    pub fn empty(size: u32) -> Result<MaglevRing, MaglevError> {
        MaglevRing::build(&[], size)
    }

    /// The backend for `hash`: its index in the slice given to
    /// [`build`](Self::build), or `None` for an empty ring. O(1): one
    /// multiply and one load; never allocates, never panics.
    #[inline]
    pub fn lookup(&self, hash: u64) -> Option<usize> {
        let i = slot_for_hash(hash, self.size()) as usize;
        self.slots
            .get(i)
            .copied()
            .flatten()
            .map(|v| usize::from(v.get()) - 1)
    }

    /// The number of slots (the prime `M`).
    #[inline]
    pub fn size(&self) -> u32 {
        // Built from a u32 size; never truncates.
        self.slots.len() as u32
    }

    /// The number of backends the ring was built from (the slice length,
    /// including weight-0 backends).
    pub fn backend_count(&self) -> usize {
        self.n_backends as usize
    }

    /// The backend index in slot `i`, `None` for an empty ring.
    ///
    /// # Panics
    ///
    /// If `i >= self.size()`.
    pub fn slot(&self, i: u32) -> Option<usize> {
        self.slots[i as usize].map(|v| usize::from(v.get()) - 1)
    }

    /// How many slots each backend owns, indexed like the build slice; the
    /// vector has `n_backends` entries and slots naming an index beyond it
    /// are not counted. For tests and stats.
    pub fn slot_counts(&self, n_backends: usize) -> Vec<u32> {
        let mut counts = vec![0u32; n_backends];
        for v in self.slots.iter().flatten() {
            if let Some(c) = counts.get_mut(usize::from(v.get()) - 1) {
                *c += 1;
            }
        }
        counts
    }

    /// A fixed 64-bit digest of the ring: SipHash-2-4 under key
    /// `("lbd:mglv", "fprint:1")` of `size` as 4 little-endian bytes
    /// followed by every slot as 2 little-endian bytes (0 for empty, else
    /// index + 1). Equal on two nodes iff they built the same ring from
    /// slices in the same order; the golden test pins it.
    pub fn fingerprint(&self) -> u64 {
        let mut bytes = Vec::with_capacity(4 + 2 * self.slots.len());
        bytes.extend_from_slice(&self.size().to_le_bytes());
        for s in self.slots.iter() {
            bytes.extend_from_slice(&s.map_or(0, NonZeroU16::get).to_le_bytes());
        }
        hash::fingerprint_hash(&bytes)
    }
}

fn check_size(size: u32) -> Result<(), MaglevError> {
    if size < MIN_RING_SIZE {
        Err(MaglevError::SizeTooSmall { size })
    } else if size > MAX_RING_SIZE {
        Err(MaglevError::SizeTooLarge { size })
    } else if !is_prime(size) {
        Err(MaglevError::SizeNotPrime { size })
    } else {
        Ok(())
    }
}
