//! The [`Snapshot`]: the immutable lookup state every worker reads.
//!
//! The control thread builds a snapshot with [`SnapshotBuilder`] and
//! publishes it through one `ArcSwap<Snapshot>`; a worker loads it once per
//! burst and calls only `&self` lookups that are O(1) (or a scan of a few
//! interface prefixes), never allocate and never panic:
//! [`Snapshot::frontend`], [`Snapshot::lookup`], [`Service::pick`] (with
//! the flow's [`Family`]),
//! [`Service::allows_source`], [`Snapshot::vip_allows_source`],
//! [`Snapshot::is_owned`],
//! [`Snapshot::next_hop`], [`Snapshot::route`].
//!
//! The model follows Cilium's services/frontends/backends: a [`Service`]
//! owns its [`Backend`]s and Maglev ring; a [`Frontend`] (address, port,
//! protocol) belongs to exactly one service.
//!
//! # Invariants (established by the builder)
//!
//! - Every [`Frontend::service`] indexes [`Snapshot::services`]; frontend
//!   keys are unique; frontend protocols are TCP or UDP.
//! - A service has one ring per address family; the ring of a family holds
//!   exactly the *eligible* backends of that family: `Active`, weight > 0
//!   and, under [`TrafficPolicy::Local`], on the local node. So an IPv4 flow
//!   of a dual-stack service only ever picks an IPv4 backend.
//!   Every backend, whatever its state, stays listed in
//!   [`Service::backends`] so that established connections and counters can
//!   still be attributed to it.
//! - `stats_slot`s are stable for the same object across snapshots (see
//!   [`SnapshotBuilder`]) and below [`Snapshot::frontend_slots`] /
//!   [`Snapshot::backend_slots`], so per-worker counter arrays of that
//!   length survive every swap.
//! - No SNAT address is a VIP; every full-NAT frontend has an SNAT address
//!   of its family.
//! - [`Snapshot::vip_allows_source`] answers from this snapshot's frontends
//!   and services' source ranges (the builder makes its table, and
//!   [`Snapshot::with_services`] makes it again when ranges change).
//!
//! # Dropping
//!
//! A snapshot owns `Arc`s (services and rings shared with older and newer
//! snapshots) and large tables. The control thread drops old snapshots: `arc-swap` keeps a
//! replaced snapshot alive while workers still hold a guard, and the control
//! thread must hold the last reference (e.g. keep the previous `Arc` until
//! it is unique) so that a worker never frees a ring on the fast path.

mod builder;
mod cidr;
mod error;
mod flat;
mod net;
mod slots;
mod spec;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_errors;
#[cfg(test)]
mod tests_scale;
#[cfg(test)]
mod tests_share;
#[cfg(test)]
mod tests_update;
mod update;
mod vip_sources;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hashbrown::HashMap;

pub use builder::{is_host_address, is_unicast, SnapshotBuilder, MAX_PORTS, MAX_STATS_SLOT, MAX_WEIGHT};
pub use cidr::{Cidr, CidrError};
pub use error::BuildError;
pub use spec::{BackendSpec, FrontendSpec, ServiceSpec};

use crate::flow::Proto;
use crate::local::LocalAddrs;
use crate::maglev::{client_hash, MaglevRing};
use flat::{FlatKey, FlatMap};
use vip_sources::VipSources;

/// A port's MTU when none is set ([`SnapshotBuilder::mtu`]): Ethernet's.
pub const DEFAULT_MTU: u16 = 1500;
/// The smallest MTU a port may have: IPv4's minimum (RFC 791).
pub const MIN_MTU: u16 = 68;
/// The smallest MTU of a port with an IPv6 address (RFC 8200).
pub const MIN_MTU_V6: u16 = 1280;
/// The largest MTU a port may have: what jumbo-frame switches carry.
pub const MAX_MTU: u16 = 9216;

/// The smallest MTU a port may have: [`MIN_MTU_V6`] if it has an IPv6
/// address, else [`MIN_MTU`].
pub const fn min_mtu(has_ipv6: bool) -> u16 {
    if has_ipv6 {
        MIN_MTU_V6
    } else {
        MIN_MTU
    }
}

/// An address family: which of a service's two rings a flow uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// The family of `ip`.
    #[inline]
    pub fn of(ip: IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }
}

/// One family's ring of a service.
#[derive(Debug, Clone)]
pub(crate) struct FamilyRing {
    /// Ring index → index into `Service::backends`. The ring is built from
    /// the family's eligible backends in (addr, port) order, so the same
    /// eligible set gives the same ring indices whatever else changed —
    /// which is what lets a later snapshot share the ring.
    pub(crate) ring_map: Box<[u32]>,
    pub(crate) ring: Arc<MaglevRing>,
    /// Under client-IP affinity, `(backend_tag, index into
    /// Service::backends)` of the ring's backends, sorted: which eligible
    /// backend a pin names. Empty without affinity.
    pub(crate) by_tag: Box<[(u32, u32)]>,
}

