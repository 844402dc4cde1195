//! `qflow simulate` end to end (SPEC S1): the real binary on real files. The trace's park
//! instants must be the ones the shared backoff formula predicts, and bad scenario files
//! must be refused with field-level errors and the documented exit status
//! (`docs/simulate.md`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use qflow_loader::model::{jitter_ppb, NodeKind};
use serde_json::Value;

const PAYMENT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:q="urn:qflow:bpmn:1" id="defs" targetNamespace="urn:test">
  <error id="errStolen" errorCode="CARD_STOLEN"/>
  <process id="payment" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="pay"/>
    <serviceTask id="pay" q:task="pay">
      <extensionElements>
        <q:retry maxAttempts="3" initialInterval="PT1S" backoffMultiplier="2"
                 maxInterval="PT1M" jitter="full" nonRetryableCodes="CARD_STOLEN"/>
      </extensionElements>
    </serviceTask>
    <sequenceFlow id="f2" sourceRef="pay" targetRef="confirm"/>
    <userTask id="confirm"/>
    <sequenceFlow id="f3" sourceRef="confirm" targetRef="end"/>
    <endEvent id="end"/>
  </process>
</definitions>
"#;

/// A scratch directory for one test's files, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("qflow-simulate-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write scratch file");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn simulate(model: &PathBuf, scenario: &PathBuf, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qflow"))
        .arg("simulate")
        .arg(model)
        .arg("--scenario")
        .arg(scenario)
        .args(extra)
        .output()
        .expect("run qflow")
}

