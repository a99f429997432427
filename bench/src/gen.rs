//! The generator, sink, checker and backend emulator: one loop on one
//! lcore, on one DPDK port that is linked to the device under test (lbd
//! one-armed, or the io-forward baseline).
//!
//! Each loop iteration receives a burst and handles every frame:
//! - an ARP request for a client or backend address: answered (lb-bench
//!   plays every client and every backend on one MAC), and the asker's MAC
//!   becomes the device's MAC;
//! - a forward packet (to a backend port, or to the VIP port when the
//!   device does not translate): checked (checksums, destination is a
//!   backend, the same backend for every packet of the flow, source is the
//!   SNAT address in full-NAT or the client in DNAT) and answered as the
//!   backend would, unless `--no-reply`;
//! - a reply (from the VIP, or from a backend when the device does not
//!   translate): checked (checksums, addressed to the flow's client) and its
//!   round-trip time recorded.
//!
//! Then it sends the next burst of client packets, paced to `--rate`.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dpdk::{Burst, Mempool, RxQueue, TxQueue, BURST_MAX};

use crate::frame::{self, Bad, Proto, Seen, Spec, ACK, SYN};
use crate::report::{Counters, Histogram};

/// The MAC lb-bench uses for every client and backend.
pub const BENCH_MAC: [u8; 6] = [0x02, 0x1b, 0xbe, 0x4c, 0x00, 0x01];

/// What the device under test does to packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dut {
    /// lbd in full-NAT: backends see the SNAT address.
    FullNat,
    /// lbd in DNAT: backends see the client.
    Dnat,
    /// An io forwarder: packets come back unchanged.
    Reflect,
}

/// What to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// Every flow opens once (SYN), then ACK segments round robin.
    Established,
    /// SYN only, each from the next flow: connection setup cost.
    NewFlows,
}

/// The benchmark's addresses and load.
#[derive(Debug, Clone)]
pub struct Plan {
    /// What the device does.
    pub dut: Dut,
    /// Traffic kind.
    pub traffic: Traffic,
    /// TCP or UDP.
    pub proto: Proto,
    /// The frontends (VIP, port) of the measured service(s): flow `f` goes
    /// to `vips[f % vips.len()]`. All share `backends`.
    pub vips: Vec<(Ipv4Addr, u16)>,
    /// The backends (address, port).
    pub backends: Vec<(Ipv4Addr, u16)>,
    /// The SNAT addresses (full-NAT): `snat_count` consecutive ones from
    /// this one.
    pub snat: Ipv4Addr,
    /// How many SNAT addresses lbd has (1M full-NAT flows need 16 or more:
    /// one address gives 64,512 ports).
    pub snat_count: u32,
    /// First client address; clients are consecutive addresses.
    pub client_base: Ipv4Addr,
    /// Number of client addresses.
    pub clients: u32,
    /// Source ports per client, from `PORT_BASE`.
    pub ports: u32,
    /// Frame length without FCS.
    pub frame_len: usize,
    /// Answer forward packets as the backends would.
    pub reply: bool,
    /// Established traffic: this share of the packets (0..=1) are SYNs of
    /// new connections from clients beyond the established ones, never
    /// answered (a SYN flood mixed into established traffic).
    pub new_share: f64,
}

/// Tuples for new connections mixed into established traffic, numbered
/// from `Plan::flows()` on (clients after the established ones).
pub const NEW_SPACE: u32 = 1 << 24;

/// First client source port.
pub const PORT_BASE: u16 = 1024;

impl Plan {
    /// Number of flows.
    pub fn flows(&self) -> u64 {
        u64::from(self.clients) * u64::from(self.ports)
    }

    fn client(&self, flow: u32) -> (Ipv4Addr, u16) {
        let c = flow / self.ports;
        let p = flow % self.ports;
        (
            Ipv4Addr::from(u32::from(self.client_base) + c),
            PORT_BASE + p as u16,
        )
    }

    /// Flows and the tuples of mixed-in new connections.
    pub fn tuples(&self) -> u64 {
        let mixed = if self.new_share > 0.0 {
            u64::from(NEW_SPACE)
        } else {
            0
        };
        self.flows() + mixed
    }

