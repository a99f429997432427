//! The compiler: [`DesiredState`] + [`NodeConfig`] → [`Snapshot`], through
//! [`SnapshotBuilder`] with `reuse_from(previous)`.
//!
//! Incremental: given the [`Delta`] of a transaction, only the services it
//! touched (their own fields or their backends) are specified again; every
//! other service is taken whole from the previous snapshot with
//! [`SnapshotBuilder::keep_service`] (same `Arc<Service>`, same rings).
//! Frontends are cheap and always specified. When a transaction changed
//! no frontend and added or removed no service (a backend or a service's
//! fields changed), the compiler skips the builder's full pass and calls
//! [`Snapshot::with_services`], which clones the previous snapshot's tables
//! and replaces only the touched services. One backend change among 10,000
//! services re-specifies one service and builds one ring.
//!
//! Counter slots: the compiler owns two allocators, keyed by
//! [`FrontendKey`] and [`BackendKey`], and passes explicit `stats_slot`s, so
//! a live object's slot never changes and a deleted object's slot is freed
//! (lowest free first) once the commit is final. A compile hands back a
//! [`SlotJournal`]; the plane calls [`Compiler::commit`] after the state
//! file is written and the snapshot published, or [`Compiler::rollback`]
//! when anything failed, so a rejected transaction leaves the allocators
//! as they were.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::Hash;
use std::net::IpAddr;
use std::time::Duration;

use lb_dataplane::flow::Proto;
use lb_dataplane::snapshot::{
    BackendSpec, BackendState as SnapBackendState, BuildError, ForwardMode, FrontendKind, FrontendSpec,
    ServiceId, ServiceSpec, SessionAffinity, TrafficPolicy as SnapPolicy,
};
use lb_dataplane::{Snapshot, SnapshotBuilder};

use crate::model::{
    Backend, BackendKey, BackendState, DesiredState, ErrorKind, Frontend, FrontendKey, FrontendType, Mode,
    Protocol, Service, TrafficPolicy, ValidationError,
};
use crate::plane::{InterfaceConfig, NodeConfig};
use crate::store::{backends_of, Delta};

/// A slot allocator for one key space.
///
/// A connection keeps the counter slots of its frontend and backend for
/// its whole life, so the open connections of a deleted object go on
/// counting to its slot. A new object therefore gets, in this order: a
/// slot no published snapshot has used (one a failed compile gave back,
/// or the next one, while the workers' counter arrays have room), and only
/// then the slot freed longest ago, whose old connections have had the
/// most time to end.
#[derive(Debug)]
struct Slots<K> {
    map: HashMap<K, u32>,
    /// Never published (given back by a rolled-back compile).
    unused: BTreeSet<u32>,
    /// Freed by deletes, oldest first.
    retired: VecDeque<u32>,
    next: u32,
    /// The workers' counter array size: slots from here on are not
    /// counted, so `retired` is used before `next` passes it.
    capacity: u32,
}

impl<K> Slots<K> {
    fn new(capacity: usize) -> Self {
        Slots {
            map: HashMap::new(),
            unused: BTreeSet::new(),
            retired: VecDeque::new(),
            next: 0,
            capacity: u32::try_from(capacity).unwrap_or(u32::MAX),
        }
    }
}

impl<K: Hash + Eq + Clone> Slots<K> {
    /// The key's slot, allocated (and journaled, with whether it was a
    /// retired one) if it has none.
    fn get(&mut self, key: &K, journal: &mut Vec<(K, bool)>) -> u32 {
        if let Some(&s) = self.map.get(key) {
            return s;
        }
        let (s, retired) = if let Some(s) = self.unused.pop_first() {
            (s, false)
        } else if self.next >= self.capacity && !self.retired.is_empty() {
            (self.retired.pop_front().unwrap_or_default(), true)
        } else {
            self.next += 1;
            (self.next - 1, false)
        };
        self.map.insert(key.clone(), s);
        journal.push((key.clone(), retired));
        s
    }

    /// Frees a deleted object's slot (its connections may still count to
    /// it).
    fn retire(&mut self, key: &K) {
        if let Some(s) = self.map.remove(key) {
            self.retired.push_back(s);
        }
    }

    /// Undoes `get`'s allocation of `key` (journal entries in reverse).
    fn give_back(&mut self, key: &K, retired: bool) {
        if let Some(s) = self.map.remove(key) {
            if retired {
                self.retired.push_front(s);
            } else {
                self.unused.insert(s);
            }
        }
    }
}

