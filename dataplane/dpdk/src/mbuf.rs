//! Packet buffers: mempools, owned mbufs and fixed-size bursts.
//!
//! An [`Mbuf`] owns one `rte_mbuf`: dropping it frees it back to its pool,
//! handing it to a tx queue or a ring moves it. A [`Burst`] is an array of
//! up to [`BURST_MAX`] owned mbufs laid out as DPDK's `struct rte_mbuf **`,
//! so rx/tx burst calls fill and drain it without copying.
//!
//! Only single-segment mbufs are exposed as `&mut [u8]`; lbd configures its
//! ports without scatter, so every received packet is one segment.

use std::ffi::CString;
use std::ptr::NonNull;

use dpdk_sys::{rte_mbuf, rte_mempool};

use crate::{last_errno, strerror, Eal};

/// The largest burst, in packets: what an rx burst asks for and a tx
/// burst holds. 64 rather than the usual 32: under a SYN flood through a
/// memif link, lbd forwarded 4-5% more with 64 (fewer rx and tx calls, each
/// moving the ring's shared head and tail lines between the two cores),
/// established traffic the same (`bench/RESULTS.md`, ninth session).
pub const BURST_MAX: usize = 64;

/// Errors of [`Mempool::new`].
#[derive(Debug, thiserror::Error)]
pub enum MempoolError {
    /// The name contained a NUL byte or was longer than DPDK allows.
    #[error("invalid mempool name {0:?}")]
    BadName(String),
    /// `rte_pktmbuf_pool_create` failed (usually: not enough memory; pass a
    /// larger `--mem` or reserve more hugepages).
    #[error("creating mempool {name:?} of {count} mbufs failed: {reason}")]
    CreateFailed {
        /// Pool name.
        name: String,
        /// Number of mbufs asked for.
        count: u32,
        /// DPDK's reason.
        reason: String,
    },
}

#[derive(Debug)]
pub(crate) struct PoolPtr(pub(crate) NonNull<rte_mempool>);

// SAFETY: an rte_mempool is designed to be shared by all lcores: get/put
// use per-lcore caches plus a lock-free ring.
unsafe impl Send for PoolPtr {}
// SAFETY: see Send above.
unsafe impl Sync for PoolPtr {}

/// A pool of packet buffers (`rte_pktmbuf_pool_create`). Freed on drop, so
/// ports hold an `Arc` of it and it outlives their rx queues.
#[derive(Debug)]
pub struct Mempool {
    ptr: PoolPtr,
    name: String,
    count: u32,
    _eal: Eal,
}

