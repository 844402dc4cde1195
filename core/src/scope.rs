//! Scopes and abnormal endings: sub-process completion, BPMN errors and escalations and
//! their boundaries, interruption, terminate end events, and the FAILED/completed endings.
//!
//! An error looks for a catching boundary on the activity that raised it (exact code
//! first, then catch-all), then, for each enclosing sub-process outwards, an event
//! sub-process inside it with a catching start (the inside catches first), then a
//! catching boundary on it; last the process's event sub-processes; uncaught, the
//! instance is FAILED with a structured code. An escalation looks the same way, from the
//! sub-process the throw event is in outwards; uncaught it is no failure (§10.5.5: an
//! escalation is a notice to the enclosing level, not an error), and the throw goes on.
//! An escalation an event sub-process throws goes past its siblings: the event
//! sub-processes of its own enclosing scope do not catch it (a non-interrupting
//! catch-all could start again on its own escalation, forever). An error is caught by a
//! sibling: error starts are always interrupting, so a running error event sub-process
//! has disarmed its scope and never catches its own error, while one thrown by a
//! non-interrupting event sub-process is caught beside it (as Zeebe does).
//! Nothing here reads the clock or does I/O.

use qflow_loader::model::{Boundary, BoundaryTrigger, NodeIdx, NodeKind, Process, StartTrigger};

use super::instances;
use super::path::EventKind;
use super::run::Run;
use super::timers::{TimerKind, TimerName};
use super::{codes, AttemptOutcome, Effect};
use crate::snapshot::{Failure, Status};

impl<'a> Run<'a> {
    /// Completes the first sub-process (in frontier order) with nothing left inside.
    pub(super) fn complete_finished_subprocess(&mut self) -> bool {
        let done = self.snap.tokens.iter().find_map(|t| {
            let idx = self.p.find(t)?;
            // A multi-instance body completes when its inner instances do (`multi`).
            if !matches!(self.p.node(idx).kind, NodeKind::SubProcess)
                || self.p.multi_instance(idx).is_some()
            {
                return None;
            }
            let keys = self.snap.tokens.iter().chain(self.snap.joins.keys());
            let busy = instances::first_inside(self.p, keys, idx).is_some();
            // An ad-hoc sub-process with nothing inside completes only when a path of it
            // ended in this step with its condition holding (`ad_hoc`); else it waits.
            let waits = !self.p.ad_hocs.is_empty()
                && self.p.ad_hoc(idx).is_some()
                && self.ad_hoc_verdicts.get(&idx) != Some(&true);
            (!busy && !waits).then_some(idx)
        });
        let Some(idx) = done else {
            return false;
        };
        self.ad_hoc_verdicts.remove(&idx);
        // Its output mappings are written before it leaves; a failing one fails the
        // instance with the sub-process still holding its token and locals.
        if !self.p.sub_process_mappings.is_empty() && !self.complete_locals(idx) {
            return true;
        }
        self.remove_token(idx);
        self.disarm(idx);
        self.leave(idx);
        // After leaving: an inner instance's output element sees its locals.
        self.drop_locals(idx);
        true
    }

    /// An activity raised `code`: its own error boundaries first (exact code, then
    /// catch-all), then those of the enclosing sub-processes, else FAILED `uncaught`.
    pub(super) fn throw_from_activity(
        &mut self,
        idx: NodeIdx,
        code: Option<String>,
        message: String,
        uncaught: &str,
    ) {
        self.record_throw(EventKind::Error, idx, code.as_deref(), None);
        if let Some(b) = self.catching_boundary(idx, code.as_deref()) {
            let on = Some((idx, true));
            self.record_catch(EventKind::Error, b, on, code.as_deref(), None);
            self.interrupt(idx);
            return self.leave(b);
        }
        let scope = self.scope_of(idx);
        self.propagate_error(idx, scope, code, message, uncaught);
    }

