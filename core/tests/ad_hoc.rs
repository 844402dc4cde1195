//! Ad-hoc sub-processes as Camunda 8 runs their BPMN implementation
//! (`docs/ad-hoc-sub-processes.md`): the active elements collection activates elements
//! on entry; each ended path evaluates the completion condition; a true one completes
//! the sub-process, cancelling what is still active unless `cancelRemainingInstances`
//! is false; without a condition it completes once nothing inside is active; with
//! nothing active and nothing that could end it, the instance fails `AD_HOC_IDLE`.
//! Every case goes through `run_scenario`.

mod common;

use common::{effects, last, model, run_scenario};
use qflow_core::sim::Trace;
use qflow_core::{Effect, Snapshot};
use serde_json::{json, Value};

const ZEEBE: &str = r#"xmlns:zeebe="http://camunda.org/schema/zeebe/1.0""#;

/// start → the ad-hoc sub-process `adhoc` (attributes `attrs`, `extensions` inside its
/// `extensionElements`, content `inside`) → `after` → end.
fn around_ad_hoc(attrs: &str, extensions: &str, inside: &str) -> qflow_loader::model::Definition {
    model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="adhoc"/>
      <adHocSubProcess id="adhoc" {ZEEBE} {attrs}>
        <extensionElements>{extensions}</extensionElements>
        {inside}
      </adHocSubProcess>
      <sequenceFlow id="f1" sourceRef="adhoc" targetRef="after"/>
      <serviceTask id="after" q:task="after"/>
      <sequenceFlow id="f2" sourceRef="after" targetRef="e"/><endEvent id="e"/>"#
    ))
}

const COLLECTION: &str = r#"<zeebe:adHoc activeElementsCollection="=toDo"/>"#;

/// Three registered tasks `a`, `b`, `c` without flows.
const THREE_TASKS: &str = r#"<serviceTask id="a" q:task="a"/><serviceTask id="b" q:task="b"/><serviceTask id="c" q:task="c"/>"#;

