//! Conntrack costs on the packet path: a hit at 1k and 1M live connections
//! (random order, so the 1M case pays the cache misses a real worker pays),
//! a hit plus the rest of the established path, a new flow (SNAT port +
//! insert), and an expiry batch. Prints the bytes per connection first.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use lb_dataplane::conntrack::{tcp_flags, Config, Conntrack, Direction, Nat, Tags};
use lb_dataplane::flow::{FlowKey, FlowKeyV4, Proto, SnatPorts, WorkerId};
use lb_dataplane::Tick;

mod common;
use common::Prefetch0;

const BACKENDS: u32 = 64;

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// `n` distinct client → VIP keys, in random order.
fn keys(n: usize, seed: u64) -> Vec<FlowKey> {
    let mut rng = seed | 1;
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let r = xorshift(&mut rng);
        let k = FlowKeyV4 {
            src: Ipv4Addr::from(0x0a00_0000 | (r as u32 & 0x00ff_ffff)),
            dst: Ipv4Addr::new(192, 0, 2, (r >> 32) as u8 % 8),
            sport: 1024 + ((r >> 40) as u16 % 60_000),
            dport: 443,
            proto: Proto::Tcp,
        };
        if seen.insert(k) {
            out.push(FlowKey::V4(k));
        }
    }
    out
}

fn backend(i: usize) -> (IpAddr, u16) {
    (
        IpAddr::V4(Ipv4Addr::from(0x0a09_0000 + (i as u32 % BACKENDS))),
        8080,
    )
}

fn snat_addrs(n: u32) -> Vec<IpAddr> {
    (0..n)
        .map(|i| IpAddr::V4(Ipv4Addr::from(0xc633_6400 + i)))
        .collect()
}

/// A table holding `keys` as established full-NAT connections.
fn filled(keys: &[FlowKey], capacity: u32) -> (Conntrack, Vec<FlowKey>) {
    let mut ct = Conntrack::new(Config {
        hash_seed: 42,
        ..Config::new(capacity, 1024)
    })
    .unwrap();
    let mut snat = SnatPorts::new(WorkerId(0), 1, &snat_addrs(32), SnatPorts::DEFAULT_PORT_RANGE).unwrap();
    let mut replies = Vec::with_capacity(keys.len());
    for (i, k) in keys.iter().enumerate() {
        let b = backend(i);
        let s = snat.alloc(b, Proto::Tcp).unwrap();
        let id = ct
            .insert(
                *k,
                Nat::FullNat { backend: b, snat: s },
                Tags::default(),
                Tick(0),
                |_| {},
            )
            .unwrap();
        ct.on_packet(id, Direction::Original, tcp_flags::ACK, Tick(0));
        replies.push(ct.get(id).unwrap().reply());
    }
    (ct, replies)
}

fn print_bytes_per_connection() {
    println!(
        "conntrack bytes per connection: IPv4 {} B, IPv6 {} B (entry + 4 index slots at load <= 0.5)",
        Conntrack::BYTES_PER_CONN_V4,
        Conntrack::BYTES_PER_CONN_V6
    );
}

fn lookup(c: &mut Criterion) {
    print_bytes_per_connection();
    let mut g = c.benchmark_group("conntrack_lookup_hit");
    g.throughput(Throughput::Elements(1));
    for n in [1_000usize, 1_000_000] {
        let ks = keys(n, 7);
        let (ct, mut replies) = filled(&ks, n as u32);
        // Look up in an order unrelated to insertion.
        let mut probe = ks.clone();
        probe.reverse();
        probe.rotate_left(n / 3);
        let mut i = 0;
        g.bench_function(BenchmarkId::new("original", n), |b| {
            b.iter(|| {
                i = if i + 1 == n { 0 } else { i + 1 };
                black_box(ct.lookup(black_box(&probe[i])))
            })
        });
        replies.rotate_left(n / 2);
        g.bench_function(BenchmarkId::new("reply", n), |b| {
            b.iter(|| {
                i = if i + 1 == n { 0 } else { i + 1 };
                black_box(ct.lookup(black_box(&replies[i])))
            })
        });
        // A burst of 32, as the worker sees it after rx_burst, its lines
        // warmed by the prefetch lbd uses.
        let mut out = [None; 32];
        let mut g32 = 0;
        g.throughput(Throughput::Elements(32));
        g.bench_function(BenchmarkId::new("burst32_original", n), |b| {
            b.iter(|| {
                g32 = if g32 + 64 > n { 0 } else { g32 + 32 };
                ct.lookup_burst(&Prefetch0, black_box(&probe[g32..g32 + 32]), &mut out);
                black_box(&out);
            })
        });
        g.throughput(Throughput::Elements(1));
        // The established path's whole conntrack share: lookup, rewrite,
        // state/timeout refresh.
        let mut ct = ct;
        let mut now = 0;
        g.bench_function(BenchmarkId::new("lookup_rewrite_touch", n), |b| {
            b.iter(|| {
                i = if i + 1 == n { 0 } else { i + 1 };
                now += 1;
                let (id, dir) = ct.lookup(black_box(&probe[i])).unwrap();
                let rw = ct.rewrite(id, dir);
                ct.on_packet(id, dir, tcp_flags::ACK, Tick(now));
                black_box(rw)
            })
        });
    }
    g.finish();
}

