//! User tasks in the task list: a token entering a user task offers it with its
//! assignment evaluated; every way the wait ends withdraws it; claims and unclaims are
//! judged by the core against the snapshot's holder (`h/<node>`).

mod common;

use common::{effects, last, model, run_scenario};
use qflow_core::{codes, step, Effect, Input, Snapshot, Status};
use serde_json::json;

const CAMUNDA: &str = r#"xmlns:camunda="http://camunda.org/schema/1.0/bpmn""#;
const ZEEBE: &str = r#"xmlns:zeebe="http://camunda.org/schema/zeebe/1.0""#;

/// The task-list effects of a run: `(instant, effect)` for offers, assigns, withdrawals.
fn task_list(trace: &qflow_core::sim::Trace) -> Vec<(i64, Effect)> {
    effects(trace)
        .into_iter()
        .filter(|(_, e)| {
            matches!(
                e,
                Effect::OfferUserTask { .. }
                    | Effect::AssignUserTask { .. }
                    | Effect::WithdrawUserTask { .. }
            )
        })
        .collect()
}

fn offer(node: &str, assignee: Option<&str>, groups: &[&str], users: &[&str]) -> Effect {
    Effect::OfferUserTask {
        node: node.to_owned(),
        assignee: assignee.map(str::to_owned),
        candidate_groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        candidate_users: users.iter().map(|u| (*u).to_owned()).collect(),
    }
}

fn withdraw(node: &str) -> Effect {
    Effect::WithdrawUserTask {
        node: node.to_owned(),
    }
}

/// `start → approve → end`, `approve` carrying `attrs` (Camunda attributes).
fn approve(attrs: &str) -> qflow_loader::model::Definition {
    model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="approve"/>
        <userTask id="approve" {CAMUNDA} {attrs}/>
        <sequenceFlow id="f1" sourceRef="approve" targetRef="e"/><endEvent id="e"/>"#
    ))
}

fn started(def: &qflow_loader::model::Definition, vars: serde_json::Value) -> qflow_core::Step {
    let variables = serde_json::from_value(vars).unwrap();
    step(
        def,
        "i",
        Snapshot::new(),
        Input::Start {
            variables,
            start: None,
        },
        0,
    )
    .unwrap()
}

fn stale_reason(step: &qflow_core::Step) -> &str {
    match step.effects.as_slice() {
        [Effect::Stale { reason }] => reason,
        other => panic!("expected a stale input, got {other:?}"),
    }
}

#[test]
fn entering_offers_the_evaluated_assignment_and_completing_withdraws_it() {
    let def = approve(
        r#"camunda:assignee="${order.owner}" camunda:candidateGroups="sales, ${order.team}" camunda:candidateUsers="${reviewers}""#,
    );
    let trace = run_scenario(
        &def,
        r#"{"variables": {"order": {"owner": "ann", "team": "emea"}, "reviewers": ["bo", "cy", "bo"]},
            "events": [{"event": "complete_user_task", "at_ms": 7, "node": "approve",
                        "variables": {"ok": true}}]}"#,
    );
    assert_eq!(
        task_list(&trace),
        vec![
            (
                0,
                offer("approve", Some("ann"), &["sales", "emea"], &["bo", "cy"])
            ),
            (7, withdraw("approve")),
        ]
    );
    assert_eq!(trace.summary.status, "completed");
    // While it waited the snapshot named its holder; once done, nobody holds anything.
    let waiting = Snapshot::decode(&trace.steps[0].snapshot).unwrap();
    assert_eq!(waiting.assignee("approve"), Some("ann"));
    assert_eq!(waiting.inspect()["assignees"], json!({"approve": "ann"}));
    assert!(last(&trace).assignees().is_empty());
}

#[test]
fn zeebe_assignments_evaluate_feel_paths_and_comma_separated_strings() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="approve"/>
        <userTask id="approve" {ZEEBE}><extensionElements>
          <zeebe:assignmentDefinition assignee="= book.author" candidateGroups="= groups" candidateUsers="ann, bo"/>
        </extensionElements></userTask>
        <sequenceFlow id="f1" sourceRef="approve" targetRef="e"/><endEvent id="e"/>"#
    ));
    let out = started(
        &def,
        json!({"book": {"author": "cy"}, "groups": "editors, , proof"}),
    );
    assert_eq!(
        out.effects,
        vec![offer(
            "approve",
            Some("cy"),
            &["editors", "proof"],
            &["ann", "bo"]
        )]
    );
}

