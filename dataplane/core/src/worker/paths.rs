//! The translation paths of [`Worker::handle_packet`]: forward, reply and
//! ICMP error. See the module doc of [`super`] for the policies.

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use crate::affinity::{self, backend_tag, Pinned};
use crate::conntrack::{
    Conntrack, Direction, EntryId, Evicted, InsertError, KeyHash, Nat, NatV4, NatV6, Rewrite, Tags,
};
use crate::counters::WorkerCounters;
use crate::flow::{
    owner_of_client, owner_of_snat_port, FlowKey, FlowKeyV4, FlowKeyV6, Proto, SnatPorts, WorkerId,
};
use crate::maglev::{flow_hash_v4, flow_hash_v6};
use crate::nat;
use crate::reject;
use crate::snapshot::{Backend, Family, ForwardMode, OwnerKind, Route, Service, SessionAffinity, Snapshot};
use crate::wire::{icmpv4, Parsed, TcpFlags, L3};
use crate::{DropReason, Tick};

use super::{release_snat, PacketMeta, Verdict, Worker};

/// A conntrack lookup of the packet's own 5-tuple done ahead of time (by
/// the burst path, or by the IPv6 fast path before it declined:
/// `Some(result)`), or `None`: look it up now.
pub(super) type Found = Option<Option<(EntryId, Direction)>>;

/// The Maglev input for a new flow of `p`.
#[inline]
fn flow_hash(p: &Parsed) -> u64 {
    match (p.src, p.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            flow_hash_v4(s.octets(), d.octets(), p.src_port, p.dst_port, p.protocol)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            flow_hash_v6(s.octets(), d.octets(), p.src_port, p.dst_port, p.protocol)
        }
        // parse never mixes families.
        _ => 0,
    }
}

impl Worker {
    /// The worker owning a flow whose client endpoint is `client`.
    #[inline]
    fn owner_by_client(&self, client: (IpAddr, u16)) -> WorkerId {
        if self.n_workers == 1 {
            return self.id;
        }
        owner_of_client(client.0, client.1, self.n_workers)
    }

    /// The worker owning a full-NAT flow whose SNAT port is `port`.
    #[inline]
    fn owner_by_snat_port(&self, port: u16) -> WorkerId {
        if self.n_workers == 1 {
            return self.id;
        }
        owner_of_snat_port(port, self.n_workers)
    }

    /// TCP and UDP: forward, reply, or not ours.
    pub(super) fn l4(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        p: &Parsed,
        meta: &PacketMeta,
        found: Found,
    ) -> Verdict {
        let owned = snap.owner_kind(p.dst).unwrap_or_default();
        // Before the hand-over: no worker tracks a connection to a group
        // or martian address (`opens_from` keeps them out as clients).
        if owned == OwnerKind::default() && !reject::names_one_host(p.dst) {
            return self.drop(DropReason::NotUnicast);
        }
        let proto = match Proto::from_u8(p.protocol) {
            Some(pr @ (Proto::Tcp | Proto::Udp)) => pr,
            _ => return self.drop(DropReason::UnsupportedProtocol),
        };
        if owned.contains(OwnerKind::SNAT) {
            // Full-NAT reply: the SNAT port names the owner.
            let owner = self.owner_by_snat_port(p.dst_port);
            if owner != self.id {
                return self.hand_over(owner);
            }
            return self.reply(now, snap, frame, p, proto, meta, found);
        }
        if owned.contains(OwnerKind::VIP) {
            if let Some((fe, svc)) = snap.lookup(p.dst, p.dst_port, proto) {
                let owner = self.owner_by_client((p.src, p.src_port));
                if owner != self.id {
                    return self.hand_over(owner);
                }
                let fe_slot = fe.stats_slot;
                return self.forward(now, snap, frame, p, proto, svc, fe_slot, meta, found);
            }
        }
        if owned.contains(OwnerKind::INTERFACE) {
            return Verdict::ToHost;
        }
        if owned != OwnerKind::default() {
            // A VIP or SNAT address, but no frontend on this port/protocol:
            // TCP to a VIP is refused with a RST (as a host with no
            // listener would), the rest dropped.
            if owned.contains(OwnerKind::VIP) && proto == Proto::Tcp {
                return self.refuse_tcp(snap, frame, p, meta);
            }
            return self.drop(DropReason::NoFrontend);
        }
        // Not addressed to the balancer: a DNAT reply (backend → client),
        // owned by the client endpoint, which is the destination.
        let owner = self.owner_by_client((p.dst, p.dst_port));
        if owner != self.id {
            return self.hand_over(owner);
        }
        self.reply(now, snap, frame, p, proto, meta, found)
    }

    /// `handed_over` is the I/O shell's to count: only it knows whether
    /// the frame reached the owner (see [`WorkerCounters::handed_over`](crate::counters::WorkerCounters::handed_over)).
    #[inline]
    fn hand_over(&self, owner: WorkerId) -> Verdict {
        Verdict::HandOver(owner)
    }