    fn flow_of(&self, client: (Ipv4Addr, u16)) -> Option<u32> {
        let c = u32::from(client.0).checked_sub(u32::from(self.client_base))?;
        let p = u32::from(client.1.checked_sub(PORT_BASE)?);
        let f = u64::from(c) * u64::from(self.ports) + u64::from(p);
        (p < self.ports && f < self.tuples()).then_some(f as u32)
    }

    fn is_client(&self, a: Ipv4Addr) -> bool {
        u32::from(a)
            .checked_sub(u32::from(self.client_base))
            .is_some_and(|c| u64::from(c) * u64::from(self.ports) < self.tuples())
    }

    fn vip_of(&self, flow: u32) -> (Ipv4Addr, u16) {
        self.vips[flow as usize % self.vips.len()]
    }

    fn is_snat(&self, a: Ipv4Addr) -> bool {
        u32::from(a)
            .checked_sub(u32::from(self.snat))
            .is_some_and(|i| i < self.snat_count)
    }

    fn backend_index(&self, ep: (Ipv4Addr, u16)) -> Option<usize> {
        self.backends.iter().position(|&b| b == ep)
    }
}

/// The port and pool the loop runs on.
#[derive(Debug)]
pub struct Io {
    /// Rx queue 0.
    pub rx: RxQueue,
    /// Tx queue 0.
    pub tx: TxQueue,
    /// Mbufs for what it sends.
    pub pool: std::sync::Arc<Mempool>,
}

/// Phases and their lengths.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Before measuring: opening connections, warming caches.
    pub warmup: Duration,
    /// Measured.
    pub duration: Duration,
    /// After the load stops: late packets still counted, until all are in
    /// or this long.
    pub drain: Duration,
}

#[derive(Debug)]
struct State<'a> {
    plan: &'a Plan,
    dut_mac: [u8; 6],
    /// Per flow: backend index + 1 in the low bits (0: no packet of the
    /// flow reached a backend yet), `ANSWERED` once a reply of the flow
    /// reached its client.
    backend_of: Vec<u8>,
    /// Full-NAT, established flows: `snat_owner[snat index * 65536 +
    /// port]` is the flow (+ 1) that SNAT endpoint was seen on, to catch
    /// one endpoint given to two live flows toward the same backend.
    snat_owner: Vec<u32>,
    /// Full-NAT, established flows: per flow, the index into `snat_owner`
    /// of the SNAT endpoint its packets carry (+ 1; 0: none seen yet), to
    /// catch a balancer that opens a new connection (a new SNAT port) for
    /// packets of a live one.
    snat_of: Vec<u32>,
    c: Counters,
    lat: Histogram,
    tx: Burst,
    /// What the frames in `tx` are, for counting what the link refused.
    tx_kind: Kind,
    /// Backend replies to send after the current rx burst.
    reply: Vec<Spec>,
    tsc: fn() -> u64,
}

/// What a transmitted frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A client packet toward the VIP.
    Forward,
    /// A backend's answer (or an ARP frame).
    Reply,
}

/// Opens established TCP flows before the measured period: a SYN for
/// every flow at `OPEN_RATE`, then, in further passes, again for each flow
/// whose SYN-ACK has not come back to its client (a SYN lost on a full
/// ring, or dropped while lbd was still resolving a neighbor). Under
/// full-NAT a flow without a conntrack entry would lose every packet, which
/// would be counted as the balancer's loss; once every flow has been
/// answered, every neighbor on both sides is resolved too.
#[derive(Debug)]
struct Opener {
    flows: u32,
    /// Next flow of the first pass.
    next: u32,
    /// Flows to open again in this pass, and how far the pass is.
    retry: Vec<u32>,
    retry_at: usize,
    /// When the last pass ended (replies are awaited for `OPEN_SETTLE`).
    pass_end: Option<Instant>,
    /// SYNs sent so far and when opening started (pacing).
    sent: u64,
    started: Option<Instant>,
    done: bool,
}

/// Flag in `State::backend_of`: a reply of the flow reached the client.
const ANSWERED: u8 = 0x80;

/// SYNs a second while opening flows.
const OPEN_RATE: f64 = 1e6;
/// How long after a pass to wait for its SYNs to arrive.
const OPEN_SETTLE: Duration = Duration::from_millis(200);

