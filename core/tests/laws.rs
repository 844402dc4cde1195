//! Laws of the step and the snapshot, checked with proptest: determinism, round trips,
//! forward compatibility, hostile bytes, and the byte-identity promise of E3.

mod common;

use std::collections::BTreeMap;

use common::model_with;
use proptest::prelude::*;
use qflow_core::sim::{self, Scenario, Scripted, ScriptedEvent};
use qflow_core::{step, Attempt, FailureKind, Input, Snapshot};
use qflow_loader::model::{Definition, Variables};

/// Fork into a task with a policy and a timeout, and a task with an error boundary,
/// join, then a user task guarded by an interrupting timer boundary. `RETRY` is
/// replaced by the policy (or nothing).
const MODEL: &str = r#"
  <startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="fork"/>
  <parallelGateway id="fork"/>
  <sequenceFlow id="f1" sourceRef="fork" targetRef="a"/><sequenceFlow id="f2" sourceRef="fork" targetRef="b"/>
  <serviceTask id="a" q:task="a"><extensionElements><q:timeout duration="PT3S"/>RETRY</extensionElements></serviceTask>
  <serviceTask id="b" q:task="b">BRETRY</serviceTask>
  <boundaryEvent id="berr" attachedToRef="b"><errorEventDefinition/></boundaryEvent>
  <sequenceFlow id="f3" sourceRef="a" targetRef="join"/><sequenceFlow id="f4" sourceRef="b" targetRef="join"/>
  <sequenceFlow id="f5" sourceRef="berr" targetRef="join"/>
  <inclusiveGateway id="join"/>
  <sequenceFlow id="f6" sourceRef="join" targetRef="gw"/>
  <exclusiveGateway id="gw" default="f8"/>
  <sequenceFlow id="f7" sourceRef="gw" targetRef="wait"><conditionExpression>x &gt; 5</conditionExpression></sequenceFlow>
  <sequenceFlow id="f8" sourceRef="gw" targetRef="e"/>
  <userTask id="wait"/>
  <boundaryEvent id="late" attachedToRef="wait"><timerEventDefinition><timeDuration>PT1M</timeDuration></timerEventDefinition></boundaryEvent>
  <sequenceFlow id="f9" sourceRef="wait" targetRef="e"/><sequenceFlow id="f10" sourceRef="late" targetRef="e2"/>
  <endEvent id="e"/><endEvent id="e2"/>"#;

