//! Build-time checks and tables for layer 3/2: ports (MAC, prefixes,
//! gateways), SNAT addresses, connected prefixes, static neighbors and the
//! default route per family. Invariants of the output: every port id is
//! below `MAX_PORTS`, every MAC is unicast, every gateway lies in one of its
//! port's prefixes, every neighbor lies in a connected prefix and resolves
//! to the port of the longest such prefix.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hashbrown::hash_map::Entry;
use hashbrown::HashMap;

use super::builder::{is_host_address, is_unicast_mac, InterfaceSpec, MAX_PORTS};
use super::cidr::{mask_v4, mask_v6};
use super::{
    connected_port, min_mtu, BuildError, Cidr, ConnectedV4, ConnectedV6, NextHop, DEFAULT_MTU, MAX_MTU,
    MIN_MTU,
};
use crate::flow::SnatPorts;
use crate::wire::ethernet::MacAddr;

#[derive(Debug, Default)]
pub(super) struct PortDraft {
    pub(super) mac: [u8; 6],
    /// The 802.1Q VLAN id its frames carry, if tagged.
    pub(super) vlan: Option<u16>,
    /// The largest IP packet the port sends (set or [`DEFAULT_MTU`]).
    pub(super) mtu: Option<u16>,
    pub(super) cidrs: Vec<Cidr>,
    pub(super) gateway_v4: Option<Ipv4Addr>,
    pub(super) gateway_v6: Option<Ipv6Addr>,
}

impl PortDraft {
    /// The port's MTU: as set, else [`DEFAULT_MTU`].
    pub(super) fn mtu(&self) -> u16 {
        self.mtu.unwrap_or(DEFAULT_MTU)
    }

    /// The port's gateways, IPv4 first.
    pub(super) fn gateways(&self) -> impl Iterator<Item = IpAddr> {
        self.gateway_v4
            .map(IpAddr::V4)
            .into_iter()
            .chain(self.gateway_v6.map(IpAddr::V6))
    }
}

/// Groups interfaces by port and checks MACs, addresses and gateways.
pub(super) fn check_ports(
    interfaces: &[InterfaceSpec],
    vlans: &[(u16, u16)],
    mtus: &[(u16, u16)],
) -> Result<Vec<Option<PortDraft>>, BuildError> {
    let mut ports: Vec<Option<PortDraft>> = Vec::new();
    for i in interfaces {
        if i.port >= MAX_PORTS {
            return Err(BuildError::PortOutOfRange {
                port: i.port,
                max: MAX_PORTS - 1,
            });
        }
        if !is_unicast_mac(i.mac) {
            return Err(BuildError::InterfaceMac {
                port: i.port,
                mac: MacAddr(i.mac).to_string(),
            });
        }
        if !is_host_address(i.cidr.addr()) || is_network_or_broadcast(&i.cidr, i.cidr.addr()) {
            return Err(BuildError::InterfaceAddress {
                port: i.port,
                addr: i.cidr.addr(),
            });
        }
        let idx = usize::from(i.port);
        if ports.len() <= idx {
            ports.resize_with(idx + 1, || None);
        }
        let p = ports[idx].get_or_insert_with(|| PortDraft {
            mac: i.mac,
            ..PortDraft::default()
        });
        if p.mac != i.mac {
            return Err(BuildError::InterfaceMacConflict {
                port: i.port,
                first: MacAddr(p.mac).to_string(),
                second: MacAddr(i.mac).to_string(),
            });
        }
        if !p.cidrs.contains(&i.cidr) {
            p.cidrs.push(i.cidr);
        }
        let conflict = |first: IpAddr, second: IpAddr| BuildError::GatewayConflict {
            port: i.port,
            first,
            second,
        };
        match i.gateway {
            Some(IpAddr::V4(g)) => match p.gateway_v4 {
                Some(old) if old != g => return Err(conflict(old.into(), g.into())),
                _ => p.gateway_v4 = Some(g),
            },
            Some(IpAddr::V6(g)) => match p.gateway_v6 {
                Some(old) if old != g => return Err(conflict(old.into(), g.into())),
                _ => p.gateway_v6 = Some(g),
            },
            None => {}
        }
    }
    for &(port, vid) in vlans {
        let vlan_err = |reason: &'static str| BuildError::Vlan { port, vid, reason };
        if !(1..=4094).contains(&vid) {
            return Err(vlan_err("not a VLAN id (1-4094)"));
        }
        let Some(Some(p)) = ports.get_mut(usize::from(port)) else {
            return Err(vlan_err("the port has no interface"));
        };
        if p.vlan.is_some_and(|v| v != vid) {
            return Err(vlan_err("the port has another VLAN already"));
        }
        p.vlan = Some(vid);
    }
    for &(port, mtu) in mtus {
        let mtu_err = |reason: &'static str| BuildError::Mtu { port, mtu, reason };
        if !(MIN_MTU..=MAX_MTU).contains(&mtu) {
            return Err(mtu_err("not an MTU lbd takes (68-9216)"));
        }
        let Some(Some(p)) = ports.get_mut(usize::from(port)) else {
            return Err(mtu_err("the port has no interface"));
        };
        if p.mtu.is_some_and(|m| m != mtu) {
            return Err(mtu_err("the port has another MTU already"));
        }
        if mtu < min_mtu(p.cidrs.iter().any(|c| c.addr().is_ipv6())) {
            return Err(mtu_err(
                "below IPv6's minimum of 1280, and the port has an IPv6 address",
            ));
        }
        p.mtu = Some(mtu);
    }
    // All or none: a frame keeps its tag from port to port (only the id is
    // rewritten), so untagged and tagged ports cannot be mixed.
    let configured = ports.iter().flatten();
    if configured.clone().any(|p| p.vlan.is_some()) {
        if let Some(id) = ports
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| p.vlan.is_none()))
        {
            return Err(BuildError::VlanMissing { port: id as u16 }); // id < MAX_PORTS
        }
    }
    for (id, p) in ports.iter().enumerate() {
        let Some(p) = p else { continue };
        for g in p.gateways() {
            if !p.cidrs.iter().any(|c| c.contains(g)) {
                return Err(BuildError::GatewayNotConnected {
                    port: id as u16,
                    gateway: g,
                });
            }
            if p.cidrs.iter().any(|c| is_network_or_broadcast(c, g)) {
                return Err(BuildError::GatewayUnusable {
                    port: id as u16,
                    gateway: g,
                    what: "the network or broadcast address of the port's prefix",
                });
            }
        }
    }
    Ok(ports)
}

