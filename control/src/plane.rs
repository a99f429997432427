//! [`ControlPlane`]: the control thread's one object. It owns the desired
//! state and its revision, validates and commits transactions, persists
//! every commit, compiles it into a [`Snapshot`] and publishes that through
//! one `ArcSwap`, notifies watchers, and aggregates the workers' counters.
//!
//! # A commit
//!
//! Every write ([`apply`](ControlPlane::apply),
//! [`resync`](ControlPlane::resync),
//! [`set_backend_state`](ControlPlane::set_backend_state)) is one
//! transaction: check `expected_revision`, validate every change, apply them
//! in order (with an undo log, see [`crate::store`]), check the cross-object
//! rules, compile the result into a snapshot (incrementally, see
//! [`crate::compile`]). Only if all of that succeeds: the revision is bumped,
//! the state file written ([`crate::persist`]), the snapshot published and
//! watchers notified. Any failure restores the state, the revision, the
//! counter-slot allocators and the file exactly. A transaction that changes
//! nothing (identical upserts) returns the current revision without bumping
//! it, writing or publishing.
//!
//! Upserts through `apply` record the request's source on the object, so
//! an operator's write takes an object over from, e.g., the k8s sync.
//! Upserts through `apply` and `resync` write a backend's `state` and keep
//! its `operator_state`, which only `set_backend_state` sets or clears.
//!
//! # Publication and the graveyard
//!
//! Workers `load()` the `ArcSwap` once per burst. Old snapshots must die on
//! the control thread, never on a worker (freeing 10,000 rings would stall a
//! packet burst). After each swap the control plane keeps the replaced
//! `Arc<Snapshot>` in a graveyard and [`collect_garbage`](ControlPlane::collect_garbage)
//! drops an entry only when its strong count is 1. Why that is enough:
//! arc-swap's `Guard` is either a full reference or a "debt" (a borrowed
//! slot with no count); when the pointer is swapped, the writer pays every
//! debt on the old value, turning each such guard into a full reference.
//! So after the swap every worker still using the old snapshot holds a
//! counted reference, and the graveyard holds one more. No new reference
//! can appear (loads return the new snapshot), so the count only falls; a
//! worker's drop can never be the last one while the graveyard holds its
//! own, and when the count reaches 1 the graveyard's drop, on the control
//! thread, is the last. `collect_garbage` runs at the end of every commit;
//! lbd's control loop also calls it periodically.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use lb_dataplane::counters::WorkerCounters;
use lb_dataplane::snapshot::Cidr;
use lb_dataplane::Snapshot;
use tokio::sync::broadcast;

use crate::compile::{Compiler, SlotJournal};
use crate::model::{
    Backend, BackendKey, BackendState, Change, DesiredState, ErrorKind, Frontend, FrontendKey, Service,
    Source, ValidationError, MAX_CHANGES,
};
use crate::persist::{PersistError, StateFile};
use crate::stats;
pub use crate::stats::{BackendStats, FlowStats, FrontendStats, PlaneStats, WorkerStats};
use crate::store::{backends_of, validate_state, Txn};

/// One DPDK port's layer-3 configuration (one prefix; list a port once per
/// prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceConfig {
    /// DPDK port id.
    pub port: u16,
    /// The port's MAC.
    pub mac: [u8; 6],
    /// Interface address and connected prefix.
    pub cidr: Cidr,
    /// Default gateway reached through this port, if any.
    pub gateway: Option<IpAddr>,
    /// The port's 802.1Q VLAN id, if its frames are tagged: the same on
    /// every entry of a port (a port tagged on one entry only is refused),
    /// and every port has one or none does.
    pub vlan: Option<u16>,
    /// The port's MTU, the largest IP packet it sends: the same on every
    /// entry of a port; `None` for the default, 1500.
    pub mtu: Option<u16>,
}

/// What the control plane knows about its node: static, from lbd's config
/// file and its ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// This node's name, for the local traffic policy.
    pub node_name: Option<String>,
    /// Per DPDK port prefix.
    pub interfaces: Vec<InterfaceConfig>,
    /// Source addresses for full-NAT.
    pub snat_addresses: Vec<IpAddr>,
    /// The largest Maglev ring.
    pub max_ring_size: u32,
}

impl Default for NodeConfig {
    fn default() -> NodeConfig {
        NodeConfig {
            node_name: None,
            interfaces: Vec::new(),
            snat_addresses: Vec::new(),
            max_ring_size: lb_dataplane::maglev::DEFAULT_RING_SIZE,
        }
    }
}

/// What a [`ControlPlane::resync`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResyncOutcome {
    /// The revision after the resync (unchanged if nothing changed).
    pub revision: u64,
    /// Objects created.
    pub added: u32,
    /// Objects replaced by a different value.
    pub updated: u32,
    /// Objects deleted (a deleted service counts once, its frontends and
    /// backends of the same source count too).
    pub removed: u32,
}

/// What a [`ControlPlane::apply_counted`] did. A request whose changes
/// undid one another (delete a backend, then upsert it as it was) counts
/// them all as unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ApplyOutcome {
    /// The revision after the apply (unchanged if nothing changed).
    pub revision: u64,
    /// Objects created by an upsert.
    pub added: u32,
    /// Objects an upsert replaced by a different value.
    pub updated: u32,
    /// Upserts of an object equal to the one already there.
    pub unchanged: u32,
    /// Objects deleted: a deleted service counts once, and its frontends and
    /// backends count too.
    pub removed: u32,
}

