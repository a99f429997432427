//! A second SIGINT/SIGTERM while lbd is stopping exits at once with status
//! 1 (README, "Starting and stopping"), skipping the summary; one signal alone is the
//! clean stop that the other tests check.
mod common;

use std::time::Duration;

use common::{sh, Lbd, TempFile};

#[test]
fn a_second_signal_while_stopping_exits_at_once_with_status_1() {
    assert!(
        common::can_netns(),
        "this test needs root (run scripts/setup.sh as root)"
    );
    let id = std::process::id();
    let cfg = TempFile::new("signals.toml", "[[interface]]\naddress = \"10.98.0.1/24\"\n");
    let prefix = format!("lbdtest-signals-{id}");
    // lbd's exit skips EAL's cleanup: remove its runtime folder, pass or fail.
    let _runtime = RemoveOnDrop(format!("/var/run/dpdk/{prefix}"));
    let log = std::env::temp_dir().join(format!("lbd-signals-{id}.log"));
    let sock = std::env::temp_dir().join(format!("lbd-signals-{id}.sock"));
    let mut lbd = Lbd::start(
        &common::vdev_args("0", &prefix, "net_null0", cfg.path(), sock.to_str().unwrap()),
        &log,
    );
    lbd.wait_for_log("lbd running", Duration::from_secs(20));

    // Two different signals, so the kernel cannot merge them into one
    // pending signal: SIGINT starts the stop, SIGTERM arrives while it runs.
    let pid = lbd.child.as_ref().unwrap().id();
    sh(&format!("kill -INT {pid}; kill -TERM {pid}"));
    let code = lbd.wait_for_exit(Duration::from_secs(10), "two signals");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(code, Some(1), "exit status 1:\n{text}");
    assert!(
        !text.contains("final counters"),
        "the second signal skips the summary:\n{text}"
    );
    let _ = std::fs::remove_file(&log);
}

struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
