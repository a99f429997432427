//! The sidecar end to end: a Kubernetes API ([`fake_api`]: there is no
//! kube-apiserver here), the sidecar's loop or binary, and a real lbd
//! control server (the control plane's test server: gRPC on a unix
//! socket, the same plane lbd runs).

#[path = "../../tests/common/mod.rs"]
mod common;
mod fake_api;

use std::collections::BTreeMap;
use std::time::Duration;

use fake_api::{FakeApi, Kind};
use lb_control::cli::{ClientTls, ServerAddr};
use lb_control::model::Source;
use lb_k8s_sync::desired::{FrontendKind, Options};
use lb_k8s_sync::sync::{self, Ended, Mode, Settings};
use lb_proto::v1 as pb;
use serde_json::{json, Value};

fn service(name: &str, lb_ip: &str) -> Value {
    json!({
        "metadata": {"namespace": "default", "name": name},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": lb_ip}]}}
    })
}

fn slice(service: &str, endpoints: &[(&str, bool, bool)]) -> Value {
    let eps: Vec<Value> = endpoints
        .iter()
        .map(|(a, ready, terminating)| {
            json!({"addresses": [a], "conditions": {"ready": ready, "terminating": terminating}, "nodeName": "n1"})
        })
        .collect();
    json!({
        "metadata": {"namespace": "default", "name": format!("{service}-1"),
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"port": 8080, "protocol": "TCP"}],
        "endpoints": eps
    })
}

fn settings(server: &common::Server) -> Settings {
    Settings {
        server: ServerAddr::Unix(server.socket.clone()),
        tls: ClientTls::default(),
        timeout: Duration::from_secs(10),
        options: Options::default(),
        node_port_ranges: Vec::new(),
        namespace: None,
        selector: None,
        debounce: Duration::from_millis(20),
        lbd_check: Duration::from_millis(100),
        resync: Duration::from_secs(3600),
        stats: Default::default(),
        events: true,
    }
}

fn kube_client(api: &FakeApi) -> kube::Client {
    let config = kube::Config::new(api.url().parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

/// Runs the sidecar's loop until the sender is used or dropped.
fn follow(
    api: &FakeApi,
    s: Settings,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<anyhow::Result<Ended>>,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let client = kube_client(api);
    let task = tokio::spawn(async move {
        sync::run(client, &s, Mode::Follow, async {
            let _ = stopped.await;
        })
        .await
    });
    (stop, task)
}

/// lbd's `k8s` backends: (service, address, state name).
fn k8s_backends(server: &common::Server) -> Vec<(String, String, &'static str)> {
    server
        .state()
        .backends
        .values()
        .filter(|b| b.source == Source::K8s)
        .map(|b| (b.key.service.clone(), b.key.addr.to_string(), b.state.name()))
        .collect()
}

/// lbd's services by name, with their sources.
fn services(server: &common::Server) -> BTreeMap<String, &'static str> {
    server
        .state()
        .services
        .values()
        .map(|s| (s.name.clone(), s.source.name()))
        .collect()
}

/// Waits (at most 30 s, polling) until `cond` holds.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..600 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting until {what}");
}

