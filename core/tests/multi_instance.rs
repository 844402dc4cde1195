//! Multi-instance activities in the core: inner instances named `<body>#<k>` with their
//! own attempts, locals and task-list rows; outputs in input order; a completion
//! condition cancelling the rest; an empty collection completing at once; a body's
//! interruption ending every inner instance; inputs for what was ended stale; counts and
//! collections that do not evaluate failing the instance. The golden cases pin the
//! bytes of the main shapes (`golden/cases/multi_instance_*`).

mod common;

use common::model;
use proptest::prelude::*;
use qflow_core::path::PathEvent;
use qflow_core::{step, step_traced, Attempt, Effect, FailureKind, Input, Snapshot, Status};
use qflow_loader::model::{Definition, Variables};
use serde_json::{json, Value};

/// start → `inner` (with `chars` as its characteristics' attributes and `children`
/// inside them) → end.
fn mi_model(task: &str, chars: &str, children: &str) -> Definition {
    model(&format!(
        r#"<startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="work"/>
    {task}
    <sequenceFlow id="f2" sourceRef="work" targetRef="e"/>
    <endEvent id="e"/>"#,
        task = task
            .replace("{chars}", chars)
            .replace("{children}", children)
    ))
}

const SERVICE: &str = r#"<serviceTask id="work" q:task="work">
      <extensionElements><q:retry maxAttempts="3" initialInterval="PT1S"/></extensionElements>
      <multiInstanceLoopCharacteristics {chars}>{children}</multiInstanceLoopCharacteristics>
    </serviceTask>"#;

fn vars(v: Value) -> Variables {
    serde_json::from_value(v).expect("an object")
}

fn start(def: &Definition, v: Value) -> (Snapshot, Vec<Effect>) {
    let s = step(
        def,
        "i-1",
        Snapshot::new(),
        Input::Start {
            variables: vars(v),
            start: None,
        },
        0,
    )
    .expect("steps");
    (s.snapshot, s.effects)
}

fn apply(def: &Definition, snap: Snapshot, input: Input, now: i64) -> (Snapshot, Vec<Effect>) {
    let s = step(def, "i-1", snap, input, now).expect("steps");
    (s.snapshot, s.effects)
}

fn done(node: &str, attempt: u32, outputs: Value) -> Input {
    Input::TaskCompleted {
        node: node.into(),
        attempt: Attempt::new(attempt).expect("≥ 1"),
        outputs: vars(outputs),
    }
}

fn runs(effects: &[Effect]) -> Vec<(String, u32, Variables)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::RunTask {
                node,
                attempt,
                inputs,
                ..
            } => Some((node.clone(), attempt.get(), inputs.clone())),
            _ => None,
        })
        .collect()
}

fn is_stale(effects: &[Effect]) -> bool {
    matches!(effects, [Effect::Stale { .. }])
}

#[test]
fn parallel_inner_instances_start_at_once_with_their_own_locals() {
    let def = mi_model(
        SERVICE,
        r#"q:collection="items" q:elementVariable="item""#,
        "",
    );
    let (snap, effects) = start(&def, json!({"items": ["a", "b"]}));
    let runs = runs(&effects);
    let names: Vec<&str> = runs.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(names, ["work#1", "work#2"]);
    assert_eq!(runs[1].2.get("item"), Some(&json!("b")));
    assert_eq!(runs[1].2.get("loopCounter"), Some(&json!(2)));
    // Locals are never instance variables.
    assert!(snap.variables().get("item").is_none());
    assert_eq!(snap.tokens(), ["work", "work#1", "work#2"]);
}

#[test]
fn camunda_7_takes_the_count_from_the_cardinality_and_the_items_by_index() {
    // Camunda 7 reads a loopCardinality beside a camunda:collection: two inner
    // instances, the first two items, its counter from 0.
    let def = mi_model(
        SERVICE,
        r#"xmlns:camunda="http://camunda.org/schema/1.0/bpmn" camunda:collection="${items}" camunda:elementVariable="item""#,
        "<loopCardinality>${n}</loopCardinality>",
    );
    let (snap, effects) = start(&def, json!({"n": 2, "items": ["a", "b", "c"]}));
    let runs = runs(&effects);
    let seen: Vec<(&str, Option<&Value>, Option<&Value>)> = runs
        .iter()
        .map(|r| (r.0.as_str(), r.2.get("item"), r.2.get("loopCounter")))
        .collect();
    assert_eq!(
        seen,
        [
            ("work#1", Some(&json!("a")), Some(&json!(0))),
            ("work#2", Some(&json!("b")), Some(&json!(1)))
        ]
    );
    assert_eq!(snap.tokens(), ["work", "work#1", "work#2"]);
    // Both complete: the body completes with two inner instances.
    let (snap, _) = apply(&def, snap, done("work#1", 1, json!({})), 10);
    let (snap, _) = apply(&def, snap, done("work#2", 1, json!({})), 20);
    assert_eq!(snap.status(), Status::Completed);
}

