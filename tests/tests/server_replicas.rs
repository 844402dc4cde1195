//! Two `qflow-server-host` processes (the HTTP server embedded in a host with scripted
//! handlers) on one PostgreSQL database, under load over HTTP: 1,000 instances with
//! scripted retries, started on both; one server is killed with SIGKILL mid-run. Every
//! instance in the database — including any whose start was answered by the dead one, or
//! never answered — ends exactly as scripted, with no attempt committed twice.
//!
//! Needs `QFLOW_TEST_PG_URL`; without it the test says it is skipped and passes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use qflow_persistence::{PgConfig, PgStore};
use qflow_store::{InstanceFilter, InstanceStatus, Store};
use qflow_tests::verdict;

const TOKEN: &str = "server-replicas-test-token";
const INSTANCES: u32 = 1_000;

fn pg_url() -> Option<String> {
    match std::env::var("QFLOW_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!("skipped: QFLOW_TEST_PG_URL not set");
            None
        }
    }
}

struct Server {
    child: Child,
    addr: String,
}

fn spawn(url: &str, schema: &str) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_qflow-server-host"))
        .args(["--database-url", url, "--schema", schema])
        .args(["--listen", "127.0.0.1:0", "--fast-recovery"])
        .env("QFLOW_HOST_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawns the server host");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("reads the banner");
    let addr = line
        .trim()
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("unexpected banner {line:?}"))
        .to_owned();
    Server { child, addr }
}

/// Starts one instance; `None` when the server did not answer (it is dead, or died
/// during the request).
fn start(addr: &str, fail: u32) -> Option<u16> {
    let body = format!(r#"{{"variables": {{"fail": {fail}}}}}"#);
    let req = format!(
        "POST /v1/processes/flaky/instances HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer \
         {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: \
         close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    stream.write_all(req.as_bytes()).ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).ok()?;
    raw.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_database_survive_the_sigkill_of_one() {
    let Some(url) = pg_url() else { return };
    let schema = format!("qflow_servers_{}", uuid::Uuid::new_v4().simple());
    // One after the other, so the schema's migrations run once.
    let mut a = spawn(&url, &schema);
    let mut b = spawn(&url, &schema);
    let store = Arc::new(
        PgStore::connect_with(
            &url,
            PgConfig {
                schema: Some(schema.clone()),
                max_connections: 4,
            },
        )
        .await
        .expect("connect"),
    );

    // Eight clients start instances, alternating servers; at the halfway mark server A
    // is killed, and from then on every start goes to B (a start A never answered is
    // sent again to B, so the database may hold one more instance than was answered).
    let next = Arc::new(AtomicU32::new(0));
    let answered = Arc::new(AtomicU32::new(0));
    let killed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (addr_a, addr_b) = (a.addr.clone(), b.addr.clone());
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (next, answered, killed) = (next.clone(), answered.clone(), killed.clone());
            let (addr_a, addr_b) = (addr_a.clone(), addr_b.clone());
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= INSTANCES {
                    return;
                }
                let on_a = i % 2 == 0 && !killed.load(Ordering::SeqCst);
                let first = if on_a { &addr_a } else { &addr_b };
                let status = start(first, i % 3).or_else(|| start(&addr_b, i % 3));
                assert_eq!(status, Some(201), "start {i} was not accepted");
                answered.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    while answered.load(Ordering::SeqCst) < INSTANCES / 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    killed.store(true, Ordering::SeqCst);
    a.child.kill().expect("SIGKILL server A");
    a.child.wait().expect("reaps A");
    eprintln!(
        "server A killed after {} answered starts",
        answered.load(Ordering::SeqCst)
    );
    for c in clients {
        c.join().expect("a client panicked");
    }

    // B finishes everything, A's parked and in-flight work included (its timer claims
    // and leases lapse). A bound on a hang, not a timing assertion.
    let began = Instant::now();
    let running = InstanceFilter {
        status: Some(InstanceStatus::Running),
        limit: 1,
        ..InstanceFilter::default()
    };
    while !store.instances(&running).await.expect("list").is_empty() {
        assert!(
            began.elapsed() < Duration::from_secs(180),
            "instances still running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all = store
        .instances(&InstanceFilter::default())
        .await
        .expect("list");
    assert!(
        all.len() as u32 >= INSTANCES && all.len() as u32 <= INSTANCES + 8,
        "{} instances in the database for {INSTANCES} answered starts",
        all.len()
    );
    for record in &all {
        verdict(&*store, record.id)
            .await
            .expect("verdict")
            .assert_as_scripted("retrying");
    }

    let _ = Command::new("kill")
        .args(["-TERM", &b.child.id().to_string()])
        .status();
    let status = b.child.wait().expect("reaps B");
    assert!(status.success(), "server B exited {status}");
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(store.pool())
        .await
        .expect("drop schema");
    store.close().await;
}
