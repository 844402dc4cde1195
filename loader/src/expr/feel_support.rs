//! The CEL functions the FEEL translation (`crate::feel`) calls where plain CEL cannot say
//! what FEEL means: whether a variable exists at all, a variable read by name, and
//! `string join` (the `cel` build here has no strings extension).
//!
//! CEL has no test for an unbound top-level name (`has()` takes a field selection, and
//! an unbound identifier is an error, or worse, a type: `type`, `int`, `map` resolve to
//! CEL's types when no variable holds the name). So the translation spells such a name
//! as a string literal, `feel_is_defined("order.total")` or `feel_var("type")`, and
//! [`named_roots`] adds the path's first segment to the names the expression reads, so
//! the evaluation binds it when the variables hold it. These functions only look the
//! name up; they never read anything else, never allocate more than a borrow, and walk a
//! path no longer than the expression's text.
//!
//! What they must never do: give a value FEEL would not give. Where Camunda's FEEL
//! versions disagree (`is defined` of a null value) the evaluation fails instead.

use cel::common::ast::{Expr, IdedExpr, LiteralValue};
use cel::common::types::{CelBool, CelInt, CelString, CelUInt, Kind};
use cel::common::value::{BuiltinRef, CowVal, Val};
use cel::{ExecutionError, FunctionContext};

/// `feel_is_defined("a.b.c")`: FEEL's `is defined(a.b.c)` over the variables in scope.
pub const IS_DEFINED: &str = "feel_is_defined";
/// `feel_is_defined_in(v, "b.c")`: FEEL's `is defined(…)` of the path `b.c` below the
/// value `v`, which exists (an iteration variable or a filter element's entry).
pub const IS_DEFINED_IN: &str = "feel_is_defined_in";
/// `feel_var("type")`: the variable named `type`, or a failure if there is none.
pub const VAR: &str = "feel_var";
/// `feel_string_join(list, delimiter)`: FEEL's `string join` (DMN 1.4 §10.3.4.4).
pub const STRING_JOIN: &str = "feel_string_join";
/// `juel_text(v)`: the text a JUEL composite expression (`Order ${id} shipped`) writes
/// for the value of one of its `${…}` parts.
pub const JUEL_TEXT: &str = "juel_text";

type FeelFn = Box<
    dyn for<'c, 'v> Fn(&mut FunctionContext<'c, 'v>) -> Result<CowVal<'c, 'v>, ExecutionError>
        + Send
        + Sync,
>;

