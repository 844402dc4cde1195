//! Graph and design rules of L6 over a built definition.
//!
//! Graph rules: a start event per scope, reachability, no dead-end gateways (any other node
//! without a flow out is an implicit end, warned about), event directions, event-based
//! gateway targets, conditions only where a gateway decides. Design rules from
//! the retry design ("modelled outcomes beat policies — enforced at load"): a channel call
//! has a timeout; a channel call's `q:retry` beside a routed timer boundary is refused;
//! `nonRetryableCodes` name only codes that can occur. This module only reads the model
//! and appends diagnostics; it never changes the definition.

use std::collections::{BTreeMap, BTreeSet};

use crate::build::Meta;
use crate::diag::Diagnostic;
use crate::model::*;

pub(crate) fn validate(def: &Definition, meta: &Meta, diags: &mut Vec<Diagnostic>) {
    let p = &def.process;
    let ix = Index::new(p, meta);
    let startless = starts(p, meta, &ix, diags);
    reachability(p, &ix, &startless, diags);
    directions(p, meta, diags);
    event_gateways(p, meta, diags);
    conditions(p, diags);
    design_rules(def, meta, &ix, diags);
}

/// Lookups the rules need, built once so that every rule stays linear (or n log n) in
/// the number of nodes: `Process::boundaries_of` and `start_events` scan all nodes, and
/// calling them per node would be quadratic on a large hostile model.
struct Index {
    /// None start events per scope (`None` = the process).
    starts: BTreeMap<Option<NodeIdx>, Vec<NodeIdx>>,
    /// Refused start/boundary events per scope; they count as roots.
    refused_roots: BTreeMap<Option<NodeIdx>, Vec<NodeIdx>>,
    /// Boundary events per host node.
    boundaries: Vec<Vec<NodeIdx>>,
    /// Every node refused for its kind; reachable by fiat (see `Meta::refused`).
    refused: Vec<NodeIdx>,
    /// Event sub-processes per enclosing scope: reached when their scope is.
    event_subs: BTreeMap<Option<NodeIdx>, Vec<NodeIdx>>,
}

impl Index {
    fn new(p: &Process, meta: &Meta) -> Index {
        let mut ix = Index {
            starts: BTreeMap::new(),
            refused_roots: BTreeMap::new(),
            boundaries: vec![Vec::new(); p.nodes.len()],
            refused: meta.refused.iter().copied().collect(),
            event_subs: BTreeMap::new(),
        };
        for e in &meta.event_subs {
            let scope = p.node(*e).scope;
            ix.event_subs.entry(scope).or_default().push(*e);
        }
        for (i, n) in p.nodes.iter().enumerate() {
            match &n.kind {
                NodeKind::StartEvent | NodeKind::TriggeredStart(_) => {
                    ix.starts.entry(n.scope).or_default().push(idx(i))
                }
                NodeKind::Boundary(b) if b.attached_to != idx(i) => {
                    if let Some(list) = ix.boundaries.get_mut(b.attached_to.0 as usize) {
                        list.push(idx(i));
                    }
                }
                _ => {}
            }
        }
        for r in &meta.refused_roots {
            let scope = p.node(*r).scope;
            ix.refused_roots.entry(scope).or_default().push(*r);
        }
        ix
    }

    fn starts(&self, scope: Option<NodeIdx>) -> &[NodeIdx] {
        self.starts.get(&scope).map_or(&[], Vec::as_slice)
    }

    fn refused_roots(&self, scope: Option<NodeIdx>) -> &[NodeIdx] {
        self.refused_roots.get(&scope).map_or(&[], Vec::as_slice)
    }

    fn event_subs(&self, scope: Option<NodeIdx>) -> &[NodeIdx] {
        self.event_subs.get(&scope).map_or(&[], Vec::as_slice)
    }
}

fn idx(i: usize) -> NodeIdx {
    NodeIdx::at(i)
}

