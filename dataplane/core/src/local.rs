//! Answers for the balancer's own addresses, rewritten in place.
//!
//! [`handle_parsed`] looks at a frame `parse` accepted and either rewrites it
//! into a reply (the caller transmits `len` bytes back out of the receiving
//! port, VLAN tag untouched), reports a neighbor to learn, passes it on, or
//! drops it with a reason. It never allocates and never panics, whatever the
//! frame holds. What it answers:
//!
//! - ARP request for an owned IPv4 address (from an address not ours) →
//!   ARP reply from our MAC, as
//!   [`LocalVerdict::ReplyToNeighbor`] when the request names its sender's
//!   address (a neighbor table may refresh that entry). ARP request for
//!   another address → `Drop(ArpNotForUs)`. ARP reply, or an
//!   announcement (sender == target address) of an address not ours →
//!   [`LocalVerdict::Neighbor`] (sender IP/MAC; the frame is not sent back);
//!   an announcement, request or reply from one of our addresses (a
//!   conflict) → `LocalUnhandled`.
//! - ICMP/ICMPv6 echo request to an owned address → echo reply (addresses
//!   swapped, TTL/hop limit 64, checksums updated incrementally). An IPv4
//!   request's options come back as RFC 1122 §3.2.2.6 asks
//!   (`echo_options_v4`): a spent source route reversed (the reply goes
//!   to its last hop, and on to the requester), lbd's address added to a
//!   record route and a timestamp option where there is room.
//! - ICMPv6 neighbor solicitation for an owned target → neighbor
//!   advertisement (hop limit 255, Solicited+Override, or only Override to
//!   all-nodes for a DAD probe from `::`; `ReplyToNeighbor` when the
//!   solicitation carries a source link-layer option), with a target
//!   link-layer option when it fits. An NS with a source link-layer option is 32 bytes of
//!   ICMPv6, exactly the size of the NA, so it always fits; an NS without one
//!   (DAD, unicast NUD) fits only if `frame` extends at least 8 bytes past
//!   the packet, e.g. into mbuf tailroom: parsing is bounded by the IP
//!   lengths, so passing the tailroom is safe. [`reply_room`] tells a shell
//!   how many bytes to extend such a frame by (lbd does, from the mbuf's
//!   tailroom): RFC 4861 §7.2.4 requires the option in the answer to a
//!   multicast solicitation, which every DAD probe is. Without the room the
//!   NA goes without the option, which RFC 4861 allows only for unicast
//!   solicitations.
//!   NS for another target → `Drop(NdNotForUs)`; NA → `Neighbor` when it
//!   carries a target link-layer option, `LocalUnhandled` (a conflict)
//!   when its target is one of our addresses.
//!
//! Everything else is `NotLocal` and continues down the load-balancing
//! pipeline: TCP/UDP (a VIP is an owned address, and its connections are the
//! balancer's business, not this module's) and ICMP errors (they must be
//! translated for PMTU discovery). Other ICMP(v6) to an owned address (echo
//! replies, timestamps, ICMPv4 router discovery) is `Drop(LocalUnhandled)`;
//! IPv6 link control (router discovery, redirects, MLD, multicast router
//! discovery), to whatever address, is `Drop(LinkControl)`.
//! Echo and ND carrying IPv6 extension headers or fragmented are dropped too
//! (`LocalUnhandled`/`Fragment`): rewriting around them buys nothing.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::wire::arp::{self, ArpPacket, ArpRepr};
use crate::wire::ethernet::{self, EthernetFrame, MacAddr, ETHERTYPE_IPV6};
use crate::wire::icmpv6::{self, msg_type as v6type, na_flags, nd_option, Icmpv6Packet};
use crate::wire::ipv4::{self, Ipv4Packet};
use crate::wire::ipv6::{self, Ipv6Packet};
use crate::wire::{icmpv4, ip_proto, parse, Fragment, Icmpv4Packet, Parsed, L3};
use crate::{DropReason, Tick};

/// TTL / hop limit of echo replies.
pub const REPLY_TTL: u8 = 64;
/// Hop limit that ND messages must carry (RFC 4861 §7.1).
pub const ND_HOP_LIMIT: u8 = 255;

/// The addresses the balancer answers for on one port: its MAC and every
/// owned IPv4/IPv6 address (interface, VIP, SNAT). Built once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalAddrs {
    mac: MacAddr,
    // Sorted, deduplicated: membership is a binary search, so a few thousand
    // VIPs cost a dozen comparisons.
    ipv4: Vec<Ipv4Addr>,
    ipv6: Vec<Ipv6Addr>,
}

/// Why [`LocalAddrs::new`] refused its input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocalAddrsError {
    /// The port MAC has the group bit set; replies would come from a multicast MAC.
    #[error("port MAC {0} is a multicast address")]
    MulticastMac(MacAddr),
    /// The address is not one host's (unspecified, 0/8, loopback,
    /// multicast, broadcast or IPv4-mapped:
    /// [`is_host_address`](crate::snapshot::is_host_address)): nobody can
    /// own it.
    #[error(
        "{0} cannot be a local address (unspecified, 0/8, loopback, multicast, broadcast or IPv4-mapped)"
    )]
    InvalidAddress(IpAddr),
}

