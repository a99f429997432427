//! What the benches share with lbd's worker, so that they measure what it
//! runs: its allocator and its prefetch (both from the `dpdk` crate, a
//! dev-dependency; this crate's lints forbid the intrinsic and `madvise`).

use lb_dataplane::Prefetch;

/// The system allocator, with transparent huge pages asked for under the
/// conntrack's tables (`dpdk::HugePageAdvice`).
#[global_allocator]
static ALLOC: dpdk::HugePageAdvice = dpdk::HugePageAdvice;

/// What lbd passes to the burst lookups: DPDK's `prefetcht0`.
pub struct Prefetch0;

impl Prefetch for Prefetch0 {
    #[inline(always)]
    fn prefetch<T: Copy>(&self, line: &T) {
        dpdk::prefetch(line);
    }
}
