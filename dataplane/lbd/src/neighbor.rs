//! The neighbor table: next hops resolved with ARP (IPv4) and neighbor
//! solicitation (IPv6), owned by the control thread.
//!
//! Workers never look here: they read next hops from the published
//! [`Snapshot`](lb_dataplane::snapshot::Snapshot), into which the control
//! thread puts [`NeighborTable::resolved`] whenever it changes. A worker
//! whose next hop is unresolved hands the translated frame to the control
//! thread, which holds a few per next hop ([`Timers::hold`]) while it asks.
//!
//! States, as in Linux's neighbor code, simplified:
//! - **incomplete**: no MAC yet. A request goes out at once, then every
//!   [`Timers::retransmit`]; after [`Timers::probes`] unanswered requests
//!   the held frames are dropped (`no_neighbor`) and the entry is removed,
//!   unless it is *wanted* (a gateway or a backend on a connected subnet),
//!   which keeps being asked for every [`Timers::retry_wanted`].
//! - **reachable**: a MAC, confirmed by a reply less than
//!   [`Timers::reachable`] ago.
//! - **probing**: confirmed longer ago; the MAC is still used while
//!   requests go out every `retransmit`; a reply makes it reachable again,
//!   `probes` unanswered requests remove the MAC (incomplete again, or gone
//!   if not wanted), so traffic is never sent to a MAC that stopped
//!   answering for long.
//!
//! Only entries the table created (because something needed that next hop)
//! learn from ARP replies and neighbor advertisements: an unsolicited one
//! cannot plant an entry.
//!
//! A host's own ARP request or neighbor solicitation to lbd names its MAC
//! too ([`Heard::Asked`]; workers pass it on only for a neighbor the
//! snapshot has at another MAC). Like Linux (which marks such an entry
//! STALE), the table takes it as a hint, not a confirmation: a new MAC
//! replaces the old one at once (held frames go out with it) and is probed
//! for confirmation, so a host whose NIC or VM was replaced is reached at
//! its new MAC without waiting for the old one to fail `probes` requests;
//! the same MAC changes nothing.
//!
//! Lock time: a MAC confirmed less than [`Timers::locktime`] ago is not
//! replaced by another from an answer or a request, and one a request set
//! that recently is not replaced by another request. When two hosts answer
//! for one address (a proxy ARP beside the real host), or forged requests
//! name the gateway, the entry does not flap from frame to frame. Linux
//! locks answers the same way (`locktime`) but lets a request replace the
//! MAC at any time; and here an answer to the probe after a request's new
//! MAC is never locked out, so a forged request is undone as soon as the
//! real host answers. Announcements (gratuitous ARP, unsolicited neighbor
//! advertisements: [`Heard::Announced`]) are never locked out either, as
//! in Linux: a failover announces its new MAC once.
//!
//! Generic over the held frame type `P` so it can be tested without DPDK.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Timers and limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timers {
    /// How long a reply keeps an entry reachable.
    pub reachable: Duration,
    /// Time between two requests for the same address.
    pub retransmit: Duration,
    /// Unanswered requests before giving up.
    pub probes: u8,
    /// After giving up on a wanted address, the time before asking again.
    pub retry_wanted: Duration,
    /// Frames held per unresolved next hop.
    pub hold: usize,
    /// Frames held, all entries together: what lbd's mbuf pool sets aside
    /// for them. Without it `max_entries × hold` frames (16,384) could be
    /// held, more than a small pool has, and rx would starve.
    pub max_held: usize,
    /// Entries at most.
    pub max_entries: usize,
    /// How long a MAC just set cannot be replaced by another.
    pub locktime: Duration,
}

impl Default for Timers {
    fn default() -> Timers {
        Timers {
            reachable: Duration::from_secs(30),
            retransmit: Duration::from_secs(1),
            probes: 3,
            retry_wanted: Duration::from_secs(5),
            hold: 4,
            max_held: 1024,
            max_entries: 4096,
            locktime: Duration::from_secs(1),
        }
    }
}

#[derive(Debug)]
struct Entry<P> {
    /// The port the address is reached through.
    port: u16,
    mac: Option<[u8; 6]>,
    /// When a reply last confirmed `mac`.
    confirmed: Option<Instant>,
    /// When `mac` was last set or confirmed: requests do not replace it
    /// within [`Timers::locktime`] of that (answers, of `confirmed`).
    updated: Option<Instant>,
    /// Requests sent since the last confirmation.
    sent: u8,
    /// When the last request went out (None: send one now).
    last_sent: Option<Instant>,
    /// A gateway or connected backend: never removed, only retried.
    wanted: bool,
    /// All probes went unanswered; waiting for `retry_wanted`.
    given_up: bool,
    held: VecDeque<P>,
    /// When the entry was created or last held a frame (or was marked
    /// wanted), in the table's own count of such events: a full table
    /// makes room by removing the entry with the oldest such event that is
    /// neither wanted nor holding frames. A resolved entry's traffic goes
    /// from the workers straight out, so this is no true LRU.
    needed: u64,
}

