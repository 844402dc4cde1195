//! The console through the whole router, without a socket or a browser (the browser test
//! is `scripts/console-test`): sign-in and its cookie, pages behind the session, CSRF
//! refusals that change nothing, a read-only session without buttons, escaping and
//! wrapping of long, hostile ids, the versioned assets, and the banner a migration with
//! a refused instance opens with.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use qflow_ops::Ops;
use qflow_persistence::SqliteStore;
use qflow_runtime::{
    AsyncHandlers, ManualClock, Runtime, RuntimeConfig, StatsView, TaskContext, TaskOutcome,
};
use qflow_server::console::ConsoleConfig;
use qflow_server::{hash_token, Limits, Scope, Token, Tokens};
use qflow_store::Store;
use tower::ServiceExt;

const T0: i64 = 1_700_000_000_000;
const ADMIN: &str = "admin-secret";
const READER: &str = "reader-secret";
/// What the failing handler reports: markup that must come out escaped.
const HOSTILE_CODE: &str = "<script>alert(1)</script>";

fn model(process: &str, task: &str) -> String {
    model_with(process, task, "")
}

/// A backoff park of an hour after each failure: the instance waits in a park.
const PARKING: &str =
    r#"<q:retry maxAttempts="3" initialInterval="PT1H" maxInterval="PT1H" jitter="none"/>"#;

fn model_with(process: &str, task: &str, policy: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="t">
  <process id="{process}" isExecutable="true">
    <startEvent id="start"/>
    <serviceTask id="{task}" q:task="pay"><extensionElements>{policy}</extensionElements></serviceTask>
    <endEvent id="end"/>
    <sequenceFlow id="f0" sourceRef="start" targetRef="{task}"/>
    <sequenceFlow id="f1" sourceRef="{task}" targetRef="end"/>
  </process>
</definitions>"#
    )
}

fn token(name: &str, secret: &str, scopes: &[Scope]) -> Token {
    let mut sha256 = [0u8; 32];
    let hex = hash_token(secret);
    for (i, byte) in sha256.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex");
    }
    Token {
        name: name.to_owned(),
        sha256,
        scopes: scopes.iter().copied().collect(),
    }
}

struct World {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    clock: Arc<ManualClock>,
    rt: Arc<Runtime>,
    app: Router,
}

struct Reply {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    text: String,
}

async fn world() -> World {
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.path().join("qflow.db"))
            .await
            .expect("opens sqlite"),
    );
    let clock = Arc::new(ManualClock::new(T0));
    let handlers = AsyncHandlers::new().with_sync("pay", |_: &TaskContext<'_>| TaskOutcome::Fail {
        code: HOSTILE_CODE.into(),
        message: "<b>bold</b> & 'quoted'".into(),
    });
    let config = RuntimeConfig {
        lanes: 1,
        poll_interval_ms: 1,
        ..RuntimeConfig::default()
    };
    let rt = Arc::new(Runtime::start(
        store.clone(),
        handlers,
        clock.clone(),
        config,
    ));
    let ops = Ops::with_runtime(rt.clone(), "server");
    let tokens = Tokens::new(vec![
        token("admin", ADMIN, &Scope::ALL),
        token("reader", READER, &[Scope::Read]),
    ]);
    let app = qflow_server::router_with_console(
        ops,
        tokens,
        Some(rt.stats()),
        &Limits::default(),
        &ConsoleConfig::default(),
    );
    World {
        _dir: dir,
        store,
        clock,
        rt,
        app,
    }
}

/// A signed-in session: its cookie header value and its CSRF token.
struct Signed {
    cookie: String,
    csrf: String,
}

