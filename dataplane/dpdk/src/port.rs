//! Ethernet ports: configure with N rx and N tx queues, start, poll, stop.
//!
//! A [`Port`] is the control handle (configuration, MAC, link, statistics);
//! [`RxQueue`] and [`TxQueue`] are the data-path handles, each taken once and
//! moved to the one lcore that polls it. The device is stopped and closed
//! when the port and all its queue handles are gone, and it keeps its
//! mempool alive until then.

use std::ffi::{c_char, CStr};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use dpdk_sys::{rte_eth_conf, rte_eth_dev_info, rte_eth_link, rte_eth_stats, rte_ether_addr};

use crate::mbuf::{Burst, Mempool};
use crate::{strerror, Eal};

/// Errors of port set-up and control.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// No port with that id.
    #[error("no DPDK port {0}")]
    NoSuchPort(u16),
    /// The port is already configured: a [`Port`] for it is alive.
    #[error("DPDK port {0} is already configured (in use)")]
    InUse(u16),
    /// [`Port::stop`] while queue handles live (lcores may poll them).
    #[error("port {port}: cannot stop while {live} of its queue handles are alive")]
    QueuesInUse {
        /// Port id.
        port: u16,
        /// Live rx and tx queue handles.
        live: usize,
    },
    /// [`Port::stop`] while flow rules on the port are alive (a driver
    /// need not keep them across a stop, and their handles would dangle).
    #[error("port {port}: cannot stop while {live} of its flow rules are alive")]
    FlowRulesInUse {
        /// Port id.
        port: u16,
        /// Live [`crate::flow::FlowRule`]s.
        live: usize,
    },
    /// More queues asked for than the device has.
    #[error("port {port} ({name}) allows at most {max_rx} rx and {max_tx} tx queues, {asked} asked for (one per worker lcore): use fewer worker lcores")]
    TooManyQueues {
        /// Port id.
        port: u16,
        /// Device name.
        name: String,
        /// Queues asked for.
        asked: u16,
        /// Device limit, rx.
        max_rx: u16,
        /// Device limit, tx.
        max_tx: u16,
    },
    /// An MTU the device does not take.
    #[error("port {port} ({name}): MTU {asked} is outside what the device takes ({min}-{max})")]
    MtuOutOfRange {
        /// Port id.
        port: u16,
        /// Device name.
        name: String,
        /// The MTU asked for.
        asked: u16,
        /// The device's smallest.
        min: u16,
        /// The device's largest.
        max: u16,
    },
    /// A DPDK call failed.
    #[error("port {port}: {op} failed: {reason}")]
    Dpdk {
        /// Port id.
        port: u16,
        /// The DPDK function.
        op: &'static str,
        /// DPDK's reason.
        reason: String,
    },
    /// The queue handle was already taken.
    #[error("port {port}: {kind} queue {queue} already taken (or out of range)")]
    QueueTaken {
        /// Port id.
        port: u16,
        /// "rx" or "tx".
        kind: &'static str,
        /// Queue index.
        queue: u16,
    },
}

/// Linux's ENOTSUP (EOPNOTSUPP), which DPDK returns for a call the
/// device does not implement.
const ENOTSUP: i32 = 95;

fn check(port: u16, op: &'static str, rc: i32) -> Result<(), PortError> {
    if rc < 0 {
        Err(PortError::Dpdk {
            port,
            op,
            reason: strerror(-rc),
        })
    } else {
        Ok(())
    }
}

