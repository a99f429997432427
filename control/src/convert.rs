//! Conversions between the `lb.v1` messages and the model.
//!
//! Every proto field of a request is checked on the way in, except those
//! only the server sets, which requests ignore (output only, AIP-203): an
//! object's `source` (the request's is recorded) and a backend's
//! `operator_state` (the stored one is kept). Addresses parse, ports are
//! 1-65535 (they travel as `uint32`), enums are known numbers (with the
//! `UNSPECIFIED` defaults documented in lb.proto: source api, full-NAT,
//! cluster policy, load-balancer frontend, active backend; an unspecified
//! protocol is rejected), weights fit, names are `namespace/name`. Errors are
//! [`ValidationError`]s naming the request position (`changes[3]`,
//! `services[0]`), the object and the proto field name, so that a gRPC
//! status built from one tells the caller exactly what to fix.
//!
//! The model-to-proto direction cannot fail.

use std::net::IpAddr;

use lb_proto::v1 as pb;
use pb::change::Change as PbChange;

use crate::model::{
    Backend, BackendKey, BackendState, Change, Cidr, Frontend, FrontendKey, FrontendType, Mode, Protocol,
    Quoted, Service, Shown, Source, TrafficPolicy, ValidationError, MAX_WEIGHT,
};

/// A request-level error for `field` (no object).
fn bad(object: &str, field: &str, message: impl Into<String>) -> ValidationError {
    ValidationError::invalid(object, field, message)
}

/// `Source` from its proto number; `UNSPECIFIED` is [`Source::Api`].
pub fn source_from_proto(v: i32, object: &str, field: &str) -> Result<Source, ValidationError> {
    match pb::Source::try_from(v) {
        Ok(pb::Source::Unspecified) | Ok(pb::Source::Api) => Ok(Source::Api),
        Ok(pb::Source::K8s) => Ok(Source::K8s),
        Ok(pb::Source::Config) => Ok(Source::Config),
        Err(_) => Err(bad(object, field, format!("{v} is not a known Source"))),
    }
}

/// `Source` to its proto number.
pub fn source_to_proto(s: Source) -> i32 {
    match s {
        Source::K8s => pb::Source::K8s,
        Source::Api => pb::Source::Api,
        Source::Config => pb::Source::Config,
    }
    .into()
}

/// `Mode` from its proto number; `UNSPECIFIED` is full-NAT.
pub(crate) fn mode_from_proto(v: i32, object: &str) -> Result<Mode, ValidationError> {
    match pb::ForwardingMode::try_from(v) {
        Ok(pb::ForwardingMode::Unspecified) | Ok(pb::ForwardingMode::Fullnat) => Ok(Mode::FullNat),
        Ok(pb::ForwardingMode::Dnat) => Ok(Mode::Dnat),
        Err(_) => Err(bad(object, "mode", format!("{v} is not a known ForwardingMode"))),
    }
}

fn mode_to_proto(m: Mode) -> i32 {
    match m {
        Mode::Dnat => pb::ForwardingMode::Dnat,
        Mode::FullNat => pb::ForwardingMode::Fullnat,
    }
    .into()
}

/// `TrafficPolicy` from its proto number; `UNSPECIFIED` is cluster.
pub(crate) fn policy_from_proto(v: i32, object: &str) -> Result<TrafficPolicy, ValidationError> {
    match pb::TrafficPolicy::try_from(v) {
        Ok(pb::TrafficPolicy::Unspecified) | Ok(pb::TrafficPolicy::Cluster) => Ok(TrafficPolicy::Cluster),
        Ok(pb::TrafficPolicy::Local) => Ok(TrafficPolicy::Local),
        Err(_) => Err(bad(
            object,
            "traffic_policy",
            format!("{v} is not a known TrafficPolicy"),
        )),
    }
}

fn policy_to_proto(p: TrafficPolicy) -> i32 {
    match p {
        TrafficPolicy::Cluster => pb::TrafficPolicy::Cluster,
        TrafficPolicy::Local => pb::TrafficPolicy::Local,
    }
    .into()
}