impl LocalAddrs {
    /// Validate and index the port's MAC and owned addresses.
    pub fn new(mac: MacAddr, addrs: impl IntoIterator<Item = IpAddr>) -> Result<Self, LocalAddrsError> {
        if mac.is_multicast() {
            return Err(LocalAddrsError::MulticastMac(mac));
        }
        let (mut ipv4, mut ipv6) = (Vec::new(), Vec::new());
        for a in addrs {
            match a {
                _ if !crate::snapshot::is_host_address(a) => return Err(LocalAddrsError::InvalidAddress(a)),
                IpAddr::V4(v) => ipv4.push(v),
                IpAddr::V6(v) => ipv6.push(v),
            }
        }
        ipv4.sort_unstable();
        ipv4.dedup();
        ipv6.sort_unstable();
        ipv6.dedup();
        Ok(LocalAddrs { mac, ipv4, ipv6 })
    }

    /// The port MAC.
    #[inline]
    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    /// Owned IPv4 addresses, sorted.
    pub fn ipv4(&self) -> &[Ipv4Addr] {
        &self.ipv4
    }

    /// Owned IPv6 addresses, sorted.
    pub fn ipv6(&self) -> &[Ipv6Addr] {
        &self.ipv6
    }

    /// Whether the IPv4 address is owned.
    #[inline]
    pub fn owns_ipv4(&self, a: Ipv4Addr) -> bool {
        self.ipv4.binary_search(&a).is_ok()
    }

    /// Whether the IPv6 address is owned.
    #[inline]
    pub fn owns_ipv6(&self, a: &Ipv6Addr) -> bool {
        self.ipv6.binary_search(a).is_ok()
    }

    /// Whether the address is owned.
    #[inline]
    pub fn owns(&self, a: IpAddr) -> bool {
        match a {
            IpAddr::V4(v) => self.owns_ipv4(v),
            IpAddr::V6(v) => self.owns_ipv6(&v),
        }
    }
}

/// What to do with a frame after [`handle_parsed`] / [`handle_local`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalVerdict {
    /// The frame was rewritten into a reply: transmit its first `len` bytes
    /// back out of the port it came in on.
    Reply {
        /// Bytes to transmit; may differ from the received length.
        len: usize,
    },
    /// Like `Reply`, to a host that named its own MAC in the request (an
    /// ARP request with a sender address, a neighbor solicitation with a
    /// source link-layer option): transmit the reply, and a neighbor table
    /// may refresh the entry it already holds for `ip` with `mac` (RFC 826's
    /// merge, RFC 4861 §7.2.3). A hint, not proof of reachability: a host
    /// that changed its MAC (a replaced NIC or VM) is used at its new one
    /// without waiting for the old entry to fail its probes.
    ReplyToNeighbor {
        /// Bytes to transmit; may differ from the received length.
        len: usize,
        /// The asker's address.
        ip: IpAddr,
        /// The MAC it named.
        mac: MacAddr,
    },
    /// An ARP reply or neighbor advertisement told us a neighbor's MAC. The
    /// frame is untouched and not for transmission; a neighbor table may
    /// learn from it (only for addresses it was resolving, to resist spoofing).
    Neighbor {
        /// The neighbor's address.
        ip: IpAddr,
        /// Its MAC.
        mac: MacAddr,
        /// Sent unasked: a gratuitous ARP (sender and target address the
        /// same, request or reply) or an unsolicited neighbor advertisement
        /// (solicited flag clear), as after a failover. A neighbor table
        /// takes it at once (Linux: `is_garp`, the NA override flag), where
        /// an answer may wait out a lock time.
        announced: bool,
    },
    /// Not for the local stack: continue with the load-balancing pipeline.
    NotLocal,
    /// Drop, and count the reason.
    Drop(DropReason),
}

/// Parse `frame` and handle it: the convenience entry for callers that have
/// not parsed yet. Malformed frames are `Drop(reason)`.
pub fn handle_local(now: Tick, frame: &mut [u8], local: &LocalAddrs) -> LocalVerdict {
    match parse(frame) {
        Ok(p) => handle_parsed(now, frame, &p, local),
        Err(reason) => LocalVerdict::Drop(reason),
    }
}

