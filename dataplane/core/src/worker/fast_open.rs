//! The IPv4 fast path for the first packet of a connection: what
//! `paths::forward` → `paths::open` → `paths::translate` do for a TCP SYN
//! or UDP datagram to a frontend that conntrack does not know, on the
//! fixed-offset read of [`fast::read_v4`](super::fast::read_v4) instead of
//! a [`Parsed`](crate::wire::Parsed).
//!
//! Same contract as the established fast path (`fast.rs`): `Some(verdict)`
//! only where the general path would give that verdict, that frame and
//! those counters, and `None`, having changed nothing, otherwise. Every
//! check that can refuse the packet without changing state (source ranges,
//! a TCP segment that is not a SYN, no backend, a backend without a
//! resolved next hop, a packet too big for its port, no SNAT port left) is
//! made before the first change,
//! and declines: the general path then refuses it with its own counted
//! reason (or, for no SNAT port left, may take one back from a connection
//! not yet established and open it: `paths::reclaim_snat`). Past the SNAT allocation the outcome is the general path's
//! whatever happens: a new entry (evicting one if the table is full), a
//! stateless DNAT forward, or a `ConntrackFull` drop; but a connection
//! whose reply tuple is taken declines (its SNAT port given back), and
//! the general path evicts what is in the way if it has expired, or drops
//! it as `ConntrackConflict`.

use std::net::{IpAddr, Ipv4Addr};

use crate::conntrack::{ConnState, Direction, KeyHash, NatV4, Tags};
use crate::flow::{AllocGuess, Proto};
use crate::maglev::flow_hash_v4;
use crate::prefetch::Prefetch;
use crate::snapshot::{Backend, Family, ForwardMode, Service, SessionAffinity, Snapshot};
use crate::{DropReason, Tick};

use super::fast::{write_v4, FastV4, VLAN_TAG};
use super::{PacketMeta, Verdict, Worker};

impl Worker {
    /// For a frame of the burst path read as `k` whose 5-tuple missed:
    /// if it may open a connection to a frontend, warms (with `p`) the
    /// index slot of the reply key that [`Worker::fast_open_v4`] will check
    /// and insert, which takes the backend Maglev picks and the next SNAT
    /// pair `guess` (the full-NAT guesses of the burst so far) points at;
    /// and the in-use word of the SNAT ports that allocation will set.
    /// Reads only.
    ///
    /// What it found (the frontend's service and counter slot, the pick,
    /// the reply key's hash and the SNAT pair it assumed) is left in
    /// `pick`, with `hash`, the hash stage 2 looked `k`'s key up with, for
    /// stage 3 not to look up, pick or hash again. Returns whether it
    /// picked (the packet goes to a backend of a frontend's service: only
    /// then may it insert, and evict).
    #[inline]
    pub(super) fn warm_open_v4<'s>(
        &self,
        p: &impl Prefetch,
        snap: &'s Snapshot,
        k: &FastV4,
        hash: KeyHash,
        guess: &mut AllocGuess,
        pick: &mut Option<Pick<'s>>,
    ) -> bool {
        let Some(fe) = snap.frontend_v4(u32::from_be_bytes(k.dst), k.dport, k.proto) else {
            return false;
        };
        let Some(svc) = snap.get_service(fe.service) else {
            return false;
        };
        let Some((b, be)) = pick_v4(svc, k) else {
            return false;
        };
        let pick = pick.insert(Pick {
            svc,
            fe_slot: fe.stats_slot,
            backend: b,
            addr: be,
            hashes: None,
        });
        let (snat, (dst, dport)) = if svc.mode() == ForwardMode::FullNat {
            let Some((a, port)) = self.snat.warm_alloc_v4(p, guess, k.proto) else {
                return true;
            };
            (Some((a, port)), (a.octets(), port))
        } else {
            (None, (k.src, k.sport))
        };
        let reply = self
            .conntrack
            .warm_v4(p, be.octets(), dst, b.port, dport, k.proto as u8);
        pick.hashes = Some(OpenHashes {
            key: hash,
            reply,
            snat,
        });
        true
    }

    /// A new connection to `svc` (frontend counter slot `fe_slot`) opened
    /// by the packet `frame`, read as `k`, whose 5-tuple conntrack misses.
    /// `picked`: what [`Worker::warm_open_v4`] found for `k` to `svc`, if
    /// it did: the backend (and its address; the pick depends on nothing
    /// else) and the hashes; picked and hashed here otherwise.
    ///
    /// The verdict comes back as [`Opened`], which fits in registers: a
    /// [`Verdict`] is returned through memory, and the caller's copy of it
    /// to its verdict slot stalled on reading what this function had just
    /// stored in pieces.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    pub(super) fn fast_open_v4(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        meta: &PacketMeta,
        k: &FastV4,
        (svc, fe_slot): (&Service, u32),
        picked: Option<&Pick<'_>>,
        tagged: bool,
    ) -> Option<Opened> {
        let client = Ipv4Addr::from(k.src);
        if !svc.allows_source(IpAddr::V4(client)) {
            return None;
        }
        let full_nat = svc.mode() == ForwardMode::FullNat;
        if k.proto == Proto::Tcp && full_nat && !k.is_syn() {
            return None;
        }
        let (backend, be_addr) = match picked {
            Some(p) => (p.backend, p.addr),
            None => pick_v4(svc, k)?,
        };
        let be_slot = backend.stats_slot;
        // `translate` would drop (`NoRoute`) or hold the packet (`Resolve`)
        // after creating the entry: the general path's business.
        let hop_index = snap.next_hop_index_v4(u32::from(be_addr))?;
        let hop = *snap.hop_v4(hop_index)?;
        // So is a packet too big for the port (answered or dropped there).
        if !k.fits_tagged(tagged, hop.mtu) {
            return None;
        }
        // An exhausted pool changes nothing: the general path takes a pair
        // back or counts the drop.
        let (snat, src) = if full_nat {
            let (a, port) = self.snat.alloc_v4(k.proto)?;
            (Some((a, port)), (a, port))
        } else {
            (None, (client, k.sport))
        };

        // --- no way back past this point: a SNAT port is taken ---
        let nat = NatV4 {
            backend: (be_addr, backend.port),
            snat,
        };
        let tags = Tags {
            frontend: fe_slot,
            backend: be_slot,
        };
        // The warming's hashes hold if its SNAT guess was the pair taken.
        let hashes = picked
            .and_then(|p| p.hashes)
            .filter(|h| h.snat == full_nat.then_some(src))
            .map(|h| (h.key, h.reply));
        let id = match self.insert_opened(now, (k.key_v4(), nat), tags, hashes) {
            Ok(id) => id,
            // Its SNAT port given back: the general path tries again past
            // expired entries in the way, and drops it if one lives
            // (`Worker::retry_past_expired`). Unlike the other declines,
            // this one leaves two traces no verdict or counter shows: the
            // conntrack's internal `insert_exists` counted the refused
            // insert, and a full-NAT port given back goes to the end of
            // its free list, so the general path may take another pair
            // (any free pair is as good, and the reply tuple of a
            // full-NAT connection, to a port just taken from the free
            // list, is all but never in use).
            Err(DropReason::ConntrackConflict) => return None,
            Err(reason) => {
                self.drop(reason);
                return Some(Opened::Dropped(reason));
            }
        };
        let delta = if tagged {
            write_v4::<VLAN_TAG>(frame, k, src, (be_addr, backend.port), None, &hop, meta)
        } else {
            write_v4::<0>(frame, k, src, (be_addr, backend.port), None, &hop, meta)
        };
        if let Some(id) = id {
            // The flow cache (`fast.rs`): the checks that led here passed
            // for this entry's original direction under this snapshot.
            self.conntrack
                .set_cached_hop_v4(id, Direction::Original, snap.epoch(), hop_index, delta);
            // Accounting the packet on the entry (`paths::translate`'s
            // `touch`) restarts the timeout the insert has just set, unless
            // the packet moves the entry out of its initial state.
            if ConnState::first_packet_keeps_initial(k.proto, k.flags) {
                self.count_flow(tags, frame.len());
            } else if let Some(tags) = self.conntrack.touch(id, Direction::Original, k.flags, now) {
                self.count_flow(tags, frame.len());
            }
        } else {
            // A DNAT packet forwarded without an entry (`paths::translate`).
            self.count_flow(tags, frame.len());
        }
        Some(Opened::Transmit(hop.port))
    }
}

