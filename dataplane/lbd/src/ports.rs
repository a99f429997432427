//! lbd's ports: the mbuf pool that feeds them, sized for every queue,
//! ring and cache a frame can wait in and for the largest MTU, and the
//! ports configured from the command line and the `[[interface]]` tables,
//! with the node configuration the control plane compiles from them.

use std::sync::Arc;

use anyhow::{bail, Context};
use dpdk::{Eal, Mempool, Port, PortConfig, RssStatus};
use lb_control::plane::{InterfaceConfig, NodeConfig};
use lb_dataplane::snapshot::{min_mtu, MAX_MTU};

use crate::cli::Cli;
use crate::config::Config;
use crate::control::HELD_RING;
use crate::neighbor;
use crate::{CONTROL_RING, HANDOVER_RING};

/// Mbufs each lcore keeps in its mempool cache.
const MBUF_CACHE: u32 = 256;
/// What a frame adds to its IP packet in a receive buffer: the Ethernet
/// header (14), two VLAN tags (8) and the CRC (4), as Intel's ice and i40e
/// PMDs count it, and 8 more: i40e and ixgbe turn scattered receive on by
/// themselves when the largest frame and 8 bytes do not fit a buffer, and
/// lbd takes single-buffer frames only.
const FRAME_OVERHEAD: u16 = 34;
/// The step NICs size receive buffers in: ixgbe, igb and igc program
/// theirs in whole KiB, rounded down (i40e in 128 bytes), and compare the
/// largest frame with that.
const RX_BUF_STEP: u16 = 1024;

/// The one mbuf pool of lbd's ports, with room for every frame that can
/// wait somewhere at once (rx and tx descriptors, hand-over, held and
/// control rings, frames the neighbor table holds, lcore caches, hand-over
/// bursts) and buffers for a whole frame of the largest `mtu` of
/// `config`'s interfaces. Its error names the flag that gives more memory.
pub fn mbuf_pool(
    eal: &Eal,
    cli: &Cli,
    config: &Config,
    nports: u16,
    workers: usize,
) -> anyhow::Result<Arc<Mempool>> {
    let per_port = (1024 + 1024 + 2 * dpdk::BURST_MAX as u32) * workers as u32;
    let rings = HANDOVER_RING * (workers * workers.saturating_sub(1)) as u32
        + HELD_RING * workers as u32
        + CONTROL_RING;
    // Plus the frames the neighbor table may hold for unresolved next hops.
    let held = neighbor::Timers::default().max_held as u32;
    // Plus what sits outside rings and queues: each EAL lcore's mempool
    // cache (up to 1.5 times its size before it flushes) and each worker's
    // hand-over bursts, one per other worker, filling until sent.
    let caches = (workers as u32 + 1) * (MBUF_CACHE + MBUF_CACHE / 2);
    let handover_bursts = (workers * workers.saturating_sub(1)) as u32 * dpdk::BURST_MAX as u32;
    let nmbufs = (per_port * nports as u32 + rings + held + caches + handover_bursts + 4096)
        .next_power_of_two()
        .max(8192)
        - 1;
    // Each mbuf holds a whole frame of the largest MTU asked for: lbd
    // takes single-segment frames only.
    let max_mtu = config.interfaces.iter().filter_map(|i| i.mtu).max().unwrap_or(0);
    let data_room = data_room(max_mtu);
    Ok(Arc::new(
        Mempool::new(eal, "lbd_mbufs", nmbufs, MBUF_CACHE, data_room, None).with_context(|| {
            // Short of memory, nearly always: say which knob gives more.
            let what = format!(
                "the {nmbufs} mbufs ({}-byte buffers) of {nports} ports and {workers} workers",
                data_room
            );
            match (cli.mem, cli.no_huge) {
                (Some(m), _) => format!("--mem {m}: too little DPDK memory for {what}: raise it"),
                (None, true) => format!(
                    "--mem (512 by default with --no-huge): too little DPDK memory for {what}: raise it"
                ),
                (None, false) => format!("too few free hugepages for {what}: reserve more"),
            }
        })?,
    ))
}

/// The data room (headroom included) of a buffer whose data part holds a
/// whole frame of an MTU of `mtu` ([`FRAME_OVERHEAD`]) in whole
/// [`RX_BUF_STEP`]s, and 2 KiB at least (what the default MTU needs): 2,176
/// bytes at least in all. At most 128 + 10,240 bytes for lbd's largest
/// MTU, 9,216: no overflow.
fn data_room(mtu: u16) -> u16 {
    let data = (mtu + FRAME_OVERHEAD)
        .div_ceil(RX_BUF_STEP)
        .saturating_mul(RX_BUF_STEP)
        .max((dpdk_sys::RTE_MBUF_DEFAULT_BUF_SIZE - dpdk_sys::RTE_PKTMBUF_HEADROOM) as u16);
    dpdk_sys::RTE_PKTMBUF_HEADROOM as u16 + data
}

