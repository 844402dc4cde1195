//! The webhook adapter over https (SPEC C8), end to end through the runtime, the outbox
//! and the dispatcher: a CA and server certificates are made at test time (rcgen), and a
//! loopback TLS server (tokio-rustls) plays the counterpart. A channel configured with the
//! CA (`ca_file` in its `qflow.toml` table) delivers to a server whose certificate chains
//! to it, signed; a server whose certificate chains to no trusted root fails the try at
//! the handshake, and the outbox tries again along the channel's curve without ever
//! delivering.
//!
//! Only 127.0.0.1 is served, every connection and read is bounded in count, size and
//! time, and every wait has a hang guard.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use qflow_channels::{ChannelSettings, Channels, Dispatcher, Secret};
use qflow_persistence::SqliteStore;
use qflow_runtime::{AsyncHandlers, ManualClock, Runtime};
use qflow_store::{InstanceId, InstanceStatus, OutboxRecord, OutboxState, Store};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::TlsAcceptor;

mod support;

const T0: i64 = 1_700_000_000_000;
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// The channel's curve: a failed try is tried again 100 ms later, then 200 ms.
const INITIAL_MS: i64 = 100;
/// Most connections one test server accepts; most bytes of one request it reads.
const CONNECTIONS_MAX: usize = 32;
const REQUEST_BYTES_MAX: usize = 1 << 20;
/// How long a handshake or a request may take before the server drops the connection.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A channel call with a 30 s timeout and no retry: one attempt, so every try seen is a
/// delivery try of one request.
const CHARGE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="checkout" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="charge" q:channel="payments">
      <extensionElements>
        <q:timeout duration="PT30S"/>
      </extensionElements>
    </serviceTask>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="charge"/>
    <sequenceFlow id="f1" sourceRef="charge" targetRef="end"/>
  </process>
</definitions>"#;

/// A CA (as PEM, what `ca_file` holds) and a server certificate it issued for
/// 127.0.0.1 and localhost, with the server's key.
struct Pki {
    ca_pem: String,
    chain: Vec<CertificateDer<'static>>,
    key: PrivatePkcs8KeyDer<'static>,
}

fn pki(name: &str) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(DnType::CommonName, format!("qflow test CA {name}"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).unwrap();

    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    leaf.subject_alt_names
        .push(SanType::IpAddress(Ipv4Addr::LOCALHOST.into()));
    leaf.distinguished_name
        .push(DnType::CommonName, format!("qflow test counterpart {name}"));
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf_cert = leaf.signed_by(&key, &ca_cert, &ca_key).unwrap();
    Pki {
        ca_pem: ca_cert.pem(),
        chain: vec![leaf_cert.der().clone()],
        key: PrivatePkcs8KeyDer::from(key.serialize_der()),
    }
}

/// One request the server read: its headers (names lowercase) and body.
#[derive(Debug, Clone)]
struct Seen {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Default)]
struct Log {
    /// What each failed handshake said, server side.
    handshakes_failed: Vec<String>,
    requests: Vec<Seen>,
}

/// The loopback TLS counterpart: answers every request `200` with a receipt.
struct TlsServer {
    addr: SocketAddr,
    log: Arc<Mutex<Log>>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsServer {
    async fn start(pki: &Pki) -> TlsServer {
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(pki.chain.clone(), PrivateKeyDer::Pkcs8(pki.key.clone_key()))
            .unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Log::default()));
        let task = tokio::spawn({
            let log = log.clone();
            async move {
                for _ in 0..CONNECTIONS_MAX {
                    let Ok((tcp, _)) = listener.accept().await else {
                        return;
                    };
                    tokio::spawn(serve(acceptor.clone(), tcp, log.clone()));
                }
            }
        });
        TlsServer { addr, log, task }
    }

    fn url(&self) -> String {
        format!("https://{}/hook", self.addr)
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap()
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One connection: the handshake, one HTTP/1.1 request, one answer, closed.
async fn serve(acceptor: TlsAcceptor, tcp: TcpStream, log: Arc<Mutex<Log>>) {
    let mut tls = match tokio::time::timeout(IO_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            log.lock().unwrap().handshakes_failed.push(e.to_string());
            return;
        }
        Err(_) => return,
    };
    let Ok(Some(seen)) = tokio::time::timeout(IO_TIMEOUT, read_request(&mut tls)).await else {
        return;
    };
    log.lock().unwrap().requests.push(seen);
    let body = br#"{"variables": {"receipt": "r-tls"}}"#;
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        body.len()
    );
    let _ = tls.write_all(head.as_bytes()).await;
    let _ = tls.write_all(body).await;
    let _ = tls.shutdown().await;
}

/// Reads one request's head and its `content-length` body; `None` for anything else.
async fn read_request<S: AsyncReadExt + Unpin>(s: &mut S) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > REQUEST_BYTES_MAX {
            return None;
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).ok()?;
    let headers: Vec<(String, String)> = head
        .split("\r\n")
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())?;
    if length > REQUEST_BYTES_MAX {
        return None;
    }
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    Some(Seen { headers, body })
}

struct World {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    clock: Arc<ManualClock>,
    runtime: Arc<Runtime>,
    dispatcher: Option<Dispatcher>,
}