    /// Client → VIP.
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        p: &Parsed,
        proto: Proto,
        svc: &Service,
        fe_slot: u32,
        meta: &PacketMeta,
        found: Found,
    ) -> Verdict {
        let Some(key) = FlowKey::new((p.src, p.src_port), (p.dst, p.dst_port), proto) else {
            return self.drop(DropReason::UnsupportedProtocol);
        };
        // Checked before any state is created: a packet that cannot be
        // forwarded must not open a connection or take a SNAT port.
        if p.ttl <= 1 {
            return self.drop(DropReason::TtlExceeded);
        }
        let mut found = found.unwrap_or_else(|| self.conntrack.lookup(&key));
        if let Some((id, Direction::Original)) = found {
            if proto == Proto::Tcp && opens_connection(p.tcp_flags) && self.conntrack.reopened_by_syn(id, now)
            {
                // The checks of the packet itself that a new connection's
                // first packet passes, before the old one ends: a SYN they
                // refuse ends nothing. (Those of the service, in `open`,
                // come after: a SYN it refuses has still ended the old
                // connection, as after the entry's expiry.)
                if let Some(reason) = refused_opener(snap, frame, p) {
                    return self.drop(reason);
                }
                self.end_reopened(id);
                found = None;
            }
        }
        let (account, rw) = match found {
            Some((id, dir)) => match self.conntrack.rewrite(id, dir) {
                Some(rw) => (Account::Entry(id, dir), rw),
                None => return self.drop(DropReason::NoConntrackReply),
            },
            None => match refused_opener(snap, frame, p) {
                Some(reason) => return self.drop(reason),
                None => match self.open(now, snap, p, proto, key, svc, fe_slot) {
                    Ok(opened) => opened,
                    Err(NotOpened::Drop(reason)) => return self.drop(reason),
                    Err(NotOpened::TooBig(mtu)) => return self.too_big(snap, frame, p, meta, mtu),
                },
            },
        };
        self.translate(now, snap, frame, p, account, &rw, meta)
    }

    /// The worker's SNAT pairs of `proto` toward `backend`'s family are all
    /// in use: a pair held by a full-NAT connection to another backend that
    /// is not assured (embryonic: a handshake not finished, UDP not a
    /// stream), expired or closing is taken back, its connection evicted
    /// ([`Conntrack::reclaim_snat`], counted in `conntrack_evictions`), and
    /// handed out. `None` where only established connections, or
    /// connections to `backend`, hold those looked at.
    #[cold]
    #[inline(never)]
    fn reclaim_snat(&mut self, now: Tick, backend: (IpAddr, u16), proto: Proto) -> Option<(IpAddr, u16)> {
        let ports = self.snat.port_range();
        let e = self.conntrack.reclaim_snat(backend, proto, &ports, now)?;
        self.counters.conntrack_evictions.inc();
        release_snat(&mut self.snat, e.nat.snat(), e.original.proto());
        self.snat.alloc(backend, proto)
    }

    /// Ends entry `id`, which a client SYN reopens
    /// ([`Conntrack::reopened_by_syn`]): its SNAT pair goes back, and it
    /// counts as expired. The SYN then opens a new connection, with a new
    /// Maglev pick (a backend drained or deleted since takes no new
    /// connection) and a new SNAT pair.
    #[cold]
    #[inline(never)]
    fn end_reopened(&mut self, id: EntryId) {
        if let Some(e) = self.conntrack.remove(id) {
            release_snat(&mut self.snat, e.nat.snat(), e.original.proto());
            self.counters.conntrack_expirations.inc();
        }
    }

    /// A new connection to `svc`: source ranges, Maglev, SNAT, conntrack.
    /// Returns where the packet is accounted (its new entry, or its tags
    /// alone when a full table forwards it statelessly) and the rewrite;
    /// opens nothing for a packet too big for the backend's port
    /// (`NotOpened::TooBig`, its MTU): it will not be sent, and the
    /// sender's smaller next packet opens the same connection.
    #[allow(clippy::too_many_arguments)]
    fn open(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        p: &Parsed,
        proto: Proto,
        key: FlowKey,
        svc: &Service,
        fe_slot: u32,
    ) -> Result<(Account, Rewrite), NotOpened> {
        if !svc.allows_source(p.src) {
            return Err(DropReason::SourceRangeDenied.into());
        }
        let full_nat = svc.mode() == ForwardMode::FullNat;
        if proto == Proto::Tcp && full_nat && !opens_connection(p.tcp_flags) {
            return Err(DropReason::TcpNotSyn.into());
        }
        // The destination's family ring: never translate across families.
        let family = Family::of(p.dst);
        let backend = match svc.affinity() {
            SessionAffinity::None => svc.pick(flow_hash(p), family),
            SessionAffinity::ClientIp { timeout } => self.pick_pinned(now, svc, p.src, family, timeout),
        }
        .ok_or(DropReason::NoBackend)?;
        let be = (backend.addr, backend.port);
        let be_slot = backend.stats_slot;
        // A backend nothing routes to: `translate` would drop the packet,
        // so it is dropped before it takes an entry and a SNAT port (held
        // 60 s, they would starve the worker's other services' new
        // connections under a stream of SYNs to this one).
        let route = snap.route(be.0).ok_or(DropReason::NoRoute)?;
        // (`forward` dropped a TTL that runs out here.)
        if ip_len(p) > usize::from(route.mtu()) {
            return Err(NotOpened::TooBig(route.mtu()));
        }
        let nat = if full_nat {
            let snat = match self.snat.alloc(be, proto) {
                Some(pair) => pair,
                None => self
                    .reclaim_snat(now, be, proto)
                    .ok_or(DropReason::SnatExhausted)?,
            };
            Nat::FullNat { backend: be, snat }
        } else {
            Nat::Dnat { backend: be }
        };
        let tags = Tags {
            frontend: fe_slot,
            backend: be_slot,
        };
        let rw = Rewrite {
            src: nat.snat().unwrap_or((p.src, p.src_port)),
            dst: be,
        };
        let account = match self.insert_opened(now, (key, nat), tags, None)? {
            Some(id) => Account::Entry(id, Direction::Original),
            None => Account::Stateless(tags),
        };
        Ok((account, rw))
    }

    /// The backend for a new connection from `client` to `svc`, a service
    /// with client-IP affinity of `timeout` (see [`crate::affinity`]): the
    /// client's pin if it is live and its backend is still in `family`'s
    /// ring, its timeout restarted (`affinity_hits`); else the ring's pick
    /// for the client address, pinned (`affinity_pins`, and
    /// `affinity_evictions` if that took a live pin's slot). Counted and
    /// pinned here, for the connection's first packet, even if a later check
    /// drops it (no route, no SNAT port, conntrack full): the client asked.
    fn pick_pinned<'s>(
        &self,
        now: Tick,
        svc: &'s Service,
        client: IpAddr,
        family: Family,
        timeout: Duration,
    ) -> Option<&'s Backend> {
        let table = &*self.affinity;
        let key = table.key(svc.affinity_id(), client);
        let (now_s, expires) = (affinity::seconds(now), affinity::expiry(now, timeout));
        if let Some(pin) = table.lookup(key, now_s) {
            if let Some(b) = svc.pinned(pin.tag, family) {
                table.touch(&pin, expires);
                self.counters.affinity_hits.inc();
                return Some(b);
            }
        }
        let b = svc.pick_for_client(client, family)?;
        match table.pin(key, backend_tag(b.addr, b.port), expires, now_s) {
            Pinned::Stored => self.counters.affinity_pins.inc(),
            Pinned::Evicted => {
                self.counters.affinity_pins.inc();
                self.counters.affinity_evictions.inc();
            }
            // Another worker is pinning this client (or its bucket's
            // oldest pin) right now: the next connection will find it.
            Pinned::Raced => {}
        }
        Some(b)
    }

    /// Tracks a connection being opened (`what`: its key and translation,
    /// with `tags`' counter slots), whose key a lookup made for this packet
    /// has just missed, counting it per frontend and backend, and counting
    /// and releasing the SNAT port of any entry it evicts. `Ok(None)`: the
    /// table is full of established connections and a DNAT flow goes on
    /// statelessly (counted); a full-NAT one cannot, so its SNAT port is
    /// returned and the packet dropped (`ConntrackFull`). A connection whose
    /// tuples collide with a tracked one's (its replies would be taken for
    /// the other's) is dropped, DNAT or full-NAT, as `ConntrackConflict`,
    /// its SNAT port returned. `hashes`: the key's and its reply key's
    /// places, if known ([`Conntrack::insert_missed`] for an IPv4 key,
    /// [`Conntrack::insert_missed_v6`]; the general values' IPv6 insert
    /// ignores them).
    pub(super) fn insert_opened(
        &mut self,
        now: Tick,
        what: impl Opening,
        tags: Tags,
        hashes: Option<(KeyHash, KeyHash)>,
    ) -> Result<Option<EntryId>, DropReason> {
        let (ct, snat, counters) = (&mut self.conntrack, &mut self.snat, &self.counters);
        // Both callers open on a lookup that missed, just made.
        let inserted = what.insert(ct, tags, now, hashes, |evicted| {
            counters.conntrack_evictions.inc();
            release_snat(snat, evicted.snat, evicted.proto);
        });
        match inserted {
            Ok(id) => {
                count_opened(counters, tags);
                Ok(Some(id))
            }
            Err(InsertError::Full) if !what.is_full_nat() => {
                counters.stateless_forwards.inc();
                Ok(None)
            }
            Err(e) => {
                if e == InsertError::ReplyConflict {
                    if let Some(id) = what.retry_past_expired(self, tags, now) {
                        return Ok(Some(id));
                    }
                }
                what.release(&mut self.snat);
                Err(match e {
                    InsertError::Full => DropReason::ConntrackFull,
                    // `FamilyMismatch` cannot happen here (Maglev picks a
                    // backend of the flow's family, SNAT an address of it),
                    // nor `Exists` (the lookup just missed); were they to,
                    // the new connection does collide with the state.
                    InsertError::Exists | InsertError::FamilyMismatch | InsertError::ReplyConflict => {
                        DropReason::ConntrackConflict
                    }
                })
            }
        }
    }

    /// A TCP segment to a port of the VIP address `p.dst` that no frontend
    /// serves: answered with a RST if some service with a frontend on that
    /// address allows the client, so that a client every service there
    /// denies sees silence on every port, served or not, and cannot map
    /// the served ones; dropped as on a served port then
    /// (`SourceRangeDenied`). Out of line: the forward path does not carry
    /// its code.
    #[cold]
    #[inline(never)]
    fn refuse_tcp(&mut self, snap: &Snapshot, frame: &mut [u8], p: &Parsed, meta: &PacketMeta) -> Verdict {
        if !snap.vip_allows_source(p.dst, p.src) {
            return self.drop(DropReason::SourceRangeDenied);
        }
        // No answer to a prefix's broadcast address, as to any source
        // that is no one host (`reject` knows no prefixes).
        if let Some(port) = snap
            .port(meta.port)
            .filter(|_| !snap.is_directed_broadcast(p.src))
        {
            if let Some(len) = reject::write_tcp_reset(frame, p, port.mac()) {
                self.counters.resets_sent.inc();
                return Verdict::Transmit { port: meta.port, len };
            }
        }
        self.drop(DropReason::NoFrontend)
    }

    /// Backend → client (DNAT) or backend → SNAT endpoint (full-NAT).
    #[allow(clippy::too_many_arguments)]
    fn reply(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        p: &Parsed,
        proto: Proto,
        meta: &PacketMeta,
        found: Found,
    ) -> Verdict {
        let Some(key) = FlowKey::new((p.src, p.src_port), (p.dst, p.dst_port), proto) else {
            return self.drop(DropReason::UnsupportedProtocol);
        };
        match found.unwrap_or_else(|| self.conntrack.lookup(&key)) {
            Some((id, dir @ Direction::Reply)) => match self.conntrack.rewrite(id, dir) {
                Some(rw) => self.translate(now, snap, frame, p, Account::Entry(id, dir), &rw, meta),
                None => self.drop(DropReason::NoConntrackReply),
            },
            // A connected prefix's broadcast, never a client (`opens_from`):
            // no reply of a connection. Told apart only here, on a miss,
            // so that the fast path, which forwards hits, agrees.
            _ if snap.is_directed_broadcast(p.dst) => self.drop(DropReason::NotUnicast),
            _ => self.drop(DropReason::NoConntrackReply),
        }
    }

    /// Rewrites addresses and L2, updates conntrack state and counters.
    #[allow(clippy::too_many_arguments)]
    fn translate(
        &mut self,
        now: Tick,
        snap: &Snapshot,
        frame: &mut [u8],
        p: &Parsed,
        account: Account,
        rw: &Rewrite,
        meta: &PacketMeta,
    ) -> Verdict {
        let Some(route) = snap.route(rw.dst.0) else {
            return self.drop(DropReason::NoRoute);
        };
        // A packet whose TTL runs out is dropped as such by the rewrite,
        // never answered as too big (as a router decides).
        if ip_len(p) > usize::from(route.mtu()) && p.ttl > 1 {
            return self.too_big(snap, frame, p, meta, route.mtu());
        }
        if let Err(reason) = nat::rewrite(frame, p, rw, &meta.offload) {
            return self.drop(reason);
        }
        set_l2(frame, &route, snap);
        match account {
            Account::Entry(id, dir) => {
                if let Some(tags) = self.conntrack.touch(id, dir, p.tcp_flags.0, now) {
                    self.count_flow(tags, frame.len());
                }
            }
            Account::Stateless(tags) => self.count_flow(tags, frame.len()),
        }
        verdict(&route, frame.len())
    }

    /// A packet larger than `mtu`, the MTU of the port it would leave by,
    /// not translated: answered, in place and before any rewrite (the
    /// sender must recognise its packet in the quote), with the ICMP error
    /// that carries `mtu` back to it ([`reject::write_too_big`],
    /// `too_big_sent`), or dropped unchanged (`MtuExceeded`). Not
    /// rate-limited, as Linux does not limit these two messages: a limit
    /// shared by every sender would let one sender's flood of big packets
    /// black-hole the path-MTU discovery of all the others, and an answer
    /// is never larger than the packet it replaces.
    #[cold]
    #[inline(never)]
    fn too_big(
        &mut self,
        snap: &Snapshot,
        frame: &mut [u8],
        p: &Parsed,
        meta: &PacketMeta,
        mtu: u16,
    ) -> Verdict {
        if let Some(port) = snap
            .port(meta.port)
            .filter(|_| !snap.is_directed_broadcast(p.src))
        {
            if let Some(len) = reject::write_too_big(frame, p, port, mtu) {
                self.counters.too_big_sent.inc();
                return Verdict::Transmit { port: meta.port, len };
            }
        }
        self.drop(DropReason::MtuExceeded)
    }

    #[inline]
    pub(super) fn count_flow(&self, tags: Tags, bytes: usize) {
        if let Some(c) = self.counters.frontend(tags.frontend) {
            c.packet(bytes);
        }
        if let Some(c) = self.counters.backend(tags.backend) {
            c.packet(bytes);
        }
    }

    /// An ICMP or ICMPv6 error: translate it if it quotes a tracked flow.
    ///
    /// The quoted packet is one the balancer sent (after translation),
    /// travelling opposite to the error. Reversed, its tuple is a conntrack
    /// key: `Reply` means the quote went towards a backend (the error is for
    /// the client), `Original` that it went towards a client (the error is
    /// for the backend).
    pub(super) fn icmp_error(
        &mut self,
        snap: &Snapshot,
        frame: &mut [u8],
        p: &Parsed,
        meta: &PacketMeta,
    ) -> Verdict {
        // A redirect is advice to the router that forwarded the packet, lbd
        // (RFC 1812 §5.2.7.2), and source quench is deprecated (RFC 6633):
        // neither is passed on.
        if p.l3 == L3::Ipv4
            && matches!(
                p.icmp_type,
                icmpv4::msg_type::REDIRECT | icmpv4::msg_type::SOURCE_QUENCH
            )
        {
            return self.drop(DropReason::IcmpNotTranslated);
        }
        // No router reports from a group, martian or broadcast address
        // (link-local ones are reported from lbd's own address, below):
        // dropped as any packet from such a source that lbd would forward.
        if !reject::names_one_host(p.src) || snap.is_directed_broadcast(p.src) {
            return self.drop(DropReason::MartianSource);
        }
        let q = match p.quoted(frame) {
            Ok(q) => q,
            // A quoted non-first fragment has no ports, and a quoted IPv6
            // chain lbd refuses (or one the sender cut short) is no packet
            // lbd sent: like any quote of nothing tracked. The error's own
            // chain was parsed before (`ipv6_extension_header` there).
            Err(DropReason::Fragment | DropReason::Ipv6ExtensionHeader) => {
                return self.drop(DropReason::IcmpErrorUntracked)
            }
            Err(reason) => return self.drop(reason),
        };
        // An error goes to the source of the packet it quotes (RFC 792,
        // RFC 4443 §2.2); one addressed elsewhere that quotes a tracked
        // connection is forged (the SNAT port of a full-NAT connection is
        // one of 64,512 guesses).
        if p.dst != q.src {
            return self.drop(DropReason::IcmpErrorUntracked);
        }
        let src_kind = snap.owner_kind(q.src).unwrap_or_default();
        // The host's traffic (from an interface address that is no VIP or
        // SNAT address, which lbd leaves to the host): so is its error, a
        // path-MTU report for the host's BGP session, say. (lbd's shell has
        // no host stack and counts it as `local_unhandled`.)
        if src_kind == OwnerKind::INTERFACE {
            return Verdict::ToHost;
        }
        let Some(proto) = Proto::from_u8(q.protocol) else {
            return self.drop(DropReason::IcmpErrorUntracked);
        };
        // Ownership from the quote: the SNAT port, else the client endpoint.
        let owner = if src_kind.contains(OwnerKind::SNAT) {
            self.owner_by_snat_port(q.src_port)
        } else if src_kind.contains(OwnerKind::VIP) {
            self.owner_by_client((q.dst, q.dst_port))
        } else {
            self.owner_by_client((q.src, q.src_port))
        };
        if owner != self.id {
            return self.hand_over(owner);
        }
        let Some(key) = FlowKey::new((q.dst, q.dst_port), (q.src, q.src_port), proto) else {
            return self.drop(DropReason::IcmpErrorUntracked);
        };
        let Some((id, dir)) = self.conntrack.lookup(&key) else {
            return self.drop(DropReason::IcmpErrorUntracked);
        };
        // The error travels like a packet of direction `dir` of the flow.
        let Some(flow_rw) = self.conntrack.rewrite(id, dir) else {
            return self.drop(DropReason::IcmpErrorUntracked);
        };
        // The destination is the flow's far end.
        let Some(route) = snap.route(flow_rw.dst.0) else {
            return self.drop(DropReason::NoRoute);
        };
        // Outer source: the far end itself reporting (a backend's port
        // unreachable) speaks as the receiver knows it, the VIP towards the
        // client (as Linux's NAT does), so backend addresses do not leak;
        // otherwise the reporting router stays the source unless it must
        // be our SNAT address for the backend to answer us (full-NAT,
        // towards the backend), or it is link-local (a router with no other
        // address on that link, RFC 4291 §2.5.6 and RFC 3927: no router
        // forwards it), where lbd reports from its own address: the VIP
        // towards the client (which reaches it), towards a backend its
        // address on the port to it (the router of that link).
        let outer_src = match (dir, self.conntrack.nat(id)) {
            _ if p.src == q.dst => flow_rw.src.0,
            (Direction::Original, Some(Nat::FullNat { snat, .. })) => snat.0,
            (Direction::Reply, _) if reject::is_link_local(p.src) => flow_rw.src.0,
            _ if reject::is_link_local(p.src) => snap
                .port(route.port())
                .and_then(|port| reject::routable_own_address(port.cidrs(), p.src.is_ipv6()))
                .unwrap_or(p.src),
            _ => p.src,
        };
        let outer = Rewrite {
            src: (outer_src, 0),
            dst: flow_rw.dst,
        };
        let inner = nat::inner_rewrite(&flow_rw);
        // Not answered: no ICMP error about an ICMP error. (One whose TTL
        // runs out is dropped as such by the rewrite.)
        if ip_len(p) > usize::from(route.mtu()) && p.ttl > 1 {
            return self.drop(DropReason::MtuExceeded);
        }
        if let Err(reason) = nat::rewrite_icmp_error(frame, p, &outer, &inner, &meta.offload) {
            return self.drop(reason);
        }
        set_l2(frame, &route, snap);
        // The connection's state and idle timer stay as they are: an error
        // is not the peer's answer (as Linux's conntrack takes it: related,
        // not a reply). Taken as one, an unreachable port's errors made
        // unreplied UDP entries "replied" (300 s, never evicted) and
        // kept closing TCP entries alive.
        verdict(&route, frame.len())
    }
}

