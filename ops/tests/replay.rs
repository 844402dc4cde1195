//! Replay (SPEC G3, docs/replay.md) against a SQLite store a runtime wrote with the
//! journal on: a journaled run replays identical; a changed step function is caught at
//! the step and key it changes; a damaged row is reported, not trusted; an instance
//! that started before the journal was switched on is not replayable, and says why.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use qflow_core::{Definition, Effect, Input, Snapshot, Step};
use qflow_ops::replay::{DivergenceKind, Outcome, ReplayReport, ReplayRequest};
use qflow_ops::Ops;
use qflow_persistence::SqliteStore;
use qflow_runtime::journal::JournalPolicy;
use qflow_runtime::{
    AsyncHandlers, Clock, ManualClock, Runtime, RuntimeConfig, TaskContext, TaskOutcome,
};
use qflow_store::{InstanceId, InstanceStatus, Store};

const T0: i64 = 1_700_000_000_000;

/// `pay` (with a retry policy) then a ten-second timer catch, then the end.
const MODEL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="billing" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="pay" q:task="pay"><extensionElements>
      <q:retry maxAttempts="4" initialInterval="PT1S" maxInterval="PT1M" jitter="none"/>
    </extensionElements></serviceTask>
    <intermediateCatchEvent id="cool"><timerEventDefinition><timeDuration>PT10S</timeDuration></timerEventDefinition></intermediateCatchEvent>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="pay"/>
    <sequenceFlow id="f1" sourceRef="pay" targetRef="cool"/>
    <sequenceFlow id="f2" sourceRef="cool" targetRef="end"/>
  </process>
</definitions>"#;

struct World {
    dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    clock: Arc<ManualClock>,
}

impl World {
    async fn new() -> World {
        let dir = tempfile::tempdir().expect("temp dir");
        let store: Arc<dyn Store> = Arc::new(
            SqliteStore::open(dir.path().join("qflow.db"))
                .await
                .expect("opens sqlite"),
        );
        World {
            dir,
            store,
            clock: Arc::new(ManualClock::new(T0)),
        }
    }

    /// A runtime whose `pay` fails its first two attempts.
    fn runtime(&self, journal: JournalPolicy) -> Runtime {
        let calls = Arc::new(AtomicU32::new(0));
        let handlers = AsyncHandlers::new().with_sync("pay", move |ctx: &TaskContext<'_>| {
            calls.fetch_add(1, Ordering::SeqCst);
            if ctx.attempt.get() <= 2 {
                TaskOutcome::Fail {
                    code: "GATEWAY_DOWN".into(),
                    message: "503".into(),
                }
            } else {
                TaskOutcome::Ok(
                    serde_json::from_value(serde_json::json!({"receipt": "r-1"})).unwrap(),
                )
            }
        });
        let config = RuntimeConfig {
            lanes: 1,
            poll_interval_ms: 1,
            journal,
            ..RuntimeConfig::default()
        };
        Runtime::start(self.store.clone(), handlers, self.clock.clone(), config)
    }

    fn ops(&self) -> Ops {
        let now = self.clock.clone();
        Ops::new(
            self.store.clone(),
            Arc::new(move || now.now_ms()),
            "replayer",
        )
    }

    async fn status(&self, id: InstanceId) -> InstanceStatus {
        self.store.instance(id).await.unwrap().unwrap().status
    }

    /// Moves the clock a second at a time until `id` has ended; gives up after two
    /// minutes (a hang guard, not a timing check).
    async fn run_to_end(&self, id: InstanceId) {
        for _ in 0..24_000 {
            if self.status(id).await == InstanceStatus::Completed {
                return;
            }
            self.clock.advance_ms(1_000);
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        panic!(
            "instance {id} did not complete: {:?}",
            self.status(id).await
        );
    }
}

async fn replay(ops: &Ops, request: &ReplayRequest) -> ReplayReport {
    ops.replay(request, &mut |_| {}).await.expect("replays")
}

