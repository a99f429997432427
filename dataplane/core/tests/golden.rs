//! Golden packet tests, Katran style: a table of cases, each a named
//! snapshot fixture, a worker set-up and a sequence of input frames with,
//! for every frame, the expected verdict and (when transmitted) the exact
//! expected output frame.
//!
//! Inputs and expectations are built by an independent builder
//! (`golden/pkt.rs`, etherparse only); outputs are compared byte for byte
//! and every checksum of every output is recomputed with etherparse.
//! Dropped and handed-over frames must come back unchanged.
//!
//! Determinism, so that expectations are computed and not observed:
//! - every service of the fixture but `pool` and `sticky` has a single
//!   backend, so the backend is known; `pool` (three backends) pins the
//!   Maglev choice for one 5-tuple, and `sticky` (three, client-IP
//!   affinity) the choice for the client address, golden values like
//!   tests/maglev_golden.rs;
//! - SNAT ports are handed out FIFO from the low end of the worker's share
//!   of the range (`SnatPorts`): a fresh worker 0 of 1 (or of 2) with the
//!   range 20000..=20999 gives its first flow of each protocol port 20000;
//! - the client port of the forward hand-over case is chosen with the
//!   public ownership function `flow::owner_of_client` (the rule under
//!   test is "a flow of another worker is handed over", not the hash).
//!
//! Every case runs; failures are collected and reported together, each
//! with its description.

#[path = "golden/pkt.rs"]
mod pkt;

#[path = "golden/fixture.rs"]
mod fixture;

#[path = "golden/next_hop.rs"]
mod next_hop;

#[path = "golden/one_family.rs"]
mod one_family;

use std::net::IpAddr;

use etherparse::{
    icmpv4::DestUnreachableHeader, icmpv6::NeighborAdvertisementHeader, Icmpv4Type, Icmpv6Type,
};
use fixture::*;
use lb_dataplane::flow::{owner_of_client, Proto, WorkerId};
use lb_dataplane::worker::{PacketMeta, Verdict, Worker};
use lb_dataplane::DropReason;
use lb_dataplane::Tick;
use pkt::{Arp, Ep, Frag, Pkt};

// ---------------------------------------------------------------- cases

/// What a step must produce.
#[derive(Debug, Clone)]
enum Expect {
    /// Transmit exactly this frame on this port.
    Transmit { port: u16, frame: Vec<u8> },
    /// Send exactly this reply back on the ingress port, and hint the
    /// neighbor table that `ip` is at `mac`.
    ReplyToNeighbor {
        ip: IpAddr,
        mac: [u8; 6],
        frame: Vec<u8>,
    },
    /// Drop with this reason, frame unchanged.
    Drop(DropReason),
    /// Hand over to this worker, frame unchanged.
    HandOver(u16),
    /// Pass to the host, frame unchanged.
    ToHost,
    /// Translated into exactly this frame (destination MAC zero) for
    /// `port`, once `via` is resolved.
    Resolve { port: u16, via: IpAddr, frame: Vec<u8> },
}

/// One frame in, one verdict (and frame) out.
#[derive(Debug, Clone)]
struct Step {
    /// Ingress port.
    port: u16,
    input: Vec<u8>,
    expect: Expect,
}

/// A counter check run after the last step.
type Check = fn(&Worker) -> Result<(), String>;

struct Case {
    description: String,
    fixture: Fixture,
    setup: Setup,
    steps: Vec<Step>,
    check: Option<Check>,
}

impl Case {
    fn new(description: impl Into<String>, steps: Vec<Step>) -> Case {
        Case {
            description: description.into(),
            fixture: Fixture::TwoPort,
            setup: Setup::default(),
            steps,
            check: None,
        }
    }

    fn setup(mut self, setup: Setup) -> Case {
        self.setup = setup;
        self
    }

    fn fixture(mut self, fixture: Fixture) -> Case {
        self.fixture = fixture;
        self
    }

    fn check(mut self, check: Check) -> Case {
        self.check = Some(check);
        self
    }

