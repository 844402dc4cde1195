//! Events: start, end, intermediate catch/throw and boundary events, their single event
//! definition, error, message and escalation references, timers, attaching boundary
//! events to their host activity once every node is known, and pairing link throw events
//! with their catch events (§10.5.6) once every flow is known.

use std::collections::{BTreeMap, BTreeSet};

use crate::expr::Expression;
use crate::iso8601;
use crate::model::*;
use crate::xml::{Attr, Element, Ns};

use super::ProcessBuilder;

impl<'a, 'd> ProcessBuilder<'a, 'd> {
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
        let help = if trigger == "compensate" {
            "compensation is caught by a compensation boundary event on the activity it undoes, and thrown by an intermediate throw or end event; a compensation event sub-process is not supported (docs/compensation.md)"
        } else {
            "use a none, error, terminate, timer, message, signal, conditional, link, escalation or compensation event (docs/bpmn-coverage.md)"
        };
        self.help(
            "Q103",
            def.pos,
            format!("a {trigger} {what} (<{}>) is not supported", def.local),
            help,
        );
        let _ = el;
    }

    pub(super) fn start_event(
        &mut self,
        el: &'a Element,
        idx: NodeIdx,
        scope: Option<NodeIdx>,
    ) -> Option<NodeKind> {
        if let Some(esp) = scope.filter(|s| self.meta.event_subs.contains(s)) {
            return self.event_start(el, idx, esp);
        }
        let d = match self.event_definition(el).ok()? {
            None => return Some(NodeKind::StartEvent),
            Some(d) => d,
        };
        let trigger = match d.local.as_str() {
            "messageEventDefinition" => StartTrigger::Message {
                name: self.message_ref(d)?,
            },
            "signalEventDefinition" => StartTrigger::Signal {
                name: self.signal_ref(d)?,
            },
            "timerEventDefinition" => StartTrigger::Timer(self.start_timer(d)?),
            "conditionalEventDefinition" if scope.is_none() => {
                self.help(
                    "Q103",
                    d.pos,
                    "a conditional start event of a process is not supported",
                    "Camunda 7 and 8 start such a process only when an API call hands them \
                     variables to evaluate the condition over; start it with a none, message \
                     or signal start event instead (a conditional start belongs in an event \
                     sub-process, where qflow runs it: docs/conditional-events.md)",
                );
                return None;
            }
            _ => {
                self.unsupported_event(el, d, "start event");
                return None;
            }
        };
        if scope.is_some() {
            // Inside an embedded sub-process a triggered start only makes sense in an
            // event sub-process.
            self.help(
                "Q103",
                d.pos,
                format!(
                    "a {} start event inside an embedded sub-process is not supported",
                    d.local.trim_end_matches("EventDefinition")
                ),
                "an embedded sub-process starts at a none start event; a start event with a trigger belongs in an event sub-process (triggeredByEvent=\"true\")",
            );
            return None;
        }
        Some(NodeKind::TriggeredStart(trigger))
    }

    /// The start event of the event sub-process `esp`: a timer (computed ones too: the
    /// enclosing scope has variables), message, signal, error or escalation trigger, and
    /// `isInterrupting` (default `true`; an error start cannot be non-interrupting).
    fn event_start(&mut self, el: &'a Element, idx: NodeIdx, esp: NodeIdx) -> Option<NodeKind> {
        let interrupting = el.value("isInterrupting").map(str::trim) != Some("false");
        let Some(d) = self.event_definition(el).ok()? else {
            self.help(
                "Q128",
                el.pos,
                "the start event of an event sub-process has no trigger",
                "add a timer, message, signal, error or escalation event definition: a none start never fires in an event sub-process",
            );
            return None;
        };
        let trigger = match d.local.as_str() {
            "messageEventDefinition" => StartTrigger::Message {
                name: self.message_ref(d)?,
            },
            "signalEventDefinition" => StartTrigger::Signal {
                name: self.signal_ref(d)?,
            },
            "timerEventDefinition" => StartTrigger::Timer(self.timer(d)?),
            "errorEventDefinition" => {
                if !interrupting {
                    self.help(
                        "Q130",
                        el.attr("isInterrupting").map_or(el.pos, |a| a.pos),
                        "an error start event of an event sub-process is always interrupting",
                        "remove isInterrupting=\"false\"",
                    );
                    return None;
                }
                StartTrigger::Error {
                    code: self.caught_error_code(d, "start event")?,
                }
            }
            "escalationEventDefinition" => StartTrigger::Escalation {
                code: self.caught_escalation_code(d, "start event")?,
            },
            "conditionalEventDefinition" => {
                StartTrigger::Conditional(self.conditional(el, d, idx)?)
            }
            _ => {
                self.unsupported_event(el, d, "event sub-process start event");
                return None;
            }
        };
        self.event_starts.push((esp, idx, interrupting));
        Some(NodeKind::TriggeredStart(trigger))
    }

    /// The code a catching error event matches (`errorRef`'s `errorCode`; `None` without
    /// an `errorRef`: catch-all); `None` outside (reported) when the reference names no
    /// error or an error without a code. `what` names the catching event.
    fn caught_error_code(&mut self, d: &Element, what: &str) -> Option<Option<String>> {
        let Some(a) = d.attr("errorRef") else {
            return Some(None);
        };
        let err = self.check_error_ref(a)?;
        match &err.code {
            Some(c) => Some(Some(c.clone())),
            None => {
                self.help(
                    "Q102",
                    a.pos,
                    format!(
                        "error `{}` has no errorCode, so this {what} could never match",
                        err.id
                    ),
                    "add errorCode=\"…\" to the <error>, or drop errorRef to catch every error",
                );
                None
            }
        }
    }

    /// The code a catching escalation event matches, as [`Self::caught_error_code`]
    /// reads an error's.
    fn caught_escalation_code(&mut self, d: &Element, what: &str) -> Option<Option<String>> {
        let Some(a) = d.attr("escalationRef") else {
            return Some(None);
        };
        match self.escalation_code(d).ok()? {
            Some(code) => Some(Some(code)),
            None => {
                self.help(
                    "Q102",
                    a.pos,
                    format!("escalation `{}` has no escalationCode, so this {what} could never match", a.value.trim()),
                    "add escalationCode=\"…\" to the <escalation>, or drop escalationRef to catch every escalation",
                );
                None
            }
        }
    }

    /// A timer start event's timer: a date, a duration (after the deployment) or a
    /// cycle. Computed from an expression it cannot be: there are no instance variables
    /// before the instance.
    fn start_timer(&mut self, d: &Element) -> Option<TimerDef> {
        let t = self.timer(d)?;
        if let TimerDef::Computed { expression, .. } = &t {
            self.help(
                "Q207",
                d.pos,
                format!(
                    "a timer start event's time is computed from `{}`, but there are no variables before the instance starts",
                    expression.source()
                ),
                "write the date, duration or cycle as an ISO-8601 literal",
            );
            return None;
        }
        Some(t)
    }

    /// The signal name a `<signalEventDefinition>` names through `signalRef` (a signal
    /// without a name is known by its id).
    pub(super) fn signal_ref(&mut self, d: &Element) -> Option<String> {
        let Some(a) = d.attr("signalRef") else {
            self.help(
                "Q102",
                d.pos,
                "a <signalEventDefinition> has no signalRef",
                "reference a <signal id=\"…\" name=\"…\"/> declared under <definitions>",
            );
            return None;
        };
        match self.ctx.signals.get(a.value.trim()) {
            Some(name) => Some(name.clone()),
            None => {
                self.help(
                    "Q127",
                    a.pos,
                    format!("signalRef `{}` names no declared <signal>", a.value),
                    "declare <signal id=\"…\" name=\"…\"/> under <definitions>, or fix the reference",
                );
                None
            }
        }
    }

    pub(super) fn end_event(&mut self, el: &'a Element, idx: NodeIdx) -> Option<NodeKind> {
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
            Some(d) if d.local == "escalationEventDefinition" => {
                let code = self.escalation_code(d).ok()?;
                Some(NodeKind::EndEvent(EndKind::Escalation { code }))
            }
            Some(d) if d.local == "signalEventDefinition" => {
                let name = self.signal_ref(d)?;
                Some(NodeKind::EndEvent(EndKind::Signal { name }))
            }
            Some(d) if d.local == "messageEventDefinition" && d.attr("messageRef").is_none() => {
                if !self.definition_extensions_refused(d) {
                    return None;
                }
                self.message_throw_of_nothing(d);
                Some(NodeKind::EndEvent(EndKind::None))
            }
            Some(d) if d.local == "messageEventDefinition" => {
                let name = self.message_ref(d)?;
                Some(NodeKind::EndEvent(EndKind::Message { name }))
            }
            Some(d) if d.local == "compensateEventDefinition" => {
                self.compensation_throw(idx, d)?;
                Some(NodeKind::EndEvent(EndKind::Compensation { activity: None }))
            }
            Some(d) => {
                self.unsupported_event(el, d, "end event");
                None
            }
        }
    }

    /// A message throw or end event without a `messageRef` and without a worker
    /// (`super::worker_message_definition` takes those): Camunda 7 deploys it and runs it
    /// as a none event — it sends nothing (`BpmnParse` gives a message throw without an
    /// implementation the none throw's behaviour) — and so does qflow, with a warning,
    /// since it is as often a forgotten reference. (Zeebe refuses it: a message throw
    /// there must have a job type.)
    fn message_throw_of_nothing(&mut self, d: &Element) {
        self.diags.push(
            crate::diag::Diagnostic::warning(
                "Q909",
                d.pos,
                "this message event names no message and no worker: it sends nothing, as Camunda 7 runs it",
            )
            .with_help("reference a <message> (messageRef=\"…\"; qflow publishes it through its outbox) or name a worker (<zeebe:taskDefinition type=\"…\"/>)"),
        );
    }

    fn check_error_ref(&mut self, a: &Attr) -> Option<&'a ErrorDef> {
        let found = self.ctx.errors.get(a.value.trim());
        self.reported_if_none(
            found,
            "Q112",
            a.pos,
            || format!("errorRef `{}` names no declared <error>", a.value),
            "declare <error id=\"…\" errorCode=\"…\"/> under <definitions>, or fix the reference",
        )
    }

    pub(super) fn message_ref(&mut self, el: &Element) -> Option<String> {
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

    /// The escalation code an `<escalationEventDefinition>` names: `Ok(None)` without an
    /// `escalationRef` or when the escalation declares no code; `Err` (reported) when the
    /// reference names no declared `<escalation>`.
    fn escalation_code(&mut self, d: &Element) -> Result<Option<String>, ()> {
        let Some(a) = d.attr("escalationRef") else {
            return Ok(None);
        };
        match self.ctx.escalations.get(a.value.trim()) {
            Some(code) => Ok(code.clone()),
            None => {
                self.help(
                    "Q125",
                    a.pos,
                    format!("escalationRef `{}` names no declared <escalation>", a.value),
                    "declare <escalation id=\"…\" escalationCode=\"…\"/> under <definitions>, or fix the reference",
                );
                Err(())
            }
        }
    }

    /// The `name` of a `<linkEventDefinition>`, which pairs a throw with its catch.
    fn link_name(&mut self, d: &'a Element, idx: NodeIdx) -> Option<String> {
        match d.value("name").map(str::trim).filter(|n| !n.is_empty()) {
            Some(name) => {
                self.link_els.push((idx, d));
                Some(name.to_string())
            }
            None => {
                self.nameless_links.push(idx);
                self.help(
                    "Q102",
                    d.pos,
                    "a <linkEventDefinition> has no name",
                    "name the link, e.g. <linkEventDefinition name=\"retry\"/>; a throw jumps to the catch of the same name",
                );
                None
            }
        }
    }

    pub(super) fn catch_event(&mut self, el: &'a Element, idx: NodeIdx) -> Option<NodeKind> {
        match self.event_definition(el).ok()? {
            Some(d) if d.local == "linkEventDefinition" => {
                let name = self.link_name(d, idx)?;
                Some(NodeKind::IntermediateCatch(CatchTrigger::Link { name }))
            }
            Some(d) if d.local == "timerEventDefinition" => {
                let t = self.timer(d)?;
                Some(NodeKind::IntermediateCatch(CatchTrigger::Timer(t)))
            }
            Some(d) if d.local == "messageEventDefinition" => {
                let name = self.message_ref(d)?;
                Some(NodeKind::IntermediateCatch(CatchTrigger::Message { name }))
            }
            Some(d) if d.local == "signalEventDefinition" => {
                let name = self.signal_ref(d)?;
                Some(NodeKind::IntermediateCatch(CatchTrigger::Signal { name }))
            }
            Some(d) if d.local == "conditionalEventDefinition" => {
                let c = self.conditional(el, d, idx)?;
                Some(NodeKind::IntermediateCatch(CatchTrigger::Conditional(c)))
            }
            Some(d) => {
                self.unsupported_event(el, d, "intermediate catch event");
                None
            }
            None => {
                self.help(
                    "Q102",
                    el.pos,
                    "an intermediate catch event needs a timer, message, signal, conditional or link event definition",
                    "add <timerEventDefinition>, <messageEventDefinition>, <signalEventDefinition>, <conditionalEventDefinition> or <linkEventDefinition>",
                );
                None
            }
        }
    }

    pub(super) fn throw_event(&mut self, el: &'a Element, idx: NodeIdx) -> Option<NodeKind> {
        match self.event_definition(el).ok()? {
            // A none intermediate throw event is a milestone marker: it passes through.
            None => Some(Self::placeholder()),
            Some(d) if d.local == "linkEventDefinition" => {
                let name = self.link_name(d, idx)?;
                // The target is resolved once every node and flow is known
                // (`resolve_links`).
                Some(NodeKind::IntermediateThrow(ThrowTrigger::Link {
                    name,
                    target: idx,
                }))
            }
            Some(d) if d.local == "escalationEventDefinition" => {
                let code = self.escalation_code(d).ok()?;
                Some(NodeKind::IntermediateThrow(ThrowTrigger::Escalation {
                    code,
                }))
            }
            Some(d) if d.local == "signalEventDefinition" => {
                let name = self.signal_ref(d)?;
                Some(NodeKind::IntermediateThrow(ThrowTrigger::Signal { name }))
            }
            Some(d) if d.local == "messageEventDefinition" && d.attr("messageRef").is_none() => {
                if !self.definition_extensions_refused(d) {
                    return None;
                }
                self.message_throw_of_nothing(d);
                Some(Self::placeholder())
            }
            Some(d) if d.local == "messageEventDefinition" => {
                let name = self.message_ref(d)?;
                Some(NodeKind::IntermediateThrow(ThrowTrigger::Message { name }))
            }
            Some(d) if d.local == "compensateEventDefinition" => {
                self.compensation_throw(idx, d)?;
                Some(NodeKind::IntermediateThrow(ThrowTrigger::Compensation {
                    activity: None,
                }))
            }
            Some(d) => {
                self.unsupported_event(el, d, "intermediate throw event");
                None
            }
        }
    }

    pub(super) fn boundary_event(&mut self, el: &'a Element, idx: NodeIdx) -> Option<NodeKind> {
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
                let code = self.caught_error_code(d, "boundary")?;
                BoundaryTrigger::Error { code }
            }
            Some(d) if d.local == "messageEventDefinition" => BoundaryTrigger::Message {
                name: self.message_ref(d)?,
            },
            Some(d) if d.local == "signalEventDefinition" => BoundaryTrigger::Signal {
                name: self.signal_ref(d)?,
            },
            Some(d) if d.local == "conditionalEventDefinition" => {
                BoundaryTrigger::Conditional(self.conditional(el, d, idx)?)
            }
            // It only links its activity to the handler; `cancelActivity` means nothing.
            Some(d) if d.local == "compensateEventDefinition" => {
                return Some(NodeKind::Boundary(Boundary {
                    attached_to: idx,
                    interrupting: false,
                    trigger: BoundaryTrigger::Compensation,
                }));
            }
            Some(d) if d.local == "escalationEventDefinition" => {
                // `cancelActivity` keeps its schema default `true` here as on every
                // boundary event (`tBoundaryEvent` in the BPMN 2.0.2 schema); `false` makes the catch non-interrupting.
                let code = self.caught_escalation_code(d, "boundary")?;
                BoundaryTrigger::Escalation { code }
            }
            Some(d) => {
                self.unsupported_event(el, d, "boundary event");
                return None;
            }
            None => {
                self.help(
                    "Q102",
                    el.pos,
                    "a boundary event needs a timer, error, message, signal, conditional or escalation event definition",
                    "add <timerEventDefinition>, <errorEventDefinition>, <messageEventDefinition>, <signalEventDefinition>, <conditionalEventDefinition> or <escalationEventDefinition>",
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

    // ----- conditional events -----

    /// A `conditionalEventDefinition` `d` of the event `el` (the node `idx`): its
    /// `<condition>` (CEL, FEEL or the JUEL subset, as a flow's condition) and its filter:
    /// Camunda 7's `camunda:variableName` and `camunda:variableEvents` on the definition,
    /// or Zeebe's `zeebe:conditionalFilter variableNames="…" variableEvents="…"` in its
    /// or the event's extension elements. A filter naming only deletions never fires:
    /// qflow deletes no variable (Q103).
    fn conditional(
        &mut self,
        el: &'a Element,
        d: &'a Element,
        idx: NodeIdx,
    ) -> Option<Conditional> {
        let Some(c) = d
            .child(Ns::Bpmn, "condition")
            .filter(|c| !c.text.trim().is_empty())
        else {
            self.help(
                "Q102",
                d.pos,
                "the conditionalEventDefinition has no condition",
                "write the condition in <condition>, e.g. <condition>${approved}</condition> or <condition>=approved</condition>",
            );
            return None;
        };
        let condition = self.condition_text(c)?;
        let zeebe = [d, el]
            .into_iter()
            .filter_map(|e| e.child(Ns::Bpmn, "extensionElements"))
            .find_map(|x| x.child(Ns::Zeebe, "conditionalFilter"));
        let names = d
            .attr_ns(Ns::Camunda, "variableName")
            .or_else(|| zeebe.and_then(|z| z.attr("variableNames")));
        let events = d
            .attr_ns(Ns::Camunda, "variableEvents")
            .or_else(|| zeebe.and_then(|z| z.attr("variableEvents")));
        let variables: Vec<String> = names
            .map(|a| {
                a.value
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let (mut on_create, mut on_update) = (true, true);
        // An empty list is no filter (Camunda 7 reads it so).
        if let Some(a) = events.filter(|a| !a.value.trim().is_empty()) {
            (on_create, on_update) = (false, false);
            let mut deletes = false;
            for e in a.value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                match e {
                    "create" => on_create = true,
                    "update" => on_update = true,
                    "delete" => deletes = true,
                    other => {
                        self.help(
                            "Q102",
                            a.pos,
                            format!("variable event `{other}` is not one of create, update, delete"),
                            "list the changes that make the condition evaluate again, e.g. variableEvents=\"create, update\"",
                        );
                        return None;
                    }
                }
            }
            if !on_create && !on_update && !deletes {
                // Only separators: no filter either.
                (on_create, on_update) = (true, true);
            } else if !on_create && !on_update {
                self.help(
                    "Q103",
                    a.pos,
                    "a conditional event that listens only for deleted variables never fires: qflow deletes no variable",
                    "listen for create or update, or remove the variable events to listen for every change",
                );
                return None;
            }
        }
        self.conditionals.push(idx);
        Some(Conditional {
            condition,
            variables,
            on_create,
            on_update,
        })
    }

    // ----- compensation -----

    /// A compensation throw or end event: `waitForCompletion="false"` is refused (Zeebe
    /// refuses it too: the throw always waits for the handlers it starts); `activityRef`
    /// is resolved by `resolve_compensations`.
    fn compensation_throw(&mut self, idx: NodeIdx, d: &'a Element) -> Option<()> {
        if let Some(a) = d.attr("waitForCompletion") {
            if a.value.trim() == "false" {
                self.help(
                    "Q134",
                    a.pos,
                    "waitForCompletion=\"false\" is not supported: a compensation throw waits for the handlers it starts",
                    "remove waitForCompletion; to go on without waiting, throw the compensation on a parallel branch",
                );
                return None;
            }
        }
        self.compensation_throws.push((idx, d));
        Some(())
    }

    /// The scope a compensation thrown at `idx` compensates: the throw's own, or, for a
    /// throw inside an event sub-process, the scope around that event sub-process (the
    /// event sub-process compensates what its scope completed, as in Zeebe).
    fn compensation_scope(&self, idx: NodeIdx) -> Option<NodeIdx> {
        let scope = self.nodes[idx.0 as usize].scope;
        match scope {
            Some(s) if self.meta.event_subs.contains(&s) => self.nodes[s.0 as usize].scope,
            _ => scope,
        }
    }

    /// Once every node and flow is known: links each compensation boundary to the handler
    /// its `<association>` names, checks the handler's shape, and resolves each throw's
    /// `activityRef` (Q133, Q134; Q103 for what qflow does not run yet).
    pub(super) fn resolve_compensations(&mut self) {
        let boundaries: Vec<(NodeIdx, NodeIdx)> = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match &n.kind {
                NodeKind::Boundary(b) if b.trigger == BoundaryTrigger::Compensation => {
                    Some((NodeIdx::at(i), b.attached_to))
                }
                _ => None,
            })
            .collect();
        // Every node an association from a compensation boundary names: a handler refused
        // for its own shape is not also reported as named by nobody.
        let boundary_ids: BTreeSet<&str> = boundaries
            .iter()
            .map(|(b, _)| self.nodes[b.0 as usize].id.as_str())
            .collect();
        let associated: BTreeSet<NodeIdx> = self
            .association_els
            .iter()
            .filter(|a| {
                a.value("sourceRef")
                    .is_some_and(|s| boundary_ids.contains(s.trim()))
            })
            .filter_map(|a| self.by_id.get(a.value("targetRef")?.trim()).copied())
            .collect();
        for (boundary, host) in boundaries {
            let (bid, bpos) = {
                let n = &self.nodes[boundary.0 as usize];
                (n.id.clone(), n.pos)
            };
            if host == boundary || self.meta.refused.contains(&boundary) {
                continue; // no host: reported by `resolve_boundaries`
            }
            if let Some(f) = self.nodes[boundary.0 as usize].outgoing.first() {
                let pos = self.flows[f.0 as usize].pos;
                self.help(
                    "Q133",
                    pos,
                    format!("compensation boundary event `{bid}` has an outgoing sequence flow"),
                    "a compensation boundary has no flows: link it to its handler with an <association>",
                );
                continue;
            }
            let from_boundary: Vec<&'a Element> = self
                .association_els
                .iter()
                .copied()
                .filter(|a| a.value("sourceRef").map(str::trim) == Some(bid.as_str()))
                .collect();
            // An association to a text annotation (a modeler's comment on the boundary)
            // names no flow node and is not a handler link.
            let targets: Vec<&'a Element> = from_boundary
                .iter()
                .copied()
                .filter(|a| {
                    a.value("targetRef")
                        .is_some_and(|t| self.by_id.contains_key(t.trim()))
                })
                .collect();
            let targets = if targets.is_empty() {
                from_boundary
            } else {
                targets
            };
            let target = match targets.as_slice() {
                [one] => one,
                [] => {
                    self.help(
                        "Q133",
                        bpos,
                        format!("compensation boundary event `{bid}` names no handler"),
                        "add <association sourceRef=\"…boundary…\" targetRef=\"…handler…\"/> to an activity with isForCompensation=\"true\"",
                    );
                    continue;
                }
                [_, second, ..] => {
                    self.help(
                        "Q133",
                        second.pos,
                        format!(
                            "compensation boundary event `{bid}` has more than one association"
                        ),
                        "keep one association, to the one handler of the activity",
                    );
                    continue;
                }
            };
            let tref = target.value("targetRef").map(str::trim).unwrap_or("");
            let Some(handler) = self.by_id.get(tref).copied() else {
                self.help(
                    "Q133",
                    target.pos,
                    format!("the association of compensation boundary event `{bid}` names `{tref}`, which is no node of this process"),
                    "point targetRef at the handler activity",
                );
                continue;
            };
            if !self.for_compensation.contains(&handler) {
                self.help(
                    "Q133",
                    target.pos,
                    format!("compensation boundary event `{bid}` names `{tref}`, which is not marked isForCompensation=\"true\""),
                    "mark the handler isForCompensation=\"true\" (it then has no sequence flows)",
                );
                continue;
            }
            if self.compensations.contains_key(&host) {
                self.help(
                    "Q133",
                    bpos,
                    format!(
                        "`{}` has a second compensation boundary event",
                        self.nodes[host.0 as usize].id
                    ),
                    "an activity has one compensation handler: keep one compensation boundary",
                );
                continue;
            }
            if self.compensations.values().any(|c| c.handler == handler) {
                self.help(
                    "Q133",
                    target.pos,
                    format!("`{tref}` is already the compensation handler of another activity"),
                    "give each activity its own handler",
                );
                continue;
            }
            if let Some(problem) = self.handler_problem(handler, host) {
                let hpos = self.nodes[handler.0 as usize].pos;
                self.help("Q133", hpos, format!("compensation handler `{tref}` {problem}"), "a handler is a task in the scope of its activity, with no sequence flows and no boundary events");
                continue;
            }
            self.compensations
                .insert(host, Compensation { boundary, handler });
        }
        let unlinked: Vec<NodeIdx> = self
            .for_compensation
            .iter()
            .copied()
            .filter(|h| !associated.contains(h) && !self.meta.refused.contains(h))
            .collect();
        for h in unlinked {
            let n = &self.nodes[h.0 as usize];
            let (id, pos) = (n.id.clone(), n.pos);
            self.help(
                "Q133",
                pos,
                format!("compensation handler `{id}` is named by no compensation boundary event, so it can never run"),
                "attach a boundary event with <compensateEventDefinition/> to the activity it undoes and link it with an <association>",
            );
        }
        // A handler whose link was refused is reported once, not again as unreachable or
        // as a dead end.
        let linked: BTreeSet<NodeIdx> = self.compensations.values().map(|c| c.handler).collect();
        let refused: Vec<NodeIdx> = self.for_compensation.difference(&linked).copied().collect();
        self.meta.refused.extend(refused);
        for (throw, d) in std::mem::take(&mut self.compensation_throws) {
            let Some(a) = d.attr("activityRef") else {
                continue;
            };
            let name = a.value.trim();
            let scope = self.compensation_scope(throw);
            let target = self.by_id.get(name).copied().filter(|t| {
                self.compensations.contains_key(t) && self.nodes[t.0 as usize].scope == scope
            });
            let Some(target) = target else {
                self.help(
                    "Q134",
                    a.pos,
                    format!("activityRef `{name}` names no activity with a compensation boundary in the scope this event compensates"),
                    "name an activity of the same scope (for a throw in an event sub-process: of the scope around it) that has a compensation boundary event, or drop activityRef to compensate them all",
                );
                continue;
            };
            match &mut self.nodes[throw.0 as usize].kind {
                NodeKind::IntermediateThrow(ThrowTrigger::Compensation { activity })
                | NodeKind::EndEvent(EndKind::Compensation { activity }) => {
                    *activity = Some(target)
                }
                _ => {}
            }
        }
    }

    /// Why `handler` cannot be the compensation handler of `host`, if it cannot.
    fn handler_problem(&self, handler: NodeIdx, host: NodeIdx) -> Option<String> {
        let h = &self.nodes[handler.0 as usize];
        if !matches!(h.kind, NodeKind::Task(_)) || self.multi.contains_key(&handler) {
            return Some(
                "is not a task: a sub-process or multi-instance handler is not supported yet"
                    .into(),
            );
        }
        if !h.incoming.is_empty() || !h.outgoing.is_empty() {
            return Some("has sequence flows".into());
        }
        if h.scope != self.nodes[host.0 as usize].scope {
            return Some("is not in the scope of the activity it compensates".into());
        }
        let guarded = self
            .nodes
            .iter()
            .any(|n| matches!(&n.kind, NodeKind::Boundary(b) if b.attached_to == handler));
        guarded.then(|| "has boundary events".into())
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
            return self.computed_timer(p, text);
        }
        let res = match p.local.as_str() {
            "timeDuration" => iso8601::parse_duration(text)
                .map(TimerDef::Duration)
                .map_err(|m| ("Q204", m)),
            "timeDate" => iso8601::parse_date_time(text)
                .map(|epoch_ms| TimerDef::Date { epoch_ms })
                .map_err(|m| ("Q205", m)),
            _ => TimerDef::cycle_from_text(text).map_err(|m| ("Q206", m)),
        };
        match res {
            Ok(t) => Some(t),
            Err((code, m)) => {
                let help = if code == "Q206" {
                    "write an ISO-8601 repeating interval, e.g. R3/PT10M, or a cron \
                     expression of six fields, e.g. 0 0 9 ? * MON-FRI (UTC)"
                } else {
                    "write an ISO-8601 value, e.g. PT30S, 2026-03-01T09:00:00Z or R3/PT10M"
                };
                self.help(code, p.text_pos, m, help);
                None
            }
        }
    }

    /// A timer whose value an expression computes when it is armed: FEEL (`=…`) or JUEL
    /// (`${…}`, `#{…}`) in the subset that maps onto CEL; beyond it, refused.
    fn computed_timer(&mut self, p: &Element, text: &str) -> Option<TimerDef> {
        let kind = match p.local.as_str() {
            "timeDuration" => TimeKind::Duration,
            "timeDate" => TimeKind::Date,
            _ => TimeKind::Cycle,
        };
        let cel = if let Some(feel) = text.strip_prefix('=') {
            crate::feel::feel_to_cel(feel)
        } else {
            crate::feel::juel_to_cel(text)
        };
        let cel = match cel {
            Ok(cel) => cel,
            Err(why) => {
                self.help(
                    "Q203",
                    p.text_pos,
                    format!("the timer expression `{text}`: {why}"),
                    "keep to literals and variable paths (`=reminder`, `${reminder}`), or write a literal ISO-8601 value",
                );
                return None;
            }
        };
        match Expression::compile(&cel, p.text_pos, self.ctx.opts.max_expr_len) {
            Ok(expression) => Some(TimerDef::Computed { kind, expression }),
            Err(e) => {
                self.help(e.code, e.pos, e.message, "fix the timer expression");
                None
            }
        }
    }

    pub(super) fn resolve_boundaries(&mut self) {
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
            if let Some(h) = host.filter(|h| self.meta.event_subs.contains(h)) {
                self.meta.refused_roots.push(idx);
                let id = self.nodes[h.0 as usize].id.clone();
                self.help(
                    "Q129",
                    a.pos,
                    format!("a boundary event is attached to event sub-process `{id}`"),
                    "an event sub-process has no boundary events; put the catch inside it, or in its enclosing scope",
                );
                continue;
            }
            // An activity (not an event loaded as a task: a none throw event passes
            // through, a message event may be run by a worker; neither takes boundaries).
            let host_ok = host.map(|h| {
                let node = &self.nodes[h.0 as usize];
                matches!(node.kind, NodeKind::Task(_) | NodeKind::SubProcess) && node.is_activity()
            });
            if host_ok != Some(true) {
                self.meta.refused_roots.push(idx);
            }
            let escalation = matches!(
                self.nodes[idx.0 as usize].kind,
                NodeKind::Boundary(Boundary {
                    trigger: BoundaryTrigger::Escalation { .. },
                    ..
                })
            );
            if let (Some(h), Some(true), true) = (host, host_ok, escalation) {
                // A called instance's uncaught escalation reaches its call activity.
                let user_task = matches!(
                    &self.nodes[h.0 as usize].kind,
                    NodeKind::Task(Task {
                        kind: TaskKind::User { .. } | TaskKind::Call(_),
                        ..
                    })
                );
                if matches!(self.nodes[h.0 as usize].kind, NodeKind::Task(_)) && !user_task {
                    // A task throws no escalation in qflow (a handler ends with a result, a
                    // failure or a BPMN error), so such a boundary could never fire. A
                    // user task can: the task list raises one (Camunda 7's
                    // `TaskService#handleEscalation`).
                    // A warning, not an error: Zeebe and Camunda 7 deploy such a model
                    // (the boundary just never fires), and so does qflow.
                    self.diags.push(
                        crate::diag::Diagnostic::warning(
                            "Q126",
                            a.pos,
                            format!("an escalation boundary event is attached to task `{}`, which can never throw an escalation: it never fires", a.value.trim()),
                        )
                        .with_help("attach it to the sub-process (or call activity) whose inside throws the escalation, or remove it"),
                    );
                }
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
}

impl<'a, 'd> ProcessBuilder<'a, 'd> {
    /// Pairs every link throw with the link catch of the same name in its scope (BPMN
    /// 2.0.2 §10.5.6: a link connects two sections of one process level; it never crosses
    /// a sub-process boundary). Runs after `resolve_flows`, so the flows are known: a link
    /// catch has no incoming flows and a link throw no outgoing ones.
    pub(super) fn resolve_links(&mut self) {
        let links = std::mem::take(&mut self.link_els);
        let mut catches: BTreeMap<(Option<NodeIdx>, String), NodeIdx> = BTreeMap::new();
        let mut catch_scopes: BTreeMap<String, NodeIdx> = BTreeMap::new();
        for (idx, d) in &links {
            let node = &self.nodes[idx.0 as usize];
            let NodeKind::IntermediateCatch(CatchTrigger::Link { name }) = &node.kind else {
                continue;
            };
            let (id, name, scope) = (node.id.clone(), name.clone(), node.scope);
            if !node.incoming.is_empty() {
                self.help(
                    "Q123",
                    node.pos,
                    format!("link catch event `{id}` has incoming sequence flows"),
                    "a link catch is reached only through its link throw; remove the incoming flows",
                );
            }
            catch_scopes.entry(name.clone()).or_insert(*idx);
            match catches.get(&(scope, name.clone())) {
                Some(first) => {
                    let first = self.nodes[first.0 as usize].id.clone();
                    // No throw can reach this catch; counted reachable so that the one
                    // error is the name, not a cascade of unreachable nodes.
                    self.meta.refused.insert(*idx);
                    self.help(
                        "Q122",
                        d.attr("name").map_or(d.pos, |a| a.pos),
                        format!("link catch event `{id}` has the link name `{name}` of `{first}` in the same scope"),
                        "give each link catch of one process level its own name",
                    );
                }
                None => {
                    catches.insert((scope, name), *idx);
                }
            }
        }
        // A catch that a nameless (refused) throw of its scope may have meant is counted
        // reachable, so that the one error is the missing name, not a cascade.
        let nameless: Vec<Option<NodeIdx>> = std::mem::take(&mut self.nameless_links)
            .iter()
            .map(|t| self.nodes[t.0 as usize].scope)
            .collect();
        for ((scope, _), catch) in &catches {
            if nameless.contains(scope) {
                self.meta.refused.insert(*catch);
            }
        }
        let mut targets = Vec::new();
        for (idx, d) in &links {
            let node = &self.nodes[idx.0 as usize];
            let NodeKind::IntermediateThrow(ThrowTrigger::Link { name, .. }) = &node.kind else {
                continue;
            };
            let (id, name, scope, pos) = (node.id.clone(), name.clone(), node.scope, node.pos);
            if !node.outgoing.is_empty() {
                self.help(
                    "Q123",
                    pos,
                    format!("link throw event `{id}` has outgoing sequence flows"),
                    "a link throw continues at its link catch; remove the outgoing flows",
                );
            }
            let at = d.attr("name").map_or(d.pos, |a| a.pos);
            if let Some(target) = catches.get(&(scope, name.clone())) {
                targets.push((*idx, *target));
            } else if let Some(other) = catch_scopes.get(&name) {
                let other = self.nodes[other.0 as usize].id.clone();
                self.help(
                    "Q124",
                    at,
                    format!("link throw event `{id}` names link `{name}`, whose catch `{other}` is in another scope"),
                    "a link stays inside one process level; put the catch beside the throw, or use sequence flows",
                );
            } else {
                self.help(
                    "Q121",
                    at,
                    format!("link throw event `{id}` names link `{name}`, and no link catch event of that name is in its scope"),
                    "add an intermediate catch event with <linkEventDefinition name=\"…\"/> of the same name beside it",
                );
            }
        }
        for (throw, target) in targets {
            if let NodeKind::IntermediateThrow(ThrowTrigger::Link { target: t, .. }) =
                &mut self.nodes[throw.0 as usize].kind
            {
                *t = target;
            }
        }
    }
}