#[tokio::test]
async fn a_journaled_run_replays_identical_and_a_changed_step_is_named() {
    let w = World::new().await;
    let rt = w.runtime(JournalPolicy::All);
    let dep = rt.deploy(MODEL, None).await.expect("deploys");
    let id = rt
        .start_instance(dep.id, Default::default())
        .await
        .expect("starts");
    w.run_to_end(id).await;
    rt.shutdown().await;
    let fence = w.store.instance(id).await.unwrap().unwrap().fence;
    let rows = w.store.journal(id, 0, 0).await.expect("reads");
    assert_eq!(rows.len() as u64, fence, "one row per committed step");
    assert!(rows.iter().map(|r| r.seq).eq(1..=fence));
    assert!(rows.iter().all(|r| r.is_intact()));

    let ops = w.ops();
    let all = replay(&ops, &ReplayRequest::default()).await;
    assert_eq!(
        (
            all.instances,
            all.identical,
            all.divergent,
            all.not_replayable
        ),
        (1, 1, 0, 0),
        "{all:?}"
    );
    assert_eq!(all.steps, fence);
    assert!(all.journal_bytes > 0);
    assert!(!all.diverged());
    let one = replay(
        &ops,
        &ReplayRequest {
            instance: Some(id),
            ..ReplayRequest::default()
        },
    )
    .await;
    assert_eq!(one.identical, 1);

    // A build whose step writes one more key after the handler's success: named at that
    // step, with the key, the byte and both values.
    fn extra_key(
        def: &Definition,
        id: &str,
        snapshot: Snapshot,
        input: Input,
        now: i64,
    ) -> Result<Step, qflow_core::Error> {
        let completed = matches!(input, Input::TaskCompleted { .. });
        let mut step = qflow_core::step(def, id, snapshot, input, now)?;
        if completed {
            step.snapshot
                .insert_preserved("zz".to_owned(), rmpv::Value::from(7));
        }
        Ok(step)
    }
    let report = ops
        .replay_with(&ReplayRequest::default(), extra_key, &mut |_| {})
        .await
        .expect("replays");
    assert!(report.diverged());
    assert_eq!(report.divergent, 1);
    let d = report.details[0].divergence.as_ref().expect("a divergence");
    let completed_seq = rows
        .iter()
        .find(|r| r.input.contains("\"task_completed\""))
        .expect("a completion was journaled")
        .seq;
    assert_eq!(d.seq, completed_seq);
    assert_eq!(d.kind, DivergenceKind::Snapshot);
    assert_eq!(d.key.as_deref(), Some("zz"));
    assert_eq!(d.recorded, serde_json::Value::Null);
    assert_eq!(d.replayed, serde_json::json!(7));
    assert_eq!(d.input["type"], "task_completed");
    assert!(d.offset.is_some());

    // A build whose step emits one effect more at the start: an effects divergence at 1.
    fn extra_effect(
        def: &Definition,
        id: &str,
        snapshot: Snapshot,
        input: Input,
        now: i64,
    ) -> Result<Step, qflow_core::Error> {
        let start = matches!(input, Input::Start { .. });
        let mut step = qflow_core::step(def, id, snapshot, input, now)?;
        if start {
            step.effects.push(Effect::Stale {
                reason: "a changed build".to_owned(),
            });
        }
        Ok(step)
    }
    let report = ops
        .replay_with(&ReplayRequest::default(), extra_effect, &mut |_| {})
        .await
        .expect("replays");
    let d = report.details[0].divergence.as_ref().expect("a divergence");
    assert_eq!((d.seq, d.kind), (1, DivergenceKind::Effects));
}

#[tokio::test]
async fn a_damaged_row_is_reported_not_trusted() {
    let w = World::new().await;
    let rt = w.runtime(JournalPolicy::All);
    let dep = rt.deploy(MODEL, None).await.expect("deploys");
    let id = rt
        .start_instance(dep.id, Default::default())
        .await
        .expect("starts");
    w.run_to_end(id).await;
    rt.shutdown().await;
    drop(w.store);

    // Somebody changes the effects hash of step 2 in the file.
    let url = format!("sqlite://{}", w.dir.path().join("qflow.db").display());
    let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
        .await
        .expect("connects");
    rewrite_journal_row(&mut conn, id, 2, |row| row.effects_hash = vec![0x00]).await;
    drop(conn);

    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(w.dir.path().join("qflow.db"))
            .await
            .expect("opens sqlite"),
    );
    let now = w.clock.clone();
    let ops = Ops::new(store, Arc::new(move || now.now_ms()), "replayer");
    let report = replay(&ops, &ReplayRequest::default()).await;
    assert_eq!(
        (report.not_replayable, report.divergent),
        (1, 0),
        "{report:?}"
    );
    let why = report.details[0].reason.as_deref().unwrap();
    assert!(
        why.starts_with("step 2: the journal row is damaged (it does not match its own hash)"),
        "{why}"
    );
    assert!(
        !report.diverged(),
        "damage is not a divergence of the build"
    );
}

