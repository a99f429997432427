//! The whole packet pipeline per packet: `Worker::handle_packet` in a loop
//! over a 32-frame burst, and `Worker::handle_burst` on the same burst.
//!
//! `cargo bench -p lb-dataplane --bench pipeline`. Every reported time is
//! **per packet** (the time of one 32-frame burst divided by 32).
//!
//! Method:
//! - One worker (`n_workers = 1`), a full-NAT TCP service 10.0.0.100:80 with
//!   16 backends, 32 SNAT addresses, the default conntrack size (1M IPv4
//!   connections: what lbd runs with). Clients are 100.64.0.0/10 addresses
//!   behind the default gateway, so both directions take the neighbor hash
//!   and the default-route fallback. Frames are 60-byte TCP ACKs; IPv4
//!   header checksums are verified and updated in software (no offload);
//!   `PIPELINE_OFFLOAD=nic` runs every variant as on a NIC with IPv4
//!   header checksum offload both ways (verified on receipt, left to the
//!   NIC on the way out), as lbd uses it where ports have it.
//!   `PIPELINE_VLAN=1` runs every variant on a tagged node: port 0 on
//!   VLAN 10, port 1 on VLAN 20, every frame with its port's 802.1Q tag
//!   (in 4 bytes of the padding: frames stay 60 bytes).
//!   The `pipeline_v6` bench runs every variant in IPv6 instead: the same
//!   services on fd00::100-102, backends and SNAT addresses in fd01::/64,
//!   clients in 2001:db8::/64 behind the default gateway fd00::fe, 74-byte
//!   frames, the conntrack's IPv6 table as large as the IPv4 one is
//!   otherwise (criterion's groups end with `_v6`); `pipeline_v6_tagged`
//!   runs them on a tagged node, as `PIPELINE_VLAN=1` does in IPv4
//!   (78-byte frames; groups end with `_v6_tagged`).
//! - Established: the table is filled with n = 1k or 1M connections (a SYN,
//!   the backend's SYN-ACK and the client's ACK each, through
//!   `handle_packet`, so every entry is ESTABLISHED). The timed
//!   bursts walk all n flows in a random order unrelated to insertion, so
//!   at 1M every packet pays the index and entry misses a real worker pays.
//! - Frame reuse: a rewrite changes the frame, so pristine copies are kept
//!   and copied into the 32 working buffers before each burst, **outside**
//!   the timed region (each burst is timed with its own `Instant` pair;
//!   `timer_overhead` measures an empty timed region, ~1 ns per packet, and
//!   is not subtracted). The copy leaves the frames in L1, as DDIO leaves
//!   received frames in the LLC.
//! - New flow: SYNs of distinct flows from a pool of 256k, cycled; `now`
//!   advances 20 ms per burst, so a SYN_SENT entry (60 s timeout) expires
//!   3,000 bursts after its SYN and `handle_tick(now, 256)` after every
//!   burst sweeps it out before its flow comes round again (8,192 bursts),
//!   returning its SNAT port. In steady state ~100k-230k connections are
//!   live. `new_flow/*` times the packets and the tick (the expiry is part of
//!   what a new flow costs); `new_flow_no_tick/*` the packets only.
//! - SYN flood (`PIPELINE_MEDIANS` only): `new_flow_full_table/*`, a 64k
//!   table and SYNs of 256k flows, and `new_flow_full_table_1m/*`, the
//!   default 1M table and SYNs of 2M flows: the table full, every SYN
//!   evicts an embryonic entry (as in `bench/run.sh`'s SYN floods); and
//!   both again (`*_dnat`) to a DNAT service with the same backends.
//! - `handle_burst` warms the lines of its staged lookups with the
//!   `prefetcht0` lbd passes it (`Worker::handle_burst_with` and
//!   `dpdk::prefetch`); `PIPELINE_WARM=loads` makes it warm them with plain
//!   loads instead (`Worker::handle_burst`), for comparison.
//! - Each variant is checked once before timing: every verdict must be a
//!   `Transmit` (and every SYN a new connection).
//!
//! The bytes per connection are printed first.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use lb_dataplane::checksum::ChecksumOffload;
use lb_dataplane::conntrack::{self, Conntrack};
use lb_dataplane::flow::{FlowKey, Proto, WorkerId};
use lb_dataplane::snapshot::{
    BackendSpec, Cidr, ForwardMode, FrontendKind, FrontendSpec, ServiceSpec, SessionAffinity,
};
use lb_dataplane::worker::{PacketMeta, Verdict, Worker, WorkerConfig};
use lb_dataplane::{Snapshot, SnapshotBuilder, Tick};