    pub(super) fn propagate_error(
        &mut self,
        origin: NodeIdx,
        mut scope: Option<NodeIdx>,
        code: Option<String>,
        message: String,
        uncaught: &str,
    ) {
        // An error thrown in an event sub-process may be caught by a sibling: error
        // starts are always interrupting (Q130), so while an error event sub-process runs
        // its scope is disarmed and it cannot catch its own error; one thrown by a
        // non-interrupting event sub-process is caught beside it, as Zeebe does.
        loop {
            if let Some((esp, start)) = self.armed_catching_start(scope, false, code.as_deref()) {
                self.record_event_start(EventKind::Error, &esp, start, code.as_deref(), None);
                return self.start_event_sub_process(&esp, start, Default::default());
            }
            let Some(sp) = scope else { break };
            if let Some(b) = self.catching_boundary(sp, code.as_deref()) {
                let on = Some((sp, true));
                self.record_catch(EventKind::Error, b, on, code.as_deref(), None);
                self.interrupt(sp);
                return self.leave(b);
            }
            scope = self.scope_of(sp);
        }
        self.record_uncaught(EventKind::Error, origin, code.as_deref());
        let detail = if uncaught == codes::UNCAUGHT_BPMN_ERROR {
            code.clone()
        } else {
            None
        };
        let message = match &code {
            Some(c) => format!("{message}: error `{c}` was not caught"),
            None => format!("{message}: error without a code was not caught"),
        };
        if uncaught == codes::UNCAUGHT_BPMN_ERROR && self.snap.parent.is_some() {
            // A called instance hands its error to its call activity and ends there, as
            // Zeebe terminates it: the parent catches it, or fails with it.
            self.escaped = Some((code, message));
            return self.cancel();
        }
        self.fail(uncaught, Some(origin), detail, message);
    }

    pub(super) fn catching_boundary(&self, host: NodeIdx, code: Option<&str>) -> Option<NodeIdx> {
        catching(
            self.p,
            host,
            |t| match t {
                BoundaryTrigger::Error { code: c } => Some(c.as_deref()),
                _ => None,
            },
            code,
        )
    }

    /// An escalation with `code` thrown by the event `origin` in `scope`: the nearest enclosing
    /// sub-process with a catching escalation boundary (exact code first, then
    /// catch-all) takes it, the shape errors propagate in. An interrupting boundary ends
    /// that sub-process (the throwing token with it); a non-interrupting one starts its
    /// path beside the running sub-process. Returns whether the throwing token lives on:
    /// `false` only when an interrupting boundary ended its scope. Uncaught, nothing
    /// happens: an escalation is never a failure.
    pub(super) fn escalate(
        &mut self,
        origin: NodeIdx,
        mut scope: Option<NodeIdx>,
        code: Option<&str>,
    ) -> bool {
        self.record_throw(EventKind::Escalation, origin, code, None);
        let mut from_event_sub = false;
        loop {
            if !from_event_sub {
                if let Some((esp, start)) = self.armed_catching_start(scope, true, code) {
                    self.record_event_start(EventKind::Escalation, &esp, start, code, None);
                    self.start_event_sub_process(&esp, start, Default::default());
                    return !esp.interrupting;
                }
            }
            let Some(sp) = scope else { break };
            if let Some(b) = self.escalation_boundary(sp, code) {
                let interrupting = matches!(
                    self.p.node(b).kind,
                    NodeKind::Boundary(Boundary {
                        interrupting: true,
                        ..
                    })
                );
                self.record_catch(
                    EventKind::Escalation,
                    b,
                    Some((sp, interrupting)),
                    code,
                    None,
                );
                if interrupting {
                    self.interrupt(sp);
                }
                self.leave(b);
                return !interrupting;
            }
            from_event_sub = self.p.event_sub_process(sp).is_some();
            scope = self.scope_of(sp);
        }
        self.record_uncaught(EventKind::Escalation, origin, code);
        // A called instance raises it at its call activity, in the parent.
        self.escalate_to_parent(code);
        true
    }

