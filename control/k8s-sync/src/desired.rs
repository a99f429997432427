//! What lbd should hold for the cluster: the Services and EndpointSlices
//! the watches see, mapped to lbd's services, frontends and backends (the
//! objects of one `Resync` of source `k8s`). Pure: no I/O, deterministic
//! (sorted), so the same cluster state always gives the same request and
//! an unchanged cluster is not pushed again.
//!
//! The mapping, per Kubernetes Service port (lbd's backends have one port,
//! so a Service with several ports is several lbd services):
//!
//! - **name**: `namespace/name` for a Service with one port,
//!   `namespace/name-PORTNAME` for each port of one with several
//!   (Kubernetes requires their ports to be named);
//! - **frontends**: the port on each address of the enabled types
//!   ([`Options::types`]): `status.loadBalancer.ingress[].ip` of a
//!   `LoadBalancer` Service of this sidecar's class, `spec.externalIPs`,
//!   `spec.clusterIPs`; and the port's `nodePort` (a `NodePort` or
//!   `LoadBalancer` Service's) on each of [`Options::node_addresses`] of
//!   the Service's families (`spec.ipFamilies`, else its cluster IPs',
//!   else both);
//! - **forwarding mode**: the annotation [`MODE_ANNOTATION`] (`dnat` or
//!   `fullnat`), else [`Options::mode`];
//! - **traffic policy**: `spec.externalTrafficPolicy: Local` → local when
//!   [`Options::node_local`], else cluster, for the load-balancer, external
//!   and node-port frontends; `spec.internalTrafficPolicy` likewise for the
//!   cluster IPs;
//! - **affinity**: `spec.sessionAffinity: ClientIP` with
//!   `sessionAffinityConfig.clientIP.timeoutSeconds` (default 10800 s);
//! - **source ranges**: `spec.loadBalancerSourceRanges`, on the
//!   load-balancer frontends only, as kube-proxy;
//! - **backends**: the first address of each endpoint of the Service's
//!   EndpointSlices (label `kubernetes.io/service-name`), on the slice port
//!   with the Service port's name and protocol; ready → `active`,
//!   terminating → `terminating` (established connections only), neither →
//!   `quarantined`; `nodeName` and `zone` kept. When none is ready, those
//!   terminating that still serve are `active` (kube-proxy's fallback).
//!
//! An lbd service has one traffic policy and one list of source ranges
//! for all its frontends. Where a Service port's frontends need different
//! ones, the port is several lbd services with the same backends
//! (`Group`): the frontends that take the Service's source ranges (the
//! load-balancer ones), and with them every other frontend that needs
//! the same, under the name above; external IPs and node ports, when
//! there are source ranges, under that name and `-external`; cluster IPs,
//! when their policy or the source ranges set them apart, under that name
//! and `-internal`. Which group a frontend is in depends on the Service's
//! spec only, not on which addresses it has at the moment, so a
//! load-balancer IP being assigned renames nothing.
//!
//! What cannot be mapped is skipped and said why ([`Skip`]): an
//! `ExternalName` Service, SCTP, an address that is not an IP, a name
//! too long for lbd, a frontend two Services claim, a bad annotation, and
//! each object lbd's own validation refuses.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use lb_control::convert;
use lb_proto::v1 as pb;

/// The annotation that picks a Service's forwarding mode: `dnat` or
/// `fullnat` (`full-nat` too).
pub const MODE_ANNOTATION: &str = "lbd.io/forwarding-mode";

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Kubernetes' default client-IP affinity timeout (3 hours).
pub const DEFAULT_AFFINITY_SECONDS: u32 = 10_800;

/// Which addresses of a Service become lbd frontends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FrontendKind {
    /// `status.loadBalancer.ingress[].ip` of a `LoadBalancer` Service.
    LoadBalancer,
    /// `spec.externalIPs`.
    ExternalIp,
    /// `spec.clusterIPs` (not `None`).
    ClusterIp,
    /// `spec.ports[].nodePort` on lbd's own addresses of the Service's
    /// families ([`Options::node_addresses`]).
    NodePort,
}

impl FrontendKind {
    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            FrontendKind::LoadBalancer => "load-balancer",
            FrontendKind::ExternalIp => "external-ip",
            FrontendKind::ClusterIp => "cluster-ip",
            FrontendKind::NodePort => "node-port",
        }
    }

    fn to_proto(self) -> pb::FrontendType {
        match self {
            FrontendKind::LoadBalancer => pb::FrontendType::LoadBalancer,
            FrontendKind::ExternalIp => pb::FrontendType::ExternalIp,
            FrontendKind::ClusterIp => pb::FrontendType::ClusterIp,
            FrontendKind::NodePort => pb::FrontendType::NodePort,
        }
    }
}

