//! Signals (BPMN §10.5.4): a broadcast every wait for the signal catches, and every live
//! deployment with a signal start event starts an instance on; and messages an instance
//! publishes inside the engine (a message throw, end event or send task), which reach one
//! waiting instance or start one.
//!
//! A signal thrown inside an instance (an intermediate throw or an end event) is an
//! outbox row written in the throwing step's transaction ([`signal_row`], channel
//! [`SIGNAL_CHANNEL`]), so a throw is never lost between the commit and the broadcast:
//! the outbox's dispatcher claims the row and runs [`Runtime::broadcast_signal`], and
//! records the row delivered only once the broadcast is done. A broadcast through the API
//! runs the same function.
//!
//! What one broadcast does, in order:
//!
//! 1. every open signal subscription of the name (the empty key, see
//!    `qflow_core::subscriptions`) is walked page by page past a cursor
//!    ([`qflow_store::Store::subscriptions_after`]), and the wait at each row is stepped with
//!    `Input::SignalReceived` naming its node, each wait once. The waits are read in
//!    full before the first step, so a signal reaches the waits open when the broadcast
//!    begins, never one that opens later (a loop back to the catch, the next catch of
//!    the same signal). A wait that ended before its step (its instance moved on) is
//!    stale and skipped; one whose instance kept changing under the step is reported
//!    (`missed`) and the others still get the signal;
//! 2. for every process with a live deployment, the newest live deployment of it with a
//!    signal start event of the name starts an instance there, under an id derived from
//!    the broadcast's key and the deployment: a redelivered broadcast (the dispatcher
//!    died before it recorded the row) finds the instance there and starts nothing new.
//!
//! A redelivered broadcast steps the waits still open again: a catch event or an
//! interrupting boundary that took the first one no longer waits, so it is caught once;
//! a non-interrupting boundary still open catches the redelivery too (at least once,
//! documented in `docs/signals.md`).

use std::collections::BTreeMap;

use qflow_core::{Input, Variables};
use qflow_store::{DeploymentId, InstanceId, NewOutboxRow};
use sha2::{Digest, Sha256};

use crate::{Error, Runtime};

/// The outbox channel of signal throws. The dispatcher takes rows of this channel for
/// itself and broadcasts them; no adapter ever receives one (a configuration file may not
/// name a channel `qflow:…`).
pub const SIGNAL_CHANNEL: &str = "qflow:signal";

/// The outbox channel of message throws (intermediate, end, send task) published inside
/// the engine; like [`SIGNAL_CHANNEL`], the dispatcher's own.
pub const MESSAGE_CHANNEL: &str = "qflow:message";

/// The longest signal name a broadcast takes, in characters (subscription rows keep it
/// as their message name).
pub const SIGNAL_NAME_CHARS_MAX: usize = 128;

/// Subscriptions read per page of a broadcast's walk.
const PAGE: u32 = 256;

/// The outbox row of a signal thrown at `node`: keyed `<key>/1`, the call id `key` (the
/// throw's own number in the instance's sequence), its body the signal's name.
pub fn signal_row(node: String, name: &str, key: String) -> NewOutboxRow {
    NewOutboxRow {
        key: format!("{key}/1"),
        node,
        channel: SIGNAL_CHANNEL.to_owned(),
        attempt: qflow_core::Attempt::FIRST,
        call_id: key,
        body: serde_json::json!({ "signal": name }).to_string(),
    }
}

/// The outbox row of a message published at `node`: keyed `<key>/1`, its body the
/// message's name, correlation key (when it declares one) and variables.
pub fn message_row(
    node: String,
    name: &str,
    correlation_key: Option<String>,
    key: String,
    variables: &Variables,
) -> NewOutboxRow {
    NewOutboxRow {
        key: format!("{key}/1"),
        node,
        channel: MESSAGE_CHANNEL.to_owned(),
        attempt: qflow_core::Attempt::FIRST,
        call_id: key,
        body: serde_json::json!({
            "message": name,
            "correlation_key": correlation_key,
            "variables": variables,
        })
        .to_string(),
    }
}

/// A message row's name, correlation key and variables.
pub fn message_of(body: &str) -> Option<(String, Option<String>, Variables)> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    let name = value.get("message")?.as_str()?.to_owned();
    let key = value
        .get("correlation_key")
        .and_then(|k| k.as_str())
        .map(str::to_owned);
    let variables = match value.get("variables") {
        Some(serde_json::Value::Object(m)) => m.clone().into_iter().collect(),
        _ => Variables::new(),
    };
    Some((name, key, variables))
}

