//! Camunda 7 compatibility for external workers (SPEC P2): the external-task endpoints
//! of Camunda 7's REST API under `/engine-rest`, with its request and response shapes —
//! typed variables `{value, type}`, error bodies `{type, message}`, `204 No Content` for
//! answers — so that existing workers (the official `camunda-external-task-client-js`,
//! the PyPI `camunda-external-task-client-python3`) run against qflow unmodified but for
//! their bearer token.
//!
//! Every route calls the same `qflow_ops::pull` operation as the native API; only the
//! shapes differ here. Each request body is read as the Camunda 7.24 DTO it is
//! (`FetchExternalTasksDto` with its topics and sorting, `CompleteExternalTaskDto`,
//! `ExternalTaskFailureDto`, `ExternalTaskBpmnError`, `ExtendLockOnExternalTaskDto`):
//! a field that DTO lacks is refused (Camunda would drop it silently). Of the fields it
//! has, a value that asks for nothing beyond what qflow does — null, empty, Camunda's
//! default (Java's `0`/`false` for a primitive left out or null: `maxTasks`, a failure's
//! `retries`), or what qflow does anyway (`withoutTenantId: true`, `sorting` by
//! `createTime` ascending, `usePriority`, no topics or `maxTasks: 0`, which fetch nothing
//! as in Camunda) — is accepted; one that asks for what qflow lacks (priorities, tenants,
//! filters by business key, definition or variable values, local variables alone,
//! variables on a failure, transient variables) is refused with a 400 that names the
//! field (in Camunda's spelling, bounds checked by `qflow_ops` too) and says what qflow
//! does instead, never silently ignored; a refused request changes nothing. These
//! routes are not in the OpenAPI document (they are Camunda's API, documented by
//! Camunda); `docs/workers.md` lists every field and every difference.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use qflow_core::Variables;
use qflow_ops::pull::{FetchRequest, FetchTopic, LockedTaskView};
use qflow_runtime::pull::FETCH_TASKS_MAX;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::auth::{Caller, WorkerScope};
use crate::problem::Problem;
use crate::AppState;

/// The routes, to be merged under the server's limits.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/engine-rest/external-task/fetchAndLock",
            post(fetch_and_lock),
        )
        .route("/engine-rest/external-task/{id}/complete", post(complete))
        .route("/engine-rest/external-task/{id}/failure", post(failure))
        .route(
            "/engine-rest/external-task/{id}/bpmnError",
            post(bpmn_error),
        )
        .route(
            "/engine-rest/external-task/{id}/extendLock",
            post(extend_lock),
        )
        .route("/engine-rest/external-task/{id}/unlock", post(unlock))
}

/// The fields `qflow_ops` names in a refusal, as Camunda's DTOs spell them.
const CAMUNDA_FIELDS: &[(&str, &str)] = &[
    ("worker_id", "workerId"),
    ("max_tasks", "maxTasks"),
    ("topic", "topicName"),
    ("lock_duration", "lockDuration"),
    ("wait_ms", "asyncResponseTimeout"),
    ("error_message", "errorMessage"),
    ("retry_timeout", "retryTimeout"),
    ("error_code", "errorCode"),
    ("new_duration", "newDuration"),
];

/// A Camunda error: `{type, message}` with the status Camunda uses for it.
pub struct CamundaError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl CamundaError {
    fn invalid(message: impl Into<String>) -> CamundaError {
        CamundaError {
            status: StatusCode::BAD_REQUEST,
            kind: "InvalidRequestException",
            message: message.into(),
        }
    }

