//! The Environment Abstraction Layer: initialised once per process.
//!
//! DPDK refuses a second `rte_eal_init` even after `rte_eal_cleanup`, so
//! [`Eal::init`] succeeds at most once per process; later calls return
//! [`EalError::AlreadyInitialised`]. The handle is reference counted: ports,
//! mempools and rings hold a clone, so `rte_eal_cleanup` runs only after the
//! last of them is gone.

use std::ffi::{c_char, c_int, c_void, CString};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::{last_errno, strerror};

static INITIALISED: AtomicBool = AtomicBool::new(false);

/// Errors of [`Eal::init`].
#[derive(Debug, thiserror::Error)]
pub enum EalError {
    /// EAL was already initialised in this process (DPDK allows it once).
    #[error("DPDK EAL is already initialised in this process (it can be initialised once per process)")]
    AlreadyInitialised,
    /// An argument contained a NUL byte.
    #[error("EAL argument {0:?} contains a NUL byte")]
    BadArgument(String),
    /// `rte_eal_init` failed; DPDK's own log lines above say more.
    #[error("DPDK EAL initialisation failed: {0}")]
    InitFailed(String),
}

/// Errors of [`Eal::launch`].
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The lcore is not a worker lcore of this EAL (or is the main lcore).
    #[error("lcore {0} is not an enabled worker lcore")]
    NotWorker(u32),
    /// The lcore is already running something.
    #[error("lcore {0} is busy")]
    Busy(u32),
    /// `rte_eal_remote_launch` failed for another reason.
    #[error("launching on lcore {0} failed: {1}")]
    Failed(u32, String),
    /// Called from a thread other than the main lcore (the thread that
    /// initialised EAL), which DPDK requires of launch and wait.
    #[error("lcores are launched from the main lcore {main} only (called from lcore {caller})")]
    NotMainLcore {
        /// The main lcore.
        main: u32,
        /// The caller's lcore id (`u32::MAX`: not an EAL thread).
        caller: u32,
    },
}

/// An lcore id as DPDK numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LcoreId(pub u32);

#[derive(Debug)]
struct EalInner {
    main: LcoreId,
    workers: Vec<LcoreId>,
}

impl Drop for EalInner {
    fn drop(&mut self) {
        // SAFETY: this is the last handle: every port, mempool and ring holds
        // an Eal clone, so none is in use; workers were joined by their
        // LcoreHandles (or are idle in WAIT state).
        unsafe {
            dpdk_sys::rte_eal_cleanup();
        }
    }
}

/// A handle to the initialised EAL. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Eal(Arc<EalInner>);

impl Eal {
    /// Initialises EAL with `args` (as on a DPDK command line; `args[0]` is
    /// the program name). Succeeds at most once per process.
    pub fn init<S: AsRef<str>>(args: &[S]) -> Result<Eal, EalError> {
        // Arguments first: a bad one leaves EAL free for a later call.
        let owned: Vec<CString> = args
            .iter()
            .map(|a| CString::new(a.as_ref()).map_err(|_| EalError::BadArgument(a.as_ref().to_string())))
            .collect::<Result<_, _>>()?;
        if INITIALISED.swap(true, Ordering::SeqCst) {
            return Err(EalError::AlreadyInitialised);
        }
        // rte_eal_init may permute argv; it gets its own array of pointers
        // into `owned`, which outlives the call.
        let mut argv: Vec<*mut c_char> = owned.iter().map(|c| c.as_ptr() as *mut c_char).collect();
        argv.push(std::ptr::null_mut());
        // SAFETY: argv holds argc valid NUL-terminated strings followed by a
        // NULL; INITIALISED guarantees this is the only call in the process.
        let rc = unsafe { dpdk_sys::rte_eal_init(owned.len() as c_int, argv.as_mut_ptr()) };
        if rc < 0 {
            return Err(EalError::InitFailed(strerror(last_errno())));
        }
        // SAFETY: EAL is initialised; these only read its lcore configuration.
        let main = LcoreId(unsafe { dpdk_sys::rte_get_main_lcore() });
        let mut workers = Vec::new();
        let mut i = u32::MAX; // rte_get_next_lcore(-1, ..) starts at lcore 0
        loop {
            // SAFETY: as above; returns RTE_MAX_LCORE after the last lcore.
            i = unsafe { dpdk_sys::rte_get_next_lcore(i, 1, 0) };
            if i >= dpdk_sys::RTE_MAX_LCORE {
                break;
            }
            workers.push(LcoreId(i));
        }
        Ok(Eal(Arc::new(EalInner { main, workers })))
    }

    /// The main lcore (the thread that called `init`).
    pub fn main_lcore(&self) -> LcoreId {
        self.0.main
    }

    /// Worker lcores, in id order (excludes the main lcore).
    pub fn worker_lcores(&self) -> &[LcoreId] {
        &self.0.workers
    }

    /// Number of Ethernet ports DPDK probed.
    pub fn port_count(&self) -> u16 {
        // SAFETY: EAL is initialised (we hold a handle).
        unsafe { dpdk_sys::rte_eth_dev_count_avail() }
    }

    /// The ids of the ports DPDK probed that no other driver owns (a
    /// bonded or failsafe device owns its sub-ports), in id order. Usually
    /// `0..port_count()`, but ids can have holes: owned sub-ports, or a
    /// device removed.
    pub fn port_ids(&self) -> Vec<u16> {
        const NO_OWNER: u64 = 0; // RTE_ETH_DEV_NO_OWNER
        let max = dpdk_sys::RTE_MAX_ETHPORTS as u64;
        let mut ids = Vec::new();
        let mut next: u64 = 0;
        loop {
            // SAFETY: EAL is initialised; the call only reads the ethdev
            // table. It returns a valid unowned port id >= next, or
            // RTE_MAX_ETHPORTS when there is none.
            next = unsafe { dpdk_sys::rte_eth_find_next_owned_by(next as u16, NO_OWNER) };
            if next >= max {
                return ids;
            }
            ids.push(next as u16);
            next += 1;
        }
    }

