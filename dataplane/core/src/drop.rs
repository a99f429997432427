//! Why a packet was dropped.
//!
//! [`DropReason`] is `#[repr(u8)]` and dense from zero, so a worker counts
//! drops in a plain `[u64; DropReason::COUNT]` indexed by `reason as usize`,
//! with no hashing and no allocation. Every drop in the pipeline has exactly
//! one reason; an operator reads them by [`DropReason::name`].

/// The reason a packet was dropped. Discriminants are dense from 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DropReason {
    /// Frame shorter than an Ethernet header, or a header runs past the end.
    Truncated = 0,
    /// EtherType other than IPv4, IPv6, ARP (after at most one 802.1Q tag).
    UnsupportedEtherType,
    /// ARP that is not Ethernet/IPv4, or an ARP operation we do not handle.
    MalformedArp,
    /// ARP request for an address the balancer does not own.
    ArpNotForUs,
    /// IPv4 header invalid: version, IHL, total length, header checksum, or
    /// an option list that runs past the header; or an echo request to the
    /// balancer whose record route, timestamp or source route option breaks
    /// its own rules (`local::echo_options_v4`).
    MalformedIpv4,
    /// IPv6 header invalid: its version. (A payload length past the frame's
    /// end is `Truncated`.)
    MalformedIpv6,
    /// An IPv6 extension header chain that is too long, truncated, or of a
    /// kind the balancer does not walk (e.g. ESP).
    Ipv6ExtensionHeader,
    /// TCP header invalid: data offset out of range or truncated.
    MalformedTcp,
    /// UDP header invalid: length field out of range.
    MalformedUdp,
    /// ICMP or ICMPv6 message truncated or invalid.
    MalformedIcmp,
    /// An IP protocol other than TCP, UDP, ICMP, ICMPv6, to a unicast
    /// address (to a group or martian one: `NotUnicast`).
    UnsupportedProtocol,
    /// L4 checksum wrong on a packet the balancer must answer itself.
    BadChecksum,
    /// For the balancer itself (an interface, VIP or SNAT address, or its
    /// link) but nothing answers it: TCP/UDP to an interface address, ICMP
    /// other than echo, an address conflict (ARP or neighbor discovery from
    /// or for one of its addresses), an echo it must not answer.
    LocalUnhandled,
    /// Not addressed to the balancer nor to any frontend.
    NoFrontend,
    /// The frontend exists, but its service has no backend that takes flows.
    NoBackend,
    /// The client's source address is outside the service's source ranges;
    /// or TCP to a VIP port no frontend serves, from a client every service
    /// on that VIP denies (refused silently, not with a RST).
    SourceRangeDenied,
    /// TTL or hop limit would reach zero when forwarded.
    TtlExceeded,
    /// A non-first IPv4 or IPv6 fragment (not reassembled), or a fragmented
    /// echo request or neighbor discovery message to lbd itself.
    Fragment,
    /// A reply-direction packet (from a backend) with no conntrack entry.
    NoConntrackReply,
    /// A TCP packet that cannot open a connection (not a SYN) and has no entry.
    TcpNotSyn,
    /// Conntrack full and nothing evictable, for a full-NAT flow.
    ConntrackFull,
    /// This worker's share of SNAT ports is exhausted, and none could be
    /// taken back from a connection not yet established or a closing one
    /// (those looked at are all established, or go to the same backend).
    SnatExhausted,
    /// An ICMP error quoting a flow that is not tracked.
    IcmpErrorUntracked,
    /// The next hop's MAC address is not known and the frame could not be
    /// held for it: lbd counts this when the worker's ring of frames
    /// waiting for the control thread's ARP or neighbor solicitation is
    /// full, or the frame is for a port lbd does not drive. (Frames the
    /// control thread held and then dropped are its `neighbor_drops`.)
    NoNeighbor,
    /// A frame the pipeline wrote (an answer or a translated packet) does
    /// not fit its packet buffer: lbd counts it.
    TooBig,
    /// Hand-over to the owning worker failed: its ring was full.
    HandoverRingFull,
    /// IPv6 neighbor solicitation for a target the balancer does not own
    /// (the IPv6 twin of `ArpNotForUs`).
    NdNotForUs,
    /// The NIC did not accept the packet on transmit (tx ring full).
    TxFull,
    /// No route to the destination: no port's prefix holds it and no port
    /// has a gateway of its family.
    NoRoute,
    /// A new connection whose reply tuple is already a tracked connection's,
    /// so the two connections' replies could not be told apart: e.g. one
    /// client address and port DNATed by two VIPs to the same backend
    /// address and port. (A client sending from one of lbd's SNAT address
    /// and port pairs is `OwnSource` first.)
    ConntrackConflict,
    /// A received frame spread over several mbufs (larger than one mbuf's
    /// data room): lbd handles single-segment frames only. lbd counts it.
    MultiSegment,
    /// An ARP reply or neighbor advertisement whose news the control
    /// thread's neighbor table could not take (its channel from the
    /// workers was full). lbd counts it.
    NeighborChannelFull,
    /// An ICMPv4 redirect or source quench: advice for the router that
    /// forwarded the packet (lbd), never translated or passed on.
    IcmpNotTranslated,
    /// A new connection from one of the balancer's own addresses
    /// (interface, VIP or SNAT): under DNAT its replies would come back
    /// addressed to the balancer (and may hold a full-NAT connection's
    /// reply port), under full-NAT the balancer would send its answers to
    /// itself. Only spoofed or looping traffic does this.
    OwnSource,
    /// IPv6 link control lbd takes no part in: router solicitations and
    /// advertisements, redirects, multicast listener discovery (MLD
    /// queries, reports, done) and multicast router discovery. Ports
    /// receive all multicast (for neighbor discovery), so any IPv6 segment
    /// brings some; lbd is configured, not autoconfigured.
    LinkControl,
    /// An IPv4 loose or strict source route option (LSRR, SSRR) with route
    /// addresses left: lbd is not the packet's final destination, and the
    /// L4 pseudo-header holds the route's last address, not the destination
    /// NAT would rewrite. (The IPv6 twin, a routing header with segments
    /// left, is `Ipv6ExtensionHeader`.)
    Ipv4SourceRoute,
    /// On a node whose ports carry VLAN tags (`vlan` on every interface):
    /// a frame without a tag, or with another port's or an unknown VLAN
    /// id, whatever it carries (checked before the parse). Frames of other
    /// VLANs that a trunk carries to lbd are not its.
    VlanMismatch,
    /// A packet to forward that is larger than the MTU of the port it
    /// would leave by, and is not answered with an ICMP "fragmentation
    /// needed" or ICMPv6 "packet too big" (those answered are
    /// `too_big_sent`): IPv4 without DF (lbd does not fragment), an ICMP
    /// error, a sender that is no single host, or a receiving port without
    /// an address of the family.
    MtuExceeded,
    /// A new connection's first packet from a source no router forwards
    /// (RFC 1812 §5.3.7, RFC 3927 §2.7, RFC 4291 §2.5.6): IPv4 0/8, 127/8,
    /// 169.254/16 (link-local), 224/4 (multicast), 255.255.255.255 and a
    /// connected prefix's broadcast address
    /// ([`Snapshot::is_directed_broadcast`](crate::snapshot::Snapshot::is_directed_broadcast));
    /// IPv6 `::`, `::1`, fe80::/10 (link-local), ff00::/8 (multicast) and
    /// `::ffff:0:0/96` (IPv4-mapped). (240/4 is a host's, as on Linux.)
    /// Nothing is opened for it. Also an ICMP or ICMPv6 error from such a
    /// source, link-local ones aside (lbd reports those from its own
    /// address).
    MartianSource,
    /// A new connection's first packet that came in a link-layer broadcast
    /// or multicast frame (RFC 1812 §5.3.4: not forwarded): every node on
    /// the segment would open it. Nothing is opened for it.
    LinkBroadcast,
    /// A TCP or UDP packet, an ICMP message that is not an error, or a
    /// packet of another IP protocol whose header the parse reaches (IPv6
    /// extension headers it does not walk are `Ipv6ExtensionHeader`), to an
    /// address of no one unicast host, which lbd never owns: IPv4 0/8,
    /// 127/8, 224/4 (multicast) and 255.255.255.255; IPv6 `::`, `::1`,
    /// ff00::/8 (multicast) and `::ffff:0:0/96` (IPv4-mapped). lbd routes
    /// no multicast and broadcast: service discovery on a port's segment
    /// (mDNS, SSDP, DHCP, IGMP, NetBIOS) counts here, not as a reply of no
    /// connection. What lbd answers itself comes first (ARP, neighbor
    /// discovery), and ICMP errors go to their translation. Also a TCP or
    /// UDP packet to a connected prefix's broadcast address
    /// ([`Snapshot::is_directed_broadcast`](crate::snapshot::Snapshot::is_directed_broadcast))
    /// that matches no connection (on the worker owning that endpoint, as
    /// a reply's miss would be), and an echo request to one (on the worker
    /// that received it); another protocol to one is
    /// `UnsupportedProtocol`, and a directed broadcast of a prefix lbd has
    /// no port on cannot be told from a host's address.
    NotUnicast,
}

