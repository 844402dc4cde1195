//! External workers' operations on pull tasks (SPEC P1): fetch-and-lock, complete,
//! fail, BPMN error, extend lock, unlock — for the native HTTP API and the Camunda 7
//! compatibility layer alike, which differ only in their shapes.
//!
//! Every answer is an `Input` stepped under the instance's claim through the runtime, so
//! the core decides against durable state whether the worker still holds the lock; one
//! that does not is refused with the core's reason (the lock expired, another worker
//! holds it, the attempt is over) and changes nothing. Worker actions are recorded in the
//! attempt history (the worker id on each row), not in the operator audit log.
//!
//! A task is named by its id `<instance>:<attempt>:<node>`: the attempt is part of it,
//! so an id handed to a worker names one attempt and an answer to an attempt that is
//! over can never land on a later one. BPMN ids cannot contain `:`, so the id splits
//! unambiguously.

use qflow_core::{Attempt, Input, Variables};
use qflow_runtime::pull::{FETCH_TASKS_MAX, FETCH_TOPICS_MAX, FETCH_WAIT_MS_MAX, LOCK_MS_MAX};
use qflow_runtime::{Fetch, LockedTask};
use qflow_store::InstanceId;
use serde::Serialize;

use crate::{check_text, check_variables, no_runtime, Error, Ops, Result};

/// The longest worker id, topic name, error code or message accepted, in characters.
pub const WORKER_ID_CHARS_MAX: usize = 128;
pub const TOPIC_CHARS_MAX: usize = 256;
pub const ERROR_CODE_CHARS_MAX: usize = 256;
pub const MESSAGE_CHARS_MAX: usize = 4_096;

/// A pull task's id: one attempt of one task of one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskId {
    pub instance: InstanceId,
    pub attempt: Attempt,
    pub node: String,
}

impl TaskId {
    /// Parses `<instance>:<attempt>:<node>`. An id that does not parse names no task:
    /// the caller answers "not found", as for an id that parses but names nothing.
    pub fn parse(s: &str) -> Result<TaskId> {
        let unknown = || Error::NotFound {
            what: "external task",
            id: s.to_owned(),
        };
        let mut parts = s.splitn(3, ':');
        let (Some(instance), Some(attempt), Some(node)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err(unknown());
        };
        let instance = InstanceId::parse_str(instance).map_err(|_| unknown())?;
        let attempt = attempt
            .parse::<u32>()
            .ok()
            .and_then(Attempt::new)
            .ok_or_else(unknown)?;
        if node.is_empty() {
            return Err(unknown());
        }
        Ok(TaskId {
            instance,
            attempt,
            node: node.to_owned(),
        })
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.instance, self.attempt, self.node)
    }
}

/// One topic of a fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchTopic {
    pub name: String,
    /// How long each lock on this topic lasts, ms.
    pub lock_ms: i64,
    /// Only these variables are handed out; `None`: all of the task's inputs.
    pub variables: Option<Vec<String>>,
}

/// A worker's fetch-and-lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub worker: String,
    pub max_tasks: i64,
    pub topics: Vec<FetchTopic>,
    /// Long polling: wait up to this long (ms) for work when none is offered now.
    pub wait_ms: i64,
}

/// A task a fetch locked, as workers see it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct LockedTaskView {
    /// `<instance>:<attempt>:<node>`: what the worker answers with.
    pub id: String,
    pub instance: String,
    pub node: String,
    pub topic: String,
    pub attempt: u32,
    pub worker: String,
    pub lock_expires_at_ms: i64,
    /// The attempts the task has left, counting this one.
    pub retries: u32,
    pub process_id: String,
    /// The deployment the instance runs on.
    pub deployment: i64,
    #[schema(value_type = Object)]
    pub variables: Variables,
    /// The task's static headers: `zeebe:taskHeaders`, `camunda:properties`, and for a
    /// task bound to Java code its binding (`class`, `delegateExpression` or
    /// `expression`, and `resultVariable`; docs/vendor-mappings.md).
    pub headers: std::collections::BTreeMap<String, String>,
}

