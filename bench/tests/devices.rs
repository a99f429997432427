//! lb-bench against the devices it measures, each in its own process over a
//! memif pair, as `bench/run.sh` runs them (without hugepages, at a low
//! rate, on debug builds):
//! - lbd in full-NAT and in DNAT: every flow opens, every packet is
//!   checked, no violation, nothing lost; also over two frontends with new
//!   connections mixed in. "Nothing lost" is checked against the device's
//!   final counters: the one loss allowed is what the device counted as
//!   refused by the generator's full receive ring (the generator was
//!   descheduled on a busy two-CPU machine), at most 1% of the run; any
//!   other drop the device counts fails the test;
//! - the checker itself: lbd in full-NAT measured as if it did DNAT makes
//!   every forward packet a violation, and lb-bench exits 3;
//! - dpdk-testpmd in io mode, the baseline: frames come back untouched.
//!
//! Needs root (EAL, memif sockets) and `scripts/setup.sh` (dpdk-testpmd).

#[path = "../../dataplane/lbd/tests/common/nested_cargo.rs"]
mod nested_cargo;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One device and one generator at a time: the machine has two CPUs.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0")),
        "these tests need root (EAL and memif sockets): run scripts/test.sh as root"
    );
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn gen_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lb-bench"))
}

/// The log file of a device, opened for appending: stdout and stderr each
/// get a handle, and appends from both land at the end instead of writing
/// over each other from position 0.
fn log_file(path: &std::path::Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("log")
}

/// lbd next to lb-bench, built (or brought up to date) once per run.
fn lbd_bin() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let gen = gen_bin();
            let target = gen.parent().and_then(Path::parent).expect("target dir");
            let mut c = Command::new(env!("CARGO"));
            c.args(["build", "--quiet", "-p", "lbd", "--target-dir"])
                .arg(target)
                .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
            nested_cargo::without_package_env(&mut c);
            if gen.parent().is_some_and(|d| d.ends_with("release")) {
                c.arg("--release");
            }
            assert!(
                c.status().expect("cargo build lbd").success(),
                "building lbd failed"
            );
            gen.with_file_name("lbd")
        })
        .clone()
}

/// A scratch directory, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("lb-bench-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The device under test, killed on drop.
struct Device {
    child: Child,
    log: PathBuf,
    testpmd: bool,
    /// Its log once [`Device::stop`] has stopped it.
    stopped: Option<String>,
}

