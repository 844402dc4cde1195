//! The outbox dispatcher with the in-process adapter, on SQLite and a manual clock: one
//! test per race the retry design names (SPEC C2–C7a), through the runtime, the store and
//! the relay. Time moves only when a test moves it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use qflow_channels::{
    relay, Answer, Channels, DeliveryCurve, DeliveryError, Dispatcher, DispatcherConfig, Reply,
    Request,
};
use qflow_core::Verdict;
use qflow_persistence::SqliteStore;
use qflow_runtime::{AsyncHandlers, ManualClock, Runtime};
use qflow_store::{
    AttemptOutcome, DeliveryRecord, InstanceId, InstanceStatus, OutboxState, Store, TimerClaim,
};

mod support;

const T0: i64 = 1_700_000_000_000;

/// A channel call with three attempts 5 s apart and a 30 s timeout per attempt.
const CHARGE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="checkout" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="charge" q:channel="payments">
      <extensionElements>
        <q:retry maxAttempts="3" initialInterval="PT5S" jitter="none"/>
        <q:timeout duration="PT30S"/>
      </extensionElements>
    </serviceTask>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="charge"/>
    <sequenceFlow id="f1" sourceRef="charge" targetRef="end"/>
  </process>
</definitions>"#;

/// What the counterpart does with a request, by attempt.
type Script = Arc<dyn Fn(&Request, u32) -> Result<Reply, DeliveryError> + Send + Sync>;

/// The counterpart's log: every delivery it saw, by idempotency key, in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Request>>>);

impl Seen {
    fn keys(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.idempotency_key.clone())
            .collect()
    }

    fn count(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for k in self.keys() {
            *out.entry(k).or_default() += 1;
        }
        out
    }
}

struct World {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    clock: Arc<ManualClock>,
    runtime: Arc<Runtime>,
    dispatcher: Option<Dispatcher>,
    seen: Seen,
}

fn answer(receipt: &str) -> Reply {
    let vars = serde_json::json!({ "receipt": receipt });
    Reply::Answer(Answer::variables(
        vars.as_object().unwrap().clone().into_iter().collect(),
    ))
}

async fn world(curve: DeliveryCurve, script: Script, dispatch: bool) -> World {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("q.db")).await.unwrap());
    let clock = Arc::new(ManualClock::new(T0));
    let seen = Seen::default();
    let mut channels = Channels::new();
    let log = seen.clone();
    channels.in_process("payments", curve, move |r: Request| {
        let tries = {
            let mut log = log.0.lock().unwrap();
            log.push(r.clone());
            log.iter()
                .filter(|x| x.idempotency_key == r.idempotency_key)
                .count() as u32
        };
        let reply = script(&r, tries);
        async move { reply }.boxed()
    });
    let runtime = support::runtime(&store, &clock, &channels, AsyncHandlers::new(), |_| {});
    let dispatcher = dispatch.then(|| support::dispatcher(&runtime, channels));
    World {
        _dir: dir,
        store,
        clock,
        runtime,
        dispatcher,
        seen,
    }
}

impl World {
    async fn start(&self) -> InstanceId {
        let dep = self.runtime.deploy(CHARGE, None).await.expect("deploys");
        self.runtime
            .start_instance(dep.id, Default::default())
            .await
            .expect("starts")
    }

    /// Waits (in real time, bounded) until `done` holds of the store.
    async fn until<F, Fut>(&self, what: &str, done: F)
    where
        F: Fn(Arc<dyn Store>) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let wait = async {
            while !done(self.store.clone()).await {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(60), wait)
            .await
            .unwrap_or_else(|_| panic!("never happened: {what}"));
    }

    async fn status(&self, id: InstanceId) -> InstanceStatus {
        self.store.instance(id).await.unwrap().unwrap().status
    }

    async fn until_status(&self, id: InstanceId, status: InstanceStatus) {
        self.until(&format!("{id} is {}", status.as_str()), |s| async move {
            s.instance(id).await.unwrap().unwrap().status == status
        })
        .await;
    }