/// Configures DPDK ports 0 to `nports - 1` (the ids the caller checked,
/// and sized `pool` for) with `queues` queue pairs each, fed from `pool`,
/// as `cli` and `config`'s `[[interface]]` tables say, logs each, and adds
/// their prefixes to `node`'s interfaces.
pub fn configure(
    eal: &Eal,
    cli: &Cli,
    config: &Config,
    pool: &Arc<Mempool>,
    nports: u16,
    queues: u16,
    node: &mut NodeConfig,
) -> anyhow::Result<Vec<Port>> {
    let mut ports = Vec::new();
    for id in 0..nports {
        let iface = config.interfaces.get(id as usize);
        let conf = PortConfig {
            rx_queues: queues,
            tx_queues: queues,
            mtu: iface.and_then(|i| i.mtu),
            ipv4_checksum_offload: !cli.no_checksum_offload,
            promiscuous: cli.promiscuous,
            allmulticast: true,
            ..PortConfig::default()
        };
        let port = Port::configure(eal, id, &conf, pool.clone())?;
        let mtu = port.mtu()?;
        // Without `mtu` lbd takes the device's, which the snapshot checks as
        // a given one: say here whose it is.
        if let Some(i) = iface.filter(|i| i.mtu.is_none()) {
            let min = min_mtu(i.addresses.iter().any(|c| c.addr().is_ipv6()));
            if !(min..=MAX_MTU).contains(&mtu) {
                bail!(
                    "port {id}: the device's own MTU, {mtu}, is outside what lbd takes on interface {id} ({min}-{MAX_MTU}): give the interface an mtu"
                );
            }
        }
        let info = port.info();
        match port.rss() {
            RssStatus::SingleQueue => {}
            RssStatus::Enabled(hf) => {
                tracing::info!(port = id, "RSS on over IP and L4 ports (rss_hf {hf:#x})")
            }
            RssStatus::Unsupported => tracing::warn!(
                port = id,
                driver = %info.driver,
                "the driver has no IP/L4 RSS: every packet lands on queue 0"
            ),
        }
        let mac = port.mac();
        // Every port, with an [[interface]] or not: the README points to
        // this line for each port's offloads and promiscuous mode.
        let addresses: Vec<String> = iface.map_or_else(
            || vec!["none".to_string()],
            |i| i.addresses.iter().map(ToString::to_string).collect(),
        );
        let gateways = iface.map(|i| i.gateways.clone()).unwrap_or_default();
        let csum = port.checksum_offload();
        tracing::info!(
            port = id, name = %info.name, driver = %info.driver, %mac, address = %addresses.join(","),
            gateway = ?gateways, vlan = ?iface.and_then(|i| i.vlan), mtu, queues, rx_ipv4_checksum_offload = csum.rx_ipv4,
            tx_ipv4_checksum_offload = csum.tx_ipv4, promiscuous = port.promiscuous(), "port configured"
        );
        match iface {
            Some(iface) => {
                // One entry per prefix, each family's gateway with the
                // first prefix of its family that holds it.
                let mut gateways = iface.gateways.clone();
                for a in &iface.addresses {
                    let cidr = *a;
                    let gateway = gateways
                        .iter()
                        .position(|g| a.contains(*g))
                        .map(|i| gateways.remove(i));
                    node.interfaces.push(InterfaceConfig {
                        port: id,
                        mac: mac.0,
                        cidr,
                        gateway,
                        vlan: iface.vlan,
                        mtu: Some(mtu),
                    });
                }
            }
            None => {
                tracing::warn!(port = id, name = %info.name, %mac, "port has no address: give one in --config")
            }
        }
        ports.push(port);
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_hold_a_frame_of_the_mtu_in_whole_kib() {
        assert_eq!(data_room(0), 2176, "DPDK's default");
        assert_eq!(data_room(1500), 2176);
        assert_eq!(data_room(2014), 2176);
        assert_eq!(data_room(2015), 128 + 3072);
        assert_eq!(data_room(9000), 128 + 9216);
        assert_eq!(data_room(MAX_MTU), 128 + 10_240);
    }
}
