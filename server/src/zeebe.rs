//! Camunda 8 (Zeebe) job endpoints where they map one to one onto pull tasks (SPEC P1,
//! item 4): `POST /v2/jobs/activation`, `/v2/jobs/{jobKey}/completion`, `/failure`,
//! `/error`, with the Camunda 8 REST API's request and response shapes (camelCase,
//! `{"jobs": [...]}`, `204 No Content` for answers, RFC 9457 problems for errors).
//!
//! Every route calls the same `qflow_ops::pull` operation as the native API. Zeebe's
//! answers name no worker (whoever has the job key answers), so an answer is made as
//! the worker holding the lock; a job whose attempt is over or that no worker holds is
//! refused (409) with the core's reason.
//!
//! Each request body is read as the Orchestration Cluster API's schema says
//! (`JobActivationRequest`, `JobCompletionRequest` with its `JobResult`,
//! `JobFailRequest`, `JobErrorRequest`, up to Camunda 8.10's fields): a field the schema
//! lacks is refused. Of the fields it has, a value that asks for nothing beyond what
//! qflow does — null, empty, Camunda's default, or what qflow does anyway (the
//! `<default>` tenant, `tenantFilter: PROVIDED`, an empty `fetchVariable` meaning all
//! variables) — is accepted; one that asks for what qflow lacks (other tenants, leases,
//! user-task denials and corrections, ad-hoc activations, a business id set on
//! completion, variables on a failure) is refused with a 400 naming the field and saying
//! what qflow does instead, before the job is looked at, so a refused request changes
//! nothing. The OpenAPI document states only the accepted values. `docs/workers.md`
//! lists every field and every difference (job keys are qflow task ids, not 64-bit
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
/// The worker name an activation without one (absent, null or `""`) is recorded under.
const WORKER_DEFAULT: &str = "zeebe-worker";

fn invalid(field: &str, why: impl Into<String>) -> Problem {
    let why = why.into();
    Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid",
        format!("{field}: {why}"),
    )
    .at(Place::Body, field, why)
}

/// A field whose value asks for what qflow does not do: a 400 that names it (`path`, the
/// field's members from the body's top, e.g. `["result", "denied"]`), shows the value
/// when `value` is given, and says what qflow does instead.
fn unsupported(path: &[&str], value: Option<serde_json::Value>, instead: &str) -> Problem {
    let field = path.join(".");
    let shown = value.map(|v| format!(" {v}")).unwrap_or_default();
    let detail = format!("`{field}`{shown} is not supported: {instead}");
    Problem::new(StatusCode::BAD_REQUEST, "invalid", detail.clone())
        .at_pointer(path.iter().copied(), detail)
}

/// A 400 for a value out of its field's rule, at the field's JSON pointer.
fn invalid_at(path: &[&str], why: &str) -> Problem {
    let detail = format!("`{}`: {why}", path.join("."));
    Problem::new(StatusCode::BAD_REQUEST, "invalid", detail.clone())
        .at_pointer(path.iter().copied(), detail)
}

/// The schema of a field qflow takes only as null (or absent).
fn only_null() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::Null)
        .description(Some(
            "Only null or absent: any value asks for what qflow does not do (docs/workers.md).",
        ))
        .build()
}

/// The schema of a flag qflow takes only as `false` (or null, or absent).
fn only_false() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Boolean, Type::Null]))
        .enum_values(Some([
            serde_json::Value::Bool(false),
            serde_json::Value::Null,
        ]))
        .description(Some(
            "Only false, null or absent: `true` asks for what qflow does not do \
             (docs/workers.md).",
        ))
        .build()
}

/// The schema of `tenantFilter` as qflow takes it.
fn only_provided_tenants() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .enum_values(Some([
            serde_json::json!("PROVIDED"),
            serde_json::Value::Null,
        ]))
        .description(Some(
            "`PROVIDED` (Camunda's default: the tenants `tenantIds` names) or null; \
             `ASSIGNED` is refused, as Camunda refuses it without multi-tenancy.",
        ))
        .build()
}

