//! Camunda 8 (Orchestration Cluster API, `/v2/…`) endpoints where they map onto
//! qflow's operations (SPEC P1 item 4, P2), with the Camunda 8 REST API's request and
//! response shapes (camelCase, `{"jobs": [...]}`, `{"items", "page"}`, `204 No Content`
//! for commands, RFC 9457 problems for errors). This module: the jobs
//! (`POST /v2/jobs/activation`, `/v2/jobs/{jobKey}/completion`, `/failure`, `/error`,
//! `PATCH /v2/jobs/{jobKey}`), the probes a client calls on start (`GET /v2/topology`,
//! `/v2/license`, `/v2/status`), deployments (`POST /v2/deployments`, multipart),
//! process-instance creation (`POST /v2/process-instances`), message correlation and
//! publication, a time to live keeping the message (`POST /v2/messages/correlation`,
//! `/publication`) and signal broadcast (`POST /v2/signals/broadcast`); its submodules
//! serve process instances by key (`instances`), element instances (`elements`),
//! incidents (`incidents`), the task list (`user_tasks`) and variables (`variables`),
//! sharing `search`. Keys are Camunda's
//! 64-bit integers from the store's registry (`qflow_ops::keys`); a definition's key is
//! its deployment id.
//!
//! Every job route calls the same `qflow_ops::pull` operation as the native API. Zeebe's
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
//! lists every field and every difference (a failed job's next attempt is a new job; an
//! expired job timeout spends an attempt).

pub mod elements;
pub mod incidents;
pub mod instances;
mod search;
pub mod user_tasks;
pub mod variables;

/// The fields of Camunda's search filters that qflow accepts only null, by the filter's
/// schema name: the OpenAPI document lists them as null-only and closes each filter to
/// other fields (`crate::finish`), as the filters themselves do when they read a body.
pub(crate) fn filters_not_kept() -> [(&'static str, &'static [&'static str]); 4] {
    [
        ("ProcessInstanceFilter", instances::OTHER_FILTER_FIELDS),
        ("ElementInstanceFilter", elements::OTHER_FILTER_FIELDS),
        ("IncidentFilter", incidents::OTHER_FILTER_FIELDS),
        ("UserTaskFilter", user_tasks::OTHER_FILTER_FIELDS),
    ]
}

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use qflow_loader::model::{listener_of, written_element, ListenerEvent};
use qflow_ops::keys::minted_key;
use qflow_ops::pull::{FetchRequest, FetchTopic, LockedTaskView, TaskId};
use qflow_store::{KeyKind, KeyName};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::{Caller, WorkerScope};
use crate::body::{JsonBody, OptionalJsonBody};
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
    #[serde(deserialize_with = "qflow_ops::json::long")]
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
    #[serde(default, deserialize_with = "qflow_ops::json::optional_long")]
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

/// An activated job (Camunda 8 `ActivatedJobResult`, the fields qflow has). Keys are
/// Camunda's 64-bit integers as decimal strings (`docs/workers.md`, "Keys").
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActivatedJob {
    /// This attempt of the task: a failed job's next attempt is a new job.
    #[schema(pattern = "^[0-9]+$")]
    pub job_key: String,
    #[serde(rename = "type")]
    pub job_type: String,
    /// The BPMN process id.
    pub process_definition_id: String,
    /// The deployment id, in decimal.
    #[schema(pattern = "^[0-9]+$")]
    pub process_definition_key: String,
    /// The deployment's version among the process's deployments, from 1.
    pub process_definition_version: i64,
    #[schema(pattern = "^[0-9]+$")]
    pub process_instance_key: String,
    /// The activity instance's BPMN id (the task's id).
    pub element_id: String,
    /// The activity instance, the same for every attempt of it.
    #[schema(pattern = "^[0-9]+$")]
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
    /// `EXECUTION_LISTENER` for a Zeebe execution listener's job (its element is
    /// `elementId`), else `BPMN_ELEMENT`: qflow runs no user-task jobs.
    pub kind: &'static str,
    /// `START` or `END` for an execution listener's job, else `UNSPECIFIED`.
    pub listener_event_type: &'static str,
    // What Camunda 8.9 and 8.10 send beside (their schemas require the members, null
    // allowed; the official Python SDK refuses an answer without them):
    /// Always null: a `BPMN_ELEMENT` job is no user task's.
    #[schema(value_type = Option<Object>)]
    pub user_task: Option<serde_json::Value>,
    /// Always empty: qflow has no instance tags.
    pub tags: Vec<String>,
    /// Always null: qflow does not name a called instance's root here.
    #[schema(value_type = Option<String>)]
    pub root_process_instance_key: Option<String>,
    /// `<default>`, the one tenant.
    pub physical_tenant_id: &'static str,
    /// Always null.
    #[schema(value_type = Option<String>)]
    pub business_id: Option<String>,
    /// Always 0: qflow's jobs have no priority.
    pub priority: i64,
}

/// What an activation returns.
#[derive(Debug, Serialize, ToSchema)]
pub struct ActivatedJobs {
    pub jobs: Vec<ActivatedJob>,
}

/// The keys of a locked task's job, instance and activity instance, in that order.
fn job_names(t: &LockedTaskView) -> Result<[KeyName; 3]> {
    let task = TaskId::parse(&t.id).map_err(|e| Problem::from_ops(e, Place::Body))?;
    Ok([
        KeyName {
            instance: task.instance,
            kind: KeyKind::Job,
            node: task.node.clone(),
            attempt: task.attempt.get(),
        },
        KeyName::instance(task.instance),
        KeyName {
            instance: task.instance,
            kind: KeyKind::Element,
            node: task.node,
            attempt: 0,
        },
    ])
}

fn activated(t: LockedTaskView, keys: &[i64], version: i64) -> ActivatedJob {
    let listener = listener_of(&t.node).map(|(_, event)| event);
    ActivatedJob {
        job_key: keys[0].to_string(),
        job_type: t.topic,
        process_definition_id: t.process_id,
        process_definition_key: t.deployment.to_string(),
        process_definition_version: version,
        process_instance_key: keys[1].to_string(),
        element_id: element_id(&t.node),
        element_instance_key: keys[2].to_string(),
        worker: t.worker,
        retries: t.retries,
        deadline: t.lock_expires_at_ms,
        variables: serde_json::Value::Object(t.variables.into_iter().collect()),
        custom_headers: t.headers,
        tenant_id: DEFAULT_TENANT,
        kind: if listener.is_some() {
            "EXECUTION_LISTENER"
        } else {
            "BPMN_ELEMENT"
        },
        listener_event_type: match listener {
            None => "UNSPECIFIED",
            Some(ListenerEvent::Start) => "START",
            Some(ListenerEvent::End) => "END",
        },
        user_task: None,
        tags: Vec::new(),
        root_process_instance_key: None,
        physical_tenant_id: DEFAULT_TENANT,
        business_id: None,
        priority: 0,
    }
}

/// The BPMN id of an activity instance's key (`pay@2` → `pay`, `sub@2/pay#3` → `pay`):
/// what Camunda calls the element id. A node the loader added beside an element is that
/// element's (`pay~start-1` → `pay`, `join~fork` → `join`), as Zeebe names a listener
/// job's element.
fn element_id(node: &str) -> String {
    written_element(node).to_owned()
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
    if locked.is_empty() {
        return Ok(Json(ActivatedJobs { jobs: Vec::new() }));
    }
    // The locks are durable now: if the answer cannot be made, they are given back (no
    // budget spent) rather than left to expire, which would spend an attempt.
    let (keys, deployments) = match activation_parts(&state, &locked).await {
        Ok(parts) => parts,
        Err(problem) => {
            for t in &locked {
                if let Err(e) = state.ops.unlock_pull(&t.id, Some(&t.worker)).await {
                    tracing::warn!(error = %e, task = %t.id, "an activation's lock not given back");
                }
            }
            return Err(problem);
        }
    };
    let jobs = locked
        .into_iter()
        .zip(keys.chunks(3))
        .map(|(t, keys)| {
            let (_, version) = definition_version(&deployments, t.deployment);
            activated(t, keys, version)
        })
        .collect();
    Ok(Json(ActivatedJobs { jobs }))
}

/// The Camunda 8 key of the instance qflow names `id` (a UUID in text, as `ops` answers).
async fn instance_key(state: &AppState, id: &str) -> Result<String> {
    let id = qflow_ops::parse_instance_id(id).map_err(|e| Problem::from_ops(e, Place::Body))?;
    let keys = state
        .ops
        .camunda_keys(&[KeyName::instance(id)])
        .await
        .map_err(|e| Problem::from_ops(e, Place::Body))?;
    Ok(keys[0].to_string())
}

/// What an activation's answer needs beside the locked tasks: their keys (job, instance,
/// element instance, three per task) and the deployments, for the versions.
async fn activation_parts(
    state: &AppState,
    locked: &[LockedTaskView],
) -> Result<(Vec<i64>, Vec<qflow_ops::DeploymentSummary>)> {
    let mut names = Vec::with_capacity(locked.len() * 3);
    for t in locked {
        names.extend(job_names(t)?);
    }
    let keys = state
        .ops
        .camunda_keys(&names)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Body))?;
    let deployments = deployments(state).await?;
    Ok((keys, deployments))
}

