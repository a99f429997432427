//! Tests of [`super::echo_options_v4`] through [`super::handle_local`]: IPv4
//! echo requests carrying options, their replies read back with etherparse
//! and every checksum recomputed.

use super::tests::{assert_checksums_valid, echo_v4_frame, local, OUR_V4, PEER_V4};
use super::*;
use crate::wire::ipv4::option;
use etherparse::SlicedPacket;
use proptest::collection::vec;
use proptest::prelude::*;

const NOW: Tick = Tick(0x1_2345_6789);
/// `NOW` as the timestamp option carries it: milliseconds, high bit set.
const STAMP: [u8; 4] = (0x8000_0000u32 | 0x2345_6789).to_be_bytes();
const R1: [u8; 4] = [203, 0, 113, 1];
const R2: [u8; 4] = [203, 0, 113, 2];
const R3: [u8; 4] = [203, 0, 113, 3];

/// The untagged echo request with `opts` (a multiple of 4 bytes) after its
/// IPv4 header, lengths and header checksum fixed.
fn with_options(opts: &[u8]) -> Vec<u8> {
    assert_eq!(opts.len() % 4, 0);
    let mut f = echo_v4_frame(None);
    f.splice(34..34, opts.iter().copied());
    f[14] = 0x45 + (opts.len() / 4) as u8;
    let total = u16::from_be_bytes([f[16], f[17]]) + opts.len() as u16;
    f[16..18].copy_from_slice(&total.to_be_bytes());
    let mut ip = Ipv4Packet::new_checked(&mut f[14..]).unwrap();
    ip.fill_checksum();
    f
}

/// The reply to `f`: (its IPv4 destination, its options), after checking
/// it is a whole echo reply from `OUR_V4` with the request's data.
fn answer(mut f: Vec<u8>) -> (Ipv4Addr, Vec<u8>) {
    let v = handle_local(NOW, &mut f, &local());
    let LocalVerdict::Reply { len } = v else {
        panic!("expected a reply, got {v:?}")
    };
    let f = &f[..len];
    assert_checksums_valid(f);
    let s = SlicedPacket::from_ethernet(f).unwrap();
    let Some(etherparse::NetSlice::Ipv4(ip)) = &s.net else {
        panic!("not IPv4")
    };
    let h = ip.header();
    assert_eq!((h.source_addr(), h.ttl()), (OUR_V4, REPLY_TTL));
    assert_eq!(&f[len - 8..], b"abcdefgh", "data echoed");
    (h.destination_addr(), h.options().to_vec())
}

