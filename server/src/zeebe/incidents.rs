//! Camunda 8 incidents: `GET /v2/incidents/{incidentKey}`, `POST /v2/incidents/search`
//! and `POST /v2/incidents/{incidentKey}/resolution`, over `ops`' incidents, resume and
//! resolve.
//!
//! An incident's key names its row (`KeyKind::Incident`, the row's id in `node`).
//! Resolution is qflow's repair: an open incident of a FAILED instance (the failure that
//! stopped it) resumes the instance with its budget kept — the failed task gets one
//! more attempt, as a Zeebe job whose retries were set to 1 before its incident was
//! resolved — or the retries a `PATCH /v2/jobs/{jobKey}` gave its job while it was
//! FAILED; any other open incident (a poisoned channel call) is marked resolved.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use qflow_ops::{DeploymentSummary, IncidentView, InstanceSummary};
use qflow_store::{InstanceId, KeyKind, KeyName};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::search::{self, one_order, PageView, SearchPage};
use super::{definition_version, deployments, path_key, unsupported, Result, DEFAULT_TENANT};
use crate::auth::{Caller, OperateScope, ReadScope};
use crate::problem::{Place, Problem};
use crate::AppState;

/// Camunda 8's `IncidentResult`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncidentResult {
    pub process_definition_id: String,
    /// Camunda's error type of qflow's code (docs/workers.md).
    pub error_type: &'static str,
    /// qflow's code, then its message.
    pub error_message: String,
    pub element_id: String,
    pub creation_time: String,
    /// `ACTIVE` or `RESOLVED`.
    pub state: &'static str,
    pub tenant_id: &'static str,
    #[schema(pattern = "^[0-9]+$")]
    pub incident_key: String,
    #[schema(pattern = "^[0-9]+$")]
    pub process_definition_key: String,
    #[schema(pattern = "^[0-9]+$")]
    pub process_instance_key: String,
    #[schema(pattern = "^[0-9]+$")]
    pub element_instance_key: String,
    /// The job whose failure raised the incident: the last attempt of a pull task that
    /// a worker failed with no retries left or whose lock ran out. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[0-9]+$")]
    pub job_key: Option<String>,
    /// Always null (Camunda 8.9 and 8.10 send it): qflow does not name a called
    /// instance's root here.
    #[schema(value_type = Option<String>)]
    pub root_process_instance_key: Option<String>,
}

/// Camunda's error type for a qflow incident code. A task's own failure codes (its
/// handler's, a pull task's failure, a lock or time limit) mean its attempts ran out:
/// `JOB_NO_RETRIES`.
fn error_type(code: &str) -> &'static str {
    use qflow_core::codes;
    match code {
        codes::UNCAUGHT_BPMN_ERROR => "UNHANDLED_ERROR_EVENT",
        codes::EXPRESSION_FAILED => "EXTRACT_VALUE_ERROR",
        codes::NO_FLOW_TAKEN => "CONDITION_ERROR",
        codes::CALLED_PROCESS_NOT_FOUND => "CALLED_ELEMENT_ERROR",
        codes::STUCK_AT_JOIN
        | codes::UNSUPPORTED_ELEMENT
        | codes::STEP_LIMIT
        | codes::OUTPUTS_REFUSED
        | codes::READOPTION_LIMIT
        | codes::POISONED
        | codes::COMPENSATION_LIMIT
        | codes::CALLED_INSTANCE_FAILED
        | codes::ACTIVITY_INSTANCE_LIMIT
        | codes::STALLED
        | codes::AD_HOC_IDLE => "UNKNOWN",
        _ => "JOB_NO_RETRIES",
    }
}

fn incident_name(i: &IncidentView) -> Result<KeyName> {
    Ok(KeyName {
        instance: parse_id(&i.instance)?,
        kind: KeyKind::Incident,
        node: i.id.to_string(),
        attempt: 0,
    })
}

fn parse_id(id: &str) -> Result<InstanceId> {
    qflow_ops::parse_instance_id(id).map_err(|e| Problem::from_ops(e, Place::Body))
}

