//! Proves the pipeline's per-packet promise: after the snapshot, the
//! worker and every frame are built, 100k packets through
//! `Worker::handle_packet` and the `handle_tick`s (and `end_orphaned_udp`)
//! between them allocate and free nothing.
//!
//! The mix: new full-NAT and DNAT flows (TCP and UDP, IPv4 and IPv6),
//! established traffic, backend replies (full-NAT replies are made from the
//! translated SYN by swapping its endpoints in place, since the SNAT port is
//! the worker's choice), ARP and echo for a VIP, drops of many kinds, ICMP
//! errors quoting tracked and untracked flows, hand-overs (worker 0 of 2),
//! and ticks that expire connections, replies held for an unresolved
//! on-link client (`Resolve`) and replies with no route (`no_route`).
//! Small conntrack capacities make
//! eviction and `conntrack_full`/stateless forwarding happen too.
//!
//! The counting allocator comes from `stats_alloc`, because the workspace
//! lints forbid a hand-written `GlobalAlloc` implementation in this crate,
//! tests included. It counts every thread's allocations, so the test runs
//! without libtest (`harness = false`, see `solo`), alone on the process's
//! only thread.

#[path = "golden/fixture.rs"]
mod fixture;
#[path = "golden/pkt.rs"]
mod pkt;
mod solo;

use std::alloc::System;

use etherparse::{icmpv4::DestUnreachableHeader, Icmpv4Type, Icmpv6Type};
use fixture::*;
use lb_dataplane::worker::{PacketMeta, Verdict};
use lb_dataplane::{DropReason, Tick};
use pkt::{Arp, Pkt};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Client ports per flow kind: the distinct flows of the run.
const FLOWS: u16 = 1500;

/// Frame templates, grouped by what they exercise.
struct Frames {
    /// Client → full-NAT VIP SYNs (TCP v4/v6) and datagrams (UDP v4).
    fullnat_new: Vec<Vec<u8>>,
    /// Client → DNAT VIP SYNs (TCP v4/v6) and queries (UDP v4/v6).
    dnat_new: Vec<Vec<u8>>,
    /// Established client data (ACK + payload) on the same tuples.
    established: Vec<Vec<u8>>,
    /// DNAT backend replies (predictable: client address kept).
    dnat_replies: Vec<Vec<u8>>,
    /// ARP and echo to a VIP.
    local: Vec<Vec<u8>>,
    /// Packets that must be dropped, each for its own reason.
    drops: Vec<Vec<u8>>,
    /// ICMP errors quoting DNAT flows (tracked or not by then).
    icmp_errors: Vec<Vec<u8>>,
}

fn ep(a: &'static str, p: u16) -> pkt::Ep {
    (a, p)
}

