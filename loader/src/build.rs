//! Element tree → definition model: which elements are supported (L1, L2), task kinds and
//! `q:` extensions (L4, L5), vendor dialects (L8), conditions and mappings compiled (L3).
//!
//! Every element is either mapped, deliberately ignored (diagram-only artefacts), or
//! refused with a positioned diagnostic — nothing is skipped silently and nothing is
//! guessed. A refused node still gets a placeholder in the graph, so that the graph rules
//! report real problems rather than a cascade of "unknown node" errors. A definition with
//! any error is never handed out (the caller discards it).

use std::collections::BTreeMap;

use crate::diag::Diagnostic;
use crate::expr::Expression;
use crate::feel::feel_to_cel;
use crate::iso8601;
use crate::model::*;
use crate::xml::{Attr, Document, Element, Ns};
use crate::LoadOptions;

/// Positions the validator needs that the model does not carry.
#[derive(Debug, Default)]
pub(crate) struct Meta {
    pub process_pos: Pos,
    /// `q:retry` element position per task node.
    pub retry_pos: BTreeMap<NodeIdx, Pos>,
    /// Each `nonRetryableCodes` entry with the position of the attribute.
    pub non_retryable: BTreeMap<NodeIdx, Vec<(String, Pos)>>,
    /// Start and boundary events refused for their trigger (message, signal…). They count
    /// as reachable roots for the graph rules, so one refused event does not cascade into
    /// "unreachable" errors downstream.
    pub refused_roots: Vec<NodeIdx>,
    /// Every node refused for its kind (placeholders in the graph).
    pub refused: std::collections::BTreeSet<NodeIdx>,
}

pub(crate) struct Built {
    pub def: Definition,
    pub meta: Meta,
}

/// BPMN elements that are flow nodes, supported or not (used to tell an empty pool from
/// a process with content, and to name refused elements).
const FLOW_NODES: &[&str] = &[
    "startEvent",
    "endEvent",
    "intermediateCatchEvent",
    "intermediateThrowEvent",
    "boundaryEvent",
    "task",
    "serviceTask",
    "userTask",
    "manualTask",
    "scriptTask",
    "businessRuleTask",
    "sendTask",
    "receiveTask",
    "exclusiveGateway",
    "inclusiveGateway",
    "parallelGateway",
    "eventBasedGateway",
    "complexGateway",
    "subProcess",
    "adHocSubProcess",
    "transaction",
    "callActivity",
    "sequenceFlow",
];

/// The elements read as [`Task`]s (their extensions are read by `Extensions::read`).
const TASKS: &[&str] = &[
    "task",
    "manualTask",
    "serviceTask",
    "userTask",
    "sendTask",
    "receiveTask",
];

/// Process-level BPMN elements with no execution meaning; ignored.
const IGNORED_IN_SCOPE: &[&str] = &[
    "laneSet",
    "textAnnotation",
    "association",
    "dataObject",
    "dataObjectReference",
    "dataStoreReference",
    "group",
    "property",
    "ioSpecification",
    "extensionElements",
    "auditing",
    "monitoring",
    "documentation",
    "performer",
    "humanPerformer",
    "potentialOwner",
    "resourceRole",
    "supportedInterfaceRef",
    "correlationSubscription",
];

/// Children of a flow node that have no execution meaning here (or are read elsewhere).
const IGNORED_IN_NODE: &[&str] = &[
    "incoming",
    "outgoing",
    "documentation",
    "extensionElements",
    "ioSpecification",
    "dataInputAssociation",
    "dataOutputAssociation",
    "dataInput",
    "dataOutput",
    "inputSet",
    "outputSet",
    "property",
    "auditing",
    "monitoring",
    "performer",
    "humanPerformer",
    "potentialOwner",
    "resourceRole",
    "rendering",
    "conditionExpression",
    "timeDuration",
    "timeDate",
    "timeCycle",
];

pub(crate) fn build(
    doc: &Document,
    content_hash: &str,
    opts: &LoadOptions,
    diags: &mut Vec<Diagnostic>,
) -> Vec<Built> {
    let root = &doc.root;
    if !root.is(Ns::Bpmn, "definitions") {
        diags.push(
            Diagnostic::error(
                "Q006",
                root.pos,
                format!(
                    "the root element is <{}>, not a BPMN 2.0 <definitions> in namespace {}",
                    root.local,
                    crate::xml::BPMN_NS
                ),
            )
            .with_help("export the model as BPMN 2.0 XML"),
        );
        return Vec::new();
    }
    check_unique_ids(root, diags);
    let errors = collect_errors(root);
    let messages = collect_messages(root);

    let processes: Vec<&Element> = root.children_named(Ns::Bpmn, "process").collect();
    let mut with_nodes = Vec::new();
    for p in &processes {
        if p.children
            .iter()
            .any(|c| c.ns == Ns::Bpmn && FLOW_NODES.contains(&c.local.as_str()))
        {
            with_nodes.push(*p);
        } else {
            diags.push(Diagnostic::warning(
                "Q903",
                p.pos,
                format!(
                    "process `{}` has no flow nodes and was skipped",
                    p.value("id").unwrap_or("?")
                ),
            ));
        }
    }
    let executable: Vec<&Element> = with_nodes
        .iter()
        .copied()
        .filter(|p| p.value("isExecutable").map(str::trim) != Some("false"))
        .collect();
    let chosen = if executable.is_empty() {
        for p in &with_nodes {
            let at = p.attr("isExecutable").map_or(p.pos, |a| a.pos);
            diags.push(
                Diagnostic::warning(
                    "Q901",
                    at,
                    format!(
                        "process `{}` is marked isExecutable=\"false\"; loaded anyway because the file has no executable process",
                        p.value("id").unwrap_or("?")
                    ),
                )
                .with_help("set isExecutable=\"true\" on the process you mean to run"),
            );
        }
        with_nodes
    } else {
        executable
    };
    if chosen.is_empty() {
        diags.push(
            Diagnostic::error(
                "Q007",
                root.pos,
                "the file contains no process with flow nodes",
            )
            .with_help("add a <process> with a start event"),
        );
        return Vec::new();
    }
    let ctx = Ctx {
        opts,
        errors: &errors,
        messages: &messages,
        default_language: root
            .value("expressionLanguage")
            .map(|l| l.trim().to_ascii_lowercase())
            .filter(|l| !l.is_empty()),
    };
    chosen
        .into_iter()
        .map(|p| {
            let mut pb = ProcessBuilder::new(&ctx, diags);
            pb.meta.process_pos = p.pos;
            check_other_extensions(&mut pb, p);
            pb.walk_scope(p, None);
            pb.resolve();
            let (process, meta) = pb.finish();
            Built {
                def: Definition {
                    id: p.value("id").unwrap_or_default().to_string(),
                    name: p.value("name").map(str::to_string),
                    content_hash: content_hash.to_string(),
                    process,
                    errors: errors.clone(),
                    messages: messages.clone(),
                    class: Classification::Stateless,
                },
                meta,
            }
        })
        .collect()
}

