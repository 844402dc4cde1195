//! Timer start events' schedules (BPMN §10.5.2; SPEC L2): when a deployment's timer start
//! event starts instances. The arithmetic only — the schedule rows live in the store, the
//! poller claims them, and each start moves its row on in its own commit — so that the
//! runtime and its tests agree on one rule.
//!
//! - `timeDate`: one start, at the date (at once if it has passed).
//! - `timeDuration`: one start, that long after the deployment.
//! - `timeCycle` `R<n>/<interval>`: `n` starts (unbounded without `n`), the first one
//!   interval after the deployment, then one every interval. Occurrences missed while no
//!   replica ran start one instance between them, not one each: the next occurrence is
//!   the first one after the instant the missed one fired, so a replica back after a
//!   long stop does not start a burst of instances. Each start spends one repetition.
//! - `timeCycle` as a cron expression (UTC): the schedule's first instant after the
//!   deployment, then each next one, without bound; missed instants coalesce as above
//!   (the next one is the first after the later of the fired one and now).
//! - A computed timer (`=…` FEEL, `${…}` JUEL) on a start event is refused by the
//!   loader (Q207: there are no variables before an instance starts); should one reach
//!   these functions, it is evaluated over no variables.

use qflow_loader::model::{DurationMs, TimerDef};

use crate::Variables;

/// An occurrence of a schedule: when it is due, and how many starts are left from it,
/// itself included (`None`: unbounded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occurrence {
    pub due_at_ms: i64,
    pub remaining: Option<u32>,
}

/// The first occurrence of a timer start event deployed at `deployed_at_ms`; `None` for
/// a cycle of zero repetitions, which never starts anything. An error names why a
/// computed timer does not give a time.
pub fn first(timer: &TimerDef, deployed_at_ms: i64) -> Result<Option<Occurrence>, String> {
    let occurrence = match crate::timers::resolve(timer, &Variables::new())? {
        TimerDef::Date { epoch_ms } => Occurrence {
            due_at_ms: epoch_ms,
            remaining: Some(1),
        },
        TimerDef::Duration(d) => Occurrence {
            due_at_ms: after(deployed_at_ms, d),
            remaining: Some(1),
        },
        TimerDef::Cycle {
            repetitions: Some(0),
            ..
        } => return Ok(None),
        TimerDef::Cycle {
            repetitions,
            interval,
        } => Occurrence {
            due_at_ms: after(deployed_at_ms, interval),
            remaining: repetitions,
        },
        TimerDef::Cron(cron) => match cron.next_after(deployed_at_ms) {
            Some(due_at_ms) => Occurrence {
                due_at_ms,
                remaining: None,
            },
            None => return Ok(None),
        },
        TimerDef::Computed { .. } => {
            return Err("a computed timer gave another computed timer".to_owned())
        }
    };
    Ok(Some(occurrence))
}

/// The occurrence after `fired` (an occurrence that starts an instance at `now_ms`), or
/// `None` when `fired` was the last. A computed cycle is evaluated again; if it no
/// longer gives a cycle, the schedule ends (the error says why).
pub fn next(
    timer: &TimerDef,
    fired: Occurrence,
    now_ms: i64,
) -> Result<Option<Occurrence>, String> {
    if fired.remaining == Some(1) {
        return Ok(None);
    }
    let interval = match crate::timers::resolve(timer, &Variables::new())? {
        TimerDef::Cycle { interval, .. } => interval,
        // The schedule's first instant after the one that fired and after now: missed
        // occurrences coalesce here too.
        TimerDef::Cron(cron) => {
            return Ok(cron
                .next_after(fired.due_at_ms.max(now_ms))
                .map(|due_at_ms| Occurrence {
                    due_at_ms,
                    remaining: None,
                }))
        }
        // A date or a duration starts once.
        _ => return Ok(None),
    };
    let step = i64::try_from(interval.0).unwrap_or(i64::MAX).max(1);
    let mut due = fired.due_at_ms.saturating_add(step);
    if due <= now_ms {
        // Missed occurrences coalesce: the next one is the first after `now_ms`.
        let missed = (now_ms - fired.due_at_ms) / step;
        due = fired
            .due_at_ms
            .saturating_add(missed.saturating_add(1).saturating_mul(step));
    }
    Ok(Some(Occurrence {
        due_at_ms: due,
        remaining: fired.remaining.map(|r| r - 1),
    }))
}