mod common;
use common::Prefetch0;

const BURST: usize = 32;
/// An IPv4 frame: 60 bytes (54 of headers, padding).
const FRAME: usize = 60;
/// An IPv6 frame (`pipeline_v6.rs`): 74 bytes of headers.
#[allow(dead_code)] // in this binary: IPv4 only
pub(crate) const FRAME6: usize = 74;
/// A tagged IPv6 frame (`pipeline_v6_tagged.rs`): the 74 bytes and an
/// 802.1Q tag.
#[allow(dead_code)] // in this binary: IPv4 only
pub(crate) const FRAME6_TAGGED: usize = FRAME6 + 4;
/// A frame of `N` bytes: [`FRAME`], [`FRAME6`] or [`FRAME6_TAGGED`]. Everything that holds
/// frames is generic over `N`, so the IPv4 variants compile as they did
/// before IPv6 was measured.
type Frame<const N: usize> = [u8; N];

const MAC0: [u8; 6] = [2, 0, 0, 0, 0, 0x10];
const MAC1: [u8; 6] = [2, 0, 0, 0, 0, 0x11];
const PEER: [u8; 6] = [2, 0, 0, 0, 0, 0xee];
const BACKENDS: u32 = 16;
const SNAT_ADDRS: u32 = 32;

/// `pipeline_v6.rs`: every address IPv6 (module doc).
static SIX: AtomicBool = AtomicBool::new(false);

fn six() -> bool {
    SIX.load(Relaxed)
}

/// The address the IPv4 bench has `v4` (a `u32`) for; in IPv6, `v6`.
fn addr(v4: u32, v6: u128) -> IpAddr {
    if six() {
        IpAddr::V6(Ipv6Addr::from(v6))
    } else {
        IpAddr::V4(Ipv4Addr::from(v4))
    }
}

/// The full-NAT service's frontend: 10.0.0.100 or fd00::100.
fn vip() -> IpAddr {
    addr(0x0a00_0064, 0xfd00_0000_0000_0000_0000_0000_0000_0100)
}

/// The frontend of a DNAT service with the same backends, for the DNAT
/// SYN flood.
fn vip_dnat() -> IpAddr {
    addr(0x0a00_0065, 0xfd00_0000_0000_0000_0000_0000_0000_0101)
}

/// The frontend of a DNAT service with client-IP affinity and the same
/// backends: its new flows go through the affinity table.
fn vip_sticky() -> IpAddr {
    addr(0x0a00_0066, 0xfd00_0000_0000_0000_0000_0000_0000_0102)
}

/// SNAT address `i`: 10.1.1.0 + i or fd01::1:0 + i, on port 1.
fn snat_addr(i: u32) -> IpAddr {
    addr(
        0x0a01_0100 + i,
        0xfd01_0000_0000_0000_0000_0000_0001_0000 + u128::from(i),
    )
}

/// Backend `i`: 10.1.0.11 + i or fd01::b + i, on port 1.
fn backend_addr(i: u32) -> IpAddr {
    addr(
        0x0a01_000b + i,
        0xfd01_0000_0000_0000_0000_0000_0000_000b + u128::from(i),
    )
}

fn snapshot() -> Snapshot {
    let mut b = SnapshotBuilder::new(1);
    let net = |s: &str, len| Cidr::new(s.parse().unwrap(), len).unwrap();
    let gw = if six() {
        let gw = "fd00::fe".parse().unwrap();
        b.interface(0, MAC0, net("fd00::1", 64), Some(gw));
        b.interface(1, MAC1, net("fd01::1", 64), None);
        gw
    } else {
        let gw = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 254));
        b.interface(0, MAC0, net("10.0.0.1", 24), Some(gw));
        b.interface(1, MAC1, net("10.1.0.1", 16), None);
        gw
    };
    b.neighbor(gw, PEER);
    if VLAN.load(Relaxed) {
        b.vlan(0, 10).vlan(1, 20);
    }
    for i in 0..SNAT_ADDRS {
        b.snat_address(snat_addr(i));
    }
    let mut web = ServiceSpec::new("default/web");
    web.mode = ForwardMode::FullNat;
    let web = b.service(web).unwrap();
    let fe = FrontendSpec::new(vip(), 80, Proto::Tcp, FrontendKind::LoadBalancer);
    b.frontend(web, fe).unwrap();
    let mut dnat = ServiceSpec::new("default/web-dnat");
    dnat.mode = ForwardMode::Dnat;
    let dnat = b.service(dnat).unwrap();
    let fe = FrontendSpec::new(vip_dnat(), 80, Proto::Tcp, FrontendKind::LoadBalancer);
    b.frontend(dnat, fe).unwrap();
    let mut sticky = ServiceSpec::new("default/web-sticky");
    sticky.mode = ForwardMode::Dnat;
    sticky.affinity = SessionAffinity::ClientIp {
        timeout: Duration::from_secs(10800),
    };
    let sticky = b.service(sticky).unwrap();
    let fe = FrontendSpec::new(vip_sticky(), 80, Proto::Tcp, FrontendKind::LoadBalancer);
    b.frontend(sticky, fe).unwrap();
    for i in 0..BACKENDS {
        b.neighbor(backend_addr(i), PEER);
        b.backend(web, BackendSpec::new(backend_addr(i), 8080)).unwrap();
        b.backend(dnat, BackendSpec::new(backend_addr(i), 8080)).unwrap();
        b.backend(sticky, BackendSpec::new(backend_addr(i), 8080))
            .unwrap();
    }
    b.build().unwrap()
}