/// A key in a path (`/v2/jobs/{jobKey}`, …): Camunda's keys are 64-bit integers in
/// decimal. Anything else is a 400 naming the parameter; an integer that is no key qflow
/// gave (0, negative) is left to the lookup, which answers 404 as for any unknown key.
fn path_key(name: &str, text: &str) -> Result<i64> {
    search::parse_key(text).ok_or_else(|| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid",
            format!("{name}: {text:?} is not a key (a 64-bit integer in decimal)"),
        )
    })
}

/// The pull task id of the job a path's `jobKey` names; a key that names no job is a 404.
async fn job_id(state: &AppState, key: &str) -> Result<String> {
    let key = path_key("jobKey", key)?;
    let task = state
        .ops
        .job_of_key(key)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Path))?;
    Ok(task.to_string())
}

/// A job completion (Camunda 8 `JobCompletionRequest`): every field of Camunda 8.10's.
#[derive(Debug, Default, Deserialize, ToSchema)]
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
    #[serde(default, alias = "jobLeaseToken")]
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
    // qflow runs an ad-hoc sub-process's BPMN implementation only: one run by a job
    // worker (`zeebe:taskDefinition` on it) is refused at load (Q135), so no job is ever
    // an ad-hoc sub-process's to steer.
    let no_ad_hoc = "qflow runs no ad-hoc sub-process by a job worker";
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
#[derive(Debug, Default, Deserialize, ToSchema)]
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
    #[serde(default, deserialize_with = "qflow_ops::json::optional_long")]
    #[schema(minimum = 0, maximum = 2592000000u64)]
    pub retry_back_off: Option<i64>,
    /// Only `{}` or null: a failure sets no variables in qflow.
    #[serde(default)]
    #[schema(value_type = Option<Empty>)]
    pub variables: Option<serde_json::Map<String, serde_json::Value>>,
    /// A lease token (Camunda 8.10): qflow hands none out, so only null.
    #[serde(default, alias = "jobLeaseToken")]
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
    #[serde(default, alias = "jobLeaseToken")]
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
    params(("jobKey" = String, Path, pattern = "^-?[0-9]{1,18}$", description = "The job key an activation returned")),
    request_body(content = Option<JobCompletionBody>),
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
    OptionalJsonBody(body): OptionalJsonBody<JobCompletionBody>,
) -> Result<StatusCode> {
    let body = body.unwrap_or_default();
    check_completion(&body)?;
    let id = job_id(&state, &key).await?;
    let worker = holder(&state, &id).await?;
    let variables = body.variables.unwrap_or_default().into_iter().collect();
    answered(state.ops.complete_pull(&id, &worker, variables).await)
}

/// Reports a failed job (Camunda 8 `POST /v2/jobs/{jobKey}/failure`).
#[utoipa::path(post, path = "/v2/jobs/{jobKey}/failure", tag = "zeebe jobs",
    params(("jobKey" = String, Path, pattern = "^-?[0-9]{1,18}$", description = "The job key an activation returned")),
    request_body(content = Option<JobFailBody>),
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
    OptionalJsonBody(body): OptionalJsonBody<JobFailBody>,
) -> Result<StatusCode> {
    let body = body.unwrap_or_default();
    check_failure(&body)?;
    let id = job_id(&state, &key).await?;
    let worker = holder(&state, &id).await?;
    let message = body.error_message.unwrap_or_default();
    // Camunda reads a null or absent `retries` and `retryBackOff` as 0.
    let retries = body.retries.unwrap_or(0);
    let back_off_ms = body.retry_back_off.unwrap_or(0);
    answered(
        state
            .ops
            .fail_pull(&id, &worker, retries, back_off_ms, &message)
            .await,
    )
}

