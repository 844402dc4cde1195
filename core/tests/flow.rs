//! Token semantics without retries: gateways, tasks, waits, timers, errors, scopes.
//! Every case goes through `run_scenario` (the production step on a virtual clock).

mod common;

use common::{arms, effects, last, linear, model, model_with, run_scenario, runs_of};
use qflow_core::sim::Stop;
use qflow_core::{Effect, Status};
use serde_json::json;

#[test]
fn linear_tasks_complete_in_order_with_merged_outputs() {
    let def = linear(&[("a", ""), ("b", ""), ("c", "")]);
    let trace = run_scenario(
        &def,
        r#"{"variables": {"n": 1},
            "tasks": {"a": [{"outcome": "ok", "outputs": {"x": 2}}],
                      "c": [{"outcome": "ok", "outputs": {"n": 3}, "after_ms": 40}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(trace.summary.stop, Stop::Finished);
    assert_eq!(runs_of(&trace, "a"), vec![(0, 1)]);
    assert_eq!(runs_of(&trace, "c"), vec![(0, 1)]);
    assert_eq!(trace.summary.ended_at_ms, 40);
    let snap = last(&trace);
    assert_eq!(snap.variables()["n"], json!(3));
    assert_eq!(snap.variables()["x"], json!(2));
    assert!(snap.tokens().is_empty());
}

#[test]
fn exclusive_gateway_takes_first_true_condition_then_default_then_fails() {
    let body = r#"
      <startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="gw"/>
      <exclusiveGateway id="gw" default="fd"/>
      <sequenceFlow id="fa" sourceRef="gw" targetRef="a"><conditionExpression>amount &gt; 100</conditionExpression></sequenceFlow>
      <sequenceFlow id="fb" sourceRef="gw" targetRef="b"><conditionExpression>amount &gt; 10</conditionExpression></sequenceFlow>
      <sequenceFlow id="fd" sourceRef="gw" targetRef="d"/>
      <serviceTask id="a" q:task="a"/><serviceTask id="b" q:task="b"/><serviceTask id="d" q:task="d"/>
      <sequenceFlow id="fa2" sourceRef="a" targetRef="e"/><sequenceFlow id="fb2" sourceRef="b" targetRef="e"/>
      <sequenceFlow id="fd2" sourceRef="d" targetRef="e"/><endEvent id="e"/>"#;
    let def = model(body);
    for (amount, taken) in [(500, "a"), (50, "b"), (5, "d")] {
        let trace = run_scenario(&def, &format!(r#"{{"variables": {{"amount": {amount}}}}}"#));
        assert_eq!(trace.summary.status, "completed");
        assert_eq!(
            trace.summary.attempts.keys().collect::<Vec<_>>(),
            vec![taken]
        );
    }
    let no_default = model(&body.replace(r#" default="fd""#, "").replace(
        r#"<sequenceFlow id="fd" sourceRef="gw" targetRef="d"/>"#,
        r#"<sequenceFlow id="fd" sourceRef="gw" targetRef="d"><conditionExpression>amount &lt; 0</conditionExpression></sequenceFlow>"#,
    ));
    let trace = run_scenario(&no_default, r#"{"variables": {"amount": 5}}"#);
    assert_eq!(trace.summary.status, "failed");
    assert_eq!(trace.summary.failure_code.as_deref(), Some("NO_FLOW_TAKEN"));
    assert_eq!(trace.summary.failure_node.as_deref(), Some("gw"));
}

#[test]
fn condition_on_a_missing_variable_fails_with_expression_failed() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="gw"/>
      <exclusiveGateway id="gw" default="fd"/>
      <sequenceFlow id="fa" sourceRef="gw" targetRef="e"><conditionExpression>missing &gt; 1</conditionExpression></sequenceFlow>
      <sequenceFlow id="fd" sourceRef="gw" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(&def, "{}");
    assert_eq!(
        trace.summary.failure_code.as_deref(),
        Some("EXPRESSION_FAILED")
    );
}

/// Issue 8, defect 2: a condition copying a 1 MB string per item of a 4,096-item list
/// loads (it is harmless on small values) and, at run time, goes over the evaluation
/// budget: the instance fails with `EXPRESSION_FAILED` instead of the process aborting.
#[test]
fn a_condition_over_the_evaluation_budget_fails_with_expression_failed() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="gw"/>
      <exclusiveGateway id="gw" default="fd"/>
      <sequenceFlow id="fa" sourceRef="gw" targetRef="e"><conditionExpression>size(xs.map(a, s)) &gt; 0</conditionExpression></sequenceFlow>
      <sequenceFlow id="fd" sourceRef="gw" targetRef="e"/><endEvent id="e"/>"#,
    );
    let xs: Vec<u32> = (0..4096).collect();
    let vars = serde_json::json!({ "variables": { "xs": xs, "s": "x".repeat(1 << 20) } });
    let trace = run_scenario(&def, &vars.to_string());
    assert_eq!(trace.summary.status, "failed");
    assert_eq!(
        trace.summary.failure_code.as_deref(),
        Some("EXPRESSION_FAILED")
    );
    let small = serde_json::json!({ "variables": { "xs": [1, 2], "s": "x" } });
    assert_eq!(
        run_scenario(&def, &small.to_string()).summary.status,
        "completed"
    );
}

const PARALLEL: &str = r#"
  <startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="fork"/>
  <parallelGateway id="fork"/>
  <sequenceFlow id="f1" sourceRef="fork" targetRef="a"/><sequenceFlow id="f2" sourceRef="fork" targetRef="b"/>
  <userTask id="a"/><userTask id="b"/>
  <sequenceFlow id="f3" sourceRef="a" targetRef="join"/><sequenceFlow id="f4" sourceRef="b" targetRef="join"/>
  <parallelGateway id="join"/>
  <sequenceFlow id="f5" sourceRef="join" targetRef="after"/><serviceTask id="after" q:task="after"/>
  <sequenceFlow id="f6" sourceRef="after" targetRef="e"/><endEvent id="e"/>"#;

#[test]
fn parallel_join_waits_for_every_branch() {
    let def = model(PARALLEL);
    let trace = run_scenario(
        &def,
        r#"{"events": [
            {"event": "complete_user_task", "at_ms": 20, "node": "b", "variables": {"b": true}},
            {"event": "complete_user_task", "at_ms": 50, "node": "a"}]}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    // After b completes, the join holds one arrival and `after` has not run yet.
    let after_b = qflow_core::Snapshot::decode(&trace.steps[1].snapshot).unwrap();
    assert_eq!(after_b.tokens(), ["a"]);
    assert_eq!(after_b.join_arrivals()["join"], vec!["f4".to_owned()]);
    assert_eq!(runs_of(&trace, "after"), vec![(50, 1)]);
    assert_eq!(last(&trace).variables()["b"], json!(true));
}

#[test]
fn user_task_waits_until_completed_and_idles_without_an_event() {
    let def = model(PARALLEL);
    let trace = run_scenario(&def, "{}");
    assert_eq!(trace.summary.stop, Stop::Idle);
    assert_eq!(trace.summary.status, "running");
    assert_eq!(last(&trace).tokens(), ["a", "b"]);
}

#[test]
fn completing_a_task_that_is_not_pending_is_stale_and_changes_no_bytes() {
    let def = model(PARALLEL);
    let trace = run_scenario(
        &def,
        r#"{"events": [
            {"event": "complete_user_task", "at_ms": 10, "node": "a"},
            {"event": "complete_user_task", "at_ms": 20, "node": "a"}]}"#,
    );
    let (second, third) = (&trace.steps[1], &trace.steps[2]);
    assert_eq!(second.snapshot, third.snapshot);
    assert!(matches!(third.effects.as_slice(), [Effect::Stale { .. }]));
}

