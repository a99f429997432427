//! The lab of `scripts/lab.sh` as a test guard: a client and three backend
//! namespaces (real HTTP and UDP servers), lbd's two ports in between, all
//! removed on drop. Plus lbd started on it and `lbctl` pointed at it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{sh, Lbd};

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The lbctl binary next to lbd, built (or brought up to date) once per
/// test process: a stale lbctl from an earlier build would test old code.
pub fn lbctl_bin() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| workspace_bin("lb-control", "lbctl")).clone()
}

/// The lb-k8s-sync binary next to lbd, as [`lbctl_bin`].
pub fn k8s_sync_bin() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| workspace_bin("lb-k8s-sync", "lb-k8s-sync"))
        .clone()
}

/// Builds (or brings up to date) `bin` of the workspace's `package` next
/// to lbd, in lbd's profile.
fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    let lbd = super::lbd_bin();
    let target = lbd.parent().unwrap().parent().unwrap();
    let profile_release = lbd.parent().unwrap().ends_with("release");
    let mut c = Command::new(env!("CARGO"));
    c.args(["build", "--quiet", "-p", package, "--bin", bin, "--target-dir"])
        .arg(target)
        .current_dir(repo());
    super::nested_cargo::without_package_env(&mut c);
    if profile_release {
        c.arg("--release");
    }
    assert!(
        c.status().expect("cargo build").success(),
        "building {bin} failed"
    );
    lbd.with_file_name(bin)
}

/// See the module doc. `net` is the second octet of every address.
pub struct Lab {
    pub tag: String,
    pub net: u8,
    pub dir: PathBuf,
}

impl Lab {
    pub fn new(tag: &str, net: u8) -> Lab {
        let dir = std::env::temp_dir().join(format!("lbd-e2e-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lab = Lab {
            tag: tag.to_string(),
            net,
            dir,
        };
        let script = repo().join("scripts/lab.sh");
        sh(&format!("{} up {tag} {net}", script.display()));
        lab
    }

    pub fn vip(&self) -> String {
        format!("10.{}.1.100", self.net)
    }

    pub fn client_addr(&self) -> String {
        format!("10.{}.1.2", self.net)
    }

    pub fn snat_addr(&self) -> String {
        format!("10.{}.2.100", self.net)
    }

    pub fn backend_addr(&self, i: usize) -> String {
        format!("10.{}.2.1{i}", self.net)
    }

    pub fn socket(&self) -> String {
        self.dir.join("lbd.sock").display().to_string()
    }

    /// `[[interface]]` for both ports and `[snat]`.
    pub fn interfaces_toml(&self) -> String {
        format!(
            "[[interface]]\naddress = \"10.{n}.1.1/24\"\n\n[[interface]]\naddress = \"10.{n}.2.1/24\"\n\n[snat]\naddresses = [\"10.{n}.2.100\"]\n",
            n = self.net
        )
    }

    /// A service `default/web` with an HTTP frontend on VIP:80 and a UDP
    /// frontend on VIP:53 (as service `default/dns`), three backends each.
    pub fn services_toml(&self, mode: &str) -> String {
        let mut s = String::new();
        for (name, port, proto, bport) in [("web", 80, "tcp", 8080), ("dns", 53, "udp", 5353)] {
            s += &format!(
                "\n[[service]]\nname = \"default/{name}\"\nmode = \"{mode}\"\n\n[[service.frontend]]\naddress = \"{}:{port}\"\nprotocol = \"{proto}\"\n",
                self.vip()
            );
            for i in 1..=3 {
                s += &format!(
                    "\n[[service.backend]]\naddress = \"{}:{bport}\"\n",
                    self.backend_addr(i)
                );
            }
        }
        s
    }

    /// Makes the client's and the backends' side 802.1Q VLANs
    /// `client_vid` and `server_vid`, with real kernels on both: a tc BPF
    /// program (`vlan_tag.bpf.c`, built here with clang) on the client's
    /// `eth0` and on the backends' bridge port towards lbd tags what they
    /// send and takes the tag off what they receive, dropping any frame
    /// not tagged with their VLAN. Removed with the namespaces.
    pub fn tag_vlans(&self, client_vid: u16, server_vid: u16) {
        let t = &self.tag;
        self.tag_vlan(&format!("{t}-c"), "eth0", client_vid);
        self.tag_vlan(&format!("{t}-br"), &format!("{t}s1"), server_vid);
    }

    /// Puts the client on VLAN `vid` instead of the one
    /// [`tag_vlans`](Lab::tag_vlans) gave it.
    pub fn retag_client(&self, vid: u16) {
        let ns = format!("{}-c", self.tag);
        super::sh(&format!("ip netns exec {ns} tc qdisc del dev eth0 clsact"));
        self.tag_vlan(&ns, "eth0", vid);
    }

    /// `dev` in namespace `ns` on VLAN `vid` (see [`tag_vlans`](Lab::tag_vlans)).
    fn tag_vlan(&self, ns: &str, dev: &str, vid: u16) {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/common/vlan_tag.bpf.c");
        let obj = self.dir.join(format!("vid{vid}.o"));
        super::sh(&format!(
            "clang -O2 -target bpf -I/usr/include/$(clang -print-multiarch) -DVID={vid} -c '{}' -o '{}'",
            src.display(),
            obj.display()
        ));
        super::sh(&format!(
            "ip netns exec {ns} tc qdisc add dev {dev} clsact && \
             ip netns exec {ns} tc filter add dev {dev} egress bpf da obj '{o}' sec tag && \
             ip netns exec {ns} tc filter add dev {dev} ingress bpf da obj '{o}' sec untag",
            o = obj.display()
        ));
    }

    /// Writes `name` in the lab's directory; returns its path.
    pub fn file(&self, name: &str, contents: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, contents).unwrap();
        p.display().to_string()
    }