impl World {
    async fn request(
        &self,
        method: Method,
        uri: &str,
        cookie: Option<&str>,
        form: Option<&str>,
        extra: &[(&str, &str)],
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(c) = cookie {
            req = req.header(header::COOKIE, c);
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        let req = match form {
            Some(f) => req
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(f.to_owned())),
            None => req.body(Body::empty()),
        }
        .expect("request");
        let res = self.app.clone().oneshot(req).await.expect("infallible");
        let status = res.status();
        let headers = res.headers().clone();
        let bytes = res.into_body().collect().await.expect("body").to_bytes();
        Reply {
            status,
            headers,
            text: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    async fn get(&self, uri: &str, s: &Signed) -> Reply {
        self.request(Method::GET, uri, Some(&s.cookie), None, &[])
            .await
    }

    async fn post(&self, uri: &str, s: &Signed, form: &str) -> Reply {
        self.request(Method::POST, uri, Some(&s.cookie), Some(form), &[])
            .await
    }

    async fn sign_in(&self, secret: &str) -> Signed {
        let r = self
            .request(
                Method::POST,
                "/console/sign-in",
                None,
                Some(&format!("token={secret}")),
                &[],
            )
            .await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
        let set = r.headers[header::SET_COOKIE].to_str().expect("ascii");
        let cookie = set.split(';').next().expect("pair").to_owned();
        let page = self
            .request(Method::GET, "/console/instances", Some(&cookie), None, &[])
            .await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.text);
        let csrf = page
            .text
            .split(r#"name="csrf" value=""#)
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("the page carries a CSRF field")
            .to_owned();
        Signed { cookie, csrf }
    }

    async fn failed_instance(&self, process: &str, task: &str) -> String {
        let id = self.started(&model(process, task)).await;
        self.wait(|s| s.failed >= 1).await;
        id
    }

    async fn started(&self, source: &str) -> String {
        let ops = Ops::with_runtime(self.rt.clone(), "test");
        let dep = ops.deploy(source, None).await.expect("deploys");
        let started = ops
            .start(qflow_ops::StartRequest {
                deployment: Some(dep.id),
                ..Default::default()
            })
            .await
            .expect("starts");
        started.instance
    }

    async fn wait(&self, done: impl Fn(&StatsView) -> bool) {
        self.clock.advance_ms(1);
        let wait = self.rt.wait_until(done);
        tokio::time::timeout(std::time::Duration::from_secs(120), wait)
            .await
            .expect("the runtime stopped making progress (hang guard, not a timing check)");
    }

    /// The instance row's fence and snapshot and the audit log's length: what a refused
    /// form must leave as it was.
    async fn state_of(&self, id: &str) -> (u64, Vec<u8>, usize) {
        let id = qflow_ops::parse_instance_id(id).expect("id");
        let rec = self
            .store
            .instance(id)
            .await
            .expect("reads")
            .expect("exists");
        let audit = self.store.audit(None, 0).await.expect("audit").len();
        (rec.fence, rec.snapshot, audit)
    }
}

#[tokio::test]
async fn sign_in_makes_an_httponly_strict_session_cookie() {
    let w = world().await;
    let r = w
        .request(
            Method::POST,
            "/console/sign-in",
            None,
            Some(&format!("token={ADMIN}")),
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.headers[header::LOCATION], "/console/instances");
    let cookie = r.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.starts_with("qflow_session="), "{cookie}");
    for part in ["HttpOnly", "SameSite=Strict", "Path=/console", "Max-Age="] {
        assert!(cookie.contains(part), "{part} missing: {cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    // The id is 32 random bytes in hex, not the token.
    let id = cookie["qflow_session=".len()..].split(';').next().unwrap();
    assert_eq!(id.len(), 64);
    assert!(!cookie.contains(ADMIN));

    // Behind a TLS proxy the cookie is Secure.
    let r = w
        .request(
            Method::POST,
            "/console/sign-in",
            None,
            Some(&format!("token={READER}")),
            &[("x-forwarded-proto", "https")],
        )
        .await;
    let cookie = r.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.contains("; Secure"), "{cookie}");

    // A wrong token gets the form again, and no cookie.
    let r = w
        .request(
            Method::POST,
            "/console/sign-in",
            None,
            Some("token=guess"),
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(r.headers.get(header::SET_COOKIE).is_none());
    assert!(r.text.contains("not one this server accepts"), "{}", r.text);
    assert!(
        !r.text.contains("guess"),
        "the presented token is not echoed"
    );
}

#[tokio::test]
async fn pages_need_a_session_and_sign_out_ends_it() {
    let w = world().await;
    let r = w
        .request(Method::GET, "/console/instances", None, None, &[])
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.headers[header::LOCATION], "/console/sign-in");
    let forged = w
        .request(
            Method::GET,
            "/console/instances",
            Some("qflow_session=00ff"),
            None,
            &[],
        )
        .await;
    assert_eq!(forged.status, StatusCode::SEE_OTHER);

    let s = w.sign_in(ADMIN).await;
    let page = w.get("/console/instances", &s).await;
    for (name, value) in [
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("cache-control", "no-store"),
    ] {
        assert_eq!(page.headers[name], value);
    }
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));

