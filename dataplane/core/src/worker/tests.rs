//! Worker tests: frames built with etherparse go through `handle_packet`
//! against a two-port snapshot (clients on port 0, backends on port 1);
//! outputs are checked field by field and every checksum is recomputed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use super::*;
use crate::checksum;
use crate::conntrack::ConnState;
use crate::flow::Proto;
use crate::snapshot::{
    BackendSpec, BackendState, Cidr, ForwardMode, FrontendKind, FrontendSpec, ServiceSpec, SessionAffinity,
    SnapshotBuilder,
};
use crate::wire::{self, TcpFlags, L3};

const MAC0: [u8; 6] = [2, 0, 0, 0, 0, 0x10];
const MAC1: [u8; 6] = [2, 0, 0, 0, 0, 0x11];
const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xc1];
const BACKEND_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xb1];
const ROUTER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xee];

fn v4(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn snapshot() -> Snapshot {
    snapshot_with(|_| {})
}

/// Port 0: 10.0.0.1/24 + fd00::1/64 (clients, gateway 10.0.0.254);
/// port 1: 10.1.0.1/24 + fd01::1/64 (backends). SNAT 10.1.0.100, fd01::100.
/// Services: web (full-NAT TCP 10.0.0.100:80), web6 ([fd00::100]:80), dns (DNAT
/// UDP 10.0.0.101:53), each with backends .11-.13.
fn snapshot_with(extra: impl FnOnce(&mut SnapshotBuilder)) -> Snapshot {
    snapshot_web_states(|_| BackendState::Active, extra)
}

/// [`snapshot`] with web backend `backend` (one of 10.1.0.11-13)
/// terminating.
fn snapshot_web_draining(backend: Ipv4Addr) -> Snapshot {
    let last = backend.octets()[3];
    snapshot_web_states(
        |i| {
            if i == last {
                BackendState::Terminating
            } else {
                BackendState::Active
            }
        },
        |_| {},
    )
}

/// The test snapshot's ports, SNAT addresses and neighbors, at `revision`:
/// port 0 10.0.0.1/24 + fd00::1/64 (clients, gateway 10.0.0.254), port 1
/// 10.1.0.1/24 + fd01::1/64 (backends .11-.13).
fn ports_and_neighbors(revision: u64) -> SnapshotBuilder<'static> {
    let mut b = SnapshotBuilder::new(revision);
    b.interface(
        0,
        MAC0,
        Cidr::new(v4("10.0.0.1"), 24).unwrap(),
        Some(v4("10.0.0.254")),
    );
    b.interface(0, MAC0, Cidr::new(v4("fd00::1"), 64).unwrap(), None);
    b.interface(1, MAC1, Cidr::new(v4("10.1.0.1"), 24).unwrap(), None);
    b.interface(1, MAC1, Cidr::new(v4("fd01::1"), 64).unwrap(), None);
    b.snat_address(v4("10.1.0.100")).snat_address(v4("fd01::100"));
    for c in ["10.0.0.2", "10.0.0.254", "fd00::2"] {
        b.neighbor(v4(c), CLIENT_MAC);
    }
    for i in 11..=13 {
        b.neighbor(v4(&format!("10.1.0.{i}")), BACKEND_MAC);
        b.neighbor(v4(&format!("fd01::{i}")), BACKEND_MAC);
    }
    b
}

/// [`snapshot_with`] whose web backend `10.1.0.i` is in `web_state(i)`.
fn snapshot_web_states(
    web_state: impl Fn(u8) -> BackendState,
    extra: impl FnOnce(&mut SnapshotBuilder),
) -> Snapshot {
    let mut b = ports_and_neighbors(1);
    let mut web = ServiceSpec::new("default/web");
    web.mode = ForwardMode::FullNat;
    let web = b.service(web).unwrap();
    b.frontend(
        web,
        FrontendSpec::new(v4("10.0.0.100"), 80, Proto::Tcp, FrontendKind::LoadBalancer),
    )
    .unwrap();
    let mut web6 = ServiceSpec::new("default/web6");
    web6.mode = ForwardMode::FullNat;
    let web6 = b.service(web6).unwrap();
    b.frontend(
        web6,
        FrontendSpec::new(v4("fd00::100"), 80, Proto::Tcp, FrontendKind::LoadBalancer),
    )
    .unwrap();
    let mut dns = ServiceSpec::new("default/dns");
    dns.mode = ForwardMode::Dnat;
    let dns = b.service(dns).unwrap();
    b.frontend(
        dns,
        FrontendSpec::new(v4("10.0.0.101"), 53, Proto::Udp, FrontendKind::ClusterIp),
    )
    .unwrap();
    for i in 11..=13 {
        let mut spec = BackendSpec::new(v4(&format!("10.1.0.{i}")), 8080);
        spec.state = web_state(i);
        b.backend(web, spec).unwrap();
        b.backend(web6, BackendSpec::new(v4(&format!("fd01::{i}")), 8080))
            .unwrap();
        b.backend(dns, BackendSpec::new(v4(&format!("10.1.0.{i}")), 53))
            .unwrap();
    }
    extra(&mut b);
    b.build().unwrap()
}

fn worker(n: u16, id: u16) -> Worker {
    let mut cfg = WorkerConfig::new(WorkerId(id), n);
    cfg.conntrack = conntrack::Config::new(1024, 1024);
    cfg.snat_addresses = vec![v4("10.1.0.100"), v4("fd01::100")];
    cfg.frontend_slots = 64;
    cfg.backend_slots = 64;
    Worker::new(cfg).unwrap()
}

fn tcp4(src: (&str, u16), dst: (&str, u16), flags: &str, ttl: u8, payload: &[u8]) -> Vec<u8> {
    let (s, d): (Ipv4Addr, Ipv4Addr) = (src.0.parse().unwrap(), dst.0.parse().unwrap());
    let mut b = etherparse::PacketBuilder::ethernet2(CLIENT_MAC, MAC0)
        .ipv4(s.octets(), d.octets(), ttl)
        .tcp(src.1, dst.1, 1000, 64000);
    for f in flags.chars() {
        b = match f {
            'S' => b.syn(),
            'A' => b.ack(1),
            'F' => b.fin(),
            'R' => b.rst(),
            _ => b,
        };
    }
    let mut out = Vec::new();
    b.write(&mut out, payload).unwrap();
    out
}

fn tcp6(src: (&str, u16), dst: (&str, u16), flags: &str, payload: &[u8]) -> Vec<u8> {
    let (s, d): (Ipv6Addr, Ipv6Addr) = (src.0.parse().unwrap(), dst.0.parse().unwrap());
    let mut b = etherparse::PacketBuilder::ethernet2(CLIENT_MAC, MAC0)
        .ipv6(s.octets(), d.octets(), 64)
        .tcp(src.1, dst.1, 7, 100);
    if flags.contains('S') {
        b = b.syn();
    }
    if flags.contains('A') {
        b = b.ack(1);
    }
    let mut out = Vec::new();
    b.write(&mut out, payload).unwrap();
    out
}