/// A service's index in [`Snapshot::services`]. Valid only for the
/// snapshot that issued it (ids are dense and may change between snapshots;
/// match services across snapshots by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceId(pub(crate) u32);

impl ServiceId {
    /// The index into [`Snapshot::services`].
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// How a service translates packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ForwardMode {
    /// Destination NAT only: the backend sees the client's address and must
    /// route replies back through the balancer.
    #[default]
    Dnat,
    /// Destination and source NAT: the backend sees an SNAT address, so
    /// replies return to the balancer whatever the backend's routing.
    FullNat,
}

/// Which backends take new connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TrafficPolicy {
    /// Every eligible backend, on any node.
    #[default]
    Cluster,
    /// Only backends whose `node` equals the builder's
    /// [`local_node`](SnapshotBuilder::local_node), as Kubernetes'
    /// `externalTrafficPolicy: Local`. With no local node set, or no backend
    /// on it, the ring is empty and new flows drop with `NoBackend`; this is
    /// deliberately not a build error, so a node-name misconfiguration
    /// cannot block every other service's update.
    Local,
}

/// Session affinity of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SessionAffinity {
    /// Each flow is hashed on its 5-tuple.
    #[default]
    None,
    /// All new connections of a client address go to the backend the
    /// client is pinned to (see [`crate::affinity`]): the pin is made from
    /// the [`client_hash`] pick (see [`Service::pick_for_client`]), kept while the
    /// backend stays eligible, and forgotten after `timeout` without a new
    /// connection from the client.
    ClientIp {
        /// Idle time after which the pin is forgotten.
        timeout: Duration,
    },
}

/// Where a frontend's address comes from (Kubernetes service types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrontendKind {
    /// A cluster-internal virtual IP.
    ClusterIp,
    /// A node address and node port.
    NodePort,
    /// A load-balancer ingress address.
    LoadBalancer,
    /// An operator-assigned external IP.
    ExternalIp,
}

/// A backend's lifecycle state. Only `Active` takes new connections; all
/// states keep serving established ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BackendState {
    /// Takes new connections.
    #[default]
    Active,
    /// Shutting down (Kubernetes `terminating`): drain.
    Terminating,
    /// Failed health checks: no new connections until it recovers.
    Quarantined,
    /// Taken out by an operator.
    Maintenance,
}

/// A service address: (address, port, protocol) belonging to one service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frontend {
    /// The VIP.
    pub addr: IpAddr,
    /// The L4 port, never 0.
    pub port: u16,
    /// TCP or UDP.
    pub proto: Proto,
    /// Service type this address comes from.
    pub kind: FrontendKind,
    /// The owning service in this snapshot.
    pub service: ServiceId,
    /// Index into the per-worker frontend counters; stable across snapshots.
    pub stats_slot: u32,
}

/// One backend of one service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// Address new flows are translated to.
    pub addr: IpAddr,
    /// Port new flows are translated to, never 0.
    pub port: u16,
    /// Relative share of new flows, `0..=MAX_WEIGHT`; 0 = no new flows.
    pub weight: u32,
    /// Lifecycle state.
    pub state: BackendState,
    /// Node the backend runs on, for [`TrafficPolicy::Local`].
    pub node: Option<Box<str>>,
    /// Topology zone, informational.
    pub zone: Option<Box<str>>,
    /// Index into the per-worker backend counters; stable across snapshots.
    pub stats_slot: u32,
}

/// A service: its policy, backends and Maglev ring.
#[derive(Debug, Clone)]
pub struct Service {
    name: Box<str>,
    mode: ForwardMode,
    traffic_policy: TrafficPolicy,
    affinity: SessionAffinity,
    source_ranges: Box<[Cidr]>,
    /// A fixed hash of the name: names the service in affinity pins.
    affinity_id: u64,
    backends: Box<[Backend]>,
    /// Indices into `backends` sorted by (addr, port): lookups by address.
    by_addr: Box<[u32]>,
    v4: FamilyRing,
    v6: FamilyRing,
}

impl Service {
    /// `namespace/name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// DNAT or full-NAT.
    #[inline]
    pub fn mode(&self) -> ForwardMode {
        self.mode
    }

    /// Cluster or node-local.
    pub fn traffic_policy(&self) -> TrafficPolicy {
        self.traffic_policy
    }

    /// Session affinity.
    #[inline]
    pub fn affinity(&self) -> SessionAffinity {
        self.affinity
    }