impl std::str::FromStr for FrontendKind {
    type Err = String;

    fn from_str(s: &str) -> Result<FrontendKind, String> {
        match s {
            "load-balancer" => Ok(FrontendKind::LoadBalancer),
            "external-ip" => Ok(FrontendKind::ExternalIp),
            "cluster-ip" => Ok(FrontendKind::ClusterIp),
            "node-port" => Ok(FrontendKind::NodePort),
            _ => Err(format!(
                "{s:?} is not a frontend type (load-balancer, external-ip, cluster-ip or node-port)"
            )),
        }
    }
}

/// How Services are mapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The addresses that become frontends.
    pub types: BTreeSet<FrontendKind>,
    /// The forwarding mode of a Service without [`MODE_ANNOTATION`].
    pub mode: pb::ForwardingMode,
    /// The `spec.loadBalancerClass` whose `LoadBalancer` Services are this
    /// balancer's; `None`: those without a class (the cluster's default
    /// load balancer). A `LoadBalancer` Service of another class gives no
    /// load-balancer frontends (its external and cluster IPs still count).
    pub load_balancer_class: Option<String>,
    /// Whether `externalTrafficPolicy: Local` makes lbd's `local` policy
    /// (only backends on lbd's own node, `--node-name`): for lbd on a
    /// cluster node, as kube-proxy. Off, such a Service is balanced over
    /// all its endpoints, as a gateway that runs no pods must (its `local`
    /// services would have no backend). `internalTrafficPolicy: Local`
    /// likewise for the cluster IPs.
    pub node_local: bool,
    /// Where [`FrontendKind::NodePort`] frontends are made: lbd's own
    /// interface addresses but its SNAT addresses (the sync loop asks lbd
    /// for them), in order and without repeats; each Service takes those
    /// of its families. Empty: none.
    pub node_addresses: Vec<IpAddr>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            types: [FrontendKind::LoadBalancer, FrontendKind::ExternalIp].into(),
            mode: pb::ForwardingMode::Fullnat,
            load_balancer_class: None,
            node_local: false,
            node_addresses: Vec::new(),
        }
    }
}

/// Something of the cluster that is not in lbd, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Skip {
    /// What: `Service default/web`, `Service default/web port "dns"`,
    /// `EndpointSlice default/web-abc12 endpoint 10.0.0.7`.
    pub object: String,
    /// Why, on one line.
    pub reason: String,
    /// The Kubernetes object it is about (its Event's), if one.
    pub regarding: Option<Regarding>,
}

/// A Kubernetes object a [`Skip`] is about: what an Event names as the
/// object it regards (`kubectl describe` shows it there).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Regarding {
    /// `v1` or `discovery.k8s.io/v1`.
    pub api_version: &'static str,
    /// `Service` or `EndpointSlice`.
    pub kind: &'static str,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid, which `kubectl describe` matches events by.
    pub uid: Option<String>,
}

impl Regarding {
    /// The Service `s`.
    pub fn service(s: &Service) -> Option<Regarding> {
        Regarding::of(&s.metadata, "v1", "Service")
    }

    /// The EndpointSlice `s`.
    pub fn slice(s: &EndpointSlice) -> Option<Regarding> {
        Regarding::of(&s.metadata, "discovery.k8s.io/v1", "EndpointSlice")
    }

    /// The object with metadata `m`, of `kind` in `api_version`.
    fn of(m: &ObjectMeta, api_version: &'static str, kind: &'static str) -> Option<Regarding> {
        Some(Regarding {
            api_version,
            kind,
            namespace: m.namespace.clone()?,
            name: m.name.clone()?,
            uid: m.uid.clone(),
        })
    }
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.object, self.reason)
    }
}

/// The objects of one `Resync`, sorted by identity, and what was skipped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Desired {
    /// lbd services, by name.
    pub services: Vec<pb::Service>,
    /// Frontends, by (address, port, protocol).
    pub frontends: Vec<pb::Frontend>,
    /// Backends, by (service, address, port).
    pub backends: Vec<pb::Backend>,
    /// What could not be mapped.
    pub skipped: Vec<Skip>,
    /// Which Service port each lbd service is (`ns/name port http`, or
    /// `ns/name` for an unnamed port), and which of its groups
    /// (`ns/name port http (external)`), so that the next mapping knows who
    /// had a name and a frontend.
    pub origins: BTreeMap<String, String>,
    /// The Service of each lbd service, for the Events of what a push
    /// leaves out.
    pub regarding: BTreeMap<String, Regarding>,
}

