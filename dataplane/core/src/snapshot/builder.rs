//! [`SnapshotBuilder`]: validates the control plane's desired state and
//! turns it into a [`Snapshot`].
//!
//! `service`, `frontend` and `backend` validate what they can see at once
//! and return the error immediately; what needs the whole picture (duplicate
//! backends, SNAT/VIP overlap, full-NAT without SNAT address, interfaces,
//! gateways, neighbors, rings) is checked by [`SnapshotBuilder::build`]. No
//! input makes the builder panic.
//!
//! # Structural sharing
//!
//! With [`reuse_from`](SnapshotBuilder::reuse_from), a service whose name,
//! ring size and eligible backends (address, port, weight) equal those of a
//! service in the previous snapshot takes that snapshot's `Arc<MaglevRing>`
//! instead of building one. The eligible backends are ordered by (address,
//! port) before the ring is built, so ring indices mean the same backends
//! whatever order or other (non-eligible) backends the caller lists. One
//! backend change among 10,000 services rebuilds one ring. Each address
//! family has its own ring, shared on its own.
//!
//! A caller that knows which services did not change at all can go further
//! with [`keep_service`](SnapshotBuilder::keep_service): the previous
//! snapshot's `Arc<Service>` (backends, slots, rings) is taken as is, so a
//! rebuild of 10,000 services where one changed re-specifies one service.
//!
//! # Counter slots
//!
//! Every frontend and backend gets a `stats_slot`, an index into per-worker
//! counter arrays that must keep meaning the same object across snapshots.
//! Two ways to get one, mixable:
//! - explicit: `stats_slot: Some(n)` in the spec (the control plane's own
//!   allocator). Used as is; two objects may share a slot on purpose (e.g.
//!   one global backend in several services).
//! - automatic: `None`. The builder first carries over the slot the same
//!   object had in the `reuse_from` snapshot (frontend: same address, port,
//!   protocol and service name; backend: same service name, address, port)
//!   unless an explicit slot took it, then gives the lowest free slot.
//!   Slots of objects that disappeared become free and are reused, so the
//!   control plane should read a slot's counters before the object's removal
//!   is published, or allocate slots itself.
//!
//! Frontend and backend slots are separate spaces; both stay below
//! [`MAX_STATS_SLOT`] + 1 so a counter array cannot be forced to gigabytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use hashbrown::hash_map::Entry;
use hashbrown::HashMap;

use super::flat::FlatMap;
use super::net::{check_ports, check_snat, Routes};
use super::slots::{assign_backend_slots, assign_frontend_slots};
use super::vip_sources::VipSources;
use super::{
    v4_key, v6_key, Backend, BackendSpec, BackendState, BuildError, Cidr, FamilyRing, ForwardMode, Frontend,
    FrontendSpec, OwnerKind, PortConfig, Service, ServiceId, ServiceSpec, SessionAffinity, Snapshot,
    TrafficPolicy, V6Key,
};
use crate::affinity::{affinity_id, backend_tag};
use crate::flow::Proto;
use crate::local::LocalAddrs;
use crate::maglev::{ring_size_for, MaglevBackend, MaglevRing, DEFAULT_RING_SIZE, MAX_BACKENDS};
use crate::wire::ethernet::MacAddr;

/// The largest backend weight. Weights are relative; 65,535 levels are
/// plenty (Cilium and IPVS use 16 bits too), and the cap bounds the Maglev
/// build cost of very skewed weights.
pub const MAX_WEIGHT: u32 = u16::MAX as u32;

/// The largest `stats_slot`: counter arrays stay below 16 M entries.
pub const MAX_STATS_SLOT: u32 = (1 << 24) - 1;

/// Port ids must be below this (DPDK's `RTE_MAX_ETHPORTS` is far lower).
pub const MAX_PORTS: u16 = 256;

/// Internal marker for "no slot yet"; explicit slots are ≤ MAX_STATS_SLOT.
pub(super) const UNASSIGNED: u32 = u32::MAX;

#[derive(Debug)]
struct ServiceDraft {
    name: Box<str>,
    mode: ForwardMode,
    traffic_policy: TrafficPolicy,
    affinity: SessionAffinity,
    source_ranges: Box<[Cidr]>,
    /// `stats_slot == UNASSIGNED` until `build`.
    backends: Vec<Backend>,
}

impl ServiceDraft {
    /// A draft with `s`'s fields and backends (their slots kept).
    fn from_service(s: &Service) -> ServiceDraft {
        ServiceDraft {
            name: s.name.clone(),
            mode: s.mode,
            traffic_policy: s.traffic_policy,
            affinity: s.affinity,
            source_ranges: s.source_ranges.clone(),
            backends: s.backends.to_vec(),
        }
    }
}