#[test]
fn timer_catch_event_waits_its_duration() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="wait"/>
      <intermediateCatchEvent id="wait"><timerEventDefinition><timeDuration>PT10S</timeDuration></timerEventDefinition></intermediateCatchEvent>
      <sequenceFlow id="f1" sourceRef="wait" targetRef="t"/><serviceTask id="t" q:task="t"/>
      <sequenceFlow id="f2" sourceRef="t" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(&def, r#"{"start_at_ms": 1000}"#);
    assert_eq!(arms(&trace), vec![(1000, 11_000, "c:wait".to_owned())]);
    assert_eq!(runs_of(&trace, "t"), vec![(11_000, 1)]);
    assert_eq!(trace.summary.status, "completed");
}

const BOUNDARY: &str = r#"
  <startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="work"/>
  <userTask id="work"/>
  <boundaryEvent id="late" attachedToRef="work" cancelActivity="CANCEL">
    <timerEventDefinition><timeDuration>PT5S</timeDuration></timerEventDefinition></boundaryEvent>
  <sequenceFlow id="f1" sourceRef="work" targetRef="done"/><endEvent id="done"/>
  <sequenceFlow id="f2" sourceRef="late" targetRef="escalate"/><serviceTask id="escalate" q:task="escalate"/>
  <sequenceFlow id="f3" sourceRef="escalate" targetRef="escalated"/><endEvent id="escalated"/>"#;

#[test]
fn interrupting_timer_boundary_cancels_the_task_and_routes() {
    let def = model(&BOUNDARY.replace("CANCEL", "true"));
    let trace = run_scenario(&def, "{}");
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(runs_of(&trace, "escalate"), vec![(5000, 1)]);
    assert!(last(&trace).tokens().is_empty());
}

#[test]
fn timer_boundary_is_resolved_when_the_task_finishes_first() {
    let def = model(&BOUNDARY.replace("CANCEL", "true"));
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "complete_user_task", "at_ms": 1000, "node": "work"}]}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    assert!(runs_of(&trace, "escalate").is_empty());
    assert!(trace.steps[1]
        .effects
        .iter()
        .any(|e| matches!(e, Effect::ResolveTimer { name, .. } if name == "b:late")));
}

#[test]
fn non_interrupting_timer_boundary_keeps_the_task_waiting() {
    let def = model(&BOUNDARY.replace("CANCEL", "false"));
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "complete_user_task", "at_ms": 9000, "node": "work"}]}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(runs_of(&trace, "escalate"), vec![(5000, 1)]);
    let at_boundary = qflow_core::Snapshot::decode(&trace.steps[1].snapshot).unwrap();
    // The boundary spawned a token for `escalate`; `work` still waits.
    assert_eq!(at_boundary.tokens(), ["escalate", "work"]);
}

#[test]
fn non_interrupting_cycle_boundary_re_arms_until_its_repetitions_are_spent() {
    let def = model(&BOUNDARY.replace("CANCEL", "false").replace(
        "<timeDuration>PT5S</timeDuration>",
        "<timeCycle>R3/PT5S</timeCycle>",
    ));
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "complete_user_task", "at_ms": 60000, "node": "work"}]}"#,
    );
    let escalations: Vec<i64> = runs_of(&trace, "escalate").iter().map(|r| r.0).collect();
    assert_eq!(escalations, vec![5000, 10_000, 15_000]);
    assert_eq!(trace.summary.status, "completed");
}

#[test]
fn non_interrupting_cron_boundary_fires_at_each_instant_of_its_schedule() {
    // Every 20 seconds (UTC; the scenario's clock starts at the epoch).
    let def = model(&BOUNDARY.replace("CANCEL", "false").replace(
        "<timeDuration>PT5S</timeDuration>",
        "<timeCycle>0/20 * * * * ?</timeCycle>",
    ));
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "complete_user_task", "at_ms": 61000, "node": "work"}]}"#,
    );
    let escalations: Vec<i64> = runs_of(&trace, "escalate").iter().map(|r| r.0).collect();
    assert_eq!(escalations, vec![20_000, 40_000, 60_000]);
    assert_eq!(trace.summary.status, "completed");
}