    /// An escalation a waiting activity raises itself (a user task, through the task
    /// list): its own escalation boundary first, then the enclosing sub-processes', as
    /// [`Run::escalate`] goes. The caller checked that something catches it.
    pub(super) fn escalate_from_activity(&mut self, idx: NodeIdx, code: Option<&str>) {
        if let Some(b) = self.escalation_boundary(idx, code) {
            self.record_throw(EventKind::Escalation, idx, code, None);
            let interrupting = matches!(
                self.p.node(b).kind,
                NodeKind::Boundary(Boundary {
                    interrupting: true,
                    ..
                })
            );
            let on = Some((idx, interrupting));
            self.record_catch(EventKind::Escalation, b, on, code, None);
            if interrupting {
                self.interrupt(idx);
            }
            return self.leave(b);
        }
        let scope = self.scope_of(idx);
        self.escalate(idx, scope, code);
    }

    fn escalation_boundary(&self, host: NodeIdx, code: Option<&str>) -> Option<NodeIdx> {
        catching(
            self.p,
            host,
            |t| match t {
                BoundaryTrigger::Escalation { code: c } => Some(c.as_deref()),
                _ => None,
            },
            code,
        )
    }

    /// Ends the activity at `idx` without completing it: its token, timers and retry
    /// state go; a sub-process takes everything inside it along.
    pub(super) fn interrupt(&mut self, idx: NodeIdx) {
        // Asked before the token goes: the in-flight rule reads the token.
        let in_flight = super::redrive::attempt_in_flight(self.p, &self.snap, idx)
            .map(|f| f.attempt)
            .or_else(|| self.call_in_flight(idx))
            .or_else(|| self.child_in_flight(idx))
            .filter(|_| self.attempt_reported != Some(idx));
        // A pull task's attempt is in flight while a worker holds its lock.
        let pull = super::pull::pull_at(self.p, idx).is_some();
        let locked = self.snap.lock(&self.id(idx)).map(|(w, _)| w.to_owned());
        if !self.remove_token(idx) {
            return;
        }
        if !self.snap.owed.is_empty() {
            self.handler_interrupted(idx);
        }
        if let Some(body) = self.p.body_of(idx) {
            self.record_inner(body, idx, super::path::InnerState::Cancelled);
        }
        let node_key = self.id(idx);
        let node: &str = &node_key;
        // Work this very step asked for at the node is not carried out: the handler is
        // not called and the request never written (an undelivered row is never
        // deleted, C2, but one not yet written is no row).
        self.effects.retain(|e| {
            !matches!(e, Effect::RunTask { node: n, .. } | Effect::SendRequest { node: n, .. }
                if n == node)
        });
        let interrupted = match (in_flight, &locked) {
            (Some(attempt), _) => Some((attempt, None)),
            (None, Some(w)) if self.attempt_reported != Some(idx) => {
                Some((self.snap.attempt_in_progress(node), Some(w.clone())))
            }
            _ => None,
        };
        if let Some((attempt, worker)) = interrupted {
            self.effects.push(Effect::AttemptFinished {
                node: node.to_string(),
                attempt,
                outcome: AttemptOutcome::Interrupted,
                code: None,
                message: None,
                worker,
            });
        }
        if pull && self.snap.marker(node).is_none() {
            self.withdraw_pull(idx);
        }
        // A channel call's undelivered request is abandoned with its wait (C6): the
        // counterpart never receives an instruction after the process moved on.
        if self.snap.calls.contains_key(node) && self.answered != Some(idx) {
            self.withdraw_requests(idx);
        }
        self.disarm(idx);
        self.snap.clear_retry_state(node);
        if matches!(self.p.node(idx).kind, NodeKind::SubProcess) {
            self.clear_scope(idx);
            self.forget_compensable_inside(idx);
            self.drop_locals(idx);
        }
        if self.p.multi_instance(idx).is_some() {
            self.snap.set_multi(&self.id(idx), None);
        }
    }

