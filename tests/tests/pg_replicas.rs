//! Two replicas on one PostgreSQL database (SPEC R1, R3, R4): 1,000 instances with
//! scripted failures and retries end exactly as scripted with no attempt committed twice;
//! then a replica dies mid-run and the other finishes its work.
//!
//! Needs `QFLOW_TEST_PG_URL`; without it the test says it is skipped and passes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use qflow_persistence::{PgConfig, PgStore};
use qflow_runtime::Runtime;
use qflow_store::{DeploymentId, InstanceFilter, InstanceId, InstanceStatus, Store};
use qflow_tests::{fast_recovery_config, flaky_model, start_runtime, verdict};

fn pg_url() -> Option<String> {
    match std::env::var("QFLOW_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!("skipped: QFLOW_TEST_PG_URL not set");
            None
        }
    }
}

async fn replica(url: &str, schema: &str) -> (Arc<PgStore>, Runtime) {
    let store = Arc::new(
        PgStore::connect_with(
            url,
            PgConfig {
                schema: Some(schema.to_owned()),
                max_connections: 6,
            },
        )
        .await
        .expect("connect"),
    );
    let rt = start_runtime(store.clone(), fast_recovery_config(2));
    (store, rt)
}

async fn start_many(rt: &Runtime, dep: DeploymentId, n: u32) -> Vec<InstanceId> {
    futures::stream::iter(0..n)
        .map(|i| {
            let vars = [("fail".to_owned(), serde_json::json!(i % 3))].into();
            rt.start_instance(dep, vars)
        })
        .buffer_unordered(64)
        .try_collect()
        .await
        .expect("starts")
}

async fn wait_all_finished(store: &dyn Store, limit: Duration) {
    let began = Instant::now();
    let running = InstanceFilter {
        status: Some(InstanceStatus::Running),
        limit: 1,
        ..InstanceFilter::default()
    };
    while !store.instances(&running).await.expect("list").is_empty() {
        assert!(
            began.elapsed() < limit,
            "instances still running after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn assert_all_as_scripted(store: &dyn Store, ids: &[InstanceId], flaky_id: &str) {
    for id in ids {
        verdict(store, *id)
            .await
            .expect("verdict")
            .assert_as_scripted(flaky_id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_work_and_survive_the_death_of_one() {
    let Some(url) = pg_url() else { return };
    let schema = format!("qflow_replicas_{}", uuid::Uuid::new_v4().simple());
    let (store_a, rt_a) = replica(&url, &schema).await;
    let (store_b, rt_b) = replica(&url, &schema).await;

    // Both replicas deploy the same content: one version.
    let model = flaky_model("replicated", "flaky", 40);
    let dep_a = rt_a.deploy(&model, None).await.expect("deploy on A");
    let dep_b = rt_b.deploy(&model, None).await.expect("deploy on B");
    assert_eq!(dep_a.id, dep_b.id);

    // Phase 1: 1,000 instances started half on each replica; timers are claimed by
    // whichever poller gets there first, so both replicas step the same instances and
    // the fence arbitrates.
    let (ids_a, ids_b) = tokio::join!(
        start_many(&rt_a, dep_a.id, 500),
        start_many(&rt_b, dep_b.id, 500)
    );
    wait_all_finished(&*store_a, Duration::from_secs(120)).await;
    let mut ids = ids_a;
    ids.extend(ids_b);
    assert_all_as_scripted(&*store_a, &ids, "flaky").await;
    let (a, b) = (rt_a.stats().view(), rt_b.stats().view());
    eprintln!("phase 1: A {a:?}\nphase 1: B {b:?}");
    assert_eq!(a.completed + b.completed, 1_000);
    assert!(a.steps > 0 && b.steps > 0, "both replicas did work");

    // Phase 2: longer backoffs, then replica A dies mid-run. Its timer claims and
    // in-flight leases lapse; B re-adopts everything.
    let model2 = flaky_model("replicated", "flaky2", 250);
    let dep2 = rt_a.deploy(&model2, None).await.expect("deploy v2");
    let (ids_a, ids_b) = tokio::join!(
        start_many(&rt_a, dep2.id, 150),
        start_many(&rt_b, dep2.id, 150)
    );
    tokio::time::sleep(Duration::from_millis(150)).await;
    let parked_on_a = rt_a.stats().view();
    rt_a.abort();
    eprintln!("A died after {parked_on_a:?}");
    wait_all_finished(&*store_b, Duration::from_secs(120)).await;
    let mut ids = ids_a;
    ids.extend(ids_b);
    assert_all_as_scripted(&*store_b, &ids, "flaky2").await;
    rt_b.shutdown().await;

    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(store_b.pool())
        .await
        .expect("drop schema");
    store_a.close().await;
    store_b.close().await;
}
