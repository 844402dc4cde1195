//! Structure-aware fuzzing of the loader with proptest (the CI-sized companion of the
//! libFuzzer target in `fuzz/`; see docs/fuzzing.md).
//!
//! Inputs are real models — every file of `../shared/corpus/` when present, plus a few
//! built-in `q:` models — put through random truncations, insertions of XML and BPMN
//! tokens, deletions, duplications and byte flips, and also plain random bytes. The law:
//! `load` returns (never panics), a refusal carries at least one error, and every
//! diagnostic is labelled (published code, line > 0, non-empty message).
//!
//! Case count: 256 per property by default so CI stays quick; set `QFLOW_FUZZ_CASES`
//! (e.g. 200000, with `--release`) for a long run. Failures are persisted under
//! `proptest-regressions/` and must be committed with the fix.

use std::sync::OnceLock;

use proptest::prelude::*;
use qflow_loader::{load, Diagnostic, LoadOptions};

const DEFAULT_CASES: u32 = 256;

fn cases() -> u32 {
    std::env::var("QFLOW_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

/// Built-in seeds, so the fuzzer reaches the `q:` rules even without the corpus.
const BUILT_IN: &[&str] = &[
    r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d">
  <error id="e1" errorCode="DECLINED"/>
  <message id="m1" name="reply"/>
  <process id="p" isExecutable="true">
    <startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="gw"/>
    <exclusiveGateway id="gw" default="f3"/>
    <sequenceFlow id="f2" sourceRef="gw" targetRef="pay">
      <conditionExpression>amount &gt; 10 &amp;&amp; size(items) &lt; 5</conditionExpression>
    </sequenceFlow>
    <sequenceFlow id="f3" sourceRef="gw" targetRef="call"/>
    <serviceTask id="pay" q:task="pay">
      <extensionElements>
        <q:retry maxAttempts="4" initialInterval="PT2S" backoffMultiplier="1.5" maxInterval="PT1M"
                 jitter="none" nonRetryableCodes="DECLINED TIMEOUT" maxElapsed="PT10M"/>
        <q:timeout duration="PT30S"/>
      </extensionElements>
    </serviceTask>
    <boundaryEvent id="b1" attachedToRef="pay"><errorEventDefinition errorRef="e1"/></boundaryEvent>
    <sequenceFlow id="f4" sourceRef="pay" targetRef="join"/>
    <sequenceFlow id="f5" sourceRef="b1" targetRef="join"/>
    <serviceTask id="call" q:channel="partner">
      <extensionElements><q:timeout duration="PT5M"/></extensionElements>
    </serviceTask>
    <sequenceFlow id="f6" sourceRef="call" targetRef="wait"/>
    <intermediateCatchEvent id="wait"><timerEventDefinition><timeCycle>R3/PT1H</timeCycle></timerEventDefinition></intermediateCatchEvent>
    <sequenceFlow id="f7" sourceRef="wait" targetRef="recv"/>
    <receiveTask id="recv" messageRef="m1"/>
    <sequenceFlow id="f8" sourceRef="recv" targetRef="join"/>
    <exclusiveGateway id="join"/>
    <sequenceFlow id="f9" sourceRef="join" targetRef="sub"/>
    <subProcess id="sub">
      <startEvent id="s2"/>
      <sequenceFlow id="f10" sourceRef="s2" targetRef="pull"/>
      <serviceTask id="pull" q:topic="reports"/>
      <sequenceFlow id="f11" sourceRef="pull" targetRef="e2"/>
      <endEvent id="e2"/>
    </subProcess>
    <sequenceFlow id="f12" sourceRef="sub" targetRef="end"/>
    <endEvent id="end"><terminateEventDefinition/></endEvent>
  </process>
</definitions>"#,
    r#"<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" xmlns:camunda="http://camunda.org/schema/1.0/bpmn" id="z">
  <bpmn:process id="z1" isExecutable="true">
    <bpmn:startEvent id="s"/>
    <bpmn:sequenceFlow id="a" sourceRef="s" targetRef="t1"/>
    <bpmn:serviceTask id="t1"><bpmn:extensionElements><zeebe:taskDefinition type="work" retries="3"/></bpmn:extensionElements></bpmn:serviceTask>
    <bpmn:sequenceFlow id="b" sourceRef="t1" targetRef="g"/>
    <bpmn:parallelGateway id="g"/>
    <bpmn:sequenceFlow id="c" sourceRef="g" targetRef="t2"/>
    <bpmn:sequenceFlow id="d" sourceRef="g" targetRef="e"/>
    <bpmn:serviceTask id="t2" camunda:type="external" camunda:topic="mail"/>
    <bpmn:sequenceFlow id="f" sourceRef="t2" targetRef="e"/>
    <bpmn:endEvent id="e"/>
  </bpmn:process>
</bpmn:definitions>"#,
    r#"<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" xmlns:q="urn:qflow:bpmn:1" id="ah">
  <bpmn:process id="ah1" isExecutable="true">
    <bpmn:startEvent id="s"/>
    <bpmn:sequenceFlow id="a" sourceRef="s" targetRef="adhoc"/>
    <bpmn:adHocSubProcess id="adhoc" cancelRemainingInstances="false" ordering="Parallel">
      <bpmn:extensionElements>
        <zeebe:adHoc activeElementsCollection="=toDo"/>
        <zeebe:ioMapping><zeebe:input source="=0" target="n"/></zeebe:ioMapping>
      </bpmn:extensionElements>
      <bpmn:serviceTask id="t1" q:task="t1"/>
      <bpmn:sequenceFlow id="b" sourceRef="t1" targetRef="t2"/>
      <bpmn:userTask id="t2"/>
      <bpmn:completionCondition>=n &gt; 1</bpmn:completionCondition>
    </bpmn:adHocSubProcess>
    <bpmn:boundaryEvent id="late" attachedToRef="adhoc"><bpmn:timerEventDefinition><bpmn:timeDuration>PT1M</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="c" sourceRef="adhoc" targetRef="e"/>
    <bpmn:sequenceFlow id="d" sourceRef="late" targetRef="e"/>
    <bpmn:endEvent id="e"/>
  </bpmn:process>
</bpmn:definitions>"#,
];

/// Fragments that reach deep parser and rule paths when spliced into a model.
const TOKENS: &[&str] = &[
    "<",
    ">",
    "/>",
    "</",
    "\"",
    "'",
    "=",
    "&amp;",
    "&e;",
    "&#0;",
    "&#x110000;",
    "<![CDATA[",
    "]]>",
    "<!--",
    "-->",
    "<?pi x?>",
    "<!DOCTYPE d [<!ENTITY e \"x\">]>",
    "<!ENTITY e SYSTEM \"file:///etc/passwd\">",
    "xmlns:q=\"urn:qflow:bpmn:1\"",
    "xmlns=\"http://www.omg.org/spec/BPMN/20100524/MODEL\"",
    "<startEvent id=\"s\"/>",
    "<endEvent id=\"end\"/>",
    "<sequenceFlow id=\"fx\" sourceRef=\"s\" targetRef=\"end\"/>",
    "<serviceTask id=\"x\" q:channel=\"c\"/>",
    "<subProcess id=\"sp\">",
    "</subProcess>",
    "<adHocSubProcess id=\"ah\" ordering=\"Sequential\">",
    "</adHocSubProcess>",
    "<completionCondition>=done</completionCondition>",
    "cancelRemainingInstances=\"maybe\"",
    "<extensionElements><zeebe:adHoc activeElementsCollection=\"=[1]\" outputElement=\"=x\"/></extensionElements>",
    "<boundaryEvent id=\"bx\" attachedToRef=\"pay\" cancelActivity=\"false\">",
    "<timerEventDefinition><timeDuration>P1Y</timeDuration></timerEventDefinition>",
    "<q:retry maxAttempts=\"0\"/>",
    "<q:retry maxAttempts=\"4294967296\" backoffMultiplier=\"-1\"/>",
    "<q:timeout duration=\"PT0S\"/>",
    "nonRetryableCodes=\"NOPE\"",
    "<conditionExpression>x ==</conditionExpression>",
    "<conditionExpression>${x}</conditionExpression>",
    "default=\"f1\"",
    "id=\"s\"",
    "isExecutable=\"false\"",
    "PT1S",
    "R/PT0S",
    "9999-99-99T99:99:99Z",
    "\u{feff}",
    "\u{0}",
    "\u{ffff}",
    "\r\n",
    "\t",
];

#[path = "support/corpus.rs"]
mod support;

/// Every corpus file's bytes (if the corpus is present) plus the built-in seeds.
fn seeds() -> &'static [Vec<u8>] {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let mut seeds: Vec<Vec<u8>> = BUILT_IN.iter().map(|s| s.as_bytes().to_vec()).collect();
        let files = support::corpus_dir()
            .map(|dir| support::bpmn_files(&dir))
            .unwrap_or_default();
        seeds.extend(files.iter().filter_map(|p| std::fs::read(p).ok()));
        seeds
    })
}