/// Every handler call, by the instance it ran as, in order.
fn runs(trace: &Trace) -> Vec<String> {
    effects(trace)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Effect::RunTask { node, .. } => Some(node),
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

fn failed_with(trace: &Trace, code: &str, node: &str) {
    assert_eq!(trace.summary.status, "failed", "{:?}", trace.summary);
    assert_eq!(trace.summary.failure_code.as_deref(), Some(code));
    assert_eq!(trace.summary.failure_node.as_deref(), Some(node));
}

/// The first snapshot of the run in which `pred` holds.
fn first_where(trace: &Trace, pred: impl Fn(&Snapshot) -> bool) -> Snapshot {
    trace
        .steps
        .iter()
        .filter_map(|s| Snapshot::decode(&s.snapshot).ok())
        .find(|s| pred(s))
        .expect("a step where it holds")
}

fn tokens(snap: &Snapshot) -> Vec<&str> {
    snap.tokens().iter().map(String::as_str).collect()
}

#[test]
fn the_collection_activates_its_elements_in_order_and_the_last_path_completes_it() {
    let def = around_ad_hoc("", COLLECTION, THREE_TASKS);
    let trace = run_scenario(
        &def,
        r#"{"variables": {"toDo": ["c", "a"]},
            "tasks": {"c": [{"outcome": "ok", "after_ms": 10}],
                      "a": [{"outcome": "ok", "after_ms": 30}],
                      "after": [{"outcome": "ok"}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    // `b` is never activated; `after` runs only once both paths have ended.
    assert_eq!(runs(&trace), ["c", "a", "after"]);
    let waiting = first_where(&trace, |s| {
        tokens(s).contains(&"a") && !tokens(s).contains(&"c")
    });
    assert_eq!(tokens(&waiting), ["a", "adhoc"]);
}

#[test]
fn an_id_named_twice_runs_two_instances_and_a_chain_ends_its_path_at_its_last_element() {
    let def = around_ad_hoc(
        "",
        COLLECTION,
        r#"<serviceTask id="a" q:task="a"/>
           <sequenceFlow id="ab" sourceRef="a" targetRef="b"/>
           <serviceTask id="b" q:task="b"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"toDo": ["a", "a"]},
            "tasks": {"a": [{"outcome": "ok", "after_ms": 10}], "b": [{"outcome": "ok", "after_ms": 10}],
                      "after": [{"outcome": "ok"}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    assert_eq!(runs(&trace), ["a", "a@2", "b", "b@2", "after"]);
}

#[test]
fn a_true_completion_condition_cancels_what_is_still_active() {
    let def = around_ad_hoc(
        "",
        COLLECTION,
        &format!(
            r#"{THREE_TASKS}<userTask id="review"/>
               <completionCondition>=done = true</completionCondition>"#
        ),
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"toDo": ["review", "a"], "done": false},
            "tasks": {"a": [{"outcome": "ok", "outputs": {"done": true}, "after_ms": 10}],
                      "after": [{"outcome": "ok"}]}}"#,
    );
    // `a` ended a path with `done` true: the waiting review is cancelled (its task-list
    // row withdrawn) and the sub-process completes at once (cancelRemainingInstances
    // defaults to true).
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    assert_eq!(runs(&trace), ["a", "after"]);
    assert!(effects(&trace)
        .iter()
        .any(|(at, e)| *at == 10
            && matches!(e, Effect::WithdrawUserTask { node } if node == "review")));
}

#[test]
fn without_cancel_remaining_a_true_condition_waits_for_the_active_elements() {
    let def = around_ad_hoc(
        r#"cancelRemainingInstances="false""#,
        COLLECTION,
        &format!(
            r#"{THREE_TASKS}<userTask id="review"/>
               <completionCondition>=done = true</completionCondition>"#
        ),
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"toDo": ["review", "a"], "done": false},
            "tasks": {"a": [{"outcome": "ok", "outputs": {"done": true}, "after_ms": 10}],
                      "after": [{"outcome": "ok"}]},
            "events": [{"event": "complete_user_task", "at_ms": 500, "node": "review"}]}"#,
    );
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    // The condition held after `a`, but the review was still active: the sub-process
    // waited for it, then completed as its path ended (the condition still true).
    let after: Vec<i64> = effects(&trace)
        .into_iter()
        .filter(|(_, e)| matches!(e, Effect::RunTask { node, .. } if node == "after"))
        .map(|(at, _)| at)
        .collect();
    assert_eq!(after, [500]);
}

#[test]
fn a_false_condition_with_nothing_active_fails_ad_hoc_idle() {
    let def = around_ad_hoc(
        "",
        COLLECTION,
        &format!(r#"{THREE_TASKS}<completionCondition>=done = true</completionCondition>"#),
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"toDo": ["a"], "done": false},
            "tasks": {"a": [{"outcome": "ok", "after_ms": 10}]}}"#,
    );
    // Zeebe would leave it waiting for an activation through its API; qflow has none,
    // so the instance fails at the sub-process, kept for repair, instead of hanging.
    failed_with(&trace, "AD_HOC_IDLE", "adhoc");
    assert_eq!(tokens(&last(&trace)), ["adhoc"]);
}

#[test]
fn an_empty_activation_waits_for_a_boundary_and_fails_ad_hoc_idle_without_one() {
    // No collection: nothing is activated, and nothing could end the sub-process.
    let def = around_ad_hoc("", "", THREE_TASKS);
    let trace = run_scenario(&def, r#"{}"#);
    failed_with(&trace, "AD_HOC_IDLE", "adhoc");
    assert_eq!(trace.summary.steps, 1);

    // With a timer boundary it is a wait, as in Zeebe, until the timer ends it.
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="adhoc"/>
      <adHocSubProcess id="adhoc" {ZEEBE}>
        <extensionElements>{COLLECTION}</extensionElements>
        {THREE_TASKS}
      </adHocSubProcess>
      <sequenceFlow id="f1" sourceRef="adhoc" targetRef="e"/><endEvent id="e"/>
      <boundaryEvent id="late" attachedToRef="adhoc">
        <timerEventDefinition><timeDuration>PT1M</timeDuration></timerEventDefinition>
      </boundaryEvent>
      <sequenceFlow id="f2" sourceRef="late" targetRef="expired"/><endEvent id="expired"/>"#
    ));
    let trace = run_scenario(&def, r#"{"variables": {"toDo": []}}"#);
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    assert_eq!(trace.summary.ended_at_ms, 60_000);
    assert!(runs(&trace).is_empty());
}

#[test]
fn an_idle_ad_hoc_sub_process_beside_live_work_waits_until_that_work_is_done() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
      <parallelGateway id="split"/>
      <sequenceFlow id="fa" sourceRef="split" targetRef="adhoc"/>
      <sequenceFlow id="fb" sourceRef="split" targetRef="approve"/>
      <adHocSubProcess id="adhoc" {ZEEBE}>{THREE_TASKS}</adHocSubProcess>
      <userTask id="approve"/>
      <sequenceFlow id="f1" sourceRef="adhoc" targetRef="e"/><endEvent id="e"/>
      <sequenceFlow id="f2" sourceRef="approve" targetRef="e2"/><endEvent id="e2"/>"#
    ));
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "complete_user_task", "at_ms": 100, "node": "approve"}]}"#,
    );
    // While the user task could still lead anywhere, the idle sub-process is a wait.
    let first = Snapshot::decode(&trace.steps[0].snapshot).unwrap();
    assert_eq!(tokens(&first), ["adhoc", "approve"]);
    // Once it is done, nothing is left that could move the sub-process.
    failed_with(&trace, "AD_HOC_IDLE", "adhoc");
    assert_eq!(trace.summary.ended_at_ms, 100);
}

