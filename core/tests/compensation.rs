//! Compensation in the core (`docs/compensation.md`): what a throw picks up, what an
//! ending scope takes along, a handler that fails, the bound on recorded completions,
//! and the snapshot keys `g` and `z/<handler>`.

mod common;

use common::{encode_map, last, model, run_scenario, runs_of, top_level_map};
use qflow_core::{step, Effect, Input, Snapshot, Status, COMPENSABLE_MAX};

/// A compensation boundary on `host` and its handler, the registered task `handler`
/// (its `q:task` name is its id), linked by an association.
fn undone(host: &str, handler: &str) -> String {
    format!(
        r#"<boundaryEvent id="{host}Undo" attachedToRef="{host}"><compensateEventDefinition/></boundaryEvent>
  <serviceTask id="{handler}" isForCompensation="true" q:task="{handler}"/>
  <association id="{host}ToHandler" sourceRef="{host}Undo" targetRef="{handler}"/>"#
    )
}

/// `book` (undone by `unbook`), then `rest` (the rest of the body), in the process.
fn compensable(rest: &str) -> qflow_core::Definition {
    model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="book"/>
  <serviceTask id="book" q:task="book"/>
  {undo}
  {rest}"#,
        undo = undone("book", "unbook")
    ))
}

#[test]
fn a_failed_handler_fails_the_instance_and_a_resume_finishes_the_compensation() {
    let def = compensable(
        r#"<sequenceFlow id="f1" sourceRef="book" targetRef="undo"/>
  <intermediateThrowEvent id="undo"><compensateEventDefinition/></intermediateThrowEvent>
  <sequenceFlow id="f2" sourceRef="undo" targetRef="after"/>
  <serviceTask id="after" q:task="after"/>
  <sequenceFlow id="f3" sourceRef="after" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{
          "instance": "c-1",
          "tasks": {
            "unbook": [
              { "outcome": "fail", "code": "BANK_DOWN", "message": "503" },
              { "outcome": "ok" }
            ]
          },
          "events": [{ "event": "resume", "at_ms": 60000 }]
        }"#,
    );
    // FAILED at the handler, with the throw still waiting and the run still owed.
    let failed = trace
        .steps
        .iter()
        .find(|s| s.effects.iter().any(|e| matches!(e, Effect::Failed { .. })))
        .expect("the handler's failure fails the instance");
    let snap = Snapshot::decode(&failed.snapshot).unwrap();
    assert_eq!(snap.status(), Status::Failed);
    assert_eq!(snap.failure().unwrap().code, "BANK_DOWN");
    assert_eq!(snap.tokens(), ["unbook", "undo"]);
    assert_eq!(snap.compensations_owed()["unbook"], ["undo"]);
    assert!(runs_of(&trace, "after").iter().all(|(at, _)| *at >= 60000));
    // Resumed: the handler runs again, the throw goes on, nothing of it is left.
    assert_eq!(runs_of(&trace, "unbook"), vec![(0, 1), (60000, 2)]);
    assert_eq!(runs_of(&trace, "after"), vec![(60000, 1)]);
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed);
    assert!(end.compensable().is_empty() && end.compensations_owed().is_empty());
}

