//! The IPv4 fast path of [`Worker::handle_packet`]: TCP and UDP packets of
//! tracked connections, the bulk of what a balancer forwards, and (in
//! `fast_open.rs`) the first packets of new ones.
//!
//! The general path parses into a [`Parsed`](crate::wire::Parsed) with
//! `IpAddr`s, builds a [`FlowKey`](crate::flow::FlowKey), and goes through
//! the owner, frontend, conntrack, route and NAT steps on those: ~1,000
//! instructions a packet. Here an IPv4 frame without options is read at
//! fixed offsets into `u32`s and octets (an untagged frame, or on a tagged
//! node one with its port's 802.1Q tag: [`VLAN_TAG`],
//! [`Worker::fast_v4_tagged`]), and each step uses its IPv4
//! form ([`Snapshot::owner_kind_v4`], [`Conntrack::lookup_v4`](crate::conntrack::Conntrack::lookup_v4),
//! [`Conntrack::rewrite_v4`](crate::conntrack::Conntrack::rewrite_v4), [`Snapshot::next_hop_index_v4`],
//! [`nat::rewrite_v4_whole`]).
//!
//! The contract, which makes the fast path invisible: `fast_v4` returns
//! `Some(verdict)` only for a packet that the general path would answer
//! with that same verdict, the same output frame and the same counters;
//! for anything else (another frame layout, anything the parse would
//! reject, a packet another worker owns, a TTL about to expire, a next hop
//! to resolve or no route, a new connection the general path would refuse)
//! it returns `None` having written nothing and counted nothing, and the
//! general path runs.
//! Tests feed random and corrupted traffic through both paths and compare.
//!
//! # The flow cache
//!
//! For a packet of a tracked connection, the owner and frontend checks
//! (three hash probes) and the route lookup (a probe and a scan of the
//! connected prefixes) give the same answer for every packet of the same
//! entry and direction as long as the snapshot is the same: the packet's
//! 5-tuple is the entry's key for that direction (the lookup matched it
//! exactly), a snapshot never changes, and the worker's id and worker
//! count are fixed. So once a direction has passed them all, the index of
//! its next hop ([`Snapshot::next_hop_index_v4`]) is stored in the entry
//! with the snapshot's [`Snapshot::epoch`]
//! ([`Conntrack::set_cached_hop_v4`](crate::conntrack::Conntrack::set_cached_hop_v4)), and its later packets read it with
//! the rewrite, accounting the packet in the same visit
//! ([`Conntrack::touch_cached_v4`](crate::conntrack::Conntrack::touch_cached_v4)), and skip the checks. Stored with it is
//! the checksum change the packet that filled it was rewritten with
//! ([`NatDelta`], the same for every packet of that direction, and
//! reversed for the other): later packets add it to their checksums
//! instead of summing the addresses and ports they replace (~30
//! instructions a packet). A
//! snapshot with another epoch (every build or update takes a new one; the
//! empty snapshot's 0 never matches) finds the cache stale and runs the
//! checks again, which refill it. Nothing is cached for a packet that
//! declines, so a hand-over or a missing route is re-examined every time.

use std::net::Ipv4Addr;

use crate::checksum;
use crate::conntrack::Direction;
use crate::flow::{owner_of_client, owner_of_snat_port, FlowKeyV4, Proto};
use crate::nat::{self, NatDelta};
use crate::snapshot::{NextHop, OwnerKind, Service, Snapshot};
use crate::wire::{ip_proto, TcpFlags};
use crate::Tick;

use super::fast_open::Pick;
use super::paths::{opens_from_v4, set_egress_vlan, to_link_group, Found};
use super::{PacketMeta, Verdict, Worker};

/// Ethernet header without a VLAN tag.
const ETH: usize = 14;
/// IPv4 header without options.
const IP: usize = 20;

/// The 802.1Q tag's length: the `TAG` of the functions below is 0 for an
/// untagged frame and this for a tagged one, whose IPv4 header starts
/// that much later. Each is its own instantiation: the untagged one reads
/// fixed offsets, as if the tagged one did not exist.
pub(super) const VLAN_TAG: usize = 4;

#[inline(always)]
pub(super) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// The `N` bytes at `at`: an address.
#[inline(always)]
pub(super) fn octets<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    // One 4-byte load for IPv4; built from four byte reads, the array was
    // reassembled a byte at a time (~20 instructions a packet).
    match b.get(at..at + N).map(<[u8; N]>::try_from) {
        Some(Ok(a)) => a,
        _ => panic!("octets past the frame's end"),
    }
}

