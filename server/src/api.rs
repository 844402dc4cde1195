//! The `/v1` handlers: each parses its request, checks its scope, calls one operation of
//! `qflow_ops` and renders the result. Nothing here decides anything about instances.

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use qflow_core::Budget;
use qflow_ops::{
    parse_instance_id, Applied, AttemptView, AuditView, ChannelAnswerRequest, Correlated,
    DeploymentSummary, IncidentView, InstanceCounts, InstanceQuery, InstanceSummary, InstanceView,
    MessageRequest, MigrationPlan, MigrationReport, Page, RelayVerdict, SignalBroadcast,
    SignalRequest, StartRequest, Started, StartedAndWaited,
};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::auth::{Caller, DeployScope, OperateScope, ReadScope, WorkerScope};
use crate::body::{JsonBody, QueryParams};
use crate::problem::{Place, Problem};
use crate::AppState;

type Result<T> = std::result::Result<T, Problem>;

fn instance_id(raw: &str) -> Result<qflow_store::InstanceId> {
    parse_instance_id(raw).map_err(|e| Problem::from_ops(e, Place::Path))
}

/// The optional `instance` query parameter, parsed.
fn instance_param(raw: Option<&str>) -> Result<Option<qflow_store::InstanceId>> {
    raw.map(parse_instance_id)
        .transpose()
        .map_err(|e| Problem::from_ops(e, Place::Query))
}

/// The `limit` query parameter of a listing: 1..=10,000, default 100.
/// Incidents listed across instances when the request gives no `limit`.
const INCIDENTS_DEFAULT: u32 = 1_000;

fn page_limit(limit: Option<u32>) -> Result<u32> {
    match limit {
        None => Ok(100),
        Some(n @ 1..=10_000) => Ok(n),
        Some(n) => Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid",
            format!("limit {n} is outside 1..=10000"),
        )
        .at(Place::Query, "limit", "outside 1..=10000")),
    }
}

fn deployment_id(raw: &str) -> Result<i64> {
    raw.parse::<i64>().map_err(|_| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid",
            format!("`{raw}` is not a deployment version (an integer)"),
        )
        .at(Place::Path, "id", "not an integer")
    })
}

/// A model to deploy.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeployBody {
    /// The BPMN 2.0 XML document.
    pub source: String,
    /// The executable process to deploy; needed only when the document has several.
    #[serde(default)]
    pub process_id: Option<String>,
}

/// Deploys a model: the same content gets the same version back.
#[utoipa::path(post, path = "/v1/deployments", tag = "deployments",
    request_body = DeployBody,
    responses(
        (status = 200, description = "Deployed (or already deployed with this content)", body = DeploymentSummary),
        (status = 422, description = "The loader or the server refused the model", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["deploy"])))]
pub async fn deploy(
    State(state): State<AppState>,
    caller: Caller<DeployScope>,
    JsonBody(body): JsonBody<DeployBody>,
) -> Result<Json<DeploymentSummary>> {
    let ops = state.ops.as_actor(&caller.name);
    ops.deploy(&body.source, body.process_id.as_deref())
        .await
        .map(Json)
        .map_err(|e| match e {
            qflow_ops::Error::Refused(why) => {
                Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "model_refused", why)
            }
            other => Problem::from_ops(other, Place::Body),
        })
}

/// Every deployment, oldest first.
#[utoipa::path(get, path = "/v1/deployments", tag = "deployments",
    responses((status = 200, description = "The deployments", body = Vec<DeploymentSummary>)),
    security(("bearer" = ["read"])))]
pub async fn deployments(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
) -> Result<Json<Vec<DeploymentSummary>>> {
    state
        .ops
        .deployments()
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Query))
}

