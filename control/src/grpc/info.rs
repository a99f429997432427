//! What GetInfo and GetStats report besides the plane's state: the ports
//! (names, drivers, MACs, offloads, VLANs, MTUs, link states and counters
//! kept current by their owner), the control thread's counters and the
//! client-IP affinity table, all fixed for one run but for the counters.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use lb_dataplane::affinity::{self, AffinityTable};
use lb_dataplane::Tick;
use lb_proto::v1 as pb;

use super::new_instance_id;

/// A port's counters: those of `rte_eth_stats` that an operator watches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Dropped by the NIC: no free rx descriptor.
    pub imissed: u64,
    /// Bad frames received.
    pub ierrors: u64,
    /// Frames the NIC failed to send.
    pub oerrors: u64,
    /// Receive failures for want of an mbuf.
    pub rx_nombuf: u64,
}

/// A port as lbd last read it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortSample {
    /// Link up.
    pub up: bool,
    /// Link speed in Mb/s (0: unknown).
    pub speed_mbps: u32,
    /// The device's counters.
    pub counters: PortCounters,
}

/// A port's link and counters as lbd last read them: the owner of the port
/// updates them while lbd runs (lbd: every second), GetInfo and GetStats
/// read them.
#[derive(Debug, Default)]
pub struct PortStatus(Mutex<PortSample>);

impl PortStatus {
    /// A port whose link is in this state, counters at zero.
    pub fn new(up: bool, speed_mbps: u32) -> Arc<PortStatus> {
        Arc::new(PortStatus(Mutex::new(PortSample {
            up,
            speed_mbps,
            counters: PortCounters::default(),
        })))
    }

    fn lock(&self) -> MutexGuard<'_, PortSample> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the link's state; true when it differs from the last one.
    pub fn set_link(&self, up: bool, speed_mbps: u32) -> bool {
        let mut s = self.lock();
        let changed = (s.up, s.speed_mbps) != (up, speed_mbps);
        (s.up, s.speed_mbps) = (up, speed_mbps);
        changed
    }

    /// Records the counters just read.
    pub fn set_counters(&self, c: PortCounters) {
        self.lock().counters = c;
    }

    /// The last sample.
    pub fn get(&self) -> PortSample {
        *self.lock()
    }
}

/// The control thread's own counters (the workers' are in their
/// `WorkerCounters`): lbd's control thread updates them, GetStats reads
/// them.
#[derive(Debug, Default)]
pub struct ControlCounters {
    /// ARP requests sent.
    pub arp_requests: AtomicU64,
    /// Gratuitous ARPs sent.
    pub gratuitous_arps: AtomicU64,
    /// Neighbor solicitations sent (IPv6 next hops).
    pub neighbor_solicitations: AtomicU64,
    /// Unsolicited neighbor advertisements sent (owned IPv6 addresses).
    pub unsolicited_nas: AtomicU64,
    /// Frames held for an unresolved next hop.
    pub held: AtomicU64,
    /// Held frames sent once their next hop answered.
    pub released: AtomicU64,
    /// Held frames dropped: the next hop never answered, the hold queue was
    /// full, or there is no next hop.
    pub neighbor_drops: AtomicU64,
    /// Frames the control thread could not pass to worker 0 (ring full) or
    /// could not build (no mbuf).
    pub send_failures: AtomicU64,
    /// Resolved neighbors (gauge).
    pub neighbors: AtomicU64,
    /// Neighbor table entries, resolved or being resolved (gauge).
    pub neighbor_entries: AtomicU64,
}

impl ControlCounters {
    /// The counters' current values, as GetStats reports them (each read
    /// on its own: they are not read atomically together).
    pub fn get(&self) -> pb::ControlStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        pb::ControlStats {
            arp_requests: g(&self.arp_requests),
            gratuitous_arps: g(&self.gratuitous_arps),
            neighbor_solicitations: g(&self.neighbor_solicitations),
            unsolicited_nas: g(&self.unsolicited_nas),
            held: g(&self.held),
            released: g(&self.released),
            neighbor_drops: g(&self.neighbor_drops),
            send_failures: g(&self.send_failures),
            neighbors: g(&self.neighbors),
            neighbor_entries: g(&self.neighbor_entries),
        }
    }
}