/// `default` cases, or `PROPTEST_CASES` when set (for a deeper run by hand:
/// `PROPTEST_CASES=2000 cargo test --release -p qflow-core --test laws`).
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn with_retry() -> Definition {
    model_with(
        "",
        &MODEL
            .replace("BRETRY", r#"<extensionElements><q:retry maxAttempts="4" initialInterval="PT1S"/></extensionElements>"#)
            .replace("RETRY", r#"<q:retry maxAttempts="3" initialInterval="PT2S"/>"#),
    )
}

fn without_retry() -> Definition {
    model_with("", &MODEL.replace("BRETRY", "").replace("RETRY", ""))
}

fn scripted() -> impl Strategy<Value = Scripted> {
    let after = 0u64..5_000;
    prop_oneof![
        (0i64..10, after.clone()).prop_map(|(x, after_ms)| Scripted::Ok {
            outputs: Variables::from([("x".to_owned(), x.into())]),
            after_ms,
        }),
        after.clone().prop_map(|after_ms| Scripted::Fail {
            code: "HANDLER_FAILED".into(),
            message: String::new(),
            after_ms,
        }),
        after.clone().prop_map(|after_ms| Scripted::Panic {
            message: "p".into(),
            after_ms
        }),
        after.prop_map(|after_ms| Scripted::BpmnError {
            code: "NOPE".into(),
            message: String::new(),
            after_ms,
        }),
        Just(Scripted::Hang),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        "[a-z0-9-]{1,12}",
        proptest::collection::vec(scripted(), 1..5),
        proptest::collection::vec(scripted(), 1..5),
        proptest::option::of(0i64..120_000),
        proptest::option::of(0i64..120_000),
    )
        .prop_map(|(instance, a, b, complete_at, cancel_at)| {
            let mut events = Vec::new();
            if let Some(at_ms) = complete_at {
                events.push(ScriptedEvent::CompleteUserTask {
                    at_ms,
                    node: "wait".into(),
                    variables: Variables::new(),
                    assignee: None,
                });
            }
            if let Some(at_ms) = cancel_at {
                events.push(ScriptedEvent::Cancel { at_ms });
            }
            Scenario {
                instance,
                start_at_ms: 0,
                variables: Variables::from([("x".to_owned(), 0.into())]),
                start_event: None,
                tasks: BTreeMap::from([("a".to_owned(), a), ("b".to_owned(), b)]),
                channels: BTreeMap::new(),
                delivery_curves: BTreeMap::new(),
                events,
                horizon_ms: Some(600_000),
                max_steps: None,
                inputs: None,
            }
        })
}

/// Top-level keys of a snapshot's bytes, read without the engine's decoder.
fn raw_keys(bytes: &[u8]) -> Vec<String> {
    let value = rmpv::decode::read_value(&mut &bytes[..]).expect("valid msgpack");
    value
        .as_map()
        .expect("a map")
        .iter()
        .map(|(k, _)| k.as_str().expect("string keys").to_owned())
        .collect()
}

fn arbitrary_value() -> impl Strategy<Value = rmpv::Value> {
    let leaf = prop_oneof![
        Just(rmpv::Value::Nil),
        any::<bool>().prop_map(rmpv::Value::from),
        any::<i64>().prop_map(rmpv::Value::from),
        any::<u64>().prop_map(rmpv::Value::from),
        any::<f64>().prop_map(rmpv::Value::F64),
        "[a-z:/]{0,8}".prop_map(rmpv::Value::from),
        proptest::collection::vec(any::<u8>(), 0..8).prop_map(rmpv::Value::Binary),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(rmpv::Value::Array),
            proptest::collection::vec(("[a-z]{1,3}".prop_map(rmpv::Value::from), inner), 0..4)
                .prop_map(rmpv::Value::Map),
        ]
    })
}

/// Keys from every family, so that malformed values of known keys are exercised too.
fn any_key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("v".to_owned()),
        Just("s".to_owned()),
        Just("f".to_owned()),
        Just("fn".to_owned()),
        Just("t".to_owned()),
        Just("d".to_owned()),
        Just("k".to_owned()),
        Just("n".to_owned()),
        Just("y".to_owned()),
        Just("ks".to_owned()),
        Just("pa".to_owned()),
        Just("g".to_owned()),
        "[ajme]/[a-z]{1,4}",
        "[g-z]{1,6}",
    ]
}