impl DropReason {
    /// Number of reasons: the length of a per-worker drop counter array.
    pub const COUNT: usize = DropReason::NotUnicast as usize + 1;

    /// Every reason, in discriminant order.
    pub const ALL: [DropReason; DropReason::COUNT] = [
        DropReason::Truncated,
        DropReason::UnsupportedEtherType,
        DropReason::MalformedArp,
        DropReason::ArpNotForUs,
        DropReason::MalformedIpv4,
        DropReason::MalformedIpv6,
        DropReason::Ipv6ExtensionHeader,
        DropReason::MalformedTcp,
        DropReason::MalformedUdp,
        DropReason::MalformedIcmp,
        DropReason::UnsupportedProtocol,
        DropReason::BadChecksum,
        DropReason::LocalUnhandled,
        DropReason::NoFrontend,
        DropReason::NoBackend,
        DropReason::SourceRangeDenied,
        DropReason::TtlExceeded,
        DropReason::Fragment,
        DropReason::NoConntrackReply,
        DropReason::TcpNotSyn,
        DropReason::ConntrackFull,
        DropReason::SnatExhausted,
        DropReason::IcmpErrorUntracked,
        DropReason::NoNeighbor,
        DropReason::TooBig,
        DropReason::HandoverRingFull,
        DropReason::NdNotForUs,
        DropReason::TxFull,
        DropReason::NoRoute,
        DropReason::ConntrackConflict,
        DropReason::MultiSegment,
        DropReason::NeighborChannelFull,
        DropReason::IcmpNotTranslated,
        DropReason::OwnSource,
        DropReason::LinkControl,
        DropReason::Ipv4SourceRoute,
        DropReason::VlanMismatch,
        DropReason::MtuExceeded,
        DropReason::MartianSource,
        DropReason::LinkBroadcast,
        DropReason::NotUnicast,
    ];