impl Opener {
    fn new(flows: u32) -> Opener {
        Opener {
            flows,
            next: 0,
            retry: Vec::new(),
            retry_at: 0,
            pass_end: None,
            sent: 0,
            started: None,
            done: flows == 0,
        }
    }

    /// How many SYNs may go now; starts a retry pass when the last one has
    /// settled, and ends opening when no flow is missing.
    fn budget(&mut self, now: Instant, backend_of: &[u8], open: u8) -> usize {
        let started = *self.started.get_or_insert(now);
        let in_pass = self.next < self.flows || self.retry_at < self.retry.len();
        if !in_pass {
            let end = *self.pass_end.get_or_insert(now);
            if now.duration_since(end) < OPEN_SETTLE {
                return 0;
            }
            self.retry.clear();
            self.retry_at = 0;
            self.pass_end = None;
            self.retry
                .extend((0..self.flows).filter(|&f| backend_of[f as usize] & open == 0));
            if self.retry.is_empty() {
                self.done = true;
                return 0;
            }
        }
        let allowed = (now.duration_since(started).as_secs_f64() * OPEN_RATE) as u64;
        allowed.saturating_sub(self.sent).min(BURST_MAX as u64) as usize
    }

    fn next_flow(&mut self) -> Option<u32> {
        let f = if self.next < self.flows {
            self.next += 1;
            self.next - 1
        } else {
            let f = *self.retry.get(self.retry_at)?;
            self.retry_at += 1;
            f
        };
        self.sent += 1;
        Some(f)
    }
}

/// The generator's state across trials: which flows are open and on which
/// backend, the device's MAC.
#[derive(Debug)]
pub struct Generator<'a> {
    st: State<'a>,
    rx: Burst,
    opener: Opener,
    next_flow: u32,
    /// Mixed-in new connections: the next one and the share owed.
    next_new: u32,
    new_credit: f64,
}

