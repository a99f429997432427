//! Property tests of the Maglev ring: against a naive reference, and for
//! the paper's promises (balance, weights, minimal disruption). The golden
//! values that pin the contract live in `tests/maglev_golden.rs`.

use super::hash::BackendKey;
use super::*;
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};

const SMALL_PRIMES: [u32; 10] = [7, 11, 13, 31, 97, 101, 251, 509, 1021, 2039];

/// The population algorithm exactly as `build` documents it, with a
/// precomputed-by-formula permutation and plain probing: what the fast
/// two-phase `populate` must equal.
fn reference(backends: &[MaglevBackend], m: u32) -> Vec<Option<usize>> {
    let m64 = u64::from(m);
    let mut order: Vec<usize> = (0..backends.len()).collect();
    order.sort_by_key(|&i| BackendKey::new(backends[i].addr, backends[i].port));
    order.retain(|&i| backends[i].weight > 0);
    let keys: Vec<BackendKey> = order
        .iter()
        .map(|&i| BackendKey::new(backends[i].addr, backends[i].port))
        .collect();
    let offset: Vec<u64> = keys.iter().map(|k| k.offset_hash() % m64).collect();
    let skip: Vec<u64> = keys.iter().map(|k| k.skip_hash() % (m64 - 1) + 1).collect();
    let max_w = order
        .iter()
        .map(|&i| u64::from(backends[i].weight))
        .max()
        .unwrap();
    let mut next = vec![0u64; order.len()];
    let mut credit = vec![0u64; order.len()];
    let mut entry = vec![None; m as usize];
    let mut filled = 0;
    loop {
        for (a, &i) in order.iter().enumerate() {
            credit[a] += u64::from(backends[i].weight);
            if credit[a] < max_w {
                continue;
            }
            credit[a] -= max_w;
            loop {
                let c = ((offset[a] + next[a] * skip[a]) % m64) as usize;
                next[a] += 1;
                if entry[c].is_none() {
                    entry[c] = Some(i);
                    filled += 1;
                    break;
                }
            }
            if filled == m {
                return entry;
            }
        }
    }
}

fn slots_of(ring: &MaglevRing) -> Vec<Option<usize>> {
    (0..ring.size()).map(|i| ring.slot(i)).collect()
}

fn v4(i: u32, port: u16, weight: u32) -> MaglevBackend {
    MaglevBackend::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)), port, weight)
}

/// `n` equal-weight backends 10.0.0.1..=10.0.0.n port 80.
fn equal(n: u32) -> Vec<MaglevBackend> {
    (1..=n).map(|i| v4(i, 80, 1)).collect()
}

/// Distinct backends, IPv4 and IPv6, with the given weight range.
fn backends_strategy(
    max_n: usize,
    weights: std::ops::RangeInclusive<u32>,
) -> impl Strategy<Value = Vec<MaglevBackend>> {
    prop::collection::btree_set((any::<bool>(), 0u32..64, 0u16..4), 1..=max_n).prop_flat_map(move |ids| {
        let n = ids.len();
        prop::collection::vec(weights.clone(), n).prop_map(move |ws| {
            ids.iter()
                .zip(ws)
                .map(|(&(is_v6, a, port), weight)| {
                    let addr = if is_v6 {
                        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, a as u16))
                    } else {
                        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + a))
                    };
                    MaglevBackend::new(addr, 8000 + port, weight)
                })
                .collect()
        })
    })
}

fn prime_strategy() -> impl Strategy<Value = u32> {
    prop::sample::select(&SMALL_PRIMES[..])
}

#[test]
fn empty_ring_looks_up_nothing() {
    for size in [7, 251, DEFAULT_RING_SIZE] {
        let ring = MaglevRing::empty(size).unwrap();
        assert_eq!(ring, MaglevRing::build(&[], size).unwrap());
        assert_eq!(ring.size(), size);
        assert_eq!(ring.backend_count(), 0);
        assert!((0..size).all(|i| ring.slot(i).is_none()));
        for h in [0, 1, u64::MAX / 2, u64::MAX] {
            assert_eq!(ring.lookup(h), None);
        }
        assert!(ring.slot_counts(0).is_empty());
    }
}

