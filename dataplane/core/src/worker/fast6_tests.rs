//! The IPv6 fast path against the general path, as `fast_tests.rs` holds
//! the IPv4 one: random IPv6 traffic (new flows, established flows both
//! ways, replies, resets, drops, other workers' flows, next hops resolved,
//! to resolve and missing), a third of it corrupted in the header bytes
//! `read_v6` reads, under every checksum-offload combination, on three
//! snapshots in turn (one without services). For each frame, `fast_v6` either declines having
//! written nothing, or gives the verdict and frame the general path
//! gives; the two workers' whole state stays equal.

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use super::super::burst::tests::{
    builder, ip, meta, run_traffic, run_traffic_ports, tcp, worker, worker_with_ports, CountingPrefetch,
    Reply, Rng, MAC0, MAC1, PEER,
};
use super::super::fast::tests::{grow, run_fast, state, FastPaths, Seen};
use super::super::fast::VLAN_TAG;
use super::read_v6_at;
use crate::conntrack::Direction;
use crate::flow::{FlowKey, Proto};
use crate::snapshot::{
    BackendSpec, Cidr, ForwardMode, FrontendKind, FrontendSpec, ServiceSpec, SessionAffinity, Snapshot,
    SnapshotBuilder,
};
use crate::wire;
use crate::worker::{PacketMeta, Verdict, Worker};
use crate::{DropReason, Tick};

/// The burst tests' snapshot with a DNAT UDP service on [fd00::101]:53
/// (backends fd01::11-13) and an IPv6 default route: fd02::fe on port 0.
fn snapshot6() -> Snapshot {
    builder6().build().unwrap()
}

/// The builder of [`snapshot6`], for tests that add to it.
fn builder6() -> SnapshotBuilder<'static> {
    let mut b = builder();
    b.interface(
        0,
        MAC0,
        Cidr::new(ip("fd02::1"), 64).unwrap(),
        Some(ip("fd02::fe")),
    );
    b.neighbor(ip("fd02::fe"), PEER);
    let mut dns = ServiceSpec::new("default/dns6");
    dns.mode = ForwardMode::Dnat;
    let dns = b.service(dns).unwrap();
    let fe = FrontendSpec::new(ip("fd00::101"), 53, Proto::Udp, FrontendKind::ClusterIp);
    b.frontend(dns, fe).unwrap();
    for i in 11..=13 {
        b.backend(dns, BackendSpec::new(ip(&format!("fd01::{i}")), 53))
            .unwrap();
    }
    b
}

/// [`snapshot6`] with fd00::2 and backend fd01::13 unresolved.
fn snapshot6_unresolved() -> Snapshot {
    let n: Vec<_> = [
        "10.0.0.2",
        "10.1.0.11",
        "10.1.0.12",
        "fd02::fe",
        "fd01::11",
        "fd01::12",
    ]
    .iter()
    .map(|a| (ip(a), PEER))
    .collect();
    snapshot6().with_neighbors(&n).unwrap()
}

/// The ports, addresses and neighbors of [`snapshot6`] without a
/// service: the VIPs are no one's, and a client's packet to one of them
/// that still hits its connection's entry is no reply (the general path
/// drops it, `no_conntrack_reply`).
fn snapshot6_no_services() -> Snapshot {
    let mut b = SnapshotBuilder::new(1);
    let net = |a: &str, len| Cidr::new(ip(a), len).unwrap();
    b.interface(0, MAC0, net("10.0.0.1", 24), Some(ip("10.0.0.254")));
    b.interface(0, MAC0, net("fd00::1", 64), None);
    b.interface(0, MAC0, net("fd02::1", 64), Some(ip("fd02::fe")));
    b.interface(1, MAC1, net("10.1.0.1", 24), None);
    b.interface(1, MAC1, net("fd01::1", 64), None);
    b.snat_address(ip("10.1.0.100")).snat_address(ip("fd01::100"));
    for a in ["fd00::2", "fd02::fe", "fd01::11", "fd01::12", "fd01::13"] {
        b.neighbor(ip(a), PEER);
    }
    b.build().unwrap()
}