impl Mempool {
    /// Creates a pool of `count` mbufs with `data_room` bytes each (use
    /// `dpdk_sys::RTE_MBUF_DEFAULT_BUF_SIZE` for ordinary Ethernet frames),
    /// a per-lcore cache of `cache` mbufs, on NUMA socket `socket`
    /// (`None`: any).
    pub fn new(
        eal: &Eal,
        name: &str,
        count: u32,
        cache: u32,
        data_room: u16,
        socket: Option<i32>,
    ) -> Result<Mempool, MempoolError> {
        let cname = CString::new(name).map_err(|_| MempoolError::BadName(name.to_string()))?;
        let socket = socket.unwrap_or(dpdk_sys::SOCKET_ID_ANY);
        // SAFETY: EAL is initialised (eal handle); cname is NUL-terminated.
        let p =
            unsafe { dpdk_sys::rte_pktmbuf_pool_create(cname.as_ptr(), count, cache, 0, data_room, socket) };
        match NonNull::new(p) {
            Some(ptr) => Ok(Mempool {
                ptr: PoolPtr(ptr),
                name: name.to_string(),
                count,
                _eal: eal.clone(),
            }),
            None => Err(MempoolError::CreateFailed {
                name: name.to_string(),
                count,
                reason: strerror(last_errno()),
            }),
        }
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Mbufs currently free in the pool (approximate while lcores run).
    pub fn available(&self) -> u32 {
        // SAFETY: the pool is alive (self); the count is a racy read by design.
        unsafe { dpdk_sys::lbd_rte_mempool_avail_count(self.ptr.0.as_ptr()) }
    }

    /// Takes one mbuf from the pool, empty (data length 0).
    pub fn alloc(&self) -> Option<Mbuf> {
        // SAFETY: the pool is alive; alloc returns NULL or an mbuf we now own.
        NonNull::new(unsafe { dpdk_sys::lbd_rte_pktmbuf_alloc(self.ptr.0.as_ptr()) }).map(Mbuf)
    }

    pub(crate) fn raw(&self) -> *mut rte_mempool {
        self.ptr.0.as_ptr()
    }
}

impl Drop for Mempool {
    fn drop(&mut self) {
        // An `Mbuf` does not borrow its pool, so one can still be out (held
        // by safe code, in a ring, or queued on a port that does not own
        // this pool). Freeing the pool then would leave it dangling, and a
        // later pool could hand its memory out again. So the pool is freed
        // only when every mbuf is back (the count includes the per-lcore
        // caches, exact once nothing runs); otherwise it is leaked, with
        // its EAL handle, so that EAL cleanup cannot unmap it either.
        // While a worker lcore runs, the count may be over by a cache
        // flush in progress: leaked rather than risk it.
        if crate::eal::lcores_running() {
            tracing::error!(
                pool = %self.name,
                "mempool dropped while worker lcores run: leaked, not freed"
            );
            std::mem::forget(self._eal.clone());
            return;
        }
        let free = self.available();
        if free < self.count {
            tracing::error!(
                pool = %self.name,
                out = self.count - free,
                "mempool dropped with mbufs still in use: leaked, not freed"
            );
            std::mem::forget(self._eal.clone());
            return;
        }
        // SAFETY: every holder of this pool (ports' rx queues) holds an Arc
        // to it, so we are the last user, and every mbuf is back in it
        // (checked above, with no worker lcore running, so the count, caches
        // included, is exact: any other thread puts straight into the ring,
        // and with every mbuf back none holds one to put): nothing refers to
        // its memory any more.
        unsafe { dpdk_sys::rte_mempool_free(self.ptr.0.as_ptr()) }
    }
}

/// The data of mbuf `m` as a shared byte slice.
///
/// # Safety
/// `m` must be a valid single-segment mbuf that the caller holds, at least
/// shared, for the whole lifetime `'a`.
#[inline]
unsafe fn mbuf_bytes_shared<'a>(m: *mut rte_mbuf) -> &'a [u8] {
    // SAFETY: the caller's contract, with `mbuf_bytes`' reads of the
    // header; the pointer is only read through, so shared slices of one
    // mbuf may coexist (a `&mut` made and downgraded would not allow that).
    let (data, len) = unsafe { mbuf_data_ptr(m) };
    // SAFETY: data points at len initialised bytes of the buffer (DPDK's
    // invariant), valid while the caller holds the mbuf.
    unsafe { std::slice::from_raw_parts(data, len) }
}

/// The data of mbuf `m` as a writable byte slice.
///
/// # Safety
/// `m` must be a valid single-segment mbuf that the caller holds
/// exclusively for the whole lifetime `'a`.
#[inline]
unsafe fn mbuf_bytes<'a>(m: *mut rte_mbuf) -> &'a mut [u8] {
    // SAFETY: the caller's contract.
    let (data, len) = unsafe { mbuf_data_ptr(m) };
    // SAFETY: data points at len initialised bytes of the buffer (DPDK's
    // invariant), which the caller holds exclusively.
    unsafe { std::slice::from_raw_parts_mut(data, len) }
}

/// Where mbuf `m`'s data starts, and its length.
///
/// # Safety
/// `m` must be a valid single-segment mbuf.
#[inline(always)]
unsafe fn mbuf_data_ptr(m: *mut rte_mbuf) -> (*mut u8, usize) {
    // `rte_pktmbuf_mtod` and `rte_pktmbuf_data_len`, read here rather than
    // through the C shim: a call each, per packet, was ~1% of lbd's time
    // under a SYN flood.
    let (addr, off, len) = {
        // SAFETY: m is a valid mbuf (caller), a struct whose layout
        // bindgen's tests pinned; the shared borrow ends before the data is
        // borrowed (the data buffer lies outside the struct anyway).
        let mb = unsafe { &*m };
        (
            mb.buf_addr.cast::<u8>(),
            usize::from(mb.data_off),
            usize::from(mb.data_len),
        )
    };
    // SAFETY: buf_addr + data_off stays inside the mbuf's buffer (DPDK's
    // invariant for a valid mbuf: data_off <= buf_len).
    (unsafe { addr.add(off) }, len)
}

/// The mbufs of a [`Burst`] being handed out by [`Burst::drain`].
#[derive(Debug)]
pub struct Drain<'a> {
    /// Owned mbufs; those from `next` on are not handed out yet.
    ptrs: &'a [*mut rte_mbuf],
    next: usize,
}