fn check_unique_ids(root: &Element, diags: &mut Vec<Diagnostic>) {
    let mut seen: BTreeMap<&str, Pos> = BTreeMap::new();
    let mut stack = vec![root];
    while let Some(el) = stack.pop() {
        if el.ns == Ns::Bpmn {
            if let Some(a) = el.attr("id") {
                let id = a.value.as_str();
                match seen.get(id) {
                    Some(first) if *first < a.pos => diags.push(dup_id(id, a.pos, *first)),
                    Some(first) => {
                        let first = *first;
                        diags.push(dup_id(id, first, a.pos));
                        seen.insert(id, a.pos);
                    }
                    None => {
                        seen.insert(id, a.pos);
                    }
                }
            }
        }
        stack.extend(el.children.iter());
    }
}

fn dup_id(id: &str, at: Pos, first: Pos) -> Diagnostic {
    Diagnostic::error(
        "Q101",
        at,
        format!("the id `{id}` is already used at {first}"),
    )
    .with_help("give every element its own id")
}

fn collect_errors(root: &Element) -> BTreeMap<String, ErrorDef> {
    root.children_named(Ns::Bpmn, "error")
        .filter_map(|e| {
            let id = e.value("id")?.to_string();
            Some((
                id.clone(),
                ErrorDef {
                    id,
                    name: e.value("name").map(str::to_string),
                    code: e
                        .value("errorCode")
                        .map(str::trim)
                        .filter(|c| !c.is_empty())
                        .map(str::to_string),
                },
            ))
        })
        .collect()
}

/// Message id → name; a message without a name is known by its id.
fn collect_messages(root: &Element) -> BTreeMap<String, String> {
    root.children_named(Ns::Bpmn, "message")
        .filter_map(|m| {
            let id = m.value("id")?.to_string();
            let name = m
                .value("name")
                .filter(|n| !n.trim().is_empty())
                .unwrap_or(&id)
                .to_string();
            Some((id, name))
        })
        .collect()
}

struct Ctx<'a> {
    opts: &'a LoadOptions,
    /// `<definitions expressionLanguage>`: the language of conditions that name none.
    default_language: Option<String>,
    errors: &'a BTreeMap<String, ErrorDef>,
    messages: &'a BTreeMap<String, String>,
}

