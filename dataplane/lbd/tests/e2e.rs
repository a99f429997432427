//! lbd end to end: real clients (curl, python) in a namespace, three real
//! backends (scripts/backend.py: HTTP/1.1 and UDP echo) behind lbd's other
//! port, lbd in between over net_af_packet. See scripts/lab.sh.
//!
//! The tests run one at a time (a busy-polling lbd per test on a 2-core
//! machine is enough), each on its own lab and addresses.
mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::lab::{assert_balanced, spread, Lab};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    assert!(
        common::can_netns(),
        "these tests need root and iproute2 (run scripts/setup.sh as root)"
    );
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The (backend, answer) of one UDP exchange with the VIP's port 53.
fn udp_echo(lab: &Lab, payload: &str) -> String {
    udp_echo_to(lab, &lab.vip(), payload)
}

/// The answer of one UDP exchange with `vip` port 53 (IPv4 or IPv6).
fn udp_echo_to(lab: &Lab, vip: &str, payload: &str) -> String {
    let family = if vip.contains(':') { "AF_INET6" } else { "AF_INET" };
    lab.client(&format!(
        "python3 -c \"
import socket
s = socket.socket(socket.{family}, socket.SOCK_DGRAM)
s.settimeout(1)
for _ in range(5):
    s.sendto(b'{payload}', ('{vip}', 53))
    try:
        print(s.recvfrom(2048)[0].decode()); break
    except socket.timeout:
        pass
else:
    raise SystemExit('no UDP answer')
\""
    ))
}

fn mode_test(tag: &str, net: u8, mode: &str) {
    let _g = serial();
    let lab = Lab::new(tag, net);
    let cfg = lab.file("lbd.toml", &(lab.interfaces_toml() + &lab.services_toml(mode)));
    // A Prometheus endpoint on the host's loopback, on a free port.
    let mut lbd = lab.start_lbd("0", 1, &["--config", &cfg, "--metrics", "127.0.0.1:0"]);
    lab.wait_for_service(Duration::from_secs(15));
    let metrics = metrics_addr(&mut lbd);

    // 300 connections spread over the three backends.
    let answers = lab.requests(300);
    assert_balanced(&answers);
    // The source the backends see.
    let want_src = if mode == "fullnat" {
        lab.snat_addr()
    } else {
        lab.client_addr()
    };
    assert!(
        answers.iter().all(|(_, src)| *src == want_src),
        "{mode}: backends must see {want_src}: {:?}",
        &answers[..5]
    );

    // The ports' own counters, read by lbd every second, in `lbctl stats`.
    std::thread::sleep(Duration::from_millis(1100));
    let st = lab.lbctl_ok(&["stats"]);
    let rx_of = |name: &str| -> u64 {
        st.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|w| w.get(1) == Some(&name))
            .and_then(|w| w.get(2)?.parse().ok())
            .unwrap_or_else(|| panic!("no row for {name} in lbctl stats:\n{st}"))
    };
    assert!(
        rx_of("net_af_packet0") >= 300 && rx_of("net_af_packet1") >= 300,
        "{st}"
    );
    // The same counters in the Prometheus text: every connection through
    // the frontend went to one of its backends.
    let text = scrape(&metrics);
    let sample = |series: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    let vip = lab.vip();
    let fe_conns = sample(&format!(
        "lbd_frontend_connections_total{{service=\"default/web\",address=\"{vip}\",port=\"80\",protocol=\"tcp\"}}"
    ));
    let be_conns: u64 = (1..=3)
        .map(|i| {
            sample(&format!(
                "lbd_backend_connections_total{{service=\"default/web\",address=\"{}\",port=\"8080\"}}",
                lab.backend_addr(i)
            ))
        })
        .sum();
    assert!(
        fe_conns >= 300 && be_conns == fe_conns,
        "{fe_conns} {be_conns}\n{text}"
    );
    assert!(sample("lbd_worker_new_connections_total{worker=\"0\"}") >= fe_conns);
    assert!(sample("lbd_port_rx_packets_total{port_id=\"0\",name=\"net_af_packet0\"}") >= 300);
    assert_eq!(
        sample("lbd_port_link_up{port_id=\"1\",name=\"net_af_packet1\"}"),
        1
    );
    // Both links up: healthy, for a routing daemon's check.
    assert_eq!(get_200(&metrics, "/healthz"), "ok\n");

    // Every request of one keep-alive connection reaches the same backend.
    let url = format!("http://{}/whoami", lab.vip());
    let out = lab.client(&format!("curl -s -m 5 {url} {url} {url} {url} {url} {url}"));
    let names: Vec<&str> = out
        .lines()
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    assert_eq!(names.len(), 6, "{out}");
    assert!(
        names.iter().all(|n| *n == names[0]),
        "one connection, one backend: {out}"
    );

    body_udp_and_ping(&lab, &want_src);
    // A TCP port the VIP has no frontend for is refused at once (RST).
    let o = lab.exec("c", &format!("curl -s -m 3 http://{}:81/", lab.vip()));
    assert_eq!(
        o.status.code(),
        Some(7),
        "curl exit 7 = connection refused (28 would be a timeout): {o:?}"
    );
    let resets = scrape(&metrics).lines().find_map(|l| {
        l.strip_prefix("lbd_worker_resets_sent_total{worker=\"0\"} ")?
            .parse::<u64>()
            .ok()
    });
    assert!(resets >= Some(1), "the RST is counted: {resets:?}");

    if mode == "fullnat" {
        expiry_sweeps(&lab);
    }
    broadcasts_are_not_unicast(&lab);

    let (code, _) = lbd.signal_and_wait(15, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", lbd.log_text());
}

