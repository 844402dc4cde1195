//! The store conformance kit (`qflow_store::conformance`) run against every store: the
//! in-memory store, SQLite (a temp file) and PostgreSQL (`QFLOW_TEST_PG_URL`, one fresh
//! schema per test, dropped at the end) — plus the checks only one backend has (reopening
//! a file, query plans, schema names). A store that passes here keeps the contract of
//! `qflow_store::Store`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{ensure, Result};
use qflow_persistence::{PgConfig, PgStore, SqliteStore};
use qflow_store::conformance::{
    attempt, commit, commit_one, create, deploy, id, poll, timer, Ctx, Opened, T0,
};
use qflow_store::memory::MemoryStore;
use qflow_store::{
    CommitOutcome, DeploymentId, InstanceFilter, InstanceStatus, NewIncident, Store, TimerClaim,
    TimerRef,
};
use sqlx::{Connection, PgConnection};

static UNIQUE: AtomicU64 = AtomicU64::new(0);

fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        UNIQUE.fetch_add(1, Ordering::Relaxed)
    )
}

/// A directory holding the `backend`'s migrations numbered below `version`: the schema as
/// the build before that migration left it, for a test that migrates it forward.
fn migrations_before(backend: &str, version: &str) -> Result<tempfile::TempDir> {
    let before = tempfile::tempdir()?;
    let source = format!("{}/migrations/{backend}", env!("CARGO_MANIFEST_DIR"));
    for entry in std::fs::read_dir(source)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.as_bytes() < version.as_bytes() {
            std::fs::copy(&path, before.path().join(name))?;
        }
    }
    Ok(before)
}

/// A SQLite store file `qflow.db` in a fresh directory as the build before migration
/// `version` left it (every earlier migration applied), open on a connection, with one
/// deployment (whose id is returned).
async fn sqlite_file_before(
    version: &str,
) -> Result<(tempfile::TempDir, sqlx::SqliteConnection, i64)> {
    let dir = tempfile::tempdir()?;
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("qflow.db").display()
    );
    let before = migrations_before("sqlite", version)?;
    let mut conn = sqlx::SqliteConnection::connect(&url).await?;
    sqlx::migrate::Migrator::new(before.path())
        .await?
        .run(&mut conn)
        .await?;
    let dep: i64 = sqlx::query_scalar(
        "INSERT INTO deployments (process_id, content_hash, source, deployed_at_ms) \
         VALUES ('p', 'h1', '', 0) RETURNING id",
    )
    .fetch_one(&mut conn)
    .await?;
    Ok((dir, conn, dep))
}

fn pg_url() -> Option<String> {
    std::env::var("QFLOW_TEST_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// A `PgStore` on a fresh schema of its own (two connections), with the URL and the
/// schema's name; `None`, and a line saying so, when `QFLOW_TEST_PG_URL` is not set.
async fn scratch_pg(prefix: &str) -> Result<Option<(PgStore, String, String)>> {
    let Some(url) = pg_url() else {
        println!("skipped: QFLOW_TEST_PG_URL not set");
        return Ok(None);
    };
    let schema = unique_name(prefix);
    let store = PgStore::connect_with(
        &url,
        PgConfig {
            schema: Some(schema.clone()),
            max_connections: 2,
        },
    )
    .await?;
    Ok(Some((store, url, schema)))
}

/// Closes a [`scratch_pg`] store and drops its schema, whatever the test found; then
/// gives back what it found.
async fn drop_scratch_pg(
    store: PgStore,
    url: &str,
    schema: &str,
    result: Result<()>,
) -> Result<()> {
    store.close().await;
    let mut conn = PgConnection::connect(url).await?;
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&mut conn)
        .await?;
    result
}

async fn open_memory() -> Option<Opened> {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    Some(Opened {
        ctx: Ctx {
            label: "memory",
            store: store.clone(),
            second: store,
        },
        cleanup: None,
    })
}

/// Two `SqliteStore`s on one temp file; the directory goes when the case is over.
async fn open_sqlite() -> Option<Opened> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("qflow.db");
    let store = SqliteStore::open(&path).await.expect("open sqlite");
    let second = SqliteStore::open(&path).await.expect("open sqlite again");
    Some(Opened {
        ctx: Ctx {
            label: "sqlite",
            store: Arc::new(store),
            second: Arc::new(second),
        },
        cleanup: Some(Box::pin(async move { drop(dir) })),
    })
}

/// Two pools on one fresh schema, dropped when the case is over.
async fn open_postgres() -> Option<Opened> {
    let Some(url) = pg_url() else {
        println!("skipped: QFLOW_TEST_PG_URL not set");
        return None;
    };
    let name = unique_name("qflow_test");
    let config = PgConfig {
        schema: Some(name.clone()),
        max_connections: 4,
    };
    let store = PgStore::connect_with(&url, config.clone())
        .await
        .expect("connect postgres");
    let second = PgStore::connect_with(&url, config)
        .await
        .expect("connect postgres again");
    let cleanup = async move {
        let mut conn = PgConnection::connect(&url)
            .await
            .expect("connect for cleanup");
        sqlx::query(&format!("DROP SCHEMA {name} CASCADE"))
            .execute(&mut conn)
            .await
            .expect("drop test schema");
    };
    Some(Opened {
        ctx: Ctx {
            label: "postgres",
            store: Arc::new(store),
            second: Arc::new(second),
        },
        cleanup: Some(Box::pin(cleanup)),
    })
}

mod memory {
    qflow_store::conformance_tests!(super::open_memory);
}

mod sqlite {
    qflow_store::conformance_tests!(super::open_sqlite);
}

mod postgres {
    qflow_store::conformance_tests!(super::open_postgres);
}

/// Everything written through one `SqliteStore` is there after closing it and opening
/// the file again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_reopen_keeps_everything() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("keep.db");
    let store = SqliteStore::open(&path).await?;
    let dep = deploy(&store, "h1").await?;
    let mut c = commit(id(1), None, dep);
    c.state.snapshot = vec![0, 1, 0, 2];
    c.timers.arm = vec![timer(id(1), "r:pay", T0 + 100, 4)];
    c.incidents.open = vec![NewIncident {
        node: "pay".into(),
        code: "E".into(),
        message: "m".into(),
    }];
    c.attempts = vec![attempt(id(1), "pay", 1)];
    commit_one(&store, c).await?;
    create(&store, id(2), dep).await?;
    let mut done = commit(id(2), Some(1), dep);
    done.state.status = InstanceStatus::Completed;
    commit_one(&store, done).await?;
    let claimed = store
        .claim_due_timers(poll(T0 + 100, 60_000, "r1", 10))
        .await?;
    ensure!(claimed.len() == 1);

    let before = (
        store.deployments().await?,
        store.instances(&InstanceFilter::default()).await?,
        store.timers(id(1)).await?,
        store.incidents(None).await?,
        store.attempts(id(1)).await?,
    );
    store.close().await;
    drop(store);

    let reopened = SqliteStore::open(&path).await?;
    let after = (
        reopened.deployments().await?,
        reopened.instances(&InstanceFilter::default()).await?,
        reopened.timers(id(1)).await?,
        reopened.incidents(None).await?,
        reopened.attempts(id(1)).await?,
    );
    ensure!(before == after, "reopened store differs");
    ensure!(after.1.len() == 2 && after.2.len() == 1);
    // The lease survived too: the timer is not handed out again before it expires.
    ensure!(reopened
        .claim_due_timers(poll(T0 + 200, 60_000, "r2", 10))
        .await?
        .is_empty());
    ensure!(
        reopened
            .claim_due_timers(poll(T0 + 60_101, 60_000, "r2", 10))
            .await?
            .len()
            == 1
    );
    // Deploying the same content again after reopening gives the same version.
    ensure!(deploy(&reopened, "h1").await? == dep);
    ensure!(
        commit_one(&reopened, commit(id(1), Some(1), dep)).await?
            == CommitOutcome::Applied { fence: 2 }
    );
    Ok(())
}

/// R1a on SQLite: the writer runs in WAL mode with `synchronous=FULL` (2) and foreign keys.
#[tokio::test]
async fn sqlite_writer_is_durable() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(dir.path().join("durable.db")).await?;
    ensure!(store.is_durable());
    let settings = store.writer_settings().await?;
    ensure!(settings == ("wal".to_string(), 2, 1), "{settings:?}");
    // A claim relaxes fsync for its own lease transaction only; the writer is back to
    // FULL afterwards, with or without rows claimed.
    let dep = deploy(&store, "h1").await?;
    let mut c = commit(id(1), None, dep);
    c.timers.arm = vec![timer(id(1), "t:a", T0, 1)];
    commit_one(&store, c).await?;
    ensure!(
        store
            .claim_due_timers(poll(T0, 1_000, "r1", 10))
            .await?
            .len()
            == 1
    );
    ensure!(store.writer_settings().await? == settings);
    ensure!(store
        .claim_due_timers(poll(T0, 1_000, "r1", 10))
        .await?
        .is_empty());
    ensure!(store.writer_settings().await? == settings);
    Ok(())
}

/// The claim walks the due indexes (R3): SQLite's plan for its read of due timers and
/// in-flight leases (kept in instance rows since `0023_lease_in_row.sql`) searches
/// `timers_due` and the partial index `instances_lease_due` in order and merges them,
/// never scans or sorts; the next due instant reads the same two indexes.
#[tokio::test]
async fn sqlite_claim_plan_uses_the_due_index() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(dir.path().join("plan.db")).await?;
    let plan = store.explain_claim().await?;
    println!("{plan:#?}");
    for index in ["USING INDEX timers_due", "USING INDEX instances_lease_due"] {
        ensure!(
            plan.iter().any(|line| line.contains(index)),
            "plan does not search {index}: {plan:?}"
        );
    }
    ensure!(
        plan.iter().any(|line| line.contains("MERGE (UNION ALL)")),
        "plan does not merge the two ordered reads: {plan:?}"
    );
    ensure!(
        !plan
            .iter()
            .any(|line| line.starts_with("SCAN") || line.contains("TEMP B-TREE")),
        "plan scans or sorts: {plan:?}"
    );
    let plan = store.explain_next_due().await?;
    println!("{plan:#?}");
    ensure!(
        plan.iter().any(|line| line.contains("instances_lease_due")),
        "next due does not read instances_lease_due: {plan:?}"
    );
    ensure!(
        !plan
            .iter()
            .any(|line| line.starts_with("SCAN") || line == "SEARCH instances"),
        "next due reads a table: {plan:?}"
    );
    Ok(())
}

