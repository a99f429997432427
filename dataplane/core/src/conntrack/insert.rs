//! How a connection gets into the table: [`Conntrack::insert`] and the
//! worker's `insert_missed` forms, and the eviction a full table makes
//! room with (the module's "Eviction" section).

use super::table::{Addr, HopCache, Loc, RawKey, Slot, Table, FULL_NAT, NEVER_EVICT};
use super::{
    decode, raw_v4, raw_v6, ConnState, Conntrack, ConntrackStats, Endpoint, Entry, EntryId, EvictClass,
    FlowKey, FlowKeyV4, InsertError, KeyHash, Nat, NatV4, NatV6, Tags, V6_BIT,
};
use core::ops::RangeInclusive;

use crate::flow::{FlowKeyV6, Proto};
use crate::nat::NatDelta;
use crate::time::Tick;

impl Conntrack {
    /// Starts tracking a connection opened by a packet with key `original`,
    /// in its protocol's initial state, expiring after that state's timeout.
    ///
    /// If the family's table is full, one entry may be evicted (module
    /// docs); it is passed to `on_evicted` first, so the caller can release
    /// its SNAT port and gauges. Nothing is evicted when the insert fails
    /// for another reason.
    pub fn insert(
        &mut self,
        original: FlowKey,
        nat: Nat,
        tags: Tags,
        now: Tick,
        mut on_evicted: impl FnMut(&Entry),
    ) -> Result<EntryId, InsertError> {
        self.insert_with(
            original,
            nat,
            tags,
            now,
            &mut Decoded(&mut on_evicted),
            false,
            None,
        )
    }

    /// [`Conntrack::insert`] of a key the caller has looked up and not
    /// found, and that has not been inserted since (the worker opens a
    /// connection only on such a miss; the burst path's filter,
    /// [`Conntrack::maybe_inserted_since_mark`], keeps it so): the key is not looked up a second time, so
    /// `Exists` is never returned (debug builds check that it would not
    /// be). The reply key is checked as always. An evicted entry is
    /// passed to `on_evicted` as what releasing it needs ([`Evicted`]),
    /// not decoded whole (~60 instructions a flood SYN).
    ///
    /// `hashes`: the hashes of an IPv4 key and of its reply key, if the
    /// caller has them (the burst path hashed both to look the key up and
    /// to warm the reply key's index slot); computed here otherwise. They
    /// must be those keys' hashes in the IPv4 table, from this table
    /// ([`Conntrack::lookup_burst_hashed`], [`Conntrack::warm_v4`]); debug
    /// builds check it. Ignored for an IPv6 key.
    pub(crate) fn insert_missed(
        &mut self,
        original: FlowKey,
        nat: Nat,
        tags: Tags,
        now: Tick,
        hashes: Option<(KeyHash, KeyHash)>,
        mut on_evicted: impl FnMut(Evicted),
    ) -> Result<EntryId, InsertError> {
        self.insert_with(
            original,
            nat,
            tags,
            now,
            &mut Released(&mut on_evicted),
            true,
            hashes,
        )
    }

    /// [`Conntrack::insert_missed`] of an IPv4 connection given as the
    /// worker's fast path has it: the key, the backend and the SNAT pair
    /// (full-NAT) as IPv4 values, so no [`FlowKey`] or [`Nat`] (with
    /// their family tags and 17-byte `IpAddr`s) is built, passed through
    /// memory and taken apart again. The same entry, checks, errors,
    /// counts and evictions as `insert_missed` of the general values.
    #[inline]
    pub(crate) fn insert_missed_v4(
        &mut self,
        original: &FlowKeyV4,
        nat: NatV4,
        tags: Tags,
        now: Tick,
        hashes: Option<(KeyHash, KeyHash)>,
        on_evicted: impl FnMut(Evicted),
    ) -> Result<EntryId, InsertError> {
        let nat = RawNat {
            backend: nat.backend.0.octets(),
            backend_port: nat.backend.1,
            snat: nat.snat.map(|(a, p)| (a.octets(), p)),
        };
        let ctx = InsertCtx::missed(tags, now, hashes, &self.timeout_ms, self.evict_window);
        insert_missed_in(
            &mut self.v4,
            raw_v4(original),
            nat,
            &ctx,
            &mut self.stats,
            on_evicted,
        )
        .map(EntryId)
    }