impl<P> Entry<P> {
    /// Whether `mac` may not replace the entry's MAC yet: it is another,
    /// and the entry's was set at `since`, less than `locktime` before
    /// `now`.
    fn locked(&self, mac: [u8; 6], since: Option<Instant>, now: Instant, locktime: Duration) -> bool {
        self.mac.is_some_and(|m| m != mac)
            && since.is_some_and(|u| now.saturating_duration_since(u) < locktime)
    }
}

/// A request to send: who-has `target` on `port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Port to send on.
    pub port: u16,
    /// The address asked for.
    pub target: IpAddr,
}

/// What a worker heard of a neighbor, for the control thread's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct News {
    /// The neighbor's address.
    pub ip: IpAddr,
    /// The MAC it gave.
    pub mac: [u8; 6],
    /// The port the frame came in on.
    pub port: u16,
    /// How.
    pub heard: Heard,
}

/// How a neighbor's MAC was heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// An ARP reply or neighbor advertisement: [`NeighborTable::learn`].
    Answer,
    /// A gratuitous ARP or an unsolicited neighbor advertisement:
    /// [`NeighborTable::announced`].
    Announced,
    /// Its ARP request or neighbor solicitation to lbd:
    /// [`NeighborTable::hint`].
    Asked,
}

/// What [`NeighborTable::hold`] did with a frame.
#[derive(Debug)]
pub enum Hold<P> {
    /// Kept until the next hop resolves.
    Waiting,
    /// The next hop is already resolved (the snapshot had not caught up):
    /// send the frame now with this MAC.
    Ready(P, [u8; 6]),
    /// No room (hold queue or table full): drop it (`no_neighbor`).
    Full(P),
}

/// See the module doc.
#[derive(Debug)]
pub struct NeighborTable<P> {
    timers: Timers,
    entries: HashMap<IpAddr, Entry<P>>,
    changed: bool,
    /// Frames in every entry's `held`.
    held: usize,
    /// Counts creations and holds, for `Entry::needed`.
    needs: u64,
}

impl<P> NeighborTable<P> {
    /// An empty table.
    pub fn new(timers: Timers) -> NeighborTable<P> {
        NeighborTable {
            timers,
            entries: HashMap::new(),
            changed: false,
            held: 0,
            needs: 0,
        }
    }

    /// The entry of `ip`, created if missing. A full table makes room by
    /// removing the entry traffic needed longest ago among those neither
    /// wanted nor holding frames (a client of a DNAT service on a
    /// connected subnet, say, which answers every probe and so would
    /// otherwise stay for good and keep a new backend or gateway out);
    /// `None` if there is none.
    fn entry(&mut self, ip: IpAddr, port: u16) -> Option<&mut Entry<P>> {
        if !self.entries.contains_key(&ip) && self.entries.len() >= self.timers.max_entries {
            let victim = self
                .entries
                .iter()
                .filter(|(_, e)| !e.wanted && e.held.is_empty())
                .min_by_key(|(_, e)| e.needed)
                .map(|(&ip, _)| ip)?;
            if let Some(gone) = self.entries.remove(&victim) {
                self.changed |= gone.mac.is_some();
            }
        }
        self.needs += 1;
        let needed = self.needs;
        let e = self.entries.entry(ip).or_insert_with(|| Entry {
            port,
            mac: None,
            confirmed: None,
            updated: None,
            sent: 0,
            last_sent: None,
            wanted: false,
            given_up: false,
            held: VecDeque::new(),
            needed,
        });
        e.port = port;
        e.needed = needed;
        Some(e)
    }

    /// Marks `wanted` (address, port), most important first (gateways,
    /// then connected backends), as the addresses to keep resolved; others
    /// lose the mark. At most three quarters of `max_entries` are marked,
    /// so that traffic's next hops keep room; the rest are resolved when
    /// traffic needs them, like any next hop. Returns how many were left
    /// unmarked.
    pub fn set_wanted(&mut self, wanted: &[(IpAddr, u16)]) -> usize {
        let keep = wanted.len().min(self.timers.max_entries * 3 / 4);
        let (wanted, left) = wanted.split_at(keep);
        for e in self.entries.values_mut() {
            e.wanted = false;
        }
        // Those present first, so that making room for a new one never
        // removes one that is still wanted.
        for &(ip, port) in wanted {
            if let Some(e) = self.entries.get_mut(&ip) {
                e.wanted = true;
                e.port = port;
            }
        }
        for &(ip, port) in wanted {
            if let Some(e) = self.entry(ip, port) {
                e.wanted = true;
            }
        }
        left.len()
    }

