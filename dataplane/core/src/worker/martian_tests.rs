//! New connections that no router would forward: from a source that names
//! no host or a link-local one (`martian_source`), or in a link-layer
//! broadcast or multicast frame (`link_broadcast`). Nothing is opened for
//! them, over either path, and the same packets from a host open. Packets
//! to a group or martian address lbd does not own are `not_unicast`, on
//! the worker that received them; to a connected prefix's broadcast
//! address, on the worker that owns that endpoint, where they miss.

use super::*;

/// `f`, sent to the Ethernet broadcast address.
fn broadcast(mut f: Vec<u8>) -> Vec<u8> {
    f[..6].fill(0xff);
    f
}

/// Each frame's verdict alone and in a burst of them all (the fast path
/// and the staged lookups), each from a fresh worker.
fn verdicts(snap: &Snapshot, frames: &[Vec<u8>]) -> (Vec<Verdict>, Vec<Verdict>) {
    let mut w = worker(1, 0);
    let one = frames
        .iter()
        .map(|f| run(&mut w, snap, 0, &mut f.clone(), 0))
        .collect();
    assert_eq!(w.conntrack().len(), 0, "nothing opened packet by packet");
    let mut w = worker(1, 0);
    let mut copies: Vec<Vec<u8>> = frames.to_vec();
    let metas = vec![meta(0); frames.len()];
    let mut burst = vec![Verdict::ToHost; frames.len()];
    w.handle_burst(Tick(0), snap, &mut copies, &metas, &mut burst);
    assert_eq!(w.conntrack().len(), 0, "nothing opened in a burst");
    (one, burst)
}

#[test]
fn martian_sources_open_nothing() {
    let snap = snapshot();
    let mut frames = Vec::new();
    for src in [
        "0.1.2.3",
        "127.0.0.1",
        "169.254.7.7",
        "224.0.0.5",
        "239.255.255.255",
        "255.255.255.255",
    ] {
        frames.push(tcp4((src, 40000), ("10.0.0.100", 80), "S", 64, b""));
        frames.push(udp4((src, 40000), ("10.0.0.101", 53), b"query"));
    }
    for src in [
        "::",
        "::1",
        "fe80::1",
        "ff02::1",
        "::ffff:10.0.0.2",
        "::ffff:127.0.0.1",
    ] {
        frames.push(tcp6((src, 40000), ("fd00::100", 80), "S", b""));
    }
    let (one, burst) = verdicts(&snap, &frames);
    for v in one.iter().chain(&burst) {
        assert_eq!(*v, Verdict::Drop(DropReason::MartianSource));
    }
}

#[test]
fn link_broadcast_frames_open_nothing() {
    let snap = snapshot();
    let frames = vec![
        broadcast(tcp4(("10.0.0.2", 40000), ("10.0.0.100", 80), "S", 64, b"")),
        broadcast(udp4(("10.0.0.2", 40000), ("10.0.0.101", 53), b"query")),
        broadcast(tcp6(("fd00::2", 40000), ("fd00::100", 80), "S", b"")),
    ];
    let (one, burst) = verdicts(&snap, &frames);
    for v in one.iter().chain(&burst) {
        assert_eq!(*v, Verdict::Drop(DropReason::LinkBroadcast));
    }
    // A multicast MAC is a group too.
    let mut f = tcp4(("10.0.0.2", 40000), ("10.0.0.100", 80), "S", 64, b"");
    f[..6].copy_from_slice(&[0x01, 0x00, 0x5e, 0, 0, 1]);
    let (one, _) = verdicts(&snap, &[f]);
    assert_eq!(one, vec![Verdict::Drop(DropReason::LinkBroadcast)]);
}

#[test]
fn the_same_packets_from_a_host_open() {
    let snap = snapshot();
    let frames = vec![
        tcp4(("10.0.0.2", 40000), ("10.0.0.100", 80), "S", 64, b""),
        udp4(("169.253.0.1", 40000), ("10.0.0.101", 53), b"query"),
        tcp4(("223.255.255.254", 40000), ("10.0.0.100", 80), "S", 64, b""),
        // 240/4 is a host's, as on Linux (Kubernetes pod ranges use it).
        tcp4(("240.0.0.1", 40000), ("10.0.0.100", 80), "S", 64, b""),
        tcp4(("255.255.255.254", 40000), ("10.0.0.100", 80), "S", 64, b""),
        tcp6(("fd00::2", 40000), ("fd00::100", 80), "S", b""),
        tcp6(("fec0::1", 40000), ("fd00::100", 80), "S", b""),
    ];
    let mut w = worker(1, 0);
    for f in &frames {
        let v = run(&mut w, &snap, 0, &mut f.clone(), 0);
        assert!(matches!(v, Verdict::Transmit { port: 1, .. }), "{v:?}");
    }
    assert_eq!(w.conntrack().len(), frames.len());
    // And in a burst (the fast path's own martian check).
    let mut w = worker(1, 0);
    let mut copies = frames.clone();
    let metas = vec![meta(0); frames.len()];
    let mut burst = vec![Verdict::ToHost; frames.len()];
    w.handle_burst(Tick(0), &snap, &mut copies, &metas, &mut burst);
    assert!(
        burst
            .iter()
            .all(|v| matches!(v, Verdict::Transmit { port: 1, .. })),
        "{burst:?}"
    );
    assert_eq!(w.conntrack().len(), frames.len());
}