/// Top-level keys the engine does not know. Two-letter names in `[g-z]` include known
/// keys (`ks`, the spent timers; `pa`, the parent link), which a snapshot reads as its
/// own and need not keep verbatim; they are left out (CI once drew `ks`).
fn unknown_key() -> impl Strategy<Value = String> {
    const KNOWN: [&str; 2] = ["ks", "pa"];
    "[g-z]{2,6}".prop_filter("a known top-level key", |k| !KNOWN.contains(&k.as_str()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(64), ..ProptestConfig::default() })]

    #[test]
    fn same_inputs_give_the_same_bytes(sc in scenario()) {
        let def = with_retry();
        let one = sim::run(&def, &sc).unwrap();
        let two = sim::run(&def, &sc).unwrap();
        prop_assert_eq!(&one, &two);
        // And a second load of the same model changes nothing either.
        let three = sim::run(&with_retry(), &sc).unwrap();
        prop_assert_eq!(one.summary.snapshot_sha256, three.summary.snapshot_sha256);
    }

    #[test]
    fn every_written_snapshot_round_trips_byte_for_byte(sc in scenario()) {
        let trace = sim::run(&with_retry(), &sc).unwrap();
        for s in &trace.steps {
            let decoded = Snapshot::decode(&s.snapshot).unwrap();
            prop_assert_eq!(decoded.preserved_keys().count(), 0);
            prop_assert_eq!(decoded.encode(), s.snapshot.clone());
        }
    }

    #[test]
    fn a_model_without_retry_never_writes_a_retry_key(sc in scenario()) {
        let trace = sim::run(&without_retry(), &sc).unwrap();
        for s in &trace.steps {
            for key in raw_keys(&s.snapshot) {
                prop_assert!(!key.starts_with("a/") && !key.starts_with("m/") && !key.starts_with("e/"), "{}", key);
            }
            let snap = Snapshot::decode(&s.snapshot).unwrap();
            prop_assert!(!snap.timers().keys().any(|k| k.starts_with("r:")));
        }
    }

    #[test]
    fn arbitrary_maps_decode_and_re_encode_canonically(
        entries in proptest::collection::vec((any_key(), arbitrary_value()), 0..12)
    ) {
        let map = rmpv::Value::Map(entries.into_iter().map(|(k, v)| (k.into(), v)).collect());
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &map).unwrap();
        if let Ok(snap) = Snapshot::decode(&bytes) {
            let once = snap.encode();
            let again = Snapshot::decode(&once).unwrap();
            prop_assert_eq!(&again, &snap);
            prop_assert_eq!(again.encode(), once);
        }
    }

    #[test]
    fn unknown_keys_survive_decode_step_encode(
        sc in scenario(),
        extra in proptest::collection::btree_map(unknown_key(), arbitrary_value(), 1..4),
    ) {
        let def = with_retry();
        let trace = sim::run(&def, &sc).unwrap();
        let mut snap = Snapshot::decode(&trace.steps[0].snapshot).unwrap();
        for (k, v) in &extra {
            snap.insert_preserved(k.clone(), v.clone());
        }
        let bytes = snap.encode();
        let input = Input::TaskCompleted { node: "b".into(), attempt: Attempt::FIRST, outputs: Variables::new() };
        let out = step(&def, &sc.instance, Snapshot::decode(&bytes).unwrap(), input, 10).unwrap();
        let after = out.snapshot.encode();
        let raw = rmpv::decode::read_value(&mut &after[..]).unwrap();
        for (k, v) in &extra {
            let found = raw.as_map().unwrap().iter().find(|(key, _)| key.as_str() == Some(k.as_str()));
            prop_assert_eq!(found.map(|(_, val)| val), Some(v));
        }
    }

    #[test]
    fn arbitrary_bytes_never_make_decode_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = Snapshot::decode(&bytes);
    }

    #[test]
    fn corrupted_snapshots_never_make_decode_or_step_panic(
        sc in scenario(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let def = with_retry();
        let trace = sim::run(&def, &sc).unwrap();
        let mut bytes = trace.steps[0].snapshot.clone();
        for (i, b) in flips {
            let at = i.index(bytes.len());
            bytes[at] = b;
        }
        if let Ok(snap) = Snapshot::decode(&bytes) {
            let _ = snap.encode();
            let _ = step(&def, "x", snap, Input::Cancel, 1);
        }
    }
}

#[test]
fn a_malformed_attempt_counter_reads_as_zero_and_survives() {
    let mut snap = Snapshot::new();
    snap.insert_preserved("a/pay".into(), rmpv::Value::from("three"));
    let bytes = snap.encode();
    let back = Snapshot::decode(&bytes).unwrap();
    assert_eq!(back.attempt("pay"), 0);
    assert_eq!(back.encode(), bytes);
    let mut fixed = back.clone();
    fixed.set_attempt("pay", Attempt::new(2).unwrap());
    assert_eq!(Snapshot::decode(&fixed.encode()).unwrap().attempt("pay"), 2);
}

/// A counter cannot be written as 0: `Attempt` has no 0 (so `set_attempt` cannot be
/// handed one), and an input naming attempt 0 does not parse.
#[test]
fn attempt_zero_is_refused() {
    assert_eq!(Attempt::new(0), None);
    assert_eq!(Attempt::new(1), Some(Attempt::FIRST));
    let zero = r#"{"type": "task_completed", "node": "pay", "attempt": 0}"#;
    let err = serde_json::from_str::<Input>(zero).unwrap_err().to_string();
    assert!(err.contains("1-based"), "{err}");
    let one = r#"{"type": "task_completed", "node": "pay", "attempt": 1}"#;
    assert!(serde_json::from_str::<Input>(one).is_ok());
}

