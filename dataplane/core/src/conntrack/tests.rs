//! Tests of [`Conntrack`] on a simulated clock: time is whatever `Tick` the
//! test passes in.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::tcp_flags::{ACK, FIN, RST, SYN};
use super::*;
use crate::flow::{owner_of_client, owner_of_snat_port, Proto, SnatPorts, WorkerId};
use crate::prefetch::Loads;

pub(super) const S: u64 = 1000;

pub(super) fn ip(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

pub(super) fn key(client: (IpAddr, u16), vip: (IpAddr, u16), proto: Proto) -> FlowKey {
    FlowKey::new(client, vip, proto).unwrap()
}

pub(super) fn client(n: u16) -> (IpAddr, u16) {
    (ip(10, 0, (n >> 8) as u8, n as u8), 40000 + n)
}

pub(super) const VIP: (IpAddr, u16) = (IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 80);
pub(super) const BACKEND: (IpAddr, u16) = (IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1)), 8080);
pub(super) const SNAT: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1));

pub(super) fn table(cap4: u32, cap6: u32) -> Conntrack {
    Conntrack::new(Config {
        hash_seed: 0x5eed,
        ..Config::new(cap4, cap6)
    })
    .unwrap()
}

pub(super) fn dnat() -> Nat {
    Nat::Dnat { backend: BACKEND }
}

fn ins(ct: &mut Conntrack, k: FlowKey, nat: Nat, now: u64) -> Result<EntryId, InsertError> {
    ct.insert(
        k,
        nat,
        Tags {
            frontend: 1,
            backend: 2,
        },
        Tick(now),
        |_| panic!("nothing to evict"),
    )
}

#[test]
fn bytes_per_connection_fit_the_budget() {
    use core::mem::align_of;
    use core::mem::size_of;
    // One cache line per IPv4 entry.
    assert_eq!(size_of::<table::Slot<[u8; 4]>>(), 64);
    assert_eq!(align_of::<table::Slot<[u8; 4]>>(), 64);
    assert_eq!(size_of::<table::Slot<[u8; 16]>>(), 128);
    assert_eq!(size_of::<table::IdxSlot>(), 8);
    let v4 = size_of::<table::Slot<[u8; 4]>>() + table::INDEX_SLOTS_PER_ENTRY * size_of::<table::IdxSlot>();
    assert_eq!(Conntrack::BYTES_PER_CONN_V4, v4);
    assert_eq!(Conntrack::BYTES_PER_CONN_V4, 96, "documented in the module docs");
    assert_eq!(Conntrack::BYTES_PER_CONN_V6, 160, "documented in the module docs");
}

#[test]
fn dnat_insert_then_lookup_both_directions() {
    let mut ct = table(16, 16);
    let k = key(client(1), VIP, Proto::Tcp);
    let id = ins(&mut ct, k, dnat(), 0).unwrap();
    assert_eq!(ct.lookup(&k), Some((id, Direction::Original)));
    // The backend answers the client directly: backend -> client.
    let reply = key(BACKEND, client(1), Proto::Tcp);
    assert_eq!(ct.lookup(&reply), Some((id, Direction::Reply)));
    assert_eq!(
        ct.lookup(&k.reversed()),
        None,
        "VIP -> client is not what the backend sends"
    );
    let e = ct.get(id).unwrap();
    assert_eq!((e.original, e.nat, e.reply()), (k, dnat(), reply));
    assert_eq!(
        e.tags,
        Tags {
            frontend: 1,
            backend: 2
        }
    );
    assert_eq!(e.state, ConnState::TcpSynSent);
    assert_eq!(e.expires, Tick(60 * S));
    assert_eq!(
        ct.rewrite(id, Direction::Original),
        Some(Rewrite {
            src: client(1),
            dst: BACKEND
        })
    );
    assert_eq!(
        ct.rewrite(id, Direction::Reply),
        Some(Rewrite {
            src: VIP,
            dst: client(1)
        })
    );
    ct.check();
}

#[test]
fn full_nat_reply_tuple_is_backend_to_snat() {
    let mut ct = table(16, 16);
    let k = key(client(1), VIP, Proto::Udp);
    let nat = Nat::FullNat {
        backend: BACKEND,
        snat: (SNAT, 2049),
    };
    let id = ins(&mut ct, k, nat, 0).unwrap();
    let reply = key(BACKEND, (SNAT, 2049), Proto::Udp);
    assert_eq!(ct.lookup(&reply), Some((id, Direction::Reply)));
    assert_eq!(ct.lookup(&key(BACKEND, client(1), Proto::Udp)), None);
    assert_eq!(ct.nat(id), Some(nat));
    assert_eq!(ct.get(id).unwrap().reply(), reply);
    assert_eq!(
        ct.rewrite(id, Direction::Original),
        Some(Rewrite {
            src: (SNAT, 2049),
            dst: BACKEND
        })
    );
    assert_eq!(
        ct.rewrite(id, Direction::Reply),
        Some(Rewrite {
            src: VIP,
            dst: client(1)
        })
    );
}

