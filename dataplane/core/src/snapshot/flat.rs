//! [`FlatMap`]: the immutable maps the workers' fast paths read on every
//! new connection (frontends, owned addresses, neighbors), keyed by
//! integers (IPv4 and IPv6 addresses, frontend keys).
//!
//! A snapshot's maps are built once and only read after, so they need no
//! insert or removal path, no tombstones and no growth: open addressing
//! with linear probing over a power-of-two array at most half full (an
//! eighth for the maps mostly asked about absent keys: [`FlatMap::sparse`]),
//! Fibonacci hashing (one multiply, the top bits), and the key and value
//! of an entry side by side. A lookup is a multiply, a shift and, most of
//! the time, one slot; hashbrown with its default hasher took ~17
//! instructions more a lookup on the new-connection path (callgrind: 33.5
//! fewer a new connection, which makes two; bench/RESULTS.md). The keys are the operator's configuration, not
//! packet contents, so an unkeyed hash is enough: nobody outside can
//! choose keys that collide.

use core::fmt;

/// An integer key of a [`FlatMap`].
pub(crate) trait FlatKey: Copy + Eq {
    /// The key as 64 bits, the hash's input: the key itself when it fits,
    /// else folded (keys that fold alike share a probe run, and are told
    /// apart by comparing them whole).
    fn bits(self) -> u64;
}

impl FlatKey for u32 {
    #[inline(always)]
    fn bits(self) -> u64 {
        u64::from(self)
    }
}

impl FlatKey for u64 {
    #[inline(always)]
    fn bits(self) -> u64 {
        self
    }
}

impl FlatKey for u128 {
    /// The two halves XORed: an IPv6 address's prefix and interface id.
    #[inline(always)]
    fn bits(self) -> u64 {
        (self as u64) ^ ((self >> 64) as u64)
    }
}

/// 2^64 / the golden ratio, odd: Knuth's multiplicative hash.
const FIB: u64 = 0x9E37_79B9_7F4A_7C15;

/// An immutable map from integer keys to `Copy` values. See the module doc.
#[derive(Clone)]
pub(crate) struct FlatMap<K, V> {
    /// `slots.len()` is a power of two, at least twice `len` (at least 2),
    /// so every probe run ends at a `None`.
    slots: Box<[Option<(K, V)>]>,
    /// `64 - log2(slots.len())`, below 64.
    shift: u32,
    len: usize,
}

impl<K: FlatKey, V: Copy> FlatMap<K, V> {
    /// A map of `entries`; a key given twice keeps its last value.
    pub(crate) fn new(entries: impl IntoIterator<Item = (K, V)>) -> Self {
        Self::with_room(entries, 2)
    }

    /// [`FlatMap::new`] at most an eighth full, for a map asked mostly
    /// about keys it does not hold (the owned addresses, asked about
    /// every new connection's client): a miss then ends at its home slot
    /// 7 times in 8 or more, where at up to half full the probe loop's
    /// exit is a coin toss, mispredicted.
    pub(crate) fn sparse(entries: impl IntoIterator<Item = (K, V)>) -> Self {
        Self::with_room(entries, 8)
    }

    /// A map of `entries` in at least `room` slots a key.
    fn with_room(entries: impl IntoIterator<Item = (K, V)>, room: usize) -> Self {
        let entries: Vec<(K, V)> = entries.into_iter().collect();
        let size = (entries.len() * room).max(2).next_power_of_two();
        let mut map = FlatMap {
            slots: vec![None; size].into_boxed_slice(),
            shift: 64 - size.trailing_zeros(),
            len: 0,
        };
        for (k, v) in entries {
            let mut i = map.home(k);
            loop {
                match &mut map.slots[i] {
                    Some((k2, v2)) if *k2 == k => {
                        *v2 = v;
                        break;
                    }
                    Some(_) => i = (i + 1) & (size - 1),
                    none @ None => {
                        *none = Some((k, v));
                        map.len += 1;
                        break;
                    }
                }
            }
        }
        map
    }

    /// Where `k`'s probe run starts.
    #[inline(always)]
    fn home(&self, k: K) -> usize {
        (k.bits().wrapping_mul(FIB) >> self.shift) as usize
    }

    /// The value of `k`, if it is in the map.
    #[inline(always)]
    pub(crate) fn get(&self, k: K) -> Option<&V> {
        let mask = self.slots.len() - 1;
        let mut i = self.home(k);
        loop {
            match &self.slots[i] {
                Some((k2, v)) if *k2 == k => return Some(v),
                Some(_) => i = (i + 1) & mask,
                None => return None,
            }
        }
    }

    /// The number of keys.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The values, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().filter_map(|s| s.as_ref().map(|(_, v)| v))
    }

    /// The entries, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (K, &V)> {
        self.slots.iter().filter_map(|s| s.as_ref().map(|(k, v)| (*k, v)))
    }
}

impl<K: FlatKey, V: Copy> Default for FlatMap<K, V> {
    fn default() -> Self {
        FlatMap::new([])
    }
}

