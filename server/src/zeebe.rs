//! Camunda 8 (Zeebe) job endpoints where they map one to one onto pull tasks (SPEC P1,
//! item 4): `POST /v2/jobs/activation`, `/v2/jobs/{jobKey}/completion`, `/failure`,
//! `/error`, with the Camunda 8 REST API's request and response shapes (camelCase,
//! `{"jobs": [...]}`, `204 No Content` for answers, RFC 9457 problems for errors).
//!
//! Every route calls the same `qflow_ops::pull` operation as the native API. Zeebe's
//! answers name no worker (whoever has the job key answers), so an answer is made as
//! the worker holding the lock; a job whose attempt is over or that no worker holds is
//! refused (409) with the core's reason. What does not map is refused, never ignored:
//! `tenantIds` other than `<default>`, a completion `result`, failure `variables`.
//! `docs/workers.md` lists every difference (job keys are qflow task ids, not 64-bit
//! integers; an expired job timeout spends an attempt).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use qflow_ops::pull::{FetchRequest, FetchTopic, LockedTaskView};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::{Caller, WorkerScope};
use crate::body::JsonBody;
use crate::problem::{Place, Problem};
use crate::AppState;

type Result<T> = std::result::Result<T, Problem>;

/// Zeebe's default long-poll time when `requestTimeout` is 0 or absent, ms.
const REQUEST_TIMEOUT_DEFAULT_MS: i64 = 10_000;
/// The only tenant qflow has.
const DEFAULT_TENANT: &str = "<default>";

fn invalid(field: &str, why: impl Into<String>) -> Problem {
    let why = why.into();
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid",
        format!("{field}: {why}"),
    )
    .at(Place::Body, field, why)
}

/// A job activation (Camunda 8 `JobActivationRequest`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobActivationBody {
    /// The job type: the task's `zeebe:taskDefinition type` (any pull task's topic).
    #[serde(rename = "type")]
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub job_type: String,
    /// Names the worker in the attempt history; default `zeebe-worker`.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub worker: Option<String>,
    /// How long the jobs stay locked, ms (1..=86,400,000).
    #[serde(deserialize_with = "qflow_ops::json::integer")]
    #[schema(minimum = 1, maximum = 86400000)]
    pub timeout: i64,
    /// At most this many jobs (1..=1,000).
    #[serde(deserialize_with = "qflow_ops::json::integer")]
    #[schema(minimum = 1, maximum = 1000)]
    pub max_jobs_to_activate: i64,
    /// Only these variables are handed out; absent: all of the task's inputs.
    #[serde(default)]
    pub fetch_variable: Option<Vec<String>>,
    /// Long polling, ms: 0 or absent waits up to 10 s (Zeebe's default), negative answers
    /// at once; capped one second below the server's request time limit.
    #[serde(default, deserialize_with = "qflow_ops::json::optional_integer")]
    #[schema(minimum = -86400000, maximum = 86400000)]
    pub request_timeout: Option<i64>,
    /// Only `<default>` (qflow has no tenants).
    #[serde(default)]
    pub tenant_ids: Option<Vec<Tenant>>,
}

/// An object without members: where Zeebe takes more (a job result, failure
/// variables), qflow takes only this.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// The one tenant qflow has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
pub enum Tenant {
    #[serde(rename = "<default>")]
    Default,
}

/// An activated job (Camunda 8 `ActivatedJobResult`, the fields qflow has).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActivatedJob {
    /// The job key: qflow's task id `<instance>:<attempt>:<node>` (a string, not Zeebe's
    /// 64-bit integer).
    pub job_key: String,
    #[serde(rename = "type")]
    pub job_type: String,
    /// The BPMN process id.
    pub process_definition_id: String,
    /// The instance id.
    pub process_instance_key: String,
    /// The node (the task's BPMN id).
    pub element_id: String,
    /// The job key again: one task attempt is qflow's element instance.
    pub element_instance_key: String,
    pub worker: String,
    /// Attempts left, counting this one.
    pub retries: u32,
    /// When the lock expires, ms since the epoch.
    pub deadline: i64,
    #[schema(value_type = Object)]
    pub variables: serde_json::Value,
    /// The task's static headers: `zeebe:taskHeaders`, `camunda:properties`, and for a
    /// task bound to Java code its binding (`class`, `delegateExpression`,
    /// `expression`, `resultVariable`), as Camunda's 7-to-8 converter writes them.
    pub custom_headers: std::collections::BTreeMap<String, String>,
    pub tenant_id: &'static str,
}

