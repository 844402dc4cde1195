//! Compensation (BPMN §10.5.5, as Zeebe 8 runs it; `docs/compensation.md`): an activity
//! with a compensation boundary is recorded each time it completes (`g`); a compensation
//! throw or end event takes the recorded completions of its scope (all of them, or only
//! its `activityRef`'s), starts the handler of each, and waits — its token stays at the
//! throw — until every handler run it started has ended (`z/<handler>`).
//!
//! A handler is a task with no sequence flows: it is entered like any node and ends in
//! `leave`'s no-outgoing-flow arm, which starts the handler's next owed run (one run of a
//! handler at a time: its attempt counter, timers and task row are per node) and lets a
//! throw that is owed nothing more go on. Completions recorded inside a sub-process are
//! dropped when the sub-process ends; a throw compensates only its own scope (for a throw
//! in an event sub-process: the scope around it). Nothing here reads the clock or does I/O.

use qflow_loader::model::{EndKind, NodeIdx, NodeKind, ThrowTrigger};

use super::codes;
use super::path::EventKind;
use super::run::Run;
use crate::Attempt;

/// Most completions of compensable activities an instance keeps for a throw to take
/// (`g`): a compensable activity entered with this many recorded fails the instance with
/// `COMPENSATION_LIMIT` instead of starting.
pub const COMPENSABLE_MAX: usize = 1_000;

impl<'a> Run<'a> {
    /// A token enters `idx`: a compensable activity is refused its start, failing the
    /// instance, when `COMPENSABLE_MAX` completions already wait for a throw — before it
    /// does any work, so a resume does not find work done twice. (Activities already
    /// running still record their completion: the bound is exceeded by at most the
    /// activities running at once.)
    pub(super) fn compensation_limit_reached(&mut self, idx: NodeIdx) -> bool {
        if idx.instance() != 0
            || self.p.compensation(idx).is_none()
            || self.snap.compensable.len() < COMPENSABLE_MAX
        {
            return false;
        }
        let message = format!(
            "`{}` would start with {COMPENSABLE_MAX} completions of compensable activities \
             already waiting for a compensation throw (a loop around a compensable \
             activity with no throw in it?)",
            self.id(idx)
        );
        self.fail(codes::COMPENSATION_LIMIT, Some(idx), None, message);
        true
    }

    /// `idx` completed and its token leaves it: record it when it has a compensation
    /// boundary, and drop what a completed sub-process recorded inside it.
    pub(super) fn compensation_completed(&mut self, idx: NodeIdx) {
        if matches!(self.p.node(idx).kind, NodeKind::SubProcess) {
            self.forget_compensable_inside(idx);
        }
        if idx.instance() == 0 && self.p.compensation(idx).is_some() {
            // Recorded under the activity's name, whichever of its instances completed:
            // two completions are two entries, and each is compensated.
            let key = self.id(idx.uncopied()).into_owned();
            self.snap.compensable.push(key);
        }
    }

    /// Takes back the completion of `idx` that `leave` has just recorded (a
    /// multi-instance body that did not complete every inner instance).
    pub(super) fn unrecord_completion(&mut self, idx: NodeIdx) {
        if self.p.compensation(idx).is_none() {
            return;
        }
        let key = self.id(idx.uncopied());
        if let Some(at) = self.snap.compensable.iter().rposition(|k| *k == *key) {
            self.snap.compensable.remove(at);
        }
    }

    /// After a resume: a handler owed runs that holds no token was queued to start in the
    /// step that failed, and the failure dropped the queue; it starts now. `failed` (the
    /// node the resume itself runs again) is left out.
    pub(super) fn restart_owed_handlers(&mut self, failed: Option<NodeIdx>) {
        if self.snap.owed.is_empty() {
            return;
        }
        let idle: Vec<NodeIdx> = self
            .snap
            .owed
            .keys()
            .filter(|h| !self.snap.tokens.contains(h))
            .filter_map(|h| self.p.find(h))
            .filter(|h| Some(*h) != failed)
            .collect();
        for h in idle {
            self.queue.push_back((h, None));
        }
    }

    /// Drops the recorded completions of activities inside the sub-process `sp`: they
    /// cannot be compensated once it has ended.
    pub(super) fn forget_compensable_inside(&mut self, sp: NodeIdx) {
        if self.snap.compensable.is_empty() {
            return;
        }
        let p = self.p;
        self.snap.compensable.retain(|k| {
            p.find(k)
                .is_none_or(|n| !super::instances::inside(p, n, sp))
        });
    }

