//! `qflow serve` as a user meets it: a real process on a loopback port, a real socket.
//! First contact makes an admin token, prints it once and keeps only its hash; a
//! restart on the same file accepts the same token; SIGTERM shuts down cleanly; an
//! instance started over HTTP runs the demo's handlers to its end.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    addr: String,
    lines: mpsc::Receiver<String>,
    said: Vec<String>,
}

/// Starts `qflow serve --demo` on a free loopback port and reads its banner.
fn serve(db: &std::path::Path) -> Server {
    serve_with(db, &[])
}

/// [`serve`] with more arguments.
fn serve_with(db: &std::path::Path, extra: &[&str]) -> Server {
    let common::Launched {
        child,
        addr,
        lines,
        said,
    } = common::launch(&["--demo"], db, extra);
    Server {
        child,
        addr,
        lines,
        said,
    }
}

/// One HTTP/1.1 exchange on its own connection: (status, body).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("sets a read bound");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(req.as_bytes()).expect("writes");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("reads");
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {raw}"));
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

fn token_from(said: &[String]) -> String {
    said.iter()
        .map(|l| l.trim())
        .find(|l| l.starts_with("qf_"))
        .unwrap_or_else(|| panic!("no token printed: {said:#?}"))
        .to_owned()
}

fn stop(mut server: Server) -> Vec<String> {
    let pid = server.child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = server.child.wait().expect("waits");
    while let Ok(line) = server.lines.recv_timeout(Duration::from_secs(5)) {
        server.said.push(line);
    }
    assert!(
        status.success(),
        "qflow serve exited {status}: {:#?}",
        server.said
    );
    server.said
}

#[test]
fn first_contact_prints_one_token_that_survives_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("serve.sqlite");
    let server = serve(&db);
    let token = token_from(&server.said);
    let addr = server.addr.clone();
    let hash_file = dir.path().join("serve.sqlite.admin-token");
    let kept = std::fs::read_to_string(&hash_file).expect("the hash file");
    assert!(!kept.contains(&token), "the token itself was written down");
    assert_eq!(kept.trim().len(), 64, "{kept}");

    assert_eq!(
        http(&addr, "GET", "/healthz", None, None),
        (200, "ok\n".to_owned())
    );
    let (status, body) = http(&addr, "GET", "/v1/deployments", None, None);
    assert_eq!(status, 401, "{body}");
    let (status, body) = http(&addr, "GET", "/v1/deployments", Some(&token), None);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"process_id\":\"orders\""), "{body}");

    // An instance started over HTTP runs the demo's handlers to its end.
    let (status, body) = http(
        &addr,
        "POST",
        "/v1/processes/orders/instances",
        Some(&token),
        Some(r#"{"variables": {"amount": 12}}"#),
    );
    assert_eq!(status, 201, "{body}");
    let started: serde_json::Value = serde_json::from_str(&body).expect("json");
    let id = started["instance"].as_str().expect("id").to_owned();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, body) = http(
            &addr,
            "GET",
            &format!("/v1/instances/{id}"),
            Some(&token),
            None,
        );
        let view: serde_json::Value = serde_json::from_str(&body).expect("json");
        if view["instance"]["status"] != "running" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the instance never ended: {body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let banner = server.said.len();
    let said = stop(server);
    assert!(
        !said[banner..].iter().any(|l| l.contains(&token)),
        "the token was printed again after the banner: {said:#?}"
    );

    let again = serve(&db);
    assert!(
        !again.said.iter().any(|l| l.contains("qf_")),
        "a second token was made: {:#?}",
        again.said
    );
    let (status, body) = http(
        &again.addr,
        "GET",
        &format!("/v1/instances/{id}"),
        Some(&token),
        None,
    );
    assert_eq!(status, 200, "{body}");
    stop(again);
    // A clean stop closes the store: the WAL is folded into the file and removed.
    common::assert_store_closed(&db, "SIGTERM");
}