/// A job activation (Camunda 8 `JobActivationRequest`): every field of Camunda 8.10's.
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
    /// Names the worker in the attempt history; absent, null or `""` (Camunda's
    /// default): `zeebe-worker`.
    #[serde(default)]
    #[schema(max_length = 128, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub worker: Option<String>,
    /// How long the jobs stay locked, ms (1..=86,400,000).
    #[serde(deserialize_with = "qflow_ops::json::integer")]
    #[schema(minimum = 1, maximum = 86400000)]
    pub timeout: i64,
    /// At most this many jobs (1..=1,000).
    #[serde(deserialize_with = "qflow_ops::json::integer")]
    #[schema(minimum = 1, maximum = 1000)]
    pub max_jobs_to_activate: i64,
    /// Only these variables are handed out; absent, null or `[]` (as in Camunda): all of
    /// the task's inputs.
    #[serde(default)]
    pub fetch_variable: Option<Vec<String>>,
    /// Long polling, ms: 0 or absent waits up to 10 s (Zeebe's default), negative answers
    /// at once; capped one second below the server's request time limit.
    #[serde(default, deserialize_with = "qflow_ops::json::optional_integer")]
    #[schema(minimum = -86400000, maximum = 86400000)]
    pub request_timeout: Option<i64>,
    /// Only `<default>`, `[]` or null (qflow has no tenants; Camunda without
    /// multi-tenancy reads `[]` as `<default>`).
    #[serde(default)]
    #[schema(value_type = Option<Vec<Tenant>>)]
    pub tenant_ids: Option<Vec<String>>,
    #[serde(default)]
    #[schema(schema_with = only_provided_tenants)]
    pub tenant_filter: Option<TenantFilter>,
    /// Activation with a lease (Camunda 8.10); qflow takes only false or null.
    #[serde(default)]
    #[schema(schema_with = only_false)]
    pub with_lease: Option<bool>,
}

/// An object without members: where Zeebe takes more (failure variables), qflow takes
/// only this.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// The one tenant qflow has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
pub enum Tenant {
    #[serde(rename = "<default>")]
    Default,
}

/// Camunda's `TenantFilterEnum`: whose tenants an activation is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum TenantFilter {
    /// The tenants `tenantIds` names (Camunda's default).
    #[serde(rename = "PROVIDED")]
    Provided,
    /// The tenants the caller is assigned to.
    #[serde(rename = "ASSIGNED")]
    Assigned,
}

