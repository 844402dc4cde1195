//! The operator commands against the file `qflow run` leaves: find the FAILED instances,
//! inspect one, resume it, and see every refusal exit 1 with nothing changed.

mod common;

use std::path::Path;
use std::process::{Command, Output};

fn qflow(args: &[&str], db: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qflow"))
        .args(args)
        .arg("--db")
        .arg(db)
        .output()
        .expect("run qflow")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "qflow failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the JSON output parses")
}

#[test]
fn a_failed_instance_from_the_main_job_is_found_inspected_and_resumed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("run.sqlite");
    // 200 instances: each is FAILED by its script with probability 0.09, so a run
    // without one is a one-in-a-hundred-million event.
    let run = qflow(&["run", "--instances", "200"], &db);
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("qflow instances show "), "{stdout}");

    let failed = json(&qflow(
        &["instances", "list", "--state", "failed", "--format", "json"],
        &db,
    ));
    let failed = failed.as_array().expect("a list");
    assert!(!failed.is_empty(), "the main job leaves FAILED instances");
    assert!(failed.iter().all(|i| i["status"] == "failed"));
    let id = failed[0]["id"].as_str().expect("an id").to_owned();
    let code = failed[0]["failure_code"]
        .as_str()
        .expect("a code")
        .to_owned();

    let shown = json(&qflow(&["instances", "show", &id, "--format", "json"], &db));
    assert_eq!(shown["instance"]["failure_code"], code.as_str());
    assert_eq!(shown["snapshot"]["failure"]["node"], "charge");
    let history = json(&qflow(
        &["instances", "history", &id, "--format", "json"],
        &db,
    ));
    let burned = history
        .as_array()
        .expect("rows")
        .iter()
        .filter(|a| a["node"] == "charge")
        .count();
    assert!(burned >= 1);
    let human = qflow(&["instances", "show", &id], &db);
    let human = String::from_utf8_lossy(&human.stdout).into_owned();
    assert!(
        human.contains(&format!("state       failed {code}")),
        "{human}"
    );

    // A completed instance is not FAILED: resume is refused (exit 1) and changes nothing.
    let done = json(&qflow(
        &[
            "instances",
            "list",
            "--state",
            "completed",
            "--limit",
            "1",
            "--format",
            "json",
        ],
        &db,
    ));
    let done_id = done[0]["id"].as_str().expect("an id").to_owned();
    let before = json(&qflow(
        &["instances", "show", &done_id, "--format", "json"],
        &db,
    ));
    let refused = qflow(&["instances", "resume", &done_id], &db);
    assert_eq!(refused.status.code(), Some(1));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("refused") && err.contains("not failed"),
        "{err}"
    );
    let after = json(&qflow(
        &["instances", "show", &done_id, "--format", "json"],
        &db,
    ));
    assert_eq!(before, after);

    // Unknown and malformed ids: exit 1, with the reason.
    let unknown = qflow(
        &["instances", "show", "00000000-0000-4000-8000-000000000000"],
        &db,
    );
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("does not exist"));
    let malformed = qflow(&["instances", "history", "nope"], &db);
    assert_eq!(malformed.status.code(), Some(1));

    // The resume itself: a new attempt, handed to the next runtime on the file.
    let resumed = json(&qflow(
        &[
            "instances",
            "resume",
            &id,
            "--format",
            "json",
            "--actor",
            "ops-test",
        ],
        &db,
    ));
    assert_eq!(resumed["status"], "running");
    let started = resumed["attempts_started"][0].as_str().expect("an attempt");
    assert_eq!(started, format!("charge#{}", burned + 1));
    let again = qflow(&["instances", "resume", &id], &db);
    assert_eq!(
        again.status.code(),
        Some(1),
        "running now: a second resume is refused"
    );
    // The audit log has the resume that took effect, and nothing of the refusals.
    let audit = json(&qflow(&["audit", "--format", "json"], &db));
    let audit = audit.as_array().expect("rows");
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["actor"], "ops-test");
    assert_eq!(audit[0]["action"], "resume");
    assert_eq!(audit[0]["instance"], id.as_str());
    // The next `qflow run` on the file re-adopts the handed-over attempt and finishes it
    // (its script decides how: a declined card fails again, a flaky one completes).
    let next = qflow(&["run", "--instances", "1"], &db);
    assert!(
        next.status.success(),
        "{}",
        String::from_utf8_lossy(&next.stderr)
    );
    let shown = json(&qflow(&["instances", "show", &id, "--format", "json"], &db));
    assert_ne!(shown["instance"]["status"], "running");
    let history = json(&qflow(
        &["instances", "history", &id, "--format", "json"],
        &db,
    ));
    let charges = history
        .as_array()
        .expect("rows")
        .iter()
        .filter(|a| a["node"] == "charge")
        .count();
    assert_eq!(charges, burned + 1, "exactly one more attempt ran");
    // Each command closes the store: no WAL is left beside the file.
    common::assert_store_closed(&db, "the operator commands");
}

