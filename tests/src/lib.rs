//! Shared pieces of the cross-crate tests: the flaky model, its scripted handler, and
//! the checks every durable-runtime test makes on the attempt history; the channel-call
//! model and the loopback webhook counterpart (`counterpart`) the channel tests drive.
//!
//! The script lives in the instance's own variables (`fail`: how many attempts of `flaky`
//! fail before one succeeds), so a test can read back what each instance was told to do
//! from the store alone, and a restarted process needs no memory of the first.

pub mod counterpart;
pub mod engine;
pub mod fault_sim;
pub mod stores;

use std::sync::Arc;

use qflow_core::Snapshot;
use qflow_runtime::{AsyncHandlers, Clock, Runtime, RuntimeConfig, SystemClock};
use qflow_runtime::{TaskContext, TaskOutcome};
use qflow_store::{InstanceId, InstanceStatus, Store};

/// A start, a plain task, a task with a retry policy (no jitter, so timings are exact),
/// an end. `initial_ms` sets the first backoff.
pub fn flaky_model(process_id: &str, flaky_id: &str, initial_ms: u64) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1"
             id="defs" targetNamespace="urn:qflow:tests">
  <process id="{process_id}" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="prep" q:task="prep"/>
    <serviceTask id="{flaky_id}" q:task="flaky">
      <extensionElements>
        <q:retry maxAttempts="5" initialInterval="PT{secs}S" backoffMultiplier="2"
                 maxInterval="PT10S" jitter="none"/>
      </extensionElements>
    </serviceTask>
    <endEvent id="end"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="prep"/>
    <sequenceFlow id="f2" sourceRef="prep" targetRef="{flaky_id}"/>
    <sequenceFlow id="f3" sourceRef="{flaky_id}" targetRef="end"/>
  </process>
</definitions>"#,
        secs = format_secs(initial_ms)
    )
}

/// One registered task (`prep`) between a start and an end: the smallest durable process
/// with a handler, process id `one`.
pub fn one_task_model() -> String {
    r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1"
             id="defs" targetNamespace="urn:qflow:tests">
  <process id="one" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="work" q:task="prep"/>
    <endEvent id="end"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="work"/>
    <sequenceFlow id="f2" sourceRef="work" targetRef="end"/>
  </process>
</definitions>"#
        .to_owned()
}

/// Channel calls to `payments` in sequence, one per id in `calls`, between a start and
/// an end (process `process_id`). Each waits `timeout` (an ISO-8601 duration) per
/// attempt; with `retry = Some((max_attempts, initial_interval))` a timed-out attempt is
/// retried on a constant curve without jitter, so a test can say when.
pub fn channel_model(
    process_id: &str,
    calls: &[&str],
    timeout: &str,
    retry: Option<(u32, &str)>,
) -> String {
    let policy = retry.map_or_else(String::new, |(max, initial)| {
        format!(
            r#"<q:retry maxAttempts="{max}" initialInterval="{initial}" backoffMultiplier="1" jitter="none"/>"#
        )
    });
    let mut nodes = String::new();
    let mut flows = String::new();
    let mut from = "start".to_owned();
    for (i, call) in calls.iter().enumerate() {
        nodes.push_str(&format!(
            r#"
    <serviceTask id="{call}" q:channel="payments">
      <extensionElements>
        {policy}
        <q:timeout duration="{timeout}"/>
      </extensionElements>
    </serviceTask>"#
        ));
        flows.push_str(&format!(
            r#"
    <sequenceFlow id="f{i}" sourceRef="{from}" targetRef="{call}"/>"#
        ));
        from = (*call).to_owned();
    }
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1"
             id="defs" targetNamespace="urn:qflow:tests">
  <process id="{process_id}" isExecutable="true">
    <startEvent id="start"/>{nodes}
    <endEvent id="end"/>{flows}
    <sequenceFlow id="f_end" sourceRef="{from}" targetRef="end"/>
  </process>
</definitions>"#
    )
}

