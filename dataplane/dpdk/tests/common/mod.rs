//! Shared set-up for the wrapper tests. Each test file is its own process
//! with exactly one `#[test]`, because EAL initialises once per process.
#![allow(dead_code)]

use std::sync::Arc;

use dpdk::{Eal, Mempool};

/// EAL arguments for a test: no hugepages, no PCI, no shared config (so
/// test processes can run side by side), quiet logs, plus `extra`.
/// `lcores` is the whole EAL flag, e.g. `-l0` or `--lcores=0@0,1@0`.
pub fn eal(lcores: &str, extra: &[&str]) -> Eal {
    let mut args: Vec<String> = vec![
        "dpdk-test".into(),
        lcores.into(),
        "--no-huge".into(),
        "-m".into(),
        "256".into(),
        "--no-pci".into(),
        "--no-shconf".into(),
        format!("--file-prefix=dpdk-test-{}", std::process::id()),
        "--log-level=warning".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    Eal::init(&args).expect("EAL init")
}

pub fn pool(eal: &Eal, name: &str, n: u32) -> Arc<Mempool> {
    Arc::new(
        Mempool::new(eal, name, n, 32, dpdk_sys::RTE_MBUF_DEFAULT_BUF_SIZE as u16, None).expect("mempool"),
    )
}

/// A UDP/IPv4 frame of `payload` bytes built by etherparse.
pub fn udp_frame(src_port: u16, payload: usize) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(src_port, 53);
    let data = vec![0xab; payload];
    let mut out = Vec::with_capacity(b.size(payload));
    b.write(&mut out, &data).expect("build frame");
    out
}
