//! The sidecar's loop: watch Services and EndpointSlices (kube's
//! reflectors, a local cache of each kind kept by list and watch), and
//! after a change, once the watches have settled for the debounce time,
//! map the whole cache ([`desired`]) and push it when it differs from what
//! was pushed last ([`push`]); a change waits at most [`MAX_HOLD`] (or
//! the debounce time) for quiet. Nothing is pushed before both kinds have
//! been listed once: an empty cache pushed at start would delete every
//! backend lbd has from Kubernetes. A push lbd did not take is tried again
//! with a growing delay (1 s doubling to 30 s), and every `resync` period
//! the state is pushed even unchanged, so that a `k8s` object deleted by
//! hand is put right (an lbd that restarted, perhaps without its state
//! file, is found sooner: its instance id, asked every `lbd_check`);
//! what the last push had to leave out is tried again then if lbd
//! restarted or another source's objects changed since it was refused
//! ([`Grounds`]): a conflict since resolved is put right, and an object
//! lbd keeps refusing costs one `GetInfo` and one `List` a period instead
//! of a refused `Resync` each.
//!
//! With node-port frontends, each mapping first asks lbd for its
//! interface and SNAT addresses (`GetInfo`): the node ports go on the
//! former but the latter
//! ([`node_addresses`]); lbd not answering is a failed push like any
//! other (counted, retried, and `/healthz` says so).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use lb_control::cli::{ClientTls, ServerAddr};
use lb_control::model::Cidr;
use lb_proto::v1 as pb;
use lb_proto::v1::load_balancer_client::LoadBalancerClient;
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::desired::{desired, Desired, FrontendKind, Options, Skip};
use crate::events::{self, Events};
use crate::metrics::SyncStats;
use crate::push::{push, Grounds, LeftOut, PushError, Pushed};

/// The longest a change waits for the watches to be quiet: a cluster
/// whose slices change more often than the debounce time is still pushed
/// this often (or every debounce time, if longer).
pub const MAX_HOLD: Duration = Duration::from_secs(2);

/// The periodic push tries everything, what lbd refused before included,
/// at least this often, even if nothing it knows of changed: a refusal
/// that depends on something the [`Grounds`] miss costs at most this.
pub const TRY_ALL_EVERY: Duration = Duration::from_secs(3600);

/// The first delay after a push lbd did not take.
pub const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest delay between tries.
pub const MAX_RETRY: Duration = Duration::from_secs(30);

/// Where lbd is and how to map and push.
#[derive(Debug, Clone)]
pub struct Settings {
    /// lbd's gRPC address.
    pub server: ServerAddr,
    /// TLS files for an `https://` server.
    pub tls: ClientTls,
    /// How long one call to lbd may take.
    pub timeout: Duration,
    /// The mapping's options ([`Options::node_addresses`] is filled from
    /// lbd's before each mapping).
    pub options: Options,
    /// Node ports go on lbd's addresses in these ranges, per family
    /// ([`node_addresses`]; empty: on all but its SNAT addresses).
    pub node_port_ranges: Vec<Cidr>,
    /// Watch only this namespace (`None`: all).
    pub namespace: Option<String>,
    /// Watch only Services with these labels (a label selector).
    pub selector: Option<String>,
    /// How long the watches must be quiet after a change before a push.
    pub debounce: Duration,
    /// Push the state at least this often, changed or not.
    pub resync: Duration,
    /// Ask lbd this often whether it restarted (its `GetInfo` instance
    /// id), and push at once if it did: an lbd that restarted without its
    /// state file has none of the cluster's objects until then.
    pub lbd_check: Duration,
    /// Where the loop counts.
    pub stats: Arc<SyncStats>,
    /// Create a Kubernetes Event for each skip ([`crate::events`]).
    pub events: bool,
}

/// What [`run`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Watch and push until shut down.
    Follow,
    /// Push once, when both kinds have been listed, and return.
    Once,
    /// Map once, when both kinds have been listed, and return the state
    /// without changing lbd (it asks lbd for its addresses only with
    /// node-port frontends).
    DryRun,
}

