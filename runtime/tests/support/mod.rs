//! Helpers the runtime's test files share.

use qflow_runtime::Runtime;
use qflow_store::InstanceId;

/// Fails the test instead of hanging it forever when what it waits for never happens.
/// Not a timing assertion: the bound is minutes above anything the wait needs.
pub async fn hang_guard<F: std::future::Future>(wait: F) -> F::Output {
    tokio::time::timeout(std::time::Duration::from_secs(120), wait)
        .await
        .expect("the runtime stopped making progress")
}

/// Deploys `model` on `rt` and starts one instance of it with no variables.
pub async fn deploy_and_start(rt: &Runtime, model: &str) -> InstanceId {
    let dep = rt.deploy(model, None).await.expect("deploys");
    rt.start_instance(dep.id, Default::default())
        .await
        .expect("starts")
}