/// What the fast path read from a frame that has its layout and passes
/// every check the parse would make: the 5-tuple and what the rewrite needs.
#[derive(Debug, Clone, Copy)]
pub(super) struct FastV4 {
    pub(super) src: [u8; 4],
    pub(super) dst: [u8; 4],
    pub(super) sport: u16,
    pub(super) dport: u16,
    /// TCP or UDP.
    pub(super) proto: Proto,
    /// TCP flags; 0 for UDP.
    pub(super) flags: u8,
    /// End of the IP packet.
    pub(super) end: usize,
}

impl FastV4 {
    /// A TCP segment that may open a connection: SYN without ACK (what
    /// `paths::opens_connection` checks on a parsed packet).
    #[inline(always)]
    pub(super) fn is_syn(&self) -> bool {
        self.proto == Proto::Tcp && self.flags & (TcpFlags::SYN.0 | TcpFlags::ACK.0) == TcpFlags::SYN.0
    }

    /// Whether the packet may open a connection: a UDP datagram or a TCP
    /// SYN (what the burst path warms a reply key for).
    #[inline(always)]
    pub(super) fn may_open(&self) -> bool {
        self.proto == Proto::Udp || self.is_syn()
    }

    /// Whether the IP packet, read with its header `TAG` bytes after the
    /// untagged Ethernet header's end, is at most `mtu` bytes long: fits
    /// a port of that MTU.
    #[inline(always)]
    pub(super) fn fits<const TAG: usize>(&self, mtu: u16) -> bool {
        self.fits_tagged(TAG == VLAN_TAG, mtu)
    }

    /// [`FastV4::fits`] for a tag known at run time.
    #[inline(always)]
    pub(super) fn fits_tagged(&self, tagged: bool, mtu: u16) -> bool {
        self.end <= ETH + usize::from(tagged) * VLAN_TAG + usize::from(mtu)
    }

    /// The conntrack key of the packet, as the general path builds it.
    #[inline(always)]
    pub(super) fn key_v4(&self) -> FlowKeyV4 {
        FlowKeyV4 {
            src: Ipv4Addr::from(self.src),
            dst: Ipv4Addr::from(self.dst),
            sport: self.sport,
            dport: self.dport,
            proto: self.proto,
        }
    }
}

/// The fast path's read of `frame`: `Some` for an untagged IPv4 frame
/// without options carrying TCP or UDP that the parse would accept with
/// the same fields, that is not a fragment and whose TTL is above 1.
#[inline(always)]
pub(super) fn read_v4(f: &[u8], meta: &PacketMeta) -> Option<FastV4> {
    read_v4_at::<0>(f, meta)
}

/// [`read_v4`] for `TAG` 0, and for [`VLAN_TAG`] the same with one
/// 802.1Q tag (TPID 0x8100) before the EtherType; the caller checked the
/// tag's VLAN id.
#[inline(always)]
pub(super) fn read_v4_at<const TAG: usize>(f: &[u8], meta: &PacketMeta) -> Option<FastV4> {
    const { assert!(TAG == 0 || TAG == VLAN_TAG) };
    let (eth, l4) = (ETH + TAG, ETH + TAG + IP);
    if f.len() < l4 + 8 || f[eth - 2] != 0x08 || f[eth - 1] != 0x00 || f[eth] != 0x45 {
        return None;
    }
    if TAG == VLAN_TAG && (f[12] != 0x81 || f[13] != 0x00) {
        return None;
    }
    let total = usize::from(be16(f, eth + 2));
    let end = eth + total;
    // MF set or a fragment offset: the general path's business.
    if end > f.len() || f[eth + 6] & 0x3f != 0 || f[eth + 7] != 0 {
        return None;
    }
    // TTL 1 is dropped (or answered) by the general path.
    if f[eth + 8] <= 1 {
        return None;
    }
    let l4_len = total.checked_sub(IP)?;
    let (proto, flags) = match f[eth + 9] {
        ip_proto::TCP => {
            if l4_len < 20 {
                return None;
            }
            let doff = usize::from(f[l4 + 12] >> 4) * 4;
            if doff < 20 || doff > l4_len {
                return None;
            }
            (Proto::Tcp, f[l4 + 13])
        }
        ip_proto::UDP => {
            let ulen = usize::from(be16(f, l4 + 4));
            if ulen < 8 || ulen > l4_len {
                return None;
            }
            (Proto::Udp, 0)
        }
        _ => return None,
    };
    // The parse's check (`Ipv4Packet::verify_checksum`).
    if !meta.offload.rx_ipv4_verified {
        let h: &[u8; IP] = f[eth..l4].try_into().ok()?;
        if !checksum::sums_to_ones20(h) {
            return None;
        }
    }
    Some(FastV4 {
        src: octets(f, eth + 12),
        dst: octets(f, eth + 16),
        sport: be16(f, l4),
        dport: be16(f, l4 + 2),
        proto,
        flags,
        end,
    })
}