/// What an activation returns.
#[derive(Debug, Serialize, ToSchema)]
pub struct ActivatedJobs {
    pub jobs: Vec<ActivatedJob>,
}

fn activated(t: LockedTaskView) -> ActivatedJob {
    ActivatedJob {
        element_instance_key: t.id.clone(),
        job_key: t.id,
        job_type: t.topic,
        process_definition_id: t.process_id,
        process_instance_key: t.instance,
        element_id: t.node,
        worker: t.worker,
        retries: t.retries,
        deadline: t.lock_expires_at_ms,
        variables: serde_json::Value::Object(t.variables.into_iter().collect()),
        custom_headers: t.headers,
        tenant_id: DEFAULT_TENANT,
    }
}

/// Activates jobs of a type for a worker (Camunda 8 `POST /v2/jobs/activation`); waits
/// up to `requestTimeout` for one when none is offered.
#[utoipa::path(post, path = "/v2/jobs/activation", tag = "zeebe jobs",
    request_body = JobActivationBody,
    responses(
        (status = 200, description = "The jobs activated, maybe none", body = ActivatedJobs),
    ),
    security(("bearer" = ["worker"])))]
pub async fn activate(
    State(state): State<AppState>,
    _caller: Caller<WorkerScope>,
    JsonBody(body): JsonBody<JobActivationBody>,
) -> Result<Json<ActivatedJobs>> {
    // Any other tenant is refused when the body is read: `Tenant` has one value.
    debug_assert!(body
        .tenant_ids
        .iter()
        .flatten()
        .all(|t| *t == Tenant::Default));
    if body
        .request_timeout
        .is_some_and(|t| !(-86_400_000..=86_400_000).contains(&t))
    {
        return Err(invalid(
            "requestTimeout",
            "is outside -86400000..=86400000 ms".to_owned(),
        ));
    }
    let limit = state.request_timeout_ms.saturating_sub(1_000) as i64;
    let wait_ms = match body.request_timeout {
        None | Some(0) => REQUEST_TIMEOUT_DEFAULT_MS,
        Some(t) if t < 0 => 0,
        Some(t) => t,
    }
    .min(limit.max(0));
    let request = FetchRequest {
        worker: body.worker.unwrap_or_else(|| "zeebe-worker".to_owned()),
        max_tasks: body.max_jobs_to_activate,
        topics: vec![FetchTopic {
            name: body.job_type,
            lock_ms: body.timeout,
            variables: body.fetch_variable,
        }],
        wait_ms,
    };
    let locked = state
        .ops
        .fetch_and_lock(request)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Body))?;
    Ok(Json(ActivatedJobs {
        jobs: locked.into_iter().map(activated).collect(),
    }))
}

/// A job completion (Camunda 8 `JobCompletionRequest`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobCompletionBody {
    /// Merged into the instance's variables (through the task's output mappings).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: Option<serde_json::Map<String, serde_json::Value>>,
    /// Refused when given: user-task and ad-hoc results do not apply to pull tasks.
    #[serde(default)]
    #[schema(value_type = Option<Empty>)]
    pub result: Option<serde_json::Value>,
}

/// A job failure (Camunda 8 `JobFailRequest`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobFailBody {
    /// Attempts left (0 ends the instance FAILED with an incident); default 0.
    #[serde(default, deserialize_with = "qflow_ops::json::integer")]
    #[schema(minimum = 0, maximum = 4294967295u64)]
    pub retries: i64,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub error_message: Option<String>,
    /// Wait this long (ms) before the next attempt is offered (0..=30 days); default 0.
    #[serde(default, deserialize_with = "qflow_ops::json::integer")]
    #[schema(minimum = 0, maximum = 2592000000u64)]
    pub retry_back_off: i64,
    /// Refused when non-empty: a failure sets no variables in qflow.
    #[serde(default)]
    #[schema(value_type = Option<Empty>)]
    pub variables: Option<serde_json::Map<String, serde_json::Value>>,
}

