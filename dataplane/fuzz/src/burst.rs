//! One `burst` fuzz input: the same traffic through two identical workers,
//! one frame at a time (`handle_packet`) and in bursts (`handle_burst`,
//! its lookups staged ahead of the packets). Shared, by `#[path]`, by the
//! `burst` fuzz target and by lb-dataplane's `tests/corpus_replay.rs`.
//!
//! The input is a program read byte by byte (reading past its end gives
//! zeros, so every input is valid): first the workers' setup (1 or 2
//! workers, IPv4 and IPv6 table capacities from 1, eviction window, SNAT
//! ports from 1, checksum offload or none), then bursts of 1-48 frames,
//! each frame one of:
//! - a TCP segment (flags, TTL chosen) from one of a few clients, on one of
//!   eight client ports, to a frontend of the fixture or to a port none
//!   serves;
//! - a UDP datagram to a UDP frontend;
//! - a backend's answer to a frame forwarded earlier: the output with its
//!   addresses, ports and MACs swapped (checksums stay valid), TCP flags
//!   chosen;
//! - raw bytes from the input;
//! - a generated frame with one byte flipped;
//! - with bit 3 of the first byte set, client frames may carry an 802.1Q
//!   tag or IP options (IPv4 router alert, an IPv6 destination options
//!   header), or be a first or later fragment: frames the IPv4 fast path
//!   declines, so the general path's staged lookups see IPv4 too;
//! - on a tagged snapshot, every frame arrives with its port's 802.1Q tag
//!   (inserted, or the VLAN id of a tag it has set to the port's);
//! - with bit 5 of the first byte set: an ICMP or ICMPv6 error (packet
//!   too big / fragmentation needed, port unreachable, time exceeded)
//!   quoting a frame the balancer sent, to a backend or to a client, from
//!   its destination; or an echo request to a VIP or SNAT address. Those
//!   are the frames the burst does not stage, handled between staged ones.
//!
//! After each burst, time moves on by a chosen amount, and sometimes both
//! workers expire with the same budget. The frames are few and the tables
//! tiny, so the same flow recurs within a burst, replies meet flows opened
//! earlier in their own burst, inserts evict, SNAT ports run out: the
//! cases where a lookup made ahead of the packets could go stale.
//!
//! Checked after every burst (a difference panics, which the fuzzer
//! reports): the same verdicts, the same output frames, the same counters,
//! conntrack occupancy and statistics and free SNAT ports; the same
//! `TickStats` from each expiry; and at the end of the input, the same
//! whole worker state (every table, by `Debug`, which shows the reply-port
//! cells and the SNAT pools by what they hold: ~45 KB of text, ~0.4 ms a
//! worker in a release build). Without offload, every frame sent for an
//! input whose checksums all verify must have correct checksums and
//! lengths (`oracle.rs`; the outputs of both workers are the same, so
//! `handle_packet`'s are checked).

use std::cell::Cell;

use lb_dataplane::affinity::{self, AffinityTable};
use lb_dataplane::checksum::ChecksumOffload;
use lb_dataplane::conntrack;
use lb_dataplane::flow::{Proto, WorkerId};
use lb_dataplane::worker::{PacketMeta, Verdict, Worker, WorkerConfig};
use lb_dataplane::{Prefetch, Snapshot, Tick};

use std::net::IpAddr;

use etherparse::{icmpv4, icmpv6, Icmpv4Type, Icmpv6Type};

use crate::fixture::{ip, CLIENT_MAC, MAC0, SNAT4, SNAT6};
use crate::oracle;
use crate::pkt::{Frag, Pkt};

/// Clients: on port 0's prefixes (with and without a neighbor entry), and
/// off them (through the gateway), in both families.
const CLIENTS4: [&str; 4] = ["10.0.0.2", "10.0.0.3", "172.16.0.1", "192.168.1.1"];
const CLIENTS6: [&str; 3] = ["fd00::2", "fd00::3", "fd99::2"];
/// TCP destinations: the fixture's TCP frontends (`sticky` and `sticky6`
/// with client-IP affinity) and a port none serves.
const TCP4: [(&str, u16); 7] = [
    ("10.0.0.100", 80),
    ("10.0.0.101", 80),
    ("10.0.0.104", 80),
    ("10.0.0.105", 80),
    ("10.0.0.106", 80),
    ("10.0.0.107", 80),
    ("10.0.0.100", 81),
];
const TCP6: [(&str, u16); 5] = [
    ("fd00::100", 80),
    ("fd00::101", 80),
    ("fd00::105", 80),
    ("fd00::107", 80),
    ("fd00::100", 81),
];
const UDP: [(&str, u16); 4] = [
    ("10.0.0.102", 53),
    ("10.0.0.103", 514),
    ("fd00::102", 53),
    ("fd00::103", 514),
];
/// TCP flag sets, as `Pkt` spells them.
const FLAGS: [&str; 8] = ["S", "A", "SA", "FA", "R", "PA", "RA", ""];
/// TCP flag bytes for answers (same sets).
const FLAG_BYTES: [u8; 8] = [0x02, 0x10, 0x12, 0x11, 0x04, 0x18, 0x14, 0x00];

