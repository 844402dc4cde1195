//! The repair loop for every kind of task (SPEC O2, O3, E6): an instance FAILED at a task
//! of any kind is migrated onto a fixed version that renames the task and changes its
//! policy, resumed with either budget choice, and ends as the fixed model says. Each case
//! runs through the production step on the simulator's virtual clock (`sim::run_with`),
//! so the migration's timers, rows and keys are the runtime's.

mod common;

use std::collections::BTreeMap;

use common::{effects, last};
use qflow_core::sim::{self, Scenario, Targets, Trace};
use qflow_core::{step, Effect, Input, Snapshot, Status};
use qflow_loader::model::Definition;
use serde_json::{json, Value};

/// A process `p` with `body`, with the q:, Camunda 7 and Zeebe namespaces declared.
fn load(body: &str) -> Definition {
    let xml = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:q="urn:qflow:bpmn:1"
             xmlns:camunda="http://camunda.org/schema/1.0/bpmn"
             xmlns:zeebe="http://camunda.org/schema/zeebe/1.0"
             id="defs" targetNamespace="urn:qflow:test">
  <process id="p" isExecutable="true">
    <startEvent id="s"/>
    {body}
  </process>
  <message id="m" name="m"/>
  <process id="child" isExecutable="true">
    <startEvent id="cs"/><sequenceFlow id="c1" sourceRef="cs" targetRef="ce"/><endEvent id="ce"/>
  </process>
</definitions>"#
    );
    match qflow_loader::load_str(&xml) {
        Ok(mut loaded) => loaded.definitions.remove(0),
        Err(diags) => panic!("test model refused: {diags:#?}\n{xml}"),
    }
}

/// `s → <task id> → e`, the task written by `task(id)`.
fn linear(id: &str, task: &str) -> Definition {
    load(&format!(
        r#"<sequenceFlow id="f0" sourceRef="s" targetRef="{id}"/>
        {task}
        <sequenceFlow id="f1" sourceRef="{id}" targetRef="e"/><endEvent id="e"/>"#
    ))
}

fn run(def: &Definition, target: Definition, scenario: Value) -> Trace {
    let scenario: Scenario = serde_json::from_value(scenario).expect("scenario parses");
    let targets = Targets::from([("v2".to_owned(), target)]);
    sim::run_with(def, &scenario, &targets).expect("scenario runs")
}

fn migrate(at_ms: i64, from: &str, to: &str) -> Value {
    json!({"event": "migrate", "at_ms": at_ms, "target": "v2", "mapping": {from: to}})
}

fn resume(at_ms: i64, budget: &str) -> Value {
    json!({"event": "resume", "at_ms": at_ms, "budget": budget})
}

/// Every attempt's history row, as `(node, attempt)`, in order.
fn history(trace: &Trace) -> Vec<(String, u32)> {
    effects(trace)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Effect::AttemptFinished { node, attempt, .. } => Some((node, attempt.get())),
            _ => None,
        })
        .collect()
}

/// The steps' inputs by kind, to find a migration's step.
fn stale_reasons(trace: &Trace) -> Vec<String> {
    effects(trace)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Effect::Stale { reason } => Some(reason),
            _ => None,
        })
        .collect()
}

fn assert_ends(trace: &Trace, status: &str) {
    assert_eq!(
        trace.summary.status,
        status,
        "failure {:?} at {:?}; stale: {:?}",
        trace.summary.failure_code,
        trace.summary.failure_node,
        stale_reasons(trace)
    );
}

const RETRY2: &str =
    r#"<q:retry maxAttempts="2" initialInterval="PT1S" maxInterval="PT1S" jitter="none"/>"#;
const RETRY4: &str =
    r#"<q:retry maxAttempts="4" initialInterval="PT1S" maxInterval="PT1S" jitter="none"/>"#;