/// One committed revision and what it changed, for watchers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitEvent {
    /// The new revision.
    pub revision: u64,
    /// Who committed it.
    pub source: Source,
    /// Deletes and upserts as committed (upserts carry the recorded source).
    pub changes: Vec<Change>,
}

/// Why a control-plane operation failed. Every variant leaves the state,
/// the revision and the state file as they were.
#[derive(Debug, thiserror::Error)]
pub enum PlaneError {
    /// A change is malformed, refers to something missing, clashes with
    /// another object, or the result does not compile.
    #[error(transparent)]
    Validation(#[from] ValidationError),
    /// Resync found an object of another source with the same identity.
    #[error(
        "{object}: source: owned by {owner}, not {requested}; a resync of {requested} cannot replace it"
    )]
    Conflict {
        /// Where in the request and what, e.g. `services[2] service
        /// "default/web"`.
        object: String,
        /// The source that owns it.
        owner: &'static str,
        /// The source being resynced.
        requested: &'static str,
    },
    /// `expected_revision` is not the current revision.
    #[error("request: expected_revision: {expected} is stale, the current revision is {current}")]
    StaleRevision {
        /// What the caller expected.
        expected: u64,
        /// The current revision.
        current: u64,
    },
    /// The commit could not be written to the state file; nothing changed.
    #[error("state file {path}: cannot persist revision {revision}: {reason}")]
    Persist {
        /// The state file.
        path: PathBuf,
        /// The revision that was not committed.
        revision: u64,
        /// The I/O error.
        reason: String,
    },
    /// The node's own configuration (interfaces, SNAT addresses, node
    /// name: lbd's config file and ports) does not compile, whatever the
    /// desired state. Checked at `open`, before the state file is blamed.
    #[error("node configuration: {0}")]
    NodeConfig(ValidationError),
    /// The state file could not be loaded at `open`.
    #[error("state file {path}: {reason}")]
    StateFile {
        /// The state file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

impl PlaneError {
    /// The gRPC status class.
    pub fn kind(&self) -> ErrorKind {
        match self {
            PlaneError::Validation(e) => e.kind,
            PlaneError::Conflict { .. } | PlaneError::StaleRevision { .. } => ErrorKind::Precondition,
            PlaneError::Persist { .. } => ErrorKind::Unavailable,
            PlaneError::StateFile { .. } | PlaneError::NodeConfig(_) => ErrorKind::Internal,
        }
    }
}

/// How many events a slow watcher may lag before it sees `Lagged`.
pub const WATCH_CAPACITY: usize = 1024;

/// The control plane; see the module doc.
#[derive(Debug)]
pub struct ControlPlane {
    state: DesiredState,
    revision: u64,
    state_file: Option<StateFile>,
    compiler: Compiler,
    current: Arc<ArcSwap<Snapshot>>,
    graveyard: Vec<Arc<Snapshot>>,
    published_revision: u64,
    last_publish: Duration,
    events: broadcast::Sender<Arc<CommitEvent>>,
    /// Changes in all the events sent so far: a watcher's lag in changes
    /// is this less what it has received ([`ControlPlane::subscribe_counted`]).
    events_changes: Arc<AtomicU64>,
    workers: Vec<Arc<WorkerCounters>>,
    /// Counter values a reused slot had when it was given to its current
    /// object, subtracted in [`stats`](ControlPlane::stats).
    frontend_base: HashMap<u32, FlowStats>,
    backend_base: HashMap<u32, FlowStats>,
}

fn state_file_error(path: &Path, e: PersistError) -> PlaneError {
    let reason = match e {
        PersistError::Read { source, .. } => format!("cannot read: {source}"),
        PersistError::Corrupt { reason, .. } => reason,
        PersistError::Write { source, .. } => format!("cannot write: {source}"),
        PersistError::Locked { lock, .. } => {
            format!("in use by another lbd (lock {} held)", lock.display())
        }
    };
    PlaneError::StateFile {
        path: path.to_path_buf(),
        reason,
    }
}

/// The objects one source is to own, for [`ControlPlane::open_with`].
#[derive(Debug, Clone, Default)]
pub struct InitialResync {
    /// The source resynced.
    pub source: Source,
    /// Its services.
    pub services: Vec<Service>,
    /// Its frontends.
    pub frontends: Vec<Frontend>,
    /// Its backends.
    pub backends: Vec<Backend>,
}

/// What a resync is to do to a state, checked against it.
struct ResyncPlan {
    /// Deletes first, then upserts.
    changes: Vec<Change>,
    /// `added` and `updated` (the rest is known after the commit).
    outcome: ResyncOutcome,
    /// Frontends deleted and re-created in another service.
    moved_frontends: u32,
    /// Which request list each upsert of `changes` comes from.
    lists: ResyncLists,
}

/// The service that the frontend or backend `object` (as
/// [`Change::object_name`] names it) belongs to in `state`.
fn service_of<'a>(state: &'a DesiredState, object: &str) -> Option<&'a str> {
    if object.starts_with("frontend ") {
        let f = state
            .frontends
            .values()
            .find(|f| format!("frontend {}", f.key) == object)?;
        return Some(&f.service);
    }
    if object.starts_with("backend ") {
        let b = state
            .backends
            .values()
            .find(|b| format!("backend {}", b.key) == object)?;
        return Some(&b.key.service);
    }
    None
}

