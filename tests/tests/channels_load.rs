//! The counterpart simulator under load (issue 9, SPEC C1–C9): 1,400 instances of a
//! channel call with `q:retry maxAttempts=3` (1 s per attempt, 1 s between attempts),
//! delivered by the real outbox dispatcher through the real webhook adapter — signed,
//! over loopback HTTP — to a counterpart that, by a deterministic function of each
//! instance's variables, answers at once, answers late (through the engine's HTTP relay
//! endpoint, after the attempt's timeout, in the backoff window or while the retry is in
//! flight), fails the delivery n times first, fails every delivery of attempt 1 (so its
//! request is still pending when the attempt times out), never answers attempt 1, or
//! never answers at all.
//!
//! In-process rather than against `qflow serve`: the checks need the store — every
//! instance's outbox rows and attempt history — at the end of the run and, for the
//! answers that arrive in a backoff window, during it; a second process on the SQLite
//! file would read it behind the server's back. Everything else is what `qflow serve`
//! runs: the channel is built from the `[channels.<name>]` settings, the dispatcher and
//! the runtime are the production ones, and late answers go through `POST
//! /v1/channel-answers` of the real router on a loopback socket.
//!
//! Checked, every delivery counted by key:
//! - 0 double submits: once attempt n+1 of a call was delivered, attempt n never is
//!   again; every delivery of one key is the same request; a key is delivered again only
//!   after a failed try;
//! - every late answer is `superseded` and resumes nothing;
//! - no outbox row is lost: every row left is delivered, every key the counterpart took
//!   has its row (unless its attempt died first, the withdrawal rule), every row's tries
//!   are the counterpart's deliveries;
//! - every instance ends as its script predicts: completed with the answer of the first
//!   attempt the script answers, or FAILED with `TIMEOUT` after three timed-out attempts.
//!
//! No timing assertions. Where the run may legitimately decide — a synchronous answer
//! that took longer than its attempt's 1 s timeout is superseded and the retry answered
//! instead — the oracle accepts the later attempt and counts it as a deviation from the
//! script's main path; the run prints how many there were. Only exhausting all three
//! attempts of a call the script answers would need three answers each slower than 1 s.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use qflow_channels::{Channels, Dispatcher, DispatcherConfig};
use qflow_core::{Snapshot, Variables};
use qflow_ops::Ops;
use qflow_persistence::SqliteStore;
use qflow_runtime::{AsyncHandlers, Runtime, RuntimeConfig, SystemClock};
use qflow_server::{hash_token, Limits, Scope, Token, Tokens};
use qflow_store::{AttemptOutcome, InstanceId, InstanceStatus, OutboxState, Store};
use qflow_tests::channel_model;
use qflow_tests::counterpart::{Counterpart, Delivery, Engine, Relayed, Reply, TEST_SECRET};
use serde_json::{json, Value};
use tokio::sync::watch;

const SCRIPTS: usize = 7;
const INSTANCES: usize = SCRIPTS * 200;
/// Most instances running at once: the starts wait below it, so the load is steady
/// rather than one burst that the first timeouts would all land in.
const LIVE_MAX: u64 = 300;
const MAX_ATTEMPTS: u32 = 3;
/// A bound on hangs, never a timing assertion.
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// What the counterpart does with an instance's call, from the instance's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Script {
    /// Every attempt is answered at once (`200`).
    Now,
    /// Attempt 1 is accepted (`202`) and answered through the relay only when attempt 2
    /// arrives, before attempt 2 is answered at once: the late answer meets a live retry.
    Late,
    /// Attempt 1 is accepted; its answer is relayed once the call sits in its backoff
    /// window (the `r:` park is in the store). Attempt 2 is answered once that relay was
    /// judged.
    LateInWindow,
    /// The first n deliveries of the call fail with `500`; then every delivery is answered.
    Flaky(u32),
    /// Every delivery of attempt 1 fails with `500`, so its row is still pending when the
    /// attempt times out and must be withdrawn with it (C6); attempt 2 on are answered.
    DownFirst,
    /// Attempt 1 is accepted and never answered; attempt 2 on are answered at once.
    NeverFirst,
    /// Every attempt is accepted and never answered: FAILED with `TIMEOUT`.
    Never,
}

