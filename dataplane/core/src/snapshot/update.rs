//! [`Snapshot::with_services`]: the next snapshot when only some services'
//! own fields or backends changed (the common case: a backend weight,
//! state or endpoint change). Everything else — frontends, owned
//! addresses, ports, routes, every other service — is carried over: the
//! tables are cloned (flat copies) and unchanged services are the same
//! `Arc<Service>`. Only the named services are rebuilt, through the
//! builder's own service path, so they are validated and share their rings
//! with `self` where the eligible backends did not change. The per-VIP
//! union of source ranges (who may be refused with a RST) is made again
//! from the frontends when a changed service's ranges changed.
//!
//! Each gives the new snapshot a new [`Snapshot::epoch`], as a build does.
//!
//! Not for adding or removing services or changing frontends: use
//! [`SnapshotBuilder`] (with `reuse_from` and
//! [`keep_service`](SnapshotBuilder::keep_service)).

use std::net::IpAddr;
use std::sync::Arc;

use super::builder::{check_backends_not_local, frontend_name};
use super::flat::FlatMap;
use super::net::{PortDraft, Routes};
use super::vip_sources::VipSources;
use super::{BackendSpec, BuildError, ForwardMode, ServiceSpec, Snapshot, SnapshotBuilder};

impl Snapshot {
    /// A copy of `self` at `revision` where each service named in `changed`
    /// is replaced by the given spec and backends. Every name must be a
    /// service of `self` ([`BuildError::NotInSnapshot`] otherwise). The
    /// checks that involve the node's addresses are redone: full-NAT needs
    /// an SNAT address of each frontend's family, source ranges must cover
    /// each frontend's family, and no backend may be at one of the node's
    /// own addresses. The per-VIP source ranges
    /// ([`vip_allows_source`](Self::vip_allows_source)) follow the new
    /// services' ranges. Backends without an explicit
    /// `stats_slot` keep the slot the same backend had in `self`, or get a
    /// new one above every slot of `self`.
    pub fn with_services(
        &self,
        revision: u64,
        changed: Vec<(ServiceSpec, Vec<BackendSpec>)>,
    ) -> Result<Snapshot, BuildError> {
        let mut b = SnapshotBuilder::new(revision);
        b.reuse_from(self);
        if self.max_ring_size != 0 {
            b.max_ring_size(self.max_ring_size);
        }
        if let Some(n) = &self.local_node {
            b.local_node(n.to_string());
        }
        let mut next_slot = self.backend_slots;
        let mut ids = Vec::with_capacity(changed.len());
        for (spec, backends) in changed {
            let Some(id) = self.service_by_name(&spec.name) else {
                return Err(BuildError::NotInSnapshot { name: spec.name });
            };
            let old = &self.services[id.index()];
            let mine = b.service(spec)?;
            for mut be in backends {
                if be.stats_slot.is_none() {
                    let slot = match old.find_backend(be.addr, be.port) {
                        Some(o) => o.stats_slot,
                        None => {
                            next_slot += 1;
                            next_slot - 1
                        }
                    };
                    be.stats_slot = Some(slot);
                }
                b.backend(mine, be)?;
            }
            ids.push(id);
        }
        // No interfaces, SNAT addresses or frontends: the mini build only
        // builds (and validates) the services.
        let built = b.build()?;
        let mut next = self.clone();
        next.revision = revision;
        next.epoch = super::next_epoch();
        let mut services = next.services.into_vec();
        for (id, s) in ids.iter().zip(built.services.iter()) {
            next.backend_slots = s
                .backends
                .iter()
                .map(|b| b.stats_slot.saturating_add(1))
                .fold(next.backend_slots, u32::max);
            services[id.index()] = Arc::clone(s);
        }
        next.services = services.into_boxed_slice();
        for id in &ids {
            check_backends_not_local(
                &next.services[id.index()],
                |ip| next.owner_kind(ip),
                |ip| next.is_directed_broadcast(ip),
            )?;
        }
        for f in next.frontends_v4.values().chain(next.frontends_v6.values()) {
            if !ids.contains(&f.service) {
                continue;
            }
            let s = &next.services[f.service.index()];
            let v4 = f.addr.is_ipv4();
            let family = if v4 { "IPv4" } else { "IPv6" };
            let has_snat = if v4 {
                !next.snat_v4.is_empty()
            } else {
                !next.snat_v6.is_empty()
            };
            if s.mode == ForwardMode::FullNat && !has_snat {
                return Err(BuildError::NoSnatAddress {
                    service: s.name.to_string(),
                    frontend: frontend_name(f.addr, f.port, f.proto),
                    family,
                });
            }
            if !s.source_ranges.is_empty() && !s.source_ranges.iter().any(|c| c.is_v4() == v4) {
                return Err(BuildError::SourceRangeFamily {
                    service: s.name.to_string(),
                    frontend: frontend_name(f.addr, f.port, f.proto),
                    family,
                });
            }
        }
        // Who may be refused with a RST follows the source ranges (the
        // frontends are `self`'s): made again only when some changed.
        let ranges_changed = ids
            .iter()
            .any(|id| self.services[id.index()].source_ranges != next.services[id.index()].source_ranges);
        if ranges_changed {
            next.vip_sources = VipSources::new(next.frontends(), &next.services);
        }
        Ok(next)
    }

    /// A copy of `self` (same revision, services shared) whose neighbor
    /// table and default routes are rebuilt from `neighbors`, validated as
    /// [`SnapshotBuilder::neighbor`] entries are: a unicast MAC, an address
    /// in a port's prefix, no address twice with different MACs. What the
    /// control thread publishes when ARP resolves or forgets a next hop.
    pub fn with_neighbors(&self, neighbors: &[(IpAddr, [u8; 6])]) -> Result<Snapshot, BuildError> {
        let drafts: Vec<Option<PortDraft>> = self
            .ports
            .iter()
            .map(|p| {
                p.as_ref().map(|p| PortDraft {
                    mac: p.mac,
                    vlan: p.vlan,
                    mtu: Some(p.mtu),
                    cidrs: p.cidrs.to_vec(),
                    gateway_v4: p.gateway_v4,
                    gateway_v6: p.gateway_v6,
                })
            })
            .collect();
        let routes = Routes::new(&drafts, neighbors)?;
        let mut next = self.clone();
        next.epoch = super::next_epoch();
        next.hops_v4 = routes.hops_v4.into_boxed_slice();
        next.hops_v6 = routes.hops_v6.into_boxed_slice();
        next.neighbors_v4 = FlatMap::new(routes.neighbors_v4);
        next.neighbors_v6 = FlatMap::new(routes.neighbors_v6);
        next.default_v4 = routes.default_v4;
        next.default_v6 = routes.default_v6;
        Ok(next)
    }
}