/// Retires a deployment: no new instance starts on it. Refused while running or FAILED
/// instances reference it.
#[utoipa::path(post, path = "/v1/deployments/{id}/retire", tag = "deployments",
    params(("id" = i64, Path, description = "The deployment version")),
    responses(
        (status = 200, description = "Retired", body = DeploymentSummary),
        (status = 404, description = "No such deployment", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Instances still reference it", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["deploy"])))]
pub async fn retire(
    State(state): State<AppState>,
    caller: Caller<DeployScope>,
    Path(id): Path<String>,
) -> Result<Json<DeploymentSummary>> {
    let id = deployment_id(&id)?;
    state
        .ops
        .as_actor(&caller.name)
        .retire(id)
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Path))
}

/// An instance to start on a deployment version.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    /// A business key, unique per deployment (1 to 64 characters, no control
    /// characters): a second start with it is refused with 409 naming the instance that
    /// holds it.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub business_key: Option<String>,
    /// Wait until a token stands at a task marked `q:respond="true"` or the instance
    /// ends, at most this long (1..=25000 ms, and below the server's request time
    /// limit), and answer 200 with the variables so far. Without it: 201 at once.
    #[serde(default, deserialize_with = "qflow_ops::json::optional_integer")]
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 25000)]
    pub wait_ms: Option<i64>,
    /// The deployment version to start on.
    #[serde(deserialize_with = "qflow_ops::json::integer")]
    pub deployment: i64,
    /// The instance's variables.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: serde_json::Map<String, serde_json::Value>,
}

/// An instance to start on the newest live deployment of a process.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartProcessBody {
    /// A business key, unique per deployment (1 to 64 characters, no control
    /// characters): a second start with it is refused with 409 naming the instance that
    /// holds it.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub business_key: Option<String>,
    /// Wait until a token stands at a task marked `q:respond="true"` or the instance
    /// ends, at most this long (1..=25000 ms, and below the server's request time
    /// limit), and answer 200 with the variables so far. Without it: 201 at once.
    #[serde(default, deserialize_with = "qflow_ops::json::optional_integer")]
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 25000)]
    pub wait_ms: Option<i64>,
    /// The instance's variables.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: serde_json::Map<String, serde_json::Value>,
}

/// Starts an instance on a deployment version; answers once its first step is durable.
#[utoipa::path(post, path = "/v1/instances", tag = "instances",
    request_body = StartBody,
    responses(
        (status = 200, description = "Started, and waited for (`wait_ms`)", body = StartedAndWaited,
            headers(("location" = String, description = "The new instance"))),
        (status = 201, description = "Started", body = Started,
            headers(("location" = String, description = "The new instance"))),
        (status = 404, description = "No such deployment", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The deployment is retired, or the business key is taken", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn start(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    JsonBody(body): JsonBody<StartBody>,
) -> Result<Response> {
    let request = StartRequest {
        deployment: Some(body.deployment),
        process_id: None,
        variables: body.variables.into_iter().collect(),
        business_key: body.business_key,
    };
    started(&state, &caller.name, request, body.wait_ms).await
}

/// Starts an instance on the newest live deployment of a process.
#[utoipa::path(post, path = "/v1/processes/{process_id}/instances", tag = "instances",
    params(("process_id" = String, Path, description = "The process id in the model")),
    request_body = StartProcessBody,
    responses(
        (status = 200, description = "Started, and waited for (`wait_ms`)", body = StartedAndWaited,
            headers(("location" = String, description = "The new instance"))),
        (status = 201, description = "Started", body = Started,
            headers(("location" = String, description = "The new instance"))),
        (status = 404, description = "No live deployment of this process", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The business key is taken", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn start_process(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    Path(process_id): Path<String>,
    JsonBody(body): JsonBody<StartProcessBody>,
) -> Result<Response> {
    let request = StartRequest {
        deployment: None,
        process_id: Some(process_id),
        variables: body.variables.into_iter().collect(),
        business_key: body.business_key,
    };
    started(&state, &caller.name, request, body.wait_ms).await
}

async fn started(
    state: &AppState,
    caller: &str,
    request: StartRequest,
    wait_ms: Option<i64>,
) -> Result<Response> {
    if let Some(wait_ms) = wait_ms {
        // Below 1 (and over the cap) the operation refuses it, naming the field.
        let wait_ms = u64::try_from(wait_ms).unwrap_or(0);
        if wait_ms >= state.request_timeout_ms {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "invalid",
                format!(
                    "wait_ms {wait_ms} is not below the server's request time limit ({} ms, \
                     `limits.request_timeout_ms`)",
                    state.request_timeout_ms
                ),
            )
            .at(Place::Body, "wait_ms", "not below the request time limit"));
        }
        let done = state
            .ops
            .as_actor(caller)
            .start_and_wait(request, wait_ms)
            .await
            .map_err(|e| Problem::from_ops(e, Place::Body))?;
        let location = format!("/v1/instances/{}", done.instance);
        return Ok((StatusCode::OK, [(header::LOCATION, location)], Json(done)).into_response());
    }
    let started = state
        .ops
        .as_actor(caller)
        .start(request)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Body))?;
    let location = format!("/v1/instances/{}", started.instance);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(started),
    )
        .into_response())
}

