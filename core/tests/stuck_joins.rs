//! A scope instance whose inside can no longer move (E10, `core/src/stall.rs`): a
//! sub-process — embedded, a multi-instance inner instance, an event sub-process run —
//! left holding only join arrivals that no token inside can complete fails the instance
//! `STUCK_AT_JOIN` at the join, as the process level does once no token is left, but
//! only once nothing could still move the instance: a timer boundary on it or on an
//! enclosing sub-process, an event sub-process in it or around it, a message wait or any
//! other live token elsewhere keeps it waiting. Every case goes through `run_scenario`.

mod common;

use common::{last, model, model_with, run_scenario};
use qflow_core::sim::{Stop, Trace};
use qflow_core::{Effect, Snapshot, Status};
use qflow_loader::model::Definition;

/// A sub-process's inside that ends stuck: an exclusive split sends the token down one
/// branch (`a` with `go`, else `b`), and both branches meet at a parallel join that
/// waits for the other one too.
const STUCK: &str = r#"<startEvent id="in"/><sequenceFlow id="g0" sourceRef="in" targetRef="x"/>
      <exclusiveGateway id="x" default="gb"/>
      <sequenceFlow id="ga" sourceRef="x" targetRef="a"><conditionExpression>go</conditionExpression></sequenceFlow>
      <sequenceFlow id="gb" sourceRef="x" targetRef="b"/>
      <serviceTask id="a" q:task="a"/><serviceTask id="b" q:task="b"/>
      <sequenceFlow id="ga2" sourceRef="a" targetRef="join"/>
      <sequenceFlow id="gb2" sourceRef="b" targetRef="join"/>
      <parallelGateway id="join"/>
      <sequenceFlow id="gj" sourceRef="join" targetRef="out"/><endEvent id="out"/>"#;

/// start → the sub-process `sub` (the [`STUCK`] inside, then `extra` inside it) →
/// `after` → end; `around` goes beside it at the process level (its boundaries, say).
fn stuck_sub(extra: &str, around: &str) -> Definition {
    model_with(
        r#"<message id="m" name="rescue"/>"#,
        &format!(
            r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="sub"/>
      <subProcess id="sub">{STUCK}{extra}</subProcess>
      <sequenceFlow id="f1" sourceRef="sub" targetRef="after"/>
      <serviceTask id="after" q:task="after"/>
      <sequenceFlow id="f2" sourceRef="after" targetRef="e"/><endEvent id="e"/>
      {around}"#
        ),
    )
}

/// `a` answers at 100 ms (every other task at once); `events` as JSON.
fn scenario(events: &str) -> String {
    format!(
        r#"{{"variables": {{"go": true}},
            "tasks": {{"a": [{{"outcome": "ok", "after_ms": 100}}]}},
            "events": [{events}]}}"#
    )
}

fn failed_stuck_at(trace: &Trace, join: &str, at_ms: i64) {
    assert_eq!(trace.summary.status, "failed", "{:?}", trace.summary);
    assert_eq!(trace.summary.failure_code.as_deref(), Some("STUCK_AT_JOIN"));
    assert_eq!(trace.summary.failure_node.as_deref(), Some(join));
    assert_eq!(trace.summary.ended_at_ms, at_ms);
}

fn completed_at(trace: &Trace, at_ms: i64) {
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    assert_eq!(trace.summary.ended_at_ms, at_ms);
}

fn tokens(snap: &Snapshot) -> Vec<&str> {
    snap.tokens().iter().map(String::as_str).collect()
}

/// The snapshot after the step at `at_ms` (the last one at that instant).
fn at(trace: &Trace, at_ms: i64) -> Snapshot {
    let step = trace
        .steps
        .iter()
        .rev()
        .find(|s| s.at_ms == at_ms)
        .expect("a step at that instant");
    Snapshot::decode(&step.snapshot).unwrap()
}

