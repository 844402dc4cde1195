//! The validated, immutable definition model that the loader produces and the engine runs.
//!
//! Everything here is plain data plus a few pure functions over it (the backoff formula
//! lives here so that `qflow check --explain` and the engine share one implementation).
//! Nothing in this module parses XML, reads the clock, or does I/O.
//!
//! Order is deterministic everywhere: nodes and flows keep document order, maps are
//! `BTreeMap`, so two loads of the same bytes give equal definitions.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use crate::expr::Expression;

/// Instance variables: a name-ordered map of JSON values.
pub type Variables = BTreeMap<String, serde_json::Value>;

/// A 1-based line and column (columns count characters, not bytes) in the source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

impl std::fmt::Display for Pos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// A span of time in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct DurationMs(pub u64);

/// Index of a node in [`Process::nodes`]. The bits above the node's own may carry three
/// kinds of number (`docs/activity-instances.md`):
/// - the inner instance of a multi-instance activity (`docs/multi-instance.md`): the
///   inner node of the body, run as its `k`-th instance, is `inner.with_instance(k)`;
/// - the activity instance: the `c`-th of the tokens that stand at one node of one scope
///   instance at once is `node.with_copy(c)` (`c` ≥ 2);
/// - the scope runs: for each enclosing sub-process, by nesting level, which of its
///   activity instances the node runs inside (`with_run`; 0 for the first).
///
/// The first instance of everything has no number, so a model without two tokens in one
/// activity names every node as it always did. [`Process::node`] reads the node whatever
/// the numbers. A plain index has every number 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeIdx(pub u128);

impl NodeIdx {
    /// Bits of the index that name the node; above them the inner instance, the
    /// activity instance, then one field per nesting level of scope runs. 2^24 nodes is
    /// more than the loader's element limit allows.
    const NODE_BITS: u32 = 24;
    const NODE_MASK: u128 = (1 << Self::NODE_BITS) - 1;
    const INSTANCE_BITS: u32 = 12;
    const INSTANCE_MASK: u128 = (1 << Self::INSTANCE_BITS) - 1;
    const COPY_SHIFT: u32 = Self::NODE_BITS + Self::INSTANCE_BITS;
    const COPY_BITS: u32 = 12;
    const COPY_MASK: u128 = (1 << Self::COPY_BITS) - 1;
    const RUN_SHIFT: u32 = Self::COPY_SHIFT + Self::COPY_BITS;
    const RUN_BITS: u32 = 10;
    const RUN_MASK: u128 = (1 << Self::RUN_BITS) - 1;
    /// Nesting levels whose scope runs an index can carry: a sub-process nested deeper
    /// runs once at a time.
    pub const RUN_LEVELS: usize = 8;
    /// The largest inner-instance number an index can carry.
    pub const INSTANCE_MAX: u32 = (1 << Self::INSTANCE_BITS) - 1;
    /// The largest activity-instance number an index can carry (also the largest run of
    /// a sub-process whose inside it can name).
    pub const COPY_MAX: u32 = (1 << Self::RUN_BITS) - 1;

    /// The node itself, index `i` of [`Process::nodes`].
    pub fn at(i: usize) -> NodeIdx {
        NodeIdx(i as u128)
    }

    /// The position of the node in [`Process::nodes`].
    pub fn position(self) -> usize {
        (self.0 & Self::NODE_MASK) as usize
    }

    /// The node, without any number.
    pub fn plain(self) -> NodeIdx {
        NodeIdx(self.0 & Self::NODE_MASK)
    }

    /// The node in its inner instance and scope runs, without an activity-instance
    /// number: the first instance of the node where this one runs.
    pub fn uncopied(self) -> NodeIdx {
        NodeIdx(self.0 & !(Self::COPY_MASK << Self::COPY_SHIFT))
    }

    /// The inner-instance number (1-based); 0 for a plain node.
    pub fn instance(self) -> u32 {
        ((self.0 >> Self::NODE_BITS) & Self::INSTANCE_MASK) as u32
    }

    /// The node run as its `k`-th inner instance (`k` is capped at [`Self::INSTANCE_MAX`]),
    /// keeping its other numbers.
    pub fn with_instance(self, k: u32) -> NodeIdx {
        let k = u128::from(k.min(Self::INSTANCE_MAX));
        NodeIdx((self.0 & !(Self::INSTANCE_MASK << Self::NODE_BITS)) | (k << Self::NODE_BITS))
    }

    /// The activity-instance number: 0 for the first (unnumbered) instance, else ≥ 2.
    pub fn copy(self) -> u32 {
        ((self.0 >> Self::COPY_SHIFT) & Self::COPY_MASK) as u32
    }

    /// The node as its `c`-th activity instance (0 or 1: the first, unnumbered; capped at
    /// [`Self::COPY_MAX`]), keeping its other numbers.
    pub fn with_copy(self, c: u32) -> NodeIdx {
        let c = if c <= 1 {
            0
        } else {
            u128::from(c.min(Self::COPY_MAX))
        };
        NodeIdx(self.uncopied().0 | (c << Self::COPY_SHIFT))
    }

    /// Which activity instance of its enclosing sub-process at nesting `level` the node
    /// runs inside: 0 for the first (and for a level beyond [`Self::RUN_LEVELS`]).
    pub fn run(self, level: usize) -> u32 {
        if level >= Self::RUN_LEVELS {
            return 0;
        }
        let shift = Self::RUN_SHIFT + level as u32 * Self::RUN_BITS;
        ((self.0 >> shift) & Self::RUN_MASK) as u32
    }

    /// The node running inside the `r`-th instance of its enclosing sub-process at
    /// nesting `level` (0 or 1: the first; a level beyond [`Self::RUN_LEVELS`] is
    /// ignored).
    pub fn with_run(self, level: usize, r: u32) -> NodeIdx {
        if level >= Self::RUN_LEVELS {
            return self;
        }
        let shift = Self::RUN_SHIFT + level as u32 * Self::RUN_BITS;
        let r = if r <= 1 {
            0
        } else {
            u128::from(r.min(Self::COPY_MAX))
        };
        NodeIdx((self.0 & !(Self::RUN_MASK << shift)) | (r << shift))
    }

    /// The node in its inner instance, without an activity instance or scope runs: how
    /// the model's own tables (multi-instance bodies, compensations, event
    /// sub-processes) know it.
    pub fn node_and_instance(self) -> NodeIdx {
        NodeIdx(self.0 & ((1 << Self::COPY_SHIFT) - 1))
    }

    /// Whether the node runs inside any sub-process instance but the first.
    pub fn in_later_run(self) -> bool {
        self.0 >> Self::RUN_SHIFT != 0
    }

    /// `self` with the scope runs of `other` (every level).
    pub fn with_runs_of(self, other: NodeIdx) -> NodeIdx {
        let runs = !((1u128 << Self::RUN_SHIFT) - 1);
        NodeIdx((self.0 & !runs) | (other.0 & runs))
    }
}

/// Index of a sequence flow in [`Process::flows`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowIdx(pub u32);

/// One executable process, validated and ready to run.
#[derive(Debug, Clone)]
pub struct Definition {
    /// The BPMN process id.
    pub id: String,
    pub name: Option<String>,
    /// Lowercase hex SHA-256 of the source bytes the definition was loaded from. Used as
    /// the deployment identity: same content, same version.
    pub content_hash: String,
    pub process: Process,
    /// Error declarations of the enclosing `<definitions>`, by BPMN id.
    pub errors: BTreeMap<String, ErrorDef>,
    /// Message declarations of the enclosing `<definitions>`, by BPMN id → message name.
    pub messages: BTreeMap<String, String>,
    /// Message name → its correlation key expression (`q:correlationKey` or Zeebe's
    /// `zeebe:subscription`). A token waiting for such a message opens a subscription
    /// under the key's value, and a message published with that name and key reaches it.
    pub correlation_keys: BTreeMap<String, crate::expr::Expression>,
    /// Whether a node waits for a signal (a signal catch or boundary event): only then
    /// does a step look for signal waits to subscribe.
    pub waits_for_signals: bool,
    /// `camunda:initiator` of the process's start event: the variable Camunda sets to the
    /// user who started the instance. qflow's core knows no users, so it is the start's
    /// variable of that name when given, and null otherwise — a model whose assignee is
    /// `${initiator}` then starts with the task unassigned, as Camunda does for an
    /// anonymous start, instead of failing on an unknown variable.
    pub initiator: Option<String>,
    /// The L7 classification.
    pub class: Classification,
}

