//! The `lbctl` binary against an in-process server on a temporary socket:
//! output formats, state changes, and exit codes with one-line errors.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::Server;
use lb_control::model::BackendState;

const FILE: &str = r#"
[snat]
addresses = ["10.1.0.100"]

[[interface]]
port = 0

[[service]]
name = "default/web"
mode = "fullnat"
session_affinity_timeout = "3h"

[[service.frontend]]
address = "10.0.0.100:80"
protocol = "tcp"
type = "load-balancer"

[[service.backend]]
address = "10.1.0.11:8080"
node = "node-1"

[[service.backend]]
address = "10.1.0.12:8080"
weight = 2

[[service]]
name = "kube-system/dns"
mode = "dnat"

[[service.frontend]]
address = "10.0.0.53:53"
protocol = "udp"
type = "cluster-ip"

[[service.backend]]
address = "10.1.0.11:53"
"#;

fn lbctl(server: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lbctl"))
        .arg("--server")
        .arg(server)
        .args(args)
        .env_remove("LBCTL_SERVER")
        .output()
        .unwrap()
}

fn sock(s: &Server) -> String {
    format!("unix:{}", s.socket.display())
}

/// Runs lbctl and expects success; returns stdout.
fn ok(s: &Server, args: &[&str]) -> String {
    let out = lbctl(&sock(s), args);
    assert!(
        out.status.success(),
        "lbctl {args:?}: {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs lbctl and expects exit status `code`; returns the one stderr line.
fn fails(server: &str, args: &[&str], code: i32) -> String {
    let out = lbctl(server, args);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(code), "lbctl {args:?}: stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("lbctl: "), "{err}");
    assert!(out.stdout.is_empty(), "nothing on stdout");
    err.trim_end().to_string()
}

fn write_file(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn apply_get_drain_and_delete() {
    let s = Server::start();
    let file = write_file(s.dir.path(), "services.toml", FILE);

    let out = ok(&s, &["apply", "-f", &file]);
    assert_eq!(out, "revision 1: 7 added, 0 updated, 0 unchanged, 0 removed\n");
    assert_eq!(s.revision(), 1);
    // The same file again changes nothing, and says so.
    let out = ok(&s, &["apply", "-f", &file]);
    assert_eq!(out, "revision 1: nothing changed (7 unchanged)\n");
    assert_eq!(s.revision(), 1);
    let st = s.state();
    assert!(st
        .services
        .values()
        .all(|x| x.source == lb_control::model::Source::Api));

    let table = ok(&s, &["get", "services"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].starts_with("NAME "), "{table}");
    assert!(lines[1].starts_with("default/web  "), "{table}");
    assert!(lines[1].contains("fullnat"), "{table}");
    assert!(lines[1].contains(" 3h "), "{table}");
    assert!(lines[2].starts_with("kube-system/dns"), "{table}");
    // Columns line up: every row's second column starts where MODE does.
    let col = lines[0].find("MODE").unwrap();
    assert!(
        lines.iter().skip(1).all(|l| l[col..].starts_with(['f', 'd'])),
        "{table}"
    );

    let frontends = ok(&s, &["get", "frontends"]);
    assert!(frontends.contains("10.0.0.100:80"), "{frontends}");
    assert!(frontends.contains("cluster-ip"), "{frontends}");

    let json: serde_json::Value = serde_json::from_str(&ok(&s, &["get", "backends", "-o", "json"])).unwrap();
    let backends = json.as_array().unwrap();
    assert_eq!(backends.len(), 3);
    assert_eq!(backends[0]["service"], "default/web");
    assert_eq!(backends[0]["address"], "10.1.0.11:8080");
    assert_eq!(backends[0]["node"], "node-1");
    assert_eq!(backends[1]["weight"], 2);
    assert_eq!(backends[2]["service"], "kube-system/dns");

    let yaml = ok(
        &s,
        &["get", "frontends", "-o", "yaml", "--service", "kube-system/dns"],
    );
    assert!(yaml.contains("type: cluster-ip"), "{yaml}");
    assert!(!yaml.contains("10.0.0.100"), "{yaml}");

    // Drain one backend everywhere: a port-less address matches both ports.
    let out = ok(&s, &["backend", "drain", "10.1.0.11"]);
    assert_eq!(out, "revision 2: 2 backends at 10.1.0.11 set to terminating\n");
    let table = ok(&s, &["get", "backends", "--service", "default/web"]);
    let row = table.lines().find(|l| l.contains("10.1.0.11:8080")).unwrap();
    assert!(row.contains("terminating (operator)"), "{table}");
    let json: serde_json::Value = serde_json::from_str(&ok(
        &s,
        &["get", "backends", "-o", "json", "--service", "kube-system/dns"],
    ))
    .unwrap();
    assert_eq!(json[0]["state"], "active", "the source's");
    assert_eq!(json[0]["operator_state"], "terminating");
    ok(
        &s,
        &["backend", "enable", "10.1.0.11:8080", "--service", "default/web"],
    );
    ok(&s, &["backend", "maintenance", "10.1.0.12:8080"]);
    let st = s.state();
    let states: Vec<BackendState> = st.backends.values().map(|b| b.effective_state()).collect();
    assert_eq!(
        states,
        vec![
            BackendState::Active,
            BackendState::Maintenance,
            BackendState::Terminating
        ]
    );

    let info = ok(&s, &["info"]);
    assert!(info.contains(&s.instance_id), "{info}");
    assert!(info.contains("net_null0"), "{info}");
    let info: serde_json::Value = serde_json::from_str(&ok(&s, &["info", "-o", "json"])).unwrap();
    assert_eq!(info["revision"], 4);
    assert_eq!(info["workers"], 2);
    let stats = ok(&s, &["stats"]);
    assert!(stats.starts_with("revision 4,"), "{stats}");
    assert!(stats.contains("10.0.0.100:80/tcp"), "{stats}");

    assert_eq!(
        ok(&s, &["delete", "backend", "default/web", "10.1.0.12:8080"]),
        "revision 5: deleted backend 10.1.0.12:8080 of default/web\n"
    );
    ok(&s, &["delete", "frontend", "10.0.0.53:53/udp"]);
    ok(&s, &["delete", "service", "default/web"]);
    let st = s.state();
    assert_eq!(st.services.keys().collect::<Vec<_>>(), vec!["kube-system/dns"]);
    assert!(st.frontends.is_empty());
    assert_eq!(st.backends.len(), 1);
    assert_eq!(s.revision(), 7);

    // Re-applying the same file is idempotent for what it still declares.
    ok(&s, &["apply", "-f", &file]);
    assert_eq!(s.state().services.len(), 2);
}

#[test]
fn errors_exit_non_zero_with_one_line() {
    let s = Server::start();
    let server = sock(&s);

    // A bad file: exit 2, the file, the service and the field; nothing sent.
    let bad = write_file(
        s.dir.path(),
        "bad.toml",
        "[[service]]\nname = \"default/web\"\n[[service.frontend]]\naddress = \"10.0.0.100:80\"\nprotocol = \"sctp\"\n",
    );
    let err = fails(&server, &["apply", "-f", &bad], 2);
    assert!(err.contains("bad.toml"), "{err}");
    assert!(
        err.contains("service[0] \"default/web\": frontend[0]: protocol"),
        "{err}"
    );
    let missing = fails(&server, &["apply", "-f", "/nonexistent/services.toml"], 2);
    assert!(missing.contains("/nonexistent/services.toml"), "{missing}");
    assert_eq!(s.revision(), 0);

    // The server refuses: exit 1 with the status code and its message.
    let err = fails(&server, &["delete", "service", "default/nope"], 1);
    assert!(err.starts_with("lbctl: NOT_FOUND: "), "{err}");
    assert!(err.contains("default/nope"), "{err}");
    let err = fails(&server, &["backend", "drain", "10.9.9.9"], 1);
    assert!(err.starts_with("lbctl: NOT_FOUND: "), "{err}");
    // Arguments lbd would refuse are refused before connecting: exit 2,
    // even with lbd down. An empty --service would have meant "every
    // service" to lbd.
    let down = format!("unix:{}", s.dir.path().join("down.sock").display());
    for args in [
        &["delete", "service", "nope"][..],
        &["backend", "drain", "10.1.0.11", "--service", ""],
        &["backend", "drain", "nonsense"],
        &["backend", "drain", "[10.1.0.11"],
        &["backend", "drain", "[fe80::1%2]:80"],
        &["get", "backends", "--service", ""],
        &["get", "backends", "--address", "not-an-ip"],
        &["delete", "backend", "Default/Web", "10.1.0.11:80"],
    ] {
        for srv in [&server, &down] {
            let out = lbctl(srv, args);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let orphan = write_file(
        s.dir.path(),
        "orphan.toml",
        "[[service]]\nname = \"default/a\"\n[[service.frontend]]\naddress = \"10.0.0.100:80\"\n",
    );
    ok(&s, &["apply", "-f", &orphan]);
    let clash = write_file(
        s.dir.path(),
        "clash.toml",
        "[[service]]\nname = \"default/b\"\n[[service.frontend]]\naddress = \"10.0.0.100:80\"\n",
    );
    let err = fails(&server, &["apply", "-f", &clash], 1);
    assert!(err.starts_with("lbctl: ALREADY_EXISTS: "), "{err}");
    assert!(err.contains("10.0.0.100:80/tcp"), "{err}");
    assert_eq!(s.revision(), 1);

    // Bad arguments: exit 2, one line naming what is wrong, no usage block.
    let err = fails(&server, &["delete", "frontend", "10.0.0.100:80"], 2);
    assert_eq!(
        err,
        "lbctl: invalid value '10.0.0.100:80' for '<ADDR:PORT/PROTO>': \"10.0.0.100:80\" is not ADDR:PORT/PROTO (e.g. 10.0.0.100:80/tcp) (see lbctl --help)"
    );
    // `--watch 0` would print "every 0s" and busy-poll: refused.
    let err = fails(&server, &["stats", "--watch", "0"], 2);
    assert!(err.contains("--watch"), "{err}");
    let err = fails(&server, &["backend", "drain"], 2);
    assert_eq!(
        err,
        "lbctl: the following required arguments were not provided: <ADDR[:PORT]> (see lbctl --help)"
    );
    let err = fails(&server, &["bogus"], 2);
    assert!(err.contains("unrecognized subcommand 'bogus'"), "{err}");
    let err = fails(&server, &["--timeout", "0", "info"], 2);
    assert!(err.contains("--timeout"), "{err}");
    let err = fails(&server, &[], 2);
    assert!(
        err.contains("'lbctl' requires a subcommand but one was not provided"),
        "{err}"
    );
    let err = fails(&server, &["delete"], 2);
    assert_eq!(
        err,
        "lbctl: a command is missing: usage: lbctl delete [OPTIONS] <COMMAND> (see lbctl --help)"
    );
    // No argument at all: clap would print the whole help, on stderr.
    let out = Command::new(env!("CARGO_BIN_EXE_lbctl")).output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err,
        "lbctl: a command is missing: usage: lbctl [OPTIONS] <COMMAND> (see lbctl --help)\n"
    );
    // --help and --version print as usual, on stdout, exit 0.
    for (flag, want) in [("--help", "Usage: lbctl"), ("--version", "lbctl ")] {
        let out = lbctl(&server, &[flag]);
        assert_eq!(out.status.code(), Some(0), "{flag}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(want), "{flag}: {text}");
    }
    let out = lbctl(&server, &["backend", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).lines().count() > 3);

    // No server: exit 3, naming the socket and suggesting lbd is down.
    let gone = s.dir.path().join("nothing.sock");
    let err = fails(&format!("unix:{}", gone.display()), &["info"], 3);
    assert!(err.contains(&gone.display().to_string()), "{err}");
    assert!(err.contains("is lbd running"), "{err}");
    let err = fails("127.0.0.1:1", &["get", "services"], 3);
    assert!(err.contains("127.0.0.1:1"), "{err}");

    // A server that accepts and never answers: exit 3 after --timeout.
    let hung_path = s.dir.path().join("hung.sock");
    let hung = std::os::unix::net::UnixListener::bind(&hung_path).unwrap();
    let err = fails(
        &format!("unix:{}", hung_path.display()),
        &["--timeout", "1", "info"],
        3,
    );
    assert!(err.contains("did not answer in time"), "{err}");
    drop(hung);
}

/// lbd going away under `--watch` is "cannot reach lbd" (exit 3), not a
/// refusal; a reader that closes the pipe early ends lbctl quietly.
#[test]
fn a_lost_connection_and_a_closed_pipe() {
    let watch = |s: &Server| {
        Command::new(env!("CARGO_BIN_EXE_lbctl"))
            .args(["--server", &sock(s), "stats", "--watch", "1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut s = Server::start();
    let mut child = watch(&s);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().starts_with("--- every 1s"));
    s.stop().unwrap();
    // Drain the rest so lbctl never blocks on a full pipe.
    for _ in lines.by_ref() {}
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.starts_with("lbctl: lost the connection to lbd"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    let s = Server::start();
    let mut child = watch(&s);
    let mut first = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut first).unwrap();
    drop(out);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn server_from_the_environment_and_stats_watch() {
    let s = Server::start();
    let out = Command::new(env!("CARGO_BIN_EXE_lbctl"))
        .args(["get", "services", "-o", "json"])
        .env("LBCTL_SERVER", sock(&s))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), "[]");

    // --watch repeats with rates until stopped; read two samples.
    let mut child = Command::new(env!("CARGO_BIN_EXE_lbctl"))
        .args(["--server", &sock(&s), "stats", "--watch", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut samples = 0;
    let mut saw_rates = false;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if line.starts_with("--- every 1s") {
            samples += 1;
            if samples == 3 {
                break;
            }
        }
        saw_rates |= samples == 2 && line.contains("RX/S");
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(saw_rates, "the second sample has rates");
}

/// Makes a CA, a server certificate for 127.0.0.1 and a client
/// certificate in `dir` with the openssl command.
fn make_certs(dir: &Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=lbd test CA",
    ]);
    run(&ca);
    for (name, ext) in [
        (
            "server",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        ),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ] {
        std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
        let (key, csr, pem, extf, subj) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
            format!("/CN={name}"),
        );
        let mut req = vec!["req"];
        req.extend(ec);
        req.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
        run(&req);
        run(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &extf,
        ]);
    }
}

#[test]
fn tcp_with_tls_and_client_certificates() {
    let s = Server::start_with(|dir| {
        make_certs(dir);
        Some(lb_control::listen::ListenConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            tls: Some(lb_control::listen::TlsPaths {
                cert: dir.join("server.pem"),
                key: dir.join("server.key"),
                client_ca: Some(dir.join("ca.pem")),
            }),
        })
    });
    let lb_control::listen::ListenAddr::Tcp(addr) = s.addr.clone() else {
        panic!("{:?}", s.addr)
    };
    let d = s.dir.path();
    let path = |n: &str| d.join(n).to_str().unwrap().to_string();
    let server = format!("https://{addr}");
    let out = lbctl(
        &server,
        &[
            "--ca",
            &path("ca.pem"),
            "--cert",
            &path("client.pem"),
            "--key",
            &path("client.key"),
            "info",
            "-o",
            "json",
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["instance_id"], s.instance_id.as_str());

    // Without a client certificate, or over plain http, nothing works.
    let out = lbctl(&server, &["--ca", &path("ca.pem"), "info"]);
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    let out = lbctl(&format!("http://{addr}"), &["info"]);
    assert!(!out.status.success());
    // https without --ca is a usage error; so is a CA file with no
    // certificate in it, named with its flag (before, a TLS error after
    // connecting: exit 3, "is lbd running?").
    fails(&server, &["info"], 2);
    let empty = write_file(d, "empty.pem", "");
    let err = fails(&server, &["--ca", &empty, "info"], 2);
    assert!(
        err.contains("--ca") && err.contains("no PEM CERTIFICATE"),
        "{err}"
    );
    let err = fails(
        &server,
        &[
            "--ca",
            &path("ca.pem"),
            "--cert",
            &path("ca.pem"),
            "--key",
            &path("ca.pem"),
            "info",
        ],
        2,
    );
    assert!(
        err.contains("--key") && err.contains("no PEM PRIVATE KEY"),
        "{err}"
    );
    // A CA that did not sign lbd's certificate: the handshake fails, which
    // is the options' fault (exit 2), not an absent lbd (exit 3).
    let err = fails(
        &server,
        &[
            "--ca",
            &path("client.pem"),
            "--cert",
            &path("client.pem"),
            "--key",
            &path("client.key"),
            "info",
        ],
        2,
    );
    assert!(
        err.contains("TLS with lbd") && err.contains("--ca") && !err.contains("is lbd running"),
        "{err}"
    );
}

/// `lbctl watch | head`: when the reader of its output has gone, lbctl
/// ends at once (exit 0, as on a write that finds the pipe closed), not at
/// the next commit.
#[test]
fn watch_ends_when_its_reader_goes() {
    use std::time::{Duration, Instant};
    let s = Server::start();
    let base = s.plane.lock().unwrap().watchers();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lbctl"))
        .args(["--server", &sock(&s), "watch"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.plane.lock().unwrap().watchers() < base + 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(s.plane.lock().unwrap().watchers(), base + 1, "subscribed");
    // The reader goes; no commit follows.
    drop(child.stdout.take());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `lbctl watch` prints each commit as lbd makes it, as text or one JSON
/// object a line, for longer than `--timeout` (a stream has no deadline),
/// and exits 1 with lbd's UNAVAILABLE when lbd shuts down.
#[test]
fn watch_prints_commits_until_lbd_stops() {
    use std::sync::mpsc;
    use std::time::Duration;
    let mut s = Server::start();
    let spawn = |format: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lbctl"))
            .args(["--server", &sock(&s), "--timeout", "1", "watch", "-o", format])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Lines as they come, read on a thread so the test's waits are bounded.
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                if tx.send(l.unwrap()).is_err() {
                    break;
                }
            }
        });
        (child, rx)
    };
    let base = s.plane.lock().unwrap().watchers();
    let (text_child, text) = spawn("table");
    let (json_child, json) = spawn("json");
    // Both subscribed (bounded wait), then past the 1 s answer timeout.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while s.plane.lock().unwrap().watchers() < base + 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        s.plane.lock().unwrap().watchers(),
        base + 2,
        "both watchers subscribed"
    );
    std::thread::sleep(Duration::from_millis(1500));
    let dir = tempfile::tempdir().unwrap();
    ok(&s, &["apply", "-f", &write_file(dir.path(), "svc.toml", FILE)]);
    ok(&s, &["delete", "backend", "default/web", "10.1.0.12:8080"]);
    let next =
        |rx: &mpsc::Receiver<String>| rx.recv_timeout(Duration::from_secs(10)).expect("a line in time");

    let first = next(&text);
    assert_eq!(first, "revision 1 (api): 7 changes");
    let lines: Vec<String> = (0..7).map(|_| next(&text)).collect();
    for want in [
        "  upsert service default/web: fullnat, policy cluster, client-IP affinity 3h",
        "  upsert frontend 10.0.0.100:80/tcp (load-balancer) of default/web",
        "  upsert backend 10.1.0.11:8080 of default/web: weight 1, active, node node-1",
        "  upsert backend 10.1.0.12:8080 of default/web: weight 2, active",
        "  upsert service kube-system/dns: dnat, policy cluster",
    ] {
        assert!(lines.iter().any(|l| l == want), "{want:?} not in {lines:#?}");
    }
    assert_eq!(next(&text), "revision 2 (api): 1 change");
    assert_eq!(next(&text), "  delete backend 10.1.0.12:8080 of default/web");

    let v: serde_json::Value = serde_json::from_str(&next(&json)).unwrap();
    assert_eq!(
        (v["revision"].as_u64(), v["source"].as_str()),
        (Some(1), Some("api"))
    );
    let changes = v["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 7);
    assert!(
        changes.iter().any(|c| c["upsert"] == "backend"
            && c["backend"]["address"] == "10.1.0.12:8080"
            && c["backend"]["weight"] == 2),
        "{v}"
    );
    let v: serde_json::Value = serde_json::from_str(&next(&json)).unwrap();
    assert_eq!(
        v["changes"][0],
        serde_json::json!({"delete": "backend", "service": "default/web", "address": "10.1.0.12:8080"})
    );

    s.stop().unwrap();
    for child in [text_child, json_child] {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(
            err.trim(),
            "lbctl: UNAVAILABLE: lbd is shutting down; Watch again after it restarts"
        );
    }
}