/// Registers the three functions in `ctx`.
pub(crate) fn register(ctx: &mut cel::Context<'_, '_>) {
    let is_defined: FeelFn = Box::new(|ftx| {
        let path = string_arg(ftx, 0)?;
        let (root, rest) = path.split_once('.').unwrap_or((path.as_str(), ""));
        match ftx.ptx.get_variable(root) {
            None => Ok(boolean(false)),
            Some(v) => defined_below(v.as_ref(), rest)
                .map(boolean)
                .map_err(|m| ftx.error(format!("is defined({path}): {m}"))),
        }
    });
    let is_defined_in: FeelFn = Box::new(|ftx| {
        let rest = string_arg(ftx, 1)?;
        let value = ftx
            .args
            .first()
            .ok_or_else(|| ftx.error("feel_is_defined_in takes a value and a path"))?;
        defined_below(value.as_ref(), &rest)
            .map(boolean)
            .map_err(|m| ftx.error(format!("is defined(…): {m}")))
    });
    let var: FeelFn = Box::new(|ftx| {
        let name = string_arg(ftx, 0)?;
        ftx.ptx
            .get_variable(&name)
            .ok_or_else(|| ftx.error(format!("no variable `{name}`")))
    });
    // FEEL's `string join(list, delimiter)`: the list's strings in order with the
    // delimiter between them, null elements left out, a null delimiter as none, an
    // empty list the empty string. FEEL gives null for a list holding anything else, or
    // for a value that is no list: the evaluation fails there. Linear in the list and
    // in the result, which the budget's meter charges as the call's value.
    let string_join: FeelFn = Box::new(|ftx| {
        let fail = |ftx: &FunctionContext<'_, '_>, why: &str| {
            ftx.error(format!("string join: {why} (FEEL gives null)"))
        };
        let (Some(list), Some(delimiter)) = (ftx.args.first(), ftx.args.get(1)) else {
            return Err(ftx.error("feel_string_join takes a list and a delimiter"));
        };
        let delimiter = match delimiter.as_ref().as_builtin() {
            BuiltinRef::String(d) => d.inner().to_owned(),
            _ if delimiter.as_ref().get_type().kind() == Kind::NullType => String::new(),
            _ => return Err(fail(ftx, "the delimiter is not a string")),
        };
        if list.as_ref().get_type().kind() != Kind::List {
            return Err(fail(ftx, "its first argument is not a list"));
        }
        let Some(items) = list.as_ref().as_iterable() else {
            return Err(fail(ftx, "its first argument is not a list"));
        };
        let mut out = String::new();
        let mut first = true;
        let mut walk = items.iter();
        while let Some(item) = walk.next() {
            match item.as_builtin() {
                _ if item.get_type().kind() == Kind::NullType => continue,
                BuiltinRef::String(text) => {
                    if !first {
                        out.push_str(&delimiter);
                    }
                    out.push_str(text.inner());
                    first = false;
                }
                _ => return Err(fail(ftx, "the list holds a value that is not a string")),
            }
        }
        Ok(CowVal::owned(CelString::from(out)))
    });
    // A JUEL composite expression coerces each `${…}` part's value to a String (JSP 2.1
    // EL §1.18.2, "Coerce A to String", which Camunda 7's JUEL implements): null is the
    // empty string, a string itself, a boolean `true`/`false`, an integer its decimal
    // digits — what CEL's `string()` writes too. A double Java writes its own way
    // (`1.0E21`, `12.0`) and a list or map as Java's `toString` of its class: the
    // evaluation fails there rather than write other text.
    let juel_text: FeelFn = Box::new(|ftx| {
        let Some(v) = ftx.args.first() else {
            return Err(ftx.error("juel_text takes one value"));
        };
        let v = v.as_ref();
        let kind = v.get_type().kind();
        let text = match kind {
            Kind::NullType => Some(String::new()),
            Kind::String => v.downcast_ref::<CelString>().map(|s| s.inner().to_owned()),
            Kind::Boolean => v.downcast_ref::<CelBool>().map(|b| b.inner().to_string()),
            Kind::Int => v.downcast_ref::<CelInt>().map(|i| i.inner().to_string()),
            Kind::UInt => v.downcast_ref::<CelUInt>().map(|u| u.inner().to_string()),
            _ => None,
        };
        let Some(text) = text else {
            return Err(ftx.error(format!(
                "a JUEL composite text writes a {kind:?} as Java does, which qflow does not imitate; write a string, an integer or a boolean there, or build the text in CEL"
            )));
        };
        Ok(CowVal::owned(CelString::from(text)))
    });
    // The names are not the standard library's; a CEL author may call them too, with
    // the same meaning.
    let _ = ctx.add_function(JUEL_TEXT, juel_text);
    let _ = ctx.add_function(STRING_JOIN, string_join);
    let _ = ctx.add_function(IS_DEFINED, is_defined);
    let _ = ctx.add_function(IS_DEFINED_IN, is_defined_in);
    let _ = ctx.add_function(VAR, var);
}

fn string_arg(ftx: &FunctionContext<'_, '_>, at: usize) -> Result<String, ExecutionError> {
    match ftx.args.get(at).map(|a| a.as_ref().as_builtin()) {
        Some(BuiltinRef::String(s)) => Ok(s.inner().to_owned()),
        _ => Err(ftx.error(format!("{} takes a path as a string", ftx.name))),
    }
}