#[test]
fn a_task_nobody_is_named_for_is_offered_and_writes_no_holder() {
    let def = approve("");
    let out = started(&def, json!({}));
    assert_eq!(out.effects, vec![offer("approve", None, &[], &[])]);
    assert!(out.snapshot.assignees().is_empty());
    // A null assignee expression names nobody too.
    let def = approve(r#"camunda:assignee="${boss}""#);
    let out = started(&def, json!({"boss": null}));
    assert_eq!(out.effects, vec![offer("approve", None, &[], &[])]);
}

#[test]
fn an_assignment_that_does_not_evaluate_fails_the_instance_with_expression_failed() {
    for (attrs, vars, says) in [
        (r#"camunda:assignee="${boss}""#, json!({}), "assignee"),
        (
            r#"camunda:assignee="${boss}""#,
            json!({"boss": 7}),
            "not a string",
        ),
        (
            r#"camunda:candidateGroups="${groups}""#,
            json!({"groups": [1, 2]}),
            "not only strings",
        ),
        (
            r#"camunda:candidateUsers="${users}""#,
            json!({"users": (0..33).map(|i| format!("u{i}")).collect::<Vec<_>>()}),
            "more than 32",
        ),
        (
            r#"camunda:assignee="${boss}""#,
            json!({"boss": "x".repeat(129)}),
            "1 to 128 characters",
        ),
    ] {
        let def = approve(attrs);
        let out = started(&def, vars);
        assert_eq!(out.snapshot.status(), Status::Failed, "{attrs}");
        let failure = out.snapshot.failure().unwrap();
        assert_eq!(failure.code, codes::EXPRESSION_FAILED);
        assert_eq!(failure.node.as_deref(), Some("approve"));
        assert!(
            !out.effects
                .iter()
                .any(|e| matches!(e, Effect::OfferUserTask { .. })),
            "{attrs}: {:?}",
            out.effects
        );
        let incident = out.effects.iter().find_map(|e| match e {
            Effect::OpenIncident { message, .. } => Some(message.clone()),
            _ => None,
        });
        let message = incident.expect("an incident is opened");
        assert!(message.contains(says), "{attrs}: {message}");
        assert!(out.snapshot.assignees().is_empty());
    }
}

#[test]
fn an_interrupting_boundary_withdraws_the_task() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="approve"/>
        <userTask id="approve" {CAMUNDA} camunda:assignee="ann"/>
        <boundaryEvent id="late" attachedToRef="approve">
          <timerEventDefinition><timeDuration>PT1M</timeDuration></timerEventDefinition>
        </boundaryEvent>
        <sequenceFlow id="f1" sourceRef="approve" targetRef="e"/><endEvent id="e"/>
        <sequenceFlow id="f2" sourceRef="late" targetRef="e2"/><endEvent id="e2"/>"#
    ));
    let trace = run_scenario(&def, r#"{"variables": {}}"#);
    assert_eq!(
        task_list(&trace),
        vec![
            (0, offer("approve", Some("ann"), &[], &[])),
            (60_000, withdraw("approve")),
        ]
    );
    assert_eq!(trace.summary.status, "completed");
    assert!(last(&trace).assignees().is_empty());
}

#[test]
fn a_terminate_end_on_another_branch_withdraws_the_task() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
        <parallelGateway id="split"/>
        <sequenceFlow id="f1" sourceRef="split" targetRef="approve"/>
        <sequenceFlow id="f2" sourceRef="split" targetRef="wait"/>
        <userTask id="approve"/>
        <sequenceFlow id="f3" sourceRef="approve" targetRef="e"/><endEvent id="e"/>
        <intermediateCatchEvent id="wait"><timerEventDefinition><timeDuration>PT5S</timeDuration></timerEventDefinition></intermediateCatchEvent>
        <sequenceFlow id="f4" sourceRef="wait" targetRef="stop"/>
        <endEvent id="stop"><terminateEventDefinition/></endEvent>"#,
    );
    let trace = run_scenario(&def, r#"{"variables": {}}"#);
    assert_eq!(
        task_list(&trace),
        vec![
            (0, offer("approve", None, &[], &[])),
            (5_000, withdraw("approve"))
        ]
    );
    assert_eq!(trace.summary.status, "completed");
}