/// [`Worker::fast_open_v4`]'s verdict: `Transmit` the whole frame on a
/// port, or `Dropped` (counted).
#[derive(Debug, Clone, Copy)]
pub(super) enum Opened {
    Transmit(u16),
    Dropped(DropReason),
}

impl Opened {
    /// The [`Verdict`] for a frame of `len` bytes.
    #[inline(always)]
    pub(super) fn verdict(self, len: usize) -> Verdict {
        match self {
            Opened::Transmit(port) => Verdict::Transmit { port, len },
            Opened::Dropped(reason) => Verdict::Drop(reason),
        }
    }
}

/// What [`Worker::warm_open_v4`] (or, with `A` [`Ipv6Addr`](std::net::Ipv6Addr),
/// [`Worker::warm_open_v6`]) found ahead for a new connection: the
/// frontend's service and counter slot, and the backend Maglev picks, with
/// its address.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pick<'s, A = Ipv4Addr> {
    pub(super) svc: &'s Service,
    pub(super) fe_slot: u32,
    pub(super) backend: &'s Backend,
    pub(super) addr: A,
    /// The hashes the insert needs, when the warming got that far.
    pub(super) hashes: Option<OpenHashes<A>>,
}

/// What [`Worker::warm_open_v4`] (`warm_open_v6`) hashed for a new
/// connection: its key (as stage 2 looked it up) and its reply key, which
/// assumed the SNAT pair `snat` (full-NAT; `None` for DNAT, whose reply
/// key is the client's).
#[derive(Debug, Clone, Copy)]
pub(super) struct OpenHashes<A = Ipv4Addr> {
    pub(super) key: KeyHash,
    pub(super) reply: KeyHash,
    pub(super) snat: Option<(A, u16)>,
}

/// The backend Maglev picks for a new connection read as `k` to `svc`
/// (IPv4 ring), with its address as an `Ipv4Addr`: what `paths::open`
/// picks for the same packet. `None` for a service with client-IP
/// affinity, whose pick reads and writes the affinity table: such new
/// connections take the general path.
#[inline(always)]
fn pick_v4<'s>(svc: &'s Service, k: &FastV4) -> Option<(&'s Backend, Ipv4Addr)> {
    if svc.affinity() != SessionAffinity::None {
        return None;
    }
    let flow = flow_hash_v4(k.src, k.dst, k.sport, k.dport, k.proto as u8);
    let b = svc.pick(flow, Family::V4)?;
    match b.addr {
        IpAddr::V4(a) => Some((b, a)),
        IpAddr::V6(_) => None,
    }
}