#[test]
fn interrupting_cron_boundary_fires_at_its_schedule_s_first_instant() {
    // Hourly: armed at 00:00:00, the first instant strictly after is 01:00:00.
    let def = model(&BOUNDARY.replace("CANCEL", "true").replace(
        "<timeDuration>PT5S</timeDuration>",
        "<timeCycle>@hourly</timeCycle>",
    ));
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "complete_user_task", "at_ms": 4000000, "node": "work"}]}"#,
    );
    assert_eq!(runs_of(&trace, "escalate"), vec![(3_600_000, 1)]);
    assert_eq!(trace.summary.status, "completed");
}

const ERRORS: &str =
    r#"<error id="e_rej" errorCode="REJECTED"/><error id="e_other" errorCode="OTHER"/>"#;

fn error_model(boundaries: &str) -> qflow_loader::model::Definition {
    model_with(
        ERRORS,
        &format!(
            r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="check"/>
      <serviceTask id="check" q:task="check"/>{boundaries}
      <sequenceFlow id="f1" sourceRef="check" targetRef="ok"/><endEvent id="ok"/>"#
        ),
    )
}

#[test]
fn bpmn_error_routes_to_the_boundary_with_its_code_before_catch_all() {
    let def = error_model(
        r#"<boundaryEvent id="any" attachedToRef="check"><errorEventDefinition/></boundaryEvent>
        <boundaryEvent id="rej" attachedToRef="check"><errorEventDefinition errorRef="e_rej"/></boundaryEvent>
        <sequenceFlow id="f2" sourceRef="rej" targetRef="rejected"/><serviceTask id="rejected" q:task="rejected"/>
        <sequenceFlow id="f3" sourceRef="rejected" targetRef="end2"/><endEvent id="end2"/>
        <sequenceFlow id="f4" sourceRef="any" targetRef="other"/><serviceTask id="other" q:task="other"/>
        <sequenceFlow id="f5" sourceRef="other" targetRef="end3"/><endEvent id="end3"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"check": [{"outcome": "bpmn_error", "code": "REJECTED"}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(runs_of(&trace, "rejected").len(), 1);
    assert!(runs_of(&trace, "other").is_empty());
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"check": [{"outcome": "bpmn_error", "code": "SOMETHING"}]}}"#,
    );
    assert_eq!(runs_of(&trace, "other").len(), 1);
}

#[test]
fn uncaught_bpmn_error_fails_with_a_structured_code() {
    let def = error_model("");
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"check": [{"outcome": "bpmn_error", "code": "REJECTED"}]}}"#,
    );
    assert_eq!(
        trace.summary.failure_code.as_deref(),
        Some("UNCAUGHT_BPMN_ERROR")
    );
    let snap = last(&trace);
    assert_eq!(snap.failure().unwrap().detail.as_deref(), Some("REJECTED"));
    assert_eq!(snap.tokens(), ["check"]);
}

#[test]
fn handler_failure_and_panic_without_policy_fail_with_their_code() {
    let def = linear(&[("a", "")]);
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"a": [{"outcome": "fail", "code": "CARD_DECLINED"}]}}"#,
    );
    assert_eq!(trace.summary.failure_code.as_deref(), Some("CARD_DECLINED"));
    assert_eq!(trace.summary.failure_node.as_deref(), Some("a"));
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"a": [{"outcome": "panic", "message": "boom"}]}}"#,
    );
    assert_eq!(
        trace.summary.failure_code.as_deref(),
        Some("HANDLER_PANICKED")
    );
    // No policy: no retry key is ever written.
    assert!(last(&trace).attempts().is_empty());
}

#[test]
fn error_end_event_inside_a_subprocess_is_caught_by_its_boundary() {
    let def = model_with(
        ERRORS,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="sub"/>
      <subProcess id="sub">
        <startEvent id="ss"/><sequenceFlow id="g0" sourceRef="ss" targetRef="inner"/>
        <serviceTask id="inner" q:task="inner"/><sequenceFlow id="g1" sourceRef="inner" targetRef="boom"/>
        <endEvent id="boom"><errorEventDefinition errorRef="e_rej"/></endEvent>
      </subProcess>
      <boundaryEvent id="caught" attachedToRef="sub"><errorEventDefinition errorRef="e_rej"/></boundaryEvent>
      <sequenceFlow id="f1" sourceRef="sub" targetRef="e"/><endEvent id="e"/>
      <sequenceFlow id="f2" sourceRef="caught" targetRef="handle"/><serviceTask id="handle" q:task="handle"/>
      <sequenceFlow id="f3" sourceRef="handle" targetRef="e2"/><endEvent id="e2"/>"#,
    );
    let trace = run_scenario(&def, "{}");
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(runs_of(&trace, "handle").len(), 1);
}

#[test]
fn subprocess_completes_when_its_inner_tokens_end() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="sub"/>
      <subProcess id="sub">
        <startEvent id="ss"/><sequenceFlow id="g0" sourceRef="ss" targetRef="inner"/>
        <userTask id="inner"/><sequenceFlow id="g1" sourceRef="inner" targetRef="se"/><endEvent id="se"/>
      </subProcess>
      <sequenceFlow id="f1" sourceRef="sub" targetRef="after"/><serviceTask id="after" q:task="after"/>
      <sequenceFlow id="f2" sourceRef="after" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "complete_user_task", "at_ms": 7, "node": "inner"}]}"#,
    );
    assert_eq!(last(&trace).status(), Status::Completed);
    assert_eq!(runs_of(&trace, "after"), vec![(7, 1)]);
    let waiting = qflow_core::Snapshot::decode(&trace.steps[0].snapshot).unwrap();
    assert_eq!(waiting.tokens(), ["inner", "sub"]);
}