/// Source MAC := the egress port's; destination MAC := the next hop's, or
/// zero until the shell writes the resolved one; on tagged ports, the VLAN
/// id := the egress port's.
#[inline(always)]
fn set_l2(frame: &mut [u8], route: &Route, snap: &Snapshot) {
    nat::set_l2(frame, route.src_mac(), route.dst_mac().unwrap_or([0; 6]));
    if snap.vlan_tagged() {
        tag_for(frame, route, snap);
    }
}

/// On tagged ports: the VLAN id := the egress port's. Out of line:
/// untagged nodes never call it.
#[cold]
#[inline(never)]
fn tag_for(frame: &mut [u8], route: &Route, snap: &Snapshot) {
    set_egress_vlan(frame, route.port(), snap);
}

/// A tagged frame leaving on `port`: its VLAN id := the port's (priority
/// bits kept); nothing for a port without one. The general path's
/// `tag_for` and the tagged fast path's.
#[inline(always)]
pub(super) fn set_egress_vlan(frame: &mut [u8], port: u16, snap: &Snapshot) {
    let vid = snap.port(port).and_then(|p| p.vlan());
    if let (Some(vid), Ok(mut eth)) = (vid, crate::wire::EthernetFrame::new_checked(frame)) {
        eth.set_vlan_id(vid);
    }
}

