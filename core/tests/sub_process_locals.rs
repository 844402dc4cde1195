//! Zeebe's `zeebe:ioMapping` on an embedded sub-process (L8, `docs/vendor-mappings.md`,
//! "Sub-processes"): the inputs are locals of each scope instance of the sub-process,
//! seen inside over the outer variables; a write from inside whose name is a local
//! updates the local; the outputs are written to the scope around it as it completes;
//! the locals go with the instance, however it ends. Every case goes through
//! `run_scenario`.

mod common;

use common::{effects, last, model, run_scenario};
use qflow_core::sim::Trace;
use qflow_core::snapshot::Status;
use qflow_core::{step, Budget, Effect, Input, Snapshot};
use serde_json::{json, Value};

const ZEEBE: &str = r#"xmlns:zeebe="http://camunda.org/schema/zeebe/1.0""#;

/// start → the sub-process `sub` (with `io` as its `zeebe:ioMapping` children and
/// `inside` as its content, entered at `in` and left at `out`) → end, with `after` beside.
fn around_sub(io: &str, inside: &str, after: &str) -> qflow_loader::model::Definition {
    model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="sub"/>
      <subProcess id="sub" {ZEEBE}>
        <extensionElements><zeebe:ioMapping>{io}</zeebe:ioMapping></extensionElements>
        <startEvent id="in"/>
        {inside}
        <endEvent id="out"/>
      </subProcess>
      <sequenceFlow id="f1" sourceRef="sub" targetRef="e"/><endEvent id="e"/>
      {after}"#
    ))
}

/// What each handler call of `node` (every instance of it: `t`, `sub@2/t`) was given,
/// by the instance it ran as.
fn inputs_of(trace: &Trace, node: &str) -> Vec<(String, Value)> {
    effects(trace)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Effect::RunTask {
                node: n, inputs, ..
            } if n == node || n.ends_with(&format!("/{node}")) => {
                Some((n, serde_json::to_value(inputs).unwrap()))
            }
            _ => None,
        })
        .collect()
}

fn vars(snap: &Snapshot) -> Value {
    serde_json::to_value(snap.variables()).unwrap()
}

fn locals(snap: &Snapshot) -> Value {
    serde_json::to_value(snap.sub_process_locals()).unwrap()
}

fn completed(trace: &Trace) -> Snapshot {
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    last(trace)
}

#[test]
fn locals_are_seen_inside_over_the_outer_variables_and_never_reach_them() {
    let def = around_sub(
        r#"<zeebe:input source="=order.total" target="amount"/>
           <zeebe:input source="inner" target="who"/>"#,
        r#"<sequenceFlow id="g0" sourceRef="in" targetRef="gw"/>
           <exclusiveGateway id="gw" default="small"/>
           <sequenceFlow id="big" sourceRef="gw" targetRef="t"><conditionExpression>amount &gt; 10 &amp;&amp; who == "inner"</conditionExpression></sequenceFlow>
           <sequenceFlow id="small" sourceRef="gw" targetRef="out"/>
           <serviceTask id="t" q:task="t"/>
           <sequenceFlow id="g1" sourceRef="t" targetRef="out"/>"#,
        "",
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"order": {"total": 12}, "who": "outer"},
            "tasks": {"t": [{"outcome": "ok"}]}}"#,
    );
    // The condition read both locals (the local `who` shadows the outer one), and the
    // job is given every variable with the locals over them.
    assert_eq!(
        inputs_of(&trace, "t"),
        [(
            "t".to_owned(),
            json!({"order": {"total": 12}, "who": "inner", "amount": 12})
        )]
    );
    let end = completed(&trace);
    assert_eq!(vars(&end), json!({"order": {"total": 12}, "who": "outer"}));
    assert_eq!(locals(&end), json!({}));
}

