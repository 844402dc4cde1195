//! Multi-instance activities (§10.2.8): `multiInstanceLoopCharacteristics` on a task or
//! an embedded sub-process, read into a [`MultiInstance`] — in qflow's own form
//! (`q:collection`, `q:elementVariable`, `q:outputCollection`, `q:outputElement`),
//! Zeebe's (`zeebe:loopCharacteristics` inside the characteristics) or Camunda 7's
//! (`camunda:collection`, `camunda:elementVariable`). A form is mapped only where its
//! meaning is one to one; the rest is refused with its position (Q131, Q132), never
//! approximated. `docs/multi-instance.md` has the semantics.

use crate::diag::Diagnostic;
use crate::expr::Expression;
use crate::model::*;
use crate::xml::{Attr, Element, Ns};

use super::ProcessBuilder;

/// The BPMN children of the characteristics that describe data associations or event
/// behaviour qflow does not run.
const REFUSED_CHILDREN: &[&str] = &[
    "loopDataInputRef",
    "loopDataOutputRef",
    "inputDataItem",
    "outputDataItem",
    "complexBehaviorDefinition",
];

/// Camunda 7 attributes of the characteristics about job execution, which qflow's
/// engine does not have: ignored with a warning, as on tasks.
const CAMUNDA_IGNORED: &[&str] = &["asyncBefore", "asyncAfter", "exclusive"];

/// What inside a multi-instance sub-process qflow does not run once per inner
/// instance: a nested multi-instance activity, an event sub-process, an inclusive
/// gateway (its join's reachability is not reckoned per instance), a compensation event
/// (completions and owed handler runs are not kept per instance).
fn refused_inside<'e>(el: &'e Element, mi: &Element) -> Option<(&'static str, Pos)> {
    let mut stack: Vec<&'e Element> = el.children.iter().collect();
    while let Some(c) = stack.pop() {
        if c.ns != Ns::Bpmn || std::ptr::eq(c, mi) {
            continue;
        }
        match c.local.as_str() {
            "multiInstanceLoopCharacteristics" => {
                return Some(("a nested multi-instance activity", c.pos))
            }
            "subProcess" if c.value("triggeredByEvent") == Some("true") => {
                return Some(("an event sub-process", c.pos))
            }
            "inclusiveGateway" => return Some(("an inclusive gateway", c.pos)),
            "compensateEventDefinition" => return Some(("a compensation event", c.pos)),
            _ => {}
        }
        stack.extend(c.children.iter());
    }
    None
}

/// Where a piece of the definition came from, for messages and the expression dialect.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Q,
    Zeebe,
    Camunda,
}

/// The pieces read so far, before they are checked against each other.
#[derive(Default)]
struct Parts {
    cardinality: Option<(Expression, crate::model::Pos)>,
    collection: Option<(Expression, crate::model::Pos, Dialect)>,
    element: Option<(String, crate::model::Pos)>,
    output_collection: Option<(String, crate::model::Pos)>,
    output_element: Option<(Expression, crate::model::Pos)>,
    completion: Option<Expression>,
    camunda: bool,
    refused: bool,
}