/// A BPMN error thrown by a job (Camunda 8 `JobErrorRequest`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobErrorBody {
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub error_code: String,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub error_message: Option<String>,
    /// Set on the instance before the error routes.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: Option<serde_json::Map<String, serde_json::Value>>,
}

fn answered(result: qflow_ops::Result<qflow_ops::pull::PullApplied>) -> Result<StatusCode> {
    result
        .map(|_| StatusCode::NO_CONTENT)
        .map_err(|e| Problem::from_ops(e, Place::Body))
}

async fn holder(state: &AppState, key: &str) -> Result<String> {
    state
        .ops
        .lock_holder(key)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Path))
}

/// Completes an activated job (Camunda 8 `POST /v2/jobs/{jobKey}/completion`).
#[utoipa::path(post, path = "/v2/jobs/{jobKey}/completion", tag = "zeebe jobs",
    params(("jobKey" = String, Path, description = "The job key an activation returned")),
    request_body = JobCompletionBody,
    responses(
        (status = 204, description = "Completed"),
        (status = 404, description = "No such job", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The job is not activated (its timeout passed, or its attempt is over)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["worker"])))]
pub async fn complete(
    State(state): State<AppState>,
    _caller: Caller<WorkerScope>,
    Path(key): Path<String>,
    JsonBody(body): JsonBody<JobCompletionBody>,
) -> Result<StatusCode> {
    let empty = |r: &serde_json::Value| r.is_null() || r.as_object().is_some_and(|o| o.is_empty());
    if body.result.as_ref().is_some_and(|r| !empty(r)) {
        return Err(invalid(
            "result",
            "job results (user-task corrections, ad-hoc activation) do not apply to pull tasks",
        ));
    }
    let worker = holder(&state, &key).await?;
    let variables = body.variables.unwrap_or_default().into_iter().collect();
    answered(state.ops.complete_pull(&key, &worker, variables).await)
}

/// Reports a failed job (Camunda 8 `POST /v2/jobs/{jobKey}/failure`).
#[utoipa::path(post, path = "/v2/jobs/{jobKey}/failure", tag = "zeebe jobs",
    params(("jobKey" = String, Path, description = "The job key an activation returned")),
    request_body = JobFailBody,
    responses(
        (status = 204, description = "Recorded: offered again after the back-off, or FAILED at 0 retries"),
        (status = 404, description = "No such job", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The job is not activated", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["worker"])))]
pub async fn fail(
    State(state): State<AppState>,
    _caller: Caller<WorkerScope>,
    Path(key): Path<String>,
    JsonBody(body): JsonBody<JobFailBody>,
) -> Result<StatusCode> {
    if body.variables.as_ref().is_some_and(|v| !v.is_empty()) {
        return Err(invalid("variables", "a failure sets no variables in qflow"));
    }
    let worker = holder(&state, &key).await?;
    let message = body.error_message.unwrap_or_default();
    answered(
        state
            .ops
            .fail_pull(&key, &worker, body.retries, body.retry_back_off, &message)
            .await,
    )
}

/// Throws a BPMN error from a job (Camunda 8 `POST /v2/jobs/{jobKey}/error`): it routes
/// to the task's error boundary, spending no budget.
#[utoipa::path(post, path = "/v2/jobs/{jobKey}/error", tag = "zeebe jobs",
    params(("jobKey" = String, Path, description = "The job key an activation returned")),
    request_body = JobErrorBody,
    responses(
        (status = 204, description = "Routed (or FAILED with UNCAUGHT_BPMN_ERROR)"),
        (status = 404, description = "No such job", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The job is not activated", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["worker"])))]
pub async fn throw_error(
    State(state): State<AppState>,
    _caller: Caller<WorkerScope>,
    Path(key): Path<String>,
    JsonBody(body): JsonBody<JobErrorBody>,
) -> Result<StatusCode> {
    let worker = holder(&state, &key).await?;
    let message = body.error_message.unwrap_or_default();
    let variables = body.variables.unwrap_or_default().into_iter().collect();
    answered(
        state
            .ops
            .bpmn_error_pull(&key, &worker, &body.error_code, &message, variables)
            .await,
    )
}
