//! The worker loop: one per worker lcore (or on the main lcore when it is
//! the only one).
//!
//! Each worker owns rx queue `q` and tx queue `q` of every port. A loop
//! iteration loads the published snapshot once, then, per port: rx_burst,
//! [`Worker::handle_burst_with`] on the whole burst (its staged conntrack
//! lookups warmed by [`dpdk::prefetch`]), and each frame where its verdict
//! sends it:
//!
//! - `Transmit` → the tx burst of the verdict's port (this worker's queue);
//! - `HandOver(w)` → the ring to worker `w` (full ring: `handover_ring_full`);
//! - `Resolve` → the ring to the control thread, which holds the frame
//!   until the next hop answers ARP (full ring: `no_neighbor`);
//! - `Neighbor` → the news goes to the control thread's neighbor table;
//! - `ToHost` → there is no path to a host stack: `local_unhandled`;
//! - `Drop` → freed (the pipeline counted it).
//!
//! Then the frames other workers handed over (processed as if received on
//! the port recorded in the mbuf), the frames the control thread wants sent
//! (ARP requests, gratuitous ARP, released held frames; worker 0 only), the
//! tx bursts flushed (what the NIC does not take: `tx_full`), and, the
//! first loop of every millisecond, conntrack expiry with a bounded budget
//! ([`TICK_BUDGET`]).
//!
//! Counters are the pipeline's [`WorkerCounters`]: single-writer atomics the
//! control thread reads for GetStats and the final summary.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use arc_swap::ArcSwap;
use dpdk::ring::{Consumer, Producer};
use dpdk::{Burst, Mbuf, RxQueue, TxQueue, BURST_MAX};
use lb_dataplane::counters::WorkerCounters;
use lb_dataplane::snapshot::Snapshot;
use lb_dataplane::worker::{PacketMeta, Verdict, Worker};
use lb_dataplane::{DropReason, Prefetch, Tick};

/// How the pipeline's burst path warms the lines its lookups will read:
/// `prefetcht0` ([`dpdk::prefetch`]), which lb-dataplane cannot issue
/// itself (its lints forbid the intrinsic's call).
struct Prefetch0;

impl Prefetch for Prefetch0 {
    #[inline(always)]
    fn prefetch<T: Copy>(&self, line: &T) {
        dpdk::prefetch(line);
    }
}

/// Connections examined per [`Worker::handle_tick`], which runs once a
/// millisecond whatever the load and burst size: 256,000 slots a second, a
/// sweep of the default 1M-entry table every ~4 s (expired entries not yet
/// swept are the first an insert into a full table evicts).
pub const TICK_BUDGET: usize = 256;

/// Milliseconds since start from the TSC (the pipeline's [`Tick`]).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: u64,
    per_ms: u64,
}

impl Clock {
    /// A clock starting now; `tsc_hz` from EAL.
    pub fn new(tsc_hz: u64) -> Clock {
        Clock {
            start: dpdk::rdtsc(),
            per_ms: (tsc_hz / 1000).max(1),
        }
    }

