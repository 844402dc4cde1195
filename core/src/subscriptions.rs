//! Message subscriptions: correlation keys (SPEC O1, "correlate a message by name and a
//! correlation key").
//!
//! A message whose declaration carries a correlation key (`q:correlationKey`, or Zeebe's
//! `zeebe:subscription`) is correlated by name *and* key: a token waiting for it — at a
//! receive task, a message catch event, a message catch racing after an event-based
//! gateway, an activity with a message boundary event, or the message start of an event
//! sub-process while its enclosing scope is armed — opens a subscription under
//! the key's value, evaluated over the instance
//! variables when the wait begins. The snapshot keeps it (`c/<node>`), and the step
//! reports it to the shell ([`Effect::Subscribe`] / [`Effect::Unsubscribe`]), which keeps
//! a subscription row per waiting node so that a message published with a name and a key
//! finds its instance without reading any snapshot.
//!
//! One rule keeps the rows and the snapshot in step: after every applied input,
//! [`Run::sync_subscriptions`] makes the open subscriptions exactly the keyed waits of a
//! running instance. Every ending of a wait — the message came, a boundary interrupted
//! the task, the gateway's race was won by a timer, a terminate end, a migration that
//! renamed the node, the instance completing, failing or being cancelled — closes its
//! subscription there, without each of those paths knowing about messages. A resumed
//! instance opens its waits' subscriptions again, with keys evaluated afresh.
//!
//! A signal wait — a signal catch event, a signal catch racing after an event-based
//! gateway, an activity's signal boundary, the signal start of an armed event
//! sub-process — holds a subscription too, under the empty
//! key (a message's key never is empty): a broadcast of the signal finds every waiting
//! instance by the name alone.
//!
//! A definition without correlation keys and signal waits never reaches past the first
//! check: its snapshots and effects are exactly what they were before subscriptions
//! existed.

use qflow_loader::model::{
    Boundary, BoundaryTrigger, CatchTrigger, NodeIdx, NodeKind, Process, StartTrigger, Task,
    TaskKind,
};
use serde_json::Value as Json;

use super::instances;
use super::run::Run;
use super::{codes, Effect};

/// The longest correlation key, in characters (so at most 256 bytes of UTF-8: keys are
/// row keys in every store). A key may not hold control characters either: the API
/// refuses them, so a wait subscribed under one could never be reached.
pub const CORRELATION_KEY_CHARS_MAX: usize = 64;