/// Reports scopes without a start event and returns them (their nodes are not reported as
/// unreachable again: the missing start already says so).
fn starts(
    p: &Process,
    meta: &Meta,
    ix: &Index,
    diags: &mut Vec<Diagnostic>,
) -> BTreeSet<Option<NodeIdx>> {
    let mut startless = BTreeSet::new();
    let mut scopes: Vec<(Option<NodeIdx>, Pos, String)> =
        vec![(None, meta.process_pos, "the process".to_string())];
    for (i, n) in p.nodes.iter().enumerate() {
        if matches!(n.kind, NodeKind::SubProcess) {
            scopes.push((Some(idx(i)), n.pos, format!("sub-process `{}`", n.id)));
        }
    }
    for (scope, pos, what) in scopes {
        let refused = !ix.refused_roots(scope).is_empty();
        // An ad-hoc sub-process has no start (Q135): its elements without incoming
        // flows are its roots (`reachability`), so what none of them reaches is
        // reported as unreachable there.
        let ad_hoc = scope.is_some_and(|s| p.ad_hoc(s).is_some());
        if ix.starts(scope).is_empty() && !ad_hoc {
            startless.insert(scope);
        }
        // An event sub-process's start is checked where it is read (Q128).
        let event_sub = scope.is_some_and(|s| meta.event_subs.contains(&s));
        if ix.starts(scope).is_empty() && !refused && !event_sub && !ad_hoc {
            diags.push(
                Diagnostic::error("Q106", pos, format!("{what} has no none start event"))
                    .with_help("add a <startEvent> without an event definition"),
            );
        }
    }
    startless
}

/// Every node reachable from a process start; entering a sub-process reaches its starts
/// and its event sub-processes (the process's are reached from the start); an activity
/// reaches its boundary events; a link throw reaches its link catch.
fn reachability(
    p: &Process,
    ix: &Index,
    startless: &BTreeSet<Option<NodeIdx>>,
    diags: &mut Vec<Diagnostic>,
) {
    let mut seen = vec![false; p.nodes.len()];
    let mut work: Vec<NodeIdx> = ix.starts(None).to_vec();
    work.extend(ix.refused_roots(None));
    work.extend(ix.event_subs(None));
    work.extend(&ix.refused);
    while let Some(n) = work.pop() {
        let i = n.0 as usize;
        if seen[i] {
            continue;
        }
        seen[i] = true;
        let node = &p.nodes[i];
        work.extend(node.outgoing.iter().map(|f| p.flow(*f).target));
        // A link throw reaches its catch, which has no incoming flow of its own.
        if let NodeKind::IntermediateThrow(ThrowTrigger::Link { target, .. }) = &node.kind {
            work.push(*target);
        }
        // An activity with a compensation boundary reaches its handler, which has no flows.
        if let Some(c) = p.compensation(n) {
            work.push(c.handler);
        }
        if matches!(node.kind, NodeKind::SubProcess) {
            // An ad-hoc sub-process reaches every element it may activate.
            if p.ad_hoc(n).is_some() {
                work.extend(p.nodes.iter().enumerate().filter_map(|(c, child)| {
                    p.ad_hoc_element(n, &child.id)
                        .filter(|_| child.scope == Some(n))
                        .map(|_| idx(c))
                }));
            }
            work.extend(ix.starts(Some(n)));
            work.extend(ix.refused_roots(Some(n)));
            work.extend(ix.event_subs(Some(n)));
        }
        work.extend(&ix.boundaries[i]);
    }
    for (i, n) in p.nodes.iter().enumerate() {
        if !seen[i] && !startless.contains(&n.scope) {
            diags.push(
                Diagnostic::error(
                    "Q107",
                    n.pos,
                    format!("`{}` cannot be reached from any start event", n.id),
                )
                .with_help("connect it with a sequence flow, or remove it"),
            );
        }
    }
}

