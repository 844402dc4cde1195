//! Link and escalation events in the core: where a link throw sends its token, and where
//! an escalation is caught (nearest enclosing sub-process, exact code before catch-all),
//! what an interrupting catch ends and what an uncaught one leaves alone.

mod common;

use common::{last, model, model_with, run_scenario, runs_of};
use qflow_core::Status;

const ESCALATIONS: &str = r#"<escalation id="late" escalationCode="LATE"/>
  <escalation id="other" escalationCode="OTHER"/>"#;

/// `outer` holds `inner`, whose only path throws `late` through an end event. `outer`'s
/// boundaries are `boundaries`; `inner` has none, so the escalation passes it by.
fn nested(boundaries: &str) -> qflow_loader::model::Definition {
    model_with(
        ESCALATIONS,
        &format!(
            r#"<startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="outer"/>
    <subProcess id="outer">
      <startEvent id="os"/>
      <sequenceFlow id="o1" sourceRef="os" targetRef="inner"/>
      <subProcess id="inner">
        <startEvent id="is"/>
        <sequenceFlow id="i1" sourceRef="is" targetRef="raise"/>
        <endEvent id="raise"><escalationEventDefinition escalationRef="late"/></endEvent>
      </subProcess>
      <sequenceFlow id="o2" sourceRef="inner" targetRef="afterInner"/>
      <serviceTask id="afterInner" q:task="afterInner"/>
      <sequenceFlow id="o3" sourceRef="afterInner" targetRef="oe"/>
      <endEvent id="oe"/>
    </subProcess>
    {boundaries}
    <sequenceFlow id="f2" sourceRef="outer" targetRef="done"/>
    <serviceTask id="done" q:task="done"/>
    <sequenceFlow id="f3" sourceRef="done" targetRef="e"/>
    <endEvent id="e"/>
    <serviceTask id="byCode" q:task="byCode"/>
    <serviceTask id="byAny" q:task="byAny"/>
    <sequenceFlow id="f6" sourceRef="byCode" targetRef="e"/>
    <sequenceFlow id="f7" sourceRef="byAny" targetRef="e"/>"#
        ),
    )
}

const TASKS: &str = r#"{ "tasks": {
  "afterInner": [{ "outcome": "ok", "outputs": {} }],
  "done": [{ "outcome": "ok", "outputs": {} }],
  "byCode": [{ "outcome": "ok", "outputs": {} }],
  "byAny": [{ "outcome": "ok", "outputs": {} }]
} }"#;

#[test]
fn an_escalation_passes_a_sub_process_without_a_catch_and_prefers_the_exact_code() {
    // The catch-all comes first in document order; the exact code still wins.
    let def = nested(
        r#"<boundaryEvent id="any" attachedToRef="outer"><escalationEventDefinition/></boundaryEvent>
    <boundaryEvent id="code" attachedToRef="outer"><escalationEventDefinition escalationRef="late"/></boundaryEvent>
    <boundaryEvent id="wrong" attachedToRef="outer"><escalationEventDefinition escalationRef="other"/></boundaryEvent>
    <sequenceFlow id="f4" sourceRef="code" targetRef="byCode"/>
    <sequenceFlow id="f5" sourceRef="any" targetRef="byAny"/>
    <sequenceFlow id="f8" sourceRef="wrong" targetRef="byAny"/>"#,
    );
    let trace = run_scenario(&def, TASKS);
    assert_eq!(last(&trace).status(), Status::Completed);
    assert_eq!(runs_of(&trace, "byCode").len(), 1);
    assert!(runs_of(&trace, "byAny").is_empty());
    // Interrupting: `outer` ended, so neither its rest nor its outgoing flow ran.
    assert!(runs_of(&trace, "afterInner").is_empty());
    assert!(runs_of(&trace, "done").is_empty());
}

#[test]
fn a_catch_all_takes_what_no_code_matches() {
    let def = nested(
        r#"<boundaryEvent id="wrong" attachedToRef="outer"><escalationEventDefinition escalationRef="other"/></boundaryEvent>
    <boundaryEvent id="any" attachedToRef="outer" cancelActivity="false"><escalationEventDefinition/></boundaryEvent>
    <sequenceFlow id="f4" sourceRef="wrong" targetRef="byCode"/>
    <sequenceFlow id="f5" sourceRef="any" targetRef="byAny"/>"#,
    );
    let trace = run_scenario(&def, TASKS);
    assert_eq!(last(&trace).status(), Status::Completed);
    assert!(runs_of(&trace, "byCode").is_empty());
    // Non-interrupting: the boundary's path and the rest of `outer` both run.
    assert_eq!(runs_of(&trace, "byAny").len(), 1);
    assert_eq!(runs_of(&trace, "afterInner").len(), 1);
    assert_eq!(runs_of(&trace, "done").len(), 1);
}

#[test]
fn an_uncaught_escalation_is_no_failure() {
    // Both boundaries catch another code only.
    let def = nested(
        r#"<boundaryEvent id="wrong" attachedToRef="outer"><escalationEventDefinition escalationRef="other"/></boundaryEvent>
    <boundaryEvent id="wrong2" attachedToRef="outer" cancelActivity="false"><escalationEventDefinition escalationRef="other"/></boundaryEvent>
    <sequenceFlow id="f4" sourceRef="wrong" targetRef="byCode"/>
    <sequenceFlow id="f5" sourceRef="wrong2" targetRef="byAny"/>"#,
    );
    let trace = run_scenario(&def, TASKS);
    assert_eq!(last(&trace).status(), Status::Completed);
    assert!(runs_of(&trace, "byCode").is_empty());
    assert!(runs_of(&trace, "byAny").is_empty());
    assert_eq!(runs_of(&trace, "afterInner").len(), 1);
    assert_eq!(runs_of(&trace, "done").len(), 1);
}

#[test]
fn a_link_throw_moves_its_token_in_the_same_step() {
    let def = model(
        r#"<startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="a"/>
    <serviceTask id="a" q:task="a"/>
    <sequenceFlow id="f2" sourceRef="a" targetRef="go"/>
    <intermediateThrowEvent id="go"><linkEventDefinition name="x"/></intermediateThrowEvent>
    <intermediateCatchEvent id="land"><linkEventDefinition name="x"/></intermediateCatchEvent>
    <sequenceFlow id="f3" sourceRef="land" targetRef="b"/>
    <serviceTask id="b" q:task="b"/>
    <sequenceFlow id="f4" sourceRef="b" targetRef="e"/>
    <endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{ "tasks": { "a": [{ "outcome": "ok", "outputs": {}, "after_ms": 10 }],
                       "b": [{ "outcome": "ok", "outputs": {} }] } }"#,
    );
    assert_eq!(last(&trace).status(), Status::Completed);
    // `b` starts in the step that completed `a`: the link is no wait.
    assert_eq!(runs_of(&trace, "b"), vec![(10, 1)]);
    assert_eq!(trace.steps.len(), 3);
}