#[test]
fn full_nat_replies_in_snat_port_cells_in_both_families() {
    let snat6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x5a));
    let backend6 = (IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 9)), 8080);
    let vip6 = (IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 1)), 80);
    // Worker 1 of 4: its SNAT ports have `port & 3 == 1`.
    let mut pool = SnatPorts::new(WorkerId(1), 4, &[SNAT, snat6], 1024..=65535).unwrap();
    let config = Config {
        hash_seed: 7,
        ..Config::new(8, 8)
    };
    let mut ct = Conntrack::with_snat_ports(config, &pool).unwrap();
    let mut ids = Vec::new();
    for (n, (vip, backend)) in [(VIP, BACKEND), (vip6, backend6)]
        .into_iter()
        .cycle()
        .take(6)
        .enumerate()
    {
        let c = if vip.0.is_ipv4() {
            client(n as u16)
        } else {
            (
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 3, 0, 0, 0, 0, n as u16)),
                5000,
            )
        };
        let proto = [Proto::Tcp, Proto::Udp, Proto::Tcp][n % 3];
        let k = key(c, vip, proto);
        let snat = pool.alloc(backend, proto).unwrap();
        let nat = Nat::FullNat { backend, snat };
        let id = ins(&mut ct, k, nat, 0).unwrap();
        assert_eq!(ct.lookup(&k), Some((id, Direction::Original)));
        let reply = nat.reply_key(&k).unwrap();
        assert_eq!(ct.lookup(&reply), Some((id, Direction::Reply)));
        // The same SNAT endpoint towards another backend: refused (a
        // worker's pool never hands it out twice), nothing changed.
        let other = Nat::FullNat {
            backend: (backend.0, 9090),
            snat,
        };
        let k2 = key((c.0, c.1 + 1), vip, proto);
        assert_eq!(ins(&mut ct, k2, other, 0), Err(InsertError::ReplyConflict));
        // Inserted, found by its reply key, removed.
        let round_trip = |ct: &mut Conntrack, k: FlowKey, nat: Nat| {
            let id = ins(ct, k, nat, 0).unwrap();
            let reply = nat.reply_key(&k).unwrap();
            assert_eq!(ct.lookup(&reply), Some((id, Direction::Reply)));
            ct.remove(id).unwrap();
        };
        // The same endpoint in another protocol space (echo identifiers,
        // which no connection here uses): its own cell.
        let proto2 = if vip.0.is_ipv4() {
            Proto::Icmp
        } else {
            Proto::Icmpv6
        };
        round_trip(&mut ct, key((c.0, c.1 + 2), vip, proto2), nat);
        // A port outside the worker's share (a hand-made pair): indexed
        // the usual way.
        let stray = Nat::FullNat {
            backend,
            snat: (snat.0, snat.1 + 1),
        };
        round_trip(&mut ct, key((c.0, c.1 + 3), vip, proto), stray);
        ct.check();
        ids.push((id, reply));
    }
    // Removal empties the cell: the reply is gone, the pair can be reused.
    let (id, reply) = ids[1];
    let e = ct.remove(id).unwrap();
    assert_eq!(ct.lookup(&reply), None);
    assert_eq!(ins(&mut ct, e.original, e.nat, 0).map(|_| ()), Ok(()));
    ct.check();
}

#[test]
fn ipv6_and_icmp_echo_flows() {
    let mut ct = table(4, 4);
    let c: IpAddr = "2001:db8::1".parse().unwrap();
    let v: IpAddr = "2001:db8::100".parse().unwrap();
    let b: IpAddr = "2001:db8:9::1".parse().unwrap();
    let s: IpAddr = "2001:db8:5::1".parse().unwrap();
    // An echo request with identifier 7, full-NATed to identifier 4097.
    let c6: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let k = FlowKey::V6(FlowKeyV6::icmp_echo(c6, "2001:db8::100".parse().unwrap(), 7));
    let id = ins(
        &mut ct,
        k,
        Nat::FullNat {
            backend: (b, 4097),
            snat: (s, 4097),
        },
        0,
    )
    .unwrap();
    assert!(id.is_v6());
    assert_eq!(ct.lookup(&k), Some((id, Direction::Original)));
    let reply = FlowKey::V6(FlowKeyV6::icmp_echo(
        "2001:db8:9::1".parse().unwrap(),
        "2001:db8:5::1".parse().unwrap(),
        4097,
    ));
    assert_eq!(ct.lookup(&reply), Some((id, Direction::Reply)));
    assert_eq!(
        ct.on_packet(id, Direction::Reply, 0, Tick(S)),
        Some(ConnState::IcmpReplied)
    );
    assert_eq!(ct.get(id).unwrap().expires, Tick(31 * S));
    assert_eq!(ct.rewrite(id, Direction::Reply).unwrap().dst, (c, 7));
    assert_eq!(ct.rewrite(id, Direction::Reply).unwrap().src, (v, 7));
    // A v4 key never meets the v6 table.
    assert_eq!(ct.lookup(&key(client(1), VIP, Proto::Icmp)), None);
    assert_eq!(ct.stats().occupancy_v6, 1);
    ct.check();
}

#[test]
fn insert_refusals() {
    let mut ct = table(16, 16);
    let k = key(client(1), VIP, Proto::Tcp);
    ins(&mut ct, k, dnat(), 0).unwrap();
    assert_eq!(ins(&mut ct, k, dnat(), 0), Err(InsertError::Exists));
    // Same client endpoint to another VIP, DNATed to the same backend: the
    // backend's replies would be indistinguishable.
    let other_vip = key(client(1), (ip(192, 0, 2, 2), 80), Proto::Tcp);
    assert_eq!(
        ins(&mut ct, other_vip, dnat(), 0),
        Err(InsertError::ReplyConflict)
    );
    let v6_backend = Nat::Dnat {
        backend: ("2001:db8::1".parse().unwrap(), 80),
    };
    assert_eq!(
        ins(&mut ct, key(client(2), VIP, Proto::Tcp), v6_backend, 0),
        Err(InsertError::FamilyMismatch)
    );
    // A "translation" that makes the reply equal to the original tuple.
    let self_reply = Nat::FullNat {
        backend: client(3),
        snat: VIP,
    };
    assert_eq!(
        ins(&mut ct, key(client(3), VIP, Proto::Tcp), self_reply, 0),
        Err(InsertError::ReplyConflict)
    );
    let st = ct.stats();
    assert_eq!(
        (st.inserts, st.insert_exists, st.insert_invalid, st.occupancy_v4),
        (1, 3, 1, 1)
    );
    ct.check();
}