#[test]
fn newer_format_and_non_maps_are_refused_with_a_clear_error() {
    let mut bytes = Vec::new();
    rmpv::encode::write_value(&mut bytes, &rmpv::Value::Map(vec![("v".into(), 9.into())])).unwrap();
    assert_eq!(
        Snapshot::decode(&bytes),
        Err(qflow_core::Error::SnapshotTooNew {
            found: 9,
            supported: 1
        })
    );
    assert!(Snapshot::decode(&[0x91, 0x01]).is_err());
    assert!(Snapshot::decode(&[]).is_err());
    let mut trailing = Snapshot::new().encode();
    trailing.push(0);
    assert!(Snapshot::decode(&trailing).is_err());
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value as J;
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        any::<i64>().prop_map(J::from),
        any::<u64>().prop_map(J::from),
        (-1e12f64..1e12).prop_map(J::from),
        "[ -~]{0,40}".prop_map(J::String),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(J::Array),
            proptest::collection::btree_map("[a-zA-Z_]{1,6}", inner, 0..5)
                .prop_map(|m| J::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(128), ..ProptestConfig::default() })]

    #[test]
    fn variables_survive_the_snapshot_exactly(
        vars in proptest::collection::btree_map("[a-zA-Z_]{1,8}", json_value(), 0..6)
    ) {
        let def = common::build::linear_def(1, None);
        let out = step(&def, "i", Snapshot::new(), Input::Start { variables: vars.clone(), start: None }, 0).unwrap();
        let bytes = out.snapshot.encode();
        let back = Snapshot::decode(&bytes).unwrap();
        prop_assert_eq!(back.variables(), &vars);
        prop_assert_eq!(back.encode(), bytes);
    }
}

/// Every input a shell could plausibly send to an instance in state `snap`.
fn plausible_inputs(snap: &Snapshot) -> Vec<Input> {
    let mut inputs = vec![Input::Cancel, Input::Redrive];
    for (name, inc) in snap.timers() {
        inputs.push(Input::TimerFired {
            name: name.parse().expect("the core writes only timer names"),
            incarnation: *inc,
        });
    }
    for t in snap.tokens() {
        let attempt = snap.attempt_in_progress(t);
        inputs.push(Input::TaskCompleted {
            node: t.clone(),
            attempt,
            outputs: Variables::new(),
        });
        for kind in [
            FailureKind::Failed,
            FailureKind::Panicked,
            FailureKind::TimedOut,
        ] {
            inputs.push(Input::TaskFailed {
                node: t.clone(),
                attempt,
                kind,
                code: "HANDLER_FAILED".into(),
                message: String::new(),
            });
        }
        inputs.push(Input::TaskBpmnError {
            node: t.clone(),
            attempt,
            code: "X".into(),
            message: String::new(),
        });
        inputs.push(Input::UserTaskCompleted {
            node: t.clone(),
            variables: Variables::new(),
            assignee: None,
        });
    }
    inputs
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(32), ..ProptestConfig::default() })]

    /// A snapshot stepped against the wrong definition (a botched migration, say) gives
    /// an error or a stale no-op or a step, never a panic.
    #[test]
    fn snapshots_of_another_definition_never_make_step_panic(sc in scenario()) {
        let trace = sim::run(&with_retry(), &sc).unwrap();
        let others = [
            common::build::Builder::default().build("empty"),
            common::build::linear_def(2, None),
            without_retry(),
            with_retry(),
        ];
        for s in &trace.steps {
            let snap = Snapshot::decode(&s.snapshot).unwrap();
            for def in &others {
                for input in plausible_inputs(&snap) {
                    let _ = step(def, &sc.instance, snap.clone(), input, s.at_ms + 1);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(48), ..ProptestConfig::default() })]

    /// A recorded history replays byte for byte through `step` alone: the simulator adds
    /// no hidden state, and a shell that re-reads its inputs re-derives the same bytes.
    #[test]
    fn a_recorded_trace_replays_byte_for_byte(sc in scenario()) {
        let def = with_retry();
        let trace = sim::run(&def, &sc).unwrap();
        let mut bytes = Snapshot::new().encode();
        for s in &trace.steps {
            let out = step(&def, &sc.instance, Snapshot::decode(&bytes).unwrap(), s.input.clone(), s.at_ms).unwrap();
            prop_assert_eq!(&out.effects, &s.effects);
            bytes = out.snapshot.encode();
            prop_assert_eq!(&bytes, &s.snapshot);
        }
    }
}