impl Iterator for Drain<'_> {
    type Item = Mbuf;

    #[inline]
    fn next(&mut self) -> Option<Mbuf> {
        let p = *self.ptrs.get(self.next)?;
        self.next += 1;
        // SAFETY: p is one of the burst's owned mbufs (its length is
        // already zero, so the burst no longer frees it), and `next` moves
        // past it, so it is handed out exactly once.
        Some(unsafe { Mbuf::from_raw(p) })
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.ptrs.len() - self.next;
        (n, Some(n))
    }
}

impl Drop for Drain<'_> {
    fn drop(&mut self) {
        // What was not handed out is freed (each Mbuf's drop), not leaked.
        for m in self.by_ref() {
            drop(m);
        }
    }
}

/// One owned, single-segment packet buffer. Dropping it frees it.
#[derive(Debug)]
#[repr(transparent)]
pub struct Mbuf(NonNull<rte_mbuf>);

// SAFETY: an mbuf is owned by exactly one Mbuf value; moving it between
// lcores is how DPDK hands packets over (rings, tx on another lcore), and
// freeing it on another lcore is allowed by the mempool.
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// The packet bytes (`rte_pktmbuf_mtod` .. `data_len`).
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: we own the mbuf; the shared borrow of self bounds the slice.
        unsafe { mbuf_bytes_shared(self.0.as_ptr()) }
    }

    /// The packet bytes, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: we own the mbuf; &mut self gives exclusive access for the
        // lifetime of the slice.
        unsafe { mbuf_bytes(self.0.as_ptr()) }
    }

    /// Data length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        // SAFETY: we own the mbuf; reads one plain field of the struct
        // whose layout bindgen checked.
        usize::from(unsafe { (*self.0.as_ptr()).data_len })
    }

    /// Packet length in bytes: the sum over its segments (`pkt_len`); the
    /// same as [`Mbuf::len`] for a single segment.
    #[inline]
    pub fn pkt_len(&self) -> usize {
        // SAFETY: we own the mbuf; reads one plain field of the struct
        // whose layout bindgen checked.
        unsafe { (*self.0.as_ptr()).pkt_len as usize }
    }

    /// True when the mbuf holds no data.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of segments (1 for everything lbd processes: it frees chained
    /// frames at rx, [`Burst::free_chained`]).
    #[inline]
    pub fn segments(&self) -> u16 {
        // SAFETY: we own the mbuf; reads one plain field of the struct
        // whose layout bindgen checked.
        unsafe { (*self.0.as_ptr()).nb_segs }
    }

    /// Extends the data by `len` bytes at the tail and returns them, or
    /// `None` if the tailroom is too small.
    pub fn append(&mut self, len: u16) -> Option<&mut [u8]> {
        // SAFETY: we own the mbuf; append returns NULL or a pointer to len
        // writable bytes inside the buffer, now part of the data.
        let p = unsafe { dpdk_sys::lbd_rte_pktmbuf_append(self.0.as_ptr(), len) };
        if p.is_null() {
            return None;
        }
        // SAFETY: p points at len writable bytes owned by this mbuf (see
        // above). Zeroed before a slice is made: the buffer's old bytes are
        // not handed out, and the mbuf's data stays initialised, which
        // `data_mut` relies on.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0, usize::from(len)) };
        // SAFETY: the same len bytes, now initialised; the borrow is tied to
        // &mut self.
        Some(unsafe { std::slice::from_raw_parts_mut(p as *mut u8, usize::from(len)) })
    }

    /// Sets the data length to `len` (shrinking or growing into tailroom).
    /// Returns false if `len` does not fit, and for a chain of segments,
    /// whose data this API sees only the first segment of (trimming or
    /// appending would change the last one and `pkt_len` instead).
    pub fn set_len(&mut self, len: usize) -> bool {
        if self.segments() != 1 {
            return false;
        }
        let cur = self.len();
        if len <= cur {
            // What `rte_pktmbuf_trim` does to a single segment, without a
            // call into the C shim for every transmitted packet.
            // SAFETY: we own the mbuf exclusively (&mut self), a struct
            // whose layout bindgen checked.
            let mb = unsafe { &mut *self.0.as_ptr() };
            // len fits in u16 (it is at most data_len), and pkt_len ==
            // data_len for a single segment: neither field underflows.
            mb.pkt_len -= (cur - len) as u32;
            mb.data_len = len as u16;
            true
        } else {
            u16::try_from(len - cur)
                .ok()
                .and_then(|n| self.append(n))
                .is_some()
        }
    }

    /// The mbuf's offload flags (`ol_flags`), e.g. rx checksum status.
    #[inline]
    pub fn ol_flags(&self) -> u64 {
        // SAFETY: we own the mbuf; reads one field.
        unsafe { dpdk_sys::lbd_rte_pktmbuf_ol_flags(self.0.as_ptr()) }
    }

    /// Asks the NIC to fill the IPv4 header checksum of this frame, whose
    /// IPv4 header starts `l2_len` bytes in and is `l3_len` bytes long
    /// (`RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM`). The checksum field
    /// must hold 0. Only for a tx queue of a port with
    /// [`crate::ChecksumOffload::tx_ipv4`]: elsewhere the frame leaves with
    /// the 0.
    #[inline]
    pub fn offload_ipv4_checksum(&mut self, l2_len: u8, l3_len: u16) {
        // The fields are 7 and 9 bits wide; the setters would mask.
        debug_assert!(l2_len < 128 && l3_len < 512, "l2_len {l2_len}, l3_len {l3_len}");
        // SAFETY: we own the mbuf exclusively (&mut self), a struct whose
        // layout (the tx_offload union and its bitfields included) bindgen
        // generated and checked; the PMD reads these fields at tx.
        let mb = unsafe { &mut *self.0.as_ptr() };
        mb.ol_flags |= dpdk_sys::RTE_MBUF_F_TX_IPV4 | dpdk_sys::RTE_MBUF_F_TX_IP_CKSUM;
        // SAFETY: every variant of the tx_offload union is plain integers,
        // so its bitfield view is valid whatever was stored.
        let lens = unsafe { &mut mb.__bindgen_anon_3.__bindgen_anon_1 };
        lens.set_l2_len(u64::from(l2_len));
        lens.set_l3_len(u64::from(l3_len));
    }

    /// The RSS hash the NIC computed (valid when `ol_flags` has RSS_HASH).
    #[inline]
    pub fn rss_hash(&self) -> u32 {
        // SAFETY: we own the mbuf; reads one field.
        unsafe { dpdk_sys::lbd_rte_pktmbuf_rss_hash(self.0.as_ptr()) }
    }

    /// The port the mbuf arrived on (set by the PMD at rx), or the port
    /// last given to [`Mbuf::set_port`].
    #[inline]
    pub fn port(&self) -> u16 {
        // SAFETY: we own the mbuf; reads one plain field of the struct
        // whose layout bindgen checked.
        unsafe { (*self.0.as_ptr()).port }
    }

    /// Records a port in the mbuf (lbd uses it to say on which port a
    /// frame handed to another lcore must leave or was received).
    #[inline]
    pub fn set_port(&mut self, port: u16) {
        // SAFETY: we own the mbuf exclusively (&mut self); writes one plain
        // field that DPDK only reads at rx time.
        unsafe { (*self.0.as_ptr()).port = port }
    }

    /// Gives up ownership: the caller must pass the pointer to DPDK (tx,
    /// ring) or back to [`Mbuf::from_raw`].
    #[inline]
    pub(crate) fn into_raw(self) -> *mut rte_mbuf {
        let p = self.0.as_ptr();
        std::mem::forget(self);
        p
    }

    /// Takes ownership of a raw mbuf.
    ///
    /// # Safety
    /// `p` must be a valid mbuf that nothing else owns.
    #[inline]
    pub(crate) unsafe fn from_raw(p: *mut rte_mbuf) -> Mbuf {
        // SAFETY: caller guarantees p is a valid, unowned mbuf (non-null).
        Mbuf(unsafe { NonNull::new_unchecked(p) })
    }
}