#[test]
fn terminate_end_event_ends_every_branch() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="fork"/>
      <parallelGateway id="fork"/>
      <sequenceFlow id="f1" sourceRef="fork" targetRef="wait"/><userTask id="wait"/>
      <sequenceFlow id="f2" sourceRef="fork" targetRef="stop"/><endEvent id="stop"><terminateEventDefinition/></endEvent>
      <sequenceFlow id="f3" sourceRef="wait" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(&def, "{}");
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(trace.steps.len(), 1);
    assert!(last(&trace).tokens().is_empty());
}

/// A sub-process whose parallel split leads to `ending` (an end event's inner XML) and
/// to the registered task `work`; `ending_first` puts the ending's flow first in
/// document order, so the split queues it before `work`. The sub-process leaves to
/// `after`; an error boundary `caught` on it to `recover`.
fn split_in_subprocess(ending: &str, ending_first: bool) -> qflow_loader::model::Definition {
    let to_end = r#"<sequenceFlow id="g1" sourceRef="fork" targetRef="stop"/>"#;
    let to_work = r#"<sequenceFlow id="g2" sourceRef="fork" targetRef="work"/>"#;
    let (first, second) = if ending_first {
        (to_end, to_work)
    } else {
        (to_work, to_end)
    };
    model_with(
        ERRORS,
        &format!(
            r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="sub"/>
      <subProcess id="sub">
        <startEvent id="ss"/><sequenceFlow id="g0" sourceRef="ss" targetRef="fork"/>
        <parallelGateway id="fork"/>{first}{second}
        <endEvent id="stop">{ending}</endEvent>
        <serviceTask id="work" q:task="work"/>
        <sequenceFlow id="g3" sourceRef="work" targetRef="se"/><endEvent id="se"/>
      </subProcess>
      <boundaryEvent id="caught" attachedToRef="sub"><errorEventDefinition errorRef="e_rej"/></boundaryEvent>
      <sequenceFlow id="f1" sourceRef="sub" targetRef="after"/><serviceTask id="after" q:task="after"/>
      <sequenceFlow id="f2" sourceRef="after" targetRef="e"/><endEvent id="e"/>
      <sequenceFlow id="f3" sourceRef="caught" targetRef="recover"/><serviceTask id="recover" q:task="recover"/>
      <sequenceFlow id="f4" sourceRef="recover" targetRef="e2"/><endEvent id="e2"/>"#
        ),
    )
}

/// Whatever order the split queued its branches in, the ended sub-process's sibling
/// task never completes and its handler is never called: queued first, it is never
/// started; started first, in the same step, its attempt is reported interrupted and the
/// handler call that step asked for is dropped. `route` is the task the flow continues
/// with.
fn assert_sibling_ended_with_scope(ending: &str, route: &str) {
    for ending_first in [true, false] {
        let def = split_in_subprocess(ending, ending_first);
        let trace = run_scenario(
            &def,
            r#"{"tasks": {"work": [{"outcome": "ok", "after_ms": 5}]}}"#,
        );
        let order = if ending_first {
            "ending first"
        } else {
            "work first"
        };
        assert_eq!(trace.summary.status, "completed", "{order}");
        assert_eq!(runs_of(&trace, route), vec![(0, 1)], "{order}");
        assert_eq!(
            trace.summary.ended_at_ms, 0,
            "{order}: nothing waits for `work`"
        );
        let work = runs_of(&trace, "work");
        let interrupted = effects(&trace).iter().any(|(_, e)| matches!(
            e,
            Effect::AttemptFinished { node, outcome: qflow_core::AttemptOutcome::Interrupted, .. }
                if node == "work"
        ));
        if ending_first {
            assert!(work.is_empty(), "{order}: `work` started in an ended scope");
            assert!(!interrupted, "{order}");
        } else {
            assert!(
                work.is_empty(),
                "{order}: the handler of `work` is not called"
            );
            assert!(
                interrupted,
                "{order}: the attempt in flight is reported interrupted"
            );
        }
    }
}

#[test]
fn terminate_end_in_a_subprocess_ends_the_siblings_the_split_queued() {
    assert_sibling_ended_with_scope("<terminateEventDefinition/>", "after");
}

