//! The IPv6 fast path of [`Worker::handle_packet`]: TCP and UDP packets of
//! IPv6 connections, tracked (here) or new (`fast_open6.rs`, on a miss),
//! read at fixed offsets where the general path
//! would parse into a [`Parsed`](crate::wire::Parsed) and build a
//! [`FlowKey`](crate::flow::FlowKey). An established IPv6 packet costs
//! ~470 instructions here against ~1,200 on the general path (the IPv4
//! fast path's, `fast.rs`, ~390; bench/RESULTS.md).
//!
//! It takes an untagged frame (or, on a tagged node, one with its port's
//! 802.1Q tag, as the IPv4 path does) whose IPv6 header is followed directly by
//! TCP or UDP (no extension header), that the parse would accept with the
//! same fields and whose hop limit is above 1; for one whose 5-tuple is a
//! tracked connection's, it does what the general path would do, with
//! the IPv6 forms of each step ([`Conntrack::lookup_v6`](crate::conntrack::Conntrack::lookup_v6),
//! [`Conntrack::rewrite_v6`](crate::conntrack::Conntrack::rewrite_v6), [`nat::rewrite_v6_whole`]): the owner and frontend
//! checks of `paths::l4`, the direction check of `paths::reply`, the
//! resolved next hop and MTU of `paths::translate`, the rewrite, the
//! entry's state and the counters.
//!
//! The contract is the IPv4 fast path's (`fast.rs`): `Some(verdict)` only
//! for a packet that the general path would answer with that same
//! verdict, the same output frame and the same counters; `None`, having
//! written and counted nothing, for anything else (a new connection that
//! `fast_open6.rs` does not open, a SYN that reopens a closing one, another worker's flow, a next hop to
//! resolve or no route, a packet too big for its port, anything the parse
//! would reject), and the general path runs. A test feeds random and
//! corrupted IPv6 traffic through both and compares.
//!
//! The flow cache is the IPv4 path's (`fast.rs`, "The flow cache"): once a
//! direction of an entry has passed the owner, frontend and route checks
//! under a snapshot, the index of its next hop among the snapshot's IPv6
//! hops ([`Snapshot::next_hop_index_v6`]) and the checksum change of its
//! rewrite are kept in the entry with the snapshot's epoch, and its later
//! packets skip the checks and the sums.
//!
//! A miss goes to `fast_open6.rs`, which opens a new connection to an
//! IPv6 frontend (Maglev, SNAT, insert, first packet forwarded) where the
//! general path would, and declines otherwise.

use std::net::{IpAddr, Ipv6Addr};

use crate::conntrack::Direction;
use crate::flow::{owner_of_client, owner_of_snat_port, Proto};
use crate::nat::{self, NatDelta};
use crate::reject;
use crate::snapshot::{NextHop, OwnerKind, Snapshot};
use crate::wire::{ip_proto, ipv6, TcpFlags};
use crate::Tick;

use super::fast::{be16, octets, VLAN_TAG};
use super::fast_open::Pick;
use super::paths::{set_egress_vlan, Found};
use super::{PacketMeta, Verdict, Worker};

/// Ethernet header without a VLAN tag.
const ETH: usize = 14;
/// The fixed IPv6 header.
const IP: usize = ipv6::HEADER_LEN;

/// The TCP or UDP header of IP protocol `proto` at `l4`, the start of an
/// IP payload of `l4_len` bytes that the frame `f` holds, as the parse
/// checks it (`wire::parse_with`: TCP's data offset at least 20 and within
/// the payload, UDP's length at least 8 and within it): the protocol and
/// the TCP flags (0 for UDP), or `None` for another protocol or a header
/// the parse would reject. The checks `fast::read_v4_at` writes out in
/// its body: called from there, this function moved the IPv4 new flow's
/// code by +12 instructions (layout; callgrind).
#[inline(always)]
fn read_l4(f: &[u8], proto: u8, l4: usize, l4_len: usize) -> Option<(Proto, u8)> {
    match proto {
        ip_proto::TCP => {
            if l4_len < 20 {
                return None;
            }
            let doff = usize::from(f[l4 + 12] >> 4) * 4;
            if doff < 20 || doff > l4_len {
                return None;
            }
            Some((Proto::Tcp, f[l4 + 13]))
        }
        ip_proto::UDP => {
            let ulen = usize::from(be16(f, l4 + 4));
            if ulen < 8 || ulen > l4_len {
                return None;
            }
            Some((Proto::Udp, 0))
        }
        _ => None,
    }
}

