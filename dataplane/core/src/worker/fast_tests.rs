//! The fast path against the general path: random traffic (new flows,
//! established flows both ways, replies, drops, other workers' flows),
//! a third of it corrupted in the header bytes the fast path reads, under
//! every checksum-offload combination. For each frame, `fast_v4` either
//! declines having written nothing, or gives the verdict and frame the
//! general path gives; the two workers' whole state (conntrack, SNAT pools,
//! counters) stays equal.

use std::time::Duration;

use super::super::burst::tests::{
    builder, client, frame, ip, meta, snapshot, snapshot_unresolved, tag_randomly, tcp, udp, worker,
    worker_with_ports, Reply, Rng,
};
use std::net::IpAddr;

use crate::checksum::{self, ChecksumOffload};
use crate::flow::Proto;
use crate::snapshot::{
    BackendSpec, Cidr, ForwardMode, FrontendKind, FrontendSpec, ServiceSpec, SessionAffinity, Snapshot,
};
use crate::wire;
use crate::worker::{PacketMeta, Verdict, Worker};
use crate::Tick;

/// Damages one header field the fast path reads, or the frame's length.
fn corrupt(rng: &mut Rng, f: &mut Vec<u8>) {
    let set = |f: &mut Vec<u8>, at: usize, v: u8| {
        if let Some(b) = f.get_mut(at) {
            *b = v;
        }
    };
    match rng.below(12) {
        // EtherType: VLAN tag, IPv6, ARP, garbage.
        0 => {
            let v = [0x81, 0x86, 0x08, 0x12][rng.below(4) as usize];
            let i = 12;
            set(f, i, v);
        }
        // Version / IHL.
        1 => {
            let v = [0x46, 0x44, 0x65, 0x4f][rng.below(4) as usize];
            let i = 14;
            set(f, i, v);
        }
        // Total length high and low bytes.
        2 => {
            let v = rng.below(256) as u8;
            let i = 16 + rng.below(2) as usize;
            set(f, i, v);
        }
        // Flags / fragment offset.
        3 => {
            let v = [0x20, 0x40, 0x01, 0x1f][rng.below(4) as usize];
            let i = 20 + rng.below(2) as usize;
            set(f, i, v);
        }
        // TTL 0, 1, 2.
        4 => {
            let v = rng.below(3) as u8;
            let i = 22;
            set(f, i, v);
        }
        // Protocol: ICMP, SCTP, other.
        5 => {
            let v = [1, 132, 0][rng.below(3) as usize];
            let i = 23;
            set(f, i, v);
        }
        // Header checksum.
        6 => {
            let v = rng.below(256) as u8;
            let i = 24;
            set(f, i, v);
        }
        // TCP data offset / UDP length.
        7 => {
            let v = rng.below(256) as u8;
            let i = [46, 38, 39][rng.below(3) as usize];
            set(f, i, v);
        }
        // Truncate.
        8 => {
            let n = rng.below(f.len() as u64 + 1) as usize;
            f.truncate(n);
        }
        // Ethernet padding after the IP packet.
        9 => f.extend_from_slice(&[0; 7]),
        // Any byte of the first 60.
        _ => {
            let i = rng.below(60) as usize;
            let v = rng.below(256) as u8;
            set(f, i, v);
        }
    }
}

pub(in crate::worker) fn offload(rng: &mut Rng) -> ChecksumOffload {
    let b = rng.below(16);
    ChecksumOffload {
        rx_ipv4_verified: b & 1 != 0,
        rx_l4_partial: b & 2 != 0,
        tx_ipv4: b & 4 != 0,
        tx_l4: b & 8 != 0,
    }
}

/// The worker's whole state as `Debug` shows it, less the conntrack
/// entries' flow caches (`HopCache`, and the `NatDelta` stored with them):
/// the fast path fills them and the general path never does, and they
/// change no answer.
pub(in crate::worker) fn state(w: &Worker) -> String {
    let mut s = format!("{w:?}");
    for field in ["cache: HopCache {", "delta: NatDelta {"] {
        let mut out = String::with_capacity(s.len());
        let mut rest = s.as_str();
        while let Some(at) = rest.find(field) {
            out.push_str(&rest[..at]);
            // Neither holds braces of its own.
            rest = rest[at..].find('}').map_or("", |end| &rest[at + end + 1..]);
        }
        out.push_str(rest);
        s = out;
    }
    s
}