#[test]
fn error_end_caught_on_a_subprocess_cancels_the_siblings_the_split_queued() {
    assert_sibling_ended_with_scope(r#"<errorEventDefinition errorRef="e_rej"/>"#, "recover");
}

#[test]
fn timeout_without_policy_is_a_catchable_timeout_error() {
    let task = r#"<extensionElements><q:timeout duration="PT30S"/></extensionElements>"#;
    let caught = model_with(
        r#"<error id="e_to" errorCode="TIMEOUT"/>"#,
        &format!(
            r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="fetch"/>
      <serviceTask id="fetch" q:task="fetch">{task}</serviceTask>
      <boundaryEvent id="to" attachedToRef="fetch"><errorEventDefinition errorRef="e_to"/></boundaryEvent>
      <sequenceFlow id="f1" sourceRef="fetch" targetRef="e"/><endEvent id="e"/>
      <sequenceFlow id="f2" sourceRef="to" targetRef="fallback"/><serviceTask id="fallback" q:task="fallback"/>
      <sequenceFlow id="f3" sourceRef="fallback" targetRef="e2"/><endEvent id="e2"/>"#
        ),
    );
    let hang = r#"{"tasks": {"fetch": [{"outcome": "hang"}]}}"#;
    let trace = run_scenario(&caught, hang);
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(runs_of(&trace, "fallback"), vec![(30_000, 1)]);

    let uncaught = linear(&[("fetch", r#"<q:timeout duration="PT30S"/>"#)]);
    let trace = run_scenario(&uncaught, hang);
    assert_eq!(trace.summary.failure_code.as_deref(), Some("TIMEOUT"));
    assert_eq!(trace.summary.ended_at_ms, 30_000);
    assert!(effects(&trace).iter().any(|(_, e)| matches!(
        e,
        Effect::AttemptFinished {
            outcome: qflow_core::AttemptOutcome::TimedOut,
            ..
        }
    )));

    // In time: the window is resolved and the late timer never fires.
    let trace = run_scenario(
        &uncaught,
        r#"{"tasks": {"fetch": [{"outcome": "ok", "after_ms": 29999}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed");
}

#[test]
fn inclusive_gateway_forks_true_branches_and_joins_them() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="fork"/>
      <inclusiveGateway id="fork"/>
      <sequenceFlow id="fa" sourceRef="fork" targetRef="a"><conditionExpression>x &gt; 1</conditionExpression></sequenceFlow>
      <sequenceFlow id="fb" sourceRef="fork" targetRef="b"><conditionExpression>x &gt; 5</conditionExpression></sequenceFlow>
      <sequenceFlow id="fc" sourceRef="fork" targetRef="c"><conditionExpression>x &gt; 10</conditionExpression></sequenceFlow>
      <serviceTask id="a" q:task="a"/><serviceTask id="b" q:task="b"/><serviceTask id="c" q:task="c"/>
      <sequenceFlow id="fa2" sourceRef="a" targetRef="join"/><sequenceFlow id="fb2" sourceRef="b" targetRef="join"/>
      <sequenceFlow id="fc2" sourceRef="c" targetRef="join"/>
      <inclusiveGateway id="join"/>
      <sequenceFlow id="fj" sourceRef="join" targetRef="after"/><serviceTask id="after" q:task="after"/>
      <sequenceFlow id="fe" sourceRef="after" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"x": 7}, "tasks": {"b": [{"outcome": "ok", "after_ms": 100}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(
        trace.summary.attempts.keys().collect::<Vec<_>>(),
        vec!["a", "after", "b"]
    );
    assert_eq!(runs_of(&trace, "after"), vec![(100, 1)]);
}

/// Two tokens reach the inclusive join `join` on one flow (`fx`: a parallel split's `a`
/// and `b` merged by the exclusive gateway `x`), a third on `fd` (task `d`).
const TWO_TOKENS_ON_ONE_FLOW: &str = r#"
  <startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="fork"/>
  <parallelGateway id="fork"/>
  <sequenceFlow id="fa" sourceRef="fork" targetRef="a"/><sequenceFlow id="fb" sourceRef="fork" targetRef="b"/>
  <sequenceFlow id="fc" sourceRef="fork" targetRef="d"/>
  <serviceTask id="a" q:task="a"/><serviceTask id="b" q:task="b"/><serviceTask id="d" q:task="d"/>
  <sequenceFlow id="fa2" sourceRef="a" targetRef="x"/><sequenceFlow id="fb2" sourceRef="b" targetRef="x"/>
  <exclusiveGateway id="x"/><sequenceFlow id="fx" sourceRef="x" targetRef="join"/>
  <sequenceFlow id="fd" sourceRef="d" targetRef="join"/>
  <inclusiveGateway id="join"/>
  <sequenceFlow id="fj" sourceRef="join" targetRef="after"/><serviceTask id="after" q:task="after"/>
  <sequenceFlow id="fe" sourceRef="after" targetRef="e"/><endEvent id="e"/>"#;

#[test]
fn inclusive_join_consumes_one_token_per_flow_and_fires_again_for_leftovers() {
    let def = model(TWO_TOKENS_ON_ONE_FLOW);
    // `d` last: the join waits while `d` can still reach its empty flow `fd`, then fires
    // once for (fx, fd) and once more for the leftover fx, in the same step.
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"a": [{"outcome": "ok", "after_ms": 10}],
                      "b": [{"outcome": "ok", "after_ms": 20}],
                      "d": [{"outcome": "ok", "after_ms": 30}],
                      "after": [{"outcome": "ok", "after_ms": 5}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    // Two tokens in `after` are two activity instances (E9), each run once.
    assert_eq!(runs_of(&trace, "after"), vec![(30, 1)]);
    assert_eq!(runs_of(&trace, "after@2"), vec![(30, 1)]);
    let at = |step: usize| qflow_core::Snapshot::decode(&trace.steps[step].snapshot).unwrap();
    assert_eq!(at(1).join_arrivals()["join"], ["fx"]);
    assert_eq!(at(2).join_arrivals()["join"], ["fx", "fx"]);
    assert_eq!(at(3).tokens(), ["after", "after@2"]);
    assert!(at(3).join_arrivals().is_empty());

    // `d` first: its token waits until `a` arrives on fx, which `b` can still reach but
    // which then holds a token; `b`'s token alone fires the join again later.
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"a": [{"outcome": "ok", "after_ms": 10}],
                      "b": [{"outcome": "ok", "after_ms": 20}],
                      "d": [{"outcome": "ok", "after_ms": 5}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(runs_of(&trace, "after"), vec![(10, 1), (20, 1)]);
}

#[test]
fn message_catch_waits_for_its_message() {
    let def = model_with(
        r#"<message id="m1" name="paid"/>"#,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="wait"/>
      <intermediateCatchEvent id="wait"><messageEventDefinition messageRef="m1"/></intermediateCatchEvent>
      <sequenceFlow id="f1" sourceRef="wait" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "message", "at_ms": 3, "name": "other"},
                       {"event": "message", "at_ms": 5, "name": "paid", "variables": {"ref": "x"}}]}"#,
    );
    assert!(matches!(
        trace.steps[1].effects.as_slice(),
        [Effect::Stale { .. }]
    ));
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(last(&trace).variables()["ref"], json!("x"));
}

#[test]
fn cancel_resolves_timers_and_ends_the_instance() {
    let def = model(&BOUNDARY.replace("CANCEL", "true"));
    let trace = run_scenario(&def, r#"{"events": [{"event": "cancel", "at_ms": 100}]}"#);
    assert_eq!(trace.summary.status, "cancelled");
    assert!(trace.steps[1]
        .effects
        .iter()
        .any(|e| matches!(e, Effect::ResolveTimer { name, .. } if name == "b:late")));
    assert!(last(&trace).timers().is_empty());
}

/// A FAILED instance can be cancelled, as Zeebe and Camunda 7 cancel an instance with an
/// incident: it ends cancelled, its failure cleared and the failure's incident resolved;
/// a cancelled instance takes no second cancel.
#[test]
fn a_failed_instance_is_cancelled_with_its_failure_incident_resolved() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="gw"/>
      <exclusiveGateway id="gw"/>
      <sequenceFlow id="fa" sourceRef="gw" targetRef="a"><conditionExpression>amount &gt; 100</conditionExpression></sequenceFlow>
      <serviceTask id="a" q:task="a"/><sequenceFlow id="fa2" sourceRef="a" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(&def, r#"{"variables": {"amount": 5}}"#);
    assert_eq!(trace.summary.status, "failed");
    let failed = last(&trace);
    let step = qflow_core::step(&def, "x", failed, qflow_core::Input::Cancel, 50).unwrap();
    assert_eq!(step.snapshot.status(), Status::Cancelled);
    assert!(step.snapshot.failure().is_none());
    assert!(step
        .effects
        .iter()
        .any(|e| matches!(e, Effect::ResolveIncident { node } if node == "gw")));
    assert!(step.effects.iter().any(|e| matches!(e, Effect::Cancelled)));
    let again = qflow_core::step(&def, "x", step.snapshot, qflow_core::Input::Cancel, 60).unwrap();
    assert!(matches!(again.effects.as_slice(), [Effect::Stale { .. }]));

    // A task that failed its last attempt: its token stays, and the cancel interrupts it
    // without reporting the attempt a second time.
    let def = linear(&[("pay", "")]);
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "DECLINED"}]}}"#,
    );
    assert_eq!(trace.summary.status, "failed");
    let failed = last(&trace);
    assert_eq!(failed.tokens(), ["pay".to_owned()]);
    let step = qflow_core::step(&def, "x", failed, qflow_core::Input::Cancel, 50).unwrap();
    assert_eq!(step.snapshot.status(), Status::Cancelled);
    assert!(
        !step
            .effects
            .iter()
            .any(|e| matches!(e, Effect::AttemptFinished { .. })),
        "{:?}",
        step.effects
    );
    assert!(step
        .effects
        .iter()
        .any(|e| matches!(e, Effect::ResolveIncident { node } if node == "pay")));
}

