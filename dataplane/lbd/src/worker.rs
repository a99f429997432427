//! The worker loop: one per worker lcore (or on the main lcore when it is
//! the only one).
//!
//! Each worker owns rx queue `q` and tx queue `q` of every port. A loop
//! iteration loads the published snapshot once, then, per port: rx_burst
//! (frames chained over several mbufs freed: `multi_segment`),
//! [`Worker::handle_burst_with`] on the whole burst (its staged conntrack
//! lookups warmed by [`dpdk::prefetch`]), and each frame where its verdict
//! sends it:
//!
//! - `Transmit` → the tx burst of the verdict's port (this worker's queue);
//! - `HandOver(w)` → the ring to worker `w` (`handed_over`; full ring:
//!   `handover_ring_full`);
//! - `Resolve` → the ring to the control thread, which holds the frame
//!   until the next hop answers ARP (full ring: `no_neighbor`);
//! - `Neighbor` → the news goes to the control thread's neighbor table
//!   (`neighbor_updates`; full channel: `neighbor_channel_full`);
//! - `ReplyToNeighbor` (a request from a neighbor at a new MAC) → the
//!   reply goes back out of the arrival port, as `Transmit`, and the
//!   asker's address and MAC go to the neighbor table as a hint, as for
//!   `Neighbor`;
//! - `ToHost` → there is no path to a host stack: `local_unhandled`;
//! - `Drop` → freed (the pipeline counted it).
//!
//! Then the frames other workers handed over (processed as if received on
//! the port recorded in the mbuf), the frames the control thread wants sent
//! (ARP requests, gratuitous ARP, released held frames; worker 0 only), the
//! tx bursts flushed (what the NIC does not take: `tx_full`), and, the
//! first loop of every millisecond, conntrack expiry with a bounded budget
//! ([`TICK_BUDGET`]) and, after a snapshot of a new revision, the lap that
//! ends UDP connections of deleted backends and frontends
//! (`Worker::end_orphaned_udp`, the same budget).
//!
//! IPv4 header checksums go to the NIC where the ports offer it
//! ([`Offloads`]): a frame whose header checksum the NIC verified reaches
//! the pipeline marked so (no second check in software), and, when every
//! port fills tx checksums, the pipeline writes 0 in the header checksum of
//! what it rewrites and the frame asks the NIC for the sum
//! ([`ipv4_checksum_to_fill`]). TCP and UDP checksums stay in software:
//! their O(1) incremental update costs no more than the pseudo-header sum
//! an L4 offload would need.
//!
//! Counters are the pipeline's [`WorkerCounters`]: single-writer atomics the
//! control thread reads for GetStats and the final summary.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;

use arc_swap::ArcSwap;
use dpdk::ring::{self, Consumer, Producer, RingError};
use dpdk::{Burst, Eal, Mbuf, RxQueue, TxQueue, BURST_MAX};
use lb_dataplane::checksum::ChecksumOffload;
use lb_dataplane::counters::WorkerCounters;
use lb_dataplane::local;
use lb_dataplane::snapshot::Snapshot;
use lb_dataplane::worker::{PacketMeta, Verdict, Worker};
use lb_dataplane::{DropReason, Prefetch, Tick};

use crate::control::{HELD_RING, NEWS_CHANNEL};
use crate::neighbor::{Heard, News};
use crate::{CONTROL_RING, HANDOVER_RING};

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
    /// The ports' checksum offloads.
    pub offloads: Offloads,
}

/// The IPv4 header checksum offloads the workers use, from the ports'
/// ([`dpdk::Port::checksum_offload`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offloads {
    /// Bit `p`: port `p` verifies received IPv4 header checksums, so its
    /// mbufs' "good" flag can be trusted (ports from 64 on: never).
    pub rx_ipv4_ports: u64,
    /// Every port fills the IPv4 header checksums of the frames that ask.
    /// All of them or none: the pipeline prepares a frame (a 0 in the
    /// field) before its verdict names the port it leaves by.
    pub tx_ipv4: bool,
}

impl Offloads {
    /// From each port's offloads, in port order.
    pub fn of_ports(ports: &[dpdk::ChecksumOffload]) -> Offloads {
        let rx_ipv4_ports = ports
            .iter()
            .enumerate()
            .filter(|(i, c)| *i < 64 && c.rx_ipv4)
            .fold(0, |m, (i, _)| m | 1 << i);
        Offloads {
            rx_ipv4_ports,
            tx_ipv4: !ports.is_empty() && ports.iter().all(|c| c.tx_ipv4),
        }
    }

