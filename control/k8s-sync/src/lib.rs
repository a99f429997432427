//! `lb-k8s-sync`, the Kubernetes sync sidecar: watches Services and
//! EndpointSlices and keeps lbd's objects of source `k8s` equal to what
//! they map to, one `Resync` at a time.
//!
//! - [`desired`]: the mapping, pure;
//! - [`events`]: Kubernetes Events for what is skipped;
//! - [`push`]: one resync, narrowed around what lbd refuses;
//! - [`sync`]: the watches and the loop;
//! - [`metrics`]: its counters and their endpoint.

pub mod desired;
pub mod events;
pub mod metrics;
pub mod push;
pub mod sync;
