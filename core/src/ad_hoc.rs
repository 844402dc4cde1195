//! Ad-hoc sub-processes (`adHocSubProcess`, BPMN 2.0.2 §10.3.4), run as Camunda 8 runs
//! their BPMN implementation (`docs/ad-hoc-sub-processes.md`; Zeebe's
//! `AdHocSubProcessProcessor` and `BpmnAdHocSubProcessBehavior`).
//!
//! An ad-hoc sub-process is a `NodeKind::SubProcess` without start events: everything
//! a sub-process instance has — its token, its inside named under its instance, its
//! boundaries, its event sub-processes, its locals `l/<instance>` — it has too, and
//! `scope` interrupts it and `locals` maps it as any other. What differs lives here:
//!
//! - **Entry** ([`Run::enter_ad_hoc`]): after its input mappings, the active elements
//!   collection is evaluated inside it, and each element it names (directly inside, with
//!   no incoming flow) is entered, in the list's order, as an activity instance of its
//!   own. An empty list, or none, activates nothing: the instance waits.
//! - **A path ends** ([`Run::ad_hoc_path_completed`]): an element directly inside it
//!   completes with no outgoing flow. Its completion condition is evaluated then, inside
//!   it; the verdict (true without a condition) is kept for the rest of the step, and a
//!   true one with `cancelRemainingInstances` ends everything still inside at once.
//!   `scope::complete_finished_subprocess` completes an ad-hoc instance only when its
//!   inside is empty *and* the step's latest verdict for it is true.
//! - **Nothing can move it** (`stall::idle_scope`): Zeebe leaves an ad-hoc instance
//!   with nothing active and a condition that did not hold (or an empty activation)
//!   waiting for an activation through its API, which qflow does not have. When every
//!   token that is not a sub-process with something inside is such an instance (or a
//!   sub-process holding only join arrivals), and no boundary or event sub-process
//!   could still end one, the instance fails `AD_HOC_IDLE` (`stall`) instead of
//!   waiting for ever.
//!
//! It never writes state of its own into the snapshot: the verdicts are the step's
//! (`Run::ad_hoc_verdicts`), so a model without ad-hoc sub-processes, and one with them,
//! persist exactly the keys a sub-process does.

use qflow_loader::model::{AdHoc, NodeIdx};
use serde_json::Value as Json;

use super::codes;
use super::locals::inside_vars;
use super::run::Run;

/// The most elements one evaluation of an active elements collection may activate. Each
/// becomes an activity instance (itself capped per node by `ACTIVITY_INSTANCES_MAX`);
/// this bounds the list before any of them is entered.
pub const AD_HOC_ACTIVATIONS_MAX: usize = 1_000;

