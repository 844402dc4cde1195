//! User tasks in the task list (issue 11, item 5): a token waiting at a user task is
//! offered to the task list with its assignment — the assignee, the candidate groups and
//! the candidate users the model names, evaluated over the instance variables when the
//! token enters — so that a task-list front end finds it by assignee or candidate without
//! reading snapshots.
//!
//! The step reports the task list to the shell as effects ([`Effect::OfferUserTask`],
//! [`Effect::AssignUserTask`], [`Effect::WithdrawUserTask`]), which every store writes as
//! one row per waiting user task in the step's own transaction. One rule keeps the rows
//! in step, as for message subscriptions: after every applied input,
//! [`Run::sync_user_tasks`] offers the user tasks a token entered (or entered again) in
//! this step and withdraws those whose wait ended — completed, interrupted by a boundary,
//! ended by a terminate end or an enclosing scope, cancelled, or the instance FAILED —
//! without each of those paths knowing about the task list. A resumed instance offers
//! its waiting user tasks again; a migration withdraws the rows it was given
//! (`Input::Migrate::user_tasks`) and offers its waiting user tasks under the target's
//! names and assignment; `Input::OfferUserTasks` offers them again where their rows are
//! missing (an instance that waits since before the task list existed).
//!
//! The assignee is the one part of the assignment that changes while the task waits
//! (claims, unclaims) and that the core judges (a claim of a task somebody else holds is
//! refused), so it is snapshot state: `h/<node>`, written only when somebody holds the
//! task. Candidates are written once per offer and only searched, so they live in the
//! row alone. A model without assignees, and an instance nobody claims, write no `h/`
//! key: their snapshots are what they were before the task list existed.
//!
//! An assignment expression that does not evaluate, or gives something that is not a
//! name (or too many), fails the instance with `EXPRESSION_FAILED` at the task, exactly
//! as a condition or a correlation key that does not evaluate.

use std::borrow::Cow;

use qflow_loader::model::{
    Assignment, Definition, NameSource, NodeIdx, NodeKind, Process, Task, TaskKind, Variables,
    ASSIGNMENT_NAME_CHARS_MAX, CANDIDATES_MAX,
};
use serde_json::Value as Json;

use super::run::Run;
use super::{codes, Effect, Input};
use crate::snapshot::{Snapshot, Status};

/// The user task at `idx` (not a receive task without a message, which the API also
/// completes but which no task list shows), with its assignment.
pub(crate) fn user_task_at(p: &Process, idx: NodeIdx) -> Option<(&Task, &Assignment)> {
    match &p.node(idx).kind {
        NodeKind::Task(t) => match &t.kind {
            TaskKind::User { assignment } => Some((t, assignment)),
            _ => None,
        },
        _ => None,
    }
}

/// The user tasks of `snap` offered to the task list: every user task a token of the
/// running instance waits at, once each, in frontier order. A FAILED instance offers
/// none (its rows were withdrawn when it failed).
pub fn offered_user_tasks(def: &Definition, snap: &Snapshot) -> Vec<String> {
    if snap.status() != Status::Running {
        return Vec::new();
    }
    let p = &def.process;
    let mut out: Vec<String> = Vec::new();
    for t in snap.tokens() {
        let is_user = p.find(t).is_some_and(|i| user_task_at(p, i).is_some());
        if is_user && out.last() != Some(t) {
            out.push(t.clone());
        }
    }
    out
}

/// The variables a task-list front end shows for the user task `node`: its input
/// mappings over the instance variables, or every instance variable when it has none.
pub fn user_task_inputs(
    def: &Definition,
    snap: &Snapshot,
    node: &str,
) -> Result<Variables, String> {
    let p = &def.process;
    let idx = p.find(node);
    let (task, _) = idx
        .and_then(|i| user_task_at(p, i))
        .ok_or_else(|| format!("`{node}` is not a user task"))?;
    let vars = super::locals::scoped_vars(p, snap, idx.unwrap_or(NodeIdx(0)));
    super::mapping::task_inputs(task, &vars)
}

