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
//! DNAT forward, `ConntrackFull` or `ConntrackConflict`. The burst path
//! warms a new connection's reply-key slot ahead ([`Worker::warm_open_v6`])
//! and hands its frontend, Maglev pick and hashes to the open, as for
//! IPv4. Tests:
//! `fast6_tests.rs`, which holds both IPv6 fast paths against the
//! general path.

use std::net::{IpAddr, Ipv6Addr};

use crate::conntrack::{ConnState, Direction, KeyHash, NatV6, Tags};
use crate::flow::{owner_of_client, AllocGuess, FlowKeyV6, Proto};
use crate::maglev::flow_hash_v6;
use crate::prefetch::Prefetch;
use crate::snapshot::{Backend, Family, ForwardMode, OwnerKind, Service, SessionAffinity, Snapshot};
use crate::wire::TcpFlags;
use crate::Tick;

use super::fast6::{write_v6, FastV6};
use super::fast_open::{OpenHashes, Pick};
use super::paths::{opens_from_v6, to_link_group};
use super::{PacketMeta, Verdict, Worker};

/// Ethernet header without a VLAN tag.
const ETH: usize = 14;

impl Worker {
    /// [`Worker::warm_open_v4`] for a frame of the burst path read by the
    /// IPv6 fast path, whose key `k` missed (looked up with `hash`): if it
    /// may open a connection to a frontend, warms (with `p`) the index
    /// slot of the reply key [`Worker::fast_open_v6`] will check and
    /// insert, which takes the backend Maglev picks and the next IPv6 SNAT
    /// pair `guess` points at, and the in-use word of the SNAT ports that
    /// allocation will set. Reads only. What it found is left in `pick`
    /// for stage 3 not to look up, pick or hash again; whether it picked
    /// is returned.
    #[inline]
    pub(super) fn warm_open_v6<'s>(
        &self,
        p: &impl Prefetch,
        snap: &'s Snapshot,
        k: &FlowKeyV6,
        hash: KeyHash,
        guess: &mut AllocGuess,
        pick: &mut Option<Pick<'s, Ipv6Addr>>,
    ) -> bool {
        let Some((fe, svc)) = snap.lookup(IpAddr::V6(k.dst), k.dport, k.proto) else {
            return false;
        };
        let (src, dst) = (k.src.octets(), k.dst.octets());
        let Some((b, be)) = pick_v6(svc, src, dst, k.sport, k.dport, k.proto) else {
            return false;
        };
        let pick = pick.insert(Pick {
            svc,
            fe_slot: fe.stats_slot,
            backend: b,
            addr: be,
            hashes: None,
        });
        let (snat, (rdst, rdport)) = if svc.mode() == ForwardMode::FullNat {
            let Some((a, port)) = self.snat.warm_alloc_v6(p, guess, k.proto) else {
                return true;
            };
            (Some((a, port)), (a.octets(), port))
        } else {
            (None, (src, k.sport))
        };
        let reply = self
            .conntrack
            .warm_v6(p, be.octets(), rdst, b.port, rdport, k.proto as u8);
        pick.hashes = Some(OpenHashes {
            key: hash,
            reply,
            snat,
        });
        true
    }

    /// A packet read as `k` from `frame` (`TAG` bytes of 802.1Q tag) whose
    /// 5-tuple conntrack has just missed: if it opens a connection to an
    /// IPv6 frontend of this worker's, opens it and forwards the packet,
    /// or drops it as the general path would (`ConntrackFull`,
    /// `ConntrackConflict`); `None` (nothing changed) otherwise.
    /// `picked`: what [`Worker::warm_open_v6`] found for `k`, if the burst
    /// path warmed it (the frontend, its service, the backend and the
    /// hashes); looked up, picked and hashed here otherwise. Out of line:
    /// established traffic, which hits, does not carry its code.
    #[inline(never)]
    pub(super) fn fast_open_v6<const TAG: usize>(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        meta: &PacketMeta,
        k: &FastV6,
        picked: Option<&Pick<'_, Ipv6Addr>>,
    ) -> Option<Verdict> {
        // --- `paths::l4`: a frontend of an existing service on a VIP
        // that is no SNAT address, and a client of this worker's ---
        let dst = Ipv6Addr::from(k.dst);
        let (fe_slot, svc) = match picked {
            // The warming found the frontend: a frontend's address is
            // owned as a VIP and never as SNAT, an invariant of every
            // snapshot, so `l4` would find the same.
            Some(pk) => (pk.fe_slot, pk.svc),
            None => {
                let owned = snap.owner_kind(IpAddr::V6(dst))?;
                if owned.contains(OwnerKind::SNAT) || !owned.contains(OwnerKind::VIP) {
                    return None;
                }
                let (fe, svc) = snap.lookup(IpAddr::V6(dst), k.dport, k.proto)?;
                (fe.stats_slot, svc)
            }
        };
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
        let (backend, be_addr) = match picked {
            Some(pk) => (pk.backend, pk.addr),
            None => pick_v6(svc, k.src, k.dst, k.sport, k.dport, k.proto)?,
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
            frontend: fe_slot,
            backend: backend.stats_slot,
        };
        // The warming's hashes hold if its SNAT guess was the pair taken.
        let hashes = match picked.and_then(|p| p.hashes.as_ref()) {
            Some(h) if h.snat == snat => Some((h.key, h.reply)),
            _ => None,
        };
        let id = match self.insert_opened(now, (key, nat), tags, hashes) {
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

/// The backend Maglev picks for a new IPv6 connection
/// `src:sport → dst:dport` to `svc`, with its address: what `paths::open`
/// picks for the same packet. `None` for a service with client-IP
/// affinity, whose pick reads and writes the affinity table (and counts,
/// even when the packet is then refused): such new connections take the
/// general path.
#[inline(always)]
fn pick_v6(
    svc: &Service,
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    proto: Proto,
) -> Option<(&Backend, Ipv6Addr)> {
    if svc.affinity() != SessionAffinity::None {
        return None;
    }
    let flow = flow_hash_v6(src, dst, sport, dport, proto as u8);
    let b = svc.pick(flow, Family::V6)?;
    match b.addr {
        IpAddr::V6(a) => Some((b, a)),
        IpAddr::V4(_) => None,
    }
}
