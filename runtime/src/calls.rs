//! Call activities in the shell (`docs/call-activities.md`): what the core asks for — a
//! child started, a child cancelled, a parent told how its child ended — travels as an
//! outbox row on the reserved channel [`CALL_CHANNEL`], written in the asking step's
//! transaction, so nothing is lost between a commit and its consequence. The dispatcher
//! takes these rows for itself and runs [`Runtime::deliver_call`]; a row is recorded
//! delivered only once what it asks for is durable, and a redelivery does nothing twice:
//!
//! - **start**: the child's id is derived from the row's key ([`child_instance_id`]), so
//!   a second start finds it there. The deployment is chosen when the child starts — the
//!   called process's newest live deployment, or its `n`-th for a version binding — and
//!   the child is pinned to it for life. When there is none (or it cannot start), the
//!   parent is told at once with `CALLED_PROCESS_NOT_FOUND`, a failed attempt of the call
//!   activity. After the start the parent is read again: a parent that stopped waiting
//!   for this call while the child was being started (its cancel row may have been
//!   delivered before the child existed) has the child cancelled at once;
//! - **cancel**: the child is cancelled; one already ended, or never started, is left;
//! - **ended**: the parent steps `Input::ChildEnded`; the core judges it stale when the
//!   parent no longer waits on that call. A child's reports reach the parent in the
//!   order it made them: its end is not delivered while an escalation it raised earlier
//!   is still pending (the row is tried again later along the delivery curve).

use qflow_core::{ChildOutcome, Input, ParentLink, Variables};
use qflow_store::{DeploymentId, InstanceId, NewOutboxRow};
use serde::{Deserialize, Serialize};

use crate::{Error, Runtime};

/// The outbox channel of call activities' starts, cancels and ends. The dispatcher's own,
/// like `qflow:signal`: no adapter ever receives one.
pub const CALL_CHANNEL: &str = "qflow:call";

/// What one `qflow:call` row asks for (its body, as JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum CallRow {
    /// Start the child of call `call` of the emitting instance's call activity `node`.
    Start {
        call: u32,
        process: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<u32>,
        #[serde(default)]
        variables: Variables,
    },
    /// Cancel the child started under the row's call id.
    Cancel,
    /// Tell the parent how the emitting instance (its child) ended.
    Ended {
        parent: ParentLink,
        outcome: ChildOutcome,
    },
}

/// The outbox row of a child's start: keyed `<key>/start`, the call id `key`.
pub fn start_row(
    node: String,
    key: String,
    call: u32,
    process: String,
    version: Option<u32>,
    variables: Variables,
) -> NewOutboxRow {
    let body = CallRow::Start {
        call,
        process,
        version,
        variables,
    };
    row(node, format!("{key}/start"), key, &body)
}

/// The outbox row of a child's cancel: keyed `<key>/cancel`, the call id the start's.
pub fn cancel_row(node: String, key: String) -> NewOutboxRow {
    row(node, format!("{key}/cancel"), key, &CallRow::Cancel)
}

/// The outbox row of a child's end: keyed `<key>/ended` (`key` a number of the child's
/// own sequence), written on the parent's call activity node.
pub fn ended_row(parent: ParentLink, key: String, outcome: ChildOutcome) -> NewOutboxRow {
    let node = parent.node.clone();
    row(
        node,
        format!("{key}/ended"),
        key,
        &CallRow::Ended { parent, outcome },
    )
}

fn row(node: String, key: String, call_id: String, body: &CallRow) -> NewOutboxRow {
    NewOutboxRow {
        key,
        node,
        channel: CALL_CHANNEL.to_owned(),
        attempt: qflow_core::Attempt::FIRST,
        call_id,
        // A tagged enum of strings, numbers and a JSON object: writing one cannot fail.
        body: serde_json::to_string(body).unwrap_or_else(|_| "{}".to_owned()),
    }
}

/// The id of the child a call starts, from the call's key (`<parent>/<call>`): the same
/// for every delivery of the start row, distinct across calls (the first 16 bytes of a
/// SHA-256, shaped as a version-8 UUID).
pub fn child_instance_id(key: &str) -> InstanceId {
    crate::signals::hashed_instance_id(&[b"qflow call".as_slice(), key.as_bytes()], &[])
}

