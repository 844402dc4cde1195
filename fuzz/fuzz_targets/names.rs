//! libFuzzer target: arbitrary text as a node name (issue 25) — the names of activity
//! and scope instances (`pay@2`, `quote#3@2`, `outer@2/inner@3/task`) that inputs,
//! snapshots, timers and the HTTP API carry. The properties: `Process::find` never
//! panics; a name it finds is the one spelling `Process::key` writes for what it found
//! (one name per instance, so two spellings can never be two keys of one instance); and
//! a step given that name — as a task completion and as a token of a snapshot — returns
//! without panicking.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use qflow_core::{step, Attempt, Definition, Input, Snapshot};

const MODEL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <message id="m" name="ping"/>
  <process id="p" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="split"/>
    <parallelGateway id="split"/>
    <sequenceFlow id="f1" sourceRef="split" targetRef="outer"/>
    <sequenceFlow id="f2" sourceRef="split" targetRef="outer"/>
    <sequenceFlow id="f3" sourceRef="split" targetRef="quote"/>
    <subProcess id="outer">
      <startEvent id="os"/>
      <sequenceFlow id="g0" sourceRef="os" targetRef="inner"/>
      <subProcess id="inner">
        <startEvent id="is"/>
        <sequenceFlow id="h0" sourceRef="is" targetRef="pay"/>
        <serviceTask id="pay" q:task="pay"><extensionElements><q:retry maxAttempts="3" initialInterval="PT1S"/></extensionElements></serviceTask>
        <sequenceFlow id="h1" sourceRef="pay" targetRef="ie"/>
        <endEvent id="ie"/>
      </subProcess>
      <boundaryEvent id="late" attachedToRef="inner"><timerEventDefinition><timeDuration>PT1H</timeDuration></timerEventDefinition></boundaryEvent>
      <sequenceFlow id="g1" sourceRef="inner" targetRef="oe"/>
      <endEvent id="oe"/>
      <sequenceFlow id="g2" sourceRef="late" targetRef="oe2"/>
      <endEvent id="oe2"/>
      <subProcess id="esp" triggeredByEvent="true">
        <startEvent id="es" isInterrupting="false"><messageEventDefinition messageRef="m"/></startEvent>
        <sequenceFlow id="e0" sourceRef="es" targetRef="answer"/>
        <userTask id="answer"/>
        <sequenceFlow id="e1" sourceRef="answer" targetRef="ee"/>
        <endEvent id="ee"/>
      </subProcess>
    </subProcess>
    <sequenceFlow id="f4" sourceRef="outer" targetRef="end"/>
    <serviceTask id="quote" q:task="quote">
      <multiInstanceLoopCharacteristics isSequential="false"><loopCardinality>3</loopCardinality></multiInstanceLoopCharacteristics>
    </serviceTask>
    <sequenceFlow id="f5" sourceRef="quote" targetRef="end"/>
    <endEvent id="end"/>
  </process>
</definitions>"#;

fn definition() -> &'static Definition {
    static DEF: OnceLock<Definition> = OnceLock::new();
    DEF.get_or_init(|| {
        let mut loaded = qflow_loader::load_str(MODEL).expect("the fuzz model loads");
        loaded.definitions.remove(0)
    })
}

fn started() -> &'static Snapshot {
    static SNAP: OnceLock<Snapshot> = OnceLock::new();
    SNAP.get_or_init(|| {
        let start = Input::Start {
            variables: Default::default(),
            start: None,
        };
        step(definition(), "f-1", Snapshot::new(), start, 0)
            .expect("the fuzz model starts")
            .snapshot
    })
}

/// The bytes of a running snapshot whose frontier is `tokens` (MessagePack written by
/// hand: `{"s": 1, "t": [...], "v": 1}`).
fn running_with(tokens: &[&str]) -> Vec<u8> {
    let mut out = vec![0x83, 0xa1, b's', 0x01, 0xa1, b't', 0x90 | tokens.len() as u8];
    for t in tokens {
        let n = t.len();
        if n < 32 {
            out.push(0xa0 | n as u8);
        } else if n < 256 {
            out.extend([0xd9, n as u8]);
        } else {
            out.push(0xdb);
            out.extend((n as u32).to_be_bytes());
        }
        out.extend(t.as_bytes());
    }
    out.extend([0xa1, b'v', 0x01]);
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(name) = std::str::from_utf8(data) else {
        return;
    };
    let def = definition();
    let p = &def.process;
    if let Some(idx) = p.find(name) {
        assert_eq!(p.key(idx), name, "a found name is the one spelling of its instance");
    }
    let completed = Input::TaskCompleted {
        node: name.to_owned(),
        attempt: Attempt::FIRST,
        outputs: Default::default(),
    };
    let _ = step(def, "f-1", started().clone(), completed, 5);
    // The same name as a token beside the first instance of `pay` in a snapshot (a
    // damaged or foreign one, or a later engine's): a step on it returns, whatever the
    // name.
    let mut tokens = vec!["pay", name];
    tokens.sort();
    let snap = Snapshot::decode(&running_with(&tokens)).expect("a running snapshot decodes");
    let _ = step(def, "f-1", snap.clone(), Input::Redrive, 6);
    let _ = step(def, "f-1", snap, Input::Cancel, 7);
});