/// How to set a port up.
#[derive(Debug, Clone)]
pub struct PortConfig {
    /// Rx queues (one per worker).
    pub rx_queues: u16,
    /// Tx queues (one per worker).
    pub tx_queues: u16,
    /// Descriptors per rx queue (adjusted to the device's limits).
    pub rx_desc: u16,
    /// Descriptors per tx queue (adjusted to the device's limits).
    pub tx_desc: u16,
    /// MTU to set, if any: one the device does not take fails
    /// [`Port::configure`]. The pool's buffers must hold a frame of it.
    pub mtu: Option<u16>,
    /// Receive every frame, not just those to the port's MAC, broadcast
    /// and (with `allmulticast`) multicast. Off, it is turned off on the
    /// device too, whatever the PMD's default.
    pub promiscuous: bool,
    /// Receive every multicast frame (IPv6 neighbor discovery needs the
    /// solicited-node groups). A device that refuses it while
    /// `promiscuous` is off is made promiscuous instead (logged).
    pub allmulticast: bool,
    /// Have the NIC verify received IPv4 header checksums and fill those
    /// of sent frames that ask for it ([`crate::Mbuf::offload_ipv4_checksum`]),
    /// each where the device offers it ([`Port::checksum_offload`] says
    /// what was turned on).
    pub ipv4_checksum_offload: bool,
}

impl Default for PortConfig {
    fn default() -> Self {
        PortConfig {
            rx_queues: 1,
            tx_queues: 1,
            rx_desc: 1024,
            tx_desc: 1024,
            mtu: None,
            promiscuous: true,
            allmulticast: true,
            ipv4_checksum_offload: true,
        }
    }
}

/// A 48-bit Ethernet address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Whether receive-side scaling spreads flows over the rx queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RssStatus {
    /// One rx queue: nothing to spread.
    SingleQueue,
    /// RSS on, with these `RTE_ETH_RSS_*` hash functions.
    Enabled(u64),
    /// Several queues, but the driver offers no IP/L4 RSS: everything lands
    /// on queue 0 and workers hand flows over in software.
    Unsupported,
}

/// The IPv4 header checksum offloads a port runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChecksumOffload {
    /// Rx: the NIC verifies the IPv4 header checksum of each received
    /// frame and says so in its mbuf ([`crate::Burst::rx_ipv4_checksum_good`]).
    pub rx_ipv4: bool,
    /// Tx: the NIC fills the IPv4 header checksum of the frames marked
    /// with [`crate::Mbuf::offload_ipv4_checksum`].
    pub tx_ipv4: bool,
}

/// What the device is and can do.
#[derive(Debug, Clone)]
pub struct PortInfo {
    /// Port id.
    pub id: u16,
    /// Device name (PCI address or vdev name).
    pub name: String,
    /// Driver name, e.g. `net_af_packet`.
    pub driver: String,
    /// Maximum rx queues.
    pub max_rx_queues: u16,
    /// Maximum tx queues.
    pub max_tx_queues: u16,
    /// NUMA socket (-1 when unknown).
    pub socket: i32,
    /// Rx offload capabilities (`RTE_ETH_RX_OFFLOAD_*`).
    pub rx_offload_capa: u64,
    /// Tx offload capabilities (`RTE_ETH_TX_OFFLOAD_*`).
    pub tx_offload_capa: u64,
    /// The smallest MTU the device takes.
    pub min_mtu: u16,
    /// The largest MTU the device takes, before its frame limit
    /// ([`PortInfo::largest_mtu`]).
    pub max_mtu: u16,
    /// The largest frame the device receives.
    pub max_rx_pktlen: u32,
}

impl PortInfo {
    /// The largest MTU the device takes: `max_mtu`, and no more than its
    /// largest frame less the Ethernet overhead (what `rte_eth_dev_configure`
    /// checks; the overhead is 18 bytes unless the device's limits say).
    pub fn largest_mtu(&self) -> u16 {
        let overhead = if self.max_mtu != u16::MAX && self.max_rx_pktlen > u32::from(self.max_mtu) {
            self.max_rx_pktlen - u32::from(self.max_mtu)
        } else {
            18
        };
        let by_frame = self.max_rx_pktlen.saturating_sub(overhead);
        self.max_mtu.min(u16::try_from(by_frame).unwrap_or(u16::MAX))
    }
}

/// Link state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkStatus {
    /// Carrier up.
    pub up: bool,
    /// Speed in Mbit/s (0 when unknown).
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
}

