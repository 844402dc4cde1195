//! Variable scopes inside the instance: what a node sees, and where a write from inside
//! a scope lands.
//!
//! Two kinds of scope hold locals of their own, laid over the instance variables
//! wherever something evaluates inside them ([`scoped_vars`], innermost last):
//!
//! - an inner instance of a multi-instance activity: its element and `loopCounter`
//!   (`multi`, from `i/<body>`; never written to);
//! - a sub-process instance with Zeebe input mappings (`zeebe:ioMapping` on an embedded
//!   sub-process; `docs/vendor-mappings.md`, "Sub-processes"): `l/<instance>`, keyed by
//!   the scope instance (`sub`, `sub@2`, `sub#3`, `outer@2/sub`), so two instances of
//!   one sub-process never share them. The inputs are evaluated as a token enters the
//!   instance, over what it sees there. A write from inside — a task's result or
//!   outputs, a message's or an error's variables, a script's result, an event's
//!   outputs, an output collection — goes to the nearest enclosing instance whose locals
//!   hold the name, else to the instance variables ([`Run::write_vars`]): Zeebe's
//!   propagation ("Variable propagation": it stops at the first scope that has a
//!   variable of the name, else creates it at the root). When the instance completes,
//!   its output mappings are evaluated over what it sees with its locals over them and
//!   written from the scope around it; then its locals go. An instance that ends any
//!   other way (interrupted by a boundary or a completion condition, terminated from
//!   outside, cancelled) drops them unmapped — without output mappings, Zeebe removes a
//!   sub-process's locals with its scope too.
//!
//! A model without sub-process mappings writes no `l/` key, and every function here
//! returns at once for a snapshot that holds no locals. Nothing here reads the clock.

use std::borrow::Cow;

use qflow_loader::model::{NodeIdx, NodeKind, Process, Variables};
use serde_json::Value as Json;

use super::codes;
use super::run::Run;
use crate::snapshot::Snapshot;

/// One scope with locals around a node, as [`levels`] meets it.
enum Level<'s> {
    /// The inner instance `k` of the multi-instance body.
    Inner(NodeIdx, u32),
    /// A sub-process instance's locals (`l/`).
    Sub(&'s Variables),
}

/// The scopes with locals around `idx`, innermost first: the inner instances it runs as
/// or in, and (when `subs`) the sub-process instances that enclose it — not `idx`
/// itself when it is one.
fn levels<'s>(p: &Process, snap: &'s Snapshot, idx: NodeIdx, subs: bool) -> Vec<Level<'s>> {
    let inners = !p.multi_instances.is_empty();
    let subs = subs && !snap.locals.is_empty();
    let mut levels = Vec::new();
    if !inners && !subs {
        return levels;
    }
    let mut cur = idx;
    // Scopes nest no deeper than the loader's element depth.
    for _ in 0..1024 {
        if inners {
            if let Some(body) = p.body_of(cur) {
                levels.push(Level::Inner(body, cur.instance()));
            }
        }
        let Some(s) = p.scope_instance(cur) else {
            break;
        };
        if subs {
            if let Some(locals) = snap.locals.get(&*p.key(s)) {
                levels.push(Level::Sub(locals));
            }
        }
        cur = s;
    }
    levels
}

/// `vars` with the `levels` laid over them, the outermost first.
fn laid<'s>(p: &Process, snap: &'s Snapshot, levels: Vec<Level<'_>>) -> Cow<'s, Variables> {
    if levels.is_empty() {
        return Cow::Borrowed(&snap.vars);
    }
    let mut vars = snap.vars.clone();
    for level in levels.into_iter().rev() {
        match level {
            Level::Inner(body, k) => super::multi::inner_locals(p, snap, body, k, &mut vars),
            Level::Sub(locals) => vars.extend(locals.iter().map(|(k, v)| (k.clone(), v.clone()))),
        }
    }
    Cow::Owned(vars)
}

