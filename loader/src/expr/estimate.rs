//! The static cost estimate of an expression at the documented input caps, so that
//! `qflow check` refuses what the run-time budget ([`super::budget`]) would certainly
//! refuse on inputs at those caps, by a wide margin.
//!
//! The estimate walks the parsed tree once (its depth is already capped) and computes a
//! *lower* bound of the steps the meter would charge, on the inputs the caps allow that
//! the expression itself shows to be lists: a name the expression iterates over (the
//! range of `all`, `exists`, `map`, `filter`…) is taken to be a list of
//! [`MAX_INPUT_ITEMS`] scalars wherever it appears; every other name, and every item, is
//! taken to be a scalar. Nothing is assumed about types the expression does not reveal,
//! so an expression refused is one that no input at the caps can run: the bound is what
//! any such input costs at least. It counts only what every evaluation that produces a
//! value does: of `a && b`, `a || b` the cheaper side (either may decide, and an error
//! on one side is absorbed when the other decides), of `c ? a : b` the cheaper branch, of
//! `all` and `exists` one iteration (they may stop there); `map`, `filter` and
//! `exists_one` run every iteration or fail.
//!
//! The meter, not this estimate, is the guarantee. An expression is refused only when
//! the bound is over the step budget by more than [`REFUSAL_FACTOR`]: work quadratic in a
//! list's length (a join of a list with itself, `xs.filter(a, xs.exists(b, b > a + 1))`,
//! ~600x the budget at the caps, and bodies up to ~30 times larger) loads, as it is fine
//! on the short lists real instances hold, and is left to the meter; a list copied per
//! item of a list (`size(xs.map(a, xs.map(b, xs)))`, ~350,000x) is refused.

use std::collections::BTreeSet;

use cel::common::ast::{operators, EntryExpr, Expr, IdedExpr};

use super::budget::EVAL_STEPS_MAX;
use super::MAX_INPUT_ITEMS;

/// How far over the step budget the lower bound must be for the loader to refuse the
/// expression (see the module doc for where the line falls).
pub const REFUSAL_FACTOR: f64 = 16_384.0;

/// The lower bounds of one node: the nodes of its value, the items the meter would see
/// iterated over it, and the steps evaluating it charges; and the smallest subexpression
/// over the refusal line among those every evaluation of the node that produces a value
/// evaluates (an operand `cel` may skip does not count, see [`lazy`]).
#[derive(Clone, Copy, Debug)]
struct Est {
    nodes: f64,
    items: f64,
    steps: f64,
    over: Option<OverBudget>,
}

const SCALAR: Est = Est {
    nodes: 1.0,
    items: 0.0,
    steps: 1.0,
    over: None,
};

/// Where the estimate first goes over the line, and its bound there.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OverBudget {
    pub node: u64,
    pub steps: f64,
}

/// Estimates `root`; `Err` names the smallest subexpression whose bound is over the
/// refusal line and that every evaluation of `root` producing a value evaluates.
pub(crate) fn check(root: &IdedExpr) -> Result<(), OverBudget> {
    let mut ranges = BTreeSet::new();
    collect_ranges(root, &mut ranges);
    let mut walk = Walk {
        ranges,
        bound: Vec::new(),
    };
    walk.est(root).over.map_or(Ok(()), Err)
}

/// The first of `parts` with a subexpression over the line.
fn first_over(parts: &[Est]) -> Option<OverBudget> {
    parts.iter().find_map(|p| p.over)
}

/// The names (`xs`, `order.items`) that some comprehension iterates over directly.
fn collect_ranges(root: &IdedExpr, out: &mut BTreeSet<String>) {
    let mut stack = vec![root];
    while let Some(e) = stack.pop() {
        match &e.expr {
            Expr::Comprehension(c) => {
                if let Some(n) = name_of(&c.iter_range.expr) {
                    out.insert(n);
                }
                stack.extend([&c.iter_range, &c.accu_init, &c.loop_step, &c.result]);
            }
            Expr::Call(c) => {
                stack.extend(c.target.as_deref());
                stack.extend(&c.args);
            }
            Expr::List(l) => stack.extend(&l.elements),
            Expr::Map(m) => {
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        stack.extend([&me.key, &me.value]);
                    }
                }
            }
            Expr::Select(s) => stack.push(&s.operand),
            _ => {}
        }
    }
}

/// `a.b.c` for a qualified name, else `None`.
fn name_of(e: &Expr) -> Option<String> {
    match e {
        Expr::Ident(n) => Some(n.clone()),
        Expr::Select(s) if !s.test => Some(format!("{}.{}", name_of(&s.operand.expr)?, s.field)),
        _ => None,
    }
}

struct Walk {
    ranges: BTreeSet<String>,
    /// The comprehension variables in scope (items: scalars).
    bound: Vec<String>,
}

impl Walk {
    fn est(&mut self, e: &IdedExpr) -> Est {
        let mut est = self.node(e);
        if est.over.is_none() && est.steps > REFUSAL_FACTOR * EVAL_STEPS_MAX as f64 {
            est.over = Some(OverBudget {
                node: e.id,
                steps: est.steps,
            });
        }
        est
    }

