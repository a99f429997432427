//! `handle_burst` against `handle_packet`: the same random traffic through
//! two identical workers, one frame at a time and in bursts; verdicts,
//! output frames and the whole worker state (conntrack, SNAT pools,
//! counters, via `Debug`) must match after every burst.
//!
//! The traffic is built to hit the cases where a lookup done ahead could go
//! stale: a tiny conntrack (evictions, full table), few client ports (the
//! same new flow several times in one burst), replies to flows opened
//! earlier in the same burst, plus everything that never reaches conntrack
//! (garbage, ARP, echo, TTL 1, other workers' flows), replies to a client
//! without a route (`no_route`) and, with some neighbors unresolved,
//! `Resolve` verdicts.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::*;
use crate::conntrack;
use crate::flow::{Proto, WorkerId};
use crate::snapshot::{
    BackendSpec, Cidr, ForwardMode, FrontendKind, FrontendSpec, ServiceSpec, SessionAffinity, Snapshot,
    SnapshotBuilder,
};
use crate::worker::WorkerConfig;

pub(in crate::worker) const MAC0: [u8; 6] = [2, 0, 0, 0, 0, 0x10];
pub(in crate::worker) const MAC1: [u8; 6] = [2, 0, 0, 0, 0, 0x11];
pub(in crate::worker) const PEER: [u8; 6] = [2, 0, 0, 0, 0, 0xc1];

pub(in crate::worker) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Clients on port 0 (10.0.0.0/24, fd00::/64, others via 10.0.0.254),
/// backends on port 1; full-NAT TCP 10.0.0.100:80 and [fd00::100]:80, DNAT
/// UDP 10.0.0.101:53, and DNAT UDP 10.0.0.102:53 with client-IP affinity.
pub(in crate::worker) fn snapshot() -> Snapshot {
    builder().build().unwrap()
}

/// The builder of [`snapshot`], for tests that add to it.
pub(in crate::worker) fn builder() -> SnapshotBuilder<'static> {
    let mut b = SnapshotBuilder::new(1);
    b.interface(
        0,
        MAC0,
        Cidr::new(ip("10.0.0.1"), 24).unwrap(),
        Some(ip("10.0.0.254")),
    );
    b.interface(0, MAC0, Cidr::new(ip("fd00::1"), 64).unwrap(), None);
    b.interface(1, MAC1, Cidr::new(ip("10.1.0.1"), 24).unwrap(), None);
    b.interface(1, MAC1, Cidr::new(ip("fd01::1"), 64).unwrap(), None);
    b.snat_address(ip("10.1.0.100")).snat_address(ip("fd01::100"));
    for c in ["10.0.0.2", "10.0.0.3", "10.0.0.254", "fd00::2"] {
        b.neighbor(ip(c), PEER);
    }
    let mut web = ServiceSpec::new("default/web");
    web.mode = ForwardMode::FullNat;
    let web = b.service(web).unwrap();
    let fe = FrontendSpec::new(ip("10.0.0.100"), 80, Proto::Tcp, FrontendKind::LoadBalancer);
    b.frontend(web, fe).unwrap();
    let mut web6 = ServiceSpec::new("default/web6");
    web6.mode = ForwardMode::FullNat;
    let web6 = b.service(web6).unwrap();
    let fe = FrontendSpec::new(ip("fd00::100"), 80, Proto::Tcp, FrontendKind::LoadBalancer);
    b.frontend(web6, fe).unwrap();
    let mut dns = ServiceSpec::new("default/dns");
    dns.mode = ForwardMode::Dnat;
    let dns = b.service(dns).unwrap();
    let fe = FrontendSpec::new(ip("10.0.0.101"), 53, Proto::Udp, FrontendKind::ClusterIp);
    b.frontend(dns, fe).unwrap();
    // Client-IP affinity: its new flows take the general path, past the
    // affinity table.
    let mut sticky = ServiceSpec::new("default/sticky");
    sticky.mode = ForwardMode::Dnat;
    sticky.affinity = SessionAffinity::ClientIp {
        timeout: std::time::Duration::from_secs(10),
    };
    let sticky = b.service(sticky).unwrap();
    let fe = FrontendSpec::new(ip("10.0.0.102"), 53, Proto::Udp, FrontendKind::ClusterIp);
    b.frontend(sticky, fe).unwrap();
    for i in 11..=13 {
        b.neighbor(ip(&format!("10.1.0.{i}")), PEER);
        b.neighbor(ip(&format!("fd01::{i}")), PEER);
        b.backend(web, BackendSpec::new(ip(&format!("10.1.0.{i}")), 8080))
            .unwrap();
        b.backend(web6, BackendSpec::new(ip(&format!("fd01::{i}")), 8080))
            .unwrap();
        b.backend(dns, BackendSpec::new(ip(&format!("10.1.0.{i}")), 53))
            .unwrap();
        b.backend(sticky, BackendSpec::new(ip(&format!("10.1.0.{i}")), 54))
            .unwrap();
    }
    b
}

