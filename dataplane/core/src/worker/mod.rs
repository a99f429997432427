//! The worker: what one lcore does with each packet, without I/O.
//!
//! `Worker::handle_packet(now, &snapshot, frame, meta)` parses the frame in
//! place, answers what the balancer answers itself (ARP, ICMP echo, neighbor
//! solicitation), checks which worker owns the flow, and translates it:
//!
//! - **forward** (client → VIP:port): conntrack hit → reuse the translation;
//!   miss → source ranges, Maglev pick (with session affinity), SNAT port for
//!   full-NAT, conntrack insert;
//! - **reply** (backend → client for DNAT, backend → SNAT for full-NAT):
//!   conntrack reverse entry → VIP back as the source, client as destination;
//! - **ICMP errors** quoting a tracked flow: outer and quoted headers
//!   translated so path-MTU discovery works through the balancer.
//!
//! Then layer 2 (port MAC → next hop's MAC) and a [`Verdict`]: `Transmit`,
//! or `Resolve` when the next hop's MAC is not in the snapshot yet (the
//! shell holds the frame while it asks), or `Drop(no_route)` when there is
//! no next hop at all. Every packet
//! that the worker drops is counted once with its [`DropReason`]; packets it
//! hands back for transmission or hand-over are counted by the caller, which
//! knows whether the NIC or the ring took them.
//!
//! `handle_tick(now, budget)` expires connections with bounded work and
//! returns their SNAT ports; `end_orphaned_udp(snapshot, budget)` ends the
//! UDP connections of backends and frontends a new snapshot revision
//! deleted, likewise bounded.
//!
//! Flow ownership: a flow belongs to exactly one worker. DNAT flows by their
//! client endpoint (both directions carry it); full-NAT replies by the SNAT
//! port (`port & mask == worker`). A packet of another worker's flow is
//! answered with [`Verdict::HandOver`].
//!
//! Policies where the issue leaves room (documented in the README too):
//! - A TCP packet without SYN and without an entry opens a DNAT connection
//!   anyway: Maglev picks the same backend it picked before a restart or on
//!   another node, so established connections survive both. Full-NAT cannot
//!   (a new SNAT port breaks the connection): it drops with `tcp_not_syn`.
//! - When conntrack is full and nothing is evictable, DNAT packets are
//!   translated statelessly by Maglev (`stateless_forwards`); replies of such
//!   connections find no entry and are dropped (`no_conntrack_reply`).
//!   Full-NAT drops with `conntrack_full`.
//! - A new connection whose reply tuple is a tracked connection's (one
//!   client endpoint DNATed by two VIPs to the same backend endpoint) is
//!   dropped with `conntrack_conflict`: its replies could not be told from
//!   the other's.
//! - Session affinity by client IP pins each client to a backend in the
//!   node's [`AffinityTable`], shared by all workers: a client keeps its
//!   backend while the backend stays eligible and the client opens a
//!   connection within the timeout (see [`crate::affinity`]). Such new
//!   connections take the general path, not the fast paths.
//! - Non-first fragments are dropped (`fragment`): they carry no ports.
//! - TCP to a VIP port without a frontend is refused with a RST sent back
//!   where it came from (`resets_sent`); UDP and the rest are dropped
//!   (`no_frontend`). The RST goes only to a client that at least one
//!   service with a frontend on that VIP address allows (source ranges,
//!   [`Snapshot::vip_allows_source`]); from any other client the segment
//!   is dropped as on a served port (`source_range_denied`), so a denied
//!   client cannot tell served ports from closed ones.
//! - A packet to forward that is larger than the MTU of the port it would
//!   leave by ([`SnapshotBuilder::mtu`](crate::snapshot::SnapshotBuilder::mtu))
//!   is answered, before any rewrite and out of the port it came in by,
//!   with an ICMP "fragmentation needed" (IPv4 with DF) or ICMPv6 "packet
//!   too big" carrying that MTU (`too_big_sent`,
//!   [`crate::reject::write_too_big`]); one that may not be answered (IPv4
//!   without DF: lbd does not fragment) is dropped (`mtu_exceeded`). A new
//!   connection's too-big first packet opens nothing.

mod burst;
pub use burst::BURST_LOOKUP_MIN_LEN;
mod fast;
mod fast6;
mod fast_open;
mod fast_open6;
mod paths;

use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::sync::Arc;

