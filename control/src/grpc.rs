//! The `lb.v1.LoadBalancer` gRPC service over the [`ControlPlane`], plus
//! `grpc.health.v1` and server reflection so that `grpcurl` works.
//!
//! Status codes: a [`PlaneError`] or a conversion's [`ValidationError`]
//! maps by its [`ErrorKind`]: INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
//! FAILED_PRECONDITION (also a stale `expected_revision` and a resync
//! conflict with another source), UNAVAILABLE (the commit could not be
//! persisted; nothing changed, retrying may work), INTERNAL (lbd's own state
//! is broken, or the plane's lock was poisoned by a panic). The message is
//! the error's one-line text, naming the object and the field.
//!
//! Every call that takes the plane's lock runs on tokio's blocking pool:
//! writes because a commit persists (fsync) and compiles a snapshot, reads
//! because they wait for the lock while a commit runs. A big Resync can
//! hold it for seconds, and a read waiting on a runtime thread would stall
//! every other task there: the health service, the Watch streams, the
//! accept loop.
//!
//! Watch: a watcher gets every commit after it subscribed, in order. One
//! that falls so far behind that the plane's broadcast buffer overwrote
//! events it had not read gets a final DATA_LOSS status saying how many it
//! lost, and should List (which carries the revision) and Watch again;
//! nothing is silently skipped. A watcher that Watches first and Lists
//! second can ignore events at or below the listed revision.

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use lb_dataplane::affinity::{self, AffinityTable};
use lb_dataplane::Tick;
use lb_proto::v1 as pb;
use pb::load_balancer_server::{LoadBalancer, LoadBalancerServer};
use tokio::sync::{broadcast, mpsc, watch};
use tonic::transport::server::Router;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

use crate::convert;
use crate::model::{check_service_name, ErrorKind, Source, ValidationError, MAX_CHANGES};
use crate::plane::{CommitEvent, ControlPlane, PlaneError};
use crate::report::{self, poisoned};

/// The plane as the gRPC service shares it with lbd's control thread.
pub type SharedPlane = Arc<Mutex<ControlPlane>>;

/// The largest request the service decodes (a Resync of a big cluster).
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// Events a watcher may be behind before it is cut off (the plane's
/// broadcast buffer decides the real limit; this is the per-watcher queue
/// between the broadcast and the HTTP/2 stream).
const WATCH_QUEUE: usize = 64;

/// A port's counters: those of `rte_eth_stats` that an operator watches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Dropped by the NIC: no free rx descriptor.
    pub imissed: u64,
    /// Bad frames received.
    pub ierrors: u64,
    /// Frames the NIC failed to send.
    pub oerrors: u64,
    /// Receive failures for want of an mbuf.
    pub rx_nombuf: u64,
}

/// A port as lbd last read it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortSample {
    /// Link up.
    pub up: bool,
    /// Link speed in Mb/s (0: unknown).
    pub speed_mbps: u32,
    /// The device's counters.
    pub counters: PortCounters,
}

/// A port's link and counters as lbd last read them: the owner of the port
/// updates them while lbd runs (lbd: every second), GetInfo and GetStats
/// read them.
#[derive(Debug, Default)]
pub struct PortStatus(Mutex<PortSample>);

impl PortStatus {
    /// A port whose link is in this state, counters at zero.
    pub fn new(up: bool, speed_mbps: u32) -> Arc<PortStatus> {
        Arc::new(PortStatus(Mutex::new(PortSample {
            up,
            speed_mbps,
            counters: PortCounters::default(),
        })))
    }

    fn lock(&self) -> MutexGuard<'_, PortSample> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the link's state; true when it differs from the last one.
    pub fn set_link(&self, up: bool, speed_mbps: u32) -> bool {
        let mut s = self.lock();
        let changed = (s.up, s.speed_mbps) != (up, speed_mbps);
        (s.up, s.speed_mbps) = (up, speed_mbps);
        changed
    }

    /// Records the counters just read.
    pub fn set_counters(&self, c: PortCounters) {
        self.lock().counters = c;
    }

    /// The last sample.
    pub fn get(&self) -> PortSample {
        *self.lock()
    }
}