/// A worker whose conntrack holds `capacity` connections of the bench's
/// family (and 1,024 of the other).
fn worker(capacity: u32) -> Worker {
    let mut cfg = WorkerConfig::new(WorkerId(0), 1);
    cfg.conntrack = if six() {
        conntrack::Config::new(1024, capacity)
    } else {
        conntrack::Config::new(capacity, 1024)
    };
    cfg.snat_addresses = (0..SNAT_ADDRS).map(snat_addr).collect();
    cfg.frontend_slots = 64;
    cfg.backend_slots = 64;
    Worker::new(cfg).unwrap()
}

/// A 60-byte Ethernet/IPv4/TCP frame (54 bytes of headers, zero padding),
/// or a 74-byte Ethernet/IPv6/TCP one; `N` is the size.
fn tcp<const N: usize>(src: (IpAddr, u16), dst: (IpAddr, u16), syn: bool, ack: bool) -> Frame<N> {
    let l2 = etherparse::PacketBuilder::ethernet2(PEER, MAC0);
    let l3 = match (src.0, dst.0) {
        (IpAddr::V4(s), IpAddr::V4(d)) => l2.ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => l2.ipv6(s.octets(), d.octets(), 64),
        _ => unreachable!("one family"),
    };
    let mut b = l3.tcp(src.1, dst.1, 1000, 64000);
    if syn {
        b = b.syn();
    }
    if ack {
        b = b.ack(1);
    }
    let mut v = Vec::with_capacity(N);
    b.write(&mut v, &[]).unwrap();
    assert!(v.len() <= N, "{} bytes of headers", v.len());
    if VLAN.load(Relaxed) {
        // To a frontend: from a client, on port 0; else on port 1.
        let vid: u16 = if [vip(), vip_dnat(), vip_sticky()].contains(&dst.0) {
            10
        } else {
            20
        };
        let t = vid.to_be_bytes();
        v.splice(12..12, [0x81, 0x00, t[0], t[1]]);
    }
    v.resize(N, 0);
    v.try_into().unwrap()
}

/// `PIPELINE_VLAN=1`: a tagged node (module doc).
static VLAN: AtomicBool = AtomicBool::new(false);

/// Client `i` of at most 4M: distinct address (100.64.0.0/10, or
/// 2001:db8::/64 behind the same gateway) and port.
fn client(i: usize) -> (IpAddr, u16) {
    (
        addr(
            0x6440_0000 + i as u32,
            0x2001_0db8_0000_0000_0000_0000_0000_0000 + i as u128,
        ),
        1024 + (i % 60_000) as u16,
    )
}

fn meta(port: u16) -> PacketMeta {
    let nic = NIC_OFFLOAD.load(Relaxed);
    PacketMeta {
        port,
        offload: ChecksumOffload {
            rx_ipv4_verified: nic,
            tx_ipv4: nic,
            ..ChecksumOffload::NONE
        },
    }
}

/// `PIPELINE_OFFLOAD=nic`: frames arrive with their IPv4 header checksum
/// verified by the NIC and leave for the NIC to fill it, as lbd runs them
/// on a port with both offloads.
static NIC_OFFLOAD: AtomicBool = AtomicBool::new(false);

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut r = seed | 1;
    for i in (1..v.len()).rev() {
        v.swap(i, (xorshift(&mut r) % (i as u64 + 1)) as usize);
    }
}

