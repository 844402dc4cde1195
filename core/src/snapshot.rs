//! The instance snapshot (SPEC E2, E3): an open-keyed map, persisted as canonical
//! MessagePack so that equal state is equal bytes.
//!
//! The in-memory form is typed for speed, but the persisted form is a plain string-keyed
//! map: keys are written in byte order, integers in their smallest encoding, floats as
//! f64, nested variable maps sorted by key. Keys this engine does not know are kept
//! verbatim and written back (forward compatibility); a known key whose value is
//! malformed is kept verbatim too and reads as its default (a malformed attempt counter
//! reads as 0), so a snapshot never becomes unloadable. The key families are documented
//! in `docs/snapshot-format.md`; every family except `v` is absent when empty, which is
//! what keeps a process without `q:retry` byte-identical to one from before retries.
//!
//! This module must never read the clock, hash-iterate, or panic on any input bytes.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::error::Error;
use crate::Attempt;
use qflow_loader::model::Variables;

/// The format version written under key `v`. Bump it only with a migration story.
pub const FORMAT_VERSION: u64 = 1;

/// Nesting deeper than this in a snapshot is refused on decode rather than recursed into.
const DECODE_DEPTH_MAX: usize = 64;

/// Where an instance stands, as the snapshot records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Status {
    /// Not started: the snapshot before `Input::Start`. Never persisted by a shell.
    #[default]
    New,
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    fn code(self) -> u64 {
        match self {
            Status::New => 0,
            Status::Running => 1,
            Status::Completed => 2,
            Status::Failed => 3,
            Status::Cancelled => 4,
        }
    }

    fn from_code(code: u64) -> Option<Status> {
        Some(match code {
            0 => Status::New,
            1 => Status::Running,
            2 => Status::Completed,
            3 => Status::Failed,
            4 => Status::Cancelled,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::New => "new",
            Status::Running => "running",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    /// Completed, failed and cancelled instances take no further inputs.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }
}

/// Why an instance is FAILED (E6): a structured code, the node it failed at, and for
/// some codes a short detail (the uncaught BPMN error's code, say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: String,
    pub node: Option<String>,
    pub detail: Option<String>,
}

/// A decoded snapshot. Cheap to clone for the small instances it is designed for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub(crate) status: Status,
    /// `f`, `fn`, `fd`: kept apart so that each key reads and writes on its own.
    pub(crate) failure_code: Option<String>,
    pub(crate) failure_node: Option<String>,
    pub(crate) failure_detail: Option<String>,
    /// The wait frontier: one entry per token, the node id it sits at, kept sorted.
    pub(crate) tokens: Vec<String>,
    pub(crate) vars: Variables,
    /// Parallel/inclusive join arrivals: gateway id → incoming flow ids arrived, sorted,
    /// one entry per waiting token (a flow id repeats when several wait on it).
    pub(crate) joins: BTreeMap<String, Vec<String>>,
    /// Live timers: name → the incarnation that may fire.
    pub(crate) timers: BTreeMap<String, u32>,
    /// The last incarnation issued; every arm takes the next one.
    pub(crate) incarnation: u32,
    /// Cycle timers: name → occurrences already fired.
    pub(crate) cycles: BTreeMap<String, u32>,
    /// `ks`: while FAILED, the non-interrupting timers (boundaries of waiting tokens,
    /// timer starts of armed event sub-processes) that had already fired for good when
    /// the instance failed — a one-shot that fired, a cycle that ran out — so that a
    /// resume does not arm them again. Sorted.
    pub(crate) spent: Vec<String>,
    /// `a/<node>`: the attempt in progress, present only once a node with a policy failed.
    pub(crate) attempts: BTreeMap<String, u32>,
    /// `m/<node>`: the backoff-window marker, carrying the failure class.
    pub(crate) markers: BTreeMap<String, String>,
    /// `e/<node>`: the instant of the node's first failure (for `maxElapsed`).
    pub(crate) first_failure_ms: BTreeMap<String, i64>,
    /// `b/<node>`: attempts burned before an operator reset the node's budget (O3);
    /// present only after such a reset.
    pub(crate) budget_bases: BTreeMap<String, u32>,
    /// `o/<node>`: how often the attempt in progress was re-adopted without an outcome
    /// (C7a); present only after a re-adoption, gone when the next attempt starts.
    pub(crate) readoptions: BTreeMap<String, u32>,
    /// `w/<node>` and `u/<node>`: the worker holding the lock on a pull task's attempt
    /// and the instant the lock expires (P1); present only while a worker holds one.
    pub(crate) lock_workers: BTreeMap<String, String>,
    pub(crate) lock_until_ms: BTreeMap<String, i64>,
    /// `p/<node>`: the attempts a pull task has left, counting the one in progress, once
    /// a failure or an expired lock set it (before that the model's `retries` hold).
    pub(crate) pull_retries: BTreeMap<String, u32>,
    /// `c/<node>`: the correlation key of the message subscription open at a waiting
    /// node (a receive task or message catch whose message has a correlation key);
    /// present while the subscription is open.
    pub(crate) subscriptions: BTreeMap<String, String>,
    /// `x/<node>`: the number of the channel call a waiting channel-call task holds
    /// (drawn from the incarnation sequence when the call starts); present while the
    /// task waits, across all the call's attempts.
    pub(crate) calls: BTreeMap<String, u32>,
    /// `h/<node>`: the assignee of the user task waiting at the node — the model's
    /// assignee evaluated when the token entered, or whoever claimed it since; absent
    /// when nobody holds it. The rest of the assignment (candidates) lives in the task
    /// list's row only.
    pub(crate) assignees: BTreeMap<String, String>,
    /// `i/<body>`: the state of a running multi-instance body — how many inner
    /// instances, how many started and completed, the input items and the output
    /// entries (`multi`); present only while the body runs.
    pub(crate) multis: BTreeMap<String, Variables>,
    /// `l/<scope instance>`: the local variables of a running sub-process instance
    /// (`sub`, `sub@2`, `sub#3`, `outer@2/sub`) — what Zeebe input mappings on the
    /// sub-process made as it was entered, as the inside has written them since
    /// (`locals`). Present only while the instance runs and holds a local.
    pub(crate) locals: BTreeMap<String, Variables>,
    /// `q/<node>`: the call (a number drawn from the incarnation sequence) whose child
    /// instance the call activity at the node waits for; present from the attempt's
    /// start until the child's end is taken or the wait ends without it.
    pub(crate) children: BTreeMap<String, u32>,
    /// `pa`: the call activity this instance was started by (a called instance only),
    /// where its end is reported.
    /// Boxed: a snapshot moves by value through every step, and most have no parent.
    pub(crate) parent: Option<Box<crate::ParentLink>>,
    /// `g`: the completions not yet compensated of activities with a compensation
    /// boundary, one entry (the activity's key) per completion, in completion order (not
    /// sorted: the order is the data). Present from the first such completion until a
    /// compensation throw takes them, their scope ends, or the instance does.
    pub(crate) compensable: Vec<String>,
    /// `z/<handler>`: the compensation throw events a handler owes a run to, oldest
    /// first; the first is the run in progress (the handler holds a token). Present while
    /// the handler runs or has runs queued.
    pub(crate) owed: BTreeMap<String, Vec<String>>,
    /// `r/<event>`: a non-interrupting conditional event (a boundary, an event
    /// sub-process start) whose condition held when last evaluated; it fires again only
    /// once the condition was false (`conditional`). Present while it holds and the
    /// event is armed; always `1`.
    pub(crate) conditions: BTreeMap<String, u32>,
    /// Keys this engine does not know, and known keys whose value was malformed.
    pub(crate) extra: BTreeMap<String, rmpv::Value>,
}

