//! The native pull-task API (`/v1/external-tasks/...`, SPEC P1): external workers fetch
//! and lock tasks by topic (with long polling), then complete them, report a failure or
//! a BPMN error, extend or give up their lock. Every route needs the `worker` scope.
//! Each handler parses, calls one operation of `qflow_ops::pull` and renders; a worker
//! that no longer holds the lock gets 409 with the core's reason.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use qflow_ops::pull::{FetchRequest, FetchTopic, LockedTaskView, PullApplied};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::auth::{Caller, WorkerScope};
use crate::body::JsonBody;
use crate::problem::{Place, Problem};
use crate::AppState;

type Result<T> = std::result::Result<T, Problem>;

/// The longest long poll of the native API, ms (the Camunda route takes its own).
pub(crate) const FETCH_WAIT_MS_MAX: i64 = 25_000;

fn default_max_tasks() -> i64 {
    10
}

/// One topic of a fetch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchTopicBody {
    /// The topic name (`q:topic`, `camunda:topic`, the Zeebe job type).
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub name: String,
    /// How long each lock on this topic lasts, ms (1..=86,400,000).
    #[serde(deserialize_with = "qflow_ops::json::integer")]
    #[schema(minimum = 1, maximum = 86400000)]
    pub lock_duration_ms: i64,
    /// Only these variables are handed out; absent: all of the task's inputs.
    #[serde(default)]
    pub variables: Option<Vec<String>>,
}

/// A worker's fetch-and-lock.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchBody {
    /// Names the worker: every answer must repeat it; the attempt history records it.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub worker_id: String,
    /// At most this many tasks (1..=1,000), default 10.
    #[serde(
        default = "default_max_tasks",
        deserialize_with = "qflow_ops::json::integer"
    )]
    #[schema(minimum = 1, maximum = 1000)]
    pub max_tasks: i64,
    #[schema(min_items = 1, max_items = 64)]
    pub topics: Vec<FetchTopicBody>,
    /// Long polling: when no task is offered now, wait up to this long (ms) for one
    /// (0..=25,000, and below the server's request time limit). Default 0: answer at once.
    #[serde(default, deserialize_with = "qflow_ops::json::integer")]
    #[schema(minimum = 0, maximum = 25000)]
    pub wait_ms: i64,
}

/// Fetches and locks tasks of the given topics for a worker; waits up to `wait_ms` for
/// one to be offered when none is (an arriving task wakes the request at once).
#[utoipa::path(post, path = "/v1/external-tasks/fetch-and-lock", tag = "external tasks",
    request_body = FetchBody,
    responses(
        (status = 200, description = "The tasks locked, maybe none", body = Vec<LockedTaskView>),
        (status = 400, description = "A field is out of range", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["worker"])))]
pub async fn fetch_and_lock(
    State(state): State<AppState>,
    _caller: Caller<WorkerScope>,
    JsonBody(body): JsonBody<FetchBody>,
) -> Result<Json<Vec<LockedTaskView>>> {
    check_wait(&state, body.wait_ms, "wait_ms")?;
    let request = FetchRequest {
        worker: body.worker_id,
        max_tasks: body.max_tasks,
        topics: body
            .topics
            .into_iter()
            .map(|t| FetchTopic {
                name: t.name,
                lock_ms: t.lock_duration_ms,
                variables: t.variables,
            })
            .collect(),
        wait_ms: body.wait_ms,
    };
    state
        .ops
        .fetch_and_lock(request)
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Body))
}

/// A long poll must end before the server's request time limit answers 408 for it.
pub(crate) fn check_wait(state: &AppState, wait_ms: i64, field: &str) -> Result<()> {
    if wait_ms > FETCH_WAIT_MS_MAX {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid",
            format!("{field} {wait_ms} is over {FETCH_WAIT_MS_MAX} ms"),
        )
        .at(Place::Body, field, "over the long-polling cap"));
    }
    if wait_ms > 0 && wait_ms as u64 >= state.request_timeout_ms {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid",
            format!(
                "{field} {wait_ms} is not below the server's request time limit ({} ms, \
                 `limits.request_timeout_ms`)",
                state.request_timeout_ms
            ),
        )
        .at(Place::Body, field, "not below the request time limit"));
    }
    Ok(())
}

/// The worker completes its task.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteBody {
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub worker_id: String,
    /// Merged into the instance's variables (through the task's output mappings).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: serde_json::Map<String, serde_json::Value>,
}

/// The worker reports its attempt failed.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FailureBody {
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub worker_id: String,
    /// The attempts the task has left (Camunda's meaning): 0 ends the instance FAILED
    /// with an incident; negative is refused.
    #[serde(deserialize_with = "qflow_ops::json::integer")]
    #[schema(minimum = 0, maximum = 4294967295u64)]
    pub retries: i64,
    /// Wait this long (ms) before the next attempt is offered (0..=30 days); default 0.
    #[serde(default, deserialize_with = "qflow_ops::json::integer")]
    #[schema(minimum = 0, maximum = 2592000000u64)]
    pub retry_timeout_ms: i64,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub error_message: String,
}

