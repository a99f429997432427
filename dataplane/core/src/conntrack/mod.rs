//! The per-worker connection-tracking table.
//!
//! [`Conntrack`] owns every tracked connection of one worker. It is used
//! through `&mut` by that worker only: no lock, no atomics, no interior
//! mutability. Invariants:
//!
//! - **Fixed memory.** Capacity is set at construction; the slab of entries
//!   and the lookup index are allocated then and never again. Nothing here
//!   allocates after [`Conntrack::new`] (a counting-allocator test proves it).
//! - **Both directions in O(1).** Each connection is indexed under its
//!   original tuple (client → VIP) and its reply tuple (backend → client for
//!   DNAT, backend → SNAT endpoint for full-NAT), in one open-addressing
//!   index (linear probing by cache-line buckets, no tombstones, load ≤
//!   0.5); except
//!   that in a table built for a worker's SNAT ports
//!   ([`Conntrack::with_snat_ports`]) a full-NAT reply tuple is found by its
//!   SNAT address and port instead, in a cell of its own (`reply_ports.rs`),
//!   so a full-NAT connection takes one index entry, not two.
//! - **Addresses, not indices.** An entry stores the backend's address and
//!   port, never an index into a snapshot, so established connections
//!   survive any snapshot swap.
//! - **Separate IPv4 and IPv6 storage.** An IPv4 connection costs
//!   [`Conntrack::BYTES_PER_CONN_V4`] = 96 bytes (a 64-byte entry, one
//!   cache line, + 4 index slots × 8 bytes), an IPv6 one
//!   [`Conntrack::BYTES_PER_CONN_V6`] = 160 bytes (128 + 32); a test
//!   recomputes both with `size_of`. The index is sized for DNAT, two
//!   entries a connection; full-NAT connections, which take one, leave it
//!   emptier (shorter probe runs). The reply cells of
//!   [`Conntrack::with_snat_ports`] are extra: a fixed amount per SNAT
//!   address (`reply_ports.rs`), not per connection.
//! - **A flow cache per entry.** Each entry keeps, per direction, the next
//!   hop the worker's IPv4 fast path resolved for it and the
//!   [`Snapshot::epoch`](crate::snapshot::Snapshot::epoch) it did so under
//!   (`Conntrack::touch_cached_v4`); a new entry starts uncached.
//!
//! # Expiry
//! An entry expires a state-dependent idle time after its last packet
//! ([`Timeouts`], IPVS-like defaults). [`Conntrack::expire`] sweeps the slab
//! with a cursor, examining at most `budget` slots per call, so the work per
//! housekeeping tick is bounded; a full sweep takes
//! `(capacity_v4 + capacity_v6) / budget` calls, and the caller should pick
//! `budget` so that this period is short next to the smallest timeout. An
//! entry is therefore removed no earlier than its expiry and at most one
//! sweep period later. Until the sweep reaches it, an expired entry still
//! answers lookups and a packet revives it (same backend, fresh timeout),
//! which is what a client expects of a connection that was merely idle;
//! but a client SYN without ACK, a new connection on the same ports, ends
//! it instead ([`Conntrack::reopened_by_syn`]), as the sweep would have.
//!
//! # Eviction
//! When a family's slab is full, [`Conntrack::insert`] looks at a window of
//! [`Config::evict_window`] slots from a CLOCK hand (which then moves to
//! just past the victim, or past the window if it evicted nothing), and
//! evicts the first already-expired or embryonic entry (a handshake not
//! finished, TCP established by the client alone, unreplied ICMP, UDP
//! that is not a stream: [`EvictClass::Embryonic`]) it meets, as Linux's conntrack drops the first
//! unassured entry of a chain; if the window holds neither, the closing
//! one (FIN-wait … time-wait, RST-closed) closest to expiry. In a table
//! that stays full, a new entry takes its victim's slot, behind the hand,
//! so the slots ahead of the hand were filled longest ago; under a SYN
//! flood an eviction examines one slot.
//! Established entries (and replied UDP/ICMP) are never evicted
//! before they expire: if the window holds nothing else, the insert fails
//! with [`InsertError::Full`] and the caller forwards DNAT statelessly or
//! drops full-NAT with `ConntrackFull`. The bounded window keeps the cost of
//! a new flow under pressure constant at the price of sometimes failing
//! while an evictable entry exists elsewhere.
//!
//! Entry ids ([`EntryId`]) are valid until their entry is removed, expired
//! or evicted; a slot is reused after that, so a worker must not keep an
//! id across calls to `insert`, `expire` or `remove`.

mod insert;
#[cfg(test)]
mod model_tests;
mod reply_ports;
mod state;
mod table;
#[cfg(test)]
mod tests;
mod v4;
mod v6;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub(crate) use insert::Evicted;
pub use state::{tcp_flags, ConnState, EvictClass, Timeouts, UDP_STREAM_AFTER};
pub(crate) use v4::KeyV4;
pub use v4::RewriteV4;
pub use v6::RewriteV6;

use crate::flow::{FlowKey, FlowKeyV4, FlowKeyV6, Proto, SnatPorts};
use crate::nat::NatDelta;
use crate::prefetch::Prefetch;
use crate::time::Tick;
use reply_ports::ReplyPorts;
use table::{Addr, HopCache, Loc, RawKey, Slot, Table, FIN_BY_REPLY, FULL_NAT};