/// Why a claim, an unclaim or a completion naming an assignee does not apply to `snap`,
/// or `None`. The reasons are for the person (or front end) who sent it.
pub(super) fn staleness(def: &Definition, snap: &Snapshot, input: &Input) -> Option<String> {
    let p = &def.process;
    let node = input.node()?;
    let is_user = p.find(node).is_some_and(|i| user_task_at(p, i).is_some());
    if !is_user {
        return Some(format!("`{node}` is not a user task of this definition"));
    }
    if !snap.tokens().iter().any(|t| t == node) {
        return Some(format!("user task `{node}` is not pending"));
    }
    let holder = snap.assignee(node);
    match input {
        Input::UserTaskClaimed {
            assignee, force, ..
        } => {
            if let Err(why) = check_name(assignee) {
                return Some(format!("the assignee {why}"));
            }
            match holder {
                Some(h) if h != assignee && !force => Some(format!(
                    "user task `{node}` is claimed by `{h}`; claim it with `force` to take it \
                     over"
                )),
                _ => None,
            }
        }
        Input::UserTaskUnclaimed {
            assignee: Some(a), ..
        } => match holder {
            Some(h) if h == a => None,
            Some(h) => Some(format!("user task `{node}` is claimed by `{h}`, not `{a}`")),
            None => Some(format!("user task `{node}` is not claimed by anybody")),
        },
        _ => None,
    }
}

/// Why the completion of the waiting user task `node` by `assignee` does not apply: the
/// task is held by somebody else.
pub(super) fn completion_staleness(snap: &Snapshot, node: &str, assignee: &str) -> Option<String> {
    match snap.assignee(node) {
        Some(h) if h != assignee => Some(format!(
            "user task `{node}` is claimed by `{h}`, not `{assignee}`"
        )),
        _ => None,
    }
}

/// A name of an assignment, as the task list keeps it.
fn check_name(name: &str) -> Result<(), String> {
    let chars = name.chars().count();
    if chars == 0 || chars > ASSIGNMENT_NAME_CHARS_MAX {
        return Err(format!(
            "is 1 to {ASSIGNMENT_NAME_CHARS_MAX} characters, this one is {chars}"
        ));
    }
    if name.chars().any(char::is_control) {
        return Err("may not hold control characters".to_owned());
    }
    Ok(())
}

/// An assignment evaluated for one offer.
struct Evaluated {
    assignee: Option<String>,
    candidate_groups: Vec<String>,
    candidate_users: Vec<String>,
}

impl Run<'_> {
    /// A claim or an unclaim that passed [`staleness`]: bookkeeping, no token moves.
    pub(super) fn assign_user_task(&mut self, node: &str, assignee: Option<String>) {
        self.snap.set_assignee(node, assignee.as_deref());
        self.effects.push(Effect::AssignUserTask {
            node: node.to_owned(),
            assignee,
        });
    }

    /// Makes the task list's rows exactly the waiting user tasks of a running instance:
    /// offers those entered (or entered again) in this step, and, after a resume or a
    /// migration, every waiting one; withdraws those whose wait ended. An assignment that
    /// does not evaluate fails the instance (`EXPRESSION_FAILED`), which then offers none.
    pub(super) fn sync_user_tasks(&mut self) {
        let migrated = self.user_tasks_migrated.take();
        let reoffer_all = migrated.is_some();
        let entered = std::mem::take(&mut self.user_tasks_entered);
        let before = migrated.unwrap_or_else(|| std::mem::take(&mut self.user_tasks_before));
        let resumed = !self.was_running && self.running();
        if before.is_empty()
            && entered.is_empty()
            && !reoffer_all
            && !resumed
            && self.snap.assignees.is_empty()
        {
            return;
        }
        let waiting = self.waiting_user_tasks();
        let mut offers: Vec<(NodeIdx, Evaluated)> = Vec::new();
        for idx in waiting {
            let id_key = self.id(idx);
            let id: &str = &id_key;
            let fresh = entered.contains(&idx);
            if !(fresh || reoffer_all || !before.iter().any(|b| b == id)) {
                continue;
            }
            match self.evaluate(idx, fresh) {
                Ok(a) => offers.push((idx, a)),
                Err(why) => {
                    self.fail(codes::EXPRESSION_FAILED, Some(idx), None, why);
                    offers.clear();
                    break;
                }
            }
        }
        let still: Vec<Cow<'_, str>> = self
            .waiting_user_tasks()
            .into_iter()
            .map(|idx| self.id(idx))
            .collect();
        for node in &before {
            if !still.iter().any(|s| s == node.as_str()) {
                self.effects
                    .push(Effect::WithdrawUserTask { node: node.clone() });
            }
        }
        for (idx, a) in offers {
            let node_key = self.id(idx);
            let node: &str = &node_key;
            self.snap.set_assignee(node, a.assignee.as_deref());
            self.effects.push(Effect::OfferUserTask {
                node: node.to_string(),
                assignee: a.assignee,
                candidate_groups: a.candidate_groups,
                candidate_users: a.candidate_users,
            });
        }
        // Nobody holds a task nobody waits at.
        let p = self.p;
        let tokens = &self.snap.tokens;
        self.snap.assignees.retain(|node, _| {
            tokens.iter().any(|t| t == node)
                && p.find(node).is_some_and(|i| user_task_at(p, i).is_some())
        });
    }

    /// The user tasks a token of the running instance waits at, once each (none unless
    /// it runs).
    fn waiting_user_tasks(&self) -> Vec<NodeIdx> {
        if !self.running() {
            return Vec::new();
        }
        let mut out: Vec<NodeIdx> = Vec::new();
        for t in &self.snap.tokens {
            if let Some(idx) = self
                .p
                .find(t)
                .filter(|i| user_task_at(self.p, *i).is_some())
            {
                if !out.contains(&idx) {
                    out.push(idx);
                }
            }
        }
        out
    }

    /// The assignment of the user task at `idx` for an offer. A `fresh` wait (the token
    /// entered in this step) takes the model's assignee; an offer made again (a resume,
    /// a migration) keeps whoever holds the task, and takes the model's assignee only
    /// when nobody does. Candidates are evaluated for every offer.
    fn evaluate(&self, idx: NodeIdx, fresh: bool) -> Result<Evaluated, String> {
        let Some((_, assignment)) = user_task_at(self.p, idx) else {
            return Err("not a user task".to_owned());
        };
        let node_key = self.id(idx);
        let node: &str = &node_key;
        let held = (!fresh).then(|| self.snap.assignee(node)).flatten();
        let scoped = super::locals::scoped_vars(self.p, &self.snap, idx);
        let vars: &Variables = &scoped;
        let assignee = match (held, &assignment.assignee) {
            (Some(h), _) => Some(h.to_owned()),
            (None, None) => None,
            (None, Some(source)) => assignee_of(source, vars)
                .map_err(|why| format!("the assignee of user task `{node}`: {why}"))?,
        };
        let candidate_groups = candidates_of(&assignment.candidate_groups, vars)
            .map_err(|why| format!("the candidate groups of user task `{node}`: {why}"))?;
        let candidate_users = candidates_of(&assignment.candidate_users, vars)
            .map_err(|why| format!("the candidate users of user task `{node}`: {why}"))?;
        Ok(Evaluated {
            assignee,
            candidate_groups,
            candidate_users,
        })
    }
}