/// What an answer did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct PullApplied {
    pub id: String,
    /// The instance's status after the step.
    pub status: &'static str,
    /// For a lock extension: the new expiry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_expires_at_ms: Option<i64>,
}

fn invalid(field: &'static str, why: impl Into<String>) -> Error {
    Error::Invalid {
        field,
        why: why.into(),
    }
}

fn check_message(value: &str) -> Result<()> {
    if value.chars().count() > MESSAGE_CHARS_MAX {
        return Err(invalid(
            "error_message",
            format!("longer than {MESSAGE_CHARS_MAX} characters"),
        ));
    }
    Ok(())
}

fn check_lock_ms(field: &'static str, lock_ms: i64) -> Result<u64> {
    match u64::try_from(lock_ms) {
        Ok(ms) if (1..=LOCK_MS_MAX).contains(&ms) => Ok(ms),
        _ => Err(invalid(
            field,
            format!("{lock_ms} is not a lock duration in 1..={LOCK_MS_MAX} ms"),
        )),
    }
}

impl Ops {
    /// Locks up to `max_tasks` offered tasks of the topics for the worker, waiting up to
    /// `wait_ms` for one when none is offered (long polling). Needs a runtime.
    pub async fn fetch_and_lock(&self, request: FetchRequest) -> Result<Vec<LockedTaskView>> {
        let runtime = self.shared.runtime.as_ref().ok_or_else(no_runtime)?;
        check_text("worker_id", &request.worker, WORKER_ID_CHARS_MAX)?;
        let max_tasks = u32::try_from(request.max_tasks)
            .ok()
            .filter(|n| (1..=FETCH_TASKS_MAX).contains(n))
            .ok_or_else(|| {
                invalid(
                    "max_tasks",
                    format!("{} is not in 1..={FETCH_TASKS_MAX}", request.max_tasks),
                )
            })?;
        if request.topics.is_empty() || request.topics.len() > FETCH_TOPICS_MAX {
            return Err(invalid(
                "topics",
                format!("give 1..={FETCH_TOPICS_MAX} topics"),
            ));
        }
        let wait_ms = u64::try_from(request.wait_ms)
            .ok()
            .filter(|w| *w <= FETCH_WAIT_MS_MAX)
            .ok_or_else(|| {
                invalid(
                    "wait_ms",
                    format!("{} is not in 0..={FETCH_WAIT_MS_MAX} ms", request.wait_ms),
                )
            })?;
        let mut topics = Vec::with_capacity(request.topics.len());
        for t in &request.topics {
            check_text("topic", &t.name, TOPIC_CHARS_MAX)?;
            let lock_ms = check_lock_ms("lock_duration", t.lock_ms)?;
            // A topic named twice is fetched once, as its first entry says (its lock
            // duration and variables).
            if !topics.iter().any(|(n, _)| n == &t.name) {
                topics.push((t.name.clone(), lock_ms));
            }
        }
        let fetch = Fetch {
            worker: request.worker.clone(),
            topics,
            max_tasks,
            wait_ms,
        };
        let locked = runtime.fetch_and_lock(&fetch).await?;
        Ok(locked.into_iter().map(|t| view(t, &request)).collect())
    }

    /// The worker holding the lock completes the task with `variables`.
    pub async fn complete_pull(
        &self,
        id: &str,
        worker: &str,
        variables: Variables,
    ) -> Result<PullApplied> {
        check_text("worker_id", worker, WORKER_ID_CHARS_MAX)?;
        check_variables(&variables)?;
        let task = TaskId::parse(id)?;
        let input = Input::PullCompleted {
            node: task.node.clone(),
            attempt: task.attempt,
            worker: worker.to_owned(),
            variables,
        };
        self.answer(task, input).await
    }