/// How often the fast path answered in one run.
#[derive(Debug, Default)]
pub(in crate::worker) struct Seen {
    pub(in crate::worker) fast: u64,
    pub(in crate::worker) declined: u64,
}

/// A random frame of [`frame`]'s traffic.
pub(super) type Gen = fn(&mut Rng, &[Reply]) -> (Vec<u8>, u16);

fn run(snap: &Snapshot, seed: u64, n_workers: u16, capacity: u32) -> Seen {
    let mk = || worker(n_workers, capacity);
    run_with(snap, seed, mk, frame)
}

fn run_with(snap: &Snapshot, seed: u64, mk: impl Fn() -> Worker, gen: Gen) -> Seen {
    run_switching(std::slice::from_ref(snap), seed, mk, gen)
}

/// [`run_with`] starting on `snaps[0]` and moving to another of `snaps`
/// now and then, as a worker does when the control thread publishes.
pub(super) fn run_switching(snaps: &[Snapshot], seed: u64, mk: impl Fn() -> Worker, gen: Gen) -> Seen {
    run_on(snaps, seed, mk, gen, None)
}

/// [`run_switching`], on a tagged node when `vids` is given (ports 0 and
/// 1 on those VLANs): every frame is tagged by [`tag_randomly`] after its
/// corruption, and the tagged instantiation (`fast_v4_tagged`) is held
/// against the general path where the frame carries its port's id (the
/// check `handle_tagged` makes before it).
fn run_on(snaps: &[Snapshot], seed: u64, mk: impl Fn() -> Worker, gen: Gen, vids: Option<[u16; 2]>) -> Seen {
    let paths = FastPaths {
        untagged: Worker::fast_v4,
        tagged: Worker::fast_v4_tagged,
    };
    run_fast(snaps, seed, mk, gen, vids, paths, corrupt)
}

/// A fast path held against the general path: `Worker::fast_v4` or
/// `Worker::fast_v6`.
pub(in crate::worker) type FastPath =
    fn(&mut Worker, Tick, &Snapshot, &mut [u8], &PacketMeta) -> Option<Verdict>;

/// A fast path's instantiations for untagged frames and for tagged ones
/// (on a tagged node, frames with their port's VLAN id).
#[derive(Clone, Copy)]
pub(in crate::worker) struct FastPaths {
    pub(in crate::worker) untagged: FastPath,
    pub(in crate::worker) tagged: FastPath,
}