    /// Allowed client prefixes; empty means every client.
    pub fn source_ranges(&self) -> &[Cidr] {
        &self.source_ranges
    }

    /// Every backend in the order given to the builder, any state.
    pub fn backends(&self) -> &[Backend] {
        &self.backends
    }

    /// The backend at `index` in [`backends`](Self::backends).
    pub fn backend(&self, index: usize) -> Option<&Backend> {
        self.backends.get(index)
    }

    /// The backend `addr:port`, any state. O(log n), no allocation.
    pub fn find_backend(&self, addr: IpAddr, port: u16) -> Option<&Backend> {
        let i = self
            .by_addr
            .binary_search_by(|&i| {
                let b = &self.backends[i as usize];
                (b.addr, b.port).cmp(&(addr, port))
            })
            .ok()?;
        self.backends.get(self.by_addr[i] as usize)
    }

    #[inline]
    fn family(&self, family: Family) -> &FamilyRing {
        match family {
            Family::V4 => &self.v4,
            Family::V6 => &self.v6,
        }
    }

    /// The shared Maglev ring of `family` (its eligible backends only).
    pub fn ring(&self, family: Family) -> &Arc<MaglevRing> {
        &self.family(family).ring
    }

    /// How many backends are in the rings (both families).
    pub fn eligible_count(&self) -> usize {
        self.v4.ring_map.len() + self.v6.ring_map.len()
    }

    /// How many backends are in the ring of `family`.
    pub fn eligible_in(&self, family: Family) -> usize {
        self.family(family).ring_map.len()
    }

    /// The backend for a new flow of `family` (the destination's, which is
    /// the backend's: the balancer never translates across families):
    /// Maglev lookup of `hash` in that family's ring, `None` when no backend
    /// of the family is eligible (the pipeline drops with `NoBackend`). Pass
    /// the flow hash, or for a [`SessionAffinity::ClientIp`] pin's start
    /// the client hash ([`pick_for_client`](Self::pick_for_client)). O(1),
    /// no allocation.
    #[inline]
    pub fn pick(&self, hash: u64, family: Family) -> Option<&Backend> {
        let f = self.family(family);
        let i = f.ring.lookup(hash)?;
        let b = *f.ring_map.get(i)?;
        self.backends.get(b as usize)
    }

    /// The eligible backend of `family` whose
    /// [`backend_tag`](crate::affinity::backend_tag) is `tag`, under
    /// client-IP affinity (`None` without affinity): where a pin sends a
    /// client if its backend is still in the ring. O(log n).
    #[inline]
    pub fn pinned(&self, tag: u32, family: Family) -> Option<&Backend> {
        let by_tag = &self.family(family).by_tag;
        let i = by_tag.binary_search_by_key(&tag, |&(t, _)| t).ok()?;
        self.backends.get(by_tag[i].1 as usize)
    }

    /// The service's name in affinity pins: a fixed hash of
    /// [`name`](Self::name), the same in every snapshot.
    #[inline]
    pub fn affinity_id(&self) -> u64 {
        self.affinity_id
    }

    /// The ring's pick for `client`'s address alone ([`client_hash`]),
    /// in `family`'s ring: where a client-IP affinity pin starts (the worker
    /// then keeps it in its [`AffinityTable`](crate::affinity::AffinityTable)).
    #[inline]
    pub fn pick_for_client(&self, client: IpAddr, family: Family) -> Option<&Backend> {
        self.pick(client_hash(client), family)
    }

    /// Whether `client` may use this service: true when there are no source
    /// ranges or one contains it. A linear scan: source range lists are short.
    #[inline]
    pub fn allows_source(&self, client: IpAddr) -> bool {
        self.source_ranges.is_empty() || self.source_ranges.iter().any(|c| c.contains(client))
    }
}

/// Why the balancer owns an address; several may hold at once (a NodePort
/// VIP is also an interface address). A small bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct OwnerKind(u8);

impl OwnerKind {
    /// An interface (port) address.
    pub const INTERFACE: OwnerKind = OwnerKind(1);
    /// A frontend address.
    pub const VIP: OwnerKind = OwnerKind(2);
    /// An SNAT address.
    pub const SNAT: OwnerKind = OwnerKind(4);

    /// Whether every kind in `other` is in `self`.
    #[inline]
    pub const fn contains(self, other: OwnerKind) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union of both sets.
    #[inline]
    pub const fn union(self, other: OwnerKind) -> OwnerKind {
        OwnerKind(self.0 | other.0)
    }
}

/// Where to send a packet: out of `port`, from `src_mac` to `dst_mac`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NextHop {
    /// DPDK port id.
    pub port: u16,
    /// The port's MAC.
    pub src_mac: [u8; 6],
    /// The neighbor's (destination or gateway) MAC.
    pub dst_mac: [u8; 6],
    /// The port's MTU ([`PortConfig::mtu`]): the largest IP packet it
    /// sends.
    pub mtu: u16,
}