impl ResyncPlan {
    /// `services[i]`, `frontends[i]` or `backends[i]`: the request item
    /// that lists `object` (as [`Change::object_name`] names it), whether
    /// the resync changes it or not; `None` for an object it does not list.
    fn listed(&self, object: &str) -> Option<String> {
        let first = self.lists.first_upsert;
        let i = self.changes[first..]
            .iter()
            .position(|c| c.object_name() == object)?;
        self.lists.label(first + i)
    }
}

/// The layout of a resync's changes: deletes, then the request's services,
/// frontends and backends in order.
#[derive(Debug, Clone, Copy)]
struct ResyncLists {
    first_upsert: usize,
    services: usize,
    frontends: usize,
}

impl ResyncLists {
    /// `services[i]`, `frontends[i]` or `backends[i]` for the change at
    /// `index`; `None` for a delete (of something the request left out).
    fn label(&self, index: usize) -> Option<String> {
        let i = index.checked_sub(self.first_upsert)?;
        Some(if i < self.services {
            format!("services[{i}]")
        } else if i < self.services + self.frontends {
            format!("frontends[{}]", i - self.services)
        } else {
            format!("backends[{}]", i - self.services - self.frontends)
        })
    }
}

/// Which request item each committed change of a transaction came from:
/// `(end, index)` entries, in order, saying that the committed changes
/// before `end` (and from the previous entry's `end`) came from item
/// `index` of the request (cascaded deletes with the delete that caused
/// them).
#[derive(Debug, Default)]
struct Origins(Vec<(usize, u32)>);

impl Origins {
    /// Records that the changes `txn` committed since the last call came
    /// from item `index`.
    fn note(&mut self, txn: &Txn<'_>, index: usize) {
        let n = txn.committed.len();
        if self.0.last().map_or(0, |o| o.0) < n {
            self.0.push((n, index as u32));
        }
    }

    /// The request item that last wrote or deleted `object` (as
    /// [`Change::object_name`] names it).
    fn locate(&self, committed: &[Change], object: &str) -> Option<u32> {
        let j = committed.iter().rposition(|c| c.object_name() == object)?;
        self.index_of(j)
    }

    /// The request item behind the committed change `j`.
    fn index_of(&self, j: usize) -> Option<u32> {
        self.0.iter().find(|o| o.0 > j).map(|o| o.1)
    }

    /// The request item to name for an error on `object` in `state`: the
    /// one that last wrote it; else, for a frontend or backend, the one
    /// that last wrote its service (a mode that makes the service's
    /// frontends impossible); else, for a service, the one that last wrote
    /// a frontend or backend of it (a frontend of a family its source
    /// ranges do not cover).
    fn blame(&self, committed: &[Change], state: &DesiredState, object: &str) -> Option<u32> {
        self.locate(committed, object)
            .or_else(|| {
                let svc = service_of(state, object)?;
                self.locate(committed, &format!("service {svc:?}"))
            })
            .or_else(|| {
                let j = committed.iter().rposition(|c| {
                    let svc = match c {
                        Change::UpsertFrontend(f) => &f.service,
                        Change::UpsertBackend(b) => &b.key.service,
                        _ => return false,
                    };
                    format!("service {svc:?}") == object
                })?;
                self.index_of(j)
            })
    }

    /// `e`, an error on the state `txn` made, prefixed with what `label`
    /// makes of the request item to blame ([`Origins::blame`]), if any.
    fn label(
        &self,
        txn: &Txn<'_>,
        e: ValidationError,
        label: &impl Fn(u32) -> Option<String>,
    ) -> ValidationError {
        match self.blame(&txn.committed, txn.state(), &e.object).and_then(label) {
            Some(prefix) => e.within(&prefix),
            None => e,
        }
    }
}

/// The operator's state of the backend at `key`: an upsert through Apply
/// or Resync writes the source's `state` and keeps it.
fn operator_state(state: &DesiredState, key: &BackendKey) -> Option<BackendState> {
    state.backends.get(key).and_then(|b| b.operator_state)
}

/// The deletes among committed changes (cascades included).
fn deletes(committed: &[Change]) -> u32 {
    committed
        .iter()
        .filter(|c| {
            matches!(
                c,
                Change::DeleteService(_) | Change::DeleteFrontend(_) | Change::DeleteBackend(_)
            )
        })
        .count() as u32
}