/// Runs a scenario that must be accepted; returns (trace lines, summary).
fn run_ok(test: &str, model: &str, scenario: &str) -> (Vec<Value>, Value) {
    let scratch = Scratch::new(test);
    let out = simulate(
        &scratch.file("model.bpmn", model),
        &scratch.file("scenario.json", scenario),
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let mut lines: Vec<Value> = String::from_utf8(out.stdout)
        .expect("utf-8 stdout")
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect();
    let summary = lines.pop().expect("a summary line")["summary"].clone();
    assert!(summary.is_object(), "last line is the summary");
    (lines, summary)
}

/// Runs a scenario that must be refused; returns (exit status, stderr).
fn run_refused(test: &str, model: &str, scenario: &str) -> (Option<i32>, String) {
    let scratch = Scratch::new(test);
    let out = simulate(
        &scratch.file("model.bpmn", model),
        &scratch.file("scenario.json", scenario),
        &[],
    );
    assert!(out.stdout.is_empty(), "nothing is simulated on refusal");
    (
        out.status.code(),
        String::from_utf8(out.stderr).expect("utf-8 stderr"),
    )
}

fn retry_policy() -> qflow_loader::model::RetryPolicy {
    let loaded = qflow_loader::load_str(PAYMENT).expect("the payment model loads");
    let def = &loaded.definitions[0];
    let pay = def.process.node(def.process.find("pay").unwrap());
    match &pay.kind {
        NodeKind::Task(task) => task.retry.clone().expect("pay has q:retry"),
        other => panic!("pay is not a task: {other:?}"),
    }
}

/// The `arm_timer` effects of a step, as (name, due_at_ms).
fn armed(line: &Value) -> Vec<(String, i64)> {
    line["effects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "arm_timer")
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["due_at_ms"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn fail_fail_succeed_parks_at_the_instants_the_formula_predicts() {
    let instance = "order-77";
    let scenario = format!(
        r#"{{
  "instance": "{instance}",
  "start_at_ms": 5000,
  "tasks": {{
    "pay": [
      {{ "outcome": "fail", "code": "GATEWAY_DOWN", "after_ms": 100 }},
      {{ "outcome": "panic", "message": "boom", "after_ms": 100 }},
      {{ "outcome": "ok", "outputs": {{ "receipt": "r-1" }} }}
    ]
  }}
}}"#
    );
    let (trace, summary) = run_ok("ffs", PAYMENT, &scenario);
    let policy = retry_policy();

    // Every failed attempt re-parks: the step that reports failure n arms a timer at
    // failure instant + delay_ms(n, jitter_ppb(instance, node, n)).
    let failures: Vec<&Value> = trace
        .iter()
        .filter(|l| l["input"]["type"] == "task_failed")
        .collect();
    assert_eq!(failures.len(), 2, "two failed attempts");
    let mut parks = Vec::new();
    for (i, line) in failures.iter().enumerate() {
        let attempt = (i + 1) as u32;
        assert_eq!(line["attempt"], attempt);
        let at_ms = line["at_ms"].as_i64().unwrap();
        let want = at_ms + policy.delay_ms(attempt, jitter_ppb(instance, "pay", attempt)) as i64;
        let timers = armed(line);
        assert_eq!(timers.len(), 1, "one park per failure: {line}");
        assert_eq!(timers[0].1, want, "park instant of attempt {attempt}");
        parks.push(want);
    }
    // Attempt 1 starts at 5000 and fails 100 ms later; the re-drive happens exactly at
    // the park instant and starts the next attempt.
    assert_eq!(failures[0]["at_ms"], 5100);
    for (n, park) in parks.iter().enumerate() {
        let redrive = trace
            .iter()
            .find(|l| l["input"]["type"] == "timer_fired" && l["at_ms"] == *park)
            .unwrap_or_else(|| panic!("a re-drive at {park}"));
        assert_eq!(redrive["attempt"], (n + 2) as u64);
    }
    assert_eq!(summary["attempts"]["pay"], 3);
    // The instance then waits on the user task: running at the horizon, no timers left.
    assert_eq!(summary["status"], "running");
    assert!(summary.get("failure_code").is_none());
    assert_eq!(summary["snapshot_sha256"].as_str().unwrap().len(), 64);
}

#[test]
fn a_non_retryable_code_fails_at_once_with_that_code() {
    let (trace, summary) = run_ok(
        "nonretry",
        PAYMENT,
        r#"{ "tasks": { "pay": [{ "outcome": "fail", "code": "CARD_STOLEN" }] } }"#,
    );
    assert!(trace.iter().all(|l| armed(l).is_empty()), "no park");
    assert_eq!(summary["status"], "failed");
    assert_eq!(summary["failure_code"], "CARD_STOLEN");
    assert_eq!(summary["attempts"]["pay"], 1);
}

#[test]
fn summary_only_and_trace_only_print_what_they_say() {
    let scratch = Scratch::new("flags");
    let model = scratch.file("model.bpmn", PAYMENT);
    let scenario = scratch.file(
        "scenario.json",
        r#"{ "events": [{ "event": "complete_user_task", "at_ms": 10, "node": "confirm" }] }"#,
    );
    let out = simulate(&model, &scenario, &["--summary-only"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1);
    let summary: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(summary["summary"]["status"], "completed");

    let out = simulate(&model, &scenario, &["--trace-only"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().count() >= 3);
    assert!(text.lines().all(|l| l.starts_with("{\"seq\":")), "{text}");

    let out = simulate(&model, &scenario, &["--trace-only", "--snapshots"]);
    assert_eq!(out.status.code(), Some(0));
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let line: Value = serde_json::from_str(line).unwrap();
        let hex = line["snapshot"]
            .as_str()
            .expect("hex bytes with --snapshots");
        assert_eq!(
            hex.len() as u64,
            2 * line["snapshot_bytes"].as_u64().unwrap()
        );
    }
}

#[test]
fn an_unknown_field_is_refused_with_its_path() {
    let (code, stderr) = run_refused(
        "unknown",
        PAYMENT,
        r#"{ "tasks": { "pay": [{ "outcome": "ok", "outptus": {} }] } }"#,
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("scenario.json: error: at tasks.pay[0].outptus"),
        "{stderr}"
    );
    assert!(stderr.contains("unknown field `outptus`"), "{stderr}");

    let (code, stderr) = run_refused("unknown-top", PAYMENT, r#"{ "horizon": 5 }"#);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("unknown field `horizon`"), "{stderr}");
    assert!(
        stderr.contains("horizon_ms"),
        "the expected names are listed: {stderr}"
    );
}

/// Issue 8, defect 6: serde reads an array positionally into a struct or a tagged enum;
/// the format has objects there, and an array is refused where an object belongs.
#[test]
fn an_array_is_never_read_as_a_scenario_or_an_outcome() {
    let (code, stderr) = run_refused("array-top", PAYMENT, r#"["x", 0, {}, {"pay": []}]"#);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("scenario.json: error: invalid type: sequence, expected a scenario object"),
        "{stderr}"
    );

    let (code, stderr) = run_refused(
        "array-outcome",
        PAYMENT,
        r#"{ "tasks": { "pay": [["fail", "X"]] } }"#,
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("at tasks.pay[0]: invalid type: sequence, expected an outcome object"),
        "{stderr}"
    );

    let (code, stderr) = run_refused("array-event", PAYMENT, r#"{ "events": [["cancel", 5]] }"#);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("at events[0]: invalid type: sequence, expected an event object"),
        "{stderr}"
    );
}

/// Issue 8, defect 6: a key given twice used to keep the last value silently.
#[test]
fn a_key_given_twice_is_refused_with_its_path() {
    for (test, scenario, want) in [
        (
            "dup-variables",
            r#"{ "variables": { "amount": 1, "amount": 2 } }"#,
            "at variables.amount: duplicate key `amount`",
        ),
        (
            "dup-nested",
            r#"{ "variables": { "order": { "lines": [{ "sku": 1, "sku": 2 }] } } }"#,
            "at variables.order.lines[0].sku: duplicate key `sku`",
        ),
        (
            "dup-tasks",
            r#"{ "tasks": { "pay": [{ "outcome": "ok" }], "pay": [{ "outcome": "hang" }] } }"#,
            "at tasks.pay: duplicate key `pay`",
        ),
        (
            "dup-outputs",
            r#"{ "tasks": { "pay": [{ "outcome": "ok", "outputs": { "r": 1, "r": 2 } }] } }"#,
            "at tasks.pay[0].outputs.r: duplicate key `r`",
        ),
        (
            "dup-event-variables",
            r#"{ "events": [{ "event": "complete_user_task", "at_ms": 1, "node": "confirm",
                 "variables": { "ok": true, "ok": false } }] }"#,
            "at events[0].variables.ok: duplicate key `ok`",
        ),
        (
            "dup-field",
            r#"{ "tasks": { "pay": [{ "outcome": "fail", "code": "A", "code": "B" }] } }"#,
            "at tasks.pay[0].code: duplicate field `code`",
        ),
    ] {
        let (code, stderr) = run_refused(test, PAYMENT, scenario);
        assert_eq!(code, Some(1), "{test}: {stderr}");
        assert!(
            stderr.contains(want),
            "{test}: missing `{want}` in:\n{stderr}"
        );
    }
}

/// `depth` levels of arrays around a 1, as JSON text.
fn nested(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth - 1), "]".repeat(depth - 1))
}