#[test]
fn an_interrupting_boundary_ends_the_ad_hoc_sub_process_and_its_active_elements() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="adhoc"/>
      <adHocSubProcess id="adhoc" {ZEEBE}>
        <extensionElements>{COLLECTION}
          <zeebe:ioMapping><zeebe:input source="=1" target="local"/></zeebe:ioMapping>
        </extensionElements>
        <userTask id="review"/>
        <serviceTask id="a" q:task="a"/>
      </adHocSubProcess>
      <sequenceFlow id="f1" sourceRef="adhoc" targetRef="e"/><endEvent id="e"/>
      <boundaryEvent id="late" attachedToRef="adhoc">
        <timerEventDefinition><timeDuration>PT1M</timeDuration></timerEventDefinition>
      </boundaryEvent>
      <sequenceFlow id="f2" sourceRef="late" targetRef="expired"/>
      <serviceTask id="expired" q:task="expired"/>
      <sequenceFlow id="f3" sourceRef="expired" targetRef="e2"/><endEvent id="e2"/>"#
    ));
    let trace = run_scenario(
        &def,
        r#"{"variables": {"toDo": ["review", "a"]},
            "tasks": {"a": [{"outcome": "ok", "after_ms": 10}], "expired": [{"outcome": "ok"}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    assert_eq!(runs(&trace), ["a", "expired"]);
    let waiting = first_where(&trace, |s| tokens(s) == ["adhoc", "review"]);
    assert_eq!(locals(&waiting), json!({"adhoc": {"local": 1}}));
    assert!(effects(&trace).iter().any(|(at, e)| *at == 60_000
        && matches!(e, Effect::WithdrawUserTask { node } if node == "review")));
    assert_eq!(locals(&last(&trace)), json!({}));
}

#[test]
fn two_instances_at_once_keep_their_own_elements_locals_and_verdicts() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
      <parallelGateway id="split"/>
      <sequenceFlow id="x" sourceRef="split" targetRef="adhoc"/>
      <sequenceFlow id="y" sourceRef="split" targetRef="adhoc"/>
      <adHocSubProcess id="adhoc" {ZEEBE}>
        <extensionElements>
          <zeebe:adHoc activeElementsCollection="=[&quot;a&quot;, &quot;review&quot;]"/>
          <zeebe:ioMapping>
            <zeebe:input source="=0" target="count"/>
            <zeebe:output source="=count" target="total"/>
          </zeebe:ioMapping>
        </extensionElements>
        <serviceTask id="a" q:task="a"/>
        <userTask id="review"/>
        <completionCondition>=count &gt;= 1</completionCondition>
      </adHocSubProcess>
      <sequenceFlow id="f1" sourceRef="adhoc" targetRef="join"/>
      <parallelGateway id="join"/>
      <sequenceFlow id="f2" sourceRef="join" targetRef="e"/><endEvent id="e"/>"#
    ));
    let trace = run_scenario(
        &def,
        r#"{"tasks": {"a": [{"outcome": "ok", "outputs": {"count": 1}, "after_ms": 10}],
                      "adhoc@2/a": [{"outcome": "ok", "outputs": {"count": 0}, "after_ms": 20}]},
            "events": [{"event": "complete_user_task", "at_ms": 100, "node": "adhoc@2/review",
                        "variables": {"count": 7}}]}"#,
    );
    assert_eq!(runs(&trace), ["a", "adhoc@2/a"]);
    // The first instance's condition held: its review was cancelled and it completed;
    // the second's did not, so it waits on its own review, its locals its own.
    let mid = first_where(&trace, |s| {
        tokens(s) == ["adhoc@2", "adhoc@2/review"] && s.sub_process_locals().len() == 1
    });
    assert_eq!(locals(&mid), json!({"adhoc@2": {"count": 0}}));
    assert_eq!(vars(&mid), json!({"total": 1}));
    // The review's variables went to the local it holds; the condition then held.
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    let end = last(&trace);
    assert_eq!(vars(&end), json!({"total": 7}));
    assert_eq!(locals(&end), json!({}));
}