    /// Ends everything inside the sub-process `sp` (§13.5.3, §13.5.6): interrupts every
    /// token, drops every join arrival, and drops every arrival this step queued for a
    /// node inside it. The queued arrivals matter when the scope ends in the middle of a
    /// step: a parallel split inside it whose first flow reached a terminate or error end
    /// has already queued its siblings, and entering them would start work in a scope
    /// that no longer exists.
    pub(super) fn clear_scope(&mut self, sp: NodeIdx) {
        let p = self.p;
        self.queue
            .retain(|(node, _)| !instances::inside(p, *node, sp));
        while let Some(idx) = instances::first_inside(p, &self.snap.tokens, sp) {
            self.interrupt(idx);
        }
        self.snap
            .joins
            .retain(|gw, _| p.find(gw).is_none_or(|idx| !instances::inside(p, idx, sp)));
        // A handler run queued this step but not yet entered holds no token to interrupt;
        // what the scope's handlers still owed goes with the scope. Its recorded
        // completions stay: an interrupting event sub-process compensates them.
        if !self.snap.owed.is_empty() {
            self.snap
                .owed
                .retain(|h, _| p.find(h).is_none_or(|idx| !instances::inside(p, idx, sp)));
        }
    }

    /// A terminate end event: ends its scope at once.
    pub(super) fn terminate(&mut self, scope: Option<NodeIdx>) {
        match scope {
            Some(sp) => self.clear_scope(sp),
            None => {
                while let Some(t) = self.snap.tokens.last().cloned() {
                    if let Some(idx) = self.p.find(&t) {
                        self.interrupt(idx);
                    }
                    // A token at an id the definition lacks (a damaged snapshot) is
                    // dropped, so this loop always shrinks the frontier.
                    if self.snap.tokens.last() == Some(&t) {
                        self.snap.tokens.pop();
                    }
                }
                self.snap.joins.clear();
                self.snap.owed.clear();
                self.queue.clear();
            }
        }
    }

    /// The event-based gateway holding a token that `catch` races for, if any.
    pub(super) fn racing_gateway(&self, catch: NodeIdx) -> Option<NodeIdx> {
        self.p.node(catch).incoming.iter().find_map(|f| {
            // The gateway's token is the catch's: the same inner and activity instance.
            let source = self.p.attached(catch, self.p.flow(*f).source);
            let waits = matches!(self.p.node(source).kind, NodeKind::EventBasedGateway)
                && self.holds_token(source);
            waits.then_some(source)
        })
    }

    /// The event `winner` after the gateway `gw` happened: the token leaves the gateway
    /// and the other events' timers are resolved.
    pub(super) fn end_race(&mut self, gw: NodeIdx, winner: NodeIdx) {
        self.record_race(gw, winner);
        self.remove_token(gw);
        self.disarm(gw);
    }

    pub(super) fn unsupported(&mut self, idx: NodeIdx, what: &str) {
        let message = format!(
            "`{}` is a {what}, which this engine version cannot execute yet",
            self.id(idx)
        );
        self.fail(codes::UNSUPPORTED_ELEMENT, Some(idx), None, message);
    }

    /// The instance lands in FAILED (E6): tokens, variables and attempt counters stay
    /// for inspection and repair; every live timer is resolved.
    pub(super) fn fail(
        &mut self,
        code: &str,
        node: Option<NodeIdx>,
        detail: Option<String>,
        message: String,
    ) {
        if !self.running() {
            return;
        }
        let node = node.map(|n| self.id(n).into_owned());
        // A FAILED instance does no work: a handler this step asked for before it failed
        // is not called, and a request it emitted is not written (the attempt stays in
        // flight in the snapshot, as a crash would leave it, and a resume re-adopts it
        // or emits the request again under its key).
        self.effects
            .retain(|e| !matches!(e, Effect::RunTask { .. } | Effect::SendRequest { .. }));
        self.withdraw_all_pulls();
        // What a resume must not arm again, and how far each live cycle had got: read
        // before the timers go.
        self.snap.spent = self.spent_timers(node.as_deref());
        let cycles = std::mem::take(&mut self.snap.cycles);
        self.resolve_all_timers();
        self.snap.cycles = cycles;
        self.snap.status = Status::Failed;
        self.snap.set_failure(Failure {
            code: code.to_owned(),
            node: node.clone(),
            detail,
        });
        self.effects.push(Effect::OpenIncident {
            node: node.clone().unwrap_or_default(),
            code: code.to_owned(),
            message,
        });
        self.effects.push(Effect::Failed {
            code: code.to_owned(),
            node,
        });
        self.queue.clear();
    }