#[test]
fn rejects_bad_input() {
    let two = [v4(1, 80, 1), v4(2, 80, 1)];
    assert_eq!(
        MaglevRing::build(&two, 5),
        Err(MaglevError::SizeTooSmall { size: 5 })
    );
    assert_eq!(
        MaglevRing::build(&two, 65535),
        Err(MaglevError::SizeNotPrime { size: 65535 })
    );
    assert_eq!(
        MaglevRing::build(&two, MAX_RING_SIZE + 2),
        Err(MaglevError::SizeTooLarge {
            size: MAX_RING_SIZE + 2
        })
    );
    assert_eq!(
        MaglevRing::build(&equal(8), 7),
        Err(MaglevError::SizeBelowBackends { size: 7, backends: 8 })
    );
    let many: Vec<MaglevBackend> = (0..=MAX_BACKENDS as u32).map(|i| v4(i, 1, 1)).collect();
    assert_eq!(
        MaglevRing::build(&many, DEFAULT_RING_SIZE),
        Err(MaglevError::TooManyBackends { count: 65536 })
    );
    assert_eq!(
        MaglevRing::build(&[v4(1, 80, 0), v4(2, 80, 0)], 7),
        Err(MaglevError::ZeroTotalWeight { backends: 2 })
    );
    // Same identity, different weight: still a duplicate.
    let dup = [v4(3, 80, 1), v4(1, 80, 1), v4(3, 80, 5)];
    assert_eq!(
        MaglevRing::build(&dup, 7),
        Err(MaglevError::DuplicateBackend {
            addr: "10.0.0.3".parse().unwrap(),
            port: 80,
            first: 0,
            second: 2
        })
    );
}

#[test]
fn max_backends_fit_in_slots() {
    let all: Vec<MaglevBackend> = (0..MAX_BACKENDS as u32).map(|i| v4(i, 1, 1)).collect();
    let ring = MaglevRing::build(&all, DEFAULT_RING_SIZE).unwrap();
    let counts = ring.slot_counts(all.len());
    assert!(counts.iter().all(|&c| c >= 1), "every backend has a slot");
    assert_eq!(counts.iter().sum::<u32>(), DEFAULT_RING_SIZE);
}

