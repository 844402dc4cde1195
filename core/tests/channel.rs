//! Channel calls (SPEC C1–C9) in the pure core: one test per race the retry design names,
//! each through the public step and the simulator.

mod common;

use common::{effects, last, model, run_scenario};
use qflow_core::{step, verdict, Attempt, CallKey, Effect, Input, Snapshot, Status, Verdict};
use qflow_loader::model::Definition;

/// A channel call with a retry policy (3 attempts, 5 s backoff) and a 30 s timeout.
fn charge(retry: bool) -> Definition {
    let policy = if retry {
        r#"<q:retry maxAttempts="3" initialInterval="PT5S" jitter="none"/>"#
    } else {
        ""
    };
    model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="charge"/>
      <serviceTask id="charge" q:channel="payments">
        <extensionElements>{policy}<q:timeout duration="PT30S"/>
          <q:input target="amount" source="order.amount"/>
        </extensionElements>
      </serviceTask>
      <sequenceFlow id="f1" sourceRef="charge" targetRef="e"/><endEvent id="e"/>"#
    ))
}

fn at(n: u32) -> Attempt {
    Attempt::new(n).unwrap()
}

/// `(instant, key, call id, attempt)` of every request the run emitted.
fn requests(trace: &qflow_core::sim::Trace) -> Vec<(i64, String, String, u32)> {
    effects(trace)
        .into_iter()
        .filter_map(|(at, e)| match e {
            Effect::SendRequest {
                key,
                call_id,
                attempt,
                ..
            } => Some((at, key, call_id, attempt.get())),
            _ => None,
        })
        .collect()
}

fn started(def: &Definition, id: &str) -> Snapshot {
    let vars = serde_json::json!({"order": {"amount": 12}});
    let vars = vars.as_object().unwrap().clone().into_iter().collect();
    step(
        def,
        id,
        Snapshot::new(),
        Input::Start {
            variables: vars,
            start: None,
        },
        0,
    )
    .unwrap()
    .snapshot
}

#[test]
fn a_request_carries_the_mapped_inputs_a_fresh_key_per_attempt_and_one_call_id() {
    let def = charge(true);
    let trace = run_scenario(
        &def,
        r#"{"instance": "o-1", "variables": {"order": {"amount": 12}},
            "channels": {"charge": [{"answer": "never"}, {"answer": "never"},
                                    {"answer": "ok", "outputs": {"receipt": "r"}}]}}"#,
    );
    let sent = requests(&trace);
    assert_eq!(
        sent,
        vec![
            (0, "o-1/1/1".into(), "o-1/1".into(), 1),
            (35_000, "o-1/1/2".into(), "o-1/1".into(), 2),
            (75_000, "o-1/1/3".into(), "o-1/1".into(), 3),
        ],
        "one call id, a fresh key per attempt"
    );
    let Some(Effect::SendRequest { body, channel, .. }) = trace.steps[0]
        .effects
        .iter()
        .find(|e| matches!(e, Effect::SendRequest { .. }))
    else {
        panic!("no request")
    };
    assert_eq!(channel, "payments");
    assert_eq!(body.get("amount"), Some(&serde_json::json!(12)));
    assert_eq!(last(&trace).status(), Status::Completed);
    assert_eq!(last(&trace).variables().get("receipt"), Some(&"r".into()));
}

#[test]
fn every_dead_attempt_is_withdrawn_in_the_commit_that_parks_it() {
    let def = charge(true);
    let trace = run_scenario(
        &def,
        r#"{"variables": {"order": {"amount": 1}},
            "channels": {"charge": [{"answer": "never"}, {"answer": "poison", "after_ms": 100},
                                    {"answer": "ok"}]}}"#,
    );
    for s in &trace.steps {
        let parks = s
            .effects
            .iter()
            .any(|e| matches!(e, Effect::ArmTimer { name, .. } if name.as_str() == "r:charge"));
        let withdraws = s
            .effects
            .iter()
            .any(|e| matches!(e, Effect::WithdrawRequests { node } if node == "charge"));
        assert_eq!(parks, withdraws, "step {}: {:?}", s.seq, s.effects);
    }
    let marker_classes: Vec<String> = trace
        .steps
        .iter()
        .filter_map(|s| {
            let snap = Snapshot::decode(&s.snapshot).unwrap();
            snap.marker("charge").map(str::to_owned)
        })
        .collect();
    assert_eq!(marker_classes, ["timeout", "poisoned"]);
    assert_eq!(last(&trace).status(), Status::Completed);
}