#[test]
fn a_retention_that_is_not_a_duration_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().expect("temp dir");
    for command in ["serve", "run"] {
        let db = dir.path().join(format!("{command}.sqlite"));
        let out = Command::new(env!("CARGO_BIN_EXE_qflow"))
            .args([command, "--retention", "P1M", "--db"])
            .arg(&db)
            .output()
            .expect("runs qflow");
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {said}");
        assert!(
            said.contains("--retention") && said.contains("calendar years or months"),
            "{command}: {said}"
        );
        assert!(
            !db.exists(),
            "{command}: a refused start created {}",
            db.display()
        );
    }
}

#[test]
fn the_configured_retention_purges_ended_instances_and_keeps_failed_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("retention.sqlite");
    let config = dir.path().join("qflow.toml");
    std::fs::write(
        &config,
        "[retention]\ndefault = \"PT0S\"\ninterval_ms = 100\n",
    )
    .expect("writes the config");
    let server = serve_with(&db, &["--config", config.to_str().expect("utf-8")]);
    let token = token_from(&server.said);
    let addr = server.addr.clone();
    // Start orders, 20 at a time, until one was purged and one has FAILED (the demo's
    // scripted gateway declines about one card in twenty-five, by instance id). Purged
    // instances are gone (404); FAILED ones stay, whatever the retention. Bounded in
    // instances and in time (a hang guard, not a timing assertion).
    let mut ids = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let (purged, failed) = loop {
        assert!(
            ids.len() < 1_000,
            "1,000 orders and no purge and failure seen"
        );
        for n in 0..20 {
            let body = format!(r#"{{"variables": {{"amount": {n}}}}}"#);
            let (status, body) = http(
                &addr,
                "POST",
                "/v1/processes/orders/instances",
                Some(&token),
                Some(&body),
            );
            assert_eq!(status, 201, "{body}");
            let started: serde_json::Value = serde_json::from_str(&body).expect("json");
            ids.push(started["instance"].as_str().expect("id").to_owned());
        }
        std::thread::sleep(Duration::from_millis(300));
        let mut purged = 0;
        let mut failed = Vec::new();
        for id in &ids {
            let (status, body) = http(
                &addr,
                "GET",
                &format!("/v1/instances/{id}"),
                Some(&token),
                None,
            );
            match status {
                404 => purged += 1,
                200 if body.contains("\"status\":\"failed\"") => failed.push(id.clone()),
                _ => {}
            }
        }
        if purged > 0 && !failed.is_empty() {
            break (purged, failed);
        }
        assert!(
            Instant::now() < deadline,
            "nothing purged or failed: {purged} {failed:?}"
        );
    };
    let (_, metrics) = http(&addr, "GET", "/metrics", Some(&token), None);
    let counted = metrics
        .lines()
        .find_map(|l| l.strip_prefix("qflow_instances_purged_total "))
        .and_then(|n| n.parse::<u64>().ok())
        .expect("the purge counter");
    assert!(counted >= purged, "{counted} < {purged}");
    // A FAILED instance outlives many rounds of a zero retention.
    std::thread::sleep(Duration::from_millis(500));
    let (status, body) = http(
        &addr,
        "GET",
        &format!("/v1/instances/{}", failed[0]),
        Some(&token),
        None,
    );
    assert_eq!(status, 200, "{body}");
    stop(server);
}

/// A port that is taken stops `qflow serve` before it makes an admin token: nothing is
/// left behind that would lock the next start out, and the next start on a free port
/// makes and prints the first token.
#[test]
fn a_taken_port_leaves_no_admin_token_behind() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("serve.sqlite");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("binds a port");
    let addr = taken.local_addr().expect("address").to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_qflow"))
        .args(["serve", "--listen", &addr, "--db"])
        .arg(&db)
        .env_remove("QFLOW_DATABASE_URL")
        .output()
        .expect("runs qflow serve");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains(&format!("listening on {addr}")), "{said}");
    assert!(!said.contains("qf_"), "no token is shown: {said}");
    assert!(
        !dir.path().join("serve.sqlite.admin-token").exists(),
        "no token hash is kept"
    );
    drop(taken);
    let server = serve(&db);
    let token = token_from(&server.said);
    assert!(token.starts_with("qf_"));
    stop(server);
}
