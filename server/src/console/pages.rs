//! The console's pages (GET): each reads through `Ops` and renders. Action buttons are
//! drawn only for a session whose token has the scope the action needs; the posts behind
//! them check again ([`super::authorise`]).

use std::collections::BTreeMap;

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{html, Markup};
use qflow_core::TimerKind;
use qflow_ops::explain::{human_ms, milli_text, Reach};
use qflow_ops::{InstanceQuery, InstanceView, NodeInfo, TimerView};

use super::view::{self, page, status, time, Nav};
use super::{assets, chart, Viewer};
use crate::auth::Scope;
use crate::AppState;

/// Rows per page of the instance listing.
pub const PAGE_ROWS: u32 = 50;
/// Incidents shown at most on the incidents page (newest first).
pub const INCIDENT_ROWS_MAX: usize = 500;
/// Instances named as blocking a retirement, at most.
const BLOCKERS_SHOWN: usize = 3;

/// The query string's pairs.
fn params(raw: &Option<String>) -> BTreeMap<String, String> {
    raw.as_deref()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

fn int_param(
    p: &BTreeMap<String, String>,
    name: &'static str,
) -> Result<Option<i64>, qflow_ops::Error> {
    match p.get(name).map(|s| s.trim()).filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => s.parse().map(Some).map_err(|_| qflow_ops::Error::Invalid {
            field: name,
            why: format!("`{s}` is not a deployment version (an integer)"),
        }),
    }
}

fn text_param<'a>(p: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
    p.get(name).map(|s| s.trim()).filter(|s| !s.is_empty())
}

pub async fn home(_viewer: Viewer) -> Redirect {
    Redirect::to("/console/instances")
}

pub async fn sign_in_form() -> Response {
    view::respond(StatusCode::OK, sign_in_page(None))
}

pub fn sign_in_page(error: Option<&str>) -> Markup {
    let body = html! {
        div.signin {
            h1 { "Sign in to the qflow console" }
            @if let Some(e) = error { p.notice.bad role="alert" { (e) } }
            form method="post" action="/console/sign-in" {
                div.field {
                    label for="token" { "API token" }
                    input #token type="password" name="token" autocomplete="off" required autofocus;
                }
                p.muted { "The same bearer token the JSON API takes. A token with the read scope sees; the operate scope acts." }
                button type="submit" { "Sign in" }
            }
        }
    };
    page("Sign in", None, Nav::None, body)
}

fn instance_link(id: &str) -> Markup {
    html! { a.id href={ "/console/instances/" (id) } { (id) } }
}

pub async fn instances(
    State(state): State<AppState>,
    viewer: Viewer,
    RawQuery(raw): RawQuery,
) -> Response {
    let p = params(&raw);
    let deployment = match int_param(&p, "deployment") {
        Ok(d) => d,
        Err(e) => return view::ops_error(&viewer, e, "/console/instances"),
    };
    let state_filter = text_param(&p, "state");
    let code = text_param(&p, "failure_code");
    let node = text_param(&p, "node");
    let cursor = text_param(&p, "cursor");
    let query = InstanceQuery {
        deployment,
        status: state_filter.map(str::to_owned),
        failure_code: code.map(str::to_owned),
        node: node.map(str::to_owned),
        cursor: cursor.map(str::to_owned),
        limit: PAGE_ROWS,
        ..InstanceQuery::default()
    };
    let (listing, deployments, counts) = match tokio::try_join!(
        state.ops.instances(&query),
        state.ops.deployments(),
        state.ops.instance_counts(deployment),
    ) {
        Ok(x) => x,
        Err(e) => return view::ops_error(&viewer, e, "/console/instances"),
    };
    let dep_text = deployment.map(|d| d.to_string());
    let filters = [
        ("deployment", dep_text.as_deref()),
        ("state", state_filter),
        ("failure_code", code),
        ("node", node),
    ];
    let next = listing.next.as_deref().map(|n| {
        let mut pairs = filters.to_vec();
        pairs.push(("cursor", Some(n)));
        format!("/console/instances?{}", view::query(&pairs))
    });
    let body = html! {
        h1 { "Instances" }
        ul.counts #counts aria-label="Counts by state, whole store" {
            @for (s, n) in [("running", counts.running), ("failed", counts.failed), ("completed", counts.completed), ("cancelled", counts.cancelled)] {
                li { a href={ "/console/instances?state=" (s) } aria-current=[(state_filter == Some(s)).then_some("true")] { (status(s)) " " strong data-state=(s) { (n) } } }
            }
        }
        form.filters method="get" action="/console/instances" role="search" aria-label="Filter instances" {
            label { "Deployment"
                select name="deployment" {
                    option value="" { "any" }
                    @for d in &deployments {
                        option value=(d.id) selected[deployment == Some(d.id)] { (d.id) " · " (d.process_id) @if d.retired { " (retired)" } }
                    }
                }
            }
            label { "State"
                select name="state" {
                    option value="" { "any" }
                    @for s in ["running", "failed", "completed", "cancelled"] {
                        option value=(s) selected[state_filter == Some(s)] { (s) }
                    }
                }
            }
            label { "Failure code" input type="text" name="failure_code" value=[code] placeholder="e.g. GATEWAY_UNAVAILABLE"; }
            label { "Node" input type="text" name="node" value=[node] placeholder="where it stands or failed"; }
            button type="submit" { "Filter" }
            a.button.secondary href="/console/instances" { "Clear" }
        }
        p.muted { "Oldest first, " (PAGE_ROWS) " a page." }
        div.scroll {
            table.stack #instances {
                thead { tr { th { "Instance" } th { "State" } th { "Failure code" } th.num { "Deployment" } th { "Created" } th { "Updated" } } }
                tbody {
                    @for i in &listing.items {
                        tr {
                            td data-label="Instance" { (instance_link(&i.id)) @if let Some(k) = &i.business_key { br; span.muted.id { "key " (k) } } }
                            td data-label="State" { (status(i.status)) }
                            td data-label="Failure code" { @if let Some(c) = &i.failure_code { code { (c) } } }
                            td.num data-label="Deployment" { a href={ "/console/instances?deployment=" (i.deployment) } { (i.deployment) } }
                            td data-label="Created" { (time(i.created_at_ms)) }
                            td data-label="Updated" { (time(i.updated_at_ms)) }
                        }
                    }
                    @if listing.items.is_empty() { tr { td colspan="6" { "No instance matches." } } }
                }
            }
        }
        nav.actions aria-label="Pages" {
            @if cursor.is_some() {
                a.button.secondary href={ "/console/instances?" (view::query(&filters)) } { "First page" }
            }
            @if let Some(n) = &next { a.button.secondary rel="next" href=(n) { "Next page" } }
        }
    };
    view::respond(
        StatusCode::OK,
        page("Instances", Some(&viewer), Nav::Instances, body),
    )
}