/// Drives `flags` in `dir` at `t` and returns the state and expiry.
fn pkt(ct: &mut Conntrack, id: EntryId, dir: Direction, flags: u8, t: u64) -> (ConnState, Tick) {
    let st = ct.on_packet(id, dir, flags, Tick(t)).unwrap();
    (st, ct.get(id).unwrap().expires)
}

#[test]
fn tcp_lifecycle_with_per_state_timeouts_then_expiry() {
    use ConnState::*;
    use Direction::{Original as O, Reply as R};
    let mut ct = table(16, 0);
    let k = key(client(1), VIP, Proto::Tcp);
    let id = ins(&mut ct, k, dnat(), 0).unwrap();
    assert_eq!(pkt(&mut ct, id, O, SYN, 0), (TcpSynSent, Tick(60 * S)));
    assert_eq!(pkt(&mut ct, id, R, SYN | ACK, S), (TcpSynRecv, Tick(61 * S)));
    assert_eq!(pkt(&mut ct, id, O, ACK, 2 * S), (TcpEstablished, Tick(902 * S)));
    assert_eq!(pkt(&mut ct, id, O, FIN | ACK, 3 * S), (TcpFinWait, Tick(123 * S)));
    assert_eq!(pkt(&mut ct, id, R, ACK, 4 * S), (TcpCloseWait, Tick(64 * S)));
    assert_eq!(pkt(&mut ct, id, R, FIN | ACK, 5 * S), (TcpLastAck, Tick(35 * S)));
    assert_eq!(pkt(&mut ct, id, O, ACK, 6 * S), (TcpTimeWait, Tick(126 * S)));
    // Not yet: one millisecond before expiry.
    let st = ct.expire(Tick(126 * S - 1), 1000, |_| panic!("too early"));
    assert_eq!(
        st,
        ExpireStats {
            examined: 16,
            expired: 0
        }
    );
    let mut gone = Vec::new();
    assert_eq!(ct.expire(Tick(126 * S), 1000, |e| gone.push(*e)).expired, 1);
    assert_eq!(gone[0].state, TcpTimeWait);
    assert_eq!(gone[0].original, k);
    assert_eq!(ct.lookup(&k), None);
    assert_eq!(ct.get(id), None, "stale id");
    assert_eq!(ct.stats().expired, 1);
    ct.check();
}

#[test]
fn rst_closes_with_the_short_timeout() {
    let mut ct = table(16, 0);
    let id = ins(&mut ct, key(client(1), VIP, Proto::Tcp), dnat(), 0).unwrap();
    pkt(&mut ct, id, Direction::Original, ACK, 0);
    assert_eq!(
        pkt(&mut ct, id, Direction::Reply, RST, 5 * S),
        (ConnState::TcpClose, Tick(15 * S))
    );
    assert_eq!(ct.expire(Tick(15 * S), 16, |_| {}).expired, 1);
    assert!(ct.is_empty());
}

#[test]
fn udp_unreplied_and_replied_timeouts() {
    let mut ct = table(16, 0);
    let a = ins(&mut ct, key(client(1), VIP, Proto::Udp), dnat(), 0).unwrap();
    let b = ins(&mut ct, key(client(2), VIP, Proto::Udp), dnat(), 0).unwrap();
    // Client packets alone keep a flow unreplied with the short timeout.
    assert_eq!(
        pkt(&mut ct, a, Direction::Original, 0, 10 * S),
        (ConnState::UdpUnreplied, Tick(40 * S))
    );
    // An answer: not yet a stream; the unreplied timeout runs from it and
    // packets within 2 s (the other query of an A/AAAA pair, its answer)
    // do not restart it.
    assert_eq!(
        pkt(&mut ct, b, Direction::Reply, 0, 10 * S),
        (ConnState::UdpAnswered, Tick(40 * S))
    );
    assert_eq!(
        pkt(&mut ct, b, Direction::Original, 0, 11 * S),
        (ConnState::UdpAnswered, Tick(40 * S))
    );
    assert_eq!(
        pkt(&mut ct, b, Direction::Reply, 0, 12 * S - 1),
        (ConnState::UdpAnswered, Tick(40 * S))
    );
    // Still sending 2 s after the answer: a stream, on the long timeout.
    assert_eq!(
        pkt(&mut ct, b, Direction::Original, 0, 12 * S),
        (ConnState::UdpReplied, Tick(312 * S))
    );
    assert_eq!(
        pkt(&mut ct, b, Direction::Reply, 0, 20 * S),
        (ConnState::UdpReplied, Tick(320 * S))
    );
    let mut gone = Vec::new();
    ct.expire(Tick(40 * S), 16, |e| gone.push(e.original));
    assert_eq!(gone, [key(client(1), VIP, Proto::Udp)]);
    assert_eq!(ct.lookup(&key(client(2), VIP, Proto::Udp)).map(|x| x.0), Some(b));
    assert_eq!(ct.expire(Tick(320 * S), 16, |_| {}).expired, 1);
}

