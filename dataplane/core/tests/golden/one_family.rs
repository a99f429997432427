//! Golden cases of one family only: for IPv4, UDP checksum 0, IP options,
//! padding, fragments, ICMP fragmentation needed, ARP, traffic to an
//! interface address and the pinned Maglev pick; for IPv6, a destination
//! options header, fragments and neighbor solicitation. The cases both
//! families share are `family_cases` in `golden.rs`.

use super::*;

pub fn v4_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let (syn, syn_out) = fullnat_syn(V4, 40000);

    // UDP checksum 0 stays 0, DNAT (both ways) and full-NAT.
    let q = from_client(Pkt::udp(ep(C4, 5300), ep("10.0.0.102", 53), b"query")).zero_udp_checksum();
    let q_out = to_backend(&q).endpoints(ep(C4, 5300), ep("10.1.0.13", 5353));
    let a = from_backend(Pkt::udp(ep("10.1.0.13", 5353), ep(C4, 5300), b"answer")).zero_udp_checksum();
    let a_out = to_client(&a).endpoints(ep("10.0.0.102", 53), ep(C4, 5300));
    cases.push(Case::new(
        "IPv4 DNAT UDP with checksum 0 keeps checksum 0, both ways",
        vec![fwd(&q, &q_out), back(&a, &a_out)],
    ));
    let l = from_client(Pkt::udp(ep(C4, 6000), ep("10.0.0.103", 514), b"log")).zero_udp_checksum();
    let l_out = to_backend(&l).endpoints(ep(SNAT4, SNAT_PORT), ep("10.1.0.11", 5514));
    cases.push(Case::new(
        "IPv4 full-NAT UDP with checksum 0 keeps checksum 0",
        vec![fwd(&l, &l_out)],
    ));

    // IPv4 options (router alert + NOPs) are kept and covered by the checksum.
    let opts = [0x94, 0x04, 0x00, 0x00, 0x01, 0x01, 0x01, 0x00];
    let osyn = syn.clone().v4_options(&opts);
    let osyn_out = syn_out.clone().v4_options(&opts);
    let (sa, sa_out) = fullnat_synack(V4, 40000);
    cases.push(Case::new(
        "IPv4 with options: full-NAT SYN translated, options kept; reply with options too",
        vec![
            fwd(&osyn, &osyn_out),
            back(&sa.clone().v4_options(&opts), &sa_out.clone().v4_options(&opts)),
        ],
    ));

    // Source routes (RFC 791 §3.1). One with addresses left names another
    // final destination, which the sender's L4 checksum covers: refused
    // before any state (the plain SYN after it gets the first SNAT port).
    let hop = [192, 0, 2, 1];
    let lsrr = [131, 7, 4, hop[0], hop[1], hop[2], hop[3], 0];
    let ssrr = [137, 7, 4, hop[0], hop[1], hop[2], hop[3], 0];
    cases.push(Case::new(
        "IPv4 with a loose or strict source route with addresses left is ipv4_source_route, before any state",
        vec![
            drop(0, &syn.clone().v4_options(&lsrr), DropReason::Ipv4SourceRoute),
            drop(0, &syn.clone().v4_options(&ssrr), DropReason::Ipv4SourceRoute),
            fwd(&syn, &syn_out),
        ],
    ));
    cases.push(Case::new(
        "IPv4 with an option list running past the header is malformed_ipv4",
        vec![
            drop(
                0,
                &syn.clone().v4_options(&[7, 8, 4, 0]),
                DropReason::MalformedIpv4,
            ),
            drop(
                0,
                &syn.clone().v4_options(&[1, 68, 0, 0]),
                DropReason::MalformedIpv4,
            ),
        ],
    ));
    // Spent routes (pointer past the option), record route and timestamp:
    // DNAT rewrites the destination the L4 checksum covers, options kept.
    let spent = [
        vec![131, 7, 8, hop[0], hop[1], hop[2], hop[3], 1],
        vec![7, 7, 4, 0, 0, 0, 0, 1],
        vec![68, 12, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ]
    .concat();
    let (dsyn, dsyn_out) = dnat_tcp(V4, 41100, "S");
    let dq = from_client(Pkt::udp(ep(C4, 5310), ep("10.0.0.102", 53), b"query"));
    let dq_out = to_backend(&dq).endpoints(ep(C4, 5310), ep("10.1.0.13", 5353));
    let ssrr_spent = [137, 7, 8, hop[0], hop[1], hop[2], hop[3], 0];
    cases.push(Case::new(
        "IPv4 DNAT with a spent source route, record route and timestamp: translated, options kept",
        vec![
            fwd(
                &dsyn.clone().v4_options(&spent),
                &dsyn_out.clone().v4_options(&spent),
            ),
            fwd(
                &dq.clone().v4_options(&ssrr_spent),
                &dq_out.clone().v4_options(&ssrr_spent),
            ),
        ],
    ));

    // Ethernet padding: a 60-byte frame; padding is not part of the packet.
    cases.push(Case::new(
        "IPv4 SYN in a padded 60-byte frame: translated, padding kept as is",
        vec![fwd(&syn.clone().pad(6), &syn_out.clone().pad(6))],
    ));

    // Fragments of a tracked DNAT UDP flow.
    let whole = from_client(Pkt::udp(ep(C4, 5400), ep("10.0.0.102", 53), b"first datagram"));
    let whole_out = to_backend(&whole).endpoints(ep(C4, 5400), ep("10.1.0.13", 5353));
    let big = from_client(Pkt::udp(ep(C4, 5400), ep("10.0.0.102", 53), &[0x5a; 100])).ident(0x1234);
    let first = big.clone().frag(Frag::First { len: 64 });
    let first_out = to_backend(&first).endpoints(ep(C4, 5400), ep("10.1.0.13", 5353));
    let last = big.clone().frag(Frag::Last { offset: 64 });
    cases.push(Case::new(
        "IPv4 first fragment of a tracked flow translated; a later fragment is fragment",
        vec![
            fwd(&whole, &whole_out),
            fwd(&first, &first_out),
            drop(0, &last, DropReason::Fragment),
        ],
    ));

    // ICMP frag-needed with only the RFC 792 minimum quoted (IP + 8 bytes:
    // the TCP checksum is not in the quote).
    let ty =
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1400 });
    let quoted = syn_out.ip_bytes()[..28].to_vec();
    let client_view = syn.clone().ttl(63).ip_bytes()[..28].to_vec();
    let err = Pkt::icmp4(ROUTER4, SNAT4, ty.clone(), quoted).macs(ROUTER_MAC, MAC1);
    let err_out = Pkt::icmp4(ROUTER4, C4, ty.clone(), client_view)
        .macs(MAC0, CLIENT_MAC)
        .ttl(63);
    cases.push(Case::new(
        "IPv4 ICMP fragmentation needed quoting IP + 8 bytes of a tracked full-NAT flow",
        vec![fwd(&syn, &syn_out), back(&err, &err_out)],
    ));
    // DNAT: the router on the backend side reports straight to the client.
    let (dsyn, dsyn_out) = dnat_tcp(V4, 41000, "S");
    let err = Pkt::icmp4(ROUTER4, C4, ty.clone(), dsyn_out.ip_bytes()).macs(ROUTER_MAC, MAC1);
    let err_out = Pkt::icmp4(ROUTER4, C4, ty, dsyn.clone().ttl(63).ip_bytes())
        .macs(MAC0, CLIENT_MAC)
        .ttl(63);
    cases.push(Case::new(
        "IPv4 ICMP fragmentation needed quoting a tracked DNAT flow: quote shows the VIP again",
        vec![fwd(&dsyn, &dsyn_out), back(&err, &err_out)],
    ));

    // ARP.
    let req = Arp {
        src_mac: CLIENT_MAC,
        dst_mac: BROADCAST,
        vlan: None,
        reply: false,
        sender: (CLIENT_MAC, C4),
        target: ([0; 6], "10.0.0.100"),
        pad: 18,
    };
    let rep = Arp {
        src_mac: MAC0,
        dst_mac: CLIENT_MAC,
        vlan: None,
        reply: true,
        sender: (MAC0, "10.0.0.100"),
        target: (CLIENT_MAC, C4),
        pad: 18,
    };
    cases.push(Case::new(
        "ARP request for a VIP is answered from the port's MAC",
        vec![Step {
            port: 0,
            input: req.frame(),
            expect: Expect::Transmit {
                port: 0,
                frame: rep.frame(),
            },
        }],
    ));
    // The client, published at CLIENT_MAC, asks from another NIC: the
    // answer goes to the new MAC, which the neighbor table is told.
    let moved_req = Arp {
        src_mac: ROUTER_MAC,
        sender: (ROUTER_MAC, C4),
        ..req.clone()
    };
    let moved_rep = Arp {
        dst_mac: ROUTER_MAC,
        target: (ROUTER_MAC, C4),
        ..rep.clone()
    };
    cases.push(Case::new(
        "ARP request for a VIP from a neighbor at a new MAC is answered and reported",
        vec![Step {
            port: 0,
            input: moved_req.frame(),
            expect: Expect::ReplyToNeighbor {
                ip: ip(C4),
                mac: ROUTER_MAC,
                frame: moved_rep.frame(),
            },
        }],
    ));
    let tagged = Arp {
        vlan: Some(30),
        ..req.clone()
    };
    // The reply is cut to the 60-byte minimum frame: 4 of the request's
    // 18 padding bytes do not come back.
    let tagged_rep = Arp {
        vlan: Some(30),
        pad: 14,
        ..rep.clone()
    };
    cases.push(Case::new(
        "802.1Q-tagged ARP request for a VIP is answered with the tag",
        vec![Step {
            port: 0,
            input: tagged.frame(),
            expect: Expect::Transmit {
                port: 0,
                frame: tagged_rep.frame(),
            },
        }],
    ));
    let unknown = Arp {
        target: ([0; 6], "10.0.0.50"),
        ..req
    };
    cases.push(Case::new(
        "ARP request for an unknown address is arp_not_for_us",
        vec![Step {
            port: 0,
            input: unknown.frame(),
            expect: Expect::Drop(DropReason::ArpNotForUs),
        }],
    ));

    // The interface address: TCP not for a frontend goes to the host.
    let bgp = from_client(Pkt::tcp(ep(C4, 50000), ep("10.0.0.1", 179), "S"));
    cases.push(Case::new(
        "TCP to an interface address (no frontend) goes to the host",
        vec![Step {
            port: 0,
            input: bgp.frame(),
            expect: Expect::ToHost,
        }],
    ));

    // Maglev: the pool service's pick for this 5-tuple is pinned.
    let psyn = from_client(Pkt::tcp(ep(C4, 40000), ep("10.0.0.106", 80), "S"));
    let psyn_out = to_backend(&psyn).endpoints(ep(SNAT4, SNAT_PORT), ep(POOL_PICK, 9000));
    cases.push(Case::new(
        "IPv4 full-NAT to a three-backend service picks the pinned Maglev backend",
        vec![fwd(&psyn, &psyn_out)],
    ));
    cases
}