/// [`run_on`] with `paths` as the fast path held against the general
/// path, and `damage` as the corruption of a third of the frames.
pub(in crate::worker) fn run_fast(
    snaps: &[Snapshot],
    seed: u64,
    mk: impl Fn() -> Worker,
    gen: Gen,
    vids: Option<[u16; 2]>,
    paths: FastPaths,
    damage: fn(&mut Rng, &mut Vec<u8>),
) -> Seen {
    let mut fast = mk();
    let mut general = mk();
    let mut rng = Rng(seed | 1);
    let mut replies: Vec<Reply> = Vec::new();
    let mut seen = Seen::default();
    let mut now = 0;
    let mut snap = &snaps[0];
    for n in 0..3000u32 {
        if rng.below(40) == 0 {
            snap = &snaps[rng.below(snaps.len() as u64) as usize];
        }
        let (mut f, port) = gen(&mut rng, &replies);
        let mut m = meta(port);
        if rng.below(4) == 0 {
            m.offload = offload(&mut rng);
        }
        if rng.below(3) == 0 {
            damage(&mut rng, &mut f);
        }
        let fast_answer = match vids {
            None => paths.untagged,
            Some(vids) => {
                f = tag_randomly(&mut rng, f, port, vids);
                let own = wire::EthernetFrame::new_checked(&f[..])
                    .ok()
                    .and_then(|e| e.vlan_id())
                    == Some(vids[usize::from(port & 1)]);
                if own {
                    paths.tagged
                } else {
                    |_: &mut Worker, _: Tick, _: &Snapshot, _: &mut [u8], _: &PacketMeta| None
                }
            }
        };
        let mut by_general = f.clone();
        let expect = general.handle_packet_general(Tick(now), snap, &mut by_general, &m);
        let mut by_fast = f.clone();
        let got = match fast_answer(&mut fast, Tick(now), snap, &mut by_fast, &m) {
            Some(v) => {
                seen.fast += 1;
                v
            }
            None => {
                seen.declined += 1;
                assert_eq!(by_fast, f, "seed {seed} packet {n}: declined but wrote");
                fast.handle_packet_general(Tick(now), snap, &mut by_fast, &m)
            }
        };
        assert_eq!(got, expect, "seed {seed} packet {n}: verdict");
        assert_eq!(by_fast, by_general, "seed {seed} packet {n}: frame");
        if n % 32 == 0 {
            assert_eq!(
                state(&fast),
                state(&general),
                "seed {seed} packet {n}: worker state"
            );
        }
        if let Verdict::Transmit { port: 1, .. } | Verdict::Resolve { port: 1, .. } = expect {
            // Forwarded TCP and UDP, not the ICMP errors answering a
            // backend's packets too big for port 0.
            if let Some(p) = wire::parse(&by_general)
                .ok()
                .filter(|p| [wire::ip_proto::TCP, wire::ip_proto::UDP].contains(&p.protocol))
            {
                replies.push(((p.dst, p.dst_port), (p.src, p.src_port), p.protocol));
            }
        }
        if replies.len() > 64 {
            replies.drain(..replies.len() - 64);
        }
        now += 1 + rng.below(2_000);
        if n % 100 == 99 {
            assert_eq!(
                fast.handle_tick(Tick(now), 16),
                general.handle_tick(Tick(now), 16)
            );
        }
    }
    assert_eq!(state(&fast), state(&general), "seed {seed}: final state");
    seen
}

#[test]
fn fast_path_answers_exactly_as_the_general_path() {
    let snap = snapshot();
    let mut total = Seen::default();
    for seed in 1..=8u64 {
        let s = run(&snap, seed.wrapping_mul(0x2545_f491_4f6c_dd1d), 1, 1024);
        total.fast += s.fast;
        total.declined += s.declined;
    }
    // The traffic is mostly established flows: the fast path must have
    // taken a real share, or this test compares nothing.
    assert!(total.fast > 2000, "{total:?}");
    assert!(total.declined > 2000, "{total:?}");
}

/// The tagged instantiation (`fast_v4_tagged`) on a node whose ports are
/// on VLANs 10 and 20: the same traffic, tagged, the same answers (the
/// egress port's id written on forwarded frames), one or two workers.
#[test]
fn tagged_fast_path_answers_exactly_as_the_general_path() {
    let mut b = builder();
    b.vlan(0, 10).vlan(1, 20);
    let snap = b.build().unwrap();
    let mut total = Seen::default();
    for seed in 1..=4u64 {
        let workers = 1 + (seed % 2) as u16;
        let mk = || worker(workers, 1024);
        let s = run_on(
            std::slice::from_ref(&snap),
            seed.wrapping_mul(0x6a09_e667_f3bc_c909),
            mk,
            frame,
            Some([10, 20]),
        );
        total.fast += s.fast;
        total.declined += s.declined;
    }
    assert!(total.fast > 1000, "{total:?}");
    assert!(total.declined > 1000, "{total:?}");
}

/// The tagged read takes a C-tag (TPID 0x8100) only, whatever its caller
/// checked: an 802.1ad S-tag before the same bytes is declined.
#[test]
fn tagged_read_takes_only_an_8021q_tag() {
    let (mut f, _) = (tcp(client(&mut Rng(7), false), (ip("10.0.0.100"), 80), 1, 64), 0);
    f.splice(12..12, [0x81, 0x00, 0x00, 10]);
    assert!(super::read_v4_at::<{ super::VLAN_TAG }>(&f, &meta(0)).is_some());
    f[12] = 0x88;
    f[13] = 0xa8;
    assert!(super::read_v4_at::<{ super::VLAN_TAG }>(&f, &meta(0)).is_none());
}

