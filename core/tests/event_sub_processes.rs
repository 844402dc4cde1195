//! Event sub-processes in the core: what arms their triggers and for how long, what an
//! interrupting one ends and disarms, what a non-interrupting one leaves running, where
//! an error or escalation is caught (the event sub-process inside a scope before the
//! boundary on it; an error of a non-interrupting event sub-process by a sibling, nothing
//! of a running interrupting one), and that the
//! path names the start event that caught. The golden cases pin the bytes of the main
//! shapes (`golden/cases/event_sub_process_*`).

mod common;

use common::{effects, last, model_with, run_scenario, runs_of};
use qflow_core::path::PathEvent;
use qflow_core::{Effect, Input, Snapshot, Status};

const DECLS: &str = r#"<message id="msg" name="order-cancelled" q:correlationKey="order_id"/>
  <signal id="sig" name="halt"/>
  <error id="err" errorCode="PAY_FAILED"/>
  <escalation id="esc" escalationCode="LATE"/>"#;

/// start → user task `wait` → end, beside `esps`.
fn waiting_beside(esps: &str) -> qflow_loader::model::Definition {
    model_with(
        DECLS,
        &format!(
            r#"<startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="wait"/>
    <userTask id="wait"/>
    <sequenceFlow id="f2" sourceRef="wait" targetRef="e"/>
    <endEvent id="e"/>
    {esps}"#
        ),
    )
}

/// An event sub-process `id` with start `start` (`attrs`, `trigger`) → task `id_task`
/// (pass-through) → end.
fn esp(id: &str, attrs: &str, trigger: &str) -> String {
    format!(
        r#"<subProcess id="{id}" triggeredByEvent="true">
      <startEvent id="{id}_start"{attrs}>{trigger}</startEvent>
      <sequenceFlow id="{id}_1" sourceRef="{id}_start" targetRef="{id}_task"/>
      <task id="{id}_task"/>
      <sequenceFlow id="{id}_2" sourceRef="{id}_task" targetRef="{id}_end"/>
      <endEvent id="{id}_end"/>
    </subProcess>"#
    )
}

/// The catches of event sub-process starts in the run: (start, event sub-process,
/// interrupting).
fn esp_catches(trace: &qflow_core::sim::Trace) -> Vec<(String, String, bool)> {
    trace
        .steps
        .iter()
        .flat_map(|s| s.path.iter())
        .filter_map(|p| match p {
            PathEvent::Catch {
                node,
                event_sub_process: Some(esp),
                interrupting,
                ..
            } => Some((node.clone(), esp.clone(), interrupting.unwrap_or(false))),
            _ => None,
        })
        .collect()
}