/// Throws a BPMN error from a job (Camunda 8 `POST /v2/jobs/{jobKey}/error`): it routes
/// to the task's error boundary, spending no budget.
#[utoipa::path(post, path = "/v2/jobs/{jobKey}/error", tag = "zeebe jobs",
    params(("jobKey" = String, Path, pattern = "^-?[0-9]{1,18}$", description = "The job key an activation returned")),
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
    let id = job_id(&state, &key).await?;
    let worker = holder(&state, &id).await?;
    let message = body.error_message.unwrap_or_default();
    let variables = body.variables.unwrap_or_default().into_iter().collect();
    answered(
        state
            .ops
            .bpmn_error_pull(&id, &worker, &body.error_code, &message, variables)
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

/// The changed values of a job (Camunda 8 `JobChangeset`): at least one.
// `minProperties: 1` is set in the document by `crate::finish` (utoipa-gen 5.5.0 writes
// a derive's `min_properties` as `maxProperties`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobChangeset {
    /// The attempts the job has left, counting this one (1 or more). On a job whose
    /// instance failed at it (its incident open), the instance stays FAILED and the
    /// incident's resolution offers the job with these retries, as in Camunda. Null or
    /// absent: unchanged; a change sets this, `timeout` or both.
    #[serde(default, deserialize_with = "qflow_ops::json::optional_integer")]
    #[schema(value_type = i64, required = false, minimum = 1, maximum = 2147483647)]
    pub retries: Option<i64>,
    /// The job's new timeout, in ms from now (Camunda's meaning): the worker's lock on it
    /// is extended to then. Null or absent: unchanged.
    #[serde(default, deserialize_with = "qflow_ops::json::optional_long")]
    #[schema(value_type = i64, required = false, minimum = 1, maximum = 86400000)]
    pub timeout: Option<i64>,
    /// A job priority (Camunda 8.10): taken only null (qflow's jobs have none), and left
    /// out of the document, whose `minProperties` counts the two changes qflow makes.
    #[serde(default)]
    #[schema(ignore)]
    pub priority: Option<serde_json::Value>,
}

/// Changes a job (Camunda 8 `PATCH /v2/jobs/{jobKey}`): its retries (the attempts it has
/// left, the instance running or FAILED at it), and the timeout of an activated job,
/// counted from now, as the worker holding it extends its lock. The timeout first (a job
/// nobody holds is refused before anything changes), then the retries of that same live
/// attempt.
#[utoipa::path(patch, path = "/v2/jobs/{jobKey}", tag = "zeebe jobs",
    params(("jobKey" = String, Path, pattern = "^-?[0-9]{1,18}$", description = "The job key an activation or incident returned")),
    request_body = JobUpdateBody,
    responses(
        (status = 204, description = "Updated"),
        (status = 400, description = "No change, or one out of range", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such job", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The job's attempt is over (or, for a timeout, it is not activated)", body = Problem, content_type = "application/problem+json"),
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
    let JobChangeset {
        retries,
        timeout,
        priority,
    } = body.changeset;
    if let Some(priority) = priority.filter(|v| !v.is_null()) {
        return Err(unsupported(
            &["changeset", "priority"],
            Some(priority),
            "qflow's jobs have no priority: they are offered oldest first",
        ));
    }
    if retries.is_none() && timeout.is_none() {
        return Err(invalid_at(
            &["changeset"],
            "a change sets `retries`, `timeout` or both",
        ));
    }
    if retries.is_some_and(|r| !(1..=i64::from(i32::MAX)).contains(&r)) {
        return Err(invalid_at(
            &["changeset", "retries"],
            &format!("{} is not a number of retries from 1", retries.unwrap_or(0)),
        ));
    }
    // The lock's bound (`LOCK_MS_MAX`, the schema's maximum).
    let max = qflow_runtime::pull::LOCK_MS_MAX;
    if let Some(timeout) = timeout {
        if !u64::try_from(timeout).is_ok_and(|ms| (1..=max).contains(&ms)) {
            return Err(invalid_at(
                &["changeset", "timeout"],
                &format!("{timeout} is not a timeout in 1..={max} ms from now"),
            ));
        }
    }
    let id = job_id(&state, &key).await?;
    // With a timeout, the job must be activated: the lock moves first (a job nobody
    // holds is refused before its retries change), then the retries are set.
    if let Some(timeout) = timeout {
        let worker = holder(&state, &id).await?;
        answered(state.ops.extend_lock(&id, &worker, timeout).await)?;
    }
    match retries {
        Some(retries) => answered(state.ops.set_pull_retries(&id, retries).await),
        None => Ok(StatusCode::NO_CONTENT),
    }
}

/// The Orchestration Cluster API release whose shapes these endpoints answer in, given as
/// the gateway's version by `GET /v2/topology` (a client that gates a feature on the
/// version sees the API it talks to, not qflow's own version, which the broker entry
/// carries).
const CAMUNDA_API_VERSION: &str = "8.8.0";

/// Camunda 8's `TopologyResponse`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyView {
    /// One entry: qflow serves from one process, whatever its store.
    pub brokers: Vec<BrokerView>,
    /// Always null: qflow has no cluster id.
    #[schema(value_type = Option<String>)]
    pub cluster_id: Option<String>,
    /// 1.
    pub cluster_size: i32,
    /// 1: one store holds every instance.
    pub partitions_count: i32,
    /// 1 (the store's own durability is not reported here).
    pub replication_factor: i32,
    /// The Camunda API release whose shapes qflow answers in.
    pub gateway_version: String,
    /// "-1": the topology never changes.
    pub last_completed_change_id: String,
}

/// Camunda 8's `BrokerInfo`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BrokerView {
    pub node_id: i32,
    /// The node id as text (Camunda 8.10's `brokerId`).
    pub broker_id: String,
    /// `qflow`: there is no broker address to reach; clients use the API's address.
    pub host: String,
    /// 0: see `host`.
    pub port: i32,
    pub partitions: Vec<PartitionView>,
    /// qflow's version.
    pub version: String,
}

/// Camunda 8's `Partition`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionView {
    pub partition_id: i32,
    /// `leader`: this process leads its one partition.
    pub role: String,
    /// `healthy` when the store answers, `unhealthy` when it does not.
    pub health: String,
    /// `active` (Camunda 8.10): the one partition is always in service.
    pub state: &'static str,
}

/// The cluster's topology (Camunda 8 `GET /v2/topology`), which clients read on start:
/// one broker leading one partition, healthy when the store answers (the readiness
/// check of `/readyz`). Any valid token may read it.
#[utoipa::path(get, path = "/v2/topology", tag = "zeebe jobs",
    responses((status = 200, description = "The topology", body = TopologyView)),
    security(("bearer" = [])))]