impl Desired {
    /// The request that makes lbd's `k8s` objects these.
    pub fn request(&self) -> pb::ResyncRequest {
        pb::ResyncRequest {
            source: pb::Source::K8s as i32,
            services: self.services.clone(),
            frontends: self.frontends.clone(),
            backends: self.backends.clone(),
        }
    }
}

/// One lbd service being built, with its objects.
struct Built {
    service: pb::Service,
    frontends: Vec<pb::Frontend>,
    backends: BTreeMap<(IpAddr, u16), pb::Backend>,
    /// The backends that are terminating but still serving (their
    /// readiness probe passes).
    serving: BTreeSet<(IpAddr, u16)>,
}

/// One Service port that maps to an lbd service, before the claims on
/// names and frontends are settled.
struct Candidate<'a> {
    /// `Service ns/name port "http"`.
    what: String,
    /// Which Service port it is, for [`Desired::origins`]: `ns/name`, and
    /// the port's name if it has one (not its number, which an edit may
    /// change), and ` (external)` or ` (internal)` for those groups (a
    /// space and parentheses, which no Kubernetes name has).
    origin: String,
    /// (namespace, Service name), for its slices.
    ns_name: (String, String),
    /// The Service, for Events.
    regarding: Option<Regarding>,
    port: &'a ServicePort,
    service: pb::Service,
    frontends: Vec<pb::Frontend>,
}

/// Which of a Service port's lbd services a frontend is in (see the
/// module doc): they differ in traffic policy or source ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Group {
    /// The Service port's own name: the load-balancer frontends, with the
    /// Service's source ranges, and every other that needs the same.
    Base,
    /// `-external`: external IPs and node ports, without the source
    /// ranges the load-balancer frontends have.
    External,
    /// `-internal`: cluster IPs, with the internal traffic policy and no
    /// source ranges, where that differs from the base's.
    Internal,
}

impl Group {
    const ALL: [Group; 3] = [Group::Base, Group::External, Group::Internal];

    /// What its lbd service's name adds to the Service port's.
    fn suffix(self) -> &'static str {
        match self {
            Group::Base => "",
            Group::External => "-external",
            Group::Internal => "-internal",
        }
    }

    /// What [`Candidate::origin`] adds to the Service port's.
    fn origin(self) -> &'static str {
        match self {
            Group::Base => "",
            Group::External => " (external)",
            Group::Internal => " (internal)",
        }
    }

    /// What a skip adds to the Service port's description.
    fn what(self) -> &'static str {
        match self {
            Group::Base => "",
            Group::External => " (external IPs and node ports)",
            Group::Internal => " (cluster IPs)",
        }
    }
}

/// The attributes of a Service's frontends, and which group each kind is
/// in.
struct Groups<'a> {
    external_policy: pb::TrafficPolicy,
    internal_policy: pb::TrafficPolicy,
    source_ranges: &'a [String],
}

impl<'a> Groups<'a> {
    fn new(
        external_policy: pb::TrafficPolicy,
        internal_policy: pb::TrafficPolicy,
        source_ranges: &'a [String],
    ) -> Self {
        Groups {
            external_policy,
            internal_policy,
            source_ranges,
        }
    }

    /// The group of a frontend of `kind`: by what it needs, compared with
    /// what the base has (the load-balancer frontends' policy and ranges).
    fn of(&self, kind: FrontendKind) -> Group {
        match kind {
            FrontendKind::LoadBalancer => Group::Base,
            FrontendKind::ExternalIp | FrontendKind::NodePort if self.source_ranges.is_empty() => Group::Base,
            FrontendKind::ExternalIp | FrontendKind::NodePort => Group::External,
            FrontendKind::ClusterIp
                if self.source_ranges.is_empty() && self.internal_policy == self.external_policy =>
            {
                Group::Base
            }
            FrontendKind::ClusterIp => Group::Internal,
        }
    }

