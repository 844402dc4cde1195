//! The `q:` extensions of a task: `q:retry`, `q:timeout`, `q:input` / `q:output`
//! mappings and the `q:task` / `q:channel` / `q:topic` attributes, read into
//! [`Extensions`] (vendor children are handed to [`super::vendor`]).

use crate::expr::Expression;
use crate::iso8601;
use crate::model::*;
use crate::xml::{Attr, Element, Ns};

use super::io::VendorIo;
use super::vendor::camunda_child;
use super::ProcessBuilder;

/// What a task's `extensionElements` (and vendor attributes) say.
#[derive(Default)]
pub(super) struct Extensions {
    pub(super) retry: Option<(RetryPolicy, Pos)>,
    pub(super) codes: Vec<(String, Pos)>,
    pub(super) timeout: Option<(DurationMs, Pos)>,
    pub(super) inputs: Vec<Mapping>,
    pub(super) outputs: Vec<Mapping>,
    pub(super) zeebe_job: Option<(TaskKind, Pos)>,
    /// A `zeebe:taskDefinition` was present, valid or not.
    pub(super) zeebe_attempted: bool,
    /// `q:respond="true"`, with its position.
    pub(super) respond: Option<Pos>,
    /// `q:script` or `zeebe:script`: the expression (CEL, FEEL translated) and the
    /// result variable, with the element's position.
    pub(super) script: Option<(Expression, String, Pos)>,
    /// A `q:script` or `zeebe:script` was present, valid or not.
    pub(super) script_attempted: bool,
    /// `zeebe:ioMapping` or `camunda:inputOutput`, read with its vendor's semantics.
    pub(super) vendor_io: Option<VendorIo>,
    /// Where the first `q:input` / `q:output` is, if there is one.
    pub(super) q_mapping: Option<Pos>,
    /// `camunda:field` injections that parsed, each with its position.
    pub(super) fields: Vec<(Mapping, Pos)>,
    /// Where the first `camunda:field` is (parsed or not).
    pub(super) field_pos: Option<Pos>,
    /// `zeebe:taskHeaders` and `camunda:properties` entries, in document order, each
    /// with its position; the element of the first `zeebe:taskHeaders`.
    pub(super) headers: Vec<(String, String, Pos)>,
    pub(super) task_headers_pos: Option<Pos>,
    /// The Camunda 7 Java binding the task runs by (set by the service kind).
    pub(super) delegate: Option<Box<Delegate>>,
    /// `camunda:in` / `camunda:out` of a call activity, as written (read by
    /// `ProcessBuilder::call_variables` once the task is known to be one).
    pub(super) call_ins: Vec<CallVariable>,
    pub(super) call_outs: Vec<CallVariable>,
}

/// One `camunda:in` or `camunda:out`: what it passes, with its position.
#[derive(Debug, Clone)]
pub(super) enum CallVariable {
    /// `variables="all"`.
    All(Pos),
    /// `source="a" target="b"` or `sourceExpression="${…}" target="b"`, translated.
    Mapped {
        target: String,
        source: Expression,
        /// Whether it was a `sourceExpression` (on an `out`, not mapped yet).
        expression: bool,
        pos: Pos,
    },
    /// Read, refused (the diagnostic is out).
    Refused,
}

impl CallVariable {
    pub(super) fn pos(&self) -> Option<Pos> {
        match self {
            CallVariable::All(p) | CallVariable::Mapped { pos: p, .. } => Some(*p),
            CallVariable::Refused => None,
        }
    }
}

impl Extensions {
    pub(super) fn read(pb: &mut ProcessBuilder<'_, '_>, el: &Element) -> Extensions {
        let mut ext = Extensions::default();
        for a in &el.attrs {
            if a.ns == Ns::Q && a.local == "respond" {
                match a.value.trim() {
                    "true" => ext.respond = Some(a.pos),
                    "false" => {}
                    other => pb.help(
                        "Q310",
                        a.pos,
                        format!("q:respond is `{other}`"),
                        "write q:respond=\"true\" (or leave it out)",
                    ),
                }
            } else if a.ns == Ns::Q && !matches!(a.local.as_str(), "task" | "channel" | "topic") {
                pb.help(
                    "Q309",
                    a.pos,
                    format!("unknown attribute q:{}", a.local),
                    "the q: attributes on a task are q:task, q:channel, q:topic and q:respond",
                );
            }
        }
        let Some(x) = el.child(Ns::Bpmn, "extensionElements") else {
            return ext;
        };
        for c in &x.children {
            match c.ns {
                Ns::Q => ext.read_q(pb, c),
                Ns::Camunda => ext.read_camunda(pb, c),
                Ns::Zeebe => ext.read_zeebe(pb, c),
                _ => {}
            }
        }
        ext
    }

    /// A Camunda extension of a task: `camunda:inputOutput` is read as mappings; the
    /// rest is refused or ignored as `super::vendor` says.
    fn read_camunda(&mut self, pb: &mut ProcessBuilder<'_, '_>, c: &Element) {
        match c.local.as_str() {
            "inputOutput" => {
                let io = pb.read_camunda_io(c);
                self.set_vendor_io(pb, io);
            }
            "field" => {
                self.field_pos.get_or_insert(c.pos);
                if let Some(m) = pb.camunda_field(c) {
                    self.fields.push((m, c.pos));
                }
            }
            "properties" => {
                for p in c
                    .children
                    .iter()
                    .filter(|p| p.ns == Ns::Camunda && p.local == "property")
                {
                    if let (Some(name), Some(value)) = (p.value("name"), p.value("value")) {
                        self.headers
                            .push((name.trim().to_owned(), value.to_owned(), p.pos));
                    }
                }
            }
            "in" | "out" => {
                let v = pb.camunda_call_variable(c);
                if c.local == "in" {
                    self.call_ins.push(v);
                } else {
                    self.call_outs.push(v);
                }
            }
            _ => camunda_child(pb, c),
        }
    }

