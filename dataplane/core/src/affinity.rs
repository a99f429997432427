//! Client-IP session affinity: the backend each client of a service was last
//! sent to, remembered for the service's affinity timeout.
//!
//! A service with [`SessionAffinity::ClientIp`](crate::snapshot::SessionAffinity)
//! sends every new connection of a client to the backend it *pinned* that
//! client to, as long as the pin is younger than the timeout and the backend
//! is still eligible (in the ring of the client's family). Otherwise the
//! backend is Maglev's pick for the client address alone
//! ([`client_hash`](crate::maglev::client_hash)), and the client is pinned
//! to it. Each new connection that uses a pin restarts its timeout, as
//! Kubernetes' `ClientIP` affinity does (`-m recent --set` on every new
//! connection). So a client keeps its backend across backend additions,
//! weight changes and ring resizes, which the hash alone would not, and
//! moves only when its backend leaves the ring or it has been idle for the
//! timeout.
//!
//! # One table for all workers
//!
//! Flow ownership hashes the client *endpoint* (address and port), so one
//! client's connections are spread over the workers: per-worker pins would
//! disagree after a ring change. The table is therefore shared by every
//! worker of the node (an `Arc`), without a lock:
//!
//! - Buckets of four (key word, value) pairs of `AtomicU64`, one cache
//!   line. A key word holds the pin's key, a 56-bit keyed hash of (service,
//!   client address), over a 7-bit generation and a busy bit; the value is
//!   the backend's [`backend_tag`] and the pin's expiry in seconds.
//! - A writer claims a slot by setting its busy bit (compare and exchange,
//!   so two writers never fill one slot at once), stores the value, then
//!   the new key with the generation moved on; a reader takes a value only
//!   if the slot's key word, generation included, was the same before and
//!   after reading it (a seqlock whose sequence is the generation). A
//!   writer that finds a slot of the bucket busy and none holding its key
//!   gives up, as does one that loses the race for a slot: the busy slot
//!   may be another worker pinning the same client to the same backend (the
//!   hash pick, bar a ring change at that very moment), and the next
//!   connection pins it otherwise.
//! - A restart of the timeout is a compare-and-exchange on the value alone,
//!   made only when it changes the expiry second, so a busy client does not
//!   make every worker write the line on every connection. It sets the
//!   expiry to now plus the service's current timeout, earlier than the
//!   pin's own after the timeout was lowered: a pin made under the old
//!   timeout takes the new one at its next use.
//! - Only services with affinity touch the table, and only on a connection's
//!   first packet; established traffic never reads it.
//!
//! The capacity is fixed at start. When a bucket is full, a new pin takes
//! the slot of the pin that expires first; if that one was still live, the
//! evicted client is counted (`affinity_evictions`) and will be re-pinned by
//! hash on its next connection. Expired pins are never swept: they are
//! ignored by lookups and overwritten by new pins.
//!
//! The table lives only in memory: a restart forgets every pin, and clients
//! start again from the hash pick (the same backend as before the restart
//! when the ring did not change).

use std::net::IpAddr;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::Duration;

use crate::flow::fold_mul;
use crate::Tick;

/// Pins in a table built with [`AffinityTable::new`]'s default: 256k pins,
/// 4 MiB.
pub const DEFAULT_CAPACITY: usize = 1 << 18;
/// The smallest table: one bucket per 4 pins, at least 16 buckets.
pub const MIN_CAPACITY: usize = 64;
/// The largest table: 64M pins, 1 GiB.
pub const MAX_CAPACITY: usize = 1 << 26;
/// Bytes a pin takes (key and value).
pub const BYTES_PER_PIN: usize = 16;

/// Pins per bucket: 4 keys and 4 values fill one 64-byte line.
const WAYS: usize = 4;
/// A key word's busy bit: a writer has claimed the slot and not finished.
const BUSY: u64 = 1;
/// A key word's generation: bits 1-7, moved on by every write.
const GEN: u64 = 0x7f << 1;
/// A key word's key: the top 56 bits; 0 in a slot nobody has written.
const KEY_SHIFT: u32 = 8;

/// One cache line: four keys, then their four values.
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct Bucket {
    keys: [AtomicU64; WAYS],
    vals: [AtomicU64; WAYS],
}

/// The node's client-IP affinity pins; see the module doc.
pub struct AffinityTable {
    buckets: Box<[Bucket]>,
    /// `buckets.len() - 1`.
    mask: u64,
    /// Keys the key hash, so clients cannot aim at one bucket.
    seed: u64,
}

