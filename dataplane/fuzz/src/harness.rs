//! One `handle_packet` fuzz input through the pipeline. Shared, by
//! `#[path]`, by the `handle_packet` fuzz target and by lb-dataplane's
//! `tests/corpus_replay.rs`, so the corpus is replayed by `cargo test`
//! exactly as the fuzzer runs it.
//!
//! The input is one Ethernet frame (on a tagged snapshot, it arrives with
//! its port's 802.1Q tag inserted). It goes, on fresh workers (worker 0 of
//! 1 without checksum offload, worker 1 of 2 with every offload flag), in
//! on port 0 and on port 1, twice (the second time may meet the conntrack
//! entry the first one created); every transmitted output is fed back on
//! the other port, as if the peer echoed it. Then a tick far in the future
//! must expire every connection and return every SNAT port. When the
//! frame's checksums do not all verify (as after most of the fuzzer's
//! mutations), the same runs once more without offload on the frame with
//! its checksums recomputed ([`oracle::repair`]), which the oracle then
//! applies to.
//!
//! Invariants checked (a violation panics, which the fuzzer reports):
//! no panic inside the pipeline; a `Transmit` names a configured port and
//! at least an Ethernet header, never more than the frame; on the worker
//! without offload, every frame sent (`Transmit`, `Resolve`,
//! `ReplyToNeighbor`, echoed ones included) for an input whose checksums
//! all verify has correct checksums and lengths (`oracle.rs`); the tick
//! leaves an empty conntrack and a full SNAT pool.

use std::net::IpAddr;

use lb_dataplane::affinity::{self, AffinityTable};
use lb_dataplane::checksum::ChecksumOffload;
use lb_dataplane::conntrack;
use lb_dataplane::flow::{Proto, WorkerId};
use lb_dataplane::worker::{PacketMeta, Verdict, Worker, WorkerConfig};
use lb_dataplane::{Snapshot, Tick};

use crate::oracle;

/// Every offload flag set: the other code path of parse and NAT.
const FULL_OFFLOAD: ChecksumOffload = ChecksumOffload {
    rx_ipv4_verified: true,
    rx_l4_partial: true,
    tx_ipv4: true,
    tx_l4: true,
};

fn snat_addresses(snap: &Snapshot) -> Vec<IpAddr> {
    let v4 = snap.snat_v4().iter().map(|a| IpAddr::V4(*a));
    v4.chain(snap.snat_v6().iter().map(|a| IpAddr::V6(*a))).collect()
}

fn worker(snap: &Snapshot, n_workers: u16, id: u16) -> Worker {
    let mut cfg = WorkerConfig::new(WorkerId(id), n_workers);
    cfg.conntrack = conntrack::Config::new(64, 64);
    cfg.snat_addresses = snat_addresses(snap);
    cfg.snat_ports = 20000..=20999;
    cfg.frontend_slots = 64;
    cfg.backend_slots = 64;
    // A small table: a worker is built for every input.
    let pins = AffinityTable::new(affinity::MIN_CAPACITY, 1).expect("valid size");
    cfg.affinity = Some(std::sync::Arc::new(pins));
    Worker::new(cfg).expect("fuzz worker config is valid")
}

fn free_snat_ports(w: &Worker, addrs: &[IpAddr]) -> usize {
    let protos = [Proto::Tcp, Proto::Udp, Proto::Icmp];
    addrs
        .iter()
        .flat_map(|a| protos.iter().map(move |p| w.snat_ports().available(*a, *p)))
        .sum()
}

/// Checks one verdict; returns the length to feed back for a `Transmit`.
fn check(snap: &Snapshot, v: Verdict, frame_len: usize) -> Option<usize> {
    match v {
        Verdict::Transmit { port, len } => {
            assert!(snap.port(port).is_some(), "transmit on unconfigured port {port}");
            assert!(
                (14..=frame_len).contains(&len),
                "transmit len {len} of a {frame_len}-byte frame"
            );
            Some(len)
        }
        Verdict::ReplyToNeighbor { len, ip, mac } => {
            // Sent back on the arrival port, which is configured (the
            // local path answers only there).
            assert!(
                (14..=frame_len).contains(&len),
                "reply len {len} of a {frame_len}-byte frame"
            );
            assert!(mac.is_unicast(), "hint {ip} at group or zero MAC {mac}");
            Some(len)
        }
        Verdict::Resolve { port, len, .. } => {
            // Same rules as Transmit; the frame is not fed back (no MAC).
            assert!(snap.port(port).is_some(), "resolve on unconfigured port {port}");
            assert!(
                (14..=frame_len).contains(&len),
                "resolve len {len} of a {frame_len}-byte frame"
            );
            None
        }
        Verdict::Drop(_) | Verdict::HandOver(_) | Verdict::Neighbor { .. } | Verdict::ToHost => None,
    }
}

/// The input as it arrives on `port`: as it is, or on a tagged snapshot
/// with the port's 802.1Q tag inserted after the MACs (a frame too short
/// for them stays as it is).
fn arriving(snap: &Snapshot, port: u16, data: &[u8]) -> Vec<u8> {
    let mut frame = data.to_vec();
    if let Some(vid) = snap.port(port).and_then(|p| p.vlan()) {
        if frame.len() >= 12 {
            let t = vid.to_be_bytes();
            frame.splice(12..12, [0x81, 0x00, t[0], t[1]]);
        }
    }
    frame
}

/// What one input ran.
#[derive(Debug, Default, Clone, Copy)]
pub struct Ran {
    /// Verdicts (never 0).
    pub verdicts: usize,
    /// Frames sent whose checksums and lengths the oracle checked.
    pub checked: usize,
}

/// Runs one input; see the module doc.
pub fn run(snap: &Snapshot, data: &[u8]) -> Ran {
    let addrs = snat_addresses(snap);
    let mut ran = Ran::default();
    let repaired = oracle::repair(data);
    let mut runs = vec![(1, 0, ChecksumOffload::NONE, data), (2, 1, FULL_OFFLOAD, data)];
    if repaired != data {
        runs.push((1, 0, ChecksumOffload::NONE, repaired.as_slice()));
    }
    for (n_workers, id, offload, data) in runs {
        let mut w = worker(snap, n_workers, id);
        let free = free_snat_ports(&w, &addrs);
        let mut now = 0u64;
        for _round in 0..2 {
            for port in [0u16, 1] {
                now += 1;
                let input = arriving(snap, port, data);
                let mut frame = input.clone();
                let meta = PacketMeta { port, offload };
                let v = w.handle_packet(Tick(now), snap, &mut frame, &meta);
                ran.verdicts += 1;
                ran.checked += usize::from(oracle::check(&input, &meta, &v, &frame));
                if let Some(len) = check(snap, v, frame.len()) {
                    let sent = &frame[..len];
                    let mut echoed = sent.to_vec();
                    let meta = PacketMeta {
                        port: 1 - port,
                        offload,
                    };
                    let v = w.handle_packet(Tick(now), snap, &mut echoed, &meta);
                    ran.verdicts += 1;
                    ran.checked += usize::from(oracle::check(sent, &meta, &v, &echoed));
                    check(snap, v, echoed.len());
                }
            }
        }
        w.handle_tick(Tick(1 << 40), 1 << 20);
        assert_eq!(w.conntrack().len(), 0, "a tick far ahead expires everything");
        assert_eq!(free_snat_ports(&w, &addrs), free, "every SNAT port comes back");
    }
    ran
}
