//! `pipeline_v6.rs` on a tagged node: every variant, environment variable
//! and output of `pipeline.rs` (its module doc) in IPv6, as
//! `PIPELINE_VLAN=1` runs them in IPv4: port 0 on VLAN 10, port 1 on VLAN
//! 20, every frame with its port's 802.1Q tag, 78-byte frames. A binary
//! of its own, so that `pipeline_v6`'s compiles the worker's code for its
//! 74-byte frames only, as it always has.
//!
//! `cargo bench -p lb-dataplane --bench pipeline_v6_tagged`;
//! `PIPELINE_MEDIANS=1 target/release/deps/pipeline_v6_tagged-<hash>`.

#[path = "pipeline.rs"]
#[allow(dead_code)]
mod body;

fn main() {
    body::run::<{ body::FRAME6_TAGGED }>(true, true);
}