/// A request and answer, then the next request after the timeout but
/// before the sweep: the entry lives on as answered (30 s, evictable), not
/// as a stream, as it would have had the sweep come first.
#[test]
fn an_expired_answered_udp_flow_is_not_made_a_stream() {
    let mut ct = table(16, 0);
    let k = key(client(1), VIP, Proto::Udp);
    let id = ins(&mut ct, k, dnat(), 0).unwrap();
    assert_eq!(
        pkt(&mut ct, id, Direction::Reply, 0, S / 100),
        (ConnState::UdpAnswered, Tick(30 * S + S / 100))
    );
    assert_eq!(
        pkt(&mut ct, id, Direction::Original, 0, 31 * S),
        (ConnState::UdpAnswered, Tick(61 * S))
    );
    // Still sending 2 s after that: a stream.
    assert_eq!(
        pkt(&mut ct, id, Direction::Original, 0, 33 * S),
        (ConnState::UdpReplied, Tick(333 * S))
    );
}

#[test]
fn expired_entry_is_revived_by_a_packet_before_the_sweep() {
    let mut ct = table(16, 0);
    let k = key(client(1), VIP, Proto::Udp);
    let id = ins(&mut ct, k, dnat(), 0).unwrap();
    assert_eq!(
        ct.lookup(&k),
        Some((id, Direction::Original)),
        "past expiry, not swept"
    );
    pkt(&mut ct, id, Direction::Original, 0, 100 * S);
    assert_eq!(ct.expire(Tick(100 * S), 16, |_| {}).expired, 0);
}

#[test]
fn expire_work_is_bounded_by_the_budget() {
    let mut ct = table(1000, 24);
    for n in 0..1000 {
        ins(&mut ct, key(client(n), VIP, Proto::Udp), dnat(), 0).unwrap();
    }
    let mut calls = 0;
    let mut total = 0;
    while !ct.is_empty() {
        let mut seen = 0;
        let st = ct.expire(Tick(30 * S), 64, |_| seen += 1);
        assert!(st.examined <= 64 && st.expired <= 64 && seen == st.expired);
        total += st.expired;
        calls += 1;
        assert!(calls <= 17, "1024 slots / 64 per call");
    }
    assert_eq!((total, calls), (1000, 16));
    // Budget 0 does nothing; a budget above capacity examines each slot once.
    assert_eq!(ct.expire(Tick(u64::MAX), 0, |_| {}), ExpireStats::default());
    assert_eq!(ct.expire(Tick(u64::MAX), 5000, |_| {}).examined, 1024);
}

#[test]
fn lookup_burst_matches_single_lookups() {
    let mut ct = table(64, 16);
    let mut probes = Vec::new();
    for n in 0..40u16 {
        let k = if n % 4 == 0 {
            let c: IpAddr = format!("2001:db8::{n:x}").parse().unwrap();
            key((c, 1000 + n), ("2001:db8::100".parse().unwrap(), 443), Proto::Tcp)
        } else {
            key(client(n), VIP, Proto::Udp)
        };
        probes.push(k);
        if n % 3 != 1 {
            let backend = if k.is_v4() {
                BACKEND
            } else {
                ("2001:db8:9::1".parse().unwrap(), 8443)
            };
            let id = ins(&mut ct, k, Nat::Dnat { backend }, 0).unwrap();
            probes.push(ct.get(id).unwrap().reply());
        }
    }
    assert!(probes.len() > 2 * BURST, "crosses chunk boundaries");
    let mut out = vec![None; probes.len() + 3];
    ct.lookup_burst(&Loads, &probes, &mut out);
    for (k, got) in probes.iter().zip(&out) {
        assert_eq!(*got, ct.lookup(k), "{k:?}");
    }
    assert!(
        out[probes.len()..].iter().all(Option::is_none),
        "extra outputs untouched"
    );
    assert!(out.iter().filter(|o| o.is_some()).count() > 40);
    // The hashes it keeps find the same keys again after the table changed:
    // removed keys miss, keys inserted since hit.
    let burst = &probes[..BURST];
    let (mut found, mut hashes) = ([None; BURST], [KeyHash::default(); BURST]);
    ct.lookup_burst_hashed(&Loads, burst, &mut found, &mut hashes);
    for id in found.iter().step_by(3).flatten().map(|f| f.0) {
        ct.remove(id);
    }
    // Removed forward keys of IPv4 flows to the VIP, opened again.
    let reopen: Vec<FlowKey> = burst
        .iter()
        .filter(|k| k.dst() == VIP && ct.lookup(k).is_none())
        .step_by(2)
        .copied()
        .collect();
    assert!(!reopen.is_empty());
    for k in reopen {
        ins(&mut ct, k, dnat(), 0).unwrap();
    }
    let (mut hits, mut misses) = (0, 0);
    for (k, h) in burst.iter().zip(hashes) {
        let got = ct.lookup_hashed(k, h);
        assert_eq!(got, ct.lookup(k), "{k:?}");
        if got.is_some() {
            hits += 1;
        } else {
            misses += 1;
        }
    }
    assert!(hits > 5 && misses > 5, "{hits} hits, {misses} misses");
    let mut empty = table(0, 0);
    empty.lookup_burst(&Loads, &probes, &mut out);
    assert!(out.iter().all(Option::is_none));
    assert_eq!(
        ins(&mut empty, key(client(1), VIP, Proto::Tcp), dnat(), 0),
        Err(InsertError::Full)
    );
}