/// L7: does this definition need a durable store?
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classification {
    /// Runs to completion in one go; no datasource needed.
    Stateless,
    /// Needs a durable store; `reasons` says why, one entry per cause, in document order
    /// (for example `"node `pay`: q:retry"`).
    Stateful { reasons: Vec<String> },
}

impl Classification {
    pub fn is_stateful(&self) -> bool {
        matches!(self, Classification::Stateful { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorDef {
    pub id: String,
    pub name: Option<String>,
    /// The `errorCode`; a BPMN error thrown by a handler matches on this.
    pub code: Option<String>,
}

/// Node ids → index ([`Process::by_id`]): a hash map (foldhash, a random seed per map), so
/// a lookup hashes the id once instead of comparing it with a tree node's keys one by one.
/// It is never iterated, and its `Debug` lists the ids in order, so nothing the loader
/// prints or compares depends on the seed.
#[derive(Clone, Default)]
pub struct NodeIds(std::collections::HashMap<String, NodeIdx, foldhash::fast::RandomState>);

impl NodeIds {
    pub fn get(&self, id: &str) -> Option<&NodeIdx> {
        self.0.get(id)
    }

    pub fn contains_key(&self, id: &str) -> bool {
        self.0.contains_key(id)
    }

    /// Adds `id` unless it is there already (the first node with an id keeps it).
    pub fn insert_first(&mut self, id: String, idx: NodeIdx) {
        self.0.entry(id).or_insert(idx);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<(String, NodeIdx)> for NodeIds {
    fn from_iter<I: IntoIterator<Item = (String, NodeIdx)>>(iter: I) -> Self {
        NodeIds(iter.into_iter().collect())
    }
}

impl std::fmt::Debug for NodeIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sorted: BTreeMap<&String, &NodeIdx> = self.0.iter().collect();
        sorted.fmt(f)
    }
}

/// The graph: every node of the process, including those inside embedded sub-processes
/// (their `scope` names the sub-process node).
#[derive(Debug, Clone)]
pub struct Process {
    pub nodes: Vec<Node>,
    pub flows: Vec<Flow>,
    /// Node ids → index, for lookups by name (several a step, [`Process::find`]).
    pub by_id: NodeIds,
    /// Vendor mappings on events a token passes through (a none start, a none
    /// intermediate throw, a none end event): `zeebe:ioMapping` outputs, or
    /// `camunda:inputOutput` where Camunda 7 allows it. Empty for almost every model.
    pub event_mappings: BTreeMap<NodeIdx, EventMappings>,
    /// Zeebe's `zeebe:ioMapping` on embedded sub-processes, by the sub-process node (for
    /// a multi-instance sub-process, its inner node): the inputs are local variables of
    /// each scope instance of it, made as a token enters it; the outputs are evaluated
    /// as it completes and written to the scope around it (`docs/vendor-mappings.md`,
    /// "Sub-processes"). Empty for almost every model.
    pub sub_process_mappings: BTreeMap<NodeIdx, EventMappings>,
    /// The event sub-processes (`subProcess triggeredByEvent="true"`, §10.3.5), in
    /// document order. Empty for almost every model.
    pub event_sub_processes: Vec<EventSubProcess>,
    /// The multi-instance activities (§10.2.8), by their body: the node flows and
    /// boundary events attach to, a [`NodeKind::SubProcess`] once loaded, whose one child
    /// is the inner activity run once per inner instance. Empty for almost every model.
    pub multi_instances: BTreeMap<NodeIdx, MultiInstance>,
    /// The activities with a compensation boundary event (§10.5.5), by the activity:
    /// the boundary and the handler its association names. Empty for almost every model.
    pub compensations: BTreeMap<NodeIdx, Compensation>,
    /// The ad-hoc sub-processes (`adHocSubProcess`, §10.3.4), by their node, a
    /// [`NodeKind::SubProcess`] without start events: what a token entering one activates
    /// and when it completes, as Zeebe runs it (`docs/ad-hoc-sub-processes.md`). Empty
    /// for almost every model.
    pub ad_hocs: BTreeMap<NodeIdx, AdHoc>,
    /// The default flows of activities (`<task default="…">`), by the activity: taken
    /// when none of the activity's other outgoing flows is taken — every one of them has
    /// a condition and none holds — as Camunda 7 runs it (Zeebe has no conditional flows
    /// out of activities). A gateway's default is in its [`NodeKind`]. Empty for almost
    /// every model.
    pub activity_defaults: BTreeMap<NodeIdx, FlowIdx>,
    /// The conditional events (boundary, intermediate catch, event sub-process start),
    /// in document order: the step evaluates their conditions when they are armed and
    /// when variables change (`docs/conditional-events.md`). Empty for almost every
    /// model, which then pays nothing for them.
    pub conditionals: Vec<NodeIdx>,
}

/// An ad-hoc sub-process, run as Camunda 8 (Zeebe) runs its BPMN implementation: on
/// entry the elements its active elements collection names are activated, one activity
/// instance each, in the list's order; each time a path inside ends (an element with no
/// outgoing flow completes) the completion condition is evaluated. No condition: it
/// completes once nothing inside is active. True: it completes, cancelling what is
/// still active when `cancel_remaining`, else once nothing is. False: it waits.
#[derive(Debug, Clone, PartialEq)]
pub struct AdHoc {
    /// `zeebe:adHoc activeElementsCollection`: a list of the ids of elements directly
    /// inside without incoming flows. Without it nothing is activated.
    pub active_elements: Option<Expression>,
    /// `<completionCondition>`, evaluated inside the sub-process instance.
    pub completion: Option<Expression>,
    /// `cancelRemainingInstances` (default `true`).
    pub cancel_remaining: bool,
}

/// An activity's compensation: the boundary event attached to it and the handler
/// (`isForCompensation="true"`) the boundary's `<association>` names. The handler is a
/// task in the activity's scope with no sequence flows; it runs once per completion of
/// the activity that a compensation throw picks up (`docs/compensation.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compensation {
    pub boundary: NodeIdx,
    pub handler: NodeIdx,
}

/// A multi-instance activity (`multiInstanceLoopCharacteristics`, or a vendor's form of
/// it): how many inner instances, over what, how they run, and what they give back.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiInstance {
    /// `isSequential="true"`: one inner instance after another; else all at once.
    pub sequential: bool,
    /// How many inner instances there are: a cardinality or an input collection.
    pub items: MultiItems,
    /// The local variable holding an inner instance's item of the input collection.
    pub element: Option<String>,
    /// The variable the body writes, as it completes, with one entry per inner
    /// instance in input order (null for one cancelled or never started).
    pub output_collection: Option<String>,
    /// The entry an inner instance gives to the output collection, evaluated as it
    /// completes; without it the entry is null.
    pub output_element: Option<Expression>,
    /// Evaluated after each inner instance completes; true ends the body, cancelling
    /// the inner instances still running.
    pub completion: Option<Expression>,
    /// The inner activity: a child of the body, with no flows of its own.
    pub inner: NodeIdx,
    /// The value of `loopCounter` in the first inner instance: 1 (Zeebe, `q:`), or 0
    /// (Camunda 7, whose counter starts at 0).
    pub counter_base: u32,
}

/// How a multi-instance activity counts its inner instances.
#[derive(Debug, Clone, PartialEq)]
pub enum MultiItems {
    /// `loopCardinality`: an expression giving a non-negative integer.
    Cardinality(Expression),
    /// An input collection: an expression giving a list, one inner instance per item.
    Collection(Expression),
    /// Camunda 7's `loopCardinality` beside a `camunda:collection`: the cardinality says
    /// how many inner instances there are, and inner instance `k` takes the collection's
    /// item `k` (from the first); a cardinality past the collection's end fails the
    /// instance as the body starts (`docs/multi-instance.md`).
    Indexed {
        cardinality: Expression,
        collection: Expression,
    },
}

/// An event sub-process: an embedded sub-process ([`NodeKind::SubProcess`]) that no flow
/// enters. Its one start event ([`NodeKind::TriggeredStart`] inside it) is armed while
/// the sub-process's enclosing scope — the process, or an embedded sub-process — is
/// active, the way a boundary event is armed while its activity runs; when the trigger
/// fires, a token enters the event sub-process at that start event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSubProcess {
    /// The event sub-process node.
    pub node: NodeIdx,
    /// Its start event.
    pub start: NodeIdx,
    /// `isInterrupting` of the start event (default `true`; an error start always is).
    /// An interrupting one ends everything else in the enclosing scope when it fires,
    /// and the scope completes when it does; a non-interrupting one runs beside.
    pub interrupting: bool,
}

/// A decimal number without sign or leading zero: one spelling per number.
fn number(s: &str) -> Option<u32> {
    if s.is_empty() || s.starts_with('0') || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl Process {
    pub fn node(&self, idx: NodeIdx) -> &Node {
        &self.nodes[idx.position()]
    }
    pub fn flow(&self, idx: FlowIdx) -> &Flow {
        &self.flows[idx.0 as usize]
    }
    /// The node named `id`; `task#3`, where `task` is a multi-instance activity, names
    /// its third inner instance (`#` cannot occur in an XML id, so no node has that name);
    /// `task@2` names the second activity instance of `task` (`@` cannot occur in one
    /// either), `task#3@2` the second in the third inner instance; `sub@2/task` names
    /// `task` inside the second instance of its enclosing sub-process `sub` (a segment
    /// per enclosing sub-process instance that is not the first, outermost first). Only
    /// the spelling [`Process::key`] writes is found.
    pub fn find(&self, id: &str) -> Option<NodeIdx> {
        if let Some(idx) = self.by_id.get(id) {
            return Some(*idx);
        }
        if id.contains('/') {
            return self.find_in_runs(id);
        }
        self.find_one(id)
    }
    /// `find` for a name with scope-run segments: the last segment is the node, each
    /// earlier one an enclosing sub-process instance (`sub@2`), setting the run at its
    /// level. Canonical: the name must be what `key` writes for the result.
    fn find_in_runs(&self, id: &str) -> Option<NodeIdx> {
        let (scopes, last) = id.rsplit_once('/')?;
        let mut idx = self.find_one(last)?;
        for seg in scopes.split('/') {
            let sp = self.find_one(seg)?;
            if sp.copy() < 2 || !matches!(self.node(sp).kind, NodeKind::SubProcess) {
                return None;
            }
            let level = self.level(sp);
            if level >= NodeIdx::RUN_LEVELS || !self.encloses(sp.plain(), idx.plain()) {
                return None;
            }
            idx = idx.with_run(level, sp.copy());
        }
        (self.key(idx) == id).then_some(idx)
    }
    /// `find` for one segment: a node id with `#<k>` and `@<c>`.
    fn find_one(&self, id: &str) -> Option<NodeIdx> {
        if let Some(idx) = self.by_id.get(id) {
            return Some(*idx);
        }
        if let Some((base, c)) = id.rsplit_once('@') {
            // Digits only, no leading zero, 2 or more: one spelling per activity instance.
            let c = number(c).filter(|c| (2..=NodeIdx::COPY_MAX).contains(c))?;
            let idx = self.find_one(base).filter(|i| i.copy() == 0)?;
            return self.takes_copies(idx).then(|| idx.with_copy(c));
        }
        if self.multi_instances.is_empty() {
            return None;
        }
        let (base, k) = id.split_once('#')?;
        let k = number(k).filter(|k| (1..=NodeIdx::INSTANCE_MAX).contains(k))?;
        let node = *self.by_id.get(base)?;
        if let Some(mi) = self.multi_instances.get(&node) {
            return Some(mi.inner.with_instance(k));
        }
        // A node inside an inner sub-process, in its `k`-th instance.
        self.is_instanced(node).then(|| node.with_instance(k))
    }
    /// Whether the sub-process `sp` (plain) encloses `node` (plain), at any depth.
    fn encloses(&self, sp: NodeIdx, node: NodeIdx) -> bool {
        let mut cur = self.node(node).scope;
        while let Some(s) = cur {
            if s == sp {
                return true;
            }
            cur = self.node(s).scope;
        }
        false
    }
    /// The nesting level of `node`: how many sub-processes enclose it. The inside of a
    /// sub-process at level `l` carries its run at level `l`.
    pub fn level(&self, node: NodeIdx) -> usize {
        let mut level = 0;
        let mut cur = self.node(node).scope;
        while let Some(s) = cur {
            level += 1;
            cur = self.node(s).scope;
        }
        level
    }
    /// Whether a node can stand as a second activity instance beside its first: a task
    /// (of any kind), an intermediate catch event, an event-based gateway, a boundary
    /// event (which belongs to its host's instance) or a sub-process — where a token
    /// waits. Gateways that route, start and end events and throws never hold one.
    pub fn takes_copies(&self, idx: NodeIdx) -> bool {
        matches!(
            self.node(idx).kind,
            NodeKind::Task(_)
                | NodeKind::IntermediateCatch(_)
                | NodeKind::EventBasedGateway
                | NodeKind::Boundary(_)
                | NodeKind::SubProcess
        )
    }
    /// The name of `idx` in the snapshot, effects and timers: the node's id, `<body>#<k>`
    /// for the `k`-th inner instance of a multi-instance activity, `@<c>` after either for
    /// the `c`-th activity instance, and before it `<sub>@<r>/` for each enclosing
    /// sub-process it runs in whose instance is not the first, outermost first.
    #[inline]
    pub fn key(&self, idx: NodeIdx) -> std::borrow::Cow<'_, str> {
        if idx.0 >> NodeIdx::NODE_BITS == 0 {
            // The plain node: the hot path of every step.
            return std::borrow::Cow::Borrowed(self.node(idx).id.as_str());
        }
        self.numbered_key(idx)
    }
    /// [`Process::key`] of an index carrying a number.
    fn numbered_key(&self, idx: NodeIdx) -> std::borrow::Cow<'_, str> {
        let id = self.node(idx).id.as_str();
        if !idx.in_later_run() {
            return match (idx.instance(), idx.copy()) {
                (0, 0) => std::borrow::Cow::Borrowed(id),
                (k, 0) => std::borrow::Cow::Owned(format!("{id}#{k}")),
                (0, c) => std::borrow::Cow::Owned(format!("{id}@{c}")),
                (k, c) => std::borrow::Cow::Owned(format!("{id}#{k}@{c}")),
            };
        }
        let mut out = String::new();
        let mut scopes = Vec::new();
        let mut cur = self.node(idx).scope;
        while let Some(s) = cur {
            scopes.push(s);
            cur = self.node(s).scope;
        }
        for (level, sp) in scopes.iter().rev().enumerate() {
            let r = idx.run(level);
            if r >= 2 {
                // The segment names the enclosing instance alone: its own runs are the
                // segments before it.
                let sp = self.inherit(idx, *sp).node_and_instance().with_copy(r);
                out.push_str(&self.key(sp));
                out.push('/');
            }
        }
        let own = idx.node_and_instance().with_copy(idx.copy());
        out.push_str(&self.key(own));
        std::borrow::Cow::Owned(out)
    }
    /// `to`, a node attached to `from` — a boundary event of the activity `from`, the
    /// activity a boundary `from` is attached to, a catch racing after the event-based
    /// gateway `from` or the gateway of the racing catch `from` — in the inner instance,
    /// the scope runs and the activity instance `from` runs as: they belong to one token.
    pub fn attached(&self, from: NodeIdx, to: NodeIdx) -> NodeIdx {
        self.inherit(from, to).with_copy(from.copy())
    }
    /// `child`, a node directly inside the sub-process `sp` (a start event, an event
    /// sub-process), as it runs inside that instance of `sp`: in its inner instance, in
    /// its scope runs, and in `sp`'s own activity instance at `sp`'s level.
    pub fn child(&self, sp: NodeIdx, child: NodeIdx) -> NodeIdx {
        let level = self.level(sp);
        self.inherit(sp, child)
            .with_copy(0)
            .with_run(level, sp.copy())
    }
    /// The instance of the sub-process `idx` runs directly inside, if any: the inverse
    /// of [`Process::child`].
    pub fn scope_instance(&self, idx: NodeIdx) -> Option<NodeIdx> {
        let sp = self.node(idx).scope?;
        let level = self.level(sp);
        let r = idx.run(level);
        Some(self.inherit(idx, sp).with_run(level, 0).with_copy(r))
    }
    /// How the ad-hoc sub-process `sp` (any of its instances) runs, if it is one.
    pub fn ad_hoc(&self, sp: NodeIdx) -> Option<&AdHoc> {
        if self.ad_hocs.is_empty() {
            return None;
        }
        self.ad_hocs.get(&sp.plain())
    }
    /// The element of the ad-hoc sub-process `sp` with the id `id` that its active
    /// elements collection may name: a node directly inside it with no incoming flow,
    /// neither a boundary event nor an event sub-process (Zeebe's `adHocActivitiesById`:
    /// the child flow nodes without incoming flows).
    pub fn ad_hoc_element(&self, sp: NodeIdx, id: &str) -> Option<NodeIdx> {
        let idx = *self.by_id.get(id)?;
        let node = self.node(idx);
        let activatable = node.scope == Some(sp.plain())
            && node.incoming.is_empty()
            && !matches!(node.kind, NodeKind::Boundary(_))
            && self.event_sub_process(idx).is_none();
        activatable.then_some(idx)
    }
    /// The Zeebe mappings of the sub-process `sp` (any of its instances), if it has any.
    pub fn sub_process_mappings(&self, sp: NodeIdx) -> Option<&EventMappings> {
        if self.sub_process_mappings.is_empty() {
            return None;
        }
        self.sub_process_mappings.get(&sp.plain())
    }
    /// The multi-instance activity whose body is `body`, if it is one.
    pub fn multi_instance(&self, body: NodeIdx) -> Option<&MultiInstance> {
        if self.multi_instances.is_empty() {
            return None;
        }
        self.multi_instances.get(&body.node_and_instance())
    }
    /// The body of which `idx` is an inner instance, if it is one (a node inside an
    /// inner sub-process instance is not: its scope is the inner node).
    pub fn body_of(&self, idx: NodeIdx) -> Option<NodeIdx> {
        if idx.instance() == 0 {
            return None;
        }
        let body = self.node(idx).scope?;
        (self.multi_instance(body)?.inner == idx.plain()).then_some(body)
    }
    /// Whether `idx` is the inner node of a multi-instance activity or lies inside one
    /// (an inner sub-process's content): then it runs once per inner instance and
    /// carries the instance's number.
    pub fn is_instanced(&self, idx: NodeIdx) -> bool {
        if self.multi_instances.is_empty() {
            return false;
        }
        let mut cur = Some(idx.plain());
        // Scopes nest no deeper than the loader's element depth.
        for _ in 0..1024 {
            let Some(n) = cur else { return false };
            let scope = self.node(n).scope;
            if scope
                .and_then(|b| self.multi_instance(b))
                .is_some_and(|mi| mi.inner == n)
            {
                return true;
            }
            cur = scope;
        }
        false
    }
    /// `to`, a node the graph gives from `from` (a flow's target, a boundary, a scope, a
    /// start event), run in the inner instance `from` runs in: inside an inner
    /// sub-process instance every node carries that instance's number.
    pub fn inherit(&self, from: NodeIdx, to: NodeIdx) -> NodeIdx {
        // Scope runs: a flow's ends, a boundary and its host lie in one scope, and a
        // scope's runs are its inside's less its own level, which `scope_instance`
        // clears and `child` sets.
        let to = to.plain().with_runs_of(from);
        if from.instance() > 0 && self.is_instanced(to) {
            to.with_instance(from.instance())
        } else {
            to
        }
    }
    /// The none start events of a scope (`None` = the process itself), in document order.
    pub fn start_events(&self, scope: Option<NodeIdx>) -> impl Iterator<Item = NodeIdx> + '_ {
        let scope = scope.map(NodeIdx::plain);
        self.nodes.iter().enumerate().filter_map(move |(i, n)| {
            (n.scope == scope && matches!(n.kind, NodeKind::StartEvent)).then_some(NodeIdx::at(i))
        })
    }
    /// The process-level start events with a trigger, in document order: where an
    /// instance may start. The start events of event sub-processes are not among them.
    pub fn triggered_starts(&self) -> impl Iterator<Item = (NodeIdx, &StartTrigger)> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match &n.kind {
                NodeKind::TriggeredStart(t) if n.scope.is_none() => Some((NodeIdx::at(i), t)),
                _ => None,
            })
    }
    /// The event sub-process whose node is `node`, if it is one.
    pub fn event_sub_process(&self, node: NodeIdx) -> Option<&EventSubProcess> {
        self.event_sub_processes
            .iter()
            .find(|e| e.node == node.node_and_instance())
    }
    /// The event sub-process whose start event is `start`, if it is one.
    pub fn event_start(&self, start: NodeIdx) -> Option<&EventSubProcess> {
        self.event_sub_processes
            .iter()
            .find(|e| e.start == start.node_and_instance())
    }
    /// The event sub-processes directly in `scope` (`None`: the process), in document
    /// order: the ones the scope's life arms.
    pub fn event_sub_processes_in(
        &self,
        scope: Option<NodeIdx>,
    ) -> impl Iterator<Item = &EventSubProcess> + '_ {
        let scope = scope.map(NodeIdx::plain);
        self.event_sub_processes
            .iter()
            .filter(move |e| self.node(e.node).scope == scope)
    }
    /// The trigger of an event sub-process's start event.
    pub fn start_trigger(&self, start: NodeIdx) -> Option<&StartTrigger> {
        match &self.node(start).kind {
            NodeKind::TriggeredStart(t) => Some(t),
            _ => None,
        }
    }
    /// The start event a message named `name` starts an instance at, if there is one.
    pub fn message_start(&self, name: &str) -> Option<NodeIdx> {
        self.triggered_starts().find_map(|(i, t)| {
            matches!(t, StartTrigger::Message { name: n } if n == name).then_some(i)
        })
    }
    /// The start event a signal named `name` starts an instance at, if there is one.
    pub fn signal_start(&self, name: &str) -> Option<NodeIdx> {
        self.triggered_starts().find_map(|(i, t)| {
            matches!(t, StartTrigger::Signal { name: n } if n == name).then_some(i)
        })
    }
    /// The compensation of `host` (a plain node), if it has a compensation boundary.
    pub fn compensation(&self, host: NodeIdx) -> Option<&Compensation> {
        if self.compensations.is_empty() {
            return None;
        }
        self.compensations.get(&host.node_and_instance())
    }
    /// Whether `node` is the compensation handler of some activity.
    pub fn is_compensation_handler(&self, node: NodeIdx) -> bool {
        self.compensations
            .values()
            .any(|c| c.handler == node.plain())
    }
    /// Boundary events attached to `host`, in document order.
    pub fn boundaries_of(&self, host: NodeIdx) -> impl Iterator<Item = NodeIdx> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(move |(i, n)| match n.kind {
                NodeKind::Boundary(ref b) if b.attached_to == host => Some(NodeIdx::at(i)),
                _ => None,
            })
    }
}

