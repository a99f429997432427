//! The control thread: the gRPC API (with the compiler and counter
//! aggregation behind it, in `lb_control`) and the neighbor table, on a
//! single-threaded tokio runtime on the main lcore.
//!
//! Workers never wait for it: they forward with the last published
//! snapshot whatever happens here. What it does for them, every
//! [`NEIGHBOR_PERIOD`]:
//! - takes the frames workers could not send for want of a next-hop MAC
//!   and holds them in the [`NeighborTable`], asking with ARP (IPv4) or a
//!   neighbor solicitation (IPv6);
//! - feeds the ARP replies and neighbor advertisements workers saw into
//!   the table (and, as hints, the MACs that ARP requests and neighbor
//!   solicitations to lbd named), releases the held frames with the
//!   learned MAC, and publishes the resolved neighbors into the snapshot
//!   (`ControlPlane::set_neighbors`) when they change;
//!
//! It never waits for the plane's lock, which a commit holds while it
//! persists and compiles (seconds for a big Resync), because everything
//! else on this thread (the gRPC server, the link watch) would wait with
//! it: it reads the published snapshot through the workers' `ArcSwap`, and
//! a publication that finds the lock taken is retried at the next step.
//! - keeps gateways and backends on connected subnets resolved ahead of
//!   traffic, refreshing them before they age out;
//! - announces every owned address (interface, VIP, SNAT) once its port's
//!   link is up, again whenever the link comes back up, and whenever a new
//!   address appears: IPv4 with gratuitous ARPs, IPv6 with unsolicited
//!   neighbor advertisements, as often as [`crate::announce`] says.
//!   Nothing is sent on a port whose link is down; when it comes up, its
//!   unresolved neighbors are asked for at once.
//!
//! Each neighbor step also reads each port's link state (for the above and
//! for GetInfo) and logs link changes (`port link up` / `port link down`);
//! every [`PORT_PERIOD`] it reads the ports' counters for GetStats.
//!
//! Frames it sends go through worker 0's control ring, with the port in the
//! mbuf.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, TryLockError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use dpdk::ring::{Consumer, Producer};
use dpdk::{Burst, Mbuf, Mempool, Port};
use lb_control::grpc::{ControlCounters, PortCounters, PortStatus, ServerInfo, SharedPlane};
use lb_control::listen::Listener;
use lb_control::metrics::MetricsListener;
use lb_dataplane::checksum::ChecksumOffload;
use lb_dataplane::local::{
    write_arp_request, write_gratuitous_arp, write_neighbor_solicitation, write_unsolicited_na,
};
use lb_dataplane::snapshot::{Cidr, Snapshot};
use lb_dataplane::wire::{self, MacAddr};

use crate::announce::Announcements;
use crate::neighbor::{Hold, NeighborTable, News, Request, Timers};

/// How often the neighbor work runs, the ports' link states read with it
/// (`rte_eth_link_get_nowait`): announcing and neighbor requests wait for
/// a link to be up, so a link that comes up is used within this.
pub const NEIGHBOR_PERIOD: Duration = Duration::from_millis(5);

/// How often the ports' counters are read.
pub const PORT_PERIOD: Duration = Duration::from_secs(1);

/// Capacity of each worker's ring of frames waiting for a next hop, and
/// the most frames a step takes from one (a ring's worth).
pub const HELD_RING: u32 = 256;

/// Slots of worker 0's ring that a step's announcements leave free for
/// the frames released to next hops that answered (a held ring's worth)
/// and for requests; announcements that find no room go at the next step.
pub const ANNOUNCE_RING_RESERVE: usize = HELD_RING as usize;

/// Capacity of the channel that brings the workers' neighbor news (ARP
/// replies, neighbor advertisements, requests to lbd) to the control thread; also the most
/// news one step takes.
pub const NEWS_CHANNEL: usize = 1024;

/// Whether `port`'s link was up at the last read (a port without a status
/// counts as up).
fn link_up(ports: &[(Port, Arc<PortStatus>)], port: u16) -> bool {
    ports
        .iter()
        .find(|(p, _)| p.id() == port)
        .is_none_or(|(_, status)| status.get().up)
}

