//! The task list (issue 11, item 5): user tasks found by assignee, candidate group,
//! candidate user or deployment, claimed, given back and completed — what a task-list
//! front end needs (`docs/workers.md`, "User tasks").
//!
//! The list is read from the store's `user_tasks` rows, a hint written by the steps that
//! offer and withdraw the tasks; every change is an `Input` stepped under the claim
//! (`UserTaskClaimed`, `UserTaskUnclaimed`, `UserTaskCompleted`), so the core decides
//! against the instance's durable state whether the task still waits and who holds it.
//! A claim of a task somebody else holds is refused unless forced; a completion naming
//! its assignee is refused while somebody else holds the task. Every change is audited.
//!
//! qflow has no identity service: it does not know which groups a person is in, or
//! whether the person a front end names is allowed to act. The front end authenticates
//! its users and says whom it acts for; the token's scope is what the server checks.

use qflow_core::{Input, Snapshot, Variables, ASSIGNMENT_NAME_CHARS_MAX};
use qflow_loader::model::{NodeKind, TaskKind};
use qflow_store::{
    DeploymentId, InstanceId, UserTaskQuery, UserTaskRecord, CANDIDATE_GROUPS_QUERY_MAX,
    USER_TASKS_LIMIT_MAX,
};
use serde::Serialize;

use crate::{check_text, check_variables, Applied, Error, Ops, Page, Result};

/// Which user tasks to list. Every filter given must hold; `candidate_groups` holds
/// when the task is offered to any of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserTaskListQuery {
    /// Only tasks this person holds.
    pub assignee: Option<String>,
    /// Only tasks offered to any of these groups (at most 32).
    pub candidate_groups: Vec<String>,
    /// Only tasks offered to this person by name.
    pub candidate_user: Option<String>,
    pub deployment: Option<i64>,
    /// `Some(false)`: only tasks nobody holds (a group's inbox); `Some(true)`: only held.
    pub assigned: Option<bool>,
    /// The `next` of the previous page.
    pub cursor: Option<String>,
    /// At most this many (1..=1,000).
    pub limit: u32,
}

/// A user task waiting in the task list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct UserTaskView {
    pub instance: String,
    /// The user task's id in the model.
    pub node: String,
    /// The user task's name in the model, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub process_id: String,
    pub deployment: i64,
    /// Who holds the task; absent when nobody does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assignee: Option<String>,
    pub candidate_groups: Vec<String>,
    pub candidate_users: Vec<String>,
    /// When the task was offered (the token entered it, or a resume or migration
    /// offered it again), ms since the epoch.
    pub created_at_ms: i64,
}

/// One user task with the variables a front end shows for it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct UserTaskDetail {
    #[serde(flatten)]
    pub task: UserTaskView,
    /// The task's input mappings over the instance variables, or every instance
    /// variable when it has none.
    #[schema(value_type = Object)]
    pub variables: Variables,
}

/// What a backfill of the task list did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Backfilled {
    /// Running instances looked at.
    pub examined: u64,
    /// Instances whose waiting user tasks were offered again (rows were missing).
    pub offered: Vec<String>,
    /// Instances that moved on between the look and the step (nothing to do any more).
    pub skipped: u64,
}

/// Running instances a backfill reads per page.
const BACKFILL_PAGE: u32 = 1_000;

/// A listing cursor: the position of a page's last row,
/// `<created_at_ms>.<instance>.<node>`. Opaque to callers; node ids may hold dots, ids
/// cannot, so it splits from the left.
fn encode_cursor(row: &UserTaskRecord) -> String {
    format!("{}.{}.{}", row.created_at_ms, row.instance, row.node)
}

fn decode_cursor(cursor: &str) -> Result<(i64, InstanceId, String)> {
    let bad = || Error::Invalid {
        field: "cursor",
        why: format!("`{cursor}` is not a cursor this listing returned"),
    };
    let mut parts = cursor.splitn(3, '.');
    let (Some(at), Some(id), Some(node)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    let at = at.parse::<i64>().map_err(|_| bad())?;
    let id = InstanceId::parse_str(id).map_err(|_| bad())?;
    if node.is_empty() {
        return Err(bad());
    }
    Ok((at, id, node.to_owned()))
}

fn check_name(field: &'static str, name: &str) -> Result<()> {
    check_text(field, name, ASSIGNMENT_NAME_CHARS_MAX)
}

/// Which kind of wait an operation needs at the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// A user task (claims).
    UserTask,
    /// A user task or a receive task without a message (completions).
    Completable,
}