/// A next hop whose MAC is not known yet: [`Snapshot::unresolved_hop`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnresolvedHop {
    /// DPDK port id to send on.
    pub port: u16,
    /// The port's MAC.
    pub src_mac: [u8; 6],
    /// The address to resolve: the destination itself when a port's prefix
    /// holds it, else the gateway.
    pub via: IpAddr,
    /// The port's MTU ([`PortConfig::mtu`]).
    pub mtu: u16,
}

/// Where a packet toward some destination goes: [`Snapshot::route`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// The next hop's MAC is known: transmit.
    Resolved(NextHop),
    /// The next hop is known but not its MAC: resolve `via` first.
    Unresolved(UnresolvedHop),
}

impl Route {
    /// The DPDK port to send on.
    #[inline]
    pub fn port(&self) -> u16 {
        match self {
            Route::Resolved(h) => h.port,
            Route::Unresolved(u) => u.port,
        }
    }

    /// The egress port's MTU: the largest IP packet it sends.
    #[inline]
    pub fn mtu(&self) -> u16 {
        match self {
            Route::Resolved(h) => h.mtu,
            Route::Unresolved(u) => u.mtu,
        }
    }

    /// The egress port's MAC (the frame's source MAC).
    #[inline]
    pub fn src_mac(&self) -> [u8; 6] {
        match self {
            Route::Resolved(h) => h.src_mac,
            Route::Unresolved(u) => u.src_mac,
        }
    }

    /// The next hop's MAC, `None` until it is resolved.
    #[inline]
    pub fn dst_mac(&self) -> Option<[u8; 6]> {
        match self {
            Route::Resolved(h) => Some(h.dst_mac),
            Route::Unresolved(_) => None,
        }
    }
}

/// One DPDK port's layer-3 configuration.
#[derive(Debug, Clone)]
pub struct PortConfig {
    mac: [u8; 6],
    vlan: Option<u16>,
    mtu: u16,
    cidrs: Box<[Cidr]>,
    gateway_v4: Option<Ipv4Addr>,
    gateway_v6: Option<Ipv6Addr>,
    local: LocalAddrs,
}

impl PortConfig {
    /// The port's MAC.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The 802.1Q VLAN id its frames carry, if the node's ports are tagged
    /// ([`Snapshot::vlan_tagged`]).
    pub fn vlan(&self) -> Option<u16> {
        self.vlan
    }

    /// The largest IP packet the port sends ([`SnapshotBuilder::mtu`], or
    /// [`DEFAULT_MTU`]).
    pub fn mtu(&self) -> u16 {
        self.mtu
    }

    /// Interface addresses with their connected prefixes.
    pub fn cidrs(&self) -> &[Cidr] {
        &self.cidrs
    }

    /// The IPv4 gateway, if any.
    pub fn gateway_v4(&self) -> Option<Ipv4Addr> {
        self.gateway_v4
    }

    /// The IPv6 gateway, if any.
    pub fn gateway_v6(&self) -> Option<Ipv6Addr> {
        self.gateway_v6
    }

    /// What the port answers ARP/ND/echo for: its own interface addresses,
    /// every VIP and every SNAT address (not other ports' interface
    /// addresses).
    pub fn local_addrs(&self) -> &LocalAddrs {
        &self.local
    }
}

/// Frontend key for IPv6: fixed size, `Copy`, cheap to hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct V6Key(u128, u32);

impl FlatKey for V6Key {
    /// The address folded ([`FlatKey`] of `u128`), the
    /// port and protocol in the upper half.
    #[inline(always)]
    fn bits(self) -> u64 {
        self.0.bits() ^ (u64::from(self.1) << 32)
    }
}

/// `addr << 24 | port << 8 | proto`: an IPv4 frontend in one `u64`.
#[inline]
pub(crate) fn v4_key(addr: Ipv4Addr, port: u16, proto: Proto) -> u64 {
    (u64::from(u32::from(addr)) << 24) | (u64::from(port) << 8) | proto as u64
}

#[inline]
pub(crate) fn v6_key(addr: Ipv6Addr, port: u16, proto: Proto) -> V6Key {
    V6Key(u128::from(addr), (u32::from(port) << 8) | proto as u32)
}

/// A connected IPv4 prefix: (network, mask, port).
type ConnectedV4 = (u32, u32, u16);
/// A connected IPv6 prefix: (network, mask, port).
type ConnectedV6 = (u128, u128, u16);