#[test]
fn a_cancel_withdraws_the_task() {
    let def = approve(r#"camunda:assignee="ann""#);
    let trace = run_scenario(
        &def,
        r#"{"variables": {}, "events": [{"event": "cancel", "at_ms": 3}]}"#,
    );
    assert_eq!(
        task_list(&trace),
        vec![
            (0, offer("approve", Some("ann"), &[], &[])),
            (3, withdraw("approve"))
        ]
    );
    assert!(last(&trace).assignees().is_empty());
}

/// `approve` waits beside a registered task `pay` without a policy: `pay` failing makes
/// the instance FAILED while the user task still waits.
fn approve_beside_failing_pay() -> qflow_loader::model::Definition {
    model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="split"/>
        <parallelGateway id="split"/>
        <sequenceFlow id="f1" sourceRef="split" targetRef="approve"/>
        <sequenceFlow id="f2" sourceRef="split" targetRef="pay"/>
        <userTask id="approve" {CAMUNDA} camunda:assignee="ann" camunda:candidateGroups="${{team}}"/>
        <serviceTask id="pay" q:task="pay"/>
        <sequenceFlow id="f3" sourceRef="approve" targetRef="join"/>
        <sequenceFlow id="f4" sourceRef="pay" targetRef="join"/>
        <parallelGateway id="join"/>
        <sequenceFlow id="f5" sourceRef="join" targetRef="e"/><endEvent id="e"/>"#
    ))
}

#[test]
fn failed_withdraws_the_task_and_a_resume_offers_it_again_keeping_its_holder() {
    let def = approve_beside_failing_pay();
    let trace = run_scenario(
        &def,
        r#"{"variables": {"team": "sales"},
            "tasks": {"pay": [{"outcome": "fail", "code": "DOWN", "after_ms": 5}, {"outcome": "ok"}]},
            "events": [
              {"event": "claim_user_task", "at_ms": 2, "node": "approve", "assignee": "bo", "force": true},
              {"event": "resume", "at_ms": 10},
              {"event": "complete_user_task", "at_ms": 20, "node": "approve", "assignee": "bo"}]}"#,
    );
    assert_eq!(
        task_list(&trace),
        vec![
            (0, offer("approve", Some("ann"), &["sales"], &[])),
            (
                2,
                Effect::AssignUserTask {
                    node: "approve".into(),
                    assignee: Some("bo".into())
                }
            ),
            (5, withdraw("approve")),
            // The resume offers it anew: candidates evaluated again, the holder kept.
            (10, offer("approve", Some("bo"), &["sales"], &[])),
            (20, withdraw("approve")),
        ]
    );
    assert_eq!(trace.summary.status, "completed");
    // While FAILED the holder stayed in the snapshot, for the resume.
    let failed = trace
        .steps
        .iter()
        .map(|s| Snapshot::decode(&s.snapshot).unwrap())
        .find(|s| s.status() == Status::Failed)
        .expect("the run was FAILED once");
    assert_eq!(failed.assignee("approve"), Some("bo"));
}