// Top-level keys. Short on purpose: they are in every persisted row.
const K_VERSION: &str = "v";
const K_STATUS: &str = "s";
const K_FAIL_CODE: &str = "f";
const K_FAIL_NODE: &str = "fn";
const K_FAIL_DETAIL: &str = "fd";
const K_TOKENS: &str = "t";
const K_VARS: &str = "d";
const K_TIMERS: &str = "k";
const K_INCARNATION: &str = "n";
const K_CYCLES: &str = "y";
const K_SPENT: &str = "ks";
const K_PARENT: &str = "pa";
const K_COMPENSABLE: &str = "g";
const P_JOIN: &str = "j/";
const P_ATTEMPT: &str = "a/";
const P_MARKER: &str = "m/";
const P_FIRST_FAILURE: &str = "e/";
const P_BUDGET_BASE: &str = "b/";
const P_READOPTIONS: &str = "o/";
const P_LOCK_WORKER: &str = "w/";
const P_LOCK_UNTIL: &str = "u/";
const P_PULL_RETRIES: &str = "p/";
const P_SUBSCRIPTION: &str = "c/";
const P_CALL: &str = "x/";
const P_ASSIGNEE: &str = "h/";
const P_MULTI: &str = "i/";
const P_CHILD: &str = "q/";
const P_OWED: &str = "z/";
const P_LOCALS: &str = "l/";
const P_CONDITION: &str = "r/";

impl Snapshot {
    /// The snapshot of an instance that has not started yet.
    pub fn new() -> Snapshot {
        Snapshot::default()
    }

    pub fn status(&self) -> Status {
        self.status
    }

    /// Why the instance is FAILED; `None` unless a failure code is recorded.
    pub fn failure(&self) -> Option<Failure> {
        Some(Failure {
            code: self.failure_code.clone()?,
            node: self.failure_node.clone(),
            detail: self.failure_detail.clone(),
        })
    }

    pub(crate) fn set_failure(&mut self, failure: Failure) {
        self.failure_code = Some(failure.code);
        self.failure_node = failure.node;
        self.failure_detail = failure.detail;
    }

    /// The wait frontier: the node ids tokens sit at, sorted (a node appears once per
    /// token).
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    pub fn variables(&self) -> &Variables {
        &self.vars
    }

    /// Join arrivals: gateway id → the incoming flows a token has arrived on, once per
    /// token waiting there.
    pub fn join_arrivals(&self) -> &BTreeMap<String, Vec<String>> {
        &self.joins
    }

    /// The non-interrupting conditional events whose condition held when last
    /// evaluated (`r/<event>`), by event.
    pub fn conditions_held(&self) -> &BTreeMap<String, u32> {
        &self.conditions
    }

    /// Live timers by name, with the incarnation that may fire.
    pub fn timers(&self) -> &BTreeMap<String, u32> {
        &self.timers
    }

    /// The attempt in progress at `node`, 1-based; 0 when no counter is stored or the
    /// stored counter is malformed (a tolerant read: E2).
    pub fn attempt(&self, node: &str) -> u32 {
        self.attempts.get(node).copied().unwrap_or(0)
    }

    /// The attempt in progress at `node`: its counter, or the first attempt when none is
    /// stored (a task entered once has attempt 1 in progress without writing a key: E3).
    pub fn attempt_in_progress(&self, node: &str) -> Attempt {
        Attempt::new(self.attempt(node)).unwrap_or(Attempt::FIRST)
    }

    /// Attempts of `node` burned before an operator reset its budget: the policy counts
    /// attempts after these. 0 when the budget was never reset.
    pub fn budget_base(&self, node: &str) -> u32 {
        self.budget_bases.get(node).copied().unwrap_or(0)
    }

    pub(crate) fn set_budget_base(&mut self, node: &str, burned: u32) {
        self.extra.remove(&format!("{P_BUDGET_BASE}{node}"));
        if burned == 0 {
            self.budget_bases.remove(node);
        } else {
            self.budget_bases.insert(node.to_owned(), burned);
        }
    }

    /// How often the attempt in progress at `node` was re-adopted without an outcome.
    pub fn readoptions(&self, node: &str) -> u32 {
        self.readoptions.get(node).copied().unwrap_or(0)
    }

    pub(crate) fn set_readoptions(&mut self, node: &str, count: u32) {
        if count == 0 {
            if self.readoptions.remove(node).is_some() || !self.extra.is_empty() {
                self.extra.remove(&format!("{P_READOPTIONS}{node}"));
            }
        } else {
            self.extra.remove(&format!("{P_READOPTIONS}{node}"));
            self.readoptions.insert(node.to_owned(), count);
        }
    }

    /// The lock on the pull task `node`: the worker holding it and the instant it
    /// expires. `None` when no worker holds one (or either key is malformed).
    pub fn lock(&self, node: &str) -> Option<(&str, i64)> {
        let worker = self.lock_workers.get(node)?;
        let until = self.lock_until_ms.get(node)?;
        Some((worker.as_str(), *until))
    }

    /// Whether any pull task of the instance is locked by a worker.
    pub fn has_pull_lock(&self) -> bool {
        !self.lock_workers.is_empty()
    }

    pub(crate) fn set_lock(&mut self, node: &str, worker: &str, until_ms: i64) {
        if !self.extra.is_empty() {
            self.extra.remove(&format!("{P_LOCK_WORKER}{node}"));
            self.extra.remove(&format!("{P_LOCK_UNTIL}{node}"));
        }
        self.lock_workers.insert(node.to_owned(), worker.to_owned());
        self.lock_until_ms.insert(node.to_owned(), until_ms);
    }

    pub(crate) fn clear_lock(&mut self, node: &str) {
        self.lock_workers.remove(node);
        self.lock_until_ms.remove(node);
        if !self.extra.is_empty() {
            self.extra.remove(&format!("{P_LOCK_WORKER}{node}"));
            self.extra.remove(&format!("{P_LOCK_UNTIL}{node}"));
        }
    }

    /// The attempts the pull task `node` has left, counting the one in progress, when a
    /// failure or an expired lock has set it; `None` before (the model's budget holds).
    pub fn pull_retries(&self, node: &str) -> Option<u32> {
        self.pull_retries.get(node).copied()
    }