#[derive(Debug, Clone)]
enum Mutation {
    /// Cut the input at a point (truncated XML).
    Truncate(u32),
    /// Insert a token at a point.
    Token(u32, usize),
    /// Insert random bytes at a point.
    Bytes(u32, Vec<u8>),
    /// Delete a range.
    Delete(u32, u16),
    /// Copy a range to another point (duplicate ids, repeated elements).
    Duplicate(u32, u16, u32),
    /// Replace one byte.
    Flip(u32, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        1 => any::<u32>().prop_map(Mutation::Truncate),
        4 => (any::<u32>(), 0..TOKENS.len()).prop_map(|(at, t)| Mutation::Token(at, t)),
        2 => (any::<u32>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, b)| Mutation::Bytes(at, b)),
        2 => (any::<u32>(), any::<u16>()).prop_map(|(at, n)| Mutation::Delete(at, n % 512)),
        2 => (any::<u32>(), any::<u16>(), any::<u32>())
            .prop_map(|(at, n, to)| Mutation::Duplicate(at, n % 1024, to)),
        2 => (any::<u32>(), any::<u8>()).prop_map(|(at, b)| Mutation::Flip(at, b)),
    ]
}

fn point(at: u32, len: usize) -> usize {
    at as usize % (len + 1)
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    match m {
        Mutation::Truncate(at) => {
            let at = point(*at, bytes.len());
            bytes.truncate(at);
        }
        Mutation::Token(at, t) => {
            let at = point(*at, bytes.len());
            bytes.splice(at..at, TOKENS[*t].bytes());
        }
        Mutation::Bytes(at, new) => {
            let at = point(*at, bytes.len());
            bytes.splice(at..at, new.iter().copied());
        }
        Mutation::Delete(at, n) => {
            let at = point(*at, bytes.len());
            let end = (at + *n as usize).min(bytes.len());
            bytes.drain(at..end);
        }
        Mutation::Duplicate(at, n, to) => {
            let at = point(*at, bytes.len());
            let end = (at + *n as usize).min(bytes.len());
            let copy = bytes[at..end].to_vec();
            let to = point(*to, bytes.len());
            bytes.splice(to..to, copy);
        }
        Mutation::Flip(at, b) => {
            if !bytes.is_empty() {
                let at = point(*at, bytes.len() - 1);
                bytes[at] = *b;
            }
        }
    }
}