#[test]
fn a_write_from_inside_to_a_local_updates_the_local_and_the_rest_reaches_the_instance() {
    let def = around_sub(
        r#"<zeebe:input source="=0" target="count"/>"#,
        r#"<sequenceFlow id="g0" sourceRef="in" targetRef="t1"/>
           <serviceTask id="t1" q:task="t1"/>
           <sequenceFlow id="g1" sourceRef="t1" targetRef="wait"/>
           <userTask id="wait"/>
           <sequenceFlow id="g2" sourceRef="wait" targetRef="t2"/>
           <serviceTask id="t2" q:task="t2"/>
           <sequenceFlow id="g3" sourceRef="t2" targetRef="out"/>"#,
        "",
    );
    let scenario = r#"{"variables": {"count": 100},
        "tasks": {"t1": [{"outcome": "ok", "outputs": {"count": 1, "seen": true}}],
                  "t2": [{"outcome": "ok"}]}}"#;
    // Waiting inside: the job's `count` went to the local, `seen` to the instance.
    let waiting = last(&run_scenario(&def, scenario));
    assert_eq!(locals(&waiting), json!({"sub": {"count": 1}}));
    assert_eq!(vars(&waiting), json!({"count": 100, "seen": true}));
    let offered = qflow_core::user_task_inputs(&def, &waiting, "wait").unwrap();
    assert_eq!(offered["count"], json!(1));
    // A user task's completion variables propagate the same way.
    let done = run_scenario(
        &def,
        &scenario.replace(
            r#""t2": [{"outcome": "ok"}]}"#,
            r#""t2": [{"outcome": "ok"}]},
               "events": [{"event": "complete_user_task", "at_ms": 10, "node": "wait",
                           "variables": {"count": 2, "note": "n"}}]"#,
        ),
    );
    assert_eq!(inputs_of(&done, "t2")[0].1["count"], json!(2));
    // Without output mappings the locals are discarded with the scope.
    let end = completed(&done);
    assert_eq!(vars(&end), json!({"count": 100, "seen": true, "note": "n"}));
    assert_eq!(locals(&end), json!({}));
}

#[test]
fn outputs_are_evaluated_over_the_locals_and_written_to_the_parent_as_it_completes() {
    let def = around_sub(
        r#"<zeebe:input source="=price" target="total"/>
           <zeebe:output source="=total" target="charged"/>
           <zeebe:output source="=if total &gt; 10 then &quot;big&quot; else &quot;small&quot;" target="size"/>"#,
        r#"<sequenceFlow id="g0" sourceRef="in" targetRef="t"/>
           <serviceTask id="t" q:task="t"/>
           <sequenceFlow id="g1" sourceRef="t" targetRef="out"/>"#,
        "",
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"price": 4},
            "tasks": {"t": [{"outcome": "ok", "outputs": {"total": 40}}]}}"#,
    );
    // The job raised the local `total`; the outputs read it; the local itself is gone.
    let end = completed(&trace);
    assert_eq!(
        vars(&end),
        json!({"price": 4, "charged": 40, "size": "big"})
    );
    assert_eq!(locals(&end), json!({}));
}