    /// [`Conntrack::insert_missed_v4`] for an IPv6 connection, as the
    /// worker's IPv6 fast path has it (`fast_open6.rs`): the same entry,
    /// checks, errors, counts and evictions as `insert_missed` of the
    /// general values, without building them. `hashes`: the key's and its
    /// reply key's places in the IPv6 table, if the caller has them
    /// ([`Conntrack::lookup_burst_hashed`], [`Conntrack::warm_v6`]; debug
    /// builds check them); computed here otherwise.
    #[inline]
    pub(crate) fn insert_missed_v6(
        &mut self,
        original: &FlowKeyV6,
        nat: NatV6,
        tags: Tags,
        now: Tick,
        hashes: Option<(KeyHash, KeyHash)>,
        on_evicted: impl FnMut(Evicted),
    ) -> Result<EntryId, InsertError> {
        let nat = RawNat {
            backend: nat.backend.0.octets(),
            backend_port: nat.backend.1,
            snat: nat.snat.map(|(a, p)| (a.octets(), p)),
        };
        let ctx = InsertCtx::missed(tags, now, hashes, &self.timeout_ms, self.evict_window);
        insert_missed_in(
            &mut self.v6,
            raw_v6(original),
            nat,
            &ctx,
            &mut self.stats,
            on_evicted,
        )
        .map(|i| EntryId(i | V6_BIT))
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn insert_with(
        &mut self,
        original: FlowKey,
        nat: Nat,
        tags: Tags,
        now: Tick,
        on_evicted: &mut impl OnEvicted,
        missed: bool,
        hashes_v4: Option<(KeyHash, KeyHash)>,
    ) -> Result<EntryId, InsertError> {
        let mut ctx = InsertCtx {
            tags,
            now: now.0,
            timeout_ms: &self.timeout_ms,
            window: self.evict_window,
            missed,
            hashes: None,
        };
        let r = match original {
            FlowKey::V4(k) => {
                ctx.hashes = hashes_v4.map(|(o, r)| (o.0, r.0));
                RawNat::of(&nat)
                    .ok_or(InsertError::FamilyMismatch)
                    .and_then(|n| insert_in(&mut self.v4, raw_v4(&k), n, &ctx, &mut self.stats, on_evicted))
                    .map(EntryId)
            }
            FlowKey::V6(k) => RawNat::of(&nat)
                .ok_or(InsertError::FamilyMismatch)
                .and_then(|n| insert_in(&mut self.v6, raw_v6(&k), n, &ctx, &mut self.stats, on_evicted))
                .map(|i| EntryId(i | V6_BIT)),
        };
        count_insert(&mut self.stats, &r);
        r
    }
}

impl Conntrack {
    /// After an insert of `original` with `nat` failed with
    /// [`InsertError::ReplyConflict`]: if every entry in the way of its
    /// reply key has expired (by `now`; the sweep has not reached it yet),
    /// evicts them, as a full table evicts expired entries first (counted
    /// as `evicted_expired`, each passed to `on_evicted` so the caller
    /// releases its SNAT port), and returns true: the insert can be made
    /// again. False, and nothing changed: a live entry is in the way, the
    /// key is its own reply key, or the families differ.
    ///
    /// Separate from the insert so that its code stays as it is: checking
    /// for expired entries inside the insert (6fb5934, reverted) cost every
    /// new connection 5-10 ns (bench/RESULTS.md).
    #[cold]
    #[inline(never)]
    pub(crate) fn take_expired_in_way(
        &mut self,
        original: FlowKey,
        nat: Nat,
        now: Tick,
        mut on_evicted: impl FnMut(Evicted),
    ) -> bool {
        let on_evicted = &mut Released(&mut on_evicted);
        let stats = &mut self.stats;
        match original {
            FlowKey::V4(k) => RawNat::of(&nat)
                .is_some_and(|n| take_expired_in_way(&mut self.v4, raw_v4(&k), n, now.0, stats, on_evicted)),
            FlowKey::V6(k) => RawNat::of(&nat)
                .is_some_and(|n| take_expired_in_way(&mut self.v6, raw_v6(&k), n, now.0, stats, on_evicted)),
        }
    }
}

impl Conntrack {
    /// When the worker's SNAT pairs of `proto` toward `backend`'s family
    /// are all in use: evicts one full-NAT entry of that family and
    /// protocol, so that its pair can be handed out again to a connection
    /// to `backend`, and returns it (the caller releases the pair and
    /// counts the eviction). The same choice as a full table's eviction
    /// (module docs), among the
    /// [`Config::evict_window`](super::Config::evict_window) pairs after
    /// the last one examined: the first expired or embryonic entry, else
    /// the closing one closest to expiry; never an established one, nor
    /// one to `backend` itself (its replies would match the new
    /// connection). `None` if the window holds only those, or the table
    /// has no reply cells (a table made without SNAT addresses).
    ///
    /// Without it a flood of SYNs that nothing answers holds every pair of
    /// a worker for the `tcp_syn_sent` timeout while the table is far from
    /// full, and every other full-NAT connection of the family is refused
    /// (`snat_exhausted`).
    #[cold]
    #[inline(never)]
    pub(crate) fn reclaim_snat(
        &mut self,
        backend: Endpoint,
        proto: Proto,
        ports: &RangeInclusive<u16>,
        now: Tick,
    ) -> Option<Entry> {
        let (window, stats) = (self.evict_window, &mut self.stats);
        if backend.0.is_ipv6() {
            reclaim_snat(&mut self.v6, backend, proto, ports, window, now.0, stats)
        } else {
            reclaim_snat(&mut self.v4, backend, proto, ports, window, now.0, stats)
        }
    }
}

/// [`Conntrack::reclaim_snat`] in one family's table.
fn reclaim_snat<A: Addr>(
    t: &mut Table<A>,
    backend: Endpoint,
    proto: Proto,
    ports: &RangeInclusive<u16>,
    window: u32,
    now: u64,
    stats: &mut ConntrackStats,
) -> Option<Entry> {
    let be = (A::from_ip(backend.0)?, backend.1);
    let v = t.pick_snat_victim(proto as u8, ports, window, TAKE_AT_ONCE, |s| {
        // Never toward the new connection's backend: the same pair would
        // give it the old connection's reply tuple, and that backend may
        // still answer the old one (a SYN-ACK retransmitted for a minute,
        // a late UDP answer) or hold it in TIME_WAIT.
        if (s.backend, s.backend_port) == be {
            NEVER_EVICT
        } else {
            evict_key(s.state, s.expires, now)
        }
    })?;
    let old = t.get(v)?;
    count_eviction(stats, old, now);
    let e = decode(old);
    t.discard(v);
    Some(e)
}

/// Counts the eviction of `old` at `now`: expired, embryonic or closing.
#[inline(always)]
fn count_eviction<A: Addr>(stats: &mut ConntrackStats, old: &Slot<A>, now: u64) {
    let counter = if old.expires <= now {
        &mut stats.evicted_expired
    } else if ConnState::from_u8(old.state).class() == EvictClass::Embryonic {
        &mut stats.evicted_embryonic
    } else {
        &mut stats.evicted_closing
    };
    *counter += 1;
}

/// [`Conntrack::take_expired_in_way`] in one family's table.
fn take_expired_in_way<A: Addr>(
    t: &mut Table<A>,
    key: RawKey<A>,
    nat: RawNat<A>,
    now: u64,
    stats: &mut ConntrackStats,
    on_evicted: &mut impl OnEvicted,
) -> bool {
    // The entry's reply key, as `Slot::reply_key` makes it.
    let (dst, dport) = nat.snat.unwrap_or((key.src, key.sport));
    let reply = RawKey {
        src: nat.backend,
        dst,
        sport: nat.backend_port,
        dport,
        proto: key.proto,
    };
    if reply == key {
        return false;
    }
    let in_way = t.reply_conflicting(&reply, t.locate(&reply));
    let expired = |v: u32| t.get(v).is_some_and(|s| s.expires <= now);
    if in_way == [None, None] || !in_way.iter().flatten().all(|&v| expired(v)) {
        return false;
    }
    for v in in_way.into_iter().flatten() {
        if let Some(old) = t.get(v) {
            on_evicted.evicted(old);
            stats.evicted_expired += 1;
            t.discard(v);
        }
    }
    true
}

/// The parts of an insert that do not depend on the family.
struct InsertCtx<'a> {
    tags: Tags,
    now: u64,
    timeout_ms: &'a [u64; ConnState::COUNT],
    window: u32,
    /// The caller has just looked the key up and missed.
    missed: bool,
    /// The key's and the reply key's places in the table, if the caller
    /// has them.
    hashes: Option<(Loc, Loc)>,
}

