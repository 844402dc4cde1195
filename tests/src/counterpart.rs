//! A webhook counterpart on loopback, for the channel-call tests (SPEC C1–C9): an HTTP
//! server that receives the engine's requests, checks every one of them, logs each
//! delivery by its idempotency key, and answers as a test script says — at once, later
//! through the engine's relay endpoint, with a failure status, or not at all.
//!
//! Every request is checked before the script sees it: its Standard Webhooks signature
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature`, with the channel's secret),
//! its `Idempotency-Key` and `Qflow-Call-Id` headers against the JSON body, the key's
//! shape (`<instance>/<call>/<attempt>`, the call id its prefix), and two delivery laws
//! the engine promises: every delivery of one key is the same request, and once attempt
//! n+1 of a call was delivered, attempt n never is again (no double submit of a live
//! attempt). A breach is a [`Counterpart::violations`] entry, which a test asserts empty;
//! the request is then refused with `400`, so a breach also shows in the engine.
//!
//! A **gate** stands in front of the script: while it is closed, a request is neither
//! logged nor shown to the script — it waits, unanswered, until the gate opens, and is
//! then refused with `503`. The crash test closes it before killing the engine, so the
//! requests the engine had committed and sent when it died never reached the
//! counterpart: they sit between commit and delivery.
//!
//! The counterpart never decides anything about an instance: it answers what it is
//! asked, and relays what its script tells it to, like any real counterpart.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use futures::future::BoxFuture;
use qflow_channels::{Request, Secret};
use serde_json::{json, Value};
use tokio::sync::watch;

/// How far a request's `webhook-timestamp` may be from the counterpart's clock (the
/// Standard Webhooks recommendation: five minutes).
pub const TIMESTAMP_TOLERANCE_S: i64 = 300;

/// One delivery the counterpart received, as its log keeps it.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Arrival order over all deliveries, from 0.
    pub seq: u64,
    /// The `Idempotency-Key` header (checked equal to the body's and to `webhook-id`).
    pub key: String,
    /// The `Qflow-Call-Id` header (checked equal to the body's).
    pub call_id: String,
    /// The request body.
    pub request: Request,
    /// How many deliveries of this key the counterpart has received, this one included.
    pub nth_of_key: u32,
    /// How many deliveries of this call (any attempt), this one included.
    pub nth_of_call: u32,
    /// When it arrived, on the counterpart's monotonic clock.
    pub at: std::time::Instant,
}

impl Delivery {
    /// The instance the request is for.
    pub fn instance(&self) -> &str {
        &self.request.instance
    }

    pub fn attempt(&self) -> u32 {
        self.request.attempt
    }

    /// An instance variable the request carries (the task's inputs).
    pub fn variable(&self, name: &str) -> Option<&Value> {
        self.request.variables.get(name)
    }
}

/// What the script answers to one delivery.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `200` with `{"variables": …}`: the answer, synchronously.
    Answer(Value),
    /// `202`: accepted; the answer comes later through the relay endpoint, or never.
    Accepted,
    /// A failure status (`500`, `503`): the engine tries the delivery again along the
    /// channel's curve.
    Fail(u16),
}

impl Reply {
    fn status(&self) -> u16 {
        match self {
            Reply::Answer(_) => 200,
            Reply::Accepted => 202,
            Reply::Fail(s) => *s,
        }
    }
}

/// The test's script: what to answer to a delivery. It may await anything (a relay, a
/// condition of the store, a signal of the test) before it answers.
pub type Script = Arc<dyn Fn(Delivery, Counterpart) -> BoxFuture<'static, Reply> + Send + Sync>;

/// Where the engine's API is, for relays.
#[derive(Debug, Clone)]
pub struct Engine {
    /// `127.0.0.1:port`.
    pub addr: String,
    /// A bearer token with the `worker` scope.
    pub token: String,
}

/// A relay's result: the HTTP status and the JSON body (a verdict or a problem).
#[derive(Debug, Clone)]
pub struct Relayed {
    pub status: u16,
    pub body: Value,
}

impl Relayed {
    /// The verdict the engine gave (`resumed`, `superseded`, …), or the problem's code.
    pub fn verdict(&self) -> &str {
        self.body["verdict"]
            .as_str()
            .or_else(|| self.body["code"].as_str())
            .unwrap_or("")
    }
}

#[derive(Default)]
struct Log {
    deliveries: Vec<Delivery>,
    /// The status each delivery was answered with, by `seq` (absent: not answered yet).
    replies: BTreeMap<u64, u16>,
    by_key: BTreeMap<String, Vec<u64>>,
    /// The highest attempt delivered per call, and its first `seq`.
    newest_attempt: BTreeMap<String, (u32, u64)>,
    calls: BTreeMap<String, u32>,
    violations: Vec<String>,
    gated: u64,
}

struct Shared {
    secret: Secret,
    script: Script,
    log: Mutex<Log>,
    gate: watch::Sender<bool>,
    engine: Mutex<Option<Engine>>,
    http: reqwest::Client,
    addr: SocketAddr,
    server: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(task) = self.server.get_mut().ok().and_then(Option::take) {
            task.abort();
        }
    }
}

/// A running counterpart. Cheap to clone; the server stops when the last clone is gone.
#[derive(Clone)]
pub struct Counterpart(Arc<Shared>);

/// A weak handle, so the server task does not keep its own counterpart alive.
struct Handle(std::sync::Weak<Shared>);

impl Counterpart {
    /// Starts a counterpart on `127.0.0.1:0` that verifies signatures with `secret`
    /// (Standard Webhooks text, `whsec_…`) and answers by `script`. Must be called inside
    /// a tokio runtime.
    pub async fn start(secret: &str, script: Script) -> Counterpart {
        let secret = Secret::parse(secret).expect("a valid test secret");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds the counterpart on loopback");
        let addr = listener.local_addr().expect("the counterpart's address");
        let (gate, _) = watch::channel(true);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("an HTTP client");
        let shared = Arc::new(Shared {
            secret,
            script,
            log: Mutex::new(Log::default()),
            gate,
            engine: Mutex::new(None),
            http,
            addr,
            server: Mutex::new(None),
        });
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(Arc::new(Handle(Arc::downgrade(&shared))));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        *shared.server.lock().unwrap() = Some(task);
        Counterpart(shared)
    }

    /// The URL to configure as the channel's `url`.
    pub fn url(&self) -> String {
        format!("http://{}/hook", self.0.addr)
    }

    /// Where relays go from now on (`None`: the engine is down; relays fail).
    pub fn set_engine(&self, engine: Option<Engine>) {
        *self.0.engine.lock().unwrap() = engine;
    }

    /// Closes the gate: requests arriving from now on are held unlogged (see the module
    /// docs). Requests already logged are not affected.
    pub fn close_gate(&self) {
        self.0.gate.send_replace(false);
    }

    /// Opens the gate: held requests are refused with `503`, unlogged, and new ones are
    /// served again.
    pub fn open_gate(&self) {
        self.0.gate.send_replace(true);
    }

    /// Every delivery received, in arrival order.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.0.log.lock().unwrap().deliveries.clone()
    }

    /// The deliveries of each key, in arrival order.
    pub fn by_key(&self) -> BTreeMap<String, Vec<Delivery>> {
        let log = self.0.log.lock().unwrap();
        log.by_key
            .iter()
            .map(|(k, seqs)| {
                let ds = seqs
                    .iter()
                    .map(|s| log.deliveries[*s as usize].clone())
                    .collect();
                (k.clone(), ds)
            })
            .collect()
    }

    /// How many deliveries have been received.
    pub fn delivered(&self) -> usize {
        self.0.log.lock().unwrap().deliveries.len()
    }

    /// The highest attempt of call `call_id` delivered so far.
    pub fn newest_attempt(&self, call_id: &str) -> Option<u32> {
        let log = self.0.log.lock().unwrap();
        log.newest_attempt.get(call_id).map(|(a, _)| *a)
    }

    /// The status a delivery was answered with (`None`: not answered yet).
    pub fn reply_of(&self, seq: u64) -> Option<u16> {
        self.0.log.lock().unwrap().replies.get(&seq).copied()
    }

    /// Requests held at the closed gate (never logged, never answered).
    pub fn gated(&self) -> u64 {
        self.0.log.lock().unwrap().gated
    }

    /// Every breach of the delivery contract seen so far.
    pub fn violations(&self) -> Vec<String> {
        self.0.log.lock().unwrap().violations.clone()
    }

    /// Relays an answer for `key` through the engine's `POST /v1/channel-answers`. `Err`
    /// when the engine could not be reached (it is down, or none is set).
    pub async fn relay(&self, key: &str, variables: Value) -> Result<Relayed, String> {
        let body = json!({ "idempotency_key": key, "variables": variables });
        self.post_relay(body).await
    }

    /// Posts `body` as it is to the relay endpoint (for malformed-answer tests).
    pub async fn post_relay(&self, body: Value) -> Result<Relayed, String> {
        let engine = self.0.engine.lock().unwrap().clone();
        let Some(engine) = engine else {
            return Err("no engine to relay to".to_owned());
        };
        call(
            &self.0.http,
            &engine,
            reqwest::Method::POST,
            "/v1/channel-answers",
            Some(body),
        )
        .await
        .map(|(status, body)| Relayed { status, body })
    }
}

/// One JSON exchange with an engine's API: (status, body; `null` for an empty or
/// non-JSON body).
pub async fn call(
    http: &reqwest::Client,
    engine: &Engine,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Result<(u16, Value), String> {
    let mut req = http
        .request(method, format!("http://{}{path}", engine.addr))
        .bearer_auth(&engine.token);
    if let Some(body) = body {
        req = req
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = req.send().await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let bytes = response.bytes().await.map_err(|e| e.to_string())?;
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

async fn receive(
    State(handle): State<Arc<Handle>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let Some(shared) = handle.0.upgrade() else {
        return (StatusCode::SERVICE_UNAVAILABLE, String::new());
    };
    let mut gate = shared.gate.subscribe();
    if !*gate.borrow_and_update() {
        shared.log.lock().unwrap().gated += 1;
        // Held unlogged until the gate opens; by then its sender is dead.
        let _ = gate.wait_for(|open| *open).await;
        return (StatusCode::SERVICE_UNAVAILABLE, "gated".to_owned());
    }
    let delivery = match admit(&shared, &headers, &body) {
        Ok(d) => d,
        Err(why) => {
            shared.log.lock().unwrap().violations.push(why.clone());
            return (StatusCode::BAD_REQUEST, why);
        }
    };
    let seq = delivery.seq;
    let counterpart = Counterpart(shared.clone());
    let reply = (shared.script)(delivery, counterpart).await;
    shared
        .log
        .lock()
        .unwrap()
        .replies
        .insert(seq, reply.status());
    let status = StatusCode::from_u16(reply.status()).unwrap_or(StatusCode::OK);
    match reply {
        Reply::Answer(variables) => (status, json!({ "variables": variables }).to_string()),
        Reply::Accepted | Reply::Fail(_) => (status, String::new()),
    }
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Result<&'h str, String> {
    headers
        .get(name)
        .ok_or_else(|| format!("no `{name}` header"))?
        .to_str()
        .map_err(|_| format!("`{name}` is not text"))
}

/// Checks one request and logs it as a delivery; the reason it breaks the contract if
/// it does.
fn admit(shared: &Shared, headers: &HeaderMap, body: &[u8]) -> Result<Delivery, String> {
    let id = header(headers, "webhook-id")?;
    let ts: i64 = header(headers, "webhook-timestamp")?
        .parse()
        .map_err(|_| "`webhook-timestamp` is not a number".to_owned())?;
    let signature = header(headers, "webhook-signature")?;
    if !shared.secret.verify(id, ts, body, signature) {
        return Err(format!("the signature of `{id}` does not verify"));
    }
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if (now_s - ts).abs() > TIMESTAMP_TOLERANCE_S {
        return Err(format!("`{id}` is signed at {ts}, {now_s} now"));
    }
    let key = header(headers, "idempotency-key")?.to_owned();
    let call_id = header(headers, "qflow-call-id")?.to_owned();
    let request: Request =
        serde_json::from_slice(body).map_err(|e| format!("`{key}`: the body: {e}"))?;
    if id != key || request.idempotency_key != key {
        return Err(format!(
            "`{key}`: webhook-id `{id}` and body key `{}` differ",
            request.idempotency_key
        ));
    }
    if request.call_id != call_id {
        return Err(format!(
            "`{key}`: Qflow-Call-Id `{call_id}`, body `{}`",
            request.call_id
        ));
    }
    if key != format!("{call_id}/{}", request.attempt)
        || !call_id.starts_with(&format!("{}/", request.instance))
    {
        return Err(format!(
            "`{key}` is not <instance>/<call>/<attempt> of call `{call_id}`, attempt {}",
            request.attempt
        ));
    }
    let mut log = shared.log.lock().unwrap();
    let seq = log.deliveries.len() as u64;
    if let Some(first) = log.by_key.get(&key).and_then(|s| s.first()) {
        let before = &log.deliveries[*first as usize].request;
        if *before != request {
            return Err(format!(
                "`{key}` delivered again as a different request: {before:?} then {request:?}"
            ));
        }
    }
    match log.newest_attempt.get(&call_id) {
        Some((newest, at)) if *newest > request.attempt => {
            return Err(format!(
                "double submit: attempt {} of call `{call_id}` delivered (seq {seq}) after \
                 attempt {newest} (seq {at})",
                request.attempt
            ));
        }
        Some((newest, _)) if *newest == request.attempt => {}
        _ => {
            log.newest_attempt
                .insert(call_id.clone(), (request.attempt, seq));
        }
    }
    let nth_of_call = {
        let n = log.calls.entry(call_id.clone()).or_default();
        *n += 1;
        *n
    };
    let seqs = log.by_key.entry(key.clone()).or_default();
    seqs.push(seq);
    let nth_of_key = seqs.len() as u32;
    let delivery = Delivery {
        seq,
        key,
        call_id,
        request,
        nth_of_key,
        nth_of_call,
        at: std::time::Instant::now(),
    };
    log.deliveries.push(delivery.clone());
    Ok(delivery)
}

/// A test secret in the Standard Webhooks form (32 bytes).
pub const TEST_SECRET: &str = "whsec_cWZsb3ctdGVzdC1zZWNyZXQtb2YtdGhpcnR5LXR3byE=";
