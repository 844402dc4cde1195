//! A host process for the activity-instance crash test (`tests/tests/activity_instances.rs`):
//! a parallel split sends two tokens into one registered task `pay`, so one instance
//! runs two activity instances of it, `pay` and `pay@2`, on a SQLite file or a
//! PostgreSQL schema, and the host can be killed at any moment.
//!
//! ```text
//! activity_host (--db FILE | --database-url URL --schema S) start BLOCK
//! activity_host (--db FILE | --database-url URL --schema S) resume
//! ```
//!
//! `start BLOCK` deploys the model and starts one instance, printing `started <id>` once
//! it is durable; the handler call of the activity instance named `BLOCK` (`pay@2`, say)
//! never answers in this life, so the test can kill the host after the other instance's
//! outcome is committed and before this one's. `resume` only runs what the store holds,
//! every handler call answering at once. Either prints `ran <node> <attempt>` when a
//! handler call starts and `done` (then exits 0) once no instance is running; `start`
//! also prints `committed <node> <attempt> <outcome>` once an attempt-history row of its
//! instance is in the store (read back from the store, so the line follows the commit).

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use qflow_runtime::TaskOutcome;
use qflow_runtime::{AsyncHandlers, Clock, Runtime, RuntimeConfig, SystemClock, TaskCall};
use qflow_store::{InstanceFilter, InstanceId, InstanceStatus, Store};
use qflow_tests::fast_recovery_config;

/// A split whose two flows both enter `pay` (with a retry policy), then an end.
const SPLIT_INTO_PAY: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1"
             id="defs" targetNamespace="urn:qflow:tests">
  <process id="split_pay" isExecutable="true">
    <startEvent id="start"/>
    <parallelGateway id="split"/>
    <serviceTask id="pay" q:task="pay">
      <extensionElements>
        <q:retry maxAttempts="3" initialInterval="PT0.1S" jitter="none"/>
      </extensionElements>
    </serviceTask>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="split"/>
    <sequenceFlow id="f1" sourceRef="split" targetRef="pay"/>
    <sequenceFlow id="f2" sourceRef="split" targetRef="pay"/>
    <sequenceFlow id="f3" sourceRef="pay" targetRef="end"/>
  </process>
</definitions>"#;

fn say(line: String) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// `pay` answers `paid_<node>` (the `@` spelled `_`) at once, except for the activity
/// instance `block`, whose call never answers.
fn handlers(block: Option<String>) -> AsyncHandlers {
    AsyncHandlers::new().with_async("pay", move |call: TaskCall| {
        let block = block.clone();
        async move {
            say(format!("ran {} {}", call.node, call.attempt));
            if block.as_deref() == Some(call.node.as_str()) {
                futures::future::pending::<()>().await;
            }
            let key = format!("paid_{}", call.node.replace('@', "_"));
            TaskOutcome::Ok([(key, serde_json::json!(call.attempt.get()))].into())
        }
    })
}

/// Prints every attempt-history row of `id` once it is in the store, in commit order.
async fn report_commits(store: Arc<dyn Store>, id: InstanceId) {
    let mut seen = 0;
    loop {
        if let Ok(rows) = store.attempts(id).await {
            for a in rows.iter().skip(seen) {
                say(format!(
                    "committed {} {} {}",
                    a.node,
                    a.attempt,
                    a.outcome.as_str()
                ));
            }
            seen = seen.max(rows.len());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut db, mut url, mut schema, mut rest) = (None, None, None, Vec::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--db" => db = args.next(),
            "--database-url" => url = args.next(),
            "--schema" => schema = args.next(),
            _ => rest.push(a),
        }
    }
    let store = qflow_tests::stores::host_store(db, url, schema, 4).await?;
    let block = match rest.as_slice() {
        [mode, block] if mode == "start" => Some(block.clone()),
        [mode] if mode == "resume" => None,
        _ => bail!("usage: activity_host (--db FILE | --database-url URL --schema S) (start BLOCK | resume)"),
    };
    // Short leases so a dead host's attempt is re-adopted within a second; a handler
    // time limit far above the test's bound, so the blocked call is not a timeout.
    let config = RuntimeConfig {
        handler_time_limit_ms: 600_000,
        ..fast_recovery_config(1)
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let runtime = Runtime::start(store.clone(), handlers(block.clone()), clock, config);
    if block.is_some() {
        let dep = runtime.deploy(SPLIT_INTO_PAY, None).await?;
        let id = runtime.start_instance(dep.id, Default::default()).await?;
        say(format!("started {id}"));
        tokio::spawn(report_commits(store.clone(), id));
    }
    let running = InstanceFilter {
        status: Some(InstanceStatus::Running),
        limit: 1,
        ..InstanceFilter::default()
    };
    // Polling the store (not a lane) for the end of the run.
    while !store.instances(&running).await?.is_empty() {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    runtime.shutdown().await;
    say("done".to_owned());
    Ok(())
}
