//! Call activities in the core: the child's start and cancel asked for as effects, its
//! end taken through `ChildEnded`, a called instance reporting its end, and the stale
//! inputs after the wait is over (`docs/call-activities.md`).

mod common;

use common::model;
use qflow_core::{step, ChildOutcome, Effect, Input, ParentLink, Snapshot, Status};
use serde_json::json;

fn vars(v: serde_json::Value) -> qflow_core::Variables {
    serde_json::from_value(v).expect("an object")
}

fn start(def: &qflow_core::Definition, id: &str, v: serde_json::Value) -> qflow_core::Step {
    step(
        def,
        id,
        Snapshot::new(),
        Input::Start {
            variables: vars(v),
            start: None,
        },
        0,
    )
    .expect("starts")
}

fn started_child(effects: &[Effect]) -> Option<(String, u32, String)> {
    effects.iter().find_map(|e| match e {
        Effect::StartChild {
            node, call, key, ..
        } => Some((node.clone(), *call, key.clone())),
        _ => None,
    })
}

fn cancelled(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::CancelChild { key, .. } => Some(key.clone()),
            _ => None,
        })
        .collect()
}

const CALL: &str = r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="call"/>
  <callActivity id="call" calledElement="child">
    <extensionElements>
      <q:input target="who" source="name"/>
      <q:output target="score" source="result.score"/>
    </extensionElements>
  </callActivity>
  <sequenceFlow id="f1" sourceRef="call" targetRef="e"/><endEvent id="e"/>"#;

#[test]
fn an_attempt_starts_one_child_with_the_inputs_and_its_end_is_taken_once() {
    let def = model(CALL);
    let first = start(&def, "p-1", json!({"name": "Ada", "secret": 1}));
    let [Effect::StartChild {
        node,
        call,
        attempt,
        key,
        process,
        version,
        variables,
    }] = first.effects.as_slice()
    else {
        panic!("one StartChild: {:?}", first.effects);
    };
    assert_eq!((node.as_str(), attempt.get()), ("call", 1));
    assert_eq!((process.as_str(), *version), ("child", None));
    assert_eq!(key, &format!("p-1/{call}"));
    assert_eq!(variables, &vars(json!({"who": "Ada"})));
    assert_eq!(first.snapshot.children()["call"], *call);

    // A report naming another call is stale and changes no byte.
    let before = first.snapshot.encode();
    let wrong = step(
        &def,
        "p-1",
        first.snapshot.clone(),
        Input::ChildEnded {
            node: "call".into(),
            call: call + 7,
            outcome: ChildOutcome::Completed {
                variables: vars(json!({"score": 1})),
            },
        },
        10,
    )
    .unwrap();
    assert!(matches!(wrong.effects.as_slice(), [Effect::Stale { .. }]));
    assert_eq!(wrong.snapshot.encode(), before);

    let ended = Input::ChildEnded {
        node: "call".into(),
        call: *call,
        outcome: ChildOutcome::Completed {
            variables: vars(json!({"score": 9, "noise": true})),
        },
    };
    let done = step(&def, "p-1", first.snapshot.clone(), ended.clone(), 20).unwrap();
    assert_eq!(done.snapshot.status(), Status::Completed);
    assert_eq!(done.snapshot.variables()["score"], json!(9));
    assert!(!done.snapshot.variables().contains_key("noise"));
    assert!(done.snapshot.children().is_empty());
    // The same report again, after the instance moved on: stale.
    let again = step(&def, "p-1", done.snapshot.clone(), ended, 30).unwrap();
    assert!(matches!(again.effects.as_slice(), [Effect::Stale { .. }]));
}