/// Why [`Worker::open`] opened nothing.
enum NotOpened {
    /// Dropped, for this reason.
    Drop(DropReason),
    /// Too big for the backend's port, whose MTU this is.
    TooBig(u16),
}

impl From<DropReason> for NotOpened {
    fn from(reason: DropReason) -> NotOpened {
        NotOpened::Drop(reason)
    }
}

/// The length of `p`'s IP packet, headers included: what a port's MTU
/// bounds.
#[inline(always)]
fn ip_len(p: &Parsed) -> usize {
    (p.end as usize).saturating_sub(usize::from(p.l3_offset))
}

/// Where [`Worker::translate`] accounts a packet.
#[derive(Debug, Clone, Copy)]
enum Account {
    /// On its connection's entry, travelling `Direction`: the entry's
    /// state and timeout, and the frontend's and backend's counters by its
    /// tags.
    Entry(EntryId, Direction),
    /// On the frontend's and backend's counters alone: a new DNAT
    /// connection forwarded without an entry from a full table
    /// (`stateless_forwards`).
    Stateless(Tags),
}

/// `Transmit` to a resolved next hop, `Resolve` otherwise.
#[inline(always)]
fn verdict(route: &Route, len: usize) -> Verdict {
    match *route {
        Route::Resolved(h) => Verdict::Transmit { port: h.port, len },
        Route::Unresolved(u) => Verdict::Resolve {
            port: u.port,
            len,
            via: u.via,
        },
    }
}