/// Whether a handler call for `node` was ever asked for.
fn ran(trace: &Trace, node: &str) -> bool {
    trace
        .steps
        .iter()
        .flat_map(|s| &s.effects)
        .any(|e| matches!(e, Effect::RunTask { node: n, .. } if n == node))
}

#[test]
fn a_sub_process_left_with_only_a_join_it_cannot_complete_fails_stuck_at_join() {
    let def = stuck_sub("", "");
    let trace = run_scenario(&def, &scenario(""));
    // Before: RUNNING for ever with the token at `sub` and nothing to move it.
    failed_stuck_at(&trace, "join", 100);
    assert_eq!(trace.summary.steps, 2);
    let end = last(&trace);
    assert_eq!(tokens(&end), ["sub"]);
    assert_eq!(end.join_arrivals()["join"], ["ga2".to_owned()]);
    assert!(!ran(&trace, "after"));
    // The incident names the scope and the join, and says it is the model's outcome.
    let incident = trace.steps[1].effects.iter().find_map(|e| match e {
        Effect::OpenIncident { code, message, .. } if code == "STUCK_AT_JOIN" => Some(message),
        _ => None,
    });
    let incident = incident.expect("an incident");
    assert!(
        incident.contains("`sub`") && incident.contains("`join`"),
        "{incident}"
    );

    // A resume arrives at the join again, as at the process level, and nothing changed:
    // the instance fails again rather than wait.
    let trace = run_scenario(
        &def,
        &scenario(r#"{"event": "resume", "at_ms": 1000, "budget": "keep"}"#),
    );
    failed_stuck_at(&trace, "join", 1000);
    assert_eq!(trace.summary.steps, 3);
}

#[test]
fn a_nested_stuck_sub_process_names_the_innermost_scope_and_its_join() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="outer"/>
      <subProcess id="outer">
        <startEvent id="os"/><sequenceFlow id="o0" sourceRef="os" targetRef="sub"/>
        <subProcess id="sub">{STUCK}</subProcess>
        <sequenceFlow id="o1" sourceRef="sub" targetRef="oe"/><endEvent id="oe"/>
      </subProcess>
      <sequenceFlow id="f1" sourceRef="outer" targetRef="e"/><endEvent id="e"/>"#
    ));
    let trace = run_scenario(&def, &scenario(""));
    failed_stuck_at(&trace, "join", 100);
    assert_eq!(tokens(&last(&trace)), ["outer", "sub"]);
}

#[test]
fn a_stuck_multi_instance_inner_instance_fails_once_its_siblings_are_done() {
    // Each inner instance gets stuck at its own join (`join#1`, `join#2`) once its `a`
    // answers: the first at 100 ms, the second at 500 ms.
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="each"/>
      <subProcess id="each">
        <multiInstanceLoopCharacteristics q:collection="items" q:elementVariable="item"/>
        {STUCK}
      </subProcess>
      <sequenceFlow id="f1" sourceRef="each" targetRef="e"/><endEvent id="e"/>"#
    ));
    let trace = run_scenario(
        &def,
        r#"{"variables": {"items": [1, 2], "go": true},
            "tasks": {"a": [{"outcome": "ok", "after_ms": 100}],
                      "a#2": [{"outcome": "ok", "after_ms": 500}]}}"#,
    );
    // At 100 ms the first inner instance is stuck, but the second still works.
    let waiting = at(&trace, 100);
    assert_eq!(waiting.status(), Status::Running);
    assert_eq!(tokens(&waiting), ["a#2", "each", "each#1", "each#2"]);
    assert_eq!(waiting.join_arrivals()["join#1"], ["ga2".to_owned()]);
    // Once it is stuck too, nothing can move either: the first (frontier order) is named.
    failed_stuck_at(&trace, "join#1", 500);
    assert_eq!(tokens(&last(&trace)), ["each", "each#1", "each#2"]);
    assert_eq!(last(&trace).join_arrivals().len(), 2);
}