/// What the IPv6 fast path read from a frame: the 5-tuple and what the
/// rewrite needs.
#[derive(Debug, Clone, Copy)]
pub(super) struct FastV6 {
    pub(super) src: [u8; 16],
    pub(super) dst: [u8; 16],
    pub(super) sport: u16,
    pub(super) dport: u16,
    /// TCP or UDP.
    pub(super) proto: Proto,
    /// TCP flags; 0 for UDP.
    pub(super) flags: u8,
    /// End of the IP packet.
    pub(super) end: usize,
}

impl FastV6 {
    /// Whether the packet may open a connection: a UDP datagram or a TCP
    /// SYN (what the burst path warms a reply key for).
    #[inline(always)]
    pub(super) fn may_open(&self) -> bool {
        self.proto == Proto::Udp || self.flags & (TcpFlags::SYN.0 | TcpFlags::ACK.0) == TcpFlags::SYN.0
    }
}

/// The fast path's read of `frame`: `Some` for an untagged IPv6 frame
/// whose next header is TCP or UDP, that the parse would accept with the
/// same fields (`wire::parse_with`: the payload within the frame, TCP's
/// data offset within it, UDP's length within it and its checksum not 0),
/// and whose hop limit is above 1.
#[inline(always)]
pub(super) fn read_v6(f: &[u8]) -> Option<FastV6> {
    read_v6_at::<0>(f)
}

/// [`read_v6`] for `TAG` 0, and for [`VLAN_TAG`] the same with one 802.1Q
/// tag (TPID 0x8100) before the EtherType (as `fast::read_v4_at`); the
/// caller checked the tag's VLAN id.
#[inline(always)]
pub(super) fn read_v6_at<const TAG: usize>(f: &[u8]) -> Option<FastV6> {
    const { assert!(TAG == 0 || TAG == VLAN_TAG) };
    let (eth, l4) = (ETH + TAG, ETH + TAG + IP);
    if f.len() < l4 + 8 || f[eth - 2] != 0x86 || f[eth - 1] != 0xdd || f[eth] >> 4 != 6 {
        return None;
    }
    if TAG == VLAN_TAG && (f[12] != 0x81 || f[13] != 0x00) {
        return None;
    }
    let l4_len = usize::from(be16(f, eth + 4));
    let end = l4 + l4_len;
    // Hop limit 1 is dropped (or answered) by the general path.
    if end > f.len() || f[eth + 7] <= 1 {
        return None;
    }
    let (proto, flags) = read_l4(f, f[eth + 6], l4, l4_len)?;
    // A zero UDP checksum is no checksum, which IPv6 forbids: the parse
    // drops the datagram.
    if proto == Proto::Udp && be16(f, l4 + 6) == 0 {
        return None;
    }
    Some(FastV6 {
        src: octets(f, eth + 8),
        dst: octets(f, eth + 24),
        sport: be16(f, l4),
        dport: be16(f, l4 + 2),
        proto,
        flags,
        end,
    })
}

