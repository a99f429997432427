//! net_pcap: frames read from a pcap file, written to another, byte for
//! byte; frames larger than an mbuf, which the PMD chains, are freed by
//! `Burst::free_chained` without a leak.
mod common;

use std::io::Write;

use dpdk::{Burst, Port, PortConfig};

fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) {
    let mut f = std::fs::File::create(path).unwrap();
    // Global header: magic, v2.4, tz 0, sigfigs 0, snaplen 65535, Ethernet.
    let mut h = Vec::new();
    h.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&4u16.to_le_bytes());
    h.extend_from_slice(&[0; 8]);
    h.extend_from_slice(&65535u32.to_le_bytes());
    h.extend_from_slice(&1u32.to_le_bytes());
    for (i, fr) in frames.iter().enumerate() {
        h.extend_from_slice(&(i as u32).to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&(fr.len() as u32).to_le_bytes());
        h.extend_from_slice(&(fr.len() as u32).to_le_bytes());
        h.extend_from_slice(fr);
    }
    f.write_all(&h).unwrap();
}

fn read_pcap(path: &std::path::Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(path).unwrap();
    assert!(d.len() >= 24, "pcap header present");
    let mut out = Vec::new();
    let mut off = 24;
    while off + 16 <= d.len() {
        let incl = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        out.push(d[off + 16..off + 16 + incl].to_vec());
        off += 16 + incl;
    }
    out
}

#[test]
fn pcap_in_pcap_out() {
    let dir = std::env::temp_dir().join(format!("dpdk-pcap-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (inp, outp) = (dir.join("in.pcap"), dir.join("out.pcap"));
    let frames: Vec<Vec<u8>> = (0..50)
        .map(|i| common::udp_frame(2000 + i, 18 + 7 * i as usize))
        .collect();
    // Two frames larger than an mbuf's 2 KiB data room among them: the PMD
    // chains each over two or three mbufs.
    let mut input = frames.clone();
    input.insert(10, common::udp_frame(1, 3000));
    input.insert(31, common::udp_frame(2, 5000));
    write_pcap(&inp, &input);

    let vdev = format!(
        "--vdev=net_pcap0,rx_pcap={},tx_pcap={}",
        inp.display(),
        outp.display()
    );
    let eal = common::eal("-l0", &[&vdev]);
    let pool = common::pool(&eal, "pcap_pool", 511);
    let id = eal.port_by_name("net_pcap0").expect("pcap port probed");
    let port = Port::configure(&eal, id, &PortConfig::default(), pool.clone()).unwrap();
    port.start().unwrap();
    let (mut rx, mut tx) = (port.rx_queue(0).unwrap(), port.tx_queue(0).unwrap());

    let mut b = Burst::new();
    let (mut received, mut chained) = (0, 0);
    for _ in 0..1000 {
        received += rx.rx_burst(&mut b);
        chained += b.free_chained();
        while !b.is_empty() {
            tx.tx_burst(&mut b);
        }
        if received == input.len() {
            break;
        }
    }
    assert_eq!(received, input.len());
    assert_eq!(chained, 2, "the two large frames");
    let st = port.stats().unwrap();
    assert_eq!(st.ipackets, 52);
    assert_eq!(st.opackets, 50);
    drop((rx, tx));
    port.stop().unwrap();
    drop(port); // closes the device, which flushes the tx pcap
                // In order, without the large frames.
    assert_eq!(read_pcap(&outp), frames);
    // Every segment of the chains went back to the pool.
    assert_eq!(pool.available(), 511);
    std::fs::remove_dir_all(&dir).ok();
}
