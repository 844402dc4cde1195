//! Lifecycle events (SPEC C10, opt-in): an instance's retry lifecycle — an attempt
//! failed (with the instant of the next attempt when a backoff parks it), the instance
//! FAILED, an operator resumed or migrated it — sent to a named channel through the
//! outbox, in the commit of the step that caused it.
//!
//! The events are read off the commit itself (its attempt-history rows, its park timers,
//! its status), so an event exists exactly when the step that caused it committed: a
//! step that loses its compare-and-swap writes neither. Each row's key is
//! `<instance>/events/<fence>/<n>`: the fence the commit writes orders the events of one
//! instance, and a key is never reused (one commit per fence). The rows are
//! instance-level (an empty node), so a call's withdrawal of its dead attempt's requests
//! never touches them.

use qflow_core::{Attempt, AttemptOutcome, Input};
use qflow_store::{Commit, InstanceStatus, NewOutboxRow, TimerKind};
use serde_json::json;

/// What of a step's input an event needs, taken before the input is consumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    Resume { budget: String },
    Migrate,
    Other,
}

impl Cause {
    pub fn of(input: &Input) -> Cause {
        match input {
            Input::Resume { budget } => Cause::Resume {
                budget: format!("{budget:?}").to_lowercase(),
            },
            Input::Migrate { .. } => Cause::Migrate,
            _ => Cause::Other,
        }
    }
}

/// Adds the lifecycle events of `commit` as outbox rows for `channel`. `finished_now`:
/// the step moved the instance into a terminal state.
pub fn add_events(commit: &mut Commit, channel: &str, cause: &Cause, finished_now: bool) {
    let instance = commit.instance.to_string();
    let fence = commit.expected_fence.map_or(1, |f| f.saturating_add(1));
    let at_ms = commit.now_ms;
    let mut events = Vec::new();
    for a in &commit.attempts {
        let failed = matches!(
            a.outcome,
            AttemptOutcome::Failed
                | AttemptOutcome::Panicked
                | AttemptOutcome::TimedOut
                | AttemptOutcome::Poisoned
        );
        if !failed {
            continue;
        }
        let park =
            commit.timers.arm.iter().find(|t| {
                t.name.kind() == TimerKind::Retry && t.name.node() == Some(a.node.as_str())
            });
        events.push(json!({
            "event": "attempt_failed",
            "node": a.node,
            "attempt": a.attempt.get(),
            "outcome": a.outcome.as_str(),
            "code": a.code,
            "message": a.message,
            "next_attempt_at_ms": park.map(|t| t.due_at_ms),
        }));
    }
    // A resume is applied whenever it commits; the instance may fail again in the same
    // step (its first attempt fails at once), which is then a FAILED of its own.
    let resumed = matches!(cause, Cause::Resume { .. });
    if let Cause::Resume { budget } = cause {
        events.push(json!({ "event": "resumed", "budget": budget }));
    }
    if commit.state.status == InstanceStatus::Failed && (finished_now || resumed) {
        events.push(json!({
            "event": "failed",
            "code": commit.state.failure_code,
        }));
    }
    if *cause == Cause::Migrate {
        events.push(json!({ "event": "migrated", "deployment": commit.deployment.0 }));
    }
    for (n, mut event) in events.into_iter().enumerate() {
        event["instance"] = json!(instance);
        event["fence"] = json!(fence);
        event["at_ms"] = json!(at_ms);
        commit.outbox.emit.push(NewOutboxRow {
            key: format!("{instance}/events/{fence}/{}", n + 1),
            node: String::new(),
            channel: channel.to_owned(),
            attempt: Attempt::FIRST,
            call_id: format!("{instance}/events"),
            body: event.to_string(),
        });
    }
}