/// [`snapshot`] with 10.0.0.3, the gateway and backend 10.1.0.13
/// unresolved: forwards and replies alike meet `Resolve`.
pub(in crate::worker) fn snapshot_unresolved() -> Snapshot {
    let mut n = vec![(ip("10.0.0.2"), PEER), (ip("fd00::2"), PEER)];
    for i in 11..=12 {
        n.push((ip(&format!("10.1.0.{i}")), PEER));
    }
    for i in 11..=13 {
        n.push((ip(&format!("fd01::{i}")), PEER));
    }
    snapshot().with_neighbors(&n).unwrap()
}

pub(in crate::worker) fn worker(n_workers: u16, capacity: u32) -> Worker {
    // Small pools keep the `Debug` comparison fast.
    worker_with_ports(n_workers, capacity, 1024..=1279)
}

/// [`worker`] with SNAT ports `ports` on each SNAT address.
pub(in crate::worker) fn worker_with_ports(
    n_workers: u16,
    capacity: u32,
    ports: std::ops::RangeInclusive<u16>,
) -> Worker {
    let mut cfg = WorkerConfig::new(WorkerId(0), n_workers);
    cfg.conntrack = conntrack::Config {
        evict_window: 4,
        ..conntrack::Config::new(capacity, capacity / 2)
    };
    cfg.snat_addresses = vec![ip("10.1.0.100"), ip("fd01::100")];
    cfg.snat_ports = ports;
    cfg.frontend_slots = 8;
    cfg.backend_slots = 8;
    cfg.affinity = Some(std::sync::Arc::new(
        crate::affinity::AffinityTable::new(crate::affinity::MIN_CAPACITY, 1).unwrap(),
    ));
    Worker::new(cfg).unwrap()
}

/// A backend's answer: source, destination, IP protocol.
pub(in crate::worker) type Reply = ((IpAddr, u16), (IpAddr, u16), u8);

pub(in crate::worker) struct Rng(pub(in crate::worker) u64);

impl Rng {
    pub(in crate::worker) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(in crate::worker) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub(in crate::worker) fn tcp(src: (IpAddr, u16), dst: (IpAddr, u16), flags: u64, ttl: u8) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2(PEER, MAC0);
    let b = match (src.0, dst.0) {
        (IpAddr::V4(s), IpAddr::V4(d)) => b.ipv4(s.octets(), d.octets(), ttl),
        (IpAddr::V6(s), IpAddr::V6(d)) => b.ipv6(s.octets(), d.octets(), ttl),
        _ => unreachable!(),
    };
    let mut b = b.tcp(src.1, dst.1, 1, 1000);
    if flags & 1 != 0 {
        b = b.syn();
    }
    if flags & 2 != 0 {
        b = b.ack(1);
    }
    if flags & 4 != 0 {
        b = b.fin();
    }
    if flags & 8 != 0 {
        b = b.rst();
    }
    let mut out = Vec::new();
    b.write(&mut out, b"data").unwrap();
    out
}