/// Why the first packet `p` (in `frame`) of a new connection may open none,
/// whatever its service says: a martian source, a link-layer group frame,
/// or a client at one of lbd's own addresses (the replies' destination:
/// DNAT's backends', or lbd's own past the SNAT translation).
#[inline]
fn refused_opener(snap: &Snapshot, frame: &[u8], p: &Parsed) -> Option<DropReason> {
    if !opens_from(snap, p.src) {
        Some(DropReason::MartianSource)
    } else if to_link_group(frame) {
        Some(DropReason::LinkBroadcast)
    } else if snap.is_owned(p.src) {
        Some(DropReason::OwnSource)
    } else {
        None
    }
}

/// Whether a connection may be opened from `src`: a source that names one
/// host ([`reject::names_one_host`]), is no connected prefix's broadcast
/// ([`Snapshot::is_directed_broadcast`]) and is not link-local, which no
/// router forwards ([`DropReason::MartianSource`]).
#[inline]
fn opens_from(snap: &Snapshot, src: IpAddr) -> bool {
    match src {
        IpAddr::V4(a) => opens_from_v4(snap, a.octets()),
        IpAddr::V6(a) => opens_from_v6(a),
    }
}

/// [`opens_from`] of an IPv6 source: one host's address
/// ([`reject::names_one_host`]: not unspecified, loopback, multicast, ...)
/// and not link-local.
#[inline(always)]
pub(super) fn opens_from_v6(a: Ipv6Addr) -> bool {
    reject::names_one_host(IpAddr::V6(a)) && !a.is_unicast_link_local()
}