/// Handle a frame that `parse` accepted into `parsed`. Cheap for the common
/// case: TCP/UDP return `NotLocal` without an address lookup. If `parsed`
/// does not describe `frame`, the result is a `Drop`, never a panic.
/// `now` goes into the timestamp option of an IPv4 echo reply
/// (`echo_options_v4`).
#[inline]
pub fn handle_parsed(now: Tick, frame: &mut [u8], parsed: &Parsed, local: &LocalAddrs) -> LocalVerdict {
    let r = match parsed.l3 {
        L3::Arp => arp_in(frame, parsed, local),
        L3::Ipv4 => {
            if parsed.protocol != ip_proto::ICMP || parsed.icmp_error {
                return LocalVerdict::NotLocal;
            }
            let IpAddr::V4(dst) = parsed.dst else {
                return LocalVerdict::NotLocal;
            };
            if !local.owns_ipv4(dst) {
                return LocalVerdict::NotLocal;
            }
            if parsed.icmp_type != icmpv4::msg_type::ECHO_REQUEST {
                return LocalVerdict::Drop(DropReason::LocalUnhandled);
            }
            echo_v4(now, frame, parsed, local)
        }
        L3::Ipv6 => {
            if parsed.protocol != ip_proto::ICMPV6 || parsed.icmp_error {
                return LocalVerdict::NotLocal;
            }
            let IpAddr::V6(dst) = parsed.dst else {
                return LocalVerdict::NotLocal;
            };
            match parsed.icmp_type {
                v6type::NEIGHBOR_SOLICIT => neighbor_solicit(frame, parsed, local),
                v6type::NEIGHBOR_ADVERT => neighbor_advert(frame, parsed, local),
                // Link control lbd takes no part in, to whatever address.
                v6type::ROUTER_SOLICIT
                | v6type::ROUTER_ADVERT
                | v6type::REDIRECT
                | v6type::MLD_QUERY
                | v6type::MLD_REPORT
                | v6type::MLD_DONE
                | v6type::MLD2_REPORT
                | v6type::MRD_ADVERT
                | v6type::MRD_SOLICIT
                | v6type::MRD_TERMINATE => Err(DropReason::LinkControl),
                _ if !local.owns_ipv6(&dst) => return LocalVerdict::NotLocal,
                v6type::ECHO_REQUEST => echo_v6(frame, parsed, local),
                _ => Err(DropReason::LocalUnhandled),
            }
        }
    };
    r.unwrap_or_else(LocalVerdict::Drop)
}

/// How many bytes `frame` must be extended by (zeroed, past its end) for
/// its answer to fit: 8 for an untagged or 802.1Q-tagged IPv6 neighbor
/// solicitation without options (a DAD probe without a nonce, a unicast
/// NUD probe), which is 8 bytes shorter than the neighbor advertisement
/// with a target link-layer option that answers it; 0 for everything else,
/// truncated packets included (zeros must not complete them). A shell with
/// tailroom extends the frame before [`handle_parsed`] (or the worker) sees
/// it; the extra bytes lie past the IP packet, so parsing ignores them.
/// A few byte compares: an IPv4 frame costs one.
#[inline]
pub fn reply_room(frame: &[u8]) -> usize {
    let l3 = match frame.get(ethernet::field::ETHERTYPE) {
        Some(&[0x86, 0xdd]) => ethernet::HEADER_LEN,
        Some(&[0x81, 0x00]) if frame.get(16..18) == Some(&[0x86, 0xdd]) => {
            ethernet::HEADER_LEN + ethernet::VLAN_TAG_LEN
        }
        _ => return 0,
    };
    let l4 = l3 + ipv6::HEADER_LEN;
    let is_ns =
        frame.get(l3 + 6) == Some(&ip_proto::ICMPV6) && frame.get(l4) == Some(&v6type::NEIGHBOR_SOLICIT);
    let Some(&[hi, lo]) = frame.get(l3 + 4..l3 + 6) else {
        return 0;
    };
    let whole = frame.len() >= l4 + usize::from(u16::from_be_bytes([hi, lo])).max(icmpv6::ND_LEN);
    if is_ns && whole {
        (l4 + icmpv6::ND_LEN + 8).saturating_sub(frame.len())
    } else {
        0
    }
}

/// Bytes to send for a reply whose packet ends at `end`: at least the
/// Ethernet minimum, within the buffer. Padding is zeroed so that no stale
/// buffer contents leak onto the wire.
fn reply_len(frame: &mut [u8], end: usize) -> usize {
    let len = end.max(ethernet::MIN_FRAME_LEN).min(frame.len());
    if let Some(pad) = frame.get_mut(end..len) {
        pad.fill(0);
    }
    len
}

/// Set Ethernet dst/src for a reply; the tag, if any, stays.
fn eth_reply(frame: &mut [u8], dst: MacAddr, local: &LocalAddrs) {
    let mut eth = EthernetFrame::new_unchecked(frame);
    eth.set_dst_addr(dst);
    eth.set_src_addr(local.mac);
}

/// The L3 slice `l3_offset..` of the frame, or `Truncated` if `parsed` lies.
fn l3_mut<'a>(frame: &'a mut [u8], parsed: &Parsed) -> Result<&'a mut [u8], DropReason> {
    frame
        .get_mut(usize::from(parsed.l3_offset)..)
        .ok_or(DropReason::Truncated)
}