pub(in crate::worker) fn udp(src: (IpAddr, u16), dst: (IpAddr, u16)) -> Vec<u8> {
    let (IpAddr::V4(s), IpAddr::V4(d)) = (src.0, dst.0) else {
        unreachable!()
    };
    let mut out = Vec::new();
    etherparse::PacketBuilder::ethernet2(PEER, MAC0)
        .ipv4(s.octets(), d.octets(), 64)
        .udp(src.1, dst.1)
        .write(&mut out, b"q")
        .unwrap();
    out
}

fn echo_to_interface(id: u16) -> Vec<u8> {
    let mut out = Vec::new();
    etherparse::PacketBuilder::ethernet2(PEER, MAC0)
        .ipv4([10, 0, 0, 2], [10, 0, 0, 1], 64)
        .icmpv4_echo_request(id, 1)
        .write(&mut out, b"ping")
        .unwrap();
    out
}

pub(in crate::worker) fn client(rng: &mut Rng, v6: bool) -> (IpAddr, u16) {
    let addr = if v6 {
        // fd99::2 is off every prefix, and there is no IPv6 gateway.
        let net = [0xfd00, 0xfd99][rng.below(2) as usize];
        IpAddr::V6(Ipv6Addr::new(net, 0, 0, 0, 0, 0, 0, 2))
    } else {
        match rng.below(3) {
            0 => ip("10.0.0.2"),
            1 => ip("10.0.0.3"),
            _ => IpAddr::V4(Ipv4Addr::new(172, 16, 0, rng.below(4) as u8)),
        }
    };
    // Few ports: the same flow recurs, often within one burst.
    (addr, 40000 + rng.below(24) as u16)
}

/// One random frame; `replies` holds tuples the backends may answer with.
pub(in crate::worker) fn frame(rng: &mut Rng, replies: &[Reply]) -> (Vec<u8>, u16) {
    let vip = (ip("10.0.0.100"), 80);
    let vip6 = (ip("fd00::100"), 80);
    match rng.below(20) {
        0..=4 => (tcp(client(rng, false), vip, 1, 64), 0),
        5..=7 => (
            tcp(client(rng, false), vip, [2, 6, 10][rng.below(3) as usize], 64),
            0,
        ),
        8 => (tcp(client(rng, true), vip6, 1 + rng.below(2), 64), 0),
        9 => (udp(client(rng, false), (ip("10.0.0.101"), 53)), 0),
        10 => (udp(client(rng, false), (ip("10.0.0.102"), 53)), 0),
        11..=14 if !replies.is_empty() => {
            let (src, dst, proto) = replies[rng.below(replies.len() as u64) as usize];
            let f = if proto == 6 {
                tcp(src, dst, [2, 3, 6, 10][rng.below(4) as usize], 64)
            } else {
                udp(src, dst)
            };
            (f, 1)
        }
        15 => (tcp(client(rng, false), vip, 1, 1), 0),
        16 => (echo_to_interface(rng.below(100) as u16), 0),
        17 => {
            let mut f = tcp(client(rng, false), vip, 1, 64);
            f.truncate(rng.below(f.len() as u64) as usize);
            (f, 0)
        }
        18 => (tcp(client(rng, false), (ip("10.0.0.100"), 81), 1, 64), 0),
        _ => (tcp(client(rng, false), vip, 1, 64), 0),
    }
}

pub(in crate::worker) fn meta(port: u16) -> PacketMeta {
    PacketMeta {
        port,
        offload: Default::default(),
    }
}