/// An address and port.
pub type Endpoint = (IpAddr, u16);

/// Which way a packet travels relative to the connection's first packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Client → frontend, as the connection was opened.
    Original,
    /// Backend → client (DNAT) or backend → SNAT endpoint (full-NAT).
    Reply,
}

/// A handle to a tracked connection; see the module docs for its lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EntryId(u32);

/// Where a key is looked for in its family's table (its hash, and its
/// reply cell if it has one), from [`Conntrack::lookup_burst_hashed`]; see
/// [`Conntrack::lookup_hashed`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KeyHash(Loc);

/// Keys per stage of [`Conntrack::lookup_burst`]: an rx burst.
pub const BURST: usize = 32;

/// The IPv6 table's ids carry this bit.
const V6_BIT: u32 = 1 << 31;

impl EntryId {
    /// True if the connection is IPv6.
    #[inline]
    pub fn is_v6(self) -> bool {
        self.0 & V6_BIT != 0
    }
}

/// An IPv4 [`Nat`] in IPv4 types, for [`Conntrack::insert_missed_v4`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NatV4 {
    /// The chosen backend.
    pub(crate) backend: (Ipv4Addr, u16),
    /// The balancer's source endpoint towards the backend (full-NAT), or
    /// `None` (DNAT).
    pub(crate) snat: Option<(Ipv4Addr, u16)>,
}

/// An IPv6 [`Nat`] in IPv6 types, for [`Conntrack::insert_missed_v6`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NatV6 {
    /// The chosen backend.
    pub(crate) backend: (Ipv6Addr, u16),
    /// The balancer's source endpoint towards the backend (full-NAT), or
    /// `None` (DNAT).
    pub(crate) snat: Option<(Ipv6Addr, u16)>,
}

/// The translation applied to a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Nat {
    /// Destination NAT: the VIP endpoint becomes the backend; the client
    /// address is kept, so replies come back addressed to the client.
    Dnat {
        /// The chosen backend.
        backend: Endpoint,
    },
    /// Full NAT: destination as in DNAT, and the source becomes `snat`, a
    /// balancer-owned endpoint whose port encodes the owning worker.
    FullNat {
        /// The chosen backend.
        backend: Endpoint,
        /// The balancer's source endpoint towards the backend.
        snat: Endpoint,
    },
}

impl Nat {
    /// The backend endpoint.
    #[inline]
    pub fn backend(&self) -> Endpoint {
        match *self {
            Nat::Dnat { backend } | Nat::FullNat { backend, .. } => backend,
        }
    }

    /// The SNAT endpoint, for full-NAT.
    #[inline]
    pub fn snat(&self) -> Option<Endpoint> {
        match *self {
            Nat::Dnat { .. } => None,
            Nat::FullNat { snat, .. } => Some(snat),
        }
    }

    /// The key the backend's replies carry for a connection opened with
    /// `original`; `None` if an address family differs from the key's.
    ///
    /// For ICMP echo the "ports" are the identifier: pass the backend port
    /// (and SNAT port) equal to the identifier the backend will see.
    pub fn reply_key(&self, original: &FlowKey) -> Option<FlowKey> {
        let dst = self.snat().unwrap_or(original.src());
        FlowKey::new(self.backend(), dst, original.proto())
    }
}

/// Two opaque values the caller stores with a connection, e.g. the counter
/// slots of its frontend and backend, so that expiry can decrement gauges
/// without a lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Tags {
    /// Conventionally the frontend's counter slot.
    pub frontend: u32,
    /// Conventionally the backend's counter slot.
    pub backend: u32,
}

/// A decoded copy of a tracked connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The original tuple: client → VIP.
    pub original: FlowKey,
    /// The translation.
    pub nat: Nat,
    /// The protocol state.
    pub state: ConnState,
    /// The caller's tags.
    pub tags: Tags,
    /// When the entry expires unless another packet comes.
    pub expires: Tick,
}

impl Entry {
    /// The reply tuple (what the backend sends).
    pub fn reply(&self) -> FlowKey {
        // Families were checked on insert.
        self.nat
            .reply_key(&self.original)
            .unwrap_or(self.original.reversed())
    }
}

/// The addresses a packet of a connection must carry after translation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rewrite {
    /// New source endpoint.
    pub src: Endpoint,
    /// New destination endpoint.
    pub dst: Endpoint,
}

/// Construction parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Maximum IPv4 connections (at most [`Conntrack::MAX_CAPACITY`]).
    pub capacity_v4: u32,
    /// Maximum IPv6 connections (at most [`Conntrack::MAX_CAPACITY`]).
    pub capacity_v6: u32,
    /// Idle timeouts per state.
    pub timeouts: Timeouts,
    /// Slots examined per eviction search (default 32).
    pub evict_window: u32,
    /// Seed of the lookup hash. Give each process a random one: with a
    /// known seed, a client choosing its ports could aim for long probe runs.
    pub hash_seed: u64,
}

impl Config {
    /// A configuration with the given capacities and defaults elsewhere
    /// (seed 0: set [`Config::hash_seed`] in production).
    pub fn new(capacity_v4: u32, capacity_v6: u32) -> Config {
        Config {
            capacity_v4,
            capacity_v6,
            timeouts: Timeouts::default(),
            evict_window: 32,
            hash_seed: 0,
        }
    }
}