#[derive(Debug, Clone)]
pub struct Node {
    pub id: String,
    pub name: Option<String>,
    pub pos: Pos,
    /// The BPMN element it was written as (`serviceTask`, `sendTask`, `endEvent`, …; empty
    /// for a node built without a file). Its [`NodeKind`] says how it runs, which is not
    /// always what it is: a send task run by a worker is a pull task, a none throw event
    /// a pass-through; APIs that name element types (Camunda 8's) read this.
    pub element: &'static str,
    /// The embedded sub-process this node lives in; `None` at process level.
    pub scope: Option<NodeIdx>,
    pub kind: NodeKind,
    /// Outgoing flows in document order.
    pub outgoing: Vec<FlowIdx>,
    /// Incoming flows in document order.
    pub incoming: Vec<FlowIdx>,
}

impl Node {
    /// Whether it was written as an activity (a task, sub-process or call activity), not
    /// as an event that loads as a task (a none throw event passes through; a message
    /// event may be run by a worker). Only activities and gateways have conditional and
    /// default flows out, and only activities take boundary events.
    pub fn is_activity(&self) -> bool {
        matches!(
            self.element,
            "task"
                | "manualTask"
                | "serviceTask"
                | "userTask"
                | "sendTask"
                | "receiveTask"
                | "scriptTask"
                | "businessRuleTask"
                | "callActivity"
                | "subProcess"
                | "adHocSubProcess"
        )
    }
}

