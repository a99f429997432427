//! The flow cache of the IPv4 fast path (module doc of `fast.rs`) across
//! snapshots: a packet after a new snapshot gets that snapshot's answer,
//! never the one cached under the previous one, and a packet the checks
//! refuse (another worker's, no frontend any more) caches nothing. Then the
//! differential run of `fast_tests.rs` with the snapshot switching under
//! it. Each test here fails if the epoch check is taken out of the cache.

use std::net::IpAddr;

use super::super::burst::tests::{frame, ip, snapshot, snapshot_unresolved, udp, worker};
use super::tests::{run_switching, state};
use crate::conntrack::{Direction, EntryId};
use crate::flow::{owner_of_client, Proto, WorkerId};
use crate::snapshot::{
    BackendSpec, Cidr, FrontendKind, FrontendSpec, ServiceSpec, Snapshot, SnapshotBuilder,
};
use crate::worker::{PacketMeta, Verdict, Worker};
use crate::Tick;

const MAC0: [u8; 6] = [2, 0, 0, 0, 0, 0x10];
const MAC1: [u8; 6] = [2, 0, 0, 0, 0, 0x11];
const PEER: [u8; 6] = [2, 0, 0, 0, 0, 0xc1];
const NEW: [u8; 6] = [2, 0, 0, 0, 0, 0x77];

/// Port 0: clients 10.0.0.0/24 (10.0.0.2 and 10.0.0.3 resolved) via
/// 10.0.0.254; port 1: backends 10.1.0.0/24 (10.1.0.11 resolved), SNAT
/// address 10.1.0.100. No service.
fn bare() -> SnapshotBuilder<'static> {
    let mut b = SnapshotBuilder::new(1);
    let cidr = |s: &str, len| Cidr::new(ip(s), len).unwrap();
    b.interface(0, MAC0, cidr("10.0.0.1", 24), Some(ip("10.0.0.254")));
    b.interface(1, MAC1, cidr("10.1.0.1", 24), None);
    b.snat_address(ip("10.1.0.100"));
    for n in ["10.0.0.2", "10.0.0.3", "10.0.0.254", "10.1.0.11"] {
        b.neighbor(ip(n), PEER);
    }
    b
}

/// [`bare`] with a DNAT UDP service at `vip` whose one backend is
/// 10.1.0.11:53.
fn with_dns(vip: (IpAddr, u16)) -> Snapshot {
    let mut b = bare();
    let dns = b.service(ServiceSpec::new("default/dns")).unwrap();
    let fe = FrontendSpec::new(vip.0, vip.1, Proto::Udp, FrontendKind::ClusterIp);
    b.frontend(dns, fe).unwrap();
    b.backend(dns, BackendSpec::new(ip("10.1.0.11"), 53)).unwrap();
    b.build().unwrap()
}

fn meta(port: u16) -> PacketMeta {
    PacketMeta {
        port,
        ..PacketMeta::default()
    }
}

/// Two identical workers: one runs the fast path (the general path when it
/// declines), the other the general path only.
struct Pair {
    fast: Worker,
    general: Worker,
    now: u64,
}

impl Pair {
    fn new(n_workers: u16) -> Pair {
        Pair {
            fast: worker(n_workers, 64),
            general: worker(n_workers, 64),
            now: 0,
        }
    }

    /// Sends `f` (arriving on `port`) through both; checks they agree and
    /// returns the verdict, the output frame and whether the fast path
    /// answered.
    fn send(&mut self, snap: &Snapshot, f: &[u8], port: u16) -> (Verdict, Vec<u8>, bool) {
        self.now += 10;
        let now = Tick(self.now);
        let m = meta(port);
        let mut by_general = f.to_vec();
        let expect = self.general.handle_packet_general(now, snap, &mut by_general, &m);
        let mut by_fast = f.to_vec();
        let (got, answered) = match self.fast.fast_v4(now, snap, &mut by_fast, &m) {
            Some(v) => (v, true),
            None => {
                assert_eq!(by_fast, f, "declined but wrote");
                (
                    self.fast.handle_packet_general(now, snap, &mut by_fast, &m),
                    false,
                )
            }
        };
        assert_eq!(got, expect, "verdict");
        assert_eq!(by_fast, by_general, "frame");
        assert_eq!(state(&self.fast), state(&self.general), "worker state");
        (got, by_fast, answered)
    }

    /// The fast worker's entry for `f`'s 5-tuple and its direction.
    fn entry(&self, f: &[u8]) -> (EntryId, Direction) {
        let k = super::read_v4(f, &meta(0)).expect("an IPv4 TCP/UDP frame");
        self.fast
            .conntrack()
            .lookup_v4(k.src, k.dst, k.sport, k.dport, k.proto as u8)
            .expect("tracked")
    }

    /// The hop index cached for `f`'s entry and direction under `snap`.
    fn cached(&self, snap: &Snapshot, f: &[u8]) -> Option<u32> {
        let (id, dir) = self.entry(f);
        self.fast
            .conntrack()
            .rewrite_cached_v4(id, dir, snap.epoch())
            .unwrap()
            .1
    }
}

