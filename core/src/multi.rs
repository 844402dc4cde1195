//! Multi-instance activities (§10.2.8, §13.3.7; `docs/multi-instance.md`).
//!
//! The loader makes a multi-instance activity a body — a sub-process holding the flows
//! and boundary events — with one child, the inner activity. Entering the body evaluates
//! the cardinality or the input collection once, and starts the inner activity as inner
//! instances `1..=n`: all at once (parallel) or one after another (sequential). An
//! inner instance is the inner node with its number (`NodeIdx::with_instance`), named
//! `<id>#<k>` in the snapshot, effects and timers, so everything the engine keeps per
//! node — tokens, attempts, markers, timers, locks, calls, task-list rows — is kept per
//! inner instance without another key. The body's own state (`i/<body>`) holds what the
//! inner instances cannot: how many, how many started and completed, the input items,
//! the output entries.
//!
//! An inner instance's locals — the element, `loopCounter` — are never written to the
//! variables: they are laid over them wherever the inner activity evaluates something
//! (`locals::scoped_vars`). Interrupting the body interrupts its inner instances (it is a
//! sub-process); a completion condition that holds does the same to the ones left.
//! Nothing here reads the clock.

use qflow_loader::model::{MultiInstance, MultiItems, NodeIdx, Process, Variables};
use serde_json::Value as Json;

use super::codes;
use super::path::InnerState;
use super::run::Run;
use crate::snapshot::Snapshot;

/// The most inner instances one body may have. A body starts (parallel) or may run
/// (sequential) all of them in one step, so the bound keeps a body inside one step's
/// arrival limit (`flow::ARRIVALS_PER_STEP_MAX`) with room for what surrounds it.
pub const MULTI_INSTANCES_MAX: usize = 1_000;

// Keys of a body's state (`i/<body>`), short: they are persisted.
const K_COUNT: &str = "n";
const K_STARTED: &str = "s";
const K_DONE: &str = "d";
const K_ITEMS: &str = "c";
const K_OUTPUTS: &str = "o";

/// A running body's state, typed.
struct Body {
    count: u32,
    started: u32,
    done: u32,
    items: Option<Vec<Json>>,
    outputs: Option<Vec<Json>>,
}

/// Whether a running body's state (`i/<body>`) can go on as `mi` runs a body (a
/// migration's check): a sequential body runs at most one inner instance at a time, a
/// parallel one has started all of them as it was entered.
pub(super) fn state_fits(state: &Variables, mi: &MultiInstance) -> bool {
    let body = Body::read(state);
    if mi.sequential {
        body.started <= body.done.saturating_add(1)
    } else {
        body.started == body.count
    }
}

impl Body {
    /// Tolerant read: a missing or malformed count reads as 0.
    fn read(state: &Variables) -> Body {
        let num = |k: &str| {
            state
                .get(k)
                .and_then(Json::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0)
        };
        let list = |k: &str| state.get(k).and_then(Json::as_array).cloned();
        Body {
            count: num(K_COUNT),
            started: num(K_STARTED),
            done: num(K_DONE),
            items: list(K_ITEMS),
            outputs: list(K_OUTPUTS),
        }
    }

    fn write(&self) -> Variables {
        let mut state = Variables::new();
        state.insert(K_COUNT.into(), Json::from(self.count));
        state.insert(K_STARTED.into(), Json::from(self.started));
        state.insert(K_DONE.into(), Json::from(self.done));
        if let Some(items) = &self.items {
            state.insert(K_ITEMS.into(), Json::Array(items.clone()));
        }
        if let Some(outputs) = &self.outputs {
            state.insert(K_OUTPUTS.into(), Json::Array(outputs.clone()));
        }
        state
    }
}

/// The locals of inner instance `k` of `mi`: the element (when there is one) and the
/// loop counter.
fn locals(mi: &MultiInstance, body: &Body, k: u32, into: &mut Variables) {
    if let (Some(name), Some(items)) = (&mi.element, &body.items) {
        let item = items.get(k as usize - 1).cloned().unwrap_or(Json::Null);
        into.insert(name.clone(), item);
    }
    let counter = mi.counter_base as u64 + k as u64 - 1;
    into.insert("loopCounter".into(), Json::from(counter));
}