#[derive(Debug, Clone)]
pub enum NodeKind {
    /// A none start event: where `Input::Start` puts the first token.
    StartEvent,
    /// A start event with a trigger (§10.5.2). At process level an instance starts here
    /// when the trigger fires — a message correlated to the deployment, a signal
    /// broadcast, a timer of the deployment's schedule; it is never where a plain start
    /// begins. Inside an event sub-process (its `scope`, listed in
    /// [`Process::event_sub_processes`]) it is that sub-process's start: the trigger —
    /// also an error or an escalation there — is armed while the enclosing scope is.
    TriggeredStart(StartTrigger),
    EndEvent(EndKind),
    Task(Task),
    ExclusiveGateway {
        default: Option<FlowIdx>,
    },
    InclusiveGateway {
        default: Option<FlowIdx>,
    },
    ParallelGateway,
    EventBasedGateway,
    IntermediateCatch(CatchTrigger),
    /// An intermediate throw event with an event definition (a none throw is a
    /// pass-through task).
    IntermediateThrow(ThrowTrigger),
    Boundary(Boundary),
    /// An embedded sub-process; its children carry `scope = Some(this)`.
    SubProcess,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndKind {
    None,
    Terminate,
    /// Throws a BPMN error. `error` is the referenced [`ErrorDef`] id, if any.
    Error {
        error: Option<String>,
    },
    /// Throws an escalation with this `escalationCode` (`None`: the escalation declares
    /// no code, or the event names none; only a catch-all boundary catches it). Caught or
    /// not, the token ends here; an uncaught escalation is not a failure (§10.5.5).
    Escalation {
        code: Option<String>,
    },
    /// Broadcasts a signal with this name (durably, through the outbox); the token ends.
    Signal {
        name: String,
    },
    /// Publishes a message with this name (durably, through the outbox); the token ends.
    Message {
        name: String,
    },
    /// Compensates the completed activities of its scope (only `activity`, when the event
    /// names one in `activityRef`), then ends once every handler it started has ended.
    Compensation {
        activity: Option<NodeIdx>,
    },
}

/// What starts an instance at a [`NodeKind::TriggeredStart`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartTrigger {
    /// A message with this name, correlated to the deployment rather than to a waiting
    /// instance: it starts one instance, whose business key is the message's
    /// correlation key.
    Message { name: String },
    /// A signal with this name, broadcast: every live deployment with such a start event
    /// starts one instance.
    Signal { name: String },
    /// The deployment's schedule: a date, a duration after deployment, or a cycle. In an
    /// event sub-process: a timer armed when the enclosing scope is entered (it may be
    /// computed from the variables there).
    Timer(TimerDef),
    /// Only in an event sub-process: catches a BPMN error thrown in the enclosing scope.
    /// `code = None` is catch-all.
    Error { code: Option<String> },
    /// Only in an event sub-process: catches an escalation thrown in the enclosing
    /// scope. `code = None` is catch-all.
    Escalation { code: Option<String> },
    /// Only in an event sub-process: fires when its condition becomes true while the
    /// enclosing scope runs.
    Conditional(Conditional),
}