/// An instance's state, as listings filter by it.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum InstanceState {
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl InstanceState {
    fn as_str(self) -> &'static str {
        match self {
            InstanceState::Running => "running",
            InstanceState::Completed => "completed",
            InstanceState::Failed => "failed",
            InstanceState::Cancelled => "cancelled",
        }
    }
}

/// Which instances to list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Only instances of this deployment version.
    pub deployment: Option<i64>,
    /// Only instances in this state.
    #[param(inline)]
    pub state: Option<InstanceState>,
    /// Only FAILED instances with this failure code.
    pub failure_code: Option<String>,
    /// Only the instance with this business key.
    pub business_key: Option<String>,
    /// Only instances created at or after this instant (ms since the epoch).
    pub created_from_ms: Option<i64>,
    /// Only instances created before this instant.
    pub created_to_ms: Option<i64>,
    /// Only instances that ended (completed or cancelled) at or after this instant.
    pub ended_from_ms: Option<i64>,
    /// Only instances that ended before this instant.
    pub ended_to_ms: Option<i64>,
    /// Only instances that stand at this node: an open incident on it (where a FAILED
    /// instance failed), a retry park, `q:timeout` window or timer catch of it, or an
    /// open message subscription at it.
    pub node: Option<String>,
    /// The `next` of the previous page.
    #[param(
        pattern = "^-?[0-9]{1,18}\\.[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
    )]
    pub cursor: Option<String>,
    /// Page size, at most 10,000 (default 100).
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<u32>,
}

/// Lists instances, oldest first, a page at a time.
#[utoipa::path(get, path = "/v1/instances", tag = "instances",
    params(ListParams),
    responses((status = 200, description = "One page", body = Page<InstanceSummary>)),
    security(("bearer" = ["read"])))]
pub async fn instances(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    QueryParams(p): QueryParams<ListParams>,
) -> Result<Json<Page<InstanceSummary>>> {
    let limit = page_limit(p.limit)?;
    let query = InstanceQuery {
        deployment: p.deployment,
        status: p.state.map(|s| s.as_str().to_owned()),
        failure_code: p.failure_code,
        business_key: p.business_key,
        created_from_ms: p.created_from_ms,
        created_to_ms: p.created_to_ms,
        ended_from_ms: p.ended_from_ms,
        ended_to_ms: p.ended_to_ms,
        node: p.node,
        cursor: p.cursor,
        limit,
    };
    state.ops.instances(&query).await.map(Json).map_err(|e| {
        // The ops field `status` is the `state` parameter here.
        let e = match e {
            qflow_ops::Error::Invalid {
                field: "status",
                why,
            } => qflow_ops::Error::Invalid {
                field: "state",
                why,
            },
            other => other,
        };
        Problem::from_ops(e, Place::Query)
    })
}

/// One instance decoded: state, failure, wait frontier, variables, attempt counters,
/// backoff markers, timers with their due instants, incidents, deployment.
#[utoipa::path(get, path = "/v1/instances/{id}", tag = "instances",
    params(("id" = String, Path, format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "The instance id (a UUID)")),
    responses(
        (status = 200, description = "The instance", body = InstanceView),
        (status = 404, description = "No such instance", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["read"])))]
