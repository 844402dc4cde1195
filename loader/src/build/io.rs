//! Vendor input/output mappings (L8): Zeebe's `zeebe:ioMapping` and Camunda 7's
//! `camunda:inputOutput`, read into [`Mapping`]s that keep the vendor's semantics
//! ([`MappingStyle`]) — on the tasks qflow runs, on the events a token passes
//! through where the vendor allows them there, and (Zeebe's) on embedded sub-processes.
//!
//! A source is mapped only when its meaning is one to one: a literal, a variable path,
//! or an expression in the FEEL or JUEL subset `crate::feel` translates. Everything
//! else (`camunda:list`, `camunda:map`, `camunda:script`, text around a `${…}`, a
//! nested target, FEEL or JUEL beyond the subset) is refused with its position, never
//! approximated. Where the vendor itself refuses a mapping (Camunda 7 on gateways,
//! start and boundary events, outputs on end events) it is refused here too.

use std::collections::BTreeMap;

use crate::expr::Expression;
use crate::model::*;
use crate::xml::{Element, Ns};

use super::ProcessBuilder;

/// The mappings one `zeebe:ioMapping` or `camunda:inputOutput` element gives.
pub(super) struct VendorIo {
    pub(super) style: MappingStyle,
    pub(super) inputs: Vec<Mapping>,
    pub(super) outputs: Vec<Mapping>,
    /// The mapping element's position.
    pub(super) pos: Pos,
    /// Every input and output parsed (none was refused): only then is the list used.
    pub(super) complete: bool,
}

impl VendorIo {
    fn what(&self) -> &'static str {
        match self.style {
            MappingStyle::Camunda => "camunda:inputOutput",
            _ => "zeebe:ioMapping",
        }
    }
}

/// A CEL string literal of `text`: what a static vendor value is.
/// A plain variable name as the vendor mappings take it: ASCII letters, digits and `_`,
/// not starting with a digit.
fn plain_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Translates a Camunda 7 JUEL value — one `${…}` (its value keeps its type), or a
/// composite text (`Order ${id} shipped`: literal text and `${…}` parts, JSP 2.1 EL
/// §1.2.1.1) — into CEL source. A composite's value is a string: the literal parts as
/// written and each part's value coerced to text by `juel_text` (null as the empty
/// string; a double, list or map fails at run time). An escaped `\\${`, `#{` mixed with
/// `${`, a quoted string inside a part and a part that does not close are refused.
fn juel_value(text: &str) -> Result<String, String> {
    let t = text.trim();
    let composite = t.matches("${").count() + t.matches("#{").count() > 1
        || !(t.starts_with("${") || t.starts_with("#{"))
        || !t.ends_with('}');
    if !composite {
        return crate::feel::juel_to_cel(t);
    }
    if t.contains(r"\${") || t.contains(r"\#{") {
        return Err(r"an escaped `\${` in a JUEL text is not supported".to_string());
    }
    if t.contains("${") && t.contains("#{") {
        return Err("a JUEL text mixes `${…}` and `#{…}`, which JUEL refuses".to_string());
    }
    let mut parts = Vec::new();
    let mut rest = t;
    while let Some(start) = rest.find("${").or_else(|| rest.find("#{")) {
        if start > 0 {
            parts.push(cel_string(&rest[..start]));
        }
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| "a `${` in the JUEL text does not close".to_string())?;
        let inner = &after[..end];
        if inner.contains('\'') || inner.contains('"') {
            return Err(
                "a quoted string inside a part of a JUEL composite text is not supported"
                    .to_string(),
            );
        }
        let cel = crate::feel::juel_to_cel(&format!("${{{inner}}}"))?;
        parts.push(format!("{}({cel})", crate::expr::feel_support::JUEL_TEXT));
        rest = &after[end + 1..];
    }
    if !rest.is_empty() {
        parts.push(cel_string(rest));
    }
    Ok(parts.join(" + "))
}

pub(super) fn cel_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Where a vendor mapping's target may be a nested path (`order.total`).
#[derive(Clone, Copy)]
enum Nested {
    /// A Zeebe output: yes, it creates or updates the property.
    Output,
    /// A Zeebe input: yes, it builds a local object (failing at run time where Zeebe
    /// versions differ: the root is also a variable outside).
    ZeebeInput,
    /// A Camunda 7 parameter: no (Camunda 7 names a variable).
    Camunda,
}