    /// The traffic policy and source ranges of `group`'s lbd service.
    fn attributes(&self, group: Group) -> (pb::TrafficPolicy, &'a [String]) {
        match group {
            Group::Base => (self.external_policy, self.source_ranges),
            Group::External => (self.external_policy, &[]),
            Group::Internal => (self.internal_policy, &[]),
        }
    }
}

/// `1.2.3.4:80`, `[fd00::1]:80`.
fn endpoint_text(addr: IpAddr, port: u32) -> String {
    match addr {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

/// A frontend's identity.
type FrontendKey = (IpAddr, u32, i32);

fn frontend_key(f: &pb::Frontend) -> Option<FrontendKey> {
    Some((f.address.parse().ok()?, f.port, f.protocol))
}

/// Maps `services` and `slices` to lbd's objects. Where two Service ports
/// claim one lbd name, or two lbd services one frontend, the one that had
/// it in `previous` (the last state pushed) keeps it, else the first by
/// namespace and name: a Service created later does not take a VIP or a
/// name over from one in use.
pub fn desired<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    opts: &Options,
    previous: Option<&Desired>,
) -> Desired {
    let mut skipped = Vec::new();
    // Slices by (namespace, service name).
    let mut slices_of: BTreeMap<(String, String), Vec<&EndpointSlice>> = BTreeMap::new();
    for s in slices {
        let ns = s.metadata.namespace.clone().unwrap_or_default();
        if let Some(svc) = s.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)) {
            slices_of.entry((ns, svc.clone())).or_default().push(s);
        }
    }
    // Services in name order, so which of two claims wins is stable.
    let mut services: Vec<&Service> = services.into_iter().collect();
    services.sort_by_key(|s| key_of(s));
    let mut candidates: Vec<Candidate<'_>> = Vec::new();
    for svc in services {
        let (ns, name) = key_of(svc);
        let what = format!("Service {ns}/{name}");
        let regarding = Regarding::service(svc);
        let Some(spec) = &svc.spec else { continue };
        if spec.type_.as_deref() == Some("ExternalName") {
            continue;
        }
        let mode = match svc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MODE_ANNOTATION))
            .map(|v| v.trim().to_ascii_lowercase())
        {
            None => opts.mode,
            Some(v) if v == "dnat" => pb::ForwardingMode::Dnat,
            Some(v) if v == "fullnat" || v == "full-nat" => pb::ForwardingMode::Fullnat,
            Some(v) => {
                skipped.push(Skip {
                    object: what,
                    reason: format!("annotation {MODE_ANNOTATION}: {v:?} is not dnat or fullnat"),
                    regarding,
                });
                continue;
            }
        };
        let addrs = frontend_addresses(svc, opts, &what, &mut skipped);
        // Node ports: a `NodePort` or `LoadBalancer` Service's, on lbd's
        // addresses of the Service's families (lbd never translates
        // between families: the other's would have no backend).
        let node_addresses: Vec<IpAddr> = if opts.types.contains(&FrontendKind::NodePort)
            && matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer"))
        {
            let families = families_of(svc);
            let of_families: Vec<IpAddr> = opts
                .node_addresses
                .iter()
                .copied()
                .filter(|a| families.contains(&a.is_ipv6()))
                .collect();
            let has_node_ports = spec
                .ports
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|p| p.node_port.is_some_and(|n| n != 0));
            if of_families.is_empty() && !opts.node_addresses.is_empty() && has_node_ports {
                let names: Vec<&str> = families
                    .iter()
                    .map(|&v6| if v6 { "IPv6" } else { "IPv4" })
                    .collect();
                skipped.push(Skip {
                    object: format!("{what} node ports"),
                    reason: format!(
                        "lbd has no address of the Service's family ({})",
                        names.join(", ")
                    ),
                    regarding: regarding.clone(),
                });
            }
            of_families
        } else {
            Vec::new()
        };
        if addrs.is_empty() && node_addresses.is_empty() {
            continue;
        }
        let ports = spec.ports.as_deref().unwrap_or_default();
        let policy_of = |p: Option<&str>| match p {
            Some("Local") if opts.node_local => pb::TrafficPolicy::Local,
            _ => pb::TrafficPolicy::Cluster,
        };
        let external_policy = policy_of(spec.external_traffic_policy.as_deref());
        let internal_policy = policy_of(spec.internal_traffic_policy.as_deref());
        let affinity = match spec.session_affinity.as_deref() {
            Some("ClientIP") => spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds)
                .map_or(DEFAULT_AFFINITY_SECONDS, |t| u32::try_from(t).unwrap_or(0)),
            _ => 0,
        };
        let source_ranges = spec.load_balancer_source_ranges.clone().unwrap_or_default();
        let groups = Groups::new(external_policy, internal_policy, &source_ranges);
        for port in ports {
            let what = match &port.name {
                Some(p) if !p.is_empty() => format!("{what} port {p:?}"),
                _ => format!("{what} port {}", port.port),
            };
            let protocol = match port.protocol.as_deref().unwrap_or("TCP") {
                "TCP" => pb::Protocol::Tcp,
                "UDP" => pb::Protocol::Udp,
                other => {
                    skipped.push(Skip {
                        object: what,
                        reason: format!("protocol {other} (lbd balances TCP and UDP)"),
                        regarding: regarding.clone(),
                    });
                    continue;
                }
            };
            let base_name = match lbd_name(&ns, &name, port, ports.len()) {
                Ok(n) => n,
                Err(reason) => {
                    skipped.push(Skip {
                        object: what,
                        reason,
                        regarding: regarding.clone(),
                    });
                    continue;
                }
            };
            // The port's frontends, (address, port) without repeats, each
            // with its kind.
            let mut endpoints: Vec<(IpAddr, u32, FrontendKind)> = Vec::new();
            let service_port = u32::try_from(port.port).unwrap_or(0);
            for &(addr, kind) in &addrs {
                endpoints.push((addr, service_port, kind));
            }
            if let Some(np) = port.node_port.and_then(|p| u32::try_from(p).ok()) {
                for &addr in &node_addresses {
                    if !endpoints.iter().any(|&(a, p, _)| (a, p) == (addr, np)) {
                        endpoints.push((addr, np, FrontendKind::NodePort));
                    }
                }
            }
            let origin = match port.name.as_deref() {
                Some(p) if !p.is_empty() => format!("{ns}/{name} port {p}"),
                _ => format!("{ns}/{name}"),
            };
            for group in Group::ALL {
                let mine: Vec<(IpAddr, u32, FrontendKind)> = endpoints
                    .iter()
                    .copied()
                    .filter(|&(_, _, kind)| groups.of(kind) == group)
                    .collect();
                if mine.is_empty() {
                    continue;
                }
                let lbd_name = format!("{base_name}{}", group.suffix());
                if let Err(e) = lb_control::model::check_service_name(&lbd_name) {
                    skipped.push(Skip {
                        object: format!("{what}{}", group.what()),
                        reason: format!("lbd service name: {e}"),
                        regarding: regarding.clone(),
                    });
                    continue;
                }
                let (traffic_policy, ranges) = groups.attributes(group);
                let service = pb::Service {
                    name: lbd_name.clone(),
                    mode: mode as i32,
                    traffic_policy: traffic_policy as i32,
                    session_affinity_timeout_seconds: affinity,
                    source_ranges: ranges.to_vec(),
                    source: pb::Source::K8s as i32,
                };
                if let Err(e) = convert::service_from_proto(&service) {
                    skipped.push(Skip {
                        object: format!("{what}{}", group.what()),
                        reason: e.to_string(),
                        regarding: regarding.clone(),
                    });
                    continue;
                }
                let mut frontends = Vec::new();
                for (addr, fe_port, kind) in mine {
                    let fe = pb::Frontend {
                        service: lbd_name.clone(),
                        address: addr.to_string(),
                        port: fe_port,
                        protocol: protocol as i32,
                        r#type: kind.to_proto() as i32,
                        source: pb::Source::K8s as i32,
                    };
                    if let Err(e) = convert::frontend_from_proto(&fe) {
                        skipped.push(Skip {
                            object: format!("{what} frontend {}", endpoint_text(addr, fe_port)),
                            reason: e.to_string(),
                            regarding: regarding.clone(),
                        });
                        continue;
                    }
                    frontends.push(fe);
                }
                if frontends.is_empty() {
                    continue;
                }
                candidates.push(Candidate {
                    what: format!("{what}{}", group.what()),
                    origin: format!("{origin}{}", group.origin()),
                    ns_name: (ns.clone(), name.clone()),
                    regarding: regarding.clone(),
                    port,
                    service,
                    frontends,
                });
            }
        }
    }
    let candidates = settle_claims(candidates, previous, &mut skipped);
    let mut built: BTreeMap<String, Built> = BTreeMap::new();
    let mut origins = BTreeMap::new();
    let mut regarding = BTreeMap::new();
    for c in candidates {
        let name = c.service.name.clone();
        origins.insert(name.clone(), c.origin);
        if let Some(r) = c.regarding {
            regarding.insert(name.clone(), r);
        }
        let mut b = Built {
            service: c.service,
            frontends: c.frontends,
            backends: BTreeMap::new(),
            serving: BTreeSet::new(),
        };
        for slice in slices_of.get(&c.ns_name).map(Vec::as_slice).unwrap_or_default() {
            add_backends(&mut b, slice, c.port, &mut skipped);
        }
        // As kube-proxy: with no ready endpoint, new connections go to
        // those terminating that still serve rather than nowhere (a
        // rollout of one replica, a drain of every pod).
        let active = pb::BackendState::Active as i32;
        if !b.backends.values().any(|be| be.state == active) {
            for k in &b.serving {
                if let Some(be) = b.backends.get_mut(k) {
                    be.state = active;
                }
            }
        }
        built.insert(name, b);
    }
    let mut out = Desired {
        skipped,
        origins,
        regarding,
        ..Desired::default()
    };
    for (_, b) in built {
        out.services.push(b.service);
        out.frontends.extend(b.frontends);
        out.backends.extend(b.backends.into_values());
    }
    out.frontends.sort_by_key(frontend_key);
    out.skipped.sort();
    out.skipped.dedup();
    out
}