    /// Starts lbd on the lab's two ports with `extra` flags (e.g.
    /// `--config`), `lcores` and `qpairs` queues per port, and waits until
    /// it runs.
    pub fn start_lbd(&self, lcores: &str, qpairs: u32, extra: &[&str]) -> Lbd {
        let v0 = format!("net_af_packet0,iface={}c,qpairs={qpairs}", self.tag);
        let v1 = format!("net_af_packet1,iface={}s,qpairs={qpairs}", self.tag);
        self.start_lbd_on(&v0, &v1, lcores, extra)
    }

    /// Starts lbd on two `net_tap` ports (whose kernel ends are bridged to
    /// the lab's `TAGc` and `TAGs` once lbd runs; see [`Lab::bridge_taps`])
    /// with `extra` flags on one lcore. The tap PMD offers rx and tx IPv4
    /// checksum offload, done in software in the PMD, so lbd's offload
    /// path runs against real kernel traffic.
    pub fn start_lbd_on_taps(&self, extra: &[&str]) -> Lbd {
        let v0 = format!("net_tap0,iface={}t0", self.tag);
        let v1 = format!("net_tap1,iface={}t1", self.tag);
        let lbd = self.start_lbd_on(&v0, &v1, "0", extra);
        self.bridge_taps();
        lbd
    }

    /// Puts the kernel end of each tap next to the lab's veth end on a
    /// bridge (`TAGk0`, `TAGk1`; removed by `lab.sh down`). The taps' kernel
    /// ends first get MACs of their own: they start with the DPDK port's,
    /// and a bridge takes frames to one of its ports' MACs for itself.
    fn bridge_taps(&self) {
        let t = &self.tag;
        for (i, veth) in [(0, "c"), (1, "s")] {
            super::sh(&format!(
                "ip link set {t}t{i} address 02:00:00:{:02x}:00:{:02x} && \
                 ip link add {t}k{i} type bridge && \
                 sysctl -qw net.ipv6.conf.{t}k{i}.disable_ipv6=1 net.ipv6.conf.{t}t{i}.disable_ipv6=1 && \
                 ip link set {t}{veth} master {t}k{i} && ip link set {t}t{i} master {t}k{i} && \
                 ip link set {t}k{i} up",
                self.net,
                i + 1
            ));
        }
    }