    // Signing out needs the CSRF token too.
    let r = w.post("/console/sign-out", &s, "csrf=wrong").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(w.get("/console/instances", &s).await.status, StatusCode::OK);
    let r = w
        .post("/console/sign-out", &s, &format!("csrf={}", s.csrf))
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(r.headers[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .contains("Max-Age=0"));
    assert_eq!(
        w.get("/console/instances", &s).await.status,
        StatusCode::SEE_OTHER
    );
}

#[tokio::test]
async fn a_form_without_the_sessions_csrf_token_is_refused_and_changes_nothing() {
    let w = world().await;
    let id = w.failed_instance("billing", "pay").await;
    let s = w.sign_in(ADMIN).await;
    let before = w.state_of(&id).await;
    let uri = format!("/console/instances/{id}/resume");
    for form in [
        "budget=keep".to_owned(),
        "csrf=&budget=keep".to_owned(),
        "csrf=forged&budget=keep".to_owned(),
        format!("csrf={}x&budget=keep", s.csrf),
    ] {
        let r = w.post(&uri, &s, &form).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{form}: {}", r.text);
        assert!(r.text.contains("CSRF"), "{}", r.text);
        assert_eq!(w.state_of(&id).await, before, "{form} changed something");
    }
    // Another session's token does not do either.
    let other = w.sign_in(ADMIN).await;
    let r = w
        .post(&uri, &s, &format!("csrf={}&budget=keep", other.csrf))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // A cross-site post is refused whatever it carries.
    let r = w
        .request(
            Method::POST,
            &uri,
            Some(&s.cookie),
            Some(&format!("csrf={}&budget=keep", s.csrf)),
            &[("sec-fetch-site", "cross-site")],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // No session at all.
    let r = w
        .request(Method::POST, &uri, None, Some("csrf=x"), &[])
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(w.state_of(&id).await, before);

    // With it, the action happens and the audit log names the token.
    let r = w
        .post(&uri, &s, &format!("csrf={}&budget=keep", s.csrf))
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(
        r.headers[header::LOCATION],
        format!("/console/instances/{id}?done=resume").as_str()
    );
    let audit = w.store.audit(None, 0).await.unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].actor, "admin");
    assert_eq!(audit[0].action, "resume");
}