fn after(at_ms: i64, span: DurationMs) -> i64 {
    at_ms.saturating_add(i64::try_from(span.0).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cycle(repetitions: Option<u32>, ms: u64) -> TimerDef {
        TimerDef::Cycle {
            repetitions,
            interval: DurationMs(ms),
        }
    }

    #[test]
    fn a_date_and_a_duration_start_once() {
        let date = TimerDef::Date { epoch_ms: 5_000 };
        let first_date = first(&date, 1_000).unwrap().unwrap();
        assert_eq!(
            first_date,
            Occurrence {
                due_at_ms: 5_000,
                remaining: Some(1)
            }
        );
        assert_eq!(next(&date, first_date, 5_000).unwrap(), None);
        let duration = TimerDef::Duration(DurationMs(300));
        let first_duration = first(&duration, 1_000).unwrap().unwrap();
        assert_eq!(first_duration.due_at_ms, 1_300);
        assert_eq!(next(&duration, first_duration, 1_300).unwrap(), None);
    }

    #[test]
    fn a_bounded_cycle_spends_one_repetition_per_start() {
        let timer = cycle(Some(3), 100);
        let mut at = first(&timer, 0).unwrap().unwrap();
        let mut dues = vec![at.due_at_ms];
        while let Some(n) = next(&timer, at, at.due_at_ms).unwrap() {
            dues.push(n.due_at_ms);
            at = n;
        }
        assert_eq!(dues, vec![100, 200, 300]);
        assert_eq!(first(&cycle(Some(0), 100), 0).unwrap(), None);
    }

    #[test]
    fn missed_occurrences_coalesce_into_the_next_after_now() {
        let timer = cycle(None, 100);
        let fired = Occurrence {
            due_at_ms: 100,
            remaining: None,
        };
        // Fired on time: the next is one interval on.
        assert_eq!(next(&timer, fired, 100).unwrap().unwrap().due_at_ms, 200);
        // Fired at 450, 350 ms late: 200, 300 and 400 were missed and start nothing of
        // their own; the next is the first occurrence after now.
        assert_eq!(next(&timer, fired, 450).unwrap().unwrap().due_at_ms, 500);
        assert_eq!(next(&timer, fired, 500).unwrap().unwrap().due_at_ms, 600);
        let bounded = Occurrence {
            due_at_ms: 100,
            remaining: Some(5),
        };
        assert_eq!(
            next(&cycle(Some(5), 100), bounded, 450).unwrap().unwrap(),
            Occurrence {
                due_at_ms: 500,
                remaining: Some(4)
            }
        );
    }

    #[test]
    fn the_end_of_time_saturates() {
        let timer = cycle(None, u64::MAX);
        let fired = Occurrence {
            due_at_ms: i64::MAX - 1,
            remaining: None,
        };
        assert_eq!(next(&timer, fired, 0).unwrap().unwrap().due_at_ms, i64::MAX);
    }

    #[test]
    fn a_cron_cycle_starts_at_each_instant_and_coalesces_missed_ones() {
        // Every day at 09:00 UTC; deployed 2026-12-04T10:00:00Z.
        let cron = TimerDef::cycle_from_text("0 0 9 * * ?").unwrap();
        let day = 86_400_000;
        let deployed = 1_764_842_400_000; // 2026-12-04T10:00:00Z
        let nine = 1_764_838_800_000; // 2026-12-04T09:00:00Z
        let one = first(&cron, deployed).unwrap().unwrap();
        assert_eq!(
            one,
            Occurrence {
                due_at_ms: nine + day,
                remaining: None
            }
        );
        // Fired on time: the next day's.
        let two = next(&cron, one, one.due_at_ms).unwrap().unwrap();
        assert_eq!(two.due_at_ms, nine + 2 * day);
        // Fired three days late: the next instant after now, not the missed ones.
        let late = next(&cron, two, two.due_at_ms + 3 * day + 1)
            .unwrap()
            .unwrap();
        assert_eq!(late.due_at_ms, nine + 6 * day);
        assert_eq!(late.remaining, None);
    }
}