#[test]
fn an_interrupted_sub_process_takes_its_compensable_completions_along() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="sp"/>
  <subProcess id="sp">
    <startEvent id="ss"/><sequenceFlow id="g0" sourceRef="ss" targetRef="book"/>
    <serviceTask id="book" q:task="book"/>
    {undo_book}
    <sequenceFlow id="g1" sourceRef="book" targetRef="wait"/>
    <userTask id="wait"/>
    <sequenceFlow id="g2" sourceRef="wait" targetRef="se"/><endEvent id="se"/>
  </subProcess>
  <boundaryEvent id="late" attachedToRef="sp"><timerEventDefinition><timeDuration>PT1H</timeDuration></timerEventDefinition></boundaryEvent>
  <sequenceFlow id="f1" sourceRef="late" targetRef="undo"/>
  <sequenceFlow id="f2" sourceRef="sp" targetRef="undo"/>
  <intermediateThrowEvent id="undo"><compensateEventDefinition/></intermediateThrowEvent>
  <sequenceFlow id="f3" sourceRef="undo" targetRef="e"/><endEvent id="e"/>"#,
        undo_book = undone("book", "unbook"),
    ));
    let trace = run_scenario(&def, r#"{ "instance": "c-2", "horizon_ms": 7200000 }"#);
    let waiting = Snapshot::decode(&trace.steps[1].snapshot).unwrap();
    assert_eq!(waiting.compensable(), ["book"]);
    // The timer interrupts `sp`: what completed inside it can no longer be compensated,
    // so the throw outside finds nothing and goes straight on.
    assert!(runs_of(&trace, "unbook").is_empty());
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed);
    assert!(end.compensable().is_empty());
}

#[test]
fn a_throw_inside_a_sub_process_compensates_only_that_scope() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="outer"/>
  <serviceTask id="outer" q:task="outer"/>
  {undo_outer}
  <sequenceFlow id="f1" sourceRef="outer" targetRef="sp"/>
  <subProcess id="sp">
    <startEvent id="ss"/><sequenceFlow id="g0" sourceRef="ss" targetRef="book"/>
    <serviceTask id="book" q:task="book"/>
    {undo_book}
    <sequenceFlow id="g1" sourceRef="book" targetRef="undo"/>
    <endEvent id="undo"><compensateEventDefinition/></endEvent>
  </subProcess>
  <sequenceFlow id="f2" sourceRef="sp" targetRef="e"/><endEvent id="e"/>"#,
        undo_outer = undone("outer", "unouter"),
        undo_book = undone("book", "unbook"),
    ));
    let trace = run_scenario(
        &def,
        r#"{ "instance": "c-3", "tasks": { "unbook": [{ "outcome": "ok", "after_ms": 500 }] } }"#,
    );
    assert_eq!(runs_of(&trace, "unbook"), vec![(0, 1)]);
    assert!(runs_of(&trace, "unouter").is_empty());
    // `sp` completes only once its compensation end event's handler has ended.
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed);
    assert_eq!(trace.steps.last().unwrap().at_ms, 500);
}

/// `book` (a pass-through, undone by the handler `unbook`, which never runs here) completes `times` times in a loop, then
/// the token waits at a user task.
fn looping(times: usize) -> qflow_core::Definition {
    model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="book"/>
  <task id="book"/>
  {undo}
  <sequenceFlow id="f1" sourceRef="book" targetRef="count"/>
  <scriptTask id="count"><extensionElements><q:script expression="n + 1" resultVariable="n"/></extensionElements></scriptTask>
  <sequenceFlow id="f2" sourceRef="count" targetRef="more"/>
  <exclusiveGateway id="more" default="f4"/>
  <sequenceFlow id="f3" sourceRef="more" targetRef="book"><conditionExpression>n &lt; {times}</conditionExpression></sequenceFlow>
  <sequenceFlow id="f4" sourceRef="more" targetRef="w"/>
  <userTask id="w"/>
  <sequenceFlow id="f5" sourceRef="w" targetRef="e"/><endEvent id="e"/>"#,
        undo = undone("book", "unbook")
    ))
}

#[test]
fn an_activity_entered_past_the_bound_fails_the_instance() {
    let over = looping(COMPENSABLE_MAX + 1);
    let end = last(&run_scenario(
        &over,
        r#"{ "instance": "c-4", "variables": { "n": 0 } }"#,
    ));
    assert_eq!(end.status(), Status::Failed);
    let failure = end.failure().unwrap();
    assert_eq!(failure.code, "COMPENSATION_LIMIT");
    assert_eq!(failure.node.as_deref(), Some("book"));
    assert_eq!(end.compensable().len(), COMPENSABLE_MAX);

    // One completion fewer stays inside the bound.
    let within = looping(COMPENSABLE_MAX);
    let end = last(&run_scenario(
        &within,
        r#"{ "instance": "c-5", "variables": { "n": 0 } }"#,
    ));
    assert_eq!(end.status(), Status::Running);
    assert_eq!(end.tokens(), ["w"]);
    assert_eq!(end.compensable().len(), COMPENSABLE_MAX);
}