    fn from_ops(e: qflow_ops::Error) -> CamundaError {
        use qflow_ops::Error as E;
        if let E::Invalid { field, why } = &e {
            // `qflow_ops` names the native API's field; the worker sent Camunda's.
            let field = CAMUNDA_FIELDS
                .iter()
                .find(|(ours, _)| ours == field)
                .map_or(*field, |(_, theirs)| theirs);
            return CamundaError::invalid(format!("`{field}`: {why}"));
        }
        let (status, kind) = match &e {
            E::NotFound { .. } => (StatusCode::NOT_FOUND, "InvalidRequestException"),
            E::Invalid { .. } => (StatusCode::BAD_REQUEST, "InvalidRequestException"),
            // Camunda answers 400 when the worker does not hold the task's lock.
            E::Refused(_) | E::Conflict(_) => (StatusCode::BAD_REQUEST, "BadUserRequestException"),
            E::Store(why) => {
                tracing::error!(error = %why, "store error while serving a request");
                return CamundaError {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    kind: "ProcessEngineException",
                    message: "the store failed to answer; the server log says why".into(),
                };
            }
        };
        CamundaError {
            status,
            kind,
            message: e.to_string(),
        }
    }

    fn from_problem(p: Problem) -> CamundaError {
        let status = StatusCode::from_u16(p.status).unwrap_or(StatusCode::UNAUTHORIZED);
        let kind = match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => "AuthorizationException",
            _ => "InvalidRequestException",
        };
        CamundaError {
            status,
            kind,
            message: p.detail,
        }
    }
}

impl IntoResponse for CamundaError {
    fn into_response(self) -> Response {
        let body = json!({"type": self.kind, "message": self.message});
        (self.status, Json(body)).into_response()
    }
}

type Result<T> = std::result::Result<T, CamundaError>;

/// The token check, its refusal in Camunda's shape.
fn authorized(caller: std::result::Result<Caller<WorkerScope>, Problem>) -> Result<()> {
    caller.map(|_| ()).map_err(CamundaError::from_problem)
}

/// A JSON body; an empty one reads as `{}` (Camunda's unlock sends none). A refusal
/// names the field at fault, an unknown one too.
fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    let invalid = |at: String, e: &serde_json::Error| {
        CamundaError::invalid(format!("the request body is not valid{at}: {e}"))
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        // The path names the field (`topics[0].fooBar`); `.` is the body itself.
        let path = e.path().to_string();
        let at = if path == "." {
            String::new()
        } else {
            format!(" at `{path}`")
        };
        invalid(at, e.inner())
    })?;
    de.end().map_err(|e| invalid(String::new(), &e))?;
    Ok(value)
}

fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

// ----- typed variables ----------------------------------------------------------------

/// A Camunda typed value.
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TypedValue {
    #[serde(default)]
    pub value: Value,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_info: Option<Map<String, Value>>,
}

