//! The run-time budget of one evaluation: a meter threaded through the `cel` evaluator.
//!
//! `cel` 0.15 has no cost limit of its own: `Value::resolve` recurses over the tree and
//! loops over every comprehension to the end, deep-copying values as it goes (a
//! `CelString` owns its bytes, a list owns its elements). So at compile time
//! [`instrument`] rewrites the parsed tree: every node the author wrote is wrapped in a
//! call to a meter function (`@qflow.meter.*`, a name CEL source cannot spell), which
//! `cel` calls with the node's value each time the node is evaluated. The meter charges
//! the value and hands it back unchanged (a borrowed value stays borrowed), so the
//! rewritten tree computes exactly what the written one does.
//!
//! What the meter charges, and why that bounds the whole evaluation:
//! - **steps**: one per metered evaluation, plus one per element of every container it
//!   walks and one per 64 bytes of every string it walks. Every operator and stdlib
//!   function `cel` has without extensions (`+`, comparisons, `in`, `contains`, `size`,
//!   conversions, indexing, comprehensions over a metered range) costs at most a constant
//!   times the size of its operands and of its result, and those are metered values;
//! - **bytes**: the size of every value an evaluation *allocates*: a result `cel` built
//!   (an owned value) and a value about to be copied into a list or map (a literal's
//!   element, a `map`/`filter` element, the result), borrowed or not. What `cel` copies
//!   is always one of those, so the bytes charged bound the memory the evaluation holds;
//!   the variables' conversion is charged too ([`Meter::charge_input`]).
//!
//! Over either limit the meter fails the node it is metering, and it stays failed: every
//! later metered node fails at once, so nothing `cel` does afterwards (an `||` that
//! absorbs an error, an `all` that defers one) can get far, and [`Meter::exceeded`] turns
//! the evaluation into a failure whatever value came out. The walk stops at the budget,
//! so metering costs at most the budget itself.
//!
//! The rewrite keeps the shapes `cel` recognises in macro expansions (the `@result + [x]`
//! step of `map`/`filter`, built in place, and the `@result && p` of `all`/`exists`,
//! whose error handling depends on it): those skeleton nodes are left bare and only the
//! author's expressions inside them are wrapped. It never wraps a name (`a.b.c` is
//! resolved as one qualified name) nor the `optional` namespace of `optional.of(x)`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use cel::common::ast::{
    operators, CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, ListExpr, MapExpr,
};
use cel::common::value::{BuiltinRef, CowVal, Val};
use cel::{ExecutionError, FunctionContext};

/// Most steps one evaluation may take (see the module doc for what a step is).
pub const EVAL_STEPS_MAX: u64 = 400_000;
/// Most bytes of values one evaluation may allocate, its variables' conversion included.
pub const EVAL_BYTES_MAX: u64 = 16 << 20;
/// What one value node (an element, an entry's value, a number) is charged beside the
/// bytes of its text: about what it occupies in `cel`'s representation.
pub const NODE_BYTES: u64 = 32;
/// A walk charges one step per this many bytes of string.
const BYTES_PER_STEP: u64 = 64;

/// How a metered node is charged, by what its parent does with the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Charge {
    /// The parent's work grows with the whole value (`==`, `in`, `+`, a range): walk it;
    /// bytes only if `cel` built it.
    Deep,
    /// The parent copies the value (a list or map literal's element, a `map` element,
    /// the result): walk it and charge its bytes, borrowed or not.
    Copy,
    /// The parent reads the top level only (`size(x)`, `x[i]`, `x.f`): a borrowed value is
    /// charged one step (and a string its length); a built one is walked.
    Shallow,
}

impl Charge {
    const ALL: [Charge; 3] = [Charge::Deep, Charge::Copy, Charge::Shallow];

    pub(crate) fn function_name(self) -> &'static str {
        match self {
            Charge::Deep => "@qflow.meter.deep",
            Charge::Copy => "@qflow.meter.copy",
            Charge::Shallow => "@qflow.meter.shallow",
        }
    }
}

/// Which limit an evaluation went over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Over {
    Steps,
    Bytes,
}

/// The counters of one evaluation. Shared with the meter functions registered in the
/// evaluation's `cel::Context` (which must be `Send + Sync`, hence atomics; one
/// evaluation runs on one thread).
#[derive(Debug, Default)]
pub(crate) struct Meter {
    steps: AtomicU64,
    bytes: AtomicU64,
    over_steps: AtomicBool,
    over_bytes: AtomicBool,
}

impl Meter {
    /// The limit gone over, if any: once set it stays set.
    pub(crate) fn exceeded(&self) -> Option<Over> {
        if self.over_steps.load(Ordering::Relaxed) {
            Some(Over::Steps)
        } else if self.over_bytes.load(Ordering::Relaxed) {
            Some(Over::Bytes)
        } else {
            None
        }
    }

