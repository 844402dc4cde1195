//! Inline SVG pictures: an instance's attempts on a time axis (each attempt, each backoff
//! window between attempts, the next due instant of a pending park), and a deployment's
//! retry timelines (the windows in which each attempt can start, as `qflow check
//! --explain` lists them). Each picture sits beside a table with the same numbers, which
//! is what a screen reader reads; the SVG carries a summary label.

use std::collections::BTreeMap;

use maud::{html, Markup};
use qflow_ops::explain::{human_ms, Reach, Timeline};
use qflow_ops::AttemptView;

const WIDTH: f64 = 1000.0;
const LABEL_W: f64 = 170.0;
const RIGHT_W: f64 = 90.0;
const ROW_H: f64 = 34.0;
const TOP_H: f64 = 26.0;
const BOTTOM_H: f64 = 34.0;
/// Characters of a node id shown in a row label (the table has the whole id).
const LABEL_CHARS_MAX: usize = 22;

fn short(id: &str) -> String {
    if id.chars().count() <= LABEL_CHARS_MAX {
        id.to_owned()
    } else {
        let head: String = id.chars().take(LABEL_CHARS_MAX - 1).collect();
        format!("{head}…")
    }
}

/// A linear time axis from `t0` to `t1` onto the plot area.
struct Axis {
    t0: i64,
    t1: i64,
}

impl Axis {
    fn new(t0: i64, t1: i64) -> Axis {
        Axis {
            t0,
            t1: t1.max(t0 + 1),
        }
    }

    fn x(&self, t: i64) -> f64 {
        let span = (self.t1 - self.t0) as f64;
        LABEL_W + ((t - self.t0) as f64 / span).clamp(0.0, 1.0) * (WIDTH - LABEL_W - RIGHT_W)
    }
}

fn outcome_class(outcome: &str) -> &'static str {
    match outcome {
        "ok" => "a-ok",
        "failed" | "panicked" => "a-failed",
        "timeout" => "a-timeout",
        _ => "a-other",
    }
}

fn axis_marks(axis: &Axis, height: f64, first: i64) -> Markup {
    let y = height - BOTTOM_H + 6.0;
    html! {
        line.axis x1=(LABEL_W) y1=(y) x2=(WIDTH - RIGHT_W) y2=(y) {}
        @for i in 0..=4i64 {
            @let t = axis.t0 + (axis.t1 - axis.t0) * i / 4;
            @let x = axis.x(t);
            line.axis x1=(x) y1=(y) x2=(x) y2=(y + 5.0) {}
            text x=(x) y=(y + 17.0) text-anchor="middle" { "+" (human_ms((t - first).max(0) as u64)) }
        }
    }
}

/// The attempts of an instance per task, with their backoff windows and, for a task
/// parked now, the window up to its next due instant (`dues`: task → due instant).
pub fn attempts(history: &[AttemptView], dues: &BTreeMap<String, i64>) -> Markup {
    let mut rows: Vec<(&str, Vec<&AttemptView>)> = Vec::new();
    for a in history {
        match rows.iter_mut().find(|(n, _)| *n == a.node) {
            Some((_, list)) => list.push(a),
            None => rows.push((&a.node, vec![a])),
        }
    }
    for node in dues.keys() {
        if !rows.iter().any(|(n, _)| n == node) {
            rows.push((node, Vec::new()));
        }
    }
    if rows.is_empty() {
        return html! { p.muted { "No attempts recorded: no task of this instance has run yet." } };
    }
    let t0 = history
        .iter()
        .map(|a| a.started_at_ms)
        .chain(dues.values().copied())
        .min()
        .unwrap_or(0);
    let t1 = history
        .iter()
        .map(|a| a.finished_at_ms)
        .chain(dues.values().copied())
        .max()
        .unwrap_or(t0);
    let axis = Axis::new(t0, t1);
    let height = TOP_H + ROW_H * rows.len() as f64 + BOTTOM_H;
    let label = format!(
        "Attempts of {} task(s) over {}",
        rows.len(),
        human_ms((t1 - t0).max(0) as u64)
    );
    html! {
        svg.chart #attempt-timeline viewBox={ "0 0 " (WIDTH) " " (height) } role="img" aria-label=(label)
            xmlns="http://www.w3.org/2000/svg" {
            text x="4" y="16" { "task" }
            text x=(LABEL_W) y="16" { "attempt start → end, backoff windows (dashed), next due (purple line)" }
            @for (i, (node, list)) in rows.iter().enumerate() {
                @let y = TOP_H + ROW_H * i as f64;
                text x="4" y=(y + 20.0) { title { (node) } (short(node)) }
                @for (k, a) in list.iter().enumerate() {
                    @if let Some(next) = list.get(k + 1) {
                        @let x0 = axis.x(a.finished_at_ms);
                        @let x1 = axis.x(next.started_at_ms);
                        rect.backoff x=(x0) y=(y + 10.0) width=((x1 - x0).max(1.0)) height="12" {
                            title { "backoff after attempt " (a.attempt) ": " (human_ms((next.started_at_ms - a.finished_at_ms).max(0) as u64)) }
                        }
                    }
                    @let x0 = axis.x(a.started_at_ms);
                    @let x1 = axis.x(a.finished_at_ms);
                    rect class=(outcome_class(a.outcome)) x=(x0) y=(y + 6.0) width=((x1 - x0).max(4.0)) height="20"
                        data-attempt=(a.attempt) {
                        title { "attempt " (a.attempt) ": " (a.outcome) @if let Some(c) = &a.code { " " (c) } }
                    }
                    text x=(x0) y=(y + 4.0) { "#" (a.attempt) }
                }
                @if let Some(due) = dues.get(*node) {
                    @let last_end = list.last().map_or(*due, |a| a.finished_at_ms);
                    @let x0 = axis.x(last_end);
                    @let xd = axis.x(*due);
                    rect.backoff x=(x0) y=(y + 10.0) width=((xd - x0).max(1.0)) height="12" {
                        title { "pending backoff park" }
                    }
                    line.due #next-due x1=(xd) y1=(y + 2.0) x2=(xd) y2=(y + ROW_H - 2.0) {
                        title { "next attempt due " (super::view::instant(*due)) }
                    }
                    text x=(xd + 4.0) y=(y + 30.0) { "next due" }
                }
            }
            (axis_marks(&axis, height, t0))
        }
    }
}