    /// The worker holding the lock reports a failure: `retries` attempts are left (0 ends
    /// the instance FAILED with an incident), the next one offered after
    /// `retry_timeout_ms`. Negative figures are refused.
    pub async fn fail_pull(
        &self,
        id: &str,
        worker: &str,
        retries: i64,
        retry_timeout_ms: i64,
        message: &str,
    ) -> Result<PullApplied> {
        check_text("worker_id", worker, WORKER_ID_CHARS_MAX)?;
        check_message(message)?;
        let retries = u32::try_from(retries).map_err(|_| {
            invalid(
                "retries",
                format!("{retries} is not a count of retries (0 or more)"),
            )
        })?;
        let retry_timeout_ms = u64::try_from(retry_timeout_ms)
            .ok()
            .filter(|t| *t <= LOCK_MS_MAX * 30)
            .ok_or_else(|| {
                invalid(
                    "retry_timeout",
                    format!("{retry_timeout_ms} is not a wait in 0..=30 days (ms)"),
                )
            })?;
        let task = TaskId::parse(id)?;
        let input = Input::PullFailed {
            node: task.node.clone(),
            attempt: task.attempt,
            worker: worker.to_owned(),
            retries,
            retry_timeout_ms,
            message: message.to_owned(),
        };
        self.answer(task, input).await
    }

    /// The worker holding the lock answers with the BPMN error `code`: it routes to its
    /// boundary (with `variables` set first) and spends no budget.
    pub async fn bpmn_error_pull(
        &self,
        id: &str,
        worker: &str,
        code: &str,
        message: &str,
        variables: Variables,
    ) -> Result<PullApplied> {
        check_text("worker_id", worker, WORKER_ID_CHARS_MAX)?;
        check_text("error_code", code, ERROR_CODE_CHARS_MAX)?;
        check_message(message)?;
        check_variables(&variables)?;
        let task = TaskId::parse(id)?;
        let input = Input::PullBpmnError {
            node: task.node.clone(),
            attempt: task.attempt,
            worker: worker.to_owned(),
            code: code.to_owned(),
            message: message.to_owned(),
            variables,
        };
        self.answer(task, input).await
    }

    /// The worker holding the lock moves its expiry to `lock_ms` from now.
    pub async fn extend_lock(&self, id: &str, worker: &str, lock_ms: i64) -> Result<PullApplied> {
        check_text("worker_id", worker, WORKER_ID_CHARS_MAX)?;
        let lock_ms = check_lock_ms("new_duration", lock_ms)?;
        let task = TaskId::parse(id)?;
        let input = Input::PullLockExtended {
            node: task.node.clone(),
            attempt: task.attempt,
            worker: worker.to_owned(),
            lock_ms,
        };
        self.answer(task, input).await
    }

    /// Sets the attempts the task `id` has left, counting its attempt, to `retries`
    /// (Camunda 8's job retries update, which names no worker): on a running instance
    /// while the attempt is live, or on one FAILED at the task, whose resume with the
    /// budget kept then offers it with these attempts (docs/workers.md).
    pub async fn set_pull_retries(&self, id: &str, retries: i64) -> Result<PullApplied> {
        let retries = u32::try_from(retries)
            .ok()
            .filter(|r| *r >= 1)
            .ok_or_else(|| invalid("retries", format!("{retries} is not at least 1")))?;
        let task = TaskId::parse(id)?;
        let input = Input::PullRetriesSet {
            node: task.node.clone(),
            attempt: task.attempt,
            retries,
        };
        self.answer(task, input).await
    }

