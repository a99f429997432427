//! `Worker::handle_burst` against `Worker::handle_packet` on the same
//! generated and raw traffic, with the golden tests' two-port snapshot,
//! every neighbor resolved or (bit 7 of the first byte set, which the
//! harness's setup does not read) none, or (bit 6) on VLANs 10 and 20; see
//! `src/burst.rs` for the input's format and what is checked.
#![no_main]

#[path = "../src/burst.rs"]
mod burst;
#[path = "../../core/tests/golden/fixture.rs"]
mod fixture;
// `oracle::repair` is the `handle_packet` harness's.
#[allow(dead_code)]
#[path = "../src/oracle.rs"]
mod oracle;
#[path = "../../core/tests/golden/pkt.rs"]
mod pkt;

use fixture::Fixture;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let fixture = match data.first() {
        Some(b) if b & 0x80 != 0 => Fixture::NoNeighbors,
        Some(b) if b & 0x40 != 0 => Fixture::Tagged,
        _ => Fixture::TwoPort,
    };
    burst::run(fixture.snapshot(), data);
});
