//! Reading a scenario file: the one parser behind `qflow simulate --scenario FILE` and
//! every golden case's `scenario.json`, so that a golden case is always a scenario an
//! author can run by hand (format: `docs/simulate.md`).
//!
//! The scenario types themselves are the engine's ([`qflow_core::sim::Scenario`]); this
//! module adds what a file format needs on top of them: errors that name the innermost JSON
//! path and what was expected (`at tasks.pay[1]: missing field `code``, `at
//! tasks.pay[0].after_ms: invalid type: …`), and checks against the model that report every
//! problem at once instead of the first. It never runs the engine.
//!
//! What the JSON half refuses is decided by the types' own (strict) `Deserialize` impls in
//! `qflow_core::sim`: only objects where the format has objects (an array is never read
//! positionally), no key twice in one object (`variables`, `tasks`, `outputs` and every
//! value inside included), no field that the outcome or event kind does not take.

use std::fmt;

use qflow_core::sim::{ScriptedEvent, Targets, STEPS_LIMIT};
use qflow_loader::model::{Definition, NodeIdx, NodeKind, TaskKind};

pub use qflow_core::sim::{Scenario, Scripted};

/// Most scripted outcomes for one task: a scenario is a hand-written script.
pub const OUTCOMES_PER_TASK_MAX: usize = 1_000;
/// Most scripted events in one scenario.
pub const EVENTS_MAX: usize = 10_000;