/// The node ids of the instance's snapshot that the diagram marks.
struct Marks {
    tokens: Vec<String>,
    parks: Vec<String>,
    failed: Vec<String>,
}

fn marks(v: &InstanceView) -> Marks {
    let s = &v.snapshot;
    let strings = |key: &str| -> Vec<String> {
        match s.get(key) {
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect(),
            Some(serde_json::Value::Object(o)) => o.keys().cloned().collect(),
            _ => Vec::new(),
        }
    };
    let failed = s
        .get("failure")
        .and_then(|f| f.get("node"))
        .and_then(|n| n.as_str())
        .map(|n| vec![n.to_owned()])
        .unwrap_or_default();
    let mut parks = strings("backoff_markers");
    for t in &v.timers {
        if let (TimerKind::Retry, Some(n)) = (t.kind, &t.node) {
            if !parks.contains(n) {
                parks.push(n.clone());
            }
        }
    }
    Marks {
        tokens: strings("frontier"),
        parks,
        failed,
    }
}

fn json_list(items: &[String]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".to_owned())
}

fn timer_kind(kind: TimerKind) -> &'static str {
    match kind {
        TimerKind::Retry => "backoff park",
        TimerKind::Timeout => "timeout",
        TimerKind::Boundary => "boundary timer",
        TimerKind::Catch => "timer catch",
        TimerKind::Lease => "in-flight lease",
        TimerKind::Lock => "worker's lock",
    }
}

fn pending_retries(timers: &[TimerView]) -> BTreeMap<String, i64> {
    timers
        .iter()
        .filter(|t| t.kind == TimerKind::Retry)
        .filter_map(|t| t.node.clone().map(|n| (n, t.due_at_ms)))
        .collect()
}

const DONE: [(&str, &str); 5] = [
    ("resume", "Resumed: the failed task runs a new attempt."),
    (
        "retry-now",
        "Retry now: the pending backoff was skipped; the next attempt runs now.",
    ),
    ("cancel", "Cancelled."),
    ("resolve-incident", "The incident is resolved."),
    ("migrate", "Migrated."),
];

