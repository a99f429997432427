//! Per-packet parse and NAT rewrite costs.
//!
//! `cargo bench -p lb-dataplane --bench parse`. Targets: `parse` of a
//! 64-byte Ethernet/IPv4/TCP frame in ~3-5 ns, and an incremental DNAT
//! rewrite (destination address and port, IPv4 header and TCP checksums) in
//! a few ns.

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use etherparse::PacketBuilder;
use lb_dataplane::checksum::{ChecksumDelta, ChecksumOffload};
use lb_dataplane::wire::{parse, parse_with, Ipv4Packet, TcpPacket};

/// A 64-byte-on-the-wire (60 without FCS) Ethernet/IPv4/TCP frame.
fn tcp_v4_frame(i: u8) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 0, i], [192, 0, 2, 10], 64)
        .tcp(40000 + u16::from(i), 443, 1, 65535)
        .ack(7)
        .write(&mut v, &[0; 6])
        .unwrap();
    assert_eq!(v.len(), 60);
    v
}

fn bench_parse(c: &mut Criterion) {
    let frame = tcp_v4_frame(1);
    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Elements(1));
    g.bench_function("tcp_ipv4_64B", |b| b.iter(|| parse(black_box(&frame)).unwrap()));
    // What the pipeline does: read the flow-key fields, not copy the struct
    // (copying it back-to-back reloads narrow stores with wide loads).
    g.bench_function("tcp_ipv4_64B_key_fields", |b| {
        b.iter(|| {
            let p = parse(black_box(&frame)).unwrap();
            black_box((p.src, p.dst, p.src_port, p.dst_port, p.protocol, p.l4_offset))
        })
    });
    // With the NIC having verified the IPv4 header checksum.
    let offload = ChecksumOffload {
        rx_ipv4_verified: true,
        ..ChecksumOffload::NONE
    };
    g.bench_function("tcp_ipv4_64B_ip_csum_offloaded", |b| {
        b.iter(|| parse_with(black_box(&frame), &offload).unwrap())
    });

    let burst: Vec<Vec<u8>> = (0..32).map(tcp_v4_frame).collect();
    g.throughput(Throughput::Elements(32));
    g.bench_function("tcp_ipv4_burst32", |b| {
        b.iter(|| {
            let mut ports = 0u32;
            for f in black_box(&burst) {
                ports += u32::from(parse(f).unwrap().src_port);
            }
            ports
        })
    });
    g.finish();
}

/// Destination NAT: VIP:443 -> backend:8443, both checksums incremental.
#[inline]
fn dnat(frame: &mut [u8], addr: Ipv4Addr, port: u16) {
    let (ip_hdr, l4) = frame[14..].split_at_mut(20);
    let mut ip = Ipv4Packet::new_unchecked(ip_hdr);
    let delta = ip.rewrite_dst_addr(addr);
    let mut tcp = TcpPacket::new_unchecked(l4);
    let old = tcp.dst_port();
    tcp.set_dst_port(port);
    tcp.set_checksum(delta.add16(old, port).apply(tcp.checksum()));
}

fn bench_rewrite(c: &mut Criterion) {
    let mut frame = tcp_v4_frame(1);
    let targets = [
        (Ipv4Addr::new(10, 1, 2, 3), 8443u16),
        (Ipv4Addr::new(192, 0, 2, 10), 443),
    ];
    let mut g = c.benchmark_group("rewrite");
    g.throughput(Throughput::Elements(1));
    let mut i = 0usize;
    g.bench_function("dnat_ipv4_tcp_incremental", |b| {
        b.iter(|| {
            // Alternate so every iteration really changes the packet.
            let (a, p) = targets[i & 1];
            i += 1;
            dnat(black_box(&mut frame), a, p);
        })
    });
    g.bench_function("checksum_delta_only", |b| {
        b.iter(|| {
            ChecksumDelta::new()
                .add_ipv4(black_box(targets[0].0), black_box(targets[1].0))
                .add16(443, 8443)
                .apply(black_box(0x1234))
        })
    });
    g.finish();
    // The rewrite must leave valid checksums: check against recomputation.
    let mut f = tcp_v4_frame(1);
    dnat(&mut f, targets[0].0, targets[0].1);
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert!(ip.verify_checksum());
    assert!(TcpPacket::new_checked(&f[34..60])
        .unwrap()
        .verify_checksum_v4(ip.src_addr(), ip.dst_addr()));
}

criterion_group!(benches, bench_parse, bench_rewrite);
criterion_main!(benches);