fn drop_of(mut f: Vec<u8>) -> LocalVerdict {
    handle_local(NOW, &mut f, &local())
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn a_spent_source_route_comes_back_reversed() {
    // Loose, three hops recorded: back through r3, r2, r1 to the peer.
    let req = cat(&[&[option::LSRR, 15, 16], &R1, &R2, &R3, &[option::NOP]]);
    let (to, opts) = answer(with_options(&req));
    assert_eq!(to, Ipv4Addr::from(R3), "first hop back: the route's last");
    assert_eq!(
        opts,
        cat(&[
            &[option::LSRR, 15, 4],
            &R2,
            &R1,
            &PEER_V4.octets(),
            &[option::NOP]
        ])
    );
    // Strict, two hops: the type is kept.
    let req = cat(&[&[option::NOP, option::SSRR, 11, 12], &R1, &R2]);
    let (to, opts) = answer(with_options(&req));
    assert_eq!(to, Ipv4Addr::from(R2));
    assert_eq!(
        opts,
        cat(&[&[option::NOP, option::SSRR, 11, 4], &R1, &PEER_V4.octets()])
    );
    // One hop, four: back to the requester through it.
    let (to, opts) = answer(with_options(&cat(&[&[option::LSRR, 7, 8], &R1, &[0]])));
    assert_eq!(to, Ipv4Addr::from(R1));
    assert_eq!(opts, cat(&[&[option::LSRR, 7, 4], &PEER_V4.octets(), &[0]]));
    let r = |n: u8| [10, 0, 0, n];
    let route: Vec<u8> = (1..=4).flat_map(r).collect();
    let (to, opts) = answer(with_options(&cat(&[&[option::LSRR, 19, 20], &route, &[0]])));
    assert_eq!(to, Ipv4Addr::from(r(4)));
    assert_eq!(
        opts,
        cat(&[
            &[option::LSRR, 19, 4],
            &r(3),
            &r(2),
            &r(1),
            &PEER_V4.octets(),
            &[0]
        ])
    );
    // An empty route: nothing to reverse.
    let (to, opts) = answer(with_options(&[option::LSRR, 3, 4, 0]));
    assert_eq!((to, opts), (PEER_V4, vec![option::LSRR, 3, 4, 0]));
    // The requester as the first hop (an illegal route): listed once, the
    // option 4 bytes shorter and padded with no-operations.
    let req = cat(&[&[option::LSRR, 11, 12], &PEER_V4.octets(), &R2, &[0]]);
    let (to, opts) = answer(with_options(&req));
    assert_eq!(to, Ipv4Addr::from(R2));
    assert_eq!(
        opts,
        cat(&[&[option::LSRR, 7, 4], &PEER_V4.octets(), &[option::NOP; 4], &[0]])
    );
    let (to, opts) = answer(with_options(&cat(&[
        &[option::SSRR, 7, 8],
        &PEER_V4.octets(),
        &[0],
    ])));
    assert_eq!(to, PEER_V4);
    assert_eq!(opts, cat(&[&[option::SSRR, 3, 4], &[option::NOP; 4], &[0]]));
    // A tagged request: the same, after the tag.
    let mut f = echo_v4_frame(Some(9));
    let opts = cat(&[&[option::LSRR, 11, 12], &R1, &R2, &[0]]);
    f.splice(38..38, opts.iter().copied());
    f[18] = 0x48;
    let total = u16::from_be_bytes([f[20], f[21]]) + 12;
    f[20..22].copy_from_slice(&total.to_be_bytes());
    Ipv4Packet::new_checked(&mut f[18..]).unwrap().fill_checksum();
    let LocalVerdict::Reply { len } = handle_local(NOW, &mut f, &local()) else {
        panic!("no reply")
    };
    assert_checksums_valid(&f[..len]);
    assert_eq!(&f[34..38], &R2, "to the last hop");
    assert_eq!(
        &f[38..50],
        &cat(&[&[option::LSRR, 11, 4], &R1, &PEER_V4.octets(), &[0]])[..]
    );
}

#[test]
fn record_route_gets_our_address_where_there_is_room() {
    let req = cat(&[&[option::RR, 11, 8], &R1, &[0; 4], &[option::END]]);
    let (to, opts) = answer(with_options(&req));
    assert_eq!(to, PEER_V4);
    assert_eq!(
        opts,
        cat(&[&[option::RR, 11, 12], &R1, &OUR_V4.octets(), &[option::END]])
    );
    // Full: unchanged.
    let req = cat(&[&[option::RR, 7, 8], &R1, &[option::END]]);
    assert_eq!(answer(with_options(&req)).1, req);
}

#[test]
fn timestamps_are_added_or_counted_as_overflow() {
    // Timestamps only.
    let req = cat(&[&[option::TIMESTAMP, 12, 5, 0], &[0; 8]]);
    let opts = answer(with_options(&req)).1;
    assert_eq!(opts, cat(&[&[option::TIMESTAMP, 12, 9, 0], &STAMP, &[0; 4]]));
    // Address and timestamp.
    let req = cat(&[&[option::TIMESTAMP, 12, 5, 1], &[0; 8]]);
    let opts = answer(with_options(&req)).1;
    assert_eq!(
        opts,
        cat(&[&[option::TIMESTAMP, 12, 13, 1], &OUR_V4.octets(), &STAMP])
    );
    // Prespecified: stamped where our address is next, not elsewhere.
    let req = cat(&[
        &[option::TIMESTAMP, 20, 5, 3],
        &OUR_V4.octets(),
        &[0; 4],
        &R1,
        &[0; 4],
    ]);
    let opts = answer(with_options(&req)).1;
    assert_eq!(
        opts,
        cat(&[
            &[option::TIMESTAMP, 20, 13, 3],
            &OUR_V4.octets(),
            &STAMP,
            &R1,
            &[0; 4]
        ])
    );
    let req = cat(&[&[option::TIMESTAMP, 12, 5, 3], &R1, &[0; 4]]);
    assert_eq!(answer(with_options(&req)).1, req);
    // Full: the overflow count goes up (from 2 to 3), but not for
    // prespecified addresses (as in Linux).
    let req = cat(&[&[option::TIMESTAMP, 8, 9, 0x20], &[1, 2, 3, 4]]);
    let opts = answer(with_options(&req)).1;
    assert_eq!(opts, cat(&[&[option::TIMESTAMP, 8, 9, 0x30], &[1, 2, 3, 4]]));
    let req = cat(&[&[option::TIMESTAMP, 12, 13, 0x01], &R1, &[1, 2, 3, 4]]);
    let opts = answer(with_options(&req)).1;
    assert_eq!(
        opts,
        cat(&[&[option::TIMESTAMP, 12, 13, 0x11], &R1, &[1, 2, 3, 4]])
    );
    let req = cat(&[
        &[option::TIMESTAMP, 12, 13, 0x53],
        &OUR_V4.octets(),
        &[1, 2, 3, 4],
    ]);
    assert_eq!(answer(with_options(&req)).1, req);
    // A flag RFC 791 does not define: echoed as it came, as Linux does.
    let req = cat(&[&[option::TIMESTAMP, 12, 5, 2], &[0; 8]]);
    assert_eq!(answer(with_options(&req)).1, req);
}

#[test]
fn other_options_are_echoed_and_several_are_handled_together() {
    // A router alert (type 148) and a record route and a timestamp.
    let req = cat(&[
        &[148, 4, 0, 0],
        &[option::RR, 7, 4],
        &[0; 4],
        &[option::TIMESTAMP, 8, 5, 0],
        &[0; 4],
        &[option::NOP],
    ]);
    let (to, opts) = answer(with_options(&req));
    assert_eq!(to, PEER_V4);
    assert_eq!(
        opts,
        cat(&[
            &[148, 4, 0, 0],
            &[option::RR, 7, 8],
            &OUR_V4.octets(),
            &[option::TIMESTAMP, 8, 9, 0],
            &STAMP,
            &[option::NOP],
        ])
    );
}

#[test]
fn options_outside_their_rules_are_dropped() {
    let malformed = LocalVerdict::Drop(DropReason::MalformedIpv4);
    for (what, opts) in [
        (
            "two source routes",
            cat(&[&[option::LSRR, 7, 8], &R1, &[option::SSRR, 7, 8], &R2, &[0, 0]]),
        ),
        (
            "an empty source route, then another",
            cat(&[&[option::LSRR, 3, 4, option::SSRR, 7, 8], &R2, &[0, 0]]),
        ),
        (
            "two record routes",
            cat(&[&[option::RR, 7, 4], &[0; 4], &[option::RR, 3, 4, 0, 0]]),
        ),
        (
            "two timestamps",
            cat(&[&[option::TIMESTAMP, 4, 5, 0], &[option::TIMESTAMP, 4, 5, 0]]),
        ),
        (
            "a route of part of an address",
            cat(&[&[option::LSRR, 9, 10], &R1, &[1, 2, 0, 0, 0]]),
        ),
        (
            "record route pointer below 4",
            cat(&[&[option::RR, 7, 3], &R1, &[0]]),
        ),
        (
            "record route room for part of an address",
            cat(&[&[option::RR, 9, 8], &R1, &[0, 0, 0, 0, 0]]),
        ),
        ("timestamp without its flags", vec![option::TIMESTAMP, 3, 5, 0]),
        (
            "timestamp pointer below 5",
            cat(&[&[option::TIMESTAMP, 8, 4, 0], &[0; 4]]),
        ),
        (
            "timestamp room for half an entry",
            cat(&[&[option::TIMESTAMP, 12, 9, 1], &[0; 8]]),
        ),
        (
            "timestamp overflow count at 15",
            cat(&[&[option::TIMESTAMP, 8, 9, 0xf0], &[0; 4]]),
        ),
        ("record route of length 2", vec![option::RR, 2, 0, 0]),
    ] {
        assert_eq!(drop_of(with_options(&opts)), malformed, "{what}");
    }
    // A first hop back that is no host: refused as the requester would be.
    for bad in [[255, 255, 255, 255], [0, 0, 0, 0], [224, 0, 0, 1], [127, 0, 0, 1]] {
        let opts = cat(&[&[option::LSRR, 7, 8], &bad, &[0]]);
        assert_eq!(
            drop_of(with_options(&opts)),
            LocalVerdict::Drop(DropReason::LocalUnhandled),
            "{bad:?}"
        );
    }
    // A route with addresses left never gets here: the parse refuses it.
    let opts = cat(&[&[option::LSRR, 11, 8], &R1, &R2, &[0]]);
    assert_eq!(
        drop_of(with_options(&opts)),
        LocalVerdict::Drop(DropReason::Ipv4SourceRoute)
    );
}

/// Options of the kinds `echo_options_v4` rewrites, with lengths, pointers
/// and flags near their limits, in random order and padding: `words` of 4
/// bytes in all.
fn options() -> impl Strategy<Value = Vec<u8>> {
    let one = (
        prop::sample::select(vec![
            option::LSRR,
            option::SSRR,
            option::RR,
            option::TIMESTAMP,
            148,
            option::NOP,
        ]),
        0u8..=20,
        0u8..=24,
        any::<u8>(),
        vec(any::<u8>(), 16),
    )
        .prop_map(|(kind, len, ptr, flags, body)| {
            if kind == option::NOP {
                return vec![kind];
            }
            let mut o = vec![kind, len, ptr, flags];
            o.extend(body);
            o.truncate(usize::from(len).max(2));
            o
        });
    vec(one, 0..4).prop_map(|os| {
        let mut v = os.concat();
        v.truncate(40);
        v.resize(v.len().div_ceil(4) * 4, 0);
        v
    })
}

proptest! {
    /// Whatever the options, an answer is a well-formed reply (checksums
    /// right, the header as long as the request's) and nothing panics.
    #[test]
    fn any_options_get_a_verdict(opts in prop_oneof![
        (0..=10usize).prop_flat_map(|words| vec(any::<u8>(), words * 4)),
        options(),
    ]) {
        let f = with_options(&opts);
        let mut g = f.clone();
        if let LocalVerdict::Reply { len } = handle_local(NOW, &mut g, &local()) {
            prop_assert_eq!(len, f.len());
            assert_checksums_valid(&g[..len]);
            prop_assert_eq!(g[14], f[14]);
        }
    }
}