/// How [`run`] ended.
#[derive(Debug)]
pub enum Ended {
    /// Shut down (or `--once` done): the last push, if any.
    Stopped(Option<Pushed>),
    /// `--dry-run`: the state it would push.
    Mapped(Desired),
}

/// The watched caches, and the streams that keep them.
struct Watches<S1, S2> {
    services: Store<Service>,
    slices: Store<EndpointSlice>,
    service_events: S1,
    slice_events: S2,
}

/// Starts the watches (nothing runs until the streams are polled).
fn watches(
    client: &Client,
    settings: &Settings,
) -> Watches<
    impl Stream<Item = Result<watcher::Event<Service>, watcher::Error>> + Unpin,
    impl Stream<Item = Result<watcher::Event<EndpointSlice>, watcher::Error>> + Unpin,
> {
    let (services, svc_writer) = reflector::store::<Service>();
    let (slices, slice_writer) = reflector::store::<EndpointSlice>();
    let (svc_api, slice_api): (Api<Service>, Api<EndpointSlice>) = match &settings.namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let mut svc_cfg = watcher::Config::default();
    if let Some(sel) = &settings.selector {
        svc_cfg = svc_cfg.labels(sel);
    }
    // Only slices that belong to a Service.
    let slice_cfg = watcher::Config::default().labels(crate::desired::SERVICE_NAME_LABEL);
    let service_events =
        reflector::reflector(svc_writer, watcher(svc_api, svc_cfg).default_backoff()).boxed();
    let slice_events =
        reflector::reflector(slice_writer, watcher(slice_api, slice_cfg).default_backoff()).boxed();
    Watches {
        services,
        slices,
        service_events,
        slice_events,
    }
}

/// What one watch event did.
enum Noted {
    /// The cache changed (or its list completed).
    Changed,
    /// Nothing to push.
    Nothing,
    /// The watch failed; the watcher lists and watches again by itself,
    /// after a backoff, and the cache keeps what it had meanwhile.
    Failed(String),
}

/// Notes one watch event of `what`; `ready` becomes true when the kind's
/// list is complete.
fn note<K>(
    what: &str,
    ev: Option<Result<watcher::Event<K>, watcher::Error>>,
    ready: &mut bool,
    stats: &SyncStats,
    kind: usize,
) -> Noted {
    use std::sync::atomic::Ordering::Relaxed;
    stats.watch_failing[kind].store(matches!(ev, Some(Err(_))), Relaxed);
    match ev {
        Some(Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_))) => Noted::Changed,
        Some(Ok(watcher::Event::InitDone)) => {
            if !*ready {
                tracing::info!("{what}: listed");
            }
            *ready = true;
            Noted::Changed
        }
        Some(Ok(watcher::Event::Init | watcher::Event::InitApply(_))) | None => Noted::Nothing,
        Some(Err(e)) => {
            let errors = [&stats.service_watch_errors, &stats.slice_watch_errors][kind];
            errors.fetch_add(1, Relaxed);
            Noted::Failed(format!("{what}: {}", lb_control::cli::error_line(&e)))
        }
    }
}

/// Maps the caches; `previous`: the last state pushed (see [`desired`]).
fn map(
    services: &Store<Service>,
    slices: &Store<EndpointSlice>,
    opts: &Options,
    previous: Option<&Desired>,
) -> Desired {
    let svc: Vec<Arc<Service>> = services.state();
    let sl: Vec<Arc<EndpointSlice>> = slices.state();
    desired(
        svc.iter().map(|s| s.as_ref()),
        sl.iter().map(|s| s.as_ref()),
        opts,
        previous,
    )
}