/// Rewrites the IPv6 TCP or UDP packet of `frame`, read as `k` (with
/// `TAG` bytes of 802.1Q tag), to travel `src` → `dst` (hop limit
/// decremented, checksums per `meta`'s offload, `delta` the flow cache's
/// checksum change if known) and addresses it to `hop`. Returns the
/// checksum change applied; `None`, having written nothing, only for a
/// frame shorter than `k` says, which `read_v6_at` excludes.
#[inline(always)]
pub(super) fn write_v6<const TAG: usize>(
    frame: &mut [u8],
    k: &FastV6,
    src: (Ipv6Addr, u16),
    dst: (Ipv6Addr, u16),
    delta: Option<NatDelta>,
    hop: &NextHop,
    meta: &PacketMeta,
) -> Option<NatDelta> {
    let (head, l4) = frame.get_mut(..k.end)?.split_at_mut(ETH + TAG + IP);
    let ip = <&mut [u8; IP]>::try_from(&mut head[ETH + TAG..]).ok()?;
    let applied = nat::rewrite_v6_whole(ip, l4, k.proto == Proto::Tcp, src, dst, delta, &meta.offload);
    nat::set_l2(frame, hop.src_mac, hop.dst_mac);
    Some(applied)
}

impl Worker {
    /// See the module doc: `Some` only where the general path would do
    /// exactly the same, `None` (nothing written or counted) otherwise.
    /// What tests hold against the general path; `Worker::not_fast_v4`
    /// and the burst path read and look up themselves, so that the
    /// general path can take the lookup.
    #[cfg(test)]
    pub(super) fn fast_v6(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        meta: &PacketMeta,
    ) -> Option<Verdict> {
        let k = read_v6(frame)?;
        self.fast_v6_read::<0>(now, snap, frame, meta, &k, None, None)
    }

    /// [`Worker::fast_v6`] on a tagged node, for a frame whose VLAN id the
    /// caller checked is its port's (what tests hold against the general
    /// path; `Worker::handle_tagged` reads and looks up itself).
    #[cfg(test)]
    pub(super) fn fast_v6_tagged(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        meta: &PacketMeta,
    ) -> Option<Verdict> {
        let k = read_v6_at::<VLAN_TAG>(frame)?;
        self.fast_v6_read::<VLAN_TAG>(now, snap, frame, meta, &k, None, None)
    }