/// The worker answers with a BPMN error.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BpmnErrorBody {
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub worker_id: String,
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub error_code: String,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub error_message: String,
    /// Set on the instance before the error routes.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: serde_json::Map<String, serde_json::Value>,
}

/// The worker extends its lock.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendLockBody {
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub worker_id: String,
    /// The lock expires this long (ms) from now (1..=86,400,000).
    #[serde(deserialize_with = "qflow_ops::json::integer")]
    #[schema(minimum = 1, maximum = 86400000)]
    pub new_duration_ms: i64,
}

/// The lock is given up.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UnlockBody {
    /// The worker giving it up; absent: whoever holds it (an operator's unlock).
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub worker_id: Option<String>,
}

fn answered(result: qflow_ops::Result<PullApplied>) -> Result<Json<PullApplied>> {
    result
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Body))
}

/// Completes a locked task; refused (409) unless this worker holds its live lock.
#[utoipa::path(post, path = "/v1/external-tasks/{id}/complete", tag = "external tasks",
    params(("id" = String, Path, description = "The task id a fetch returned")),
    request_body = CompleteBody,
    responses(
        (status = 200, description = "Completed", body = PullApplied),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The worker does not hold the live lock (it expired, another worker holds it, the attempt is over)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["worker"])))]
pub async fn complete(
    State(state): State<AppState>,
    _caller: Caller<WorkerScope>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<CompleteBody>,
) -> Result<Json<PullApplied>> {
    let variables = body.variables.into_iter().collect();
    answered(
        state
            .ops
            .complete_pull(&id, &body.worker_id, variables)
            .await,
    )
}

/// Reports a failed attempt with the retries left and a retry timeout.
#[utoipa::path(post, path = "/v1/external-tasks/{id}/failure", tag = "external tasks",
    params(("id" = String, Path, description = "The task id a fetch returned")),
    request_body = FailureBody,
    responses(
        (status = 200, description = "Recorded: offered again (after the timeout), or FAILED at 0 retries", body = PullApplied),
        (status = 400, description = "Negative retries or timeout", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The worker does not hold the live lock", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["worker"])))]
pub async fn failure(
    State(state): State<AppState>,
    _caller: Caller<WorkerScope>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<FailureBody>,
) -> Result<Json<PullApplied>> {
    answered(
        state
            .ops
            .fail_pull(
                &id,
                &body.worker_id,
                body.retries,
                body.retry_timeout_ms,
                &body.error_message,
            )
            .await,
    )
}

/// Answers with a BPMN error: it routes to the task's error boundary, spending no budget.
#[utoipa::path(post, path = "/v1/external-tasks/{id}/bpmn-error", tag = "external tasks",
    params(("id" = String, Path, description = "The task id a fetch returned")),
    request_body = BpmnErrorBody,
    responses(
        (status = 200, description = "Routed (or FAILED with UNCAUGHT_BPMN_ERROR)", body = PullApplied),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The worker does not hold the live lock", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["worker"])))]
pub async fn bpmn_error(
    State(state): State<AppState>,
    _caller: Caller<WorkerScope>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<BpmnErrorBody>,
) -> Result<Json<PullApplied>> {
    let variables = body.variables.into_iter().collect();
    answered(
        state
            .ops
            .bpmn_error_pull(
                &id,
                &body.worker_id,
                &body.error_code,
                &body.error_message,
                variables,
            )
            .await,
    )
}

/// Moves the lock's expiry to `new_duration_ms` from now.
#[utoipa::path(post, path = "/v1/external-tasks/{id}/extend-lock", tag = "external tasks",
    params(("id" = String, Path, description = "The task id a fetch returned")),
    request_body = ExtendLockBody,
    responses(
        (status = 200, description = "Extended", body = PullApplied),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The worker does not hold the live lock", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["worker"])))]
pub async fn extend_lock(
    State(state): State<AppState>,
    _caller: Caller<WorkerScope>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<ExtendLockBody>,
) -> Result<Json<PullApplied>> {
    answered(
        state
            .ops
            .extend_lock(&id, &body.worker_id, body.new_duration_ms)
            .await,
    )
}

/// Gives the lock up: the task is offered again at once, no budget spent.
#[utoipa::path(post, path = "/v1/external-tasks/{id}/unlock", tag = "external tasks",
    params(("id" = String, Path, description = "The task id a fetch returned")),
    request_body = UnlockBody,
    responses(
        (status = 200, description = "Unlocked", body = PullApplied),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not locked, or locked by another worker", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["worker"])))]
pub async fn unlock(
    State(state): State<AppState>,
    _caller: Caller<WorkerScope>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<UnlockBody>,
) -> Result<Json<PullApplied>> {
    answered(state.ops.unlock_pull(&id, body.worker_id.as_deref()).await)
}
