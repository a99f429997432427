//! The `lb.v1.LoadBalancer` gRPC service over the [`ControlPlane`], plus
//! `grpc.health.v1` and server reflection so that `grpcurl` works.
//!
//! Status codes: a [`PlaneError`] or a conversion's [`ValidationError`]
//! maps by its [`ErrorKind`]: INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
//! FAILED_PRECONDITION (also a stale `expected_revision` and a resync
//! conflict with another source), UNAVAILABLE (the commit could not be
//! persisted, or [`MAX_CONCURRENT_WRITES`] other bulk writes are in
//! progress: [`RequestLimits`]; nothing changed, retrying may work),
//! RESOURCE_EXHAUSTED (a request other than Apply and Resync larger than
//! [`MAX_SMALL_REQUEST_BYTES`]), DEADLINE_EXCEEDED (a request whose bytes
//! stopped arriving for [`REQUEST_IDLE_TIMEOUT`]), INTERNAL (lbd's own
//! state is broken, or the plane's lock was poisoned by a panic). The
//! message is the error's one-line text, naming the object and the field.
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
use std::sync::{Arc, Mutex};

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

/// Events converted for one watcher and waiting for its HTTP/2 stream:
/// few, since each is a copy that may be big (a Resync's), and the plane's
/// broadcast buffer, shared by every watcher, holds the lag.
const WATCH_QUEUE: usize = 4;

/// The most changes a watcher may lag behind the plane (in events the
/// broadcast buffer holds for it) once it has taken nothing from its
/// stream for [`WATCH_STALL`]: it is then cut off with DATA_LOSS. The
/// broadcast buffer keeps each event until its slowest watcher has it, so
/// one watcher that stopped reading (its HTTP/2 connection alive) under a
/// controller's big, frequent writes would otherwise hold up to
/// [`WATCH_CAPACITY`](crate::plane::WATCH_CAPACITY) of them, gigabytes.
/// A watcher that reads is never cut off by this, however big a commit.
pub const MAX_WATCH_LAG_CHANGES: u64 = 1_000_000;

/// How long a watcher may take nothing from its stream before its lag is
/// held against it.
pub const WATCH_STALL: std::time::Duration = std::time::Duration::from_secs(10);

/// How often a stalled watcher's lag is checked.
const WATCH_LAG_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

mod info;
mod limits;
pub use info::{AffinityInfo, ControlCounters, PortCounters, PortInfo, PortSample, PortStatus, ServerInfo};
pub use limits::{
    BulkWritePermit, LimitedBody, RequestLimits, MAX_CONCURRENT_WRITES, MAX_SMALL_REQUEST_BYTES,
    REQUEST_IDLE_TIMEOUT,
};

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
    Status::new(code_of(e.kind), clip_message(e.to_string()))
}

/// The status of a failed plane operation.
pub fn status_from_plane(e: &PlaneError) -> Status {
    Status::new(code_of(e.kind()), clip_message(e.to_string()))
}

/// The longest status message lbd sends, in bytes (before the
/// percent-encoding of `grpc-message`).
pub const MAX_STATUS_MESSAGE: usize = 1024;

/// `msg`, its middle left out if it is longer than [`MAX_STATUS_MESSAGE`]:
/// a message that quoted a name of 60 kB whole made a header that clients
/// refuse (h2's header list limit, 16 KiB by default), so the caller saw a
/// protocol error instead of the reason. Errors quote long names in part
/// ([`Quoted`](crate::model::Quoted)); this is the backstop for any other
/// long message. Its start and end are kept.
pub fn clip_message(msg: String) -> String {
    if msg.len() <= MAX_STATUS_MESSAGE {
        return msg;
    }
    let mut head = MAX_STATUS_MESSAGE * 5 / 8;
    while !msg.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = msg.len() - MAX_STATUS_MESSAGE / 4;
    while !msg.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{} [... {} bytes left out ...] {}",
        &msg[..head],
        tail - head,
        &msg[tail..]
    )
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
        .map_err(|e| Status::internal(clip_message(format!("control plane task failed: {e}"))))?
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

/// How far one watcher is behind the plane, in changes.
#[derive(Debug)]
struct WatchLag {
    /// The changes of every event the plane has sent.
    committed: Arc<std::sync::atomic::AtomicU64>,
    /// `committed` when the watcher subscribed, plus the changes of every
    /// event it has received since.
    received: u64,
    /// The most it may be behind ([`MAX_WATCH_LAG_CHANGES`]).
    max: u64,
}

impl WatchLag {
    /// The changes sent and not yet received, if more than the bound.
    fn over(&self) -> Option<u64> {
        let behind = self
            .committed
            .load(std::sync::atomic::Ordering::Acquire)
            .saturating_sub(self.received);
        (behind > self.max).then_some(behind)
    }
}