/// The control thread's own counters (the workers' are in their
/// `WorkerCounters`): lbd's control thread updates them, GetStats reads
/// them.
#[derive(Debug, Default)]
pub struct ControlCounters {
    /// ARP requests sent.
    pub arp_requests: AtomicU64,
    /// Gratuitous ARPs sent.
    pub gratuitous_arps: AtomicU64,
    /// Neighbor solicitations sent (IPv6 next hops).
    pub neighbor_solicitations: AtomicU64,
    /// Unsolicited neighbor advertisements sent (owned IPv6 addresses).
    pub unsolicited_nas: AtomicU64,
    /// Frames held for an unresolved next hop.
    pub held: AtomicU64,
    /// Held frames sent once their next hop answered.
    pub released: AtomicU64,
    /// Held frames dropped: the next hop never answered, the hold queue was
    /// full, or there is no next hop.
    pub neighbor_drops: AtomicU64,
    /// Frames the control thread could not pass to worker 0 (ring full) or
    /// could not build (no mbuf).
    pub send_failures: AtomicU64,
    /// Resolved neighbors (gauge).
    pub neighbors: AtomicU64,
    /// Neighbor table entries, resolved or being resolved (gauge).
    pub neighbor_entries: AtomicU64,
}

impl ControlCounters {
    /// The counters' current values, as GetStats reports them (each read
    /// on its own: they are not read atomically together).
    pub fn get(&self) -> pb::ControlStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        pb::ControlStats {
            arp_requests: g(&self.arp_requests),
            gratuitous_arps: g(&self.gratuitous_arps),
            neighbor_solicitations: g(&self.neighbor_solicitations),
            unsolicited_nas: g(&self.unsolicited_nas),
            held: g(&self.held),
            released: g(&self.released),
            neighbor_drops: g(&self.neighbor_drops),
            send_failures: g(&self.send_failures),
            neighbors: g(&self.neighbors),
            neighbor_entries: g(&self.neighbor_entries),
        }
    }
}

/// One DPDK port, for GetInfo.
#[derive(Debug, Clone)]
pub struct PortInfo {
    /// DPDK port id.
    pub id: u16,
    /// Device name, e.g. `0000:03:00.0` or `net_memif0`.
    pub name: String,
    /// PMD name.
    pub driver: String,
    /// MAC address.
    pub mac: [u8; 6],
    /// IPv4 header checksum offloads in use: (rx, tx).
    pub ipv4_checksum_offload: (bool, bool),
    /// The 802.1Q VLAN id of the port's frames, if tagged.
    pub vlan: Option<u16>,
    /// The largest IP packet the port sends.
    pub mtu: u16,
    /// Link state, speed and counters, kept current by the port's owner.
    pub status: Arc<PortStatus>,
}

/// What GetInfo reports besides the plane's revisions: fixed for one run
/// but for the ports' status; and the counters GetStats reports besides
/// the plane's.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    /// lbd's version.
    pub version: String,
    /// A new id on every start, so a client can tell a restart.
    pub instance_id: String,
    /// The ports.
    pub ports: Vec<PortInfo>,
    /// Worker lcores.
    pub workers: u32,
    /// The control thread's counters, kept current by the control thread.
    pub control: Arc<ControlCounters>,
    /// The node's client-IP affinity table, for GetStats' occupancy.
    pub affinity: Option<AffinityInfo>,
}

/// The node's client-IP affinity table and the pipeline's clock (pins
/// expire by it).
#[derive(Clone)]
pub struct AffinityInfo {
    /// The table the workers share.
    pub table: Arc<AffinityTable>,
    /// The workers' current tick.
    pub now: Arc<dyn Fn() -> Tick + Send + Sync>,
    /// The last count, and the second of the pipeline's clock it was made
    /// in.
    last: Arc<Mutex<Option<(u32, u64)>>>,
}

impl AffinityInfo {
    /// The live pins, by a walk of the whole table at most once per second
    /// of the pipeline's clock: the largest table is 1 GiB, and requests
    /// that come together wait for one walk and share its count.
    pub fn live_pins(&self) -> u64 {
        let now = affinity::seconds((self.now)());
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match *last {
            Some((at, n)) if at == now => n,
            _ => {
                let n = self.table.live(now) as u64;
                *last = Some((now, n));
                n
            }
        }
    }
}

impl std::fmt::Debug for AffinityInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AffinityInfo")
            .field("capacity", &self.table.capacity())
            .finish_non_exhaustive()
    }
}