/// The commit path deletes timer and pull-task rows many to a statement; every term of
/// such a delete is a primary-key search, at one term and at a full statement's 128.
#[tokio::test]
async fn sqlite_keyed_deletes_search_the_primary_keys() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(dir.path().join("plan.db")).await?;
    for rows in [1, 128] {
        let plan = store.explain_keyed_deletes(rows).await?;
        ensure!(
            !plan.iter().any(|line| line.starts_with("SCAN")),
            "a keyed delete of {rows} rows scans: {plan:?}"
        );
        let timers = plan
            .iter()
            .filter(|l| l.contains("SEARCH timers USING INDEX sqlite_autoindex_timers_1"))
            .count();
        let pulls = plan
            .iter()
            .filter(|l| l.contains("SEARCH pull_tasks USING PRIMARY KEY"))
            .count();
        ensure!(
            timers == rows && pulls == rows,
            "{rows} rows: {timers} timer and {pulls} pull-task key searches: {plan:?}"
        );
    }
    Ok(())
}

/// A dispatcher's claim walks the pending rows' due index (`outbox_due`), never the table.
#[tokio::test]
async fn sqlite_outbox_claim_plan_uses_the_due_index() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(dir.path().join("plan.db")).await?;
    let plan = store.explain_outbox_claim().await?;
    println!("{plan:#?}");
    ensure!(
        plan.iter()
            .any(|line| line.contains("USING INDEX outbox_due")),
        "plan does not use outbox_due: {plan:?}"
    );
    ensure!(
        !plan.iter().any(|line| line.starts_with("SCAN outbox")),
        "plan scans outbox: {plan:?}"
    );
    ensure!(
        !plan.iter().any(|line| line.contains("TEMP B-TREE")),
        "plan sorts: {plan:?}"
    );
    Ok(())
}

/// Migrations 0009 (user tasks) and 0010 (the outbox) were written on two branches at
/// once, and a database may have been migrated by a build with 0010 and without 0009.
/// Opened by a build that has both, it takes 0009 then — sqlx applies every migration a
/// database lacks, whatever its number — and keeps its outbox rows. (The other way round,
/// a database that has a migration the build does not know is refused.)
#[tokio::test]
async fn sqlite_a_migration_numbered_below_an_applied_one_is_applied_later() -> Result<()> {
    use sqlx::migrate::Migrator;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("order.db");
    // The outbox branch's build: every migration but 0009.
    let without = dir.path().join("migrations");
    std::fs::create_dir(&without)?;
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite"))? {
        let entry = entry?;
        if !entry.file_name().to_string_lossy().starts_with("0009") {
            std::fs::copy(entry.path(), without.join(entry.file_name()))?;
        }
    }
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await?;
    Migrator::new(without.as_path())
        .await?
        .run(&mut conn)
        .await?;
    // A row as the outbox keeps one; its instance does not matter here.
    sqlx::query("PRAGMA foreign_keys = OFF")
        .execute(&mut conn)
        .await?;
    sqlx::query(
        "INSERT INTO outbox (key, instance, node, channel, attempt, call_id, body, \
         created_at_ms, state, due_at_ms) VALUES ('k1', 'i', 'call', 'crm', 1, 'c', '{}', 0, \
         'pending', 0)",
    )
    .execute(&mut conn)
    .await?;
    conn.close().await?;

    let store = SqliteStore::open(&path).await?;
    store.close().await;
    let mut conn = sqlx::SqliteConnection::connect(&url).await?;
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&mut conn)
            .await?;
    // Every migration of the directory, 0009 included, in version order.
    let mut numbered: Vec<i64> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite"))?
            .map(|e| Ok(e?.file_name().to_string_lossy()[..4].parse::<i64>()?))
            .collect::<Result<_>>()?;
    numbered.sort();
    ensure!(numbered.len() >= 11 && versions == numbered, "{versions:?}");
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'user_tasks'",
    )
    .fetch_one(&mut conn)
    .await?;
    ensure!(tables == 1, "0009 was not applied");
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox")
        .fetch_one(&mut conn)
        .await?;
    ensure!(kept == 1, "the outbox lost its row");
    conn.close().await?;
    Ok(())
}

/// Retention's choice of instances walks the partial ended-instance indexes (never the
/// table, whose live rows it must not read through), with and without a deployment.
#[tokio::test]
async fn sqlite_purge_plan_uses_the_ended_indexes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(dir.path().join("plan.db")).await?;
    let plan = store.explain_purge().await?;
    println!("{plan:#?}");
    ensure!(
        plan.iter()
            .any(|line| line.contains("USING INDEX instances_ended ")),
        "no instances_ended: {plan:?}"
    );
    ensure!(
        plan.iter()
            .any(|line| line.contains("USING INDEX instances_deployment_ended ")),
        "no instances_deployment_ended: {plan:?}"
    );
    ensure!(
        !plan
            .iter()
            .any(|line| line.starts_with("SCAN instances") && !line.contains("INDEX")),
        "plan scans instances: {plan:?}"
    );
    ensure!(
        !plan.iter().any(|line| line.contains("TEMP B-TREE")),
        "plan sorts: {plan:?}"
    );
    Ok(())
}

/// A task-list page reads its rows in the listing order from an index that starts with
/// the query's most selective filter — the assignee's partial index, a candidate's rows
/// of `user_task_candidates`, the deployment's index — joins tasks by their key, and
/// never scans `user_tasks`, the candidates or the instances, nor sorts.
#[tokio::test]
async fn sqlite_user_task_plans_walk_an_index_in_listing_order() -> Result<()> {
    use qflow_store::UserTaskQuery;
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(dir.path().join("plan.db")).await?;
    let q = UserTaskQuery::default;
    let cursor = Some((T0, id(1), "approve".to_owned()));
    let cases = [
        (
            "assignee",
            UserTaskQuery {
                assignee: Some("ann".into()),
                candidate_groups: vec!["sales".into()],
                ..q()
            },
            "SEARCH t USING INDEX user_tasks_assignee",
        ),
        (
            "candidate user",
            UserTaskQuery {
                candidate_user: Some("ann".into()),
                assigned: Some(false),
                after: cursor.clone(),
                ..q()
            },
            "SEARCH c USING PRIMARY KEY (kind=? AND name=?",
        ),
        (
            "groups",
            UserTaskQuery {
                candidate_groups: vec!["sales".into(), "emea".into()],
                deployment: Some(qflow_store::DeploymentId(1)),
                after: cursor.clone(),
                ..q()
            },
            "SEARCH c USING PRIMARY KEY (kind=? AND name=?",
        ),
        (
            "deployment",
            UserTaskQuery {
                deployment: Some(qflow_store::DeploymentId(1)),
                after: cursor.clone(),
                ..q()
            },
            "SEARCH t USING INDEX user_tasks_deployment",
        ),
        (
            "everything",
            UserTaskQuery {
                after: cursor,
                ..q()
            },
            "SEARCH t USING INDEX user_tasks_created",
        ),
    ];
    for (label, query, index) in cases {
        let plan = store.explain_user_tasks(&query).await?;
        println!("{label}: {plan:?}");
        ensure!(
            plan.iter().any(|line| line.contains(index)),
            "{label}: {index} is not used: {plan:?}"
        );
        ensure!(
            !plan.iter().any(|line| line.contains("TEMP B-TREE")),
            "{label}: the plan sorts: {plan:?}"
        );
        ensure!(
            !plan.iter().any(|line| line.contains("instances")),
            "{label}: the plan reads instances: {plan:?}"
        );
        ensure!(
            !plan.iter().any(
                |line| (line.starts_with("SCAN t") || line.starts_with("SCAN c"))
                    && !line.contains("INDEX")
            ),
            "{label}: the plan scans a table: {plan:?}"
        );
    }
    Ok(())
}

/// `n` instances in `path`'s store (on one deployment, 50 to a millisecond, their ids in
/// no order within it): one in ten RUNNING, one in ten FAILED with code `CODE`, the rest
/// COMPLETED. Written by one statement, not the commit path: only the listing is tested.
async fn fill_instances(path: &std::path::Path, n: i64) -> Result<SqliteStore> {
    let store = SqliteStore::open(path).await?;
    let dep = deploy(&store, "big").await?;
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display())).await?;
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1) \
         INSERT INTO instances (id, deployment, fence, status, failure_code, snapshot, \
             created_at_ms, updated_at_ms, ended_at_ms) \
         SELECT printf('%08x-0000-7000-8000-%012x', (i * 2654435761) % 4294967296, i), ?2, 1, \
             CASE i % 10 WHEN 0 THEN 'running' WHEN 1 THEN 'failed' ELSE 'completed' END, \
             CASE i % 10 WHEN 1 THEN 'CODE' END, x'00', ?3 + i / 50, ?3 + i / 50, \
             CASE WHEN i % 10 > 1 THEN ?3 + i / 50 + 5 END \
         FROM n",
    )
    .bind(n)
    .bind(dep.0)
    .bind(T0)
    .execute(&pool)
    .await?;
    pool.close().await;
    Ok(store)
}

/// A listing page costs SQLite the same work in a file of 20,000 instances as in one of
/// 2,000, for every filter the plan test names and for a later page: the sort of one
/// millisecond's instances by id (0022) and the merge of the states stop at the page's
/// limit, and a later page starts its index range at its cursor. Counted in SQLite's
/// virtual-machine instructions, not time.
#[tokio::test]
async fn sqlite_a_listing_page_costs_the_same_in_a_bigger_file() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let small = fill_instances(&dir.path().join("small.db"), 2_000).await?;
    let big = fill_instances(&dir.path().join("big.db"), 20_000).await?;
    let page = |filter: InstanceFilter| InstanceFilter {
        limit: 50,
        ..filter
    };
    let dep = Some(qflow_store::DeploymentId(1));
    // A cursor 600 instances (12 ms) in: its id is the one with i = 600.
    let cursor_id: qflow_store::InstanceId = format!(
        "{:08x}-0000-7000-8000-{:012x}",
        (600u64 * 2_654_435_761) % (1 << 32),
        600
    )
    .parse()?;
    let after = Some((T0 + 12, cursor_id));
    let cases = [
        ("no filter", page(InstanceFilter::default())),
        (
            "no filter, a later page",
            page(InstanceFilter {
                after,
                ..Default::default()
            }),
        ),
        (
            "deployment",
            page(InstanceFilter {
                deployment: dep,
                ..Default::default()
            }),
        ),
        (
            "running",
            page(InstanceFilter {
                status: Some(InstanceStatus::Running),
                ..Default::default()
            }),
        ),
        (
            "completed, a later page",
            page(InstanceFilter {
                status: Some(InstanceStatus::Completed),
                after,
                ..Default::default()
            }),
        ),
        (
            "deployment and status",
            page(InstanceFilter {
                deployment: dep,
                status: Some(InstanceStatus::Completed),
                ..Default::default()
            }),
        ),
        (
            "a code",
            page(InstanceFilter {
                failure_code: Some("CODE".into()),
                ..Default::default()
            }),
        ),
        (
            "created window",
            page(InstanceFilter {
                created_from_ms: Some(T0 + 3),
                created_to_ms: Some(T0 + 30),
                ..Default::default()
            }),
        ),
    ];
    for (label, filter) in cases {
        ensure!(
            small.instances(&filter).await? == big.instances(&filter).await?,
            "{label}: the two files' pages differ"
        );
        let (s, b) = (
            small.instances_vm_steps(&filter).await?,
            big.instances_vm_steps(&filter).await?,
        );
        println!("{label}: {s} instructions in 2,000 instances, {b} in 20,000");
        ensure!(
            b <= s + s / 5,
            "{label}: {b} instructions in 20,000 instances, {s} in 2,000"
        );
    }
    small.close().await;
    big.close().await;
    Ok(())
}