/// Runs until `shutdown` (or, in the other modes, the one push or map).
pub async fn run(
    client: Client,
    settings: &Settings,
    mode: Mode,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<Ended> {
    let Watches {
        services,
        slices,
        mut service_events,
        mut slice_events,
    } = watches(&client, settings);
    tokio::pin!(shutdown);
    let (mut svc_ready, mut slice_ready) = (false, false);
    let mut st = Pushes {
        events: settings.events.then(|| {
            Events::new(
                client.clone(),
                events::instance_name(),
                Arc::clone(&settings.stats),
            )
        }),
        ..Pushes::default()
    };
    let mut dirty = false;
    // When the watches last changed the caches, and when the first change
    // not pushed yet came.
    let mut changed_at = Instant::now();
    let mut held_since = Instant::now();
    let hold = MAX_HOLD.max(settings.debounce);
    let mut periodic = tokio::time::interval_at(Instant::now() + settings.resync, settings.resync);
    let mut lbd_check = tokio::time::interval_at(Instant::now() + settings.lbd_check, settings.lbd_check);
    lbd_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let ready = svc_ready && slice_ready;
        settings
            .stats
            .listed
            .store(ready, std::sync::atomic::Ordering::Relaxed);
        let due = (changed_at + settings.debounce)
            .min(held_since + hold)
            .max(st.not_before);
        let noted = tokio::select! {
            ev = service_events.next() => note("Services", ev, &mut svc_ready, &settings.stats, 0),
            ev = slice_events.next() => note("EndpointSlices", ev, &mut slice_ready, &settings.stats, 1),
            _ = periodic.tick() => {
                st.force = true;
                Noted::Changed
            }
            // Only once something was pushed (until then every change is),
            // and not while a forced push waits (it notes the instance).
            _ = lbd_check.tick(), if mode == Mode::Follow && st.instance.is_some() && !st.force => {
                let restarted = tokio::select! {
                    r = st.lbd_restarted(settings) => r,
                    () = &mut shutdown => return Ok(Ended::Stopped(st.last_pushed)),
                };
                if restarted {
                    st.force = true;
                    Noted::Changed
                } else {
                    Noted::Nothing
                }
            }
            () = &mut shutdown => return Ok(Ended::Stopped(st.last_pushed)),
            () = tokio::time::sleep_until(due), if ready && dirty => {
                dirty = false;
                let step = async {
                    let opts = st.options(settings).await?;
                    let d = map(&services, &slices, &opts, st.last_pushed.as_ref().map(|p| &p.sent));
                    if mode == Mode::DryRun {
                        return Ok(Err(d));
                    }
                    st.push(settings, d).await.map(Ok)
                };
                let pushed = tokio::select! {
                    r = step => match r {
                        Ok(Err(d)) => return Ok(Ended::Mapped(d)),
                        Ok(Ok(pushed)) => Ok(pushed),
                        Err(e) => Err(e),
                    },
                    // One push can take a connection and several calls:
                    // a stop does not wait for them.
                    () = &mut shutdown => return Ok(Ended::Stopped(st.last_pushed)),
                };
                match pushed {
                    Ok(true) if mode == Mode::Once => return Ok(Ended::Stopped(st.last_pushed)),
                    Ok(_) => {}
                    Err(e) if mode != Mode::Follow => return Err(e.into()),
                    Err(e) => {
                        tracing::error!("{e}; trying again in {} s", st.retry.as_secs());
                        st.failed(&e);
                        // Tried again at `not_before`.
                        dirty = true;
                    }
                }
                Noted::Nothing
            }
        };
        match noted {
            Noted::Changed => {
                if !dirty {
                    held_since = Instant::now();
                }
                dirty = true;
                changed_at = Instant::now();
            }
            Noted::Nothing => {}
            // A run that is to list once and end cannot wait for a Kubernetes
            // API that is not there (a wrong kubeconfig, no permission to
            // list): it says so and ends.
            Noted::Failed(e) if mode != Mode::Follow && !(svc_ready && slice_ready) => {
                anyhow::bail!("cannot list and watch {e}")
            }
            Noted::Failed(e) => tracing::warn!("watch failed, retrying: {e}"),
        }
    }
}

