//! Camunda 8 user tasks: `GET /v2/user-tasks/{userTaskKey}`, `POST /v2/user-tasks/search`,
//! `POST /v2/user-tasks/{userTaskKey}/assignment`, `DELETE
//! /v2/user-tasks/{userTaskKey}/assignee` and `POST /v2/user-tasks/{userTaskKey}/completion`,
//! over `ops`' task list (`qflow_ops::user_tasks`).
//!
//! qflow's task list holds the tasks that wait (`CREATED`); a completed or cancelled
//! task leaves it, so a search for another state finds nothing and a completed task's
//! key is a 404 (Camunda keeps them in its secondary store). A user task's key names
//! the task at its node in its instance (`KeyKind::UserTask`).

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use qflow_ops::{DeploymentSummary, UserTaskListQuery, UserTaskView};
use qflow_store::{KeyKind, KeyName};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::search::{self, one_order, PageView, SearchPage};
use super::{definition_version, deployments, path_key, Result, DEFAULT_TENANT};
use crate::auth::{Caller, OperateScope, ReadScope};
use crate::problem::{Place, Problem};
use crate::AppState;

/// Camunda's priority of a task that sets none.
const PRIORITY_DEFAULT: u8 = 50;

/// Camunda 8's `UserTaskResult`, the fields qflow has.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserTaskResult {
    #[schema(pattern = "^[0-9]+$")]
    pub user_task_key: String,
    /// The task's name in the model, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Always `CREATED`: the task list holds waiting tasks only.
    pub state: &'static str,
    /// Who holds the task; null when nobody does.
    pub assignee: Option<String>,
    pub element_id: String,
    pub candidate_groups: Vec<String>,
    pub candidate_users: Vec<String>,
    pub process_definition_id: String,
    pub creation_date: String,
    pub tenant_id: &'static str,
    pub process_definition_version: i64,
    /// Always empty: qflow's user tasks have no headers.
    pub custom_headers: BTreeMap<String, String>,
    /// Always 50, Camunda's default: qflow's user tasks have no priority.
    pub priority: u8,
    #[schema(pattern = "^[0-9]+$")]
    pub element_instance_key: String,
    #[schema(pattern = "^[0-9]+$")]
    pub process_definition_key: String,
    #[schema(pattern = "^[0-9]+$")]
    pub process_instance_key: String,
    // Members Camunda 8.9 and 8.10 send, null where qflow has nothing for them:
    #[schema(value_type = Option<String>)]
    pub completion_date: Option<String>,
    #[schema(value_type = Option<String>)]
    pub due_date: Option<String>,
    #[schema(value_type = Option<String>)]
    pub follow_up_date: Option<String>,
    #[schema(value_type = Option<String>)]
    pub external_form_reference: Option<String>,
    #[schema(value_type = Option<String>)]
    pub form_key: Option<String>,
    #[schema(value_type = Option<String>)]
    pub process_name: Option<String>,
    #[schema(value_type = Option<String>)]
    pub root_process_instance_key: Option<String>,
    pub tags: Vec<String>,
    #[schema(value_type = Option<String>)]
    pub business_id: Option<String>,
}

fn task_names(t: &UserTaskView) -> Result<[KeyName; 3]> {
    let instance =
        qflow_ops::parse_instance_id(&t.instance).map_err(|e| Problem::from_ops(e, Place::Body))?;
    Ok([
        KeyName {
            instance,
            kind: KeyKind::UserTask,
            node: t.node.clone(),
            attempt: 0,
        },
        KeyName::instance(instance),
        KeyName {
            instance,
            kind: KeyKind::Element,
            node: t.node.clone(),
            attempt: 0,
        },
    ])
}

async fn results(
    state: &AppState,
    tasks: Vec<UserTaskView>,
    deployments: &[DeploymentSummary],
) -> Result<Vec<UserTaskResult>> {
    let mut names = Vec::with_capacity(tasks.len() * 3);
    for t in &tasks {
        names.extend(task_names(t)?);
    }
    let keys = state
        .ops
        .camunda_keys(&names)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Body))?;
    Ok(tasks
        .into_iter()
        .zip(keys.chunks(3))
        .map(|(t, keys)| UserTaskResult {
            user_task_key: keys[0].to_string(),
            name: t.name,
            state: "CREATED",
            assignee: t.assignee,
            element_id: super::element_id(&t.node),
            candidate_groups: t.candidate_groups,
            candidate_users: t.candidate_users,
            process_definition_version: definition_version(deployments, t.deployment).1,
            process_definition_id: t.process_id,
            creation_date: search::date(t.created_at_ms),
            tenant_id: DEFAULT_TENANT,
            custom_headers: BTreeMap::new(),
            priority: PRIORITY_DEFAULT,
            element_instance_key: keys[2].to_string(),
            process_definition_key: t.deployment.to_string(),
            process_instance_key: keys[1].to_string(),
            completion_date: None,
            due_date: None,
            follow_up_date: None,
            external_form_reference: None,
            form_key: None,
            process_name: None,
            root_process_instance_key: None,
            tags: Vec::new(),
            business_id: None,
        })
        .collect())
}