/// Settles who has each lbd name and each frontend that several
/// candidates claim (see [`desired`]), dropping the losers' claims with a
/// skip each, and the candidates left without a frontend, whose names and
/// frontends the others may then have (so again, until nothing changes).
/// In order.
fn settle_claims<'a>(
    candidates: Vec<Candidate<'a>>,
    previous: Option<&Desired>,
    skipped: &mut Vec<Skip>,
) -> Vec<Candidate<'a>> {
    let held_names: BTreeMap<&str, &str> = previous
        .map(|p| {
            p.services
                .iter()
                .filter_map(|s| Some((s.name.as_str(), p.origins.get(&s.name)?.as_str())))
                .collect()
        })
        .unwrap_or_default();
    // By the Service port that had it, whichever of its groups: a
    // frontend that moves between them (source ranges added) keeps its
    // hold.
    let held_frontends: BTreeMap<FrontendKey, &str> = previous
        .map(|p| {
            p.frontends
                .iter()
                .filter_map(|f| Some((frontend_key(f)?, port_of(p.origins.get(&f.service)?))))
                .collect()
        })
        .unwrap_or_default();
    let n = candidates.len();
    let mut alive = vec![true; n];
    loop {
        // Names: the previous holder if it still claims it, else the first.
        let mut name_holder: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, c) in candidates.iter().enumerate().filter(|&(i, _)| alive[i]) {
            let held = held_names.get(c.service.name.as_str()) == Some(&c.origin.as_str());
            if held || !name_holder.contains_key(c.service.name.as_str()) {
                name_holder.insert(&c.service.name, i);
            }
        }
        let named = |i: usize| name_holder.get(candidates[i].service.name.as_str()) == Some(&i);
        // Frontends, among the named: likewise.
        let mut fe_holder: BTreeMap<FrontendKey, usize> = BTreeMap::new();
        for (i, c) in candidates
            .iter()
            .enumerate()
            .filter(|&(i, _)| alive[i] && named(i))
        {
            for key in c.frontends.iter().filter_map(frontend_key) {
                let held = held_frontends.get(&key) == Some(&port_of(&c.origin));
                if held || !fe_holder.contains_key(&key) {
                    fe_holder.insert(key, i);
                }
            }
        }
        let keeps = |i: usize, f: &pb::Frontend| {
            frontend_key(f)
                .and_then(|k| fe_holder.get(&k))
                .is_none_or(|&h| h == i)
        };
        // A named candidate that keeps no frontend is out, and its claims
        // with it.
        let mut changed = false;
        for i in 0..n {
            if alive[i] && named(i) && !candidates[i].frontends.iter().any(|f| keeps(i, f)) {
                alive[i] = false;
                changed = true;
            }
        }
        if changed {
            continue;
        }
        let mut out = Vec::new();
        let fe_name = |i: usize| candidates[i].service.name.clone();
        let fe_holder: BTreeMap<FrontendKey, String> =
            fe_holder.iter().map(|(k, &i)| (*k, fe_name(i))).collect();
        let named: Vec<bool> = (0..n).map(|i| alive[i] && named(i)).collect();
        for (i, mut c) in candidates.into_iter().enumerate() {
            if alive[i] && !named[i] {
                skipped.push(Skip {
                    reason: format!(
                        "its lbd service name {:?} is another Service port's",
                        c.service.name
                    ),
                    object: c.what,
                    regarding: c.regarding,
                });
                continue;
            }
            // Out of the running or named: its frontends held by others.
            c.frontends
                .retain(|f| match frontend_key(f).and_then(|k| fe_holder.get(&k)) {
                    Some(h) if *h != f.service || !named[i] => {
                        skipped.push(Skip {
                            object: format!("{} frontend {}", c.what, frontend_text(f)),
                            reason: format!("lbd service {h:?} has it already"),
                            regarding: c.regarding.clone(),
                        });
                        false
                    }
                    _ => true,
                });
            if named[i] {
                out.push(c);
            }
        }
        return out;
    }
}

