//! One push of the desired state into lbd: a `Resync` of source `k8s`,
//! which lbd applies whole or not at all. So that one object lbd refuses
//! does not hold back every other update of the cluster, a refused resync
//! is narrowed and sent again: objects another source owns (an operator's
//! service of the same name, a frontend the config file declares) are left
//! out, found with one `List`; then an object lbd names by its request
//! index (`frontends[3] ...`: a VIP that is lbd's own interface address,
//! say) takes its lbd service out. Each left-out object is a [`Skip`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use lb_proto::v1 as pb;
use lb_proto::v1::load_balancer_client::LoadBalancerClient;
use tonic::transport::Channel;
use tonic::Code;

use crate::desired::{Desired, Skip};

/// How many refused resyncs one push narrows before it gives up.
pub const MAX_NARROWING: usize = 16;

/// What a push committed.
#[derive(Debug, Clone, PartialEq)]
pub struct Pushed {
    /// lbd's answer.
    pub response: pb::ResyncResponse,
    /// What was sent, with what had to be left out among its skips.
    pub sent: Desired,
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
}

/// Sends `desired` to lbd as a `Resync` of source `k8s`, narrowed as the
/// module doc says until lbd takes it.
pub async fn push(client: &mut LoadBalancerClient<Channel>, desired: &Desired) -> Result<Pushed, PushError> {
    let mut sent = desired.clone();
    let mut listed = false;
    for _ in 0..=MAX_NARROWING {
        let status = match client.resync(sent.request()).await {
            Ok(r) => {
                return Ok(Pushed {
                    response: r.into_inner(),
                    sent,
                })
            }
            Err(s) => s,
        };
        if !is_refusal(&status) {
            return Err(PushError::Unavailable(status_line(&status)));
        }
        if !listed {
            listed = true;
            let others = list_others(client).await?;
            if leave_out_others(&mut sent, &others) {
                continue;
            }
        }
        match blamed_service(&sent, status.message()) {
            Some(name) => {
                let why = status_line(&status);
                sent.without(&[name].into(), |_| format!("lbd refused it: {why}"));
            }
            None => return Err(PushError::Refused(status_line(&status))),
        }
    }
    Err(PushError::Refused(format!(
        "still refused after leaving out {MAX_NARROWING} services"
    )))
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
fn status_line(s: &tonic::Status) -> String {
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

/// Leaves out of `sent` what has the identity of an object of another
/// source (`others`): a service of the same name (with its frontends and
/// backends), a frontend on the same address, port and protocol, a backend
/// with the same service, address and port. Returns whether anything was.
pub fn leave_out_others(sent: &mut Desired, others: &pb::ListResponse) -> bool {
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
    let names: BTreeSet<String> = sent
        .services
        .iter()
        .filter(|s| services.contains_key(s.name.as_str()))
        .map(|s| s.name.clone())
        .collect();
    let before = sent.skipped.len();
    sent.without(&names, |n| {
        format!("a service of this name is source {}'s", source_of(services[n]))
    });
    let fe_key = |f: &pb::Frontend| (f.address.parse::<IpAddr>().ok(), f.port, f.protocol);
    let frontends: BTreeMap<_, &pb::Frontend> = others.frontends.iter().map(|f| (fe_key(f), f)).collect();
    let mut skipped = Vec::new();
    sent.frontends.retain(|f| match frontends.get(&fe_key(f)) {
        Some(o) => {
            skipped.push(Skip {
                object: format!("lbd service {} frontend {}:{}", f.service, f.address, f.port),
                reason: format!(
                    "source {}'s (service {:?}) already",
                    source_of(o.source),
                    o.service
                ),
            });
            false
        }
        None => true,
    });
    let be_key = |b: &pb::Backend| (b.service.clone(), b.address.parse::<IpAddr>().ok(), b.port);
    let backends: BTreeMap<_, i32> = others.backends.iter().map(|b| (be_key(b), b.source)).collect();
    sent.backends.retain(|b| match backends.get(&be_key(b)) {
        Some(&s) => {
            skipped.push(Skip {
                object: format!("lbd service {} backend {}:{}", b.service, b.address, b.port),
                reason: format!("source {}'s already", source_of(s)),
            });
            false
        }
        None => true,
    });
    sent.skipped.extend(skipped);
    sent.skipped.sort();
    sent.skipped.len() > before
}

/// The lbd service of the object lbd's error `message` names by its
/// request index (`services[2] ...`, `frontends[0] ...`,
/// `backends[17] ...`), if it names one that `sent` has.
pub fn blamed_service(sent: &Desired, message: &str) -> Option<String> {
    let (list, rest) = message.split_once('[')?;
    let index: usize = rest.split_once(']')?.0.parse().ok()?;
    match list {
        "services" => sent.services.get(index).map(|s| s.name.clone()),
        "frontends" => sent.frontends.get(index).map(|f| f.service.clone()),
        "backends" => sent.backends.get(index).map(|b| b.service.clone()),
        _ => None,
    }
}