/// Found by the `snapshot` fuzz target: a known key whose value does not decode typed
/// (here a reserved MessagePack byte inside the variables) is kept raw; the raw value
/// must be written canonically, or the next decode — which now reads it typed — writes
/// different bytes for the same state.
#[test]
fn a_value_kept_raw_is_written_canonically() {
    let hex = "83a16482a96861735f656d61696cc3a96861733070686f6e65c1a17302a17601";
    encodes_stably(hex);
}

/// A fuzzer's find (CI, 2026-12-01): variables kept raw held a float32; the first encode
/// wrote it as float32, a later decode read the map typed and wrote float64 — one state,
/// two byte strings. A value kept raw now writes every float as f64, as the typed writer
/// does.
#[test]
fn a_float32_kept_raw_is_written_as_the_typed_writer_would() {
    let hex = "84a16481a27873dc03e8000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f2f404142ffffffffffffff034b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7fcc80cc81cc82cc83cc84cc85cc86cc87cc88cc89cc8acc8bcc8ccc8dcc8ecc8fcc90cc91cc92cc93cc94cc95cc96cc97cc98cc99cc9acc9bcc9ccc9dcc9ecc9fcca0cca1cca2cca3cca4cca5cca6cca7cca8cca9ccaaccabccacccadccaeccafccb0ccb1ccb2ccb3ccb4ccb5ccb6ccb7ccb8ccb9ccbaccbbccbcccbdccbeccbfccc0ccc1ccc2ccc3ccc4ccc5ccc6ccc7ccc8ccc9cccacccbcccccccdcccecccfccd0ccd1ccd2ccd3ccd4ccd560ccd6ccd7ccd8ccd9ccdaccdbccdcccddccdeccdfcce0cce1cce2cce3cce4cce5cce6cce7cce8cee9cceaccebccecccedcceeccefccf0ccf1ccf2ccf3ccf4ccf5ccf6ccf7ccf8ccf9ccfaccfbccfcccfdccfeccffcd0100cd0101cd0102cd0103cd0104cd0105cd0106cd0107cd0108cd0109cd010acd010bcd010ccd010dcd010ecd010fcd0110cd0111cd0112cd0113cd0114cd0115cd0116cd0117cd0118cd0119cd011acd011bcd011ccd011dcd011ecd011fcd0120cd0121cd0122cd0123cd0124012fcd0130cd0131cd0132cd2d33cd0134cd0135cd0136cd0137cd0138cd0139cd013acd013bcd013ccd013dcd013ecd013fcd0140cd0141cd0142cd0143cd0144cd0145cd0146cd0147cd0148cd0149cd014acd014bcd014ccd014dcd014ecd014fcd0150cd0151cd0152cd0153cd0154cd0155cd0156cd0157cd0158cd0159cd015acd015bcd015ccd015dcd015ecd015fcd0160cd0161cd0162cd0163cd0164cd0165cd0166cd0167cd0168cd016069cd016acd016bcd016ccd016dcd016ecd016fcd0170cd0171cd0172cd0173cd0174cd0175cd0176cd0177cd0178cd0179cd017acd017bcd017ccd017dcd017ecd017fcd0180cd0181cd0182cd0183cd0184cd0185cd0186cd0187cd0188cd0189cd018acd018bcd018ccd018dcd018ecd018fcd0190cd0191cd0192cd0193cd0194cd0195cd0196cd0197cd0198cd0199cd019acd019bcd019ccd019dcd019ecd019fcd01a0cd01a1cd01a2cd01a3cd01a4cd01a5cd01a6cd01a7cd01a8cd01a9cd01aacd01abcd01accd01adcd01aecd01afcd01b0cd01b1cd01b2cd01b3cd01b4cd01b5cd01b6cd01b7cd01b8cd01b9cd01bacd01bbcd01bccd01bdcd01becd01bfcd01c0cd01c1cd01c2cd01c3cd01c4cd01c5cd01c6cd01c7cd01c8cd01c9cd01cacd01cbcd01cccd01cdcd01cecd01cfcd01d0cd01d1cd01d2cd03d3cd01d4cd01d5cd01d6cd01d7cd01d8cd01d9cd01dacd01dbcd01dccd01ddcd01decd01dfcd01e0cd01e1cd01e2cd01e3cd01e4cd01e5cd01e6cd01e7cd01e8cd01e9cd01eacd01ebcd01eccd01edcd01eecd01efcd01f0cd01f1cd01f2cd01f3cd01f4cd01f5cd01f6cd01f7cd01f8cd01f9cd01facd01fbcd01fccd01fdcd01fecd01ffcd0200cd0201cd0202cd0203cd0204cd0205cd0206cd0207cd0208cd0209cd020acd020bcd020ccd020dcd020ecd020fcd0210cd0211cd0212cd0213cd0214cd0215cd02b9cd01bacd01bbcd01bccd01bdcd01becd01bfca01c0cd01c1cd01c2cd01c3cd01c4cd01c5cd01c6cd01c7cd01c8cd01c9cd01cacd01cbcd01cccd01cdcd01cecd01cfcd01d0cd01d1cd01d2cd03d3cd01d4cd01d5cd01d6cd01d7cd01d8cd01d9cd01dacd01dbcd01dccd01ddcd01decd01dfcd01e0cd01e1cd01e2cd01e3cd01e4cd01e5cd01e6cd01e7cd01e8cd01e9cd01eacd01ebcd01eccd01edcd01eecd01efcd01f0cd01f1cd01f2cd01f3cd01f4cd01f5cd01f6cd01f7cd01f8cd01f9cd01facd01fbcd01fccd01fdcd01fecd01ffcd0200cd0201cd0202cd0203cd0204cd0205cd0206cd0207cd0208cd0209cd020acd020bcd020ccd020dcd020ecd020fcd0210cd0211cd0212cd0213cd0214cd0215cd0216cd0217cd0218cd0219cd021acd021bcd021ccd021dcd021ecd021fcd0220cd0221cd0222cd0223cd0224cd0225cd0226cd0227cd0228cd0229cd022acd022bcdc6ffffff2dcd022ecd022fcd0230cd0231cd0232cd0233cd0234cd0235cd0236cd0237cd0238cd0239cd023acd023bcd023ccd023dcd023ecd023fcd0240cd0241cd0242cd0243cd0244cd0245cd0246cd0247cd0248cd0249cd024acd21024bcd024ccd024dcd024ecd024fcd0250cd0251cd0252cd0253cd0254cd0255cd0256cd0257cd0258cd0259cd025acd025bcd025ccd025dcd025ecd025fcd0260cd0261cd0262cd0263cd0264cd0265cd0266cd0267cd0268cd0269cd026acd026bcd026ccd026dcd026ecd026fcd0270cd0271cd0272cd0273cd0274cd0275cd0276cd0277cd0278cd0279cd027acd027bcd027ccd027dcd027ecd027fcd0280cd0281cd0282cd0283cd0284cd0285cd0286cd0287cd0288cd0289cd028acd028bcd028ccd028dcd028ecd028fcd0290cd0291cd0292cd0293cd0294cd0295cd0296cd0297cd0298cd0299cd029acd029bcd029ccd029dcd029ecd029fcd02a0cd02a1cd02a2cd02a3cd02a4cd02a5cd02a6cd02a7cd02a8cd02a9cd02aacd02abcd02accd02adcd02aecd02afcd02b0cd02b1cd02b2cd02b3cd02b4cd02b5cd02b6cd02b7cd02b8cd02b9cd02bacd02bbcd02bccd02bdcd02becd02bfcd02c0cd02c1cd02c2cd02c3cd02c4cd02c5cd02c6cd02c7cd02c8cd02c9cd02cacd02cbcd02cccd02cdcd02cecd02cfcd02d0cd02d1cd02d2cd02d3cd02d4cd02d5cd02d6cd02d7cd02d8cd02d9cd02dacd02dbcd02dccd02ddcd02decd02dfcd02e0cd02e1cd02e2cd02e3cd02e4cd02e5cd02e6cd02e7cd02e8cd02e9cd0347cd0348cd0349cd034acd034bcd034ccd034dcd034ecd034fe80300000000000052cd0353cd0354cd0355cd0356cd0357cd0358cd0359cd035acd035bcd035ccd035dcd035ecd035fcd0360cd0361cd0362cd0363cd0364cd0365cd0366cd0367cd0368cd0369cd036acd036bcd036ccd036dcd036ecd036fcd0370cd0371cd0372cd0373cd0374cd0375cd0376cd0377cd0378cd0379cd037acd037bcd037ccd037dcd037ecd037fcd0380cd0381cd0382cd0383cd0384cd0385cd0386cd0387cd0388cd0389cd038acd038bcd038ccd038dcd038ecd038fcd0390cd0391cd0392cd0393cd0394cd0395cd0396cd0397cd0398cd0399cd039acd039bcd039ccd039dcd039ecd039fcd03a0cd03a1cd03a2cd03a3cd03a4cd03a5cd03a6cd03a7cd03a8cd03a9cd03aacd03abcd03accd03adcd03aecd03afcd03b0cd03b1cd03b2cd03b3cd03b4cd03b5cd03b6cd03b7cd03b8cd03b9cd03bacd03bbcd03bccd03bdcd03becd03bfcd03c0cda86170ca00000076cacacacacacacacaffcacacac303c8cd03c9cd03cacd03cbcd03cccd03cdcd03cecd03cfcd03d0cd03d1cd03d2cd03d3cd03d4cd03d5cd03d6cd03d7cd03d8cd03d9cd03dacd03dbcd03dccd03ddcd03decd03dfcd03e0cd03e1cd03e2cd03e3cd03e4cd03e5cd03e6cd03e7a17301a17491a56d61746368a17601";
    encodes_stably(hex);
}