/// What the loop knows of its pushes.
#[derive(Debug)]
struct Pushes {
    /// Push even a state equal to the last (the periodic push, which also
    /// tries again what the last push left out, if its grounds changed).
    force: bool,
    /// The last state lbd took, as mapped (before any narrowing); `None`
    /// after a failure, since lbd may have committed what it did not
    /// answer.
    last: Option<Desired>,
    /// The last push lbd took.
    last_pushed: Option<Pushed>,
    /// The skips logged, so each is logged once.
    logged_skips: BTreeSet<Skip>,
    /// Where skips are published as Kubernetes Events, if they are.
    events: Option<Events>,
    /// When a push last tried everything, left-outs included.
    tried_all: Instant,
    /// The skips of the last push taken whose Event was made (or refused
    /// for good), and when: made again after [`events::REFRESH`].
    evented: BTreeMap<Skip, Instant>,
    /// The connection to lbd.
    lbd: Option<LoadBalancerClient<Channel>>,
    /// The lbd instance the last push went to, as far as known.
    instance: Option<String>,
    /// The node-port addresses of the last mapping, to log a change.
    node_addresses: Option<Vec<IpAddr>>,
    /// The delay after the next failure, and no push before `not_before`.
    retry: Duration,
    not_before: Instant,
}

impl Default for Pushes {
    fn default() -> Pushes {
        Pushes {
            force: false,
            last: None,
            last_pushed: None,
            logged_skips: BTreeSet::new(),
            events: None,
            evented: BTreeMap::new(),
            tried_all: Instant::now(),
            lbd: None,
            instance: None,
            node_addresses: None,
            retry: FIRST_RETRY,
            not_before: Instant::now(),
        }
    }
}

impl Pushes {
    /// The mapping's options, with lbd's node-port addresses if node ports
    /// are mapped (asked of lbd: a connection if there is none).
    async fn options(&mut self, settings: &Settings) -> Result<Options, PushError> {
        let mut opts = settings.options.clone();
        if !opts.types.contains(&FrontendKind::NodePort) {
            return Ok(opts);
        }
        let info = async {
            let client = connected(&mut self.lbd, settings).await?;
            match client.get_info(pb::GetInfoRequest {}).await {
                Ok(r) => Ok(r.into_inner()),
                Err(s) if lb_control::cli::is_local_failure(&s) => {
                    Err(PushError::Unavailable(lb_control::cli::error_line(&s)))
                }
                Err(s) => Err(PushError::NoAddresses(crate::push::status_line(&s))),
            }
        };
        let info = info
            .await
            .inspect_err(|e| settings.stats.failed(false, &e.to_string()))?;
        opts.node_addresses = node_addresses(&info, &settings.node_port_ranges);
        if self.node_addresses.as_ref() != Some(&opts.node_addresses) {
            if info.ports.iter().all(|p| p.addresses.is_empty()) {
                tracing::warn!(
                    "lbd reports no addresses of its own (an lbd older than lb-k8s-sync?): no node-port frontends"
                );
            } else if opts.node_addresses.is_empty() {
                tracing::warn!(
                    "none of lbd's addresses is in --node-port-addresses (or each is an SNAT address): no node-port frontends"
                );
            } else {
                let list: Vec<String> = opts.node_addresses.iter().map(ToString::to_string).collect();
                tracing::info!("node ports on lbd's addresses {}", list.join(", "));
            }
            self.node_addresses = Some(opts.node_addresses.clone());
        }
        Ok(opts)
    }

