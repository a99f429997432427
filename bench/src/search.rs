//! Throughput search: the maximum receive rate (MRR: what comes back when
//! the generator sends as fast as the link takes packets) and the partial
//! drop rate (PDR: the highest client rate whose loss stays within a
//! limit), as FD.io CSIT reports them for VPP.
//!
//! The PDR is found by bisection between 0 and the offered rate of the MRR
//! trial. A shared 2-vCPU machine preempts either process now and then for
//! a few milliseconds, longer than a memif ring lasts, so one lossy trial
//! is tried again (`retries`) before the rate counts as too high.
//!
//! The PDR reported is the passing trial with the most packets through
//! the device, the MRR trial included: over memif a device that cannot
//! keep up holds the generator back (its tx ring fills) instead of losing
//! packets, so a trial asked for a higher rate may deliver less than one
//! asked for a lower rate, or than the unlimited trial, with no loss in
//! any of them. The last passing trial of the bisection, reported before,
//! could then fall below a rate that had passed.

use serde::Serialize;

use crate::report::Summary;

/// One trial of the search.
#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    /// Client packets a second asked for, in millions (0: unlimited).
    pub rate_mpps: f64,
    /// Loss of the trial, both directions together (0..=1).
    pub loss: f64,
    /// Packets through the device a second, in millions.
    pub through_mpps: f64,
    /// Whether the loss was within the limit.
    pub pass: bool,
}

/// What a search found.
#[derive(Debug, Clone, Serialize)]
pub struct Search {
    /// The loss limit of the PDR (0..=1).
    pub loss_limit: f64,
    /// The unlimited trial.
    pub mrr: Summary,
    /// The passing trial with the highest rate through the device, the
    /// MRR trial included, if any passed.
    pub pdr: Option<Summary>,
    /// Violations over all trials.
    pub violations: u64,
    /// Every trial in order, the MRR trial first.
    pub trials: Vec<Trial>,
}