#[test]
fn an_interrupting_signal_event_sub_process_disarms_the_scopes_other_triggers() {
    let def = waiting_beside(
        &[
            esp("halted", "", r#"<signalEventDefinition signalRef="sig"/>"#),
            esp(
                "cancelled",
                r#" isInterrupting="false""#,
                r#"<messageEventDefinition messageRef="msg"/>"#,
            ),
            esp(
                "late",
                "",
                r#"<timerEventDefinition><timeDuration>PT1H</timeDuration></timerEventDefinition>"#,
            ),
        ]
        .concat(),
    );
    let trace = run_scenario(
        &def,
        r#"{ "variables": { "order_id": "A-1" }, "events": [
          { "event": "signal", "at_ms": 1000, "name": "halt" },
          { "event": "signal", "at_ms": 2000, "name": "halt" },
          { "event": "message", "at_ms": 3000, "name": "order-cancelled", "correlation_key": "A-1" },
          { "event": "complete_user_task", "at_ms": 4000, "node": "wait" }
        ] }"#,
    );
    // Armed from the start: the timer, the keyed message and the signal.
    let first = Snapshot::decode(&trace.steps[0].snapshot).unwrap();
    assert!(first.timers().contains_key("b:late_start"));
    assert_eq!(first.subscriptions().len(), 2);
    // The signal ends the user task, resolves the timer and closes both rows; the event
    // sub-process has run to its end, so the instance completed in that step.
    let at_signal = &trace.steps[1];
    let kinds: Vec<&Effect> = at_signal.effects.iter().collect();
    assert!(kinds.iter().any(
        |e| matches!(e, Effect::ResolveTimer { name, .. } if name.as_str() == "b:late_start")
    ));
    assert!(kinds
        .iter()
        .any(|e| matches!(e, Effect::WithdrawUserTask { node } if node == "wait")));
    let unsubscribed: Vec<&str> = kinds
        .iter()
        .filter_map(|e| match e {
            Effect::Unsubscribe { node } => Some(node.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(unsubscribed.len(), 2, "{unsubscribed:?}");
    assert!(kinds.iter().any(|e| matches!(e, Effect::Completed)));
    assert_eq!(
        esp_catches(&trace),
        [("halted_start".to_owned(), "halted".to_owned(), true)]
    );
    // Everything after is stale.
    for step in &trace.steps[2..] {
        assert!(
            matches!(step.effects.as_slice(), [Effect::Stale { .. }]),
            "{:?}",
            step.effects
        );
    }
    assert_eq!(last(&trace).status(), Status::Completed);
}

#[test]
fn a_non_interrupting_timer_cycle_event_sub_process_fires_every_repetition() {
    let def = waiting_beside(&esp(
        "ping",
        r#" isInterrupting="false""#,
        r#"<timerEventDefinition><timeCycle>R3/PT1M</timeCycle></timerEventDefinition>"#,
    ));
    let trace = run_scenario(
        &def,
        r#"{ "events": [{ "event": "complete_user_task", "at_ms": 600000, "node": "wait" }] }"#,
    );
    let fired: Vec<i64> = trace
        .steps
        .iter()
        .filter(|s| matches!(&s.input, Input::TimerFired { name, .. } if name.as_str() == "b:ping_start"))
        .map(|s| s.at_ms)
        .collect();
    assert_eq!(fired, [60_000, 120_000, 180_000]);
    assert_eq!(esp_catches(&trace).len(), 3);
    assert!(esp_catches(&trace).iter().all(|(_, _, i)| !i));
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed);
    assert!(end.timers().is_empty());
}

#[test]
fn a_process_level_error_event_sub_process_catches_a_handler_error_and_the_instance_completes() {
    let def = model_with(
        DECLS,
        &format!(
            r#"<startEvent id="s"/>
    <sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
    <parallelGateway id="split"/>
    <sequenceFlow id="f1" sourceRef="split" targetRef="pay"/>
    <sequenceFlow id="f2" sourceRef="split" targetRef="wait"/>
    <serviceTask id="pay" q:task="pay"/>
    <userTask id="wait"/>
    <sequenceFlow id="f3" sourceRef="pay" targetRef="join"/>
    <sequenceFlow id="f4" sourceRef="wait" targetRef="join"/>
    <parallelGateway id="join"/>
    <sequenceFlow id="f5" sourceRef="join" targetRef="e"/>
    <endEvent id="e"/>
    {}"#,
            esp("failed", "", r#"<errorEventDefinition errorRef="err"/>"#)
        ),
    );
    let trace = run_scenario(
        &def,
        r#"{ "tasks": { "pay": [{ "outcome": "bpmn_error", "code": "PAY_FAILED", "message": "no" }] } }"#,
    );
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed, "{:#?}", trace.steps);
    assert!(end.join_arrivals().is_empty());
    assert_eq!(
        esp_catches(&trace),
        [("failed_start".to_owned(), "failed".to_owned(), true)]
    );
    assert!(effects(&trace)
        .iter()
        .any(|(_, e)| matches!(e, Effect::WithdrawUserTask { node } if node == "wait")));
}

#[test]
fn an_error_thrown_by_a_non_interrupting_event_sub_process_is_caught_by_a_sibling() {
    // The signal event sub-process is non-interrupting: its error end is caught by the
    // error event sub-process beside it, which interrupts the scope (the waiting task
    // ends) and completes the instance.
    let def = waiting_beside(
        r#"<subProcess id="recover" triggeredByEvent="true">
      <startEvent id="recover_start"><errorEventDefinition errorRef="err"/></startEvent>
      <sequenceFlow id="a1" sourceRef="recover_start" targetRef="recover_end"/>
      <endEvent id="recover_end"/>
    </subProcess>
    <subProcess id="noted" triggeredByEvent="true">
      <startEvent id="noted_start" isInterrupting="false"><signalEventDefinition signalRef="sig"/></startEvent>
      <sequenceFlow id="b1" sourceRef="noted_start" targetRef="noted_end"/>
      <endEvent id="noted_end"><errorEventDefinition errorRef="err"/></endEvent>
    </subProcess>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{ "events": [{ "event": "signal", "at_ms": 10, "name": "halt" },
                       { "event": "complete_user_task", "at_ms": 20, "node": "wait" }] }"#,
    );
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed);
    assert_eq!(
        esp_catches(&trace),
        [
            ("noted_start".to_owned(), "noted".to_owned(), false),
            ("recover_start".to_owned(), "recover".to_owned(), true),
        ]
    );
}

