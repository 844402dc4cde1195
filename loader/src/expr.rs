//! CEL expressions for conditions and mappings (SPEC L3).
//!
//! An [`Expression`] is compiled once, at load time, so that a syntax error is a load
//! diagnostic with its position; evaluation is a pure function of the variables handed in.
//! This module must never read the clock, do I/O, or hand the engine a value whose order
//! came from a hash map: every map result is rebuilt with sorted keys.
//!
//! The guards around the `cel` crate, and why they exist:
//! - source length is capped (the caller passes the cap, see `LoadOptions::max_expr_len`);
//! - the syntax tree's depth is capped at [`MAX_AST_DEPTH`] and macro (comprehension)
//!   nesting at [`MAX_COMPREHENSION_NESTING`]: the `cel` evaluator recurses once per tree
//!   level, and a deep tree could overflow a 2 MiB worker stack;
//! - parsing runs on one long-lived helper thread with a large stack, because the `cel` parser (ANTLR)
//!   uses several kilobytes of stack per bracket level and would overflow a worker thread's
//!   stack on a dozen nested brackets; brackets are additionally capped at
//!   [`MAX_BRACKET_NESTING`] before the parser ever sees the text;
//! - JSON integers become CEL `int` (so `x > 1` works on a JSON `2`), lists and maps handed
//!   in are capped at [`MAX_INPUT_ITEMS`] entries and [`MAX_INPUT_DEPTH`] levels;
//! - every evaluation runs under a budget of [`EVAL_STEPS_MAX`] steps and
//!   [`EVAL_BYTES_MAX`] bytes, enforced while it runs by a meter woven into the compiled
//!   tree ([`budget`]); over it, the evaluation fails with an [`EvalError`] (the engine's
//!   `EXPRESSION_FAILED`), never aborts. At load, an expression whose estimated cost at
//!   the documented caps is far over that budget is refused with `Q209` ([`estimate`]).

mod budget;
mod estimate;
pub(crate) mod feel_support;

pub use budget::{EVAL_BYTES_MAX, EVAL_STEPS_MAX};
pub use estimate::REFUSAL_FACTOR;

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::fmt;
use std::sync::{mpsc, Arc, OnceLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};

use crate::model::{Pos, Variables};

/// Deepest syntax tree accepted. Real conditions are a handful of levels deep; the cap
/// keeps evaluation within a 2 MiB stack even in debug builds.
pub const MAX_AST_DEPTH: usize = 24;
/// Deepest nesting of `(`, `[` and `{` accepted before parsing.
pub const MAX_BRACKET_NESTING: usize = 16;
/// Deepest nesting of macros (`all`, `exists`, `map`, `filter`…). The evaluation budget
/// bounds the work whatever the nesting; this cap keeps expressions readable and the
/// static estimate's worst cases few.
pub const MAX_COMPREHENSION_NESTING: usize = 2;
/// Most entries in one list or map handed to an expression as input.
pub const MAX_INPUT_ITEMS: usize = 4_096;
/// Deepest nesting of lists/maps handed to an expression as input.
pub const MAX_INPUT_DEPTH: usize = 32;
/// Stack size of the helper thread that runs the `cel` parser.
const PARSER_STACK_BYTES: usize = 64 << 20;

/// Why an expression did not compile. `pos` is the position in the model file of the
/// offending character when known, else of the expression's start. `code` is the
/// diagnostic it becomes: `Q201` (does not compile, or over a structural cap) or `Q209`
/// (its estimated cost is far over the evaluation budget).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{pos}: {message}")]
pub struct ExprError {
    pub code: &'static str,
    pub pos: Pos,
    pub message: String,
}

/// Why an evaluation failed: a missing variable, a type mismatch, an oversized input, or
/// a result that has no JSON form. The engine turns this into a failure of the node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expression `{source_text}` at {pos}: {message}")]
pub struct EvalError {
    pub source_text: String,
    pub pos: Pos,
    pub message: String,
}

