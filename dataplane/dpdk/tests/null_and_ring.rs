//! net_null and net_ring: packets out and back in, counters, errors, teardown.
mod common;

use dpdk::{Burst, Port, PortConfig, PortError, BURST_MAX};

#[test]
fn null_and_ring_ports() {
    let eal = common::eal("-l0", &["--vdev=net_null0", "--vdev=net_ring0"]);
    assert_eq!(eal.port_count(), 2);
    assert_eq!(eal.port_ids(), [0, 1], "no owned sub-ports, no holes");
    assert!(eal.worker_lcores().is_empty());
    assert!(matches!(
        dpdk::Eal::init(&["again"]),
        Err(dpdk::EalError::AlreadyInitialised)
    ));
    let null_id = eal.port_by_name("net_null0").expect("net_null0 is a port");
    let ring_id = eal.port_by_name("net_ring0").expect("net_ring0 is a port");
    assert!(eal.port_by_name("net_nope0").is_none());

    let pool = common::pool(&eal, "pool", 1023);
    let start_avail = pool.available();

    // More queues than the device allows is a clear error.
    let too_many = PortConfig {
        rx_queues: 4096,
        tx_queues: 4096,
        ..PortConfig::default()
    };
    match Port::configure(&eal, null_id, &too_many, pool.clone()) {
        Err(PortError::TooManyQueues { max_rx, .. }) => assert!(max_rx < 4096),
        other => panic!("expected TooManyQueues, got {other:?}"),
    }
    assert!(matches!(
        Port::configure(&eal, 77, &PortConfig::default(), pool.clone()),
        Err(PortError::NoSuchPort(77))
    ));

    // net_null: tx swallows everything, rx produces empty-payload packets.
    let null = Port::configure(&eal, null_id, &PortConfig::default(), pool.clone()).expect("configure null");
    // One `Port` per device: a second would hand out the same queues.
    assert!(matches!(
        Port::configure(&eal, null_id, &PortConfig::default(), pool.clone()),
        Err(PortError::InUse(id)) if id == null_id
    ));
    assert_eq!(null.info().driver, "net_null");
    null.start().expect("start null");
    let mut tx = null.tx_queue(0).unwrap();
    assert!(null.tx_queue(0).is_err(), "a queue can be taken once");
    let mut b = Burst::new();
    for i in 0..BURST_MAX {
        let mut m = pool.alloc().expect("alloc");
        let f = common::udp_frame(i as u16, 18);
        m.append(f.len() as u16).unwrap().copy_from_slice(&f);
        b.push(m).unwrap();
    }
    assert!(b.is_full());
    let sent = tx.tx_burst(&mut b);
    assert_eq!(sent, BURST_MAX);
    assert!(b.is_empty());
    let mut rx = null.rx_queue(0).unwrap();
    let mut rb = Burst::new();
    assert!(rx.rx_burst(&mut rb) > 0, "net_null always has packets");
    rb.clear();
    let st = null.stats().unwrap();
    assert_eq!(st.opackets, BURST_MAX as u64);
    assert!(st.ipackets > 0);

    // net_null has no rte_flow: the rule is refused with an error, not a crash.
    let e = dpdk::flow::FlowRule::steer_v4_dst_port(
        &null,
        "10.1.0.1".parse().unwrap(),
        dpdk::flow::L4::Tcp,
        1,
        1,
        0,
    )
    .expect_err("net_null has no flow API");
    assert_eq!(e.port, null_id);
    assert!(e.errno > 0, "{e}");

    // net_ring: what goes out of tx queue 0 comes back on rx queue 0, byte for byte.
    let ring = Port::configure(&eal, ring_id, &PortConfig::default(), pool.clone()).expect("configure ring");
    ring.start().unwrap();
    let mac = ring.mac();
    assert_eq!(mac.to_string().len(), 17);
    assert!(ring.link().up);
    let (mut rtx, mut rrx) = (ring.tx_queue(0).unwrap(), ring.rx_queue(0).unwrap());
    let frames: Vec<Vec<u8>> = (0..10)
        .map(|i| common::udp_frame(1000 + i, 100 + i as usize))
        .collect();
    for f in &frames {
        let mut m = pool.alloc().unwrap();
        m.append(f.len() as u16).unwrap().copy_from_slice(f);
        b.push(m).unwrap();
    }
    assert_eq!(rtx.tx_burst(&mut b), 10);
    let mut got = Burst::new();
    assert_eq!(rrx.rx_burst(&mut got), 10);
    for (i, mut m) in got.drain().enumerate() {
        assert_eq!(m.data(), &frames[i][..]);
        m.data_mut()[0] = 0xff; // writable in place
        assert_eq!(m.data()[0], 0xff);
        assert!(m.set_len(20 + i));
        assert_eq!((m.len(), m.pkt_len()), (20 + i, 20 + i));
        assert_eq!(m.segments(), 1);
        assert_eq!(&m.data()[1..], &frames[i][1..20 + i]);
        b.push(m).unwrap();
    }
    // A trimmed mbuf goes out at its new length (pkt_len follows data_len),
    // and grows back into its tailroom.
    assert_eq!(rtx.tx_burst(&mut b), 10);
    assert_eq!(rrx.rx_burst(&mut got), 10);
    // Burst::grow: zeroed bytes of the tailroom (the trimmed frame's old
    // bytes 20..28 were not zero), or nothing when they do not fit.
    assert_ne!(&frames[0][20..28], &[0; 8]);
    assert!(!got.grow(0, u16::MAX));
    assert_eq!(got.data_mut(0).len(), 20);
    assert!(got.grow(0, 8));
    assert_eq!(got.data_mut(0).len(), 28);
    assert_eq!(&got.data_mut(0)[20..], &[0; 8]);
    assert_eq!(&got.data_mut(0)[1..20], &frames[0][1..20]);
    for (i, mut m) in got.drain().enumerate() {
        if i == 0 {
            assert_eq!(m.pkt_len(), 28, "pkt_len follows");
            assert!(m.set_len(20));
        }
        assert_eq!(m.len(), 20 + i);
        assert_eq!(m.data()[0], 0xff);
        assert_eq!(&m.data()[1..], &frames[i][1..20 + i]);
        assert!(m.set_len(0) && m.is_empty() && m.pkt_len() == 0);
        assert!(m.set_len(30) && m.len() == 30 && m.pkt_len() == 30);
    }
    let rs = ring.stats().unwrap();
    assert_eq!((rs.ipackets, rs.opackets), (20, 20));

    // Teardown: every mbuf is back in the pool once the queues are gone.
    // Stopping a device whose queue handles live (an lcore may be inside a
    // burst call) is refused.
    assert!(matches!(ring.stop(), Err(PortError::QueuesInUse { live: 2, .. })));
    drop((tx, rx, rtx, rrx));
    null.stop().unwrap();
    ring.stop().unwrap();
    drop((null, ring));
    assert_eq!(pool.available(), start_avail, "no mbuf leaked");
}