    /// Pushes `d` unless it is the last state lbd took (and not forced);
    /// returns whether it pushed.
    async fn push(&mut self, settings: &Settings, d: Desired) -> Result<bool, PushError> {
        if !self.force && self.last.as_ref() == Some(&d) {
            return Ok(false);
        }
        log_skips(&d.skipped, &mut self.logged_skips);
        // The last push's left-outs are left out again; the periodic push
        // tries them again if what their refusals depended on changed
        // since (lbd restarted, another source's objects changed) or is
        // not known.
        // (`tries_all`: this push tries everything; noted when lbd takes
        // it, so a failed hourly try is made again.)
        let (known, grounds, tries_all) = match (&self.last_pushed, self.force) {
            (Some(p), false) => (p.left_out.clone(), p.grounds.clone(), false),
            (Some(p), true)
                if !p.left_out.is_empty()
                    && p.grounds.is_some()
                    && self.tried_all.elapsed() < TRY_ALL_EVERY =>
            {
                let now = match connected(&mut self.lbd, settings).await {
                    Ok(client) => crate::push::grounds(client).await.ok().map(|(g, _)| g),
                    Err(_) => None,
                };
                if now.is_some() && now == p.grounds {
                    (p.left_out.clone(), now, false)
                } else {
                    (Vec::new(), None, true)
                }
            }
            _ => (Vec::new(), None, true),
        };
        // The instance it goes to (a restart between this and the push
        // costs one push more, at the next check).
        let instance = self.instance_id(settings).await;
        let p = push_once(&mut self.lbd, settings, &d, &known, grounds.as_ref()).await;
        let p = p.inspect_err(|e| {
            settings
                .stats
                .failed(matches!(e, PushError::Refused(_)), &e.to_string())
        })?;
        settings.stats.pushed(&p);
        report(&p, self.last.is_none());
        log_skips(&p.sent.skipped, &mut self.logged_skips);
        // (`push` sorts them.)
        self.logged_skips
            .retain(|s| p.sent.skipped.binary_search(s).is_ok());
        let skipped = p.sent.skipped.clone();
        if tries_all {
            self.tried_all = Instant::now();
        }
        self.instance = instance.or_else(|| self.instance.take());
        self.force = false;
        self.retry = FIRST_RETRY;
        self.last = Some(d);
        self.last_pushed = Some(p);
        if let Some(events) = &self.events {
            // Each skip of a push lbd took: once, and again when its Event
            // is old enough that the API server may have let it expire.
            self.evented
                .retain(|s, at| skipped.binary_search(s).is_ok() && at.elapsed() < events::REFRESH);
            let due: Vec<Skip> = skipped
                .into_iter()
                .filter(|s| !self.evented.contains_key(s))
                .collect();
            let now = Instant::now();
            for s in events.publish(&due).await {
                self.evented.insert(s, now);
            }
        }
        Ok(true)
    }

    /// lbd's instance id, if it answers `GetInfo` within half the check
    /// interval (at least 1 s, at most `--timeout`); a new connection next
    /// time if it did not answer.
    async fn instance_id(&mut self, settings: &Settings) -> Option<String> {
        let ask = async {
            let client = connected(&mut self.lbd, settings).await.ok()?;
            Some(client.get_info(pb::GetInfoRequest {}).await)
        };
        let limit = (settings.lbd_check / 2)
            .max(Duration::from_secs(1))
            .min(settings.timeout);
        match tokio::time::timeout(limit, ask).await {
            Ok(Some(Ok(r))) => Some(r.into_inner().instance_id),
            // lbd answered, with an error: the connection is good.
            Ok(Some(Err(s))) if !lb_control::cli::is_local_failure(&s) => None,
            _ => {
                self.lbd = None;
                None
            }
        }
    }

    /// Whether lbd answers with another instance than the last push went
    /// to: it restarted.
    async fn lbd_restarted(&mut self, settings: &Settings) -> bool {
        match (self.instance_id(settings).await, &self.instance) {
            (Some(now), Some(then)) if now != *then => {
                tracing::info!("lbd restarted (instance {now}): pushing the state again");
                true
            }
            _ => false,
        }
    }

    /// After a push that failed: a new connection if lbd did not answer,
    /// the next try after the retry delay, which doubles.
    fn failed(&mut self, e: &PushError) {
        if matches!(e, PushError::Unavailable(_)) {
            self.lbd = None;
        }
        self.last = None;
        self.not_before = Instant::now() + self.retry;
        self.retry = (self.retry * 2).min(MAX_RETRY);
    }
}

/// The connection to lbd, made if there is none.
async fn connected<'c>(
    lbd: &'c mut Option<LoadBalancerClient<Channel>>,
    settings: &Settings,
) -> Result<&'c mut LoadBalancerClient<Channel>, PushError> {
    if lbd.is_none() {
        let c = lb_control::cli::connect(&settings.server, &settings.tls, settings.timeout)
            .await
            .map_err(|e| PushError::Unavailable(lb_control::cli::error_line(&e)))?;
        *lbd = Some(c);
    }
    Ok(lbd.as_mut().expect("connected above"))
}