/// Validates a resync of `source` against `state` and lists its changes
/// (see [`ControlPlane::resync`]).
fn plan_resync(
    state: &DesiredState,
    source: Source,
    services: Vec<Service>,
    frontends: Vec<Frontend>,
    backends: Vec<Backend>,
) -> Result<ResyncPlan, PlaneError> {
    let services: Vec<Service> = services.into_iter().map(|s| Service { source, ..s }).collect();
    let frontends: Vec<Frontend> = frontends.into_iter().map(|f| Frontend { source, ..f }).collect();
    let backends: Vec<Backend> = backends
        .into_iter()
        .map(|b| Backend {
            source,
            operator_state: operator_state(state, &b.key),
            ..b
        })
        .collect();
    let conflict = |list: &str, i: usize, object: String, owner: Source| PlaneError::Conflict {
        object: format!("{list}[{i}] {object}"),
        owner: owner.name(),
        requested: source.name(),
    };
    let twice = |list: &str, i: usize, object: String| {
        PlaneError::from(ValidationError::invalid(
            format!("{list}[{i}] {object}"),
            "key",
            "listed twice",
        ))
    };
    let mut svc_names = BTreeSet::new();
    for (i, s) in services.iter().enumerate() {
        s.validate().map_err(|e| e.within(&format!("services[{i}]")))?;
        if !svc_names.insert(s.name.as_str()) {
            return Err(twice("services", i, format!("service {:?}", s.name)));
        }
        if let Some(old) = state.services.get(&s.name).filter(|o| o.source != source) {
            return Err(conflict(
                "services",
                i,
                format!("service {:?}", s.name),
                old.source,
            ));
        }
    }
    let mut fe_keys = BTreeSet::new();
    for (i, f) in frontends.iter().enumerate() {
        f.validate().map_err(|e| e.within(&format!("frontends[{i}]")))?;
        if !fe_keys.insert(f.key) {
            return Err(twice("frontends", i, format!("frontend {}", f.key)));
        }
        if let Some(old) = state.frontends.get(&f.key).filter(|o| o.source != source) {
            return Err(conflict(
                "frontends",
                i,
                format!("frontend {}", f.key),
                old.source,
            ));
        }
    }
    let mut be_keys = BTreeSet::new();
    for (i, b) in backends.iter().enumerate() {
        b.validate().map_err(|e| e.within(&format!("backends[{i}]")))?;
        if !be_keys.insert(&b.key) {
            return Err(twice("backends", i, format!("backend {}", b.key)));
        }
        if let Some(old) = state.backends.get(&b.key).filter(|o| o.source != source) {
            return Err(conflict("backends", i, format!("backend {}", b.key), old.source));
        }
    }
    let st = state;
    let mut out = ResyncOutcome::default();
    for s in &services {
        match st.services.get(&s.name) {
            None => out.added += 1,
            Some(o) if o != s => out.updated += 1,
            Some(_) => {}
        }
    }
    for f in &frontends {
        match st.frontends.get(&f.key) {
            None => out.added += 1,
            Some(o) if o != f => out.updated += 1,
            Some(_) => {}
        }
    }
    for b in &backends {
        match st.backends.get(&b.key) {
            None => out.added += 1,
            Some(o) if o != b => out.updated += 1,
            Some(_) => {}
        }
    }
    // Deletes first (frontends and backends, then services), so that a
    // cascade never deletes something listed twice.
    let mut changes: Vec<Change> = Vec::new();
    let mut moved_frontends = 0u32;
    let listed: HashMap<FrontendKey, &str> = frontends.iter().map(|f| (f.key, f.service.as_str())).collect();
    for f in st.frontends.values().filter(|f| f.source == source) {
        let moved = listed.get(&f.key).is_some_and(|s| *s != f.service);
        if !fe_keys.contains(&f.key) || moved {
            moved_frontends += u32::from(moved);
            changes.push(Change::DeleteFrontend(f.key));
        }
    }
    for b in st.backends.values().filter(|b| b.source == source) {
        if !be_keys.contains(&b.key) {
            changes.push(Change::DeleteBackend(b.key.clone()));
        }
    }
    for s in st.services.values().filter(|s| s.source == source) {
        if !svc_names.contains(s.name.as_str()) {
            changes.push(Change::DeleteService(s.name.clone()));
        }
    }
    let lists = ResyncLists {
        first_upsert: changes.len(),
        services: services.len(),
        frontends: frontends.len(),
    };
    changes.extend(services.into_iter().map(Change::UpsertService));
    changes.extend(frontends.into_iter().map(Change::UpsertFrontend));
    changes.extend(backends.into_iter().map(Change::UpsertBackend));
    Ok(ResyncPlan {
        changes,
        outcome: out,
        moved_frontends,
        lists,
    })
}

/// A commit the state file refused: puts the file back at `prev_revision`
/// (`prev_state`) as far as it can, logs, and says why.
fn persist_failed(
    file: &mut StateFile,
    prev_revision: u64,
    prev_state: &DesiredState,
    revision: u64,
    e: PersistError,
) -> PlaneError {
    if let Err(e) = file.restore(prev_revision, prev_state) {
        tracing::error!(
            revision,
            "the state file may still hold the rejected commit, which a restart before the next commit would apply: {e}"
        );
    }
    let (path, reason) = match e {
        PersistError::Write { path, source } | PersistError::Read { path, source } => {
            (path, source.to_string())
        }
        PersistError::Corrupt { path, reason } => (path, reason),
        // Not from a commit (the lock is taken at open), but said alike.
        PersistError::Locked { path, lock } => (
            path,
            format!("in use by another lbd (lock {} held)", lock.display()),
        ),
    };
    tracing::error!(path = %path.display(), revision, %reason, "commit rejected: state file not written");
    PlaneError::Persist {
        path,
        revision,
        reason,
    }
}