    pub(crate) fn set_pull_retries(&mut self, node: &str, left: u32) {
        if !self.extra.is_empty() {
            self.extra.remove(&format!("{P_PULL_RETRIES}{node}"));
        }
        self.pull_retries.insert(node.to_owned(), left);
    }

    pub(crate) fn clear_failure(&mut self) {
        self.failure_code = None;
        self.failure_node = None;
        self.failure_detail = None;
    }

    /// All attempt counters, by node.
    pub fn attempts(&self) -> &BTreeMap<String, u32> {
        &self.attempts
    }

    /// The open message subscriptions: waiting node → correlation key.
    pub fn subscriptions(&self) -> &BTreeMap<String, String> {
        &self.subscriptions
    }

    /// The calls whose child instance a call activity waits for, by its node (`q/<node>`).
    pub fn children(&self) -> &BTreeMap<String, u32> {
        &self.children
    }

    /// The completions of compensable activities not yet compensated, oldest first (`g`).
    pub fn compensable(&self) -> &[String] {
        &self.compensable
    }

    /// The compensation throws each handler owes a run to, by handler (`z/<handler>`).
    pub fn compensations_owed(&self) -> &BTreeMap<String, Vec<String>> {
        &self.owed
    }

    /// The call activity that started this instance, for a called instance.
    pub fn parent(&self) -> Option<&crate::ParentLink> {
        self.parent.as_deref()
    }

    /// The live channel calls, by the node waiting on each (`x/<node>`).
    pub fn calls(&self) -> &BTreeMap<String, u32> {
        &self.calls
    }

    /// The assignee of the user task waiting at `node`, if anybody holds it.
    pub fn assignee(&self, node: &str) -> Option<&str> {
        self.assignees.get(node).map(String::as_str)
    }

    /// The assignees of the waiting user tasks, by node.
    pub fn assignees(&self) -> &BTreeMap<String, String> {
        &self.assignees
    }

    pub(crate) fn set_assignee(&mut self, node: &str, assignee: Option<&str>) {
        if !self.extra.is_empty() {
            self.extra.remove(&format!("{P_ASSIGNEE}{node}"));
        }
        match assignee {
            Some(a) => {
                self.assignees.insert(node.to_owned(), a.to_owned());
            }
            None => {
                self.assignees.remove(node);
            }
        }
    }

    /// The state of the running multi-instance bodies, by body (`i/<body>`).
    pub fn multi_instances(&self) -> &BTreeMap<String, Variables> {
        &self.multis
    }

    pub(crate) fn set_multi(&mut self, body: &str, state: Option<Variables>) {
        if !self.extra.is_empty() {
            self.extra.remove(&format!("{P_MULTI}{body}"));
        }
        match state {
            Some(s) => {
                self.multis.insert(body.to_owned(), s);
            }
            None => {
                self.multis.remove(body);
            }
        }
    }

    /// The local variables of the running sub-process instances, by instance (`l/<sub>`).
    pub fn sub_process_locals(&self) -> &BTreeMap<String, Variables> {
        &self.locals
    }

    pub(crate) fn set_locals(&mut self, scope: &str, locals: Option<Variables>) {
        if !self.extra.is_empty() {
            self.extra.remove(&format!("{P_LOCALS}{scope}"));
        }
        match locals.filter(|l| !l.is_empty()) {
            Some(l) => {
                self.locals.insert(scope.to_owned(), l);
            }
            None => {
                self.locals.remove(scope);
            }
        }
    }

    /// The backoff-window marker of `node` (the failure class), if it is in one.
    pub fn marker(&self, node: &str) -> Option<&str> {
        self.markers.get(node).map(String::as_str)
    }

    pub fn markers(&self) -> &BTreeMap<String, String> {
        &self.markers
    }

    pub fn first_failure_ms(&self, node: &str) -> Option<i64> {
        self.first_failure_ms.get(node).copied()
    }

    /// Keys kept verbatim: unknown to this engine, or known but malformed.
    pub fn preserved_keys(&self) -> impl Iterator<Item = &str> {
        self.extra.keys().map(String::as_str)
    }

    /// Adds or replaces a key this engine does not interpret. For tests and tools that
    /// need to exercise forward compatibility; the core never calls it.
    pub fn insert_preserved(&mut self, key: String, value: rmpv::Value) {
        self.extra.insert(key, value);
    }

    /// A decoded, human-readable view for operators (SPEC O1): status, failure, wait
    /// frontier, variables, join arrivals, live timers, attempts burned, backoff
    /// markers, and the keys kept verbatim. Key names are spelled out, not the short
    /// persisted ones; empty families are left out.
    pub fn inspect(&self) -> serde_json::Value {
        use serde_json::{json, Map, Value};
        let mut view = Map::new();
        view.insert("status".into(), json!(self.status.as_str()));
        if let Some(f) = self.failure() {
            view.insert(
                "failure".into(),
                json!({"code": f.code, "node": f.node, "detail": f.detail}),
            );
        }
        let mut put = |key: &str, value: Value, empty: bool| {
            if !empty {
                view.insert(key.into(), value);
            }
        };
        put("frontier", json!(self.tokens), self.tokens.is_empty());
        put("variables", json!(self.vars), self.vars.is_empty());
        put("join_arrivals", json!(self.joins), self.joins.is_empty());
        put("timers", json!(self.timers), self.timers.is_empty());
        put("attempts", json!(self.attempts), self.attempts.is_empty());
        put(
            "backoff_markers",
            json!(self.markers),
            self.markers.is_empty(),
        );
        put(
            "first_failure_ms",
            json!(self.first_failure_ms),
            self.first_failure_ms.is_empty(),
        );
        put(
            "readoptions",
            json!(self.readoptions),
            self.readoptions.is_empty(),
        );
        put("locks", self.locks_view(), self.lock_workers.is_empty());
        put(
            "pull_retries",
            json!(self.pull_retries),
            self.pull_retries.is_empty(),
        );
        put(
            "budget_bases",
            json!(self.budget_bases),
            self.budget_bases.is_empty(),
        );
        put("cycle_fires", json!(self.cycles), self.cycles.is_empty());
        put("spent_timers", json!(self.spent), self.spent.is_empty());
        put(
            "subscriptions",
            json!(self.subscriptions),
            self.subscriptions.is_empty(),
        );
        put("calls", json!(self.calls), self.calls.is_empty());
        put(
            "assignees",
            json!(self.assignees),
            self.assignees.is_empty(),
        );
        put(
            "multi_instances",
            json!(self.multis),
            self.multis.is_empty(),
        );
        put("children", json!(self.children), self.children.is_empty());
        put("locals", json!(self.locals), self.locals.is_empty());
        put(
            "compensable",
            json!(self.compensable),
            self.compensable.is_empty(),
        );
        put("compensations_owed", json!(self.owed), self.owed.is_empty());
        put(
            "conditions_held",
            json!(self.conditions),
            self.conditions.is_empty(),
        );
        if let Some(parent) = &self.parent {
            put("parent", json!(parent), false);
        }
        let preserved: Vec<&str> = self.preserved_keys().collect();
        put("preserved_keys", json!(preserved), preserved.is_empty());
        Value::Object(view)
    }