pub async fn topology(
    State(state): State<AppState>,
    _caller: crate::auth::Authenticated,
) -> Json<TopologyView> {
    let health = if state.ops.ready().await.is_ok() {
        "healthy"
    } else {
        "unhealthy"
    };
    Json(TopologyView {
        brokers: vec![BrokerView {
            node_id: 0,
            broker_id: "0".to_owned(),
            host: "qflow".to_owned(),
            port: 0,
            partitions: vec![PartitionView {
                partition_id: 1,
                role: "leader".to_owned(),
                health: health.to_owned(),
                state: "active",
            }],
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }],
        cluster_id: None,
        cluster_size: 1,
        partitions_count: 1,
        replication_factor: 1,
        gateway_version: CAMUNDA_API_VERSION.to_owned(),
        last_completed_change_id: "-1".to_owned(),
    })
}

/// Camunda 8's `LicenseResponse`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LicenseView {
    /// true: qflow needs no license key to run in production.
    pub valid_license: bool,
    /// `Apache-2.0`, qflow's license.
    pub license_type: String,
    /// false.
    pub is_commercial: bool,
    /// Always null: nothing expires.
    #[schema(value_type = Option<String>)]
    pub expires_at: Option<String>,
}

/// The license status (Camunda 8 `GET /v2/license`): qflow is open source and needs no
/// license key, so the answer is always a valid, non-commercial, non-expiring license.
/// Any valid token may read it.
#[utoipa::path(get, path = "/v2/license", tag = "zeebe jobs",
    responses((status = 200, description = "The license status", body = LicenseView)),
    security(("bearer" = [])))]
pub async fn license(_caller: crate::auth::Authenticated) -> Json<LicenseView> {
    Json(LicenseView {
        valid_license: true,
        license_type: "Apache-2.0".to_owned(),
        is_commercial: false,
        expires_at: None,
    })
}

/// Whether requests can be served (Camunda 8 `GET /v2/status`): 204 when the store
/// answers, 503 when it does not — Camunda's "at least one partition with a healthy
/// leader". Public, like `/readyz`.
#[utoipa::path(get, path = "/v2/status", tag = "zeebe jobs",
    responses(
        (status = 204, description = "The store answers: requests can be served"),
        (status = 503, description = "The store does not answer", body = Problem, content_type = "application/problem+json")))]
pub async fn status(State(state): State<AppState>) -> Result<StatusCode> {
    state
        .ops
        .ready()
        .await
        .map(|()| StatusCode::NO_CONTENT)
        .map_err(|e| {
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                format!("the store does not answer: {e}"),
            )
        })
}

/// A message correlation (Camunda 8 `MessageCorrelationRequest`): every field of Camunda
/// 8.10's.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MessageCorrelationBody {
    /// The message name (the `name` of its `<message>`).
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub name: String,
    /// The value the waiting instance's correlation key evaluated to; for a message start
    /// event, the started instance's business key. Required (1 to 64 characters): qflow
    /// correlates by key, and an empty one (Camunda's default, which a start event takes)
    /// is refused.
    #[serde(default)]
    #[schema(
        required = true,
        value_type = String,
        min_length = 1,
        max_length = 64,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub correlation_key: Option<String>,
    /// Merged into the instance's variables (or mapped by the wait's output mappings).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub variables: Option<serde_json::Map<String, serde_json::Value>>,
    /// Only `<default>` or null: qflow has no tenants.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^<default>$")]
    pub tenant_id: Option<String>,
}

/// Camunda 8's `MessageCorrelationResult`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageCorrelationView {
    /// A fresh key for this correlation: qflow keeps no message records, so the key
    /// names nothing that can be looked up later.
    #[schema(pattern = "^[0-9]+$")]
    pub message_key: String,
    pub tenant_id: String,
    /// The first instance the message reached or started.
    #[schema(pattern = "^[0-9]+$")]
    pub process_instance_key: String,
}

/// Correlates a message (Camunda 8 `POST /v2/messages/correlation`): it completes the
/// wait of every instance whose open subscription for the message has this key, or,
/// when none waits, starts an instance of every process whose newest live deployment
/// has a message start event for it, as `POST /v1/messages` with `all` does. Nothing is
/// buffered (as Camunda's correlation): with nothing reached, a 404.
#[utoipa::path(post, path = "/v2/messages/correlation", tag = "zeebe jobs",
    request_body = MessageCorrelationBody,
    responses(
        (status = 200, description = "The message reached or started at least one instance", body = MessageCorrelationView),
        (status = 404, description = "Nothing waits for the message under this key, and no process starts on it", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["operate"])))]
pub async fn correlate_message(
    State(state): State<AppState>,
    caller: Caller<crate::auth::OperateScope>,
    JsonBody(body): JsonBody<MessageCorrelationBody>,
) -> Result<Json<MessageCorrelationView>> {
    only_default_tenant(body.tenant_id.as_deref(), "message")?;
    let request = message_request(body.name, body.correlation_key, body.variables)?;
    let correlated = state
        .ops
        .as_actor(&caller.name)
        .correlate(request)
        .await
        .map_err(|e| ops_problem(e, &[("correlation_key", "correlationKey")]))?;
    let first = correlated
        .deliveries
        .iter()
        .find(|d| matches!(d.outcome, "delivered" | "started" | "already_started"))
        .ok_or_else(|| {
            Problem::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!(
                    "message `{}` with key `{}` reached no wait: each ended before it came",
                    correlated.name, correlated.correlation_key
                ),
            )
        })?;
    Ok(Json(MessageCorrelationView {
        message_key: minted_key().to_string(),
        tenant_id: DEFAULT_TENANT.to_owned(),
        process_instance_key: instance_key(&state, &first.instance).await?,
    }))
}

/// A signal broadcast (Camunda 8 `SignalBroadcastRequest`): every field of Camunda
/// 8.10's.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SignalBroadcastBody {
    /// The signal name (the `name` of its `<signal>`).
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub signal_name: String,
    /// Merged into each catching instance's variables; the start variables of each
    /// instance a signal start event starts.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub variables: Option<serde_json::Map<String, serde_json::Value>>,
    /// Only `<default>` or null: qflow has no tenants.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^<default>$")]
    pub tenant_id: Option<String>,
}