impl<'a> Generator<'a> {
    /// A generator for `plan`; no flow is open yet.
    pub fn new(plan: &'a Plan) -> Generator<'a> {
        let flows = plan.flows().min(u64::from(u32::MAX)) as u32;
        // Established TCP through lbd opens each flow with a SYN during the
        // first warm-up.
        let open =
            plan.traffic == Traffic::Established && plan.proto == Proto::Tcp && plan.dut != Dut::Reflect;
        Generator {
            st: State {
                plan,
                dut_mac: [0xff; 6],
                backend_of: vec![0; flows as usize],
                snat_owner: if plan.dut == Dut::FullNat {
                    vec![0; plan.snat_count as usize * 65536]
                } else {
                    Vec::new()
                },
                snat_of: if plan.dut == Dut::FullNat {
                    vec![0; flows as usize]
                } else {
                    Vec::new()
                },
                c: Counters::default(),
                lat: Histogram::default(),
                tx: Burst::new(),
                tx_kind: Kind::Reply,
                reply: Vec::with_capacity(BURST_MAX),
                tsc: dpdk::rdtsc,
            },
            rx: Burst::new(),
            opener: Opener::new(if open { flows } else { 0 }),
            next_flow: 0,
            next_new: 0,
            new_credit: 0.0,
        }
    }

    /// One trial: warm-up; a pause until what warm-up sent has come back
    /// (at most `PAUSE_MAX`), so that no packet sent before the measured
    /// period is counted as received in it; measured period; drain (until
    /// everything sent has come back, at most the drain time). Client
    /// packets go at `rate` a second (0: as fast as the link takes them).
    /// Flows opened by an earlier trial stay open. `progress` is called
    /// about once a second with the counters so far (of the measured
    /// period) and the seconds elapsed in it. Returns the measured
    /// counters, the latency histogram and the measured seconds.
    pub fn trial(
        &mut self,
        io: &mut Io,
        rate: f64,
        timing: Timing,
        stop: &AtomicBool,
        mut progress: impl FnMut(&Counters, f64),
    ) -> (Counters, Histogram, f64) {
        let Generator {
            st,
            rx,
            opener,
            next_flow,
            next_new,
            new_credit,
        } = self;
        let plan = st.plan;
        let flows = st.backend_of.len() as u32;
        let start = Instant::now();
        let t_measure = start + timing.warmup;
        // The measured period starts once warm-up is over and every flow is
        // open, and lasts `timing.duration` from then.
        let mut t_end = t_measure + timing.duration;
        let mut measuring = false;
        let mut sent_in_period: u64 = 0;
        let mut period_start = start;
        let mut last_progress = start;
        let mut last_arp = start - Duration::from_secs(1);
        let mut base = Counters::default();
        let mut measured_secs = 0.0;
        let trial_base = st.c.clone();
        let mut pause_start: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if stop.load(Ordering::Relaxed) && !measuring {
                break;
            }
            if !measuring && now >= t_measure && opener.done {
                // Sending stops until nothing sent in this trial is still
                // on its way (forward packets arrive at the emulated
                // backends, replies at the clients), or for PAUSE_MAX at
                // most: warm-up may have lost some (a DUT resolving its
                // neighbors drops what it cannot hold).
                let paused = *pause_start.get_or_insert(now);
                if in_flight(&st.c, &trial_base) == 0 || now >= paused + PAUSE_MAX {
                    measuring = true;
                    base = st.c.clone();
                    st.lat = Histogram::default();
                    period_start = now;
                    t_end = now + timing.duration;
                    last_progress = now;
                    sent_in_period = 0;
                }
            }
            let sending = if measuring {
                now < t_end && !stop.load(Ordering::Relaxed)
            } else {
                pause_start.is_none()
            };
            if measuring && !sending && measured_secs == 0.0 {
                measured_secs = now.duration_since(period_start).as_secs_f64();
            }
            // The drain ends early once everything sent in the measured
            // period has come back.
            if measuring && !sending && (now >= t_end + timing.drain || in_flight(&st.c, &base) == 0) {
                break;
            }
            if !measuring && !opener.done && now >= t_measure + Duration::from_secs(30) {
                eprintln!(
                    "lb-bench: {} flows never reached a backend after 30 s; measuring anyway",
                    opener.retry.len()
                );
                opener.done = true;
            }

            // Receive and answer.
            let n = io.rx.rx_burst(rx);
            if n > 0 {
                for mut m in rx.drain() {
                    handle(st, m.data_mut(), &io.pool);
                }
                let mut replies = std::mem::take(&mut st.reply);
                for spec in replies.drain(..) {
                    if !send(st, io, &spec, Kind::Reply) {
                        break;
                    }
                }
                st.reply = replies;
                flush(st, io);
            }

            // Like a real client: find the VIP's MAC before sending to it.
            if plan.dut != Dut::Reflect && st.dut_mac == [0xff; 6] {
                if now.duration_since(last_arp) >= Duration::from_millis(100) {
                    last_arp = now;
                    arp_request(st, &io.pool, plan.client(0).0, plan.vips[0].0);
                    flush(st, io);
                }
                continue;
            }

            // Send the next client packets.
            if sending {
                let budget = if rate > 0.0 {
                    let elapsed = now.duration_since(period_start).as_secs_f64();
                    paced(rate, elapsed, &mut sent_in_period, measuring)
                } else {
                    BURST_MAX - st.tx.len()
                };
                let opening = !opener.done;
                let budget = if opening {
                    // Without replies, a flow is open once its SYN arrived.
                    opener.budget(now, &st.backend_of, if plan.reply { ANSWERED } else { !ANSWERED })
                } else {
                    budget
                };
                for _ in 0..budget {
                    let (flow, flags) = if opening {
                        match opener.next_flow() {
                            Some(f) => (f, SYN),
                            None => break,
                        }
                    } else if plan.new_share > 0.0 && {
                        *new_credit += plan.new_share;
                        *new_credit >= 1.0
                    } {
                        *new_credit -= 1.0;
                        let f = flows + *next_new;
                        *next_new = (*next_new + 1) % NEW_SPACE;
                        (f, SYN)
                    } else {
                        let f = *next_flow;
                        *next_flow = if *next_flow + 1 >= flows {
                            0
                        } else {
                            *next_flow + 1
                        };
                        (
                            f,
                            if plan.traffic == Traffic::NewFlows {
                                SYN
                            } else {
                                ACK
                            },
                        )
                    };
                    let spec = Spec {
                        src_mac: BENCH_MAC,
                        dst_mac: st.dut_mac,
                        src: plan.client(flow),
                        dst: plan.vip_of(flow),
                        proto: plan.proto,
                        flags,
                        words: ((st.tsc)() as u32, flow),
                        len: plan.frame_len,
                    };
                    if !send(st, io, &spec, Kind::Forward) {
                        break;
                    }
                    sent_in_period += 1;
                }
                flush(st, io);
            }

            if measuring && now.duration_since(last_progress) >= Duration::from_secs(1) {
                last_progress = now;
                progress(
                    &diff(&st.c, &base),
                    now.duration_since(period_start).as_secs_f64(),
                );
            }
        }
        if measured_secs == 0.0 {
            measured_secs = Instant::now().duration_since(period_start).as_secs_f64();
        }
        (diff(&st.c, &base), std::mem::take(&mut st.lat), measured_secs)
    }
}