#[test]
fn new_neighbor_macs_are_used_at_once() {
    let vip = (ip("10.0.0.101"), 53);
    let s1 = with_dns(vip);
    let mut p = Pair::new(1);
    let out = udp((ip("10.0.0.2"), 40000), vip);
    let back = udp((ip("10.1.0.11"), 53), (ip("10.0.0.2"), 40000));
    p.send(&s1, &out, 0);
    for f in [&out, &back, &out, &back] {
        let (v, frame, answered) = p.send(&s1, f, 0);
        assert!(answered && matches!(v, Verdict::Transmit { .. }), "{v:?}");
        assert_eq!(frame[..6], PEER);
    }
    assert!(p.cached(&s1, &out).is_some() && p.cached(&s1, &back).is_some());
    // The client and the backend get new MACs, and every hop a new index
    // (the list reversed, one more in front).
    let s2 = s1
        .with_neighbors(&[
            (ip("10.0.0.3"), PEER),
            (ip("10.1.0.11"), NEW),
            (ip("10.0.0.254"), PEER),
            (ip("10.0.0.2"), NEW),
        ])
        .unwrap();
    assert_eq!(p.cached(&s2, &out), None, "another epoch");
    for (f, port) in [(&out, 1), (&back, 0), (&out, 1), (&back, 0)] {
        let (v, frame, answered) = p.send(&s2, f, 0);
        assert!(answered, "{v:?}");
        assert_eq!(v, Verdict::Transmit { port, len: f.len() });
        assert_eq!(frame[..6], NEW);
    }
    // A clone is the same snapshot: its epoch finds the cache valid.
    assert_eq!(p.cached(&s2.clone(), &out), p.cached(&s2, &out));
    assert!(p.cached(&s2, &out).is_some());
}

#[test]
fn a_deleted_frontend_is_seen_at_once() {
    let vip = (ip("10.0.0.101"), 53);
    let s1 = with_dns(vip);
    let mut p = Pair::new(1);
    let out = udp((ip("10.0.0.2"), 40000), vip);
    p.send(&s1, &out, 0);
    let (_, _, answered) = p.send(&s1, &out, 0);
    assert!(answered);
    assert!(p.cached(&s1, &out).is_some());
    // No service at all: the VIP is no longer the balancer's, and a
    // packet of the old connection is not forwarded by its entry.
    let s2 = bare().build().unwrap();
    for _ in 0..3 {
        let (v, _, answered) = p.send(&s2, &out, 0);
        assert!(!answered, "{v:?}");
        assert_eq!(p.cached(&s2, &out), None, "a declined packet caches nothing");
    }
    // Back on the first snapshot (a clone: same epoch), the cache is good.
    let (v, _, answered) = p.send(&s1.clone(), &out, 0);
    assert!(
        answered && matches!(v, Verdict::Transmit { port: 1, .. }),
        "{v:?}"
    );
}

#[test]
fn another_workers_flow_after_a_new_snapshot_is_handed_over() {
    // Worker 0 of 2 owns the client; the VIP endpoint, once it is no
    // frontend, is treated as a DNAT client, owned by worker 1.
    let n = 2;
    let mine = |a: &str, port: u16| owner_of_client(ip(a), port, n) == WorkerId(0);
    let vport = (1..u16::MAX).find(|&p| !mine("10.0.0.101", p)).unwrap();
    let cport = (40000..u16::MAX).find(|&p| mine("10.0.0.2", p)).unwrap();
    let vip = (ip("10.0.0.101"), vport);
    let s1 = with_dns(vip);
    let mut p = Pair::new(n);
    let out = udp((ip("10.0.0.2"), cport), vip);
    p.send(&s1, &out, 0);
    let (v, _, answered) = p.send(&s1, &out, 0);
    assert!(answered && matches!(v, Verdict::Transmit { .. }), "{v:?}");
    assert!(p.cached(&s1, &out).is_some());
    let s2 = bare().build().unwrap();
    for _ in 0..3 {
        let (v, _, answered) = p.send(&s2, &out, 0);
        assert_eq!(v, Verdict::HandOver(WorkerId(1)));
        assert!(!answered);
        assert_eq!(p.cached(&s2, &out), None, "a hand-over caches nothing");
    }
}

#[test]
fn fast_path_answers_as_the_general_path_while_snapshots_change() {
    // Every neighbor known under another index and one MAC changed; no
    // service at all; some hops unresolved; and the original.
    let mut neighbors = vec![(ip("fd00::2"), PEER), (ip("10.1.0.12"), NEW)];
    for n in ["10.1.0.13", "10.1.0.11", "10.0.0.254", "10.0.0.3", "10.0.0.2"] {
        neighbors.push((ip(n), PEER));
    }
    for i in 11..=13 {
        neighbors.push((ip(&format!("fd01::{i}")), PEER));
    }
    let base = snapshot();
    let mut none = bare();
    none.interface(0, MAC0, Cidr::new(ip("fd00::1"), 64).unwrap(), None);
    none.interface(1, MAC1, Cidr::new(ip("fd01::1"), 64).unwrap(), None);
    let snaps = [
        base.with_neighbors(&neighbors).unwrap(),
        none.build().unwrap(),
        snapshot_unresolved(),
        base,
    ];
    for n_workers in [1, 2] {
        for seed in 1..=6u64 {
            let mk = || worker(n_workers, 1024);
            let s = run_switching(&snaps, seed.wrapping_mul(0x5851_f42d_4c95_7f2d), mk, frame);
            assert!(s.fast > 300 && s.declined > 300, "{s:?}");
        }
    }
}
