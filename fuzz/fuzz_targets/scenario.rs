//! libFuzzer target: arbitrary text into the scenario parser `qflow simulate` and the
//! golden corpus share (`qflow_golden::scenario::parse`, issue 8). The property: it
//! returns — a scenario, or problems each with a path and a message — and never panics;
//! a scenario it accepts runs on the simulator to an end without panicking.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use qflow_core::Definition;

const MODEL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="p" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="pay" q:task="pay"><extensionElements><q:retry maxAttempts="3" initialInterval="PT1S"/></extensionElements></serviceTask>
    <userTask id="approve"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="pay"/>
    <sequenceFlow id="f1" sourceRef="pay" targetRef="approve"/>
    <sequenceFlow id="f2" sourceRef="approve" targetRef="end"/>
  </process>
</definitions>"#;

fn definition() -> &'static Definition {
    static DEF: OnceLock<Definition> = OnceLock::new();
    DEF.get_or_init(|| {
        let mut loaded = qflow_loader::load_str(MODEL).expect("the fuzz model loads");
        loaded.definitions.remove(0)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match qflow_golden::scenario::parse(text, definition()) {
        Ok(mut scenario) => {
            // Bounded: the fuzzer looks for panics, not for long runs.
            scenario.max_steps = Some(scenario.max_steps.unwrap_or(200).min(200));
            let _ = qflow_core::sim::run(definition(), &scenario);
        }
        Err(problems) => assert!(!problems.is_empty(), "refused without a problem"),
    }
});
