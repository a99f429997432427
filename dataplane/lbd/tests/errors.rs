//! Every start-up error is one clear line and a non-zero exit, never a
//! panic or a hang.
mod common;

use std::time::Duration;

use common::{run_lbd, NetnsVeth, TempFile};

const T: Duration = Duration::from_secs(30);

fn prefix(tag: &str) -> String {
    format!("--file-prefix=lbdtest-{tag}-{}", std::process::id())
}

/// lbd's own error line (EAL may print its own lines before it).
fn lbd_line(out: &str) -> &str {
    out.lines()
        .find(|l| l.starts_with("lbd: "))
        .unwrap_or_else(|| panic!("no `lbd: ` error line in:\n{out}"))
}

fn assert_clean(out: &str) {
    assert!(!out.contains("panicked"), "no panic:\n{out}");
    assert!(!out.contains("RUST_BACKTRACE"), "no panic:\n{out}");
}

#[test]
fn unknown_flag() {
    let (code, out) = run_lbd(&["--bogus"], T);
    assert_eq!(code, Some(2), "{out}");
    assert_eq!(out.lines().count(), 1, "one line: {out}");
    assert!(out.contains("--bogus"), "{out}");
}

#[test]
fn bad_lcores() {
    // A bad flag value: exit 2, like any other usage error.
    let (code, out) = run_lbd(&["--lcores", "3-1", "--vdev", "net_null0", "--no-huge"], T);
    assert_eq!(code, Some(2), "{out}");
    assert!(lbd_line(&out).contains("--lcores"), "{out}");
    let (code, out) = run_lbd(&["--grpc", "foo", "--vdev", "net_null0", "--no-huge"], T);
    assert_eq!(code, Some(2), "{out}");
    assert!(lbd_line(&out).contains("--grpc"), "{out}");
}

/// A flag that needs another names the missing one on the same line.
#[test]
fn tls_key_without_certificate() {
    let (code, out) = run_lbd(&["--grpc-tls-cert", "/tmp/c.pem"], T);
    assert_eq!(code, Some(2), "{out}");
    assert_eq!(out.lines().count(), 1, "one line: {out}");
    assert!(out.contains("--grpc-tls-key"), "{out}");
}

/// A huge range is refused at once, not after allocating gigabytes: run
/// with 1 GiB of address space (util-linux's `prlimit`), the range's 16 GiB
/// would abort lbd instead of giving the error line.
#[test]
fn huge_lcore_range() {
    let out = std::process::Command::new("prlimit")
        .arg("--as=1073741824")
        .arg(common::lbd_bin())
        .args(["--lcores", "0-4294967295", "--vdev", "net_null0", "--no-huge"])
        .output()
        .expect("prlimit runs lbd");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(lbd_line(&text).contains("is beyond the maximum"), "{text}");
    assert_clean(&text);
}

/// SNAT addresses nobody can own, or listed twice, are the config file's
/// error, naming the field, before EAL starts.
#[test]
fn bad_snat_addresses() {
    for (text, want) in [
        (
            "[snat]\naddresses = [\"224.0.0.1\"]\n",
            "snat: addresses[0]: 224.0.0.1 is unspecified, multicast or broadcast",
        ),
        (
            "[snat]\naddresses = [\"10.9.0.1\", \"10.9.0.1\"]\n",
            "snat: addresses[1]: 10.9.0.1 is listed twice",
        ),
        (
            "[snat]\naddresses = [\"10.9.0.1\", \"127.0.0.1\"]\n",
            "snat: addresses[1]: 127.0.0.1 is a loopback address",
        ),
    ] {
        let f = TempFile::new("snat.toml", text);
        let (code, out) = run_lbd(&["--no-huge", "--vdev", "net_null0", "--config", f.path()], T);
        assert_eq!(code, Some(1), "{out}");
        assert_eq!(out.lines().count(), 1, "{out}");
        let l = lbd_line(&out);
        assert!(l.contains("snat.toml") && l.contains(want), "{l}");
    }
}