/// The three dialects of a pull task; a Zeebe job has `retries` attempts, the others the
/// default three (docs/workers.md).
fn pull_task(dialect: &str, id: &str, retries: u32) -> String {
    match dialect {
        "q" => format!(r#"<serviceTask id="{id}" q:topic="charge"/>"#),
        "camunda" => format!(
            r#"<serviceTask id="{id}" camunda:type="external" camunda:topic="charge"
                 camunda:taskPriority="1"><extensionElements><camunda:properties/>
               </extensionElements></serviceTask>"#
        ),
        _ => format!(
            r#"<serviceTask id="{id}"><extensionElements>
                 <zeebe:taskDefinition type="charge" retries="{retries}"/>
               </extensionElements></serviceTask>"#
        ),
    }
}

fn pull(at_ms: i64, input: Value) -> Value {
    json!({"event": "pull", "at_ms": at_ms, "input": input})
}

fn lock(at_ms: i64, node: &str, attempt: u32) -> Value {
    pull(
        at_ms,
        json!({"type": "pull_locked", "node": node, "attempt": attempt, "worker": "w",
               "lock_ms": 60_000}),
    )
}

/// A pull task that failed for good (the worker said no retries are left) is migrated onto
/// a version that renames it, and resumed: with `keep`, one more attempt; with `reset`,
/// the target's budget. Every dialect: `q:topic`, Camunda 7 external tasks, Zeebe jobs.
#[test]
fn a_failed_pull_task_of_every_dialect_migrates_and_resumes_with_either_budget() {
    for dialect in ["q", "camunda", "zeebe"] {
        for budget in ["keep", "reset"] {
            let v1 = linear("work", &pull_task(dialect, "work", 1));
            let v2 = linear("work2", &pull_task(dialect, "work2", 3));
            let mut events = vec![
                lock(0, "work", 1),
                pull(
                    10,
                    json!({"type": "pull_failed", "node": "work", "attempt": 1, "worker": "w",
                           "retries": 0, "message": "card declined"}),
                ),
                migrate(20, "work", "work2"),
                resume(30, budget),
                lock(40, "work2", 2),
            ];
            if budget == "reset" {
                // The reset budget has room for a second failure that parks, not fails.
                events.push(pull(
                    50,
                    json!({"type": "pull_failed", "node": "work2", "attempt": 2, "worker": "w",
                           "retries": 2}),
                ));
                events.push(lock(60, "work2", 3));
                events.push(pull(
                    70,
                    json!({"type": "pull_completed", "node": "work2", "attempt": 3,
                           "worker": "w"}),
                ));
            } else {
                events.push(pull(
                    50,
                    json!({"type": "pull_completed", "node": "work2", "attempt": 2,
                           "worker": "w"}),
                ));
            }
            let trace = run(&v1, v2, json!({"events": events}));
            assert_ends(&trace, "completed");
            let h = history(&trace);
            // The attempt history keeps the first attempt under the name it had then.
            assert_eq!(h[0], ("work".to_owned(), 1), "{dialect} {budget}: {h:?}");
            assert!(
                h[1..].iter().all(|(n, _)| n == "work2"),
                "{dialect} {budget}: {h:?}"
            );
        }
    }
}

/// A registered task that exhausted its budget migrates onto a version where it is a pull
/// task: the attempt numbers go on, and the pull task's budget is the target's.
#[test]
fn a_registered_task_becomes_a_pull_task_and_the_attempts_go_on() {
    let v1 = linear(
        "pay",
        &format!(
            r#"<serviceTask id="pay" q:task="pay"><extensionElements>{RETRY2}</extensionElements></serviceTask>"#
        ),
    );
    let v2 = linear("charge", &pull_task("q", "charge", 3));
    let trace = run(
        &v1,
        v2,
        json!({
            "tasks": {"pay": [{"outcome": "fail", "code": "DOWN", "message": "503"}]},
            "events": [
                migrate(5_000, "pay", "charge"),
                resume(6_000, "reset"),
                lock(7_000, "charge", 3),
                pull(7_100, json!({"type": "pull_completed", "node": "charge", "attempt": 3,
                                   "worker": "w"})),
            ]
        }),
    );
    assert_ends(&trace, "completed");
    assert_eq!(
        history(&trace),
        [("pay".into(), 1), ("pay".into(), 2), ("charge".into(), 3)]
    );
}

/// A pull task that failed for good becomes a registered task with a `q:retry` policy:
/// the pull task's own state (its attempts left) does not follow it.
#[test]
fn a_pull_task_becomes_a_registered_task_and_drops_what_only_a_pull_task_keeps() {
    let v1 = linear("work", &pull_task("q", "work", 1));
    let v2 = linear(
        "pay",
        &format!(
            r#"<serviceTask id="pay" q:task="pay"><extensionElements>{RETRY4}</extensionElements></serviceTask>"#
        ),
    );
    let trace = run(
        &v1,
        v2,
        json!({
            // Entry n scripts attempt n: attempt 1 was the pull task's.
            "tasks": {"pay": [{"outcome": "ok"}, {"outcome": "fail", "code": "DOWN"}, {"outcome": "ok"}]},
            "events": [
                lock(0, "work", 1),
                pull(10, json!({"type": "pull_failed", "node": "work", "attempt": 1,
                                "worker": "w", "retries": 0})),
                migrate(20, "work", "pay"),
                resume(30, "reset"),
            ]
        }),
    );
    assert_ends(&trace, "completed");
    assert_eq!(
        history(&trace),
        [("work".into(), 1), ("pay".into(), 2), ("pay".into(), 3)]
    );
    // After the migration no `p/` key is left for a registered task.
    let migrated = trace
        .steps
        .iter()
        .find(|s| s.input.kind() == "migrate")
        .expect("a migration step");
    let snap = Snapshot::decode(&migrated.snapshot).unwrap();
    assert_eq!(snap.pull_retries("pay"), None);
    assert_eq!(snap.tokens(), ["pay"]);
}

/// A channel call whose deliveries were poisoned until its budget ran out migrates onto a
/// version that renames it and gives it a larger budget; the resumed attempt is a new
/// request under a new key, answered.
#[test]
fn a_failed_channel_call_migrates_and_resumes() {
    for budget in ["keep", "reset"] {
        let channel = |id: &str, retry: &str| {
            linear(
                id,
                &format!(
                    r#"<serviceTask id="{id}" q:channel="payments"><extensionElements>{retry}
                       <q:timeout duration="PT30S"/></extensionElements></serviceTask>"#
                ),
            )
        };
        let v1 = channel("charge", RETRY2);
        let v2 = channel("collect", RETRY4);
        let trace = run(
            &v1,
            v2,
            json!({
                "channels": {
                    "charge": [{"answer": "poison", "message": "gateway gone"}],
                    "collect": [{"answer": "ok", "outputs": {"receipt": "r-1"}}]
                },
                "events": [migrate(10_000, "charge", "collect"), resume(11_000, budget)]
            }),
        );
        assert_ends(&trace, "completed");
        let h = history(&trace);
        assert_eq!(
            h,
            [
                ("charge".into(), 1),
                ("charge".into(), 2),
                ("collect".into(), 3)
            ],
            "{budget}"
        );
        assert_eq!(last(&trace).variables()["receipt"], json!("r-1"));
    }
}

/// A call activity whose called instances failed until its budget ran out migrates and
/// resumes: the next attempt starts a new child under the new name.
#[test]
fn a_failed_call_activity_migrates_and_resumes() {
    for budget in ["keep", "reset"] {
        let call = |id: &str, retry: &str| {
            linear(
                id,
                &format!(
                    r#"<callActivity id="{id}" calledElement="child"><extensionElements>{retry}
                       </extensionElements></callActivity>"#
                ),
            )
        };
        let v1 = call("kyc", RETRY2);
        let v2 = call("verify", RETRY4);
        let trace = run(
            &v1,
            v2,
            json!({
                "tasks": {
                    "kyc": [{"outcome": "fail", "code": "REJECTED"}],
                    "verify": [{"outcome": "ok", "outputs": {"score": 7}}]
                },
                "events": [migrate(10_000, "kyc", "verify"), resume(11_000, budget)]
            }),
        );
        assert_ends(&trace, "completed");
        assert_eq!(
            history(&trace),
            [("kyc".into(), 1), ("kyc".into(), 2), ("verify".into(), 3)],
            "{budget}"
        );
        let children: Vec<String> = effects(&trace)
            .into_iter()
            .filter_map(|(_, e)| match e {
                Effect::StartChild { node, .. } => Some(node),
                _ => None,
            })
            .collect();
        assert_eq!(children, ["kyc", "kyc", "verify"]);
    }
}

/// An inner instance of a parallel multi-instance task exhausted its budget while its
/// siblings completed: the body's state and the inner instance move with the renamed
/// activity, and the resumed inner instance completes the body.
#[test]
fn a_failed_inner_instance_of_a_multi_instance_task_migrates_and_resumes() {
    let mi = |id: &str, retry: &str| {
        linear(
            id,
            &format!(
                r#"<serviceTask id="{id}" q:task="quote"><extensionElements>{retry}</extensionElements>
                     <multiInstanceLoopCharacteristics isSequential="false">
                       <loopCardinality>3</loopCardinality>
                     </multiInstanceLoopCharacteristics></serviceTask>"#
            ),
        )
    };
    let v1 = mi("quote", RETRY2);
    let v2 = mi("offer", RETRY4);
    let trace = run(
        &v1,
        v2.clone(),
        json!({
            "tasks": {
                "quote#2": [{"outcome": "fail", "code": "DOWN"}],
                "offer#2": [{"outcome": "ok"}]
            },
            "events": [migrate(10_000, "quote", "offer"), resume(11_000, "keep")]
        }),
    );
    assert_ends(&trace, "completed");
    let h = history(&trace);
    assert!(h.contains(&("quote#2".into(), 2)), "{h:?}");
    assert_eq!(h.last(), Some(&("offer#2".into(), 3)), "{h:?}");

    // A body running its inner instances at once cannot go on as a sequential one.
    let sequential = load(
        r#"<sequenceFlow id="f0" sourceRef="s" targetRef="offer"/>
        <serviceTask id="offer" q:task="quote">
          <multiInstanceLoopCharacteristics isSequential="true">
            <loopCardinality>3</loopCardinality>
          </multiInstanceLoopCharacteristics></serviceTask>
        <sequenceFlow id="f1" sourceRef="offer" targetRef="e"/><endEvent id="e"/>"#,
    );
    let scenario: Scenario = serde_json::from_value(json!({
        "tasks": {"quote#1": [{"outcome": "hang"}], "quote#2": [{"outcome": "fail", "code": "DOWN"}]}
    }))
    .unwrap();
    let failed = last(&sim::run(&v1, &scenario).unwrap());
    assert_eq!(failed.status(), Status::Failed);
    let input = Input::Migrate {
        mapping: BTreeMap::from([("quote".to_owned(), "offer".to_owned())]),
        timers: BTreeMap::new(),
        user_tasks: Vec::new(),
    };
    let out = step(&sequential, "i", failed.clone(), input.clone(), 10_000).unwrap();
    assert_eq!(out.snapshot.encode(), failed.encode());
    match out.effects.as_slice() {
        [Effect::Stale { reason }] => assert!(
            reason.contains("multi-instance activity `quote` is running and maps to `offer`")
                && reason.contains("one after another"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    // Onto the parallel target the same body moves, with its state and inner instances.
    let out = step(&v2, "i", failed, input, 10_000).unwrap();
    // The failed inner instance's incident moves with it (the resume resolves it there).
    assert!(
        out.effects
            .iter()
            .any(|e| matches!(e, Effect::MoveIncidents { from, to }
            if from == "quote#2" && to == "offer#2")),
        "{:?}",
        out.effects
    );
    let moved = &out.snapshot;
    assert_eq!(moved.tokens(), ["offer", "offer#1", "offer#2"]);
    assert!(moved.multi_instances().contains_key("offer"));
    assert_eq!(moved.attempt("offer#2"), 2);
}

/// A task inside an embedded sub-process and one inside an event sub-process: the token,
/// its attempts and its scope's state move with the renamed node.
#[test]
fn failed_tasks_inside_sub_processes_and_event_sub_processes_migrate_and_resume() {
    let sub = |id: &str, retry: &str| {
        load(&format!(
            r#"<sequenceFlow id="f0" sourceRef="s" targetRef="order"/>
            <subProcess id="order">
              <startEvent id="os"/><sequenceFlow id="o1" sourceRef="os" targetRef="{id}"/>
              <serviceTask id="{id}" q:task="pay"><extensionElements>{retry}</extensionElements></serviceTask>
              <sequenceFlow id="o2" sourceRef="{id}" targetRef="oe"/><endEvent id="oe"/>
            </subProcess>
            <sequenceFlow id="f1" sourceRef="order" targetRef="e"/><endEvent id="e"/>"#
        ))
    };
    let trace = run(
        &sub("pay", RETRY2),
        sub("charge", RETRY4),
        json!({
            "tasks": {"pay": [{"outcome": "fail", "code": "DOWN"}], "charge": [{"outcome": "ok"}]},
            "events": [migrate(10_000, "pay", "charge"), resume(11_000, "keep")]
        }),
    );
    assert_ends(&trace, "completed");
    assert_eq!(history(&trace).last(), Some(&("charge".into(), 3)));

    let esp = |id: &str, retry: &str| {
        load(&format!(
            r#"<sequenceFlow id="f0" sourceRef="s" targetRef="wait"/>
            <userTask id="wait"/>
            <sequenceFlow id="f1" sourceRef="wait" targetRef="e"/><endEvent id="e"/>
            <subProcess id="notify" triggeredByEvent="true">
              <startEvent id="ns" isInterrupting="false">
                <messageEventDefinition messageRef="m"/>
              </startEvent>
              <sequenceFlow id="n1" sourceRef="ns" targetRef="{id}"/>
              <serviceTask id="{id}" q:task="mail"><extensionElements>{retry}</extensionElements></serviceTask>
              <sequenceFlow id="n2" sourceRef="{id}" targetRef="ne"/><endEvent id="ne"/>
            </subProcess>"#
        ))
    };
    // The message name is the id of the `m` message; the loader reads messageRef's name.
    let v1 = esp("mail", RETRY2);
    let trace = run(
        &v1,
        esp("send", RETRY4),
        json!({
            "tasks": {"mail": [{"outcome": "fail", "code": "DOWN"}], "send": [{"outcome": "ok"}]},
            "events": [
                {"event": "message", "at_ms": 10, "name": "m"},
                migrate(10_000, "mail", "send"),
                resume(11_000, "reset"),
                {"event": "complete_user_task", "at_ms": 12_000, "node": "wait"}
            ]
        }),
    );
    assert_ends(&trace, "completed");
    let h = history(&trace);
    assert_eq!(h.last(), Some(&("send".into(), 3)), "{h:?}");
}

/// A user task whose BPMN error nothing caught (a non-retryable end) migrates onto a
/// version that renames it and catches the error; the resume offers it again under its
/// new name — whoever held it keeps it (`h/` travels with the node) — and its completion
/// ends the instance.
#[test]
fn a_user_task_failed_by_an_uncaught_error_migrates_and_is_offered_again() {
    let user = |id: &str, assignee: &str| {
        linear(
            id,
            &format!(
                r#"<userTask id="{id}" camunda:assignee="{assignee}" camunda:candidateGroups="ops"/>"#
            ),
        )
    };
    let trace = run(
        &user("review", "ann"),
        user("approve", "bob"),
        json!({
            "events": [
                {"event": "user_task_bpmn_error", "at_ms": 10, "node": "review", "code": "NO"},
                migrate(20, "review", "approve"),
                resume(30, "keep"),
                {"event": "complete_user_task", "at_ms": 40, "node": "approve"}
            ]
        }),
    );
    assert_ends(&trace, "completed");
    let offers: Vec<(String, Option<String>)> = effects(&trace)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Effect::OfferUserTask { node, assignee, .. } => Some((node, assignee)),
            _ => None,
        })
        .collect();
    assert_eq!(
        offers.last(),
        Some(&("approve".to_owned(), Some("ann".to_owned()))),
        "{offers:?}"
    );
}

/// A script task whose expression failed migrates onto a version with the script fixed
/// (and renamed); the resume runs the fixed script.
#[test]
fn a_failed_script_task_migrates_and_runs_the_fixed_script() {
    let script = |id: &str, expr: &str| {
        linear(
            id,
            &format!(
                r#"<scriptTask id="{id}"><extensionElements>
                     <q:script expression="{expr}" resultVariable="total"/>
                   </extensionElements></scriptTask>"#
            ),
        )
    };
    let trace = run(
        &script("sum", "price * qty"),
        script("total", "price * 2"),
        json!({
            "variables": {"price": 5},
            "events": [migrate(10, "sum", "total"), resume(20, "keep")]
        }),
    );
    assert_ends(&trace, "completed");
    assert_eq!(last(&trace).variables()["total"], json!(10));
}

/// A FAILED task with attempts cannot become a node that counts none: refused before
/// anything is written, naming the node, what it maps to, and the kinds it may map to.
#[test]
fn attempts_do_not_move_onto_a_node_that_counts_none() {
    let v1 = linear(
        "pay",
        &format!(
            r#"<serviceTask id="pay" q:task="pay"><extensionElements>{RETRY2}</extensionElements></serviceTask>"#
        ),
    );
    let v2 = linear("review", r#"<userTask id="review"/>"#);
    let scenario: Scenario = serde_json::from_value(json!({
        "tasks": {"pay": [{"outcome": "fail", "code": "DOWN"}]}
    }))
    .unwrap();
    let failed = sim::run(&v1, &scenario).unwrap();
    let snap = last(&failed);
    assert_eq!(snap.status(), Status::Failed);
    let input = Input::Migrate {
        mapping: BTreeMap::from([("pay".to_owned(), "review".to_owned())]),
        timers: BTreeMap::new(),
        user_tasks: Vec::new(),
    };
    let out = step(&v2, "i", snap.clone(), input, 10).unwrap();
    assert_eq!(out.snapshot.encode(), snap.encode());
    match out.effects.as_slice() {
        [Effect::Stale { reason }] => assert!(
            reason.contains("task `pay` has attempts and maps to `review`, a user task")
                && reason.contains("pull task"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(snap.failure().map(|f| f.code), Some("DOWN".to_owned()));
}

/// Two parked tasks of a split: `a` and `b`, each in its backoff window.
fn two_parked() -> (Definition, Snapshot) {
    let def = load(&format!(
        r#"<sequenceFlow id="f0" sourceRef="s" targetRef="fork"/>
        <parallelGateway id="fork"/>
        <sequenceFlow id="fa" sourceRef="fork" targetRef="a"/>
        <sequenceFlow id="fb" sourceRef="fork" targetRef="b"/>
        <serviceTask id="a" q:task="a"><extensionElements>{RETRY4}</extensionElements></serviceTask>
        <serviceTask id="b" q:task="b"><extensionElements>{RETRY4}</extensionElements></serviceTask>
        <sequenceFlow id="fa2" sourceRef="a" targetRef="join"/>
        <sequenceFlow id="fb2" sourceRef="b" targetRef="join"/>
        <parallelGateway id="join"/>
        <sequenceFlow id="f9" sourceRef="join" targetRef="e"/><endEvent id="e"/>"#
    ));
    let start = Input::Start {
        variables: Default::default(),
        start: None,
    };
    let mut snap = step(&def, "i", Snapshot::new(), start, 0).unwrap().snapshot;
    for (node, at) in [("a", 10), ("b", 20)] {
        let fail = Input::TaskFailed {
            node: node.into(),
            attempt: qflow_core::Attempt::FIRST,
            kind: Default::default(),
            code: "DOWN".into(),
            message: String::new(),
        };
        snap = step(&def, "i", snap, fail, at).unwrap().snapshot;
    }
    assert!(snap.timers().contains_key("r:a") && snap.timers().contains_key("r:b"));
    (def, snap)
}

/// A mapping that swaps two parked tasks moves both parks: every renamed timer is taken
/// out before any is armed again, so neither new timer is resolved as the other's old one.
#[test]
fn swapping_two_parked_tasks_moves_both_parks() {
    let (def, snap) = two_parked();
    let input = Input::Migrate {
        mapping: BTreeMap::from([
            ("a".to_owned(), "b".to_owned()),
            ("b".to_owned(), "a".to_owned()),
        ]),
        timers: BTreeMap::from([("r:a".to_owned(), 1_010), ("r:b".to_owned(), 1_020)]),
        user_tasks: Vec::new(),
    };
    let out = step(&def, "i", snap.clone(), input, 30).unwrap();
    let s = &out.snapshot;
    assert_eq!(s.status(), Status::Running, "{:?}", out.effects);
    assert_eq!(s.tokens(), snap.tokens());
    assert!(s.timers().contains_key("r:a") && s.timers().contains_key("r:b"));
    assert!(s.marker("a").is_some() && s.marker("b").is_some());
    let armed: Vec<(String, i64)> = out
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::ArmTimer {
                name, due_at_ms, ..
            } => Some((name.to_string(), *due_at_ms)),
            _ => None,
        })
        .collect();
    // `a`'s park (due 1 010) is `b`'s now, and the other way round.
    assert_eq!(
        armed,
        [("r:b".to_owned(), 1_010), ("r:a".to_owned(), 1_020)],
        "{:?}",
        out.effects
    );
    // Each new timer's incarnation is the one the snapshot holds.
    for e in &out.effects {
        if let Effect::ArmTimer {
            name, incarnation, ..
        } = e
        {
            assert_eq!(s.timers()[name.as_str()], *incarnation);
        }
    }
}

/// A mapping that would merge two nodes holding state is refused, naming both.
#[test]
fn a_mapping_that_merges_two_nodes_with_state_is_refused() {
    let (def, snap) = two_parked();
    let input = Input::Migrate {
        mapping: BTreeMap::from([("a".to_owned(), "b".to_owned())]),
        timers: BTreeMap::from([("r:a".to_owned(), 1_010), ("r:b".to_owned(), 1_020)]),
        user_tasks: Vec::new(),
    };
    let out = step(&def, "i", snap.clone(), input, 30).unwrap();
    assert_eq!(out.snapshot.encode(), snap.encode());
    match out.effects.as_slice() {
        [Effect::Stale { reason }] => {
            assert!(
                reason.contains("`a` and `b` would both become `b`"),
                "{reason}"
            );
            assert!(reason.contains("timers `r:a` and `r:b`"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

// ----- the law over generated cases ------------------------------------------------------

mod law {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone, Copy)]
    pub enum Kind {
        Registered,
        Channel,
        Pull,
        ZeebeJob,
        Call,
        User,
        Script,
        MultiInstance,
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            Just(Kind::Registered),
            Just(Kind::Channel),
            Just(Kind::Pull),
            Just(Kind::ZeebeJob),
            Just(Kind::Call),
            Just(Kind::User),
            Just(Kind::Script),
            Just(Kind::MultiInstance),
        ]
    }

    /// The task `id` of `kind`, in v1 (`fixed` false: it fails for good) or v2 (fixed).
    fn task(kind: Kind, id: &str, fixed: bool) -> String {
        let retry = if fixed { RETRY4 } else { RETRY2 };
        match kind {
            Kind::Registered => format!(
                r#"<serviceTask id="{id}" q:task="work"><extensionElements>{retry}</extensionElements></serviceTask>"#
            ),
            Kind::Channel => format!(
                r#"<serviceTask id="{id}" q:channel="payments"><extensionElements>{retry}
                   <q:timeout duration="PT30S"/></extensionElements></serviceTask>"#
            ),
            Kind::Pull => pull_task("q", id, 3),
            Kind::ZeebeJob => pull_task("zeebe", id, if fixed { 5 } else { 1 }),
            Kind::Call => format!(
                r#"<callActivity id="{id}" calledElement="child"><extensionElements>{retry}
                   </extensionElements></callActivity>"#
            ),
            Kind::User => format!(r#"<userTask id="{id}"/>"#),
            Kind::Script => {
                let expr = if fixed { "price * 2" } else { "price * qty" };
                format!(
                    r#"<scriptTask id="{id}"><extensionElements>
                         <q:script expression="{expr}" resultVariable="total"/>
                       </extensionElements></scriptTask>"#
                )
            }
            Kind::MultiInstance => format!(
                r#"<serviceTask id="{id}" q:task="work"><extensionElements>{retry}</extensionElements>
                     <multiInstanceLoopCharacteristics isSequential="false">
                       <loopCardinality>2</loopCardinality>
                     </multiInstanceLoopCharacteristics></serviceTask>"#
            ),
        }
    }

    /// `s → [before →] (task | sub-process around it) → e`.
    fn definition(kind: Kind, id: &str, fixed: bool, before: bool, in_sub: bool) -> Definition {
        let t = task(kind, id, fixed);
        // What the flows around the task connect to: the task, or its sub-process.
        let (holder, body) = if in_sub {
            (
                "hold".to_owned(),
                format!(
                    r#"<subProcess id="hold"><startEvent id="hs"/>
                         <sequenceFlow id="h1" sourceRef="hs" targetRef="{id}"/>{t}
                         <sequenceFlow id="h2" sourceRef="{id}" targetRef="he"/><endEvent id="he"/>
                       </subProcess>"#
                ),
            )
        } else {
            (id.to_owned(), t)
        };
        let pre = if before {
            format!(
                r#"<sequenceFlow id="f0" sourceRef="s" targetRef="before"/>
                   <serviceTask id="before" q:task="before"/>
                   <sequenceFlow id="fb" sourceRef="before" targetRef="{holder}"/>"#
            )
        } else {
            format!(r#"<sequenceFlow id="f0" sourceRef="s" targetRef="{holder}"/>"#)
        };
        load(&format!(
            r#"{pre}{body}
            <sequenceFlow id="f1" sourceRef="{holder}" targetRef="e"/><endEvent id="e"/>"#
        ))
    }

    /// The scenario: the task fails for good, is migrated (`old` → `new`) at 10 s and
    /// resumed at 11 s, then succeeds.
    fn scenario(kind: Kind, old: &str, new: &str, budget: &str) -> Value {
        let inner = |id: &str| match kind {
            Kind::MultiInstance => format!("{id}#2"),
            _ => id.to_owned(),
        };
        let mut tasks = serde_json::Map::new();
        let mut channels = serde_json::Map::new();
        let mut events: Vec<Value> = Vec::new();
        let fail = json!([{"outcome": "fail", "code": "DOWN"}]);
        let ok = json!([{"outcome": "ok"}]);
        match kind {
            Kind::Registered | Kind::Call | Kind::MultiInstance => {
                tasks.insert(inner(old), fail);
                if old != new {
                    tasks.insert(inner(new), ok.clone());
                }
            }
            Kind::Channel => {
                channels.insert(old.into(), json!([{"answer": "poison"}]));
                if old != new {
                    channels.insert(new.into(), json!([{"answer": "ok"}]));
                }
            }
            Kind::Pull | Kind::ZeebeJob => {
                events.push(lock(1_000, old, 1));
                events.push(pull(
                    1_100,
                    json!({"type": "pull_failed", "node": old, "attempt": 1, "worker": "w",
                           "retries": 0}),
                ));
            }
            Kind::User => events.push(json!({"event": "user_task_bpmn_error", "at_ms": 1_000,
                                             "node": old, "code": "NO"})),
            Kind::Script => {}
        }
        let mapping = if old == new {
            json!({})
        } else {
            json!({ old: new })
        };
        events.push(json!({"event": "migrate", "at_ms": 10_000, "target": "v2",
                           "mapping": mapping}));
        events.push(resume(11_000, budget));
        match kind {
            Kind::Pull | Kind::ZeebeJob => {
                events.push(lock(12_000, new, 2));
                events.push(pull(
                    12_100,
                    json!({"type": "pull_completed", "node": new, "attempt": 2, "worker": "w"}),
                ));
            }
            Kind::User => events.push(json!({"event": "complete_user_task", "at_ms": 12_000,
                                             "node": new})),
            _ => {}
        }
        if old == new {
            // Onto the same ids the script that failed is what runs again; the fixed
            // version succeeds where the scripted outcome says so.
            if let Some(v) = tasks.get_mut(&inner(old)) {
                *v = json!([{"outcome": "fail", "code": "DOWN"}, {"outcome": "fail", "code": "DOWN"}, {"outcome": "ok"}]);
            }
            if let Some(v) = channels.get_mut(old) {
                *v = json!([{"answer": "poison"}, {"answer": "poison"}, {"answer": "ok"}]);
            }
        }
        json!({"variables": {"price": 5}, "tasks": tasks, "channels": channels, "events": events})
    }

    /// Whether `text` names `id` as a whole name (not `id` inside a longer id).
    fn names(text: &str, id: &str) -> bool {
        text.match_indices(id).any(|(at, _)| {
            let before = text[..at].chars().next_back();
            let after = text[at + id.len()..].chars().next();
            let edge = |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            edge(before) && edge(after)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        /// For every task kind, inside a sub-process or not, behind another task or not,
        /// renamed or not, with either budget: the FAILED instance migrates (the step is
        /// not stale), nothing in its state names the old node afterwards, the resumed
        /// instance ends COMPLETED, and the attempt history keeps the earlier attempts
        /// under the old name with the numbers going on under the new one.
        #[test]
        fn every_task_kind_migrates_and_resumes_to_the_fixed_end(
            kind in kind(),
            in_sub in any::<bool>(),
            before in any::<bool>(),
            rename in any::<bool>(),
            reset in any::<bool>(),
        ) {
            let old = "oldtask";
            let new = if rename { "newtask" } else { old };
            let v1 = definition(kind, old, false, before, in_sub);
            let v2 = definition(kind, new, true, before, in_sub);
            let budget = if reset { "reset" } else { "keep" };
            let trace = run(&v1, v2, scenario(kind, old, new, budget));
            let migrated = trace
                .steps
                .iter()
                .find(|s| s.input.kind() == "migrate")
                .expect("the run reaches its migration");
            let stale: Vec<&Effect> = migrated
                .effects
                .iter()
                .filter(|e| matches!(e, Effect::Stale { .. }))
                .collect();
            prop_assert!(stale.is_empty(), "{kind:?}: {stale:?}");
            let view = Snapshot::decode(&migrated.snapshot).unwrap().inspect().to_string();
            if rename {
                prop_assert!(!names(&view, old), "{kind:?}: {view}");
            }
            prop_assert_eq!(&trace.summary.status, "completed", "{:?}: {:?}", kind, trace.summary);
            let h = history(&trace);
            let (earlier, later): (Vec<_>, Vec<_>) =
                h.iter().filter(|(n, _)| n != "before").partition(|(n, _)| names(n, old));
            if rename {
                let last_old = earlier.iter().map(|(_, a)| *a).max().unwrap_or(0);
                prop_assert!(later.iter().all(|(n, a)| names(n, new) && *a > last_old), "{h:?}");
            }
        }
    }
}
