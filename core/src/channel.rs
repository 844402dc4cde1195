//! Channel calls (SPEC C1–C9): a task that asks a counterpart through the outbox and
//! waits for its correlated answer, with retries that never let two live requests exist
//! for one logical call.
//!
//! A token entering a channel-call task starts a **call**: a number drawn from the
//! instance's sequence (the counter timer incarnations also come from), kept as
//! `x/<node>` while the task waits. Each attempt of the call emits one request
//! ([`Effect::SendRequest`]) with two identifiers:
//!
//! - the **call id** `<instance>/<call>`, the same for every attempt of the call, so a
//!   counterpart can recognise the logical call;
//! - the **idempotency key** `<instance>/<call>/<attempt>`, fresh for every attempt, so a
//!   counterpart deduplicating on it sees a retry as the new request it is.
//!
//! Neither names the node, so both survive a migration that renames it. An answer names
//! the call and the attempt it answers ([`CallKey`]); the node is the one whose `x/` holds
//! that call.
//!
//! A failed attempt of a call is exactly one of: the route-less `q:timeout` firing, or a
//! poisoned delivery (the outbox gave up on the request, C4). An answer, whatever it says,
//! is never a failure (E5). With a `q:retry` policy and budget left, the failed attempt
//! enters a backoff window — the marker `m/<node>` carries the class (`timeout`,
//! `poisoned`) — and the dead attempt's outbox rows are withdrawn in the same commit
//! ([`Effect::WithdrawRequests`], C6). The park's firing re-drives the call as a new
//! attempt: a fresh request over the variables as they are now, a fresh key, a fresh
//! timeout window (C7). Without a policy a timeout stays the catchable `TIMEOUT` error,
//! exactly as it was before retries existed, and a poisoned delivery fails the instance
//! with `POISONED`.
//!
//! # The decision table
//!
//! Every channel input is judged by [`verdict`] from durable facts alone — the call
//! number, the marker, the live attempt — before anything changes. A timer is judged by
//! its incarnation first (a resolved or re-armed timer is stale residue whatever the
//! table says), then by the same facts:
//!
//! | input            | backoff window (marked) | attempt named is live | what happens                                  |
//! |------------------|-------------------------|-----------------------|-----------------------------------------------|
//! | answer           | no                      | yes                   | `resumed`: the task completes (or routes a BPMN error) |
//! | answer           | no                      | no (an older one)     | `superseded`: stale, the live attempt waits on |
//! | answer           | yes                     | any                   | `superseded`: stale, "a retry is pending"      |
//! | poison           | no                      | yes                   | failed attempt `POISONED`: park or FAILED      |
//! | poison           | no                      | no                    | stale: spends no budget                        |
//! | poison           | yes                     | any                   | stale: spends no budget                        |
//! | `t:` timeout due | no                      | (the live one)        | failed attempt `TIMEOUT`: park, FAILED, or the catchable error without a policy |
//! | `t:` timeout due | yes                     | —                     | stale residue (the park resolved it)           |
//! | `r:` park due    | yes                     | —                     | re-drive: attempt n+1, fresh key               |
//! | `r:` park due    | no                      | —                     | stale residue (the park was left)              |
//!
//! Outside the table: an answer or poison for a call the node no longer holds (the task
//! completed, was interrupted, or started a new call) is `already_completed`; for a FAILED
//! instance `instance_failed`; for an ended one `already_completed`; for a call number no
//! node of the definition holds, `already_completed` too. Every pair not in the table is
//! stale residue, never a panic.
//!
//! Re-adoption after a crash (C7a) emits nothing for a channel call: its request is a
//! durable outbox row, which the dispatcher delivers again under the same key.

use qflow_loader::model::{NodeIdx, NodeKind, Process, Task, TaskKind};
use serde::{Deserialize, Serialize};

use super::run::Run;
use crate::snapshot::{Snapshot, Status};
use crate::{codes, Attempt, AttemptOutcome, Definition, Effect, FailureKind, Input};

/// What an answer to a channel call comes to: the verdict the relay hands back to the
/// counterpart (SPEC C5), decided from durable facts alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The answer was taken: the task completes with it.
    Resumed,
    /// The attempt it answers is dead (it timed out or its delivery was poisoned); a
    /// retry is pending or already in flight. The call itself is still live: the answer
    /// to the current attempt will be taken.
    Superseded,
    /// The call is over: the task completed, was interrupted, or the instance ended.
    AlreadyCompleted,
    /// The instance is FAILED: nothing is taken until an operator resumes it.
    InstanceFailed,
    /// No such instance, or a key that does not name a call.
    Unknown,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Resumed => "resumed",
            Verdict::Superseded => "superseded",
            Verdict::AlreadyCompleted => "already_completed",
            Verdict::InstanceFailed => "instance_failed",
            Verdict::Unknown => "unknown",
        }
    }
}