    /// Starts lbd on the ports named by the vdev specs `v0` and `v1`; see
    /// [`Lab::start_lbd`].
    fn start_lbd_on(&self, v0: &str, v1: &str, lcores: &str, extra: &[&str]) -> Lbd {
        let prefix = format!("lbde2e-{}-{}", self.tag, std::process::id());
        let sock = self.socket();
        let mut args = vec![
            "--lcores",
            lcores,
            "--no-huge",
            "--mem",
            "1024",
            "--file-prefix",
            &prefix,
            "--vdev",
            v0,
            "--vdev",
            v1,
            "--grpc",
            &sock,
            "--conntrack-size",
            "65536",
        ];
        args.extend_from_slice(extra);
        let log = self.dir.join(format!("lbd-{}.log", now_ms()));
        let mut l = Lbd::start(&args, &log);
        l.wait_for_log("lbd running", Duration::from_secs(30));
        l
    }

    /// Runs lbctl against the lab's lbd; returns its output whatever its status.
    pub fn lbctl(&self, args: &[&str]) -> Output {
        Command::new(lbctl_bin())
            .arg("--server")
            .arg(self.socket())
            .args(args)
            .output()
            .expect("spawn lbctl")
    }

    /// Runs lbctl; panics with its output when it fails.
    pub fn lbctl_ok(&self, args: &[&str]) -> String {
        let o = self.lbctl(args);
        assert!(
            o.status.success(),
            "lbctl {args:?} failed: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Runs `cmd` in namespace `ns` (`c`, `b1`..`b3`), whatever its status.
    pub fn exec(&self, ns: &str, cmd: &str) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &format!("{}-{ns}", self.tag), "sh", "-c", cmd])
            .stdin(Stdio::null())
            .output()
            .expect("spawn ip netns exec")
    }

    /// Runs `cmd` in the client namespace; stdout on success, panics otherwise.
    pub fn client(&self, cmd: &str) -> String {
        let o = self.exec("c", cmd);
        assert!(
            o.status.success(),
            "client `{cmd}` failed ({}): {}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Polls (bounded) until an HTTP request through the VIP succeeds.
    pub fn wait_for_service(&self, timeout: Duration) {
        self.wait_for_url(&format!("http://{}/whoami", self.vip()), timeout);
    }

    /// Polls (bounded) until a GET of `url` (IPv6 literals allowed)
    /// succeeds from the client.
    pub fn wait_for_url(&self, url: &str, timeout: Duration) {
        let t0 = Instant::now();
        let cmd = format!("curl -s -m 2 -g {url}");
        while t0.elapsed() < timeout {
            if self.exec("c", &cmd).status.success() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("{url} did not answer within {timeout:?}");
    }

    /// `n` requests through the VIP, one connection each: the backend name
    /// of each answer and the source address the backend saw.
    pub fn requests(&self, n: usize) -> Vec<(String, String)> {
        self.requests_to(&format!("http://{}/whoami", self.vip()), n).0
    }

    /// `n` requests to `url` (IPv6 literals allowed), one connection each:
    /// the (backend, source it saw) of each answer, and the raw output.
    pub fn requests_to(&self, url: &str, n: usize) -> (Vec<(String, String)>, String) {
        let out = self.client(&format!(
            "for i in $(seq {n}); do curl -s -m 5 -g --no-keepalive {url} || echo FAIL; done"
        ));
        let answers = out
            .lines()
            .map(|l| {
                let mut w = l.split_whitespace();
                (
                    w.next().unwrap_or("").to_string(),
                    w.next().unwrap_or("").to_string(),
                )
            })
            .collect();
        (answers, out)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let script = repo().join("scripts/lab.sh");
        let _ = Command::new(script).args(["down", &self.tag]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// Counts of each backend name in `answers`; panics on a failed request.
pub fn spread(answers: &[(String, String)]) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    for (b, _) in answers {
        assert!(b.starts_with("backend-"), "a request failed: {answers:?}");
        *m.entry(b.clone()).or_insert(0) += 1;
    }
    m
}

/// Asserts that each of the three backends got a third of `n`, ±35%.
pub fn assert_balanced(answers: &[(String, String)]) {
    let n = answers.len() as f64;
    let m = spread(answers);
    assert_eq!(m.len(), 3, "all three backends answer: {m:?}");
    for (b, c) in &m {
        let share = *c as f64 / (n / 3.0);
        assert!(
            (0.65..=1.35).contains(&share),
            "{b} got {c} of {n} requests, outside a third ±35%: {m:?}"
        );
    }
}