/// Slots allocated by one compile, and keys whose slots are to be freed.
#[derive(Debug, Default)]
#[must_use = "commit or roll back the journal"]
pub struct SlotJournal {
    new_frontends: Vec<(FrontendKey, bool)>,
    new_backends: Vec<(BackendKey, bool)>,
    gone_frontends: Vec<FrontendKey>,
    gone_backends: Vec<BackendKey>,
}

impl SlotJournal {
    /// Frontend slots allocated by this compile.
    pub fn new_frontend_slots<'a>(&'a self, c: &'a Compiler) -> impl Iterator<Item = u32> + 'a {
        self.new_frontends
            .iter()
            .filter_map(|(k, _)| c.frontends.map.get(k).copied())
    }

    /// Backend slots allocated by this compile.
    pub fn new_backend_slots<'a>(&'a self, c: &'a Compiler) -> impl Iterator<Item = u32> + 'a {
        self.new_backends
            .iter()
            .filter_map(|(k, _)| c.backends.map.get(k).copied())
    }
}

/// Compiles desired states for one node; see the module doc.
#[derive(Debug)]
pub struct Compiler {
    node: NodeConfig,
    /// Resolved next hops (runtime state of the node, not desired state):
    /// every full build carries them; the incremental path clones them.
    neighbors: Vec<(IpAddr, [u8; 6])>,
    frontends: Slots<FrontendKey>,
    backends: Slots<BackendKey>,
}

impl Compiler {
    /// A compiler with no slot allocated.
    pub fn new(node: NodeConfig) -> Compiler {
        Compiler {
            node,
            neighbors: Vec::new(),
            frontends: Slots::new(lb_dataplane::worker::DEFAULT_FRONTEND_SLOTS),
            backends: Slots::new(lb_dataplane::worker::DEFAULT_BACKEND_SLOTS),
        }
    }

    /// The node configuration.
    pub fn node(&self) -> &NodeConfig {
        &self.node
    }

    /// The neighbors every later compile includes.
    pub fn neighbors(&self) -> &[(IpAddr, [u8; 6])] {
        &self.neighbors
    }

    /// Replaces the neighbors; the caller has validated them (with
    /// `Snapshot::with_neighbors`).
    pub fn set_neighbors(&mut self, neighbors: Vec<(IpAddr, [u8; 6])>) {
        self.neighbors = neighbors;
    }

    /// Shrinks the counter arrays the slots are given for (tests: to reach
    /// the reuse of retired slots).
    #[cfg(test)]
    pub(crate) fn set_slot_capacity(&mut self, frontends: u32, backends: u32) {
        self.frontends.capacity = frontends;
        self.backends.capacity = backends;
    }

    /// The slot of a live frontend.
    pub fn frontend_slot(&self, key: &FrontendKey) -> Option<u32> {
        self.frontends.map.get(key).copied()
    }

    /// The slot of a live backend.
    pub fn backend_slot(&self, key: &BackendKey) -> Option<u32> {
        self.backends.map.get(key).copied()
    }

    /// Compiles `state` at `revision`. With `delta`, services it does not
    /// name are kept from `prev`; without, everything is specified (first
    /// compile). A [`BuildError`] becomes a FAILED_PRECONDITION
    /// [`ValidationError`] naming the object and field; on error nothing is
    /// allocated.
    pub fn compile(
        &mut self,
        state: &DesiredState,
        revision: u64,
        prev: &Snapshot,
        delta: Option<&Delta>,
    ) -> Result<(Snapshot, SlotJournal), ValidationError> {
        let mut journal = SlotJournal::default();
        match self.build(state, revision, prev, delta, &mut journal) {
            Ok(s) => {
                match delta {
                    Some(d) => {
                        journal.gone_frontends = d
                            .deleted_frontends
                            .iter()
                            .filter(|k| !state.frontends.contains_key(k))
                            .copied()
                            .collect();
                        journal.gone_backends = d
                            .deleted_backends
                            .iter()
                            .filter(|k| !state.backends.contains_key(k))
                            .cloned()
                            .collect();
                    }
                    None => {
                        journal.gone_frontends = (self.frontends.map.keys())
                            .filter(|k| !state.frontends.contains_key(k))
                            .copied()
                            .collect();
                        journal.gone_backends = (self.backends.map.keys())
                            .filter(|k| !state.backends.contains_key(k))
                            .cloned()
                            .collect();
                    }
                }
                Ok((s, journal))
            }
            Err(e) => {
                self.rollback(journal);
                Err(compile_error(e, state))
            }
        }
    }

    /// Makes a compile final: frees the slots of deleted objects.
    pub fn commit(&mut self, journal: SlotJournal) {
        for k in &journal.gone_frontends {
            self.frontends.retire(k);
        }
        for k in &journal.gone_backends {
            self.backends.retire(k);
        }
    }