/// A service being built: specified anew, or kept from a previous snapshot.
#[derive(Debug)]
enum Pending {
    Draft(ServiceDraft),
    Kept(Arc<Service>),
}

impl Pending {
    fn name(&self) -> &str {
        match self {
            Pending::Draft(d) => &d.name,
            Pending::Kept(s) => &s.name,
        }
    }

    fn source_ranges(&self) -> &[Cidr] {
        match self {
            Pending::Draft(d) => &d.source_ranges,
            Pending::Kept(s) => &s.source_ranges,
        }
    }

    /// The draft, made from the kept service if needed.
    fn draft(&mut self) -> &mut ServiceDraft {
        if let Pending::Kept(s) = self {
            *self = Pending::Draft(ServiceDraft::from_service(s));
        }
        match self {
            Pending::Draft(d) => d,
            Pending::Kept(_) => unreachable!("converted above"),
        }
    }
}

/// A service after `build_service`, before slots are assigned.
#[derive(Debug)]
pub(super) enum Built {
    New(Service),
    Kept(Arc<Service>),
}

impl Built {
    pub(super) fn service(&self) -> &Service {
        match self {
            Built::New(s) => s,
            Built::Kept(s) => s,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct InterfaceSpec {
    pub(super) port: u16,
    pub(super) mac: [u8; 6],
    pub(super) cidr: Cidr,
    pub(super) gateway: Option<IpAddr>,
}

/// Builds a [`Snapshot`]; see the module doc for sharing and slots.
///
/// The lifetime is that of the `reuse_from` snapshot, which the builder
/// reads during `build` instead of copying.
#[derive(Debug)]
pub struct SnapshotBuilder<'p> {
    revision: u64,
    local_node: Option<Box<str>>,
    max_ring_size: u32,
    prev: Option<&'p Snapshot>,
    interfaces: Vec<InterfaceSpec>,
    /// (port, VLAN id), from [`SnapshotBuilder::vlan`].
    vlans: Vec<(u16, u16)>,
    /// (port, MTU), from [`SnapshotBuilder::mtu`].
    mtus: Vec<(u16, u16)>,
    snat: Vec<IpAddr>,
    neighbors: Vec<(IpAddr, [u8; 6])>,
    services: Vec<Pending>,
    names: HashMap<Box<str>, ServiceId>,
    /// `stats_slot == UNASSIGNED` until `build`.
    frontends_v4: HashMap<u64, Frontend>,
    frontends_v6: HashMap<V6Key, Frontend>,
    /// Insertion order, so automatic slots do not depend on hash order.
    frontend_order: Vec<(IpAddr, u16, Proto)>,
}

impl<'p> SnapshotBuilder<'p> {
    /// An empty builder for `revision`.
    pub fn new(revision: u64) -> SnapshotBuilder<'p> {
        SnapshotBuilder {
            revision,
            local_node: None,
            max_ring_size: DEFAULT_RING_SIZE,
            prev: None,
            interfaces: Vec::new(),
            vlans: Vec::new(),
            mtus: Vec::new(),
            snat: Vec::new(),
            neighbors: Vec::new(),
            services: Vec::new(),
            names: HashMap::new(),
            frontends_v4: HashMap::new(),
            frontends_v6: HashMap::new(),
            frontend_order: Vec::new(),
        }
    }

    /// This node's name, for [`TrafficPolicy::Local`].
    pub fn local_node(&mut self, name: impl Into<String>) -> &mut Self {
        self.local_node = Some(name.into().into_boxed_str());
        self
    }

    /// The largest ring; per service the size is
    /// `ring_size_for(eligible backends, max)`. Default [`DEFAULT_RING_SIZE`].
    pub fn max_ring_size(&mut self, max: u32) -> &mut Self {
        self.max_ring_size = max;
        self
    }

    /// Share unchanged rings with, and carry counter slots over from, `prev`.
    pub fn reuse_from(&mut self, prev: &'p Snapshot) -> &mut Self {
        self.prev = Some(prev);
        self
    }

    /// Adds `cidr` (interface address and connected prefix) to DPDK port
    /// `port` with MAC `mac` and an optional gateway. Call once per prefix;
    /// every call for a port must give the same MAC, and at most one
    /// gateway per family. Checked by `build`.
    pub fn interface(&mut self, port: u16, mac: [u8; 6], cidr: Cidr, gateway: Option<IpAddr>) -> &mut Self {
        self.interfaces.push(InterfaceSpec {
            port,
            mac,
            cidr,
            gateway,
        });
        self
    }

    /// Tags port `port`'s frames with 802.1Q VLAN id `vid` (1-4094): the
    /// port's frames must carry it (others are `VlanMismatch` drops), and
    /// frames sent on it carry it. Every port with an interface needs one
    /// if any has one. Checked by `build`.
    pub fn vlan(&mut self, port: u16, vid: u16) -> &mut Self {
        self.vlans.push((port, vid));
        self
    }

    /// Sets port `port`'s MTU, the largest IP packet it sends
    /// ([`MIN_MTU`](super::MIN_MTU)-[`MAX_MTU`](super::MAX_MTU), at least
    /// [`MIN_MTU_V6`](super::MIN_MTU_V6) on a port with an IPv6 address):
    /// a packet to forward that is larger is answered with an ICMP
    /// "fragmentation needed" or ICMPv6 "packet too big" where it may be,
    /// and dropped (`MtuExceeded`). A port without one has
    /// [`DEFAULT_MTU`](super::DEFAULT_MTU). Checked by `build`.
    pub fn mtu(&mut self, port: u16, mtu: u16) -> &mut Self {
        self.mtus.push((port, mtu));
        self
    }

    /// Adds an SNAT address (duplicates are merged). Checked by `build`.
    pub fn snat_address(&mut self, ip: IpAddr) -> &mut Self {
        self.snat.push(ip);
        self
    }

    /// Adds a static neighbor; its port is the one whose prefix holds `ip`
    /// (longest match). Checked by `build`.
    pub fn neighbor(&mut self, ip: IpAddr, mac: [u8; 6]) -> &mut Self {
        self.neighbors.push((ip, mac));
        self
    }

    /// Adds a service and returns its id for `frontend` and `backend`.
    pub fn service(&mut self, spec: ServiceSpec) -> Result<ServiceId, BuildError> {
        if let Err(reason) = check_service_name(&spec.name) {
            return Err(BuildError::ServiceName {
                name: spec.name,
                reason,
            });
        }
        let id = self.next_id(&spec.name)?;
        let name = spec.name.into_boxed_str();
        self.names.insert(name.clone(), id);
        self.services.push(Pending::Draft(ServiceDraft {
            name,
            mode: spec.mode,
            traffic_policy: spec.traffic_policy,
            affinity: spec.affinity,
            source_ranges: spec.source_ranges.into_boxed_slice(),
            backends: Vec::new(),
        }));
        Ok(id)
    }

    /// Adds `service`, unchanged, from a previous snapshot (normally the
    /// [`reuse_from`](Self::reuse_from) one): its fields, backends with their
    /// counter slots, and rings are shared, not rebuilt. Add its frontends
    /// with [`frontend`](Self::frontend) as usual; adding a backend turns it
    /// into an ordinary specified service. If this builder's local node or
    /// maximum ring size differ from the `reuse_from` snapshot's, kept
    /// services are rebuilt from their contents at `build` (rings still
    /// shared where equal). The caller must give its backends' slots to no
    /// other object.
    pub fn keep_service(&mut self, service: &Arc<Service>) -> Result<ServiceId, BuildError> {
        let id = self.next_id(&service.name)?;
        self.names.insert(service.name.clone(), id);
        self.services.push(Pending::Kept(Arc::clone(service)));
        Ok(id)
    }

    fn next_id(&self, name: &str) -> Result<ServiceId, BuildError> {
        if self.names.contains_key(name) {
            return Err(BuildError::DuplicateService { name: name.into() });
        }
        Ok(ServiceId(u32::try_from(self.services.len()).map_err(|_| {
            BuildError::ServiceName {
                name: name.into(),
                reason: "too many services",
            }
        })?))
    }

    /// Adds a frontend to service `service`.
    pub fn frontend(&mut self, service: ServiceId, spec: FrontendSpec) -> Result<(), BuildError> {
        let draft = self
            .services
            .get(service.index())
            .ok_or(BuildError::UnknownService { id: service.0 })?;
        let FrontendSpec {
            addr,
            port,
            proto,
            kind,
            stats_slot,
        } = spec;
        let svc = || draft.name().to_string();
        if !matches!(proto, Proto::Tcp | Proto::Udp) {
            return Err(BuildError::UnsupportedProtocol {
                service: svc(),
                frontend: frontend_name(addr, port, proto),
            });
        }
        if port == 0 {
            return Err(BuildError::FrontendPortZero {
                service: svc(),
                addr,
                proto: proto_name(proto),
            });
        }
        if !is_host_address(addr) {
            return Err(BuildError::FrontendAddress {
                service: svc(),
                frontend: frontend_name(addr, port, proto),
            });
        }
        let ranges = draft.source_ranges();
        if !ranges.is_empty() && !ranges.iter().any(|c| c.is_v4() == addr.is_ipv4()) {
            return Err(BuildError::SourceRangeFamily {
                service: svc(),
                frontend: frontend_name(addr, port, proto),
                family: family_name(addr),
            });
        }
        let slot = match stats_slot {
            Some(s) if s > MAX_STATS_SLOT => {
                return Err(BuildError::StatsSlotTooLarge {
                    object: format!(
                        "service {} frontend {}",
                        draft.name(),
                        frontend_name(addr, port, proto)
                    ),
                    slot: s,
                    max: MAX_STATS_SLOT,
                })
            }
            Some(s) => s,
            None => UNASSIGNED,
        };
        let fe = Frontend {
            addr,
            port,
            proto,
            kind,
            service,
            stats_slot: slot,
        };
        let existing = match addr {
            IpAddr::V4(a) => match self.frontends_v4.entry(v4_key(a, port, proto)) {
                Entry::Occupied(o) => Some(o.get().service),
                Entry::Vacant(v) => {
                    v.insert(fe);
                    None
                }
            },
            IpAddr::V6(a) => match self.frontends_v6.entry(v6_key(a, port, proto)) {
                Entry::Occupied(o) => Some(o.get().service),
                Entry::Vacant(v) => {
                    v.insert(fe);
                    None
                }
            },
        };
        if let Some(first) = existing {
            let first = self.services.get(first.index()).map_or("?", Pending::name);
            return Err(BuildError::DuplicateFrontend {
                frontend: frontend_name(addr, port, proto),
                first: first.to_string(),
                second: svc(),
            });
        }
        self.frontend_order.push((addr, port, proto));
        Ok(())
    }

    /// Adds a backend to service `service`. Duplicates are reported by
    /// `build` (checking here would cost a hash insert per backend).
    pub fn backend(&mut self, service: ServiceId, spec: BackendSpec) -> Result<(), BuildError> {
        let draft = self
            .services
            .get_mut(service.index())
            .ok_or(BuildError::UnknownService { id: service.0 })?
            .draft();
        let svc = || draft.name.to_string();
        let BackendSpec {
            addr,
            port,
            weight,
            state,
            node,
            zone,
            stats_slot,
        } = spec;
        if port == 0 {
            return Err(BuildError::BackendPortZero { service: svc(), addr });
        }
        if !is_unicast(addr) {
            return Err(BuildError::BackendAddress {
                service: svc(),
                addr,
                port,
            });
        }
        if weight > MAX_WEIGHT {
            return Err(BuildError::BackendWeight {
                service: svc(),
                addr,
                port,
                weight,
                max: MAX_WEIGHT,
            });
        }
        if draft.backends.len() >= MAX_BACKENDS {
            return Err(BuildError::TooManyBackends {
                service: svc(),
                max: MAX_BACKENDS,
            });
        }
        let stats_slot = match stats_slot {
            Some(s) if s > MAX_STATS_SLOT => {
                return Err(BuildError::StatsSlotTooLarge {
                    object: format!("service {} backend {}", draft.name, endpoint_name(addr, port)),
                    slot: s,
                    max: MAX_STATS_SLOT,
                })
            }
            Some(s) => s,
            None => UNASSIGNED,
        };
        draft.backends.push(Backend {
            addr,
            port,
            weight,
            state,
            node: node.map(String::into_boxed_str),
            zone: zone.map(String::into_boxed_str),
            stats_slot,
        });
        Ok(())
    }

    /// Validates everything and builds the snapshot.
    pub fn build(self) -> Result<Snapshot, BuildError> {
        let SnapshotBuilder {
            revision,
            local_node,
            max_ring_size,
            prev,
            interfaces,
            vlans,
            mtus,
            snat,
            neighbors,
            services: drafts,
            names,
            mut frontends_v4,
            mut frontends_v6,
            frontend_order,
        } = self;

        let ports = check_ports(&interfaces, &vlans, &mtus)?;
        let vlan_tagged = ports.iter().flatten().any(|p| p.vlan.is_some());
        let (snat_v4, snat_v6) = check_snat(&snat)?;

        let mut services = Vec::with_capacity(drafts.len());
        let mut rings = RingCache::default();
        // Per backend of a new service (service-major, then as listed): its
        // slot in `prev`.
        let mut carry: Vec<u32> = Vec::new();
        // Kept services were built for `prev`'s node and ring size.
        let keep_ok = prev.is_none_or(|p| p.local_node == local_node && p.max_ring_size == max_ring_size);
        for entry in drafts {
            let d = match entry {
                Pending::Kept(s) if keep_ok => {
                    services.push(Built::Kept(s));
                    continue;
                }
                Pending::Kept(s) => ServiceDraft::from_service(&s),
                Pending::Draft(d) => d,
            };
            // The control plane usually lists services in a stable order:
            // try the same position before hashing the name.
            let prev_svc = prev.and_then(|p| match p.services.get(services.len()) {
                Some(same) if same.name == d.name => Some(&**same),
                _ => p.get_service(p.service_by_name(&d.name)?),
            });
            services.push(Built::New(build_service(
                d,
                prev_svc,
                local_node.as_deref(),
                max_ring_size,
                &mut rings,
                &mut carry,
            )?));
        }

        let backend_slots = assign_backend_slots(&mut services, &carry);
        let services: Vec<Arc<Service>> = services
            .into_iter()
            .map(|b| match b {
                Built::New(s) => Arc::new(s),
                Built::Kept(s) => s,
            })
            .collect();
        let frontend_slots = assign_frontend_slots(
            &frontend_order,
            &mut frontends_v4,
            &mut frontends_v6,
            &services,
            prev,
        );

        // Owned addresses: interfaces, then VIPs, then SNAT (which must not
        // be a VIP), plus the full-NAT check that needs both.
        let mut owned_v4: HashMap<u32, OwnerKind> = HashMap::new();
        let mut owned_v6: HashMap<u128, OwnerKind> = HashMap::new();
        let mut own = |ip: IpAddr, kind: OwnerKind| match ip {
            IpAddr::V4(a) => {
                let k = owned_v4.entry(u32::from(a)).or_default();
                let before = *k;
                *k = k.union(kind);
                before
            }
            IpAddr::V6(a) => {
                let k = owned_v6.entry(u128::from(a)).or_default();
                let before = *k;
                *k = k.union(kind);
                before
            }
        };
        for i in &interfaces {
            own(i.cidr.addr(), OwnerKind::INTERFACE);
        }
        for f in frontends_v4.values().chain(frontends_v6.values()) {
            own(f.addr, OwnerKind::VIP);
        }
        // The lowest such frontend, so that the error does not depend on the
        // maps' (randomly seeded) order.
        let no_snat = frontends_v4
            .values()
            .chain(frontends_v6.values())
            .filter(|f| {
                let has_snat = if f.addr.is_ipv4() {
                    !snat_v4.is_empty()
                } else {
                    !snat_v6.is_empty()
                };
                services[f.service.index()].mode == ForwardMode::FullNat && !has_snat
            })
            .min_by_key(|f| (f.addr, f.port, f.proto as u8));
        if let Some(f) = no_snat {
            return Err(BuildError::NoSnatAddress {
                service: services[f.service.index()].name.to_string(),
                frontend: frontend_name(f.addr, f.port, f.proto),
                family: family_name(f.addr),
            });
        }
        let snat_all = snat_v4
            .iter()
            .map(|&a| IpAddr::V4(a))
            .chain(snat_v6.iter().map(|&a| IpAddr::V6(a)));
        for addr in snat_all {
            if own(addr, OwnerKind::SNAT).contains(OwnerKind::VIP) {
                return Err(BuildError::SnatIsVip { addr });
            }
        }
        // A gateway at one of lbd's own addresses: lbd would ask for its
        // own MAC and hold every routed frame until it is dropped.
        for (id, p) in ports.iter().enumerate() {
            let Some(p) = p else { continue };
            for g in p.gateways() {
                let kind = match g {
                    IpAddr::V4(a) => owned_v4.get(&u32::from(a)),
                    IpAddr::V6(a) => owned_v6.get(&u128::from(a)),
                };
                if kind.is_some_and(|k| *k != OwnerKind::default()) {
                    return Err(BuildError::GatewayUnusable {
                        port: id as u16, // id < MAX_PORTS
                        gateway: g,
                        what: "one of lbd's own addresses (interface, frontend or SNAT)",
                    });
                }
            }
        }
        let routes = Routes::new(&ports, &neighbors)?;
        let broadcasts_v4 = super::BroadcastsV4::new(&routes.connected_v4);
        let is_broadcast = |ip: IpAddr| match ip {
            IpAddr::V4(a) => broadcasts_v4.contains(u32::from(a)),
            IpAddr::V6(_) => false,
        };
        // A backend lbd would forward to itself (and, with no host stack,
        // drop after looping through the router), to loopback, which no
        // NIC reaches, or to a whole prefix.
        for s in &services {
            check_backends_not_local(
                s,
                |ip| match ip {
                    IpAddr::V4(a) => owned_v4.get(&u32::from(a)).copied(),
                    IpAddr::V6(a) => owned_v6.get(&u128::from(a)).copied(),
                },
                is_broadcast,
            )?;
        }
        // Nor can lbd own a prefix's broadcast address: the hosts there
        // send to it as to all of them, in broadcast frames.
        for &(addr, port, proto) in &frontend_order {
            if !is_broadcast(addr) {
                continue;
            }
            let Some(fe) = frontends_v4.get(&v4_key_of(addr, port, proto)) else {
                continue;
            };
            return Err(BuildError::FrontendIsBroadcast {
                service: services
                    .get(fe.service.index())
                    .map_or_else(String::new, |s| s.name().to_string()),
                frontend: frontend_name(addr, port, proto),
            });
        }
        if let Some(&a) = snat_v4.iter().find(|&&a| is_broadcast(IpAddr::V4(a))) {
            return Err(BuildError::SnatIsBroadcast { addr: IpAddr::V4(a) });
        }
        let vip_sources = VipSources::new(frontends_v4.values().chain(frontends_v6.values()), &services);

        // Each port answers for its own interface addresses, every VIP and
        // every SNAT address; an interface address that is also a VIP (a
        // node port) or SNAT address, on its own port only (two ports
        // answering for one address on a shared segment would make its
        // MAC flap).
        let shared: Vec<IpAddr> = owned_v4
            .iter()
            .filter(|(_, k)| !k.contains(OwnerKind::INTERFACE))
            .map(|(&a, _)| IpAddr::V4(Ipv4Addr::from(a)))
            .chain(
                owned_v6
                    .iter()
                    .filter(|(_, k)| !k.contains(OwnerKind::INTERFACE))
                    .map(|(&a, _)| IpAddr::V6(Ipv6Addr::from(a))),
            )
            .collect();
        let mut port_configs = Vec::with_capacity(ports.len());
        for (id, p) in ports.into_iter().enumerate() {
            let Some(p) = p else {
                port_configs.push(None);
                continue;
            };
            let port = id as u16; // id < MAX_PORTS
            let own_addrs = p.cidrs.iter().map(Cidr::addr);
            let local = LocalAddrs::new(MacAddr(p.mac), own_addrs.chain(shared.iter().copied()))
                .map_err(|source| BuildError::LocalAddrs { port, source })?;
            port_configs.push(Some(PortConfig {
                mac: p.mac,
                vlan: p.vlan,
                mtu: p.mtu(),
                cidrs: p.cidrs.into_boxed_slice(),
                gateway_v4: p.gateway_v4,
                gateway_v6: p.gateway_v6,
                local,
            }));
        }

        Ok(Snapshot {
            revision,
            epoch: super::next_epoch(),
            local_node,
            services: services.into_boxed_slice(),
            service_names: names,
            frontends_v4: FlatMap::new(frontends_v4),
            frontends_v6: FlatMap::new(frontends_v6),
            owned_v4: FlatMap::sparse(owned_v4),
            owned_v6: FlatMap::sparse(owned_v6),
            vip_sources,
            snat_v4: snat_v4.into_boxed_slice(),
            snat_v6: snat_v6.into_boxed_slice(),
            ports: port_configs.into_boxed_slice(),
            vlan_tagged,
            broadcasts_v4,
            connected_v4: routes.connected_v4.into_boxed_slice(),
            connected_v6: routes.connected_v6.into_boxed_slice(),
            hops_v4: routes.hops_v4.into_boxed_slice(),
            hops_v6: routes.hops_v6.into_boxed_slice(),
            neighbors_v4: FlatMap::new(routes.neighbors_v4),
            neighbors_v6: FlatMap::new(routes.neighbors_v6),
            default_v4: routes.default_v4,
            default_v6: routes.default_v6,
            frontend_slots,
            backend_slots,
            max_ring_size,
        })
    }
}

/// One rebuild-wide shared empty ring (services with no eligible backend).
#[derive(Debug, Default)]
struct RingCache {
    empty: Option<Arc<MaglevRing>>,
    /// Scratch for the eligible backends of one service.
    members: Vec<MaglevBackend>,
}

/// Turns a draft into a service: duplicate check, address index, eligible
/// set, ring (shared with `prev` when unchanged).
fn build_service(
    d: ServiceDraft,
    prev: Option<&Service>,
    local_node: Option<&str>,
    max_ring_size: u32,
    rings: &mut RingCache,
    carry: &mut Vec<u32>,
) -> Result<Service, BuildError> {
    let key = |i: &u32| {
        let b = &d.backends[*i as usize];
        (b.addr, b.port)
    };
    // len ≤ MAX_BACKENDS, checked in `backend`.
    let mut by_addr: Vec<u32> = (0..d.backends.len() as u32).collect();
    by_addr.sort_unstable_by_key(key);
    if let Some(w) = by_addr.windows(2).find(|w| key(&w[0]) == key(&w[1])) {
        let (addr, port) = key(&w[0]);
        return Err(BuildError::DuplicateBackend {
            service: d.name.to_string(),
            addr,
            port,
        });
    }
    // Slots to carry over: a merge of the two address-sorted indices,
    // sequential where a binary search per backend would miss the cache.
    let base = carry.len();
    carry.resize(base + d.backends.len(), UNASSIGNED);
    if let Some(p) = prev {
        let mut old = p
            .by_addr
            .iter()
            .filter_map(|&i| p.backends.get(i as usize))
            .peekable();
        for &i in &by_addr {
            let k = key(&i);
            while old.next_if(|o| (o.addr, o.port) < k).is_some() {}
            if let Some(o) = old.next_if(|o| (o.addr, o.port) == k) {
                carry[base + i as usize] = o.stats_slot;
            }
        }
    }
    let prev_backends = prev.map(|p| &*p.backends);
    let eligible = |b: &Backend| {
        b.state == BackendState::Active
            && b.weight > 0
            && match d.traffic_policy {
                TrafficPolicy::Cluster => true,
                TrafficPolicy::Local => local_node.is_some() && b.node.as_deref() == local_node,
            }
    };
    let mut family_ring = |v4: bool, prev: Option<&FamilyRing>| -> Result<FamilyRing, BuildError> {
        let ring_map: Box<[u32]> = by_addr
            .iter()
            .copied()
            .filter(|&i| {
                let b = &d.backends[i as usize];
                b.addr.is_ipv4() == v4 && eligible(b)
            })
            .collect();
        rings.members.clear();
        rings.members.extend(ring_map.iter().map(|&i| {
            let b = &d.backends[i as usize];
            MaglevBackend::new(b.addr, b.port, b.weight)
        }));
        let size = ring_size_for(ring_map.len(), max_ring_size);
        let prev_backends = prev_backends.unwrap_or(&[]);
        let same_as_prev = |p: &FamilyRing| {
            p.ring.size() == size
                && p.ring_map.len() == rings.members.len()
                && p.ring_map.iter().zip(&rings.members).all(|(&i, m)| {
                    prev_backends
                        .get(i as usize)
                        .is_some_and(|b| (b.addr, b.port, b.weight) == (m.addr, m.port, m.weight))
                })
        };
        let maglev_err = |source| BuildError::Maglev {
            service: d.name.to_string(),
            source,
        };
        let ring = match prev {
            Some(p) if same_as_prev(p) => Arc::clone(&p.ring),
            _ if rings.members.is_empty() => match &rings.empty {
                Some(r) if r.size() == size => Arc::clone(r),
                _ => {
                    let r = Arc::new(MaglevRing::empty(size).map_err(maglev_err)?);
                    rings.empty = Some(Arc::clone(&r));
                    r
                }
            },
            _ => Arc::new(MaglevRing::build(&rings.members, size).map_err(maglev_err)?),
        };
        let mut by_tag: Box<[(u32, u32)]> = match d.affinity {
            SessionAffinity::None => Box::default(),
            SessionAffinity::ClientIp { .. } => ring_map
                .iter()
                .map(|&i| {
                    let b = &d.backends[i as usize];
                    (backend_tag(b.addr, b.port), i)
                })
                .collect(),
        };
        by_tag.sort_unstable();
        Ok(FamilyRing {
            ring_map,
            ring,
            by_tag,
        })
    };
    let v4 = family_ring(true, prev.map(|p| &p.v4))?;
    let v6 = family_ring(false, prev.map(|p| &p.v6))?;
    Ok(Service {
        affinity_id: affinity_id(&d.name),
        name: d.name,
        mode: d.mode,
        traffic_policy: d.traffic_policy,
        affinity: d.affinity,
        source_ranges: d.source_ranges,
        backends: d.backends.into_boxed_slice(),
        by_addr: by_addr.into_boxed_slice(),
        v4,
        v6,
    })
}

/// `namespace/name`, both DNS-1123 labels.
fn check_service_name(name: &str) -> Result<(), &'static str> {
    let (ns, n) = name.split_once('/').ok_or("must be namespace/name")?;
    for (part, what) in [(ns, "namespace"), (n, "name")] {
        let b = part.as_bytes();
        if b.is_empty() || b.len() > 63 {
            return Err(if what == "namespace" {
                "namespace must be 1 to 63 characters"
            } else {
                "name must be 1 to 63 characters"
            });
        }
        let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        if !b.iter().all(|c| ok(c) || *c == b'-') || !ok(&b[0]) || !ok(&b[b.len() - 1]) {
            return Err(
                "namespace and name must be lowercase letters, digits and '-', starting and ending alphanumeric",
            );
        }
    }
    Ok(())
}