/// Device counters (`rte_eth_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortStats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets sent.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes sent.
    pub obytes: u64,
    /// Packets the NIC dropped because an rx queue was full.
    pub imissed: u64,
    /// Erroneous packets received.
    pub ierrors: u64,
    /// Failed transmissions.
    pub oerrors: u64,
    /// Rx failures for lack of mbufs.
    pub rx_nombuf: u64,
}

/// The ports a live [`Port`] has configured: one `Port` (and its clones)
/// per device, so that two values cannot hand out the same queue twice or
/// close a device the other still polls.
static CLAIMED: Mutex<Vec<u16>> = Mutex::new(Vec::new());

/// Port `id` taken for one `Port`; given back on drop, which for a
/// configured port is after its `PortInner::drop` has closed the device
/// (fields drop after the body).
#[derive(Debug)]
struct Claim(u16);

impl Claim {
    fn take(id: u16) -> Result<Claim, PortError> {
        let mut c = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
        if c.contains(&id) {
            return Err(PortError::InUse(id));
        }
        c.push(id);
        Ok(Claim(id))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut c = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
        c.retain(|&x| x != self.0);
    }
}

struct PortInner {
    info: PortInfo,
    rss: RssStatus,
    checksum: ChecksumOffload,
    promiscuous: bool,
    started: AtomicBool,
    /// Live [`RxQueue`]s and [`TxQueue`]s. Its lock also serialises
    /// [`Port::start`] and [`Port::stop`] with taking a queue: `stop` is
    /// refused while any queue handle lives, so no lcore can be inside a
    /// burst call while the device stops, and a handle taken after a stop
    /// sees `started` false.
    live_queues: Mutex<usize>,
    /// Serialises the device's control calls (start, stop, counters, link,
    /// MAC, flow rules): ethdev functions must not run on one port from two
    /// threads at once, and `Port` is `Sync`. Holds the number of live flow
    /// rules, which `stop` refuses. Taken before `live_queues` where both
    /// are.
    control: Mutex<usize>,
    rx_taken: Mutex<Vec<bool>>,
    tx_taken: Mutex<Vec<bool>>,
    _pool: Arc<Mempool>,
    _eal: Eal,
    _claim: Claim,
}

impl fmt::Debug for PortInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Port")
            .field("id", &self.info.id)
            .field("name", &self.info.name)
            .field("driver", &self.info.driver)
            .field("rss", &self.rss)
            .field("checksum", &self.checksum)
            .field("started", &self.started.load(Ordering::Relaxed))
            .finish()
    }
}

impl Drop for PortInner {
    fn drop(&mut self) {
        let id = self.info.id;
        if self.started.load(Ordering::Acquire) {
            // SAFETY: no queue handle is left (they hold this Arc), so no
            // lcore polls the device while it stops.
            unsafe { dpdk_sys::rte_eth_dev_stop(id) };
        }
        // SAFETY: as above; the device is stopped and closed exactly once.
        unsafe { dpdk_sys::rte_eth_dev_close(id) };
    }
}

/// A configured Ethernet port.
#[derive(Debug, Clone)]
pub struct Port(Arc<PortInner>);