/// An IPv6 client: on port 0's prefix and resolved (fd00::2), on it and
/// not (fd00::3), behind the gateway (2001:db8::2), or a martian source
/// (ff02::1, which may open nothing).
fn client6(rng: &mut Rng) -> (IpAddr, u16) {
    let a = ["fd00::2", "fd00::3", "2001:db8::2", "2001:db8::2", "ff02::1"][rng.below(5) as usize];
    (ip(a), 40000 + rng.below(24) as u16)
}

fn udp6(src: (IpAddr, u16), dst: (IpAddr, u16), hop: u8) -> Vec<u8> {
    let (IpAddr::V6(s), IpAddr::V6(d)) = (src.0, dst.0) else {
        unreachable!()
    };
    let mut out = Vec::new();
    etherparse::PacketBuilder::ethernet2(PEER, MAC0)
        .ipv6(s.octets(), d.octets(), hop)
        .udp(src.1, dst.1)
        .write(&mut out, b"q")
        .unwrap();
    out
}

/// One random IPv6 frame (now and then an IPv4 one, which `fast_v6`
/// declines); `replies` holds tuples the backends may answer with.
fn frame6(rng: &mut Rng, replies: &[Reply]) -> (Vec<u8>, u16) {
    let web = (ip("fd00::100"), 80);
    let dns = (ip("fd00::101"), 53);
    let flags = [1, 1, 2, 2, 2, 6, 10][rng.below(7) as usize];
    match rng.below(20) {
        0..=5 => (tcp(client6(rng), web, flags, 64), 0),
        6..=7 => (udp6(client6(rng), dns, 64), 0),
        8..=13 if !replies.is_empty() => {
            let (src, dst, proto) = replies[rng.below(replies.len() as u64) as usize];
            let f = if proto == 6 {
                tcp(src, dst, [2, 3, 6, 10][rng.below(4) as usize], 64)
            } else {
                udp6(src, dst, 64)
            };
            (f, 1)
        }
        14 => (tcp(client6(rng), web, 2, 1 + rng.below(2) as u8), 0),
        15 => (tcp(client6(rng), (ip("fd00::100"), 81), 2, 64), 0),
        // To the SNAT address: a reply the table may not hold.
        16 => (
            tcp(
                (ip("fd01::11"), 8080),
                (ip("fd01::100"), 1024 + rng.below(256) as u16),
                2,
                64,
            ),
            1,
        ),
        17 => (tcp((ip("10.0.0.2"), 40000), (ip("10.0.0.100"), 80), 2, 64), 0),
        // To an address lbd does not own: no connection's reply.
        18 => (
            udp6(
                (ip("fd01::11"), 53),
                (IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 9)), 1),
                64,
            ),
            1,
        ),
        _ => (tcp(client6(rng), web, flags, 64), 0),
    }
}

/// Damages one header field `read_v6` reads, or the frame's length.
fn corrupt6(rng: &mut Rng, f: &mut Vec<u8>) {
    let set = |f: &mut Vec<u8>, at: usize, v: u8| {
        if let Some(b) = f.get_mut(at) {
            *b = v;
        }
    };
    match rng.below(12) {
        // EtherType: VLAN tag, IPv4, garbage.
        0 => set(
            f,
            12 + rng.below(2) as usize,
            [0x81, 0x08, 0x00, 0xdd][rng.below(4) as usize],
        ),
        // Version.
        1 => set(f, 14, [0x40, 0x70, 0x00, 0x6f][rng.below(4) as usize]),
        // Payload length.
        2 => set(f, 18 + rng.below(2) as usize, rng.below(256) as u8),
        // Next header: hop-by-hop options, ICMPv6, fragment, none.
        3 => set(f, 20, [0, 58, 44, 59][rng.below(4) as usize]),
        // Hop limit 0, 1, 2.
        4 => set(f, 21, rng.below(3) as u8),
        // An address byte: another host, multicast, v4-mapped.
        5 => set(
            f,
            22 + rng.below(32) as usize,
            [0, 0xff, 1][rng.below(3) as usize],
        ),
        // TCP data offset, UDP length, UDP checksum.
        6 => set(
            f,
            [66, 58, 59, 60, 61][rng.below(5) as usize],
            rng.below(256) as u8,
        ),
        7 => {
            set(f, 60, 0);
            set(f, 61, 0);
        }
        // Truncate.
        8 => {
            let n = rng.below(f.len() as u64 + 1) as usize;
            f.truncate(n);
        }
        // Ethernet padding after the IP packet.
        9 => f.extend_from_slice(&[0; 7]),
        // Any byte of the first 80.
        _ => set(f, rng.below(80) as usize, rng.below(256) as u8),
    }
}