impl<'a> InsertCtx<'a> {
    /// The context of an insert of a key the caller has just looked up and
    /// missed ([`Conntrack::insert_missed_v4`], `_v6`).
    #[inline(always)]
    fn missed(
        tags: Tags,
        now: Tick,
        hashes: Option<(KeyHash, KeyHash)>,
        timeout_ms: &'a [u64; ConnState::COUNT],
        window: u32,
    ) -> Self {
        InsertCtx {
            tags,
            now: now.0,
            timeout_ms,
            window,
            missed: true,
            hashes: hashes.map(|(o, r)| (o.0, r.0)),
        }
    }
}

/// [`Conntrack::insert_missed_v4`] and [`Conntrack::insert_missed_v6`] in
/// one family's table `t`: the key and translation as its raw values.
/// Counted.
#[inline(always)]
fn insert_missed_in<A: Addr>(
    t: &mut Table<A>,
    key: RawKey<A>,
    nat: RawNat<A>,
    ctx: &InsertCtx<'_>,
    stats: &mut ConntrackStats,
    mut on_evicted: impl FnMut(Evicted),
) -> Result<u32, InsertError> {
    let r = insert_in(t, key, nat, ctx, stats, &mut Released(&mut on_evicted));
    count_insert(stats, &r);
    r
}