#[test]
fn a_late_answer_to_a_dead_attempt_is_superseded_and_does_not_resume() {
    let def = charge(true);
    let snap = started(&def, "i");
    // Attempt 1 times out: a backoff window.
    let fired = step(
        &def,
        "i",
        snap.clone(),
        Input::TimerFired {
            name: "t:charge".parse().unwrap(),
            incarnation: 2,
        },
        30_000,
    )
    .unwrap();
    let parked = fired.snapshot;
    assert_eq!(parked.marker("charge"), Some("timeout"));
    let (v, why) = verdict(&def, &parked, 1, at(1));
    assert_eq!(v, Verdict::Superseded, "{why}");
    assert!(why.contains("pending"), "{why}");
    let late = Input::ChannelAnswered {
        call: 1,
        attempt: at(1),
        variables: Default::default(),
    };
    let out = step(&def, "i", parked.clone(), late.clone(), 31_000).unwrap();
    assert_eq!(out.snapshot, parked, "nothing changes");
    assert!(
        matches!(&out.effects[..], [Effect::Stale { reason }] if reason.starts_with("superseded:"))
    );

    // The re-drive: attempt 2 in flight. The late answer to attempt 1 is still refused,
    // the answer to attempt 2 resumes.
    let redriven = step(
        &def,
        "i",
        parked,
        Input::TimerFired {
            name: "r:charge".parse().unwrap(),
            incarnation: 3,
        },
        35_000,
    )
    .unwrap()
    .snapshot;
    assert_eq!(verdict(&def, &redriven, 1, at(1)).0, Verdict::Superseded);
    let out = step(&def, "i", redriven.clone(), late, 36_000).unwrap();
    assert_eq!(out.snapshot, redriven);
    assert_eq!(verdict(&def, &redriven, 1, at(2)).0, Verdict::Resumed);
    let live = Input::ChannelAnswered {
        call: 1,
        attempt: at(2),
        variables: Default::default(),
    };
    let done = step(&def, "i", redriven, live.clone(), 37_000)
        .unwrap()
        .snapshot;
    assert_eq!(done.status(), Status::Completed);
    assert_eq!(verdict(&def, &done, 1, at(2)).0, Verdict::AlreadyCompleted);
}

#[test]
fn a_poison_of_a_dead_attempt_spends_no_budget() {
    let def = charge(true);
    let snap = started(&def, "i");
    let parked = step(
        &def,
        "i",
        snap,
        Input::TimerFired {
            name: "t:charge".parse().unwrap(),
            incarnation: 2,
        },
        30_000,
    )
    .unwrap()
    .snapshot;
    let attempts_before = parked.attempt("charge");
    let poison = Input::ChannelPoisoned {
        call: 1,
        attempt: at(1),
        message: String::new(),
    };
    let out = step(&def, "i", parked.clone(), poison, 31_000).unwrap();
    assert_eq!(out.snapshot, parked);
    assert_eq!(out.snapshot.attempt("charge"), attempts_before);
    // The live attempt's poison does spend: attempt 2 fails, attempt 3 is parked.
    let redriven = step(
        &def,
        "i",
        parked,
        Input::TimerFired {
            name: "r:charge".parse().unwrap(),
            incarnation: 3,
        },
        35_000,
    )
    .unwrap()
    .snapshot;
    let live = Input::ChannelPoisoned {
        call: 1,
        attempt: at(2),
        message: "8 deliveries refused".into(),
    };
    let out = step(&def, "i", redriven, live, 36_000).unwrap();
    assert_eq!(out.snapshot.marker("charge"), Some("poisoned"));
    assert_eq!(out.snapshot.attempt("charge"), 3);
    assert!(out.effects.iter().any(|e| matches!(
        e,
        Effect::AttemptFinished { code: Some(c), message: Some(m), .. }
            if c == "POISONED" && m == "8 deliveries refused"
    )));
}

#[test]
fn a_due_park_timer_on_an_attempt_in_flight_is_stale_residue() {
    let def = charge(true);
    let snap = started(&def, "i");
    // No backoff window: any `r:` row is residue, whatever incarnation it claims.
    for incarnation in [1, 2, 3] {
        let out = step(
            &def,
            "i",
            snap.clone(),
            Input::TimerFired {
                name: "r:charge".parse().unwrap(),
                incarnation,
            },
            1_000,
        )
        .unwrap();
        assert_eq!(out.snapshot, snap);
        assert!(matches!(&out.effects[..], [Effect::Stale { .. }]));
    }
}

