//! The state of one step in progress: [`Run`], a working copy of the snapshot with the
//! effects and the queue of arrivals the step builds up, and the few accessors every
//! element module shares (names, the instance tree through `instances`, the path being
//! recorded).
//!
//! The element modules (`flow` for entering and leaving nodes, `gateway`, `scope`,
//! `timers`, `retry`, `multi`, `event_sub`, `subscriptions`, `compensation`, `call`,
//! `channel`, `pull`, `user_tasks`, `redrive`, `repair`, `migrate`, `stall`, `ad_hoc`) add their
//! behaviour as further `impl Run` blocks and import `Run` from here; this module imports
//! none of them, so the arrows point one way: elements → run → instances → model.

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};

use qflow_loader::model::{Definition, EndKind, FlowIdx, NodeIdx, Process};

use super::instances;
use super::path::{Branch, EventKind, InnerState, PathEvent};
use super::{Effect, Step};
use crate::snapshot::{Snapshot, Status};

/// One step in progress.
pub(super) struct Run<'a> {
    pub(super) def: &'a Definition,
    pub(super) p: &'a Process,
    /// Feeds the retry jitter; unused by token movement itself.
    pub(super) instance: &'a str,
    pub(super) now_ms: i64,
    pub(super) snap: Snapshot,
    pub(super) effects: Vec<Effect>,
    pub(super) queue: VecDeque<(NodeIdx, Option<FlowIdx>)>,
    pub(super) arrivals: u32,
    /// A task whose attempt the current input already reported as finished, so that
    /// interrupting it does not report the attempt a second time.
    pub(super) attempt_reported: Option<NodeIdx>,
    /// Whether the instance was running when the step began.
    pub(super) was_running: bool,
    /// The user tasks offered to the task list when the step began (`user_tasks`).
    pub(super) user_tasks_before: Vec<String>,
    /// User tasks a token entered in this step, once per entry.
    pub(super) user_tasks_entered: Vec<NodeIdx>,
    /// A migration's rows of the task list, by old ids: withdrawn unless offered again.
    pub(super) user_tasks_migrated: Option<Vec<String>>,
    /// The path the step takes, when the caller asked for it (`path`); `None` on the
    /// runtime's hot path, where recording costs a branch and allocates nothing.
    pub(super) path: Option<Vec<PathEvent>>,
    /// A called instance's BPMN error that escaped it in this step (its code and
    /// message): reported to the parent as the instance ends (`call`).
    pub(super) escaped: Option<(Option<String>, String)>,
    /// The compensation handler whose run completed in this step, with the attempt
    /// number it ended on (`compensation`): its next owed run numbers on from there.
    pub(super) finished_run: Option<(NodeIdx, u32)>,
    /// Registered handlers queued for their next owed run, with the attempts earlier
    /// runs used: the run starts at the next number, its budget counted afresh.
    pub(super) next_runs: Vec<(NodeIdx, u32)>,
    /// A channel call the current input answered (with a BPMN error): its request was
    /// delivered, so ending its wait withdraws nothing.
    pub(super) answered: Option<NodeIdx>,
    /// Timers this step armed over a live incarnation: `(name, old, new)`, so that an
    /// arm taken back in the same step resolves the row it would have replaced.
    pub(super) rearmed: Vec<(String, u32, u32)>,
    /// The latest completion verdict of each ad-hoc sub-process instance one of whose
    /// paths ended in this step (`ad_hoc`); never persisted.
    pub(super) ad_hoc_verdicts: BTreeMap<NodeIdx, bool>,
    /// Conditional events armed in this step and not yet evaluated (`conditional`).
    pub(super) conditions_armed: Vec<NodeIdx>,
    /// The variables this step changed since the conditions were last evaluated, each
    /// with whether it was created (`conditional`); written only for a model with
    /// conditional events.
    pub(super) conditions_changed: Vec<(String, bool)>,
}