fn assert_labelled(d: &Diagnostic) -> Result<(), TestCaseError> {
    prop_assert!(
        qflow_loader::rules()
            .iter()
            .any(|(code, _)| *code == d.code),
        "unpublished code in {d:?}"
    );
    prop_assert!(d.pos.line > 0, "no line in {d:?}");
    prop_assert!(!d.message.trim().is_empty(), "no message in {d:?}");
    Ok(())
}

/// The loader's contract on any input.
fn check_any_input(bytes: &[u8]) -> Result<(), TestCaseError> {
    match load(bytes, &LoadOptions::default()) {
        Ok(loaded) => {
            for w in &loaded.warnings {
                assert_labelled(w)?;
            }
        }
        Err(diagnostics) => {
            prop_assert!(
                diagnostics.iter().any(Diagnostic::is_error),
                "refused without an error: {diagnostics:?}"
            );
            for d in &diagnostics {
                assert_labelled(d)?;
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        // Shrinking a 200 KiB model is slow and the mutation list already says what
        // happened; keep it bounded.
        max_shrink_iters: 2_000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn mutated_models_never_panic_and_refusals_are_labelled(
        seed in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(), 1..8),
    ) {
        let seeds = seeds();
        let mut bytes = seeds[seed.index(seeds.len())].clone();
        for m in &mutations {
            apply(&mut bytes, m);
        }
        check_any_input(&bytes)?;
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        check_any_input(&bytes)?;
    }

    /// Tokens inside a process element, so most inputs get past the document checks.
    #[test]
    fn token_soup_inside_a_process_never_panics(
        tokens in prop::collection::vec(0..TOKENS.len(), 0..64),
    ) {
        let soup: String = tokens.iter().map(|t| TOKENS[*t]).collect();
        let text = format!(
            "<definitions xmlns=\"http://www.omg.org/spec/BPMN/20100524/MODEL\" \
             xmlns:q=\"urn:qflow:bpmn:1\" id=\"d\"><process id=\"p\">{soup}</process></definitions>"
        );
        check_any_input(text.as_bytes())?;
    }
}
