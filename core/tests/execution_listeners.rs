//! Zeebe execution listeners (`docs/vendor-mappings.md`, "Execution listeners"): each is a
//! pull task on the token's path — start listeners before the element's behaviour, end
//! listeners after it — run through the production step on a virtual clock.

mod common;

use common::{effects, last, run_scenario};
use qflow_core::{codes, Effect, Status};
use qflow_loader::model::Definition;
use serde_json::json;

/// A process whose body is `body`, beside the message `go` correlated by `key`.
fn zeebe_model(body: &str) -> Definition {
    common::model_with(
        r#"<message id="m" name="go"><extensionElements><zeebe:subscription correlationKey="=key"/></extensionElements></message>"#,
        body,
    )
}

fn refusals(body: &str) -> Vec<(String, String)> {
    let xml = format!(
        r#"<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d">
  <process id="p" isExecutable="true">{body}</process></definitions>"#
    );
    match qflow_loader::load_str(&xml) {
        Ok(_) => Vec::new(),
        Err(diags) => diags
            .into_iter()
            .filter(|d| d.is_error())
            .map(|d| (d.code.to_owned(), d.message))
            .collect(),
    }
}

fn listeners(items: &[(&str, &str)]) -> String {
    let mut s = String::from("<extensionElements><zeebe:executionListeners>");
    for (event, ty) in items {
        s.push_str(&format!(
            r#"<zeebe:executionListener eventType="{event}" type="{ty}"/>"#
        ));
    }
    s.push_str("</zeebe:executionListeners></extensionElements>");
    s
}

/// One pull task's lock and completion with `variables`, at `at_ms`.
fn done(at_ms: i64, node: &str, variables: serde_json::Value) -> Vec<serde_json::Value> {
    vec![
        json!({"event": "pull", "at_ms": at_ms, "input": {
            "type": "pull_locked", "node": node, "attempt": 1, "worker": "w",
            "lock_ms": 60_000}}),
        json!({"event": "pull", "at_ms": at_ms + 1, "input": {
            "type": "pull_completed", "node": node, "attempt": 1, "worker": "w",
            "variables": variables}}),
    ]
}

fn scenario(variables: serde_json::Value, events: Vec<Vec<serde_json::Value>>) -> String {
    let events: Vec<_> = events.into_iter().flatten().collect();
    json!({"variables": variables, "events": events}).to_string()
}

/// The pull tasks offered (not the re-offers of a lock), in order, with the variables
/// their job was given.
fn offers(trace: &qflow_core::sim::Trace) -> Vec<String> {
    effects(trace)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Effect::OfferPullTask {
                node, lock: None, ..
            } => Some(node),
            _ => None,
        })
        .collect()
}

/// The end events the trace's tokens reached, in order.
fn ends(trace: &qflow_core::sim::Trace) -> Vec<String> {
    trace
        .steps
        .iter()
        .flat_map(|s| s.path.iter())
        .filter_map(|e| match e {
            qflow_core::path::PathEvent::End { node, .. } => Some(node.clone()),
            _ => None,
        })
        .collect()
}

fn task(extra: &str) -> String {
    format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="work"/>
        <serviceTask id="work">
          <extensionElements>
            <zeebe:taskDefinition type="work"/>
            <zeebe:taskHeaders><zeebe:header key="region" value="eu"/></zeebe:taskHeaders>
            <zeebe:ioMapping><zeebe:input source="=n + 1" target="m"/></zeebe:ioMapping>
            {extra}
          </extensionElements>
        </serviceTask>
        <sequenceFlow id="f1" sourceRef="work" targetRef="e"/><endEvent id="e"/>"#
    )
}

fn listeners_inline(items: &[(&str, &str)]) -> String {
    listeners(items)
        .trim_start_matches("<extensionElements>")
        .trim_end_matches("</extensionElements>")
        .to_owned()
}

