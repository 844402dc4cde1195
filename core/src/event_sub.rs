//! Event sub-processes (BPMN 2.0.2 §10.3.5, §13.5.x): a `subProcess
//! triggeredByEvent="true"` inside the process or an embedded sub-process, entered by the
//! trigger of its one start event while its enclosing scope is active.
//!
//! An event sub-process's start is handled as a boundary event on its enclosing scope,
//! with the same machinery: its timer is a `b:<start>` row armed when the scope is
//! entered (by `arm_boundaries` for a sub-process, at `Start` for the process) and
//! resolved with the scope (`disarm`, or the instance's end); its message or signal wait
//! is a subscription row (`c/<start>`) the sync opens while the scope is armed; errors and
//! escalations thrown in the scope look for it on their way out (`scope.rs`), before the
//! boundary events of the scope — the event sub-process inside catches first.
//!
//! Triggered, a token enters the event sub-process node (as an embedded sub-process) and
//! leaves its start event. An interrupting one first ends everything else in the scope —
//! with the cancellation an interrupting boundary does (attempts reported interrupted,
//! timers, backoff parks, pull offers, user tasks and channel requests withdrawn) — and
//! disarms the scope's other triggers; when it completes, the scope has no token left and
//! completes as any sub-process does (the process: the instance completes). A
//! non-interrupting one runs beside and may fire again.
//!
//! Whether a scope is armed is read off the tokens, never stored: the scope is live (the
//! instance is running; a token stands at the sub-process) and no interrupting event
//! sub-process of it holds a token. So a process without event sub-processes writes no
//! new key, and one with them writes only the timer, cycle and subscription keys
//! boundaries write. Nothing here reads the clock or does I/O.

use qflow_loader::model::{EventSubProcess, NodeIdx, Process, StartTrigger, Variables};

use super::path::EventKind;
use super::run::Run;
use super::timers::{TimerKind, TimerName};
use crate::snapshot::{Snapshot, Status};

/// The event sub-process `e` and its start as they stand in the instance `scope` of
/// their enclosing sub-process (`None`: the process): named in that instance's runs
/// (`docs/activity-instances.md`), the event sub-process's own first run.
pub(super) fn in_scope(
    p: &Process,
    scope: Option<NodeIdx>,
    e: &EventSubProcess,
) -> (NodeIdx, NodeIdx) {
    let node = match scope {
        Some(sp) => p.child(sp, e.node),
        None => e.node,
    };
    (node, p.child(node, e.start))
}

/// Is `scope` (`None`: the process) live, with its event sub-processes armed?
pub(super) fn armed(p: &Process, snap: &Snapshot, scope: Option<NodeIdx>) -> bool {
    let holds = |idx: NodeIdx| {
        let key = p.key(idx);
        snap.tokens.iter().any(|t| *t == *key)
    };
    let live = match scope {
        None => snap.status == Status::Running,
        Some(sp) => holds(sp),
    };
    live && !p
        .event_sub_processes_in(scope)
        .any(|e| e.interrupting && holds(in_scope(p, scope, e).0))
}

/// The start events of event sub-processes armed now, in order: the process's, then
/// those of each sub-process holding a token, in frontier order. (Error and escalation
/// starts are among them; callers keep the triggers they wait for.)
pub(super) fn armed_starts(p: &Process, snap: &Snapshot) -> Vec<NodeIdx> {
    if p.event_sub_processes.is_empty() {
        return Vec::new();
    }
    let mut scopes: Vec<Option<NodeIdx>> = vec![None];
    for t in &snap.tokens {
        if let Some(idx) = p.find(t) {
            if p.event_sub_processes
                .iter()
                .any(|e| p.node(e.node).scope == Some(idx.plain()))
                && !scopes.contains(&Some(idx))
            {
                scopes.push(Some(idx));
            }
        }
    }
    scopes
        .into_iter()
        .filter(|s| armed(p, snap, *s))
        .flat_map(|s| {
            p.event_sub_processes_in(s)
                .map(move |e| in_scope(p, s, e).1)
        })
        .collect()
}

/// The event sub-process of `scope` whose start catches an error (`escalation: false`)
/// or an escalation with `code`: the first whose code equals it, else the first
/// catch-all, in document order — the rule boundaries follow.
pub(super) fn catching_start<'p>(
    p: &'p Process,
    scope: Option<NodeIdx>,
    escalation: bool,
    code: Option<&str>,
) -> Option<&'p EventSubProcess> {
    let mut catch_all = None;
    for e in p.event_sub_processes_in(scope) {
        let caught = match p.start_trigger(e.start) {
            Some(StartTrigger::Error { code }) if !escalation => code.as_deref(),
            Some(StartTrigger::Escalation { code }) if escalation => code.as_deref(),
            _ => continue,
        };
        match caught {
            Some(c) if Some(c) == code => return Some(e),
            None if catch_all.is_none() => catch_all = Some(e),
            _ => {}
        }
    }
    catch_all
}