    /// Charges the conversion of a variable's value into `cel`'s form.
    pub(crate) fn charge_input(&self, nodes: u64, text_bytes: u64) -> Result<(), Over> {
        self.add(nodes, nodes * NODE_BYTES + text_bytes)
    }

    fn add(&self, steps: u64, bytes: u64) -> Result<(), Over> {
        if let Some(over) = self.exceeded() {
            return Err(over);
        }
        let s = self.steps.fetch_add(steps, Ordering::Relaxed) + steps;
        let b = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if s > EVAL_STEPS_MAX {
            self.over_steps.store(true, Ordering::Relaxed);
            return Err(Over::Steps);
        }
        if b > EVAL_BYTES_MAX {
            self.over_bytes.store(true, Ordering::Relaxed);
            return Err(Over::Bytes);
        }
        Ok(())
    }

    fn charge(&self, value: &CowVal<'_, '_>, how: Charge) -> Result<(), Over> {
        let owned = value.is_owned();
        if how == Charge::Shallow && !owned {
            let text = text_len(value.as_ref());
            return self.add(1 + text / BYTES_PER_STEP, 0);
        }
        let left = EVAL_STEPS_MAX.saturating_sub(self.steps.load(Ordering::Relaxed));
        let (nodes, text) = walk(value.as_ref(), left);
        let bytes = if owned || how == Charge::Copy {
            nodes * NODE_BYTES + text
        } else {
            0
        };
        self.add(1 + nodes + text / BYTES_PER_STEP, bytes)
    }
}

/// The bytes of a string or bytes value, 0 for anything else.
fn text_len(v: &dyn Val) -> u64 {
    match v.as_builtin() {
        BuiltinRef::String(s) => s.inner().len() as u64,
        BuiltinRef::Bytes(b) => b.inner().len() as u64,
        _ => 0,
    }
}

/// Counts the nodes and text bytes of `v` with an explicit stack, stopping once the
/// count passes `nodes_max` (the caller is then over budget anyway).
fn walk(v: &dyn Val, nodes_max: u64) -> (u64, u64) {
    let (mut nodes, mut text) = (0u64, 0u64);
    let mut stack: Vec<&dyn Val> = vec![v];
    while let Some(v) = stack.pop() {
        nodes += 1;
        if nodes > nodes_max {
            break;
        }
        match v.as_builtin() {
            BuiltinRef::String(s) => text += s.inner().len() as u64,
            BuiltinRef::Bytes(b) => text += b.inner().len() as u64,
            BuiltinRef::List(l) => stack.extend(l.inner().iter().map(|x| &**x)),
            BuiltinRef::Map(m) => {
                for (k, x) in m.inner().iter() {
                    stack.push(k.inner());
                    stack.push(&**x);
                }
            }
            BuiltinRef::Optional(o) => stack.extend(o.option()),
            _ => {}
        }
    }
    (nodes, text)
}

type MeterFn = Box<
    dyn for<'c, 'v> Fn(&mut FunctionContext<'c, 'v>) -> Result<CowVal<'c, 'v>, ExecutionError>
        + Send
        + Sync,
>;

/// Registers the three meter functions of `meter` in `ctx`.
pub(crate) fn register(ctx: &mut cel::Context<'_, '_>, meter: &Arc<Meter>) {
    for how in Charge::ALL {
        let meter = Arc::clone(meter);
        let f: MeterFn = Box::new(move |ftx| {
            let value = ftx
                .args
                .pop()
                .ok_or_else(|| ftx.error("the meter takes one argument"))?;
            meter
                .charge(&value, how)
                .map_err(|_| ftx.error("over the evaluation budget"))?;
            Ok(value)
        });
        // The names cannot collide with the standard library's: they are not CEL names.
        let _ = ctx.add_function(how.function_name(), f);
    }
}

/// The tree `cel` evaluates: `root` with every author-written node metered (see the
/// module doc). The root's value is copied out of the evaluator, so it is charged as a
/// copy. Recursive: it runs only on trees `check_tree` accepted (depth ≤ 24).
pub(crate) fn instrument(root: &IdedExpr) -> IdedExpr {
    inst(root, Charge::Copy)
}

fn wrap(e: IdedExpr, how: Charge) -> IdedExpr {
    IdedExpr {
        id: e.id,
        expr: Expr::Call(CallExpr {
            func_name: how.function_name().to_string(),
            target: None,
            args: vec![e],
        }),
    }
}

/// Whether `e` spells a qualified name (`a`, `a.b.c`), which `cel` resolves as one.
fn is_name(e: &Expr) -> bool {
    match e {
        Expr::Ident(_) => true,
        Expr::Select(s) => !s.test && is_name(&s.operand.expr),
        _ => false,
    }
}