pub async fn instance(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let back = "/console/instances";
    let parsed = match qflow_ops::parse_instance_id(&id) {
        Ok(i) => i,
        Err(e) => return view::ops_error(&viewer, e, back),
    };
    let (v, history, audit) = match tokio::try_join!(
        state.ops.inspect(parsed),
        state.ops.history(parsed),
        state.ops.audit(Some(parsed), 50),
    ) {
        Ok(x) => x,
        Err(e) => return view::ops_error(&viewer, e, back),
    };
    let p = params(&raw);
    let done = p
        .get("done")
        .and_then(|d| DONE.iter().find(|(k, _)| k == d))
        .map(|(_, t)| *t);
    let m = marks(&v);
    let dues = pending_retries(&v.timers);
    let i = &v.instance;
    let failure = v.snapshot.get("failure");
    let operate = viewer.can(Scope::Operate);
    let confirm = |action: &str| format!("/console/instances/{}/confirm?action={action}", i.id);
    let body = html! {
        @if let Some(d) = done { p.notice.ok role="status" { (d) } }
        h1 { "Instance " span.id { (i.id) } }
        dl.facts {
            dt { "State" } dd { (status(i.status)) }
            @if let Some(f) = failure {
                dt { "Failure code" } dd { code #failure-code { (f.get("code").and_then(|c| c.as_str()).unwrap_or("")) } }
                dt { "Failed node" } dd { code.id #failed-node { (f.get("node").and_then(|c| c.as_str()).unwrap_or("")) } }
                dt { "Detail" } dd { (f.get("detail").and_then(|c| c.as_str()).unwrap_or("")) }
            }
            dt { "Deployment" } dd { a href={ "/console/instances?deployment=" (v.deployment.id) } { (v.deployment.id) } " · " span.id { (v.deployment.process_id) } }
            @if let Some(k) = &i.business_key { dt { "Business key" } dd.id { (k) } }
            dt { "Created" } dd { (time(i.created_at_ms)) }
            dt { "Updated" } dd { (time(i.updated_at_ms)) }
            dt { "Fence" } dd { (i.fence) }
        }
        @if operate {
            div.actions #actions role="group" aria-label="Actions" {
                @if i.status == "failed" {
                    a.button href=(confirm("resume-keep")) { "Resume (keep budget)" }
                    a.button href=(confirm("resume-reset")) { "Resume (reset budget)" }
                }
                @if !dues.is_empty() {
                    a.button href=(confirm("retry-now")) { "Retry now" }
                }
                @if i.status == "failed" || i.status == "running" {
                    a.button.secondary href={ "/console/migrate?" (view::query(&[("source", Some(&v.deployment.id.to_string())), ("instance", Some(&i.id))])) } { "Migrate…" }
                }
                // A FAILED instance can be cancelled too (its failure's incident is
                // resolved), as Zeebe and Camunda 7 cancel one with an incident.
                @if i.status == "running" || i.status == "failed" {
                    a.button.danger href=(confirm("cancel")) { "Cancel instance" }
                }
            }
        }
        h2 #diagram-heading { "Diagram" }
        ul.legend {
            li { span.sw.failed {} "failed node" }
            li { span.sw.token {} "token (where it waits)" }
            li { span.sw.park {} "backoff park" }
        }
        div #diagram role="img" aria-labelledby="diagram-heading"
            data-source={ "/console/deployments/" (v.deployment.id) "/source.bpmn" }
            data-tokens=(json_list(&m.tokens)) data-parks=(json_list(&m.parks)) data-failed=(json_list(&m.failed)) {}
        p #diagram-note.muted {
            "Failed: " (list_or_none(&m.failed)) ". Tokens: " (list_or_none(&m.tokens)) ". Parks: " (list_or_none(&m.parks)) "."
        }
        h2 { "Attempts" }
        div.scroll { (chart::attempts(&history, &dues)) }
        div.scroll {
            table.stack #attempts {
                thead { tr { th { "Task" } th.num { "Attempt" } th { "Outcome" } th { "Code" } th { "Message" } th { "Started" } th.num { "Ran" } th.num { "Backoff after" } } }
                tbody {
                    @for (k, a) in history.iter().enumerate() {
                        @let next = history[k + 1..].iter().find(|b| b.node == a.node);
                        tr {
                            td.id data-label="Task" { (a.node) }
                            td.num data-label="Attempt" { (a.attempt) }
                            td data-label="Outcome" { (a.outcome) }
                            td data-label="Code" { @if let Some(c) = &a.code { code { (c) } } }
                            td data-label="Message" { @if let Some(msg) = &a.message { (msg) } }
                            td data-label="Started" { (time(a.started_at_ms)) }
                            td.num data-label="Ran" { (human_ms((a.finished_at_ms - a.started_at_ms).max(0) as u64)) }
                            td.num data-label="Backoff after" {
                                @if let Some(n) = next { (human_ms((n.started_at_ms - a.finished_at_ms).max(0) as u64)) }
                                @else if let Some(due) = dues.get(&a.node) { "until " (time(*due)) }
                            }
                        }
                    }
                    @if history.is_empty() { tr { td colspan="8" { "No attempt recorded." } } }
                }
            }
        }
        h2 { "Timers" }
        div.scroll {
            table.stack #timers {
                thead { tr { th { "Timer" } th { "Kind" } th { "Node" } th { "Due" } th.num { "Incarnation" } } }
                tbody {
                    @for t in &v.timers {
                        tr {
                            td.id data-label="Timer" { (t.name) }
                            td data-label="Kind" { (timer_kind(t.kind)) }
                            td.id data-label="Node" { @if let Some(n) = &t.node { (n) } }
                            td data-label="Due" { (time(t.due_at_ms)) }
                            td.num data-label="Incarnation" { (t.incarnation) }
                        }
                    }
                    @if v.timers.is_empty() { tr { td colspan="5" { "No live timer." } } }
                }
            }
        }
        h2 { "Incidents" }
        (incident_table(&viewer, &v.incidents, false))
        h2 { "Variables" }
        pre #variables { (pretty(v.snapshot.get("variables").unwrap_or(&serde_json::json!({})))) }
        details open {
            summary { h2 style="display:inline" { "Decoded snapshot" } }
            pre #snapshot { (pretty(&v.snapshot)) }
        }
        h2 { "Audit" }
        div.scroll {
            table.stack #audit {
                thead { tr { th { "When" } th { "Actor" } th { "Action" } th { "Detail" } th { "Fences" } } }
                tbody {
                    @for a in &audit {
                        tr {
                            td data-label="When" { (time(a.at_ms)) }
                            td.id data-label="Actor" { (a.actor) }
                            td data-label="Action" { (a.action) }
                            td.id data-label="Detail" { (a.detail) }
                            td data-label="Fences" { @if let Some(b) = a.fence_before { (b) " → " } (a.fence_after) }
                        }
                    }
                    @if audit.is_empty() { tr { td colspan="5" { "No operator action on this instance." } } }
                }
            }
        }
        script src=(assets::href("bpmn-viewer.js")) {}
        script src=(assets::href("console.js")) {}
    };
    let head_css = html! {
        link rel="stylesheet" href=(assets::href("diagram-js.css"));
        link rel="stylesheet" href=(assets::href("bpmn-js.css"));
    };
    let title = format!("Instance {}", i.id);
    let markup = view::page_with_head(&title, Some(&viewer), Nav::Instances, head_css, body);
    view::respond(StatusCode::OK, markup)
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