/// Why [`Conntrack::new`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NewError {
    /// A capacity above [`Conntrack::MAX_CAPACITY`].
    #[error("conntrack capacity {capacity} exceeds the maximum {max}")]
    CapacityTooLarge {
        /// The capacity asked for.
        capacity: u32,
        /// The maximum.
        max: u32,
    },
    /// More SNAT addresses of a family than the reply cells take (64), or a
    /// duplicate ([`SnatPorts`] refuses both already).
    #[error("too many or duplicate SNAT addresses for the reply cells")]
    SnatAddresses,
}

/// Why [`Conntrack::insert`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InsertError {
    /// The table is full and the eviction window held only established
    /// entries.
    #[error("conntrack table full")]
    Full,
    /// The original tuple is already tracked.
    #[error("flow already tracked")]
    Exists,
    /// The reply tuple collides with a tracked tuple (e.g. two VIPs DNATed
    /// to one backend by the same client endpoint) or with the original
    /// tuple itself; the replies could not be told apart.
    #[error("reply tuple collides with a tracked flow")]
    ReplyConflict,
    /// A NAT address is not of the flow's address family.
    #[error("NAT address family differs from the flow's")]
    FamilyMismatch,
}

/// What one [`Conntrack::expire`] call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExpireStats {
    /// Slab slots examined (at most the budget).
    pub examined: usize,
    /// Entries removed.
    pub expired: usize,
}

/// Counters, cumulative since construction (occupancy is current).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConntrackStats {
    /// IPv4 connections tracked now.
    pub occupancy_v4: u64,
    /// IPv6 connections tracked now.
    pub occupancy_v6: u64,
    /// Successful inserts.
    pub inserts: u64,
    /// Inserts refused with [`InsertError::Full`].
    pub insert_full: u64,
    /// Inserts refused with [`InsertError::Exists`] or
    /// [`InsertError::ReplyConflict`], each call (the worker may try a
    /// new connection more than once: `Conntrack::take_expired_in_way`).
    pub insert_exists: u64,
    /// Inserts refused with [`InsertError::FamilyMismatch`].
    pub insert_invalid: u64,
    /// Embryonic entries evicted.
    pub evicted_embryonic: u64,
    /// Closing entries evicted.
    pub evicted_closing: u64,
    /// Expired entries evicted by an insert before the sweep reached them.
    pub evicted_expired: u64,
    /// Entries removed by [`Conntrack::expire`].
    pub expired: u64,
    /// Entries removed by [`Conntrack::remove`].
    pub removed: u64,
}

// The memory budget: an IPv4 connection, both directions indexed, fits in
// 96 bytes. Checked at compile time so a field added to the entry cannot
// silently break it.
const _: () = assert!(Conntrack::BYTES_PER_CONN_V4 <= 96);

/// The per-worker connection table; see the module docs.
#[derive(Debug)]
pub struct Conntrack {
    v4: Table<[u8; 4]>,
    v6: Table<[u8; 16]>,
    timeouts: Timeouts,
    timeout_ms: [u64; ConnState::COUNT],
    evict_window: u32,
    /// Expiry cursor over slots `0..cap_v4` (IPv4) then `cap_v4..cap_v4+cap_v6`.
    sweep: u64,
    /// [`Conntrack::end_udp_where`]'s cursor, over the same positions.
    scan: u64,
    stats: ConntrackStats,
}

/// Runs `$body` with `$s` bound to the in-use slot of `$id` in whichever
/// table it names (`get` or `get_mut`), giving `Option<result>`.
macro_rules! with_slot {
    ($self:ident . $get:ident ($id:expr), |$s:ident| $body:expr) => {{
        let id: EntryId = $id;
        if id.0 & V6_BIT == 0 {
            $self.v4.$get(id.0).map(|$s| $body)
        } else {
            $self.v6.$get(id.0 & !V6_BIT).map(|$s| $body)
        }
    }};
}

impl Conntrack {
    /// The largest capacity per family.
    pub const MAX_CAPACITY: u32 = 1 << 30;
    /// Bytes per IPv4 connection: entry plus its share of the index.
    pub const BYTES_PER_CONN_V4: usize = table::bytes_per_conn::<[u8; 4]>();
    /// Bytes per IPv6 connection: entry plus its share of the index.
    pub const BYTES_PER_CONN_V6: usize = table::bytes_per_conn::<[u8; 16]>();

    /// Allocates a table for `config`'s capacities; the only allocation.
    /// Every reply key goes in the hashed index: see
    /// [`Conntrack::with_snat_ports`] for a worker's table.
    pub fn new(config: Config) -> Result<Conntrack, NewError> {
        Self::build(config, ReplyPorts::none(), ReplyPorts::none())
    }

