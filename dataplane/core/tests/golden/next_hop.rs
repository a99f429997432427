//! Golden cases for layer 2 when the next hop's MAC is unknown or there is
//! no route at all. An unresolved next hop gets a `Resolve` verdict with
//! the frame translated exactly as for `Transmit` but for a zero
//! destination MAC (the shell writes it once `via` answers); no route is a
//! `no_route` drop with the frame untouched.

use super::*;

/// `p` as the balancer holds it for `port` (MAC `src_mac`): TTL
/// decremented, destination MAC still zero.
fn held(p: &Pkt, src_mac: [u8; 6]) -> Pkt {
    let ttl = p.ttl - 1;
    p.clone().macs(src_mac, [0; 6]).ttl(ttl)
}

/// A step that must be translated into `out` and held for `port` until
/// `via` is resolved.
fn resolve(ingress: u16, input: &Pkt, port: u16, via: &str, out: &Pkt) -> Step {
    Step {
        port: ingress,
        input: input.frame(),
        expect: Expect::Resolve {
            port,
            via: ip(via),
            frame: out.frame(),
        },
    }
}

/// One connection opened, nothing dropped.
fn one_connection_no_drop(w: &Worker) -> Result<(), String> {
    let c = w.counters();
    match (c.new_connections.get(), c.total_drops(), w.conntrack().len()) {
        (1, 0, 1) => Ok(()),
        other => Err(format!("(new connections, drops, entries) = {other:?}")),
    }
}

fn one_no_route(w: &Worker) -> Result<(), String> {
    match w.counters().drops_of(DropReason::NoRoute) {
        1 => Ok(()),
        n => Err(format!("no_route counted {n} times")),
    }
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let off_link = "192.0.2.7";
    let on_link = "10.0.0.77";

    // No neighbor known at all: both directions of a full-NAT connection
    // are translated and held, each for its own neighbor.
    for f in [V4, V6] {
        let n = f.name;
        let (syn, syn_out) = fullnat_syn(f, 40000);
        let (sa, sa_out) = fullnat_synack(f, 40000);
        cases.push(
            Case::new(
                format!(
                    "{n} full-NAT SYN, SYN-ACK, no neighbor known: Resolve via the backend, then the client"
                ),
                vec![
                    resolve(0, &syn, 1, f.web_be, &syn_out.macs(MAC1, [0; 6])),
                    resolve(1, &sa, 0, f.client, &sa_out.macs(MAC0, [0; 6])),
                ],
            )
            .fixture(Fixture::NoNeighbors)
            .check(one_connection_no_drop),
        );
    }

    // An ICMP error travels like the flow: held for the client too.
    let (syn, syn_out) = fullnat_syn(V4, 40000);
    let ty =
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1400 });
    let err = Pkt::icmp4(ROUTER4, SNAT4, ty.clone(), syn_out.ip_bytes()).macs(ROUTER_MAC, MAC1);
    let err_out = Pkt::icmp4(ROUTER4, C4, ty, syn.clone().ttl(63).ip_bytes())
        .macs(MAC0, [0; 6])
        .ttl(63);
    cases.push(
        Case::new(
            "IPv4 ICMP frag needed for a full-NAT client, no neighbor known: Resolve via the client",
            vec![
                resolve(0, &syn, 1, V4.web_be, &syn_out.clone().macs(MAC1, [0; 6])),
                resolve(1, &err, 0, C4, &err_out),
            ],
        )
        .fixture(Fixture::NoNeighbors),
    );

    // DNAT to an off-link client: the reply goes to the gateway, resolved
    // or not.
    let q = from_client(Pkt::tcp(ep(off_link, 41000), ep(V4.app, 80), "S"));
    let q_out = to_backend(&q).endpoints(ep(off_link, 41000), ep(V4.app_be, 8080));
    let r = from_backend(Pkt::tcp(ep(V4.app_be, 8080), ep(off_link, 41000), "SA")).seq_ack(7000, 1001);
    let r_out = to_client(&r).endpoints(ep(V4.app, 80), ep(off_link, 41000));
    cases.push(
        Case::new(
            "IPv4 DNAT reply to an off-link client goes to the gateway's MAC",
            vec![fwd(&q, &q_out), back(&r, &r_out)],
        )
        .check(one_connection_no_drop),
    );
    cases.push(
        Case::new(
            "IPv4 DNAT with no neighbor known: Resolve via the backend, the reply via the gateway",
            vec![
                resolve(0, &q, 1, V4.app_be, &q_out.clone().macs(MAC1, [0; 6])),
                resolve(1, &r, 0, "10.0.0.254", &r_out.clone().macs(MAC0, [0; 6])),
            ],
        )
        .fixture(Fixture::NoNeighbors)
        .check(one_connection_no_drop),
    );

    // An on-link client without a neighbor entry is resolved itself, never
    // sent to the gateway.
    let q = from_client(Pkt::tcp(ep(on_link, 41000), ep(V4.app, 80), "S"));
    let q_out = to_backend(&q).endpoints(ep(on_link, 41000), ep(V4.app_be, 8080));
    let r = from_backend(Pkt::tcp(ep(V4.app_be, 8080), ep(on_link, 41000), "SA")).seq_ack(7000, 1001);
    let r_out = held(&r, MAC0).endpoints(ep(V4.app, 80), ep(on_link, 41000));
    cases.push(
        Case::new(
            "IPv4 DNAT reply to an on-link client without neighbor entry: Resolve via the client itself",
            vec![fwd(&q, &q_out), resolve(1, &r, 0, on_link, &r_out)],
        )
        .check(one_connection_no_drop),
    );

    // No IPv6 gateway: an off-link IPv6 client has no route.
    let c6 = "2001:db8::7";
    let q = from_client(Pkt::tcp(ep(c6, 41000), ep(V6.app, 80), "S"));
    let q_out = to_backend(&q).endpoints(ep(c6, 41000), ep(V6.app_be, 8080));
    let r = from_backend(Pkt::tcp(ep(V6.app_be, 8080), ep(c6, 41000), "SA")).seq_ack(7000, 1001);
    cases.push(
        Case::new(
            "IPv6 DNAT reply to an off-link client without an IPv6 gateway is no_route",
            vec![fwd(&q, &q_out), drop(1, &r, DropReason::NoRoute)],
        )
        .check(one_no_route),
    );
    cases
}
