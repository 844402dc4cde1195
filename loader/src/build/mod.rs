//! Element tree → definition model: which elements are supported (L1, L2), task kinds and
//! `q:` extensions (L4, L5), vendor dialects (L8), conditions and mappings compiled (L3).
//!
//! Every element is either mapped, deliberately ignored (diagram-only artefacts), or
//! refused with a positioned diagnostic — nothing is skipped silently and nothing is
//! guessed. A refused node still gets a placeholder in the graph, so that the graph rules
//! report real problems rather than a cascade of "unknown node" errors. A definition with
//! any error is never handed out (the caller discards it).
//!
//! The work is split by concern: this module holds the entry point, the per-process
//! [`ProcessBuilder`] with its element walk, the id checks and the `<error>` /
//! `<message>` collection; [`events`] maps events and timers, [`tasks`] task kinds,
//! sub-processes and call activities, [`flows`] sequence flows, conditions, gateways and
//! default flows, [`vendor`] the Camunda and Zeebe dialects (with [`io`], their
//! input/output mappings), and [`extensions`] the `q:` extensions of a task.

mod assignment;
mod events;
mod extensions;
mod flows;
mod io;
mod listeners;
mod multi;
mod tasks;
mod vendor;

use std::collections::{BTreeMap, BTreeSet};

use crate::diag::Diagnostic;
use crate::expr::Expression;
use crate::model::*;
use crate::xml::{Attr, Document, Element, Ns};
use crate::LoadOptions;

use vendor::check_other_extensions;

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
    /// Every event sub-process node (`triggeredByEvent="true"`), well-formed or not: the
    /// graph rules neither ask it for flows nor for a none start event.
    pub event_subs: std::collections::BTreeSet<NodeIdx>,
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

/// Camunda 7's ways to bind an element to Java code (qflow runs it as a pull task on a
/// derived topic, `tasks::delegate_kind`).
pub(super) const JAVA_BINDINGS: [&str; 3] = ["class", "delegateExpression", "expression"];

/// Camunda 7's ways to have an element's work done elsewhere: an external task
/// (`camunda:type`) or a Java binding.
pub(super) const CAMUNDA_WORKER_ATTRS: [&str; 4] =
    ["type", "class", "delegateExpression", "expression"];

/// The first Java binding on `el` (in [`JAVA_BINDINGS`] order), with its attribute.
pub(super) fn java_binding(el: &Element) -> Option<(&'static str, &Attr)> {
    JAVA_BINDINGS
        .into_iter()
        .find_map(|a| el.attr_ns(Ns::Camunda, a).map(|x| (a, x)))
}

