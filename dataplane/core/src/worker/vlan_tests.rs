//! Tagged ports: with a VLAN id on every port, a frame must carry its
//! port's id (else `vlan_mismatch`), forwarded frames leave with the egress
//! port's id (priority bits kept), and local answers keep the tag; on the
//! packet and burst paths alike. And the builder's checks.

use super::*;

/// Port 0 (clients) on VLAN 10, port 1 (backends) on VLAN 20.
fn tagged_snapshot() -> Snapshot {
    snapshot_with(|b| {
        b.vlan(0, 10).vlan(1, 20);
    })
}

/// `frame` with an 802.1Q tag `tci` after its MACs.
fn tag(mut frame: Vec<u8>, tci: u16) -> Vec<u8> {
    let t = tci.to_be_bytes();
    frame.splice(12..12, [0x81, 0x00, t[0], t[1]]);
    frame
}

/// The TCI of a tagged frame.
fn tci(frame: &[u8]) -> u16 {
    assert_eq!(frame[12..14], [0x81, 0x00], "tagged");
    u16::from_be_bytes([frame[14], frame[15]])
}

#[test]
fn forwarded_frames_take_the_egress_ports_vlan_both_ways() {
    let snap = tagged_snapshot();
    assert!(snap.vlan_tagged());
    assert_eq!(snap.port(1).and_then(|p| p.vlan()), Some(20));
    let mut w = worker(1, 0);
    // Priority 3 on VLAN 10.
    let mut syn = tag(
        tcp4(("10.0.0.2", 40000), ("10.0.0.100", 80), "S", 64, b""),
        0x600a,
    );
    let v = run(&mut w, &snap, 0, &mut syn, 0);
    let Verdict::Transmit { port: 1, len } = v else {
        panic!("to the backends' port: {v:?}")
    };
    let out = &syn[..len];
    assert_eq!(tci(out), 0x6014, "VLAN 20, priority kept");
    assert_checksums(out);
    let p = wire::parse(out).unwrap();
    assert_eq!((p.vlan, p.src), (Some(20), v4("10.1.0.100")));
    // The backend's answer on VLAN 20 goes back out on VLAN 10.
    let mut sa = tag(
        tcp4(
            (&p.dst.to_string(), p.dst_port),
            ("10.1.0.100", p.src_port),
            "SA",
            64,
            b"",
        ),
        20,
    );
    let v = run(&mut w, &snap, 1, &mut sa, 1);
    let Verdict::Transmit { port: 0, len } = v else {
        panic!("to the clients' port: {v:?}")
    };
    assert_eq!(tci(&sa[..len]), 10);
    assert_checksums(&sa[..len]);
    let r = wire::parse(&sa[..len]).unwrap();
    assert_eq!((r.src, r.src_port, r.dst), (v4("10.0.0.100"), 80, v4("10.0.0.2")));
}

/// A new connection from one of lbd's own addresses on a tagged port is
/// `own_source`, frame by frame and in a burst (the tagged fast path
/// declines it), in both modes.
#[test]
fn own_sources_are_refused_on_tagged_ports() {
    let snap = tagged_snapshot();
    let frames = [
        tag(tcp4(("10.1.0.100", 40000), ("10.0.0.100", 80), "S", 64, b""), 10),
        tag(udp4(("10.0.0.1", 40000), ("10.0.0.101", 53), b"query"), 10),
    ];
    let mut w = worker(1, 0);
    for f in &frames {
        assert_eq!(
            run(&mut w, &snap, 0, &mut f.clone(), 0),
            Verdict::Drop(DropReason::OwnSource)
        );
    }
    let mut copies = frames.to_vec();
    let mut out = [Verdict::ToHost; 2];
    w.handle_burst(Tick(0), &snap, &mut copies, &[meta(0); 2], &mut out);
    assert_eq!(out, [Verdict::Drop(DropReason::OwnSource); 2]);
    assert_eq!(w.conntrack().len(), 0);
}