impl<'a> Run<'a> {
    pub(super) fn new(
        def: &'a Definition,
        instance: &'a str,
        snap: Snapshot,
        now_ms: i64,
        trace: bool,
        user_tasks_before: Vec<String>,
    ) -> Run<'a> {
        let snap_running = snap.status == Status::Running;
        Run {
            def,
            p: &def.process,
            instance,
            now_ms,
            snap,
            effects: Vec::new(),
            queue: VecDeque::new(),
            arrivals: 0,
            attempt_reported: None,
            was_running: snap_running,
            user_tasks_before,
            user_tasks_entered: Vec::new(),
            user_tasks_migrated: None,
            path: trace.then(Vec::new),
            escaped: None,
            finished_run: None,
            next_runs: Vec::new(),
            answered: None,
            rearmed: Vec::new(),
            ad_hoc_verdicts: BTreeMap::new(),
            conditions_armed: Vec::new(),
            conditions_changed: Vec::new(),
        }
    }

    pub(super) fn finish(self) -> Step {
        Step {
            snapshot: self.snap,
            effects: self.effects,
        }
    }

    /// The path recorded so far (empty unless recording), leaving none.
    pub(super) fn take_path(&mut self) -> Vec<PathEvent> {
        self.path.take().unwrap_or_default()
    }

    pub(super) fn idx(&self, id: &str) -> NodeIdx {
        // Every caller passed `staleness`, which checked that the id exists.
        self.p.find(id).unwrap_or(NodeIdx(0))
    }

    /// The name of `idx` in the snapshot and effects: its activity instance's key
    /// (`Process::key`: `pay`, `pay@2`, `quote#3`, `sub@2/pay`).
    pub(super) fn id(&self, idx: NodeIdx) -> Cow<'a, str> {
        self.p.key(idx)
    }

    /// The scope instance `idx` runs in (`instances::scope_of`).
    pub(super) fn scope_of(&self, idx: NodeIdx) -> Option<NodeIdx> {
        instances::scope_of(self.p, idx)
    }

    pub(super) fn running(&self) -> bool {
        self.snap.status == Status::Running
    }

    /// Whether a token stands at the activity instance `idx`.
    pub(super) fn holds_token(&self, idx: NodeIdx) -> bool {
        instances::holds(self.p, &self.snap.tokens, idx)
    }

    /// Takes one token away from `idx`; `false` when none stood there. (Putting one
    /// there is `flow`'s `add_token`: a wait begun again reopens its subscription.)
    pub(super) fn remove_token(&mut self, idx: NodeIdx) -> bool {
        instances::remove(self.p, &mut self.snap.tokens, idx)
    }
}

// ----- the path a step takes (`path`) -------------------------------------------------