impl<K: FlatKey + fmt::Debug, V: Copy + fmt::Debug> fmt::Debug for FlatMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    use proptest::prelude::*;

    #[test]
    fn an_empty_map_finds_nothing() {
        let m: FlatMap<u32, u8> = FlatMap::default();
        assert_eq!(m.len(), 0);
        assert_eq!(m.get(0), None);
        assert_eq!(m.get(u32::MAX), None);
        assert_eq!(m.values().count(), 0);
    }

    #[test]
    fn a_key_given_twice_keeps_its_last_value() {
        let m = FlatMap::new([(7u64, 1u8), (9, 2), (7, 3)]);
        assert_eq!(m.len(), 2);
        assert_eq!(m.get(7), Some(&3));
        assert_eq!(m.get(9), Some(&2));
        assert_eq!(m.values().count(), 2);
    }

    #[test]
    fn keys_differing_in_low_bits_are_all_found() {
        // One address's ports: v4 frontend keys of one VIP differ only in
        // low bits, and a /24 of neighbors in the last octet.
        let vip = 0x0a00_0064u64 << 24;
        let keys: Vec<u64> = (1..=2000u64).map(|p| vip | (p << 8) | 6).collect();
        let m = FlatMap::new(keys.iter().map(|&k| (k, k)));
        for &k in &keys {
            assert_eq!(m.get(k), Some(&k));
            assert_eq!(
                m.get(k + 1),
                None,
                "another protocol on the same port is not there"
            );
        }
        let hosts: Vec<u32> = (0..256u32).map(|h| 0x0a00_0100 | h).collect();
        let m = FlatMap::new(hosts.iter().map(|&a| (a, a)));
        assert!(hosts.iter().all(|&a| m.get(a) == Some(&a)));
        assert_eq!(m.get(0x0a00_0200), None);
    }

    #[test]
    fn wide_keys_that_fold_alike_are_told_apart() {
        // IPv6 addresses whose halves XOR to the same 64 bits share a
        // probe run; each is still found with its own value, and a key
        // that folds alike but is not there is not found.
        let base = 0xfd00_0000_0000_0000_0000_0000_0000_0001u128;
        let keys: Vec<u128> = (0..64u128).map(|i| base ^ (i << 64 | i)).collect();
        assert!(keys.iter().all(|k| k.bits() == base.bits()));
        let m = FlatMap::new(keys.iter().enumerate().map(|(i, &k)| (k, i)));
        assert_eq!(m.len(), 64);
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(m.get(k), Some(&i));
        }
        assert_eq!(m.get(base ^ (64u128 << 64 | 64)), None);
        assert_eq!(m.get(base + 1), None);
    }

    proptest! {
        /// IPv6-like keys from a few halves (many fold alike, some are
        /// equal): the same answers as a std `HashMap`.
        #[test]
        fn wide_keys_answer_as_a_hash_map(entries in prop::collection::vec((0..8u64, 0..8u64, any::<u16>()), 0..200),
                                          probes in prop::collection::vec((0..9u64, 0..9u64), 0..100)) {
            let key = |(hi, lo): (u64, u64)| (u128::from(hi) << 64) | u128::from(lo);
            let entries: Vec<(u128, u16)> = entries.into_iter().map(|(h, l, v)| (key((h, l)), v)).collect();
            let m = FlatMap::new(entries.iter().copied());
            let reference: HashMap<u128, u16> = entries.iter().copied().collect();
            prop_assert_eq!(m.len(), reference.len());
            for k in entries.iter().map(|e| e.0).chain(probes.into_iter().map(key)) {
                prop_assert_eq!(m.get(k), reference.get(&k));
            }
        }

        /// The same answers as a std `HashMap` built from the same entries,
        /// for every key given and for keys near them.
        #[test]
        fn answers_as_a_hash_map(entries in prop::collection::vec((any::<u32>(), any::<u16>()), 0..300),
                                 probes in prop::collection::vec(any::<u32>(), 0..100)) {
            let m = FlatMap::new(entries.iter().copied());
            let reference: HashMap<u32, u16> = entries.iter().copied().collect();
            prop_assert_eq!(m.len(), reference.len());
            for k in entries.iter().map(|e| e.0).chain(probes).flat_map(|k| [k, k.wrapping_add(1)]) {
                prop_assert_eq!(m.get(k), reference.get(&k));
            }
            let mut values: Vec<u16> = m.values().copied().collect();
            let mut want: Vec<u16> = reference.values().copied().collect();
            values.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(values, want);
        }

        /// A sparse map answers as one built with `new`, in at least
        /// eight slots a key.
        #[test]
        fn a_sparse_map_answers_as_a_dense_one(entries in prop::collection::vec((any::<u32>(), any::<u16>()), 0..300),
                                               probes in prop::collection::vec(any::<u32>(), 0..100)) {
            let dense = FlatMap::new(entries.iter().copied());
            let sparse = FlatMap::sparse(entries.iter().copied());
            prop_assert_eq!(sparse.len(), dense.len());
            prop_assert!(sparse.slots.len() >= 8 * sparse.len());
            for k in entries.iter().map(|e| e.0).chain(probes).flat_map(|k| [k, k.wrapping_add(1)]) {
                prop_assert_eq!(sparse.get(k), dense.get(k));
            }
        }
    }
}