/// Counts one event.
fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// What the control thread owns.
#[derive(Debug)]
pub struct Control {
    /// The control plane, shared with the gRPC service.
    pub plane: SharedPlane,
    /// GetInfo's answer.
    pub info: ServerInfo,
    /// The bound gRPC listener.
    pub listener: Listener,
    /// The bound Prometheus endpoint, if `--metrics` was given.
    pub metrics: Option<MetricsListener>,
    /// Set by SIGINT/SIGTERM.
    pub stop: Arc<AtomicBool>,
    /// For the frames it builds.
    pub pool: Arc<Mempool>,
    /// To worker 0, which transmits.
    pub to_worker: Producer,
    /// From every worker: frames waiting for a next hop.
    pub held_in: Vec<Consumer>,
    /// From every worker: what frames told of neighbors.
    pub news: Receiver<News>,
    /// Each port with the status GetInfo and GetStats report.
    pub ports: Vec<(Port, Arc<PortStatus>)>,
}

/// Runs the control thread until `stop` is set and the gRPC server has
/// shut down. Returns the rings of frames waiting for a next hop (main
/// counts what is left in them once every lcore has stopped), whatever
/// the outcome, and the outcome.
pub fn run(rt: tokio::runtime::Runtime, c: Control) -> (Vec<Consumer>, anyhow::Result<()>) {
    let Control {
        plane,
        info,
        listener,
        metrics,
        stop,
        pool,
        to_worker,
        held_in,
        news,
        ports,
    } = c;
    // Its counters: the ones GetStats reports.
    let stats = Arc::clone(&info.control);
    let snapshots = match plane.lock() {
        Ok(p) => p.snapshot_handle(),
        Err(_) => {
            stop.store(true, Ordering::Relaxed);
            return (held_in, Err(anyhow::anyhow!("control plane lock poisoned")));
        }
    };
    let mut nb = Neighbors {
        plane: Arc::clone(&plane),
        snapshots,
        unpublished: false,
        pool,
        to_worker,
        held_in,
        news,
        stats,
        table: NeighborTable::new(Timers::default()),
        announcements: Announcements::default(),
        ports: ports.clone(),
        wanted_revision: None,
        wanted_left: 0,
        requests: Vec::new(),
        dropped: Vec::new(),
    };
    let shutdown = stopped(Arc::clone(&stop));
    let (metrics_plane, metrics_info) = (Arc::clone(&plane), info.clone());
    rt.block_on(async move {
        // A server that fails (e.g. its socket) stops lbd: the other two
        // loop until `stop`, so the thread would run on without the API.
        let server_stop = Arc::clone(&stop);
        let server = async move {
            let r = listener.serve(plane, info, shutdown).await;
            if r.is_err() {
                server_stop.store(true, Ordering::Relaxed);
            }
            r
        };
        let neighbors = async {
            let mut tick = tokio::time::interval(NEIGHBOR_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut poisoned = false;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                if stop_if_poisoned(&nb.plane, &stop) {
                    poisoned = true;
                    break;
                }
                nb.step(Instant::now());
            }
            nb.shutdown();
            // Workers may still be handing frames in: main drains and
            // counts what is left once every lcore has stopped.
            (std::mem::take(&mut nb.held_in), poisoned)
        };
        // Stops with the others; a metrics endpoint cannot fail once bound
        // (accept errors are retried).
        let metrics = async {
            if let Some(m) = metrics {
                if let Err(e) = m
                    .serve(metrics_plane, metrics_info, stopped(Arc::clone(&stop)))
                    .await
                {
                    tracing::error!("--metrics: {e}");
                }
            }
        };
        let port_watch = async {
            let mut tick = tokio::time::interval(PORT_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                read_counters(&ports);
            }
        };
        let (r, (held_in, poisoned), (), ()) = tokio::join!(server, neighbors, port_watch, metrics);
        let r = r.map_err(anyhow::Error::from).and_then(|()| {
            if poisoned {
                Err(anyhow::anyhow!("control plane lock poisoned by a panic"))
            } else {
                Ok(())
            }
        });
        (held_in, r)
    })
}