/// Camunda typed variables (the body's `field`) as qflow's JSON variables. `Json` (and
/// `Object` serialized as `application/json`) values are parsed; Java objects, files and
/// bytes are refused, and so is a transient variable (`valueInfo.transient: true`, which
/// Camunda does not store): qflow stores every variable it is given.
pub fn untyped(field: &str, typed: Option<Map<String, Value>>) -> Result<Variables> {
    let mut out = Variables::new();
    for (name, raw) in typed.unwrap_or_default() {
        let tv: TypedValue = serde_json::from_value(raw).map_err(|e| {
            CamundaError::invalid(format!(
                "`{field}`: variable `{name}` is not a typed value: {e}"
            ))
        })?;
        let transient = tv.value_info.as_ref().and_then(|i| i.get("transient"));
        if !matches!(
            transient,
            None | Some(Value::Null) | Some(Value::Bool(false))
        ) {
            return Err(unsupported(
                &format!("{field}.{name}.valueInfo.transient"),
                &transient,
                "qflow stores every variable it is given and has no transient ones; send \
                 false or leave it out",
            ));
        }
        let kind = tv.kind.as_deref().unwrap_or("").to_ascii_lowercase();
        let value = match kind.as_str() {
            "json" => parse_json(field, &name, tv.value)?,
            "object" => {
                let format = tv
                    .value_info
                    .as_ref()
                    .and_then(|i| i.get("serializationDataFormat"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if format != "application/json" {
                    return Err(CamundaError::invalid(format!(
                        "`{field}`: variable `{name}`: qflow keeps JSON values only; an Object \
                         must be serialized as application/json (got `{format}`)"
                    )));
                }
                parse_json(field, &name, tv.value)?
            }
            "file" | "bytes" => {
                return Err(CamundaError::invalid(format!(
                    "`{field}`: variable `{name}`: {kind} variables are not supported by qflow"
                )))
            }
            "null" => Value::Null,
            // String, Boolean, Integer, Short, Long, Double, Date (an ISO string), or no
            // type at all: the JSON value as it came.
            _ => tv.value,
        };
        out.insert(name, value);
    }
    Ok(out)
}

fn parse_json(field: &str, name: &str, value: Value) -> Result<Value> {
    match value {
        Value::String(text) => serde_json::from_str(&text).map_err(|e| {
            CamundaError::invalid(format!(
                "`{field}`: variable `{name}`: its Json value does not parse: {e}"
            ))
        }),
        other => Ok(other),
    }
}

/// qflow's JSON variables as Camunda typed values.
pub fn typed(vars: Variables) -> Map<String, Value> {
    vars.into_iter()
        .map(|(name, v)| {
            let tv = match v {
                Value::Null => json!({"value": null, "type": "Null", "valueInfo": {}}),
                Value::Bool(b) => json!({"value": b, "type": "Boolean", "valueInfo": {}}),
                Value::Number(n) => {
                    let kind = match n.as_i64() {
                        Some(i) if i32::try_from(i).is_ok() => "Integer",
                        Some(_) => "Long",
                        None => "Double",
                    };
                    json!({"value": n, "type": kind, "valueInfo": {}})
                }
                Value::String(s) => json!({"value": s, "type": "String", "valueInfo": {}}),
                other => json!({"value": other.to_string(), "type": "Json", "valueInfo": {}}),
            };
            (name, tv)
        })
        .collect()
}

// ----- fetch and lock -------------------------------------------------------------------

/// Camunda's `FetchExternalTasksDto` (and `asyncResponseTimeout`, which its REST layer
/// adds): every field Camunda 7.24 reads, and no other.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FetchBody {
    worker_id: String,
    /// A Java `int`: left out or null, Camunda reads 0 and locks nothing.
    max_tasks: Option<i64>,
    async_response_timeout: Option<i64>,
    topics: Option<Vec<TopicBody>>,
    sorting: Option<Vec<SortingBody>>,
    /// Either way: qflow has no priorities, every task has priority 0, so ordering by
    /// priority first changes nothing.
    #[serde(rename = "usePriority")]
    _use_priority: Option<bool>,
    /// Camunda reads this per topic only and ignores it here; so does qflow.
    #[serde(rename = "includeExtensionProperties")]
    _include_extension_properties: Option<bool>,
}

/// Camunda's `FetchExternalTaskTopicDto`: every field, each judged by `check_topic`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TopicBody {
    topic_name: String,
    lock_duration: i64,
    variables: Option<Vec<String>>,
    business_key: Option<String>,
    process_definition_id: Option<String>,
    process_definition_id_in: Option<Vec<String>>,
    process_definition_key: Option<String>,
    process_definition_key_in: Option<Vec<String>>,
    process_definition_version_tag: Option<String>,
    process_variables: Option<Map<String, Value>>,
    tenant_id_in: Option<Vec<String>>,
    /// Either way: qflow has no tenants, so every task is without one.
    #[serde(rename = "withoutTenantId")]
    _without_tenant_id: Option<bool>,
    local_variables: Option<bool>,
    /// Either way: qflow's values are JSON, with no serialized objects to deserialize.
    #[serde(rename = "deserializeValues")]
    _deserialize_values: Option<bool>,
    include_extension_properties: Option<bool>,
}

/// Camunda's `SortingDto` as fetch-and-lock reads it (it ignores `parameters`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SortingBody {
    sort_by: Option<String>,
    sort_order: Option<String>,
    #[serde(rename = "parameters")]
    _parameters: Option<Value>,
}

/// Camunda refuses a longer long poll with a 400; so does qflow (it caps shorter ones
/// at its own request time limit).
const ASYNC_RESPONSE_TIMEOUT_MS_MAX: i64 = 1_800_000;