/// The identity of one attempt of one call, as its idempotency key renders it:
/// `<instance>/<call>/<attempt>`. The call id is `<instance>/<call>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallKey {
    pub instance: String,
    pub call: u32,
    pub attempt: Attempt,
}

impl CallKey {
    /// The idempotency key of this attempt.
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.instance, self.call, self.attempt)
    }

    /// The call id: the same for every attempt of the call.
    pub fn call_id(&self) -> String {
        format!("{}/{}", self.instance, self.call)
    }

    /// Reads an idempotency key. The instance id is everything before the last two
    /// `/`-separated numbers, so an instance id may itself contain `/`.
    pub fn parse(key: &str) -> Option<CallKey> {
        let (rest, attempt) = key.rsplit_once('/')?;
        let (instance, call) = rest.rsplit_once('/')?;
        let number = |s: &str| {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && !s.starts_with('0'))
                .then(|| s.parse::<u32>().ok())
                .flatten()
        };
        if instance.is_empty() {
            return None;
        }
        Some(CallKey {
            instance: instance.to_owned(),
            call: number(call)?,
            attempt: Attempt::new(number(attempt)?)?,
        })
    }
}

/// The channel-call task at `idx`, with its channel's name.
pub(crate) fn channel_at(p: &Process, idx: NodeIdx) -> Option<(&Task, &str)> {
    match &p.node(idx).kind {
        NodeKind::Task(t) => match &t.kind {
            TaskKind::Channel { name } => Some((t, name)),
            _ => None,
        },
        _ => None,
    }
}

/// The node whose live call is `call`.
pub(crate) fn node_of_call(snap: &Snapshot, call: u32) -> Option<&str> {
    snap.calls
        .iter()
        .find(|(_, c)| **c == call)
        .map(|(node, _)| node.as_str())
}

/// What an answer (or a poison) for `attempt` of call `call` comes to on `snap`, and why:
/// the decision table of the module documentation. Pure; the relay asks it, and the step
/// refuses every input whose verdict is not [`Verdict::Resumed`].
pub fn verdict(
    def: &Definition,
    snap: &Snapshot,
    call: u32,
    attempt: Attempt,
) -> (Verdict, String) {
    match snap.status() {
        Status::Failed => {
            let why = "the instance is FAILED: an operator must resume it before it takes answers";
            return (Verdict::InstanceFailed, why.to_owned());
        }
        s if s.is_terminal() => {
            return (
                Verdict::AlreadyCompleted,
                format!("the instance is {}", s.as_str()),
            );
        }
        Status::New => return (Verdict::Unknown, "the instance has not started".to_owned()),
        _ => {}
    }
    let Some(node) = node_of_call(snap, call) else {
        return (
            Verdict::AlreadyCompleted,
            format!("call {call} is over: no task of the instance waits on it"),
        );
    };
    let p = &def.process;
    let is_channel = p.find(node).and_then(|i| channel_at(p, i)).is_some();
    if !is_channel || !snap.tokens().iter().any(|t| t == node) {
        return (
            Verdict::AlreadyCompleted,
            format!("call {call} of `{node}` is over"),
        );
    }
    let live = snap.attempt_in_progress(node);
    if let Some(class) = snap.marker(node) {
        return (
            Verdict::Superseded,
            format!(
                "attempt {attempt} of call {call} (`{node}`) is dead ({class}); attempt {live} \
                 is pending after a backoff, and its answer will be taken"
            ),
        );
    }
    if attempt != live {
        return (
            Verdict::Superseded,
            format!(
                "attempt {attempt} of call {call} (`{node}`) is dead; attempt {live} is in \
                 flight, and its answer will be taken"
            ),
        );
    }
    (
        Verdict::Resumed,
        format!("attempt {attempt} of call {call} (`{node}`) is live"),
    )
}

/// Why a channel input does not apply, or `None`: any verdict but `resumed`, with the
/// verdict first so that a trace and a relay read the same words.
pub(super) fn staleness(def: &Definition, snap: &Snapshot, input: &Input) -> Option<String> {
    let (call, attempt) = match input {
        Input::ChannelAnswered { call, attempt, .. }
        | Input::ChannelBpmnError { call, attempt, .. }
        | Input::ChannelPoisoned { call, attempt, .. } => (*call, *attempt),
        _ => return None,
    };
    match verdict(def, snap, call, attempt) {
        (Verdict::Resumed, _) => None,
        (v, why) => Some(format!("{}: {why}", v.as_str())),
    }
}

