//! Arbitrary bytes as an Ethernet frame through `Worker::handle_packet`
//! (and `handle_tick`) with the golden tests' two-port snapshot, untagged
//! and on VLAN trunks (the frame tagged as it arrives); see
//! `src/harness.rs` for what is run and checked, `src/oracle.rs` for the
//! checks on the frames sent.
#![no_main]

#[path = "../../core/tests/golden/fixture.rs"]
mod fixture;
#[path = "../src/harness.rs"]
mod harness;
#[path = "../src/oracle.rs"]
mod oracle;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for f in [fixture::Fixture::TwoPort, fixture::Fixture::Tagged] {
        assert!(harness::run(f.snapshot(), data).verdicts > 0);
    }
});