    fn locks_view(&self) -> serde_json::Value {
        let locks: BTreeMap<&str, serde_json::Value> = self
            .lock_workers
            .iter()
            .map(|(node, worker)| {
                let until = self.lock_until_ms.get(node);
                let view = serde_json::json!({"worker": worker, "until_ms": until});
                (node.as_str(), view)
            })
            .collect();
        serde_json::json!(locks)
    }

    /// Writes the attempt counter of `node` (the attempt in progress; [`Attempt`] is
    /// 1-based by construction, so a 0 cannot be written).
    pub fn set_attempt(&mut self, node: &str, attempt: Attempt) {
        self.extra.remove(&format!("{P_ATTEMPT}{node}"));
        self.attempts.insert(node.to_owned(), attempt.get());
    }

    /// Forgets everything the retry machinery keeps for `node`.
    pub(crate) fn clear_retry_state(&mut self, node: &str) {
        self.attempts.remove(node);
        self.markers.remove(node);
        self.first_failure_ms.remove(node);
        self.budget_bases.remove(node);
        self.readoptions.remove(node);
        self.lock_workers.remove(node);
        self.lock_until_ms.remove(node);
        self.pull_retries.remove(node);
        self.calls.remove(node);
        if !self.extra.is_empty() {
            for prefix in [
                P_ATTEMPT,
                P_MARKER,
                P_FIRST_FAILURE,
                P_BUDGET_BASE,
                P_READOPTIONS,
                P_LOCK_WORKER,
                P_LOCK_UNTIL,
                P_PULL_RETRIES,
                P_CALL,
            ] {
                self.extra.remove(&format!("{prefix}{node}"));
            }
        }
    }