/// A listing page, filtered by deployment, state, failure code or none of them, reads its
/// rows in creation order from indexes and stops at the limit: no plan sorts the matching
/// rows (0007) or scans the table. Since `0021_fewer_instance_indexes.sql` a page without
/// a state merges one ordered read per state; since `0022_status_indexes_without_id.sql`
/// each read sorts only the instances of one millisecond by id, and a filter by failure
/// code reads the partial index of the instances that have one. The plans are those of
/// the statements the store runs (`SqliteStore::explain_instances`).
#[tokio::test]
async fn sqlite_listing_plans_read_in_creation_order() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(&dir.path().join("plan.db")).await?;
    let dep = Some(qflow_store::DeploymentId(1));
    let failed = Some(InstanceStatus::Failed);
    let code = || Some("CODE".to_string());
    let after = Some((T0, id(1)));
    let cases: Vec<(&str, InstanceFilter, Option<&str>)> = vec![
        (
            "no filter",
            InstanceFilter::default(),
            Some("instances_status_created"),
        ),
        (
            "no filter, a later page",
            InstanceFilter {
                after,
                ..Default::default()
            },
            None,
        ),
        (
            "deployment",
            InstanceFilter {
                deployment: dep,
                ..Default::default()
            },
            Some("instances_deployment_status"),
        ),
        (
            "status",
            InstanceFilter {
                status: failed,
                ..Default::default()
            },
            Some("instances_status_created"),
        ),
        (
            "deployment and status",
            InstanceFilter {
                deployment: dep,
                status: failed,
                ..Default::default()
            },
            Some("instances_deployment_status"),
        ),
        (
            "failed with a code",
            InstanceFilter {
                status: failed,
                failure_code: code(),
                ..Default::default()
            },
            Some("instances_coded"),
        ),
        (
            "a code",
            InstanceFilter {
                failure_code: code(),
                ..Default::default()
            },
            Some("instances_coded"),
        ),
        (
            "deployment, failed with a code",
            InstanceFilter {
                deployment: dep,
                status: failed,
                failure_code: code(),
                ..Default::default()
            },
            None,
        ),
        (
            "created window",
            InstanceFilter {
                created_from_ms: Some(T0),
                created_to_ms: Some(T0 + 10),
                ..Default::default()
            },
            Some("instances_status_created"),
        ),
    ];
    for (label, filter, index) in cases {
        let plan = store.explain_instances(&filter).await?;
        println!("{label}: {plan:?}");
        // Since 0022 the status indexes end with the start instant: SQLite sorts the
        // instances of one millisecond by id, nothing more (and still stops at the limit:
        // `sqlite_a_listing_page_costs_the_same_in_a_bigger_file`).
        ensure!(
            !plan.iter().any(|line| line.contains("TEMP B-TREE")
                && line != "USE TEMP B-TREE FOR LAST TERM OF ORDER BY"),
            "{label}: the plan sorts: {plan:?}"
        );
        ensure!(
            !plan.iter().any(|line| line.starts_with("SCAN instances")),
            "{label}: the plan scans the table: {plan:?}"
        );
        if let Some(index) = index {
            ensure!(
                plan.iter()
                    .any(|line| line.contains(&format!("INDEX {index} "))),
                "{label}: {index} is not used: {plan:?}"
            );
        }
    }
    store.close().await;
    Ok(())
}

/// PostgreSQL leaves room on each page of `instances` for the next versions of its rows
/// (`0018_instances_fillfactor.sql`), so a step's UPDATE, which changes no indexed
/// column, writes the new version beside the old one (a heap-only tuple, no index entry)
/// even when the instances created together filled their page: the row stays on the
/// page it was inserted on through several steps. Filled to the default 100 %, the page
/// of the first of 60 instances created in one commit has no room, and the first
/// update moves the row.
#[tokio::test]
async fn postgres_a_steps_new_row_version_stays_on_its_page() -> Result<()> {
    let Some((store, url, schema)) = scratch_pg("qflow_fill").await? else {
        return Ok(());
    };
    let result = async {
        let dep = deploy(&store, "h1").await?;
        let batch = (1..=60)
            .map(|n| {
                let mut c = commit(id(n), None, dep);
                c.state.snapshot = vec![n as u8; 100];
                c
            })
            .collect();
        store.commit(batch).await?;
        let block = || async {
            let at: String = sqlx::query_scalar("SELECT ctid::text FROM instances WHERE id = $1")
                .bind(id(1))
                .fetch_one(store.pool())
                .await?;
            anyhow::Ok(
                at.trim_start_matches('(')
                    .split(',')
                    .next()
                    .unwrap_or("")
                    .to_owned(),
            )
        };
        let first = block().await?;
        for fence in 1..=5u64 {
            let mut step = commit(id(1), Some(fence), dep);
            step.state.snapshot = vec![fence as u8; 110];
            ensure!(
                matches!(
                    commit_one(&store, step).await?,
                    CommitOutcome::Applied { .. }
                ),
                "step {fence} was not applied"
            );
            let now = block().await?;
            ensure!(
                now == first,
                "step {fence} moved the row from page {first} to {now}"
            );
        }
        let options: Option<Vec<String>> =
            sqlx::query_scalar("SELECT reloptions FROM pg_class WHERE oid = 'instances'::regclass")
                .fetch_one(store.pool())
                .await?;
        ensure!(
            options.is_some_and(|o| o.contains(&"fillfactor=50".to_owned())),
            "instances' fillfactor is not 50"
        );
        Ok(())
    }
    .await;
    drop_scratch_pg(store, &url, &schema, result).await
}

/// The same evidence on PostgreSQL, with enough parked rows (and fresh statistics) that
/// the planner's choice is the one production sees.
#[tokio::test]
async fn postgres_claim_plan_uses_the_due_index() -> Result<()> {
    let Some((store, url, schema)) = scratch_pg("qflow_plan").await? else {
        return Ok(());
    };
    let result = async {
        let dep = deploy(&store, "h1").await?;
        create(&store, id(1), dep).await?;
        sqlx::query(
            "INSERT INTO timers (instance, name, due_at_ms, incarnation) \
             SELECT $1, 't' || g, $2 + g, 1 FROM generate_series(1, 50000) AS g",
        )
        .bind(id(1))
        .bind(T0 + 1_000_000)
        .execute(store.pool())
        .await?;
        sqlx::query("ANALYZE timers").execute(store.pool()).await?;
        let plan = store.explain_claim(T0, 100).await?;
        println!("{}", plan.join("\n"));
        ensure!(
            plan.iter().any(|line| line.contains("timers_due")),
            "plan does not use timers_due: {plan:?}"
        );
        ensure!(
            plan.iter().any(|line| line.contains("Tid Scan on timers")),
            "the update does not find claimed rows by ctid: {plan:?}"
        );
        ensure!(
            !plan.iter().any(|line| line.contains("Seq Scan")),
            "plan scans timers: {plan:?}"
        );
        Ok(())
    }
    .await;
    drop_scratch_pg(store, &url, &schema, result).await
}

/// A commit's update of its instance rows on PostgreSQL reaches them through the primary
/// key (a nested loop over `instances_pkey`), never by a join over a scan of the whole
/// table, for a batch of 225 steps among 20,000 instances with fresh statistics: left to
/// costs, PostgreSQL 15 planned a hash join over a sequential
/// scan of `instances` here, and every commit read every instance (docs/performance.md,
/// "PostgreSQL: a commit's joins by key").
#[tokio::test]
async fn postgres_a_commit_updates_its_rows_through_the_key() -> Result<()> {
    let Some((store, url, schema)) = scratch_pg("qflow_plan").await? else {
        return Ok(());
    };
    let result = async {
        let dep = deploy(&store, "h1").await?;
        sqlx::query(
            "INSERT INTO instances (id, deployment, fence, status, snapshot, created_at_ms, \
                 updated_at_ms) \
             SELECT md5(g::text)::uuid, $1, 1, 'running', '\\x00', $2 + g, $2 + g \
             FROM generate_series(1, 20000) AS g",
        )
        .bind(dep.0)
        .bind(T0)
        .execute(store.pool())
        .await?;
        sqlx::query("ANALYZE instances")
            .execute(store.pool())
            .await?;
        // A batch of 225 steps, about what a lane's round commits.
        let ids: Vec<qflow_store::InstanceId> =
            sqlx::query_scalar("SELECT id FROM instances ORDER BY created_at_ms LIMIT 225")
                .fetch_all(store.pool())
                .await?;
        let plan = store.explain_commit_update(&ids).await?;
        println!("{}", plan.join("\n"));
        ensure!(
            plan.iter()
                .any(|line| line.contains("Index Scan using instances_pkey")),
            "the update does not use instances_pkey: {plan:?}"
        );
        ensure!(
            !plan
                .iter()
                .any(|line| line.contains("Seq Scan on instances")
                    || line.contains("Hash Join")
                    || line.contains("Merge Join")),
            "the update scans instances or joins without the key: {plan:?}"
        );
        Ok(())
    }
    .await;
    drop_scratch_pg(store, &url, &schema, result).await
}