#[test]
fn an_event_sub_process_run_left_with_only_a_join_fails_stuck_at_join() {
    // The interrupting timer event sub-process ends `wait` and gets stuck itself: the
    // process's other starts are disarmed while it runs, so nothing can move it.
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="wait"/>
      <userTask id="wait"/><sequenceFlow id="f1" sourceRef="wait" targetRef="e"/><endEvent id="e"/>
      <subProcess id="late" triggeredByEvent="true">{}</subProcess>"#,
        // The same inside, started by a timer.
        STUCK.replace(
            r#"<startEvent id="in"/>"#,
            r#"<startEvent id="in"><timerEventDefinition><timeDuration>PT1M</timeDuration></timerEventDefinition></startEvent>"#
        )
    ));
    let trace = run_scenario(&def, &scenario(""));
    failed_stuck_at(&trace, "join", 60_100);
    assert_eq!(tokens(&last(&trace)), ["late"]);
}

#[test]
fn a_timer_boundary_on_the_sub_process_or_around_it_keeps_it_waiting() {
    let boundary = |host: &str, interrupting: bool| {
        format!(
            r#"<boundaryEvent id="tooLong" attachedToRef="{host}" cancelActivity="{interrupting}">
          <timerEventDefinition><timeDuration>PT1H</timeDuration></timerEventDefinition>
        </boundaryEvent>
        <sequenceFlow id="fb" sourceRef="tooLong" targetRef="expired"/>
        <serviceTask id="expired" q:task="expired"/>
        <sequenceFlow id="fb2" sourceRef="expired" targetRef="eb"/><endEvent id="eb"/>"#
        )
    };
    // Interrupting: the boundary ends the stuck inside and its path completes the instance.
    let def = stuck_sub("", &boundary("sub", true));
    let trace = run_scenario(&def, &scenario(""));
    assert_eq!(at(&trace, 100).status(), Status::Running);
    completed_at(&trace, 3_600_000);
    assert!(ran(&trace, "expired") && !ran(&trace, "after"));

    // Non-interrupting: a wait while its timer is armed; once it has fired and its path
    // has ended, nothing is left that could move the sub-process.
    let def = stuck_sub("", &boundary("sub", false));
    let trace = run_scenario(&def, &scenario(""));
    assert_eq!(at(&trace, 100).status(), Status::Running);
    assert!(ran(&trace, "expired"));
    failed_stuck_at(&trace, "join", 3_600_000);

    // On an enclosing sub-process: it can end the stuck one inside it too.
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="outer"/>
      <subProcess id="outer">
        <startEvent id="os"/><sequenceFlow id="o0" sourceRef="os" targetRef="sub"/>
        <subProcess id="sub">{STUCK}</subProcess>
        <sequenceFlow id="o1" sourceRef="sub" targetRef="oe"/><endEvent id="oe"/>
      </subProcess>
      <sequenceFlow id="f1" sourceRef="outer" targetRef="e"/><endEvent id="e"/>
      {}"#,
        boundary("outer", true)
    ));
    let trace = run_scenario(&def, &scenario(""));
    assert_eq!(tokens(&at(&trace, 100)), ["outer", "sub"]);
    completed_at(&trace, 3_600_000);
    assert!(ran(&trace, "expired"));
}

#[test]
fn an_event_sub_process_inside_the_sub_process_keeps_it_waiting() {
    let rescue = |interrupting: bool| {
        format!(
            r#"<subProcess id="rescue" triggeredByEvent="true">
          <startEvent id="rescued" isInterrupting="{interrupting}"><messageEventDefinition messageRef="m"/></startEvent>
          <sequenceFlow id="r0" sourceRef="rescued" targetRef="rescueEnd"/><endEvent id="rescueEnd"/>
        </subProcess>"#
        )
    };
    // The message comes: the interrupting run ends the stuck inside, and the
    // sub-process completes when the run does.
    let def = stuck_sub(&rescue(true), "");
    let message = r#"{"event": "message", "at_ms": 5000, "name": "rescue"}"#;
    let trace = run_scenario(&def, &scenario(message));
    assert_eq!(at(&trace, 100).status(), Status::Running);
    completed_at(&trace, 5000);
    assert!(ran(&trace, "after"));

    // A non-interrupting one that could still start is a wait too (it could end the
    // instance, say with a terminate end), even when no message ever comes.
    let def = stuck_sub(&rescue(false), "");
    let trace = run_scenario(&def, &scenario(""));
    assert_eq!(trace.summary.status, "running", "{:?}", trace.summary);
    assert_eq!(trace.summary.stop, Stop::Idle);
    assert_eq!(tokens(&last(&trace)), ["sub"]);
}

