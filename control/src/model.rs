//! The desired state: services, frontends and backends, and the rules they
//! must satisfy.
//!
//! Identities: a [`Service`] by its name (`namespace/name`), a [`Frontend`]
//! by [`FrontendKey`] (address, port, protocol), a [`Backend`] by
//! [`BackendKey`] (service, address, port). Every object records its
//! [`Source`], so that a resync of one source leaves the others alone.
//!
//! [`ValidationError`] names the object and the field and carries the gRPC
//! code it maps to; every check that does not need the rest of the state
//! lives here (`Service::validate` and friends), the cross-object checks
//! (references, ownership of a frontend) in the store.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// The largest backend weight (as the dataplane's `MAX_WEIGHT`).
pub const MAX_WEIGHT: u32 = 65_535;
/// Source ranges per service.
pub const MAX_SOURCE_RANGES: usize = 256;
/// Backends per service (the Maglev ring holds at most 65,535).
pub const MAX_BACKENDS_PER_SERVICE: usize = 65_535;
/// Changes in one Apply: the gRPC codec's bound, checked again here for
/// callers that do not come through it (the CLI's file, tests).
pub use lb_proto::bounded::MAX_CHANGES;
/// The longest client-IP affinity timeout, as Kubernetes allows (1 day).
pub const MAX_AFFINITY_SECONDS: u32 = 86_400;
/// Longest node or zone name.
pub const MAX_LABEL_LEN: usize = 253;
/// The field [`Service::validate`] names for a bad affinity timeout: the
/// proto's (Apply, Resync); the services file names its own key
/// (`session_affinity_timeout`) instead.
pub const AFFINITY_FIELD: &str = "session_affinity_timeout_seconds";

/// The most bytes of a request's text that an error quotes whole: more
/// than any valid name or label (a service name is at most 127 bytes, a
/// label [`MAX_LABEL_LEN`]).
pub const MAX_QUOTED: usize = 256;

/// Text from a request as an error quotes it: `{:?}` (quoted, escaped:
/// one line whatever it holds), and past [`MAX_QUOTED`] bytes its start
/// only, with its length: `"default/aaaa"... (60008 bytes)`. A name of
/// 60 kB quoted whole, twice, made a message no gRPC client reads.
#[derive(Debug, Clone, Copy)]
pub struct Quoted<'a>(pub &'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        if s.len() <= MAX_QUOTED {
            return write!(f, "{s:?}");
        }
        let mut head = MAX_QUOTED * 3 / 4;
        while !s.is_char_boundary(head) {
            head -= 1;
        }
        write!(f, "{:?}... ({} bytes)", &s[..head], s.len())
    }
}

/// Text from a request as an error names an object by it: as given when
/// it is printable ASCII without spaces (every valid name and address, and
/// most typos) of at most [`MAX_QUOTED`] bytes, [`Quoted`] otherwise, so
/// that the message stays one line, and short, whatever the client sent.
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a>(pub &'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        if !s.is_empty() && s.len() <= MAX_QUOTED && s.bytes().all(|b| b.is_ascii_graphic()) {
            f.write_str(s)
        } else {
            Quoted(s).fmt(f)
        }
    }
}

/// Who wrote an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// The Kubernetes sync sidecar.
    K8s,
    /// An operator or controller over the API (`lbctl`).
    #[default]
    Api,
    /// lbd's `--config` services file.
    Config,
}

impl Source {
    /// The name used in files, tables and messages.
    pub fn name(self) -> &'static str {
        match self {
            Source::K8s => "k8s",
            Source::Api => "api",
            Source::Config => "config",
        }
    }
}

/// How a service's traffic is translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Destination NAT only: backends see the client and route replies via lbd.
    Dnat,
    /// Destination and source NAT: backends see an SNAT address.
    #[default]
    #[serde(rename = "fullnat")]
    FullNat,
}

/// Which backends a service uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum TrafficPolicy {
    /// Every active backend.
    #[default]
    Cluster,
    /// Only backends on this node.
    Local,
}