#[test]
fn input_mappings_make_the_locals_the_collection_and_condition_read() {
    let def = around_ad_hoc(
        "",
        r#"<zeebe:adHoc activeElementsCollection="=plan.steps"/>
           <zeebe:ioMapping>
             <zeebe:input source="=order" target="plan"/>
             <zeebe:input source="=0" target="handled"/>
             <zeebe:output source="=handled" target="handledCount"/>
           </zeebe:ioMapping>"#,
        &format!(r#"{THREE_TASKS}<completionCondition>=handled = 2</completionCondition>"#),
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"order": {"steps": ["a", "b", "c"]}},
            "tasks": {"a": [{"outcome": "ok", "outputs": {"handled": 1}, "after_ms": 10}],
                      "b": [{"outcome": "ok", "outputs": {"handled": 2}, "after_ms": 20}],
                      "c": [{"outcome": "ok", "after_ms": 30}],
                      "after": [{"outcome": "ok"}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    // `b` made the condition true: `c`, still running, was cancelled (its call
    // reported interrupted), and the output carried the local out.
    assert_eq!(runs(&trace), ["a", "b", "c", "after"]);
    let end = last(&trace);
    assert_eq!(
        vars(&end),
        json!({"order": {"steps": ["a", "b", "c"]}, "handledCount": 2})
    );
    assert_eq!(locals(&end), json!({}));
}

#[test]
fn a_collection_that_is_not_a_list_of_its_element_ids_fails_before_the_token_enters() {
    let def = around_ad_hoc("", COLLECTION, THREE_TASKS);
    for (value, says) in [
        (json!(["a", "nope", "s"]), "'nope', 's'"),
        (json!("a"), "not a list"),
        (json!([1]), "not an element id"),
        (json!(null), "not a list"),
    ] {
        let scenario = json!({"variables": {"toDo": value}}).to_string();
        let trace = run_scenario(&def, &scenario);
        failed_with(&trace, "EXPRESSION_FAILED", "adhoc");
        let end = last(&trace);
        assert!(end.tokens().is_empty(), "{:?}", end.tokens());
        let incident = effects(&trace).into_iter().find_map(|(_, e)| match e {
            Effect::OpenIncident { message, .. } => Some(message),
            _ => None,
        });
        let message = incident.expect("an incident");
        assert!(message.contains(says), "{says}: {message}");
    }
}

#[test]
fn a_completion_condition_that_fails_is_evaluated_again_on_resume() {
    let def = around_ad_hoc(
        "",
        COLLECTION,
        &format!(r#"{THREE_TASKS}<completionCondition>=done = true</completionCondition>"#),
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"toDo": ["a"]},
            "tasks": {"a": [{"outcome": "ok", "after_ms": 10}]}}"#,
    );
    // `done` is missing: the condition fails (CEL), the instance fails at the
    // sub-process, which keeps its token.
    failed_with(&trace, "EXPRESSION_FAILED", "adhoc");
    let failed = last(&trace);
    assert_eq!(tokens(&failed), ["adhoc"]);
    // A resume judges the ended path again; with `done` still missing it fails again,
    // never silently completing.
    let def2 = def.clone();
    let step = qflow_core::step(
        &def2,
        "i",
        failed.clone(),
        qflow_core::Input::Resume {
            budget: qflow_core::Budget::Keep,
        },
        20,
    )
    .unwrap();
    let failure = step.snapshot.failure().unwrap();
    assert_eq!(failure.code, "EXPRESSION_FAILED");
    assert_eq!(failure.node.as_deref(), Some("adhoc"));
}

#[test]
fn a_multi_instance_ad_hoc_sub_process_runs_each_inner_instance_on_its_own() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="adhoc"/>
      <adHocSubProcess id="adhoc" {ZEEBE}>
        <multiInstanceLoopCharacteristics>
          <extensionElements>
            <zeebe:loopCharacteristics inputCollection="=plans" inputElement="plan"/>
          </extensionElements>
        </multiInstanceLoopCharacteristics>
        <extensionElements><zeebe:adHoc activeElementsCollection="=plan"/></extensionElements>
        <serviceTask id="a" q:task="a"/>
        <serviceTask id="b" q:task="b"/>
        <userTask id="review"/>
        <completionCondition>=count(plan) = 1 or stop = true</completionCondition>
      </adHocSubProcess>
      <sequenceFlow id="f1" sourceRef="adhoc" targetRef="e"/><endEvent id="e"/>"#
    ));
    let trace = run_scenario(
        &def,
        r#"{"variables": {"plans": [["a", "review"], ["b"]], "stop": false},
            "tasks": {"a#1": [{"outcome": "ok", "after_ms": 10}],
                      "b#2": [{"outcome": "ok", "after_ms": 20}]},
            "events": [{"event": "complete_user_task", "at_ms": 300, "node": "review#1",
                        "variables": {"stop": true}}]}"#,
    );
    // Each inner instance activated its own item's elements; the second completed on
    // its one path, the first waited (its condition false after `a`) for its review.
    assert_eq!(runs(&trace), ["a#1", "b#2"]);
    let mid = first_where(&trace, |s| {
        tokens(s).contains(&"review#1") && !tokens(s).contains(&"adhoc#2")
    });
    assert_eq!(tokens(&mid), ["adhoc", "adhoc#1", "review#1"]);
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    assert_eq!(trace.summary.ended_at_ms, 300);
}