#[test]
fn the_commands_need_an_existing_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("none.sqlite");
    let out = qflow(&["deployments"], &missing);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no qflow store"));
    assert!(!missing.exists(), "nothing was created");
}

/// Deploys the bundled model with a comment added (new content, a new version) from a
/// file in `dir`; returns the version.
fn deploy_changed(dir: &Path, db: &Path) -> i64 {
    deploy_tagged(dir, db, "v2")
}

/// [`deploy_changed`] with the comment `tag`: each tag is another version.
fn deploy_tagged(dir: &Path, db: &Path, tag: &str) -> i64 {
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/orders.bpmn");
    let source = std::fs::read_to_string(model).expect("reads the model");
    let changed = dir.join(format!("{tag}.bpmn"));
    let tagged = source.replace("</definitions>", &format!("<!-- {tag} --></definitions>"));
    std::fs::write(&changed, tagged).expect("writes");
    let deployed = json(&qflow(
        &["deploy", changed.to_str().unwrap(), "--format", "json"],
        db,
    ));
    deployed["id"].as_i64().expect("a version")
}

#[test]
fn deploy_and_retire_work_on_the_store_and_refuse_what_they_must() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("run.sqlite");
    let run = qflow(&["run", "--instances", "200"], &db);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/orders.bpmn");

    // The bundled model again: the same content is the same version.
    let same = json(&qflow(&["deploy", model, "--format", "json"], &db));
    assert_eq!(same["id"], 1);
    // Version 1 holds FAILED instances: retiring it is refused, and it stays live.
    let refused = qflow(&["retire", "1"], &db);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("FAILED"));
    let listed = json(&qflow(&["deployments", "--format", "json"], &db));
    assert_eq!(listed[0]["retired"], false);
    let before = listed.as_array().map(Vec::len).expect("a list");

    // A changed model is a new version, retired at once since nothing references it.
    let v2_id = deploy_changed(dir.path(), &db);
    assert_eq!(v2_id, before as i64 + 1, "a new, next version");
    let retired = json(&qflow(
        &["retire", &v2_id.to_string(), "--format", "json"],
        &db,
    ));
    assert_eq!(retired["retired"], true);
    assert_eq!(qflow(&["retire", "99"], &db).status.code(), Some(1));

    // A model the loader refuses: exit 1, the diagnostics, nothing stored.
    let broken = dir.path().join("broken.bpmn");
    std::fs::write(&broken, "<definitions").expect("writes");
    let out = qflow(&["deploy", broken.to_str().unwrap()], &db);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("1:1: Q001"));
    let listed = json(&qflow(&["deployments", "--format", "json"], &db));
    assert_eq!(listed.as_array().map(Vec::len), Some(before + 1));
}

/// How many instances deployment `version` holds.
fn instances_on(db: &Path, version: i64) -> usize {
    let version = version.to_string();
    let listed = json(&qflow(
        &[
            "instances",
            "list",
            "--deployment",
            &version,
            "--format",
            "json",
        ],
        db,
    ));
    listed.as_array().map_or(0, Vec::len)
}