    /// [`Conntrack::new`] for the worker whose SNAT ports are `snat`: the
    /// reply keys of its full-NAT connections (destination one of `snat`'s
    /// addresses and a port of its share) are kept in cells of their own,
    /// one per (address, protocol, port), and not in the hashed index
    /// (`reply_ports.rs`: memory, and what is routed there).
    ///
    /// The one difference callers see: two connections whose reply keys
    /// share such a destination are refused
    /// ([`InsertError::ReplyConflict`]), even towards different backends,
    /// which `snat` never gives this worker's connections.
    pub fn with_snat_ports(config: Config, snat: &SnatPorts) -> Result<Conntrack, NewError> {
        let (mask, worker) = (snat.port_mask(), snat.worker().0);
        let v4: Vec<[u8; 4]> = snat
            .addresses()
            .iter()
            .filter_map(|a| <[u8; 4]>::from_ip(*a))
            .collect();
        let v6: Vec<[u8; 16]> = snat
            .addresses()
            .iter()
            .filter_map(|a| <[u8; 16]>::from_ip(*a))
            .collect();
        Self::build(
            config,
            ReplyPorts::new(&v4, mask, worker).map_err(|_| NewError::SnatAddresses)?,
            ReplyPorts::new(&v6, mask, worker).map_err(|_| NewError::SnatAddresses)?,
        )
    }

    fn build(
        config: Config,
        ports_v4: ReplyPorts<[u8; 4]>,
        ports_v6: ReplyPorts<[u8; 16]>,
    ) -> Result<Conntrack, NewError> {
        for capacity in [config.capacity_v4, config.capacity_v6] {
            if capacity > Self::MAX_CAPACITY {
                return Err(NewError::CapacityTooLarge {
                    capacity,
                    max: Self::MAX_CAPACITY,
                });
            }
        }
        let mut seed = config.hash_seed;
        let mut seeds = || [(); 4].map(|_| splitmix64(&mut seed));
        Ok(Conntrack {
            v4: Table::new(config.capacity_v4, seeds(), ports_v4),
            v6: Table::new(config.capacity_v6, seeds(), ports_v6),
            timeouts: config.timeouts,
            timeout_ms: config.timeouts.millis_table(),
            evict_window: config.evict_window,
            sweep: 0,
            scan: 0,
            stats: ConntrackStats::default(),
        })
    }

    /// The timeouts in force.
    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// Connections tracked now, both families.
    pub fn len(&self) -> usize {
        self.v4.len() as usize + self.v6.len() as usize
    }

    /// True if nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (IPv4, IPv6) capacities.
    pub fn capacity(&self) -> (u32, u32) {
        (self.v4.capacity(), self.v6.capacity())
    }

    /// Counters, with the current occupancy.
    pub fn stats(&self) -> ConntrackStats {
        ConntrackStats {
            occupancy_v4: self.v4.len() as u64,
            occupancy_v6: self.v6.len() as u64,
            ..self.stats
        }
    }

    /// Finds the connection a packet with `key` belongs to, and which way
    /// it travels. Expired entries not yet swept still match (module docs).
    #[inline(always)]
    pub fn lookup(&self, key: &FlowKey) -> Option<(EntryId, Direction)> {
        match key {
            FlowKey::V4(k) => {
                let k = raw_v4(k);
                self.v4.find(&k, self.v4.locate(&k)).map(|(i, d)| (EntryId(i), d))
            }
            FlowKey::V6(k) => {
                let k = raw_v6(k);
                self.v6
                    .find(&k, self.v6.locate(&k))
                    .map(|(i, d)| (EntryId(i | V6_BIT), d))
            }
        }
    }

    /// [`Conntrack::lookup`] for many keys at once: `out[i]` receives the
    /// result for `keys[i]` (extra elements of the longer slice are left
    /// alone).
    ///
    /// At a million connections a lookup costs two dependent cache misses
    /// (index slot or reply cell, then entry). This first warms the index
    /// slots (or cells) of up to [`BURST`] keys, then reads them and warms
    /// the entries they name,
    /// then does the lookups on warm lines, so the misses of a burst
    /// overlap. `p` says how a line is warmed ([`crate::prefetch`]).
    pub fn lookup_burst(
        &self,
        p: &impl Prefetch,
        keys: &[FlowKey],
        out: &mut [Option<(EntryId, Direction)>],
    ) {
        let mut hashes = [KeyHash::default(); BURST];
        for (keys, out) in keys.chunks(BURST).zip(out.chunks_mut(BURST)) {
            self.lookup_burst_hashed(p, keys, out, &mut hashes);
        }
    }

    /// [`Conntrack::lookup_burst`] of at most [`BURST`] keys that also
    /// stores each key's table hash in `hashes[i]`, for
    /// [`Conntrack::lookup_hashed`] to look the same key up again later
    /// without hashing it (the burst path, after its inserts or evictions).
    /// Handles the first `min` of the three lengths and of [`BURST`].
    #[inline]
    pub(crate) fn lookup_burst_hashed(
        &self,
        p: &impl Prefetch,
        keys: &[FlowKey],
        out: &mut [Option<(EntryId, Direction)>],
        hashes: &mut [KeyHash],
    ) {
        let n = keys.len().min(out.len()).min(hashes.len()).min(BURST);
        let (keys, out, hashes) = (&keys[..n], &mut out[..n], &mut hashes[..n]);
        for (k, h) in keys.iter().zip(hashes.iter_mut()) {
            h.0 = match k {
                FlowKey::V4(k) => {
                    let h = self.v4.locate(&raw_v4(k));
                    self.v4.prefetch_home(p, h);
                    h
                }
                FlowKey::V6(k) => {
                    let h = self.v6.locate(&raw_v6(k));
                    self.v6.prefetch_home(p, h);
                    h
                }
            };
        }
        let mut peeked = [0u32; BURST];
        for ((k, h), v) in keys.iter().zip(hashes.iter()).zip(peeked.iter_mut()) {
            *v = match k {
                FlowKey::V4(_) => {
                    let v = self.v4.peek(h.0);
                    self.v4.prefetch_slot(p, v);
                    v
                }
                FlowKey::V6(_) => {
                    let v = self.v6.peek(h.0);
                    self.v6.prefetch_slot(p, v);
                    v
                }
            };
        }
        // Nothing changed since the peeks: each lookup starts from its own.
        for (((k, h), o), &v) in keys.iter().zip(hashes.iter()).zip(out.iter_mut()).zip(&peeked) {
            *o = match k {
                FlowKey::V4(k) => self
                    .v4
                    .find_peeked(&raw_v4(k), h.0, v)
                    .map(|(i, d)| (EntryId(i), d)),
                FlowKey::V6(k) => self
                    .v6
                    .find_peeked(&raw_v6(k), h.0, v)
                    .map(|(i, d)| (EntryId(i | V6_BIT), d)),
            };
        }
    }