/// Issue 27, point 3: variables nested deeper than the engine's bound (32 levels, a
/// scalar being one) used to be accepted and then refused by the engine mid-run, exit
/// status 2 ("a bug worth reporting"). The reader refuses them, exit status 1, with the
/// path of the first value too deep, wherever a scenario carries variables an input brings.
#[test]
fn variables_nested_past_the_engine_bound_are_refused_with_their_path() {
    let deep = nested(33);
    let at_33 = format!("x{}", "[0]".repeat(32));
    for (test, scenario, want) in [
        (
            "deep-start",
            format!(r#"{{ "variables": {{ "order": {{ "x": {deep} }} }} }}"#),
            // `order` is the first level, `x` the second.
            format!(
                "at variables.order.x{}: nested 33 levels deep; a variable may nest 32 levels \
                 at most",
                "[0]".repeat(31)
            ),
        ),
        (
            "deep-user-task",
            format!(
                r#"{{ "events": [{{ "event": "complete_user_task", "at_ms": 1, "node": "confirm",
                     "variables": {{ "x": {deep} }} }}] }}"#
            ),
            format!("at events[0].variables.{at_33}: nested 33 levels deep"),
        ),
        (
            "deep-message",
            format!(
                r#"{{ "events": [{{ "event": "cancel", "at_ms": 5 }},
                     {{ "event": "message", "at_ms": 1, "name": "m", "variables": {{ "x": {deep} }} }}] }}"#
            ),
            format!("at events[1].variables.{at_33}: nested 33 levels deep"),
        ),
        (
            "deep-signal",
            format!(
                r#"{{ "events": [{{ "event": "signal", "at_ms": 1, "name": "s", "variables": {{ "x": {deep} }} }}] }}"#
            ),
            format!("at events[0].variables.{at_33}: nested 33 levels deep"),
        ),
        (
            "deep-answer",
            format!(
                r#"{{ "channels": {{ "call": [{{ "answer": "ok" }}, {{ "answer": "ok", "outputs": {{ "x": {deep} }} }}] }} }}"#
            ),
            format!("at channels.call[1].outputs.{at_33}: nested 33 levels deep"),
        ),
        (
            "deep-input",
            format!(
                r#"{{ "events": [{{ "event": "channel", "at_ms": 1, "input": {{ "type": "channel_answered",
                     "call": 1, "attempt": 1, "variables": {{ "x": {deep} }} }} }}] }}"#
            ),
            format!(
                "at events[0].input: in its `variables`, `{at_33}` nests deeper than 32 levels"
            ),
        ),
    ] {
        let (code, stderr) = run_refused(test, PAYMENT, &scenario);
        assert_eq!(code, Some(1), "{test}: {stderr}");
        assert!(
            stderr.contains(&format!("scenario.json: error: {want}")),
            "{test}: missing `{want}` in:\n{stderr}"
        );
    }
    // At the bound the scenario is read and runs.
    let (_, summary) = run_ok(
        "deep-32",
        PAYMENT,
        &format!(r#"{{ "variables": {{ "x": {} }} }}"#, nested(32)),
    );
    assert_eq!(summary["status"], "running", "{summary}");
}

/// The size bound of one input (4 MiB of values, counted as the engine counts) is the
/// reader's too: the path is the object that is the input, the message names the value
/// where the total was crossed.
#[test]
fn variables_past_the_engine_size_bound_are_refused_with_their_path() {
    // Each number counts 8 bytes: a 1 MiB file holds an input over 4 MiB.
    let many = format!("[{}1]", "1,".repeat(4 * 1024 * 1024 / 8 + 1));
    let (code, stderr) = run_refused(
        "big-start",
        PAYMENT,
        &format!(r#"{{ "variables": {{ "n": 1, "x": {many} }} }}"#),
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "scenario.json: error: at variables: the values reach more than 4194304 bytes at \
             `x[524286]`; one input may bring 4194304 bytes at most"
        ),
        "{stderr}"
    );
}

/// A scripted handler's outputs are a result, not an input: over the bound the engine
/// fails the attempt (`OUTPUTS_REFUSED`), as for a real handler, and the run is a result
/// (exit status 0), so the reader takes them.
#[test]
fn handler_outputs_past_the_bound_are_a_result_not_a_refusal() {
    let (_, summary) = run_ok(
        "deep-outputs",
        PAYMENT,
        &format!(
            r#"{{ "tasks": {{ "pay": [{{ "outcome": "ok", "outputs": {{ "x": {} }} }}] }} }}"#,
            nested(33)
        ),
    );
    assert_eq!(summary["status"], "failed", "{summary}");
    assert_eq!(summary["failure_code"], "OUTPUTS_REFUSED", "{summary}");
}

