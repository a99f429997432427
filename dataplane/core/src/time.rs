//! Time as the pipeline sees it: a monotonic tick passed in by the caller.
//!
//! The pipeline never reads a clock. The DPDK shell converts its TSC (or any
//! monotonic clock) to milliseconds once per burst and passes the value in,
//! which keeps every timeout path testable on a simulated clock.

use core::time::Duration;

/// A point on a monotonic clock, in milliseconds since an arbitrary origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tick(pub u64);

impl Tick {
    /// The origin.
    pub const ZERO: Tick = Tick(0);

    /// Milliseconds since the origin.
    #[inline]
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    #[inline]
    pub fn since(self, earlier: Tick) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

impl core::ops::Add<Duration> for Tick {
    type Output = Tick;

    /// This tick plus `d`, saturating.
    #[inline]
    fn add(self, d: Duration) -> Tick {
        Tick(self.0.saturating_add(d.as_millis() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Tick(1_000);
        assert_eq!(t + Duration::from_millis(500), Tick(1_500));
        assert_eq!(t.since(Tick(400)), Duration::from_millis(600));
        assert_eq!(Tick(5).since(Tick(10)), Duration::ZERO);
        assert_eq!(Tick(u64::MAX) + Duration::from_secs(1), Tick(u64::MAX));
    }
}
