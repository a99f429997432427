//! Helpers for lbd's end-to-end tests: network namespaces and veth pairs
//! that are removed when the guard drops (also when a test fails), and an
//! lbd child process that is killed if the test does not stop it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The arguments of an lbd on one virtual device without hugepages:
/// `--lcores LCORES --no-huge --mem 512 --file-prefix PREFIX --vdev VDEV
/// --config CONFIG --grpc GRPC`.
pub fn vdev_args<'a>(
    lcores: &'a str,
    prefix: &'a str,
    vdev: &'a str,
    config: &'a str,
    grpc: &'a str,
) -> [&'a str; 13] {
    [
        "--lcores",
        lcores,
        "--no-huge",
        "--mem",
        "512",
        "--file-prefix",
        prefix,
        "--vdev",
        vdev,
        "--config",
        config,
        "--grpc",
        grpc,
    ]
}

/// Path of the lbd binary cargo built for these tests.
pub fn lbd_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lbd"))
}

/// Runs a command; panics with its output when it fails.
pub fn sh(cmd: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(cmd).output().expect("spawn sh");
    assert!(
        out.status.success(),
        "`{cmd}` failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// True when the tests can create namespaces (root with iproute2).
pub fn can_netns() -> bool {
    Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
        && std::fs::metadata("/proc/self").is_ok()
        && unsafe_free_is_root()
}

fn unsafe_free_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// A namespace with one end of a veth pair inside; the other end stays in
/// the root namespace for lbd (net_af_packet) to attach to.
pub struct NetnsVeth {
    pub ns: String,
    /// The root-namespace end (lbd's side).
    pub host_if: String,
    /// The namespaced end.
    pub ns_if: String,
}

impl NetnsVeth {
    /// Creates namespace `ns` with `ns_if` addressed `ns_addr` (CIDR),
    /// linked to `host_if` in the root namespace, both up, checksum offload
    /// off on the namespaced end (see NOTES: veth hands AF_PACKET partial
    /// checksums otherwise).
    pub fn new(tag: &str, ns_addr: &str) -> NetnsVeth {
        // Short, unique names: interface names are limited to 15 bytes.
        let id = format!("{}{}", tag, std::process::id() % 100000);
        let me = NetnsVeth {
            ns: format!("lbt-{id}"),
            host_if: format!("lh{id}"),
            ns_if: format!("ln{id}"),
        };
        me.cleanup();
        sh(&format!("ip netns add {}", me.ns));
        sh(&format!(
            "ip link add {} type veth peer name {}",
            me.host_if, me.ns_if
        ));
        sh(&format!("ip link set {} netns {}", me.ns_if, me.ns));
        sh(&format!("ip link set {} up", me.host_if));
        // The root end carries frames for lbd only: no IPv6 chatter from the host stack.
        let _ = Command::new("sysctl")
            .arg("-qw")
            .arg(format!("net.ipv6.conf.{}.disable_ipv6=1", me.host_if))
            .output();
        me.exec(&format!("ip addr add {ns_addr} dev {}", me.ns_if));
        me.exec(&format!("ip link set {} up", me.ns_if));
        me.exec("ip link set lo up");
        me.exec(&format!("ethtool -K {} tx off", me.ns_if));
        me
    }

    /// Runs `cmd` inside the namespace; panics on failure.
    pub fn exec(&self, cmd: &str) -> String {
        sh(&format!("ip netns exec {} sh -c '{}'", self.ns, cmd))
    }

    /// Runs `cmd` inside the namespace and returns its output, whatever its status.
    pub fn try_exec(&self, cmd: &str) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns, "sh", "-c", cmd])
            .output()
            .expect("spawn ip netns exec")
    }

    fn cleanup(&self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.ns])
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for NetnsVeth {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// A running lbd, killed on drop if still alive.
pub struct Lbd {
    pub child: Option<Child>,
    pub log: PathBuf,
}

impl Lbd {
    /// Starts lbd with `args`, its stdout and stderr going to a log file.
    pub fn start(args: &[&str], log: &Path) -> Lbd {
        Lbd::start_with_env(args, &[], log)
    }

    /// As `start`, with these environment variables set for lbd.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)], log: &Path) -> Lbd {
        let f = std::fs::File::create(log).expect("log file");
        let child = Command::new(lbd_bin())
            .args(args)
            .envs(env.iter().copied())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("spawn lbd");
        Lbd {
            child: Some(child),
            log: log.to_path_buf(),
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) until the log contains `needle`; panics with the log otherwise.
    pub fn wait_for_log(&mut self, needle: &str, timeout: Duration) {
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            if self.log_text().contains(needle) {
                return;
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("lbd exited ({st}) before {needle:?}:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "lbd did not log {needle:?} within {timeout:?}:\n{}",
            self.log_text()
        );
    }

    /// Sends `sig` and waits (bounded) for exit; returns the exit code and how long it took.
    pub fn signal_and_wait(&mut self, sig: i32, timeout: Duration) -> (Option<i32>, Duration) {
        sh(&format!("kill -{sig} {}", self.child.as_ref().unwrap().id()));
        let t0 = Instant::now();
        let code = self.wait_for_exit(timeout, &format!("signal {sig}"));
        (code, t0.elapsed())
    }

    /// Waits (bounded) for lbd to exit and returns its exit code; panics
    /// with the log, saying it did not exit within `timeout` of `what`.
    pub fn wait_for_exit(&mut self, timeout: Duration, what: &str) -> Option<i32> {
        let child = self.child.as_mut().unwrap();
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            if let Some(st) = child.try_wait().unwrap() {
                self.child = None;
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "lbd did not exit within {timeout:?} of {what}:\n{}",
            self.log_text()
        );
    }
}

impl Drop for Lbd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs lbd to completion with `args` (bounded by `timeout`, then killed)
/// and returns (exit code, stderr+stdout).
pub fn run_lbd(args: &[&str], timeout: Duration) -> (Option<i32>, String) {
    let dir = std::env::temp_dir().join(format!("lbd-err-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join(format!(
        "{}.log",
        args.join("_")
            .replace(['/', ' ', '='], "_")
            .chars()
            .take(80)
            .collect::<String>()
    ));
    let mut l = Lbd::start(args, &log);
    let t0 = Instant::now();
    loop {
        if let Some(st) = l.child.as_mut().unwrap().try_wait().unwrap() {
            l.child = None;
            return (st.code(), l.log_text());
        }
        if t0.elapsed() > timeout {
            let text = l.log_text();
            drop(l);
            panic!("lbd {args:?} still running after {timeout:?} (expected an error exit):\n{text}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A temporary file with `contents`, removed on drop.
pub struct TempFile(pub PathBuf);

impl TempFile {
    pub fn new(name: &str, contents: &str) -> TempFile {
        let dir = std::env::temp_dir().join(format!("lbd-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, contents).unwrap();
        TempFile(p)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub mod lab;
pub mod nested_cargo;
pub mod pcap;
