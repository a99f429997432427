//! A worker that panics stops lbd: it shuts down as for SIGTERM, prints its
//! counters and exits with status 1 and the failure on the last line
//! (README, "Starting and stopping"), whether the worker runs on its own
//! lcore or on the main one (a single lcore). The panic is injected with
//! `LBD_TEST_WORKER_PANIC`, which only debug builds read.
mod common;

use std::time::Duration;

use common::{Lbd, TempFile};

/// Runs lbd on `lcores` with a worker panic injected; returns its exit
/// status and log.
fn run_with_a_worker_panic(lcores: &str, tag: &str) -> (Option<i32>, String) {
    let id = std::process::id();
    let cfg = TempFile::new(
        &format!("panic-{tag}.toml"),
        "[[interface]]\naddress = \"10.97.0.1/24\"\n",
    );
    let prefix = format!("lbdtest-panic-{tag}-{id}");
    let log = std::env::temp_dir().join(format!("lbd-panic-{tag}-{id}.log"));
    let sock = std::env::temp_dir().join(format!("lbd-panic-{tag}-{id}.sock"));
    let mut lbd = Lbd::start_with_env(
        &common::vdev_args(lcores, &prefix, "net_null0", cfg.path(), sock.to_str().unwrap()),
        &[("LBD_TEST_WORKER_PANIC", "1")],
        &log,
    );
    let code = lbd.wait_for_exit(Duration::from_secs(60), "a worker panic");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{prefix}"));
    (code, text)
}

fn assert_stopped_cleanly(code: Option<i32>, text: &str) {
    assert_eq!(code, Some(1), "exit status 1:\n{text}");
    assert!(
        text.contains("injected for a test"),
        "the panic happened:\n{text}"
    );
    assert!(text.contains("final counters"), "the summary is printed:\n{text}");
    let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    assert!(
        last.starts_with("lbd: ") && last.contains("a worker panicked"),
        "the failure on the last line, got {last:?}:\n{text}"
    );
}

#[test]
fn a_worker_panic_stops_lbd_with_its_summary_and_status_1() {
    assert!(
        common::can_netns(),
        "this test needs root (run scripts/setup.sh as root)"
    );
    // The worker on the main lcore: no EAL trampoline catches it.
    let (code, text) = run_with_a_worker_panic("0", "main");
    assert_stopped_cleanly(code, &text);
    assert!(text.contains("1 of 1 ended abnormally"), "{text}");
    // A worker on its own lcore.
    let (code, text) = run_with_a_worker_panic("0-1", "lcore");
    assert_stopped_cleanly(code, &text);
}