fn name_root(e: &Expr) -> Option<&str> {
    match e {
        Expr::Ident(n) => Some(n),
        Expr::Select(s) if !s.test => name_root(&s.operand.expr),
        _ => None,
    }
}

fn inst(e: &IdedExpr, how: Charge) -> IdedExpr {
    let expr = match &e.expr {
        // A literal costs nothing to produce; only a copy of it costs its bytes.
        Expr::Literal(_) if how != Charge::Copy => return e.clone(),
        Expr::Literal(_) | Expr::Ident(_) | Expr::Unspecified | Expr::Struct(_) => e.expr.clone(),
        _ if is_name(&e.expr) => e.expr.clone(),
        Expr::Select(s) => {
            let mut s = s.clone();
            if !is_name(&s.operand.expr) {
                *s.operand = inst(&s.operand, Charge::Shallow);
            }
            Expr::Select(s)
        }
        Expr::Call(c) => Expr::Call(inst_call(c)),
        Expr::List(l) => Expr::List(ListExpr {
            elements: l.elements.iter().map(|x| inst(x, Charge::Copy)).collect(),
            optional_indices: l.optional_indices.clone(),
        }),
        Expr::Map(m) => Expr::Map(inst_map(m)),
        Expr::Comprehension(c) => Expr::Comprehension(Box::new(ComprehensionExpr {
            iter_range: inst(&c.iter_range, Charge::Deep),
            loop_step: skeleton(&c.loop_step, &c.accu_var),
            ..(**c).clone()
        })),
    };
    wrap(IdedExpr { id: e.id, expr }, how)
}

fn inst_call(c: &CallExpr) -> CallExpr {
    let top_level_only = matches!(
        c.func_name.as_str(),
        "size" | operators::INDEX | operators::OPT_INDEX | operators::OPT_SELECT
    );
    let args = c
        .args
        .iter()
        .enumerate()
        .map(|(i, a)| {
            // `size(x)`, `x[i]`, `x.?f` read the top level of their first operand.
            let shallow = top_level_only && (i == 0 || c.target.is_some());
            inst(
                a,
                if shallow {
                    Charge::Shallow
                } else {
                    Charge::Deep
                },
            )
        })
        .collect();
    let target = c.target.as_ref().map(|t| {
        // `optional.of(x)` names a function: its target must stay a bare name.
        if name_root(&t.expr) == Some("optional") {
            t.clone()
        } else {
            let how = if c.func_name == "size" {
                Charge::Shallow
            } else {
                Charge::Deep
            };
            Box::new(inst(t, how))
        }
    });
    CallExpr {
        func_name: c.func_name.clone(),
        target,
        args,
    }
}

fn inst_map(m: &MapExpr) -> MapExpr {
    let mut m = m.clone();
    for entry in &mut m.entries {
        if let EntryExpr::MapEntry(me) = &mut entry.expr {
            me.key = inst(&me.key, Charge::Copy);
            me.value = inst(&me.value, Charge::Copy);
        }
    }
    m
}

/// Instruments a comprehension's loop step, keeping the macro's own nodes as `cel`
/// expects them: `@result + [x]`, `g ? step : @result`, `@result && p`, `@result || p`,
/// `@result + 1`. Any other shape is instrumented like authored code, which is only
/// slower, never unmetered.
fn skeleton(e: &IdedExpr, accu: &str) -> IdedExpr {
    let is_accu = |x: &IdedExpr| matches!(&x.expr, Expr::Ident(n) if n == accu);
    let Expr::Call(c) = &e.expr else {
        return if is_accu(e) {
            e.clone()
        } else {
            inst(e, Charge::Deep)
        };
    };
    if c.target.is_some() {
        return inst(e, Charge::Deep);
    }
    let args = match (c.func_name.as_str(), c.args.as_slice()) {
        (operators::CONDITIONAL, [g, a, b]) if is_accu(a) || is_accu(b) => {
            vec![inst(g, Charge::Deep), skeleton(a, accu), skeleton(b, accu)]
        }
        (operators::ADD, [r, l]) if is_accu(r) => match &l.expr {
            Expr::List(list) => vec![
                r.clone(),
                IdedExpr {
                    id: l.id,
                    expr: Expr::List(ListExpr {
                        elements: list
                            .elements
                            .iter()
                            .map(|x| inst(x, Charge::Copy))
                            .collect(),
                        optional_indices: list.optional_indices.clone(),
                    }),
                },
            ],
            _ => vec![r.clone(), inst(l, Charge::Deep)],
        },
        (operators::LOGICAL_AND | operators::LOGICAL_OR, [r, p]) if is_accu(r) => {
            vec![r.clone(), inst(p, Charge::Deep)]
        }
        _ => return inst(e, Charge::Deep),
    };
    IdedExpr {
        id: e.id,
        expr: Expr::Call(CallExpr {
            func_name: c.func_name.clone(),
            target: None,
            args,
        }),
    }
}