impl ServerInfo {
    /// This build's version and a fresh instance id, control counters at
    /// zero (see [`ServerInfo::with_control`]).
    pub fn new(ports: Vec<PortInfo>, workers: u32) -> ServerInfo {
        ServerInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            instance_id: new_instance_id(),
            ports,
            workers,
            control: Arc::default(),
            affinity: None,
        }
    }

    /// The same, reporting the control counters `control`.
    pub fn with_control(self, control: Arc<ControlCounters>) -> ServerInfo {
        ServerInfo { control, ..self }
    }

    /// The same, reporting the occupancy of `table`, whose pins expire by
    /// the clock `now`.
    pub fn with_affinity(
        self,
        table: Arc<AffinityTable>,
        now: impl Fn() -> Tick + Send + Sync + 'static,
    ) -> ServerInfo {
        ServerInfo {
            affinity: Some(AffinityInfo {
                table,
                now: Arc::new(now),
                last: Arc::default(),
            }),
            ..self
        }
    }
}

/// A random UUID from the kernel; if that is unreadable (no procfs), one
/// made of the time and the process id, which is unique enough to tell
/// restarts apart.
pub fn new_instance_id() -> String {
    match std::fs::read_to_string("/proc/sys/kernel/random/uuid") {
        Ok(s) if !s.trim().is_empty() => s.trim().to_string(),
        _ => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            format!("{:x}-{:x}", t.as_nanos(), std::process::id())
        }
    }
}

/// The gRPC code of an error class.
pub fn code_of(kind: ErrorKind) -> tonic::Code {
    match kind {
        ErrorKind::Invalid => tonic::Code::InvalidArgument,
        ErrorKind::NotFound => tonic::Code::NotFound,
        ErrorKind::AlreadyExists => tonic::Code::AlreadyExists,
        ErrorKind::Precondition => tonic::Code::FailedPrecondition,
        ErrorKind::Unavailable => tonic::Code::Unavailable,
        ErrorKind::Internal => tonic::Code::Internal,
    }
}

/// The status of a rejected conversion.
pub fn status_from_validation(e: &ValidationError) -> Status {
    Status::new(code_of(e.kind), e.to_string())
}

/// The status of a failed plane operation.
pub fn status_from_plane(e: &PlaneError) -> Status {
    Status::new(code_of(e.kind()), e.to_string())
}

/// The `lb.v1.LoadBalancer` implementation.
#[derive(Debug, Clone)]
pub struct LoadBalancerService {
    plane: SharedPlane,
    info: Arc<ServerInfo>,
    closing: watch::Receiver<bool>,
}

impl LoadBalancerService {
    /// A service over `plane`, and the handle that ends its Watch streams
    /// (graceful shutdown waits for every stream to end).
    pub fn new(plane: SharedPlane, info: ServerInfo) -> (LoadBalancerService, WatchCloser) {
        let (tx, closing) = watch::channel(false);
        let svc = LoadBalancerService {
            plane,
            info: Arc::new(info),
            closing,
        };
        (svc, WatchCloser(tx))
    }

    /// Runs a read on the blocking pool: it may wait for a commit.
    async fn read<T, F>(&self, f: F) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnOnce(&ControlPlane) -> Result<T, Status> + Send + 'static,
    {
        report::read(&self.plane, f).await
    }

    /// Runs a write on the blocking pool (commits persist and compile).
    async fn write<T, F>(&self, f: F) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnOnce(&mut ControlPlane) -> Result<T, PlaneError> + Send + 'static,
    {
        let plane = Arc::clone(&self.plane);
        tokio::task::spawn_blocking(move || {
            let mut p = plane.lock().map_err(|_| poisoned())?;
            f(&mut p).map_err(|e| status_from_plane(&e))
        })
        .await
        .map_err(|e| Status::internal(format!("control plane task failed: {e}")))?
    }
}

fn request_source(v: i32) -> Result<Source, Status> {
    convert::source_from_proto(v, "request", "source").map_err(|e| status_from_validation(&e))
}

fn invalid(e: ValidationError) -> Status {
    status_from_validation(&e)
}

fn event_to_proto(e: &CommitEvent) -> pb::WatchEvent {
    pb::WatchEvent {
        revision: e.revision,
        source: convert::source_to_proto(e.source),
        changes: e.changes.iter().map(convert::change_to_proto).collect(),
    }
}