fn format_secs(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// `flaky` fails while the attempt is at most the instance's `fail` variable.
pub fn handlers() -> AsyncHandlers {
    AsyncHandlers::new()
        .with_sync("prep", |_: &TaskContext<'_>| {
            TaskOutcome::Ok(Default::default())
        })
        .with_sync("flaky", |ctx: &TaskContext<'_>| {
            let fail = ctx.inputs.get("fail").and_then(|v| v.as_u64()).unwrap_or(0);
            if u64::from(ctx.attempt.get()) <= fail {
                TaskOutcome::Fail {
                    code: "HANDLER_FAILED".into(),
                    message: format!("scripted failure {} of {fail}", ctx.attempt),
                }
            } else {
                TaskOutcome::Ok(Default::default())
            }
        })
}

/// Runtime settings for recovery tests: short leases so a dead replica's work is picked
/// up within a second.
pub fn fast_recovery_config(lanes: usize) -> RuntimeConfig {
    RuntimeConfig {
        lanes,
        handler_time_limit_ms: 200,
        inflight_lease_ms: 600,
        timer_lease_ms: 600,
        poll_interval_ms: 20,
        ..RuntimeConfig::default()
    }
}

pub fn start_runtime(store: Arc<dyn Store>, config: RuntimeConfig) -> Runtime {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    Runtime::start(store, handlers(), clock, config)
}

/// What one instance's durable record says.
#[derive(Debug)]
pub struct Verdict {
    pub id: InstanceId,
    pub status: InstanceStatus,
    pub fail: u64,
    /// `(node, attempt, outcome)` in commit order.
    pub history: Vec<(String, u32, String)>,
}

pub async fn verdict(store: &dyn Store, id: InstanceId) -> anyhow::Result<Verdict> {
    let rec = store
        .instance(id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("instance {id} is lost"))?;
    let snap = Snapshot::decode(&rec.snapshot)?;
    let fail = snap
        .variables()
        .get("fail")
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    let history = store
        .attempts(id)
        .await?
        .into_iter()
        .map(|a| (a.node, a.attempt.get(), a.outcome.as_str().to_owned()))
        .collect();
    Ok(Verdict {
        id,
        status: rec.status,
        fail,
        history,
    })
}

impl Verdict {
    /// The history an instance must have: `prep` once, then `fail` failed attempts of
    /// the flaky node and one successful one, each attempt number exactly once.
    pub fn expected_history(&self, flaky_id: &str) -> Vec<(String, u32, String)> {
        let mut h = vec![("prep".to_owned(), 1, "ok".to_owned())];
        for a in 1..=self.fail as u32 {
            h.push((flaky_id.to_owned(), a, "failed".to_owned()));
        }
        h.push((flaky_id.to_owned(), self.fail as u32 + 1, "ok".to_owned()));
        h
    }

    /// Panics with the instance's whole story unless it completed exactly as scripted.
    pub fn assert_as_scripted(&self, flaky_id: &str) {
        assert_eq!(
            self.status,
            InstanceStatus::Completed,
            "instance {} did not complete: {:?}",
            self.id,
            self
        );
        assert_eq!(
            self.history,
            self.expected_history(flaky_id),
            "instance {} has the wrong attempt history",
            self.id
        );
    }
}

/// The webhook channel `name` to the loopback counterpart at `url`, built from the
/// settings a `[channels.<name>]` table gives `qflow serve` (`ChannelSettings::build`), its
/// signing secret the counterpart's [`counterpart::TEST_SECRET`] from a simulated
/// environment: `response_timeout_ms` and a delivery curve of `initial_ms` doubling to
/// `max_ms`, without a ceiling.
pub fn test_webhook(
    name: &str,
    url: &str,
    response_timeout_ms: u64,
    initial_ms: u64,
    max_ms: u64,
) -> qflow_channels::Channels {
    let settings = qflow_channels::ChannelSettings {
        adapter: "webhook".to_owned(),
        url: Some(url.to_owned()),
        connect_timeout_ms: 2_000,
        response_timeout_ms,
        secret_env: Some("QFLOW_TEST_WEBHOOK_SECRET".to_owned()),
        secret_file: None,
        ca_file: None,
        delivery: qflow_channels::DeliveryCurve {
            initial_ms,
            multiplier_milli: 2_000,
            max_ms,
            ceiling: None,
        },
    };
    let env = |var: &str| {
        (var == "QFLOW_TEST_WEBHOOK_SECRET").then(|| counterpart::TEST_SECRET.to_owned())
    };
    let now_s = Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64)
    });
    let mut channels = qflow_channels::Channels::new();
    channels.add(
        settings
            .build(name, &env, now_s)
            .expect("the channel builds"),
    );
    channels
}