impl Run<'_> {
    /// A token enters the ad-hoc sub-process instance `sp`: its locals, then its active
    /// elements collection over what it sees inside (Zeebe applies the input mappings
    /// "before evaluating the expression `activeElementsCollection`"), then its token,
    /// boundaries and event sub-processes, then one arrival per element named. A
    /// collection that does not evaluate to ids of its elements fails the instance at
    /// `sp` (`EXPRESSION_FAILED`, Zeebe's incident) before the token enters, so a resume
    /// enters it again.
    pub(super) fn enter_ad_hoc(&mut self, sp: NodeIdx, ad_hoc: &AdHoc) {
        if !self.enter_locals(sp) {
            return;
        }
        let elements = match self.active_elements(sp, ad_hoc) {
            Ok(elements) => elements,
            Err(message) => {
                self.drop_locals(sp);
                return self.fail(codes::EXPRESSION_FAILED, Some(sp), None, message);
            }
        };
        self.add_token(sp);
        if !self.arm_boundaries(sp) {
            return;
        }
        for e in elements {
            self.queue.push_back((self.p.child(sp, e), None));
        }
    }

    /// The elements the active elements collection of `sp` names, in its order (an id
    /// twice is two activity instances); none without a collection.
    fn active_elements(&self, sp: NodeIdx, ad_hoc: &AdHoc) -> Result<Vec<NodeIdx>, String> {
        let Some(collection) = &ad_hoc.active_elements else {
            return Ok(Vec::new());
        };
        let what = format!("the active elements collection of `{}`", self.id(sp));
        let vars = inside_vars(self.p, &self.snap, sp);
        let value = collection.eval(&vars).map_err(|e| format!("{what}: {e}"))?;
        drop(vars);
        let Json::Array(items) = value else {
            return Err(format!("{what} gave {value}, not a list of element ids"));
        };
        if items.len() > AD_HOC_ACTIVATIONS_MAX {
            return Err(format!(
                "{what} names {} elements, more than the {AD_HOC_ACTIVATIONS_MAX} one entry may activate",
                items.len()
            ));
        }
        let mut elements = Vec::with_capacity(items.len());
        let mut unknown = Vec::new();
        for item in items {
            let Json::String(id) = item else {
                return Err(format!("{what} holds {item}, not an element id (a string)"));
            };
            match self.p.ad_hoc_element(sp, &id) {
                Some(e) => elements.push(e),
                None => unknown.push(format!("'{id}'")),
            }
        }
        if !unknown.is_empty() {
            return Err(format!(
                "{what} names no element it may activate with the ids {} (an element directly \
                 inside it, without incoming flows)",
                unknown.join(", ")
            ));
        }
        Ok(elements)
    }

    /// A path inside the ad-hoc sub-process instance `sp` ended: an element directly
    /// inside it completed with no outgoing flow. Its completion condition is evaluated
    /// now, over what `sp` sees inside (Zeebe's `beforeExecutionPathCompleted`); a true
    /// one with `cancelRemainingInstances` ends everything else inside at once (the
    /// arrivals this step queued there too). The verdict decides, once the step's
    /// arrivals are drained, whether `sp` completes (`complete_finished_subprocess`): a
    /// condition that fails to evaluate fails the instance at `sp`, and a resume
    /// evaluates it again.
    pub(super) fn ad_hoc_path_completed(&mut self, sp: NodeIdx, ad_hoc: &AdHoc) {
        let holds = match &ad_hoc.completion {
            None => true,
            Some(condition) => {
                let vars = inside_vars(self.p, &self.snap, sp);
                let verdict = condition.eval_bool(&vars);
                drop(vars);
                match verdict {
                    Ok(holds) => holds,
                    Err(e) => {
                        let message = format!("the completion condition of `{}`: {e}", self.id(sp));
                        return self.fail(codes::EXPRESSION_FAILED, Some(sp), None, message);
                    }
                }
            }
        };
        if holds && ad_hoc.completion.is_some() && ad_hoc.cancel_remaining {
            self.clear_scope(sp);
        }
        self.ad_hoc_verdicts.insert(sp, holds);
    }

    /// `leave`'s hook: a token at `idx` ended with no outgoing flow. When `idx` lies
    /// directly in an ad-hoc sub-process instance (and is no compensation handler, whose
    /// run is no path of it), one of its paths completed.
    pub(super) fn path_ended(&mut self, idx: NodeIdx) {
        let Some(sp) = self.scope_of(idx) else {
            return;
        };
        let Some(ad_hoc) = self.p.ad_hoc(sp) else {
            return;
        };
        if self.p.is_compensation_handler(idx) {
            return;
        }
        // An interrupting event sub-process ended everything else inside as it fired;
        // the scope completes when it does, as any scope's does (and as Zeebe completes
        // an ad-hoc sub-process after one, "without waiting for the job worker").
        if self
            .p
            .event_sub_process(idx)
            .is_some_and(|e| e.interrupting)
        {
            self.ad_hoc_verdicts.insert(sp, true);
            return;
        }
        self.ad_hoc_path_completed(sp, ad_hoc);
    }
}
