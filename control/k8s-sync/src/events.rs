//! Kubernetes Events for what the sidecar skips: a `Warning` of reason
//! [`REASON`] on the Service (or EndpointSlice) a skip is about, with the
//! skip's text as its note, so that `kubectl describe service` says why
//! lbd does not balance it (or part of it) without a look at the
//! sidecar's log.
//!
//! One Event each time a skip appears (as the log line), and again every
//! [`REFRESH`] while it lasts (the API server deletes Events after an
//! hour by default), at most [`MAX_PER_PUSH`] a push (the rest at the next
//! pushes); an Event the API refuses (no `create` permission on
//! `events.k8s.io` events, a namespace being deleted) is counted and
//! logged, once as a warning, not tried again before [`REFRESH`], and
//! changes nothing else: the push has been made.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;

use crate::desired::{Regarding, Skip};
use crate::metrics::SyncStats;

/// The Events' reason (`kubectl describe`'s `Reason` column).
pub const REASON: &str = "NotBalancedByLbd";

/// The Events' reporting controller.
pub const CONTROLLER: &str = "lbd.io/lb-k8s-sync";

/// The most Events one push sends: a cluster where thousands of objects
/// are skipped at once (a wrong flag) does not flood its API server; the
/// log has them all.
pub const MAX_PER_PUSH: usize = 50;

/// How long one push's Events may take in all.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// How often the Event of a skip that lasts is made again: within the
/// API server's default `--event-ttl` of an hour, so `kubectl describe`
/// keeps showing it (at the first push after, the periodic one at the
/// latest).
pub const REFRESH: Duration = Duration::from_secs(30 * 60);

/// The longest reporting instance the API takes.
const MAX_INSTANCE: usize = 128;

/// The longest note the API takes is 1 kB.
const MAX_NOTE: usize = 1024;