    /// The non-interrupting timers of the instance's waits — boundaries of its tokens,
    /// timer starts of its armed event sub-processes — that are not live: they fired for
    /// good (a one-shot that fired, a cycle that ran out). A resume re-arms every other
    /// timer of its waits from the resume instant, and these not at all. A timer at the
    /// failing node is left out: its own failure (a computed timer that did not evaluate)
    /// may be why it is not live.
    fn spent_timers(&self, failed: Option<&str>) -> Vec<String> {
        let timer_of = |idx: NodeIdx| match &self.p.node(idx).kind {
            NodeKind::Boundary(b) if !b.interrupting => {
                matches!(b.trigger, BoundaryTrigger::Timer(_))
            }
            NodeKind::TriggeredStart(StartTrigger::Timer(_)) => {
                self.p.event_start(idx).is_some_and(|e| !e.interrupting)
            }
            _ => false,
        };
        let mut waits: Vec<NodeIdx> = Vec::new();
        for t in &self.snap.tokens {
            if let Some(host) = self.p.find(t) {
                waits.extend(
                    self.p
                        .boundaries_of(host.plain())
                        .map(|b| self.p.attached(host, b)),
                );
            }
        }
        waits.extend(super::event_sub::armed_starts(self.p, &self.snap));
        let mut spent: Vec<String> = waits
            .into_iter()
            .filter(|w| timer_of(*w))
            .map(|w| self.id(w).into_owned())
            .filter(|w| Some(w.as_str()) != failed)
            .map(|w| TimerName::new(TimerKind::Boundary, &w).as_str().to_owned())
            .filter(|name| !self.snap.timers.contains_key(name))
            .collect();
        spent.sort();
        spent.dedup();
        spent
    }

    pub(super) fn complete(&mut self) {
        self.resolve_all_timers();
        // No sub-process instance is left, so none of their locals is.
        self.snap.locals.clear();
        self.snap.cycles.clear();
        self.snap.compensable.clear();
        self.snap.owed.clear();
        self.snap.conditions.clear();
        self.snap.status = Status::Completed;
        self.effects.push(Effect::Completed);
    }
}

/// The boundary of `host` that catches `code`: the first (in document order) whose code
/// `code_of` reads as equal, else the first catch-all (`Some(None)`); boundaries of
/// another kind read as `None`.
fn catching(
    p: &Process,
    host: NodeIdx,
    code_of: impl Fn(&BoundaryTrigger) -> Option<Option<&str>>,
    code: Option<&str>,
) -> Option<NodeIdx> {
    let mut catch_all = None;
    for b in p.boundaries_of(host.plain()).map(|b| p.attached(host, b)) {
        let NodeKind::Boundary(bd) = &p.node(b).kind else {
            continue;
        };
        match code_of(&bd.trigger) {
            Some(Some(c)) if Some(c) == code => return Some(b),
            Some(None) if catch_all.is_none() => catch_all = Some(b),
            _ => {}
        }
    }
    catch_all
}

/// The escalation boundary (or event sub-process start) that catches `code` raised by
/// the activity `idx` itself: its own boundary, else, outwards, an event sub-process of
/// each enclosing scope, then that sub-process's boundary — the order [`Run::escalate`]
/// looks in. (Read off the model alone: whether a scope is armed is the step's
/// question.)
pub(super) fn escalation_catcher(p: &Process, idx: NodeIdx, code: Option<&str>) -> Option<NodeIdx> {
    fn of(t: &BoundaryTrigger) -> Option<Option<&str>> {
        match t {
            BoundaryTrigger::Escalation { code: c } => Some(c.as_deref()),
            _ => None,
        }
    }
    if let Some(b) = catching(p, idx, of, code) {
        return Some(b);
    }
    let mut scope = p.scope_instance(idx);
    let mut from_event_sub = false;
    loop {
        if !from_event_sub {
            if let Some(e) = super::event_sub::catching_start(p, scope, true, code) {
                return Some(e.start);
            }
        }
        let sp = scope?;
        if let Some(b) = catching(p, sp, of, code) {
            return Some(b);
        }
        from_event_sub = p.event_sub_process(sp).is_some();
        scope = p.scope_instance(sp);
    }
}
