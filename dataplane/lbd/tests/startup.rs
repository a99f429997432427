//! Start-up log lines the README points to.
mod common;

use std::time::Duration;

use common::{Lbd, TempFile};

/// Every port logs `port configured` (its offloads and promiscuous mode),
/// also one that has no `[[interface]]` in the config; the conntrack
/// timeouts that differ from the defaults are logged on one line.
#[test]
fn every_port_logs_port_configured() {
    let id = std::process::id();
    let prefix = format!("lbdtest-startup-{id}");
    let log = std::env::temp_dir().join(format!("lbd-startup-{id}.log"));
    let sock = std::env::temp_dir().join(format!("lbd-startup-{id}.sock"));
    let config = TempFile::new(
        "startup.toml",
        "[conntrack.timeouts]\ntcp_established = \"1h\"\nudp_replied = 60\n",
    );
    let mut lbd = Lbd::start(
        &[
            "--no-huge",
            "--file-prefix",
            &prefix,
            "--vdev",
            "net_null0",
            "--vdev",
            "net_null1",
            "--grpc",
            sock.to_str().unwrap(),
            "--config",
            config.path(),
        ],
        &log,
    );
    lbd.wait_for_log("lbd running", Duration::from_secs(20));
    let text = lbd.log_text();
    for port in ["port=0", "port=1"] {
        let line = text
            .lines()
            .find(|l| l.contains("port configured") && l.contains(port))
            .unwrap_or_else(|| panic!("no `port configured` line for {port}:\n{text}"));
        assert!(
            line.contains("address=none") && line.contains("promiscuous="),
            "{line}"
        );
    }
    assert!(
        text.contains("conntrack timeouts: tcp_established=3600s udp_replied=60s, the others default"),
        "{text}"
    );
    let (code, _) = lbd.signal_and_wait(15, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", lbd.log_text());
    let _ = std::fs::remove_file(&log);
}
