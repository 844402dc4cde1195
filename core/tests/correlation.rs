//! Message correlation by name and key: subscriptions open where a token waits for a
//! keyed message, close wherever that wait ends, and only a message with the key reaches
//! the wait.

mod common;

use common::{effects, last, model_with, run_scenario};
use qflow_core::Effect;
use serde_json::json;

const PAID: &str = r#"<message id="m1" name="paid" q:correlationKey="order.id"/>"#;

fn subscribes(trace: &qflow_core::sim::Trace) -> Vec<(i64, String, String, String)> {
    effects(trace)
        .into_iter()
        .filter_map(|(at, e)| match e {
            Effect::Subscribe { node, message, key } => Some((at, node, message, key)),
            _ => None,
        })
        .collect()
}

fn unsubscribes(trace: &qflow_core::sim::Trace) -> Vec<(i64, String)> {
    effects(trace)
        .into_iter()
        .filter_map(|(at, e)| match e {
            Effect::Unsubscribe { node } => Some((at, node)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_keyed_receive_task_takes_only_the_message_with_its_key() {
    let def = model_with(
        PAID,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="wait"/>
      <receiveTask id="wait" messageRef="m1"/>
      <sequenceFlow id="f1" sourceRef="wait" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"order": {"id": "A-17"}},
            "events": [
              {"event": "message", "at_ms": 3, "name": "paid", "correlation_key": "B-2"},
              {"event": "message", "at_ms": 5, "name": "paid", "correlation_key": "A-17",
               "variables": {"amount": 12}}]}"#,
    );
    assert_eq!(
        subscribes(&trace),
        vec![(0, "wait".into(), "paid".into(), "A-17".into())]
    );
    // The wrong key is stale and changes nothing.
    match trace.steps[1].effects.as_slice() {
        [Effect::Stale { reason }] => {
            assert!(reason.contains("with key `B-2`"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(unsubscribes(&trace), vec![(5, "wait".into())]);
    assert_eq!(trace.summary.status, "completed");
    let end = last(&trace);
    assert_eq!(end.variables()["amount"], json!(12));
    assert!(end.subscriptions().is_empty());
    // While waiting, the snapshot carried the key.
    let waiting = qflow_core::Snapshot::decode(&trace.steps[0].snapshot).unwrap();
    assert_eq!(
        waiting.subscriptions().get("wait").map(String::as_str),
        Some("A-17")
    );
    assert_eq!(waiting.inspect()["subscriptions"], json!({"wait": "A-17"}));
}

#[test]
fn a_message_without_a_key_still_reaches_the_instance_it_is_sent_to() {
    let def = model_with(
        PAID,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="wait"/>
      <intermediateCatchEvent id="wait"><messageEventDefinition messageRef="m1"/></intermediateCatchEvent>
      <sequenceFlow id="f1" sourceRef="wait" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"order": {"id": 42}},
            "events": [{"event": "message", "at_ms": 5, "name": "paid"}]}"#,
    );
    // An integer key is written in decimal.
    assert_eq!(subscribes(&trace)[0].3, "42");
    assert_eq!(trace.summary.status, "completed");
    assert_eq!(unsubscribes(&trace), vec![(5, "wait".into())]);
}

#[test]
fn a_timer_winning_the_race_after_an_event_gateway_closes_the_subscription() {
    let def = model_with(
        PAID,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="gw"/>
      <eventBasedGateway id="gw"/>
      <sequenceFlow id="f1" sourceRef="gw" targetRef="msg"/>
      <sequenceFlow id="f2" sourceRef="gw" targetRef="late"/>
      <intermediateCatchEvent id="msg"><messageEventDefinition messageRef="m1"/></intermediateCatchEvent>
      <intermediateCatchEvent id="late"><timerEventDefinition><timeDuration>PT10S</timeDuration></timerEventDefinition></intermediateCatchEvent>
      <sequenceFlow id="f3" sourceRef="msg" targetRef="e1"/><endEvent id="e1"/>
      <sequenceFlow id="f4" sourceRef="late" targetRef="e2"/><endEvent id="e2"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"order": {"id": "A"}},
            "events": [{"event": "message", "at_ms": 20000, "name": "paid", "correlation_key": "A"}]}"#,
    );
    assert_eq!(
        subscribes(&trace),
        vec![(0, "msg".into(), "paid".into(), "A".into())]
    );
    assert_eq!(unsubscribes(&trace), vec![(10_000, "msg".into())]);
    assert_eq!(trace.summary.status, "completed");
}

#[test]
fn an_interrupting_boundary_and_a_cancel_close_the_subscription() {
    let body = r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="wait"/>
      <receiveTask id="wait" messageRef="m1"/>
      <boundaryEvent id="tb" attachedToRef="wait"><timerEventDefinition><timeDuration>PT5S</timeDuration></timerEventDefinition></boundaryEvent>
      <sequenceFlow id="f1" sourceRef="wait" targetRef="e"/><endEvent id="e"/>
      <sequenceFlow id="f2" sourceRef="tb" targetRef="e2"/><endEvent id="e2"/>"#;
    let def = model_with(PAID, body);
    let vars = r#""variables": {"order": {"id": "A"}}"#;
    let timed_out = run_scenario(&def, &format!("{{{vars}}}"));
    assert_eq!(unsubscribes(&timed_out), vec![(5_000, "wait".into())]);
    assert_eq!(timed_out.summary.status, "completed");
    let cancelled = run_scenario(
        &def,
        &format!(r#"{{{vars}, "events": [{{"event": "cancel", "at_ms": 1000}}]}}"#),
    );
    assert_eq!(unsubscribes(&cancelled), vec![(1_000, "wait".into())]);
    assert_eq!(cancelled.summary.status, "cancelled");
    assert!(last(&cancelled).subscriptions().is_empty());
}

#[test]
fn a_key_that_does_not_evaluate_fails_the_instance_without_a_subscription() {
    let def = model_with(
        PAID,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="wait"/>
      <receiveTask id="wait" messageRef="m1"/>
      <sequenceFlow id="f1" sourceRef="wait" targetRef="e"/><endEvent id="e"/>"#,
    );
    for (vars, why) in [
        (r#"{}"#, "order"),
        (r#"{"order": {"id": {"nested": 1}}}"#, "a map"),
        (r#"{"order": {"id": 1.5}}"#, "a non-integral number"),
    ] {
        let trace = run_scenario(&def, &format!(r#"{{"variables": {vars}}}"#));
        assert_eq!(trace.summary.status, "failed", "{vars}");
        assert_eq!(
            trace.summary.failure_code.as_deref(),
            Some("EXPRESSION_FAILED")
        );
        assert_eq!(trace.summary.failure_node.as_deref(), Some("wait"));
        assert!(subscribes(&trace).is_empty(), "{vars}");
        let incident = effects(&trace).into_iter().find_map(|(_, e)| match e {
            Effect::OpenIncident { message, .. } => Some(message),
            _ => None,
        });
        let incident = incident.expect("an incident");
        assert!(
            incident.contains("correlation key of message `paid`") && incident.contains(why),
            "{incident}"
        );
    }
    let long = "x".repeat(qflow_core::CORRELATION_KEY_CHARS_MAX + 1);
    for id in [long.as_str(), "", "a\\u0007b"] {
        let trace = run_scenario(
            &def,
            &format!(r#"{{"variables": {{"order": {{"id": "{id}"}}}}}}"#),
        );
        assert_eq!(
            trace.summary.failure_code.as_deref(),
            Some("EXPRESSION_FAILED"),
            "{id:?}"
        );
    }
    let longest = "é".repeat(qflow_core::CORRELATION_KEY_CHARS_MAX);
    let trace = run_scenario(
        &def,
        &format!(r#"{{"variables": {{"order": {{"id": "{longest}"}}}}}}"#),
    );
    assert_eq!(trace.summary.status, "running", "64 characters are a key");
}

#[test]
fn failing_closes_the_subscriptions_and_resuming_opens_them_again() {
    let def = model_with(
        PAID,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="fork"/>
      <parallelGateway id="fork"/>
      <sequenceFlow id="f1" sourceRef="fork" targetRef="t"/>
      <sequenceFlow id="f2" sourceRef="fork" targetRef="wait"/>
      <serviceTask id="t" q:task="t"/>
      <receiveTask id="wait" messageRef="m1"/>
      <sequenceFlow id="f3" sourceRef="t" targetRef="join"/>
      <sequenceFlow id="f4" sourceRef="wait" targetRef="join"/>
      <parallelGateway id="join"/>
      <sequenceFlow id="f5" sourceRef="join" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"order": {"id": "A"}},
            "tasks": {"t": [{"outcome": "fail", "code": "DOWN", "after_ms": 10}, {"outcome": "ok"}]},
            "events": [{"event": "resume", "at_ms": 100, "budget": "reset"},
                       {"event": "message", "at_ms": 200, "name": "paid", "correlation_key": "A"}]}"#,
    );
    let opened: Vec<i64> = subscribes(&trace).iter().map(|s| s.0).collect();
    assert_eq!(
        opened,
        vec![0, 100],
        "opened at the start and again on resume"
    );
    assert_eq!(
        unsubscribes(&trace),
        vec![(10, "wait".into()), (200, "wait".into())],
        "closed when the instance failed, and when the message came"
    );
    assert_eq!(trace.summary.status, "completed");
}

#[test]
fn a_definition_without_correlation_keys_emits_no_subscription_effects() {
    let def = model_with(
        r#"<message id="m1" name="paid"/>"#,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="wait"/>
      <receiveTask id="wait" messageRef="m1"/>
      <sequenceFlow id="f1" sourceRef="wait" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "message", "at_ms": 5, "name": "paid"}]}"#,
    );
    assert!(subscribes(&trace).is_empty() && unsubscribes(&trace).is_empty());
    assert_eq!(trace.summary.status, "completed");
    // A key on the message selects no wait: nothing keyed is open.
    let keyed = run_scenario(
        &def,
        r#"{"events": [{"event": "message", "at_ms": 5, "name": "paid", "correlation_key": "A"}]}"#,
    );
    assert_eq!(keyed.summary.status, "running");
}

const BOUNDARY: &str = r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="pay"/>
      <serviceTask id="pay" q:task="pay"><extensionElements>
        <q:retry maxAttempts="5" initialInterval="PT1H" maxInterval="PT1H" jitter="none"/>
      </extensionElements></serviceTask>
      <boundaryEvent id="cancelled" attachedToRef="pay" cancelActivity="CANCEL">
        <messageEventDefinition messageRef="m1"/></boundaryEvent>
      <sequenceFlow id="f1" sourceRef="pay" targetRef="done"/><endEvent id="done"/>
      <sequenceFlow id="f2" sourceRef="cancelled" targetRef="refund"/>
      <userTask id="refund"/>
      <sequenceFlow id="f3" sourceRef="refund" targetRef="refunded"/><endEvent id="refunded"/>"#;

#[test]
fn an_interrupting_message_boundary_ends_a_task_in_its_backoff_window() {
    let def = model_with(PAID, &BOUNDARY.replace("CANCEL", "true"));
    let trace = run_scenario(
        &def,
        r#"{"variables": {"order": {"id": "A"}},
            "tasks": {"pay": [{"outcome": "fail", "code": "DOWN"}]},
            "events": [
              {"event": "message", "at_ms": 600000, "name": "paid", "correlation_key": "B"},
              {"event": "message", "at_ms": 600000, "name": "paid", "correlation_key": "A",
               "variables": {"reason": "customer"}}]}"#,
    );
    // The subscription opened with the task and closed when the message took the path.
    assert_eq!(
        subscribes(&trace),
        vec![(0, "cancelled".into(), "paid".into(), "A".into())]
    );
    assert_eq!(unsubscribes(&trace), vec![(600_000, "cancelled".into())]);
    let end = last(&trace);
    assert_eq!(end.status(), qflow_core::Status::Running);
    assert_eq!(end.tokens(), ["refund"]);
    assert_eq!(end.variables()["reason"], json!("customer"));
    // The backoff park was resolved with the task: no retry comes after the message.
    assert!(end.timers().is_empty(), "{:?}", end.timers());
    assert_eq!(common::runs_of(&trace, "pay").len(), 1);
}

#[test]
fn a_non_interrupting_message_boundary_fires_per_message_while_the_task_runs() {
    let def = model_with(
        r#"<message id="m1" name="paid"/>"#,
        &BOUNDARY.replace("CANCEL", "false"),
    );
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "DOWN"}, {"outcome": "ok", "after_ms": 10}]},
            "events": [
              {"event": "message", "at_ms": 1000, "name": "paid"},
              {"event": "message", "at_ms": 2000, "name": "paid"},
              {"event": "complete_user_task", "at_ms": 5000, "node": "refund@2"},
              {"event": "complete_user_task", "at_ms": 6000, "node": "refund"}]}"#,
    );
    // Two messages, two tokens at `refund` — two activity instances, `refund` and
    // `refund@2` (E9), completed one by one; the task retried and completed beside them.
    assert_eq!(common::runs_of(&trace, "pay").len(), 2);
    assert_eq!(trace.summary.status, "completed");
    assert!(
        subscribes(&trace).is_empty(),
        "no key, no subscription rows"
    );
}