/// A worker holding `n` connections, and a forward and a reply ACK of each
/// (both in the same random order).
struct Established<const N: usize> {
    snap: Snapshot,
    worker: Worker,
    fwd: Vec<Frame<N>>,
    rev: Vec<Frame<N>>,
    now: u64,
}

fn established<const N: usize>(n: usize) -> Established<N> {
    let snap = snapshot();
    let mut worker = worker(1 << 20);
    let vip = (vip(), 80);
    let mut order: Vec<usize> = (0..n).collect();
    shuffle(&mut order, 0x5eed);
    let (mut fwd, mut rev) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let mut syn = tcp::<N>(client(i), vip, true, false);
        let v = worker.handle_packet(Tick(0), &snap, &mut syn, &meta(0));
        assert!(matches!(v, Verdict::Transmit { port: 1, .. }), "{v:?}");
    }
    for &i in &order {
        let key = FlowKey::new(client(i), vip, Proto::Tcp).unwrap();
        let (id, _) = worker.conntrack().lookup(&key).unwrap();
        let reply = worker.conntrack().get(id).unwrap().reply();
        let mut synack = tcp::<N>(reply.src(), reply.dst(), true, true);
        let v = worker.handle_packet(Tick(1), &snap, &mut synack, &meta(1));
        assert!(matches!(v, Verdict::Transmit { port: 0, .. }), "{v:?}");
        // The client's ACK completes the handshake: both directions then
        // measure established entries.
        let mut ack = tcp::<N>(client(i), vip, false, true);
        let v = worker.handle_packet(Tick(1), &snap, &mut ack, &meta(0));
        assert!(matches!(v, Verdict::Transmit { port: 1, .. }), "{v:?}");
        assert_eq!(
            worker.conntrack().state(id),
            Some(conntrack::ConnState::TcpEstablished)
        );
        fwd.push(tcp(client(i), vip, false, true));
        rev.push(tcp(reply.src(), reply.dst(), false, true));
    }
    Established {
        snap,
        worker,
        fwd,
        rev,
        now: 2,
    }
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    /// `handle_packet` on each frame.
    Packet,
    /// `handle_burst` on the 32 frames.
    Burst,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Packet => "handle_packet",
            Mode::Burst => "handle_burst",
        }
    }
}

#[inline(always)]
fn process<const N: usize>(
    mode: Mode,
    w: &mut Worker,
    now: Tick,
    snap: &Snapshot,
    work: &mut [Frame<N>; BURST],
    metas: &[PacketMeta; BURST],
    verdicts: &mut [Verdict; BURST],
) {
    match mode {
        Mode::Packet => {
            for ((f, m), v) in work.iter_mut().zip(metas).zip(verdicts.iter_mut()) {
                *v = w.handle_packet(now, snap, f, m);
            }
        }
        Mode::Burst if WARM_BY_LOADS.load(Relaxed) => w.handle_burst(now, snap, work, metas, verdicts),
        Mode::Burst => w.handle_burst_with(&Prefetch0, now, snap, work, metas, verdicts),
    }
}

/// `PIPELINE_WARM=loads`: `Mode::Burst` warms by plain loads.
static WARM_BY_LOADS: AtomicBool = AtomicBool::new(false);

/// Copies the next 32 pristine frames (wrapping) into `work`.
#[inline(always)]
fn load<const N: usize>(work: &mut [Frame<N>; BURST], frames: &[Frame<N>], cursor: &mut usize) {
    for w in work.iter_mut() {
        *w = frames[*cursor];
        *cursor = if *cursor + 1 == frames.len() {
            0
        } else {
            *cursor + 1
        };
    }
}

/// Times `iters` bursts; returns the time per packet.
fn timed_bursts<const N: usize>(
    iters: u64,
    mode: Mode,
    e: &mut Established<N>,
    reply: bool,
    cursor: &mut usize,
) -> Duration {
    let metas = [meta(if reply { 1 } else { 0 }); BURST];
    let mut work = [[0u8; N]; BURST];
    let mut verdicts = [Verdict::ToHost; BURST];
    let mut total = Duration::ZERO;
    let frames = if reply { &e.rev } else { &e.fwd };
    for _ in 0..iters {
        load(&mut work, frames, cursor);
        e.now += 1;
        let t = Instant::now();
        process(
            mode,
            &mut e.worker,
            Tick(e.now),
            &e.snap,
            &mut work,
            &metas,
            &mut verdicts,
        );
        total += t.elapsed();
        black_box(&verdicts);
    }
    total / BURST as u32
}