fn dev_info(id: u16) -> Result<(rte_eth_dev_info, PortInfo), PortError> {
    let mut raw = rte_eth_dev_info::default();
    // SAFETY: raw is a valid out-struct; id is checked by the callee.
    check(id, "rte_eth_dev_info_get", unsafe {
        dpdk_sys::rte_eth_dev_info_get(id, &mut raw)
    })?;
    let mut name = [0 as c_char; 64];
    // SAFETY: name has RTE_ETH_NAME_MAX_LEN (64) bytes, the callee's limit.
    unsafe { dpdk_sys::rte_eth_dev_get_name_by_port(id, name.as_mut_ptr()) };
    // SAFETY: name is zero-initialised and the callee writes a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let driver = if raw.driver_name.is_null() {
        String::new()
    } else {
        // SAFETY: driver_name is a static NUL-terminated string of the PMD.
        unsafe { CStr::from_ptr(raw.driver_name) }
            .to_string_lossy()
            .into_owned()
    };
    // SAFETY: id was accepted by dev_info_get, so it is a valid port.
    let socket = unsafe { dpdk_sys::rte_eth_dev_socket_id(id) };
    let info = PortInfo {
        id,
        name,
        driver,
        max_rx_queues: raw.max_rx_queues,
        max_tx_queues: raw.max_tx_queues,
        socket,
        rx_offload_capa: raw.rx_offload_capa,
        tx_offload_capa: raw.tx_offload_capa,
        min_mtu: raw.min_mtu,
        max_mtu: raw.max_mtu,
        max_rx_pktlen: raw.max_rx_pktlen,
    };
    Ok((raw, info))
}