fn directions(p: &Process, meta: &Meta, diags: &mut Vec<Diagnostic>) {
    for (i, n) in p.nodes.iter().enumerate() {
        if meta.refused.contains(&idx(i)) {
            continue;
        }
        if meta.event_subs.contains(&idx(i)) {
            // Entered by its trigger and left by its end events: no flow touches it.
            let flow = n.incoming.first().or(n.outgoing.first());
            if let Some(f) = flow {
                diags.push(
                    Diagnostic::error(
                        "Q129",
                        p.flow(*f).pos,
                        format!(
                            "sequence flow `{}` enters or leaves event sub-process `{}`",
                            p.flow(*f).id,
                            n.id
                        ),
                    )
                    .with_help("an event sub-process starts by its trigger and has no incoming or outgoing flows; remove the flow"),
                );
            }
            continue;
        }
        // A message end event run by a worker is a task inside and still an end here.
        let end = matches!(n.kind, NodeKind::EndEvent(_)) || n.element == "endEvent";
        match &n.kind {
            _ if end && !n.outgoing.is_empty() => {
                diags.push(
                    Diagnostic::error(
                        "Q116",
                        n.pos,
                        format!("end event `{}` has outgoing flows", n.id),
                    )
                    .with_help("an end event ends its path; replace it or drop the flows"),
                );
            }
            _ if end => {}
            NodeKind::StartEvent | NodeKind::TriggeredStart(_) | NodeKind::Boundary(_)
                if !n.incoming.is_empty() =>
            {
                diags.push(
                    Diagnostic::error(
                        "Q116",
                        n.pos,
                        format!(
                            "`{}` is a start or boundary event but has incoming flows",
                            n.id
                        ),
                    )
                    .with_help("remove the incoming sequence flows"),
                );
            }
            // A link throw continues at its catch; `resolve_links` refused outgoing flows.
            NodeKind::IntermediateThrow(ThrowTrigger::Link { .. }) => {}
            // A compensation boundary and its handler have no flows (`resolve_compensations`
            // refused any).
            NodeKind::Boundary(b) if b.trigger == BoundaryTrigger::Compensation => {}
            _ if p.is_compensation_handler(idx(i)) => {}
            // A gateway decides where tokens go: without a flow out it has nowhere to
            // send them (Zeebe and Camunda 7 refuse it too).
            NodeKind::ExclusiveGateway { .. }
            | NodeKind::InclusiveGateway { .. }
            | NodeKind::ParallelGateway
            | NodeKind::EventBasedGateway
                if n.outgoing.is_empty() =>
            {
                diags.push(
                    Diagnostic::error(
                        "Q108",
                        n.pos,
                        format!("gateway `{}` has no outgoing sequence flow (dead end)", n.id),
                    )
                    .with_help("connect it onward, or end the path with an end event"),
                )
            }
            // Inside an ad-hoc sub-process a path ends at an element without a flow
            // out: that is how the sub-process learns one of its paths completed.
            _ if n.scope.is_some_and(|s| p.ad_hoc(s).is_some()) => {}
            // Any other flow node without a flow out is an implicit end (BPMN 2.0
            // §13.2.1, "no outgoing sequence flow ... the token is consumed"): its token
            // ends there, as in Zeebe and Camunda 7. Said, in case it is a slip.
            _ if n.outgoing.is_empty() => diags.push(
                Diagnostic::warning(
                    "Q905",
                    n.pos,
                    format!(
                        "`{}` has no outgoing sequence flow: its token ends there (an implicit end)",
                        n.id
                    ),
                )
                .with_help("end the path with an <endEvent/> to say so, or connect it onward"),
            ),
            _ => {}
        }
    }
}

fn event_gateways(p: &Process, meta: &Meta, diags: &mut Vec<Diagnostic>) {
    for n in &p.nodes {
        if !matches!(n.kind, NodeKind::EventBasedGateway) {
            continue;
        }
        for f in &n.outgoing {
            if meta.refused.contains(&p.flow(*f).target) {
                continue;
            }
            let t = p.node(p.flow(*f).target);
            let ok = matches!(
                t.kind,
                NodeKind::IntermediateCatch(_)
                    | NodeKind::Task(Task {
                        kind: TaskKind::Receive { message: Some(_) },
                        ..
                    })
            );
            if !ok {
                diags.push(
                    Diagnostic::error(
                        "Q118",
                        p.flow(*f).pos,
                        format!(
                            "event-based gateway `{}` leads to `{}`, which is not a catch event or receive task",
                            n.id, t.id
                        ),
                    )
                    .with_help("put a timer, message, signal or conditional catch event (or a receive task) after an event-based gateway"),
                );
            }
        }
    }
}

/// A condition belongs on a flow out of an exclusive or inclusive gateway, or out of an
/// activity (BPMN 2.0 §13.2.1's conditional flow, which Camunda 7 runs: every flow out
/// whose condition holds or that has none is taken, the activity's default flow when no
/// other is, `NO_FLOW_TAKEN` when nothing is; Zeebe has no conditional flows out of
/// activities). Anywhere else (an event, a parallel or event-based gateway): Q119.
fn conditions(p: &Process, diags: &mut Vec<Diagnostic>) {
    for f in &p.flows {
        let Some(c) = &f.condition else { continue };
        let src = p.node(f.source);
        let gateway = matches!(
            src.kind,
            NodeKind::ExclusiveGateway { .. } | NodeKind::InclusiveGateway { .. }
        );
        if !gateway && !src.is_activity() {
            diags.push(
                Diagnostic::error(
                    "Q119",
                    c.pos(),
                    format!(
                        "flow `{}` has a condition but leaves `{}`, which is neither an activity nor an exclusive or inclusive gateway",
                        f.id, src.id
                    ),
                )
                .with_help("put an exclusive gateway before the conditional flows"),
            );
        }
    }
}