fn check_all_transmit<const N: usize>(mode: Mode, e: &mut Established<N>, reply: bool) {
    let metas = [meta(if reply { 1 } else { 0 }); BURST];
    let mut work = [[0u8; N]; BURST];
    let mut verdicts = [Verdict::ToHost; BURST];
    let mut cursor = 0;
    let frames = if reply { &e.rev } else { &e.fwd };
    for _ in 0..frames.len().div_ceil(BURST) {
        load(&mut work, frames, &mut cursor);
        process(
            mode,
            &mut e.worker,
            Tick(e.now),
            &e.snap,
            &mut work,
            &metas,
            &mut verdicts,
        );
        for v in &verdicts {
            assert!(
                matches!(v, Verdict::Transmit { .. }),
                "{mode:?} reply={reply}: {v:?}"
            );
        }
    }
}

fn print_bytes_per_connection() {
    println!(
        "conntrack bytes per connection: IPv4 {} B, IPv6 {} B",
        Conntrack::BYTES_PER_CONN_V4,
        Conntrack::BYTES_PER_CONN_V6
    );
}

fn bench_established<const N: usize>(c: &mut Criterion) {
    print_bytes_per_connection();
    let mut g = c.benchmark_group(format!("pipeline_established_fullnat{}", group_suffix()));
    for n in [1_000usize, 1_000_000] {
        let mut e = established::<N>(n);
        let label = if n == 1_000 { "1k" } else { "1M" };
        for reply in [false, true] {
            let dir = if reply { "reply" } else { "forward" };
            for mode in [Mode::Packet, Mode::Burst] {
                check_all_transmit(mode, &mut e, reply);
                let mut cursor = 0;
                g.bench_function(BenchmarkId::new(format!("{dir}/{}", mode.name()), label), |b| {
                    b.iter_custom(|iters| timed_bursts(iters, mode, &mut e, reply, &mut cursor))
                });
            }
        }
    }
    g.finish();
}

/// A fresh worker and a pool of SYNs of distinct flows.
struct NewFlows<const N: usize> {
    snap: Snapshot,
    worker: Worker,
    syns: Vec<Frame<N>>,
    cursor: usize,
    /// Simulated time, in microseconds, and its step per burst.
    now_us: u64,
    step_us: u64,
}

const SYN_POOL: usize = 1 << 18;
const NEW_FLOW_TICK_MS: u64 = 20;
const SWEEP_BUDGET: usize = 256;

impl<const N: usize> NewFlows<N> {
    fn new() -> NewFlows<N> {
        NewFlows::with_capacity(1 << 20, SYN_POOL, vip())
    }

    /// With a table of `capacity` IPv4 connections and SYNs of `pool`
    /// distinct flows to `vip` (port 80): below `pool`, every SYN past the
    /// first `capacity` evicts an embryonic entry (the SYN flood
    /// `bench/run.sh` runs end to end).
    fn with_capacity(capacity: u32, pool: usize, vip: IpAddr) -> NewFlows<N> {
        let vip = (vip, 80);
        let mut syns: Vec<Frame<N>> = (0..pool).map(|i| tcp::<N>(client(i), vip, true, false)).collect();
        shuffle(&mut syns, 77);
        NewFlows {
            snap: snapshot(),
            worker: worker(capacity),
            syns,
            cursor: 0,
            now_us: 0,
            step_us: NEW_FLOW_TICK_MS * 1000,
        }
    }

    /// One burst of new flows; returns the timed part.
    #[inline(always)]
    fn burst(&mut self, mode: Mode, with_tick: bool, verdicts: &mut [Verdict; BURST]) -> Duration {
        let metas = [meta(0); BURST];
        let mut work = [[0u8; N]; BURST];
        load(&mut work, &self.syns, &mut self.cursor);
        self.now_us += self.step_us;
        let now = Tick(self.now_us / 1000);
        let t = Instant::now();
        process(
            mode,
            &mut self.worker,
            now,
            &self.snap,
            &mut work,
            &metas,
            verdicts,
        );
        let mut d = t.elapsed();
        let tick = |w: &mut Worker| black_box(w.handle_tick(now, SWEEP_BUDGET));
        if with_tick {
            let t = Instant::now();
            tick(&mut self.worker);
            d += t.elapsed();
        } else {
            tick(&mut self.worker);
        }
        d
    }
}