/// Lays the locals of the inner instance `k` of `body` over `into` (`locals::scoped_vars`
/// walks the scopes; this knows the body's state).
pub(crate) fn inner_locals(
    p: &Process,
    snap: &Snapshot,
    body: NodeIdx,
    k: u32,
    into: &mut Variables,
) {
    let (Some(mi), Some(state)) = (p.multi_instance(body), snap.multis.get(&*p.key(body))) else {
        return;
    };
    locals(mi, &Body::read(state), k, into);
}

impl<'a> Run<'a> {
    /// A token arrived at the body `body`: count the inner instances and start them.
    pub(super) fn enter_multi(&mut self, body: NodeIdx, mi: &'a MultiInstance) {
        let (count, items) = match self.count_instances(body, mi) {
            Ok(c) => c,
            Err(message) => return self.fail(codes::EXPRESSION_FAILED, Some(body), None, message),
        };
        if count == 0 {
            // Nothing to run: the body completes at once (with an empty output).
            if let Some(out) = &mi.output_collection {
                let one = Variables::from([(out.clone(), Json::Array(Vec::new()))]);
                self.write_vars_from(body, one);
            }
            self.leave(body);
            // Nothing ran, so nothing is to be compensated.
            return self.unrecord_completion(body);
        }
        self.add_token(body);
        if !self.arm_boundaries(body) {
            return;
        }
        let state = Body {
            count,
            started: if mi.sequential { 1 } else { count },
            done: 0,
            items: mi.element.as_ref().and(items),
            outputs: mi
                .output_collection
                .as_ref()
                .map(|_| vec![Json::Null; count as usize]),
        };
        self.snap.set_multi(&self.id(body), Some(state.write()));
        let last = if mi.sequential { 1 } else { count };
        for k in 1..=last {
            // A completion condition (or a failure) may end the body while it starts.
            if !self.running() || !self.snap.multis.contains_key(&*self.id(body)) {
                return;
            }
            self.record_inner(body, mi.inner.with_instance(k), InnerState::Started);
            self.enter(mi.inner.with_instance(k), None);
        }
    }

    /// The number of inner instances, and the input items when over a collection.
    fn count_instances(
        &self,
        body: NodeIdx,
        mi: &MultiInstance,
    ) -> Result<(u32, Option<Vec<Json>>), String> {
        let vars = super::locals::scoped_vars(self.p, &self.snap, body);
        let name = self.id(body);
        let cardinality = |e: &qflow_loader::expr::Expression| {
            let v = e
                .eval(&vars)
                .map_err(|e| format!("the loopCardinality of `{name}`: {e}"))?;
            v.as_u64().ok_or_else(|| {
                format!("the loopCardinality of `{name}` is {v}, not a non-negative integer")
            })
        };
        let collection = |e: &qflow_loader::expr::Expression| {
            let v = e
                .eval(&vars)
                .map_err(|e| format!("the input collection of `{name}`: {e}"))?;
            match v {
                Json::Array(items) => Ok(items),
                other => Err(format!(
                    "the input collection of `{name}` is {}, not a list",
                    kind_of(&other)
                )),
            }
        };
        let (count, items) = match &mi.items {
            MultiItems::Cardinality(e) => (cardinality(e)?, None),
            MultiItems::Collection(e) => {
                let items = collection(e)?;
                (items.len() as u64, Some(items))
            }
            MultiItems::Indexed {
                cardinality: c,
                collection: e,
            } => {
                let n = cardinality(c)?;
                let mut items = collection(e)?;
                if n > items.len() as u64 {
                    // Camunda 7 fails at the first inner instance past the end.
                    return Err(format!(
                        "the loopCardinality of `{name}` is {n}, past the end of its input \
                         collection of {} items",
                        items.len()
                    ));
                }
                // The items past the cardinality are not taken.
                items.truncate(n as usize);
                (n, Some(items))
            }
        };
        if count > MULTI_INSTANCES_MAX as u64 {
            return Err(format!(
                "`{name}` would have {count} inner instances; a multi-instance activity may \
                 have {MULTI_INSTANCES_MAX} at most"
            ));
        }
        Ok((count as u32, items))
    }