    /// The current tick.
    #[inline]
    pub fn now(&self) -> Tick {
        Tick(dpdk::rdtsc().wrapping_sub(self.start) / self.per_ms)
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

/// A worker's rings to and from the other lcores.
#[derive(Debug)]
pub struct Links {
    /// Indexed by owner: the ring to that worker (None for itself).
    pub handover_out: Vec<Option<Producer>>,
    /// The rings from every other worker.
    pub handover_in: Vec<Consumer>,
    /// Frames waiting for a next hop, to the control thread.
    pub held_out: Producer,
    /// Frames the control thread wants sent (the port is in the mbuf).
    pub control_in: Option<Consumer>,
    /// ARP replies seen: (address, MAC), to the control thread.
    pub news: SyncSender<(IpAddr, [u8; 6])>,
}

/// What every worker shares.
#[derive(Debug, Clone)]
pub struct Shared {
    /// The published snapshot.
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    /// Set by SIGINT/SIGTERM.
    pub stop: Arc<AtomicBool>,
    /// The pipeline's time.
    pub clock: Clock,
}

/// Per-loop scratch: tx bursts per port and hand-over bursts per owner.
struct Out {
    tx: Vec<TxQueue>,
    tx_bursts: Vec<Burst>,
    handover: Vec<Burst>,
}

impl Out {
    /// Queues `m` for transmission on `port`, flushing a full burst first.
    #[inline]
    fn transmit(&mut self, c: &WorkerCounters, port: u16, m: Mbuf) {
        let p = usize::from(port);
        let Some(b) = self.tx_bursts.get_mut(p) else {
            // A port the snapshot knows but this lbd does not drive.
            c.count_drop(DropReason::NoNeighbor);
            return;
        };
        if b.is_full() {
            flush_tx(c, &mut self.tx[p], b);
        }
        // Room after the flush: a flush empties the burst.
        let _ = b.push(m);
    }

    fn flush(&mut self, c: &WorkerCounters, links: &mut Links) {
        for (q, b) in self.tx.iter_mut().zip(&mut self.tx_bursts) {
            if !b.is_empty() {
                flush_tx(c, q, b);
            }
        }
        for (ring, b) in links.handover_out.iter_mut().zip(&mut self.handover) {
            if b.is_empty() {
                continue;
            }
            if let Some(r) = ring {
                r.enqueue_burst(b);
            }
            for _ in 0..b.len() {
                c.count_drop(DropReason::HandoverRingFull);
            }
            b.clear();
        }
    }
}

#[inline]
fn flush_tx(c: &WorkerCounters, q: &mut TxQueue, b: &mut Burst) {
    c.tx_packets.add(q.tx_burst(b) as u64);
    for _ in 0..b.len() {
        c.count_drop(DropReason::TxFull);
    }
    b.clear();
}

/// Runs until `stop` is set; returns the worker (its counters and tables).
pub fn run(mut worker: Worker, io: WorkerIo, mut links: Links, shared: Shared) -> Worker {
    let counters = Arc::clone(worker.counters());
    let WorkerIo { mut rx, tx, .. } = io;
    let nports = rx.len();
    let mut out = Out {
        tx,
        tx_bursts: (0..nports).map(|_| Burst::new()).collect(),
        handover: links.handover_out.iter().map(|_| Burst::new()).collect(),
    };
    let mut burst = Burst::new();
    let mut scratch = Scratch {
        metas: [PacketMeta::default(); BURST_MAX],
        verdicts: [Verdict::ToHost; BURST_MAX],
    };
    let mut last_tick = Tick(0);
    while !shared.stop.load(Ordering::Relaxed) {
        let snap = shared.snapshot.load();
        let now = shared.clock.now();
        for q in rx.iter_mut() {
            let n = q.rx_burst(&mut burst);
            if n == 0 {
                continue;
            }
            counters.rx_packets.add(n as u64);
            process(
                &mut worker,
                now,
                &snap,
                &mut burst,
                &mut scratch,
                &mut out,
                &mut links,
            );
        }
        for i in 0..links.handover_in.len() {
            if links.handover_in[i].dequeue_burst(&mut burst) > 0 {
                process(
                    &mut worker,
                    now,
                    &snap,
                    &mut burst,
                    &mut scratch,
                    &mut out,
                    &mut links,
                );
            }
        }
        if let Some(c) = &mut links.control_in {
            if c.dequeue_burst(&mut burst) > 0 {
                for m in burst.drain() {
                    let port = m.port();
                    out.transmit(&counters, port, m);
                }
            }
        }
        out.flush(&counters, &mut links);
        drop(snap);
        if now != last_tick {
            last_tick = now;
            worker.handle_tick(now, TICK_BUDGET);
        }
    }
    worker
}

/// Per-burst metadata and verdicts.
struct Scratch {
    metas: [PacketMeta; BURST_MAX],
    verdicts: [Verdict; BURST_MAX],
}

/// The pipeline over one burst, then each frame where its verdict says.
/// The receiving port is the one in each mbuf: set by the PMD at rx, and
/// kept when another worker hands a frame over.
#[inline]
fn process(
    worker: &mut Worker,
    now: Tick,
    snap: &Snapshot,
    burst: &mut Burst,
    scratch: &mut Scratch,
    out: &mut Out,
    links: &mut Links,
) {
    let n = burst.len();
    let Scratch { metas, verdicts } = scratch;
    for (i, m) in metas[..n].iter_mut().enumerate() {
        m.port = burst.port(i);
    }
    {
        let mut frames = burst.frames_mut();
        worker.handle_burst_with(
            &Prefetch0,
            now,
            snap,
            &mut frames[..n],
            &metas[..n],
            &mut verdicts[..n],
        );
    }
    let c = Arc::clone(worker.counters());
    for (mut m, v) in burst.drain().zip(verdicts.iter()) {
        match *v {
            Verdict::Transmit { port, len } => {
                if m.set_len(len) {
                    out.transmit(&c, port, m);
                } else {
                    c.count_drop(DropReason::TooBig);
                }
            }
            Verdict::Drop(_) => {}
            Verdict::HandOver(w) => match out.handover.get_mut(usize::from(w.0)) {
                Some(b) => {
                    if b.is_full() {
                        if let Some(Some(r)) = links.handover_out.get_mut(usize::from(w.0)) {
                            r.enqueue_burst(b);
                        }
                        for _ in 0..b.len() {
                            c.count_drop(DropReason::HandoverRingFull);
                        }
                        b.clear();
                    }
                    let _ = b.push(m);
                }
                None => c.count_drop(DropReason::HandoverRingFull),
            },
            Verdict::Resolve { port, len, .. } => {
                if m.set_len(len) {
                    m.set_port(port);
                    if links.held_out.enqueue(m).is_err() {
                        c.count_drop(DropReason::NoNeighbor);
                    }
                } else {
                    c.count_drop(DropReason::TooBig);
                }
            }
            Verdict::Neighbor { ip, mac } => {
                // A full channel loses only the news; the next reply brings it.
                let _ = links.news.try_send((ip, mac.0));
            }
            Verdict::ToHost => c.count_drop(DropReason::LocalUnhandled),
        }
    }
}