/// A conditional event's trigger (BPMN 2.0 §10.5.4, `conditionalEventDefinition`): it
/// fires when `condition` becomes true. It is evaluated when the event is armed (its
/// activity, catch or scope entered) and again after every step's variable change that
/// the filter lets through, until it fires or its wait ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conditional {
    pub condition: crate::Expression,
    /// Only a change of one of these variables makes it evaluate again
    /// (`camunda:variableName`, Zeebe's `zeebe:conditionalFilter variableNames`); empty:
    /// a change of any variable.
    pub variables: Vec<String>,
    /// Whether a variable's creation makes it evaluate again (`variableEvents`).
    pub on_create: bool,
    /// Whether a change of an existing variable's value does.
    pub on_update: bool,
}

#[derive(Debug, Clone)]
pub enum CatchTrigger {
    Timer(TimerDef),
    /// Waits for a message with this name.
    Message {
        name: String,
    },
    /// Waits for a signal with this name, broadcast by an instance's throw or through
    /// the API; every waiting token catches it.
    Signal {
        name: String,
    },
    /// Waits until its condition holds; passes straight through when it holds on
    /// arrival.
    Conditional(Conditional),
    /// The catching half of a link pair (§10.5.6): it has no incoming flows, and a token
    /// arrives here only from a link throw event of the same name in the same scope. It
    /// passes straight through.
    Link {
        name: String,
    },
}

/// What an intermediate throw event throws.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThrowTrigger {
    /// The throwing half of a link pair: a token entering it moves straight to `target`,
    /// the link catch event of the same `name` in the same scope (resolved and checked by
    /// the loader; the throw has no outgoing flows).
    Link { name: String, target: NodeIdx },
    /// Throws an escalation with this `escalationCode` to the enclosing sub-processes,
    /// then continues over its outgoing flows unless an interrupting boundary caught it
    /// (which ends the throwing scope).
    Escalation { code: Option<String> },
    /// Broadcasts a signal with this name (durably, through the outbox) and continues.
    Signal { name: String },
    /// Publishes a message with this name (durably, through the outbox) and continues.
    Message { name: String },
    /// Compensates the completed activities of its scope (only `activity`, when the event
    /// names one in `activityRef`), and continues once every handler it started has ended.
    Compensation { activity: Option<NodeIdx> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimerDef {
    /// `timeDuration`, relative to the moment the timer is armed.
    Duration(DurationMs),
    /// `timeDate`, an absolute instant in milliseconds since the Unix epoch (UTC).
    Date { epoch_ms: i64 },
    /// `timeCycle` `R<n>/<duration>`; `repetitions = None` means unbounded.
    Cycle {
        repetitions: Option<u32>,
        interval: DurationMs,
    },
    /// `timeCycle` as a cron expression (`crate::cron`, evaluated in UTC): fires at each
    /// instant of the schedule after it is armed, without bound.
    Cron(crate::cron::Cron),
    /// A value computed when the timer is armed (Zeebe's `=…` FEEL, Camunda's `${…}`
    /// JUEL, each in the subset that maps onto CEL): the expression, evaluated over the
    /// instance variables, must give the ISO-8601 text of `kind` (`PT5M`,
    /// `2026-03-01T09:00:00Z`, `R3/PT10M`); anything else fails the instance
    /// (`EXPRESSION_FAILED`) at the timer.
    Computed {
        kind: TimeKind,
        expression: Expression,
    },
}

impl TimerDef {
    /// A `timeCycle`'s text: a cron expression (six fields or a macro, `crate::cron`) or
    /// an ISO-8601 repeating interval `R[n]/<duration>`.
    pub fn cycle_from_text(text: &str) -> Result<TimerDef, String> {
        if crate::cron::looks_like_cron(text) {
            crate::cron::parse(text).map(TimerDef::Cron)
        } else {
            crate::iso8601::parse_cycle(text).map(|(repetitions, interval)| TimerDef::Cycle {
                repetitions,
                interval,
            })
        }
    }
}

/// Which of the three a computed timer gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeKind {
    Duration,
    Date,
    Cycle,
}