/// Times `iters` operations of `op`, rebuilding state untimed every `chunk`.
fn chunked<S>(
    iters: u64,
    chunk: u64,
    mut setup: impl FnMut() -> S,
    mut op: impl FnMut(&mut S, u64),
) -> Duration {
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let n = chunk.min(iters - done);
        let mut state = setup();
        let t = Instant::now();
        for j in 0..n {
            op(&mut state, j);
        }
        total += t.elapsed();
        done += n;
    }
    total
}

fn insert(c: &mut Criterion) {
    const CHUNK: usize = 1 << 20;
    let ks = keys(CHUNK, 99);
    let mut g = c.benchmark_group("conntrack_insert_new");
    g.throughput(Throughput::Elements(1));
    g.sample_size(10);
    // Fills an empty 1M table: SNAT port + insert, as a full-NAT new flow.
    g.bench_function("snat_alloc_insert_fullnat_fill_1M", |b| {
        b.iter_custom(|iters| {
            chunked(
                iters,
                CHUNK as u64,
                || {
                    let ct = Conntrack::new(Config {
                        hash_seed: 1,
                        ..Config::new(CHUNK as u32, 0)
                    })
                    .unwrap();
                    let sp = SnatPorts::new(WorkerId(0), 1, &snat_addrs(17), SnatPorts::DEFAULT_PORT_RANGE)
                        .unwrap();
                    (ct, sp)
                },
                |(ct, sp), j| {
                    let k = ks[j as usize];
                    let b = backend(j as usize);
                    let s = sp.alloc(b, Proto::Tcp).unwrap();
                    let r = ct.insert(
                        k,
                        Nat::FullNat { backend: b, snat: s },
                        Tags::default(),
                        Tick(0),
                        |_| {},
                    );
                    black_box(r.unwrap());
                },
            )
        })
    });
    // Steady state at 1M live: a new flow in, an old flow out.
    let n = 1_000_000;
    let ks = keys(n + 1, 5);
    let (mut ct, _) = filled(&ks[..n], n as u32 + 1);
    let mut j = 0;
    g.bench_function("insert_plus_remove_at_1M_live", |b| {
        b.iter(|| {
            let k = ks[(j + n) % (n + 1)];
            let old = ks[j % (n + 1)];
            j += 1;
            let id = ct.insert(
                k,
                Nat::Dnat { backend: backend(j) },
                Tags::default(),
                Tick(0),
                |_| {},
            );
            let gone = ct.lookup(&old).and_then(|(id, _)| ct.remove(id));
            black_box((id, gone.is_some()))
        })
    });
    g.finish();
}

fn expire(c: &mut Criterion) {
    const N: usize = 1 << 20;
    const BUDGET: usize = 1024;
    let ks = keys(N, 3);
    let mut g = c.benchmark_group("conntrack_expire");
    g.throughput(Throughput::Elements(BUDGET as u64));
    g.sample_size(10);
    // Every entry expired: each call removes BUDGET entries.
    let setup = || {
        let mut ct = Conntrack::new(Config::new(N as u32, 0)).unwrap();
        for (i, k) in ks.iter().enumerate() {
            ct.insert(
                *k,
                Nat::Dnat { backend: backend(i) },
                Tags::default(),
                Tick(0),
                |_| {},
            )
            .unwrap();
        }
        ct
    };
    g.bench_function("budget_1024_all_expired_1M", |b| {
        b.iter_custom(|iters| {
            chunked(iters, (N / BUDGET) as u64, setup, |ct, _| {
                black_box(ct.expire(Tick(u64::MAX), BUDGET, |e| {
                    black_box(e);
                }));
            })
        })
    });
    // Nothing expired: the cost of examining live entries.
    let mut ct = setup();
    g.bench_function("budget_1024_none_expired_1M", |b| {
        b.iter(|| black_box(ct.expire(Tick(0), BUDGET, |_| {})))
    });
    g.finish();
}

criterion_group!(benches, lookup, insert, expire);
criterion_main!(benches);