impl Port {
    /// Configures port `id` with `conf`, rx queues fed from `pool`, and
    /// returns it stopped. RSS over IP addresses and TCP/UDP ports is turned
    /// on when there are several rx queues and the driver supports it (see
    /// [`Port::rss`]).
    pub fn configure(eal: &Eal, id: u16, conf: &PortConfig, pool: Arc<Mempool>) -> Result<Port, PortError> {
        // SAFETY: EAL is initialised; checks an id.
        if unsafe { dpdk_sys::rte_eth_dev_is_valid_port(id) } == 0 {
            return Err(PortError::NoSuchPort(id));
        }
        let claim = Claim::take(id)?;
        let (raw, info) = dev_info(id)?;
        if conf.rx_queues > info.max_rx_queues || conf.tx_queues > info.max_tx_queues {
            return Err(PortError::TooManyQueues {
                port: id,
                name: info.name,
                asked: conf.rx_queues.max(conf.tx_queues),
                max_rx: info.max_rx_queues,
                max_tx: info.max_tx_queues,
            });
        }
        let mut eth = rte_eth_conf::default();
        // SAFETY: reads a constant.
        let wanted = unsafe { dpdk_sys::lbd_rss_ip_tcp_udp() };
        let rss = if conf.rx_queues <= 1 {
            RssStatus::SingleQueue
        } else if raw.flow_type_rss_offloads & wanted != 0 {
            let hf = raw.flow_type_rss_offloads & wanted;
            eth.rxmode.mq_mode = dpdk_sys::RTE_ETH_MQ_RX_RSS;
            eth.rx_adv_conf.rss_conf.rss_hf = hf;
            RssStatus::Enabled(hf)
        } else {
            RssStatus::Unsupported
        };
        // SAFETY: reads a constant.
        let rx_ip = unsafe { dpdk_sys::lbd_rx_offload_ipv4_cksum() };
        // SAFETY: reads a constant.
        let tx_ip = unsafe { dpdk_sys::lbd_tx_offload_ipv4_cksum() };
        let checksum = ChecksumOffload {
            rx_ipv4: conf.ipv4_checksum_offload && raw.rx_offload_capa & rx_ip != 0,
            tx_ipv4: conf.ipv4_checksum_offload && raw.tx_offload_capa & tx_ip != 0,
        };
        if checksum.rx_ipv4 {
            eth.rxmode.offloads |= rx_ip;
        }
        if checksum.tx_ipv4 {
            eth.txmode.offloads |= tx_ip;
        }
        if let Some(mtu) = conf.mtu {
            let max = info.largest_mtu();
            if mtu < info.min_mtu || mtu > max {
                return Err(PortError::MtuOutOfRange {
                    port: id,
                    name: info.name,
                    asked: mtu,
                    min: info.min_mtu,
                    max,
                });
            }
            // Configured with the device (which checks it against the
            // pool's buffers at queue set-up and programs it at start)...
            eth.rxmode.mtu = u32::from(mtu);
        }
        // SAFETY: eth is a fully initialised config; queue counts are within limits.
        check(id, "rte_eth_dev_configure", unsafe {
            dpdk_sys::rte_eth_dev_configure(id, conf.rx_queues, conf.tx_queues, &eth)
        })?;
        let (mut nrx, mut ntx) = (conf.rx_desc, conf.tx_desc);
        // SAFETY: valid out-pointers; the device is configured.
        check(id, "rte_eth_dev_adjust_nb_rx_tx_desc", unsafe {
            dpdk_sys::rte_eth_dev_adjust_nb_rx_tx_desc(id, &mut nrx, &mut ntx)
        })?;
        // A device whose NUMA node is unknown takes queue memory from any
        // node (node 0 may have no hugepages).
        let socket = if info.socket < 0 {
            dpdk_sys::SOCKET_ID_ANY as u32
        } else {
            info.socket as u32
        };
        for q in 0..conf.rx_queues {
            // SAFETY: the device is configured and stopped; a NULL rx_conf
            // means the driver's defaults; the pool outlives the port (Arc).
            check(id, "rte_eth_rx_queue_setup", unsafe {
                dpdk_sys::rte_eth_rx_queue_setup(id, q, nrx, socket, std::ptr::null(), pool.raw())
            })?;
        }
        for q in 0..conf.tx_queues {
            // SAFETY: as above; NULL tx_conf means defaults.
            check(id, "rte_eth_tx_queue_setup", unsafe {
                dpdk_sys::rte_eth_tx_queue_setup(id, q, ntx, socket, std::ptr::null())
            })?;
        }
        if let Some(mtu) = conf.mtu {
            // ... and set now, for devices that apply it only here (the
            // af_packet PMD sets its kernel interface's MTU). A device
            // without the call (ENOTSUP) keeps what the configure recorded.
            // SAFETY: the device is configured.
            let rc = unsafe { dpdk_sys::rte_eth_dev_set_mtu(id, mtu) };
            if rc != -ENOTSUP {
                check(id, "rte_eth_dev_set_mtu", rc)?;
            }
        }
        let mut promiscuous = conf.promiscuous;
        if conf.allmulticast && !promiscuous {
            // SAFETY: the device is configured.
            let rc = unsafe { dpdk_sys::rte_eth_allmulticast_enable(id) };
            if rc < 0 {
                // Virtual devices (af_packet, memif, null) have no such
                // switch, and deliver every frame anyway: not a warning.
                tracing::info!(
                    port = id,
                    "the device cannot receive all multicast ({}): promiscuous instead, which IPv6 neighbor discovery needs",
                    strerror(-rc)
                );
                promiscuous = true;
            }
        }
        if promiscuous {
            // SAFETY: the device is configured.
            let rc = unsafe { dpdk_sys::rte_eth_promiscuous_enable(id) };
            if rc < 0 {
                tracing::warn!(port = id, "cannot enable promiscuous mode: {}", strerror(-rc));
            }
        } else {
            // SAFETY: the device is configured.
            let rc = unsafe { dpdk_sys::rte_eth_promiscuous_disable(id) };
            if rc < 0 {
                tracing::warn!(port = id, "cannot disable promiscuous mode: {}", strerror(-rc));
            }
        }
        // SAFETY: the device is configured; a plain query.
        let promiscuous = unsafe { dpdk_sys::rte_eth_promiscuous_get(id) } == 1;
        Ok(Port(Arc::new(PortInner {
            info,
            rss,
            checksum,
            promiscuous,
            started: AtomicBool::new(false),
            live_queues: Mutex::new(0),
            control: Mutex::new(0),
            rx_taken: Mutex::new(vec![false; conf.rx_queues as usize]),
            tx_taken: Mutex::new(vec![false; conf.tx_queues as usize]),
            _pool: pool,
            _eal: eal.clone(),
            _claim: claim,
        })))
    }

    /// Port id.
    pub fn id(&self) -> u16 {
        self.0.info.id
    }

    /// Device description.
    pub fn info(&self) -> &PortInfo {
        &self.0.info
    }

