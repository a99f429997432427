//! The IPv6 fast path for the first packet of a connection: what
//! `paths::l4` → `paths::forward` → `paths::open` → `paths::translate` do
//! for a TCP SYN or UDP datagram to an IPv6 frontend that conntrack does
//! not know, on the fixed-offset read of
//! [`fast6::read_v6_at`](super::fast6::read_v6_at) instead of a
//! [`Parsed`](crate::wire::Parsed). The IPv6 form of `fast_open.rs`.
//!
//! The contract is the other fast paths': `Some(verdict)` only where the
//! general path would give that verdict, that frame and those counters;
//! `None`, having changed nothing, otherwise. Every check that can refuse
//! the packet without changing state (a source that may open nothing,
//! source ranges, a TCP segment that is not a SYN, client-IP affinity, no
//! backend, a backend without a resolved next hop, a packet too big for
//! its port, no SNAT port left) is made before the first change, and
//! declines: the general path then refuses it with its own counted reason
//! (or, for affinity, pins; for no SNAT port left, may take one back from
//! a connection not yet established: `paths::reclaim_snat`). Past the SNAT
//! allocation the insert is the general path's own
//! ([`Worker::insert_opened`], with its retry past expired entries in the
//! way; the key and translation as IPv6 values,
//! [`Conntrack::insert_missed_v6`](crate::conntrack::Conntrack::insert_missed_v6)),
//! so every outcome is its outcome: a new entry (evicting one if the table is full), a stateless
//! DNAT forward, `ConntrackFull` or `ConntrackConflict`. Tests:
//! `fast6_tests.rs`, which holds both IPv6 fast paths against the
//! general path.

use std::net::{IpAddr, Ipv6Addr};

use crate::conntrack::{ConnState, Direction, NatV6, Tags};
use crate::flow::{owner_of_client, FlowKeyV6, Proto};
use crate::maglev::flow_hash_v6;
use crate::snapshot::{Family, ForwardMode, OwnerKind, SessionAffinity, Snapshot};
use crate::wire::TcpFlags;
use crate::Tick;

use super::fast6::{write_v6, FastV6};
use super::paths::{opens_from_v6, to_link_group};
use super::{PacketMeta, Verdict, Worker};

/// Ethernet header without a VLAN tag.
const ETH: usize = 14;

impl Worker {
    /// A packet read as `k` from `frame` (`TAG` bytes of 802.1Q tag) whose
    /// 5-tuple conntrack has just missed: if it opens a connection to an
    /// IPv6 frontend of this worker's, opens it and forwards the packet,
    /// as the general path would; `None` (nothing changed) otherwise. Out
    /// of line: established traffic, which hits, does not carry its code.
    #[inline(never)]
    pub(super) fn fast_open_v6<const TAG: usize>(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        meta: &PacketMeta,
        k: &FastV6,
    ) -> Option<Verdict> {
        // --- `paths::l4`: a frontend of an existing service on a VIP
        // that is no SNAT address, and a client of this worker's ---
        let dst = Ipv6Addr::from(k.dst);
        let owned = snap.owner_kind(IpAddr::V6(dst))?;
        if owned.contains(OwnerKind::SNAT) || !owned.contains(OwnerKind::VIP) {
            return None;
        }
        let (fe, svc) = snap.lookup(IpAddr::V6(dst), k.dport, k.proto)?;
        let client = Ipv6Addr::from(k.src);
        if self.n_workers > 1 && owner_of_client(IpAddr::V6(client), k.sport, self.n_workers) != self.id {
            return None;
        }
        // --- `paths::forward` (the hop limit `read_v6_at` checked): what
        // may open nothing (`refused_opener`) ---
        if !opens_from_v6(client) || to_link_group(frame) || snap.is_owned(IpAddr::V6(client)) {
            return None;
        }
        // --- `paths::open` ---
        if !svc.allows_source(IpAddr::V6(client)) {
            return None;
        }
        let full_nat = svc.mode() == ForwardMode::FullNat;
        let syn = k.flags & (TcpFlags::SYN.0 | TcpFlags::ACK.0) == TcpFlags::SYN.0;
        if k.proto == Proto::Tcp && full_nat && !syn {
            return None;
        }
        // A pick with client-IP affinity reads and writes the affinity
        // table, and counts, even when the packet is then refused.
        if svc.affinity() != SessionAffinity::None {
            return None;
        }
        let flow = flow_hash_v6(k.src, k.dst, k.sport, k.dport, k.proto as u8);
        let backend = svc.pick(flow, Family::V6)?;
        let IpAddr::V6(be_addr) = backend.addr else {
            return None;
        };
        // `translate` would drop (`NoRoute`) or hold the packet
        // (`Resolve`) after creating the entry: the general path's
        // business; so is a packet too big for the port.
        let hop_index = snap.next_hop_index_v6(u128::from(be_addr))?;
        let hop = *snap.hop_v6(hop_index)?;
        if k.end - (ETH + TAG) > usize::from(hop.mtu) {
            return None;
        }
        // An exhausted pool changes nothing: the general path takes a pair
        // back or counts the drop.
        let snat = if full_nat {
            Some(self.snat.alloc_v6(k.proto)?)
        } else {
            None
        };

        // --- no way back past this point: a SNAT port may be taken ---
        let key = FlowKeyV6 {
            src: client,
            dst,
            sport: k.sport,
            dport: k.dport,
            proto: k.proto,
        };
        let nat = NatV6 {
            backend: (be_addr, backend.port),
            snat,
        };
        let tags = Tags {
            frontend: fe.stats_slot,
            backend: backend.stats_slot,
        };
        let id = match self.insert_opened(now, (key, nat), tags, None) {
            Ok(id) => id,
            Err(reason) => {
                return Some(self.drop(reason));
            }
        };
        let src = snat.unwrap_or((client, k.sport));
        let applied = write_v6::<TAG>(frame, k, src, (be_addr, backend.port), None, &hop, meta);
        match id {
            Some(id) => {
                // The flow cache (`fast6.rs`): the checks that led here
                // passed for this entry's original direction under this
                // snapshot.
                if let Some(applied) = applied {
                    self.conntrack.set_cached_hop_v6(
                        id,
                        Direction::Original,
                        snap.epoch(),
                        hop_index,
                        applied,
                    );
                }
                // Accounting the packet on the entry (`translate`'s
                // `touch`) restarts the timeout the insert has just set,
                // unless the packet moves the entry out of its initial
                // state.
                if ConnState::first_packet_keeps_initial(k.proto, k.flags) {
                    self.count_flow(tags, frame.len());
                } else if let Some(tags) = self.conntrack.touch(id, Direction::Original, k.flags, now) {
                    self.count_flow(tags, frame.len());
                }
            }
            // A DNAT packet forwarded without an entry (`translate`).
            None => self.count_flow(tags, frame.len()),
        }
        Some(Verdict::Transmit {
            port: hop.port,
            len: frame.len(),
        })
    }
}