    /// The IPv6 fast path after [`read_v6`] gave `k` for `frame`; `found`
    /// is the conntrack lookup of `k`'s 5-tuple done ahead (by the burst
    /// path, or by `Worker::not_fast_v4` and `Worker::handle_tagged` to
    /// hand it to the general path should this decline), if it is still
    /// valid, and `pick` what the burst path's warming found for a new
    /// connection (`Worker::warm_open_v6`). With `TAG`
    /// [`VLAN_TAG`], `k` was read from a tagged frame, and a frame sent
    /// takes the egress port's VLAN id (priority kept), as on the general
    /// path.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn fast_v6_read<const TAG: usize>(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        meta: &PacketMeta,
        k: &FastV6,
        found: Found,
        pick: Option<&Pick<'_, Ipv6Addr>>,
    ) -> Option<Verdict> {
        let v = self.fast_v6_answer::<TAG>(now, snap, frame, meta, k, found, pick)?;
        if TAG != 0 {
            if let Verdict::Transmit { port, .. } = v {
                set_egress_vlan(frame, port, snap);
            }
        }
        Some(v)
    }

    /// [`Worker::fast_v6_read`] but for the egress tag.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn fast_v6_answer<const TAG: usize>(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        meta: &PacketMeta,
        k: &FastV6,
        found: Found,
        pick: Option<&Pick<'_, Ipv6Addr>>,
    ) -> Option<Verdict> {
        let hit = match found {
            Some(hit) => hit,
            None => self
                .conntrack
                .lookup_v6(k.src, k.dst, k.sport, k.dport, k.proto as u8),
        };
        let Some((id, dir)) = hit else {
            // A miss may open a connection (`fast_open6.rs`).
            return self.fast_open_v6::<TAG>(now, snap, frame, meta, k, pick);
        };
        let epoch = snap.epoch();
        // The flow cache (`fast.rs`) in one visit to the entry: rewrite,
        // hop, state and tags; nothing can decline after it. A packet its
        // cached hop's port cannot send declines below.
        let takes = |h: &NextHop| k.end - (ETH + TAG) <= usize::from(h.mtu);
        let cached = self
            .conntrack
            .touch_cached_v6(id, dir, epoch, snap.hops_v6(), takes, k.flags, now);
        let (rw, hop, tags, delta, to_cache) = match cached {
            Some((rw, hop, tags, delta)) => (rw, hop, Some(tags), Some(delta), None),
            None => {
                // A client SYN that reopens a closing or expired entry
                // (the cache answers for neither) opens a new connection:
                // the general path's business (`paths::forward`).
                if k.proto == Proto::Tcp
                    && k.flags & (TcpFlags::SYN.0 | TcpFlags::ACK.0) == TcpFlags::SYN.0
                    && dir == Direction::Original
                    && self.conntrack.reopened_by_syn(id, now)
                {
                    return None;
                }
                let forward_path = self.fast_v6_dispatch(snap, k)?;
                if !forward_path && dir != Direction::Reply {
                    return None;
                }
                let rw = self.conntrack.rewrite_v6(id, dir)?;
                // --- `translate`: only a resolved next hop ---
                let i = snap.next_hop_index_v6(u128::from_be_bytes(rw.dst))?;
                let hop = snap.hop_v6(i)?;
                // Too big for the port: answered or dropped by
                // `paths::translate`.
                if !takes(hop) {
                    return None;
                }
                // --- no way back past this point ---
                (
                    rw,
                    hop,
                    self.conntrack.touch(id, dir, k.flags, now),
                    None,
                    Some(i),
                )
            }
        };
        let applied = write_v6::<TAG>(
            frame,
            k,
            (Ipv6Addr::from(rw.src), rw.src_port),
            (Ipv6Addr::from(rw.dst), rw.dst_port),
            delta,
            hop,
            meta,
        );
        if let (Some(i), Some(applied)) = (to_cache, applied) {
            // Cached with the checksum change the write summed.
            self.conntrack.set_cached_hop_v6(id, dir, epoch, i, applied);
        }
        if let Some(tags) = tags {
            self.count_flow(tags, frame.len());
        }
        Some(Verdict::Transmit {
            port: hop.port,
            len: frame.len(),
        })
    }

    /// The general path's `l4` dispatch of `k` on this worker: `None`
    /// where it would not take the forward or reply path here (another
    /// worker's flow, an owned address that is no frontend of an existing
    /// service, a destination that names no one host, ...), else
    /// `Some(true)` for the forward path, which takes a conntrack hit in
    /// either direction, and `Some(false)` where only a reply may match.
    #[inline(always)]
    fn fast_v6_dispatch(&self, snap: &Snapshot, k: &FastV6) -> Option<bool> {
        let dst = IpAddr::V6(Ipv6Addr::from(k.dst));
        let owned = snap.owner_kind(dst).unwrap_or_default();
        if owned.contains(OwnerKind::SNAT) {
            if self.n_workers > 1 && owner_of_snat_port(k.dport, self.n_workers) != self.id {
                return None;
            }
            Some(false)
        } else if owned.contains(OwnerKind::VIP) {
            // As `Snapshot::lookup`: a frontend of an existing service.
            snap.lookup(dst, k.dport, k.proto)?;
            let src = IpAddr::V6(Ipv6Addr::from(k.src));
            if self.n_workers > 1 && owner_of_client(src, k.sport, self.n_workers) != self.id {
                return None;
            }
            Some(true)
        } else if owned != OwnerKind::default() || !reject::names_one_host(dst) {
            None
        } else {
            // A DNAT reply, owned by the client: the destination.
            if self.n_workers > 1 && owner_of_client(dst, k.dport, self.n_workers) != self.id {
                return None;
            }
            Some(false)
        }
    }
}

#[cfg(test)]
#[path = "fast6_tests.rs"]
mod tests;