#[test]
fn recorded_completions_round_trip_and_migrate_only_where_they_stay_compensable() {
    let def = compensable(
        r#"<sequenceFlow id="f1" sourceRef="book" targetRef="w"/>
  <userTask id="w"/>
  <sequenceFlow id="f4" sourceRef="w" targetRef="undo"/>
  <endEvent id="undo"><compensateEventDefinition/></endEvent>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{
          "instance": "c-6",
          "tasks": { "book": [{ "outcome": "ok", "outputs": { "booked": true } }] }
        }"#,
    );
    let snap = last(&trace);
    assert_eq!(snap.status(), Status::Running);
    assert_eq!(snap.compensable(), ["book"]);
    let bytes = snap.encode();
    assert_eq!(Snapshot::decode(&bytes).unwrap().encode(), bytes);

    // Onto a model where `book` has no compensation boundary: refused, nothing changed.
    let plain = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="book"/>
  <serviceTask id="book" q:task="book"/>
  <sequenceFlow id="f1" sourceRef="book" targetRef="w"/>
  <userTask id="w"/>
  <sequenceFlow id="f4" sourceRef="w" targetRef="e"/><endEvent id="e"/>"#,
    );
    let migrate = || Input::Migrate {
        mapping: Default::default(),
        timers: Default::default(),
        user_tasks: vec!["w".into()],
    };
    let refused = step(&plain, "c-6", snap.clone(), migrate(), 1_000).unwrap();
    assert!(
        matches!(refused.effects.as_slice(), [Effect::Stale { reason }] if reason.contains("no compensation boundary")),
        "{:?}",
        refused.effects
    );
    assert_eq!(refused.snapshot.encode(), bytes);
    // Onto a model where it has one, under another id: the completion moves with it.
    let renamed = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="reserve"/>
  <serviceTask id="reserve" q:task="book"/>
  {undo_reserve}
  <sequenceFlow id="f1" sourceRef="reserve" targetRef="w"/>
  <userTask id="w"/>
  <sequenceFlow id="f4" sourceRef="w" targetRef="undo"/>
  <endEvent id="undo"><compensateEventDefinition/></endEvent>"#,
        undo_reserve = undone("reserve", "unreserve"),
    ));
    let to_reserve = Input::Migrate {
        mapping: [("book".to_owned(), "reserve".to_owned())].into(),
        timers: Default::default(),
        user_tasks: vec!["w".into()],
    };
    let moved = step(&renamed, "c-6", snap.clone(), to_reserve, 1_000).unwrap();
    assert!(
        !moved
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Stale { .. })),
        "{:?}",
        moved.effects
    );
    assert_eq!(moved.snapshot.compensable(), ["reserve"]);

    // The user task completes: the end event runs the handler once and waits for it.
    let done = step(
        &def,
        "c-6",
        snap,
        Input::UserTaskCompleted {
            node: "w".into(),
            variables: Default::default(),
            assignee: None,
        },
        2_000,
    )
    .unwrap();
    assert!(done
        .effects
        .iter()
        .any(|e| matches!(e, Effect::RunTask { node, .. } if node == "unbook")));
    assert_eq!(done.snapshot.tokens(), ["unbook", "undo"]);
    assert_eq!(done.snapshot.compensations_owed()["unbook"], ["undo"]);
    assert!(done.snapshot.compensable().is_empty());
    let bytes = done.snapshot.encode();
    assert_eq!(Snapshot::decode(&bytes).unwrap().encode(), bytes);
}