/// The most client packets warm-up sends at once to catch up with its
/// pace ([`paced`]).
const WARMUP_CATCH_UP: u64 = 4 * BURST_MAX as u64;

/// How many client packets may go now at `rate` a second, `elapsed`
/// seconds into the period, `sent` having gone in it: what the pace
/// allows and has not sent, at most a burst. In warm-up (`!measuring`) a
/// debt above [`WARMUP_CATCH_UP`] is forgiven (`sent` moves up to within
/// it): warm-up sends nothing while it resolves the VIP's MAC and opens
/// the flows, and paying that back at once (a second of the pace, sent
/// as fast as the link took it) overflowed the generator's own receive
/// ring: lbd counted 100-150 k `tx_full` before the churn runs' measured
/// periods. The measured period keeps its debt, so that what it offers
/// over the period is the rate asked for.
fn paced(rate: f64, elapsed: f64, sent: &mut u64, measuring: bool) -> usize {
    let allowed = (elapsed * rate) as u64;
    if !measuring && allowed > *sent + WARMUP_CATCH_UP {
        *sent = allowed - WARMUP_CATCH_UP;
    }
    allowed.saturating_sub(*sent).min(BURST_MAX as u64) as usize
}

/// The longest pause before a measured period (see `trial`).
const PAUSE_MAX: Duration = Duration::from_millis(100);

/// Packets sent since `b` and not (yet) received: forward packets arrive
/// at the emulated backends, replies at the clients.
fn in_flight(c: &Counters, b: &Counters) -> u64 {
    let d = diff(c, b);
    (d.tx_forward + d.tx_reply).saturating_sub(d.rx_forward + d.rx_reply)
}

fn diff(c: &Counters, b: &Counters) -> Counters {
    Counters {
        tx_forward: c.tx_forward - b.tx_forward,
        tx_reply: c.tx_reply - b.tx_reply,
        tx_full: c.tx_full - b.tx_full,
        no_mbuf: c.no_mbuf - b.no_mbuf,
        rx_forward: c.rx_forward - b.rx_forward,
        rx_reply: c.rx_reply - b.rx_reply,
        arp_replies: c.arp_replies - b.arp_replies,
        rx_other: c.rx_other - b.rx_other,
        bad_checksum: c.bad_checksum - b.bad_checksum,
        wrong_backend: c.wrong_backend - b.wrong_backend,
        backend_changed: c.backend_changed - b.backend_changed,
        wrong_source: c.wrong_source - b.wrong_source,
        snat_reused: c.snat_reused - b.snat_reused,
        snat_changed: c.snat_changed - b.snat_changed,
        wrong_reply: c.wrong_reply - b.wrong_reply,
    }
}

/// Builds `spec` into a new mbuf in the tx burst and counts it as sent
/// (`flush` takes back what the link refuses); false if no mbuf.
fn send(st: &mut State<'_>, io: &mut Io, spec: &Spec, kind: Kind) -> bool {
    if st.tx.is_full() || st.tx_kind != kind {
        flush(st, io);
    }
    st.tx_kind = kind;
    let Some(mut m) = io.pool.alloc() else {
        st.c.no_mbuf += 1;
        return false;
    };
    let Some(buf) = m.append(spec.len.max(64) as u16) else {
        st.c.no_mbuf += 1;
        return false;
    };
    let len = frame::write(buf, spec);
    if !m.set_len(len) {
        return false;
    }
    // Room: flushed above when full.
    let _ = st.tx.push(m);
    match kind {
        Kind::Forward => st.c.tx_forward += 1,
        Kind::Reply => st.c.tx_reply += 1,
    }
    true
}

