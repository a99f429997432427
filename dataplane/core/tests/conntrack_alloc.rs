//! Proves the per-packet promise of `conntrack` and `flow::SnatPorts`: after
//! construction, 100k mixed operations allocate nothing.
//!
//! The counting allocator comes from `stats_alloc`, because the workspace
//! lints forbid a hand-written `GlobalAlloc` implementation in this crate,
//! tests included. It counts every thread's allocations, so the test runs
//! without libtest (`harness = false`, see `solo`), alone on the process's
//! only thread.

mod solo;

use std::alloc::System;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lb_dataplane::conntrack::{tcp_flags, Config, Conntrack, Direction, Nat, Tags};
use lb_dataplane::flow::{FlowKey, FlowKeyV4, FlowKeyV6, Proto, SnatPorts, WorkerId};
use lb_dataplane::{Loads, Tick};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn main() {
    solo::run(
        "hundred_thousand_operations_allocate_nothing",
        hundred_thousand_operations_allocate_nothing,
    );
}

fn hundred_thousand_operations_allocate_nothing() {
    // Everything is built, and every key drawn, before the region starts.
    let snat_v4 = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1));
    let snat_v6: IpAddr = "2001:db8:5::1".parse().unwrap();
    let mut snat =
        SnatPorts::new(WorkerId(1), 2, &[snat_v4, snat_v6], SnatPorts::DEFAULT_PORT_RANGE).unwrap();
    // Small capacities so the run fills the tables and exercises eviction
    // and `Full` as well as the plain paths.
    let mut ct = Conntrack::new(Config {
        hash_seed: 7,
        ..Config::new(2048, 512)
    })
    .unwrap();
    let mut rng = 0x1234_5678_9abc_def0u64;
    let keys: Vec<FlowKey> = (0..8192u32)
        .map(|i| {
            let port = 1024 + (i % 50_000) as u16;
            let proto = if i % 3 == 0 { Proto::Udp } else { Proto::Tcp };
            if i % 5 == 0 {
                let src = Ipv6Addr::from(0x2001_0db8_0000_0000_0000_0000_0001_0000u128 + i as u128);
                FlowKey::V6(FlowKeyV6 {
                    src,
                    dst: "2001:db8::100".parse().unwrap(),
                    sport: port,
                    dport: 443,
                    proto,
                })
            } else {
                let src = Ipv4Addr::from(0x0a00_0000 + i);
                FlowKey::V4(FlowKeyV4 {
                    src,
                    dst: Ipv4Addr::new(192, 0, 2, 1),
                    sport: port,
                    dport: 80,
                    proto,
                })
            }
        })
        .collect();
    let backend_v4 = (IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1)), 8080);
    let backend_v6 = ("2001:db8:9::1".parse::<IpAddr>().unwrap(), 8080);

    let region = Region::new(GLOBAL);
    let mut now = 0u64;
    let (mut inserted, mut failed, mut freed) = (0u32, 0u32, 0u32);
    for op in 0..100_000u32 {
        now += 3;
        let r = xorshift(&mut rng);
        let key = keys[(r % keys.len() as u64) as usize];
        match r >> 60 {
            // New flow: SNAT port, insert (maybe evicting), first packet.
            0..=5 => {
                if ct.lookup(&key).is_some() {
                    continue;
                }
                let backend = if key.is_v4() { backend_v4 } else { backend_v6 };
                let nat = if r & 1 == 0 {
                    match snat.alloc(backend, key.proto()) {
                        Some(s) => Nat::FullNat { backend, snat: s },
                        None => continue,
                    }
                } else {
                    Nat::Dnat { backend }
                };
                let res = ct.insert(
                    key,
                    nat,
                    Tags {
                        frontend: op,
                        backend: 0,
                    },
                    Tick(now),
                    |old| {
                        if let Some(s) = old.nat.snat() {
                            snat.free(s, old.original.proto()).unwrap();
                        }
                    },
                );
                match res {
                    Ok(id) => {
                        inserted += 1;
                        ct.on_packet(id, Direction::Original, tcp_flags::SYN, Tick(now));
                    }
                    Err(_) => {
                        failed += 1;
                        if let Some(s) = nat.snat() {
                            snat.free(s, key.proto()).unwrap();
                        }
                    }
                }
            }
            // Established traffic both ways.
            6..=11 => {
                if let Some((id, dir)) = ct.lookup(&key) {
                    let rw = ct.rewrite(id, dir).unwrap();
                    let reply = ct.get(id).unwrap().reply();
                    assert_eq!(ct.lookup(&reply).map(|x| x.0), Some(id));
                    assert!(rw.dst.1 != 0);
                    ct.on_packet(id, Direction::Reply, tcp_flags::SYN | tcp_flags::ACK, Tick(now));
                    ct.on_packet(id, Direction::Original, tcp_flags::ACK, Tick(now));
                }
            }
            // Close.
            12 | 13 => {
                if let Some((id, _)) = ct.lookup(&key) {
                    if let Some(e) = ct.remove(id) {
                        if let Some(s) = e.nat.snat() {
                            snat.free(s, e.original.proto()).unwrap();
                            freed += 1;
                        }
                    }
                }
            }
            // Housekeeping, far in the future now and then.
            _ => {
                let at = if r & 0xff == 0 { now + 1_000_000 } else { now };
                ct.expire(Tick(at), 256, |e| {
                    if let Some(s) = e.nat.snat() {
                        snat.free(s, e.original.proto()).unwrap();
                    }
                });
                let _ = ct.stats();
                let mut out = [None; 40];
                let at = (r % 8000) as usize;
                ct.lookup_burst(&Loads, &keys[at..at + 40], &mut out);
            }
        }
    }
    let stats = region.change();
    assert_eq!(stats.allocations, 0, "{stats:?}");
    assert_eq!(stats.reallocations, 0, "{stats:?}");
    // The run exercised what it claims to.
    let st = ct.stats();
    assert!(inserted > 10_000 && freed > 100, "{inserted} {freed}");
    assert!(
        st.evicted_embryonic + st.evicted_closing + st.evicted_expired > 0,
        "{st:?}"
    );
    assert!(st.expired > 0 && st.removed > 0, "{st:?}");
    assert_eq!(
        u64::from(failed),
        st.insert_full + st.insert_exists + st.insert_invalid
    );
}
