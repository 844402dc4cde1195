//! The retry timeline of every task with `q:retry`: what `qflow check --explain` prints
//! and the console's retry preview draws, computed once here so that an author sees
//! before deploying what the policy will do, and both front ends show the same numbers.
//!
//! Every delay comes from the model's own [`RetryPolicy::delay_ms`] — the function the
//! engine arms its backoff timers with — evaluated at the two ends of the jitter range
//! (factor 0 and the largest factor [`jitter_ppb`] can return). This module never
//! computes a backoff itself: if the formula changes, the explanation follows.
//!
//! Conventions, stated in the output too: t = 0 is the moment attempt 1 fails. An attempt
//! that fails as soon as it starts gives the earliest instants; an attempt that runs for
//! its whole `q:timeout` before failing gives the latest. `maxElapsed` means no attempt
//! starts later than that after t = 0: an attempt whose backoff would end later is never
//! started and the instance fails at the failure that would have scheduled it.
//!
//! [`jitter_ppb`]: crate::model::jitter_ppb

use serde::Serialize;

use crate::model::{
    BoundaryTrigger, Definition, Jitter, NodeIdx, NodeKind, RetryPolicy, TimeKind, TimerDef,
};

/// The largest full-jitter factor `jitter_ppb` can return (it is `< 1e9`).
pub const MAX_JITTER_PPB: u32 = 999_999_999;
/// Attempts listed one by one when a policy has few of them; longer lists show the first
/// `HEAD_ROWS` and the last `TAIL_ROWS` with an ellipsis between.
const FULL_LIST_ATTEMPTS: u32 = 25;
const HEAD_ROWS: u32 = 16;
const TAIL_ROWS: u32 = 3;
/// Bound on per-attempt formula evaluations before the delay settles at a fixed value.
/// A delay that is still changing after this many attempts is not explained row by row.
const MAX_DISTINCT_DELAYS: u32 = 10_000;

/// Whether an attempt can start under `maxElapsed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reach {
    /// Starts whenever the attempts before it fail.
    Always,
    /// Starts only if the jitter and run times put its instant within `maxElapsed`.
    IfWithinMaxElapsed,
    /// Its earliest possible instant is already past `maxElapsed`.
    Never,
}

#[derive(Debug, Clone, Serialize)]
pub struct AttemptWindow {
    pub attempt: u32,
    /// The backoff park before this attempt, at the two ends of the jitter range.
    pub backoff_min_ms: u64,
    pub backoff_max_ms: u64,
    /// Earliest and latest start, relative to the failure of attempt 1.
    pub earliest_start_ms: u64,
    pub latest_start_ms: u64,
    pub reach: Reach,
}

/// The whole explanation of one task's policy.
#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    pub node: String,
    pub line: u32,
    pub col: u32,
    pub max_attempts: u32,
    pub initial_interval_ms: u64,
    pub multiplier_milli: u32,
    pub max_interval_ms: u64,
    pub jitter: &'static str,
    pub max_elapsed_ms: Option<u64>,
    /// `q:timeout`: how long one attempt may run before it counts as failed.
    pub attempt_timeout_ms: Option<u64>,
    /// The attempts shown, in order (a long list is cut; see `elided_after`).
    pub attempts: Vec<AttemptWindow>,
    /// Attempts `elided_after + 1 ..` up to the tail rows are not listed.
    pub elided_after: Option<u32>,
    /// The first attempt that can never start because of `maxElapsed`; all later ones
    /// cannot either, so they are not listed.
    pub never_from: Option<u32>,
    /// Latest instant of FAILED after the failure of attempt 1. Without `q:timeout` the
    /// run time of the last attempt comes on top (`run_time_bounded` is false).
    pub worst_case_failed_ms: u64,
    pub run_time_bounded: bool,
    pub non_retryable_codes: Vec<String>,
    /// Routed timer boundaries on the task (they span all attempts, E7).
    pub routed_timers: Vec<RoutedTimer>,
    /// Set when the delays do not settle soon enough to list (a pathological policy).
    pub unexplained: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RoutedTimer {
    pub id: String,
    pub interrupting: bool,
    pub timer: String,
}