/// A compiled expression with its source text and position. Cheap to clone (the compiled
/// program is shared) and safe to share across threads.
#[derive(Clone)]
pub struct Expression {
    source: String,
    pos: Pos,
    /// The parsed tree with the budget's meter woven in ([`budget::instrument`]).
    tree: Arc<IdedExpr>,
    /// The identifiers the program reads, sorted. Only these are converted and bound at
    /// evaluation, so the cost of an evaluation does not grow with unrelated variables.
    reads: Arc<[String]>,
}

impl fmt::Debug for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Expression")
            .field("source", &self.source)
            .field("pos", &self.pos)
            .finish()
    }
}

impl PartialEq for Expression {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source && self.pos == other.pos
    }
}

/// Equality by source and position is an equivalence: the compiled tree is a function of
/// the source.
impl Eq for Expression {}

impl Expression {
    /// Compiles `source` (CEL) written at `pos` in the model file. Refuses sources longer
    /// than `max_len` bytes, deeper than the caps above, or that do not parse.
    pub fn compile(source: &str, pos: Pos, max_len: usize) -> Result<Expression, ExprError> {
        Expression::compile_checked(source, pos, max_len, true)
    }

    /// [`Expression::compile`] without the static estimate (`Q209`), for the `expr` fuzz
    /// target only: it checks that an expression the estimate refuses really cannot run
    /// within the budget on inputs at the caps. Never compiled into the loader otherwise.
    #[cfg(feature = "fuzzing")]
    pub fn compile_without_estimate(
        source: &str,
        pos: Pos,
        max_len: usize,
    ) -> Result<Expression, ExprError> {
        Expression::compile_checked(source, pos, max_len, false)
    }

    /// The top-level variables the expression reads, sorted.
    pub fn read_names(&self) -> &[String] {
        &self.reads
    }

    /// Whether the expression reads the top-level variable `name`.
    pub(crate) fn reads_variable(&self, name: &str) -> bool {
        self.reads
            .binary_search_by(|r| r.as_str().cmp(name))
            .is_ok()
    }

    /// The names the expression reads, sorted (only these are bound at evaluation).
    #[cfg(feature = "fuzzing")]
    pub fn reads(&self) -> &[String] {
        &self.reads
    }

    fn compile_checked(
        source: &str,
        pos: Pos,
        max_len: usize,
        estimate: bool,
    ) -> Result<Expression, ExprError> {
        precheck(source, pos, max_len)?;
        let owned = source.to_owned();
        let parsed =
            parse_on_big_stack(&owned).map_err(|(p, m)| format!("{}\u{0}{m}", encode_rel(p)));
        let program = match parsed {
            Ok(p) => p,
            Err(msg) => {
                let (rel, message) = decode_rel(&msg);
                return Err(ExprError {
                    code: "Q201",
                    pos: rel.map_or(pos, |r| offset_pos(pos, source, r)),
                    message,
                });
            }
        };
        check_tree(program.expression(), pos)?;
        if estimate {
            check_estimate(&program, source, pos)?;
        }
        let mut reads: Vec<String> = program
            .references()
            .variables()
            .into_iter()
            .map(str::to_string)
            .collect();
        // A FEEL `is defined(x)` or a name CEL would read as a type reaches CEL as a
        // string (`feel_support`): its variable is read all the same.
        reads.extend(feel_support::named_roots(program.expression()));
        reads.sort();
        reads.dedup();
        Ok(Expression {
            source: owned,
            pos,
            tree: Arc::new(budget::instrument(program.expression())),
            reads: reads.into(),
        })
    }

    /// The CEL source text as written (after FEEL translation, if any).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Where the expression starts in the model file.
    pub fn pos(&self) -> Pos {
        self.pos
    }