/// [`BuildError::BackendIsLocal`] for the first backend of `s` at a
/// loopback address or at one `owned` names (interface, frontend or SNAT):
/// lbd would send its traffic to itself; or at one `broadcast` names (a
/// connected prefix's broadcast address): to every host of the prefix.
/// The full build and
/// [`Snapshot::with_services`](super::Snapshot::with_services) both check.
pub(super) fn check_backends_not_local(
    s: &Service,
    owned: impl Fn(IpAddr) -> Option<OwnerKind>,
    broadcast: impl Fn(IpAddr) -> bool,
) -> Result<(), BuildError> {
    for b in s.backends() {
        let what = if b.addr.is_loopback() {
            "a loopback address"
        } else if owned(b.addr).is_some_and(|k| k != OwnerKind::default()) {
            "one of lbd's own addresses (interface, frontend or SNAT)"
        } else if broadcast(b.addr) {
            BROADCAST_OF_PORT_PREFIX
        } else {
            continue;
        };
        return Err(BuildError::BackendIsLocal {
            service: s.name().to_string(),
            addr: b.addr,
            port: b.port,
            what,
        });
    }
    Ok(())
}

/// Whether `ip` can be a unicast destination: not unspecified, multicast
/// or (IPv4) the limited broadcast address. The builder refuses other
/// backend addresses, and lbd's config parsing checks the addresses it
/// reads with it first, so it can name the file and field; owned
/// addresses (interface, frontend, SNAT) must pass [`is_host_address`]
/// too.
pub fn is_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => !(a.is_unspecified() || a.is_multicast() || a.is_broadcast()),
        IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast()),
    }
}