    /// The scope a compensation thrown at `throw` compensates: the throw's own, or the
    /// one around the event sub-process the throw is in.
    fn compensation_scope(&self, throw: NodeIdx) -> Option<NodeIdx> {
        let scope = self.scope_of(throw);
        match scope {
            Some(s) if self.p.event_sub_process(s).is_some() => self.scope_of(s),
            _ => scope,
        }
    }

    /// A token entered the compensation throw or end event `throw`: starts the handler of
    /// every recorded completion it compensates, newest first. Returns whether the token
    /// waits at `throw` for them; `false` (nothing to compensate) means it goes on now.
    pub(super) fn compensate(&mut self, throw: NodeIdx, activity: Option<NodeIdx>) -> bool {
        let target = activity.map(|a| self.id(a).into_owned());
        self.record_throw(EventKind::Compensation, throw, None, target.as_deref());
        let scope = self.compensation_scope(throw);
        let p = self.p;
        let mut picked: Vec<NodeIdx> = Vec::new();
        self.snap.compensable.retain(|k| {
            let Some(n) = p.find(k) else { return true };
            let hit = p.node(n).scope == scope && activity.is_none_or(|a| a == n);
            if hit {
                picked.push(n);
            }
            !hit
        });
        if picked.is_empty() {
            return false;
        }
        let throw_key = self.id(throw).into_owned();
        for host in picked.into_iter().rev() {
            let Some(c) = self.p.compensation(host).copied() else {
                continue;
            };
            self.record_catch(
                EventKind::Compensation,
                c.boundary,
                Some((host, false)),
                None,
                None,
            );
            let handler = self.id(c.handler).into_owned();
            let owed = self.snap.owed.entry(handler).or_default();
            owed.push(throw_key.clone());
            if owed.len() == 1 {
                self.queue.push_back((c.handler, None));
            }
        }
        self.add_token(throw);
        true
    }

    /// The node `idx`, which has no outgoing flow, was left: if it is a compensation
    /// handler, its run ended — start its next owed run, and let the throw it ran for go
    /// on when that throw is owed nothing more.
    pub(super) fn handler_finished(&mut self, idx: NodeIdx) {
        let key = self.id(idx);
        let Some(owed) = self.snap.owed.get_mut(key.as_ref()) else {
            return;
        };
        let throw = if owed.is_empty() {
            None
        } else {
            Some(owed.remove(0))
        };
        if owed.is_empty() {
            self.snap.owed.remove(key.as_ref());
        } else {
            // The next run's attempts number on from this one's, so that a late or
            // repeated report of this run's attempt is stale for the next.
            if let Some((node, attempt)) = self.finished_run.take() {
                if node == idx {
                    self.next_runs.push((idx, attempt));
                }
            }
            self.queue.push_back((idx, None));
        }
        let Some(throw) = throw else { return };
        if self.snap.owed.values().any(|l| l.contains(&throw)) {
            return;
        }
        let Some(t) = self.p.find(&throw) else { return };
        // Every token waiting there goes on: two tokens that reached the throw at
        // different times share its name in `z/`, so both wait for the last run either
        // owed. None is left when the throw was interrupted meanwhile.
        while self.remove_token(t) {
            match &self.p.node(t).kind {
                NodeKind::IntermediateThrow(ThrowTrigger::Compensation { .. }) => self.leave(t),
                // A compensation end event: the token ends now that its handlers have.
                NodeKind::EndEvent(EndKind::Compensation { .. }) => {}
                _ => {}
            }
        }
    }

    /// The first attempt of a registered task entered now: 1, or for a compensation
    /// handler's next owed run the number after the attempts its previous run used, with
    /// those attempts set aside from the budget (`b/<handler>`, as a budget reset does).
    pub(super) fn handler_run_attempt(&mut self, idx: NodeIdx) -> Attempt {
        let Some(at) = self.next_runs.iter().position(|(n, _)| *n == idx) else {
            return Attempt::FIRST;
        };
        let (_, used) = self.next_runs.remove(at);
        let Some(next) = Attempt::new(used.saturating_add(1)) else {
            return Attempt::FIRST;
        };
        let key = self.id(idx).into_owned();
        self.snap.set_attempt(&key, next);
        self.snap.set_budget_base(&key, used);
        next
    }

    /// A handler run was interrupted (its scope ended): the runs it still owed are not
    /// made (an interrupted handler is not started again, as in Zeebe).
    pub(super) fn handler_interrupted(&mut self, idx: NodeIdx) {
        let key = self.id(idx);
        self.snap.owed.remove(key.as_ref());
    }
}