#[test]
fn a_second_token_on_its_way_to_the_join_keeps_the_sub_process_running() {
    // A parallel split: `a`'s token waits at the join for the one at the timer catch.
    let inside = r#"<startEvent id="in"/><sequenceFlow id="g0" sourceRef="in" targetRef="fork"/>
      <parallelGateway id="fork"/>
      <sequenceFlow id="ga" sourceRef="fork" targetRef="a"/>
      <sequenceFlow id="gw" sourceRef="fork" targetRef="nap"/>
      <serviceTask id="a" q:task="a"/>
      <intermediateCatchEvent id="nap"><timerEventDefinition><timeDuration>PT1M</timeDuration></timerEventDefinition></intermediateCatchEvent>
      <sequenceFlow id="ga2" sourceRef="a" targetRef="join"/>
      <sequenceFlow id="gw2" sourceRef="nap" targetRef="join"/>
      <parallelGateway id="join"/>
      <sequenceFlow id="gj" sourceRef="join" targetRef="out"/><endEvent id="out"/>"#;
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="sub"/>
      <subProcess id="sub">{inside}</subProcess>
      <sequenceFlow id="f1" sourceRef="sub" targetRef="after"/>
      <serviceTask id="after" q:task="after"/>
      <sequenceFlow id="f2" sourceRef="after" targetRef="e"/><endEvent id="e"/>"#
    ));
    let trace = run_scenario(&def, &scenario(""));
    let waiting = at(&trace, 100);
    assert_eq!(waiting.status(), Status::Running);
    assert_eq!(tokens(&waiting), ["nap", "sub"]);
    assert_eq!(waiting.join_arrivals()["join"], ["ga2".to_owned()]);
    completed_at(&trace, 60_000);
}

#[test]
fn a_message_wait_elsewhere_keeps_the_instance_running_until_it_is_gone() {
    // Beside the stuck sub-process a branch waits for a message, then ends with `end`.
    let with_end = |end: &str| {
        model_with(
            r#"<message id="m" name="paid"/>"#,
            &format!(
                r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
          <parallelGateway id="split"/>
          <sequenceFlow id="fs1" sourceRef="split" targetRef="sub"/>
          <sequenceFlow id="fs2" sourceRef="split" targetRef="paid"/>
          <subProcess id="sub">{STUCK}</subProcess>
          <sequenceFlow id="f1" sourceRef="sub" targetRef="e"/><endEvent id="e"/>
          <intermediateCatchEvent id="paid"><messageEventDefinition messageRef="m"/></intermediateCatchEvent>
          <sequenceFlow id="f2" sourceRef="paid" targetRef="end"/>{end}"#
            ),
        )
    };
    let message = r#"{"event": "message", "at_ms": 10000, "name": "paid"}"#;
    // A plain end: once the message has come, nothing is left that could move `sub`.
    let def = with_end(r#"<endEvent id="end"/>"#);
    let trace = run_scenario(&def, &scenario(message));
    let waiting = at(&trace, 100);
    assert_eq!(waiting.status(), Status::Running);
    assert_eq!(tokens(&waiting), ["paid", "sub"]);
    failed_stuck_at(&trace, "join", 10_000);

    // A terminate end: the message wait could end the instance, and does.
    let def = with_end(r#"<endEvent id="end"><terminateEventDefinition/></endEvent>"#);
    let trace = run_scenario(&def, &scenario(message));
    assert_eq!(at(&trace, 100).status(), Status::Running);
    completed_at(&trace, 10_000);
}
