//! `Worker::handle_burst` against `Worker::handle_packet` on the same
//! generated and raw traffic, with the golden tests' two-port snapshot;
//! see `src/burst.rs` for the input's format and what is checked.
#![no_main]

#[path = "../src/burst.rs"]
mod burst;
#[path = "../../core/tests/golden/fixture.rs"]
mod fixture;
#[path = "../../core/tests/golden/pkt.rs"]
mod pkt;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    burst::run(fixture::Fixture::TwoPort.snapshot(), data, false);
});