/// The IPv6 fast path's instantiations.
const V6: FastPaths = FastPaths {
    untagged: Worker::fast_v6,
    tagged: Worker::fast_v6_tagged,
};

/// `Worker::handle_packet` as a whole, held against the general path.
fn whole(w: &mut Worker, now: Tick, snap: &Snapshot, f: &mut [u8], m: &PacketMeta) -> Option<Verdict> {
    Some(w.handle_packet(now, snap, f, m))
}

/// [`whole`] for both kinds of frame.
const WHOLE: FastPaths = FastPaths {
    untagged: whole,
    tagged: whole,
};

/// What `run` saw over `seeds`, summed.
fn over(seeds: std::ops::RangeInclusive<u64>, mut run: impl FnMut(u64) -> Seen) -> Seen {
    let mut total = Seen::default();
    for seed in seeds {
        let s = run(seed);
        total.fast += s.fast;
        total.declined += s.declined;
    }
    total
}

/// [`grown_frame6`] traffic through the fast path's `paths` on `snap`
/// (tagged with `vids`), four seeds.
fn too_big(snap: &Snapshot, vids: Option<[u16; 2]>) -> Seen {
    over(1..=4, |seed| {
        let mk = || worker(1, 1024);
        let seed = seed.wrapping_mul(0x3c6e_f372_fe94_f82b);
        run_fast(
            std::slice::from_ref(snap),
            seed,
            mk,
            grown_frame6,
            vids,
            V6,
            corrupt6,
        )
    })
}

fn run6(seed: u64, n_workers: u16, capacity: u32) -> Seen {
    let snaps = [
        snapshot6(),
        snapshot6_unresolved(),
        snapshot6(),
        snapshot6_no_services(),
    ];
    let mk = || worker(n_workers, capacity);
    run_fast(&snaps, seed, mk, frame6, None, V6, corrupt6)
}

#[test]
fn ipv6_fast_path_answers_exactly_as_the_general_path() {
    let total = over(1..=8, |seed| {
        run6(seed.wrapping_mul(0x2545_f491_4f6c_dd1d), 1, 1024)
    });
    // The fast path must have taken a real share, or this compares
    // nothing.
    assert!(total.fast > 2000, "{total:?}");
    assert!(total.declined > 2000, "{total:?}");
}

/// Two workers (half the flows are the other's: hand-overs, declined),
/// and a small table that fills (evictions).
#[test]
fn ipv6_fast_path_with_two_workers_and_a_full_table() {
    let total = over(11..=14, |seed| {
        run6(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15), 2, 64)
    });
    assert!(total.fast > 500, "{total:?}");
}

/// [`frame6`], half of them grown to IP packets of 1,200-1,599 bytes.
fn grown_frame6(rng: &mut Rng, replies: &[Reply]) -> (Vec<u8>, u16) {
    let (mut f, port) = frame6(rng, replies);
    if rng.below(2) == 0 {
        grow(&mut f, 1200 + rng.below(400) as usize, true);
    }
    (f, port)
}

/// Ports of MTU 1,400 (clients) and 1,280 (backends): the IPv6 fast path
/// declines a packet too big for its egress port, having written and
/// counted nothing, and the general path answers it.
#[test]
fn ipv6_fast_path_declines_packets_too_big_for_the_port() {
    let mut b = builder();
    b.mtu(0, 1400).mtu(1, 1280);
    let total = too_big(&b.build().unwrap(), None);
    assert!(total.fast > 500, "{total:?}");
}

