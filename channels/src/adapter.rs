//! Channel adapters (SPEC C8): how a request reaches its counterpart. In-process (the host
//! registers an async function per channel) and HTTP webhook (a signed JSON POST).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use qflow_core::Variables;
use serde::{Deserialize, Serialize};

use crate::signature::Secret;

/// What a counterpart receives: one attempt of one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The configured channel.
    pub channel: String,
    /// The attempt's `Idempotency-Key`: fresh per attempt, the same on every delivery of
    /// the attempt.
    pub idempotency_key: String,
    /// The logical call: the same for every attempt of the call.
    pub call_id: String,
    pub instance: String,
    pub node: String,
    pub attempt: u32,
    /// The task's inputs.
    pub variables: Variables,
}

/// A counterpart's answer, synchronous (a webhook's response body, an in-process
/// function's result) or relayed later through the API. Whatever it says, it is not a
/// failure of the call (E5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// The answer's variables (output mappings see them as `result`).
    #[serde(default)]
    pub variables: Variables,
    /// Answer with a BPMN error instead: it routes to the task's error boundary and
    /// spends no budget. The variables are set before it routes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bpmn_error: Option<BpmnError>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BpmnError {
    pub code: String,
    #[serde(default)]
    pub message: String,
}

impl Answer {
    /// An answer with these variables.
    pub fn variables(variables: Variables) -> Answer {
        Answer {
            variables,
            bpmn_error: None,
        }
    }
}

/// How a delivery went, when the counterpart took the request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The counterpart answered at once.
    Answer(Answer),
    /// The counterpart accepted the request and will answer later, through the relay.
    Accepted,
}

/// A delivery that did not reach the counterpart, or that it refused: the outbox tries
/// again along the channel's curve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryError(pub String);

impl std::fmt::Display for DeliveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Delivers requests of one channel.
pub trait Adapter: Send + Sync + 'static {
    fn deliver(&self, request: Request) -> BoxFuture<'static, Result<Reply, DeliveryError>>;
}

/// The host's async function for a channel: it is the counterpart (or talks to it).
pub struct InProcess<F>(pub F);

impl<F> Adapter for InProcess<F>
where
    F: Fn(Request) -> BoxFuture<'static, Result<Reply, DeliveryError>> + Send + Sync + 'static,
{
    fn deliver(&self, request: Request) -> BoxFuture<'static, Result<Reply, DeliveryError>> {
        (self.0)(request)
    }
}

/// The most bytes of a webhook's response body that are read; a longer answer is a
/// failed delivery rather than unbounded memory.
pub const RESPONSE_BYTES_MAX: usize = 1 << 20;

/// An HTTP webhook: each delivery is a `POST` of the [`Request`] as JSON.
///
/// Headers: `Idempotency-Key` (per attempt), `Qflow-Call-Id` (per call), and, with a
/// secret, the Standard Webhooks trio `webhook-id` (the key), `webhook-timestamp`,
/// `webhook-signature`. A `202 Accepted` means the answer comes later through the relay;
/// any other 2xx is the answer, its body an [`Answer`] object (an empty body: no
/// variables). Anything else — a status outside 2xx, a connection error, a timeout, an
/// answer that is not an [`Answer`] — is a failed try. TLS is rustls with the web PKI's
/// roots, and any extra roots the channel is given ([`WebhookBuilder::trust`]): a server
/// whose certificate chains to none of them fails the try at the handshake.
pub struct Webhook {
    url: reqwest::Url,
    client: reqwest::Client,
    secret: Option<Secret>,
    now_s: Arc<dyn Fn() -> i64 + Send + Sync>,
}

/// The default time a webhook has to open its connection.
pub const CONNECT_TIMEOUT_MS_DEFAULT: u64 = 2_000;

/// Most root certificates one channel may be given to trust beside the web PKI's.
pub const EXTRA_ROOTS_MAX: usize = 100;

impl Webhook {
    /// A webhook with a signing secret (or none) and the web PKI's roots only; the same
    /// as [`Webhook::builder`] with each setting given.
    pub fn new(
        url: &str,
        connect_timeout: Duration,
        response_timeout: Duration,
        secret: Option<Secret>,
        now_s: Arc<dyn Fn() -> i64 + Send + Sync>,
    ) -> Result<Webhook, String> {
        Webhook::builder(url)
            .connect_timeout(connect_timeout)
            .response_timeout(response_timeout)
            .secret(secret)
            .clock(now_s)
            .build()
    }

    /// Starts a webhook for `url` (`http://` or `https://`, checked by
    /// [`WebhookBuilder::build`]).
    pub fn builder(url: &str) -> WebhookBuilder {
        WebhookBuilder {
            url: url.to_owned(),
            connect_timeout: Duration::from_millis(CONNECT_TIMEOUT_MS_DEFAULT),
            response_timeout: Duration::from_millis(crate::RESPONSE_TIMEOUT_MS_DEFAULT),
            secret: None,
            now_s: Arc::new(system_now_s),
            roots: None,
        }
    }
}

/// Unix seconds from the system clock: the default `webhook-timestamp`.
fn system_now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The settings of a [`Webhook`], each with its default.
pub struct WebhookBuilder {
    url: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    secret: Option<Secret>,
    now_s: Arc<dyn Fn() -> i64 + Send + Sync>,
    roots: Option<ExtraRoots>,
}

