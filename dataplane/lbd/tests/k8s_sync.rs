//! lbd driven by its Kubernetes sync sidecar, end to end: a Kubernetes API
//! (the sidecar's tests' one: there is no kube-apiserver here) holds a
//! LoadBalancer Service on the lab's VIP and its EndpointSlice; the
//! `lb-k8s-sync` binary pushes them into an lbd that started without
//! services; real clients reach real backends through the lab (see
//! scripts/lab.sh), on the VIP and on the Service's node port on lbd's
//! client-side address, and an endpoint that starts terminating takes no
//! new connections.
mod common;
#[path = "../../../control/k8s-sync/tests/fake_api/mod.rs"]
mod fake_api;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::lab::{k8s_sync_bin, spread, Lab};
use fake_api::{FakeApi, Kind};
use serde_json::json;

/// The sidecar, killed if the test does not stop it.
struct Sidecar(Option<Child>);

impl Drop for Sidecar {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn slice(lab: &Lab, terminating: &[usize]) -> serde_json::Value {
    let endpoints: Vec<_> = (1..=3)
        .map(|i| {
            let t = terminating.contains(&i);
            json!({"addresses": [lab.backend_addr(i)],
                   "conditions": {"ready": !t, "serving": !t, "terminating": t},
                   "nodeName": format!("node-{i}")})
        })
        .collect();
    json!({
        "metadata": {"namespace": "default", "name": "web-x1",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints
    })
}

/// Polls `lbctl get backends` (bounded) until `want` is in its output.
fn until_backends_show(lab: &Lab, want: &str) {
    let t0 = Instant::now();
    let mut last = String::new();
    while t0.elapsed() < Duration::from_secs(30) {
        last = lab.lbctl_ok(&["get", "backends", "--service", "default/web"]);
        if last.contains(want) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no {want:?} in {last}");
}

#[test]
fn the_sidecar_drives_real_connections() {
    assert!(
        common::can_netns(),
        "these tests need root and iproute2 (run scripts/setup.sh as root)"
    );
    let sidecar_bin = k8s_sync_bin();
    let lab = Lab::new("eks", 73);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api = rt.block_on(FakeApi::start());
    api.apply(
        Kind::Service,
        json!({
            "metadata": {"namespace": "default", "name": "web"},
            "spec": {"type": "LoadBalancer",
                     "ports": [{"port": 80, "targetPort": 8080, "nodePort": 30080, "protocol": "TCP"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": lab.vip()}]}}
        }),
    );
    api.apply(Kind::EndpointSlice, slice(&lab, &[]));
    let kubeconfig = lab.file(
        "kubeconfig",
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n    server: {}\n\
             users:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: lab\n    user: u\n\
             current-context: c\n",
            api.url()
        ),
    );
    // lbd with its ports and SNAT address, no services.
    let cfg = lab.file("lbd.toml", &lab.interfaces_toml());
    let mut lbd = lab.start_lbd("0", 1, &["--config", &cfg]);
    let log = std::fs::File::create(lab.dir.join("lb-k8s-sync.log")).unwrap();
    let mut sidecar = Sidecar(Some(
        Command::new(&sidecar_bin)
            .args([
                "--server",
                &lab.socket(),
                "--kubeconfig",
                &kubeconfig,
                "--debounce-ms",
                "50",
                "--frontends",
                "load-balancer,node-port",
                // lbd's client-side address only.
                "--node-port-addresses",
                &format!("10.{}.1.0/24", lab.net),
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    ));
    let sidecar_log = || std::fs::read_to_string(lab.dir.join("lb-k8s-sync.log")).unwrap_or_default();
    lab.wait_for_service(Duration::from_secs(30));
    // Every endpoint is a backend (how evenly Maglev spreads is the
    // other tests' business: 30 requests are too few to judge it).
    let m = spread(&lab.requests(30));
    assert_eq!(m.len(), 3, "{m:?}\n{}", sidecar_log());
    let services = lab.lbctl_ok(&["get", "services", "--source", "k8s"]);
    assert!(services.contains("default/web"), "{services}");
    // The node port, on the address lbd reports for its client side
    // (`lbctl info`), not on the other.
    let info = lab.lbctl_ok(&["info"]);
    let lbd_addr = format!("10.{}.1.1", lab.net);
    assert!(info.contains(&format!("{lbd_addr}/24")), "{info}");
    let frontends = lab.lbctl_ok(&["get", "frontends"]);
    assert!(
        frontends.contains(&format!("{lbd_addr}:30080")) && frontends.contains("node-port"),
        "{frontends}\n{}",
        sidecar_log()
    );
    assert!(
        !frontends.contains(&format!("10.{}.2.1:30080", lab.net)),
        "{frontends}"
    );
    let (answers, raw) = lab.requests_to(&format!("http://{lbd_addr}:30080/whoami"), 30);
    assert!(!raw.contains("FAIL"), "{raw}\n{}", sidecar_log());
    assert_eq!(spread(&answers).len(), 3, "{raw}");

    // backend-1's pod is being deleted: no new connections to it.
    api.apply(Kind::EndpointSlice, slice(&lab, &[1]));
    until_backends_show(&lab, "terminating");
    let m = spread(&lab.requests(20));
    assert_eq!(
        m.keys().map(String::as_str).collect::<Vec<_>>(),
        ["backend-2", "backend-3"],
        "{m:?}\n{}",
        sidecar_log()
    );

    // The sidecar stops (SIGTERM, exit 0); lbd keeps what it was given.
    let mut child = sidecar.0.take().unwrap();
    common::sh(&format!("kill -15 {}", child.id()));
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the sidecar did not stop: {}",
            sidecar_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{}", sidecar_log());
    assert!(sidecar_log().contains("pushed to lbd"), "{}", sidecar_log());
    let m = spread(&lab.requests(20));
    assert_eq!(
        m.keys().map(String::as_str).collect::<Vec<_>>(),
        ["backend-2", "backend-3"],
        "{m:?}"
    );
    let (code, _) = lbd.signal_and_wait(15, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", lbd.log_text());
    drop(rt);
}
