//! qflow's HTTP API (SPEC O1–O5): the operations of [`qflow_ops::Ops`] over JSON.
//!
//! The server is a library: a host that embeds qflow builds a [`qflow_runtime::Runtime`]
//! with its own handlers, wraps it in an `Ops` and calls [`router`]; the standalone
//! `qflow serve` does the same with no handlers. Every handler is thin — parse, check the
//! token's scope, call one operation, render — so the CLI and HTTP cannot drift apart.
//!
//! Around every route: a body limit (413), a request time limit (408), a limit on
//! requests in flight, request metrics and tracing. Errors are RFC 9457 problem details
//! ([`problem`]). The OpenAPI 3.1 document is generated from the handlers' annotations
//! ([`openapi`]) and committed as `docs/openapi.json`; a test fails when they differ.

// A `Problem` is the error half of every handler's result and becomes the response at
// once; boxing it would buy nothing on a path that allocates its JSON anyway.
#![allow(clippy::result_large_err)]

pub mod api;
pub mod auth;
pub mod body;
pub mod camunda;
pub mod config;
pub mod console;
pub mod metrics;
pub mod problem;
pub mod user_tasks;
pub mod workers;
pub mod zeebe;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use qflow_ops::Ops;
use qflow_runtime::Stats;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi as OpenApiDoc, RefOr, ResponseBuilder};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use auth::{hash_token, Scope, Token, Tokens};
pub use config::{Limits, ServerConfig};
use metrics::HttpMetrics;
use problem::Problem;

/// What every request handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub ops: Ops,
    pub tokens: Arc<Tokens>,
    pub stats: Option<Arc<Stats>>,
    /// `limits.request_timeout_ms`: a start may not wait for its instance that long.
    pub request_timeout_ms: u64,
    /// The console's sessions and cookie settings.
    pub console: Arc<console::Console>,
    http: Arc<HttpMetrics>,
    openapi: Arc<String>,
}

impl auth::HasTokens for AppState {
    fn tokens(&self) -> &Arc<Tokens> {
        &self.tokens
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "qflow",
        description = "A deterministic BPMN-style process engine with durable retries: \
                       deployments, instances, attempt history, incidents, repair and \
                       migration. Errors are RFC 9457 problem details.",
        license(name = "Apache-2.0")
    ),
    tags(
        (name = "deployments", description = "Models and their versions"),
        (name = "instances", description = "Start, list, inspect, repair, migrate"),
        (name = "incidents", description = "Open and resolved incidents"),
        (name = "audit", description = "Who changed what"),
        (name = "user tasks", description = "The task list: user tasks by assignee, candidate group or user; claim, unclaim, complete (docs/workers.md, User tasks)"),
        (name = "external tasks", description = "Pull tasks for external workers: fetch and lock by topic, complete, fail, BPMN error, extend or give up the lock"),
        (name = "channels", description = "Answers of channel calls relayed by their counterparts, with the engine's verdict (docs/channels.md)"),
        (name = "zeebe jobs", description = "Camunda 8 job endpoints over pull tasks, where they map one to one (docs/workers.md)"),
        (name = "service", description = "Health, readiness, metrics")
    )
)]
struct ApiDoc;

fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(api::deploy, api::deployments))
        .routes(routes!(api::retire))
        .routes(routes!(api::start, api::instances))
        .routes(routes!(api::start_process))
        .routes(routes!(api::inspect))
        .routes(routes!(api::history))
        .routes(routes!(api::resume))
        .routes(routes!(api::retry_now))
        .routes(routes!(api::cancel))
        .routes(routes!(user_tasks::list))
        .routes(routes!(user_tasks::show))
        .routes(routes!(user_tasks::claim))
        .routes(routes!(user_tasks::unclaim))
        .routes(routes!(user_tasks::complete))
        .routes(routes!(user_tasks::bpmn_error))
        .routes(routes!(user_tasks::escalation))
        .routes(routes!(api::deliver_message))
        .routes(routes!(api::correlate))
        .routes(routes!(api::broadcast_signal))
        .routes(routes!(api::relay_answer))
        .routes(routes!(api::instance_counts))
        .routes(routes!(api::migrate))
        .routes(routes!(api::incidents))
        .routes(routes!(api::resolve_incident))
        .routes(routes!(api::audit))
        .routes(routes!(api::replay))
        .routes(routes!(workers::fetch_and_lock))
        .routes(routes!(workers::complete))
        .routes(routes!(workers::failure))
        .routes(routes!(workers::bpmn_error))
        .routes(routes!(workers::extend_lock))
        .routes(routes!(workers::unlock))
        .routes(routes!(zeebe::activate))
        .routes(routes!(zeebe::complete))
        .routes(routes!(zeebe::fail))
        .routes(routes!(zeebe::throw_error))
        .routes(routes!(zeebe::update))
        .routes(routes!(zeebe::topology))
        .routes(routes!(zeebe::license))
        .routes(routes!(zeebe::status))
        .routes(routes!(zeebe::correlate_message))
        .routes(routes!(zeebe::publish_message))
        .routes(routes!(zeebe::broadcast_signal))
        .routes(routes!(zeebe::create_process_instance))
        .routes(routes!(zeebe::deploy_resources))
        .routes(routes!(zeebe::instances::get))
        .routes(routes!(zeebe::instances::search))
        .routes(routes!(zeebe::instances::cancel))
        .routes(routes!(zeebe::incidents::get))
        .routes(routes!(zeebe::incidents::search))
        .routes(routes!(zeebe::incidents::resolve))
        .routes(routes!(zeebe::user_tasks::get))
        .routes(routes!(zeebe::user_tasks::search))
        .routes(routes!(zeebe::user_tasks::assign))
        .routes(routes!(zeebe::user_tasks::unassign))
        .routes(routes!(zeebe::user_tasks::complete))
        .routes(routes!(zeebe::variables::get))
        .routes(routes!(zeebe::variables::search))
        .routes(routes!(zeebe::elements::get))
        .routes(routes!(zeebe::elements::search))
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics_text))
}

/// The OpenAPI document of the API, as served at `/openapi.json` and committed at
/// `docs/openapi.json` (pretty-printed, with a final newline).
pub fn openapi() -> String {
    let (_, doc) = routes().split_for_parts();
    let doc = finish(doc);
    let mut text = serde_json::to_string_pretty(&doc).expect("the OpenAPI document serialises");
    text.push('\n');
    text
}

/// Adds what every operation shares: the bearer scheme, and the problem responses any
/// request can get (a bad parameter or body, a missing or weak token, a body over the
/// limit, a time-out, a store that does not answer).
fn finish(mut doc: OpenApiDoc) -> OpenApiDoc {
    let components = doc.components.get_or_insert_with(Default::default);
    // A job update changes something (`zeebe::JobChangeset`); written here because
    // utoipa-gen 5.5.0 turns a derive's `min_properties` into `maxProperties`.
    if let Some(RefOr::T(utoipa::openapi::schema::Schema::Object(changeset))) =
        components.schemas.get_mut("JobChangeset")
    {
        changeset.min_properties = Some(1);
    }
    // The search filters read their judged fields into the struct and the rest through
    // `#[serde(flatten)]` (refusing any that is set, or not Camunda's), which the derive
    // cannot describe: the document lists Camunda's others as null-only and allows no
    // more.
    for (name, fields) in zeebe::filters_not_kept() {
        if let Some(RefOr::T(utoipa::openapi::schema::Schema::Object(filter))) =
            components.schemas.get_mut(name)
        {
            for field in fields {
                let null_only = utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::Null)
                    .description(Some(
                        "Only null: qflow keeps nothing this filter could be judged against",
                    ))
                    .build();
                filter.properties.insert(
                    (*field).to_owned(),
                    RefOr::T(utoipa::openapi::schema::Schema::Object(null_only)),
                );
            }
            filter.additional_properties = Some(Box::new(
                utoipa::openapi::schema::AdditionalProperties::FreeForm(false),
            ));
        }
    }
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
    );
    let problem = |description: &str| {
        RefOr::T(
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/problem+json",
                    utoipa::openapi::ContentBuilder::new()
                        .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                            "Problem",
                        ))))
                        .build(),
                )
                .build(),
        )
    };
    for (path, item) in doc.paths.paths.iter_mut() {
        let public = matches!(path.as_str(), "/healthz" | "/readyz" | "/v2/status");
        let ops = [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.delete,
            &mut item.patch,
        ];
        for op in ops.into_iter().flatten() {
            let r = &mut op.responses.responses;
            let has_body = op.request_body.is_some();
            let mut add = |code: &str, what: &str| {
                r.entry(code.to_owned()).or_insert_with(|| problem(what));
            };
            if !public {
                add("400", "A parameter or the body is not acceptable");
                add("401", "No valid bearer token");
                add("403", "The token lacks the scope this operation needs");
            }
            if has_body {
                add("413", "The body is larger than the server accepts");
                add("415", "The body is not JSON");
            }
            add(
                "408",
                "The request took longer than the server's time limit",
            );
            add("503", "The store did not answer");
        }
    }
    doc
}