/// Results for `incidents`, their keys given now where one has none yet.
async fn results(
    state: &AppState,
    incidents: &[(IncidentView, InstanceSummary)],
    deployments: &[DeploymentSummary],
) -> Result<Vec<IncidentResult>> {
    let mut names = Vec::with_capacity(incidents.len() * 3);
    for (i, _) in incidents {
        let instance = parse_id(&i.instance)?;
        names.push(incident_name(i)?);
        names.push(KeyName::instance(instance));
        names.push(KeyName {
            instance,
            kind: KeyKind::Element,
            node: i.node.clone(),
            attempt: 0,
        });
    }
    let keys = state
        .ops
        .camunda_keys(&names)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Body))?;
    let mut jobs = Vec::with_capacity(incidents.len());
    for (i, _) in incidents {
        jobs.push(job_key(state, i).await?);
    }
    Ok(incidents
        .iter()
        .zip(keys.chunks(3))
        .zip(jobs)
        .map(|(((i, instance), keys), job_key)| IncidentResult {
            process_definition_id: definition_version(deployments, instance.deployment).0,
            error_type: error_type(&i.code),
            error_message: format!("{}: {}", i.code, i.message),
            element_id: super::element_id(&i.node),
            creation_time: search::date(i.opened_at_ms),
            state: if i.resolved_at_ms.is_some() {
                "RESOLVED"
            } else {
                "ACTIVE"
            },
            tenant_id: DEFAULT_TENANT,
            incident_key: keys[0].to_string(),
            process_definition_key: instance.deployment.to_string(),
            process_instance_key: keys[1].to_string(),
            element_instance_key: keys[2].to_string(),
            job_key: job_key.map(|k| k.to_string()),
            root_process_instance_key: None,
        })
        .collect())
}

/// The key of the job whose failure raised `i`: its node's last attempt, when a worker
/// failed it or its lock ran out (the codes of a pull task's failure).
async fn job_key(state: &AppState, i: &IncidentView) -> Result<Option<i64>> {
    use qflow_core::codes;
    if !matches!(
        i.code.as_str(),
        codes::PULL_TASK_FAILED | codes::LOCK_EXPIRED
    ) {
        return Ok(None);
    }
    let instance = parse_id(&i.instance)?;
    let history = match state.ops.history(instance).await {
        Ok(h) => h,
        Err(qflow_ops::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(Problem::from_ops(e, Place::Body)),
    };
    // The newest row of the node (the history is in the order attempts ended): a
    // node entered again (a loop) numbers its attempts from 1 again.
    let Some(attempt) = history
        .iter()
        .rev()
        .find(|a| a.node == i.node)
        .map(|a| a.attempt)
    else {
        return Ok(None);
    };
    let keys = state
        .ops
        .camunda_keys(&[KeyName {
            instance,
            kind: KeyKind::Job,
            node: i.node.clone(),
            attempt,
        }])
        .await
        .map_err(|e| Problem::from_ops(e, Place::Body))?;
    Ok(keys.first().copied())
}

/// The incident a path's key names, with its instance.
async fn incident_of(state: &AppState, key: &str) -> Result<(IncidentView, InstanceSummary)> {
    let key = path_key("incidentKey", key)?;
    let not_found = || {
        Problem::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no incident {key}"),
        )
    };
    let name = state
        .ops
        .camunda_key(key, KeyKind::Incident, "incident")
        .await
        .map_err(|e| Problem::from_ops(e, Place::Path))?;
    let row: i64 = name.node.parse().map_err(|_| not_found())?;
    let incidents = state
        .ops
        .incidents(Some(name.instance), 0)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Path))?;
    let incident = incidents
        .into_iter()
        .find(|i| i.id == row)
        .ok_or_else(not_found)?;
    let instance = state
        .ops
        .instance(name.instance)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Path))?;
    Ok((incident, instance))
}

/// One incident (Camunda 8 `GET /v2/incidents/{incidentKey}`).
#[utoipa::path(get, path = "/v2/incidents/{incidentKey}", tag = "zeebe jobs",
    params(("incidentKey" = String, Path, pattern = "^-?[0-9]{1,18}$", description = "The key a search answered")),
    responses(
        (status = 200, description = "The incident", body = IncidentResult),
        (status = 404, description = "No such incident", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["read"])))]
pub async fn get(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    Path(key): Path<String>,
) -> Result<Json<IncidentResult>> {
    let found = incident_of(&state, &key).await?;
    let all = deployments(&state).await?;
    let mut out = results(&state, std::slice::from_ref(&found), &all).await?;
    Ok(Json(out.remove(0)))
}

one_order!(IncidentSort, IncidentSortField, "creationTime");

/// Camunda 8's `IncidentSearchQuery`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IncidentSearchBody {
    /// Only `creationTime` ascending, or none (the same order).
    #[serde(default, deserialize_with = "search::optional_objects")]
    pub sort: Option<Vec<IncidentSort>>,
    #[serde(default, deserialize_with = "search::optional_object")]
    pub filter: Option<IncidentFilter>,
    #[serde(default, deserialize_with = "search::optional_object")]
    pub page: Option<SearchPage>,
}

