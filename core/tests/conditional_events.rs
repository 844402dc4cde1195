//! Conditional events in the core (`docs/conditional-events.md`): when a condition is
//! evaluated (armed, and after each variable change, before the next token moves), what
//! an interrupting and a non-interrupting one does, and that an instance waiting on a
//! condition that nothing can change any more fails instead of hanging.

mod common;

use common::{effects, last, model, run_scenario};
use qflow_core::path::{EventKind, PathEvent};
use qflow_core::{Effect, Snapshot, Status};

/// The conditional catches and boundaries the trace's steps caught, in order.
fn caught(trace: &qflow_core::sim::Trace) -> Vec<String> {
    trace
        .steps
        .iter()
        .flat_map(|s| s.path.iter())
        .filter_map(|e| match e {
            PathEvent::Catch {
                event: EventKind::Conditional,
                node,
                ..
            } => Some(node.clone()),
            _ => None,
        })
        .collect()
}

fn ran(trace: &qflow_core::sim::Trace, node: &str) -> usize {
    effects(trace)
        .into_iter()
        .filter(|(_, e)| matches!(e, Effect::RunTask { node: n, .. } if n == node))
        .count()
}

/// Camunda's own example (`order-handling.bpmn`): the boundary on the sub-process
/// fires as the task inside sets the variable, before the sub-process completes.
const ORDER: &str = r#"
  <startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="sub"/>
  <subProcess id="sub">
    <startEvent id="in"/><sequenceFlow id="i1" sourceRef="in" targetRef="invoice"/>
    <serviceTask id="invoice" q:task="invoice"/>
    <sequenceFlow id="i2" sourceRef="invoice" targetRef="inEnd"/><endEvent id="inEnd"/>
  </subProcess>
  <sequenceFlow id="f1" sourceRef="sub" targetRef="normal"/>
  <serviceTask id="normal" q:task="normal"/>
  <sequenceFlow id="f2" sourceRef="normal" targetRef="e1"/><endEvent id="e1"/>
  <boundaryEvent id="archive?" attachedToRef="sub">
    <conditionalEventDefinition><condition>${invoiceId != null}</condition></conditionalEventDefinition>
  </boundaryEvent>
  <sequenceFlow id="f3" sourceRef="archive?" targetRef="archive"/>
  <serviceTask id="archive" q:task="archive"/>
  <sequenceFlow id="f4" sourceRef="archive" targetRef="e2"/><endEvent id="e2"/>"#;

#[test]
fn a_boundary_fires_when_the_inside_sets_its_variable_before_the_scope_completes() {
    let def = model(ORDER);
    let trace = run_scenario(
        &def,
        r#"{"tasks": {
            "invoice": [{"outcome": "ok", "outputs": {"invoiceId": "I-1"}}],
            "archive": [{"outcome": "ok", "outputs": {}}],
            "normal": [{"outcome": "ok", "outputs": {}}]}}"#,
    );
    assert_eq!(caught(&trace), ["archive?"]);
    assert_eq!(ran(&trace, "archive"), 1);
    assert_eq!(ran(&trace, "normal"), 0, "the sub-process was interrupted");
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed);
}

#[test]
fn an_unset_variable_is_false_and_the_scope_completes_normally() {
    let def = model(ORDER);
    let trace = run_scenario(
        &def,
        r#"{"tasks": {
            "invoice": [{"outcome": "ok", "outputs": {"other": 1}}],
            "normal": [{"outcome": "ok", "outputs": {}}]}}"#,
    );
    assert!(caught(&trace).is_empty());
    assert_eq!(ran(&trace, "normal"), 1);
    assert_eq!(last(&trace).status(), Status::Completed);
}