/// `Worker::handle_packet` (the IPv4 fast path, then `not_fast_v4`: the
/// IPv6 fast path with the lookup it hands the general path when it
/// declines) against the general path alone, on the same IPv6 traffic.
#[test]
fn handle_packet_answers_ipv6_as_the_general_path() {
    let snaps = [
        snapshot6(),
        snapshot6_unresolved(),
        snapshot6(),
        snapshot6_no_services(),
    ];
    for seed in 21..=24u64 {
        let mk = || worker(1, 1024);
        run_fast(
            &snaps,
            seed.wrapping_mul(0x2545_f491_4f6c_dd1d),
            mk,
            frame6,
            None,
            WHOLE,
            corrupt6,
        );
    }
}

/// A connection's first packets fill the flow cache of both directions
/// (the SYN the original's, the SYN-ACK the reply's), for the snapshot's
/// epoch only; a packet on another snapshot fills it anew.
#[test]
fn ipv6_packets_fill_the_flow_cache() {
    let snap = snapshot6();
    let mut w = worker(1, 1024);
    let client = (ip("fd00::2"), 40000);
    let web = (ip("fd00::100"), 80);
    let send = |w: &mut Worker, snap: &Snapshot, mut f: Vec<u8>, port| {
        let v = w.handle_packet(Tick(1), snap, &mut f, &meta(port));
        assert!(matches!(v, Verdict::Transmit { .. }), "{v:?}");
        f
    };
    let to_backend = send(&mut w, &snap, tcp(client, web, 1, 64), 0);
    let p = wire::parse(&to_backend).unwrap();
    let (id, _) = w
        .conntrack()
        .lookup(&FlowKey::new(client, web, Proto::Tcp).unwrap())
        .unwrap();
    let epoch = snap.epoch();
    let cached = |w: &Worker, dir| w.conntrack().cached_hop_v6(id, dir, epoch);
    // The SYN opened the connection on the fast path (`fast_open6.rs`):
    // its direction cached, the other not yet.
    let hop = cached(&w, Direction::Original).expect("cached by the open");
    assert_eq!(snap.hop_v6(hop).map(|h| h.port), Some(1), "the backends' port");
    assert_eq!(cached(&w, Direction::Reply), None);
    send(
        &mut w,
        &snap,
        tcp((p.dst, p.dst_port), (p.src, p.src_port), 3, 64),
        1,
    );
    assert!(cached(&w, Direction::Reply).is_some());
    send(&mut w, &snap, tcp(client, web, 2, 64), 0);
    assert_eq!(cached(&w, Direction::Original), Some(hop));
    // Another snapshot (the same contents, another epoch): refilled for
    // it, not trusted as is.
    let next = snapshot6();
    assert_ne!(next.epoch(), epoch);
    send(&mut w, &next, tcp(client, web, 2, 64), 0);
    assert_eq!(cached(&w, Direction::Original), None);
    assert!(w
        .conntrack()
        .cached_hop_v6(id, Direction::Original, next.epoch())
        .is_some());
}

/// The tagged instantiation on a node whose ports are on VLANs 10 and 20:
/// the same IPv6 traffic, tagged (now and then with the other port's id,
/// an 802.1ad TPID or no tag), the same answers (the egress port's id
/// written on forwarded frames), one or two workers; and `handle_packet`
/// on the same node.
#[test]
fn tagged_ipv6_fast_path_answers_exactly_as_the_general_path() {
    let tagged = || {
        let mut b = builder6();
        b.vlan(0, 10).vlan(1, 20);
        b.build().unwrap()
    };
    let snaps = [tagged(), tagged()];
    let total = over(1..=4, |seed| {
        let workers = 1 + (seed % 2) as u16;
        let mk = || worker(workers, 1024);
        let seed = seed.wrapping_mul(0x6a09_e667_f3bc_c909);
        run_fast(&snaps, seed, mk, frame6, Some([10, 20]), V6, corrupt6)
    });
    assert!(total.fast > 1000, "{total:?}");
    assert!(total.declined > 1000, "{total:?}");
    for seed in 5..=6u64 {
        let mk = || worker(1, 1024);
        run_fast(&snaps, seed, mk, frame6, Some([10, 20]), WHOLE, corrupt6);
    }
}