    async fn until_seen(&self, n: usize) {
        let seen = self.seen.clone();
        self.until(&format!("{n} deliveries"), move |_| {
            let seen = seen.clone();
            async move { seen.keys().len() >= n }
        })
        .await;
    }

    /// Waits until the instance has a timer row of this name (`r:charge`: a backoff park).
    async fn until_timer(&self, id: InstanceId, name: &str) {
        let name = name.to_owned();
        self.until(&format!("timer {name}"), |s| {
            let name = name.clone();
            async move {
                s.timers(id)
                    .await
                    .unwrap()
                    .iter()
                    .any(|t| t.name.as_str() == name)
            }
        })
        .await;
    }

    /// Waits until the instance has a timer of this name, then moves the clock onto it.
    async fn fire(&self, id: InstanceId, name: &str) {
        self.until_timer(id, name).await;
        let due = self
            .store
            .timers(id)
            .await
            .unwrap()
            .into_iter()
            .find(|t| t.name.as_str() == name)
            .unwrap()
            .due_at_ms;
        self.clock.set_ms(due.max(self.clock_now()));
    }

    fn clock_now(&self) -> i64 {
        use qflow_runtime::Clock;
        self.clock.now_ms()
    }

    async fn shutdown(mut self) {
        if let Some(d) = self.dispatcher.take() {
            d.shutdown().await;
        }
    }
}

fn script(
    f: impl Fn(&Request, u32) -> Result<Reply, DeliveryError> + Send + Sync + 'static,
) -> Script {
    Arc::new(f)
}

#[tokio::test]
async fn a_synchronous_answer_completes_the_call_and_marks_the_row_delivered() {
    let w = world(
        DeliveryCurve::default(),
        script(|_, _| Ok(answer("r-1"))),
        true,
    )
    .await;
    let id = w.start().await;
    w.until_status(id, InstanceStatus::Completed).await;
    // The answer is relayed before the try is recorded (a crash in between delivers the
    // row again, and the repeated answer is judged already completed).
    w.until("the row delivered", |s| async move {
        s.outbox(id).await.unwrap()[0].state == OutboxState::Delivered
    })
    .await;
    let seen = w.seen.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].idempotency_key, format!("{id}/1/1"));
    assert_eq!(seen[0].call_id, format!("{id}/1"));
    assert_eq!((seen[0].node.as_str(), seen[0].attempt), ("charge", 1));
    let rows = w.store.outbox(id).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state, OutboxState::Delivered);
    assert_eq!(rows[0].deliveries, 1);
    let inst = w.store.instance(id).await.unwrap().unwrap();
    let snap = qflow_core::Snapshot::decode(&inst.snapshot).unwrap();
    assert_eq!(snap.variables().get("receipt"), Some(&"r-1".into()));
    w.shutdown().await;
}

#[tokio::test]
async fn an_accepted_request_is_answered_through_the_relay_with_honest_verdicts() {
    let w = world(
        DeliveryCurve::default(),
        script(|_, _| Ok(Reply::Accepted)),
        true,
    )
    .await;
    let id = w.start().await;
    w.until_seen(1).await;
    w.until("the row delivered", |s| async move {
        s.outbox(id).await.unwrap()[0].state == OutboxState::Delivered
    })
    .await;
    assert_eq!(w.status(id).await, InstanceStatus::Running);
    let key = format!("{id}/1/1");
    let ok = Answer::variables(Default::default());
    let r = relay(&w.runtime, &key, ok.clone()).await.unwrap();
    assert_eq!(r.verdict, Verdict::Resumed, "{}", r.reason);
    assert_eq!(w.status(id).await, InstanceStatus::Completed);
    let again = relay(&w.runtime, &key, ok.clone()).await.unwrap();
    assert_eq!(again.verdict, Verdict::AlreadyCompleted, "{}", again.reason);
    for bogus in [
        "",
        "nonsense",
        "x/1/1",
        &format!("{}/1/1", InstanceId::from_u128(7)),
    ] {
        let r = relay(&w.runtime, bogus, ok.clone()).await.unwrap();
        assert_eq!(r.verdict, Verdict::Unknown, "{bogus}: {}", r.reason);
    }
    w.shutdown().await;
}

