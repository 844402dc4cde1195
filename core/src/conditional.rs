//! Conditional events (BPMN 2.0.2 §10.5.4, `conditionalEventDefinition`): a boundary
//! event, an intermediate catch event or the start event of an event sub-process that
//! fires when its condition becomes true (`docs/conditional-events.md`).
//!
//! When a condition is evaluated:
//!
//! - **when it is armed**: its activity entered (after the activity's input mappings), a
//!   token arriving at the catch (or at the event-based gateway it races after), its
//!   event sub-process's scope entered. A condition true then fires at once.
//! - **after a variable change**: whenever the step writes a variable — a task's
//!   outputs, a message's or a signal's variables, mappings — every armed condition
//!   whose filter lets the change through is evaluated again before the next token
//!   moves (Camunda 7 evaluates them before the execution that set the variables goes
//!   on; a sub-process whose inside sets the variable its boundary waits for is
//!   interrupted before that inside completes it). Writing a variable its current
//!   value changes nothing, as in Zeebe.
//!
//! A condition that reads a variable not set is false (Camunda 7's `tryEvaluate`,
//! FEEL's null); any other evaluation error fails the instance at the event
//! (`EXPRESSION_FAILED`), as a flow's condition does. Interrupting events and catches
//! fire on a true evaluation and their wait ends. A non-interrupting event fires when
//! its condition *becomes* true (BPMN's and Zeebe's rule): it remembers that it held
//! (`r/<event>` in the snapshot) and fires again only after an evaluation found it
//! false. Camunda 7 instead fires a non-interrupting one on every change while it
//! holds; the difference is written down in the docs.
//!
//! Nothing here runs for a model without conditional events: `Process::conditionals`
//! is empty and the step notes no variable change. Nothing here reads the clock.

use qflow_loader::model::{
    BoundaryTrigger, CatchTrigger, Conditional, NodeIdx, NodeKind, Process, StartTrigger, Variables,
};

use super::codes;
use super::instances;
use super::path::EventKind;
use super::run::Run;
use crate::snapshot::Snapshot;

/// The conditional trigger of the event at `idx`, if it has one.
pub(super) fn conditional_at(p: &Process, idx: NodeIdx) -> Option<&Conditional> {
    match &p.node(idx).kind {
        NodeKind::Boundary(b) => match &b.trigger {
            BoundaryTrigger::Conditional(c) => Some(c),
            _ => None,
        },
        NodeKind::IntermediateCatch(CatchTrigger::Conditional(c))
        | NodeKind::TriggeredStart(StartTrigger::Conditional(c)) => Some(c),
        _ => None,
    }
}

/// The conditional events armed now, in frontier order: each token's own waits (the
/// catch it stands at, the catches racing after the event-based gateway it stands at,
/// the boundary events of its activity), then the armed event sub-process starts. Each
/// comes with the gateway it races after, if any.
fn armed(p: &Process, snap: &Snapshot) -> Vec<(NodeIdx, Option<NodeIdx>)> {
    let mut found: Vec<(NodeIdx, Option<NodeIdx>)> = Vec::new();
    for t in &snap.tokens {
        let Some(idx) = p.find(t) else { continue };
        let gateway = matches!(p.node(idx).kind, NodeKind::EventBasedGateway);
        for w in instances::waits_of(p, idx) {
            if conditional_at(p, w).is_some() && !found.iter().any(|(i, _)| *i == w) {
                found.push((w, (gateway && w != idx).then_some(idx)));
            }
        }
    }
    for s in super::event_sub::armed_starts(p, snap) {
        if conditional_at(p, s).is_some() {
            found.push((s, None));
        }
    }
    found
}

/// Whether a change in `changed` (name, created) makes `c` evaluate again.
fn listens(c: &Conditional, changed: &[(String, bool)]) -> bool {
    changed.iter().any(|(name, created)| {
        (c.variables.is_empty() || c.variables.iter().any(|v| v == name))
            && if *created { c.on_create } else { c.on_update }
    })
}

impl<'a> Run<'a> {
    /// The conditional event `idx` was armed in this step: evaluated at the next
    /// checkpoint of `settle`, before the next token moves.
    pub(super) fn condition_armed(&mut self, idx: NodeIdx) {
        if conditional_at(self.p, idx).is_some() && !self.conditions_armed.contains(&idx) {
            self.conditions_armed.push(idx);
        }
    }

    /// Whether something was armed or a variable changed since the conditions were last
    /// evaluated.
    pub(super) fn conditions_due(&self) -> bool {
        !self.conditions_armed.is_empty() || !self.conditions_changed.is_empty()
    }