/// A [`Nat`] as one family's raw addresses.
#[derive(Clone, Copy)]
struct RawNat<A> {
    backend: A,
    backend_port: u16,
    snat: Option<(A, u16)>,
}

impl<A: Addr> RawNat<A> {
    /// `nat` in family `A`; `None` if an address of it is of the other.
    #[inline(always)]
    fn of(nat: &Nat) -> Option<RawNat<A>> {
        let (backend, backend_port) = nat.backend();
        let snat = match nat.snat() {
            Some((a, p)) => Some((A::from_ip(a)?, p)),
            None => None,
        };
        Some(RawNat {
            backend: A::from_ip(backend)?,
            backend_port,
            snat,
        })
    }
}

/// Counts an insert's outcome in `stats`.
#[inline(always)]
fn count_insert<T>(stats: &mut ConntrackStats, r: &Result<T, InsertError>) {
    match r {
        Ok(_) => stats.inserts += 1,
        Err(InsertError::Full) => stats.insert_full += 1,
        Err(InsertError::Exists | InsertError::ReplyConflict) => stats.insert_exists += 1,
        Err(InsertError::FamilyMismatch) => stats.insert_invalid += 1,
    }
}

fn insert_in<A: Addr>(
    t: &mut Table<A>,
    key: RawKey<A>,
    nat: RawNat<A>,
    ctx: &InsertCtx<'_>,
    stats: &mut ConntrackStats,
    on_evicted: &mut impl OnEvicted,
) -> Result<u32, InsertError> {
    let RawNat {
        backend,
        backend_port,
        snat,
    } = nat;
    let (flags, snat, snat_port) = match snat {
        Some((a, p)) => (FULL_NAT, a, p),
        None => (0, A::default(), 0),
    };
    let state = ConnState::initial(Proto::from_u8(key.proto).unwrap_or(Proto::Tcp));
    let slot = Slot {
        expires: ctx.now.saturating_add(ctx.timeout_ms[state as usize]),
        tags: [ctx.tags.frontend, ctx.tags.backend],
        client: key.src,
        vip: key.dst,
        backend,
        snat,
        client_port: key.sport,
        vip_port: key.dport,
        backend_port,
        snat_port,
        proto: key.proto,
        state: state as u8,
        flags,
        cache: HopCache::UNCACHED,
        // Filled with the flow cache (`Conntrack::set_cached_hop_v4`).
        delta: NatDelta::default(),
    };
    let reply = slot.reply_key();
    if reply == key {
        return Err(InsertError::ReplyConflict);
    }
    let (h_orig, h_reply) = match ctx.hashes {
        Some(h) => {
            debug_assert_eq!(
                h,
                (t.locate(&key), t.locate(&reply)),
                "insert_missed given wrong hashes"
            );
            h
        }
        None => (t.locate(&key), t.locate(&reply)),
    };
    if ctx.missed {
        debug_assert!(t.find(&key, h_orig).is_none(), "insert_missed of a present key");
    } else if t.find(&key, h_orig).is_some() {
        return Err(InsertError::Exists);
    }
    // A taken cell holds either this very reply key or another to the
    // same SNAT endpoint: both conflict.
    if t.reply_conflicts(&reply, h_reply) {
        return Err(InsertError::ReplyConflict);
    }
    if t.is_full() {
        let now = ctx.now;
        let victim = t.pick_victim(ctx.window, TAKE_AT_ONCE, |s| evict_key(s.state, s.expires, now));
        // The victim is read in place and then discarded, not copied out.
        let (v, old) = victim
            .and_then(|v| Some((v, t.get(v)?)))
            .ok_or(InsertError::Full)?;
        on_evicted.evicted(old);
        count_eviction(stats, old, now);
        t.discard(v);
    }
    t.insert(slot, h_orig, h_reply).ok_or(InsertError::Full)
}

