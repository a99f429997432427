//! Counters, the latency histogram and the summary (text and JSON).

use serde::Serialize;

/// Log-linear latency histogram over TSC cycles: 8 sub-buckets per power
/// of two, so a percentile is within 12.5 % of the true value.
#[derive(Debug, Clone)]
pub struct Histogram {
    buckets: Vec<u64>,
    count: u64,
}

const SUB: u32 = 8;

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: vec![0; (64 * SUB) as usize],
            count: 0,
        }
    }
}

impl Histogram {
    fn index(v: u64) -> usize {
        if v < u64::from(SUB) {
            return v as usize;
        }
        let log = 63 - v.leading_zeros();
        let sub = (v >> (log - 3)) as u32 & (SUB - 1);
        ((log - 2) * SUB + sub) as usize
    }

    fn lower(i: usize) -> u64 {
        let i = i as u32;
        if i < SUB {
            return u64::from(i);
        }
        let log = i / SUB + 2;
        let sub = u64::from(i % SUB);
        (1u64 << log) | (sub << (log - 3))
    }

    /// Records one value.
    pub fn record(&mut self, v: u64) {
        let i = Self::index(v).min(self.buckets.len() - 1);
        self.buckets[i] += 1;
        self.count += 1;
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The value at quantile `q` (0..=1), as a bucket's lower bound.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let want = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= want {
                return Self::lower(i);
            }
        }
        0
    }
}

/// Everything one run counts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counters {
    /// Client packets the link took, toward the VIP.
    pub tx_forward: u64,
    /// Backend replies the link took.
    pub tx_reply: u64,
    /// Packets the link (memif ring, NIC queue) did not take on transmit:
    /// not counted as sent.
    pub tx_full: u64,
    /// Packets not built for want of an mbuf.
    pub no_mbuf: u64,
    /// Forward packets that arrived at the emulated backends.
    pub rx_forward: u64,
    /// Replies that arrived back at the emulated clients.
    pub rx_reply: u64,
    /// ARP requests answered.
    pub arp_replies: u64,
    /// Frames that were not benchmark traffic (ignored).
    pub rx_other: u64,
    /// Wrong checksums.
    pub bad_checksum: u64,
    /// Forward packets to an address:port that is not a backend.
    pub wrong_backend: u64,
    /// Forward packets of a flow that reached another backend than before.
    pub backend_changed: u64,
    /// Full-NAT packets whose source is not the SNAT address (DNAT: not
    /// the client).
    pub wrong_source: u64,
    /// Full-NAT: an SNAT address and port seen on two established flows to
    /// the same backend.
    pub snat_reused: u64,
    /// Full-NAT: packets of an established flow with another SNAT address
    /// or port than its first ones (the balancer opened a new connection
    /// for a live one).
    pub snat_changed: u64,
    /// Replies not addressed to the flow's client or not from the VIP.
    pub wrong_reply: u64,
}

impl Counters {
    /// All violations together.
    pub fn violations(&self) -> u64 {
        self.bad_checksum
            + self.wrong_backend
            + self.backend_changed
            + self.wrong_source
            + self.snat_reused
            + self.snat_changed
            + self.wrong_reply
    }
}

/// The final report.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// What ran.
    pub scenario: String,
    /// Seconds measured (after warm-up).
    pub seconds: f64,
    /// Flows.
    pub flows: u64,
    /// Frame size.
    pub frame_len: usize,
    /// Offered load, Mpps (client packets).
    pub tx_mpps: f64,
    /// Forward packets delivered to the backends, Mpps.
    pub rx_forward_mpps: f64,
    /// Replies delivered back to the clients, Mpps.
    pub rx_reply_mpps: f64,
    /// Packets through the device under test in both directions, Mpps.
    pub through_mpps: f64,
    /// Forward loss: 1 - rx_forward / tx_forward.
    pub loss_forward: f64,
    /// Reply loss: 1 - rx_reply / tx_reply.
    pub loss_reply: f64,
    /// Loss of both directions together.
    pub loss: f64,
    /// All violations.
    pub violations: u64,
    /// Round-trip latency percentiles (client → backend → client), µs.
    pub latency_us: Latency,
    /// The raw counters.
    pub counters: Counters,
}