/// The elements read as [`Task`]s (their extensions are read by `Extensions::read`).
pub(super) const TASKS: &[&str] = &[
    "task",
    "manualTask",
    "serviceTask",
    "userTask",
    "sendTask",
    "receiveTask",
    "scriptTask",
    "businessRuleTask",
    "callActivity",
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
    let escalations = collect_escalations(root);
    let signals = collect_signals(root);
    let correlation_keys = collect_correlation_keys(root, opts, diags);

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
    check_marks(&chosen, diags);
    // Zeebe execution listeners become pull tasks on the token's path (`listeners`), in a
    // copy of each process built.
    let rewritten: Vec<Element> = if listeners::any(root) {
        let mut rewriter = listeners::Rewriter::new(root);
        chosen.iter().map(|p| rewriter.process(p, diags)).collect()
    } else {
        Vec::new()
    };
    let chosen: Vec<&Element> = if rewritten.is_empty() {
        chosen
    } else {
        rewritten.iter().collect()
    };
    let ctx = Ctx {
        opts,
        errors: &errors,
        messages: &messages,
        escalations: &escalations,
        signals: &signals,
        platform: Platform::of(root),
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
            let waits_for_signals = process.nodes.iter().any(|n| {
                matches!(
                    n.kind,
                    NodeKind::IntermediateCatch(CatchTrigger::Signal { .. })
                        | NodeKind::Boundary(Boundary {
                            trigger: BoundaryTrigger::Signal { .. },
                            ..
                        })
                )
            }) || process.event_sub_processes.iter().any(|e| {
                matches!(
                    process.start_trigger(e.start),
                    Some(StartTrigger::Signal { .. })
                )
            });
            Built {
                def: Definition {
                    id: p.value("id").unwrap_or_default().to_string(),
                    name: p.value("name").map(str::to_string),
                    content_hash: content_hash.to_string(),
                    process,
                    errors: errors.clone(),
                    messages: messages.clone(),
                    correlation_keys: correlation_keys.clone(),
                    waits_for_signals,
                    initiator: p
                        .children
                        .iter()
                        .filter(|c| c.local == "startEvent")
                        .find_map(|c| c.attr_ns(Ns::Camunda, "initiator"))
                        .map(|a| a.value.trim().to_owned())
                        .filter(|v| !v.is_empty()),
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

/// Refuses a flow node or sequence flow whose id holds `~` (Q137): no XML id may hold
/// it, and qflow names the nodes it adds beside an element with it
/// (`listeners::MARK`), telling them apart by name.
fn check_marks(processes: &[&Element], diags: &mut Vec<Diagnostic>) {
    fn walk(el: &Element, diags: &mut Vec<Diagnostic>) {
        for c in &el.children {
            if c.ns != Ns::Bpmn || !FLOW_NODES.contains(&c.local.as_str()) {
                continue;
            }
            if let Some(a) = c.attr("id").filter(|a| listeners::holds_mark(&a.value)) {
                diags.push(
                    Diagnostic::error(
                        "Q137",
                        a.pos,
                        format!(
                            "the id `{}` holds `~`, which no XML id may hold",
                            a.value.trim()
                        ),
                    )
                    .with_help(
                        "rename it with letters, digits, `_`, `-` and `.`: qflow names the \
                         tasks it adds beside an element (execution listeners) with `~`",
                    ),
                );
            }
            walk(c, diags);
        }
    }
    for p in processes {
        walk(p, diags);
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

/// Escalation id → its `escalationCode` (trimmed; `None` when absent or empty).
fn collect_escalations(root: &Element) -> BTreeMap<String, Option<String>> {
    root.children_named(Ns::Bpmn, "escalation")
        .filter_map(|e| {
            let code = e
                .value("escalationCode")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_string);
            Some((e.value("id")?.to_string(), code))
        })
        .collect()
}

/// Signal id → name; a signal without a name is known by its id.
fn collect_signals(root: &Element) -> BTreeMap<String, String> {
    root.children_named(Ns::Bpmn, "signal")
        .filter_map(|m| {
            let id = m.value("id")?.to_string();
            let name = m
                .value("name")
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .unwrap_or(&id)
                .to_string();
            Some((id, name))
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

/// Message name → the expression its correlation key is evaluated from when a
/// subscription opens: `q:correlationKey="expr"` (CEL) on the `<message>`, or Zeebe's
/// `<zeebe:subscription correlationKey="=expr"/>` in its extension elements (the FEEL
/// subset that maps onto CEL). Two declarations of one name must agree.
fn collect_correlation_keys(
    root: &Element,
    opts: &LoadOptions,
    diags: &mut Vec<Diagnostic>,
) -> BTreeMap<String, Expression> {
    let mut keys: BTreeMap<String, (Expression, Pos)> = BTreeMap::new();
    for m in root.children_named(Ns::Bpmn, "message") {
        let Some(id) = m.value("id") else { continue };
        let name = m
            .value("name")
            .filter(|n| !n.trim().is_empty())
            .unwrap_or(id);
        let q = m.attr_ns(Ns::Q, "correlationKey");
        let zeebe = m
            .child(Ns::Bpmn, "extensionElements")
            .and_then(|x| x.child(Ns::Zeebe, "subscription"))
            .and_then(|s| s.attr("correlationKey"));
        for a in &m.attrs {
            if a.ns == Ns::Q && a.local != "correlationKey" {
                diags.push(
                    Diagnostic::error("Q309", a.pos, format!("unknown attribute q:{}", a.local))
                        .with_help("the q: attribute on a <message> is q:correlationKey"),
                );
            }
        }
        let (source, pos, feel) = match (q, zeebe) {
            (Some(a), Some(z)) => {
                diags.push(
                    Diagnostic::error(
                        "Q312",
                        z.pos,
                        format!("message `{name}` has both q:correlationKey and a zeebe:subscription correlationKey"),
                    )
                    .with_help(format!("keep one of them (q:correlationKey is at {})", a.pos)),
                );
                continue;
            }
            (Some(a), None) => (a.value.trim(), a.pos, false),
            (None, Some(z)) => (z.value.trim(), z.pos, true),
            (None, None) => continue,
        };
        let cel = if feel {
            match crate::feel::feel_to_cel(source.strip_prefix('=').unwrap_or(source)) {
                Ok(c) => c,
                Err(why) => {
                    diags.push(
                        Diagnostic::error(
                            "Q203",
                            pos,
                            format!("FEEL correlation key `{source}`: {why}"),
                        )
                        .with_help(
                            "keep to literals and variable paths, or write q:correlationKey in CEL",
                        ),
                    );
                    continue;
                }
            }
        } else {
            source.to_string()
        };
        let expr = match Expression::compile(&cel, pos, opts.max_expr_len) {
            Ok(e) => e,
            Err(e) => {
                diags.push(
                    Diagnostic::error(
                        e.code,
                        pos,
                        format!("correlation key of message `{name}`: {}", e.message),
                    )
                    .with_help("fix the CEL expression; it must give a string or an integer"),
                );
                continue;
            }
        };
        match keys.get(name) {
            Some((other, at)) if other.source() != expr.source() => diags.push(
                Diagnostic::error(
                    "Q312",
                    pos,
                    format!("message `{name}` is declared with two correlation keys (the other at {at})"),
                )
                .with_help("give both declarations the same correlation key, or different names"),
            ),
            Some(_) => {}
            None => {
                keys.insert(name.to_string(), (expr, pos));
            }
        }
    }
    keys.into_iter().map(|(n, (e, _))| (n, e)).collect()
}

struct Ctx<'a> {
    opts: &'a LoadOptions,
    /// `<definitions expressionLanguage>`: the language of conditions that name none.
    default_language: Option<String>,
    errors: &'a BTreeMap<String, ErrorDef>,
    messages: &'a BTreeMap<String, String>,
    /// Escalation id → its `escalationCode`, if it declares one.
    escalations: &'a BTreeMap<String, Option<String>>,
    /// Signal id → its name.
    signals: &'a BTreeMap<String, String>,
    /// The engine the file was drawn for, when Camunda Modeler recorded it.
    platform: Option<Platform>,
}

/// The engine a file was drawn for, as Camunda Modeler records it on `<definitions>`
/// (`modeler:executionPlatform="Camunda Platform"` or `"Camunda Cloud"`). It settles
/// which dialect's worker binding runs a task that carries one of each (a model kept for
/// both engines): the other engine's binding is not used, and a note says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Platform {
    /// Camunda 7: `camunda:` bindings run.
    Camunda7,
    /// Camunda 8 (Zeebe): `zeebe:taskDefinition` runs.
    Camunda8,
}

impl Platform {
    fn of(root: &Element) -> Option<Platform> {
        match root.attr_ns(Ns::Modeler, "executionPlatform")?.value.trim() {
            "Camunda Platform" => Some(Platform::Camunda7),
            "Camunda Cloud" => Some(Platform::Camunda8),
            _ => None,
        }
    }

    /// How the file says it, for notes.
    pub(crate) fn attribute(self) -> &'static str {
        match self {
            Platform::Camunda7 => "modeler:executionPlatform=\"Camunda Platform\"",
            Platform::Camunda8 => "modeler:executionPlatform=\"Camunda Cloud\"",
        }
    }
}

struct ProcessBuilder<'a, 'd> {
    ctx: &'a Ctx<'a>,
    diags: &'d mut Vec<Diagnostic>,
    nodes: Vec<Node>,
    by_id: crate::model::NodeIds,
    flow_els: Vec<(&'a Element, Option<NodeIdx>)>,
    boundary_els: Vec<(NodeIdx, &'a Element)>,
    /// Link throw and catch events with their `<linkEventDefinition>`, paired by
    /// `resolve_links`.
    link_els: Vec<(NodeIdx, &'a Element)>,
    /// Link events refused for a missing name (see `resolve_links`).
    nameless_links: Vec<NodeIdx>,
    defaults: Vec<(NodeIdx, &'a Attr)>,
    flows: Vec<Flow>,
    /// Vendor mappings on events (`io`), by node.
    event_mappings: BTreeMap<NodeIdx, EventMappings>,
    /// Zeebe mappings on embedded sub-processes, by node (`io::event_io`).
    sub_process_mappings: BTreeMap<NodeIdx, EventMappings>,
    /// The start events read inside event sub-processes: (sub-process, start,
    /// interrupting), in document order (`events::event_start`).
    event_starts: Vec<(NodeIdx, NodeIdx, bool)>,
    /// The multi-instance activities read (`multi`), by node; their inner nodes are
    /// added after validation (`model::expand_multi_instances`).
    multi: BTreeMap<NodeIdx, MultiInstance>,
    /// The `<association>` elements of every scope, read for the compensation boundaries
    /// they link to handlers (`events::resolve_compensations`).
    association_els: Vec<&'a Element>,
    /// The activities marked `isForCompensation="true"`.
    for_compensation: BTreeSet<NodeIdx>,
    /// Compensation throw and end events with their event definition, whose
    /// `activityRef` is resolved once every node is known.
    compensation_throws: Vec<(NodeIdx, &'a Element)>,
    compensations: BTreeMap<NodeIdx, Compensation>,
    /// The ad-hoc sub-processes read (`tasks::ad_hoc_sub_process`), by node.
    ad_hocs: BTreeMap<NodeIdx, AdHoc>,
    /// Activities' default flows (`flows::resolve_defaults`).
    activity_defaults: BTreeMap<NodeIdx, FlowIdx>,
    /// The conditional events read (`events::conditional`), in document order.
    conditionals: Vec<NodeIdx>,
    /// The first Java binding seen on each derived pull topic (`tasks::delegate_kind`), to
    /// warn when two different bindings of the process share one.
    delegate_topics: BTreeMap<String, String>,
    meta: Meta,
}

impl<'a, 'd> ProcessBuilder<'a, 'd> {
    fn new(ctx: &'a Ctx<'a>, diags: &'d mut Vec<Diagnostic>) -> Self {
        ProcessBuilder {
            ctx,
            diags,
            nodes: Vec::new(),
            by_id: crate::model::NodeIds::default(),
            flow_els: Vec::new(),
            boundary_els: Vec::new(),
            link_els: Vec::new(),
            nameless_links: Vec::new(),
            defaults: Vec::new(),
            flows: Vec::new(),
            event_mappings: BTreeMap::new(),
            sub_process_mappings: BTreeMap::new(),
            event_starts: Vec::new(),
            multi: BTreeMap::new(),
            association_els: Vec::new(),
            for_compensation: BTreeSet::new(),
            compensation_throws: Vec::new(),
            compensations: BTreeMap::new(),
            ad_hocs: BTreeMap::new(),
            activity_defaults: BTreeMap::new(),
            conditionals: Vec::new(),
            delegate_topics: BTreeMap::new(),
            meta: Meta::default(),
        }
    }

    fn help(&mut self, code: &'static str, pos: Pos, msg: impl Into<String>, help: &str) {
        self.diags
            .push(Diagnostic::error(code, pos, msg).with_help(help));
    }

    /// A reference looked up: `found` as it is, after reporting it as an error when it
    /// named nothing (`msg` is built only then).
    fn reported_if_none<T>(
        &mut self,
        found: Option<T>,
        code: &'static str,
        pos: Pos,
        msg: impl FnOnce() -> String,
        help: &str,
    ) -> Option<T> {
        if found.is_none() {
            self.help(code, pos, msg(), help);
        }
        found
    }

    fn walk_scope(&mut self, container: &'a Element, scope: Option<NodeIdx>) {
        for child in &container.children {
            if child.ns != Ns::Bpmn {
                continue;
            }
            let local = child.local.as_str();
            if local == "sequenceFlow" {
                self.flow_els.push((child, scope));
            } else if local == "association" {
                self.association_els.push(child);
            } else if FLOW_NODES.contains(&local) {
                self.add_node(child, scope);
            } else if scope.is_some()
                && (IGNORED_IN_NODE.contains(&local)
                    || local.ends_with("LoopCharacteristics")
                    || (local == "completionCondition" && container.local == "adHocSubProcess"))
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
        let idx = NodeIdx::at(self.nodes.len());
        self.check_node_children(el, idx);
        if !TASKS.contains(&el.local.as_str()) && worker_message_definition(el).is_none() {
            check_other_extensions(self, el);
        }
        let kind = self.node_kind(el, idx, scope);
        self.nodes.push(Node {
            id: id.clone(),
            name: el.value("name").map(str::to_string),
            pos: el.pos,
            element: FLOW_NODES
                .iter()
                .find(|e| **e == el.local)
                .copied()
                .unwrap_or(""),
            scope,
            kind,
            outgoing: Vec::new(),
            incoming: Vec::new(),
        });
        self.by_id.insert_first(id.clone(), idx);
        // A refused sub-process is not walked: its content would only add noise to the
        // one error that matters.
        let sub = matches!(el.local.as_str(), "subProcess" | "adHocSubProcess");
        if sub && !self.meta.refused.contains(&idx) {
            self.walk_scope(el, Some(idx));
            if el.local == "adHocSubProcess" {
                self.check_ad_hoc_inside(el, idx);
            }
            if self.meta.event_subs.contains(&idx) {
                self.check_event_starts(el, &id);
            }
        }
    }

    /// An event sub-process has exactly one start event (its trigger is read by
    /// `events::event_start`).
    fn check_event_starts(&mut self, el: &Element, id: &str) {
        let starts: Vec<&Element> = el.children_named(Ns::Bpmn, "startEvent").collect();
        match starts.as_slice() {
            [] => self.help(
                "Q128",
                el.pos,
                format!("event sub-process `{id}` has no start event"),
                "add one start event with a timer, message, signal, error or escalation event definition",
            ),
            [_] => {}
            [_, second, ..] => self.help(
                "Q128",
                second.pos,
                format!("event sub-process `{id}` has more than one start event"),
                "keep exactly one start event; use another event sub-process for another trigger",
            ),
        }
    }

    /// Reads multi-instance markers and `isForCompensation`; refuses other loop markers
    /// and unknown BPMN children.
    fn check_node_children(&mut self, el: &Element, idx: NodeIdx) {
        if el.value("isForCompensation").map(str::trim) == Some("true") {
            self.for_compensation.insert(idx);
        }
        for c in &el.children {
            if c.ns != Ns::Bpmn {
                continue;
            }
            match c.local.as_str() {
                "multiInstanceLoopCharacteristics" => self.multi_instance(el, c, idx),
                "standardLoopCharacteristics" => self.help(
                    "Q103",
                    c.pos,
                    "<standardLoopCharacteristics> (a standard loop) is not supported",
                    "model the repetition with gateways and flows, or use multiInstanceLoopCharacteristics isSequential=\"true\"",
                ),
                "eventDefinitionRef" => self.help(
                    "Q103",
                    c.pos,
                    "<eventDefinitionRef> (shared event definitions) is not supported",
                    "declare the event definition inside the event",
                ),
                l if l.ends_with("EventDefinition") => {}
                l if IGNORED_IN_NODE.contains(&l) => {}
                // Their children are walked as a scope.
                _ if matches!(el.local.as_str(), "subProcess" | "adHocSubProcess") => {}
                // A script task's foreign script is refused by the task itself, with the
                // way to write it in CEL.
                "script" if el.local == "scriptTask" => {}
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
            respond: false,
            mapping_style: MappingStyle::Q,
            headers: Vec::new(),
            delegate: None,
        })
    }

    fn node_kind(&mut self, el: &'a Element, idx: NodeIdx, scope: Option<NodeIdx>) -> NodeKind {
        let local = el.local.as_str();
        let kind = match local {
            "startEvent" => {
                let k = self.start_event(el, idx, scope);
                if k.is_none() {
                    self.meta.refused_roots.push(idx);
                }
                k
            }
            "endEvent" | "intermediateThrowEvent" if worker_message_definition(el).is_some() => {
                self.task(el, idx)
            }
            "endEvent" => self.end_event(el, idx),
            "intermediateCatchEvent" => self.catch_event(el, idx),
            "intermediateThrowEvent" => self.throw_event(el, idx),
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
            "subProcess" => self.sub_process(el, idx),
            "adHocSubProcess" => self.ad_hoc_sub_process(el, idx),
            other => {
                let what = match other {
                    "complexGateway" => "complexGateway",
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

    // ----- resolution of references -----

    /// Once every node is known: boundary hosts (`events`), then flow ends and conditions,
    /// then link pairs (`events`), then gateway defaults (`flows`).
    fn resolve(&mut self) {
        self.resolve_boundaries();
        self.resolve_flows();
        self.resolve_links();
        self.resolve_defaults();
        self.resolve_compensations();
    }

    fn finish(self) -> (Process, Meta) {
        // An event sub-process with several starts was refused (Q128); only one with
        // exactly one is listed.
        let mut count: BTreeMap<NodeIdx, usize> = BTreeMap::new();
        for (esp, ..) in &self.event_starts {
            *count.entry(*esp).or_default() += 1;
        }
        let event_sub_processes = self
            .event_starts
            .iter()
            .filter(|(esp, ..)| count.get(esp) == Some(&1))
            .map(|&(node, start, interrupting)| EventSubProcess {
                node,
                start,
                interrupting,
            })
            .collect();
        (
            Process {
                nodes: self.nodes,
                flows: self.flows,
                by_id: self.by_id,
                event_mappings: self.event_mappings,
                sub_process_mappings: self.sub_process_mappings,
                event_sub_processes,
                multi_instances: self.multi,
                compensations: self.compensations,
                ad_hocs: self.ad_hocs,
                activity_defaults: self.activity_defaults,
                conditionals: self.conditionals,
            },
            self.meta,
        )
    }
}

/// The `<messageEventDefinition>` of a message end or intermediate throw event that a
/// worker runs — `zeebe:taskDefinition` on the event (Zeebe: message throw events are job
/// workers), or a Camunda 7 implementation on the definition (`camunda:type`,
/// `camunda:class`, `camunda:delegateExpression`, `camunda:expression`) — or `None`.
pub(super) fn worker_message_definition(el: &Element) -> Option<&Element> {
    if !matches!(el.local.as_str(), "endEvent" | "intermediateThrowEvent") {
        return None;
    }
    let mut defs = el
        .children
        .iter()
        .filter(|c| c.ns == Ns::Bpmn && c.local.ends_with("EventDefinition"));
    let d = defs.next()?;
    if d.local != "messageEventDefinition" || defs.next().is_some() {
        return None;
    }
    let zeebe = el
        .child(Ns::Bpmn, "extensionElements")
        .is_some_and(|x| x.child(Ns::Zeebe, "taskDefinition").is_some());
    let camunda = CAMUNDA_WORKER_ATTRS
        .iter()
        .any(|a| d.attr_ns(Ns::Camunda, a).is_some());
    (zeebe || camunda).then_some(d)
}