/// An entry's eviction key for [`Table::pick_victim`] at `now`, smallest
/// first: expired entries (class 0), then embryonic (1), then closing (2),
/// each by earliest expiry; established ones never ([`NEVER_EVICT`]). The
/// class sits in the top two bits above the expiry, which is clamped to
/// 62 bits (146 million years of milliseconds).
#[inline(always)]
pub(super) fn evict_key(state: u8, expires: u64, now: u64) -> u64 {
    const EXPIRY: u64 = (1 << 62) - 1;
    let e = expires.min(EXPIRY);
    // Established: all ones whatever `e`.
    let live = EVICT_CLASS[usize::from(state)] | e;
    if expires <= now {
        e
    } else {
        live
    }
}

/// [`evict_key`]s below this (expired and embryonic entries) are evicted
/// as soon as the eviction scan meets one: the first from the hand, not
/// the one closest to expiry (Linux's conntrack likewise drops the first
/// unassured entry it meets). Only closing entries are ranked by expiry.
pub(super) const TAKE_AT_ONCE: u64 = 2 << 62;

/// [`evict_key`]'s class bits by state byte: a table of 256, so the
/// per-slot lookup of the eviction scan needs no bounds check; bytes that
/// are no state (never stored) count as established.
const EVICT_CLASS: [u64; 256] = {
    let mut t = [NEVER_EVICT; 256];
    let mut i = 0;
    while i < ConnState::COUNT {
        t[i] = match ConnState::ALL[i].class() {
            EvictClass::Embryonic => 1 << 62,
            EvictClass::Closing => 2 << 62,
            EvictClass::Established => NEVER_EVICT,
        };
        i += 1;
    }
    t
};

/// What an insert passes on of the entry it evicts (the `on_evicted` of
/// [`Conntrack::insert`] and [`Conntrack::insert_missed`]).
trait OnEvicted {
    fn evicted<A: Addr>(&mut self, s: &Slot<A>);
}

/// [`Conntrack::insert`]'s: the entry decoded whole.
struct Decoded<'f, F>(&'f mut F);

impl<F: FnMut(&Entry)> OnEvicted for Decoded<'_, F> {
    #[inline(always)]
    fn evicted<A: Addr>(&mut self, s: &Slot<A>) {
        (self.0)(&decode(s))
    }
}

/// [`Conntrack::insert_missed`]'s: what releasing the entry needs.
struct Released<'f, F>(&'f mut F);

impl<F: FnMut(Evicted)> OnEvicted for Released<'_, F> {
    #[inline(always)]
    fn evicted<A: Addr>(&mut self, s: &Slot<A>) {
        (self.0)(Evicted {
            proto: s.proto(),
            snat: (s.flags & FULL_NAT != 0).then(|| (s.snat.to_ip(), s.snat_port)),
        })
    }
}

/// What [`Conntrack::insert_missed`] tells its caller of an entry it
/// evicted: the SNAT pair to release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Evicted {
    /// The entry's protocol.
    pub proto: Proto,
    /// Its SNAT pair, if it was full-NAT.
    pub snat: Option<Endpoint>,
}
