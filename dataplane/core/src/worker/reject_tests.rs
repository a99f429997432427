//! The RST for a closed VIP port and the source ranges: only a client that
//! some service on the VIP address allows is refused with a RST; one that
//! every service there denies sees the silence it gets on a served port
//! (`source_range_denied`), on the general, burst and IPv6 paths, and
//! after an incremental update of the ranges.

use super::*;

const ALLOWED_TCP: &str = "192.168.1.5";
const ALLOWED_UDP: &str = "172.16.0.9";
const DENIED: &str = "10.0.0.2";
const ALLOWED_TCP6: &str = "fd00:1::5";
const ALLOWED_UDP6: &str = "fd00:2::9";
const DENIED6: &str = "fd00::2";

fn restricted(name: &str, ranges: &[&str]) -> ServiceSpec {
    let mut s = ServiceSpec::new(name);
    s.source_ranges = ranges.iter().map(|r| r.parse().unwrap()).collect();
    s
}

const TCP_RANGES: [&str; 2] = ["192.168.0.0/16", "fd00:1::/64"];
const UDP_RANGES: [&str; 2] = ["172.16.0.0/12", "fd00:2::/64"];

/// [`snapshot`] plus two restricted services on 10.0.0.110 and
/// [fd00::110]: `default/a` (TCP 80, [`TCP_RANGES`]) and `default/b` (UDP
/// 53, [`UDP_RANGES`]); and `default/admin` (TCP 8443, [`TCP_RANGES`]) on
/// the open web VIPs 10.0.0.100 and [fd00::100].
fn restricted_vips() -> Snapshot {
    snapshot_with(|b| {
        for (name, ranges, port, proto) in [
            ("default/a", TCP_RANGES, 80, Proto::Tcp),
            ("default/b", UDP_RANGES, 53, Proto::Udp),
        ] {
            let id = b.service(restricted(name, &ranges)).unwrap();
            for vip in ["10.0.0.110", "fd00::110"] {
                b.frontend(
                    id,
                    FrontendSpec::new(v4(vip), port, proto, FrontendKind::ClusterIp),
                )
                .unwrap();
            }
            b.backend(id, BackendSpec::new(v4("10.1.0.11"), 8080)).unwrap();
            b.backend(id, BackendSpec::new(v4("fd01::11"), 8080)).unwrap();
        }
        let id = b.service(restricted("default/admin", &TCP_RANGES)).unwrap();
        for vip in ["10.0.0.100", "fd00::100"] {
            b.frontend(
                id,
                FrontendSpec::new(v4(vip), 8443, Proto::Tcp, FrontendKind::LoadBalancer),
            )
            .unwrap();
        }
        b.backend(id, BackendSpec::new(v4("10.1.0.11"), 8443)).unwrap();
    })
}

/// A SYN from `client`:40000 to `vip`:`port`, either family.
fn syn(client: &str, vip: &str, port: u16) -> Vec<u8> {
    if v4(client).is_ipv4() {
        tcp4((client, 40000), (vip, port), "S", 64, b"")
    } else {
        tcp6((client, 40000), (vip, port), "S", b"")
    }
}

/// Asserts that `frame`, after `v`, is the RST refusing the SYN from
/// `client`:40000 to `vip`:`port` ([`syn`]), checksums recomputed.
fn assert_rst(v: Verdict, frame: &[u8], client: &str, vip: &str, port: u16) {
    let Verdict::Transmit { port: 0, len } = v else {
        panic!("{client} → {vip}:{port}: a RST out of port 0, got {v:?}")
    };
    let out = &frame[..len];
    assert_checksums(out);
    let s = etherparse::SlicedPacket::from_ethernet(out).unwrap();
    let Some(etherparse::TransportSlice::Tcp(t)) = s.transport else {
        panic!("tcp")
    };
    assert!(t.rst() && t.ack(), "RST|ACK");
    assert_eq!((t.source_port(), t.destination_port()), (port, 40000));
    assert_eq!(
        t.acknowledgment_number(),
        if v4(client).is_ipv4() { 1001 } else { 8 }
    );
    let p = wire::parse(out).unwrap();
    assert_eq!((p.src, p.dst), (v4(vip), v4(client)));
    assert_eq!((&out[..6], &out[6..12]), (&CLIENT_MAC[..], &MAC0[..]));
}