/// What a subscription row waits for.
#[derive(Clone, Copy)]
enum Wait<'a> {
    /// A message with a correlation key: the row has the key's value.
    Message(&'a str),
    /// A signal: the row has the empty key (a correlation key is never empty), so a
    /// broadcast finds every wait for the signal by `(name, "")`.
    Signal(&'a str),
}

impl<'a> Run<'a> {
    /// Makes the open subscriptions exactly the keyed message waits of the instance (none
    /// unless it is running): closes the others, opens the missing ones. A key that does
    /// not evaluate fails the instance (`EXPRESSION_FAILED`), which then has none.
    pub(super) fn sync_subscriptions(&mut self) {
        if self.def.correlation_keys.is_empty()
            && !self.def.waits_for_signals
            && self.snap.subscriptions.is_empty()
        {
            return;
        }
        let mut wanted = if self.running() {
            self.keyed_waits()
        } else {
            Vec::new()
        };
        let mut opened = Vec::new();
        for (idx, wait) in &wanted {
            if self.snap.subscriptions.contains_key(&*self.id(*idx)) {
                continue;
            }
            let message = match wait {
                // A signal's subscription has the empty key, which no message has.
                Wait::Signal(name) => {
                    opened.push((*idx, *name, String::new()));
                    continue;
                }
                Wait::Message(message) => message,
            };
            match self.correlation_key(message, *idx) {
                Ok(key) => opened.push((*idx, *message, key)),
                Err(why) => {
                    let message = format!("the correlation key of message `{message}`: {why}");
                    self.fail(codes::EXPRESSION_FAILED, Some(*idx), None, message);
                    wanted.clear();
                    opened.clear();
                    break;
                }
            }
        }
        let closed: Vec<String> = self
            .snap
            .subscriptions
            .keys()
            .filter(|node| !wanted.iter().any(|(idx, _)| self.id(*idx) == node.as_str()))
            .cloned()
            .collect();
        for node in closed {
            self.close_subscription(&node);
        }
        for (idx, message, key) in opened {
            let node = self.id(idx).into_owned();
            self.snap.subscriptions.insert(node.clone(), key.clone());
            self.effects.push(Effect::Subscribe {
                node,
                message: message.to_owned(),
                key,
            });
        }
    }

    /// Closes the subscription open at `node`, if any.
    pub(super) fn close_subscription(&mut self, node: &str) {
        if self.snap.subscriptions.remove(node).is_some() {
            self.effects.push(Effect::Unsubscribe {
                node: node.to_owned(),
            });
        }
    }

    /// The waits a subscription row stands for, in frontier order, one per node: a
    /// message with a correlation key — a token at a receive task or message catch, at
    /// an event-based gateway for each message catch after it, at an activity for its
    /// message boundaries — and likewise every signal wait.
    fn keyed_waits(&self) -> Vec<(NodeIdx, Wait<'a>)> {
        let keyed = |idx: NodeIdx| {
            awaited_message(self.p, idx)
                .filter(|m| self.def.correlation_keys.contains_key(*m))
                .map(|m| (idx, Wait::Message(m)))
        };
        let signal = |idx: NodeIdx| awaited_signal(self.p, idx).map(|s| (idx, Wait::Signal(s)));
        let mut waits: Vec<(NodeIdx, Wait<'a>)> = Vec::new();
        for token in &self.snap.tokens {
            let Some(idx) = self.p.find(token) else {
                continue;
            };
            let messages = message_waits(self.p, idx).into_iter().filter_map(keyed);
            let signals = signal_waits(self.p, idx).into_iter().filter_map(signal);
            for w in messages.chain(signals) {
                if !waits.iter().any(|(i, _)| *i == w.0) {
                    waits.push(w);
                }
            }
        }
        // The event sub-processes armed now wait too, for as long as their scope is
        // armed.
        for s in super::event_sub::armed_starts(self.p, &self.snap) {
            if let Some(w) = keyed(s).or_else(|| signal(s)) {
                waits.push(w);
            }
        }
        waits
    }

    /// The correlation key of `message` for the node `at` (the wait, or the sender),
    /// evaluated over the instance variables — with the locals of the scopes `at` runs
    /// in over them (`locals::event_vars`): a string as it is, an integer in decimal; anything else is
    /// refused.
    pub(super) fn correlation_key(&self, message: &str, at: NodeIdx) -> Result<String, String> {
        let Some(expr) = self.def.correlation_keys.get(message) else {
            return Err("the message declares no correlation key".to_owned());
        };
        let vars = super::locals::event_vars(self.p, &self.snap, at);
        let key = match expr.eval(&vars).map_err(|e| e.to_string())? {
            Json::String(s) => s,
            Json::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
            other => {
                return Err(format!(
                    "`{}` gave {}, not a string or an integer",
                    expr.source(),
                    kind_of(&other)
                ))
            }
        };
        let chars = key.chars().count();
        if chars == 0 || chars > CORRELATION_KEY_CHARS_MAX {
            return Err(format!(
                "`{}` gave a key of {chars} characters; a key has 1 to \
                 {CORRELATION_KEY_CHARS_MAX}",
                expr.source()
            ));
        }
        if key.chars().any(char::is_control) {
            return Err(format!(
                "`{}` gave a key with a control character",
                expr.source()
            ));
        }
        Ok(key)
    }
}

fn kind_of(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a non-integral number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a map",
    }
}

/// The message a receive task, message catch event, message boundary event or message
/// start of an event sub-process at `idx` waits for.
pub(super) fn awaited_message(p: &Process, idx: NodeIdx) -> Option<&str> {
    match &p.node(idx).kind {
        NodeKind::TriggeredStart(StartTrigger::Message { name }) if p.node(idx).scope.is_some() => {
            Some(name)
        }
        NodeKind::Task(Task {
            kind: TaskKind::Receive { message },
            ..
        }) => message.as_deref(),
        NodeKind::IntermediateCatch(CatchTrigger::Message { name }) => Some(name),
        NodeKind::Boundary(Boundary {
            trigger: BoundaryTrigger::Message { name },
            ..
        }) => Some(name),
        _ => None,
    }
}

/// The signal a signal catch event, signal boundary event or signal start of an event
/// sub-process at `idx` waits for.
pub(super) fn awaited_signal(p: &Process, idx: NodeIdx) -> Option<&str> {
    match &p.node(idx).kind {
        NodeKind::TriggeredStart(StartTrigger::Signal { name }) if p.node(idx).scope.is_some() => {
            Some(name)
        }
        NodeKind::IntermediateCatch(CatchTrigger::Signal { name }) => Some(name),
        NodeKind::Boundary(Boundary {
            trigger: BoundaryTrigger::Signal { name },
            ..
        }) => Some(name),
        _ => None,
    }
}

/// The message waits a token at `idx` holds open, in `instances::waits_of` order.
pub(super) fn message_waits(p: &Process, idx: NodeIdx) -> Vec<NodeIdx> {
    let mut waits = instances::waits_of(p, idx);
    waits.retain(|w| awaited_message(p, *w).is_some());
    waits
}

/// The signal waits a token at `idx` holds open, in `instances::waits_of` order.
pub(super) fn signal_waits(p: &Process, idx: NodeIdx) -> Vec<NodeIdx> {
    let mut waits = instances::waits_of(p, idx);
    waits.retain(|w| awaited_signal(p, *w).is_some());
    waits
}