#[test]
fn migrate_dry_runs_then_moves_the_failed_instances() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("run.sqlite");
    let run = qflow(&["run", "--instances", "200"], &db);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let v2 = deploy_changed(dir.path(), &db);
    let failed = json(&qflow(
        &[
            "instances",
            "list",
            "--state",
            "failed",
            "--deployment",
            "1",
            "--format",
            "json",
        ],
        &db,
    ));
    let failed = failed.as_array().expect("a list").len();
    assert!(failed > 0);

    let write_plan = |name: &str, body: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, body).expect("writes the plan");
        path
    };
    let plan = write_plan("plan.json", format!(r#"{{"source": 1, "target": {v2}}}"#));
    let plan = plan.to_str().unwrap();
    let dry = json(&qflow(
        &["migrate", plan, "--dry-run", "--format", "json"],
        &db,
    ));
    assert_eq!(dry["summary"]["total"], failed, "{dry}");
    assert_eq!(dry["summary"]["would_migrate"], failed, "{dry}");
    assert_eq!(dry["summary"]["refused"], 0, "{dry}");
    let dry = dry["results"].as_array().expect("results");
    assert_eq!(
        dry.len(),
        failed,
        "every FAILED instance (none is parked after the run)"
    );
    assert!(
        dry.iter().all(|r| r["outcome"] == "would_migrate"),
        "{dry:?}"
    );
    let still = json(&qflow(
        &[
            "instances",
            "list",
            "--deployment",
            "1",
            "--state",
            "failed",
            "--format",
            "json",
        ],
        &db,
    ));
    assert_eq!(
        still.as_array().map(Vec::len),
        Some(failed),
        "the dry run wrote nothing"
    );

    let done = json(&qflow(&["migrate", plan, "--format", "json"], &db));
    assert_eq!(done["summary"]["migrated"], failed, "{done}");
    assert!(done["results"]
        .as_array()
        .expect("results")
        .iter()
        .all(|r| r["outcome"] == "migrated"));
    assert_eq!(instances_on(&db, v2), failed);

    // Refusals: exit 1, nothing changes.
    let unknown = write_plan(
        "bad.json",
        r#"{"source": 1, "target": 2, "frob": 1}"#.into(),
    );
    assert_eq!(
        qflow(&["migrate", unknown.to_str().unwrap()], &db)
            .status
            .code(),
        Some(1)
    );
    let missing = write_plan(
        "missing.json",
        format!(r#"{{"source": {v2}, "target": 1, "mapping": {{"charge": "nowhere"}}}}"#),
    );
    let out = qflow(&["migrate", missing.to_str().unwrap()], &db);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nowhere"));
    assert_eq!(instances_on(&db, v2), failed);

    // One plan, two instances: one on the source moves, a completed one of version 1 is
    // refused. The text ends with the counts and the exit status is 1, in the dry run
    // too; the JSON is the report, counts first.
    let v3 = deploy_tagged(dir.path(), &db, "v3");
    let listed = |args: &[&str]| -> String {
        let mut all = vec!["instances", "list", "--limit", "1", "--format", "json"];
        all.extend_from_slice(args);
        let rows = json(&qflow(&all, &db));
        rows[0]["id"].as_str().expect("an id").to_owned()
    };
    let moving = listed(&["--deployment", &v2.to_string()]);
    let completed = listed(&["--deployment", "1", "--state", "completed"]);
    let mixed = write_plan(
        "mixed.json",
        format!(r#"{{"source": {v2}, "target": {v3}, "instances": ["{moving}", "{completed}"]}}"#),
    );
    let mixed = mixed.to_str().unwrap();
    let out = qflow(&["migrate", mixed, "--dry-run"], &db);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.ends_with("2 instances: 1 would migrate, 1 refused\n"),
        "{text}"
    );
    assert!(text.contains(&format!("{completed} refused\n")), "{text}");
    assert_eq!(instances_on(&db, v3), 0, "the dry run wrote nothing");
    let out = qflow(&["migrate", mixed, "--format", "json"], &db);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        report["summary"],
        serde_json::json!({"total": 2, "migrated": 1, "would_migrate": 0, "refused": 1}),
        "{report}"
    );
    assert_eq!(report["results"][0]["instance"], moving.as_str());
    assert_eq!(report["results"][0]["outcome"], "migrated");
    assert_eq!(report["results"][1]["instance"], completed.as_str());
    assert_eq!(report["results"][1]["outcome"], "refused");
    let why = report["results"][1]["reason"].as_str().unwrap_or_default();
    assert!(why.contains(&format!("not {v2}")), "{why}");
    assert_eq!(instances_on(&db, v3), 1, "the other instance moved");
}

const WAITS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <message id="m" name="contract-signed"/>
  <process id="contract" isExecutable="true">
    <startEvent id="start"/>
    <userTask id="approve"/>
    <receiveTask id="signed" messageRef="m"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="approve"/>
    <sequenceFlow id="f1" sourceRef="approve" targetRef="signed"/>
    <sequenceFlow id="f2" sourceRef="signed" targetRef="end"/>
  </process>
</definitions>"#;

/// Deploys `model` on a new store at `db`, starts one instance with a runtime that has no
/// handlers, waits until `settled` holds, stops the runtime and returns the instance id.
fn one_instance(
    db: &Path,
    model: &str,
    settled: impl Fn(&qflow_runtime::StatsView) -> bool,
) -> String {
    tokio::runtime::Runtime::new()
        .expect("tokio")
        .block_on(async {
            use std::sync::Arc;
            let store = qflow_persistence::SqliteStore::open(db)
                .await
                .expect("store");
            let rt = qflow_runtime::Runtime::start(
                Arc::new(store),
                qflow_runtime::AsyncHandlers::new(),
                Arc::new(qflow_runtime::SystemClock),
                qflow_runtime::RuntimeConfig::default(),
            );
            let dep = rt.deploy(model, None).await.expect("deploys");
            let id = rt
                .start_instance(dep.id, Default::default())
                .await
                .expect("starts");
            rt.wait_until(settled).await;
            rt.shutdown().await;
            id.to_string()
        })
}

#[test]
fn a_user_task_is_completed_and_a_message_delivered_from_the_command_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("waits.sqlite");
    // An instance waiting at `approve`, written by a runtime that then stops.
    let id = one_instance(&db, WAITS, |_| true);
    let show = |db: &Path| json(&qflow(&["instances", "show", &id, "--format", "json"], db));
    let before = show(&db);

    let refused = [
        &["instances", "message", &id, "contract-signed"][..],
        &["instances", "complete", &id, "signed"][..],
        &[
            "instances",
            "complete",
            &id,
            "approve",
            "--variables",
            "[1]",
        ][..],
    ];
    for args in refused {
        let out = qflow(args, &db);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = qflow(refused[2], &db);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--variables"));
    assert_eq!(show(&db), before, "a refusal changed the instance");

    let done = json(&qflow(
        &[
            "instances",
            "complete",
            &id,
            "approve",
            "--variables",
            r#"{"approved": true}"#,
            "--format",
            "json",
        ],
        &db,
    ));
    assert_eq!(done["status"], "running");
    let done = json(&qflow(
        &[
            "instances",
            "message",
            &id,
            "contract-signed",
            "--variables",
            r#"{"signer": "ada"}"#,
            "--format",
            "json",
        ],
        &db,
    ));
    assert_eq!(done["status"], "completed");
    let after = show(&db);
    assert_eq!(after["snapshot"]["variables"]["approved"], true, "{after}");
    assert_eq!(after["snapshot"]["variables"]["signer"], "ada", "{after}");
}

#[test]
fn an_incident_is_resolved_from_the_command_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("incident.sqlite");
    let model = WAITS.replace(
        r#"<userTask id="approve"/>"#,
        r#"<serviceTask id="approve" q:task="nobody" xmlns:q="urn:qflow:bpmn:1"/>"#,
    );
    // An instance FAILED at `approve` (no handler runs it), with its incident open.
    let id = one_instance(&db, &model, |s| s.failed >= 1);
    let incidents = |db: &Path| {
        json(&qflow(
            &["incidents", "--instance", &id, "--format", "json"],
            db,
        ))
    };
    assert!(incidents(&db)[0].get("resolved_at_ms").is_none());
    let out = qflow(&["incidents", "resolve", &id, "elsewhere"], &db);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = json(&qflow(
        &["incidents", "resolve", &id, "approve", "--format", "json"],
        &db,
    ));
    assert_eq!(done["status"], "failed");
    assert!(incidents(&db)[0]["resolved_at_ms"].is_i64());
    let out = qflow(&["incidents", "resolve", &id, "approve"], &db);
    assert_eq!(out.status.code(), Some(1), "resolved twice");
}