/// `frame`, for port `port` of a node whose ports 0 and 1 are on VLANs
/// `vids`, with an 802.1Q tag: mostly its port's id with random priority
/// and DEI bits; now and then the other port's id, an 802.1ad TPID, or no
/// tag at all.
pub(in crate::worker) fn tag_randomly(
    rng: &mut Rng,
    mut frame: Vec<u8>,
    port: u16,
    vids: [u16; 2],
) -> Vec<u8> {
    let own = vids[usize::from(port & 1)];
    let (tpid, vid) = match rng.below(32) {
        0 => return frame,
        1 => (0x88a8u16, own),
        2 | 3 => (0x8100, vids[usize::from(!port & 1)]),
        _ => (0x8100, own),
    };
    let tci = vid | (rng.below(16) as u16) << 12;
    let (p, t) = (tpid.to_be_bytes(), tci.to_be_bytes());
    let at = frame.len().min(12);
    frame.splice(at..at, [p[0], p[1], t[0], t[1]]);
    frame
}

/// What one [`run_seed`] saw.
#[derive(Debug, Default)]
pub(in crate::worker) struct Seen {
    pub(in crate::worker) evictions: u64,
    pub(in crate::worker) resolves: u64,
    pub(in crate::worker) no_route: u64,
    /// Packets dropped for want of a SNAT pair (`snat_exhausted`).
    pub(in crate::worker) snat_exhausted: u64,
}

/// A warming that counts its calls and loads nothing.
#[derive(Debug, Default)]
pub(in crate::worker) struct CountingPrefetch(pub(in crate::worker) std::cell::Cell<u64>);

impl crate::prefetch::Prefetch for CountingPrefetch {
    fn prefetch<T: Copy>(&self, _: &T) {
        self.0.set(self.0.get() + 1);
    }
}

/// Runs 150 random bursts through both workers; the burst worker warms
/// by plain loads on even rounds and through [`CountingPrefetch`] on odd
/// ones (the answers must not depend on it).
fn run_seed(snap: &Snapshot, seed: u64, n_workers: u16, capacity: u32) -> Seen {
    run_seed_on(snap, seed, n_workers, capacity, None)
}

/// [`run_seed`], on a tagged node when `vids` is given (ports 0 and 1 on
/// those VLANs): every frame tagged by [`tag_randomly`].
fn run_seed_on(snap: &Snapshot, seed: u64, n_workers: u16, capacity: u32, vids: Option<[u16; 2]>) -> Seen {
    run_traffic(snap, seed, n_workers, capacity, vids, frame)
}

/// [`run_seed_on`] with the traffic of `gen` instead of [`frame`]'s.
pub(in crate::worker) fn run_traffic(
    snap: &Snapshot,
    seed: u64,
    n_workers: u16,
    capacity: u32,
    vids: Option<[u16; 2]>,
    gen: fn(&mut Rng, &[Reply]) -> (Vec<u8>, u16),
) -> Seen {
    run_traffic_ports(snap, seed, n_workers, capacity, 1024..=1279, vids, gen)
}