/// A listing by failure code on PostgreSQL reads the partial index of the instances that
/// have one (`0019_failure_codes_partial.sql`) in the listing's order, with a status or
/// without, among 20,000 instances of which one in ten has a code (fresh statistics): no
/// sort, no scan of the table.
#[tokio::test]
async fn postgres_a_listing_by_failure_code_reads_the_partial_index() -> Result<()> {
    let Some((store, url, schema)) = scratch_pg("qflow_plan").await? else {
        return Ok(());
    };
    let result = async {
        let dep = deploy(&store, "h1").await?;
        sqlx::query(
            "INSERT INTO instances (id, deployment, fence, status, failure_code, snapshot, \
                 created_at_ms, updated_at_ms) \
             SELECT md5(g::text)::uuid, $1, 1, \
                 CASE g % 10 WHEN 0 THEN 'running' WHEN 1 THEN 'failed' ELSE 'completed' END, \
                 CASE g % 10 WHEN 1 THEN 'CODE' END, '\\x00', $2 + g / 50, $2 + g / 50 \
             FROM generate_series(1, 20000) AS g",
        )
        .bind(dep.0)
        .bind(T0)
        .execute(store.pool())
        .await?;
        sqlx::query("ANALYZE instances")
            .execute(store.pool())
            .await?;
        let code = || Some("CODE".to_string());
        let cases = [
            (
                "a code",
                InstanceFilter {
                    failure_code: code(),
                    limit: 50,
                    ..Default::default()
                },
            ),
            (
                "failed with a code",
                InstanceFilter {
                    status: Some(InstanceStatus::Failed),
                    failure_code: code(),
                    limit: 50,
                    ..Default::default()
                },
            ),
            (
                "a deployment's, with a code",
                InstanceFilter {
                    deployment: Some(dep),
                    failure_code: code(),
                    limit: 50,
                    ..Default::default()
                },
            ),
        ];
        for (label, filter) in cases {
            let plan = store.explain_instances(&filter).await?;
            println!("{label}:\n{}", plan.join("\n"));
            ensure!(
                plan.iter().any(|line| line.contains("instances_coded")),
                "{label}: instances_coded is not used: {plan:?}"
            );
            ensure!(
                !plan
                    .iter()
                    .any(|line| line.contains("Seq Scan") || line.contains("Sort")),
                "{label}: the plan scans or sorts: {plan:?}"
            );
            let page = store.instances(&filter).await?;
            ensure!(
                page.len() == 50
                    && page
                        .iter()
                        .all(|i| i.failure_code.as_deref() == Some("CODE")),
                "{label}: {} instances",
                page.len()
            );
        }
        Ok(())
    }
    .await;
    drop_scratch_pg(store, &url, &schema, result).await
}

/// The outbox claim's generic plan on PostgreSQL walks `outbox_due` and finds the claimed
/// rows by ctid, with many delivered rows and many pending rows not yet due beside the
/// due ones (and fresh statistics).
#[tokio::test]
async fn postgres_outbox_claim_plan_uses_the_due_index() -> Result<()> {
    let Some((store, url, schema)) = scratch_pg("qflow_plan").await? else {
        return Ok(());
    };
    let result = async {
        let dep = deploy(&store, "h1").await?;
        create(&store, id(1), dep).await?;
        sqlx::query(
            "INSERT INTO outbox (key, instance, node, channel, attempt, call_id, body, \
             created_at_ms, state, deliveries, due_at_ms) \
             SELECT 'k' || g, $1, 'call', 'crm', 1, 'c', '{}', $2, \
                    CASE WHEN g % 2 = 0 THEN 'delivered' ELSE 'pending' END, 1, $2 + g \
             FROM generate_series(1, 50000) AS g",
        )
        .bind(id(1))
        .bind(T0 + 1_000_000)
        .execute(store.pool())
        .await?;
        sqlx::query("ANALYZE outbox").execute(store.pool()).await?;
        let plan = store.explain_outbox_claim(T0, 100).await?;
        println!("{}", plan.join("\n"));
        ensure!(
            plan.iter().any(|line| line.contains("outbox_due")),
            "plan does not use outbox_due: {plan:?}"
        );
        ensure!(
            plan.iter().any(|line| line.contains("Tid Scan on outbox")),
            "the update does not find claimed rows by ctid: {plan:?}"
        );
        ensure!(
            !plan.iter().any(|line| line.contains("Seq Scan")),
            "plan scans outbox: {plan:?}"
        );
        Ok(())
    }
    .await;
    drop_scratch_pg(store, &url, &schema, result).await
}

/// Replicas starting at the same moment on a fresh schema all come up: schema creation
/// tolerates the race and migrations serialize on sqlx's advisory lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_replicas_can_start_together_on_a_fresh_schema() -> Result<()> {
    let Some(url) = pg_url() else {
        println!("skipped: QFLOW_TEST_PG_URL not set");
        return Ok(());
    };
    let schema = unique_name("qflow_start");
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            let config = PgConfig {
                schema: Some(schema.clone()),
                max_connections: 2,
            };
            tokio::spawn(async move { PgStore::connect_with(&url, config).await })
        })
        .collect();
    let mut stores = Vec::new();
    let mut failures = Vec::new();
    for start in starts {
        match start.await? {
            Ok(store) => stores.push(store),
            Err(e) => failures.push(e.to_string()),
        }
    }
    let deployed = match stores.first() {
        Some(store) => Some(deploy(store, "h1").await?),
        None => None,
    };
    for store in &stores {
        store.close().await;
    }
    let mut conn = PgConnection::connect(&url).await?;
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&mut conn)
        .await?;
    ensure!(
        failures.is_empty(),
        "replicas failed to start: {failures:?}"
    );
    ensure!(stores.len() == 4 && deployed.is_some());
    Ok(())
}

/// A schema name that is not a plain identifier is refused before anything is sent.
#[tokio::test]
async fn postgres_schema_name_is_checked() {
    let config = PgConfig {
        schema: Some("x; DROP TABLE t".into()),
        max_connections: 1,
    };
    let result = PgStore::connect_with("postgres://nobody@127.0.0.1:1/none", config).await;
    match result {
        Err(qflow_persistence::Error::Config(message)) => {
            assert!(message.contains("schema"), "{message}")
        }
        other => panic!(
            "expected a configuration error, got {:?}",
            other.map(|_| ())
        ),
    }
}

