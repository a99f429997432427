//! What the sidecar counts, and its Prometheus endpoint
//! (`--metrics IP:PORT`, served by lb-control's
//! [`MetricsListener`](lb_control::metrics::MetricsListener)):
//! `GET /metrics`, and `GET /healthz` for the pod's probes, 200 once both
//! kinds are listed and the last push was taken, else 503 with the reason.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use hyper::body::Bytes;
use lb_control::metrics::{Exporter, Exposition};

use crate::push::Pushed;

/// The sidecar's counters, shared by the loop and the endpoint.
#[derive(Debug, Default)]
pub struct SyncStats {
    /// Pushes lbd took.
    pub pushes: AtomicU64,
    /// Pushes lbd did not answer (connection, deadline).
    pub unavailable: AtomicU64,
    /// Pushes lbd refused whole.
    pub refused: AtomicU64,
    /// `Resync` calls, the narrowing's included.
    pub resync_calls: AtomicU64,
    /// Failed Service watches (listed and watched again after a backoff).
    pub service_watch_errors: AtomicU64,
    /// Failed EndpointSlice watches.
    pub slice_watch_errors: AtomicU64,
    /// Kubernetes Events created for skips.
    pub events_sent: AtomicU64,
    /// Kubernetes Events the API refused (or did not answer in time).
    pub events_failed: AtomicU64,
    /// Both kinds have been listed.
    pub listed: AtomicBool,
    /// The last event of the Service watch, and of the EndpointSlice
    /// watch, was a failure (set until the next event that is not).
    pub watch_failing: [AtomicBool; 2],
    last: Mutex<Last>,
}

/// The last push, and the last failure since.
#[derive(Debug, Default, Clone)]
struct Last {
    services: u64,
    frontends: u64,
    backends: u64,
    skipped: u64,
    revision: u64,
    /// Seconds since the epoch; 0: none yet.
    at: u64,
    /// Why the last attempt failed, if it did.
    error: Option<String>,
}

impl SyncStats {
    /// Records a push lbd took.
    pub fn pushed(&self, p: &Pushed) {
        self.pushes.fetch_add(1, Ordering::Relaxed);
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if let Ok(mut l) = self.last.lock() {
            *l = Last {
                services: p.sent.services.len() as u64,
                frontends: p.sent.frontends.len() as u64,
                backends: p.sent.backends.len() as u64,
                skipped: p.sent.skipped.len() as u64,
                revision: p.response.revision,
                at,
                error: None,
            };
        }
    }

    /// Records a push that failed: `refused` (lbd refused it whole) or not
    /// answered.
    pub fn failed(&self, refused: bool, why: &str) {
        let c = if refused { &self.refused } else { &self.unavailable };
        c.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut l) = self.last.lock() {
            l.error = Some(why.to_string());
        }
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let last = self.last.lock().map(|l| l.clone()).unwrap_or_default();
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut out = Exposition::default();
        out.one(
            "lb_k8s_sync_pushes_total",
            "counter",
            "Pushes (Resyncs of source k8s) lbd took.",
            get(&self.pushes),
        );
        // A family with one label, a sample for each value.
        let mut labelled = |name: &str, kind: &str, help: &str, label: &str, samples: &[(&str, u64)]| {
            out.family(name, kind, help);
            for (value, n) in samples {
                out.sample(name, &[(label, value)], n);
            }
        };
        labelled(
            "lb_k8s_sync_push_failures_total",
            "counter",
            "Pushes lbd did not take: unavailable (not answered, or an lbd error that is no refusal; retried), refused (refused whole; retried).",
            "reason",
            &[("unavailable", get(&self.unavailable)), ("refused", get(&self.refused))],
        );
        labelled(
            "lb_k8s_sync_watch_errors_total",
            "counter",
            "Failed watches, listed and watched again after a backoff.",
            "kind",
            &[
                ("services", get(&self.service_watch_errors)),
                ("endpointslices", get(&self.slice_watch_errors)),
            ],
        );
        labelled(
            "lb_k8s_sync_events_total",
            "counter",
            "Kubernetes Events for skips: sent, failed (refused, e.g. no permission, or not answered in time).",
            "result",
            &[("sent", get(&self.events_sent)), ("failed", get(&self.events_failed))],
        );
        labelled(
            "lb_k8s_sync_objects",
            "gauge",
            "Objects in the last push, by kind.",
            "kind",
            &[
                ("services", last.services),
                ("frontends", last.frontends),
                ("backends", last.backends),
            ],
        );
        out.one(
            "lb_k8s_sync_resync_calls_total",
            "counter",
            "Resync calls, those that left out what lbd refused included.",
            get(&self.resync_calls),
        );
        out.one(
            "lb_k8s_sync_listed",
            "gauge",
            "1 once Services and EndpointSlices have both been listed (nothing is pushed before).",
            u8::from(self.listed.load(Ordering::Relaxed)),
        );
        out.one(
            "lb_k8s_sync_skipped_objects",
            "gauge",
            "What the last push left out (not mappable, another source's, refused by lbd); the log says why.",
            last.skipped,
        );
        out.one(
            "lb_k8s_sync_last_push_revision",
            "gauge",
            "lbd's revision after the last push.",
            last.revision,
        );
        out.one(
            "lb_k8s_sync_last_push_timestamp_seconds",
            "gauge",
            "When the last push was taken (seconds since the epoch; 0: none yet).",
            last.at,
        );
        out.finish()
    }

    /// Healthy: listed, neither watch failing, and the last push taken.
    pub fn health(&self) -> Result<(), String> {
        if !self.listed.load(Ordering::Relaxed) {
            return Err("Services and EndpointSlices not listed yet".into());
        }
        for (i, kind) in ["Services", "EndpointSlices"].iter().enumerate() {
            if self.watch_failing[i].load(Ordering::Relaxed) {
                return Err(format!("the {kind} watch is failing (the log says why)"));
            }
        }
        let last = self.last.lock().map(|l| l.clone()).unwrap_or_default();
        match (last.error, last.at) {
            (Some(e), _) => Err(format!("the last push failed: {e}")),
            (None, 0) => Err("nothing pushed yet".into()),
            (None, _) => Ok(()),
        }
    }
}

/// The endpoint's view of the counters.
#[derive(Debug, Clone)]
pub struct Endpoint(pub Arc<SyncStats>);

impl Exporter for Endpoint {
    const NAME: &'static str = "lb-k8s-sync";

    async fn metrics(&self, _since: Instant) -> Result<Bytes, String> {
        Ok(Bytes::from(self.0.render()))
    }

    async fn health(&self) -> Result<(), String> {
        self.0.health()
    }
}