/// The incident filter fields qflow judges; Camunda's other fields only null.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncidentFilter {
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^-?[0-9]{1,18}$")]
    pub process_instance_key: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^-?[0-9]{1,18}$")]
    pub incident_key: Option<Value>,
    /// `ACTIVE` or `RESOLVED`.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^(ACTIVE|MIGRATED|PENDING|RESOLVED)$")]
    pub state: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub error_type: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub element_id: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub process_definition_id: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^-?[0-9]{1,18}$")]
    pub process_definition_key: Option<Value>,
    /// Only `<default>`.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^<default>$")]
    pub tenant_id: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    pub rest: BTreeMap<String, Value>,
}

pub(crate) const OTHER_FILTER_FIELDS: &[&str] = &[
    "errorMessage",
    "creationTime",
    "elementInstanceKey",
    "jobKey",
];

/// Camunda 8's `IncidentSearchQueryResult`.
#[derive(Debug, Serialize, ToSchema)]
pub struct IncidentSearchView {
    pub items: Vec<IncidentResult>,
    pub page: PageView,
}

/// Searches incidents (Camunda 8 `POST /v2/incidents/search`), oldest first: the
/// incidents of one instance (`processInstanceKey`), or else among the newest 10,000 of
/// every instance. One page: a search that matches more than `page.limit` says so
/// (`hasMoreTotalItems`) and gives no cursor; narrow it by instance.
#[utoipa::path(post, path = "/v2/incidents/search", tag = "zeebe jobs",
    request_body = IncidentSearchBody,
    responses(
        (status = 200, description = "The incidents the filter selects", body = IncidentSearchView),
        (status = 422, description = "`page.after` is not an `endCursor` this search answered", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["read"])))]
pub async fn search(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    crate::body::JsonBody(body): crate::body::JsonBody<IncidentSearchBody>,
) -> Result<Json<IncidentSearchView>> {
    let paging = search::paging(body.page)?;
    if paging.cursor.is_some() {
        // An incident search answers one page and gives no cursor to continue after.
        return Err(search::unknown_cursor());
    }
    let f = body.filter.unwrap_or_default();
    let path = |field: &'static str| ["filter", field];
    search::filter_tenant(&path("tenantId"), &f.tenant_id)?;
    search::refuse_rest("filter", &f.rest, OTHER_FILTER_FIELDS)?;
    let wanted_state = search::filter_string(&path("state"), &f.state)?;
    if let Some(s) = wanted_state.as_deref() {
        if !matches!(s, "ACTIVE" | "RESOLVED" | "MIGRATED" | "PENDING") {
            return Err(super::invalid_at(
                &path("state"),
                &format!("`{s}` is not one of ACTIVE, MIGRATED, PENDING, RESOLVED"),
            ));
        }
    }
    let error_type_wanted = search::filter_string(&path("errorType"), &f.error_type)?;
    let element = search::filter_string(&path("elementId"), &f.element_id)?;
    let process = search::filter_string(&path("processDefinitionId"), &f.process_definition_id)?;
    let definition = search::filter_key(&path("processDefinitionKey"), &f.process_definition_key)?;
    let incident_key = search::filter_key(&path("incidentKey"), &f.incident_key)?;
    let instance_key = search::filter_key(&path("processInstanceKey"), &f.process_instance_key)?;
    let empty = || {
        Json(IncidentSearchView {
            items: Vec::new(),
            page: search::page_view(0, None),
        })
    };
    // An incident key names one row of one instance: read once, not per row.
    let keyed = match incident_key {
        None => None,
        Some(key) => match state
            .ops
            .camunda_key(key, KeyKind::Incident, "incident")
            .await
        {
            Ok(name) => match name.node.parse::<i64>() {
                Ok(row) => Some((name.instance, row)),
                Err(_) => return Ok(empty()),
            },
            Err(_) => return Ok(empty()),
        },
    };
    let rows = if let Some(key) = instance_key {
        let Ok(name) = state
            .ops
            .camunda_key(key, KeyKind::Instance, "process instance")
            .await
        else {
            return Ok(empty());
        };
        match state.ops.incidents(Some(name.instance), 0).await {
            Ok(rows) => rows,
            Err(qflow_ops::Error::NotFound { .. }) => return Ok(empty()),
            Err(e) => return Err(Problem::from_ops(e, Place::Body)),
        }
    } else {
        // By incident key alone: that incident's instance.
        match state.ops.incidents(keyed.map(|(i, _)| i), 0).await {
            Ok(rows) => rows,
            Err(qflow_ops::Error::NotFound { .. }) => return Ok(empty()),
            Err(e) => return Err(Problem::from_ops(e, Place::Body)),
        }
    };
    let all = deployments(&state).await?;
    let mut instances: BTreeMap<String, InstanceSummary> = BTreeMap::new();
    let mut found = Vec::new();
    let mut more = false;
    for i in rows {
        let open = i.resolved_at_ms.is_none();
        if wanted_state
            .as_deref()
            .is_some_and(|s| s != if open { "ACTIVE" } else { "RESOLVED" })
            || error_type_wanted
                .as_deref()
                .is_some_and(|t| t != error_type(&i.code))
            || element
                .as_deref()
                .is_some_and(|e| e != super::element_id(&i.node))
        {
            continue;
        }
        let instance = match instances.get(&i.instance) {
            Some(found) => found.clone(),
            None => match state.ops.instance(parse_id(&i.instance)?).await {
                Ok(found) => {
                    instances.insert(i.instance.clone(), found.clone());
                    found
                }
                // Purged between the two reads.
                Err(qflow_ops::Error::NotFound { .. }) => continue,
                Err(e) => return Err(Problem::from_ops(e, Place::Body)),
            },
        };
        if definition.is_some_and(|d| d != instance.deployment)
            || process
                .as_deref()
                .is_some_and(|p| p != definition_version(&all, instance.deployment).0)
        {
            continue;
        }
        if let Some((instance, row)) = keyed {
            if i.id != row || parse_id(&i.instance)? != instance {
                continue;
            }
        }
        if found.len() == paging.limit as usize {
            more = true;
            break;
        }
        found.push((i, instance));
    }
    let items = results(&state, &found, &all).await?;
    let mut page = search::page_view(items.len(), None);
    page.has_more_total_items = more;
    page.total_items += u64::from(more);
    Ok(Json(IncidentSearchView { items, page }))
}