/// [`run_traffic`] with workers whose SNAT ports are `ports` on each
/// address ([`worker_with_ports`]).
pub(in crate::worker) fn run_traffic_ports(
    snap: &Snapshot,
    seed: u64,
    n_workers: u16,
    capacity: u32,
    ports: std::ops::RangeInclusive<u16>,
    vids: Option<[u16; 2]>,
    gen: fn(&mut Rng, &[Reply]) -> (Vec<u8>, u16),
) -> Seen {
    let counting = CountingPrefetch::default();
    let mut one = worker_with_ports(n_workers, capacity, ports.clone());
    let mut burst = worker_with_ports(n_workers, capacity, ports);
    let mut rng = Rng(seed | 1);
    let mut replies: Vec<Reply> = Vec::new();
    let mut now = 0;
    let mut resolves = 0;
    for round in 0..150 {
        let len = 1 + rng.below(40) as usize;
        let mut frames = Vec::with_capacity(len);
        let mut metas = Vec::with_capacity(len);
        for _ in 0..len {
            let (mut f, port) = gen(&mut rng, &replies);
            if let Some(vids) = vids {
                f = tag_randomly(&mut rng, f, port, vids);
            }
            frames.push(f);
            let mut m = meta(port);
            if rng.below(4) == 0 {
                m.offload = super::super::fast::tests::offload(&mut rng);
            }
            metas.push(m);
        }
        let mut expect_frames = frames.clone();
        let expect: Vec<Verdict> = expect_frames
            .iter_mut()
            .zip(&metas)
            .map(|(f, m)| one.handle_packet(Tick(now), snap, f, m))
            .collect();
        let mut got = vec![Verdict::ToHost; len];
        if round % 2 == 0 {
            burst.handle_burst(Tick(now), snap, &mut frames, &metas, &mut got);
        } else {
            burst.handle_burst_with(&counting, Tick(now), snap, &mut frames, &metas, &mut got);
        }
        assert_eq!(got, expect, "seed {seed} round {round}: verdicts");
        resolves += expect
            .iter()
            .filter(|v| matches!(v, Verdict::Resolve { .. }))
            .count() as u64;
        assert_eq!(frames, expect_frames, "seed {seed} round {round}: frames");
        assert_eq!(
            format!("{burst:?}"),
            format!("{one:?}"),
            "seed {seed} round {round}: worker state"
        );
        // Forwarded frames become the backends' replies of later rounds
        // (but those whose checksums were left to a transmit offload,
        // which the parse refuses).
        for (f, v) in expect_frames.iter().zip(&expect) {
            if let Verdict::Transmit { port: 1, .. } | Verdict::Resolve { port: 1, .. } = v {
                if let Ok(p) = crate::wire::parse(f) {
                    replies.push(((p.dst, p.dst_port), (p.src, p.src_port), p.protocol));
                }
            }
        }
        if replies.len() > 64 {
            replies.drain(..replies.len() - 64);
        }
        now += 1 + rng.below(20_000);
        if round % 7 == 6 {
            assert_eq!(one.handle_tick(Tick(now), 16), burst.handle_tick(Tick(now), 16));
        }
    }
    assert!(one.counters().new_connections.get() > 0);
    assert!(counting.0.get() > 0, "the burst path warms through its Prefetch");
    let c = one.counters();
    Seen {
        evictions: c.conntrack_evictions.get(),
        resolves,
        no_route: c.drops_of(DropReason::NoRoute),
        snat_exhausted: c.drops_of(DropReason::SnatExhausted),
    }
}

/// In a full table, stage 2b warms the victims of the burst's openings
/// only: in each family, SYNs that miss to no frontend (a VIP's port
/// without one) warm as many lines as ACKs that miss; SYNs to the
/// frontend warm more (the victims' index lines and SNAT words) and
/// evict.
#[test]
fn burst_warms_victims_for_openings_only() {
    let snap = snapshot();
    for (client, vip) in [
        (ip("10.0.0.2"), ip("10.0.0.100")),
        (ip("fd00::2"), ip("fd00::100")),
    ] {
        let warmed = |port: u16, flags: u64| {
            // 16 IPv4 and 8 IPv6 entries, filled by the first SYNs.
            let mut w = worker(1, 16);
            for i in 0..16u16 {
                let mut f = tcp((client, 20000 + i), (vip, 80), 1, 64);
                w.handle_packet(Tick(1), &snap, &mut f, &meta(0));
            }
            let mut frames: Vec<Vec<u8>> = (0..8u16)
                .map(|i| tcp((client, 40000 + i), (vip, port), flags, 64))
                .collect();
            let metas = vec![meta(0); frames.len()];
            let mut verdicts = vec![Verdict::ToHost; frames.len()];
            let p = CountingPrefetch::default();
            let evicted = w.counters().conntrack_evictions.get();
            w.handle_burst_with(&p, Tick(2), &snap, &mut frames, &metas, &mut verdicts);
            (p.0.get(), w.counters().conntrack_evictions.get() - evicted)
        };
        let (syn, _) = warmed(81, 1);
        let (ack, _) = warmed(81, 2);
        assert_eq!(syn, ack, "{vip}: SYNs to no frontend warm as ACKs do");
        let (open, evicted) = warmed(80, 1);
        assert_eq!(evicted, 8, "{vip}");
        assert!(
            open > syn,
            "{vip}: {open} lines warmed for openings, {syn} for SYNs to nowhere"
        );
    }
}