fn arp_in(frame: &mut [u8], parsed: &Parsed, local: &LocalAddrs) -> Result<LocalVerdict, DropReason> {
    let l3 = usize::from(parsed.l3_offset);
    let mut arp = ArpPacket::new_checked(l3_mut(frame, parsed)?)?;
    let req = ArpRepr::parse(&arp);
    // No station has a group or all-zero address: never learned, never
    // answered (a zero MAC would also stop the neighbor table's publishing).
    if !req.sender_mac.is_unicast() {
        return Err(DropReason::MalformedArp);
    }
    match req.operation {
        // An announcement (RFC 5227: sender == target) asks nothing; learn
        // from it, unless it claims one of our addresses (a conflict).
        arp::OP_REQUEST if req.sender_ip == req.target_ip => {
            if local.owns_ipv4(req.sender_ip) {
                Err(DropReason::LocalUnhandled)
            } else {
                Ok(LocalVerdict::Neighbor {
                    ip: IpAddr::V4(req.sender_ip),
                    mac: req.sender_mac,
                    announced: true,
                })
            }
        }
        // Another station using one of our addresses as its own (RFC 5227
        // §2.4), or our own request come back: a conflict, never answered.
        arp::OP_REQUEST if local.owns_ipv4(req.sender_ip) => Err(DropReason::LocalUnhandled),
        arp::OP_REQUEST if local.owns_ipv4(req.target_ip) => {
            arp.set_operation(arp::OP_REPLY);
            arp.set_sender_mac(local.mac);
            arp.set_sender_ip(req.target_ip);
            arp.set_target_mac(req.sender_mac);
            arp.set_target_ip(req.sender_ip);
            eth_reply(frame, req.sender_mac, local);
            let len = reply_len(frame, l3 + arp::PACKET_LEN);
            // An ARP probe (RFC 5227: sender 0.0.0.0) names no address.
            Ok(if req.sender_ip.is_unspecified() {
                LocalVerdict::Reply { len }
            } else {
                LocalVerdict::ReplyToNeighbor {
                    len,
                    ip: IpAddr::V4(req.sender_ip),
                    mac: req.sender_mac,
                }
            })
        }
        arp::OP_REQUEST => Err(DropReason::ArpNotForUs),
        // Another station answering for one of our addresses: a conflict,
        // as its announcement is, never news.
        arp::OP_REPLY if local.owns_ipv4(req.sender_ip) => Err(DropReason::LocalUnhandled),
        arp::OP_REPLY => Ok(LocalVerdict::Neighbor {
            ip: IpAddr::V4(req.sender_ip),
            mac: req.sender_mac,
            announced: req.sender_ip == req.target_ip,
        }),
        _ => Err(DropReason::MalformedArp),
    }
}

fn echo_v4(
    now: Tick,
    frame: &mut [u8],
    parsed: &Parsed,
    local: &LocalAddrs,
) -> Result<LocalVerdict, DropReason> {
    if parsed.fragment != Fragment::None {
        return Err(DropReason::Fragment);
    }
    let (l4, end) = (usize::from(parsed.l4_offset), parsed.end as usize);
    let eth_src = EthernetFrame::new_checked(&*frame)?.src_addr();
    let msg = frame.get(l4..end).ok_or(DropReason::Truncated)?;
    if !Icmpv4Packet::new_checked(msg)?.verify_checksum() {
        return Err(DropReason::BadChecksum);
    }
    let mut ip = Ipv4Packet::new_checked(l3_mut(frame, parsed)?)?;
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    if !is_unicast_host(src) || !eth_src.is_unicast() {
        return Err(DropReason::LocalUnhandled);
    }
    if ip.header_len() == ipv4::MIN_HEADER_LEN {
        // Swapping the addresses leaves the header checksum as it is (the
        // sum is commutative); only the TTL word changes.
        ip.set_src_addr(dst);
        ip.set_dst_addr(src);
        ip.set_ttl_update_checksum(REPLY_TTL);
    } else {
        let to = echo_options_v4(ip.options_mut(), dst, src, now)?;
        ip.set_src_addr(dst);
        ip.set_dst_addr(to);
        ip.set_ttl(REPLY_TTL);
        ip.fill_checksum();
    }
    let mut icmp = Icmpv4Packet::new_checked(frame.get_mut(l4..end).ok_or(DropReason::Truncated)?)?;
    icmp.set_type_code_update_checksum(icmpv4::msg_type::ECHO_REPLY, 0);
    eth_reply(frame, eth_src, local);
    Ok(LocalVerdict::Reply {
        len: reply_len(frame, end),
    })
}

