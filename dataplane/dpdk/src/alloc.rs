//! [`HugePageAdvice`]: the global allocator `lbd` runs with, which asks the
//! kernel to back its large tables with transparent huge pages.
//!
//! A worker's conntrack is ~100 MB of slab and index (a million IPv4
//! connections), read at random: with 4 KiB pages nearly every lookup of a
//! new flow misses the TLB and walks the page tables (two-dimensional walks
//! in a guest), which the staged lookups' prefetches then wait for. Backed
//! by 2 MiB pages the same tables need ~50 TLB entries. Measured in
//! `bench/RESULTS.md`.
//!
//! Linux backs a mapping with transparent huge pages when
//! `/sys/kernel/mm/transparent_hugepage/enabled` is `always`, or `madvise`
//! (Debian's default) and the mapping was advised with `MADV_HUGEPAGE`,
//! which this allocator does for every block of [`HugePageAdvice::MIN`]
//! bytes or more, right after allocating it and before anything touches
//! it. With `never`, or when the kernel has no huge page to give, the
//! pages stay 4 KiB ones: slower, never wrong.

use std::alloc::{GlobalAlloc, Layout, System};

/// [`System`], with `MADV_HUGEPAGE` on large blocks (module docs).
///
/// ```
/// #[global_allocator]
/// static ALLOC: dpdk::HugePageAdvice = dpdk::HugePageAdvice;
///
/// fn main() {
///     // Large enough to be advised: backed by huge pages where the kernel can.
///     let table = vec![0u64; 1 << 20];
///     assert_eq!(table.len(), 1 << 20);
/// }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct HugePageAdvice;

/// A transparent huge page: the unit the advice is aligned to.
const HUGE_PAGE: usize = 2 << 20;

impl HugePageAdvice {
    /// Blocks from this size on are advised: two huge pages, so that one
    /// aligned huge page at least lies inside the block.
    pub const MIN: usize = 2 * HUGE_PAGE;
}

/// The part of the block `[p, p + size)` to advise: its 2 MiB-aligned
/// interior, if the block is large and has one.
fn advice_range(p: usize, size: usize) -> Option<(usize, usize)> {
    if p == 0 || size < HugePageAdvice::MIN {
        return None;
    }
    let start = p.checked_next_multiple_of(HUGE_PAGE)?;
    let end = p.checked_add(size)? & !(HUGE_PAGE - 1);
    (end > start).then_some((start, end))
}

/// Advises the 2 MiB-aligned interior of a large block.
fn advise(p: *mut u8, size: usize) {
    if let Some((start, end)) = advice_range(p as usize, size) {
        // SAFETY: `[start, end)` lies inside the block the allocator has
        // just handed out (rounded inward), which is mapped and which no
        // other part of the program owns; `MADV_HUGEPAGE` changes how the
        // kernel backs those pages, never their contents or the mapping's
        // extent, and a failure (THP disabled or unsupported) changes
        // nothing at all, so its result needs no handling.
        let _ = unsafe { dpdk_sys::lbd_madvise_hugepage(start as *mut core::ffi::c_void, end - start) };
    }
}

// SAFETY: every method forwards to `System` with its own arguments, so
// each upholds the `GlobalAlloc` contract exactly as `System` does; the
// advice that follows an allocation changes no byte of the block and
// neither moves nor resizes it.
unsafe impl GlobalAlloc for HugePageAdvice {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's obligations for `alloc` are `System`'s.
        let p = unsafe { System.alloc(layout) };
        advise(p, layout.size());
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's obligations for `alloc_zeroed` are `System`'s.
        let p = unsafe { System.alloc_zeroed(layout) };
        advise(p, layout.size());
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`,
        // with `layout` (the caller's obligation).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`, and `new_size`
        // meets `realloc`'s conditions (the caller's obligations).
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        advise(p, new_size);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `VmFlags` line of the mapping of /proc/self/smaps holding `addr`.
    fn vm_flags_at(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16)) {
                    inside = (lo..hi).contains(&addr);
                    continue;
                }
            }
            if inside && line.starts_with("VmFlags:") {
                return line.to_string();
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    #[test]
    fn large_blocks_are_advised() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            // A kernel without THP refuses the advice: nothing to check.
            eprintln!("skipped: this kernel has no transparent huge pages");
            return;
        }
        let a = HugePageAdvice;
        for (size, zeroed) in [(8 << 20, false), (9 << 20, true)] {
            let layout = Layout::from_size_align(size, 64).unwrap();
            let p = if zeroed {
                // SAFETY: a non-zero size; freed below with the same layout.
                unsafe { a.alloc_zeroed(layout) }
            } else {
                // SAFETY: as above.
                unsafe { a.alloc(layout) }
            };
            assert!(!p.is_null());
            // The kernel marks an advised range `hg` in its VmFlags.
            let inner = (p as usize).next_multiple_of(HUGE_PAGE);
            assert!(
                vm_flags_at(inner).contains(" hg"),
                "{size} B: {}",
                vm_flags_at(inner)
            );
            // SAFETY: as allocated just above.
            unsafe { a.dealloc(p, layout) };
        }
        // Grown past the threshold by realloc: advised too.
        let small = Layout::from_size_align(4096, 8).unwrap();
        // SAFETY: a non-zero size; grown, then freed with the grown layout.
        let p = unsafe { a.alloc(small) };
        // SAFETY: `p` is from `a` with `small`; the new size is non-zero.
        let p = unsafe { a.realloc(p, small, 16 << 20) };
        assert!(!p.is_null());
        let inner = (p as usize).next_multiple_of(HUGE_PAGE);
        assert!(vm_flags_at(inner).contains(" hg"), "{}", vm_flags_at(inner));
        // SAFETY: the block is now `16 << 20` bytes with alignment 8.
        unsafe { a.dealloc(p, Layout::from_size_align(16 << 20, 8).unwrap()) };
    }

    #[test]
    fn the_advice_covers_the_aligned_interior_of_large_blocks_only() {
        const M: usize = 1 << 20;
        let base = 0x7f00_0000_0000usize;
        // Below the threshold, or null: nothing.
        assert_eq!(advice_range(base, HugePageAdvice::MIN - 1), None);
        assert_eq!(advice_range(0, 64 * M), None);
        // Aligned: all of it.
        assert_eq!(advice_range(base, 4 * M), Some((base, base + 4 * M)));
        // Unaligned (glibc's 16-byte chunk header): rounded inward.
        assert_eq!(
            advice_range(base + 16, 32 * M),
            Some((base + 2 * M, base + 32 * M))
        );
        assert_eq!(advice_range(base + 16, 4 * M), Some((base + 2 * M, base + 4 * M)));
        // No aligned huge page inside: nothing.
        assert_eq!(advice_range(base + 3 * M, 4 * M - 1), None);
        // At the top of the address space: no overflow.
        assert_eq!(advice_range(usize::MAX - 3 * M, 4 * M), None);
    }
}