#[test]
fn two_instances_of_one_sub_process_keep_their_own_locals() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
      <parallelGateway id="split"/>
      <sequenceFlow id="a" sourceRef="split" targetRef="sub"/>
      <sequenceFlow id="b" sourceRef="split" targetRef="sub"/>
      <subProcess id="sub" {ZEEBE}>
        <extensionElements><zeebe:ioMapping>
          <zeebe:input source="=0" target="n"/>
          <zeebe:output source="=n" target="last"/>
        </zeebe:ioMapping></extensionElements>
        <startEvent id="in"/>
        <sequenceFlow id="g0" sourceRef="in" targetRef="t1"/>
        <serviceTask id="t1" q:task="t1"/>
        <sequenceFlow id="g1" sourceRef="t1" targetRef="t2"/>
        <serviceTask id="t2" q:task="t2"/>
        <sequenceFlow id="g2" sourceRef="t2" targetRef="out"/>
        <endEvent id="out"/>
      </subProcess>
      <sequenceFlow id="f1" sourceRef="sub" targetRef="join"/>
      <parallelGateway id="join"/>
      <sequenceFlow id="f2" sourceRef="join" targetRef="e"/><endEvent id="e"/>"#
    ));
    let scenario = r#"{"tasks": {
        "t1": [{"outcome": "ok", "outputs": {"n": 1}, "after_ms": 10}],
        "sub@2/t1": [{"outcome": "ok", "outputs": {"n": 2}, "after_ms": 20}],
        "t2": [{"outcome": "ok", "after_ms": 100}],
        "sub@2/t2": [{"outcome": "ok", "after_ms": 50}]}}"#;
    let trace = run_scenario(&def, scenario);
    // Each instance's second task sees what its own first task wrote.
    let seen: Vec<(String, Value)> = inputs_of(&trace, "t2")
        .into_iter()
        .map(|(n, v)| (n, v["n"].clone()))
        .collect();
    assert_eq!(
        seen,
        [
            ("t2".to_owned(), json!(1)),
            ("sub@2/t2".to_owned(), json!(2))
        ]
    );
    // While both wait at `t2`, the snapshot holds two sets of locals, one per instance.
    let mid = trace
        .steps
        .iter()
        .filter_map(|s| Snapshot::decode(&s.snapshot).ok())
        .find(|s| {
            s.tokens().iter().any(|t| t == "t2") && s.tokens().iter().any(|t| t == "sub@2/t2")
        })
        .expect("both instances wait at once");
    assert_eq!(locals(&mid), json!({"sub": {"n": 1}, "sub@2": {"n": 2}}));
    // Kept under `l/<instance>`, and read back as written.
    let bytes = mid.encode();
    assert!(bytes.windows(7).any(|w| w == b"l/sub@2"));
    assert_eq!(Snapshot::decode(&bytes).unwrap(), mid);
    // The second instance completed first, the first last: its output wins.
    let end = completed(&trace);
    assert_eq!(vars(&end), json!({"last": 1}));
    assert_eq!(locals(&end), json!({}));
}