/// Tagged ports of MTU 1,400 (clients) and 1,280 (backends), traffic of
/// every size around them: the tagged instantiation declines a packet too
/// big for its egress port (its IP length counted past the tag).
#[test]
fn tagged_ipv6_fast_path_declines_packets_too_big_for_the_port() {
    let mut b = builder6();
    b.mtu(0, 1400).mtu(1, 1280).vlan(0, 10).vlan(1, 20);
    let total = too_big(&b.build().unwrap(), Some([10, 20]));
    assert!(total.fast > 300, "{total:?}");
}

/// The tagged read takes an 802.1Q tag only (TPID 0x8100), not 802.1ad's.
#[test]
fn tagged_ipv6_read_takes_only_an_8021q_tag() {
    let mut f = tcp((ip("fd00::2"), 40000), (ip("fd00::100"), 80), 2, 64);
    assert!(read_v6_at::<VLAN_TAG>(&f).is_none(), "untagged");
    f.splice(12..12, [0x81, 0x00, 0x00, 10]);
    assert!(read_v6_at::<VLAN_TAG>(&f).is_some());
    f[12] = 0x88;
    f[13] = 0xa8;
    assert!(read_v6_at::<VLAN_TAG>(&f).is_none());
}

/// [`builder`] with a port 0 prefix fd02::/64 (its IPv6 default route
/// via fd02::fe when `gateway`) and IPv6 services that refuse or steer
/// new connections: full-NAT TCP [fd00::102]:80 open to fd00::2/128
/// only; full-NAT TCP [fd00::103]:80 with no backend; DNAT TCP
/// [fd00::104]:80 (no SYN needed) to fd01::11 (resolved), fd01::20
/// (unresolved: `Resolve`) and fd09::5 (behind the gateway, or no route);
/// full-NAT TCP [fd00::105]:80 with client-IP affinity; DNAT TCP
/// [fd00::106]:80 and [fd00::107]:80, both to fd01::11 alone (a client
/// endpoint of both has one reply tuple: `ConntrackConflict`).
fn snapshot6_policies(gateway: bool) -> Snapshot {
    policies6_builder(gateway).build().unwrap()
}

/// The builder of [`snapshot6_policies`], for tests that add to it.
fn policies6_builder(gateway: bool) -> SnapshotBuilder<'static> {
    let mut b = builder();
    let gw = ip("fd02::fe");
    b.interface(
        0,
        MAC0,
        Cidr::new(ip("fd02::1"), 64).unwrap(),
        gateway.then_some(gw),
    );
    b.neighbor(gw, PEER);
    let spec = |name: &str, mode| ServiceSpec {
        mode,
        ..ServiceSpec::new(name)
    };
    let backends = ["fd01::11", "fd01::12", "fd01::13"];
    let only = ServiceSpec {
        source_ranges: vec![Cidr::new(ip("fd00::2"), 128).unwrap()],
        ..spec("default/only6", ForwardMode::FullNat)
    };
    let sticky = ServiceSpec {
        affinity: SessionAffinity::ClientIp {
            timeout: Duration::from_secs(60),
        },
        ..spec("default/sticky6", ForwardMode::FullNat)
    };
    let services = [
        (only, "fd00::102", &backends[..]),
        (spec("default/empty6", ForwardMode::FullNat), "fd00::103", &[]),
        (
            spec("default/dnat6", ForwardMode::Dnat),
            "fd00::104",
            &["fd01::11", "fd01::20", "fd09::5"],
        ),
        (sticky, "fd00::105", &backends[..]),
        (
            spec("default/one6a", ForwardMode::Dnat),
            "fd00::106",
            &["fd01::11"],
        ),
        (
            spec("default/one6b", ForwardMode::Dnat),
            "fd00::107",
            &["fd01::11"],
        ),
    ];
    for (spec, vip, backends) in services {
        let svc = b.service(spec).unwrap();
        let fe = FrontendSpec::new(ip(vip), 80, Proto::Tcp, FrontendKind::LoadBalancer);
        b.frontend(svc, fe).unwrap();
        for a in backends {
            b.backend(svc, BackendSpec::new(ip(a), 8080)).unwrap();
        }
    }
    b
}