/// What publishing a message inside the engine did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// The wait at this instance and node took it.
    Caught(InstanceId, String),
    /// A message start event started (or, on a redelivery, had started) this instance.
    Started(DeploymentId, InstanceId),
    /// Nothing waited for it and no process starts on it: it is dropped (a message
    /// thrown inside the engine has no time to live).
    Dropped,
}

/// The signal name a signal row's body carries.
pub fn signal_of(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    value.get("signal")?.as_str().map(str::to_owned)
}

/// What one broadcast did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Broadcast {
    /// The waits that caught it: instance and node, in the walk's order.
    pub caught: Vec<(InstanceId, String)>,
    /// The instances a signal start event started (or had started, on a redelivery).
    pub started: Vec<(DeploymentId, InstanceId)>,
    /// Subscription rows whose wait had ended by the time the step came.
    pub stale: u32,
    /// Waits the signal did not reach because their instance kept changing under the
    /// step (a conflict past the retries); logged.
    pub missed: Vec<(InstanceId, String)>,
}

impl Runtime {
    /// Broadcasts the signal `name` with `variables` (written into each catching
    /// instance, and the start variables of each instance it starts). `origin` names the
    /// broadcast — the outbox key of a throw, or an id the API caller chose — and makes
    /// its starts idempotent. Returns once every step is durable; on a store error the
    /// steps so far are committed and the rest are not tried (the caller repeats the
    /// broadcast, which reaches the waits still open).
    pub async fn broadcast_signal(
        &self,
        name: &str,
        variables: &Variables,
        origin: &str,
    ) -> Result<Broadcast, Error> {
        let store = self.store().clone();
        let mut done = Broadcast::default();
        // First every wait open now, then the steps: a step that catches the signal and
        // waits for it again (a loop, or the next catch of the same signal) opens rows
        // the broadcast must not reach, and a walk that stepped as it read would meet
        // them on a later page. Only ids are kept, a page at a time from the store.
        let mut waits: Vec<(InstanceId, String)> = Vec::new();
        let mut page = store.subscriptions(name, "", PAGE).await?;
        while let Some(last) = page.last().cloned() {
            waits.extend(page.into_iter().map(|r| (r.instance, r.node)));
            page = store.subscriptions_after(name, "", &last, PAGE).await?;
        }
        for (instance, node) in waits {
            self.deliver_signal(name, variables, instance, node, &mut done)
                .await?;
        }
        for (deployment, start) in self.signal_starts(name).await? {
            let id = derived_instance_id("signal", name, origin, deployment);
            let started = self
                .start_triggered(Some(id), deployment, &start, variables.clone(), None)
                .await;
            match started {
                Ok(_) => done.started.push((deployment, id)),
                // Started by an earlier delivery of this same broadcast.
                Err(Error::Conflict(_)) => done.started.push((deployment, id)),
                // Retired since it was listed: it starts nothing any more.
                Err(Error::Refused { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    /// Publishes a message thrown by an instance (`origin`: its outbox key): with a
    /// correlation key, to the oldest wait subscribed under it — a wait that ends before
    /// the step is looked past — else, or when nothing waits, to a message start event
    /// (exactly one process must start on it), under an id derived from `origin` so that
    /// a redelivery starts nothing twice, the correlation key as business key.
    pub async fn publish_message(
        &self,
        name: &str,
        correlation_key: Option<&str>,
        variables: &Variables,
        origin: &str,
    ) -> Result<Published, Error> {
        if let Some(key) = correlation_key {
            for row in self.store().subscriptions(name, key, 16).await? {
                let input = Input::MessageReceived {
                    name: name.to_owned(),
                    correlation_key: Some(key.to_owned()),
                    node: Some(row.node.clone()),
                    variables: variables.clone(),
                };
                match self.claim_and_step(row.instance, input).await {
                    Ok(_) => return Ok(Published::Caught(row.instance, row.node)),
                    Err(Error::Refused { .. }) | Err(Error::UnknownInstance(_)) => continue,
                    Err(e) => return Err(e),
                }
            }
        }
        let starts = self.message_starts(name).await?;
        let [(deployment, start)] = starts.as_slice() else {
            if starts.len() > 1 {
                tracing::warn!(message = %name, processes = starts.len(),
                    "a published message starts more than one process; none is started");
            }
            return Ok(Published::Dropped);
        };
        let id = derived_instance_id("message", name, origin, *deployment);
        let business_key = correlation_key.map(str::to_owned);
        match self
            .start_triggered(
                Some(id),
                *deployment,
                start,
                variables.clone(),
                business_key,
            )
            .await
        {
            Ok(_) | Err(Error::Conflict(_)) => Ok(Published::Started(*deployment, id)),
            Err(Error::DuplicateBusinessKey { existing }) => {
                Ok(Published::Started(*deployment, existing))
            }
            Err(Error::Refused { .. }) => Ok(Published::Dropped),
            Err(e) => Err(e),
        }
    }

    async fn deliver_signal(
        &self,
        name: &str,
        variables: &Variables,
        instance: InstanceId,
        node: String,
        done: &mut Broadcast,
    ) -> Result<(), Error> {
        let input = Input::SignalReceived {
            name: name.to_owned(),
            node: Some(node.clone()),
            variables: variables.clone(),
        };
        match self.claim_and_step(instance, input).await {
            Ok(_) => done.caught.push((instance, node)),
            // The wait ended before the step (a stale input writes nothing), or the
            // instance is gone with its row.
            Err(Error::Refused { .. }) | Err(Error::UnknownInstance(_)) => done.stale += 1,
            // The instance kept changing under the step: the others still get the
            // signal, and this one is reported, not retried (a repeated broadcast would
            // reach every non-interrupting wait again).
            Err(Error::Conflict(why)) => {
                tracing::warn!(%instance, %node, signal = %name, %why,
                    "a signal did not reach a wait: the instance kept changing");
                done.missed.push((instance, node));
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// The start events a signal `name` starts instances at: per process, on its newest
    /// live deployment, when that one has a signal start event of the name.
    async fn signal_starts(&self, name: &str) -> Result<Vec<(DeploymentId, String)>, Error> {
        self.triggered_starts(|p| p.signal_start(name)).await
    }

    /// The start events a message `name` correlated to no waiting instance starts one at:
    /// per process, on its newest live deployment, when that one has a message start
    /// event of the name.
    pub async fn message_starts(&self, name: &str) -> Result<Vec<(DeploymentId, String)>, Error> {
        self.triggered_starts(|p| p.message_start(name)).await
    }

    /// Per process, its newest live deployment's start event that `find` picks.
    async fn triggered_starts(
        &self,
        find: impl Fn(&qflow_loader::model::Process) -> Option<qflow_loader::model::NodeIdx>,
    ) -> Result<Vec<(DeploymentId, String)>, Error> {
        let mut newest: BTreeMap<String, DeploymentId> = BTreeMap::new();
        for d in self.store().deployments().await? {
            if !d.retired {
                // Oldest first: the last one of each process is its newest.
                newest.insert(d.process_id, d.id);
            }
        }
        let mut starts = Vec::new();
        for deployment in newest.into_values() {
            let def = self.shared.defs.get(deployment).await?;
            if let Some(idx) = find(&def.process) {
                starts.push((deployment, def.process.node(idx).id.clone()));
            }
        }
        Ok(starts)
    }
}

/// The id of the instance the trigger `kind` (`signal`, `message`) named `name` starts on
/// `deployment` for the publication `origin`: the same for every delivery of it, distinct
/// across publications, names and deployments (the first 16 bytes of a SHA-256, shaped
/// as a version-8 UUID).
pub fn derived_instance_id(
    kind: &str,
    name: &str,
    origin: &str,
    deployment: DeploymentId,
) -> InstanceId {
    let parts = [
        b"qflow start".as_slice(),
        kind.as_bytes(),
        name.as_bytes(),
        origin.as_bytes(),
    ];
    hashed_instance_id(&parts, &deployment.0.to_be_bytes())
}

/// An instance id made from `parts` (each hashed with its length first, so no two lists
/// of parts collide) and then `tail` as it is: the first 16 bytes of the SHA-256, shaped
/// as a version-8 UUID. The one recipe of every id the engine derives.
pub(crate) fn hashed_instance_id(parts: &[&[u8]], tail: &[u8]) -> InstanceId {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.update(tail);
    let digest = hash.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}
