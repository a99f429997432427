//! Golden values of the Maglev contract (ring version 1).
//!
//! Every `lbd` node behind ECMP must map a flow to the same backend, also
//! while a fleet runs two versions during a rollout. These values pin the
//! whole chain: flow hashes, hash-to-slot reduction, backend permutations,
//! weighted population. If one of them changes, flows would move between
//! backends when packets of one connection reach nodes of different
//! versions. A deliberate change bumps `RING_VERSION` and updates this file.

use std::net::{IpAddr, Ipv6Addr};

use lb_dataplane::maglev::{
    client_hash, flow_hash_v4, flow_hash_v6, slot_for_hash, MaglevBackend, MaglevRing, DEFAULT_RING_SIZE,
    RING_VERSION,
};

const CHANGED: &str = "the Maglev ring changed: this would move established flows across a \
                       fleet running mixed versions; if intended, bump the ring version and \
                       document it";

/// 10.0.0.1..=10.0.0.5 port 80 (10.0.0.3 with weight 2) and two IPv6
/// backends on port 8080 with weights 3 and 1.
fn backends() -> Vec<MaglevBackend> {
    let mut v: Vec<MaglevBackend> = (1..=5)
        .map(|i| MaglevBackend::new(IpAddr::from([10, 0, 0, i]), 80, if i == 3 { 2 } else { 1 }))
        .collect();
    v.push(MaglevBackend::new("2001:db8::a".parse().unwrap(), 8080, 3));
    v.push(MaglevBackend::new("2001:db8::b".parse().unwrap(), 8080, 1));
    v
}

fn first_slots(ring: &MaglevRing) -> Vec<usize> {
    (0..32).map(|i| ring.slot(i).expect("no empty slot")).collect()
}

#[test]
fn ring_version_is_1() {
    assert_eq!(RING_VERSION, 1, "{CHANGED}");
}

#[test]
fn golden_ring_65537() {
    let ring = MaglevRing::build(&backends(), DEFAULT_RING_SIZE).unwrap();
    #[rustfmt::skip]
    let first = [
        5, 3, 5, 2, 5, 1, 0, 0, 2, 2, 5, 1, 2, 2, 6, 4,
        6, 1, 6, 4, 6, 2, 6, 1, 6, 4, 2, 0, 6, 1, 2, 2,
    ];
    assert_eq!(first_slots(&ring), first, "{CHANGED}");
    assert_eq!(
        ring.slot_counts(7),
        [6554, 6554, 13108, 6554, 6553, 19661, 6553],
        "{CHANGED}"
    );
    assert_eq!(ring.fingerprint(), 0x5026_c87e_4858_1252, "{CHANGED}");
}

#[test]
fn golden_ring_251() {
    let ring = MaglevRing::build(&backends(), 251).unwrap();
    #[rustfmt::skip]
    let first = [
        6, 1, 0, 5, 5, 0, 5, 2, 0, 2, 2, 5, 5, 4, 1, 0,
        6, 1, 5, 2, 2, 0, 2, 4, 1, 5, 5, 5, 0, 6, 1, 0,
    ];
    assert_eq!(first_slots(&ring), first, "{CHANGED}");
    assert_eq!(ring.slot_counts(7), [25, 25, 50, 25, 25, 76, 25], "{CHANGED}");
    assert_eq!(ring.fingerprint(), 0x4ccb_3725_9274_ccd1, "{CHANGED}");
}

/// The slice order changes the indices stored (and so the fingerprint),
/// never which backend a slot names.
#[test]
fn golden_ring_ignores_slice_order() {
    let fwd = backends();
    let mut rev = fwd.clone();
    rev.reverse();
    for size in [DEFAULT_RING_SIZE, 251] {
        let a = MaglevRing::build(&fwd, size).unwrap();
        let b = MaglevRing::build(&rev, size).unwrap();
        for i in 0..size {
            assert_eq!(fwd[a.slot(i).unwrap()], rev[b.slot(i).unwrap()], "{CHANGED}");
        }
    }
    let rev_ring = MaglevRing::build(&rev, DEFAULT_RING_SIZE).unwrap();
    assert_eq!(rev_ring.fingerprint(), 0x68bc_b16d_d8fa_9d82, "{CHANGED}");
}

#[test]
fn golden_flow_hashes() {
    let v4 = flow_hash_v4([10, 1, 2, 3], [192, 0, 2, 10], 40000, 443, 6);
    assert_eq!(v4, 0x1094_984f_8933_f382, "{CHANGED}");
    assert_eq!(
        flow_hash_v4([0; 4], [0; 4], 0, 0, 0),
        0x3386_9778_2b73_47d7,
        "{CHANGED}"
    );
    let s: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let d: Ipv6Addr = "2001:db8:ffff::10".parse().unwrap();
    assert_eq!(
        flow_hash_v6(s.octets(), d.octets(), 40000, 443, 17),
        0x4989_1c77_78f8_d063,
        "{CHANGED}"
    );
    assert_eq!(
        flow_hash_v6([0; 16], [0; 16], 0, 0, 0),
        0x5281_aff1_b183_48ed,
        "{CHANGED}"
    );
    assert_eq!(
        client_hash("10.1.2.3".parse().unwrap()),
        0xbcec_ec16_4071_f67f,
        "{CHANGED}"
    );
    assert_eq!(
        client_hash("2001:db8::1".parse().unwrap()),
        0x95d8_8d8f_de66_a126,
        "{CHANGED}"
    );
}

/// End to end: a fixed flow lands on a fixed slot and backend.
#[test]
fn golden_flow_to_backend() {
    let ring = MaglevRing::build(&backends(), DEFAULT_RING_SIZE).unwrap();
    let h = flow_hash_v4([10, 1, 2, 3], [192, 0, 2, 10], 40000, 443, 6);
    assert_eq!(slot_for_hash(h, DEFAULT_RING_SIZE), 4244, "{CHANGED}");
    assert_eq!(ring.lookup(h), Some(0), "{CHANGED}");
    assert_eq!(slot_for_hash(0, 251), 0, "{CHANGED}");
    assert_eq!(slot_for_hash(u64::MAX, 251), 250, "{CHANGED}");
    assert_eq!(slot_for_hash(1 << 63, 251), 125, "{CHANGED}");
}