/// Asserts the SYN from `client` to `vip`:`port` gets a RST.
fn refused(w: &mut Worker, snap: &Snapshot, client: &str, vip: &str, port: u16) {
    let mut f = syn(client, vip, port);
    let v = run(w, snap, 0, &mut f, 0);
    assert_rst(v, &f, client, vip, port);
}

/// Asserts the SYN from `client` to `vip`:`port` is dropped, unchanged
/// and unanswered, as `source_range_denied`.
fn silenced(w: &mut Worker, snap: &Snapshot, client: &str, vip: &str, port: u16) {
    let mut f = syn(client, vip, port);
    let before = f.clone();
    assert_eq!(
        run(w, snap, 0, &mut f, 0),
        Verdict::Drop(DropReason::SourceRangeDenied),
        "{client} → {vip}:{port}"
    );
    assert_eq!(f, before);
}

#[test]
fn a_client_some_service_on_the_vip_allows_gets_the_rst() {
    let snap = restricted_vips();
    let mut w = worker(1, 0);
    // Allowed by the TCP service, or by the UDP one only: either protocol's
    // service on the address counts.
    for (client, vip) in [
        (ALLOWED_TCP, "10.0.0.110"),
        (ALLOWED_UDP, "10.0.0.110"),
        (ALLOWED_TCP6, "fd00::110"),
        (ALLOWED_UDP6, "fd00::110"),
    ] {
        refused(&mut w, &snap, client, vip, 81);
        refused(&mut w, &snap, client, vip, 53);
    }
    assert_eq!(w.counters().resets_sent.get(), 8);
    assert_eq!(w.counters().drops_of(DropReason::SourceRangeDenied), 0);
}

#[test]
fn a_client_every_service_on_the_vip_denies_sees_silence_everywhere() {
    let snap = restricted_vips();
    let mut w = worker(1, 0);
    for vip in ["10.0.0.110", "fd00::110"] {
        let client = if v4(vip).is_ipv4() { DENIED } else { DENIED6 };
        // Served, closed TCP, and the UDP service's port over TCP: the
        // same drop, nothing sent.
        for port in [80, 81, 53, 65535] {
            silenced(&mut w, &snap, client, vip, port);
        }
        // A segment that is no SYN too.
        let mut f = if v4(vip).is_ipv4() {
            tcp4((client, 40000), (vip, 81), "A", 64, b"x")
        } else {
            tcp6((client, 40000), (vip, 81), "A", b"x")
        };
        assert_eq!(
            run(&mut w, &snap, 0, &mut f, 0),
            Verdict::Drop(DropReason::SourceRangeDenied)
        );
    }
    // UDP to a closed port stays `no_frontend`, as it was for everyone.
    let mut f = udp4((DENIED, 40000), ("10.0.0.110", 54), b"x");
    assert_eq!(
        run(&mut w, &snap, 0, &mut f, 0),
        Verdict::Drop(DropReason::NoFrontend)
    );
    assert_eq!(w.counters().resets_sent.get(), 0);
    assert_eq!(w.counters().drops_of(DropReason::SourceRangeDenied), 10);
    assert_eq!(w.conntrack().len(), 0);
}