    /// Canonical MessagePack bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(96);
        self.encode_into(&mut out);
        out
    }

    /// Appends the canonical MessagePack bytes to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let families = self.joins.len()
            + self.attempts.len()
            + self.markers.len()
            + self.first_failure_ms.len()
            + self.budget_bases.len()
            + self.readoptions.len()
            + self.lock_workers.len()
            + self.lock_until_ms.len()
            + self.pull_retries.len()
            + self.subscriptions.len()
            + self.calls.len()
            + self.assignees.len()
            + self.multis.len()
            + self.children.len()
            + self.locals.len()
            + self.owed.len()
            + self.conditions.len()
            + self.extra.len();
        let parent = self.parent.as_deref().map(parent_vars);
        let mut entries: Vec<(Cow<'_, str>, Entry<'_>)> = Vec::with_capacity(13 + families);
        entries.push((K_VERSION.into(), Entry::Uint(FORMAT_VERSION)));
        if self.status != Status::New {
            entries.push((K_STATUS.into(), Entry::Uint(self.status.code())));
        }
        for (key, value) in [
            (K_FAIL_CODE, &self.failure_code),
            (K_FAIL_NODE, &self.failure_node),
            (K_FAIL_DETAIL, &self.failure_detail),
        ] {
            if let Some(v) = value {
                entries.push((key.into(), Entry::Str(v)));
            }
        }
        if !self.tokens.is_empty() {
            entries.push((K_TOKENS.into(), Entry::StrList(&self.tokens)));
        }
        if !self.vars.is_empty() {
            entries.push((K_VARS.into(), Entry::Vars(&self.vars)));
        }
        if !self.timers.is_empty() {
            entries.push((K_TIMERS.into(), Entry::UintMap(&self.timers)));
        }
        if self.incarnation != 0 {
            entries.push((K_INCARNATION.into(), Entry::Uint(self.incarnation as u64)));
        }
        if !self.cycles.is_empty() {
            entries.push((K_CYCLES.into(), Entry::UintMap(&self.cycles)));
        }
        if !self.spent.is_empty() {
            entries.push((K_SPENT.into(), Entry::StrList(&self.spent)));
        }
        if let Some(parent) = &parent {
            entries.push((K_PARENT.into(), Entry::Vars(parent)));
        }
        if !self.compensable.is_empty() {
            entries.push((K_COMPENSABLE.into(), Entry::StrList(&self.compensable)));
        }
        for (gw, flows) in &self.joins {
            entries.push((format!("{P_JOIN}{gw}").into(), Entry::StrList(flows)));
        }
        for (node, a) in &self.attempts {
            entries.push((format!("{P_ATTEMPT}{node}").into(), Entry::Uint(*a as u64)));
        }
        for (node, class) in &self.markers {
            entries.push((format!("{P_MARKER}{node}").into(), Entry::Str(class)));
        }
        for (node, at) in &self.first_failure_ms {
            entries.push((format!("{P_FIRST_FAILURE}{node}").into(), Entry::Int(*at)));
        }
        for (node, count) in &self.readoptions {
            entries.push((
                format!("{P_READOPTIONS}{node}").into(),
                Entry::Uint(*count as u64),
            ));
        }
        for (node, burned) in &self.budget_bases {
            entries.push((
                format!("{P_BUDGET_BASE}{node}").into(),
                Entry::Uint(*burned as u64),
            ));
        }
        for (node, worker) in &self.lock_workers {
            entries.push((format!("{P_LOCK_WORKER}{node}").into(), Entry::Str(worker)));
        }
        for (node, until) in &self.lock_until_ms {
            entries.push((format!("{P_LOCK_UNTIL}{node}").into(), Entry::Int(*until)));
        }
        for (node, left) in &self.pull_retries {
            entries.push((
                format!("{P_PULL_RETRIES}{node}").into(),
                Entry::Uint(*left as u64),
            ));
        }
        for (node, key) in &self.subscriptions {
            entries.push((format!("{P_SUBSCRIPTION}{node}").into(), Entry::Str(key)));
        }
        for (node, call) in &self.calls {
            entries.push((format!("{P_CALL}{node}").into(), Entry::Uint(*call as u64)));
        }
        for (node, assignee) in &self.assignees {
            entries.push((format!("{P_ASSIGNEE}{node}").into(), Entry::Str(assignee)));
        }
        for (body, state) in &self.multis {
            entries.push((format!("{P_MULTI}{body}").into(), Entry::Vars(state)));
        }
        for (node, call) in &self.children {
            entries.push((format!("{P_CHILD}{node}").into(), Entry::Uint(*call as u64)));
        }
        for (scope, locals) in &self.locals {
            entries.push((format!("{P_LOCALS}{scope}").into(), Entry::Vars(locals)));
        }
        for (event, held) in &self.conditions {
            entries.push((
                format!("{P_CONDITION}{event}").into(),
                Entry::Uint(*held as u64),
            ));
        }
        for (handler, throws) in &self.owed {
            entries.push((format!("{P_OWED}{handler}").into(), Entry::StrList(throws)));
        }
        for (key, value) in &self.extra {
            // A malformed known key was kept verbatim; a typed value for the same key
            // (written since) wins.
            if entries.iter().any(|(k, _)| k == key) {
                continue;
            }
            // Unknown keys are written as they came; a known key kept raw is written
            // canonically, since a later decode may read it typed.
            let entry = if is_known_key(key) {
                Entry::RawCanonical(value)
            } else {
                Entry::Raw(value)
            };
            entries.push((key.as_str().into(), entry));
        }
        entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        mp::map_len(out, entries.len());
        for (key, entry) in &entries {
            mp::str(out, key);
            entry.write(out);
        }
    }

    /// Decodes snapshot bytes. Never panics. Unknown keys and malformed values of known
    /// keys are preserved verbatim; only bytes that are not a string-keyed MessagePack
    /// map at all, or a format newer than [`FORMAT_VERSION`], are refused.
    pub fn decode(bytes: &[u8]) -> Result<Snapshot, Error> {
        let undecodable = |why: &str| Error::SnapshotUndecodable(why.to_owned());
        let mut rd = rd::Rd::new(bytes);
        let len = rd
            .map_len()
            .ok_or_else(|| undecodable("top level is not a map"))?;
        let mut snap = Snapshot::default();
        // Keys seen so far, on the stack for any realistic snapshot.
        let mut seen = SeenKeys::default();
        for _ in 0..len {
            let key = rd
                .str()
                .ok_or_else(|| undecodable("a top-level key is not a UTF-8 string"))?;
            // A canonical map has no duplicate keys; in a damaged one the first wins.
            let duplicate = !seen.insert(key);
            // Typed read on a copy of the cursor; on failure the value is re-read
            // verbatim from where it starts.
            let mut probe = rd.clone();
            let typed = !duplicate && snap.absorb(key, &mut probe)?;
            if typed {
                rd = probe;
                continue;
            }
            let raw = rd
                .raw_value(DECODE_DEPTH_MAX)
                .map_err(|e| Error::SnapshotUndecodable(format!("value of `{key}`: {e}")))?;
            if !duplicate && key != K_VERSION {
                // A known key kept raw is kept in canonical order (a later decode may
                // read it typed); an unknown one exactly as it came.
                let raw = if is_known_key(key) {
                    let raw = canonical(raw);
                    // The canonical form may read typed where the damaged one did not
                    // (a key written twice, the dropped occurrence malformed): read it
                    // now, or the next decode of these bytes would give another state.
                    let mut bytes = Vec::new();
                    mp::raw(&mut bytes, &raw);
                    if snap.absorb(key, &mut rd::Rd::new(&bytes))? {
                        continue;
                    }
                    raw
                } else {
                    raw
                };
                snap.extra.insert(key.to_owned(), raw);
            }
        }
        if !rd.is_empty() {
            return Err(Error::SnapshotUndecodable(format!(
                "{} trailing bytes after the map",
                rd.remaining()
            )));
        }
        if !snap.tokens.is_sorted() {
            snap.tokens.sort();
        }
        Ok(snap)
    }

    /// Reads one known key's value into the typed fields. `Ok(false)` when the key is
    /// unknown or its value malformed (the caller then keeps it verbatim); `Err` only for
    /// a format newer than this engine's.
    fn absorb<'b>(&mut self, key: &str, rd: &mut rd::Rd<'b>) -> Result<bool, Error> {
        let ok = match key {
            K_VERSION => match rd.uint() {
                Some(found) if found > FORMAT_VERSION => {
                    return Err(Error::SnapshotTooNew {
                        found,
                        supported: FORMAT_VERSION,
                    })
                }
                // A malformed version reads as the current one and is dropped: the next
                // encode writes the current version anyway.
                found => found.is_some(),
            },
            K_STATUS => rd
                .uint()
                .and_then(Status::from_code)
                .map(|s| self.status = s)
                .is_some(),
            K_FAIL_CODE => rd
                .str()
                .map(|t| self.failure_code = Some(t.into()))
                .is_some(),
            K_FAIL_NODE => rd
                .str()
                .map(|t| self.failure_node = Some(t.into()))
                .is_some(),
            K_FAIL_DETAIL => rd
                .str()
                .map(|t| self.failure_detail = Some(t.into()))
                .is_some(),
            K_TOKENS => rd.str_list().map(|l| self.tokens = l).is_some(),
            K_VARS => rd.vars(DECODE_DEPTH_MAX).map(|v| self.vars = v).is_some(),
            K_TIMERS => rd.u32_map().map(|m| self.timers = m).is_some(),
            K_INCARNATION => rd
                .uint()
                .and_then(|n| u32::try_from(n).ok())
                .map(|n| self.incarnation = n)
                .is_some(),
            K_CYCLES => rd.u32_map().map(|m| self.cycles = m).is_some(),
            K_SPENT => rd.str_list().map(|l| self.spent = l).is_some(),
            K_COMPENSABLE => rd.str_list().map(|l| self.compensable = l).is_some(),
            K_PARENT => rd
                .vars(DECODE_DEPTH_MAX)
                .and_then(|v| link_of(&v))
                .map(|l| self.parent = Some(Box::new(l)))
                .is_some(),
            _ => self.absorb_family(key, rd),
        };
        Ok(ok)
    }

    fn absorb_family(&mut self, key: &str, rd: &mut rd::Rd<'_>) -> bool {
        if let Some(gw) = key.strip_prefix(P_JOIN) {
            rd.str_list()
                .map(|l| self.joins.insert(gw.to_owned(), l))
                .is_some()
        } else if let Some(node) = key.strip_prefix(P_ATTEMPT) {
            // Tolerant read: anything but a counter in 1..=u32::MAX is malformed and reads
            // as 0 (it stays verbatim, so the bytes survive until a new write).
            rd.uint()
                .filter(|a| *a >= 1)
                .and_then(|a| u32::try_from(a).ok())
                .map(|a| self.attempts.insert(node.to_owned(), a))
                .is_some()
        } else if let Some(node) = key.strip_prefix(P_MARKER) {
            rd.str()
                .map(|c| self.markers.insert(node.to_owned(), c.to_owned()))
                .is_some()
        } else if let Some(node) = key.strip_prefix(P_FIRST_FAILURE) {
            rd.int()
                .map(|at| self.first_failure_ms.insert(node.to_owned(), at))
                .is_some()
        } else if let Some(node) = key.strip_prefix(P_READOPTIONS) {
            rd.uint()
                .and_then(|n| u32::try_from(n).ok())
                .map(|n| self.readoptions.insert(node.to_owned(), n))
                .is_some()
        } else if let Some(node) = key.strip_prefix(P_CALL) {
            rd.uint()
                .and_then(|n| u32::try_from(n).ok())
                .map(|n| self.calls.insert(node.to_owned(), n))
                .is_some()
        } else if let Some(handler) = key.strip_prefix(P_OWED) {
            rd.str_list()
                .map(|l| self.owed.insert(handler.to_owned(), l))
                .is_some()
        } else if let Some(event) = key.strip_prefix(P_CONDITION) {
            rd.uint()
                .filter(|h| *h == 1)
                .map(|h| self.conditions.insert(event.to_owned(), h as u32))
                .is_some()
        } else if let Some(node) = key.strip_prefix(P_CHILD) {
            rd.uint()
                .and_then(|n| u32::try_from(n).ok())
                .map(|n| self.children.insert(node.to_owned(), n))
                .is_some()
        } else if let Some(node) = key.strip_prefix(P_SUBSCRIPTION) {
            rd.str()
                .map(|k| self.subscriptions.insert(node.to_owned(), k.to_owned()))
                .is_some()
        } else if let Some(node) = key.strip_prefix(P_ASSIGNEE) {
            rd.str()
                .map(|a| self.assignees.insert(node.to_owned(), a.to_owned()))
                .is_some()
        } else if let Some(node) = key.strip_prefix(P_BUDGET_BASE) {
            // Tolerant read, like the attempt counter: a malformed base stays verbatim
            // and reads as 0 (the budget counts from the first attempt).
            rd.uint()
                .and_then(|b| u32::try_from(b).ok())
                .map(|b| self.budget_bases.insert(node.to_owned(), b))
                .is_some()
        } else if let Some(node) = key.strip_prefix(P_LOCK_WORKER) {
            rd.str()
                .map(|w| self.lock_workers.insert(node.to_owned(), w.to_owned()))
                .is_some()
        } else if let Some(node) = key.strip_prefix(P_LOCK_UNTIL) {
            rd.int()
                .map(|at| self.lock_until_ms.insert(node.to_owned(), at))
                .is_some()
        } else if let Some(body) = key.strip_prefix(P_MULTI) {
            rd.vars(DECODE_DEPTH_MAX)
                .map(|v| self.multis.insert(body.to_owned(), v))
                .is_some()
        } else if let Some(scope) = key.strip_prefix(P_LOCALS) {
            rd.vars(DECODE_DEPTH_MAX)
                .map(|v| self.locals.insert(scope.to_owned(), v))
                .is_some()
        } else if let Some(node) = key.strip_prefix(P_PULL_RETRIES) {
            rd.uint()
                .and_then(|n| u32::try_from(n).ok())
                .map(|n| self.pull_retries.insert(node.to_owned(), n))
                .is_some()
        } else {
            false
        }
    }
}