/// Rewrites `frame`, which [`read_v4`] read as `k`, to carry `src → dst`
/// (TTL decremented, checksums per `meta`'s offload flags) and addresses it
/// to `hop`; `delta` is the checksum change of `k`'s 5-tuple to that, if
/// the caller has it (a tracked connection's). Returns the change applied.
#[inline(always)]
pub(super) fn write_v4<const TAG: usize>(
    frame: &mut [u8],
    k: &FastV4,
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    delta: Option<NatDelta>,
    hop: &NextHop,
    meta: &PacketMeta,
) -> NatDelta {
    let mut applied = NatDelta::default();
    // `read_v4` checked `end <= frame.len()`; the `if let` cannot fail.
    if let Some((head, rest)) = frame.get_mut(..k.end).map(|f| f.split_at_mut(ETH + TAG + IP)) {
        if let Ok(ip) = <&mut [u8; IP]>::try_from(&mut head[ETH + TAG..]) {
            let tcp = k.proto == Proto::Tcp;
            applied = nat::rewrite_v4_whole(ip, rest, tcp, src, dst, delta, &meta.offload);
        }
    }
    nat::set_l2(frame, hop.src_mac, hop.dst_mac);
    applied
}

impl Worker {
    /// See the module doc: `Some` only where the general path would do
    /// exactly the same, `None` (nothing written or counted) otherwise.
    #[inline(always)]
    pub(super) fn fast_v4(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        meta: &PacketMeta,
    ) -> Option<Verdict> {
        let k = read_v4(frame, meta)?;
        self.fast_v4_read::<0>(now, snap, frame, meta, &k, None, None)
    }

    /// [`Worker::fast_v4`] for a frame with an 802.1Q tag on a tagged
    /// node, whose VLAN id the caller checked is its port's: the same
    /// answers as the general path's `handle_tagged`, whose forwarded
    /// frames take the egress port's VLAN id (priority kept). Inlined into
    /// that out-of-line function only.
    #[inline(always)]
    pub(super) fn fast_v4_tagged(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        meta: &PacketMeta,
    ) -> Option<Verdict> {
        let k = read_v4_at::<VLAN_TAG>(frame, meta)?;
        self.fast_v4_read::<VLAN_TAG>(now, snap, frame, meta, &k, None, None)
    }