/// The variables the node `idx` evaluates over: the instance variables, with the locals
/// of every inner instance and sub-process instance it runs in laid over them (the
/// innermost last). Borrowed, at no cost, when there are none.
pub(crate) fn scoped_vars<'s>(p: &Process, snap: &'s Snapshot, idx: NodeIdx) -> Cow<'s, Variables> {
    laid(p, snap, levels(p, snap, idx, true))
}

/// The variables a task's or an event's output mappings are evaluated over: the
/// instance variables with the locals of the sub-process instances around `idx` over
/// them. (An inner instance's element and loop counter are not among them, as before
/// sub-process locals: `docs/vendor-mappings.md`, "Multi-instance".)
pub(crate) fn output_vars<'s>(p: &Process, snap: &'s Snapshot, idx: NodeIdx) -> Cow<'s, Variables> {
    if snap.locals.is_empty() {
        return Cow::Borrowed(&snap.vars);
    }
    let levels = levels(p, snap, idx, true)
        .into_iter()
        .filter(|l| matches!(l, Level::Sub(_)))
        .collect();
    laid(p, snap, levels)
}

/// What the sub-process instance `sp` sees inside it: [`scoped_vars`] of `sp` with its
/// own locals over them. Its output mappings, and an inner instance's output element
/// and completion condition, are evaluated over these.
pub(crate) fn inside_vars<'s>(p: &Process, snap: &'s Snapshot, sp: NodeIdx) -> Cow<'s, Variables> {
    let mut vars = scoped_vars(p, snap, sp);
    if let Some(own) = own_locals(p, snap, sp) {
        vars.to_mut()
            .extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    vars
}

/// What the node `at` evaluates a timer or a correlation key over: [`scoped_vars`], and
/// for a boundary event of a sub-process instance the instance's own locals over them
/// (Zeebe subscribes an activity's boundary events in its scope, after its input
/// mappings).
pub(crate) fn event_vars<'s>(p: &Process, snap: &'s Snapshot, at: NodeIdx) -> Cow<'s, Variables> {
    let vars = scoped_vars(p, snap, at);
    if snap.locals.is_empty() {
        return vars;
    }
    match &p.node(at).kind {
        NodeKind::Boundary(b) => {
            let host = p.attached(at, b.attached_to);
            let mut vars = vars;
            if let Some(own) = own_locals(p, snap, host) {
                vars.to_mut()
                    .extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            vars
        }
        _ => vars,
    }
}

fn own_locals<'s>(p: &Process, snap: &'s Snapshot, sp: NodeIdx) -> Option<&'s Variables> {
    if snap.locals.is_empty() {
        return None;
    }
    snap.locals.get(&*p.key(sp))
}

impl<'a> Run<'a> {
    /// Sets `writes` as written from inside the scope instance `scope` (`None`: the
    /// process level): each name in the locals of the nearest instance, `scope`
    /// outwards, that holds it, else in the instance variables. For a model with
    /// conditional events, each write that creates a variable or gives it another value
    /// is noted for them (`conditional`).
    pub(super) fn write_vars(&mut self, scope: Option<NodeIdx>, writes: Variables) {
        let noting = !self.p.conditionals.is_empty();
        if self.snap.locals.is_empty() && !noting {
            self.snap.vars.extend(writes);
            return;
        }
        let mut holders: Vec<String> = Vec::new();
        let mut cur = scope;
        for _ in 0..1024 {
            if self.snap.locals.is_empty() {
                break;
            }
            let Some(s) = cur else { break };
            let key = self.id(s);
            if self.snap.locals.contains_key(&*key) {
                holders.push(key.into_owned());
            }
            cur = self.p.scope_instance(s);
        }
        for (name, value) in writes {
            let holder = holders.iter().find(|h| {
                self.snap
                    .locals
                    .get(h.as_str())
                    .is_some_and(|l| l.contains_key(&name))
            });
            let into = match holder.and_then(|h| self.snap.locals.get_mut(h.as_str())) {
                Some(locals) => locals,
                None => &mut self.snap.vars,
            };
            if !noting {
                into.insert(name, value);
                continue;
            }
            let created = !into.contains_key(&name);
            if into.get(&name) != Some(&value) {
                self.conditions_changed.push((name.clone(), created));
            }
            into.insert(name, value);
        }
    }