/// Camunda 8's `IncidentResolutionRequest`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IncidentResolutionBody {
    /// Only null: qflow keeps no operation records to tag.
    #[serde(default)]
    #[schema(schema_with = super::only_null)]
    pub operation_reference: Option<Value>,
}

/// Whether an open incident of `id` was opened after `incident` (then `incident` is not
/// the one the instance's failure opened).
async fn incidents_after(
    state: &AppState,
    id: InstanceId,
    incident: &IncidentView,
) -> Result<bool> {
    let all = state
        .ops
        .incidents(Some(id), 0)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Path))?;
    Ok(all
        .iter()
        .any(|i| i.resolved_at_ms.is_none() && i.id > incident.id))
}

/// Resolves an incident (Camunda 8 `POST /v2/incidents/{incidentKey}/resolution`): the
/// failure of a FAILED instance resumes it with its budget kept (its failed task gets
/// one more attempt); another open incident is marked resolved. A resolved incident is
/// a 404, as in Zeebe.
#[utoipa::path(post, path = "/v2/incidents/{incidentKey}/resolution", tag = "zeebe jobs",
    params(("incidentKey" = String, Path, pattern = "^-?[0-9]{1,18}$", description = "The incident's key")),
    request_body(content = Option<IncidentResolutionBody>),
    responses(
        (status = 204, description = "Resolved: the instance runs again, or the incident is closed"),
        (status = 404, description = "No such incident, or it is resolved", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn resolve(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    Path(key): Path<String>,
    crate::body::OptionalJsonBody(body): crate::body::OptionalJsonBody<IncidentResolutionBody>,
) -> Result<StatusCode> {
    if let Some(reference) = body
        .and_then(|b| b.operation_reference)
        .filter(|v| !v.is_null())
    {
        return Err(unsupported(
            &["operationReference"],
            Some(reference),
            "qflow keeps no operation records to tag; send null or leave it out",
        ));
    }
    let (incident, instance) = incident_of(&state, &key).await?;
    if incident.resolved_at_ms.is_some() {
        return Err(Problem::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("incident {key} is resolved"),
        ));
    }
    let id = parse_id(&instance.id)?;
    let ops = state.ops.as_actor(&caller.name);
    // The incident that stopped a FAILED instance is its failure's (its code); an older
    // one still open (a poisoned channel call) is only marked resolved.
    let is_failure = instance.status == "failed"
        && instance.failure_code.as_deref() == Some(incident.code.as_str())
        && !incidents_after(&state, id, &incident).await?;
    let applied = if is_failure {
        ops.resume(id, qflow_core::Budget::Keep).await
    } else {
        ops.resolve_incident(id, &incident.node).await
    };
    applied.map_err(|e| Problem::from_ops(e, Place::Path))?;
    Ok(StatusCode::NO_CONTENT)
}