    /// Gives the lock up: the task is offered again, no budget spent. `worker: None` (an
    /// operator, or Camunda's unlock, which names no worker) unlocks whoever holds it.
    pub async fn unlock_pull(&self, id: &str, worker: Option<&str>) -> Result<PullApplied> {
        if let Some(w) = worker {
            check_text("worker_id", w, WORKER_ID_CHARS_MAX)?;
        }
        let task = TaskId::parse(id)?;
        let input = Input::PullUnlocked {
            node: task.node.clone(),
            attempt: task.attempt,
            worker: worker.map(str::to_owned),
        };
        self.answer(task, input).await
    }

    /// The worker holding the lock on the task `id` names, for APIs whose answers do
    /// not name their worker (Zeebe's job completion, failure and error: whoever has the
    /// job key answers). A task no worker holds gives a name no worker has, so the
    /// answer is refused with the core's reason (not locked, attempt over).
    pub async fn lock_holder(&self, id: &str) -> Result<String> {
        let task = TaskId::parse(id)?;
        let claim = self
            .shared
            .stepper
            .claim(task.instance)
            .await
            .map_err(|e| match e {
                qflow_runtime::Error::UnknownInstance(_) => Error::NotFound {
                    what: "external task",
                    id: id.to_owned(),
                },
                other => Error::from(other),
            })?;
        Ok(claim
            .snapshot
            .lock(&task.node)
            .map_or_else(|| "(no worker)".to_owned(), |(w, _)| w.to_owned()))
    }

    async fn answer(&self, task: TaskId, input: Input) -> Result<PullApplied> {
        let runtime = self.shared.runtime.as_ref().ok_or_else(no_runtime)?;
        // An instance that does not exist makes the task unknown, not the instance.
        let unknown = |e: qflow_runtime::Error| match e {
            qflow_runtime::Error::UnknownInstance(_) => Error::NotFound {
                what: "external task",
                id: task.to_string(),
            },
            other => Error::from(other),
        };
        // Through the instance's lane: answers of many workers share its group commit,
        // and the lane hands back the state its step left.
        let claim = runtime
            .send_and_read(task.instance, input)
            .await
            .map_err(unknown)?;
        let snap = &claim.snapshot;
        let status = qflow_runtime::claim::store_status(snap.status());
        Ok(PullApplied {
            id: task.to_string(),
            status: status.as_str(),
            lock_expires_at_ms: snap.lock(&task.node).map(|(_, until)| until),
        })
    }
}

/// A locked task as workers see it, its variables cut to the topic's selection.
fn view(t: LockedTask, request: &FetchRequest) -> LockedTaskView {
    let selection = request
        .topics
        .iter()
        .find(|s| s.name == t.topic)
        .and_then(|s| s.variables.as_ref());
    let variables = match selection {
        Some(names) => t
            .variables
            .into_iter()
            .filter(|(k, _)| names.contains(k))
            .collect(),
        None => t.variables,
    };
    let id = TaskId {
        instance: t.instance,
        attempt: t.attempt,
        node: t.node.clone(),
    };
    LockedTaskView {
        id: id.to_string(),
        instance: t.instance.to_string(),
        node: t.node,
        topic: t.topic,
        attempt: t.attempt.get(),
        worker: request.worker.clone(),
        lock_expires_at_ms: t.lock_until_ms,
        retries: t.retries,
        process_id: t.process_id,
        deployment: t.deployment.0,
        variables,
        headers: t.headers.into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_round_trip_and_garbage_names_no_task() {
        let id = TaskId {
            instance: InstanceId::from_u128(7),
            attempt: Attempt::new(3).unwrap(),
            node: "charge.card-1".into(),
        };
        assert_eq!(TaskId::parse(&id.to_string()).unwrap(), id);
        for bad in [
            "",
            "x",
            "not-a-uuid:1:n",
            "00000000-0000-0000-0000-000000000007:0:n",
            "00000000-0000-0000-0000-000000000007:1:",
            "00000000-0000-0000-0000-000000000007:-1:n",
        ] {
            assert!(
                matches!(TaskId::parse(bad), Err(Error::NotFound { .. })),
                "{bad}"
            );
        }
    }
}