/// An interrupting timer boundary with a drawn route: a modelled timeout outcome. A
/// non-interrupting one leaves the task waiting, so it neither bounds the call (Q305) nor
/// pre-empts its retries (Q306).
fn routed_timer_boundary(p: &Process, ix: &Index, host: NodeIdx) -> bool {
    ix.boundaries[host.0 as usize].iter().any(|b| {
        let n = p.node(*b);
        !n.outgoing.is_empty()
            && matches!(
                n.kind,
                NodeKind::Boundary(Boundary {
                    trigger: BoundaryTrigger::Timer(_),
                    interrupting: true,
                    ..
                })
            )
    })
}

/// Why the engine code `code` can never fail an attempt of `t`, if it cannot: each engine
/// code belongs to one way of running a task. `TIMEOUT` needs a route-less `q:timeout`;
/// `POISONED` is a channel call's undeliverable request; `LOCK_EXPIRED` is a pull task's,
/// which never has `q:retry`; the `HANDLER_*` codes are a registered handler's.
fn engine_code_impossible_here(code: &str, t: &Task) -> Option<&'static str> {
    let channel = matches!(t.kind, TaskKind::Channel { .. });
    let call = matches!(t.kind, TaskKind::Call(_));
    match code {
        "CALLED_INSTANCE_FAILED" | "CALLED_PROCESS_NOT_FOUND" if !call => {
            Some("only a call activity starts a called instance")
        }
        "TIMEOUT" if t.timeout.is_none() => Some("the task has no q:timeout"),
        "POISONED" if !channel => Some("only a channel call's request is poisoned"),
        "LOCK_EXPIRED" => Some("only a pull task's lock expires, and a pull task has no q:retry"),
        "HANDLER_FAILED" | "HANDLER_PANICKED" | "HANDLER_TIMEOUT" if channel || call => {
            Some("a channel call or call activity runs no handler")
        }
        _ => None,
    }
}

fn design_rules(def: &Definition, meta: &Meta, ix: &Index, diags: &mut Vec<Diagnostic>) {
    let p = &def.process;
    let declared: BTreeSet<&str> = def
        .errors
        .values()
        .filter_map(|e| e.code.as_deref())
        .collect();
    for (i, n) in p.nodes.iter().enumerate() {
        let NodeKind::Task(t) = &n.kind else { continue };
        let routed = routed_timer_boundary(p, ix, idx(i));
        if let TaskKind::Channel { name } = &t.kind {
            if t.timeout.is_none() && !routed {
                diags.push(
                    Diagnostic::error(
                        "Q305",
                        n.pos,
                        format!("channel call `{}` (channel `{name}`) has no timeout", n.id),
                    )
                    .with_help(
                        "add <q:timeout duration=\"PT30S\"/> or a timer boundary event with an outgoing flow; the timeout is what recovers a lost response",
                    ),
                );
            }
            if t.retry.is_some() && routed {
                let at = meta.retry_pos.get(&idx(i)).copied().unwrap_or(n.pos);
                diags.push(
                    Diagnostic::error(
                        "Q306",
                        at,
                        format!(
                            "channel call `{}` has q:retry beside a routed timer boundary: the retry policy could never fire, because the boundary takes the path when the call times out",
                            n.id
                        ),
                    )
                    .with_help(
                        "use a route-less <q:timeout> with q:retry, or keep the routed boundary and drop q:retry",
                    ),
                );
            }
        }
        for (code, pos) in meta.non_retryable.get(&idx(i)).into_iter().flatten() {
            if let Some(why) = engine_code_impossible_here(code, t) {
                diags.push(
                    Diagnostic::error(
                        "Q303",
                        *pos,
                        format!("nonRetryableCodes names `{code}`, which can never occur on `{}`: {why}", n.id),
                    )
                    .with_help("remove it from nonRetryableCodes"),
                );
                continue;
            }
            if !ENGINE_FAILURE_CODES.contains(&code.as_str()) && !declared.contains(code.as_str()) {
                diags.push(
                    Diagnostic::error(
                        "Q303",
                        *pos,
                        format!("nonRetryableCodes names `{code}`, which can never occur"),
                    )
                    .with_help(format!(
                        "name an engine code ({}) or the errorCode of a declared <error>",
                        ENGINE_FAILURE_CODES.join(", ")
                    )),
                );
            }
        }
    }
}
