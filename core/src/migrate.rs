//! Migration of an instance onto another deployment (SPEC O2), as a core input.
//!
//! The step runs with the **target** definition: `Input::Migrate` carries the node
//! mapping (old id → new id; an id the mapping does not name keeps its id) and the due
//! instants of the instance's live timer rows (the snapshot knows timer names and
//! incarnations, the store knows when they are due). Everything the snapshot keeps per
//! node travels with the renamed node: tokens, attempt counters, backoff markers, first
//! failures, budget bases, re-adoption counts, join arrivals, cycle counts, the failure's
//! node, the open incidents (rows beside the instance, moved by `Effect::MoveIncidents`);
//! variables are untouched. Message subscriptions are closed and opened again under the
//! new names by the step's subscription sync, with their keys evaluated afresh. A timer whose name changes is resolved and armed again
//! under its new name at the same instant.
//!
//! The plan is validated against the target before anything changes, and any problem
//! makes the input stale (nothing written), with every reason: a mapped node the target
//! lacks, a task in flight (wait for its outcome or its backoff), a task with attempts
//! mapped to a node that counts none, a timer the target node cannot have (a retry park
//! on a task without `q:retry`, a timeout window without `q:timeout`), join arrivals over
//! flows the target lacks, a running multi-instance body mapped to one that is not
//! multi-instance or runs its inner instances the other way, a call activity whose
//! called instance still runs, a compensation in progress, two names holding state that
//! the mapping would merge into one. Only a FAILED instance, or a
//! running one with no attempt in flight, migrates.
//!
//! Every task kind migrates (docs/operations.md, "What migrates"): registered tasks,
//! channel calls, pull tasks of every dialect and call activities carry their attempts,
//! and may change into one another across versions — the attempt counter counts the
//! activity's attempts whatever runs them, and what only one kind keeps (a pull task's
//! attempts left and lock, a channel call's number) is dropped when the node changes
//! kind. User tasks keep their holder; a multi-instance activity's inner instances
//! (`<id>#<k>`) and the body's state move with it; activity instances (`pay@2`) and the
//! inside of sub-process instances (`sub@2/pay`) with their nodes.

use std::borrow::Cow;
use std::collections::BTreeMap;

use qflow_loader::model::{
    BoundaryTrigger, CatchTrigger, Definition, NodeKind, Process, StartTrigger, TaskKind,
};

use super::run::Run;
use super::timers::{TimerKind, TimerName};
use super::Effect;
use crate::snapshot::{Snapshot, Status};

/// The node mapping's image of `node`. An activity instance (E9) moves with its node, and
/// so does the inside of a sub-process instance and a multi-instance activity's inner
/// instance: with `pay` mapped to `charge` and `sub` to `order`, `pay@2` maps to
/// `charge@2`, `pay#3` to `charge#3` and `sub@2/pay` to `order@2/charge`.
fn mapped<'m>(mapping: &'m BTreeMap<String, String>, node: &'m str) -> Cow<'m, str> {
    if let Some(to) = mapping.get(node) {
        return Cow::Borrowed(to);
    }
    if !node.contains(['@', '/', '#']) {
        return Cow::Borrowed(node);
    }
    // A node id is an XML NCName, which holds neither `@` nor `#`: what follows the
    // first of them is the instance's number, kept as it is.
    let segment = |seg: &str| match mapping.get(seg) {
        Some(to) => to.clone(),
        None => {
            let at = seg.find(['@', '#']).unwrap_or(seg.len());
            let (base, numbers) = seg.split_at(at);
            match mapping.get(base) {
                Some(to) => format!("{to}{numbers}"),
                None => seg.to_owned(),
            }
        }
    };
    let to: Vec<String> = node.split('/').map(segment).collect();
    let to = to.join("/");
    if to == node {
        Cow::Borrowed(node)
    } else {
        Cow::Owned(to)
    }
}

/// The kind of task at `id` in `p`, when it is one that counts attempts: a registered
/// task, a channel call, a pull task (every dialect) or a call activity. Attempts travel
/// between these kinds (docs/operations.md, "What migrates"): the counter counts the
/// activity's attempts, whatever runs them.
fn attempt_kind(p: &Process, id: &str) -> Option<&'static str> {
    let idx = p.find(id)?;
    let NodeKind::Task(t) = &p.node(idx).kind else {
        return None;
    };
    match t.kind {
        TaskKind::Registered { .. } => Some("registered task"),
        TaskKind::Channel { .. } => Some("channel call"),
        TaskKind::Pull { .. } => Some("pull task"),
        TaskKind::Call(_) => Some("call activity"),
        _ => None,
    }
}