#[test]
fn a_multi_instance_sub_process_maps_per_inner_instance() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="sub"/>
      <subProcess id="sub" {ZEEBE}>
        <multiInstanceLoopCharacteristics>
          <extensionElements>
            <zeebe:loopCharacteristics inputCollection="=items" inputElement="item"
                outputCollection="results" outputElement="=shipped"/>
          </extensionElements>
        </multiInstanceLoopCharacteristics>
        <extensionElements><zeebe:ioMapping>
          <zeebe:input source="=item" target="sku"/>
          <zeebe:output source="=sku + &quot;-done&quot;" target="shipped"/>
        </zeebe:ioMapping></extensionElements>
        <startEvent id="in"/>
        <sequenceFlow id="g0" sourceRef="in" targetRef="t"/>
        <serviceTask id="t" q:task="t"/>
        <sequenceFlow id="g1" sourceRef="t" targetRef="out"/>
        <endEvent id="out"/>
      </subProcess>
      <sequenceFlow id="f1" sourceRef="sub" targetRef="e"/><endEvent id="e"/>"#
    ));
    let trace = run_scenario(
        &def,
        r#"{"variables": {"items": ["a", "b"]},
            "tasks": {"t#1": [{"outcome": "ok", "outputs": {"sku": "A"}, "after_ms": 20}],
                      "t#2": [{"outcome": "ok", "after_ms": 10}]}}"#,
    );
    let given: Vec<(String, Value)> = effects(&trace)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Effect::RunTask { node, inputs, .. } => {
                Some((node, serde_json::to_value(inputs).unwrap()["sku"].clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        given,
        [
            ("t#1".to_owned(), json!("a")),
            ("t#2".to_owned(), json!("b"))
        ]
    );
    // Each inner instance's output is written in its own scope, where its output
    // element reads it (Zeebe: "output mappings can be used to update the
    // outputElement variable before it's collected"); nothing else reaches the instance.
    let end = completed(&trace);
    assert_eq!(
        vars(&end),
        json!({"items": ["a", "b"], "results": ["A-done", "b-done"]})
    );
    assert_eq!(locals(&end), json!({}));
}

#[test]
fn an_interrupting_boundary_ends_the_instance_with_its_locals_and_no_outputs() {
    let def = around_sub(
        r#"<zeebe:input source="=limit" target="left"/>
           <zeebe:output source="=left" target="leftOver"/>"#,
        r#"<sequenceFlow id="g0" sourceRef="in" targetRef="wait"/>
           <userTask id="wait"/>
           <sequenceFlow id="g1" sourceRef="wait" targetRef="out"/>"#,
        // The timer reads the local: Zeebe arms an activity's boundaries in its scope,
        // after its input mappings.
        r#"<boundaryEvent id="late" attachedToRef="sub">
             <timerEventDefinition><timeDuration>=left</timeDuration></timerEventDefinition>
           </boundaryEvent>
           <sequenceFlow id="f9" sourceRef="late" targetRef="chased"/><endEvent id="chased"/>"#,
    );
    let waiting = last(&run_scenario(
        &def,
        r#"{"variables": {"limit": "PT30S"}, "horizon_ms": 1000}"#,
    ));
    assert_eq!(locals(&waiting), json!({"sub": {"left": "PT30S"}}));
    let trace = run_scenario(&def, r#"{"variables": {"limit": "PT30S"}}"#);
    let fired = trace
        .steps
        .iter()
        .find(|s| s.node.as_deref() == Some("late"))
        .expect("the boundary fired");
    assert_eq!(fired.at_ms, 30_000);
    let end = completed(&trace);
    assert_eq!(vars(&end), json!({"limit": "PT30S"}));
    assert_eq!(locals(&end), json!({}));
}

#[test]
fn nested_sub_processes_propagate_to_the_nearest_holder() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="outer"/>
      <subProcess id="outer" {ZEEBE}>
        <extensionElements><zeebe:ioMapping>
          <zeebe:input source="=1" target="a"/>
          <zeebe:input source="=1" target="b"/>
          <zeebe:output source="=a + b" target="sum"/>
        </zeebe:ioMapping></extensionElements>
        <startEvent id="os"/><sequenceFlow id="o0" sourceRef="os" targetRef="inner"/>
        <subProcess id="inner">
          <extensionElements><zeebe:ioMapping>
            <zeebe:input source="=10" target="b"/>
          </zeebe:ioMapping></extensionElements>
          <startEvent id="is"/><sequenceFlow id="i0" sourceRef="is" targetRef="t"/>
          <serviceTask id="t" q:task="t"/>
          <sequenceFlow id="i1" sourceRef="t" targetRef="ie"/><endEvent id="ie"/>
        </subProcess>
        <sequenceFlow id="o1" sourceRef="inner" targetRef="oe"/><endEvent id="oe"/>
      </subProcess>
      <sequenceFlow id="f1" sourceRef="outer" targetRef="e"/><endEvent id="e"/>"#
    ));
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"t": [{"outcome": "ok", "outputs": {"a": 5, "b": 7, "c": 9}}]}}"#,
    );
    // `a` is the outer instance's local, `b` the inner's (which covers the outer `b`),
    // `c` nobody's: the outer output sees a = 5 and its own b = 1.
    assert_eq!(inputs_of(&trace, "t")[0].1, json!({"a": 1, "b": 10}));
    let end = completed(&trace);
    assert_eq!(vars(&end), json!({"c": 9, "sum": 6}));
}

#[test]
fn a_failing_input_fails_the_instance_at_the_sub_process_and_a_resume_enters_it_again() {
    let def = around_sub(
        r#"<zeebe:input source="=order.total" target="amount"/>
           <zeebe:output source="=amount" target="charged"/>"#,
        r#"<sequenceFlow id="g0" sourceRef="in" targetRef="out"/>"#,
        "",
    );
    let start = Input::Start {
        variables: serde_json::from_value(json!({"order": {}})).unwrap(),
        start: None,
    };
    let failed = step(&def, "i", Snapshot::default(), start, 0)
        .unwrap()
        .snapshot;
    assert_eq!(failed.status(), Status::Failed);
    let failure = failed.failure().expect("failed");
    assert_eq!(
        (failure.code.as_str(), failure.node.as_deref()),
        ("EXPRESSION_FAILED", Some("sub"))
    );
    assert_eq!(locals(&failed), json!({}));
    assert!(failed.tokens().is_empty(), "{:?}", failed.tokens());
    // Migrated onto a version whose input evaluates, the resume enters it afresh.
    let fixed = around_sub(
        r#"<zeebe:input source="=7" target="amount"/>
           <zeebe:output source="=amount" target="charged"/>"#,
        r#"<sequenceFlow id="g0" sourceRef="in" targetRef="out"/>"#,
        "",
    );
    let migrate = Input::Migrate {
        mapping: Default::default(),
        timers: Default::default(),
        user_tasks: Vec::new(),
    };
    let moved = step(&fixed, "i", failed, migrate, 1).unwrap().snapshot;
    let resume = Input::Resume {
        budget: Budget::Keep,
    };
    let done = step(&fixed, "i", moved, resume, 2).unwrap().snapshot;
    assert_eq!(done.status(), Status::Completed);
    assert_eq!(vars(&done), json!({"order": {}, "charged": 7}));
    assert_eq!(locals(&done), json!({}));
}