    /// Holds `frame` until `via` (reached through `port`) resolves.
    pub fn hold(&mut self, via: IpAddr, port: u16, frame: P) -> Hold<P> {
        let limit = self.timers.hold;
        let all_full = self.held >= self.timers.max_held;
        let Some(e) = self.entry(via, port) else {
            return Hold::Full(frame);
        };
        if let Some(mac) = e.mac {
            return Hold::Ready(frame, mac);
        }
        if e.held.len() >= limit || all_full {
            return Hold::Full(frame);
        }
        if e.given_up {
            // Traffic wants it again: ask now rather than at the retry.
            e.given_up = false;
            e.sent = 0;
            e.last_sent = None;
        }
        e.held.push_back(frame);
        self.held += 1;
        Hold::Waiting
    }

    /// An ARP reply or neighbor advertisement that came in on `port`: `ip`
    /// is at `mac`. Returns the frames held for `ip`, to send with `mac`.
    /// Ignored (nothing returned) for addresses the table did not ask for,
    /// news from another port than the one the address is reached by (a
    /// host on another segment claiming it), and a `mac` no station can
    /// have (group bit set, or all zeros: the snapshot refuses those, so
    /// one would stop every later publish), and another MAC than one
    /// confirmed less than [`Timers::locktime`] ago.
    pub fn learn(&mut self, ip: IpAddr, mac: [u8; 6], port: u16, now: Instant) -> Vec<P> {
        self.take_answer(ip, mac, port, now, self.timers.locktime)
    }

    /// A gratuitous ARP or unsolicited neighbor advertisement: as
    /// [`learn`](Self::learn), but never locked out (a failover announces
    /// the new MAC once, in a short burst, and must not wait for the
    /// reachable time to run out).
    pub fn announced(&mut self, ip: IpAddr, mac: [u8; 6], port: u16, now: Instant) -> Vec<P> {
        self.take_answer(ip, mac, port, now, Duration::ZERO)
    }

    fn take_answer(
        &mut self,
        ip: IpAddr,
        mac: [u8; 6],
        port: u16,
        now: Instant,
        locktime: Duration,
    ) -> Vec<P> {
        let Some(e) = self.entries.get_mut(&ip) else {
            return Vec::new();
        };
        // Only an answer locks out answers: the probe that follows a
        // request's new MAC is answered at once, and the answer decides.
        if e.port != port || mac[0] & 1 != 0 || mac == [0; 6] || e.locked(mac, e.confirmed, now, locktime) {
            return Vec::new();
        }
        if e.mac != Some(mac) {
            e.mac = Some(mac);
            self.changed = true;
        }
        e.confirmed = Some(now);
        e.updated = Some(now);
        e.sent = 0;
        e.last_sent = None;
        e.given_up = false;
        self.held -= e.held.len();
        e.held.drain(..).collect()
    }

    /// Feeds `news` to [`learn`](Self::learn) or [`hint`](Self::hint), as
    /// it was heard; returns the frames to send with its MAC.
    pub fn news(&mut self, news: News, now: Instant) -> Vec<P> {
        match news.heard {
            Heard::Answer => self.learn(news.ip, news.mac, news.port, now),
            Heard::Announced => self.announced(news.ip, news.mac, news.port, now),
            Heard::Asked => self.hint(news.ip, news.mac, news.port, now),
        }
    }

    /// `ip` asked lbd something from `mac`, on `port` (an ARP request or a
    /// neighbor solicitation with its link-layer address). For an entry
    /// the table holds, reached by that port: a MAC other than the one
    /// known (or none) is used from now on, the held frames are returned
    /// to send with it, and the entry is probed at the next poll, as one
    /// whose confirmation ran out. The same MAC changes nothing: only an
    /// answer confirms. Ignored like [`learn`](Self::learn)'s news
    /// otherwise, locktime included.
    pub fn hint(&mut self, ip: IpAddr, mac: [u8; 6], port: u16, now: Instant) -> Vec<P> {
        let locktime = self.timers.locktime;
        let Some(e) = self.entries.get_mut(&ip) else {
            return Vec::new();
        };
        if e.port != port
            || mac[0] & 1 != 0
            || mac == [0; 6]
            || e.mac == Some(mac)
            || e.locked(mac, e.updated, now, locktime)
        {
            return Vec::new();
        }
        e.mac = Some(mac);
        self.changed = true;
        e.confirmed = None;
        e.updated = Some(now);
        e.sent = 0;
        e.last_sent = None;
        e.given_up = false;
        self.held -= e.held.len();
        e.held.drain(..).collect()
    }