    /// The pipeline's view of a frame received on `port` whose mbuf says
    /// `good` of its IPv4 header checksum.
    #[inline]
    fn meta(&self, port: u16, good: bool) -> ChecksumOffload {
        ChecksumOffload {
            rx_ipv4_verified: good && port < 64 && self.rx_ipv4_ports >> port & 1 != 0,
            tx_ipv4: self.tx_ipv4,
            ..ChecksumOffload::NONE
        }
    }
}

/// Where the NIC must fill the IPv4 header checksum of `frame`, about to
/// be sent: `Some((l2_len, l3_len))` for an IPv4 frame (untagged or with one
/// 802.1Q tag) whose header checksum field holds 0, which is how the
/// pipeline leaves the frames it rewrote under [`Offloads::tx_ipv4`].
/// Frames it built itself (ARP, echo replies, resets, ICMP errors of its
/// own) carry a checksum computed in software and are left alone; one whose
/// computed checksum happens to be 0 gets the same 0 from the NIC, which
/// sums the header with the field at 0.
#[inline]
fn ipv4_checksum_to_fill(frame: &[u8]) -> Option<(u8, u16)> {
    let be16 = |at: usize| Some(u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]));
    let (l2, ethertype) = match be16(12)? {
        0x8100 => (18, be16(16)?),
        t => (14, t),
    };
    if ethertype != 0x0800 {
        return None;
    }
    let vihl = *frame.get(l2)?;
    let l3 = u16::from(vihl & 0x0f) * 4;
    if vihl >> 4 != 4 || l3 < 20 || frame.len() < l2 + usize::from(l3) || be16(l2 + 10)? != 0 {
        return None;
    }
    Some((l2 as u8, l3))
}

/// Marks `m` for the NIC's IPv4 header checksum if [`ipv4_checksum_to_fill`]
/// says so (only called under [`Offloads::tx_ipv4`]).
#[inline]
fn offload_checksum(m: &mut Mbuf) {
    if let Some((l2, l3)) = ipv4_checksum_to_fill(m.data()) {
        m.offload_ipv4_checksum(l2, l3);
    }
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
    /// What the frames told of neighbors, to the control thread.
    pub news: SyncSender<News>,
}

/// The rings between the lcores, made by [`wire`].
#[derive(Debug)]
pub struct Wiring {
    /// Each worker's, by index.
    pub links: Vec<Links>,
    /// The control thread's ends of the workers' held-frame rings.
    pub held_in: Vec<Consumer>,
    /// The control thread's end of worker 0's control ring.
    pub to_worker: Producer,
    /// The control thread's end of the workers' neighbor news.
    pub news: Receiver<News>,
}