    /// [`Conntrack::lookup`] of `key` with its hash from
    /// [`Conntrack::lookup_burst_hashed`] (of the same key: any other hash
    /// gives a wrong answer). The hash depends only on the key and the
    /// table's construction, so it stays valid whatever is inserted or
    /// removed.
    #[inline(always)]
    pub(crate) fn lookup_hashed(&self, key: &FlowKey, hash: KeyHash) -> Option<(EntryId, Direction)> {
        match key {
            FlowKey::V4(k) => self.v4.find(&raw_v4(k), hash.0).map(|(i, d)| (EntryId(i), d)),
            FlowKey::V6(k) => self
                .v6
                .find(&raw_v6(k), hash.0)
                .map(|(i, d)| (EntryId(i | V6_BIT), d)),
        }
    }

    /// Starts the record of inserted keys that
    /// [`Conntrack::maybe_inserted_since_mark`] reads (the burst path marks
    /// after its lookups).
    #[inline]
    pub(crate) fn mark(&mut self) {
        self.v4.mark();
        self.v6.mark();
    }

    /// Whether an entry was removed or evicted since the last
    /// [`Conntrack::mark`]: a lookup that hit before it may name a slot
    /// that another connection now holds.
    #[inline(always)]
    pub(crate) fn discarded_since_mark(&self) -> bool {
        self.v4.discarded_since_mark() || self.v6.discarded_since_mark()
    }

    /// [`Conntrack::discarded_since_mark`] for IPv4 entries alone (the ids
    /// of the two families never overlap).
    #[inline(always)]
    pub(crate) fn discarded_since_mark_v4(&self) -> bool {
        self.v4.discarded_since_mark()
    }

    /// Whether a client SYN (without ACK) that found entry `id` in its
    /// original direction at `now` opens a new connection instead, as
    /// Linux's conntrack reopens one: the entry is closing (LAST_ACK,
    /// TIME_WAIT, CLOSE), or expired and not yet swept (Linux never finds
    /// those; here a SYN would otherwise revive the old backend, perhaps
    /// drained or deleted since, and its SNAT pair). False for a stale id.
    /// Closing entries keep no next hop in the flow cache
    /// (`Conntrack::set_cached_hop_v4`, `_v6`) and the cache does not
    /// answer for an expired one (`Conntrack::touch_cached_v4`, `_v6`), so
    /// the fast paths meet both on their uncached branch only.
    #[inline]
    pub fn reopened_by_syn(&self, id: EntryId, now: Tick) -> bool {
        with_slot!(self.get(id), |s| reopens(s.state) || s.expires <= now.0).unwrap_or(false)
    }

    /// False only if `key` (with `hash` from
    /// [`Conntrack::lookup_burst_hashed`]) was not inserted, in either
    /// direction, since the last [`Conntrack::mark`]: a lookup that missed
    /// before the mark still misses (removals never add a key). True
    /// for some keys that were not inserted (a 1024-bit filter of hashes,
    /// ~3% of keys over a burst of inserts on average).
    #[inline(always)]
    pub(crate) fn maybe_inserted_since_mark(&self, key: &FlowKey, hash: KeyHash) -> bool {
        match key {
            FlowKey::V4(_) => self.v4.maybe_indexed_since_mark(hash.0.hash),
            FlowKey::V6(_) => self.v6.maybe_indexed_since_mark(hash.0.hash),
        }
    }

    /// A decoded copy of the connection, `None` for a stale id.
    pub fn get(&self, id: EntryId) -> Option<Entry> {
        with_slot!(self.get(id), |s| decode(s))
    }

    /// The connection's translation.
    #[inline]
    pub fn nat(&self, id: EntryId) -> Option<Nat> {
        with_slot!(self.get(id), |s| decode_nat(s))
    }

    /// The endpoints a packet travelling `dir` must carry after translation:
    /// original → (client or SNAT) to backend; reply → VIP to client.
    #[inline]
    pub fn rewrite(&self, id: EntryId, dir: Direction) -> Option<Rewrite> {
        with_slot!(self.get(id), |s| {
            let (src, dst) = raw_rewrite(s, dir);
            Rewrite {
                src: (src.0.to_ip(), src.1),
                dst: (dst.0.to_ip(), dst.1),
            }
        })
    }

