//! Hot-deploy (SPEC R5): version 2 is deployed while version-1 instances sit in backoff
//! parks. They finish on version 1; new instances start on version 2; retiring version 1
//! is refused until its instances are done, then allowed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use qflow_persistence::SqliteStore;
use qflow_runtime::Error;
use qflow_store::{InstanceFilter, InstanceStatus, RetireOutcome, Store};
use qflow_tests::{fast_recovery_config, flaky_model, start_runtime, verdict};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_instances_stay_on_their_version_and_block_its_retirement() {
    let dir = std::env::temp_dir().join(format!("qflow-hot-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.join("hot.sqlite"))
            .await
            .expect("open"),
    );
    let rt = start_runtime(store.clone(), fast_recovery_config(2));

    // Version 1: the flaky node is `work`; every instance fails once and parks for 400 ms.
    let v1 = rt
        .deploy(&flaky_model("billing", "work", 400), None)
        .await
        .expect("v1");
    let mut old = Vec::new();
    for _ in 0..20 {
        let vars = [("fail".to_owned(), serde_json::json!(1))].into();
        old.push(rt.start_instance(v1.id, vars).await.expect("start on v1"));
    }
    // Wait until every v1 instance has failed its first attempt and parked.
    let began = Instant::now();
    loop {
        let mut parked = 0;
        for id in &old {
            let timers = store.timers(*id).await.expect("timers");
            parked += timers.iter().any(|t| t.name == "r:work") as usize;
        }
        if parked == old.len() {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "v1 instances never parked"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Version 2 renames the node; same process id, new content, new version.
    let v2 = rt
        .deploy(&flaky_model("billing", "work_v2", 50), None)
        .await
        .expect("v2");
    assert_ne!(v1.id, v2.id);
    assert_eq!(
        rt.deploy(&flaky_model("billing", "work_v2", 50), None)
            .await
            .expect("v2 again")
            .id,
        v2.id,
        "same content, same version"
    );
    let mut new = Vec::new();
    for _ in 0..10 {
        let vars = [("fail".to_owned(), serde_json::json!(1))].into();
        new.push(rt.start_instance(v2.id, vars).await.expect("start on v2"));
    }

    // Version 1 still has parked instances: retirement is refused.
    match rt.retire(v1.id).await.expect("retire v1") {
        RetireOutcome::Refused { blocking_instances } => assert!(blocking_instances > 0),
        other => panic!("retiring a version with parked instances must be refused: {other:?}"),
    }

    rt.wait_until(|s| s.completed >= 30).await;
    for id in &old {
        let v = verdict(&*store, *id).await.expect("verdict");
        v.assert_as_scripted("work");
        let rec = store.instance(*id).await.expect("read").expect("exists");
        assert_eq!(rec.deployment, v1.id, "a v1 instance moved deployments");
    }
    for id in &new {
        verdict(&*store, *id)
            .await
            .expect("verdict")
            .assert_as_scripted("work_v2");
        let rec = store.instance(*id).await.expect("read").expect("exists");
        assert_eq!(rec.deployment, v2.id);
    }

    // Done: retirement is allowed, and a retired version takes no new instances.
    assert_eq!(
        rt.retire(v1.id).await.expect("retire v1"),
        RetireOutcome::Retired
    );
    let refused = rt
        .start_instance(v1.id, Default::default())
        .await
        .expect_err("retired");
    assert!(matches!(refused, Error::Refused { .. }), "{refused:?}");
    let running = store
        .instances(&InstanceFilter {
            status: Some(InstanceStatus::Running),
            limit: 10,
            ..InstanceFilter::default()
        })
        .await
        .expect("list");
    assert!(running.is_empty());
    rt.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