#[test]
fn fast_path_with_two_workers_and_a_full_table() {
    let snap = snapshot();
    for seed in 1..=4 {
        let s = run(&snap, seed * 0x9e37_79b9, 2, 16);
        assert!(s.fast > 0, "{s:?}");
    }
}

#[test]
fn fast_path_with_unresolved_next_hops() {
    let snap = snapshot_unresolved();
    for seed in 1..=4 {
        let s = run(&snap, seed * 0x6c07_8965, 1, 256);
        assert!(s.fast > 0, "{s:?}");
    }
}

/// [`snapshot`] plus services that refuse or steer new connections:
/// full-NAT TCP 10.0.0.102:80 open to 10.0.0.2/32 only, with client-IP
/// affinity; full-NAT TCP 10.0.0.103:80 with no backend; DNAT TCP
/// 10.0.0.104:80 (no SYN needed) with one backend whose next hop is
/// unknown and one that is resolved.
fn snapshot_policies() -> Snapshot {
    let mut b = builder();
    let mut only = ServiceSpec::new("default/only");
    only.mode = ForwardMode::FullNat;
    only.source_ranges = vec![Cidr::new(ip("10.0.0.2"), 32).unwrap()];
    only.affinity = SessionAffinity::ClientIp {
        timeout: Duration::from_secs(60),
    };
    let only = b.service(only).unwrap();
    let fe = FrontendSpec::new(ip("10.0.0.102"), 80, Proto::Tcp, FrontendKind::LoadBalancer);
    b.frontend(only, fe).unwrap();
    let mut empty = ServiceSpec::new("default/empty");
    empty.mode = ForwardMode::FullNat;
    let empty = b.service(empty).unwrap();
    let fe = FrontendSpec::new(ip("10.0.0.103"), 80, Proto::Tcp, FrontendKind::LoadBalancer);
    b.frontend(empty, fe).unwrap();
    let dnat = b.service(ServiceSpec::new("default/dnat")).unwrap();
    let fe = FrontendSpec::new(ip("10.0.0.104"), 80, Proto::Tcp, FrontendKind::LoadBalancer);
    b.frontend(dnat, fe).unwrap();
    for i in 11..=13 {
        b.backend(only, BackendSpec::new(ip(&format!("10.1.0.{i}")), 8080))
            .unwrap();
    }
    // 10.1.0.20 has no neighbor entry: `Resolve`.
    for a in ["10.1.0.11", "10.1.0.20"] {
        b.backend(dnat, BackendSpec::new(ip(a), 8080)).unwrap();
    }
    b.build().unwrap()
}

/// [`frame`]'s traffic, a third of it new and established flows toward
/// the services of [`snapshot_policies`].
fn policy_frame(rng: &mut Rng, replies: &[Reply]) -> (Vec<u8>, u16) {
    if rng.below(3) != 0 {
        return frame(rng, replies);
    }
    let vip = (
        ip(["10.0.0.102", "10.0.0.103", "10.0.0.104"][rng.below(3) as usize]),
        80,
    );
    let f = match rng.below(4) {
        // SYN, ACK, FIN+ACK, RST+ACK.
        0..=2 => tcp(client(rng, false), vip, [1, 2, 6, 10][rng.below(4) as usize], 64),
        // UDP to a TCP-only frontend.
        _ => udp(client(rng, false), vip),
    };
    (f, 0)
}

#[test]
fn fast_path_opens_connections_as_the_general_path() {
    let snap = snapshot_policies();
    for seed in 1..=6u64 {
        let s = run_with(
            &snap,
            seed.wrapping_mul(0x2d35_8dcc_aa6c_78a5),
            || worker(1, 1024),
            policy_frame,
        );
        assert!(s.fast > 500, "{s:?}");
    }
    // Full tables (evictions, stateless DNAT forwards, `ConntrackFull`)
    // and an exhausted SNAT pool (8 ports).
    for seed in 1..=6u64 {
        let s = run_with(&snap, seed * 0x1b87_3593, || worker(1, 8), policy_frame);
        assert!(s.fast > 100, "{s:?}");
        let s = run_with(
            &snap,
            seed * 0x4cf5_ad43,
            || worker_with_ports(1, 256, 1024..=1031),
            policy_frame,
        );
        assert!(s.fast > 100, "{s:?}");
    }
}

