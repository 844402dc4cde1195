//! The task list over HTTP (issue 11, item 5): `GET /v1/user-tasks` lists waiting user
//! tasks by assignee, candidate group, candidate user or deployment, a page at a time;
//! `GET /v1/instances/{id}/user-tasks/{node}` shows one with its variables; `POST …/claim`,
//! `…/unclaim` and `…/complete` change it. Reading needs the `read` scope, changing the
//! `operate` scope, as for the other instance routes. Each handler parses, calls one
//! operation of `qflow_ops::user_tasks` and renders; a refusal (somebody else holds the
//! task, it no longer waits) is 409 with the core's reason.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::Json;
use qflow_ops::{
    parse_instance_id, Applied, Page, UserTaskDetail, UserTaskListQuery, UserTaskView,
};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::auth::{Caller, OperateScope, ReadScope};
use crate::body::{query_params, JsonBody};
use crate::problem::{Place, Problem};
use crate::AppState;

type Result<T> = std::result::Result<T, Problem>;

/// A page of the task list when the request gives no `limit`.
const LIMIT_DEFAULT: u32 = 100;
/// The most one page holds.
const LIMIT_MAX: u32 = 1_000;

/// A candidate group's name as the task list takes it: the schema of one
/// `candidate_group` occurrence (1 to 128 characters, no control characters).
pub struct GroupName;

impl utoipa::PartialSchema for GroupName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
        ObjectBuilder::new()
            .schema_type(SchemaType::Type(Type::String))
            .min_length(Some(1))
            .max_length(Some(128))
            .pattern(Some("^[^\\u0000-\\u001f\\u007f-\\u009f]*$"))
            .into()
    }
}

impl ToSchema for GroupName {}

/// The repeatable parameter: each occurrence names one more group.
const GROUP_PARAM: &str = "candidate_group";

/// Which user tasks to list, but for the repeatable `candidate_group` (taken out of the
/// query before the rest is parsed). Every filter given must hold.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct UserTaskParams {
    /// Only tasks this person holds (1 to 128 characters).
    #[param(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub assignee: Option<String>,
    /// Only tasks offered to this person by name.
    #[param(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub candidate_user: Option<String>,
    /// Only tasks of instances on this deployment version.
    pub deployment: Option<i64>,
    /// `false`: only tasks nobody holds (a group's inbox); `true`: only held ones.
    pub assigned: Option<bool>,
    /// The `next` of the previous page.
    #[param(
        pattern = "^-?[0-9]{1,18}\\.[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\\..+$"
    )]
    pub cursor: Option<String>,
    /// Page size, at most 1,000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

fn instance_id(raw: &str) -> Result<qflow_store::InstanceId> {
    parse_instance_id(raw).map_err(|e| Problem::from_ops(e, Place::Path))
}

/// The task list: waiting user tasks, oldest offer first, a page at a time.
#[utoipa::path(get, path = "/v1/user-tasks", tag = "user tasks",
    params(
        UserTaskParams,
        ("candidate_group" = inline(Option<Vec<GroupName>>), Query, style = Form, explode,
            description = "Only tasks offered to this group (1 to 128 characters); repeat the \
                           parameter for tasks offered to any of several (at most 32)"),
    ),
    responses(
        (status = 200, description = "One page", body = Page<UserTaskView>),
        (status = 400, description = "A parameter is malformed or out of range", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["read"])))]
pub async fn list(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Page<UserTaskView>>> {
    let raw = raw.unwrap_or_default();
    let (groups, rest): (Vec<_>, Vec<_>) = form_urlencoded::parse(raw.as_bytes())
        .into_owned()
        .partition(|(k, _)| k == GROUP_PARAM);
    let rest = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(rest)
        .finish();
    let p: UserTaskParams = query_params(&rest)?;
    let limit = match p.limit {
        None => LIMIT_DEFAULT,
        Some(n @ 1..=LIMIT_MAX) => n,
        Some(n) => {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "invalid",
                format!("limit {n} is outside 1..={LIMIT_MAX}"),
            )
            .at(Place::Query, "limit", format!("outside 1..={LIMIT_MAX}")))
        }
    };
    let query = UserTaskListQuery {
        assignee: p.assignee,
        candidate_groups: groups.into_iter().map(|(_, v)| v).collect(),
        candidate_user: p.candidate_user,
        deployment: p.deployment,
        assigned: p.assigned,
        cursor: p.cursor,
        limit,
    };
    state
        .ops
        .user_tasks(&query)
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Query))
}

