//! Lcore launch and join, and an SP/SC ring handing mbufs between lcores.
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use dpdk::{ring, Burst};

#[test]
fn launch_join_and_ring_handover() {
    // A bad argument is refused before EAL is touched, which a later
    // call can still initialise.
    assert!(
        matches!(dpdk::Eal::init(&["dpdk-test", "a\0b"]), Err(dpdk::EalError::BadArgument(a)) if a == "a\0b"),
        "a NUL in an argument"
    );
    // Two lcores on however many CPUs: lcore 1 may share CPU 0.
    let eal = common::eal("--lcores=0@0,1@0", &[]);
    assert_eq!(eal.main_lcore().0, 0);
    assert_eq!(eal.worker_lcores().len(), 1);
    let worker = eal.worker_lcores()[0];
    assert!(
        eal.launch(eal.main_lcore(), || 0).is_err(),
        "cannot launch on the main lcore"
    );

    let pool = common::pool(&eal, "ring_pool", 1023);
    let start_avail = pool.available();
    let (mut prod, mut cons) = ring::channel(&eal, "handover", 256).unwrap();
    assert!(
        ring::channel(&eal, "bad", 100).is_err(),
        "capacity must be a power of two"
    );

    // The worker receives mbufs through the ring, checks and frees them.
    const N: u64 = 10_000;
    let seen = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicBool::new(false));
    let (s, bd) = (seen.clone(), bad.clone());
    let h = eal
        .launch(worker, move || {
            let mut b = Burst::new();
            let mut expect = 0u64;
            while expect < N {
                cons.dequeue_burst(&mut b);
                for m in b.drain() {
                    let v = u64::from_le_bytes(m.data()[..8].try_into().unwrap());
                    if v != expect {
                        bd.store(true, Ordering::Relaxed);
                    }
                    expect += 1;
                }
            }
            s.store(expect, Ordering::Relaxed);
            7
        })
        .unwrap();
    let mut b = Burst::new();
    let mut next = 0u64;
    let mut spins = 0u64;
    while next < N {
        while !b.is_full() && next < N {
            let mut m = pool.alloc().expect("pool has room");
            m.append(8).unwrap().copy_from_slice(&next.to_le_bytes());
            b.push(m).unwrap();
            next += 1;
        }
        while !b.is_empty() {
            prod.enqueue_burst(&mut b);
            spins += 1;
            assert!(spins < 100_000_000, "consumer stalled");
        }
    }
    assert_eq!(h.join(), 7);
    assert_eq!(seen.load(Ordering::Relaxed), N);
    assert!(!bad.load(Ordering::Relaxed), "mbufs arrived in order, intact");

    // A panic on a worker lcore comes back as -1, not an abort.
    let h = eal.launch(worker, || panic!("boom")).unwrap();
    assert_eq!(h.join(), -1);

    // Mbufs left in a ring are freed with it.
    let (mut p2, c2) = ring::channel(&eal, "leftover", 64).unwrap();
    p2.enqueue(pool.alloc().unwrap()).unwrap();
    assert_eq!(c2.count(), 1);
    drop((prod, p2, c2));
    assert_eq!(pool.available(), start_avail);

    // A drain left early frees what it did not hand out.
    let mut b = Burst::new();
    for _ in 0..4 {
        b.push(pool.alloc().unwrap()).unwrap();
    }
    let first = b.drain().next();
    assert!(first.is_some() && b.is_empty());
    drop(first);
    assert_eq!(pool.available(), start_avail);

    // Only the main lcore launches: from another thread (not an EAL
    // thread), or from the worker itself, it is refused.
    let e2 = eal.clone();
    let from_thread = std::thread::spawn(move || e2.launch(worker, || 0).map(drop))
        .join()
        .unwrap();
    assert!(
        matches!(from_thread, Err(dpdk::LaunchError::NotMainLcore { main: 0, .. })),
        "{from_thread:?}"
    );
    let e3 = eal.clone();
    let refused = Arc::new(AtomicBool::new(false));
    let r = refused.clone();
    let h = eal
        .launch(worker, move || {
            let res = e3.launch(worker, || 0).map(drop);
            r.store(
                matches!(res, Err(dpdk::LaunchError::NotMainLcore { caller: 1, .. })),
                Ordering::Relaxed,
            );
            0
        })
        .unwrap();
    assert_eq!(h.join(), 0);
    assert!(refused.load(Ordering::Relaxed), "a worker cannot launch");

    // A pool dropped while one of its mbufs is out is leaked, not freed:
    // the mbuf stays valid and no later pool hands its memory out again.
    let leaky = common::pool(&eal, "leaky_pool", 63);
    let mut kept = leaky.alloc().unwrap();
    kept.append(4).unwrap().copy_from_slice(&[1, 2, 3, 4]);
    drop(leaky);
    let fresh = common::pool(&eal, "fresh_pool", 63);
    let others: Vec<_> = (0..63).map(|_| fresh.alloc().unwrap()).collect();
    for mut m in others {
        assert_ne!(
            m.append(4).unwrap().as_ptr(),
            kept.data().as_ptr(),
            "memory handed out twice"
        );
        m.data_mut().copy_from_slice(&[9; 4]);
    }
    assert_eq!(kept.data(), &[1, 2, 3, 4]);
    drop(kept);

    // A pool dropped while a worker lcore runs is leaked too, even with
    // every mbuf back: its count may be over by a cache flush in progress.
    // Seen by its name, which only a freed pool gives back.
    let again = |name: &str| {
        dpdk::Mempool::new(
            &eal,
            name,
            63,
            32,
            dpdk_sys::RTE_MBUF_DEFAULT_BUF_SIZE as u16,
            None,
        )
        .is_ok()
    };
    let spinning = Arc::new(AtomicBool::new(true));
    let s = spinning.clone();
    let h = eal
        .launch(worker, move || {
            while s.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
            0
        })
        .unwrap();
    drop(common::pool(&eal, "while_running", 63));
    let reused = again("while_running");
    // The lcore stops before anything is asserted, so a failure does not
    // leave it spinning (the handle's drop would wait for it forever).
    spinning.store(false, Ordering::Relaxed);
    assert_eq!(h.join(), 0);
    assert!(!reused, "leaked: its name is still taken");
    drop(common::pool(&eal, "after_join", 63));
    assert!(again("after_join"), "freed once no lcore runs");
}