#[test]
fn an_error_thrown_inside_an_interrupting_event_sub_process_passes_its_siblings() {
    // An interrupting signal event sub-process throws an error: while it runs, its scope
    // is disarmed, so the catch-all error event sub-process beside it does not catch it,
    // and the error is uncaught.
    let def = waiting_beside(
        r#"<subProcess id="again" triggeredByEvent="true">
      <startEvent id="again_start"><errorEventDefinition/></startEvent>
      <sequenceFlow id="a1" sourceRef="again_start" targetRef="again_end"/>
      <endEvent id="again_end"><errorEventDefinition errorRef="err"/></endEvent>
    </subProcess>
    <subProcess id="first" triggeredByEvent="true">
      <startEvent id="first_start"><signalEventDefinition signalRef="sig"/></startEvent>
      <sequenceFlow id="b1" sourceRef="first_start" targetRef="first_end"/>
      <endEvent id="first_end"><errorEventDefinition errorRef="err"/></endEvent>
    </subProcess>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{ "events": [{ "event": "signal", "at_ms": 10, "name": "halt" }] }"#,
    );
    let end = last(&trace);
    assert_eq!(end.status(), Status::Failed);
    assert_eq!(end.failure().unwrap().code, "UNCAUGHT_BPMN_ERROR");
    assert_eq!(
        esp_catches(&trace),
        [("first_start".to_owned(), "first".to_owned(), true)]
    );
}

#[test]
fn the_event_sub_process_of_a_sub_process_lives_and_ends_with_it() {
    let def = model_with(
        DECLS,
        &format!(
            r#"<startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="sub"/>
    <subProcess id="sub">
      <startEvent id="ss"/>
      <sequenceFlow id="g1" sourceRef="ss" targetRef="work"/>
      <userTask id="work"/>
      <sequenceFlow id="g2" sourceRef="work" targetRef="se"/>
      <endEvent id="se"/>
      {}
      {}
    </subProcess>
    <sequenceFlow id="f2" sourceRef="sub" targetRef="after"/>
    <userTask id="after"/>
    <sequenceFlow id="f3" sourceRef="after" targetRef="e"/>
    <endEvent id="e"/>"#,
            esp(
                "remind",
                "",
                r#"<timerEventDefinition><timeDuration>PT1H</timeDuration></timerEventDefinition>"#
            ),
            esp("stop", "", r#"<signalEventDefinition signalRef="sig"/>"#)
        ),
    );
    let trace = run_scenario(
        &def,
        r#"{ "events": [
          { "event": "complete_user_task", "at_ms": 1000, "node": "work" },
          { "event": "signal", "at_ms": 2000, "name": "halt" }
        ] }"#,
    );
    let first = Snapshot::decode(&trace.steps[0].snapshot).unwrap();
    assert!(first.timers().contains_key("b:remind_start"));
    assert_eq!(
        first.subscriptions().get("stop_start").map(String::as_str),
        Some("")
    );
    // The sub-process completed: its triggers went with it.
    let after = Snapshot::decode(&trace.steps[1].snapshot).unwrap();
    assert_eq!(after.tokens(), ["after"]);
    assert!(after.timers().is_empty());
    assert!(after.subscriptions().is_empty());
    assert!(matches!(
        trace.steps[2].effects.as_slice(),
        [Effect::Stale { .. }]
    ));
    assert!(esp_catches(&trace).is_empty());
}

