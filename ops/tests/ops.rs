//! The operator API against a durable store with a runtime serving it, on a manual
//! clock: a FAILED instance is inspected, resumed and completes; a parked one is retried
//! now; every refusal leaves the instance as it was.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use qflow_core::{Budget, Snapshot};
use qflow_ops::{Error, MigrationOutcome, MigrationSummary, Ops};
use qflow_persistence::SqliteStore;
use qflow_runtime::{
    AsyncHandlers, Clock, ManualClock, Runtime, RuntimeConfig, TaskContext, TaskOutcome,
};
use qflow_store::{InstanceId, InstanceStatus, Store};

const T0: i64 = 1_700_000_000_000;

/// One task; `policy` is the `q:retry` element, if any.
fn model(policy: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="billing" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="pay" q:task="pay"><extensionElements>{policy}</extensionElements></serviceTask>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="pay"/>
    <sequenceFlow id="f1" sourceRef="pay" targetRef="end"/>
  </process>
</definitions>"#
    )
}

struct World {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    clock: Arc<ManualClock>,
    rt: Runtime,
    ops: Ops,
    /// While set, `pay` fails with `GATEWAY_DOWN`.
    broken: Arc<AtomicBool>,
    calls: Arc<AtomicU32>,
}

async fn world() -> World {
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.path().join("qflow.db"))
            .await
            .expect("opens sqlite"),
    );
    let clock = Arc::new(ManualClock::new(T0));
    let broken = Arc::new(AtomicBool::new(true));
    let calls = Arc::new(AtomicU32::new(0));
    let (b, c) = (broken.clone(), calls.clone());
    let handlers = AsyncHandlers::new().with_sync("pay", move |_: &TaskContext<'_>| {
        c.fetch_add(1, Ordering::SeqCst);
        if b.load(Ordering::SeqCst) {
            TaskOutcome::Fail {
                code: "GATEWAY_DOWN".into(),
                message: "503".into(),
            }
        } else {
            TaskOutcome::Ok(Default::default())
        }
    });
    let config = RuntimeConfig {
        lanes: 1,
        poll_interval_ms: 1,
        ..RuntimeConfig::default()
    };
    let rt = Runtime::start(store.clone(), handlers, clock.clone(), config);
    let now = clock.clone();
    let ops = Ops::new(store.clone(), Arc::new(move || now.now_ms()), "alice");
    World {
        _dir: dir,
        store,
        clock,
        rt,
        ops,
        broken,
        calls,
    }
}

impl World {
    async fn start(&self, policy: &str) -> InstanceId {
        let dep = self.rt.deploy(&model(policy), None).await.expect("deploys");
        self.rt
            .start_instance(dep.id, Default::default())
            .await
            .expect("starts")
    }

    async fn fence(&self, id: InstanceId) -> u64 {
        let rec = self.store.instance(id).await.expect("reads");
        rec.expect("exists").fence
    }

    /// Lets the poller look once (the manual clock moves one millisecond) and waits
    /// until `done` holds.
    async fn poll_until(&self, done: impl Fn(&qflow_runtime::StatsView) -> bool) {
        self.clock.advance_ms(1);
        let wait = self.rt.wait_until(done);
        tokio::time::timeout(std::time::Duration::from_secs(120), wait)
            .await
            .expect("the runtime stopped making progress (hang guard, not a timing check)");
    }
}

fn history(rows: &[qflow_ops::AttemptView]) -> Vec<(u32, &str)> {
    rows.iter().map(|a| (a.attempt, a.outcome)).collect()
}

