//! lbd on a veth pair: a namespace pings lbd's interface address (ARP
//! resolved by lbd, ICMP echo answered by lbd), then SIGTERM stops lbd
//! cleanly with exit 0 and final counters.
mod common;

use std::time::Duration;

use common::{Lbd, NetnsVeth, TempFile};

#[test]
fn ping_and_arp_from_a_namespace_then_clean_sigterm() {
    assert!(
        common::can_netns(),
        "this test needs root and iproute2 (run scripts/setup.sh as root)"
    );
    let net = NetnsVeth::new("p", "10.99.0.2/24");
    let cfg = TempFile::new("ping.toml", "[[interface]]\naddress = \"10.99.0.1/24\"\n");
    let vdev = format!("net_af_packet0,iface={}", net.host_if);
    let prefix = format!("lbdtest-ping-{}", std::process::id());
    let log = std::env::temp_dir().join(format!("lbd-ping-{}.log", std::process::id()));
    let sock = std::env::temp_dir().join(format!("lbd-ping-{}.sock", std::process::id()));
    let sock = sock.to_str().unwrap();
    let mut lbd = Lbd::start(&common::vdev_args("0-1", &prefix, &vdev, cfg.path(), sock), &log);
    lbd.wait_for_log("lbd running", Duration::from_secs(20));

    let out = net.try_exec("ping -c 3 -i 0.2 -W 2 10.99.0.1");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ping failed:\n{text}\n{}\nlbd log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        lbd.log_text()
    );
    assert!(text.contains("3 received"), "{text}");

    // The namespace learned lbd's MAC through ARP: the MAC of the host end,
    // which net_af_packet reports as the port's MAC.
    let neigh = net.exec("ip neigh show 10.99.0.1");
    let host_mac = common::sh(&format!("cat /sys/class/net/{}/address", net.host_if));
    assert!(
        neigh.contains(host_mac.trim()),
        "neighbor entry {neigh:?} should carry {host_mac:?}"
    );

    // A wrong address is not answered.
    let out = net.try_exec("ping -c 1 -W 1 10.99.0.77");
    assert!(!out.status.success(), "nobody owns 10.99.0.77");

    let (code, _took) = lbd.signal_and_wait(15, Duration::from_secs(10));
    let log_text = lbd.log_text();
    assert_eq!(code, Some(0), "clean exit on SIGTERM:\n{log_text}");
    assert!(log_text.contains("final counters"), "{log_text}");
    assert!(log_text.contains("rings: left_at_exit "), "{log_text}");
    // Every mbuf was back in the pool when lbd freed it (dpdk leaks a
    // pool, and says so, when one is still out).
    assert!(
        !log_text.contains("mbufs still in use"),
        "an mbuf outlived lbd's shutdown:
{log_text}"
    );
    let worker = log_text
        .lines()
        .find(|l| l.contains("worker 0:"))
        .expect("worker counters printed");
    let replies: u64 = worker
        .split("local_replies ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .expect("local_replies counter");
    assert!(
        replies >= 4,
        "3 echo replies and at least 1 ARP reply, got {replies}: {worker}"
    );
    assert!(
        log_text.contains("arp_not_for_us"),
        "the ARP for 10.99.0.77 is a counted drop: {worker}"
    );
}
