//! Per-worker counters that the control thread reads without locks.
//!
//! Each worker owns one [`WorkerCounters`], shared with the control thread
//! through an `Arc`. The worker is the only writer: [`Counter::add`] is a
//! relaxed load and store (a plain `add` to memory on x86, no `lock`
//! prefix), so counting costs what a local integer costs, while the control
//! thread reads consistent 64-bit values at any time. Totals across workers
//! are the sum of each worker's.
//!
//! Per-frontend and per-backend counters are indexed by the objects'
//! stats slots, which the snapshot keeps stable across swaps, so counts
//! survive configuration changes. The arrays are sized once, at
//! construction; a slot beyond them is counted in `slot_overflow` instead.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::DropReason;

/// A 64-bit counter with a single writer.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the owning worker may call this (single writer).
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.0
            .store(self.0.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// Adds one.
    #[inline(always)]
    pub fn inc(&self) {
        self.add(1);
    }

    /// Sets a gauge. Only the owning worker may call this.
    #[inline(always)]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    /// The current value (any thread).
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Packets, bytes and new connections of one frontend or backend.
#[derive(Debug, Default)]
pub struct FlowCounters {
    /// Packets forwarded (both directions).
    pub packets: Counter,
    /// Bytes forwarded (frame lengths, both directions).
    pub bytes: Counter,
    /// Connections opened.
    pub connections: Counter,
}

/// A plain copy of [`FlowCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowTotals {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
    /// Connections opened.
    pub connections: u64,
}

impl FlowCounters {
    /// Counts one packet of `bytes`.
    #[inline(always)]
    pub fn packet(&self, bytes: usize) {
        self.packets.inc();
        self.bytes.add(bytes as u64);
    }

    /// A copy of the values.
    pub fn totals(&self) -> FlowTotals {
        FlowTotals {
            packets: self.packets.get(),
            bytes: self.bytes.get(),
            connections: self.connections.get(),
        }
    }
}

/// Everything one worker counts.
#[derive(Debug)]
pub struct WorkerCounters {
    /// Frames received.
    pub rx_packets: Counter,
    /// Frames transmitted (forwarded or answered).
    pub tx_packets: Counter,
    /// Replies made locally (ARP, ICMP echo, neighbor advertisements).
    pub local_replies: Counter,
    /// ARP replies and neighbor advertisements passed to the neighbor
    /// table. The I/O shell counts it when the table took the news of a
    /// [`Verdict::Neighbor`](crate::worker::Verdict::Neighbor) (`neighbor_channel_full` when it could not).
    pub neighbor_updates: Counter,
    /// Packets handed over to the worker that owns their flow. The I/O
    /// shell counts it when the ring to the owner took the frame of a
    /// [`Verdict::HandOver`](crate::worker::Verdict::HandOver) (`handover_ring_full` when it did not).
    pub handed_over: Counter,
    /// TCP segments to a VIP port without a frontend answered with a RST
    /// (only to clients that some service on that VIP allows).
    pub resets_sent: Counter,
    /// Packets to forward larger than the MTU of the port they would leave
    /// by, answered with an ICMP "fragmentation needed" (IPv4 with DF) or
    /// ICMPv6 "packet too big" carrying that MTU (the others are
    /// `mtu_exceeded` drops).
    pub too_big_sent: Counter,
    /// Connections opened (conntrack entries created).
    pub new_connections: Counter,
    /// DNAT packets forwarded without a conntrack entry because the table
    /// was full and nothing could be evicted.
    pub stateless_forwards: Counter,
    /// New connections of client-IP affinity services sent to the backend
    /// their client was pinned to.
    pub affinity_hits: Counter,
    /// Clients pinned to a backend: no live pin, or its backend left the
    /// ring.
    pub affinity_pins: Counter,
    /// Live pins whose slot a new pin took (the affinity table's bucket was
    /// full): those clients are pinned again by hash.
    pub affinity_evictions: Counter,
    /// Conntrack entries evicted under pressure.
    pub conntrack_evictions: Counter,
    /// Conntrack entries expired.
    pub conntrack_expirations: Counter,
    /// Live conntrack entries (gauge).
    pub conntrack_entries: Counter,
    /// Packets whose frontend or backend stats slot was beyond the arrays.
    pub slot_overflow: Counter,
    /// Drops by reason, indexed by `DropReason as usize`.
    pub drops: [Counter; DropReason::COUNT],
    frontends: Box<[FlowCounters]>,
    backends: Box<[FlowCounters]>,
}

