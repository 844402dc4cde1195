//! Activity instances (SPEC E9) and no silent stall (E10): two tokens in one activity are
//! two instances with their own attempts, timers, keys and rows; an instance that can
//! never move fails with `STALLED` instead of waiting for ever.

mod common;

use common::{effects, last, model, run_scenario, runs_of};
use qflow_core::{step, Effect, Input, Snapshot, Status};

const RETRY: &str =
    r#"<extensionElements><q:retry maxAttempts="3" initialInterval="PT1S"/></extensionElements>"#;

/// A parallel split whose two flows both enter `pay`, which has a `q:retry` policy.
fn split_into_one_task() -> qflow_core::Definition {
    model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
      <parallelGateway id="split"/>
      <sequenceFlow id="f1" sourceRef="split" targetRef="pay"/>
      <sequenceFlow id="f2" sourceRef="split" targetRef="pay"/>
      <serviceTask id="pay" q:task="pay">{RETRY}</serviceTask>
      <sequenceFlow id="f3" sourceRef="pay" targetRef="e"/><endEvent id="e"/>"#
    ))
}

/// `(node, attempt, outcome)` of every attempt-history row of the run.
fn history(trace: &qflow_core::sim::Trace) -> Vec<(String, u32, String)> {
    effects(trace)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Effect::AttemptFinished {
                node,
                attempt,
                outcome,
                ..
            } => Some((node, attempt.get(), outcome.as_str().to_owned())),
            _ => None,
        })
        .collect()
}

#[test]
fn two_flows_of_a_split_into_one_retrying_task_are_two_instances_and_both_finish() {
    let def = split_into_one_task();
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"pay": [{"outcome": "fail", "code": "DOWN"}, {"outcome": "ok"}],
                      "pay@2": [{"outcome": "ok", "after_ms": 10}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    // The first instance failed once and ran again after its backoff; the second ran
    // once, its answer judged against its own attempt, not the first's backoff window.
    assert_eq!(runs_of(&trace, "pay").len(), 2);
    assert_eq!(runs_of(&trace, "pay@2"), vec![(0, 1)]);
    let mut rows = history(&trace);
    rows.sort();
    assert_eq!(
        rows,
        [
            ("pay".into(), 1, "failed".into()),
            ("pay".into(), 2, "ok".into()),
            ("pay@2".into(), 1, "ok".into())
        ]
    );
    // Only the failed instance parked: its retry timer and counter are its own.
    let parked = trace
        .steps
        .iter()
        .map(|s| Snapshot::decode(&s.snapshot).unwrap())
        .find(|s| !s.markers().is_empty())
        .expect("a step in a backoff window");
    assert_eq!(parked.markers().keys().collect::<Vec<_>>(), ["pay"]);
    assert!(parked.timers().contains_key("r:pay"));
    assert!(!parked.timers().contains_key("r:pay@2"));
}

#[test]
fn an_uncontrolled_merge_into_a_failing_task_runs_it_once_per_token() {
    // A parallel split, two tasks, an exclusive gateway merging them, then a task that
    // fails once: the most common form of two tokens in one activity.
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
      <parallelGateway id="split"/>
      <sequenceFlow id="f1" sourceRef="split" targetRef="a"/>
      <sequenceFlow id="f2" sourceRef="split" targetRef="b"/>
      <serviceTask id="a" q:task="a"/><serviceTask id="b" q:task="b"/>
      <sequenceFlow id="f3" sourceRef="a" targetRef="merge"/>
      <sequenceFlow id="f4" sourceRef="b" targetRef="merge"/>
      <exclusiveGateway id="merge"/>
      <sequenceFlow id="f5" sourceRef="merge" targetRef="notify"/>
      <serviceTask id="notify" q:task="notify">{RETRY}</serviceTask>
      <sequenceFlow id="f6" sourceRef="notify" targetRef="e"/><endEvent id="e"/>"#
    ));
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"a": [{"outcome": "ok", "after_ms": 10}],
                      "b": [{"outcome": "ok", "after_ms": 20}],
                      "notify": [{"outcome": "fail", "code": "DOWN", "after_ms": 30}, {"outcome": "ok"}],
                      "notify@2": [{"outcome": "ok", "after_ms": 5}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    assert_eq!(runs_of(&trace, "notify").len(), 2);
    assert_eq!(runs_of(&trace, "notify@2"), vec![(20, 1)]);
    // Two tokens reached the end: BPMN §13.2, the instance completes once both have.
    assert!(last(&trace).tokens().is_empty());
}

