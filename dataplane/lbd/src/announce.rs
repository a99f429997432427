//! When to announce lbd's own addresses: the schedule of gratuitous ARPs
//! and unsolicited neighbor advertisements, kept by the control thread.
//!
//! One announcement can be lost (a switch port still coming up, a busy
//! segment), and a neighbor that missed it keeps sending an address that
//! moved to lbd to its old owner until its own cache entry runs out. So each
//! address is announced as often as its family's standard asks, spaced as
//! it asks:
//! - IPv4: [`ANNOUNCE_NUM_V4`] gratuitous ARPs [`ANNOUNCE_INTERVAL_V4`] apart
//!   (RFC 5227 §2.3, ANNOUNCE_NUM and ANNOUNCE_INTERVAL);
//! - IPv6: [`ANNOUNCE_NUM_V6`] unsolicited neighbor advertisements
//!   [`ANNOUNCE_INTERVAL_V6`] apart (RFC 4861 §7.2.6,
//!   MAX_NEIGHBOR_ADVERTISEMENT, spaced by the default RetransTimer).
//!
//! The schedule starts when an address is first owned on a port whose link
//! is up, and starts again when the link comes back up or when the address
//! goes and comes back (a VIP that moved to a peer and back). A send that
//! failed (no mbuf, ring full) is not counted: the address stays due.
//!
//! Free of DPDK, so it is tested on its own.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Gratuitous ARPs per IPv4 address (RFC 5227 ANNOUNCE_NUM).
pub const ANNOUNCE_NUM_V4: u8 = 2;
/// Time between them (RFC 5227 ANNOUNCE_INTERVAL).
pub const ANNOUNCE_INTERVAL_V4: Duration = Duration::from_secs(2);
/// Unsolicited neighbor advertisements per IPv6 address (RFC 4861
/// MAX_NEIGHBOR_ADVERTISEMENT).
pub const ANNOUNCE_NUM_V6: u8 = 3;
/// Time between them (RFC 4861 RETRANS_TIMER).
pub const ANNOUNCE_INTERVAL_V6: Duration = Duration::from_secs(1);

/// How many announcements an address gets, and how far apart.
fn plan(ip: IpAddr) -> (u8, Duration) {
    match ip {
        IpAddr::V4(_) => (ANNOUNCE_NUM_V4, ANNOUNCE_INTERVAL_V4),
        IpAddr::V6(_) => (ANNOUNCE_NUM_V6, ANNOUNCE_INTERVAL_V6),
    }
}

/// Where each owned (port, address) is in its schedule.
#[derive(Debug, Default)]
pub struct Announcements {
    /// Announcements sent since the schedule (re)started, and when the
    /// last went out. Absent: none sent yet.
    sent: HashMap<(u16, IpAddr), (u8, Instant)>,
    /// The earliest time an announcement is due (None: none is).
    next: Option<Instant>,
    /// What the last [`due`](Self::due) handed out and was not reported
    /// [`sent`](Self::sent): due again at once.
    unsent: Vec<(u16, IpAddr)>,
    /// The last [`due`](Self::due) had more due than it had room for:
    /// the rest are due at once.
    cut: bool,
}

impl Announcements {
    /// Whether [`due`](Self::due) may have something at `now`.
    pub fn is_due(&self, now: Instant) -> bool {
        self.next.is_some_and(|t| t <= now)
    }

    /// The (port, address) pairs to announce at `now`, among `owned`, on
    /// ports whose link is up: those not yet announced, or announced fewer
    /// times than their family's count and long enough ago. Pairs no
    /// longer owned are forgotten, so they start over if they come back.
    /// At most `room` are handed out (in port order); the others stay due
    /// and are handed out at the next call. Call [`sent`](Self::sent) for
    /// each one that went out.
    pub fn due(
        &mut self,
        owned: &HashSet<(u16, IpAddr)>,
        link_up: impl Fn(u16) -> bool,
        now: Instant,
        room: usize,
    ) -> Vec<(u16, IpAddr)> {
        self.sent.retain(|k, _| owned.contains(k));
        let mut due = Vec::new();
        for &(port, ip) in owned {
            if !link_up(port) {
                continue;
            }
            let (num, interval) = plan(ip);
            match self.sent.get(&(port, ip)) {
                Some(&(n, _)) if n >= num => {}
                Some(&(_, last)) if now.duration_since(last) < interval => {}
                _ => due.push((port, ip)),
            }
        }
        due.sort_unstable();
        self.cut = due.len() > room;
        due.truncate(room);
        // Until told what went out, the due ones stay due: a failed send
        // is retried at the next step.
        self.unsent.clone_from(&due);
        self.next = if due.is_empty() && !self.cut {
            self.next_due()
        } else {
            Some(now)
        };
        due
    }