    /// Whether RSS spreads flows over the rx queues.
    pub fn rss(&self) -> RssStatus {
        self.0.rss
    }

    /// The checksum offloads turned on: those [`PortConfig`] asked for
    /// that the device has.
    pub fn checksum_offload(&self) -> ChecksumOffload {
        self.0.checksum
    }

    /// Whether the device receives frames to every MAC (as it reported
    /// after [`Port::configure`]).
    pub fn promiscuous(&self) -> bool {
        self.0.promiscuous
    }

    /// Starts the device (nothing if it is started). Queue handles may be
    /// alive: their bursts do nothing until the device has started.
    pub fn start(&self) -> Result<(), PortError> {
        let _control = self.control();
        let _serial = self.0.live_queues.lock().unwrap_or_else(|e| e.into_inner());
        if self.0.started.load(Ordering::Acquire) {
            return Ok(());
        }
        // SAFETY: the device is configured with all its queues set up; no
        // other start or stop runs (the lock), and no burst call reaches
        // the driver while `started` is false.
        check(self.id(), "rte_eth_dev_start", unsafe {
            dpdk_sys::rte_eth_dev_start(self.id())
        })?;
        self.0.started.store(true, Ordering::Release);
        Ok(())
    }

    /// Stops the device. Refused ([`PortError::QueuesInUse`]) while any of
    /// its queue handles lives: drop them (join the lcores that poll them)
    /// first.
    pub fn stop(&self) -> Result<(), PortError> {
        let control = self.control();
        if *control > 0 {
            return Err(PortError::FlowRulesInUse {
                port: self.id(),
                live: *control,
            });
        }
        let live = self.0.live_queues.lock().unwrap_or_else(|e| e.into_inner());
        if *live > 0 {
            return Err(PortError::QueuesInUse {
                port: self.id(),
                live: *live,
            });
        }
        if self.0.started.load(Ordering::Acquire) {
            // SAFETY: no queue handle lives and none can be taken while we
            // hold the lock, so no lcore polls the device while it stops.
            check(self.id(), "rte_eth_dev_stop", unsafe {
                dpdk_sys::rte_eth_dev_stop(self.id())
            })?;
            // Only once it stopped: a device whose stop failed is still
            // started (DPDK keeps `dev_started`), and the drop must try
            // again before closing it, which DPDK refuses while started.
            self.0.started.store(false, Ordering::Release);
        }
        Ok(())
    }

    /// The device's control lock, held for one control call; its value
    /// counts the port's live flow rules.
    pub(crate) fn control(&self) -> std::sync::MutexGuard<'_, usize> {
        self.0.control.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device's MTU: the one set ([`PortConfig::mtu`]), else its
    /// default (1500 for an Ethernet device).
    pub fn mtu(&self) -> Result<u16, PortError> {
        let mut mtu = 0u16;
        // SAFETY: valid out-pointer; the port is configured.
        check(self.id(), "rte_eth_dev_get_mtu", unsafe {
            dpdk_sys::rte_eth_dev_get_mtu(self.id(), &mut mtu)
        })?;
        Ok(mtu)
    }

    /// The port's MAC address.
    pub fn mac(&self) -> MacAddr {
        let _control = self.control();
        let mut a = rte_ether_addr::default();
        // SAFETY: valid port, valid out-pointer.
        unsafe { dpdk_sys::rte_eth_macaddr_get(self.id(), &mut a) };
        MacAddr(a.addr_bytes)
    }

    /// Link state, without waiting.
    pub fn link(&self) -> LinkStatus {
        let _control = self.control();
        let mut l = rte_eth_link::default();
        // SAFETY: valid port, valid out-pointer.
        unsafe { dpdk_sys::rte_eth_link_get_nowait(self.id(), &mut l) };
        LinkStatus {
            up: l.link_status() != 0,
            speed_mbps: l.link_speed,
            full_duplex: l.link_duplex() != 0,
        }
    }

