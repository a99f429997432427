//! Replays the `handle_packet` fuzz corpus (and crash artifacts, if any)
//! through the pipeline with the fuzz target's own harness
//! (`dataplane/fuzz/src/harness.rs`): no input may panic, every one must
//! get verdicts, with every neighbor resolved and with none. Fails on an
//! empty corpus, so it cannot pass vacuously.
//!
//! Replays the `burst` corpus the same way with its harness
//! (`dataplane/fuzz/src/burst.rs`: `handle_burst` against `handle_packet`),
//! comparing the workers' whole state at the end of each input too, on
//! the untagged fixtures and on VLANs 10 and 20 (every frame arriving with
//! its port's tag), and fails unless the corpus, together, opens
//! connections (tagged too), evicts, answers
//! forwarded frames, translates ICMP errors quoting them, sends tagged,
//! optioned and fragmented client frames and runs the staged lookups.
//!
//! The seed corpus is generated, not hand-written: run
//! `cargo test -p lb-dataplane --test corpus_replay -- --ignored write_seed_corpus`
//! to rewrite it from the etherparse-built frames below.

#[path = "../../fuzz/src/burst.rs"]
mod burst;
#[path = "golden/fixture.rs"]
mod fixture;
#[path = "../../fuzz/src/harness.rs"]
mod harness;
#[path = "../../fuzz/src/oracle.rs"]
mod oracle;
#[path = "golden/pkt.rs"]
mod pkt;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use etherparse::{
    icmpv4::{DestUnreachableHeader, TimeExceededCode},
    icmpv6::NeighborAdvertisementHeader,
    Icmpv4Type, Icmpv6Type,
};
use fixture::*;
use pkt::{Arp, Ep, Frag, Pkt};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = rd
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn replay_handle_packet_corpus() {
    let corpus = fuzz_dir().join("corpus/handle_packet");
    let seeds = files_in(&corpus);
    assert!(
        seeds.len() >= 24,
        "{} holds {} inputs; regenerate it (see the module doc)",
        corpus.display(),
        seeds.len()
    );
    let mut inputs = seeds;
    inputs.extend(files_in(&fuzz_dir().join("artifacts/handle_packet")));
    // The fuzzer's fixtures, and the first with no neighbor known, so that
    // every translated frame also takes the `Resolve` path.
    let mut checked = 0;
    let mut tagged_checked = 0;
    for fixture in [Fixture::TwoPort, Fixture::NoNeighbors, Fixture::Tagged] {
        let snap = fixture.snapshot();
        for path in &inputs {
            let data = std::fs::read(path).unwrap();
            let result = std::panic::catch_unwind(|| harness::run(snap, &data));
            match result {
                Ok(ran) => {
                    assert!(ran.verdicts > 0, "{} ({fixture:?}): no verdict", path.display());
                    checked += ran.checked;
                    if matches!(fixture, Fixture::Tagged) {
                        tagged_checked += ran.checked;
                    }
                }
                Err(_) => panic!("{} ({fixture:?}) panics (see above)", path.display()),
            }
        }
    }
    // The oracle looked at frames sent (it is not skipped for every one).
    eprintln!("handle_packet corpus: {checked} frames sent checked by the oracle ({tagged_checked} tagged)");
    assert!(checked >= 100, "the oracle checked only {checked} frames sent");
    // Tagged frames are translated and sent too, not all vlan_mismatch.
    assert!(
        tagged_checked >= 30,
        "the oracle checked only {tagged_checked} tagged frames sent"
    );
}