#[test]
fn a_migration_reopens_subscriptions_under_the_targets_message_and_key() {
    let wait = r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="wait"/>
      <receiveTask id="wait" messageRef="m1"/>
      <sequenceFlow id="f1" sourceRef="wait" targetRef="e"/><endEvent id="e"/>"#;
    let v1 = model_with(PAID, wait);
    let v2 = model_with(
        r#"<message id="m1" name="settled" q:correlationKey="'ref-' + order.id"/>"#,
        wait,
    );
    let scenario: qflow_core::sim::Scenario = serde_json::from_str(
        r#"{"variables": {"order": {"id": "A"}},
            "events": [
              {"event": "migrate", "at_ms": 10, "target": "v2"},
              {"event": "message", "at_ms": 20, "name": "paid", "correlation_key": "A"},
              {"event": "message", "at_ms": 30, "name": "settled", "correlation_key": "ref-A"}]}"#,
    )
    .unwrap();
    let targets = qflow_core::sim::Targets::from([("v2".to_owned(), v2)]);
    let trace = qflow_core::sim::run_with(&v1, &scenario, &targets).unwrap();
    assert_eq!(
        subscribes(&trace),
        vec![
            (0, "wait".into(), "paid".into(), "A".into()),
            (10, "wait".into(), "settled".into(), "ref-A".into())
        ],
        "the node kept its id; its subscription was opened again under v2's message"
    );
    assert_eq!(
        unsubscribes(&trace),
        vec![(10, "wait".into()), (30, "wait".into())]
    );
    assert!(matches!(
        trace.steps[2].effects.as_slice(),
        [Effect::Stale { .. }]
    ));
    assert_eq!(trace.summary.status, "completed");
}

