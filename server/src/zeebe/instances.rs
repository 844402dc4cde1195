//! Camunda 8 process instances by key: `GET /v2/process-instances/{processInstanceKey}`,
//! `POST /v2/process-instances/search` and
//! `POST /v2/process-instances/{processInstanceKey}/cancellation`, over `ops`' instance
//! listing, its row read and its cancel.
//!
//! States: a running instance is `ACTIVE`; a FAILED one (kept, repairable, with its
//! incident open) is `ACTIVE` with `hasIncident`, as a Zeebe instance stopped at an
//! incident is; a completed one `COMPLETED`; a cancelled one `TERMINATED`.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use qflow_ops::{DeploymentSummary, InstanceQuery, InstanceSummary};
use qflow_store::{InstanceId, KeyKind, KeyName};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::search::{self, one_order, PageView, SearchPage};
use super::{definition_version, deployments, path_key, unsupported, Result, DEFAULT_TENANT};
use crate::auth::{Caller, OperateScope, ReadScope};
use crate::problem::{Place, Problem};
use crate::AppState;

/// The most listing pages one search reads to fill its page when a filter qflow's
/// listing cannot apply (`ACTIVE`: running or FAILED; a process id over several
/// deployments) leaves rows out; past it the answer is short and has an `endCursor`.
const SCAN_PAGES_MAX: usize = 10;

/// Camunda 8's `ProcessInstanceResult`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInstanceView {
    pub process_definition_id: String,
    /// The process id again: qflow keeps no process names apart from the model.
    pub process_definition_name: String,
    /// The deployment's version among its process's deployments, from 1.
    pub process_definition_version: i64,
    /// When the instance was created, RFC 3339.
    pub start_date: String,
    /// When it completed or was cancelled; null while it runs or is FAILED.
    pub end_date: Option<String>,
    /// `ACTIVE`, `COMPLETED` or `TERMINATED`.
    pub state: &'static str,
    /// Whether the instance is FAILED (its incident open).
    pub has_incident: bool,
    pub tenant_id: &'static str,
    #[schema(pattern = "^[0-9]+$")]
    pub process_instance_key: String,
    /// The deployment id, in decimal.
    #[schema(pattern = "^[0-9]+$")]
    pub process_definition_key: String,
    // Members Camunda 8.9 and 8.10 send, null where qflow has nothing for them:
    #[schema(value_type = Option<String>)]
    pub process_definition_version_tag: Option<String>,
    /// A called instance's caller; null for one started any other way.
    #[schema(value_type = Option<String>, pattern = "^[0-9]+$")]
    pub parent_process_instance_key: Option<String>,
    /// The call activity's element instance in the caller; null when not called.
    #[schema(value_type = Option<String>, pattern = "^[0-9]+$")]
    pub parent_element_instance_key: Option<String>,
    /// The top of a called instance's chain of callers; null when not called.
    #[schema(value_type = Option<String>, pattern = "^[0-9]+$")]
    pub root_process_instance_key: Option<String>,
    pub tags: Vec<String>,
    /// The instance's business key, if it has one.
    pub business_id: Option<String>,
    #[schema(value_type = Option<String>)]
    pub suspended_date: Option<String>,
}

/// Camunda's state of a qflow status.
fn state_of(status: &str) -> &'static str {
    match status {
        "completed" => "COMPLETED",
        "cancelled" => "TERMINATED",
        _ => "ACTIVE",
    }
}

/// The keys of a called instance's parent, the call activity's element instance there,
/// and the root of its chain of callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lineage {
    parent: i64,
    parent_element: i64,
    root: i64,
}

/// The most callers walked up to find a called instance's root.
const CALLERS_WALKED_MAX: usize = 64;

/// The top of `parent`'s chain of callers: the first instance up the chain that was not
/// called (or whose caller retention purged), at most [`CALLERS_WALKED_MAX`] steps up;
/// `None` when `parent` itself is gone. Always an instance the store holds, so that its
/// key can be given.
async fn root_of(state: &AppState, parent: InstanceId) -> Result<Option<InstanceId>> {
    let mut at = parent;
    let mut alive = None;
    for _ in 0..CALLERS_WALKED_MAX {
        let above = match state.ops.instance(at).await {
            Ok(summary) => summary.parent,
            Err(qflow_ops::Error::NotFound { .. }) => break,
            Err(e) => return Err(Problem::from_ops(e, Place::Body)),
        };
        alive = Some(at);
        match above.and_then(|p| qflow_ops::parse_instance_id(&p.instance).ok()) {
            Some(next) => at = next,
            None => break,
        }
    }
    Ok(alive)
}