/// Workers with 8 SNAT ports an address (two addresses, one a family):
/// allocations fail (`snat_exhausted`) and ports come back through
/// expiry and evictions within a run, so the burst's guesses at the next
/// SNAT pairs and the warming of their frees are often wrong; the answers
/// must be those of packet by packet all the same, in both families, with
/// room and with evictions.
#[test]
fn burst_matches_packet_by_packet_with_a_small_snat_pool() {
    let snap = snapshot();
    let (mut exhausted, mut evictions) = (0, 0);
    for seed in 1..=2u64 {
        for capacity in [1024, 16] {
            let seen = run_traffic_ports(&snap, seed * 0x5851_f42d, 1, capacity, 1024..=1031, None, frame);
            exhausted += seen.snat_exhausted;
            evictions += seen.evictions;
        }
    }
    assert!(
        exhausted > 0 && evictions > 0,
        "{exhausted} exhausted, {evictions} evictions"
    );
}

#[test]
fn burst_matches_packet_by_packet_with_evictions() {
    let snap = snapshot();
    let mut evictions = 0;
    for seed in 1..=12 {
        evictions += run_seed(&snap, seed * 0x9e37_79b9, 1, 16).evictions;
    }
    assert!(evictions > 0, "the traffic must cause evictions");
}

#[test]
fn burst_matches_packet_by_packet_with_room() {
    let snap = snapshot();
    let mut no_route = 0;
    for seed in 1..=6 {
        let seen = run_seed(&snap, seed * 0x51_7cc1, 1, 1024);
        assert_eq!(seen.resolves, 0, "every next hop is resolved");
        no_route += seen.no_route;
    }
    assert!(no_route > 0, "the traffic must meet no_route");
}

#[test]
fn burst_matches_packet_by_packet_with_hand_over() {
    let snap = snapshot();
    for seed in 1..=6 {
        run_seed(&snap, seed * 0x2545_f491, 2, 64);
    }
}

#[test]
fn burst_matches_packet_by_packet_with_unresolved_next_hops() {
    let snap = snapshot_unresolved();
    let mut resolves = 0;
    for seed in 1..=6 {
        resolves += run_seed(&snap, seed * 0x6c07_8965, 1, 256).resolves;
    }
    assert!(resolves > 0, "the traffic must meet Resolve");
}

/// On a tagged node (VLANs 10 and 20), staged as untagged bursts are:
/// the same answers as frame by frame, `vlan_mismatch` drops included.
#[test]
fn burst_matches_packet_by_packet_on_tagged_ports() {
    let mut b = builder();
    b.vlan(0, 10).vlan(1, 20);
    let snap = b.build().unwrap();
    let mut evictions = 0;
    for seed in 1..=6 {
        let (workers, capacity) = [(1, 16), (1, 1024), (2, 64)][seed as usize % 3];
        evictions += run_seed_on(&snap, seed * 0x3c6e_f372, workers, capacity, Some([10, 20])).evictions;
    }
    assert!(evictions > 0, "the traffic must cause evictions");
}

#[test]
fn burst_takes_the_shortest_slice() {
    let snap = snapshot();
    let mut w = worker(1, 64);
    let syn = tcp((ip("10.0.0.2"), 1), (ip("10.0.0.100"), 80), 1, 64);
    let mut frames = vec![syn.clone(); 3];
    let mut verdicts = [Verdict::ToHost; 2];
    w.handle_burst(Tick(0), &snap, &mut frames, &[meta(0); 3], &mut verdicts);
    assert!(matches!(verdicts[0], Verdict::Transmit { port: 1, .. }));
    assert!(matches!(verdicts[1], Verdict::Transmit { port: 1, .. }));
    assert_eq!(frames[2], syn, "third frame untouched");
    assert_eq!(w.counters().new_connections.get(), 1);
    let mut none: [Vec<u8>; 0] = [];
    w.handle_burst(Tick(0), &snap, &mut none, &[], &mut []);
}