#[derive(Debug, Clone)]
pub struct Boundary {
    pub attached_to: NodeIdx,
    /// `cancelActivity`; `true` means interrupting.
    pub interrupting: bool,
    pub trigger: BoundaryTrigger,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundaryTrigger {
    Timer(TimerDef),
    /// Catches a BPMN error. `code = None` is catch-all.
    Error {
        code: Option<String>,
    },
    /// Waits, while its activity runs, for a message with this name (correlated by key
    /// when the message declares one); interrupting or not.
    Message {
        name: String,
    },
    /// Catches an escalation thrown inside its sub-process (or call activity). `code =
    /// None` is catch-all. Interrupting unless `cancelActivity="false"`: BPMN 2.0.2
    /// gives `tBoundaryEvent`'s `cancelActivity` one schema default, `true`, for every
    /// trigger, escalation included (the spec allows both kinds for escalation; it does
    /// not make non-interrupting the default).
    Escalation {
        code: Option<String>,
    },
    /// Waits, while its activity runs, for a broadcast signal with this name;
    /// interrupting or not.
    Signal {
        name: String,
    },
    /// Fires, while its activity runs, when its condition becomes true; interrupting or
    /// not. A non-interrupting one fires again only after the condition was false.
    Conditional(Conditional),
    /// Marks its activity as compensable: never triggered like the others, it only links
    /// the activity to its handler (`Process::compensations`). Never interrupting.
    Compensation,
}

#[derive(Debug, Clone)]
pub struct Task {
    pub kind: TaskKind,
    /// `q:retry`; only on registered tasks and channel calls (the loader refuses it on
    /// pull tasks).
    pub retry: Option<RetryPolicy>,
    /// `q:timeout`: a route-less timeout boundary.
    pub timeout: Option<DurationMs>,
    /// Evaluated before the task runs; each result is handed to the handler as an input.
    pub inputs: Vec<Mapping>,
    /// Evaluated over the task's result (as variable `result`) and the instance variables;
    /// each result is written into an instance variable. No outputs means the whole
    /// result object is merged into the instance variables.
    pub outputs: Vec<Mapping>,
    /// `q:respond="true"`: a caller that started the instance and asked to wait is
    /// answered once a token stands here (R6).
    pub respond: bool,
    /// Whose rules `inputs` and `outputs` follow: `q:` mappings, or a vendor's
    /// (`zeebe:ioMapping`, `camunda:inputOutput`), whose inputs are local variables of
    /// the task and whose outputs decide what reaches the instance.
    pub mapping_style: MappingStyle,
    /// The custom headers a worker of a pull task is given with each locked task
    /// (Camunda 8 `customHeaders`, Camunda 7 `extensionProperties`): for a task bound to
    /// Java code its binding ([`Delegate::header`]) and `resultVariable`, then
    /// `zeebe:taskHeaders` and `camunda:properties` in document order. Static text; empty
    /// on every other kind.
    pub headers: Vec<(String, String)>,
    /// The Camunda 7 Java binding the task was loaded from (`camunda:class`,
    /// `camunda:delegateExpression`, `camunda:expression`): qflow runs no Java, so such a
    /// task is a pull task whose topic is [`Delegate::topic`], unless the configuration
    /// routes the binding elsewhere (`docs/vendor-mappings.md`, "Java delegates").
    pub delegate: Option<Box<Delegate>>,
}

/// When a Zeebe execution listener runs (`zeebe:executionListener eventType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerEvent {
    /// Before the element's behaviour.
    Start,
    /// After the element's behaviour and output mappings, before the token leaves.
    End,
}

/// The element and event of a Zeebe execution listener's pull task, named by the node
/// or by one of its instances (`pay~start-1`, `sub@2/pay~end-2#3`); `None` for any
/// other node. The loader names a listener's task `<element>~start-<n>` or
/// `<element>~end-<n>`; `~` is no character of an XML id, so no element written in a
/// file has such a name (`docs/vendor-mappings.md`, "Execution listeners").
pub fn listener_of(node: &str) -> Option<(&str, ListenerEvent)> {
    let last = node.rsplit('/').next().unwrap_or(node);
    let id = last.split(['@', '#']).next().unwrap_or(last);
    let (element, rest) = id.rsplit_once('~')?;
    let (event, n) = rest.split_once('-')?;
    let event = match event {
        "start" => ListenerEvent::Start,
        "end" => ListenerEvent::End,
        _ => return None,
    };
    (!element.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .then_some((element, event))
}

/// The id of the element written in the file that a node or one of its instances
/// stands for (what Camunda calls the element id): the node's id without the instance
/// prefix and suffix (`pay@2` → `pay`, `sub@2/pay#3` → `pay`), and for a node the loader
/// added beside an element that element's — an execution listener's task (`pay~start-1`
/// → `pay`) or the forking half of a joining gateway cut in two for its start listeners
/// (`join~fork` → `join`).
pub fn written_element(node: &str) -> &str {
    let last = node.rsplit('/').next().unwrap_or(node);
    let id = last.split(['@', '#']).next().unwrap_or(last);
    match id.rsplit_once('~') {
        Some((element, "fork")) if !element.is_empty() => element,
        _ => listener_of(id).map_or(id, |(element, _)| element),
    }
}

/// The longest pull topic, in characters: what the pull surfaces let a worker fetch
/// (`qflow_ops::pull`, the Camunda endpoints). A longer one could never be fetched.
pub const PULL_TOPIC_CHARS_MAX: usize = 256;

/// Which Camunda 7 attribute binds a task to Java code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DelegateKind {
    /// `camunda:class="com.acme.ChargeCard"`: a class implementing `JavaDelegate`.
    Class,
    /// `camunda:delegateExpression="${chargeCard}"`: a bean resolved by an expression.
    DelegateExpression,
    /// `camunda:expression="${orders.charge(execution)}"`: a method call.
    Expression,
}

impl DelegateKind {
    /// The attribute's local name, which is also the header that carries the binding
    /// (the names Camunda's 7-to-8 converter gives its task headers).
    pub fn attribute(self) -> &'static str {
        match self {
            DelegateKind::Class => "class",
            DelegateKind::DelegateExpression => "delegateExpression",
            DelegateKind::Expression => "expression",
        }
    }
}

/// A task's Camunda 7 Java binding, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegate {
    pub kind: DelegateKind,
    /// The attribute's value, trimmed: the key a `[delegates]` route is looked up by.
    pub text: String,
    /// The topic derived from the binding (`delegate_topic`): where its worker fetches
    /// unless a route says otherwise.
    pub topic: String,
    /// Where the attribute is.
    pub pos: Pos,
}

impl Delegate {
    /// The header naming the binding: `("class", "com.acme.ChargeCard")`.
    pub fn header(&self) -> (String, String) {
        (self.kind.attribute().to_owned(), self.text.clone())
    }
}