/// Publishes Events for skips.
#[derive(Clone)]
pub struct Events {
    client: Client,
    /// The reporting instance: this sidecar (its pod's or host's name).
    instance: String,
    stats: Arc<SyncStats>,
    /// Whether a refusal was logged as a warning already.
    warned: Arc<AtomicBool>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl Events {
    /// Events through `client`, reported by `instance`, counted in `stats`.
    pub fn new(client: Client, instance: String, stats: Arc<SyncStats>) -> Events {
        Events {
            client,
            instance,
            stats,
            warned: Arc::default(),
        }
    }

    /// One Event for each of `skips` that regards an object, the first
    /// [`MAX_PER_PUSH`], within [`TIMEOUT`]. Returns those done with: made,
    /// refused by the API, or about no object; the others (past the cap or
    /// the time, or not answered) are for the next push.
    pub async fn publish(&self, skips: &[Skip]) -> Vec<Skip> {
        let mut done: Vec<Skip> = skips.iter().filter(|s| s.regarding.is_none()).cloned().collect();
        let with_object: Vec<(&Skip, &Regarding)> = skips
            .iter()
            .filter_map(|s| Some((s, s.regarding.as_ref()?)))
            .collect();
        if with_object.len() > MAX_PER_PUSH {
            tracing::info!(
                "{} skips wait for the next push to become Kubernetes Events (at most {MAX_PER_PUSH} a push)",
                with_object.len() - MAX_PER_PUSH
            );
        }
        let all = async {
            for (skip, regarding) in with_object.into_iter().take(MAX_PER_PUSH) {
                if self.publish_one(skip, regarding).await {
                    done.push(skip.clone());
                }
            }
        };
        if tokio::time::timeout(TIMEOUT, all).await.is_err() {
            self.failed(&format!(
                "the Kubernetes API took over {} s (the rest at the next push)",
                TIMEOUT.as_secs()
            ));
        }
        done
    }

    /// Whether it is done with: made, or refused for good (a client error
    /// status: not 429, which asks to come back, nor a server error).
    async fn publish_one(&self, skip: &Skip, regarding: &Regarding) -> bool {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &regarding.namespace);
        match api
            .create(&PostParams::default(), &event(skip, regarding, &self.instance))
            .await
        {
            Ok(_) => {
                self.stats.events_sent.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(e) => {
                self.failed(&lb_control::cli::error_line(&e));
                matches!(&e, kube::Error::Api(s) if (400..500).contains(&s.code) && s.code != 429)
            }
        }
    }

    fn failed(&self, why: &str) {
        self.stats.events_failed.fetch_add(1, Ordering::Relaxed);
        if self.warned.swap(true, Ordering::Relaxed) {
            tracing::debug!("cannot create a Kubernetes Event: {why}");
        } else {
            tracing::warn!(
                "cannot create a Kubernetes Event (it needs create on events.k8s.io events; --no-events turns them off): {why}"
            );
        }
    }
}

/// The Event of `skip`, about `regarding`, reported by `instance`.
pub fn event(skip: &Skip, regarding: &Regarding, instance: &str) -> Event {
    let now = Timestamp::now();
    let mut note = skip.to_string();
    if note.len() > MAX_NOTE {
        let mut end = MAX_NOTE - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    let mut instance = instance.to_string();
    if instance.len() > MAX_INSTANCE {
        let mut end = MAX_INSTANCE;
        while !instance.is_char_boundary(end) {
            end -= 1;
        }
        instance.truncate(end);
    }
    Event {
        metadata: ObjectMeta {
            // Unique, as kubectl and client-go name theirs.
            name: Some(format!("{}.{:x}", regarding.name, now.as_nanosecond())),
            namespace: Some(regarding.namespace.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some("Warning".into()),
        reason: Some(REASON.into()),
        action: Some("Sync".into()),
        note: Some(note),
        regarding: Some(ObjectReference {
            api_version: Some(regarding.api_version.into()),
            kind: Some(regarding.kind.into()),
            namespace: Some(regarding.namespace.clone()),
            name: Some(regarding.name.clone()),
            uid: regarding.uid.clone(),
            ..ObjectReference::default()
        }),
        reporting_controller: Some(CONTROLLER.into()),
        reporting_instance: Some(instance),
        ..Event::default()
    }
}

/// This sidecar's name as a reporting instance: `$POD_NAME` (set it from
/// the downward API), else `$HOSTNAME`, else the controller's name.
pub fn instance_name() -> String {
    ["POD_NAME", "HOSTNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| CONTROLLER.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regarding() -> Regarding {
        Regarding {
            api_version: "v1",
            kind: "Service",
            namespace: "default".into(),
            name: "web".into(),
            uid: Some("6f0c2a4e".into()),
        }
    }

    #[test]
    fn an_event_names_the_object_and_says_why() {
        let skip = Skip {
            object: "Service default/web port 9".into(),
            reason: "protocol SCTP (lbd balances TCP and UDP)".into(),
            regarding: Some(regarding()),
        };
        let e = event(&skip, &regarding(), "gw-1");
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reason.as_deref(), Some(REASON));
        assert_eq!(
            e.note.as_deref(),
            Some("Service default/web port 9: protocol SCTP (lbd balances TCP and UDP)")
        );
        let r = e.regarding.unwrap();
        assert_eq!(
            (
                r.kind.as_deref(),
                r.name.as_deref(),
                r.namespace.as_deref(),
                r.uid.as_deref()
            ),
            (Some("Service"), Some("web"), Some("default"), Some("6f0c2a4e"))
        );
        assert_eq!(r.api_version.as_deref(), Some("v1"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert!(e.metadata.name.unwrap().starts_with("web."));
        assert_eq!(e.reporting_controller.as_deref(), Some(CONTROLLER));
        assert_eq!(e.reporting_instance.as_deref(), Some("gw-1"));
        assert!(e.event_time.is_some());
    }

    #[test]
    fn a_long_note_is_cut_to_what_the_api_takes() {
        // The cut falls inside a two-byte character: before it.
        let skip = Skip {
            object: "Service default/webs".into(),
            reason: "é".repeat(1000),
            regarding: None,
        };
        let note = event(&skip, &regarding(), "gw-1").note.unwrap();
        assert_eq!(note.len(), MAX_NOTE - 1, "{note}");
        assert!(note.ends_with("é..."), "{note}");
        // So is a reporting instance too long for the API.
        let long = "g".repeat(200);
        let e = event(&skip, &regarding(), &long);
        assert_eq!(e.reporting_instance.unwrap().len(), MAX_INSTANCE);
    }
}