#[test]
fn io_mappings_shape_handler_inputs_and_instance_variables() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="t"/>
      <serviceTask id="t" q:task="t"><extensionElements>
        <q:input target="total" source="price * qty"/>
        <q:output target="receipt" source="result.id"/>
      </extensionElements></serviceTask>
      <sequenceFlow id="f1" sourceRef="t" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"price": 3, "qty": 4},
            "tasks": {"t": [{"outcome": "ok", "outputs": {"id": "r-9", "noise": 1}}]}}"#,
    );
    let run = effects(&trace)
        .into_iter()
        .find_map(|(_, e)| match e {
            Effect::RunTask { inputs, .. } => Some(inputs),
            _ => None,
        })
        .unwrap();
    assert_eq!(serde_json::to_value(&run).unwrap(), json!({"total": 12}));
    let vars = last(&trace).variables().clone();
    assert_eq!(vars["receipt"], json!("r-9"));
    assert!(!vars.contains_key("noise"));
}

#[test]
fn event_based_gateway_takes_whichever_event_comes_first() {
    let def = model_with(
        r#"<message id="m1" name="paid"/>"#,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="race"/>
      <eventBasedGateway id="race"/>
      <sequenceFlow id="f1" sourceRef="race" targetRef="gotPaid"/>
      <sequenceFlow id="f2" sourceRef="race" targetRef="tooLate"/>
      <intermediateCatchEvent id="gotPaid"><messageEventDefinition messageRef="m1"/></intermediateCatchEvent>
      <intermediateCatchEvent id="tooLate"><timerEventDefinition><timeDuration>PT1H</timeDuration></timerEventDefinition></intermediateCatchEvent>
      <sequenceFlow id="f3" sourceRef="gotPaid" targetRef="ship"/><serviceTask id="ship" q:task="ship"/>
      <sequenceFlow id="f4" sourceRef="ship" targetRef="e1"/><endEvent id="e1"/>
      <sequenceFlow id="f5" sourceRef="tooLate" targetRef="remind"/><serviceTask id="remind" q:task="remind"/>
      <sequenceFlow id="f6" sourceRef="remind" targetRef="e2"/><endEvent id="e2"/>"#,
    );
    let paid = run_scenario(
        &def,
        r#"{"events": [{"event": "message", "at_ms": 60000, "name": "paid"}]}"#,
    );
    assert_eq!(paid.summary.status, "completed");
    assert_eq!(runs_of(&paid, "ship"), vec![(60_000, 1)]);
    assert!(runs_of(&paid, "remind").is_empty());
    assert!(paid.steps[1]
        .effects
        .iter()
        .any(|e| matches!(e, Effect::ResolveTimer { name, .. } if name == "c:tooLate")));

    let late = run_scenario(
        &def,
        r#"{"events": [{"event": "message", "at_ms": 7200000, "name": "paid"}]}"#,
    );
    assert_eq!(runs_of(&late, "remind"), vec![(3_600_000, 1)]);
    assert!(runs_of(&late, "ship").is_empty());
    assert_eq!(late.summary.status, "completed");
}