fn build_frames() -> Frames {
    let c = |p: Pkt| p.macs(CLIENT_MAC, MAC0).frame();
    let b = |p: Pkt| p.macs(BACKEND_MAC, MAC1).frame();
    let mut f = Frames {
        fullnat_new: Vec::new(),
        dnat_new: Vec::new(),
        established: Vec::new(),
        dnat_replies: Vec::new(),
        local: Vec::new(),
        drops: Vec::new(),
        icmp_errors: Vec::new(),
    };
    let frag = DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1400 };
    for i in 0..FLOWS {
        let port = 10000 + i;
        f.fullnat_new
            .push(c(Pkt::tcp(ep(C4, port), ep("10.0.0.100", 80), "S")));
        f.fullnat_new
            .push(c(Pkt::tcp(ep(C6, port), ep("fd00::100", 80), "S")));
        f.fullnat_new
            .push(c(Pkt::udp(ep(C4, port), ep("10.0.0.103", 514), b"log")));
        f.dnat_new
            .push(c(Pkt::tcp(ep(C4, port), ep("10.0.0.101", 80), "S")));
        f.dnat_new
            .push(c(Pkt::tcp(ep(C6, port), ep("fd00::101", 80), "S")));
        f.dnat_new
            .push(c(Pkt::udp(ep(C4, port), ep("10.0.0.102", 53), b"query")));
        f.dnat_new
            .push(c(Pkt::udp(ep(C6, port), ep("fd00::102", 53), b"query")));
        // Client-IP affinity: pins made, used and refreshed.
        f.dnat_new
            .push(c(Pkt::tcp(ep(C4, port), ep("10.0.0.107", 80), "S")));
        f.dnat_new
            .push(c(Pkt::tcp(ep(C6, port), ep("fd00::107", 80), "S")));
        let data = b"GET / HTTP/1.1\r\n\r\n";
        f.established
            .push(c(Pkt::tcp(ep(C4, port), ep("10.0.0.100", 80), "AP").payload(data)));
        f.established
            .push(c(Pkt::tcp(ep(C4, port), ep("10.0.0.101", 80), "AP").payload(data)));
        f.established
            .push(c(Pkt::tcp(ep(C6, port), ep("fd00::101", 80), "AP").payload(data)));
        f.dnat_replies
            .push(b(Pkt::tcp(ep("10.1.0.12", 8080), ep(C4, port), "SA")));
        f.dnat_replies
            .push(b(Pkt::tcp(ep("fd01::12", 8080), ep(C6, port), "SA")));
        f.dnat_replies
            .push(b(Pkt::udp(ep("10.1.0.13", 5353), ep(C4, port), b"answer")));
        if i % 4 == 0 {
            // 10.0.0.77 is on-link without a neighbor entry (Resolve);
            // 2001:db8::7 is off-link with no IPv6 gateway (no_route).
            for (client, be) in [("10.0.0.77", "10.1.0.12"), ("2001:db8::7", "fd01::12")] {
                let vip = if be.contains(':') {
                    "fd00::101"
                } else {
                    "10.0.0.101"
                };
                f.dnat_new.push(c(Pkt::tcp(ep(client, port), ep(vip, 80), "S")));
                f.dnat_replies
                    .push(b(Pkt::tcp(ep(be, 8080), ep(client, port), "SA")));
            }
        }
        if i % 8 == 0 {
            // The packet the balancer sent to the backend, as quoted by a
            // router on the backend side.
            let sent = Pkt::tcp(ep(C4, port), ep("10.1.0.12", 8080), "S").ttl(63);
            let e = Pkt::icmp4(
                "10.1.0.254",
                C4,
                Icmpv4Type::DestinationUnreachable(frag.clone()),
                sent.ip_bytes(),
            );
            f.icmp_errors.push(b(e));
            let sent = Pkt::tcp(ep(C6, port), ep("fd01::12", 8080), "S").ttl(63);
            let e = Pkt::icmp6(
                "fd01::fe",
                C6,
                Icmpv6Type::PacketTooBig { mtu: 1280 },
                sent.ip_bytes(),
            );
            f.icmp_errors.push(b(e));
        }
    }
    let arp = |target: &'static str| {
        Arp {
            src_mac: CLIENT_MAC,
            dst_mac: [0xff; 6],
            vlan: None,
            reply: false,
            sender: (CLIENT_MAC, C4),
            target: ([0; 6], target),
            pad: 18,
        }
        .frame()
    };
    f.local.push(arp("10.0.0.100"));
    f.local.push(c(Pkt::echo(C4, "10.0.0.100", false, 7, 1, b"ping")));
    f.local.push(c(Pkt::echo(C6, "fd00::100", false, 7, 1, b"ping")));
    f.drops.push(arp("10.0.0.50"));
    // Several client ports each, so that some belong to this worker.
    for p in 1..=8 {
        // TCP to a VIP port without frontend gets a RST; UDP is dropped.
        f.drops.push(c(Pkt::tcp(ep(C4, p), ep("10.0.0.100", 81), "S")));
        f.drops.push(c(Pkt::udp(ep(C4, p), ep("10.0.0.100", 81), b"x")));
        f.drops.push(c(Pkt::tcp(ep(C4, p), ep("10.0.0.100", 80), "A")));
        f.drops
            .push(c(Pkt::tcp(ep(C4, p), ep("10.0.0.100", 80), "S").ttl(1)));
        f.drops.push(c(Pkt::tcp(ep(C6, p), ep("fd00::104", 80), "S")));
        f.drops.push(c(Pkt::tcp(ep(C4, p), ep("10.0.0.105", 80), "S")));
        // A closed port of a VIP whose services all deny the client: no RST.
        f.drops.push(c(Pkt::tcp(ep(C4, p), ep("10.0.0.105", 81), "S")));
        f.drops.push(c(Pkt::tcp(ep(C6, p), ep("fd00::105", 81), "S")));
    }
    f.drops
        .push(b(Pkt::tcp(ep("10.1.0.11", 8080), ep(SNAT4, 40000), "SA")));
    f.drops.push(c(
        Pkt::udp(ep(C4, 1), ep("10.0.0.102", 53), &[1; 64]).frag(pkt::Frag::Last { offset: 32 })
    ));
    f.drops.push(vec![0u8; 10]);
    f.drops.push(vec![0xffu8; 60]);
    f
}

/// Turns a translated full-NAT packet (SNAT:s → B:b, as sent to the
/// backend) into the backend's answer (B:b → SNAT:s), in place. Swapping
/// addresses and ports changes no checksum (the one's-complement sum is
/// commutative).
fn swap_into_reply(frame: &mut [u8]) {
    frame.copy_within(0..6, 6); // dst MAC := our MAC (was src)
    let (l3, v4) = match u16::from_be_bytes([frame[12], frame[13]]) {
        0x0800 => (14, true),
        _ => (14, false),
    };
    let (a, n, l4) = if v4 {
        (l3 + 12, 4, l3 + usize::from(frame[l3] & 0x0f) * 4)
    } else {
        (l3 + 8, 16, l3 + 40)
    };
    for k in 0..n {
        frame.swap(a + k, a + n + k);
    }
    for k in 0..2 {
        frame.swap(l4 + k, l4 + 2 + k);
    }
    frame[..6].copy_from_slice(&BACKEND_MAC);
}