/// Issue 8, defect 6: a `hang` outcome takes no fields, and a field another outcome kind
/// takes is refused on this one, whichever comes first in the object.
#[test]
fn an_outcome_refuses_fields_its_kind_does_not_take() {
    let (code, stderr) = run_refused(
        "hang-extra",
        PAYMENT,
        r#"{ "tasks": { "pay": [{ "outcome": "hang", "after_ms": 5 }] } }"#,
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "at tasks.pay[0].after_ms: unknown field `after_ms`: outcome `hang` takes no other \
             fields"
        ),
        "{stderr}"
    );

    let (code, stderr) = run_refused(
        "hang-extra-first",
        PAYMENT,
        r#"{ "tasks": { "pay": [{ "after_ms": 5, "outcome": "hang" }] } }"#,
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr
            .contains("at tasks.pay[0].outcome: outcome `hang` does not take the field `after_ms`"),
        "{stderr}"
    );

    let (code, stderr) = run_refused(
        "ok-code",
        PAYMENT,
        r#"{ "tasks": { "pay": [{ "outcome": "ok", "code": "X" }] } }"#,
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("at tasks.pay[0].code: unknown field `code`: outcome `ok` takes `outputs` or `after_ms`"),
        "{stderr}"
    );

    let (code, stderr) = run_refused(
        "cancel-node",
        PAYMENT,
        r#"{ "events": [{ "event": "cancel", "at_ms": 5, "node": "pay" }] }"#,
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("at events[0].node: unknown field `node`: event `cancel` takes `at_ms`"),
        "{stderr}"
    );
}

/// Issue 8, defect 6: an error inside an outcome or event names the field, not only the
/// list entry (a derived tagged enum buffers the entry and loses the path).
#[test]
fn an_error_inside_an_outcome_or_event_names_the_innermost_field() {
    for (test, scenario, want) in [
        (
            "inner-type",
            r#"{ "tasks": { "pay": [{ "outcome": "ok", "after_ms": "soon" }] } }"#,
            "at tasks.pay[0].after_ms: invalid type: string \"soon\", expected u64",
        ),
        (
            "inner-outputs",
            r#"{ "tasks": { "pay": [{ "outcome": "ok", "outputs": [1] }] } }"#,
            "at tasks.pay[0].outputs: invalid type: sequence, expected an object",
        ),
        (
            "inner-variant",
            r#"{ "tasks": { "pay": [{ "outcome": "maybe" }] } }"#,
            "at tasks.pay[0].outcome: unknown variant `maybe`",
        ),
        (
            "inner-event",
            r#"{ "events": [{ "event": "fire_timer", "at_ms": 1, "name": "zz", "incarnation": 1 }] }"#,
            "at events[0].name: `zz` is not a timer name",
        ),
        (
            "inner-at",
            r#"{ "events": [{ "event": "cancel", "at_ms": 1.5 }] }"#,
            "at events[0].at_ms: invalid type: floating point `1.5`, expected i64",
        ),
    ] {
        let (code, stderr) = run_refused(test, PAYMENT, scenario);
        assert_eq!(code, Some(1), "{test}: {stderr}");
        assert!(
            stderr.contains(want),
            "{test}: missing `{want}` in:\n{stderr}"
        );
    }
}

#[test]
fn a_missing_field_names_the_attempt_it_belongs_to() {
    let (code, stderr) = run_refused(
        "missing",
        PAYMENT,
        r#"{ "tasks": { "pay": [{ "outcome": "fail", "code": "X" }, { "outcome": "fail" }] } }"#,
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("at tasks.pay[1]: missing field `code`"),
        "{stderr}"
    );
}

#[test]
fn a_wrong_type_is_refused_with_its_path() {
    let (code, stderr) = run_refused("type", PAYMENT, r#"{ "horizon_ms": "soon" }"#);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("at horizon_ms: invalid type: string \"soon\""),
        "{stderr}"
    );

    let (code, stderr) = run_refused(
        "variant",
        PAYMENT,
        r#"{ "tasks": { "pay": [{ "outcome": "maybe" }] } }"#,
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("at tasks.pay[0]"), "{stderr}");
    assert!(stderr.contains("unknown variant `maybe`"), "{stderr}");
}

#[test]
fn a_negative_time_is_refused_with_its_path() {
    let (code, stderr) = run_refused(
        "negative",
        PAYMENT,
        r#"{ "events": [{ "event": "complete_user_task", "at_ms": -5, "node": "confirm" }] }"#,
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("at events[0].at_ms: -5 is negative"),
        "{stderr}"
    );
}

#[test]
fn unknown_nodes_and_wrong_node_kinds_are_all_reported() {
    let (code, stderr) = run_refused(
        "nodes",
        PAYMENT,
        r#"{
  "start_at_ms": 10,
  "tasks": { "paay": [{ "outcome": "ok" }], "confirm": [{ "outcome": "ok" }] },
  "events": [
    { "event": "complete_user_task", "at_ms": 10, "node": "pay" },
    { "event": "complete_user_task", "at_ms": 5, "node": "confirm" }
  ]
}"#,
    );
    assert_eq!(code, Some(1), "{stderr}");
    for want in [
        "at tasks.paay: no node `paay` in process `payment`",
        "at tasks.confirm: node `confirm` is not a registered task",
        "at events[0].node: node `pay` is not a user task",
        "at events[1].at_ms: 5 is before start_at_ms (10)",
        "refused: 4 errors",
    ] {
        assert!(stderr.contains(want), "missing `{want}` in:\n{stderr}");
    }
}