/// The client's kernel broadcasting on its segment, to the prefix's
/// broadcast address (a broadcast frame, as NetBIOS and Wake-on-LAN do,
/// and a `ping -b`): lbd counts it as `not_unicast`, not as replies of no
/// connection or pings through it.
fn broadcasts_are_not_unicast(lab: &Lab) {
    let bcast = lab.client_addr().replace(".1.2", ".1.255");
    let before = |r| drops(lab, r);
    let (unicast, no_reply, no_frontend) = (
        before("not_unicast"),
        before("no_conntrack_reply"),
        before("no_frontend"),
    );
    lab.client(&format!(
        "python3 -c \"
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
for _ in range(3):
    s.sendto(b'netbios', ('{bcast}', 138))
\""
    ));
    // No answer: ping fails, which is the point.
    let _ = lab.exec("c", &format!("ping -b -c 2 -i 0.2 -W 1 {bcast}"));
    // The frames may reach lbd a little after the commands return.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while drops(lab, "not_unicast") < unicast + 5 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        drops(lab, "not_unicast") >= unicast + 5,
        "{}",
        lab.lbctl_ok(&["stats"])
    );
    assert_eq!(drops(lab, "no_conntrack_reply"), no_reply);
    assert_eq!(drops(lab, "no_frontend"), no_frontend);
}

/// Through the VIP: a 3 MB body checked byte for byte, a UDP exchange
/// whose backend saw `want_src`, and a ping that lbd answers.
fn body_udp_and_ping(lab: &Lab, want_src: &str) {
    body_intact(lab, 3_000_000);
    let a = udp_echo(lab, "hello");
    assert!(
        a.starts_with("backend-") && a.contains(&format!("{want_src} hello")),
        "UDP: {a}"
    );
    lab.client(&format!("ping -c 2 -i 0.2 -W 2 {}", lab.vip()));
}

/// A body of `bytes` bytes fetched through the VIP, checked byte for
/// byte against the backends' pattern.
fn body_intact(lab: &Lab, bytes: usize) {
    let sum = lab.client(&format!(
        "curl -s -m 20 http://{}/bytes/{bytes} | sha256sum",
        lab.vip()
    ));
    assert_eq!(
        sum.split_whitespace().next(),
        Some(pattern_sha256(bytes).as_str())
    );
}

/// The worker loop sweeps expired connections: one the client resets
/// (10 s after a RST) is gone from the table soon after, counted in
/// `ct-expirations`.
fn expiry_sweeps(lab: &Lab) {
    let expirations = || -> u64 {
        let st = lab.lbctl_ok(&["stats"]);
        let rows: Vec<Vec<&str>> = st.lines().map(|l| l.split_whitespace().collect()).collect();
        let col = rows
            .iter()
            .find_map(|w| w.iter().position(|c| c.eq_ignore_ascii_case("ct-expirations")))
            .unwrap_or_else(|| panic!("no ct-expirations column in lbctl stats:\n{st}"));
        rows.iter()
            .skip_while(|w| !w.iter().any(|c| c.eq_ignore_ascii_case("ct-expirations")))
            .nth(1)
            .and_then(|w| w.get(col)?.parse().ok())
            .unwrap_or_else(|| panic!("no worker row in lbctl stats:\n{st}"))
    };
    let before = expirations();
    // Connect, then close with SO_LINGER 0: the client sends a RST.
    lab.client(&format!(
        "python3 -c \"import socket, struct; s = socket.create_connection(('{}', 80), 5); \
         s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0)); s.close()\"",
        lab.vip()
    ));
    let start = Instant::now();
    while expirations() == before {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no connection expired 30 s after a RST (its timeout is 10 s)"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        start.elapsed() >= Duration::from_secs(9),
        "the reset connection expired before its 10 s"
    );
}

/// sha256 of the first `n` bytes of backend.py's pattern.
fn pattern_sha256(n: usize) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        let block: Vec<u8> = (0..251u32 * 256).map(|i| ((i * 7) % 251) as u8).collect();
        let mut left = n;
        let mut off = 0usize;
        while left > 0 {
            let start = off % 251;
            let take = left.min(64 * 1024).min(block.len() - start);
            stdin.write_all(&block[start..start + take]).unwrap();
            off += take;
            left -= take;
        }
    }
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn fullnat_http_and_udp_through_real_servers() {
    mode_test("efn", 61, "fullnat");
}