/// Forwards commits to one watcher until it goes away, falls behind (by
/// [`WATCH_CAPACITY`](crate::plane::WATCH_CAPACITY) events, or by more
/// than `lag.max` changes after taking nothing for [`WATCH_STALL`]), the
/// server shuts down, or the plane is dropped.
async fn pump_watch(
    mut rx: broadcast::Receiver<Arc<CommitEvent>>,
    tx: mpsc::Sender<Result<pb::WatchEvent, Status>>,
    mut closing: watch::Receiver<bool>,
    mut lag: WatchLag,
) {
    let shutting_down = || Status::unavailable("lbd is shutting down; Watch again after it restarts");
    let mut tick = tokio::time::interval(WATCH_LAG_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let item = tokio::select! {
            _ = tx.closed() => return,
            _ = async { closing.wait_for(|&c| c).await.is_ok() } => {
                return end_watch(rx, tx, shutting_down()).await;
            }
            r = rx.recv() => r,
        };
        match item {
            Ok(ev) => {
                lag.received += ev.changes.len() as u64;
                let event = event_to_proto(&ev);
                drop(ev);
                // Room in the stream; or shutdown; or, once the watcher
                // has taken nothing for WATCH_STALL, a lag past its bound.
                let waiting = tokio::time::Instant::now();
                tick.reset();
                let end = loop {
                    tokio::select! {
                        biased;
                        p = tx.reserve() => match p {
                            Ok(p) => {
                                p.send(Ok(event));
                                break None;
                            }
                            Err(_) => return,
                        },
                        _ = async { closing.wait_for(|&c| c).await.is_ok() } => break Some(shutting_down()),
                        _ = tick.tick() => {
                            if waiting.elapsed() >= WATCH_STALL {
                                if let Some(behind) = lag.over() {
                                    tracing::warn!(behind, "gRPC watcher stopped reading and fell behind; ending its stream");
                                    break Some(Status::data_loss(format!(
                                        "watcher took nothing for {} s and fell {behind} changes behind, more than the {} lbd keeps for it; List and Watch again",
                                        WATCH_STALL.as_secs(),
                                        lag.max
                                    )));
                                }
                            }
                        }
                    }
                };
                if let Some(status) = end {
                    return end_watch(rx, tx, status).await;
                }
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(lost = n, "gRPC watcher fell behind; ending its stream");
                let status = Status::data_loss(format!(
                    "watcher fell behind and {n} commit events were lost; List and Watch again"
                ));
                return end_watch(rx, tx, status).await;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Ends a watcher's stream with `status`: its place in the broadcast
/// buffer is given up first, so the events only it still needed are
/// freed, then `status` follows what its stream holds (or the stream ends
/// when the watcher goes away).
async fn end_watch(
    rx: broadcast::Receiver<Arc<CommitEvent>>,
    tx: mpsc::Sender<Result<pb::WatchEvent, Status>>,
    status: Status,
) {
    drop(rx);
    tokio::select! {
        _ = tx.closed() => {}
        _ = tx.send(Err(status)) => {}
    }
}

type WatchStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::WatchEvent, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl LoadBalancer for LoadBalancerService {
    async fn apply(&self, request: Request<pb::ApplyRequest>) -> Result<Response<pb::ApplyResponse>, Status> {
        // Kept through the commit, even if the client goes away.
        let permit = request.extensions().get::<BulkWritePermit>().cloned();
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
            .write(move |p| {
                let _permit = permit;
                p.apply_counted(source, changes, expected)
            })
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
        let permit = request.extensions().get::<BulkWritePermit>().cloned();
        let req = request.into_inner();
        // A resync deletes what its source owns and does not list: a
        // forgotten field must not mean "api" here, as it does in Apply.
        if req.source == i32::from(pb::Source::Unspecified) {
            return Err(invalid(ValidationError::invalid(
                "request",
                "source",
                "required in Resync, which deletes what the source owns and does not list (SOURCE_API for lbctl's objects)",
            )));
        }
        let source = request_source(req.source)?;
        let o = convert::resync_from_proto(&req, source).map_err(invalid)?;
        let out = self
            .write(move |p| {
                let _permit = permit;
                p.resync(source, o.services, o.frontends, o.backends)
            })
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
        let (rx, committed, now) = self.read(|p| Ok(p.subscribe_counted())).await?;
        let (tx, out) = mpsc::channel(WATCH_QUEUE);
        let lag = WatchLag {
            committed,
            received: now,
            max: MAX_WATCH_LAG_CHANGES,
        };
        tokio::spawn(pump_watch(rx, tx, self.closing.clone(), lag));
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
    let lb = RequestLimits::new(
        LoadBalancerServer::new(svc).max_decoding_message_size(MAX_MESSAGE_BYTES),
        MAX_CONCURRENT_WRITES,
    );
    let router = builder
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(lb);
    Ok((router, closer))
}

#[cfg(test)]
#[path = "grpc_tests.rs"]
mod tests;
