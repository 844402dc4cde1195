//! Signal waits in the core: a broadcast reaches every wait for its name, a catch holds
//! one subscription row under the empty key, and two tokens at one catch both take one
//! broadcast.

mod common;

use common::{effects, last, model_with, run_scenario};
use qflow_core::{Effect, Status};

const TICK: &str = r#"<signal id="tick" name="tick"/>"#;

#[test]
fn two_tokens_at_one_catch_both_take_one_broadcast() {
    // A parallel split whose branches both reach the same catch (an implicit merge), and a
    // join after it that needs both.
    let def = model_with(
        TICK,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
      <parallelGateway id="split"/>
      <sequenceFlow id="f1" sourceRef="split" targetRef="wait"/>
      <sequenceFlow id="f2" sourceRef="split" targetRef="wait"/>
      <intermediateCatchEvent id="wait"><signalEventDefinition signalRef="tick"/></intermediateCatchEvent>
      <sequenceFlow id="f3" sourceRef="wait" targetRef="after"/>
      <task id="after"/>
      <sequenceFlow id="f4" sourceRef="after" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "signal", "at_ms": 10, "name": "tick"}]}"#,
    );
    let opened: Vec<_> = effects(&trace)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Effect::Subscribe { node, message, key } => Some((node, message, key)),
            _ => None,
        })
        .collect();
    // Two tokens at the catch are two instances of it (E9), each with its own row.
    assert_eq!(
        opened,
        [
            ("wait".into(), "tick".into(), String::new()),
            ("wait@2".into(), "tick".into(), String::new())
        ]
    );
    let first = qflow_core::Snapshot::decode(&trace.steps[0].snapshot).expect("decodes");
    assert_eq!(first.tokens(), ["wait", "wait@2"]);
    let end = last(&trace);
    assert_eq!(end.status(), Status::Completed);
    assert!(end.subscriptions().is_empty());
}

#[test]
fn a_signal_of_another_name_changes_nothing() {
    let def = model_with(
        TICK,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="wait"/>
      <intermediateCatchEvent id="wait"><signalEventDefinition signalRef="tick"/></intermediateCatchEvent>
      <sequenceFlow id="f1" sourceRef="wait" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"events": [{"event": "signal", "at_ms": 10, "name": "tock"}]}"#,
    );
    let stale = effects(&trace).into_iter().any(|(_, e)| {
        matches!(e, Effect::Stale { reason } if reason.contains("nothing waits for signal `tock`"))
    });
    assert!(stale);
    let end = last(&trace);
    assert_eq!(end.status(), Status::Running);
    assert_eq!(end.tokens(), ["wait"]);
    assert_eq!(
        end.subscriptions().get("wait").map(String::as_str),
        Some("")
    );
}