fn bench_new_flow<const N: usize>(c: &mut Criterion) {
    let mut g = c.benchmark_group(format!("pipeline_new_flow_fullnat{}", group_suffix()));
    let mut nf = NewFlows::<N>::new();
    // Reach the steady state (and check it): two pool cycles, every SYN a
    // new connection.
    let mut verdicts = [Verdict::ToHost; BURST];
    for _ in 0..2 * SYN_POOL / BURST {
        let before = nf.worker.counters().new_connections.get();
        nf.burst(Mode::Packet, true, &mut verdicts);
        assert!(verdicts
            .iter()
            .all(|v| matches!(v, Verdict::Transmit { port: 1, .. })));
        assert_eq!(nf.worker.counters().new_connections.get(), before + BURST as u64);
    }
    println!(
        "new flow steady state: {} live connections (capacity {})",
        nf.worker.conntrack().len(),
        nf.worker.conntrack().capacity().0
    );
    for (with_tick, group) in [(true, "new_flow"), (false, "new_flow_no_tick")] {
        for mode in [Mode::Packet, Mode::Burst] {
            g.bench_function(BenchmarkId::new(group, mode.name()), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    let mut verdicts = [Verdict::ToHost; BURST];
                    for _ in 0..iters {
                        total += nf.burst(mode, with_tick, &mut verdicts);
                        black_box(&verdicts);
                    }
                    total / BURST as u32
                })
            });
        }
    }
    // The benches above must not have degraded into hits or drops.
    let c = nf.worker.counters();
    assert_eq!(c.total_drops(), 0);
    assert_eq!(c.conntrack_evictions.get(), 0);
    g.finish();
}

fn bench_timer(c: &mut Criterion) {
    c.bench_function("pipeline_timer_overhead_per_packet", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                black_box(());
                total += t.elapsed();
            }
            total / BURST as u32
        })
    });
}

/// What `criterion_group!` would run, for frames of `N` bytes.
fn criterion_benches<const N: usize>() {
    let mut c = Criterion::default().configure_from_args();
    bench_timer(&mut c);
    bench_established::<N>(&mut c);
    bench_new_flow::<N>(&mut c);
    c.final_summary();
}

/// What criterion's group names end with: nothing for IPv4, `_v6`, or
/// `_v6_tagged` (`pipeline_v6_tagged`).
fn group_suffix() -> &'static str {
    match (six(), VLAN.load(Relaxed)) {
        (false, _) => "",
        (true, false) => "_v6",
        (true, true) => "_v6_tagged",
    }
}

/// Instruction counting under callgrind, instead of criterion:
/// `PIPELINE_COUNT=forward|reply|new|new_dnat|new_sticky|new_full|new_full_1m|new_full_dnat|new_full_1m_dnat
/// [PIPELINE_MODE=burst] [PIPELINE_N=1000]
/// valgrind --tool=callgrind --toggle-collect='*counted_*' <bench binary>`
/// runs warm-up bursts, then `PIPELINE_COUNT_BURSTS` bursts inside
/// `counted_bursts` or `counted_new`; divide its instructions by 32 per
/// burst. The default is 1,000 bursts, and 4,096 for `new`.
///
/// `new` counts new flows with their expiry, and the expiry a burst pays
/// depends on where the sweep is: it examines 256 slots a tick, a pass over
/// the 1M-entry table every 4,096 ticks, and frees many entries a tick
/// where the slab is dense and none where it is empty. 1,000 bursts paid
/// 4.4 expirations a new flow; a whole pass pays about one, the steady
/// state's. The expirations per new flow counted are printed. The new
/// flow alone: `--toggle-collect='*handle_burst_with*'` with
/// `PIPELINE_MODE=burst`.
fn count_instructions<const N: usize>(what: &str) {
    let mode = match std::env::var("PIPELINE_MODE").as_deref() {
        Ok("burst") => Mode::Burst,
        _ => Mode::Packet,
    };
    let n: usize = std::env::var("PIPELINE_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let bursts: u64 = std::env::var("PIPELINE_COUNT_BURSTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if matches!(what, "new" | "new_dnat" | "new_sticky") {
            4096
        } else {
            1000
        });
    if what.starts_with("new") {
        let mut nf = match what {
            "new" => NewFlows::<N>::new(),
            // DNAT SYNs from distinct clients, without and with client-IP
            // affinity (each pins a client: the affinity table's worst case).
            "new_dnat" => NewFlows::with_capacity(1 << 20, SYN_POOL, vip_dnat()),
            "new_sticky" => NewFlows::with_capacity(1 << 20, SYN_POOL, vip_sticky()),
            "new_full" | "new_full_1m" | "new_full_dnat" | "new_full_1m_dnat" => {
                full_table::<N>(what.contains("1m"), what.ends_with("dnat"))
            }
            _ => panic!("PIPELINE_COUNT={what}: not a variant"),
        };
        let mut verdicts = [Verdict::ToHost; BURST];
        for _ in 0..nf.syns.len() / BURST {
            nf.burst(mode, true, &mut verdicts);
        }
        let expired = nf.worker.counters().conntrack_expirations.get();
        counted_new(&mut nf, mode, bursts);
        let expired = nf.worker.counters().conntrack_expirations.get() - expired;
        println!(
            "new flows: {} live; {bursts} bursts of 32 counted, {:.2} expirations a new flow",
            nf.worker.conntrack().len(),
            expired as f64 / (bursts * BURST as u64) as f64
        );
        return;
    }
    let reply = match what {
        "forward" => false,
        "reply" => true,
        _ => panic!("PIPELINE_COUNT={what}: not a variant"),
    };
    let mut e = established::<N>(n);
    check_all_transmit(mode, &mut e, reply);
    let mut cursor = 0;
    timed_bursts(1000, mode, &mut e, reply, &mut cursor);
    counted_bursts(&mut e, mode, reply, &mut cursor, bursts);
    println!("{what} {mode:?} n={n}: {bursts} bursts of 32 counted");
}

