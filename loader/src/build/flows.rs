//! Sequence flows and gateways: event-based gateways, resolving flow ends, compiling
//! conditions (CEL, or FEEL translated to CEL; JUEL and other languages refused) and
//! resolving gateway default flows.

use std::collections::BTreeMap;

use crate::diag::Diagnostic;
use crate::expr::Expression;
use crate::feel::{feel_to_cel, juel_to_cel};
use crate::model::*;
use crate::xml::{Element, Ns};

use super::{check_other_extensions, ProcessBuilder};

impl<'a, 'd> ProcessBuilder<'a, 'd> {
    pub(super) fn event_gateway(&mut self, el: &Element) -> Option<NodeKind> {
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

    pub(super) fn resolve_flows(&mut self) {
        let mut derived: BTreeMap<String, u32> = BTreeMap::new();
        for (el, scope) in std::mem::take(&mut self.flow_els) {
            check_other_extensions(self, el);
            let id = match el.value("id").map(str::trim).filter(|s| !s.is_empty()) {
                Some(id) => id.to_string(),
                None => {
                    // The id is optional in the BPMN schema. A derived one names the ends,
                    // in document order among flows between the same two nodes, and has a
                    // `:` no XML id can hold, so it never collides with a declared one.
                    let ends = |attr: &str| el.value(attr).map(str::trim).unwrap_or("?");
                    let base = format!("flow:{}->{}", ends("sourceRef"), ends("targetRef"));
                    let n = derived.entry(base.clone()).or_insert(0);
                    *n += 1;
                    let id = if *n == 1 { base } else { format!("{base}#{n}") };
                    self.diags.push(
                        Diagnostic::warning(
                            "Q904",
                            el.pos,
                            format!("the sequenceFlow has no id; it is known as `{id}`"),
                        )
                        .with_help(
                            "add an id, so that the flow keeps its name if the model changes",
                        ),
                    );
                    id
                }
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
                id,
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
        self.reported_if_none(
            found,
            "Q104",
            a.pos,
            || format!("{attr} `{}` names no node of this process", a.value),
            "point the flow at an existing node id",
        )
    }

    fn condition(&mut self, flow: &Element) -> Option<Expression> {
        let c = flow.child(Ns::Bpmn, "conditionExpression")?;
        if c.text.trim().is_empty() {
            self.help(
                "Q102",
                c.pos,
                "the conditionExpression is empty",
                "write a CEL condition, or remove the element",
            );
            return None;
        }
        self.condition_text(c)
    }

    /// The condition written as the text of `c` (a flow's `conditionExpression`, a
    /// conditional event's `condition`): CEL, FEEL (`=…` or a FEEL language), or the JUEL
    /// subset (`${…}`), in the language `c` or the file names. `c`'s text is not empty.
    pub(super) fn condition_text(&mut self, c: &Element) -> Option<Expression> {
        let text = c.text.trim();
        let pos = c.text_pos;
        let own = c.value("language").map(|l| l.trim().to_ascii_lowercase());
        let inherited = own.is_none() && self.ctx.default_language.is_some();
        let lang = own
            .or_else(|| self.ctx.default_language.clone())
            .unwrap_or_default();
        let is_feel = text.starts_with('=') || lang.contains("feel");
        let is_juel = text.starts_with("${") || text.starts_with("#{");
        // A `${…}` text is JUEL unless the condition itself names another language: an
        // inherited `expressionLanguage` is exporter boilerplate (Signavio writes XPath
        // there), and Camunda 7 reads such conditions as JUEL too.
        if is_juel && (inherited || lang.is_empty() || lang.contains("juel")) {
            // The comparison/boolean subset maps one to one (L8); anything else is
            // refused, never approximated.
            return match juel_to_cel(text) {
                Ok(cel) => self.compiled(&cel, pos),
                Err(why) => {
                    self.help(
                        "Q202",
                        pos,
                        format!("JUEL condition `{text}`: {why}"),
                        "keep to comparisons, &&/||/!, literals and variable paths, or write \
                         the condition in CEL (e.g. ${amount > 100} becomes amount > 100)",
                    );
                    None
                }
            };
        }
        if is_juel || lang.contains("juel") {
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
                        "keep to the FEEL subset of docs/vendor-mappings.md (comparisons, and/or/not, if-then-else, \
                         some/every, contexts, list filters and indexes, is defined, the string \
                         functions it lists), or write the condition in CEL",
                    );
                    return None;
                }
            }
        } else {
            text.to_string()
        };
        if is_feel {
            return self.compiled(&source, pos);
        }
        match Expression::compile(&source, pos, self.ctx.opts.max_expr_len) {
            Ok(e) => Some(e),
            Err(e) => {
                self.help(
                    e.code,
                    c.text_file_pos(e.pos),
                    e.message,
                    "fix the CEL condition",
                );
                None
            }
        }
    }

    /// Compiles CEL translated from FEEL or JUEL: its columns are not the file's, so an
    /// error points at the start of the condition text.
    fn compiled(&mut self, cel: &str, pos: Pos) -> Option<Expression> {
        match Expression::compile(cel, pos, self.ctx.opts.max_expr_len) {
            Ok(e) => Some(e),
            Err(e) => {
                self.help(e.code, pos, e.message, "fix the condition");
                None
            }
        }
    }

    pub(super) fn resolve_defaults(&mut self) {
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
            // An activity's default flow is Camunda 7's (taken when no other flow out
            // is); events and other gateways have none in BPMN (§10.4, §13.2.1).
            let gateway = matches!(
                node.kind,
                NodeKind::ExclusiveGateway { .. } | NodeKind::InclusiveGateway { .. }
            );
            if !gateway && (!node.is_activity() || self.meta.event_subs.contains(idx)) {
                errs.push((
                    "Q110",
                    a.pos,
                    format!(
                        "`{}` has a default flow, but only exclusive and inclusive gateways and activities may",
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
                _ => {
                    self.activity_defaults.insert(idx, f);
                }
            }
        }
    }
}