/// Camunda 8's `SignalBroadcastResult`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SignalBroadcastView {
    /// A fresh key for this broadcast, which names nothing that can be looked up later
    /// (the audit log records the broadcast under qflow's own id).
    #[schema(pattern = "^[0-9]+$")]
    pub signal_key: String,
    pub tenant_id: String,
}

/// Broadcasts a signal (Camunda 8 `POST /v2/signals/broadcast`), as `POST /v1/signals`
/// does: every instance waiting for it catches it, and every process whose newest live
/// deployment has a signal start event for it starts an instance. Reaching nothing is
/// not an error (as in Camunda).
#[utoipa::path(post, path = "/v2/signals/broadcast", tag = "zeebe jobs",
    request_body = SignalBroadcastBody,
    responses((status = 200, description = "Broadcast", body = SignalBroadcastView)),
    security(("bearer" = ["operate"])))]
pub async fn broadcast_signal(
    State(state): State<AppState>,
    caller: Caller<crate::auth::OperateScope>,
    JsonBody(body): JsonBody<SignalBroadcastBody>,
) -> Result<Json<SignalBroadcastView>> {
    only_default_tenant(body.tenant_id.as_deref(), "signal")?;
    let request = qflow_ops::SignalRequest {
        name: body.signal_name,
        variables: body.variables.unwrap_or_default().into_iter().collect(),
        id: None,
    };
    state
        .ops
        .as_actor(&caller.name)
        .broadcast_signal(request)
        .await
        .map_err(|e| ops_problem(e, &[("name", "signalName")]))?;
    Ok(Json(SignalBroadcastView {
        signal_key: minted_key().to_string(),
        tenant_id: DEFAULT_TENANT.to_owned(),
    }))
}

/// A process-instance creation (Camunda 8 `ProcessInstanceCreationInstruction`, by id or
/// by key): every field of Camunda 8.10's. Read as one struct, so that a body naming both
/// or neither is refused at its field; documented as Camunda's `oneOf` of the two
/// shapes ([`CreationByIdDoc`], [`CreationByKeyDoc`]).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProcessInstanceCreationBody {
    #[serde(default)]
    pub process_definition_id: Option<String>,
    #[serde(default, deserialize_with = "qflow_ops::json::optional_integer")]
    pub process_definition_version: Option<i64>,
    #[serde(default)]
    pub process_definition_key: Option<String>,
    #[serde(default)]
    pub variables: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    pub tenant_id: Option<String>,
    #[serde(default)]
    pub operation_reference: Option<serde_json::Value>,
    #[serde(default)]
    pub start_instructions: Option<Vec<serde_json::Value>>,
    #[serde(default)]
    pub runtime_instructions: Option<Vec<serde_json::Value>>,
    #[serde(default)]
    pub await_completion: Option<bool>,
    #[serde(default)]
    pub fetch_variables: Option<Vec<String>>,
    #[serde(default, deserialize_with = "qflow_ops::json::optional_long")]
    pub request_timeout: Option<i64>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
}

impl utoipa::PartialSchema for ProcessInstanceCreationBody {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::OneOfBuilder::new()
            .item(CreationByIdDoc::schema())
            .item(CreationByKeyDoc::schema())
            .into()
    }
}

impl ToSchema for ProcessInstanceCreationBody {}