fn boolean<'c, 'v>(b: bool) -> CowVal<'c, 'v> {
    CowVal::Borrowed(if b { &CelBool::TRUE } else { &CelBool::FALSE })
}

/// FEEL's `is defined` of the path `rest` (segments joined by `.`, possibly none) below
/// the existing value `v`, as Camunda's FEEL engine (feel-scala) answers it:
/// - an entry missing on the way, a null on the way, or a path through a string, number
///   or boolean (they have no properties) is not defined: `false` in every version
///   (before 1.17 the path is an error, which `is defined` turns into `false`; since,
///   it is null, which `is defined` turns into `false`);
/// - a path through a list is FEEL's projection (DMN 1.3 §10.3.2.5: `[{x: 1}].x` is
///   `[1]`), a list, so defined; CEL's maps cannot say that here: the evaluation fails;
/// - the value at the end, if not null, is defined: `true`;
/// - a null value at the end: feel-scala before 1.17 (Camunda 8.2 and earlier) answers
///   `true`, 1.17 and later (Camunda 8.4 and later document it) `false`. The evaluation
///   fails rather than pick one.
fn defined_below(v: &dyn Val, rest: &str) -> Result<bool, String> {
    let segments: Vec<&str> = rest.split('.').filter(|s| !s.is_empty()).collect();
    walk(v, &segments)
}

/// One step of [`defined_below`]. It recurses once per map it enters, so no deeper than
/// the value's nesting (at most `MAX_INPUT_DEPTH` levels for a variable).
fn walk(v: &dyn Val, segments: &[&str]) -> Result<bool, String> {
    let kind = v.get_type().kind();
    let Some((segment, rest)) = segments.split_first() else {
        if kind == Kind::NullType {
            return Err(
                "the value is null: Camunda's FEEL answers true before feel-scala 1.17 (Camunda 8.2) and false since, so qflow does not answer"
                    .to_owned(),
            );
        }
        return Ok(true);
    };
    match kind {
        Kind::Map => {
            let key: CelString<'_> = (*segment).into();
            let Some(indexer) = v.as_indexer() else {
                return Ok(false);
            };
            match indexer.get(&key) {
                Ok(x) => walk(x.as_ref(), rest),
                Err(_) => Ok(false),
            }
        }
        Kind::List => Err(format!(
            "`.{segment}` on a list is a projection in FEEL (a list of entries), which qflow does not evaluate"
        )),
        _ => Ok(false),
    }
}

/// The first segments of the paths spelled as string arguments of [`IS_DEFINED`] and
/// [`VAR`] in `root`: the variables those calls read, which evaluation must bind.
pub(crate) fn named_roots(root: &IdedExpr) -> Vec<String> {
    let mut out = Vec::new();
    // An explicit stack, as every walk of an author's tree here.
    let mut stack: Vec<&IdedExpr> = vec![root];
    while let Some(e) = stack.pop() {
        match &e.expr {
            Expr::Call(c) => {
                if c.target.is_none() && (c.func_name == IS_DEFINED || c.func_name == VAR) {
                    if let Some(Expr::Literal(LiteralValue::String(s))) =
                        c.args.first().map(|a| &a.expr)
                    {
                        let path = s.inner();
                        out.push(path.split('.').next().unwrap_or(path).to_owned());
                    }
                }
                stack.extend(c.target.as_deref());
                stack.extend(c.args.iter());
            }
            Expr::Comprehension(c) => stack.extend([
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ]),
            Expr::List(l) => stack.extend(l.elements.iter()),
            Expr::Map(m) => {
                for entry in &m.entries {
                    if let cel::common::ast::EntryExpr::MapEntry(me) = &entry.expr {
                        stack.push(&me.key);
                        stack.push(&me.value);
                    }
                }
            }
            Expr::Select(s) => stack.push(&s.operand),
            _ => {}
        }
    }
    out
}