/// The parent link as the snapshot keeps it: `{"c": call, "i": instance, "n": node}`.
fn parent_vars(link: &crate::ParentLink) -> Variables {
    Variables::from([
        ("c".to_owned(), serde_json::json!(link.call)),
        ("i".to_owned(), serde_json::json!(link.instance)),
        ("n".to_owned(), serde_json::json!(link.node)),
    ])
}

/// The parent link kept as [`parent_vars`] writes it; `None` for anything else (the key
/// is then kept verbatim).
fn link_of(v: &Variables) -> Option<crate::ParentLink> {
    if v.len() != 3 {
        return None;
    }
    Some(crate::ParentLink {
        instance: v.get("i")?.as_str()?.to_owned(),
        node: v.get("n")?.as_str()?.to_owned(),
        call: u32::try_from(v.get("c")?.as_u64()?).ok()?,
    })
}

/// `v` with every map's entries in canonical order: string keys in byte order (as the
/// typed families write them), other keys by their encoding.
fn canonical(v: rmpv::Value) -> rmpv::Value {
    use rmpv::Value;
    match v {
        Value::Map(entries) => {
            let all_str = entries.iter().all(|(k, _)| k.as_str().is_some());
            let mut sorted: Vec<(Vec<u8>, Value, Value)> = entries
                .into_iter()
                .map(|(k, v)| {
                    let (k, v) = (canonical(k), canonical(v));
                    let mut order = Vec::new();
                    if all_str {
                        order.extend_from_slice(k.as_str().unwrap_or_default().as_bytes());
                    } else {
                        mp::raw(&mut order, &k);
                    }
                    (order, k, v)
                })
                .collect();
            // Stable: a key written twice keeps its occurrences in their order, and only
            // the last is kept — the one a typed read keeps — or a later decode that reads
            // the value typed would write other bytes for the same state.
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            let mut entries: Vec<(Value, Value)> = Vec::with_capacity(sorted.len());
            let mut last: Option<Vec<u8>> = None;
            for (order, k, v) in sorted {
                if last.as_ref() == Some(&order) {
                    entries.pop();
                }
                entries.push((k, v));
                last = Some(order);
            }
            Value::Map(entries)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(canonical).collect()),
        // The typed writer writes every float as f64: a value kept raw does too, or a
        // later decode that reads it typed would write other bytes for the same state.
        Value::F32(f) => Value::F64(f64::from(f)),
        other => other,
    }
}

/// A key this engine reads typed (a top-level key or a per-node family).
fn is_known_key(key: &str) -> bool {
    [
        K_VERSION,
        K_STATUS,
        K_FAIL_CODE,
        K_FAIL_NODE,
        K_FAIL_DETAIL,
        K_TOKENS,
        K_VARS,
        K_TIMERS,
        K_INCARNATION,
        K_CYCLES,
        K_SPENT,
        K_PARENT,
        K_COMPENSABLE,
    ]
    .contains(&key)
        || [
            P_JOIN,
            P_ATTEMPT,
            P_MARKER,
            P_FIRST_FAILURE,
            P_BUDGET_BASE,
            P_READOPTIONS,
            P_LOCK_WORKER,
            P_LOCK_UNTIL,
            P_PULL_RETRIES,
            P_SUBSCRIPTION,
            P_CALL,
            P_ASSIGNEE,
            P_MULTI,
            P_CHILD,
            P_OWED,
            P_LOCALS,
            P_CONDITION,
        ]
        .iter()
        .any(|p| key.starts_with(p))
}

/// The top-level keys a decode has met: the first 16 on the stack, the rest in a Vec.
#[derive(Default)]
struct SeenKeys<'a> {
    stack: [&'a str; 16],
    len: usize,
    overflow: Vec<&'a str>,
}

impl<'a> SeenKeys<'a> {
    /// `false` when `key` was already there.
    fn insert(&mut self, key: &'a str) -> bool {
        if self.stack[..self.len].contains(&key) || self.overflow.contains(&key) {
            return false;
        }
        if self.len < self.stack.len() {
            self.stack[self.len] = key;
            self.len += 1;
        } else {
            self.overflow.push(key);
        }
        true
    }
}

/// A zero-copy MessagePack reader over a byte slice: every read returns `None` on a
/// marker it does not expect or on truncation, and never panics or over-allocates.
mod rd {
    use qflow_loader::model::Variables;
    use serde_json::Value as Json;
    use std::collections::BTreeMap;

