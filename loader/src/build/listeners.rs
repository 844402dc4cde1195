//! Zeebe execution listeners (`zeebe:executionListeners`, Camunda 8.6+) as pull tasks
//! around their element.
//!
//! A Zeebe execution listener is a job of its own type that the engine creates before an
//! element's behaviour (`eventType="start"`) or after it, once its output mappings are
//! applied (`eventType="end"`), and that blocks the token until a worker completes it; a
//! failed listener job is retried by its `retries` and then raises an incident, and
//! resolving that incident retries only that listener. qflow gives each listener a
//! service task of the same job type placed on the token's path — before the element,
//! after it — so that every part of a pull task serves it unchanged: attempts and retries,
//! incidents and repair, activity instances, the worker surfaces. This runs before the
//! builder walks the element tree: it rewrites a copy of the tree, and only when the file
//! holds a listener (a file without one is built from the parsed tree itself).
//!
//! The listener task of element `X` is `X~start-1`, `X~start-2`, … and `X~end-1`, …
//! (`~` is no character of an XML id, so the names cannot meet one written in the file),
//! and a flow the rewrite adds leaving node `N` is `N~flow`. A listener's job is given
//! what the element's own job is given: its `zeebe:taskHeaders` and its input mappings
//! (evaluated again over the variables, as qflow evaluates any task's inputs). Where the
//! token goes:
//!
//! - start listeners take the element's incoming flows and lead into it — except at a
//!   catch event after an event-based gateway or a link catch event, whose activation *is*
//!   the event, and at a joining parallel or inclusive gateway, which activates once for
//!   all the tokens it joins: there they run once the element has activated (a gateway
//!   that also forks is cut in two, `G` joining and `G~fork` forking after the
//!   listeners);
//! - end listeners take the element's outgoing flows (with its conditions and its default
//!   flow, which Zeebe evaluates as the token leaves, after the end listeners).
//!
//! One difference stays, written down in `docs/vendor-mappings.md`: a start listener's
//! variables are local variables of the element in Zeebe, and qflow keeps no local scope
//! for a task, so they land where a task's result lands (and stay after the element).
//! Refused with the reason (Q136): what Zeebe refuses too (a start listener on a start or
//! boundary event, an end listener on a gateway or an error end event, a listener on a
//! compensation boundary, two listeners of one event type and job type, a job type or
//! retries given as an expression qflow does not evaluate), and what qflow cannot place on
//! the token's path yet (listeners of a process, on an end event's end, on a
//! multi-instance activity, on an event sub-process or a compensation handler, inside an
//! ad-hoc sub-process, on a link throw's end).

use std::collections::{BTreeMap, BTreeSet};

use crate::diag::Diagnostic;
use crate::model::Pos;
use crate::xml::{Attr, Element, Ns};

use super::FLOW_NODES;

/// The marker between an element's id and the name of a node the rewrite adds.
pub(crate) const MARK: char = '~';

/// The most listeners one element may have: far more than any model needs, and a
/// bound on what one element makes the rewrite copy.
pub(crate) const LISTENERS_PER_ELEMENT_MAX: usize = 32;

/// The most elements the listener tasks of one file may copy from their elements (the
/// input mappings and headers each listener's job is given, one copy per listener): keeps
/// the copy's memory in proportion to a sane model whatever the file holds.
pub(crate) const COPIES_MAX: usize = 10_000;

/// Whether any element of the tree carries Zeebe execution listeners.
pub(crate) fn any(el: &Element) -> bool {
    el.is(Ns::Zeebe, "executionListeners") || el.children.iter().any(any)
}

/// Rewrites the processes of one file, each with every Zeebe execution listener turned
/// into a pull task on the token's path. Refusals go to the diagnostics; a refused
/// listener is dropped from the copy (its error keeps the definition from loading).
pub(crate) struct Rewriter {
    /// Every id of the file, to refuse a name the rewrite would give twice.
    ids: BTreeSet<String>,
    /// Elements the listener tasks have copied so far ([`COPIES_MAX`]).
    copies: usize,
}

impl Rewriter {
    pub(crate) fn new(root: &Element) -> Rewriter {
        let mut ids = BTreeSet::new();
        collect_ids(root, &mut ids);
        Rewriter { ids, copies: 0 }
    }