#[test]
fn remove_returns_the_entry_and_frees_the_slot() {
    let mut ct = table(1, 0);
    let k = key(client(1), VIP, Proto::Tcp);
    let id = ins(&mut ct, k, dnat(), 0).unwrap();
    assert_eq!(ct.remove(id).map(|e| e.original), Some(k));
    assert_eq!(ct.remove(id), None);
    assert_eq!(ct.lookup(&k), None);
    ins(&mut ct, key(client(2), VIP, Proto::Tcp), dnat(), 0).unwrap();
    assert_eq!(ct.stats().removed, 1);
    ct.check();
}

/// The handshake's SYN-ACK and ACK on a new TCP entry, at `t` ms.
fn establish(ct: &mut Conntrack, id: EntryId, t: u64) {
    pkt(ct, id, Direction::Reply, SYN | ACK, t);
    pkt(ct, id, Direction::Original, ACK, t);
    assert_eq!(ct.state(id), Some(ConnState::TcpEstablished));
}

/// Fills a table of 8 with states by index: `established[i]` or embryonic.
fn full_table(established: [bool; 8]) -> (Conntrack, Vec<EntryId>) {
    let mut ct = Conntrack::new(Config {
        evict_window: 8,
        ..Config::new(8, 0)
    })
    .unwrap();
    let ids: Vec<EntryId> = (0..8)
        .map(|n| {
            let id = ins(&mut ct, key(client(n), VIP, Proto::Tcp), dnat(), 0).unwrap();
            if established[n as usize] {
                establish(&mut ct, id, n as u64);
            }
            id
        })
        .collect();
    (ct, ids)
}

#[test]
fn eviction_takes_embryonic_before_closing_before_established() {
    let (mut ct, ids) = full_table([true, true, false, true, true, true, true, true]);
    // Slot 5 closing (FIN), slot 2 embryonic: embryonic goes first.
    pkt(&mut ct, ids[5], Direction::Original, FIN, 10);
    let mut evicted = Vec::new();
    let new = key(client(100), VIP, Proto::Tcp);
    ct.insert(new, dnat(), Tags::default(), Tick(20), |e| evicted.push(*e))
        .unwrap();
    assert_eq!(evicted.len(), 1);
    assert_eq!(
        (evicted[0].original, evicted[0].state),
        (key(client(2), VIP, Proto::Tcp), ConnState::TcpSynSent)
    );
    // The new flow is embryonic too; make it established, then the closing
    // entry is the only candidate.
    let (nid, _) = ct.lookup(&new).unwrap();
    establish(&mut ct, nid, 20);
    ct.insert(
        key(client(101), VIP, Proto::Tcp),
        dnat(),
        Tags::default(),
        Tick(30),
        |e| evicted.push(*e),
    )
    .unwrap();
    assert_eq!(evicted[1].state, ConnState::TcpFinWait);
    let st = ct.stats();
    assert_eq!(
        (st.evicted_embryonic, st.evicted_closing, st.occupancy_v4),
        (1, 1, 8)
    );
    ct.check();
}

/// An entry the client alone established (SYN then ACK, nothing from the
/// backend: a flood, or a DNAT pickup whose backend never answered) is
/// evicted as embryonic; the backend's first packet protects it.
#[test]
fn an_entry_established_without_the_backend_is_evicted_as_embryonic() {
    let (mut ct, ids) = full_table([true; 8]);
    pkt(&mut ct, ids[3], Direction::Reply, RST, 5);
    let (a, b) = (key(client(50), VIP, Proto::Tcp), key(client(51), VIP, Proto::Tcp));
    // Slot 3 is closing (RST); both new entries are refused... until one
    // was only ever ACKed by its client.
    let mut evicted = Vec::new();
    ct.insert(a, dnat(), Tags::default(), Tick(10), |e| evicted.push(e.original))
        .unwrap();
    let (aid, _) = ct.lookup(&a).unwrap();
    pkt(&mut ct, aid, Direction::Original, ACK, 10);
    assert_eq!(ct.state(aid), Some(ConnState::TcpEstablishedUnreplied));
    ct.insert(b, dnat(), Tags::default(), Tick(20), |e| evicted.push(e.original))
        .unwrap();
    assert_eq!(evicted, [key(client(3), VIP, Proto::Tcp), a]);
    assert_eq!(ct.stats().evicted_embryonic, 1);
    // Answered by the backend, it is established and stays.
    let (bid, _) = ct.lookup(&b).unwrap();
    pkt(&mut ct, bid, Direction::Original, ACK, 20);
    pkt(&mut ct, bid, Direction::Reply, ACK, 21);
    assert_eq!(ct.state(bid), Some(ConnState::TcpEstablished));
    assert!(ct
        .insert(
            key(client(52), VIP, Proto::Tcp),
            dnat(),
            Tags::default(),
            Tick(30),
            |_| {}
        )
        .is_err());
    ct.check();
}

#[test]
fn eviction_takes_an_expired_entry_before_established_ones() {
    let (mut ct, _) = full_table([true; 8]);
    let mut evicted = Vec::new();
    // At 900 s + 3 ms, entries 0..=3 (established at 0..=3 ms) have expired.
    let now = 900 * S + 3;
    ct.insert(
        key(client(200), VIP, Proto::Tcp),
        dnat(),
        Tags::default(),
        Tick(now),
        |e| evicted.push(*e),
    )
    .unwrap();
    assert_eq!(evicted[0].original, key(client(0), VIP, Proto::Tcp));
    assert_eq!(ct.stats().evicted_expired, 1);
}