#[test]
fn two_tokens_at_one_timer_catch_each_have_their_timer() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
      <parallelGateway id="split"/>
      <sequenceFlow id="f1" sourceRef="split" targetRef="a"/>
      <sequenceFlow id="f2" sourceRef="split" targetRef="wait"/>
      <serviceTask id="a" q:task="a"/>
      <sequenceFlow id="f3" sourceRef="a" targetRef="wait"/>
      <intermediateCatchEvent id="wait"><timerEventDefinition><timeDuration>PT10S</timeDuration></timerEventDefinition></intermediateCatchEvent>
      <sequenceFlow id="f4" sourceRef="wait" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"a": [{"outcome": "ok", "after_ms": 3000}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    let fired: Vec<(i64, String)> = trace
        .steps
        .iter()
        .filter_map(|s| match &s.input {
            Input::TimerFired { name, .. } => Some((s.at_ms, name.as_str().to_owned())),
            _ => None,
        })
        .collect();
    assert_eq!(
        fired,
        [(10_000, "c:wait".into()), (13_000, "c:wait@2".into())]
    );
}

#[test]
fn a_timer_boundary_withdraws_the_undelivered_request_of_the_call_it_interrupts() {
    // C6 as amended: a channel call whose request the outbox cannot deliver yet is
    // interrupted by a timer boundary at 5 s; the request is withdrawn in that step and
    // never delivered afterwards (before, it arrived at 8 s).
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="charge"/>
      <serviceTask id="charge" q:channel="payments"/>
      <boundaryEvent id="late" attachedToRef="charge"><timerEventDefinition><timeDuration>PT5S</timeDuration></timerEventDefinition></boundaryEvent>
      <sequenceFlow id="f1" sourceRef="charge" targetRef="e"/><endEvent id="e"/>
      <sequenceFlow id="f2" sourceRef="late" targetRef="gaveUp"/><endEvent id="gaveUp"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"delivery_curves": {"payments": {"initial_ms": 1000, "multiplier_milli": 3000}},
            "channels": {"charge": [{"answer": "ok", "delivery_fails": 3}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed");
    let withdrawn: Vec<i64> = effects(&trace)
        .into_iter()
        .filter_map(|(at, e)| matches!(e, Effect::WithdrawRequests { .. }).then_some(at))
        .collect();
    assert_eq!(withdrawn, [5000]);
    // Nothing came after the boundary: no answer, no delivery try.
    let after: Vec<&qflow_core::sim::TraceStep> =
        trace.steps.iter().filter(|s| s.at_ms > 5000).collect();
    assert!(after.is_empty(), "{after:?}");
    let end = last(&trace);
    assert!(end.timers().is_empty());
}

#[test]
fn two_tokens_in_one_user_task_are_two_rows_completed_one_by_one() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
      <parallelGateway id="split"/>
      <sequenceFlow id="f1" sourceRef="split" targetRef="ok"/>
      <sequenceFlow id="f2" sourceRef="split" targetRef="ok"/>
      <userTask id="ok"/>
      <sequenceFlow id="f3" sourceRef="ok" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "complete_user_task", "at_ms": 10, "node": "ok@2"},
                       {"event": "complete_user_task", "at_ms": 20, "node": "ok"}]}"#,
    );
    let offered: Vec<String> = effects(&trace)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Effect::OfferUserTask { node, .. } => Some(node),
            _ => None,
        })
        .collect();
    assert_eq!(offered, ["ok", "ok@2"]);
    assert_eq!(trace.summary.status, "completed");
}