/// A field whose value asks for what qflow does not do.
fn unsupported(field: &str, value: &impl Serialize, instead: &str) -> CamundaError {
    let value = serde_json::to_string(value).unwrap_or_default();
    CamundaError::invalid(format!("`{field}` {value} is not supported: {instead}"))
}

/// The order qflow offers tasks in is Camunda's `createTime` ascending: oldest offer
/// first. An empty or absent `sorting` asks for no order at all, which that is too.
fn check_sorting(sorting: &[SortingBody]) -> Result<()> {
    for (i, s) in sorting.iter().enumerate() {
        if s.sort_by.as_deref() != Some("createTime") {
            // Camunda refuses these too ("Cannot set query sortBy parameter to value …").
            return Err(CamundaError::invalid(format!(
                "`sorting[{i}].sortBy` {}: Camunda sorts fetches by `createTime` only",
                serde_json::to_string(&s.sort_by).unwrap_or_default()
            )));
        }
        match s.sort_order.as_deref() {
            Some("asc") => {}
            Some("desc") => {
                return Err(unsupported(
                    &format!("sorting[{i}].sortOrder"),
                    &s.sort_order,
                    "qflow offers tasks oldest offer first (`createTime` `asc`) and in no \
                     other order",
                ))
            }
            _ => {
                return Err(CamundaError::invalid(format!(
                    "`sorting[{i}].sortOrder` {}: give `asc` or `desc`, as Camunda requires",
                    serde_json::to_string(&s.sort_order).unwrap_or_default()
                )))
            }
        }
    }
    Ok(())
}

/// Refuses a topic whose filters or options ask for what qflow does not do; null,
/// empty (`""` for `businessKey`, `[]`, `{}`: no filter in Camunda) and defaults pass.
fn check_topic(t: &TopicBody) -> Result<()> {
    let refuse = |field: &str, value: Value, instead: &str| {
        let e = unsupported(field, &value, instead);
        CamundaError::invalid(format!("topic `{}`: {}", t.topic_name, e.message))
    };
    let no_filter = "qflow does not filter fetches by it; send null or leave it out";
    let some_list = |v: &Option<Vec<String>>| v.as_ref().is_some_and(|v| !v.is_empty());
    if let Some(key) = t.business_key.as_ref().filter(|k| !k.is_empty()) {
        return Err(refuse("businessKey", json!(key), no_filter));
    }
    if let Some(id) = &t.process_definition_id {
        return Err(refuse("processDefinitionId", json!(id), no_filter));
    }
    if some_list(&t.process_definition_id_in) {
        return Err(refuse(
            "processDefinitionIdIn",
            json!(t.process_definition_id_in),
            no_filter,
        ));
    }
    if let Some(key) = &t.process_definition_key {
        return Err(refuse("processDefinitionKey", json!(key), no_filter));
    }
    if some_list(&t.process_definition_key_in) {
        return Err(refuse(
            "processDefinitionKeyIn",
            json!(t.process_definition_key_in),
            no_filter,
        ));
    }
    if let Some(tag) = &t.process_definition_version_tag {
        return Err(refuse(
            "processDefinitionVersionTag",
            json!(tag),
            "qflow deployments have no version tags; send null or leave it out",
        ));
    }
    if let Some(vars) = t.process_variables.as_ref().filter(|m| !m.is_empty()) {
        return Err(refuse(
            "processVariables",
            json!(vars),
            "qflow does not filter fetches by variable values; send {} or null",
        ));
    }
    if some_list(&t.tenant_id_in) {
        return Err(refuse(
            "tenantIdIn",
            json!(t.tenant_id_in),
            "qflow has no tenants: every task is without one (`withoutTenantId` is \
             accepted); send [] or null",
        ));
    }
    if t.local_variables == Some(true) {
        return Err(refuse(
            "localVariables",
            json!(true),
            "qflow hands out a task's inputs (the instance's variables, with a \
             `camunda:inputOutput` task's input parameters over them), not its local \
             variables alone; send false or leave it out",
        ));
    }
    Ok(())
}

