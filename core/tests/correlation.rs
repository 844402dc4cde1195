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
    let long = "x".repeat(qflow_core::CORRELATION_KEY_BYTES_MAX + 1);
    let trace = run_scenario(
        &def,
        &format!(r#"{{"variables": {{"order": {{"id": "{long}"}}}}}}"#),
    );
    assert_eq!(
        trace.summary.failure_code.as_deref(),
        Some("EXPRESSION_FAILED")
    );
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