/// Every offload flag set: the other code path of parse and NAT.
const FULL_OFFLOAD: ChecksumOffload = ChecksumOffload {
    rx_ipv4_verified: true,
    rx_l4_partial: true,
    tx_ipv4: true,
    tx_l4: true,
};

/// The input, read a byte at a time; zeros past its end.
struct Input<'a> {
    data: &'a [u8],
    at: usize,
    /// Client frames may be tagged, carry IP options or be fragments.
    variants: bool,
    /// How many were.
    variant_frames: u64,
}

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    /// A number below `n` (> 0).
    fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }

    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
}

/// What one input exercised, for the replay test to check that the corpus
/// reaches the cases the harness is for.
#[derive(Debug, Default, Clone, Copy)]
pub struct Reached {
    pub bursts: u64,
    pub frames: u64,
    pub new_connections: u64,
    pub evictions: u64,
    /// Frames forwarded to the backends' side, then answered.
    pub answers: u64,
    /// ICMP errors quoting a sent frame that were translated (not dropped).
    pub icmp_translated: u64,
    /// Client frames tagged, with IP options or fragmented.
    pub variant_frames: u64,
    /// Lines the staged lookups warmed (through the counting `Prefetch` of
    /// every other burst): that path ran.
    pub prefetches: u64,
    /// Frames sent whose checksums and lengths the oracle checked.
    pub oracle_checked: u64,
}

/// A warming that counts its calls and loads nothing: the answers must not
/// depend on how lines are warmed.
#[derive(Debug, Default)]
struct Counting(Cell<u64>);

impl Prefetch for Counting {
    fn prefetch<T: Copy>(&self, _: &T) {
        self.0.set(self.0.get() + 1);
    }
}

fn worker(n_workers: u16, v4: u32, v6: u32, window: u32, ports: u16) -> Worker {
    let mut cfg = WorkerConfig::new(WorkerId(0), n_workers);
    cfg.conntrack = conntrack::Config {
        evict_window: window,
        ..conntrack::Config::new(v4, v6)
    };
    cfg.snat_addresses = vec![ip(SNAT4), ip(SNAT6)];
    cfg.snat_ports = 20000..=20000 + ports - 1;
    cfg.frontend_slots = 64;
    cfg.backend_slots = 64;
    // The staged lookup at every size: what is compared.
    cfg.burst_lookup_min_len = 0;
    // A small table: a worker is built for every input.
    let pins = AffinityTable::new(affinity::MIN_CAPACITY, 1).expect("valid size");
    cfg.affinity = Some(std::sync::Arc::new(pins));
    Worker::new(cfg).expect("fuzz worker config is valid")
}

/// A generated client frame: TCP to a frontend (or a port none serves),
/// or UDP to a UDP frontend.
fn client_frame(inp: &mut Input<'_>) -> Vec<u8> {
    let v6 = inp.byte() & 3 == 0;
    let client = if v6 {
        CLIENTS6[inp.below(CLIENTS6.len())]
    } else {
        CLIENTS4[inp.below(CLIENTS4.len())]
    };
    let sport = 40000 + inp.below(8) as u16;
    let (pkt, l4_len) = if inp.byte() & 7 == 0 {
        let (vip, port) = UDP[inp.below(2) + if v6 { 2 } else { 0 }];
        (Pkt::udp((client, sport), (vip, port), b"q"), 9)
    } else {
        let (vip, port) = if v6 {
            TCP6[inp.below(TCP6.len())]
        } else {
            TCP4[inp.below(TCP4.len())]
        };
        let ttl = [64, 1, 2, 255][inp.below(4)];
        let pkt = Pkt::tcp((client, sport), (vip, port), FLAGS[inp.below(FLAGS.len())])
            .payload(b"data")
            .ttl(ttl);
        (pkt, 24)
    };
    let pkt = pkt.macs(CLIENT_MAC, MAC0);
    if !inp.variants {
        return pkt.frame();
    }
    let v = inp.byte();
    inp.variant_frames += u64::from(v % 5 != 4);
    let ident = u16::from(v);
    match v % 5 {
        0 => pkt.vlan(1 + u16::from(v >> 3)),
        1 if v6 => pkt.v6_dest_opts(&[1, 4, 0, 0, 0, 0]),
        // Router alert.
        1 => pkt.v4_options(&[0x94, 0x04, 0, 0]),
        // The first fragment holds the L4 header's first 8 or 16 bytes.
        2 => pkt.ident(ident).frag(Frag::First {
            len: if l4_len > 16 { 16 } else { 8 },
        }),
        3 => pkt.ident(ident).frag(Frag::Last { offset: 8 }),
        _ => pkt,
    }
    .frame()
}