    /// The caller's tags.
    #[inline]
    pub fn tags(&self, id: EntryId) -> Option<Tags> {
        with_slot!(self.get(id), |s| Tags {
            frontend: s.tags[0],
            backend: s.tags[1]
        })
    }

    /// Replaces the caller's tags; false for a stale id.
    pub fn set_tags(&mut self, id: EntryId, tags: Tags) -> bool {
        with_slot!(self.get_mut(id), |s| s.tags = [tags.frontend, tags.backend]).is_some()
    }

    /// The protocol state.
    #[inline]
    pub fn state(&self, id: EntryId) -> Option<ConnState> {
        with_slot!(self.get(id), |s| ConnState::from_u8(s.state))
    }

    /// Accounts one packet of the connection travelling `dir`: advances the
    /// state machine (`tcp_flags` is ignored for UDP and ICMP) and restarts
    /// the idle timeout of the resulting state. Returns the new state,
    /// `None` for a stale id.
    #[inline]
    pub fn on_packet(&mut self, id: EntryId, dir: Direction, tcp_flags: u8, now: Tick) -> Option<ConnState> {
        let timeout_ms = &self.timeout_ms;
        with_slot!(self.get_mut(id), |s| {
            advance(s, dir, tcp_flags, now, timeout_ms)
        })
    }

    /// [`Conntrack::on_packet`] and [`Conntrack::tags`] in one visit to
    /// the entry, for the per-packet path: advances the state, restarts the
    /// timeout and returns the caller's tags; `None` for a stale id.
    #[inline]
    pub fn touch(&mut self, id: EntryId, dir: Direction, tcp_flags: u8, now: Tick) -> Option<Tags> {
        let timeout_ms = &self.timeout_ms;
        with_slot!(self.get_mut(id), |s| {
            advance(s, dir, tcp_flags, now, timeout_ms);
            Tags {
                frontend: s.tags[0],
                backend: s.tags[1],
            }
        })
    }

    /// Stops tracking a connection, returning it (so the caller can release
    /// its SNAT port); `None` for a stale id.
    pub fn remove(&mut self, id: EntryId) -> Option<Entry> {
        let e = if id.0 & V6_BIT == 0 {
            self.v4.remove(id.0).map(|s| decode(&s))
        } else {
            self.v6.remove(id.0 & !V6_BIT).map(|s| decode(&s))
        };
        self.stats.removed += e.is_some() as u64;
        e
    }

    /// Examines at most `budget` slab slots from the sweep cursor (IPv4
    /// slots, then IPv6, wrapping around) and removes every entry whose
    /// expiry is at or before `now`, passing each to `on_expired` first.
    pub fn expire(&mut self, now: Tick, budget: usize, on_expired: impl FnMut(&Entry)) -> ExpireStats {
        let st = walk(
            &mut self.v4,
            &mut self.v6,
            &mut self.sweep,
            budget,
            &mut Expired(now.0),
            on_expired,
        );
        self.stats.expired += st.expired as u64;
        st
    }

    /// Examines at most `budget` slab slots from a cursor of its own (the
    /// expiry sweep's is untouched; same order, wrapping around) and
    /// removes every UDP entry that `ends` picks, passing it to `on_ended`
    /// first (to release its SNAT port). Other entries cost one byte
    /// compare; UDP ones are decoded for `ends`.
    pub fn end_udp_where(
        &mut self,
        budget: usize,
        ends: impl FnMut(&Entry) -> bool,
        on_ended: impl FnMut(&Entry),
    ) -> ExpireStats {
        let st = walk(
            &mut self.v4,
            &mut self.v6,
            &mut self.scan,
            budget,
            &mut UdpWhere(ends),
            on_ended,
        );
        self.stats.removed += st.expired as u64;
        st
    }

    /// Checks the tables' internal invariants; for tests.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        self.v4.check();
        self.v6.check();
    }
}

/// Whether a client SYN on the ports of an entry in `state` opens a new
/// connection ([`Conntrack::reopened_by_syn`]).
#[inline]
fn reopens(state: u8) -> bool {
    matches!(
        ConnState::from_u8(state),
        ConnState::TcpLastAck | ConnState::TcpTimeWait | ConnState::TcpClose
    )
}

/// One packet's effect on an entry: state machine and timeout.
#[inline(always)]
fn advance<A: Addr>(
    s: &mut Slot<A>,
    dir: Direction,
    tcp_flags: u8,
    now: Tick,
    timeout_ms: &[u64; ConnState::COUNT],
) -> ConnState {
    // The common case, a packet of an established connection that neither
    // closes nor resets it: `step` would keep the state and the FIN owner,
    // so only the timeout restarts.
    let cur = s.state;
    let quiet = tcp_flags & (state::tcp_flags::FIN | state::tcp_flags::RST) == 0;
    if (cur == ConnState::TcpEstablished as u8 && quiet) || cur == ConnState::UdpReplied as u8 {
        s.expires = now.0.saturating_add(timeout_ms[usize::from(cur)]);
        return ConnState::from_u8(cur);
    }
    let (st, fin_by_reply) = state::step(
        ConnState::from_u8(s.state),
        dir,
        tcp_flags,
        s.flags & FIN_BY_REPLY != 0,
    );
    if st == ConnState::UdpAnswered && cur == ConnState::UdpAnswered as u8 {
        return udp_answered(s, now, timeout_ms);
    }
    s.state = st as u8;
    s.flags = (s.flags & !FIN_BY_REPLY) | if fin_by_reply { FIN_BY_REPLY } else { 0 };
    s.expires = now.0.saturating_add(timeout_ms[st as usize]);
    // A state a client SYN reopens is met on the fast path's uncached
    // branch only (`Conntrack::reopened_by_syn`).
    if reopens(s.state) {
        s.cache = HopCache::UNCACHED;
    }
    st
}