/// `proto` (no L4 header lbd reads) from `src` to `dst`, 8 bytes of payload.
fn ip4_raw(src: &str, dst: &str, proto: u8) -> Vec<u8> {
    let (s, d): (Ipv4Addr, Ipv4Addr) = (src.parse().unwrap(), dst.parse().unwrap());
    let mut out = Vec::new();
    etherparse::PacketBuilder::ethernet2(CLIENT_MAC, MAC0)
        .ipv4(s.octets(), d.octets(), 1)
        .write(
            &mut out,
            etherparse::IpNumber(proto),
            &[0x11, 0, 0xee, 0x9b, 0, 0, 0, 0],
        )
        .unwrap();
    out
}

fn udp6(src: (&str, u16), dst: (&str, u16)) -> Vec<u8> {
    let (s, d): (Ipv6Addr, Ipv6Addr) = (src.0.parse().unwrap(), dst.0.parse().unwrap());
    let mut out = Vec::new();
    etherparse::PacketBuilder::ethernet2(CLIENT_MAC, MAC0)
        .ipv6(s.octets(), d.octets(), 64)
        .udp(src.1, dst.1)
        .write(&mut out, b"mdns")
        .unwrap();
    out
}

fn echo4(dst: &str) -> Vec<u8> {
    echo4_from("10.0.0.2", dst)
}

fn echo4_from(src: &str, dst: &str) -> Vec<u8> {
    let (s, d): (Ipv4Addr, Ipv4Addr) = (src.parse().unwrap(), dst.parse().unwrap());
    let mut out = Vec::new();
    etherparse::PacketBuilder::ethernet2(CLIENT_MAC, MAC0)
        .ipv4(s.octets(), d.octets(), 64)
        .icmpv4_echo_request(1, 1)
        .write(&mut out, b"ping")
        .unwrap();
    out
}

/// Service discovery, IGMP, pings to groups and traffic to martian
/// addresses are `not_unicast` on whichever worker gets them: none is
/// handed over, none counts as a reply of no connection.
#[test]
fn group_and_martian_destinations_are_not_unicast() {
    let snap = snapshot();
    let frames = vec![
        udp4(("10.0.0.2", 68), ("255.255.255.255", 67), b"dhcp"),
        udp4(("10.0.0.2", 5353), ("224.0.0.251", 5353), b"mdns"),
        udp4(("10.0.0.2", 40000), ("239.255.255.250", 1900), b"ssdp"),
        udp4(("10.0.0.2", 40000), ("127.0.0.1", 53), b"loop"),
        udp4(("10.0.0.2", 40000), ("0.1.2.3", 53), b"this net"),
        udp4(("10.0.0.2", 40000), ("0.0.0.0", 53), b"unspecified"),
        tcp4(("10.0.0.2", 40000), ("224.0.0.9", 80), "S", 64, b""),
        tcp4(("10.0.0.2", 40000), ("224.0.0.9", 80), "A", 64, b""),
        ip4_raw("10.0.0.2", "224.0.0.1", 2), // IGMP
        echo4("224.0.0.1"),
        udp6(("fd00::2", 5353), ("ff02::fb", 5353)),
        udp6(("fd00::2", 40000), ("::ffff:10.0.0.100", 80)),
        tcp6(("fd00::2", 40000), ("::1", 80), "S", b""),
    ];
    for n in [1, 2] {
        for id in 0..n {
            let mut w = worker(n, id);
            for f in &frames {
                let v = run(&mut w, &snap, 0, &mut f.clone(), 0);
                assert_eq!(
                    v,
                    Verdict::Drop(DropReason::NotUnicast),
                    "worker {id} of {n}: {f:02x?}"
                );
            }
            let mut copies = frames.clone();
            let metas = vec![meta(0); frames.len()];
            let mut burst = vec![Verdict::ToHost; frames.len()];
            w.handle_burst(Tick(0), &snap, &mut copies, &metas, &mut burst);
            assert!(
                burst.iter().all(|v| *v == Verdict::Drop(DropReason::NotUnicast)),
                "{burst:?}"
            );
            let c = w.counters();
            assert_eq!(c.drops_of(DropReason::NotUnicast), 2 * frames.len() as u64);
            assert_eq!(c.drops_of(DropReason::NoConntrackReply), 0);
        }
    }
    // Unicast twins keep their reasons: a reply of no connection, a ping
    // through lbd, a protocol lbd does not balance to its own address.
    let mut w = worker(1, 0);
    for (mut f, reason) in [
        (
            udp4(("10.0.0.2", 40000), ("10.9.9.9", 53), b"x"),
            DropReason::NoConntrackReply,
        ),
        // 240/4 is a host's.
        (
            udp4(("10.0.0.2", 40000), ("240.0.0.9", 53), b"x"),
            DropReason::NoConntrackReply,
        ),
        (echo4("10.9.9.9"), DropReason::NoFrontend),
        (
            ip4_raw("10.0.0.2", "10.0.0.100", 2),
            DropReason::UnsupportedProtocol,
        ),
    ] {
        assert_eq!(run(&mut w, &snap, 0, &mut f, 0), Verdict::Drop(reason));
    }
}