    /// `<zeebe:taskHeaders><zeebe:header key="…" value="…"/></zeebe:taskHeaders>`: static
    /// headers a job worker is given (a header without a key is refused).
    pub(super) fn read_task_headers(&mut self, pb: &mut ProcessBuilder<'_, '_>, c: &Element) {
        self.task_headers_pos.get_or_insert(c.pos);
        for h in &c.children {
            if h.ns != Ns::Zeebe || h.local != "header" {
                pb.help(
                    "Q401",
                    h.pos,
                    format!("<{}> inside zeebe:taskHeaders is not supported", h.local),
                    "zeebe:taskHeaders holds zeebe:header elements",
                );
                continue;
            }
            match h.value("key").map(str::trim) {
                Some(key) if !key.is_empty() => self.headers.push((
                    key.to_owned(),
                    h.value("value").unwrap_or_default().to_owned(),
                    h.pos,
                )),
                _ => pb.help(
                    "Q102",
                    h.pos,
                    "a zeebe:header has no key",
                    "write <zeebe:header key=\"…\" value=\"…\"/>",
                ),
            }
        }
    }

    /// Keeps the task's one vendor mapping element (a second is Q308).
    pub(super) fn set_vendor_io(&mut self, pb: &mut ProcessBuilder<'_, '_>, io: VendorIo) {
        if let Some(first) = &self.vendor_io {
            pb.help(
                "Q308",
                io.pos,
                format!(
                    "a second vendor mapping element (the first at {})",
                    first.pos
                ),
                "keep one zeebe:ioMapping or camunda:inputOutput",
            );
            return;
        }
        self.vendor_io = Some(io);
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
            "script" => {
                check_q_attrs(pb, c, &["expression", "resultVariable"]);
                self.read_script(pb, c, false);
            }
            "input" | "output" => {
                check_q_attrs(pb, c, &["target", "source"]);
                self.q_mapping.get_or_insert(c.pos);
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
                "the q: elements are retry, timeout, input, output and script",
            ),
        }
    }
}

impl Extensions {
    /// A script task's script: `<q:script expression="CEL" resultVariable="x"/>`, or
    /// Zeebe's `<zeebe:script expression="=FEEL" resultVariable="x"/>` (`feel`), whose
    /// FEEL must be in the subset that maps onto CEL.
    pub(super) fn read_script(&mut self, pb: &mut ProcessBuilder<'_, '_>, c: &Element, feel: bool) {
        let what = if feel { "zeebe:script" } else { "q:script" };
        if self.script_attempted {
            pb.help(
                "Q308",
                c.pos,
                format!("{what}: the task has two scripts"),
                "keep one q:script or zeebe:script",
            );
            return;
        }
        self.script_attempted = true;
        let result = match c.attr("resultVariable") {
            Some(a) => match variable_name(pb, a, &format!("{what} resultVariable")) {
                Some(name) => name,
                None => return,
            },
            None => {
                pb.help(
                    "Q102",
                    c.pos,
                    format!("{what} has no resultVariable"),
                    "name the variable the script's value goes to: resultVariable=\"total\"",
                );
                return;
            }
        };
        let Some(src) = c.attr("expression") else {
            pb.help(
                "Q102",
                c.pos,
                format!("{what} has no expression"),
                if feel {
                    "add expression=\"=<FEEL expression>\""
                } else {
                    "add expression=\"<CEL expression>\""
                },
            );
            return;
        };
        let pos = value_pos(src, "expression".len());
        let text = src.value.trim();
        let cel = if feel {
            let Some(body) = text.strip_prefix('=') else {
                pb.help(
                    "Q203",
                    src.pos,
                    format!("zeebe:script expression `{text}` is not a FEEL expression (it does not start with `=`)"),
                    "write expression=\"=<FEEL expression>\", or use q:script with CEL",
                );
                return;
            };
            match crate::feel::feel_to_cel(body) {
                Ok(cel) => cel,
                Err(why) => {
                    pb.help(
                        "Q203",
                        src.pos,
                        format!("FEEL script `{text}`: {why}"),
                        "keep to the FEEL subset qflow translates, or write the script in CEL with q:script",
                    );
                    return;
                }
            }
        } else {
            text.to_string()
        };
        match Expression::compile(&cel, pos, pb.ctx.opts.max_expr_len) {
            Ok(expression) => self.script = Some((expression, result, c.pos)),
            Err(e) => pb.help(e.code, e.pos, e.message, "fix the script's expression"),
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

/// The variable `a` names (trimmed), or `None` after a Q208 saying that the `what` is not
/// a variable name: a mapping's target and a script's result variable are both written
/// into the instance variables.
fn variable_name(pb: &mut ProcessBuilder<'_, '_>, a: &Attr, what: &str) -> Option<String> {
    let name = a.value.trim();
    if is_identifier(name) {
        return Some(name.to_string());
    }
    pb.help(
        "Q208",
        a.pos,
        format!("{what} `{}` is not a variable name", a.value),
        "use letters, digits and _ (not starting with a digit)",
    );
    None
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
        Some(a) => variable_name(pb, a, "mapping target")?,
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
            pb.help(e.code, e.pos, e.message, "fix the CEL expression");
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
