//! Maglev ring build time, lookup and flow hash costs.
//!
//! `cargo bench -p lb-dataplane --bench maglev`. The build target is
//! ≤ 0.5 ms for 65,537 slots and 1,000 backends on one core (the paper
//! reports 1.8 ms); lookups and flow hashes should cost a few ns.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use lb_dataplane::maglev::{
    client_hash, flow_hash_v4, flow_hash_v6, MaglevBackend, MaglevRing, DEFAULT_RING_SIZE,
};

fn backends(n: u32, weight: impl Fn(u32) -> u32) -> Vec<MaglevBackend> {
    (0..n)
        .map(|i| MaglevBackend::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)), 8080, weight(i)))
        .collect()
}

fn build(c: &mut Criterion) {
    let mut g = c.benchmark_group("maglev_build_65537");
    for n in [10u32, 100, 1000] {
        let equal = backends(n, |_| 1);
        g.bench_with_input(BenchmarkId::new("equal", n), &equal, |b, be| {
            b.iter(|| MaglevRing::build(black_box(be), DEFAULT_RING_SIZE).unwrap())
        });
    }
    // Weights 1..=4: every backend skips some rounds.
    let mixed = backends(1000, |i| 1 + i % 4);
    g.bench_with_input(BenchmarkId::new("weights_1_to_4", 1000), &mixed, |b, be| {
        b.iter(|| MaglevRing::build(black_box(be), DEFAULT_RING_SIZE).unwrap())
    });
    // The documented worst case of the credit scheme: one heavy backend.
    let skewed = backends(1000, |i| if i == 0 { 1000 } else { 1 });
    g.bench_with_input(BenchmarkId::new("one_at_1000x", 1000), &skewed, |b, be| {
        b.iter(|| MaglevRing::build(black_box(be), DEFAULT_RING_SIZE).unwrap())
    });
    g.finish();

    let mut g = c.benchmark_group("maglev_build_small");
    let ten = backends(10, |_| 1);
    g.bench_function("1021_slots_10_backends", |b| {
        b.iter(|| MaglevRing::build(black_box(&ten), 1021).unwrap())
    });
    g.finish();
}

fn lookup(c: &mut Criterion) {
    let ring = MaglevRing::build(&backends(100, |_| 1), DEFAULT_RING_SIZE).unwrap();
    let hashes: Vec<u64> = (0..1024u64)
        .map(|i| client_hash(IpAddr::V4(Ipv4Addr::from(i as u32))))
        .collect();
    let mut g = c.benchmark_group("maglev_lookup");
    g.throughput(Throughput::Elements(hashes.len() as u64));
    g.bench_function("65537_slots_x1024", |b| {
        b.iter(|| {
            let mut acc = 0usize;
            for &h in black_box(&hashes) {
                acc = acc.wrapping_add(ring.lookup(h).unwrap_or(0));
            }
            acc
        })
    });
    g.finish();
}

fn hashes(c: &mut Criterion) {
    let mut g = c.benchmark_group("flow_hash");
    g.bench_function("v4", |b| {
        b.iter(|| {
            flow_hash_v4(
                black_box([10, 1, 2, 3]),
                black_box([192, 0, 2, 1]),
                black_box(40000),
                443,
                6,
            )
        })
    });
    let s6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let d6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    g.bench_function("v6", |b| {
        b.iter(|| flow_hash_v6(black_box(s6), black_box(d6), black_box(40000), 443, 6))
    });
    g.bench_function("client_v4", |b| {
        b.iter(|| client_hash(black_box(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)))))
    });
    g.finish();
}

criterion_group!(benches, build, lookup, hashes);
criterion_main!(benches);