#[test]
fn a_wait_entered_again_in_one_step_reopens_with_its_key_evaluated_afresh() {
    // The timer boundary on `wait` interrupts it and routes straight back to it.
    let def = model_with(
        PAID,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="wait"/>
      <receiveTask id="wait" messageRef="m1"/>
      <boundaryEvent id="retry" attachedToRef="wait"><timerEventDefinition><timeDuration>PT1S</timeDuration></timerEventDefinition></boundaryEvent>
      <sequenceFlow id="f1" sourceRef="wait" targetRef="e"/><endEvent id="e"/>
      <sequenceFlow id="f2" sourceRef="retry" targetRef="wait"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"order": {"id": "A"}}, "horizon_ms": 1500}"#,
    );
    // The timer interrupts the wait and loops back to it in one step: closed and opened
    // again in that step (the store applies the close first).
    assert_eq!(
        subscribes(&trace).iter().map(|s| s.0).collect::<Vec<_>>(),
        vec![0, 1000]
    );
    assert_eq!(unsubscribes(&trace), vec![(1000, "wait".into())]);
}

#[test]
fn a_message_naming_its_node_reaches_only_that_wait() {
    // One instance waits twice under one key: at a receive task and, beside it, at a
    // task's message boundary.
    let def = model_with(
        PAID,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="fork"/>
      <parallelGateway id="fork"/>
      <sequenceFlow id="f1" sourceRef="fork" targetRef="wait"/>
      <sequenceFlow id="f2" sourceRef="fork" targetRef="review"/>
      <receiveTask id="wait" messageRef="m1"/>
      <userTask id="review"/>
      <boundaryEvent id="stop" attachedToRef="review"><messageEventDefinition messageRef="m1"/></boundaryEvent>
      <sequenceFlow id="f3" sourceRef="wait" targetRef="e1"/><endEvent id="e1"/>
      <sequenceFlow id="f4" sourceRef="review" targetRef="e2"/><endEvent id="e2"/>
      <sequenceFlow id="f5" sourceRef="stop" targetRef="e3"/><endEvent id="e3"/>"#,
    );
    let start = qflow_core::step(
        &def,
        "i",
        qflow_core::Snapshot::new(),
        qflow_core::Input::Start {
            variables: serde_json::from_str(r#"{"order": {"id": "A"}}"#).unwrap(),
            start: None,
        },
        0,
    )
    .unwrap();
    let keys = start.snapshot.subscriptions().clone();
    assert_eq!(keys.len(), 2, "{keys:?}");
    let input = |node: &str| qflow_core::Input::MessageReceived {
        name: "paid".into(),
        correlation_key: Some("A".into()),
        node: Some(node.into()),
        variables: Default::default(),
    };
    let out = qflow_core::step(&def, "i", start.snapshot.clone(), input("stop"), 5).unwrap();
    // The boundary took it: `review` was interrupted, `wait` still waits.
    assert_eq!(out.snapshot.tokens(), ["wait"]);
    let stale = qflow_core::step(&def, "i", start.snapshot, input("nowhere"), 5).unwrap();
    match stale.effects.as_slice() {
        [Effect::Stale { reason }] => assert!(reason.contains("at `nowhere`"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_step_that_fails_part_way_asks_for_no_handler() {
    // A split: `charge` (a registered task) is entered first, then the keyed wait, whose
    // key does not evaluate, fails the instance in the same step.
    let def = model_with(
        PAID,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="fork"/>
      <parallelGateway id="fork"/>
      <sequenceFlow id="f1" sourceRef="fork" targetRef="charge"/>
      <sequenceFlow id="f2" sourceRef="fork" targetRef="wait"/>
      <serviceTask id="charge" q:task="charge"/>
      <receiveTask id="wait" messageRef="m1"/>
      <sequenceFlow id="f3" sourceRef="charge" targetRef="join"/>
      <sequenceFlow id="f4" sourceRef="wait" targetRef="join"/>
      <parallelGateway id="join"/>
      <sequenceFlow id="f5" sourceRef="join" targetRef="e"/><endEvent id="e"/>"#,
    );
    let out = qflow_core::step(
        &def,
        "i",
        qflow_core::Snapshot::new(),
        qflow_core::Input::Start {
            variables: Default::default(),
            start: None,
        },
        0,
    )
    .unwrap();
    assert_eq!(out.snapshot.status(), qflow_core::Status::Failed);
    assert!(
        !out.effects
            .iter()
            .any(|e| matches!(e, Effect::RunTask { .. })),
        "a FAILED instance's handler must not be called: {:?}",
        out.effects
    );
    // The task's token stays: a resume (with the variable given) re-adopts its attempt.
    assert!(out.snapshot.tokens().iter().any(|t| t == "charge"));
}
