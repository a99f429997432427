//! lb-bench against the devices it measures, each in its own process over a
//! memif pair, as `bench/run.sh` runs them (without hugepages, at a low
//! rate, on debug builds):
//! - lbd in full-NAT and in DNAT: every flow opens, every packet is
//!   checked, no violation, nothing lost; also over two frontends with new
//!   connections mixed in;
//! - the checker itself: lbd in full-NAT measured as if it did DNAT makes
//!   every forward packet a violation, and lb-bench exits 3;
//! - dpdk-testpmd in io mode, the baseline: frames come back untouched.
//!
//! Needs root (EAL, memif sockets) and `scripts/setup.sh` (dpdk-testpmd).

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
        .stdout(std::fs::File::create(&log).expect("log"))
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("spawn lbd");
    let mut d = Device { child, log };
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
        .stdout(std::fs::File::create(&log).expect("log"))
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("spawn dpdk-testpmd (installed by scripts/setup.sh)");
    let mut d = Device { child, log };
    d.wait_for("Press enter to exit");
    d
}

/// Runs `lb-bench gen` against the device (64 flows from 4 clients, 20k
/// client packets a second, 2 s measured); returns its exit code, output
/// and JSON summary.
fn gen(dir: &Dir, dut: &str, extra: &[&str]) -> (Option<i32>, String, serde_json::Value) {
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
    // Bounded: warm-up, opening and the measured period take a few seconds.
    let end = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait lb-bench") {
            break st;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("lb-bench did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    child.stdout.take().map(|mut o| o.read_to_string(&mut out));
    child.stderr.take().map(|mut e| e.read_to_string(&mut out));
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

/// Everything sent came back (both directions), with nothing wrong.
fn assert_clean(code: Option<i32>, out: &str, s: &serde_json::Value, dev: &Device) {
    let ctx = || format!("lb-bench:\n{out}\ndevice:\n{}", dev.log());
    assert_eq!(code, Some(0), "{}", ctx());
    assert_eq!(s["violations"], 0, "{}", ctx());
    let (tf, rf) = (counter(s, "tx_forward"), counter(s, "rx_forward"));
    let (tr, rr) = (counter(s, "tx_reply"), counter(s, "rx_reply"));
    // 20k a second for 2 s, give or take the pacing's start.
    assert!(tf > 30_000, "only {tf} client packets sent; {}", ctx());
    assert_eq!(rf, tf, "forward packets lost; {}", ctx());
    assert_eq!(tr, rf, "every forward packet is answered; {}", ctx());
    assert_eq!(rr, tr, "replies lost; {}", ctx());
    assert!(s["latency_us"]["samples"].as_u64().unwrap_or(0) > 0, "{}", ctx());
}

#[test]
fn lbd_fullnat_and_dnat_pass_every_check() {
    let _g = serial();
    for mode in ["fullnat", "dnat"] {
        let dir = Dir::new(mode);
        let dev = lbd(&dir, mode);
        let (code, out, s) = gen(&dir, mode, &[]);
        assert_clean(code, &out, &s, &dev);
        // memif's link comes up when the generator connects; lbd notices
        // within a second and says so.
        assert!(dev.log().contains("port link up"), "{}", dev.log());
    }
}

#[test]
fn two_frontends_with_new_connections_mixed_in() {
    let _g = serial();
    let dir = Dir::new("mix");
    let dev = lbd(&dir, "fullnat");
    let args = [
        "--vip",
        "10.0.0.100:80",
        "--vip",
        "10.0.0.101:80",
        "--new-share",
        "0.1",
    ];
    let (code, out, s) = gen(&dir, "fullnat", &args);
    let ctx = format!("lb-bench:\n{out}\ndevice:\n{}", dev.log());
    assert_eq!(code, Some(0), "{ctx}");
    assert_eq!(s["violations"], 0, "{ctx}");
    let (tf, rf) = (counter(&s, "tx_forward"), counter(&s, "rx_forward"));
    let (tr, rr) = (counter(&s, "tx_reply"), counter(&s, "rx_reply"));
    assert_eq!(rf, tf, "forward packets lost; {ctx}");
    assert_eq!(rr, tr, "replies lost; {ctx}");
    // One packet in ten is a new connection's SYN, which is not answered.
    let syns = rf - tr;
    assert!(
        syns * 100 >= tf * 9 && syns * 100 <= tf * 11,
        "{syns} SYNs of {tf}; {ctx}"
    );
}

#[test]
fn a_wrong_source_is_a_violation() {
    let _g = serial();
    let dir = Dir::new("wrong");
    let dev = lbd(&dir, "fullnat");
    // lbd does full-NAT; lb-bench expects the client as the source.
    let (code, out, s) = gen(&dir, "dnat", &[]);
    assert_eq!(code, Some(3), "lb-bench:\n{out}\ndevice:\n{}", dev.log());
    let wrong = counter(&s, "wrong_source");
    assert!(wrong > 0 && wrong == counter(&s, "rx_forward"), "{s}");
    assert_eq!(s["violations"].as_u64(), Some(wrong), "{s}");
    assert!(out.contains("violations"), "{out}");
}

#[test]
fn testpmd_io_forwarding_is_the_baseline() {
    let _g = serial();
    let dir = Dir::new("testpmd");
    let dev = testpmd(&dir);
    let (code, out, s) = gen(&dir, "reflect", &[]);
    assert_clean(code, &out, &s, &dev);
}