/// [`opens_from`] of an IPv4 source's octets (the fast path's form): not
/// 0/8, 127/8, 169.254/16, 224/4, 255.255.255.255, nor a connected
/// prefix's broadcast address.
#[inline(always)]
pub(super) fn opens_from_v4(snap: &Snapshot, a: [u8; 4]) -> bool {
    a[0] != 0
        && a[0] != 127
        && a[0] & 0xf0 != 0xe0
        && u32::from_ne_bytes(a) != u32::MAX
        && !(a[0] == 169 && a[1] == 254)
        && !snap.is_directed_broadcast_v4(u32::from_be_bytes(a))
}

/// Whether `frame` went to a link-layer group (broadcast or multicast)
/// address: the group bit of its destination MAC
/// ([`DropReason::LinkBroadcast`]).
#[inline(always)]
pub(super) fn to_link_group(frame: &[u8]) -> bool {
    frame.first().is_some_and(|b| b & 1 != 0)
}

/// A TCP segment that may open a connection: SYN without ACK.
#[inline]
fn opens_connection(f: TcpFlags) -> bool {
    f.0 & TcpFlags::SYN.0 != 0 && f.0 & TcpFlags::ACK.0 == 0
}

impl Worker {
    /// An insert refused as [`InsertError::ReplyConflict`] made again if
    /// the entries in the way of its reply key had expired and are now
    /// evicted ([`Conntrack::take_expired_in_way`]): the sweep removes an
    /// expired entry up to one sweep late, and until then it would refuse
    /// every new connection whose replies it would take. Out of line, so
    /// that the insert path keeps its code: inside the insert, the same
    /// check cost every new connection 5-10 ns (bench/RESULTS.md).
    #[cold]
    #[inline(never)]
    fn retry_past_expired(&mut self, what: impl Opening, tags: Tags, now: Tick) -> Option<EntryId> {
        let (ct, snat, counters) = (&mut self.conntrack, &mut self.snat, &self.counters);
        let (key, nat) = what.general();
        // Expired entries the sweep had not reached yet: expirations, not
        // evictions (no table pressure took them). Were the table full, the
        // insert below would count its own eviction as such.
        let mut on_expired = |evicted: Evicted| {
            counters.conntrack_expirations.inc();
            release_snat(snat, evicted.snat, evicted.proto);
        };
        if !ct.take_expired_in_way(key, nat, now, &mut on_expired) {
            return None;
        }
        let on_evicted = |evicted: Evicted| {
            counters.conntrack_evictions.inc();
            release_snat(snat, evicted.snat, evicted.proto);
        };
        // The slots just freed make room: only another conflict could
        // refuse it now.
        let id = what.insert(ct, tags, now, None, on_evicted).ok()?;
        count_opened(counters, tags);
        Some(id)
    }
}

