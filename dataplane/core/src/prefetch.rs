//! How the staged burst path warms the cache lines it is about to read.
//!
//! [`Worker::handle_burst_with`](crate::worker::Worker::handle_burst_with)
//! issues the conntrack misses of a whole burst before it handles the
//! first packet (index slots of the 5-tuples, then the entries they name,
//! then the reply keys and eviction victims of new connections). How a line
//! is warmed is the caller's choice:
//!
//! - a prefetch instruction (`prefetcht0`) returns at once, so every miss of
//!   the burst is in flight together. This crate cannot issue one (its
//!   lints forbid the intrinsic's call); the project's `dpdk` crate does
//!   (`dpdk::prefetch`), and `lbd` passes it in. Measured in
//!   `benches/pipeline.rs` at a million connections (bench/RESULTS.md):
//!   established packets ~25% faster than with plain loads, new
//!   connections ~33%, a SYN flood that evicts from a full table ~18%;
//! - [`Loads`], the default: a plain load of the line, which the CPU
//!   overlaps only as far as its out-of-order window reaches. What tests,
//!   fuzzing and `Worker::handle_burst` use.
//!
//! A warming changes no answer: the burst path's verdicts, frames and
//! counters are the same whatever the `Prefetch` (the burst tests alternate
//! plain loads with one that loads nothing).

/// Warms the cache line that holds a value: a hint, with no effect on any
/// value the program can observe.
pub trait Prefetch {
    /// Starts loading the cache line holding `*line`; need not wait for it.
    fn prefetch<T: Copy>(&self, line: &T);
}

/// Warming by plain loads: the value is read and discarded (through
/// [`core::hint::black_box`], so the read is not optimized away).
#[derive(Debug, Clone, Copy, Default)]
pub struct Loads;

impl Prefetch for Loads {
    #[inline(always)]
    fn prefetch<T: Copy>(&self, line: &T) {
        core::hint::black_box(*line);
    }
}

/// Records the address of every line it is asked to warm: what the tests
/// that pin warmed addresses compare.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Recorder(pub core::cell::RefCell<Vec<usize>>);

#[cfg(test)]
impl Prefetch for Recorder {
    fn prefetch<T: Copy>(&self, line: &T) {
        self.0.borrow_mut().push(line as *const T as usize);
    }
}
