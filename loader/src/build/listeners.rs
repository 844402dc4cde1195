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

/// Whether any element of the tree carries Zeebe execution listeners.
fn any_listener(el: &Element) -> bool {
    el.is(Ns::Zeebe, "executionListeners") || el.children.iter().any(any_listener)
}

/// The tree with every Zeebe execution listener turned into a pull task on the token's
/// path, or `None` when the file has no listener. Refusals go to `diags`; a refused
/// listener is dropped from the copy (its error keeps the definition from loading).
pub(crate) fn rewrite(root: &Element, diags: &mut Vec<Diagnostic>) -> Option<Element> {
    if !any_listener(root) {
        return None;
    }
    let mut ids = BTreeSet::new();
    collect_ids(root, &mut ids);
    let mut copy = root.clone();
    for p in copy.children.iter_mut() {
        if p.is(Ns::Bpmn, "process") {
            if let Some(ls) = take_listeners(p) {
                refuse(
                    diags,
                    ls.pos,
                    "execution listeners of a process are not supported",
                    "qflow has no job of the process itself; put a start listener on the element \
                     after the start event, or an end listener on the start event",
                );
            }
            rewrite_scope(p, false, &ids, diags);
        }
    }
    Some(copy)
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
/// of them was refused.
fn read(ls: &Element, diags: &mut Vec<Diagnostic>) -> Option<Vec<Listener>> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
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
    incoming: BTreeMap<String, usize>,
    outgoing: BTreeMap<String, usize>,
    /// Targets of an event-based gateway's flows.
    after_event_gateway: BTreeSet<String>,
}