#[test]
fn the_burst_path_refuses_alike() {
    let snap = restricted_vips();
    let cases = [
        (DENIED, "10.0.0.110", 81),
        (ALLOWED_TCP, "10.0.0.110", 81),
        (DENIED6, "fd00::110", 81),
        (ALLOWED_UDP6, "fd00::110", 81),
        (DENIED, "10.0.0.100", 81),
        (DENIED, "10.0.0.110", 80),
    ];
    let mut frames: Vec<Vec<u8>> = cases.iter().map(|&(c, v, p)| syn(c, v, p)).collect();
    let mut one = frames.clone();
    let metas = vec![meta(0); frames.len()];
    let mut verdicts = vec![Verdict::ToHost; frames.len()];
    let mut w = worker(1, 0);
    w.handle_burst(Tick(0), &snap, &mut frames, &metas, &mut verdicts);
    let mut each = worker(1, 0);
    for (i, f) in one.iter_mut().enumerate() {
        assert_eq!(run(&mut each, &snap, 0, f, 0), verdicts[i], "{:?}", cases[i]);
        assert_eq!(*f, frames[i]);
    }
    let denied = Verdict::Drop(DropReason::SourceRangeDenied);
    assert_eq!(
        verdicts.iter().map(|v| *v == denied).collect::<Vec<_>>(),
        [true, false, true, false, false, true]
    );
    assert_eq!(w.counters().resets_sent.get(), 3);
}

#[test]
fn one_open_service_on_the_vip_refuses_anyone() {
    // The web VIPs also carry a restricted service: the open one wins.
    let snap = restricted_vips();
    let mut w = worker(1, 0);
    for (client, vip) in [
        (DENIED, "10.0.0.100"),
        (ALLOWED_TCP, "10.0.0.100"),
        (DENIED6, "fd00::100"),
        (ALLOWED_TCP6, "fd00::100"),
    ] {
        refused(&mut w, &snap, client, vip, 81);
    }
    // While the restricted service's own port stays silent to the denied.
    silenced(&mut w, &snap, DENIED, "10.0.0.100", 8443);
    silenced(&mut w, &snap, DENIED6, "fd00::100", 8443);
}

#[test]
fn the_decision_follows_an_incremental_update_of_the_ranges() {
    let s1 = restricted_vips();
    let backends = || {
        vec![
            BackendSpec::new(v4("10.1.0.11"), 8080),
            BackendSpec::new(v4("fd01::11"), 8080),
        ]
    };
    let mut w = worker(1, 0);
    silenced(&mut w, &s1, DENIED, "10.0.0.110", 81);
    silenced(&mut w, &s1, DENIED6, "fd00::110", 81);
    // `default/b` (UDP) now takes the denied clients' prefixes: they may
    // be refused on every port of its addresses, the TCP ones included.
    let wider = restricted("default/b", &["10.0.0.0/24", "fd00::/64"]);
    let s2 = s1.with_services(2, vec![(wider, backends())]).unwrap();
    refused(&mut w, &s2, DENIED, "10.0.0.110", 81);
    refused(&mut w, &s2, DENIED6, "fd00::110", 81);
    // ... but no longer the clients it dropped.
    silenced(&mut w, &s2, ALLOWED_UDP, "10.0.0.110", 81);
    silenced(&mut w, &s2, ALLOWED_UDP6, "fd00::110", 81);
    refused(&mut w, &s2, ALLOWED_TCP, "10.0.0.110", 81);
    // `default/a` opened to everyone: every client is refused.
    let s3 = s2
        .with_services(3, vec![(ServiceSpec::new("default/a"), backends())])
        .unwrap();
    for (client, vip) in [(ALLOWED_UDP, "10.0.0.110"), (ALLOWED_UDP6, "fd00::110")] {
        refused(&mut w, &s3, client, vip, 81);
    }
    // Both restricted to what neither client holds: silence again.
    let a = restricted("default/a", &["198.51.100.0/24", "2001:db8::/32"]);
    let b = restricted("default/b", &["198.51.100.0/24", "2001:db8::/32"]);
    let s4 = s3
        .with_services(4, vec![(a, backends()), (b, backends())])
        .unwrap();
    for (client, vip) in [(DENIED, "10.0.0.110"), (DENIED6, "fd00::110")] {
        silenced(&mut w, &s4, client, vip, 81);
    }
}