impl ControlPlane {
    /// Loads and validates the persisted state, compiles and publishes it.
    /// A missing file (first start) is an empty state at revision 0; an
    /// unreadable, corrupt or invalid one, or one that does not compile for
    /// this node, is [`PlaneError::StateFile`] naming the file: it is never
    /// replaced by an empty state. A node configuration that does not
    /// compile even with an empty state is [`PlaneError::NodeConfig`],
    /// whatever the file holds. Without `state_file` nothing is persisted.
    pub fn open(node: NodeConfig, state_file: Option<&Path>) -> Result<ControlPlane, PlaneError> {
        Self::open_with(node, state_file, None).map(|(p, _)| p)
    }

    /// [`open`](Self::open), with a first resync applied to the loaded
    /// state before anything is compiled: lbd's `config` source at start.
    /// The state file was compiled for the node configuration of the last
    /// run; the objects of the source whose file changed with that
    /// configuration (a service that needed the SNAT address just removed)
    /// must be replaced before the result is judged. So the loaded state
    /// and the resync are compiled once, together, and committed as one
    /// revision (none if the resync changed nothing).
    ///
    /// Errors: as `open` for the node configuration and a file that cannot
    /// be loaded or is invalid; the resync's own errors (malformed objects,
    /// conflicts, a missing service) as [`resync`](Self::resync) returns
    /// them. A result that does not compile is blamed by the object that
    /// fails:
    /// - one the resync lists, whether it changed it or not, is the
    ///   resync's error naming its entry (`frontends[0] frontend
    ///   192.0.2.1:80/tcp: ...`): the entry or the node configuration, both
    ///   the caller's configuration, is at fault (a full-NAT service the
    ///   state file already holds, on a node that just lost its SNAT
    ///   address, is the configuration's error, not the file's);
    /// - one only the state file holds is the resync's error (unprefixed)
    ///   if the loaded state alone compiles, since the resync broke it, and
    ///   otherwise [`PlaneError::StateFile`].
    ///
    /// Nothing is written unless everything succeeds.
    pub fn open_with(
        node: NodeConfig,
        state_file: Option<&Path>,
        initial: Option<InitialResync>,
    ) -> Result<(ControlPlane, Option<ResyncOutcome>), PlaneError> {
        let (_, _) = Compiler::new(node.clone())
            .compile(&DesiredState::default(), 0, &Snapshot::empty(), None)
            .map_err(PlaneError::NodeConfig)?;
        let (mut file, (revision, mut state)) = match state_file {
            None => (None, (0, DesiredState::default())),
            Some(p) => match StateFile::open(p) {
                Ok((f, Some(x))) => (Some(f), x),
                Ok((f, None)) => {
                    tracing::info!(path = %p.display(), "no state file yet: starting with an empty state at revision 0");
                    (Some(f), (0, DesiredState::default()))
                }
                Err(e) => return Err(state_file_error(p, e)),
            },
        };
        let invalid = |reason: String| PlaneError::StateFile {
            path: state_file.map_or_else(|| PathBuf::from("(none)"), Path::to_path_buf),
            reason,
        };
        validate_state(&state).map_err(|e| invalid(format!("invalid state: {e}")))?;
        let start = Instant::now();
        let source = initial.as_ref().map(|i| i.source);
        let plan = initial
            .map(|i| plan_resync(&state, i.source, i.services, i.frontends, i.backends))
            .transpose()?;
        let mut txn = Txn::new(&mut state);
        let mut outcome = None;
        if let Some(plan) = &plan {
            // Cloned: the plan names the entry of a listed object that
            // does not compile, changed or not.
            let applied = plan
                .changes
                .iter()
                .try_for_each(|c| txn.change(c.clone()))
                .and_then(|()| txn.check());
            if let Err(e) = applied {
                txn.rollback();
                return Err(e.into());
            }
            outcome = Some(ResyncOutcome {
                removed: deletes(&txn.committed).saturating_sub(plan.moved_frontends),
                ..plan.outcome
            });
        }
        let changed = !txn.is_empty();
        let next = revision + u64::from(changed);
        let mut compiler = Compiler::new(node.clone());
        let (snap, journal) = match compiler.compile(txn.state(), next, &Snapshot::empty(), None) {
            Ok(x) => x,
            Err(e) => {
                // The object, or else the service it belongs to: a frontend
                // an operator added to a config service fails as well when
                // the node config makes that service impossible (full-NAT
                // without SNAT), and the config is what changed.
                let listed = plan.as_ref().and_then(|p| {
                    p.listed(&e.object).or_else(|| {
                        let svc = service_of(txn.state(), &e.object)?;
                        p.listed(&format!("service {svc:?}"))
                    })
                });
                txn.rollback();
                // Whose object fails: the resync's (changed or not), or
                // one only the loaded state holds?
                return Err(match listed {
                    Some(item) => e.within(&item).into(),
                    None if changed
                        && Compiler::new(node)
                            .compile(&state, revision, &Snapshot::empty(), None)
                            .is_ok() =>
                    {
                        e.into()
                    }
                    None if changed => invalid(format!(
                        "state does not compile for this node, even with the {} source's objects replaced: {e}",
                        source.map_or("", Source::name)
                    )),
                    None => invalid(format!("state does not compile for this node: {e}")),
                });
            }
        };
        if let (true, Some(f)) = (changed, &mut file) {
            if let Err(e) = f.commit(next, txn.state(), &txn.committed) {
                txn.rollback();
                return Err(persist_failed(f, revision, &state, next, e));
            }
        }
        let _ = txn.commit();
        compiler.commit(journal);
        let (events, _) = broadcast::channel(WATCH_CAPACITY);
        if let Some(o) = &mut outcome {
            o.revision = next;
        }
        tracing::info!(
            revision = next,
            services = state.services.len(),
            frontends = state.frontends.len(),
            backends = state.backends.len(),
            "desired state loaded and published"
        );
        let plane = ControlPlane {
            state,
            revision: next,
            state_file: file,
            compiler,
            current: Arc::new(ArcSwap::from_pointee(snap)),
            graveyard: Vec::new(),
            published_revision: next,
            last_publish: start.elapsed(),
            events,
            events_changes: Arc::new(AtomicU64::new(0)),
            workers: Vec::new(),
            frontend_base: HashMap::new(),
            backend_base: HashMap::new(),
        };
        Ok((plane, outcome))
    }

