//! One push of the desired state into lbd: a `Resync` of source `k8s`,
//! which lbd applies whole or not at all. So that one object lbd refuses
//! does not hold back every other update of the cluster, a refused resync
//! is narrowed and sent again: objects another source owns (an operator's
//! service of the same name, a frontend the config file declares) are left
//! out, found with one `List`; then the object lbd names by its request
//! index (`frontends[3] ...`: a VIP that is lbd's own SNAT address, a
//! backend on one of lbd's addresses; `services[1] ...`: the whole
//! service) is left out, one a round. Each left-out object is a [`Skip`],
//! and the next push leaves it out before sending ([`LeftOut`]) while it
//! is unchanged, its service included ([`Value`]). Whether lbd refuses an
//! object depends, besides the object and its service, on lbd's
//! configuration (its addresses, SNAT addresses) and on the other
//! sources' objects: the [`Grounds`] of the refusals, which the sync
//! loop's periodic push compares before it tries the left-outs again (and
//! tries them every hour in any case, for what this misses).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use lb_control::convert;
use lb_control::model::Change;
use lb_proto::v1 as pb;
use lb_proto::v1::load_balancer_client::LoadBalancerClient;
use tonic::transport::Channel;
use tonic::Code;

use crate::desired::{Desired, Skip};

/// An object of a push, by its identity in lbd.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ident {
    /// A service, with its frontends and backends.
    Service(String),
    /// A frontend: address, port, protocol.
    Frontend(Option<IpAddr>, u32, i32),
    /// A backend: service, address, port.
    Backend(String, Option<IpAddr>, u32),
}

fn frontend_ident(f: &pb::Frontend) -> Ident {
    Ident::Frontend(f.address.parse().ok(), f.port, f.protocol)
}

fn backend_ident(b: &pb::Backend) -> Ident {
    Ident::Backend(b.service.clone(), b.address.parse().ok(), b.port)
}

/// An object's value when it was left out: the next push leaves out only
/// the same value (a Service fixed since is sent again at once). A
/// frontend's or backend's includes its service's, which lbd's refusal
/// may depend on (a full-NAT service's frontend of a family lbd has no
/// SNAT address of; source ranges of no frontend's family): a new
/// forwarding mode or new ranges send it again.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A service (its frontends and backends went with it).
    Service(pb::Service),
    /// A frontend, and its service.
    Frontend(pb::Frontend, Option<pb::Service>),
    /// A backend, and its service.
    Backend(pb::Backend, Option<pb::Service>),
}

impl Value {
    /// The lbd service it is or belongs to.
    fn service(&self) -> &str {
        match self {
            Value::Service(s) => &s.name,
            Value::Frontend(f, _) => &f.service,
            Value::Backend(b, _) => &b.service,
        }
    }
}

/// The service `name` of `d`, as it is.
fn service_of(d: &Desired, name: &str) -> Option<pb::Service> {
    d.services.iter().find(|s| s.name == name).cloned()
}

/// Takes the object `id` out of `d` (if `only` is given, only while it
/// has that value); returns what it was, for a skip, and its value.
fn take_out(d: &mut Desired, id: &Ident, only: Option<&Value>) -> Option<(String, Value)> {
    match id {
        Ident::Service(name) => {
            let at = d.services.iter().position(|s| &s.name == name)?;
            let v = Value::Service(d.services[at].clone());
            if only.is_some_and(|o| *o != v) {
                return None;
            }
            d.services.remove(at);
            d.frontends.retain(|f| &f.service != name);
            d.backends.retain(|b| &b.service != name);
            Some((format!("lbd service {name}"), v))
        }
        Ident::Frontend(..) => {
            let at = d.frontends.iter().position(|f| frontend_ident(f) == *id)?;
            let v = Value::Frontend(d.frontends[at].clone(), service_of(d, &d.frontends[at].service));
            if only.is_some_and(|o| *o != v) {
                return None;
            }
            let f = d.frontends.remove(at);
            Some((
                format!(
                    "lbd service {} frontend {}",
                    f.service,
                    endpoint(&f.address, f.port)
                ),
                v,
            ))
        }
        Ident::Backend(..) => {
            let at = d.backends.iter().position(|b| backend_ident(b) == *id)?;
            let v = Value::Backend(d.backends[at].clone(), service_of(d, &d.backends[at].service));
            if only.is_some_and(|o| *o != v) {
                return None;
            }
            let b = d.backends.remove(at);
            Some((
                format!(
                    "lbd service {} backend {}",
                    b.service,
                    endpoint(&b.address, b.port)
                ),
                v,
            ))
        }
    }
}