#[tokio::test]
async fn a_read_only_session_sees_no_action_buttons_and_cannot_act() {
    let w = world().await;
    let id = w.failed_instance("billing", "pay").await;
    let admin = w.sign_in(ADMIN).await;
    let page = w.get(&format!("/console/instances/{id}"), &admin).await;
    assert!(page.text.contains("Resume (keep budget)"));
    assert!(page.text.contains("Migrate…"));
    assert!(page.text.contains("Resolve…"));

    let reader = w.sign_in(READER).await;
    let page = w.get(&format!("/console/instances/{id}"), &reader).await;
    assert_eq!(page.status, StatusCode::OK);
    for button in [
        "id=\"actions\"",
        "Resume (",
        "Retry now",
        "Cancel instance",
        "Migrate…",
        "Resolve…",
    ] {
        assert!(!page.text.contains(button), "read-only sees {button}");
    }
    let deployments = w.get("/console/deployments", &reader).await;
    assert!(!deployments.text.contains("Retire…"));
    let confirm = w
        .get(
            &format!("/console/instances/{id}/confirm?action=cancel"),
            &reader,
        )
        .await;
    assert_eq!(confirm.status, StatusCode::FORBIDDEN);

    let before = w.state_of(&id).await;
    for (path, form) in [
        ("cancel", String::new()),
        ("resume", "budget=keep".to_owned()),
        ("retry-now", String::new()),
    ] {
        let r = w
            .post(
                &format!("/console/instances/{id}/{path}"),
                &reader,
                &format!("csrf={}&{form}", reader.csrf),
            )
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{path}");
        assert!(r.text.contains("lacks the `operate` scope"), "{}", r.text);
    }
    let r = w
        .post(
            "/console/migrate",
            &reader,
            &format!("csrf={}&source=1&target=1", reader.csrf),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = w
        .post(
            "/console/deployments/1/retire",
            &reader,
            &format!("csrf={}", reader.csrf),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(w.state_of(&id).await, before);
}

#[tokio::test]
async fn long_and_hostile_ids_are_escaped_and_wrap() {
    let w = world().await;
    let process = format!("p{}", "x".repeat(199));
    let task = format!("t{}", "y".repeat(199));
    let id = w.failed_instance(&process, &task).await;
    let s = w.sign_in(READER).await;
    let pages = [
        format!("/console/instances/{id}"),
        "/console/instances?state=failed".to_owned(),
        format!("/console/instances?node={task}"),
        "/console/incidents".to_owned(),
        "/console/deployments".to_owned(),
        "/console/deployments/1/retries".to_owned(),
        "/console/migrate?source=1&target=1".to_owned(),
    ];
    for uri in &pages {
        let r = w.get(uri, &s).await;
        assert_eq!(r.status, StatusCode::OK, "{uri}: {}", r.text);
        assert!(
            !r.text.contains("<script>alert"),
            "{uri} let markup through"
        );
        assert!(!r.text.contains("<b>bold"), "{uri} let markup through");
    }
    let page = w.get(&format!("/console/instances/{id}"), &s).await;
    assert!(page.text.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(page.text.contains("&lt;b&gt;bold&lt;/b&gt; &amp;"));
    // The 200-character ids sit in elements the stylesheet lets wrap anywhere.
    assert!(
        page.text.contains(&format!(
            r#"<code class="id" id="failed-node">{task}</code>"#
        )),
        "{}",
        page.text
    );
    assert!(page
        .text
        .contains(&format!(r#"<span class="id">{process}</span>"#)));
    let listing = w.get(&format!("/console/instances?node={task}"), &s).await;
    assert!(listing.text.contains(&id), "the node filter finds it");
    let css = w.get(&asset_href(&page.text, "console.css"), &s).await.text;
    assert!(
        css.contains(".id, code, pre { overflow-wrap: anywhere")
            || css.contains("overflow-wrap: anywhere")
    );
}

fn asset_href(page: &str, name: &str) -> String {
    let at = page
        .find(&format!("/{name}\""))
        .expect("the page links the asset");
    let start = page[..at].rfind('"').expect("an attribute") + 1;
    page[start..at + name.len() + 1].to_owned()
}

#[tokio::test]
async fn assets_are_versioned_and_cached_for_a_year() {
    let w = world().await;
    let id = w.failed_instance("billing", "pay").await;
    let s = w.sign_in(READER).await;
    let page = w.get(&format!("/console/instances/{id}"), &s).await;
    for name in [
        "bpmn-viewer.js",
        "console.js",
        "console.css",
        "diagram-js.css",
    ] {
        let href = asset_href(&page.text, name);
        assert!(href.starts_with("/console/assets/"), "{href}");
        let r = w.request(Method::GET, &href, None, None, &[]).await;
        assert_eq!(r.status, StatusCode::OK, "{href}");
        assert_eq!(
            r.headers[header::CACHE_CONTROL],
            "public, max-age=31536000, immutable"
        );
        let stale = href.replace("/console/assets/", "/console/assets/0");
        let r = w.request(Method::GET, &stale, None, None, &[]).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{stale}");
    }
    // The diagram's source is the deployment's own XML, behind the session.
    let r = w
        .request(
            Method::GET,
            "/console/deployments/1/source.bpmn",
            None,
            None,
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    let r = w.get("/console/deployments/1/source.bpmn", &s).await;
    assert!(r.text.contains(r#"q:task="pay""#));
}

#[tokio::test]
async fn a_console_form_over_its_body_limit_is_refused() {
    let w = world().await;
    let s = w.sign_in(ADMIN).await;
    let big = format!(
        "csrf={}&source=1&target=2&pad={}",
        s.csrf,
        "a".repeat(qflow_server::console::FORM_BYTES_MAX)
    );
    let r = w.post("/console/migrate", &s, &big).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.text);
}

/// A migration page opens with a banner when any instance was refused, and without one
/// when none was; the counts are on the page either way.
#[tokio::test]
async fn a_migration_with_a_refusal_opens_with_a_banner_and_one_without_has_none() {
    let w = world().await;
    let moving = w.failed_instance("billing", "pay").await;
    let elsewhere = w.started(&model("shipping", "pay")).await;
    w.wait(|s| s.failed >= 2).await;
    let ops = Ops::with_runtime(w.rt.clone(), "test");
    let target = ops.deploy(&model("billing", "charge"), None).await.unwrap();
    let s = w.sign_in(ADMIN).await;
    let form = |rest: &str| {
        format!(
            "csrf={}&source=1&target={}&map.pay=charge&{rest}",
            s.csrf, target.id
        )
    };
    const BANNER: &str = r#"id="migration-refused""#;

    // Narrowed to an instance of another deployment: refused, in the dry run and applied.
    let before = w.state_of(&elsewhere).await;
    let dry = w
        .post(
            "/console/migrate",
            &s,
            &form(&format!("instance={elsewhere}&mode=dry-run")),
        )
        .await;
    assert_eq!(dry.status, StatusCode::OK, "{}", dry.text);
    assert!(dry.text.contains(BANNER), "{}", dry.text);
    assert!(
        dry.text.contains("1 of 1 instance would be refused"),
        "{}",
        dry.text
    );
    assert!(dry.text.contains("1 instance: 1 refused"), "{}", dry.text);
    assert!(!dry.text.contains("Confirm: migrate"), "nothing to confirm");
    let done = w
        .post(
            "/console/migrate",
            &s,
            &form(&format!("instance={elsewhere}&mode=apply")),
        )
        .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.text);
    let banner = done
        .text
        .find(BANNER)
        .expect("the result page has the banner");
    let table = done.text.find(r#"id="migration-results""#).expect("table");
    assert!(banner < table, "the banner comes before the results");
    assert!(
        done.text
            .contains("1 of 1 instance refused</strong> — nothing was changed for them."),
        "{}",
        done.text
    );
    assert!(
        done.text.contains("deployment 2, not 1"),
        "the reason is in its row: {}",
        done.text
    );
    assert_eq!(w.state_of(&elsewhere).await, before);

    // Every FAILED instance of the source: it moves, and no banner.
    let dry = w.post("/console/migrate", &s, &form("mode=dry-run")).await;
    assert_eq!(dry.status, StatusCode::OK, "{}", dry.text);
    assert!(!dry.text.contains(BANNER), "{}", dry.text);
    assert!(
        dry.text.contains("1 instance: 1 would migrate"),
        "{}",
        dry.text
    );
    assert!(dry.text.contains("Confirm: migrate 1 instance(s)"));
    let done = w.post("/console/migrate", &s, &form("mode=apply")).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.text);
    assert!(!done.text.contains(BANNER), "{}", done.text);
    assert!(
        done.text.contains("1 instance: 1 migrated."),
        "{}",
        done.text
    );
    assert!(done.text.contains(&moving));
    let id = qflow_ops::parse_instance_id(&moving).unwrap();
    let row = w.store.instance(id).await.unwrap().expect("exists");
    assert_eq!(row.deployment.0, target.id);
}

#[tokio::test]
async fn a_parked_instance_shows_its_next_due_instant_and_retries_now() {
    let w = world().await;
    let id = w.started(&model_with("billing", "pay", PARKING)).await;
    w.wait(|s| s.parks >= 1).await;
    let s = w.sign_in(ADMIN).await;
    let page = w.get(&format!("/console/instances/{id}"), &s).await;
    assert!(page.text.contains("RUNNING"), "{}", page.text);
    // The timeline draws the park up to its due instant, an hour after the failure.
    assert!(page.text.contains(r#"id="next-due""#), "{}", page.text);
    assert!(page.text.contains("backoff park"));
    assert!(
        page.text.contains(r#"data-parks="[&quot;pay&quot;]""#),
        "{}",
        page.text
    );
    assert!(page.text.contains("Retry now"));
    assert!(page.text.contains("Cancel instance"));
    let confirm = w
        .get(
            &format!("/console/instances/{id}/confirm?action=retry-now"),
            &s,
        )
        .await;
    assert_eq!(confirm.status, StatusCode::OK);
    assert!(confirm.text.contains("Confirm: retry now"));
    let r = w
        .post(
            &format!("/console/instances/{id}/retry-now"),
            &s,
            &format!("csrf={}", s.csrf),
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let audit = w.store.audit(None, 0).await.unwrap();
    assert_eq!(audit.last().unwrap().action, "retry_now");
    // The retry preview draws the policy: two retries an hour apart.
    let preview = w.get("/console/deployments/1/retries", &s).await;
    assert!(
        preview.text.contains("maxAttempts=3 initialInterval=1h"),
        "{}",
        preview.text
    );
    assert!(preview.text.contains(r#"data-node="pay""#));
}

#[tokio::test]
async fn a_deployment_nothing_blocks_is_retired_from_the_console() {
    let w = world().await;
    let id = w.failed_instance("billing", "pay").await;
    let s = w.sign_in(ADMIN).await;
    // A FAILED instance blocks it: no retire button, and the store refuses anyway.
    let page = w.get("/console/deployments", &s).await;
    assert!(page.text.contains("blocked by"), "{}", page.text);
    assert!(page.text.contains(&id));
    assert!(!page.text.contains("Retire…"));
    let r = w
        .post(
            "/console/deployments/1/retire",
            &s,
            &format!("csrf={}", s.csrf),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    // A deployment nothing references gets the button, and retiring it works.
    let ops = Ops::with_runtime(w.rt.clone(), "test");
    let other = ops.deploy(&model("idle", "pay"), None).await.unwrap();
    let page = w.get("/console/deployments", &s).await;
    assert!(page
        .text
        .contains(&format!("/console/deployments/{}/retire", other.id)));
    let r = w
        .post(
            &format!("/console/deployments/{}/retire", other.id),
            &s,
            &format!("csrf={}", s.csrf),
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let page = w.get("/console/deployments", &s).await;
    assert!(page.text.contains("retired"));
}

#[tokio::test]
async fn the_deployments_page_counts_every_instance_by_state() {
    let w = world().await;
    // Seven FAILED instances of one deployment: more than the page names as blockers.
    let mut ids = Vec::new();
    for n in 0..7 {
        ids.push(w.started(&model("billing", "pay")).await);
        w.wait(|s| s.failed > n).await;
    }
    let s = w.sign_in(ADMIN).await;
    let page = w.get("/console/deployments", &s).await;
    assert!(
        page.text.contains(
            r#"<td class="num" data-label="Failed"><a href="/console/instances?deployment=1&amp;state=failed">7</a>"#
        ),
        "{}",
        page.text
    );
    let named = ids
        .iter()
        .filter(|id| page.text.contains(id.as_str()))
        .count();
    assert_eq!(named, 3, "three of the blockers are named");
    assert!(page.text.contains(" …"), "and the rest are elided");
}