/// Refuses an activation whose fields ask for what qflow does not do; what passes is
/// what qflow does (no tenants but `<default>`, no leases).
fn check_activation(b: &JobActivationBody) -> Result<()> {
    let tenants = b.tenant_ids.as_deref().unwrap_or_default();
    if tenants.iter().any(|t| t != DEFAULT_TENANT) {
        return Err(unsupported(
            &["tenantIds"],
            Some(serde_json::json!(tenants)),
            "qflow has no tenants: every job is the `<default>` tenant's, as in Camunda \
             without multi-tenancy; send [\"<default>\"], [] or null",
        ));
    }
    if b.tenant_filter == Some(TenantFilter::Assigned) {
        return Err(unsupported(
            &["tenantFilter"],
            Some(serde_json::json!("ASSIGNED")),
            "qflow has no tenants to assign to a caller (Camunda refuses it too when \
             multi-tenancy is disabled); send PROVIDED or null",
        ));
    }
    if b.with_lease == Some(true) {
        return Err(unsupported(
            &["withLease"],
            Some(serde_json::json!(true)),
            "qflow hands out no lease tokens; a job key already names one activation (one \
             attempt), and an answer for a superseded one is refused with 409; send false \
             or null",
        ));
    }
    if b.request_timeout
        .is_some_and(|t| !(-86_400_000..=86_400_000).contains(&t))
    {
        return Err(invalid(
            "requestTimeout",
            "is outside -86400000..=86400000 ms".to_owned(),
        ));
    }
    Ok(())
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
    check_activation(&body)?;
    let limit = state.request_timeout_ms.saturating_sub(1_000) as i64;
    let wait_ms = match body.request_timeout {
        None | Some(0) => REQUEST_TIMEOUT_DEFAULT_MS,
        Some(t) if t < 0 => 0,
        Some(t) => t,
    }
    .min(limit.max(0));
    let request = FetchRequest {
        worker: body
            .worker
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| WORKER_DEFAULT.to_owned()),
        max_tasks: body.max_jobs_to_activate,
        topics: vec![FetchTopic {
            name: body.job_type,
            lock_ms: body.timeout,
            // Camunda reads an empty list as no selection: every variable.
            variables: body.fetch_variable.filter(|names| !names.is_empty()),
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

/// A job completion (Camunda 8 `JobCompletionRequest`): every field of Camunda 8.10's.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobCompletionBody {
    /// Merged into the instance's variables (through the task's output mappings).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: Option<serde_json::Map<String, serde_json::Value>>,
    /// A user-task or ad-hoc sub-process result: taken when it asks for nothing (no
    /// denial, no corrections, no elements to activate), refused otherwise.
    #[serde(default)]
    pub result: Option<JobResultBody>,
    /// A lease token (Camunda 8.10): qflow hands none out, so only null.
    #[serde(default)]
    #[schema(schema_with = only_null)]
    pub lease_token: Option<String>,
    /// A business id to set on the instance (Camunda 8.10): only null.
    #[serde(default)]
    #[schema(schema_with = only_null)]
    pub business_id: Option<String>,
}

/// Camunda's `JobResult`: the fields of both its kinds, `JobResultUserTask` and
/// `JobResultAdHocSubProcess`, each taken only at its value that asks for nothing.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobResultBody {
    /// Which kind of result this is.
    #[serde(default, rename = "type")]
    pub result_type: Option<JobResultType>,
    /// A user task listener's denial: only false or null.
    #[serde(default)]
    #[schema(schema_with = only_false)]
    pub denied: Option<bool>,
    /// Only `""` or null: there is no denial to give a reason for.
    #[serde(default)]
    #[schema(max_length = 0)]
    pub denied_reason: Option<String>,
    /// A user task's corrected attributes: each only null.
    #[serde(default)]
    pub corrections: Option<JobResultCorrections>,
    /// The ad-hoc sub-process elements to activate: only `[]` or null.
    #[serde(default)]
    #[schema(max_items = 0)]
    pub activate_elements: Option<Vec<JobResultActivateElement>>,
    /// Only false or null.
    #[serde(default)]
    #[schema(schema_with = only_false)]
    pub is_completion_condition_fulfilled: Option<bool>,
    /// Only false or null.
    #[serde(default)]
    #[schema(schema_with = only_false)]
    pub is_cancel_remaining_instances: Option<bool>,
}

/// The kinds of job result Camunda has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
pub enum JobResultType {
    #[serde(rename = "userTask")]
    UserTask,
    #[serde(rename = "adHocSubProcess")]
    AdHocSubProcess,
}

/// Camunda's `JobResultCorrections`; a null attribute keeps the task's value there too.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobResultCorrections {
    #[serde(default)]
    #[schema(schema_with = only_null)]
    pub assignee: Option<String>,
    #[serde(default)]
    #[schema(schema_with = only_null)]
    pub due_date: Option<String>,
    #[serde(default)]
    #[schema(schema_with = only_null)]
    pub follow_up_date: Option<String>,
    #[serde(default)]
    #[schema(schema_with = only_null)]
    pub candidate_users: Option<Vec<String>>,
    #[serde(default)]
    #[schema(schema_with = only_null)]
    pub candidate_groups: Option<Vec<String>>,
    #[serde(default)]
    #[schema(schema_with = only_null)]
    pub priority: Option<i64>,
}

/// Camunda's `JobResultActivateElement`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobResultActivateElement {
    #[serde(default)]
    pub element_id: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub variables: Option<serde_json::Map<String, serde_json::Value>>,
}

/// What qflow says instead of a lease token, on every answer.
const NO_LEASE: &str = "qflow activates no job with a lease (`withLease` is refused), so \
                        there is no token to check; send null or leave it out";