#[test]
fn a_wait_that_ends_without_its_child_cancels_it_and_one_asked_for_in_the_same_step_is_never_started(
) {
    // An interrupting timer boundary ends the wait: the running child is cancelled.
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="call"/>
      <callActivity id="call" calledElement="child"/>
      <boundaryEvent id="late" attachedToRef="call"><timerEventDefinition><timeDuration>PT1M</timeDuration></timerEventDefinition></boundaryEvent>
      <sequenceFlow id="f1" sourceRef="call" targetRef="e"/><endEvent id="e"/>
      <sequenceFlow id="f2" sourceRef="late" targetRef="e2"/><endEvent id="e2"/>"#,
    );
    let first = start(&def, "p-2", json!({}));
    let (_, call, key) = started_child(&first.effects).expect("a child");
    let fired = Input::TimerFired {
        name: "b:late".parse().unwrap(),
        incarnation: 1,
    };
    let timed_out = step(&def, "p-2", first.snapshot, fired, 60_000).unwrap();
    assert_eq!(timed_out.snapshot.status(), Status::Completed);
    assert_eq!(cancelled(&timed_out.effects), vec![key]);
    assert!(timed_out.snapshot.children().is_empty());
    let late = Input::ChildEnded {
        node: "call".into(),
        call,
        outcome: ChildOutcome::Completed {
            variables: Default::default(),
        },
    };
    let stale = step(&def, "p-2", timed_out.snapshot, late, 70_000).unwrap();
    assert!(matches!(stale.effects.as_slice(), [Effect::Stale { .. }]));

    // The call entered and ended by a terminate end in the same step: no child is asked
    // for, so none needs cancelling.
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
      <parallelGateway id="split"/>
      <sequenceFlow id="f1" sourceRef="split" targetRef="call"/>
      <sequenceFlow id="f2" sourceRef="split" targetRef="stop"/>
      <callActivity id="call" calledElement="child"/>
      <sequenceFlow id="f3" sourceRef="call" targetRef="e"/><endEvent id="e"/>
      <endEvent id="stop"><terminateEventDefinition/></endEvent>"#,
    );
    let both = start(&def, "p-3", json!({}));
    assert_eq!(both.snapshot.status(), Status::Completed);
    assert_eq!(started_child(&both.effects), None, "{:?}", both.effects);
    assert!(cancelled(&both.effects).is_empty());
    assert!(both.snapshot.children().is_empty());
}

#[test]
fn a_failed_child_fails_the_attempt_and_a_resume_starts_a_new_child() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="call"/>
      <callActivity id="call" calledElement="child"/>
      <sequenceFlow id="f1" sourceRef="call" targetRef="e"/><endEvent id="e"/>"#,
    );
    let first = start(&def, "p-4", json!({}));
    let (_, call, _) = started_child(&first.effects).unwrap();
    let failed = Input::ChildEnded {
        node: "call".into(),
        call,
        outcome: ChildOutcome::Failed {
            code: "HANDLER_FAILED".into(),
            message: "boom".into(),
        },
    };
    let failed = step(&def, "p-4", first.snapshot, failed, 5).unwrap();
    assert_eq!(failed.snapshot.status(), Status::Failed);
    let failure = failed.snapshot.failure().unwrap();
    assert_eq!(failure.code, "CALLED_INSTANCE_FAILED");
    assert_eq!(failure.node.as_deref(), Some("call"));
    // The child is over already: nothing to cancel.
    assert!(cancelled(&failed.effects).is_empty());

    let resumed = Input::Resume {
        budget: Default::default(),
    };
    let resumed = step(&def, "p-4", failed.snapshot, resumed, 9).unwrap();
    let (_, again, _) = started_child(&resumed.effects).expect("a new child");
    assert!(again > call);
    let [Effect::StartChild { attempt, .. }] = &resumed.effects[..]
        .iter()
        .filter(|e| matches!(e, Effect::StartChild { .. }))
        .cloned()
        .collect::<Vec<_>>()[..]
    else {
        unreachable!()
    };
    assert_eq!(attempt.get(), 2);
}