/// The Service port of an origin ([`Candidate::origin`]), without its
/// group.
fn port_of(origin: &str) -> &str {
    origin.split_once(" (").map_or(origin, |(port, _)| port)
}

/// `1.2.3.4:80` of a frontend (its address as sent if not an IP).
fn frontend_text(f: &pb::Frontend) -> String {
    match f.address.parse::<IpAddr>() {
        Ok(a) => endpoint_text(a, f.port),
        Err(_) => format!("{}:{}", f.address, f.port),
    }
}

/// The address families of `svc`, as `is_ipv6` values: `spec.ipFamilies`,
/// else those of its cluster IPs, else both (nothing says).
fn families_of(svc: &Service) -> Vec<bool> {
    let Some(spec) = &svc.spec else {
        return vec![false, true];
    };
    let mut out: Vec<bool> = spec
        .ip_families
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter_map(|f| match f.as_str() {
            "IPv4" => Some(false),
            "IPv6" => Some(true),
            _ => None,
        })
        .collect();
    if out.is_empty() {
        let ips = spec.cluster_ips.as_deref().unwrap_or_default();
        out = ips
            .iter()
            .chain(spec.cluster_ip.as_ref())
            .filter_map(|ip| ip.parse::<IpAddr>().ok())
            .map(|a| a.is_ipv6())
            .collect();
    }
    if out.is_empty() {
        out = vec![false, true];
    }
    out
}