/// A packet of a UDP flow in [`ConnState::UdpAnswered`]: its timeout runs
/// from the first answer (it is not restarted), so that answer's time is
/// `expires` less the state's timeout; a packet [`state::UDP_STREAM_AFTER`]
/// or more after it makes the flow a stream. `advance` asks after `step`,
/// where the check costs an established packet least (callgrind, 1k
/// connections: +5 instructions forward and +1 reply there, +7 and +3
/// before `step`; bench/RESULTS.md). An entry already expired (quiet for
/// its timeout, not swept yet) is not promoted: it starts over as if
/// answered now, as a swept one would have started over unanswered.
#[cold]
fn udp_answered<A: Addr>(s: &mut Slot<A>, now: Tick, timeout_ms: &[u64; ConnState::COUNT]) -> ConnState {
    if s.expires <= now.0 {
        s.expires = now.0.saturating_add(timeout_ms[ConnState::UdpAnswered as usize]);
        return ConnState::UdpAnswered;
    }
    let answered = s
        .expires
        .saturating_sub(timeout_ms[ConnState::UdpAnswered as usize]);
    let after = u64::try_from(state::UDP_STREAM_AFTER.as_millis()).unwrap_or(u64::MAX);
    if now.0 < answered.saturating_add(after) {
        return ConnState::UdpAnswered;
    }
    s.state = ConnState::UdpReplied as u8;
    s.expires = now.0.saturating_add(timeout_ms[ConnState::UdpReplied as usize]);
    ConnState::UdpReplied
}

/// What a [`walk`] does at one slot of either table: remove its entry, or
/// leave it.
trait SlotOp {
    fn at<A: Addr>(&mut self, t: &mut Table<A>, idx: u32) -> Option<Entry>;
}

/// Removes an entry expired at this tick.
struct Expired(u64);

impl SlotOp for Expired {
    #[inline]
    fn at<A: Addr>(&mut self, t: &mut Table<A>, idx: u32) -> Option<Entry> {
        let s = t.get(idx)?;
        if s.expires > self.0 {
            return None;
        }
        let e = decode(s);
        t.discard(idx);
        Some(e)
    }
}

/// Removes a UDP entry that the function picks.
struct UdpWhere<F>(F);

impl<F: FnMut(&Entry) -> bool> SlotOp for UdpWhere<F> {
    #[inline]
    fn at<A: Addr>(&mut self, t: &mut Table<A>, idx: u32) -> Option<Entry> {
        let s = t.get(idx)?;
        if s.proto != Proto::Udp as u8 {
            return None;
        }
        let e = decode(s);
        if !(self.0)(&e) {
            return None;
        }
        t.discard(idx);
        Some(e)
    }
}

/// Applies `op` to at most `budget` slab slots from `cursor` (IPv4 slots,
/// then IPv6, wrapping around), passing every entry it removes to
/// `on_removed`, and moves the cursor past them.
fn walk(
    v4: &mut Table<[u8; 4]>,
    v6: &mut Table<[u8; 16]>,
    cursor: &mut u64,
    budget: usize,
    op: &mut impl SlotOp,
    mut on_removed: impl FnMut(&Entry),
) -> ExpireStats {
    let cap4 = v4.capacity() as u64;
    let total = cap4 + v6.capacity() as u64;
    let examined = (budget as u64).min(total);
    let mut removed = 0;
    let mut pos = *cursor;
    for _ in 0..examined {
        let hit = if pos < cap4 {
            op.at(v4, pos as u32)
        } else {
            op.at(v6, (pos - cap4) as u32)
        };
        if let Some(e) = hit {
            on_removed(&e);
            removed += 1;
        }
        pos += 1;
        if pos == total {
            pos = 0;
        }
    }
    *cursor = pos;
    ExpireStats {
        examined: examined as usize,
        expired: removed,
    }
}

/// The endpoints of [`Conntrack::rewrite`] in the table's raw form:
/// original → (client or SNAT) to backend; reply → VIP to client.
#[inline(always)]
fn raw_rewrite<A: Addr>(s: &Slot<A>, dir: Direction) -> ((A, u16), (A, u16)) {
    match dir {
        Direction::Original => {
            let src = if s.flags & FULL_NAT != 0 {
                (s.snat, s.snat_port)
            } else {
                (s.client, s.client_port)
            };
            (src, (s.backend, s.backend_port))
        }
        Direction::Reply => ((s.vip, s.vip_port), (s.client, s.client_port)),
    }
}

/// A packet's new (source, destination) endpoints, from [`raw_rewrite`].
type RawRewrite<A> = ((A, u16), (A, u16));

