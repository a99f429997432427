//! The Prometheus metrics endpoint: `lbd --metrics IP:PORT` serves
//! `GET /metrics` in the text exposition format (version 0.0.4), with the
//! counters GetStats and GetInfo report ([`crate::report`]), read afresh
//! for each scrape; and `GET /healthz`, 200 `ok` when lbd can forward and
//! 503 with the reason when it cannot (a port's link down), for the
//! health check of the routing daemon that announces the VIPs.
//!
//! Names follow Prometheus' conventions: `lbd_` first, `_total` on
//! counters, labels for what the gRPC answer lists (`worker`, `reason`,
//! `service`, `address`, `port`, `protocol`, `name`). Every drop reason
//! is reported for every worker, zero or not, so that a rate over a reason
//! that has never happened is 0 and not missing.
//!
//! HTTP/1.1 only, one request per connection (`Connection: close`), at
//! most [`MAX_CONNECTIONS`] at once (the next wait in the kernel's accept
//! queue), [`HEADER_TIMEOUT`] to send the request and
//! [`CONNECTION_TIMEOUT`] in all, so idle connections cannot hold the
//! endpoint. One scrape is read and rendered at a time, off the runtime
//! (the control thread's, which also resolves neighbors): scrapes that
//! arrive while one is being rendered get its text, read moments before
//! they came, so many scrapers cost one render. There is no TLS and no
//! authentication: the counters name services and backends, so bind a
//! management address.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use lb_dataplane::drop::DropReason;
use lb_proto::v1 as pb;

use crate::grpc::{ServerInfo, SharedPlane};
use crate::report;

/// The content type of `/metrics`.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send its request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection may take, request and answer.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the metrics endpoint could not listen.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
}

/// A bound metrics socket, not yet serving: lbd binds it before EAL starts,
/// so an address in use is an error before anything is touched.
#[derive(Debug)]
pub struct MetricsListener {
    listener: std::net::TcpListener,
    addr: SocketAddr,
}

impl MetricsListener {
    /// Binds `addr` (port 0: any free port, see [`MetricsListener::addr`]).
    pub fn bind(addr: SocketAddr) -> Result<MetricsListener, MetricsError> {
        let bind_err = |source| MetricsError::Bind { addr, source };
        let listener = std::net::TcpListener::bind(addr).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        Ok(MetricsListener { listener, addr })
    }

    /// Where it listens (a port 0 resolved to the real port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `/metrics` from `plane` and `info` until `shutdown` completes.
    /// Runs inside a tokio runtime with time enabled. Errors accepting a
    /// connection (too many open files, ...) are logged and retried: they
    /// never stop the endpoint.
    pub async fn serve(
        self,
        plane: SharedPlane,
        info: ServerInfo,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), MetricsError> {
        let renders = Renders {
            plane,
            info,
            last: tokio::sync::Mutex::new(None),
        };
        self.serve_exporter(renders, shutdown).await
    }

    /// Serves `/metrics` and `/healthz` from `exporter` (lbd's, or another
    /// program's such as `lb-k8s-sync`), as [`serve`](Self::serve) does.
    pub async fn serve_exporter<E: Exporter>(
        self,
        exporter: E,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), MetricsError> {
        let addr = self.addr;
        let listener = tokio::net::TcpListener::from_std(self.listener)
            .map_err(|source| MetricsError::Bind { addr, source })?;
        let renders = Arc::new(exporter);
        let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        tracing::info!(%addr, "Prometheus metrics listening (GET /metrics)");
        let accept = async {
            loop {
                let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                    return;
                };
                let stream = match listener.accept().await {
                    Ok((s, _)) => s,
                    Err(e) => {
                        // Out of file descriptors, say: retried, warned
                        // about once a second at most.
                        tracing::warn!(%addr, "metrics: accept failed: {e}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                let renders = Arc::clone(&renders);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let renders = Arc::clone(&renders);
                        async move { Ok::<_, Infallible>(answer(&req, &*renders).await) }
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .keep_alive(false)
                        .timer(TokioTimer::new())
                        .header_read_timeout(HEADER_TIMEOUT)
                        .serve_connection(TokioIo::new(stream), service);
                    // A client that stalls or vanishes ends its connection
                    // only; nothing to report.
                    let _ = tokio::time::timeout(CONNECTION_TIMEOUT, conn).await;
                    drop(permit);
                });
            }
        };
        tokio::select! {
            () = accept => {}
            () = shutdown => {}
        }
        Ok(())
    }
}