/// The extension properties of a locked task's activity, which Camunda hands out when
/// its topic asks (`includeExtensionProperties: true`): the task's headers — its
/// `camunda:properties` (what Camunda 7 serves here), its `zeebe:taskHeaders`, and for a
/// task bound to Java code the binding (`class`, `delegateExpression`, `expression`,
/// `resultVariable`), the only place a Camunda 7 client can read it
/// (docs/vendor-mappings.md, "Java delegates").
fn extension_properties(task: &LockedTaskView) -> Map<String, Value> {
    task.headers
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// Camunda's `LockedExternalTaskDto`. `extensionProperties` is `{}` unless the task's
/// topic asked for them, as in Camunda.
fn locked_dto(t: LockedTaskView, include_extension_properties: bool) -> Value {
    let extension_properties = if include_extension_properties {
        extension_properties(&t)
    } else {
        Map::new()
    };
    json!({
        "activityId": t.node,
        "activityInstanceId": format!("{}:{}", t.node, t.instance),
        "errorMessage": null,
        "errorDetails": null,
        "executionId": t.instance,
        "id": t.id,
        "lockExpirationTime": iso_utc(t.lock_expires_at_ms),
        "processDefinitionId": t.process_id,
        "processDefinitionKey": t.process_id,
        "processDefinitionVersionTag": null,
        "processInstanceId": t.instance,
        "retries": t.retries,
        "suspended": false,
        "workerId": t.worker,
        "topicName": t.topic,
        "tenantId": null,
        "variables": typed(t.variables),
        "priority": 0,
        "businessKey": null,
        "extensionProperties": extension_properties,
    })
}

async fn fetch_and_lock(
    State(state): State<AppState>,
    caller: std::result::Result<Caller<WorkerScope>, Problem>,
    bytes: Bytes,
) -> Result<Response> {
    authorized(caller)?;
    let b: FetchBody = body(&bytes)?;
    check_sorting(b.sorting.as_deref().unwrap_or_default())?;
    let topics = b.topics.unwrap_or_default();
    for t in &topics {
        check_topic(t)?;
    }
    let max_tasks = b.max_tasks.unwrap_or(0);
    if max_tasks < 0 {
        // Camunda refuses it too ("maxResults is not greater than or equal to 0").
        return Err(CamundaError::invalid(format!(
            "`maxTasks` {max_tasks} is negative: give the most tasks to lock, 0 or more"
        )));
    }
    if let Some(t) = b
        .async_response_timeout
        .filter(|t| *t > ASYNC_RESPONSE_TIMEOUT_MS_MAX)
    {
        return Err(CamundaError::invalid(format!(
            "`asyncResponseTimeout` {t} is greater than {ASYNC_RESPONSE_TIMEOUT_MS_MAX} ms, \
             Camunda's limit"
        )));
    }
    // A long poll ends a second before the server's own time limit would answer it; a
    // negative timeout answers at once, as in Camunda.
    let limit = state.request_timeout_ms.saturating_sub(1_000) as i64;
    let wait_ms = b.async_response_timeout.unwrap_or(0).clamp(0, limit.max(0));
    if max_tasks == 0 || topics.is_empty() {
        // Nothing can be locked: Camunda checks what it checks before any fetch (a
        // positive `lockDuration` for each topic), then answers `[]` — after the long
        // poll, which nothing it could lock can end.
        if let Some((i, t)) = topics
            .iter()
            .enumerate()
            .find(|(_, t)| t.lock_duration <= 0)
        {
            return Err(CamundaError::invalid(format!(
                "`topics[{i}].lockDuration` {} is not a lock duration: give 1 ms or more",
                t.lock_duration
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(wait_ms as u64)).await;
        return Ok(locked_response(Vec::new()));
    }
    // A topic named twice is fetched as its first entry says (`qflow_ops::pull`).
    let mut with_properties: Vec<(String, bool)> = Vec::with_capacity(topics.len());
    for t in &topics {
        if !with_properties
            .iter()
            .any(|(name, _)| name == &t.topic_name)
        {
            let asked = t.include_extension_properties == Some(true);
            with_properties.push((t.topic_name.clone(), asked));
        }
    }
    let request = FetchRequest {
        worker: b.worker_id,
        // `maxTasks` is an upper bound: above qflow's own (1,000 a fetch), a fetch locks
        // at most that many, which the bound allows.
        max_tasks: max_tasks.min(i64::from(FETCH_TASKS_MAX)),
        topics: topics
            .into_iter()
            .map(|t| FetchTopic {
                name: t.topic_name,
                lock_ms: t.lock_duration,
                variables: t.variables,
            })
            .collect(),
        wait_ms,
    };
    let locked = state
        .ops
        .fetch_and_lock(request)
        .await
        .map_err(CamundaError::from_ops)?;
    let dtos: Vec<Value> = locked
        .into_iter()
        .map(|t| {
            let asked = with_properties
                .iter()
                .any(|(name, asked)| *asked && name == &t.topic);
            locked_dto(t, asked)
        })
        .collect();
    Ok(locked_response(dtos))
}

fn locked_response(dtos: Vec<Value>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Json(dtos),
    )
        .into_response()
}

// ----- answers ---------------------------------------------------------------------------

/// Camunda's `CompleteExternalTaskDto`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CompleteBody {
    worker_id: String,
    #[serde(default)]
    variables: Option<Map<String, Value>>,
    #[serde(default)]
    local_variables: Option<Map<String, Value>>,
}

async fn complete(
    State(state): State<AppState>,
    caller: std::result::Result<Caller<WorkerScope>, Problem>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Response> {
    authorized(caller)?;
    let b: CompleteBody = body(&bytes)?;
    // A pull task has no local scope in qflow: local variables land on the instance too.
    let mut variables = untyped("variables", b.variables)?;
    variables.extend(untyped("localVariables", b.local_variables)?);
    state
        .ops
        .complete_pull(&id, &b.worker_id, variables)
        .await
        .map_err(CamundaError::from_ops)?;
    Ok(no_content())
}

/// Camunda's `ExternalTaskFailureDto`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FailureBody {
    worker_id: String,
    #[serde(default)]
    error_message: Option<String>,
    #[serde(default)]
    error_details: Option<String>,
    /// A Java `int`: left out or null, Camunda reads 0 (no attempt left).
    #[serde(default)]
    retries: Option<i64>,
    #[serde(default)]
    retry_timeout: Option<i64>,
    #[serde(default)]
    variables: Option<Map<String, Value>>,
    #[serde(default)]
    local_variables: Option<Map<String, Value>>,
}

/// Variables on a failure: none (null or `{}`) is all qflow takes.
fn check_failure_variables(b: &FailureBody) -> Result<()> {
    for (field, vars) in [
        ("variables", &b.variables),
        ("localVariables", &b.local_variables),
    ] {
        if let Some(vars) = vars.as_ref().filter(|v| !v.is_empty()) {
            return Err(unsupported(
                field,
                &vars.keys().collect::<Vec<_>>(),
                "qflow sets no variables when an attempt fails; send {} or null, or \
                 complete or throw a BPMN error with them",
            ));
        }
    }
    Ok(())
}

async fn failure(
    State(state): State<AppState>,
    caller: std::result::Result<Caller<WorkerScope>, Problem>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Response> {
    authorized(caller)?;
    let b: FailureBody = body(&bytes)?;
    check_failure_variables(&b)?;
    // Left out or null: 0, as Camunda reads it, which ends the task with an incident.
    let retries = b.retries.unwrap_or(0);
    let mut message = b.error_message.unwrap_or_default();
    if let Some(details) = b.error_details.filter(|d| !d.is_empty()) {
        // qflow keeps one message per attempt: the details follow it.
        message = format!("{message}\n{details}");
    }
    // Camunda cuts a failure's message at 666 characters; qflow keeps the first 4,096.
    let message: String = message
        .chars()
        .take(qflow_ops::pull::MESSAGE_CHARS_MAX)
        .collect();
    state
        .ops
        .fail_pull(
            &id,
            &b.worker_id,
            retries,
            b.retry_timeout.unwrap_or(0),
            &message,
        )
        .await
        .map_err(CamundaError::from_ops)?;
    Ok(no_content())
}

/// Camunda's `ExternalTaskBpmnError`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BpmnErrorBody {
    worker_id: String,
    error_code: String,
    #[serde(default)]
    error_message: Option<String>,
    #[serde(default)]
    variables: Option<Map<String, Value>>,
}

async fn bpmn_error(
    State(state): State<AppState>,
    caller: std::result::Result<Caller<WorkerScope>, Problem>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Response> {
    authorized(caller)?;
    let b: BpmnErrorBody = body(&bytes)?;
    let variables = untyped("variables", b.variables)?;
    state
        .ops
        .bpmn_error_pull(
            &id,
            &b.worker_id,
            &b.error_code,
            b.error_message.as_deref().unwrap_or(""),
            variables,
        )
        .await
        .map_err(CamundaError::from_ops)?;
    Ok(no_content())
}

/// Camunda's `ExtendLockOnExternalTaskDto`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExtendLockBody {
    worker_id: String,
    new_duration: i64,
}

async fn extend_lock(
    State(state): State<AppState>,
    caller: std::result::Result<Caller<WorkerScope>, Problem>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Response> {
    authorized(caller)?;
    let b: ExtendLockBody = body(&bytes)?;
    state
        .ops
        .extend_lock(&id, &b.worker_id, b.new_duration)
        .await
        .map_err(CamundaError::from_ops)?;
    Ok(no_content())
}

async fn unlock(
    State(state): State<AppState>,
    caller: std::result::Result<Caller<WorkerScope>, Problem>,
    Path(id): Path<String>,
) -> Result<Response> {
    authorized(caller)?;
    // Camunda's unlock names no worker: whoever holds the lock loses it.
    state
        .ops
        .unlock_pull(&id, None)
        .await
        .map_err(CamundaError::from_ops)?;
    Ok(no_content())
}

// ----- dates --------------------------------------------------------------------------

/// `ms` since the epoch as Camunda renders dates: `2026-12-01T15:04:05.123+0000` (UTC).
pub fn iso_utc(ms: i64) -> String {
    let secs = ms.div_euclid(1_000);
    let millis = ms.rem_euclid(1_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = qflow_loader::iso8601::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}+0000",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_render_as_camunda_does() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00.000+0000");
        assert_eq!(iso_utc(1_700_000_030_000), "2023-11-14T22:13:50.000+0000");
        assert_eq!(iso_utc(951_782_400_123), "2000-02-29T00:00:00.123+0000");
    }

    #[test]
    fn typed_values_round_trip_through_json() {
        let vars: Variables = [
            ("n".to_owned(), json!(5)),
            ("big".to_owned(), json!(5_000_000_000_i64)),
            ("x".to_owned(), json!(1.5)),
            ("s".to_owned(), json!("hi")),
            ("b".to_owned(), json!(true)),
            ("o".to_owned(), json!({"a": [1, 2]})),
            ("z".to_owned(), Value::Null),
        ]
        .into_iter()
        .collect();
        let t = typed(vars.clone());
        assert_eq!(t["n"]["type"], "Integer");
        assert_eq!(t["big"]["type"], "Long");
        assert_eq!(t["x"]["type"], "Double");
        assert_eq!(t["o"]["type"], "Json");
        assert_eq!(t["o"]["value"], r#"{"a":[1,2]}"#);
        assert_eq!(untyped("variables", Some(t)).ok(), Some(vars));
        let java = json!({"v": {"value": "rO0AB", "type": "Object",
            "valueInfo": {"serializationDataFormat": "application/x-java-serialized-object"}}});
        assert!(untyped("variables", java.as_object().cloned()).is_err());
        let lower = json!({"v": {"value": "{\"k\":1}", "type": "json"}});
        assert_eq!(
            untyped("variables", lower.as_object().cloned())
                .ok()
                .unwrap()["v"],
            json!({"k": 1})
        );
    }
}