impl Run<'_> {
    /// Emits `attempt` of the channel call at `idx`: its request through the outbox and
    /// its timeout window. The first attempt of a visit starts a new call.
    pub(super) fn send_request(&mut self, idx: NodeIdx, attempt: Attempt) {
        let Some((task, channel)) = channel_at(self.p, idx) else {
            return;
        };
        let node_key = self.id(idx);
        let node: &str = &node_key;
        let call = match self.snap.calls.get(node) {
            Some(call) => *call,
            None => {
                let call = self.snap.incarnation.saturating_add(1);
                self.snap.incarnation = call;
                self.snap.calls.insert(node.to_string(), call);
                call
            }
        };
        let body = match self.map_inputs(idx, task) {
            Ok(inputs) => inputs,
            Err(e) => return self.fail(codes::EXPRESSION_FAILED, Some(idx), None, e),
        };
        let id = CallKey {
            instance: self.instance.to_owned(),
            call,
            attempt,
        };
        self.effects.push(Effect::SendRequest {
            node: node.to_string(),
            channel: channel.to_owned(),
            attempt,
            key: id.key(),
            call_id: id.call_id(),
            body,
        });
        self.arm_timeout(idx, task);
    }

    /// Applies a channel input that passed [`staleness`].
    pub(super) fn apply_channel(&mut self, input: Input) {
        let call = match &input {
            Input::ChannelAnswered { call, .. }
            | Input::ChannelBpmnError { call, .. }
            | Input::ChannelPoisoned { call, .. } => *call,
            _ => return,
        };
        let Some(idx) = node_of_call(&self.snap, call).and_then(|n| self.p.find(n)) else {
            return;
        };
        let attempt = self.snap.attempt_in_progress(&self.id(idx));
        match input {
            Input::ChannelAnswered { variables, .. } => {
                self.attempt_ended(idx, attempt, AttemptOutcome::Ok, None);
                self.complete_activity(idx, variables);
            }
            Input::ChannelBpmnError {
                code,
                message,
                variables,
                ..
            } => {
                let outcome = AttemptOutcome::BpmnError;
                self.attempt_ended(idx, attempt, outcome, Some((&code, &message)));
                // Answered: its request was delivered, nothing of it to withdraw.
                self.answered = Some(idx);
                self.write_vars_from(idx, variables);
                // A modelled outcome: it routes, and never spends budget.
                self.throw_from_activity(idx, Some(code), message, codes::UNCAUGHT_BPMN_ERROR);
            }
            Input::ChannelPoisoned { message, .. } => {
                let code = codes::POISONED;
                let message = if message.is_empty() {
                    "the outbox gave up delivering the request".to_owned()
                } else {
                    message
                };
                let kind = FailureKind::Poisoned;
                self.attempt_ended(idx, attempt, kind.outcome(), Some((code, &message)));
                self.attempt_failed(idx, kind, code.to_owned(), message);
            }
            _ => {}
        }
    }

    /// The attempt of the channel call at `idx` is dead: its outbox rows go in this
    /// commit (C6), so that a late delivery cannot race the re-drive into two live
    /// requests and a late poison cannot fail the attempt after it.
    pub(super) fn withdraw_requests(&mut self, idx: NodeIdx) {
        if channel_at(self.p, idx).is_none() {
            return;
        }
        let node_key = self.id(idx);
        let node: &str = &node_key;
        // Emitted in this very step (the attempt died at once): never written at all.
        self.effects
            .retain(|e| !matches!(e, Effect::SendRequest { node: n, .. } if n == node));
        self.effects.push(Effect::WithdrawRequests {
            node: node.to_string(),
        });
    }

    /// The channel call at `idx` had a request in flight (a token, no backoff window).
    pub(super) fn call_in_flight(&self, idx: NodeIdx) -> Option<Attempt> {
        channel_at(self.p, idx)?;
        let node_key = self.id(idx);
        let node: &str = &node_key;
        (self.snap.calls.contains_key(node)
            && self.snap.marker(node).is_none()
            && self.snap.tokens.iter().any(|t| t == node))
        .then(|| self.snap.attempt_in_progress(node))
    }

    /// A channel call waits again after a resume: the attempt the counter names is
    /// emitted — the live one again under the same key (a no-op when its row exists, the
    /// row again when the failing step never wrote it), or, when the instance failed in
    /// a backoff window, the pending one at once — and its timeout window opens from now.
    pub(super) fn resend_request(&mut self, idx: NodeIdx) {
        let node_key = self.id(idx);
        let node: &str = &node_key;
        self.snap.markers.remove(node);
        let attempt = self.snap.attempt_in_progress(node);
        self.send_request(idx, attempt);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_odd_ones_are_refused() {
        let k = CallKey {
            instance: "a/b".into(),
            call: 7,
            attempt: Attempt::new(3).unwrap(),
        };
        assert_eq!(k.key(), "a/b/7/3");
        assert_eq!(k.call_id(), "a/b/7");
        assert_eq!(CallKey::parse(&k.key()), Some(k));
        for bad in [
            "",
            "x",
            "x/1",
            "/1/1",
            "x/0/1",
            "x/1/0",
            "x/01/1",
            "x/1/+1",
            "x/1/-1",
            "x/1/99999999999",
            "x/a/1",
            "x//1",
        ] {
            assert_eq!(CallKey::parse(bad), None, "{bad:?}");
        }
    }
}