    /// Advances the timers: pushes the requests to send into `requests` and
    /// the frames given up on into `dropped`.
    pub fn poll(&mut self, now: Instant, requests: &mut Vec<Request>, dropped: &mut Vec<P>) {
        let t = self.timers;
        let mut changed = false;
        let held = &mut self.held;
        self.entries.retain(|&ip, e| {
            if e.confirmed.is_some_and(|c| now.duration_since(c) < t.reachable) {
                return true;
            }
            let since = e.last_sent.map(|l| now.duration_since(l));
            if e.sent >= t.probes {
                if !e.given_up {
                    // The last probe gets its retransmit time to be answered.
                    if since.is_some_and(|s| s < t.retransmit) {
                        return true;
                    }
                    *held -= e.held.len();
                    dropped.extend(e.held.drain(..));
                    if e.mac.take().is_some() {
                        changed = true;
                    }
                    e.confirmed = None;
                    e.given_up = true;
                    if !e.wanted {
                        return false;
                    }
                }
                if since.is_some_and(|s| s < t.retry_wanted) {
                    return true;
                }
                e.sent = 0;
                e.given_up = false;
            } else if since.is_some_and(|s| s < t.retransmit) {
                return true;
            }
            requests.push(Request {
                port: e.port,
                target: ip,
            });
            e.sent += 1;
            e.last_sent = Some(now);
            true
        });
        self.changed |= changed;
    }

    /// `port`'s link came up: every unresolved entry on it is asked for at
    /// the next poll, as if new (requests made while the link was down
    /// went nowhere), instead of at its retransmit or retry time.
    pub fn link_up(&mut self, port: u16) {
        for e in self.entries.values_mut() {
            if e.port == port && e.mac.is_none() {
                e.sent = 0;
                e.last_sent = None;
                e.given_up = false;
            }
        }
    }

    /// True once after any resolved MAC appeared, changed or went away.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// The resolved entries, for the snapshot.
    pub fn resolved(&self) -> Vec<(IpAddr, [u8; 6])> {
        let mut v: Vec<_> = self
            .entries
            .iter()
            .filter_map(|(&ip, e)| Some((ip, e.mac?)))
            .collect();
        v.sort();
        v
    }

    /// Entries (resolved or not).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Frames held, all entries together.
    pub fn held(&self) -> usize {
        debug_assert_eq!(
            self.held,
            self.entries.values().map(|e| e.held.len()).sum::<usize>()
        );
        self.held
    }