/// The directed broadcast addresses of the connected IPv4 prefixes of /30
/// or shorter ([`Snapshot::is_directed_broadcast`]), with a one-test
/// filter in front: a new connection's source passes through here.
#[derive(Debug, Clone, Default)]
struct BroadcastsV4 {
    /// The host bits all of them have set (those of their longest
    /// prefix): an address without them is none of them, whatever their
    /// number (the default, 0, filters nothing out of an empty list).
    low: u32,
    addrs: Box<[u32]>,
}

impl BroadcastsV4 {
    fn new(connected: &[ConnectedV4]) -> Self {
        let mut low = u32::MAX;
        let mut addrs = Vec::new();
        // /31 (RFC 3021) and /32 have no broadcast address.
        for &(net, mask, _) in connected.iter().filter(|c| !c.1 > 1) {
            low &= !mask;
            if !addrs.contains(&(net | !mask)) {
                addrs.push(net | !mask);
            }
        }
        BroadcastsV4 {
            low,
            addrs: addrs.into_boxed_slice(),
        }
    }

    #[inline(always)]
    fn contains(&self, a: u32) -> bool {
        a & self.low == self.low && self.addrs.contains(&a)
    }
}

/// The next [`Snapshot::epoch`]; 0 is never handed out.
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1);

/// A fresh epoch, unique in the process, for a snapshot whose contents
/// may differ from every earlier one's. Only uniqueness matters, so the
/// increment needs no ordering with other memory.
fn next_epoch() -> u64 {
    NEXT_EPOCH.fetch_add(1, Ordering::Relaxed)
}

/// The immutable lookup state of one revision. See the module doc.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    revision: u64,
    /// See [`Snapshot::epoch`].
    epoch: u64,
    local_node: Option<Box<str>>,
    services: Box<[Arc<Service>]>,
    service_names: HashMap<Box<str>, ServiceId>,
    frontends_v4: FlatMap<u64, Frontend>,
    frontends_v6: FlatMap<V6Key, Frontend>,
    owned_v4: FlatMap<u32, OwnerKind>,
    owned_v6: FlatMap<u128, OwnerKind>,
    /// Per VIP address, who may be told which of its ports are closed.
    vip_sources: VipSources,
    snat_v4: Box<[Ipv4Addr]>,
    snat_v6: Box<[Ipv6Addr]>,
    ports: Box<[Option<PortConfig>]>,
    /// Whether the ports carry VLAN tags (every port with an interface has
    /// a VLAN id, or none has).
    vlan_tagged: bool,
    /// Longest prefix first, so the first match is the best one.
    connected_v4: Box<[ConnectedV4]>,
    connected_v6: Box<[ConnectedV6]>,
    /// The resolved IPv4 next hops, so that one can be named by a `u32`
    /// (`Snapshot::hop_v4`): every neighbor entry and the default route.
    hops_v4: Box<[NextHop]>,
    /// IPv4 neighbor → index into `hops_v4`.
    neighbors_v4: FlatMap<u32, u32>,
    /// The resolved IPv6 next hops (`Snapshot::hop_v6`), as `hops_v4`.
    hops_v6: Box<[NextHop]>,
    /// IPv6 neighbor → index into `hops_v6`.
    neighbors_v6: FlatMap<u128, u32>,
    /// Index into `hops_v4`.
    default_v4: Option<u32>,
    /// Index into `hops_v6`.
    default_v6: Option<u32>,
    frontend_slots: u32,
    backend_slots: u32,
    /// The builder's `max_ring_size` (0 for [`Snapshot::empty`]).
    max_ring_size: u32,
    /// The broadcast addresses of `connected_v4`'s prefixes.
    broadcasts_v4: BroadcastsV4,
}

impl Snapshot {
    /// A snapshot with nothing in it (revision 0): every packet misses.
    /// What workers start with before the first build.
    pub fn empty() -> Snapshot {
        Snapshot::default()
    }

    /// Whether the ports carry 802.1Q VLAN tags: every port with an
    /// interface has a [`PortConfig::vlan`]. Frames must then carry their
    /// port's id, and the worker takes the general path for all of them.
    #[inline]
    pub fn vlan_tagged(&self) -> bool {
        self.vlan_tagged
    }

    /// The revision given to the builder.
    #[inline]
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// This snapshot's contents' identity in the process: every
    /// [`SnapshotBuilder::build`] and `Snapshot::with_*` takes a new value
    /// from one process-wide counter, a clone keeps it (same contents), and
    /// [`Snapshot::empty`] has 0, which no built snapshot has. Two
    /// snapshots with the same non-zero epoch answer every lookup alike,
    /// so a worker may cache what a lookup answered for as long as the
    /// epoch it stored with the answer is the current one (the conntrack
    /// flow cache does). Unlike [`revision`](Self::revision), which the
    /// control plane chooses and e.g. [`with_neighbors`](Self::with_neighbors)
    /// keeps.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The node name [`TrafficPolicy::Local`] compared against.
    pub fn local_node(&self) -> Option<&str> {
        self.local_node.as_deref()
    }