/// A client of [`policy_frame6`]: [`client6`]'s, or one that may open
/// nothing: link-local, or one of lbd's own addresses (port 0's
/// interface address, the SNAT address, a VIP).
fn policy_client6(rng: &mut Rng) -> (IpAddr, u16) {
    match rng.below(8) {
        0 => (ip("fe80::2"), 40000),
        1 => (
            ip(["fd00::1", "fd01::100", "fd00::100"][rng.below(3) as usize]),
            40001,
        ),
        _ => client6(rng),
    }
}

/// [`frame6`]'s traffic, a third of it new and established flows toward
/// the services of [`snapshot6_policies`]: SYN, ACK, FIN+ACK, RST+ACK, or
/// UDP to a TCP-only frontend; now and then to a link-layer group address.
fn policy_frame6(rng: &mut Rng, replies: &[Reply]) -> (Vec<u8>, u16) {
    if rng.below(3) != 0 {
        return frame6(rng, replies);
    }
    let vip = format!("fd00::{}", 102 + rng.below(6));
    let vip = (ip(&vip), 80);
    let mut f = match rng.below(5) {
        0..=3 => tcp(
            policy_client6(rng),
            vip,
            [1, 1, 2, 6, 10][rng.below(5) as usize],
            64,
        ),
        _ => udp6(policy_client6(rng), vip, 64),
    };
    if rng.below(16) == 0 {
        f[0] |= 1;
    }
    (f, 0)
}

/// New IPv6 connections (`fast_open6.rs`) against the general path's:
/// source ranges, client-IP affinity, no backend, unresolved and missing
/// next hops, sources that may open nothing; with tables that fill
/// (evictions, stateless DNAT forwards, `ConntrackFull`), an exhausted
/// SNAT pool (8 ports), two workers.
#[test]
fn ipv6_fast_path_opens_connections_as_the_general_path() {
    let snaps = [snapshot6_policies(true), snapshot6_policies(false)];
    // A worker, a seed multiplier, and the least number of answers the
    // fast path must give over two seeds (2,334, 921, 983 and 1,062 over
    // four when written).
    type Run = (fn() -> Worker, u64, u64);
    let runs: [Run; 4] = [
        (|| worker(1, 1024), 0x2d35_8dcc_aa6c_78a5, 800),
        (|| worker(1, 8), 0x1b87_3593, 250),
        (|| worker_with_ports(1, 256, 1024..=1031), 0x4cf5_ad43, 250),
        (|| worker(2, 64), 0x9e37_79b9, 250),
    ];
    for (mk, mul, least) in runs {
        let total = over(1..=2, |seed| {
            run_fast(
                &snaps,
                seed.wrapping_mul(mul),
                mk,
                policy_frame6,
                None,
                V6,
                corrupt6,
            )
        });
        assert!(total.fast > least, "{total:?}");
    }
    for seed in 5..=6u64 {
        let mk = || worker(1, 64);
        run_fast(&snaps, seed, mk, policy_frame6, None, WHOLE, corrupt6);
    }
}