#[test]
fn malformed_json_is_refused_with_line_and_column() {
    let (code, stderr) = run_refused("syntax", PAYMENT, "{ \"instance\": \"a\",\n  }");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("(line 2, column 3)"), "{stderr}");
}

#[test]
fn a_refused_model_prints_diagnostics_and_exits_1() {
    let broken = PAYMENT.replace(r#"targetRef="confirm""#, r#"targetRef="nowhere""#);
    let (code, stderr) = run_refused("model", &broken, "{}");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("model.bpmn:"), "{stderr}");
    assert!(stderr.contains(": error[Q"), "{stderr}");
    assert!(stderr.contains("refused"), "{stderr}");
}

#[test]
fn an_unreadable_scenario_is_a_usage_error() {
    let scratch = Scratch::new("unreadable");
    let model = scratch.file("model.bpmn", PAYMENT);
    let out = simulate(&model, &scratch.0.join("missing.json"), &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("cannot read"), "{stderr}");
    assert!(stderr.contains("missing.json"), "{stderr}");
}

/// Every golden case is a scenario `qflow simulate` runs unchanged, and the bytes it
/// reports are the committed ones: one file format, one driver, one set of bytes.
#[test]
fn every_golden_case_runs_here_with_its_committed_bytes() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../golden/cases");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("golden/cases")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("scenario.json").is_file())
        .collect();
    cases.sort();
    assert!(cases.len() >= 30, "{} golden cases", cases.len());
    for case in &cases {
        // A case's `target-<name>.bpmn` models are what its `migrate` events move onto.
        let mut args = vec!["--snapshots".to_owned()];
        for entry in std::fs::read_dir(case).unwrap() {
            let path = entry.unwrap().path();
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            if let Some(name) = file
                .strip_prefix("target-")
                .and_then(|f| f.strip_suffix(".bpmn"))
            {
                args.push("--target".to_owned());
                args.push(format!("{name}={}", path.display()));
            }
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = simulate(&case.join("model.bpmn"), &case.join("scenario.json"), &args);
        let name = case.file_name().unwrap().to_string_lossy();
        assert_eq!(out.status.code(), Some(0), "{name}");
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let summary = lines.pop().unwrap()["summary"].clone();
        let expect: Value =
            serde_json::from_str(&std::fs::read_to_string(case.join("expect.json")).unwrap())
                .unwrap();
        assert_eq!(summary["status"], expect["state"], "{name}");
        for (i, line) in lines.iter().enumerate() {
            let file = case.join("steps").join(format!("{:04}.msgpack", i + 1));
            let committed = std::fs::read(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
            let hex: String = committed.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(line["snapshot"], hex.as_str(), "{name} step {}", i + 1);
        }
        let files = std::fs::read_dir(case.join("steps")).unwrap().count();
        assert_eq!(files, lines.len(), "{name}: one committed file per step");
    }
}

/// A task in a loop with no way out: every step completes the task and starts it again, so
/// a scenario runs exactly `max_steps` steps.
const LOOP: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:q="urn:qflow:bpmn:1" id="defs" targetNamespace="urn:test">
  <process id="loop" isExecutable="true">
    <startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="t"/>
    <serviceTask id="t" q:task="t"/>
    <sequenceFlow id="f2" sourceRef="t" targetRef="x"/>
    <exclusiveGateway id="x" default="back"/>
    <sequenceFlow id="back" sourceRef="x" targetRef="t"/>
    <sequenceFlow id="out" sourceRef="x" targetRef="e"><conditionExpression>false</conditionExpression></sequenceFlow>
    <endEvent id="e"/>
  </process>
</definitions>
"#;

/// Issue 8, defect 4: the trace is streamed. 5,000 steps of a 50 kB snapshot kept in
/// memory are 250 MB; printed and dropped one by one, the process stays at a few MB. The
/// peak resident size is read from `/proc` while the child runs (VmHWM only grows, so the
/// last reading is a lower bound of the peak; a trace kept in memory grows steadily and is
/// far past the bound long before the end).
#[cfg(target_os = "linux")]
#[test]
fn summary_only_memory_does_not_grow_with_the_number_of_steps() {
    let scratch = Scratch::new("memory");
    let model = scratch.file("model.bpmn", LOOP);
    let scenario = scratch.file(
        "scenario.json",
        &serde_json::json!({ "variables": { "blob": "x".repeat(50_000) }, "max_steps": 5_000 })
            .to_string(),
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_qflow"))
        .arg("simulate")
        .arg(&model)
        .arg("--scenario")
        .arg(&scenario)
        .arg("--summary-only")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run qflow");
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kb = 0u64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() {
        assert!(std::time::Instant::now() < deadline, "qflow simulate hangs");
        let hwm = std::fs::read_to_string(&status).ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        });
        peak_kb = peak_kb.max(hwm.unwrap_or(0));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let out = child.wait_with_output().expect("output");
    assert!(out.status.success());
    let summary: Value = serde_json::from_slice(&out.stdout).expect("one summary line");
    assert_eq!(summary["summary"]["steps"], 5_000);
    assert!(summary["summary"]["snapshot_bytes"].as_u64().unwrap() > 50_000);
    assert!(peak_kb > 0, "no reading of the child's memory");
    assert!(
        peak_kb < 64 * 1024,
        "peak resident size {peak_kb} kB: the trace is kept in memory"
    );
}

#[test]
fn a_migrate_event_moves_the_run_onto_the_target_given_on_the_command_line() {
    let case = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../golden/cases/migrate_failed_onto_fixed_model");
    let model = case.join("model.bpmn");
    let scenario = case.join("scenario.json");
    let target = format!("v2={}", case.join("target-v2.bpmn").display());
    let out = simulate(&model, &scenario, &["--target", &target]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let summary = &lines.last().expect("a summary")["summary"];
    assert_eq!(summary["status"], "completed", "{summary}");
    // The trace ends on exactly the bytes the golden case pins.
    let golden = qflow_golden::Case {
        name: "migrate_failed_onto_fixed_model".into(),
        dir: case.clone(),
    };
    let pinned = golden.committed_steps().expect("committed steps");
    let last = pinned.last().expect("steps");
    let digest = <sha2::Sha256 as sha2::Digest>::digest(last);
    assert_eq!(summary["snapshot_sha256"], hex::encode(digest), "{summary}");
    let migrations: Vec<&Value> = lines
        .iter()
        .filter(|l| l["input"]["type"] == "migrate")
        .collect();
    assert_eq!(migrations.len(), 2);
    assert_eq!(
        migrations[0]["effects"][0]["type"], "stale",
        "{}",
        migrations[0]
    );

    // Without the target, or with a malformed flag, nothing runs.
    let out = simulate(&model, &scenario, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("events[0].target"));
    let out = simulate(&model, &scenario, &["--target", "v2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NAME=FILE"));
}

/// The golden case `channel_delivery_fails_then_answers` through the binary: the failed
/// delivery tries are printed on the line of the step after them (instant, try number,
/// next due), and a step without any prints no `deliveries` field.
#[test]
fn failed_delivery_tries_are_printed_with_the_step_after_them() {
    let case = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../golden/cases/channel_delivery_fails_then_answers");
    let model = std::fs::read_to_string(case.join("model.bpmn")).unwrap();
    let scenario = std::fs::read_to_string(case.join("scenario.json")).unwrap();
    let (lines, summary) = run_ok("delivery-fails", &model, &scenario);
    assert_eq!(summary["status"], "completed");
    assert!(lines[0].get("deliveries").is_none(), "{}", lines[0]);
    assert_eq!(lines[1]["at_ms"], 4250);
    assert_eq!(
        lines[1]["deliveries"],
        serde_json::json!([
            { "at_ms": 0, "node": "charge", "key": "charge-df1/1/1", "try": 1, "next_due_ms": 1000 },
            { "at_ms": 1000, "node": "charge", "key": "charge-df1/1/1", "try": 2, "next_due_ms": 4000 }
        ])
    );
}

#[test]
fn a_bad_delivery_curve_is_refused_with_its_path() {
    let case = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../golden/cases/channel_delivery_fails_then_answers");
    let model = std::fs::read_to_string(case.join("model.bpmn")).unwrap();
    let (status, stderr) = run_refused(
        "delivery-curve-refused",
        &model,
        r#"{"delivery_curves": {"payments": {"ceiling": 0}, "paymnts": {}}}"#,
    );
    assert_eq!(status, Some(1), "{stderr}");
    assert!(
        stderr.contains("error: at delivery_curves.payments.ceiling: must be at least 1"),
        "{stderr}"
    );
    assert!(
        stderr.contains("error: at delivery_curves.paymnts: no channel-call task"),
        "{stderr}"
    );
}

/// Issue 13, item 4: an exclusive gateway with a condition and a default, a parallel split
/// and join, an error boundary and three end events — every way the path can go.
const ROUTES: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
             xmlns:q="urn:qflow:bpmn:1" id="defs" targetNamespace="urn:test">
  <error id="errRejected" errorCode="REJECTED"/>
  <process id="routes" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="check"/>
    <serviceTask id="check" q:task="check"/>
    <boundaryEvent id="onRejected" attachedToRef="check">
      <errorEventDefinition errorRef="errRejected"/>
    </boundaryEvent>
    <sequenceFlow id="fRejected" sourceRef="onRejected" targetRef="rejected"/>
    <endEvent id="rejected"/>
    <sequenceFlow id="f2" sourceRef="check" targetRef="decide"/>
    <exclusiveGateway id="decide" default="toSlow"/>
    <sequenceFlow id="toFast" sourceRef="decide" targetRef="split">
      <conditionExpression xsi:type="tFormalExpression">amount &lt; 100</conditionExpression>
    </sequenceFlow>
    <sequenceFlow id="toSlow" sourceRef="decide" targetRef="review"/>
    <serviceTask id="review" q:task="review"/>
    <sequenceFlow id="fReviewed" sourceRef="review" targetRef="reviewed"/>
    <endEvent id="reviewed"/>
    <parallelGateway id="split"/>
    <sequenceFlow id="fa" sourceRef="split" targetRef="pack"/>
    <sequenceFlow id="fb" sourceRef="split" targetRef="bill"/>
    <serviceTask id="pack" q:task="pack"/>
    <serviceTask id="bill" q:task="bill"/>
    <sequenceFlow id="fa2" sourceRef="pack" targetRef="join"/>
    <sequenceFlow id="fb2" sourceRef="bill" targetRef="join"/>
    <parallelGateway id="join"/>
    <sequenceFlow id="fDone" sourceRef="join" targetRef="done"/>
    <endEvent id="done"/>
  </process>
</definitions>
"#;

/// The `path` of every step, in order: (seq, path entry).
fn path_of(trace: &[Value]) -> Vec<(u64, Value)> {
    trace
        .iter()
        .flat_map(|line| {
            let seq = line["seq"].as_u64().unwrap();
            let path = line["path"].as_array().expect("every line has a path");
            path.iter().map(move |e| (seq, e.clone()))
        })
        .collect()
}

fn flow(id: &str, from: &str, to: &str) -> Value {
    serde_json::json!({ "type": "flow", "flow": id, "from": from, "to": to })
}

#[test]
fn the_trace_names_the_flows_the_condition_that_held_the_join_and_the_end_reached() {
    let scenario = r#"{ "variables": { "amount": 50 }, "tasks": { "bill": [{ "outcome": "ok", "after_ms": 10 }] } }"#;
    let (trace, summary) = run_ok("path-fast", ROUTES, scenario);
    let want = vec![
        (1, flow("f1", "start", "check")),
        (2, flow("f2", "check", "decide")),
        (
            2,
            serde_json::json!({
                "type": "decision", "node": "decide",
                "taken": [{ "flow": "toFast", "condition": "amount < 100" }]
            }),
        ),
        (2, flow("toFast", "decide", "split")),
        (2, flow("fa", "split", "pack")),
        (2, flow("fb", "split", "bill")),
        (3, flow("fa2", "pack", "join")),
        (4, flow("fb2", "bill", "join")),
        (
            4,
            serde_json::json!({ "type": "join", "node": "join", "flows": ["fa2", "fb2"] }),
        ),
        (4, flow("fDone", "join", "done")),
        (
            4,
            serde_json::json!({ "type": "end", "node": "done", "kind": "none" }),
        ),
    ];
    assert_eq!(path_of(&trace), want);
    assert_eq!(summary["status"], "completed");
    assert_eq!(summary["ends"], serde_json::json!(["done"]));
}

#[test]
fn the_trace_says_the_default_flow_was_taken() {
    let scenario = r#"{ "variables": { "amount": 500 } }"#;
    let (trace, summary) = run_ok("path-default", ROUTES, scenario);
    let path: Vec<Value> = path_of(&trace).into_iter().map(|(_, e)| e).collect();
    let decision = serde_json::json!({
        "type": "decision", "node": "decide",
        "taken": [{ "flow": "toSlow", "default": true }]
    });
    assert!(path.contains(&decision), "{path:#?}");
    assert!(path.contains(&flow("toSlow", "decide", "review")));
    assert!(!path.iter().any(|e| e["flow"] == "toFast"), "{path:#?}");
    let end = serde_json::json!({ "type": "end", "node": "reviewed", "kind": "none" });
    assert_eq!(path.last(), Some(&end));
    assert_eq!(summary["ends"], serde_json::json!(["reviewed"]));
}

#[test]
fn the_trace_names_the_error_thrown_the_boundary_that_caught_it_and_the_end_reached() {
    let scenario = r#"{ "tasks": { "check": [{ "outcome": "bpmn_error", "code": "REJECTED" }] } }"#;
    let (trace, summary) = run_ok("path-error", ROUTES, scenario);
    let step2: Vec<Value> = path_of(&trace)
        .into_iter()
        .filter(|(seq, _)| *seq == 2)
        .map(|(_, e)| e)
        .collect();
    let want = vec![
        serde_json::json!({ "type": "throw", "event": "error", "node": "check", "code": "REJECTED" }),
        serde_json::json!({
            "type": "catch", "event": "error", "node": "onRejected", "on": "check",
            "interrupting": true, "code": "REJECTED"
        }),
        flow("fRejected", "onRejected", "rejected"),
        serde_json::json!({ "type": "end", "node": "rejected", "kind": "none" }),
    ];
    assert_eq!(step2, want);
    assert_eq!(summary["status"], "completed");
    assert_eq!(summary["ends"], serde_json::json!(["rejected"]));
}

#[test]
fn an_uncaught_error_is_named_in_the_path_before_the_failure() {
    // `review` has no boundary: the error is uncaught and the instance fails.
    let scenario = r#"{ "variables": { "amount": 500 }, "tasks": { "review": [{ "outcome": "bpmn_error", "code": "LOST" }] } }"#;
    let (trace, summary) = run_ok("path-uncaught", ROUTES, scenario);
    let last = trace.last().unwrap();
    let want = serde_json::json!([
        { "type": "throw", "event": "error", "node": "review", "code": "LOST" },
        { "type": "uncaught", "event": "error", "node": "review", "code": "LOST" }
    ]);
    assert_eq!(last["path"], want);
    assert_eq!(summary["status"], "failed");
    assert_eq!(summary["ends"], serde_json::json!([]));
}

/// Two executable processes in one collaboration: a buyer and a seller.
const COLLABORATION: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:q="urn:qflow:bpmn:1" id="defs" targetNamespace="urn:test">
  <collaboration id="trade">
    <participant id="pBuyer" name="Buyer" processRef="buyer"/>
    <participant id="pSeller" name="Seller" processRef="seller"/>
    <messageFlow id="orderFlow" sourceRef="order" targetRef="ship"/>
  </collaboration>
  <process id="buyer" isExecutable="true">
    <startEvent id="buyerStart"/>
    <sequenceFlow id="b1" sourceRef="buyerStart" targetRef="order"/>
    <serviceTask id="order" q:task="order"/>
    <sequenceFlow id="b2" sourceRef="order" targetRef="ordered"/>
    <endEvent id="ordered"/>
  </process>
  <process id="seller" isExecutable="true">
    <startEvent id="sellerStart"/>
    <sequenceFlow id="s1" sourceRef="sellerStart" targetRef="ship"/>
    <serviceTask id="ship" q:task="ship"/>
    <sequenceFlow id="s2" sourceRef="ship" targetRef="shipped"/>
    <endEvent id="shipped"/>
  </process>
</definitions>
"#;

#[test]
fn process_selects_one_process_of_a_collaboration() {
    let scratch = Scratch::new("collab");
    let model = scratch.file("trade.bpmn", COLLABORATION);
    let buyer = scratch.file(
        "buyer.json",
        r#"{ "tasks": { "order": [{ "outcome": "ok", "outputs": { "po": "po-1" } }] } }"#,
    );
    let seller = scratch.file(
        "seller.json",
        r#"{ "tasks": { "ship": [{ "outcome": "ok" }] } }"#,
    );
    for (id, scenario, task, end) in [
        ("buyer", &buyer, "order", "ordered"),
        ("seller", &seller, "ship", "shipped"),
    ] {
        let out = simulate(&model, scenario, &["--process", id]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{id}: {stderr}");
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let summary = &lines.last().unwrap()["summary"];
        assert_eq!(summary["status"], "completed", "{id}");
        assert_eq!(summary["attempts"], serde_json::json!({ task: 1 }), "{id}");
        assert_eq!(summary["ends"], serde_json::json!([end]), "{id}");
    }
    // The scenario is checked against the process chosen: the seller has no `order`.
    let out = simulate(&model, &buyer, &["--process", "seller"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("tasks.order"), "{stderr}");
}

#[test]
fn process_is_required_for_several_processes_and_an_unknown_id_is_refused_with_the_ids() {
    let scratch = Scratch::new("collab-errors");
    let model = scratch.file("trade.bpmn", COLLABORATION);
    let scenario = scratch.file("scenario.json", "{}");

    let out = simulate(&model, &scenario, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing is simulated");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("this model has 2 executable processes: `buyer`, `seller`"),
        "{stderr}"
    );
    assert!(stderr.contains("--process ID"), "{stderr}");

    let out = simulate(&model, &scenario, &["--process", "broker"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing is simulated");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("no executable process `broker`"),
        "{stderr}"
    );
    assert!(stderr.contains("`buyer`, `seller`"), "{stderr}");

    // A one-process model and --process naming another id: refused the same way.
    let single = scratch.file("payment.bpmn", PAYMENT);
    let out = simulate(&single, &scenario, &["--process", "buyer"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("`payment`"), "{stderr}");
}

/// A reader of stderr that goes away early (`qflow simulate … 2>&1 | head -1`) loses the
/// rest of the diagnostics; the command still ends with its own exit status, not a panic.
#[test]
fn a_closed_stderr_ends_the_refusal_quietly() {
    use std::io::Read;
    use std::process::Stdio;
    let scratch = Scratch::new("closed-stderr");
    // Far more diagnostics than a pipe holds, so most are written after the close.
    let mut body =
        String::from(r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="t0"/>"#);
    for i in 0..600 {
        body.push_str(&format!(
            r#"<serviceTask id="t{i}" q:task="t"><extensionElements><q:retry max="3"/></extensionElements></serviceTask>
<sequenceFlow id="f{n}" sourceRef="t{i}" targetRef="t{n}"/>"#,
            n = i + 1
        ));
    }
    body.push_str(r#"<endEvent id="t600"/>"#);
    let model = scratch.file(
        "many.bpmn",
        &format!(
            r#"<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d"><process id="p" isExecutable="true">{body}</process></definitions>"#
        ),
    );
    let scenario = scratch.file("s.json", "{}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_qflow"))
        .arg("simulate")
        .arg(&model)
        .arg("--scenario")
        .arg(&scenario)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawns");
    let mut err = child.stderr.take().expect("piped stderr");
    let mut first = [0u8; 16];
    err.read_exact(&mut first).expect("some diagnostics");
    drop(err);
    let status = child.wait().expect("exits");
    assert_eq!(
        status.code(),
        Some(1),
        "the model's refusal, not a panic (101)"
    );
}