#[test]
fn a_name_for_an_instance_that_does_not_exist_is_stale_and_changes_nothing() {
    let def = split_into_one_task();
    let started = step(
        &def,
        "i-1",
        Snapshot::new(),
        Input::Start {
            variables: Default::default(),
            start: None,
        },
        0,
    )
    .unwrap();
    assert_eq!(started.snapshot.tokens(), ["pay", "pay@2"]);
    for node in ["pay@3", "pay@1", "pay@02", "pay@", "s@2", "pay#2"] {
        let input = Input::TaskCompleted {
            node: node.into(),
            attempt: qflow_core::Attempt::FIRST,
            outputs: Default::default(),
        };
        let out = step(&def, "i-1", started.snapshot.clone(), input, 5).unwrap();
        assert!(
            matches!(out.effects.as_slice(), [Effect::Stale { .. }]),
            "{node}: {:?}",
            out.effects
        );
        assert_eq!(out.snapshot.encode(), started.snapshot.encode(), "{node}");
    }
}

#[test]
fn one_sub_process_entered_twice_runs_two_insides_and_a_boundary_ends_one() {
    // Two tokens into one embedded sub-process: two scope instances, `sub` and `sub@2`,
    // each with its own inside (`work`, `sub@2/work`) and its own boundary timer
    // (`b:late`, `b:late@2`). The second run's task fails once and retries within its own
    // run; the first run is slow, so only its boundary fires and ends only it.
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
      <parallelGateway id="split"/>
      <sequenceFlow id="f1" sourceRef="split" targetRef="sub"/>
      <sequenceFlow id="f2" sourceRef="split" targetRef="sub"/>
      <subProcess id="sub">
        <startEvent id="ss"/><sequenceFlow id="g0" sourceRef="ss" targetRef="work"/>
        <serviceTask id="work" q:task="work">{RETRY}</serviceTask>
        <sequenceFlow id="g1" sourceRef="work" targetRef="se"/><endEvent id="se"/>
      </subProcess>
      <boundaryEvent id="late" attachedToRef="sub"><timerEventDefinition><timeDuration>PT10S</timeDuration></timerEventDefinition></boundaryEvent>
      <sequenceFlow id="f3" sourceRef="sub" targetRef="done"/><serviceTask id="done" q:task="done"/>
      <sequenceFlow id="f4" sourceRef="done" targetRef="e"/><endEvent id="e"/>
      <sequenceFlow id="f5" sourceRef="late" targetRef="chase"/><serviceTask id="chase" q:task="chase"/>
      <sequenceFlow id="f6" sourceRef="chase" targetRef="e2"/><endEvent id="e2"/>"#
    ));
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"work": [{"outcome": "ok", "after_ms": 20000}],
                      "sub@2/work": [{"outcome": "fail", "code": "DOWN", "after_ms": 1000},
                                     {"outcome": "ok", "after_ms": 1000}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    let first = Snapshot::decode(&trace.steps[0].snapshot).unwrap();
    assert_eq!(first.tokens(), ["sub", "sub@2", "sub@2/work", "work"]);
    assert!(first.timers().contains_key("b:late") && first.timers().contains_key("b:late@2"));
    // The second run's task retried inside its own run; the first run's was never failed.
    assert_eq!(runs_of(&trace, "sub@2/work").len(), 2);
    assert_eq!(runs_of(&trace, "work"), vec![(0, 1)]);
    let mut rows = history(&trace);
    rows.sort();
    assert!(
        rows.contains(&("work".into(), 1, "interrupted".into())),
        "{rows:?}"
    );
    assert!(rows.contains(&("sub@2/work".into(), 1, "failed".into())));
    assert!(rows.contains(&("sub@2/work".into(), 2, "ok".into())));
    // The second run completed and went on; the boundary ended the first run only.
    assert_eq!(runs_of(&trace, "done").len(), 1);
    assert_eq!(runs_of(&trace, "chase"), vec![(10_000, 1)]);
}