fn view(
    i: &InstanceSummary,
    key: i64,
    lineage: Option<Lineage>,
    deployments: &[DeploymentSummary],
) -> ProcessInstanceView {
    let (process, version) = definition_version(deployments, i.deployment);
    ProcessInstanceView {
        process_definition_name: process.clone(),
        process_definition_id: process,
        process_definition_version: version,
        start_date: search::date(i.created_at_ms),
        end_date: i.ended_at_ms.map(search::date),
        state: state_of(i.status),
        has_incident: i.status == "failed",
        tenant_id: DEFAULT_TENANT,
        process_instance_key: key.to_string(),
        process_definition_key: i.deployment.to_string(),
        process_definition_version_tag: None,
        parent_process_instance_key: lineage.map(|l| l.parent.to_string()),
        parent_element_instance_key: lineage.map(|l| l.parent_element.to_string()),
        root_process_instance_key: lineage.map(|l| l.root.to_string()),
        tags: Vec::new(),
        business_id: i.business_key.clone(),
        suspended_date: None,
    }
}

/// The instance a path's key names; a key that names no instance is a 404.
async fn instance_of(state: &AppState, key: &str) -> Result<InstanceSummary> {
    let key = path_key("processInstanceKey", key)?;
    let name = state
        .ops
        .camunda_key(key, KeyKind::Instance, "process instance")
        .await
        .map_err(|e| Problem::from_ops(e, Place::Path))?;
    state
        .ops
        .instance(name.instance)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Path))
}

/// Views of `items`, with their keys (given now where an instance has none yet).
async fn views(
    state: &AppState,
    items: &[InstanceSummary],
    deployments: &[DeploymentSummary],
) -> Result<Vec<ProcessInstanceView>> {
    let parse =
        |id: &str| qflow_ops::parse_instance_id(id).map_err(|e| Problem::from_ops(e, Place::Body));
    // Per item: its own key, then for a called instance its parent's, the call
    // activity's element instance's and its root's.
    let mut names = Vec::with_capacity(items.len());
    let mut called = Vec::with_capacity(items.len());
    for i in items {
        names.push(KeyName::instance(parse(&i.id)?));
        let Some(p) = &i.parent else {
            called.push(false);
            continue;
        };
        let parent = parse(&p.instance)?;
        // A parent retention purged (its deployment's retention can be shorter) has no
        // key any more: the called instance is shown without its lineage.
        let Some(root) = root_of(state, parent).await? else {
            called.push(false);
            continue;
        };
        names.push(KeyName::instance(parent));
        names.push(KeyName {
            instance: parent,
            kind: KeyKind::Element,
            node: p.node.clone(),
            attempt: 0,
        });
        names.push(KeyName::instance(root));
        called.push(true);
    }
    let keys = state
        .ops
        .camunda_keys(&names)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Body))?;
    let mut keys = keys.into_iter();
    let mut out = Vec::with_capacity(items.len());
    for (i, called) in items.iter().zip(called) {
        let key = keys.next().unwrap_or_default();
        let lineage = if called {
            let (parent, parent_element, root) = (keys.next(), keys.next(), keys.next());
            Some(Lineage {
                parent: parent.unwrap_or_default(),
                parent_element: parent_element.unwrap_or_default(),
                root: root.unwrap_or_default(),
            })
        } else {
            None
        };
        out.push(view(i, key, lineage, deployments));
    }
    Ok(out)
}

/// One process instance (Camunda 8 `GET /v2/process-instances/{processInstanceKey}`).
#[utoipa::path(get, path = "/v2/process-instances/{processInstanceKey}", tag = "zeebe jobs",
    params(("processInstanceKey" = String, Path, pattern = "^-?[0-9]{1,18}$", description = "The key a creation, job or search answered")),
    responses(
        (status = 200, description = "The instance", body = ProcessInstanceView),
        (status = 404, description = "No such instance (or purged by retention)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["read"])))]
pub async fn get(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    Path(key): Path<String>,
) -> Result<Json<ProcessInstanceView>> {
    let instance = instance_of(&state, &key).await?;
    let all = deployments(&state).await?;
    let mut out = views(&state, std::slice::from_ref(&instance), &all).await?;
    Ok(Json(out.remove(0)))
}

one_order!(ProcessInstanceSort, ProcessInstanceSortField, "startDate");

/// Camunda 8's `ProcessInstanceSearchQuery`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProcessInstanceSearchBody {
    /// Only `startDate` ascending, or none (the same order).
    #[serde(default, deserialize_with = "search::optional_objects")]
    pub sort: Option<Vec<ProcessInstanceSort>>,
    #[serde(default, deserialize_with = "search::optional_object")]
    pub filter: Option<ProcessInstanceFilter>,
    #[serde(default, deserialize_with = "search::optional_object")]
    pub page: Option<SearchPage>,
}

/// The filter fields qflow judges (each a value or `{"$eq": value}`); Camunda's other
/// fields are accepted only null.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInstanceFilter {
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^-?[0-9]{1,18}$")]
    pub process_instance_key: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub process_definition_id: Option<Value>,
    /// A deployment id, in decimal.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^-?[0-9]{1,18}$")]
    pub process_definition_key: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<i64>)]
    pub process_definition_version: Option<Value>,
    /// `ACTIVE`, `COMPLETED` or `TERMINATED`.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^(ACTIVE|COMPLETED|TERMINATED)$")]
    pub state: Option<Value>,
    #[serde(default)]
    pub has_incident: Option<bool>,
    /// Only `<default>`.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^<default>$")]
    pub tenant_id: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    pub rest: BTreeMap<String, Value>,
}