impl<'a, 'd> ProcessBuilder<'a, 'd> {
    /// Reads the characteristics `mi` of the activity `el` (node `idx`) into the process's
    /// multi-instance activities, or refuses them.
    pub(super) fn multi_instance(&mut self, el: &Element, mi: &Element, idx: NodeIdx) {
        let is_task = super::TASKS.contains(&el.local.as_str());
        let is_sub = matches!(el.local.as_str(), "subProcess" | "adHocSubProcess")
            && el.value("triggeredByEvent") != Some("true");
        if !is_task && !is_sub {
            return self.help(
                "Q132",
                mi.pos,
                format!("multi-instance <{}> is not supported", el.local),
                "multi-instance runs on tasks and embedded sub-processes",
            );
        }
        let sequential = match mi.value("isSequential").map(str::trim) {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                let at = mi.attr("isSequential").map_or(mi.pos, |a| a.pos);
                return self.help(
                    "Q132",
                    at,
                    format!("isSequential=\"{other}\" is neither true nor false"),
                    "write isSequential=\"true\" or \"false\"",
                );
            }
        };
        if is_sub {
            if let Some((what, pos)) = refused_inside(el, mi) {
                return self.help(
                    "Q132",
                    pos,
                    format!("{what} inside a multi-instance sub-process is not supported"),
                    "move it out of the multi-instance sub-process",
                );
            }
        }
        if let Some(a) = mi.attr("behavior").filter(|a| a.value.trim() != "All") {
            self.help(
                "Q132",
                a.pos,
                format!(
                    "behavior=\"{}\" (events thrown by inner instances) is not supported",
                    a.value
                ),
                "remove the behavior attribute",
            );
        }
        let mut parts = Parts::default();
        self.mi_children(mi, &mut parts);
        self.mi_attributes(mi, &mut parts);
        if parts.refused {
            return;
        }
        let Some(mi_model) = self.mi_assemble(mi, sequential, parts) else {
            return;
        };
        self.multi.insert(idx, mi_model);
    }

    fn mi_children(&mut self, mi: &Element, parts: &mut Parts) {
        for c in &mi.children {
            match (c.ns, c.local.as_str()) {
                (Ns::Bpmn, "loopCardinality") => {
                    if let Some(e) = self.mi_expression(c, "loopCardinality") {
                        parts.cardinality = Some((e, c.pos));
                    } else {
                        parts.refused = true;
                    }
                }
                (Ns::Bpmn, "completionCondition") => {
                    match self.mi_expression(c, "completionCondition") {
                        Some(e) => parts.completion = Some(e),
                        None => parts.refused = true,
                    }
                }
                (Ns::Bpmn, "extensionElements") => self.mi_extensions(c, parts),
                (Ns::Bpmn, l) if REFUSED_CHILDREN.contains(&l) => {
                    parts.refused = true;
                    self.help(
                        "Q132",
                        c.pos,
                        format!("<{l}> (multi-instance over data associations) is not supported"),
                        "name the input collection with q:collection (or zeebe:loopCharacteristics, camunda:collection)",
                    );
                }
                (Ns::Bpmn, l) => {
                    parts.refused = true;
                    self.help(
                        "Q132",
                        c.pos,
                        format!("<{l}> inside <multiInstanceLoopCharacteristics> is not supported"),
                        "remove it",
                    );
                }
                _ => {}
            }
        }
    }

    fn mi_extensions(&mut self, x: &Element, parts: &mut Parts) {
        for c in &x.children {
            match (c.ns, c.local.as_str()) {
                (Ns::Zeebe, "loopCharacteristics") => self.zeebe_loop(c, parts),
                (Ns::Camunda, "failedJobRetryTimeCycle") => self.diags.push(
                    Diagnostic::warning(
                        "Q902",
                        c.pos,
                        "camunda:failedJobRetryTimeCycle is ignored: qflow has no job executor",
                    )
                    .with_help("put a q:retry on the inner task"),
                ),
                (Ns::Bpmn, _) => {}
                _ => {
                    parts.refused = true;
                    self.help(
                        "Q132",
                        c.pos,
                        format!(
                            "<{}> inside a multi-instance's extensionElements is not supported",
                            c.local
                        ),
                        "only zeebe:loopCharacteristics is read there",
                    );
                }
            }
        }
    }

    /// `<zeebe:loopCharacteristics inputCollection="=items" inputElement="item"
    /// outputCollection="results" outputElement="=result"/>`.
    fn zeebe_loop(&mut self, c: &Element, parts: &mut Parts) {
        for a in &c.attrs {
            if a.ns != Ns::None {
                continue;
            }
            match a.local.as_str() {
                "inputCollection" => match self.mi_attr_expression(a, Dialect::Zeebe) {
                    Some(e) => parts.collection = Some((e, a.pos, Dialect::Zeebe)),
                    None => parts.refused = true,
                },
                "inputElement" => self.mi_name(a, &mut parts.element, &mut parts.refused),
                "outputCollection" => {
                    self.mi_name(a, &mut parts.output_collection, &mut parts.refused)
                }
                "outputElement" => match self.mi_attr_expression(a, Dialect::Zeebe) {
                    Some(e) => parts.output_element = Some((e, a.pos)),
                    None => parts.refused = true,
                },
                other => {
                    parts.refused = true;
                    self.help(
                        "Q132",
                        a.pos,
                        format!("zeebe:loopCharacteristics {other} is not supported"),
                        "use inputCollection, inputElement, outputCollection and outputElement",
                    );
                }
            }
        }
    }

    fn mi_attributes(&mut self, mi: &Element, parts: &mut Parts) {
        for a in &mi.attrs {
            match (a.ns, a.local.as_str()) {
                (Ns::Q, "collection") => match self.mi_attr_expression(a, Dialect::Q) {
                    Some(e) => parts.collection = Some((e, a.pos, Dialect::Q)),
                    None => parts.refused = true,
                },
                (Ns::Q, "elementVariable") | (Ns::Camunda, "elementVariable") => {
                    parts.camunda |= a.ns == Ns::Camunda;
                    self.mi_name(a, &mut parts.element, &mut parts.refused)
                }
                (Ns::Q, "outputCollection") => {
                    self.mi_name(a, &mut parts.output_collection, &mut parts.refused)
                }
                (Ns::Q, "outputElement") => match self.mi_attr_expression(a, Dialect::Q) {
                    Some(e) => parts.output_element = Some((e, a.pos)),
                    None => parts.refused = true,
                },
                (Ns::Camunda, "collection") => {
                    parts.camunda = true;
                    match self.mi_attr_expression(a, Dialect::Camunda) {
                        Some(e) => parts.collection = Some((e, a.pos, Dialect::Camunda)),
                        None => parts.refused = true,
                    }
                }
                (Ns::Camunda, l) if CAMUNDA_IGNORED.contains(&l) => {
                    self.diags.push(Diagnostic::warning(
                        "Q902",
                        a.pos,
                        format!(
                            "camunda:{l} on a multi-instance is ignored: qflow has no job executor"
                        ),
                    ))
                }
                (Ns::Q, l) | (Ns::Camunda, l) | (Ns::Zeebe, l) => {
                    parts.refused = true;
                    self.help(
                        "Q132",
                        a.pos,
                        format!("{l} on <multiInstanceLoopCharacteristics> is not supported"),
                        "use q:collection, q:elementVariable, q:outputCollection and q:outputElement",
                    );
                }
                _ => {}
            }
        }
    }

    /// Checks the pieces against each other: exactly one of a cardinality and a
    /// collection (Q131), an element or output element only with what they belong to.
    fn mi_assemble(&mut self, mi: &Element, sequential: bool, p: Parts) -> Option<MultiInstance> {
        let items = match (p.cardinality, p.collection) {
            (Some((c, _)), None) => MultiItems::Cardinality(c),
            (None, Some((c, _, _))) => MultiItems::Collection(c),
            // Camunda 7 takes both: the count from the cardinality, the items by index.
            (Some((cardinality, _)), Some((collection, _, Dialect::Camunda))) => {
                MultiItems::Indexed {
                    cardinality,
                    collection,
                }
            }
            (None, None) => {
                self.help(
                    "Q131",
                    mi.pos,
                    "a multi-instance activity needs a loopCardinality or an input collection",
                    "add <loopCardinality>3</loopCardinality>, or q:collection=\"items\" with q:elementVariable",
                );
                return None;
            }
            (Some(_), Some((_, pos, _))) => {
                self.help(
                    "Q131",
                    pos,
                    "a multi-instance activity has both a loopCardinality and an input collection",
                    "keep one: the collection's length is the number of inner instances \
                     (only camunda:collection may stand beside a loopCardinality, as Camunda 7 \
                     reads it)",
                );
                return None;
            }
        };
        if let (Some((_, pos)), MultiItems::Cardinality(_)) = (&p.element, &items) {
            self.help(
                "Q132",
                *pos,
                "an element variable without an input collection",
                "name the collection the element is taken from, or remove the element variable",
            );
            return None;
        }
        if let (Some((_, pos)), None) = (&p.output_element, &p.output_collection) {
            self.help(
                "Q132",
                *pos,
                "an output element without an output collection",
                "name the output collection the elements are gathered in",
            );
            return None;
        }
        Some(MultiInstance {
            sequential,
            items,
            element: p.element.map(|(n, _)| n),
            output_collection: p.output_collection.map(|(n, _)| n),
            output_element: p.output_element.map(|(e, _)| e),
            completion: p.completion,
            inner: NodeIdx(u128::MAX),
            counter_base: if p.camunda { 0 } else { 1 },
        })
    }

    /// A variable name in an attribute (Q208 when it is not one).
    fn mi_name(&mut self, a: &Attr, slot: &mut Option<(String, Pos)>, refused: &mut bool) {
        let name = a.value.trim();
        let mut chars = name.chars();
        let plain = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if plain {
            *slot = Some((name.to_owned(), a.pos));
        } else {
            *refused = true;
            self.help(
                "Q208",
                a.pos,
                format!("{} `{}` is not a variable name", a.local, a.value),
                "use letters, digits and _ (not starting with a digit)",
            );
        }
    }

    /// An expression in an attribute: `=…` FEEL (in the subset), `${…}` JUEL (in the
    /// subset), a plain variable name for Camunda 7 (which reads one so), else CEL.
    fn mi_attr_expression(&mut self, a: &Attr, dialect: Dialect) -> Option<Expression> {
        let text = a.value.trim();
        let what = a.local.as_str();
        let is_name = dialect == Dialect::Camunda
            && !text.is_empty()
            && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if is_name {
            return self.mi_compile(text, a.pos, what);
        }
        self.mi_dialect_expression(text, a.pos, what, dialect == Dialect::Zeebe)
    }

    /// The text of `<loopCardinality>` or `<completionCondition>`.
    fn mi_expression(&mut self, c: &Element, what: &str) -> Option<Expression> {
        let text = c.text.trim();
        if text.is_empty() {
            self.help(
                "Q102",
                c.pos,
                format!("the {what} is empty"),
                "write an expression, or remove the element",
            );
            return None;
        }
        self.mi_dialect_expression(text, c.text_pos, what, false)
    }

    pub(super) fn mi_dialect_expression(
        &mut self,
        text: &str,
        pos: Pos,
        what: &str,
        feel_only: bool,
    ) -> Option<Expression> {
        if let Some(body) = text.strip_prefix('=') {
            return match crate::feel::feel_to_cel(body) {
                Ok(cel) => self.mi_compile(&cel, pos, what),
                Err(why) => {
                    self.help(
                        "Q203",
                        pos,
                        format!("FEEL {what} `{text}`: {why}"),
                        "keep to literals, variable paths and the FEEL subset, or write it in CEL with q:",
                    );
                    None
                }
            };
        }
        if feel_only {
            // Zeebe reads a value without `=` as a static string: never a collection.
            self.help(
                "Q132",
                pos,
                format!("zeebe {what} `{text}` is not an expression (it does not start with `=`)"),
                "write it as a FEEL expression, e.g. inputCollection=\"=items\"",
            );
            return None;
        }
        if text.starts_with("${") || text.starts_with("#{") {
            return match crate::feel::juel_to_cel(text) {
                Ok(cel) => self.mi_compile(&cel, pos, what),
                Err(why) => {
                    self.help(
                        "Q202",
                        pos,
                        format!("JUEL {what} `{text}`: {why}"),
                        "keep to comparisons, &&/||/!, literals and variable paths, or write it in CEL",
                    );
                    None
                }
            };
        }
        self.mi_compile(text, pos, what)
    }

    fn mi_compile(&mut self, cel: &str, pos: Pos, what: &str) -> Option<Expression> {
        match Expression::compile(cel, pos, self.ctx.opts.max_expr_len) {
            Ok(e) => Some(e),
            Err(e) => {
                self.help(
                    e.code,
                    pos,
                    format!("{what}: {}", e.message),
                    "fix the expression",
                );
                None
            }
        }
    }
}