/// The two shapes of a creation, for the OpenAPI document only: the fields they share,
/// with the one that names the definition.
macro_rules! creation_doc {
    ($(#[$meta:meta])* $name:ident { $($definition:tt)* }) => {
        $(#[$meta])*
        #[derive(Deserialize, ToSchema)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        #[allow(dead_code)]
        pub struct $name {
            $($definition)*
            #[schema(value_type = Option<Object>)]
            variables: Option<serde_json::Map<String, serde_json::Value>>,
            /// Only `<default>` or null: qflow has no tenants.
            #[schema(value_type = Option<String>, pattern = "^<default>$")]
            tenant_id: Option<String>,
            #[schema(schema_with = only_null)]
            operation_reference: Option<serde_json::Value>,
            /// Only `[]` or null: an instance starts at its start event.
            #[schema(value_type = Option<Vec<Object>>, max_items = 0)]
            start_instructions: Option<Vec<serde_json::Value>>,
            /// Only `[]` or null.
            #[schema(value_type = Option<Vec<Object>>, max_items = 0)]
            runtime_instructions: Option<Vec<serde_json::Value>>,
            /// Answer once the instance has ended — or, qflow's respond-and-continue,
            /// once a token stands at a `q:respond` task — with its variables, at most
            /// `requestTimeout`.
            await_completion: Option<bool>,
            /// With `awaitCompletion`: only these variables are answered; absent, null
            /// or `[]`: all.
            fetch_variables: Option<Vec<String>>,
            /// With `awaitCompletion`: how long to wait, ms; 0, absent or null: 10 s. At
            /// most 25 s, and capped one second below the server's request time limit.
            #[schema(value_type = Option<i64>, minimum = 0, maximum = 25000)]
            request_timeout: Option<i64>,
            /// Only `[]` or null: qflow has no instance tags.
            #[schema(value_type = Option<Vec<String>>, max_items = 0)]
            tags: Option<Vec<String>>,
        }
    };
}

creation_doc!(
    /// A creation by process id (Camunda's `ProcessInstanceCreationInstructionById`).
    CreationByIdDoc {
        /// The process id in the model (`<process id>`).
        #[schema(min_length = 1, max_length = 256)]
        process_definition_id: String,
        /// Its n-th deployment, counted from 1 as Camunda counts versions; -1, absent or
        /// null: its newest live deployment.
        #[schema(value_type = Option<i64>, minimum = -1, maximum = 2147483647)]
        process_definition_version: Option<i64>,
    }
);

creation_doc!(
    /// A creation by definition key (Camunda's `ProcessInstanceCreationInstructionByKey`).
    CreationByKeyDoc {
        /// The definition's key: a qflow deployment id in decimal (what
        /// `processDefinitionKey` answers).
        #[schema(pattern = "^[1-9][0-9]{0,17}$")]
        process_definition_key: String,
    }
);

/// Camunda 8's `CreateProcessInstanceResult`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInstanceCreationView {
    pub process_definition_id: String,
    /// The deployment's place among its process's deployments, from 1.
    pub process_definition_version: i64,
    /// The deployment id, in decimal.
    #[schema(pattern = "^[0-9]+$")]
    pub process_definition_key: String,
    #[schema(pattern = "^[0-9]+$")]
    pub process_instance_key: String,
    pub tenant_id: String,
    /// With `awaitCompletion`: the variables when the wait ended; else `{}`.
    #[schema(value_type = Object)]
    pub variables: serde_json::Map<String, serde_json::Value>,
    pub tags: Vec<String>,
    /// Always null: an instance created here has no business key (Camunda 8.9's
    /// `businessId`, sent as the newer APIs send it, null).
    #[schema(value_type = Option<String>)]
    pub business_id: Option<String>,
}

/// How long `awaitCompletion` waits when `requestTimeout` is 0 or absent, ms.
const AWAIT_COMPLETION_DEFAULT_MS: u64 = 10_000;

/// Creates a process instance (Camunda 8 `POST /v2/process-instances`), by process id
/// (and version) or by definition key, answering once its first step is durable — with
/// `awaitCompletion`, once it has ended or a token stands at a `q:respond` task.
#[utoipa::path(post, path = "/v2/process-instances", tag = "zeebe jobs",
    request_body = ProcessInstanceCreationBody,
    responses(
        (status = 200, description = "Created (and, with awaitCompletion, waited for)", body = ProcessInstanceCreationView),
        (status = 404, description = "No such definition, or no live deployment of the process", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The definition's deployment is retired", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "awaitCompletion: the instance did not end in time; it goes on", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["operate"])))]
pub async fn create_process_instance(
    State(state): State<AppState>,
    caller: Caller<crate::auth::OperateScope>,
    JsonBody(body): JsonBody<ProcessInstanceCreationBody>,
) -> Result<Json<ProcessInstanceCreationView>> {
    only_default_tenant(body.tenant_id.as_deref(), "instance")?;
    if let Some(reference) = body.operation_reference.filter(|v| !v.is_null()) {
        return Err(unsupported(
            &["operationReference"],
            Some(reference),
            "qflow keeps no operation records to tag; send null or leave it out",
        ));
    }
    for (field, list) in [
        ("startInstructions", &body.start_instructions),
        ("runtimeInstructions", &body.runtime_instructions),
    ] {
        if list.as_ref().is_some_and(|l| !l.is_empty()) {
            return Err(unsupported(
                &[field],
                None,
                "an instance starts at its start event, as a start without instructions does",
            ));
        }
    }
    if body.tags.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(unsupported(&["tags"], None, "qflow has no instance tags"));
    }
    if body
        .process_definition_version
        .is_some_and(|v| !(-1..=i64::from(i32::MAX)).contains(&v))
    {
        return Err(invalid_at(
            &["processDefinitionVersion"],
            "is -1 (the newest live deployment) or a version from 1",
        ));
    }
    let max = qflow_ops::START_WAIT_MS_MAX;
    let wait_ms = match body.request_timeout {
        None | Some(0) => AWAIT_COMPLETION_DEFAULT_MS,
        Some(ms) => match u64::try_from(ms) {
            Ok(ms) if ms <= max => ms,
            _ => {
                return Err(invalid_at(
                    &["requestTimeout"],
                    &format!("is 0 (10 s) or 1 to {max} ms"),
                ))
            }
        },
    };
    let all = deployments(&state).await?;
    let request = match (&body.process_definition_id, &body.process_definition_key) {
        (Some(_), Some(_)) | (None, None) => {
            return Err(invalid(
                "processDefinitionId",
                "give exactly one of processDefinitionId and processDefinitionKey",
            ))
        }
        (None, Some(key)) => {
            let id = key
                .parse::<i64>()
                .ok()
                .filter(|&id| id >= 1)
                .ok_or_else(|| {
                    invalid_at(
                        &["processDefinitionKey"],
                        &format!("`{key}` is not a definition key (a deployment id)"),
                    )
                })?;
            qflow_ops::StartRequest {
                deployment: Some(id),
                process_id: None,
                variables: Default::default(),
                business_key: None,
            }
        }
        (Some(process), None) => match body.process_definition_version {
            None | Some(-1) => qflow_ops::StartRequest {
                deployment: None,
                process_id: Some(process.clone()),
                variables: Default::default(),
                business_key: None,
            },
            Some(version) => {
                let found = usize::try_from(version)
                    .ok()
                    .filter(|&v| v >= 1)
                    .and_then(|v| all.iter().filter(|d| &d.process_id == process).nth(v - 1));
                let Some(deployment) = found else {
                    return Err(Problem::new(
                        StatusCode::NOT_FOUND,
                        "not_found",
                        format!("process `{process}` has no version {version}"),
                    )
                    .at_pointer(["processDefinitionVersion"], "no such version"));
                };
                qflow_ops::StartRequest {
                    deployment: Some(deployment.id),
                    process_id: None,
                    variables: Default::default(),
                    business_key: None,
                }
            }
        },
    };
    let request = qflow_ops::StartRequest {
        variables: body.variables.unwrap_or_default().into_iter().collect(),
        ..request
    };
    let ops = state.ops.as_actor(&caller.name);
    let (instance, deployment, variables) = if body.await_completion == Some(true) {
        let wait_ms = wait_ms.min(state.request_timeout_ms.saturating_sub(1_000).max(1));
        let done = ops
            .start_and_wait(request, wait_ms)
            .await
            .map_err(|e| Problem::from_ops(e, Place::Body))?;
        if done.reached == "time_limit" {
            return Err(Problem::new(
                StatusCode::GATEWAY_TIMEOUT,
                "time_limit",
                format!(
                    "instance {} did not end within {wait_ms} ms; it goes on",
                    done.instance
                ),
            ));
        }
        let fetch = body.fetch_variables.unwrap_or_default();
        let variables = done
            .variables
            .into_iter()
            .filter(|(name, _)| fetch.is_empty() || fetch.contains(name))
            .collect();
        (done.instance, done.deployment, variables)
    } else {
        let started = ops
            .start(request)
            .await
            .map_err(|e| Problem::from_ops(e, Place::Body))?;
        (started.instance, started.deployment, Default::default())
    };
    // A deployment made since the list was read (a start by process id takes the newest).
    let all = if all.iter().any(|d| d.id == deployment) {
        all
    } else {
        deployments(&state).await?
    };
    let (process, version) = definition_version(&all, deployment);
    Ok(Json(ProcessInstanceCreationView {
        process_definition_id: process,
        process_definition_version: version,
        process_definition_key: deployment.to_string(),
        process_instance_key: instance_key(&state, &instance).await?,
        tenant_id: DEFAULT_TENANT.to_owned(),
        variables,
        tags: Vec::new(),
        business_id: None,
    }))
}

/// The process id of deployment `id` and its version as Camunda counts it: its place among
/// its process's deployments, from 1 (`all` oldest first, as `Ops::deployments` lists).
/// Every deployment, for the versions and process ids the answers name.
async fn deployments(state: &AppState) -> Result<Vec<qflow_ops::DeploymentSummary>> {
    state
        .ops
        .deployments()
        .await
        .map_err(|e| Problem::from_ops(e, Place::Body))
}

fn definition_version(all: &[qflow_ops::DeploymentSummary], id: i64) -> (String, i64) {
    let Some(process) = all.iter().find(|d| d.id == id).map(|d| &d.process_id) else {
        return (String::new(), 0);
    };
    let version = all
        .iter()
        .filter(|d| &d.process_id == process)
        .position(|d| d.id == id)
        .map_or(0, |p| p as i64 + 1);
    (process.clone(), version)
}

/// A deployment as Camunda 8 sends it (`multipart/form-data`), for the OpenAPI document.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)]
pub struct DeploymentForm {
    /// One or more BPMN files (names ending in `.bpmn` or `.bpmn20.xml`), each one
    /// executable process.
    #[schema(value_type = Vec<String>, format = Binary, min_items = 1, max_items = 100)]
    resources: Vec<Vec<u8>>,
    /// Only `<default>`: qflow has no tenants.
    #[schema(value_type = String, required = false, pattern = "^<default>$")]
    tenant_id: Option<String>,
}

/// Camunda 8's `DeploymentResult`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentView {
    /// The first resource's deployment id: qflow deploys each resource as a deployment
    /// of its own (the others are in `deployments`).
    pub deployment_key: String,
    pub tenant_id: String,
    pub deployments: Vec<DeployedView>,
}

/// One entry of `DeploymentResult.deployments`: qflow deploys processes only.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeployedView {
    pub process_definition: ProcessDefinitionView,
}