/// The most segments a nested output target may have (`a.b.c.d.e.f.g.h`).
const NESTED_TARGET_DEPTH_MAX: usize = 8;

impl<'a, 'd> ProcessBuilder<'a, 'd> {
    /// `<zeebe:ioMapping>`: `<zeebe:input source="…" target="…"/>` and
    /// `<zeebe:output …/>`. A source starting with `=` is FEEL (in the subset); any other
    /// text is a static string; no source is null (as Zeebe reads them). A mapping that
    /// reads or writes the target of an earlier one of its kind is refused: Zeebe has
    /// evaluated the list both as one FEEL context (no mapping sees another) and one by
    /// one (each sees the ones before), by version and engine setting, so its meaning is
    /// not one.
    pub(super) fn read_zeebe_io(&mut self, c: &Element) -> VendorIo {
        let mut io = VendorIo {
            style: MappingStyle::Zeebe,
            inputs: Vec::new(),
            outputs: Vec::new(),
            pos: c.pos,
            complete: true,
        };
        for m in &c.children {
            let output = match (m.ns, m.local.as_str()) {
                (Ns::Zeebe, "input") => false,
                (Ns::Zeebe, "output") => true,
                _ => {
                    self.help(
                        "Q401",
                        m.pos,
                        format!("<{}> inside zeebe:ioMapping is not supported", m.local),
                        "a zeebe:ioMapping holds zeebe:input and zeebe:output elements",
                    );
                    io.complete = false;
                    continue;
                }
            };
            let Some(mapping) = self.zeebe_mapping(m) else {
                io.complete = false;
                continue;
            };
            let earlier = if output { &io.outputs } else { &io.inputs };
            // Reckoned on the variable a target writes (`order` for `order.total`): a
            // later mapping that reads it, or writes it or a path above or below it.
            let root = |t: &str| t.split('.').next().unwrap_or(t).to_owned();
            let overlaps = |a: &str, b: &str| {
                a == b || a.starts_with(&format!("{b}.")) || b.starts_with(&format!("{a}."))
            };
            if let Some(e) = earlier.iter().find(|e| {
                overlaps(&e.target, &mapping.target)
                    || mapping.source.reads_variable(&root(&e.target))
            }) {
                self.help(
                    "Q401",
                    m.pos,
                    format!(
                        "zeebe:{} `{}` {} `{}`, the target of an earlier mapping: Zeebe versions differ on whether a mapping sees the ones before it",
                        m.local,
                        mapping.target,
                        if overlaps(&e.target, &mapping.target) { "writes" } else { "reads" },
                        e.target
                    ),
                    "give each mapping its own target and read only variables the element sees",
                );
                io.complete = false;
                continue;
            }
            if output {
                io.outputs.push(mapping);
            } else {
                io.inputs.push(mapping);
            }
        }
        io
    }

    fn zeebe_mapping(&mut self, m: &Element) -> Option<Mapping> {
        let what = format!("zeebe:{}", m.local);
        let nested = if m.local == "output" {
            Nested::Output
        } else {
            Nested::ZeebeInput
        };
        let target = self.vendor_target(m, "target", &what, nested)?;
        let (cel, pos) = match m.attr("source") {
            None => ("null".to_owned(), m.pos),
            Some(a) => {
                let text = a.value.trim();
                match text.strip_prefix('=') {
                    Some(body) => match crate::feel::feel_to_cel(body) {
                        Ok(cel) => (cel, a.pos),
                        Err(why) => {
                            self.help(
                                "Q203",
                                a.pos,
                                format!("{what} source `{text}`: {why}"),
                                "keep to literals, variable paths and the FEEL subset (docs/diagnostics.md, Q203), or map it with q:input / q:output in CEL",
                            );
                            return None;
                        }
                    },
                    None => (cel_string(&a.value), a.pos),
                }
            }
        };
        let source = self.mapping_expression(&cel, pos, &what)?;
        Some(Mapping { target, source })
    }

