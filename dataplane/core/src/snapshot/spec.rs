//! The specs the control plane hands to [`SnapshotBuilder`](super::SnapshotBuilder):
//! plain data with public fields and constructors for the common defaults.
//! They carry no invariant; the builder validates them.

use std::net::IpAddr;

use super::{BackendState, Cidr, ForwardMode, FrontendKind, SessionAffinity, TrafficPolicy};
use crate::flow::Proto;

/// A service as the control plane describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    /// `namespace/name`, each part a DNS label: 1 to 63 of `a-z`, `0-9`,
    /// `-`, starting and ending with a letter or digit.
    pub name: String,
    /// DNAT or full-NAT.
    pub mode: ForwardMode,
    /// Cluster or node-local.
    pub traffic_policy: TrafficPolicy,
    /// Session affinity.
    pub affinity: SessionAffinity,
    /// Allowed client prefixes; empty allows every client. When not empty,
    /// each frontend's family needs at least one range.
    pub source_ranges: Vec<Cidr>,
}

impl ServiceSpec {
    /// A DNAT, cluster-policy service without affinity or source ranges.
    pub fn new(name: impl Into<String>) -> ServiceSpec {
        ServiceSpec {
            name: name.into(),
            mode: ForwardMode::default(),
            traffic_policy: TrafficPolicy::default(),
            affinity: SessionAffinity::default(),
            source_ranges: Vec::new(),
        }
    }
}

/// A frontend as the control plane describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrontendSpec {
    /// The VIP: unicast, not unspecified.
    pub addr: IpAddr,
    /// Not 0.
    pub port: u16,
    /// TCP or UDP.
    pub proto: Proto,
    /// Service type.
    pub kind: FrontendKind,
    /// Counter slot; `None` lets the builder choose (see module doc).
    pub stats_slot: Option<u32>,
}

impl FrontendSpec {
    /// A frontend with an automatic counter slot.
    pub fn new(addr: IpAddr, port: u16, proto: Proto, kind: FrontendKind) -> FrontendSpec {
        FrontendSpec {
            addr,
            port,
            proto,
            kind,
            stats_slot: None,
        }
    }
}

/// A backend as the control plane describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendSpec {
    /// Unicast, not unspecified.
    pub addr: IpAddr,
    /// Not 0.
    pub port: u16,
    /// `0..=MAX_WEIGHT`; 0 keeps the backend listed but out of the ring.
    pub weight: u32,
    /// Only `Active` backends enter the ring.
    pub state: BackendState,
    /// Node name, for [`TrafficPolicy::Local`].
    pub node: Option<String>,
    /// Zone name.
    pub zone: Option<String>,
    /// Counter slot; `None` lets the builder choose (see module doc).
    pub stats_slot: Option<u32>,
}

impl BackendSpec {
    /// An active backend of weight 1 with an automatic counter slot.
    pub fn new(addr: IpAddr, port: u16) -> BackendSpec {
        BackendSpec {
            addr,
            port,
            weight: 1,
            state: BackendState::Active,
            node: None,
            zone: None,
            stats_slot: None,
        }
    }
}