    /// A copy of `process` with its listeners placed.
    pub(crate) fn process(&mut self, process: &Element, diags: &mut Vec<Diagnostic>) -> Element {
        let mut copy = process.clone();
        while let Some(ls) = take_listeners(&mut copy) {
            refuse(
                diags,
                ls.pos,
                "execution listeners of a process are not supported",
                "qflow has no job of the process itself; put a start listener on the element \
                 after the start event, or an end listener on the start event",
            );
        }
        self.scope(&mut copy, false, diags);
        copy
    }
}

/// An id holding [`MARK`], which no XML id may hold (an NCName): a node the rewrite
/// adds would be told apart from it by name alone (`model::listener_of`), so the builder
/// refuses it (Q137) in every file, with listeners or not.
pub(crate) fn holds_mark(id: &str) -> bool {
    id.contains(MARK)
}

fn collect_ids(el: &Element, ids: &mut BTreeSet<String>) {
    if let Some(id) = el.value("id") {
        ids.insert(id.trim().to_owned());
    }
    for c in &el.children {
        collect_ids(c, ids);
    }
}

fn refuse(diags: &mut Vec<Diagnostic>, pos: Pos, msg: impl Into<String>, help: &str) {
    diags.push(Diagnostic::error("Q136", pos, msg).with_help(help));
}

/// Takes the element's `zeebe:executionListeners` out of its `extensionElements`.
fn take_listeners(el: &mut Element) -> Option<Element> {
    let ext = el
        .children
        .iter_mut()
        .find(|c| c.is(Ns::Bpmn, "extensionElements"))?;
    let at = ext
        .children
        .iter()
        .position(|c| c.is(Ns::Zeebe, "executionListeners"))?;
    Some(ext.children.remove(at))
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Start,
    End,
}

impl Event {
    fn name(self) -> &'static str {
        match self {
            Event::Start => "start",
            Event::End => "end",
        }
    }
}

/// One listener as written, checked.
struct Listener {
    event: Event,
    /// `type`, `retries` as written (positions kept for the pull task's own checks).
    job_type: Attr,
    retries: Option<Attr>,
    pos: Pos,
}