    fn run(&self) -> Result<(), String> {
        let snap = self.fixture.snapshot();
        let mut w = self.setup.worker();
        for (i, step) in self.steps.iter().enumerate() {
            let mut frame = step.input.clone();
            let meta = PacketMeta {
                port: step.port,
                offload: Default::default(),
            };
            let got = w.handle_packet(Tick(i as u64 * 10), snap, &mut frame, &meta);
            let at = format!("step {i}");
            let unchanged = |frame: &[u8]| {
                if frame == &step.input[..] {
                    Ok(())
                } else {
                    Err(format!("{at}: frame modified by a {got:?} verdict"))
                }
            };
            let output = |len: usize, want: &[u8]| {
                let out = frame.get(..len).ok_or(format!("{at}: len {len} > frame"))?;
                if out != want {
                    return Err(format!(
                        "{at}: output differs\n     got {}\nexpected {}",
                        hex(out),
                        hex(want)
                    ));
                }
                pkt::verify_checksums(out).map_err(|e| format!("{at}: {e}"))
            };
            match (&step.expect, got) {
                (Expect::Transmit { port, frame: want }, Verdict::Transmit { port: p, len }) => {
                    if p != *port {
                        return Err(format!("{at}: transmitted on port {p}, expected {port}"));
                    }
                    output(len, want)?;
                }
                (
                    Expect::Resolve {
                        port,
                        via,
                        frame: want,
                    },
                    Verdict::Resolve { port: p, len, via: v },
                ) => {
                    if (p, v) != (*port, *via) {
                        return Err(format!("{at}: resolve {v} on port {p}, expected {via} on {port}"));
                    }
                    output(len, want)?;
                }
                (
                    Expect::ReplyToNeighbor { ip, mac, frame: want },
                    Verdict::ReplyToNeighbor { len, ip: i, mac: m },
                ) => {
                    if (i, m.0) != (*ip, *mac) {
                        return Err(format!("{at}: hint {i} at {m}, expected {ip} at {mac:02x?}"));
                    }
                    output(len, want)?;
                }
                (Expect::Drop(r), Verdict::Drop(g)) if *r == g => unchanged(&frame)?,
                (Expect::HandOver(o), Verdict::HandOver(WorkerId(g))) if *o == g => unchanged(&frame)?,
                (Expect::ToHost, Verdict::ToHost) => unchanged(&frame)?,
                (want, got) => {
                    let drops: Vec<_> = w.counters().nonzero_drops().collect();
                    return Err(format!(
                        "{at}: verdict {got:?}, expected {}; drops so far {drops:?}",
                        short(want)
                    ));
                }
            }
        }
        if let Some(check) = self.check {
            check(&w)?;
        }
        Ok(())
    }
}