#[test]
fn two_tokens_waiting_at_one_throw_both_go_on_when_the_last_run_ends() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="fork"/>
  <parallelGateway id="fork"/>
  <sequenceFlow id="f1" sourceRef="fork" targetRef="bookA"/>
  <sequenceFlow id="f2" sourceRef="fork" targetRef="w"/>
  <serviceTask id="bookA" q:task="bookA"/>
  {undo_bookA}
  <userTask id="w"/>
  <sequenceFlow id="f3" sourceRef="w" targetRef="bookB"/>
  <serviceTask id="bookB" q:task="bookB"/>
  {undo_bookB}
  <sequenceFlow id="f4" sourceRef="bookA" targetRef="undo"/>
  <sequenceFlow id="f5" sourceRef="bookB" targetRef="undo"/>
  <intermediateThrowEvent id="undo"><compensateEventDefinition/></intermediateThrowEvent>
  <sequenceFlow id="f6" sourceRef="undo" targetRef="after"/>
  <serviceTask id="after" q:task="after"/>
  <sequenceFlow id="f7" sourceRef="after" targetRef="e"/><endEvent id="e"/>"#,
        undo_bookA = undone("bookA", "unbookA"),
        undo_bookB = undone("bookB", "unbookB"),
    ));
    // The first token takes bookA's completion and waits for unbookA (slow); the second
    // takes bookB's and waits for unbookB, which ends last.
    let trace = run_scenario(
        &def,
        r#"{
          "instance": "c-7",
          "tasks": {
            "unbookA": [{ "outcome": "ok", "after_ms": 3000 }],
            "unbookB": [{ "outcome": "ok", "after_ms": 4000 }]
          },
          "events": [{ "event": "complete_user_task", "at_ms": 1000, "node": "w", "variables": {} }]
        }"#,
    );
    assert_eq!(runs_of(&trace, "unbookA"), vec![(0, 1)]);
    assert_eq!(runs_of(&trace, "unbookB"), vec![(1000, 1)]);
    let both_wait = trace
        .steps
        .iter()
        .map(|s| Snapshot::decode(&s.snapshot).unwrap())
        .any(|s| s.tokens().iter().filter(|t| *t == "undo").count() == 2);
    assert!(both_wait, "two tokens waited at the throw at once");
    // Both go on together when unbookB ends at 5 s: `after` runs once per token, as two
    // activity instances (E9).
    assert_eq!(runs_of(&trace, "after"), vec![(5000, 1)]);
    assert_eq!(runs_of(&trace, "after@2"), vec![(5000, 1)]);
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed);
    assert!(end.tokens().is_empty() && end.compensations_owed().is_empty());
}

#[test]
fn a_compensable_multi_instance_activity_is_compensated_once_as_a_whole() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="ship"/>
  <serviceTask id="ship" q:task="ship">
    <multiInstanceLoopCharacteristics isSequential="true"><loopCardinality>3</loopCardinality></multiInstanceLoopCharacteristics>
  </serviceTask>
  {undo_ship}
  <sequenceFlow id="f1" sourceRef="ship" targetRef="undo"/>
  <endEvent id="undo"><compensateEventDefinition activityRef="ship"/></endEvent>"#,
        undo_ship = undone("ship", "recall"),
    ));
    let trace = run_scenario(&def, r#"{ "instance": "c-8" }"#);
    for k in 1..=3 {
        assert_eq!(runs_of(&trace, &format!("ship#{k}")).len(), 1);
    }
    assert_eq!(runs_of(&trace, "recall").len(), 1);
    assert_eq!(last(&trace).status(), Status::Completed);
}