    /// `<camunda:inputOutput>`: `<camunda:inputParameter name="…">` and
    /// `<camunda:outputParameter name="…">`, whose text is a JUEL `${…}` (in the subset),
    /// a constant string, or nothing (null), as Camunda 7 reads it.
    pub(super) fn read_camunda_io(&mut self, c: &Element) -> VendorIo {
        let mut io = VendorIo {
            style: MappingStyle::Camunda,
            inputs: Vec::new(),
            outputs: Vec::new(),
            pos: c.pos,
            complete: true,
        };
        for m in &c.children {
            let output = match (m.ns, m.local.as_str()) {
                (Ns::Camunda, "inputParameter") => false,
                (Ns::Camunda, "outputParameter") => true,
                _ => {
                    self.help(
                        "Q401",
                        m.pos,
                        format!("<{}> inside camunda:inputOutput is not supported", m.local),
                        "a camunda:inputOutput holds camunda:inputParameter and camunda:outputParameter elements",
                    );
                    io.complete = false;
                    continue;
                }
            };
            match self.camunda_parameter(m) {
                Some(mapping) if output => io.outputs.push(mapping),
                Some(mapping) => io.inputs.push(mapping),
                None => io.complete = false,
            }
        }
        io
    }

    fn camunda_parameter(&mut self, m: &Element) -> Option<Mapping> {
        let what = format!("camunda:{}", m.local);
        let target = self.vendor_target(m, "name", &what, Nested::Camunda)?;
        if let Some(inner) = m.children.first() {
            let help = match inner.local.as_str() {
                "list" | "map" => "build the value in the worker or handler, or map single values",
                "script" => "qflow runs no scripts; map a path or a literal",
                _ => "a parameter holds a `${…}` expression, a constant, or nothing",
            };
            self.help(
                "Q401",
                inner.pos,
                format!(
                    "{what} `{target}`: a <{}> value is not supported",
                    inner.local
                ),
                help,
            );
            return None;
        }
        let text = m.text.trim();
        let cel = if text.is_empty() {
            "null".to_owned()
        } else if text.contains("${") || text.contains("#{") {
            match juel_value(text) {
                Ok(cel) => cel,
                Err(why) => {
                    self.help(
                        "Q203",
                        m.text_pos,
                        format!("{what} `{target}`: JUEL `{text}`: {why}"),
                        "keep to one `${…}` with literals, variable paths and the JUEL subset (docs/diagnostics.md, Q203), or map it with q:input / q:output in CEL",
                    );
                    return None;
                }
            }
        } else {
            cel_string(text)
        };
        let source = self.mapping_expression(&cel, m.text_pos, &what)?;
        Some(Mapping { target, source })
    }

    /// One `camunda:in` / `camunda:out` of a call activity: `variables="all"`, or a
    /// `source` variable (or a JUEL `sourceExpression`) to a `target` variable. What asks
    /// for more than qflow has — `businessKey`, `local="true"`, both or neither of source
    /// and expression — is refused (Q401) where it is written.
    pub(super) fn camunda_call_variable(&mut self, c: &Element) -> super::extensions::CallVariable {
        use super::extensions::CallVariable;
        let what = format!("camunda:{}", c.local);
        for a in &c.attrs {
            let refused = match a.local.as_str() {
                "businessKey" => Some("qflow instances have no business key; pass it as a variable"),
                "local" if a.value.trim() == "true" => {
                    Some("qflow keeps no local variables of a call activity; map the values by name")
                }
                "source" | "sourceExpression" | "target" | "variables" | "local" => None,
                _ => Some("camunda:in and camunda:out take source, sourceExpression, target and variables"),
            };
            if let Some(help) = refused {
                self.help(
                    "Q401",
                    a.pos,
                    format!("{what} {}=\"{}\" is not supported", a.local, a.value),
                    help,
                );
                return CallVariable::Refused;
            }
        }
        if let Some(a) = c.attr("variables") {
            if a.value.trim() == "all"
                && c.attr("source").is_none()
                && c.attr("sourceExpression").is_none()
            {
                return CallVariable::All(c.pos);
            }
            self.help(
                "Q401",
                a.pos,
                format!(
                    "{what} variables=\"{}\" beside a source, or other than \"all\"",
                    a.value
                ),
                "write variables=\"all\" alone, or a source and a target",
            );
            return CallVariable::Refused;
        }
        let Some(target) = self.vendor_target(c, "target", &what, Nested::Camunda) else {
            return CallVariable::Refused;
        };
        let (cel, expression, pos) = match (c.attr("source"), c.attr("sourceExpression")) {
            (Some(a), None) => {
                let name = a.value.trim();
                if !plain_name(name) || crate::feel::is_cel_reserved(name) {
                    self.help(
                        "Q208",
                        a.pos,
                        format!("{what} source `{name}` is not a variable name"),
                        "name a variable (letters, digits and _), or use sourceExpression=\"${…}\"",
                    );
                    return CallVariable::Refused;
                }
                // An `out` reads the child's variable, which a call's outputs see as
                // `result`; an `in` reads the parent's.
                let cel = if c.local == "out" {
                    format!("result.{name}")
                } else {
                    name.to_owned()
                };
                (cel, false, a.pos)
            }
            (None, Some(a)) => match crate::feel::juel_to_cel(&a.value) {
                Ok(cel) => (cel, true, a.pos),
                Err(why) => {
                    self.help(
                        "Q203",
                        a.pos,
                        format!("{what} `{target}`: JUEL `{}`: {why}", a.value.trim()),
                        "keep to one `${…}` with literals, variable paths and the JUEL subset",
                    );
                    return CallVariable::Refused;
                }
            },
            _ => {
                self.help(
                    "Q102",
                    c.pos,
                    format!("{what} `{target}` needs exactly one of source and sourceExpression"),
                    "write source=\"<variable>\" or sourceExpression=\"${…}\"",
                );
                return CallVariable::Refused;
            }
        };
        match self.mapping_expression(&cel, pos, &what) {
            Some(source) => CallVariable::Mapped {
                target,
                source,
                expression,
                pos,
            },
            None => CallVariable::Refused,
        }
    }

