//! A lock-free latency histogram with fixed bucket bounds, for the metrics a host
//! exposes (Prometheus-style cumulative buckets). Observing is a few relaxed atomic adds;
//! nothing here affects what the runtime does.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the buckets, in seconds: 0.5 ms to 60 s.
pub const BUCKETS_S: [f64; 15] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

#[derive(Debug, Default)]
pub struct Histogram {
    /// Per-bucket counts (not cumulative): an observation lands in exactly one bucket,
    /// or in none when it is above the last bound.
    buckets: [AtomicU64; BUCKETS_S.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

/// A point-in-time copy: cumulative counts per bound, the total and the sum.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramView {
    /// `(upper bound in seconds, observations at or below it)`, bounds ascending.
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl Histogram {
    /// Records one observation of `micros` microseconds.
    pub fn observe_us(&self, micros: u64) {
        self.observe_us_times(micros, 1);
    }

    /// Records `times` observations of `micros` microseconds each (a lane's round: every
    /// step it applied took the round's time), as `times` calls of
    /// [`Histogram::observe_us`] would.
    pub fn observe_us_times(&self, micros: u64, times: u64) {
        if times == 0 {
            return;
        }
        let seconds = micros as f64 / 1e6;
        if let Some(i) = BUCKETS_S.iter().position(|bound| seconds <= *bound) {
            self.buckets[i].fetch_add(times, Ordering::Relaxed);
        }
        self.count.fetch_add(times, Ordering::Relaxed);
        self.sum_us
            .fetch_add(micros.saturating_mul(times), Ordering::Relaxed);
    }

    /// Records one observation of `millis` milliseconds (negative counts as 0).
    pub fn observe_ms(&self, millis: i64) {
        self.observe_us(u64::try_from(millis).unwrap_or(0).saturating_mul(1_000));
    }

    pub fn view(&self) -> HistogramView {
        let mut running = 0;
        let buckets = BUCKETS_S
            .iter()
            .zip(&self.buckets)
            .map(|(bound, n)| {
                running += n.load(Ordering::Relaxed);
                (*bound, running)
            })
            .collect();
        HistogramView {
            buckets,
            count: self.count.load(Ordering::Relaxed),
            sum_seconds: self.sum_us.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_overflow_counts_only_in_the_total() {
        let h = Histogram::default();
        h.observe_us(400); // 0.4 ms
        h.observe_us(1_000); // exactly 1 ms: at or below the bound
        h.observe_ms(30);
        h.observe_ms(120_000); // above the last bound
        h.observe_ms(-5); // a clock step backwards reads as 0
        let v = h.view();
        let at = |bound: f64| v.buckets.iter().find(|(b, _)| *b == bound).unwrap().1;
        assert_eq!(at(0.000_5), 2);
        assert_eq!(at(0.001), 3);
        assert_eq!(at(0.025), 3);
        assert_eq!(at(0.05), 4);
        assert_eq!(at(60.0), 4);
        assert_eq!(v.count, 5);
        assert!((v.sum_seconds - 120.0314).abs() < 1e-9, "{}", v.sum_seconds);
    }

    #[test]
    fn observing_n_times_at_once_is_n_single_observations() {
        let (one_by_one, at_once) = (Histogram::default(), Histogram::default());
        for _ in 0..7 {
            one_by_one.observe_us(2_500);
        }
        one_by_one.observe_us(90_000);
        at_once.observe_us_times(2_500, 7);
        at_once.observe_us_times(90_000, 1);
        at_once.observe_us_times(10, 0);
        let (a, b) = (one_by_one.view(), at_once.view());
        assert_eq!(a.buckets, b.buckets);
        assert_eq!((a.count, a.sum_seconds), (b.count, b.sum_seconds));
        assert_eq!(b.count, 8);
    }
}