/// `1.2.3.4:80`, `[fd00::1]:80`.
fn endpoint(address: &str, port: u32) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

/// What a push left out, its value then, and why: given to the next push,
/// which leaves out what is still the same before sending instead of
/// being refused again.
pub type LeftOut = Vec<(Ident, Value, Skip)>;

/// What lbd's refusals depended on besides the objects refused: the lbd
/// instance (a new one on every start, so a new configuration is a new
/// instance) and the objects of the other sources (a digest of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grounds {
    instance_id: String,
    others: u64,
}

/// The present [`Grounds`], and the other sources' objects.
pub async fn grounds(
    client: &mut LoadBalancerClient<Channel>,
) -> Result<(Grounds, pb::ListResponse), PushError> {
    let info = client
        .get_info(pb::GetInfoRequest {})
        .await
        .map_err(|s| PushError::Unavailable(status_line(&s)))?
        .into_inner();
    let others = list_others(client).await?;
    let g = Grounds {
        instance_id: info.instance_id,
        others: digest(&others),
    };
    Ok((g, others))
}

/// A digest of the objects of a list (its revision left out: a change of
/// the `k8s` objects moves it).
fn digest(l: &pb::ListResponse) -> u64 {
    use prost::Message;
    use std::hash::{Hash, Hasher};
    let objects = pb::ListResponse {
        revision: 0,
        ..l.clone()
    };
    // SipHash with fixed keys: the same objects, the same digest.
    let mut h = std::hash::DefaultHasher::new();
    objects.encode_to_vec().hash(&mut h);
    h.finish()
}

/// What a push committed.
#[derive(Debug, Clone, PartialEq)]
pub struct Pushed {
    /// lbd's answer.
    pub response: pb::ResyncResponse,
    /// What was sent, with what had to be left out among its skips.
    pub sent: Desired,
    /// What had to be left out.
    pub left_out: LeftOut,
    /// What the refusals of what was left out depended on, if known for
    /// all of it (`None`: try it all again at the periodic push).
    pub grounds: Option<Grounds>,
    /// How many `Resync` calls it took (1 when nothing was refused).
    pub rounds: usize,
}

/// Why a push did not commit.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// lbd could not be asked (the connection, a deadline, lbd shutting
    /// down): try again later with the same state.
    #[error("lbd did not answer: {0}")]
    Unavailable(String),
    /// lbd refused the request and it could not be narrowed.
    #[error("lbd refused the resync: {0}")]
    Refused(String),
    /// lbd answered `GetInfo`, for its node-port addresses, with an error:
    /// try again later.
    #[error("lbd did not give its addresses: {0}")]
    NoAddresses(String),
}

