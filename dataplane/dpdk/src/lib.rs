//! Safe wrappers over DPDK, with ownership doing the bookkeeping.
//!
//! - [`Eal`]: the environment, initialised once per process and cleaned up
//!   when the last handle drops (after every port and mempool, which hold
//!   handles to it).
//! - [`Mempool`], [`Mbuf`] and [`Burst`]: packet buffers. An `Mbuf` is owned:
//!   dropping it returns it to its pool, so a packet can be neither leaked
//!   nor freed twice. Its data is a plain `&mut [u8]`.
//! - [`Port`], [`RxQueue`], [`TxQueue`]: an Ethernet device configured with
//!   N rx and N tx queues (RSS over IP and L4 ports where the PMD supports
//!   it). A queue handle is `Send` but not `Clone`, and every method that
//!   polls or sends takes `&mut self`: exactly one lcore polls it at a
//!   time, which is what DPDK's lock-free queues require.
//! - [`ring`]: single-producer single-consumer rings for handing mbufs
//!   between lcores, split into a producer and a consumer half.
//! - [`Eal::launch`]: run a closure on a worker lcore and join it.
//! - [`prefetch()`]: the cache prefetch hint the workers' staged conntrack
//!   lookups issue (through `lb_dataplane::Prefetch`, implemented in `lbd`).
//! - [`HugePageAdvice`]: the global allocator `lbd` runs with, which asks
//!   for transparent huge pages under its large tables.
//!
//! This crate and `dpdk-sys` are the only homes of `unsafe` in the project;
//! every block carries a `// SAFETY:` comment naming the invariant it relies on.

mod alloc;
mod eal;
pub mod flow;
mod mbuf;
mod port;
mod prefetch;
pub mod ring;

pub use alloc::HugePageAdvice;
pub use eal::{Eal, EalError, LaunchError, LcoreHandle, LcoreId};
pub use mbuf::{Burst, Drain, Mbuf, Mempool, MempoolError, BURST_MAX};
pub use port::{
    ChecksumOffload, LinkStatus, MacAddr, Port, PortConfig, PortError, PortInfo, PortStats, RssStatus,
    RxQueue, TxQueue,
};
pub use prefetch::prefetch;

/// The DPDK version the bindings were generated against.
pub const DPDK_VERSION: &str = dpdk_sys::DPDK_VERSION;

/// DPDK's text for an errno value (`rte_strerror`).
pub fn strerror(errno: i32) -> String {
    // SAFETY: rte_strerror accepts any int and returns a pointer to a
    // NUL-terminated string in static or thread-local storage.
    let p = unsafe { dpdk_sys::rte_strerror(errno) };
    if p.is_null() {
        return format!("error {errno}");
    }
    // SAFETY: p is non-null and NUL-terminated (see above); we copy it at once.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// The calling thread's `rte_errno`.
pub(crate) fn last_errno() -> i32 {
    // SAFETY: reads a thread-local int; no preconditions.
    unsafe { dpdk_sys::lbd_rte_errno() }
}

/// Reads the CPU time-stamp counter (cheap, monotonic per core).
#[inline]
pub fn rdtsc() -> u64 {
    // `rte_rdtsc` is the bare instruction on x86-64; inline it there
    // instead of calling the C shim every loop of a worker.
    #[cfg(target_arch = "x86_64")]
    // SAFETY: RDTSC is in every x86-64 CPU; it reads a counter and has no
    // preconditions.
    return unsafe { core::arch::x86_64::_rdtsc() };
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: reads the TSC; no preconditions.
    return unsafe { dpdk_sys::lbd_rte_rdtsc() };
}