/// Percentiles in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Samples.
    pub samples: u64,
}

impl Latency {
    /// From a histogram of TSC cycles.
    pub fn of(h: &Histogram, tsc_hz: u64) -> Latency {
        let us = |c: u64| c as f64 * 1e6 / tsc_hz.max(1) as f64;
        Latency {
            p50: us(h.quantile(0.5)),
            p90: us(h.quantile(0.9)),
            p99: us(h.quantile(0.99)),
            p999: us(h.quantile(0.999)),
            samples: h.count(),
        }
    }
}

fn ratio_loss(sent: u64, got: u64) -> f64 {
    if sent == 0 {
        0.0
    } else {
        1.0 - (got.min(sent) as f64 / sent as f64)
    }
}

impl Summary {
    /// Builds the summary of `c` over `seconds`.
    pub fn new(
        scenario: String,
        seconds: f64,
        flows: u64,
        frame_len: usize,
        c: &Counters,
        lat: Latency,
    ) -> Summary {
        let mpps = |n: u64| n as f64 / seconds.max(1e-9) / 1e6;
        Summary {
            scenario,
            seconds,
            flows,
            frame_len,
            tx_mpps: mpps(c.tx_forward),
            rx_forward_mpps: mpps(c.rx_forward),
            rx_reply_mpps: mpps(c.rx_reply),
            through_mpps: mpps(c.rx_forward + c.rx_reply),
            loss_forward: ratio_loss(c.tx_forward, c.rx_forward),
            loss_reply: ratio_loss(c.tx_reply, c.rx_reply),
            loss: ratio_loss(c.tx_forward + c.tx_reply, c.rx_forward + c.rx_reply),
            violations: c.violations(),
            latency_us: lat,
            counters: c.clone(),
        }
    }

    /// The human-readable summary.
    pub fn text(&self) -> String {
        format!(
            "{}: {:.1} s, {} flows, {} B: offered {:.3} Mpps, forward {:.3} Mpps, replies {:.3} Mpps, \
             through the DUT {:.3} Mpps; loss forward {:.4}% reply {:.4}%; violations {}; \
             RTT p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} µs ({} samples)",
            self.scenario,
            self.seconds,
            self.flows,
            self.frame_len,
            self.tx_mpps,
            self.rx_forward_mpps,
            self.rx_reply_mpps,
            self.through_mpps,
            self.loss_forward * 100.0,
            self.loss_reply * 100.0,
            self.violations,
            self.latency_us.p50,
            self.latency_us.p90,
            self.latency_us.p99,
            self.latency_us.p999,
            self.latency_us.samples
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_are_within_an_eighth() {
        let mut h = Histogram::default();
        for v in 1..=100_000u64 {
            h.record(v);
        }
        for (q, want) in [(0.5, 50_000.0), (0.9, 90_000.0), (0.99, 99_000.0)] {
            let got = h.quantile(q) as f64;
            assert!((got - want).abs() / want <= 0.125, "q{q}: {got} vs {want}");
        }
        assert_eq!(h.count(), 100_000);
        assert_eq!(Histogram::default().quantile(0.5), 0);
    }

    #[test]
    fn summary_rates_and_loss() {
        let c = Counters {
            tx_forward: 2_000_000,
            rx_forward: 1_000_000,
            tx_reply: 1_000_000,
            rx_reply: 1_000_000,
            wrong_backend: 3,
            ..Counters::default()
        };
        let s = Summary::new("x".into(), 2.0, 10, 60, &c, Latency::of(&Histogram::default(), 1));
        assert_eq!(s.tx_mpps, 1.0);
        assert_eq!(s.through_mpps, 1.0);
        assert!((s.loss_forward - 0.5).abs() < 1e-9);
        assert!((s.loss - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(s.violations, 3);
        assert!(s.text().contains("violations 3"));
    }
}