#[test]
fn claims_are_judged_against_the_holder() {
    let def = approve(r#"camunda:assignee="ann""#);
    let waiting = started(&def, json!({})).snapshot;
    let claim = |who: &str, force: bool| Input::UserTaskClaimed {
        node: "approve".into(),
        assignee: who.into(),
        force,
    };
    // Held by ann: bo is refused, unless forced; ann herself may claim again.
    let out = step(&def, "i", waiting.clone(), claim("bo", false), 1).unwrap();
    assert!(
        stale_reason(&out).contains("claimed by `ann`"),
        "{}",
        stale_reason(&out)
    );
    assert_eq!(out.snapshot.encode(), waiting.encode());
    let out = step(&def, "i", waiting.clone(), claim("ann", false), 1).unwrap();
    assert_eq!(out.snapshot.assignee("approve"), Some("ann"));
    let forced = step(&def, "i", waiting.clone(), claim("bo", true), 1).unwrap();
    assert_eq!(
        forced.effects,
        vec![Effect::AssignUserTask {
            node: "approve".into(),
            assignee: Some("bo".into())
        }]
    );
    let held = forced.snapshot;
    assert_eq!(held.assignee("approve"), Some("bo"));
    // Completing as somebody else is refused; as the holder it goes on.
    let complete = |who: Option<&str>| Input::UserTaskCompleted {
        node: "approve".into(),
        variables: Default::default(),
        assignee: who.map(str::to_owned),
    };
    let out = step(&def, "i", held.clone(), complete(Some("ann")), 2).unwrap();
    assert!(stale_reason(&out).contains("claimed by `bo`, not `ann`"));
    // Unclaiming as somebody else is refused; as the holder, nobody holds it.
    let unclaim = |who: Option<&str>| Input::UserTaskUnclaimed {
        node: "approve".into(),
        assignee: who.map(str::to_owned),
    };
    let out = step(&def, "i", held.clone(), unclaim(Some("ann")), 2).unwrap();
    assert!(stale_reason(&out).contains("claimed by `bo`, not `ann`"));
    let free = step(&def, "i", held.clone(), unclaim(Some("bo")), 2)
        .unwrap()
        .snapshot;
    assert_eq!(free.assignee("approve"), None);
    // A task nobody holds: any completion goes on, an unclaim naming somebody is refused,
    // an operator's unclaim is fine.
    let out = step(&def, "i", free.clone(), unclaim(Some("bo")), 3).unwrap();
    assert!(stale_reason(&out).contains("not claimed by anybody"));
    let out = step(&def, "i", free.clone(), unclaim(None), 3).unwrap();
    assert_eq!(
        out.effects,
        vec![Effect::AssignUserTask {
            node: "approve".into(),
            assignee: None
        }]
    );
    let done = step(&def, "i", free, complete(Some("cy")), 4).unwrap();
    assert_eq!(done.snapshot.status(), Status::Completed);
    assert!(
        done.effects.contains(&withdraw("approve")),
        "{:?}",
        done.effects
    );
    // And the holder completes.
    let done = step(&def, "i", held, complete(Some("bo")), 4).unwrap();
    assert_eq!(done.snapshot.status(), Status::Completed);
}

#[test]
fn claims_refuse_what_is_no_waiting_user_task() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="wait"/>
        <receiveTask id="wait"/>
        <sequenceFlow id="f1" sourceRef="wait" targetRef="approve"/>
        <userTask id="approve"/>
        <sequenceFlow id="f2" sourceRef="approve" targetRef="e"/><endEvent id="e"/>"#,
    );
    let waiting = started(&def, json!({})).snapshot;
    let claim = |node: &str, who: &str| Input::UserTaskClaimed {
        node: node.into(),
        assignee: who.into(),
        force: false,
    };
    // A receive task without a message is completed like a user task, but is no task
    // of the task list.
    let out = step(&def, "i", waiting.clone(), claim("wait", "ann"), 1).unwrap();
    assert!(stale_reason(&out).contains("is not a user task"));
    let out = step(&def, "i", waiting.clone(), claim("approve", "ann"), 1).unwrap();
    assert!(stale_reason(&out).contains("is not pending"));
    let out = step(&def, "i", waiting.clone(), claim("nowhere", "ann"), 1).unwrap();
    assert!(stale_reason(&out).contains("is not a user task"));
    let out = step(&def, "i", waiting, claim("approve", ""), 1).unwrap();
    assert!(stale_reason(&out).contains("is not pending") || stale_reason(&out).contains("1 to"));
}

#[test]
fn a_claim_with_a_bad_name_is_refused() {
    let def = approve("");
    let waiting = started(&def, json!({})).snapshot;
    for bad in ["".to_owned(), "x".repeat(129), "a\u{7}b".to_owned()] {
        let input = Input::UserTaskClaimed {
            node: "approve".into(),
            assignee: bad.clone(),
            force: false,
        };
        let out = step(&def, "i", waiting.clone(), input, 1).unwrap();
        assert!(stale_reason(&out).contains("the assignee"), "{bad:?}");
    }
}