/// Swaps two equal-length byte ranges of `f`.
fn swap(f: &mut [u8], a: usize, b: usize, len: usize) {
    for i in 0..len {
        f.swap(a + i, b + i);
    }
}

/// The backend's answer to `out`, a frame the balancer sent towards the
/// backends: MACs, addresses and ports swapped (which keeps every
/// checksum), and for TCP the flags set to `flags` with the checksum
/// updated (RFC 1624). `None` if `out` is not plain Ethernet + IPv4
/// (without options) or IPv6 (without extension headers) + TCP or UDP.
fn answer(out: &[u8], flags: u8) -> Option<Vec<u8>> {
    // (where the addresses start, their length, where L4 starts, protocol)
    let (addrs, len, l4, proto) = match out.get(12..15)? {
        [0x08, 0x00, 0x45] => (26, 4, 34, *out.get(23)?),
        [0x86, 0xdd, _] => (22, 16, 54, *out.get(20)?),
        _ => return None,
    };
    if !matches!(proto, 6 | 17) || out.len() < l4 + if proto == 6 { 20 } else { 8 } {
        return None;
    }
    let mut f = out.to_vec();
    swap(&mut f, addrs, addrs + len, len);
    swap(&mut f, 0, 6, 6);
    swap(&mut f, l4, l4 + 2, 2);
    if proto == 6 {
        let word = |f: &[u8]| u16::from_be_bytes([f[l4 + 12], f[l4 + 13]]);
        let old = word(&f);
        f[l4 + 13] = flags;
        let new = word(&f);
        let csum = u16::from_be_bytes([f[l4 + 16], f[l4 + 17]]);
        // RFC 1624, eq. 3: HC' = ~(~HC + ~m + m').
        let mut sum = u32::from(!csum) + u32::from(!old) + u32::from(new);
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        f[l4 + 16..l4 + 18].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    }
    Some(f)
}

/// The source and destination addresses of an IPv4 or IPv6 frame (plain
/// Ethernet).
fn addrs_of(f: &[u8]) -> Option<(IpAddr, IpAddr)> {
    match f.get(12..14)? {
        [0x08, 0x00] => {
            let a: [u8; 4] = f.get(26..30)?.try_into().ok()?;
            let b: [u8; 4] = f.get(30..34)?.try_into().ok()?;
            Some((a.into(), b.into()))
        }
        [0x86, 0xdd] => {
            let a: [u8; 16] = f.get(22..38)?.try_into().ok()?;
            let b: [u8; 16] = f.get(38..54)?.try_into().ok()?;
            Some((a.into(), b.into()))
        }
        _ => None,
    }
}

/// An ICMP or ICMPv6 error about `out`, a frame the balancer sent, from
/// its destination back to the balancer's port: of the kind `kind`
/// chooses, quoting the first `max(quote, 48)` bytes of `out`'s IP packet
/// (all of it if shorter; 48 covers an IPv6 header and the 8 bytes of L4
/// header that RFC 792 asks for). `None` if `out` is not IP.
fn icmp_error(out: &[u8], kind: u8, quote: usize) -> Option<Vec<u8>> {
    let (src, dst) = addrs_of(out)?;
    let ip_len = out.len() - 14;
    let quoted = out[14..14 + ip_len.min(quote.max(48))].to_vec();
    let (to, from) = (src.to_string(), dst.to_string());
    let mut macs = [[0u8; 6]; 2];
    macs[0].copy_from_slice(&out[..6]);
    macs[1].copy_from_slice(&out[6..12]);
    let pkt = if src.is_ipv4() {
        let ty = match kind % 3 {
            0 => Icmpv4Type::DestinationUnreachable(icmpv4::DestUnreachableHeader::FragmentationNeeded {
                next_hop_mtu: 1280,
            }),
            1 => Icmpv4Type::DestinationUnreachable(icmpv4::DestUnreachableHeader::Port),
            _ => Icmpv4Type::TimeExceeded(icmpv4::TimeExceededCode::TtlExceededInTransit),
        };
        Pkt::icmp4(&from, &to, ty, quoted)
    } else {
        let ty = match kind % 3 {
            0 => Icmpv6Type::PacketTooBig { mtu: 1280 },
            1 => Icmpv6Type::DestinationUnreachable(icmpv6::DestUnreachableCode::Port),
            _ => Icmpv6Type::TimeExceeded(icmpv6::TimeExceededCode::HopLimitExceeded),
        };
        Pkt::icmp6(&from, &to, ty, quoted)
    };
    // From the host `out` went to, back to the port it left by.
    Some(pkt.macs(macs[0], macs[1]).frame())
}