    /// The port id of a device by its name (a PCI address such as
    /// `0000:03:00.0`, or a vdev name such as `net_af_packet0`).
    pub fn port_by_name(&self, name: &str) -> Option<u16> {
        let c = CString::new(name).ok()?;
        let mut id: u16 = 0;
        // SAFETY: c is NUL-terminated and id is a valid out-pointer.
        let rc = unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(c.as_ptr(), &mut id) };
        (rc == 0).then_some(id)
    }

    /// Ticks per second of [`crate::rdtsc`].
    pub fn tsc_hz(&self) -> u64 {
        // SAFETY: EAL is initialised; reads a value EAL calibrated.
        unsafe { dpdk_sys::rte_get_tsc_hz() }
    }

    /// Runs `f` on worker lcore `lcore`. Join with [`LcoreHandle::join`].
    pub fn launch<F>(&self, lcore: LcoreId, f: F) -> Result<LcoreHandle, LaunchError>
    where
        F: FnOnce() -> i32 + Send + 'static,
    {
        if !self.0.workers.contains(&lcore) {
            return Err(LaunchError::NotWorker(lcore.0));
        }
        // `rte_eal_remote_launch` and `rte_eal_wait_lcore` are for the main
        // lcore only: two threads launching onto one lcore would race on
        // its function and argument. `Eal` is `Sync`, so check; the handle
        // is `!Send`, so its waits stay on this thread.
        // SAFETY: reads the calling thread's EAL lcore id (a thread-local).
        let caller = unsafe { dpdk_sys::lbd_rte_lcore_id() };
        if caller != self.0.main.0 {
            return Err(LaunchError::NotMainLcore {
                main: self.0.main.0,
                caller,
            });
        }
        let boxed: Box<Box<dyn FnOnce() -> i32 + Send>> = Box::new(Box::new(f));
        let arg = Box::into_raw(boxed) as *mut c_void;
        // Counted before it can start, uncounted by the trampoline once the
        // closure and everything it owned are gone (see `lcores_running`).
        RUNNING.fetch_add(1, Ordering::SeqCst);
        // SAFETY: trampoline matches lcore_function_t; arg is a leaked
        // Box<Box<dyn FnOnce>> that the trampoline reclaims exactly once; we
        // reclaim it ourselves below if the launch did not happen.
        let rc = unsafe { dpdk_sys::rte_eal_remote_launch(Some(trampoline), arg, lcore.0) };
        if rc != 0 {
            // SAFETY: the launch failed, so the trampoline never ran and
            // never will: we still own arg.
            drop(unsafe { Box::from_raw(arg as *mut Box<dyn FnOnce() -> i32 + Send>) });
            RUNNING.fetch_sub(1, Ordering::SeqCst);
            return Err(if rc == -libc_ebusy() {
                LaunchError::Busy(lcore.0)
            } else {
                LaunchError::Failed(lcore.0, strerror(-rc))
            });
        }
        Ok(LcoreHandle {
            lcore,
            _eal: self.clone(),
            joined: false,
            _not_send: PhantomData,
        })
    }
}

const fn libc_ebusy() -> i32 {
    16 // EBUSY on Linux
}

unsafe extern "C" fn trampoline(arg: *mut c_void) -> c_int {
    // SAFETY: arg was produced by Box::into_raw in Eal::launch and is passed
    // to exactly one trampoline call.
    let f = unsafe { Box::from_raw(arg as *mut Box<dyn FnOnce() -> i32 + Send>) };
    // A panic must not unwind into C: turn it into an error code.
    let rc = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || (*f)())).unwrap_or(-1);
    // The closure and its captures are dropped: this lcore touches no
    // mempool any more (its cache stays as it is until the next launch).
    RUNNING.fetch_sub(1, Ordering::SeqCst);
    rc
}

/// Closures launched on worker lcores that have not finished.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Whether a closure launched with [`Eal::launch`] may still be running
/// (on any lcore; joined or not). While one is, mempool counts that
/// include the per-lcore caches can be over by a cache's worth (a cache
/// flush enqueues before it shrinks the cache), so nothing may be
/// concluded from them.
pub(crate) fn lcores_running() -> bool {
    RUNNING.load(Ordering::SeqCst) > 0
}

/// A closure running on a worker lcore. Dropping the handle joins it.
#[derive(Debug)]
pub struct LcoreHandle {
    lcore: LcoreId,
    _eal: Eal,
    joined: bool,
    /// rte_eal_wait_lcore must be called from the main lcore: keep the
    /// handle on the thread that launched.
    _not_send: PhantomData<*const ()>,
}

impl LcoreHandle {
    /// The lcore it runs on.
    pub fn lcore(&self) -> LcoreId {
        self.lcore
    }

    /// Waits for the closure to return and gives its return value
    /// (-1 if it panicked).
    pub fn join(mut self) -> i32 {
        self.wait()
    }

    fn wait(&mut self) -> i32 {
        self.joined = true;
        // SAFETY: the handle is !Send, so this runs on the thread that
        // launched, the main lcore, as rte_eal_wait_lcore requires.
        unsafe { dpdk_sys::rte_eal_wait_lcore(self.lcore.0) }
    }
}

impl Drop for LcoreHandle {
    fn drop(&mut self) {
        if !self.joined {
            self.wait();
        }
    }
}