    /// Evaluates the expression over `vars`, each bound as a top-level CEL variable (only
    /// those the expression reads are converted), under the evaluation budget: over it,
    /// the result is an [`EvalError`] saying which limit.
    pub fn eval(&self, vars: &Variables) -> Result<serde_json::Value, EvalError> {
        let meter = Arc::new(budget::Meter::default());
        let mut ctx = cel::Context::default();
        budget::register(&mut ctx, &meter);
        feel_support::register(&mut ctx);
        for name in self.reads.iter() {
            let Some(value) = vars.get(name) else {
                continue;
            };
            let mut counted = (0u64, 0u64);
            let v = json_to_cel(value, 0, &mut counted)
                .map_err(|m| self.err(format!("variable `{name}`: {m}")))?;
            meter
                .charge_input(counted.0, counted.1)
                .map_err(|over| self.over_budget(over))?;
            ctx.add_variable_from_value(name.clone(), v);
        }
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cel::Value::resolve(&self.tree, &ctx)
        }))
        .map_err(|_| self.err("the CEL evaluator failed".into()));
        // Over budget wins over whatever came out: an error the evaluator absorbed (`||`,
        // `all`) must not let an exhausted evaluation pass.
        if let Some(over) = meter.exceeded() {
            return Err(self.over_budget(over));
        }
        let out = out?.map_err(|e| self.err(e.to_string()))?;
        cel_to_json(&out, 0).map_err(|m| self.err(m))
    }

    /// Evaluates a condition: the result must be a boolean.
    pub fn eval_bool(&self, vars: &Variables) -> Result<bool, EvalError> {
        match self.eval(vars)? {
            serde_json::Value::Bool(b) => Ok(b),
            other => Err(self.err(format!(
                "a condition must evaluate to a boolean, got {}",
                json_kind(&other)
            ))),
        }
    }

    fn over_budget(&self, over: budget::Over) -> EvalError {
        self.err(match over {
            budget::Over::Steps => format!(
                "the evaluation went over its budget of {EVAL_STEPS_MAX} steps; \
                 it does too much work for its inputs"
            ),
            budget::Over::Bytes => format!(
                "the evaluation went over its budget of {EVAL_BYTES_MAX} bytes; \
                 it builds or copies too much for its inputs"
            ),
        })
    }

    fn err(&self, message: String) -> EvalError {
        EvalError {
            source_text: self.source.clone(),
            pos: self.pos,
            message,
        }
    }
}

/// Refuses an expression whose static estimate ([`estimate`]) is far over the budget,
/// at the position of the smallest subexpression that is.
fn check_estimate(program: &cel::Program, source: &str, pos: Pos) -> Result<(), ExprError> {
    let Err(over) = estimate::check(program.expression()) else {
        return Ok(());
    };
    let at = program
        .source_info()
        .offset_for(over.node)
        .map_or(pos, |(start, _)| {
            offset_pos(pos, source, line_col(source, start as usize))
        });
    Err(ExprError {
        code: "Q209",
        pos: at,
        message: format!(
            "on inputs at the documented caps (lists of {MAX_INPUT_ITEMS} items) this \
             expression takes at least {:.0e} steps, over {}x the evaluation budget of \
             {EVAL_STEPS_MAX} steps: it builds or copies a list once per item of a list; \
             compute the value once instead",
            over.steps, REFUSAL_FACTOR as u64,
        ),
    })
}

/// The 1-based (line, column in characters) of byte `offset` in `source`.
fn line_col(source: &str, offset: usize) -> (isize, isize) {
    let before = source.get(..offset).unwrap_or(source);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line as isize, col as isize)
}