pub async fn inspect(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    Path(id): Path<String>,
) -> Result<Json<InstanceView>> {
    let id = instance_id(&id)?;
    state
        .ops
        .inspect(id)
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Path))
}

/// Every attempt of every task of the instance, in order (O1a).
#[utoipa::path(get, path = "/v1/instances/{id}/history", tag = "instances",
    params(("id" = String, Path, format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "The instance id (a UUID)")),
    responses(
        (status = 200, description = "The attempts", body = Vec<AttemptView>),
        (status = 404, description = "No such instance", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["read"])))]
pub async fn history(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    Path(id): Path<String>,
) -> Result<Json<Vec<AttemptView>>> {
    let id = instance_id(&id)?;
    state
        .ops
        .history(id)
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Path))
}

/// How a resume treats the budget the failed task burned.
#[derive(Debug, Clone, Copy, Default, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BudgetChoice {
    /// The attempts burned count: one more failure may exhaust the policy again.
    #[default]
    Keep,
    /// The failed task's policy starts over.
    Reset,
}

/// A resume of a FAILED instance.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeBody {
    #[serde(default)]
    pub budget: BudgetChoice,
}

/// Resumes a FAILED instance (O3): its failed task runs a new attempt.
#[utoipa::path(post, path = "/v1/instances/{id}/resume", tag = "instances",
    params(("id" = String, Path, format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "The instance id (a UUID)")),
    request_body = ResumeBody,
    responses(
        (status = 200, description = "Resumed", body = Applied),
        (status = 404, description = "No such instance", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The instance is not FAILED", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn resume(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<ResumeBody>,
) -> Result<Json<Applied>> {
    let id = instance_id(&id)?;
    let budget = match body.budget {
        BudgetChoice::Keep => Budget::Keep,
        BudgetChoice::Reset => Budget::Reset,
    };
    state
        .ops
        .as_actor(&caller.name)
        .resume(id, budget)
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Body))
}

/// A retry-now of a task in a backoff window.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryNowBody {
    /// The task to retry; default every task of the instance in a backoff window.
    #[serde(default)]
    pub node: Option<String>,
}

/// Runs the next attempt of a task in a backoff window now, without touching its attempt
/// counter (O4a).
#[utoipa::path(post, path = "/v1/instances/{id}/retry-now", tag = "instances",
    params(("id" = String, Path, format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "The instance id (a UUID)")),
    request_body = RetryNowBody,
    responses(
        (status = 200, description = "The attempt was started", body = Applied),
        (status = 404, description = "No such instance", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "No backoff is pending", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn retry_now(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<RetryNowBody>,
) -> Result<Json<Applied>> {
    let id = instance_id(&id)?;
    state
        .ops
        .as_actor(&caller.name)
        .retry_now(id, body.node)
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Body))
}

/// Variables handed to an instance.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VariablesBody {
    /// Merged into the instance's variables.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: serde_json::Map<String, serde_json::Value>,
}

/// Delivers a message to an instance: the first receive task or message catch event
/// waiting for it there completes with the variables.
#[utoipa::path(post, path = "/v1/instances/{id}/messages/{name}", tag = "instances",
    params(
        ("id" = String, Path, format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "The instance id (a UUID)"),
        ("name" = String, Path, description = "The message name"),
    ),
    request_body = VariablesBody,
    responses(
        (status = 200, description = "Delivered", body = Applied),
        (status = 404, description = "No such instance", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Nothing of the instance waits for this message", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn deliver_message(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    Path((id, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<VariablesBody>,
) -> Result<Json<Applied>> {
    let id = instance_id(&id)?;
    state
        .ops
        .as_actor(&caller.name)
        .deliver_message(id, &name, body.variables.into_iter().collect())
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Body))
}