/// The whole HTTP surface over `state`'s operations, with the limits of `limits` and the
/// console's default settings.
pub fn router(ops: Ops, tokens: Tokens, stats: Option<Arc<Stats>>, limits: &Limits) -> Router {
    router_with_console(
        ops,
        tokens,
        stats,
        limits,
        &console::ConsoleConfig::default(),
    )
}

/// [`router`] with the console's settings (`[console]` in `qflow.toml`).
pub fn router_with_console(
    ops: Ops,
    tokens: Tokens,
    stats: Option<Arc<Stats>>,
    limits: &Limits,
    console: &console::ConsoleConfig,
) -> Router {
    let state = AppState {
        ops,
        tokens: Arc::new(tokens),
        stats,
        request_timeout_ms: limits.request_timeout_ms,
        console: Arc::new(console::Console::new(console)),
        http: Arc::new(HttpMetrics::default()),
        openapi: Arc::new(openapi()),
    };
    let (router, _) = routes().split_for_parts();
    router
        .merge(console::router())
        .route("/openapi.json", get(openapi_json))
        .merge(camunda::routes())
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(limits.body_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_millis(limits.request_timeout_ms),
        ))
        .layer(GlobalConcurrencyLimitLayer::new(limits.requests_in_flight))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Counts and times every request, and turns the bare statuses of the layers below
/// (a time-out, a method not allowed) into problem details.
async fn observe(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let path = req.uri().path().to_owned();
    let response = next.run(req).await;
    let response = problem::with_instance(problem_for_bare_status(response), &path);
    let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    state.http.observe(response.status().as_u16(), micros);
    response
}

fn problem_for_bare_status(response: Response) -> Response {
    let status = response.status();
    // A problem document, or a console page that says what went wrong itself.
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| {
            v.as_bytes().starts_with(b"application/problem+json")
                || v.as_bytes().starts_with(b"text/html")
        });
    // A JSON error body is a handler's own (the Camunda 7 routes answer `{type, message}`).
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/json");
    if is_problem || is_json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (code, detail) = match status {
        StatusCode::REQUEST_TIMEOUT => (
            "timeout",
            "the request took longer than the server's time limit (`limits.request_timeout_ms`)",
        ),
        StatusCode::METHOD_NOT_ALLOWED => {
            ("method_not_allowed", "this path does not take this method")
        }
        StatusCode::PAYLOAD_TOO_LARGE => (
            "body_too_large",
            "the body is larger than this server accepts (`limits.body_bytes`)",
        ),
        _ => ("error", "the request could not be served"),
    };
    let mut problem = Problem::new(status, code, detail).into_response();
    if let Some(allow) = response.headers().get(header::ALLOW) {
        problem.headers_mut().insert(header::ALLOW, allow.clone());
    }
    problem
}

async fn not_found() -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such endpoint; see /openapi.json",
    )
}

async fn openapi_json(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        state.openapi.as_str().to_owned(),
    )
        .into_response()
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "service",
    responses((status = 200, description = "Alive", body = String, content_type = "text/plain")))]
async fn healthz() -> &'static str {
    "ok\n"
}

/// The store answers, so requests can be served.
#[utoipa::path(get, path = "/readyz", tag = "service",
    responses((status = 200, description = "Ready", body = String, content_type = "text/plain")))]
async fn readyz(State(state): State<AppState>) -> Result<&'static str, Problem> {
    state
        .ops
        .ready()
        .await
        .map(|()| "ready\n")
        .map_err(|e| Problem::from_ops(e, problem::Place::Query))
}

/// Prometheus metrics (text exposition format 0.0.4).
#[utoipa::path(get, path = "/metrics", tag = "service",
    responses((status = 200, description = "The metrics", body = String, content_type = "text/plain")),
    security(("bearer" = ["read"])))]
async fn metrics_text(
    State(state): State<AppState>,
    _caller: auth::Caller<auth::ReadScope>,
) -> Response {
    // A store that does not answer leaves the gauge out rather than failing the scrape:
    // the counters and the HTTP figures are still worth having.
    let counts = match state.ops.instance_counts(None).await {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, "instance counts unavailable for /metrics");
            None
        }
    };
    let text = metrics::render(counts, state.stats.as_deref(), &state.http);
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        text,
    )
        .into_response()
}
