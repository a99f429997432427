//! New connections that no router would forward: from a source that names
//! no host or a link-local one (`martian_source`), or in a link-layer
//! broadcast or multicast frame (`link_broadcast`). Nothing is opened for
//! them, over either path, and the same packets from a host open.

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
        "240.0.0.1",
        "255.255.255.255",
    ] {
        frames.push(tcp4((src, 40000), ("10.0.0.100", 80), "S", 64, b""));
        frames.push(udp4((src, 40000), ("10.0.0.101", 53), b"query"));
    }
    for src in ["::", "::1", "fe80::1", "ff02::1"] {
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
        tcp6(("fd00::2", 40000), ("fd00::100", 80), "S", b""),
        tcp6(("fec0::1", 40000), ("fd00::100", 80), "S", b""),
    ];
    let mut w = worker(1, 0);
    for f in &frames {
        let v = run(&mut w, &snap, 0, &mut f.clone(), 0);
        assert!(matches!(v, Verdict::Transmit { port: 1, .. }), "{v:?}");
    }
    assert_eq!(w.conntrack().len(), frames.len());
}