    /// What workers load once per burst.
    pub fn snapshot_handle(&self) -> Arc<ArcSwap<Snapshot>> {
        Arc::clone(&self.current)
    }

    /// The published snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The node configuration.
    pub fn node(&self) -> &NodeConfig {
        self.compiler.node()
    }

    /// The last committed revision.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The revision of the published snapshot. Equal to
    /// [`revision`](Self::revision): a commit is published before it returns.
    pub fn published_revision(&self) -> u64 {
        self.published_revision
    }

    /// Commit-to-publication time of the last commit: from the start of the
    /// transaction to the snapshot swap (validation, compilation, state
    /// file write included).
    pub fn last_publish(&self) -> Duration {
        self.last_publish
    }

    /// The desired state at [`revision`](Self::revision).
    pub fn state(&self) -> &DesiredState {
        &self.state
    }

    /// How many replaced snapshots are still held by some worker.
    pub fn graveyard_len(&self) -> usize {
        self.graveyard.len()
    }

    /// Applies `changes` in order as one transaction (see the module doc).
    /// Upserted objects record `source`. Errors name `changes[i]`. Returns
    /// the revision; [`apply_counted`](Self::apply_counted) says what
    /// changed too.
    pub fn apply(
        &mut self,
        source: Source,
        changes: Vec<Change>,
        expected_revision: Option<u64>,
    ) -> Result<u64, PlaneError> {
        self.apply_counted(source, changes, expected_revision)
            .map(|o| o.revision)
    }

    /// [`apply`](Self::apply), with what it added, updated, left unchanged
    /// and removed.
    pub fn apply_counted(
        &mut self,
        source: Source,
        changes: Vec<Change>,
        expected_revision: Option<u64>,
    ) -> Result<ApplyOutcome, PlaneError> {
        if changes.len() > MAX_CHANGES {
            return Err(ValidationError::invalid(
                "request",
                "changes",
                format!("{} changes, at most {MAX_CHANGES}", changes.len()),
            )
            .into());
        }
        self.check_revision(expected_revision)?;
        for (i, c) in changes.iter().enumerate() {
            c.validate().map_err(|e| e.within(&format!("changes[{i}]")))?;
        }
        let (before, n) = (self.revision, changes.len() as u32);
        let mut out = ApplyOutcome::default();
        out.revision = self.commit(
            source,
            |txn| {
                let mut origins = Origins::default();
                for (i, c) in changes.into_iter().enumerate() {
                    let existed = match &c {
                        Change::UpsertService(s) => txn.state().services.contains_key(&s.name),
                        Change::UpsertFrontend(f) => txn.state().frontends.contains_key(&f.key),
                        Change::UpsertBackend(b) => txn.state().backends.contains_key(&b.key),
                        _ => false,
                    };
                    let upsert = !matches!(
                        c,
                        Change::DeleteService(_) | Change::DeleteFrontend(_) | Change::DeleteBackend(_)
                    );
                    let before = txn.committed.len();
                    let c = match c {
                        Change::UpsertService(s) => Change::UpsertService(Service { source, ..s }),
                        Change::UpsertFrontend(f) => Change::UpsertFrontend(Frontend { source, ..f }),
                        Change::UpsertBackend(b) => Change::UpsertBackend(Backend {
                            source,
                            operator_state: operator_state(txn.state(), &b.key),
                            ..b
                        }),
                        other => other,
                    };
                    txn.change(c).map_err(|e| e.within(&format!("changes[{i}]")))?;
                    let made = (txn.committed.len() - before) as u32;
                    match (upsert, made, existed) {
                        (true, 0, _) => out.unchanged += 1,
                        (true, _, true) => out.updated += 1,
                        (true, _, false) => out.added += 1,
                        (false, n, _) => out.removed += n,
                    }
                    origins.note(txn, i);
                }
                Ok(origins)
            },
            |i| Some(format!("changes[{i}]")),
        )?;
        if out.revision == before {
            // Changes that undid one another: the state is as it was.
            return Ok(ApplyOutcome {
                revision: before,
                unchanged: n,
                ..ApplyOutcome::default()
            });
        }
        Ok(out)
    }