    /// [`Run::write_vars`] from the node `at`: from the scope instance it runs in.
    pub(super) fn write_vars_from(&mut self, at: NodeIdx, writes: Variables) {
        self.write_vars(self.scope_of(at), writes);
    }

    /// A token entered the sub-process instance `sp`: its input mappings, evaluated over
    /// what it sees there, become its locals. `false` when one does not evaluate: the
    /// instance failed at `sp` (`EXPRESSION_FAILED`), and a resume enters it again.
    pub(super) fn enter_locals(&mut self, sp: NodeIdx) -> bool {
        let Some(m) = self.p.sub_process_mappings(sp) else {
            return true;
        };
        let collected = self.collected_variable(sp);
        if m.inputs.is_empty() && collected.is_none() {
            return true;
        }
        let vars = scoped_vars(self.p, &self.snap, sp);
        let locals = crate::vendor_io::locals(m.style, &m.inputs, &vars);
        drop(vars);
        match locals {
            Ok(mut locals) => {
                if let Some(name) = collected {
                    locals.entry(name.to_owned()).or_insert(Json::Null);
                }
                self.snap.set_locals(&self.id(sp), Some(locals));
                true
            }
            Err(e) => {
                let message = format!("the mappings of `{}`: {e}", self.id(sp));
                self.fail(codes::EXPRESSION_FAILED, Some(sp), None, message);
                false
            }
        }
    }

    /// For an inner instance `sp` of a multi-instance sub-process whose output element is
    /// a variable (`outputElement="=shipped"`), that variable: Zeebe makes it a local of
    /// each inner instance, null at first (unless the input element or `loopCounter` is
    /// that variable already), so that what the inside or the output mappings write to it
    /// stays in the instance and is collected from there (`MultiInstanceBodyProcessor`,
    /// `setLoopVariables`).
    fn collected_variable(&self, sp: NodeIdx) -> Option<&'a str> {
        let mi = self.p.multi_instance(self.p.body_of(sp)?)?;
        let name = mi.output_element.as_ref()?.source().trim();
        let plain = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let taken = mi.element.as_deref() == Some(name) || name == "loopCounter";
        (plain && !taken).then_some(name)
    }

    /// The sub-process instance `sp` completes: its output mappings, evaluated over what
    /// it sees with its locals over them, are written from the scope around it (for an
    /// inner instance of a multi-instance sub-process, from the inner instance itself,
    /// as Zeebe does, so that its output element sees them). `false` when one does not
    /// evaluate: the instance failed at `sp`, which keeps its token and locals, and a
    /// resume completes it again.
    pub(super) fn complete_locals(&mut self, sp: NodeIdx) -> bool {
        let Some(m) = self.p.sub_process_mappings(sp) else {
            return true;
        };
        if m.outputs.is_empty() {
            return true;
        }
        let vars = inside_vars(self.p, &self.snap, sp);
        let writes = crate::vendor_io::complete(m.style, &[], &m.outputs, &vars, None);
        drop(vars);
        match writes {
            Ok(writes) => {
                let from = match self.p.body_of(sp) {
                    Some(_) => Some(sp),
                    None => self.scope_of(sp),
                };
                self.write_vars(from, writes);
                true
            }
            Err(e) => {
                let message = format!("the mappings of `{}`: {e}", self.id(sp));
                self.fail(codes::EXPRESSION_FAILED, Some(sp), None, message);
                false
            }
        }
    }

    /// The sub-process instance `sp` ended: its locals go.
    pub(super) fn drop_locals(&mut self, sp: NodeIdx) {
        if !self.snap.locals.is_empty() {
            self.snap.set_locals(&self.id(sp), None);
        }
    }
}