/// `Protocol` from its proto number; `UNSPECIFIED` is an error.
pub fn protocol_from_proto(v: i32, object: &str) -> Result<Protocol, ValidationError> {
    match pb::Protocol::try_from(v) {
        Ok(pb::Protocol::Tcp) => Ok(Protocol::Tcp),
        Ok(pb::Protocol::Udp) => Ok(Protocol::Udp),
        Ok(pb::Protocol::Unspecified) => Err(bad(
            object,
            "protocol",
            "must be set (PROTOCOL_TCP or PROTOCOL_UDP)",
        )),
        Err(_) => Err(bad(object, "protocol", format!("{v} is not a known Protocol"))),
    }
}

/// `Protocol` to its proto number.
pub fn protocol_to_proto(p: Protocol) -> i32 {
    match p {
        Protocol::Tcp => pb::Protocol::Tcp,
        Protocol::Udp => pb::Protocol::Udp,
    }
    .into()
}

/// `FrontendType` from its proto number; `UNSPECIFIED` is load-balancer.
pub(crate) fn frontend_type_from_proto(v: i32, object: &str) -> Result<FrontendType, ValidationError> {
    match pb::FrontendType::try_from(v) {
        Ok(pb::FrontendType::Unspecified) | Ok(pb::FrontendType::LoadBalancer) => {
            Ok(FrontendType::LoadBalancer)
        }
        Ok(pb::FrontendType::ClusterIp) => Ok(FrontendType::ClusterIp),
        Ok(pb::FrontendType::NodePort) => Ok(FrontendType::NodePort),
        Ok(pb::FrontendType::ExternalIp) => Ok(FrontendType::ExternalIp),
        Err(_) => Err(bad(object, "type", format!("{v} is not a known FrontendType"))),
    }
}

fn frontend_type_to_proto(t: FrontendType) -> i32 {
    match t {
        FrontendType::ClusterIp => pb::FrontendType::ClusterIp,
        FrontendType::NodePort => pb::FrontendType::NodePort,
        FrontendType::LoadBalancer => pb::FrontendType::LoadBalancer,
        FrontendType::ExternalIp => pb::FrontendType::ExternalIp,
    }
    .into()
}

/// `BackendState` from its proto number; `UNSPECIFIED` is active.
pub fn backend_state_from_proto(v: i32, object: &str, field: &str) -> Result<BackendState, ValidationError> {
    match pb::BackendState::try_from(v) {
        Ok(pb::BackendState::Unspecified) | Ok(pb::BackendState::Active) => Ok(BackendState::Active),
        Ok(pb::BackendState::Terminating) => Ok(BackendState::Terminating),
        Ok(pb::BackendState::Quarantined) => Ok(BackendState::Quarantined),
        Ok(pb::BackendState::Maintenance) => Ok(BackendState::Maintenance),
        Err(_) => Err(bad(object, field, format!("{v} is not a known BackendState"))),
    }
}

/// `BackendState` to its proto number.
pub fn backend_state_to_proto(s: BackendState) -> i32 {
    match s {
        BackendState::Active => pb::BackendState::Active,
        BackendState::Terminating => pb::BackendState::Terminating,
        BackendState::Quarantined => pb::BackendState::Quarantined,
        BackendState::Maintenance => pb::BackendState::Maintenance,
    }
    .into()
}

/// An IP address from a proto string field.
pub fn addr_from_proto(s: &str, object: &str, field: &str) -> Result<IpAddr, ValidationError> {
    if s.is_empty() {
        return Err(bad(object, field, "must be set"));
    }
    s.parse().map_err(|_| {
        bad(
            object,
            field,
            format!("{} is not an IPv4 or IPv6 address", Quoted(s)),
        )
    })
}

/// A port from a proto `uint32`: 1-65535.
pub fn port_from_proto(v: u32, object: &str, field: &str) -> Result<u16, ValidationError> {
    match u16::try_from(v) {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(bad(object, field, format!("{v} is not a port (1-65535)"))),
    }
}