    /// A Camunda 7 field injection, `<camunda:field name="x" …>`, on a task bound to
    /// Java code: read as an input parameter of the same name (a local variable the
    /// worker is given), its value `stringValue="…"` or `<camunda:string>` (a constant)
    /// or `expression="${…}"` or `<camunda:expression>` (JUEL in the subset). Exactly one
    /// value; anything else is refused.
    pub(super) fn camunda_field(&mut self, m: &Element) -> Option<Mapping> {
        let what = "camunda:field";
        let target = self.vendor_target(m, "name", what, Nested::Camunda)?;
        let mut values: Vec<(bool, String, Pos)> = Vec::new();
        for (attr, expression) in [("stringValue", false), ("expression", true)] {
            if let Some(a) = m.attr(attr) {
                values.push((expression, a.value.clone(), a.pos));
            }
        }
        for c in &m.children {
            match (c.ns, c.local.as_str()) {
                (Ns::Camunda, "string") => {
                    values.push((false, c.text.trim().to_owned(), c.text_pos))
                }
                (Ns::Camunda, "expression") => {
                    values.push((true, c.text.trim().to_owned(), c.text_pos))
                }
                _ => {
                    self.help(
                        "Q401",
                        c.pos,
                        format!(
                            "<{}> inside camunda:field `{target}` is not supported",
                            c.local
                        ),
                        "a field holds a camunda:string or a camunda:expression",
                    );
                    return None;
                }
            }
        }
        let (expression, text, pos) = match values.len() {
            1 => values.remove(0),
            0 => {
                self.help(
                    "Q102",
                    m.pos,
                    format!("camunda:field `{target}` has no value"),
                    "give it stringValue=\"…\", expression=\"${…}\", a <camunda:string> or a <camunda:expression>",
                );
                return None;
            }
            _ => {
                self.help(
                    "Q401",
                    values[1].2,
                    format!("camunda:field `{target}` has more than one value"),
                    "keep one of stringValue, expression, <camunda:string>, <camunda:expression>",
                );
                return None;
            }
        };
        let cel = if expression {
            match juel_value(text.trim()) {
                Ok(cel) => cel,
                Err(why) => {
                    self.help(
                        "Q203",
                        pos,
                        format!("{what} `{target}`: JUEL `{}`: {why}", text.trim()),
                        "keep to one `${…}` with literals, variable paths and the JUEL subset (docs/diagnostics.md, Q203)",
                    );
                    return None;
                }
            }
        } else {
            cel_string(&text)
        };
        let source = self.mapping_expression(&cel, pos, what)?;
        Some(Mapping { target, source })
    }

