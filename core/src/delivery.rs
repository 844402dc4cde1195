//! A channel's delivery curve (SPEC C2): how often the outbox tries to deliver one
//! request before it gives up. It is about reaching the counterpart, never about the task
//! having another go — that is `q:retry`'s job, and the two never mix.
//!
//! The arithmetic lives here, once, and is pure: the dispatcher (`qflow-channels`) asks
//! it when the next try of a row is due, and the simulator ([`crate::sim`]) asks it the
//! same question to play out a scenario's `delivery_fails`, so a simulated trace shows
//! the instants production would use. Nothing here reads the clock: the caller adds the
//! delay to its own `now`.

use serde::{Deserialize, Serialize};

/// When the next delivery try of a row is due, and whether there is one.
///
/// The delay after the n-th failed try is `min(max_ms, initial_ms × multiplier^(n-1))`,
/// in integers, without jitter: deliveries of different rows already spread by the
/// instants their steps committed. Without a `ceiling` the outbox tries for ever (the
/// default, C2), and only the call's timeout moves the task on; with one, the row is
/// poisoned once that many tries failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeliveryCurve {
    /// The delay after the first failed try. Default 500 ms.
    pub initial_ms: u64,
    /// Growth per failed try, in thousandths (2000: doubling). Default 2000, at least 1000.
    pub multiplier_milli: u32,
    /// The longest delay between two tries. Default 60,000 ms.
    pub max_ms: u64,
    /// Poison the row after this many failed tries; `None` (the default): never.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<u32>,
}

impl Default for DeliveryCurve {
    fn default() -> Self {
        DeliveryCurve {
            initial_ms: 500,
            multiplier_milli: 2000,
            max_ms: 60_000,
            ceiling: None,
        }
    }
}

/// What the outbox does after a failed try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Try again this long after now.
    RetryIn(u64),
    /// The ceiling is reached: poison the row.
    Poison,
}

impl DeliveryCurve {
    /// Checks the curve; the message starts with the field it is about
    /// (`ceiling: must be at least 1 …`), for the caller to prefix with its path.
    pub fn validate(&self) -> Result<(), String> {
        if self.initial_ms == 0 {
            return Err("initial_ms: must be at least 1".into());
        }
        if self.multiplier_milli < 1000 {
            return Err("multiplier_milli: must be at least 1000 (a delay never shrinks)".into());
        }
        if self.max_ms < self.initial_ms {
            return Err(format!(
                "max_ms: {} is below initial_ms ({})",
                self.max_ms, self.initial_ms
            ));
        }
        if self.ceiling == Some(0) {
            return Err("ceiling: must be at least 1 (or left out: try for ever)".into());
        }
        Ok(())
    }

    /// What follows the `tries`-th failed try (1-based: `tries` counts this one).
    pub fn after_failure(&self, tries: u32) -> AfterFailure {
        if self.ceiling.is_some_and(|c| tries >= c) {
            return AfterFailure::Poison;
        }
        let mut delay = self.initial_ms;
        for _ in 1..tries {
            delay = delay.saturating_mul(self.multiplier_milli as u64) / 1000;
            if delay >= self.max_ms {
                break;
            }
        }
        AfterFailure::RetryIn(delay.min(self.max_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_grows_to_its_cap_and_the_ceiling_poisons() {
        let c = DeliveryCurve {
            ceiling: Some(5),
            ..DeliveryCurve::default()
        };
        let delays: Vec<AfterFailure> = (1..=6).map(|n| c.after_failure(n)).collect();
        assert_eq!(
            delays,
            [
                AfterFailure::RetryIn(500),
                AfterFailure::RetryIn(1000),
                AfterFailure::RetryIn(2000),
                AfterFailure::RetryIn(4000),
                AfterFailure::Poison,
                AfterFailure::Poison,
            ]
        );
        let forever = DeliveryCurve::default();
        assert_eq!(
            forever.after_failure(1_000_000),
            AfterFailure::RetryIn(60_000)
        );
        assert_eq!(
            forever.after_failure(u32::MAX),
            AfterFailure::RetryIn(60_000)
        );
    }

    #[test]
    fn nonsense_curves_are_refused_with_the_field() {
        let bad = [
            (
                DeliveryCurve {
                    initial_ms: 0,
                    ..Default::default()
                },
                "initial_ms",
            ),
            (
                DeliveryCurve {
                    multiplier_milli: 999,
                    ..Default::default()
                },
                "multiplier_milli",
            ),
            (
                DeliveryCurve {
                    max_ms: 1,
                    ..Default::default()
                },
                "max_ms",
            ),
            (
                DeliveryCurve {
                    ceiling: Some(0),
                    ..Default::default()
                },
                "ceiling",
            ),
        ];
        for (curve, field) in bad {
            let e = curve.validate().unwrap_err();
            assert!(e.starts_with(field), "{e}");
        }
        assert!(DeliveryCurve::default().validate().is_ok());
    }
}