/// One retry timeline as a chart: for each attempt after the first, the window in
/// which it can start (earliest to latest, t = 0 at the first failure); a dashed red
/// line at `maxElapsed`; and the latest instant of FAILED.
pub fn retry_timeline(t: &Timeline) -> Markup {
    if t.attempts.is_empty() {
        return html! { p.muted { "No retry to draw: the first failure is final." } };
    }
    let end = t
        .attempts
        .iter()
        .map(|w| w.latest_start_ms)
        .chain([t.worst_case_failed_ms])
        .chain(t.max_elapsed_ms)
        .max()
        .unwrap_or(1);
    let axis = Axis::new(0, i64::try_from(end).unwrap_or(i64::MAX));
    let rows = t.attempts.len() + 1;
    let height = TOP_H + ROW_H * rows as f64 + BOTTOM_H;
    let at = |ms: u64| axis.x(i64::try_from(ms).unwrap_or(i64::MAX));
    let label = format!(
        "Retry timeline of task {}: {} attempts, worst case FAILED {} after the first failure",
        t.node,
        t.max_attempts,
        human_ms(t.worst_case_failed_ms)
    );
    html! {
        svg.chart viewBox={ "0 0 " (WIDTH) " " (height) } role="img" aria-label=(label)
            xmlns="http://www.w3.org/2000/svg" data-node=(t.node) {
            text x="4" y="16" { "attempt" }
            text x=(LABEL_W) y="16" { "when it can start after the first failure (blue: always, yellow: only within maxElapsed)" }
            @let y = TOP_H;
            text x="4" y=(y + 20.0) { "1" }
            rect.a-failed x=(at(0)) y=(y + 6.0) width="4" height="20" { title { "attempt 1 fails at t = 0" } }
            @for (i, w) in t.attempts.iter().enumerate() {
                @let y = TOP_H + ROW_H * (i + 1) as f64;
                @let x0 = at(w.earliest_start_ms);
                @let x1 = at(w.latest_start_ms);
                text x="4" y=(y + 20.0) {
                    (w.attempt)
                    @if t.elided_after == Some(w.attempt) { " …" }
                }
                rect class=(if w.reach == Reach::Always { "window" } else { "window maybe" })
                    x=(x0) y=(y + 6.0) width=((x1 - x0).max(4.0)) height="20" {
                    title {
                        "attempt " (w.attempt) ": backoff " (human_ms(w.backoff_min_ms)) " .. " (human_ms(w.backoff_max_ms))
                        ", starts " (human_ms(w.earliest_start_ms)) " .. " (human_ms(w.latest_start_ms))
                    }
                }
                text x=(x1 + 4.0) y=(y + 20.0) { (human_ms(w.latest_start_ms)) }
            }
            @if let Some(limit) = t.max_elapsed_ms {
                @let x = at(limit);
                line.limit x1=(x) y1=(TOP_H) x2=(x) y2=(height - BOTTOM_H) { title { "maxElapsed " (human_ms(limit)) } }
            }
            @let xf = at(t.worst_case_failed_ms);
            line.due x1=(xf) y1=(TOP_H) x2=(xf) y2=(height - BOTTOM_H) { title { "worst case FAILED" } }
            (axis_marks(&axis, height, 0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(node: &str, n: u32, start: i64, end: i64, outcome: &'static str) -> AttemptView {
        AttemptView {
            node: node.to_owned(),
            attempt: n,
            started_at_ms: start,
            finished_at_ms: end,
            outcome,
            code: None,
            message: None,
            worker: None,
        }
    }

    #[test]
    fn the_attempt_timeline_draws_attempts_backoffs_and_the_next_due_instant() {
        let history = [
            attempt("pay", 1, 0, 10, "failed"),
            attempt("pay", 2, 1_000, 1_010, "failed"),
        ];
        let dues = BTreeMap::from([("pay".to_owned(), 3_000)]);
        let svg = attempts(&history, &dues).into_string();
        assert_eq!(svg.matches(r#"class="a-failed""#).count(), 2, "{svg}");
        // One window between the attempts, one up to the due instant.
        assert_eq!(svg.matches(r#"class="backoff""#).count(), 2, "{svg}");
        assert!(svg.contains(r#"id="next-due""#));
        assert!(svg.contains("backoff after attempt 1: 990ms"), "{svg}");
        assert!(attempts(&[], &BTreeMap::new())
            .into_string()
            .contains("No attempts recorded"));
    }
}