/// What the node at `id` is, for a refusal's reason.
fn kind_name(p: &Process, id: &str) -> &'static str {
    let Some(idx) = p.find(id) else {
        return "missing";
    };
    match &p.node(idx).kind {
        NodeKind::Task(t) => match t.kind {
            TaskKind::User { .. } => "user task",
            TaskKind::Receive { .. } => "receive task",
            TaskKind::Script { .. } => "script task",
            TaskKind::Send { .. } => "send task",
            TaskKind::PassThrough => "task that runs nothing",
            _ => attempt_kind(p, id).unwrap_or("task"),
        },
        NodeKind::SubProcess => "sub-process",
        _ => "event or gateway",
    }
}

/// Why the migration cannot apply to `snap` on `def` (the target), or `None`. Every
/// problem is listed, one per line.
pub(super) fn problems(
    def: &Definition,
    snap: &Snapshot,
    mapping: &BTreeMap<String, String>,
    due: &BTreeMap<String, i64>,
) -> Option<String> {
    let p = &def.process;
    let mut out: Vec<String> = Vec::new();
    // A child's link names its call activity: it would report to a node that moved.
    for node in snap.children().keys() {
        out.push(format!(
            "call activity `{node}` waits for its called instance; an instance is not \
             migrated while a called instance runs"
        ));
    }
    // A running body's state (`i/<body>`: how many inner instances, how many started and
    // done, the items and outputs recorded as it was entered) moves with it, and its
    // inner instances `<id>#<k>` with their node; the target must run the body the same
    // way, one after another or all at once.
    for (body, state) in snap.multi_instances() {
        let to = mapped(mapping, body);
        match p.find(&to).and_then(|i| p.multi_instance(i)) {
            None => out.push(format!(
                "multi-instance activity `{body}` is running and maps to `{to}`, which is not \
                 a multi-instance activity in the target"
            )),
            Some(mi) if !super::multi::state_fits(state, mi) => {
                out.push(format!(
                "multi-instance activity `{body}` is running and maps to `{to}`, which runs its \
                 inner instances {} in the target",
                if mi.sequential { "one after another" } else { "all at once" }
            ))
            }
            Some(_) => {}
        }
    }
    // A handler run in progress waits for its throw under the source's ids.
    for handler in snap.compensations_owed().keys() {
        out.push(format!(
            "compensation handler `{handler}` has runs to make for a compensation throw; an \
             instance is not migrated while a compensation runs"
        ));
    }
    // A recorded completion moves under its new id, and must stay compensable there.
    let mut named = std::collections::BTreeSet::new();
    for entry in snap.compensable() {
        let to = mapped(mapping, entry);
        if !named.insert(to.clone()) {
            continue;
        }
        if p.find(&to).and_then(|n| p.compensation(n)).is_none() {
            out.push(format!(
                "`{entry}` completed and can still be compensated, but `{to}` has no \
                 compensation boundary in the target"
            ));
        }
    }
    // A sub-process instance's locals move with it, and need a sub-process to end with.
    for scope in snap.sub_process_locals().keys() {
        let to = mapped(mapping, scope);
        let sub = p.find(&to).map(|n| &p.node(n).kind);
        if !matches!(sub, Some(NodeKind::SubProcess)) {
            out.push(format!(
                "sub-process `{scope}` holds local variables and maps to `{to}`, which is no \
                 sub-process in the target"
            ));
        }
    }
    match snap.status() {
        Status::Failed => {}
        Status::Running => {
            for node in snap.tokens() {
                let pull = super::pull::pull_task(def, &mapped(mapping, node)).is_some();
                if snap.marker(node).is_none() && (pull || snap.lock(node).is_some()) {
                    out.push(format!(
                        "pull task `{node}` is offered to workers; migrate once it is in a \
                         backoff window or FAILED"
                    ));
                    continue;
                }
                if snap.marker(node).is_none() && attempt_kind(p, &mapped(mapping, node)).is_some()
                {
                    // A task's token outside a backoff window: the attempt is in flight.
                    out.push(format!(
                        "task `{node}` has an attempt in flight; migrate once it has an outcome \
                         or is in a backoff window"
                    ));
                }
            }
        }
        s => out.push(format!(
            "instance is {}: only a FAILED or a running instance migrates",
            s.as_str()
        )),
    }
    for node in snap.tokens() {
        let to = mapped(mapping, node);
        if p.find(&to).is_none() {
            out.push(format!(
                "token at `{node}` maps to `{to}`, which the target does not have"
            ));
        } else if snap.attempt(node) > 0 && attempt_kind(p, &to).is_none() {
            out.push(format!(
                "task `{node}` has attempts and maps to `{to}`, a {} in the target, which \
                 counts no attempts: map it to a registered task, channel call, pull task or \
                 call activity",
                kind_name(p, &to)
            ));
        }
    }
    if let Some(node) = snap.failure().and_then(|f| f.node) {
        let to = mapped(mapping, &node);
        if p.find(&to).is_none() {
            out.push(format!(
                "the failed node `{node}` maps to `{to}`, which the target does not have"
            ));
        }
    }
    // Two names the instance holds state under must not become one: the second would
    // overwrite the first's attempts, marker, timer or row (`pay` mapped onto `charge`
    // while `charge` keeps its own).
    let tokens: std::collections::BTreeSet<&String> = snap.tokens.iter().collect();
    let families: [(&str, Vec<&String>); 15] = [
        ("token", tokens.into_iter().collect()),
        ("attempt counter", snap.attempts.keys().collect()),
        ("backoff marker", snap.markers.keys().collect()),
        ("first failure", snap.first_failure_ms.keys().collect()),
        ("budget base", snap.budget_bases.keys().collect()),
        ("re-adoption count", snap.readoptions.keys().collect()),
        ("pull budget", snap.pull_retries.keys().collect()),
        ("pull lock", snap.lock_workers.keys().collect()),
        ("channel call", snap.calls.keys().collect()),
        ("join", snap.joins.keys().collect()),
        ("user-task holder", snap.assignees.keys().collect()),
        ("multi-instance body", snap.multis.keys().collect()),
        ("called instance", snap.children.keys().collect()),
        ("sub-process locals", snap.locals.keys().collect()),
        ("held condition", snap.conditions.keys().collect()),
    ];
    for (what, keys) in families {
        let mut images: BTreeMap<Cow<'_, str>, &String> = BTreeMap::new();
        for key in keys {
            let to = mapped(mapping, key);
            match images.get(&to) {
                Some(first) if *first != key => out.push(format!(
                    "`{first}` and `{key}` would both become `{to}` ({what}): a mapping must \
                     not merge two nodes that hold state"
                )),
                _ => {
                    images.insert(to, key);
                }
            }
        }
    }
    let mut timers: BTreeMap<String, &String> = BTreeMap::new();
    for name in snap.timers.keys() {
        let to = mapped_timer(mapping, name);
        match timers.get(&to) {
            Some(first) if *first != name => out.push(format!(
                "timers `{first}` and `{name}` would both become `{to}`: a mapping must not \
                 merge two nodes that hold state"
            )),
            _ => {
                timers.insert(to, name);
            }
        }
    }
    for (gw, flows) in &snap.joins {
        let to = mapped(mapping, gw);
        if p.find(&to).is_none() {
            out.push(format!(
                "join `{gw}` maps to `{to}`, which the target does not have"
            ));
        }
        for f in flows {
            if !p.flows.iter().any(|fl| fl.id == *f) {
                out.push(format!(
                    "join `{gw}` holds an arrival over flow `{f}`, which the target does not have"
                ));
            }
        }
    }
    for name in snap.timers().keys() {
        let Some(t) = TimerName::parse(name) else {
            out.push(format!("timer `{name}` is not a name the engine writes"));
            continue;
        };
        let Some(node) = t.node() else { continue };
        let to = mapped(mapping, node);
        if !due.contains_key(name) {
            out.push(format!("timer `{name}` has no due instant in the plan"));
        }
        let kind = p.find(&to).map(|i| &p.node(i).kind);
        let fits = match (t.kind(), kind) {
            (_, None) => false,
            (TimerKind::Retry, Some(NodeKind::Task(task))) => task.retry.is_some(),
            (TimerKind::Timeout, Some(NodeKind::Task(task))) => task.timeout.is_some(),
            (TimerKind::Boundary, Some(NodeKind::Boundary(b))) => {
                matches!(b.trigger, BoundaryTrigger::Timer(_))
            }
            // The timer start of an event sub-process.
            (TimerKind::Boundary, Some(NodeKind::TriggeredStart(StartTrigger::Timer(_)))) => {
                p.find(&to).is_some_and(|i| p.event_start(i).is_some())
            }
            (TimerKind::Catch, Some(NodeKind::IntermediateCatch(CatchTrigger::Timer(_)))) => true,
            _ => false,
        };
        if !fits {
            out.push(format!(
                "timer `{name}` maps to `{to}`, where the target has no such timer"
            ));
        }
    }
    (!out.is_empty()).then(|| out.join("\n"))
}