    /// Undoes a compile's allocations.
    pub fn rollback(&mut self, journal: SlotJournal) {
        for (k, retired) in journal.new_frontends.iter().rev() {
            self.frontends.give_back(k, *retired);
        }
        for (k, retired) in journal.new_backends.iter().rev() {
            self.backends.give_back(k, *retired);
        }
    }

    fn build(
        &mut self,
        state: &DesiredState,
        revision: u64,
        prev: &Snapshot,
        delta: Option<&Delta>,
        journal: &mut SlotJournal,
    ) -> Result<Snapshot, BuildError> {
        if let Some(d) = delta {
            let in_place = !d.frontends_changed
                && d.services
                    .iter()
                    .all(|n| state.services.contains_key(n) && prev.service_by_name(n).is_some());
            if in_place {
                let mut changed = Vec::with_capacity(d.services.len());
                for name in &d.services {
                    let svc = &state.services[name];
                    let backends = backends_of(state, name)
                        .map(|be| backend_spec(be, self.backends.get(&be.key, &mut journal.new_backends)))
                        .collect();
                    changed.push((service_spec(svc)?, backends));
                }
                return prev.with_services(revision, changed);
            }
        }
        let mut b = SnapshotBuilder::new(revision);
        b.reuse_from(prev).max_ring_size(self.node.max_ring_size);
        if let Some(n) = &self.node.node_name {
            b.local_node(n.clone());
        }
        for i in &self.node.interfaces {
            b.interface(i.port, i.mac, i.cidr, i.gateway);
            if let Some(vid) = i.vlan {
                // The builder tags a port once any entry names a VLAN; an
                // entry of the same port without one is a contradiction,
                // not an untagged address on a tagged port.
                let untagged = |j: &InterfaceConfig| j.port == i.port && j.vlan.is_none();
                if self.node.interfaces.iter().any(untagged) {
                    return Err(BuildError::Vlan {
                        port: i.port,
                        vid,
                        reason: "another interface entry of the port has no VLAN",
                    });
                }
                b.vlan(i.port, vid);
            }
            if let Some(mtu) = i.mtu {
                b.mtu(i.port, mtu);
            }
        }
        for &a in &self.node.snat_addresses {
            b.snat_address(a);
        }
        for &(ip, mac) in &self.neighbors {
            b.neighbor(ip, mac);
        }
        let mut ids: HashMap<&str, ServiceId> = HashMap::with_capacity(state.services.len());
        for (name, svc) in &state.services {
            let kept = match delta {
                Some(d) if !d.services.contains(name) => {
                    prev.service_by_name(name).and_then(|id| prev.service_arc(id))
                }
                _ => None,
            };
            let id = match kept {
                Some(s) => b.keep_service(s)?,
                None => {
                    let id = b.service(service_spec(svc)?)?;
                    for be in backends_of(state, name) {
                        let slot = self.backends.get(&be.key, &mut journal.new_backends);
                        b.backend(id, backend_spec(be, slot))?;
                    }
                    id
                }
            };
            ids.insert(name, id);
        }
        for f in state.frontends.values() {
            let Some(&id) = ids.get(f.service.as_str()) else {
                // The store guarantees the service exists.
                continue;
            };
            let slot = self.frontends.get(&f.key, &mut journal.new_frontends);
            b.frontend(id, frontend_spec(f, slot))?;
        }
        b.build()
    }
}

fn service_spec(s: &Service) -> Result<ServiceSpec, BuildError> {
    let mut spec = ServiceSpec::new(s.name.clone());
    spec.mode = match s.mode {
        Mode::Dnat => ForwardMode::Dnat,
        Mode::FullNat => ForwardMode::FullNat,
    };
    spec.traffic_policy = match s.traffic_policy {
        TrafficPolicy::Cluster => SnapPolicy::Cluster,
        TrafficPolicy::Local => SnapPolicy::Local,
    };
    spec.affinity = match s.affinity_timeout_seconds {
        None => SessionAffinity::None,
        Some(t) => SessionAffinity::ClientIp {
            timeout: Duration::from_secs(u64::from(t)),
        },
    };
    spec.source_ranges = s.source_ranges.iter().map(|c| c.0).collect();
    Ok(spec)
}

