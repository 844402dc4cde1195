//! Events: start, end, intermediate catch/throw and boundary events, their single event
//! definition, error and message references, timers, and attaching boundary events to
//! their host activity once every node is known.

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
        self.help(
            "Q103",
            def.pos,
            format!("a {trigger} {what} (<{}>) is not supported", def.local),
            "use a none, error, terminate, timer or message event as SPEC L2 lists",
        );
        let _ = el;
    }

    pub(super) fn start_event(&mut self, el: &'a Element) -> Option<NodeKind> {
        match self.event_definition(el).ok()? {
            None => Some(NodeKind::StartEvent),
            Some(d) => {
                self.unsupported_event(el, d, "start event");
                None
            }
        }
    }

    pub(super) fn end_event(&mut self, el: &'a Element) -> Option<NodeKind> {
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

    pub(super) fn catch_event(&mut self, el: &'a Element) -> Option<NodeKind> {
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

    pub(super) fn throw_event(&mut self, el: &'a Element) -> Option<NodeKind> {
        match self.event_definition(el).ok()? {
            // A none intermediate throw event is a milestone marker: it passes through.
            None => Some(Self::placeholder()),
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
            Some(d) if d.local == "messageEventDefinition" => BoundaryTrigger::Message {
                name: self.message_ref(d)?,
            },
            Some(d) => {
                self.unsupported_event(el, d, "boundary event");
                return None;
            }
            None => {
                self.help(
                    "Q102",
                    el.pos,
                    "a boundary event needs a timer, error or message event definition",
                    "add <timerEventDefinition>, <errorEventDefinition> or <messageEventDefinition>",
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
}