#[test]
fn a_condition_true_on_entry_fires_at_once() {
    let def = model(ORDER);
    let trace = run_scenario(
        &def,
        r#"{"variables": {"invoiceId": "old"}, "tasks": {
            "archive": [{"outcome": "ok", "outputs": {}}]}}"#,
    );
    assert_eq!(caught(&trace), ["archive?"]);
    assert_eq!(ran(&trace, "invoice"), 0, "the inside never ran a task");
    assert_eq!(last(&trace).status(), Status::Completed);
}

/// A catch that waits until `stock > 0`, beside two tasks that write `stock` in turn.
const CATCH: &str = r#"
  <startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
  <parallelGateway id="split"/>
  <sequenceFlow id="f1" sourceRef="split" targetRef="wait"/>
  <sequenceFlow id="f2" sourceRef="split" targetRef="count"/>
  <intermediateCatchEvent id="wait">
    <conditionalEventDefinition><condition>stock &gt; 0</condition></conditionalEventDefinition>
  </intermediateCatchEvent>
  <sequenceFlow id="f3" sourceRef="wait" targetRef="ship"/>
  <serviceTask id="ship" q:task="ship"/>
  <sequenceFlow id="f4" sourceRef="ship" targetRef="e1"/><endEvent id="e1"/>
  <serviceTask id="count" q:task="count"/>
  <sequenceFlow id="f5" sourceRef="count" targetRef="recount"/>
  <serviceTask id="recount" q:task="recount"/>
  <sequenceFlow id="f6" sourceRef="recount" targetRef="e2"/><endEvent id="e2"/>"#;

#[test]
fn a_catch_waits_until_a_change_makes_its_condition_true() {
    let def = model(CATCH);
    let trace = run_scenario(
        &def,
        r#"{"variables": {"stock": 0}, "tasks": {
            "count": [{"outcome": "ok", "outputs": {"stock": 0}, "after_ms": 10}],
            "recount": [{"outcome": "ok", "outputs": {"stock": 5}, "after_ms": 10}],
            "ship": [{"outcome": "ok", "outputs": {}}]}}"#,
    );
    assert_eq!(caught(&trace), ["wait"]);
    assert_eq!(ran(&trace, "recount"), 1);
    assert_eq!(ran(&trace, "ship"), 1);
    // While stock was 0 the token waited at the catch.
    let first = Snapshot::decode(&trace.steps[0].snapshot).unwrap();
    assert!(first.tokens().iter().any(|t| t == "wait"));
    assert_eq!(last(&trace).status(), Status::Completed);
}

#[test]
fn a_catch_nothing_can_satisfy_any_more_fails_the_instance_instead_of_hanging() {
    let def = model(CATCH);
    let trace = run_scenario(
        &def,
        r#"{"variables": {"stock": 0}, "tasks": {
            "count": [{"outcome": "ok", "outputs": {"stock": 0}}],
            "recount": [{"outcome": "ok", "outputs": {"stock": -1}}]}}"#,
    );
    let end = last(&trace);
    assert_eq!(end.status(), Status::Failed);
    let failure = end.failure().expect("a failure");
    assert_eq!(failure.code, qflow_core::codes::CONDITION_IDLE);
    assert_eq!(failure.node.as_deref(), Some("wait"));
    let incident = effects(&trace).into_iter().find_map(|(_, e)| match e {
        Effect::OpenIncident { message, .. } => Some(message),
        _ => None,
    });
    let incident = incident.expect("an incident");
    assert!(
        incident.contains("nothing left in the instance can change a variable"),
        "{incident}"
    );
}

/// A non-interrupting boundary on a user task: a message writes `level`.
const NI: &str = r#"
  <startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="review"/>
  <userTask id="review"/>
  <sequenceFlow id="f1" sourceRef="review" targetRef="e1"/><endEvent id="e1"/>
  <boundaryEvent id="high" attachedToRef="review" cancelActivity="false">
    <conditionalEventDefinition><condition>level &gt; 5</condition></conditionalEventDefinition>
  </boundaryEvent>
  <sequenceFlow id="f2" sourceRef="high" targetRef="alert"/>
  <serviceTask id="alert" q:task="alert"/>
  <sequenceFlow id="f3" sourceRef="alert" targetRef="e2"/><endEvent id="e2"/>
  <boundaryEvent id="bump" attachedToRef="review" cancelActivity="false">
    <messageEventDefinition messageRef="m"/>
  </boundaryEvent>
  <sequenceFlow id="f4" sourceRef="bump" targetRef="e3"/><endEvent id="e3"/>"#;