/// Publishes a message by name and correlation key: it completes the wait of the
/// instance whose open subscription for that message has this key (a receive task or
/// message catch whose `<message>` declares `q:correlationKey`). Exactly one must match
/// unless `all` is set. Nothing is buffered: with no waiting subscription the answer is
/// 404.
#[utoipa::path(post, path = "/v1/messages", tag = "instances",
    request_body = MessageRequest,
    responses(
        (status = 200, description = "Delivered; one entry per subscription reached", body = Correlated),
        (status = 404, description = "No open subscription for this message and key", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "More than one subscription matches and `all` is not set", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn correlate(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    JsonBody(body): JsonBody<MessageRequest>,
) -> Result<Json<Correlated>> {
    state
        .ops
        .as_actor(&caller.name)
        .correlate(body)
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Body))
}

/// Broadcasts a signal: every instance waiting for it catches it (signal catch events,
/// signal boundary events, catches racing after an event-based gateway), and every
/// process whose newest live deployment has a signal start event for it starts an
/// instance. Answers once every step is durable. A broadcast reaching nothing is not an
/// error (a signal is "to whom it may concern"). Give an `id` to make a repetition safe:
/// the same id starts no instance twice.
#[utoipa::path(post, path = "/v1/signals", tag = "instances",
    request_body = SignalRequest,
    responses(
        (status = 200, description = "Broadcast; the waits it reached and the instances it started", body = SignalBroadcast),
    ),
    security(("bearer" = ["operate"])))]
pub async fn broadcast_signal(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    JsonBody(body): JsonBody<SignalRequest>,
) -> Result<Json<SignalBroadcast>> {
    state
        .ops
        .as_actor(&caller.name)
        .broadcast_signal(body)
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Body))
}

/// Relays a counterpart's answer to a channel call (SPEC C5): the answer to the attempt
/// whose `Idempotency-Key` it names. `200` means the answer was taken; `409` says why it
/// was not (`superseded`: that attempt is dead and a retry is pending or in flight, whose
/// answer will be taken; `already_completed`; `instance_failed`) — nothing changed, and
/// sending it again changes nothing either. `404`: the key names no call of this engine.
/// Safe to retry on `503` (nothing was decided).
#[utoipa::path(post, path = "/v1/channel-answers", tag = "channels",
    request_body = ChannelAnswerRequest,
    responses(
        (status = 200, description = "The answer was taken (`resumed`)", body = RelayVerdict),
        (status = 409, description = "The answer was not taken; the verdict says why", body = RelayVerdict),
        (status = 404, description = "The key names no call of this engine (`unknown`)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["worker"])))]
pub async fn relay_answer(
    State(state): State<AppState>,
    _caller: Caller<WorkerScope>,
    JsonBody(body): JsonBody<ChannelAnswerRequest>,
) -> Result<Response> {
    let verdict = state
        .ops
        .relay_answer(body)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Body))?;
    let status = match verdict.verdict {
        "resumed" => StatusCode::OK,
        "unknown" => {
            return Err(Problem::new(
                StatusCode::NOT_FOUND,
                "not_found",
                verdict.reason,
            ))
        }
        _ => StatusCode::CONFLICT,
    };
    Ok((status, Json(verdict)).into_response())
}

/// Which instances to count.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CountParams {
    /// Only instances of this deployment version.
    pub deployment: Option<i64>,
}

/// How many instances are in each state, of one deployment or of all.
#[utoipa::path(get, path = "/v1/instance-counts", tag = "instances",
    params(CountParams),
    responses((status = 200, description = "Counts by state", body = InstanceCounts)),
    security(("bearer" = ["read"])))]
pub async fn instance_counts(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    QueryParams(p): QueryParams<CountParams>,
) -> Result<Json<InstanceCounts>> {
    state
        .ops
        .instance_counts(p.deployment)
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Query))
}

/// Resolves the open incidents of an instance on a node by hand (O4).
#[utoipa::path(post, path = "/v1/instances/{id}/incidents/{node}/resolve", tag = "incidents",
    params(
        ("id" = String, Path, format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "The instance id (a UUID)"),
        ("node" = String, Path, description = "The node the incident is on"),
    ),
    responses(
        (status = 200, description = "Resolved", body = Applied),
        (status = 404, description = "No such instance", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "No incident is open on that node", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn resolve_incident(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    Path((id, node)): Path<(String, String)>,
) -> Result<Json<Applied>> {
    let id = instance_id(&id)?;
    state
        .ops
        .as_actor(&caller.name)
        .resolve_incident(id, &node)
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Path))
}