impl Script {
    fn of(i: usize) -> Script {
        match i % SCRIPTS {
            0 => Script::Now,
            1 => Script::Late,
            2 => Script::LateInWindow,
            3 => Script::Flaky(1 + (i / SCRIPTS % 3) as u32),
            4 => Script::DownFirst,
            5 => Script::NeverFirst,
            _ => Script::Never,
        }
    }

    fn variables(self) -> Variables {
        let (name, fails) = match self {
            Script::Now => ("now", 0),
            Script::Late => ("late", 0),
            Script::LateInWindow => ("late_in_window", 0),
            Script::Flaky(n) => ("flaky", n),
            Script::DownFirst => ("down_first", 0),
            Script::NeverFirst => ("never_first", 0),
            Script::Never => ("never", 0),
        };
        [
            ("script".to_owned(), json!(name)),
            ("fails".to_owned(), json!(fails)),
        ]
        .into_iter()
        .collect()
    }

    /// The script a request's variables name.
    fn of_request(d: &Delivery) -> Script {
        let fails = d.variable("fails").and_then(Value::as_u64).unwrap_or(0) as u32;
        match d.variable("script").and_then(Value::as_str) {
            Some("now") => Script::Now,
            Some("late") => Script::Late,
            Some("late_in_window") => Script::LateInWindow,
            Some("flaky") => Script::Flaky(fails),
            Some("down_first") => Script::DownFirst,
            Some("never_first") => Script::NeverFirst,
            _ => Script::Never,
        }
    }

    /// The first attempt the counterpart answers (synchronously); `None`: none is.
    fn first_answered(self) -> Option<u32> {
        match self {
            Script::Now | Script::Flaky(_) => Some(1),
            Script::Late | Script::LateInWindow | Script::DownFirst | Script::NeverFirst => Some(2),
            Script::Never => None,
        }
    }

    fn answers_late(self) -> bool {
        matches!(self, Script::Late | Script::LateInWindow)
    }
}

/// The counterpart's side of the simulation: its late relays and what they came to.
struct Sim {
    store: Arc<dyn Store>,
    /// The late relay of each call (by call id), once made.
    late: Mutex<BTreeMap<String, Result<Relayed, String>>>,
    /// Calls whose late answer is awaited by their next attempt (`LateInWindow`).
    window: Mutex<BTreeMap<String, watch::Receiver<bool>>>,
}

fn answer(attempt: u32) -> Reply {
    Reply::Answer(json!({ "answered": attempt }))
}

/// The late answer to attempt 1: were it taken, `late` would show in the variables.
fn late_answer() -> Value {
    json!({ "answered": 1, "late": true })
}

/// How long the counterpart waits for a condition before it goes on anyway (a bound,
/// so a broken engine fails the checks instead of hanging the run).
const WAIT_LIMIT: Duration = Duration::from_secs(30);

impl Sim {
    async fn reply(self: Arc<Self>, d: Delivery, cp: Counterpart) -> Reply {
        let attempt = d.attempt();
        match Script::of_request(&d) {
            Script::Now => answer(attempt),
            Script::Flaky(n) if d.nth_of_call <= n => Reply::Fail(500),
            Script::Flaky(_) => answer(attempt),
            Script::DownFirst if attempt == 1 => Reply::Fail(500),
            Script::DownFirst => answer(attempt),
            Script::NeverFirst if attempt == 1 => Reply::Accepted,
            Script::NeverFirst => answer(attempt),
            Script::Never => Reply::Accepted,
            Script::Late if attempt == 1 => Reply::Accepted,
            Script::Late => {
                let first = !self.late.lock().unwrap().contains_key(&d.call_id);
                if first {
                    let r = cp.relay(&format!("{}/1", d.call_id), late_answer()).await;
                    self.late.lock().unwrap().insert(d.call_id.clone(), r);
                }
                answer(attempt)
            }
            Script::LateInWindow if attempt == 1 => {
                if d.nth_of_key == 1 {
                    let (done, rx) = watch::channel(false);
                    self.window.lock().unwrap().insert(d.call_id.clone(), rx);
                    tokio::spawn(self.clone().relay_in_window(d, cp, done));
                }
                Reply::Accepted
            }
            Script::LateInWindow => {
                let waiting = self.window.lock().unwrap().get(&d.call_id).cloned();
                if let Some(mut rx) = waiting {
                    let _ = tokio::time::timeout(WAIT_LIMIT, rx.wait_for(|done| *done)).await;
                }
                answer(attempt)
            }
        }
    }

