//! NAT rewrite cost per packet.
//!
//! `cargo bench -p lb-dataplane --bench nat`. Target: ~10 ns per rewrite at
//! any frame size, since incremental checksums never read the payload. The
//! one O(length) case, a partial checksum received and no TX offload, is
//! measured separately. Each iteration puts the TTL back to 64 (one byte) so
//! that the same frame can be rewritten forever; the frame is parsed once.

use std::hint::black_box;
use std::net::IpAddr;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use etherparse::PacketBuilder;
use lb_dataplane::checksum::ChecksumOffload;
use lb_dataplane::conntrack::Rewrite;
use lb_dataplane::nat::{inner_rewrite, rewrite, rewrite_icmp_error};
use lb_dataplane::wire::{parse, parse_with, L3};

const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// Ethernet/IPv4/TCP frame of `len` bytes (without FCS; 60 is a 64-byte
/// frame on the wire).
fn tcp_v4(len: usize) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4([198, 51, 100, 7], [192, 0, 2, 10], 64)
        .tcp(40000, 443, 1, 65535)
        .ack(7)
        .write(&mut v, &vec![0x5a; len - 54])
        .unwrap();
    v
}

/// Ethernet/IPv6/TCP frame of `len` bytes (at least 74).
fn tcp_v6(len: usize) -> Vec<u8> {
    let c: std::net::Ipv6Addr = "2001:db8:c::7".parse().unwrap();
    let vip: std::net::Ipv6Addr = "2001:db8:f::10".parse().unwrap();
    let mut v = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv6(c.octets(), vip.octets(), 64)
        .tcp(40000, 443, 1, 65535)
        .ack(7)
        .write(&mut v, &vec![0x5a; len - 74])
        .unwrap();
    v
}

fn ep(s: &str, port: u16) -> (IpAddr, u16) {
    (s.parse().unwrap(), port)
}

fn bench_rewrite(c: &mut Criterion) {
    let dnat4 = Rewrite {
        src: ep("198.51.100.7", 40000),
        dst: ep("10.1.2.3", 8443),
    };
    let full4 = Rewrite {
        src: ep("10.255.0.1", 61001),
        dst: ep("10.1.2.3", 8443),
    };
    let dnat6 = Rewrite {
        src: ep("2001:db8:c::7", 40000),
        dst: ep("fd00:1::3", 8443),
    };
    let full6 = Rewrite {
        src: ep("fd00:ff::1", 61001),
        dst: ep("fd00:1::3", 8443),
    };
    let none = ChecksumOffload::NONE;
    let partial = ChecksumOffload {
        rx_l4_partial: true,
        ..none
    };
    let tx = ChecksumOffload {
        tx_l4: true,
        tx_ipv4: true,
        ..none
    };
    let cases: [(&str, Vec<u8>, Rewrite, ChecksumOffload); 11] = [
        ("dnat_tcp_v4_64B", tcp_v4(60), dnat4, none),
        ("fullnat_tcp_v4_64B", tcp_v4(60), full4, none),
        ("dnat_tcp_v4_1500B", tcp_v4(1514), dnat4, none),
        ("fullnat_tcp_v4_1500B", tcp_v4(1514), full4, none),
        ("fullnat_tcp_v4_1500B_tx_offload", tcp_v4(1514), full4, tx),
        (
            "fullnat_tcp_v4_1500B_rx_partial_sw_complete",
            tcp_v4(1514),
            full4,
            partial,
        ),
        ("dnat_tcp_v6_78B", tcp_v6(78), dnat6, none),
        ("fullnat_tcp_v6_78B", tcp_v6(78), full6, none),
        ("dnat_tcp_v6_1500B", tcp_v6(1514), dnat6, none),
        ("fullnat_tcp_v6_1500B", tcp_v6(1514), full6, none),
        ("fullnat_tcp_v6_1500B_tx_offload", tcp_v6(1514), full6, tx),
    ];
    let mut g = c.benchmark_group("nat");
    g.throughput(Throughput::Elements(1));
    for (name, mut frame, rw, offload) in cases {
        let p = parse_with(&frame, &offload).unwrap();
        let ttl_at = usize::from(p.l3_offset) + if p.l3 == L3::Ipv4 { 8 } else { 7 };
        assert_eq!(rewrite(&mut frame.clone(), &p, &rw, &offload), Ok(()), "{name}");
        g.bench_function(name, |b| {
            b.iter(|| {
                frame[ttl_at] = 64;
                rewrite(black_box(&mut frame), black_box(&p), black_box(&rw), &offload)
            })
        });
    }

    // An ICMPv4 "fragmentation needed" quoting a full-NAT'ed TCP segment
    // (28-byte quote), translated back towards the client.
    let quoted = tcp_v4(60);
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4([203, 0, 113, 1], [10, 255, 0, 1], 64)
        .icmpv4_raw(3, 4, [0, 0, 5, 0x78])
        .write(&mut frame, &quoted[14..14 + 28])
        .unwrap();
    let p = parse(&frame).unwrap();
    let reply = Rewrite {
        src: ep("192.0.2.10", 443),
        dst: ep("198.51.100.7", 40000),
    };
    let outer = Rewrite {
        src: (p.src, 0),
        dst: reply.dst,
    };
    let inner = inner_rewrite(&reply);
    assert_eq!(
        rewrite_icmp_error(&mut frame.clone(), &p, &outer, &inner, &none),
        Ok(())
    );
    g.bench_function("icmpv4_frag_needed_tcp", |b| {
        b.iter(|| {
            frame[22] = 64;
            rewrite_icmp_error(black_box(&mut frame), black_box(&p), &outer, &inner, &none)
        })
    });
    g.finish();
}

criterion_group!(benches, bench_rewrite);
criterion_main!(benches);
