//! The console's forms (POST). Each one is checked by [`super::authorise`] (CSRF token,
//! scope) before it calls one operation of `Ops` as the signed-in token's name; a
//! success redirects to the page that shows the result (post/redirect/get), a refusal
//! renders why, with nothing changed.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use qflow_core::Budget;
use qflow_ops::{MigrationOutcome, MigrationPlan, MigrationReport, MigrationResult};

use super::view::{self, page, status, Nav};
use super::{authorise, cookie_value, Form, Viewer, COOKIE};
use crate::auth::Scope;
use crate::AppState;

fn cookie(state: &AppState, headers: &HeaderMap, value: &str, max_age_s: u64) -> HeaderValue {
    let behind_tls = headers
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
    let secure = if state.console.secure_cookie || behind_tls {
        "; Secure"
    } else {
        ""
    };
    let text = format!(
        "{COOKIE}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={max_age_s}{secure}"
    );
    HeaderValue::from_str(&text).expect("a cookie of hex digits is a header value")
}

/// Signs in with a token: a session for it, and its cookie. A token without the read
/// scope cannot sign in. The token is never logged or echoed.
pub async fn sign_in(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let cross_site = headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site");
    let form = Form::parse(&body);
    let presented = form.get("token").map(str::trim).unwrap_or("");
    let token = (!cross_site && !presented.is_empty())
        .then(|| state.tokens.find(presented))
        .flatten();
    let Some(token) = token.filter(|t| t.scopes.contains(&Scope::Read)) else {
        let page = super::pages::sign_in_page(Some(
            "That token is not one this server accepts for the console (it needs the read scope).",
        ));
        return view::respond(StatusCode::UNAUTHORIZED, page);
    };
    let (id, _) = match state.console.sessions.create(&token.name, &token.scopes) {
        Ok(s) => s,
        Err(_) => {
            return view::refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "No session",
                "The system's randomness could not be read; try again.",
            )
        }
    };
    tracing::info!(token = %token.name, "console: signed in");
    let max_age = state.console.sessions.ttl().as_secs();
    let mut response = Redirect::to("/console/instances").into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, cookie(&state, &headers, &id, max_age));
    response
}

pub async fn sign_out(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = Form::parse(&body);
    if let Err(refused) = authorise(&viewer, &headers, &form, Scope::Read) {
        return refused;
    }
    if let Some(id) = cookie_value(&headers) {
        state.console.sessions.remove(id);
    }
    let mut response = Redirect::to("/console/sign-in").into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, cookie(&state, &headers, "", 0));
    response
}

/// The common shape of an instance action: authorise, parse the id, call, redirect.
async fn instance_action<F, Fut>(
    state: &AppState,
    viewer: &Viewer,
    headers: &HeaderMap,
    id: &str,
    body: &[u8],
    done: &str,
    call: F,
) -> Response
where
    F: FnOnce(qflow_ops::Ops, qflow_store::InstanceId, Form) -> Fut,
    Fut: std::future::Future<Output = qflow_ops::Result<qflow_ops::Applied>>,
{
    let form = Form::parse(body);
    if let Err(refused) = authorise(viewer, headers, &form, Scope::Operate) {
        return refused;
    }
    let back = format!("/console/instances/{id}");
    let parsed = match qflow_ops::parse_instance_id(id) {
        Ok(i) => i,
        Err(e) => return view::ops_error(viewer, e, "/console/instances"),
    };
    let ops = state.ops.as_actor(&viewer.session.name);
    match call(ops, parsed, form).await {
        Ok(applied) => Redirect::to(&format!(
            "/console/instances/{}?done={done}",
            applied.instance
        ))
        .into_response(),
        Err(e) => view::ops_error(viewer, e, &back),
    }
}

pub async fn resume(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    instance_action(
        &state,
        &viewer,
        &headers,
        &id,
        &body,
        "resume",
        |ops, id, form| async move {
            let budget = match form.get("budget") {
                Some("keep") => Budget::Keep,
                Some("reset") => Budget::Reset,
                other => {
                    return Err(qflow_ops::Error::Invalid {
                        field: "budget",
                        why: format!("{other:?} is not `keep` or `reset`"),
                    })
                }
            };
            ops.resume(id, budget).await
        },
    )
    .await
}

pub async fn retry_now(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    instance_action(
        &state,
        &viewer,
        &headers,
        &id,
        &body,
        "retry-now",
        |ops, id, form| async move {
            let node = form
                .get("node")
                .filter(|n| !n.is_empty())
                .map(str::to_owned);
            ops.retry_now(id, node).await
        },
    )
    .await
}

pub async fn cancel(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    instance_action(
        &state,
        &viewer,
        &headers,
        &id,
        &body,
        "cancel",
        |ops, id, _| async move { ops.cancel(id).await },
    )
    .await
}

pub async fn resolve_incident(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    instance_action(
        &state,
        &viewer,
        &headers,
        &id,
        &body,
        "resolve-incident",
        |ops, id, form| async move {
            let node = form.get("node").unwrap_or("").to_owned();
            ops.resolve_incident(id, &node).await
        },
    )
    .await
}

pub async fn retire(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let form = Form::parse(&body);
    if let Err(refused) = authorise(&viewer, &headers, &form, Scope::Deploy) {
        return refused;
    }
    let Ok(id) = id.parse::<i64>() else {
        return view::refusal(
            StatusCode::BAD_REQUEST,
            "Not accepted",
            "That is not a deployment version.",
        );
    };
    match state.ops.as_actor(&viewer.session.name).retire(id).await {
        Ok(_) => Redirect::to("/console/deployments").into_response(),
        Err(e) => view::ops_error(&viewer, e, "/console/deployments"),
    }
}