/// Camunda 8's `DeploymentProcessResult`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessDefinitionView {
    pub process_definition_id: String,
    /// The deployment's place among its process's deployments, from 1.
    pub process_definition_version: i64,
    pub resource_name: String,
    pub tenant_id: String,
    /// The deployment id, in decimal (what `/v2/process-instances` takes).
    pub process_definition_key: String,
}

/// The most resources one deployment takes.
const DEPLOYMENT_RESOURCES_MAX: usize = 100;

/// Deploys BPMN resources (Camunda 8 `POST /v2/deployments`, `multipart/form-data`: the
/// files as `resources` parts, optionally `tenantId`). Each resource is deployed as
/// `POST /v1/deployments` deploys one — the same content gets its version back — in the
/// order sent. A resource the loader or the server refuses answers 422 naming it; the
/// resources before it stay deployed (deploying them again changes nothing).
#[utoipa::path(post, path = "/v2/deployments", tag = "zeebe jobs",
    request_body(content = DeploymentForm, content_type = "multipart/form-data"),
    responses(
        (status = 200, description = "Deployed (or already deployed with this content)", body = DeploymentView),
        (status = 422, description = "A resource is not BPMN, or the loader or the server refused it", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = ["deploy"])))]
pub async fn deploy_resources(
    State(state): State<AppState>,
    caller: Caller<crate::auth::DeployScope>,
    form: std::result::Result<
        axum::extract::Multipart,
        axum::extract::multipart::MultipartRejection,
    >,
) -> Result<Json<DeploymentView>> {
    let bad_form = |why: String| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid",
            format!("the form: {why}"),
        )
        .at(Place::Body, "resources", why)
    };
    let mut form = form.map_err(|e| bad_form(e.body_text()))?;
    let mut resources: Vec<(String, String)> = Vec::new();
    while let Some(field) = form
        .next_field()
        .await
        .map_err(|e| bad_form(e.body_text()))?
    {
        match field.name().unwrap_or_default() {
            "resources" => {
                let name = field.file_name().unwrap_or_default().to_owned();
                let bytes = field.bytes().await.map_err(|e| bad_form(e.body_text()))?;
                if resources.len() == DEPLOYMENT_RESOURCES_MAX {
                    return Err(invalid_at(
                        &["resources"],
                        &format!("a deployment takes at most {DEPLOYMENT_RESOURCES_MAX} resources"),
                    ));
                }
                // A well-formed form whose resource qflow cannot deploy is unprocessable
                // content (422, as a model the loader refuses), not a malformed request.
                let refused = |why: String| {
                    Problem::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "model_refused",
                        why.clone(),
                    )
                    .at_pointer(["resources"], why)
                };
                if !(name.ends_with(".bpmn") || name.ends_with(".bpmn20.xml")) {
                    return Err(refused(format!(
                        "`{name}`: qflow deploys BPMN only, a resource whose file name ends in \
                         `.bpmn` or `.bpmn20.xml` (decisions and forms are not deployed)"
                    )));
                }
                let source = String::from_utf8(bytes.to_vec())
                    .map_err(|_| refused(format!("`{name}` is not UTF-8 text")))?;
                resources.push((name, source));
            }
            "tenantId" => {
                let tenant = field.text().await.map_err(|e| bad_form(e.body_text()))?;
                if !tenant.is_empty() && tenant != DEFAULT_TENANT {
                    return Err(unsupported(
                        &["tenantId"],
                        Some(serde_json::json!(tenant)),
                        "qflow has no tenants: every deployment is the `<default>` tenant's",
                    ));
                }
            }
            other => {
                let other = other.to_owned();
                return Err(invalid_at(
                    &[other.as_str()],
                    "unknown form field: a deployment takes `resources` and `tenantId`",
                ));
            }
        }
    }
    if resources.is_empty() {
        return Err(invalid_at(
            &["resources"],
            "a deployment needs at least one resource",
        ));
    }
    let ops = state.ops.as_actor(&caller.name);
    let mut deployed = Vec::with_capacity(resources.len());
    for (name, source) in &resources {
        let summary = ops.deploy(source, None).await.map_err(|e| match e {
            qflow_ops::Error::Refused(why) => Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "model_refused",
                format!("`{name}`: {why}"),
            ),
            other => Problem::from_ops(other, Place::Body),
        })?;
        deployed.push((name.clone(), summary.id));
    }
    let all = deployments(&state).await?;
    Ok(Json(DeploymentView {
        deployment_key: deployed[0].1.to_string(),
        tenant_id: DEFAULT_TENANT.to_owned(),
        deployments: deployed
            .into_iter()
            .map(|(resource_name, id)| {
                let (process, version) = definition_version(&all, id);
                DeployedView {
                    process_definition: ProcessDefinitionView {
                        process_definition_id: process,
                        process_definition_version: version,
                        resource_name,
                        tenant_id: DEFAULT_TENANT.to_owned(),
                        process_definition_key: id.to_string(),
                    },
                }
            })
            .collect(),
    }))
}