impl Ops {
    /// The task list: user tasks matching `query`, oldest offer first, one page.
    pub async fn user_tasks(&self, query: &UserTaskListQuery) -> Result<Page<UserTaskView>> {
        if let Some(a) = &query.assignee {
            check_name("assignee", a)?;
        }
        if let Some(u) = &query.candidate_user {
            check_name("candidate_user", u)?;
        }
        if query.candidate_groups.len() > CANDIDATE_GROUPS_QUERY_MAX {
            return Err(Error::Invalid {
                field: "candidate_group",
                why: format!(
                    "{} groups named; a query names at most {CANDIDATE_GROUPS_QUERY_MAX}",
                    query.candidate_groups.len()
                ),
            });
        }
        for g in &query.candidate_groups {
            check_name("candidate_group", g)?;
        }
        if query.limit == 0 || query.limit > USER_TASKS_LIMIT_MAX {
            return Err(Error::Invalid {
                field: "limit",
                why: format!("{} is outside 1..={USER_TASKS_LIMIT_MAX}", query.limit),
            });
        }
        let after = query.cursor.as_deref().map(decode_cursor).transpose()?;
        let q = UserTaskQuery {
            assignee: query.assignee.clone(),
            candidate_groups: query.candidate_groups.clone(),
            candidate_user: query.candidate_user.clone(),
            deployment: query.deployment.map(DeploymentId),
            assigned: query.assigned,
            after,
            limit: query.limit,
        };
        let rows = self.store().user_tasks(&q).await?;
        let next = (rows.len() == query.limit as usize)
            .then(|| rows.last().map(encode_cursor))
            .flatten();
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            items.push(self.task_view(row).await?);
        }
        Ok(Page { items, next })
    }

    /// The user tasks waiting in one instance, by node.
    pub async fn instance_user_tasks(&self, id: InstanceId) -> Result<Vec<UserTaskView>> {
        self.record(id).await?;
        let rows = self.store().instance_user_tasks(id).await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            out.push(self.task_view(row).await?);
        }
        Ok(out)
    }

    /// One waiting user task, with the variables its front end shows. `NotFound` when
    /// the instance has no user task waiting at `node`.
    pub async fn user_task(&self, id: InstanceId, node: &str) -> Result<UserTaskDetail> {
        let record = self.record(id).await?;
        let rows = self.store().instance_user_tasks(id).await?;
        let Some(row) = rows.into_iter().find(|r| r.node == node) else {
            return Err(no_task(id, node));
        };
        let task = self.task_view(&row).await?;
        let def = self
            .shared
            .stepper
            .definition(record.deployment)
            .await
            .map_err(Error::from)?;
        let snap = Snapshot::decode(&record.snapshot)
            .map_err(|e| Error::Store(format!("instance {id} has an undecodable snapshot: {e}")))?;
        let variables = qflow_core::user_task_inputs(&def, &snap, node).map_err(Error::Refused)?;
        Ok(UserTaskDetail { task, variables })
    }

    /// `assignee` claims the waiting user task `node`: refused while somebody else
    /// holds it, unless `force` (a supervisor taking it over). Claiming a task one
    /// already holds changes nothing but the fence.
    pub async fn claim_user_task(
        &self,
        id: InstanceId,
        node: &str,
        assignee: &str,
        force: bool,
    ) -> Result<Applied> {
        check_name("assignee", assignee)?;
        self.check_wait(id, node, Wait::UserTask).await?;
        let detail = format!("node={node} assignee={assignee} force={force}");
        let input = Input::UserTaskClaimed {
            node: node.to_owned(),
            assignee: assignee.to_owned(),
            force,
        };
        self.apply(id, input, "claim_user_task", detail).await
    }

    /// Gives the waiting user task `node` back: nobody holds it. With `assignee`,
    /// refused unless that person holds it; without, whoever holds it (an operator's).
    pub async fn unclaim_user_task(
        &self,
        id: InstanceId,
        node: &str,
        assignee: Option<&str>,
    ) -> Result<Applied> {
        if let Some(a) = assignee {
            check_name("assignee", a)?;
        }
        self.check_wait(id, node, Wait::UserTask).await?;
        let detail = match assignee {
            Some(a) => format!("node={node} assignee={a}"),
            None => format!("node={node}"),
        };
        let input = Input::UserTaskUnclaimed {
            node: node.to_owned(),
            assignee: assignee.map(str::to_owned),
        };
        self.apply(id, input, "unclaim_user_task", detail).await
    }

    /// Completes the user task `node` of an instance with `variables` (merged into the
    /// instance's, or through the task's output mappings). With `assignee` (the person
    /// completing it), refused while somebody else holds the task. Refused when the task
    /// is not waiting; `NotFound` when the instance has no such user task.
    pub async fn complete_user_task(
        &self,
        id: InstanceId,
        node: &str,
        variables: Variables,
        assignee: Option<&str>,
    ) -> Result<Applied> {
        check_variables(&variables)?;
        if let Some(a) = assignee {
            check_name("assignee", a)?;
        }
        self.check_wait(id, node, Wait::Completable).await?;
        let detail = match assignee {
            Some(a) => format!("node={node} assignee={a} variables={}", variables.len()),
            None => format!("node={node} variables={}", variables.len()),
        };
        let input = Input::UserTaskCompleted {
            node: node.to_owned(),
            variables,
            assignee: assignee.map(str::to_owned),
        };
        self.apply(id, input, "complete_user_task", detail).await
    }

    /// Ends a waiting user task with a BPMN error (Camunda 7's `handleBpmnError`):
    /// `variables` join the instance's, then the error routes to the task's error
    /// boundary, outwards, or fails the instance (`UNCAUGHT_BPMN_ERROR`). Audited.
    pub async fn bpmn_error_user_task(
        &self,
        id: InstanceId,
        node: &str,
        code: &str,
        message: &str,
        variables: Variables,
    ) -> Result<Applied> {
        check_variables(&variables)?;
        crate::check_text("code", code, crate::MESSAGE_NAME_CHARS_MAX)?;
        if message.chars().count() > crate::BPMN_MESSAGE_CHARS_MAX {
            return Err(Error::Invalid {
                field: "message",
                why: format!(
                    "is longer than {} characters",
                    crate::BPMN_MESSAGE_CHARS_MAX
                ),
            });
        }
        self.check_wait(id, node, Wait::UserTask).await?;
        let detail = format!("node={node} code={code} variables={}", variables.len());
        let input = Input::UserTaskBpmnError {
            node: node.to_owned(),
            code: code.to_owned(),
            message: message.to_owned(),
            variables,
        };
        self.apply(id, input, "bpmn_error_user_task", detail).await
    }

    /// Raises an escalation from a waiting user task (Camunda 7's `handleEscalation`):
    /// `variables` join the instance's, then the task's escalation boundary catches it
    /// (or the nearest enclosing sub-process's) — non-interrupting, the task keeps
    /// waiting. Refused, with nothing changed, when no boundary would catch the code.
    /// Audited.
    pub async fn escalate_user_task(
        &self,
        id: InstanceId,
        node: &str,
        code: &str,
        variables: Variables,
    ) -> Result<Applied> {
        check_variables(&variables)?;
        crate::check_text("code", code, crate::MESSAGE_NAME_CHARS_MAX)?;
        self.check_wait(id, node, Wait::UserTask).await?;
        let detail = format!("node={node} code={code} variables={}", variables.len());
        let input = Input::UserTaskEscalated {
            node: node.to_owned(),
            code: code.to_owned(),
            variables,
        };
        self.apply(id, input, "escalate_user_task", detail).await
    }

    /// Offers again every waiting user task that has no row in the task list — the
    /// repair after an upgrade, for instances that wait at a user task since before the
    /// task list existed (`Input::OfferUserTasks`, audited as `offer_user_tasks`). Reads
    /// every running instance, a page at a time: a one-off repair, not a hot path.
    pub async fn backfill_user_tasks(&self) -> Result<Backfilled> {
        let mut out = Backfilled::default();
        let mut after = None;
        loop {
            let filter = qflow_store::InstanceFilter {
                status: Some(qflow_store::InstanceStatus::Running),
                after,
                limit: BACKFILL_PAGE,
                ..qflow_store::InstanceFilter::default()
            };
            let page = self.store().instances(&filter).await?;
            for record in &page {
                out.examined += 1;
                let def = self
                    .shared
                    .stepper
                    .definition(record.deployment)
                    .await
                    .map_err(Error::from)?;
                let Ok(snap) = Snapshot::decode(&record.snapshot) else {
                    continue;
                };
                let waiting = qflow_core::offered_user_tasks(&def, &snap);
                if waiting.is_empty() {
                    continue;
                }
                let rows = self.store().instance_user_tasks(record.id).await?;
                if waiting.iter().all(|n| rows.iter().any(|r| &r.node == n)) {
                    continue;
                }
                let detail = format!("nodes={}", waiting.join(","));
                match self
                    .apply(record.id, Input::OfferUserTasks, "offer_user_tasks", detail)
                    .await
                {
                    Ok(_) => out.offered.push(record.id.to_string()),
                    Err(Error::Refused(_)) | Err(Error::Conflict(_)) => out.skipped += 1,
                    Err(e) => return Err(e),
                }
            }
            match page.last() {
                Some(last) if page.len() == BACKFILL_PAGE as usize => {
                    after = Some((last.created_at_ms, last.id));
                }
                _ => return Ok(out),
            }
        }
    }

    /// `NotFound` unless the instance exists and its definition has such a wait at
    /// `node`; whether the task is waiting now is the core's to judge.
    async fn check_wait(&self, id: InstanceId, node: &str, wait: Wait) -> Result<()> {
        let record = self.record(id).await?;
        let def = self
            .shared
            .stepper
            .definition(record.deployment)
            .await
            .map_err(Error::from)?;
        let p = &def.process;
        let fits = p.find(node).is_some_and(|i| match &p.node(i).kind {
            NodeKind::Task(t) => matches!(
                (&t.kind, wait),
                (TaskKind::User { .. }, _)
                    | (TaskKind::Receive { message: None }, Wait::Completable)
            ),
            _ => false,
        });
        if fits {
            Ok(())
        } else {
            Err(no_task(id, node))
        }
    }

    async fn task_view(&self, row: &UserTaskRecord) -> Result<UserTaskView> {
        let def = self
            .shared
            .stepper
            .definition(row.deployment)
            .await
            .map_err(Error::from)?;
        let name = def
            .process
            .find(&row.node)
            .and_then(|i| def.process.node(i).name.clone());
        Ok(UserTaskView {
            instance: row.instance.to_string(),
            node: row.node.clone(),
            name,
            process_id: def.id.clone(),
            deployment: row.deployment.0,
            assignee: row.assignee.clone(),
            candidate_groups: row.candidate_groups.clone(),
            candidate_users: row.candidate_users.clone(),
            created_at_ms: row.created_at_ms,
        })
    }
}

fn no_task(id: InstanceId, node: &str) -> Error {
    Error::NotFound {
        what: "user task",
        id: format!("`{node}` of instance {id}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_with_dots_in_node_ids() {
        let row = UserTaskRecord {
            instance: InstanceId::from_u128(7),
            node: "review.step.2".into(),
            deployment: DeploymentId(1),
            assignee: None,
            candidate_groups: Vec::new(),
            candidate_users: Vec::new(),
            created_at_ms: -5,
        };
        let c = encode_cursor(&row);
        assert_eq!(
            decode_cursor(&c).unwrap(),
            (-5, row.instance, "review.step.2".to_owned())
        );
        for bad in ["", "1", "1.x.n", "x.00000000-0000-0000-0000-000000000007.n"] {
            assert!(decode_cursor(bad).is_err(), "{bad}");
        }
        let no_node = format!("1.{}.", row.instance);
        assert!(decode_cursor(&no_node).is_err());
    }
}