/// The broadcast addresses of the connected prefixes (10.0.0.255 on port 0,
/// 10.1.0.255 on port 1): no connection is opened from them (a
/// backend's answer would go to the whole prefix), and what is sent to
/// them (NetBIOS, Wake-on-LAN, a broadcast ping) is `not_unicast`, not
/// a reply of no connection. A prefix without one (/31, /32) and prefixes
/// that are not connected have hosts there.
#[test]
fn directed_broadcasts_are_no_hosts() {
    let snap = snapshot_with(|b| {
        b.interface(1, MAC1, Cidr::new(v4("10.2.0.0"), 31).unwrap(), None);
        b.interface(1, MAC1, Cidr::new(v4("10.3.0.7"), 32).unwrap(), None);
        b.interface(1, MAC1, Cidr::new(v4("10.4.0.1"), 30).unwrap(), None);
    });
    for (a, broadcast) in [
        ("10.0.0.255", true),
        ("10.1.0.255", true),
        ("10.4.0.3", true),
        ("10.0.0.254", false),
        ("10.0.0.0", false),
        ("10.2.0.1", false),
        ("10.3.0.7", false),
        ("10.4.0.2", false),
        ("10.7.0.255", false),
        ("fd00::ffff:ffff:ffff:ffff", false),
    ] {
        assert_eq!(snap.is_directed_broadcast(v4(a)), broadcast, "{a}");
    }
    let frames = vec![
        tcp4(("10.0.0.255", 40000), ("10.0.0.100", 80), "S", 64, b""),
        udp4(("10.0.0.255", 40000), ("10.0.0.101", 53), b"query"),
        udp4(("10.1.0.255", 40000), ("10.0.0.101", 53), b"query"),
    ];
    let (one, burst) = verdicts(&snap, &frames);
    for v in one.iter().chain(&burst) {
        assert_eq!(*v, Verdict::Drop(DropReason::MartianSource));
    }
    // To them: dropped by the worker that owns the endpoint (handed over
    // by the others, as a reply would be), fast path or not.
    let to = [
        udp4(("10.0.0.2", 138), ("10.0.0.255", 138), b"netbios"),
        udp4(("10.1.0.11", 40000), ("10.1.0.255", 9), b"wake on lan"),
        tcp4(("10.0.0.2", 40000), ("10.0.0.255", 80), "A", 64, b""),
    ];
    for n in [1, 2] {
        for id in 0..n {
            let mut w = worker(n, id);
            for f in &to {
                let v = run(&mut w, &snap, 0, &mut f.clone(), 0);
                let mut burst = [Verdict::ToHost];
                w.handle_burst(
                    Tick(0),
                    &snap,
                    std::slice::from_mut(&mut f.clone()),
                    &[meta(0)],
                    &mut burst,
                );
                assert_eq!(v, burst[0]);
                let dst = (
                    v4(&format!("10.{}.0.255", f[31])),
                    u16::from_be_bytes([f[36], f[37]]),
                );
                if crate::flow::owner_of_client(dst.0, dst.1, n).0 == id {
                    assert_eq!(v, Verdict::Drop(DropReason::NotUnicast), "worker {id} of {n}");
                } else {
                    assert!(matches!(v, Verdict::HandOver(_)), "{v:?}");
                }
            }
            assert_eq!(w.counters().drops_of(DropReason::NoConntrackReply), 0);
        }
    }
    let mut w = worker(1, 0);
    assert_eq!(
        run(&mut w, &snap, 0, &mut echo4("10.0.0.255"), 0),
        Verdict::Drop(DropReason::NotUnicast)
    );
    // Nothing is answered to them either: no echo reply, no RST for a
    // VIP port without a frontend (a host gets both).
    for (src, answered) in [("10.0.0.255", false), ("10.1.0.255", false), ("10.0.0.2", true)] {
        let v = run(&mut w, &snap, 0, &mut echo4_from(src, "10.0.0.1"), 0);
        match answered {
            true => assert!(matches!(v, Verdict::Transmit { port: 0, .. }), "{v:?}"),
            false => assert_eq!(v, Verdict::Drop(DropReason::LocalUnhandled), "{src}"),
        }
        let mut f = tcp4((src, 40000), ("10.0.0.100", 81), "S", 64, b"");
        let v = run(&mut w, &snap, 0, &mut f, 0);
        match answered {
            true => assert!(matches!(v, Verdict::Transmit { port: 0, .. }), "{v:?}"),
            false => assert_eq!(v, Verdict::Drop(DropReason::NoFrontend), "{src}"),
        }
    }
    assert_eq!(w.counters().resets_sent.get(), 1);
    assert_eq!(w.counters().local_replies.get(), 1);
    // Nor through one: a request whose spent source route sends the reply
    // back by 10.0.0.255 (by 10.0.0.254, a host, it is answered).
    for (hop, answered) in [(255, false), (254, true)] {
        let mut f = echo4_from("10.0.0.2", "10.0.0.1");
        // Loose source route, one hop recorded, then end of options.
        f.splice(34..34, [0x83, 7, 8, 10, 0, 0, hop, 0]);
        f[14] = 0x47;
        let total = u16::from_be_bytes([f[16], f[17]]) + 8;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f[24..26].fill(0);
        let sum = f[14..42]
            .chunks(2)
            .fold(0u32, |s, w| s + u32::from(u16::from_be_bytes([w[0], w[1]])));
        let sum = (sum & 0xffff) + (sum >> 16);
        f[24..26].copy_from_slice(&(!(((sum & 0xffff) + (sum >> 16)) as u16)).to_be_bytes());
        let v = run(&mut w, &snap, 0, &mut f, 0);
        match answered {
            true => assert!(matches!(v, Verdict::Transmit { port: 0, .. }), "{v:?}"),
            false => assert_eq!(v, Verdict::Drop(DropReason::LocalUnhandled)),
        }
    }
    // Hosts: they open, and a packet to one that misses is a reply of no
    // connection.
    let hosts = [
        tcp4(("10.0.0.254", 40000), ("10.0.0.100", 80), "S", 64, b""),
        tcp4(("10.2.0.1", 40000), ("10.0.0.100", 80), "S", 64, b""),
        tcp4(("10.7.0.255", 40000), ("10.0.0.100", 80), "S", 64, b""),
    ];
    for f in &hosts {
        let v = run(&mut w, &snap, 0, &mut f.clone(), 0);
        assert!(matches!(v, Verdict::Transmit { port: 1, .. }), "{v:?}");
    }
    assert_eq!(w.conntrack().len(), hosts.len());
    let mut f = udp4(("10.0.0.2", 138), ("10.0.0.254", 138), b"netbios");
    assert_eq!(
        run(&mut w, &snap, 0, &mut f, 0),
        Verdict::Drop(DropReason::NoConntrackReply)
    );
}