/// What a metrics endpoint serves.
pub trait Exporter: Send + Sync + 'static {
    /// The program, in error answers (`lbd`).
    const NAME: &'static str;

    /// The `/metrics` text for a scrape that arrived at `since`, or why it
    /// cannot be had.
    fn metrics(&self, since: Instant) -> impl Future<Output = Result<Bytes, String>> + Send;

    /// `/healthz`: healthy, or why not.
    fn health(&self) -> impl Future<Output = Result<(), String>> + Send;
}

impl Exporter for Renders {
    const NAME: &'static str = "lbd";

    async fn metrics(&self, since: Instant) -> Result<Bytes, String> {
        self.text(since)
            .await
            .map_err(|e| format!("cannot read the counters: {}", e.message()))
    }

    async fn health(&self) -> Result<(), String> {
        Renders::health(self).await
    }
}

/// What the scrapes share: the plane and lbd's counters, and the last
/// text rendered with the time it was done.
struct Renders {
    plane: SharedPlane,
    info: ServerInfo,
    last: tokio::sync::Mutex<Option<(Instant, Bytes)>>,
}

impl Renders {
    /// The metrics text for a scrape that arrived at `since`: the last text
    /// if it was finished after that (the scrape waited for it), else a new
    /// one.
    async fn text(&self, since: Instant) -> Result<Bytes, tonic::Status> {
        let mut last = self.last.lock().await;
        if let Some((done, text)) = last.as_ref() {
            if *done >= since {
                return Ok(text.clone());
            }
        }
        let (stats, info) = report::both(&self.plane, &self.info).await?;
        let text = tokio::task::spawn_blocking(move || Bytes::from(render(&stats, &info)))
            .await
            .map_err(|e| tonic::Status::internal(format!("rendering failed: {e}")))?;
        *last = Some((Instant::now(), text.clone()));
        Ok(text)
    }
}

impl Renders {
    /// `/healthz`: whether lbd can forward, for a routing daemon's health
    /// check (withdraw the VIPs when it fails): the plane answers and
    /// every port's link is up (with one down, one side is cut off).
    async fn health(&self) -> Result<(), String> {
        let info = report::info(&self.plane, &self.info)
            .await
            .map_err(|e| e.message().to_string())?;
        let down: Vec<String> = info
            .ports
            .iter()
            .filter(|p| !p.link_up)
            .map(|p| format!("port {} ({}) link down", p.id, p.name))
            .collect();
        if down.is_empty() {
            Ok(())
        } else {
            Err(down.join(", "))
        }
    }
}

/// The answer to one request.
async fn answer<E: Exporter>(req: &Request<Incoming>, renders: &E) -> Response<Full<Bytes>> {
    let since = Instant::now();
    let text = |status: StatusCode, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        r
    };
    let path = req.uri().path();
    if path != "/metrics" && path != "/healthz" {
        return text(
            StatusCode::NOT_FOUND,
            format!("not found: {} serves GET /metrics and GET /healthz\n", E::NAME),
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{} not allowed: GET {path}\n", req.method()),
        );
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if path == "/healthz" {
        return match renders.health().await {
            Ok(()) => text(StatusCode::OK, "ok\n".into()),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("unhealthy: {why}\n")),
        };
    }
    match renders.metrics(since).await {
        Ok(body) => {
            let mut r = Response::new(Full::new(body));
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE));
            r
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{}: {e}\n", E::NAME)),
    }
}