#[test]
fn a_failing_output_keeps_the_token_and_the_locals_for_the_resume() {
    let def = around_sub(
        r#"<zeebe:input source="=1" target="n"/>
           <zeebe:output source="=missing" target="charged"/>"#,
        r#"<sequenceFlow id="g0" sourceRef="in" targetRef="out"/>"#,
        "",
    );
    let trace = run_scenario(&def, "{}");
    assert_eq!(trace.summary.status, "failed");
    assert_eq!(trace.summary.failure_node.as_deref(), Some("sub"));
    let failed = last(&trace);
    assert_eq!(failed.tokens(), ["sub"]);
    assert_eq!(locals(&failed), json!({"sub": {"n": 1}}));
}

#[test]
fn a_message_caught_inside_sets_a_local_of_its_name_and_cancel_drops_every_local() {
    let def = model_with_message(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="sub"/>
      <subProcess id="sub" {ZEEBE}>
        <extensionElements><zeebe:ioMapping>
          <zeebe:input source="=&quot;open&quot;" target="state"/>
          <zeebe:output source="=state" target="finalState"/>
        </zeebe:ioMapping></extensionElements>
        <startEvent id="in"/><sequenceFlow id="g0" sourceRef="in" targetRef="m"/>
        <intermediateCatchEvent id="m"><messageEventDefinition messageRef="msg"/></intermediateCatchEvent>
        <sequenceFlow id="g1" sourceRef="m" targetRef="wait"/>
        <userTask id="wait"/>
        <sequenceFlow id="g2" sourceRef="wait" targetRef="out"/><endEvent id="out"/>
      </subProcess>
      <sequenceFlow id="f1" sourceRef="sub" targetRef="e"/><endEvent id="e"/>"#
    ));
    let caught = r#"{"event": "message", "at_ms": 5, "name": "paid", "variables": {"state": "paid", "by": "ann"}}"#;
    let waiting = last(&run_scenario(&def, &format!(r#"{{"events": [{caught}]}}"#)));
    assert_eq!(locals(&waiting), json!({"sub": {"state": "paid"}}));
    assert_eq!(vars(&waiting), json!({"by": "ann"}));
    let done = run_scenario(
        &def,
        &format!(
            r#"{{"events": [{caught},
                {{"event": "complete_user_task", "at_ms": 9, "node": "wait", "variables": {{}}}}]}}"#
        ),
    );
    assert_eq!(
        vars(&completed(&done)),
        json!({"by": "ann", "finalState": "paid"})
    );
    let cancelled = run_scenario(
        &def,
        &format!(r#"{{"events": [{caught}, {{"event": "cancel", "at_ms": 9}}]}}"#),
    );
    assert_eq!(cancelled.summary.status, "cancelled");
    assert_eq!(locals(&last(&cancelled)), json!({}));
}