/// Counts a connection opened with `tags`' counter slots.
#[inline(always)]
fn count_opened(counters: &WorkerCounters, tags: Tags) {
    counters.new_connections.inc();
    if let Some(c) = counters.frontend(tags.frontend) {
        c.connections.inc();
    }
    if let Some(c) = counters.backend(tags.backend) {
        c.connections.inc();
    }
}

/// A connection [`Worker::insert_opened`] opens: its key and translation
/// as the general path has them, `(FlowKey, Nat)`, or as the IPv4 and
/// IPv6 fast paths do, `(FlowKeyV4, NatV4)` and `(FlowKeyV6, NatV6)`,
/// which conntrack stores without building the general values
/// ([`Conntrack::insert_missed_v4`], [`Conntrack::insert_missed_v6`]).
pub(super) trait Opening: Copy {
    /// True for a full-NAT connection (it holds a SNAT pair).
    fn is_full_nat(&self) -> bool;
    /// Gives back the SNAT pair, if it holds one, after a failed insert.
    fn release(self, snat: &mut SnatPorts);
    /// Its key and translation as the general values.
    fn general(self) -> (FlowKey, Nat);
    /// After an insert refused as a reply conflict:
    /// [`Worker::retry_past_expired`], or `None` where the caller declines
    /// instead (the IPv4 fast path, whose general path retries), which
    /// keeps the retry's code out of the fast path's.
    fn retry_past_expired(self, w: &mut Worker, tags: Tags, now: Tick) -> Option<EntryId>;
    /// [`Conntrack::insert_missed`] of it.
    fn insert(
        self,
        ct: &mut Conntrack,
        tags: Tags,
        now: Tick,
        hashes: Option<(KeyHash, KeyHash)>,
        on_evicted: impl FnMut(Evicted),
    ) -> Result<EntryId, InsertError>;
}