/// Sends `desired` to lbd as a `Resync` of source `k8s`, narrowed as the
/// module doc says until lbd takes it. What `known` names (the last push's
/// [`Pushed::left_out`], refused on `known_grounds`) is left out first,
/// with its reason. Each `Resync` call adds one to `calls`.
pub async fn push(
    client: &mut LoadBalancerClient<Channel>,
    desired: &Desired,
    known: &LeftOut,
    known_grounds: Option<&Grounds>,
    calls: &std::sync::atomic::AtomicU64,
) -> Result<Pushed, PushError> {
    let mut sent = desired.clone();
    let mut left: LeftOut = Vec::new();
    let leave_out =
        |sent: &mut Desired, left: &mut LeftOut, id: Ident, only: Option<&Value>, reason: String| {
            if let Some((object, value)) = take_out(sent, &id, only) {
                let regarding = sent.regarding.get(value.service()).cloned();
                let skip = Skip {
                    object,
                    reason,
                    regarding,
                };
                sent.skipped.push(skip.clone());
                left.push((id, value, skip));
            }
        };
    for (id, value, skip) in known {
        leave_out(&mut sent, &mut left, id.clone(), Some(value), skip.reason.clone());
    }
    let mut listed = false;
    // What the refusals depend on: those known, until this push is refused.
    let mut on = known_grounds.cloned();
    // Each round takes at least one object out.
    let rounds = sent.services.len() + sent.frontends.len() + sent.backends.len();
    for round in 1..=rounds + 1 {
        calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let status = match client.resync(sent.request()).await {
            Ok(r) => {
                sent.skipped.sort();
                return Ok(Pushed {
                    response: r.into_inner(),
                    grounds: on.filter(|_| !left.is_empty()),
                    sent,
                    left_out: left,
                    rounds: round,
                });
            }
            Err(s) => s,
        };
        if !is_refusal(&status) {
            return Err(PushError::Unavailable(status_line(&status)));
        }
        if !listed {
            listed = true;
            let (now, others) = grounds(client).await?;
            // The known left-outs were refused on other grounds, if these
            // differ: not known for all then.
            on = match &on {
                Some(g) if *g != now && !known.is_empty() => None,
                None if !known.is_empty() => None,
                _ => Some(now),
            };
            let clashes = clashes(&sent, &others);
            if !clashes.is_empty() {
                for (id, reason) in clashes {
                    leave_out(&mut sent, &mut left, id, None, reason);
                }
                continue;
            }
        }
        match blamed(&sent, status.message()) {
            Some(id) => {
                // Without lbd's request index, which moves with every
                // other change, so that the same refusal reads the same.
                let why = unindexed(status.message());
                let reason = format!(
                    "lbd refused it: {}: {why}",
                    lb_control::cli::code_name(status.code())
                );
                leave_out(&mut sent, &mut left, id, None, reason);
            }
            None => return Err(PushError::Refused(status_line(&status))),
        }
    }
    Err(PushError::Refused("every object was refused".into()))
}

/// Whether lbd refused the request itself (a status it sent about the
/// request's content), as opposed to not answering.
fn is_refusal(s: &tonic::Status) -> bool {
    !lb_control::cli::is_local_failure(s)
        && matches!(
            s.code(),
            Code::InvalidArgument | Code::FailedPrecondition | Code::AlreadyExists | Code::NotFound
        )
}

/// `CODE: message` on one line.
pub(crate) fn status_line(s: &tonic::Status) -> String {
    if lb_control::cli::is_local_failure(s) {
        return lb_control::cli::error_line(s);
    }
    format!("{}: {}", lb_control::cli::code_name(s.code()), s.message())
}

/// The objects of every source but `k8s`.
async fn list_others(client: &mut LoadBalancerClient<Channel>) -> Result<pb::ListResponse, PushError> {
    let mut all = client
        .list(pb::ListRequest::default())
        .await
        .map_err(|s| PushError::Unavailable(status_line(&s)))?
        .into_inner();
    let k8s = pb::Source::K8s as i32;
    all.services.retain(|s| s.source != k8s);
    all.frontends.retain(|f| f.source != k8s);
    all.backends.retain(|b| b.source != k8s);
    Ok(all)
}

/// What in `sent` has the identity of an object of another source
/// (`others`), with why: a service of the same name (with its frontends
/// and backends), a frontend on the same address, port and protocol, a
/// backend with the same service, address and port.
pub fn clashes(sent: &Desired, others: &pb::ListResponse) -> Vec<(Ident, String)> {
    let source_of = |s: i32| {
        pb::Source::try_from(s)
            .map(|s| s.as_str_name().trim_start_matches("SOURCE_").to_ascii_lowercase())
            .unwrap_or_else(|_| s.to_string())
    };
    let services: BTreeMap<&str, i32> = others
        .services
        .iter()
        .map(|s| (s.name.as_str(), s.source))
        .collect();
    let frontends: BTreeMap<Ident, &pb::Frontend> =
        others.frontends.iter().map(|f| (frontend_ident(f), f)).collect();
    let backends: BTreeMap<Ident, i32> = others
        .backends
        .iter()
        .map(|b| (backend_ident(b), b.source))
        .collect();
    let mut out = Vec::new();
    let mut gone: BTreeSet<&str> = BTreeSet::new();
    for s in &sent.services {
        if let Some(&src) = services.get(s.name.as_str()) {
            out.push((
                Ident::Service(s.name.clone()),
                format!("a service of this name is source {}'s", source_of(src)),
            ));
            gone.insert(&s.name);
        }
    }
    for f in sent
        .frontends
        .iter()
        .filter(|f| !gone.contains(f.service.as_str()))
    {
        if let Some(o) = frontends.get(&frontend_ident(f)) {
            out.push((
                frontend_ident(f),
                format!(
                    "source {}'s (service {:?}) already",
                    source_of(o.source),
                    o.service
                ),
            ));
        }
    }
    for b in sent
        .backends
        .iter()
        .filter(|b| !gone.contains(b.service.as_str()))
    {
        if let Some(&src) = backends.get(&backend_ident(b)) {
            out.push((backend_ident(b), format!("source {}'s already", source_of(src))));
        }
    }
    out
}