/// Makes the rings of `workers` workers: a hand-over ring per (sender,
/// owner) pair, a held-frame ring per worker to the control thread, the
/// control thread's ring of frames to send to worker 0, and the channel
/// of neighbor news to the control thread.
pub fn wire(eal: &Eal, workers: usize) -> Result<Wiring, RingError> {
    let (news_tx, news) = std::sync::mpsc::sync_channel(NEWS_CHANNEL);
    let mut handover_in: Vec<Vec<Consumer>> = (0..workers).map(|_| Vec::new()).collect();
    let mut handover_out: Vec<Vec<Option<Producer>>> = Vec::with_capacity(workers);
    for from in 0..workers {
        let mut outs = Vec::with_capacity(workers);
        for (to, ins) in handover_in.iter_mut().enumerate() {
            if from == to {
                outs.push(None);
                continue;
            }
            let (p, c) = ring::channel(eal, &format!("lbd_ho_{from}_{to}"), HANDOVER_RING)?;
            outs.push(Some(p));
            ins.push(c);
        }
        handover_out.push(outs);
    }
    let mut held_in = Vec::new();
    let mut links = Vec::new();
    let (to_worker, control_in) = ring::channel(eal, "lbd_ctl", CONTROL_RING)?;
    let mut control_in = Some(control_in);
    for (w, (out, inn)) in handover_out.into_iter().zip(handover_in).enumerate() {
        let (hp, hc) = ring::channel(eal, &format!("lbd_held_{w}"), HELD_RING)?;
        held_in.push(hc);
        links.push(Links {
            handover_out: out,
            handover_in: inn,
            held_out: hp,
            control_in: control_in.take(),
            news: news_tx.clone(),
        });
    }
    Ok(Wiring {
        links,
        held_in,
        to_worker,
        news,
    })
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
                c.handed_over.add(r.enqueue_burst(b) as u64);
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

/// Runs until `stop` is set; returns the worker (its counters and tables)
/// and its links, whose incoming rings main drains and counts at exit.
pub fn run(mut worker: Worker, io: WorkerIo, mut links: Links, shared: Shared) -> (Worker, Links) {
    let counters = Arc::clone(worker.counters());
    let WorkerIo {
        mut rx, tx, offloads, ..
    } = io;
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
    // Fault injection for lbd's own tests, in debug builds only: how a
    // worker's panic ends lbd (tests/worker_panic.rs).
    #[cfg(debug_assertions)]
    if std::env::var_os("LBD_TEST_WORKER_PANIC").is_some() {
        panic!("LBD_TEST_WORKER_PANIC: a worker panic injected for a test");
    }
    while !shared.stop.load(Ordering::Relaxed) {
        let snap = shared.snapshot.load();
        let now = shared.clock.now();
        for q in rx.iter_mut() {
            let n = q.rx_burst(&mut burst);
            if n == 0 {
                continue;
            }
            counters.rx_packets.add(n as u64);
            for _ in 0..burst.free_chained() {
                counters.count_drop(DropReason::MultiSegment);
            }
            process(
                &mut worker,
                now,
                &snap,
                &mut burst,
                &mut scratch,
                &mut out,
                &mut links,
                &offloads,
            );
        }
        for i in 0..links.handover_in.len() {
            if links.handover_in[i].dequeue_burst(&mut burst) > 0 {
                // Loaded after the dequeue, so at least as new as the one
                // the sender handled them with: with an older one (the
                // sender having just seen a publish), a SYN to a frontend
                // just added would be refused here.
                let snap = shared.snapshot.load();
                process(
                    &mut worker,
                    now,
                    &snap,
                    &mut burst,
                    &mut scratch,
                    &mut out,
                    &mut links,
                    &offloads,
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
        if now != last_tick {
            last_tick = now;
            worker.handle_tick(now, TICK_BUDGET);
            worker.end_orphaned_udp(&snap, TICK_BUDGET);
        }
        drop(snap);
    }
    // The rings in are handed back: other lcores may still be filling
    // them, so main drains and counts them once all have stopped.
    (worker, links)
}

/// Per-burst metadata and verdicts.
struct Scratch {
    metas: [PacketMeta; BURST_MAX],
    verdicts: [Verdict; BURST_MAX],
}

/// The pipeline over one burst, then each frame where its verdict says.
/// The receiving port is the one in each mbuf: set by the PMD at rx, and
/// kept when another worker hands a frame over (so are its rx checksum
/// flags).
#[allow(clippy::too_many_arguments)]
#[inline]
fn process(
    worker: &mut Worker,
    now: Tick,
    snap: &Snapshot,
    burst: &mut Burst,
    scratch: &mut Scratch,
    out: &mut Out,
    links: &mut Links,
    offloads: &Offloads,
) {
    let n = burst.len();
    let Scratch { metas, verdicts } = scratch;
    for (i, m) in metas[..n].iter_mut().enumerate() {
        m.port = burst.port(i);
        m.offload = offloads.meta(m.port, burst.rx_ipv4_checksum_good(i));
        // A neighbor solicitation without options (a DAD probe) is answered
        // with a target link-layer option (RFC 4861 §7.2.4) from the
        // mbuf's tailroom; without tailroom the answer goes without it.
        let room = local::reply_room(burst.data_mut(i));
        if room > 0 {
            let _ = burst.grow(i, room as u16); // room <= 8
        }
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
                    if offloads.tx_ipv4 {
                        offload_checksum(&mut m);
                    }
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
                            c.handed_over.add(r.enqueue_burst(b) as u64);
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
                    if offloads.tx_ipv4 {
                        offload_checksum(&mut m);
                    }
                    m.set_port(port);
                    if links.held_out.enqueue(m).is_err() {
                        c.count_drop(DropReason::NoNeighbor);
                    }
                } else {
                    c.count_drop(DropReason::TooBig);
                }
            }
            Verdict::Neighbor { ip, mac, announced } => {
                let heard = if announced {
                    Heard::Announced
                } else {
                    Heard::Answer
                };
                send_news(links, &c, ip, mac.0, m.port(), heard);
            }
            Verdict::ReplyToNeighbor { len, ip, mac } => {
                let port = m.port();
                send_news(links, &c, ip, mac.0, port, Heard::Asked);
                if m.set_len(len) {
                    out.transmit(&c, port, m);
                } else {
                    c.count_drop(DropReason::TooBig);
                }
            }
            Verdict::ToHost => c.count_drop(DropReason::LocalUnhandled),
        }
    }
}

/// Passes what a frame told of a neighbor to the control thread's table.
/// A full channel loses only the news; the next reply brings it. An
/// answer's frame carried only the news, so losing it is the frame's drop
/// (`neighbor_channel_full`); a request's hint rides on a reply that is
/// transmitted anyway, so its loss is not a drop (each frame ends once in
/// the counters). With the port it came in on: the table takes news of an
/// address only from the port it reaches that address by.
fn send_news(links: &Links, c: &WorkerCounters, ip: IpAddr, mac: [u8; 6], port: u16, heard: Heard) {
    if links.news.try_send(News { ip, mac, port, heard }).is_ok() {
        c.neighbor_updates.inc();
    } else if heard != Heard::Asked {
        c.count_drop(DropReason::NeighborChannelFull);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet frame (tagged with `vlan` if given) around an IPv4
    /// header of `ihl` words with header checksum `csum`, 8 bytes of L4.
    fn frame(vlan: Option<u16>, ihl: u8, csum: u16) -> Vec<u8> {
        let mut f = vec![0x02; 12];
        if let Some(tci) = vlan {
            f.extend_from_slice(&[0x81, 0x00]);
            f.extend_from_slice(&tci.to_be_bytes());
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let mut ip = vec![0u8; usize::from(ihl) * 4];
        ip[0] = 0x40 | ihl;
        ip[8] = 64;
        ip[9] = 6;
        ip[10..12].copy_from_slice(&csum.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&[0; 8]);
        f
    }

    #[test]
    fn only_ipv4_headers_with_a_zero_checksum_ask_the_nic() {
        assert_eq!(ipv4_checksum_to_fill(&frame(None, 5, 0)), Some((14, 20)));
        assert_eq!(ipv4_checksum_to_fill(&frame(Some(7), 5, 0)), Some((18, 20)));
        assert_eq!(ipv4_checksum_to_fill(&frame(None, 15, 0)), Some((14, 60)));
        // Computed in software: left as it is.
        assert_eq!(ipv4_checksum_to_fill(&frame(None, 5, 0xb1e6)), None);
        assert_eq!(ipv4_checksum_to_fill(&frame(Some(7), 5, 1)), None);
        // Not an IPv4 header the NIC could sum.
        let mut arp = frame(None, 5, 0);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(ipv4_checksum_to_fill(&arp), None);
        let mut v6 = frame(None, 5, 0);
        v6[14] = 0x65;
        assert_eq!(ipv4_checksum_to_fill(&v6), None);
        let mut short_ihl = frame(None, 5, 0);
        short_ihl[14] = 0x44;
        assert_eq!(ipv4_checksum_to_fill(&short_ihl), None);
        // Truncated anywhere up to the end of the IP header: no panic.
        let f = frame(None, 6, 0);
        for len in 0..14 + 24 {
            assert_eq!(ipv4_checksum_to_fill(&f[..len]), None, "{len} bytes");
        }
        assert_eq!(ipv4_checksum_to_fill(&f[..38]), Some((14, 24)));
    }

    #[test]
    fn offloads_come_from_every_port() {
        let both = dpdk::ChecksumOffload {
            rx_ipv4: true,
            tx_ipv4: true,
        };
        let none = dpdk::ChecksumOffload::default();
        let o = Offloads::of_ports(&[both, both]);
        assert_eq!(
            o,
            Offloads {
                rx_ipv4_ports: 0b11,
                tx_ipv4: true
            }
        );
        // Tx needs every port; rx is per port.
        let o = Offloads::of_ports(&[none, both]);
        assert_eq!(
            o,
            Offloads {
                rx_ipv4_ports: 0b10,
                tx_ipv4: false
            }
        );
        assert!(!o.meta(0, true).rx_ipv4_verified);
        assert!(o.meta(1, true).rx_ipv4_verified);
        assert!(!o.meta(1, false).rx_ipv4_verified);
        assert!(!o.meta(64, true).rx_ipv4_verified);
        assert_eq!(Offloads::of_ports(&[]), Offloads::default());
        let m = Offloads::of_ports(&[both]).meta(0, true);
        assert!(m.tx_ipv4 && !m.tx_l4 && !m.rx_l4_partial);
    }
}