#[test]
fn a_completion_leaving_over_several_flows_is_recorded_once() {
    let def = compensable(
        r#"<sequenceFlow id="f1" sourceRef="book" targetRef="w"/>
  <sequenceFlow id="f2" sourceRef="book" targetRef="w2"/>
  <userTask id="w"/>
  <sequenceFlow id="f3" sourceRef="w" targetRef="e"/><endEvent id="e"/>
  <userTask id="w2"/>
  <sequenceFlow id="f4" sourceRef="w2" targetRef="e2"/><endEvent id="e2"/>"#,
    );
    let trace = run_scenario(&def, r#"{ "instance": "c-9" }"#);
    let end = last(&trace);
    assert_eq!(end.status(), Status::Running);
    assert_eq!(end.tokens(), ["w", "w2"]);
    assert_eq!(end.compensable(), ["book"]);
}

#[test]
fn a_resume_starts_the_handler_runs_a_failure_in_their_step_dropped() {
    // The throw queues both handlers; the parallel branch's script fails in the same
    // step, before they are entered, and the failure drops the queue: the runs are owed
    // (`z/`) with no token.
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="a"/>
  <serviceTask id="a" q:task="a"/>
  {undo_a}
  <sequenceFlow id="f1" sourceRef="a" targetRef="b"/>
  <serviceTask id="b" q:task="b"/>
  {undo_b}
  <sequenceFlow id="f2" sourceRef="b" targetRef="fork"/>
  <parallelGateway id="fork"/>
  <sequenceFlow id="f3" sourceRef="fork" targetRef="undo"/>
  <sequenceFlow id="f4" sourceRef="fork" targetRef="calc"/>
  <intermediateThrowEvent id="undo"><compensateEventDefinition/></intermediateThrowEvent>
  <sequenceFlow id="f5" sourceRef="undo" targetRef="e1"/><endEvent id="e1"/>
  <scriptTask id="calc"><extensionElements><q:script expression="x + 1" resultVariable="y"/></extensionElements></scriptTask>
  <sequenceFlow id="f6" sourceRef="calc" targetRef="e2"/><endEvent id="e2"/>"#,
        undo_a = undone("a", "unA"),
        undo_b = undone("b", "unB"),
    ));
    let trace = run_scenario(&def, r#"{ "instance": "c-10" }"#);
    let failed = last(&trace);
    assert_eq!(failed.status(), Status::Failed);
    assert_eq!(failed.failure().unwrap().node.as_deref(), Some("calc"));
    assert_eq!(failed.tokens(), ["undo"]);
    assert_eq!(failed.compensations_owed().len(), 2);
    assert!(runs_of(&trace, "unA").is_empty() && runs_of(&trace, "unB").is_empty());

    // An operator supplies `x` (a tampered snapshot stands in for the fix) and resumes.
    let mut view = top_level_map(&failed);
    let vars = view.iter_mut().find(|(k, _)| k == "d");
    match vars {
        Some((_, rmpv::Value::Map(m))) => m.push(("x".into(), 1.into())),
        _ => view.push(("d".into(), rmpv::Value::Map(vec![("x".into(), 1.into())]))),
    }
    let fixed = Snapshot::decode(&encode_map(&view)).unwrap();
    let resumed = step(
        &def,
        "c-10",
        fixed,
        Input::Resume {
            budget: Default::default(),
        },
        1_000,
    )
    .unwrap();
    let started: Vec<&str> = resumed
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::RunTask { node, .. } => Some(node.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(started, ["unA", "unB"]);
    assert_eq!(resumed.snapshot.status(), Status::Running);
    assert_eq!(resumed.snapshot.tokens(), ["unA", "unB", "undo"]);
}

/// `bid`, a multi-instance activity over `characteristics` undone by `withdraw` as a
/// whole, then a user task.
fn bids(characteristics: &str) -> qflow_core::Definition {
    model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="bid"/>
  <serviceTask id="bid" q:task="bid">
    <multiInstanceLoopCharacteristics>{characteristics}</multiInstanceLoopCharacteristics>
  </serviceTask>
  {undo}
  <sequenceFlow id="f1" sourceRef="bid" targetRef="w"/>
  <userTask id="w"/>
  <sequenceFlow id="f2" sourceRef="w" targetRef="e"/><endEvent id="e"/>"#,
        undo = undone("bid", "withdraw")
    ))
}