/// Cancels a running or FAILED instance.
#[utoipa::path(post, path = "/v1/instances/{id}/cancel", tag = "instances",
    params(("id" = String, Path, format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "The instance id (a UUID)")),
    responses(
        (status = 200, description = "Cancelled", body = Applied),
        (status = 404, description = "No such instance", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The instance has already ended", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    Path(id): Path<String>,
) -> Result<Json<Applied>> {
    let id = instance_id(&id)?;
    state
        .ops
        .as_actor(&caller.name)
        .cancel(id)
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Path))
}

/// A migration request: the plan, and whether only to show what it would do.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MigrateBody {
    pub plan: MigrationPlan,
    /// Apply the plan to the stored snapshots and show the diff; write nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// Migrates instances onto another deployment with a node mapping (O2), or with
/// `dry_run` shows the per-instance diff and writes nothing.
///
/// The answer is the report: `summary` counts the instances by outcome (`total`,
/// `migrated`, `would_migrate`, `refused`), then `results` gives each instance's outcome,
/// reason and diff. The status is 200 even when instances were refused: a refused
/// instance is an outcome of a plan that was carried out (the others moved), not an
/// error of the request, so read `summary.refused`. A plan refused as a whole (no such
/// deployment, a retired target, a mapping naming a missing node) is a problem document
/// and touches no instance.
#[utoipa::path(post, path = "/v1/migrations", tag = "instances",
    request_body = MigrateBody,
    responses(
        (status = 200, description = "The counts by outcome, then what happened (or would) to each instance; refused instances are counted in `summary.refused`, with their reasons in `results`", body = MigrationReport),
        (status = 404, description = "No such deployment", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The target is retired", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The plan does not fit its deployments (the target is the source, a mapping names a node either lacks); `errors` points at the plan's field", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn migrate(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    JsonBody(body): JsonBody<MigrateBody>,
) -> Result<Json<MigrationReport>> {
    state
        .ops
        .as_actor(&caller.name)
        .migrate(&body.plan, body.dry_run)
        .await
        .map(Json)
        .map_err(|e| match e {
            // Plan fields live under `/plan` in this body. A plan that does not fit its
            // deployments (the same deployment twice, a node either lacks) is a
            // well-formed body whose content is refused: 422, as a refused model is.
            qflow_ops::Error::Invalid { field, why } => Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid",
                format!("plan.{field}: {why}"),
            )
            .at_pointer(["plan", field], why),
            other => Problem::from_ops(other, Place::Body),
        })
}

/// Which incidents to list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct IncidentParams {
    /// Only the incidents of this instance (all of them).
    #[param(format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")]
    pub instance: Option<String>,
    /// Without `instance`: at most this many, the newest (default 1,000).
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<u32>,
}

/// Incidents, of one instance or of all.
#[utoipa::path(get, path = "/v1/incidents", tag = "incidents",
    params(IncidentParams),
    responses(
        (status = 200, description = "The incidents", body = Vec<IncidentView>),
        (status = 404, description = "No such instance", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["read"])))]
pub async fn incidents(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    QueryParams(p): QueryParams<IncidentParams>,
) -> Result<Json<Vec<IncidentView>>> {
    let instance = instance_param(p.instance.as_deref())?;
    let limit = match p.limit {
        None => INCIDENTS_DEFAULT,
        Some(_) => page_limit(p.limit)?,
    };
    state
        .ops
        .incidents(instance, limit)
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Query))
}

/// Which audit rows to list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditParams {
    /// Only the actions on this instance.
    #[param(format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")]
    pub instance: Option<String>,
    /// At most this many, the newest (default 100).
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<u32>,
}