use crate::affinity::{self, AffinityError, AffinityTable};
use crate::checksum::ChecksumOffload;
use crate::conntrack::{self, Conntrack, Endpoint, Entry};
use crate::counters::WorkerCounters;
use crate::flow::{Proto, SnatNewError, SnatPorts, WorkerId};
use crate::local::{self, LocalVerdict};
use crate::snapshot::Snapshot;
use crate::wire::{self, MacAddr, L3};
use crate::{DropReason, Tick};

/// What to do with a frame after [`Worker::handle_packet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The frame was rewritten: transmit its first `len` bytes on `port`
    /// (on this worker's tx queue of that port).
    Transmit {
        /// DPDK port id.
        port: u16,
        /// Bytes to send.
        len: usize,
    },
    /// Free the frame; the reason is already counted.
    Drop(DropReason),
    /// Another worker owns the flow: pass the frame, unchanged, to it.
    HandOver(WorkerId),
    /// An ARP request or neighbor solicitation for an owned address, from
    /// a neighbor the snapshot has at another MAC than the one it named:
    /// transmit the reply's first `len` bytes back on the port the frame
    /// came in on, and let the neighbor table move the entry it holds for
    /// `ip` to `mac` (a hint, not a confirmation of reachability; see
    /// [`LocalVerdict::ReplyToNeighbor`]). A request from anyone else is
    /// answered with a plain `Transmit`.
    ReplyToNeighbor {
        /// Bytes to send.
        len: usize,
        /// The asker's address.
        ip: IpAddr,
        /// The MAC it named.
        mac: MacAddr,
    },
    /// An ARP reply or neighbor advertisement: feed the neighbor table,
    /// then free the frame.
    Neighbor {
        /// The neighbor's address.
        ip: IpAddr,
        /// Its MAC.
        mac: MacAddr,
        /// Sent unasked (see [`LocalVerdict::Neighbor`]).
        announced: bool,
    },
    /// For the host's own stack (e.g. a routing daemon talking to the
    /// interface address): pass to the kernel where the shell has a path.
    ToHost,
    /// The frame is translated (addresses, checksums, conntrack, source
    /// MAC) but the next hop's MAC is not known: the shell writes it into
    /// bytes 0..6 once `via` is resolved and transmits the first `len`
    /// bytes on `port`, or drops the frame (`no_neighbor`).
    Resolve {
        /// DPDK port id.
        port: u16,
        /// Bytes to send.
        len: usize,
        /// The neighbor to resolve: the destination when a port's prefix
        /// holds it, else the gateway.
        via: IpAddr,
    },
}

/// Per-packet information from the NIC.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketMeta {
    /// The port the frame arrived on.
    pub port: u16,
    /// Checksum offload state of this frame and of the egress port.
    pub offload: ChecksumOffload,
}

/// How to build a [`Worker`].
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This worker's index.
    pub id: WorkerId,
    /// Number of workers (flow ownership and SNAT port shares depend on it).
    pub n_workers: u16,
    /// Connection table size and timeouts.
    pub conntrack: conntrack::Config,
    /// The node's full-NAT source addresses.
    pub snat_addresses: Vec<IpAddr>,
    /// SNAT ports to share among workers.
    pub snat_ports: RangeInclusive<u16>,
    /// Size of the per-frontend counter array (stats slots).
    pub frontend_slots: usize,
    /// Size of the per-backend counter array (stats slots).
    pub backend_slots: usize,
    /// Live connections from which [`Worker::handle_burst`] looks up a
    /// whole burst ahead instead of packet by packet (same answers either
    /// way; only the speed differs). Default [`BURST_LOOKUP_MIN_LEN`]; 0
    /// always takes the staged lookup, which is how tests and the `burst`
    /// fuzz target exercise it on small tables.
    pub burst_lookup_min_len: usize,
    /// The node's client-IP affinity pins, shared by every worker (give all
    /// of them the same table). `None`: a table of
    /// [`affinity::DEFAULT_CAPACITY`] pins of this worker's own, which is
    /// right for a single worker.
    pub affinity: Option<Arc<AffinityTable>>,
}

/// [`WorkerConfig::frontend_slots`]' default: counters for 64k frontends.
pub const DEFAULT_FRONTEND_SLOTS: usize = 1 << 16;
/// [`WorkerConfig::backend_slots`]' default: counters for 256k backends.
pub const DEFAULT_BACKEND_SLOTS: usize = 1 << 18;

