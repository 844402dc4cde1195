//! Laws of the scenario parser (`qflow_golden::scenario`): bad input of any shape is an
//! error with a message, never a panic, and every accepted scenario runs.

use proptest::prelude::*;
use qflow_golden::scenario;
use serde_json::{json, Value};

const MODEL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:q="urn:qflow:bpmn:1" id="defs" targetNamespace="urn:test">
  <process id="p" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="pay"/>
    <serviceTask id="pay" q:task="pay">
      <extensionElements><q:retry maxAttempts="3"/></extensionElements>
    </serviceTask>
    <sequenceFlow id="f2" sourceRef="pay" targetRef="approve"/>
    <userTask id="approve"/>
    <sequenceFlow id="f3" sourceRef="approve" targetRef="end"/>
    <endEvent id="end"/>
  </process>
</definitions>"#;

/// JSON values built mostly from the scenario's own vocabulary, so that generated inputs
/// reach deep into the format instead of failing on the first key.
fn vocabulary_json() -> impl Strategy<Value = Value> {
    let word = prop_oneof![
        Just("instance"),
        Just("start_at_ms"),
        Just("variables"),
        Just("tasks"),
        Just("events"),
        Just("horizon_ms"),
        Just("max_steps"),
        Just("pay"),
        Just("approve"),
        Just("outcome"),
        Just("ok"),
        Just("fail"),
        Just("panic"),
        Just("bpmn_error"),
        Just("hang"),
        Just("code"),
        Just("after_ms"),
        Just("outputs"),
        Just("event"),
        Just("complete_user_task"),
        Just("claim_user_task"),
        Just("unclaim_user_task"),
        Just("assignee"),
        Just("force"),
        Just("fire_timer"),
        Just("cancel"),
        Just("at_ms"),
        Just("node"),
        Just("name"),
        Just("incarnation"),
        Just("x"),
    ]
    .prop_map(str::to_owned);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-5i64..100_000).prop_map(|n| json!(n)),
        word.clone().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(word.clone(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_is_refused_or_accepted_never_a_panic(text in "\\PC{0,120}") {
        let def = qflow_golden::load_model(MODEL).unwrap();
        if let Err(problems) = scenario::parse(&text, &def) {
            prop_assert!(!problems.is_empty());
            prop_assert!(problems.iter().all(|p| !p.message.is_empty()));
        }
    }

    #[test]
    fn scenario_shaped_json_is_refused_with_a_message_or_runs(value in vocabulary_json()) {
        let def = qflow_golden::load_model(MODEL).unwrap();
        let text = value.to_string();
        match scenario::parse(&text, &def) {
            Err(problems) => {
                prop_assert!(!problems.is_empty());
                prop_assert!(problems.iter().all(|p| !p.to_string().is_empty()));
            }
            // Whatever the parser accepts, the simulator runs without refusing it, and
            // it reads back from its own serialization.
            Ok(parsed) => {
                let trace = qflow_golden::simulate(&def, &parsed);
                prop_assert!(trace.is_ok(), "{text}: {:?}", trace.err());
                let again = serde_json::to_string(&parsed).unwrap();
                prop_assert_eq!(scenario::parse_json(&again), Ok(parsed));
            }
        }
    }

    /// An array is never read positionally as a scenario (issue 8, defect 6).
    #[test]
    fn an_array_is_never_a_scenario(items in prop::collection::vec(vocabulary_json(), 0..8)) {
        let text = Value::Array(items).to_string();
        let err = scenario::parse_json(&text).unwrap_err();
        prop_assert!(err.message.contains("expected a scenario object"), "{}", err);
    }
}

/// Every outcome and event kind, with every field it takes, reads back from its own
/// serialization: the hand-written readers and the derived writer agree on the names.
#[test]
fn every_kind_reads_back_from_its_serialization() {
    let text = json!({
        "instance": "i-1",
        "start_at_ms": 10,
        "variables": { "a": { "b": [1, 2.5, null, "x"] } },
        "tasks": {
            "pay": [
                { "outcome": "ok", "outputs": { "r": 1 }, "after_ms": 5 },
                { "outcome": "fail", "code": "X", "message": "m", "after_ms": 1 },
                { "outcome": "panic", "message": "boom", "after_ms": 2 },
                { "outcome": "bpmn_error", "code": "E", "message": "m", "after_ms": 3 },
                { "outcome": "time_limit", "after_ms": 4 },
                { "outcome": "hang" }
            ]
        },
        "events": [
            { "event": "complete_user_task", "at_ms": 20, "node": "approve", "variables": { "ok": true } },
            { "event": "message", "at_ms": 21, "name": "m", "variables": {} },
            { "event": "cancel", "at_ms": 22 },
            { "event": "fire_timer", "at_ms": 23, "name": "r:pay", "incarnation": 2 },
            { "event": "resume", "at_ms": 24, "budget": "reset" },
            { "event": "retry_now", "at_ms": 25, "node": "pay" },
            { "event": "retry_now", "at_ms": 26 }
        ],
        "horizon_ms": 1000,
        "max_steps": 50
    })
    .to_string();
    let parsed = scenario::parse_json(&text).expect("the scenario parses");
    assert_eq!(parsed.tasks["pay"].len(), 6);
    assert_eq!(parsed.events.len(), 7);
    let again = serde_json::to_string(&parsed).unwrap();
    assert_eq!(scenario::parse_json(&again), Ok(parsed));
}