fn precheck(source: &str, pos: Pos, max_len: usize) -> Result<(), ExprError> {
    let fail = |message: String| {
        Err(ExprError {
            code: "Q201",
            pos,
            message,
        })
    };
    if source.trim().is_empty() {
        return fail("the expression is empty".into());
    }
    if source.len() > max_len {
        return fail(format!(
            "the expression is {} bytes long; the limit is {max_len}",
            source.len()
        ));
    }
    let (mut depth, mut quote): (usize, Option<char>) = (0, None);
    let mut escaped = false;
    for c in source.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '(' | '[' | '{' => {
                depth += 1;
                if depth > MAX_BRACKET_NESTING {
                    return fail(format!(
                        "brackets nest deeper than {MAX_BRACKET_NESTING} levels; simplify the expression"
                    ));
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

type ParseOutcome = Result<cel::Program, (Option<(isize, isize)>, String)>;

struct ParseJob {
    source: String,
    reply: mpsc::Sender<ParseOutcome>,
}

/// The parser thread: started on first use, lives for the process, parses one expression
/// at a time on a large stack. Starting a thread per expression would cost more than the
/// parse itself (a 64 MiB stack mapping takes ~100 µs).
static PARSER: OnceLock<Option<mpsc::Sender<ParseJob>>> = OnceLock::new();

fn parse_on_big_stack(source: &str) -> ParseOutcome {
    let worker = PARSER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<ParseJob>();
        std::thread::Builder::new()
            .name("qflow-cel-parser".into())
            .stack_size(PARSER_STACK_BYTES)
            .spawn(move || {
                for job in rx {
                    // A dropped receiver only means the caller went away.
                    let _ = job.reply.send(parse_guarded(&job.source));
                }
            })
            .ok()
            .map(|_| tx)
    });
    let failed = || Err((None, "the CEL parser thread is unavailable".to_string()));
    if let Some(tx) = worker {
        let (reply, answer) = mpsc::channel();
        let job = ParseJob {
            source: source.to_string(),
            reply,
        };
        if tx.send(job).is_ok() {
            return answer.recv().unwrap_or_else(|_| failed());
        }
    }
    // No parser thread could be started: use a one-off thread with the same stack.
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(PARSER_STACK_BYTES)
            .spawn_scoped(s, || parse_guarded(source))
            .map_or_else(|_| failed(), |h| h.join().unwrap_or_else(|_| failed()))
    })
}

fn parse_guarded(source: &str) -> ParseOutcome {
    // A panic inside the third-party parser must not take the loader down.
    std::panic::catch_unwind(|| cel::Program::compile(source))
        .map_err(|_| (None, "the CEL parser failed on this text".to_string()))?
        .map_err(|errs| match errs.errors.first() {
            Some(e) => (Some(e.pos), clean_parse_message(&e.msg)),
            None => (None, "the expression does not parse".to_string()),
        })
}

fn clean_parse_message(msg: &str) -> String {
    let msg = msg.trim();
    if msg.contains("Recursion limit") {
        return "the expression nests too deeply; simplify it".into();
    }
    format!(
        "CEL syntax error: {}",
        msg.trim_start_matches("Syntax error: ")
    )
}

fn encode_rel(p: Option<(isize, isize)>) -> String {
    match p {
        Some((l, c)) => format!("{l},{c}"),
        None => String::new(),
    }
}

fn decode_rel(s: &str) -> (Option<(isize, isize)>, String) {
    let Some((head, msg)) = s.split_once('\u{0}') else {
        return (None, s.to_string());
    };
    let rel = head
        .split_once(',')
        .and_then(|(l, c)| Some((l.parse().ok()?, c.parse().ok()?)));
    (rel, msg.to_string())
}

/// Maps a (1-based line, 1-based column) inside the expression onto the model file,
/// assuming the expression text starts at `start`. Positions outside the text clamp to it.
fn offset_pos(start: Pos, source: &str, (line, col): (isize, isize)) -> Pos {
    let line = line.max(1) as usize;
    let col = col.max(1) as u32;
    let lines = source.split('\n').count();
    if line > lines {
        return start;
    }
    if line == 1 {
        Pos {
            line: start.line,
            col: start.col + col - 1,
        }
    } else {
        Pos {
            line: start.line + (line as u32 - 1),
            col,
        }
    }
}