#[inline(never)]
fn counted_bursts<const N: usize>(
    e: &mut Established<N>,
    mode: Mode,
    reply: bool,
    cursor: &mut usize,
    bursts: u64,
) {
    timed_bursts(bursts, mode, e, reply, cursor);
}

#[inline(never)]
fn counted_new<const N: usize>(nf: &mut NewFlows<N>, mode: Mode, bursts: u64) {
    let mut verdicts = [Verdict::ToHost; BURST];
    for _ in 0..bursts {
        nf.burst(mode, true, &mut verdicts);
    }
}

/// Per-burst times, robust to a shared machine: `PIPELINE_MEDIANS=1` runs
/// every variant for `PIPELINE_BURSTS` (default 20,000) bursts after 2,000
/// warm-up bursts, timing each burst alone, and prints the 25th, 50th and
/// 75th percentiles per packet. A burst preempted by another process is an
/// outlier here, where criterion's sums average it in.
///
/// It also prints the median of the quietest block of [`BLOCK`]
/// consecutive bursts ("best block"). On a VM whose core is shared with
/// another guest for seconds at a time (a hyperthread sibling, a
/// neighbour's cache traffic) every burst of a run can be slowed alike,
/// and the same binary's median moved 36 -> 76 ns from one run to the next
/// (2026-11-25, AMD EPYC guest); the best block is what the code does on
/// the core when it has it, and varies far less between runs. Quote both.
fn medians<const N: usize>() {
    let bursts: usize = std::env::var("PIPELINE_BURSTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let per_packet = |d: Duration| d.as_nanos() as f64 / BURST as f64;
    let report = |name: &str, mut t: Vec<Duration>| {
        let best = t
            .chunks(BLOCK)
            .filter(|b| b.len() == BLOCK)
            .map(|b| {
                let mut b = b.to_vec();
                b.sort_unstable();
                b[BLOCK / 2]
            })
            .min();
        t.sort_unstable();
        let q = |f: f64| per_packet(t[((t.len() - 1) as f64 * f) as usize]);
        let best = best.map_or("-".to_string(), |b| format!("{:.1}", per_packet(b)));
        println!(
            "{name:<48} p25 {:>7.1}  median {:>7.1}  p75 {:>7.1}  best block {best:>7} ns/packet",
            q(0.25),
            q(0.5),
            q(0.75)
        );
    };
    print_bytes_per_connection();
    let n_list: Vec<usize> = match std::env::var("PIPELINE_N") {
        Ok(s) => s.split(',').filter_map(|x| x.parse().ok()).collect(),
        Err(_) => vec![1_000, 1_000_000],
    };
    for n in n_list {
        let mut e = established::<N>(n);
        for reply in [false, true] {
            for mode in [Mode::Packet, Mode::Burst] {
                check_all_transmit(mode, &mut e, reply);
                let mut cursor = 0;
                timed_bursts(2_000, mode, &mut e, reply, &mut cursor);
                let t = (0..bursts)
                    .map(|_| timed_bursts(1, mode, &mut e, reply, &mut cursor) * BURST as u32)
                    .collect();
                let dir = if reply { "reply" } else { "forward" };
                report(&format!("established/{dir}/{}/{n}", mode.name()), t);
            }
        }
    }
    let mut nf = NewFlows::<N>::new();
    let mut verdicts = [Verdict::ToHost; BURST];
    for _ in 0..2 * SYN_POOL / BURST {
        nf.burst(Mode::Packet, true, &mut verdicts);
    }
    for with_tick in [true, false] {
        for mode in [Mode::Packet, Mode::Burst] {
            let t = (0..bursts)
                .map(|_| nf.burst(mode, with_tick, &mut verdicts))
                .collect();
            let name = if with_tick { "new_flow" } else { "new_flow_no_tick" };
            report(&format!("{name}/{}", mode.name()), t);
        }
    }
    assert_eq!(nf.worker.counters().total_drops(), 0);
    // A SYN flood: the table full, every SYN evicting; in a 64k table, and
    // in a 1M one (the default capacity, as end to end); full-NAT, and
    // DNAT.
    for (big, dnat) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut full = full_table::<N>(big, dnat);
        for _ in 0..full.syns.len() / BURST {
            full.burst(Mode::Packet, false, &mut verdicts);
        }
        let name = format!(
            "new_flow_full_table{}{}",
            if big { "_1m" } else { "" },
            if dnat { "_dnat" } else { "" }
        );
        for mode in [Mode::Packet, Mode::Burst] {
            let before = full.worker.counters().conntrack_evictions.get();
            let t = (0..bursts)
                .map(|_| full.burst(mode, false, &mut verdicts))
                .collect();
            report(&format!("{name}/{}", mode.name()), t);
            let evicted = full.worker.counters().conntrack_evictions.get() - before;
            assert_eq!(evicted, (bursts * BURST) as u64, "every SYN evicts");
        }
        assert_eq!(full.worker.counters().total_drops(), 0);
    }
}