/// Refuses a job result that asks for what qflow does not do; what passes asks for
/// nothing (Camunda's defaults: not denied, nothing corrected, nothing activated).
fn check_result(r: &JobResultBody) -> Result<()> {
    let no_listeners = "user-task denials and corrections are a task listener's answer, \
                        and qflow has no task listeners: its jobs are service tasks'";
    if r.denied == Some(true) {
        return Err(unsupported(
            &["result", "denied"],
            Some(serde_json::json!(true)),
            &format!("{no_listeners}; send false or null"),
        ));
    }
    if let Some(reason) = r.denied_reason.as_ref().filter(|s| !s.is_empty()) {
        return Err(unsupported(
            &["result", "deniedReason"],
            Some(serde_json::json!(reason)),
            &format!("{no_listeners}; send \"\" or null"),
        ));
    }
    if let Some(c) = &r.corrections {
        let given = [
            ("assignee", c.assignee.is_some()),
            ("dueDate", c.due_date.is_some()),
            ("followUpDate", c.follow_up_date.is_some()),
            ("candidateUsers", c.candidate_users.is_some()),
            ("candidateGroups", c.candidate_groups.is_some()),
            ("priority", c.priority.is_some()),
        ];
        if let Some((field, _)) = given.iter().find(|(_, given)| *given) {
            return Err(unsupported(
                &["result", "corrections", field],
                None,
                &format!("{no_listeners}; send null (which keeps the value in Camunda too)"),
            ));
        }
    }
    let no_ad_hoc = "qflow has no ad-hoc sub-processes";
    if let Some(elements) = r.activate_elements.as_ref().filter(|e| !e.is_empty()) {
        let ids: Vec<_> = elements.iter().map(|e| e.element_id.clone()).collect();
        return Err(unsupported(
            &["result", "activateElements"],
            Some(serde_json::json!(ids)),
            &format!("{no_ad_hoc}; send [] or null"),
        ));
    }
    for (field, flag) in [
        (
            "isCompletionConditionFulfilled",
            r.is_completion_condition_fulfilled,
        ),
        (
            "isCancelRemainingInstances",
            r.is_cancel_remaining_instances,
        ),
    ] {
        if flag == Some(true) {
            return Err(unsupported(
                &["result", field],
                Some(serde_json::json!(true)),
                &format!("{no_ad_hoc}; send false or null"),
            ));
        }
    }
    Ok(())
}

fn check_completion(b: &JobCompletionBody) -> Result<()> {
    if let Some(result) = &b.result {
        check_result(result)?;
    }
    if b.lease_token.is_some() {
        return Err(unsupported(&["leaseToken"], None, NO_LEASE));
    }
    if let Some(id) = &b.business_id {
        return Err(unsupported(
            &["businessId"],
            Some(serde_json::json!(id)),
            "qflow gives an instance its business key when it starts, never on a job's \
             completion; send null or leave it out",
        ));
    }
    Ok(())
}

/// A job failure (Camunda 8 `JobFailRequest`): every field of Camunda 8.10's.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobFailBody {
    /// Attempts left (0 ends the instance FAILED with an incident); absent or null: 0,
    /// as in Camunda.
    #[serde(default, deserialize_with = "qflow_ops::json::optional_integer")]
    #[schema(minimum = 0, maximum = 4294967295u64)]
    pub retries: Option<i64>,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub error_message: Option<String>,
    /// Wait this long (ms) before the next attempt is offered (0..=30 days); absent or
    /// null: 0.
    #[serde(default, deserialize_with = "qflow_ops::json::optional_integer")]
    #[schema(minimum = 0, maximum = 2592000000u64)]
    pub retry_back_off: Option<i64>,
    /// Only `{}` or null: a failure sets no variables in qflow.
    #[serde(default)]
    #[schema(value_type = Option<Empty>)]
    pub variables: Option<serde_json::Map<String, serde_json::Value>>,
    /// A lease token (Camunda 8.10): qflow hands none out, so only null.
    #[serde(default)]
    #[schema(schema_with = only_null)]
    pub lease_token: Option<String>,
}

fn check_failure(b: &JobFailBody) -> Result<()> {
    if let Some(vars) = b.variables.as_ref().filter(|v| !v.is_empty()) {
        return Err(unsupported(
            &["variables"],
            Some(serde_json::json!(vars.keys().collect::<Vec<_>>())),
            "qflow sets no variables when an attempt fails (Camunda sets them on the task's \
             local scope, which a qflow task does not have); send {} or null, or complete \
             or throw a BPMN error with them",
        ));
    }
    if b.lease_token.is_some() {
        return Err(unsupported(&["leaseToken"], None, NO_LEASE));
    }
    Ok(())
}