fn incident_table(
    viewer: &Viewer,
    incidents: &[qflow_ops::IncidentView],
    with_instance: bool,
) -> Markup {
    let operate = viewer.can(Scope::Operate);
    html! {
        div.scroll {
            table.stack.incidents {
                thead { tr {
                    @if with_instance { th { "Instance" } }
                    th { "Node" } th { "Code" } th { "Message" } th { "Opened" } th { "Resolved" }
                    @if operate { th { "Action" } }
                } }
                tbody {
                    @for inc in incidents {
                        tr {
                            @if with_instance { td data-label="Instance" { (instance_link(&inc.instance)) } }
                            td.id data-label="Node" { (inc.node) }
                            td data-label="Code" { code { (inc.code) } }
                            td data-label="Message" { (inc.message) }
                            td data-label="Opened" { (time(inc.opened_at_ms)) }
                            td data-label="Resolved" { @if let Some(r) = inc.resolved_at_ms { (time(r)) } @else { "open" } }
                            @if operate {
                                td data-label="Action" {
                                    @if inc.resolved_at_ms.is_none() {
                                        a.button.secondary href={ "/console/instances/" (inc.instance) "/confirm?" (view::query(&[("action", Some("resolve-incident")), ("node", Some(&inc.node))])) } { "Resolve…" }
                                    }
                                }
                            }
                        }
                    }
                    @if incidents.is_empty() { tr { td colspan="7" { "No incident." } } }
                }
            }
        }
    }
}