/// Every retry timeline of a definition, in node (document) order.
pub fn timelines(definition: &Definition) -> Vec<Timeline> {
    let process = &definition.process;
    process
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, node)| match &node.kind {
            NodeKind::Task(task) => task.retry.as_ref().map(|policy| {
                let idx = NodeIdx::at(i);
                let routed = routed_timers(definition, idx);
                timeline(
                    &node.id,
                    node.pos,
                    policy,
                    task.timeout.map(|t| t.0),
                    routed,
                )
            }),
            _ => None,
        })
        .collect()
}

fn routed_timers(definition: &Definition, host: NodeIdx) -> Vec<RoutedTimer> {
    let process = &definition.process;
    process
        .boundaries_of(host)
        .filter_map(|b| {
            let node = process.node(b);
            match &node.kind {
                NodeKind::Boundary(boundary) => match &boundary.trigger {
                    BoundaryTrigger::Timer(timer) if !node.outgoing.is_empty() => {
                        Some(RoutedTimer {
                            id: node.id.clone(),
                            interrupting: boundary.interrupting,
                            timer: timer_text(timer),
                        })
                    }
                    _ => None,
                },
                _ => None,
            }
        })
        .collect()
}

fn timer_text(timer: &TimerDef) -> String {
    match timer {
        TimerDef::Duration(d) => format!("after {}", human_ms(d.0)),
        TimerDef::Date { epoch_ms } => format!("at epoch {epoch_ms} ms"),
        TimerDef::Cycle {
            repetitions,
            interval,
        } => match repetitions {
            Some(n) => format!("every {}, {n} times", human_ms(interval.0)),
            None => format!("every {}", human_ms(interval.0)),
        },
        TimerDef::Cron(cron) => format!("on the cron schedule `{cron}` (UTC)"),
        TimerDef::Computed { kind, expression } => {
            let what = match kind {
                TimeKind::Duration => "after",
                TimeKind::Date => "at",
                TimeKind::Cycle => "every",
            };
            format!("{what} `{}`, computed when armed", expression.source())
        }
    }
}

/// Per-attempt backoff bounds, evaluated with the model's formula until the capped delay
/// stops changing; after that every further backoff is the same (the formula is a
/// function of the previous capped delay only), so sums extend in closed form.
struct Delays {
    /// `bounds[k - 1]` = (min, max) backoff after failed attempt k.
    bounds: Vec<(u64, u64)>,
    /// True when the last entry repeats forever.
    settled: bool,
}

impl Delays {
    fn new(policy: &RetryPolicy, failures: u32) -> Delays {
        let mut bounds = Vec::new();
        let mut previous_capped = None;
        let mut settled = false;
        for k in 1..=failures.min(MAX_DISTINCT_DELAYS) {
            let capped = policy.capped_delay_ms(k);
            if previous_capped == Some(capped) {
                settled = true;
                break;
            }
            previous_capped = Some(capped);
            bounds.push((policy.delay_ms(k, 0), policy.delay_ms(k, MAX_JITTER_PPB)));
        }
        let complete = bounds.len() as u64 == u64::from(failures);
        Delays {
            settled: settled || complete,
            bounds,
        }
    }

    fn bound(&self, k: u32) -> (u64, u64) {
        let i = (k as usize - 1).min(self.bounds.len() - 1);
        self.bounds[i]
    }