#[test]
fn an_interrupting_timer_event_sub_process_in_a_sub_process_ends_its_content_and_the_sub_process_leaves(
) {
    let def = model_with(
        DECLS,
        &format!(
            r#"<startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="sub"/>
    <subProcess id="sub">
      <startEvent id="ss"/>
      <sequenceFlow id="g1" sourceRef="ss" targetRef="work"/>
      <serviceTask id="work" q:task="work">
        <extensionElements><q:retry maxAttempts="3" initialInterval="PT1H" maxInterval="PT1H" jitter="none"/></extensionElements>
      </serviceTask>
      <sequenceFlow id="g2" sourceRef="work" targetRef="se"/>
      <endEvent id="se"/>
      {}
    </subProcess>
    <sequenceFlow id="f2" sourceRef="sub" targetRef="after"/>
    <serviceTask id="after" q:task="after"/>
    <sequenceFlow id="f3" sourceRef="after" targetRef="e"/>
    <endEvent id="e"/>"#,
            esp(
                "giveUp",
                "",
                r#"<timerEventDefinition><timeDuration>PT10M</timeDuration></timerEventDefinition>"#
            )
        ),
    );
    let trace = run_scenario(
        &def,
        r#"{ "tasks": {
          "work": [{ "outcome": "fail", "code": "BUSY", "message": "busy" }],
          "after": [{ "outcome": "ok", "outputs": {} }]
        } }"#,
    );
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed);
    // The park's timer was resolved when the event sub-process fired, and the task's
    // attempt 2 never ran.
    assert_eq!(runs_of(&trace, "work"), [(0, 1)]);
    assert_eq!(runs_of(&trace, "after"), [(600_000, 1)]);
    assert!(effects(&trace).iter().any(|(at, e)| *at == 600_000
        && matches!(e, Effect::ResolveTimer { name, .. } if name.as_str() == "r:work")));
}

#[test]
fn a_user_task_escalation_is_taken_by_an_escalation_event_sub_process() {
    let def = waiting_beside(&esp(
        "onLate",
        r#" isInterrupting="false""#,
        r#"<escalationEventDefinition escalationRef="esc"/>"#,
    ));
    let trace = run_scenario(
        &def,
        r#"{ "events": [
          { "event": "escalate_user_task", "at_ms": 10, "node": "wait", "code": "LATE", "variables": {} },
          { "event": "escalate_user_task", "at_ms": 20, "node": "wait", "code": "OTHER", "variables": {} },
          { "event": "complete_user_task", "at_ms": 30, "node": "wait" }
        ] }"#,
    );
    assert_eq!(
        esp_catches(&trace),
        [("onLate_start".to_owned(), "onLate".to_owned(), false)]
    );
    assert!(matches!(
        trace.steps[2].effects.as_slice(),
        [Effect::Stale { reason }] if reason.contains("no escalation boundary catches `OTHER`")
    ));
    assert_eq!(last(&trace).status(), Status::Completed);
}

#[test]
fn an_event_sub_process_start_is_not_a_start_of_the_instance() {
    let def = waiting_beside(&esp(
        "halted",
        "",
        r#"<signalEventDefinition signalRef="sig"/>"#,
    ));
    let got = qflow_core::step(
        &def,
        "i-1",
        Snapshot::new(),
        Input::Start {
            variables: Default::default(),
            start: Some("halted_start".into()),
        },
        0,
    );
    assert!(matches!(got, Err(qflow_core::Error::UnknownStart { .. })));
    assert!(qflow_core::unsupported_elements(&def).is_empty());
}

#[test]
fn a_resumed_instance_arms_its_process_level_event_sub_processes_again() {
    let def = model_with(
        DECLS,
        &format!(
            r#"<startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="pay"/>
    <serviceTask id="pay" q:task="pay"/>
    <sequenceFlow id="f2" sourceRef="pay" targetRef="e"/>
    <endEvent id="e"/>
    {}"#,
            esp(
                "late",
                "",
                r#"<timerEventDefinition><timeDuration>PT1H</timeDuration></timerEventDefinition>"#
            )
        ),
    );
    let trace = run_scenario(
        &def,
        r#"{ "tasks": { "pay": [
            { "outcome": "fail", "code": "DOWN", "message": "down" },
            { "outcome": "hang" }
          ] },
          "events": [{ "event": "resume", "at_ms": 1000, "budget": "keep" }] }"#,
    );
    let failed = Snapshot::decode(&trace.steps[1].snapshot).unwrap();
    assert_eq!(failed.status(), Status::Failed);
    assert!(failed.timers().is_empty());
    // Resumed at 1 s: the timer waits again from then, and fires an hour later.
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed);
    assert_eq!(
        esp_catches(&trace),
        [("late_start".to_owned(), "late".to_owned(), true)]
    );
    let fired = trace
        .steps
        .iter()
        .find(|s| matches!(&s.input, Input::TimerFired { .. }))
        .map(|s| s.at_ms);
    assert_eq!(fired, Some(3_601_000));
}

