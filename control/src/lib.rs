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
//! - [`store`]: transactions on the state with an undo log, cross-object rules.
//! - [`compile`]: desired state → `Snapshot`, incremental, stable counter slots.
//! - [`persist`]: the atomically written state file.
//! - [`stats`]: per-worker counters summed and mapped back to objects.
//! - [`plane`]: the [`plane::ControlPlane`]: transactions, revisions,
//!   persistence, compilation, publication, watchers, stats.
//! - [`convert`]: `lb.v1` messages to and from the model, every field checked.
//! - [`grpc`]: the `lb.v1.LoadBalancer` service, health and reflection.
//! - [`report`]: the GetStats and GetInfo answers, for gRPC and metrics.
//! - [`listen`]: the control socket (unix by default, TCP with TLS).
//! - [`metrics`]: the Prometheus endpoint (`lbd --metrics`).
//! - [`cli`]: what `lbctl` uses: server addresses, connecting, output.
//! - [`services_file`]: the TOML services file of `lbd --config` and
//!   `lbctl apply -f`.
#![forbid(unsafe_code)]

pub mod cli;
pub mod compile;
pub mod convert;
pub mod grpc;
pub mod listen;
pub mod metrics;
pub mod model;
pub mod persist;
pub mod plane;
pub mod report;
pub mod services_file;
pub mod stats;
pub mod store;