fn udp4(src: (&str, u16), dst: (&str, u16), payload: &[u8]) -> Vec<u8> {
    let (s, d): (Ipv4Addr, Ipv4Addr) = (src.0.parse().unwrap(), dst.0.parse().unwrap());
    let b = etherparse::PacketBuilder::ethernet2(CLIENT_MAC, MAC0)
        .ipv4(s.octets(), d.octets(), 64)
        .udp(src.1, dst.1);
    let mut out = Vec::new();
    b.write(&mut out, payload).unwrap();
    out
}

/// Every checksum of `frame` recomputed from scratch.
fn assert_checksums(frame: &[u8]) {
    let p = wire::parse(frame).expect("output parses");
    let l3 = &frame[p.l3_offset as usize..p.l4_offset as usize];
    let l4 = p.l4(frame);
    match (p.l3, p.src, p.dst) {
        (L3::Ipv4, IpAddr::V4(s), IpAddr::V4(d)) => {
            assert_eq!(checksum::checksum(l3), 0, "IPv4 header checksum");
            if p.protocol != wire::ip_proto::ICMP {
                let pseudo = checksum::pseudo_header_v4(s, d, p.protocol, l4.len() as u16);
                assert!(checksum::verify_l4(pseudo, l4), "L4 checksum");
            } else {
                assert_eq!(checksum::checksum(l4), 0, "ICMP checksum");
            }
        }
        (L3::Ipv6, IpAddr::V6(s), IpAddr::V6(d)) => {
            let pseudo = checksum::pseudo_header_v6(&s, &d, p.protocol, l4.len() as u32);
            assert!(checksum::verify_l4(pseudo, l4), "L4 checksum (v6)");
        }
        _ => panic!("unexpected output {p:?}"),
    }
}

fn meta(port: u16) -> PacketMeta {
    PacketMeta {
        port,
        offload: Default::default(),
    }
}

fn run(w: &mut Worker, snap: &Snapshot, now: u64, frame: &mut [u8], port: u16) -> Verdict {
    w.handle_packet(Tick(now), snap, frame, &meta(port))
}