#[tokio::test]
async fn a_late_answer_to_a_dead_attempt_is_superseded_and_each_attempt_has_one_live_request() {
    let w = world(
        DeliveryCurve::default(),
        script(|_, _| Ok(Reply::Accepted)),
        true,
    )
    .await;
    let id = w.start().await;
    w.until_seen(1).await;
    // Attempt 1 times out: a backoff window.
    w.fire(id, "t:charge").await;
    w.fire(id, "r:charge").await;
    w.until_seen(2).await;
    let late = relay(
        &w.runtime,
        &format!("{id}/1/1"),
        Answer::variables(Default::default()),
    )
    .await
    .unwrap();
    assert_eq!(late.verdict, Verdict::Superseded, "{}", late.reason);
    assert_eq!(
        w.status(id).await,
        InstanceStatus::Running,
        "the late answer resumed nothing"
    );
    // Attempt 2 times out as well; in its backoff window a late answer is superseded too.
    w.fire(id, "t:charge").await;
    w.until_timer(id, "r:charge").await;
    let late = relay(
        &w.runtime,
        &format!("{id}/1/2"),
        Answer::variables(Default::default()),
    )
    .await
    .unwrap();
    assert_eq!(late.verdict, Verdict::Superseded, "{}", late.reason);
    assert!(late.reason.contains("pending"), "{}", late.reason);
    w.fire(id, "r:charge").await;
    w.until_seen(3).await;
    let live = relay(
        &w.runtime,
        &format!("{id}/1/3"),
        Answer::variables(Default::default()),
    )
    .await
    .unwrap();
    assert_eq!(live.verdict, Verdict::Resumed, "{}", live.reason);
    assert_eq!(w.status(id).await, InstanceStatus::Completed);
    // One delivery per attempt, each under its own key, all of one call.
    let count = w.seen.count();
    assert_eq!(
        count.keys().cloned().collect::<Vec<_>>(),
        [1, 2, 3].map(|a| format!("{id}/1/{a}"))
    );
    assert!(count.values().all(|n| *n == 1), "{count:?}");
    let calls: Vec<String> = w
        .seen
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.call_id.clone())
        .collect();
    assert!(calls.iter().all(|c| *c == format!("{id}/1")));
    w.shutdown().await;
}

#[tokio::test]
async fn failed_deliveries_follow_the_curve_and_a_poison_fails_the_attempt_without_double_submit() {
    let curve = DeliveryCurve {
        initial_ms: 100,
        ceiling: Some(3),
        ..DeliveryCurve::default()
    };
    // Attempt 1's request is refused on every try; attempt 2's is answered.
    let w = world(
        curve,
        script(|r, _| {
            if r.attempt == 1 {
                Err(DeliveryError("503 Service Unavailable".into()))
            } else {
                Ok(answer("r-2"))
            }
        }),
        true,
    )
    .await;
    let id = w.start().await;
    w.until_seen(1).await;
    // The second try 100 ms after the first, the third 200 ms after that: then poisoned.
    w.clock.advance_ms(100);
    w.until_seen(2).await;
    w.clock.advance_ms(200);
    w.until_seen(3).await;
    // The poison opened its incident and the prompt failed attempt 1: a backoff park.
    w.until_timer(id, "r:charge").await;
    let incidents = w.store.incidents(Some(id)).await.unwrap();
    assert!(
        incidents
            .iter()
            .any(|i| i.code == "POISONED" && i.node == "charge"),
        "{incidents:?}"
    );
    // The dead attempt's poisoned row was withdrawn in the commit that parked it.
    assert!(w.store.outbox(id).await.unwrap().is_empty());
    w.fire(id, "r:charge").await;
    w.until_status(id, InstanceStatus::Completed).await;
    let count = w.seen.count();
    assert_eq!(
        count.get(&format!("{id}/1/1")),
        Some(&3),
        "three tries of attempt 1"
    );
    assert_eq!(
        count.get(&format!("{id}/1/2")),
        Some(&1),
        "one of attempt 2"
    );
    let history = w.store.attempts(id).await.unwrap();
    let outcomes: Vec<AttemptOutcome> = history.iter().map(|a| a.outcome).collect();
    assert_eq!(outcomes, [AttemptOutcome::Poisoned, AttemptOutcome::Ok]);
    w.shutdown().await;
}