/// The object of `sent` that lbd's error `message` is about. lbd names
/// it after the request index (`frontends[3] frontend 1.2.3.4:80/tcp:
/// ...`); but the index is of the last object the request wrote that the
/// rule involves, which need not be the object named (an unchanged
/// frontend's rule is blamed on a changed backend of its service), so the
/// name decides: a frontend a service-wide rule names (`... for frontend
/// F`), else the object named, else the one at the index. Names are lbd's
/// own ([`Change::object_name`]).
pub fn blamed(sent: &Desired, message: &str) -> Option<Ident> {
    let named = unindexed(message);
    // Frontends first: a service-wide rule names its frontend last.
    let objects = sent
        .frontends
        .iter()
        .filter_map(|f| {
            Some((
                frontend_ident(f),
                Change::UpsertFrontend(convert::frontend_from_proto(f).ok()?),
            ))
        })
        .chain(sent.backends.iter().filter_map(|b| {
            Some((
                backend_ident(b),
                Change::UpsertBackend(convert::backend_from_proto(b).ok()?),
            ))
        }))
        .chain(sent.services.iter().filter_map(|s| {
            Some((
                Ident::Service(s.name.clone()),
                Change::UpsertService(convert::service_from_proto(s).ok()?),
            ))
        }))
        .map(|(id, c)| (id, c.object_name()));
    let rule_of = named.split_once(" for ").map(|(_, after)| after);
    let mut about = None;
    for (id, name) in objects {
        if rule_of.is_some_and(|r| r.starts_with(name.as_str()) && matches!(id, Ident::Frontend(..))) {
            return Some(id);
        }
        if about.is_none()
            && named
                .strip_prefix(name.as_str())
                .is_some_and(|r| r.starts_with(':'))
        {
            about = Some(id);
        }
    }
    if about.is_some() {
        return about;
    }
    let (list, rest) = message.split_once('[')?;
    let index: usize = rest.split_once(']')?.0.parse().ok()?;
    match list {
        "services" => sent.services.get(index).map(|s| Ident::Service(s.name.clone())),
        "frontends" => sent.frontends.get(index).map(frontend_ident),
        "backends" => sent.backends.get(index).map(backend_ident),
        _ => None,
    }
}