/// [`frame`]'s traffic with half of its TCP and UDP packets grown to IP
/// packets of 1,200-1,599 bytes (zeros appended to the payload, lengths
/// and checksums fixed), a quarter of the IPv4 ones without DF.
fn grown_frame(rng: &mut Rng, replies: &[Reply]) -> (Vec<u8>, u16) {
    let (mut f, port) = frame(rng, replies);
    if rng.below(2) == 0 {
        let ip_len = 1200 + rng.below(400) as usize;
        let df = rng.below(4) != 0;
        grow(&mut f, ip_len, df);
    }
    (f, port)
}

/// Grows the untagged, unfragmented TCP or UDP packet in `f` to an IP
/// packet of `ip_len` bytes, DF as `df` on IPv4; leaves anything else.
pub(in crate::worker) fn grow(f: &mut Vec<u8>, ip_len: usize, df: bool) {
    let Ok(p) = wire::parse(f) else { return };
    let (l3, l4, end) = (usize::from(p.l3_offset), usize::from(p.l4_offset), p.end as usize);
    let tcp_or_udp = p.protocol == wire::ip_proto::TCP || p.protocol == wire::ip_proto::UDP;
    if l3 != 14 || end != f.len() || ip_len <= end - l3 || !tcp_or_udp || p.fragment != wire::Fragment::None {
        return;
    }
    f.resize(l3 + ip_len, 0);
    let l4_len = f.len() - l4;
    let csum_at = l4 + if p.protocol == wire::ip_proto::TCP { 16 } else { 6 };
    if p.protocol == wire::ip_proto::UDP {
        f[l4 + 4..l4 + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
    }
    f[csum_at..csum_at + 2].fill(0);
    let c = match (p.src, p.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f[l3 + 2..l3 + 4].copy_from_slice(&(ip_len as u16).to_be_bytes());
            if !df {
                f[l3 + 6] &= !0x40;
            }
            f[l3 + 10..l3 + 12].fill(0);
            let h = checksum::checksum(&f[l3..l4]);
            f[l3 + 10..l3 + 12].copy_from_slice(&h.to_be_bytes());
            checksum::l4_checksum_v4(s, d, p.protocol, &f[l4..])
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f[l3 + 4..l3 + 6].copy_from_slice(&((ip_len - 40) as u16).to_be_bytes());
            checksum::l4_checksum_v6(&s, &d, p.protocol, &f[l4..])
        }
        _ => return,
    };
    f[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
}

/// Ports of MTU 1,400 (clients) and 1,280 (backends), traffic of every
/// size around them: the fast path declines a packet too big for its
/// egress port (cached hop or not, new connection or not) having written
/// and counted nothing, and the general path answers or drops it.
#[test]
fn fast_path_declines_packets_too_big_for_the_port() {
    let mut b = builder();
    b.mtu(0, 1400).mtu(1, 1280);
    let snap = b.build().unwrap();
    let mut total = Seen::default();
    for seed in 1..=4u64 {
        let s = run_with(
            &snap,
            seed.wrapping_mul(0x3c6e_f372_fe94_f82b),
            || worker(1, 1024),
            grown_frame,
        );
        total.fast += s.fast;
        total.declined += s.declined;
    }
    assert!(total.fast > 1000, "{total:?}");
    // Everything the fast path would take but for its size must be
    // answered by the general path: some answers were made.
    let mut w = worker(1, 1024);
    let mut rng = Rng(99);
    let mut replies = Vec::new();
    for n in 0..2000u64 {
        let (mut f, port) = grown_frame(&mut rng, &replies);
        if let Verdict::Transmit { port: 1, .. } = w.handle_packet(Tick(n), &snap, &mut f, &meta(port)) {
            if let Some(p) = wire::parse(&f)
                .ok()
                .filter(|p| [wire::ip_proto::TCP, wire::ip_proto::UDP].contains(&p.protocol))
            {
                replies.push(((p.dst, p.dst_port), (p.src, p.src_port), p.protocol));
            }
        }
    }
    assert!(
        w.counters().too_big_sent.get() > 100,
        "{}",
        w.counters().too_big_sent.get()
    );
    assert!(w.counters().drops[crate::DropReason::MtuExceeded as usize].get() > 10);
}