#[test]
fn eviction_takes_the_first_expired_or_embryonic_from_the_hand() {
    let mut ct = Conntrack::new(Config {
        evict_window: 8,
        ..Config::new(8, 0)
    })
    .unwrap();
    // Slots in insert order: established TCP, except slot 2, a SYN at
    // 50 s (embryonic until 110 s), and slot 5, UDP at 0 s never replied
    // (expired at 30 s).
    for n in 0..8u16 {
        let (proto, at) = match n {
            2 => (Proto::Tcp, 50 * S),
            5 => (Proto::Udp, 0),
            _ => (Proto::Tcp, 0),
        };
        let id = ins(&mut ct, key(client(n), VIP, proto), dnat(), at).unwrap();
        if n != 2 && n != 5 {
            establish(&mut ct, id, 0);
        }
    }
    let mut evicted = Vec::new();
    for (n, at) in [(100u16, 60 * S), (101, 61 * S)] {
        ct.insert(
            key(client(n), VIP, Proto::Tcp),
            dnat(),
            Tags::default(),
            Tick(at),
            |e| evicted.push(e.original),
        )
        .unwrap();
    }
    // The embryonic slot 2 comes first from the hand, before the expired
    // slot 5; then the hand is at 3, and slot 5 is next.
    assert_eq!(
        evicted,
        [key(client(2), VIP, Proto::Tcp), key(client(5), VIP, Proto::Udp)]
    );
    let st = ct.stats();
    assert_eq!((st.evicted_embryonic, st.evicted_expired), (1, 1));
    ct.check();
}

#[test]
fn full_of_established_refuses_with_full() {
    let (mut ct, _) = full_table([true; 8]);
    let r = ct.insert(
        key(client(300), VIP, Proto::Tcp),
        dnat(),
        Tags::default(),
        Tick(50),
        |_| panic!(),
    );
    assert_eq!(r, Err(InsertError::Full));
    assert_eq!(ct.stats().insert_full, 1);
    assert_eq!(ct.len(), 8);
    // Duplicates are refused without evicting anything.
    let (mut ct, _) = full_table([false; 8]);
    let dup = ct.insert(
        key(client(0), VIP, Proto::Tcp),
        dnat(),
        Tags::default(),
        Tick(0),
        |_| panic!(),
    );
    assert_eq!(dup, Err(InsertError::Exists));
    // A zero-capacity family is always full.
    let mut none = table(0, 0);
    assert_eq!(
        ins(&mut none, key(client(1), VIP, Proto::Tcp), dnat(), 0),
        Err(InsertError::Full)
    );
    assert_eq!(none.lookup(&key(client(1), VIP, Proto::Tcp)), None);
    assert_eq!(none.expire(Tick(0), 10, |_| {}), ExpireStats::default());
}

#[test]
fn owners_agree_for_both_directions() {
    let n = 6;
    let mut ct = table(64, 0);
    let mut pools: Vec<SnatPorts> = (0..n)
        .map(|w| SnatPorts::new(WorkerId(w), n, &[SNAT], SnatPorts::DEFAULT_PORT_RANGE).unwrap())
        .collect();
    for c in 0..20 {
        let fwd = key(client(c), VIP, Proto::Tcp);
        let (src, sport) = fwd.src();
        let owner = owner_of_client(src, sport, n);
        // DNAT: the reply carries the client as its destination.
        let id = ins(&mut ct, fwd, dnat(), 0).unwrap();
        let (dst, dport) = ct.get(id).unwrap().reply().dst();
        assert_eq!(owner_of_client(dst, dport, n), owner);
        ct.remove(id);
        // Full-NAT: the owner allocates from its share; the reply's
        // destination port names the owner.
        let snat = pools[owner.0 as usize].alloc(BACKEND, Proto::Tcp).unwrap();
        let id = ins(
            &mut ct,
            fwd,
            Nat::FullNat {
                backend: BACKEND,
                snat,
            },
            0,
        )
        .unwrap();
        let reply = ct.get(id).unwrap().reply();
        assert_eq!(owner_of_snat_port(reply.dst().1, n), owner);
        assert_eq!(ct.lookup(&reply), Some((id, Direction::Reply)));
        ct.remove(id);
    }
}

#[test]
fn construction_limits() {
    let big = Config::new(Conntrack::MAX_CAPACITY + 1, 0);
    assert!(matches!(
        Conntrack::new(big),
        Err(NewError::CapacityTooLarge { .. })
    ));
    assert_eq!(table(3, 5).capacity(), (3, 5));
}