/// What a confirmation page says and where its form posts.
struct Confirm {
    title: &'static str,
    what: &'static str,
    path: &'static str,
    fields: Vec<(&'static str, String)>,
    danger: bool,
}

fn confirm_for(action: &str, node: Option<&str>) -> Option<Confirm> {
    let c = |title, what, path, fields: Vec<(&'static str, String)>, danger| Confirm {
        title,
        what,
        path,
        fields,
        danger,
    };
    Some(match action {
        "resume-keep" => c("Resume, keeping the budget", "The failed task runs one new attempt; the attempts it burned still count, so if this one fails the instance is FAILED again.", "resume", vec![("budget", "keep".to_owned())], false),
        "resume-reset" => c("Resume, resetting the budget", "The failed task's retry policy starts over: its attempts, backoff curve and maxElapsed begin again.", "resume", vec![("budget", "reset".to_owned())], false),
        "retry-now" => c("Retry now", "The pending backoff park is skipped and the next attempt runs now; the attempt counter is not touched.", "retry-now", Vec::new(), false),
        "cancel" => c("Cancel the instance", "The instance ends as CANCELLED. This cannot be undone.", "cancel", Vec::new(), true),
        "resolve-incident" => c("Resolve the incident", "The incident is marked as understood and dealt with; nothing else about the instance changes.", "resolve-incident", vec![("node", node?.to_owned())], false),
        _ => return None,
    })
}

pub async fn confirm(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    if !viewer.can(Scope::Operate) {
        return view::refusal(
            StatusCode::FORBIDDEN,
            "Not allowed",
            &format!(
                "Token `{}` lacks the `operate` scope; this token can only look.",
                viewer.session.name
            ),
        );
    }
    let p = params(&raw);
    let Some(c) = p
        .get("action")
        .and_then(|a| confirm_for(a, text_param(&p, "node")))
    else {
        return view::refusal(
            StatusCode::BAD_REQUEST,
            "No such action",
            "The action is not one the console knows.",
        );
    };
    let parsed = match qflow_ops::parse_instance_id(&id) {
        Ok(i) => i,
        Err(e) => return view::ops_error(&viewer, e, "/console/instances"),
    };
    let v = match state.ops.inspect(parsed).await {
        Ok(v) => v,
        Err(e) => return view::ops_error(&viewer, e, "/console/instances"),
    };
    let back = format!("/console/instances/{}", v.instance.id);
    let body = html! {
        h1 { (c.title) "?" }
        p { "Instance " span.id { (v.instance.id) } " is " (status(v.instance.status)) "." }
        p.notice { (c.what) }
        form method="post" action={ "/console/instances/" (v.instance.id) "/" (c.path) } {
            (view::csrf(&viewer))
            @for (k, val) in &c.fields { input type="hidden" name=(k) value=(val); }
            div.actions {
                button.danger[c.danger] #confirm type="submit" { "Confirm: " (c.title.to_lowercase()) }
                a.button.secondary href=(back) { "Back, change nothing" }
            }
        }
    };
    view::respond(
        StatusCode::OK,
        page(c.title, Some(&viewer), Nav::Instances, body),
    )
}

pub async fn incidents(
    State(state): State<AppState>,
    viewer: Viewer,
    RawQuery(raw): RawQuery,
) -> Response {
    let p = params(&raw);
    let open_only = !p.contains_key("all");
    // One more than is shown, to say whether there are more: a bounded read however many
    // incidents the store holds.
    let mut all = match state
        .ops
        .latest_incidents(INCIDENT_ROWS_MAX as u32 + 1, open_only)
        .await
    {
        Ok(i) => i,
        Err(e) => return view::ops_error(&viewer, e, "/console/"),
    };
    let total = all.len();
    all.truncate(INCIDENT_ROWS_MAX);
    let body = html! {
        h1 { "Incidents" }
        p {
            @if open_only { "Open incidents, newest first. " a href="/console/incidents?all=1" { "Show resolved ones too" } }
            @else { "All incidents, newest first. " a href="/console/incidents" { "Only open ones" } }
        }
        @if total > INCIDENT_ROWS_MAX { p.muted { "Showing the newest " (INCIDENT_ROWS_MAX) "; older ones are on each instance's page and in GET /v1/incidents." } }
        (incident_table(&viewer, &all, true))
    };
    view::respond(
        StatusCode::OK,
        page("Incidents", Some(&viewer), Nav::Incidents, body),
    )
}

pub async fn deployments(State(state): State<AppState>, viewer: Viewer) -> Response {
    let all = match state.ops.deployments().await {
        Ok(d) => d,
        Err(e) => return view::ops_error(&viewer, e, "/console/"),
    };
    let mut rows = Vec::with_capacity(all.len());
    for d in &all {
        match blockers(&state, d.id).await {
            Ok(b) => rows.push((d, b)),
            Err(e) => return view::ops_error(&viewer, e, "/console/"),
        }
    }
    let deploy = viewer.can(Scope::Deploy);
    let operate = viewer.can(Scope::Operate);
    let body = html! {
        h1 { "Deployments" }
        p.muted { "A deployment cannot be retired while running or FAILED instances reference it." }
        div.scroll {
            table.stack #deployments {
                thead { tr { th.num { "Version" } th { "Process" } th { "Content" } th { "Deployed" } th.num { "Running" } th.num { "Failed" } th.num { "Completed" } th.num { "Cancelled" } th { "Retirement" } th { "More" } } }
                tbody {
                    @for (d, b) in &rows {
                        tr {
                            td.num data-label="Version" { (d.id) }
                            td.id data-label="Process" { (d.process_id) }
                            td data-label="Content" { code title=(d.content_hash) { (d.content_hash.get(..12).unwrap_or(&d.content_hash)) } }
                            td data-label="Deployed" { (time(d.deployed_at_ms)) }
                            td.num data-label="Running" { a href={ "/console/instances?deployment=" (d.id) "&state=running" } { (b.counts.running) } }
                            td.num data-label="Failed" { a href={ "/console/instances?deployment=" (d.id) "&state=failed" } { (b.counts.failed) } }
                            td.num data-label="Completed" { a href={ "/console/instances?deployment=" (d.id) "&state=completed" } { (b.counts.completed) } }
                            td.num data-label="Cancelled" { a href={ "/console/instances?deployment=" (d.id) "&state=cancelled" } { (b.counts.cancelled) } }
                            td data-label="Retirement" {
                                @if d.retired { "retired" }
                                @else if b.counts.running > 0 || b.counts.failed > 0 {
                                    "blocked by "
                                    @for (k, id) in b.examples.iter().enumerate() { @if k > 0 { ", " } (instance_link(id)) }
                                    @if b.counts.running + b.counts.failed > b.examples.len() as u64 { " …" }
                                }
                                @else if deploy { a.button.danger href={ "/console/deployments/" (d.id) "/retire" } { "Retire…" } }
                                @else { "nothing blocks it" }
                            }
                            td data-label="More" {
                                a href={ "/console/deployments/" (d.id) "/retries" } { "Retry preview" } " · "
                                a href={ "/console/deployments/" (d.id) "/source.bpmn" } { "Source" }
                                @if operate && !d.retired { " · " a href={ "/console/migrate?source=" (d.id) } { "Migrate from" } }
                            }
                        }
                    }
                    @if rows.is_empty() { tr { td colspan="10" { "Nothing deployed yet." } } }
                }
            }
        }
    };
    view::respond(
        StatusCode::OK,
        page("Deployments", Some(&viewer), Nav::Deployments, body),
    )
}