/// Whether `ip` is the network or the broadcast address of the IPv4 prefix
/// `c` (/30 and shorter; /31 and /32 have neither, RFC 3021). No IPv6
/// prefix has a broadcast address, and its subnet-router anycast address
/// (the network address) may be a router's: neither is refused.
pub(super) fn is_network_or_broadcast(c: &Cidr, ip: IpAddr) -> bool {
    match (c.addr(), ip) {
        (IpAddr::V4(_), IpAddr::V4(a)) if c.prefix() <= 30 && c.contains(ip) => {
            let host_bits = 32 - u32::from(c.prefix());
            let host_mask = if host_bits == 32 {
                u32::MAX
            } else {
                (1u32 << host_bits) - 1
            };
            let h = u32::from(a) & host_mask;
            h == 0 || h == host_mask
        }
        _ => false,
    }
}

/// Validates and deduplicates SNAT addresses, keeping the given order.
pub(super) fn check_snat(snat: &[IpAddr]) -> Result<(Vec<Ipv4Addr>, Vec<Ipv6Addr>), BuildError> {
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for &addr in snat {
        if !is_host_address(addr) {
            return Err(BuildError::SnatAddress { addr });
        }
        match addr {
            IpAddr::V4(a) if !v4.contains(&a) => v4.push(a),
            IpAddr::V6(a) if !v6.contains(&a) => v6.push(a),
            _ => {}
        }
        // Checked as we go so a huge list fails before the O(n²) dedup
        // bites. The limit is on both families together: a worker's
        // `SnatPorts` numbers its addresses in one list.
        let count = v4.len() + v6.len();
        if count > SnatPorts::MAX_ADDRESSES {
            return Err(BuildError::TooManySnatAddresses {
                count,
                max: SnatPorts::MAX_ADDRESSES,
            });
        }
    }
    Ok((v4, v6))
}

/// Connected prefixes, neighbor next hops and default routes.
#[derive(Debug, Default)]
pub(super) struct Routes {
    pub(super) connected_v4: Vec<ConnectedV4>,
    pub(super) connected_v6: Vec<ConnectedV6>,
    /// The resolved IPv4 next hops that `neighbors_v4` and `default_v4`
    /// index: one per neighbor in the order given, then the default
    /// route's unless it equals its gateway's neighbor hop.
    pub(super) hops_v4: Vec<NextHop>,
    /// The same for IPv6.
    pub(super) hops_v6: Vec<NextHop>,
    pub(super) neighbors_v4: HashMap<u32, u32>,
    pub(super) neighbors_v6: HashMap<u128, u32>,
    pub(super) default_v4: Option<u32>,
    pub(super) default_v6: Option<u32>,
}