    /// `(port, ip)`'s announcement went out at `now`.
    pub fn sent(&mut self, port: u16, ip: IpAddr, now: Instant) {
        let e = self.sent.entry((port, ip)).or_insert((0, now));
        *e = (e.0.saturating_add(1), now);
        self.unsent.retain(|&k| k != (port, ip));
        // One whose send failed, or that found no room, is due at once,
        // whatever the others.
        self.next = if self.unsent.is_empty() && !self.cut {
            self.next_due()
        } else {
            Some(now)
        };
    }

    /// `port`'s link went down: its addresses start over when it comes up.
    pub fn link_down(&mut self, port: u16) {
        self.sent.retain(|&(p, _), _| p != port);
        self.unsent.retain(|&(p, _)| p != port);
    }

    /// The earliest time a pair sent before, with announcements left, is
    /// due again.
    fn next_due(&self) -> Option<Instant> {
        self.sent
            .iter()
            .filter_map(|(&(_, ip), &(n, last))| {
                let (num, interval) = plan(ip);
                (n < num).then(|| last + interval)
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(pairs: &[(u16, &str)]) -> HashSet<(u16, IpAddr)> {
        pairs.iter().map(|&(p, a)| (p, a.parse().unwrap())).collect()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Sends everything due, as the control thread does when every send
    /// succeeds.
    fn step(a: &mut Announcements, o: &HashSet<(u16, IpAddr)>, now: Instant) -> Vec<(u16, IpAddr)> {
        let due = a.due(o, |_| true, now, usize::MAX);
        for &(p, ip) in &due {
            a.sent(p, ip, now);
        }
        due
    }

    #[test]
    fn each_family_is_announced_as_often_and_as_far_apart_as_its_rfc_asks() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut a = Announcements::default();
        let o = owned(&[(0, "10.0.0.1"), (0, "fd00::1")]);
        assert_eq!(
            step(&mut a, &o, t0),
            vec![(0, ip("10.0.0.1")), (0, ip("fd00::1"))]
        );
        assert!(!a.is_due(t0 + s / 2));
        assert!(step(&mut a, &o, t0 + s / 2).is_empty());
        // IPv6 every second, IPv4 every two.
        assert!(a.is_due(t0 + s));
        assert_eq!(step(&mut a, &o, t0 + s), vec![(0, ip("fd00::1"))]);
        assert_eq!(
            step(&mut a, &o, t0 + 2 * s),
            vec![(0, ip("10.0.0.1")), (0, ip("fd00::1"))]
        );
        // Done: IPv4 twice, IPv6 three times.
        assert!(!a.is_due(t0 + 100 * s));
        assert!(step(&mut a, &o, t0 + 100 * s).is_empty());
    }

    #[test]
    fn a_failed_send_stays_due_and_a_down_link_waits() {
        let t0 = Instant::now();
        let mut a = Announcements::default();
        let o = owned(&[(0, "10.0.0.1"), (1, "10.1.0.1")]);
        // Port 1 is down: only port 0 is due; its send fails.
        assert_eq!(a.due(&o, |p| p == 0, t0, usize::MAX), vec![(0, ip("10.0.0.1"))]);
        assert!(a.is_due(t0), "not sent: still due");
        assert_eq!(a.due(&o, |p| p == 0, t0, usize::MAX), vec![(0, ip("10.0.0.1"))]);
        a.sent(0, ip("10.0.0.1"), t0);
        assert!(!a.is_due(t0));
        // Port 1 comes up later: announced from then on.
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(a.due(&o, |_| true, t1, usize::MAX), vec![(1, ip("10.1.0.1"))]);
        a.sent(1, ip("10.1.0.1"), t1);
        assert_eq!(
            step(&mut a, &o, t0 + ANNOUNCE_INTERVAL_V4),
            vec![(0, ip("10.0.0.1"))]
        );
        assert_eq!(
            step(&mut a, &o, t1 + ANNOUNCE_INTERVAL_V4),
            vec![(1, ip("10.1.0.1"))]
        );
        assert!(!a.is_due(t1 + 10 * ANNOUNCE_INTERVAL_V4));
    }

    /// A failed send among successful ones stays due at the next step,
    /// even when the one that went out was its address's last.
    #[test]
    fn a_failed_send_next_to_a_last_one_is_retried_at_the_next_step() {
        let t0 = Instant::now();
        let t1 = t0 + ANNOUNCE_INTERVAL_V4;
        let mut a = Announcements::default();
        let old = owned(&[(0, "10.0.0.1")]);
        step(&mut a, &old, t0);
        // A new VIP appears as the interface address's last announcement
        // is due: that one goes out, the VIP's send fails.
        let o = owned(&[(0, "10.0.0.1"), (0, "10.0.0.100")]);
        assert_eq!(
            a.due(&o, |_| true, t1, usize::MAX),
            vec![(0, ip("10.0.0.1")), (0, ip("10.0.0.100"))]
        );
        a.sent(0, ip("10.0.0.1"), t1);
        let next_step = t1 + Duration::from_millis(5);
        assert!(a.is_due(next_step), "the failed one is not forgotten");
        assert_eq!(step(&mut a, &o, next_step), vec![(0, ip("10.0.0.100"))]);
        assert!(!a.is_due(next_step + Duration::from_millis(5)));
        assert!(a.is_due(next_step + ANNOUNCE_INTERVAL_V4));
    }

    /// More due than room: the rest are handed out at the next calls, as
    /// room allows, and none is forgotten once the first ones are sent.
    #[test]
    fn what_finds_no_room_is_due_at_the_next_step() {
        let t0 = Instant::now();
        let mut a = Announcements::default();
        let o = owned(&[(0, "10.0.0.1"), (0, "10.0.0.2"), (1, "10.1.0.1")]);
        let sent = |a: &mut Announcements, due: &[(u16, IpAddr)]| {
            for &(p, ip) in due {
                a.sent(p, ip, t0);
            }
        };
        let first = a.due(&o, |_| true, t0, 2);
        assert_eq!(first, vec![(0, ip("10.0.0.1")), (0, ip("10.0.0.2"))]);
        sent(&mut a, &first);
        assert!(a.is_due(t0), "the third is still due");
        assert!(a.due(&o, |_| true, t0, 0).is_empty(), "no room at all");
        assert!(a.is_due(t0));
        let second = a.due(&o, |_| true, t0, 2);
        assert_eq!(second, vec![(1, ip("10.1.0.1"))]);
        sent(&mut a, &second);
        assert!(!a.is_due(t0), "each announced once, the repeats later");
        assert!(a.is_due(t0 + ANNOUNCE_INTERVAL_V4));
    }

    #[test]
    fn a_link_coming_back_or_an_address_coming_back_starts_over() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(60);
        let mut a = Announcements::default();
        let o = owned(&[(0, "10.0.0.1"), (0, "10.0.0.100")]);
        step(&mut a, &o, t0);
        step(&mut a, &o, t0 + ANNOUNCE_INTERVAL_V4);
        assert!(step(&mut a, &o, later).is_empty());
        // The VIP moves away, then back.
        let without = owned(&[(0, "10.0.0.1")]);
        assert!(step(&mut a, &without, later).is_empty());
        assert_eq!(step(&mut a, &o, later), vec![(0, ip("10.0.0.100"))]);
        // The link goes down and up: everything on it again.
        a.link_down(0);
        assert_eq!(
            step(&mut a, &o, later),
            vec![(0, ip("10.0.0.1")), (0, ip("10.0.0.100"))]
        );
        assert_eq!(
            step(&mut a, &o, later + ANNOUNCE_INTERVAL_V4),
            vec![(0, ip("10.0.0.1")), (0, ip("10.0.0.100"))]
        );
        assert!(step(&mut a, &o, later + 10 * ANNOUNCE_INTERVAL_V4).is_empty());
    }
}