#[test]
fn an_attempt_in_flight_is_reported_interrupted_and_its_late_answer_is_stale() {
    let def = model_with(
        DECLS,
        &format!(
            r#"<startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="pay"/>
    <serviceTask id="pay" q:task="pay">
      <extensionElements><q:retry maxAttempts="3"/></extensionElements>
    </serviceTask>
    <sequenceFlow id="f2" sourceRef="pay" targetRef="e"/>
    <endEvent id="e"/>
    {}"#,
            r#"<subProcess id="cancelled" triggeredByEvent="true">
      <startEvent id="cancelled_start"><messageEventDefinition messageRef="msg"/></startEvent>
      <sequenceFlow id="c1" sourceRef="cancelled_start" targetRef="confirm"/>
      <userTask id="confirm"/>
      <sequenceFlow id="c2" sourceRef="confirm" targetRef="cancelled_end"/>
      <endEvent id="cancelled_end"/>
    </subProcess>"#
        ),
    );
    let trace = run_scenario(
        &def,
        r#"{ "variables": { "order_id": "A-1" },
          "tasks": { "pay": [{ "outcome": "ok", "outputs": { "paid": true }, "after_ms": 5000 }] },
          "events": [
            { "event": "message", "at_ms": 1000, "name": "order-cancelled", "correlation_key": "A-1" },
            { "event": "complete_user_task", "at_ms": 10000, "node": "confirm" }
          ] }"#,
    );
    let at_message = trace.steps.iter().find(|s| s.at_ms == 1000).unwrap();
    assert!(at_message.effects.iter().any(|e| matches!(
        e,
        Effect::AttemptFinished { node, outcome: qflow_core::AttemptOutcome::Interrupted, .. } if node == "pay"
    )));
    // The handler's answer at 5 s comes for a task the event sub-process ended.
    let late = trace.steps.iter().find(|s| s.at_ms == 5000).unwrap();
    assert!(
        matches!(late.effects.as_slice(), [Effect::Stale { reason }] if reason.contains("not pending")),
        "{:?}",
        late.effects
    );
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed);
    assert!(!end.variables().contains_key("paid"));
}

#[test]
fn a_non_interrupting_message_event_sub_process_takes_every_message_of_its_key() {
    let def = waiting_beside(&esp(
        "noted",
        r#" isInterrupting="false""#,
        r#"<messageEventDefinition messageRef="msg"/>"#,
    ));
    let trace = run_scenario(
        &def,
        r#"{ "variables": { "order_id": "A-1" }, "events": [
          { "event": "message", "at_ms": 10, "name": "order-cancelled", "correlation_key": "A-1", "variables": { "n": 1 } },
          { "event": "message", "at_ms": 20, "name": "order-cancelled", "correlation_key": "B-2" },
          { "event": "message", "at_ms": 30, "name": "order-cancelled", "correlation_key": "A-1", "variables": { "n": 2 } },
          { "event": "complete_user_task", "at_ms": 40, "node": "wait" }
        ] }"#,
    );
    assert_eq!(esp_catches(&trace).len(), 2);
    assert!(matches!(
        trace.steps[2].effects.as_slice(),
        [Effect::Stale { .. }]
    ));
    // Each catch closes the row and the sync opens it again under the key.
    let opened = effects(&trace)
        .iter()
        .filter(|(_, e)| matches!(e, Effect::Subscribe { node, key, .. } if node == "noted_start" && key == "A-1"))
        .count();
    assert_eq!(opened, 3);
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed);
    assert_eq!(end.variables().get("n"), Some(&serde_json::json!(2)));
    assert!(end.subscriptions().is_empty());
}