/// The flow cache's answer for a packet of the entry `s` travelling
/// `dir` under snapshot epoch `epoch` (`Conntrack::touch_cached_v4` and
/// `_v6`): if the entry is live and its cache holds, for that epoch and
/// direction, an index into `hops` whose hop `takes` the packet, accounts
/// the packet as [`Conntrack::touch`] does and returns the rewrite, the
/// hop, the tags and `dir`'s checksum change; else `None`, nothing changed.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn touch_cached<'h, A: Addr, H>(
    s: &mut Slot<A>,
    dir: Direction,
    epoch: u64,
    hops: &'h [H],
    takes: impl Fn(&H) -> bool,
    tcp_flags: u8,
    now: Tick,
    timeout_ms: &[u64; ConnState::COUNT],
) -> Option<(RawRewrite<A>, &'h H, Tags, NatDelta)> {
    // Not for an expired entry the sweep has not reached: a SYN may
    // reopen it (`reopened_by_syn`), the uncached branch decides (a
    // closing entry is never cached).
    let live = s.expires > now.0;
    let hop = hops
        .get(s.cache.get(dir, epoch).filter(|_| live)? as usize)
        .filter(|h| takes(h))?;
    let rw = raw_rewrite(s, dir);
    let delta = flip_for(dir, s.delta);
    advance(s, dir, tcp_flags, now, timeout_ms);
    let tags = Tags {
        frontend: s.tags[0],
        backend: s.tags[1],
    };
    Some((rw, hop, tags, delta))
}

/// Caches `hop` and `delta` as `dir`'s under `epoch` in the entry `s`
/// (`Conntrack::set_cached_hop_v4` and `_v6`): nothing for epoch 0 or an
/// entry a client SYN would reopen (`Conntrack::reopened_by_syn`).
#[inline(always)]
fn set_cached<A: Addr>(s: &mut Slot<A>, dir: Direction, epoch: u64, hop: u32, delta: NatDelta) {
    if epoch != 0 && !reopens(s.state) {
        s.cache.set(dir, epoch, hop);
        s.delta = flip_for(dir, delta);
    }
}

/// The entry keeps its original direction's checksum change: this maps
/// between that and `dir`'s, either way (reversing twice gives back every
/// change a rewrite returns, as none is 0; see [`NatDelta::reversed`]).
#[inline(always)]
fn flip_for(dir: Direction, delta: NatDelta) -> NatDelta {
    match dir {
        Direction::Original => delta,
        Direction::Reply => delta.reversed(),
    }
}

#[inline]
fn raw_v4(k: &FlowKeyV4) -> RawKey<[u8; 4]> {
    RawKey {
        src: k.src.octets(),
        dst: k.dst.octets(),
        sport: k.sport,
        dport: k.dport,
        proto: k.proto as u8,
    }
}

/// The raw key `src:sport → dst:dport`, IP protocol `proto`, of the
/// fast paths' accessors (`v4.rs`, `v6.rs`).
#[inline(always)]
fn raw_key<A>(src: A, dst: A, sport: u16, dport: u16, proto: u8) -> RawKey<A> {
    RawKey {
        src,
        dst,
        sport,
        dport,
        proto,
    }
}

/// [`Conntrack::warm_v4`] and [`Conntrack::warm_v6`] in their family's
/// table: warms what looking `k` up and inserting it reads, and returns
/// its place.
#[inline(always)]
fn warm_in<A: Addr>(t: &Table<A>, p: &impl Prefetch, k: RawKey<A>) -> KeyHash {
    let h = t.locate(&k);
    t.prefetch_key(p, &k, h);
    KeyHash(h)
}

/// [`Conntrack::warm_victims_v4`] and [`Conntrack::warm_victims_v6`] in
/// their family's table: `snat` gets the SNAT pair (as the family's
/// address type `I`) and protocol of each full-NAT victim.
#[inline(always)]
fn warm_victims_in<A: Addr, I: From<A>>(
    t: &Table<A>,
    p: &impl Prefetch,
    n: u32,
    mut snat: impl FnMut(I, u16, Proto),
) {
    t.warm_victims(p, n, |s| {
        if s.flags & FULL_NAT != 0 {
            snat(I::from(s.snat), s.snat_port, s.proto());
        }
    })
}

#[inline]
fn raw_v6(k: &FlowKeyV6) -> RawKey<[u8; 16]> {
    RawKey {
        src: k.src.octets(),
        dst: k.dst.octets(),
        sport: k.sport,
        dport: k.dport,
        proto: k.proto as u8,
    }
}

#[inline]
fn decode_nat<A: Addr>(s: &Slot<A>) -> Nat {
    let backend = (s.backend.to_ip(), s.backend_port);
    if s.flags & FULL_NAT != 0 {
        Nat::FullNat {
            backend,
            snat: (s.snat.to_ip(), s.snat_port),
        }
    } else {
        Nat::Dnat { backend }
    }
}

fn decode<A: Addr>(s: &Slot<A>) -> Entry {
    let proto = s.proto();
    Entry {
        original: A::flow_key(&s.original_key(), proto),
        nat: decode_nat(s),
        state: ConnState::from_u8(s.state),
        tags: Tags {
            frontend: s.tags[0],
            backend: s.tags[1],
        },
        expires: Tick(s.expires),
    }
}

/// A well-mixed sequence from one seed, to derive the hash seeds.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