/// An IPv6 table full of established connections: a new DNAT flow goes
/// on without an entry (`stateless_forwards`), a new full-NAT one is
/// dropped (`ConntrackFull`, its SNAT port given back): the IPv6 fast
/// paths answer every packet as the general path does.
#[test]
fn ipv6_opens_into_a_full_table_as_the_general_path() {
    let snap = snapshot6();
    let (mut fast, mut general) = (worker(1, 8), worker(1, 8));
    let capacity = fast.conntrack().capacity().1;
    let mut send = |f: Vec<u8>, port: u16| {
        let (mut a, mut b) = (f.clone(), f);
        let m = meta(port);
        let got = fast.fast_v6(Tick(1), &snap, &mut a, &m);
        let expect = general.handle_packet_general(Tick(1), &snap, &mut b, &m);
        assert_eq!((got, &a), (Some(expect), &b), "the fast path answers");
        assert_eq!(state(&fast), state(&general));
        let c = fast.counters();
        (
            expect,
            a,
            c.stateless_forwards.get(),
            c.drops_of(DropReason::ConntrackFull),
        )
    };
    let web = (ip("fd00::100"), 80);
    for i in 0..capacity {
        let client = (ip("fd00::2"), 41000 + i as u16);
        let (v, out, ..) = send(tcp(client, web, 1, 64), 0);
        assert!(matches!(v, Verdict::Transmit { port: 1, .. }), "{v:?}");
        let p = wire::parse(&out).unwrap();
        send(tcp((p.dst, p.dst_port), (p.src, p.src_port), 3, 64), 1);
        send(tcp(client, web, 2, 64), 0);
    }
    let (v, _, stateless, full) = send(udp6((ip("fd00::2"), 50000), (ip("fd00::101"), 53), 64), 0);
    assert!(matches!(v, Verdict::Transmit { port: 1, .. }), "{v:?}");
    assert_eq!((stateless, full), (1, 0));
    let (v, _, stateless, full) = send(tcp((ip("fd00::2"), 50001), web, 1, 64), 0);
    assert_eq!(v, Verdict::Drop(DropReason::ConntrackFull));
    assert_eq!((stateless, full), (1, 1));
}

/// [`frame6`]'s traffic, a third of it damaged by [`corrupt6`].
fn damaged_frame6(rng: &mut Rng, replies: &[Reply]) -> (Vec<u8>, u16) {
    let (mut f, port) = frame6(rng, replies);
    if rng.below(3) == 0 {
        corrupt6(rng, &mut f);
    }
    (f, port)
}

/// The burst path on IPv6 traffic (`handle_burst`: IPv6 frames read, not
/// parsed, in stage 1, through the IPv6 fast paths in stage 3 with their
/// lookups, parsed then only if declined) against `handle_packet` frame
/// by frame: with room, with evictions, with two workers, on tagged
/// ports.
#[test]
fn burst_matches_packet_by_packet_on_ipv6_traffic() {
    let snap = snapshot6();
    let mut evictions = 0;
    for seed in 1..=3u64 {
        run_traffic(&snap, seed * 0x2545_f491, 1, 1024, None, damaged_frame6);
        evictions += run_traffic(&snap, seed * 0x9e37_79b9, 1, 16, None, damaged_frame6).evictions;
        run_traffic(&snap, seed * 0x51_7cc1, 2, 64, None, damaged_frame6);
    }
    assert!(evictions > 0);
    let mut b = builder6();
    b.vlan(0, 10).vlan(1, 20);
    let tagged = b.build().unwrap();
    for seed in 1..=2u64 {
        run_traffic(&tagged, seed * 0x3c6e_f372, 1, 64, Some([10, 20]), damaged_frame6);
    }
}

/// The burst path's warmed openings (`Worker::warm_opens_v6`: the
/// frontend, Maglev pick and hashes handed to `fast_open_v6`) against
/// `handle_packet` frame by frame, on the policy services (source ranges,
/// no backend, unresolved and missing next hops, client-IP affinity,
/// conflicting DNAT frontends, sources that may open nothing), with room
/// and with evictions, with two workers, with a small SNAT pool, untagged
/// and tagged.
#[test]
fn burst_opens_ipv6_connections_as_packet_by_packet() {
    let (mut evictions, mut exhausted) = (0, 0);
    for gateway in [true, false] {
        let snap = snapshot6_policies(gateway);
        let mut b = policies6_builder(gateway);
        b.vlan(0, 10).vlan(1, 20);
        let tagged = b.build().unwrap();
        for seed in 1..=2u64 {
            run_traffic(&snap, seed * 0x2d35_8dcc, 1, 1024, None, policy_frame6);
            evictions += run_traffic(&snap, seed * 0x1b87_3593, 1, 16, None, policy_frame6).evictions;
            run_traffic(&snap, seed * 0x4cf5_ad43, 2, 64, None, policy_frame6);
            // 8 SNAT ports: exhaustion, and the burst's SNAT guesses off.
            exhausted +=
                run_traffic_ports(&snap, seed * 0x7f4a_7c15, 1, 64, 1024..=1031, None, policy_frame6)
                    .snat_exhausted;
            run_traffic(&tagged, seed * 0x9e37_79b9, 1, 64, Some([10, 20]), policy_frame6);
        }
    }
    assert!(
        evictions > 0 && exhausted > 0,
        "{evictions} evictions, {exhausted} exhausted"
    );
}