/// Completes once `stop` is set (polled every 20 ms).
async fn stopped(stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether a panic poisoned the plane's lock; if so, says so and sets
/// `stop`. A panic while a request held the lock leaves every later request
/// failing and the neighbor table unpublished for good, while the health
/// service still says SERVING: lbd stops instead (exit 1), so that a
/// supervisor restarts it. Every commit is already durable in the state
/// file.
fn stop_if_poisoned(plane: &SharedPlane, stop: &AtomicBool) -> bool {
    if !plane.is_poisoned() {
        return false;
    }
    tracing::error!("a panic poisoned the control plane's lock: stopping lbd, which must be restarted");
    stop.store(true, Ordering::Relaxed);
    true
}

/// Gives the plane the resolved neighbors unless a commit holds its lock;
/// false when it must be tried again. A poisoned lock is given up on: the
/// next step stops lbd (see `run`).
fn publish(plane: &SharedPlane, resolved: impl FnOnce() -> Vec<(IpAddr, [u8; 6])>) -> bool {
    match plane.try_lock() {
        Ok(mut p) => {
            if let Err(e) = p.set_neighbors(resolved()) {
                tracing::error!("publishing neighbors: {e}");
            }
            true
        }
        Err(TryLockError::WouldBlock) => false,
        Err(TryLockError::Poisoned(_)) => true,
    }
}

struct Neighbors {
    plane: SharedPlane,
    /// The published snapshot, read without the plane's lock.
    snapshots: Arc<ArcSwap<Snapshot>>,
    /// The table changed and the plane has not taken its neighbors yet.
    unpublished: bool,
    pool: Arc<Mempool>,
    to_worker: Producer,
    held_in: Vec<Consumer>,
    news: Receiver<News>,
    stats: Arc<ControlCounters>,
    table: NeighborTable<Mbuf>,
    /// Which owned addresses are due to be announced.
    announcements: Announcements,
    /// Each port with the status GetInfo reports, whose link each step
    /// reads.
    ports: Vec<(Port, Arc<PortStatus>)>,
    /// The snapshot revision `set_wanted` last saw.
    wanted_revision: Option<u64>,
    /// How many wanted addresses `set_wanted` last left unmarked (logged
    /// when it changes).
    wanted_left: usize,
    requests: Vec<Request>,
    dropped: Vec<Mbuf>,
}

impl Neighbors {
    fn step(&mut self, now: Instant) {
        let snap = self.snapshots.load_full();
        // A link that went down forgets what was announced on it; one that
        // came up is announced on, and its unresolved neighbors are asked
        // for at once.
        let mut came_up = false;
        for (p, status) in &self.ports {
            let Some(up) = watch_link(p, status) else { continue };
            came_up |= up;
            if up {
                self.table.link_up(p.id());
            } else {
                self.announcements.link_down(p.id());
            }
        }
        if self.wanted_revision != Some(snap.revision()) {
            self.wanted_revision = Some(snap.revision());
            let left = self.table.set_wanted(&wanted(&snap));
            if left != std::mem::replace(&mut self.wanted_left, left) && left > 0 {
                tracing::warn!(
                    left,
                    "more gateways and connected backends than the neighbor table keeps resolved ahead of traffic: {left} backends are resolved when traffic needs them"
                );
            }
            self.announce(&snap, now);
        } else if came_up || self.announcements.is_due(now) {
            self.announce(&snap, now);
        }
        // ARP replies and neighbor advertisements (and hints from requests
        // to lbd): release what waited. At
        // most a channel's worth per step, for the reason given below for
        // the held frames (a flood of replies must not keep this step from
        // its requests, publishing and the gRPC server).
        for _ in 0..NEWS_CHANNEL {
            let Ok(news) = self.news.try_recv() else {
                break;
            };
            for m in self.table.news(news, now) {
                self.release(m, news.mac);
            }
        }
        // Frames waiting for a next hop: at most a ring's worth from each
        // worker per step. Unbounded, a worker filling its ring as fast as
        // this thread empties it (a flood towards an unresolved next hop)
        // kept the step from ever reaching the ARP requests below, so the
        // next hop never resolved; the rest waits in the ring (or is
        // dropped by the worker when it is full, counted).
        let mut burst = Burst::new();
        for i in 0..self.held_in.len() {
            let mut taken = 0;
            while taken < HELD_RING as usize {
                let n = self.held_in[i].dequeue_burst(&mut burst);
                if n == 0 {
                    break;
                }
                taken += n;
                for m in burst.drain() {
                    self.hold(&snap, m);
                }
            }
        }
        self.table.poll(now, &mut self.requests, &mut self.dropped);
        for m in self.dropped.drain(..) {
            inc(&self.stats.neighbor_drops);
            drop(m);
        }
        let requests = std::mem::take(&mut self.requests);
        for r in &requests {
            self.request(&snap, *r);
        }
        self.requests = requests;
        self.requests.clear();
        self.stats
            .neighbor_entries
            .store(self.table.len() as u64, Ordering::Relaxed);
        if self.table.take_changed() {
            self.unpublished = true;
            self.stats
                .neighbors
                .store(self.table.resolved().len() as u64, Ordering::Relaxed);
        }
        if self.unpublished {
            self.unpublished = !publish(&self.plane, || self.table.resolved());
        }
    }

    /// A frame whose next hop had no MAC: hold it, or send it if the MAC
    /// arrived since.
    fn hold(&mut self, snap: &Snapshot, m: Mbuf) {
        // The pipeline's output: its IPv4 header checksum may be the 0 it
        // leaves for the NIC to fill (`worker::Offloads::tx_ipv4`), so it
        // is not checked again.
        let ours = ChecksumOffload {
            rx_ipv4_verified: true,
            ..ChecksumOffload::NONE
        };
        let Some((via, via_port)) = wire::parse_with(m.data(), &ours)
            .ok()
            .and_then(|p| snap.unresolved_hop(p.dst))
            .map(|h| (h.via, h.port))
        else {
            inc(&self.stats.neighbor_drops);
            return;
        };
        match self.table.hold(via, via_port, m) {
            Hold::Waiting => inc(&self.stats.held),
            Hold::Ready(m, mac) => self.release(m, mac),
            Hold::Full(_) => inc(&self.stats.neighbor_drops),
        }
    }

    /// Sends a held frame to `mac`.
    fn release(&mut self, mut m: Mbuf, mac: [u8; 6]) {
        if let Some(dst) = m.data_mut().get_mut(..6) {
            dst.copy_from_slice(&mac);
        }
        // Counted as released only once worker 0 has it; otherwise it is a
        // send failure (and freed), not both.
        if self.send(m) {
            inc(&self.stats.released);
        }
    }

    /// Asks for `r.target` from the port's own address on the target's
    /// subnet, else its first of the family (a port without one cannot
    /// ask; its entry then gives up, `no_neighbor`). A request from another
    /// subnet's address is dropped by routers that check the sender
    /// (Linux's `rp_filter`, Cisco's "wrong cable").
    fn request(&mut self, snap: &Snapshot, r: Request) {
        if !self.link_up(r.port) {
            return;
        }
        let Some(pc) = snap.port(r.port) else { return };
        let Some(src) = source_for(pc.cidrs(), r.target) else {
            return;
        };
        let (mac, vlan) = (MacAddr(pc.mac()), pc.vlan());
        let counter = match (src, r.target) {
            (IpAddr::V4(src), IpAddr::V4(target)) => self
                .build(r.port, |buf| write_arp_request(buf, mac, src, target, vlan).ok())
                .then_some(&self.stats.arp_requests),
            (IpAddr::V6(src), IpAddr::V6(target)) => self
                .build(r.port, |buf| {
                    write_neighbor_solicitation(buf, mac, &src, &target, vlan).ok()
                })
                .then_some(&self.stats.neighbor_solicitations),
            _ => None,
        };
        if let Some(c) = counter {
            inc(c);
        }
    }

    /// Whether `port`'s link was up at this step (a port without a status
    /// counts as up).
    fn link_up(&self, port: u16) -> bool {
        link_up(&self.ports, port)
    }

    /// Announces what [`Announcements`] says is due, as far as worker 0's
    /// ring has room beyond [`ANNOUNCE_RING_RESERVE`]: a gratuitous ARP for
    /// an owned IPv4 address, an unsolicited neighbor advertisement for an
    /// owned IPv6 one, on ports whose link is up (see `announce.rs` for how
    /// often). One that could not be sent stays due for the next step.
    fn announce(&mut self, snap: &Snapshot, now: Instant) {
        let owned: HashSet<(u16, IpAddr)> = (0..snap.port_count() as u16)
            .filter_map(|port| Some((port, snap.port(port)?.local_addrs())))
            .flat_map(|(port, l)| {
                let v4 = l.ipv4().iter().map(move |&a| (port, IpAddr::V4(a)));
                v4.chain(l.ipv6().iter().map(move |&a| (port, IpAddr::V6(a))))
            })
            .collect();
        let ports = &self.ports;
        // Worker 0's ring also carries the frames released to resolved
        // next hops and the requests: a round of many announcements leaves
        // them room, and what does not fit goes at the next step.
        let room = (self.to_worker.free_count() as usize).saturating_sub(ANNOUNCE_RING_RESERVE);
        let due = self.announcements.due(&owned, |p| link_up(ports, p), now, room);
        let mut sent = 0;
        for (i, &(port, ip)) in due.iter().enumerate() {
            let Some((mac, vlan)) = snap.port(port).map(|pc| (MacAddr(pc.mac()), pc.vlan())) else {
                continue;
            };
            let (ok, counter) = match ip {
                IpAddr::V4(a) => (
                    self.build(port, |buf| write_gratuitous_arp(buf, mac, a, vlan).ok()),
                    &self.stats.gratuitous_arps,
                ),
                IpAddr::V6(a) => (
                    self.build(port, |buf| write_unsolicited_na(buf, mac, &a, vlan).ok()),
                    &self.stats.unsolicited_nas,
                ),
            };
            if ok {
                inc(counter);
                self.announcements.sent(port, ip, now);
                sent += 1;
            }
            // `due` is sorted by port: log each port's count once.
            if due.get(i + 1).is_none_or(|&(next, _)| next != port) && sent > 0 {
                tracing::info!(port, addresses = sent, "owned addresses announced");
                sent = 0;
            }
        }
    }

    /// Allocates an mbuf, lets `write` fill it, sends it on `port`.
    fn build(&mut self, port: u16, write: impl FnOnce(&mut [u8]) -> Option<usize>) -> bool {
        let Some(mut m) = self.pool.alloc() else {
            inc(&self.stats.send_failures);
            return false;
        };
        // Room for the largest frame built here: an NS or NA with its
        // option, 86 bytes (90 with a VLAN tag); ARP needs 60.
        let Some(buf) = m.append(128) else {
            inc(&self.stats.send_failures);
            return false;
        };
        let Some(len) = write(buf) else {
            inc(&self.stats.send_failures);
            return false;
        };
        if !m.set_len(len) {
            inc(&self.stats.send_failures);
            return false;
        }
        m.set_port(port);
        self.send(m)
    }

    fn send(&mut self, m: Mbuf) -> bool {
        if self.to_worker.enqueue(m).is_err() {
            inc(&self.stats.send_failures);
            return false;
        }
        true
    }

    fn shutdown(&mut self) {
        let n = self.table.held();
        drop(self.table.clear_held());
        self.stats.neighbor_drops.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Reads each port's counters.
fn read_counters(ports: &[(Port, Arc<PortStatus>)]) {
    for (p, status) in ports {
        if let Ok(s) = p.stats() {
            status.set_counters(PortCounters {
                rx_packets: s.ipackets,
                rx_bytes: s.ibytes,
                tx_packets: s.opackets,
                tx_bytes: s.obytes,
                imissed: s.imissed,
                ierrors: s.ierrors,
                oerrors: s.oerrors,
                rx_nombuf: s.rx_nombuf,
            });
        }
    }
}

/// Reads `p`'s link into `status` and logs a change; returns the new state
/// if the link went up or down.
fn watch_link(p: &Port, status: &PortStatus) -> Option<bool> {
    let was_up = status.get().up;
    let l = p.link();
    if status.set_link(l.up, l.speed_mbps) {
        if l.up {
            tracing::info!(port = p.id(), speed_mbps = l.speed_mbps, "port link up");
        } else {
            tracing::warn!(port = p.id(), "port link down");
        }
    }
    (l.up != was_up).then_some(l.up)
}

/// Port `p`'s gateway of one family.
fn gateway(snap: &Snapshot, p: u16, v4: bool) -> Option<IpAddr> {
    let pc = snap.port(p)?;
    if v4 {
        pc.gateway_v4().map(IpAddr::V4)
    } else {
        pc.gateway_v6().map(IpAddr::V6)
    }
}

/// The address of `cidrs` (a port's) to ask for `target` from: the one
/// whose prefix holds it (the longest, as routes are matched), else the
/// first of its family.
fn source_for(cidrs: &[Cidr], target: IpAddr) -> Option<IpAddr> {
    cidrs
        .iter()
        .filter(|c| c.contains(target))
        .max_by_key(|c| c.prefix())
        .or_else(|| cidrs.iter().find(|c| c.addr().is_ipv4() == target.is_ipv4()))
        .map(|c| c.addr())
}

/// Gateways, then backends on connected subnets (each list sorted, no
/// address twice): resolved ahead of traffic, in that order of importance
/// ([`NeighborTable::set_wanted`]).
fn wanted(snap: &Snapshot) -> Vec<(IpAddr, u16)> {
    let mut gateways: Vec<(IpAddr, u16)> = (0..snap.port_count() as u16)
        .flat_map(|p| [gateway(snap, p, true), gateway(snap, p, false)].map(|g| g.map(|g| (g, p))))
        .flatten()
        .collect();
    gateways.sort();
    gateways.dedup();
    let mut backends = Vec::new();
    for s in snap.services() {
        for b in s.backends() {
            if let Some(p) = snap.connected_port(b.addr) {
                if !gateways.iter().any(|&(g, _)| g == b.addr) {
                    backends.push((b.addr, p));
                }
            }
        }
    }
    backends.sort();
    backends.dedup();
    gateways.append(&mut backends);
    gateways
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use lb_control::plane::{ControlPlane, InterfaceConfig, NodeConfig};

    use super::*;

    fn plane() -> SharedPlane {
        let node = NodeConfig {
            interfaces: vec![InterfaceConfig {
                port: 0,
                mac: [2, 0, 0, 0, 0, 1],
                cidr: "10.0.0.1/24".parse().unwrap(),
                gateway: None,
                vlan: None,
                mtu: None,
            }],
            ..NodeConfig::default()
        };
        Arc::new(Mutex::new(ControlPlane::open(node, None).unwrap()))
    }

    const HOP: ([u8; 6], &str) = ([2, 0, 0, 0, 0, 9], "10.0.0.9");

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// A request goes out from the port's address on the target's subnet:
    /// a router that checks the sender drops one from another subnet.
    #[test]
    fn requests_are_sent_from_the_address_on_the_targets_subnet() {
        let cidrs: Vec<Cidr> = [
            "10.0.0.1/16",
            "192.168.5.1/24",
            "10.0.5.1/24",
            "fd00::1/64",
            "fd01::1/64",
        ]
        .iter()
        .map(|c| c.parse().unwrap())
        .collect();
        for (target, src) in [
            ("192.168.5.254", "192.168.5.1"),
            ("10.0.0.9", "10.0.0.1"),
            // Two prefixes hold it: the longer's address.
            ("10.0.5.9", "10.0.5.1"),
            // No prefix holds it (a gateway beyond the port's subnets).
            ("172.16.0.1", "10.0.0.1"),
            ("fd01::9", "fd01::1"),
            ("2001:db8::1", "fd00::1"),
        ] {
            assert_eq!(source_for(&cidrs, ip(target)), Some(ip(src)), "{target}");
        }
        assert_eq!(source_for(&cidrs[..2], ip("fd00::9")), None);
    }

    /// Gateways come first in the wanted list, so that a table that cannot
    /// keep every connected backend resolved keeps the gateways; no
    /// address is listed twice, even a backend at a gateway's address.
    #[test]
    fn gateways_are_wanted_before_connected_backends() {
        use lb_dataplane::snapshot::{BackendSpec, ServiceSpec};
        use lb_dataplane::SnapshotBuilder;
        let mut b = SnapshotBuilder::new(1);
        b.interface(
            0,
            [2, 0, 0, 0, 0, 1],
            "10.0.0.1/16".parse().unwrap(),
            Some(ip("10.0.255.254")),
        );
        b.interface(
            1,
            [2, 0, 0, 0, 0, 2],
            "10.9.0.1/24".parse().unwrap(),
            Some(ip("10.9.0.254")),
        );
        let web = b.service(ServiceSpec::new("default/web")).unwrap();
        // 10.0.0.3 twice (two ports), one at a gateway's address, one not
        // on a connected subnet.
        for (a, port) in [
            ("10.0.0.7", 80),
            ("10.0.0.3", 80),
            ("10.0.255.254", 80),
            ("10.0.0.3", 81),
            ("192.0.2.1", 80),
        ] {
            b.backend(web, BackendSpec::new(ip(a), port)).unwrap();
        }
        let snap = b.build().unwrap();
        assert_eq!(
            wanted(&snap),
            vec![
                (ip("10.0.255.254"), 0),
                (ip("10.9.0.254"), 1),
                (ip("10.0.0.3"), 0),
                (ip("10.0.0.7"), 0),
            ]
        );
    }

    fn hops() -> Vec<(IpAddr, [u8; 6])> {
        vec![(HOP.1.parse().unwrap(), HOP.0)]
    }

    /// While a commit holds the lock, publishing neither waits nor reads
    /// the table; it is retried, and lands once the lock is free.
    #[test]
    fn publishing_neighbors_never_waits_for_a_commit() {
        let plane = plane();
        let commit = plane.lock().unwrap();
        let p = Arc::clone(&plane);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(publish(&p, || unreachable!("read while locked"))));
        let tried = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("publish waited for the lock");
        assert!(!tried, "a taken lock asks for a retry");
        drop(commit);
        assert!(publish(&plane, hops));
        assert_eq!(plane.lock().unwrap().neighbors(), &hops()[..]);
        let snap = plane.lock().unwrap().snapshot();
        assert_eq!(
            snap.next_hop(HOP.1.parse().unwrap()).map(|h| h.dst_mac),
            Some(HOP.0)
        );
    }

    #[test]
    fn a_poisoned_plane_is_given_up_on() {
        let plane = plane();
        let p = Arc::clone(&plane);
        let _ = std::thread::spawn(move || {
            let _g = p.lock().unwrap();
            panic!("poison the lock");
        })
        .join();
        assert!(plane.is_poisoned());
        assert!(publish(&plane, || unreachable!("not read")));
        // ... and lbd is stopped rather than left running without its API.
        let stop = AtomicBool::new(false);
        assert!(stop_if_poisoned(&plane, &stop));
        assert!(stop.load(Ordering::Relaxed));
        let healthy = AtomicBool::new(false);
        assert!(!stop_if_poisoned(&self::plane(), &healthy));
        assert!(!healthy.load(Ordering::Relaxed));
    }
}