/// Bursts per block of [`medians`]' "best block".
const BLOCK: usize = 1_000;

/// The tables of the SYN-flood variants: 64k IPv4 connections (SYNs of
/// 256k flows, 20 ms a burst), or `big`, 1M (SYNs of 2M flows, 20 us a
/// burst, 1.6M SYNs a second as end to end: at 20 ms a burst, entries would
/// expire before the table filled). SYNs to the full-NAT service's VIP, or
/// with `dnat` to the DNAT one's (whose entries keep both keys in the
/// hashed index: no SNAT port cell for the reply key).
fn full_table<const N: usize>(big: bool, dnat: bool) -> NewFlows<N> {
    let vip = if dnat { vip_dnat() } else { vip() };
    if big {
        let mut nf = NewFlows::with_capacity(1 << 20, 1 << 21, vip);
        nf.step_us = 20;
        nf
    } else {
        NewFlows::with_capacity(1 << 16, SYN_POOL, vip)
    }
}

fn main() {
    run::<FRAME>(false, false);
}

/// The bench, in IPv6 if `six` (frames of [`FRAME6`] bytes, or
/// [`FRAME6_TAGGED`] if `tagged`; `N` is [`FRAME`] otherwise), on a tagged
/// node if `tagged` or `PIPELINE_VLAN=1` (IPv4 only: an IPv6 frame needs 4
/// bytes more for the tag). `pipeline_v6.rs` and `pipeline_v6_tagged.rs`
/// call it with IPv6: binaries of their own, so that this one holds the
/// IPv4 instances of the worker's code only and compiles them as it did
/// before IPv6 was measured (a second instance in the same binary moved
/// the IPv4 forward packet's count by +5 instructions), and the untagged
/// IPv6 one likewise.
pub(crate) fn run<const N: usize>(six: bool, tagged: bool) {
    SIX.store(six, Relaxed);
    WARM_BY_LOADS.store(std::env::var("PIPELINE_WARM").as_deref() == Ok("loads"), Relaxed);
    NIC_OFFLOAD.store(std::env::var("PIPELINE_OFFLOAD").as_deref() == Ok("nic"), Relaxed);
    VLAN.store(
        tagged || std::env::var("PIPELINE_VLAN").as_deref() == Ok("1"),
        Relaxed,
    );
    if six && VLAN.load(Relaxed) && !tagged {
        // A tagged IPv6 frame needs 78 bytes, a frame size this binary
        // does not build.
        eprintln!("PIPELINE_VLAN=1 in IPv6: run the pipeline_v6_tagged bench instead");
        std::process::exit(2);
    }
    if std::env::var("PIPELINE_MEDIANS").is_ok() {
        medians::<N>();
        return;
    }
    if let Ok(what) = std::env::var("PIPELINE_COUNT") {
        count_instructions::<N>(&what);
        return;
    }
    criterion_benches::<N>();
}