#[test]
fn a_join_inside_one_sub_process_instance_counts_its_own_tokens_only() {
    // Each run splits and joins inside; the runs are at different points, and neither
    // join fires on the other run's arrivals.
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
      <parallelGateway id="split"/>
      <sequenceFlow id="f1" sourceRef="split" targetRef="sub"/>
      <sequenceFlow id="f2" sourceRef="split" targetRef="sub"/>
      <subProcess id="sub">
        <startEvent id="ss"/><sequenceFlow id="g0" sourceRef="ss" targetRef="fork"/>
        <parallelGateway id="fork"/>
        <sequenceFlow id="g1" sourceRef="fork" targetRef="a"/>
        <sequenceFlow id="g2" sourceRef="fork" targetRef="b"/>
        <userTask id="a"/><userTask id="b"/>
        <sequenceFlow id="g3" sourceRef="a" targetRef="join"/>
        <sequenceFlow id="g4" sourceRef="b" targetRef="join"/>
        <parallelGateway id="join"/>
        <sequenceFlow id="g5" sourceRef="join" targetRef="se"/><endEvent id="se"/>
      </subProcess>
      <sequenceFlow id="f3" sourceRef="sub" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "complete_user_task", "at_ms": 10, "node": "a"},
                       {"event": "complete_user_task", "at_ms": 20, "node": "sub@2/b"},
                       {"event": "complete_user_task", "at_ms": 30, "node": "sub@2/a"},
                       {"event": "complete_user_task", "at_ms": 40, "node": "b"}]}"#,
    );
    let at = |i: usize| Snapshot::decode(&trace.steps[i].snapshot).unwrap();
    // After one arrival in each run, each join holds its own.
    assert_eq!(at(2).join_arrivals()["join"], ["g3"]);
    assert_eq!(at(2).join_arrivals()["sub@2/join"], ["g4"]);
    // The second run completes first, then the first.
    assert_eq!(at(3).tokens(), ["b", "sub"]);
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
}

#[test]
fn a_non_interrupting_event_sub_process_triggered_twice_runs_twice_at_once() {
    let def = qflow_core_model_with_message();
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "message", "at_ms": 10, "name": "ping"},
                       {"event": "message", "at_ms": 20, "name": "ping"},
                       {"event": "complete_user_task", "at_ms": 30, "node": "esp@2/answer"},
                       {"event": "complete_user_task", "at_ms": 40, "node": "answer"},
                       {"event": "complete_user_task", "at_ms": 50, "node": "main"}]}"#,
    );
    let at = |i: usize| Snapshot::decode(&trace.steps[i].snapshot).unwrap();
    assert_eq!(
        at(2).tokens(),
        ["answer", "esp", "esp@2", "esp@2/answer", "main"]
    );
    // The second run ends on its own, before the first.
    assert_eq!(at(3).tokens(), ["answer", "esp", "main"]);
    assert_eq!(at(4).tokens(), ["main"]);
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
}

fn qflow_core_model_with_message() -> qflow_core::Definition {
    common::model_with(
        r#"<message id="m" name="ping"/>"#,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="main"/>
      <userTask id="main"/><sequenceFlow id="f1" sourceRef="main" targetRef="e"/><endEvent id="e"/>
      <subProcess id="esp" triggeredByEvent="true">
        <startEvent id="es" isInterrupting="false"><messageEventDefinition messageRef="m"/></startEvent>
        <sequenceFlow id="g0" sourceRef="es" targetRef="answer"/>
        <userTask id="answer"/>
        <sequenceFlow id="g1" sourceRef="answer" targetRef="ee"/><endEvent id="ee"/>
      </subProcess>"#,
    )
}

/// A snapshot as an engine before activity instances wrote it: two tokens under one name.
fn old_snapshot(tokens: &[&str], extra: &[(&str, rmpv::Value)]) -> Snapshot {
    use rmpv::Value;
    let mut entries: Vec<(String, Value)> = vec![
        ("s".into(), Value::from(1)),
        (
            "t".into(),
            Value::Array(tokens.iter().map(|t| Value::from(*t)).collect()),
        ),
        ("v".into(), Value::from(1)),
    ];
    entries.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Snapshot::decode(&common::encode_map(&entries)).expect("decodes")
}