/// Transmits the burst; what the link does not take is freed and no
/// longer counts as sent.
fn flush(st: &mut State<'_>, io: &mut Io) {
    if st.tx.is_empty() {
        return;
    }
    io.tx.tx_burst(&mut st.tx);
    let refused = st.tx.len() as u64;
    st.c.tx_full += refused;
    match st.tx_kind {
        Kind::Forward => st.c.tx_forward -= refused,
        Kind::Reply => st.c.tx_reply = st.c.tx_reply.saturating_sub(refused),
    }
    st.tx.clear();
}

/// One received frame.
fn handle(st: &mut State<'_>, f: &mut [u8], pool: &Mempool) {
    if f.len() >= 42 && f[12..14] == [0x08, 0x06] {
        arp(st, f, pool);
        return;
    }
    let s = match frame::read(f) {
        Ok(s) => s,
        Err(Bad::Checksum) => {
            st.c.bad_checksum += 1;
            return;
        }
        Err(Bad::Other) => {
            st.c.rx_other += 1;
            return;
        }
    };
    let plan = st.plan;
    let forward = match plan.dut {
        Dut::Reflect => s.dst == plan.vip_of(s.words.1),
        _ => plan.backend_index(s.dst).is_some(),
    };
    if forward {
        forward_arrival(st, &s);
    } else {
        reply_arrival(st, &s);
    }
}

fn forward_arrival(st: &mut State<'_>, s: &Seen) {
    let plan = st.plan;
    st.c.rx_forward += 1;
    let flow = s.words.1;
    let (backend, client) = match plan.dut {
        Dut::Reflect => (plan.backends[flow as usize % plan.backends.len()], s.src),
        _ => {
            let Some(b) = plan.backend_index(s.dst) else {
                st.c.wrong_backend += 1;
                return;
            };
            if let Some(slot) = st.backend_of.get_mut(flow as usize) {
                let tag = b as u8 + 1;
                if *slot & !ANSWERED == 0 {
                    *slot |= tag;
                } else if *slot & !ANSWERED != tag {
                    st.c.backend_changed += 1;
                }
            }
            let want_src = match plan.dut {
                Dut::FullNat => plan.is_snat(s.src.0),
                _ => plan.flow_of(s.src) == Some(flow),
            };
            if !want_src {
                st.c.wrong_source += 1;
            } else if plan.dut == Dut::FullNat && plan.traffic == Traffic::Established {
                snat_reuse(st, s, flow, b);
            }
            (s.dst, s.src)
        }
    };
    // SYN floods (new flows, alone or mixed in) are not answered.
    let flood = plan.traffic == Traffic::NewFlows || flow as usize >= st.backend_of.len();
    if !plan.reply || s.flags & SYN != 0 && flood {
        return;
    }
    // The backend answers whoever sent it (the SNAT endpoint or the client).
    let spec = Spec {
        src_mac: BENCH_MAC,
        dst_mac: st.dut_mac,
        src: backend,
        dst: client,
        proto: plan.proto,
        flags: if s.flags & SYN != 0 { SYN | ACK } else { ACK },
        words: match plan.proto {
            Proto::Tcp => (s.words.1, s.words.0),
            Proto::Udp => s.words,
        },
        len: plan.frame_len,
    };
    st.reply.push(spec);
}

