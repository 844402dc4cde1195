//! Shared helpers for the engine's integration tests: every scenario test goes through
//! [`run_scenario`], every model through [`model`].

#![allow(dead_code)]

pub mod build;

use qflow_core::sim::{self, Scenario, Trace};
use qflow_core::{Effect, Snapshot};
use qflow_loader::model::Definition;

/// Loads a process whose body is `body` (flow nodes and sequence flows); `extra` goes
/// beside the process inside `<definitions>` (error declarations, say). The `q:` and
/// `zeebe:` prefixes are declared.
pub fn model_with(extra: &str, body: &str) -> Definition {
    let xml = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:q="urn:qflow:bpmn:1" xmlns:zeebe="http://camunda.org/schema/zeebe/1.0"
             id="defs" targetNamespace="urn:qflow:test">
  {extra}
  <process id="p" isExecutable="true">
    {body}
  </process>
</definitions>"#
    );
    match qflow_loader::load_str(&xml) {
        Ok(mut loaded) => loaded.definitions.remove(0),
        Err(diags) => panic!("test model refused: {diags:#?}\n{xml}"),
    }
}

pub fn model(body: &str) -> Definition {
    model_with("", body)
}

/// Runs a scenario given as JSON (the `qflow simulate` format) and returns its trace.
pub fn run_scenario(def: &Definition, scenario_json: &str) -> Trace {
    let scenario: Scenario = serde_json::from_str(scenario_json).expect("scenario parses");
    sim::run(def, &scenario).expect("scenario runs")
}

/// The final decoded snapshot of a trace.
pub fn last(trace: &Trace) -> Snapshot {
    trace
        .final_snapshot()
        .expect("the trace has a decodable last step")
}

/// Every effect of the run with the virtual instant of its step.
pub fn effects(trace: &Trace) -> Vec<(i64, Effect)> {
    trace
        .steps
        .iter()
        .flat_map(|s| s.effects.iter().map(move |e| (s.at_ms, e.clone())))
        .collect()
}

/// `(instant, attempt)` of every `RunTask` of `node`.
pub fn runs_of(trace: &Trace, node: &str) -> Vec<(i64, u32)> {
    effects(trace)
        .into_iter()
        .filter_map(|(at, e)| match e {
            Effect::RunTask {
                node: n, attempt, ..
            } if n == node => Some((at, attempt.get())),
            _ => None,
        })
        .collect()
}

/// `(instant armed, due, name)` of every timer armed during the run.
pub fn arms(trace: &Trace) -> Vec<(i64, i64, String)> {
    effects(trace)
        .into_iter()
        .filter_map(|(at, e)| match e {
            Effect::ArmTimer {
                name, due_at_ms, ..
            } => Some((at, due_at_ms, name.to_string())),
            _ => None,
        })
        .collect()
}

/// A linear process: start → tasks (each `<serviceTask q:task=id>` with `ext` inside
/// its extensionElements, when given) → end.
pub fn linear(tasks: &[(&str, &str)]) -> Definition {
    let mut body = String::from(r#"<startEvent id="start"/>"#);
    let mut prev = "start".to_owned();
    for (i, (id, ext)) in tasks.iter().enumerate() {
        let ext = if ext.is_empty() {
            String::new()
        } else {
            format!("<extensionElements>{ext}</extensionElements>")
        };
        body.push_str(&format!(
            r#"<sequenceFlow id="f{i}" sourceRef="{prev}" targetRef="{id}"/>
               <serviceTask id="{id}" q:task="{id}">{ext}</serviceTask>"#
        ));
        prev = (*id).to_owned();
    }
    body.push_str(&format!(
        r#"<sequenceFlow id="fend" sourceRef="{prev}" targetRef="end"/><endEvent id="end"/>"#
    ));
    model(&body)
}

/// A user task `approve` with an interrupting timer boundary `late` (PT1H) waits in
/// parallel beside the registered task `pay`; both join before the end.
pub fn approve_beside_pay() -> Definition {
    model(
        r#"<startEvent id="start"/>
        <parallelGateway id="split"/>
        <userTask id="approve"/>
        <boundaryEvent id="late" attachedToRef="approve">
          <timerEventDefinition><timeDuration>PT1H</timeDuration></timerEventDefinition>
        </boundaryEvent>
        <serviceTask id="pay" q:task="pay"/>
        <parallelGateway id="join"/>
        <endEvent id="end"/>
        <endEvent id="lateEnd"/>
        <sequenceFlow id="f0" sourceRef="start" targetRef="split"/>
        <sequenceFlow id="f1" sourceRef="split" targetRef="approve"/>
        <sequenceFlow id="f2" sourceRef="split" targetRef="pay"/>
        <sequenceFlow id="f3" sourceRef="approve" targetRef="join"/>
        <sequenceFlow id="f4" sourceRef="pay" targetRef="join"/>
        <sequenceFlow id="f5" sourceRef="join" targetRef="end"/>
        <sequenceFlow id="f6" sourceRef="late" targetRef="lateEnd"/>"#,
    )
}

/// A snapshot's persisted top-level map, entry by entry: for tests that tamper with a
/// key the API does not set (a variable an operator fixed, a budget base).
pub fn top_level_map(snap: &Snapshot) -> Vec<(String, rmpv::Value)> {
    let bytes = snap.encode();
    let value = rmpv::decode::read_value(&mut bytes.as_slice()).unwrap();
    value
        .as_map()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.as_str().unwrap().to_owned(), v.clone()))
        .collect()
}

/// The MessagePack bytes of a top-level map (the inverse of [`top_level_map`]).
pub fn encode_map(entries: &[(String, rmpv::Value)]) -> Vec<u8> {
    let map = rmpv::Value::Map(
        entries
            .iter()
            .map(|(k, v)| (rmpv::Value::from(k.as_str()), v.clone()))
            .collect(),
    );
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &map).unwrap();
    out
}