#[test]
fn a_multi_instance_activity_ended_early_or_empty_is_not_compensated() {
    // Three bids, two needed: the completion condition ends the body with one inner
    // instance interrupted. Not recorded.
    let early = bids(
        "<loopCardinality>3</loopCardinality>\
         <completionCondition>numberOfCompletedInstances >= 2</completionCondition>",
    );
    let trace = run_scenario(
        &early,
        r#"{ "instance": "c-11", "tasks": { "bid": [{ "outcome": "ok", "after_ms": 10 }] } }"#,
    );
    let end = last(&trace);
    assert_eq!(end.tokens(), ["w"]);
    assert!(end.compensable().is_empty(), "{:?}", end.compensable());

    // No inner instance: nothing ran, nothing recorded; every one completed: recorded.
    let all = bids("<loopCardinality>n</loopCardinality>");
    let empty = last(&run_scenario(
        &all,
        r#"{ "instance": "c-12", "variables": { "n": 0 } }"#,
    ));
    assert_eq!(empty.tokens(), ["w"]);
    assert!(empty.compensable().is_empty());
    let full = last(&run_scenario(
        &all,
        r#"{ "instance": "c-13", "variables": { "n": 2 } }"#,
    ));
    assert_eq!(full.tokens(), ["w"]);
    assert_eq!(full.compensable(), ["bid"]);
}

#[test]
fn a_handlers_next_run_numbers_its_attempts_on_so_a_repeated_report_is_stale() {
    let def = compensable(
        r#"<sequenceFlow id="f1" sourceRef="book" targetRef="count"/>
  <scriptTask id="count"><extensionElements><q:script expression="n + 1" resultVariable="n"/></extensionElements></scriptTask>
  <sequenceFlow id="f2" sourceRef="count" targetRef="more"/>
  <exclusiveGateway id="more" default="f4"/>
  <sequenceFlow id="f3" sourceRef="more" targetRef="book"><conditionExpression>n &lt; 2</conditionExpression></sequenceFlow>
  <sequenceFlow id="f4" sourceRef="more" targetRef="undo"/>
  <endEvent id="undo"><compensateEventDefinition/></endEvent>"#,
    );
    // `book` completes twice; the first run of `unbook` answers, the second never does.
    let trace = run_scenario(
        &def,
        r#"{
          "instance": "c-14",
          "variables": { "n": 0 },
          "tasks": { "unbook": [{ "outcome": "ok" }, { "outcome": "hang" }] }
        }"#,
    );
    assert_eq!(runs_of(&trace, "unbook"), vec![(0, 1), (0, 2)]);
    let waiting = last(&trace);
    assert_eq!(waiting.tokens(), ["unbook", "undo"]);
    assert_eq!(waiting.attempt("unbook"), 2);
    assert_eq!(waiting.budget_base("unbook"), 1);
    // The first run's attempt reported again (a re-adopted attempt may report twice)
    // is stale for the second run.
    let repeated = step(
        &def,
        "c-14",
        waiting.clone(),
        Input::TaskCompleted {
            node: "unbook".into(),
            attempt: qflow_core::Attempt::FIRST,
            outputs: Default::default(),
        },
        1_000,
    )
    .unwrap();
    assert!(matches!(
        repeated.effects.as_slice(),
        [Effect::Stale { .. }]
    ));
    let done = step(
        &def,
        "c-14",
        waiting,
        Input::TaskCompleted {
            node: "unbook".into(),
            attempt: qflow_core::Attempt::new(2).unwrap(),
            outputs: Default::default(),
        },
        1_000,
    )
    .unwrap();
    assert_eq!(done.snapshot.status(), Status::Completed);
}