/// Turns an echo request's IPv4 options `opts` into its reply's, in place
/// (the header keeps its length), as RFC 1122 §3.2.2.6 asks of a host;
/// `own` is the address the request came to (the reply's source) and
/// `requester` its source. Returns the reply's destination: `requester`,
/// or with a source route the first hop back.
///
/// - A source route (loose or strict), spent as every one `parse` lets
///   through is, comes back reversed (RFC 1122 §3.2.1.8: "MUST"), as
///   Linux's `ip_options_echo` builds it: the reply goes to the route's
///   last address (the hop that delivered the request), and the option
///   lists the others in reverse order, then `requester`, pointer at the
///   first. The option keeps its type; a first hop that was the requester
///   itself is not listed twice (RFC 1812 §4.2.2.1's repair of an illegal
///   route, as Linux makes it): the option is 4 bytes shorter and 4
///   no-operation bytes follow it.
/// - Record route: `own` is recorded if there is room (RFC 791: a full one
///   goes on unchanged).
/// - Timestamp: with room, a timestamp (flag 0), `own` and a timestamp
///   (flag 1), or a timestamp after `own` where the sender named it (flag
///   3); a full one counts the overflow (not flag 3, as in Linux); one of
///   another flag goes on unchanged. The pipeline has no clock of
///   milliseconds since midnight UT, so the value is `now`'s milliseconds
///   with the high bit set, which RFC 791 provides for "a non-standard
///   value".
/// - Anything else is echoed as it came.
///
/// Errors, the request dropped with nothing sent: `MalformedIpv4` for a
/// pointer outside its option's rules (Linux answers those with a
/// parameter problem), a second source route, record route or timestamp
/// (RFC 791: once at most; Linux refuses them too), a route of a length
/// that is not whole addresses, or an overflow count at its limit of 15;
/// `LocalUnhandled` for a first hop back that is no unicast host (the
/// check the requester itself passes); `Ipv4SourceRoute` for a route with
/// addresses left.
fn echo_options_v4(
    opts: &mut [u8],
    own: Ipv4Addr,
    requester: Ipv4Addr,
    now: Tick,
) -> Result<Ipv4Addr, DropReason> {
    use ipv4::option;
    let (mut to, mut seen_route, mut seen_rr, mut seen_ts) = (None, false, false, false);
    let mut i = 0;
    while let Some(&kind) = opts.get(i) {
        match kind {
            option::END => break,
            option::NOP => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let len = opts.get(i + 1).map_or(0, |&l| usize::from(l));
        if len < 2 || len > opts.len() - i {
            return Err(DropReason::MalformedIpv4);
        }
        let seen = match kind {
            option::LSRR | option::SSRR => &mut seen_route,
            option::RR => &mut seen_rr,
            option::TIMESTAMP => &mut seen_ts,
            _ => {
                i += len;
                continue;
            }
        };
        // Once each, and type, length and pointer at least.
        if std::mem::replace(seen, true) || len < 3 {
            return Err(DropReason::MalformedIpv4);
        }
        let o = &mut opts[i..i + len];
        let ptr = usize::from(o[2]);
        match kind {
            option::LSRR | option::SSRR => {
                if ptr <= len {
                    return Err(DropReason::Ipv4SourceRoute);
                }
                if !(len - 3).is_multiple_of(4) {
                    return Err(DropReason::MalformedIpv4);
                }
                let route = &mut o[3..];
                let n = route.len() / 4;
                if n > 0 {
                    let hop = |r: &[u8], k: usize| [r[4 * k], r[4 * k + 1], r[4 * k + 2], r[4 * k + 3]];
                    let first = Ipv4Addr::from(hop(route, n - 1));
                    if !is_unicast_host(first) {
                        return Err(DropReason::LocalUnhandled);
                    }
                    to = Some(first);
                    let repair = hop(route, 0) == requester.octets();
                    // r1 .. r(n-1), then the requester; reversed in place.
                    route[4 * (n - 1)..].copy_from_slice(&requester.octets());
                    for k in 0..(n - 1) / 2 {
                        let (a, b) = (hop(route, k), hop(route, n - 2 - k));
                        route[4 * k..4 * k + 4].copy_from_slice(&b);
                        route[4 * (n - 2 - k)..4 * (n - 2 - k) + 4].copy_from_slice(&a);
                    }
                    o[2] = 4;
                    if repair {
                        // The requester, last, is there already just before.
                        o[len - 4..].fill(option::NOP);
                        o[1] -= 4;
                    }
                }
            }
            option::RR => {
                if ptr < 4 {
                    return Err(DropReason::MalformedIpv4);
                }
                if ptr <= len {
                    if ptr + 3 > len {
                        return Err(DropReason::MalformedIpv4);
                    }
                    o[ptr - 1..ptr + 3].copy_from_slice(&own.octets());
                    o[2] += 4;
                }
            }
            _ => {
                let Some(&oflw_flg) = o.get(3) else {
                    return Err(DropReason::MalformedIpv4);
                };
                if ptr < 5 {
                    return Err(DropReason::MalformedIpv4);
                }
                let flag = oflw_flg & 0x0f;
                let entry = match flag {
                    0 => 4,
                    1 | 3 => 8,
                    _ => {
                        i += len;
                        continue;
                    }
                };
                let stamp = (0x8000_0000 | (now.0 & 0x7fff_ffff) as u32).to_be_bytes();
                if ptr + entry - 1 <= len {
                    let at = ptr - 1;
                    match flag {
                        0 => o[at..at + 4].copy_from_slice(&stamp),
                        1 => {
                            o[at..at + 4].copy_from_slice(&own.octets());
                            o[at + 4..at + 8].copy_from_slice(&stamp);
                        }
                        // Prespecified: only where the next address is ours.
                        _ if [o[at], o[at + 1], o[at + 2], o[at + 3]] == own.octets() => {
                            o[at + 4..at + 8].copy_from_slice(&stamp)
                        }
                        _ => {
                            i += len;
                            continue;
                        }
                    }
                    o[2] += entry as u8;
                } else if ptr <= len {
                    // Room left, but not for a whole entry.
                    return Err(DropReason::MalformedIpv4);
                } else if flag != 3 {
                    let overflow = oflw_flg >> 4;
                    if overflow == 15 {
                        return Err(DropReason::MalformedIpv4);
                    }
                    o[3] = (overflow + 1) << 4 | flag;
                }
            }
        }
        i += len;
    }
    Ok(to.unwrap_or(requester))
}

/// An address a reply may be sent to: the rule of every answer lbd makes
/// ([`reject::names_one_host`](crate::reject::names_one_host)).
fn is_unicast_host(a: Ipv4Addr) -> bool {
    crate::reject::names_one_host(IpAddr::V4(a))
}

/// Checks shared by the ICMPv6 messages we answer: unfragmented, no
/// extension headers, and a valid checksum. Returns (src, dst).
fn icmpv6_in(frame: &[u8], parsed: &Parsed) -> Result<(Ipv6Addr, Ipv6Addr), DropReason> {
    if parsed.fragment != Fragment::None {
        return Err(DropReason::Fragment);
    }
    if usize::from(parsed.l4_offset) != usize::from(parsed.l3_offset) + ipv6::HEADER_LEN {
        return Err(DropReason::LocalUnhandled);
    }
    let ip = Ipv6Packet::new_checked(
        frame
            .get(usize::from(parsed.l3_offset)..)
            .ok_or(DropReason::Truncated)?,
    )?;
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let icmp = Icmpv6Packet::new_checked(ip.payload())?;
    if !icmp.verify_checksum(&src, &dst) {
        return Err(DropReason::BadChecksum);
    }
    Ok((src, dst))
}

fn echo_v6(frame: &mut [u8], parsed: &Parsed, local: &LocalAddrs) -> Result<LocalVerdict, DropReason> {
    let (src, dst) = icmpv6_in(frame, parsed)?;
    let eth_src = EthernetFrame::new_checked(&*frame)?.src_addr();
    // The rule of every answer lbd makes, as for IPv4's echo.
    if !crate::reject::names_one_host(IpAddr::V6(src)) || !eth_src.is_unicast() {
        return Err(DropReason::LocalUnhandled);
    }
    let mut ip = Ipv6Packet::new_checked(l3_mut(frame, parsed)?)?;
    // The pseudo-header sum does not change when the addresses swap, and
    // the hop limit is in no checksum: only the type word changes.
    ip.set_src_addr(&dst);
    ip.set_dst_addr(&src);
    ip.set_hop_limit(REPLY_TTL);
    Icmpv6Packet::new_checked(ip.payload_mut())?.set_type_code_update_checksum(v6type::ECHO_REPLY, 0);
    eth_reply(frame, eth_src, local);
    let end = parsed.end as usize;
    Ok(LocalVerdict::Reply {
        len: reply_len(frame, end),
    })
}

/// The solicited-node multicast address of `a` (RFC 4291 §2.7.1).
fn solicited_node(a: &Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::from([0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, o[13], o[14], o[15]])
}

/// RFC 4861 §7.1 validity checks shared by NS and NA: hop limit 255, code 0,
/// at least 24 bytes, a unicast target, well-formed options; and for an NA
/// to a multicast address, no Solicited flag (§7.1.2).
fn nd_in(
    frame: &[u8],
    parsed: &Parsed,
) -> Result<(Ipv6Addr, Ipv6Addr, Ipv6Addr, Option<MacAddr>), DropReason> {
    let (src, dst) = icmpv6_in(frame, parsed)?;
    let msg = frame
        .get(usize::from(parsed.l4_offset)..parsed.end as usize)
        .ok_or(DropReason::Truncated)?;
    let icmp = Icmpv6Packet::new_checked(msg)?;
    icmp.check_nd_len()?;
    if parsed.ttl != ND_HOP_LIMIT || icmp.code() != 0 || icmp.nd_target().is_multicast() {
        return Err(DropReason::MalformedIcmp);
    }
    if icmp.msg_type() == v6type::NEIGHBOR_ADVERT
        && dst.is_multicast()
        && icmp.na_flags() & na_flags::SOLICITED != 0
    {
        return Err(DropReason::MalformedIcmp);
    }
    let kind = if icmp.msg_type() == v6type::NEIGHBOR_SOLICIT {
        nd_option::SOURCE_LL_ADDR
    } else {
        nd_option::TARGET_LL_ADDR
    };
    let lladdr = icmpv6::nd_link_layer_option(icmp.nd_options(), kind)?;
    Ok((src, dst, icmp.nd_target(), lladdr))
}

fn neighbor_solicit(
    frame: &mut [u8],
    parsed: &Parsed,
    local: &LocalAddrs,
) -> Result<LocalVerdict, DropReason> {
    let (src, dst, target, slla) = nd_in(frame, parsed)?;
    let dad = src.is_unspecified();
    if dad && (dst != solicited_node(&target) || slla.is_some()) {
        return Err(DropReason::MalformedIcmp);
    }
    if !local.owns_ipv6(&target) {
        return Err(DropReason::NdNotForUs);
    }
    let eth_src = EthernetFrame::new_checked(&*frame)?.src_addr();
    // The answer goes to the source: it must be one host (RFC 4861 7.1.1:
    // unspecified or unicast), as must the link-layer address it goes to.
    if !dad && (src.is_multicast() || !slla.unwrap_or(eth_src).is_unicast()) {
        return Err(DropReason::MalformedIcmp);
    }
    // Nor one no answer may go to (loopback, IPv4-mapped), as for echo,
    // nor one of our own addresses (another node using it, or our own
    // solicitation come back: a conflict, as with ARP).
    if !dad && (!crate::reject::names_one_host(IpAddr::V6(src)) || local.owns_ipv6(&src)) {
        return Err(DropReason::LocalUnhandled);
    }
    // A DAD probe is answered to all-nodes so the prober sees the conflict.
    let (reply_ip, reply_mac, flags) = if dad {
        let all_nodes = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
        (
            all_nodes,
            MacAddr::ipv6_multicast(&all_nodes.octets()),
            na_flags::OVERRIDE,
        )
    } else {
        (
            src,
            slla.unwrap_or(eth_src),
            na_flags::SOLICITED | na_flags::OVERRIDE,
        )
    };
    let l4 = usize::from(parsed.l4_offset);
    let with_option = frame.len() >= l4 + icmpv6::ND_LEN + 8;
    let icmp_len = icmpv6::ND_LEN + if with_option { 8 } else { 0 };

    let mut ip = Ipv6Packet::new_unchecked(l3_mut(frame, parsed)?);
    ip.set_version_tc_flow(0, 0);
    ip.set_payload_len(icmp_len as u16);
    ip.set_hop_limit(ND_HOP_LIMIT);
    ip.set_src_addr(&target);
    ip.set_dst_addr(&reply_ip);
    let msg = frame.get_mut(l4..l4 + icmp_len).ok_or(DropReason::Truncated)?;
    let mut na = Icmpv6Packet::new_unchecked(msg);
    na.set_msg_type(v6type::NEIGHBOR_ADVERT);
    na.set_code(0);
    na.set_na_flags(flags);
    na.set_nd_target(&target);
    if with_option {
        icmpv6::emit_link_layer_option(&mut na.quoted_mut()[16..], nd_option::TARGET_LL_ADDR, local.mac);
    }
    na.fill_checksum(&target, &reply_ip);
    eth_reply(frame, reply_mac, local);
    let len = reply_len(frame, l4 + icmp_len);
    // Only a solicitation that names the asker's MAC teaches it; a DAD
    // probe never does (checked above).
    Ok(match slla {
        Some(mac) => LocalVerdict::ReplyToNeighbor {
            len,
            ip: IpAddr::V6(src),
            mac,
        },
        None => LocalVerdict::Reply { len },
    })
}

fn neighbor_advert(
    frame: &mut [u8],
    parsed: &Parsed,
    local: &LocalAddrs,
) -> Result<LocalVerdict, DropReason> {
    let (_, _, target, tlla) = nd_in(frame, parsed)?;
    // An advertisement for one of our addresses: a conflict (or our own,
    // come back), as with ARP, never news.
    if local.owns_ipv6(&target) {
        return Err(DropReason::LocalUnhandled);
    }
    // `nd_in` has checked the message.
    let solicited = frame
        .get(usize::from(parsed.l4_offset)..parsed.end as usize)
        .and_then(|m| Icmpv6Packet::new_checked(m).ok())
        .is_some_and(|icmp| icmp.na_flags() & na_flags::SOLICITED != 0);
    match tlla {
        Some(mac) if mac.is_unicast() => Ok(LocalVerdict::Neighbor {
            ip: IpAddr::V6(target),
            mac,
            announced: !solicited,
        }),
        _ => Err(DropReason::LocalUnhandled),
    }
}

/// Why a frame could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The buffer cannot hold the frame.
    #[error("buffer of {have} bytes is shorter than the {need}-byte frame")]
    BufferTooSmall {
        /// Bytes the frame needs.
        need: usize,
        /// Bytes the buffer has.
        have: usize,
    },
}

