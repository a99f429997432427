//! The Prometheus endpoint over real HTTP, beside the gRPC server it
//! reports for (the common test server runs both, as lbd does).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::Server;
use lb_dataplane::counters::WorkerCounters;
use lb_dataplane::drop::DropReason;
use lb_proto::v1 as pb;
use lb_proto::v1::change::Change as C;
use lb_proto::v1::load_balancer_client::LoadBalancerClient;
use tonic::transport::Endpoint;

/// The status code, the headers (lower-cased names) and the body of one
/// request, the connection closed by the server.
fn http(addr: SocketAddr, request: &str) -> (u16, Vec<(String, String)>, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.to_ascii_lowercase(), v.trim().to_string())
        })
        .collect();
    (status, headers, body.to_string())
}

fn get(addr: SocketAddr, path: &str) -> (u16, Vec<(String, String)>, String) {
    http(addr, &format!("GET {path} HTTP/1.1\r\nHost: lbd\r\n\r\n"))
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The value of the sample line that starts with `series` (name and
/// labels as rendered).
fn value(body: &str, series: &str) -> u64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{body}"))
        .parse()
        .unwrap()
}

#[test]
fn metrics_report_what_get_stats_reports() {
    let mut s = Server::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut client = rt.block_on(async {
        let ch = Endpoint::from_shared(format!("unix:{}", s.socket.display()))
            .unwrap()
            .connect()
            .await
            .unwrap();
        LoadBalancerClient::new(ch)
    });
    let up = |c| pb::Change { change: Some(c) };
    let changes = vec![
        up(C::UpsertService(pb::Service {
            name: "default/web".into(),
            ..Default::default()
        })),
        up(C::UpsertFrontend(pb::Frontend {
            service: "default/web".into(),
            address: "10.0.0.100".into(),
            port: 80,
            protocol: pb::Protocol::Tcp.into(),
            ..Default::default()
        })),
        up(C::UpsertBackend(pb::Backend {
            service: "default/web".into(),
            address: "10.1.0.11".into(),
            port: 8080,
            ..Default::default()
        })),
    ];
    rt.block_on(client.apply(pb::ApplyRequest {
        changes,
        ..Default::default()
    }))
    .unwrap();
    // One worker, as lbd registers them, that has received and dropped.
    let w = Arc::new(WorkerCounters::new(4, 4));
    s.plane.lock().unwrap().register_workers(vec![Arc::clone(&w)]);
    w.rx_packets.add(5);
    w.count_drop(DropReason::NoFrontend);
    w.count_drop(DropReason::NoFrontend);
    s.control.arp_requests.store(4, Ordering::Relaxed);
    s.ports[1].set_counters(lb_control::grpc::PortCounters {
        rx_packets: 10,
        imissed: 3,
        ..Default::default()
    });
    s.ports[0].set_link(false, 0);

    let (status, headers, body) = get(s.metrics, "/metrics");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert_eq!(header(&headers, "connection"), Some("close"));
    let stats = rt
        .block_on(client.get_stats(pb::GetStatsRequest {}))
        .unwrap()
        .into_inner();
    assert_eq!(value(&body, "lbd_revision"), 1);
    assert_eq!(value(&body, "lbd_published_revision"), 1);
    assert_eq!(value(&body, "lbd_workers"), 2);
    assert_eq!(
        value(&body, "lbd_worker_rx_packets_total{worker=\"0\"}"),
        stats.workers[0].rx_packets
    );
    assert_eq!(value(&body, "lbd_worker_rx_packets_total{worker=\"0\"}"), 5);
    assert_eq!(
        value(&body, "lbd_drops_total{worker=\"0\",reason=\"no_frontend\"}"),
        stats.drops["no_frontend"]
    );
    assert_eq!(
        value(&body, "lbd_drops_total{worker=\"0\",reason=\"no_frontend\"}"),
        2
    );
    assert_eq!(
        value(&body, "lbd_drops_total{worker=\"0\",reason=\"bad_checksum\"}"),
        0
    );
    assert_eq!(
        value(
            &body,
            "lbd_frontend_packets_total{service=\"default/web\",address=\"10.0.0.100\",port=\"80\",protocol=\"tcp\"}"
        ),
        0
    );
    assert_eq!(
        value(
            &body,
            "lbd_backend_connections_total{service=\"default/web\",address=\"10.1.0.11\",port=\"8080\"}"
        ),
        0
    );
    assert_eq!(
        value(
            &body,
            "lbd_port_rx_packets_total{port_id=\"1\",name=\"net_null1\"}"
        ),
        10
    );
    assert_eq!(
        value(&body, "lbd_port_imissed_total{port_id=\"1\",name=\"net_null1\"}"),
        3
    );
    assert_eq!(
        value(&body, "lbd_port_link_up{port_id=\"0\",name=\"net_null0\"}"),
        0
    );
    assert_eq!(
        value(&body, "lbd_port_link_up{port_id=\"1\",name=\"net_null1\"}"),
        1
    );
    assert_eq!(value(&body, "lbd_control_arp_requests_total"), 4);
    assert_eq!(value(&body, "lbd_affinity_table_size"), 1024);
    let info = format!(
        "lbd_info{{version=\"{}\",instance_id=\"{}\"}}",
        env!("CARGO_PKG_VERSION"),
        s.instance_id
    );
    assert_eq!(value(&body, &info), 1);

    // Counters move between scrapes.
    w.rx_packets.add(2);
    assert_eq!(
        value(
            &get(s.metrics, "/metrics").2,
            "lbd_worker_rx_packets_total{worker=\"0\"}"
        ),
        7
    );

    // Anything else is refused, naming what is served.
    let (status, _, body) = get(s.metrics, "/");
    assert_eq!(status, 404);
    assert_eq!(body, "not found: lbd serves GET /metrics and GET /healthz\n");
    // Health: port 0's link is down, so lbd cannot forward.
    let (status, _, body) = get(s.metrics, "/healthz");
    assert_eq!(
        (status, body.as_str()),
        (503, "unhealthy: port 0 (net_null0) link down\n")
    );
    s.ports[0].set_link(true, 10_000);
    let (status, _, body) = get(s.metrics, "/healthz");
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    s.ports[0].set_link(false, 0);
    s.ports[1].set_link(false, 0);
    let (status, _, body) = get(s.metrics, "/healthz");
    assert_eq!(
        (status, body.as_str()),
        (
            503,
            "unhealthy: port 0 (net_null0) link down, port 1 (net_null1) link down\n"
        )
    );
    let (status, headers, body) = http(
        s.metrics,
        "POST /metrics HTTP/1.1\r\nHost: lbd\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(status, 405);
    assert_eq!(header(&headers, "allow"), Some("GET, HEAD"));
    assert_eq!(body, "POST not allowed: GET /metrics\n");
    // HEAD: the headers alone.
    let (status, headers, body) = http(s.metrics, "HEAD /metrics HTTP/1.1\r\nHost: lbd\r\n\r\n");
    assert_eq!(status, 200);
    assert!(header(&headers, "content-length").is_some_and(|n| n.parse::<usize>().unwrap() > 1000));
    assert_eq!(body, "");
    // Garbage gets a 400 and the connection closed, not a hang.
    let (status, _, _) = http(s.metrics, "NOT HTTP AT ALL\r\n\r\n");
    assert_eq!(status, 400);
    // A client that connects and says nothing is cut off after the header
    // timeout, before the connection's (so the header timer runs), not
    // left holding a connection slot.
    let t0 = std::time::Instant::now();
    let mut idle = TcpStream::connect(s.metrics).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut rest = Vec::new();
    let _ = idle.read_to_end(&mut rest);
    let waited = t0.elapsed();
    assert!(
        waited >= lb_control::metrics::HEADER_TIMEOUT && waited < lb_control::metrics::CONNECTION_TIMEOUT,
        "closed after {waited:?}"
    );

    // Stopped with the gRPC server: the port is closed.
    drop(client);
    drop(rt);
    let addr = s.metrics;
    s.stop().unwrap();
    assert!(TcpStream::connect(addr).is_err(), "still listening after stop");
}

#[test]
fn an_address_in_use_is_an_error_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let e = lb_control::metrics::MetricsListener::bind(addr).unwrap_err();
    assert!(
        e.to_string().starts_with(&format!("cannot listen on {addr}: ")),
        "{e}"
    );
}