#[test]
fn sweep_removes_due_entries_in_slot_order_across_families() {
    // Both families, live and expired entries interleaved, budgets that
    // cross the IPv4/IPv6 boundary and wrap.
    let mut ct = table(300, 100);
    for n in 0..280u16 {
        ins(
            &mut ct,
            key(client(n), VIP, Proto::Udp),
            dnat(),
            u64::from(n % 7) * S,
        )
        .unwrap();
    }
    let vip6 = (IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)), 53);
    let be6 = (IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 9)), 53);
    for n in 0..90u16 {
        let c = (
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, n)),
            5000 + n,
        );
        let k = key(c, vip6, Proto::Udp);
        ct.insert(
            k,
            Nat::Dnat { backend: be6 },
            Tags::default(),
            Tick(u64::from(n % 5) * S),
            |_| {},
        )
        .unwrap();
    }
    // Free some slots in the middle so runs mix free, live and due slots.
    for n in (0..280u16).step_by(9) {
        let (id, _) = ct.lookup(&key(client(n), VIP, Proto::Udp)).unwrap();
        ct.remove(id).unwrap();
    }
    let udp = ct.timeouts().udp_unreplied.as_millis() as u64;
    for (now, budget) in [
        (udp + 2 * S, 77),
        (udp + 4 * S, 250),
        (udp + 4 * S, 131),
        (udp + 9 * S, 400),
    ] {
        // What a one-by-one sweep from the cursor removes, in order.
        let cap4 = u64::from(ct.v4.capacity());
        let total = cap4 + u64::from(ct.v6.capacity());
        let mut want = Vec::new();
        let mut pos = ct.sweep;
        for _ in 0..budget.min(total) {
            let slot = if pos < cap4 {
                ct.v4.get(pos as u32).filter(|s| s.expires <= now).map(decode)
            } else {
                ct.v6
                    .get((pos - cap4) as u32)
                    .filter(|s| s.expires <= now)
                    .map(decode)
            };
            want.extend(slot.map(|e| e.original));
            pos = (pos + 1) % total;
        }
        let mut got = Vec::new();
        let st = ct.expire(Tick(now), budget as usize, |e| got.push(e.original));
        assert_eq!(got, want, "now {now} budget {budget}");
        assert_eq!(st.expired, want.len());
        assert_eq!(ct.sweep, pos);
        ct.check();
    }
    assert!(ct.is_empty() || ct.len() < 300);
}

#[test]
fn full_table_victims_report_their_snat_pairs_to_warming_and_release() {
    full_table_victims_report_their_snat_pairs(false);
}

#[test]
fn full_ipv6_table_victims_report_their_snat_pairs_to_warming_and_release() {
    full_table_victims_report_their_snat_pairs(true);
}

/// A full table of embryonic entries, full-NAT and DNAT alternating, TCP
/// and UDP: the victims' warming (`warm_victims_v4`, or with every address
/// moved into fd00::/96, `warm_victims_v6`) reports the SNAT pair and
/// protocol of each full-NAT one of the next `n` from the hand, in order;
/// the inserts that evict them hand the same to `insert_missed`'s caller
/// (and nothing of the DNAT ones but the protocol).
fn full_table_victims_report_their_snat_pairs(six: bool) {
    let fam = |a: IpAddr| match a {
        IpAddr::V4(v) if six => IpAddr::V6(Ipv6Addr::from((0xfd00u128 << 112) | u128::from(u32::from(v)))),
        a => a,
    };
    let at = |(a, port): (IpAddr, u16)| (fam(a), port);
    let mut ct = if six { table(0, 8) } else { table(8, 0) };
    let snat_of = |i: u16| (fam(SNAT), 2000 + i);
    let dnat = || Nat::Dnat { backend: at(BACKEND) };
    let proto_of = |i: u16| {
        if i.is_multiple_of(3) {
            Proto::Udp
        } else {
            Proto::Tcp
        }
    };
    for i in 0..8u16 {
        let nat = if i % 2 == 0 {
            Nat::FullNat {
                backend: at(BACKEND),
                snat: snat_of(i),
            }
        } else {
            dnat()
        };
        ins(&mut ct, key(at(client(i)), at(VIP), proto_of(i)), nat, 0).unwrap();
    }
    let mut warmed = Vec::new();
    if six {
        ct.warm_victims_v6(&Loads, 5, |a, port, proto| {
            warmed.push((IpAddr::V6(a), port, proto))
        });
        // The IPv4 table is empty: nothing to warm there.
        ct.warm_victims_v4(&Loads, 5, |_, _, _| panic!("no IPv4 victim"));
    } else {
        ct.warm_victims_v4(&Loads, 5, |a, port, proto| {
            warmed.push((IpAddr::V4(a), port, proto))
        });
        ct.warm_victims_v6(&Loads, 5, |_, _, _| panic!("no IPv6 victim"));
    }
    let want: Vec<_> = [0u16, 2, 4]
        .iter()
        .map(|&i| (fam(SNAT), 2000 + i, proto_of(i)))
        .collect();
    assert_eq!(warmed, want);
    let mut released = Vec::new();
    for i in 100..105u16 {
        let k = key(at(client(i)), at(VIP), Proto::Tcp);
        let tags = Tags {
            frontend: 1,
            backend: 2,
        };
        ct.insert_missed(k, dnat(), tags, Tick(1), None, |e| released.push(e))
            .unwrap();
    }
    let want: Vec<_> = (0..5u16)
        .map(|i| Evicted {
            proto: proto_of(i),
            snat: (i % 2 == 0).then(|| snat_of(i)),
        })
        .collect();
    assert_eq!(released, want);
    ct.check();
}

#[test]
fn insert_missed_v4_does_what_insert_missed_does() {
    insert_missed_raw_does_what_insert_missed_does(false);
}

#[test]
fn insert_missed_v6_does_what_insert_missed_does() {
    insert_missed_raw_does_what_insert_missed_does(true);
}