/// Connects when not connected, and pushes.
async fn push_once(
    lbd: &mut Option<LoadBalancerClient<Channel>>,
    settings: &Settings,
    d: &Desired,
    known: &LeftOut,
    grounds: Option<&Grounds>,
) -> Result<Pushed, PushError> {
    let client = connected(lbd, settings).await?;
    push(client, d, known, grounds, &settings.stats.resync_calls).await
}

/// The addresses node ports go on: lbd's ports' addresses (`GetInfo`) in
/// `ranges`, in port order, without repeats, and none of lbd's SNAT
/// addresses (lbd takes no frontend there). As kube-proxy's
/// `--nodeport-addresses`, per family: an address of a family no range
/// has is taken (no range at all: every address).
pub fn node_addresses(info: &pb::GetInfoResponse, ranges: &[Cidr]) -> Vec<IpAddr> {
    let parse = |a: &String| a.split('/').next()?.parse::<IpAddr>().ok();
    let snat: Vec<IpAddr> = info.snat_addresses.iter().filter_map(parse).collect();
    let mut out: Vec<IpAddr> = Vec::new();
    // `10.0.0.1/24`: the address with its prefix length.
    for addr in info.ports.iter().flat_map(|p| &p.addresses).filter_map(parse) {
        let of_family = |r: &&Cidr| r.0.addr().is_ipv6() == addr.is_ipv6();
        let mut family = ranges.iter().filter(of_family).peekable();
        let in_ranges = family.peek().is_none() || family.any(|r| r.0.contains(addr));
        if in_ranges && !snat.contains(&addr) && !out.contains(&addr) {
            out.push(addr);
        }
    }
    out
}

/// Logs what lbd committed.
fn report(p: &Pushed, first: bool) {
    let r = &p.response;
    if first || r.added + r.updated + r.removed > 0 {
        tracing::info!(
            revision = r.revision,
            added = r.added,
            updated = r.updated,
            removed = r.removed,
            services = p.sent.services.len(),
            frontends = p.sent.frontends.len(),
            backends = p.sent.backends.len(),
            skipped = p.sent.skipped.len(),
            rounds = p.rounds,
            "pushed to lbd"
        );
    }
}

/// Logs each skip the first time it is seen (and forgets those no longer
/// there, so one that comes back is logged again).
fn log_skips(skipped: &[Skip], logged: &mut BTreeSet<Skip>) {
    for s in skipped {
        if logged.insert(s.clone()) {
            tracing::warn!("skipped {s}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(addresses: &[&[&str]], snat: &[&str]) -> pb::GetInfoResponse {
        pb::GetInfoResponse {
            ports: addresses
                .iter()
                .map(|a| pb::PortInfo {
                    addresses: a.iter().map(|s| s.to_string()).collect(),
                    ..Default::default()
                })
                .collect(),
            snat_addresses: snat.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn addrs(v: &[&str]) -> Vec<IpAddr> {
        v.iter().map(|a| a.parse().unwrap()).collect()
    }

    fn cidrs(v: &[&str]) -> Vec<Cidr> {
        v.iter().map(|c| c.parse().unwrap()).collect()
    }

    #[test]
    fn node_addresses_are_lbds_in_the_ranges_per_family_and_not_snat() {
        let i = info(
            &[
                &["10.0.0.1/24", "2001:db8::1/64"],
                &["10.1.0.1/24", "10.0.0.1/24", "2001:db8:1::1/64"],
            ],
            &["10.1.0.1"],
        );
        // All but the SNAT address, in port order, once each.
        assert_eq!(
            node_addresses(&i, &[]),
            addrs(&["10.0.0.1", "2001:db8::1", "2001:db8:1::1"])
        );
        // An IPv4 range leaves the IPv6 addresses alone (kube-proxy's
        // per-family rule), and the other way round.
        assert_eq!(
            node_addresses(&i, &cidrs(&["10.0.0.0/24"])),
            addrs(&["10.0.0.1", "2001:db8::1", "2001:db8:1::1"])
        );
        assert_eq!(
            node_addresses(&i, &cidrs(&["10.9.0.0/16", "2001:db8:1::/64"])),
            addrs(&["2001:db8:1::1"])
        );
        assert!(node_addresses(&info(&[&[]], &[]), &[]).is_empty());
    }
}