#[test]
fn replay_burst_corpus() {
    let corpus = fuzz_dir().join("corpus/burst");
    let seeds = files_in(&corpus);
    assert!(
        seeds.len() >= 16,
        "{} holds {} inputs; regenerate it (`write_burst_seed_corpus`)",
        corpus.display(),
        seeds.len()
    );
    let mut inputs = seeds;
    inputs.extend(files_in(&fuzz_dir().join("artifacts/burst")));
    let mut total = burst::Reached::default();
    // On the tagged fixture: connections opened and answered.
    let mut tagged = (0, 0);
    for fixture in [Fixture::TwoPort, Fixture::NoNeighbors, Fixture::Tagged] {
        let snap = fixture.snapshot();
        for path in &inputs {
            let data = std::fs::read(path).unwrap();
            let r = std::panic::catch_unwind(|| burst::run(snap, &data))
                .unwrap_or_else(|_| panic!("{} ({fixture:?}) fails (see above)", path.display()));
            if matches!(fixture, Fixture::Tagged) {
                tagged.0 += r.new_connections;
                tagged.1 += r.answers;
            }
            total.bursts += r.bursts;
            total.frames += r.frames;
            total.new_connections += r.new_connections;
            total.evictions += r.evictions;
            total.answers += r.answers;
            total.prefetches += r.prefetches;
            total.icmp_translated += r.icmp_translated;
            total.variant_frames += r.variant_frames;
            total.oracle_checked += r.oracle_checked;
        }
    }
    eprintln!("burst corpus: {total:?}");
    assert!(
        total.new_connections > 0
            && total.evictions > 0
            && total.answers > 0
            && total.prefetches > 0
            && total.icmp_translated > 0
            && total.variant_frames > 0
            && total.oracle_checked > 0,
        "the burst corpus no longer reaches what it is for: {total:?}"
    );
    assert!(
        tagged.0 > 0 && tagged.1 > 0,
        "tagged: no connection opened or answered: {tagged:?}"
    );
}

/// Writes the `burst` seed corpus: inputs of pseudo-random bytes (a fixed
/// xorshift), which the harness reads as a program of bursts, so even
/// these reach evictions and answers; the fuzzer grows the corpus from
/// there.
#[test]
#[ignore]
fn write_burst_seed_corpus() {
    let dir = fuzz_dir().join("corpus/burst");
    std::fs::create_dir_all(&dir).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..16 {
        let len = 64 << (i % 5);
        let data: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        std::fs::write(dir.join(format!("seed-{i:02}")), data).unwrap();
    }
}

