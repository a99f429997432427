//! The worker loop: one per worker lcore (or on the main lcore when it is
//! the only one).
//!
//! Each worker owns rx queue `q` and tx queue `q` of every port. A loop
//! iteration is, per port: rx_burst, handle each packet, tx_burst, free what
//! the NIC did not take. Every packet is counted once: transmitted, or
//! dropped with a [`DropReason`]. Counters are kept in plain integers on the
//! worker and published to a [`StatsCell`] of atomics every
//! [`PUBLISH_EVERY`] loops, so the control thread reads them without locks
//! and the packet path never touches a shared cache line.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use dpdk::{Burst, RxQueue, TxQueue};
use lb_dataplane::drop::DropCounters;
use lb_dataplane::local::{handle_local, LocalAddrs, LocalVerdict};
use lb_dataplane::DropReason;

/// Loops between two publications of the counters.
pub const PUBLISH_EVERY: u64 = 1024;

/// A worker's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Packets received from all ports.
    pub rx_packets: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Packets answered locally (ARP, ICMP echo, neighbor solicitation).
    pub local_replies: u64,
    /// ARP replies and neighbor advertisements absorbed (neighbor news).
    pub neighbor_updates: u64,
    /// Packets dropped, by reason.
    pub drops: DropCounters,
}

/// The published copy of a worker's counters (single writer: the worker).
#[derive(Debug)]
pub struct StatsCell {
    rx_packets: AtomicU64,
    tx_packets: AtomicU64,
    local_replies: AtomicU64,
    neighbor_updates: AtomicU64,
    drops: [AtomicU64; DropReason::COUNT],
}

impl Default for StatsCell {
    fn default() -> Self {
        StatsCell {
            rx_packets: AtomicU64::new(0),
            tx_packets: AtomicU64::new(0),
            local_replies: AtomicU64::new(0),
            neighbor_updates: AtomicU64::new(0),
            drops: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl StatsCell {
    fn publish(&self, s: &WorkerStats) {
        self.rx_packets.store(s.rx_packets, Ordering::Relaxed);
        self.tx_packets.store(s.tx_packets, Ordering::Relaxed);
        self.local_replies.store(s.local_replies, Ordering::Relaxed);
        self.neighbor_updates.store(s.neighbor_updates, Ordering::Relaxed);
        for (cell, v) in self.drops.iter().zip(s.drops.0.iter()) {
            cell.store(*v, Ordering::Relaxed);
        }
    }

    /// A snapshot of the last published counters.
    pub fn read(&self) -> WorkerStats {
        let mut d = DropCounters::default();
        for (v, cell) in d.0.iter_mut().zip(self.drops.iter()) {
            *v = cell.load(Ordering::Relaxed);
        }
        WorkerStats {
            rx_packets: self.rx_packets.load(Ordering::Relaxed),
            tx_packets: self.tx_packets.load(Ordering::Relaxed),
            local_replies: self.local_replies.load(Ordering::Relaxed),
            neighbor_updates: self.neighbor_updates.load(Ordering::Relaxed),
            drops: d,
        }
    }
}

/// What one worker owns: its queue on every port, in port order.
#[derive(Debug)]
pub struct WorkerIo {
    /// Worker index, from 0.
    pub index: usize,
    /// Rx queue `index` of each port.
    pub rx: Vec<RxQueue>,
    /// Tx queue `index` of each port.
    pub tx: Vec<TxQueue>,
}

/// Runs until `stop` is set; returns the final counters (also published).
pub fn run(
    io: WorkerIo,
    local: Arc<[LocalAddrs]>,
    stop: Arc<AtomicBool>,
    cell: Arc<StatsCell>,
) -> WorkerStats {
    let WorkerIo { mut rx, mut tx, .. } = io;
    let mut stats = WorkerStats::default();
    let mut rx_burst = Burst::new();
    let mut tx_burst = Burst::new();
    let mut loops: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        for port in 0..rx.len() {
            let n = rx[port].rx_burst(&mut rx_burst);
            if n == 0 {
                continue;
            }
            stats.rx_packets += n as u64;
            for mut m in rx_burst.drain() {
                match handle_local(m.data_mut(), &local[port]) {
                    LocalVerdict::Reply { len } => {
                        if m.set_len(len) {
                            stats.local_replies += 1;
                            // tx_burst has room: it holds at most one rx burst.
                            let _ = tx_burst.push(m);
                        } else {
                            stats.drops.count(DropReason::TooBig);
                        }
                    }
                    // The neighbor table arrives with the end-to-end wiring;
                    // until then the news is counted and the frame freed.
                    LocalVerdict::Neighbor { .. } => stats.neighbor_updates += 1,
                    // Until the load-balancing pipeline runs here, anything
                    // not for the balancer itself has no frontend.
                    LocalVerdict::NotLocal => stats.drops.count(DropReason::NoFrontend),
                    LocalVerdict::Drop(reason) => stats.drops.count(reason),
                }
            }
            stats.tx_packets += tx[port].tx_burst(&mut tx_burst) as u64;
            if !tx_burst.is_empty() {
                for _ in 0..tx_burst.len() {
                    stats.drops.count(DropReason::TxFull);
                }
                tx_burst.clear();
            }
        }
        loops = loops.wrapping_add(1);
        if loops % PUBLISH_EVERY == 0 {
            cell.publish(&stats);
        }
    }
    cell.publish(&stats);
    stats
}