/// One waiting user task, with the variables a front end shows for it (its input
/// mappings, or every instance variable).
#[utoipa::path(get, path = "/v1/instances/{id}/user-tasks/{node}", tag = "user tasks",
    params(
        ("id" = String, Path, format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "The instance id (a UUID)"),
        ("node" = String, Path, description = "The user task's id in the model"),
    ),
    responses(
        (status = 200, description = "The task", body = UserTaskDetail),
        (status = 404, description = "No such instance, or no user task waits at that node", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["read"])))]
pub async fn show(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    Path((id, node)): Path<(String, String)>,
) -> Result<Json<UserTaskDetail>> {
    let id = instance_id(&id)?;
    state
        .ops
        .user_task(id, &node)
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Path))
}

/// A claim of a user task.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimBody {
    /// Who claims it: the person the front end acts for.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub assignee: String,
    /// Take the task over even from somebody else who holds it (a supervisor's
    /// reassignment). Default `false`: such a claim is refused with 409.
    #[serde(default)]
    pub force: bool,
}

/// An unclaim of a user task.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UnclaimBody {
    /// Who gives it back: refused (409) unless this person holds it. Absent: whoever
    /// holds it (an operator's unclaim).
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub assignee: Option<String>,
}

/// The completion of a user task.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserTaskCompleteBody {
    /// Merged into the instance's variables (or through the task's output mappings).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: serde_json::Map<String, serde_json::Value>,
    /// Who completes it: refused (409) while somebody else holds the task. Absent: no
    /// check (a back-end completing on its own authority).
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub assignee: Option<String>,
}

/// Claims a waiting user task for a person; refused while somebody else holds it,
/// unless `force`.
#[utoipa::path(post, path = "/v1/instances/{id}/user-tasks/{node}/claim", tag = "user tasks",
    params(
        ("id" = String, Path, format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "The instance id (a UUID)"),
        ("node" = String, Path, description = "The user task's id in the model"),
    ),
    request_body = ClaimBody,
    responses(
        (status = 200, description = "Claimed", body = Applied),
        (status = 400, description = "The assignee is malformed", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such instance, or no such user task in its model", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Somebody else holds it, or it no longer waits", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn claim(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    Path((id, node)): Path<(String, String)>,
    JsonBody(body): JsonBody<ClaimBody>,
) -> Result<Json<Applied>> {
    let id = instance_id(&id)?;
    state
        .ops
        .as_actor(&caller.name)
        .claim_user_task(id, &node, &body.assignee, body.force)
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Body))
}

/// Gives a waiting user task back: nobody holds it any more.
#[utoipa::path(post, path = "/v1/instances/{id}/user-tasks/{node}/unclaim", tag = "user tasks",
    params(
        ("id" = String, Path, format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "The instance id (a UUID)"),
        ("node" = String, Path, description = "The user task's id in the model"),
    ),
    request_body = UnclaimBody,
    responses(
        (status = 200, description = "Given back", body = Applied),
        (status = 404, description = "No such instance, or no such user task in its model", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The named person does not hold it, or it no longer waits", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn unclaim(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    Path((id, node)): Path<(String, String)>,
    JsonBody(body): JsonBody<UnclaimBody>,
) -> Result<Json<Applied>> {
    let id = instance_id(&id)?;
    state
        .ops
        .as_actor(&caller.name)
        .unclaim_user_task(id, &node, body.assignee.as_deref())
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Body))
}

/// A BPMN error raised from a waiting user task.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserTaskBpmnErrorBody {
    /// The error code an error boundary matches (`errorCode` of an `<error>`).
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub code: String,
    /// For people: kept with the failure when nothing catches the error.
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub message: String,
    /// Merged into the instance's variables before the error routes.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: serde_json::Map<String, serde_json::Value>,
}