/// A message publication (Camunda 8 `MessagePublicationRequest`): every field of Camunda
/// 8.10's.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MessagePublicationBody {
    /// The message name (the `name` of its `<message>`).
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub name: String,
    /// As for `/v2/messages/correlation`: required, 1 to 64 characters.
    #[serde(default)]
    #[schema(
        required = true,
        value_type = String,
        min_length = 1,
        max_length = 64,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub correlation_key: Option<String>,
    /// How long the message is kept, in milliseconds, for waits that open later under
    /// its name and key (each process takes it at most once); 0, absent or null: it
    /// reaches the waits open now, or is dropped.
    #[serde(default, deserialize_with = "qflow_ops::json::optional_long")]
    #[schema(value_type = Option<i64>, minimum = 0)]
    pub time_to_live: Option<i64>,
    /// With a time to live: a second message with this id, name and correlation key is
    /// refused (409) while the first is kept. Without one there is nothing kept to
    /// compare with, and it is not used. No control characters (empty: none).
    #[serde(default)]
    #[schema(max_length = 256, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub message_id: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub variables: Option<serde_json::Map<String, serde_json::Value>>,
    /// Only `<default>` or null: qflow has no tenants.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^<default>$")]
    pub tenant_id: Option<String>,
}

/// Camunda 8's `MessagePublicationResult`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessagePublicationView {
    /// The kept message's key; without a time to live, a fresh key that names nothing
    /// (nothing is kept).
    #[schema(pattern = "^[0-9]+$")]
    pub message_key: String,
    pub tenant_id: String,
}

/// Publishes a message (Camunda 8 `POST /v2/messages/publication`). With a time to live
/// of 0 it reaches every instance waiting for it under its key, or starts on message
/// start events when none waits, as `/v2/messages/correlation` does — and when nothing
/// takes it, it is dropped and the answer is still 200, as Camunda answers a publication
/// that no subscription takes. With a time to live above 0 it is kept (`docs/messages.md`
/// "Time to live"): it reaches the waits open now and those that open before it
/// expires, oldest message first and each process at most once, as Zeebe's buffer does.
#[utoipa::path(post, path = "/v2/messages/publication", tag = "zeebe jobs",
    request_body = MessagePublicationBody,
    responses(
        (status = 200, description = "Published (taken, kept, or dropped when nothing waits and it has no time to live)", body = MessagePublicationView),
        (status = 409, description = "A message with this `messageId`, name and correlation key is kept already", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn publish_message(
    State(state): State<AppState>,
    caller: Caller<crate::auth::OperateScope>,
    JsonBody(body): JsonBody<MessagePublicationBody>,
) -> Result<Json<MessagePublicationView>> {
    only_default_tenant(body.tenant_id.as_deref(), "message")?;
    let ttl = match body.time_to_live {
        Some(ttl) if ttl < 0 => {
            return Err(invalid_at(
                &["timeToLive"],
                "is a number of milliseconds, 0 or more",
            ))
        }
        // Longer than qflow keeps (some 285,000 years) is as long as it keeps.
        Some(ttl) => ttl.min(qflow_ops::TIME_TO_LIVE_MS_MAX),
        None => 0,
    };
    if body
        .message_id
        .as_ref()
        .is_some_and(|id| id.chars().count() > qflow_ops::MESSAGE_ID_CHARS_MAX)
    {
        return Err(invalid_at(&["messageId"], "is at most 256 characters"));
    }
    let mut request = message_request(body.name, body.correlation_key, body.variables)?;
    request.time_to_live_ms = Some(ttl);
    // An empty id names nothing: Camunda treats it as absent.
    request.message_id = body.message_id.filter(|id| !id.is_empty());
    let renames = [
        ("correlation_key", "correlationKey"),
        ("message_id", "messageId"),
    ];
    match state.ops.as_actor(&caller.name).correlate(request).await {
        Ok(done) => Ok(Json(MessagePublicationView {
            message_key: done
                .buffered
                .map_or_else(minted_key, |kept| kept.key)
                .to_string(),
            tenant_id: DEFAULT_TENANT.to_owned(),
        })),
        Err(qflow_ops::Error::NotFound { .. }) => Ok(Json(MessagePublicationView {
            message_key: minted_key().to_string(),
            tenant_id: DEFAULT_TENANT.to_owned(),
        })),
        Err(e) => Err(ops_problem(e, &renames)),
    }
}

/// Refuses a tenant other than `<default>` (absent or null is `<default>`): qflow has no
/// tenants. `what` names what the request makes ("message", "instance", …).
fn only_default_tenant(tenant: Option<&str>, what: &str) -> Result<()> {
    match tenant.filter(|t| *t != DEFAULT_TENANT) {
        Some(tenant) => Err(unsupported(
            &["tenantId"],
            Some(serde_json::json!(tenant)),
            &format!("qflow has no tenants: every {what} is the `<default>` tenant's"),
        )),
        None => Ok(()),
    }
}

/// The message a Camunda 8 correlation or publication sends, as `POST /v1/messages` with
/// `all` takes it; an absent or empty correlation key is refused at `/correlationKey`.
fn message_request(
    name: String,
    correlation_key: Option<String>,
    variables: Option<serde_json::Map<String, serde_json::Value>>,
) -> Result<qflow_ops::MessageRequest> {
    let Some(correlation_key) = correlation_key.filter(|k| !k.is_empty()) else {
        return Err(invalid_at(
            &["correlationKey"],
            "qflow correlates by key (1 to 64 characters): a waiting instance matches on \
             it and a message start event takes it as the started instance's business key",
        ));
    };
    Ok(qflow_ops::MessageRequest {
        name,
        correlation_key,
        variables: variables.unwrap_or_default().into_iter().collect(),
        all: true,
        time_to_live_ms: None,
        message_id: None,
    })
}

/// An operation's error as a problem, a refused field named as the Camunda 8 body names
/// it (`renames`: the operation's field, then Camunda's).
fn ops_problem(e: qflow_ops::Error, renames: &[(&str, &str)]) -> Problem {
    match e {
        qflow_ops::Error::Invalid { field, why } => {
            let field = renames
                .iter()
                .find(|(ours, _)| *ours == field)
                .map_or(field, |(_, theirs)| theirs);
            invalid_at(&[field], &why)
        }
        e => Problem::from_ops(e, Place::Body),
    }
}