/// What is compared after every burst: the counters, the conntrack's
/// occupancy and statistics, and the free SNAT ports of each pool.
fn digest(w: &Worker) -> String {
    let free: Vec<usize> = [ip(SNAT4), ip(SNAT6)]
        .into_iter()
        .flat_map(|a| [Proto::Tcp, Proto::Udp, Proto::Icmp].map(|p| w.snat_ports().available(a, p)))
        .collect();
    format!(
        "{:?} {} {:?} {free:?}",
        w.counters(),
        w.conntrack().len(),
        w.conntrack().stats()
    )
}

/// `frame` as it arrives on `port`: as it is, or on a tagged snapshot
/// with the port's 802.1Q tag, inserted after the MACs or, where the frame
/// has one (a backend's answer to a frame lbd sent, which went out with
/// the egress port's tag), with its VLAN id set to the port's.
fn arriving(snap: &Snapshot, port: u16, mut frame: Vec<u8>) -> Vec<u8> {
    let Some(vid) = snap.port(port).and_then(|p| p.vlan()) else {
        return frame;
    };
    if frame.len() < 14 {
        return frame;
    }
    if frame[12..14] == [0x81, 0x00] && frame.len() >= 16 {
        let tci = u16::from_be_bytes([frame[14], frame[15]]) & 0xf000 | vid;
        frame[14..16].copy_from_slice(&tci.to_be_bytes());
    } else {
        let t = vid.to_be_bytes();
        frame.splice(12..12, [0x81, 0x00, t[0], t[1]]);
    }
    frame
}