#[test]
fn start_listeners_run_in_order_before_the_task_and_end_listeners_after_it() {
    let def = zeebe_model(&task(&listeners_inline(&[
        ("start", "audit"),
        ("start", "prepare"),
        ("end", "notify"),
    ])));
    let trace = run_scenario(
        &def,
        &scenario(
            json!({"n": 1}),
            vec![
                done(10, "work~start-1", json!({"a": 1})),
                done(20, "work~start-2", json!({"b": 2})),
                done(30, "work", json!({"c": 3})),
                done(40, "work~end-1", json!({"d": 4})),
            ],
        ),
    );
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(
        offers(&trace),
        ["work~start-1", "work~start-2", "work", "work~end-1"]
    );
    let end = last(&trace);
    let vars = end.variables();
    for (k, v) in [("a", 1), ("b", 2), ("c", 3), ("d", 4)] {
        assert_eq!(vars[k], json!(v), "{k}");
    }
    // The element's input mapping is a local: never an instance variable.
    assert!(vars.get("m").is_none());
}

#[test]
fn a_listener_job_carries_the_job_type_the_headers_and_the_elements_inputs() {
    let def = zeebe_model(&task(&listeners_inline(&[("start", "audit")])));
    let pull = qflow_core::pull_task(&def, "work~start-1").expect("a pull task");
    assert_eq!(pull.topic, "audit");
    assert_eq!(pull.task.headers, [("region".to_owned(), "eu".to_owned())]);
    let trace = run_scenario(&def, &scenario(json!({"n": 1}), vec![]));
    let snap = last(&trace);
    let inputs = qflow_core::pull_inputs(&def, &snap, "work~start-1").expect("inputs");
    assert_eq!(
        inputs["m"],
        json!(2),
        "the element's input mapping: {inputs:?}"
    );
    assert_eq!(snap.status(), Status::Running);
}

#[test]
fn a_start_listener_on_a_gateway_sets_the_variable_its_conditions_read() {
    let body = format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="g"/>
        <exclusiveGateway id="g" default="low">{}</exclusiveGateway>
        <sequenceFlow id="high" sourceRef="g" targetRef="eh">
          <conditionExpression>=score &gt; 10</conditionExpression></sequenceFlow>
        <sequenceFlow id="low" sourceRef="g" targetRef="el"/>
        <endEvent id="eh"/><endEvent id="el"/>"#,
        listeners(&[("start", "score")])
    );
    let def = zeebe_model(&body);
    for (score, end) in [(11, "eh"), (3, "el")] {
        let trace = run_scenario(
            &def,
            &scenario(
                json!({}),
                vec![done(10, "g~start-1", json!({"score": score}))],
            ),
        );
        assert_eq!(trace.summary.status, "completed");
        assert_eq!(ends(&trace), [end], "score {score}");
    }
}

#[test]
fn a_start_listener_on_a_joining_gateway_runs_once_for_the_tokens_it_joins() {
    let body = format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="fork"/>
        <parallelGateway id="fork"/>
        <sequenceFlow id="a" sourceRef="fork" targetRef="join"/>
        <sequenceFlow id="b" sourceRef="fork" targetRef="join"/>
        <parallelGateway id="join">{}</parallelGateway>
        <sequenceFlow id="o1" sourceRef="join" targetRef="e1"/>
        <sequenceFlow id="o2" sourceRef="join" targetRef="e2"/>
        <endEvent id="e1"/><endEvent id="e2"/>"#,
        listeners(&[("start", "joined")])
    );
    let def = zeebe_model(&body);
    let trace = run_scenario(
        &def,
        &scenario(json!({}), vec![done(10, "join~start-1", json!({}))]),
    );
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(
        offers(&trace),
        ["join~start-1"],
        "one listener job for the join"
    );
    assert_eq!(
        ends(&trace),
        ["e1", "e2"],
        "the gateway still forks after its listener"
    );
}