/// One DPDK port, for GetInfo.
#[derive(Debug, Clone)]
pub struct PortInfo {
    /// DPDK port id.
    pub id: u16,
    /// Device name, e.g. `0000:03:00.0` or `net_memif0`.
    pub name: String,
    /// PMD name.
    pub driver: String,
    /// MAC address.
    pub mac: [u8; 6],
    /// IPv4 header checksum offloads in use: (rx, tx).
    pub ipv4_checksum_offload: (bool, bool),
    /// The 802.1Q VLAN id of the port's frames, if tagged.
    pub vlan: Option<u16>,
    /// The largest IP packet the port sends.
    pub mtu: u16,
    /// The port's own addresses with their prefix lengths (`10.0.0.1/24`).
    pub addresses: Vec<String>,
    /// Link state, speed and counters, kept current by the port's owner.
    pub status: Arc<PortStatus>,
}

/// What GetInfo reports besides the plane's revisions: fixed for one run
/// but for the ports' status; and the counters GetStats reports besides
/// the plane's.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    /// lbd's version.
    pub version: String,
    /// A new id on every start, so a client can tell a restart.
    pub instance_id: String,
    /// The ports.
    pub ports: Vec<PortInfo>,
    /// Worker lcores.
    pub workers: u32,
    /// The SNAT addresses of full-NAT services.
    pub snat_addresses: Vec<IpAddr>,
    /// The control thread's counters, kept current by the control thread.
    pub control: Arc<ControlCounters>,
    /// The node's client-IP affinity table, for GetStats' occupancy.
    pub affinity: Option<AffinityInfo>,
}

/// The node's client-IP affinity table and the pipeline's clock (pins
/// expire by it).
#[derive(Clone)]
pub struct AffinityInfo {
    /// The table the workers share.
    pub table: Arc<AffinityTable>,
    /// The workers' current tick.
    pub now: Arc<dyn Fn() -> Tick + Send + Sync>,
    /// The last count, and the second of the pipeline's clock it was made
    /// in.
    last: Arc<Mutex<Option<(u32, u64)>>>,
}

impl AffinityInfo {
    /// The live pins, by a walk of the whole table at most once per second
    /// of the pipeline's clock: the largest table is 1 GiB, and requests
    /// that come together wait for one walk and share its count.
    pub fn live_pins(&self) -> u64 {
        let now = affinity::seconds((self.now)());
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match *last {
            Some((at, n)) if at == now => n,
            _ => {
                let n = self.table.live(now) as u64;
                *last = Some((now, n));
                n
            }
        }
    }
}

impl std::fmt::Debug for AffinityInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AffinityInfo")
            .field("capacity", &self.table.capacity())
            .finish_non_exhaustive()
    }
}

impl ServerInfo {
    /// This build's version and a fresh instance id, control counters at
    /// zero (see [`ServerInfo::with_control`]).
    pub fn new(ports: Vec<PortInfo>, workers: u32) -> ServerInfo {
        ServerInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            instance_id: new_instance_id(),
            ports,
            workers,
            snat_addresses: Vec::new(),
            control: Arc::default(),
            affinity: None,
        }
    }

    /// The same, reporting `snat` as the SNAT addresses.
    pub fn with_snat_addresses(self, snat: Vec<IpAddr>) -> ServerInfo {
        ServerInfo {
            snat_addresses: snat,
            ..self
        }
    }

    /// The same, reporting the control counters `control`.
    pub fn with_control(self, control: Arc<ControlCounters>) -> ServerInfo {
        ServerInfo { control, ..self }
    }

    /// The same, reporting the occupancy of `table`, whose pins expire by
    /// the clock `now`.
    pub fn with_affinity(
        self,
        table: Arc<AffinityTable>,
        now: impl Fn() -> Tick + Send + Sync + 'static,
    ) -> ServerInfo {
        ServerInfo {
            affinity: Some(AffinityInfo {
                table,
                now: Arc::new(now),
                last: Arc::default(),
            }),
            ..self
        }
    }
}