fn short(e: &Expect) -> String {
    match e {
        Expect::Transmit { port, frame } => format!("Transmit {{ port: {port}, len: {} }}", frame.len()),
        Expect::ReplyToNeighbor { ip, mac, frame } => {
            format!(
                "ReplyToNeighbor {{ len: {}, ip: {ip}, mac: {mac:02x?} }}",
                frame.len()
            )
        }
        Expect::Resolve { port, via, frame } => {
            format!("Resolve {{ port: {port}, len: {}, via: {via} }}", frame.len())
        }
        other => format!("{other:?}"),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

// ---------------------------------------------------------------- helpers

/// A packet from a client (port 0 side) as received.
fn from_client(p: Pkt) -> Pkt {
    p.macs(CLIENT_MAC, MAC0)
}

/// A packet from a backend (port 1 side) as received.
fn from_backend(p: Pkt) -> Pkt {
    p.macs(BACKEND_MAC, MAC1)
}

/// `p` as the balancer sends it towards the backends: port 1's MAC to the
/// backend's, TTL decremented.
fn to_backend(p: &Pkt) -> Pkt {
    let ttl = p.ttl - 1;
    p.clone().macs(MAC1, BACKEND_MAC).ttl(ttl)
}

/// `p` as the balancer sends it towards the clients.
fn to_client(p: &Pkt) -> Pkt {
    let ttl = p.ttl - 1;
    p.clone().macs(MAC0, CLIENT_MAC).ttl(ttl)
}

/// A step that must be translated into `out` and sent on `port`.
fn tx(port: u16, input: &Pkt, out: &Pkt) -> Step {
    Step {
        port,
        input: input.frame(),
        expect: Expect::Transmit {
            port,
            frame: out.frame(),
        },
    }
}

/// A client packet forwarded to the backends (out on port 1).
fn fwd(input: &Pkt, out: &Pkt) -> Step {
    Step {
        port: 0,
        input: input.frame(),
        expect: Expect::Transmit {
            port: 1,
            frame: out.frame(),
        },
    }
}

/// A backend (or backend-side router) packet sent to a client (out on port 0).
fn back(input: &Pkt, out: &Pkt) -> Step {
    Step {
        port: 1,
        input: input.frame(),
        expect: Expect::Transmit {
            port: 0,
            frame: out.frame(),
        },
    }
}

fn drop(port: u16, input: &Pkt, reason: DropReason) -> Step {
    Step {
        port,
        input: input.frame(),
        expect: Expect::Drop(reason),
    }
}

fn ep(addr: &'static str, port: u16) -> Ep {
    (addr, port)
}

/// One family's addresses for the family-generic cases.
#[derive(Clone, Copy)]
struct Fam {
    name: &'static str,
    client: &'static str,
    snat: &'static str,
    router: &'static str,
    web: &'static str,
    web_be: &'static str,
    app: &'static str,
    app_be: &'static str,
    dns: &'static str,
    dns_be: &'static str,
    syslog: &'static str,
    syslog_be: &'static str,
    drain: &'static str,
    restricted: &'static str,
    sticky: &'static str,
    /// The Maglev pick of `sticky`'s ring for the client address alone,
    /// where the client is pinned (golden, like `POOL_PICK`).
    sticky_pick: &'static str,
}

const V4: Fam = Fam {
    name: "IPv4",
    client: C4,
    snat: SNAT4,
    router: ROUTER4,
    web: "10.0.0.100",
    web_be: "10.1.0.11",
    app: "10.0.0.101",
    app_be: "10.1.0.12",
    dns: "10.0.0.102",
    dns_be: "10.1.0.13",
    syslog: "10.0.0.103",
    syslog_be: "10.1.0.11",
    drain: "10.0.0.104",
    restricted: "10.0.0.105",
    sticky: "10.0.0.107",
    sticky_pick: "10.1.0.12",
};

const V6: Fam = Fam {
    name: "IPv6",
    client: C6,
    snat: SNAT6,
    router: ROUTER6,
    web: "fd00::100",
    web_be: "fd01::11",
    app: "fd00::101",
    app_be: "fd01::12",
    dns: "fd00::102",
    dns_be: "fd01::13",
    syslog: "fd00::103",
    syslog_be: "fd01::11",
    drain: "fd00::104",
    restricted: "fd00::105",
    sticky: "fd00::107",
    sticky_pick: "fd01::11",
};

/// Full-NAT TCP set-up: SYN (client → VIP) and its translation.
fn fullnat_syn(f: Fam, cport: u16) -> (Pkt, Pkt) {
    let syn = from_client(Pkt::tcp(ep(f.client, cport), ep(f.web, 80), "S"));
    let out = to_backend(&syn).endpoints(ep(f.snat, SNAT_PORT), ep(f.web_be, 8080));
    (syn, out)
}

/// Full-NAT TCP SYN-ACK (backend → SNAT) and its translation.
fn fullnat_synack(f: Fam, cport: u16) -> (Pkt, Pkt) {
    let sa = from_backend(Pkt::tcp(ep(f.web_be, 8080), ep(f.snat, SNAT_PORT), "SA")).seq_ack(5000, 1001);
    let out = to_client(&sa).endpoints(ep(f.web, 80), ep(f.client, cport));
    (sa, out)
}

/// DNAT TCP: client → app VIP and its translation (client address kept).
fn dnat_tcp(f: Fam, cport: u16, flags: &'static str) -> (Pkt, Pkt) {
    let p = from_client(Pkt::tcp(ep(f.client, cport), ep(f.app, 80), flags));
    let out = to_backend(&p).endpoints(ep(f.client, cport), ep(f.app_be, 8080));
    (p, out)
}

/// DNAT TCP reply: app backend → client and its translation.
fn dnat_tcp_reply(f: Fam, cport: u16, flags: &'static str) -> (Pkt, Pkt) {
    let p = from_backend(Pkt::tcp(ep(f.app_be, 8080), ep(f.client, cport), flags)).seq_ack(7000, 1001);
    let out = to_client(&p).endpoints(ep(f.app, 80), ep(f.client, cport));
    (p, out)
}

// ---------------------------------------------------------------- table

fn family_cases(f: Fam) -> Vec<Case> {
    let n = f.name;
    let mut cases = Vec::new();

    // Client-IP affinity: whatever its port, the client's connections go to
    // the backend it is pinned to (made from the ring's pick for its address).
    let sticky: Vec<Step> = (42000..42004)
        .map(|port| {
            let s = from_client(Pkt::tcp(ep(f.client, port), ep(f.sticky, 80), "S"));
            fwd(
                &s,
                &to_backend(&s).endpoints(ep(f.client, port), ep(f.sticky_pick, 7000)),
            )
        })
        .collect();
    cases.push(
        Case::new(
            format!("{n} DNAT with client-IP affinity: every connection of the client to its pinned backend"),
            sticky,
        )
        .check(|w| {
            let c = w.counters();
            match (c.affinity_pins.get(), c.affinity_hits.get()) {
                (1, 3) => Ok(()),
                got => Err(format!(
                    "(affinity_pins, affinity_hits) = {got:?}, expected (1, 3)"
                )),
            }
        }),
    );

    // Full-NAT TCP: SYN, SYN-ACK, established data.
    let (syn, syn_out) = fullnat_syn(f, 40000);
    let (sa, sa_out) = fullnat_synack(f, 40000);
    let data = from_client(Pkt::tcp(ep(f.client, 40000), ep(f.web, 80), "AP"))
        .seq_ack(1001, 5001)
        .payload(b"GET / HTTP/1.1\r\n\r\n");
    let data_out = to_backend(&data).endpoints(ep(f.snat, SNAT_PORT), ep(f.web_be, 8080));
    cases.push(Case::new(
        format!("{n} full-NAT TCP SYN: SNAT address and port as source, backend as destination"),
        vec![fwd(&syn, &syn_out)],
    ));
    cases.push(Case::new(
        format!("{n} full-NAT TCP SYN-ACK: VIP as source, client as destination"),
        vec![fwd(&syn, &syn_out), back(&sa, &sa_out)],
    ));
    cases.push(Case::new(
        format!("{n} full-NAT TCP established data keeps its payload and translation"),
        vec![fwd(&syn, &syn_out), back(&sa, &sa_out), fwd(&data, &data_out)],
    ));

    // DNAT TCP: the backend sees the client's address.
    let (dsyn, dsyn_out) = dnat_tcp(f, 41000, "S");
    let (dsa, dsa_out) = dnat_tcp_reply(f, 41000, "SA");
    cases.push(Case::new(
        format!("{n} DNAT TCP SYN: client address kept, backend as destination"),
        vec![fwd(&dsyn, &dsyn_out)],
    ));
    cases.push(Case::new(
        format!("{n} DNAT TCP SYN-ACK: VIP as source"),
        vec![fwd(&dsyn, &dsyn_out), back(&dsa, &dsa_out)],
    ));
    let (ack, ack_out) = dnat_tcp(f, 41001, "A");
    cases.push(Case::new(
        format!("{n} DNAT TCP without SYN and without entry is accepted (Maglev picks as before)"),
        vec![fwd(&ack, &ack_out)],
    ));

    // DNAT UDP.
    let q = from_client(Pkt::udp(ep(f.client, 5300), ep(f.dns, 53), b"query"));
    let q_out = to_backend(&q).endpoints(ep(f.client, 5300), ep(f.dns_be, 5353));
    let a = from_backend(Pkt::udp(ep(f.dns_be, 5353), ep(f.client, 5300), b"answer!"));
    let a_out = to_client(&a).endpoints(ep(f.dns, 53), ep(f.client, 5300));
    cases.push(Case::new(
        format!("{n} DNAT UDP forward: client address kept"),
        vec![fwd(&q, &q_out)],
    ));
    cases.push(Case::new(
        format!("{n} DNAT UDP reply: VIP as source"),
        vec![fwd(&q, &q_out), back(&a, &a_out)],
    ));

    // Full-NAT UDP.
    let l = from_client(Pkt::udp(ep(f.client, 6000), ep(f.syslog, 514), b"<13>log line"));
    let l_out = to_backend(&l).endpoints(ep(f.snat, SNAT_PORT), ep(f.syslog_be, 5514));
    let lr = from_backend(Pkt::udp(ep(f.syslog_be, 5514), ep(f.snat, SNAT_PORT), b"ok"));
    let lr_out = to_client(&lr).endpoints(ep(f.syslog, 514), ep(f.client, 6000));
    cases.push(Case::new(
        format!("{n} full-NAT UDP forward and reply"),
        vec![fwd(&l, &l_out), back(&lr, &lr_out)],
    ));

    // 802.1Q: the tag stays, on both directions.
    let tsyn = syn.clone().vlan(100);
    let tsyn_out = syn_out.clone().vlan(100);
    let tsa = sa.clone().vlan(200);
    let tsa_out = sa_out.clone().vlan(200);
    cases.push(Case::new(
        format!("{n} 802.1Q-tagged full-NAT SYN and SYN-ACK keep their tags"),
        vec![fwd(&tsyn, &tsyn_out), back(&tsa, &tsa_out)],
    ));
    let tq = q.clone().vlan(7);
    let tq_out = q_out.clone().vlan(7);
    cases.push(Case::new(
        format!("{n} 802.1Q-tagged DNAT UDP keeps its tag"),
        vec![fwd(&tq, &tq_out)],
    ));

    // TTL / hop limit 1.
    cases.push(Case::new(
        format!("{n} TTL/hop limit 1 is ttl_exceeded, before any state"),
        vec![
            drop(0, &syn.clone().ttl(1), DropReason::TtlExceeded),
            fwd(&syn, &syn_out),
        ],
    ));

    // No frontend, no backend, source range.
    let p81 = from_client(Pkt::tcp(ep(f.client, 40000), ep(f.web, 81), "S"));
    let rst = Pkt::tcp(ep(f.web, 81), ep(f.client, 40000), "RA0")
        .seq_ack(0, 1001)
        .ttl(64)
        .macs(MAC0, CLIENT_MAC);
    cases.push(Case::new(
        format!("{n} TCP to a VIP port without a frontend is refused with a RST"),
        vec![tx(0, &p81, &rst)],
    ));
    let udp80 = from_client(Pkt::udp(ep(f.client, 40000), ep(f.web, 80), b"x"));
    cases.push(Case::new(
        format!("{n} VIP port of another protocol is no_frontend"),
        vec![drop(0, &udp80, DropReason::NoFrontend)],
    ));
    let dr = from_client(Pkt::tcp(ep(f.client, 40000), ep(f.drain, 80), "S"));
    cases.push(Case::new(
        format!("{n} service whose backends all terminate is no_backend"),
        vec![drop(0, &dr, DropReason::NoBackend)],
    ));
    let rs = from_client(Pkt::tcp(ep(f.client, 40000), ep(f.restricted, 80), "S"));
    cases.push(Case::new(
        format!("{n} client outside the source ranges is source_range_denied"),
        vec![drop(0, &rs, DropReason::SourceRangeDenied)],
    ));
    let rs81 = from_client(Pkt::tcp(ep(f.client, 40000), ep(f.restricted, 81), "S"));
    cases.push(Case::new(
        format!("{n} TCP to a closed port of a VIP whose services all deny the client is source_range_denied, no RST"),
        vec![drop(0, &rs81, DropReason::SourceRangeDenied)],
    ));

    // TCP without SYN for full-NAT.
    let nosyn = from_client(Pkt::tcp(ep(f.client, 40000), ep(f.web, 80), "A"));
    cases.push(Case::new(
        format!("{n} full-NAT TCP without SYN and without entry is tcp_not_syn"),
        vec![drop(0, &nosyn, DropReason::TcpNotSyn)],
    ));

    // Replies without entries.
    cases.push(Case::new(
        format!("{n} full-NAT reply to an unused SNAT port is no_conntrack_reply"),
        vec![drop(1, &sa, DropReason::NoConntrackReply)],
    ));
    cases.push(Case::new(
        format!("{n} DNAT reply without entry is no_conntrack_reply"),
        vec![drop(1, &dsa, DropReason::NoConntrackReply)],
    ));

    // Echo to a VIP.
    let ping = from_client(Pkt::echo(f.client, f.web, false, 7, 1, b"ping payload"));
    let pong = Pkt::echo(f.web, f.client, true, 7, 1, b"ping payload").macs(MAC0, CLIENT_MAC);
    cases.push(Case::new(
        format!("{n} echo request to a VIP is answered"),
        vec![tx(0, &ping, &pong)],
    ));

    // ICMP errors quoting a tracked full-NAT flow: the router on the
    // backend side reports to the SNAT address; the client gets it from
    // the same router, quoting what it sent itself (the quoted TTL is the
    // one the balancer sent, 63).
    let quoted = syn_out.ip_bytes();
    let client_view = syn.clone().ttl(63).ip_bytes();
    let (err, err_out) = if f.client == C4 {
        let ty = Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
            next_hop_mtu: 1400,
        });
        let err = Pkt::icmp4(f.router, f.snat, ty.clone(), quoted.clone()).macs(ROUTER_MAC, MAC1);
        let out = Pkt::icmp4(f.router, f.client, ty, client_view.clone())
            .macs(MAC0, CLIENT_MAC)
            .ttl(63);
        (err, out)
    } else {
        let ty = Icmpv6Type::PacketTooBig { mtu: 1280 };
        let err = Pkt::icmp6(f.router, f.snat, ty, quoted.clone()).macs(ROUTER_MAC, MAC1);
        let out = Pkt::icmp6(f.router, f.client, ty, client_view.clone())
            .macs(MAC0, CLIENT_MAC)
            .ttl(63);
        (err, out)
    };
    let what = if f.client == C4 {
        "ICMP fragmentation needed"
    } else {
        "ICMPv6 packet too big"
    };
    cases.push(Case::new(
        format!("{n} {what} quoting a tracked full-NAT flow reaches the client, outer and quote translated"),
        vec![fwd(&syn, &syn_out), back(&err, &err_out)],
    ));
    // An error about a flow never seen.
    cases.push(Case::new(
        format!("{n} {what} quoting an untracked flow is icmp_error_untracked"),
        vec![drop(1, &err, DropReason::IcmpErrorUntracked)],
    ));
    if f.client != C4 {
        // A quote whose chain lbd refuses (ESP here) is no packet lbd sent:
        // untracked, not the error's own `ipv6_extension_header`.
        let mut esp = quoted.clone();
        esp[6] = 50;
        let ty = Icmpv6Type::PacketTooBig { mtu: 1280 };
        let err = Pkt::icmp6(f.router, f.snat, ty, esp).macs(ROUTER_MAC, MAC1);
        cases.push(Case::new(
            format!("{n} {what} quoting an IPv6 chain lbd refuses is icmp_error_untracked"),
            vec![fwd(&syn, &syn_out), drop(1, &err, DropReason::IcmpErrorUntracked)],
        ));
    }

    // Hand-over (n_workers = 2): a full-NAT reply to an odd SNAT port
    // belongs to worker 1 (port & 1).
    let odd = from_backend(Pkt::tcp(ep(f.web_be, 8080), ep(f.snat, SNAT_PORT + 1), "SA"));
    cases.push(
        Case::new(
            format!("{n} full-NAT reply to worker 1's SNAT port, on worker 0, is handed over"),
            vec![Step {
                port: 1,
                input: odd.frame(),
                expect: Expect::HandOver(1),
            }],
        )
        .setup(Setup {
            n_workers: 2,
            ..Setup::default()
        }),
    );
    let cport = (30000..)
        .find(|&p| owner_of_client(ip(f.client), p, 2) == WorkerId(1))
        .unwrap();
    let (other, _) = fullnat_syn(f, cport);
    cases.push(
        Case::new(
            format!("{n} SYN of a client endpoint owned by worker 1, on worker 0, is handed over"),
            vec![Step {
                port: 0,
                input: other.frame(),
                expect: Expect::HandOver(1),
            }],
        )
        .setup(Setup {
            n_workers: 2,
            ..Setup::default()
        }),
    );

    // SNAT exhausted: a one-port range, held by an established
    // connection (the backend answered, the client's data went through).
    let (syn2, _) = fullnat_syn(f, 40001);
    cases.push(
        Case::new(
            format!("{n} second full-NAT flow with a one-port SNAT range held by an established one is snat_exhausted"),
            vec![
                fwd(&syn, &syn_out),
                back(&sa, &sa_out),
                fwd(&data, &data_out),
                drop(0, &syn2, DropReason::SnatExhausted),
            ],
        )
        .setup(Setup {
            snat_ports: SNAT_PORT..=SNAT_PORT,
            ..Setup::default()
        }),
    );
    // ... held by one nobody answered, to the same backend: its pair is
    // not taken back (the backend may still answer the old connection on
    // that very tuple). Other backends' pairs are: worker tests.
    cases.push(
        Case::new(
            format!("{n} second full-NAT flow with a one-port SNAT range held by an unanswered SYN to the same backend is snat_exhausted"),
            vec![fwd(&syn, &syn_out), drop(0, &syn2, DropReason::SnatExhausted)],
        )
        .setup(Setup {
            snat_ports: SNAT_PORT..=SNAT_PORT,
            ..Setup::default()
        }),
    );

    // Conntrack full of established connections: full-NAT drops, DNAT goes
    // stateless (and its reply then has no entry).
    let mut steps = Vec::new();
    for cport in [42000, 42001] {
        let (s, s_out) = dnat_tcp(f, cport, "S");
        let (r, r_out) = dnat_tcp_reply(f, cport, "SA");
        let (a, a_out) = dnat_tcp(f, cport, "A");
        steps.extend([fwd(&s, &s_out), back(&r, &r_out), fwd(&a, &a_out)]);
    }
    let (s3, s3_out) = dnat_tcp(f, 42002, "S");
    let (r3, _) = dnat_tcp_reply(f, 42002, "SA");
    steps.extend([
        drop(0, &syn, DropReason::ConntrackFull),
        fwd(&s3, &s3_out),
        drop(1, &r3, DropReason::NoConntrackReply),
    ]);
    let small = if f.client == C4 {
        Setup {
            conntrack_v4: 2,
            ..Setup::default()
        }
    } else {
        Setup {
            conntrack_v6: 2,
            ..Setup::default()
        }
    };
    cases.push(
        Case::new(
            format!(
                "{n} conntrack full of established flows: full-NAT conntrack_full, DNAT stateless_forwards"
            ),
            steps,
        )
        .setup(small)
        .check(|w| {
            let c = w.counters();
            let got = (
                c.stateless_forwards.get(),
                c.drops_of(DropReason::ConntrackFull),
                w.conntrack().len(),
                w.snat_ports().available(ip(SNAT4), Proto::Tcp)
                    + w.snat_ports().available(ip(SNAT6), Proto::Tcp),
            );
            // The frontends' and backends' packets: two connections' three
            // packets each, and the stateless SYN (the full-NAT SYN and
            // the orphaned reply are drops); their connections: the two.
            let sum = |t: &mut dyn Iterator<Item = (u32, lb_dataplane::counters::FlowTotals)>| {
                t.fold((0, 0), |(p, n), (_, t)| (p + t.packets, n + t.connections))
            };
            let flows = (sum(&mut c.frontend_totals()), sum(&mut c.backend_totals()));
            if got == (1, 1, 2, 2000) && flows == ((7, 2), (7, 2)) {
                Ok(())
            } else {
                Err(format!(
                    "(stateless_forwards, conntrack_full drops, entries, free SNAT ports) = {got:?}, \
                     expected (1, 1, 2, 2000): the refused full-NAT flow must return its port; \
                     frontends' and backends' (packets, connections) = {flows:?}, expected \
                     ((7, 2), (7, 2)): a stateless forward counts as a packet"
                ))
            }
        }),
    );
    cases
}

fn all_cases() -> Vec<Case> {
    let mut cases = family_cases(V4);
    cases.extend(family_cases(V6));
    cases.extend(one_family::v4_cases());
    cases.extend(one_family::v6_cases());
    cases.extend(next_hop::cases());
    cases
}

#[test]
fn golden_packets() {
    let cases = all_cases();
    let mut failures = Vec::new();
    for case in &cases {
        if let Err(e) = case.run() {
            failures.push(format!("FAILED: {}\n  {e}", case.description));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} golden cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// The builder agrees with itself: inputs carry valid checksums, so a
/// failure above is the pipeline's, not the fixture's.
#[test]
fn golden_inputs_and_expectations_are_well_formed() {
    for case in all_cases() {
        for (i, s) in case.steps.iter().enumerate() {
            let frames = match &s.expect {
                Expect::Transmit { frame, .. }
                | Expect::Resolve { frame, .. }
                | Expect::ReplyToNeighbor { frame, .. } => vec![&s.input, frame],
                _ => vec![&s.input],
            };
            for f in frames {
                if let Err(e) = pkt::verify_checksums(f) {
                    panic!("{} step {i}: {e}", case.description);
                }
            }
        }
    }
}