const KEYED: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1"
    id="d" targetNamespace="t">
  <message id="m" name="payment-received" q:correlationKey="'order-' + '7'"/>
  <process id="shop" isExecutable="true">
    <startEvent id="start"/>
    <receiveTask id="paid" messageRef="m"/>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="paid"/>
    <sequenceFlow id="f1" sourceRef="paid" targetRef="end"/>
  </process>
</definitions>"#;

#[test]
fn a_message_is_correlated_by_key_from_the_command_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("keyed.sqlite");
    // The key is an expression; instances started here have no variables.
    let id = one_instance(&db, KEYED, |_| true);
    let show = |db: &Path| json(&qflow(&["instances", "show", &id, "--format", "json"], db));
    let before = show(&db);
    assert_eq!(
        before["subscriptions"][0]["correlation_key"], "order-7",
        "{before}"
    );
    let waiting = json(&qflow(
        &["instances", "list", "--node", "paid", "--format", "json"],
        &db,
    ));
    assert_eq!(waiting[0]["id"], id.as_str(), "{waiting}");

    let out = qflow(
        &["instances", "correlate", "payment-received", "order-8"],
        &db,
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("with key `order-8`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(show(&db), before, "a refusal changed the instance");

    let done = json(&qflow(
        &[
            "instances",
            "correlate",
            "payment-received",
            "order-7",
            "--variables",
            r#"{"paid_cents": 4200}"#,
            "--format",
            "json",
        ],
        &db,
    ));
    assert_eq!(done["deliveries"][0]["instance"], id.as_str(), "{done}");
    assert_eq!(
        done["deliveries"][0]["applied"]["status"], "completed",
        "{done}"
    );
    let after = show(&db);
    assert_eq!(
        after["snapshot"]["variables"]["paid_cents"], 4200,
        "{after}"
    );
    assert!(
        after["subscriptions"].as_array().unwrap().is_empty(),
        "{after}"
    );
    let ended = json(&qflow(
        &["instances", "list", "--ended-from", "0", "--format", "json"],
        &db,
    ));
    assert_eq!(ended[0]["id"], id.as_str(), "{ended}");
}

const REVIEW: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="t">
  <process id="review" isExecutable="true">
    <startEvent id="start"/>
    <userTask id="approve" name="Approve the order">
      <extensionElements>
        <zeebe:assignmentDefinition candidateGroups="sales, legal" candidateUsers="ann"/>
      </extensionElements>
    </userTask>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="approve"/>
    <sequenceFlow id="f1" sourceRef="approve" targetRef="end"/>
  </process>
</definitions>"#;

#[test]
fn the_task_list_is_listed_claimed_and_completed_from_the_command_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("tasks.sqlite");
    let id = one_instance(&db, REVIEW, |_| true);
    let list = |extra: &[&str]| {
        let mut args = vec!["user-tasks", "list", "--format", "json"];
        args.extend_from_slice(extra);
        json(&qflow(&args, &db))
    };
    let all = list(&["--candidate-group", "legal"]);
    assert_eq!(all[0]["instance"], id.as_str(), "{all}");
    assert_eq!(all[0]["name"], "Approve the order");
    assert_eq!(
        all[0]["candidate_groups"],
        serde_json::json!(["sales", "legal"])
    );
    assert_eq!(list(&["--unassigned"]).as_array().unwrap().len(), 1);
    assert!(list(&["--assignee", "bo"]).as_array().unwrap().is_empty());

    let human = qflow(&["user-tasks", "show", &id, "approve"], &db);
    let human = String::from_utf8_lossy(&human.stdout).into_owned();
    assert!(human.contains("groups      sales, legal"), "{human}");

    let claimed = json(&qflow(
        &[
            "user-tasks",
            "claim",
            &id,
            "approve",
            "bo",
            "--format",
            "json",
        ],
        &db,
    ));
    assert_eq!(claimed["status"], "running");
    assert_eq!(list(&["--assignee", "bo"]).as_array().unwrap().len(), 1);
    // Held by bo: ann's claim and ann's completion exit 1, saying why.
    for args in [
        &["user-tasks", "claim", &id, "approve", "ann"][..],
        &[
            "user-tasks",
            "complete",
            &id,
            "approve",
            "--assignee",
            "ann",
        ][..],
        &["user-tasks", "unclaim", &id, "approve", "--assignee", "ann"][..],
        &["user-tasks", "claim", &id, "nowhere", "ann"][..],
        &["user-tasks", "list", "--limit", "0"][..],
    ] {
        let out = qflow(args, &db);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            err.contains("bo") || err.contains("nowhere") || err.contains("limit"),
            "{args:?}: {err}"
        );
    }
    let done = json(&qflow(
        &[
            "user-tasks",
            "complete",
            &id,
            "approve",
            "--assignee",
            "bo",
            "--variables",
            r#"{"ok": true}"#,
            "--format",
            "json",
        ],
        &db,
    ));
    assert_eq!(done["status"], "completed");
    assert!(list(&[]).as_array().unwrap().is_empty());
}