/// The instance and node a path's user-task key names.
async fn task_of(state: &AppState, key: &str) -> Result<KeyName> {
    let key = path_key("userTaskKey", key)?;
    state
        .ops
        .camunda_key(key, KeyKind::UserTask, "user task")
        .await
        .map_err(|e| Problem::from_ops(e, Place::Path))
}

/// [`task_of`], for a change: a task that no longer waits is a 404, as in Zeebe (whose
/// completed tasks are not found by the commands either).
async fn waiting_task_of(state: &AppState, key: &str) -> Result<KeyName> {
    let name = task_of(state, key).await?;
    state
        .ops
        .user_task(name.instance, &name.node)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Path))?;
    Ok(name)
}

/// One waiting user task (Camunda 8 `GET /v2/user-tasks/{userTaskKey}`).
#[utoipa::path(get, path = "/v2/user-tasks/{userTaskKey}", tag = "zeebe jobs",
    params(("userTaskKey" = String, Path, pattern = "^-?[0-9]{1,18}$", description = "The key a search answered")),
    responses(
        (status = 200, description = "The task", body = UserTaskResult),
        (status = 404, description = "No such task waiting", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["read"])))]
pub async fn get(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    Path(key): Path<String>,
) -> Result<Json<UserTaskResult>> {
    let name = task_of(&state, &key).await?;
    let detail = state
        .ops
        .user_task(name.instance, &name.node)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Path))?;
    let all = deployments(&state).await?;
    let mut out = results(&state, vec![detail.task], &all).await?;
    Ok(Json(out.remove(0)))
}

one_order!(UserTaskSort, UserTaskSortField, "creationDate");

/// Camunda 8's `UserTaskSearchQuery`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserTaskSearchBody {
    /// Only `creationDate` ascending, or none (the same order).
    #[serde(default, deserialize_with = "search::optional_objects")]
    pub sort: Option<Vec<UserTaskSort>>,
    #[serde(default, deserialize_with = "search::optional_object")]
    pub filter: Option<UserTaskFilter>,
    #[serde(default, deserialize_with = "search::optional_object")]
    pub page: Option<SearchPage>,
}

/// The user-task filter fields qflow judges; Camunda's other fields only null.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserTaskFilter {
    /// `CREATED` finds the waiting tasks; any other state finds none.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^(CREATING|CREATED|ASSIGNING|UPDATING|COMPLETING|COMPLETED|CANCELING|CANCELED|FAILED)$")]
    pub state: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 128, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub assignee: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 128, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub candidate_group: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 128, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub candidate_user: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub element_id: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub process_definition_id: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^-?[0-9]{1,18}$")]
    pub process_definition_key: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^-?[0-9]{1,18}$")]
    pub process_instance_key: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^-?[0-9]{1,18}$")]
    pub user_task_key: Option<Value>,
    /// Only `<default>`.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^<default>$")]
    pub tenant_id: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    pub rest: BTreeMap<String, Value>,
}

pub(crate) const OTHER_FILTER_FIELDS: &[&str] = &[
    "priority",
    "name",
    "creationDate",
    "completionDate",
    "followUpDate",
    "dueDate",
    "processInstanceVariables",
    "localVariables",
    "elementInstanceKey",
];

/// Camunda 8's `UserTaskSearchQueryResult`.
#[derive(Debug, Serialize, ToSchema)]
pub struct UserTaskSearchView {
    pub items: Vec<UserTaskResult>,
    pub page: PageView,
}

const USER_TASK_STATES: &[&str] = &[
    "CREATING",
    "CREATED",
    "ASSIGNING",
    "UPDATING",
    "COMPLETING",
    "COMPLETED",
    "CANCELING",
    "CANCELED",
    "FAILED",
];

/// Searches the waiting user tasks (Camunda 8 `POST /v2/user-tasks/search`), oldest
/// offer first: by instance (`processInstanceKey`, `userTaskKey`: that instance's tasks,
/// one page) or through the task list's indexes (assignee, candidate group or user,
/// deployment), with `elementId` and `processDefinitionId` judged on each page (a page
/// may then hold fewer than `limit` while `endCursor` says more may follow).
#[utoipa::path(post, path = "/v2/user-tasks/search", tag = "zeebe jobs",
    request_body = UserTaskSearchBody,
    responses(
        (status = 200, description = "One page of the waiting tasks the filter selects", body = UserTaskSearchView),
        (status = 422, description = "`page.after` is not an `endCursor` this search answered", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["read"])))]