    /// Evaluates the armed conditions that are due (armed since, or listening to a
    /// change since) and fires those that hold, in frontier order. A firing may end
    /// other waits (an interrupted sub-process takes its inside along): each is checked
    /// to be armed still before it is evaluated.
    pub(super) fn evaluate_conditions(&mut self) {
        let fresh = std::mem::take(&mut self.conditions_armed);
        let changed = std::mem::take(&mut self.conditions_changed);
        let mut fired = false;
        for (w, gateway) in armed(self.p, &self.snap) {
            if !self.running() {
                return;
            }
            let Some(c) = conditional_at(self.p, w) else {
                continue;
            };
            let is_fresh = fresh.contains(&w);
            if !is_fresh && !listens(c, &changed) {
                continue;
            }
            if fired && !armed(self.p, &self.snap).iter().any(|(i, _)| *i == w) {
                continue;
            }
            let holds = match self.condition_holds_at(w, c) {
                Ok(h) => h,
                Err(message) => {
                    return self.fail(codes::EXPRESSION_FAILED, Some(w), None, message);
                }
            };
            fired |= self.conditional_evaluated(w, gateway, holds);
        }
    }

    /// Whether the condition of the event `w` holds over what it sees (a boundary: its
    /// activity's scope with the activity's own locals).
    fn condition_holds_at(&self, w: NodeIdx, c: &Conditional) -> Result<bool, String> {
        let vars = super::locals::event_vars(self.p, &self.snap, w);
        match c.condition.eval_bool(&vars) {
            Ok(h) => Ok(h),
            Err(_)
                if c.condition
                    .read_names()
                    .iter()
                    .any(|n| !vars.contains_key(n)) =>
            {
                Ok(false)
            }
            Err(e) => Err(format!("the condition of `{}`: {e}", self.id(w))),
        }
    }

    /// Acts on one evaluation of the armed event `w`; whether it fired.
    fn conditional_evaluated(&mut self, w: NodeIdx, gateway: Option<NodeIdx>, holds: bool) -> bool {
        let p = self.p;
        let interrupting = match &p.node(w).kind {
            NodeKind::Boundary(b) => b.interrupting,
            NodeKind::TriggeredStart(_) => p.event_start(w).is_none_or(|e| e.interrupting),
            _ => true,
        };
        if !interrupting {
            // Fires when the condition becomes true; remembers that it holds.
            // Armed afresh, it has no memory: its key went when its wait last ended
            // (`forget_conditions_of`); one kept means it stayed armed (a resume re-arms
            // what never stopped waiting).
            let key = self.id(w).into_owned();
            let held = self.snap.conditions.contains_key(&key);
            if holds {
                self.snap.conditions.insert(key, 1);
            } else {
                self.snap.conditions.remove(&key);
            }
            if !holds || held {
                return false;
            }
        } else if !holds {
            return false;
        }
        match &p.node(w).kind {
            NodeKind::Boundary(b) => {
                let host = p.attached(w, b.attached_to);
                let on = Some((host, b.interrupting));
                self.record_catch(EventKind::Conditional, w, on, None, None);
                if b.interrupting {
                    self.interrupt(host);
                }
                self.leave(w);
            }
            NodeKind::TriggeredStart(_) => {
                let Some(esp) = p.event_start(w) else {
                    return false;
                };
                self.record_event_start(EventKind::Conditional, esp, w, None, None);
                self.start_event_sub_process(esp, w, Variables::new());
            }
            _ => match gateway {
                Some(gw) => {
                    self.record_catch(EventKind::Conditional, w, None, None, None);
                    self.end_race(gw, w);
                    self.complete_activity(w, Variables::new());
                }
                None => {
                    // Every token standing at the catch goes on (two tokens there wait
                    // for the one condition).
                    let key = self.id(w);
                    let waiting = self.snap.tokens.iter().filter(|t| **t == *key).count();
                    for _ in 0..waiting {
                        self.record_catch(EventKind::Conditional, w, None, None, None);
                        self.complete_activity(w, Variables::new());
                    }
                }
            },
        }
        true
    }

    /// The wait of the activity or scope `idx` ended: what its boundary events and the
    /// starts of its event sub-processes remembered goes.
    pub(super) fn forget_conditions_of(&mut self, idx: NodeIdx) {
        let p = self.p;
        let mut gone: Vec<NodeIdx> = p
            .boundaries_of(idx.plain())
            .map(|b| p.attached(idx, b))
            .collect();
        if matches!(p.node(idx).kind, NodeKind::SubProcess) {
            gone.extend(
                p.event_sub_processes_in(Some(idx))
                    .map(|e| super::event_sub::in_scope(p, Some(idx), e).1),
            );
        }
        for w in gone {
            let key = self.id(w);
            self.snap.conditions.remove(&*key);
        }
    }

    /// Drops what non-interrupting conditional events remember once they are no longer
    /// armed (their activity or scope ended), so that the key lives only while its wait
    /// does.
    pub(super) fn forget_disarmed_conditions(&mut self) {
        if self.snap.conditions.is_empty() {
            return;
        }
        let armed: Vec<String> = armed(self.p, &self.snap)
            .into_iter()
            .map(|(w, _)| self.id(w).into_owned())
            .collect();
        self.snap.conditions.retain(|k, _| armed.contains(k));
    }
}
