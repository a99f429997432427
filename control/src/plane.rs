//! [`ControlPlane`]: the control thread's one object. It owns the desired
//! state and its revision, validates and commits transactions, persists
//! every commit, compiles it into a [`Snapshot`] and publishes that through
//! one `ArcSwap`, notifies watchers, and aggregates the workers' counters.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use lb_dataplane::counters::WorkerCounters;
use lb_dataplane::snapshot::Cidr;
use lb_dataplane::Snapshot;
use tokio::sync::broadcast;

use crate::model::{
    Backend, BackendKey, BackendState, Change, DesiredState, ErrorKind, Frontend, FrontendKey, Service, Source,
    ValidationError,
};

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
    #[error("{object}: owned by source {owner}, not {requested}; resync of {requested} cannot replace it")]
    Conflict {
        /// The object, e.g. `service "default/web"`.
        object: String,
        /// The source that owns it.
        owner: &'static str,
        /// The source being resynced.
        requested: &'static str,
    },
    /// `expected_revision` is not the current revision.
    #[error("stale revision: expected {expected}, current is {current}")]
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
            PlaneError::StateFile { .. } => ErrorKind::Internal,
        }
    }
}

/// Packets, bytes and opened connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowStats {
    /// Packets (both directions).
    pub packets: u64,
    /// Bytes (both directions).
    pub bytes: u64,
    /// Connections opened.
    pub connections: u64,
}

/// Totals of one frontend over all workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontendStats {
    /// The frontend.
    pub key: FrontendKey,
    /// Its service.
    pub service: String,
    /// Totals.
    pub stats: FlowStats,
}

/// Totals of one backend over all workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendStats {
    /// The backend.
    pub key: BackendKey,
    /// Totals.
    pub stats: FlowStats,
}

/// One worker's counters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkerStats {
    /// Index in the order given to [`ControlPlane::register_workers`].
    pub worker: u32,
    /// Frames received.
    pub rx_packets: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Local replies (ARP, echo, NA).
    pub local_replies: u64,
    /// Packets handed to the owning worker.
    pub handed_over: u64,
    /// Connections opened.
    pub new_connections: u64,
    /// DNAT packets forwarded without conntrack entry.
    pub stateless_forwards: u64,
    /// Live conntrack entries.
    pub conntrack_entries: u64,
    /// Conntrack evictions.
    pub conntrack_evictions: u64,
    /// Conntrack expirations.
    pub conntrack_expirations: u64,
    /// Non-zero drops by reason name.
    pub drops: BTreeMap<&'static str, u64>,
}

/// Everything GetStats reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PlaneStats {
    /// Per frontend of the published snapshot, sorted by key.
    pub frontends: Vec<FrontendStats>,
    /// Per backend of the published snapshot, sorted by key.
    pub backends: Vec<BackendStats>,
    /// Per worker.
    pub workers: Vec<WorkerStats>,
    /// Drops by reason name, summed over workers (non-zero only).
    pub drops: BTreeMap<&'static str, u64>,
    /// Live conntrack entries, summed over workers.
    pub conntrack_entries: u64,
    /// The published revision the frontends and backends belong to.
    pub revision: u64,
}

/// The control plane; see the module doc.
#[derive(Debug)]
pub struct ControlPlane {
    node: NodeConfig,
    state: DesiredState,
    revision: u64,
    state_file: Option<PathBuf>,
    current: Arc<ArcSwap<Snapshot>>,
}

impl ControlPlane {
    /// Loads and validates the persisted state (a missing file is an empty
    /// state at revision 0), compiles and publishes it.
    pub fn open(node: NodeConfig, state_file: Option<&Path>) -> Result<ControlPlane, PlaneError> {
        let _ = (node, state_file);
        todo!()
    }

    /// What workers load once per burst.
    pub fn snapshot_handle(&self) -> Arc<ArcSwap<Snapshot>> {
        Arc::clone(&self.current)
    }

    /// The last committed revision.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The revision of the published snapshot.
    pub fn published_revision(&self) -> u64 {
        todo!()
    }

    /// Commit-to-publication time of the last commit.
    pub fn last_publish(&self) -> Duration {
        todo!()
    }

    /// The desired state at [`revision`](Self::revision).
    pub fn state(&self) -> &DesiredState {
        &self.state
    }

    /// Applies `changes` as one transaction.
    pub fn apply(
        &mut self,
        source: Source,
        changes: Vec<Change>,
        expected_revision: Option<u64>,
    ) -> Result<u64, PlaneError> {
        let _ = (source, changes, expected_revision);
        todo!()
    }

    /// Replaces everything `source` owns.
    pub fn resync(
        &mut self,
        source: Source,
        services: Vec<Service>,
        frontends: Vec<Frontend>,
        backends: Vec<Backend>,
    ) -> Result<ResyncOutcome, PlaneError> {
        let _ = (source, services, frontends, backends);
        todo!()
    }

    /// Sets the state of every backend at `addr` (and `port`, and in
    /// `service`, when given). Returns the revision and how many matched.
    pub fn set_backend_state(
        &mut self,
        addr: IpAddr,
        port: Option<u16>,
        service: Option<&str>,
        state: BackendState,
    ) -> Result<(u64, u32), PlaneError> {
        let _ = (addr, port, service, state);
        todo!()
    }

    /// A receiver of every later commit.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<CommitEvent>> {
        todo!()
    }

    /// The workers' counters, for [`stats`](Self::stats).
    pub fn register_workers(&mut self, counters: Vec<Arc<WorkerCounters>>) {
        let _ = counters;
        todo!()
    }

    /// Totals for GetStats.
    pub fn stats(&self) -> PlaneStats {
        todo!()
    }

    /// Drops old snapshots no worker holds any more.
    pub fn collect_garbage(&mut self) {
        todo!()
    }
}