/// A runtime and dispatcher on SQLite and a manual clock, with the channel `payments`
/// built from its `qflow.toml` table: a webhook to `url`, signed, with `ca_pem` (when
/// given) as its `ca_file`.
async fn world(url: &str, ca_pem: Option<&str>) -> World {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("q.db")).await.unwrap());
    let clock = Arc::new(ManualClock::new(T0));
    let mut table =
        format!("url = \"{url}\"\nsecret_env = \"PAYMENTS_SECRET\"\nresponse_timeout_ms = 5000\n");
    if let Some(pem) = ca_pem {
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, pem).unwrap();
        table.push_str(&format!("ca_file = {:?}\n", path.display().to_string()));
    }
    table.push_str(&format!("[delivery]\ninitial_ms = {INITIAL_MS}\n"));
    let settings: ChannelSettings = toml::from_str(&table).unwrap();
    let env = |k: &str| (k == "PAYMENTS_SECRET").then(|| SECRET.to_owned());
    let channel = settings
        .build("payments", &env, Arc::new(|| T0 / 1000))
        .expect("the channel builds");
    let mut channels = Channels::new();
    channels.add(channel);
    let runtime = support::runtime(&store, &clock, &channels, AsyncHandlers::new(), |_| {});
    let dispatcher = support::dispatcher(&runtime, channels);
    World {
        _dir: dir,
        store,
        clock,
        runtime,
        dispatcher: Some(dispatcher),
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

    /// The instance's one outbox row, once `done` holds of it (in real time, bounded).
    async fn until_row(
        &self,
        id: InstanceId,
        what: &str,
        done: impl Fn(&OutboxRecord) -> bool,
    ) -> OutboxRecord {
        let wait = async {
            loop {
                let rows = self.store.outbox(id).await.unwrap();
                if let Some(row) = rows.into_iter().find(|r| done(r)) {
                    return row;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .unwrap_or_else(|_| panic!("never happened: {what}"))
    }

    async fn status(&self, id: InstanceId) -> InstanceStatus {
        self.store.instance(id).await.unwrap().unwrap().status
    }

    async fn shutdown(mut self) {
        if let Some(d) = self.dispatcher.take() {
            d.shutdown().await;
        }
    }
}

#[tokio::test]
async fn a_delivery_over_https_to_a_server_the_configured_ca_issued_is_signed_and_taken() {
    let pki = pki("trusted");
    let server = TlsServer::start(&pki).await;
    let w = world(&server.url(), Some(&pki.ca_pem)).await;
    let id = w.start().await;
    let row = w
        .until_row(id, "the request is delivered", |r| {
            r.state == OutboxState::Delivered
        })
        .await;
    assert_eq!(row.deliveries, 1, "{row:?}");
    let wait = async {
        while w.status(id).await != InstanceStatus::Completed {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .expect("the answer completes the instance");

    let seen = {
        let log = server.log();
        assert!(log.handshakes_failed.is_empty(), "{log:?}");
        assert_eq!(log.requests.len(), 1, "{log:?}");
        log.requests[0].clone()
    };
    let key = format!("{id}/1/1");
    assert_eq!(seen.header("idempotency-key"), Some(key.as_str()));
    assert_eq!(
        seen.header("qflow-call-id"),
        Some(format!("{id}/1").as_str())
    );
    assert_eq!(seen.header("webhook-id"), Some(key.as_str()));
    let ts: i64 = seen
        .header("webhook-timestamp")
        .expect("webhook-timestamp")
        .parse()
        .unwrap();
    assert_eq!(ts, T0 / 1000);
    let signature = seen.header("webhook-signature").expect("webhook-signature");
    let secret = Secret::parse(SECRET).unwrap();
    assert!(
        secret.verify(&key, ts, &seen.body, signature),
        "the signature verifies with the channel's secret"
    );
    w.shutdown().await;
}

#[tokio::test]
async fn a_server_whose_certificate_chains_to_no_trusted_root_fails_each_try_along_the_curve() {
    // The channel trusts this CA; the server's certificate comes from another one.
    let trusted = pki("trusted");
    let rogue = pki("rogue");
    let server = TlsServer::start(&rogue).await;
    let w = world(&server.url(), Some(&trusted.ca_pem)).await;
    let id = w.start().await;

    // The first try fails at the handshake and is recorded: the next is due after the
    // curve's first delay.
    let row = w
        .until_row(id, "the first try is recorded as failed", |r| {
            r.deliveries >= 1
        })
        .await;
    assert_eq!(row.state, OutboxState::Pending, "{row:?}");
    assert_eq!(row.deliveries, 1, "{row:?}");
    assert_eq!(row.due_at_ms, T0 + INITIAL_MS, "{row:?}");
    let error = row.last_error.clone().unwrap_or_default();
    assert!(error.contains("certificate"), "{error}");

    // Nothing is tried before the row is due; at its instant, the second try fails the
    // same way, and the next is due after the doubled delay.
    w.clock.advance_ms(INITIAL_MS);
    let row = w
        .until_row(id, "the second try is recorded as failed", |r| {
            r.deliveries >= 2
        })
        .await;
    assert_eq!(row.state, OutboxState::Pending, "{row:?}");
    assert_eq!(row.deliveries, 2, "{row:?}");
    assert_eq!(row.due_at_ms, T0 + INITIAL_MS + 2 * INITIAL_MS, "{row:?}");

    // The counterpart never got a request: every connection ended in the handshake.
    {
        let log = server.log();
        assert!(log.requests.is_empty(), "{log:?}");
        assert!(log.handshakes_failed.len() >= 2, "{log:?}");
    }
    assert_eq!(w.status(id).await, InstanceStatus::Running);
    w.shutdown().await;
}

#[tokio::test]
async fn without_a_ca_file_a_private_ca_is_not_trusted() {
    // The web PKI's roots alone do not reach a private CA: the try fails, not delivered.
    let pki = pki("private");
    let server = TlsServer::start(&pki).await;
    let w = world(&server.url(), None).await;
    let id = w.start().await;
    let row = w
        .until_row(id, "the first try is recorded as failed", |r| {
            r.deliveries >= 1
        })
        .await;
    assert_eq!(row.state, OutboxState::Pending, "{row:?}");
    assert!(server.log().requests.is_empty());
    w.shutdown().await;
}