/// The fields of Camunda's `ProcessInstanceFilter` qflow does not judge.
pub(crate) const OTHER_FILTER_FIELDS: &[&str] = &[
    "processDefinitionName",
    "processDefinitionVersionTag",
    "startDate",
    "endDate",
    "variables",
    "parentProcessInstanceKey",
    "parentElementInstanceKey",
    "batchOperationId",
    "errorMessage",
    "hasRetriesLeft",
    "elementInstanceState",
    "elementId",
    "hasElementInstanceIncident",
    "incidentErrorHashCode",
    "tags",
    "$or",
];

/// Camunda 8's `ProcessInstanceSearchQueryResult`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProcessInstanceSearchView {
    pub items: Vec<ProcessInstanceView>,
    pub page: PageView,
}

/// What a filter asks, read: which deployments (`None`: any) and which statuses.
struct Wanted {
    deployments: Option<BTreeSet<i64>>,
    statuses: BTreeSet<&'static str>,
}

impl Wanted {
    fn matches(&self, i: &InstanceSummary) -> bool {
        self.statuses.contains(i.status)
            && self
                .deployments
                .as_ref()
                .is_none_or(|d| d.contains(&i.deployment))
    }
}

fn wanted(f: &ProcessInstanceFilter, all: &[DeploymentSummary]) -> Result<Wanted> {
    let path = |field: &'static str| ["filter", field];
    search::filter_tenant(&path("tenantId"), &f.tenant_id)?;
    search::refuse_rest("filter", &f.rest, OTHER_FILTER_FIELDS)?;
    let mut deployments: Option<BTreeSet<i64>> = None;
    if let Some(key) = search::filter_key(&path("processDefinitionKey"), &f.process_definition_key)?
    {
        deployments = Some(BTreeSet::from([key]));
    }
    let process = search::filter_string(&path("processDefinitionId"), &f.process_definition_id)?;
    let version = search::filter_int(
        &path("processDefinitionVersion"),
        &f.process_definition_version,
    )?;
    if process.is_some() || version.is_some() {
        let of_process: BTreeSet<i64> = all
            .iter()
            .filter(|d| process.as_ref().is_none_or(|p| &d.process_id == p))
            .filter(|d| version.is_none_or(|v| definition_version(all, d.id).1 == v))
            .map(|d| d.id)
            .collect();
        deployments = Some(match deployments {
            Some(keys) => keys.intersection(&of_process).copied().collect(),
            None => of_process,
        });
    }
    let mut statuses: BTreeSet<&'static str> =
        BTreeSet::from(["running", "failed", "completed", "cancelled"]);
    if let Some(state) = search::filter_string(&path("state"), &f.state)? {
        let of_state: &[&'static str] = match state.as_str() {
            "ACTIVE" => &["running", "failed"],
            "COMPLETED" => &["completed"],
            "TERMINATED" => &["cancelled"],
            other => {
                return Err(super::invalid_at(
                    &path("state"),
                    &format!("`{other}` is not one of ACTIVE, COMPLETED, TERMINATED"),
                ))
            }
        };
        statuses.retain(|s| of_state.contains(s));
    }
    match f.has_incident {
        Some(true) => statuses.retain(|s| *s == "failed"),
        Some(false) => statuses.retain(|s| *s != "failed"),
        None => {}
    }
    Ok(Wanted {
        deployments,
        statuses,
    })
}

/// Searches process instances (Camunda 8 `POST /v2/process-instances/search`), oldest
/// first. The filters qflow judges: `processInstanceKey`, `processDefinitionId`,
/// `processDefinitionKey`, `processDefinitionVersion`, `state`, `hasIncident`,
/// `tenantId` (docs/workers.md); the others are accepted only null.
#[utoipa::path(post, path = "/v2/process-instances/search", tag = "zeebe jobs",
    request_body = ProcessInstanceSearchBody,
    responses(
        (status = 200, description = "One page of the instances the filter selects", body = ProcessInstanceSearchView),
        (status = 422, description = "`page.after` is not an `endCursor` this search answered", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["read"])))]