pub async fn search(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    crate::body::JsonBody(body): crate::body::JsonBody<UserTaskSearchBody>,
) -> Result<Json<UserTaskSearchView>> {
    let paging = search::paging(body.page)?;
    let f = body.filter.unwrap_or_default();
    let path = |field: &'static str| ["filter", field];
    search::filter_tenant(&path("tenantId"), &f.tenant_id)?;
    search::refuse_rest("filter", &f.rest, OTHER_FILTER_FIELDS)?;
    let empty = || {
        Json(UserTaskSearchView {
            items: Vec::new(),
            page: search::page_view(0, None),
        })
    };
    let wanted_state = search::filter_string(&path("state"), &f.state)?;
    let assignee = search::filter_name(&path("assignee"), &f.assignee)?;
    let group = search::filter_name(&path("candidateGroup"), &f.candidate_group)?;
    let user = search::filter_name(&path("candidateUser"), &f.candidate_user)?;
    let element = search::filter_string(&path("elementId"), &f.element_id)?;
    let process = search::filter_string(&path("processDefinitionId"), &f.process_definition_id)?;
    let definition = search::filter_key(&path("processDefinitionKey"), &f.process_definition_key)?;
    let instance_key = search::filter_key(&path("processInstanceKey"), &f.process_instance_key)?;
    let task_key = search::filter_key(&path("userTaskKey"), &f.user_task_key)?;
    if let Some(s) = wanted_state {
        if !USER_TASK_STATES.contains(&s.as_str()) {
            return Err(super::invalid_at(
                &path("state"),
                &format!("`{s}` is not a user task state"),
            ));
        }
        if s != "CREATED" {
            return Ok(empty());
        }
    }
    let all = deployments(&state).await?;
    let holds = |t: &UserTaskView| {
        assignee
            .as_ref()
            .is_none_or(|a| t.assignee.as_ref() == Some(a))
            && group
                .as_ref()
                .is_none_or(|g| t.candidate_groups.contains(g))
            && user.as_ref().is_none_or(|u| t.candidate_users.contains(u))
            && element
                .as_deref()
                .is_none_or(|e| e == super::element_id(&t.node))
            && process.as_ref().is_none_or(|p| &t.process_id == p)
            && definition.is_none_or(|d| d == t.deployment)
    };
    // One instance's tasks: by the instance's key, or the instance a task key names.
    let mut one_instance = None;
    for (key, kind, what) in [
        (instance_key, KeyKind::Instance, "process instance"),
        (task_key, KeyKind::UserTask, "user task"),
    ] {
        let Some(key) = key else { continue };
        match state.ops.camunda_key(key, kind, what).await {
            Ok(name) if one_instance.is_none_or(|i| i == name.instance) => {
                one_instance = Some(name.instance)
            }
            _ => return Ok(empty()),
        }
    }
    if let Some(instance) = one_instance {
        if paging.cursor.is_some() {
            return Ok(empty());
        }
        let tasks = match state.ops.instance_user_tasks(instance).await {
            Ok(tasks) => tasks,
            Err(qflow_ops::Error::NotFound { .. }) => return Ok(empty()),
            Err(e) => return Err(Problem::from_ops(e, Place::Body)),
        };
        let mut items = results(
            &state,
            tasks.into_iter().filter(|t| holds(t)).collect(),
            &all,
        )
        .await?;
        if let Some(key) = task_key {
            items.retain(|t| t.user_task_key == key.to_string());
        }
        // One instance's tasks are one page; more than `limit` say so (no cursor: narrow
        // the search by `elementId`).
        let more = items.len() > paging.limit as usize;
        items.truncate(paging.limit as usize);
        let mut page = search::page_view(items.len(), None);
        page.has_more_total_items = more;
        page.total_items += u64::from(more);
        return Ok(Json(UserTaskSearchView { page, items }));
    }
    let query = UserTaskListQuery {
        assignee: assignee.clone(),
        candidate_groups: group.iter().cloned().collect(),
        candidate_user: user.clone(),
        deployment: definition,
        assigned: None,
        cursor: paging.cursor,
        limit: paging.limit,
    };
    let page = state.ops.user_tasks(&query).await.map_err(ops_problem)?;
    let tasks = page.items.into_iter().filter(|t| holds(t)).collect();
    let items = results(&state, tasks, &all).await?;
    Ok(Json(UserTaskSearchView {
        page: search::page_view(items.len(), page.next),
        items,
    }))
}