/// Forwards commits to one watcher until it goes away, falls behind, the
/// server shuts down, or the plane is dropped.
async fn pump_watch(
    mut rx: broadcast::Receiver<Arc<CommitEvent>>,
    tx: mpsc::Sender<Result<pb::WatchEvent, Status>>,
    mut closing: watch::Receiver<bool>,
) {
    loop {
        let item = tokio::select! {
            _ = tx.closed() => return,
            _ = async { closing.wait_for(|&c| c).await.is_ok() } => {
                let _ = tx.send(Err(Status::unavailable("lbd is shutting down; Watch again after it restarts"))).await;
                return;
            }
            r = rx.recv() => r,
        };
        match item {
            Ok(ev) => {
                if tx.send(Ok(event_to_proto(&ev))).await.is_err() {
                    return;
                }
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(lost = n, "gRPC watcher fell behind; ending its stream");
                let _ = tx
                    .send(Err(Status::data_loss(format!(
                        "watcher fell behind and {n} commit events were lost; List and Watch again"
                    ))))
                    .await;
                return;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

type WatchStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::WatchEvent, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl LoadBalancer for LoadBalancerService {
    async fn apply(&self, request: Request<pb::ApplyRequest>) -> Result<Response<pb::ApplyResponse>, Status> {
        let req = request.into_inner();
        let source = request_source(req.source)?;
        if req.changes.len() > MAX_CHANGES {
            return Err(Status::invalid_argument(format!(
                "request: changes: {} changes, at most {MAX_CHANGES} in one Apply",
                req.changes.len()
            )));
        }
        let changes = convert::changes_from_proto(&req.changes, source).map_err(invalid)?;
        let expected = (req.expected_revision != 0).then_some(req.expected_revision);
        let n = changes.len();
        let o = self
            .write(move |p| p.apply_counted(source, changes, expected))
            .await?;
        tracing::info!(
            revision = o.revision,
            source = source.name(),
            changes = n,
            added = o.added,
            updated = o.updated,
            unchanged = o.unchanged,
            removed = o.removed,
            "apply committed"
        );
        Ok(Response::new(pb::ApplyResponse {
            revision: o.revision,
            added: o.added,
            updated: o.updated,
            unchanged: o.unchanged,
            removed: o.removed,
        }))
    }

    async fn resync(
        &self,
        request: Request<pb::ResyncRequest>,
    ) -> Result<Response<pb::ResyncResponse>, Status> {
        let req = request.into_inner();
        let source = request_source(req.source)?;
        let o = convert::resync_from_proto(&req, source).map_err(invalid)?;
        let out = self
            .write(move |p| p.resync(source, o.services, o.frontends, o.backends))
            .await?;
        tracing::info!(
            revision = out.revision,
            source = source.name(),
            added = out.added,
            updated = out.updated,
            removed = out.removed,
            "resync"
        );
        Ok(Response::new(pb::ResyncResponse {
            revision: out.revision,
            added: out.added,
            updated: out.updated,
            removed: out.removed,
        }))
    }

    async fn set_backend_state(
        &self,
        request: Request<pb::SetBackendStateRequest>,
    ) -> Result<Response<pb::SetBackendStateResponse>, Status> {
        let req = request.into_inner();
        let obj = "request";
        let addr = convert::addr_from_proto(&req.address, obj, "address").map_err(invalid)?;
        let port = match req.port {
            0 => None,
            p => Some(convert::port_from_proto(p, obj, "port").map_err(invalid)?),
        };
        let service = (!req.service.is_empty()).then_some(req.service);
        if let Some(s) = &service {
            check_service_name(s).map_err(|m| invalid(ValidationError::invalid(obj, "service", m)))?;
        }
        // UNSPECIFIED is "active" in an object, but here a request without
        // a state would enable whatever it matched.
        if req.state == i32::from(pb::BackendState::Unspecified) {
            return Err(invalid(ValidationError::invalid(
                obj,
                "state",
                "must be set (BACKEND_STATE_ACTIVE to enable)",
            )));
        }
        let state = convert::backend_state_from_proto(req.state, obj, "state").map_err(invalid)?;
        let (revision, matched) = self
            .write(move |p| p.set_backend_state(addr, port, service.as_deref(), state))
            .await?;
        tracing::info!(revision, matched, %addr, state = state.name(), "backend state set");
        Ok(Response::new(pb::SetBackendStateResponse { revision, matched }))
    }

    async fn get_service(
        &self,
        request: Request<pb::GetServiceRequest>,
    ) -> Result<Response<pb::GetServiceResponse>, Status> {
        let name = request.into_inner().name;
        check_service_name(&name).map_err(|m| invalid(ValidationError::invalid("request", "name", m)))?;
        self.read(move |p| {
            let st = p.state();
            let Some(svc) = st.services.get(&name) else {
                // The same form as every other error: object, field, message.
                return Err(invalid(ValidationError {
                    kind: ErrorKind::NotFound,
                    object: format!("service {name:?}"),
                    field: "name".into(),
                    message: "no such service".into(),
                }));
            };
            Ok(Response::new(pb::GetServiceResponse {
                service: Some(convert::service_to_proto(svc)),
                frontends: st
                    .frontends
                    .values()
                    .filter(|f| f.service == name)
                    .map(convert::frontend_to_proto)
                    .collect(),
                backends: st
                    .backends
                    .values()
                    .filter(|b| b.key.service == name)
                    .map(convert::backend_to_proto)
                    .collect(),
                revision: p.revision(),
            }))
        })
        .await
    }

    async fn list(&self, request: Request<pb::ListRequest>) -> Result<Response<pb::ListResponse>, Status> {
        let req = request.into_inner();
        let source = match req.source {
            0 => None,
            v => Some(convert::source_from_proto(v, "request", "source").map_err(invalid)?),
        };
        let address: Option<IpAddr> = match req.address.as_str() {
            "" => None,
            a => Some(convert::addr_from_proto(a, "request", "address").map_err(invalid)?),
        };
        let service = (!req.service.is_empty()).then_some(req.service);
        self.read(move |p| {
            let src_ok = |s: Source| source.is_none_or(|want| want == s);
            let svc_ok = |n: &str| service.as_deref().is_none_or(|want| want == n);
            let addr_ok = |a: IpAddr| address.is_none_or(|want| want == a);
            let st = p.state();
            let frontends: Vec<_> = st
                .frontends
                .values()
                .filter(|f| src_ok(f.source) && svc_ok(&f.service) && addr_ok(f.key.addr))
                .collect();
            let backends: Vec<_> = st
                .backends
                .values()
                .filter(|b| src_ok(b.source) && svc_ok(&b.key.service) && addr_ok(b.key.addr))
                .collect();
            // With an address filter, the services are those with an object
            // at that address.
            let services = st.services.values().filter(|s| {
                src_ok(s.source)
                    && svc_ok(&s.name)
                    && (address.is_none()
                        || frontends.iter().any(|f| f.service == s.name)
                        || backends.iter().any(|b| b.key.service == s.name))
            });
            Ok(Response::new(pb::ListResponse {
                services: services.map(convert::service_to_proto).collect(),
                frontends: frontends.into_iter().map(convert::frontend_to_proto).collect(),
                backends: backends.into_iter().map(convert::backend_to_proto).collect(),
                revision: p.revision(),
            }))
        })
        .await
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        _request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let rx = self.read(|p| Ok(p.subscribe())).await?;
        let (tx, out) = mpsc::channel(WATCH_QUEUE);
        tokio::spawn(pump_watch(rx, tx, self.closing.clone()));
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(out),
        )))
    }

    async fn get_stats(
        &self,
        _request: Request<pb::GetStatsRequest>,
    ) -> Result<Response<pb::GetStatsResponse>, Status> {
        report::stats(&self.plane, &self.info).await.map(Response::new)
    }

    async fn get_info(
        &self,
        _request: Request<pb::GetInfoRequest>,
    ) -> Result<Response<pb::GetInfoResponse>, Status> {
        report::info(&self.plane, &self.info).await.map(Response::new)
    }
}

/// `02:00:00:00:00:01`.
pub fn format_mac(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// Why the services could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// The reflection service rejected a descriptor set.
    #[error("gRPC reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
}

fn reflection() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
}