#[tokio::test]
async fn an_instance_started_before_the_journal_was_on_is_not_replayable() {
    let w = World::new().await;
    // Journal off: the instance starts and fails its first attempt, parking for a retry.
    let rt = w.runtime(JournalPolicy::Off);
    let dep = rt.deploy(MODEL, None).await.expect("deploys");
    let early = rt
        .start_instance(dep.id, Default::default())
        .await
        .expect("starts");
    rt.wait_until(|s| s.parks >= 1).await;
    rt.shutdown().await;
    assert!(w.store.journal(early, 0, 0).await.unwrap().is_empty());

    // The journal is switched on (for this process by name); the instance goes on, and
    // one started now is journaled from its start.
    let rt = w.runtime(JournalPolicy::Processes(["billing".to_owned()].into()));
    let late = rt
        .start_instance(dep.id, Default::default())
        .await
        .expect("starts");
    w.run_to_end(early).await;
    w.run_to_end(late).await;
    rt.shutdown().await;

    let report = replay(&w.ops(), &ReplayRequest::default()).await;
    assert_eq!(
        (report.instances, report.identical, report.not_replayable),
        (2, 1, 1),
        "{report:?}"
    );
    let detail = &report.details[0];
    assert_eq!(detail.instance, early.to_string());
    assert_eq!(detail.outcome, Outcome::NotReplayable);
    let why = detail.reason.as_deref().unwrap();
    assert!(
        why.contains("the instance was created before the journal was switched on"),
        "{why}"
    );

    // A process the policy does not name is not journaled at all.
    let other = JournalPolicy::Processes(["shipping".to_owned()].into());
    let rt = w.runtime(other);
    let unnamed = rt
        .start_instance(dep.id, Default::default())
        .await
        .expect("starts");
    w.run_to_end(unnamed).await;
    rt.shutdown().await;
    assert!(w.store.journal(unnamed, 0, 0).await.unwrap().is_empty());
    let report = replay(
        &w.ops(),
        &ReplayRequest {
            instance: Some(unnamed),
            ..ReplayRequest::default()
        },
    )
    .await;
    assert_eq!(report.not_journaled, 1);
}

#[tokio::test]
async fn a_journal_in_an_older_encoding_replays_as_re_encoded_not_divergent() {
    use qflow_core::journal;
    let w = World::new().await;
    let rt = w.runtime(JournalPolicy::All);
    let dep = rt.deploy(MODEL, None).await.expect("deploys");
    let id = rt
        .start_instance(dep.id, Default::default())
        .await
        .expect("starts");
    w.run_to_end(id).await;
    rt.shutdown().await;
    let rows = w.store.journal(id, 0, 0).await.expect("reads");
    drop(w.store);

    // The whole history as an older build would have written it: the status in a wider
    // integer at every step — other bytes, the same state once decoded. Each row is
    // consistent with itself and with the one before (its delta is taken against the
    // older bytes before it, its hashes are of the older bytes), and the instance row
    // holds the older bytes, as a store an older release wrote would.
    let mut canonical: Vec<u8> = Vec::new();
    let mut older_before: Vec<u8> = Vec::new();
    let mut older_rows = Vec::new();
    for row in &rows {
        let base: &[u8] = if row.seq == 1 { &[] } else { &canonical };
        canonical = journal::apply(base, &row.delta).expect("applies");
        let mut entries = journal::entries(&canonical).expect("splits");
        // The status code (a positive fixint) as a 16-bit integer.
        let wide = entries.get("s").map(|v| [0xcd, 0x00, v[0]]);
        if let Some(wide) = &wide {
            entries.insert("s", wide);
        }
        let older = journal::join(&entries);
        let mut changed = row.clone();
        changed.delta = journal::delta(&older_before, &older).expect("a delta");
        changed.snapshot_hash = journal::hash(&older).to_vec();
        changed.row_hash = changed.row_hash_of();
        older_rows.push(changed);
        older_before = older;
    }
    assert_ne!(older_before, canonical);

    let url = format!("sqlite://{}", w.dir.path().join("qflow.db").display());
    let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
        .await
        .expect("connects");
    for row in &older_rows {
        rewrite_journal_row(&mut conn, id, row.seq, |stored| {
            stored.delta = row.delta.clone();
            stored.snapshot_hash = row.snapshot_hash.clone();
            stored.row_hash = row.row_hash.clone();
        })
        .await;
    }
    sqlx::query("UPDATE instances SET snapshot = ? WHERE id = ?")
        .bind(&older_before)
        .bind(id.to_string())
        .execute(&mut conn)
        .await
        .expect("updates");
    drop(conn);

    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(w.dir.path().join("qflow.db"))
            .await
            .expect("opens sqlite"),
    );
    let now = w.clock.clone();
    let ops = Ops::new(store, Arc::new(move || now.now_ms()), "replayer");
    let report = replay(&ops, &ReplayRequest::default()).await;
    assert_eq!(
        (report.reencoded, report.divergent, report.not_replayable),
        (1, 0, 0),
        "{report:?}"
    );
    assert_eq!(report.details[0].outcome, Outcome::Reencoded);
    // Every step wrote the status: every step re-encoded, none damaged.
    assert_eq!(report.details[0].reencoded_steps, rows.len() as u64);
    assert!(!report.diverged());
}