/// The seed frames: name → bytes.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add = |name: &str, f: Vec<u8>| out.push((name.to_string(), f));
    let c = |p: Pkt| p.macs(CLIENT_MAC, MAC0);
    let b = |p: Pkt| p.macs(BACKEND_MAC, MAC1);
    let ep = |a: &'static str, p: u16| -> Ep { (a, p) };
    let fams: [(&str, &str, &str, &str, &str, &str, &str); 2] = [
        ("4", C4, "10.0.0.", SNAT4, "10.1.0.", ROUTER4, "10.0.0.1"),
        ("6", C6, "fd00::", SNAT6, "fd01::", ROUTER6, "fd00::1"),
    ];
    for (v, client, vip, snat, be, router, iface) in fams {
        // Leaked so the builder's `&'static str` endpoints can name them.
        let vip = |x: u32| -> &'static str { Box::leak(format!("{vip}{x}").into_boxed_str()) };
        let be = |x: u32| -> &'static str { Box::leak(format!("{be}{x}").into_boxed_str()) };
        let web = c(Pkt::tcp(ep(client, 40000), ep(vip(100), 80), "S"));
        add(&format!("tcp{v}-fullnat-syn"), web.frame());
        add(
            &format!("tcp{v}-fullnat-synack"),
            b(Pkt::tcp(ep(be(11), 8080), ep(snat, 20000), "SA")).frame(),
        );
        add(
            &format!("tcp{v}-fullnat-data"),
            c(Pkt::tcp(ep(client, 40000), ep(vip(100), 80), "AP").payload(b"GET / HTTP/1.1\r\n\r\n")).frame(),
        );
        add(
            &format!("tcp{v}-fullnat-fin"),
            c(Pkt::tcp(ep(client, 40000), ep(vip(100), 80), "FA")).frame(),
        );
        add(
            &format!("tcp{v}-fullnat-rst"),
            b(Pkt::tcp(ep(be(11), 8080), ep(snat, 20000), "R")).frame(),
        );
        add(
            &format!("tcp{v}-dnat-syn"),
            c(Pkt::tcp(ep(client, 41000), ep(vip(101), 80), "S")).frame(),
        );
        add(
            &format!("tcp{v}-dnat-reply"),
            b(Pkt::tcp(ep(be(12), 8080), ep(client, 41000), "SA")).frame(),
        );
        add(
            &format!("udp{v}-dnat-query"),
            c(Pkt::udp(ep(client, 5300), ep(vip(102), 53), b"query")).frame(),
        );
        add(
            &format!("udp{v}-dnat-answer"),
            b(Pkt::udp(ep(be(13), 5353), ep(client, 5300), b"answer")).frame(),
        );
        add(
            &format!("udp{v}-fullnat"),
            c(Pkt::udp(ep(client, 6000), ep(vip(103), 514), b"<13>log")).frame(),
        );
        add(
            &format!("udp{v}-fullnat-reply"),
            b(Pkt::udp(ep(be(11), 5514), ep(snat, 20000), b"ok")).frame(),
        );
        // Too big for the Tagged fixture's port 1 (MTU 1,280) both ways,
        // fitting TwoPort's 1,500.
        add(
            &format!("udp{v}-dnat-query-too-big"),
            c(Pkt::udp(ep(client, 5301), ep(vip(102), 53), &[0x5a; 1300])).frame(),
        );
        add(
            &format!("tcp{v}-fullnat-data-too-big"),
            c(Pkt::tcp(ep(client, 40000), ep(vip(100), 80), "AP").payload(&[0x33; 1300])).frame(),
        );
        add(
            &format!("udp{v}-dnat-answer-too-big"),
            b(Pkt::udp(ep(be(13), 5353), ep(client, 5300), &[0xa5; 1360])).frame(),
        );
        add(&format!("tcp{v}-vlan-syn"), web.clone().vlan(100).frame());
        add(&format!("tcp{v}-ttl1"), web.clone().ttl(1).frame());
        add(&format!("tcp{v}-padded"), web.clone().pad(30).frame());
        add(
            &format!("tcp{v}-no-frontend"),
            c(Pkt::tcp(ep(client, 1), ep(vip(100), 81), "S")).frame(),
        );
        add(
            &format!("tcp{v}-no-backend"),
            c(Pkt::tcp(ep(client, 1), ep(vip(104), 80), "S")).frame(),
        );
        add(
            &format!("tcp{v}-source-range"),
            c(Pkt::tcp(ep(client, 1), ep(vip(105), 80), "S")).frame(),
        );
        add(
            &format!("tcp{v}-to-host"),
            c(Pkt::tcp(ep(client, 50000), ep(iface, 179), "S")).frame(),
        );
        add(
            &format!("tcp{v}-pool"),
            c(Pkt::tcp(ep(client, 40000), ep(vip(106), 80), "S")).frame(),
        );
        let big = c(Pkt::udp(ep(client, 5400), ep(vip(102), 53), &[0x5a; 100])).ident(0x1234);
        add(
            &format!("udp{v}-frag-first"),
            big.clone().frag(Frag::First { len: 64 }).frame(),
        );
        add(
            &format!("udp{v}-frag-last"),
            big.frag(Frag::Last { offset: 64 }).frame(),
        );
        add(
            &format!("icmp{v}-echo-vip"),
            c(Pkt::echo(client, vip(100), false, 7, 1, b"ping")).frame(),
        );
        add(
            &format!("icmp{v}-echo-iface"),
            c(Pkt::echo(client, iface, false, 7, 2, b"ping")).frame(),
        );
        add(
            &format!("icmp{v}-echo-through"),
            c(Pkt::echo(client, be(11), false, 7, 3, b"ping")).frame(),
        );
        add(
            &format!("icmp{v}-echo-reply"),
            c(Pkt::echo(client, vip(100), true, 7, 4, b"pong")).frame(),
        );
        // Errors quoting what the balancer sent to a backend.
        let sent_fnat = Pkt::tcp(ep(snat, 20000), ep(be(11), 8080), "S")
            .ttl(63)
            .ip_bytes();
        let sent_dnat = Pkt::tcp(ep(client, 41000), ep(be(12), 8080), "S")
            .ttl(63)
            .ip_bytes();
        if v == "4" {
            let fr = Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
                next_hop_mtu: 1400,
            });
            add(
                "icmp4-frag-needed-fullnat",
                b(Pkt::icmp4(router, snat, fr.clone(), sent_fnat.clone())).frame(),
            );
            add(
                "icmp4-frag-needed-fullnat-short",
                b(Pkt::icmp4(router, snat, fr.clone(), sent_fnat[..28].to_vec())).frame(),
            );
            add(
                "icmp4-frag-needed-dnat",
                b(Pkt::icmp4(router, client, fr, sent_dnat)).frame(),
            );
            add(
                "icmp4-time-exceeded",
                b(Pkt::icmp4(
                    router,
                    snat,
                    Icmpv4Type::TimeExceeded(TimeExceededCode::TtlExceededInTransit),
                    sent_fnat,
                ))
                .frame(),
            );
        } else {
            let ptb = Icmpv6Type::PacketTooBig { mtu: 1280 };
            add(
                "icmp6-ptb-fullnat",
                b(Pkt::icmp6(router, snat, ptb, sent_fnat)).frame(),
            );
            add(
                "icmp6-ptb-dnat",
                b(Pkt::icmp6(router, client, ptb, sent_dnat)).frame(),
            );
        }
    }
    // IPv4 options, IPv6 destination options.
    add(
        "tcp4-options",
        c(Pkt::tcp(ep(C4, 40000), ep("10.0.0.100", 80), "S"))
            .v4_options(&[0x94, 0x04, 0, 0])
            .frame(),
    );
    // Echo requests to lbd with the options its reply rewrites: a record
    // route with room, a timestamp with room, a spent loose source route.
    for (name, opts) in [
        (
            "icmp4-echo-record-route",
            &[7u8, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0][..],
        ),
        (
            "icmp4-echo-timestamp",
            &[68, 12, 5, 1, 0, 0, 0, 0, 0, 0, 0, 0][..],
        ),
        (
            "icmp4-echo-source-route",
            &[131, 11, 12, 203, 0, 113, 1, 203, 0, 113, 2, 0][..],
        ),
    ] {
        add(
            name,
            c(Pkt::echo(C4, "10.0.0.100", false, 7, 5, b"ping"))
                .v4_options(opts)
                .frame(),
        );
    }
    add(
        "tcp6-dest-opts",
        c(Pkt::tcp(ep(C6, 40000), ep("fd00::100", 80), "S"))
            .v6_dest_opts(&[1, 4, 0, 0, 0, 0])
            .frame(),
    );
    add(
        "udp4-zero-checksum",
        c(Pkt::udp(ep(C4, 5300), ep("10.0.0.102", 53), b"q"))
            .zero_udp_checksum()
            .frame(),
    );
    add(
        "udp6-vlan",
        c(Pkt::udp(ep(C6, 5300), ep("fd00::102", 53), b"q"))
            .vlan(7)
            .frame(),
    );
    // ARP.
    let req = Arp {
        src_mac: CLIENT_MAC,
        dst_mac: [0xff; 6],
        vlan: None,
        reply: false,
        sender: (CLIENT_MAC, C4),
        target: ([0; 6], "10.0.0.100"),
        pad: 18,
    };
    add("arp-request-vip", req.frame());
    add(
        "arp-request-vlan",
        Arp {
            vlan: Some(30),
            ..req.clone()
        }
        .frame(),
    );
    add(
        "arp-request-unknown",
        Arp {
            target: ([0; 6], "10.0.0.50"),
            ..req.clone()
        }
        .frame(),
    );
    add(
        "arp-reply",
        Arp {
            reply: true,
            dst_mac: MAC0,
            target: (MAC0, "10.0.0.1"),
            ..req.clone()
        }
        .frame(),
    );
    add(
        "arp-gratuitous",
        Arp {
            target: ([0; 6], C4),
            ..req
        }
        .frame(),
    );
    // Neighbor discovery.
    let target = |s: &str| match s.parse::<IpAddr>().unwrap() {
        IpAddr::V6(a) => a.octets().to_vec(),
        _ => unreachable!(),
    };
    let mut ns = target("fd00::100");
    ns.extend_from_slice(&[1, 1]);
    ns.extend_from_slice(&CLIENT_MAC);
    let solicit = |body: Vec<u8>, src: &str| {
        Pkt::icmp6(src, "ff02::1:ff00:100", Icmpv6Type::NeighborSolicitation, body)
            .macs(CLIENT_MAC, [0x33, 0x33, 0xff, 0, 1, 0])
            .ttl(255)
            .frame()
    };
    add("nd-ns-vip", solicit(ns.clone(), C6));
    add("nd-ns-dad", solicit(target("fd00::100"), "::"));
    let mut other = target("fd00::55");
    other.extend_from_slice(&ns[16..]);
    add("nd-ns-unknown", solicit(other, C6));
    let mut na = target("fd00::2");
    na.extend_from_slice(&[2, 1]);
    na.extend_from_slice(&CLIENT_MAC);
    let na_ty = Icmpv6Type::NeighborAdvertisement(NeighborAdvertisementHeader {
        router: false,
        solicited: true,
        r#override: true,
    });
    add(
        "nd-na",
        Pkt::icmp6(C6, "fd00::1", na_ty, na)
            .macs(CLIENT_MAC, MAC0)
            .ttl(255)
            .frame(),
    );
    // Truncated and malformed versions of valid frames.
    let syn4 = c(Pkt::tcp(ep(C4, 40000), ep("10.0.0.100", 80), "S")).frame();
    let syn6 = c(Pkt::tcp(ep(C6, 40000), ep("fd00::100", 80), "S")).frame();
    for cut in [0, 1, 13, 14, 20, 33, 34, 40, 53] {
        add(&format!("trunc-tcp4-{cut}"), syn4[..cut].to_vec());
    }
    for cut in [20, 54, 60, 73] {
        add(&format!("trunc-tcp6-{cut}"), syn6[..cut].to_vec());
    }
    let mut bad_ihl = syn4.clone();
    bad_ihl[14] = 0x4f;
    add("bad-ihl", bad_ihl);
    let mut bad_len = syn4.clone();
    bad_len[16] = 0xff;
    add("bad-total-len", bad_len);
    let mut unknown_type = syn4.clone();
    unknown_type[12..14].copy_from_slice(&[0x88, 0xcc]);
    add("unknown-ethertype", unknown_type);
    let mut double_tag = c(Pkt::tcp(ep(C4, 40000), ep("10.0.0.100", 80), "S"))
        .vlan(1)
        .frame();
    double_tag.splice(12..12, [0x88, 0xa8, 0, 2]);
    add("qinq", double_tag);
    let mut tcp_off = syn4;
    tcp_off[14 + 20 + 12] = 0xf0;
    add("tcp-bad-offset", tcp_off);
    out
}