#[test]
fn frames_without_their_ports_vlan_are_dropped_on_both_paths() {
    let snap = tagged_snapshot();
    let syn = || tcp4(("10.0.0.2", 40000), ("10.0.0.100", 80), "S", 64, b"");
    let cases = [
        (syn(), "untagged"),
        (tag(syn(), 20), "the other port's VLAN"),
        (tag(syn(), 0x2000), "priority-tagged (VLAN 0)"),
    ];
    for (frame, what) in &cases {
        let mut w = worker(1, 0);
        let mut f = frame.clone();
        assert_eq!(
            run(&mut w, &snap, 0, &mut f, 0),
            Verdict::Drop(DropReason::VlanMismatch),
            "{what}"
        );
        assert_eq!(f, *frame, "{what}: untouched");
        assert_eq!(w.counters().drops_of(DropReason::VlanMismatch), 1, "{what}");
        assert_eq!(w.conntrack().len(), 0, "{what}: nothing opened");
    }
    // The burst path, with a good frame among them.
    let mut w = worker(1, 0);
    let mut frames: Vec<Vec<u8>> = cases.iter().map(|(f, _)| f.clone()).collect();
    frames.push(tag(syn(), 10));
    let metas = vec![meta(0); frames.len()];
    let mut verdicts = vec![Verdict::ToHost; frames.len()];
    w.handle_burst(Tick(0), &snap, &mut frames, &metas, &mut verdicts);
    assert_eq!(verdicts[..3], [Verdict::Drop(DropReason::VlanMismatch); 3]);
    assert!(
        matches!(verdicts[3], Verdict::Transmit { port: 1, .. }),
        "{verdicts:?}"
    );
    assert_eq!(tci(&frames[3]), 20);
    // An untagged node takes untagged frames, and forwards tagged ones
    // with their tag (as before VLAN ids existed).
    let plain = snapshot();
    assert!(!plain.vlan_tagged());
    let mut w = worker(1, 0);
    let mut f = tag(syn(), 10);
    assert!(matches!(
        run(&mut w, &plain, 0, &mut f, 0),
        Verdict::Transmit { port: 1, .. }
    ));
    assert_eq!(tci(&f), 10);
}

#[test]
fn the_tag_is_checked_before_the_parse() {
    let snap = tagged_snapshot();
    let mut w = worker(1, 0);
    // LLDP (0x88cc): untagged, as switches send it on trunks, or of
    // another VLAN, it is not this port's; on the port's VLAN it is what
    // the parse says.
    let lldp = |tci: Option<u16>| {
        let mut f = vec![0x01, 0x80, 0xc2, 0, 0, 0x0e];
        f.extend_from_slice(&CLIENT_MAC);
        if let Some(t) = tci {
            f.extend_from_slice(&[0x81, 0x00]);
            f.extend_from_slice(&t.to_be_bytes());
        }
        f.extend_from_slice(&[0x88, 0xcc]);
        f.resize(64, 0);
        f
    };
    for (tci, want) in [
        (None, DropReason::VlanMismatch),
        (Some(20), DropReason::VlanMismatch),
        (Some(10), DropReason::UnsupportedEtherType),
    ] {
        let mut f = lldp(tci);
        assert_eq!(run(&mut w, &snap, 0, &mut f, 0), Verdict::Drop(want), "{tci:?}");
    }
    // A frame too short to hold a tag.
    assert_eq!(
        run(&mut w, &snap, 0, &mut [0u8; 13], 0),
        Verdict::Drop(DropReason::VlanMismatch)
    );
}