struct ProcessBuilder<'a, 'd> {
    ctx: &'a Ctx<'a>,
    diags: &'d mut Vec<Diagnostic>,
    nodes: Vec<Node>,
    by_id: BTreeMap<String, NodeIdx>,
    flow_els: Vec<(&'a Element, Option<NodeIdx>)>,
    boundary_els: Vec<(NodeIdx, &'a Element)>,
    defaults: Vec<(NodeIdx, &'a Attr)>,
    flows: Vec<Flow>,
    meta: Meta,
}

impl<'a, 'd> ProcessBuilder<'a, 'd> {
    fn new(ctx: &'a Ctx<'a>, diags: &'d mut Vec<Diagnostic>) -> Self {
        ProcessBuilder {
            ctx,
            diags,
            nodes: Vec::new(),
            by_id: BTreeMap::new(),
            flow_els: Vec::new(),
            boundary_els: Vec::new(),
            defaults: Vec::new(),
            flows: Vec::new(),
            meta: Meta::default(),
        }
    }

    fn help(&mut self, code: &'static str, pos: Pos, msg: impl Into<String>, help: &str) {
        self.diags
            .push(Diagnostic::error(code, pos, msg).with_help(help));
    }

    fn walk_scope(&mut self, container: &'a Element, scope: Option<NodeIdx>) {
        for child in &container.children {
            if child.ns != Ns::Bpmn {
                continue;
            }
            let local = child.local.as_str();
            if local == "sequenceFlow" {
                self.flow_els.push((child, scope));
            } else if FLOW_NODES.contains(&local) {
                self.add_node(child, scope);
            } else if scope.is_some()
                && (IGNORED_IN_NODE.contains(&local) || local.ends_with("LoopCharacteristics"))
            {
                // The sub-process's own children; `check_node_children` looked at them.
            } else if !IGNORED_IN_SCOPE.contains(&local) {
                self.help(
                    "Q103",
                    child.pos,
                    format!("<{local}> is not supported by qflow"),
                    "remove it, or replace it with a supported element (see SPEC L2)",
                );
            }
        }
    }

    fn add_node(&mut self, el: &'a Element, scope: Option<NodeIdx>) {
        let id = match el.value("id").map(str::trim).filter(|s| !s.is_empty()) {
            Some(id) => id.to_string(),
            None => {
                self.help(
                    "Q102",
                    el.pos,
                    format!("<{}> has no id", el.local),
                    "add a unique id attribute",
                );
                format!("__anonymous_{}_{}", el.pos.line, el.pos.col)
            }
        };
        if self.by_id.contains_key(&id) {
            // Already reported as Q101; a second node under the same id would only add
            // unreachable/dead-end noise.
            return;
        }
        let idx = NodeIdx(self.nodes.len() as u32);
        self.check_node_children(el);
        if !TASKS.contains(&el.local.as_str()) {
            check_other_extensions(self, el);
        }
        let kind = self.node_kind(el, idx);
        self.nodes.push(Node {
            id: id.clone(),
            name: el.value("name").map(str::to_string),
            pos: el.pos,
            scope,
            kind,
            outgoing: Vec::new(),
            incoming: Vec::new(),
        });
        self.by_id.entry(id).or_insert(idx);
        // A refused sub-process (event sub-process…) is not walked: its content would
        // only add noise to the one error that matters.
        if el.local == "subProcess" && !self.meta.refused.contains(&idx) {
            self.walk_scope(el, Some(idx));
        }
    }

    /// Refuses loop/multi-instance markers, compensation and unknown BPMN children.
    fn check_node_children(&mut self, el: &Element) {
        if el.value("isForCompensation") == Some("true") {
            self.help(
                "Q103",
                el.pos,
                format!("compensation handler <{}> is not supported", el.local),
                "remove isForCompensation",
            );
        }
        for c in &el.children {
            if c.ns != Ns::Bpmn {
                continue;
            }
            match c.local.as_str() {
                "multiInstanceLoopCharacteristics" | "standardLoopCharacteristics" => self.help(
                    "Q103",
                    c.pos,
                    format!("<{}> (loops and multi-instance) is not supported", c.local),
                    "model the repetition with gateways and flows",
                ),
                "eventDefinitionRef" => self.help(
                    "Q103",
                    c.pos,
                    "<eventDefinitionRef> (shared event definitions) is not supported",
                    "declare the event definition inside the event",
                ),
                l if l.ends_with("EventDefinition") => {}
                l if IGNORED_IN_NODE.contains(&l) => {}
                _ if el.local == "subProcess" => {} // its children are walked as a scope
                l => self.help(
                    "Q103",
                    c.pos,
                    format!("<{l}> inside <{}> is not supported", el.local),
                    "remove it",
                ),
            }
        }
    }

    fn placeholder() -> NodeKind {
        NodeKind::Task(Task {
            kind: TaskKind::PassThrough,
            retry: None,
            timeout: None,
            inputs: Vec::new(),
            outputs: Vec::new(),
        })
    }

    fn node_kind(&mut self, el: &'a Element, idx: NodeIdx) -> NodeKind {
        let local = el.local.as_str();
        let kind = match local {
            "startEvent" => {
                let k = self.start_event(el);
                if k.is_none() {
                    self.meta.refused_roots.push(idx);
                }
                k
            }
            "endEvent" => self.end_event(el),
            "intermediateCatchEvent" => self.catch_event(el),
            "intermediateThrowEvent" => self.throw_event(el),
            "boundaryEvent" => {
                let k = self.boundary_event(el, idx);
                if k.is_none() {
                    self.meta.refused_roots.push(idx);
                }
                k
            }
            l if TASKS.contains(&l) => self.task(el, idx),
            "exclusiveGateway" | "inclusiveGateway" => {
                if let Some(a) = el.attr("default") {
                    self.defaults.push((idx, a));
                }
                Some(if local == "exclusiveGateway" {
                    NodeKind::ExclusiveGateway { default: None }
                } else {
                    NodeKind::InclusiveGateway { default: None }
                })
            }
            "parallelGateway" => Some(NodeKind::ParallelGateway),
            "eventBasedGateway" => self.event_gateway(el),
            "subProcess" => self.sub_process(el),
            "callActivity" => self.call_activity(el),
            other => {
                let what = match other {
                    "scriptTask" => {
                        "scriptTask (qflow runs no scripts; use a serviceTask with q:task)"
                    }
                    "businessRuleTask" => "businessRuleTask (use a serviceTask with q:task)",
                    "complexGateway" => "complexGateway",
                    "adHocSubProcess" => "adHocSubProcess",
                    "transaction" => "transaction sub-process",
                    _ => other,
                };
                self.help(
                    "Q103",
                    el.pos,
                    format!("<{other}> is not supported: {what}"),
                    "replace it with an element of the supported subset (SPEC L2)",
                );
                None
            }
        };
        if !matches!(local, "exclusiveGateway" | "inclusiveGateway") {
            if let Some(a) = el.attr("default") {
                self.defaults.push((idx, a));
            }
        }
        match kind {
            Some(k) => k,
            None => {
                // A refused node is already an error; the graph rules treat it as reachable
                // and not a dead end, so that one refusal does not cascade.
                self.meta.refused.insert(idx);
                Self::placeholder()
            }
        }
    }

    /// The single event definition of an event, refusing several.
    fn event_definition(&mut self, el: &'a Element) -> Result<Option<&'a Element>, ()> {
        let defs: Vec<&Element> = el
            .children
            .iter()
            .filter(|c| c.ns == Ns::Bpmn && c.local.ends_with("EventDefinition"))
            .collect();
        if defs.len() > 1 {
            self.help(
                "Q120",
                defs[1].pos,
                format!("<{}> has more than one event definition", el.local),
                "keep exactly one event definition per event",
            );
            return Err(());
        }
        Ok(defs.first().copied())
    }

    fn unsupported_event(&mut self, el: &Element, def: &Element, what: &str) {
        let trigger = def.local.trim_end_matches("EventDefinition");
        self.help(
            "Q103",
            def.pos,
            format!("a {trigger} {what} (<{}>) is not supported", def.local),
            "use a none, error, terminate, timer or message event as SPEC L2 lists",
        );
        let _ = el;
    }

    fn start_event(&mut self, el: &'a Element) -> Option<NodeKind> {
        match self.event_definition(el).ok()? {
            None => Some(NodeKind::StartEvent),
            Some(d) => {
                self.unsupported_event(el, d, "start event");
                None
            }
        }
    }

    fn end_event(&mut self, el: &'a Element) -> Option<NodeKind> {
        match self.event_definition(el).ok()? {
            None => Some(NodeKind::EndEvent(EndKind::None)),
            Some(d) if d.local == "terminateEventDefinition" => {
                Some(NodeKind::EndEvent(EndKind::Terminate))
            }
            Some(d) if d.local == "errorEventDefinition" => {
                let error = match d.attr("errorRef") {
                    Some(a) => {
                        self.check_error_ref(a);
                        Some(a.value.trim().to_string())
                    }
                    None => None,
                };
                Some(NodeKind::EndEvent(EndKind::Error { error }))
            }
            Some(d) => {
                self.unsupported_event(el, d, "end event");
                None
            }
        }
    }

    fn check_error_ref(&mut self, a: &Attr) -> Option<&'a ErrorDef> {
        let found = self.ctx.errors.get(a.value.trim());
        if found.is_none() {
            self.help(
                "Q112",
                a.pos,
                format!("errorRef `{}` names no declared <error>", a.value),
                "declare <error id=\"…\" errorCode=\"…\"/> under <definitions>, or fix the reference",
            );
        }
        found
    }

    fn message_ref(&mut self, el: &Element) -> Option<String> {
        let Some(a) = el.attr("messageRef") else {
            self.help(
                "Q102",
                el.pos,
                format!("<{}> has no messageRef", el.local),
                "reference a <message> declared under <definitions>",
            );
            return None;
        };
        match self.ctx.messages.get(a.value.trim()) {
            Some(name) => Some(name.clone()),
            None => {
                self.help(
                    "Q113",
                    a.pos,
                    format!("messageRef `{}` names no declared <message>", a.value),
                    "declare <message id=\"…\" name=\"…\"/> under <definitions>, or fix the reference",
                );
                None
            }
        }
    }

    fn catch_event(&mut self, el: &'a Element) -> Option<NodeKind> {
        match self.event_definition(el).ok()? {
            Some(d) if d.local == "timerEventDefinition" => {
                let t = self.timer(d)?;
                Some(NodeKind::IntermediateCatch(CatchTrigger::Timer(t)))
            }
            Some(d) if d.local == "messageEventDefinition" => {
                let name = self.message_ref(d)?;
                Some(NodeKind::IntermediateCatch(CatchTrigger::Message { name }))
            }
            Some(d) => {
                self.unsupported_event(el, d, "intermediate catch event");
                None
            }
            None => {
                self.help(
                    "Q102",
                    el.pos,
                    "an intermediate catch event needs a timer or message event definition",
                    "add <timerEventDefinition> or <messageEventDefinition>",
                );
                None
            }
        }
    }

    fn throw_event(&mut self, el: &'a Element) -> Option<NodeKind> {
        match self.event_definition(el).ok()? {
            // A none intermediate throw event is a milestone marker: it passes through.
            None => Some(Self::placeholder()),
            Some(d) => {
                self.unsupported_event(el, d, "intermediate throw event");
                None
            }
        }
    }

    fn boundary_event(&mut self, el: &'a Element, idx: NodeIdx) -> Option<NodeKind> {
        self.boundary_els.push((idx, el));
        let interrupting = el.value("cancelActivity").map(str::trim) != Some("false");
        let trigger = match self.event_definition(el).ok()? {
            Some(d) if d.local == "timerEventDefinition" => BoundaryTrigger::Timer(self.timer(d)?),
            Some(d) if d.local == "errorEventDefinition" => {
                if !interrupting {
                    self.help(
                        "Q103",
                        el.attr("cancelActivity").map_or(el.pos, |a| a.pos),
                        "a non-interrupting error boundary event is not valid BPMN",
                        "remove cancelActivity=\"false\"",
                    );
                    return None;
                }
                let code = match d.attr("errorRef") {
                    None => None,
                    Some(a) => {
                        let err = self.check_error_ref(a)?;
                        match &err.code {
                            Some(c) => Some(c.clone()),
                            None => {
                                self.help(
                                    "Q102",
                                    a.pos,
                                    format!("error `{}` has no errorCode, so this boundary could never match", err.id),
                                    "add errorCode=\"…\" to the <error>, or drop errorRef to catch every error",
                                );
                                return None;
                            }
                        }
                    }
                };
                BoundaryTrigger::Error { code }
            }
            Some(d) => {
                self.unsupported_event(el, d, "boundary event");
                return None;
            }
            None => {
                self.help(
                    "Q102",
                    el.pos,
                    "a boundary event needs a timer or error event definition",
                    "add <timerEventDefinition> or <errorEventDefinition>",
                );
                return None;
            }
        };
        Some(NodeKind::Boundary(Boundary {
            // Resolved once every node is known; see `resolve_boundaries`.
            attached_to: idx,
            interrupting,
            trigger,
        }))
    }

    fn event_gateway(&mut self, el: &Element) -> Option<NodeKind> {
        if el.value("instantiate") == Some("true")
            || el.value("eventGatewayType") == Some("Parallel")
        {
            self.help(
                "Q103",
                el.pos,
                "an instantiating or parallel event-based gateway is not supported",
                "use an exclusive event-based gateway after a start event",
            );
            return None;
        }
        Some(NodeKind::EventBasedGateway)
    }

    fn sub_process(&mut self, el: &Element) -> Option<NodeKind> {
        if el.value("triggeredByEvent") == Some("true") {
            self.help(
                "Q103",
                el.pos,
                "an event sub-process (triggeredByEvent=\"true\") is not supported",
                "use boundary events on an embedded sub-process instead",
            );
            return None;
        }
        Some(NodeKind::SubProcess)
    }

    fn call_activity(&mut self, el: &'a Element) -> Option<NodeKind> {
        let zeebe = el
            .child(Ns::Bpmn, "extensionElements")
            .and_then(|x| x.child(Ns::Zeebe, "calledElement"))
            .and_then(|c| c.attr("processId"));
        let called = el.attr("calledElement").or(zeebe);
        match called.map(|a| (a, a.value.trim())) {
            Some((a, v)) if v.starts_with('=') => {
                self.help(
                    "Q401",
                    a.pos,
                    "a called element chosen by an expression is not supported",
                    "name the called process directly",
                );
                None
            }
            Some((_, v)) if !v.is_empty() => Some(NodeKind::CallActivity {
                called_element: v.to_string(),
            }),
            _ => {
                self.help(
                    "Q117",
                    el.pos,
                    "the callActivity has no calledElement",
                    "add calledElement=\"<process id>\"",
                );
                None
            }
        }
    }

    // ----- timers -----

    fn timer(&mut self, d: &Element) -> Option<TimerDef> {
        let parts: Vec<&Element> = ["timeDuration", "timeDate", "timeCycle"]
            .iter()
            .filter_map(|n| d.child(Ns::Bpmn, n))
            .collect();
        if parts.len() != 1 {
            self.help(
                "Q207",
                d.pos,
                format!(
                    "a timer needs exactly one of timeDuration, timeDate, timeCycle; found {}",
                    parts.len()
                ),
                "keep exactly one, e.g. <timeDuration>PT30S</timeDuration>",
            );
            return None;
        }
        let p = parts[0];
        let text = p.text.trim();
        if text.is_empty() {
            self.help(
                "Q207",
                p.pos,
                format!("<{}> is empty", p.local),
                "write an ISO-8601 value, e.g. PT30S, 2026-03-01T09:00:00Z or R3/PT10M",
            );
            return None;
        }
        if text.starts_with('=') || text.starts_with("${") || text.starts_with("#{") {
            self.help(
                "Q401",
                p.text_pos,
                format!("a timer computed by an expression (`{text}`) is not supported"),
                "write a literal ISO-8601 value",
            );
            return None;
        }
        let res = match p.local.as_str() {
            "timeDuration" => iso8601::parse_duration(text)
                .map(TimerDef::Duration)
                .map_err(|m| ("Q204", m)),
            "timeDate" => iso8601::parse_date_time(text)
                .map(|epoch_ms| TimerDef::Date { epoch_ms })
                .map_err(|m| ("Q205", m)),
            _ => iso8601::parse_cycle(text)
                .map(|(repetitions, interval)| TimerDef::Cycle {
                    repetitions,
                    interval,
                })
                .map_err(|m| ("Q206", m)),
        };
        match res {
            Ok(t) => Some(t),
            Err((code, m)) => {
                self.help(
                    code,
                    p.text_pos,
                    m,
                    "write an ISO-8601 value, e.g. PT30S, 2026-03-01T09:00:00Z or R3/PT10M",
                );
                None
            }
        }
    }

    // ----- tasks -----

    fn task(&mut self, el: &'a Element, idx: NodeIdx) -> Option<NodeKind> {
        let ext = Extensions::read(self, el);
        let kind = match el.local.as_str() {
            "serviceTask" => self.service_kind(el, &ext)?,
            other => {
                for a in ["task", "channel", "topic"] {
                    if let Some(attr) = el.attr_ns(Ns::Q, a) {
                        self.help(
                            "Q307",
                            attr.pos,
                            format!("q:{a} is only allowed on a serviceTask, not on <{other}>"),
                            "change the element to a serviceTask, or remove the attribute",
                        );
                    }
                }
                self.vendor_runner_on_non_service(el, &ext);
                match other {
                    "userTask" => TaskKind::User,
                    "sendTask" => TaskKind::Send {
                        message: match el.attr("messageRef") {
                            Some(_) => Some(self.message_ref(el)?),
                            None => None,
                        },
                    },
                    "receiveTask" => TaskKind::Receive {
                        message: self.message_ref(el)?,
                    },
                    _ => TaskKind::PassThrough,
                }
            }
        };
        let retry = ext.retry.and_then(|(policy, pos)| {
            let allowed = match &kind {
                TaskKind::Registered { .. } | TaskKind::Channel { .. } => true,
                TaskKind::Pull { .. } => {
                    self.help(
                        "Q304",
                        pos,
                        "q:retry on a pull task is refused: the pull surface has its own retry budget and the two never overlap",
                        "remove q:retry; workers report failures with their own retries count",
                    );
                    false
                }
                other => {
                    self.help(
                        "Q307",
                        pos,
                        format!("q:retry is not supported on a {} task", kind_name(other)),
                        "q:retry applies to serviceTasks with q:task or q:channel",
                    );
                    false
                }
            };
            allowed.then(|| {
                self.meta.retry_pos.insert(idx, pos);
                self.meta.non_retryable.insert(idx, ext.codes.clone());
                policy
            })
        });
        let timeout = ext.timeout.and_then(|(d, pos)| match &kind {
            TaskKind::Registered { .. } | TaskKind::Channel { .. } => Some(d),
            other => {
                self.help(
                    "Q307",
                    pos,
                    format!("q:timeout is not supported on a {} task", kind_name(other)),
                    "use a timer boundary event to bound the wait",
                );
                None
            }
        });
        Some(NodeKind::Task(Task {
            kind,
            retry,
            timeout,
            inputs: ext.inputs,
            outputs: ext.outputs,
        }))
    }

    /// Vendor ways of running work on a task that is not a serviceTask. On a sendTask the
    /// message is sent through qflow's outbox, so the vendor's worker or class is named in
    /// a warning and not used (L8: ignored, never guessed); anywhere else it is refused.
    fn vendor_runner_on_non_service(&mut self, el: &Element, ext: &Extensions) {
        let mut found: Vec<(String, Pos)> = ["class", "delegateExpression", "expression", "type"]
            .iter()
            .filter_map(|a| {
                el.attr_ns(Ns::Camunda, a)
                    .map(|x| (format!("camunda:{a}"), x.pos))
            })
            .collect();
        if let Some((_, pos)) = &ext.zeebe_job {
            found.push(("zeebe:taskDefinition".to_string(), *pos));
        }
        for (what, pos) in found {
            if el.local == "sendTask" {
                self.diags.push(
                    Diagnostic::warning(
                        "Q902",
                        pos,
                        format!("{what} on <sendTask> is ignored: qflow sends the message through its outbox"),
                    )
                    .with_help("to have a worker do the sending, make it a serviceTask with q:topic"),
                );
            } else {
                self.help(
                    "Q401",
                    pos,
                    format!("{what} on <{}> is not supported", el.local),
                    "make it a serviceTask with q:task, q:channel or q:topic",
                );
            }
        }
    }

    fn service_kind(&mut self, el: &'a Element, ext: &Extensions) -> Option<TaskKind> {
        let mut found: Vec<(TaskKind, Pos, &str)> = Vec::new();
        // Whether the author named a way to run at all (even a malformed one): if so,
        // that error is the one to show, not "does not say how it runs".
        let attempted = ["task", "channel", "topic"]
            .iter()
            .any(|a| el.attr_ns(Ns::Q, a).is_some())
            || el.attr_ns(Ns::Camunda, "type").is_some()
            || ext.zeebe_attempted;
        for (a, what) in [
            ("task", "q:task"),
            ("channel", "q:channel"),
            ("topic", "q:topic"),
        ] {
            if let Some(attr) = el.attr_ns(Ns::Q, a) {
                let v = attr.value.trim();
                if v.is_empty() {
                    self.help(
                        "Q102",
                        attr.pos,
                        format!("{what} is empty"),
                        "give the task a name",
                    );
                    continue;
                }
                let name = v.to_string();
                let kind = match a {
                    "task" => TaskKind::Registered { name },
                    "channel" => TaskKind::Channel { name },
                    _ => TaskKind::Pull {
                        topic: name,
                        retries: None,
                    },
                };
                found.push((kind, attr.pos, what));
            }
        }
        let cam_type = el.attr_ns(Ns::Camunda, "type");
        match cam_type.map(|a| a.value.trim()) {
            Some("external") => match el.attr_ns(Ns::Camunda, "topic") {
                Some(t) if !t.value.trim().is_empty() => found.push((
                    TaskKind::Pull {
                        topic: t.value.trim().to_string(),
                        retries: None,
                    },
                    t.pos,
                    "camunda:topic",
                )),
                _ => self.help(
                    "Q102",
                    el.pos,
                    "a camunda:type=\"external\" task has no camunda:topic",
                    "add camunda:topic=\"…\"",
                ),
            },
            Some(other) => self.help(
                "Q401",
                cam_type.map_or(el.pos, |a| a.pos),
                format!("camunda:type=\"{other}\" is not supported"),
                "use q:task, q:channel or q:topic",
            ),
            None => {}
        }
        if let Some((kind, pos)) = ext.zeebe_job.clone() {
            found.push((kind, pos, "zeebe:taskDefinition"));
        }
        match found.len() {
            1 => Some(found.remove(0).0),
            0 if attempted => None,
            0 => {
                let code_ref = ["class", "delegateExpression", "expression"]
                    .iter()
                    .find_map(|a| el.attr_ns(Ns::Camunda, a).map(|x| (a, x.pos)));
                match code_ref {
                    Some((a, pos)) => self.help(
                        "Q114",
                        pos,
                        format!("camunda:{a} names Java code that qflow cannot run"),
                        "add q:task=\"<handler name>\" and register a handler for it",
                    ),
                    None => self.help(
                        "Q114",
                        el.pos,
                        "the serviceTask does not say how it runs",
                        "add q:task=\"<handler name>\" (registered handler), q:channel=\"<channel>\" (request/response) or q:topic=\"<topic>\" (external workers)",
                    ),
                }
                None
            }
            _ => {
                let names: Vec<&str> = found.iter().map(|f| f.2).collect();
                self.help(
                    "Q115",
                    found[1].1,
                    format!(
                        "the serviceTask names more than one way to run: {}",
                        names.join(", ")
                    ),
                    "keep exactly one of q:task, q:channel, q:topic",
                );
                None
            }
        }
    }

    // ----- resolution of references -----

    fn resolve(&mut self) {
        self.resolve_boundaries();
        self.resolve_flows();
        self.resolve_defaults();
    }

    fn resolve_boundaries(&mut self) {
        for (idx, el) in std::mem::take(&mut self.boundary_els) {
            let Some(a) = el.attr("attachedToRef") else {
                self.meta.refused_roots.push(idx);
                self.help(
                    "Q111",
                    el.pos,
                    "the boundary event has no attachedToRef",
                    "attach it to a task, sub-process or call activity",
                );
                continue;
            };
            let host = self.by_id.get(a.value.trim()).copied();
            let host_ok = host.map(|h| {
                matches!(
                    self.nodes[h.0 as usize].kind,
                    NodeKind::Task(_) | NodeKind::SubProcess | NodeKind::CallActivity { .. }
                )
            });
            if host_ok != Some(true) {
                self.meta.refused_roots.push(idx);
            }
            match (host, host_ok) {
                (Some(h), Some(true)) => {
                    let host_scope = self.nodes[h.0 as usize].scope;
                    let node = &mut self.nodes[idx.0 as usize];
                    node.scope = host_scope;
                    if let NodeKind::Boundary(b) = &mut node.kind {
                        b.attached_to = h;
                    }
                }
                (None, _) => self.help(
                    "Q111",
                    a.pos,
                    format!("attachedToRef `{}` names no node", a.value),
                    "attach the boundary event to an existing activity",
                ),
                (Some(_), _) => self.help(
                    "Q111",
                    a.pos,
                    format!(
                        "attachedToRef `{}` is not an activity; boundary events attach to tasks, sub-processes and call activities",
                        a.value
                    ),
                    "attach the boundary event to an activity",
                ),
            }
        }
    }

    fn resolve_flows(&mut self) {
        for (el, scope) in std::mem::take(&mut self.flow_els) {
            check_other_extensions(self, el);
            let Some(id) = el.value("id").map(str::trim).filter(|s| !s.is_empty()) else {
                self.help(
                    "Q102",
                    el.pos,
                    "the sequenceFlow has no id",
                    "add a unique id",
                );
                continue;
            };
            let source = self.flow_end(el, "sourceRef");
            let target = self.flow_end(el, "targetRef");
            let condition = self.condition(el);
            let (Some(source), Some(target)) = (source, target) else {
                continue;
            };
            let (ss, ts) = (
                self.nodes[source.0 as usize].scope,
                self.nodes[target.0 as usize].scope,
            );
            if ss != scope || ts != scope {
                self.help(
                    "Q105",
                    el.pos,
                    format!(
                        "sequence flow `{id}` connects `{}` and `{}` across a sub-process border",
                        self.nodes[source.0 as usize].id, self.nodes[target.0 as usize].id
                    ),
                    "flows stay inside one scope; connect to the sub-process itself instead",
                );
                continue;
            }
            let fi = FlowIdx(self.flows.len() as u32);
            self.nodes[source.0 as usize].outgoing.push(fi);
            self.nodes[target.0 as usize].incoming.push(fi);
            self.flows.push(Flow {
                id: id.to_string(),
                source,
                target,
                condition,
                pos: el.pos,
            });
        }
    }

    fn flow_end(&mut self, el: &Element, attr: &str) -> Option<NodeIdx> {
        let Some(a) = el.attr(attr) else {
            self.help(
                "Q102",
                el.pos,
                format!("the sequenceFlow has no {attr}"),
                "connect both ends of the flow",
            );
            return None;
        };
        let found = self.by_id.get(a.value.trim()).copied();
        if found.is_none() {
            self.help(
                "Q104",
                a.pos,
                format!("{attr} `{}` names no node of this process", a.value),
                "point the flow at an existing node id",
            );
        }
        found
    }

    fn condition(&mut self, flow: &Element) -> Option<Expression> {
        let c = flow.child(Ns::Bpmn, "conditionExpression")?;
        let text = c.text.trim();
        let pos = c.text_pos;
        if text.is_empty() {
            self.help(
                "Q102",
                c.pos,
                "the conditionExpression is empty",
                "write a CEL condition, or remove the element",
            );
            return None;
        }
        let own = c.value("language").map(|l| l.trim().to_ascii_lowercase());
        let inherited = own.is_none() && self.ctx.default_language.is_some();
        let lang = own
            .or_else(|| self.ctx.default_language.clone())
            .unwrap_or_default();
        let is_feel = text.starts_with('=') || lang.contains("feel");
        if text.starts_with("${") || text.starts_with("#{") || lang.contains("juel") {
            self.help(
                "Q202",
                pos,
                format!("`{text}` is a JUEL expression (Camunda 7); qflow conditions are CEL"),
                "rewrite it in CEL, e.g. ${amount > 100} becomes amount > 100",
            );
            return None;
        }
        if !lang.is_empty() && !is_feel && lang != "cel" && !lang.ends_with("/cel") {
            let (at, origin) = match c.attr("language") {
                Some(a) => (a.pos, "condition language"),
                None => (pos, "the file's expressionLanguage (on <definitions>) is"),
            };
            self.help(
                "Q202",
                at,
                format!("{origin} `{lang}`, which qflow does not run; qflow conditions are CEL"),
                if inherited {
                    "remove expressionLanguage from <definitions> and write the conditions in CEL"
                } else {
                    "remove the language attribute and write the condition in CEL"
                },
            );
            return None;
        }
        let source = if is_feel {
            match feel_to_cel(text.strip_prefix('=').unwrap_or(text)) {
                Ok(s) => s,
                Err(m) => {
                    self.help(
                        "Q203",
                        pos,
                        format!("FEEL condition `{text}`: {m}"),
                        "keep to comparisons, and/or/not, literals and variable paths, or write the condition in CEL",
                    );
                    return None;
                }
            }
        } else {
            text.to_string()
        };
        match Expression::compile(&source, pos, self.ctx.opts.max_expr_len) {
            Ok(e) => Some(e),
            Err(e) => {
                // A translated FEEL text has other columns than the file; point at its start.
                let at = if is_feel { pos } else { c.text_file_pos(e.pos) };
                self.help("Q201", at, e.message, "fix the CEL condition");
                None
            }
        }
    }

    fn resolve_defaults(&mut self) {
        let by_flow: BTreeMap<&str, FlowIdx> = self
            .flows
            .iter()
            .enumerate()
            .map(|(i, f)| (f.id.as_str(), FlowIdx(i as u32)))
            .collect();
        let mut found: Vec<(NodeIdx, FlowIdx)> = Vec::new();
        let mut errs: Vec<(&'static str, Pos, String, &'static str)> = Vec::new();
        for (idx, a) in &self.defaults {
            let node = &self.nodes[idx.0 as usize];
            if !matches!(
                node.kind,
                NodeKind::ExclusiveGateway { .. } | NodeKind::InclusiveGateway { .. }
            ) {
                errs.push((
                    "Q110",
                    a.pos,
                    format!(
                        "`{}` has a default flow, but only exclusive and inclusive gateways may",
                        node.id
                    ),
                    "remove the default attribute, or route through an exclusive gateway",
                ));
                continue;
            }
            match by_flow.get(a.value.trim()) {
                Some(f) if self.flows[f.0 as usize].source == *idx => {
                    if self.flows[f.0 as usize].condition.is_some() {
                        errs.push((
                            "Q109",
                            a.pos,
                            format!("the default flow `{}` also has a condition", a.value),
                            "a default flow is taken when no condition holds; remove its condition",
                        ));
                    } else {
                        found.push((*idx, *f));
                    }
                }
                _ => errs.push((
                    "Q109",
                    a.pos,
                    format!(
                        "default `{}` is not an outgoing flow of `{}`",
                        a.value, node.id
                    ),
                    "name one of the gateway's outgoing sequence flows",
                )),
            }
        }
        for (code, pos, msg, help) in errs {
            self.help(code, pos, msg, help);
        }
        for (idx, f) in found {
            match &mut self.nodes[idx.0 as usize].kind {
                NodeKind::ExclusiveGateway { default } | NodeKind::InclusiveGateway { default } => {
                    *default = Some(f)
                }
                _ => {}
            }
        }
    }

    fn finish(self) -> (Process, Meta) {
        (
            Process {
                nodes: self.nodes,
                flows: self.flows,
                by_id: self.by_id,
            },
            self.meta,
        )
    }
}

pub(crate) fn kind_name(k: &TaskKind) -> &'static str {
    match k {
        TaskKind::Registered { .. } => "registered (q:task)",
        TaskKind::Channel { .. } => "channel-call (q:channel)",
        TaskKind::Pull { .. } => "pull (q:topic)",
        TaskKind::User => "user",
        TaskKind::PassThrough => "pass-through",
        TaskKind::Send { .. } => "send",
        TaskKind::Receive { .. } => "receive",
    }
}

/// What a task's `extensionElements` (and vendor attributes) say.
#[derive(Default)]
struct Extensions {
    retry: Option<(RetryPolicy, Pos)>,
    codes: Vec<(String, Pos)>,
    timeout: Option<(DurationMs, Pos)>,
    inputs: Vec<Mapping>,
    outputs: Vec<Mapping>,
    zeebe_job: Option<(TaskKind, Pos)>,
    /// A `zeebe:taskDefinition` was present, valid or not.
    zeebe_attempted: bool,
}

fn camunda_child(pb: &mut ProcessBuilder<'_, '_>, c: &Element) {
    vendor_child(pb, c, "camunda", CAMUNDA_REFUSED);
}

fn zeebe_child(pb: &mut ProcessBuilder<'_, '_>, c: &Element) {
    vendor_child(pb, c, "zeebe", ZEEBE_REFUSED);
}

/// A vendor extension element: refused with a pointer to the qflow way when it would
/// change behaviour (`refused` lists those with their help), ignored with a warning when
/// it would not, silently dropped when it is pure tooling metadata.
fn vendor_child(
    pb: &mut ProcessBuilder<'_, '_>,
    c: &Element,
    prefix: &str,
    refused: &[(&str, &str)],
) {
    if let Some((_, help)) = refused.iter().find(|r| r.0 == c.local) {
        pb.help(
            "Q401",
            c.pos,
            format!("{prefix}:{} is not supported", c.local),
            help,
        );
    } else if !VENDOR_SILENT.contains(&c.local.as_str()) {
        pb.diags.push(Diagnostic::warning(
            "Q902",
            c.pos,
            format!("{prefix}:{} is ignored", c.local),
        ));
    }
}

/// Extensions on anything that is not a task (events, gateways, sub-processes, flows,
/// the process): `q:` has nothing to say there, and vendor behaviour is refused or
/// ignored exactly as on tasks.
fn check_other_extensions(pb: &mut ProcessBuilder<'_, '_>, el: &Element) {
    for a in el.attrs.iter().filter(|a| a.ns == Ns::Q) {
        pb.help(
            "Q307",
            a.pos,
            format!("q:{} is not supported on <{}>", a.local, el.local),
            "q:task, q:channel and q:topic belong on a serviceTask",
        );
    }
    let Some(x) = el.child(Ns::Bpmn, "extensionElements") else {
        return;
    };
    for c in &x.children {
        match c.ns {
            Ns::Q => pb.help(
                "Q307",
                c.pos,
                format!("q:{} is not supported on <{}>", c.local, el.local),
                "q:retry, q:timeout, q:input and q:output belong in a task's extensionElements",
            ),
            Ns::Camunda => camunda_child(pb, c),
            Ns::Zeebe => zeebe_child(pb, c),
            _ => {}
        }
    }
}

/// Camunda 7 extensions that carry behaviour qflow would silently drop.
const CAMUNDA_REFUSED: &[(&str, &str)] = &[
    ("inputOutput", "use q:input / q:output mappings"),
    (
        "executionListener",
        "listeners run code qflow does not have; remove it",
    ),
    (
        "taskListener",
        "listeners run code qflow does not have; remove it",
    ),
    ("connector", "use q:channel for outbound calls"),
    ("field", "field injection configures Java code; remove it"),
    (
        "in",
        "call activity variable passing is not supported; remove it",
    ),
    (
        "out",
        "call activity variable passing is not supported; remove it",
    ),
    ("script", "qflow runs no scripts"),
    ("failedJobRetryTimeCycle", "use <q:retry> for retries"),
    (
        "errorEventDefinition",
        "map errors with BPMN error boundaries",
    ),
];

/// Zeebe extensions that carry behaviour qflow would silently drop.
const ZEEBE_REFUSED: &[(&str, &str)] = &[
    ("ioMapping", "use q:input / q:output mappings"),
    (
        "executionListeners",
        "listeners run code qflow does not have; remove them",
    ),
    (
        "taskListeners",
        "listeners run code qflow does not have; remove them",
    ),
    ("script", "qflow runs no scripts"),
    ("calledDecision", "qflow does not evaluate DMN"),
    ("loopCharacteristics", "multi-instance is not supported"),
];

/// Vendor extensions with no effect on execution here; ignored without a word.
const VENDOR_SILENT: &[&str] = &[
    "properties",
    "property",
    "formData",
    "formField",
    "formDefinition",
    "userTask",
    "assignmentDefinition",
    "taskSchedule",
    "priorityDefinition",
    "versionTag",
    "calledElement",
    "taskDefinition",
    "potentialStarter",
];

impl Extensions {
    fn read(pb: &mut ProcessBuilder<'_, '_>, el: &Element) -> Extensions {
        let mut ext = Extensions::default();
        for a in &el.attrs {
            if a.ns == Ns::Q && !matches!(a.local.as_str(), "task" | "channel" | "topic") {
                pb.help(
                    "Q309",
                    a.pos,
                    format!("unknown attribute q:{}", a.local),
                    "the q: attributes on a task are q:task, q:channel and q:topic",
                );
            }
        }
        let Some(x) = el.child(Ns::Bpmn, "extensionElements") else {
            return ext;
        };
        for c in &x.children {
            match c.ns {
                Ns::Q => ext.read_q(pb, c),
                Ns::Camunda => camunda_child(pb, c),
                Ns::Zeebe => ext.read_zeebe(pb, c),
                _ => {}
            }
        }
        ext
    }

    fn read_zeebe(&mut self, pb: &mut ProcessBuilder<'_, '_>, c: &Element) {
        if let Some((_, help)) = ZEEBE_REFUSED.iter().find(|r| r.0 == c.local) {
            pb.help(
                "Q401",
                c.pos,
                format!("zeebe:{} is not supported", c.local),
                help,
            );
            return;
        }
        if c.local == "taskDefinition" {
            let topic = c.value("type").map(str::trim).unwrap_or_default();
            if topic.is_empty() || topic.starts_with('=') {
                pb.help(
                    "Q401",
                    c.pos,
                    "zeebe:taskDefinition needs a literal type",
                    "write type=\"<job type>\"",
                );
                return;
            }
            let retries = match c.attr("retries") {
                None => None,
                Some(a) => match a.value.trim().parse::<u32>() {
                    Ok(n) => Some(n),
                    Err(_) => {
                        pb.help(
                            "Q401",
                            a.pos,
                            format!("zeebe retries `{}` is not a whole number", a.value),
                            "write a literal count, e.g. retries=\"3\"",
                        );
                        return;
                    }
                },
            };
            self.zeebe_job = Some((
                TaskKind::Pull {
                    topic: topic.to_string(),
                    retries,
                },
                c.pos,
            ));
        }
    }

    fn read_q(&mut self, pb: &mut ProcessBuilder<'_, '_>, c: &Element) {
        match c.local.as_str() {
            "retry" => {
                if self.retry.is_some() {
                    pb.help("Q308", c.pos, "q:retry appears twice", "keep one q:retry");
                    return;
                }
                if let Some(r) = parse_retry(pb, c, &mut self.codes) {
                    self.retry = Some((r, c.pos));
                }
            }
            "timeout" => {
                if self.timeout.is_some() {
                    pb.help(
                        "Q308",
                        c.pos,
                        "q:timeout appears twice",
                        "keep one q:timeout",
                    );
                    return;
                }
                check_q_attrs(pb, c, &["duration"]);
                match c.attr("duration") {
                    None => pb.help(
                        "Q102",
                        c.pos,
                        "q:timeout has no duration",
                        "write <q:timeout duration=\"PT30S\"/>",
                    ),
                    Some(a) => match iso8601::parse_duration(&a.value) {
                        Ok(d) if d.0 > 0 => self.timeout = Some((d, c.pos)),
                        Ok(_) => pb.help(
                            "Q301",
                            a.pos,
                            "q:timeout duration must be longer than zero",
                            "write a positive duration, e.g. PT30S",
                        ),
                        Err(m) => {
                            pb.help("Q204", a.pos, m, "write an ISO-8601 duration, e.g. PT30S")
                        }
                    },
                }
            }
            "input" | "output" => {
                check_q_attrs(pb, c, &["target", "source"]);
                if let Some(m) = parse_mapping(pb, c) {
                    if c.local == "input" {
                        self.inputs.push(m);
                    } else {
                        self.outputs.push(m);
                    }
                }
            }
            other => pb.help(
                "Q309",
                c.pos,
                format!("unknown element q:{other}"),
                "the q: elements are retry, timeout, input and output",
            ),
        }
    }
}

fn check_q_attrs(pb: &mut ProcessBuilder<'_, '_>, c: &Element, known: &[&str]) {
    for a in &c.attrs {
        if !(a.ns == Ns::None && known.contains(&a.local.as_str())) {
            pb.help(
                "Q309",
                a.pos,
                format!("unknown attribute `{}` on q:{}", a.local, c.local),
                &format!("the attributes of q:{} are: {}", c.local, known.join(", ")),
            );
        }
    }
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Where an attribute's value starts, assuming `name="value"` without spaces around `=`.
fn value_pos(a: &Attr, qualified_len: usize) -> Pos {
    Pos {
        line: a.pos.line,
        col: a.pos.col + qualified_len as u32 + 2,
    }
}

fn parse_mapping(pb: &mut ProcessBuilder<'_, '_>, c: &Element) -> Option<Mapping> {
    let target = match c.attr("target") {
        Some(a) if is_identifier(a.value.trim()) => a.value.trim().to_string(),
        Some(a) => {
            pb.help(
                "Q208",
                a.pos,
                format!("mapping target `{}` is not a variable name", a.value),
                "use letters, digits and _ (not starting with a digit)",
            );
            return None;
        }
        None => {
            pb.help(
                "Q208",
                c.pos,
                format!("q:{} has no target", c.local),
                "add target=\"<variable>\"",
            );
            return None;
        }
    };
    let Some(src) = c.attr("source") else {
        pb.help(
            "Q208",
            c.pos,
            format!("q:{} has no source", c.local),
            "add source=\"<CEL expression>\"",
        );
        return None;
    };
    match Expression::compile(
        src.value.trim(),
        value_pos(src, "source".len()),
        pb.ctx.opts.max_expr_len,
    ) {
        Ok(source) => Some(Mapping { target, source }),
        Err(e) => {
            pb.help("Q201", e.pos, e.message, "fix the CEL expression");
            None
        }
    }
}

fn parse_retry(
    pb: &mut ProcessBuilder<'_, '_>,
    c: &Element,
    codes: &mut Vec<(String, Pos)>,
) -> Option<RetryPolicy> {
    check_q_attrs(
        pb,
        c,
        &[
            "maxAttempts",
            "initialInterval",
            "backoffMultiplier",
            "maxInterval",
            "jitter",
            "nonRetryableCodes",
            "maxElapsed",
        ],
    );
    let mut p = RetryPolicy::default();
    let mut ok = true;
    let mut bad = |pb: &mut ProcessBuilder<'_, '_>, code, a: &Attr, m: String, h: &str| {
        pb.help(code, a.pos, m, h);
        ok = false;
    };
    if let Some(a) = c.attr("maxAttempts") {
        match a.value.trim().parse::<u32>() {
            Ok(n) if (1..=1000).contains(&n) => {
                p.max_attempts = std::num::NonZeroU32::new(n).expect("checked above")
            }
            _ => bad(
                pb,
                "Q301",
                a,
                format!(
                    "maxAttempts `{}` must be a whole number from 1 to 1000",
                    a.value
                ),
                "maxAttempts counts executions including the first, e.g. 3",
            ),
        }
    }
    let duration = |pb: &mut ProcessBuilder<'_, '_>, name: &str| -> Option<Option<DurationMs>> {
        let a = c.attr(name)?;
        match iso8601::parse_duration(&a.value) {
            Ok(d) if d.0 > 0 => Some(Some(d)),
            Ok(_) => {
                pb.help(
                    "Q301",
                    a.pos,
                    format!("{name} must be longer than zero"),
                    "write a positive duration, e.g. PT1S",
                );
                Some(None)
            }
            Err(m) => {
                pb.help("Q204", a.pos, m, "write an ISO-8601 duration, e.g. PT1S");
                Some(None)
            }
        }
    };
    let set = |v: Option<Option<DurationMs>>, slot: &mut DurationMs, ok: &mut bool| match v {
        Some(Some(d)) => *slot = d,
        Some(None) => *ok = false,
        None => {}
    };
    let initial = duration(pb, "initialInterval");
    set(initial, &mut p.initial_interval, &mut ok);
    let max = duration(pb, "maxInterval");
    set(max, &mut p.max_interval, &mut ok);
    match duration(pb, "maxElapsed") {
        Some(Some(d)) => p.max_elapsed = Some(d),
        Some(None) => ok = false,
        None => {}
    }
    if let Some(a) = c.attr("backoffMultiplier") {
        match parse_milli(a.value.trim()) {
            Some(m) if (1000..=100_000).contains(&m) => p.multiplier_milli = m,
            _ => {
                pb.help(
                    "Q301",
                    a.pos,
                    format!("backoffMultiplier `{}` must be a decimal from 1 to 100 (at most 3 decimals)", a.value),
                    "e.g. backoffMultiplier=\"2\" or \"1.5\"",
                );
                ok = false;
            }
        }
    }
    if let Some(a) = c.attr("jitter") {
        match a.value.trim() {
            "full" => p.jitter = Jitter::Full,
            "none" => p.jitter = Jitter::None,
            other => {
                pb.help(
                    "Q301",
                    a.pos,
                    format!("jitter `{other}` must be \"full\" or \"none\""),
                    "write jitter=\"full\" or jitter=\"none\"",
                );
                ok = false;
            }
        }
    }
    if let Some(a) = c.attr("nonRetryableCodes") {
        for code in a.value.split_whitespace() {
            p.non_retryable_codes.push(code.to_string());
            codes.push((code.to_string(), a.pos));
        }
    }
    if ok && p.initial_interval > p.max_interval {
        let at = c.attr("initialInterval").map_or(c.pos, |a| a.pos);
        pb.help(
            "Q302",
            at,
            format!(
                "initialInterval ({} ms) is larger than maxInterval ({} ms{})",
                p.initial_interval.0,
                p.max_interval.0,
                if c.attr("maxInterval").is_none() {
                    ", the default"
                } else {
                    ""
                }
            ),
            "make initialInterval at most maxInterval",
        );
        ok = false;
    }
    ok.then_some(p)
}

/// `"2"` → 2000, `"1.5"` → 1500; at most three decimals, no sign, no exponent.
fn parse_milli(s: &str) -> Option<u32> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty()
        || int.len() > 6
        || frac.len() > 3
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let int: u32 = int.parse().ok()?;
    let frac: u32 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<3}").parse().ok()?
    };
    int.checked_mul(1000)?.checked_add(frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiplier_parses_as_thousandths() {
        assert_eq!(parse_milli("2"), Some(2000));
        assert_eq!(parse_milli("1.5"), Some(1500));
        assert_eq!(parse_milli("1.25"), Some(1250));
        assert_eq!(parse_milli("1.0005"), None);
        assert_eq!(parse_milli("-2"), None);
        assert_eq!(parse_milli("2e3"), None);
        assert_eq!(parse_milli(""), None);
    }
}