    /// Waits until the call of `d` sits in its backoff window — its `r:` park is in the
    /// store — or a later attempt has already been delivered, then relays attempt 1's
    /// answer.
    async fn relay_in_window(
        self: Arc<Self>,
        d: Delivery,
        cp: Counterpart,
        done: watch::Sender<bool>,
    ) {
        let id: InstanceId = d.instance().parse().expect("an instance id");
        let park = format!("r:{}", d.request.node);
        let began = Instant::now();
        while began.elapsed() < WAIT_LIMIT {
            let parked = self
                .store
                .timers(id)
                .await
                .map(|ts| ts.iter().any(|t| t.name.as_str() == park))
                .unwrap_or(false);
            if parked || cp.newest_attempt(&d.call_id).unwrap_or(1) > 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let r = cp.relay(&d.key, late_answer()).await;
        self.late.lock().unwrap().insert(d.call_id.clone(), r);
        let _ = done.send(true);
    }
}

/// The channel `payments`, from the settings a `[channels.payments]` table gives: a
/// signing secret from the (simulated) environment and a delivery curve of 20 ms
/// doubling to 200 ms, without a ceiling.
fn payments(url: &str) -> Channels {
    qflow_tests::test_webhook("payments", url, 10_000, 20, 200)
}

/// The engine's HTTP API on a loopback socket, with one token of the `worker` scope.
async fn serve_api(runtime: Arc<Runtime>) -> (Engine, tokio::task::JoinHandle<()>) {
    let token = "qf_load-test-counterpart-token".to_owned();
    let mut sha256 = [0u8; 32];
    hex::decode_to_slice(hash_token(&token), &mut sha256).expect("a SHA-256 in hex");
    let tokens = Tokens::new(vec![Token {
        name: "counterpart".to_owned(),
        sha256,
        scopes: [Scope::Worker].into_iter().collect(),
    }]);
    let ops = Ops::with_runtime(runtime, "load");
    let app = qflow_server::router(ops, tokens, None, &Limits::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds the API");
    let addr = listener
        .local_addr()
        .expect("the API's address")
        .to_string();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (Engine { addr, token }, task)
}

/// What the run came to, beyond pass or fail.
#[derive(Debug, Default)]
struct Tally {
    by_script: BTreeMap<String, usize>,
    deliveries: usize,
    keys: usize,
    redeliveries: usize,
    superseded_in_flight: usize,
    superseded_in_window: usize,
    deviations: BTreeMap<String, usize>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counterpart_that_answers_late_fails_or_never_answers_under_load() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.path().join("load.sqlite"))
            .await
            .expect("opens the store"),
    );
    let sim = Arc::new(Sim {
        store: store.clone(),
        late: Mutex::new(BTreeMap::new()),
        window: Mutex::new(BTreeMap::new()),
    });
    let script_sim = sim.clone();
    let cp = Counterpart::start(
        TEST_SECRET,
        Arc::new(move |d, cp| script_sim.clone().reply(d, cp).boxed()),
    )
    .await;
    let channels = payments(&cp.url());
    let config = RuntimeConfig {
        lanes: 2,
        channels: channels.names(),
        retention: None,
        ..RuntimeConfig::default()
    };
    let runtime = Arc::new(Runtime::start(
        store.clone(),
        AsyncHandlers::new(),
        Arc::new(SystemClock),
        config,
    ));
    let dispatcher = Dispatcher::start(
        runtime.clone(),
        Arc::new(channels),
        DispatcherConfig::default(),
    );
    let (engine, api) = serve_api(runtime.clone()).await;
    cp.set_engine(Some(engine));
    let model = channel_model("load", &["charge"], "PT1S", Some((MAX_ATTEMPTS, "PT1S")));
    let dep = runtime.deploy(&model, None).await.expect("deploys");

