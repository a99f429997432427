//! A harness for tests that must run alone in their process, on its main
//! thread: the allocation tests.
//!
//! `stats_alloc` counts the allocations of every thread. Under libtest the
//! main thread records each test it has just spawned (a map insert and a
//! queue push) while the test already runs; on a loaded machine those
//! allocations can land inside the measured region and fail the test for
//! nothing. With `harness = false` and this `run`, the process has one
//! thread, so every allocation the region sees is the code's own.
//!
//! It honours what `cargo test` passes through: a name filter (substring,
//! as libtest), `--exact`, `--list`, and it ignores the other flags. It
//! prints libtest's lines, so `scripts/test.sh` counts the result.

use std::time::Instant;

/// Runs `f` as the test `name` unless the command line filters it out.
/// A failure panics, which exits the process with status 101 as libtest does.
pub fn run(name: &str, f: fn()) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let exact = args.iter().any(|a| a == "--exact");
    if args.iter().any(|a| a == "--list") {
        println!("{name}: test");
        return;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let selected = filters.is_empty()
        || filters.iter().any(|f| {
            if exact {
                name == f.as_str()
            } else {
                name.contains(f.as_str())
            }
        });
    if !selected {
        println!("\nrunning 0 tests\n");
        println!(
            "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 1 filtered out; finished in 0.00s\n"
        );
        return;
    }
    println!("\nrunning 1 test");
    let start = Instant::now();
    f();
    println!("test {name} ... ok\n");
    println!(
        "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in {:.2}s\n",
        start.elapsed().as_secs_f64()
    );
}