fn frontend_spec(f: &Frontend, slot: u32) -> FrontendSpec {
    let proto = match f.key.protocol {
        Protocol::Tcp => Proto::Tcp,
        Protocol::Udp => Proto::Udp,
    };
    let kind = match f.kind {
        FrontendType::ClusterIp => FrontendKind::ClusterIp,
        FrontendType::NodePort => FrontendKind::NodePort,
        FrontendType::LoadBalancer => FrontendKind::LoadBalancer,
        FrontendType::ExternalIp => FrontendKind::ExternalIp,
    };
    let mut spec = FrontendSpec::new(f.key.addr, f.key.port, proto, kind);
    spec.stats_slot = Some(slot);
    spec
}

fn backend_spec(b: &Backend, slot: u32) -> BackendSpec {
    BackendSpec {
        addr: b.key.addr,
        port: b.key.port,
        weight: b.weight,
        state: match b.effective_state() {
            BackendState::Active => SnapBackendState::Active,
            BackendState::Terminating => SnapBackendState::Terminating,
            BackendState::Quarantined => SnapBackendState::Quarantined,
            BackendState::Maintenance => SnapBackendState::Maintenance,
        },
        node: b.node.clone(),
        zone: b.zone.clone(),
        stats_slot: Some(slot),
    }
}

/// [`build_error`] for a compile of `state`. The builder names only the
/// address of an SNAT address that is also a frontend address; the error
/// names the first frontend at it, as the API does, so that the plane finds
/// the change that wrote it (a commit's node configuration is the one the
/// previous state compiled for, so every frontend at an SNAT address is
/// one the transaction wrote).
fn compile_error(e: BuildError, state: &DesiredState) -> ValidationError {
    if let BuildError::SnatIsVip { addr } = e {
        if let Some(k) = state.frontends.keys().find(|k| k.addr == addr) {
            return ValidationError {
                kind: ErrorKind::Precondition,
                object: format!("frontend {k}"),
                field: "address".into(),
                message: format!("{addr} is one of this node's SNAT addresses"),
            };
        }
    }
    build_error(e)
}

/// A build error as a FAILED_PRECONDITION naming object and field. The
/// errors a request can cause name the object as the API does (`backend
/// 10.1.0.1:8080 of default/web`, `frontend 10.0.0.1:80/tcp`, `service
/// "default/web"`, so that the plane can find the change that wrote it) and
/// the proto's field (`address`, not the data plane's `addr`); the others
/// are split from the builder's messages, which read `<object>: field
/// <field>: <what>`.
pub fn build_error(e: BuildError) -> ValidationError {
    let kind = match e {
        BuildError::DuplicateFrontend { .. } | BuildError::DuplicateService { .. } => {
            ErrorKind::AlreadyExists
        }
        _ => ErrorKind::Precondition,
    };
    let named = |object: String, field: &str, message: String| ValidationError {
        kind,
        object,
        field: field.into(),
        message,
    };
    let backend = |service: &str, addr: IpAddr, port: u16| {
        format!("backend {} of {service}", crate::model::endpoint(addr, port))
    };
    match &e {
        BuildError::BackendIsLocal {
            service,
            addr,
            port,
            what,
        } => {
            return named(
                backend(service, *addr, *port),
                "address",
                format!("{addr} is {what}"),
            )
        }
        BuildError::BackendAddress { service, addr, port } => {
            return named(
                backend(service, *addr, *port),
                "address",
                "unspecified, multicast or broadcast".into(),
            )
        }
        BuildError::BackendWeight {
            service,
            addr,
            port,
            weight,
            max,
        } => {
            return named(
                backend(service, *addr, *port),
                "weight",
                format!("{weight} exceeds {max}"),
            )
        }
        BuildError::FrontendAddress { frontend, .. } => {
            return named(
                format!("frontend {frontend}"),
                "address",
                "not one host's address (unspecified, 0/8, loopback, multicast, broadcast or IPv4-mapped)"
                    .into(),
            )
        }
        BuildError::FrontendIsBroadcast { frontend, .. } => {
            return named(
                format!("frontend {frontend}"),
                "address",
                "the broadcast address of a prefix on one of lbd's ports".into(),
            )
        }
        BuildError::NoSnatAddress {
            service,
            frontend,
            family,
        } => {
            return named(
                format!("frontend {frontend}"),
                "address",
                format!("service {service:?} is full-NAT, and this node has no {family} SNAT address"),
            )
        }
        BuildError::DuplicateService { name } => {
            return named(
                format!("service {name:?}"),
                "name",
                "duplicate service name".into(),
            )
        }
        BuildError::TooManyBackends { service, max } => {
            return named(
                format!("service {service:?}"),
                "backends",
                format!("more than {max} backends"),
            )
        }
        BuildError::Maglev { service, source } => {
            return named(
                format!("service {service:?}"),
                "backends",
                format!("Maglev ring: {source}"),
            )
        }
        BuildError::SourceRangeFamily {
            service,
            frontend,
            family,
        } => {
            return named(
                format!("service {service:?}"),
                "source_ranges",
                format!("no {family} range for frontend {frontend}, so every client would be denied"),
            )
        }
        _ => {}
    }
    let text = e.to_string();
    let (object, field, message) = match text.split_once(": field ") {
        Some((object, rest)) => match rest.split_once(": ") {
            Some((field, message)) => (object.to_string(), field.to_string(), message.to_string()),
            None => (object.to_string(), rest.to_string(), String::new()),
        },
        // Messages without a field: `snat address A: also a frontend
        // address` (when no frontend of the state is at A to name, see
        // `compile_error`).
        None => match text.split_once(": ") {
            Some((object, message)) => {
                let field = if object.starts_with("service") {
                    "backends"
                } else {
                    "address"
                };
                (object.to_string(), field.to_string(), message.to_string())
            }
            None => ("snapshot".to_string(), "-".to_string(), text.clone()),
        },
    };
    ValidationError {
        kind,
        object,
        field,
        message,
    }
}