    #[derive(Clone)]
    pub struct Rd<'a> {
        b: &'a [u8],
    }

    impl<'a> Rd<'a> {
        pub fn new(b: &'a [u8]) -> Rd<'a> {
            Rd { b }
        }

        pub fn is_empty(&self) -> bool {
            self.b.is_empty()
        }

        pub fn remaining(&self) -> usize {
            self.b.len()
        }

        fn byte(&mut self) -> Option<u8> {
            let (first, rest) = self.b.split_first()?;
            self.b = rest;
            Some(*first)
        }

        fn take(&mut self, n: usize) -> Option<&'a [u8]> {
            if n > self.b.len() {
                return None;
            }
            let (head, rest) = self.b.split_at(n);
            self.b = rest;
            Some(head)
        }

        fn be<const N: usize>(&mut self) -> Option<[u8; N]> {
            self.take(N)?.try_into().ok()
        }

        fn peek(&self) -> Option<u8> {
            self.b.first().copied()
        }

        pub fn str(&mut self) -> Option<&'a str> {
            let len = match self.peek()? {
                m @ 0xa0..=0xbf => {
                    self.byte();
                    (m & 0x1f) as usize
                }
                0xd9 => {
                    self.byte();
                    self.byte()? as usize
                }
                0xda => {
                    self.byte();
                    u16::from_be_bytes(self.be()?) as usize
                }
                0xdb => {
                    self.byte();
                    u32::from_be_bytes(self.be()?) as usize
                }
                _ => return None,
            };
            std::str::from_utf8(self.take(len)?).ok()
        }

        /// Any integer marker holding a value ≥ 0.
        pub fn uint(&mut self) -> Option<u64> {
            let i = self.integer()?;
            u64::try_from(i).ok()
        }

        /// Any integer marker holding a value that fits an i64.
        pub fn int(&mut self) -> Option<i64> {
            i64::try_from(self.integer()?).ok()
        }

        fn integer(&mut self) -> Option<i128> {
            let m = self.peek()?;
            let v: i128 = match m {
                0x00..=0x7f => m as i128,
                0xe0..=0xff => (m as i8) as i128,
                0xcc => {
                    self.byte();
                    return Some(self.byte()? as i128);
                }
                0xcd => {
                    self.byte();
                    return Some(u16::from_be_bytes(self.be()?) as i128);
                }
                0xce => {
                    self.byte();
                    return Some(u32::from_be_bytes(self.be()?) as i128);
                }
                0xcf => {
                    self.byte();
                    return Some(u64::from_be_bytes(self.be()?) as i128);
                }
                0xd0 => {
                    self.byte();
                    return Some(i8::from_be_bytes(self.be()?) as i128);
                }
                0xd1 => {
                    self.byte();
                    return Some(i16::from_be_bytes(self.be()?) as i128);
                }
                0xd2 => {
                    self.byte();
                    return Some(i32::from_be_bytes(self.be()?) as i128);
                }
                0xd3 => {
                    self.byte();
                    return Some(i64::from_be_bytes(self.be()?) as i128);
                }
                _ => return None,
            };
            self.byte();
            Some(v)
        }

        pub fn array_len(&mut self) -> Option<usize> {
            self.container_len(0x90, 0xdc, 0xdd)
        }

        pub fn map_len(&mut self) -> Option<usize> {
            self.container_len(0x80, 0xde, 0xdf)
        }

        fn container_len(&mut self, fix: u8, m16: u8, m32: u8) -> Option<usize> {
            let m = self.peek()?;
            let len = if m & 0xf0 == fix {
                self.byte();
                (m & 0x0f) as usize
            } else if m == m16 {
                self.byte();
                u16::from_be_bytes(self.be()?) as usize
            } else if m == m32 {
                self.byte();
                u32::from_be_bytes(self.be()?) as usize
            } else {
                return None;
            };
            // Every element takes at least one byte: a longer claim is a lie.
            (len <= self.b.len()).then_some(len)
        }

        pub fn str_list(&mut self) -> Option<Vec<String>> {
            let len = self.array_len()?;
            let mut out = Vec::with_capacity(len);
            for _ in 0..len {
                out.push(self.str()?.to_owned());
            }
            Some(out)
        }

        pub fn u32_map(&mut self) -> Option<BTreeMap<String, u32>> {
            let len = self.map_len()?;
            let mut out = BTreeMap::new();
            for _ in 0..len {
                let k = self.str()?.to_owned();
                let v = u32::try_from(self.uint()?).ok()?;
                out.insert(k, v);
            }
            Some(out)
        }

        pub fn vars(&mut self, depth: usize) -> Option<Variables> {
            let len = self.map_len()?;
            let mut out = Variables::new();
            for _ in 0..len {
                let k = self.str()?.to_owned();
                let v = self.json(depth)?;
                out.insert(k, v);
            }
            Some(out)
        }

        /// MessagePack → JSON; `None` for what JSON cannot hold (binary, ext, non-string
        /// keys, NaN), which makes the value malformed as a variable.
        fn json(&mut self, depth: usize) -> Option<Json> {
            let depth = depth.checked_sub(1)?;
            let m = self.peek()?;
            Some(match m {
                0xc0 => {
                    self.byte();
                    Json::Null
                }
                0xc2 | 0xc3 => {
                    self.byte();
                    Json::Bool(m == 0xc3)
                }
                0xca => {
                    self.byte();
                    let f = f32::from_be_bytes(self.be()?) as f64;
                    Json::Number(serde_json::Number::from_f64(f)?)
                }
                0xcb => {
                    self.byte();
                    let f = f64::from_be_bytes(self.be()?);
                    Json::Number(serde_json::Number::from_f64(f)?)
                }
                0xa0..=0xbf | 0xd9..=0xdb => Json::String(self.str()?.to_owned()),
                0x90..=0x9f | 0xdc | 0xdd => {
                    let len = self.array_len()?;
                    let mut items = Vec::with_capacity(len);
                    for _ in 0..len {
                        items.push(self.json(depth)?);
                    }
                    Json::Array(items)
                }
                0x80..=0x8f | 0xde | 0xdf => {
                    let len = self.map_len()?;
                    let mut map = serde_json::Map::new();
                    for _ in 0..len {
                        let k = self.str()?.to_owned();
                        let v = self.json(depth)?;
                        map.insert(k, v);
                    }
                    Json::Object(map)
                }
                _ => {
                    let i = self.integer()?;
                    match u64::try_from(i) {
                        Ok(u) => Json::from(u),
                        Err(_) => Json::from(i64::try_from(i).ok()?),
                    }
                }
            })
        }

        /// The next value, whatever it is, kept verbatim.
        pub fn raw_value(&mut self, depth: usize) -> Result<rmpv::Value, String> {
            let mut b = self.b;
            let v = rmpv::decode::read_value_with_max_depth(&mut b, depth)
                .map_err(|e| e.to_string())?;
            self.b = b;
            Ok(v)
        }
    }
}

