//! Single-producer single-consumer rings of mbufs between two lcores.
//!
//! [`channel`] creates an `rte_ring` and splits it into a [`Producer`] and a
//! [`Consumer`]. Each half is `Send` but not `Clone`, and enqueues and
//! dequeues take `&mut self`, so one thread at a time uses each end: exactly
//! the contract of DPDK's SP/SC ring mode. The ring is freed when
//! both halves are gone; mbufs still in it are freed with it.

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use dpdk_sys::rte_ring;

use crate::mbuf::{Burst, Mbuf};
use crate::{last_errno, strerror, Eal};

/// Errors of [`channel`].
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// Capacity must be a power of two between 2 and 2^28.
    #[error("ring capacity {0} is not a power of two in 2..=268435456")]
    BadCapacity(u32),
    /// The name had a NUL byte.
    #[error("invalid ring name {0:?}")]
    BadName(String),
    /// `rte_ring_create` failed.
    #[error("creating ring {name:?} failed: {reason}")]
    CreateFailed {
        /// Ring name.
        name: String,
        /// DPDK's reason.
        reason: String,
    },
}

#[derive(Debug)]
/// Shared by the two halves through an `Arc`: dropped (the ring drained
/// and freed) when the last of them goes.
struct RingInner {
    ptr: NonNull<rte_ring>,
    _eal: Eal,
}

// SAFETY: the ring pointer is shared by exactly one producer and one
// consumer half (enforced by the types), which is what SP/SC mode allows.
unsafe impl Send for RingInner {}
// SAFETY: see Send above; shared access only happens through the halves.
unsafe impl Sync for RingInner {}

impl Drop for RingInner {
    fn drop(&mut self) {
        let mut b = Burst::new();
        loop {
            let (p, room) = b.spare_ptr();
            // SAFETY: both halves are gone: we are the only user; dequeued
            // mbufs become owned by the burst, which frees them.
            let n = unsafe {
                dpdk_sys::lbd_rte_ring_dequeue_burst(
                    self.ptr.as_ptr(),
                    p as *mut *mut std::ffi::c_void,
                    room as u32,
                )
            } as usize;
            b.grew(n);
            b.clear();
            if n == 0 {
                break;
            }
        }
        // SAFETY: the ring is empty and unused; freed once.
        unsafe { dpdk_sys::rte_ring_free(self.ptr.as_ptr()) };
    }
}

/// Creates an SP/SC ring of `capacity` (a power of two; one slot stays
/// empty, so it holds `capacity - 1` mbufs).
pub fn channel(eal: &Eal, name: &str, capacity: u32) -> Result<(Producer, Consumer), RingError> {
    if !capacity.is_power_of_two() || !(2..=(1 << 28)).contains(&capacity) {
        return Err(RingError::BadCapacity(capacity));
    }
    let cname = CString::new(name).map_err(|_| RingError::BadName(name.to_string()))?;
    let flags = dpdk_sys::RING_F_SP_ENQ | dpdk_sys::RING_F_SC_DEQ;
    // SAFETY: EAL is initialised; cname is NUL-terminated.
    let p = unsafe { dpdk_sys::rte_ring_create(cname.as_ptr(), capacity, dpdk_sys::SOCKET_ID_ANY, flags) };
    let ptr = NonNull::new(p).ok_or_else(|| RingError::CreateFailed {
        name: name.to_string(),
        reason: strerror(last_errno()),
    })?;
    let inner = Arc::new(RingInner {
        ptr,
        _eal: eal.clone(),
    });
    Ok((Producer(inner.clone()), Consumer(inner)))
}

/// The sending half.
#[derive(Debug)]
pub struct Producer(Arc<RingInner>);

impl Producer {
    /// Moves as many mbufs from the front of `burst` into the ring as fit;
    /// the rest stay in the burst. Returns how many moved.
    #[inline]
    pub fn enqueue_burst(&mut self, burst: &mut Burst) -> usize {
        if burst.is_empty() {
            return 0;
        }
        // SAFETY: &mut self makes this the single producer; the burst's
        // first len pointers are owned mbufs; the ring takes the first n.
        let n = unsafe {
            dpdk_sys::lbd_rte_ring_enqueue_burst(
                self.0.ptr.as_ptr(),
                burst.as_mut_ptr() as *const *mut std::ffi::c_void,
                burst.len() as u32,
            )
        } as usize;
        burst.consumed(n);
        n
    }

    /// Moves one mbuf into the ring, or gives it back when the ring is full.
    #[inline]
    pub fn enqueue(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        let mut b = Burst::new();
        b.push(m).expect("an empty burst has room");
        if self.enqueue_burst(&mut b) == 1 {
            Ok(())
        } else {
            Err(b.drain().next().expect("the mbuf is still in the burst"))
        }
    }

    /// Free slots.
    pub fn free_count(&self) -> u32 {
        // SAFETY: a racy read of ring indices, allowed from any thread.
        unsafe { dpdk_sys::lbd_rte_ring_free_count(self.0.ptr.as_ptr()) }
    }
}

/// The receiving half.
#[derive(Debug)]
pub struct Consumer(Arc<RingInner>);

impl Consumer {
    /// Moves up to the burst's free space out of the ring; returns how many.
    #[inline]
    pub fn dequeue_burst(&mut self, burst: &mut Burst) -> usize {
        let (p, room) = burst.spare_ptr();
        if room == 0 {
            return 0;
        }
        // SAFETY: &mut self makes this the single consumer; p has room for
        // `room` pointers; the n dequeued mbufs become owned by the burst.
        let n = unsafe {
            dpdk_sys::lbd_rte_ring_dequeue_burst(
                self.0.ptr.as_ptr(),
                p as *mut *mut std::ffi::c_void,
                room as u32,
            )
        } as usize;
        burst.grew(n);
        n
    }

    /// Mbufs waiting.
    pub fn count(&self) -> u32 {
        // SAFETY: a racy read of ring indices, allowed from any thread.
        unsafe { dpdk_sys::lbd_rte_ring_count(self.0.ptr.as_ptr()) }
    }
}