/// An `ops` refusal of a task-list query, at Camunda's filter field.
fn ops_problem(e: qflow_ops::Error) -> Problem {
    let renames = [
        ("candidate_group", "candidateGroup"),
        ("candidate_user", "candidateUser"),
        ("assignee", "assignee"),
    ];
    match e {
        qflow_ops::Error::Invalid {
            field: "cursor", ..
        } => search::unknown_cursor(),
        qflow_ops::Error::Invalid { field, why } => match renames.iter().find(|(f, _)| *f == field)
        {
            Some((_, theirs)) => super::invalid_at(&["filter", theirs], &why),
            None => Problem::from_ops(qflow_ops::Error::Invalid { field, why }, Place::Body),
        },
        e => Problem::from_ops(e, Place::Body),
    }
}

/// Camunda 8's `UserTaskAssignmentRequest`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserTaskAssignmentBody {
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub assignee: String,
    /// Whether a task somebody else holds is taken over (Camunda's default: true);
    /// false refuses it (409).
    #[serde(default)]
    pub allow_override: Option<bool>,
    /// A name for the action, which Camunda records; qflow's audit log records
    /// `claim_user_task`, and the name is not kept.
    #[serde(default)]
    pub action: Option<String>,
}

/// Assigns a waiting user task (Camunda 8 `POST /v2/user-tasks/{userTaskKey}/assignment`).
#[utoipa::path(post, path = "/v2/user-tasks/{userTaskKey}/assignment", tag = "zeebe jobs",
    params(("userTaskKey" = String, Path, pattern = "^-?[0-9]{1,18}$", description = "The task's key")),
    request_body = UserTaskAssignmentBody,
    responses(
        (status = 204, description = "Assigned"),
        (status = 404, description = "No such task waiting", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Held by somebody else and `allowOverride` is false", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn assign(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    Path(key): Path<String>,
    crate::body::JsonBody(body): crate::body::JsonBody<UserTaskAssignmentBody>,
) -> Result<StatusCode> {
    let name = waiting_task_of(&state, &key).await?;
    state
        .ops
        .as_actor(&caller.name)
        .claim_user_task(
            name.instance,
            &name.node,
            &body.assignee,
            body.allow_override.unwrap_or(true),
        )
        .await
        .map_err(|e| super::ops_problem(e, &[("assignee", "assignee")]))?;
    Ok(StatusCode::NO_CONTENT)
}

/// Unassigns a waiting user task (Camunda 8 `DELETE /v2/user-tasks/{userTaskKey}/assignee`).
#[utoipa::path(delete, path = "/v2/user-tasks/{userTaskKey}/assignee", tag = "zeebe jobs",
    params(("userTaskKey" = String, Path, pattern = "^-?[0-9]{1,18}$", description = "The task's key")),
    responses(
        (status = 204, description = "Nobody holds the task"),
        (status = 404, description = "No such task waiting", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn unassign(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    Path(key): Path<String>,
) -> Result<StatusCode> {
    let name = waiting_task_of(&state, &key).await?;
    state
        .ops
        .as_actor(&caller.name)
        .unclaim_user_task(name.instance, &name.node, None)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Path))?;
    Ok(StatusCode::NO_CONTENT)
}

/// Camunda 8's `UserTaskCompletionRequest`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserTaskCompletionBody {
    /// Merged into the instance's variables (through the task's output mappings).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub variables: Option<serde_json::Map<String, Value>>,
    /// A name for the action, which Camunda records; not kept.
    #[serde(default)]
    pub action: Option<String>,
}

/// Completes a waiting user task (Camunda 8 `POST /v2/user-tasks/{userTaskKey}/completion`),
/// whoever holds it, as Camunda's API does.
#[utoipa::path(post, path = "/v2/user-tasks/{userTaskKey}/completion", tag = "zeebe jobs",
    params(("userTaskKey" = String, Path, pattern = "^-?[0-9]{1,18}$", description = "The task's key")),
    request_body(content = Option<UserTaskCompletionBody>),
    responses(
        (status = 204, description = "Completed: the instance goes on"),
        (status = 404, description = "No such task waiting", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn complete(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    Path(key): Path<String>,
    crate::body::OptionalJsonBody(body): crate::body::OptionalJsonBody<UserTaskCompletionBody>,
) -> Result<StatusCode> {
    let name = waiting_task_of(&state, &key).await?;
    let variables = body
        .and_then(|b| b.variables)
        .unwrap_or_default()
        .into_iter()
        .collect();
    state
        .ops
        .as_actor(&caller.name)
        .complete_user_task(name.instance, &name.node, variables, None)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Path))?;
    Ok(StatusCode::NO_CONTENT)
}