/// One value to write under a top-level key.
enum Entry<'a> {
    Uint(u64),
    Int(i64),
    Str(&'a str),
    StrList(&'a [String]),
    UintMap(&'a BTreeMap<String, u32>),
    Vars(&'a Variables),
    Raw(&'a rmpv::Value),
    RawCanonical(&'a rmpv::Value),
}

impl Entry<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Entry::Uint(u) => mp::uint(out, *u),
            Entry::Int(i) => mp::int(out, *i),
            Entry::Str(s) => mp::str(out, s),
            Entry::StrList(list) => {
                mp::array_len(out, list.len());
                for s in list.iter() {
                    mp::str(out, s);
                }
            }
            Entry::UintMap(map) => {
                mp::map_len(out, map.len());
                for (k, v) in map.iter() {
                    mp::str(out, k);
                    mp::uint(out, *v as u64);
                }
            }
            Entry::Vars(vars) => {
                mp::map_len(out, vars.len());
                for (k, v) in vars.iter() {
                    mp::str(out, k);
                    mp::json(out, v);
                }
            }
            Entry::Raw(v) => mp::raw(out, v),
            Entry::RawCanonical(v) => mp::raw_canonical(out, v),
        }
    }
}

/// A minimal canonical MessagePack writer: smallest encodings, f64 for every float,
/// object keys in byte order. Writing into a `Vec` cannot fail, so nothing here returns
/// a `Result`.
pub(crate) mod mp {
    use serde_json::Value as Json;

    pub fn uint(out: &mut Vec<u8>, v: u64) {
        if v < 0x80 {
            out.push(v as u8);
        } else if v <= u8::MAX as u64 {
            out.extend_from_slice(&[0xcc, v as u8]);
        } else if v <= u16::MAX as u64 {
            out.push(0xcd);
            out.extend_from_slice(&(v as u16).to_be_bytes());
        } else if v <= u32::MAX as u64 {
            out.push(0xce);
            out.extend_from_slice(&(v as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&v.to_be_bytes());
        }
    }

    pub fn int(out: &mut Vec<u8>, v: i64) {
        if v >= 0 {
            return uint(out, v as u64);
        }
        if v >= -32 {
            out.push(v as i8 as u8);
        } else if v >= i8::MIN as i64 {
            out.extend_from_slice(&[0xd0, v as i8 as u8]);
        } else if v >= i16::MIN as i64 {
            out.push(0xd1);
            out.extend_from_slice(&(v as i16).to_be_bytes());
        } else if v >= i32::MIN as i64 {
            out.push(0xd2);
            out.extend_from_slice(&(v as i32).to_be_bytes());
        } else {
            out.push(0xd3);
            out.extend_from_slice(&v.to_be_bytes());
        }
    }

    fn len_header(out: &mut Vec<u8>, len: usize, fix: u8, fix_max: usize, m16: u8, m32: u8) {
        if len <= fix_max {
            out.push(fix | len as u8);
        } else if len <= u16::MAX as usize {
            out.push(m16);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            out.push(m32);
            out.extend_from_slice(&(len.min(u32::MAX as usize) as u32).to_be_bytes());
        }
    }

    pub fn str(out: &mut Vec<u8>, s: &str) {
        let len = s.len();
        if len < 32 {
            out.push(0xa0 | len as u8);
        } else if len <= u8::MAX as usize {
            out.extend_from_slice(&[0xd9, len as u8]);
        } else if len <= u16::MAX as usize {
            out.push(0xda);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            out.push(0xdb);
            out.extend_from_slice(&(len as u32).to_be_bytes());
        }
        out.extend_from_slice(s.as_bytes());
    }

    pub fn array_len(out: &mut Vec<u8>, len: usize) {
        len_header(out, len, 0x90, 15, 0xdc, 0xdd);
    }

    pub fn map_len(out: &mut Vec<u8>, len: usize) {
        len_header(out, len, 0x80, 15, 0xde, 0xdf);
    }

    pub fn json(out: &mut Vec<u8>, v: &Json) {
        match v {
            Json::Null => out.push(0xc0),
            Json::Bool(false) => out.push(0xc2),
            Json::Bool(true) => out.push(0xc3),
            Json::Number(n) => {
                if let Some(u) = n.as_u64() {
                    uint(out, u);
                } else if let Some(i) = n.as_i64() {
                    int(out, i);
                } else {
                    out.push(0xcb);
                    out.extend_from_slice(&n.as_f64().unwrap_or(0.0).to_be_bytes());
                }
            }
            Json::String(s) => str(out, s),
            Json::Array(items) => {
                array_len(out, items.len());
                for i in items {
                    json(out, i);
                }
            }
            Json::Object(map) => {
                // serde_json's map is a BTreeMap (no `preserve_order`), but sort anyway:
                // the bytes must not depend on a feature flag somebody else turns on.
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
                map_len(out, keys.len());
                for k in keys {
                    str(out, k);
                    json(out, &map[k]);
                }
            }
        }
    }

    /// A value kept verbatim (an unknown key): written as it was read.
    pub fn raw(out: &mut Vec<u8>, v: &rmpv::Value) {
        // Writing into a Vec cannot fail; the only error rmpv reports is the writer's.
        let _ = rmpv::encode::write_value(out, v);
    }

    /// A known key's value that did not read typed, written canonically (see
    /// `canonical`): what one decode keeps raw and a later decode reads typed must be the
    /// same bytes (found by the `snapshot` fuzz target).
    pub fn raw_canonical(out: &mut Vec<u8>, v: &rmpv::Value) {
        raw(out, &super::canonical(v.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value as Json;

    fn bytes_of(v: &Json) -> Vec<u8> {
        let mut out = Vec::new();
        mp::json(&mut out, v);
        out
    }

    #[test]
    fn integers_take_their_smallest_encoding() {
        let cases: &[(i64, &[u8])] = &[
            (0, &[0x00]),
            (127, &[0x7f]),
            (128, &[0xcc, 0x80]),
            (255, &[0xcc, 0xff]),
            (256, &[0xcd, 0x01, 0x00]),
            (65_536, &[0xce, 0x00, 0x01, 0x00, 0x00]),
            (-1, &[0xff]),
            (-32, &[0xe0]),
            (-33, &[0xd0, 0xdf]),
            (-129, &[0xd1, 0xff, 0x7f]),
        ];
        for (n, want) in cases {
            assert_eq!(bytes_of(&Json::from(*n)), *want, "{n}");
        }
        assert_eq!(bytes_of(&Json::from(u64::MAX))[0], 0xcf);
        assert_eq!(bytes_of(&Json::from(1.5))[0], 0xcb);
    }

    #[test]
    fn nested_objects_are_written_in_key_order() {
        let v: Json = serde_json::json!({"b": 1, "a": {"z": 1, "y": 2}});
        let bytes = bytes_of(&v);
        // {"a": {"y": 2, "z": 1}, "b": 1}
        assert_eq!(
            bytes,
            [0x82, 0xa1, b'a', 0x82, 0xa1, b'y', 0x02, 0xa1, b'z', 0x01, 0xa1, b'b', 0x01]
        );
    }

    #[test]
    fn lying_lengths_are_refused_without_allocating_them() {
        // An array claiming 2^32-1 entries in a 6-byte buffer.
        let mut rd = rd::Rd::new(&[0xdd, 0xff, 0xff, 0xff, 0xff, 0x00]);
        assert!(rd.str_list().is_none());
        assert!(Snapshot::decode(&[0xdf, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