#[tokio::test]
async fn a_lost_poison_wake_is_recovered_by_the_timeout() {
    // No dispatcher: this test is the dispatcher that poisons a row and dies before it
    // prompts the instance.
    let w = world(
        DeliveryCurve::default(),
        script(|_, _| Ok(Reply::Accepted)),
        false,
    )
    .await;
    let id = w.start().await;
    let claim = TimerClaim {
        now_ms: T0,
        lease_ms: 60_000,
        owner: "doomed",
        limit: 10,
    };
    let rows = w.store.claim_due_outbox(claim).await.unwrap();
    assert_eq!(rows.len(), 1);
    let poisoned = DeliveryRecord::Poisoned {
        error: "connection refused".into(),
    };
    assert!(w
        .store
        .record_delivery(&rows[0].key, "doomed", T0, poisoned)
        .await
        .unwrap());
    // Nobody prompts the instance: it waits until its timeout says the attempt failed.
    assert_eq!(w.status(id).await, InstanceStatus::Running);
    w.fire(id, "t:charge").await;
    w.until_timer(id, "r:charge").await;
    let history = w.store.attempts(id).await.unwrap();
    assert_eq!(history[0].outcome, AttemptOutcome::TimedOut);
    assert!(
        w.store.outbox(id).await.unwrap().is_empty(),
        "the poisoned row was withdrawn"
    );
    w.shutdown().await;
}

#[tokio::test]
async fn a_row_a_dead_dispatcher_held_is_delivered_again_with_the_same_key() {
    // A dispatcher claimed the row (as a replica does) and died mid-delivery; the live
    // one starts only after the dead one holds the row's lease.
    let w = world(
        DeliveryCurve::default(),
        script(|_, _| Ok(answer("r"))),
        false,
    )
    .await;
    let id = w.start().await;
    let claim = TimerClaim {
        now_ms: T0,
        lease_ms: 10_000,
        owner: "crashed",
        limit: 10,
    };
    let held = w.store.claim_due_outbox(claim).await.unwrap();
    assert_eq!(held.len(), 1, "the dead dispatcher holds the row");
    let mut channels = Channels::new();
    let log = w.seen.clone();
    channels.in_process("payments", DeliveryCurve::default(), move |r: Request| {
        log.0.lock().unwrap().push(r);
        async { Ok(answer("r")) }.boxed()
    });
    let d = Dispatcher::start(
        w.runtime.clone(),
        Arc::new(channels),
        DispatcherConfig {
            poll_interval_ms: 1,
            ..DispatcherConfig::default()
        },
    );
    // While the lease holds, nobody else delivers it.
    tokio::task::yield_now().await;
    assert!(w.seen.keys().is_empty());
    w.clock.advance_ms(10_001);
    w.until_status(id, InstanceStatus::Completed).await;
    assert_eq!(
        w.seen.keys(),
        [held[0].key.clone()],
        "the same key, delivered once more"
    );
    d.shutdown().await;
}

#[tokio::test]
async fn a_deployment_naming_an_unconfigured_channel_is_refused_with_its_name_and_position() {
    let w = world(
        DeliveryCurve::default(),
        script(|_, _| Ok(Reply::Accepted)),
        false,
    )
    .await;
    let model = CHARGE.replace("q:channel=\"payments\"", "q:channel=\"refunds\"");
    let e = w
        .runtime
        .deploy(&model, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("`refunds`") || e.contains("\"refunds\""), "{e}");
    assert!(e.contains("`charge` at 5:"), "{e}");
    assert!(
        w.store.deployments().await.unwrap().is_empty(),
        "nothing was stored"
    );
    w.shutdown().await;
}