/// L4 protocol of a frontend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl Protocol {
    /// `tcp` or `udp`.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// Where a frontend address comes from (Kubernetes service types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum FrontendType {
    /// A cluster IP.
    ClusterIp,
    /// A node port on a node address.
    NodePort,
    /// A load-balancer ingress address.
    #[default]
    LoadBalancer,
    /// An external IP.
    ExternalIp,
}

/// Lifecycle state of a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BackendState {
    /// Takes new connections.
    #[default]
    Active,
    /// Draining: keeps established connections, gets no new ones.
    Terminating,
    /// Failed health checks: no new connections.
    Quarantined,
    /// Taken out by an operator: no new connections.
    Maintenance,
}

impl BackendState {
    /// The name used in files, tables and messages.
    pub fn name(self) -> &'static str {
        match self {
            BackendState::Active => "active",
            BackendState::Terminating => "terminating",
            BackendState::Quarantined => "quarantined",
            BackendState::Maintenance => "maintenance",
        }
    }
}

/// An IP prefix such as `10.0.0.0/8`: the dataplane's
/// [`Cidr`](lb_dataplane::snapshot::Cidr), parsed with the prefix
/// required and kept as its text in JSON. Host bits are cleared at parse
/// (`10.0.0.1/8` is `10.0.0.0/8`, as Kubernetes' `ParseCIDR` reads it), so
/// one range spelled two ways is one value, not a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Cidr(pub lb_dataplane::snapshot::Cidr);

impl TryFrom<String> for Cidr {
    type Error = String;
    fn try_from(s: String) -> Result<Cidr, String> {
        s.parse()
    }
}

impl From<Cidr> for String {
    fn from(c: Cidr) -> String {
        c.to_string()
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Cidr, String> {
        let c = lb_dataplane::snapshot::Cidr::parse_prefixed(s).map_err(|e| e.to_string())?;
        lb_dataplane::snapshot::Cidr::new(c.network(), c.prefix())
            .map(Cidr)
            .map_err(|e| e.to_string())
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Service {
    /// `namespace/name`.
    pub name: String,
    /// Translation.
    pub mode: Mode,
    /// Which backends are used.
    pub traffic_policy: TrafficPolicy,
    /// Client-IP session affinity timeout in seconds; `None`: no affinity.
    pub affinity_timeout_seconds: Option<u32>,
    /// Allowed client prefixes; empty: all.
    pub source_ranges: Vec<Cidr>,
    /// Who wrote it.
    pub source: Source,
}

/// The identity of a frontend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FrontendKey {
    /// The VIP.
    pub addr: IpAddr,
    /// The port.
    pub port: u16,
    /// The protocol.
    pub protocol: Protocol,
}

impl fmt::Display for FrontendKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", endpoint(self.addr, self.port), self.protocol.name())
    }
}

/// `1.2.3.4:80` or `[::1]:80`.
pub fn endpoint(addr: IpAddr, port: u16) -> String {
    match addr {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

/// A service address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frontend {
    /// The owning service.
    pub service: String,
    /// Address, port, protocol.
    pub key: FrontendKey,
    /// Service type it comes from.
    pub kind: FrontendType,
    /// Who wrote it.
    pub source: Source,
}

/// The identity of a backend.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BackendKey {
    /// The service it serves.
    pub service: String,
    /// Its address.
    pub addr: IpAddr,
    /// Its port.
    pub port: u16,
}

impl fmt::Display for BackendKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {}",
            endpoint(self.addr, self.port),
            Shown(&self.service)
        )
    }
}