/// The listeners of one `zeebe:executionListeners`, in document order; `None` when one
/// of them was refused. `seen` holds the (event, type) pairs of the element's listeners
/// read before (an element may hold more than one `zeebe:executionListeners`).
fn read(
    ls: &Element,
    seen: &mut BTreeSet<(&'static str, String)>,
    diags: &mut Vec<Diagnostic>,
) -> Option<Vec<Listener>> {
    let mut out = Vec::new();
    let mut ok = true;
    for l in &ls.children {
        if !l.is(Ns::Zeebe, "executionListener") {
            refuse(
                diags,
                l.pos,
                format!(
                    "<{}> inside zeebe:executionListeners is not supported",
                    l.local
                ),
                "zeebe:executionListeners holds zeebe:executionListener elements",
            );
            ok = false;
            continue;
        }
        if let Some(c) = l.children.first() {
            refuse(
                diags,
                c.pos,
                format!(
                    "<{}> inside zeebe:executionListener is not supported",
                    c.local
                ),
                "a listener says its eventType, type and retries in attributes; its job is \
                 given the element's headers",
            );
            ok = false;
            continue;
        }
        let event = match l.value("eventType").map(str::trim) {
            Some("start") => Event::Start,
            Some("end") => Event::End,
            other => {
                let at = l.attr("eventType").map_or(l.pos, |a| a.pos);
                refuse(
                    diags,
                    at,
                    match other {
                        None => "a zeebe:executionListener has no eventType".to_owned(),
                        Some(v) => format!("execution listener eventType `{v}` is not supported"),
                    },
                    "write eventType=\"start\" or eventType=\"end\" (Zeebe's beforeAll, on a \
                     multi-instance body, is not supported)",
                );
                ok = false;
                continue;
            }
        };
        let Some(job_type) = l.attr("type").filter(|a| !a.value.trim().is_empty()) else {
            refuse(
                diags,
                l.pos,
                "a zeebe:executionListener has no type",
                "write type=\"<job type>\": the job type a worker of the listener fetches",
            );
            ok = false;
            continue;
        };
        if job_type.value.trim().starts_with('=') {
            refuse(
                diags,
                job_type.pos,
                format!(
                    "execution listener type `{}` is an expression",
                    job_type.value.trim()
                ),
                "write a literal job type: qflow's pull topics are fixed when the model loads",
            );
            ok = false;
            continue;
        }
        let retries = l.attr("retries").cloned();
        if let Some(r) = &retries {
            if r.value.trim().parse::<u32>().is_err() {
                refuse(
                    diags,
                    r.pos,
                    format!(
                        "execution listener retries `{}` is not a whole number",
                        r.value.trim()
                    ),
                    "write a literal count, e.g. retries=\"3\"",
                );
                ok = false;
                continue;
            }
        }
        if !seen.insert((event.name(), job_type.value.trim().to_owned())) {
            refuse(
                diags,
                l.pos,
                format!(
                    "a second {} listener of type `{}` on this element",
                    event.name(),
                    job_type.value.trim()
                ),
                "Zeebe refuses two listeners with one eventType and type on an element; \
                 remove one",
            );
            ok = false;
            continue;
        }
        out.push(Listener {
            event,
            job_type: job_type.clone(),
            retries,
            pos: l.pos,
        });
    }
    ok.then_some(out)
}

/// What the scope knows about its elements that placing a listener needs.
struct ScopeFacts {
    /// The scope's flows (indexes into its children) by target and by source.
    by_target: BTreeMap<String, Vec<usize>>,
    by_source: BTreeMap<String, Vec<usize>>,
    /// Targets of an event-based gateway's flows.
    after_event_gateway: BTreeSet<String>,
}

impl ScopeFacts {
    fn count(map: &BTreeMap<String, Vec<usize>>, id: &str) -> usize {
        map.get(id).map_or(0, Vec::len)
    }
}

fn facts(scope: &Element) -> ScopeFacts {
    let mut by_target: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut by_source: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let gateways: BTreeSet<&str> = scope
        .children
        .iter()
        .filter(|c| c.is(Ns::Bpmn, "eventBasedGateway"))
        .filter_map(|c| c.value("id").map(str::trim))
        .collect();
    let mut after_event_gateway = BTreeSet::new();
    for (i, f) in scope.children.iter().enumerate() {
        if !f.is(Ns::Bpmn, "sequenceFlow") {
            continue;
        }
        let source = f.value("sourceRef").map(str::trim).unwrap_or_default();
        let target = f.value("targetRef").map(str::trim).unwrap_or_default();
        by_source.entry(source.to_owned()).or_default().push(i);
        by_target.entry(target.to_owned()).or_default().push(i);
        if gateways.contains(source) {
            after_event_gateway.insert(target.to_owned());
        }
    }
    ScopeFacts {
        by_target,
        by_source,
        after_event_gateway,
    }
}

/// Where a refused placement is refused, and why.
fn placement_refusal(
    el: &Element,
    event: Event,
    in_ad_hoc: bool,
) -> Option<(String, &'static str)> {
    let local = el.local.as_str();
    let has = |def: &str| el.children.iter().any(|c| c.is(Ns::Bpmn, def));
    let gateway = local.ends_with("Gateway");
    let id = el.value("id").map_or("?", str::trim);
    if local == "sequenceFlow" {
        return Some((
            format!("an execution listener on the sequence flow `{id}`"),
            "Zeebe runs listeners of elements only: put it on the flow's target as a start \
             listener",
        ));
    }
    if in_ad_hoc {
        return Some((
            format!("an execution listener on `{id}` inside an ad-hoc sub-process"),
            "an ad-hoc sub-process activates its elements directly, so qflow cannot place the \
             listener on the token's path there; put it on the ad-hoc sub-process",
        ));
    }
    if el
        .children
        .iter()
        .any(|c| c.ns == Ns::Bpmn && c.local.ends_with("LoopCharacteristics"))
    {
        return Some((
            format!("an execution listener on the multi-instance activity `{id}`"),
            "Zeebe runs start and end listeners for every inner instance, which qflow's \
             listener tasks around the activity cannot; put the listener on an element before \
             or after it",
        ));
    }
    if el.value("triggeredByEvent").map(str::trim) == Some("true") {
        return Some((
            format!("an execution listener on the event sub-process `{id}`"),
            "no sequence flow enters an event sub-process; put the listener on its start event \
             (an end listener) or on the elements inside",
        ));
    }
    if el.value("isForCompensation").map(str::trim) == Some("true") {
        return Some((
            format!("an execution listener on the compensation handler `{id}`"),
            "a compensation handler has no sequence flows to place the listener on",
        ));
    }
    match event {
        Event::Start if local == "startEvent" => Some((
            format!("a start listener on the start event `{id}`"),
            "Zeebe refuses it too: put it on the element after the start event, or use an end \
             listener on the start event",
        )),
        Event::Start if local == "boundaryEvent" => Some((
            format!("a start listener on the boundary event `{id}`"),
            "Zeebe refuses it too: put it on the activity the event is attached to",
        )),
        Event::End if gateway => Some((
            format!("an end listener on the gateway `{id}`"),
            "Zeebe refuses it too: put a start listener on the element after the gateway",
        )),
        Event::End if local == "endEvent" && has("errorEventDefinition") => Some((
            format!("an end listener on the error end event `{id}`"),
            "Zeebe refuses it too: put it on the event that catches the error",
        )),
        Event::End if local == "endEvent" => Some((
            format!("an end listener on the end event `{id}`"),
            "qflow places listeners on the token's path, and nothing follows an end event; \
             use a start listener on the end event",
        )),
        _ if local == "boundaryEvent" && has("compensateEventDefinition") => Some((
            format!("an execution listener on the compensation boundary event `{id}`"),
            "Zeebe refuses it too: put it on the compensation handler's elements",
        )),
        Event::End if local == "intermediateThrowEvent" && has("linkEventDefinition") => Some((
            format!("an end listener on the link throw event `{id}`"),
            "the token leaves a link throw by its link, not by a flow; use a start listener \
             on the link catch event",
        )),
        _ => None,
    }
}

/// A pull task for one listener of `of`.
fn listener_task(of: &Element, id: &str, l: &Listener, n: usize) -> Element {
    let mut ext = Vec::new();
    let mut def_attrs = vec![Attr {
        ns: Ns::None,
        local: "type".into(),
        value: l.job_type.value.clone(),
        pos: l.job_type.pos,
    }];
    if let Some(r) = &l.retries {
        def_attrs.push(r.clone());
    }
    ext.push(element(
        Ns::Zeebe,
        "taskDefinition",
        l.pos,
        def_attrs,
        Vec::new(),
    ));
    let of_ext = of.child(Ns::Bpmn, "extensionElements");
    if let Some(headers) = of_ext.and_then(|e| e.child(Ns::Zeebe, "taskHeaders")) {
        ext.push(headers.clone());
    }
    if let Some(io) = of_ext.and_then(|e| e.child(Ns::Zeebe, "ioMapping")) {
        let inputs: Vec<Element> = io
            .children
            .iter()
            .filter(|c| c.is(Ns::Zeebe, "input"))
            .cloned()
            .collect();
        if !inputs.is_empty() {
            ext.push(element(Ns::Zeebe, "ioMapping", io.pos, Vec::new(), inputs));
        }
    }
    let name = format!(
        "{} listener {n} of {}",
        l.event.name(),
        of.value("name")
            .or(of.value("id"))
            .map(str::trim)
            .unwrap_or_default()
    );
    element(
        Ns::Bpmn,
        "serviceTask",
        l.pos,
        vec![attr("id", id, l.pos), attr("name", &name, l.pos)],
        vec![element(
            Ns::Bpmn,
            "extensionElements",
            l.pos,
            Vec::new(),
            ext,
        )],
    )
}

/// The job type of a listener task [`listener_task`] made.
fn listeners_type(task: &Element) -> &str {
    task.child(Ns::Bpmn, "extensionElements")
        .and_then(|e| e.child(Ns::Zeebe, "taskDefinition"))
        .and_then(|d| d.value("type"))
        .map(str::trim)
        .unwrap_or_default()
}

fn attr(local: &str, value: &str, pos: Pos) -> Attr {
    Attr {
        ns: Ns::None,
        local: local.into(),
        value: value.into(),
        pos,
    }
}

fn element(ns: Ns, local: &str, pos: Pos, attrs: Vec<Attr>, children: Vec<Element>) -> Element {
    Element {
        ns,
        local: local.into(),
        pos,
        attrs,
        children,
        text: String::new(),
        text_pos: pos,
        text_raw: String::new(),
    }
}

fn flow(from: &str, to: &str, pos: Pos) -> Element {
    element(
        Ns::Bpmn,
        "sequenceFlow",
        pos,
        vec![
            attr("id", &format!("{from}{MARK}flow"), pos),
            attr("sourceRef", from, pos),
            attr("targetRef", to, pos),
        ],
        Vec::new(),
    )
}

fn set_attr(el: &mut Element, local: &str, value: &str) {
    match el
        .attrs
        .iter_mut()
        .find(|a| a.ns == Ns::None && a.local == local)
    {
        Some(a) => a.value = value.to_owned(),
        None => el.attrs.push(attr(local, value, el.pos)),
    }
}

/// Moves the flows at `at` (indexes into the scope's children) so that their `end`
/// (`sourceRef` or `targetRef`) is `to`.
fn move_flows(scope: &mut Element, at: Option<&Vec<usize>>, end: &str, to: &str) {
    for &i in at.into_iter().flatten() {
        set_attr(&mut scope.children[i], end, to);
    }
}

/// Whether the element may carry a `default` flow of its own (an activity, or a gateway
/// that chooses): only then does the rewrite move it to the node the flows now leave.
fn takes_default(local: &str) -> bool {
    local.ends_with("Task")
        || matches!(
            local,
            "task" | "subProcess" | "adHocSubProcess" | "callActivity" | "transaction"
        )
        || matches!(local, "exclusiveGateway" | "inclusiveGateway")
}

impl Rewriter {
    /// Rewrites one scope (a process or a sub-process) and the sub-processes in it.
    fn scope(&mut self, scope: &mut Element, in_ad_hoc: bool, diags: &mut Vec<Diagnostic>) {
        let facts = facts(scope);
        let mut added: Vec<Element> = Vec::new();
        for i in 0..scope.children.len() {
            let el = &mut scope.children[i];
            if el.ns != Ns::Bpmn || !FLOW_NODES.contains(&el.local.as_str()) {
                continue;
            }
            if matches!(
                el.local.as_str(),
                "subProcess" | "adHocSubProcess" | "transaction"
            ) {
                let ad_hoc = in_ad_hoc || el.local == "adHocSubProcess";
                self.scope(el, ad_hoc, diags);
            }
            let el = &mut scope.children[i];
            let mut blocks = Vec::new();
            while let Some(ls) = take_listeners(el) {
                blocks.push(ls);
            }
            let Some(first_block) = blocks.first() else {
                continue;
            };
            let at = first_block.pos;
            let mut seen = BTreeSet::new();
            let mut listeners = Vec::new();
            let mut ok = true;
            for b in &blocks {
                match read(b, &mut seen, diags) {
                    Some(ls) => listeners.extend(ls),
                    None => ok = false,
                }
            }
            let el = &scope.children[i];
            if !ok || !self.placeable(el, &listeners, in_ad_hoc, at, diags) {
                continue;
            }
            let id = el.value("id").map(str::trim).unwrap_or_default().to_owned();
            if id.is_empty() {
                continue; // Q102 from the builder
            }
            let Some(placed) = self.place(scope, i, &id, listeners, &facts, at, diags) else {
                continue;
            };
            added.extend(placed);
        }
        scope.children.extend(added);
    }

    /// Whether `listeners` can be placed on `el`; reports why not.
    fn placeable(
        &mut self,
        el: &Element,
        listeners: &[Listener],
        in_ad_hoc: bool,
        at: Pos,
        diags: &mut Vec<Diagnostic>,
    ) -> bool {
        let mut ok = true;
        for l in listeners {
            if let Some((msg, help)) = placement_refusal(el, l.event, in_ad_hoc) {
                refuse(diags, l.pos, msg, help);
                ok = false;
            }
        }
        if listeners.len() > LISTENERS_PER_ELEMENT_MAX {
            refuse(
                diags,
                at,
                format!(
                    "{} execution listeners on one element; qflow takes at most \
                     {LISTENERS_PER_ELEMENT_MAX}",
                    listeners.len()
                ),
                "do the work of several listeners in one job",
            );
            return false;
        }
        let ext = el.child(Ns::Bpmn, "extensionElements");
        let per_listener = ext
            .and_then(|e| e.child(Ns::Zeebe, "taskHeaders"))
            .map_or(0, |h| h.children.len() + 1)
            + ext
                .and_then(|e| e.child(Ns::Zeebe, "ioMapping"))
                .map_or(0, |io| io.children.len() + 1);
        let copies = per_listener.saturating_mul(listeners.len());
        if ok && self.copies.saturating_add(copies) > COPIES_MAX {
            refuse(
                diags,
                at,
                format!(
                    "the execution listeners of this file would copy more than {COPIES_MAX} \
                     mapping and header elements to their jobs"
                ),
                "each listener's job is given its element's input mappings and headers; use \
                 fewer listeners on elements with many of them",
            );
            return false;
        }
        self.copies += copies;
        ok
    }

    /// Places the listeners of the element at `i` (id `id`) on the token's path: rewires
    /// the scope's flows and returns the nodes and flows to add to it, or `None` (after
    /// reporting) when a name it would give is taken.
    #[allow(clippy::too_many_arguments)]
    fn place(
        &mut self,
        scope: &mut Element,
        i: usize,
        id: &str,
        listeners: Vec<Listener>,
        facts: &ScopeFacts,
        at: Pos,
        diags: &mut Vec<Diagnostic>,
    ) -> Option<Vec<Element>> {
        let el = &scope.children[i];
        let local = el.local.clone();
        let joins = matches!(local.as_str(), "parallelGateway" | "inclusiveGateway")
            && ScopeFacts::count(&facts.by_target, id) > 1;
        let activated_by_event = facts.after_event_gateway.contains(id)
            || (local == "intermediateCatchEvent"
                && el
                    .children
                    .iter()
                    .any(|c| c.is(Ns::Bpmn, "linkEventDefinition")));
        let start_after = joins || activated_by_event;
        let mut starts: Vec<(String, Element)> = Vec::new();
        let mut ends: Vec<(String, Element)> = Vec::new();
        for l in &listeners {
            let chain = match l.event {
                Event::Start => &mut starts,
                Event::End => &mut ends,
            };
            let n = chain.len() + 1;
            let lid = format!("{id}{MARK}{}-{n}", l.event.name());
            chain.push((lid.clone(), listener_task(el, &lid, l, n)));
        }
        let split = joins && !starts.is_empty() && ScopeFacts::count(&facts.by_source, id) > 1;
        let fork_id = format!("{id}{MARK}fork");
        let taken = starts
            .iter()
            .chain(&ends)
            .map(|(n, _)| n)
            .chain(split.then_some(&fork_id))
            .find(|n| self.ids.contains(*n));
        if let Some(taken) = taken {
            refuse(
                diags,
                at,
                format!("the listener task `{taken}` would take an id the file already uses"),
                "rename the element whose id holds `~` (no XML id may hold it)",
            );
            return None;
        }
        for (chain, event, after) in [(&starts, "start", start_after), (&ends, "end", true)] {
            for (lid, node) in chain {
                let when = if after { "after" } else { "before" };
                diags.push(Diagnostic::note(
                    "Q951",
                    node.pos,
                    format!(
                        "{event} listener `{}` runs as the pull task `{lid}`, {when} `{id}`",
                        listeners_type(node)
                    ),
                ));
            }
        }
        let mut added = Vec::new();
        // Start listeners before the element: they take its incoming flows.
        let before = if start_after {
            Vec::new()
        } else {
            std::mem::take(&mut starts)
        };
        if let Some((first, _)) = before.first() {
            move_flows(scope, facts.by_target.get(id), "targetRef", first);
            let mut prev: Option<String> = None;
            for (sid, node) in before {
                if let Some(p) = prev {
                    added.push(flow(&p, &sid, at));
                }
                added.push(node);
                prev = Some(sid);
            }
            added.push(flow(&prev.unwrap_or_default(), id, at));
        }
        // After the element: start listeners of an element activated by its event or
        // its join, then end listeners, then a forking gateway's other half; they take
        // its outgoing flows and its default.
        let mut after = starts;
        after.extend(ends);
        if split {
            let el = &scope.children[i];
            let mut attrs = vec![attr("id", &fork_id, el.pos)];
            attrs.extend(
                el.attrs
                    .iter()
                    .filter(|a| a.ns == Ns::None && matches!(a.local.as_str(), "name" | "default"))
                    .cloned(),
            );
            after.push((
                fork_id.clone(),
                element(Ns::Bpmn, &local, el.pos, attrs, Vec::new()),
            ));
        }
        let Some((last, _)) = after.last() else {
            return Some(added);
        };
        let last = last.clone();
        move_flows(scope, facts.by_source.get(id), "sourceRef", &last);
        let el = &mut scope.children[i];
        let default = if takes_default(&local) {
            el.attrs
                .iter()
                .position(|a| a.ns == Ns::None && a.local == "default")
                .map(|at| el.attrs.remove(at))
        } else {
            None
        };
        let mut prev = id.to_owned();
        for (nid, mut node) in after {
            added.push(flow(&prev, &nid, at));
            if nid == last && !split {
                node.attrs.extend(default.clone());
            }
            prev = nid;
            added.push(node);
        }
        Some(added)
    }
}
