//! `Worker::end_orphaned_udp`: UDP connections whose backend was deleted
//! from their service, or whose frontend was, end after the next snapshot
//! revision (DNAT and full-NAT, the SNAT port released); drained backends'
//! UDP connections and every TCP connection stay; the check runs one lap
//! of the table per revision, `budget` slots a call.

use super::*;

const DNS: (&str, u16) = ("10.0.0.101", 53);
const LOGS: (&str, u16) = ("10.0.0.102", 514);
const WEB: (&str, u16) = ("10.0.0.100", 80);

/// Revision `rev`: web (full-NAT TCP), dns (DNAT UDP) and, if `logs`,
/// logs (full-NAT UDP), each with backends `10.1.0.i` for `i` in
/// `backends`, in `state(i)`.
fn udp_snapshot(rev: u64, backends: &[u8], state: impl Fn(u8) -> BackendState, logs: bool) -> Snapshot {
    let mut b = ports_and_neighbors(rev);
    let mut services = vec![("default/web", ForwardMode::FullNat, WEB, Proto::Tcp)];
    services.push(("default/dns", ForwardMode::Dnat, DNS, Proto::Udp));
    if logs {
        services.push(("default/logs", ForwardMode::FullNat, LOGS, Proto::Udp));
    }
    for (name, mode, (vip, port), proto) in services {
        let mut spec = ServiceSpec::new(name);
        spec.mode = mode;
        let id = b.service(spec).unwrap();
        b.frontend(
            id,
            FrontendSpec::new(v4(vip), port, proto, FrontendKind::LoadBalancer),
        )
        .unwrap();
        for &i in backends {
            let mut be = BackendSpec::new(v4(&format!("10.1.0.{i}")), port + 8000);
            be.state = state(i);
            b.backend(id, be).unwrap();
        }
    }
    b.build().unwrap()
}

/// Sends one client packet of each service from `10.0.0.2:port` and
/// returns the backends picked (web, dns, logs), last octet.
fn open(w: &mut Worker, snap: &Snapshot, now: u64, port: u16) -> [u8; 3] {
    let client = ("10.0.0.2", port);
    let mut frames = [
        tcp4(client, WEB, "S", 64, b""),
        udp4(client, DNS, b"query"),
        udp4(client, LOGS, b"line"),
    ];
    frames.each_mut().map(|f| {
        assert!(matches!(
            run(w, snap, now, f, 0),
            Verdict::Transmit { port: 1, .. }
        ));
        match wire::parse(f).unwrap().dst {
            IpAddr::V4(a) => a.octets()[3],
            other => panic!("{other}"),
        }
    })
}

fn tracked(w: &Worker, port: u16, to: (&str, u16), proto: Proto) -> bool {
    let k = crate::flow::FlowKey::new((v4("10.0.0.2"), port), (v4(to.0), to.1), proto).unwrap();
    w.conntrack().lookup(&k).is_some()
}

#[test]
fn udp_connections_of_deleted_backends_and_frontends_end() {
    let all = |_| BackendState::Active;
    let s1 = udp_snapshot(1, &[11, 12, 13], all, true);
    let mut w = worker(1, 0);
    let ports: Vec<u16> = (1000..1090).collect();
    let picks: Vec<[u8; 3]> = ports.iter().map(|&p| open(&mut w, &s1, 0, p)).collect();
    let on = |svc: usize, b: u8| picks.iter().filter(|p| p[svc] == b).count();
    assert!(
        (0..3).all(|s| (11..=13).all(|b| on(s, b) > 0)),
        "every backend has flows"
    );
    let snat = v4("10.1.0.100");
    let free = w.snat_ports().available(snat, Proto::Udp);
    assert_eq!(w.end_orphaned_udp(&s1, 1 << 20), 0, "nothing orphaned");

    // Revision 2: 10.1.0.12 deleted, 10.1.0.11 draining. The UDP flows on
    // .12 end (DNAT and full-NAT), their SNAT ports come back; the
    // drained backend's and every TCP connection stay.
    let s2 = udp_snapshot(
        2,
        &[11, 13],
        |i| {
            if i == 11 {
                BackendState::Terminating
            } else {
                BackendState::Active
            }
        },
        true,
    );
    let gone = on(1, 12) + on(2, 12);
    assert_eq!(w.end_orphaned_udp(&s2, 1 << 20), gone);
    assert_eq!(w.counters().conntrack_expirations.get(), gone as u64);
    assert_eq!(w.snat_ports().available(snat, Proto::Udp), free + on(2, 12));
    for (p, pick) in ports.iter().zip(&picks) {
        assert!(tracked(&w, *p, WEB, Proto::Tcp), "TCP stays");
        assert_eq!(
            tracked(&w, *p, DNS, Proto::Udp),
            pick[1] != 12,
            "dns {p} on {}",
            pick[1]
        );
        assert_eq!(
            tracked(&w, *p, LOGS, Proto::Udp),
            pick[2] != 12,
            "logs {p} on {}",
            pick[2]
        );
    }
    // One lap a revision: the same revision again checks nothing.
    assert_eq!(w.end_orphaned_udp(&s2, 1 << 20), 0);
    // An ended flow's next datagram is a new connection, on an active
    // backend.
    let p = ports[picks.iter().position(|p| p[1] == 12).unwrap()];
    let mut q = udp4(("10.0.0.2", p), DNS, b"again");
    assert!(matches!(
        run(&mut w, &s2, 10, &mut q, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    assert_eq!(wire::parse(&q).unwrap().dst, v4("10.1.0.13"));

    // Revision 3: the logs frontend deleted; with a budget of 100 slots a
    // call, the lap over the 2,048 slots takes 21 calls.
    let s3 = udp_snapshot(3, &[11, 13], all, false);
    let logs_left = ports.len() - on(2, 12);
    let ended: usize = (0..21).map(|_| w.end_orphaned_udp(&s3, 100)).sum();
    assert_eq!(ended, logs_left);
    assert!(ports.iter().all(|&p| !tracked(&w, p, LOGS, Proto::Udp)));
    assert_eq!(w.snat_ports().available(snat, Proto::Udp), free + ports.len());
    assert_eq!(w.end_orphaned_udp(&s3, 100), 0);
    w.conntrack().check();
}