    /// Replaces exactly what `source` owns by the given objects (which
    /// record `source`): adds what is new, updates what differs, deletes
    /// what is missing (a deleted service takes its frontends and backends
    /// with it, whatever their source). An object of another source with
    /// the same identity is [`PlaneError::Conflict`] and nothing changes.
    /// A frontend moving between two services of `source` is deleted and
    /// re-created. `removed` counts every deleted object, cascades included.
    pub fn resync(
        &mut self,
        source: Source,
        services: Vec<Service>,
        frontends: Vec<Frontend>,
        backends: Vec<Backend>,
    ) -> Result<ResyncOutcome, PlaneError> {
        let plan = plan_resync(&self.state, source, services, frontends, backends)?;
        let lists = plan.lists;
        let mut removed = 0u32;
        let revision = self.commit(
            source,
            |txn| {
                let mut origins = Origins::default();
                for (i, c) in plan.changes.into_iter().enumerate() {
                    txn.change(c)?;
                    origins.note(txn, i);
                }
                removed = deletes(&txn.committed);
                Ok(origins)
            },
            |i| lists.label(i as usize),
        )?;
        // A moved frontend is deleted and re-created: an update, not a removal.
        Ok(ResyncOutcome {
            revision,
            removed: removed.saturating_sub(plan.moved_frontends),
            ..plan.outcome
        })
    }
    /// Sets the operator's state of every backend at `addr` (and `port`,
    /// and in `service`, when given), keeping each backend's source and
    /// source state; the commit's source is [`Source::Api`]. The
    /// operator's state takes precedence over the source's and survives
    /// its Apply and Resync (and so lbd's restarts, which resync the
    /// `config` source) until the operator sets another: `Active` on a
    /// backend whose source says active clears it (the backend follows its
    /// source again), on one whose source says otherwise holds it active.
    /// Returns the revision and how many backends matched (also those
    /// already so: then nothing is committed). No match is NOT_FOUND.
    pub fn set_backend_state(
        &mut self,
        addr: IpAddr,
        port: Option<u16>,
        service: Option<&str>,
        state: BackendState,
    ) -> Result<(u64, u32), PlaneError> {
        let matches = |b: &&Backend| b.key.addr == addr && port.is_none_or(|p| b.key.port == p);
        let matched: Vec<Backend> = match service {
            Some(s) => backends_of(&self.state, s).filter(matches).cloned().collect(),
            None => self.state.backends.values().filter(matches).cloned().collect(),
        };
        if matched.is_empty() {
            let mut what = match port {
                Some(p) => crate::model::endpoint(addr, p),
                None => addr.to_string(),
            };
            if let Some(s) = service {
                what = format!("{what} of {s}");
            }
            return Err(ValidationError {
                kind: ErrorKind::NotFound,
                object: format!("backend {what}"),
                field: "address".into(),
                message: "no backend matches".into(),
            }
            .into());
        }
        let n = matched.len() as u32;
        let revision = self.commit(
            Source::Api,
            |txn| {
                for b in matched {
                    // Active where the source says active too: no hold, the
                    // backend follows its source again.
                    let operator_state =
                        (state != BackendState::Active || b.state != BackendState::Active).then_some(state);
                    txn.upsert_backend(Backend { operator_state, ..b })?;
                }
                Ok(Origins::default())
            },
            |_| None,
        )?;
        Ok((revision, n))
    }