    /// The stable snake_case name used in counters, logs and the API.
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::UnsupportedEtherType => "unsupported_ethertype",
            DropReason::MalformedArp => "malformed_arp",
            DropReason::ArpNotForUs => "arp_not_for_us",
            DropReason::MalformedIpv4 => "malformed_ipv4",
            DropReason::MalformedIpv6 => "malformed_ipv6",
            DropReason::Ipv6ExtensionHeader => "ipv6_extension_header",
            DropReason::MalformedTcp => "malformed_tcp",
            DropReason::MalformedUdp => "malformed_udp",
            DropReason::MalformedIcmp => "malformed_icmp",
            DropReason::UnsupportedProtocol => "unsupported_protocol",
            DropReason::BadChecksum => "bad_checksum",
            DropReason::LocalUnhandled => "local_unhandled",
            DropReason::NoFrontend => "no_frontend",
            DropReason::NoBackend => "no_backend",
            DropReason::SourceRangeDenied => "source_range_denied",
            DropReason::TtlExceeded => "ttl_exceeded",
            DropReason::Fragment => "fragment",
            DropReason::NoConntrackReply => "no_conntrack_reply",
            DropReason::TcpNotSyn => "tcp_not_syn",
            DropReason::ConntrackFull => "conntrack_full",
            DropReason::SnatExhausted => "snat_exhausted",
            DropReason::IcmpErrorUntracked => "icmp_error_untracked",
            DropReason::NoNeighbor => "no_neighbor",
            DropReason::TooBig => "too_big",
            DropReason::HandoverRingFull => "handover_ring_full",
            DropReason::NdNotForUs => "nd_not_for_us",
            DropReason::TxFull => "tx_full",
            DropReason::NoRoute => "no_route",
            DropReason::ConntrackConflict => "conntrack_conflict",
            DropReason::MultiSegment => "multi_segment",
            DropReason::NeighborChannelFull => "neighbor_channel_full",
            DropReason::IcmpNotTranslated => "icmp_not_translated",
            DropReason::OwnSource => "own_source",
            DropReason::LinkControl => "link_control",
            DropReason::Ipv4SourceRoute => "ipv4_source_route",
            DropReason::VlanMismatch => "vlan_mismatch",
            DropReason::MtuExceeded => "mtu_exceeded",
            DropReason::MartianSource => "martian_source",
            DropReason::LinkBroadcast => "link_broadcast",
            DropReason::NotUnicast => "not_unicast",
        }
    }
}

/// Per-worker drop counters, indexed by [`DropReason`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropCounters(pub [u64; DropReason::COUNT]);

impl Default for DropCounters {
    fn default() -> Self {
        DropCounters([0; DropReason::COUNT])
    }
}

impl DropCounters {
    /// Count one drop.
    #[inline]
    pub fn count(&mut self, reason: DropReason) {
        self.0[reason as usize] += 1;
    }

    /// The count for one reason.
    #[inline]
    pub fn get(&self, reason: DropReason) -> u64 {
        self.0[reason as usize]
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Non-zero counters with their names, in reason order.
    pub fn nonzero(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .iter()
            .map(|&r| (r, self.get(r)))
            .filter(|&(_, n)| n != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discriminants_are_dense_and_all_is_in_order() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{r:?}");
        }
    }

    #[test]
    fn names_are_unique_snake_case() {
        let mut names: Vec<&str> = DropReason::ALL.iter().map(|r| r.name()).collect();
        for n in &names {
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{n}"
            );
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), DropReason::COUNT);
    }

    #[test]
    fn counters_count_per_reason() {
        let mut c = DropCounters::default();
        c.count(DropReason::NoFrontend);
        c.count(DropReason::NoFrontend);
        c.count(DropReason::TxFull);
        assert_eq!(c.get(DropReason::NoFrontend), 2);
        assert_eq!(c.total(), 3);
        let nz: Vec<_> = c.nonzero().collect();
        assert_eq!(nz, vec![(DropReason::NoFrontend, 2), (DropReason::TxFull, 1)]);
    }
}