/// Rewrites dataplane/fuzz/corpus/handle_packet/ from [`seeds`].
#[test]
#[ignore = "generator: writes the seed corpus"]
fn write_seed_corpus() {
    let dir = fuzz_dir().join("corpus/handle_packet");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in seeds() {
        std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
    }
}

/// The generator's frames are distinct and named uniquely.
#[test]
fn seeds_are_distinct() {
    let s = seeds();
    let mut names: Vec<_> = s.iter().map(|x| &x.0).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), s.len());
}

/// The oracle (`fuzz/src/oracle.rs`) on hand-made outputs: it passes
/// correct frames, fails a wrong checksum anywhere it can be checked (the
/// quoted datagram's included when the quote is whole) and a length that
/// does not match, and skips offloaded frames, inputs with a bad checksum
/// and the L4 checksum of a quote cut short; `repair` makes a frame it
/// applies to.
#[test]
fn oracle_catches_wrong_outputs() {
    use lb_dataplane::checksum::ChecksumOffload;
    use lb_dataplane::worker::{PacketMeta, Verdict};

    let none = PacketMeta {
        port: 0,
        offload: ChecksumOffload::NONE,
    };
    let send = |f: &[u8]| Verdict::Transmit {
        port: 1,
        len: f.len(),
    };
    let passes = |input: &[u8], output: &[u8]| oracle::check(input, &none, &send(output), output);
    let fails = |input: &[u8], output: &[u8]| {
        std::panic::catch_unwind(|| oracle::check(input, &none, &send(output), output)).is_err()
    };
    let client = |p: Pkt| p.macs(CLIENT_MAC, MAC0);
    let tcp4 = client(Pkt::tcp(("10.0.0.2", 40000), ("10.0.0.100", 80), "AP").payload(b"data"));
    let udp6 = client(Pkt::udp(("fd00::2", 40000), ("fd00::102", 53), b"q"));
    let icmp6 = client(Pkt::echo("fd00::2", "fd00::100", false, 7, 1, b"ping"));
    let tagged = tcp4.clone().vlan(5).v4_options(&[0x94, 0x04, 0, 0]);
    for good in [&tcp4, &udp6, &icmp6, &tagged] {
        let f = good.frame();
        assert!(passes(&f, &f), "{good:?}");
        // A byte of the L4 payload flipped: its checksum no longer holds.
        let mut bad = f.clone();
        *bad.last_mut().unwrap() ^= 0x40;
        assert!(fails(&f, &bad), "{good:?}");
        // The input is not valid either: nothing to check, until repaired.
        assert!(!oracle::check(&bad, &none, &send(&bad), &bad));
        assert_eq!(oracle::repair(&f), f);
        let fixed = oracle::repair(&bad);
        assert!(passes(&fixed, &fixed), "{good:?}");
        // Offload: nothing checked.
        let offload = PacketMeta {
            port: 0,
            offload: ChecksumOffload {
                tx_l4: true,
                ..ChecksumOffload::NONE
            },
        };
        assert!(!oracle::check(&f, &offload, &send(&bad), &bad));
        // Padded past 60 bytes, or cut short.
        let mut long = f.clone();
        long.resize(f.len().max(60) + 1, 0);
        assert!(fails(&f, &long), "{good:?}");
        assert!(fails(&f, &f[..f.len() - 1]), "{good:?}");
    }
    // The IPv4 header checksum.
    let f = tcp4.frame();
    let mut bad = f.clone();
    bad[14 + 8] -= 1; // TTL, without the checksum
    assert!(fails(&f, &bad));
    // Padding to 60 bytes is allowed.
    let syn = client(Pkt::tcp(("10.0.0.2", 40000), ("10.0.0.100", 80), "S")).frame();
    assert_eq!(syn.len(), 54);
    let mut padded = syn.clone();
    padded.resize(60, 0);
    assert!(passes(&syn, &padded) && passes(&padded, &syn) && passes(&padded, &padded));
    // UDP over IPv6 with checksum 0 is never valid; over IPv4 it is "none".
    let zero6 = udp6.clone().zero_udp_checksum().frame();
    assert!(!oracle::check(&zero6, &none, &send(&zero6), &zero6));
    assert!(fails(&udp6.frame(), &zero6));
    let zero4 = client(Pkt::udp(("10.0.0.2", 40000), ("10.0.0.102", 53), b"q")).zero_udp_checksum();
    assert!(passes(&zero4.frame(), &zero4.frame()));

    // ICMP errors: the quoted datagram's checksums, each error's outer
    // checksum right (etherparse computes it over the quote as given).
    let error4 = |quote: Vec<u8>| {
        Pkt::icmp4(
            "10.1.0.254",
            "10.0.0.2",
            Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::Port),
            quote,
        )
        .macs(ROUTER_MAC, MAC1)
        .frame()
    };
    let error6 = |quote: Vec<u8>| {
        Pkt::icmp6(
            "fd01::fe",
            "fd00::2",
            Icmpv6Type::PacketTooBig { mtu: 1280 },
            quote,
        )
        .macs(ROUTER_MAC, MAC1)
        .frame()
    };
    for (quoted, error, ip_header) in [
        (tcp4.ip_bytes(), &error4 as &dyn Fn(Vec<u8>) -> Vec<u8>, 20),
        (udp6.ip_bytes(), &error6, 40),
    ] {
        let good = error(quoted.clone());
        assert!(passes(&good, &good));
        assert_eq!(oracle::repair(&good), good);
        // The quoted datagram's last byte flipped: its L4 checksum fails,
        // when the quote is whole.
        let mut bad = quoted.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(fails(&good, &error(bad.clone())));
        let fixed = oracle::repair(&error(bad.clone()));
        assert!(passes(&fixed, &fixed));
        // Cut short, the quote's L4 checksum is not checked.
        bad.pop();
        let short = error(bad);
        assert!(passes(&short, &short));
        if ip_header == 20 {
            // The quoted IPv4 header's checksum, whole quote or not.
            let mut bad = quoted.clone();
            bad[8] -= 1;
            assert!(fails(&good, &error(bad.clone())));
            assert!(fails(&good, &error(bad[..28].to_vec())));
            let fixed = oracle::repair(&error(bad[..28].to_vec()));
            assert!(passes(&fixed, &fixed));
            assert!(passes(&good, &error(quoted[..28].to_vec())));
        }
    }
}