/// A backend of a service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Backend {
    /// Service, address, port.
    pub key: BackendKey,
    /// Relative share of new connections, 0..=MAX_WEIGHT.
    pub weight: u32,
    /// Lifecycle state, as its source wrote it.
    pub state: BackendState,
    /// The state an operator set with `SetBackendState`, if any: it takes
    /// precedence over `state` (see [`effective_state`](Self::effective_state)).
    /// Apply and Resync keep it (they write `state`); only
    /// `SetBackendState` sets or clears it. Absent from older state files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_state: Option<BackendState>,
    /// Node name (for the local traffic policy).
    pub node: Option<String>,
    /// Topology zone.
    pub zone: Option<String>,
    /// Who wrote it.
    pub source: Source,
}

/// One change of a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    /// Create or replace a service.
    UpsertService(Service),
    /// Create or replace a frontend.
    UpsertFrontend(Frontend),
    /// Create or replace a backend.
    UpsertBackend(Backend),
    /// Delete a service with its frontends and backends.
    DeleteService(String),
    /// Delete a frontend.
    DeleteFrontend(FrontendKey),
    /// Delete a backend.
    DeleteBackend(BackendKey),
}

/// The whole desired state at one revision. Ordered maps keep listings,
/// persisted files and compiled snapshots deterministic. Serialised as three
/// lists (JSON object keys must be strings).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(into = "StateLists", try_from = "StateLists")]
pub struct DesiredState {
    /// Services by name.
    pub services: BTreeMap<String, Service>,
    /// Frontends by key.
    pub frontends: BTreeMap<FrontendKey, Frontend>,
    /// Backends by key (grouped by service, since the key starts with it).
    pub backends: BTreeMap<BackendKey, Backend>,
}

/// The serialised form of [`DesiredState`].
#[derive(Serialize, Deserialize)]
struct StateLists {
    services: Vec<Service>,
    frontends: Vec<Frontend>,
    backends: Vec<Backend>,
}

impl From<DesiredState> for StateLists {
    fn from(s: DesiredState) -> StateLists {
        StateLists {
            services: s.services.into_values().collect(),
            frontends: s.frontends.into_values().collect(),
            backends: s.backends.into_values().collect(),
        }
    }
}

/// Refuses an object listed twice (a hand-edited or damaged file): one of
/// them would otherwise be dropped without a word.
impl TryFrom<StateLists> for DesiredState {
    type Error = String;

    fn try_from(l: StateLists) -> Result<DesiredState, String> {
        fn map<K: Ord, V>(
            items: Vec<V>,
            key: impl Fn(&V) -> K,
            name: impl Fn(&K) -> String,
        ) -> Result<BTreeMap<K, V>, String> {
            let mut m = BTreeMap::new();
            for v in items {
                let k = key(&v);
                if m.contains_key(&k) {
                    return Err(format!("{} is listed twice", name(&k)));
                }
                m.insert(k, v);
            }
            Ok(m)
        }
        Ok(DesiredState {
            services: map(
                l.services,
                |s| s.name.clone(),
                |n| format!("service {}", Quoted(n)),
            )?,
            frontends: map(l.frontends, |f| f.key, |k| format!("frontend {k}"))?,
            backends: map(l.backends, |b| b.key.clone(), |k| format!("backend {k}"))?,
        })
    }
}

/// The gRPC status class of a validation failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A malformed value (INVALID_ARGUMENT).
    Invalid,
    /// A reference to something that does not exist (NOT_FOUND).
    NotFound,
    /// An identity already taken by another object (ALREADY_EXISTS).
    AlreadyExists,
    /// Valid on its own but not in the current state (FAILED_PRECONDITION).
    Precondition,
    /// The commit could not be made durable; retrying may succeed
    /// (UNAVAILABLE).
    Unavailable,
    /// lbd's own state is broken, e.g. an unreadable state file (INTERNAL).
    Internal,
}