#[test]
fn a_parent_failed_elsewhere_cancels_its_children_and_its_resume_starts_them_again() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
      <parallelGateway id="split"/>
      <sequenceFlow id="f1" sourceRef="split" targetRef="call"/>
      <sequenceFlow id="f2" sourceRef="split" targetRef="work"/>
      <callActivity id="call" calledElement="child"/>
      <serviceTask id="work" q:task="work"/>
      <sequenceFlow id="f3" sourceRef="call" targetRef="join"/>
      <sequenceFlow id="f4" sourceRef="work" targetRef="join"/>
      <parallelGateway id="join"/><sequenceFlow id="f5" sourceRef="join" targetRef="e"/><endEvent id="e"/>"#,
    );
    let first = start(&def, "p-5", json!({}));
    let (_, call, key) = started_child(&first.effects).unwrap();
    let failed = Input::TaskFailed {
        node: "work".into(),
        attempt: qflow_core::Attempt::FIRST,
        kind: Default::default(),
        code: "HANDLER_FAILED".into(),
        message: String::new(),
    };
    let failed = step(&def, "p-5", first.snapshot, failed, 5).unwrap();
    assert_eq!(failed.snapshot.status(), Status::Failed);
    assert_eq!(cancelled(&failed.effects), vec![key]);
    // Its report, arriving at the FAILED parent, changes nothing.
    let late = Input::ChildEnded {
        node: "call".into(),
        call,
        outcome: ChildOutcome::Failed {
            code: "CANCELLED".into(),
            message: String::new(),
        },
    };
    let stale = step(&def, "p-5", failed.snapshot.clone(), late, 6).unwrap();
    assert!(matches!(stale.effects.as_slice(), [Effect::Stale { .. }]));
    let resumed = Input::Resume {
        budget: Default::default(),
    };
    let resumed = step(&def, "p-5", failed.snapshot, resumed, 9).unwrap();
    let (_, again, _) = started_child(&resumed.effects).expect("the child again");
    assert!(again > call);
    assert_eq!(resumed.snapshot.children()["call"], again);
}

#[test]
fn a_bpmn_error_from_the_child_is_thrown_at_the_call_activity() {
    let def = common::model_with(
        r#"<error id="no" errorCode="NO"/>"#,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="call"/>
      <callActivity id="call" calledElement="child"/>
      <boundaryEvent id="onNo" attachedToRef="call"><errorEventDefinition errorRef="no"/></boundaryEvent>
      <sequenceFlow id="f1" sourceRef="call" targetRef="e"/><endEvent id="e"/>
      <sequenceFlow id="f2" sourceRef="onNo" targetRef="e2"/><endEvent id="e2"/>"#,
    );
    let first = start(&def, "p-6", json!({}));
    let (_, call, _) = started_child(&first.effects).unwrap();
    let thrown = |code: &str| Input::ChildEnded {
        node: "call".into(),
        call,
        outcome: ChildOutcome::BpmnError {
            code: Some(code.into()),
            message: String::new(),
        },
    };
    let caught = step(&def, "p-6", first.snapshot.clone(), thrown("NO"), 5).unwrap();
    assert_eq!(caught.snapshot.status(), Status::Completed);
    let uncaught = step(&def, "p-6", first.snapshot, thrown("OTHER"), 5).unwrap();
    let failure = uncaught.snapshot.failure().unwrap();
    assert_eq!(failure.code, "UNCAUGHT_BPMN_ERROR");
    assert_eq!(failure.detail.as_deref(), Some("OTHER"));
}