    /// Drops every held frame (at shutdown).
    pub fn clear_held(&mut self) -> Vec<P> {
        self.held = 0;
        self.entries.values_mut().flat_map(|e| e.held.drain(..)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];
    const MAC2: [u8; 6] = [2, 0, 0, 0, 0, 10];

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn poll(t: &mut NeighborTable<u32>, now: Instant) -> (Vec<Request>, Vec<u32>) {
        let (mut r, mut d) = (Vec::new(), Vec::new());
        t.poll(now, &mut r, &mut d);
        (r, d)
    }

    #[test]
    fn held_frames_are_released_by_the_reply() {
        let t0 = Instant::now();
        let mut t = NeighborTable::new(Timers::default());
        assert!(matches!(t.hold(ip("10.0.0.5"), 1, 1), Hold::Waiting));
        assert!(matches!(t.hold(ip("10.0.0.5"), 1, 2), Hold::Waiting));
        let (req, drop) = poll(&mut t, t0);
        assert_eq!(
            req,
            vec![Request {
                port: 1,
                target: ip("10.0.0.5")
            }]
        );
        assert!(drop.is_empty());
        // Not due again before the retransmit timer.
        assert!(poll(&mut t, t0 + Duration::from_millis(500)).0.is_empty());
        assert_eq!(t.learn(ip("10.0.0.5"), MAC, 1, t0), vec![1, 2]);
        assert!(t.take_changed());
        assert!(!t.take_changed());
        assert_eq!(t.resolved(), vec![(ip("10.0.0.5"), MAC)]);
        // Resolved: frames go straight out.
        assert!(matches!(t.hold(ip("10.0.0.5"), 1, 3), Hold::Ready(3, MAC)));
    }

    /// A host's own request names a new MAC: used at once and probed; the
    /// same MAC neither changes nor confirms anything; unknown addresses
    /// and other ports are ignored.
    #[test]
    fn a_request_from_a_known_host_moves_it_to_its_new_mac_and_probes_it() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut t = NeighborTable::new(Timers::default());
        let gw = ip("10.0.0.254");
        let hint_at = |t: &mut NeighborTable<u32>, mac, port, at| {
            t.news(
                News {
                    ip: gw,
                    mac,
                    port,
                    heard: Heard::Asked,
                },
                at,
            )
        };
        let hint = |t: &mut NeighborTable<u32>, mac, port| hint_at(t, mac, port, t0 + 2 * s);
        // Unresolved, holding a frame: the request resolves it.
        assert!(matches!(t.hold(gw, 0, 1), Hold::Waiting));
        assert_eq!(poll(&mut t, t0).0.len(), 1);
        assert_eq!(hint_at(&mut t, MAC, 0, t0), vec![1]);
        assert_eq!(t.held(), 0);
        assert!(t.take_changed());
        assert_eq!(t.resolved(), vec![(gw, MAC)]);
        // ... and is probed at once, not at the retransmit time: a hint
        // is not an answer.
        assert_eq!(poll(&mut t, t0 + s / 10).0, vec![Request { port: 0, target: gw }]);
        assert!(t.learn(gw, MAC, 0, t0 + s / 5).is_empty());
        assert!(!t.take_changed());
        // Within a second of that answer, another MAC is not taken
        // (locktime): a forged request cannot move the gateway.
        assert!(hint_at(&mut t, MAC2, 0, t0 + s).is_empty());
        assert!(!t.take_changed());
        assert_eq!(t.resolved(), vec![(gw, MAC)]);
        // Reachable: the same MAC asked again changes nothing and sends
        // no probe.
        assert!(hint(&mut t, MAC, 0).is_empty());
        assert!(!t.take_changed());
        assert!(poll(&mut t, t0 + 2 * s).0.is_empty());
        // Another port's, or a group MAC, is ignored.
        assert!(hint(&mut t, MAC2, 1).is_empty());
        assert!(hint(&mut t, [1, 0, 0x5e, 0, 0, 1], 0).is_empty());
        assert_eq!(t.resolved(), vec![(gw, MAC)]);
        // The host came back with a new NIC: its request moves it there
        // at once, and a probe goes out to confirm it.
        assert!(hint(&mut t, MAC2, 0).is_empty());
        assert!(t.take_changed());
        assert_eq!(t.resolved(), vec![(gw, MAC2)]);
        // Another request within the second does not move it again.
        assert!(hint_at(&mut t, MAC, 0, t0 + 2 * s + s / 2).is_empty());
        assert_eq!(t.resolved(), vec![(gw, MAC2)]);
        assert_eq!(poll(&mut t, t0 + 3 * s).0, vec![Request { port: 0, target: gw }]);
        // Never answered: the probes run out and the MAC goes, as for any
        // unconfirmed entry.
        for i in 1..=3 {
            poll(&mut t, t0 + 3 * s + s * i);
        }
        assert!(t.resolved().is_empty());
        assert_eq!(t.len(), 0, "not wanted: removed");
        // An address the table does not hold is not planted.
        let other = ip("10.0.0.7");
        assert!(t
            .news(
                News {
                    ip: other,
                    mac: MAC,
                    port: 0,
                    heard: Heard::Asked
                },
                t0
            )
            .is_empty());
        assert_eq!(t.len(), 0);
    }

    /// Two hosts answer for one address (a proxy ARP beside the real
    /// host): the first answer's MAC holds for the locktime, whatever the
    /// other says; after it, the latest answer is taken. The first MAC's
    /// own answers keep confirming it meanwhile.
    /// The gateway 10.0.0.254 on port 0, asked for at `t0` with a frame
    /// held: the table, and the news of the gateway at `MAC2`.
    fn asking_for_gateway(t0: Instant) -> (NeighborTable<u32>, impl Fn(Heard) -> News) {
        let mut t = NeighborTable::new(Timers::default());
        let gw = ip("10.0.0.254");
        assert!(matches!(t.hold(gw, 0, 1), Hold::Waiting));
        poll(&mut t, t0);
        let news = move |heard| News {
            ip: gw,
            mac: MAC2,
            port: 0,
            heard,
        };
        (t, news)
    }