#[test]
fn full_nat_tcp_v4_both_directions() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    let mut syn = tcp4(("10.0.0.2", 40000), ("10.0.0.100", 80), "S", 64, b"");
    assert_eq!(
        run(&mut w, &snap, 0, &mut syn, 0),
        Verdict::Transmit {
            port: 1,
            len: syn.len()
        }
    );
    let p = wire::parse(&syn).unwrap();
    assert_eq!(p.src, v4("10.1.0.100"), "source is the SNAT address");
    assert!(["10.1.0.11", "10.1.0.12", "10.1.0.13"].contains(&p.dst.to_string().as_str()));
    assert_eq!(p.dst_port, 8080);
    assert_eq!(p.ttl, 63);
    assert_eq!(owner_of_snat_port_for_test(p.src_port, 1), 0);
    assert_eq!(&syn[..6], &BACKEND_MAC);
    assert_eq!(&syn[6..12], &MAC1);
    assert_checksums(&syn);
    let (backend, snat_port) = (p.dst, p.src_port);

    // The backend answers the SNAT endpoint; the client sees the VIP.
    let mut synack = tcp4(
        (&backend.to_string(), 8080),
        ("10.1.0.100", snat_port),
        "SA",
        64,
        b"",
    );
    assert_eq!(
        run(&mut w, &snap, 1, &mut synack, 1),
        Verdict::Transmit {
            port: 0,
            len: synack.len()
        }
    );
    let r = wire::parse(&synack).unwrap();
    assert_eq!(
        (r.src, r.src_port, r.dst, r.dst_port),
        (v4("10.0.0.100"), 80, v4("10.0.0.2"), 40000)
    );
    assert_eq!(&synack[..6], &CLIENT_MAC);
    assert_checksums(&synack);

    // Data on the same connection reaches the same backend, with payload intact.
    let mut ack = tcp4(
        ("10.0.0.2", 40000),
        ("10.0.0.100", 80),
        "A",
        64,
        b"GET / HTTP/1.1\r\n\r\n",
    );
    assert!(matches!(
        run(&mut w, &snap, 2, &mut ack, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    let a = wire::parse(&ack).unwrap();
    assert_eq!((a.dst, a.src_port), (backend, snat_port));
    assert!(ack.ends_with(b"GET / HTTP/1.1\r\n\r\n"));
    assert_checksums(&ack);
    assert_eq!(w.conntrack().len(), 1);
    let c = w.counters();
    assert_eq!(c.new_connections.get(), 1);
    assert_eq!(c.total_drops(), 0);
    let fe: Vec<_> = c.frontend_totals().collect();
    assert_eq!(fe.len(), 1);
    assert_eq!((fe[0].1.packets, fe[0].1.connections), (3, 1));
}

fn owner_of_snat_port_for_test(port: u16, n: u16) -> u16 {
    crate::flow::owner_of_snat_port(port, n).0
}

#[test]
fn dnat_udp_keeps_the_client_address_and_replies_get_the_vip() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    let mut q = udp4(("10.0.0.2", 5353), ("10.0.0.101", 53), b"query");
    assert!(matches!(
        run(&mut w, &snap, 0, &mut q, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    let p = wire::parse(&q).unwrap();
    assert_eq!((p.src, p.src_port, p.dst_port), (v4("10.0.0.2"), 5353, 53));
    assert_checksums(&q);
    dnat_answer_gets_the_vip(&mut w, &snap, 1, &p.dst.to_string(), "10.0.0.101");
    // One query, one answer: answered, evictable, not a stream.
    let id = w.conntrack().lookup(&key_of(&q)).unwrap().0;
    assert_eq!(w.conntrack().state(id), Some(ConnState::UdpAnswered));
    assert_eq!(
        ConnState::UdpAnswered.class(),
        crate::conntrack::EvictClass::Embryonic
    );
    // The same socket's next query within 2 s of the answer (A, then
    // AAAA) leaves it so; one 2 s after the answer makes it a stream.
    for (now, want) in [(1_999, ConnState::UdpAnswered), (2_001, ConnState::UdpReplied)] {
        let mut q = udp4(("10.0.0.2", 5353), ("10.0.0.101", 53), b"query");
        assert!(matches!(
            run(&mut w, &snap, now, &mut q, 0),
            Verdict::Transmit { port: 1, .. }
        ));
        assert_eq!(w.conntrack().state(id), Some(want), "at {now} ms");
    }
}

/// Two DNAT VIPs with one backend endpoint: a client endpoint that opens
/// a flow through each would get the same reply tuple twice. The second is
/// refused as a conflict, not as a full table, and the first keeps working.
#[test]
fn dnat_reply_tuple_conflict_is_its_own_drop() {
    let snap = two_dnat_vips_one_backend();
    let mut w = worker(1, 0);
    let mut a = udp4(("10.0.0.2", 5353), ("10.0.0.102", 53), b"a");
    assert!(matches!(
        run(&mut w, &snap, 0, &mut a, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    let mut b = udp4(("10.0.0.2", 5353), ("10.0.0.103", 53), b"b");
    let before = b.clone();
    assert_eq!(
        run(&mut w, &snap, 1, &mut b, 0),
        Verdict::Drop(DropReason::ConntrackConflict)
    );
    assert_eq!(b, before, "a refused frame is left as it was");
    let c = w.counters();
    assert_eq!(c.drops_of(DropReason::ConntrackConflict), 1);
    assert_eq!(c.drops_of(DropReason::ConntrackFull), 0);
    assert_eq!(c.stateless_forwards.get(), 0);
    assert_eq!(w.conntrack().len(), 1);
    // The reply still finds the first connection and gets its VIP.
    dnat_answer_gets_the_vip(&mut w, &snap, 2, "10.1.0.11", "10.0.0.102");
}

/// DNAT services at 10.0.0.102:53 and 10.0.0.103:53 (UDP), each with
/// the one backend 10.1.0.11:53.
fn two_dnat_vips_one_backend() -> Snapshot {
    snapshot_with(|b| {
        for (name, vip) in [("default/a", "10.0.0.102"), ("default/b", "10.0.0.103")] {
            let mut s = ServiceSpec::new(name);
            s.mode = ForwardMode::Dnat;
            let s = b.service(s).unwrap();
            b.frontend(
                s,
                FrontendSpec::new(v4(vip), 53, Proto::Udp, FrontendKind::ClusterIp),
            )
            .unwrap();
            b.backend(s, BackendSpec::new(v4("10.1.0.11"), 53)).unwrap();
        }
    })
}

/// The entry in the way of a new connection's reply tuple has expired
/// but no sweep (`handle_tick`) has removed it yet: it is evicted, counted,
/// and the new connection goes through, packet by packet and in a burst.
/// Until it expires, the new one is refused.
#[test]
fn an_expired_unswept_entry_gives_way_to_a_conflicting_connection() {
    let snap = two_dnat_vips_one_backend();
    let expiry = conntrack::Timeouts::default()
        .of(ConnState::UdpUnreplied)
        .as_millis() as u64;
    for burst in [false, true] {
        let mut w = worker(1, 0);
        let send = |w: &mut Worker, now: u64, frame: &mut Vec<u8>| {
            if burst {
                let mut v = [Verdict::Drop(DropReason::Truncated)];
                w.handle_burst(Tick(now), &snap, std::slice::from_mut(frame), &[meta(0)], &mut v);
                v[0]
            } else {
                run(w, &snap, now, frame, 0)
            }
        };
        let a = udp4(("10.0.0.2", 5353), ("10.0.0.102", 53), b"a");
        assert!(matches!(
            send(&mut w, 0, &mut a.clone()),
            Verdict::Transmit { port: 1, .. }
        ));
        let mut b = udp4(("10.0.0.2", 5353), ("10.0.0.103", 53), b"b");
        assert_eq!(
            send(&mut w, expiry - 1, &mut b.clone()),
            Verdict::Drop(DropReason::ConntrackConflict),
            "burst {burst}: the first still lives"
        );
        assert!(
            matches!(send(&mut w, expiry, &mut b), Verdict::Transmit { port: 1, .. }),
            "burst {burst}"
        );
        let c = w.counters();
        // Removed as expired, as the sweep would have: not an eviction.
        assert_eq!(
            (
                c.conntrack_expirations.get(),
                c.conntrack_evictions.get(),
                c.new_connections.get()
            ),
            (1, 0, 2),
            "burst {burst}"
        );
        assert_eq!(c.drops_of(DropReason::ConntrackConflict), 1);
        let st = w.conntrack().stats();
        assert_eq!((st.evicted_expired, st.inserts), (1, 2));
        assert_eq!(w.conntrack().len(), 1);
        assert_eq!(w.conntrack().lookup(&key_of(&a)), None);
        // The backend's answer now belongs to the second VIP.
        dnat_answer_gets_the_vip(&mut w, &snap, expiry + 1, "10.1.0.11", "10.0.0.103");
    }
}

/// A UDP answer from `backend`:53 to the client 10.0.0.2:5353 goes out of
/// port 0 from `vip`:53, checksums intact.
fn dnat_answer_gets_the_vip(w: &mut Worker, snap: &Snapshot, now: u64, backend: &str, vip: &str) {
    let mut reply = udp4((backend, 53), ("10.0.0.2", 5353), b"answer");
    assert!(matches!(
        run(w, snap, now, &mut reply, 1),
        Verdict::Transmit { port: 0, .. }
    ));
    let r = wire::parse(&reply).unwrap();
    assert_eq!((r.src, r.src_port), (v4(vip), 53));
    assert_checksums(&reply);
}

fn key_of(frame: &[u8]) -> crate::flow::FlowKey {
    let p = wire::parse(frame).unwrap();
    crate::flow::FlowKey::new(
        (p.src, p.src_port),
        (p.dst, p.dst_port),
        Proto::from_u8(p.protocol).unwrap(),
    )
    .unwrap()
    .reversed()
}

/// A SYN with a routing header that has segments left is refused before a
/// connection opens (no entry, no SNAT port, no `new_connections`); an
/// atomic fragment (offset 0, M = 0) is a whole SYN and opens one.
#[test]
fn ipv6_pending_route_opens_nothing_and_atomic_fragment_is_whole() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    let snat = v4("fd01::100");
    let free0 = w.snat_ports().available(snat, Proto::Tcp);
    let with_ext = |ext: [u8; 8], next: u8| {
        let mut f = tcp6(("fd00::2", 40000), ("fd00::100", 80), "S", b"");
        f.splice(54..54, ext);
        f[20] = next;
        let pl = u16::from_be_bytes([f[18], f[19]]) + 8;
        f[18..20].copy_from_slice(&pl.to_be_bytes());
        f
    };
    let mut routed = with_ext([6, 0, 4, 1, 0, 0, 0, 0], wire::ip_proto::IPV6_ROUTE);
    assert_eq!(
        run(&mut w, &snap, 0, &mut routed, 0),
        Verdict::Drop(DropReason::Ipv6ExtensionHeader)
    );
    assert_eq!(w.conntrack().len(), 0);
    assert_eq!(w.counters().new_connections.get(), 0);
    assert_eq!(w.snat_ports().available(snat, Proto::Tcp), free0);
    let mut atomic = with_ext([6, 0, 0, 0, 0, 0, 0, 7], wire::ip_proto::IPV6_FRAG);
    assert!(matches!(
        run(&mut w, &snap, 0, &mut atomic, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    assert_eq!(w.conntrack().len(), 1);
    assert_checksums(&atomic);
}

/// IPv6 link control (MLD, router discovery), which the all-multicast
/// ports receive on any IPv6 segment, counts as `link_control`, not as
/// `no_frontend` or `local_unhandled`.
#[test]
fn ipv6_link_control_is_its_own_drop() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    for (ty, dst) in [
        (143u8, "ff02::16"),
        (131, "ff02::1:ff00:100"),
        (134, "ff02::1"),
        (133, "ff02::2"),
        (133, "fd00::1"),
    ] {
        let d: Ipv6Addr = dst.parse().unwrap();
        let mut f = Vec::new();
        etherparse::PacketBuilder::ethernet2(
            CLIENT_MAC,
            wire::ethernet::MacAddr::ipv6_multicast(&d.octets()).0,
        )
        .ipv6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1).octets(), d.octets(), 1)
        .icmpv6_raw(ty, 0, [0; 4])
        .write(&mut f, &[0; 16])
        .unwrap();
        assert_eq!(
            run(&mut w, &snap, 0, &mut f, 0),
            Verdict::Drop(DropReason::LinkControl),
            "type {ty} to {dst}"
        );
    }
    assert_eq!(w.counters().drops_of(DropReason::LinkControl), 5);
}

#[test]
fn full_nat_tcp_v6() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    let mut syn = tcp6(("fd00::2", 40000), ("fd00::100", 80), "S", b"");
    assert!(matches!(
        run(&mut w, &snap, 0, &mut syn, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    let p = wire::parse(&syn).unwrap();
    assert_eq!(p.src, v4("fd01::100"));
    assert_eq!(p.ttl, 63, "hop limit decremented");
    assert_checksums(&syn);
    let mut synack = tcp6((&p.dst.to_string(), 8080), ("fd01::100", p.src_port), "SA", b"");
    assert!(matches!(
        run(&mut w, &snap, 1, &mut synack, 1),
        Verdict::Transmit { port: 0, .. }
    ));
    let r = wire::parse(&synack).unwrap();
    assert_eq!(
        (r.src, r.dst, r.dst_port),
        (v4("fd00::100"), v4("fd00::2"), 40000)
    );
    assert_checksums(&synack);
}

#[test]
fn maglev_spreads_clients_and_keeps_each_flow() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    let mut seen = std::collections::HashMap::new();
    for port in 0..300u16 {
        let mut syn = tcp4(("10.0.0.2", 20000 + port), ("10.0.0.100", 80), "S", 64, b"");
        assert!(matches!(
            run(&mut w, &snap, 0, &mut syn, 0),
            Verdict::Transmit { .. }
        ));
        *seen.entry(wire::parse(&syn).unwrap().dst).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 3, "all three backends get flows: {seen:?}");
    for n in seen.values() {
        assert!(
            (65..=135).contains(n),
            "each backend within ±35% of a third: {seen:?}"
        );
    }
}

#[test]
fn drops_are_counted_with_reasons() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    // A TCP port of a VIP without a frontend: refused with a RST back out
    // of the port it came in on (not a drop); UDP is dropped.
    let mut f = tcp4(("10.0.0.2", 1), ("10.0.0.100", 81), "S", 64, b"");
    assert_eq!(
        run(&mut w, &snap, 0, &mut f, 0),
        Verdict::Transmit { port: 0, len: 54 }
    );
    let rst = wire::parse(&f[..54]).unwrap();
    assert_eq!((rst.dst, rst.dst_port), (v4("10.0.0.2"), 1));
    assert_eq!(rst.tcp_flags.0 & TcpFlags::RST.0, TcpFlags::RST.0);
    assert_eq!(w.counters().resets_sent.get(), 1);
    let mut f = udp4(("10.0.0.2", 1), ("10.0.0.100", 81), b"x");
    assert_eq!(
        run(&mut w, &snap, 0, &mut f, 0),
        Verdict::Drop(DropReason::NoFrontend)
    );
    // Full-NAT needs a SYN to open a connection.
    let mut f = tcp4(("10.0.0.2", 2), ("10.0.0.100", 80), "A", 64, b"");
    assert_eq!(
        run(&mut w, &snap, 0, &mut f, 0),
        Verdict::Drop(DropReason::TcpNotSyn)
    );
    // TTL 1 cannot be forwarded; the frame is left as it was.
    let mut f = tcp4(("10.0.0.2", 3), ("10.0.0.100", 80), "S", 1, b"");
    let before = f.clone();
    assert_eq!(
        run(&mut w, &snap, 0, &mut f, 0),
        Verdict::Drop(DropReason::TtlExceeded)
    );
    assert_eq!(f, before);
    // A reply nobody asked for.
    let mut f = tcp4(("10.1.0.11", 8080), ("10.1.0.100", 4000), "SA", 64, b"");
    assert_eq!(
        run(&mut w, &snap, 0, &mut f, 1),
        Verdict::Drop(DropReason::NoConntrackReply)
    );
    // Garbage.
    let mut f = vec![0u8; 10];
    assert_eq!(
        run(&mut w, &snap, 0, &mut f, 0),
        Verdict::Drop(DropReason::Truncated)
    );
    let c = w.counters();
    for r in [
        DropReason::NoFrontend,
        DropReason::TcpNotSyn,
        DropReason::TtlExceeded,
        DropReason::NoConntrackReply,
    ] {
        assert_eq!(c.drops_of(r), 1, "{r:?}");
    }
    assert_eq!(w.conntrack().len(), 0, "no drop leaves an entry behind");
}

/// A client SYN on the ports of a connection in TIME_WAIT opens a new
/// connection (as Linux's conntrack reopens one): a new Maglev pick, so a
/// backend drained since gets none, and a new SNAT pair, the old one given
/// back.
/// Opens a full-NAT TCP connection from `client` to `vip` with a SYN at 0
/// ms, then sends `steps` at 10 ms, each `(flags, port)` with `payload`:
/// from the client on port 0, from the backend (port 8080) to the SNAT
/// endpoint on port 1, asserting every packet is transmitted. Returns the
/// SYN as forwarded (backend, SNAT endpoint).
fn open_and_exchange(
    w: &mut Worker,
    snap: &Snapshot,
    (client, vip): ((&str, u16), (&str, u16)),
    steps: &[(&str, u16)],
    payload: &[u8],
) -> wire::Parsed {
    let mut syn = tcp4(client, vip, "S", 64, b"");
    assert!(matches!(
        run(w, snap, 0, &mut syn, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    let sent = wire::parse(&syn).unwrap();
    let (b, s) = (sent.dst.to_string(), sent.src.to_string());
    for &(flags, port) in steps {
        let mut f = if port == 0 {
            tcp4(client, vip, flags, 64, payload)
        } else {
            tcp4((&b, 8080), (&s, sent.src_port), flags, 64, payload)
        };
        assert!(
            matches!(run(w, snap, 10, &mut f, port), Verdict::Transmit { .. }),
            "{flags}"
        );
    }
    sent
}

/// A handshake, then the client closes first: TIME_WAIT.
const CLOSED_BY_CLIENT: [(&str, u16); 5] = [("SA", 1), ("A", 0), ("FA", 0), ("FA", 1), ("A", 0)];

/// The client and the VIP of [`in_time_wait`].
const TW_CLIENT: (&str, u16) = ("10.0.0.2", 40000);
const TW_VIP: (&str, u16) = ("10.0.0.100", 80);

/// A full-NAT connection from [`TW_CLIENT`] to [`TW_VIP`] that the client
/// closed first, left in TIME_WAIT: its SYN as forwarded, its key and its
/// entry.
fn in_time_wait(w: &mut Worker, snap: &Snapshot) -> (wire::Parsed, crate::flow::FlowKey, conntrack::EntryId) {
    let sent = open_and_exchange(w, snap, (TW_CLIENT, TW_VIP), &CLOSED_BY_CLIENT, b"");
    let key = crate::flow::FlowKey::new(
        (v4(TW_CLIENT.0), TW_CLIENT.1),
        (v4(TW_VIP.0), TW_VIP.1),
        Proto::Tcp,
    )
    .unwrap();
    let (id, _) = w.conntrack().lookup(&key).unwrap();
    assert_eq!(w.conntrack().state(id), Some(ConnState::TcpTimeWait));
    (sent, key, id)
}

#[test]
fn a_syn_on_a_finished_connection_picks_again() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    let (client, vip) = (TW_CLIENT, TW_VIP);
    let (sent, key, _) = in_time_wait(&mut w, &snap);
    let (IpAddr::V4(backend), IpAddr::V4(snat)) = (sent.dst, sent.src) else {
        panic!("{sent:?}")
    };
    let (b, s) = (backend.to_string(), snat.to_string());
    let from_backend = |flags: &str| tcp4((&b, 8080), (&s, sent.src_port), flags, 64, b"");
    // The backend is drained; the client reuses its port.
    let drained = snapshot_web_draining(backend);
    let mut again = tcp4(client, vip, "S", 64, b"");
    assert!(matches!(
        run(&mut w, &drained, 20, &mut again, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    let resent = wire::parse(&again).unwrap();
    assert_ne!(resent.dst, sent.dst, "a drained backend takes no new connection");
    let (id2, _) = w.conntrack().lookup(&key).unwrap();
    assert_eq!(w.conntrack().state(id2), Some(ConnState::TcpSynSent));
    assert_eq!(w.conntrack().len(), 1, "the old entry is gone");
    assert_eq!(w.counters().conntrack_expirations.get(), 1);
    assert_eq!(w.counters().new_connections.get(), 2);
    // Its SNAT pair went back: nothing answers to it any more.
    let mut stale = from_backend("A");
    assert_eq!(
        run(&mut w, &drained, 20, &mut stale, 1),
        Verdict::Drop(DropReason::NoConntrackReply)
    );

    // A retransmitted SYN of a connection being opened keeps its entry
    // and backend.
    let mut w = worker(1, 0);
    let mut syn = tcp4(client, vip, "S", 64, b"");
    run(&mut w, &snap, 0, &mut syn, 0);
    let first = wire::parse(&syn).unwrap();
    let mut syn = tcp4(client, vip, "S", 64, b"");
    run(&mut w, &snap, 1000, &mut syn, 0);
    let second = wire::parse(&syn).unwrap();
    assert_eq!((first.src_port, first.dst), (second.src_port, second.dst));
    assert_eq!(w.counters().new_connections.get(), 1);
    assert_eq!(w.counters().conntrack_expirations.get(), 0);
}

/// A client SYN on an established connection that has expired (idle past
/// 900 s) but that no sweep has removed yet opens a new connection, as
/// after the sweep: a new Maglev pick (a backend drained since gets none)
/// and a new SNAT pair (the fast path's equivalence tests cover the flow
/// cache under an unchanged snapshot).
/// Before the expiry a SYN keeps the entry.
#[test]
fn a_syn_on_an_expired_unswept_connection_picks_again() {
    let snap = snapshot();
    let client = ("10.0.0.2", 40000);
    let vip = ("10.0.0.100", 80);
    for expired in [false, true] {
        let mut w = worker(1, 0);
        // Handshake and data both ways: the entry's cache is warm.
        let steps = [("SA", 1), ("A", 0), ("A", 0), ("A", 1), ("A", 0), ("A", 1)];
        let sent = open_and_exchange(&mut w, &snap, (client, vip), &steps, b"data");
        let IpAddr::V4(backend) = sent.dst else {
            panic!("{sent:?}")
        };
        let drained = snapshot_web_draining(backend);
        // 900 s after the last packet (at 10 ms) it has expired.
        let at = if expired { 900_010 } else { 900_009 };
        let mut again = tcp4(client, vip, "S", 64, b"");
        assert!(matches!(
            run(&mut w, &drained, at, &mut again, 0),
            Verdict::Transmit { port: 1, .. }
        ));
        let resent = wire::parse(&again).unwrap();
        if expired {
            assert_ne!(resent.dst, sent.dst, "a drained backend takes no new connection");
            assert_ne!(resent.src_port, sent.src_port, "a new SNAT pair");
            assert_eq!(w.counters().new_connections.get(), 2);
            assert_eq!(w.counters().conntrack_expirations.get(), 1);
        } else {
            assert_eq!((resent.dst, resent.src_port), (sent.dst, sent.src_port));
            assert_eq!(w.counters().new_connections.get(), 1);
        }
        assert_eq!(w.conntrack().len(), 1);
    }
}

/// A connection whose client would be one of lbd's own addresses
/// (spoofed, or looping: a DNAT connection's replies would come back to
/// lbd, to a full-NAT connection's reply port if it is an SNAT address; a
/// full-NAT one's answers would go to lbd itself, a neighbor that never
/// resolves) is dropped, in both modes, packet by packet and in a burst
/// (the fast path declines it).
#[test]
fn connections_from_an_own_address_are_dropped() {
    let snap = snapshot();
    let mut frames = Vec::new();
    for own in ["10.1.0.100", "10.0.0.100", "10.0.0.1", "10.1.0.1"] {
        frames.push(udp4((own, 1030), ("10.0.0.101", 53), b"query"));
        frames.push(tcp4((own, 1030), ("10.0.0.100", 80), "S", 64, b""));
    }
    let mut w = worker(1, 0);
    for f in &frames {
        let v = run(&mut w, &snap, 0, &mut f.clone(), 0);
        assert_eq!(v, Verdict::Drop(DropReason::OwnSource), "{f:02x?}");
    }
    let mut copies = frames.clone();
    let metas = vec![meta(0); frames.len()];
    let mut burst = vec![Verdict::ToHost; frames.len()];
    w.handle_burst(Tick(0), &snap, &mut copies, &metas, &mut burst);
    assert!(
        burst.iter().all(|v| *v == Verdict::Drop(DropReason::OwnSource)),
        "{burst:?}"
    );
    assert_eq!(w.conntrack().len(), 0);
    assert_eq!(w.counters().new_connections.get(), 0);
    // IPv6 (the general path): lbd's SNAT and interface addresses.
    for own in ["fd01::100", "fd00::1"] {
        let mut f = tcp6((own, 1030), ("fd00::100", 80), "S", b"");
        assert_eq!(
            run(&mut w, &snap, 0, &mut f, 0),
            Verdict::Drop(DropReason::OwnSource)
        );
    }
    assert_eq!(w.conntrack().len(), 0);
    for mut f in [
        udp4(("10.0.0.2", 1030), ("10.0.0.101", 53), b"query"),
        tcp4(("10.0.0.2", 1030), ("10.0.0.100", 80), "S", 64, b""),
        tcp6(("fd00::2", 1030), ("fd00::100", 80), "S", b""),
    ] {
        assert!(matches!(
            run(&mut w, &snap, 0, &mut f, 0),
            Verdict::Transmit { port: 1, .. }
        ));
    }
}

/// A client whose address became one of lbd's own (a new snapshot) after
/// its connection closed: its SYN reusing the ports is `own_source` and
/// ends nothing, the TIME_WAIT entry stays.
#[test]
fn an_own_source_syn_ends_no_closing_connection() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    let (_, _, id) = in_time_wait(&mut w, &snap);
    let owned = snapshot_with(|b| {
        let s = b.service(ServiceSpec::new("default/other")).unwrap();
        b.frontend(
            s,
            FrontendSpec::new(v4("10.0.0.2"), 8080, Proto::Tcp, FrontendKind::ClusterIp),
        )
        .unwrap();
    });
    let mut f = tcp4(TW_CLIENT, TW_VIP, "S", 64, b"");
    assert_eq!(
        run(&mut w, &owned, 20, &mut f, 0),
        Verdict::Drop(DropReason::OwnSource)
    );
    assert_eq!(w.conntrack().state(id), Some(ConnState::TcpTimeWait));
    assert_eq!(w.counters().conntrack_expirations.get(), 0);
}

#[test]
fn no_backend_source_ranges_and_affinity() {
    let snap = snapshot_with(|b| {
        let mut s = ServiceSpec::new("default/empty");
        s.mode = ForwardMode::Dnat;
        let s = b.service(s).unwrap();
        b.frontend(
            s,
            FrontendSpec::new(v4("10.0.0.102"), 80, Proto::Tcp, FrontendKind::ClusterIp),
        )
        .unwrap();
        let mut d = BackendSpec::new(v4("10.1.0.11"), 80);
        d.state = BackendState::Terminating;
        b.backend(s, d).unwrap();
        let mut r = ServiceSpec::new("default/restricted");
        r.mode = ForwardMode::Dnat;
        r.source_ranges = vec![Cidr::new(v4("192.168.0.0"), 16).unwrap()];
        r.affinity = SessionAffinity::ClientIp {
            timeout: Duration::from_secs(10800),
        };
        let r = b.service(r).unwrap();
        b.frontend(
            r,
            FrontendSpec::new(v4("10.0.0.103"), 80, Proto::Tcp, FrontendKind::ClusterIp),
        )
        .unwrap();
        for i in 11..=13 {
            b.backend(r, BackendSpec::new(v4(&format!("10.1.0.{i}")), 80))
                .unwrap();
        }
        let mut a = ServiceSpec::new("default/sticky");
        a.mode = ForwardMode::Dnat;
        a.affinity = SessionAffinity::ClientIp {
            timeout: Duration::from_secs(10800),
        };
        let a = b.service(a).unwrap();
        b.frontend(
            a,
            FrontendSpec::new(v4("10.0.0.104"), 80, Proto::Tcp, FrontendKind::ClusterIp),
        )
        .unwrap();
        for i in 11..=13 {
            b.backend(a, BackendSpec::new(v4(&format!("10.1.0.{i}")), 80))
                .unwrap();
        }
    });
    let mut w = worker(1, 0);
    let mut f = tcp4(("10.0.0.2", 1), ("10.0.0.102", 80), "S", 64, b"");
    assert_eq!(
        run(&mut w, &snap, 0, &mut f, 0),
        Verdict::Drop(DropReason::NoBackend),
        "terminating gets no new flows"
    );
    let mut f = tcp4(("10.0.0.2", 1), ("10.0.0.103", 80), "S", 64, b"");
    assert_eq!(
        run(&mut w, &snap, 0, &mut f, 0),
        Verdict::Drop(DropReason::SourceRangeDenied)
    );
    // Client-IP affinity: every connection of one client lands on one backend.
    let mut backends = std::collections::HashSet::new();
    for port in 0..50 {
        let mut f = tcp4(("10.0.0.2", 30000 + port), ("10.0.0.104", 80), "S", 64, b"");
        assert!(matches!(
            run(&mut w, &snap, 0, &mut f, 0),
            Verdict::Transmit { .. }
        ));
        backends.insert(wire::parse(&f).unwrap().dst);
    }
    assert_eq!(backends.len(), 1);
}

#[test]
fn flows_of_other_workers_are_handed_over() {
    let snap = snapshot();
    let mut w0 = worker(2, 0);
    let mut w1 = worker(2, 1);
    let mut handed = 0;
    for port in 0..64u16 {
        let mut syn = tcp4(("10.0.0.2", 40000 + port), ("10.0.0.100", 80), "S", 64, b"");
        match run(&mut w0, &snap, 0, &mut syn, 0) {
            Verdict::HandOver(WorkerId(1)) => {
                handed += 1;
                // The owner translates it; the reply's SNAT port names worker 1.
                assert!(matches!(
                    run(&mut w1, &snap, 0, &mut syn, 0),
                    Verdict::Transmit { .. }
                ));
                let p = wire::parse(&syn).unwrap();
                assert_eq!(p.src_port & 1, 1);
                let mut reply = tcp4(
                    (&p.dst.to_string(), 8080),
                    ("10.1.0.100", p.src_port),
                    "SA",
                    64,
                    b"",
                );
                assert_eq!(
                    run(&mut w0, &snap, 1, &mut reply, 1),
                    Verdict::HandOver(WorkerId(1))
                );
                assert!(matches!(
                    run(&mut w1, &snap, 1, &mut reply, 1),
                    Verdict::Transmit { port: 0, .. }
                ));
            }
            Verdict::Transmit { .. } => assert_eq!(wire::parse(&syn).unwrap().src_port & 1, 0),
            v => panic!("unexpected {v:?}"),
        }
    }
    assert!(
        handed > 10 && handed < 54,
        "client ports spread over both workers: {handed}"
    );
    // Counted by the I/O shell, which knows whether the ring took them.
    assert_eq!(w0.counters().handed_over.get(), 0);
}

#[test]
fn expiry_frees_snat_ports_and_entries() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    let snat = v4("10.1.0.100");
    let free0 = w.snat_ports().available(snat, Proto::Tcp);
    let mut syn = tcp4(("10.0.0.2", 40000), ("10.0.0.100", 80), "S", 64, b"");
    assert!(matches!(
        run(&mut w, &snap, 0, &mut syn, 0),
        Verdict::Transmit { .. }
    ));
    assert_eq!(w.snat_ports().available(snat, Proto::Tcp), free0 - 1);
    // Before the SYN timeout nothing expires; after it, everything does.
    let st = w.handle_tick(Tick(1_000), 10_000);
    assert_eq!(st.expired, 0);
    let st = w.handle_tick(Tick(3_600_000), 10_000);
    assert_eq!(st.expired, 1);
    assert_eq!(w.conntrack().len(), 0);
    assert_eq!(w.snat_ports().available(snat, Proto::Tcp), free0);
    assert_eq!(w.counters().conntrack_entries.get(), 0);
    assert_eq!(w.counters().conntrack_expirations.get(), 1);
}

/// A SYN-then-ACK that the backend never answered (a flood, or a client
/// whose SYN-ACK went elsewhere) holds its SNAT port for the 300 s
/// `tcp_established_unreplied`, not the 900 s established timeout; one the
/// backend answered keeps the established timeout.
#[test]
fn a_client_only_establishment_gives_its_snat_port_back_early() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    let snat = v4("10.1.0.100");
    let free0 = w.snat_ports().available(snat, Proto::Tcp);
    for (sport, answered) in [(40000, false), (40001, true)] {
        let mut syn = tcp4(("10.0.0.2", sport), ("10.0.0.100", 80), "S", 64, b"");
        assert!(matches!(
            run(&mut w, &snap, 0, &mut syn, 0),
            Verdict::Transmit { .. }
        ));
        if answered {
            let p = wire::parse(&syn).unwrap();
            let mut sa = tcp4(
                (&p.dst.to_string(), p.dst_port),
                (&p.src.to_string(), p.src_port),
                "SA",
                64,
                b"",
            );
            assert!(matches!(
                run(&mut w, &snap, 1, &mut sa, 1),
                Verdict::Transmit { .. }
            ));
        }
        let mut ack = tcp4(("10.0.0.2", sport), ("10.0.0.100", 80), "A", 64, b"");
        assert!(matches!(
            run(&mut w, &snap, 2, &mut ack, 0),
            Verdict::Transmit { .. }
        ));
    }
    let states = [40000, 40001].map(|sport| {
        let k =
            crate::flow::FlowKey::new((v4("10.0.0.2"), sport), (v4("10.0.0.100"), 80), Proto::Tcp).unwrap();
        w.conntrack().state(w.conntrack().lookup(&k).unwrap().0)
    });
    assert_eq!(
        states,
        [
            Some(ConnState::TcpEstablishedUnreplied),
            Some(ConnState::TcpEstablished)
        ]
    );
    assert_eq!(w.snat_ports().available(snat, Proto::Tcp), free0 - 2);
    assert_eq!(w.handle_tick(Tick(300_001), 1 << 20).expired, 0);
    assert_eq!(w.handle_tick(Tick(300_002), 1 << 20).expired, 1);
    assert_eq!(w.snat_ports().available(snat, Proto::Tcp), free0 - 1);
    assert_eq!(w.handle_tick(Tick(900_002), 1 << 20).expired, 1);
    assert_eq!(w.snat_ports().available(snat, Proto::Tcp), free0);
}

#[test]
fn local_answers_still_work() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    let b = etherparse::PacketBuilder::ethernet2(CLIENT_MAC, MAC0)
        .ipv4([10, 0, 0, 2], [10, 0, 0, 100], 64)
        .icmpv4_echo_request(7, 1);
    let mut ping = Vec::new();
    b.write(&mut ping, b"hello").unwrap();
    assert_eq!(
        run(&mut w, &snap, 0, &mut ping, 0),
        Verdict::Transmit {
            port: 0,
            len: ping.len()
        }
    );
    let p = wire::parse(&ping).unwrap();
    assert_eq!((p.src, p.dst, p.icmp_type), (v4("10.0.0.100"), v4("10.0.0.2"), 0));
    assert_checksums(&ping);
    // An ARP request for the port's address is answered back on it; the
    // asker's address and MAC go to the neighbor table only when the
    // snapshot has that neighbor at another MAC (the client 10.0.0.2 is
    // published at CLIENT_MAC).
    let arp_request = |ip: [u8; 4], mac: [u8; 6]| {
        let mut arp = Vec::new();
        etherparse::PacketBuilder::ethernet2(mac, [0xff; 6])
            .arp(
                etherparse::ArpPacket::new(
                    etherparse::ArpHardwareId::ETHERNET,
                    etherparse::EtherType::IPV4,
                    etherparse::ArpOperation::REQUEST,
                    &mac,
                    &ip,
                    &[0; 6],
                    &[10, 0, 0, 1],
                )
                .unwrap(),
            )
            .write(&mut arp)
            .unwrap();
        arp.resize(60, 0);
        arp
    };
    assert_eq!(snap.neighbor_mac(v4("10.0.0.2")), Some(CLIENT_MAC));
    let replies = w.counters().local_replies.get();
    let answer = Verdict::Transmit { port: 0, len: 60 };
    let mut arp = arp_request([10, 0, 0, 2], CLIENT_MAC);
    assert_eq!(run(&mut w, &snap, 0, &mut arp, 0), answer, "same MAC: no news");
    assert_eq!((&arp[..6], &arp[6..12]), (&CLIENT_MAC[..], &MAC0[..]));
    let mut arp = arp_request([10, 0, 0, 3], ROUTER_MAC);
    assert_eq!(
        run(&mut w, &snap, 0, &mut arp, 0),
        answer,
        "not a neighbor: no news"
    );
    // The client now asks from another NIC.
    let mut arp = arp_request([10, 0, 0, 2], ROUTER_MAC);
    assert_eq!(
        run(&mut w, &snap, 0, &mut arp, 0),
        Verdict::ReplyToNeighbor {
            len: 60,
            ip: v4("10.0.0.2"),
            mac: wire::MacAddr(ROUTER_MAC)
        }
    );
    assert_eq!(&arp[..6], &ROUTER_MAC[..]);
    assert_eq!(w.counters().local_replies.get(), replies + 3);
    // From the port prefix's broadcast address: no answer (no host asks
    // from it), and nothing learned.
    let mut arp = arp_request([10, 0, 0, 255], ROUTER_MAC);
    assert_eq!(
        run(&mut w, &snap, 0, &mut arp, 0),
        Verdict::Drop(DropReason::LocalUnhandled)
    );
    assert_eq!(w.counters().local_replies.get(), replies + 3);
    // TCP to an interface address that is not a frontend goes to the host.
    let mut bgp = tcp4(("10.0.0.2", 50000), ("10.0.0.1", 179), "S", 64, b"");
    assert_eq!(run(&mut w, &snap, 0, &mut bgp, 0), Verdict::ToHost);
}

/// A worker with four SNAT ports (TCP 2000-2003 on 10.1.0.100).
fn four_snat_ports() -> Worker {
    let mut cfg = WorkerConfig::new(WorkerId(0), 1);
    cfg.conntrack = conntrack::Config::new(1024, 16);
    cfg.snat_addresses = vec![v4("10.1.0.100")];
    cfg.snat_ports = 2000..=2003;
    cfg.frontend_slots = 8;
    cfg.backend_slots = 8;
    Worker::new(cfg).unwrap()
}

/// A full-NAT connection from `10.0.0.2:port` to web, established (SYN,
/// the backend's SYN-ACK, the client's ACK) at second `at`.
fn establish(w: &mut Worker, snap: &Snapshot, at: u64, port: u16) {
    let mut syn = tcp4(("10.0.0.2", port), ("10.0.0.100", 80), "S", 64, b"");
    assert!(matches!(
        run(w, snap, at * 1000, &mut syn, 0),
        Verdict::Transmit { .. }
    ));
    let p = wire::parse(&syn).unwrap();
    let mut synack = tcp4(
        (&p.dst.to_string(), 8080),
        ("10.1.0.100", p.src_port),
        "SA",
        64,
        b"",
    );
    assert!(matches!(
        run(w, snap, at * 1000, &mut synack, 1),
        Verdict::Transmit { .. }
    ));
    let mut ack = tcp4(("10.0.0.2", port), ("10.0.0.100", 80), "A", 64, b"");
    assert!(matches!(
        run(w, snap, at * 1000, &mut ack, 0),
        Verdict::Transmit { .. }
    ));
}

#[test]
fn snat_exhaustion_is_a_counted_drop() {
    let snap = snapshot();
    let mut w = four_snat_ports();
    for port in 0..4u16 {
        establish(&mut w, &snap, 0, 40000 + port);
    }
    // Every pair held by an established connection: none is taken back.
    for port in 4..10u16 {
        let mut syn = tcp4(("10.0.0.2", 40000 + port), ("10.0.0.100", 80), "S", 64, b"");
        assert_eq!(
            run(&mut w, &snap, 1000, &mut syn, 0),
            Verdict::Drop(DropReason::SnatExhausted)
        );
    }
    assert_eq!(w.counters().drops_of(DropReason::SnatExhausted), 6);
    assert_eq!(w.counters().conntrack_evictions.get(), 0);
    assert_eq!(w.conntrack().len(), 4);
}

/// Unanswered SYNs do not hold the pairs: with all in use, a new
/// connection takes the pair of one nobody answered (the first from the
/// reclaim hand), evicting it, but never an established one's.
#[test]
fn snat_pairs_of_unanswered_connections_are_taken_back() {
    let snap = snapshot();
    let mut w = four_snat_ports();
    establish(&mut w, &snap, 0, 39999);
    let mut used = std::collections::BTreeSet::new();
    // SNAT port -> the backend its last connection went to: a pair taken
    // back goes to another backend than its evicted connection's.
    let mut holder = std::collections::BTreeMap::new();
    for (i, port) in (40000..40010u16).enumerate() {
        let mut syn = tcp4(("10.0.0.9", port), ("10.0.0.100", 80), "S", 64, b"");
        let v = run(&mut w, &snap, 1000 + i as u64, &mut syn, 0);
        assert!(matches!(v, Verdict::Transmit { port: 1, .. }), "{v:?}");
        let p = wire::parse(&syn).unwrap();
        used.insert(p.src_port);
        if let Some(old) = holder.insert(p.src_port, p.dst) {
            assert_ne!(old, p.dst, "pair {} reused toward its old backend", p.src_port);
        }
        assert_eq!(w.conntrack().len(), (i + 2).min(4));
    }
    // Three pairs went round; the established connection kept its own.
    assert_eq!(used.len(), 3);
    assert_eq!(w.counters().conntrack_evictions.get(), 7);
    assert_eq!(w.conntrack().stats().evicted_embryonic, 7);
    assert_eq!(w.counters().drops_of(DropReason::SnatExhausted), 0);
    let mut ack = tcp4(("10.0.0.2", 39999), ("10.0.0.100", 80), "A", 64, b"more");
    assert!(matches!(
        run(&mut w, &snap, 2000, &mut ack, 0),
        Verdict::Transmit { .. }
    ));
    // The first unanswered SYN's connection is gone, its index with it.
    let first = tcp4(("10.0.0.9", 40000), ("10.0.0.100", 80), "S", 64, b"");
    assert_eq!(w.conntrack().lookup(&key_of(&first)), None);
    w.conntrack().check();
}

#[path = "reject_tests.rs"]
mod reject_tests;

#[cfg(test)]
#[path = "vlan_tests.rs"]
mod vlan_tests;

#[path = "orphan_tests.rs"]
mod orphan_tests;

#[path = "affinity_tests.rs"]
mod affinity_tests;

#[path = "mtu_tests.rs"]
mod mtu_tests;

#[path = "icmp_error_tests.rs"]
mod icmp_error_tests;

#[path = "route_tests.rs"]
mod route_tests;

#[path = "martian_tests.rs"]
mod martian_tests;