/// An instance that waits at a user task since before the task list existed has no row;
/// `qflow user-tasks backfill` offers it again, once.
#[test]
fn a_backfill_offers_tasks_that_wait_without_a_row_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("backfill.sqlite");
    let id = one_instance(&db, REVIEW, |_| true);
    // Take the row away, as a store from before migration 0009 would be.
    tokio::runtime::Runtime::new()
        .expect("tokio")
        .block_on(async {
            use qflow_store::{Commit, InstanceState, Store};
            let store = qflow_persistence::SqliteStore::open(&db)
                .await
                .expect("store");
            let id = qflow_ops::parse_instance_id(&id).expect("id");
            let rec = store.instance(id).await.expect("reads").expect("exists");
            let state = InstanceState {
                status: rec.status,
                failure_code: rec.failure_code.clone(),
                snapshot: rec.snapshot.clone(),
                business_key: None,
            };
            let mut c = Commit::new(
                id,
                Some(rec.fence),
                rec.deployment,
                state,
                rec.updated_at_ms,
            );
            c.user_tasks.withdraw = vec!["approve".into()];
            store.commit(vec![c]).await.expect("commits");
            store.close().await;
        });
    let listed = |db: &Path| json(&qflow(&["user-tasks", "list", "--format", "json"], db));
    assert!(listed(&db).as_array().unwrap().is_empty());
    let done = json(&qflow(&["user-tasks", "backfill", "--format", "json"], &db));
    assert_eq!(done["examined"], 1, "{done}");
    assert_eq!(done["offered"], serde_json::json!([id]), "{done}");
    let rows = listed(&db);
    assert_eq!(rows[0]["instance"], id.as_str(), "{rows}");
    assert_eq!(
        rows[0]["candidate_groups"],
        serde_json::json!(["sales", "legal"])
    );
    // Nothing is missing any more: a second backfill offers nothing.
    let again = json(&qflow(&["user-tasks", "backfill", "--format", "json"], &db));
    assert_eq!(again["offered"], serde_json::json!([]), "{again}");
}