impl WebhookBuilder {
    /// How long opening the connection (and the TLS handshake's TCP part) may take.
    /// Default 2,000 ms.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one delivery try may take, end to end. Default 10,000 ms
    /// ([`crate::RESPONSE_TIMEOUT_MS_DEFAULT`]).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The key that signs every request (Standard Webhooks). Default: none, and requests
    /// carry no `webhook-*` headers.
    pub fn secret(mut self, secret: Option<Secret>) -> Self {
        self.secret = secret;
        self
    }

    /// Where `webhook-timestamp` comes from, in Unix seconds. Default: the system clock.
    pub fn clock(mut self, now_s: Arc<dyn Fn() -> i64 + Send + Sync>) -> Self {
        self.now_s = now_s;
        self
    }

    /// Also trust these root certificates — a private CA's — beside the web PKI's.
    /// Default: none, only the web PKI's roots. Given twice, the second set replaces the
    /// first.
    pub fn trust(mut self, roots: ExtraRoots) -> Self {
        self.roots = Some(roots);
        self
    }

    /// The webhook; `Err` names what is wrong (`url: …`).
    pub fn build(self) -> Result<Webhook, String> {
        let url = reqwest::Url::parse(&self.url).map_err(|e| format!("url: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("url: `{}` is not http or https", url.scheme()));
        }
        let mut client = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .timeout(self.response_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("qflow/", env!("CARGO_PKG_VERSION")));
        for cert in self.roots.iter().flat_map(|r| r.0.iter()) {
            client = client.add_root_certificate(cert.clone());
        }
        let client = client
            .build()
            .map_err(|e| format!("the HTTP client: {}", innermost(&e)))?;
        Ok(Webhook {
            url,
            client,
            secret: self.secret,
            now_s: self.now_s,
        })
    }
}

/// Root certificates a webhook trusts beside the web PKI's (`ca_file` in `qflow.toml`):
/// read from PEM and checked once, when the channel is built, so that a bad file is an
/// error at start rather than a failed delivery at the first request.
#[derive(Clone)]
pub struct ExtraRoots(Vec<reqwest::Certificate>);

impl std::fmt::Debug for ExtraRoots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ExtraRoots({} certificates)", self.0.len())
    }
}

impl ExtraRoots {
    /// Every `CERTIFICATE` block of `pem` (other blocks, such as a key, are skipped): at
    /// least one and at most [`EXTRA_ROOTS_MAX`], each a certificate rustls takes as a
    /// trust anchor.
    pub fn from_pem(pem: &[u8]) -> Result<ExtraRoots, String> {
        let certs = reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|e| format!("is not PEM certificates: {}", innermost(&e)))?;
        if certs.is_empty() {
            return Err("holds no PEM `CERTIFICATE` block".to_owned());
        }
        if certs.len() > EXTRA_ROOTS_MAX {
            return Err(format!(
                "holds {} certificates; at most {EXTRA_ROOTS_MAX} are read",
                certs.len()
            ));
        }
        // rustls parses a root only when a client is built: build one now, so that a
        // certificate it refuses is refused here, naming the file, not at the first try.
        let mut probe = reqwest::Client::builder();
        for cert in &certs {
            probe = probe.add_root_certificate(cert.clone());
        }
        probe.build().map_err(|e| {
            format!(
                "holds a certificate rustls cannot take as a root: {}",
                innermost(&e)
            )
        })?;
        Ok(ExtraRoots(certs))
    }

    /// How many root certificates there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true for roots read by [`ExtraRoots::from_pem`].
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The innermost cause of an error: what reqwest's own wrapping hides.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last: &dyn std::error::Error = e;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

impl Adapter for Webhook {
    fn deliver(&self, request: Request) -> BoxFuture<'static, Result<Reply, DeliveryError>> {
        let body = serde_json::to_vec(&request).unwrap_or_default();
        let mut post = self
            .client
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("idempotency-key", &request.idempotency_key)
            .header("qflow-call-id", &request.call_id);
        if let Some(secret) = &self.secret {
            let ts = (self.now_s)();
            post = post
                .header("webhook-id", &request.idempotency_key)
                .header("webhook-timestamp", ts.to_string())
                .header(
                    "webhook-signature",
                    secret.sign(&request.idempotency_key, ts, &body),
                );
        }
        let post = post.body(body);
        Box::pin(async move {
            let mut response = post.send().await.map_err(|e| DeliveryError(describe(&e)))?;
            let status = response.status();
            if !status.is_success() {
                return Err(DeliveryError(format!("the counterpart answered {status}")));
            }
            if status == reqwest::StatusCode::ACCEPTED {
                return Ok(Reply::Accepted);
            }
            let mut bytes = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| DeliveryError(describe(&e)))?
            {
                if bytes.len() + chunk.len() > RESPONSE_BYTES_MAX {
                    return Err(DeliveryError(format!(
                        "the answer is longer than {RESPONSE_BYTES_MAX} bytes"
                    )));
                }
                bytes.extend_from_slice(&chunk);
            }
            if bytes.iter().all(u8::is_ascii_whitespace) {
                return Ok(Reply::Answer(Answer::variables(Variables::new())));
            }
            serde_json::from_slice::<Answer>(&bytes)
                .map(Reply::Answer)
                .map_err(|e| DeliveryError(format!("the answer is not an answer object: {e}")))
        })
    }
}

/// A transport error, without the URL's query (which may hold a credential).
fn describe(e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "failed"
    };
    let mut source = std::error::Error::source(e);
    let mut detail = String::new();
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    if detail.is_empty() {
        format!("the request {what}")
    } else {
        format!("the request {what}: {detail}")
    }
}