/// The assignee a source gives: a name, or nobody (an empty string or null).
fn assignee_of(source: &NameSource, vars: &Variables) -> Result<Option<String>, String> {
    let expr = match source {
        NameSource::Static(name) => return Ok(Some(name.clone())),
        NameSource::Expression(e) => e,
    };
    let name = match expr.eval(vars).map_err(|e| e.to_string())? {
        Json::Null => return Ok(None),
        Json::String(s) => s.trim().to_owned(),
        other => {
            return Err(format!(
                "`{}` gave {}, not a string",
                expr.source(),
                kind_of(&other)
            ))
        }
    };
    if name.is_empty() {
        return Ok(None);
    }
    check_name(&name).map_err(|why| format!("`{}` gave a name that {why}", expr.source()))?;
    Ok(Some(name))
}

/// The candidates the sources give, in order, each once, at most [`CANDIDATES_MAX`]. An
/// expression gives a list of strings, a string of comma-separated names, or null;
/// names are trimmed and empty ones dropped.
fn candidates_of(sources: &[NameSource], vars: &Variables) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |name: &str, from: &str| -> Result<(), String> {
        let name = name.trim();
        if name.is_empty() || out.iter().any(|n| n == name) {
            return Ok(());
        }
        check_name(name).map_err(|why| format!("{from} gave a name that {why}"))?;
        if out.len() == CANDIDATES_MAX {
            return Err(format!(
                "{from} gives more than {CANDIDATES_MAX} names; a user task has at most \
                 {CANDIDATES_MAX}"
            ));
        }
        out.push(name.to_owned());
        Ok(())
    };
    for source in sources {
        let expr = match source {
            NameSource::Static(name) => {
                add(name, "the model")?;
                continue;
            }
            NameSource::Expression(e) => e,
        };
        let from = format!("`{}`", expr.source());
        match expr.eval(vars).map_err(|e| e.to_string())? {
            Json::Null => {}
            Json::String(s) => {
                for name in s.split(',') {
                    add(name, &from)?;
                }
            }
            Json::Array(items) => {
                for item in &items {
                    match item {
                        Json::String(s) => add(s, &from)?,
                        other => {
                            return Err(format!(
                                "{from} gave a list holding {}, not only strings",
                                kind_of(other)
                            ))
                        }
                    }
                }
            }
            other => {
                return Err(format!(
                    "{from} gave {}, not a list of strings or a string",
                    kind_of(&other)
                ))
            }
        }
    }
    Ok(out)
}

fn kind_of(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a map",
    }
}