fn label(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// A service; its source from the message (`UNSPECIFIED`: api). Validated.
pub fn service_from_proto(p: &pb::Service) -> Result<Service, ValidationError> {
    let obj = format!("service {}", Quoted(&p.name));
    let mut source_ranges = Vec::with_capacity(p.source_ranges.len());
    for (i, r) in p.source_ranges.iter().enumerate() {
        let c: Cidr = r
            .parse()
            .map_err(|m: String| bad(&obj, &format!("source_ranges[{i}]"), m))?;
        source_ranges.push(c);
    }
    let s = Service {
        name: p.name.clone(),
        mode: mode_from_proto(p.mode, &obj)?,
        traffic_policy: policy_from_proto(p.traffic_policy, &obj)?,
        affinity_timeout_seconds: (p.session_affinity_timeout_seconds != 0)
            .then_some(p.session_affinity_timeout_seconds),
        source_ranges,
        source: source_from_proto(p.source, &obj, "source")?,
    };
    s.validate()?;
    Ok(s)
}

/// The proto form of a service.
pub fn service_to_proto(s: &Service) -> pb::Service {
    pb::Service {
        name: s.name.clone(),
        mode: mode_to_proto(s.mode),
        traffic_policy: policy_to_proto(s.traffic_policy),
        session_affinity_timeout_seconds: s.affinity_timeout_seconds.unwrap_or(0),
        source_ranges: s.source_ranges.iter().map(|c| c.to_string()).collect(),
        source: source_to_proto(s.source),
    }
}

/// A frontend key (for deletes and statistics).
pub fn frontend_key_from_proto(p: &pb::FrontendKey, object: &str) -> Result<FrontendKey, ValidationError> {
    Ok(FrontendKey {
        addr: addr_from_proto(&p.address, object, "address")?,
        port: port_from_proto(p.port, object, "port")?,
        protocol: protocol_from_proto(p.protocol, object)?,
    })
}

/// `ADDR:PORT` of a request's address text for an error message, the
/// address bracketed if it is IPv6 (`[fd00::1]:80`, not `fd00::1:80`).
fn shown_endpoint(addr: &str, port: u32) -> String {
    if addr.parse::<std::net::Ipv6Addr>().is_ok() {
        format!("[{addr}]:{port}")
    } else {
        format!("{}:{port}", Shown(addr))
    }
}

/// The proto form of a frontend key.
pub fn frontend_key_to_proto(k: &FrontendKey) -> pb::FrontendKey {
    pb::FrontendKey {
        address: k.addr.to_string(),
        port: k.port.into(),
        protocol: protocol_to_proto(k.protocol),
    }
}

/// A frontend; its source from the message. Validated.
pub fn frontend_from_proto(p: &pb::Frontend) -> Result<Frontend, ValidationError> {
    let obj = format!("frontend {}", shown_endpoint(&p.address, p.port));
    let f = Frontend {
        service: p.service.clone(),
        key: FrontendKey {
            addr: addr_from_proto(&p.address, &obj, "address")?,
            port: port_from_proto(p.port, &obj, "port")?,
            protocol: protocol_from_proto(p.protocol, &obj)?,
        },
        kind: frontend_type_from_proto(p.r#type, &obj)?,
        source: source_from_proto(p.source, &obj, "source")?,
    };
    f.validate()?;
    Ok(f)
}

/// The proto form of a frontend.
pub fn frontend_to_proto(f: &Frontend) -> pb::Frontend {
    pb::Frontend {
        service: f.service.clone(),
        address: f.key.addr.to_string(),
        port: f.key.port.into(),
        protocol: protocol_to_proto(f.key.protocol),
        r#type: frontend_type_to_proto(f.kind),
        source: source_to_proto(f.source),
    }
}

/// A backend key (for deletes and statistics).
pub fn backend_key_from_proto(p: &pb::BackendKey, object: &str) -> Result<BackendKey, ValidationError> {
    Ok(BackendKey {
        service: p.service.clone(),
        addr: addr_from_proto(&p.address, object, "address")?,
        port: port_from_proto(p.port, object, "port")?,
    })
}

/// The proto form of a backend key.
pub fn backend_key_to_proto(k: &BackendKey) -> pb::BackendKey {
    pb::BackendKey {
        service: k.service.clone(),
        address: k.addr.to_string(),
        port: k.port.into(),
    }
}

/// A backend; its source and operator state from the message (as a List
/// reply gives them), weight 1 when unset. Validated. Requests ignore both
/// (see [`change_from_proto`], [`resync_from_proto`]).
pub fn backend_from_proto(p: &pb::Backend) -> Result<Backend, ValidationError> {
    let obj = format!(
        "backend {} of {}",
        shown_endpoint(&p.address, p.port),
        Quoted(&p.service)
    );
    let weight = p.weight.unwrap_or(1);
    if weight > MAX_WEIGHT {
        return Err(bad(&obj, "weight", format!("{weight} is above {MAX_WEIGHT}")));
    }
    let b = Backend {
        key: BackendKey {
            service: p.service.clone(),
            addr: addr_from_proto(&p.address, &obj, "address")?,
            port: port_from_proto(p.port, &obj, "port")?,
        },
        weight,
        state: backend_state_from_proto(p.state, &obj, "state")?,
        operator_state: match p.operator_state {
            0 => None,
            v => Some(backend_state_from_proto(v, &obj, "operator_state")?),
        },
        node: label(&p.node),
        zone: label(&p.zone),
        source: source_from_proto(p.source, &obj, "source")?,
    };
    b.validate()?;
    Ok(b)
}

/// The proto form of a backend.
pub fn backend_to_proto(b: &Backend) -> pb::Backend {
    pb::Backend {
        service: b.key.service.clone(),
        address: b.key.addr.to_string(),
        port: b.key.port.into(),
        weight: Some(b.weight),
        state: backend_state_to_proto(b.state),
        node: b.node.clone().unwrap_or_default(),
        zone: b.zone.clone().unwrap_or_default(),
        source: source_to_proto(b.source),
        operator_state: b.operator_state.map_or(0, backend_state_to_proto),
    }
}

/// A backend of a request (Apply, Resync): `source` (the request's)
/// whatever its own field says, and no operator state whatever its
/// output-only `operator_state` says, not even checked (AIP-203): Apply and
/// Resync keep the stored one.
fn request_backend(p: &pb::Backend, source: Source) -> Result<Backend, ValidationError> {
    Ok(Backend {
        source,
        ..backend_from_proto(&pb::Backend {
            source: 0,
            operator_state: 0,
            ..p.clone()
        })?
    })
}

/// One change of a request; upserted objects get `source` (the request's),
/// whatever their own `source` field says; a backend's `operator_state` is
/// ignored.
pub fn change_from_proto(p: &pb::Change, source: Source) -> Result<Change, ValidationError> {
    let change = match &p.change {
        None => return Err(bad("", "change", "is empty (set one of the oneof fields)")),
        Some(PbChange::UpsertService(s)) => Change::UpsertService(Service {
            source,
            ..service_from_proto(&pb::Service {
                source: 0,
                ..s.clone()
            })?
        }),
        Some(PbChange::UpsertFrontend(f)) => Change::UpsertFrontend(Frontend {
            source,
            ..frontend_from_proto(&pb::Frontend {
                source: 0,
                ..f.clone()
            })?
        }),
        Some(PbChange::UpsertBackend(b)) => Change::UpsertBackend(request_backend(b, source)?),
        Some(PbChange::DeleteService(n)) => Change::DeleteService(n.clone()),
        Some(PbChange::DeleteFrontend(k)) => {
            let obj = format!("delete_frontend {}", shown_endpoint(&k.address, k.port));
            Change::DeleteFrontend(frontend_key_from_proto(k, &obj)?)
        }
        Some(PbChange::DeleteBackend(k)) => {
            let obj = format!(
                "delete_backend {} of {}",
                shown_endpoint(&k.address, k.port),
                Quoted(&k.service)
            );
            Change::DeleteBackend(backend_key_from_proto(k, &obj)?)
        }
    };
    change.validate()?;
    Ok(change)
}

/// All changes of an Apply, errors prefixed with `changes[i]`.
pub fn changes_from_proto(changes: &[pb::Change], source: Source) -> Result<Vec<Change>, ValidationError> {
    changes
        .iter()
        .enumerate()
        .map(|(i, c)| change_from_proto(c, source).map_err(|e| e.within(&format!("changes[{i}]"))))
        .collect()
}

/// The proto form of a change.
pub fn change_to_proto(c: &Change) -> pb::Change {
    let change = match c {
        Change::UpsertService(s) => PbChange::UpsertService(service_to_proto(s)),
        Change::UpsertFrontend(f) => PbChange::UpsertFrontend(frontend_to_proto(f)),
        Change::UpsertBackend(b) => PbChange::UpsertBackend(backend_to_proto(b)),
        Change::DeleteService(n) => PbChange::DeleteService(n.clone()),
        Change::DeleteFrontend(k) => PbChange::DeleteFrontend(frontend_key_to_proto(k)),
        Change::DeleteBackend(k) => PbChange::DeleteBackend(backend_key_to_proto(k)),
    };
    pb::Change { change: Some(change) }
}

/// The objects of a Resync request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResyncObjects {
    /// The services.
    pub services: Vec<Service>,
    /// The frontends.
    pub frontends: Vec<Frontend>,
    /// The backends.
    pub backends: Vec<Backend>,
}

/// The objects of a Resync, each given `source` (a backend's
/// `operator_state` is ignored); errors prefixed with `services[i]`,
/// `frontends[i]` or `backends[i]`.
pub fn resync_from_proto(req: &pb::ResyncRequest, source: Source) -> Result<ResyncObjects, ValidationError> {
    fn each<P, T>(
        what: &str,
        items: &[P],
        f: impl Fn(&P) -> Result<T, ValidationError>,
    ) -> Result<Vec<T>, ValidationError> {
        items
            .iter()
            .enumerate()
            .map(|(i, p)| f(p).map_err(|e| e.within(&format!("{what}[{i}]"))))
            .collect()
    }
    let services = each("services", &req.services, |p| {
        Ok(Service {
            source,
            ..service_from_proto(&pb::Service {
                source: 0,
                ..p.clone()
            })?
        })
    })?;
    let frontends = each("frontends", &req.frontends, |p| {
        Ok(Frontend {
            source,
            ..frontend_from_proto(&pb::Frontend {
                source: 0,
                ..p.clone()
            })?
        })
    })?;
    let backends = each("backends", &req.backends, |p| request_backend(p, source))?;
    Ok(ResyncObjects {
        services,
        frontends,
        backends,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ErrorKind;

    fn svc() -> pb::Service {
        pb::Service {
            name: "default/web".into(),
            ..Default::default()
        }
    }

    fn fe() -> pb::Frontend {
        pb::Frontend {
            service: "default/web".into(),
            address: "10.0.0.100".into(),
            port: 80,
            protocol: pb::Protocol::Tcp.into(),
            ..Default::default()
        }
    }

    fn be() -> pb::Backend {
        pb::Backend {
            service: "default/web".into(),
            address: "10.1.0.11".into(),
            port: 8080,
            ..Default::default()
        }
    }

    fn upsert(c: PbChange) -> pb::Change {
        pb::Change { change: Some(c) }
    }

    #[test]
    fn unspecified_enums_take_the_documented_defaults() {
        let s = service_from_proto(&svc()).unwrap();
        assert_eq!(s.mode, Mode::FullNat);
        assert_eq!(s.traffic_policy, TrafficPolicy::Cluster);
        assert_eq!(s.affinity_timeout_seconds, None);
        assert_eq!(s.source, Source::Api);
        let f = frontend_from_proto(&fe()).unwrap();
        assert_eq!(f.kind, FrontendType::LoadBalancer);
        let b = backend_from_proto(&be()).unwrap();
        assert_eq!(b.weight, 1);
        assert_eq!(b.state, BackendState::Active);
        assert_eq!(b.node, None);
    }

    #[test]
    fn round_trips() {
        let s = Service {
            name: "kube-system/dns".into(),
            mode: Mode::Dnat,
            traffic_policy: TrafficPolicy::Local,
            affinity_timeout_seconds: Some(600),
            source_ranges: vec!["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()],
            source: Source::K8s,
        };
        assert_eq!(service_from_proto(&service_to_proto(&s)).unwrap(), s);
        let f = Frontend {
            service: "kube-system/dns".into(),
            key: FrontendKey {
                addr: "fd00::53".parse().unwrap(),
                port: 53,
                protocol: Protocol::Udp,
            },
            kind: FrontendType::ClusterIp,
            source: Source::Config,
        };
        assert_eq!(frontend_from_proto(&frontend_to_proto(&f)).unwrap(), f);
        let b = Backend {
            key: BackendKey {
                service: "kube-system/dns".into(),
                addr: "10.1.0.5".parse().unwrap(),
                port: 53,
            },
            weight: 0,
            state: BackendState::Maintenance,
            operator_state: None,
            node: Some("node-1".into()),
            zone: Some("a".into()),
            source: Source::Api,
        };
        assert_eq!(backend_from_proto(&backend_to_proto(&b)).unwrap(), b);
        for c in [
            Change::UpsertService(s),
            Change::UpsertFrontend(f.clone()),
            Change::UpsertBackend(b.clone()),
            Change::DeleteService("a/b".into()),
            Change::DeleteFrontend(f.key),
            Change::DeleteBackend(b.key.clone()),
        ] {
            let src = match &c {
                Change::UpsertService(s) => s.source,
                Change::UpsertFrontend(f) => f.source,
                Change::UpsertBackend(b) => b.source,
                _ => Source::Api,
            };
            assert_eq!(change_from_proto(&change_to_proto(&c), src).unwrap(), c);
        }
    }

    #[test]
    fn request_source_overrides_the_objects_own() {
        let c = upsert(PbChange::UpsertService(pb::Service {
            source: pb::Source::K8s.into(),
            ..svc()
        }));
        match change_from_proto(&c, Source::Config).unwrap() {
            Change::UpsertService(s) => assert_eq!(s.source, Source::Config),
            other => panic!("{other:?}"),
        }
    }

    fn err(changes: Vec<pb::Change>) -> ValidationError {
        changes_from_proto(&changes, Source::Api).unwrap_err()
    }

    #[test]
    fn every_field_is_checked_and_named() {
        let ok = upsert(PbChange::UpsertService(svc()));
        let cases: Vec<(PbChange, &str, &str)> = vec![
            (
                PbChange::UpsertService(pb::Service {
                    name: "web".into(),
                    ..svc()
                }),
                "name",
                "namespace/name",
            ),
            (
                PbChange::UpsertService(pb::Service { mode: 9, ..svc() }),
                "mode",
                "9 is not a known ForwardingMode",
            ),
            (
                PbChange::UpsertService(pb::Service {
                    traffic_policy: -1,
                    ..svc()
                }),
                "traffic_policy",
                "TrafficPolicy",
            ),
            (
                PbChange::UpsertService(pb::Service {
                    session_affinity_timeout_seconds: 100_000,
                    ..svc()
                }),
                "session_affinity_timeout_seconds",
                "86400",
            ),
            (
                PbChange::UpsertService(pb::Service {
                    source_ranges: vec!["10.0.0.0/8".into(), "10.0.0.0/33".into()],
                    ..svc()
                }),
                "source_ranges[1]",
                "prefix length",
            ),
            (
                PbChange::UpsertFrontend(pb::Frontend {
                    address: "10.0.0.300".into(),
                    ..fe()
                }),
                "address",
                "not an IPv4 or IPv6 address",
            ),
            (
                PbChange::UpsertFrontend(pb::Frontend {
                    address: "".into(),
                    ..fe()
                }),
                "address",
                "must be set",
            ),
            (
                PbChange::UpsertFrontend(pb::Frontend { port: 0, ..fe() }),
                "port",
                "1-65535",
            ),
            (
                PbChange::UpsertFrontend(pb::Frontend { port: 65_536, ..fe() }),
                "port",
                "65536 is not a port",
            ),
            (
                PbChange::UpsertFrontend(pb::Frontend { protocol: 0, ..fe() }),
                "protocol",
                "must be set",
            ),
            (
                PbChange::UpsertFrontend(pb::Frontend { protocol: 3, ..fe() }),
                "protocol",
                "3 is not a known Protocol",
            ),
            (
                PbChange::UpsertFrontend(pb::Frontend { r#type: 5, ..fe() }),
                "type",
                "FrontendType",
            ),
            (
                PbChange::UpsertFrontend(pb::Frontend {
                    service: "x".into(),
                    ..fe()
                }),
                "service",
                "namespace/name",
            ),
            (
                PbChange::UpsertFrontend(pb::Frontend {
                    address: "224.0.0.1".into(),
                    ..fe()
                }),
                "address",
                "unicast",
            ),
            (
                PbChange::UpsertBackend(pb::Backend {
                    weight: Some(65_536),
                    ..be()
                }),
                "weight",
                "above 65535",
            ),
            (
                PbChange::UpsertBackend(pb::Backend { state: 7, ..be() }),
                "state",
                "BackendState",
            ),
            (
                PbChange::UpsertBackend(pb::Backend { port: 70_000, ..be() }),
                "port",
                "70000",
            ),
            (
                PbChange::UpsertBackend(pb::Backend {
                    node: "n".repeat(300),
                    ..be()
                }),
                "node",
                "1-253 bytes",
            ),
            (
                PbChange::UpsertBackend(pb::Backend {
                    node: " gw-1\n".into(),
                    ..be()
                }),
                "node",
                "white space or control characters",
            ),
            (
                PbChange::UpsertBackend(pb::Backend {
                    zone: "a\tb".into(),
                    ..be()
                }),
                "zone",
                "control characters",
            ),
            (PbChange::DeleteService("Bad".into()), "name", "namespace/name"),
            (
                PbChange::DeleteFrontend(pb::FrontendKey {
                    address: "10.0.0.1".into(),
                    port: 80,
                    protocol: 0,
                }),
                "protocol",
                "must be set",
            ),
            (
                PbChange::DeleteBackend(pb::BackendKey {
                    service: "default/web".into(),
                    address: "nope".into(),
                    port: 80,
                }),
                "address",
                "\"nope\"",
            ),
            // Whatever the client sends, the message stays one line: the
            // object's name quotes an address that is not plain text.
            (
                PbChange::UpsertFrontend(pb::Frontend {
                    address: "10.0.0.1\nINJECTED".into(),
                    ..fe()
                }),
                "address",
                "frontend \"10.0.0.1\\nINJECTED\":80",
            ),
            (
                PbChange::DeleteBackend(pb::BackendKey {
                    service: "default/web".into(),
                    address: "10.0.0.1 \r\n".into(),
                    port: 80,
                }),
                "address",
                "delete_backend \"10.0.0.1 \\r\\n\":80",
            ),
            // A backend's service too, where the backend's key names it.
            (
                PbChange::UpsertBackend(pb::Backend {
                    service: "default/web\nINJECTED".into(),
                    ..be()
                }),
                "service",
                "backend 10.1.0.11:8080 of \"default/web\\nINJECTED\"",
            ),
            (
                PbChange::DeleteBackend(pb::BackendKey {
                    service: "default/web\nINJECTED".into(),
                    address: "10.1.0.11".into(),
                    port: 8080,
                }),
                "service",
                "of \"default/web\\nINJECTED\"",
            ),
        ];
        for (c, field, text) in cases {
            let e = err(vec![ok.clone(), upsert(c.clone())]);
            assert_eq!(e.kind, ErrorKind::Invalid, "{c:?}");
            assert_eq!(e.field, field, "{c:?}: {e}");
            assert!(e.object.starts_with("changes[1]"), "{e}");
            assert!(e.to_string().contains(text), "{e} lacks {text}");
            assert!(!e.to_string().contains(['\n', '\r']), "one line: {e:?}");
        }
        let e = err(vec![pb::Change { change: None }]);
        assert_eq!(
            e.to_string(),
            "changes[0]: change: is empty (set one of the oneof fields)"
        );
    }

    #[test]
    fn resync_names_the_list_and_index() {
        let req = pb::ResyncRequest {
            source: pb::Source::K8s.into(),
            services: vec![svc()],
            frontends: vec![fe()],
            backends: vec![be(), pb::Backend { port: 0, ..be() }],
        };
        let e = resync_from_proto(&req, Source::K8s).unwrap_err();
        assert!(
            e.to_string().starts_with("backends[1] backend 10.1.0.11:0"),
            "{e}"
        );
        assert_eq!(e.field, "port");
        let req = pb::ResyncRequest {
            backends: vec![be()],
            ..req
        };
        let o = resync_from_proto(&req, Source::K8s).unwrap();
        assert_eq!(o.services[0].source, Source::K8s);
        assert_eq!(o.frontends[0].source, Source::K8s);
        assert_eq!(o.backends[0].source, Source::K8s);
    }

    /// An IPv6 address in an error's object is bracketed before its port.
    #[test]
    fn ipv6_endpoints_in_errors_are_bracketed() {
        let f = pb::Frontend {
            address: "fd00::100".into(),
            port: 0,
            ..fe()
        };
        let e = frontend_from_proto(&f).unwrap_err().to_string();
        assert!(e.starts_with("frontend [fd00::100]:0: port: "), "{e}");
        let b = pb::Backend {
            address: "fd00::11".into(),
            port: 0,
            ..be()
        };
        let e = backend_from_proto(&b).unwrap_err().to_string();
        assert!(
            e.starts_with("backend [fd00::11]:0 of \"default/web\": port: "),
            "{e}"
        );
    }

    #[test]
    fn source_numbers() {
        assert_eq!(source_from_proto(0, "r", "source").unwrap(), Source::Api);
        assert_eq!(source_from_proto(3, "r", "source").unwrap(), Source::Config);
        assert_eq!(
            source_from_proto(4, "request", "source").unwrap_err().to_string(),
            "request: source: 4 is not a known Source"
        );
    }
}