impl<'a> Run<'a> {
    /// The event sub-process of `scope` catching an error or escalation with `code`, if
    /// the scope is armed.
    pub(super) fn armed_catching_start(
        &self,
        scope: Option<NodeIdx>,
        escalation: bool,
        code: Option<&str>,
    ) -> Option<(EventSubProcess, NodeIdx)> {
        if self.p.event_sub_processes.is_empty() || !armed(self.p, &self.snap, scope) {
            return None;
        }
        let e = catching_start(self.p, scope, escalation, code)?;
        Some((e.clone(), in_scope(self.p, scope, e).1))
    }

    /// Arms the timer starts of the event sub-processes of `scope`, as `arm_boundaries`
    /// arms an activity's timer boundaries: every due first; if a computed one does not
    /// evaluate, the instance has failed, nothing is armed, and the caller stops
    /// (`false`).
    #[must_use]
    pub(super) fn arm_event_starts(&mut self, scope: Option<NodeIdx>) -> bool {
        if self.p.event_sub_processes.is_empty() || !armed(self.p, &self.snap, scope) {
            return true;
        }
        let starts: Vec<NodeIdx> = self
            .p
            .event_sub_processes_in(scope)
            .map(|e| in_scope(self.p, scope, e).1)
            .collect();
        let mut dues = Vec::new();
        for &s in &starts {
            if let Some(StartTrigger::Timer(timer)) = self.p.start_trigger(s) {
                match self.due_at(s, timer) {
                    Some(due) => dues.push((s, due)),
                    None => return false,
                }
            }
        }
        for (s, due) in dues {
            let name = TimerName::new(TimerKind::Boundary, &self.id(s));
            // A resume does not arm again what had fired for good before the failure.
            if !self.snap.spent.iter().any(|t| t == name.as_str()) {
                self.arm(name, due);
            }
        }
        if !self.p.conditionals.is_empty() {
            for s in starts {
                self.condition_armed(s);
            }
        }
        true
    }

    /// Resolves the timer starts of the event sub-processes of `scope`.
    pub(super) fn disarm_event_starts(&mut self, scope: Option<NodeIdx>) {
        if self.snap.timers.is_empty() {
            return;
        }
        let starts: Vec<NodeIdx> = self
            .p
            .event_sub_processes_in(scope)
            .map(|e| in_scope(self.p, scope, e).1)
            .collect();
        for s in starts {
            self.resolve(&TimerName::new(TimerKind::Boundary, &self.id(s)));
        }
    }

    /// Records the catch of `event` at `start`, the start of `esp` as it stands in its
    /// enclosing scope's instance.
    pub(super) fn record_event_start(
        &mut self,
        event: EventKind,
        esp: &EventSubProcess,
        start: NodeIdx,
        code: Option<&str>,
        name: Option<&str>,
    ) {
        let scope = self
            .p
            .scope_instance(start)
            .and_then(|e| self.p.scope_instance(e));
        self.record_catch_in(event, start, scope, esp.interrupting, code, name);
    }

    /// The trigger of `esp` fired at `start` (its start as it stands in its enclosing
    /// scope's instance): an interrupting one ends everything else in that scope and
    /// disarms the scope's other triggers; then the event's variables join the
    /// instance's and a token enters the event sub-process at its start. A
    /// non-interrupting one triggered while an earlier run of it works runs beside it, as
    /// its next activity instance (`<esp>@2`, with an inside of its own).
    pub(super) fn start_event_sub_process(
        &mut self,
        esp: &EventSubProcess,
        start: NodeIdx,
        variables: Variables,
    ) {
        let first = self.p.scope_instance(start).unwrap_or(esp.node);
        let scope = self.p.scope_instance(first);
        if esp.interrupting {
            // The same ending a terminate end event gives the scope: every token in it
            // interrupted, its joins and queued arrivals dropped.
            self.terminate(scope);
            self.disarm_event_starts(scope);
        }
        let Some(node) = self.arriving_instance(first) else {
            return;
        };
        self.write_vars_from(start, variables);
        self.add_token(node);
        // Its own nested event sub-processes are armed now.
        if !self.arm_event_starts(Some(node)) {
            return;
        }
        self.queue.push_back((self.p.child(node, esp.start), None));
    }

    /// The timer start `b:<start>` of `esp` fired: a non-interrupting cycle is armed
    /// again for its next repetition, then the event sub-process starts.
    pub(super) fn event_timer_fired(
        &mut self,
        esp: EventSubProcess,
        start: NodeIdx,
        name: TimerName,
    ) {
        let Some(StartTrigger::Timer(timer)) = self.p.start_trigger(esp.start) else {
            return;
        };
        self.record_event_start(EventKind::Timer, &esp, start, None, Some(name.as_str()));
        if !esp.interrupting && !self.rearm_cycle(start, timer, name) {
            return;
        }
        self.start_event_sub_process(&esp, start, Variables::new());
    }
}
