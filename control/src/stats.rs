//! Counter aggregation for GetStats: the workers' per-slot counters summed
//! and mapped back to frontends and backends through the published
//! snapshot (every frontend and backend there carries its `stats_slot`).
//! A slot reused by a new object starts from a baseline taken when it was
//! given out, so the new object does not inherit its predecessor's counts.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use lb_dataplane::counters::WorkerCounters;
use lb_dataplane::flow::Proto;
use lb_dataplane::Snapshot;

use crate::model::{BackendKey, FrontendKey, Protocol};

/// Packets, bytes and opened connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowStats {
    /// Packets (both directions).
    pub packets: u64,
    /// Bytes (both directions).
    pub bytes: u64,
    /// Connections opened.
    pub connections: u64,
}

/// Totals of one frontend over all workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontendStats {
    /// The frontend.
    pub key: FrontendKey,
    /// Its service.
    pub service: String,
    /// Totals.
    pub stats: FlowStats,
}

/// Totals of one backend over all workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendStats {
    /// The backend.
    pub key: BackendKey,
    /// Totals.
    pub stats: FlowStats,
}

/// One worker's counters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkerStats {
    /// Index in the order given to
    /// [`ControlPlane::register_workers`](crate::plane::ControlPlane::register_workers).
    pub worker: u32,
    /// Frames received.
    pub rx_packets: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Local replies (ARP, echo, NA).
    pub local_replies: u64,
    /// Packets handed to the owning worker.
    pub handed_over: u64,
    /// Connections opened.
    pub new_connections: u64,
    /// DNAT packets forwarded without conntrack entry.
    pub stateless_forwards: u64,
    /// Live conntrack entries.
    pub conntrack_entries: u64,
    /// Conntrack evictions.
    pub conntrack_evictions: u64,
    /// New connections sent to their client's pinned backend.
    pub affinity_hits: u64,
    /// Clients pinned to a backend.
    pub affinity_pins: u64,
    /// Live pins replaced for want of room.
    pub affinity_evictions: u64,
    /// Conntrack expirations.
    pub conntrack_expirations: u64,
    /// ARP replies and neighbor advertisements passed to the neighbor table.
    pub neighbor_updates: u64,
    /// TCP segments to a VIP port without a frontend answered with a RST.
    pub resets_sent: u64,
    /// Packets too big for their egress port answered with an ICMP error.
    pub too_big_sent: u64,
    /// Packets whose per-object counter slot was out of range.
    pub slot_overflow: u64,
    /// Non-zero drops by reason name.
    pub drops: BTreeMap<&'static str, u64>,
}

/// Everything GetStats reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PlaneStats {
    /// Per frontend of the published snapshot, sorted by key.
    pub frontends: Vec<FrontendStats>,
    /// Per backend of the published snapshot, sorted by key.
    pub backends: Vec<BackendStats>,
    /// Per worker.
    pub workers: Vec<WorkerStats>,
    /// Drops by reason name, summed over workers (non-zero only).
    pub drops: BTreeMap<&'static str, u64>,
    /// Live conntrack entries, summed over workers.
    pub conntrack_entries: u64,
    /// The published revision the frontends and backends belong to.
    pub revision: u64,
}

/// Per slot, the sum over workers (non-zero slots only).
pub fn slot_totals(workers: &[Arc<WorkerCounters>]) -> (HashMap<u32, FlowStats>, HashMap<u32, FlowStats>) {
    let mut fe: HashMap<u32, FlowStats> = HashMap::new();
    let mut be: HashMap<u32, FlowStats> = HashMap::new();
    for w in workers {
        for (slot, t) in w.frontend_totals() {
            fe.entry(slot).or_default().add(t);
        }
        for (slot, t) in w.backend_totals() {
            be.entry(slot).or_default().add(t);
        }
    }
    (fe, be)
}

/// Totals for GetStats: per frontend and backend of the published
/// snapshot (slots mapped back to objects through it), per worker, drops
/// by reason name, conntrack entries.
pub fn collect(
    snap: &Snapshot,
    workers: &[Arc<WorkerCounters>],
    frontend_base: &HashMap<u32, FlowStats>,
    backend_base: &HashMap<u32, FlowStats>,
) -> PlaneStats {
    let (fe_now, be_now) = slot_totals(workers);
    let since = |now: &HashMap<u32, FlowStats>, base: &HashMap<u32, FlowStats>, slot: u32| {
        let n = now.get(&slot).copied().unwrap_or_default();
        match base.get(&slot) {
            Some(b) => n.minus(b),
            None => n,
        }
    };
    let mut out = PlaneStats {
        revision: snap.revision(),
        ..PlaneStats::default()
    };
    for f in snap.frontends() {
        let protocol = match f.proto {
            Proto::Tcp => Protocol::Tcp,
            Proto::Udp => Protocol::Udp,
            _ => continue,
        };
        out.frontends.push(FrontendStats {
            key: FrontendKey {
                addr: f.addr,
                port: f.port,
                protocol,
            },
            service: snap.service(f.service).name().to_string(),
            stats: since(&fe_now, frontend_base, f.stats_slot),
        });
    }
    out.frontends.sort_by_key(|f| f.key);
    for s in snap.services() {
        for b in s.backends() {
            out.backends.push(BackendStats {
                key: BackendKey {
                    service: s.name().to_string(),
                    addr: b.addr,
                    port: b.port,
                },
                stats: since(&be_now, backend_base, b.stats_slot),
            });
        }
    }
    out.backends.sort_by(|a, b| a.key.cmp(&b.key));
    for (i, w) in workers.iter().enumerate() {
        let drops: BTreeMap<&'static str, u64> = w.nonzero_drops().map(|(r, n)| (r.name(), n)).collect();
        for (r, n) in &drops {
            *out.drops.entry(r).or_default() += n;
        }
        let entries = w.conntrack_entries.get();
        out.conntrack_entries += entries;
        out.workers.push(WorkerStats {
            worker: i as u32,
            rx_packets: w.rx_packets.get(),
            tx_packets: w.tx_packets.get(),
            local_replies: w.local_replies.get(),
            handed_over: w.handed_over.get(),
            new_connections: w.new_connections.get(),
            stateless_forwards: w.stateless_forwards.get(),
            conntrack_entries: entries,
            conntrack_evictions: w.conntrack_evictions.get(),
            conntrack_expirations: w.conntrack_expirations.get(),
            affinity_hits: w.affinity_hits.get(),
            affinity_pins: w.affinity_pins.get(),
            affinity_evictions: w.affinity_evictions.get(),
            neighbor_updates: w.neighbor_updates.get(),
            resets_sent: w.resets_sent.get(),
            too_big_sent: w.too_big_sent.get(),
            slot_overflow: w.slot_overflow.get(),
            drops,
        });
    }
    out
}

impl FlowStats {
    pub(crate) fn add(&mut self, t: lb_dataplane::counters::FlowTotals) {
        self.packets += t.packets;
        self.bytes += t.bytes;
        self.connections += t.connections;
    }

    pub(crate) fn minus(self, b: &FlowStats) -> FlowStats {
        FlowStats {
            packets: self.packets.saturating_sub(b.packets),
            bytes: self.bytes.saturating_sub(b.bytes),
            connections: self.connections.saturating_sub(b.connections),
        }
    }
}