/// (namespace, name).
fn key_of(s: &Service) -> (String, String) {
    (
        s.metadata.namespace.clone().unwrap_or_default(),
        s.metadata.name.clone().unwrap_or_default(),
    )
}

/// The lbd service name of `port`, one of `count` ports of `ns/name`.
fn lbd_name(ns: &str, name: &str, port: &ServicePort, count: usize) -> Result<String, String> {
    let n = if count == 1 {
        format!("{ns}/{name}")
    } else {
        match port.name.as_deref() {
            Some(p) if !p.is_empty() => format!("{ns}/{name}-{p}"),
            _ => return Err("a port of a Service with several ports has no name".into()),
        }
    };
    lb_control::model::check_service_name(&n).map_err(|e| format!("lbd service name: {e}"))?;
    Ok(n)
}

/// The addresses of `svc` that become frontends, with their kinds, in
/// order and without repeats.
fn frontend_addresses(
    svc: &Service,
    opts: &Options,
    what: &str,
    skipped: &mut Vec<Skip>,
) -> Vec<(IpAddr, FrontendKind)> {
    let Some(spec) = &svc.spec else {
        return Vec::new();
    };
    let mut out: Vec<(IpAddr, FrontendKind)> = Vec::new();
    let mut add = |text: &str, kind: FrontendKind, out: &mut Vec<(IpAddr, FrontendKind)>| match text
        .parse::<IpAddr>()
    {
        Ok(a) => {
            if !out.iter().any(|&(b, _)| b == a) {
                out.push((a, kind));
            }
        }
        Err(_) => skipped.push(Skip {
            object: format!("{what} {} {text:?}", kind.name()),
            reason: "not an IP address".into(),
            regarding: Regarding::service(svc),
        }),
    };
    if opts.types.contains(&FrontendKind::LoadBalancer)
        && spec.type_.as_deref() == Some("LoadBalancer")
        && spec.load_balancer_class == opts.load_balancer_class
    {
        let ingress = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_deref())
            .unwrap_or_default();
        for i in ingress {
            if let Some(ip) = &i.ip {
                add(ip, FrontendKind::LoadBalancer, &mut out);
            }
        }
    }
    if opts.types.contains(&FrontendKind::ExternalIp) {
        for ip in spec.external_ips.as_deref().unwrap_or_default() {
            add(ip, FrontendKind::ExternalIp, &mut out);
        }
    }
    if opts.types.contains(&FrontendKind::ClusterIp) {
        let ips = match (&spec.cluster_ips, &spec.cluster_ip) {
            (Some(v), _) if !v.is_empty() => v.clone(),
            (_, Some(one)) => vec![one.clone()],
            _ => Vec::new(),
        };
        for ip in ips.iter().filter(|ip| ip.as_str() != "None" && !ip.is_empty()) {
            add(ip, FrontendKind::ClusterIp, &mut out);
        }
    }
    out
}