impl Run<'_> {
    /// Records what `event` builds, when a path is being recorded; otherwise builds
    /// nothing (the closure is not called, so no id is cloned).
    #[inline]
    pub(super) fn record(&mut self, event: impl FnOnce(&Self) -> PathEvent) {
        if self.path.is_none() {
            return;
        }
        let e = event(self);
        if let Some(path) = self.path.as_mut() {
            path.push(e);
        }
    }

    pub(super) fn tracing(&self) -> bool {
        self.path.is_some()
    }

    /// The inner instance `inner` of `body` started, completed or was cancelled.
    pub(super) fn record_inner(&mut self, body: NodeIdx, inner: NodeIdx, state: InnerState) {
        self.record(|r| PathEvent::Inner {
            body: r.id(body).into_owned(),
            node: r.id(inner).into_owned(),
            index: inner.instance(),
            state,
        });
    }

    pub(super) fn record_flow(&mut self, from: NodeIdx, flow: FlowIdx) {
        self.record(|r| {
            let f = r.p.flow(flow);
            PathEvent::Flow {
                flow: f.id.clone(),
                from: r.id(from).into_owned(),
                to: r.id(r.p.inherit(from, f.target)).into_owned(),
            }
        });
    }

    /// A decision of `node` for `flows`, each taken because its condition held (or it has
    /// none), or the default `flows` when `default`. A node with one unconditioned
    /// outgoing flow (a merging gateway) decides nothing, and records no decision.
    pub(super) fn record_decision(&mut self, node: NodeIdx, flows: &[FlowIdx], default: bool) {
        if !self.tracing() {
            return;
        }
        if let [only] = self.p.node(node).outgoing.as_slice() {
            if self.p.flow(*only).condition.is_none() {
                return;
            }
        }
        self.record(|r| PathEvent::Decision {
            node: r.id(node).into_owned(),
            taken: flows
                .iter()
                .map(|f| {
                    let flow = r.p.flow(*f);
                    Branch {
                        flow: flow.id.clone(),
                        condition: flow.condition.as_ref().map(|c| c.source().to_owned()),
                        default,
                        event: None,
                    }
                })
                .collect(),
        });
    }

    /// The event-based gateway `gw`'s race was won by the event `winner`.
    pub(super) fn record_race(&mut self, gw: NodeIdx, winner: NodeIdx) {
        self.record(|r| {
            let flow =
                r.p.node(winner)
                    .incoming
                    .iter()
                    .find(|f| r.p.flow(**f).source == gw)
                    .map(|f| r.p.flow(*f).id.clone())
                    .unwrap_or_default();
            PathEvent::Decision {
                node: r.id(gw).into_owned(),
                taken: vec![Branch {
                    flow,
                    condition: None,
                    default: false,
                    event: Some(r.id(winner).into_owned()),
                }],
            }
        });
    }

    pub(super) fn record_throw(
        &mut self,
        event: EventKind,
        node: NodeIdx,
        code: Option<&str>,
        name: Option<&str>,
    ) {
        self.record(|r| PathEvent::Throw {
            event,
            node: r.id(node).into_owned(),
            code: code.map(str::to_owned),
            name: name.map(str::to_owned),
        });
    }

    /// `node` caught `event`; `boundary` is `(host, interrupting)` for a boundary event.
    pub(super) fn record_catch(
        &mut self,
        event: EventKind,
        node: NodeIdx,
        boundary: Option<(NodeIdx, bool)>,
        code: Option<&str>,
        name: Option<&str>,
    ) {
        self.record(|r| PathEvent::Catch {
            event,
            node: r.id(node).into_owned(),
            on: boundary.map(|(host, _)| r.id(host).into_owned()),
            interrupting: boundary.map(|(_, i)| i),
            event_sub_process: None,
            code: code.map(str::to_owned),
            name: name.map(str::to_owned),
        });
    }

    /// The start event `start` of an event sub-process in `scope` caught `event`.
    pub(super) fn record_catch_in(
        &mut self,
        event: EventKind,
        start: NodeIdx,
        scope: Option<NodeIdx>,
        interrupting: bool,
        code: Option<&str>,
        name: Option<&str>,
    ) {
        self.record(|r| PathEvent::Catch {
            event,
            node: r.id(start).into_owned(),
            on: scope.map(|s| r.id(s).into_owned()),
            interrupting: Some(interrupting),
            event_sub_process: r.p.node(start).scope.map(|e| r.id(e).into_owned()),
            code: code.map(str::to_owned),
            name: name.map(str::to_owned),
        });
    }

    pub(super) fn record_uncaught(&mut self, event: EventKind, node: NodeIdx, code: Option<&str>) {
        self.record(|r| PathEvent::Uncaught {
            event,
            node: r.id(node).into_owned(),
            code: code.map(str::to_owned),
        });
    }

    pub(super) fn record_end(&mut self, node: NodeIdx, kind: &EndKind) {
        self.record(|r| PathEvent::End {
            node: r.id(node).into_owned(),
            kind: kind.into(),
            scope: r.scope_of(node).map(|s| r.id(s).into_owned()),
        });
    }
}