/// The audit log of operator actions, oldest first.
#[utoipa::path(get, path = "/v1/audit", tag = "audit",
    params(AuditParams),
    responses(
        (status = 200, description = "The audit rows", body = Vec<AuditView>),
        (status = 404, description = "No such instance", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["read"])))]
pub async fn audit(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    QueryParams(p): QueryParams<AuditParams>,
) -> Result<Json<Vec<AuditView>>> {
    let instance = instance_param(p.instance.as_deref())?;
    let limit = page_limit(p.limit)?;
    state
        .ops
        .audit(instance, limit)
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Query))
}

/// Which journaled instances to replay (docs/replay.md).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayBody {
    /// This instance alone (the filters are then ignored).
    #[schema(format = Uuid)]
    pub instance: Option<String>,
    /// Only instances of this deployment (its version).
    #[serde(default, deserialize_with = "qflow_ops::json::optional_integer")]
    #[schema(minimum = 1)]
    pub deployment: Option<i64>,
    /// Only instances in this status: `running`, `completed`, `failed` or `cancelled`.
    #[schema(inline)]
    pub status: Option<InstanceState>,
    /// Only instances created at or after this instant (ms since the epoch).
    #[serde(default, deserialize_with = "qflow_ops::json::optional_integer")]
    pub created_from_ms: Option<i64>,
    /// Only instances created before this instant.
    #[serde(default, deserialize_with = "qflow_ops::json::optional_integer")]
    pub created_to_ms: Option<i64>,
    /// At most this many instances (default 1,000, at most 10,000: a larger replay is
    /// `qflow replay`'s, which no request time limit cuts short).
    #[serde(default, deserialize_with = "qflow_ops::json::optional_integer")]
    #[schema(minimum = 1, maximum = 10000)]
    pub limit: Option<i64>,
}

/// The most instances one replay request looks at.
const REPLAY_HTTP_LIMIT_MAX: i64 = 10_000;

/// Replays journaled instances through this server's step function (SPEC G3) and
/// reports, per instance that is not identical, the first divergent step with its
/// input, the snapshot key and byte where the bytes differ and both values. Read-only:
/// it takes no claim and writes nothing. The status is 200 whatever the outcome: read
/// `divergent`.
#[utoipa::path(post, path = "/v1/replays", tag = "instances",
    request_body = ReplayBody,
    responses(
        (status = 200, description = "The counts by outcome and the instances worth reading", body = qflow_ops::replay::ReplayReport),
        (status = 400, description = "A malformed filter", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such instance", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn replay(
    State(state): State<AppState>,
    _caller: Caller<OperateScope>,
    JsonBody(body): JsonBody<ReplayBody>,
) -> Result<Json<qflow_ops::replay::ReplayReport>> {
    let limit = match body.limit {
        None => 1_000,
        // In range, so the conversion is exact.
        Some(n @ 1..=REPLAY_HTTP_LIMIT_MAX) => n as u32,
        Some(n) => {
            let why = format!("{n} is outside 1..={REPLAY_HTTP_LIMIT_MAX}");
            return Err(
                Problem::new(StatusCode::BAD_REQUEST, "invalid", format!("limit: {why}")).at(
                    Place::Body,
                    "limit",
                    why,
                ),
            );
        }
    };
    if let Some(d) = body.deployment.filter(|d| *d < 1) {
        let why = format!("{d} is not a deployment version (1 or more)");
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid",
            format!("deployment: {why}"),
        )
        .at(Place::Body, "deployment", why));
    }
    let instance = match body.instance.as_deref() {
        None => None,
        Some(text) => Some(
            qflow_ops::parse_instance_id(text).map_err(|e| Problem::from_ops(e, Place::Body))?,
        ),
    };
    let request = qflow_ops::replay::ReplayRequest {
        instance,
        deployment: body.deployment,
        status: body.status.map(|s| s.as_str().to_owned()),
        created_from_ms: body.created_from_ms,
        created_to_ms: body.created_to_ms,
        limit,
    };
    state
        .ops
        .replay(&request, &mut |_| {})
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Body))
}