    /// Device counters.
    pub fn stats(&self) -> Result<PortStats, PortError> {
        let _control = self.control();
        let mut s = rte_eth_stats::default();
        // SAFETY: valid port, valid out-pointer.
        check(self.id(), "rte_eth_stats_get", unsafe {
            dpdk_sys::rte_eth_stats_get(self.id(), &mut s)
        })?;
        Ok(PortStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    fn take(&self, kind: &'static str, queue: u16) -> Result<(), PortError> {
        let mut live = self.0.live_queues.lock().unwrap_or_else(|e| e.into_inner());
        let taken = if kind == "rx" {
            &self.0.rx_taken
        } else {
            &self.0.tx_taken
        };
        let mut t = taken.lock().unwrap_or_else(|e| e.into_inner());
        match t.get_mut(queue as usize) {
            Some(slot) if !*slot => {
                *slot = true;
                *live += 1;
                Ok(())
            }
            _ => Err(PortError::QueueTaken {
                port: self.id(),
                kind,
                queue,
            }),
        }
    }

    /// The handle for rx queue `queue`; each can be taken once.
    pub fn rx_queue(&self, queue: u16) -> Result<RxQueue, PortError> {
        self.take("rx", queue)?;
        Ok(RxQueue {
            port: self.0.clone(),
            id: self.id(),
            queue,
        })
    }

    /// The handle for tx queue `queue`; each can be taken once.
    pub fn tx_queue(&self, queue: u16) -> Result<TxQueue, PortError> {
        self.take("tx", queue)?;
        Ok(TxQueue {
            port: self.0.clone(),
            id: self.id(),
            queue,
        })
    }
}

/// One rx queue of a port, polled by exactly one lcore.
#[derive(Debug)]
pub struct RxQueue {
    port: Arc<PortInner>,
    id: u16,
    queue: u16,
}

impl RxQueue {
    /// Port id.
    pub fn port_id(&self) -> u16 {
        self.id
    }

    /// Queue index.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// Receives up to the burst's free space; returns how many arrived.
    #[inline]
    pub fn rx_burst(&mut self, burst: &mut Burst) -> usize {
        let (ptr, room) = burst.spare_ptr();
        // Acquire: a start's device setup happens before the first call.
        if room == 0 || !self.port.started.load(Ordering::Acquire) {
            return 0;
        }
        // SAFETY: &mut self makes this the only poller of (port, queue);
        // ptr has room for `room` pointers; DPDK writes n owned mbufs there.
        let n = unsafe { dpdk_sys::lbd_rte_eth_rx_burst(self.id, self.queue, ptr, room as u16) } as usize;
        burst.grew(n);
        n
    }
}

impl Drop for RxQueue {
    fn drop(&mut self) {
        *self.port.live_queues.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
    }
}

impl Drop for TxQueue {
    fn drop(&mut self) {
        *self.port.live_queues.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
    }
}

/// One tx queue of a port, used by exactly one lcore.
#[derive(Debug)]
pub struct TxQueue {
    port: Arc<PortInner>,
    id: u16,
    queue: u16,
}

impl TxQueue {
    /// Port id.
    pub fn port_id(&self) -> u16 {
        self.id
    }

    /// Queue index.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// Sends from the front of the burst; what the NIC did not take stays
    /// in the burst (the caller frees it, counting a drop, or retries).
    #[inline]
    pub fn tx_burst(&mut self, burst: &mut Burst) -> usize {
        // Acquire: a start's device setup happens before the first call.
        if burst.is_empty() || !self.port.started.load(Ordering::Acquire) {
            return 0;
        }
        // SAFETY: &mut self makes this the only user of (port, queue); the
        // burst's first len pointers are owned mbufs; DPDK takes ownership
        // of the first n it returns.
        let n = unsafe {
            dpdk_sys::lbd_rte_eth_tx_burst(self.id, self.queue, burst.as_mut_ptr(), burst.len() as u16)
        } as usize;
        burst.consumed(n);
        n
    }
}