    /// Sum of (min, max) backoffs after failed attempts 1..=n, saturating.
    fn prefix(&self, n: u32) -> (u64, u64) {
        let listed = (n as usize).min(self.bounds.len());
        let mut lo: u128 = 0;
        let mut hi: u128 = 0;
        for (min, max) in &self.bounds[..listed] {
            lo += *min as u128;
            hi += *max as u128;
        }
        let extra = (n as usize - listed) as u128;
        if extra > 0 {
            let (min, max) = self.bounds[self.bounds.len() - 1];
            lo += extra * min as u128;
            hi += extra * max as u128;
        }
        (saturate(lo), saturate(hi))
    }
}

fn saturate(v: u128) -> u64 {
    v.min(u64::MAX as u128) as u64
}

pub fn timeline(
    node: &str,
    pos: crate::model::Pos,
    policy: &RetryPolicy,
    attempt_timeout_ms: Option<u64>,
    routed_timers: Vec<RoutedTimer>,
) -> Timeline {
    let max_attempts = policy.max_attempts.get();
    let mut timeline = Timeline {
        node: node.to_string(),
        line: pos.line,
        col: pos.col,
        max_attempts,
        initial_interval_ms: policy.initial_interval.0,
        multiplier_milli: policy.multiplier_milli,
        max_interval_ms: policy.max_interval.0,
        jitter: match policy.jitter {
            Jitter::Full => "full",
            Jitter::None => "none",
        },
        max_elapsed_ms: policy.max_elapsed.map(|d| d.0),
        attempt_timeout_ms,
        attempts: Vec::new(),
        elided_after: None,
        never_from: None,
        worst_case_failed_ms: 0,
        run_time_bounded: attempt_timeout_ms.is_some(),
        non_retryable_codes: policy.non_retryable_codes.clone(),
        routed_timers,
        unexplained: None,
    };
    if max_attempts < 2 {
        return timeline;
    }
    let delays = Delays::new(policy, max_attempts - 1);
    if !delays.settled {
        timeline.unexplained = Some(format!(
            "the backoff keeps changing for more than {MAX_DISTINCT_DELAYS} attempts; \
             lower maxAttempts or raise backoffMultiplier"
        ));
        return timeline;
    }
    let run_ms = attempt_timeout_ms.unwrap_or(0);
    let window = |n: u32| -> AttemptWindow {
        let (backoff_min_ms, backoff_max_ms) = delays.bound(n - 1);
        let (lo, hi) = delays.prefix(n - 1);
        // Attempts 2..n-1 each ran (and failed) before attempt n could be parked for.
        let runs = saturate(u128::from(n - 2) * u128::from(run_ms));
        let earliest_start_ms = lo;
        let latest_start_ms = hi.saturating_add(runs);
        let reach = match policy.max_elapsed {
            None => Reach::Always,
            Some(limit) if earliest_start_ms > limit.0 => Reach::Never,
            Some(limit) if latest_start_ms > limit.0 => Reach::IfWithinMaxElapsed,
            Some(_) => Reach::Always,
        };
        AttemptWindow {
            attempt: n,
            backoff_min_ms,
            backoff_max_ms,
            earliest_start_ms,
            latest_start_ms,
            reach,
        }
    };

    // The last attempt that can start at all: reach is monotone in n (start instants only
    // grow), so a binary search finds the first `Never` without listing every attempt.
    let never_from = first_never(2, max_attempts, |n| window(n).reach == Reach::Never);
    timeline.never_from = never_from;
    let last_reachable = never_from.map_or(max_attempts, |n| n - 1);

    timeline.worst_case_failed_ms = if last_reachable < 2 {
        0
    } else {
        let last = window(last_reachable);
        let start = match policy.max_elapsed {
            Some(limit) => last.latest_start_ms.min(limit.0),
            None => last.latest_start_ms,
        };
        start.saturating_add(run_ms)
    };

    let rows: Vec<u32> = if last_reachable <= FULL_LIST_ATTEMPTS {
        (2..=last_reachable).collect()
    } else {
        timeline.elided_after = Some(HEAD_ROWS);
        (2..=HEAD_ROWS)
            .chain(last_reachable - TAIL_ROWS + 1..=last_reachable)
            .collect()
    };
    timeline.attempts = rows.into_iter().map(window).collect();
    timeline
}