/// lbd's `message` without its leading request index.
fn unindexed(message: &str) -> &str {
    for list in ["services[", "frontends[", "backends["] {
        if let Some(rest) = message.strip_prefix(list) {
            if let Some((_, after)) = rest.split_once("] ") {
                return after;
            }
        }
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desired() -> Desired {
        let svc = |n: &str| pb::Service {
            name: n.into(),
            ..Default::default()
        };
        Desired {
            services: vec![svc("default/a"), svc("default/b")],
            frontends: vec![
                pb::Frontend {
                    service: "default/a".into(),
                    address: "192.0.2.1".into(),
                    port: 80,
                    protocol: 1,
                    ..Default::default()
                },
                pb::Frontend {
                    service: "default/b".into(),
                    address: "fd00::2".into(),
                    port: 80,
                    protocol: 1,
                    ..Default::default()
                },
            ],
            backends: vec![pb::Backend {
                service: "default/a".into(),
                address: "10.0.0.5".into(),
                port: 8080,
                ..Default::default()
            }],
            skipped: vec![],
            origins: Default::default(),
            regarding: Default::default(),
        }
    }

    #[test]
    fn lbds_request_index_names_one_object() {
        let d = desired();
        assert_eq!(
            blamed(&d, "frontends[1] frontend [fd00::2]:80/tcp: address: no"),
            Some(Ident::Frontend("fd00::2".parse().ok(), 80, 1))
        );
        assert_eq!(
            blamed(&d, "backends[0] backend x: address: no"),
            Some(Ident::Backend("default/a".into(), "10.0.0.5".parse().ok(), 8080))
        );
        assert_eq!(
            blamed(&d, "services[1] service \"default/b\": mode"),
            Some(Ident::Service("default/b".into()))
        );
        assert_eq!(blamed(&d, "backends[9] out of range"), None);
        // The object named decides, not the index: a rule of frontend
        // [fd00::2] blamed on a backend of another service's request item.
        let fe = Some(Ident::Frontend("fd00::2".parse().ok(), 80, 1));
        let no_snat = "backends[0] frontend [fd00::2]:80/tcp: service: service \"default/b\" is full-NAT, \
                       and this node has no IPv6 SNAT address";
        assert_eq!(blamed(&d, no_snat), fe);
        let ranges = "backends[0] service \"default/b\": source_ranges: no IPv6 range for frontend \
                      [fd00::2]:80/tcp, so every client would be denied";
        assert_eq!(blamed(&d, ranges), fe);
        assert_eq!(
            blamed(
                &d,
                "frontends[0] backend 10.0.0.5:8080 of default/a: address: is lbd's own"
            ),
            Some(Ident::Backend("default/a".into(), "10.0.0.5".parse().ok(), 8080))
        );
        assert_eq!(
            blamed(&d, "backends[0] service \"default/b\": mode: no"),
            Some(Ident::Service("default/b".into()))
        );
        // Without an index, the object named.
        assert_eq!(blamed(&d, "frontend [fd00::2]:80/tcp: no index"), fe);
        assert_eq!(
            unindexed("frontends[12] frontend 1.2.3.4:80/tcp: x"),
            "frontend 1.2.3.4:80/tcp: x"
        );
        assert_eq!(
            unindexed("frontend 1.2.3.4:80/tcp: x"),
            "frontend 1.2.3.4:80/tcp: x"
        );
    }

    #[test]
    fn taking_out_a_frontend_or_backend_leaves_its_service() {
        let mut d = desired();
        let text = |t: Option<(String, Value)>| t.map(|(s, _)| s);
        let fe = Ident::Frontend("fd00::2".parse().ok(), 80, 1);
        // Only while it has the value given.
        let other = Value::Frontend(pb::Frontend::default(), None);
        assert_eq!(take_out(&mut d, &fe, Some(&other)), None);
        // Nor once its service has changed (another mode).
        let mut d2 = d.clone();
        let (_, v) = take_out(&mut d2, &fe, None).unwrap();
        let mut d3 = d.clone();
        d3.services[1].mode = pb::ForwardingMode::Dnat as i32;
        assert_eq!(take_out(&mut d3, &fe, Some(&v)), None);
        assert!(take_out(&mut d.clone(), &fe, Some(&v)).is_some());
        let f = text(take_out(&mut d, &fe, None));
        assert_eq!(f.as_deref(), Some("lbd service default/b frontend [fd00::2]:80"));
        assert_eq!(d.services.len(), 2);
        assert_eq!(d.frontends.len(), 1);
        let be = Ident::Backend("default/a".into(), "10.0.0.5".parse().ok(), 8080);
        let b = text(take_out(&mut d, &be, None));
        assert_eq!(b.as_deref(), Some("lbd service default/a backend 10.0.0.5:8080"));
        assert!(d.backends.is_empty());
        let svc = Ident::Service("default/a".into());
        assert_eq!(
            text(take_out(&mut d, &svc, None)).as_deref(),
            Some("lbd service default/a")
        );
        assert!(d.frontends.is_empty() && d.services.len() == 1);
        assert_eq!(take_out(&mut d, &svc, None), None);
    }
}