/// A PostgreSQL journal written before `0014_journal_in_append_order` (rows keyed by
/// `(instance, seq)`, no chain) reads the same after the migration: each instance's rows
/// in seq order, chained, and the next step's row follows them.
#[tokio::test]
async fn postgres_a_journal_keyed_by_instance_is_chained_by_the_migration() -> Result<()> {
    use qflow_store::conformance::journal_entry;
    use qflow_store::{DeploymentId, JournalEntry};

    let Some(url) = pg_url() else {
        println!("skipped: QFLOW_TEST_PG_URL not set");
        return Ok(());
    };
    let schema = unique_name("qflow_journal_migration");
    let result = async {
        // The schema as the build before 0014 left it: every earlier migration applied.
        let before = migrations_before("postgres", "0014")?;
        let mut conn = PgConnection::connect(&url).await?;
        sqlx::query(&format!("CREATE SCHEMA {schema}"))
            .execute(&mut conn)
            .await?;
        sqlx::query(&format!("SET search_path TO {schema}"))
            .execute(&mut conn)
            .await?;
        sqlx::migrate::Migrator::new(before.path())
            .await?
            .run(&mut conn)
            .await?;
        // Two instances with rows written the old way (one of them in an order that
        // is not its seq order), a third without any.
        let dep: i64 = sqlx::query_scalar(
            "INSERT INTO deployments (process_id, content_hash, source, deployed_at_ms) \
             VALUES ('p', 'h1', '', 0) RETURNING id",
        )
        .fetch_one(&mut conn)
        .await?;
        let rows = |n: u8, steps: u64| -> Vec<JournalEntry> {
            (1..=steps)
                .map(|seq| journal_entry(seq, DeploymentId(dep), T0 + seq as i64, n))
                .collect()
        };
        let (one, two) = (rows(1, 3), rows(2, 2));
        for (n, fence) in [(1u128, 3i64), (2, 2), (3, 1)] {
            sqlx::query(
                "INSERT INTO instances (id, deployment, fence, status, snapshot, \
                 created_at_ms, updated_at_ms) VALUES ($1, $2, $3, 'running', '\\x80', 0, 0)",
            )
            .bind(id(n))
            .bind(dep)
            .bind(fence)
            .execute(&mut conn)
            .await?;
        }
        for (n, entry) in [
            (2u128, &two[1]),
            (1, &one[2]),
            (1, &one[0]),
            (2, &two[0]),
            (1, &one[1]),
        ] {
            sqlx::query(
                "INSERT INTO journal (instance, seq, deployment, at_ms, input, delta, \
                 snapshot_hash, effects_hash, row_hash) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(id(n))
            .bind(entry.seq as i64)
            .bind(dep)
            .bind(entry.at_ms)
            .bind(&entry.input)
            .bind(&entry.delta)
            .bind(&entry.snapshot_hash)
            .bind(&entry.effects_hash)
            .bind(&entry.row_hash)
            .execute(&mut conn)
            .await?;
        }
        conn.close().await?;

        // This build opens it and applies 0013.
        let store = PgStore::connect_with(
            &url,
            PgConfig {
                schema: Some(schema.clone()),
                max_connections: 2,
            },
        )
        .await?;
        let checked = async {
            ensure!(store.journal(id(1), 0, 0).await? == one, "instance 1");
            ensure!(store.journal(id(2), 0, 0).await? == two, "instance 2");
            ensure!(store.journal(id(1), 1, 1).await? == one[1..2], "a page");
            ensure!(store.journal(id(3), 0, 0).await?.is_empty(), "instance 3");
            // The next step's row follows the migrated ones.
            let next = journal_entry(4, DeploymentId(dep), T0 + 4, 1);
            let mut step = commit(id(1), Some(3), DeploymentId(dep));
            step.journal = Some(Box::new(next.clone()));
            ensure!(commit_one(&store, step).await? == CommitOutcome::Applied { fence: 4 });
            let mut all = one.clone();
            all.push(next);
            ensure!(store.journal(id(1), 0, 0).await? == all, "after a step");
            ensure!(store.journal(id(2), 0, 0).await? == two, "instance 2 after");
            // A build from before the chain inserts without an id: refused, not a row
            // outside every chain.
            let old_insert = sqlx::query(
                "INSERT INTO journal (instance, seq, deployment, at_ms, input, delta, \
                 snapshot_hash, effects_hash, row_hash) \
                 VALUES ($1, 5, $2, 0, '', '', '', '', '')",
            )
            .bind(id(1))
            .bind(dep)
            .execute(store.pool())
            .await;
            ensure!(old_insert.is_err(), "an insert without an id was taken");
            Ok(())
        }
        .await;
        store.close().await;
        checked
    }
    .await;
    let mut conn = PgConnection::connect(&url).await?;
    sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .execute(&mut conn)
        .await?;
    result
}

/// A SQLite journal written before `0015_journal_packed` (every field a column) reads the
/// same after the migration, beside the packed rows that follow it in the same chains;
/// a packed row whose body is damaged is reported with its id, not read as something.
#[tokio::test]
async fn sqlite_a_journal_of_columns_reads_beside_packed_rows_after_the_migration() -> Result<()> {
    use qflow_store::conformance::journal_entry;
    use qflow_store::{DeploymentId, JournalEntry, StoreError};
    use sqlx::SqliteConnection;

    // The file as the build before 0015 left it: every earlier migration applied.
    let (dir, mut conn, dep) = sqlite_file_before("0015").await?;
    let path = dir.path().join("qflow.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let rows = |n: u8, steps: u64| -> Vec<JournalEntry> {
        (1..=steps)
            .map(|seq| journal_entry(seq, DeploymentId(dep), T0 + seq as i64, n))
            .collect()
    };
    let (one, two) = (rows(1, 3), rows(2, 2));
    // Rows in append order, the two instances interleaved, each chained as 0012 chains.
    let mut last: [Option<i64>; 2] = [None, None];
    for (jid, (n, entry)) in [
        (1, &one[0]),
        (2, &two[0]),
        (1, &one[1]),
        (2, &two[1]),
        (1, &one[2]),
    ]
    .into_iter()
    .enumerate()
    {
        let jid = jid as i64 + 1;
        sqlx::query(
            "INSERT INTO journal (id, prev, seq, deployment, at_ms, input, delta, \
             snapshot_hash, effects_hash, row_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(jid)
        .bind(last[n as usize - 1])
        .bind(entry.seq as i64)
        .bind(dep)
        .bind(entry.at_ms)
        .bind(&entry.input)
        .bind(&entry.delta)
        .bind(&entry.snapshot_hash)
        .bind(&entry.effects_hash)
        .bind(&entry.row_hash)
        .execute(&mut conn)
        .await?;
        last[n as usize - 1] = Some(jid);
    }
    for (n, fence, journal_last) in [(1u128, 3i64, last[0]), (2, 2, last[1]), (3, 1, None)] {
        sqlx::query(
            "INSERT INTO instances (id, deployment, fence, status, snapshot, created_at_ms, \
             updated_at_ms, journal_last) VALUES (?, ?, ?, 'running', x'80', 0, 0, ?)",
        )
        .bind(id(n).hyphenated().to_string())
        .bind(dep)
        .bind(fence)
        .bind(journal_last)
        .execute(&mut conn)
        .await?;
    }
    conn.close().await?;

    // This build opens it and applies 0015.
    let store = SqliteStore::open(&path).await?;
    ensure!(store.journal(id(1), 0, 0).await? == one, "instance 1");
    ensure!(store.journal(id(2), 0, 0).await? == two, "instance 2");
    ensure!(store.journal(id(1), 1, 1).await? == one[1..2], "a page");
    ensure!(store.journal(id(3), 0, 0).await?.is_empty(), "instance 3");
    // The next steps' rows are packed and follow the migrated ones in their chains.
    let next = journal_entry(4, DeploymentId(dep), T0 + 4, 1);
    let mut step = commit(id(1), Some(3), DeploymentId(dep));
    step.journal = Some(Box::new(next.clone()));
    ensure!(commit_one(&store, step).await? == CommitOutcome::Applied { fence: 4 });
    let first = journal_entry(2, DeploymentId(dep), T0 + 2, 3);
    let mut step = commit(id(3), Some(1), DeploymentId(dep));
    step.journal = Some(Box::new(first.clone()));
    ensure!(commit_one(&store, step).await? == CommitOutcome::Applied { fence: 2 });
    let mut all = one.clone();
    all.push(next);
    ensure!(
        store.journal(id(1), 0, 0).await? == all,
        "instance 1 after a step"
    );
    ensure!(
        store.journal(id(1), 2, 0).await? == all[2..],
        "a page across layouts"
    );
    ensure!(store.journal(id(2), 0, 0).await? == two, "instance 2 after");
    ensure!(
        store.journal(id(3), 0, 0).await? == [first],
        "instance 3 after"
    );

    // Only the new rows are packed, each a round (`0018`) of the one step its commit
    // journaled; a damaged body is an error naming its row, for the instance whose
    // chain runs through it, and nobody else's.
    let mut conn = SqliteConnection::connect(&url).await?;
    let packed: Vec<(i64, Vec<u8>)> =
        sqlx::query_as("SELECT id, body FROM journal WHERE body IS NOT NULL ORDER BY id")
            .fetch_all(&mut conn)
            .await?;
    ensure!(
        packed.iter().map(|(row, _)| *row).collect::<Vec<_>>() == [6, 7],
        "packed rows {packed:?}"
    );
    for (row, body) in &packed {
        ensure!(
            qflow_persistence::journal_body::round(*row, body)?.len() == 1,
            "row {row} is a round of one step"
        );
    }
    sqlx::query("UPDATE journal SET body = substr(body, 1, length(body) - 1) WHERE id = 6")
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    // A store that read the round before it was changed behind its back keeps what it
    // read (`RoundCache`); a store opened after sees the damage.
    ensure!(store.journal(id(1), 0, 0).await? == all, "as read before");
    store.close().await;
    let store = SqliteStore::open(&path).await?;
    match store.journal(id(1), 0, 0).await {
        Err(StoreError::Corrupt(message)) => {
            ensure!(message.contains("journal row 6"), "{message}")
        }
        other => anyhow::bail!("a damaged body read as {other:?}"),
    }
    ensure!(
        store.journal(id(2), 0, 0).await? == two,
        "instance 2 beside it"
    );
    ensure!(
        store.journal(id(3), 0, 0).await?.len() == 1,
        "instance 3 beside it"
    );
    store.close().await;
    // A round whose layout byte is damaged is not read as a row of one step (whose
    // `seq` column, 1, would end a page read early and quietly): it is reported, even
    // by a read that stops at it.
    let mut conn = SqliteConnection::connect(&url).await?;
    sqlx::query("UPDATE journal SET body = x'09' || substr(body, 2) WHERE id = 7")
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    let store = SqliteStore::open(&path).await?;
    for after in [0, 1] {
        match store.journal(id(3), after, 0).await {
            Err(StoreError::Corrupt(message)) => {
                ensure!(message.contains("journal row 7"), "{message}");
                ensure!(message.contains("unknown layout 9"), "{message}")
            }
            other => anyhow::bail!("a damaged layout byte read as {other:?}"),
        }
    }
    store.close().await;
    Ok(())
}

/// Steps of several instances committed in one batch share one round row (`0018`): the
/// file holds a row a round, each instance's history reads whole through the rows it
/// shares, and a purge takes an instance's entries out of the rows it shares with
/// instances that stay (and deletes a row when its last entry goes).
#[tokio::test]
async fn sqlite_a_round_row_holds_a_batch_s_steps_and_a_purge_takes_out_its_instances() -> Result<()>
{
    use qflow_store::conformance::journal_entry;
    use qflow_store::{Commit, InstanceId, JournalEntry};
    use sqlx::SqliteConnection;

    let dir = tempfile::tempdir()?;
    let path = dir.path().join("qflow.db");
    let store = SqliteStore::open(&path).await?;
    let dep = deploy(&store, "h1").await?;
    let instances: Vec<InstanceId> = (1..=4u128).map(id).collect();
    let mut histories: Vec<Vec<JournalEntry>> = vec![Vec::new(); instances.len()];
    // Three batches: every instance's creation, then two steps of each, the last of
    // which ends instances 1 and 2.
    for seq in 1..=3u64 {
        let mut batch: Vec<Commit> = Vec::new();
        for (n, &instance) in instances.iter().enumerate() {
            let entry = journal_entry(seq, dep, T0 + seq as i64, n as u8 + 1);
            let mut c = commit(instance, (seq > 1).then_some(seq - 1), dep);
            if seq == 3 && n < 2 {
                c.state.status = InstanceStatus::Completed;
            }
            c.now_ms = T0 + seq as i64;
            c.journal = Some(Box::new(entry.clone()));
            histories[n].push(entry);
            batch.push(c);
        }
        let outcomes = store.commit(batch).await?;
        ensure!(
            outcomes == vec![CommitOutcome::Applied { fence: seq }; 4],
            "{outcomes:?}"
        );
    }
    let rounds = |path: std::path::PathBuf| async move {
        let mut conn = SqliteConnection::connect(&format!("sqlite://{}", path.display())).await?;
        let rows: Vec<(i64, Vec<u8>)> = sqlx::query_as("SELECT id, body FROM journal ORDER BY id")
            .fetch_all(&mut conn)
            .await?;
        conn.close().await?;
        anyhow::Ok(
            rows.iter()
                .map(|(row, body)| Ok(qflow_persistence::journal_body::round(*row, body)?.len()))
                .collect::<Result<Vec<usize>>>()?,
        )
    };
    ensure!(rounds(path.clone()).await? == [4, 4, 4], "a row a round");
    for (n, &instance) in instances.iter().enumerate() {
        ensure!(
            store.journal(instance, 0, 0).await? == histories[n],
            "instance {n}"
        );
        ensure!(
            store.journal(instance, 1, 1).await? == histories[n][1..2],
            "a page"
        );
    }
    let purged = store.purge_finished(ended_by_t0_plus_10()).await?;
    ensure!(purged.journal == 6, "entries purged: {}", purged.journal);
    ensure!(
        rounds(path.clone()).await? == [2, 2, 2],
        "the rounds keep the others"
    );
    for (n, &instance) in instances.iter().enumerate().skip(2) {
        ensure!(
            store.journal(instance, 0, 0).await? == histories[n],
            "kept {n}"
        );
    }
    // Instances 3 and 4 end in a fourth round; purged, every row they held empties: the
    // older ones go, the newest stays empty so that its id is never given again, and
    // the next round takes the id after it (and deletes the emptied one).
    let mut batch = Vec::new();
    for (n, &instance) in instances.iter().enumerate().skip(2) {
        let mut c = commit(instance, Some(3), dep);
        c.state.status = InstanceStatus::Completed;
        c.now_ms = T0 + 4;
        c.journal = Some(Box::new(journal_entry(4, dep, T0 + 4, n as u8 + 1)));
        batch.push(c);
    }
    store.commit(batch).await?;
    let purged = store.purge_finished(ended_by_t0_plus_10()).await?;
    ensure!(purged.journal == 8, "entries purged: {}", purged.journal);
    ensure!(
        rounds(path.clone()).await? == [0],
        "the newest row, emptied"
    );
    let fifth = id(5);
    let mut c = commit(fifth, None, dep);
    let entry = journal_entry(1, dep, T0 + 5, 5);
    c.journal = Some(Box::new(entry.clone()));
    ensure!(commit_one(&store, c).await? == CommitOutcome::Applied { fence: 1 });
    let mut conn = SqliteConnection::connect(&format!("sqlite://{}", path.display())).await?;
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM journal ORDER BY id")
        .fetch_all(&mut conn)
        .await?;
    conn.close().await?;
    // Row 4, emptied, went with the append of row 5: no longer the newest.
    ensure!(ids == [5], "row ids {ids:?}");
    ensure!(store.journal(fifth, 0, 0).await? == [entry], "the fifth");
    store.close().await;
    Ok(())
}

/// Many callers committing at once to one SQLite store (lanes, through the store's one
/// committer, which joins what queues up): every batch gets its own outcomes, every
/// instance its commits in order, and a batch on an unknown deployment fails alone.
#[tokio::test]
async fn sqlite_concurrent_batches_are_each_answered_as_their_own() -> Result<()> {
    use qflow_store::{DeploymentId, StoreError};

    let dir = tempfile::tempdir()?;
    let store = Arc::new(SqliteStore::open(dir.path().join("qflow.db")).await?);
    let dep = deploy(&*store, "aaaa").await?;
    let unknown = DeploymentId(dep.0 + 100);
    const CALLERS: u128 = 8;
    const STEPS: u64 = 20;
    let mut tasks = Vec::new();
    for caller in 0..CALLERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            // Each caller owns instances caller*10+0..4 and steps them STEPS times, a
            // batch of all four a step; caller 3 also sends a bad batch every 5th step.
            let own: Vec<_> = (0..4).map(|k| id(caller * 10 + k)).collect();
            for step in 0..STEPS {
                let expected = (step > 0).then_some(step);
                let batch: Vec<_> = own.iter().map(|&i| commit(i, expected, dep)).collect();
                let outcomes = store.commit(batch).await?;
                ensure!(
                    outcomes
                        .iter()
                        .all(|o| *o == CommitOutcome::Applied { fence: step + 1 }),
                    "caller {caller} step {step}: {outcomes:?}"
                );
                if caller == 3 && step % 5 == 0 {
                    let bad = vec![commit(id(900 + u128::from(step)), None, unknown)];
                    match store.commit(bad).await {
                        Err(StoreError::UnknownDeployment(d)) if d == unknown => {}
                        other => anyhow::bail!("a bad batch answered {other:?}"),
                    }
                }
            }
            Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    for caller in 0..CALLERS {
        for k in 0..4 {
            let record = store.instance(id(caller * 10 + k)).await?;
            ensure!(record.map(|r| r.fence) == Some(STEPS), "{caller}/{k}");
        }
    }
    ensure!(
        store.instance(id(900)).await?.is_none(),
        "the bad batch left a row"
    );
    // The callers' batches were joined: fewer transactions than batches, though every
    // joined transaction with a bad batch in it was redone batch by batch.
    let (transactions, batches) = store.commit_counts();
    ensure!(batches == 8 * 20 + 4, "batches {batches}");
    ensure!(transactions < batches, "{transactions} transactions");
    Ok(())
}

/// A purge that meets a round it cannot read whole (damaged after it was written) keeps
/// that round's entries and purges everything else: retention never stalls on a damaged
/// journal.
#[tokio::test]
async fn sqlite_a_purge_goes_on_past_a_damaged_round() -> Result<()> {
    use qflow_store::conformance::journal_entry;
    use sqlx::SqliteConnection;

    let dir = tempfile::tempdir()?;
    let path = dir.path().join("qflow.db");
    let store = SqliteStore::open(&path).await?;
    let dep = deploy(&store, "h1").await?;
    let mut batch = Vec::new();
    for n in 1..=2u128 {
        let mut c = commit(id(n), None, dep);
        c.state.status = InstanceStatus::Completed;
        c.journal = Some(Box::new(journal_entry(1, dep, T0, n as u8)));
        batch.push(c);
    }
    store.commit(batch).await?;
    let mut conn = SqliteConnection::connect(&format!("sqlite://{}", path.display())).await?;
    sqlx::query("UPDATE journal SET body = substr(body, 1, length(body) - 1)")
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    let purged = store.purge_finished(ended_by_t0_plus_10()).await?;
    ensure!(
        purged.instances == 2,
        "instances purged: {}",
        purged.instances
    );
    ensure!(purged.journal == 0, "entries purged: {}", purged.journal);
    ensure!(store.instance(id(1)).await?.is_none(), "instance 1 went");
    store.close().await;
    Ok(())
}

/// A purge of every instance that ended before `T0 + 10`.
fn ended_by_t0_plus_10() -> qflow_store::PurgeRequest {
    qflow_store::PurgeRequest {
        ended_before_ms: T0 + 10,
        limit: 10,
        deployment: None,
    }
}

/// `0023_lease_in_row.sql` moves each instance's in-flight lease (`~run`) from `timers`
/// into the instance's row, with its due instant, incarnation and claim: a file written
/// before it lists, claims and resolves the same lease afterwards, and its other timers
/// stay where they were.
#[tokio::test]
async fn sqlite_leases_move_into_their_instance_rows_with_their_claims() -> Result<()> {
    use sqlx::SqliteConnection;

    let (dir, mut conn, dep) = sqlite_file_before("0023").await?;
    let path = dir.path().join("qflow.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    for n in [1u128, 2] {
        sqlx::query(
            "INSERT INTO instances (id, deployment, fence, status, snapshot, created_at_ms, \
             updated_at_ms) VALUES (?, ?, 1, 'running', x'01', ?, ?)",
        )
        .bind(id(n).to_string())
        .bind(dep)
        .bind(T0)
        .bind(T0)
        .execute(&mut conn)
        .await?;
    }
    // Instance 1: a lease claimed by `r1` until T0 + 900, and a retry park; instance 2: a
    // lease nobody claimed.
    for (n, name, due, incarnation, owner, until) in [
        (1u128, "~run", T0 + 100, 3i64, Some("r1"), Some(T0 + 900)),
        (1, "r:pay", T0 + 50, 2, None, None),
        (2, "~run", T0 + 200, 0, None, None),
    ] {
        sqlx::query(
            "INSERT INTO timers (instance, name, due_at_ms, incarnation, lease_owner, \
             leased_until_ms) VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(id(n).to_string())
        .bind(name)
        .bind(due)
        .bind(incarnation)
        .bind(owner)
        .bind(until)
        .execute(&mut conn)
        .await?;
    }
    conn.close().await?;

    let store = SqliteStore::open(&path).await?;
    let mut conn = SqliteConnection::connect(&url).await?;
    let names: Vec<String> = sqlx::query_scalar("SELECT name FROM timers ORDER BY name")
        .fetch_all(&mut conn)
        .await?;
    ensure!(names == ["r:pay"], "left in timers: {names:?}");
    // id, then the lease's due instant, incarnation, claim owner and claim end.
    type LeaseColumns = (
        String,
        Option<i64>,
        Option<i64>,
        Option<String>,
        Option<i64>,
    );
    let leases: Vec<LeaseColumns> = sqlx::query_as(
        "SELECT id, lease_due_ms, lease_incarnation, lease_owner, lease_until_ms \
             FROM instances ORDER BY id",
    )
    .fetch_all(&mut conn)
    .await?;
    ensure!(
        leases
            == [
                (
                    id(1).to_string(),
                    Some(T0 + 100),
                    Some(3),
                    Some("r1".to_owned()),
                    Some(T0 + 900)
                ),
                (id(2).to_string(), Some(T0 + 200), Some(0), None, None),
            ],
        "{leases:?}"
    );
    ensure!(
        store.timers(id(1)).await?
            == [
                timer(id(1), "r:pay", T0 + 50, 2),
                timer(id(1), "~run", T0 + 100, 3)
            ]
    );
    ensure!(store.next_timer_due().await? == Some(T0 + 50));
    // `r1`'s claim holds until T0 + 900: a claim before then takes the other two.
    let claimed = store
        .claim_due_timers(TimerClaim {
            now_ms: T0 + 500,
            lease_ms: 1_000,
            owner: "r2",
            limit: 10,
        })
        .await?;
    ensure!(
        claimed
            == [
                timer(id(1), "r:pay", T0 + 50, 2),
                timer(id(2), "~run", T0 + 200, 0)
            ],
        "{claimed:?}"
    );
    let later = store
        .claim_due_timers(TimerClaim {
            now_ms: T0 + 901,
            lease_ms: 1_000,
            owner: "r2",
            limit: 10,
        })
        .await?;
    ensure!(later == [timer(id(1), "~run", T0 + 100, 3)], "{later:?}");
    // A step resolves the lease with the incarnation it was claimed with.
    let mut c = commit(id(1), Some(1), DeploymentId(dep));
    c.timers.resolve = vec![TimerRef {
        name: "~run".parse().expect("the lease's name"),
        incarnation: 3,
    }];
    ensure!(matches!(
        store.commit(vec![c]).await?[..],
        [CommitOutcome::Applied { .. }]
    ));
    ensure!(store.timers(id(1)).await? == [timer(id(1), "r:pay", T0 + 50, 2)]);
    store.close().await;
    Ok(())
}

/// `0020_instances_rowid.sql` rebuilds `instances` as a rowid table: every row, its
/// indexes, the rows of other tables that reference it and the foreign keys come through,
/// and the store goes on committing to it.
#[tokio::test]
async fn sqlite_instances_become_a_rowid_table_with_everything_that_refers_to_them() -> Result<()> {
    use sqlx::SqliteConnection;

    // The file as the build before 0020 left it, with two instances (one ended, with a
    // business key), a timer and an incident of the running one.
    let (dir, mut conn, dep) = sqlite_file_before("0020").await?;
    let path = dir.path().join("qflow.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    for (n, fence, status, key, ended) in [
        (1u128, 3i64, "running", None, None),
        (2, 5, "completed", Some("order-7"), Some(T0 + 9)),
    ] {
        sqlx::query(
            "INSERT INTO instances (id, deployment, fence, status, snapshot, created_at_ms, \
             updated_at_ms, business_key, ended_at_ms, history, history_n) \
             VALUES (?, ?, ?, ?, x'0102', ?, ?, ?, ?, NULL, 0)",
        )
        .bind(id(n).to_string())
        .bind(dep)
        .bind(fence)
        .bind(status)
        .bind(T0 + n as i64)
        .bind(T0 + 9)
        .bind(key)
        .bind(ended)
        .execute(&mut conn)
        .await?;
    }
    sqlx::query(
        "INSERT INTO timers (instance, name, due_at_ms, incarnation) VALUES (?, 'r:pay', ?, 2)",
    )
    .bind(id(1).to_string())
    .bind(T0 + 100)
    .execute(&mut conn)
    .await?;
    sqlx::query(
        "INSERT INTO incidents (instance, node, code, message, opened_at_ms) \
         VALUES (?, 'pay', 'RETRIES_EXHAUSTED', 'down', ?)",
    )
    .bind(id(1).to_string())
    .bind(T0 + 50)
    .execute(&mut conn)
    .await?;
    let indexes = "SELECT name, sql FROM sqlite_master WHERE type = 'index' \
                   AND tbl_name = 'instances' AND sql IS NOT NULL ORDER BY name";
    let indexes_before: Vec<(String, String)> =
        sqlx::query_as(indexes).fetch_all(&mut conn).await?;
    ensure!(indexes_before.len() == 8, "{indexes_before:?}");
    // Every column with its type, constraint and default, and the foreign keys.
    let columns =
        "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_xinfo('instances') \
                   ORDER BY cid";
    let columns_before: Vec<(String, String, i64, Option<String>, i64)> =
        sqlx::query_as(columns).fetch_all(&mut conn).await?;
    let keys = "SELECT \"table\", \"from\", \"to\" FROM pragma_foreign_key_list('instances')";
    let keys_before: Vec<(String, String, String)> =
        sqlx::query_as(keys).fetch_all(&mut conn).await?;
    ensure!(keys_before.len() == 1, "{keys_before:?}");
    conn.close().await?;

    // This build opens it and applies 0020.
    let store = SqliteStore::open(&path).await?;
    let mut conn = SqliteConnection::connect(&url).await?;
    let table: String = sqlx::query_scalar(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'instances'",
    )
    .fetch_one(&mut conn)
    .await?;
    ensure!(!table.contains("WITHOUT ROWID"), "{table}");
    let indexes_after: Vec<(String, String)> = sqlx::query_as(indexes).fetch_all(&mut conn).await?;
    // Every index again, less the three `0021_fewer_instance_indexes.sql` drops, with the
    // two status indexes `0022_status_indexes_without_id.sql` makes without the id and the
    // partial index of failure codes it adds.
    let dropped = [
        "instances_created",
        "instances_deployment_created",
        "instances_status",
        "instances_status_created",
        "instances_deployment_status",
    ];
    let mut expected: Vec<(String, String)> = indexes_before
        .iter()
        .filter(|(name, _)| !dropped.contains(&name.as_str()))
        .cloned()
        .collect();
    expected.extend([
        (
            "instances_coded".into(),
            "CREATE INDEX instances_coded ON instances (failure_code, created_at_ms, id)\n    \
             WHERE failure_code IS NOT NULL"
                .into(),
        ),
        (
            "instances_status_created".into(),
            "CREATE INDEX instances_status_created ON instances (status, created_at_ms)".into(),
        ),
        (
            "instances_deployment_status".into(),
            "CREATE INDEX instances_deployment_status ON instances (deployment, status, \
             created_at_ms)"
                .into(),
        ),
        // `0023_lease_in_row.sql`: the armed in-flight leases.
        (
            "instances_lease_due".into(),
            "CREATE INDEX instances_lease_due ON instances (lease_due_ms) \
             WHERE lease_due_ms IS NOT NULL"
                .into(),
        ),
    ]);
    expected.sort();
    ensure!(indexes_after == expected, "{indexes_after:?}");
    let columns_after: Vec<(String, String, i64, Option<String>, i64)> =
        sqlx::query_as(columns).fetch_all(&mut conn).await?;
    // Every column as before, then the lease's four (`0023_lease_in_row.sql`).
    let mut columns_expected = columns_before.clone();
    columns_expected.extend(
        [
            "lease_due_ms",
            "lease_incarnation",
            "lease_owner",
            "lease_until_ms",
        ]
        .into_iter()
        .zip(["INTEGER", "INTEGER", "TEXT", "INTEGER"])
        .map(|(name, kind)| (name.to_owned(), kind.to_owned(), 0, None, 0)),
    );
    ensure!(columns_after == columns_expected, "{columns_after:?}");
    let keys_after: Vec<(String, String, String)> =
        sqlx::query_as(keys).fetch_all(&mut conn).await?;
    ensure!(keys_after == keys_before, "{keys_after:?}");
    let left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sqlite_master WHERE name = 'instances_before_0020'",
    )
    .fetch_one(&mut conn)
    .await?;
    ensure!(left == 0, "the copy set aside is left behind");
    // The rows in creation order, as the rowids give them.
    let by_rowid: Vec<String> = sqlx::query_scalar("SELECT id FROM instances ORDER BY rowid")
        .fetch_all(&mut conn)
        .await?;
    ensure!(
        by_rowid == [id(1).to_string(), id(2).to_string()],
        "{by_rowid:?}"
    );
    let (_, synchronous, foreign_keys) = store.writer_settings().await?;
    ensure!(
        synchronous == 2 && foreign_keys == 1,
        "{synchronous} {foreign_keys}"
    );
    let orphans: Vec<(String, i64)> =
        sqlx::query_as("SELECT \"table\", rowid FROM pragma_foreign_key_check")
            .fetch_all(&mut conn)
            .await?;
    ensure!(orphans.is_empty(), "{orphans:?}");

    let running = store.instance(id(1)).await?.expect("instance 1 kept");
    ensure!(running.fence == 3 && running.status == InstanceStatus::Running);
    ensure!(running.snapshot == [1, 2] && running.created_at_ms == T0 + 1);
    let ended = store.instance(id(2)).await?.expect("instance 2 kept");
    ensure!(ended.status == InstanceStatus::Completed && ended.fence == 5);
    ensure!(ended.business_key.as_deref() == Some("order-7"));
    ensure!(store.timers(id(1)).await? == [timer(id(1), "r:pay", T0 + 100, 2)]);
    ensure!(store.incidents(Some(id(1))).await?.len() == 1);
    let finished = store
        .instances(&InstanceFilter {
            status: Some(InstanceStatus::Completed),
            ..InstanceFilter::default()
        })
        .await?;
    ensure!(finished.len() == 1 && finished[0].id == id(2));

    // Commits go on: a compare-and-swap on the old row, a new instance after it, and
    // the business key still unique.
    let dep = qflow_store::DeploymentId(dep);
    ensure!(
        commit_one(&store, commit(id(1), Some(3), dep)).await?
            == CommitOutcome::Applied { fence: 4 }
    );
    ensure!(matches!(
        commit_one(&store, commit(id(1), Some(3), dep)).await?,
        CommitOutcome::Conflict { .. }
    ));
    create(&store, id(3), dep).await?;
    let mut taken = commit(id(4), None, dep);
    taken.state.business_key = Some("order-7".into());
    ensure!(!matches!(
        commit_one(&store, taken).await?,
        CommitOutcome::Applied { .. }
    ));
    // The foreign keys and checks hold on the rebuilt table.
    let orphan = sqlx::query(
        "INSERT INTO timers (instance, name, due_at_ms, incarnation) VALUES (?, 't', 0, 1)",
    )
    .bind(id(99).to_string())
    .execute(&mut conn)
    .await;
    let code = |r: &Result<_, sqlx::Error>| match r {
        Err(sqlx::Error::Database(e)) => e.code().map(|c| c.into_owned()),
        _ => None,
    };
    // SQLITE_CONSTRAINT_FOREIGNKEY and SQLITE_CONSTRAINT_CHECK.
    ensure!(code(&orphan).as_deref() == Some("787"), "{orphan:?}");
    let unchecked = sqlx::query(
        "INSERT INTO instances (id, deployment, fence, status, snapshot, created_at_ms, \
         updated_at_ms) VALUES (?, ?, 1, 'paused', x'', 0, 0)",
    )
    .bind(id(98).to_string())
    .bind(dep.0)
    .execute(&mut conn)
    .await;
    ensure!(code(&unchecked).as_deref() == Some("275"), "{unchecked:?}");
    conn.close().await?;
    store.close().await;
    Ok(())
}

/// Commits attempts 2 to 60 of instance 1 (created on `dep`, with `written` in its
/// history already) one at a time and checks after each, through `counts` (rows of
/// `attempts`, records in the row, the row's history bytes), that the row never holds
/// more than 2 KiB, that every record is in one place or the other, that attempt 2 went to
/// the row, and that a read gives them all in order; and that the row's records moved to
/// the table at least once.
async fn attempts_move_past_2_kib<F, Fut>(
    store: &dyn Store,
    dep: qflow_store::DeploymentId,
    mut written: Vec<qflow_store::AttemptRecord>,
    counts: F,
) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(i64, i64, i64)>>,
{
    use qflow_store::{AttemptOutcome, AttemptRecord};

    let mut moved = false;
    for n in 2..=60u32 {
        let record = AttemptRecord {
            outcome: AttemptOutcome::Failed,
            code: Some("HTTP_503".into()),
            message: Some(format!("attempt {n}: upstream unavailable")),
            ..attempt(id(1), "pay", n)
        };
        let mut c = commit(id(1), Some(u64::from(n) - 1), dep);
        c.attempts = vec![record.clone()];
        ensure!(
            commit_one(store, c).await?
                == CommitOutcome::Applied {
                    fence: u64::from(n)
                }
        );
        written.push(record);
        let (table, in_row, len) = counts().await?;
        ensure!(len <= 2048, "the row holds {len} bytes after attempt {n}");
        ensure!(
            table + in_row == i64::from(n),
            "{table} + {in_row} records after {n}"
        );
        if n == 2 {
            ensure!(table == 1 && in_row == 1, "attempt 2 went to the table");
        }
        moved |= in_row == 0;
        ensure!(store.attempts(id(1)).await? == written, "after attempt {n}");
    }
    ensure!(moved, "60 attempts never moved past 2 KiB");
    Ok(())
}

/// PostgreSQL keeps a step's finished attempts in the instance row too
/// (`0017_attempts_in_row.sql`): `history_n` counts them, the row never holds more than
/// 2 KiB of them, the commit that passes that moves them to `attempts`, and a read puts an
/// `attempts` row written before the migration (or moved there) before the row's.
#[tokio::test]
async fn postgres_attempts_live_in_the_row_and_move_to_the_table_past_2_kib() -> Result<()> {
    let Some((store, url, schema)) = scratch_pg("qflow_history_row").await? else {
        return Ok(());
    };
    let result = async {
        let dep = deploy(&store, "h1").await?;
        commit_one(&store, commit(id(1), None, dep)).await?;
        // An attempt row of the kind every build before 0017 wrote.
        let old = attempt(id(1), "pay", 1);
        sqlx::query(
            "INSERT INTO attempts (instance, node, attempt, started_at_ms, finished_at_ms, \
             outcome, code, message, worker) VALUES ($1, 'pay', 1, $2, $3, 'failed', $4, $5, NULL)",
        )
        .bind(id(1))
        .bind(old.started_at_ms)
        .bind(old.finished_at_ms)
        .bind(old.code.as_deref())
        .bind(old.message.as_deref())
        .execute(store.pool())
        .await?;
        let counts = || {
            let pool = store.pool().clone();
            async move {
                let table: i64 = sqlx::query_scalar("SELECT count(*) FROM attempts")
                    .fetch_one(&pool)
                    .await?;
                let (in_row, len): (i32, Option<i32>) = sqlx::query_as(
                    "SELECT history_n, octet_length(history) FROM instances WHERE id = $1",
                )
                .bind(id(1))
                .fetch_one(&pool)
                .await?;
                Ok((table, i64::from(in_row), i64::from(len.unwrap_or(0))))
            }
        };
        attempts_move_past_2_kib(&store, dep, vec![old], counts).await
    }
    .await;
    drop_scratch_pg(store, &url, &schema, result).await
}

/// `r` in layout 1 of the packed attempt history, as every build before the compact layout
/// (2026-12-06) wrote it into `instances.history` (qflow_store::history's module doc).
fn layout_1_record(r: &qflow_store::AttemptRecord) -> Vec<u8> {
    use qflow_store::varint::{varint, zigzag};
    let mut out = Vec::new();
    varint(&mut out, r.node.len() as u64);
    out.extend_from_slice(r.node.as_bytes());
    varint(&mut out, u64::from(r.attempt.get()));
    varint(&mut out, zigzag(r.finished_at_ms));
    varint(&mut out, zigzag(r.finished_at_ms - r.started_at_ms));
    out.push(match r.outcome {
        qflow_store::AttemptOutcome::Ok => 0,
        qflow_store::AttemptOutcome::Failed => 1,
        o => panic!("the test writes no {o:?}"),
    });
    for text in [&r.code, &r.message, &r.worker] {
        match text {
            None => out.push(0),
            Some(t) => {
                varint(&mut out, t.len() as u64 + 1);
                out.extend_from_slice(t.as_bytes());
            }
        }
    }
    out
}

/// An instance id as the runtime makes them (UUIDv7, started at the conformance kit's `T0`).
fn v7_id() -> qflow_store::InstanceId {
    uuid::Builder::from_unix_timestamp_millis(T0 as u64, &[0x5a; 10]).into_uuid()
}

/// Instance [`v7_id`] (created on `dep` at fence 1) holds two records in its row in
/// layout 1, put there by `set_history`, as a row written before the compact layout does. Three more attempts
/// committed through the store go after them in the compact layout (the row's bytes start
/// with the old ones, unchanged, and grow by fewer bytes a record), and a read gives all of
/// them in order; `row` reads the row's history bytes.
async fn layout_1_history_takes_compact_records<S, SFut, R, RFut>(
    store: &dyn Store,
    dep: qflow_store::DeploymentId,
    set_history: S,
    row: R,
) -> Result<()>
where
    S: FnOnce(Vec<u8>, i64) -> SFut,
    SFut: std::future::Future<Output = Result<()>>,
    R: Fn() -> RFut,
    RFut: std::future::Future<Output = Result<Vec<u8>>>,
{
    use qflow_store::{AttemptOutcome, AttemptRecord};

    let failed = |n: u32| AttemptRecord {
        outcome: AttemptOutcome::Failed,
        code: Some("HTTP_503".into()),
        message: Some(format!("attempt {n}: upstream unavailable")),
        ..attempt(v7_id(), "pay", n)
    };
    let mut written = vec![failed(1), attempt(v7_id(), "check", 1)];
    let old: Vec<u8> = written.iter().flat_map(layout_1_record).collect();
    set_history(old.clone(), written.len() as i64).await?;
    ensure!(
        store.attempts(v7_id()).await? == written,
        "the layout 1 records read back"
    );
    for n in 2..=4u32 {
        let record = failed(n);
        let mut c = commit(v7_id(), Some(u64::from(n) - 1), dep);
        c.attempts = vec![record.clone()];
        ensure!(
            commit_one(store, c).await?
                == CommitOutcome::Applied {
                    fence: u64::from(n)
                }
        );
        written.push(record);
    }
    let bytes = row().await?;
    ensure!(bytes.starts_with(&old), "the old records were rewritten");
    let compact = bytes.len() - old.len();
    let as_layout_1: usize = written[2..].iter().map(|r| layout_1_record(r).len()).sum();
    // A compact record writes the instance's age (1 byte here) for the epoch instant (6)
    // and nothing for an absent worker (1), and pays a byte for its first one: attempt 2
    // (which names a worker) saves 4 bytes, attempts 3 and 4 save 5 each.
    ensure!(
        compact + 14 == as_layout_1,
        "three compact records took {compact} bytes, layout 1 {as_layout_1}"
    );
    ensure!(
        store.attempts(v7_id()).await? == written,
        "old, then new, in order"
    );
    Ok(())
}

#[tokio::test]
async fn sqlite_layout_1_history_takes_compact_records() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("qflow.db");
    let url = format!("sqlite://{}", path.display());
    let store = SqliteStore::open(&path).await?;
    let dep = deploy(&store, "h1").await?;
    commit_one(&store, commit(v7_id(), None, dep)).await?;
    let pool = sqlx::SqlitePool::connect(&url).await?;
    let set = |bytes: Vec<u8>, n: i64| {
        let pool = pool.clone();
        async move {
            sqlx::query("UPDATE instances SET history = ?, history_n = ? WHERE id = ?")
                .bind(bytes)
                .bind(n)
                .bind(v7_id().to_string())
                .execute(&pool)
                .await?;
            Ok(())
        }
    };
    let row = || {
        let pool = pool.clone();
        async move {
            Ok(
                sqlx::query_scalar("SELECT history FROM instances WHERE id = ?")
                    .bind(v7_id().to_string())
                    .fetch_one(&pool)
                    .await?,
            )
        }
    };
    let result = layout_1_history_takes_compact_records(&store, dep, set, row).await;
    pool.close().await;
    store.close().await;
    result
}

#[tokio::test]
async fn postgres_layout_1_history_takes_compact_records() -> Result<()> {
    let Some((store, url, schema)) = scratch_pg("qflow_history_layout").await? else {
        return Ok(());
    };
    let result = async {
        let dep = deploy(&store, "h1").await?;
        commit_one(&store, commit(v7_id(), None, dep)).await?;
        let pool = store.pool().clone();
        let set = |bytes: Vec<u8>, n: i64| {
            let pool = pool.clone();
            async move {
                sqlx::query("UPDATE instances SET history = $1, history_n = $2 WHERE id = $3")
                    .bind(bytes)
                    .bind(i32::try_from(n)?)
                    .bind(v7_id())
                    .execute(&pool)
                    .await?;
                Ok(())
            }
        };
        let row = || {
            let pool = pool.clone();
            async move {
                Ok(
                    sqlx::query_scalar("SELECT history FROM instances WHERE id = $1")
                        .bind(v7_id())
                        .fetch_one(&pool)
                        .await?,
                )
            }
        };
        layout_1_history_takes_compact_records(&store, dep, set, row).await
    }
    .await;
    drop_scratch_pg(store, &url, &schema, result).await
}

/// A step's finished attempts go in the instance row (`0019_attempts_in_row.sql`), not in
/// `attempts`; past 2 KiB the row's records move to `attempts` in one go and the row is
/// emptied; a row `attempts` held before (as a file migrated from before 0019 has them)
/// reads first, then the row's.
#[tokio::test]
async fn sqlite_attempts_live_in_the_row_and_move_to_the_table_past_2_kib() -> Result<()> {
    use sqlx::SqliteConnection;

    let dir = tempfile::tempdir()?;
    let path = dir.path().join("qflow.db");
    let url = format!("sqlite://{}", path.display());
    let store = SqliteStore::open(&path).await?;
    let dep = deploy(&store, "h1").await?;
    commit_one(&store, commit(id(1), None, dep)).await?;
    store.close().await;
    // An attempt row of the kind every build before 0019 wrote.
    let old = attempt(id(1), "pay", 1);
    let mut conn = SqliteConnection::connect(&url).await?;
    sqlx::query(
        "INSERT INTO attempts (instance, node, attempt, started_at_ms, finished_at_ms, outcome, \
         code, message, worker) VALUES (?, 'pay', 1, ?, ?, 'failed', ?, ?, NULL)",
    )
    .bind(id(1).to_string())
    .bind(old.started_at_ms)
    .bind(old.finished_at_ms)
    .bind(old.code.as_deref())
    .bind(old.message.as_deref())
    .execute(&mut conn)
    .await?;
    conn.close().await?;
    let store = SqliteStore::open(&path).await?;
    let pool = sqlx::SqlitePool::connect(&url).await?;
    let counts = || {
        let pool = pool.clone();
        async move {
            let table: i64 = sqlx::query_scalar("SELECT count(*) FROM attempts")
                .fetch_one(&pool)
                .await?;
            let (in_row, len): (i64, Option<i64>) =
                sqlx::query_as("SELECT history_n, length(history) FROM instances WHERE id = ?")
                    .bind(id(1).to_string())
                    .fetch_one(&pool)
                    .await?;
            Ok((table, in_row, len.unwrap_or(0)))
        }
    };
    let result = attempts_move_past_2_kib(&store, dep, vec![old], counts).await;
    pool.close().await;
    store.close().await;
    result
}
