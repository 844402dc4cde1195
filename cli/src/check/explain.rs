//! `qflow check --explain`: the retry timeline of every task with `q:retry` (issue 2
//! item 4), rendered for the terminal. The numbers come from
//! [`qflow_loader::explain`], which the console's retry preview draws as well; this
//! module only writes them as text.

use std::io::{self, Write};

use qflow_loader::model::Definition;

pub(crate) use qflow_loader::explain::{human_ms, milli_text, timelines, Reach, Timeline};

use crate::text::escape;

/// Human text for every timeline of `definition`; nothing when it has no `q:retry`.
pub(crate) fn write_definition(out: &mut impl Write, definition: &Definition) -> io::Result<()> {
    for timeline in timelines(definition) {
        write_timeline(out, &definition.id, &timeline)?;
    }
    Ok(())
}

pub(crate) fn write_timeline(out: &mut impl Write, process: &str, t: &Timeline) -> io::Result<()> {
    // Ids, codes and the texts quoting them are the model's: escaped for the terminal.
    writeln!(
        out,
        "retry timeline of task `{}` in process `{}` ({}:{}):",
        escape(&t.node),
        escape(process),
        t.line,
        t.col
    )?;
    writeln!(out, "  policy: {}", escape(&policy_text(t)))?;
    if let Some(why) = &t.unexplained {
        writeln!(out, "  not listed: {}", escape(why))?;
        return write_codes_and_notes(out, t);
    }
    if t.max_attempts < 2 {
        writeln!(
            out,
            "  maxAttempts=1: no retry; the first failure is FAILED at once"
        )?;
        return write_codes_and_notes(out, t);
    }
    match t.attempt_timeout_ms {
        Some(ms) => writeln!(
            out,
            "  t=0 is the failure of attempt 1; earliest = every retry fails at once, \
             latest = every retry runs its q:timeout of {} first",
            human_ms(ms)
        )?,
        None => writeln!(
            out,
            "  t=0 is the failure of attempt 1; times assume every retry fails as soon as \
             it starts (no q:timeout bounds its run time)"
        )?,
    }
    write_attempt_table(out, t)?;
    if let Some(n) = t.never_from {
        let limit = human_ms(t.max_elapsed_ms.unwrap_or(0));
        if n == t.max_attempts {
            writeln!(
                out,
                "  attempt {n} never starts: its earliest instant is past maxElapsed {limit}"
            )?;
        } else {
            writeln!(
                out,
                "  attempts {n}..{} never start: their earliest instant is past maxElapsed {limit}",
                t.max_attempts
            )?;
        }
    }
    let worst = human_ms(t.worst_case_failed_ms);
    if t.run_time_bounded {
        writeln!(
            out,
            "  worst case before FAILED: {worst} after the first failure"
        )?;
    } else {
        writeln!(
            out,
            "  worst case before FAILED: {worst} after the first failure, plus the run time \
             of the retries"
        )?;
    }
    write_codes_and_notes(out, t)
}

fn write_attempt_table(out: &mut impl Write, t: &Timeline) -> io::Result<()> {
    let header = [
        "attempt",
        "backoff before it",
        "earliest start",
        "latest start",
    ];
    let rows: Vec<[String; 5]> = t
        .attempts
        .iter()
        .map(|w| {
            let backoff = if w.backoff_min_ms == w.backoff_max_ms {
                human_ms(w.backoff_min_ms)
            } else {
                format!(
                    "{} .. {}",
                    human_ms(w.backoff_min_ms),
                    human_ms(w.backoff_max_ms)
                )
            };
            let note = match w.reach {
                Reach::Always => String::new(),
                Reach::IfWithinMaxElapsed => format!(
                    "starts only if its instant is within maxElapsed {}",
                    human_ms(t.max_elapsed_ms.unwrap_or(0))
                ),
                Reach::Never => "never starts".to_string(),
            };
            [
                w.attempt.to_string(),
                backoff,
                human_ms(w.earliest_start_ms),
                human_ms(w.latest_start_ms),
                note,
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row.iter()) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5]| -> String {
        let text = format!(
            "    {:>w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {}",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3],
        );
        text.trim_end().to_string()
    };
    writeln!(
        out,
        "{}",
        line([header[0], header[1], header[2], header[3], ""])
    )?;
    for (row, window) in rows.iter().zip(&t.attempts) {
        writeln!(
            out,
            "{}",
            line([&row[0], &row[1], &row[2], &row[3], &row[4]])
        )?;
        if t.elided_after == Some(window.attempt) {
            writeln!(out, "    {:>w$}", "…", w = widths[0])?;
        }
    }
    Ok(())
}

fn write_codes_and_notes(out: &mut impl Write, t: &Timeline) -> io::Result<()> {
    if t.non_retryable_codes.is_empty() {
        writeln!(
            out,
            "  non-retryable codes: none (every failure code spends an attempt)"
        )?;
    } else {
        writeln!(
            out,
            "  non-retryable codes (FAILED at once, no retry): {}",
            escape(&t.non_retryable_codes.join(", "))
        )?;
    }
    writeln!(
        out,
        "  a BPMN error never spends an attempt: it routes to its boundary"
    )?;
    for timer in &t.routed_timers {
        // E7: an interrupting routed timer is a modelled outcome that spans all attempts
        // and wins over a pending retry; a non-interrupting one only opens a side path.
        if timer.interrupting {
            writeln!(
                out,
                "  routed timer boundary `{}` (interrupting, {}) spans all attempts; if it \
                 fires first, even during a backoff, the retries stop and the flow routes",
                escape(&timer.id),
                escape(&timer.timer)
            )?;
        } else {
            writeln!(
                out,
                "  routed timer boundary `{}` (non-interrupting, {}) opens its path \
                 alongside; the retries go on",
                escape(&timer.id),
                escape(&timer.timer)
            )?;
        }
    }
    Ok(())
}

fn policy_text(t: &Timeline) -> String {
    let mut text = format!(
        "maxAttempts={} initialInterval={} backoffMultiplier={} maxInterval={} jitter={}",
        t.max_attempts,
        human_ms(t.initial_interval_ms),
        milli_text(t.multiplier_milli),
        human_ms(t.max_interval_ms),
        t.jitter
    );
    if let Some(limit) = t.max_elapsed_ms {
        text.push_str(&format!(" maxElapsed={}", human_ms(limit)));
    }
    if let Some(timeout) = t.attempt_timeout_ms {
        text.push_str(&format!(" (q:timeout {})", human_ms(timeout)));
    }
    text
}