    fn node(&mut self, e: &IdedExpr) -> Est {
        if let Some(name) = name_of(&e.expr) {
            let root = name.split('.').next().unwrap_or_default();
            let is_bound = self.bound.iter().any(|b| b == root);
            return if !is_bound && self.ranges.contains(&name) {
                let n = MAX_INPUT_ITEMS as f64;
                Est {
                    nodes: n + 1.0,
                    items: n,
                    steps: 1.0,
                    over: None,
                }
            } else {
                SCALAR
            };
        }
        match &e.expr {
            Expr::Select(s) => {
                let o = self.est(&s.operand);
                Est {
                    steps: o.steps + 1.0,
                    over: o.over,
                    ..SCALAR
                }
            }
            Expr::List(l) => {
                let parts: Vec<Est> = l.elements.iter().map(|x| self.est(x)).collect();
                built(&parts)
            }
            Expr::Map(m) => {
                let mut parts = Vec::new();
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        parts.push(self.est(&me.key));
                        parts.push(self.est(&me.value));
                    }
                }
                built(&parts)
            }
            Expr::Call(c) => {
                let mut parts: Vec<Est> = Vec::new();
                if let Some(t) = &c.target {
                    parts.push(self.est(t));
                }
                parts.extend(c.args.iter().map(|a| self.est(a)));
                if let Some(est) = lazy(&c.func_name, c.target.is_some(), &parts) {
                    return est;
                }
                let walks = !matches!(
                    c.func_name.as_str(),
                    "size" | operators::INDEX | operators::OPT_INDEX | operators::OPT_SELECT
                );
                let steps = parts.iter().map(|p| p.steps).sum::<f64>()
                    + 1.0
                    + if walks {
                        parts.iter().map(|p| p.nodes).sum()
                    } else {
                        0.0
                    };
                let nodes = if c.func_name == operators::ADD {
                    parts.iter().map(|p| p.nodes).sum()
                } else {
                    1.0
                };
                Est {
                    nodes,
                    items: 0.0,
                    steps,
                    over: first_over(&parts),
                }
            }
            Expr::Comprehension(c) => {
                let range = self.est(&c.iter_range);
                let n = range.items;
                let vars: Vec<String> = std::iter::once(c.iter_var.clone())
                    .chain(c.iter_var2.clone())
                    .collect();
                let depth = self.bound.len();
                self.bound.extend(vars);
                let step = self.loop_step(&c.loop_step, &c.accu_var);
                self.bound.truncate(depth);
                // `map`, `filter` and `exists_one` (a literal loop condition) run every
                // iteration or fail; `all` and `exists` may stop after the first one, and
                // an error in any iteration but one can be absorbed by a later one.
                let runs = if matches!(c.loop_cond.expr, Expr::Literal(_)) {
                    n
                } else {
                    n.min(1.0)
                };
                let nodes = 1.0 + runs * step.nodes;
                Est {
                    nodes,
                    items: n,
                    steps: range.steps + range.nodes + runs * step.steps + 1.0 + nodes,
                    over: range.over.or(if runs > 0.0 { step.over } else { None }),
                }
            }
            _ => SCALAR,
        }
    }

    /// One iteration of a macro's loop step: its steps, and the nodes it appends to the
    /// result for certain (only an unguarded `@result + [x]`, the step of `map`).
    fn loop_step(&mut self, e: &IdedExpr, accu: &str) -> Est {
        let is_accu = |x: &IdedExpr| matches!(&x.expr, Expr::Ident(n) if n == accu);
        if let Expr::Call(c) = &e.expr {
            if let (operators::ADD, [r, l]) = (c.func_name.as_str(), c.args.as_slice()) {
                if let (true, Expr::List(list)) = (is_accu(r), &l.expr) {
                    let parts: Vec<Est> = list.elements.iter().map(|x| self.est(x)).collect();
                    let copied: f64 = parts.iter().map(|p| p.nodes).sum();
                    return Est {
                        nodes: copied,
                        items: 0.0,
                        steps: parts.iter().map(|p| p.steps).sum::<f64>() + copied,
                        over: first_over(&parts),
                    };
                }
            }
        }
        let s = self.est(e);
        Est {
            nodes: 0.0,
            items: 0.0,
            steps: s.steps,
            over: s.over,
        }
    }
}

/// The bound of a call that `cel` may finish without evaluating all its operands, or
/// `None` for a strict call. A bound must hold for every evaluation that produces a
/// value, so only the operands such an evaluation certainly evaluates count:
/// - `a && b`, `a || b`: the left one may decide, and an error on either side is absorbed
///   when the other side decides, so only the cheaper side counts;
/// - `c ? a : b`: the condition, and the cheaper branch;
/// - `x[i]`, `x[?i]`: an empty optional `x` returns before `i` is evaluated.
///
/// Each operand evaluated is metered as a walk of its value (see [`super::budget`]).
fn lazy(func: &str, has_target: bool, parts: &[Est]) -> Option<Est> {
    let cost = |p: &Est| p.steps + p.nodes;
    let cheaper = |a: Est, b: Est| if cost(&a) <= cost(&b) { a } else { b };
    let (steps, nodes, over) = match (func, parts) {
        (operators::LOGICAL_AND | operators::LOGICAL_OR, [a, b]) => {
            let side = cheaper(*a, *b);
            (cost(&side), 1.0, side.over)
        }
        (operators::CONDITIONAL, [c, a, b]) => {
            let branch = cheaper(*a, *b);
            (
                cost(c) + cost(&branch),
                a.nodes.min(b.nodes),
                c.over.or(branch.over),
            )
        }
        (operators::INDEX | operators::OPT_INDEX, [x, _]) if !has_target => (x.steps, 1.0, x.over),
        _ => return None,
    };
    Some(Est {
        nodes,
        items: 0.0,
        steps: steps + 1.0,
        over,
    })
}

/// A list or map literal: it copies (and the meter walks) every part.
fn built(parts: &[Est]) -> Est {
    let nodes = 1.0 + parts.iter().map(|p| p.nodes).sum::<f64>();
    Est {
        nodes,
        items: parts.len() as f64,
        steps: parts.iter().map(|p| p.steps).sum::<f64>() + nodes,
        over: first_over(parts),
    }
}