impl Opening for (FlowKey, Nat) {
    #[inline(always)]
    fn is_full_nat(&self) -> bool {
        self.1.snat().is_some()
    }
    fn general(self) -> (FlowKey, Nat) {
        self
    }
    #[inline(always)]
    fn retry_past_expired(self, w: &mut Worker, tags: Tags, now: Tick) -> Option<EntryId> {
        w.retry_past_expired(self, tags, now)
    }
    #[inline(always)]
    fn release(self, snat: &mut SnatPorts) {
        release_snat(snat, self.1.snat(), self.0.proto());
    }
    #[inline(always)]
    fn insert(
        self,
        ct: &mut Conntrack,
        tags: Tags,
        now: Tick,
        hashes: Option<(KeyHash, KeyHash)>,
        on_evicted: impl FnMut(Evicted),
    ) -> Result<EntryId, InsertError> {
        ct.insert_missed(self.0, self.1, tags, now, hashes, on_evicted)
    }
}

impl Opening for (FlowKeyV4, NatV4) {
    #[inline(always)]
    fn is_full_nat(&self) -> bool {
        self.1.snat.is_some()
    }
    fn general(self) -> (FlowKey, Nat) {
        let (k, n) = self;
        let backend = (IpAddr::V4(n.backend.0), n.backend.1);
        let nat = match n.snat {
            Some((a, p)) => Nat::FullNat {
                backend,
                snat: (IpAddr::V4(a), p),
            },
            None => Nat::Dnat { backend },
        };
        (FlowKey::V4(k), nat)
    }
    #[inline(always)]
    fn retry_past_expired(self, _: &mut Worker, _: Tags, _: Tick) -> Option<EntryId> {
        None
    }
    #[inline(always)]
    fn release(self, snat: &mut SnatPorts) {
        let pair = self.1.snat.map(|(a, port)| (IpAddr::V4(a), port));
        release_snat(snat, pair, self.0.proto);
    }
    #[inline(always)]
    fn insert(
        self,
        ct: &mut Conntrack,
        tags: Tags,
        now: Tick,
        hashes: Option<(KeyHash, KeyHash)>,
        on_evicted: impl FnMut(Evicted),
    ) -> Result<EntryId, InsertError> {
        ct.insert_missed_v4(&self.0, self.1, tags, now, hashes, on_evicted)
    }
}

impl Opening for (FlowKeyV6, NatV6) {
    #[inline(always)]
    fn is_full_nat(&self) -> bool {
        self.1.snat.is_some()
    }
    fn general(self) -> (FlowKey, Nat) {
        let (k, n) = self;
        let backend = (IpAddr::V6(n.backend.0), n.backend.1);
        let nat = match n.snat {
            Some((a, p)) => Nat::FullNat {
                backend,
                snat: (IpAddr::V6(a), p),
            },
            None => Nat::Dnat { backend },
        };
        (FlowKey::V6(k), nat)
    }
    /// The general path's retry: the IPv6 fast path answers a conflict as
    /// the general path would, out of line.
    #[inline(always)]
    fn retry_past_expired(self, w: &mut Worker, tags: Tags, now: Tick) -> Option<EntryId> {
        w.retry_past_expired(self, tags, now)
    }
    #[inline(always)]
    fn release(self, snat: &mut SnatPorts) {
        let pair = self.1.snat.map(|(a, port)| (IpAddr::V6(a), port));
        release_snat(snat, pair, self.0.proto);
    }
    #[inline(always)]
    fn insert(
        self,
        ct: &mut Conntrack,
        tags: Tags,
        now: Tick,
        hashes: Option<(KeyHash, KeyHash)>,
        on_evicted: impl FnMut(Evicted),
    ) -> Result<EntryId, InsertError> {
        ct.insert_missed_v6(&self.0, self.1, tags, now, hashes, on_evicted)
    }
}