/// The exposition text: families in a fixed order, each with its HELP and
/// TYPE lines and then all its samples.
#[derive(Debug, Default)]
pub struct Exposition(String);

impl Exposition {
    /// The text written.
    pub fn finish(self) -> String {
        self.0
    }

    /// A family's HELP and TYPE lines (`kind`: `counter`, `gauge`).
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    /// One sample, its label values escaped.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                self.0.push_str(k);
                self.0.push_str("=\"");
                for c in v.chars() {
                    match c {
                        '\\' => self.0.push_str("\\\\"),
                        '"' => self.0.push_str("\\\""),
                        '\n' => self.0.push_str("\\n"),
                        c => self.0.push(c),
                    }
                }
                self.0.push('"');
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }

    /// A family of one sample without labels.
    pub fn one(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// A family with one sample per item of `items`.
    fn each<T>(
        &mut self,
        name: &str,
        kind: &str,
        help: &str,
        items: &[T],
        labels: impl Fn(&T) -> Vec<(&'static str, String)>,
        value: impl Fn(&T) -> u64,
    ) {
        self.family(name, kind, help);
        for it in items {
            let l = labels(it);
            let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
            self.sample(name, &l, value(it));
        }
    }
}

/// A counter's value in a gRPC answer.
type Value<T> = fn(&T) -> u64;
/// A family of one sample per item: name, type, help and the value.
type Family<T> = (&'static str, &'static str, &'static str, Value<T>);

fn protocol_name(p: i32) -> &'static str {
    match pb::Protocol::try_from(p) {
        Ok(pb::Protocol::Tcp) => "tcp",
        Ok(pb::Protocol::Udp) => "udp",
        _ => "unspecified",
    }
}

/// The metrics of one GetStats and one GetInfo answer.
pub fn render(stats: &pb::GetStatsResponse, info: &pb::GetInfoResponse) -> String {
    let mut out = Exposition(String::new());
    let o = &mut out;

    o.family(
        "lbd_info",
        "gauge",
        "lbd's version and this run's instance id (1).",
    );
    o.sample(
        "lbd_info",
        &[("version", &info.version), ("instance_id", &info.instance_id)],
        1,
    );
    o.one(
        "lbd_revision",
        "gauge",
        "The last committed revision of the desired state.",
        info.revision,
    );
    o.one(
        "lbd_published_revision",
        "gauge",
        "The last revision compiled into the data plane.",
        info.published_revision,
    );
    o.one(
        "lbd_last_publish_seconds",
        "gauge",
        "Commit-to-publication time of the last published revision.",
        info.last_publish_micros as f64 / 1e6,
    );
    o.one("lbd_workers", "gauge", "Worker lcores.", info.workers);

    let worker = |w: &pb::WorkerStats| vec![("worker", w.worker.to_string())];
    let per_worker: [Family<pb::WorkerStats>; 16] = [
        (
            "lbd_worker_rx_packets_total",
            "counter",
            "Frames received from the NIC (hand-overs not counted again).",
            |w| w.rx_packets,
        ),
        (
            "lbd_worker_tx_packets_total",
            "counter",
            "Frames the NIC took: forwarded, local replies, control frames on worker 0.",
            |w| w.tx_packets,
        ),
        (
            "lbd_worker_local_replies_total",
            "counter",
            "ARP replies, ICMP echo replies and neighbor advertisements made.",
            |w| w.local_replies,
        ),
        (
            "lbd_worker_resets_sent_total",
            "counter",
            "TCP segments to a VIP port without a frontend answered with a RST.",
            |w| w.resets_sent,
        ),
        (
            "lbd_worker_too_big_sent_total",
            "counter",
            "Packets too big for the port they would leave by, answered with an ICMP fragmentation needed or packet too big.",
            |w| w.too_big_sent,
        ),
        (
            "lbd_worker_neighbor_updates_total",
            "counter",
            "ARP replies and neighbor advertisements passed to the neighbor table, and new MACs named by requests to lbd.",
            |w| w.neighbor_updates,
        ),
        (
            "lbd_worker_slot_overflow_total",
            "counter",
            "Packets whose frontend or backend counter slot was out of range (their per-object counts are lost).",
            |w| w.slot_overflow,
        ),
        (
            "lbd_worker_handed_over_total",
            "counter",
            "Frames passed to the worker that owns their flow.",
            |w| w.handed_over,
        ),
        (
            "lbd_worker_new_connections_total",
            "counter",
            "Connections opened.",
            |w| w.new_connections,
        ),
        (
            "lbd_worker_stateless_forwards_total",
            "counter",
            "DNAT packets forwarded by Maglev alone, the connection table being full.",
            |w| w.stateless_forwards,
        ),
        (
            "lbd_conntrack_entries",
            "gauge",
            "Live connection-table entries.",
            |w| w.conntrack_entries,
        ),
        (
            "lbd_conntrack_evictions_total",
            "counter",
            "Entries evicted to make room.",
            |w| w.conntrack_evictions,
        ),
        (
            "lbd_conntrack_expirations_total",
            "counter",
            "Entries expired, ended by a client SYN reusing their ports, or UDP ones whose frontend or backend was deleted.",
            |w| w.conntrack_expirations,
        ),
        (
            "lbd_affinity_hits_total",
            "counter",
            "New connections sent to their client's pinned backend.",
            |w| w.affinity_hits,
        ),
        (
            "lbd_affinity_pins_total",
            "counter",
            "Clients pinned to a backend.",
            |w| w.affinity_pins,
        ),
        (
            "lbd_affinity_evictions_total",
            "counter",
            "Live affinity pins replaced for want of room.",
            |w| w.affinity_evictions,
        ),
    ];
    for (name, kind, help, value) in per_worker {
        o.each(name, kind, help, &stats.workers, worker, value);
    }
    o.family(
        "lbd_drops_total",
        "counter",
        "Frames dropped, by reason (see the README's drop reasons).",
    );
    for w in &stats.workers {
        let id = w.worker.to_string();
        for r in DropReason::ALL {
            let n = w.drops.get(r.name()).copied().unwrap_or(0);
            o.sample("lbd_drops_total", &[("worker", &id), ("reason", r.name())], n);
        }
    }

    let frontend = |f: &pb::FrontendStats| {
        let k = f.frontend.clone().unwrap_or_default();
        vec![
            ("service", f.service.clone()),
            ("address", k.address),
            ("port", k.port.to_string()),
            ("protocol", protocol_name(k.protocol).to_string()),
        ]
    };
    let fe_flow = |f: &pb::FrontendStats| f.stats.unwrap_or_default();
    o.each(
        "lbd_frontend_packets_total",
        "counter",
        "Packets to the frontend, replies included.",
        &stats.frontends,
        frontend,
        |f| fe_flow(f).packets,
    );
    o.each(
        "lbd_frontend_bytes_total",
        "counter",
        "Bytes of those packets.",
        &stats.frontends,
        frontend,
        |f| fe_flow(f).bytes,
    );
    o.each(
        "lbd_frontend_connections_total",
        "counter",
        "Connections opened through the frontend.",
        &stats.frontends,
        frontend,
        |f| fe_flow(f).connections,
    );
    let backend = |b: &pb::BackendStats| {
        let k = b.backend.clone().unwrap_or_default();
        vec![
            ("service", k.service),
            ("address", k.address),
            ("port", k.port.to_string()),
        ]
    };
    let be_flow = |b: &pb::BackendStats| b.stats.unwrap_or_default();
    o.each(
        "lbd_backend_packets_total",
        "counter",
        "Packets to and from the backend.",
        &stats.backends,
        backend,
        |b| be_flow(b).packets,
    );
    o.each(
        "lbd_backend_bytes_total",
        "counter",
        "Bytes of those packets.",
        &stats.backends,
        backend,
        |b| be_flow(b).bytes,
    );
    o.each(
        "lbd_backend_connections_total",
        "counter",
        "Connections opened to the backend.",
        &stats.backends,
        backend,
        |b| be_flow(b).connections,
    );

    // `port_id`: `port` is a TCP/UDP port in the frontend and backend labels.
    let port = |p: &pb::PortStats| vec![("port_id", p.id.to_string()), ("name", p.name.clone())];
    let per_port: [(&str, &str, Value<pb::PortStats>); 8] = [
        (
            "lbd_port_rx_packets_total",
            "Packets the port received (the NIC's count, read every second).",
            |p| p.rx_packets,
        ),
        ("lbd_port_rx_bytes_total", "Bytes the port received.", |p| {
            p.rx_bytes
        }),
        ("lbd_port_tx_packets_total", "Packets the port sent.", |p| {
            p.tx_packets
        }),
        ("lbd_port_tx_bytes_total", "Bytes the port sent.", |p| p.tx_bytes),
        (
            "lbd_port_imissed_total",
            "Packets the NIC dropped for want of a free rx descriptor: the workers did not keep up.",
            |p| p.imissed,
        ),
        ("lbd_port_ierrors_total", "Bad frames received.", |p| p.ierrors),
        ("lbd_port_oerrors_total", "Frames the NIC failed to send.", |p| {
            p.oerrors
        }),
        (
            "lbd_port_rx_nombuf_total",
            "Receives that failed for want of an mbuf.",
            |p| p.rx_nombuf,
        ),
    ];
    for (name, help, value) in per_port {
        o.each(name, "counter", help, &stats.ports, port, value);
    }
    let link = |p: &pb::PortInfo| vec![("port_id", p.id.to_string()), ("name", p.name.clone())];
    o.each(
        "lbd_port_link_up",
        "gauge",
        "1 when the port's link is up.",
        &info.ports,
        link,
        |p| u64::from(p.link_up),
    );

    let c = stats.control.unwrap_or_default();
    let control: [(&str, &str, &str, u64); 10] = [
        (
            "lbd_control_arp_requests_total",
            "counter",
            "ARP requests sent.",
            c.arp_requests,
        ),
        (
            "lbd_control_gratuitous_arps_total",
            "counter",
            "Gratuitous ARPs sent for owned IPv4 addresses.",
            c.gratuitous_arps,
        ),
        (
            "lbd_control_neighbor_solicitations_total",
            "counter",
            "Neighbor solicitations sent.",
            c.neighbor_solicitations,
        ),
        (
            "lbd_control_unsolicited_nas_total",
            "counter",
            "Unsolicited neighbor advertisements sent for owned IPv6 addresses.",
            c.unsolicited_nas,
        ),
        (
            "lbd_control_held_total",
            "counter",
            "Frames held for an unresolved next hop.",
            c.held,
        ),
        (
            "lbd_control_released_total",
            "counter",
            "Held frames sent once their next hop answered.",
            c.released,
        ),
        (
            "lbd_control_neighbor_drops_total",
            "counter",
            "Held frames dropped: no answer, hold queue full, no next hop, neighbor table full, or held at exit.",
            c.neighbor_drops,
        ),
        (
            "lbd_control_send_failures_total",
            "counter",
            "Control frames not passed to worker 0 (ring full) or not built (no mbuf).",
            c.send_failures,
        ),
        ("lbd_neighbors", "gauge", "Resolved neighbors.", c.neighbors),
        (
            "lbd_neighbor_entries",
            "gauge",
            "Neighbor table entries, resolved or being resolved.",
            c.neighbor_entries,
        ),
    ];
    for (name, kind, help, value) in control {
        o.one(name, kind, help, value);
    }
    o.one(
        "lbd_affinity_live_pins",
        "gauge",
        "Live client-IP affinity pins.",
        stats.affinity_live_pins,
    );
    o.one(
        "lbd_affinity_table_size",
        "gauge",
        "Pins the affinity table holds.",
        stats.affinity_table_size,
    );
    out.0
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