#[test]
fn a_called_instance_reports_every_way_it_ends_and_again_after_a_resume() {
    let def = common::model_with(
        r#"<error id="no" errorCode="NO"/>"#,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="t"/>
      <serviceTask id="t" q:task="t"/>
      <boundaryEvent id="onNo" attachedToRef="t"><errorEventDefinition errorRef="no"/></boundaryEvent>
      <sequenceFlow id="f1" sourceRef="t" targetRef="e"/><endEvent id="e"/>
      <sequenceFlow id="f2" sourceRef="onNo" targetRef="bad"/>
      <endEvent id="bad"><errorEventDefinition errorRef="no"/></endEvent>"#,
    );
    let parent = ParentLink {
        instance: "parent-1".into(),
        node: "call".into(),
        call: 3,
    };
    let begun = step(
        &def,
        "child-1",
        Snapshot::new(),
        Input::StartCalled {
            variables: vars(json!({"x": 1})),
            parent: parent.clone(),
        },
        0,
    )
    .unwrap();
    assert_eq!(begun.snapshot.parent(), Some(&parent));
    // The link survives the persistence round trip.
    let snap = Snapshot::decode(&begun.snapshot.encode()).unwrap();
    assert_eq!(snap.parent(), Some(&parent));
    assert!(!begun
        .effects
        .iter()
        .any(|e| matches!(e, Effect::NotifyParent { .. })));
    let attempt = qflow_core::Attempt::FIRST;
    let notified = |s: &qflow_core::Step| -> Vec<(ParentLink, String, ChildOutcome)> {
        s.effects
            .iter()
            .filter_map(|e| match e {
                Effect::NotifyParent {
                    parent,
                    key,
                    outcome,
                } => Some((parent.clone(), key.clone(), outcome.clone())),
                _ => None,
            })
            .collect()
    };

    let ok = Input::TaskCompleted {
        node: "t".into(),
        attempt,
        outputs: vars(json!({"y": 2})),
    };
    let completed = step(&def, "child-1", snap.clone(), ok, 5).unwrap();
    let [(link, _, ChildOutcome::Completed { variables })] = &notified(&completed)[..] else {
        panic!("{:?}", completed.effects)
    };
    assert_eq!(link, &parent);
    assert_eq!(variables, &vars(json!({"x": 1, "y": 2})));

    let error = Input::TaskBpmnError {
        node: "t".into(),
        attempt,
        code: "NO".into(),
        message: String::new(),
    };
    let thrown = step(&def, "child-1", snap.clone(), error, 5).unwrap();
    let [(_, _, ChildOutcome::BpmnError { code, .. })] = &notified(&thrown)[..] else {
        panic!("{:?}", thrown.effects)
    };
    assert_eq!(code.as_deref(), Some("NO"));
    // Its error went to its call activity: it ends there (cancelled, as Zeebe terminates
    // it), not FAILED with an incident nobody would resolve.
    assert_eq!(thrown.snapshot.status(), Status::Cancelled);
    assert!(thrown.snapshot.failure().is_none());
    assert!(!thrown
        .effects
        .iter()
        .any(|e| matches!(e, Effect::OpenIncident { .. } | Effect::Failed { .. })));

    let cancel = step(&def, "child-1", snap.clone(), Input::Cancel, 5).unwrap();
    let [(_, _, ChildOutcome::Failed { code, .. })] = &notified(&cancel)[..] else {
        panic!("{:?}", cancel.effects)
    };
    assert_eq!(code, "CANCELLED");

    let fail = Input::TaskFailed {
        node: "t".into(),
        attempt,
        kind: Default::default(),
        code: "HANDLER_FAILED".into(),
        message: "down".into(),
    };
    let failed = step(&def, "child-1", snap, fail, 5).unwrap();
    let [(_, first_key, ChildOutcome::Failed { code, message })] = &notified(&failed)[..] else {
        panic!("{:?}", failed.effects)
    };
    assert_eq!(
        (code.as_str(), message.as_str()),
        ("HANDLER_FAILED", "down")
    );
    // Resumed and completed, it reports again, under a key of its own.
    let resumed = Input::Resume {
        budget: Default::default(),
    };
    let resumed = step(&def, "child-1", failed.snapshot, resumed, 9).unwrap();
    assert!(notified(&resumed).is_empty());
    let ok = Input::TaskCompleted {
        node: "t".into(),
        attempt: attempt.next(),
        outputs: Default::default(),
    };
    let completed = step(&def, "child-1", resumed.snapshot, ok, 10).unwrap();
    let [(_, second_key, ChildOutcome::Completed { .. })] = &notified(&completed)[..] else {
        panic!("{:?}", completed.effects)
    };
    assert_ne!(first_key, second_key);
}