impl Runtime {
    /// Carries out one `qflow:call` row emitted by `instance` at `node` under the call id
    /// `call_id` (the module documentation). `Err` leaves the row to be delivered again.
    pub async fn deliver_call(
        &self,
        instance: InstanceId,
        node: &str,
        call_id: &str,
        body: &str,
    ) -> Result<(), Error> {
        let row: CallRow = serde_json::from_str(body).map_err(|e| Error::Refused {
            what: "a call activity's outbox row".to_owned(),
            why: format!("its body does not read: {e}"),
        })?;
        match row {
            CallRow::Start {
                call,
                process,
                version,
                variables,
            } => {
                let parent = ParentLink {
                    instance: instance.to_string(),
                    node: node.to_owned(),
                    call,
                };
                self.start_child(call_id, &process, version, variables, parent)
                    .await
            }
            CallRow::Cancel => {
                let child = child_instance_id(call_id);
                match self.claim_and_step(child, Input::Cancel).await {
                    // Cancelled now, already ended, or never started.
                    Ok(_) | Err(Error::Refused { .. }) | Err(Error::UnknownInstance(_)) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            CallRow::Ended { parent, outcome } => {
                // A child's reports reach its parent in the order it made them: an
                // escalation it raised before it ended must not come after the end
                // (the call would be over, and the escalation lost).
                if !matches!(outcome, ChildOutcome::Escalated { .. }) {
                    if let Some(earlier) = self.earlier_report_pending(instance, call_id).await? {
                        return Err(Error::Refused {
                            what: "a called instance's end".to_owned(),
                            why: format!("its earlier report `{earlier}` is not delivered yet"),
                        });
                    }
                }
                let Ok(id) = parent.instance.parse::<InstanceId>() else {
                    return Err(Error::Refused {
                        what: "a called instance's end".to_owned(),
                        why: format!("parent `{}` is not an instance id", parent.instance),
                    });
                };
                let input = Input::ChildEnded {
                    node: parent.node,
                    call: parent.call,
                    outcome,
                };
                match self.claim_and_step(id, input).await {
                    // Taken, or stale: the parent no longer waits on that call, or is gone.
                    Ok(_) | Err(Error::Refused { .. }) | Err(Error::UnknownInstance(_)) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// A pending report (an escalation) the child `child` made before the report
    /// `call_id` (`<child>/<n>`: numbers of the child's sequence), if one is.
    async fn earlier_report_pending(
        &self,
        child: InstanceId,
        call_id: &str,
    ) -> Result<Option<String>, Error> {
        let number = |id: &str| id.rsplit('/').next().and_then(|n| n.parse::<u64>().ok());
        let Some(this) = number(call_id) else {
            return Ok(None);
        };
        let rows = self.store().outbox(child).await?;
        Ok(rows
            .into_iter()
            .find(|r| {
                r.channel == CALL_CHANNEL
                    && r.state == qflow_store::OutboxState::Pending
                    && r.key.ends_with("/ended")
                    && number(&r.call_id).is_some_and(|n| n < this)
            })
            .map(|r| r.key))
    }

    async fn start_child(
        &self,
        key: &str,
        process: &str,
        version: Option<u32>,
        variables: Variables,
        parent: ParentLink,
    ) -> Result<(), Error> {
        let parent_id: InstanceId = parent.instance.parse().map_err(|_| Error::Refused {
            what: "a call activity's start".to_owned(),
            why: format!("`{}` is not an instance id", parent.instance),
        })?;
        let child = child_instance_id(key);
        let found = match self.called_deployment(process, version).await? {
            Ok(deployment) => self
                .start_called(child, deployment, variables, parent.clone())
                .await
                .map_err(|why| {
                    format!("process `{process}` cannot start a called instance: {why}")
                }),
            Err(why) => Err(why),
        };
        if let Err(message) = found {
            let input = Input::ChildEnded {
                node: parent.node,
                call: parent.call,
                outcome: ChildOutcome::NotStarted { message },
            };
            return match self.claim_and_step(parent_id, input).await {
                Ok(_) | Err(Error::Refused { .. }) | Err(Error::UnknownInstance(_)) => Ok(()),
                Err(e) => Err(e),
            };
        }
        // The parent may have stopped waiting while the child was being started: its
        // cancel row cannot have found a child that did not exist yet.
        if !self.waits_for(parent_id, &parent.node, parent.call).await? {
            match self.claim_and_step(child, Input::Cancel).await {
                Ok(_) | Err(Error::Refused { .. }) | Err(Error::UnknownInstance(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Starts the called instance `id`; `Ok` also when it exists already (a redelivered
    /// start). `Err` says why the deployment cannot start one.
    async fn start_called(
        &self,
        id: InstanceId,
        deployment: DeploymentId,
        variables: Variables,
        parent: ParentLink,
    ) -> Result<Result<(), String>, Error> {
        match self
            .start_child_instance(id, deployment, variables, parent)
            .await
        {
            Ok(()) | Err(Error::Conflict(_)) => Ok(Ok(())),
            Err(Error::Refused { why, .. }) => Ok(Err(why)),
            Err(Error::Core(e)) => Ok(Err(e.to_string())),
            Err(e) => Err(e),
        }
    }

    /// Whether the parent `id` still waits at `node` for the child of `call`.
    async fn waits_for(&self, id: InstanceId, node: &str, call: u32) -> Result<bool, Error> {
        let Some(record) = self.store().instance(id).await? else {
            return Ok(false);
        };
        let def = self.shared.defs.get(record.deployment).await?;
        let snap = qflow_core::Snapshot::decode(&record.snapshot)?;
        Ok(qflow_core::child_waits(&def, &snap, node, call))
    }

    /// The deployment a call of `process` starts its child on: the newest live one, or
    /// the `version`-th (counting the process's deployments from 1, retired ones too, in
    /// the order they were deployed) when it is live. `Ok(Err)` says why there is none.
    async fn called_deployment(
        &self,
        process: &str,
        version: Option<u32>,
    ) -> Result<Result<DeploymentId, String>, Error> {
        // Oldest first.
        let of_process: Vec<_> = self
            .store()
            .deployments()
            .await?
            .into_iter()
            .filter(|d| d.process_id == process)
            .collect();
        Ok(match version {
            None => of_process
                .iter()
                .rev()
                .find(|d| !d.retired)
                .map(|d| d.id)
                .ok_or_else(|| format!("no live deployment of process `{process}`")),
            Some(n) => match of_process.get((n as usize).wrapping_sub(1)) {
                Some(d) if !d.retired => Ok(d.id),
                Some(d) => Err(format!(
                    "version {n} of process `{process}` (deployment {}) is retired",
                    d.id.0
                )),
                None => Err(format!(
                    "process `{process}` has {} deployment(s), no version {n}",
                    of_process.len()
                )),
            },
        })
    }
}