#[test]
fn a_start_listener_of_a_catch_after_an_event_based_gateway_runs_once_it_caught() {
    let body = format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="g"/>
        <eventBasedGateway id="g"/>
        <sequenceFlow id="f1" sourceRef="g" targetRef="msg"/>
        <sequenceFlow id="f2" sourceRef="g" targetRef="wait"/>
        <intermediateCatchEvent id="msg">{}<messageEventDefinition messageRef="m"/></intermediateCatchEvent>
        <intermediateCatchEvent id="wait"><timerEventDefinition><timeDuration>PT1H</timeDuration></timerEventDefinition></intermediateCatchEvent>
        <sequenceFlow id="f3" sourceRef="msg" targetRef="e1"/><endEvent id="e1"/>
        <sequenceFlow id="f4" sourceRef="wait" targetRef="e2"/><endEvent id="e2"/>"#,
        listeners(&[("start", "caught"), ("end", "left")])
    );
    let def = zeebe_model(&body);
    let mut events = vec![vec![json!({"event": "message", "at_ms": 5, "name": "go",
        "correlation_key": "k1", "variables": {"from": "msg"}})]];
    events.push(done(10, "msg~start-1", json!({"x": 1})));
    events.push(done(20, "msg~end-1", json!({"y": 2})));
    let trace = run_scenario(&def, &scenario(json!({"key": "k1"}), events));
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    assert_eq!(offers(&trace), ["msg~start-1", "msg~end-1"]);
    let end = last(&trace);
    let vars = end.variables();
    assert_eq!((vars["x"].clone(), vars["y"].clone()), (json!(1), json!(2)));
}

#[test]
fn a_listener_that_exhausts_its_retries_fails_the_instance_at_the_listener() {
    let body = task(
        r#"<zeebe:executionListeners>
             <zeebe:executionListener eventType="start" type="audit" retries="1"/>
           </zeebe:executionListeners>"#,
    );
    let def = zeebe_model(&body);
    let trace = run_scenario(
        &def,
        &scenario(
            json!({"n": 1}),
            vec![vec![
                json!({"event": "pull", "at_ms": 10, "input": {
                    "type": "pull_locked", "node": "work~start-1", "attempt": 1,
                    "worker": "w", "lock_ms": 60_000}}),
                json!({"event": "pull", "at_ms": 11, "input": {
                    "type": "pull_failed", "node": "work~start-1", "attempt": 1,
                    "worker": "w", "message": "down", "retries": 0}}),
            ]],
        ),
    );
    assert_eq!(trace.summary.status, "failed");
    assert_eq!(
        trace.summary.failure_code.as_deref(),
        Some(codes::PULL_TASK_FAILED)
    );
    let failure = last(&trace).failure().expect("a failure");
    assert_eq!(failure.node.as_deref(), Some("work~start-1"));
    assert_eq!(
        offers(&trace),
        ["work~start-1"],
        "the task itself never ran"
    );
}

#[test]
fn zeebe_s_own_refusals_and_the_placements_qflow_has_no_path_for_are_q136() {
    let one = |body: &str| {
        let r = refusals(body);
        assert!(r.iter().any(|(c, _)| c == "Q136"), "{body}: {r:?}");
        r
    };
    // Zeebe refuses these too.
    one(&format!(
        r#"<startEvent id="s">{}</startEvent><sequenceFlow id="f" sourceRef="s" targetRef="e"/><endEvent id="e"/>"#,
        listeners(&[("start", "x")])
    ));
    one(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f" sourceRef="s" targetRef="g"/>
        <exclusiveGateway id="g">{}</exclusiveGateway><sequenceFlow id="f2" sourceRef="g" targetRef="e"/><endEvent id="e"/>"#,
        listeners(&[("end", "x")])
    ));
    let dup = one(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f" sourceRef="s" targetRef="t"/>
        <task id="t">{}</task><sequenceFlow id="f2" sourceRef="t" targetRef="e"/><endEvent id="e"/>"#,
        listeners(&[("start", "x"), ("start", "x")])
    ));
    assert!(
        dup.iter()
            .any(|(_, m)| m.contains("a second start listener")),
        "{dup:?}"
    );
    one(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f" sourceRef="s" targetRef="t"/>
        <task id="t">{}</task><sequenceFlow id="f2" sourceRef="t" targetRef="e"/><endEvent id="e"/>"#,
        listeners(&[("start", "=jobType")])
    ));
    // No token path in qflow.
    one(&format!(
        r#"{}<startEvent id="s"/><sequenceFlow id="f" sourceRef="s" targetRef="e"/><endEvent id="e"/>"#,
        listeners(&[("start", "x")])
    ));
    one(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f" sourceRef="s" targetRef="e"/><endEvent id="e">{}</endEvent>"#,
        listeners(&[("end", "x")])
    ));
    // A start listener on an end event and an end listener on a start event run.
    assert_eq!(
        refusals(&format!(
            r#"<startEvent id="s">{}</startEvent><sequenceFlow id="f" sourceRef="s" targetRef="e"/><endEvent id="e">{}</endEvent>"#,
            listeners(&[("end", "x")]),
            listeners(&[("start", "y")])
        )),
        Vec::new()
    );
}