/// The capacity and every pin written, as `key: tag@expiry` (tests compare
/// whole workers through `Debug`).
impl std::fmt::Debug for AffinityTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pins = self
            .buckets
            .iter()
            .flat_map(|b| b.keys.iter().zip(&b.vals))
            .filter_map(|(k, v)| {
                let (k, v) = (k.load(Ordering::Acquire), v.load(Ordering::Relaxed));
                (k >> KEY_SHIFT != 0)
                    .then(|| format!("{:014x}: {:08x}@{}", k >> KEY_SHIFT, v >> 32, v as u32))
            });
        f.debug_struct("AffinityTable")
            .field("capacity", &self.capacity())
            .field("pins", &pins.collect::<Vec<_>>())
            .finish()
    }
}

/// Why an [`AffinityTable`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AffinityError {
    /// The capacity is out of range.
    #[error("affinity table size {0} is out of range: {MIN_CAPACITY} to {MAX_CAPACITY} pins")]
    Capacity(usize),
}

/// A pin found by [`AffinityTable::lookup`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pin {
    /// The pinned backend's [`backend_tag`].
    pub tag: u32,
    /// When it expires, in seconds of the pipeline's clock.
    pub expires: u32,
    /// Where it was read, and the value read, for [`AffinityTable::touch`].
    at: (usize, usize),
    raw: u64,
}

/// What [`AffinityTable::pin`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pinned {
    /// The pin is stored; no live pin of another client was lost.
    Stored,
    /// The pin is stored in place of another client's live pin.
    Evicted,
    /// Another worker was writing the slot: nothing stored (that worker
    /// pins the same client, or the bucket's oldest pin).
    Raced,
}

/// The seconds of `now`, the unit of pin expiries.
#[inline]
pub fn seconds(now: Tick) -> u32 {
    // 136 years of uptime before it wraps.
    (now.as_millis() / 1000) as u32
}

/// The expiry of a pin made or used at `now` under `timeout`: in whole
/// seconds, rounded up so that the pin lives at least `timeout` (at most a
/// second more), and at least a second past `now`'s.
#[inline]
pub fn expiry(now: Tick, timeout: Duration) -> u32 {
    let ms = now
        .as_millis()
        .saturating_add(timeout.as_millis().min(u128::from(u64::MAX)) as u64);
    let s = ms.div_ceil(1000).max(now.as_millis() / 1000 + 1);
    s.min(u64::from(u32::MAX)) as u32
}

/// The tag that names a backend in a pin: a fixed hash of its address and
/// port, so a backend keeps its pins across snapshots (and a backend
/// re-created at the same address and port gets them back). Two backends of
/// one service with the same tag (odds ~n²/2³³) would share their pins.
#[inline]
pub fn backend_tag(addr: IpAddr, port: u16) -> u32 {
    let (hi, lo) = match addr {
        IpAddr::V4(a) => (0, u64::from(u32::from(a))),
        IpAddr::V6(a) => {
            let x = u128::from(a);
            ((x >> 64) as u64, x as u64)
        }
    };
    let h = mix(
        mix(mix(u64::from_le_bytes(*b"lbd:pin1"), hi), lo),
        u64::from(port),
    );
    (h >> 32) as u32
}

/// A service's [`affinity_id`](crate::snapshot::Service::affinity_id): a
/// fixed hash of its name.
pub(crate) fn affinity_id(name: &str) -> u64 {
    name.bytes()
        .fold(u64::from_le_bytes(*b"lbd:svc1"), |h, b| mix(h, u64::from(b)))
}

/// One absorb step: a wyhash-style 64×64→128 multiply, folded.
#[inline(always)]
fn mix(h: u64, w: u64) -> u64 {
    fold_mul(h ^ w, 0x9E37_79B9_7F4A_7C15)
}