    let began = Instant::now();
    let stats = runtime.stats();
    let ended = || stats.completed.load(Ordering::Relaxed) + stats.failed.load(Ordering::Relaxed);
    let mut instances = Vec::with_capacity(INSTANCES);
    for i in 0..INSTANCES {
        while instances.len() as u64 - ended() >= LIVE_MAX {
            assert!(began.elapsed() < RUN_LIMIT, "the run hung at {i} starts");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let script = Script::of(i);
        let id = runtime
            .start_instance(dep.id, script.variables())
            .await
            .expect("starts");
        instances.push((id, script));
    }
    while ended() < INSTANCES as u64 {
        assert!(
            began.elapsed() < RUN_LIMIT,
            "{} of {INSTANCES} instances ended",
            ended()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Deliveries in flight finish and are recorded before the rows are read.
    dispatcher.shutdown().await;
    api.abort();
    let run_time = began.elapsed();

    let violations = cp.violations();
    assert!(
        violations.is_empty(),
        "{} breaches of the delivery contract, first: {:#?}",
        violations.len(),
        &violations[..violations.len().min(20)]
    );
    let mut by_instance: BTreeMap<String, Vec<Delivery>> = BTreeMap::new();
    for d in cp.deliveries() {
        by_instance
            .entry(d.instance().to_owned())
            .or_default()
            .push(d);
    }
    let known: BTreeSet<String> = instances.iter().map(|(id, _)| id.to_string()).collect();
    let strangers: Vec<&String> = by_instance.keys().filter(|k| !known.contains(*k)).collect();
    assert!(
        strangers.is_empty(),
        "deliveries for no instance: {strangers:?}"
    );

    let mut tally = Tally::default();
    let mut failures = Vec::new();
    for (id, script) in &instances {
        *tally.by_script.entry(format!("{script:?}")).or_default() += 1;
        let deliveries = by_instance.remove(&id.to_string()).unwrap_or_default();
        if let Err(why) = check(&*store, &cp, &sim, *id, *script, &deliveries, &mut tally).await {
            failures.push(format!("{id} ({script:?}): {why}"));
        }
    }
    eprintln!("{INSTANCES} instances in {run_time:?}: {tally:#?}");
    assert!(
        failures.is_empty(),
        "{} instances did not end as scripted, first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(20)]
    );
    let late = INSTANCES / SCRIPTS * 2;
    assert_eq!(
        tally.superseded_in_flight + tally.superseded_in_window,
        late,
        "every late answer was judged superseded"
    );
}

/// Checks one instance against its script; a deviation from the script's main path that
/// the engine may legitimately take is tallied, anything else is an error.
async fn check(
    store: &dyn Store,
    cp: &Counterpart,
    sim: &Sim,
    id: InstanceId,
    script: Script,
    deliveries: &[Delivery],
    tally: &mut Tally,
) -> Result<(), String> {
    let rec = store
        .instance(id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the instance is lost")?;
    let history: Vec<(u32, AttemptOutcome, Option<String>)> = store
        .attempts(id)
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|a| (a.attempt.get(), a.outcome, a.code))
        .collect();
    let rows = store.outbox(id).await.map_err(|e| e.to_string())?;
    let story = || {
        format!(
            "history {history:?}, deliveries {:?}",
            summary(cp, deliveries)
        )
    };

    // The end the script predicts.
    match script.first_answered() {
        Some(_) if rec.status != InstanceStatus::Completed => {
            return Err(format!(
                "{} instead of completed; {}",
                rec.status.as_str(),
                story()
            ));
        }
        None if rec.status != InstanceStatus::Failed
            || rec.failure_code.as_deref() != Some("TIMEOUT") =>
        {
            return Err(format!(
                "{} ({:?}) instead of FAILED with TIMEOUT; {}",
                rec.status.as_str(),
                rec.failure_code,
                story()
            ));
        }
        _ => {}
    }
    // Attempts 1..=m in order, every one but an answered last one timed out.
    let m = history.len() as u32;
    let dense = history.iter().zip(1..).all(|((a, _, _), n)| *a == n);
    let timed_out = |(_, o, c): &(u32, AttemptOutcome, Option<String>)| {
        *o == AttemptOutcome::TimedOut && c.as_deref() == Some("TIMEOUT")
    };
    let (last, before) = history.split_last().ok_or("no attempt at all")?;
    if !dense || !before.iter().all(timed_out) || m > MAX_ATTEMPTS {
        return Err(format!("not a history the engine may write; {}", story()));
    }
    match script.first_answered() {
        Some(first) => {
            if last.1 != AttemptOutcome::Ok || m < first {
                return Err(format!(
                    "attempt {m} ended so, the script answers from {first}; {}",
                    story()
                ));
            }
            if m > first {
                deviate(
                    tally,
                    "an answer came after its attempt's timeout; a retry was answered",
                );
            }
            let snap = Snapshot::decode(&rec.snapshot).map_err(|e| e.to_string())?;
            let vars = snap.variables();
            if vars.get("answered") != Some(&json!(m)) || vars.contains_key("late") {
                return Err(format!(
                    "the variables are not attempt {m}'s answer: {vars:?}"
                ));
            }
        }
        None => {
            if !timed_out(last) || m != MAX_ATTEMPTS {
                return Err(format!("not three timeouts; {}", story()));
            }
        }
    }

    // Deliveries: one call; only attempts of the history; again only after a failure.
    let call_ids: BTreeSet<&str> = deliveries
        .iter()
        .map(|d| d.call_id.as_str())
        .chain(rows.iter().map(|r| r.call_id.as_str()))
        .collect();
    let [call_id] = call_ids.into_iter().collect::<Vec<_>>()[..] else {
        return Err(format!("not one call; {}", story()));
    };
    let mut newest = 0;
    let mut by_key: BTreeMap<&str, Vec<&Delivery>> = BTreeMap::new();
    for d in deliveries {
        if d.attempt() < newest {
            return Err(format!(
                "double submit: attempt {} after {newest}; {}",
                d.attempt(),
                story()
            ));
        }
        newest = d.attempt();
        if d.attempt() > m {
            return Err(format!(
                "attempt {} delivered, never started; {}",
                d.attempt(),
                story()
            ));
        }
        by_key.entry(d.key.as_str()).or_default().push(d);
    }
    tally.deliveries += deliveries.len();
    tally.keys += by_key.len();
    for (key, ds) in &by_key {
        tally.redeliveries += ds.len() - 1;
        let replies: Vec<Option<u16>> = ds.iter().map(|d| cp.reply_of(d.seq)).collect();
        if replies[..replies.len() - 1].iter().any(|r| *r != Some(500)) {
            return Err(format!(
                "`{key}` delivered again after a try that did not fail: {replies:?}"
            ));
        }
    }
    for a in 1..=m {
        if !by_key.contains_key(format!("{call_id}/{a}").as_str()) {
            if a == m && last.1 == AttemptOutcome::Ok {
                return Err(format!(
                    "the answered attempt {a} was never delivered; {}",
                    story()
                ));
            }
            deviate(
                tally,
                "an attempt timed out before its request was delivered",
            );
        }
    }
    // The main path's deliveries, exactly.
    if m == script.first_answered().unwrap_or(MAX_ATTEMPTS) {
        let mut want: Vec<(u32, Vec<u16>)> = match script {
            Script::Now => vec![(1, vec![200])],
            Script::Flaky(n) => {
                let mut r = vec![500; n as usize];
                r.push(200);
                vec![(1, r)]
            }
            Script::Late | Script::LateInWindow | Script::NeverFirst => {
                vec![(1, vec![202]), (2, vec![200])]
            }
            // Attempt 1 is tried along the curve until it dies, however many times that is.
            Script::DownFirst => vec![(2, vec![200])],
            Script::Never => vec![(1, vec![202]), (2, vec![202]), (3, vec![202])],
        };
        let mut got: Vec<(u32, Vec<u16>)> = by_key
            .values()
            .map(|ds| {
                let replies = ds.iter().map(|d| cp.reply_of(d.seq).unwrap_or(0)).collect();
                (ds[0].attempt(), replies)
            })
            .collect();
        if script == Script::DownFirst {
            let first = got.first().filter(|(a, _)| *a == 1).map(|(_, r)| r.clone());
            match first {
                Some(r) if r.iter().all(|s| *s == 500) => {
                    got.remove(0);
                }
                // Never delivered before it died: tallied above.
                None => {}
                Some(_) => want.insert(0, (1, vec![500])),
            }
            let withdrawn = format!("{call_id}/1");
            if rows.iter().any(|r| r.key == withdrawn) {
                return Err(format!(
                    "the dead attempt's pending row was not withdrawn: {rows:?}"
                ));
            }
        }
        if got != want {
            return Err(format!(
                "deliveries {got:?}, the script's main path {want:?}"
            ));
        }
    }

    // The late answer: judged superseded, whichever row of the table it met.
    let late = sim.late.lock().unwrap().get(call_id).cloned();
    match (script.answers_late(), late) {
        (false, None) => {}
        (false, Some(_)) => return Err("a late answer for a script without one".to_owned()),
        (true, None)
            if script == Script::LateInWindow
                && !by_key.contains_key(format!("{call_id}/1").as_str()) => {}
        (true, None) => return Err(format!("the late answer was never relayed; {}", story())),
        (true, Some(Err(e))) => return Err(format!("the late relay failed: {e}")),
        (true, Some(Ok(r))) => {
            if r.status != 409 || r.verdict() != "superseded" {
                return Err(format!("the late answer got {} {}", r.status, r.body));
            }
            let reason = r.body["reason"].as_str().unwrap_or("");
            if reason.contains("pending after a backoff") {
                tally.superseded_in_window += 1;
            } else {
                tally.superseded_in_flight += 1;
            }
        }
    }

    // The outbox: nothing undelivered is left; what the counterpart took has its row.
    let mut row_keys = BTreeSet::new();
    for row in &rows {
        let seen = by_key.get(row.key.as_str()).map_or(0, Vec::len);
        if row.state != OutboxState::Delivered || row.deliveries as usize != seen {
            return Err(format!(
                "row `{}` is {:?} after {} tries; the counterpart saw {seen}",
                row.key, row.state, row.deliveries
            ));
        }
        row_keys.insert(row.key.as_str());
    }
    for (key, ds) in &by_key {
        let took = ds
            .iter()
            .any(|d| matches!(cp.reply_of(d.seq), Some(200 | 202)));
        if took && !row_keys.contains(key) {
            let attempt = ds[0].attempt();
            let died = attempt < m || last.1 != AttemptOutcome::Ok;
            if !died {
                return Err(format!("the row of `{key}` is lost; {}", story()));
            }
            deviate(
                tally,
                "a delivery was recorded after its attempt died and was withdrawn",
            );
        }
    }
    Ok(())
}

fn deviate(tally: &mut Tally, what: &str) {
    *tally.deviations.entry(what.to_owned()).or_default() += 1;
}

/// A delivery list for error messages: (attempt, reply) in arrival order.
fn summary(cp: &Counterpart, deliveries: &[Delivery]) -> Vec<(u32, Option<u16>)> {
    deliveries
        .iter()
        .map(|d| (d.attempt(), cp.reply_of(d.seq)))
        .collect()
}