/// Two tables, the same inserts: one through the general values, one
/// through the IPv4 ones (`insert_missed_v4`), or with every address
/// moved into fd00::/96 (`six`), the IPv6 ones (`insert_missed_v6`). DNAT
/// and full-NAT, TCP and UDP, a table small enough that most inserts
/// evict, and inserts whose reply tuple collides (a SNAT pair reused
/// while its entry lives; a DNAT flow whose reply key is a tracked reply
/// key). Same results, same evictions reported, same entries, same
/// counts; every third insert given its places as the burst path gives
/// them.
fn insert_missed_raw_does_what_insert_missed_does(six: bool) {
    let (mut general, mut v4) = if six {
        (table(48, 48), table(48, 48))
    } else {
        (table(48, 0), table(48, 0))
    };
    let fam = |a: IpAddr| match a {
        IpAddr::V4(v) if six => IpAddr::V6(Ipv6Addr::from((0xfd00u128 << 112) | u128::from(u32::from(v)))),
        a => a,
    };
    let v4_of = |ip: IpAddr| match ip {
        IpAddr::V4(a) => a,
        IpAddr::V6(_) => unreachable!(),
    };
    let v6_of = |ip: IpAddr| match ip {
        IpAddr::V6(a) => a,
        IpAddr::V4(_) => unreachable!(),
    };
    let mut ids = Vec::new();
    let mut conflicts = 0;
    for i in 0..200u16 {
        let proto = if i % 5 == 0 { Proto::Udp } else { Proto::Tcp };
        // A few recurring client endpoints and two VIPs: a DNAT flow of
        // one of them to one VIP may meet its flow to the other on the
        // same backend (the same reply key). Keys that are still tracked are skipped (both
        // APIs require a missed lookup).
        let vip = (fam(ip(192, 0, 2, 1 + (i / 4 % 2) as u8)), 80);
        let c = if i % 4 == 1 {
            client(i % 13)
        } else {
            client(100 + i)
        };
        let c = (fam(c.0), c.1);
        let k = key(c, vip, proto);
        if general.lookup(&k).is_some() {
            assert!(v4.lookup(&k).is_some());
            continue;
        }
        // Mostly one backend, so that reply keys meet.
        let backend = if i % 11 == 0 {
            (fam(ip(10, 9, 0, 2)), 8080)
        } else {
            (fam(BACKEND.0), BACKEND.1)
        };
        // SNAT ports from a pool of 7: some still held by a live entry.
        let snat = (i % 2 == 0).then_some((fam(SNAT), 3000 + i % 7));
        let nat = match snat {
            Some(snat) => Nat::FullNat { backend, snat },
            None => Nat::Dnat { backend },
        };
        let tags = Tags {
            frontend: u32::from(i),
            backend: u32::from(i) * 7,
        };
        let now = Tick(u64::from(i) * 10);
        let (mut ev_general, mut ev_v4) = (Vec::new(), Vec::new());
        let a = general.insert_missed(k, nat, tags, now, None, |e| ev_general.push(e));
        // Every third insert with the places the burst path passes (the
        // warming's of the key and its reply key; debug builds check
        // them).
        let warm = i % 3 == 0;
        let (reply_dst, reply_dport) = snat.unwrap_or(c);
        let b = match k {
            FlowKey::V4(kv4) => {
                let nat_v4 = NatV4 {
                    backend: (v4_of(backend.0), backend.1),
                    snat: snat.map(|(a, p)| (v4_of(a), p)),
                };
                let hashes = warm.then(|| {
                    let o = v4.warm_v4(
                        &Loads,
                        kv4.src.octets(),
                        kv4.dst.octets(),
                        kv4.sport,
                        kv4.dport,
                        proto as u8,
                    );
                    let (b, d) = (v4_of(backend.0).octets(), v4_of(reply_dst).octets());
                    (o, v4.warm_v4(&Loads, b, d, backend.1, reply_dport, proto as u8))
                });
                v4.insert_missed_v4(&kv4, nat_v4, tags, now, hashes, |e| ev_v4.push(e))
            }
            FlowKey::V6(kv6) => {
                let nat_v6 = NatV6 {
                    backend: (v6_of(backend.0), backend.1),
                    snat: snat.map(|(a, p)| (v6_of(a), p)),
                };
                let hashes = warm.then(|| {
                    let o = v4.warm_v6(
                        &Loads,
                        kv6.src.octets(),
                        kv6.dst.octets(),
                        kv6.sport,
                        kv6.dport,
                        proto as u8,
                    );
                    let (b, d) = (v6_of(backend.0).octets(), v6_of(reply_dst).octets());
                    (o, v4.warm_v6(&Loads, b, d, backend.1, reply_dport, proto as u8))
                });
                v4.insert_missed_v6(&kv6, nat_v6, tags, now, hashes, |e| ev_v4.push(e))
            }
        };
        assert_eq!(matches!(k, FlowKey::V6(_)), six);
        assert_eq!(a, b, "insert {i}");
        conflicts += usize::from(a == Err(InsertError::ReplyConflict) && snat.is_none());
        assert_eq!(ev_general, ev_v4, "insert {i}");
        if let Ok(id) = a {
            assert_eq!(general.get(id), v4.get(id), "insert {i}");
            ids.push(id);
        }
    }
    for id in ids {
        assert_eq!(general.get(id), v4.get(id));
    }
    assert_eq!(general.stats(), v4.stats());
    let s = v4.stats();
    assert!(s.inserts > 50 && s.insert_exists > 10, "{s:?}");
    assert!(conflicts > 0, "no DNAT reply conflict: {s:?}");
    assert!(s.evicted_embryonic + s.evicted_expired > 30, "{s:?}");
    general.check();
    v4.check();
}