#[test]
fn an_event_sub_process_inside_an_event_sub_process_is_armed_while_its_parent_runs() {
    let def = waiting_beside(
        r#"<subProcess id="halted" triggeredByEvent="true">
      <startEvent id="halted_start"><signalEventDefinition signalRef="sig"/></startEvent>
      <sequenceFlow id="h1" sourceRef="halted_start" targetRef="review"/>
      <userTask id="review"/>
      <sequenceFlow id="h2" sourceRef="review" targetRef="halted_end"/>
      <endEvent id="halted_end"/>
      <subProcess id="nag" triggeredByEvent="true">
        <startEvent id="nag_start" isInterrupting="false"><timerEventDefinition><timeCycle>R2/PT1H</timeCycle></timerEventDefinition></startEvent>
        <sequenceFlow id="n1" sourceRef="nag_start" targetRef="nag_end"/>
        <endEvent id="nag_end"/>
      </subProcess>
    </subProcess>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{ "events": [
          { "event": "signal", "at_ms": 1000, "name": "halt" },
          { "event": "complete_user_task", "at_ms": 10000000, "node": "review" }
        ] }"#,
    );
    let first = Snapshot::decode(&trace.steps[0].snapshot).unwrap();
    assert!(!first.timers().contains_key("b:nag_start"));
    let halted = Snapshot::decode(&trace.steps[1].snapshot).unwrap();
    assert_eq!(halted.tokens(), ["halted", "review"]);
    assert!(halted.timers().contains_key("b:nag_start"));
    assert_eq!(
        esp_catches(&trace),
        [
            ("halted_start".to_owned(), "halted".to_owned(), true),
            ("nag_start".to_owned(), "nag".to_owned(), false),
            ("nag_start".to_owned(), "nag".to_owned(), false),
        ]
    );
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed);
    assert!(end.timers().is_empty());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

    /// Law: whenever an interrupting timer event sub-process fires — while an attempt is
    /// in flight or in a backoff park — the instance completes, nothing of the task runs
    /// after the instant it fired, and no timer or retry key is left; when it does not
    /// fire, the task succeeded (completed) or exhausted its budget (FAILED) first, and
    /// no timer is left either.
    #[test]
    fn an_interrupting_timer_leaves_nothing_of_the_task_behind(
        deadline_s in 1u64..200,
        outcomes in proptest::collection::vec((proptest::bool::ANY, 0u64..30_000), 1..6),
    ) {
        let def = model_with(
            DECLS,
            &format!(
                r#"<startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="pay"/>
    <serviceTask id="pay" q:task="pay">
      <extensionElements><q:retry maxAttempts="6" initialInterval="PT10S" maxInterval="PT40S" jitter="none"/></extensionElements>
    </serviceTask>
    <sequenceFlow id="f2" sourceRef="pay" targetRef="e"/>
    <endEvent id="e"/>
    {}"#,
                esp(
                    "late",
                    "",
                    &format!("<timerEventDefinition><timeDuration>PT{deadline_s}S</timeDuration></timerEventDefinition>")
                )
            ),
        );
        let tasks: Vec<serde_json::Value> = outcomes
            .iter()
            .map(|(ok, after)| {
                if *ok {
                    serde_json::json!({ "outcome": "ok", "outputs": {}, "after_ms": after })
                } else {
                    serde_json::json!({ "outcome": "fail", "code": "DOWN", "message": "down", "after_ms": after })
                }
            })
            .collect();
        let scenario = serde_json::json!({ "tasks": { "pay": tasks } }).to_string();
        let trace = run_scenario(&def, &scenario);
        let end = last(&trace);
        let fired = trace.steps.iter().find(|s| {
            matches!(&s.input, Input::TimerFired { name, .. } if name.as_str() == "b:late_start")
        });
        proptest::prop_assert!(end.timers().is_empty());
        if end.status() == Status::Failed {
            // Every attempt failed before the deadline: FAILED resolved the timer too.
            proptest::prop_assert!(fired.is_none());
            proptest::prop_assert_eq!(end.failure().unwrap().code, "DOWN");
        } else {
            proptest::prop_assert_eq!(end.status(), Status::Completed);
        }
        if let Some(fired) = fired {
            proptest::prop_assert_eq!(end.attempt("pay"), 0);
            let at = fired.at_ms;
            let after: Vec<_> = runs_of(&trace, "pay").into_iter().filter(|(t, _)| *t > at).collect();
            proptest::prop_assert!(after.is_empty(), "{:?}", after);
            proptest::prop_assert!(!end.variables().contains_key("paid"));
        }
    }
}