#[tokio::test]
async fn an_exported_scenario_plays_the_instance_to_its_stored_bytes() {
    let w = World::new().await;
    let rt = w.runtime(JournalPolicy::All);
    let dep = rt.deploy(MODEL, None).await.expect("deploys");
    let id = rt
        .start_instance(dep.id, Default::default())
        .await
        .expect("starts");
    w.run_to_end(id).await;
    rt.shutdown().await;
    let record = w.store.instance(id).await.unwrap().unwrap();

    let exported = w.ops().export_scenario(id).await.expect("exports");
    assert_eq!(exported.process_id, "billing");
    assert_eq!(exported.model, MODEL);
    assert!(exported.targets.is_empty());
    assert_eq!(exported.expect, serde_json::json!({"state": "completed"}));
    // Through JSON, as `qflow replay --export-scenario` writes it and `qflow simulate`
    // reads it.
    let text = serde_json::to_string_pretty(&exported.scenario).expect("renders");
    let def = qflow_golden::load_model(MODEL).expect("loads");
    let scenario = qflow_golden::scenario::parse(&text, &def).expect("parses");
    let trace = qflow_core::sim::run(&def, &scenario).expect("plays");
    assert_eq!(trace.steps.len() as u64, record.fence);
    assert_eq!(trace.steps.last().unwrap().snapshot, record.snapshot);
    assert_eq!(trace.summary.status, "completed");

    // An instance without a journal from its start is refused, saying why.
    let rt = w.runtime(JournalPolicy::Off);
    let bare = rt
        .start_instance(dep.id, Default::default())
        .await
        .expect("starts");
    w.run_to_end(bare).await;
    rt.shutdown().await;
    match w.ops().export_scenario(bare).await {
        Err(qflow_ops::Error::Refused(why)) => {
            assert!(why.contains("no journal rows"), "{why}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Changes the journal entry `seq` of `instance` in a SQLite store file as `change` says,
/// in the row's stored layout (`qflow_persistence::journal_body`: the entry inside the
/// round row that holds it): what somebody editing the file by hand, or a build that
/// wrote other bytes, leaves behind.
async fn rewrite_journal_row(
    conn: &mut sqlx::SqliteConnection,
    instance: InstanceId,
    seq: u64,
    change: impl FnOnce(&mut qflow_store::JournalEntry),
) {
    use qflow_persistence::journal_body;
    let rows: Vec<(i64, Vec<u8>)> = sqlx::query_as("SELECT id, body FROM journal ORDER BY id")
        .fetch_all(&mut *conn)
        .await
        .expect("the rows");
    let (row, body) = rows
        .iter()
        .find(|(row, body)| {
            journal_body::round_step(*row, body, instance)
                .expect("a round")
                .is_some_and(|step| step.seq == seq)
        })
        .expect("the instance's round row");
    let entries = journal_body::round(*row, body).expect("reads");
    let at = entries
        .iter()
        .position(|e| e.instance == instance)
        .expect("the entry");
    let mut entry = entries[at].unpack(*row).expect("unpacks");
    change(&mut entry);
    let packed = journal_body::pack(&entry);
    let mut changed = entries.clone();
    changed[at].body = &packed;
    let updated = sqlx::query("UPDATE journal SET body = ? WHERE id = ?")
        .bind(journal_body::join_round(&changed))
        .bind(*row)
        .execute(&mut *conn)
        .await
        .expect("updates");
    assert_eq!(updated.rows_affected(), 1);
}