#[test]
fn old_bytes_with_two_tokens_in_one_task_finish_where_each_can_be_answered() {
    // The golden case `inclusive_join_two_tokens_one_flow` before its re-bless: two
    // tokens at `notify`, two handler calls of attempt 1 in flight. Both answers are
    // taken and the instance completes, as it did.
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="notify"/>
      <serviceTask id="notify" q:task="notify"/>
      <sequenceFlow id="f1" sourceRef="notify" targetRef="e"/><endEvent id="e"/>"#,
    );
    let snap = old_snapshot(&["notify", "notify"], &[]);
    let done = |snap| {
        let input = Input::TaskCompleted {
            node: "notify".into(),
            attempt: qflow_core::Attempt::FIRST,
            outputs: Default::default(),
        };
        step(&def, "old-1", snap, input, 10).unwrap()
    };
    let one = done(snap);
    assert_eq!(one.snapshot.status(), Status::Running);
    assert_eq!(one.snapshot.tokens(), ["notify"]);
    let two = done(one.snapshot);
    assert_eq!(two.snapshot.status(), Status::Completed);
}

#[test]
fn a_step_that_leaves_a_token_nothing_can_move_fails_the_instance_stalled() {
    // Old bytes in the shape of the hang this issue was filed for: two tokens at a
    // retrying task, both runs of attempt 1 in flight under one name. The first fails and
    // parks the shared counter, so the second's answer can never be taken: the step
    // fails the instance loudly with STALLED and an incident, instead of leaving it
    // RUNNING for ever.
    let def = split_into_one_task();
    let snap = old_snapshot(&["pay", "pay"], &[]);
    let input = Input::TaskFailed {
        node: "pay".into(),
        attempt: qflow_core::Attempt::FIRST,
        kind: Default::default(),
        code: "DOWN".into(),
        message: String::new(),
    };
    let out = step(&def, "old-2", snap, input, 1000).unwrap();
    let failure = out.snapshot.failure().expect("FAILED");
    assert_eq!(
        (failure.code.as_str(), failure.node.as_deref()),
        ("STALLED", Some("pay"))
    );
    assert!(out.effects.iter().any(|e| matches!(
        e,
        Effect::OpenIncident { code, message, .. }
            if code == "STALLED" && message.contains("task_failed")
    )));
    // A FAILED instance leaves no timer to fire into it: the park is resolved.
    assert!(out.snapshot.timers().is_empty());
}

#[test]
fn a_migration_moves_the_inside_of_a_second_sub_process_instance_with_its_nodes() {
    let twice = |task: &str| {
        model(&format!(
            r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
      <parallelGateway id="split"/>
      <sequenceFlow id="f1" sourceRef="split" targetRef="sub"/>
      <sequenceFlow id="f2" sourceRef="split" targetRef="sub"/>
      <subProcess id="sub">
        <startEvent id="ss"/><sequenceFlow id="g0" sourceRef="ss" targetRef="{task}"/>
        <userTask id="{task}"/><sequenceFlow id="g1" sourceRef="{task}" targetRef="se"/>
        <endEvent id="se"/>
      </subProcess>
      <sequenceFlow id="f3" sourceRef="sub" targetRef="e"/><endEvent id="e"/>"#
        ))
    };
    let (source, target) = (twice("review"), twice("check"));
    let start = Input::Start {
        variables: Default::default(),
        start: None,
    };
    let running = step(&source, "m-1", Snapshot::new(), start, 0)
        .unwrap()
        .snapshot;
    assert_eq!(running.tokens(), ["review", "sub", "sub@2", "sub@2/review"]);
    let migrate = Input::Migrate {
        mapping: [("review".to_owned(), "check".to_owned())].into(),
        timers: Default::default(),
        user_tasks: vec!["review".into(), "sub@2/review".into()],
    };
    let moved = step(&target, "m-1", running, migrate, 5).unwrap();
    assert!(
        !moved
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Stale { .. })),
        "{:?}",
        moved.effects
    );
    assert_eq!(
        moved.snapshot.tokens(),
        ["check", "sub", "sub@2", "sub@2/check"]
    );
}