#[test]
fn a_lost_poison_wake_is_recovered_by_the_timeout() {
    let def = charge(true);
    let trace = run_scenario(
        &def,
        r#"{"variables": {"order": {"amount": 1}},
            "channels": {"charge": [{"answer": "poison", "after_ms": 100, "wake": false},
                                    {"answer": "ok"}]}}"#,
    );
    let inputs: Vec<String> = trace
        .steps
        .iter()
        .map(|s| serde_json::to_value(&s.input).unwrap()["type"].to_string())
        .collect();
    assert!(!inputs.iter().any(|t| t.contains("poisoned")), "{inputs:?}");
    let snap = Snapshot::decode(&trace.steps[1].snapshot).unwrap();
    assert_eq!(trace.steps[1].at_ms, 30_000, "the timeout found out");
    assert_eq!(snap.marker("charge"), Some("timeout"));
    assert_eq!(last(&trace).status(), Status::Completed);
}

#[test]
fn re_adoption_emits_nothing_for_a_call_in_flight() {
    let def = charge(true);
    let snap = started(&def, "i");
    let out = step(&def, "i", snap.clone(), Input::Redrive, 1_000).unwrap();
    assert!(
        !out.effects
            .iter()
            .any(|e| matches!(e, Effect::SendRequest { .. })),
        "{:?}",
        out.effects
    );
    assert_eq!(out.snapshot.calls(), snap.calls());
    assert!(
        !qflow_core::any_attempt_in_flight(&def, &snap),
        "no lease needed"
    );
}

#[test]
fn an_input_mapping_that_cannot_evaluate_fails_the_instance_and_sends_nothing() {
    let def = charge(true);
    let trace = run_scenario(&def, r#"{"variables": {}}"#);
    assert!(requests(&trace).is_empty());
    let snap = last(&trace);
    assert_eq!(snap.status(), Status::Failed);
    assert_eq!(snap.failure().unwrap().code, "EXPRESSION_FAILED");
}

#[test]
fn a_poison_without_a_policy_fails_the_instance_and_withdraws_the_request() {
    let def = charge(false);
    let snap = started(&def, "i");
    let poison = Input::ChannelPoisoned {
        call: 1,
        attempt: at(1),
        message: String::new(),
    };
    let out = step(&def, "i", snap, poison, 4_000).unwrap();
    assert_eq!(out.snapshot.status(), Status::Failed);
    assert_eq!(out.snapshot.failure().unwrap().code, "POISONED");
    assert!(out
        .effects
        .iter()
        .any(|e| matches!(e, Effect::WithdrawRequests { node } if node == "charge")));
    let (v, _) = verdict(&def, &out.snapshot, 1, at(1));
    assert_eq!(v, Verdict::InstanceFailed);
}

#[test]
fn entering_the_task_again_is_a_new_call() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="ask"/>
      <serviceTask id="ask" q:channel="quotes">
        <extensionElements><q:timeout duration="PT10S"/></extensionElements>
      </serviceTask>
      <sequenceFlow id="f1" sourceRef="ask" targetRef="x"/>
      <exclusiveGateway id="x" default="done"/>
      <sequenceFlow id="again" sourceRef="x" targetRef="ask">
        <conditionExpression>!stop</conditionExpression>
      </sequenceFlow>
      <sequenceFlow id="done" sourceRef="x" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(
        &def,
        r#"{"instance": "q", "variables": {"stop": false}, "channels": {"ask": [{"answer": "ok", "after_ms": 5}]},
            "events": [{"event": "channel", "at_ms": 7,
                        "input": {"type": "channel_answered", "call": 3, "attempt": 1,
                                  "variables": {"stop": true}}}]}"#,
    );
    let keys: Vec<String> = requests(&trace).into_iter().map(|r| r.1).collect();
    assert_eq!(keys[0], "q/1/1");
    assert_eq!(
        keys[1], "q/3/1",
        "the loop back drew call 3 (2 was the timeout's arm)"
    );
    assert!(keys.iter().all(|k| k.ends_with("/1")));
    let mut uniq = keys.clone();
    uniq.dedup();
    assert_eq!(uniq, keys, "no key twice");
    assert!(CallKey::parse(&keys[1]).is_some());
}