/// A BPMN error thrown by a job (Camunda 8 `JobErrorRequest`): every field of Camunda
/// 8.10's.
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
    /// A lease token (Camunda 8.10): qflow hands none out, so only null.
    #[serde(default)]
    #[schema(schema_with = only_null)]
    pub lease_token: Option<String>,
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
    check_completion(&body)?;
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
    check_failure(&body)?;
    let worker = holder(&state, &key).await?;
    let message = body.error_message.unwrap_or_default();
    // Camunda reads a null or absent `retries` and `retryBackOff` as 0.
    let retries = body.retries.unwrap_or(0);
    let back_off_ms = body.retry_back_off.unwrap_or(0);
    answered(
        state
            .ops
            .fail_pull(&key, &worker, retries, back_off_ms, &message)
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
    if body.lease_token.is_some() {
        return Err(unsupported(&["leaseToken"], None, NO_LEASE));
    }
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

/// What to change on an activated job (Camunda 8 `JobUpdateRequest`): every field of
/// Camunda 8.10's.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobUpdateBody {
    pub changeset: JobChangeset,
    /// A reference Camunda writes into the records of the operation: qflow keeps no such
    /// records, so only null.
    #[serde(default)]
    #[schema(schema_with = only_null)]
    pub operation_reference: Option<serde_json::Value>,
}

/// The changed values of a job (Camunda 8 `JobChangeset`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobChangeset {
    /// Only null or absent: a job's attempts left come from the model and from the
    /// failure that reports an attempt (`retries` of `POST /v2/jobs/{jobKey}/failure`).
    #[serde(default)]
    #[schema(schema_with = only_null)]
    pub retries: Option<serde_json::Value>,
    /// The job's new timeout, in ms from now (Camunda's meaning): the worker's lock on it
    /// is extended to then. Optional in Camunda's schema, required here: it is the one
    /// change qflow makes (a body without it is a 400 at `/changeset`).
    #[serde(default, deserialize_with = "qflow_ops::json::optional_integer")]
    #[schema(value_type = i64, required = true, minimum = 1, maximum = 86400000)]
    pub timeout: Option<i64>,
}

/// Changes an activated job (Camunda 8 `PATCH /v2/jobs/{jobKey}`): its timeout, counted
/// from now, as the worker holding it extends its lock. Its retries are not changed here
/// (docs/workers.md).
#[utoipa::path(patch, path = "/v2/jobs/{jobKey}", tag = "zeebe jobs",
    params(("jobKey" = String, Path, description = "The job key an activation returned")),
    request_body = JobUpdateBody,
    responses(
        (status = 204, description = "Updated: the job times out that long from now"),
        (status = 400, description = "A change qflow does not make, or no change", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The job is not activated", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["worker"])))]
pub async fn update(
    State(state): State<AppState>,
    _caller: Caller<WorkerScope>,
    Path(key): Path<String>,
    JsonBody(body): JsonBody<JobUpdateBody>,
) -> Result<StatusCode> {
    if let Some(reference) = body.operation_reference.filter(|v| !v.is_null()) {
        return Err(unsupported(
            &["operationReference"],
            Some(reference),
            "qflow keeps no operation records to tag; send null or leave it out",
        ));
    }
    if let Some(retries) = body.changeset.retries.filter(|v| !v.is_null()) {
        return Err(unsupported(
            &["changeset", "retries"],
            Some(retries),
            "a job's attempts left come from the model and from the failure that reports an \
             attempt (`retries` of POST /v2/jobs/{jobKey}/failure); a FAILED instance is \
             repaired with POST /v1/instances/{id}/resume, which chooses its budget",
        ));
    }
    let Some(timeout) = body.changeset.timeout else {
        return Err(invalid_at(
            &["changeset"],
            "a change must set `timeout` (ms from now), the one change qflow makes to an \
             activated job",
        ));
    };
    // The lock's bound (`LOCK_MS_MAX`, the schema's maximum).
    let max = qflow_runtime::pull::LOCK_MS_MAX;
    if !u64::try_from(timeout).is_ok_and(|ms| (1..=max).contains(&ms)) {
        return Err(invalid_at(
            &["changeset", "timeout"],
            &format!("{timeout} is not a timeout in 1..={max} ms from now"),
        ));
    }
    let worker = holder(&state, &key).await?;
    answered(state.ops.extend_lock(&key, &worker, timeout).await)
}