    /// The frontend for a destination, `None` if it is not a service
    /// address. O(1), no allocation.
    #[inline]
    pub fn frontend(&self, addr: IpAddr, port: u16, proto: Proto) -> Option<&Frontend> {
        match addr {
            IpAddr::V4(a) => self.frontend_v4(u32::from(a), port, proto),
            IpAddr::V6(a) => self.frontends_v6.get(v6_key(a, port, proto)),
        }
    }

    /// The frontend for a destination and its service. O(1), no allocation.
    #[inline]
    pub fn lookup(&self, addr: IpAddr, port: u16, proto: Proto) -> Option<(&Frontend, &Service)> {
        let f = self.frontend(addr, port, proto)?;
        Some((f, self.services.get(f.service.index())?.as_ref()))
    }

    /// The service `id`.
    ///
    /// # Panics
    ///
    /// If `id` did not come from this snapshot (a [`Frontend::service`] of
    /// this snapshot never panics). See [`get_service`](Self::get_service).
    #[inline]
    pub fn service(&self, id: ServiceId) -> &Service {
        &self.services[id.index()]
    }

    /// The service `id`, `None` if out of range.
    #[inline]
    pub fn get_service(&self, id: ServiceId) -> Option<&Service> {
        self.services.get(id.index()).map(Arc::as_ref)
    }

    /// The shared service `id`, to hand to
    /// [`SnapshotBuilder::keep_service`] or compare with `Arc::ptr_eq`.
    pub fn service_arc(&self, id: ServiceId) -> Option<&Arc<Service>> {
        self.services.get(id.index())
    }

    /// The service named `namespace/name`.
    pub fn service_by_name(&self, name: &str) -> Option<ServiceId> {
        self.service_names.get(name).copied()
    }

    /// All services; `ServiceId(i)` is index `i`.
    pub fn services(&self) -> &[Arc<Service>] {
        &self.services
    }

    /// Iterates over all frontends, in no particular order.
    pub fn frontends(&self) -> impl Iterator<Item = &Frontend> {
        self.frontends_v4.values().chain(self.frontends_v6.values())
    }

    /// The number of frontends.
    pub fn frontend_count(&self) -> usize {
        self.frontends_v4.len() + self.frontends_v6.len()
    }

    /// Backend `addr:port` of service `id`, any state.
    pub fn backend(&self, id: ServiceId, addr: IpAddr, port: u16) -> Option<&Backend> {
        self.get_service(id)?.find_backend(addr, port)
    }

    /// Length a per-worker frontend counter array needs: every frontend
    /// `stats_slot` is below it.
    pub fn frontend_slots(&self) -> u32 {
        self.frontend_slots
    }

    /// Length a per-worker backend counter array needs.
    pub fn backend_slots(&self) -> u32 {
        self.backend_slots
    }

    /// Whether the balancer owns `ip` (interface, VIP or SNAT address).
    #[inline]
    pub fn is_owned(&self, ip: IpAddr) -> bool {
        self.owner_kind(ip).is_some()
    }

    /// Why the balancer owns `ip`, `None` if it does not. O(1).
    #[inline]
    pub fn owner_kind(&self, ip: IpAddr) -> Option<OwnerKind> {
        match ip {
            IpAddr::V4(a) => self.owner_kind_v4(u32::from(a)),
            IpAddr::V6(a) => self.owned_v6.get(u128::from(a)).copied(),
        }
    }

    /// Whether at least one service with a frontend on the VIP address
    /// `vip` (any port, either protocol) allows `client`: its source ranges
    /// are empty or one holds `client`. The worker refuses a TCP segment to
    /// a port of `vip` that no frontend serves with a RST only then, so a
    /// client every service there denies cannot tell served ports from
    /// closed ones. False when `vip` is no frontend's address. O(log n) in
    /// the VIP's distinct source ranges, whatever the number of frontends;
    /// no allocation.
    #[inline]
    pub fn vip_allows_source(&self, vip: IpAddr, client: IpAddr) -> bool {
        self.vip_sources.allows(vip, client)
    }

    /// The prefixes [`vip_allows_source`](Self::vip_allows_source) holds
    /// for `vip`, as (network, prefix length).
    #[cfg(test)]
    pub(crate) fn vip_source_prefixes(&self, vip: IpAddr) -> Option<Vec<(IpAddr, u32)>> {
        self.vip_sources.prefixes(vip)
    }

