//! lbd's control plane.
//!
//! The control thread inside `lbd` is the only writer of the desired state:
//! services, frontends and backends, each recording the source that wrote
//! it. Writes arrive over gRPC (`lb.v1.LoadBalancer`), are validated as
//! whole transactions, bump a revision, are persisted atomically, and are
//! compiled into a `lb_dataplane::Snapshot` that workers pick up through
//! one atomic swap.
//!
//! - [`model`]: the desired-state types, their identities and validation.
//! - [`plane`]: the [`plane::ControlPlane`]: transactions, revisions,
//!   persistence, compilation, publication, watchers, stats.
#![forbid(unsafe_code)]

pub mod model;
pub mod plane;