/// An escalation raised from a waiting user task.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserTaskEscalationBody {
    /// The escalation code a boundary matches (`escalationCode` of an `<escalation>`).
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub code: String,
    /// Merged into the instance's variables before the boundary's path runs.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub variables: serde_json::Map<String, serde_json::Value>,
}

/// Ends a waiting user task with a BPMN error (Camunda 7's `handleBpmnError`): it routes
/// to the task's error boundary, outwards, or fails the instance with
/// `UNCAUGHT_BPMN_ERROR`.
#[utoipa::path(post, path = "/v1/instances/{id}/user-tasks/{node}/bpmn-error", tag = "user tasks",
    params(
        ("id" = String, Path, format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "The instance id (a UUID)"),
        ("node" = String, Path, description = "The user task's id in the model"),
    ),
    request_body = UserTaskBpmnErrorBody,
    responses(
        (status = 200, description = "The error was thrown", body = Applied),
        (status = 404, description = "No such instance, or no such user task in its model", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "That user task is not waiting", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn bpmn_error(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    Path((id, node)): Path<(String, String)>,
    JsonBody(body): JsonBody<UserTaskBpmnErrorBody>,
) -> Result<Json<Applied>> {
    let id = instance_id(&id)?;
    state
        .ops
        .as_actor(&caller.name)
        .bpmn_error_user_task(
            id,
            &node,
            &body.code,
            &body.message,
            body.variables.into_iter().collect(),
        )
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Body))
}

/// Raises an escalation from a waiting user task (Camunda 7's `handleEscalation`): the
/// task's escalation boundary catches it, or the nearest enclosing sub-process's; a
/// non-interrupting one leaves the task waiting. `409` when no boundary catches the
/// code, and nothing changed.
#[utoipa::path(post, path = "/v1/instances/{id}/user-tasks/{node}/escalation", tag = "user tasks",
    params(
        ("id" = String, Path, format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "The instance id (a UUID)"),
        ("node" = String, Path, description = "The user task's id in the model"),
    ),
    request_body = UserTaskEscalationBody,
    responses(
        (status = 200, description = "The escalation was caught", body = Applied),
        (status = 404, description = "No such instance, or no such user task in its model", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "That user task is not waiting, or nothing catches the escalation", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn escalation(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    Path((id, node)): Path<(String, String)>,
    JsonBody(body): JsonBody<UserTaskEscalationBody>,
) -> Result<Json<Applied>> {
    let id = instance_id(&id)?;
    state
        .ops
        .as_actor(&caller.name)
        .escalate_user_task(id, &node, &body.code, body.variables.into_iter().collect())
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Body))
}

/// Completes a waiting user task with variables (also a receive task without a
/// message, the same kind of wait); with `assignee`, refused while somebody else holds
/// it.
#[utoipa::path(post, path = "/v1/instances/{id}/user-tasks/{node}/complete", tag = "user tasks",
    params(
        ("id" = String, Path, format = Uuid, pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", description = "The instance id (a UUID)"),
        ("node" = String, Path, description = "The user task's id in the model"),
    ),
    request_body = UserTaskCompleteBody,
    responses(
        (status = 200, description = "Completed", body = Applied),
        (status = 404, description = "No such instance, or no such user task in its model", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "That user task is not waiting, or somebody else holds it", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["operate"])))]
pub async fn complete(
    State(state): State<AppState>,
    caller: Caller<OperateScope>,
    Path((id, node)): Path<(String, String)>,
    JsonBody(body): JsonBody<UserTaskCompleteBody>,
) -> Result<Json<Applied>> {
    let id = instance_id(&id)?;
    state
        .ops
        .as_actor(&caller.name)
        .complete_user_task(
            id,
            &node,
            body.variables.into_iter().collect(),
            body.assignee.as_deref(),
        )
        .await
        .map(Json)
        .map_err(|e| Problem::from_ops(e, Place::Body))
}