/// The Maglev pick of `pool` for 10.0.0.2:40000 → 10.0.0.106:80/TCP
/// (golden: a change here reshuffles flows across a fleet).
const POOL_PICK: &str = "10.1.0.12";

pub fn v6_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let (syn, syn_out) = fullnat_syn(V6, 40000);
    let (sa, sa_out) = fullnat_synack(V6, 40000);

    // Destination options header: kept, not part of the pseudo-header.
    let dopt = [0x01, 0x04, 0, 0, 0, 0]; // PadN
    cases.push(Case::new(
        "IPv6 with a destination-options header: full-NAT SYN and SYN-ACK translated, header kept",
        vec![
            fwd(
                &syn.clone().v6_dest_opts(&dopt),
                &syn_out.clone().v6_dest_opts(&dopt),
            ),
            back(
                &sa.clone().v6_dest_opts(&dopt),
                &sa_out.clone().v6_dest_opts(&dopt),
            ),
        ],
    ));

    // Fragments.
    let whole = from_client(Pkt::udp(ep(C6, 5400), ep("fd00::102", 53), b"first datagram"));
    let whole_out = to_backend(&whole).endpoints(ep(C6, 5400), ep("fd01::13", 5353));
    let big = from_client(Pkt::udp(ep(C6, 5400), ep("fd00::102", 53), &[0x5a; 100])).ident(0x1234);
    let first = big.clone().frag(Frag::First { len: 64 });
    let first_out = to_backend(&first).endpoints(ep(C6, 5400), ep("fd01::13", 5353));
    let last = big.frag(Frag::Last { offset: 64 });
    cases.push(Case::new(
        "IPv6 first fragment of a tracked flow translated; a later fragment is fragment",
        vec![
            fwd(&whole, &whole_out),
            fwd(&first, &first_out),
            drop(0, &last, DropReason::Fragment),
        ],
    ));

    // Neighbor solicitation for a VIP.
    let target = ip("fd00::100");
    let IpAddr::V6(t) = target else { unreachable!() };
    let mut ns_body = t.octets().to_vec();
    ns_body.extend_from_slice(&[1, 1]);
    ns_body.extend_from_slice(&CLIENT_MAC);
    let ns = Pkt::icmp6(C6, "ff02::1:ff00:100", Icmpv6Type::NeighborSolicitation, ns_body)
        .macs(CLIENT_MAC, [0x33, 0x33, 0xff, 0x00, 0x01, 0x00])
        .ttl(255);
    let mut na_body = t.octets().to_vec();
    na_body.extend_from_slice(&[2, 1]);
    na_body.extend_from_slice(&MAC0);
    let na_ty = Icmpv6Type::NeighborAdvertisement(NeighborAdvertisementHeader {
        router: false,
        solicited: true,
        r#override: true,
    });
    let na = Pkt::icmp6("fd00::100", C6, na_ty, na_body)
        .macs(MAC0, CLIENT_MAC)
        .ttl(255);
    cases.push(Case::new(
        "IPv6 neighbor solicitation for a VIP is answered (S+O, target link-layer option)",
        vec![tx(0, &ns, &na)],
    ));
    cases
}