/// A rejected request: which object, which field, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {field}: {message}")]
pub struct ValidationError {
    /// The status class.
    pub kind: ErrorKind,
    /// The object, e.g. `changes[3] frontend 10.0.0.1:80/tcp`.
    pub object: String,
    /// The field, e.g. `port`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl ValidationError {
    /// An INVALID_ARGUMENT error.
    pub fn invalid(object: impl Into<String>, field: impl Into<String>, message: impl Into<String>) -> Self {
        ValidationError {
            kind: ErrorKind::Invalid,
            object: object.into(),
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same error with `prefix` (e.g. `changes[3]`) before the object.
    pub fn within(mut self, prefix: &str) -> Self {
        self.object = if self.object.is_empty() {
            prefix.to_string()
        } else {
            format!("{prefix} {}", self.object)
        };
        self
    }
}

/// Checks a Kubernetes-style `namespace/name`: two DNS-1123 labels.
pub fn check_service_name(name: &str) -> Result<(), String> {
    let Some((ns, n)) = name.split_once('/') else {
        return Err(format!("{} is not of the form namespace/name", Quoted(name)));
    };
    for (what, part) in [("namespace", ns), ("name", n)] {
        let ok = !part.is_empty()
            && part.len() <= 63
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !part.starts_with('-')
            && !part.ends_with('-');
        if !ok {
            return Err(format!(
                "{what} {} in {} must be 1-63 lowercase letters, digits or '-', not starting or ending with '-'",
                Quoted(part),
                Quoted(name)
            ));
        }
    }
    Ok(())
}

/// A frontend's, backend's or SNAT address: the dataplane's rule
/// ([`lb_dataplane::snapshot::is_unicast`]), and neither loopback (no
/// packet from the network is addressed to it, nor can one be sent to it)
/// nor IPv4-mapped IPv6 (`::ffff:10.0.0.1` would be a second name of an
/// IPv4 address, which the data plane sees as another family), nor in
/// 0/8 ("this network", RFC 1122: no host's address). What passes is one
/// host's address ([`lb_dataplane::snapshot::is_host_address`]), which
/// lbd can own (the data plane drops packets to the others as
/// `not_unicast`, so an owned one would be unreachable).
pub fn check_unicast(addr: IpAddr) -> Result<(), String> {
    if !lb_dataplane::snapshot::is_unicast(addr) {
        return Err(format!("{addr} is not a unicast address"));
    }
    if addr.is_loopback() {
        return Err(format!("{addr} is a loopback address"));
    }
    if let IpAddr::V6(a) = addr {
        if let Some(v4) = a.to_ipv4_mapped() {
            return Err(format!("{addr} is an IPv4-mapped address: write {v4}"));
        }
    }
    if let IpAddr::V4(a) = addr {
        if a.octets()[0] == 0 {
            return Err(format!(
                "{addr} is in 0.0.0.0/8 (\"this network\"), which names no host"
            ));
        }
    }
    debug_assert!(lb_dataplane::snapshot::is_host_address(addr));
    Ok(())
}

/// Parses `ADDR:PORT` (`[IPv6]:PORT`). An IPv6 zone (`[fe80::1%2]:80`) is
/// refused rather than dropped: nothing here uses one.
pub fn parse_socket_addr(s: &str) -> Option<std::net::SocketAddr> {
    match s.parse().ok()? {
        std::net::SocketAddr::V6(a) if a.scope_id() != 0 || a.flowinfo() != 0 => None,
        a => Some(a),
    }
}

impl Service {
    /// Checks the service on its own.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let obj = format!("service {}", Quoted(&self.name));
        check_service_name(&self.name).map_err(|m| ValidationError::invalid(&obj, "name", m))?;
        if let Some(t) = self.affinity_timeout_seconds {
            if t == 0 || t > MAX_AFFINITY_SECONDS {
                return Err(ValidationError::invalid(
                    &obj,
                    AFFINITY_FIELD,
                    format!("{t} s is not within 1..={MAX_AFFINITY_SECONDS} s"),
                ));
            }
        }
        if self.source_ranges.len() > MAX_SOURCE_RANGES {
            return Err(ValidationError::invalid(
                &obj,
                "source_ranges",
                format!("{} ranges, at most {MAX_SOURCE_RANGES}", self.source_ranges.len()),
            ));
        }
        // An IPv4 client is matched against IPv4 ranges only: a range of
        // IPv4-mapped IPv6 addresses (never on the wire) would admit nobody.
        for r in &self.source_ranges {
            if let (IpAddr::V6(a), p @ 96..) = (r.0.network(), r.0.prefix()) {
                if let Some(v4) = a.to_ipv4_mapped() {
                    return Err(ValidationError::invalid(
                        &obj,
                        "source_ranges",
                        format!(
                            "{r} is an IPv4-mapped range, which no client matches: write {v4}/{}",
                            p - 96
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Frontend {
    /// Checks the frontend on its own.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let obj = format!("frontend {}", self.key);
        check_service_name(&self.service).map_err(|m| ValidationError::invalid(&obj, "service", m))?;
        check_unicast(self.key.addr).map_err(|m| ValidationError::invalid(&obj, "address", m))?;
        if self.key.port == 0 {
            return Err(ValidationError::invalid(&obj, "port", "must be 1-65535"));
        }
        Ok(())
    }
}

impl Backend {
    /// The state the data plane uses: the operator's, when set, else the
    /// source's.
    pub fn effective_state(&self) -> BackendState {
        self.operator_state.unwrap_or(self.state)
    }

    /// Checks the backend on its own.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let obj = format!("backend {}", self.key);
        check_service_name(&self.key.service).map_err(|m| ValidationError::invalid(&obj, "service", m))?;
        check_unicast(self.key.addr).map_err(|m| ValidationError::invalid(&obj, "address", m))?;
        if self.key.port == 0 {
            return Err(ValidationError::invalid(&obj, "port", "must be 1-65535"));
        }
        if self.weight > MAX_WEIGHT {
            return Err(ValidationError::invalid(
                &obj,
                "weight",
                format!("{} is above {MAX_WEIGHT}", self.weight),
            ));
        }
        for (field, v) in [("node", &self.node), ("zone", &self.zone)] {
            if let Some(v) = v {
                check_label(v).map_err(|m| ValidationError::invalid(&obj, field, m))?;
            }
        }
        Ok(())
    }
}

/// A backend's `node` or `zone`, and lbd's own node name (`--node-name`,
/// `node` in its config), which a backend's `node` must equal exactly for
/// the local traffic policy: 1 to [`MAX_LABEL_LEN`] bytes, no leading or
/// trailing white space, no control characters.
pub fn check_label(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > MAX_LABEL_LEN {
        return Err(format!("{} must be 1-{MAX_LABEL_LEN} bytes", Quoted(s)));
    }
    if s.trim() != s || s.chars().any(char::is_control) {
        return Err(format!(
            "{} has leading or trailing white space or control characters",
            Quoted(s)
        ));
    }
    Ok(())
}

impl Change {
    /// The object the change writes or deletes, as errors name it
    /// (`service "default/web"`, `frontend 10.0.0.1:80/tcp`, `backend
    /// 10.1.0.1:8080 of default/web`).
    pub fn object_name(&self) -> String {
        match self {
            Change::UpsertService(s) => format!("service {}", Quoted(&s.name)),
            Change::DeleteService(n) => format!("service {}", Quoted(n)),
            Change::UpsertFrontend(f) => format!("frontend {}", f.key),
            Change::DeleteFrontend(k) => format!("frontend {k}"),
            Change::UpsertBackend(b) => format!("backend {}", b.key),
            Change::DeleteBackend(k) => format!("backend {k}"),
        }
    }

    /// Checks what can be checked without the state.
    pub fn validate(&self) -> Result<(), ValidationError> {
        match self {
            Change::UpsertService(s) => s.validate(),
            Change::UpsertFrontend(f) => f.validate(),
            Change::UpsertBackend(b) => b.validate(),
            Change::DeleteService(n) => check_service_name(n)
                .map_err(|m| ValidationError::invalid(format!("service {}", Quoted(n)), "name", m)),
            Change::DeleteFrontend(k) => {
                if k.port == 0 {
                    Err(ValidationError::invalid(
                        format!("frontend {k}"),
                        "port",
                        "must be 1-65535",
                    ))
                } else {
                    Ok(())
                }
            }
            Change::DeleteBackend(k) => check_service_name(&k.service)
                .map_err(|m| ValidationError::invalid(format!("backend {k}"), "service", m)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// A backend's service is shown in its key as given only when it is
    /// plain text: otherwise quoted (one line), and past 256 bytes in part.
    #[test]
    fn backend_keys_show_odd_services_quoted() {
        let key = |service: &str| BackendKey {
            service: service.into(),
            addr: ip("10.1.0.11"),
            port: 8080,
        };
        assert_eq!(key("default/web").to_string(), "10.1.0.11:8080 of default/web");
        assert_eq!(
            key("default/web\nINJECTED").to_string(),
            "10.1.0.11:8080 of \"default/web\\nINJECTED\""
        );
        let long = key(&"a".repeat(60_000)).to_string();
        assert!(long.ends_with("\"... (60000 bytes)"), "{long}");
        assert!(long.len() < 300, "{}", long.len());
        let e = backend(key("a\nb")).validate().unwrap_err().to_string();
        assert!(!e.contains('\n'), "one line: {e}");
    }

    /// An active backend of weight 1 at `key`, written by the API.
    fn backend(key: BackendKey) -> Backend {
        Backend {
            key,
            weight: 1,
            state: BackendState::Active,
            operator_state: None,
            node: None,
            zone: None,
            source: Source::Api,
        }
    }

    pub(crate) fn service(name: &str) -> Service {
        Service {
            name: name.into(),
            mode: Mode::FullNat,
            traffic_policy: TrafficPolicy::Cluster,
            affinity_timeout_seconds: None,
            source_ranges: vec![],
            source: Source::Api,
        }
    }

    /// A range with host bits is its network: one range, one value, in
    /// the model, the state file's JSON and what `lbctl get` shows.
    #[test]
    fn source_ranges_drop_host_bits() {
        let a: Cidr = "10.1.2.3/8".parse().unwrap();
        assert_eq!(a, "10.0.0.0/8".parse().unwrap());
        assert_eq!(a.to_string(), "10.0.0.0/8");
        let b: Cidr = "2001:db8::1/32".parse().unwrap();
        assert_eq!(b.to_string(), "2001:db8::/32");
        let json: Cidr = serde_json::from_str("\"192.0.2.77/24\"").unwrap();
        assert_eq!(serde_json::to_string(&json).unwrap(), "\"192.0.2.0/24\"");
        assert_eq!("10.1.2.3/32".parse::<Cidr>().unwrap().to_string(), "10.1.2.3/32");
    }

    #[test]
    fn service_names() {
        assert!(check_service_name("default/web").is_ok());
        assert!(check_service_name("kube-system/dns-1").is_ok());
        for bad in [
            "web",
            "/web",
            "default/",
            "Default/web",
            "a/b/c",
            "default/-web",
            &format!("a/{}", "x".repeat(64)),
        ] {
            assert!(check_service_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_name_object_and_field() {
        let mut s = service("default/web");
        s.affinity_timeout_seconds = Some(0);
        let e = s.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "service \"default/web\": session_affinity_timeout_seconds: 0 s is not within 1..=86400 s"
        );
        let mut s = service("default/web");
        s.source_ranges = vec![
            "10.0.0.0/8".parse().unwrap(),
            "::ffff:192.168.0.0/112".parse().unwrap(),
        ];
        assert_eq!(
            s.validate().unwrap_err().to_string(),
            "service \"default/web\": source_ranges: ::ffff:192.168.0.0/112 is an IPv4-mapped range, which no client matches: write 192.168.0.0/16"
        );
        // Ranges that merely contain the mapped block are IPv6 ranges.
        s.source_ranges = vec!["::/0".parse().unwrap(), "::ffff:0:0/95".parse().unwrap()];
        assert!(s.validate().is_ok());
        let f = Frontend {
            service: "default/web".into(),
            key: FrontendKey {
                addr: ip("10.0.0.1"),
                port: 0,
                protocol: Protocol::Tcp,
            },
            kind: FrontendType::LoadBalancer,
            source: Source::Api,
        };
        let e = f.validate().unwrap_err().within("changes[2]");
        assert_eq!(
            e.to_string(),
            "changes[2] frontend 10.0.0.1:0/tcp: port: must be 1-65535"
        );
        for (a, why) in [
            (
                "::ffff:10.0.0.1",
                "::ffff:10.0.0.1 is an IPv4-mapped address: write 10.0.0.1",
            ),
            (
                "::ffff:127.0.0.1",
                "::ffff:127.0.0.1 is an IPv4-mapped address: write 127.0.0.1",
            ),
            (
                "0.1.2.3",
                "0.1.2.3 is in 0.0.0.0/8 (\"this network\"), which names no host",
            ),
        ] {
            let f = Frontend {
                key: FrontendKey {
                    addr: ip(a),
                    port: 80,
                    ..f.key
                },
                ..f.clone()
            };
            assert_eq!(f.validate().unwrap_err().message, why);
        }
        for lo in ["127.0.0.1", "127.9.9.9", "::1"] {
            let f = Frontend {
                key: FrontendKey {
                    addr: ip(lo),
                    port: 80,
                    ..f.key
                },
                ..f.clone()
            };
            let e = f.validate().unwrap_err();
            assert_eq!(
                (e.field.as_str(), e.message.as_str()),
                ("address", &*format!("{lo} is a loopback address"))
            );
        }
        assert_eq!(e.kind, ErrorKind::Invalid);
        let b = backend(BackendKey {
            service: "default/web".into(),
            addr: ip("224.0.0.1"),
            port: 80,
        });
        assert!(b
            .validate()
            .unwrap_err()
            .to_string()
            .contains("address: 224.0.0.1 is not a unicast address"));
        for (a, why) in [
            ("127.0.0.1", "127.0.0.1 is a loopback address"),
            (
                "0.0.0.1",
                "0.0.0.1 is in 0.0.0.0/8 (\"this network\"), which names no host",
            ),
            (
                "::ffff:10.1.0.1",
                "::ffff:10.1.0.1 is an IPv4-mapped address: write 10.1.0.1",
            ),
        ] {
            let b = Backend {
                key: BackendKey {
                    addr: ip(a),
                    ..b.key.clone()
                },
                ..b.clone()
            };
            assert_eq!(b.validate().unwrap_err().message, why);
        }
        let b = Backend {
            weight: 70_000,
            key: BackendKey {
                addr: ip("10.1.0.1"),
                ..b.key
            },
            ..b
        };
        assert_eq!(b.validate().unwrap_err().field, "weight");
    }

    #[test]
    fn cidrs_parse_and_print() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert_eq!(c.to_string(), "10.0.0.0/8");
        assert!("10.0.0.0".parse::<Cidr>().is_err());
        assert!("fd00::/129".parse::<Cidr>().is_err());
        for bad in ["10.0.0.0/+8", "10.0.0.0/", "10.0.0.0/ 8"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
        assert_eq!(serde_json::to_string(&c).unwrap(), "\"10.0.0.0/8\"");
    }

    #[test]
    fn state_round_trips_through_json() {
        let mut st = DesiredState::default();
        st.services.insert("default/web".into(), service("default/web"));
        let k = FrontendKey {
            addr: ip("10.0.0.100"),
            port: 80,
            protocol: Protocol::Tcp,
        };
        st.frontends.insert(
            k,
            Frontend {
                service: "default/web".into(),
                key: k,
                kind: FrontendType::LoadBalancer,
                source: Source::K8s,
            },
        );
        let text = serde_json::to_string(&st).unwrap();
        let back: DesiredState = serde_json::from_str(&text).unwrap();
        assert_eq!(back, st);
    }
}