#[test]
fn ring_sizes_are_prime_and_chosen_by_backend_count() {
    assert!(RING_SIZES.iter().all(|&p| is_prime(p)));
    assert!(RING_SIZES.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(RING_SIZES.last(), Some(&MAX_RING_SIZE));
    assert!(is_prime(MIN_RING_SIZE) && is_prime(DEFAULT_RING_SIZE));
    assert_eq!(ring_size_for(0, DEFAULT_RING_SIZE), 251);
    assert_eq!(ring_size_for(2, DEFAULT_RING_SIZE), 251);
    assert_eq!(ring_size_for(3, DEFAULT_RING_SIZE), 509);
    assert_eq!(ring_size_for(10, DEFAULT_RING_SIZE), 1021);
    assert_eq!(ring_size_for(655, DEFAULT_RING_SIZE), 65537);
    assert_eq!(ring_size_for(656, DEFAULT_RING_SIZE), 65537, "capped");
    assert_eq!(ring_size_for(1000, 131_071), 131_071);
    assert_eq!(ring_size_for(1000, 100_000), 99_991, "largest prime <= max");
    assert_eq!(ring_size_for(10, 3), MIN_RING_SIZE);
    assert_eq!(ring_size_for(usize::MAX, u32::MAX), MAX_RING_SIZE);
    let primes = (0..200u32).filter(|&n| is_prime(n)).count();
    assert_eq!(primes, 46);
}

#[test]
fn mod_inverse_inverts() {
    for m in [7u32, 251, 65537, MAX_RING_SIZE] {
        for a in [1, 2, 3, m / 2, m - 2, m - 1] {
            assert_eq!(u64::from(a) * mod_inverse(a, m) % u64::from(m), 1, "{a} mod {m}");
        }
    }
}

/// The two-phase build at full size equals the naive reference, with equal
/// and with mixed weights, and with enough backends that the tail phase does
/// most of the work at the end.
#[test]
fn matches_reference_at_default_size() {
    let mut mixed = equal(300);
    for (i, b) in mixed.iter_mut().enumerate() {
        b.weight = 1 + (i as u32 * 7) % 5;
    }
    for backends in [equal(1), equal(10), equal(1000), mixed] {
        let ring = MaglevRing::build(&backends, DEFAULT_RING_SIZE).unwrap();
        assert_eq!(slots_of(&ring), reference(&backends, DEFAULT_RING_SIZE));
    }
}

#[test]
fn equal_weights_balance_at_default_size() {
    for n in [10u32, 100, 655, 1000] {
        let ring = MaglevRing::build(&equal(n), DEFAULT_RING_SIZE).unwrap();
        let counts = ring.slot_counts(n as usize);
        let (min, max) = (*counts.iter().min().unwrap(), *counts.iter().max().unwrap());
        let ratio = f64::from(max) / f64::from(min);
        eprintln!(
            "maglev balance: M={DEFAULT_RING_SIZE} N={n}: min {min} max {max} slots, max/min {ratio:.4}"
        );
        // Every turn claims one slot, so slot counts differ by at most one.
        assert!(max - min <= 1);
        if DEFAULT_RING_SIZE >= 100 * n {
            assert!(ratio <= 1.01);
        }
    }
}

#[test]
fn weights_are_proportional() {
    let mut backends = equal(20);
    for b in backends.iter_mut().step_by(2) {
        b.weight = 2;
    }
    backends[1].weight = 0;
    let ring = MaglevRing::build(&backends, DEFAULT_RING_SIZE).unwrap();
    let counts = ring.slot_counts(backends.len());
    assert_eq!(counts[1], 0, "weight 0 gets no slot");
    let heavy: u32 = counts.iter().step_by(2).sum();
    let light: u32 = counts.iter().skip(3).step_by(2).sum();
    let ratio = (f64::from(heavy) / 10.0) / (f64::from(light) / 9.0);
    eprintln!("maglev weights: weight 2 vs weight 1 slots per backend: {ratio:.4}");
    assert!((1.99..=2.01).contains(&ratio), "{ratio}");
    assert!((0..ring.size()).all(|i| ring.slot(i).is_some()));
}

/// Fraction of slots whose backend identity differs between two rings.
fn moved(a: &MaglevRing, a_b: &[MaglevBackend], b: &MaglevRing, b_b: &[MaglevBackend]) -> f64 {
    let m = a.size();
    let changed = (0..m)
        .filter(|&i| {
            let x = a.slot(i).map(|j| (a_b[j].addr, a_b[j].port));
            let y = b.slot(i).map(|j| (b_b[j].addr, b_b[j].port));
            x != y
        })
        .count();
    changed as f64 / f64::from(m)
}

/// Removing one of N backends moves its own 1/N of the slots and, because
/// Maglev trades perfect minimal disruption for balance, a little more
/// between the surviving backends. How much more shrinks as M/N grows:
/// measured (worst of 5 removals) ≤ 3.2% of the ring at M ≈ 100N (the
/// sizes `ring_size_for` picks for small services), ≤ 1% at M = 65,537 for
/// N up to 1,000, and total ≤ 1.5/N once M ≥ 1,000N.
/// Adding the backend back is the same change in reverse.
#[test]
fn removing_a_backend_moves_little_else() {
    let cases = [
        (10u32, 1021u32),
        (20, 2039),
        (100, 16381),
        (10, DEFAULT_RING_SIZE),
        (50, DEFAULT_RING_SIZE),
        (100, DEFAULT_RING_SIZE),
        (655, DEFAULT_RING_SIZE),
        (1000, DEFAULT_RING_SIZE),
    ];
    for (n, m) in cases {
        let all = equal(n);
        let ring = MaglevRing::build(&all, m).unwrap();
        let own_counts = ring.slot_counts(all.len());
        let (mut worst_total, mut worst_extra) = (0f64, 0f64);
        for k in 0..5 {
            let removed = k * (n as usize - 1) / 4;
            let mut fewer = all.clone();
            fewer.remove(removed);
            let after = MaglevRing::build(&fewer, m).unwrap();
            let total = moved(&ring, &all, &after, &fewer);
            let own = f64::from(own_counts[removed]) / f64::from(m);
            worst_total = worst_total.max(total);
            worst_extra = worst_extra.max(total - own);
        }
        let ideal = 1.0 / f64::from(n);
        eprintln!(
            "maglev disruption: M={m:5} N={n:4} (M/N {:6.0}): removing one moves {worst_total:.4} \
             of slots (ideal {ideal:.4}, {:.2}x), {worst_extra:.4} between survivors",
            f64::from(m) / f64::from(n),
            worst_total / ideal,
        );
        assert!(worst_extra <= 0.035, "extra {worst_extra} with N={n}, M={m}");
        if m == DEFAULT_RING_SIZE {
            assert!(worst_extra <= 0.01, "extra {worst_extra} with N={n}, M={m}");
        }
        if m >= 1000 * n {
            assert!(
                worst_total <= 1.5 * ideal,
                "moved {worst_total} with N={n}, M={m}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn matches_reference(backends in backends_strategy(12, 0..=4), m in prime_strategy()) {
        prop_assume!(backends.len() as u32 <= m);
        let weighted = backends.iter().filter(|b| b.weight > 0).count();
        match MaglevRing::build(&backends, m) {
            Ok(ring) => {
                prop_assert!(weighted > 0);
                prop_assert_eq!(slots_of(&ring), reference(&backends, m));
            }
            Err(e) => prop_assert_eq!(e, MaglevError::ZeroTotalWeight { backends: backends.len() }),
        }
    }

    #[test]
    fn single_backend_fills_ring(backends in backends_strategy(1, 1..=1000), m in prime_strategy()) {
        let ring = MaglevRing::build(&backends, m).unwrap();
        prop_assert!((0..m).all(|i| ring.slot(i) == Some(0)));
        prop_assert_eq!(ring.slot_counts(1), vec![m]);
    }

    /// The ring depends on the set of backends, not on the slice order:
    /// every slot names the same identity after any shuffle.
    #[test]
    fn order_does_not_matter(
        (backends, shuffled) in backends_strategy(12, 0..=3)
            .prop_filter("some weight", |b| b.iter().any(|b| b.weight > 0))
            .prop_flat_map(|b| (Just(b.clone()), Just(b).prop_shuffle())),
        m in prime_strategy(),
    ) {
        prop_assume!(backends.len() as u32 <= m);
        let a = MaglevRing::build(&backends, m).unwrap();
        let b = MaglevRing::build(&shuffled, m).unwrap();
        for i in 0..m {
            prop_assert_eq!(a.slot(i).map(|j| backends[j]), b.slot(i).map(|j| shuffled[j]));
        }
    }

    #[test]
    fn equal_weights_differ_by_at_most_one_slot(n in 1u32..=40, w in 1u32..=5, m in prime_strategy()) {
        prop_assume!(n <= m);
        let backends: Vec<_> = (1..=n).map(|i| v4(i, 80, w)).collect();
        let counts = MaglevRing::build(&backends, m).unwrap().slot_counts(n as usize);
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        prop_assert!(max - min <= 1, "{:?}", counts);
    }

    /// The bound documented at `build`:
    /// `M·wᵢ/W − 2 < slotsᵢ < M·wᵢ/W + N·wᵢ/W + 1`.
    #[test]
    fn weighted_slots_within_bound(backends in backends_strategy(12, 0..=10), m in prime_strategy()) {
        prop_assume!(backends.len() as u32 <= m);
        let total: u32 = backends.iter().map(|b| b.weight).sum();
        prop_assume!(total > 0);
        let ring = MaglevRing::build(&backends, m).unwrap();
        let counts = ring.slot_counts(backends.len());
        let n = backends.iter().filter(|b| b.weight > 0).count() as f64;
        for (b, &c) in backends.iter().zip(&counts) {
            let share = f64::from(b.weight) / f64::from(total);
            let ideal = f64::from(m) * share;
            prop_assert!(f64::from(c) > ideal - 2.0, "{} slots, ideal {}", c, ideal);
            prop_assert!(f64::from(c) < ideal + n * share + 1.0, "{} slots, ideal {}", c, ideal);
        }
        prop_assert_eq!(counts.iter().sum::<u32>(), m);
    }

    #[test]
    fn slot_for_hash_is_in_range_and_monotone(h1: u64, h2: u64, m in prime_strategy()) {
        let (s1, s2) = (slot_for_hash(h1, m), slot_for_hash(h2, m));
        prop_assert!(s1 < m && s2 < m);
        if h1 <= h2 {
            prop_assert!(s1 <= s2);
        } else {
            prop_assert!(s1 >= s2);
        }
        prop_assert!(slot_for_hash(u64::MAX, DEFAULT_RING_SIZE) == DEFAULT_RING_SIZE - 1);
    }

    #[test]
    fn lookup_reads_the_reduced_slot(h: u64, backends in backends_strategy(8, 1..=3), m in prime_strategy()) {
        prop_assume!(backends.len() as u32 <= m);
        let ring = MaglevRing::build(&backends, m).unwrap();
        prop_assert_eq!(ring.lookup(h), ring.slot(slot_for_hash(h, m)));
        prop_assert!(ring.lookup(h).unwrap() < backends.len());
    }
}

#[test]
fn barrett_matches_rem() {
    for m in [7u32, 251, 65537, MAX_RING_SIZE] {
        let b = Barrett::new(m);
        let m64 = u64::from(m);
        let top = (m64 - 1) * (m64 - 1);
        for x in [
            0,
            1,
            m64 - 1,
            m64,
            m64 + 1,
            2 * m64 - 1,
            2 * m64,
            top,
            top - 1,
            top / 2,
            top / 3 + 7,
        ] {
            assert_eq!(b.rem(x), x % m64, "{x} mod {m}");
        }
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..10_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let y = x % (top + 1);
            assert_eq!(b.rem(y), y % m64);
        }
    }
}

/// SplitMix64: a seeded, dependency-free source of test inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform-ish in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// The fast build (windows, batched probes, weight classes, tail search)
/// equals the plain reference on random backend sets: sizes from tiny to the
/// default, one to thousands of backends, and weights equal, mixed, with
/// zeros, one heavy, or all distinct. A seeded loop, so a failure names its
/// case and reproduces.
#[test]
fn matches_reference_on_random_sets() {
    let mut rng = Rng(0x6d67_6c76_7465_7374);
    let mut sizes: Vec<u32> = vec![7, 11, 13, 31, 97, 251, 509, 1021, 2039, 4093, 8191];
    for _ in 0..6 {
        let mut p = rng.range(7, 40_000) as u32;
        while !is_prime(p) {
            p += 1;
        }
        sizes.push(p);
    }
    let mut case = 0;
    for round in 0..24 {
        for &m in &sizes {
            let max_n = (m as u64).min(if m > 10_000 { 1500 } else { 600 });
            let regime = (round + case) % 8;
            // One heavy backend among many costs the reference a round per
            // turn of the heavy one: fewer backends there.
            let max_n = if regime == 4 { max_n.min(100) } else { max_n };
            let n = match rng.range(0, 3) {
                0 => rng.range(1, 4.min(max_n)),
                1 => rng.range(1, max_n.min(40)),
                _ => rng.range(1, max_n),
            } as usize;
            let weights: Vec<u32> = (0..n as u64)
                .map(|i| match regime {
                    0 => 1,
                    1 => 7,
                    2 => rng.range(1, 4) as u32,
                    3 => rng.range(0, 10) as u32,
                    4 => {
                        if i == 0 {
                            1000
                        } else {
                            1
                        }
                    }
                    5 => rng.range(1, 1000) as u32,
                    6 => [3, 5, 11][rng.range(0, 2) as usize],
                    _ => rng.range(0, 3) as u32 * rng.range(0, 1) as u32,
                })
                .collect();
            let mut seen = std::collections::HashSet::new();
            let mut backends = Vec::with_capacity(n);
            while backends.len() < n {
                let addr = if rng.range(0, 3) == 0 {
                    IpAddr::V6(Ipv6Addr::from(u128::from(rng.next()) | 0x2001_0db8 << 96))
                } else {
                    IpAddr::V4(Ipv4Addr::from(rng.next() as u32))
                };
                let port = rng.range(1, 4) as u16;
                if seen.insert((addr, port)) {
                    backends.push(MaglevBackend::new(addr, port, weights[backends.len()]));
                }
            }
            match MaglevRing::build(&backends, m) {
                Ok(ring) => assert_eq!(
                    slots_of(&ring),
                    reference(&backends, m),
                    "case {case}: M={m} N={n} regime {regime}"
                ),
                Err(e) => {
                    assert!(backends.iter().all(|b| b.weight == 0), "case {case}: {e}");
                    assert_eq!(e, MaglevError::ZeroTotalWeight { backends: n });
                }
            }
            case += 1;
        }
    }
    // The benchmark's shapes at the default size, where every phase of the
    // build runs at full length. (The reference is slow for one heavy
    // backend among many: a round per turn of the heavy one.)
    let shapes = [
        ("equal", &[2u32, 10, 100, 1000, 5000][..]),
        ("1 to 4", &[10, 1000, 5000]),
        ("one at 1000x", &[2, 10, 100]),
    ];
    for (shape, sizes) in shapes {
        for &n in sizes {
            let weight = |i: u32| match shape {
                "equal" => 1,
                "1 to 4" => 1 + i % 4,
                _ => {
                    if i == 0 {
                        1000
                    } else {
                        1
                    }
                }
            };
            let backends: Vec<_> = (0..n).map(|i| v4(i, 8080, weight(i))).collect();
            let ring = MaglevRing::build(&backends, DEFAULT_RING_SIZE).unwrap();
            assert_eq!(
                slots_of(&ring),
                reference(&backends, DEFAULT_RING_SIZE),
                "{shape}, N={n}"
            );
        }
    }
    // Beyond 2^16 + 1 slots, where the mirrored map, the window indices and
    // the tail's packed keys have the least room.
    for (n, m) in [(300u32, 131_071u32), (2000, 262_139)] {
        let backends: Vec<_> = (0..n).map(|i| v4(i, 8080, 1 + i % 3)).collect();
        let ring = MaglevRing::build(&backends, m).unwrap();
        assert_eq!(slots_of(&ring), reference(&backends, m), "N={n} M={m}");
    }
}