pub async fn search(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    crate::body::JsonBody(body): crate::body::JsonBody<ProcessInstanceSearchBody>,
) -> Result<Json<ProcessInstanceSearchView>> {
    let paging = search::paging(body.page)?;
    let filter = body.filter.unwrap_or_default();
    let all = deployments(&state).await?;
    let wanted = wanted(&filter, &all)?;
    let key_path = ["filter", "processInstanceKey"];
    let instance_key = search::filter_key(&key_path, &filter.process_instance_key)?;
    let empty = || {
        Json(ProcessInstanceSearchView {
            items: Vec::new(),
            page: search::page_view(0, None),
        })
    };
    if wanted.statuses.is_empty() || wanted.deployments.as_ref().is_some_and(|d| d.is_empty()) {
        return Ok(empty());
    }
    // By key: that one instance, if the rest of the filter holds.
    if let Some(key) = instance_key {
        let found = state
            .ops
            .camunda_key(key, KeyKind::Instance, "process instance")
            .await;
        let Ok(name) = found else {
            return Ok(empty());
        };
        let instance = match state.ops.instance(name.instance).await {
            Ok(i) => i,
            Err(qflow_ops::Error::NotFound { .. }) => return Ok(empty()),
            Err(e) => return Err(Problem::from_ops(e, Place::Body)),
        };
        if !wanted.matches(&instance) || paging.cursor.is_some() {
            return Ok(empty());
        }
        let items = views(&state, &[instance], &all).await?;
        return Ok(Json(ProcessInstanceSearchView {
            page: search::page_view(items.len(), None),
            items,
        }));
    }
    let single = |set: &BTreeSet<i64>| {
        (set.len() == 1)
            .then(|| set.iter().copied().next())
            .flatten()
    };
    let mut query = InstanceQuery {
        deployment: wanted.deployments.as_ref().and_then(single),
        status: (wanted.statuses.len() == 1)
            .then(|| wanted.statuses.iter().next().map(|s| (*s).to_owned()))
            .flatten(),
        cursor: paging.cursor,
        limit: paging.limit,
        ..InstanceQuery::default()
    };
    let mut found: Vec<InstanceSummary> = Vec::new();
    let mut next = None;
    for _ in 0..SCAN_PAGES_MAX {
        let page = state
            .ops
            .instances(&query)
            .await
            .map_err(search::listing_problem)?;
        let read = page.items.len();
        let mut taken_all = true;
        for (n, i) in page.items.into_iter().enumerate() {
            if found.len() == paging.limit as usize {
                // Full within this listing page: the next search goes on after the
                // last item given.
                taken_all = n == read;
                break;
            }
            if wanted.matches(&i) {
                found.push(i);
            }
        }
        if !taken_all {
            let last = found.last().expect("a full page has a last item");
            next = Some(
                qflow_ops::instance_cursor(last).map_err(|e| Problem::from_ops(e, Place::Body))?,
            );
            break;
        }
        next = page.next;
        if next.is_none() || found.len() == paging.limit as usize {
            break;
        }
        query.cursor = next.clone();
    }
    let items = views(&state, &found, &all).await?;
    Ok(Json(ProcessInstanceSearchView {
        page: search::page_view(items.len(), next),
        items,
    }))
}

/// Camunda 8's `CancelProcessInstanceRequest`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CancellationBody {
    /// Only null: qflow keeps no operation records to tag.
    #[serde(default)]
    #[schema(schema_with = super::only_null)]
    pub operation_reference: Option<Value>,
}

/// Cancels a process instance (Camunda 8
/// `POST /v2/process-instances/{processInstanceKey}/cancellation`): a running or FAILED
/// instance is cancelled; one that has ended is a 404, as in Zeebe.
#[utoipa::path(post, path = "/v2/process-instances/{processInstanceKey}/cancellation", tag = "zeebe jobs",
    params(("processInstanceKey" = String, Path, pattern = "^-?[0-9]{1,18}$", description = "The instance's key")),
    request_body(content = Option<CancellationBody>),
    responses(
        (status = 204, description = "Cancelled"),
        (status = 404, description = "No such instance, or it has ended", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    Path(key): Path<String>,
    crate::body::OptionalJsonBody(body): crate::body::OptionalJsonBody<CancellationBody>,
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
    let instance = instance_of(&state, &key).await?;
    if matches!(instance.status, "completed" | "cancelled") {
        return Err(Problem::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("process instance {key} has ended ({})", instance.status),
        ));
    }
    let id = qflow_ops::parse_instance_id(&instance.id)
        .map_err(|e| Problem::from_ops(e, Place::Path))?;
    state
        .ops
        .as_actor(&caller.name)
        .cancel(id)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Path))?;
    Ok(StatusCode::NO_CONTENT)
}