    #[test]
    fn a_second_answerer_does_not_flip_a_fresh_mac() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (mut t, _) = asking_for_gateway(t0);
        let gw = ip("10.0.0.254");
        assert_eq!(t.learn(gw, MAC, 0, t0 + ms(1)), vec![1]);
        assert!(t.take_changed());
        assert!(t.learn(gw, MAC2, 0, t0 + ms(2)).is_empty());
        assert!(!t.take_changed());
        assert_eq!(t.resolved(), vec![(gw, MAC)]);
        // The first answerer again: confirmed, and locked from then.
        t.learn(gw, MAC, 0, t0 + ms(900));
        assert!(t.learn(gw, MAC2, 0, t0 + ms(1500)).is_empty());
        assert_eq!(t.resolved(), vec![(gw, MAC)]);
        // A second after the last confirmation, the other answer is taken.
        t.learn(gw, MAC2, 0, t0 + ms(1900));
        assert!(t.take_changed());
        assert_eq!(t.resolved(), vec![(gw, MAC2)]);
    }

    /// A failover's gratuitous ARP is taken at once, even right after the
    /// old MAC was confirmed; a plain answer then would not be.
    #[test]
    fn an_announcement_is_never_locked_out() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (mut t, news) = asking_for_gateway(t0);
        let gw = ip("10.0.0.254");
        t.learn(gw, MAC, 0, t0);
        t.news(news(Heard::Answer), t0 + ms(100));
        assert_eq!(t.resolved(), vec![(gw, MAC)]);
        t.news(news(Heard::Announced), t0 + ms(200));
        assert_eq!(t.resolved(), vec![(gw, MAC2)]);
        // Not from another port, and not for an address never asked for.
        let mut other = news(Heard::Announced);
        other.port = 1;
        other.mac = MAC;
        t.news(other, t0 + ms(300));
        other.port = 0;
        other.ip = ip("10.0.0.9");
        t.news(other, t0 + ms(300));
        assert_eq!(t.resolved(), vec![(gw, MAC2)]);
    }

    /// A forged request moves a gateway to the forger's MAC, but the probe
    /// that follows is answered by the gateway, at once, and that answer
    /// is not locked out.
    #[test]
    fn the_answer_to_the_probe_after_a_request_decides() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (mut t, news) = asking_for_gateway(t0);
        let gw = ip("10.0.0.254");
        t.learn(gw, MAC, 0, t0);
        t.news(news(Heard::Asked), t0 + ms(5000));
        assert_eq!(t.resolved(), vec![(gw, MAC2)]);
        assert_eq!(
            poll(&mut t, t0 + ms(5001)).0,
            vec![Request { port: 0, target: gw }]
        );
        t.learn(gw, MAC, 0, t0 + ms(5002));
        assert_eq!(t.resolved(), vec![(gw, MAC)]);
    }

    #[test]
    fn ipv4_and_ipv6_next_hops_live_side_by_side() {
        let t0 = Instant::now();
        let mut t = NeighborTable::new(Timers::default());
        t.set_wanted(&[(ip("fd00:2::1"), 1)]);
        assert!(matches!(t.hold(ip("fd00:1::5"), 0, 1), Hold::Waiting));
        assert!(matches!(t.hold(ip("10.0.0.5"), 0, 2), Hold::Waiting));
        let (mut req, _) = poll(&mut t, t0);
        req.sort_by_key(|r| r.target);
        assert_eq!(
            req.iter().map(|r| (r.port, r.target)).collect::<Vec<_>>(),
            vec![(0, ip("10.0.0.5")), (0, ip("fd00:1::5")), (1, ip("fd00:2::1"))]
        );
        assert_eq!(t.learn(ip("fd00:1::5"), MAC, 0, t0), vec![1]);
        assert_eq!(t.learn(ip("fd00:2::1"), MAC2, 1, t0), Vec::<u32>::new());
        let mut r = t.resolved();
        r.sort();
        assert_eq!(r, vec![(ip("fd00:1::5"), MAC), (ip("fd00:2::1"), MAC2)]);
        assert_eq!(t.held(), 1);
    }

    /// A table full of resolved entries that traffic once needed (clients
    /// that answer every probe) makes room for a new gateway or backend,
    /// and for new traffic, by removing the one needed longest ago; never a
    /// wanted one or one holding frames.
    #[test]
    fn a_full_table_makes_room_by_removing_the_least_recently_needed() {
        let t0 = Instant::now();
        let mut t = NeighborTable::new(Timers {
            max_entries: 3,
            ..Timers::default()
        });
        t.set_wanted(&[(ip("10.0.0.254"), 0)]);
        for (i, a) in ["10.0.0.1", "10.0.0.2"].into_iter().enumerate() {
            assert!(matches!(t.hold(ip(a), 0, i), Hold::Waiting));
            assert_eq!(t.learn(ip(a), MAC, 0, t0), vec![i]);
        }
        assert!(t.take_changed());
        // 10.0.0.1 needed again (the snapshot had not caught up).
        assert!(matches!(t.hold(ip("10.0.0.1"), 0, 7), Hold::Ready(7, MAC)));
        // A new backend: room is made by removing 10.0.0.2, not the
        // gateway.
        t.set_wanted(&[(ip("10.0.0.254"), 0), (ip("10.0.0.11"), 0)]);
        assert_eq!(t.len(), 3);
        assert!(t.take_changed(), "a resolved entry left the snapshot");
        assert_eq!(t.resolved(), vec![(ip("10.0.0.1"), MAC)]);
        // A new client: 10.0.0.1 goes; then none is left to remove.
        assert!(matches!(t.hold(ip("10.0.0.3"), 0, 8), Hold::Waiting));
        assert!(t.resolved().is_empty());
        assert!(matches!(t.hold(ip("10.0.0.4"), 0, 9), Hold::Full(9)));
    }

    /// More wanted addresses than three quarters of the table: the first
    /// (the gateways) are kept resolved, the rest left to traffic and
    /// counted, and traffic still finds room.
    #[test]
    fn wanted_addresses_take_at_most_three_quarters_of_the_table() {
        let mut t = NeighborTable::new(Timers {
            max_entries: 8,
            ..Timers::default()
        });
        let wanted: Vec<(IpAddr, u16)> = std::iter::once((ip("10.0.255.254"), 0))
            .chain((1..=9).map(|i| (ip(&format!("10.0.0.{i}")), 0)))
            .collect();
        assert_eq!(t.set_wanted(&wanted), 4);
        assert_eq!(t.len(), 6);
        let (mut requests, mut dropped) = (Vec::new(), Vec::<usize>::new());
        t.poll(Instant::now(), &mut requests, &mut dropped);
        let asked: Vec<IpAddr> = requests.iter().map(|r| r.target).collect();
        assert!(asked.contains(&ip("10.0.255.254")), "{asked:?}");
        assert!(!asked.contains(&ip("10.0.0.6")), "{asked:?}");
        // Two next hops of traffic fit, beside them.
        for (i, a) in ["10.0.0.8", "192.0.2.1"].into_iter().enumerate() {
            assert!(matches!(t.hold(ip(a), 0, i), Hold::Waiting));
        }
        // Fewer wanted: none left over.
        assert_eq!(t.set_wanted(&wanted[..3]), 0);
    }

    #[test]
    fn hold_queue_and_table_are_bounded() {
        let timers = Timers {
            hold: 2,
            max_entries: 2,
            ..Timers::default()
        };
        let mut t = NeighborTable::new(timers);
        assert!(matches!(t.hold(ip("10.0.0.1"), 0, 1), Hold::Waiting));
        assert!(matches!(t.hold(ip("10.0.0.1"), 0, 2), Hold::Waiting));
        assert!(matches!(t.hold(ip("10.0.0.1"), 0, 3), Hold::Full(3)));
        assert!(matches!(t.hold(ip("10.0.0.2"), 0, 4), Hold::Waiting));
        assert!(matches!(t.hold(ip("10.0.0.3"), 0, 5), Hold::Full(5)));
        assert_eq!(t.held(), 3);
        assert_eq!(t.clear_held().len(), 3);
        assert_eq!(t.held(), 0);
        // And all entries together hold at most `max_held`.
        let mut t = NeighborTable::new(Timers {
            hold: 2,
            max_held: 3,
            ..Timers::default()
        });
        for (i, a) in ["10.0.0.1", "10.0.0.1", "10.0.0.2"].into_iter().enumerate() {
            assert!(matches!(t.hold(ip(a), 0, i), Hold::Waiting));
        }
        assert!(matches!(t.hold(ip("10.0.0.2"), 0, 9), Hold::Full(9)));
        assert!(matches!(t.hold(ip("10.0.0.3"), 0, 9), Hold::Full(9)));
        assert_eq!(
            t.learn(ip("10.0.0.1"), [2, 0, 0, 0, 0, 1], 0, Instant::now())
                .len(),
            2
        );
        assert_eq!(t.held(), 1);
        assert!(matches!(t.hold(ip("10.0.0.3"), 0, 4), Hold::Waiting));
        assert_eq!(t.held(), 2);
    }

    #[test]
    fn unanswered_addresses_are_given_up_and_wanted_ones_retried() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut t = NeighborTable::new(Timers::default());
        t.set_wanted(&[(ip("10.0.0.254"), 0)]);
        assert!(matches!(t.hold(ip("10.0.0.7"), 0, 7), Hold::Waiting));
        for i in 0..3 {
            let (req, drop) = poll(&mut t, t0 + s * i);
            assert_eq!(req.len(), 2, "round {i}: {req:?}");
            assert!(drop.is_empty());
        }
        // Third request unanswered: the frame is dropped, the entry gone;
        // the gateway stays and waits for retry_wanted.
        let (req, drop) = poll(&mut t, t0 + s * 3);
        assert!(req.is_empty());
        assert_eq!(drop, vec![7]);
        assert_eq!(t.len(), 1);
        let (req, _) = poll(&mut t, t0 + s * 2 + Duration::from_secs(5));
        assert_eq!(req.len(), 1);
        assert_eq!(req[0].target, ip("10.0.0.254"));
        // Unsolicited replies plant nothing.
        assert!(t.learn(ip("10.0.0.99"), MAC, 0, t0).is_empty());
        assert!(t.resolved().is_empty());
    }

    /// News of an address from another port than the one it is reached by,
    /// or with a MAC no station has, changes nothing.
    #[test]
    fn news_from_the_wrong_port_or_with_a_group_or_zero_mac_is_ignored() {
        let t0 = Instant::now();
        let mut t = NeighborTable::new(Timers::default());
        t.set_wanted(&[(ip("10.0.0.254"), 0)]);
        assert!(matches!(t.hold(ip("10.0.0.254"), 0, 1), Hold::Waiting));
        poll(&mut t, t0);
        assert!(t.learn(ip("10.0.0.254"), MAC, 1, t0).is_empty());
        assert!(t.learn(ip("10.0.0.254"), [0; 6], 0, t0).is_empty());
        assert!(t
            .learn(ip("10.0.0.254"), [0x01, 0, 0x5e, 0, 0, 1], 0, t0)
            .is_empty());
        assert!(t.resolved().is_empty());
        assert!(!t.take_changed());
        assert_eq!(t.learn(ip("10.0.0.254"), MAC, 0, t0), vec![1]);
        // Resolved, it is not moved by another port's claim either.
        assert!(t.learn(ip("10.0.0.254"), MAC2, 1, t0).is_empty());
        assert_eq!(t.resolved(), vec![(ip("10.0.0.254"), MAC)]);
    }

    #[test]
    fn a_link_coming_up_asks_again_at_once() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut t = NeighborTable::new(Timers::default());
        t.set_wanted(&[(ip("10.0.0.254"), 0), (ip("10.1.0.254"), 1)]);
        // Three requests each while the links were down, all lost: both
        // gateways given up, waiting for retry_wanted.
        for i in 0..4 {
            poll(&mut t, t0 + s * i);
        }
        let at = t0 + s * 4;
        assert!(poll(&mut t, at).0.is_empty());
        t.link_up(0);
        let (req, _) = poll(&mut t, at);
        assert_eq!(
            req,
            vec![Request {
                port: 0,
                target: ip("10.0.0.254")
            }]
        );
        // Then its retransmit timer runs as for a new entry.
        assert!(poll(&mut t, at + s / 2).0.is_empty());
        assert_eq!(poll(&mut t, at + s).0.len(), 1);
        // A resolved entry is left alone.
        t.learn(ip("10.0.0.254"), MAC, 0, at + s);
        t.link_up(0);
        assert!(poll(&mut t, at + s).0.is_empty());
    }

    #[test]
    fn stale_entries_are_probed_and_removed_when_silent() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut t = NeighborTable::<u32>::new(Timers::default());
        t.set_wanted(&[(ip("10.0.0.254"), 0)]);
        poll(&mut t, t0);
        t.learn(ip("10.0.0.254"), MAC, 0, t0);
        assert!(t.take_changed());
        // Reachable: no requests.
        assert!(poll(&mut t, t0 + s * 29).0.is_empty());
        // Stale: probed while the MAC stays in use.
        assert_eq!(poll(&mut t, t0 + s * 30).0.len(), 1);
        assert_eq!(t.resolved().len(), 1);
        // A new MAC in the reply replaces the old one.
        t.learn(ip("10.0.0.254"), MAC2, 0, t0 + s * 31);
        assert!(t.take_changed());
        assert_eq!(t.resolved(), vec![(ip("10.0.0.254"), MAC2)]);
        // Silent after that: three probes, then the MAC is withdrawn.
        let base = t0 + s * 61;
        for i in 0..3 {
            assert_eq!(poll(&mut t, base + s * i).0.len(), 1);
        }
        assert!(!t.take_changed());
        poll(&mut t, base + s * 3);
        assert!(t.take_changed());
        assert!(t.resolved().is_empty());
        assert_eq!(t.len(), 1, "a wanted entry stays, unresolved");
    }
}