    /// [`owner_kind`](Self::owner_kind) of an IPv4 address as a `u32`
    /// (host order), for the worker's fast path.
    #[inline(always)]
    pub(crate) fn owner_kind_v4(&self, a: u32) -> Option<OwnerKind> {
        self.owned_v4.get(a).copied()
    }

    /// [`frontend`](Self::frontend) of an IPv4 address as a `u32`.
    #[inline(always)]
    pub(crate) fn frontend_v4(&self, a: u32, port: u16, proto: Proto) -> Option<&Frontend> {
        self.frontends_v4.get(v4_key(Ipv4Addr::from(a), port, proto))
    }

    /// [`route`](Self::route) toward an IPv4 address as a `u32`; the fast
    /// paths use [`next_hop_index_v4`](Self::next_hop_index_v4), and tests
    /// hold it against this.
    #[cfg(test)]
    pub(crate) fn route_v4(&self, a: u32) -> Option<Route> {
        match self.next_hop_v4(a) {
            Some(h) => Some(Route::Resolved(h)),
            None => self
                .unresolved_hop(IpAddr::V4(Ipv4Addr::from(a)))
                .map(Route::Unresolved),
        }
    }

    /// The MAC published for `ip` as a neighbor itself (a resolved
    /// gateway, backend or client on a connected prefix), not the next hop
    /// toward it; `None` if it has none.
    pub fn neighbor_mac(&self, ip: IpAddr) -> Option<[u8; 6]> {
        match ip {
            IpAddr::V4(a) => {
                let i = *self.neighbors_v4.get(u32::from(a))?;
                self.hop_v4(i).map(|h| h.dst_mac)
            }
            IpAddr::V6(a) => {
                let i = *self.neighbors_v6.get(u128::from(a))?;
                self.hop_v6(i).map(|h| h.dst_mac)
            }
        }
    }

    /// `route_v4` (a test helper) when it is resolved, as the index of
    /// the next hop for [`hop_v4`](Self::hop_v4): `Some(i)` exactly when
    /// `route_v4(a)` is `Some(Route::Resolved(h))`, and then
    /// `hop(i) == Some(&h)`. `None` for an unresolved hop or no route.
    #[inline(always)]
    pub(crate) fn next_hop_index_v4(&self, a: u32) -> Option<u32> {
        if let Some(&i) = self.neighbors_v4.get(a) {
            return Some(i);
        }
        if self.connected_v4.iter().any(|&(net, mask, _)| a & mask == net) {
            return None;
        }
        self.default_v4
    }

    /// The resolved IPv4 next hop with index `i` (from
    /// [`next_hop_index_v4`](Self::next_hop_index_v4) on this snapshot or
    /// one of the same [`epoch`](Self::epoch)); `None` out of range.
    #[inline(always)]
    pub(crate) fn hop_v4(&self, i: u32) -> Option<&NextHop> {
        self.hops_v4.get(i as usize)
    }

    /// The table [`hop_v4`](Self::hop_v4) reads: `hops_v4()[i]` is
    /// `hop_v4(i)`.
    #[inline(always)]
    pub(crate) fn hops_v4(&self) -> &[NextHop] {
        &self.hops_v4
    }

    /// [`next_hop_index_v4`](Self::next_hop_index_v4) for an IPv6
    /// address as a `u128`: `Some(i)` exactly when
    /// [`next_hop`](Self::next_hop) of that address is `Some(h)`, and then
    /// `hop_v6(i) == Some(&h)`.
    #[inline(always)]
    pub(crate) fn next_hop_index_v6(&self, a: u128) -> Option<u32> {
        if let Some(&i) = self.neighbors_v6.get(a) {
            return Some(i);
        }
        if self.connected_v6.iter().any(|&(net, mask, _)| a & mask == net) {
            return None;
        }
        self.default_v6
    }

    /// The resolved IPv6 next hop with index `i`, as
    /// [`hop_v4`](Self::hop_v4).
    #[inline(always)]
    pub(crate) fn hop_v6(&self, i: u32) -> Option<&NextHop> {
        self.hops_v6.get(i as usize)
    }

    /// The table [`hop_v6`](Self::hop_v6) reads.
    #[inline(always)]
    pub(crate) fn hops_v6(&self) -> &[NextHop] {
        &self.hops_v6
    }

    /// [`next_hop`](Self::next_hop) toward an IPv4 address as a `u32`.
    #[inline(always)]
    fn next_hop_v4(&self, a: u32) -> Option<NextHop> {
        self.next_hop_index_v4(a).and_then(|i| self.hop_v4(i)).copied()
    }

    /// SNAT addresses, IPv4, in the order given (deduplicated).
    pub fn snat_v4(&self) -> &[Ipv4Addr] {
        &self.snat_v4
    }

    /// SNAT addresses, IPv6, in the order given (deduplicated).
    pub fn snat_v6(&self) -> &[Ipv6Addr] {
        &self.snat_v6
    }