fn check_tree(root: &IdedExpr, pos: Pos) -> Result<(), ExprError> {
    // An explicit stack: the walk itself must not recurse on attacker-shaped input.
    let mut stack: Vec<(&IdedExpr, usize, usize)> = vec![(root, 1, 0)];
    while let Some((e, depth, compr)) = stack.pop() {
        if depth > MAX_AST_DEPTH {
            return Err(ExprError {
                code: "Q201",
                pos,
                message: format!(
                    "the expression is nested deeper than {MAX_AST_DEPTH} levels; split it into simpler parts"
                ),
            });
        }
        if compr > MAX_COMPREHENSION_NESTING {
            return Err(ExprError {
                code: "Q201",
                pos,
                message: format!(
                    "macros (all/exists/map/filter) nest deeper than {MAX_COMPREHENSION_NESTING} levels"
                ),
            });
        }
        let d = depth + 1;
        match &e.expr {
            Expr::Call(c) => {
                if let Some(t) = &c.target {
                    stack.push((t, d, compr));
                }
                stack.extend(c.args.iter().map(|a| (a, d, compr)));
            }
            Expr::Comprehension(c) => {
                let inner = compr + 1;
                for x in [
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ] {
                    stack.push((x, d, inner));
                }
            }
            Expr::List(l) => stack.extend(l.elements.iter().map(|a| (a, d, compr))),
            Expr::Map(m) => {
                for entry in &m.entries {
                    match &entry.expr {
                        EntryExpr::MapEntry(me) => {
                            stack.push((&me.key, d, compr));
                            stack.push((&me.value, d, compr));
                        }
                        EntryExpr::StructField(sf) => stack.push((&sf.value, d, compr)),
                    }
                }
            }
            Expr::Struct(_) => {
                return Err(ExprError {
                    code: "Q201",
                    pos,
                    message: "message (struct) literals are not supported; use a map literal"
                        .into(),
                })
            }
            Expr::Select(s) => stack.push((&s.operand, d, compr)),
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
    Ok(())
}

/// Converts a variable's value; `counted` adds up its nodes and text bytes, which the
/// budget charges.
fn json_to_cel(
    v: &serde_json::Value,
    depth: usize,
    counted: &mut (u64, u64),
) -> Result<cel::Value, String> {
    use serde_json::Value as J;
    if depth > MAX_INPUT_DEPTH {
        return Err(format!("nested deeper than {MAX_INPUT_DEPTH} levels"));
    }
    counted.0 += 1;
    Ok(match v {
        J::Null => cel::Value::Null,
        J::Bool(b) => cel::Value::Bool(*b),
        J::Number(n) => {
            if let Some(i) = n.as_i64() {
                cel::Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                cel::Value::UInt(u)
            } else {
                cel::Value::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        J::String(s) => {
            counted.1 += s.len() as u64;
            cel::Value::String(Arc::new(s.clone()))
        }
        J::Array(items) => {
            if items.len() > MAX_INPUT_ITEMS {
                return Err(format!(
                    "a list of {} items exceeds the limit of {MAX_INPUT_ITEMS}",
                    items.len()
                ));
            }
            let list = items
                .iter()
                .map(|x| json_to_cel(x, depth + 1, counted))
                .collect::<Result<Vec<_>, _>>()?;
            cel::Value::List(Arc::new(list))
        }
        J::Object(map) => {
            if map.len() > MAX_INPUT_ITEMS {
                return Err(format!(
                    "a map of {} entries exceeds the limit of {MAX_INPUT_ITEMS}",
                    map.len()
                ));
            }
            let mut out: HashMap<cel::objects::Key, cel::Value> = HashMap::with_capacity(map.len());
            for (k, x) in map {
                counted.1 += k.len() as u64;
                out.insert(
                    cel::objects::Key::String(Arc::new(k.clone())),
                    json_to_cel(x, depth + 1, counted)?,
                );
            }
            cel::Value::Map(cel::objects::Map { map: Arc::new(out) })
        }
    })
}

fn cel_to_json(v: &cel::Value, depth: usize) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    if depth > MAX_INPUT_DEPTH * 2 {
        return Err("the result is nested too deeply".into());
    }
    Ok(match v {
        cel::Value::Null => J::Null,
        cel::Value::Bool(b) => J::Bool(*b),
        cel::Value::Int(i) => J::from(*i),
        cel::Value::UInt(u) => J::from(*u),
        cel::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(J::Number)
            .ok_or_else(|| format!("the result {f} is not a finite number"))?,
        cel::Value::String(s) => J::String(s.to_string()),
        cel::Value::List(items) => J::Array(
            items
                .iter()
                .map(|x| cel_to_json(x, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        cel::Value::Map(m) => {
            // Rebuild through a BTreeMap so the key order never depends on hashing, whatever
            // backing serde_json's map uses.
            let mut sorted: BTreeMap<String, J> = BTreeMap::new();
            for (k, x) in m.map.iter() {
                let key = match k {
                    cel::objects::Key::String(s) => s.to_string(),
                    cel::objects::Key::Int(i) => i.to_string(),
                    cel::objects::Key::Uint(u) => u.to_string(),
                    cel::objects::Key::Bool(b) => b.to_string(),
                };
                sorted.insert(key, cel_to_json(x, depth + 1)?);
            }
            J::Object(sorted.into_iter().collect())
        }
        cel::Value::Bytes(_) => return Err("bytes results have no JSON form".into()),
        other => {
            return Err(format!(
                "a result of type {} has no JSON form",
                other.type_of()
            ))
        }
    })
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "a map",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const AT: Pos = Pos { line: 3, col: 10 };

    fn vars(v: serde_json::Value) -> Variables {
        serde_json::from_value(v).expect("test variables are an object")
    }

    fn compile(s: &str) -> Result<Expression, ExprError> {
        Expression::compile(s, AT, 4096)
    }

    #[test]
    fn json_integers_compare_as_ints() {
        let e = compile("amount > 100 && kind == 'gold'").unwrap();
        assert!(e
            .eval_bool(&vars(json!({"amount": 101, "kind": "gold"})))
            .unwrap());
        assert!(!e
            .eval_bool(&vars(json!({"amount": 100, "kind": "gold"})))
            .unwrap());
    }

    #[test]
    fn map_results_come_back_with_sorted_keys() {
        let e = compile("{'z': 1, 'a': 2, 'm': [x, 3]}").unwrap();
        let out = e.eval(&vars(json!({"x": "v"}))).unwrap();
        assert_eq!(
            serde_json::to_string(&out).unwrap(),
            r#"{"a":2,"m":["v",3],"z":1}"#
        );
    }

    #[test]
    fn syntax_error_points_into_the_file() {
        let err = compile("a >").unwrap_err();
        assert_eq!(err.pos, Pos { line: 3, col: 13 });
        assert!(err.message.contains("CEL syntax error"), "{}", err.message);
    }

    #[test]
    fn deep_brackets_are_refused_before_parsing() {
        let src = "(".repeat(2000) + "1" + &")".repeat(2000);
        let err = compile(&src).unwrap_err();
        assert!(err.message.contains("nest deeper"), "{}", err.message);
    }

    #[test]
    fn long_operator_chains_are_refused() {
        let src = "1+".repeat(200) + "1";
        let err = compile(&src).unwrap_err();
        assert!(err.message.contains("nested deeper"), "{}", err.message);
    }

    #[test]
    fn overlong_source_is_refused() {
        let err = Expression::compile(&"a".repeat(100), AT, 10).unwrap_err();
        assert!(err.message.contains("limit is 10"));
    }

    #[test]
    fn oversized_input_lists_are_refused_at_eval() {
        let e = compile("size(xs) > 0").unwrap();
        let big: Vec<i64> = (0..(MAX_INPUT_ITEMS as i64 + 1)).collect();
        let err = e.eval(&vars(json!({ "xs": big }))).unwrap_err();
        assert!(err.message.contains("exceeds the limit"), "{}", err.message);
    }

    #[test]
    fn unread_variables_are_not_converted() {
        // An oversized variable the expression never reads does not make it fail.
        let e = compile("[1, 2].map(x, x * n)").unwrap();
        let big: Vec<i64> = (0..(MAX_INPUT_ITEMS as i64 + 1)).collect();
        let out = e.eval(&vars(json!({ "n": 3, "unrelated": big }))).unwrap();
        assert_eq!(out, json!([3, 6]));
    }

    #[test]
    fn non_boolean_condition_is_an_eval_error() {
        let e = compile("1 + 1").unwrap();
        assert!(e.eval_bool(&Variables::new()).is_err());
    }

    #[test]
    fn missing_variable_is_an_eval_error() {
        let e = compile("nope == 1").unwrap();
        let err = e.eval(&Variables::new()).unwrap_err();
        assert!(err.message.contains("nope"), "{}", err.message);
    }

    fn list(n: usize) -> serde_json::Value {
        json!((0..n as i64).collect::<Vec<_>>())
    }

    fn over_budget(e: &Expression, v: serde_json::Value) -> String {
        let err = e.eval(&vars(v)).unwrap_err();
        assert!(err.message.contains("budget"), "{}", err.message);
        err.message
    }

    #[test]
    fn a_cubic_expression_is_refused_at_load_where_it_blows_up() {
        let err = compile("size(xs.map(a, xs.map(b, xs)))").unwrap_err();
        assert_eq!(err.code, "Q209", "{}", err.message);
        // The smallest subexpression over the line is the outer `map` (the inner one
        // alone is only linear in the list): `cel` places a macro call at its `(`,
        // offset 11 from the expression's start at column 10.
        assert_eq!(err.pos, Pos { line: 3, col: 21 }, "{}", err.message);
        assert!(err.message.contains("evaluation budget"), "{}", err.message);
    }

    #[test]
    fn a_blow_up_that_evaluation_may_skip_is_not_refused() {
        // Found by the `expr` fuzz target's Q209 check: each of these evaluates to a value
        // within the budget on inputs at the caps, because `cel` skips the cubic operand
        // (`&&`, `||`, `?:`, an `all`/`exists` that stops after its first item), so the
        // estimate must not count it.
        let caps = json!({"xs": list(MAX_INPUT_ITEMS)});
        for (src, want) in [
            ("false && size(xs.map(a, xs.map(b, xs))) > 0", json!(false)),
            ("true ? 1 : size(xs.map(a, xs.map(b, xs)))", json!(1)),
            (
                "xs.exists(a, true) || size(xs.map(a, xs.map(b, xs))) > 0",
                json!(true),
            ),
            ("xs.all(a, a > 0 && size(xs.map(b, xs)) == 0)", json!(false)),
            // An error on the left is absorbed when the right decides.
            (
                "size(xs.map(a, xs.map(b, [1 / (b - b), xs]))) > 0 || true",
                json!(true),
            ),
        ] {
            let e = compile(src).unwrap_or_else(|e| panic!("{src}: {}", e.message));
            assert_eq!(e.eval(&vars(caps.clone())).unwrap(), want, "{src}");
        }
        // What every evaluation does is still counted, wherever it sits.
        for src in [
            "b ? size(xs.map(a, xs.map(c, xs))) : size(xs.map(a, xs.map(c, xs)))",
            "size(xs.map(a, xs.map(b, xs))) + (false && true ? 1 : 0)",
            "xs.map(a, size(xs.map(b, xs))).size()",
        ] {
            let err = compile(src).unwrap_err();
            assert_eq!(err.code, "Q209", "{src}: {}", err.message);
        }
    }

    #[test]
    fn a_large_value_copied_per_item_fails_at_run_time() {
        // Harmless on a short string, so it loads; a 1 MB string copied per item of a
        // 4,096-item list fails on bytes, long before its 4 GB.
        let e = compile("xs.map(a, s)").unwrap();
        let big = json!({"xs": list(MAX_INPUT_ITEMS), "s": "x".repeat(1 << 20)});
        assert!(over_budget(&e, big).contains("bytes"));
        let small = json!({"xs": list(2), "s": "x"});
        assert_eq!(e.eval(&vars(small)).unwrap(), json!(["x", "x"]));
    }

    #[test]
    fn what_loads_is_still_bounded_at_run_time() {
        // Quadratic: loads (it is fine on small lists), fails on long ones.
        let e = compile("xs.filter(a, xs.exists(b, b == a + 1)).size()").unwrap();
        assert_eq!(e.eval(&vars(json!({"xs": list(50)}))).unwrap(), json!(49));
        over_budget(&e, json!({"xs": list(MAX_INPUT_ITEMS)}));
        // The same copy one level down, inside a list literal.
        let e = compile("xs.map(a, [s]).size()").unwrap();
        let msg = over_budget(
            &e,
            json!({"xs": list(MAX_INPUT_ITEMS), "s": "x".repeat(1 << 20)}),
        );
        assert!(msg.contains("bytes"), "{msg}");
        assert_eq!(
            e.eval(&vars(json!({"xs": list(3), "s": "x"}))).unwrap(),
            json!(3)
        );
    }

    #[test]
    fn an_absorbed_budget_error_still_fails_the_evaluation() {
        // `||` absorbs an error beside `true`, `exists` defers one: neither may let an
        // exhausted evaluation through.
        for src in [
            "xs.exists(a, xs.exists(b, a + b < 0)) || true",
            "xs.exists(a, xs.all(b, b * a >= 0) && false) || true",
        ] {
            let e = compile(src).unwrap();
            over_budget(&e, json!({"xs": list(MAX_INPUT_ITEMS)}));
        }
    }

    #[test]
    fn metering_changes_no_result() {
        let v = vars(json!({
            "xs": [1, 2, 3], "m": {"a": {"b": 2}}, "s": "abc", "o": {"k": [1, 2]}
        }));
        let cases = [
            ("xs.map(x, x * 2)", json!([2, 4, 6])),
            ("xs.filter(x, x > 1)", json!([2, 3])),
            ("xs.map(x, x > 1, x * 10)", json!([20, 30])),
            ("xs.all(x, x > 0) && !xs.exists(x, x > 5)", json!(true)),
            ("xs.exists_one(x, x == 2)", json!(true)),
            ("m.a.b + size(xs) + xs[1] + size(s) + o.k.size()", json!(12)),
            ("has(m.a.b) && !has(m.z)", json!(true)),
            ("{'k': [s, s + 'd']}", json!({"k": ["abc", "abcd"]})),
            ("2 in xs ? 'yes' : 'no'", json!("yes")),
            ("optional.of(xs).hasValue()", json!(true)),
            (
                "s.startsWith('a') && s.contains('b') && string(1) == '1'",
                json!(true),
            ),
        ];
        for (src, want) in cases {
            let e = compile(src).unwrap();
            assert_eq!(e.eval(&v).unwrap(), want, "{src}");
        }
    }

    #[test]
    fn the_deepest_tree_evaluates_on_a_small_stack() {
        // The meter doubles the evaluator's recursion; the deepest accepted tree must
        // still evaluate on a 2 MiB thread in a debug build.
        let src = "1+".repeat(MAX_AST_DEPTH - 2) + "1";
        let e = compile(&src).unwrap();
        let out = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || e.eval(&Variables::new()))
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
        assert_eq!(out, json!(MAX_AST_DEPTH as i64 - 1));
    }

    #[test]
    fn expressions_are_send_and_sync() {
        fn check<T: Send + Sync + Clone + fmt::Debug>() {}
        check::<Expression>();
    }
}