/// Whether `ip` can be one of lbd's own addresses (interface, frontend,
/// SNAT): [`is_unicast`], and not in 0/8 ("this network"), loopback or
/// IPv4-mapped IPv6 either: an address of one host, which the pipeline
/// answers and forwards to (`reject::names_one_host`). A packet to any
/// other address is dropped before it is looked up (`not_unicast`), so an
/// owned one would be unreachable.
pub fn is_host_address(ip: IpAddr) -> bool {
    // Implies `is_unicast`: it refuses 0/8 (unspecified included),
    // multicast and the limited broadcast too.
    crate::reject::names_one_host(ip)
}

pub(super) fn is_unicast_mac(mac: [u8; 6]) -> bool {
    mac[0] & 1 == 0 && mac != [0; 6]
}

fn family_name(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

pub(crate) fn proto_name(p: Proto) -> &'static str {
    match p {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
        Proto::Icmp => "icmp",
        Proto::Icmpv6 => "icmpv6",
    }
}

fn endpoint_name(addr: IpAddr, port: u16) -> String {
    match addr {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

/// What a frontend, SNAT or backend address at a connected prefix's
/// broadcast address is told.
const BROADCAST_OF_PORT_PREFIX: &str = "the broadcast address of a prefix on one of lbd's ports";

/// The key of an IPv4 frontend in `frontends_v4`; 0 (no frontend's) for IPv6.
fn v4_key_of(addr: IpAddr, port: u16, proto: Proto) -> u64 {
    match addr {
        IpAddr::V4(a) => super::v4_key(a, port, proto),
        IpAddr::V6(_) => 0,
    }
}

pub(super) fn frontend_name(addr: IpAddr, port: u16, proto: Proto) -> String {
    format!("{}/{}", endpoint_name(addr, port), proto_name(proto))
}