/// A scenario problem: where (a JSON path; empty for the file as a whole) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() || self.path == "." {
            write!(f, "{}", self.message)
        } else {
            write!(f, "at {}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ScenarioError {}

/// Parses scenario JSON and checks it against the model. Syntax and type errors stop at
/// the first (the JSON cannot be read past them); model-level problems are all reported.
pub fn parse(text: &str, definition: &Definition) -> Result<Scenario, Vec<ScenarioError>> {
    parse_with(text, definition, &Targets::new())
}

/// [`parse`], for a scenario that may migrate onto `targets`: a scripted task may be one
/// of a target, and every `migrate` event must name a target given.
pub fn parse_with(
    text: &str,
    definition: &Definition,
    targets: &Targets,
) -> Result<Scenario, Vec<ScenarioError>> {
    let scenario = parse_json(text).map_err(|e| vec![e])?;
    let problems = validate_with(&scenario, definition, targets);
    if problems.is_empty() {
        Ok(scenario)
    } else {
        Err(problems)
    }
}

/// The JSON half of [`parse`]: syntax, types and unknown fields, with the failing path.
pub fn parse_json(text: &str) -> Result<Scenario, ScenarioError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let scenario: Scenario =
        serde_path_to_error::deserialize(&mut de).map_err(|err| ScenarioError {
            path: err.path().to_string(),
            message: describe(err.inner()),
        })?;
    de.end().map_err(|err| ScenarioError {
        path: String::new(),
        message: describe(&err),
    })?;
    Ok(scenario)
}

/// serde_json ends its messages with "at line L column C"; keep the position, in words
/// that read as part of the sentence. A value refused before its first character was
/// consumed (an array where an object belongs, at the start of the file) is reported at
/// column 0; columns here are 1-based, so it is shown as column 1.
fn describe(err: &serde_json::Error) -> String {
    let text = err.to_string();
    match text.rfind(" at line ") {
        Some(i) if err.line() > 0 => format!(
            "{} (line {}, column {})",
            &text[..i],
            err.line(),
            err.column().max(1)
        ),
        _ => text,
    }
}

/// The model-level checks: every node named exists and has the right kind; instants are
/// not negative, not before the start, and the horizon is not before the start; lists are
/// bounded.
pub fn validate(s: &Scenario, definition: &Definition) -> Vec<ScenarioError> {
    validate_with(s, definition, &Targets::new())
}

/// [`validate`], for a scenario that may migrate onto `targets`.
pub fn validate_with(
    s: &Scenario,
    definition: &Definition,
    targets: &Targets,
) -> Vec<ScenarioError> {
    let mut problems = Vec::new();
    let mut problem = |path: String, message: String| {
        problems.push(ScenarioError { path, message });
    };
    if s.start_at_ms < 0 {
        problem(
            "start_at_ms".into(),
            format!(
                "{} is negative; instants are milliseconds since the Unix epoch",
                s.start_at_ms
            ),
        );
    }
    if let Some(horizon) = s.horizon_ms {
        if horizon < s.start_at_ms {
            problem(
                "horizon_ms".into(),
                format!("{horizon} is before start_at_ms ({})", s.start_at_ms),
            );
        }
    }
    if let Some(max) = s.max_steps {
        if max == 0 || max > STEPS_LIMIT {
            problem(
                "max_steps".into(),
                format!("{max} is outside 1..={STEPS_LIMIT}"),
            );
        }
    }
    for (node, list) in &s.tasks {
        let path = format!("tasks.{node}");
        // A task of a target the run migrates onto is scripted like one of the model.
        let in_target = targets.values().find(|t| scripted_kind(t, node).is_some());
        match scripted_kind(in_target.unwrap_or(definition), node) {
            None => problem(path.clone(), no_node(definition, node)),
            Some(Some(TaskKind::Registered { .. })) => {}
            // A call activity's outcomes are what its called instances do.
            Some(Some(TaskKind::Call(_))) => {
                let handler_only = list
                    .iter()
                    .position(|o| matches!(o, Scripted::Panic { .. } | Scripted::TimeLimit { .. }));
                if let Some(k) = handler_only {
                    problem(
                        format!("tasks.{node}[{k}].outcome"),
                        format!(
                            "node `{node}` is a call activity, whose called instance runs \
                             no handler: script ok, fail, bpmn_error or hang"
                        ),
                    );
                }
            }
            Some(_) => problem(
                path.clone(),
                format!(
                    "node `{node}` is not a registered task (`serviceTask q:task`) or a call \
                     activity; only those take scripted outcomes"
                ),
            ),
        }
        if list.len() > OUTCOMES_PER_TASK_MAX {
            problem(
                path,
                format!("at most {OUTCOMES_PER_TASK_MAX} outcomes per task"),
            );
        }
    }
    for (node, list) in &s.channels {
        let path = format!("channels.{node}");
        let in_target = targets.values().find(|t| scripted_kind(t, node).is_some());
        match scripted_kind(in_target.unwrap_or(definition), node) {
            None => problem(path.clone(), no_node(definition, node)),
            Some(Some(TaskKind::Channel { .. })) => {}
            Some(_) => problem(
                path.clone(),
                format!(
                    "node `{node}` is not a channel-call task (`serviceTask q:channel`); only \
                     those take scripted answers"
                ),
            ),
        }
        if list.len() > OUTCOMES_PER_TASK_MAX {
            problem(
                path,
                format!("at most {OUTCOMES_PER_TASK_MAX} answers per channel call"),
            );
        }
    }
    for (path, message) in qflow_core::sim::delivery_problems(definition, s, targets) {
        problem(path, message);
    }
    if let Some(start) = &s.start_event {
        let triggered = definition
            .process
            .find(start)
            .map(|i| definition.process.node(i));
        match triggered.map(|n| (&n.kind, n.scope)) {
            None => problem("start_event".into(), no_node(definition, start)),
            // An event sub-process's start is no start of the instance.
            Some((NodeKind::TriggeredStart(_), None)) => {}
            Some(_) => problem(
                "start_event".into(),
                format!(
                    "node `{start}` is not a start event with a trigger (message, signal, \
                     timer); leave start_event out to start at the none start events"
                ),
            ),
        }
    }
    if s.events.len() > EVENTS_MAX {
        problem("events".into(), format!("at most {EVENTS_MAX} events"));
    }
    for (i, event) in s.events.iter().enumerate() {
        let at_ms = event_at_ms(event);
        if at_ms < 0 {
            problem(
                format!("events[{i}].at_ms"),
                format!("{at_ms} is negative; instants are milliseconds since the Unix epoch"),
            );
        } else if at_ms < s.start_at_ms {
            problem(
                format!("events[{i}].at_ms"),
                format!("{at_ms} is before start_at_ms ({})", s.start_at_ms),
            );
        }
        if let ScriptedEvent::Migrate { target, .. } = event {
            if !targets.contains_key(target) {
                problem(
                    format!("events[{i}].target"),
                    format!(
                        "no target definition `{target}` was given (a golden case keeps it \
                         in `target-{target}.bpmn`; `qflow simulate` takes `--target \
                         {target}=FILE`)"
                    ),
                );
            }
        }
        if let ScriptedEvent::Pull { input, .. } = event {
            let path = format!("events[{i}].input");
            match input.node() {
                // A pull task of the model, or of a target the run may migrate onto.
                Some(node)
                    if std::iter::once(definition)
                        .chain(targets.values())
                        .any(|d| {
                            matches!(task_kind(d, node), Some(Some(TaskKind::Pull { .. })))
                        }) => {}
                Some(node) => problem(
                    path,
                    format!("node `{node}` is not a pull task of the model or of a target"),
                ),
                None => problem(path, "a pull event's input names no node".to_owned()),
            }
        }
        if let ScriptedEvent::ClaimUserTask { node, .. }
        | ScriptedEvent::UnclaimUserTask { node, .. }
        | ScriptedEvent::UserTaskBpmnError { node, .. }
        | ScriptedEvent::EscalateUserTask { node, .. } = event
        {
            let path = format!("events[{i}].node");
            let in_target = targets.values().find(|t| task_kind(t, node).is_some());
            match task_kind(in_target.unwrap_or(definition), node) {
                None => problem(path, no_node(definition, node)),
                Some(Some(TaskKind::User { .. })) => {}
                Some(_) => problem(
                    path,
                    format!("node `{node}` is not a user task; only user tasks are claimed"),
                ),
            }
        }
        if let ScriptedEvent::CompleteUserTask { node, .. } = event {
            let path = format!("events[{i}].node");
            // A user task of a target the run migrates onto is completed like one of the
            // model.
            let in_target = targets.values().find(|t| task_kind(t, node).is_some());
            match task_kind(in_target.unwrap_or(definition), node) {
                None => problem(path, no_node(definition, node)),
                Some(Some(TaskKind::User { .. } | TaskKind::Receive { message: None })) => {}
                Some(_) => problem(
                    path,
                    format!(
                        "node `{node}` is not a user task; only user tasks (and receive tasks without a message) are completed from \
                         outside"
                    ),
                ),
            }
        }
    }
    problems
}

fn event_at_ms(event: &ScriptedEvent) -> i64 {
    match event {
        ScriptedEvent::CompleteUserTask { at_ms, .. }
        | ScriptedEvent::ClaimUserTask { at_ms, .. }
        | ScriptedEvent::UnclaimUserTask { at_ms, .. }
        | ScriptedEvent::Message { at_ms, .. }
        | ScriptedEvent::Signal { at_ms, .. }
        | ScriptedEvent::UserTaskBpmnError { at_ms, .. }
        | ScriptedEvent::EscalateUserTask { at_ms, .. }
        | ScriptedEvent::Cancel { at_ms }
        | ScriptedEvent::FireTimer { at_ms, .. }
        | ScriptedEvent::Resume { at_ms, .. }
        | ScriptedEvent::RetryNow { at_ms, .. }
        | ScriptedEvent::Migrate { at_ms, .. }
        | ScriptedEvent::Pull { at_ms, .. }
        | ScriptedEvent::Channel { at_ms, .. }
        | ScriptedEvent::Child { at_ms, .. } => *at_ms,
    }
}

/// `None`: no such node; `Some(None)`: a node that is not a task.
fn task_kind<'d>(definition: &'d Definition, id: &str) -> Option<Option<&'d TaskKind>> {
    let idx = definition.process.find(id)?;
    task_kind_at(definition, idx)
}

/// As [`task_kind`], for a `tasks` or `channels` key: a multi-instance activity's id
/// scripts its inner instances, so it names the inner task.
fn scripted_kind<'d>(definition: &'d Definition, id: &str) -> Option<Option<&'d TaskKind>> {
    let p = &definition.process;
    let idx = p.find(id)?;
    task_kind_at(definition, p.multi_instance(idx).map_or(idx, |mi| mi.inner))
}

fn task_kind_at(definition: &Definition, idx: NodeIdx) -> Option<Option<&TaskKind>> {
    Some(match &definition.process.node(idx).kind {
        NodeKind::Task(task) => Some(&task.kind),
        _ => None,
    })
}

fn no_node(definition: &Definition, id: &str) -> String {
    format!("no node `{id}` in process `{}`", definition.id)
}