/// A timer's name with its node mapped (a name the engine does not write stays).
fn mapped_timer(mapping: &BTreeMap<String, String>, name: &str) -> String {
    match TimerName::parse(name) {
        Some(t) => match t.node() {
            Some(node) => TimerName::new(t.kind(), &mapped(mapping, node))
                .as_str()
                .to_owned(),
            None => name.to_owned(),
        },
        None => name.to_owned(),
    }
}

fn rename<V>(map: &mut BTreeMap<String, V>, mapping: &BTreeMap<String, String>) {
    let old = std::mem::take(map);
    for (k, v) in old {
        map.insert(mapped(mapping, &k).into_owned(), v);
    }
}

impl Run<'_> {
    /// Applies a validated migration (see `problems`) to the snapshot.
    pub(super) fn migrate(
        &mut self,
        mapping: &BTreeMap<String, String>,
        due: &BTreeMap<String, i64>,
    ) {
        // Every subscription closes; the sync after the step opens those the target
        // still waits on, under the target's message names and keys, evaluated afresh.
        let open: Vec<String> = self.snap.subscriptions.keys().cloned().collect();
        for node in open {
            self.close_subscription(&node);
        }
        let failed_before = self.snap.failure_node.clone();
        let s = &mut self.snap;
        for t in &mut s.tokens {
            *t = mapped(mapping, t).into_owned();
        }
        s.tokens.sort();
        for entry in &mut s.compensable {
            *entry = mapped(mapping, entry).into_owned();
        }
        rename(&mut s.attempts, mapping);
        rename(&mut s.markers, mapping);
        rename(&mut s.first_failure_ms, mapping);
        rename(&mut s.budget_bases, mapping);
        rename(&mut s.readoptions, mapping);
        rename(&mut s.pull_retries, mapping);
        rename(&mut s.calls, mapping);
        rename(&mut s.joins, mapping);
        rename(&mut s.multis, mapping);
        // A sub-process instance's locals move with it (`sub@2` renamed is still that
        // instance); the target's mappings apply from its next entry and completion.
        rename(&mut s.locals, mapping);
        rename(&mut s.lock_workers, mapping);
        rename(&mut s.lock_until_ms, mapping);
        // Whoever holds a user task keeps it under its new name; the sync after the step
        // drops the holder of a node that is no user task in the target.
        rename(&mut s.assignees, mapping);
        rename(&mut s.conditions, mapping);
        for name in &mut s.spent {
            *name = mapped_timer(mapping, name);
        }
        s.spent.sort();
        // Cycle counts are kept while FAILED (`y`) for timers that are not live: they move
        // with their timer's node like the live ones below.
        let cycles = std::mem::take(&mut s.cycles);
        s.cycles = cycles
            .into_iter()
            .map(|(name, n)| (mapped_timer(mapping, &name), n))
            .collect();
        // State one kind of task keeps and another has no use for goes when a task changes
        // kind across versions: a pull task's attempts left (`p/`) and lock (`w/`, `u/`),
        // a channel call's number (`x/`). The attempt counter and its budget keys stay.
        let p = self.p;
        let is = |node: &str, kind: &str| attempt_kind(p, node) == Some(kind);
        s.pull_retries.retain(|n, _| is(n, "pull task"));
        s.lock_workers.retain(|n, _| is(n, "pull task"));
        s.lock_until_ms.retain(|n, _| is(n, "pull task"));
        s.calls.retain(|n, _| is(n, "channel call"));
        if let Some(n) = &s.failure_node {
            s.failure_node = Some(mapped(mapping, n).into_owned());
        }
        // Live timers whose node is renamed: all are taken out first, then all armed
        // under their new names, so that a swap (`a` → `b`, `b` → `a`) or a chain never
        // arms one over another still to be moved. Their cycle counts moved above.
        let mut moving: Vec<(TimerName, u32, TimerName)> = Vec::new();
        for (name, incarnation) in &s.timers {
            let Some(old) = TimerName::parse(name) else {
                continue;
            };
            let Some(node) = old.node() else { continue };
            let new = TimerName::new(old.kind(), &mapped(mapping, node));
            if new != old {
                moving.push((old, *incarnation, new));
            }
        }
        for (old, incarnation, _) in &moving {
            self.snap.timers.remove(old.as_str());
            self.effects.push(Effect::ResolveTimer {
                name: old.clone(),
                incarnation: *incarnation,
            });
        }
        for (old, _, new) in moving {
            let at = due.get(old.as_str()).copied().unwrap_or(self.now_ms);
            self.arm(new, at);
        }
        // Open incidents travel with their node, like everything else kept per node: a
        // FAILED instance's incident is on its failure node, and after the move a resume
        // resolves it under the new name.
        let mut moves: Vec<(String, String)> = mapping
            .iter()
            .filter(|(from, to)| from != to)
            .map(|(from, to)| (from.clone(), to.clone()))
            .collect();
        // An instance's incidents are on its own name (`pay@2`, `quote#2`, `sub@2/pay`):
        // they move with it. Its old name is gone from the snapshot, so it is read off
        // the mapping.
        if let Some(failed) = failed_before.filter(|n| !mapping.contains_key(n)) {
            let to = mapped(mapping, &failed).into_owned();
            if to != failed {
                moves.push((failed, to));
            }
        }
        for (from, to) in moves {
            self.effects.push(Effect::MoveIncidents { from, to });
        }
    }
}