/// Runs the MRR trial (`trial(0.0)`), then `steps` bisection steps of the
/// client rate (packets a second) with up to `retries` repeats of a lossy
/// trial.
pub fn pdr(loss_limit: f64, steps: u32, retries: u32, mut trial: impl FnMut(f64) -> Summary) -> Search {
    let mrr = trial(0.0);
    let mut trials = vec![Trial {
        rate_mpps: 0.0,
        loss: mrr.loss,
        through_mpps: mrr.through_mpps,
        pass: mrr.loss <= loss_limit && mrr.tx_mpps > 0.0,
    }];
    let mut violations = mrr.violations;
    let (mut lo, mut hi) = (0.0, mrr.tx_mpps * 1e6 * 1.05);
    let mut best: Option<Summary> = trials[0].pass.then(|| mrr.clone());
    // Nothing left the generator: there is no rate to search (and a trial
    // at rate 0 would be unlimited).
    let steps = if hi > 0.0 { steps } else { 0 };
    for _ in 0..steps {
        let rate = (lo + hi) / 2.0;
        let mut pass = false;
        for _ in 0..=retries {
            let s = trial(rate);
            violations += s.violations;
            pass = s.loss <= loss_limit && s.tx_mpps > 0.0;
            trials.push(Trial {
                rate_mpps: rate / 1e6,
                loss: s.loss,
                through_mpps: s.through_mpps,
                pass,
            });
            if pass {
                if best.as_ref().is_none_or(|b| s.through_mpps > b.through_mpps) {
                    best = Some(s);
                }
                break;
            }
        }
        if pass {
            lo = rate;
        } else {
            hi = rate;
        }
    }
    Search {
        loss_limit,
        mrr,
        pdr: best,
        violations,
        trials,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Counters, Histogram, Latency};

    /// A device that forwards up to `cap` packets a second and drops the
    /// rest; each trial lasts one second.
    fn device(cap: f64, rate: f64) -> Summary {
        let offered = if rate == 0.0 { (cap * 1.5).max(1e6) } else { rate };
        let got = offered.min(cap) as u64;
        let c = Counters {
            tx_forward: offered as u64,
            rx_forward: got,
            ..Counters::default()
        };
        Summary::new("t".into(), 1.0, 1, 60, &c, Latency::of(&Histogram::default(), 1))
    }

    #[test]
    fn bisection_converges_below_capacity() {
        let s = pdr(0.005, 8, 0, |r| device(2e6, r));
        let p = s.pdr.expect("a rate passes");
        // Within 1/2^8 of the range below the capacity, never above it.
        assert!(p.through_mpps <= 2.0 * 1.005, "{}", p.through_mpps);
        assert!(p.through_mpps >= 2.0 * (1.0 - 1.6 / 256.0), "{}", p.through_mpps);
        assert!((s.mrr.through_mpps - 2.0).abs() < 1e-9);
        assert_eq!(s.trials.len(), 9);
    }

    /// Over memif: a device that takes up to `cap` packets a second holds
    /// the generator back instead of dropping, so what it is asked for
    /// beyond `cap` is neither sent nor lost.
    fn backpressured(cap: f64, rate: f64) -> Summary {
        let sent = if rate == 0.0 { cap } else { rate.min(cap) };
        let c = Counters {
            tx_forward: sent as u64,
            rx_forward: sent as u64,
            ..Counters::default()
        };
        Summary::new("t".into(), 1.0, 1, 60, &c, Latency::of(&Histogram::default(), 1))
    }

    #[test]
    fn the_pdr_is_the_passing_trial_with_most_through() {
        // The device's pace varies between trials (a shared machine): the
        // unlimited trial got 1.72 Mpps through, the later ones at most
        // 1.6, none lost anything.
        let mut caps = [1.72e6, 1.6e6, 1.6e6, 1.6e6, 1.55e6, 1.5e6].into_iter();
        let s = pdr(0.005, 5, 0, |r| backpressured(caps.next().expect("6 trials"), r));
        assert!(s.trials.iter().all(|t| t.pass));
        let last = s.trials.last().expect("trials").through_mpps;
        assert!(last < 1.6, "{last}");
        let p = s.pdr.expect("everything passed");
        assert!((p.through_mpps - 1.72).abs() < 1e-9, "{}", p.through_mpps);
        // Among the bisection's trials too, when the unlimited one lost
        // half its packets.
        let mut caps = [1.6e6, 1.6e6, 1.6e6, 1.55e6, 1.5e6].into_iter();
        let s = pdr(0.005, 5, 0, |r| {
            if r == 0.0 {
                device(2e6, 0.0)
            } else {
                backpressured(caps.next().expect("5 trials"), r)
            }
        });
        assert!(!s.trials[0].pass && s.trials[1..].iter().all(|t| t.pass));
        let most = s.trials[1..].iter().map(|t| t.through_mpps).fold(0.0, f64::max);
        assert!((most - 1.6).abs() < 1e-9, "{most}");
        assert_eq!(s.pdr.expect("the bisection passed").through_mpps, most);
        assert!(s.trials.last().expect("trials").through_mpps < most);
    }

    #[test]
    fn one_lossy_trial_is_retried() {
        // Every second trial at a given rate loses everything.
        let mut n = 0;
        let s = pdr(0.005, 4, 1, |r| {
            n += 1;
            if r > 0.0 && n % 2 == 0 {
                device(0.0, r)
            } else {
                device(2e6, r)
            }
        });
        let without = pdr(0.005, 4, 0, |r| device(2e6, r));
        let p = s.pdr.expect("retries pass");
        assert_eq!(p.through_mpps, without.pdr.expect("passes").through_mpps);
    }

    #[test]
    fn a_generator_that_sent_nothing_searches_nothing() {
        let mut rates = Vec::new();
        let s = pdr(0.005, 4, 1, |r| {
            rates.push(r);
            Summary::new(
                "t".into(),
                1.0,
                1,
                60,
                &Counters::default(),
                Latency::of(&Histogram::default(), 1),
            )
        });
        assert_eq!(rates, [0.0]);
        assert!(s.pdr.is_none());
    }

    #[test]
    fn nothing_passes_on_a_dead_device() {
        let s = pdr(0.005, 3, 1, |r| device(0.0, r));
        assert!(s.pdr.is_none());
        assert_eq!(s.trials.len(), 1 + 3 * 2);
    }
}