#[test]
fn missing_config() {
    let (code, out) = run_lbd(
        &[
            "--no-huge",
            "--vdev",
            "net_null0",
            "--config",
            "/nonexistent/lbd.toml",
        ],
        T,
    );
    assert_eq!(code, Some(1), "{out}");
    let l = lbd_line(&out);
    // Said once: the error quotes its cause, which is not added again.
    assert_eq!(
        l,
        "lbd: config /nonexistent/lbd.toml: No such file or directory (os error 2)"
    );
}

#[test]
fn invalid_config() {
    let f = TempFile::new("bad.toml", "[[interface]\naddress = \n");
    let (code, out) = run_lbd(&["--no-huge", "--vdev", "net_null0", "--config", f.path()], T);
    assert_eq!(code, Some(1), "{out}");
    assert!(lbd_line(&out).contains("bad.toml"), "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
}

#[test]
fn address_without_prefix() {
    let f = TempFile::new("noprefix.toml", "[[interface]]\naddress = \"10.0.0.1\"\n");
    let (code, out) = run_lbd(&["--no-huge", "--vdev", "net_null0", "--config", f.path()], T);
    assert_eq!(code, Some(1), "{out}");
    let l = lbd_line(&out);
    assert!(
        l.contains("interface 0: address") && l.contains("no prefix length"),
        "{l}"
    );
}

/// A conntrack timeout out of range, or two that contradict each other,
/// is the config file's error naming the key, before EAL starts.
#[test]
fn bad_conntrack_timeouts() {
    for (text, want) in [
        (
            "[conntrack.timeouts]\ntcp_established = 0\n",
            "conntrack.timeouts.tcp_established: 0 s is not within 1..=604800 s",
        ),
        (
            "[conntrack.timeouts]\nudp_replied = \"8d\"\n",
            "conntrack.timeouts.udp_replied: 691200 s is not within 1..=604800 s",
        ),
        (
            "[conntrack.timeouts]\ntcp_established = 60\ntcp_established_unreplied = 120\n",
            "conntrack.timeouts.tcp_established_unreplied: 120 s is longer than tcp_established (60 s)",
        ),
        ("[conntrack.timeouts]\ntcp_establshed = 60\n", "tcp_establshed"),
    ] {
        let f = TempFile::new("timeouts.toml", text);
        let (code, out) = run_lbd(&["--no-huge", "--vdev", "net_null0", "--config", f.path()], T);
        assert_eq!(code, Some(1), "{out}");
        assert_eq!(out.lines().count(), 1, "{out}");
        let l = lbd_line(&out);
        assert!(l.contains("timeouts.toml") && l.contains(want), "{l}");
        assert_clean(&out);
    }
}

#[test]
fn pci_that_does_not_exist() {
    let (code, out) = run_lbd(&["--pci", "0000:fe:1f.7"], T);
    assert_eq!(code, Some(1), "{out}");
    assert!(lbd_line(&out).contains("0000:fe:1f.7 does not exist"), "{out}");
    // Malformed, not missing: a usage error.
    let (code, out) = run_lbd(&["--pci", "eth0"], T);
    assert_eq!(code, Some(2), "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
    let l = lbd_line(&out);
    assert!(l.contains("--pci") && l.contains("not a PCI address"), "{l}");
}

/// Flag values EAL would misread or that name one device twice are usage
/// errors (exit 2), one line naming the flag, before anything starts.
#[test]
fn bad_flag_values() {
    let p = prefix("values");
    for (args, flag, want) in [
        (vec!["--mem", "0"], "--mem", "not in 64..=1048576"),
        (vec!["--mem", "4294967295"], "--mem", "not in 64..=1048576"),
        (
            vec!["--affinity-size", "63"],
            "--affinity-size",
            "not in 64..=67108864",
        ),
        (
            vec!["--affinity-size", "67108865"],
            "--affinity-size",
            "not in 64..=67108864",
        ),
        (vec!["--file-prefix", ""], "--file-prefix", "letters, digits"),
        (vec!["--file-prefix", "a/b"], "--file-prefix", "letters, digits"),
        (
            vec!["--file-prefix", ".."],
            "--file-prefix",
            "not starting with '.'",
        ),
        (
            vec!["--metrics", "localhost:9650"],
            "--metrics",
            "invalid socket address",
        ),
        (vec!["--vdev", ",iface=x"], "--vdev", "no device name"),
        (
            vec!["--vdev", "net_null0,size=64"],
            "--vdev net_null0",
            "given twice",
        ),
        (
            vec!["--pci", "03:00.0", "--pci", "0000:03:00.0"],
            "--pci 0000:03:00.0",
            "given twice",
        ),
    ] {
        let mut all = vec!["--no-huge", "--vdev", "net_null0"];
        if flag != "--file-prefix" {
            all.push(&p);
        }
        all.extend(args.iter().copied());
        let (code, out) = run_lbd(&all, T);
        assert_eq!(code, Some(2), "{args:?}: {out}");
        assert_eq!(out.lines().count(), 1, "{args:?}: one line: {out}");
        let l = lbd_line(&out);
        assert!(l.contains(flag) && l.contains(want), "{args:?}: {l}");
    }
}

/// TLS asked for on a unix socket: the flags contradict each other, a
/// usage error.
#[test]
fn tls_on_a_unix_socket() {
    let (code, out) = run_lbd(
        &[
            "--no-huge",
            "--vdev",
            "net_null0",
            "--grpc",
            "/tmp/lbd-test-unused.sock",
            "--grpc-tls-cert",
            "/tmp/c.pem",
            "--grpc-tls-key",
            "/tmp/k.pem",
        ],
        T,
    );
    assert_eq!(code, Some(2), "{out}");
    assert_eq!(out.lines().count(), 1, "one line: {out}");
    let l = lbd_line(&out);
    assert!(l.contains("--grpc-tls-cert") && l.contains("unix socket"), "{l}");
}

/// What the gRPC listener would refuse is found before EAL starts: one
/// line, exit 1, and nothing touched (no EAL or port lines, the state file
/// not written).
#[test]
fn listener_refused_before_anything_starts() {
    let dir = std::env::temp_dir().join(format!("lbd-listen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = |n: &str| dir.join(n).to_str().unwrap().to_string();
    let live = d("live.sock");
    let _held = std::os::unix::net::UnixListener::bind(&live).unwrap();
    std::fs::write(d("file"), "a file").unwrap();
    std::fs::write(d("c.pem"), "not a certificate\n").unwrap();
    std::fs::write(d("k.pem"), "not a key\n").unwrap();
    let state = d("state.json");
    let p = prefix("listen");
    let tcp = ["--grpc", "127.0.0.1:0"];
    let held_tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held_tcp.local_addr().unwrap().to_string();
    let metrics_in_use = format!("--metrics: cannot listen on {taken}: ");
    for (args, want) in [
        (
            vec!["--grpc", &d("m.sock"), "--metrics", &taken],
            metrics_in_use.as_str(),
        ),
        (
            vec!["--grpc", &live],
            "another process (another lbd?) is listening",
        ),
        (vec!["--grpc", &d("file")], "exists and is not a socket"),
        (
            vec!["--grpc", &format!("{}/lbd.sock", d("file"))],
            "is not a directory",
        ),
        (
            [
                &tcp[..],
                &[
                    "--grpc-tls-cert",
                    &d("missing.pem"),
                    "--grpc-tls-key",
                    &d("k.pem"),
                ],
            ]
            .concat(),
            "--grpc-tls-cert: cannot read",
        ),
        (
            [
                &tcp[..],
                &["--grpc-tls-cert", &d("c.pem"), "--grpc-tls-key", &d("k.pem")],
            ]
            .concat(),
            "TLS configuration",
        ),
    ] {
        let mut all = vec!["--no-huge", "--vdev", "net_null0", &p, "--state-file", &state];
        all.extend(args.iter().copied());
        let (code, out) = run_lbd(&all, T);
        assert_eq!(code, Some(1), "{args:?}: {out}");
        assert_eq!(
            out.lines().count(),
            1,
            "{args:?}: one line, nothing started: {out}"
        );
        assert!(lbd_line(&out).contains(want), "{args:?}: {out}");
        assert!(
            !std::path::Path::new(&state).exists(),
            "{args:?}: state file written"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A PCI device that exists but is not bound to a DPDK driver: a bridge
/// or other non-network, non-storage device, which no PMD claims.
#[test]
fn pci_not_bound_to_dpdk() {
    let dev = std::fs::read_dir("/sys/bus/pci/devices").ok().and_then(|d| {
        d.flatten().map(|e| e.path()).find(|p| {
            let class = std::fs::read_to_string(p.join("class")).unwrap_or_default();
            class.starts_with("0x06") // bridges: never a NIC or a disk
        })
    });
    let Some(dev) = dev else {
        eprintln!("skipped: this machine has no PCI bridge to try");
        return;
    };
    let bdf = dev.file_name().unwrap().to_string_lossy().into_owned();
    let p = prefix("pci");
    let (code, out) = run_lbd(&["--no-huge", "--pci", &bdf, &p], T);
    assert_eq!(code, Some(1), "{out}");
    assert_clean(&out);
    let l = lbd_line(&out);
    assert!(
        l.contains(&bdf) && l.contains("not bound to a DPDK driver") && l.contains("dpdk-devbind"),
        "{l}"
    );
}

#[test]
fn vdev_that_fails_to_probe() {
    let p = prefix("vdev");
    let (code, out) = run_lbd(
        &["--no-huge", "--vdev", "net_af_packet0,iface=lbd-no-such-if", &p],
        T,
    );
    assert_eq!(code, Some(1), "{out}");
    assert_clean(&out);
    assert!(lbd_line(&out).contains("net_af_packet0"), "{out}");
}

/// A failsafe device owns the sub-device it probes, which takes the next
/// port id: the port given after it gets id 2, and lbd (which indexes its
/// ports by id) refuses instead of driving the sub-device as port 1.
#[test]
fn port_ids_with_a_hole() {
    let p = prefix("holes");
    let (code, out) = run_lbd(
        &[
            "--no-huge",
            "--vdev",
            "net_failsafe0,dev(net_null1)",
            "--vdev",
            "net_null0",
            &p,
        ],
        T,
    );
    assert_eq!(code, Some(1), "{out}");
    assert_clean(&out);
    assert!(
        lbd_line(&out).contains("DPDK's ports have ids [0, 2], not 0 to 1"),
        "{out}"
    );
}

/// EAL arguments after `--` that make a worker lcore a service core: its
/// queues would go unpolled, so lbd refuses in one line.
#[test]
fn eal_arguments_that_take_a_worker_lcore() {
    let p = prefix("service");
    let (code, out) = run_lbd(
        &[
            "--lcores",
            "0-1",
            "--no-huge",
            "--vdev",
            "net_null0",
            &p,
            "--",
            "-S",
            "1",
        ],
        T,
    );
    assert_eq!(code, Some(1), "{out}");
    assert_clean(&out);
    let l = lbd_line(&out);
    assert!(
        l.contains("EAL runs workers on lcores [], not the [1] of --lcores 0-1"),
        "{l}"
    );
}

#[test]
fn no_ports() {
    // A usage error: a flag is missing.
    let (code, out) = run_lbd(&["--no-huge"], T);
    assert_eq!(code, Some(2), "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(lbd_line(&out).contains("no ports"), "{out}");
}

#[test]
fn more_workers_than_queues() {
    assert!(common::can_netns(), "this test needs root and iproute2");
    // net_af_packet offers one queue pair unless told otherwise: two workers do not fit.
    let net = NetnsVeth::new("q", "10.98.0.2/24");
    let vdev = format!("net_af_packet0,iface={}", net.host_if);
    let p = prefix("queues");
    let (code, out) = run_lbd(&["--lcores", "0@0,1@0,2@1", "--no-huge", "--vdev", &vdev, &p], T);
    assert_eq!(code, Some(1), "{out}");
    assert_clean(&out);
    let l = lbd_line(&out);
    assert!(
        l.contains("at most 1 rx and 1 tx queues") && l.contains("2 asked for"),
        "{l}"
    );
}

/// An MTU the device does not take stops lbd with the device's range;
/// one in range is set on it (net_af_packet sets its kernel interface's).
#[test]
fn mtu_the_device_does_not_take() {
    assert!(common::can_netns(), "this test needs root and iproute2");
    let net = NetnsVeth::new("mtu", "10.97.0.2/24");
    let vdev = format!("net_af_packet0,iface={}", net.host_if);
    let f = TempFile::new(
        "mtu.toml",
        "[[interface]]\naddress = \"10.97.0.1/24\"\nmtu = 9000\n",
    );
    let p = prefix("mtu");
    let (code, out) = run_lbd(&["--no-huge", "--vdev", &vdev, "--config", f.path(), &p], T);
    assert_eq!(code, Some(1), "{out}");
    assert_clean(&out);
    let l = lbd_line(&out);
    assert!(
        l.contains("port 0 (net_af_packet0): MTU 9000 is outside what the device takes")
            && l.ends_with("-1500)"),
        "{l}"
    );
    let f = TempFile::new(
        "mtu2.toml",
        "[[interface]]\naddress = \"10.97.0.1/24\"\nmtu = 1400\n",
    );
    let log = std::env::temp_dir().join(format!("lbd-mtu-{}.log", std::process::id()));
    let mut lbd = common::Lbd::start(&["--no-huge", "--vdev", &vdev, "--config", f.path(), &p], &log);
    lbd.wait_for_log("lbd running", Duration::from_secs(30));
    let link = common::sh(&format!("ip link show {}", net.host_if));
    let (code, _) = lbd.signal_and_wait(15, Duration::from_secs(15));
    let out = lbd.log_text();
    let _ = std::fs::remove_file(&log);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("mtu=1400"), "{out}");
    assert!(link.contains("mtu 1400"), "{link}");
}

#[test]
fn interfaces_do_not_match_ports() {
    let f = TempFile::new(
        "two.toml",
        "[[interface]]\naddress = \"10.0.0.1/24\"\n[[interface]]\naddress = \"10.1.0.1/24\"\n",
    );
    let p = prefix("ifaces");
    let (code, out) = run_lbd(&["--no-huge", "--vdev", "net_null0", "--config", f.path(), &p], T);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        lbd_line(&out).contains("2 [[interface]] tables but DPDK has 1 ports"),
        "{out}"
    );
}

/// Connection tables that cannot fit in the memory available are refused
/// before EAL starts, naming the flag and the figures, instead of aborting
/// lbd (or waking the OOM killer) once the ports are up: 15 workers of
/// 6.6 GiB each fit on no test machine.
#[test]
fn conntrack_larger_than_memory() {
    let p = prefix("ctmem");
    let (code, out) = run_lbd(
        &[
            "--no-huge",
            "--vdev",
            "net_null0",
            &p,
            "--lcores",
            "0-15",
            "--conntrack-size",
            "67108864",
        ],
        T,
    );
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(out.lines().count(), 1, "one line, before EAL: {out}");
    let l = lbd_line(&out);
    assert!(
        l.contains("--conntrack-size 67108864")
            && l.contains("101760 MiB (6784 MiB for each of 15 workers)")
            && l.contains("MemAvailable"),
        "{l}"
    );
}

/// --mem within its range but too small for lbd's mbufs: the error names
/// the flag (it used to be only DPDK's "creating mempool ... failed").
#[test]
fn mem_too_small_for_the_mbufs() {
    let p = prefix("mem");
    let (code, out) = run_lbd(&["--no-huge", "--mem", "64", "--vdev", "net_null0", &p], T);
    assert_eq!(code, Some(1), "{out}");
    assert_clean(&out);
    let l = lbd_line(&out);
    assert!(
        l.contains("--mem 64: too little DPDK memory for the 16383 mbufs (2176-byte buffers) of 1 ports and 1 workers: raise it"),
        "{l}"
    );
}