fn owned(v: &[(&str, &str, &'static str)]) -> Vec<(String, String, &'static str)> {
    v.iter()
        .map(|(s, a, st)| (s.to_string(), a.to_string(), *st))
        .collect()
}

/// An operator's (source api) service with a frontend on `vip`:80/tcp.
fn operator_service(server: &common::Server, name: &str, vip: &str) {
    let changes = [
        pb::Change {
            change: Some(pb::change::Change::UpsertService(pb::Service {
                name: name.into(),
                ..Default::default()
            })),
        },
        pb::Change {
            change: Some(pb::change::Change::UpsertFrontend(pb::Frontend {
                service: name.into(),
                address: vip.into(),
                port: 80,
                protocol: pb::Protocol::Tcp as i32,
                ..Default::default()
            })),
        },
    ];
    let changes = lb_control::convert::changes_from_proto(&changes, Source::Api).unwrap();
    server
        .plane
        .lock()
        .unwrap()
        .apply(Source::Api, changes, None)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_services_and_endpoints_into_lbd() {
    let server = common::Server::start();
    let api = FakeApi::start().await;
    api.apply(Kind::Service, service("web", "192.0.2.10"));
    api.apply(
        Kind::EndpointSlice,
        slice("web", &[("10.1.0.11", true, false), ("10.1.0.12", true, false)]),
    );
    // A Service whose VIP an operator's service has: its frontend is left
    // out, the rest goes in.
    operator_service(&server, "ops/manual", "192.0.2.20");
    api.apply(Kind::Service, service("clash", "192.0.2.20"));
    let (stop, task) = follow(&api, settings(&server));
    until("the endpoints are lbd's backends", || {
        k8s_backends(&server)
            == owned(&[
                ("default/web", "10.1.0.11", "active"),
                ("default/web", "10.1.0.12", "active"),
            ])
    })
    .await;
    let st = server.state();
    let fe: Vec<(String, String, &str)> = st
        .frontends
        .values()
        .map(|f| (f.service.clone(), f.key.addr.to_string(), f.source.name()))
        .collect();
    assert_eq!(
        fe,
        vec![
            ("default/web".to_string(), "192.0.2.10".to_string(), "k8s"),
            ("ops/manual".to_string(), "192.0.2.20".to_string(), "api"),
        ]
    );
    assert_eq!(services(&server).get("default/clash"), Some(&"k8s"));

    // An endpoint starts terminating, another appears.
    api.apply(
        Kind::EndpointSlice,
        slice(
            "web",
            &[
                ("10.1.0.11", false, true),
                ("10.1.0.12", true, false),
                ("10.1.0.13", false, false),
            ],
        ),
    );
    until("the slice's change is in lbd", || {
        k8s_backends(&server)
            == owned(&[
                ("default/web", "10.1.0.11", "terminating"),
                ("default/web", "10.1.0.12", "active"),
                ("default/web", "10.1.0.13", "quarantined"),
            ])
    })
    .await;
    // An operator's maintenance mark on a k8s backend survives the pushes.
    let mark = lb_control::model::BackendState::Maintenance;
    server
        .plane
        .lock()
        .unwrap()
        .set_backend_state("10.1.0.12".parse().unwrap(), None, None, mark)
        .unwrap();
    api.apply(Kind::Service, service("other", "192.0.2.30"));
    until("a new Service is in lbd", || {
        services(&server).contains_key("default/other")
    })
    .await;
    let b = server.state();
    let kept = b
        .backends
        .values()
        .find(|b| b.key.addr.to_string() == "10.1.0.12")
        .unwrap();
    assert_eq!(kept.operator_state, Some(mark));

    // A Service deleted goes with its frontends and backends.
    api.delete(Kind::Service, "default", "web");
    until("the deleted Service is gone from lbd", || {
        !services(&server).contains_key("default/web") && k8s_backends(&server).is_empty()
    })
    .await;
    assert_eq!(services(&server).get("ops/manual"), Some(&"api"));

    stop.send(()).unwrap();
    match task.await.unwrap().unwrap() {
        Ended::Stopped(Some(p)) => assert!(
            p.sent.skipped.iter().any(|s| s.object.contains("192.0.2.20")),
            "{p:?}"
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_pushed_before_both_kinds_are_listed() {
    let server = common::Server::start();
    let api = FakeApi::start().await;
    api.apply(Kind::Service, service("web", "192.0.2.10"));
    api.apply(Kind::EndpointSlice, slice("web", &[("10.1.0.11", true, false)]));
    // lbd has what an earlier run pushed.
    let mut earlier = settings(&server);
    earlier.debounce = Duration::ZERO;
    let first = sync::run(kube_client(&api), &earlier, Mode::Once, std::future::pending())
        .await
        .unwrap();
    assert!(matches!(first, Ended::Stopped(Some(_))), "{first:?}");
    let revision = server.revision();
    // The slices cannot be listed (a permission missing, say): the Services
    // alone would map to a web without backends, which must not be pushed.
    api.fail_lists(Kind::EndpointSlice, true);
    api.delete(Kind::Service, "default", "web");
    let (stop, task) = follow(&api, settings(&server));
    until("the sidecar tried the slices again", || {
        api.seen(Kind::EndpointSlice).0 >= 3
    })
    .await;
    assert!(api.seen(Kind::Service).0 >= 2, "{:?}", api.seen(Kind::Service));
    assert_eq!(
        server.revision(),
        revision,
        "pushed before the slices were listed"
    );
    api.fail_lists(Kind::EndpointSlice, false);
    until("the deletion is pushed once listed", || {
        !services(&server).contains_key("default/web")
    })
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_lbd_refuses_is_left_out_and_the_rest_pushed() {
    let server = common::Server::start();
    let api = FakeApi::start().await;
    api.apply(Kind::Service, service("web", "192.0.2.10"));
    // 10.0.0.1 is the test node's port address: lbd refuses it as a
    // backend (that endpoint only), which only lbd knows.
    api.apply(
        Kind::EndpointSlice,
        slice("web", &[("10.1.0.11", true, false), ("10.0.0.1", true, false)]),
    );
    // 10.1.0.100 is its SNAT address: lbd refuses it as a VIP.
    api.apply(Kind::Service, service("on-snat", "10.1.0.100"));
    let s = settings(&server);
    let stats = std::sync::Arc::clone(&s.stats);
    let (stop, task) = follow(&api, s);
    until("the rest is in lbd", || {
        k8s_backends(&server) == owned(&[("default/web", "10.1.0.11", "active")])
    })
    .await;
    let st = server.state();
    let fe: Vec<(String, String)> = st
        .frontends
        .values()
        .map(|f| (f.service.clone(), f.key.addr.to_string()))
        .collect();
    assert_eq!(fe, vec![("default/web".to_string(), "192.0.2.10".to_string())]);
    // The service whose only frontend was refused is there, without it.
    assert!(services(&server).contains_key("default/on-snat"));
    let revision = server.revision();
    // A change elsewhere: pushed, the left-outs left out at once.
    api.apply(
        Kind::EndpointSlice,
        slice(
            "web",
            &[
                ("10.1.0.11", true, false),
                ("10.1.0.12", true, false),
                ("10.0.0.1", true, false),
            ],
        ),
    );
    until("the new endpoint is in lbd", || k8s_backends(&server).len() == 2).await;
    assert_eq!(server.revision(), revision + 1);
    // lbd has the state before the sidecar has its answer: a stop before
    // then would end the push, and return the first one.
    until("the sidecar has lbd's answer", || {
        stats.pushes.load(std::sync::atomic::Ordering::Relaxed) >= 2
    })
    .await;
    stop.send(()).unwrap();
    let Ended::Stopped(Some(p)) = task.await.unwrap().unwrap() else {
        panic!("no push")
    };
    // The left-outs were left out before sending: lbd refused nothing.
    assert_eq!(p.rounds, 1);
    let text: Vec<String> = p.sent.skipped.iter().map(|s| s.to_string()).collect();
    assert_eq!(p.left_out.len(), 2, "{text:#?}");
    let has = |object: &str, why: &str| {
        assert!(
            text.iter().any(|t| t.starts_with(object) && t.contains(why)),
            "no skip of {object:?} for {why:?} in {text:#?}"
        )
    };
    has(
        "lbd service default/web backend 10.0.0.1:8080: lbd refused it: ",
        "10.0.0.1",
    );
    has(
        "lbd service default/on-snat frontend 10.1.0.100:80: lbd refused it: ",
        "SNAT",
    );
    // The reason has no request index, which would move with other changes.
    assert!(
        text.iter()
            .all(|t| !t.contains("frontends[") && !t.contains("backends[")),
        "{text:#?}"
    );
    assert_eq!(p.response.revision, server.revision());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_fails_when_lbd_is_not_there() {
    let api = FakeApi::start().await;
    api.apply(Kind::Service, service("web", "192.0.2.10"));
    api.apply(Kind::EndpointSlice, slice("web", &[("10.1.0.11", true, false)]));
    let dir = tempfile::tempdir().unwrap();
    let s = Settings {
        server: ServerAddr::Unix(dir.path().join("absent.sock")),
        ..settings(&common::Server::start())
    };
    let e = sync::run(kube_client(&api), &s, Mode::Once, std::future::pending())
        .await
        .unwrap_err();
    let text = lb_control::cli::error_line(&*e);
    assert!(
        text.contains("cannot connect to lbd") && text.contains("absent.sock"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_prints_what_it_would_push() {
    let api = FakeApi::start().await;
    api.apply(Kind::Service, service("web", "192.0.2.10"));
    api.apply(Kind::EndpointSlice, slice("web", &[("10.1.0.11", true, false)]));
    let mut sctp = service("sctp", "192.0.2.11");
    sctp["spec"]["ports"] = json!([{"port": 9, "protocol": "SCTP"}]);
    api.apply(Kind::Service, sctp);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             users:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: fake\n    user: u\n\
             current-context: c\n",
            api.url()
        ),
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_lb-k8s-sync");
    let kc = kubeconfig.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin)
            .args(["--dry-run", "--kubeconfig"])
            .arg(&kc)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("default/web"), "{stdout}");
    assert!(stdout.contains("192.0.2.10"), "{stdout}");
    assert!(stdout.contains("10.1.0.11"), "{stdout}");
    assert!(
        stdout.contains("skipped Service default/sctp port 9: protocol SCTP"),
        "{stdout}"
    );
    // A bad flag is one line and exit 2; a kubeconfig that is not there, 1.
    let out = std::process::Command::new(bin)
        .args(["--frontends", "nodeport"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("\"nodeport\" is not a frontend type"), "{err}");
    let out = std::process::Command::new(bin)
        .args(["--node-port-addresses", "10.0.0.0/24,10.1.0.0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--node-port-addresses") && err.contains("10.1.0.0"),
        "{err}"
    );
    // The ranges without node ports would do nothing: said, not ignored.
    let out = std::process::Command::new(bin)
        .args(["--node-port-addresses", "10.0.0.0/24"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim_end(),
        "lb-k8s-sync: --node-port-addresses needs node-port in --frontends (see lb-k8s-sync --help)"
    );
    let out = std::process::Command::new(bin)
        .args(["--dry-run", "--kubeconfig"])
        .arg(dir.path().join("absent"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("lb-k8s-sync: --kubeconfig "), "{err}");
    // An API that cannot list a kind ends a dry run (and --once) with the
    // reason, instead of waiting for it.
    api.fail_lists(Kind::EndpointSlice, true);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin)
            .args(["--dry-run", "--kubeconfig"])
            .arg(&kubeconfig)
            .env("LB_K8S_SYNC_LOG", "off")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("lb-k8s-sync: cannot list and watch EndpointSlices: ")
            && err.contains("failing on purpose"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_that_keeps_changing_is_still_pushed() {
    let server = common::Server::start();
    let api = FakeApi::start().await;
    api.apply(Kind::Service, service("web", "192.0.2.10"));
    let mut s = settings(&server);
    s.debounce = Duration::from_millis(1500);
    let (stop, task) = follow(&api, s);
    // A change every 100 ms, more often than the debounce time, for at
    // most 30 s: the watches are never quiet for 1.5 s.
    let mut pushed = false;
    for i in 0..300 {
        let flapping = ("10.1.0.12", i % 2 == 0, false);
        api.apply(
            Kind::EndpointSlice,
            slice("web", &[("10.1.0.11", true, false), flapping]),
        );
        if k8s_backends(&server).len() == 2 {
            pushed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(pushed, "nothing pushed while the slices kept changing");
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// `GET path` on `addr`: (status code, body).
async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    c.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).await.unwrap();
    let code = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_health_say_what_the_loop_did() {
    let server = common::Server::start();
    let api = FakeApi::start().await;
    api.apply(Kind::Service, service("web", "192.0.2.10"));
    api.apply(Kind::EndpointSlice, slice("web", &[("10.1.0.11", true, false)]));
    // The slices cannot be listed yet.
    api.fail_lists(Kind::EndpointSlice, true);
    let s = settings(&server);
    let stats = std::sync::Arc::clone(&s.stats);
    let listener = lb_control::metrics::MetricsListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.addr();
    tokio::spawn(listener.serve_exporter(lb_k8s_sync::metrics::Endpoint(stats), std::future::pending()));
    let (stop, task) = follow(&api, s);
    until("a slice list failed", || api.seen(Kind::EndpointSlice).0 >= 1).await;
    let (code, body) = http_get(addr, "/healthz").await;
    assert_eq!(
        (code, body.as_str()),
        (503, "unhealthy: Services and EndpointSlices not listed yet\n")
    );
    api.fail_lists(Kind::EndpointSlice, false);
    until("pushed", || !k8s_backends(&server).is_empty()).await;
    let mut healthy = false;
    for _ in 0..600 {
        if http_get(addr, "/healthz").await == (200, "ok\n".to_string()) {
            healthy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(healthy, "{:?}", http_get(addr, "/healthz").await);
    let (code, body) = http_get(addr, "/metrics").await;
    assert_eq!(code, 200);
    let value = |line: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix(line)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {line} in {body}"))
            .to_string()
    };
    assert_eq!(value("lb_k8s_sync_pushes_total"), "1");
    assert_eq!(value("lb_k8s_sync_listed"), "1");
    assert_eq!(value("lb_k8s_sync_objects{kind=\"backends\"}"), "1");
    assert_eq!(
        value("lb_k8s_sync_last_push_revision"),
        server.revision().to_string()
    );
    assert_ne!(
        value("lb_k8s_sync_watch_errors_total{kind=\"endpointslices\"}"),
        "0"
    );
    assert_eq!(value("lb_k8s_sync_resync_calls_total"), "1");
    assert_eq!(
        value("lb_k8s_sync_push_failures_total{reason=\"unavailable\"}"),
        "0"
    );
    // lbd goes away: the next push fails, and the endpoint says so.
    drop(server);
    api.apply(Kind::EndpointSlice, slice("web", &[("10.1.0.12", true, false)]));
    let mut failed = (0, String::new());
    for _ in 0..600 {
        failed = http_get(addr, "/healthz").await;
        if failed.0 == 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(failed.0, 503, "{failed:?}");
    assert!(
        failed
            .1
            .starts_with("unhealthy: the last push failed: lbd did not answer: "),
        "{failed:?}"
    );
    let (_, body) = http_get(addr, "/metrics").await;
    let unavailable = body
        .lines()
        .find_map(|l| l.strip_prefix("lb_k8s_sync_push_failures_total{reason=\"unavailable\"} "))
        .unwrap();
    assert_ne!(unavailable, "0", "{body}");
    let (code, body) = http_get(addr, "/nothing").await;
    assert_eq!(
        (code, body.as_str()),
        (
            404,
            "not found: lb-k8s-sync serves GET /metrics and GET /healthz\n"
        )
    );
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_ports_go_on_the_addresses_lbd_reports() {
    let server = common::Server::start();
    let api = FakeApi::start().await;
    let mut np = service("np", "192.0.2.10");
    np["spec"]["type"] = json!("NodePort");
    np["spec"]["ports"][0]["nodePort"] = json!(30080);
    np["status"] = json!({});
    api.apply(Kind::Service, np);
    api.apply(Kind::EndpointSlice, slice("np", &[("10.1.0.11", true, false)]));
    let mut s = settings(&server);
    s.options.types = [FrontendKind::NodePort].into();
    // The test server's ports have 10.0.0.1/24 and 10.1.0.1/24.
    let d = match sync::run(kube_client(&api), &s, Mode::DryRun, std::future::pending())
        .await
        .unwrap()
    {
        Ended::Mapped(d) => d,
        other => panic!("{other:?}"),
    };
    let fe: Vec<(&str, u32, i32)> = d
        .frontends
        .iter()
        .map(|f| (f.address.as_str(), f.port, f.r#type))
        .collect();
    let np_type = pb::FrontendType::NodePort as i32;
    assert_eq!(fe, [("10.0.0.1", 30080, np_type), ("10.1.0.1", 30080, np_type)]);
    // Only those in --node-port-addresses; into lbd.
    s.node_port_ranges = vec!["10.1.0.0/24".parse().unwrap()];
    let (stop, task) = follow(&api, s.clone());
    until("the node port is in lbd", || {
        k8s_backends(&server) == owned(&[("default/np", "10.1.0.11", "active")])
    })
    .await;
    let fe: Vec<(String, u16, lb_control::model::FrontendType)> = server
        .state()
        .frontends
        .values()
        .map(|f| (f.key.addr.to_string(), f.key.port, f.kind))
        .collect();
    assert_eq!(
        fe,
        [(
            "10.1.0.1".to_string(),
            30080,
            lb_control::model::FrontendType::NodePort
        )]
    );
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    // Without lbd to ask, a dry run with node ports fails, and says why.
    let dir = tempfile::tempdir().unwrap();
    s.server = ServerAddr::Unix(dir.path().join("absent.sock"));
    s.stats = Default::default();
    let e = sync::run(kube_client(&api), &s, Mode::DryRun, std::future::pending())
        .await
        .unwrap_err();
    let text = lb_control::cli::error_line(&*e);
    assert!(text.contains("absent.sock"), "{text}");
    // Counted as a failed push, as any other lbd that does not answer.
    let m = s.stats.render();
    assert!(
        m.contains("lb_k8s_sync_push_failures_total{reason=\"unavailable\"} 1\n"),
        "{m}"
    );
}

/// (regarding kind/namespace/name/uid, reason, note) of each Event.
fn events(api: &FakeApi) -> Vec<(String, String, String)> {
    api.events()
        .iter()
        .map(|e| {
            let r = &e["regarding"];
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                format!(
                    "{} {}/{} {}",
                    s(&r["kind"]),
                    s(&r["namespace"]),
                    s(&r["name"]),
                    s(&r["uid"])
                ),
                s(&e["reason"]),
                s(&e["note"]),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skips_become_events_on_their_services() {
    let server = common::Server::start();
    let api = FakeApi::start().await;
    api.apply(Kind::Service, service("web", "192.0.2.10"));
    api.apply(Kind::EndpointSlice, slice("web", &[("10.1.0.11", true, false)]));
    // Skipped by the mapping: an SCTP port.
    let mut sctp = service("sctp", "192.0.2.11");
    sctp["metadata"]["uid"] = json!("uid-sctp");
    sctp["spec"]["ports"] = json!([{"port": 9, "protocol": "SCTP"}]);
    api.apply(Kind::Service, sctp);
    // Left out when lbd refuses it: a VIP on lbd's SNAT address.
    let mut on_snat = service("on-snat", "10.1.0.100");
    on_snat["metadata"]["uid"] = json!("uid-on-snat");
    api.apply(Kind::Service, on_snat);
    let s = settings(&server);
    let stats = std::sync::Arc::clone(&s.stats);
    let (stop, task) = follow(&api, s);
    until("both Events are there", || events(&api).len() >= 2).await;
    let ev = events(&api);
    assert_eq!(ev.len(), 2, "{ev:#?}");
    let find = |object: &str| {
        ev.iter()
            .find(|(o, _, _)| o == object)
            .unwrap_or_else(|| panic!("no Event on {object} in {ev:#?}"))
            .clone()
    };
    let (_, reason, note) = find("Service default/sctp uid-sctp");
    assert_eq!(reason, "NotBalancedByLbd");
    assert!(note.contains("protocol SCTP"), "{note}");
    let (_, _, note) = find("Service default/on-snat uid-on-snat");
    assert!(
        note.starts_with("lbd service default/on-snat frontend 10.1.0.100:80: lbd refused it")
            && note.contains("SNAT"),
        "{note}"
    );
    assert!(
        api.events()
            .iter()
            .all(|e| e["type"] == "Warning" && e["reportingController"] == "lbd.io/lb-k8s-sync"),
        "{:#?}",
        api.events()
    );
    // A change elsewhere: the same skips, no new Events.
    api.apply(
        Kind::EndpointSlice,
        slice("web", &[("10.1.0.11", true, false), ("10.1.0.12", true, false)]),
    );
    until("the new endpoint is in lbd", || k8s_backends(&server).len() == 2).await;
    assert_eq!(events(&api).len(), 2);
    // An API that refuses Events: counted, and the pushes go on.
    api.refuse_events(true);
    let mut bad = service("bad-mode", "192.0.2.12");
    bad["metadata"]["annotations"] = json!({"lbd.io/forwarding-mode": "tunnel"});
    api.apply(Kind::Service, bad);
    api.apply(Kind::Service, service("other", "192.0.2.13"));
    until("the next Service is in lbd", || {
        services(&server).contains_key("default/other")
    })
    .await;
    // (lbd takes the push before the Events are made.)
    until("the refused Event is counted", || {
        stats
            .render()
            .contains("lb_k8s_sync_events_total{result=\"failed\"} 1\n")
    })
    .await;
    let m = stats.render();
    assert!(m.contains("lb_k8s_sync_events_total{result=\"sent\"} 2\n"), "{m}");
    assert!(
        m.contains("lb_k8s_sync_events_total{result=\"failed\"} 1\n"),
        "{m}"
    );
    assert_eq!(events(&api).len(), 2);
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_past_the_cap_wait_for_the_next_push() {
    let server = common::Server::start();
    let api = FakeApi::start().await;
    api.apply(Kind::Service, service("web", "192.0.2.10"));
    api.apply(Kind::EndpointSlice, slice("web", &[("10.1.0.11", true, false)]));
    let n = lb_k8s_sync::events::MAX_PER_PUSH + 1;
    for i in 0..n {
        let mut sctp = service(&format!("sctp-{i:02}"), "192.0.2.11");
        sctp["metadata"]["uid"] = json!(format!("uid-{i}"));
        sctp["spec"]["ports"] = json!([{"port": 9, "protocol": "SCTP"}]);
        api.apply(Kind::Service, sctp);
    }
    let (stop, task) = follow(&api, settings(&server));
    until("the first push's Events are there", || {
        events(&api).len() == n - 1
    })
    .await;
    // The next push (any change) makes the one left.
    api.apply(
        Kind::EndpointSlice,
        slice("web", &[("10.1.0.11", true, false), ("10.1.0.12", true, false)]),
    );
    until("the last Event is there", || events(&api).len() == n).await;
    let mut names: Vec<String> = events(&api).into_iter().map(|(o, _, _)| o).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n, "one Event each: {names:#?}");
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_left_out_is_tried_again_when_what_refused_it_changed() {
    use std::sync::atomic::Ordering::Relaxed;
    let server = common::Server::start();
    let api = FakeApi::start().await;
    api.apply(Kind::Service, service("web", "192.0.2.10"));
    api.apply(Kind::EndpointSlice, slice("web", &[("10.1.0.11", true, false)]));
    // An operator's VIP that a k8s Service wants too: left out.
    operator_service(&server, "ops/manual", "192.0.2.20");
    api.apply(Kind::Service, service("clash", "192.0.2.20"));
    let mut s = settings(&server);
    s.resync = Duration::from_millis(100);
    let stats = std::sync::Arc::clone(&s.stats);
    let (stop, task) = follow(&api, s);
    until("both Services are in lbd", || {
        let sv = services(&server);
        sv.contains_key("default/web") && sv.contains_key("default/clash")
    })
    .await;
    // Periodic pushes while nothing changes: one Resync each, the
    // left-out left out before sending (it would be refused, then the
    // push narrowed: two each). (A push in flight may have made its call
    // and not yet counted itself: slack of 2.)
    let count = || (stats.resync_calls.load(Relaxed), stats.pushes.load(Relaxed));
    let (c0, p0) = count();
    until("ten periodic pushes", || count().1 >= p0 + 10).await;
    let (c1, p1) = count();
    assert!(
        c1 - c0 <= p1 - p0 + 2,
        "{} Resync calls for {} pushes",
        c1 - c0,
        p1 - p0
    );
    let fe = |server: &common::Server| -> Vec<(String, String)> {
        server
            .state()
            .frontends
            .values()
            .map(|f| (f.service.clone(), f.key.addr.to_string()))
            .collect()
    };
    assert!(!fe(&server).contains(&("default/clash".into(), "192.0.2.20".into())));
    // The operator lets the VIP go: the next periodic push tries the
    // left-out again, and lbd takes it.
    let delete = [pb::Change {
        change: Some(pb::change::Change::DeleteService("ops/manual".into())),
    }];
    let delete = lb_control::convert::changes_from_proto(&delete, Source::Api).unwrap();
    server
        .plane
        .lock()
        .unwrap()
        .apply(Source::Api, delete, None)
        .unwrap();
    until("the Service has the VIP", || {
        fe(&server).contains(&("default/clash".into(), "192.0.2.20".into()))
    })
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frontend_refused_for_its_service_comes_back_when_the_service_changes() {
    let server = common::Server::start();
    let api = FakeApi::start().await;
    // Dual-stack, full-NAT: the test node has no IPv6 SNAT address, so
    // lbd refuses the IPv6 frontend (that one only).
    let mut dual = service("dual", "192.0.2.40");
    dual["status"]["loadBalancer"]["ingress"] = json!([{"ip": "192.0.2.40"}, {"ip": "2001:db8::40"}]);
    api.apply(Kind::Service, dual.clone());
    api.apply(Kind::EndpointSlice, slice("dual", &[("10.1.0.11", true, false)]));
    let (stop, task) = follow(&api, settings(&server));
    let addrs = |server: &common::Server| -> Vec<String> {
        server
            .state()
            .frontends
            .values()
            .map(|f| f.key.addr.to_string())
            .collect()
    };
    until("the IPv4 frontend is in lbd", || addrs(&server) == ["192.0.2.40"]).await;
    // DNAT needs no SNAT address: the next push (not only a periodic one
    // that finds lbd changed) sends the frontend again, and lbd takes it.
    dual["metadata"]["annotations"] = json!({"lbd.io/forwarding-mode": "dnat"});
    api.apply(Kind::Service, dual);
    until("the IPv6 frontend is in lbd", || {
        addrs(&server) == ["192.0.2.40", "2001:db8::40"]
    })
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_lbd_that_restarted_empty_is_pushed_again_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("lbd.sock");
    let at = |s: &std::path::Path| {
        let s = s.to_path_buf();
        move |_: &std::path::Path| {
            Some(lb_control::listen::ListenConfig {
                addr: lb_control::listen::ListenAddr::Unix(s),
                tls: None,
            })
        }
    };
    let mut first = common::Server::start_with(at(&socket));
    let api = FakeApi::start().await;
    api.apply(Kind::Service, service("web", "192.0.2.10"));
    api.apply(Kind::EndpointSlice, slice("web", &[("10.1.0.11", true, false)]));
    // The periodic push an hour away: only the check can find the restart.
    let s = Settings {
        server: ServerAddr::Unix(socket.clone()),
        ..settings(&first)
    };
    let (stop, task) = follow(&api, s);
    until("the first lbd has the Service", || {
        k8s_backends(&first) == owned(&[("default/web", "10.1.0.11", "active")])
    })
    .await;
    // lbd restarts on the same socket with an empty state (a new state
    // file, as one without any): a new instance, nothing in it.
    first.stop().unwrap();
    let second = tokio::task::spawn_blocking(move || common::Server::start_with(at(&socket)))
        .await
        .unwrap();
    assert_ne!(second.instance_id, first.instance_id);
    until("the second lbd has the Service", || {
        k8s_backends(&second) == owned(&[("default/web", "10.1.0.11", "active")])
    })
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}