/// Full-NAT keeps established flows open for the whole run, so an SNAT
/// endpoint first seen on one flow and now on another flow to the same
/// backend means the balancer gave a port in use to a second connection.
/// Mixed-in new connections are not tracked: their ports are legitimately
/// reused once evicted.
fn snat_reuse(st: &mut State<'_>, s: &Seen, flow: u32, backend: usize) {
    let Some(tag) = st.backend_of.get(flow as usize).map(|_| flow + 1) else {
        return;
    };
    let i = (u32::from(s.src.0) - u32::from(st.plan.snat)) as usize * 65536 + usize::from(s.src.1);
    if let Some(first) = st.snat_of.get_mut(flow as usize) {
        let at = i as u32 + 1;
        if *first == 0 {
            *first = at;
        } else if *first != at {
            st.c.snat_changed += 1;
        }
    }
    let Some(owner) = st.snat_owner.get_mut(i) else {
        return;
    };
    if *owner == 0 {
        *owner = tag;
    } else if *owner != tag {
        let other = st.backend_of[(*owner - 1) as usize] & !ANSWERED;
        if usize::from(other) == backend + 1 {
            st.c.snat_reused += 1;
        }
    }
}

fn reply_arrival(st: &mut State<'_>, s: &Seen) {
    let plan = st.plan;
    let (stamp, flow) = match plan.proto {
        Proto::Tcp => (s.words.1, s.words.0),
        Proto::Udp => s.words,
    };
    let from_ok = match plan.dut {
        Dut::Reflect => true,
        _ => s.src == plan.vip_of(flow),
    };
    if !from_ok || plan.flow_of(s.dst) != Some(flow) {
        st.c.wrong_reply += 1;
        return;
    }
    st.c.rx_reply += 1;
    if let Some(slot) = st.backend_of.get_mut(flow as usize) {
        *slot |= ANSWERED;
    }
    let now = (st.tsc)() as u32;
    st.lat.record(u64::from(now.wrapping_sub(stamp)));
}

/// Answers ARP requests for client and backend addresses.
fn arp(st: &mut State<'_>, f: &[u8], pool: &Mempool) {
    let op = u16::from_be_bytes([f[20], f[21]]);
    let sender_mac: [u8; 6] = f[22..28].try_into().unwrap_or([0; 6]);
    let sender_ip = Ipv4Addr::new(f[28], f[29], f[30], f[31]);
    let target_ip = Ipv4Addr::new(f[38], f[39], f[40], f[41]);
    // Whoever talks ARP on this link is the device under test.
    st.dut_mac = sender_mac;
    let plan = st.plan;
    let ours = plan.is_client(target_ip) || plan.backends.iter().any(|b| b.0 == target_ip);
    if op != 1 || !ours || sender_ip == target_ip {
        return;
    }
    let Some(mut m) = pool.alloc() else { return };
    let Some(buf) = m.append(60) else { return };
    buf.fill(0);
    buf[0..6].copy_from_slice(&sender_mac);
    buf[6..12].copy_from_slice(&BENCH_MAC);
    buf[12..14].copy_from_slice(&[0x08, 0x06]);
    buf[14..22].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, 2]);
    buf[22..28].copy_from_slice(&BENCH_MAC);
    buf[28..32].copy_from_slice(&target_ip.octets());
    buf[32..38].copy_from_slice(&sender_mac);
    buf[38..42].copy_from_slice(&sender_ip.octets());
    st.c.arp_replies += 1;
    push_arp(st, m);
}

/// Queues an ARP frame with the replies (ARP frames are not counted as
/// traffic; a full burst loses it, and ARP asks again).
fn push_arp(st: &mut State<'_>, m: dpdk::Mbuf) {
    if st.tx.is_empty() {
        st.tx_kind = Kind::Reply;
    }
    if st.tx_kind == Kind::Reply {
        let _ = st.tx.push(m);
    }
}

/// Asks who has `target` (the VIP), from `sender` (a client).
fn arp_request(st: &mut State<'_>, pool: &Mempool, sender: Ipv4Addr, target: Ipv4Addr) {
    let Some(mut m) = pool.alloc() else { return };
    let Some(buf) = m.append(60) else { return };
    buf.fill(0);
    buf[0..6].copy_from_slice(&[0xff; 6]);
    buf[6..12].copy_from_slice(&BENCH_MAC);
    buf[12..14].copy_from_slice(&[0x08, 0x06]);
    buf[14..22].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    buf[22..28].copy_from_slice(&BENCH_MAC);
    buf[28..32].copy_from_slice(&sender.octets());
    buf[38..42].copy_from_slice(&target.octets());
    push_arp(st, m);
}

#[cfg(test)]
#[path = "gen_tests.rs"]
mod tests;