    /// The inner instance `inner` completed: its output entry is kept, the completion
    /// condition asked, the next one started (sequential), or the body completed.
    pub(super) fn inner_completed(&mut self, body: NodeIdx, inner: NodeIdx) {
        let Some(mi) = self.p.multi_instance(body) else {
            return;
        };
        let body_key = self.id(body).into_owned();
        let Some(mut state) = self.snap.multis.get(&body_key).map(Body::read) else {
            return;
        };
        let k = inner.instance();
        self.record_inner(body, inner, InnerState::Completed);
        // What the inner instance sees, a sub-process's own locals too (Zeebe evaluates
        // the output element in the inner instance's scope).
        let mut scope = super::locals::inside_vars(self.p, &self.snap, inner).into_owned();
        state.done = state.done.saturating_add(1);
        if let (Some(expr), Some(outputs)) = (&mi.output_element, &mut state.outputs) {
            match expr.eval(&scope) {
                Ok(v) => {
                    if let Some(slot) = outputs.get_mut(k as usize - 1) {
                        *slot = v;
                    }
                }
                Err(e) => {
                    let message = format!("the output element of `{}`: {e}", self.id(inner));
                    return self.fail(codes::EXPRESSION_FAILED, Some(inner), None, message);
                }
            }
        }
        let active = self.inner_tokens(body).len() as u32;
        let finished = match &mi.completion {
            None => false,
            Some(cond) => {
                for (name, n) in [
                    ("numberOfInstances", state.count),
                    ("numberOfCompletedInstances", state.done),
                    ("numberOfActiveInstances", active),
                    ("nrOfInstances", state.count),
                    ("nrOfCompletedInstances", state.done),
                    ("nrOfActiveInstances", active),
                ] {
                    scope.insert(name.into(), Json::from(n));
                }
                match cond.eval_bool(&scope) {
                    Ok(b) => b,
                    Err(e) => {
                        let message =
                            format!("the completion condition of `{}`: {e}", self.id(body));
                        return self.fail(codes::EXPRESSION_FAILED, Some(body), None, message);
                    }
                }
            }
        };
        if finished || state.done >= state.count {
            return self.complete_body(body, mi, state);
        }
        if mi.sequential && active == 0 {
            state.started += 1;
            let next = state.started;
            self.snap.set_multi(&body_key, Some(state.write()));
            // Queued, not entered: a long run of pass-through instances must not recurse.
            self.record_inner(body, mi.inner.with_instance(next), InnerState::Started);
            self.queue.push_back((mi.inner.with_instance(next), None));
            return;
        }
        self.snap.set_multi(&body_key, Some(state.write()));
    }

    /// The inner instances of `body` holding a token, in frontier order.
    fn inner_tokens(&self, body: NodeIdx) -> Vec<NodeIdx> {
        self.snap
            .tokens
            .iter()
            .filter_map(|t| self.p.find(t))
            .filter(|i| self.p.body_of(*i) == Some(body))
            .collect()
    }

    /// Ends the body: the inner instances still running are interrupted, the output
    /// collection written, and the token leaves the body.
    fn complete_body(&mut self, body: NodeIdx, mi: &MultiInstance, state: Body) {
        for inner in self.inner_tokens(body) {
            self.interrupt(inner);
        }
        let p = self.p;
        self.queue
            .retain(|(n, _)| !super::instances::inside(p, *n, body));
        if let (Some(out), Some(outputs)) = (&mi.output_collection, state.outputs) {
            let one = Variables::from([(out.clone(), Json::Array(outputs))]);
            self.write_vars_from(body, one);
        }
        self.snap.set_multi(&self.id(body), None);
        self.remove_token(body);
        self.disarm(body);
        self.leave(body);
        // A body its completion condition ended early is not compensated: only one whose
        // every inner instance completed is (as Zeebe does).
        if state.done < state.count {
            self.unrecord_completion(body);
        }
    }
}

fn kind_of(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a map",
    }
}