/// A deployment's instances by state (exact, one indexed count each) and a few of the
/// running or FAILED ones that block its retirement, named.
struct Blockers {
    counts: qflow_ops::InstanceCounts,
    examples: Vec<String>,
}

async fn blockers(state: &AppState, deployment: i64) -> Result<Blockers, qflow_ops::Error> {
    let mut b = Blockers {
        counts: state.ops.instance_counts(Some(deployment)).await?,
        examples: Vec::new(),
    };
    for (s, n) in [("failed", b.counts.failed), ("running", b.counts.running)] {
        if n == 0 || b.examples.len() >= BLOCKERS_SHOWN {
            continue;
        }
        let q = InstanceQuery {
            deployment: Some(deployment),
            status: Some(s.to_owned()),
            limit: (BLOCKERS_SHOWN - b.examples.len()) as u32,
            ..InstanceQuery::default()
        };
        let page = state.ops.instances(&q).await?;
        b.examples.extend(page.items.into_iter().map(|i| i.id));
    }
    Ok(b)
}

fn deployment_param(viewer: &Viewer, id: &str) -> Result<i64, Response> {
    id.parse::<i64>().map_err(|_| {
        view::ops_error(
            viewer,
            qflow_ops::Error::Invalid {
                field: "deployment",
                why: format!("`{id}` is not a deployment version"),
            },
            "/console/deployments",
        )
    })
}

pub async fn deployment_source(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Response {
    let id = match deployment_param(&viewer, &id) {
        Ok(i) => i,
        Err(r) => return r,
    };
    match state.ops.deployment_source(id).await {
        Ok(xml) => (
            [
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/xml; charset=utf-8"),
                ),
                (
                    header::CONTENT_DISPOSITION,
                    HeaderValue::from_static("inline"),
                ),
            ],
            xml,
        )
            .into_response(),
        Err(e) => view::ops_error(&viewer, e, "/console/deployments"),
    }
}