impl Device {
    /// Waits until `ready` appears in the log (10 s at most).
    fn wait_for(&mut self, ready: &str) {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains(ready) {
                return;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("the device exited ({st}) before {ready:?}:\n{log}");
            }
            assert!(Instant::now() < end, "no {ready:?} within 10 s:\n{log}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops the device as an operator would, so that it prints its final
    /// counters (lbd: SIGTERM; testpmd: enter on its stdin), and returns
    /// its log; 10 s at most, then it is killed. Again: the same log.
    fn stop(&mut self) -> String {
        if let Some(log) = &self.stopped {
            return log.clone();
        }
        // Dead before being asked to stop: say how, rather than that its
        // counters are missing. (DPDK 22.11's memif PMD can crash the
        // server when its peer disconnects: bench/RESULTS.md.)
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!("the device died before it was stopped ({st}):\n{}", self.log());
        }
        if self.testpmd {
            use std::io::Write;
            if let Some(mut stdin) = self.child.stdin.take() {
                let _ = stdin.write_all(b"\n");
            }
        } else {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
        }
        let end = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
        let log = self.log();
        self.stopped = Some(log.clone());
        log
    }
}

/// What a device's final counters (printed when it stops) say it dropped.
#[derive(Debug, Default)]
struct Drops {
    /// The generator's receive ring was full: the device's transmit
    /// refused (lbd's `tx_full`, testpmd's TX-dropped).
    tx_full: u64,
    /// Every other drop reason (lbd's), by name.
    other: Vec<(String, u64)>,
    /// Refused on the device's side of the link before it saw them
    /// (lbd: port imissed, ierrors, rx_nombuf; testpmd: RX-dropped).
    port: u64,
}

fn final_drops(dev: &Device, log: &str) -> Drops {
    if dev.testpmd {
        testpmd_drops(log)
    } else {
        lbd_drops(log)
    }
}

/// testpmd's "Accumulated forward statistics for all ports" on exit.
fn testpmd_drops(log: &str) -> Drops {
    let at = log
        .find("Accumulated forward statistics")
        .unwrap_or_else(|| panic!("testpmd printed no forward statistics:\n{log}"));
    let field = |key: &str| -> u64 {
        let rest = &log[at..][log[at..].find(key).expect(key) + key.len()..];
        let digits: String = rest
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap_or_else(|_| panic!("no number after {key}"))
    };
    Drops {
        tx_full: field("TX-dropped:"),
        other: Vec::new(),
        port: field("RX-dropped:"),
    }
}

/// Parses lbd's `final counters:` block; panics if there is none.
fn lbd_drops(log: &str) -> Drops {
    let at = log
        .find("final counters:")
        .unwrap_or_else(|| panic!("lbd printed no final counters:\n{log}"));
    let mut d = Drops::default();
    for line in log[at..].lines().map(str::trim) {
        if line.starts_with("port ") {
            for key in ["imissed", "ierrors", "rx_nombuf"] {
                let n = line
                    .split(", ")
                    .find_map(|f| f.strip_prefix(key)?.trim().parse::<u64>().ok())
                    .unwrap_or_else(|| panic!("no {key} in {line:?}"));
                d.port += n;
            }
        } else if line.starts_with("worker ") {
            let Some((_, reasons)) = line.split_once(" drops ") else {
                panic!("no drops in {line:?}");
            };
            let list = reasons
                .split_once(" (")
                .map_or("", |(_, r)| r.trim_end_matches(')'));
            for item in list.split(", ").filter(|i| !i.is_empty()) {
                let (name, n) = item.split_once('=').expect("reason=count");
                let n: u64 = n.parse().expect("drop count");
                match name {
                    "tx_full" => d.tx_full += n,
                    _ => d.other.push((name.to_string(), n)),
                }
            }
        }
    }
    d
}

impl Drop for Device {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn socket(dir: &Dir) -> String {
    format!("{}/memif.sock", dir.0.display())
}

/// lbd with one port on the memif link: interface 10.0.0.1/8 (clients and
/// backends on-link), frontends 10.0.0.100:80/tcp and 10.0.0.101:80/tcp of
/// one service to 10.0.1.1-3:8080 in `mode`, SNAT addresses 10.0.0.200-203.
fn lbd(dir: &Dir, mode: &str) -> Device {
    let config = dir.0.join("lbd.toml");
    let mut toml = String::from(
        "[[interface]]\naddress = \"10.0.0.1/8\"\n\n[snat]\n\
         addresses = [\"10.0.0.200\", \"10.0.0.201\", \"10.0.0.202\", \"10.0.0.203\"]\n\n",
    );
    toml += &format!(
        "[[service]]\nname = \"bench/web\"\nmode = \"{mode}\"\n\n\
         [[service.frontend]]\naddress = \"10.0.0.100:80\"\nprotocol = \"tcp\"\n\n\
         [[service.frontend]]\naddress = \"10.0.0.101:80\"\nprotocol = \"tcp\"\n"
    );
    for b in 1..=3 {
        toml += &format!("\n[[service.backend]]\naddress = \"10.0.1.{b}:8080\"\n");
    }
    std::fs::write(&config, toml).expect("write config");
    let log = dir.0.join("device.log");
    let child = Command::new(lbd_bin())
        .args(["--lcores", "0", "--no-huge", "--conntrack-size", "65536"])
        .arg(format!("--file-prefix=lbbt-dut-{}", std::process::id()))
        .arg(format!("--vdev=net_memif0,role=server,socket={}", socket(dir)))
        .arg("--config")
        .arg(&config)
        .arg("--grpc")
        .arg(dir.0.join("lbd.sock"))
        .stdin(Stdio::null())
        .stdout(log_file(&log))
        .stderr(log_file(&log))
        .spawn()
        .expect("spawn lbd");
    let mut d = Device {
        child,
        log,
        testpmd: false,
        stopped: None,
    };
    d.wait_for("lbd running");
    d
}

/// dpdk-testpmd forwarding io on the memif link; its main lcore blocks
/// reading the piped stdin.
fn testpmd(dir: &Dir) -> Device {
    let log = dir.0.join("device.log");
    let child = Command::new("stdbuf")
        .args([
            "-oL",
            "dpdk-testpmd",
            "-l",
            "0,1",
            "--no-huge",
            "-m",
            "512",
            "--no-pci",
            "--no-telemetry",
        ])
        .arg(format!("--file-prefix=lbbt-dut-{}", std::process::id()))
        .arg(format!("--vdev=net_memif0,role=server,socket={}", socket(dir)))
        .args([
            "--",
            "--forward-mode=io",
            "--port-topology=loop",
            "--nb-cores=1",
            "--total-num-mbufs=16384",
            "--disable-link-check",
        ])
        .stdin(Stdio::piped())
        .stdout(log_file(&log))
        .stderr(log_file(&log))
        .spawn()
        .expect("spawn dpdk-testpmd (installed by scripts/setup.sh)");
    let mut d = Device {
        child,
        log,
        testpmd: true,
        stopped: None,
    };
    d.wait_for("Press enter to exit");
    d
}

/// Runs `lb-bench gen` against the device (64 flows from 4 clients, 20k
/// client packets a second, 2 s measured), stops the device once the
/// summary is written, with the generator still connected (`--linger`),
/// as `bench/run.sh` does; returns the generator's exit code, output and
/// JSON summary. The generator must leave as soon as the device closes the
/// link.
fn gen(dir: &Dir, dev: &mut Device, dut: &str, extra: &[&str]) -> (Option<i32>, String, serde_json::Value) {
    let json = dir.0.join("summary.json");
    let mut child = Command::new(gen_bin())
        .args([
            "gen",
            "--no-huge",
            "--lcore",
            "0",
            "--dut",
            dut,
            "--snat-count",
            "4",
        ])
        .args([
            "--clients",
            "4",
            "--ports",
            "16",
            "--rate",
            "0.02",
            "--seconds",
            "2",
            "--warmup",
            "0.5",
            // Ends as soon as every packet is back: a long bound costs
            // nothing unless a stall of the shared machine holds some.
            "--drain",
            "5",
            "--linger",
            "30",
        ])
        .args(extra)
        .arg(format!("--file-prefix=lbbt-gen-{}", std::process::id()))
        .arg(format!("--vdev=net_memif0,role=client,socket={}", socket(dir)))
        .arg("--json")
        .arg(&json)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lb-bench");
    // Bounded: warm-up, opening and the measured period take a few
    // seconds; the summary is written whole (renamed into place).
    let end = Instant::now() + Duration::from_secs(60);
    while !json.exists() && child.try_wait().expect("wait lb-bench").is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            panic!("lb-bench wrote no summary within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    dev.stop();
    let stopped = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait lb-bench") {
            break st;
        }
        if stopped.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("lb-bench did not leave within 10 s of the device stopping");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    child.stdout.take().map(|mut o| o.read_to_string(&mut out));
    child.stderr.take().map(|mut e| e.read_to_string(&mut out));
    assert!(
        out.contains("lb-bench: the device closed the link"),
        "lb-bench did not see the link close:\n{out}"
    );
    let summary = std::fs::read_to_string(&json)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_else(|| panic!("no JSON summary; lb-bench said:\n{out}"));
    (status.code(), out, summary)
}

fn counter(s: &serde_json::Value, name: &str) -> u64 {
    s["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name} in {s}"))
}

/// Sent in the measured period and not received. A packet held past the
/// pause before the period by a stall of the machine may arrive in it
/// (and be counted as received though sent before), hence saturating.
fn lost(sent: u64, received: u64) -> u64 {
    sent.saturating_sub(received)
}

/// Nothing was lost that the device did not count, and only for the one
/// reason a shared two-CPU machine excuses: the generator, descheduled,
/// left its receive ring full (lbd's `tx_full`). The device dropped
/// nothing for any other reason; `lost` is what the generator sent and did
/// not get back, both directions together. Stops the device.
fn assert_nothing_lost_uncounted(lost: u64, sent: u64, dev: &mut Device, ctx: &str) {
    let log = dev.stop();
    let d = final_drops(dev, &log);
    let ctx = || format!("{ctx}\ndevice after stopping:\n{log}");
    assert!(d.other.is_empty(), "the device dropped packets: {d:?}; {}", ctx());
    assert_eq!(d.port, 0, "the device's port refused packets; {}", ctx());
    // The final counters cover the warm-up too, so they may hold more.
    assert!(
        lost <= d.tx_full,
        "{lost} packets lost, the device counted {} refused by a full ring; {}",
        d.tx_full,
        ctx()
    );
    // A stall costs a ring's worth at most, not a share of the run.
    assert!(lost * 100 <= sent, "{lost} of {sent} lost; {}", ctx());
}

/// Everything sent came back (both directions), with nothing wrong; what
/// did not come back lbd counted as refused by the generator's full ring.
fn assert_clean(code: Option<i32>, out: &str, s: &serde_json::Value, dev: &mut Device) {
    let ctx = || format!("lb-bench:\n{out}\ndevice:\n{}", dev.log());
    assert_eq!(code, Some(0), "{}", ctx());
    assert_eq!(s["violations"], 0, "{}", ctx());
    let (tf, rf) = (counter(s, "tx_forward"), counter(s, "rx_forward"));
    let (tr, rr) = (counter(s, "tx_reply"), counter(s, "rx_reply"));
    // 20k a second for 2 s, give or take the pacing's start.
    assert!(tf > 30_000, "only {tf} client packets sent; {}", ctx());
    // Every forward packet is answered, but for replies the link refused
    // (which no longer count as sent).
    let refused = counter(s, "tx_full");
    assert!(
        rf.saturating_sub(tr) <= refused,
        "every forward packet is answered; {}",
        ctx()
    );
    assert!(s["latency_us"]["samples"].as_u64().unwrap_or(0) > 0, "{}", ctx());
    let ctx = format!("lb-bench:\n{out}");
    assert_nothing_lost_uncounted(lost(tf, rf) + lost(tr, rr), tf + tr, dev, &ctx);
}

#[test]
fn lbd_fullnat_and_dnat_pass_every_check() {
    let _g = serial();
    for mode in ["fullnat", "dnat"] {
        let dir = Dir::new(mode);
        let mut dev = lbd(&dir, mode);
        let (code, out, s) = gen(&dir, &mut dev, mode, &[]);
        // memif's link comes up when the generator connects; lbd notices
        // (it reads the link at every neighbor step), says so, and only
        // then announces its seven addresses (interface, two VIPs, four
        // SNAT).
        let log = dev.log();
        let up = log.find("port link up");
        let announced = log.find("owned addresses announced port=0 addresses=7");
        assert!(up.is_some() && announced > up, "{log}");
        assert_clean(code, &out, &s, &mut dev);
    }
}

#[test]
fn two_frontends_with_new_connections_mixed_in() {
    let _g = serial();
    let dir = Dir::new("mix");
    let mut dev = lbd(&dir, "fullnat");
    let args = [
        "--vip",
        "10.0.0.100:80",
        "--vip",
        "10.0.0.101:80",
        "--new-share",
        "0.1",
    ];
    let (code, out, s) = gen(&dir, &mut dev, "fullnat", &args);
    let ctx = format!("lb-bench:\n{out}\ndevice:\n{}", dev.log());
    assert_eq!(code, Some(0), "{ctx}");
    assert_eq!(s["violations"], 0, "{ctx}");
    let (tf, rf) = (counter(&s, "tx_forward"), counter(&s, "rx_forward"));
    let (tr, rr) = (counter(&s, "tx_reply"), counter(&s, "rx_reply"));
    // One packet in ten is a new connection's SYN, which is not answered;
    // nor are the replies the link refused (no longer counted as sent).
    let (unanswered, refused) = (rf.saturating_sub(tr), counter(&s, "tx_full"));
    assert!(
        unanswered * 100 >= tf * 9 && unanswered.saturating_sub(refused) * 100 <= tf * 11,
        "{unanswered} forward packets unanswered ({refused} refused by the link) of {tf}; {ctx}"
    );
    assert_nothing_lost_uncounted(lost(tf, rf) + lost(tr, rr), tf + tr, &mut dev, &ctx);
}

#[test]
fn a_wrong_source_is_a_violation() {
    let _g = serial();
    let dir = Dir::new("wrong");
    let mut dev = lbd(&dir, "fullnat");
    // lbd does full-NAT; lb-bench expects the client as the source.
    let (code, out, s) = gen(&dir, &mut dev, "dnat", &[]);
    assert_eq!(code, Some(3), "lb-bench:\n{out}\ndevice:\n{}", dev.log());
    let wrong = counter(&s, "wrong_source");
    assert!(wrong > 0 && wrong == counter(&s, "rx_forward"), "{s}");
    assert_eq!(s["violations"].as_u64(), Some(wrong), "{s}");
    assert!(out.contains("violations"), "{out}");
}

#[test]
fn final_counters_are_read() {
    let lbd = "INFO lbd running\nfinal counters:\n  port 0 (net_memif0): rx 0 pkts 0 bytes, \
               tx 0 pkts 0 bytes, imissed 2, ierrors 0, oerrors 0, rx_nombuf 1\n  worker 0: rx 9 \
               tx 7 local_replies 0 drops 5 (tx_full=3, no_neighbor=2)\n  worker 1: rx 1 tx 1 \
               drops 0\n  control: arp_requests 1 neighbor_drops 288\n";
    let d = lbd_drops(lbd);
    assert_eq!((d.tx_full, d.port), (3, 3), "{d:?}");
    assert_eq!(d.other, [("no_neighbor".to_string(), 2)]);
    let testpmd = "  ++++ Accumulated forward statistics for all ports ++++\n  \
                   RX-packets: 40000          RX-dropped: 4             RX-total: 40004\n  \
                   TX-packets: 39990          TX-dropped: 10            TX-total: 40000\n";
    let d = testpmd_drops(testpmd);
    assert_eq!((d.tx_full, d.port, d.other.len()), (10, 4, 0), "{d:?}");
}

#[test]
fn bad_timings_are_one_line_errors() {
    for (flag, value) in [
        ("--warmup", "-1"),
        ("--drain", "nan"),
        ("--seconds", "0"),
        ("--linger", "-2"),
    ] {
        let out = Command::new(gen_bin())
            .args(["gen", "--vdev", "net_null0", &format!("{flag}={value}")])
            .output()
            .expect("run lb-bench");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flag} {value}: {err}");
        assert!(
            err.contains(flag) && err.trim().lines().count() == 1,
            "{flag} {value}: {err}"
        );
    }
}

#[test]
fn testpmd_io_forwarding_is_the_baseline() {
    let _g = serial();
    let dir = Dir::new("testpmd");
    let mut dev = testpmd(&dir);
    let (code, out, s) = gen(&dir, &mut dev, "reflect", &[]);
    assert_clean(code, &out, &s, &mut dev);
}