/// Endpoint conditions as an lbd state: ready → active, terminating →
/// terminating, neither → quarantined (not ready: its readiness probe
/// fails or it has not passed yet).
fn state_of(c: Option<&k8s_openapi::api::discovery::v1::EndpointConditions>) -> pb::BackendState {
    // Unset `ready` means ready (the API's documented default), unset
    // `terminating` not terminating.
    let ready = c.and_then(|c| c.ready).unwrap_or(true);
    let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
    if terminating {
        pb::BackendState::Terminating
    } else if ready {
        pb::BackendState::Active
    } else {
        pb::BackendState::Quarantined
    }
}

/// How much a state is worth when one address:port is in two slices
/// (while the endpoint controller moves it): the most useful wins.
fn rank(s: i32) -> u8 {
    match pb::BackendState::try_from(s) {
        Ok(pb::BackendState::Active) => 3,
        Ok(pb::BackendState::Terminating) => 2,
        _ => 1,
    }
}

/// Adds the endpoints of `slice` on the slice port that serves `port`.
fn add_backends(b: &mut Built, slice: &EndpointSlice, port: &ServicePort, skipped: &mut Vec<Skip>) {
    if slice.address_type != "IPv4" && slice.address_type != "IPv6" {
        return;
    }
    let want_name = port.name.as_deref().unwrap_or("");
    let want_proto = port.protocol.as_deref().unwrap_or("TCP");
    let Some(target) = slice.ports.as_deref().unwrap_or_default().iter().find(|p| {
        p.name.as_deref().unwrap_or("") == want_name && p.protocol.as_deref().unwrap_or("TCP") == want_proto
    }) else {
        return;
    };
    let Some(target_port) = target
        .port
        .and_then(|p| u16::try_from(p).ok())
        .filter(|&p| p != 0)
    else {
        return;
    };
    let slice_name = format!(
        "EndpointSlice {}/{}",
        slice.metadata.namespace.as_deref().unwrap_or_default(),
        slice.metadata.name.as_deref().unwrap_or_default()
    );
    for ep in &slice.endpoints {
        // The addresses of one endpoint are one pod's and fungible: the
        // first is the one consumers use.
        let Some(text) = ep.addresses.first() else {
            continue;
        };
        let Ok(addr) = text.parse::<IpAddr>() else {
            skipped.push(Skip {
                object: format!("{slice_name} endpoint {text:?}"),
                reason: "not an IP address".into(),
                regarding: Regarding::slice(slice),
            });
            continue;
        };
        let backend = pb::Backend {
            service: b.service.name.clone(),
            address: addr.to_string(),
            port: u32::from(target_port),
            weight: None,
            state: state_of(ep.conditions.as_ref()) as i32,
            node: ep.node_name.clone().unwrap_or_default(),
            zone: ep.zone.clone().unwrap_or_default(),
            source: pb::Source::K8s as i32,
            operator_state: 0,
        };
        if let Err(e) = convert::backend_from_proto(&backend) {
            skipped.push(Skip {
                object: format!("{slice_name} endpoint {addr}"),
                reason: e.to_string(),
                regarding: Regarding::slice(slice),
            });
            continue;
        }
        let serving = backend.state == pb::BackendState::Terminating as i32
            && ep.conditions.as_ref().and_then(|c| c.serving).unwrap_or(false);
        match b.backends.get(&(addr, target_port)) {
            Some(old) if rank(old.state) >= rank(backend.state) => {}
            _ => {
                b.backends.insert((addr, target_port), backend);
            }
        }
        if serving {
            b.serving.insert((addr, target_port));
        }
    }
}

#[cfg(test)]
#[path = "desired_tests.rs"]
mod tests;