/// Runs one input; see the module doc.
pub fn run(snap: &Snapshot, data: &[u8]) -> Reached {
    let mut inp = Input {
        data,
        at: 0,
        variants: false,
        variant_frames: 0,
    };
    // Bit 0: one worker or two. (The fuzz target reads bits 6 and 7 for
    // its fixture.)
    let first = inp.byte();
    let n_workers = 1 + u16::from(first & 1);
    // Bit 5: ICMP errors and echo requests among the frames (a bit the
    // first corpus's named input has clear, so it keeps its meaning).
    let icmp = first & 0x20 != 0;
    // Bit 3: client frames with an 802.1Q tag, IP options or as fragments
    // (also clear in the named input).
    inp.variants = first & 0x08 != 0;
    let v4 = 1 + inp.below(48) as u32;
    let v6 = 1 + inp.below(16) as u32;
    let window = 1 + inp.below(8) as u32;
    let ports = 1 + inp.below(64) as u16;
    let offload = if inp.byte() & 3 == 0 {
        FULL_OFFLOAD
    } else {
        ChecksumOffload::NONE
    };
    let mut one = worker(n_workers, v4, v6, window, ports);
    let mut burst = worker(n_workers, v4, v6, window, ports);
    let counting = Counting::default();
    // Frames sent towards backends, and towards clients.
    let mut sent: Vec<Vec<u8>> = Vec::new();
    let mut to_clients: Vec<Vec<u8>> = Vec::new();
    // Which frames of the burst are ICMP errors the harness made.
    let mut is_error = Vec::new();
    let mut reached = Reached::default();
    let mut now = 1u64;
    // Bounded: a long input is cut, not slow.
    for round in 0..64 {
        if inp.done() {
            break;
        }
        let len = 1 + inp.below(48);
        let mut frames = Vec::with_capacity(len);
        let mut metas = Vec::with_capacity(len);
        is_error.clear();
        for _ in 0..len {
            let mut error = false;
            let (frame, port) = match inp.below(8) {
                0..=2 => (client_frame(&mut inp), 0),
                3 | 4 if !sent.is_empty() => {
                    let out = &sent[inp.below(sent.len())];
                    match answer(out, FLAG_BYTES[inp.below(FLAG_BYTES.len())]) {
                        Some(f) => {
                            reached.answers += 1;
                            (f, 1)
                        }
                        None => (client_frame(&mut inp), 0),
                    }
                }
                5 => {
                    let n = inp.below(96);
                    let f: Vec<u8> = (0..n).map(|_| inp.byte()).collect();
                    (f, u16::from(inp.byte() & 1))
                }
                6 => {
                    let mut f = client_frame(&mut inp);
                    let at = inp.below(f.len());
                    f[at] ^= inp.byte() | 1;
                    (f, 0)
                }
                7 if icmp => {
                    let what = inp.byte();
                    let kind = inp.byte();
                    let quote = inp.below(128);
                    let (list, port) = if what & 1 == 0 {
                        (&sent, 1)
                    } else {
                        (&to_clients, 0)
                    };
                    let quoted = match list.len() {
                        0 => None,
                        n => Some(&list[inp.below(n)]),
                    };
                    let made = quoted
                        .filter(|_| what & 6 != 0)
                        .and_then(|out| icmp_error(out, kind, quote));
                    match made {
                        Some(f) => {
                            error = true;
                            (f, port)
                        }
                        _ => {
                            // An echo request to an owned address.
                            let v6 = kind & 1 != 0;
                            let (client, to) = match (v6, kind & 2 != 0) {
                                (false, false) => (CLIENTS4[0], "10.0.0.100"),
                                (false, true) => (CLIENTS4[1], SNAT4),
                                (true, false) => (CLIENTS6[0], "fd00::100"),
                                (true, true) => (CLIENTS6[1], SNAT6),
                            };
                            let id = u16::from(quote as u8);
                            let f = Pkt::echo(client, to, false, id, 1, b"ping")
                                .macs(CLIENT_MAC, MAC0)
                                .frame();
                            (f, 0)
                        }
                    }
                }
                _ => (client_frame(&mut inp), 0),
            };
            is_error.push(error);
            frames.push(arriving(snap, port, frame));
            metas.push(PacketMeta { port, offload });
        }
        let mut expect_frames = frames.clone();
        // The frames as they go in, for the oracle.
        let inputs = frames.clone();
        let expect: Vec<Verdict> = expect_frames
            .iter_mut()
            .zip(&metas)
            .map(|(f, m)| one.handle_packet(Tick(now), snap, f, m))
            .collect();
        let mut got = vec![Verdict::ToHost; len];
        if round % 2 == 0 {
            burst.handle_burst(Tick(now), snap, &mut frames, &metas, &mut got);
        } else {
            burst.handle_burst_with(&counting, Tick(now), snap, &mut frames, &metas, &mut got);
        }
        assert_eq!(got, expect, "round {round}: verdicts");
        assert_eq!(frames, expect_frames, "round {round}: frames");
        assert_eq!(digest(&burst), digest(&one), "round {round}: worker state");
        for (((input, meta), v), output) in inputs.iter().zip(&metas).zip(&expect).zip(&expect_frames) {
            reached.oracle_checked += u64::from(oracle::check(input, meta, v, output));
        }
        for ((f, v), error) in expect_frames.iter().zip(&expect).zip(&is_error) {
            let (port, len) = match *v {
                Verdict::Transmit { port, len } | Verdict::Resolve { port, len, .. } => (port, len),
                _ => continue,
            };
            if *error {
                reached.icmp_translated += 1;
                // A translated error is not a frame of the flow.
                continue;
            }
            // On a tagged snapshot, kept untagged: the answers and errors
            // built from them get their port's tag as they arrive
            // (`arriving`).
            let mut out = f[..len].to_vec();
            if snap.vlan_tagged() && out.get(12..14) == Some(&[0x81, 0x00][..]) && out.len() >= 18 {
                out.drain(12..16);
            }
            match port {
                0 => to_clients.push(out),
                _ => sent.push(out),
            }
        }
        for list in [&mut sent, &mut to_clients] {
            if list.len() > 32 {
                list.drain(..list.len() - 32);
            }
        }
        reached.bursts += 1;
        reached.frames += len as u64;
        // Milliseconds to hours: entries time out in between.
        now += u64::from(inp.byte()) << inp.below(24);
        if inp.byte() & 3 == 0 {
            let budget = inp.below(32);
            let a = one.handle_tick(Tick(now), budget);
            let b = burst.handle_tick(Tick(now), budget);
            assert_eq!(a, b, "round {round}: expiry");
        }
    }
    assert_eq!(format!("{burst:?}"), format!("{one:?}"), "whole worker state");
    let c = one.counters();
    reached.new_connections = c.new_connections.get();
    reached.evictions = c.conntrack_evictions.get();
    reached.prefetches = counting.0.get();
    reached.variant_frames = inp.variant_frames;
    reached
}