    /// Adds a delegate task's field injections to its mappings as Camunda 7 input
    /// parameters (creating the `camunda:inputOutput` it may not have). A field of the
    /// name of an input parameter, or whose expression reads one (a field is evaluated
    /// over the activity's scope, a parameter over the outer one), is refused; so are
    /// fields beside Zeebe or `q:` mappings.
    pub(super) fn add_fields(
        &mut self,
        vendor: &mut Option<VendorIo>,
        fields: Vec<(Mapping, Pos)>,
        q_pos: Option<Pos>,
    ) {
        let Some(first) = fields.first().map(|f| f.1) else {
            return;
        };
        if vendor
            .as_ref()
            .is_some_and(|io| io.style != MappingStyle::Camunda)
            || q_pos.is_some()
        {
            self.help(
                "Q401",
                first,
                "camunda:field beside zeebe:ioMapping or q:input / q:output is not supported",
                "write the fields as camunda:inputParameter elements, or keep to one dialect",
            );
            if let Some(io) = vendor {
                io.complete = false;
            }
            return;
        }
        let io = vendor.get_or_insert_with(|| VendorIo {
            style: MappingStyle::Camunda,
            inputs: Vec::new(),
            outputs: Vec::new(),
            pos: first,
            complete: true,
        });
        // Looked up by name, so that a model of many fields and parameters costs what its
        // size does, not its square.
        let parameters: std::collections::BTreeSet<String> =
            io.inputs.iter().map(|p| p.target.clone()).collect();
        let mut read_by: std::collections::BTreeMap<String, String> = Default::default();
        for o in &io.outputs {
            for r in o.source.read_names() {
                read_by.entry(r.clone()).or_insert_with(|| o.target.clone());
            }
        }
        let mut added: std::collections::BTreeSet<String> = Default::default();
        for (field, pos) in fields {
            let clash = if parameters.contains(&field.target) {
                Some((field.target.clone(), true))
            } else {
                field
                    .source
                    .read_names()
                    .iter()
                    .find(|r| parameters.contains(*r))
                    .map(|r| (r.clone(), false))
            };
            let twice = added.contains(&field.target);
            let read_by_output = read_by.get(&field.target).cloned();
            if let Some(output) = read_by_output {
                self.help(
                    "Q401",
                    pos,
                    format!(
                        "camunda:field `{}` is read by the output parameter `{output}`: in \
                         Camunda 7 a field is no variable and the output reads the process \
                         variable, in qflow it would read the field",
                        field.target
                    ),
                    "rename the field, or map the value with a camunda:inputParameter",
                );
                io.complete = false;
                continue;
            }
            if let Some((parameter, same)) = clash {
                let how = if same { "has the name of" } else { "reads" };
                self.help(
                    "Q401",
                    pos,
                    format!(
                        "camunda:field `{}` {how} the input parameter `{}`: Camunda 7 \
                         evaluates a field over the activity's locals and a parameter over \
                         the outer scope",
                        field.target, parameter
                    ),
                    "rename the field, or read the value the parameter reads",
                );
                io.complete = false;
            } else if twice {
                self.help(
                    "Q308",
                    pos,
                    format!("camunda:field `{}` appears twice", field.target),
                    "keep one field of each name",
                );
                io.complete = false;
            } else {
                added.insert(field.target.clone());
                io.inputs.push(field);
            }
        }
    }

    /// The variable a vendor mapping writes: a plain name (Q208 otherwise), or for a
    /// Zeebe mapping a nested path such as `order.total`: an output creates or updates
    /// that property and keeps the rest of the variable (Zeebe's one meaning across
    /// versions); an input builds a local object with its siblings, and fails at run time
    /// where versions differ (`qflow_core`'s `vendor_io::locals`). A nested target of a
    /// Camunda 7 parameter (a variable name there) is refused (Q401).
    fn vendor_target(
        &mut self,
        m: &Element,
        attr: &str,
        what: &str,
        nested: Nested,
    ) -> Option<String> {
        let Some(a) = m.attr(attr) else {
            self.help(
                "Q208",
                m.pos,
                format!("{what} has no {attr}"),
                &format!("add {attr}=\"<variable>\""),
            );
            return None;
        };
        let name = a.value.trim();
        let plain = plain_name;
        if plain(name) {
            return Some(name.to_owned());
        }
        if name.contains('.') && name.split('.').all(plain) {
            match nested {
                Nested::Output | Nested::ZeebeInput
                    if name.split('.').count() <= NESTED_TARGET_DEPTH_MAX =>
                {
                    return Some(name.to_owned());
                }
                Nested::Output | Nested::ZeebeInput => self.help(
                    "Q401",
                    a.pos,
                    format!(
                        "{what} {attr} `{name}` nests deeper than {NESTED_TARGET_DEPTH_MAX} levels"
                    ),
                    "map to a shallower path",
                ),
                Nested::Camunda => self.help(
                    "Q401",
                    a.pos,
                    format!(
                        "{what} {attr} `{name}` writes a nested property, which Camunda 7 \
                         does not (a parameter names a variable)"
                    ),
                    "map to a whole variable, and build the object in the worker or handler",
                ),
            }
        } else {
            self.help(
                "Q208",
                a.pos,
                format!("{what} {attr} `{}` is not a variable name", a.value),
                "use letters, digits and _ (not starting with a digit)",
            );
        }
        None
    }