#[test]
fn a_join_that_can_never_complete_fails_as_stuck() {
    // An exclusive split feeding a parallel join: only one branch ever arrives.
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="x"/>
      <exclusiveGateway id="x" default="fb"/>
      <sequenceFlow id="fa" sourceRef="x" targetRef="a"><conditionExpression>go</conditionExpression></sequenceFlow>
      <sequenceFlow id="fb" sourceRef="x" targetRef="b"/>
      <serviceTask id="a" q:task="a"/><serviceTask id="b" q:task="b"/>
      <sequenceFlow id="fa2" sourceRef="a" targetRef="join"/><sequenceFlow id="fb2" sourceRef="b" targetRef="join"/>
      <parallelGateway id="join"/><sequenceFlow id="fj" sourceRef="join" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(&def, r#"{"variables": {"go": true}}"#);
    assert_eq!(trace.summary.failure_code.as_deref(), Some("STUCK_AT_JOIN"));
    assert_eq!(trace.summary.failure_node.as_deref(), Some("join"));
    assert_eq!(last(&trace).join_arrivals()["join"], vec!["fa2".to_owned()]);
}

#[test]
fn a_loop_that_never_waits_fails_with_step_limit_instead_of_spinning() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="a"/>
      <task id="a"/><sequenceFlow id="f1" sourceRef="a" targetRef="x"/>
      <exclusiveGateway id="x" default="back"/>
      <sequenceFlow id="out" sourceRef="x" targetRef="e"><conditionExpression>done</conditionExpression></sequenceFlow>
      <sequenceFlow id="back" sourceRef="x" targetRef="a"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(&def, r#"{"variables": {"done": false}}"#);
    assert_eq!(trace.summary.failure_code.as_deref(), Some("STEP_LIMIT"));
    assert_eq!(trace.steps.len(), 1);
}

#[test]
fn interrupting_timer_on_a_subprocess_ends_everything_inside_it() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="sub"/>
      <subProcess id="sub">
        <startEvent id="ss"/><sequenceFlow id="g0" sourceRef="ss" targetRef="fork"/>
        <parallelGateway id="fork"/>
        <sequenceFlow id="g1" sourceRef="fork" targetRef="inner"/><sequenceFlow id="g2" sourceRef="fork" targetRef="nap"/>
        <serviceTask id="inner" q:task="inner"/>
        <intermediateCatchEvent id="nap"><timerEventDefinition><timeDuration>PT1H</timeDuration></timerEventDefinition></intermediateCatchEvent>
        <sequenceFlow id="g3" sourceRef="inner" targetRef="se"/><sequenceFlow id="g4" sourceRef="nap" targetRef="se"/>
        <endEvent id="se"/>
      </subProcess>
      <boundaryEvent id="deadline" attachedToRef="sub"><timerEventDefinition><timeDuration>PT10M</timeDuration></timerEventDefinition></boundaryEvent>
      <sequenceFlow id="f1" sourceRef="sub" targetRef="e"/><endEvent id="e"/>
      <sequenceFlow id="f2" sourceRef="deadline" targetRef="late"/><endEvent id="late"/>"#,
    );
    let trace = run_scenario(&def, r#"{"tasks": {"inner": [{"outcome": "hang"}]}}"#);
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(trace.summary.ended_at_ms, 600_000);
    let fired = trace.steps.last().unwrap();
    // The attempt in flight is reported interrupted and the inner timer resolved.
    assert!(fired.effects.iter().any(|e| matches!(
        e,
        Effect::AttemptFinished { node, outcome: qflow_core::AttemptOutcome::Interrupted, .. } if node == "inner"
    )));
    assert!(fired
        .effects
        .iter()
        .any(|e| matches!(e, Effect::ResolveTimer { name, .. } if name == "c:nap")));
    assert!(last(&trace).timers().is_empty());
}

#[test]
fn a_date_timer_in_the_past_fires_at_once() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="wait"/>
      <intermediateCatchEvent id="wait"><timerEventDefinition><timeDate>2020-01-01T00:00:00Z</timeDate></timerEventDefinition></intermediateCatchEvent>
      <sequenceFlow id="f1" sourceRef="wait" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(&def, r#"{"start_at_ms": 1700000000000}"#);
    assert_eq!(arms(&trace)[0].1, 1_577_836_800_000);
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(trace.summary.ended_at_ms, 1_700_000_000_000);
}

#[test]
fn simultaneous_deliveries_go_results_then_events_then_timers() {
    // The user completes the task at the very instant its interrupting boundary is due:
    // the scripted event is delivered first, so the boundary's timer is resolved unfired.
    let def = model(&BOUNDARY.replace("CANCEL", "true"));
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "complete_user_task", "at_ms": 5000, "node": "work"}]}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    assert!(runs_of(&trace, "escalate").is_empty());
    assert_eq!(trace.steps.len(), 2);
}

#[test]
fn a_receive_task_without_a_message_waits_until_completed_like_a_user_task() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="wait"/>
      <receiveTask id="wait"/>
      <sequenceFlow id="f1" sourceRef="wait" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "message", "at_ms": 3, "name": "anything"},
                       {"event": "complete_user_task", "at_ms": 5, "node": "wait",
                        "variables": {"ok": true}}]}"#,
    );
    // No message reaches it; completing it through the API does.
    assert!(matches!(
        trace.steps[1].effects.as_slice(),
        [Effect::Stale { .. }]
    ));
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(last(&trace).variables()["ok"], json!(true));
}