    /// A receiver of every later commit (none is sent for a transaction
    /// that changed nothing). A receiver more than [`WATCH_CAPACITY`]
    /// events behind gets `Lagged` and should resynchronise with a listing.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<CommitEvent>> {
        self.events.subscribe()
    }

    /// Receivers subscribed now (gRPC watchers among them).
    pub fn watchers(&self) -> usize {
        self.events.receiver_count()
    }

    /// [`subscribe`](Self::subscribe), with the count of the changes in
    /// every event sent so far (`committed`, which each commit raises by
    /// its event's changes before it sends it) and its value now: the
    /// changes a receiver has yet to receive are `committed` less that
    /// value less the changes of the events it has received.
    pub fn subscribe_counted(&self) -> (broadcast::Receiver<Arc<CommitEvent>>, Arc<AtomicU64>, u64) {
        let committed = Arc::clone(&self.events_changes);
        let now = committed.load(Ordering::Acquire);
        (self.events.subscribe(), committed, now)
    }

    /// Publishes `neighbors` (resolved next hops: address, MAC) into the
    /// snapshot the workers read, and makes every later compile carry them.
    /// They are the node's runtime state, not desired state: no revision,
    /// no state file, no Watch event. An invalid set (an address outside
    /// every port's prefix, a non-unicast MAC, an address twice with two
    /// MACs) is refused and nothing changes; lbd only gives addresses it
    /// resolved on a connected prefix.
    pub fn set_neighbors(&mut self, neighbors: Vec<(IpAddr, [u8; 6])>) -> Result<(), PlaneError> {
        let prev = self.current.load_full();
        let next = prev
            .with_neighbors(&neighbors)
            .map_err(|e| PlaneError::from(crate::compile::build_error(e)))?;
        self.compiler.set_neighbors(neighbors);
        drop(prev);
        let old = self.current.swap(Arc::new(next));
        self.graveyard.push(old);
        self.collect_garbage();
        Ok(())
    }

    /// The neighbors last given to [`set_neighbors`](Self::set_neighbors).
    pub fn neighbors(&self) -> &[(IpAddr, [u8; 6])] {
        self.compiler.neighbors()
    }

    /// The workers' counters, in worker order, for [`stats`](Self::stats).
    pub fn register_workers(&mut self, counters: Vec<Arc<WorkerCounters>>) {
        self.workers = counters;
        self.frontend_base.clear();
        self.backend_base.clear();
    }

    /// Drops replaced snapshots that no worker holds any more (see the
    /// module doc).
    pub fn collect_garbage(&mut self) {
        self.graveyard.retain(|s| Arc::strong_count(s) > 1);
    }

    fn check_revision(&self, expected: Option<u64>) -> Result<(), PlaneError> {
        match expected {
            Some(e) if e != self.revision => Err(PlaneError::StaleRevision {
                expected: e,
                current: self.revision,
            }),
            _ => Ok(()),
        }
    }

    /// Runs `f` as one transaction and, if it changed anything, compiles,
    /// persists, publishes and notifies (see the module doc).
    ///
    /// `f` returns where its changes came from ([`Origins`]); a compile
    /// error on an object one of them wrote is prefixed with what `label`
    /// makes of its request index (`changes[3]`), as validation errors are.
    fn commit(
        &mut self,
        source: Source,
        f: impl FnOnce(&mut Txn<'_>) -> Result<Origins, ValidationError>,
        label: impl Fn(u32) -> Option<String>,
    ) -> Result<u64, PlaneError> {
        let start = Instant::now();
        let prev = self.current.load_full();
        let mut txn = Txn::new(&mut self.state);
        let origins = match f(&mut txn) {
            Ok(o) => o,
            Err(e) => {
                txn.rollback();
                return Err(e.into());
            }
        };
        // A cross-object rule broken by an object the request wrote names
        // its request index, as the compile's errors below do.
        if let Err(e) = txn.check() {
            let e = origins.label(&txn, e, &label);
            txn.rollback();
            return Err(e.into());
        }
        if txn.is_empty() {
            let _ = txn.commit();
            return Ok(self.revision);
        }
        let revision = self.revision + 1;
        let (snap, journal) = match self
            .compiler
            .compile(txn.state(), revision, &prev, Some(&txn.delta))
        {
            Ok(x) => x,
            Err(e) => {
                let e = origins.label(&txn, e, &label);
                txn.rollback();
                return Err(e.into());
            }
        };
        if let Some(file) = &mut self.state_file {
            if let Err(e) = file.commit(revision, txn.state(), &txn.committed) {
                self.compiler.rollback(journal);
                txn.rollback();
                return Err(persist_failed(file, self.revision, &self.state, revision, e));
            }
        }
        let (changes, _) = txn.commit();
        self.record_baselines(&journal);
        self.compiler.commit(journal);
        drop(prev);
        let old = self.current.swap(Arc::new(snap));
        self.graveyard.push(old);
        self.revision = revision;
        self.published_revision = revision;
        self.last_publish = start.elapsed();
        tracing::debug!(
            revision,
            source = source.name(),
            changes = changes.len(),
            publish_us = self.last_publish.as_micros() as u64,
            "committed"
        );
        // Raised first: a receiver never counts more changes received
        // than sent.
        self.events_changes
            .fetch_add(changes.len() as u64, Ordering::AcqRel);
        // No receiver is not an error.
        let _ = self.events.send(Arc::new(CommitEvent {
            revision,
            source,
            changes,
        }));
        self.collect_garbage();
        Ok(revision)
    }

    /// Totals for GetStats: per frontend and backend of the published
    /// snapshot (slots mapped back to objects through it), per worker, drops
    /// by reason name, conntrack entries.
    pub fn stats(&self) -> PlaneStats {
        stats::collect(
            &self.current.load(),
            &self.workers,
            &self.frontend_base,
            &self.backend_base,
        )
    }

    /// Remembers what the workers counted so far in slots just given to a
    /// new object (a reused slot still holds its previous owner's counts).
    fn record_baselines(&mut self, journal: &SlotJournal) {
        if self.workers.is_empty() {
            return;
        }
        let fe: Vec<u32> = journal.new_frontend_slots(&self.compiler).collect();
        let be: Vec<u32> = journal.new_backend_slots(&self.compiler).collect();
        if fe.is_empty() && be.is_empty() {
            return;
        }
        let (fe_now, be_now) = stats::slot_totals(&self.workers);
        for s in fe {
            self.frontend_base
                .insert(s, fe_now.get(&s).copied().unwrap_or_default());
        }
        for s in be {
            self.backend_base
                .insert(s, be_now.get(&s).copied().unwrap_or_default());
        }
    }
}

#[cfg(test)]
#[path = "plane_tests.rs"]
pub(crate) mod tests;

#[cfg(test)]
#[path = "plane_history_tests.rs"]
mod history_tests;

#[cfg(test)]
#[path = "plane_state_file_tests.rs"]
mod state_file_tests;