    /// Compiles a translated source: its columns are not the file's, so an error points
    /// at the source's start.
    fn mapping_expression(&mut self, cel: &str, pos: Pos, what: &str) -> Option<Expression> {
        match Expression::compile(cel, pos, self.ctx.opts.max_expr_len) {
            Ok(e) => Some(e),
            Err(e) => {
                self.help(
                    e.code,
                    pos,
                    format!("{what}: {}", e.message),
                    "simplify the mapping's source",
                );
                None
            }
        }
    }

    /// The mappings a task runs with: its `q:input` / `q:output` (`q`), or the vendor's,
    /// with the vendor's semantics. Both on one task is refused: their meanings differ.
    /// A send task keeps its vendor mappings too: its message carries the variables with
    /// the input locals over them, and the outputs run as it completes.
    pub(super) fn task_mappings(
        &mut self,
        q: (Vec<Mapping>, Vec<Mapping>),
        vendor: Option<VendorIo>,
        q_pos: Option<Pos>,
    ) -> (Vec<Mapping>, Vec<Mapping>, MappingStyle) {
        let Some(io) = vendor else {
            return (q.0, q.1, MappingStyle::Q);
        };
        if let Some(at) = q_pos {
            self.help(
                "Q401",
                io.pos,
                format!(
                    "{} beside q:input / q:output (at {at}): the two mean different things",
                    io.what()
                ),
                "keep one of them",
            );
            return (q.0, q.1, MappingStyle::Q);
        }
        if !io.complete {
            return (Vec::new(), Vec::new(), MappingStyle::Q);
        }
        (io.inputs, io.outputs, io.style)
    }

    /// A vendor mapping element on something that is not a task: kept on a none start,
    /// none intermediate throw or none end event where the vendor allows it there (and
    /// Camunda's on a signal throw), refused (Q401, with the vendor's rule) everywhere
    /// else.
    pub(super) fn event_io(&mut self, el: &Element, c: &Element) {
        let io = if c.ns == Ns::Zeebe {
            self.read_zeebe_io(c)
        } else {
            self.read_camunda_io(c)
        };
        if matches!(el.local.as_str(), "subProcess" | "adHocSubProcess") {
            return self.sub_process_io(el, c, io);
        }
        let definitions: Vec<&str> = el
            .children
            .iter()
            .filter(|d| d.ns == Ns::Bpmn && d.local.ends_with("EventDefinition"))
            .map(|d| d.local.as_str())
            .collect();
        // A Camunda 7 signal throw passes no variables with its signal (that takes
        // `camunda:in`, refused), so its mappings are a none throw's: locals, and outputs
        // written as the token passes. (Zeebe's inputs on a signal throw are the signal's
        // variables: not the same meaning, refused.)
        let none_event = definitions.is_empty()
            || (io.style == MappingStyle::Camunda
                && el.local == "intermediateThrowEvent"
                && definitions == ["signalEventDefinition"]);
        // Zeebe's output mappings on a message catch (intermediate or boundary): the
        // message's variables are locals of the event and only the outputs reach the
        // instance, applied as the message is caught (Zeebe docs, "Variable mappings" of
        // message events).
        let zeebe_message_catch = io.style == MappingStyle::Zeebe
            && io.inputs.is_empty()
            && matches!(
                el.local.as_str(),
                "intermediateCatchEvent" | "boundaryEvent"
            )
            && definitions == ["messageEventDefinition"];
        let refusal = match (io.style, el.local.as_str()) {
            _ if zeebe_message_catch => None,
            _ if !matches!(
                el.local.as_str(),
                "startEvent" | "intermediateThrowEvent" | "endEvent"
            ) =>
            {
                Some(format!(
                    "{} on a <{}> is not supported{}",
                    io.what(),
                    el.local,
                    if io.style == MappingStyle::Camunda
                        && (el.local.ends_with("Gateway") || el.local == "boundaryEvent")
                    {
                        " (Camunda 7 refuses it there too)"
                    } else {
                        ""
                    }
                ))
            }
            _ if !none_event => Some(format!(
                "{} on a <{}> with an event definition is not supported",
                io.what(),
                el.local
            )),
            (MappingStyle::Camunda, "startEvent") => Some(
                "camunda:inputOutput on a <startEvent> is not supported (Camunda 7 refuses it there too)"
                    .to_owned(),
            ),
            (MappingStyle::Camunda, "endEvent") if !io.outputs.is_empty() => Some(
                "camunda:outputParameter on an <endEvent> is not supported (Camunda 7 refuses it there too)"
                    .to_owned(),
            ),
            (MappingStyle::Zeebe, _) if !io.inputs.is_empty() => Some(format!(
                "zeebe:input on a <{}> is not supported: an event passed through has output mappings only",
                el.local
            )),
            _ => None,
        };
        if let Some(message) = refusal {
            self.help(
                "Q401",
                c.pos,
                message,
                "move the mapping to a task, or remove it",
            );
            return;
        }
        self.keep_mappings(c, io, |b| &mut b.event_mappings);
    }

