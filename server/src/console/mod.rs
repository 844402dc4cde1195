//! The operator console (SPEC O6): server-rendered pages on the same router, port and
//! tokens as the JSON API, under `/console`.
//!
//! A person signs in with a token; the server keeps a session ([`session`]) and sets an
//! HttpOnly, SameSite=Strict cookie (Secure when configured or behind a TLS proxy). The
//! read scope sees every page; the operate scope also gets the action buttons, and the
//! deploy scope the retire button. Every state-changing form carries the session's CSRF
//! token, compared in constant time; a post without it, with another one, or from a
//! session whose token lacks the scope is refused and changes nothing.
//!
//! Like the JSON handlers, the console decides nothing about instances: every page reads
//! through [`qflow_ops::Ops`] and every button calls one operation of it, as the signed-in
//! token's name (the audit log's actor). Templates are maud (escaped by construction);
//! the only script is the diagram's ([`assets`]).

mod actions;
pub mod assets;
mod chart;
mod pages;
pub mod session;
mod view;

use axum::extract::{DefaultBodyLimit, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;

use crate::auth::Scope;
use crate::AppState;
pub use session::{Session, Sessions};

/// The console's cookie.
pub const COOKIE: &str = "qflow_session";
/// Largest form the console accepts (a migration mapping of a few hundred nodes).
pub const FORM_BYTES_MAX: usize = 64 * 1024;

/// `[console]` in `qflow.toml`. Every field states its default.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// Mark the session cookie `Secure`. Default false; it is also set on a sign-in that
    /// arrives through a proxy saying `X-Forwarded-Proto: https`.
    pub secure_cookie: bool,
    /// How long a session lives after sign-in. Default 8 hours.
    pub session_ttl_ms: u64,
    /// Most sessions held at once; the one closest to expiry goes first. Default 1,000.
    pub sessions_max: usize,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            secure_cookie: false,
            session_ttl_ms: 8 * 3_600_000,
            sessions_max: 1_000,
        }
    }
}

/// The console's share of the server state.
#[derive(Debug)]
pub struct Console {
    pub sessions: Sessions,
    pub secure_cookie: bool,
}

impl Console {
    pub fn new(config: &ConsoleConfig) -> Console {
        Console {
            sessions: Sessions::new(config.session_ttl_ms, config.sessions_max),
            secure_cookie: config.secure_cookie,
        }
    }
}

/// The console's routes, to merge into the server's router.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/console/") }))
        .route("/console", get(|| async { Redirect::to("/console/") }))
        .route("/console/", get(pages::home))
        .route("/console/assets/{version}/{name}", get(assets::serve))
        .route(
            "/console/sign-in",
            get(pages::sign_in_form).post(actions::sign_in),
        )
        .route("/console/sign-out", post(actions::sign_out))
        .route("/console/instances", get(pages::instances))
        .route("/console/instances/{id}", get(pages::instance))
        .route("/console/instances/{id}/confirm", get(pages::confirm))
        .route("/console/instances/{id}/resume", post(actions::resume))
        .route(
            "/console/instances/{id}/retry-now",
            post(actions::retry_now),
        )
        .route("/console/instances/{id}/cancel", post(actions::cancel))
        .route(
            "/console/instances/{id}/resolve-incident",
            post(actions::resolve_incident),
        )
        .route("/console/incidents", get(pages::incidents))
        .route("/console/deployments", get(pages::deployments))
        .route(
            "/console/deployments/{id}/source.bpmn",
            get(pages::deployment_source),
        )
        .route("/console/deployments/{id}/retries", get(pages::retries))
        .route(
            "/console/deployments/{id}/retire",
            get(pages::confirm_retire).post(actions::retire),
        )
        .route(
            "/console/migrate",
            get(pages::migrate).post(actions::migrate),
        )
        .layer(DefaultBodyLimit::max(FORM_BYTES_MAX))
        .layer(middleware::from_fn(headers))
}

/// Headers on every console response: no framing, no sniffing, no referrer, scripts and
/// styles from this origin only, and no caching of pages (assets set their own).
async fn headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    let set = |h: &mut HeaderMap, name: header::HeaderName, value: &'static str| {
        h.entry(name).or_insert(HeaderValue::from_static(value));
    };
    set(
        h,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
         img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; \
         form-action 'self'; base-uri 'none'",
    );
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(h, header::X_FRAME_OPTIONS, "DENY");
    set(h, header::REFERRER_POLICY, "no-referrer");
    set(h, header::CACHE_CONTROL, "no-store");
    response
}

/// The signed-in person of a console request. A page request without a live session is
/// sent to the sign-in form; a post without one is refused.
pub struct Viewer {
    pub session: Session,
}

impl Viewer {
    pub fn can(&self, scope: Scope) -> bool {
        self.session.can(scope)
    }
}

/// The session id in the request's cookie, if any.
fn cookie_value(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let session = cookie_value(&parts.headers).and_then(|id| state.console.sessions.get(id));
        match session {
            Some(session) => Ok(Viewer { session }),
            None if parts.method == Method::GET || parts.method == Method::HEAD => {
                Err(Redirect::to("/console/sign-in").into_response())
            }
            None => Err(view::refusal(
                StatusCode::FORBIDDEN,
                "Not signed in",
                "This form needs a signed-in session; nothing was changed.",
            )),
        }
    }
}

/// A posted console form, its fields in order.
pub struct Form(pub Vec<(String, String)>);

impl Form {
    pub fn parse(body: &[u8]) -> Form {
        Form(form_urlencoded::parse(body).into_owned().collect())
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The checks before any state-changing form is acted on: the request is not a
/// cross-site one (when the browser says so), the form's CSRF token is the session's,
/// and the session's token has `scope`. The refusal is the response to send.
pub fn authorise(
    viewer: &Viewer,
    headers: &HeaderMap,
    form: &Form,
    scope: Scope,
) -> Result<(), Response> {
    let cross_site = headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site");
    let csrf_ok = form
        .get("csrf")
        .is_some_and(|presented| viewer.session.csrf_matches(presented));
    if cross_site || !csrf_ok {
        return Err(view::refusal(
            StatusCode::FORBIDDEN,
            "Form refused",
            "The form did not carry this session's CSRF token (it was forged, or is from \
             an older session); nothing was changed.",
        ));
    }
    if !viewer.can(scope) {
        return Err(view::refusal(
            StatusCode::FORBIDDEN,
            "Not allowed",
            &format!(
                "Token `{}` lacks the `{}` scope this action needs; nothing was changed.",
                viewer.session.name,
                scope.as_str()
            ),
        ));
    }
    Ok(())
}