/// Write a gratuitous ARP announcement (RFC 5227 §3: a broadcast request
/// with sender and target address both `ip`) into `buf`; returns the frame
/// length (60, padded). lbd sends one per owned IPv4 address at start so
/// switches and neighbors learn where the address lives.
pub fn write_gratuitous_arp(
    buf: &mut [u8],
    mac: MacAddr,
    ip: Ipv4Addr,
    vlan: Option<u16>,
) -> Result<usize, BuildError> {
    write_arp_request(buf, mac, ip, ip, vlan)
}

/// Write an ARP request (who-has `target`, tell `src_ip` at `mac`,
/// broadcast) into `buf`; returns the frame length (60, padded). lbd's
/// control thread sends these to resolve next hops.
pub fn write_arp_request(
    buf: &mut [u8],
    mac: MacAddr,
    src_ip: Ipv4Addr,
    target: Ipv4Addr,
    vlan: Option<u16>,
) -> Result<usize, BuildError> {
    let repr = ArpRepr {
        operation: arp::OP_REQUEST,
        sender_mac: mac,
        sender_ip: src_ip,
        target_mac: MacAddr::ZERO,
        target_ip: target,
    };
    repr.emit_frame(buf, MacAddr::BROADCAST, vlan)
        .ok_or(BuildError::BufferTooSmall {
            need: ethernet::MIN_FRAME_LEN,
            have: buf.len(),
        })
}