impl WorkerConfig {
    /// Defaults for worker `id` of `n_workers`: 1M IPv4 and 64k IPv6
    /// connections, default timeouts, SNAT ports 1024-65535, 64k frontend
    /// and 256k backend slots, the staged burst lookup from
    /// [`BURST_LOOKUP_MIN_LEN`] connections, an affinity table of its own.
    pub fn new(id: WorkerId, n_workers: u16) -> WorkerConfig {
        WorkerConfig {
            id,
            n_workers,
            conntrack: conntrack::Config::new(1 << 20, 1 << 16),
            snat_addresses: Vec::new(),
            snat_ports: SnatPorts::DEFAULT_PORT_RANGE,
            frontend_slots: DEFAULT_FRONTEND_SLOTS,
            backend_slots: DEFAULT_BACKEND_SLOTS,
            burst_lookup_min_len: BURST_LOOKUP_MIN_LEN,
            affinity: None,
        }
    }
}

/// Why a [`Worker`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The connection table could not be built.
    #[error("conntrack: {0}")]
    Conntrack(#[from] conntrack::NewError),
    /// The SNAT port pool could not be built.
    #[error("SNAT ports: {0}")]
    Snat(#[from] SnatNewError),
    /// The affinity table could not be built.
    #[error("affinity: {0}")]
    Affinity(#[from] AffinityError),
    /// `n_workers` is 0.
    #[error("the number of workers must be at least 1")]
    NoWorkers,
}

/// What one [`Worker::handle_tick`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickStats {
    /// Entries examined.
    pub examined: usize,
    /// Entries expired.
    pub expired: usize,
}

/// One worker's state: its connection table, its SNAT ports, its counters.
/// Owned by the worker lcore and passed `&mut`; nothing here is shared but
/// the counters, which the control thread only reads.
#[derive(Debug)]
pub struct Worker {
    id: WorkerId,
    n_workers: u16,
    conntrack: Conntrack,
    snat: SnatPorts,
    counters: Arc<WorkerCounters>,
    /// [`WorkerConfig::burst_lookup_min_len`].
    burst_lookup_min_len: usize,
    /// Client-IP affinity pins, shared with the node's other workers.
    affinity: Arc<AffinityTable>,
    /// [`Worker::end_orphaned_udp`]'s progress: the snapshot revision it
    /// checks against, and the slots of that check still to examine.
    orphan_scan: (u64, u64),
}

impl Worker {
    /// Builds a worker; all memory it will ever need is allocated here.
    pub fn new(cfg: WorkerConfig) -> Result<Worker, WorkerError> {
        if cfg.n_workers == 0 {
            return Err(WorkerError::NoWorkers);
        }
        let snat = SnatPorts::new(cfg.id, cfg.n_workers, &cfg.snat_addresses, cfg.snat_ports)?;
        let affinity = match cfg.affinity {
            Some(t) => t,
            // A fixed seed: a private table is for tests and tools.
            None => Arc::new(AffinityTable::new(
                affinity::DEFAULT_CAPACITY,
                0x6c62_643a_6166_6631,
            )?),
        };
        Ok(Worker {
            id: cfg.id,
            n_workers: cfg.n_workers,
            conntrack: Conntrack::with_snat_ports(cfg.conntrack, &snat)?,
            snat,
            counters: Arc::new(WorkerCounters::new(cfg.frontend_slots, cfg.backend_slots)),
            burst_lookup_min_len: cfg.burst_lookup_min_len,
            affinity,
            orphan_scan: (0, 0),
        })
    }

    /// This worker's index.
    pub fn id(&self) -> WorkerId {
        self.id
    }

    /// The counters, to share with the control thread.
    pub fn counters(&self) -> &Arc<WorkerCounters> {
        &self.counters
    }

    /// The connection table (read-only; for statistics and tests).
    pub fn conntrack(&self) -> &Conntrack {
        &self.conntrack
    }

    /// The client-IP affinity table (shared; for statistics and tests).
    pub fn affinity(&self) -> &Arc<AffinityTable> {
        &self.affinity
    }

    /// The SNAT port pool (read-only; for statistics and tests).
    pub fn snat_ports(&self) -> &SnatPorts {
        &self.snat
    }

    #[inline]
    fn drop(&self, reason: DropReason) -> Verdict {
        self.counters.count_drop(reason);
        Verdict::Drop(reason)
    }

    /// Handles one frame received on `meta.port`; see the module doc.
    pub fn handle_packet(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        meta: &PacketMeta,
    ) -> Verdict {
        if snap.vlan_tagged() {
            return self.handle_tagged(now, snap, frame, meta, true);
        }
        let mut v = Verdict::ToHost;
        self.handle_one(now, snap, frame, meta, &mut v);
        v
    }

    /// [`Worker::handle_packet`]'s body, inlined where the burst path
    /// handles packets one by one, so that the fast path's verdict is
    /// stored straight into its slot `out`: each branch stores its own
    /// (returned, the verdicts of both met in a stack copy first, ~18
    /// instructions a packet).
    #[inline(always)]
    fn handle_one(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        meta: &PacketMeta,
        out: &mut Verdict,
    ) {
        match self.fast_v4(now, snap, frame, meta) {
            Some(v) => *out = v,
            None => *out = self.not_fast_v4(now, snap, frame, meta),
        }
    }

    /// What [`Worker::handle_one`] does with a frame the IPv4 fast path
    /// declined: the IPv6 fast path (`fast6.rs`), then the general path,
    /// which takes the IPv6 fast path's conntrack lookup (a new
    /// connection's first packet is looked up once). Out of line, as
    /// `general` is, so that the IPv4 fast path is laid out as without it.
    #[inline(never)]
    fn not_fast_v4(&mut self, now: Tick, snap: &Snapshot, frame: &mut [u8], meta: &PacketMeta) -> Verdict {
        let Some(k) = fast6::read_v6(frame) else {
            return self.general(now, snap, frame, meta, None);
        };
        let hit = self
            .conntrack
            .lookup_v6(k.src, k.dst, k.sport, k.dport, k.proto as u8);
        match self.fast_v6_read::<0>(now, snap, frame, meta, &k, Some(hit), None) {
            Some(v) => v,
            // Declined having changed nothing: the lookup stands.
            None => self.general(now, snap, frame, meta, Some(hit)),
        }
    }

    /// [`Worker::handle_packet`] on tagged ports
    /// ([`Snapshot::vlan_tagged`]): after a check that the frame carries
    /// its port's VLAN id, the IPv4 fast path's tagged instantiation
    /// (`fast_v4_tagged`, when `fast`; offsets 4 bytes on, the egress
    /// port's id written on the way out), then the IPv6 one's (`fast6.rs`,
    /// likewise), then the general path for what they decline, with the
    /// IPv6 fast path's lookup. Out of line, so that the untagged paths are
    /// laid out as without it.
    #[cold]
    #[inline(never)]
    fn handle_tagged(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        meta: &PacketMeta,
        fast: bool,
    ) -> Verdict {
        if !self.has_ports_vlan(snap, frame, meta) {
            return self.drop(DropReason::VlanMismatch);
        }
        let mut found = None;
        if fast {
            if let Some(v) = self.fast_v4_tagged(now, snap, frame, meta) {
                return v;
            }
            // The IPv6 fast path's tagged instantiation, whose lookup the
            // general path takes if it declines (as in `not_fast_v4`).
            if let Some(k) = fast6::read_v6_at::<{ fast::VLAN_TAG }>(frame) {
                let hit = self
                    .conntrack
                    .lookup_v6(k.src, k.dst, k.sport, k.dport, k.proto as u8);
                if let Some(v) =
                    self.fast_v6_read::<{ fast::VLAN_TAG }>(now, snap, frame, meta, &k, Some(hit), None)
                {
                    return v;
                }
                found = Some(hit);
            }
        }
        match &wire::parse_with(frame, &meta.offload) {
            Ok(p) => self.dispatch(now, snap, frame, p, meta, found),
            Err(reason) => self.drop(*reason),
        }
    }

    /// On a tagged node, whether `frame` carries the VLAN id of its port,
    /// read off the raw tag before anything else: a frame of another VLAN
    /// (LLDP, STP, another subnet's traffic) is not this port's, whatever
    /// the parse would make of it. A port without a VLAN id here has no
    /// interface: nothing is its.
    #[inline(always)]
    fn has_ports_vlan(&self, snap: &Snapshot, frame: &[u8], meta: &PacketMeta) -> bool {
        let vid = snap.port(meta.port).and_then(|c| c.vlan());
        let tag = wire::EthernetFrame::new_checked(frame)
            .ok()
            .and_then(|e| e.vlan_id());
        vid.is_some() && tag == vid
    }

    /// [`Worker::handle_packet`] without the IPv4 fast path (`fast.rs`,
    /// `fast_open.rs`) and the IPv6 one (`fast6.rs`, `fast_open6.rs`), which answer the TCP
    /// and UDP packets they take exactly as this would; exposed so tests
    /// and benches can hold one against the other.
    #[doc(hidden)]
    pub fn handle_packet_general(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        meta: &PacketMeta,
    ) -> Verdict {
        if snap.vlan_tagged() {
            return self.handle_tagged(now, snap, frame, meta, false);
        }
        self.general(now, snap, frame, meta, None)
    }

    /// The general path on untagged ports: parse, then `dispatch`.
    /// `found`: the conntrack lookup of the frame's 5-tuple if it was done
    /// ahead (`paths::Found`).
    fn general(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        meta: &PacketMeta,
        found: paths::Found,
    ) -> Verdict {
        // Used in place: moving a `Parsed` out of the `Result` cost ~40
        // instructions a packet.
        match &wire::parse_with(frame, &meta.offload) {
            Ok(p) => self.dispatch(now, snap, frame, p, meta, found),
            Err(reason) => self.drop(*reason),
        }
    }

    /// Everything after the parse. `found`, when given, is the result of
    /// `conntrack.lookup` for the packet's own 5-tuple, done ahead by
    /// [`Worker::handle_burst`] or the IPv6 fast path and still valid.
    #[inline(always)]
    fn dispatch(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        p: &wire::Parsed,
        meta: &PacketMeta,
        found: paths::Found,
    ) -> Verdict {
        // ARP, and ICMP that is not an error, may be for the balancer itself.
        let maybe_local = p.l3 == L3::Arp
            || (!p.icmp_error
                && (p.protocol == wire::ip_proto::ICMP || p.protocol == wire::ip_proto::ICMPV6));
        if maybe_local {
            let Some(port) = snap.port(meta.port) else {
                return self.drop(DropReason::LocalUnhandled);
            };
            match local::handle_parsed(now, frame, p, port.local_addrs()) {
                // An echo request from a connected prefix's broadcast
                // address gets no reply (RFC 1122 §3.2.1.3), nor one whose
                // spent source route sends the reply to one, as with any
                // address that is no one host (`local` knows no prefixes;
                // the frame it wrote is dropped).
                LocalVerdict::Reply { .. } if p.l3 == L3::Ipv4 && echo_to_broadcast(snap, frame, p) => {
                    return self.drop(DropReason::LocalUnhandled);
                }
                LocalVerdict::Reply { len } => {
                    self.counters.local_replies.inc();
                    return Verdict::Transmit { port: meta.port, len };
                }
                // An ARP request from a connected prefix's broadcast
                // address gets no answer, and an ARP answer from one is no
                // host's news (`local` knows no prefixes).
                LocalVerdict::ReplyToNeighbor { ip, .. } | LocalVerdict::Neighbor { ip, .. }
                    if snap.is_directed_broadcast(ip) =>
                {
                    return self.drop(DropReason::LocalUnhandled);
                }
                LocalVerdict::ReplyToNeighbor { len, ip, mac } => {
                    self.counters.local_replies.inc();
                    // News only for a neighbor published at another MAC:
                    // requests from everyone else would crowd the replies
                    // that resolve next hops out of the shell's channel.
                    if snap.neighbor_mac(ip).is_some_and(|m| m != mac.0) {
                        return Verdict::ReplyToNeighbor { len, ip, mac };
                    }
                    return Verdict::Transmit { port: meta.port, len };
                }
                // `neighbor_updates` is the I/O shell's to count, as it
                // passes the news on.
                LocalVerdict::Neighbor { ip, mac, announced } => {
                    return Verdict::Neighbor { ip, mac, announced }
                }
                LocalVerdict::Drop(reason) => return self.drop(reason),
                LocalVerdict::NotLocal => {}
            }
            if !p.icmp_error {
                // ICMP echo through the balancer (not to an owned address):
                // frontends are TCP and UDP only.
                if !crate::reject::names_one_host(p.dst) || snap.is_directed_broadcast(p.dst) {
                    return self.drop(DropReason::NotUnicast);
                }
                return self.drop(DropReason::NoFrontend);
            }
        }
        if p.icmp_error {
            return self.icmp_error(snap, frame, p, meta);
        }
        self.l4(now, snap, frame, p, meta, found)
    }

    /// Expires idle connections, examining at most `budget` entries, and
    /// returns the SNAT ports of the expired ones to the pool.
    pub fn handle_tick(&mut self, now: Tick, budget: usize) -> TickStats {
        let Worker {
            conntrack,
            snat,
            counters,
            ..
        } = self;
        let st = conntrack.expire(now, budget, |e: &Entry| {
            release_snat(snat, e.nat.snat(), e.original.proto())
        });
        counters.conntrack_expirations.add(st.expired as u64);
        counters.conntrack_entries.set(conntrack.len() as u64);
        TickStats {
            examined: st.examined,
            expired: st.expired,
        }
    }
}

impl Worker {
    /// Ends UDP connections that the snapshot no longer serves: whose
    /// frontend is gone, or whose backend is no longer a backend of that
    /// frontend's service (deleted, not merely drained: a terminating or
    /// maintenance backend keeps its connections). kube-proxy clears UDP
    /// conntrack entries of removed endpoints likewise: UDP has no end, so
    /// a client that keeps sending (syslog, statsd, QUIC, a DNS client
    /// reusing its socket) would stay pinned to the deleted backend for
    /// good, every datagram restarting the timeout. Its next datagram opens
    /// a new connection with a new pick. TCP connections run to their end
    /// (README).
    ///
    /// Call it with the current snapshot next to [`Worker::handle_tick`].
    /// When the snapshot's revision differs from the last call's, a check
    /// of the whole table begins, `budget` slots a call (its own cursor),
    /// and ends after one lap; between revisions a call costs nothing.
    /// Ended connections count in `conntrack_expirations` and release
    /// their SNAT ports. Returns how many it ended.
    pub fn end_orphaned_udp(&mut self, snap: &Snapshot, budget: usize) -> usize {
        let (cap4, cap6) = self.conntrack.capacity();
        if self.orphan_scan.0 != snap.revision() {
            self.orphan_scan = (snap.revision(), u64::from(cap4) + u64::from(cap6));
        }
        let left = self.orphan_scan.1;
        if left == 0 {
            return 0;
        }
        let budget = usize::try_from(left).map_or(budget, |l| budget.min(l));
        let Worker {
            conntrack,
            snat,
            counters,
            ..
        } = self;
        let st = conntrack.end_udp_where(
            budget,
            |e: &Entry| {
                let (vip, vip_port) = e.original.dst();
                let (addr, port) = e.nat.backend();
                snap.lookup(vip, vip_port, Proto::Udp)
                    .is_none_or(|(_, svc)| svc.find_backend(addr, port).is_none())
            },
            |e: &Entry| release_snat(snat, e.nat.snat(), Proto::Udp),
        );
        self.orphan_scan.1 = left - st.examined as u64;
        counters.conntrack_expirations.add(st.expired as u64);
        counters.conntrack_entries.set(conntrack.len() as u64);
        st.expired
    }
}

/// Whether the echo reply `local` wrote into `frame` for the IPv4 request
/// `p` answers, or goes to, a connected prefix's broadcast address (its
/// destination is the requester's, or a spent source route's last hop).
/// Asked in the arm of the reply `local` made, out of line: the same check
/// before the local answer, inlined into the burst loop, moved the fast
/// path's code (+22 instructions a new flow).
#[cold]
#[inline(never)]
fn echo_to_broadcast(snap: &Snapshot, frame: &[u8], p: &wire::Parsed) -> bool {
    let at = usize::from(p.l3_offset) + 16;
    let to = frame
        .get(at..at + 4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(IpAddr::from);
    snap.is_directed_broadcast(p.src) || to.is_some_and(|a| snap.is_directed_broadcast(a))
}

/// Returns a finished (expired or evicted) connection's SNAT pair, if it
/// had one, to the pool.
fn release_snat(snat: &mut SnatPorts, pair: Option<Endpoint>, proto: Proto) {
    if let Some(ep) = pair {
        // A port that is not in use cannot be freed twice; nothing to count.
        let _ = snat.free(ep, proto);
    }
}

#[cfg(test)]
mod tests;