/// The smallest n in lo..=hi with `never(n)`, given that `never` is monotone.
fn first_never(lo: u32, hi: u32, never: impl Fn(u32) -> bool) -> Option<u32> {
    if lo > hi || !never(hi) {
        return None;
    }
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if never(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(lo)
}

/// 2000 → "2", 1500 → "1.5", 1 → "0.001".
pub fn milli_text(milli: u32) -> String {
    let whole = milli / 1000;
    let frac = milli % 1000;
    if frac == 0 {
        whole.to_string()
    } else {
        let digits = format!("{frac:03}");
        format!("{whole}.{}", digits.trim_end_matches('0'))
    }
}

/// A duration for people: `0s`, `250ms`, `1.5s`, `2m 3s`, `1h 2m`, `3d 4h 5m 6.5s`.
pub fn human_ms(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_string();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    const MINUTE: u64 = 60_000;
    const HOUR: u64 = 60 * MINUTE;
    const DAY: u64 = 24 * HOUR;
    let days = ms / DAY;
    let hours = ms % DAY / HOUR;
    let minutes = ms % HOUR / MINUTE;
    let second_ms = ms % MINUTE;
    let mut parts = Vec::new();
    if days > 0 {
        parts.push(format!("{days}d"));
    }
    if hours > 0 {
        parts.push(format!("{hours}h"));
    }
    if minutes > 0 {
        parts.push(format!("{minutes}m"));
    }
    if second_ms > 0 {
        let whole = second_ms / 1000;
        let frac = second_ms % 1000;
        if frac == 0 {
            parts.push(format!("{whole}s"));
        } else {
            let digits = format!("{frac:03}");
            parts.push(format!("{whole}.{}s", digits.trim_end_matches('0')));
        }
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use crate::model::{DurationMs, Pos};

    use super::*;

    fn policy(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts: NonZeroU32::new(max_attempts).unwrap(),
            ..RetryPolicy::default()
        }
    }

    fn explain(policy: &RetryPolicy, timeout: Option<u64>) -> Timeline {
        timeline("t", Pos { line: 1, col: 1 }, policy, timeout, Vec::new())
    }

    #[test]
    fn human_durations() {
        let cases = [
            (0, "0s"),
            (1, "1ms"),
            (999, "999ms"),
            (1_000, "1s"),
            (1_500, "1.5s"),
            (6_997, "6.997s"),
            (60_000, "1m"),
            (123_000, "2m 3s"),
            (60_500, "1m 0.5s"),
            (3_600_000, "1h"),
            (3_723_000, "1h 2m 3s"),
            (90_061_001, "1d 1h 1m 1.001s"),
        ];
        for (ms, want) in cases {
            assert_eq!(human_ms(ms), want, "{ms} ms");
        }
        // The largest value must format without overflow.
        assert!(human_ms(u64::MAX).ends_with('s'));
    }

    #[test]
    fn multiplier_text() {
        assert_eq!(milli_text(2000), "2");
        assert_eq!(milli_text(1500), "1.5");
        assert_eq!(milli_text(1), "0.001");
    }

    #[test]
    fn no_jitter_gives_exact_sums_of_the_capped_delays() {
        let p = RetryPolicy {
            jitter: Jitter::None,
            ..policy(5)
        };
        let t = explain(&p, None);
        let starts: Vec<(u64, u64)> = t
            .attempts
            .iter()
            .map(|w| (w.earliest_start_ms, w.latest_start_ms))
            .collect();
        assert_eq!(
            starts,
            vec![
                (1_000, 1_000),
                (3_000, 3_000),
                (7_000, 7_000),
                (15_000, 15_000)
            ]
        );
        assert_eq!(t.worst_case_failed_ms, 15_000);
    }

    #[test]
    fn full_jitter_ranges_start_at_zero_and_stay_below_the_capped_sum() {
        let t = explain(&policy(4), None);
        let latest: Vec<u64> = t.attempts.iter().map(|w| w.latest_start_ms).collect();
        assert!(t.attempts.iter().all(|w| w.earliest_start_ms == 0));
        assert_eq!(latest, vec![999, 2_998, 6_997]);
    }

    #[test]
    fn latest_start_includes_the_timeouts_of_earlier_retries() {
        let p = RetryPolicy {
            jitter: Jitter::None,
            ..policy(3)
        };
        let t = explain(&p, Some(30_000));
        // Attempt 3 waits 1s, runs attempt 2 for up to 30s, then waits 2s.
        assert_eq!(t.attempts[1].earliest_start_ms, 3_000);
        assert_eq!(t.attempts[1].latest_start_ms, 33_000);
        assert_eq!(t.worst_case_failed_ms, 63_000);
    }

    #[test]
    fn max_elapsed_cuts_attempts_that_can_never_start() {
        let p = RetryPolicy {
            jitter: Jitter::None,
            max_elapsed: Some(DurationMs(5_000)),
            ..policy(6)
        };
        let t = explain(&p, None);
        // Starts at 1s, 3s, 7s, 15s, 31s: only attempts 2 and 3 are within 5s.
        assert_eq!(t.never_from, Some(4));
        assert_eq!(t.attempts.len(), 2);
        assert_eq!(t.worst_case_failed_ms, 3_000);
    }

    #[test]
    fn max_elapsed_with_jitter_marks_attempts_that_may_be_cut() {
        let p = RetryPolicy {
            max_elapsed: Some(DurationMs(2_000)),
            ..policy(4)
        };
        let t = explain(&p, None);
        // Full jitter can always start at 0, so no attempt is `never`.
        assert_eq!(t.never_from, None);
        let reach: Vec<Reach> = t.attempts.iter().map(|w| w.reach).collect();
        assert_eq!(
            reach,
            vec![
                Reach::Always,
                Reach::IfWithinMaxElapsed,
                Reach::IfWithinMaxElapsed
            ]
        );
        assert_eq!(t.worst_case_failed_ms, 2_000);
    }

    #[test]
    fn huge_attempt_counts_are_summarised_without_iterating_them_all() {
        let t = explain(&policy(u32::MAX), None);
        assert_eq!(t.elided_after, Some(HEAD_ROWS));
        let last = t.attempts.last().unwrap();
        assert_eq!(last.attempt, u32::MAX);
        assert!(last.latest_start_ms > 0);
        assert_eq!(t.attempts.len() as u32, HEAD_ROWS - 1 + TAIL_ROWS);
    }

    /// What the engine does for one instance: attempt n starts after the jittered delays
    /// of attempts 1..n-1 (each failing at once). Every such instant, for any instance,
    /// must fall inside the window the explanation prints.
    #[test]
    fn every_instance_starts_each_attempt_inside_its_window() {
        use crate::model::jitter_ppb;
        let p = RetryPolicy {
            max_interval: DurationMs(20_000),
            ..policy(8)
        };
        let t = explain(&p, None);
        for i in 0..500 {
            let instance = format!("instance-{i}");
            let mut at = 0u64;
            for w in &t.attempts {
                let failed = w.attempt - 1;
                at += p.delay_ms(failed, jitter_ppb(&instance, "t", failed));
                assert!(
                    (w.earliest_start_ms..=w.latest_start_ms).contains(&at),
                    "{instance}: attempt {} at {at} outside {}..={}",
                    w.attempt,
                    w.earliest_start_ms,
                    w.latest_start_ms
                );
            }
        }
    }

    #[test]
    fn single_attempt_policies_have_no_rows() {
        let t = explain(&policy(1), None);
        assert!(t.attempts.is_empty());
        assert_eq!(t.worst_case_failed_ms, 0);
    }
}