#[test]
fn a_loop_back_to_the_task_offers_it_afresh_with_the_models_assignee() {
    let def = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="approve"/>
        <userTask id="approve" {CAMUNDA} camunda:assignee="${{owner}}"/>
        <sequenceFlow id="f1" sourceRef="approve" targetRef="again"/>
        <exclusiveGateway id="again" default="done"/>
        <sequenceFlow id="back" sourceRef="again" targetRef="approve"><conditionExpression>redo</conditionExpression></sequenceFlow>
        <sequenceFlow id="done" sourceRef="again" targetRef="e"/><endEvent id="e"/>"#
    ));
    let trace = run_scenario(
        &def,
        r#"{"variables": {"owner": "ann", "redo": true},
            "events": [
              {"event": "claim_user_task", "at_ms": 1, "node": "approve", "assignee": "bo", "force": true},
              {"event": "complete_user_task", "at_ms": 2, "node": "approve",
               "variables": {"owner": "cy"}},
              {"event": "complete_user_task", "at_ms": 3, "node": "approve",
               "variables": {"redo": false}}]}"#,
    );
    assert_eq!(
        task_list(&trace),
        vec![
            (0, offer("approve", Some("ann"), &[], &[])),
            (
                1,
                Effect::AssignUserTask {
                    node: "approve".into(),
                    assignee: Some("bo".into())
                }
            ),
            // Entered again in the same step: one upsert, evaluated afresh.
            (2, offer("approve", Some("cy"), &[], &[])),
            (3, withdraw("approve")),
        ]
    );
}

#[test]
fn a_migration_withdraws_the_old_rows_and_offers_under_the_targets_names() {
    let v1 = approve(r#"camunda:candidateGroups="sales""#);
    let v2 = model(&format!(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="review"/>
        <userTask id="review" {CAMUNDA} camunda:assignee="ann" camunda:candidateGroups="sales, legal"/>
        <sequenceFlow id="f1" sourceRef="review" targetRef="e"/><endEvent id="e"/>"#
    ));
    let waiting = started(&v1, json!({})).snapshot;
    let claimed = step(
        &v1,
        "i",
        waiting,
        Input::UserTaskClaimed {
            node: "approve".into(),
            assignee: "bo".into(),
            force: false,
        },
        1,
    )
    .unwrap()
    .snapshot;
    let input = Input::Migrate {
        mapping: [("approve".to_owned(), "review".to_owned())].into(),
        timers: Default::default(),
        user_tasks: vec!["approve".into()],
    };
    let out = step(&v2, "i", claimed, input, 2).unwrap();
    let list: Vec<&Effect> = out
        .effects
        .iter()
        .filter(|e| {
            matches!(
                e,
                Effect::OfferUserTask { .. } | Effect::WithdrawUserTask { .. }
            )
        })
        .collect();
    // The holder travels with the renamed node; the target's candidates apply.
    assert_eq!(
        list,
        vec![
            &withdraw("approve"),
            &offer("review", Some("bo"), &["sales", "legal"], &[])
        ]
    );
    assert_eq!(out.snapshot.assignee("review"), Some("bo"));
    assert_eq!(out.snapshot.assignee("approve"), None);
}

#[test]
fn a_model_without_user_tasks_emits_no_task_list_effects() {
    let def = model(
        r#"<startEvent id="s"/><sequenceFlow id="f0" sourceRef="s" targetRef="t"/>
        <serviceTask id="t" q:task="t"/>
        <sequenceFlow id="f1" sourceRef="t" targetRef="e"/><endEvent id="e"/>"#,
    );
    let trace = run_scenario(&def, r#"{"variables": {}}"#);
    assert!(task_list(&trace).is_empty());
    assert_eq!(trace.summary.status, "completed");
}

#[test]
fn offering_again_restores_the_rows_of_waiting_tasks_and_keeps_the_holder() {
    let def = approve(r#"camunda:assignee="${owner}" camunda:candidateGroups="sales""#);
    let waiting = started(&def, json!({"owner": "ann"})).snapshot;
    let claimed = step(
        &def,
        "i",
        waiting,
        Input::UserTaskClaimed {
            node: "approve".into(),
            assignee: "bo".into(),
            force: true,
        },
        1,
    )
    .unwrap()
    .snapshot;
    let out = step(&def, "i", claimed.clone(), Input::OfferUserTasks, 2).unwrap();
    assert_eq!(
        out.effects,
        vec![offer("approve", Some("bo"), &["sales"], &[])]
    );
    assert_eq!(out.snapshot.encode(), claimed.encode());
    // Nothing waits at a user task any more: stale, nothing written.
    let done = step(
        &def,
        "i",
        claimed,
        Input::UserTaskCompleted {
            node: "approve".into(),
            variables: Default::default(),
            assignee: None,
        },
        3,
    )
    .unwrap()
    .snapshot;
    let out = step(&def, "i", done, Input::OfferUserTasks, 4).unwrap();
    assert!(stale_reason(&out).contains("instance is completed"));
}