/// `camunda:initiator` names a variable Camunda sets to the user who started the
/// instance; qflow knows no users, so it is the start's variable when given and null
/// otherwise — an assignee `${initiator}` then leaves the task unassigned instead of
/// failing on an unknown variable.
#[test]
fn the_initiator_variable_is_null_unless_the_start_gives_it() {
    let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:camunda="http://camunda.org/schema/1.0/bpmn" id="d" targetNamespace="t">
  <process id="p" isExecutable="true">
    <startEvent id="s" camunda:initiator="initiator"/>
    <userTask id="review" camunda:assignee="${initiator}"/>
    <endEvent id="e"/>
    <sequenceFlow id="f0" sourceRef="s" targetRef="review"/>
    <sequenceFlow id="f1" sourceRef="review" targetRef="e"/>
  </process>
</definitions>"#;
    let def = qflow_loader::load_str(xml).unwrap().definitions.remove(0);
    assert_eq!(def.initiator.as_deref(), Some("initiator"));
    let anonymous = common::run_scenario(&def, r#"{}"#);
    let snap = common::last(&anonymous);
    assert_eq!(
        snap.status(),
        qflow_core::Status::Running,
        "waits at the task"
    );
    assert_eq!(
        snap.variables().get("initiator"),
        Some(&serde_json::Value::Null)
    );
    assert_eq!(snap.assignee("review"), None);
    let named = common::run_scenario(&def, r#"{"variables": {"initiator": "kermit"}}"#);
    assert_eq!(common::last(&named).assignee("review"), Some("kermit"));
}

/// An activity or event without an outgoing flow is an implicit end (BPMN 2.0 §13.2,
/// loader warning Q905): its token is consumed there, and the instance completes once no
/// token is left — a branch of a split, and a route-less interrupting boundary that
/// cancels its task.
#[test]
fn an_activity_or_event_without_a_flow_out_ends_its_token_there() {
    let def = common::model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="fork"/>
        <parallelGateway id="fork"/>
        <sequenceFlow id="f1" sourceRef="fork" targetRef="notify"/>
        <sequenceFlow id="f2" sourceRef="fork" targetRef="slow"/>
        <serviceTask id="notify" q:task="notify"/>
        <serviceTask id="slow" q:task="slow"/>
        <boundaryEvent id="late" attachedToRef="slow">
          <timerEventDefinition><timeDuration>PT5S</timeDuration></timerEventDefinition>
        </boundaryEvent>"#,
    );
    let trace = common::run_scenario(
        &def,
        r#"{"tasks": {"notify": [{"outcome": "ok"}], "slow": [{"outcome": "hang"}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    let snap = common::last(&trace);
    assert!(snap.tokens().is_empty(), "{:?}", snap.tokens());
    // The boundary fired at 5 s and cancelled the task it is attached to.
    let fired = common::effects(&trace)
        .into_iter()
        .any(|(at, e)| at == 5_000 && matches!(e, qflow_core::Effect::Completed));
    assert!(
        fired,
        "the instance completes when the boundary's token ends"
    );
}

/// An activity's default flow, as Camunda 7 runs it: taken when no other flow out is —
/// every other one has a condition and none holds; a true condition (or an unconditioned
/// flow) takes its own flow and not the default.
#[test]
fn an_activity_s_default_flow_is_taken_when_no_other_flow_is() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="t"/>
        <serviceTask id="t" q:task="t" default="other"/>
        <sequenceFlow id="big" sourceRef="t" targetRef="e1"><conditionExpression>n > 10</conditionExpression></sequenceFlow>
        <sequenceFlow id="other" sourceRef="t" targetRef="e2"/>
        <endEvent id="e1"/><endEvent id="e2"/>"#,
    );
    let ended_at = |n: i64| {
        let trace = run_scenario(
            &def,
            &json!({"variables": {"n": n}, "tasks": {"t": [{"outcome": "ok"}]}}).to_string(),
        );
        assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
        trace
            .steps
            .iter()
            .flat_map(|s| s.path.iter())
            .filter_map(|e| match e {
                qflow_core::PathEvent::Flow { flow, .. } => Some(flow.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(ended_at(1), ["f0", "other"]);
    assert_eq!(ended_at(11), ["f0", "big"]);

    // A second instance of the activity (two tokens in it: `t@2`) has the same default.
    let twice = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
        <parallelGateway id="split"/>
        <sequenceFlow id="a" sourceRef="split" targetRef="t"/>
        <sequenceFlow id="b" sourceRef="split" targetRef="t"/>
        <serviceTask id="t" q:task="t" default="other"/>
        <sequenceFlow id="big" sourceRef="t" targetRef="e1"><conditionExpression>n > 10</conditionExpression></sequenceFlow>
        <sequenceFlow id="other" sourceRef="t" targetRef="e2"/>
        <endEvent id="e1"/><endEvent id="e2"/>"#,
    );
    let trace = run_scenario(
        &twice,
        r#"{"variables": {"n": 11}, "tasks": {"t": [{"outcome": "ok"}, {"outcome": "ok"}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    let taken: Vec<String> = trace
        .steps
        .iter()
        .flat_map(|s| s.path.iter())
        .filter_map(|e| match e {
            qflow_core::PathEvent::Flow { flow, .. } if flow == "big" || flow == "other" => {
                Some(flow.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        taken,
        ["big", "big"],
        "each instance of `t` takes only the true flow"
    );

    // Without a default, no true condition is NO_FLOW_TAKEN (Camunda 7 throws there).
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="t"/>
        <serviceTask id="t" q:task="t"/>
        <sequenceFlow id="big" sourceRef="t" targetRef="e1"><conditionExpression>n > 10</conditionExpression></sequenceFlow>
        <sequenceFlow id="small" sourceRef="t" targetRef="e2"><conditionExpression>n &lt; 0</conditionExpression></sequenceFlow>
        <endEvent id="e1"/><endEvent id="e2"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"n": 1}, "tasks": {"t": [{"outcome": "ok"}]}}"#,
    );
    assert_eq!(trace.summary.status, "failed");
    assert_eq!(trace.summary.failure_code.as_deref(), Some("NO_FLOW_TAKEN"));
}