/// One burst holding a connection's whole life and its reopening: the SYN,
/// the backend's SYN-ACK to the SNAT pair that SYN takes (a reply found
/// through the reply-port cells that the burst's stage 2 looked up before
/// the SYN inserted them), data, a RST, the client's SYN on the same ports
/// (which ends the closed entry and opens a new connection, with a new
/// SNAT pair), its SYN-ACK, and a late packet to the old pair. Built frame
/// by frame from a third worker's answers one at a time, then compared as
/// the random tests are, with the table roomy and tiny.
#[test]
fn a_connection_born_closed_and_reopened_within_one_burst() {
    let snap = snapshot();
    for capacity in [64, 4] {
        let mut probe = worker(1, capacity);
        let client = (ip("10.0.0.2"), 40000);
        let vip = (ip("10.0.0.100"), 80);
        let mut frames: Vec<Vec<u8>> = Vec::new();
        let mut metas = Vec::new();
        let mut push = |probe: &mut Worker, f: Vec<u8>, port: u16| -> (Verdict, Vec<u8>) {
            let mut out = f.clone();
            let v = probe.handle_packet(Tick(5), &snap, &mut out, &meta(port));
            frames.push(f);
            metas.push(meta(port));
            (v, out)
        };
        let (v, out) = push(&mut probe, tcp(client, vip, 1, 64), 0);
        assert!(matches!(v, Verdict::Transmit { port: 1, .. }), "{v:?}");
        let first = crate::wire::parse(&out).unwrap();
        let from_backend =
            |p: &crate::wire::Parsed, flags| tcp((p.dst, p.dst_port), (p.src, p.src_port), flags, 64);
        push(&mut probe, from_backend(&first, 3), 1);
        push(&mut probe, tcp(client, vip, 2, 64), 0);
        push(&mut probe, from_backend(&first, 2), 1);
        push(&mut probe, from_backend(&first, 8), 1);
        let (v, out) = push(&mut probe, tcp(client, vip, 1, 64), 0);
        assert!(matches!(v, Verdict::Transmit { port: 1, .. }), "{v:?}");
        let second = crate::wire::parse(&out).unwrap();
        assert_ne!(second.src_port, first.src_port, "a new SNAT pair");
        push(&mut probe, from_backend(&second, 3), 1);
        push(&mut probe, tcp(client, vip, 2, 64), 0);
        let (v, _) = push(&mut probe, from_backend(&first, 2), 1);
        assert_eq!(v, Verdict::Drop(DropReason::NoConntrackReply));
        assert_eq!(probe.counters().new_connections.get(), 2);

        let mut one = worker(1, capacity);
        let mut burst = worker(1, capacity);
        let mut expect_frames = frames.clone();
        let expect: Vec<Verdict> = expect_frames
            .iter_mut()
            .zip(&metas)
            .map(|(f, m)| one.handle_packet(Tick(5), &snap, f, m))
            .collect();
        let mut got = vec![Verdict::ToHost; frames.len()];
        burst.handle_burst(Tick(5), &snap, &mut frames, &metas, &mut got);
        assert_eq!(got, expect, "capacity {capacity}: verdicts");
        assert_eq!(frames, expect_frames, "capacity {capacity}: frames");
        assert_eq!(
            format!("{burst:?}"),
            format!("{one:?}"),
            "capacity {capacity}: worker state"
        );
        assert_eq!(
            format!("{burst:?}"),
            format!("{probe:?}"),
            "capacity {capacity}: as the probe"
        );
    }
}