#[test]
fn a_non_interrupting_boundary_fires_each_time_its_condition_becomes_true() {
    let def = common::model_with(r#"<message id="m" name="level"/>"#, NI);
    let trace = run_scenario(
        &def,
        r#"{"variables": {"level": 1}, "tasks": {"alert": [
              {"outcome": "ok", "outputs": {}}, {"outcome": "ok", "outputs": {}}]},
           "events": [
            {"event": "message", "at_ms": 10, "name": "level", "variables": {"level": 7}},
            {"event": "message", "at_ms": 20, "name": "level", "variables": {"level": 9}},
            {"event": "message", "at_ms": 30, "name": "level", "variables": {"level": 2}},
            {"event": "message", "at_ms": 40, "name": "level", "variables": {"level": 8}}]}"#,
    );
    // 1 → 7 fires; 7 → 9 still holds (no fire); 9 → 2 false; 2 → 8 fires again.
    assert_eq!(caught(&trace), ["high", "high"]);
    assert_eq!(ran(&trace, "alert"), 2);
    let end = last(&trace);
    assert_eq!(end.status(), Status::Running);
    assert!(end.tokens().iter().any(|t| t == "review"));
    // It remembers that the condition holds while the task waits.
    assert_eq!(end.conditions_held().keys().collect::<Vec<_>>(), ["high"]);
}

#[test]
fn a_filter_lets_only_changes_of_the_named_variable_through() {
    let def = common::model_with(
        r#"<message id="m" name="level"/>"#,
        &NI.replace(
            "<conditionalEventDefinition>",
            r#"<conditionalEventDefinition xmlns:camunda="http://camunda.org/schema/1.0/bpmn" camunda:variableName="trigger">"#,
        ),
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"level": 1}, "tasks": {"alert": [{"outcome": "ok", "outputs": {}}]},
           "events": [
            {"event": "message", "at_ms": 10, "name": "level", "variables": {"level": 7}},
            {"event": "message", "at_ms": 20, "name": "level", "variables": {"trigger": true}}]}"#,
    );
    // `level` changed alone: not evaluated; `trigger` created: evaluated, and it holds.
    assert_eq!(caught(&trace), ["high"]);
    let at: Vec<i64> = trace
        .steps
        .iter()
        .filter(|s| {
            s.path.iter().any(|e| {
                matches!(
                    e,
                    PathEvent::Catch {
                        event: EventKind::Conditional,
                        ..
                    }
                )
            })
        })
        .map(|s| s.at_ms)
        .collect();
    assert_eq!(at, [20]);
}

#[test]
fn an_evaluation_error_fails_the_instance_at_the_event() {
    let def = model(&ORDER.replace("${invoiceId != null}", "invoiceId &gt; 3"));
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"invoice": [{"outcome": "ok", "outputs": {"invoiceId": "I-1"}}]}}"#,
    );
    let end = last(&trace);
    assert_eq!(end.status(), Status::Failed);
    let failure = end.failure().expect("a failure");
    assert_eq!(failure.code, qflow_core::codes::EXPRESSION_FAILED);
    assert_eq!(failure.node.as_deref(), Some("archive?"));
}