impl WorkerCounters {
    /// Counters for up to `frontends` frontend slots and `backends` backend slots.
    pub fn new(frontends: usize, backends: usize) -> WorkerCounters {
        WorkerCounters {
            rx_packets: Counter::default(),
            tx_packets: Counter::default(),
            local_replies: Counter::default(),
            neighbor_updates: Counter::default(),
            handed_over: Counter::default(),
            resets_sent: Counter::default(),
            too_big_sent: Counter::default(),
            new_connections: Counter::default(),
            stateless_forwards: Counter::default(),
            affinity_hits: Counter::default(),
            affinity_pins: Counter::default(),
            affinity_evictions: Counter::default(),
            conntrack_evictions: Counter::default(),
            conntrack_expirations: Counter::default(),
            conntrack_entries: Counter::default(),
            slot_overflow: Counter::default(),
            drops: std::array::from_fn(|_| Counter::default()),
            frontends: (0..frontends).map(|_| FlowCounters::default()).collect(),
            backends: (0..backends).map(|_| FlowCounters::default()).collect(),
        }
    }

    /// Counts a drop.
    #[inline(always)]
    pub fn count_drop(&self, reason: DropReason) {
        self.drops[reason as usize].inc();
    }

    /// Drops counted for `reason`.
    pub fn drops_of(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize].get()
    }

    /// All drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().map(Counter::get).sum()
    }

    /// The counters of frontend slot `slot`, if within the array.
    #[inline(always)]
    pub fn frontend(&self, slot: u32) -> Option<&FlowCounters> {
        let c = self.frontends.get(slot as usize);
        if c.is_none() {
            self.slot_overflow.inc();
        }
        c
    }

    /// The counters of backend slot `slot`, if within the array.
    #[inline(always)]
    pub fn backend(&self, slot: u32) -> Option<&FlowCounters> {
        let c = self.backends.get(slot as usize);
        if c.is_none() {
            self.slot_overflow.inc();
        }
        c
    }

    /// Frontend slots with any traffic, with their totals (control thread).
    pub fn frontend_totals(&self) -> impl Iterator<Item = (u32, FlowTotals)> + '_ {
        nonzero(&self.frontends)
    }

    /// Backend slots with any traffic, with their totals (control thread).
    pub fn backend_totals(&self) -> impl Iterator<Item = (u32, FlowTotals)> + '_ {
        nonzero(&self.backends)
    }

    /// Non-zero drop counters with their reasons.
    pub fn nonzero_drops(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .iter()
            .map(|&r| (r, self.drops_of(r)))
            .filter(|&(_, n)| n != 0)
    }
}

fn nonzero(a: &[FlowCounters]) -> impl Iterator<Item = (u32, FlowTotals)> + '_ {
    a.iter()
        .enumerate()
        .map(|(i, c)| (i as u32, c.totals()))
        .filter(|(_, t)| *t != FlowTotals::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_and_reads_across_threads() {
        let c = Arc::new(WorkerCounters::new(4, 8));
        let w = c.clone();
        std::thread::spawn(move || {
            for _ in 0..1000 {
                w.rx_packets.inc();
                w.count_drop(DropReason::NoFrontend);
                w.frontend(2).unwrap().packet(100);
            }
            w.backend(7).unwrap().connections.inc();
            assert!(w.backend(8).is_none());
        })
        .join()
        .unwrap();
        assert_eq!(c.rx_packets.get(), 1000);
        assert_eq!(c.drops_of(DropReason::NoFrontend), 1000);
        assert_eq!(c.total_drops(), 1000);
        assert_eq!(c.slot_overflow.get(), 1);
        let f: Vec<_> = c.frontend_totals().collect();
        assert_eq!(
            f,
            vec![(
                2,
                FlowTotals {
                    packets: 1000,
                    bytes: 100_000,
                    connections: 0
                }
            )]
        );
        let b: Vec<_> = c.backend_totals().collect();
        assert_eq!(
            b,
            vec![(
                7,
                FlowTotals {
                    packets: 0,
                    bytes: 0,
                    connections: 1
                }
            )]
        );
        assert_eq!(
            c.nonzero_drops().collect::<Vec<_>>(),
            vec![(DropReason::NoFrontend, 1000)]
        );
    }

    #[test]
    fn gauge_sets() {
        let c = WorkerCounters::new(0, 0);
        c.conntrack_entries.set(42);
        c.conntrack_entries.set(7);
        assert_eq!(c.conntrack_entries.get(), 7);
    }
}