#[test]
fn an_instance_is_not_migrated_while_a_called_instance_runs() {
    let def = model(CALL);
    let first = start(&def, "p-7", json!({"name": "Ada"}));
    let migrate = Input::Migrate {
        mapping: Default::default(),
        timers: Default::default(),
        user_tasks: Vec::new(),
    };
    let refused = step(&def, "p-7", first.snapshot, migrate, 5).unwrap();
    let [Effect::Stale { reason }] = refused.effects.as_slice() else {
        panic!("{:?}", refused.effects)
    };
    assert!(reason.contains("called instance"), "{reason}");
}

#[test]
fn zeebe_propagate_all_child_variables_false_brings_back_only_the_output_mappings() {
    let with = |outputs: &str| {
        model(&format!(
            r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="call"/>
      <callActivity id="call" xmlns:zeebe="http://camunda.org/schema/zeebe/1.0">
        <extensionElements>
          <zeebe:calledElement processId="child" propagateAllChildVariables="false"/>
          {outputs}
        </extensionElements>
      </callActivity>
      <sequenceFlow id="f1" sourceRef="call" targetRef="e"/><endEvent id="e"/>"#
        ))
    };
    let ended = |def: &qflow_core::Definition| {
        let first = start(def, "p-8", json!({"keep": 1}));
        let (_, call, _) = started_child(&first.effects).unwrap();
        let input = Input::ChildEnded {
            node: "call".into(),
            call,
            outcome: ChildOutcome::Completed {
                variables: vars(json!({"a": 1, "b": 2})),
            },
        };
        step(def, "p-8", first.snapshot, input, 5).unwrap().snapshot
    };
    let none = ended(&with(""));
    assert_eq!(none.status(), Status::Completed);
    assert_eq!(none.variables(), &vars(json!({"keep": 1})));
    let mapped = ended(&with(
        r#"<zeebe:ioMapping><zeebe:output source="=a" target="fromChild"/></zeebe:ioMapping>"#,
    ));
    assert_eq!(
        mapped.variables(),
        &vars(json!({"keep": 1, "fromChild": 1}))
    );
}

#[test]
fn an_escalation_the_child_does_not_catch_is_raised_at_the_call_activity() {
    // The child: an escalation end event on one branch, a task on the other.
    let child = common::model_with(
        r#"<escalation id="late" escalationCode="LATE"/>"#,
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
      <parallelGateway id="split"/>
      <sequenceFlow id="f1" sourceRef="split" targetRef="warn"/>
      <sequenceFlow id="f2" sourceRef="split" targetRef="t"/>
      <endEvent id="warn"><escalationEventDefinition escalationRef="late"/></endEvent>
      <serviceTask id="t" q:task="t"/>
      <sequenceFlow id="f3" sourceRef="t" targetRef="e"/><endEvent id="e"/>"#,
    );
    let parent = ParentLink {
        instance: "parent-9".into(),
        node: "call".into(),
        call: 1,
    };
    let begun = step(
        &child,
        "child-9",
        Snapshot::new(),
        Input::StartCalled {
            variables: Default::default(),
            parent: parent.clone(),
        },
        0,
    )
    .unwrap();
    let raised: Vec<_> = begun
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::NotifyParent { outcome, .. } => Some(outcome.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        raised,
        vec![ChildOutcome::Escalated {
            code: Some("LATE".into())
        }]
    );
    assert_eq!(begun.snapshot.status(), Status::Running);

    // The parent: a non-interrupting escalation boundary takes it and the call goes on
    // waiting; an interrupting one ends the wait and cancels the child.
    let parent_model = |cancel: bool| {
        common::model_with(
            r#"<escalation id="late" escalationCode="LATE"/>"#,
            &format!(
                r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="call"/>
      <callActivity id="call" calledElement="child"/>
      <boundaryEvent id="onLate" attachedToRef="call" cancelActivity="{cancel}"><escalationEventDefinition escalationRef="late"/></boundaryEvent>
      <sequenceFlow id="f1" sourceRef="call" targetRef="e"/><endEvent id="e"/>
      <sequenceFlow id="f2" sourceRef="onLate" targetRef="u"/><userTask id="u"/>
      <sequenceFlow id="f3" sourceRef="u" targetRef="e2"/><endEvent id="e2"/>"#
            ),
        )
    };
    for cancel in [false, true] {
        let def = parent_model(cancel);
        let first = start(&def, "parent-9", json!({}));
        let (_, call, key) = started_child(&first.effects).unwrap();
        let input = Input::ChildEnded {
            node: "call".into(),
            call,
            outcome: ChildOutcome::Escalated {
                code: Some("LATE".into()),
            },
        };
        let after = step(&def, "parent-9", first.snapshot, input, 5).unwrap();
        let tokens = after.snapshot.tokens().to_vec();
        if cancel {
            assert_eq!(tokens, vec!["u".to_owned()]);
            assert_eq!(cancelled(&after.effects), vec![key]);
        } else {
            assert_eq!(tokens, vec!["call".to_owned(), "u".to_owned()]);
            assert_eq!(after.snapshot.children()["call"], call);
            assert!(cancelled(&after.effects).is_empty());
        }
    }
}