#[test]
fn an_end_listener_takes_the_activity_s_conditions_and_default_flow() {
    let body = format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="t"/>
        <task id="t" default="other">{}</task>
        <sequenceFlow id="yes" sourceRef="t" targetRef="ey">
          <conditionExpression>=ok</conditionExpression></sequenceFlow>
        <sequenceFlow id="other" sourceRef="t" targetRef="eo"/>
        <endEvent id="ey"/><endEvent id="eo"/>"#,
        listeners(&[("end", "decide")])
    );
    let def = zeebe_model(&body);
    for (ok, end) in [(true, "ey"), (false, "eo")] {
        let trace = run_scenario(
            &def,
            &scenario(json!({}), vec![done(10, "t~end-1", json!({"ok": ok}))]),
        );
        assert_eq!(trace.summary.status, "completed");
        assert_eq!(ends(&trace), [end], "ok = {ok}");
    }
}

#[test]
fn a_listener_job_cannot_throw_a_bpmn_error_and_the_refusal_changes_nothing() {
    use qflow_core::{step, Attempt, Input, Snapshot};
    let def = zeebe_model(&task(&listeners_inline(&[("start", "audit")])));
    let start = Input::Start {
        variables: [("n".to_owned(), json!(1))].into_iter().collect(),
        start: None,
    };
    let s = step(&def, "i", Snapshot::new(), start, 0).unwrap().snapshot;
    let lock = Input::PullLocked {
        node: "work~start-1".into(),
        attempt: Attempt::FIRST,
        worker: "w".into(),
        lock_ms: 60_000,
    };
    let locked = step(&def, "i", s, lock, 1).unwrap().snapshot;
    let error = Input::PullBpmnError {
        node: "work~start-1".into(),
        attempt: Attempt::FIRST,
        worker: "w".into(),
        code: "E".into(),
        message: "no".into(),
        variables: Default::default(),
    };
    let out = step(&def, "i", locked.clone(), error, 2).unwrap();
    assert_eq!(out.snapshot, locked, "a refused input changes nothing");
    match out.effects.as_slice() {
        [Effect::Stale { reason }] => {
            assert!(reason.contains("execution listener of `work`"), "{reason}")
        }
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn listeners_inside_a_sub_process_and_an_event_sub_process_keep_to_their_scope() {
    let body = format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="sub"/>
        <subProcess id="sub">
          <startEvent id="in"/><sequenceFlow id="i1" sourceRef="in" targetRef="t"/>
          <task id="t">{}</task>
          <sequenceFlow id="i2" sourceRef="t" targetRef="inEnd"/><endEvent id="inEnd"/>
          <subProcess id="esp" triggeredByEvent="true">
            <startEvent id="espStart" isInterrupting="false">{}
              <messageEventDefinition messageRef="m"/></startEvent>
            <sequenceFlow id="e1" sourceRef="espStart" targetRef="espEnd"/><endEvent id="espEnd"/>
          </subProcess>
        </subProcess>
        <sequenceFlow id="f1" sourceRef="sub" targetRef="e"/><endEvent id="e"/>"#,
        listeners(&[("start", "inner")]),
        listeners(&[("end", "caught")])
    );
    let def = zeebe_model(&body);
    let trace = run_scenario(
        &def,
        &scenario(
            json!({"key": "k"}),
            vec![
                vec![json!({"event": "message", "at_ms": 5, "name": "go", "correlation_key": "k"})],
                done(10, "espStart~end-1", json!({"seen": true})),
                done(20, "t~start-1", json!({})),
            ],
        ),
    );
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    assert_eq!(offers(&trace), ["t~start-1", "espStart~end-1"]);
    assert_eq!(ends(&trace), ["espEnd", "inEnd", "e"]);
}

#[test]
fn an_inclusive_gateway_that_joins_and_forks_keeps_its_conditions_and_default_after_the_listener() {
    let body = format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="fork"/>
        <parallelGateway id="fork"/>
        <sequenceFlow id="a" sourceRef="fork" targetRef="join"/>
        <sequenceFlow id="b" sourceRef="fork" targetRef="join"/>
        <inclusiveGateway id="join" default="other">{}</inclusiveGateway>
        <sequenceFlow id="big" sourceRef="join" targetRef="eb">
          <conditionExpression>=n &gt; 10</conditionExpression></sequenceFlow>
        <sequenceFlow id="other" sourceRef="join" targetRef="eo"/>
        <endEvent id="eb"/><endEvent id="eo"/>"#,
        listeners(&[("start", "size")])
    );
    let def = zeebe_model(&body);
    for (n, end) in [(11, "eb"), (2, "eo")] {
        let trace = run_scenario(
            &def,
            &scenario(json!({}), vec![done(10, "join~start-1", json!({"n": n}))]),
        );
        assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
        assert_eq!(offers(&trace), ["join~start-1"]);
        assert_eq!(ends(&trace), [end], "n = {n}");
    }
}

