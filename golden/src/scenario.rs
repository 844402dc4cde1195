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
//! value inside included), no field that the outcome or event kind does not take, no
//! scripting beside recorded `inputs` (`at inputs: recorded inputs cannot be combined with
//! `tasks`: …`).

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
/// bounded. Recorded `inputs` start with a start, at instants that never go backwards,
/// and a `migrate` among them names a target given (`qflow_core::sim::recorded_problems`);
/// the nodes they name are not checked: an input that fits nothing is delivered and is
/// stale, as it was in production.
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
    // A scenario of recorded inputs starts at its first input (checked below).
    if let (Some(horizon), None) = (s.horizon_ms, &s.inputs) {
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
    for (path, message) in qflow_core::sim::recorded_problems(definition, s, targets) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use qflow_core::sim::{RecordedInput, Trace, RECORDED_EXCLUDES};
    use qflow_core::Input;
    use serde_json::{json, Value};

    fn case(name: &str) -> crate::Case {
        crate::Case {
            name: name.to_owned(),
            dir: crate::cases_root().join(name),
        }
    }

    fn model(case: &crate::Case) -> Definition {
        let xml = std::fs::read_to_string(case.dir.join("model.bpmn")).unwrap();
        crate::load_model(&xml).unwrap()
    }

    /// The `inputs` a run's trace took, as the exporter writes them; a `migrate` step
    /// names the target of the scripted `migrate` event it came from (those are
    /// delivered in instant order, then file order).
    fn inputs_of(trace: &Trace, scripted: &Scenario) -> Vec<Value> {
        let mut migrations: Vec<(i64, usize, &str)> = scripted
            .events
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                ScriptedEvent::Migrate { at_ms, target, .. } => Some((*at_ms, i, target.as_str())),
                _ => None,
            })
            .collect();
        migrations.sort();
        let mut targets = migrations.into_iter().map(|(_, _, t)| t);
        trace
            .steps
            .iter()
            .map(|s| {
                let mut entry = json!({"at_ms": s.at_ms, "input": s.input});
                if matches!(s.input, Input::Migrate { .. }) {
                    entry["target"] = json!(targets.next().expect("a migrate event per step"));
                }
                entry
            })
            .collect()
    }

    /// Every golden case, run as scripted, then as the scenario of the inputs its trace
    /// took, written as JSON and read by this parser: every step takes the same input at
    /// the same instant, emits the same effects and persists the same bytes.
    #[test]
    fn the_recorded_inputs_of_every_golden_case_reproduce_its_steps() {
        let cases = crate::discover(&crate::cases_root()).unwrap();
        assert!(cases.len() > 100);
        for case in &cases {
            let def = model(case);
            let targets = case.targets().unwrap();
            let text = std::fs::read_to_string(case.dir.join("scenario.json")).unwrap();
            let scripted = parse_with(&text, &def, &targets).unwrap();
            let trace = case.run().unwrap();
            let exported =
                json!({"instance": scripted.instance, "inputs": inputs_of(&trace, &scripted)});
            let recorded = parse_with(&exported.to_string(), &def, &targets)
                .unwrap_or_else(|e| panic!("{}: {e:?}", case.name));
            let replay = qflow_core::sim::run_with(&def, &recorded, &targets)
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            assert_eq!(replay.steps.len(), trace.steps.len(), "{}", case.name);
            for (a, b) in replay.steps.iter().zip(&trace.steps) {
                let at = format!("{} step {}", case.name, b.seq);
                assert_eq!((a.at_ms, &a.input), (b.at_ms, &b.input), "{at}");
                assert_eq!(a.effects, b.effects, "{at}");
                assert_eq!(a.snapshot, b.snapshot, "{at}: snapshot bytes");
            }
            assert_eq!(
                replay.summary.attempts, trace.summary.attempts,
                "{}",
                case.name
            );
            assert_eq!(replay.summary.status, trace.summary.status, "{}", case.name);
        }
    }

    fn retry_case() -> (Definition, Vec<Value>) {
        let case = case("retry_late_result_after_timeout");
        let def = model(&case);
        let text = std::fs::read_to_string(case.dir.join("scenario.json")).unwrap();
        let scripted = parse(&text, &def).unwrap();
        let trace = case.run().unwrap();
        (def, inputs_of(&trace, &scripted))
    }

    /// The problems of a refused scenario, as (path, message).
    fn refused(def: &Definition, scenario: &Value) -> Vec<(String, String)> {
        refused_text(def, &scenario.to_string())
    }

    fn refused_text(def: &Definition, text: &str) -> Vec<(String, String)> {
        match parse(text, def) {
            Ok(_) => panic!("accepted: {text}"),
            Err(problems) => problems.into_iter().map(|p| (p.path, p.message)).collect(),
        }
    }

    fn assert_refused(def: &Definition, scenario: &Value, path: &str, says: &str) {
        let problems = refused(def, scenario);
        assert!(
            problems.iter().any(|(p, m)| p == path && m.contains(says)),
            "{scenario}: expected `{path}: …{says}…`, got {problems:?}"
        );
    }

    #[test]
    fn recorded_inputs_parse_and_read_back() {
        let (def, inputs) = retry_case();
        let text = json!({"instance": "i", "inputs": inputs, "max_steps": 4}).to_string();
        let parsed = parse(&text, &def).unwrap();
        let list = parsed.inputs.as_ref().unwrap();
        assert_eq!(list.len(), 5);
        assert_eq!(
            list[1],
            RecordedInput::new(
                30000,
                Input::TimerFired {
                    name: "t:fetch".parse().unwrap(),
                    incarnation: 1
                }
            )
        );
        let again = serde_json::to_string(&parsed).unwrap();
        assert_eq!(parse_json(&again), Ok(parsed));
    }

    #[test]
    fn fields_beside_recorded_inputs_are_refused_naming_them() {
        let (def, inputs) = retry_case();
        let values = [
            json!({"fetch": [{"outcome": "hang"}]}),
            json!({}),
            json!({}),
            json!([]),
            json!({"x": 1}),
            json!("s"),
            json!(0),
        ];
        for (field, value) in RECORDED_EXCLUDES.iter().zip(values) {
            // The field first: refused at `inputs`, naming it.
            let text = format!(
                r#"{{"{field}": {value}, "inputs": {}}}"#,
                Value::from(inputs.clone())
            );
            let problems = refused_text(&def, &text);
            assert_eq!(problems.len(), 1, "{problems:?}");
            let (path, message) = &problems[0];
            assert_eq!(path, "inputs");
            assert!(
                message.starts_with(&format!(
                    "recorded inputs cannot be combined with `{field}`: "
                )),
                "{message}"
            );
            // `inputs` first: refused at the field.
            let text = format!(
                r#"{{"inputs": {}, "{field}": {value}}}"#,
                Value::from(inputs.clone())
            );
            let problems = refused_text(&def, &text);
            assert_eq!(problems[0].0, *field);
            assert!(
                problems[0].1.starts_with(&format!(
                    "`{field}` cannot be combined with recorded `inputs`"
                )),
                "{problems:?}"
            );
        }
        // `instance`, `horizon_ms` and `max_steps` go with them.
        let ok = json!({"instance": "i", "horizon_ms": 40000, "max_steps": 3, "inputs": inputs});
        assert!(parse(&ok.to_string(), &def).is_ok());
    }

    #[test]
    fn a_bad_recorded_input_is_refused_with_its_path() {
        let (def, inputs) = retry_case();
        let with = |i: usize, entry: Value| {
            let mut list = inputs.clone();
            list[i] = entry;
            json!({ "inputs": list })
        };
        // The first input is not a start.
        assert_refused(
            &def,
            &json!({"inputs": inputs[1..]}),
            "inputs[0].input",
            "a `timer_fired` input; the first input starts the instance",
        );
        assert_refused(&def, &json!({"inputs": []}), "inputs", "no input");
        // Time going backwards.
        let back = with(3, json!({"at_ms": 29999, "input": inputs[3]["input"]}));
        assert_refused(
            &def,
            &back,
            "inputs[3].at_ms",
            "29999 is before the previous input's instant (32000)",
        );
        assert_refused(
            &def,
            &with(0, json!({"at_ms": -1, "input": {"type": "start"}})),
            "inputs[0].at_ms",
            "-1 is negative",
        );
        // A bad input type, a field the entry does not have, a key twice, one missing.
        assert_refused(
            &def,
            &with(1, json!({"at_ms": 30000, "input": {"type": "frob"}})),
            "inputs[1].input.type",
            "unknown variant `frob`",
        );
        assert_refused(
            &def,
            &with(
                1,
                json!({"at_ms": 30000, "input": {"type": "redrive"}, "when": 1}),
            ),
            "inputs[1].when",
            "unknown field `when`, expected one of `at_ms`, `input`, `target`",
        );
        let mut list = inputs.clone();
        list.truncate(1);
        let twice = format!(
            r#"{{"inputs": [{}, {{"at_ms": 1, "at_ms": 2, "input": {{"type": "redrive"}}}}]}}"#,
            list[0]
        );
        let problems = refused_text(&def, &twice);
        assert_eq!(problems[0].0, "inputs[1].at_ms");
        assert!(
            problems[0].1.contains("duplicate field `at_ms`"),
            "{problems:?}"
        );
        assert_refused(
            &def,
            &with(1, json!({"at_ms": 30000})),
            "inputs[1]",
            "missing field `input`",
        );
        assert_refused(
            &def,
            &json!({"inputs": {}}),
            "inputs",
            "expected a list of recorded inputs",
        );
        // Variables over the engine's bounds, where the engine would refuse the input.
        let mut deep = json!(1);
        for _ in 0..40 {
            deep = json!([deep]);
        }
        assert_refused(
            &def,
            &with(
                0,
                json!({"at_ms": 0, "input": {"type": "start", "variables": {"x": deep}}}),
            ),
            "inputs[0].input",
            "in its `variables`",
        );
        // A second start, a start event the process does not have.
        assert_refused(
            &def,
            &with(1, json!({"at_ms": 30000, "input": {"type": "start"}})),
            "inputs[1].input",
            "a second start",
        );
        assert_refused(
            &def,
            &with(
                0,
                json!({"at_ms": 0, "input": {"type": "start", "start": "nope"}}),
            ),
            "inputs[0].input.start",
            "no start event `nope`",
        );
        // A migration without the target it moved onto, or with one not given; a target
        // on another input.
        let migrate = json!({"type": "migrate", "mapping": {}, "timers": {"t:fetch": 30000}});
        assert_refused(
            &def,
            &with(1, json!({"at_ms": 30000, "input": migrate})),
            "inputs[1]",
            "a `migrate` input cannot be played without the definition it moved the instance onto",
        );
        assert_refused(
            &def,
            &with(1, json!({"at_ms": 30000, "input": migrate, "target": "v2"})),
            "inputs[1].target",
            "no target definition `v2` was given",
        );
        assert_refused(
            &def,
            &with(
                1,
                json!({"at_ms": 30000, "input": {"type": "redrive"}, "target": "v2"}),
            ),
            "inputs[1].target",
            "a `redrive` input takes no target",
        );
        assert_refused(
            &def,
            &json!({"inputs": inputs, "horizon_ms": -1}),
            "horizon_ms",
            "-1 is before the first input's instant (0)",
        );
    }

    #[test]
    fn every_problem_of_recorded_inputs_is_reported_at_once() {
        let (def, inputs) = retry_case();
        let scenario = json!({"inputs": [
            inputs[1],
            {"at_ms": 30001, "input": {"type": "migrate"}},
            {"at_ms": 5, "input": {"type": "redrive"}},
        ]});
        let paths: Vec<String> = refused(&def, &scenario)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(paths, ["inputs[0].input", "inputs[1]", "inputs[2].at_ms"]);
    }

    /// A list longer than a run can take is refused at the list, while it is read.
    #[test]
    fn a_list_longer_than_the_step_limit_is_refused() {
        let entry = r#"{"at_ms":0,"input":{"type":"redrive"}},"#;
        let n = qflow_core::sim::STEPS_LIMIT as usize + 1;
        let mut text = String::with_capacity(entry.len() * n + 16);
        text.push_str(r#"{"inputs":["#);
        for _ in 0..n {
            text.push_str(entry);
        }
        text.pop();
        text.push_str("]}");
        let err = parse_json(&text).unwrap_err();
        assert_eq!(err.path, "inputs");
        assert!(err.message.starts_with("more than 1000000 inputs"), "{err}");
    }
}