/// Write a neighbor solicitation asking for `target`'s link-layer address
/// (RFC 4861 §7.2.2: from `src`, an address of the sending port, to the
/// target's solicited-node multicast group, hop limit 255, with our
/// link-layer address so the answer can come straight back), the IPv6
/// counterpart of [`write_arp_request`]; returns the frame length.
pub fn write_neighbor_solicitation(
    buf: &mut [u8],
    mac: MacAddr,
    src: &Ipv6Addr,
    target: &Ipv6Addr,
    vlan: Option<u16>,
) -> Result<usize, BuildError> {
    let t = target.octets();
    let group = Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(t[13]),
        u16::from_be_bytes([t[14], t[15]]),
    );
    let nd = Nd {
        msg_type: v6type::NEIGHBOR_SOLICIT,
        // The reserved word.
        flags: 0,
        target,
        option: nd_option::SOURCE_LL_ADDR,
    };
    write_nd(buf, mac, src, &group, &nd, vlan)
}

/// Write an unsolicited neighbor advertisement for `ip` (RFC 4861 §7.2.6:
/// to all-nodes, Override set, with our link-layer address), the IPv6
/// counterpart of [`write_gratuitous_arp`]; returns the frame length.
pub fn write_unsolicited_na(
    buf: &mut [u8],
    mac: MacAddr,
    ip: &Ipv6Addr,
    vlan: Option<u16>,
) -> Result<usize, BuildError> {
    let all_nodes = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    let nd = Nd {
        msg_type: v6type::NEIGHBOR_ADVERT,
        flags: na_flags::OVERRIDE,
        target: ip,
        option: nd_option::TARGET_LL_ADDR,
    };
    write_nd(buf, mac, ip, &all_nodes, &nd, vlan)
}