    /// [`Worker::fast_v4`] after [`read_v4_at`] gave `k` for `frame`; `found`
    /// is the conntrack lookup of `k.key_v4()` done ahead by the burst path,
    /// if it is still valid, and `pick` the Maglev pick its warming made
    /// for `k` (see [`Worker::fast_open_v4`]).
    /// With `TAG` [`VLAN_TAG`], a frame sent takes the egress port's VLAN
    /// id (priority kept), as on the general path.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn fast_v4_read<const TAG: usize>(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        meta: &PacketMeta,
        k: &FastV4,
        found: Found,
        pick: Option<&Pick<'_>>,
    ) -> Option<Verdict> {
        let v = self.fast_v4_answer::<TAG>(now, snap, frame, meta, k, found, pick)?;
        if TAG != 0 {
            if let Verdict::Transmit { port, .. } = v {
                set_egress_vlan(frame, port, snap);
            }
        }
        Some(v)
    }

    /// [`Worker::fast_v4_read`] but for the egress tag.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn fast_v4_answer<const TAG: usize>(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        meta: &PacketMeta,
        k: &FastV4,
        found: Found,
        pick: Option<&Pick<'_>>,
    ) -> Option<Verdict> {
        let hit = match found {
            Some(hit) => hit,
            None => self
                .conntrack
                .lookup_v4(k.src, k.dst, k.sport, k.dport, k.proto as u8),
        };
        let Some((id, dir)) = hit else {
            // A new connection to a frontend (`paths::open`), but for what
            // the general path drops before it (`martian_source`,
            // `link_broadcast`, `own_source`); checked here, outside `fast_open_v4`,
            // whose inlining it changed (+130 instructions a new flow).
            if !opens_from_v4(snap, k.src) || to_link_group(frame) {
                return None;
            }
            // Nor from one of lbd's own addresses (`own_source`).
            if snap.owner_kind_v4(u32::from_be_bytes(k.src)).is_some() {
                return None;
            }
            let Some(pk) = pick else {
                let fe = self.fast_v4_dispatch(snap, k)??;
                let opened = self.fast_open_v4(now, snap, frame, meta, k, fe, None, TAG != 0)?;
                return Some(opened.verdict(frame.len()));
            };
            // The burst's warming found the frontend and its service:
            // `fast_v4_dispatch` would take its VIP branch (a frontend's
            // address is owned as a VIP and never as SNAT, an invariant of
            // every snapshot) and find the same, so only its owner check
            // is left.
            if !self.owns_client_v4(k.src, k.sport) {
                return None;
            }
            let fe = (pk.svc, pk.fe_slot);
            let opened = self.fast_open_v4(now, snap, frame, meta, k, fe, Some(pk), TAG != 0)?;
            return Some(opened.verdict(frame.len()));
        };
        let epoch = snap.epoch();
        // The flow cache (module doc) in one visit to the entry: rewrite,
        // hop, state and tags; nothing can decline after it.
        // A packet its cached hop's port cannot send declines below.
        let takes = |h: &NextHop| k.fits::<TAG>(h.mtu);
        let cached = self
            .conntrack
            .touch_cached_v4(id, dir, epoch, snap.hops_v4(), takes, k.flags, now);
        let (rw, hop, tags, delta, to_cache) = match cached {
            Some((rw, hop, tags, delta)) => (rw, hop, Some(tags), Some(delta), None),
            None => {
                // A client SYN that reopens a closing or expired entry
                // (the cache answers for neither) opens a new connection:
                // the general path's business (`paths::forward`). UDP's
                // `flags` are 0.
                if k.flags & (TcpFlags::SYN.0 | TcpFlags::ACK.0) == TcpFlags::SYN.0
                    && self.syn_reopens(id, dir, now)
                {
                    return None;
                }
                let rw = self.conntrack.rewrite_v4(id, dir)?;
                let reply_only = self.fast_v4_dispatch(snap, k)?.is_none();
                if reply_only && dir != Direction::Reply {
                    return None;
                }
                // --- `translate`: only a resolved next hop ---
                let i = snap.next_hop_index_v4(u32::from_be_bytes(rw.dst))?;
                let hop = snap.hop_v4(i)?;
                // Too big for the port: answered or dropped by
                // `paths::translate`.
                if !k.fits::<TAG>(hop.mtu) {
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
        let applied = write_v4::<TAG>(
            frame,
            k,
            (Ipv4Addr::from(rw.src), rw.src_port),
            (Ipv4Addr::from(rw.dst), rw.dst_port),
            delta,
            hop,
            meta,
        );
        if let Some(i) = to_cache {
            // Cached with the checksum change the write summed.
            self.conntrack.set_cached_hop_v4(id, dir, epoch, i, applied);
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
    /// service, ...), else `Some(Some((service, frontend counter slot)))`
    /// for the forward path, which takes a conntrack hit in either
    /// direction, and `Some(None)` where only a reply may match. A function
    /// of the snapshot, `k`'s 5-tuple and this worker's id alone.
    #[inline(always)]
    fn fast_v4_dispatch<'s>(&self, snap: &'s Snapshot, k: &FastV4) -> Option<Option<(&'s Service, u32)>> {
        let dst32 = u32::from_be_bytes(k.dst);
        let owned = snap.owner_kind_v4(dst32).unwrap_or_default();
        if owned.contains(OwnerKind::SNAT) {
            if self.n_workers > 1 && owner_of_snat_port(k.dport, self.n_workers) != self.id {
                return None;
            }
            Some(None)
        } else if owned.contains(OwnerKind::VIP) {
            let fe = snap.frontend_v4(dst32, k.dport, k.proto)?;
            // As `Snapshot::lookup`: a frontend of an existing service.
            let svc = snap.get_service(fe.service)?;
            if !self.owns_client_v4(k.src, k.sport) {
                return None;
            }
            Some(Some((svc, fe.stats_slot)))
        } else if owned != OwnerKind::default() {
            None
        } else {
            // A DNAT reply, owned by the client: the destination.
            if !self.owns_client_v4(k.dst, k.dport) {
                return None;
            }
            Some(None)
        }
    }

    /// For a SYN without ACK that hit entry `id` travelling `dir`: whether
    /// it reopens the entry ([`Conntrack::reopened_by_syn`](crate::conntrack::Conntrack::reopened_by_syn)). Out of line:
    /// established traffic never calls it.
    #[cold]
    #[inline(never)]
    fn syn_reopens(&self, id: crate::conntrack::EntryId, dir: Direction, now: Tick) -> bool {
        dir == Direction::Original && self.conntrack.reopened_by_syn(id, now)
    }

    /// Whether this worker owns the flows of the client `addr:port`
    /// ([`owner_of_client`]).
    #[inline(always)]
    fn owns_client_v4(&self, addr: [u8; 4], port: u16) -> bool {
        self.n_workers <= 1 || owner_of_client(Ipv4Addr::from(addr).into(), port, self.n_workers) == self.id
    }
}

#[cfg(test)]
#[path = "fast_tests.rs"]
pub(super) mod tests;

#[cfg(test)]
#[path = "fast_cache_tests.rs"]
mod cache_tests;