#[cfg(test)]
mod slot_tests {
    use super::Slots;

    /// Fresh slots first; once the counter arrays are used up, the slot
    /// retired longest ago; a rolled-back allocation goes back where it
    /// came from.
    #[test]
    fn retired_slots_wait_until_the_fresh_ones_are_used() {
        let mut s: Slots<&str> = Slots::new(4);
        let mut j = Vec::new();
        let got: Vec<u32> = ["a", "b", "c"].iter().map(|k| s.get(k, &mut j)).collect();
        assert_eq!(got, [0, 1, 2]);
        s.retire(&"b");
        s.retire(&"a");
        assert_eq!(s.get(&"d", &mut j), 3, "a fresh slot before a retired one");
        // Capacity reached: the longest-retired first (b, then a).
        let mut j2 = Vec::new();
        assert_eq!(s.get(&"e", &mut j2), 1);
        assert_eq!(j2, [("e", true)]);
        s.give_back(&"e", true);
        assert_eq!(s.get(&"f", &mut j2), 1, "given back to the head");
        assert_eq!(s.get(&"g", &mut j2), 0);
        // Nothing retired left: past the capacity (not counted).
        assert_eq!(s.get(&"h", &mut j2), 4);
        // A fresh allocation given back is reused first.
        s.give_back(&"h", false);
        s.retire(&"c");
        assert_eq!(s.get(&"i", &mut j2), 4);
    }
}

#[cfg(test)]
mod tests {
    use lb_dataplane::maglev::MaglevError;
    use lb_dataplane::snapshot::BuildError;

    use super::build_error;

    /// Errors about a service name it as `Change::object_name` does, quoted,
    /// so that the plane can find the change (and config entry) that wrote it.
    #[test]
    fn service_errors_name_the_service_as_changes_do() {
        let svc = "default/web".to_string();
        for (e, field) in [
            (BuildError::DuplicateService { name: svc.clone() }, "name"),
            (
                BuildError::TooManyBackends {
                    service: svc.clone(),
                    max: 65535,
                },
                "backends",
            ),
            (
                BuildError::Maglev {
                    service: svc.clone(),
                    source: MaglevError::ZeroTotalWeight { backends: 2 },
                },
                "backends",
            ),
        ] {
            let v = build_error(e);
            assert_eq!(
                (v.object.as_str(), v.field.as_str()),
                ("service \"default/web\"", field)
            );
        }
    }

    /// A prefix's broadcast address as a frontend, SNAT address or backend:
    /// named as the API names them, field `address`.
    #[test]
    fn broadcast_addresses_name_the_object() {
        let at = "the broadcast address of a prefix on one of lbd's ports";
        for (e, object) in [
            (
                BuildError::FrontendIsBroadcast {
                    service: "default/web".into(),
                    frontend: "10.0.0.255:80/tcp".into(),
                },
                "frontend 10.0.0.255:80/tcp",
            ),
            (
                BuildError::SnatIsBroadcast {
                    addr: "10.0.0.255".parse().unwrap(),
                },
                "snat address 10.0.0.255",
            ),
            (
                BuildError::BackendIsLocal {
                    service: "default/web".into(),
                    addr: "10.0.0.255".parse().unwrap(),
                    port: 8080,
                    what: at,
                },
                "backend 10.0.0.255:8080 of default/web",
            ),
        ] {
            let v = build_error(e);
            assert_eq!((v.object.as_str(), v.field.as_str()), (object, "address"));
            assert!(v.message.ends_with(at), "{}", v.message);
        }
    }
}