/// A per-node value that does not read typed (here a reserved `0xc1` byte) is kept raw and
/// written in canonical order; a key it held twice (`c`) was written twice, and the next
/// decode read the value typed, kept the last `c` and wrote one — one state, two byte
/// strings (found by `fuzz/fuzz_targets/snapshot.rs` in CI). A value kept raw now keeps
/// the last occurrence of a key, as a typed read does.
#[test]
fn a_key_written_twice_in_a_value_kept_raw_is_written_once() {
    let hex = "87a16481a770617263656c7393a27031a27032a27033a7692f6c6162656c85a16393a27031a27032a27033a16400a16e03a16f93c1ff61a16303a16b83a9743a6c6162656c233101a9743a6c6162656c233402a9743a6c6162656c233303a16e03a17301a17494a56c6162656ca76c6162656c2331a76c6162656c2332a76c6162656c2333a17601";
    encodes_stably(hex);
}

/// Decodes the snapshot bytes `hex` (leniently), and checks that what it writes decodes
/// to what writes the same bytes again.
fn encodes_stably(hex: &str) {
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let first = Snapshot::decode(&bytes).expect("decodes leniently");
    let once = first.encode();
    let again = Snapshot::decode(&once).expect("re-decodes");
    assert_eq!(again, first, "the written bytes decode to another state");
    assert_eq!(again.encode(), once);
}

#[test]
fn a_known_key_that_reads_typed_once_canonical_is_read_typed() {
    // {"d": {"r": bin8 [], "r": nil}}: the variables with a key written twice, the
    // dropped occurrence a binary no variable can hold. CI drew it.
    encodes_stably("81a16482a172c400a172c0");
}