fn model_with_message(body: &str) -> qflow_loader::model::Definition {
    common::model_with(r#"<message id="msg" name="paid"/>"#, body)
}

/// A migration moves an instance's locals with its name, the target's mappings apply
/// from its completion on; a mapping onto something that is no sub-process is refused.
#[test]
fn a_migration_moves_the_locals_with_their_instance() {
    let source = around_sub(
        r#"<zeebe:input source="=3" target="n"/>"#,
        r#"<sequenceFlow id="g0" sourceRef="in" targetRef="wait"/>
           <userTask id="wait"/>
           <sequenceFlow id="g1" sourceRef="wait" targetRef="out"/>"#,
        "",
    );
    let start = Input::Start {
        variables: Default::default(),
        start: None,
    };
    let waiting = step(&source, "i", Snapshot::default(), start, 0)
        .unwrap()
        .snapshot;
    let renamed = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="pack"/>
      <subProcess id="pack" {ZEEBE}>
        <extensionElements><zeebe:ioMapping>
          <zeebe:input source="=3" target="n"/>
          <zeebe:output source="=n" target="kept"/>
        </zeebe:ioMapping></extensionElements>
        <startEvent id="in"/><sequenceFlow id="g0" sourceRef="in" targetRef="wait"/>
        <userTask id="wait"/>
        <sequenceFlow id="g1" sourceRef="wait" targetRef="out"/><endEvent id="out"/>
      </subProcess>
      <sequenceFlow id="f1" sourceRef="pack" targetRef="e"/><endEvent id="e"/>"#
    ));
    let migrate = |mapping: &[(&str, &str)]| Input::Migrate {
        mapping: mapping
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect(),
        timers: Default::default(),
        user_tasks: vec!["wait".to_owned()],
    };
    let moved = step(
        &renamed,
        "i",
        waiting.clone(),
        migrate(&[("sub", "pack")]),
        1,
    )
    .unwrap()
    .snapshot;
    assert_eq!(locals(&moved), json!({"pack": {"n": 3}}));
    let done = Input::UserTaskCompleted {
        node: "wait".to_owned(),
        variables: serde_json::from_value(json!({"n": 4})).unwrap(),
        assignee: None,
    };
    let end = step(&renamed, "i", moved, done, 2).unwrap().snapshot;
    assert_eq!(end.status(), Status::Completed);
    assert_eq!(vars(&end), json!({"kept": 4}));
    // Onto a user task, the locals would have no sub-process to end with.
    let flat = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="sub"/>
      <userTask id="sub"/>
      <sequenceFlow id="f1" sourceRef="sub" targetRef="wait"/><userTask id="wait"/>
      <sequenceFlow id="f2" sourceRef="wait" targetRef="e"/><endEvent id="e"/>"#,
    );
    let refused = step(&flat, "i", waiting, migrate(&[]), 1).unwrap();
    let reason = refused
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::Stale { reason } => Some(reason.clone()),
            _ => None,
        })
        .expect("the migration is refused");
    assert!(reason.contains("holds local variables"), "{reason}");
}

/// Camunda 7's `camunda:inputOutput` on an embedded sub-process: the input parameters are
/// local variables of the sub-process's scope, each evaluated over the variables around
/// it; a write from inside to such a name stays local; the output parameters are
/// evaluated over the scope as it completes and set around it; the locals go.
#[test]
fn camunda_input_output_on_a_sub_process_maps_its_scope() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="sub"/>
      <subProcess id="sub" xmlns:camunda="http://camunda.org/schema/1.0/bpmn">
        <extensionElements><camunda:inputOutput>
          <camunda:inputParameter name="amount">${order.total}</camunda:inputParameter>
          <camunda:inputParameter name="label">Order ${order.id}</camunda:inputParameter>
          <camunda:outputParameter name="charged">${amount}</camunda:outputParameter>
        </camunda:inputOutput></extensionElements>
        <startEvent id="in"/>
        <sequenceFlow id="g0" sourceRef="in" targetRef="t"/>
        <serviceTask id="t" q:task="t"/>
        <sequenceFlow id="g1" sourceRef="t" targetRef="out"/>
        <endEvent id="out"/>
      </subProcess>
      <sequenceFlow id="f1" sourceRef="sub" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"order": {"total": 12, "id": "A-7"}},
            "tasks": {"t": [{"outcome": "ok", "outputs": {"amount": 15, "done": true}}]}}"#,
    );
    assert_eq!(
        inputs_of(&trace, "t"),
        [(
            "t".to_owned(),
            json!({"order": {"total": 12, "id": "A-7"}, "amount": 12, "label": "Order A-7"})
        )]
    );
    // `amount` was written inside to the local (15), read by the output; `done` went out.
    let end = completed(&trace);
    assert_eq!(
        vars(&end),
        json!({"order": {"total": 12, "id": "A-7"}, "done": true, "charged": 15})
    );
    assert_eq!(locals(&end), json!({}));
}