/// A SYN that would reopen a connection in TIME_WAIT, sent in a broadcast
/// frame, is dropped before it ends that connection: the entry, its
/// backend and its SNAT pair stay; the same SYN in a unicast frame reopens
/// it.
#[test]
fn a_broadcast_syn_ends_no_closing_connection() {
    let snap = snapshot();
    let mut w = worker(1, 0);
    let (client, vip) = (TW_CLIENT, TW_VIP);
    let (_, key, id) = in_time_wait(&mut w, &snap);
    for burst in [false, true] {
        let mut f = broadcast(tcp4(client, vip, "S", 64, b""));
        let v = if burst {
            let mut out = [Verdict::ToHost];
            w.handle_burst(
                Tick(20),
                &snap,
                std::slice::from_mut(&mut f),
                &[meta(0)],
                &mut out,
            );
            out[0]
        } else {
            run(&mut w, &snap, 20, &mut f, 0)
        };
        assert_eq!(v, Verdict::Drop(DropReason::LinkBroadcast), "burst {burst}");
        assert_eq!(
            w.conntrack().lookup(&key),
            Some((id, crate::conntrack::Direction::Original))
        );
        assert_eq!(w.conntrack().state(id), Some(ConnState::TcpTimeWait));
    }
    assert_eq!(w.counters().conntrack_expirations.get(), 0);
    assert_eq!(w.counters().new_connections.get(), 1);
    let mut f = tcp4(client, vip, "S", 64, b"");
    assert!(matches!(
        run(&mut w, &snap, 20, &mut f, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    assert_eq!(w.counters().conntrack_expirations.get(), 1);
    assert_eq!(w.counters().new_connections.get(), 2);
}