/// The migration form: `mode=dry-run` shows what would change per instance and a form to
/// confirm; `mode=apply` migrates and shows each instance's result.
pub async fn migrate(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = Form::parse(&body);
    if let Err(refused) = authorise(&viewer, &headers, &form, Scope::Operate) {
        return refused;
    }
    let back = "/console/migrate";
    let int = |name: &'static str| -> qflow_ops::Result<i64> {
        form.get(name)
            .and_then(|v| v.trim().parse().ok())
            .ok_or(qflow_ops::Error::Invalid {
                field: name,
                why: "a deployment version is needed".to_owned(),
            })
    };
    let (source, target) = match (int("source"), int("target")) {
        (Ok(s), Ok(t)) => (s, t),
        (Err(e), _) | (_, Err(e)) => return view::ops_error(&viewer, e, back),
    };
    let mapping: BTreeMap<String, String> = form
        .0
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("map.")?.to_owned(), v.trim().to_owned())))
        .filter(|(k, v)| !v.is_empty() && k != v)
        .collect();
    let instance = form
        .get("instance")
        .filter(|i| !i.is_empty())
        .map(str::to_owned);
    let plan = MigrationPlan {
        source,
        target,
        mapping,
        instances: instance.clone().map(|i| vec![i]),
    };
    let dry_run = form.get("mode") != Some("apply");
    let report = match state
        .ops
        .as_actor(&viewer.session.name)
        .migrate(&plan, dry_run)
        .await
    {
        Ok(r) => r,
        Err(e) => return view::ops_error(&viewer, e, back),
    };
    let summary = report.summary;
    let would = summary.would_migrate;
    let body = html! {
        h1 { @if dry_run { "Dry run: " } @else { "Migrated: " } "deployment " (source) " → " (target) }
        (refused_banner(&report, dry_run))
        p {
            "Mapping: "
            @if plan.mapping.is_empty() { "every node keeps its id" }
            @for (k, (from, to)) in plan.mapping.iter().enumerate() { @if k > 0 { ", " } code { (from) } " → " code { (to) } }
            "."
        }
        @if dry_run {
            p.notice #migration-summary { "Nothing has been written yet. " (summary) ". Read each diff, then confirm." }
        } @else {
            p.notice.ok[!report.any_refused()] #migration-summary role="status" {
                (summary) "."
                @if summary.migrated > 0 { " A migrated FAILED instance stays FAILED on the new version: resume it from its page." }
            }
        }
        (results_table(&report.results, dry_run))
        @if dry_run && would > 0 {
            form method="post" action="/console/migrate" #confirm-migration {
                (view::csrf(&viewer))
                input type="hidden" name="source" value=(source);
                input type="hidden" name="target" value=(target);
                @if let Some(i) = &instance { input type="hidden" name="instance" value=(i); }
                @for (from, to) in &plan.mapping { input type="hidden" name={ "map." (from) } value=(to); }
                input type="hidden" name="mode" value="apply";
                div.actions {
                    button #confirm type="submit" { "Confirm: migrate " (would) " instance(s)" }
                    a.button.secondary href={ "/console/migrate?source=" (source) "&target=" (target) } { "Back, change nothing" }
                }
            }
        }
    };
    let title = if dry_run {
        "Migration dry run"
    } else {
        "Migration result"
    };
    view::respond(
        StatusCode::OK,
        page(title, Some(&viewer), Nav::Migrate, body),
    )
}

/// The banner at the top of a migration's page when any instance was (or would be)
/// refused, so a refusal cannot hide in a long table; nothing when none was.
fn refused_banner(report: &MigrationReport, dry_run: bool) -> maud::Markup {
    let s = report.summary;
    let noun = if s.total == 1 {
        "instance"
    } else {
        "instances"
    };
    html! {
        @if report.any_refused() {
            p.notice.bad #migration-refused role="alert" {
                strong {
                    (s.refused) " of " (s.total) " " (noun)
                    @if dry_run { " would be refused" } @else { " refused" }
                }
                @if dry_run {
                    " — confirming leaves them as they are."
                } @else {
                    " — nothing was changed for them."
                }
                " Each reason is in its row below."
            }
        }
    }
}

fn results_table(results: &[MigrationResult], dry_run: bool) -> maud::Markup {
    html! {
        div.scroll {
            table.stack #migration-results {
                thead { tr { th { "Instance" } th { "Outcome" } th { @if dry_run { "What would change" } @else { "What changed" } } } }
                tbody {
                    @for r in results {
                        tr {
                            td data-label="Instance" { a.id href={ "/console/instances/" (r.instance) } { (r.instance) } }
                            td data-label="Outcome" {
                                @match r.outcome {
                                    MigrationOutcome::Refused => { (status("failed")) " refused" },
                                    other => { (other.words()) },
                                }
                                @if let Some(f) = r.fence_after { br; span.muted { "fence " (f) } }
                            }
                            td data-label="Changes" {
                                @if let Some(why) = &r.reason { p.notice.bad { (why) } }
                                @if !r.changes.is_empty() { pre.diff { @for c in &r.changes { (c) "\n" } } }
                            }
                        }
                    }
                    @if results.is_empty() { tr { td colspan="3" { "No FAILED or running instance on the source deployment." } } }
                }
            }
        }
    }
}