/// The topic a Camunda 7 Java binding runs under when nothing routes it, by the rule of
/// Camunda's 7-to-8 diagram converter: a class is named by its simple name with the
/// first letter lowered as Spring names a bean (`com.acme.ChargeCard` → `chargeCard`,
/// `com.acme.URLFetcher` → `URLFetcher`, `a.Outer$Inner` → `inner`); an expression
/// (`${…}` or `#{…}`) that is a chain of names, each maybe called with arguments, is
/// the names joined in camel case with the arguments dropped (`${chargeCard}` →
/// `chargeCard`, `${orders.charge(execution)}` → `ordersCharge`). Anything else — an
/// operator, an index, text around the expression — has no name to derive: `Err` says
/// why.
pub fn delegate_topic(kind: DelegateKind, text: &str) -> Result<String, String> {
    let text = text.trim();
    if kind == DelegateKind::Class {
        let simple = text.rsplit('.').next().unwrap_or(text);
        let simple = simple.rsplit('$').next().unwrap_or(simple);
        let valid = text.split('.').all(java_identifier) && java_identifier(simple);
        if !valid {
            return Err(format!("`{text}` is not a Java class name"));
        }
        return Ok(decapitalize(simple));
    }
    let inner = text
        .strip_prefix("${")
        .or_else(|| text.strip_prefix("#{"))
        .and_then(|t| t.strip_suffix('}'))
        .ok_or_else(|| format!("`{text}` is not one `${{…}}` expression"))?;
    let mut names: Vec<&str> = Vec::new();
    let mut rest = inner.trim();
    loop {
        let end = rest
            .char_indices()
            .find(|&(_, c)| !(c.is_alphanumeric() || c == '_' || c == '$'))
            .map_or(rest.len(), |(i, _)| i);
        let name = &rest[..end];
        if !java_identifier(name) {
            return Err(format!(
                "`{text}` is not a chain of names and calls (`bean.method(…)`)"
            ));
        }
        names.push(name);
        rest = rest[end..].trim_start();
        if let Some(args) = rest.strip_prefix('(') {
            rest = skip_arguments(args)
                .ok_or_else(|| format!("`{text}` has an unclosed argument list"))?
                .trim_start();
        }
        match rest.strip_prefix('.') {
            Some(r) => rest = r.trim_start(),
            None if rest.is_empty() => break,
            None => {
                return Err(format!(
                    "`{text}` is not a chain of names and calls (`bean.method(…)`)"
                ))
            }
        }
    }
    let mut topic = names[0].to_owned();
    for n in &names[1..] {
        let mut chars = n.chars();
        if let Some(first) = chars.next() {
            topic.extend(first.to_uppercase());
            topic.push_str(chars.as_str());
        }
    }
    Ok(topic)
}

fn java_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '$')
}

/// `java.beans.Introspector.decapitalize`: the first letter lowered, unless the first
/// two are both capitals (`URLFetcher` stays).
fn decapitalize(name: &str) -> String {
    let mut chars = name.chars();
    match (chars.next(), chars.next()) {
        (Some(a), Some(b)) if a.is_uppercase() && b.is_uppercase() => name.to_owned(),
        (Some(a), _) => a
            .to_lowercase()
            .chain(name[a.len_utf8()..].chars())
            .collect(),
        _ => String::new(),
    }
}

/// The text after the argument list that `args` (the text after its `(`) starts, or
/// `None` if it is not closed; parentheses nest and quoted strings are skipped.
fn skip_arguments(args: &str) -> Option<&str> {
    let mut depth = 1usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in args.char_indices() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&args[i + 1..]);
                }
            }
            _ => {}
        }
    }
    None
}

/// Whose semantics a list of mappings has (L8; `docs/bpmn-coverage.md`, "Vendor
/// mappings").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MappingStyle {
    /// `q:input` / `q:output`: the inputs, when there are any, are all the handler is
    /// given; the outputs are evaluated over the instance variables and the result as
    /// `result`; without outputs the result is merged whole.
    #[default]
    Q,
    /// `zeebe:ioMapping`: each input, evaluated over the instance variables, is a local
    /// variable of the task; the task is given the instance variables with its locals
    /// over them. With outputs, the result is local too and is not merged: each output is
    /// evaluated over the instance variables, the locals and the result, and only the
    /// outputs reach the instance. Without outputs the result is merged, except the names
    /// of locals (those stay local and end with the task). (No mapping reads an earlier
    /// one's target: the loader refuses it, as Zeebe versions disagree on what it sees.)
    Zeebe,
    /// `camunda:inputOutput`: each input is evaluated over the instance variables (not
    /// over the inputs before it) and is a local variable of the task; the task is given
    /// the instance variables with its locals over them. The result is merged into the
    /// instance, except the names of locals; then each output, in order, is evaluated
    /// over the instance variables (as the outputs before it left them) with the locals
    /// over them, and written to the instance.
    Camunda,
}

/// Mappings on an event a token passes through, in a vendor's dialect: the inputs are
/// local variables of the event (evaluated as [`MappingStyle`] says), the outputs are
/// evaluated over the instance variables with the locals over them and written to the
/// instance, when the token passes.
#[derive(Debug, Clone)]
pub struct EventMappings {
    pub style: MappingStyle,
    pub inputs: Vec<Mapping>,
    pub outputs: Vec<Mapping>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskKind {
    /// `serviceTask q:task="name"`: the host registers a handler by this name.
    Registered { name: String },
    /// `serviceTask q:channel="name"`: a request through the outbox, answered later.
    Channel { name: String },
    /// `serviceTask q:topic="name"` (and Camunda external / Zeebe job tasks): fetched and
    /// locked by external workers. `retries` is the pull surface's own budget.
    Pull { topic: String, retries: Option<u32> },
    /// `userTask`: a wait state completed through the API, offered to the task list
    /// with its assignment (who may work on it).
    User { assignment: Box<Assignment> },
    /// Abstract `task` and `manualTask`: pass straight through.
    PassThrough,
    /// `scriptTask` whose script is a CEL expression (`q:script`, or `zeebe:script` in
    /// the FEEL subset translated to CEL): evaluated over the instance variables when a
    /// token enters, its value written to `result`, and the token moves on in the same
    /// step. An expression that does not evaluate fails the instance
    /// (`EXPRESSION_FAILED`) at the task.
    Script {
        expression: Expression,
        result: String,
    },
    /// `sendTask`: publishes its message (durably, through the outbox) with the task's
    /// inputs as the message's variables, and continues. Without a `messageRef` there is
    /// nothing to publish: it loads, and a runtime refuses to deploy it.
    Send { message: Option<String> },
    /// `receiveTask`: waits for a message with this name. Without a `messageRef` it is a
    /// plain wait state, completed through the API like a user task (as Camunda 7,
    /// Flowable and Activiti treat it).
    Receive { message: Option<String> },
    /// `callActivity`: each attempt starts a child instance of the process `process` (its
    /// newest live deployment, or the `version`-th deployment of it) with the task's
    /// inputs, and the token waits until the child ends (`docs/call-activities.md`).
    Call(Box<CallSpec>),
}

/// What a call activity calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSpec {
    /// The called process's id (`calledElement`, `zeebe:calledElement processId`).
    pub process: String,
    /// `None`: the newest live deployment of the process when the child starts (the
    /// `latest` binding). `Some(n)`: its `n`-th deployment, counting from 1 in the order
    /// they were deployed (Camunda 7's `calledElementBinding="version"`).
    pub version: Option<u32>,
    /// Whether a completed child's variables are merged into the instance when the call
    /// activity has no output mappings (Zeebe's `propagateAllChildVariables`, default
    /// `true`). With output mappings, only those write, either way.
    pub merge_child_variables: bool,
}

/// The longest assignee, candidate group or candidate user name, in characters, as the
/// model writes it or an expression gives it (so at most 512 bytes of UTF-8: names are
/// row keys of the task list in every store).
pub const ASSIGNMENT_NAME_CHARS_MAX: usize = 128;

/// The most candidate groups a user task may have, and separately the most candidate
/// users: each is a row of the task list's candidate index.
pub const CANDIDATES_MAX: usize = 32;

/// Who may work on a user task: Camunda's `assignee`, `candidateGroups` and
/// `candidateUsers` attributes, or Zeebe's `zeebe:assignmentDefinition`. Static names are
/// written here as they are; expressions (`${…}` JUEL, `=…` FEEL, in the subset that maps
/// onto CEL) are evaluated over the instance variables when a token enters the task.
/// Empty when the model names nobody: the task is offered to the task list all the same.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    pub assignee: Option<NameSource>,
    /// In document order; each source gives zero or more names (an expression may give a
    /// list).
    pub candidate_groups: Vec<NameSource>,
    pub candidate_users: Vec<NameSource>,
}