impl AffinityTable {
    /// A table for at least `capacity` pins (rounded up to a power of two),
    /// all memory allocated here. `seed` keys the key hash: take it from a
    /// random source, so that clients cannot crowd one bucket.
    pub fn new(capacity: usize, seed: u64) -> Result<AffinityTable, AffinityError> {
        if !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
            return Err(AffinityError::Capacity(capacity));
        }
        let n = capacity.next_power_of_two() / WAYS;
        Ok(AffinityTable {
            buckets: (0..n).map(|_| Bucket::default()).collect(),
            mask: n as u64 - 1,
            seed,
        })
    }

    /// How many pins the table holds.
    pub fn capacity(&self) -> usize {
        self.buckets.len() * WAYS
    }

    /// The key of `client`'s pin for the service whose
    /// [`affinity_id`](crate::snapshot::Service::affinity_id) is `service`.
    /// 56 bits, never 0.
    #[inline]
    pub fn key(&self, service: u64, client: IpAddr) -> u64 {
        let (hi, lo) = match client {
            IpAddr::V4(a) => (0, u64::from(u32::from(a))),
            IpAddr::V6(a) => {
                let x = u128::from(a);
                ((x >> 64) as u64, x as u64)
            }
        };
        let h = mix(mix(mix(self.seed, service), hi), lo);
        (h >> KEY_SHIFT).max(1)
    }

    #[inline]
    fn bucket(&self, key: u64) -> (usize, &Bucket) {
        let b = (key & self.mask) as usize;
        (b, &self.buckets[b])
    }

    /// The live pin under `key` at second `now`, if any.
    #[inline]
    pub fn lookup(&self, key: u64, now: u32) -> Option<Pin> {
        let (b, bucket) = self.bucket(key);
        for w in 0..WAYS {
            let word = bucket.keys[w].load(Ordering::Acquire);
            if word >> KEY_SHIFT != key || word & BUSY != 0 {
                continue;
            }
            let raw = bucket.vals[w].load(Ordering::Relaxed);
            // Orders the value's load before the key word's second load: a
            // writer that changed the slot meanwhile set its busy bit first,
            // and left another generation.
            fence(Ordering::Acquire);
            if bucket.keys[w].load(Ordering::Relaxed) != word {
                continue;
            }
            let (tag, expires) = ((raw >> 32) as u32, raw as u32);
            return (expires > now).then_some(Pin {
                tag,
                expires,
                at: (b, w),
                raw,
            });
        }
        None
    }

    /// Sets `pin`'s expiry to `expires` if that is another second than it
    /// was: later (a restart), or earlier (the service's timeout was
    /// lowered since the pin was made or last used). Lost if another worker
    /// has rewritten the slot since `pin` was read (its write wins).
    #[inline]
    pub fn touch(&self, pin: &Pin, expires: u32) {
        if expires == pin.expires {
            return;
        }
        let new = pin.raw & !u64::from(u32::MAX) | u64::from(expires);
        let _ = self.buckets[pin.at.0].vals[pin.at.1].compare_exchange(
            pin.raw,
            new,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Pins `key` to the backend `tag` until second `expires`, `now` being
    /// the current second: over the key's own slot if it has one, else an
    /// empty slot, else the slot of the bucket's pin that expires first.
    pub fn pin(&self, key: u64, tag: u32, expires: u32, now: u32) -> Pinned {
        let (_, bucket) = self.bucket(key);
        // (way, key word seen, expiry seen)
        let mut victim: Option<(usize, u64, u32)> = None;
        let mut busy = false;
        for w in 0..WAYS {
            let word = bucket.keys[w].load(Ordering::Acquire);
            if word & BUSY != 0 {
                busy = true;
                continue;
            }
            if word >> KEY_SHIFT == key {
                victim = Some((w, word, 0));
                busy = false;
                break;
            }
            let exp = if word >> KEY_SHIFT == 0 {
                0
            } else {
                bucket.vals[w].load(Ordering::Relaxed) as u32
            };
            if victim.is_none_or(|(_, _, e)| exp < e) {
                victim = Some((w, word, exp));
            }
        }
        // A busy slot may be this very key being written elsewhere: a
        // second copy of it would waste a slot and evict another pin.
        let Some((w, seen, exp)) = victim.filter(|_| !busy) else {
            return Pinned::Raced;
        };
        if bucket.keys[w]
            .compare_exchange(seen, seen | BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Pinned::Raced;
        }
        // Orders the busy bit before the value's store, for readers.
        fence(Ordering::Release);
        bucket.vals[w].store(u64::from(tag) << 32 | u64::from(expires), Ordering::Relaxed);
        let generation = (seen + (1 << 1)) & GEN;
        bucket.keys[w].store(key << KEY_SHIFT | generation, Ordering::Release);
        let other = seen >> KEY_SHIFT;
        if other != key && other != 0 && exp > now {
            Pinned::Evicted
        } else {
            Pinned::Stored
        }
    }

    /// Live pins at second `now`: a full walk, for statistics and tests.
    pub fn live(&self, now: u32) -> usize {
        self.buckets
            .iter()
            .flat_map(|b| b.keys.iter().zip(&b.vals))
            .filter(|(k, v)| {
                let k = k.load(Ordering::Acquire);
                k >> KEY_SHIFT != 0 && k & BUSY == 0 && v.load(Ordering::Relaxed) as u32 > now
            })
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::sync::Arc;

    fn v4(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    #[test]
    fn capacity_bounds_and_rounding() {
        assert_eq!(AffinityTable::new(0, 1).unwrap_err(), AffinityError::Capacity(0));
        assert_eq!(
            AffinityTable::new(MAX_CAPACITY + 1, 1).unwrap_err().to_string(),
            format!(
                "affinity table size {} is out of range: 64 to 67108864 pins",
                MAX_CAPACITY + 1
            )
        );
        assert_eq!(AffinityTable::new(64, 1).unwrap().capacity(), 64);
        assert_eq!(AffinityTable::new(100, 1).unwrap().capacity(), 128);
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
    }

    #[test]
    fn pin_lookup_expire_and_touch() {
        let t = AffinityTable::new(64, 7).unwrap();
        let k = t.key(1, v4(1));
        assert_eq!(t.lookup(k, 0), None);
        assert_eq!(t.pin(k, 42, 10, 0), Pinned::Stored);
        let p = t.lookup(k, 9).unwrap();
        assert_eq!((p.tag, p.expires), (42, 10));
        // Expired at its expiry second.
        assert_eq!(t.lookup(k, 10), None);
        // A touch sets the expiry: back (a lowered timeout), then forward.
        t.touch(&p, 5);
        assert_eq!(t.lookup(k, 4).unwrap().expires, 5);
        assert_eq!(t.lookup(k, 5), None);
        let p = t.lookup(k, 4).unwrap();
        t.touch(&p, 20);
        assert_eq!(t.lookup(k, 19).unwrap().expires, 20);
        // A touch from a stale read is lost: the slot has moved on.
        t.touch(&p, 30);
        assert_eq!(t.lookup(k, 19).unwrap().expires, 20);
        // Re-pinning the same key replaces its backend in place.
        assert_eq!(t.pin(k, 43, 40, 19), Pinned::Stored);
        assert_eq!(t.lookup(k, 19).unwrap().tag, 43);
        assert_eq!(t.live(19), 1);
    }

    #[test]
    fn every_write_moves_the_generation_on() {
        let t = AffinityTable::new(64, 3).unwrap();
        let k = t.key(1, v4(1));
        let word = |t: &AffinityTable| {
            let (_, b) = t.bucket(k);
            b.keys
                .iter()
                .map(|w| w.load(Ordering::Relaxed))
                .find(|w| w >> KEY_SHIFT == k)
                .unwrap()
        };
        t.pin(k, 1, 10, 0);
        let first = word(&t);
        // The same key and value written again: another generation, which
        // a reader that straddled the write can tell.
        t.pin(k, 1, 10, 0);
        assert_ne!(word(&t), first);
        assert_eq!(word(&t) & !GEN, first & !GEN);
        // It wraps within its bits.
        for _ in 0..200 {
            t.pin(k, 1, 10, 0);
        }
        assert_eq!(word(&t) >> KEY_SHIFT, k);
        assert_eq!(word(&t) & BUSY, 0);
    }

    #[test]
    fn expiry_rounds_up_to_whole_seconds() {
        let s = Duration::from_secs;
        assert_eq!(expiry(Tick(0), s(60)), 60);
        // Made at 0.999 s: lives to 2 s, not 1 s.
        assert_eq!(expiry(Tick(999), s(1)), 2);
        assert_eq!(expiry(Tick(1000), s(1)), 2);
        assert_eq!(expiry(Tick(1500), Duration::from_millis(100)), 2);
        assert_eq!(expiry(Tick(5_000), Duration::ZERO), 6);
        assert_eq!(expiry(Tick(u64::MAX), s(1)), u32::MAX);
        assert_eq!(expiry(Tick(0), Duration::MAX), u32::MAX);
    }

    #[test]
    fn keys_separate_services_clients_and_seeds() {
        let t = AffinityTable::new(64, 7).unwrap();
        let u = AffinityTable::new(64, 8).unwrap();
        let a6 = IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1));
        let keys = [
            t.key(1, v4(1)),
            t.key(2, v4(1)),
            t.key(1, v4(2)),
            t.key(1, a6),
            u.key(1, v4(1)),
        ];
        for (i, a) in keys.iter().enumerate() {
            assert!(*a != 0 && *a >> 56 == 0);
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_ne!(backend_tag(v4(1), 80), backend_tag(v4(1), 81));
        assert_ne!(backend_tag(v4(1), 80), backend_tag(v4(2), 80));
    }

    /// Keys that all fall in bucket 0 of a 16-bucket table.
    fn same_bucket(t: &AffinityTable, n: usize) -> Vec<u64> {
        (0u32..)
            .map(|i| t.key(1, IpAddr::V4(Ipv4Addr::from(i))))
            .filter(|k| k & t.mask == 0)
            .take(n)
            .collect()
    }

    #[test]
    fn full_bucket_evicts_the_first_to_expire_and_counts_live_ones() {
        let t = AffinityTable::new(64, 3).unwrap();
        let k = same_bucket(&t, 6);
        for (i, &key) in k[..4].iter().enumerate() {
            assert_eq!(t.pin(key, i as u32, 100 + i as u32, 0), Pinned::Stored);
        }
        // k[0] expires first: taken, and it was live.
        assert_eq!(t.pin(k[4], 4, 200, 50), Pinned::Evicted);
        assert_eq!(t.lookup(k[0], 50), None);
        assert_eq!(t.lookup(k[4], 50).unwrap().tag, 4);
        // At second 101 k[1] (101) has expired: taking it evicts nothing live.
        assert_eq!(t.pin(k[5], 5, 300, 101), Pinned::Stored);
        assert_eq!(t.lookup(k[1], 0), None);
        for (key, tag) in [(k[2], 2), (k[3], 3), (k[4], 4), (k[5], 5)] {
            assert_eq!(t.lookup(key, 101).unwrap().tag, tag);
        }
    }

    #[test]
    fn a_claimed_slot_is_not_read_or_taken() {
        let t = AffinityTable::new(64, 3).unwrap();
        let k = same_bucket(&t, 5);
        for &key in &k[..4] {
            t.pin(key, 9, 100, 0);
        }
        // A slot claimed by a writer in flight: a pin of a key the bucket
        // does not hold waits (it may be that key being written), and the
        // other keys stay readable and writable.
        t.buckets[0].keys[0].fetch_or(BUSY, Ordering::Relaxed);
        assert_eq!(t.lookup(k[0], 0), None);
        assert_eq!(t.lookup(k[1], 0).unwrap().tag, 9);
        assert_eq!(t.pin(k[4], 1, 100, 0), Pinned::Raced);
        assert_eq!(t.pin(k[1], 2, 100, 0), Pinned::Stored);
        assert_eq!(t.lookup(k[1], 0).unwrap().tag, 2);
        // Every slot claimed.
        for w in 0..WAYS {
            t.buckets[0].keys[w].fetch_or(BUSY, Ordering::Relaxed);
        }
        assert_eq!(t.lookup(k[1], 0), None);
        assert_eq!(t.pin(k[1], 3, 100, 0), Pinned::Raced);
    }

    /// Writers on two threads hammer one bucket with pins whose value
    /// encodes their key; readers on the same threads never see a value
    /// under another key's name.
    #[test]
    fn concurrent_writers_never_tear_a_pin() {
        let t = Arc::new(AffinityTable::new(64, 5).unwrap());
        let keys: Arc<Vec<u64>> = Arc::new(same_bucket(&t, 12));
        let tag_of = |key: u64| (key >> 32) as u32 ^ key as u32;
        let threads: Vec<_> = (0..2)
            .map(|id| {
                let (t, keys) = (Arc::clone(&t), Arc::clone(&keys));
                std::thread::spawn(move || {
                    let mut seen = 0u64;
                    for i in 0..200_000usize {
                        let key = keys[(i * 7 + id * 5) % keys.len()];
                        if i % 3 == 0 {
                            t.pin(key, tag_of(key), 1 + (i % 1000) as u32, 0);
                        } else if let Some(p) = t.lookup(key, 0) {
                            assert_eq!(p.tag, tag_of(key), "a pin read under another key");
                            t.touch(&p, p.expires + 1);
                            seen += 1;
                        }
                    }
                    seen
                })
            })
            .collect();
        let seen: u64 = threads.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(seen > 0);
    }
}
