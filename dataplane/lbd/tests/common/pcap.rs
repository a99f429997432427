//! lbd on two net_pcap ports: the frames of a pcap file per port go in,
//! what lbd sends on each comes out in another. For what the veth lab of
//! `e2e.rs` cannot carry (802.1Q tags, frames larger than af_packet takes).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Lbd;

/// The Internet checksum (RFC 1071) of `b`: what goes in an IPv4 or ICMP
/// header's checksum field (zeroed first), and 0 over a correct one.
pub fn internet_checksum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// Writes `frames` as a pcap file (Ethernet, no timestamps).
pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    // Magic, version 2.4, no time zone or accuracy, snap length, Ethernet.
    let mut out = 0xa1b2_c3d4u32.to_le_bytes().to_vec();
    out.extend_from_slice(&[2, 0, 4, 0]);
    for w in [0u32, 0, 65_535, 1] {
        out.extend_from_slice(&w.to_le_bytes());
    }
    for f in frames {
        for w in [0u32, 0, f.len() as u32, f.len() as u32] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(f);
    }
    std::fs::write(path, out).unwrap();
}

/// The frames of a pcap file [`write_pcap`] or net_pcap wrote.
pub fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(b.len() >= 24, "{}: no pcap header", path.display());
    let le = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap()) as usize;
    let (mut at, mut frames) = (24, Vec::new());
    while at + 16 <= b.len() {
        let n = le(at + 8);
        frames.push(b[at + 16..at + 16 + n].to_vec());
        at += 16 + n;
    }
    frames
}

/// What one run on pcap ports left: lbd's log (its exit summary
/// included) and the frames it sent on ports 0 and 1. Its directory (the
/// pcap files, the config, the log) is removed when it drops, unless the
/// test is failing.
pub struct Ran {
    pub log: String,
    pub out: [Vec<Vec<u8>>; 2],
    dir: PathBuf,
}

impl Drop for Ran {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Runs lbd (one lcore, no hugepages) with `config` on two pcap ports
/// fed `in0` and `in1`, lets it work for 1.5 s (the control thread
/// announces at once and asks for next hops every 5 ms), stops it with
/// SIGTERM and asserts it exited 0. `tag` names its directory and file
/// prefix (one run per tag at a time).
pub fn run(tag: &str, config: &str, in0: &[Vec<u8>], in1: &[Vec<u8>]) -> Ran {
    let dir = std::env::temp_dir().join(format!("lbd-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let p = |n: &str| -> PathBuf { dir.join(n) };
    write_pcap(&p("in0.pcap"), in0);
    write_pcap(&p("in1.pcap"), in1);
    std::fs::write(p("lbd.toml"), config).unwrap();
    let s = |n: &str| p(n).display().to_string();
    let vdev = |i: u8| {
        format!(
            "net_pcap{i},rx_pcap={},tx_pcap={}",
            s(&format!("in{i}.pcap")),
            s(&format!("out{i}.pcap"))
        )
    };
    let prefix = format!("--file-prefix=lbdtest-{tag}-{}", std::process::id());
    let (v0, v1, cfg, sock) = (vdev(0), vdev(1), s("lbd.toml"), s("lbd.sock"));
    let args = [
        "--no-huge",
        "--lcores",
        "0",
        &prefix,
        "--vdev",
        &v0,
        "--vdev",
        &v1,
        "--config",
        &cfg,
        "--grpc",
        &sock,
    ];
    let mut lbd = Lbd::start(&args, &p("lbd.log"));
    lbd.wait_for_log("lbd running", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(1500));
    let (code, _) = lbd.signal_and_wait(15, Duration::from_secs(15));
    let log = lbd.log_text();
    assert_eq!(code, Some(0), "{log}");
    let out = [read_pcap(&p("out0.pcap")), read_pcap(&p("out1.pcap"))];
    Ran { log, out, dir }
}