#[test]
fn a_conditional_event_sub_process_interrupts_its_scope() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="work"/>
      <serviceTask id="work" q:task="work"/>
      <sequenceFlow id="f1" sourceRef="work" targetRef="more"/>
      <serviceTask id="more" q:task="more"/>
      <sequenceFlow id="f2" sourceRef="more" targetRef="e"/><endEvent id="e"/>
      <subProcess id="cancelled" triggeredByEvent="true">
        <startEvent id="cs">
          <conditionalEventDefinition><condition>=cancel = true</condition></conditionalEventDefinition>
        </startEvent>
        <sequenceFlow id="c1" sourceRef="cs" targetRef="ce"/><endEvent id="ce"/>
      </subProcess>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"work": [{"outcome": "ok", "outputs": {"cancel": true}}]}}"#,
    );
    assert_eq!(caught(&trace), ["cs"]);
    assert_eq!(ran(&trace, "more"), 0);
    assert_eq!(last(&trace).status(), Status::Completed);
}

#[test]
fn a_conditional_catch_races_after_an_event_based_gateway() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
      <parallelGateway id="split"/>
      <sequenceFlow id="f1" sourceRef="split" targetRef="gw"/>
      <sequenceFlow id="f2" sourceRef="split" targetRef="set"/>
      <serviceTask id="set" q:task="set"/>
      <sequenceFlow id="f3" sourceRef="set" targetRef="e0"/><endEvent id="e0"/>
      <eventBasedGateway id="gw"/>
      <sequenceFlow id="g1" sourceRef="gw" targetRef="ready"/>
      <sequenceFlow id="g2" sourceRef="gw" targetRef="late"/>
      <intermediateCatchEvent id="ready">
        <conditionalEventDefinition><condition>ready == true</condition></conditionalEventDefinition>
      </intermediateCatchEvent>
      <intermediateCatchEvent id="late"><timerEventDefinition><timeDuration>PT1H</timeDuration></timerEventDefinition></intermediateCatchEvent>
      <sequenceFlow id="g3" sourceRef="ready" targetRef="e1"/><endEvent id="e1"/>
      <sequenceFlow id="g4" sourceRef="late" targetRef="e2"/><endEvent id="e2"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"set": [{"outcome": "ok", "outputs": {"ready": true}, "after_ms": 50}]}}"#,
    );
    assert_eq!(caught(&trace), ["ready"]);
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed);
    assert!(end.timers().is_empty(), "the race's timer was resolved");
}

#[test]
fn a_non_interrupting_event_sub_process_runs_beside_and_leaves_no_key_behind() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="work"/>
      <serviceTask id="work" q:task="work"/>
      <sequenceFlow id="f1" sourceRef="work" targetRef="more"/>
      <serviceTask id="more" q:task="more"/>
      <sequenceFlow id="f2" sourceRef="more" targetRef="e"/><endEvent id="e"/>
      <subProcess id="notify" triggeredByEvent="true">
        <startEvent id="ns" isInterrupting="false">
          <conditionalEventDefinition><condition>flag</condition></conditionalEventDefinition>
        </startEvent>
        <sequenceFlow id="n1" sourceRef="ns" targetRef="tell"/>
        <serviceTask id="tell" q:task="tell"/>
        <sequenceFlow id="n2" sourceRef="tell" targetRef="ne"/><endEvent id="ne"/>
      </subProcess>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"flag": false}, "tasks": {
            "work": [{"outcome": "ok", "outputs": {"flag": true}, "after_ms": 10}],
            "tell": [{"outcome": "ok", "outputs": {}, "after_ms": 5}],
            "more": [{"outcome": "ok", "outputs": {"flag": true}, "after_ms": 20}]}}"#,
    );
    // Once, when `flag` became true; `more` writing it again changes nothing.
    assert_eq!(caught(&trace), ["ns"]);
    assert_eq!(ran(&trace, "more"), 1);
    assert_eq!(ran(&trace, "tell"), 1);
    let held_while_running = trace.steps.iter().any(|s| {
        Snapshot::decode(&s.snapshot)
            .unwrap()
            .conditions_held()
            .contains_key("ns")
    });
    assert!(held_while_running);
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed);
    assert!(end.conditions_held().is_empty());
}