    /// A vendor mapping on a `<subProcess>` (`el`, the mapping element `c`), Zeebe's or
    /// Camunda 7's on an embedded sub-process: its inputs are local variables of each
    /// scope instance (Camunda's each over the variables around it, Zeebe's over those and
    /// the inputs before), its outputs are written to the scope around it as it
    /// completes (Camunda 8 docs, "Embedded subprocess", "Variable mappings"; Camunda 7
    /// docs, "Input/Output Variable Mapping": local variables of the sub-process's scope,
    /// outputs set on the parent). Writes from inside reach a local of the name, else go
    /// outward, in both. Refused (Q401): on an event sub-process.
    fn sub_process_io(&mut self, el: &Element, c: &Element, io: VendorIo) {
        let refusal = if el.value("triggeredByEvent") == Some("true") {
            Some(format!(
                "{} on an event sub-process is not supported",
                if io.style == MappingStyle::Camunda {
                    "camunda:inputOutput"
                } else {
                    "zeebe:ioMapping"
                }
            ))
        } else {
            None
        };
        if let Some(message) = refusal {
            self.help(
                "Q401",
                c.pos,
                message,
                "move the mapping to a task or an embedded sub-process's zeebe:ioMapping, or remove it",
            );
            return;
        }
        self.keep_mappings(c, io, |b| &mut b.sub_process_mappings);
    }

    /// Keeps a complete mapping element `c` of the node being built in the table `table`
    /// picks (events' or sub-processes'); a second one on the node is Q308.
    fn keep_mappings(
        &mut self,
        c: &Element,
        io: VendorIo,
        table: fn(&mut Self) -> &mut BTreeMap<NodeIdx, EventMappings>,
    ) {
        if !io.complete {
            return;
        }
        let idx = NodeIdx::at(self.nodes.len());
        if table(self).contains_key(&idx) {
            self.help(
                "Q308",
                c.pos,
                format!("{} appears twice", io.what()),
                "keep one mapping element",
            );
            return;
        }
        table(self).insert(
            idx,
            EventMappings {
                style: io.style,
                inputs: io.inputs,
                outputs: io.outputs,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_values_become_cel_strings() {
        for text in [
            "Peter",
            "a \"quoted\" \\ word",
            "two\nlines\tand\r",
            "\u{1}",
            "",
        ] {
            let cel = cel_string(text);
            let e = Expression::compile(&cel, Pos::default(), 4096)
                .unwrap_or_else(|e| panic!("{cel}: {e:?}"));
            assert_eq!(
                e.eval(&Variables::new()).unwrap(),
                serde_json::Value::String(text.to_owned()),
                "{cel}"
            );
        }
    }
}
