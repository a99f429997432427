//! Client-IP session affinity: a client stays on the backend it is pinned
//! to across ring changes while it keeps opening connections within the
//! timeout, moves when its backend leaves the ring (and does not move back),
//! starts again from the hash pick once idle for the timeout, and every
//! worker of the node reads the same pins.

use std::sync::Arc;

use super::*;
use crate::affinity::{AffinityTable, MIN_CAPACITY};
use crate::flow::owner_of_client;
use crate::snapshot::Family;

const STICKY: (&str, u16) = ("10.0.0.104", 80);
const PLAIN: (&str, u16) = ("10.0.0.105", 80);
const TIMEOUT_S: u64 = 60;

/// Revision `rev`: `default/sticky`, DNAT TCP with client-IP affinity of
/// 60 s, backends `10.1.0.i` for `i` in `active` (active) and `draining`
/// (terminating), all resolved; and `default/plain`, without affinity.
fn sticky(rev: u64, active: &[u8], draining: &[u8]) -> Snapshot {
    sticky_for(rev, active, draining, TIMEOUT_S)
}

/// [`sticky`] with an affinity timeout of `timeout_s` seconds.
fn sticky_for(rev: u64, active: &[u8], draining: &[u8], timeout_s: u64) -> Snapshot {
    let mut b = ports_and_neighbors(rev);
    for i in 14..=16 {
        b.neighbor(v4(&format!("10.1.0.{i}")), BACKEND_MAC);
    }
    let mut spec = ServiceSpec::new("default/sticky");
    spec.mode = ForwardMode::Dnat;
    spec.affinity = SessionAffinity::ClientIp {
        timeout: Duration::from_secs(timeout_s),
    };
    let id = b.service(spec).unwrap();
    b.frontend(
        id,
        FrontendSpec::new(v4(STICKY.0), STICKY.1, Proto::Tcp, FrontendKind::ClusterIp),
    )
    .unwrap();
    for (list, state) in [
        (active, BackendState::Active),
        (draining, BackendState::Terminating),
    ] {
        for &i in list {
            let mut be = BackendSpec::new(v4(&format!("10.1.0.{i}")), 8080);
            be.state = state;
            b.backend(id, be).unwrap();
        }
    }
    let plain = b.service(ServiceSpec::new("default/plain")).unwrap();
    b.frontend(
        plain,
        FrontendSpec::new(v4(PLAIN.0), PLAIN.1, Proto::Tcp, FrontendKind::ClusterIp),
    )
    .unwrap();
    b.backend(plain, BackendSpec::new(v4("10.1.0.11"), 8080)).unwrap();
    b.build().unwrap()
}

fn client(i: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 168, 7, i))
}

/// A SYN from `client:port` to the sticky frontend through `w` (in a burst
/// of one when `burst`) at second `at`; the backend it went to, last octet.
fn connect(w: &mut Worker, snap: &Snapshot, at: u64, client: IpAddr, port: u16, burst: bool) -> u8 {
    let mut f = tcp4((&client.to_string(), port), STICKY, "S", 64, b"");
    let v = if burst {
        let mut v = [Verdict::ToHost];
        let mut frames = [&mut f[..]];
        w.handle_burst(Tick(at * 1000), snap, &mut frames, &[meta(0)], &mut v);
        v[0]
    } else {
        run(w, snap, at * 1000, &mut f, 0)
    };
    assert!(matches!(v, Verdict::Transmit { port: 1, .. }), "{v:?}");
    match wire::parse(&f).unwrap().dst {
        IpAddr::V4(a) => a.octets()[3],
        other => panic!("{other}"),
    }
}

/// The backend the ring of `snap` gives `client` by hash alone.
fn hash_pick(snap: &Snapshot, client: IpAddr) -> u8 {
    let svc = snap
        .services()
        .iter()
        .find(|s| s.name() == "default/sticky")
        .unwrap();
    match svc.pick_for_client(client, Family::V4).unwrap().addr {
        IpAddr::V4(a) => a.octets()[3],
        other => panic!("{other}"),
    }
}

#[test]
fn a_pinned_client_keeps_its_backend_across_ring_changes_until_idle() {
    let s1 = sticky(1, &[11, 12, 13], &[]);
    let s2 = sticky(2, &[11, 12, 13, 14, 15, 16], &[]);
    let mut w = worker(1, 0);
    let clients: Vec<IpAddr> = (1..=120).map(client).collect();
    // Second 0: every client pinned to its hash pick.
    let first: Vec<u8> = clients
        .iter()
        .enumerate()
        .map(|(i, &c)| connect(&mut w, &s1, 0, c, 1000, i % 2 == 0))
        .collect();
    for (&c, &b) in clients.iter().zip(&first) {
        assert_eq!(b, hash_pick(&s1, c));
    }
    let c = Arc::clone(w.counters());
    assert_eq!((c.affinity_pins.get(), c.affinity_hits.get()), (120, 0));
    // Three backends join: about half the clients hash elsewhere now.
    let moved: Vec<usize> = (0..clients.len())
        .filter(|&i| hash_pick(&s2, clients[i]) != first[i])
        .collect();
    assert!(moved.len() > 20, "{} of 120 clients hash elsewhere", moved.len());
    // Second 30: every client, over each path, stays where it was pinned,
    // which restarts its timeout.
    for (i, &c) in clients.iter().enumerate() {
        assert_eq!(
            connect(&mut w, &s2, 30, c, 1001, i % 2 == 1),
            first[i],
            "client {c}"
        );
    }
    assert_eq!((c.affinity_pins.get(), c.affinity_hits.get()), (120, 120));
    // A new client gets the new ring's pick.
    let newcomer = client(200);
    assert_eq!(
        connect(&mut w, &s2, 30, newcomer, 1000, false),
        hash_pick(&s2, newcomer)
    );
    // Second 80: 80 s after the first pin, 50 s after the last connection.
    let m = clients[moved[0]];
    assert_eq!(connect(&mut w, &s2, 80, m, 1002, false), first[moved[0]]);
    // Idle for the whole timeout (30 + 60): the pin is forgotten, and the
    // client starts again from the hash pick; likewise at 80 + 60.
    let m2 = clients[moved[1]];
    assert_eq!(connect(&mut w, &s2, 90, m2, 1002, false), hash_pick(&s2, m2));
    assert_eq!(connect(&mut w, &s2, 140, m, 1003, true), hash_pick(&s2, m));
    assert_eq!(c.affinity_pins.get(), 123);
    assert_eq!(c.affinity_evictions.get(), 0);
    assert_eq!(c.new_connections.get(), 120 + 120 + 4);
}