/// The burst path warms the new IPv6 connections of a burst, on untagged
/// and tagged nodes: eight SYNs that miss, to a full-NAT frontend, warm at
/// least two lines each more than eight ACKs that miss (which may open
/// nothing): the reply key's index line or cell, and the in-use word of
/// the SNAT pair the allocation will take.
#[test]
fn burst_warms_new_ipv6_connections() {
    let mut b = builder6();
    b.vlan(0, 10).vlan(1, 20);
    let tagged = b.build().unwrap();
    for (snap, tag) in [(snapshot6(), None), (tagged, Some(10u16))] {
        let warmed = |flags: u64| {
            let mut w = worker(1, 1024);
            let mut frames: Vec<Vec<u8>> = (0..8u16)
                .map(|i| {
                    let mut f = tcp((ip("2001:db8::2"), 40000 + i), (ip("fd00::100"), 80), flags, 64);
                    if let Some(vid) = tag {
                        let t = vid.to_be_bytes();
                        f.splice(12..12, [0x81, 0x00, t[0], t[1]]);
                    }
                    f
                })
                .collect();
            let metas = vec![meta(0); frames.len()];
            let mut verdicts = vec![Verdict::ToHost; frames.len()];
            let p = CountingPrefetch::default();
            w.handle_burst_with(&p, Tick(1), &snap, &mut frames, &metas, &mut verdicts);
            let opened = w.counters().new_connections.get();
            (p.0.get(), opened)
        };
        let (syn, opened) = warmed(1);
        let (ack, none) = warmed(2);
        assert_eq!((opened, none), (8, 0), "tag {tag:?}");
        assert!(
            syn >= ack + 2 * 8,
            "tag {tag:?}: {syn} lines warmed for SYNs, {ack} for ACKs"
        );
    }
}

/// Two DNAT frontends to one backend endpoint: the same client endpoint's
/// connection to the second would share the first's reply tuple. While
/// the first lives, the fast path drops it (`ConntrackConflict`), as the
/// general path does; once the first has expired (not yet swept), it
/// evicts it and opens the second (`Worker::retry_past_expired`).
#[test]
fn ipv6_fast_open_conflicts_as_the_general_path() {
    let snap = snapshot6_policies(true);
    let (mut fast, mut general) = (worker(1, 1024), worker(1, 1024));
    let mut send = |now: u64, f: Vec<u8>| {
        let (mut a, mut b) = (f.clone(), f);
        let m = meta(0);
        let got = fast.fast_v6(Tick(now), &snap, &mut a, &m);
        let expect = general.handle_packet_general(Tick(now), &snap, &mut b, &m);
        assert_eq!((got, &a), (Some(expect), &b), "the fast path answers");
        assert_eq!(state(&fast), state(&general));
        expect
    };
    let client = (ip("fd00::2"), 45000);
    let (a, b) = ((ip("fd00::106"), 80), (ip("fd00::107"), 80));
    let sent = |v: Verdict| matches!(v, Verdict::Transmit { port: 1, .. });
    assert!(sent(send(1, tcp(client, a, 1, 64))));
    let v = send(2, tcp(client, b, 1, 64));
    assert_eq!(v, Verdict::Drop(DropReason::ConntrackConflict));
    // An hour on, past any timeout of an embryonic connection.
    assert!(sent(send(3_600_000, tcp(client, b, 1, 64))));
    assert_eq!(general.counters().conntrack_expirations.get(), 1);
}