impl Drop for Mbuf {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we own the mbuf and give it back exactly once.
        unsafe { dpdk_sys::lbd_rte_pktmbuf_free(self.0.as_ptr()) }
    }
}

/// Whether rx offload flags say the IPv4 header checksum is good.
#[inline(always)]
fn ip_cksum_good(ol_flags: u64) -> bool {
    ol_flags & u64::from(dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_MASK)
        == u64::from(dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_GOOD)
}

/// Up to [`BURST_MAX`] owned mbufs, in order. Dropping it frees what is left.
#[derive(Debug)]
pub struct Burst {
    /// Invariant: `ptrs[..len]` are valid mbufs owned by this burst.
    ptrs: [*mut rte_mbuf; BURST_MAX],
    len: usize,
}

// SAFETY: the burst owns its mbufs exclusively (see Mbuf's Send).
unsafe impl Send for Burst {}

impl Default for Burst {
    fn default() -> Self {
        Self::new()
    }
}

impl Burst {
    /// An empty burst.
    pub const fn new() -> Burst {
        Burst {
            ptrs: [std::ptr::null_mut(); BURST_MAX],
            len: 0,
        }
    }

    /// Number of mbufs held.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when it holds [`BURST_MAX`].
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == BURST_MAX
    }

    /// Appends an mbuf; gives it back if the burst is full.
    #[inline]
    pub fn push(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        if self.is_full() {
            return Err(m);
        }
        self.ptrs[self.len] = m.into_raw();
        self.len += 1;
        Ok(())
    }

    /// Data of mbuf `i`, writable.
    #[inline]
    pub fn data_mut(&mut self, i: usize) -> &mut [u8] {
        assert!(i < self.len, "burst index {i} out of range {}", self.len);
        // SAFETY: i < len, so ptrs[i] is a valid mbuf we own; the slice
        // borrows self mutably.
        unsafe { mbuf_bytes(self.ptrs[i]) }
    }

    /// The port recorded in mbuf `i` (see [`Mbuf::port`]).
    #[inline]
    pub fn port(&self, i: usize) -> u16 {
        assert!(i < self.len, "burst index {i} out of range {}", self.len);
        // SAFETY: i < len, so ptrs[i] is a valid mbuf we own; reads one field.
        unsafe { (*self.ptrs[i]).port }
    }

    /// True if the NIC verified mbuf `i`'s IPv4 header checksum and found
    /// it good (`RTE_MBUF_F_RX_IP_CKSUM_GOOD`), on a port with
    /// [`crate::ChecksumOffload::rx_ipv4`]. False for every other status:
    /// bad, unknown, not checked, or not IPv4.
    #[inline]
    pub fn rx_ipv4_checksum_good(&self, i: usize) -> bool {
        assert!(i < self.len, "burst index {i} out of range {}", self.len);
        // SAFETY: i < len, so ptrs[i] is a valid mbuf we own; reads one field.
        ip_cksum_good(unsafe { (*self.ptrs[i]).ol_flags })
    }

    /// The data of every held mbuf at once, writable: element `i` is mbuf
    /// `i`'s bytes for `i < len()`, and empty beyond. What a pipeline that
    /// takes a whole burst of frames needs.
    #[inline]
    pub fn frames_mut(&mut self) -> [&mut [u8]; BURST_MAX] {
        let len = self.len;
        let ptrs = &self.ptrs;
        std::array::from_fn(|i| {
            if i < len {
                // SAFETY: i < len, so ptrs[i] is a valid mbuf we own; every
                // mbuf of a burst is distinct (each was pushed once, owned),
                // so the slices do not alias, and all of them borrow self
                // mutably for their lifetime.
                unsafe { mbuf_bytes(ptrs[i]) }
            } else {
                &mut []
            }
        })
    }

    /// Extends mbuf `i`'s data by `by` zeroed bytes of its tailroom, for a
    /// reply longer than the frame it is written over (lb-dataplane's
    /// `local::reply_room`). False, and nothing changed, when the tailroom
    /// is too small or the mbuf is a chain (whose first segment is all the
    /// frames of a burst show).
    pub fn grow(&mut self, i: usize, by: u16) -> bool {
        assert!(i < self.len, "burst index {i} out of range {}", self.len);
        let p = self.ptrs[i];
        // SAFETY: i < len, so p is a valid mbuf we own; reads one field.
        if unsafe { (*p).nb_segs } != 1 {
            return false;
        }
        // SAFETY: p is a valid single-segment mbuf we own (above); append
        // returns NULL (nothing changed) or a pointer to `by` writable bytes
        // of its buffer, now part of the data.
        let tail = unsafe { dpdk_sys::lbd_rte_pktmbuf_append(p, by) };
        if tail.is_null() {
            return false;
        }
        // SAFETY: tail points at `by` bytes inside the buffer (above), held
        // through &mut self; zeroing them keeps `data_len` bytes initialised,
        // which the slices of `data_mut` and `frames_mut` rely on.
        unsafe { std::ptr::write_bytes(tail as *mut u8, 0, usize::from(by)) };
        true
    }

    /// Removes and returns all mbufs in order. Those the caller does not
    /// take (a loop that breaks or returns early) are freed when the
    /// iterator is dropped.
    pub fn drain(&mut self) -> Drain<'_> {
        let n = std::mem::replace(&mut self.len, 0);
        Drain {
            ptrs: &self.ptrs[..n],
            next: 0,
        }
    }

    /// Frees the mbufs of more than one segment (a frame larger than one
    /// mbuf's data room, which some PMDs chain whatever the port's
    /// configuration: memif, pcap), keeping the others in order; returns
    /// how many it freed. What [`Mbuf`] and [`Burst::frames_mut`] show of a
    /// chained frame is its first segment only, so a pipeline that reads
    /// frames whole must not see one.
    #[inline]
    pub fn free_chained(&mut self) -> usize {
        let mut kept = 0;
        for i in 0..self.len {
            let p = self.ptrs[i];
            // SAFETY: i < len, so p is a valid mbuf we own; reads one field.
            if unsafe { (*p).nb_segs } > 1 {
                // SAFETY: p is owned and leaves the burst here (it is not
                // copied to `kept`), so it is freed once; the free takes
                // every segment of the chain.
                unsafe { dpdk_sys::lbd_rte_pktmbuf_free(p) };
            } else {
                self.ptrs[kept] = p;
                kept += 1;
            }
        }
        let freed = self.len - kept;
        self.len = kept;
        freed
    }

    /// Frees every mbuf held (bulk free).
    pub fn clear(&mut self) {
        if self.len > 0 {
            // SAFETY: ptrs[..len] are owned mbufs; after this len is 0 so
            // none is freed twice.
            unsafe { dpdk_sys::lbd_rte_pktmbuf_free_bulk(self.ptrs.as_mut_ptr(), self.len as u32) };
            self.len = 0;
        }
    }

    /// Space for DPDK to write up to `BURST_MAX - len` mbuf pointers.
    #[inline]
    pub(crate) fn spare_ptr(&mut self) -> (*mut *mut rte_mbuf, usize) {
        // SAFETY: len <= BURST_MAX, so the offset is within the array (or one past its end).
        (
            unsafe { self.ptrs.as_mut_ptr().add(self.len) },
            BURST_MAX - self.len,
        )
    }

    /// Records that DPDK wrote `n` more owned mbufs after the current ones.
    #[inline]
    pub(crate) fn grew(&mut self, n: usize) {
        debug_assert!(self.len + n <= BURST_MAX);
        self.len += n;
    }

    /// The held mbufs as DPDK's array, for tx or enqueue.
    #[inline]
    pub(crate) fn as_mut_ptr(&mut self) -> *mut *mut rte_mbuf {
        self.ptrs.as_mut_ptr()
    }

    /// Forgets the first `n` mbufs (DPDK took them) and shifts the rest down.
    #[inline]
    pub(crate) fn consumed(&mut self, n: usize) {
        debug_assert!(n <= self.len);
        self.ptrs.copy_within(n..self.len, 0);
        self.len -= n;
    }
}

impl Drop for Burst {
    fn drop(&mut self) {
        self.clear();
    }
}