/// A lowered timeout applies to a pin made under the old one at its next
/// use; a pin no connection uses keeps its expiry until then.
#[test]
fn a_lowered_timeout_applies_to_a_pin_at_its_next_use() {
    let s1 = sticky(1, &[11, 12, 13], &[]);
    let s2 = sticky_for(2, &[11, 12, 13, 14, 15, 16], &[], 10);
    let mut w = worker(1, 0);
    let moved: Vec<IpAddr> = (1..=120)
        .map(client)
        .filter(|&c| hash_pick(&s1, c) != hash_pick(&s2, c))
        .take(2)
        .collect();
    let (used, unused) = (moved[0], moved[1]);
    for c in [used, unused] {
        assert_eq!(connect(&mut w, &s1, 0, c, 1000, false), hash_pick(&s1, c));
    }
    // Second 5, timeout 10 now: the pin holds, and restarts with 10 s.
    assert_eq!(connect(&mut w, &s2, 5, used, 1001, true), hash_pick(&s1, used));
    // Second 20: idle 15 s, longer than the new timeout: the hash pick.
    assert_eq!(connect(&mut w, &s2, 20, used, 1002, false), hash_pick(&s2, used));
    // The pin nobody used still has the 60 s it was made with.
    assert_eq!(
        connect(&mut w, &s2, 20, unused, 1001, false),
        hash_pick(&s1, unused)
    );
}

#[test]
fn a_client_whose_backend_leaves_moves_and_stays_moved() {
    let all = sticky(1, &[11, 12, 13], &[]);
    let mut w = worker(1, 0);
    let c = client(9);
    let b = connect(&mut w, &all, 0, c, 1000, false);
    let others: Vec<u8> = [11, 12, 13].into_iter().filter(|&i| i != b).collect();
    // Its backend drains: the next connection goes to a backend in the ring.
    let drained = sticky(2, &others, &[b]);
    let moved = connect(&mut w, &drained, 1, c, 1001, false);
    assert_ne!(moved, b);
    assert_eq!(moved, hash_pick(&drained, c));
    // It comes back: the client stays where it was re-pinned, though the
    // hash would take it back.
    let back = sticky(3, &[11, 12, 13], &[]);
    assert_eq!(hash_pick(&back, c), b);
    assert_eq!(connect(&mut w, &back, 2, c, 1002, false), moved);
    let k = Arc::clone(w.counters());
    assert_eq!((k.affinity_pins.get(), k.affinity_hits.get()), (2, 1));
    // A service without affinity is not in the table.
    let mut f = tcp4(("192.168.7.9", 1003), PLAIN, "S", 64, b"");
    assert!(matches!(
        run(&mut w, &back, 3, &mut f, 0),
        Verdict::Transmit { .. }
    ));
    assert_eq!(w.affinity().live(3), 1);
}

#[test]
fn workers_of_a_node_share_pins() {
    let table = Arc::new(AffinityTable::new(MIN_CAPACITY, 42).unwrap());
    let mut workers: Vec<Worker> = (0..2)
        .map(|id| {
            let mut cfg = WorkerConfig::new(WorkerId(id), 2);
            cfg.conntrack = conntrack::Config::new(1024, 1024);
            cfg.frontend_slots = 64;
            cfg.backend_slots = 64;
            cfg.affinity = Some(Arc::clone(&table));
            Worker::new(cfg).unwrap()
        })
        .collect();
    let s1 = sticky(1, &[11, 12, 13], &[]);
    let s2 = sticky(2, &[11, 12, 13, 14, 15, 16], &[]);
    // A client that the new ring would move.
    let c = (1..=255)
        .map(client)
        .find(|&c| hash_pick(&s1, c) != hash_pick(&s2, c))
        .unwrap();
    // The first port worker 0 owns and the first worker 1 owns.
    let port_of = |w: u16| {
        (1000..)
            .find(|&p| owner_of_client(c, p, 2) == WorkerId(w))
            .unwrap()
    };
    let b = connect(&mut workers[0], &s1, 0, c, port_of(0), false);
    // Worker 1 has never seen the client, and sends it to worker 0's pin.
    assert_eq!(connect(&mut workers[1], &s2, 1, c, port_of(1), false), b);
    assert_eq!(workers[1].counters().affinity_hits.get(), 1);
    assert_eq!(workers[1].counters().affinity_pins.get(), 0);
}
