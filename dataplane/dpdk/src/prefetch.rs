//! Cache prefetch hints for the workers' staged lookups.

/// Asks the CPU to start loading the cache line that holds `*line` into
/// every cache level (`prefetcht0`, what DPDK's `rte_prefetch0` issues) and
/// returns at once, without waiting for the line: a burst can have all its
/// table misses in flight together. A plain load would do the same only as
/// far as the out-of-order window reaches, and holds the load's result
/// until the line arrives.
///
/// A hint: it changes no value the program can observe. On targets without
/// SSE (outside x86_64) it does nothing.
#[inline(always)]
pub fn prefetch<T: ?Sized>(line: &T) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse"))]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = (line as *const T).cast::<i8>();
        // SAFETY: `_mm_prefetch` needs SSE, which the cfg above guarantees
        // is enabled. `prefetcht0` neither reads into a register nor writes
        // memory and cannot fault, whatever the address; this one comes
        // from a live reference anyway.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p) };
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse")))]
    let _ = line;
}