#[tokio::test]
async fn a_failed_instance_is_inspected_resumed_and_completes() {
    let w = world().await;
    let id = w.start("").await;
    w.rt.wait_until(|s| s.failed >= 1).await;

    let view = w.ops.inspect(id).await.expect("inspects");
    assert_eq!(view.instance.status, "failed");
    assert_eq!(view.instance.failure_code.as_deref(), Some("GATEWAY_DOWN"));
    assert_eq!(view.snapshot["failure"]["node"], "pay");
    assert_eq!(view.snapshot["frontier"], serde_json::json!(["pay"]));
    assert_eq!(view.incidents.len(), 1);
    assert!(view.incidents[0].resolved_at_ms.is_none());

    // A FAILED instance has no backoff pending: retry-now is refused, nothing changes.
    let fence = w.fence(id).await;
    match w.ops.retry_now(id, None).await {
        Err(Error::Refused(why)) => assert!(why.contains("instance is failed"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(w.fence(id).await, fence);

    // The gateway is fixed; the operator resumes. The attempt is handed to the runtime,
    // which re-adopts it at its next poll.
    w.broken.store(false, Ordering::SeqCst);
    let done = w.ops.resume(id, Budget::Keep).await.expect("resumes");
    assert_eq!(done.status, "running");
    assert_eq!((done.fence_before, done.fence_after), (fence, fence + 1));
    assert_eq!(done.attempts_started, vec!["pay#2".to_owned()]);
    w.poll_until(|s| s.completed >= 1).await;

    let view = w.ops.inspect(id).await.expect("inspects");
    assert_eq!(view.instance.status, "completed");
    assert!(view.incidents.iter().all(|i| i.resolved_at_ms.is_some()));
    let rows = w.ops.history(id).await.expect("history");
    assert_eq!(history(&rows), vec![(1, "failed"), (2, "ok")]);
    assert_eq!(w.calls.load(Ordering::SeqCst), 2);

    // A second resume finds nothing FAILED: refused by the core, nothing written.
    let fence = w.fence(id).await;
    match w.ops.resume(id, Budget::Keep).await {
        Err(Error::Refused(why)) => assert!(why.contains("completed"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(w.fence(id).await, fence);
    // One audit row: the resume that took effect, with its fences; the refusals left none.
    let audit = w.ops.audit(Some(id), 0).await.expect("audit");
    let rows: Vec<_> = audit
        .iter()
        .map(|a| {
            (
                a.actor.as_str(),
                a.action.as_str(),
                a.detail.as_str(),
                a.fence_after,
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![("alice", "resume", "budget=keep", done.fence_after)]
    );
    assert_eq!(audit[0].fence_before, Some(done.fence_before));
    w.rt.shutdown().await;
}

#[tokio::test]
async fn a_parked_attempt_is_retried_now_without_spending_budget() {
    let w = world().await;
    let id = w
        .start(
            r#"<q:retry maxAttempts="3" initialInterval="PT1H" maxInterval="PT2H" jitter="none"/>"#,
        )
        .await;
    w.rt.wait_until(|s| s.parks >= 1).await;
    let view = w.ops.inspect(id).await.expect("inspects");
    assert_eq!(view.snapshot["backoff_markers"]["pay"], "failed");
    let park: Vec<_> = view
        .timers
        .iter()
        .map(|t| (t.name.as_str(), t.due_at_ms))
        .collect();
    assert_eq!(park, vec![("r:pay", T0 + 3_600_000)]);

    // Retry-now of a task that is not parked, or not a task, is refused.
    for node in ["end", "nowhere"] {
        let refused = w.ops.retry_now(id, Some(node.into())).await;
        assert!(
            matches!(refused, Err(Error::Refused(_))),
            "{node}: {refused:?}"
        );
    }

    w.broken.store(false, Ordering::SeqCst);
    let done = w
        .ops
        .retry_now(id, Some("pay".into()))
        .await
        .expect("retries");
    assert_eq!(done.attempts_started, vec!["pay#2".to_owned()]);
    w.poll_until(|s| s.completed >= 1).await;

    let rows = w.ops.history(id).await.expect("history");
    assert_eq!(history(&rows), vec![(1, "failed"), (2, "ok")]);
    // The second attempt ran a millisecond after the operator asked, not an hour later.
    assert_eq!(rows[1].started_at_ms, T0 + 1);
    assert!(w.ops.inspect(id).await.expect("inspects").timers.is_empty());
    w.rt.shutdown().await;
}

#[tokio::test]
async fn unknown_and_malformed_ids_are_refused() {
    let w = world().await;
    let missing = InstanceId::from_u128(42);
    assert!(matches!(
        w.ops.inspect(missing).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        w.ops.resume(missing, Budget::Reset).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        qflow_ops::parse_instance_id("not-a-uuid"),
        Err(Error::Invalid {
            field: "instance",
            ..
        })
    ));
    let bad = qflow_ops::InstanceQuery {
        status: Some("sleeping".into()),
        ..Default::default()
    };
    assert!(matches!(
        w.ops.instances(&bad).await,
        Err(Error::Invalid {
            field: "status",
            ..
        })
    ));
    w.rt.shutdown().await;
}

/// The migration scenario of O2: instances FAILED on v1 because of a model bug, v2
/// deployed, the dry-run diff reviewed, the migration run, the instances resumed; they
/// complete with the attempts they burned on v1 preserved.
#[tokio::test]
async fn failed_instances_migrate_onto_a_fixed_deployment_and_complete() {
    let w = world().await;
    w.broken.store(false, Ordering::SeqCst);
    // v1's bug: the task names a handler that does not exist.
    let v1 = model(r#"<q:retry maxAttempts="2" initialInterval="PT1S" jitter="none"/>"#)
        .replace(r#"q:task="pay""#, r#"q:task="payment-v1""#);
    let v2 = model(r#"<q:retry maxAttempts="4" initialInterval="PT1S" jitter="none"/>"#)
        .replace(r#"id="pay""#, r#"id="charge""#)
        .replace(r#"targetRef="pay""#, r#"targetRef="charge""#)
        .replace(r#"sourceRef="pay""#, r#"sourceRef="charge""#);
    let d1 = w.rt.deploy(&v1, None).await.expect("v1 deploys");
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.push(
            w.rt.start_instance(d1.id, Default::default())
                .await
                .expect("starts"),
        );
    }
    w.rt.wait_until(|s| s.parks >= 2).await;
    w.clock.advance_ms(1_000);
    w.rt.wait_until(|s| s.failed >= 2).await;
    let d2 = w.ops.deploy(&v2, None).await.expect("v2 deploys");

    // A mapping to a node v2 lacks is refused before anything is touched.
    let bad = qflow_ops::MigrationPlan {
        source: d1.id.0,
        target: d2.id,
        mapping: [("pay".to_owned(), "nowhere".to_owned())].into(),
        instances: None,
    };
    assert!(matches!(
        w.ops.migrate(&bad, true).await,
        Err(Error::Invalid {
            field: "mapping",
            ..
        })
    ));
    // An instance's name (`pay@2`) is not a node: its node is what a plan maps.
    let instance_name = qflow_ops::MigrationPlan {
        mapping: [("pay@2".to_owned(), "charge".to_owned())].into(),
        ..bad.clone()
    };
    match w.ops.migrate(&instance_name, true).await {
        Err(Error::Invalid {
            field: "mapping",
            why,
        }) => assert!(why.contains("names an instance of a node"), "{why}"),
        other => panic!("{other:?}"),
    }
    let plan = qflow_ops::MigrationPlan {
        mapping: [("pay".to_owned(), "charge".to_owned())].into(),
        ..bad
    };
    let fences: Vec<u64> = {
        let mut f = Vec::new();
        for id in &ids {
            f.push(w.fence(*id).await);
        }
        f
    };
    let dry = w.ops.migrate(&plan, true).await.expect("dry run");
    assert_eq!(
        dry.summary,
        MigrationSummary {
            total: 2,
            would_migrate: 2,
            ..MigrationSummary::default()
        }
    );
    assert_eq!(dry.summary.to_string(), "2 instances: 2 would migrate");
    assert!(dry
        .results
        .iter()
        .all(|r| r.outcome == MigrationOutcome::WouldMigrate));
    insta::assert_snapshot!("migration_dry_run_diff", dry.results[0].changes.join("\n"));
    for (id, fence) in ids.iter().zip(&fences) {
        assert_eq!(w.fence(*id).await, *fence, "a dry run writes nothing");
    }

    let done = w.ops.migrate(&plan, false).await.expect("migrates");
    assert_eq!(done.summary.migrated, 2, "{done:?}");
    assert!(!done.any_refused(), "{done:?}");
    // The same plan again, naming the instances: they are on v2 now, so each is refused
    // with its reason, counted as refused, and left as it is.
    let again = qflow_ops::MigrationPlan {
        instances: Some(ids.iter().map(ToString::to_string).collect()),
        ..plan.clone()
    };
    let fences_v2 = [w.fence(ids[0]).await, w.fence(ids[1]).await];
    let refused = w.ops.migrate(&again, false).await.expect("answers");
    assert_eq!(refused.summary.to_string(), "2 instances: 2 refused");
    assert!(refused.any_refused());
    let why = refused.results[0].reason.as_deref().unwrap_or_default();
    assert!(why.contains("not 1"), "{why}");
    assert_eq!([w.fence(ids[0]).await, w.fence(ids[1]).await], fences_v2);
    for id in &ids {
        let view = w.ops.inspect(*id).await.expect("inspects");
        assert_eq!(view.instance.deployment, d2.id);
        assert_eq!(view.instance.status, "failed");
        assert_eq!(view.snapshot["attempts"]["charge"], 2);
        // The open incident moved with its node.
        let open: Vec<&str> = view
            .incidents
            .iter()
            .filter(|i| i.resolved_at_ms.is_none())
            .map(|i| i.node.as_str())
            .collect();
        assert_eq!(open, vec!["charge"], "{:?}", view.incidents);
        w.ops.resume(*id, Budget::Keep).await.expect("resumes");
    }
    w.poll_until(|s| s.completed >= 2).await;
    for id in &ids {
        let rows = w.ops.history(*id).await.expect("history");
        let seen: Vec<_> = rows
            .iter()
            .map(|a| (a.node.as_str(), a.attempt, a.outcome))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("pay", 1, "failed"),
                ("pay", 2, "failed"),
                ("charge", 3, "ok")
            ],
            "the burned attempts stay in the history and count on"
        );
        let incidents = w.ops.incidents(Some(*id), 0).await.expect("incidents");
        assert!(
            incidents.iter().all(|i| i.resolved_at_ms.is_some()),
            "resuming the migrated instance resolved its incident: {incidents:?}"
        );
    }
    let audit = w.ops.audit(None, 0).await.expect("audit");
    let actions: Vec<_> = audit.iter().map(|a| a.action.as_str()).collect();
    assert_eq!(actions, vec!["migrate", "migrate", "resume", "resume"]);
    // Nothing left on v1: it retires.
    w.ops.retire(d1.id.0).await.expect("v1 retires");
    w.rt.shutdown().await;
}

/// The second run of O2's scenario: after the migration one instance is resumed keeping
/// its burned budget, one resetting it, and the fixed task still fails once. Kept, the
/// one failure exhausts the policy again; reset, the whole policy is there: a backoff,
/// then success. The attempt history counts on across v1 and v2 in both.
#[tokio::test]
async fn after_a_migration_a_reset_budget_gets_the_whole_policy_again() {
    let w = world().await;
    let policy = r#"<q:retry maxAttempts="2" initialInterval="PT1S" jitter="none"/>"#;
    let v1 = model(policy).replace(r#"q:task="pay""#, r#"q:task="payment-v1""#);
    let v2 = model(policy)
        .replace(r#"id="pay""#, r#"id="charge""#)
        .replace(r#"targetRef="pay""#, r#"targetRef="charge""#)
        .replace(r#"sourceRef="pay""#, r#"sourceRef="charge""#);
    let d1 = w.rt.deploy(&v1, None).await.expect("v1 deploys");
    let kept =
        w.rt.start_instance(d1.id, Default::default())
            .await
            .expect("starts");
    let reset =
        w.rt.start_instance(d1.id, Default::default())
            .await
            .expect("starts");
    w.rt.wait_until(|s| s.parks >= 2).await;
    w.clock.advance_ms(1_000);
    w.rt.wait_until(|s| s.failed >= 2).await;
    let d2 = w.ops.deploy(&v2, None).await.expect("v2 deploys");
    let plan = qflow_ops::MigrationPlan {
        source: d1.id.0,
        target: d2.id,
        mapping: [("pay".to_owned(), "charge".to_owned())].into(),
        instances: None,
    };
    let done = w.ops.migrate(&plan, false).await.expect("migrates");
    assert_eq!(
        (done.summary.total, done.summary.migrated),
        (2, 2),
        "{done:?}"
    );

    // `pay` still fails (broken): the fix is the handler name, the gateway is flaky.
    w.ops.resume(kept, Budget::Keep).await.expect("resumes");
    w.ops.resume(reset, Budget::Reset).await.expect("resumes");
    w.poll_until(|s| s.failed >= 3 && s.parks >= 3).await;
    assert_eq!(w.ops.inspect(kept).await.unwrap().instance.status, "failed");
    assert_eq!(
        w.ops.inspect(reset).await.unwrap().instance.status,
        "running"
    );

    w.broken.store(false, Ordering::SeqCst);
    w.clock.advance_ms(1_000);
    w.poll_until(|s| s.completed >= 1).await;
    let outcomes = |rows: Vec<qflow_ops::AttemptView>| -> Vec<(String, u32, &'static str)> {
        rows.into_iter()
            .map(|a| (a.node, a.attempt, a.outcome))
            .collect()
    };
    let v1_burned = [
        ("pay".to_owned(), 1, "failed"),
        ("pay".to_owned(), 2, "failed"),
    ];
    let mut expect_kept = v1_burned.to_vec();
    expect_kept.push(("charge".to_owned(), 3, "failed"));
    assert_eq!(outcomes(w.ops.history(kept).await.unwrap()), expect_kept);
    let mut expect_reset = v1_burned.to_vec();
    expect_reset.push(("charge".to_owned(), 3, "failed"));
    expect_reset.push(("charge".to_owned(), 4, "ok"));
    assert_eq!(outcomes(w.ops.history(reset).await.unwrap()), expect_reset);
    assert_eq!(
        w.ops.inspect(reset).await.unwrap().instance.status,
        "completed"
    );
    w.rt.shutdown().await;
}

/// A user task with a non-interrupting escalation boundary and an error boundary, as in
/// Camunda 7's embedded-forms example (`invoicePayment.bpmn`).
const INVOICE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <error id="unspecified" errorCode="invoice-error"/>
  <escalation id="suspicious" escalationCode="invoice-escalate"/>
  <process id="invoice" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="pay"/>
    <userTask id="pay"/>
    <sequenceFlow id="f2" sourceRef="pay" targetRef="paid"/>
    <endEvent id="paid"/>
    <boundaryEvent id="escalated" attachedToRef="pay" cancelActivity="false"><escalationEventDefinition escalationRef="suspicious"/></boundaryEvent>
    <sequenceFlow id="f3" sourceRef="escalated" targetRef="inform"/>
    <userTask id="inform"/>
    <sequenceFlow id="f4" sourceRef="inform" targetRef="informed"/>
    <endEvent id="informed"/>
    <boundaryEvent id="amount_missing" attachedToRef="pay"><errorEventDefinition errorRef="unspecified"/></boundaryEvent>
    <sequenceFlow id="f5" sourceRef="amount_missing" targetRef="archived"/>
    <endEvent id="archived"/>
  </process>
</definitions>"#;

#[tokio::test]
async fn the_task_list_raises_escalations_and_bpmn_errors_from_a_user_task() {
    let w = world().await;
    let dep = w.rt.deploy(INVOICE, None).await.expect("deploys");
    let id =
        w.rt.start_instance(dep.id, Default::default())
            .await
            .expect("starts");
    let tokens = |w: &World| {
        let store = w.store.clone();
        async move {
            let rec = store.instance(id).await.expect("reads").expect("exists");
            let snap = Snapshot::decode(&rec.snapshot).expect("decodes");
            (rec.status, snap.tokens().to_vec(), snap.variables().clone())
        }
    };
    // Caught by the non-interrupting boundary: `inform` is offered, `pay` still waits.
    let vars = [("sender".to_owned(), serde_json::json!("unknown"))].into();
    w.ops
        .escalate_user_task(id, "pay", "invoice-escalate", vars)
        .await
        .expect("caught");
    let (_, t, v) = tokens(&w).await;
    assert_eq!(t, ["inform", "pay"]);
    assert_eq!(v["sender"], serde_json::json!("unknown"));
    // A code nothing catches is refused, and nothing changes.
    let fence = w.fence(id).await;
    let refused = w
        .ops
        .escalate_user_task(id, "pay", "not-modelled", Default::default())
        .await
        .expect_err("refused");
    assert!(
        matches!(refused, Error::Refused(ref why) if why.contains("not-modelled")),
        "{refused}"
    );
    assert_eq!(w.fence(id).await, fence);
    // Not a user task: refused before stepping.
    let wrong = w
        .ops
        .escalate_user_task(id, "paid", "invoice-escalate", Default::default())
        .await
        .expect_err("refused");
    assert_eq!(wrong.code(), "not_found", "{wrong}");
    // The BPMN error ends `pay` through its boundary; `inform` waits on.
    w.ops
        .bpmn_error_user_task(id, "pay", "invoice-error", "no amount", Default::default())
        .await
        .expect("routed");
    let (status, t, _) = tokens(&w).await;
    assert_eq!(
        (status, t),
        (InstanceStatus::Running, vec!["inform".to_owned()])
    );
    let audit = w.ops.audit(Some(id), 10).await.expect("audit");
    let actions: Vec<&str> = audit.iter().map(|a| a.action.as_str()).collect();
    assert!(actions.contains(&"escalate_user_task"), "{actions:?}");
    assert!(actions.contains(&"bpmn_error_user_task"), "{actions:?}");
    w.ops
        .complete_user_task(id, "inform", Default::default(), None)
        .await
        .expect("completes");
    assert_eq!(tokens(&w).await.0, InstanceStatus::Completed);
}

#[tokio::test]
async fn a_plain_start_of_a_process_that_starts_only_on_a_message_is_refused() {
    const ORDERS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <message id="placed" name="order-placed"/>
  <process id="orders" isExecutable="true">
    <startEvent id="on_order"><messageEventDefinition messageRef="placed"/></startEvent>
    <sequenceFlow id="f1" sourceRef="on_order" targetRef="done"/>
    <endEvent id="done"/>
  </process>
</definitions>"#;
    let w = world().await;
    let dep = w.rt.deploy(ORDERS, None).await.expect("deploys");
    let ops = Ops::with_runtime(Arc::new(w.rt), "alice");
    let request = qflow_ops::StartRequest {
        deployment: Some(dep.id.0),
        ..Default::default()
    };
    let refused = ops.start(request).await.expect_err("refused");
    assert_eq!(refused.code(), "refused", "{refused}");
    assert!(
        refused.to_string().contains("no none start event"),
        "{refused}"
    );
}

/// A deployment's timer start schedule is shown with it — deployed, listed — only while
/// it is the newest deployment of its process; a computed timer start is refused at
/// deploy, and nothing is deployed.
#[tokio::test]
async fn deployments_show_their_timer_start_schedules() {
    let nightly = |cycle: &str| {
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d" targetNamespace="t">
  <process id="nightly" isExecutable="true">
    <startEvent id="each_night"><timerEventDefinition><timeCycle>{cycle}</timeCycle></timerEventDefinition></startEvent>
    <sequenceFlow id="f1" sourceRef="each_night" targetRef="done"/>
    <endEvent id="done"/>
  </process>
</definitions>"#
        )
    };
    let w = world().await;
    let v1 = w
        .ops
        .deploy(&nightly("R2/P1D"), None)
        .await
        .expect("deploys");
    let day = 86_400_000;
    assert_eq!(
        v1.schedules,
        vec![qflow_ops::ScheduleSummary {
            start_event: "each_night".to_owned(),
            next_start_at_ms: T0 + day,
            remaining: Some(2),
        }]
    );
    let json = serde_json::to_value(&v1).expect("serializes");
    assert_eq!(json["schedules"][0]["next_start_at_ms"], T0 + day);
    w.clock.advance_ms(1_000);
    let v2 = w
        .ops
        .deploy(&nightly("R/PT12H"), None)
        .await
        .expect("deploys");
    let listed = w.ops.deployments().await.expect("lists");
    let by_id = |id: i64| listed.iter().find(|d| d.id == id).expect("listed").clone();
    assert!(by_id(v1.id).schedules.is_empty(), "replaced by v2");
    assert_eq!(
        by_id(v2.id).schedules,
        vec![qflow_ops::ScheduleSummary {
            start_event: "each_night".to_owned(),
            next_start_at_ms: T0 + 1_000 + day / 2,
            remaining: None,
        }]
    );
    assert!(serde_json::to_value(by_id(v1.id))
        .expect("serializes")
        .get("schedules")
        .is_none());

    // A computed start time has no variables to read: refused with its position.
    let computed = nightly("=cycle_text");
    let refused = w.ops.deploy(&computed, None).await.expect_err("refused");
    assert!(refused.to_string().contains("4:33: Q207"), "{refused}");
    assert_eq!(w.ops.deployments().await.expect("lists").len(), 2);
}