    /// Port `id`'s configuration, `None` if it has no interface.
    pub fn port(&self, id: u16) -> Option<&PortConfig> {
        self.ports.get(usize::from(id))?.as_ref()
    }

    /// The number of port slots (highest configured port id + 1).
    pub fn port_count(&self) -> usize {
        self.ports.len()
    }

    /// Layer-2 next hop toward `dst`. A neighbor entry for `dst` wins; a
    /// `dst` in a connected prefix with no entry has none (it is not sent
    /// to the gateway); otherwise the default gateway of `dst`'s family
    /// (that of the lowest port configuring one, out of that port), if it
    /// has a neighbor entry. `None`: no next hop with a known MAC, see
    /// [`route`](Self::route). O(1) plus a scan of the interface prefixes; no
    /// allocation.
    #[inline]
    pub fn next_hop(&self, dst: IpAddr) -> Option<NextHop> {
        match dst {
            IpAddr::V4(a) => self.next_hop_v4(u32::from(a)),
            IpAddr::V6(a) => self
                .next_hop_index_v6(u128::from(a))
                .and_then(|i| self.hop_v6(i))
                .copied(),
        }
    }

    /// The route toward `dst`: [`next_hop`](Self::next_hop) when it has
    /// an answer (one hash lookup when `dst` is a neighbor), else
    /// [`unresolved_hop`](Self::unresolved_hop); `None` when there is no
    /// route at all (the worker drops with `NoRoute`). No allocation.
    #[inline]
    pub fn route(&self, dst: IpAddr) -> Option<Route> {
        match self.next_hop(dst) {
            Some(h) => Some(Route::Resolved(h)),
            None => self.unresolved_hop(dst).map(Route::Unresolved),
        }
    }

    /// When [`next_hop`](Self::next_hop) has no answer for `dst`: the
    /// next hop to resolve and the port to send on, or `None` when there is
    /// no route at all (no port's prefix holds `dst` and no port has a
    /// gateway of its family). Slow path: a scan of the prefixes and ports.
    pub fn unresolved_hop(&self, dst: IpAddr) -> Option<UnresolvedHop> {
        if let Some(port) = self.connected_port(dst) {
            let p = self.port(port);
            return Some(UnresolvedHop {
                port,
                src_mac: p.map_or([0; 6], PortConfig::mac),
                via: dst,
                mtu: p.map_or(DEFAULT_MTU, PortConfig::mtu),
            });
        }
        let gateway = |p: &PortConfig| match dst {
            IpAddr::V4(_) => p.gateway_v4.map(IpAddr::V4),
            IpAddr::V6(_) => p.gateway_v6.map(IpAddr::V6),
        };
        self.ports.iter().enumerate().find_map(|(id, p)| {
            let p = p.as_ref()?;
            Some(UnresolvedHop {
                port: id as u16, // < MAX_PORTS
                src_mac: p.mac,
                via: gateway(p)?,
                mtu: p.mtu,
            })
        })
    }

    /// Whether `ip` is the directed broadcast address of a connected IPv4
    /// prefix of /30 or shorter: its host bits all ones (RFC 919, RFC 1812
    /// §4.2.3.1), one address that names every host of the prefix. The
    /// worker neither opens a connection from it nor forwards to it.
    /// IPv6 has no broadcast. Out of line: only the general path asks it,
    /// off its hot paths (the fast path has an IPv4 form of its own).
    #[inline(never)]
    pub fn is_directed_broadcast(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => self.is_directed_broadcast_v4(u32::from(a)),
            IpAddr::V6(_) => false,
        }
    }

    /// [`is_directed_broadcast`](Self::is_directed_broadcast) of an IPv4
    /// address as a `u32`: a scan of the connected prefixes (a few).
    #[inline(always)]
    pub(crate) fn is_directed_broadcast_v4(&self, a: u32) -> bool {
        self.broadcasts_v4.contains(a)
    }

    /// The port whose connected prefix (longest match) holds `ip`.
    pub fn connected_port(&self, ip: IpAddr) -> Option<u16> {
        connected_port(&self.connected_v4, &self.connected_v6, ip)
    }
}

/// The port of the first (longest) prefix in the tables that holds `ip`.
pub(crate) fn connected_port(v4: &[ConnectedV4], v6: &[ConnectedV6], ip: IpAddr) -> Option<u16> {
    match ip {
        IpAddr::V4(a) => {
            let a = u32::from(a);
            v4.iter().find(|c| a & c.1 == c.0).map(|c| c.2)
        }
        IpAddr::V6(a) => {
            let a = u128::from(a);
            v6.iter().find(|c| a & c.1 == c.0).map(|c| c.2)
        }
    }
}