#[test]
fn dnat_http_and_udp_backends_see_the_client() {
    mode_test("edn", 62, "dnat");
}

/// A python client in the client namespace holding one keep-alive
/// connection: prints the backend of each request, one per line read from
/// its stdin.
struct KeepAlive {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl KeepAlive {
    fn open(lab: &Lab) -> KeepAlive {
        let script = format!(
            "import http.client, sys\nc = http.client.HTTPConnection('{}', 80, timeout=5)\nfor _ in sys.stdin:\n    c.request('GET', '/whoami')\n    print(c.getresponse().read().decode().split()[0], flush=True)\n",
            lab.vip()
        );
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &format!("{}-c", lab.tag),
                "python3",
                "-c",
                &script,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        KeepAlive { child, out }
    }

    fn ask(&mut self) -> String {
        writeln!(self.child.stdin.as_mut().unwrap()).unwrap();
        let mut l = String::new();
        self.out.read_line(&mut l).unwrap();
        assert!(l.starts_with("backend-"), "keep-alive request failed: {l:?}");
        l.trim().to_string()
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn drain_and_delete_keep_established_connections() {
    let _g = serial();
    let lab = Lab::new("edr", 63);
    let cfg = lab.file("lbd.toml", &lab.interfaces_toml());
    let mut lbd = lab.start_lbd("0", 1, &["--config", &cfg]);
    let services = lab.file("services.toml", &lab.services_toml("fullnat"));
    lab.lbctl_ok(&["apply", "-f", &services]);
    lab.wait_for_service(Duration::from_secs(15));

    // A long download (~4 s), then drain its backend while it runs.
    let n = 5_000_000;
    let hdr = lab.dir.join("slow.hdr");
    let dl = Command::new("ip")
        .args(["netns", "exec", &format!("{}-c", lab.tag), "sh", "-c"])
        .arg(format!(
            "curl -s -m 60 -D {} http://{}/slow/{n} | sha256sum",
            hdr.display(),
            lab.vip()
        ))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut backend = String::new();
    for _ in 0..100 {
        let h = std::fs::read_to_string(&hdr).unwrap_or_default();
        if let Some(l) = h
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("x-backend:"))
        {
            backend = l.split(':').nth(1).unwrap().trim().to_string();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(backend.starts_with("backend-"), "download started: {backend:?}");
    let i: usize = backend["backend-".len()..].parse().unwrap();
    lab.lbctl_ok(&["backend", "drain", &lab.backend_addr(i)]);

    // No new connection reaches the drained backend.
    let answers = lab.requests(60);
    let m = spread(&answers);
    assert!(
        !m.contains_key(&backend),
        "drained {backend} still gets new connections: {m:?}"
    );
    assert_eq!(m.len(), 2, "{m:?}");

    // The download from it completes intact.
    let out = dl.wait_with_output().unwrap();
    let sum = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        sum.split_whitespace().next(),
        Some(pattern_sha256(n).as_str()),
        "download intact"
    );
    lab.lbctl_ok(&["backend", "enable", &lab.backend_addr(i)]);

    // Deleting one backend moves only its connections: keep-alive
    // connections to the others keep their backend.
    let mut conns: Vec<(KeepAlive, String)> = Vec::new();
    for _ in 0..12 {
        let mut k = KeepAlive::open(&lab);
        let b = k.ask();
        conns.push((k, b));
    }
    let victim = conns[0].1.clone();
    let vi: usize = victim["backend-".len()..].parse().unwrap();
    let endpoint = format!("{}:8080", lab.backend_addr(vi));
    lab.lbctl_ok(&["delete", "backend", "default/web", &endpoint]);
    let mut kept = 0;
    for (k, b) in conns.iter_mut().filter(|(_, b)| *b != victim) {
        assert_eq!(k.ask(), *b, "a connection to a remaining backend moved");
        kept += 1;
    }
    assert!(
        kept > 0,
        "some connections were on other backends: {:?}",
        conns.iter().map(|c| &c.1).collect::<Vec<_>>()
    );
    let after = spread(&lab.requests(30));
    assert!(
        !after.contains_key(&victim),
        "deleted {victim} still gets new connections: {after:?}"
    );
    drop(conns);

    // UDP is another matter: a client that keeps sending from one port
    // moves off a deleted backend (which here still runs and answers)
    // within one check of the table after the change (~4 s).
    let ask = || {
        lab.client(&format!(
            "python3 -c \"
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('', 40053))
s.settimeout(0.5)
for _ in range(6):
    s.sendto(b'steady', ('{}', 53))
    try:
        print(s.recvfrom(2048)[0].decode().split()[0]); break
    except socket.timeout:
        pass
else:
    raise SystemExit('no UDP answer')
\"",
            lab.vip()
        ))
        .trim()
        .to_string()
    };
    let first = ask();
    assert_eq!(ask(), first, "one flow, one backend");
    let di: usize = first["backend-".len()..].parse().unwrap();
    lab.lbctl_ok(&[
        "delete",
        "backend",
        "default/dns",
        &format!("{}:5353", lab.backend_addr(di)),
    ]);
    let mut seen = Vec::new();
    for _ in 0..30 {
        let b = ask();
        let moved = b != first;
        seen.push(b);
        if moved {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_ne!(
        seen.last(),
        Some(&first),
        "the UDP flow stayed on deleted {first}: {seen:?}"
    );

    let (code, _) = lbd.signal_and_wait(15, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", lbd.log_text());
}

#[test]
fn two_workers_hand_replies_over() {
    let _g = serial();
    let lab = Lab::new("ehw", 64);
    let cfg = lab.file(
        "lbd.toml",
        &(lab.interfaces_toml() + &lab.services_toml("fullnat")),
    );
    // Three lcores on two CPUs: the main one and two workers.
    let mut lbd = lab.start_lbd("0@0,1@0,2@1", 2, &["--config", &cfg]);
    lab.wait_for_service(Duration::from_secs(15));
    // The main lcore and worker 1 share CPU 0: lbd says so.
    assert!(
        lbd.log_text().contains("lcores share a CPU") && lbd.log_text().contains("lcores=[0, 1]"),
        "{}",
        lbd.log_text()
    );
    let answers = lab.requests(120);
    assert_eq!(spread(&answers).values().sum::<usize>(), 120);
    for _ in 0..3 {
        body_intact(&lab, 2_000_000);
    }
    let (code, _) = lbd.signal_and_wait(15, Duration::from_secs(10));
    let log = lbd.log_text();
    assert_eq!(code, Some(0), "{log}");
    let handed: u64 = log
        .lines()
        .filter(|l| l.contains("  worker "))
        .filter_map(|l| {
            l.split("handed_over ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert!(
        handed > 0,
        "replies on the other worker's queue are handed over:\n{log}"
    );
    assert!(!log.contains("handover_ring_full"), "{log}");
    // net_af_packet has no rte_flow: lbd says it falls back to software.
    assert!(
        log.contains("flow hand-over between workers: software rings (rte_flow refused"),
        "{log}"
    );
}

/// Client-IP affinity on two workers: the client's connections (spread
/// over both workers by their source ports) all go to one backend; when
/// that backend drains they move together to another, and stay there when
/// it comes back, though the ring's hash of the client address points at
/// it again (without pins the client would go back). The exit counters
/// show that the two workers share one table of pins.
#[test]
fn client_ip_affinity_pins_outlive_ring_changes() {
    let _g = serial();
    let lab = Lab::new("eaf", 71);
    let services = lab.services_toml("dnat").replace(
        "mode = \"dnat\"\n",
        "mode = \"dnat\"\nsession_affinity_timeout = \"1h\"\n",
    );
    let cfg = lab.file("lbd.toml", &(lab.interfaces_toml() + &services));
    // A small table, rounded up to a power of two.
    let mut lbd = lab.start_lbd("0@0,1@0,2@1", 2, &["--config", &cfg, "--affinity-size", "1000"]);
    lab.wait_for_service(Duration::from_secs(15));
    let first = spread(&lab.requests(24));
    assert_eq!(first.len(), 1, "one client, one backend: {first:?}");
    let pinned = first.keys().next().unwrap().clone();
    let i: usize = pinned["backend-".len()..].parse().unwrap();

    lab.lbctl_ok(&["backend", "drain", &lab.backend_addr(i)]);
    let moved = spread(&lab.requests(24));
    assert_eq!(moved.len(), 1, "the client moves as one: {moved:?}");
    assert!(!moved.contains_key(&pinned), "{moved:?}");

    // Back in the ring, the hash would send the client to it again.
    lab.lbctl_ok(&["backend", "enable", &lab.backend_addr(i)]);
    let after = spread(&lab.requests(24));
    assert_eq!(after, moved, "the client stays where it was pinned");
    // One client, one pin.
    let st = lab.lbctl_ok(&["stats"]);
    assert!(
        st.starts_with("revision ") && st.lines().next().unwrap().ends_with(", affinity pins 1 of 1024"),
        "{st}"
    );

    let (code, _) = lbd.signal_and_wait(15, Duration::from_secs(10));
    let log = lbd.log_text();
    assert_eq!(code, Some(0), "{log}");
    // Both workers opened connections for it, from one table of pins: the
    // client was pinned twice (at first, and when its backend drained),
    // and every other connection (the readiness check's too), on either
    // worker, found its pin.
    let count = |name: &str| -> Vec<u64> {
        log.lines()
            .filter(|l| l.contains("  worker "))
            .filter_map(|l| {
                l.split(&format!("{name} "))
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .collect()
    };
    let opened = count("new_connections");
    assert!(
        opened.len() == 2 && opened.iter().all(|&n| n > 0),
        "{opened:?}\n{log}"
    );
    let sum = |name| count(name).iter().sum::<u64>();
    assert_eq!(
        (
            sum("affinity_pins"),
            sum("affinity_hits"),
            sum("affinity_evictions")
        ),
        (2, sum("new_connections") - 2, 0),
        "{log}"
    );
}

#[test]
fn state_file_survives_sigkill() {
    let _g = serial();
    let lab = Lab::new("esk", 65);
    let cfg = lab.file("lbd.toml", &lab.interfaces_toml());
    let state = lab.dir.join("state.json").display().to_string();
    let mut lbd = lab.start_lbd("0", 1, &["--config", &cfg, "--state-file", &state]);
    let services = lab.file("services.toml", &lab.services_toml("fullnat"));
    lab.lbctl_ok(&["apply", "-f", &services]);
    lab.wait_for_service(Duration::from_secs(15));
    let (code, _) = lbd.signal_and_wait(9, Duration::from_secs(10));
    assert_eq!(code, None, "killed by SIGKILL");
    drop(lbd);

    // Same state file, no apply: the services are back before forwarding.
    let mut lbd = lab.start_lbd("0", 1, &["--config", &cfg, "--state-file", &state]);
    lab.wait_for_service(Duration::from_secs(15));
    assert_eq!(spread(&lab.requests(30)).len(), 3, "all backends are back");
    let info = lab.lbctl_ok(&["get", "services"]);
    assert!(info.contains("default/web") && info.contains("api"), "{info}");
    let (code, _) = lbd.signal_and_wait(15, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", lbd.log_text());
}

/// A restart with a config that drops `[snat]` and turns its full-NAT
/// services into DNAT starts from the old state file (the config's resync
/// is applied before the first compile), and an operator's maintenance of
/// a config backend survives the restart's resync.
#[test]
fn restart_with_a_changed_config_keeps_the_operators_maintenance() {
    let _g = serial();
    let lab = Lab::new("erc", 70);
    let v1 = lab.file(
        "v1.toml",
        &(lab.interfaces_toml() + &lab.services_toml("fullnat")),
    );
    let state = lab.dir.join("state.json").display().to_string();
    let mut lbd = lab.start_lbd("0", 1, &["--config", &v1, "--state-file", &state]);
    lab.wait_for_service(Duration::from_secs(15));
    let b1 = lab.backend_addr(1);
    lab.lbctl_ok(&["backend", "maintenance", &b1]);
    let (code, _) = lbd.signal_and_wait(15, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", lbd.log_text());
    drop(lbd);

    let no_snat = lab.interfaces_toml().split("[snat]").next().unwrap().to_string();
    assert!(!no_snat.contains("snat"), "{no_snat}");
    let v2 = lab.file("v2.toml", &(no_snat + &lab.services_toml("dnat")));
    let mut lbd = lab.start_lbd("0", 1, &["--config", &v2, "--state-file", &state]);
    lab.wait_for_service(Duration::from_secs(15));
    let answers = lab.requests(60);
    assert_eq!(
        spread(&answers).len(),
        2,
        "the backend in maintenance gets none: {answers:?}"
    );
    assert!(
        answers.iter().all(|(_, src)| *src == lab.client_addr()),
        "dnat: {:?}",
        &answers[..5]
    );
    let table = lab.lbctl_ok(&["get", "backends", "--service", "default/web", "--address", &b1]);
    assert!(
        table.contains("maintenance (operator)") && table.contains("config"),
        "{table}"
    );
    let (code, _) = lbd.signal_and_wait(15, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", lbd.log_text());
}

/// `traffic_policy = "local"`: new connections go only to the backends on
/// this node (`--node-name`, which overrides the config file's `node`).
#[test]
fn local_traffic_policy_uses_this_nodes_backends() {
    let _g = serial();
    let lab = Lab::new("elp", 66);
    let mut svc = format!(
        "\n[[service]]\nname = \"default/web\"\nmode = \"fullnat\"\ntraffic_policy = \"local\"\n\n[[service.frontend]]\naddress = \"{}:80\"\nprotocol = \"tcp\"\n",
        lab.vip()
    );
    for (i, node) in [(1, "node-b"), (2, "node-a"), (3, "node-a")] {
        svc += &format!(
            "\n[[service.backend]]\naddress = \"{}:8080\"\nnode = \"{node}\"\n",
            lab.backend_addr(i)
        );
    }
    let cfg = lab.file(
        "lbd.toml",
        &(format!("node = \"node-z\"\n\n{}", lab.interfaces_toml()) + &svc),
    );
    let mut lbd = lab.start_lbd("0", 1, &["--config", &cfg, "--node-name", "node-a"]);
    lab.wait_for_service(Duration::from_secs(15));
    let m = spread(&lab.requests(60));
    assert_eq!(
        m.keys().map(String::as_str).collect::<Vec<_>>(),
        ["backend-2", "backend-3"],
        "only node-a's backends: {m:?}"
    );
    let (code, _) = lbd.signal_and_wait(15, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", lbd.log_text());
    assert!(lbd.log_text().contains("node=node-a"), "{}", lbd.log_text());
}

/// IPv6 end to end: lbd's ports have only IPv6 addresses, so every next
/// hop (the client, the backends) is resolved with neighbor solicitations.
/// A full-NAT HTTP service (the backends see the IPv6 SNAT address) and a
/// DNAT UDP service (they see the client), ping6 to the VIP.
#[test]
fn ipv6_services_resolve_next_hops_with_neighbor_discovery() {
    let _g = serial();
    let lab = Lab::new("e6", 67);
    let n = 67;
    let (vip, client, snat) = (
        format!("fd00:{n}:1::100"),
        format!("fd00:{n}:1::2"),
        format!("fd00:{n}:2::100"),
    );
    let mut cfg = format!(
        "[[interface]]\naddress = \"fd00:{n}:1::1/64\"\n\n[[interface]]\naddress = \"fd00:{n}:2::1/64\"\n\n[snat]\naddresses = [\"{snat}\"]\n"
    );
    for (name, mode, port, proto, bport) in [
        ("web", "fullnat", 80, "tcp", 8080),
        ("dns", "dnat", 53, "udp", 5353),
    ] {
        cfg += &format!(
            "\n[[service]]\nname = \"default/{name}\"\nmode = \"{mode}\"\n\n[[service.frontend]]\naddress = \"[{vip}]:{port}\"\nprotocol = \"{proto}\"\n"
        );
        for i in 1..=3 {
            cfg += &format!("\n[[service.backend]]\naddress = \"[fd00:{n}:2::1{i}]:{bport}\"\n");
        }
    }
    let cfg = lab.file("lbd.toml", &cfg);
    let mut lbd = lab.start_lbd("0", 1, &["--config", &cfg]);
    let started = Instant::now();

    let url = format!("http://[{vip}]/whoami");
    lab.wait_for_url(&url, Duration::from_secs(15));
    let (answers, out) = lab.requests_to(&url, 60);
    assert_eq!(spread(&answers).len(), 3, "all three backends: {out}");
    assert!(
        answers.iter().all(|(_, src)| *src == snat),
        "full-NAT: backends see {snat}: {out}"
    );

    let udp = udp_echo_to(&lab, &vip, "hello6");
    assert!(
        udp.starts_with("backend-") && udp.contains(&format!("{client} hello6")),
        "DNAT over IPv6: the backend sees the client: {udp}"
    );
    lab.client(&format!("ping -6 -c 2 -i 0.2 -W 2 {vip}"));

    // Duplicate address detection through lbd: the client claims the VIP
    // with a probe without a nonce (enhanced_dad off, as hosts other than
    // Linux send it: 8 bytes shorter than the answer). lbd answers to
    // all-nodes with its MAC in a target link-layer option (RFC 4861
    // §7.2.4), and the client's kernel marks the address dadfailed. After
    // lbd's own announcements of the VIP (three, 1 s apart), so the capture
    // sees the answer, not one of them.
    if let Some(rest) = Duration::from_secs(4).checked_sub(started.elapsed()) {
        std::thread::sleep(rest);
    }
    let dad = lab.client(&format!(
        "echo 0 > /proc/sys/net/ipv6/conf/eth0/enhanced_dad; \
         timeout 8 tcpdump -i eth0 -n -v -c 1 'icmp6 and ip6[40] == 136 and ip6 dst ff02::1' 2>/dev/null & \
         sleep 1; ip -6 addr add {vip}/128 dev eth0; wait; sleep 0.5; ip -6 addr show dev eth0"
    ));
    assert!(
        dad.contains(&format!("tgt is {vip}"))
            && dad.contains("destination link-address option (2), length 8"),
        "lbd's answer to the DAD probe, with the option: {dad}"
    );
    assert!(
        dad.lines()
            .any(|l| l.contains(&format!("{vip}/128")) && l.contains("dadfailed")),
        "the client's kernel saw the conflict: {dad}"
    );

    let (code, _) = lbd.signal_and_wait(15, Duration::from_secs(10));
    let log = lbd.log_text();
    assert_eq!(code, Some(0), "{log}");
    let solicitations: u64 = log
        .split("neighbor_solicitations ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    assert!(
        solicitations >= 4,
        "the client and three backends were solicited: {log}"
    );
}

/// Dual-stack ports (`address` and `gateway` lists): one full-NAT service
/// with an IPv4 and an IPv6 frontend and backends of both families; each
/// family's clients reach that family's backends from that family's SNAT
/// address.
#[test]
fn dual_stack_ports_serve_both_families() {
    let _g = serial();
    let lab = Lab::new("eds", 68);
    let n = 68;
    let mut cfg = format!(
        "[[interface]]\naddress = [\"10.{n}.1.1/24\", \"fd00:{n}:1::1/64\"]\n\n\
         [[interface]]\naddress = [\"10.{n}.2.1/24\", \"fd00:{n}:2::1/64\"]\n\n\
         [snat]\naddresses = [\"10.{n}.2.100\", \"fd00:{n}:2::100\"]\n\n\
         [[service]]\nname = \"default/web\"\nmode = \"fullnat\"\n\n\
         [[service.frontend]]\naddress = \"10.{n}.1.100:80\"\nprotocol = \"tcp\"\n\n\
         [[service.frontend]]\naddress = \"[fd00:{n}:1::100]:80\"\nprotocol = \"tcp\"\n"
    );
    for i in 1..=3 {
        cfg += &format!(
            "\n[[service.backend]]\naddress = \"10.{n}.2.1{i}:8080\"\n\n[[service.backend]]\naddress = \"[fd00:{n}:2::1{i}]:8080\"\n"
        );
    }
    let cfg = lab.file("lbd.toml", &cfg);
    let mut lbd = lab.start_lbd("0", 1, &["--config", &cfg]);
    lab.wait_for_service(Duration::from_secs(15));

    let v4 = lab.requests(30);
    assert_eq!(spread(&v4).len(), 3, "{v4:?}");
    assert!(v4.iter().all(|(_, src)| *src == lab.snat_addr()), "{v4:?}");

    let (v6, out) = lab.requests_to(&format!("http://[fd00:{n}:1::100]/whoami"), 30);
    assert_eq!(spread(&v6).len(), 3, "{out}");
    assert!(
        v6.iter().all(|(_, src)| *src == format!("fd00:{n}:2::100")),
        "{out}"
    );

    let (code, _) = lbd.signal_and_wait(15, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", lbd.log_text());
}

/// Where lbd's `--metrics` listens, from its log.
fn metrics_addr(lbd: &mut common::Lbd) -> String {
    const LINE: &str = "Prometheus metrics listening";
    lbd.wait_for_log(LINE, Duration::from_secs(10));
    let log = lbd.log_text();
    let line = log.lines().find(|l| l.contains(LINE)).unwrap();
    let addr = line
        .split("addr=")
        .nth(1)
        .unwrap_or_else(|| panic!("no addr= in {line}"));
    addr.split_whitespace().next().unwrap().to_string()
}

/// The body of `GET /metrics` from lbd's Prometheus endpoint at `addr`.
fn scrape(addr: &str) -> String {
    get_200(addr, "/metrics")
}

/// The body of `GET path` from lbd's `--metrics` endpoint at `addr`,
/// which must answer 200.
fn get_200(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("--metrics {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: lbd\r\n\r\n").as_bytes())
        .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not HTTP: {raw}"));
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    body.to_string()
}

/// 802.1Q trunks with real kernels on both sides: the client's and the
/// backends' frames are tagged VLAN 10 and 20 by the lab's tc programs,
/// which drop whatever comes back untagged or with another id, and lbd's
/// dual-stack ports have `vlan = 10` and `vlan = 20`. ARP, neighbor
/// discovery, full-NAT TCP over both families and UDP work through them,
/// and no frame is `vlan_mismatch`.
#[test]
fn tagged_ports_carry_real_connections() {
    let _g = serial();
    let lab = Lab::new("evl", 72);
    lab.tag_vlans(10, 20);
    let n = lab.net;
    let mut cfg = format!(
        "[[interface]]\naddress = [\"10.{n}.1.1/24\", \"fd00:{n}:1::1/64\"]\nvlan = 10\n\n\
         [[interface]]\naddress = [\"10.{n}.2.1/24\", \"fd00:{n}:2::1/64\"]\nvlan = 20\n\n\
         [snat]\naddresses = [\"10.{n}.2.100\", \"fd00:{n}:2::100\"]\n{}\n\
         [[service]]\nname = \"default/web6\"\nmode = \"fullnat\"\n\n\
         [[service.frontend]]\naddress = \"[fd00:{n}:1::100]:80\"\nprotocol = \"tcp\"\n",
        lab.services_toml("fullnat")
    );
    for i in 1..=3 {
        cfg += &format!("\n[[service.backend]]\naddress = \"[fd00:{n}:2::1{i}]:8080\"\n");
    }
    let cfg = lab.file("lbd.toml", &cfg);
    let _lbd = lab.start_lbd("0", 1, &["--config", &cfg]);
    lab.wait_for_service(Duration::from_secs(15));
    let answers = lab.requests(30);
    assert_eq!(
        spread(&answers).len(),
        3,
        "all three backends answer: {answers:?}"
    );
    assert!(
        answers.iter().all(|(_, src)| *src == lab.snat_addr()),
        "full-NAT: the backends see the SNAT address: {answers:?}"
    );
    let (v6, out) = lab.requests_to(&format!("http://[fd00:{n}:1::100]/whoami"), 30);
    assert_eq!(spread(&v6).len(), 3, "{out}");
    assert!(
        v6.iter().all(|(_, src)| *src == format!("fd00:{n}:2::100")),
        "{out}"
    );
    assert!(udp_echo(&lab, "tagged").contains("tagged"));
    assert_eq!(drops(&lab, "vlan_mismatch"), 0, "{}", lab.lbctl_ok(&["stats"]));

    // The client on VLAN 11: its frames are not port 0's, and nothing
    // answers it.
    lab.retag_client(11);
    let out = lab.client(&format!("curl -s -m 3 http://{}/whoami || echo FAIL", lab.vip()));
    assert_eq!(out.trim(), "FAIL");
    assert!(drops(&lab, "vlan_mismatch") > 0, "{}", lab.lbctl_ok(&["stats"]));
}

/// The packets of `reason` in `lbctl stats`' drop table (0 if absent).
fn drops(lab: &Lab, reason: &str) -> u64 {
    let st = lab.lbctl_ok(&["stats"]);
    st.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.len() == 2 && w[0] == reason)
        .and_then(|w| w[1].parse().ok())
        .unwrap_or(0)
}

/// On ports with IPv4 header checksum offload (net_tap, whose PMD does in
/// software what a NIC does): received checksums are the NIC's to verify,
/// sent ones the NIC's to fill. Full-NAT through real servers works both
/// ways (a frame that left with the pipeline's 0 and no request to the
/// NIC would be dropped by the receiving kernel), held frames included
/// (the first reply waits for the client's MAC), and a frame the NIC
/// marks bad is still dropped and counted.
#[test]
fn checksum_offload_on_tap_ports() {
    let _g = serial();
    let lab = Lab::new("eck", 69);
    let cfg = lab.file(
        "lbd.toml",
        &(lab.interfaces_toml() + &lab.services_toml("fullnat")),
    );
    let mut lbd = lab.start_lbd_on_taps(&["--config", &cfg]);
    let log = lbd.log_text();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("port configured")
                && l.contains("rx_ipv4_checksum_offload=true tx_ipv4_checksum_offload=true"))
            .count(),
        2,
        "both tap ports run with the offloads: {log}"
    );
    // net_tap can receive all multicast, so without --promiscuous its
    // ports take only frames to their MAC, broadcast and multicast (and
    // IPv6 would still resolve neighbors).
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("port configured") && l.contains("promiscuous=false"))
            .count(),
        2,
        "tap ports are not promiscuous: {log}"
    );
    let info = lab.lbctl_ok(&["info"]);
    assert_eq!(
        info.lines()
            .filter(|l| l.contains("net_tap") && l.split_whitespace().any(|w| w == "rx,tx"))
            .count(),
        2,
        "lbctl info shows both offloads in use on both ports: {info}"
    );
    lab.wait_for_service(Duration::from_secs(15));

    let answers = lab.requests(90);
    assert_eq!(spread(&answers).len(), 3, "{answers:?}");
    assert!(
        answers.iter().all(|(_, src)| *src == lab.snat_addr()),
        "{answers:?}"
    );
    body_udp_and_ping(&lab, &lab.snat_addr());

    // A UDP datagram to the VIP whose IPv4 header checksum is wrong, sent
    // to lbd's MAC straight into the client-side tap (a bridge with
    // br_netfilter would drop it before lbd sees it): the NIC (the PMD)
    // says bad, lbd drops it.
    let before = drops(&lab, "malformed_ipv4");
    let lbd_mac = lab.client(&format!("ip neigh show {}", lab.vip()));
    let lbd_mac = lbd_mac
        .split_whitespace()
        .nth(4)
        .expect("lbd's MAC in the client's ARP table");
    common::sh(&format!(
        "python3 -c \"
import socket, struct
ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 31, 1, 0, 64, 17, 0xdead,
                 socket.inet_aton('{client}'), socket.inet_aton('{vip}'))
udp = struct.pack('!HHHH', 40000, 53, 11, 0) + b'bad'
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(('{tag}t0', 0))
s.send(bytes.fromhex('{mac}02fc00000001') + bytes([8, 0]) + ip + udp + bytes(15))
\"",
        vip = lab.vip(),
        client = lab.client_addr(),
        tag = lab.tag,
        mac = lbd_mac.replace(':', ""),
    ));
    let t0 = Instant::now();
    while drops(&lab, "malformed_ipv4") == before && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(drops(&lab, "malformed_ipv4"), before + 1);

    let (code, _) = lbd.signal_and_wait(15, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", lbd.log_text());
}