#[test]
fn event_sub_processes_inside_end_paths_and_an_interrupting_one_completes_it() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="adhoc"/>
      <adHocSubProcess id="adhoc" {ZEEBE}>
        <extensionElements>{COLLECTION}</extensionElements>
        <userTask id="review"/>
        <subProcess id="escalated" triggeredByEvent="true">
          <startEvent id="tooLong"><timerEventDefinition><timeDuration>PT1H</timeDuration></timerEventDefinition></startEvent>
          <sequenceFlow id="g0" sourceRef="tooLong" targetRef="handle"/>
          <serviceTask id="handle" q:task="handle"/>
          <sequenceFlow id="g1" sourceRef="handle" targetRef="handled"/>
          <endEvent id="handled"/>
        </subProcess>
        <completionCondition>=false</completionCondition>
      </adHocSubProcess>
      <sequenceFlow id="f1" sourceRef="adhoc" targetRef="e"/><endEvent id="e"/>"#
    ));
    // The review never comes: the timer start interrupts it, and once the event
    // sub-process ends the ad-hoc sub-process completes, its condition notwithstanding.
    let trace = run_scenario(
        &def,
        r#"{"variables": {"toDo": ["review"]},
            "tasks": {"handle": [{"outcome": "ok", "after_ms": 10}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    assert_eq!(runs(&trace), ["handle"]);
    assert_eq!(trace.summary.ended_at_ms, 3_600_010);
    // With an empty activation the armed timer start is what can still end it: a wait.
    let first = Snapshot::decode(
        &run_scenario(&def, r#"{"variables": {"toDo": []}, "horizon_ms": 1000}"#).steps[0].snapshot,
    )
    .unwrap();
    assert_eq!(tokens(&first), ["adhoc"]);
    assert!(first.failure().is_none());
}

#[test]
fn a_join_inside_that_nothing_activated_can_complete_fails_ad_hoc_idle() {
    let def = around_ad_hoc(
        "",
        COLLECTION,
        r#"<serviceTask id="a" q:task="a"/><serviceTask id="b" q:task="b"/>
           <sequenceFlow id="aj" sourceRef="a" targetRef="join"/>
           <sequenceFlow id="bj" sourceRef="b" targetRef="join"/>
           <parallelGateway id="join"/>
           <sequenceFlow id="jc" sourceRef="join" targetRef="c"/>
           <serviceTask id="c" q:task="c"/>"#,
    );
    // Only `a` is activated: its token waits at the join for `b`, which never comes.
    let trace = run_scenario(
        &def,
        r#"{"variables": {"toDo": ["a"]}, "tasks": {"a": [{"outcome": "ok", "after_ms": 10}]}}"#,
    );
    failed_with(&trace, "AD_HOC_IDLE", "adhoc");
    // Both activated: the join fires and `c` ends the one path.
    let trace = run_scenario(
        &def,
        r#"{"variables": {"toDo": ["a", "b"]},
            "tasks": {"a": [{"outcome": "ok", "after_ms": 10}], "b": [{"outcome": "ok", "after_ms": 20}],
                      "c": [{"outcome": "ok", "after_ms": 5}], "after": [{"outcome": "ok"}]}}"#,
    );
    assert_eq!(trace.summary.status, "completed", "{:?}", trace.summary);
    assert_eq!(runs(&trace), ["a", "b", "c", "after"]);
}