fn main() {
    solo::run(
        "hundred_thousand_packets_allocate_nothing",
        hundred_thousand_packets_allocate_nothing,
    );
}

fn hundred_thousand_packets_allocate_nothing() {
    let snap = Fixture::TwoPort.snapshot();
    let mut w = Setup {
        n_workers: 2,
        id: 0,
        conntrack_v4: 1024,
        conntrack_v6: 256,
        ..Setup::default()
    }
    .worker();
    let frames = build_frames();
    let mut buf = [0u8; 512];
    let mut reply = [0u8; 512];
    // transmit, drop, hand-over, neighbor, host, replies sent, resolve
    let mut counts = [0u64; 7];
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut now = 0u64;
    let meta0 = PacketMeta {
        port: 0,
        offload: Default::default(),
    };
    let meta1 = PacketMeta {
        port: 1,
        offload: Default::default(),
    };

    // The counter counts: one deliberate allocation is seen.
    let probe = Region::new(GLOBAL);
    drop(std::hint::black_box(vec![0u8; 64]));
    assert_eq!(
        probe.change().allocations,
        1,
        "the counting allocator is installed"
    );

    let region = Region::new(GLOBAL);
    for n in 0..100_000u32 {
        now += 2;
        let r = xorshift(&mut rng);
        let pick = |v: &Vec<Vec<u8>>| (r >> 20) as usize % v.len();
        let (set, meta) = match r % 32 {
            0..=7 => (&frames.fullnat_new, &meta0),
            8..=13 => (&frames.dnat_new, &meta0),
            14..=19 => (&frames.established, &meta0),
            20..=24 => (&frames.dnat_replies, &meta1),
            25..=26 => (&frames.local, &meta0),
            27..=29 => (&frames.drops, &meta0),
            _ => (&frames.icmp_errors, &meta1),
        };
        let t = &set[pick(set)];
        let frame = &mut buf[..t.len()];
        frame.copy_from_slice(t);
        let v = w.handle_packet(Tick(now), snap, frame, meta);
        let full_nat_syn = std::ptr::eq(set, &frames.fullnat_new);
        match v {
            Verdict::Transmit { port: 1, len } if full_nat_syn => {
                counts[0] += 1;
                // The backend answers the SNAT endpoint.
                let rep = &mut reply[..len];
                rep.copy_from_slice(&buf[..len]);
                swap_into_reply(rep);
                if let Verdict::Transmit { port: 0, .. } = w.handle_packet(Tick(now + 1), snap, rep, &meta1) {
                    counts[5] += 1;
                }
            }
            Verdict::Transmit { .. } | Verdict::ReplyToNeighbor { .. } => counts[0] += 1,
            Verdict::Drop(_) => counts[1] += 1,
            Verdict::HandOver(_) => counts[2] += 1,
            Verdict::Neighbor { .. } => counts[3] += 1,
            Verdict::ToHost => counts[4] += 1,
            Verdict::Resolve { .. } => counts[6] += 1,
        }
        if n % 64 == 0 {
            // Now and then far ahead, so that connections expire.
            let at = if n % 8192 == 0 { now + 10_000_000 } else { now };
            w.handle_tick(Tick(at), 512);
            // Its first lap (the snapshot is new to the worker) looks up
            // every UDP entry's frontend and backend.
            w.end_orphaned_udp(snap, 512);
            if n % 8192 == 0 {
                now += 10_000_000;
            }
        }
    }
    let stats = region.change();
    assert_eq!(stats.allocations, 0, "{stats:?}");
    assert_eq!(stats.deallocations, 0, "{stats:?}");
    assert_eq!(stats.reallocations, 0, "{stats:?}");

    // The run exercised what it claims to.
    let c = w.counters();
    let [tx, drops, handed, _, _, replies, resolves] = counts;
    assert!(tx > 20_000 && drops > 5_000 && handed > 10_000, "{counts:?}");
    assert!(replies > 1_000, "full-NAT replies translated: {counts:?}");
    assert!(resolves > 10, "replies held for an unresolved client: {counts:?}");
    assert!(c.new_connections.get() > 5_000, "{}", c.new_connections.get());
    // Pins made (the client of each family), then used and refreshed.
    let pins = (c.affinity_pins.get(), c.affinity_hits.get());
    assert!(
        pins.0 >= 2 && pins.1 > 1_000,
        "(affinity_pins, affinity_hits) = {pins:?}"
    );
    assert!(c.local_replies.get() > 1_000);
    assert!(c.conntrack_expirations.get() > 1_000);
    for reason in [
        DropReason::Truncated,
        DropReason::ArpNotForUs,
        DropReason::NoFrontend,
        DropReason::TcpNotSyn,
        DropReason::TtlExceeded,
        DropReason::NoBackend,
        DropReason::SourceRangeDenied,
        DropReason::NoConntrackReply,
        DropReason::Fragment,
        DropReason::IcmpErrorUntracked,
        DropReason::NoRoute,
    ] {
        assert!(
            c.drops_of(reason) > 0,
            "no {reason:?}: {:?}",
            c.nonzero_drops().collect::<Vec<_>>()
        );
    }
}