fn facts(scope: &Element) -> ScopeFacts {
    let mut incoming = BTreeMap::new();
    let mut outgoing = BTreeMap::new();
    let gateways: BTreeSet<&str> = scope
        .children
        .iter()
        .filter(|c| c.is(Ns::Bpmn, "eventBasedGateway"))
        .filter_map(|c| c.value("id").map(str::trim))
        .collect();
    let mut after_event_gateway = BTreeSet::new();
    for f in scope
        .children
        .iter()
        .filter(|c| c.is(Ns::Bpmn, "sequenceFlow"))
    {
        let source = f.value("sourceRef").map(str::trim).unwrap_or_default();
        let target = f.value("targetRef").map(str::trim).unwrap_or_default();
        *outgoing.entry(source.to_owned()).or_insert(0) += 1;
        *incoming.entry(target.to_owned()).or_insert(0) += 1;
        if gateways.contains(source) {
            after_event_gateway.insert(target.to_owned());
        }
    }
    ScopeFacts {
        incoming,
        outgoing,
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
    let id = el.value("id").unwrap_or("?");
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

/// Moves every flow of `scope` whose `end` (sourceRef/targetRef) is `from` to `to`.
fn move_flows(scope: &mut Element, end: &str, from: &str, to: &str) {
    for f in scope
        .children
        .iter_mut()
        .filter(|c| c.is(Ns::Bpmn, "sequenceFlow"))
    {
        if f.value(end).map(str::trim) == Some(from) {
            set_attr(f, end, to);
        }
    }
}

/// Rewrites one scope (a process or a sub-process) and the sub-processes in it.
fn rewrite_scope(
    scope: &mut Element,
    in_ad_hoc: bool,
    ids: &BTreeSet<String>,
    diags: &mut Vec<Diagnostic>,
) {
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
            rewrite_scope(el, ad_hoc, ids, diags);
        }
        let Some(ls) = take_listeners(el) else {
            continue;
        };
        let Some(listeners) = read(&ls, diags) else {
            continue;
        };
        let el = &scope.children[i];
        let refused: Vec<_> = listeners
            .iter()
            .filter_map(|l| placement_refusal(el, l.event, in_ad_hoc).map(|r| (l.pos, r)))
            .collect();
        if !refused.is_empty() {
            for (pos, (msg, help)) in refused {
                refuse(diags, pos, msg, help);
            }
            continue;
        }
        let id = el.value("id").map(str::trim).unwrap_or_default().to_owned();
        if id.is_empty() {
            continue; // Q102 from the builder
        }
        let mut nodes: BTreeMap<Event, Vec<(String, Element)>> = BTreeMap::new();
        let mut clash = false;
        for l in &listeners {
            let chain = nodes.entry(l.event).or_default();
            let n = chain.len() + 1;
            let lid = format!("{id}{MARK}{}-{n}", l.event.name());
            clash |= ids.contains(&lid);
            chain.push((lid.clone(), listener_task(el, &lid, l, n)));
        }
        let fork_id = format!("{id}{MARK}fork");
        if clash || ids.contains(&fork_id) {
            refuse(
                diags,
                ls.pos,
                format!("the listener tasks of `{id}` would take an id the file already uses"),
                "rename the element whose id contains `~`",
            );
            continue;
        }
        for (chain, event) in [
            (nodes.get(&Event::Start), "before"),
            (nodes.get(&Event::End), "after"),
        ] {
            for (lid, node) in chain.into_iter().flatten() {
                let ty = listeners_type(node);
                diags.push(Diagnostic::note(
                    "Q951",
                    node.pos,
                    format!(
                        "execution listener `{ty}` runs as the pull task `{lid}`, {event} `{id}`"
                    ),
                ));
            }
        }
        let starts = nodes.remove(&Event::Start).unwrap_or_default();
        let ends = nodes.remove(&Event::End).unwrap_or_default();
        let local = el.local.as_str();
        let joins = matches!(local, "parallelGateway" | "inclusiveGateway")
            && facts.incoming.get(&id).copied().unwrap_or(0) > 1;
        let activated_by_event = facts.after_event_gateway.contains(&id)
            || (local == "intermediateCatchEvent"
                && el
                    .children
                    .iter()
                    .any(|c| c.is(Ns::Bpmn, "linkEventDefinition")));
        let start_after = joins || activated_by_event;
        // The token's path from the element onwards: listeners that run after it has
        // activated, then (a gateway cut in two) its forking half.
        let mut after: Vec<(String, Element)> = Vec::new();
        if start_after {
            after.extend(starts.iter().cloned());
        } else if let Some((first, _)) = starts.first() {
            move_flows(scope, "targetRef", &id, first);
            let mut prev: Option<&str> = None;
            for (sid, _) in &starts {
                if let Some(p) = prev {
                    added.push(flow(p, sid, ls.pos));
                }
                prev = Some(sid);
            }
            added.push(flow(prev.unwrap_or(first), &id, ls.pos));
        }
        after.extend(ends.iter().cloned());
        let el = &scope.children[i];
        let split =
            joins && !starts.is_empty() && facts.outgoing.get(&id).copied().unwrap_or(0) > 1;
        if split {
            let mut fork = element(
                Ns::Bpmn,
                &el.local,
                el.pos,
                vec![attr("id", &fork_id, el.pos)],
                Vec::new(),
            );
            if let Some(d) = el.attr("default") {
                fork.attrs.push(d.clone());
            }
            after.push((fork_id.clone(), fork));
        }
        if let Some((last, _)) = after.last() {
            let last = last.clone();
            move_flows(scope, "sourceRef", &id, &last);
            let el = &mut scope.children[i];
            let default = el
                .attrs
                .iter()
                .position(|a| a.ns == Ns::None && a.local == "default")
                .map(|at| el.attrs.remove(at));
            let mut prev = id.clone();
            for (nid, node) in &after {
                added.push(flow(&prev, nid, ls.pos));
                prev = nid.clone();
                let mut node = node.clone();
                if *nid == last && !split {
                    if let Some(d) = &default {
                        node.attrs.push(d.clone());
                    }
                }
                added.push(node);
            }
        }
        if !start_after {
            added.extend(starts.into_iter().map(|(_, n)| n));
        }
    }
    scope.children.extend(added);
}