impl Routes {
    pub(super) fn new(
        ports: &[Option<PortDraft>],
        neighbors: &[(IpAddr, [u8; 6])],
    ) -> Result<Routes, BuildError> {
        let mut r = Routes::default();
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for (id, p) in ports.iter().enumerate() {
            for c in p.iter().flat_map(|p| &p.cidrs) {
                match c.addr() {
                    IpAddr::V4(a) => v4.push((c.prefix(), id as u16, u32::from(a) & mask_v4(c.prefix()))),
                    IpAddr::V6(a) => v6.push((c.prefix(), id as u16, u128::from(a) & mask_v6(c.prefix()))),
                }
            }
        }
        // Longest prefix first, then lowest port: the first match wins.
        v4.sort_by_key(|&(len, port, _)| (std::cmp::Reverse(len), port));
        v6.sort_by_key(|&(len, port, _)| (std::cmp::Reverse(len), port));
        r.connected_v4 = v4
            .into_iter()
            .map(|(len, port, net)| (net, mask_v4(len), port))
            .collect();
        r.connected_v6 = v6
            .into_iter()
            .map(|(len, port, net)| (net, mask_v6(len), port))
            .collect();

        for &(addr, mac) in neighbors {
            if !is_unicast_mac(mac) {
                return Err(BuildError::NeighborMac {
                    addr,
                    mac: MacAddr(mac).to_string(),
                });
            }
            let port = connected_port(&r.connected_v4, &r.connected_v6, addr)
                .ok_or(BuildError::NeighborNotConnected { addr })?;
            let src_mac = ports
                .get(usize::from(port))
                .and_then(Option::as_ref)
                .map_or([0; 6], |p| p.mac);
            let port_mtu = ports
                .get(usize::from(port))
                .and_then(Option::as_ref)
                .map_or(DEFAULT_MTU, PortDraft::mtu);
            let hop = NextHop {
                port,
                src_mac,
                dst_mac: mac,
                mtu: port_mtu,
            };
            let old = match addr {
                // A repeated address keeps its first hop, which a
                // same-MAC repeat equals (its port comes from the address).
                IpAddr::V4(a) => match r.neighbors_v4.entry(u32::from(a)) {
                    Entry::Occupied(o) => r.hops_v4.get(*o.get() as usize).copied(),
                    Entry::Vacant(v) => {
                        // Fewer hops than neighbors given: fits a `u32`.
                        v.insert(r.hops_v4.len() as u32);
                        r.hops_v4.push(hop);
                        None
                    }
                },
                IpAddr::V6(a) => match r.neighbors_v6.entry(u128::from(a)) {
                    Entry::Occupied(o) => r.hops_v6.get(*o.get() as usize).copied(),
                    Entry::Vacant(v) => {
                        v.insert(r.hops_v6.len() as u32);
                        r.hops_v6.push(hop);
                        None
                    }
                },
            };
            if let Some(old) = old.filter(|o| o.dst_mac != mac) {
                return Err(BuildError::NeighborConflict {
                    addr,
                    first: MacAddr(old.dst_mac).to_string(),
                    second: MacAddr(mac).to_string(),
                });
            }
        }
        // Default route per family: the lowest port with a gateway of that
        // family, out of that port (not the longest-match port of the
        // gateway address, should prefixes overlap); resolved only if the
        // gateway has a neighbor entry.
        let via = |port: usize, p: &PortDraft, mac: Option<[u8; 6]>| {
            mac.map(|dst_mac| NextHop {
                port: port as u16, // < MAX_PORTS
                src_mac: p.mac,
                dst_mac,
                mtu: p.mtu(),
            })
        };
        let mut ports_iter = ports
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i, p.as_ref()?)));
        // (the gateway's neighbor hop index, the default hop)
        let default_v4 = ports_iter
            .clone()
            .find_map(|(i, p)| {
                let g = p.gateway_v4?;
                let gi = r.neighbors_v4.get(&u32::from(g)).copied();
                let mac = gi.and_then(|gi| r.hops_v4.get(gi as usize)).map(|h| h.dst_mac);
                Some(gi.zip(via(i, p, mac)))
            })
            .flatten();
        r.default_v4 = default_v4.map(|(gi, hop)| {
            if r.hops_v4.get(gi as usize) == Some(&hop) {
                gi
            } else {
                r.hops_v4.push(hop);
                r.hops_v4.len() as u32 - 1
            }
        });
        let default_v6 = ports_iter
            .find_map(|(i, p)| {
                let g = p.gateway_v6?;
                let gi = r.neighbors_v6.get(&u128::from(g)).copied();
                let mac = gi.and_then(|gi| r.hops_v6.get(gi as usize)).map(|h| h.dst_mac);
                Some(gi.zip(via(i, p, mac)))
            })
            .flatten();
        r.default_v6 = default_v6.map(|(gi, hop)| {
            if r.hops_v6.get(gi as usize) == Some(&hop) {
                gi
            } else {
                r.hops_v6.push(hop);
                r.hops_v6.len() as u32 - 1
            }
        });
        Ok(r)
    }
}