/// Ends every Watch stream with UNAVAILABLE, so that a graceful shutdown
/// does not wait for watchers forever.
#[derive(Debug)]
pub struct WatchCloser(watch::Sender<bool>);

impl WatchCloser {
    /// Ends the streams of current watchers and refuses none later (a
    /// Watch opened after this ends at once).
    pub fn close(&self) {
        self.0.send_replace(true);
    }
}

/// `lb.v1.LoadBalancer`, `grpc.health.v1.Health` (serving) and server
/// reflection (v1 and v1alpha), on `builder`.
pub async fn router(
    mut builder: Server,
    plane: SharedPlane,
    info: ServerInfo,
) -> Result<(Router, WatchCloser), RouterError> {
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<LoadBalancerServer<LoadBalancerService>>()
        .await;
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;
    let (svc, closer) = LoadBalancerService::new(plane, info);
    let lb = LoadBalancerServer::new(svc).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let router = builder
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(lb);
    Ok((router, closer))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(revision: u64) -> Arc<CommitEvent> {
        Arc::new(CommitEvent {
            revision,
            source: Source::Api,
            changes: vec![crate::model::Change::DeleteService("default/web".into())],
        })
    }

    #[tokio::test]
    async fn a_lagging_watcher_is_cut_off_with_data_loss() {
        let (events, rx) = broadcast::channel(2);
        for r in 1..=5 {
            events.send(event(r)).unwrap();
        }
        let (tx, mut out) = mpsc::channel(8);
        let (_closer, closing) = watch::channel(false);
        pump_watch(rx, tx, closing).await;
        let status = out.recv().await.unwrap().unwrap_err();
        assert_eq!(status.code(), tonic::Code::DataLoss);
        assert!(
            status.message().contains("3 commit events were lost"),
            "{}",
            status.message()
        );
        assert!(out.recv().await.is_none(), "the stream ends after the status");
    }

    #[tokio::test]
    async fn watchers_get_events_in_order_then_unavailable_at_shutdown() {
        let (events, rx) = broadcast::channel(16);
        let (tx, mut out) = mpsc::channel(8);
        let (closer, closing) = watch::channel(false);
        let pump = tokio::spawn(pump_watch(rx, tx, closing));
        events.send(event(1)).unwrap();
        events.send(event(2)).unwrap();
        let a = out.recv().await.unwrap().unwrap();
        let b = out.recv().await.unwrap().unwrap();
        assert_eq!((a.revision, b.revision), (1, 2));
        assert!(matches!(
            &a.changes[..],
            [pb::Change {
                change: Some(pb::change::Change::DeleteService(n))
            }] if n == "default/web"
        ));
        closer.send_replace(true);
        let end = out.recv().await.unwrap().unwrap_err();
        assert_eq!(end.code(), tonic::Code::Unavailable);
        pump.await.unwrap();
    }

    /// A read that waits for the plane's lock (a long commit holds it)
    /// must not hold a runtime thread: on a one-thread runtime, another
    /// task still runs while the read waits. Before reads moved to the
    /// blocking pool, the read blocked the only thread, so the signal below
    /// was never sent and the holder gave up after its bound.
    #[tokio::test(flavor = "current_thread")]
    async fn a_read_waiting_for_a_commit_leaves_the_runtime_free() {
        let plane = ControlPlane::open(crate::plane::tests::node(), None).unwrap();
        let plane: SharedPlane = Arc::new(Mutex::new(plane));
        let (svc, _closer) = LoadBalancerService::new(Arc::clone(&plane), ServerInfo::new(Vec::new(), 1));
        let (locked_tx, locked_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let _commit = plane.lock().unwrap();
            locked_tx.send(()).unwrap();
            // Bounded: without the fix the signal never comes.
            go_rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok()
        });
        locked_rx.recv().unwrap();
        let reads = [
            tokio::spawn({
                let svc = svc.clone();
                async move {
                    svc.get_info(Request::new(pb::GetInfoRequest {}))
                        .await
                        .map(|_| ())
                }
            }),
            tokio::spawn({
                let svc = svc.clone();
                async move {
                    svc.list(Request::new(pb::ListRequest::default()))
                        .await
                        .map(|_| ())
                }
            }),
            tokio::spawn({
                let svc = svc.clone();
                async move {
                    svc.get_stats(Request::new(pb::GetStatsRequest {}))
                        .await
                        .map(|_| ())
                }
            }),
        ];
        // Let the reads run up to their wait for the lock.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        // This task only runs if no read holds the thread.
        let _ = go_tx.send(());
        assert!(
            tokio::task::spawn_blocking(move || holder.join().unwrap())
                .await
                .unwrap(),
            "the runtime thread was blocked by a read"
        );
        for r in reads {
            r.await.unwrap().unwrap();
        }
    }

    /// `operator_state` is output only (AIP-203): an Apply or a Resync that
    /// carries one, unknown or known, commits its other fields and leaves
    /// the operator's state as SetBackendState set it.
    #[tokio::test]
    async fn requests_ignore_the_output_only_operator_state() {
        use crate::model::{BackendKey, BackendState};
        use pb::change::Change as C;
        let plane = ControlPlane::open(crate::plane::tests::node(), None).unwrap();
        let plane: SharedPlane = Arc::new(Mutex::new(plane));
        let (svc, _closer) = LoadBalancerService::new(Arc::clone(&plane), ServerInfo::new(Vec::new(), 1));
        let service = pb::Service {
            name: "default/web".into(),
            ..Default::default()
        };
        let backend = |weight: u32, operator_state: i32| pb::Backend {
            service: "default/web".into(),
            address: "10.1.0.11".into(),
            port: 8080,
            weight: Some(weight),
            operator_state,
            ..Default::default()
        };
        let apply = |changes: Vec<C>| {
            Request::new(pb::ApplyRequest {
                changes: changes
                    .into_iter()
                    .map(|c| pb::Change { change: Some(c) })
                    .collect(),
                ..Default::default()
            })
        };
        svc.apply(apply(vec![
            C::UpsertService(service.clone()),
            C::UpsertBackend(backend(1, 0)),
        ]))
        .await
        .unwrap();
        svc.set_backend_state(Request::new(pb::SetBackendStateRequest {
            address: "10.1.0.11".into(),
            state: pb::BackendState::Maintenance.into(),
            ..Default::default()
        }))
        .await
        .unwrap();
        let key = BackendKey {
            service: "default/web".into(),
            addr: "10.1.0.11".parse().unwrap(),
            port: 8080,
        };
        let stored = || {
            let p = plane.lock().unwrap();
            let b = &p.state().backends[&key];
            (p.revision(), b.weight, b.operator_state)
        };
        let held = Some(BackendState::Maintenance);
        assert_eq!(stored(), (2, 1, held));
        let active = i32::from(pb::BackendState::Active);
        for (weight, operator_state) in [(2, 99), (3, active)] {
            let r = svc
                .apply(apply(vec![C::UpsertBackend(backend(weight, operator_state))]))
                .await
                .unwrap();
            assert_eq!(r.into_inner().revision, u64::from(weight) + 1);
            assert_eq!(stored(), (u64::from(weight) + 1, weight, held));
        }
        for (weight, operator_state) in [(4, 99), (5, active)] {
            let r = svc
                .resync(Request::new(pb::ResyncRequest {
                    services: vec![service.clone()],
                    backends: vec![backend(weight, operator_state)],
                    ..Default::default()
                }))
                .await
                .unwrap();
            assert_eq!(r.into_inner().updated, 1);
            assert_eq!(stored(), (u64::from(weight) + 1, weight, held));
        }
    }

    #[test]
    fn codes_by_kind() {
        assert_eq!(code_of(ErrorKind::Invalid), tonic::Code::InvalidArgument);
        assert_eq!(code_of(ErrorKind::NotFound), tonic::Code::NotFound);
        assert_eq!(code_of(ErrorKind::AlreadyExists), tonic::Code::AlreadyExists);
        assert_eq!(code_of(ErrorKind::Precondition), tonic::Code::FailedPrecondition);
        assert_eq!(code_of(ErrorKind::Unavailable), tonic::Code::Unavailable);
        assert_eq!(code_of(ErrorKind::Internal), tonic::Code::Internal);
        let s = status_from_validation(&ValidationError::invalid("changes[1] frontend", "port", "bad"));
        assert_eq!(s.message(), "changes[1] frontend: port: bad");
    }

    #[test]
    fn instance_ids_differ() {
        assert_ne!(new_instance_id(), new_instance_id());
        assert_eq!(format_mac([0x02, 0, 0, 0, 0xab, 1]), "02:00:00:00:ab:01");
    }
}