pub async fn retries(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Response {
    let id = match deployment_param(&viewer, &id) {
        Ok(i) => i,
        Err(r) => return r,
    };
    let timelines = match state.ops.retry_timelines(id).await {
        Ok(t) => t,
        Err(e) => return view::ops_error(&viewer, e, "/console/deployments"),
    };
    let body = html! {
        h1 { "Retry preview of deployment " (id) }
        p { "What each task's " code { "q:retry" } " policy does, with the numbers " code { "qflow check --explain" } " prints. t = 0 is the failure of attempt 1; an attempt that fails at once gives the earliest instants, one that runs its whole " code { "q:timeout" } " the latest." }
        @if timelines.is_empty() { p.notice { "No task of this deployment has a q:retry policy: a failure is final at once." } }
        @for t in &timelines {
            section.timeline aria-labelledby={ "t-" (t.node) } {
                h2 id={ "t-" (t.node) } { "Task " span.id { (t.node) } }
                p {
                    "maxAttempts=" (t.max_attempts) " initialInterval=" (human_ms(t.initial_interval_ms))
                    " backoffMultiplier=" (milli_text(t.multiplier_milli)) " maxInterval=" (human_ms(t.max_interval_ms))
                    " jitter=" (t.jitter)
                    @if let Some(m) = t.max_elapsed_ms { " maxElapsed=" (human_ms(m)) }
                    @if let Some(to) = t.attempt_timeout_ms { " (q:timeout " (human_ms(to)) ")" }
                }
                @if let Some(why) = &t.unexplained { p.notice.bad { (why) } }
                div.scroll { (chart::retry_timeline(t)) }
                div.scroll {
                    table.stack {
                        thead { tr { th.num { "Attempt" } th { "Backoff before it" } th { "Earliest start" } th { "Latest start" } th { "Note" } } }
                        tbody {
                            @for w in &t.attempts {
                                tr {
                                    td.num data-label="Attempt" { (w.attempt) }
                                    td data-label="Backoff before it" {
                                        @if w.backoff_min_ms == w.backoff_max_ms { (human_ms(w.backoff_min_ms)) }
                                        @else { (human_ms(w.backoff_min_ms)) " .. " (human_ms(w.backoff_max_ms)) }
                                    }
                                    td data-label="Earliest start" { (human_ms(w.earliest_start_ms)) }
                                    td data-label="Latest start" { (human_ms(w.latest_start_ms)) }
                                    td data-label="Note" {
                                        @match w.reach {
                                            Reach::Always => {},
                                            Reach::IfWithinMaxElapsed => { "starts only if its instant is within maxElapsed" },
                                            Reach::Never => { "never starts" },
                                        }
                                    }
                                }
                                @if t.elided_after == Some(w.attempt) { tr { td colspan="5" { "…" } } }
                            }
                        }
                    }
                }
                p {
                    "Worst case before FAILED: " strong { (human_ms(t.worst_case_failed_ms)) } " after the first failure"
                    @if !t.run_time_bounded { ", plus the run time of the retries" } "."
                }
                p {
                    @if t.non_retryable_codes.is_empty() { "Non-retryable codes: none (every failure code spends an attempt)." }
                    @else { "Non-retryable codes (FAILED at once): " code { (t.non_retryable_codes.join(", ")) } "." }
                    " A BPMN error never spends an attempt: it routes to its boundary."
                }
                @for r in &t.routed_timers {
                    p { "Routed timer boundary " code { (r.id) } " (" @if r.interrupting { "interrupting" } @else { "non-interrupting" } ", " (r.timer) ") spans all attempts." }
                }
            }
        }
    };
    view::respond(
        StatusCode::OK,
        page("Retry preview", Some(&viewer), Nav::Deployments, body),
    )
}

pub async fn confirm_retire(viewer: Viewer, Path(id): Path<String>) -> Response {
    if !viewer.can(Scope::Deploy) {
        return view::refusal(
            StatusCode::FORBIDDEN,
            "Not allowed",
            &format!(
                "Token `{}` lacks the `deploy` scope retiring needs.",
                viewer.session.name
            ),
        );
    }
    let id = match deployment_param(&viewer, &id) {
        Ok(i) => i,
        Err(r) => return r,
    };
    let body = html! {
        h1 { "Retire deployment " (id) "?" }
        p.notice { "No new instance can start on it afterwards. The store refuses this while running or FAILED instances reference it." }
        form method="post" action={ "/console/deployments/" (id) "/retire" } {
            (view::csrf(&viewer))
            div.actions {
                button.danger #confirm type="submit" { "Confirm: retire deployment " (id) }
                a.button.secondary href="/console/deployments" { "Back, change nothing" }
            }
        }
    };
    view::respond(
        StatusCode::OK,
        page("Retire", Some(&viewer), Nav::Deployments, body),
    )
}

/// The suggested target of each source node: the node with the same id, else one with
/// the same name, else one whose id starts with the source id (`charge` → `charge_v2`)
/// and that the source does not have itself. `None`: keep the id.
pub fn suggestions(from: &[NodeInfo], to: &[NodeInfo]) -> BTreeMap<String, Option<String>> {
    from.iter()
        .map(|n| {
            let same = to.iter().find(|t| t.id == n.id);
            let by_name = || {
                n.name.as_ref().and_then(|name| {
                    to.iter().find(|t| {
                        t.name.as_ref() == Some(name) && !from.iter().any(|f| f.id == t.id)
                    })
                })
            };
            let by_prefix = || {
                to.iter().find(|t| {
                    t.kind == n.kind
                        && t.id.starts_with(&n.id)
                        && !from.iter().any(|f| f.id == t.id)
                })
            };
            let pick = same
                .or_else(by_name)
                .or_else(by_prefix)
                .map(|t| t.id.clone());
            (n.id.clone(), pick)
        })
        .collect()
}

pub async fn migrate(
    State(state): State<AppState>,
    viewer: Viewer,
    RawQuery(raw): RawQuery,
) -> Response {
    let p = params(&raw);
    let back = "/console/migrate";
    let (source, target) = match (int_param(&p, "source"), int_param(&p, "target")) {
        (Ok(s), Ok(t)) => (s, t),
        (Err(e), _) | (_, Err(e)) => return view::ops_error(&viewer, e, back),
    };
    let instance = text_param(&p, "instance");
    let deployments = match state.ops.deployments().await {
        Ok(d) => d,
        Err(e) => return view::ops_error(&viewer, e, back),
    };
    let operate = viewer.can(Scope::Operate);
    let choose = html! {
        form.filters method="get" action="/console/migrate" aria-label="Choose deployments" {
            @if let Some(i) = instance { input type="hidden" name="instance" value=(i); }
            label { "From deployment"
                select name="source" required {
                    option value="" { "choose" }
                    @for d in &deployments { option value=(d.id) selected[source == Some(d.id)] { (d.id) " · " (d.process_id) @if d.retired { " (retired)" } } }
                }
            }
            label { "To deployment"
                select name="target" required {
                    option value="" { "choose" }
                    @for d in deployments.iter().filter(|d| !d.retired) { option value=(d.id) selected[target == Some(d.id)] { (d.id) " · " (d.process_id) } }
                }
            }
            button type="submit" { "Map nodes" }
        }
    };
    let mapping = match (source, target) {
        (Some(s), Some(t)) => {
            let (from, to) = match tokio::try_join!(
                state.ops.deployment_nodes(s),
                state.ops.deployment_nodes(t)
            ) {
                Ok(x) => x,
                Err(e) => return view::ops_error(&viewer, e, back),
            };
            let suggested = suggestions(&from, &to);
            html! {
                h2 { "Map the nodes of " (s) " onto " (t) }
                p { "Each node of the source keeps its id unless you map it. Suggestions: the same id, else the same name, else a new id that starts with the old one." }
                @if !operate { p.notice { "This token can look but not migrate (it lacks the operate scope)." } }
                form method="post" action="/console/migrate" #mapping {
                    (view::csrf(&viewer))
                    input type="hidden" name="source" value=(s);
                    input type="hidden" name="target" value=(t);
                    @if let Some(i) = instance { input type="hidden" name="instance" value=(i); }
                    input type="hidden" name="mode" value="dry-run";
                    div.scroll {
                        table.stack {
                            thead { tr { th { "Source node" } th { "Kind" } th { "Maps to" } } }
                            tbody {
                                @for n in &from {
                                    @let pick = suggested.get(&n.id).cloned().flatten();
                                    tr {
                                        td.id data-label="Source node" { label for={ "map-" (n.id) } { (n.id) } @if let Some(name) = &n.name { br; span.muted { (name) } } }
                                        td data-label="Kind" { (n.kind) }
                                        td data-label="Maps to" {
                                            select id={ "map-" (n.id) } name={ "map." (n.id) } {
                                                option value="" selected[pick.is_none()] { "(keep the id)" }
                                                @for t in &to {
                                                    option value=(t.id) selected[pick.as_deref() == Some(t.id.as_str())] { (t.id) @if pick.as_deref() == Some(t.id.as_str()) && t.id != n.id { " (suggested)" } }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    p { "Instances: " @if let Some(i) = instance { "only " span.id { (i) } } @else { "every FAILED or running instance of deployment " (s) } "." }
                    @if operate { div.actions { button #dry-run type="submit" { "Dry run" } } }
                }
            }
        }
        _ => {
            html! { p { "Choose the deployment to move instances from and the one to move them to." } }
        }
    };
    let body = html! {
        h1 { "Migrate instances" }
        (choose)
        (mapping)
    };
    view::respond(
        StatusCode::OK,
        page("Migrate", Some(&viewer), Nav::Migrate, body),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, name: Option<&str>, kind: &'static str) -> NodeInfo {
        NodeInfo {
            id: id.to_owned(),
            name: name.map(str::to_owned),
            kind,
        }
    }

    #[test]
    fn mapping_suggestions_go_by_id_then_name_then_a_longer_id() {
        let from = [
            node("start", None, "start"),
            node("charge", Some("Charge card"), "task"),
            node("ship", Some("Ship"), "task"),
            node("notify", Some("Tell the customer"), "task"),
            node("gone", None, "task"),
        ];
        let to = [
            node("start", None, "start"),
            node("charge_v2", Some("Charge card (v2)"), "task"),
            node("dispatch", Some("Ship"), "task"),
            node("notify_customer", Some("Tell the customer"), "task"),
            node("gone_gateway", None, "gateway"),
        ];
        let s = suggestions(&from, &to);
        assert_eq!(s["start"].as_deref(), Some("start"));
        assert_eq!(s["charge"].as_deref(), Some("charge_v2"));
        assert_eq!(s["ship"].as_deref(), Some("dispatch"), "same name");
        assert_eq!(s["notify"].as_deref(), Some("notify_customer"));
        // A longer id of another kind is no suggestion.
        assert_eq!(s["gone"], None);
    }
}