#[test]
fn a_link_catch_runs_its_start_listener_once_the_link_is_taken() {
    let body = format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="throw"/>
        <intermediateThrowEvent id="throw"><linkEventDefinition name="L"/></intermediateThrowEvent>
        <intermediateCatchEvent id="catch">{}<linkEventDefinition name="L"/></intermediateCatchEvent>
        <sequenceFlow id="f1" sourceRef="catch" targetRef="e"/><endEvent id="e"/>"#,
        listeners(&[("start", "arrived"), ("end", "leaving")])
    );
    let def = zeebe_model(&body);
    let trace = run_scenario(
        &def,
        &scenario(
            json!({}),
            vec![
                done(10, "catch~start-1", json!({})),
                done(20, "catch~end-1", json!({})),
            ],
        ),
    );
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    assert_eq!(offers(&trace), ["catch~start-1", "catch~end-1"]);
}

#[test]
fn adjacent_listeners_an_implicit_end_and_an_id_written_with_spaces() {
    let body = format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="a"/>
        <task id="a">{}</task>
        <sequenceFlow id="f1" sourceRef="a" targetRef="b"/>
        <task id=" b ">{}</task>"#,
        listeners(&[("end", "after-a")]),
        listeners(&[("start", "before-b"), ("end", "after-b")])
    );
    let def = zeebe_model(&body);
    let trace = run_scenario(
        &def,
        &scenario(
            json!({}),
            vec![
                done(10, "a~end-1", json!({})),
                done(20, "b~start-1", json!({})),
                done(30, "b~end-1", json!({})),
            ],
        ),
    );
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    assert_eq!(offers(&trace), ["a~end-1", "b~start-1", "b~end-1"]);
}

#[test]
fn a_boundary_of_the_element_is_armed_after_its_start_listeners_and_not_for_its_end_ones() {
    let body = format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="work"/>
        <serviceTask id="work"><extensionElements><zeebe:taskDefinition type="work"/>{}</extensionElements></serviceTask>
        <boundaryEvent id="late" attachedToRef="work"><timerEventDefinition><timeDuration>PT1M</timeDuration></timerEventDefinition></boundaryEvent>
        <sequenceFlow id="f1" sourceRef="work" targetRef="e"/><endEvent id="e"/>
        <sequenceFlow id="f2" sourceRef="late" targetRef="eLate"/><endEvent id="eLate"/>"#,
        listeners(&[("start", "first"), ("end", "last")])
            .replace("<extensionElements>", "")
            .replace("</extensionElements>", "")
    );
    let def = zeebe_model(&body);
    // The start listener takes two minutes: the boundary's minute starts with the task.
    let trace = run_scenario(
        &def,
        &scenario(
            json!({}),
            vec![
                done(120_000, "work~start-1", json!({})),
                done(150_000, "work", json!({})),
                // The end listener runs long after the minute: the boundary is gone.
                done(400_000, "work~end-1", json!({})),
            ],
        ),
    );
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    assert_eq!(ends(&trace), ["e"]);
    let armed: Vec<i64> = common::arms(&trace)
        .into_iter()
        .map(|(_, due, _)| due)
        .collect();
    assert!(
        armed.contains(&(120_001 + 60_000)),
        "armed with the task: {armed:?}"
    );
}
