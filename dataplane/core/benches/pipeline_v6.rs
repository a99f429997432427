//! `pipeline.rs` in IPv6: every variant, environment variable (but
//! `PIPELINE_VLAN`: a tagged IPv6 frame needs 78 bytes, a third frame
//! size this bench does not build; `pipeline_v6_tagged.rs` does) and
//! output of that bench (its module doc), with the services, backends,
//! SNAT addresses and clients IPv6 and 74-byte frames. A binary of its own so
//! that the IPv4 bench's binary compiles the worker's code for one frame
//! type only, as it always has.
//!
//! `cargo bench -p lb-dataplane --bench pipeline_v6`;
//! `PIPELINE_MEDIANS=1 target/release/deps/pipeline_v6-<hash>`.

#[path = "pipeline.rs"]
#[allow(dead_code)]
mod body;

fn main() {
    body::run::<{ body::FRAME6 }>(true, false);
}