/// The ICMPv6 part of a neighbor solicitation or advertisement we send.
struct Nd<'a> {
    msg_type: u8,
    flags: u8,
    target: &'a Ipv6Addr,
    /// Which link-layer address option carries our MAC.
    option: u8,
}

/// An ND message from `src` to the multicast `dst` with our link-layer
/// address as its one option, hop limit 255; returns the frame length.
fn write_nd(
    buf: &mut [u8],
    mac: MacAddr,
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
    nd: &Nd<'_>,
    vlan: Option<u16>,
) -> Result<usize, BuildError> {
    let hdr = ethernet::HEADER_LEN + if vlan.is_some() { ethernet::VLAN_TAG_LEN } else { 0 };
    let need = hdr + ipv6::HEADER_LEN + icmpv6::ND_LEN + 8;
    let have = buf.len();
    let frame = buf
        .get_mut(..need)
        .ok_or(BuildError::BufferTooSmall { need, have })?;
    ethernet::emit_header(
        frame,
        MacAddr::ipv6_multicast(&dst.octets()),
        mac,
        vlan,
        ETHERTYPE_IPV6,
    );
    let mut ip6 = Ipv6Packet::new_unchecked(&mut frame[hdr..]);
    ip6.set_version_tc_flow(0, 0);
    ip6.set_payload_len((icmpv6::ND_LEN + 8) as u16);
    ip6.set_next_header(ip_proto::ICMPV6);
    ip6.set_hop_limit(ND_HOP_LIMIT);
    ip6.set_src_addr(src);
    ip6.set_dst_addr(dst);
    let mut msg = Icmpv6Packet::new_unchecked(&mut frame[hdr + ipv6::HEADER_LEN..]);
    msg.set_msg_type(nd.msg_type);
    msg.set_code(0);
    msg.set_na_flags(nd.flags);
    msg.set_nd_target(nd.target);
    icmpv6::emit_link_layer_option(&mut msg.quoted_mut()[16..], nd.option, mac);
    msg.fill_checksum(src, dst);
    Ok(need)
}

#[cfg(test)]
#[path = "local_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "local_options_tests.rs"]
mod options_tests;