#[test]
fn a_child_too_large_to_merge_fails_the_attempt() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="call"/>
      <callActivity id="call" calledElement="child"/>
      <sequenceFlow id="f1" sourceRef="call" targetRef="e"/><endEvent id="e"/>"#,
    );
    let first = start(&def, "p-10", json!({}));
    let (_, call, _) = started_child(&first.effects).unwrap();
    // Its variables grew over many steps; merged whole they are over the bounds.
    let big = "x".repeat(5 << 20);
    let input = Input::ChildEnded {
        node: "call".into(),
        call,
        outcome: ChildOutcome::Completed {
            variables: vars(json!({ "blob": big })),
        },
    };
    let refused = step(&def, "p-10", first.snapshot, input, 5).expect("a step, not an error");
    let failure = refused.snapshot.failure().expect("FAILED");
    assert_eq!(failure.code, "OUTPUTS_REFUSED");
    assert!(!refused.snapshot.variables().contains_key("blob"));
}

#[test]
fn two_tokens_in_one_call_activity_are_two_instances_each_with_its_own_child() {
    // Two branches into one call activity (E9): the second token is the activity instance
    // `call@2`, with a call number, a child and a key of its own; each end is taken by
    // its own instance, in either order.
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
      <parallelGateway id="split"/>
      <sequenceFlow id="f1" sourceRef="split" targetRef="call"/>
      <sequenceFlow id="f2" sourceRef="split" targetRef="call"/>
      <callActivity id="call" calledElement="child"/>
      <sequenceFlow id="f3" sourceRef="call" targetRef="e"/><endEvent id="e"/>"#,
    );
    let both = start(&def, "p-11", json!({}));
    assert_eq!(both.snapshot.failure(), None);
    let children: Vec<(String, u32, String)> = both
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::StartChild {
                node, call, key, ..
            } => Some((node.clone(), *call, key.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(children.len(), 2, "{:?}", both.effects);
    assert_eq!(
        (children[0].0.as_str(), children[1].0.as_str()),
        ("call", "call@2")
    );
    assert_ne!(children[0].2, children[1].2, "each child has its own key");
    let end = |snap: Snapshot, (node, call, _): &(String, u32, String), at| {
        let input = Input::ChildEnded {
            node: node.clone(),
            call: *call,
            outcome: ChildOutcome::Completed {
                variables: vars(json!({ node.clone(): true })),
            },
        };
        step(&def, "p-11", snap, input, at).expect("a step")
    };
    // The second instance's child ends first; the first still waits on its own.
    let second = end(both.snapshot, &children[1], 5);
    assert_eq!(second.snapshot.status(), qflow_core::Status::Running);
    assert_eq!(second.snapshot.tokens(), ["call"]);
    // A repeated report of the second child is stale: its instance is gone.
    let again = end(second.snapshot.clone(), &children[1], 6);
    assert!(matches!(again.effects.as_slice(), [Effect::Stale { .. }]));
    let first = end(second.snapshot, &children[0], 7);
    assert_eq!(first.snapshot.status(), qflow_core::Status::Completed);
    assert_eq!(
        first.snapshot.variables().get("call@2"),
        Some(&json!(true)),
        "each child's variables came back"
    );
}