#[test]
fn a_failing_inner_instance_retries_alone_and_its_siblings_go_on() {
    let def = mi_model(SERVICE, r#"q:collection="items""#, "");
    let (snap, _) = start(&def, json!({"items": [1, 2, 3]}));
    let (snap, effects) = apply(
        &def,
        snap,
        Input::TaskFailed {
            node: "work#2".into(),
            attempt: Attempt::FIRST,
            kind: FailureKind::Failed,
            code: "BUSY".into(),
            message: String::new(),
        },
        10,
    );
    assert!(runs(&effects).is_empty(), "parked, not re-run: {effects:?}");
    assert_eq!(snap.attempt("work#2"), 2);
    assert_eq!(snap.attempt("work#1"), 0);
    assert!(snap.marker("work#2").is_some());
    assert!(snap.timers().keys().any(|t| t == "r:work#2"));
    // The siblings complete while #2 backs off.
    let (snap, _) = apply(&def, snap, done("work#1", 1, json!({})), 20);
    let (snap, _) = apply(&def, snap, done("work#3", 1, json!({})), 30);
    assert_eq!(snap.status(), Status::Running);
    // A result for #2's failed attempt is stale.
    let (snap, effects) = apply(&def, snap, done("work#2", 1, json!({})), 40);
    assert!(is_stale(&effects), "{effects:?}");
    let incarnation = snap.timers()["r:work#2"];
    let (snap, effects) = apply(
        &def,
        snap,
        Input::TimerFired {
            name: "r:work#2".parse().expect("a timer name"),
            incarnation,
        },
        5_000,
    );
    assert_eq!(runs(&effects)[0].0, "work#2");
    assert_eq!(runs(&effects)[0].1, 2);
    let (snap, _) = apply(&def, snap, done("work#2", 2, json!({})), 5_100);
    assert_eq!(snap.status(), Status::Completed);
}

#[test]
fn outputs_are_gathered_in_input_order_not_completion_order() {
    let def = mi_model(
        SERVICE,
        r#"q:collection="items" q:elementVariable="item" q:outputCollection="out" q:outputElement="item + '!'""#,
        "",
    );
    let (snap, _) = start(&def, json!({"items": ["a", "b", "c"]}));
    let (snap, _) = apply(&def, snap, done("work#3", 1, json!({})), 1);
    let (snap, _) = apply(&def, snap, done("work#1", 1, json!({})), 2);
    let (snap, _) = apply(&def, snap, done("work#2", 1, json!({})), 3);
    assert_eq!(snap.status(), Status::Completed);
    assert_eq!(snap.variables()["out"], json!(["a!", "b!", "c!"]));
    assert!(snap.multi_instances().is_empty());
}

#[test]
fn sequential_instances_run_one_after_another() {
    let def = mi_model(
        SERVICE,
        r#"isSequential="true""#,
        "<loopCardinality>2</loopCardinality>",
    );
    let (snap, effects) = start(&def, json!({}));
    assert_eq!(runs(&effects).len(), 1);
    let (snap, effects) = apply(&def, snap, done("work#1", 1, json!({})), 1);
    assert_eq!(runs(&effects)[0].0, "work#2");
    // #1 is over: its late answer is stale.
    let (snap, effects) = apply(&def, snap, done("work#1", 1, json!({})), 2);
    assert!(is_stale(&effects));
    let (snap, _) = apply(&def, snap, done("work#2", 1, json!({})), 3);
    assert_eq!(snap.status(), Status::Completed);
}

#[test]
fn a_completion_condition_cancels_the_rest_and_their_answers_are_stale() {
    let def = mi_model(
        SERVICE,
        r#"q:collection="items""#,
        "<completionCondition>numberOfCompletedInstances == 1 &amp;&amp; numberOfActiveInstances == 2</completionCondition>",
    );
    let (snap, _) = start(&def, json!({"items": [1, 2, 3]}));
    let (snap, effects) = apply(&def, snap, done("work#2", 1, json!({})), 1);
    let interrupted: Vec<&str> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::AttemptFinished { node, outcome, .. }
                if format!("{outcome:?}") == "Interrupted" =>
            {
                Some(node.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(interrupted, ["work#1", "work#3"]);
    assert_eq!(snap.status(), Status::Completed);
    let (_, effects) = apply(&def, snap, done("work#1", 1, json!({})), 2);
    assert!(is_stale(&effects));
}

#[test]
fn an_empty_collection_or_zero_cardinality_completes_the_body_at_once() {
    let def = mi_model(
        SERVICE,
        r#"q:collection="items" q:outputCollection="out""#,
        "",
    );
    let (snap, effects) = start(&def, json!({"items": []}));
    assert!(runs(&effects).is_empty());
    assert_eq!(snap.status(), Status::Completed);
    assert_eq!(snap.variables()["out"], json!([]));
    let def = mi_model(SERVICE, "", "<loopCardinality>0</loopCardinality>");
    assert_eq!(start(&def, json!({})).0.status(), Status::Completed);
}

#[test]
fn counts_and_collections_that_do_not_evaluate_fail_the_instance() {
    let cases = [
        (
            r#"q:collection="items""#,
            "",
            json!({"items": "abc"}),
            "not a list",
        ),
        (
            r#"q:collection="nothing""#,
            "",
            json!({}),
            "input collection",
        ),
        (
            "",
            "<loopCardinality>n</loopCardinality>",
            json!({"n": -1}),
            "non-negative",
        ),
        (
            "",
            "<loopCardinality>n</loopCardinality>",
            json!({"n": 1001}),
            "at most",
        ),
        // Camunda 7's cardinality beside a collection, past the collection's end.
        (
            r#"xmlns:camunda="http://camunda.org/schema/1.0/bpmn" camunda:collection="${items}" camunda:elementVariable="item""#,
            "<loopCardinality>${n}</loopCardinality>",
            json!({"n": 3, "items": ["a", "b"]}),
            "past the end of its input collection of 2 items",
        ),
    ];
    for (chars, children, v, why) in cases {
        let def = mi_model(SERVICE, chars, children);
        let (snap, effects) = start(&def, v);
        assert_eq!(snap.status(), Status::Failed, "{chars} {children}");
        let failure = snap.failure().expect("a failure");
        assert_eq!(failure.code, "EXPRESSION_FAILED");
        assert_eq!(failure.node.as_deref(), Some("work"));
        let message = effects
            .iter()
            .find_map(|e| match e {
                Effect::OpenIncident { message, .. } => Some(message.clone()),
                _ => None,
            })
            .expect("an incident");
        assert!(message.contains(why), "{message}");
    }
}

#[test]
fn an_interrupting_boundary_ends_every_inner_instance_and_leaves_no_row() {
    let def = model(
        r#"<startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="work"/>
    <serviceTask id="work" q:task="work">
      <extensionElements><q:retry maxAttempts="3" initialInterval="PT1S"/></extensionElements>
      <multiInstanceLoopCharacteristics q:collection="items"/>
    </serviceTask>
    <boundaryEvent id="stop" attachedToRef="work">
      <timerEventDefinition><timeDuration>PT1M</timeDuration></timerEventDefinition>
    </boundaryEvent>
    <sequenceFlow id="f2" sourceRef="work" targetRef="e"/>
    <endEvent id="e"/>
    <sequenceFlow id="f3" sourceRef="stop" targetRef="late"/>
    <userTask id="late"/>
    <sequenceFlow id="f4" sourceRef="late" targetRef="e2"/>
    <endEvent id="e2"/>"#,
    );
    let (snap, _) = start(&def, json!({"items": [1, 2]}));
    // #1 is parked in a backoff when the boundary fires.
    let (snap, _) = apply(
        &def,
        snap,
        Input::TaskFailed {
            node: "work#1".into(),
            attempt: Attempt::FIRST,
            kind: FailureKind::Failed,
            code: "BUSY".into(),
            message: String::new(),
        },
        1,
    );
    let incarnation = snap.timers()["b:stop"];
    let (snap, _) = apply(
        &def,
        snap,
        Input::TimerFired {
            name: "b:stop".parse().expect("a timer name"),
            incarnation,
        },
        60_000,
    );
    assert_eq!(snap.tokens(), ["late"]);
    assert!(snap.timers().is_empty(), "{:?}", snap.timers());
    assert!(snap.attempts().is_empty() && snap.markers().is_empty());
    assert!(snap.multi_instances().is_empty());
    let (_, effects) = apply(&def, snap, done("work#2", 1, json!({})), 60_001);
    assert!(is_stale(&effects));
}

#[test]
fn the_body_and_out_of_range_instances_are_not_tasks_to_answer() {
    let def = mi_model(SERVICE, r#"q:collection="items""#, "");
    let (snap, _) = start(&def, json!({"items": [1, 2]}));
    for node in ["work", "work#3", "work#0", "work#01", "work#x"] {
        let (_, effects) = apply(&def, snap.clone(), done(node, 1, json!({})), 1);
        assert!(is_stale(&effects), "{node}: {effects:?}");
    }
}

#[test]
fn a_bpmn_error_of_an_inner_instance_is_caught_on_the_body() {
    let def = model(
        r#"<startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="work"/>
    <serviceTask id="work" q:task="work">
      <multiInstanceLoopCharacteristics q:collection="items"/>
    </serviceTask>
    <boundaryEvent id="oops" attachedToRef="work"><errorEventDefinition/></boundaryEvent>
    <sequenceFlow id="f2" sourceRef="work" targetRef="e"/>
    <endEvent id="e"/>
    <sequenceFlow id="f3" sourceRef="oops" targetRef="e2"/>
    <endEvent id="e2"/>"#,
    );
    let (snap, _) = start(&def, json!({"items": [1, 2]}));
    let (snap, effects) = apply(
        &def,
        snap,
        Input::TaskBpmnError {
            node: "work#2".into(),
            attempt: Attempt::FIRST,
            code: "NOPE".into(),
            message: String::new(),
        },
        1,
    );
    assert_eq!(snap.status(), Status::Completed);
    assert!(effects.iter().any(|e| matches!(e,
        Effect::AttemptFinished { node, .. } if node == "work#1")));
}

#[test]
fn user_task_instances_are_offered_and_completed_by_their_names() {
    let def = mi_model(
        r#"<userTask id="work">
      <multiInstanceLoopCharacteristics {chars}/>
    </userTask>"#,
        r#"isSequential="true" q:collection="who" q:elementVariable="person""#,
        "",
    );
    let (snap, effects) = start(&def, json!({"who": ["ann", "bob"]}));
    assert!(effects.iter().any(|e| matches!(e,
        Effect::OfferUserTask { node, .. } if node == "work#1")));
    let inputs = qflow_core::user_task_inputs(&def, &snap, "work#1").expect("inputs");
    assert_eq!(inputs["person"], json!("ann"));
    let complete = |node: &str| Input::UserTaskCompleted {
        node: node.into(),
        assignee: None,
        variables: Variables::new(),
    };
    let (snap, effects) = apply(&def, snap, complete("work#2"), 1);
    assert!(is_stale(&effects), "#2 has not started");
    let (snap, _) = apply(&def, snap, complete("work#1"), 2);
    let (snap, _) = apply(&def, snap, complete("work#2"), 3);
    assert_eq!(snap.status(), Status::Completed);
}

#[test]
fn the_path_shows_which_inner_instances_started_completed_and_were_cancelled() {
    let def = mi_model(
        SERVICE,
        r#"q:collection="items""#,
        "<completionCondition>numberOfCompletedInstances == 1</completionCondition>",
    );
    let s = step_traced(
        &def,
        "i-1",
        Snapshot::new(),
        Input::Start {
            variables: vars(json!({"items": [1, 2]})),
            start: None,
        },
        0,
    )
    .expect("steps");
    let started: Vec<String> =
        s.1.iter()
            .filter_map(|p| match p {
                PathEvent::Inner { node, state, .. } => Some(format!("{node} {state:?}")),
                _ => None,
            })
            .collect();
    assert_eq!(started, ["work#1 Started", "work#2 Started"]);
    let s = step_traced(&def, "i-1", s.0.snapshot, done("work#2", 1, json!({})), 1).expect("steps");
    let inner: Vec<String> =
        s.1.iter()
            .filter_map(|p| match p {
                PathEvent::Inner { node, state, .. } => Some(format!("{node} {state:?}")),
                _ => None,
            })
            .collect();
    assert_eq!(inner, ["work#2 Completed", "work#1 Cancelled"]);
}

#[test]
fn a_parallel_sub_process_runs_its_inside_once_per_instance_and_its_boundary_ends_all() {
    let def = model(
        r#"<startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="each"/>
    <subProcess id="each">
      <multiInstanceLoopCharacteristics q:collection="items" q:elementVariable="item"/>
      <startEvent id="s1"/>
      <sequenceFlow id="g1" sourceRef="s1" targetRef="work"/>
      <serviceTask id="work" q:task="work"/>
      <sequenceFlow id="g2" sourceRef="work" targetRef="wait"/>
      <userTask id="wait"/>
      <sequenceFlow id="g3" sourceRef="wait" targetRef="e1"/>
      <endEvent id="e1"/>
    </subProcess>
    <boundaryEvent id="stop" attachedToRef="each">
      <timerEventDefinition><timeDuration>PT1M</timeDuration></timerEventDefinition>
    </boundaryEvent>
    <sequenceFlow id="f2" sourceRef="each" targetRef="e"/>
    <endEvent id="e"/>
    <sequenceFlow id="f3" sourceRef="stop" targetRef="e2"/>
    <endEvent id="e2"/>"#,
    );
    let (snap, effects) = start(&def, json!({"items": ["a", "b"]}));
    let runs = runs(&effects);
    assert_eq!(
        runs.iter()
            .map(|r| (r.0.as_str(), r.2["item"].clone()))
            .collect::<Vec<_>>(),
        [("work#1", json!("a")), ("work#2", json!("b"))]
    );
    let (snap, effects) = apply(&def, snap, done("work#2", 1, json!({})), 10);
    assert!(effects.iter().any(|e| matches!(e,
        Effect::OfferUserTask { node, .. } if node == "wait#2")));
    assert_eq!(
        snap.tokens(),
        ["each", "each#1", "each#2", "wait#2", "work#1"]
    );
    let incarnation = snap.timers()["b:stop"];
    let (snap, effects) = apply(
        &def,
        snap,
        Input::TimerFired {
            name: "b:stop".parse().expect("a timer name"),
            incarnation,
        },
        60_000,
    );
    assert_eq!(snap.status(), Status::Completed);
    assert!(effects.iter().any(|e| matches!(e,
        Effect::WithdrawUserTask { node } if node == "wait#2")));
    assert!(effects.iter().any(|e| matches!(e,
        Effect::AttemptFinished { node, .. } if node == "work#1")));
}

#[test]
fn receive_task_instances_subscribe_under_their_own_element_keys() {
    let def = common::model_with(
        r#"<message id="msg" name="paid" q:correlationKey="item"/>"#,
        r#"<startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="work"/>
    <receiveTask id="work" messageRef="msg">
      <multiInstanceLoopCharacteristics q:collection="items" q:elementVariable="item"/>
    </receiveTask>
    <sequenceFlow id="f2" sourceRef="work" targetRef="e"/>
    <endEvent id="e"/>"#,
    );
    let (snap, _) = start(&def, json!({"items": ["a", "b"]}));
    assert_eq!(snap.subscriptions()["work#1"], "a");
    assert_eq!(snap.subscriptions()["work#2"], "b");
    let paid = |key: &str| Input::MessageReceived {
        name: "paid".into(),
        correlation_key: Some(key.into()),
        node: None,
        variables: Variables::new(),
    };
    let (snap, _) = apply(&def, snap, paid("b"), 1);
    assert_eq!(snap.tokens(), ["work", "work#1"]);
    let (snap, effects) = apply(&def, snap, paid("b"), 2);
    assert!(is_stale(&effects), "b's instance is done: {effects:?}");
    let (snap, _) = apply(&def, snap, paid("a"), 3);
    assert_eq!(snap.status(), Status::Completed);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever order the inner instances answer in, and however often each fails
    /// first (within its budget), the body completes once, with the output collection
    /// in input order, each instance having run exactly its own attempts; every snapshot
    /// on the way decodes to itself.
    #[test]
    fn outputs_keep_input_order_whatever_the_answers_and_retries(
        n in 1usize..6,
        order_seed in any::<u64>(),
        fails in proptest::collection::vec(0u32..3, 6),
    ) {
        let def = mi_model(
            SERVICE,
            r#"q:collection="items" q:elementVariable="item" q:outputCollection="out" q:outputElement="item * 10""#,
            "",
        );
        let items: Vec<u32> = (1..=n as u32).collect();
        let (mut snap, _) = start(&def, json!({"items": items}));
        // A deterministic shuffle of the answer order.
        let mut order: Vec<usize> = (1..=n).collect();
        let mut x = order_seed | 1;
        for i in (1..order.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let mut now = 0;
        for k in order {
            let node = format!("work#{k}");
            for attempt in 1..=fails[k - 1] + 1 {
                now += 10;
                if attempt > 1 {
                    let name = format!("r:{node}");
                    let incarnation = snap.timers()[name.as_str()];
                    let (s, e) = apply(&def, snap, Input::TimerFired {
                        name: name.parse().expect("a timer name"), incarnation }, now);
                    prop_assert!(runs(&e).iter().any(|r| r.0 == node && r.1 == attempt));
                    snap = s;
                }
                let input = if attempt <= fails[k - 1] {
                    Input::TaskFailed {
                        node: node.clone(),
                        attempt: Attempt::new(attempt).expect("≥ 1"),
                        kind: FailureKind::Failed,
                        code: "BUSY".into(),
                        message: String::new(),
                    }
                } else {
                    done(&node, attempt, json!({}))
                };
                let (s, e) = apply(&def, snap, input, now);
                prop_assert!(!is_stale(&e), "{node} attempt {attempt}: {e:?}");
                prop_assert_eq!(Snapshot::decode(&s.encode()).expect("decodes").encode(), s.encode());
                snap = s;
            }
        }
        prop_assert_eq!(snap.status(), Status::Completed);
        let want: Vec<Value> = (1..=n as u64).map(|i| json!(i * 10)).collect();
        prop_assert_eq!(&snap.variables()["out"], &Value::Array(want));
        prop_assert!(snap.multi_instances().is_empty() && snap.attempts().is_empty());
    }
}

#[test]
fn a_scenario_scripts_every_inner_instance_by_the_activity_id_and_one_by_its_name() {
    let def = mi_model(SERVICE, r#"q:collection="items""#, "");
    let trace = common::run_scenario(
        &def,
        r#"{"variables": {"items": [1, 2, 3]},
            "tasks": {
              "work": [{"outcome": "fail", "code": "BUSY"}, {"outcome": "ok"}],
              "work#2": [{"outcome": "ok"}]
            }}"#,
    );
    assert_eq!(common::last(&trace).status(), Status::Completed);
    for (node, attempts) in [("work#1", 2), ("work#2", 1), ("work#3", 2)] {
        assert_eq!(common::runs_of(&trace, node).len(), attempts, "{node}");
    }
}

#[test]
fn a_migration_is_refused_while_an_inner_instance_runs_its_attempt() {
    let def = mi_model(SERVICE, r#"q:collection="items""#, "");
    let (snap, _) = start(&def, json!({"items": [1]}));
    let (after, effects) = apply(
        &def,
        snap.clone(),
        Input::Migrate {
            mapping: Default::default(),
            timers: Default::default(),
            user_tasks: Vec::new(),
        },
        1,
    );
    assert!(is_stale(&effects), "{effects:?}");
    assert_eq!(after.encode(), snap.encode());
}

/// A sequence flow's condition inside a multi-instance sub-process sees the inner
/// instance's element and loop counter (`docs/multi-instance.md`, "Locals"): each inner
/// instance takes its own branch at the gateway.
#[test]
fn a_condition_inside_a_multi_instance_sub_process_sees_its_element() {
    let def = model(
        r#"<startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="each"/>
    <subProcess id="each">
      <multiInstanceLoopCharacteristics q:collection="items" q:elementVariable="item"/>
      <startEvent id="s1"/>
      <sequenceFlow id="g1" sourceRef="s1" targetRef="x"/>
      <exclusiveGateway id="x" default="g3"/>
      <sequenceFlow id="g2" sourceRef="x" targetRef="bad">
        <conditionExpression>item == "bad" &amp;&amp; loopCounter == 2</conditionExpression>
      </sequenceFlow>
      <sequenceFlow id="g3" sourceRef="x" targetRef="good"/>
      <userTask id="bad"/>
      <sequenceFlow id="g4" sourceRef="bad" targetRef="e1"/>
      <userTask id="good"/>
      <sequenceFlow id="g5" sourceRef="good" targetRef="e1"/>
      <endEvent id="e1"/>
    </subProcess>
    <sequenceFlow id="f2" sourceRef="each" targetRef="e"/>
    <endEvent id="e"/>"#,
    );
    let (snap, effects) = start(&def, json!({"items": ["ok", "bad"]}));
    assert_eq!(snap.status(), Status::Running, "{effects:?}");
    let mut offered: Vec<&str> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::OfferUserTask { node, .. } => Some(node.as_str()),
            _ => None,
        })
        .collect();
    offered.sort_unstable();
    assert_eq!(offered, ["bad#2", "good#1"]);
}