#[test]
fn resets_and_held_frames_carry_their_ports_vlan() {
    // The RST for a VIP port without a frontend goes back on VLAN 10.
    let snap = tagged_snapshot();
    let mut w = worker(1, 0);
    let mut syn = tag(
        tcp4(("10.0.0.2", 40000), ("10.0.0.100", 81), "S", 64, b""),
        0x200a,
    );
    let v = run(&mut w, &snap, 0, &mut syn, 0);
    let Verdict::Transmit { port: 0, len } = v else {
        panic!("a RST: {v:?}")
    };
    assert_eq!(tci(&syn[..len]), 0x200a);
    assert_checksums(&syn[..len]);
    assert_eq!(w.counters().resets_sent.get(), 1);
    // With no neighbor known, the translated SYN waits for the backend's
    // MAC already tagged for VLAN 20 (the shell only writes the MAC).
    let unresolved = snap.with_neighbors(&[]).unwrap();
    let mut w = worker(1, 0);
    let mut syn = tag(tcp4(("10.0.0.2", 40000), ("10.0.0.100", 80), "S", 64, b""), 10);
    let v = run(&mut w, &unresolved, 0, &mut syn, 0);
    let Verdict::Resolve { port: 1, len, .. } = v else {
        panic!("held for the backend's MAC: {v:?}")
    };
    assert_eq!(tci(&syn[..len]), 20);
    assert_checksums(&syn[..len]);
}

#[test]
fn local_answers_keep_the_tag() {
    let snap = tagged_snapshot();
    let mut w = worker(1, 0);
    let mut buf = [0u8; 64];
    let n = crate::local::write_arp_request(
        &mut buf,
        crate::wire::MacAddr(CLIENT_MAC),
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 0, 1),
        Some(10),
    )
    .unwrap();
    let mut req = buf[..n].to_vec();
    let v = run(&mut w, &snap, 0, &mut req, 0);
    let Verdict::Transmit { port: 0, len } = v else {
        panic!("an ARP reply: {v:?}")
    };
    assert_eq!(tci(&req[..len]), 10);
    let p = wire::parse(&req[..len]).unwrap();
    assert_eq!((p.l3, p.vlan), (L3::Arp, Some(10)));
    // The same request untagged is not this port's.
    let n = crate::local::write_arp_request(
        &mut buf,
        crate::wire::MacAddr(CLIENT_MAC),
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 0, 1),
        None,
    )
    .unwrap();
    assert_eq!(
        run(&mut w, &snap, 0, &mut buf[..n], 0),
        Verdict::Drop(DropReason::VlanMismatch)
    );
}

#[test]
fn the_builder_refuses_unusable_vlans() {
    let build = |f: &dyn Fn(&mut SnapshotBuilder)| {
        let mut b = ports_and_neighbors(1);
        f(&mut b);
        b.build().map(|_| ()).map_err(|e| e.to_string())
    };
    assert_eq!(
        build(&|b| {
            b.vlan(0, 10).vlan(1, 10);
        }),
        Ok(()),
        "one VLAN on both ports is fine"
    );
    for (f, want) in [
        (
            &(|b: &mut SnapshotBuilder| {
                b.vlan(0, 0).vlan(1, 20);
            }) as &dyn Fn(&mut SnapshotBuilder),
            "port 0: field vlan: 0: not a VLAN id (1-4094)",
        ),
        (
            &|b: &mut SnapshotBuilder| {
                b.vlan(0, 10).vlan(1, 4095);
            },
            "port 1: field vlan: 4095: not a VLAN id (1-4094)",
        ),
        (
            &|b: &mut SnapshotBuilder| {
                b.vlan(0, 10).vlan(1, 20).vlan(2, 30);
            },
            "port 2: field vlan: 30: the port has no interface",
        ),
        (
            &|b: &mut SnapshotBuilder| {
                b.vlan(0, 10).vlan(1, 20).vlan(0, 11);
            },
            "port 0: field vlan: 11: the port has another VLAN already",
        ),
        (
            &|b: &mut SnapshotBuilder| {
                b.vlan(0, 10);
            },
            "port 1: field vlan: none, but another port has one: set a VLAN on every port or on none",
        ),
    ] {
        assert_eq!(build(f), Err(want.to_string()));
    }
    // Neighbor updates keep the ports' VLANs.
    let snap = tagged_snapshot();
    let next = snap.with_neighbors(&[(v4("10.1.0.11"), BACKEND_MAC)]).unwrap();
    assert!(next.vlan_tagged());
    assert_eq!(next.port(0).and_then(|p| p.vlan()), Some(10));
}