impl Assignment {
    /// Whether the model names nobody at all.
    pub fn is_empty(&self) -> bool {
        self.assignee.is_none()
            && self.candidate_groups.is_empty()
            && self.candidate_users.is_empty()
    }
}

/// One name of an [`Assignment`], or an expression giving names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameSource {
    /// A name as the model writes it (1 to [`ASSIGNMENT_NAME_CHARS_MAX`] characters, no
    /// control characters; the loader checked).
    Static(String),
    /// Evaluated when a token enters the task: an assignee expression gives a string (or
    /// null: nobody); a candidate expression a list of strings, a string of
    /// comma-separated names, or null.
    Expression(Expression),
}

/// `target = source`, with `source` a CEL expression.
#[derive(Debug, Clone)]
pub struct Mapping {
    pub target: String,
    pub source: Expression,
}

#[derive(Debug, Clone)]
pub struct Flow {
    pub id: String,
    pub source: NodeIdx,
    pub target: NodeIdx,
    pub condition: Option<Expression>,
    pub pos: Pos,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// Multiply the capped delay by a factor in [0, 1).
    Full,
    /// Use the capped delay as is.
    None,
}

/// `q:retry`. `max_attempts` counts executions, including the first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_attempts: NonZeroU32,
    pub initial_interval: DurationMs,
    /// The multiplier in thousandths (2.0 → 2000), so that the formula stays in integers.
    pub multiplier_milli: u32,
    pub max_interval: DurationMs,
    pub jitter: Jitter,
    /// Codes that fail at once, in document order.
    pub non_retryable_codes: Vec<String>,
    /// No attempt starts later than this after the first failure.
    pub max_elapsed: Option<DurationMs>,
}

impl Default for RetryPolicy {
    /// The SPEC L4 defaults: 3 attempts, PT1S, ×2, PT1M, full jitter.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: NonZeroU32::new(3).expect("3 is not zero"),
            initial_interval: DurationMs(1_000),
            multiplier_milli: 2_000,
            max_interval: DurationMs(60_000),
            jitter: Jitter::Full,
            non_retryable_codes: Vec::new(),
            max_elapsed: None,
        }
    }
}

/// Structured failure codes the engine itself produces (E5). A `nonRetryableCodes` entry
/// must name one of these or an error code the model declares.
pub const ENGINE_FAILURE_CODES: &[&str] = &[
    "HANDLER_FAILED",
    "HANDLER_PANICKED",
    "HANDLER_TIMEOUT",
    "TIMEOUT",
    "POISONED",
    "LOCK_EXPIRED",
    "CALLED_INSTANCE_FAILED",
    "CALLED_PROCESS_NOT_FOUND",
];

impl RetryPolicy {
    /// The capped, un-jittered delay before attempt `failed_attempt + 1`, in milliseconds:
    /// `min(initial * multiplier^(failed_attempt-1), max)`. `failed_attempt` is 1-based
    /// (the attempt that just failed). Saturating integer arithmetic; never panics.
    pub fn capped_delay_ms(&self, failed_attempt: u32) -> u64 {
        let max = self.max_interval.0;
        let mut delay = self.initial_interval.0.min(max);
        for _ in 1..failed_attempt.max(1) {
            if delay >= max {
                return max;
            }
            let scaled = (delay as u128) * (self.multiplier_milli as u128) / 1000;
            delay = scaled.min(max as u128) as u64;
        }
        delay
    }

    /// The delay actually used: the capped delay times the jitter factor `jitter_ppb` / 1e9
    /// (a factor in [0, 1), see [`jitter_ppb`]) when jitter is full.
    pub fn delay_ms(&self, failed_attempt: u32, jitter_ppb: u32) -> u64 {
        let capped = self.capped_delay_ms(failed_attempt);
        match self.jitter {
            Jitter::None => capped,
            Jitter::Full => {
                ((capped as u128) * (jitter_ppb.min(999_999_999) as u128) / 1_000_000_000) as u64
            }
        }
    }
}

/// The full-jitter factor for (instance, node, attempt), in parts per billion: a value in
/// [0, 1e9). A pure function of its inputs (FNV-1a then a SplitMix64 finaliser), so that a
/// replay of the same step arms the same instant on every machine and every version.
pub fn jitter_ppb(instance: &str, node: &str, attempt: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    feed(instance.as_bytes());
    feed(&[0xff]);
    feed(node.as_bytes());
    feed(&[0xff]);
    feed(&attempt.to_le_bytes());
    let mut z = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z % 1_000_000_000) as u32
}

/// Gives each multi-instance activity its inner node (after validation, which sees the
/// activity as written): a copy of the activity without flows, a child of the original,
/// which becomes the body — a [`NodeKind::SubProcess`] holding the flows and boundary
/// events. A sub-process's children move into the inner node. The inner node keeps the
/// id: its instances are named `<id>#<k>` ([`Process::key`]).
pub(crate) fn expand_multi_instances(p: &mut Process) {
    let bodies: Vec<NodeIdx> = p.multi_instances.keys().copied().collect();
    for body in bodies {
        let inner = NodeIdx::at(p.nodes.len());
        let mut node = p.nodes[body.0 as usize].clone();
        for n in p.nodes.iter_mut() {
            if n.scope == Some(body) {
                n.scope = Some(inner);
            }
        }
        node.scope = Some(body);
        node.outgoing.clear();
        node.incoming.clear();
        p.nodes.push(node);
        p.nodes[body.0 as usize].kind = NodeKind::SubProcess;
        if let Some(mi) = p.multi_instances.get_mut(&body) {
            mi.inner = inner;
        }
        // A multi-instance sub-process's mappings are each inner instance's (Zeebe
        // applies them per inner instance): they move with its inside.
        if let Some(m) = p.sub_process_mappings.remove(&body) {
            p.sub_process_mappings.insert(inner, m);
        }
        // So is a multi-instance ad-hoc sub-process's activation and completion: each
        // inner instance is an ad-hoc sub-process instance.
        if let Some(a) = p.ad_hocs.remove(&body) {
            p.ad_hocs.insert(inner, a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listener_tasks_are_told_by_their_name() {
        use ListenerEvent::*;
        assert_eq!(listener_of("pay~start-1"), Some(("pay", Start)));
        assert_eq!(listener_of("sub@2/pay~end-12#3"), Some(("pay", End)));
        assert_eq!(listener_of("pay~end-2@4"), Some(("pay", End)));
        for other in [
            "pay",
            "join~fork",
            "pay~start-",
            "~start-1",
            "pay~start-x",
            "a~b-1",
        ] {
            assert_eq!(listener_of(other), None, "{other}");
        }
    }

    #[test]
    fn capped_delay_grows_then_caps() {
        let p = RetryPolicy::default();
        let got: Vec<u64> = (1..=8).map(|a| p.capped_delay_ms(a)).collect();
        assert_eq!(
            got,
            vec![1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]
        );
    }

    #[test]
    fn huge_attempts_saturate_without_panicking() {
        let p = RetryPolicy {
            multiplier_milli: u32::MAX,
            max_interval: DurationMs(u64::MAX),
            ..RetryPolicy::default()
        };
        assert_eq!(p.capped_delay_ms(u32::MAX), u64::MAX);
    }

    #[test]
    fn full_jitter_stays_below_the_capped_delay() {
        let p = RetryPolicy::default();
        for attempt in 1..50 {
            let ppb = jitter_ppb("inst", "node", attempt);
            assert!(ppb < 1_000_000_000);
            assert!(p.delay_ms(attempt, ppb) < p.capped_delay_ms(attempt));
        }
    }

    #[test]
    fn jitter_is_a_pure_function_of_its_inputs() {
        assert_eq!(jitter_ppb("a", "b", 1), jitter_ppb("a", "b", 1));
        assert_ne!(jitter_ppb("a", "b", 1), jitter_ppb("a", "b", 2));
        assert_ne!(jitter_ppb("ab", "", 1), jitter_ppb("a", "b", 1));
    }
}
