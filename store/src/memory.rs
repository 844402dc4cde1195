//! The in-memory [`Store`]: for tests and for stateless definitions only (SPEC R1, L7).
//!
//! It keeps the exact semantics of the durable stores — compare-and-swap on the fence,
//! timer upserts and incarnation-matched resolves, leases on claimed timers, retirement
//! rules, business keys unique per deployment, retention's purge, outbox rows with
//! their leases and delivery records — so the runtime and the store conformance suite
//! can run against it. It must never claim durability: [`Store::is_durable`] is
//! `false`, and everything is gone when the value is dropped.
//!
//! All state sits behind one `std::sync::Mutex` that is never held across an `.await`,
//! so a batch of commits is atomic with respect to every other call.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use crate::{
    effective_buffered_limit, effective_outbox_claim_limit, poisoned_message, AttemptRecord,
    AuditEntry, AuditRecord, BufferOutcome, BufferQuery, BufferedMessage, Commit, CommitOutcome,
    DeliveryRecord, DeploymentId, DeploymentRecord, IncidentRecord, IncidentWrites, InstanceFilter,
    InstanceId, InstanceRecord, InstanceStatus, JournalEntry, KeyKind, KeyName, NewBufferedMessage,
    NewDeployment, NewIncident, OutboxRecord, OutboxState, OutboxWrites, PullQuery, PullTaskRecord,
    PullWrites, PurgeOutcome, PurgeRequest, RetireOutcome, ScheduleAdvance, ScheduleRecord, Store,
    StoreError, StoreResult, SubscriptionRecord, SubscriptionWrites, TimerClaim, TimerKind,
    TimerName, TimerRecord, TimerWrites, UserTaskQuery, UserTaskRecord, UserTaskWrites,
    CAMUNDA_KEYS_MAX, CAMUNDA_KEY_FIRST, POISONED_INCIDENT_CODE, PULL_QUERY_LIMIT_MAX,
    SUBSCRIPTIONS_LIMIT_MAX,
};

/// The most rows [`Store::instances`] returns, whatever the filter asks for.
pub const INSTANCES_LIMIT_MAX: u32 = 10_000;

/// Non-durable store. Cheap to create; share it behind an `Arc`.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

#[derive(Debug, Clone)]
struct TimerRow {
    due_at_ms: i64,
    incarnation: u32,
    lease_owner: Option<String>,
    leased_until_ms: Option<i64>,
}

type TimerKey = (InstanceId, TimerName);

/// A timer start event's schedule with its claim lease. Schedules are few — one per
/// timer start event of a process's newest deployment — so a claim walks them all.
#[derive(Debug, Clone)]
struct ScheduleRow {
    due_at_ms: i64,
    remaining: Option<u32>,
    leased_until_ms: Option<i64>,
}

/// An outbox row with its claim lease, which the contract's record does not show.
#[derive(Debug, Clone)]
struct OutboxRow {
    record: OutboxRecord,
    lease_owner: Option<String>,
    lease_until_ms: Option<i64>,
}

/// One instance: its row, and its finished attempts packed as
/// [`crate::history::pack_into`] writes them (some 10 bytes a record, where a whole
/// `AttemptRecord` kept 136 and a node name of its own).
#[derive(Debug)]
struct Slot {
    record: InstanceRecord,
    attempts: u64,
    history: Vec<u8>,
}

#[derive(Debug, Default)]
struct State {
    /// Index = version - 1: versions are dense from 1 here.
    deployments: Vec<DeploymentRecord>,
    /// Each instance's row and its attempt history in one entry: a commit updates both
    /// through the one entry it finds (two searches a commit: the stored row's, then the
    /// entry's; they were three with a map of histories beside this one).
    instances: BTreeMap<InstanceId, Slot>,
    /// `(deployment, business key)` of every instance that has a key: the uniqueness
    /// index, as the durable stores' unique index.
    business_keys: BTreeMap<(DeploymentId, String), InstanceId>,
    timers: BTreeMap<TimerKey, TimerRow>,
    /// `(due_at_ms, instance, name)` for every row of `timers`: the due index, so a claim
    /// walks due timers only and never the parked ones.
    timers_by_due: BTreeSet<(i64, InstanceId, TimerName)>,
    /// `(ended_at_ms, instance)` of every ended instance: the retention index, so a purge
    /// walks ended instances oldest first and never the live ones.
    ended: BTreeSet<(i64, InstanceId)>,
    incidents: Vec<IncidentRecord>,
    /// Open subscriptions by `(instance, node)`.
    subscriptions: BTreeMap<(InstanceId, String), SubscriptionRecord>,
    /// `(message, key, opened_at_ms, instance, node)` of every subscription: the
    /// correlation index.
    subscriptions_by_key: BTreeSet<(String, String, i64, InstanceId, String)>,
    /// The input journal (SPEC G3), by instance, in `seq` order.
    journal: BTreeMap<InstanceId, Vec<JournalEntry>>,
    audit: Vec<AuditRecord>,
    /// Pull-task rows by `(instance, node)`, and the offered ones by
    /// `(topic, offered_at_ms, instance, node)`: the fetch index (unlocked rows only).
    pull: BTreeMap<(InstanceId, String), PullTaskRecord>,
    pull_offered: BTreeSet<(String, i64, InstanceId, String)>,
    /// Outbox rows by key; `(due_at_ms, key)` of the pending ones (the claim index, so a
    /// claim walks due rows only, never delivered or parked ones); `(instance, node,
    /// key)` of every row (withdrawal, listing and purge by instance).
    outbox: BTreeMap<String, OutboxRow>,
    outbox_due: BTreeSet<(i64, String)>,
    outbox_by_node: BTreeSet<(InstanceId, String, String)>,
    /// The task list: user-task rows by `(instance, node)`, and every row by
    /// `(created_at_ms, instance, node)`: the listing order.
    user_tasks: BTreeMap<(InstanceId, String), UserTaskRecord>,
    user_tasks_by_created: BTreeSet<(i64, InstanceId, String)>,
    /// Timer start schedules by `(deployment, node)`.
    schedules: BTreeMap<(DeploymentId, String), ScheduleRow>,
    /// Camunda 8 keys by name and names by key ([`Store::camunda_keys`]); the last key
    /// handed out (0: none yet), never reused.
    keys: BTreeMap<KeyName, i64>,
    key_names: BTreeMap<i64, KeyName>,
    last_key: i64,
    /// Buffered messages by id, with their `(name, correlation key, id)` and
    /// `(expires_at_ms, id)` indexes; the last id handed out.
    buffered: BTreeMap<i64, BufferedMessage>,
    buffered_by_key: BTreeSet<(String, String, i64)>,
    buffered_by_expiry: BTreeSet<(i64, i64)>,
    buffered_ids: i64,
    /// Row ids handed out so far; ids are never reused, even after a purge.
    incident_ids: i64,
    audit_ids: i64,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock can only come from a bug in this module; the
        // state is still structurally valid, so keep serving rather than poison callers.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Treats a limit of 0 (the `Default` filter) as "no limit given": the cap applies.
pub fn effective_instances_limit(limit: u32) -> u32 {
    if limit == 0 || limit > INSTANCES_LIMIT_MAX {
        INSTANCES_LIMIT_MAX
    } else {
        limit
    }
}

/// Treats a limit of 0 as "no limit given": the cap applies.
pub fn effective_subscriptions_limit(limit: u32) -> u32 {
    if limit == 0 || limit > SUBSCRIPTIONS_LIMIT_MAX {
        SUBSCRIPTIONS_LIMIT_MAX
    } else {
        limit
    }
}

/// The timer rows that place an instance at `node` for [`InstanceFilter::node`]: a retry
/// park, a `q:timeout` window, a timer catch.
pub fn node_timer_names(node: &str) -> [TimerName; 3] {
    [
        TimerName::new(TimerKind::Retry, node),
        TimerName::new(TimerKind::Timeout, node),
        TimerName::new(TimerKind::Catch, node),
    ]
}

impl State {
    /// [`InstanceFilter::node`]: an open incident on `node`, a timer of it, or an open
    /// subscription at it.
    fn stands_at(&self, instance: InstanceId, node: &str) -> bool {
        self.incidents
            .iter()
            .any(|i| i.instance == instance && i.node == node && i.resolved_at_ms.is_none())
            || node_timer_names(node)
                .into_iter()
                .any(|name| self.timers.contains_key(&(instance, name)))
            || self
                .subscriptions
                .contains_key(&(instance, node.to_owned()))
    }

    /// Drops buffered message `id` with its index entries.
    fn unbuffer(&mut self, id: i64) {
        if let Some(m) = self.buffered.remove(&id) {
            self.buffered_by_key
                .remove(&(m.name, m.correlation_key, id));
            self.buffered_by_expiry.remove(&(m.expires_at_ms, id));
        }
    }

    fn deployment(&self, id: DeploymentId) -> Option<&DeploymentRecord> {
        let index = usize::try_from(id.0.checked_sub(1)?).ok()?;
        self.deployments.get(index)
    }

    fn apply(&mut self, commit: Commit) -> CommitOutcome {
        if (commit.expected_fence.is_none() || commit.moves)
            && self
                .deployment(commit.deployment)
                .is_some_and(|d| d.retired)
        {
            return CommitOutcome::DeploymentRetired;
        }
        let stored = self
            .instances
            .get(&commit.instance)
            .map(|slot| &slot.record);
        let current_fence = stored.map(|i| i.fence);
        let fence = match (commit.expected_fence, current_fence) {
            (None, None) => 1,
            (Some(expected), Some(current)) if expected == current => current + 1,
            _ => return CommitOutcome::Conflict { current_fence },
        };
        if let Some(advance) = &commit.schedule {
            let row = self
                .schedules
                .get(&(commit.deployment, advance.node.clone()));
            if row.is_none_or(|r| r.due_at_ms != advance.fired_at_ms) {
                return CommitOutcome::Conflict { current_fence };
            }
        }
        if let Some(take) = &commit.message_take {
            let live = self
                .buffered
                .get(&take.message)
                .filter(|m| m.expires_at_ms > commit.now_ms && !m.takers.contains(&take.process));
            if live.is_none() {
                return CommitOutcome::MessageTaken;
            }
        }
        let created_at_ms = stored.map_or(commit.now_ms, |i| i.created_at_ms);
        // The first commit that ends the instance sets the end; later ones keep it.
        let ended_at_ms = commit
            .state
            .status
            .has_ended()
            .then(|| stored.and_then(|i| i.ended_at_ms).unwrap_or(commit.now_ms));
        // A creation brings its key; an update keeps the stored one, even when it moves the
        // instance to another deployment (migration).
        let business_key = match stored {
            None => commit.state.business_key,
            Some(i) => i.business_key.clone(),
        };
        let moved_from = stored
            .map(|i| i.deployment)
            .filter(|d| *d != commit.deployment);
        if let Some(key) = &business_key {
            if stored.is_none() || moved_from.is_some() {
                let slot = (commit.deployment, key.clone());
                if let Some(existing) = self.business_keys.get(&slot) {
                    return CommitOutcome::DuplicateBusinessKey {
                        existing: *existing,
                    };
                }
                if let Some(old) = moved_from {
                    self.business_keys.remove(&(old, key.clone()));
                }
                self.business_keys.insert(slot, commit.instance);
            }
        }
        // Refusals are all above: from here on the commit is applied.
        if let Some(old) = stored.and_then(|i| i.ended_at_ms) {
            self.ended.remove(&(old, commit.instance));
        }
        if let Some(end) = ended_at_ms {
            self.ended.insert((end, commit.instance));
        }
        if let Some(take) = commit.message_take {
            if let Some(message) = self.buffered.get_mut(&take.message) {
                if let Err(at) = message.takers.binary_search(&take.process) {
                    message.takers.insert(at, take.process);
                }
            }
        }
        if let Some(advance) = commit.schedule {
            self.advance_schedule(commit.deployment, *advance);
        }
        let record = InstanceRecord {
            id: commit.instance,
            deployment: commit.deployment,
            fence,
            status: commit.state.status,
            failure_code: commit.state.failure_code,
            snapshot: commit.state.snapshot,
            business_key,
            created_at_ms,
            updated_at_ms: commit.now_ms,
            ended_at_ms,
        };
        let slot = match self.instances.entry(commit.instance) {
            Entry::Occupied(slot) => {
                let slot = slot.into_mut();
                slot.record = record;
                slot
            }
            Entry::Vacant(slot) => slot.insert(Slot {
                record,
                attempts: 0,
                history: Vec::new(),
            }),
        };
        if !commit.attempts.is_empty() {
            crate::history::pack_into(&mut slot.history, commit.instance, &commit.attempts);
            slot.attempts += commit.attempts.len() as u64;
        }
        self.apply_timers(commit.instance, commit.timers);
        self.apply_incidents(commit.instance, commit.incidents, commit.now_ms);
        self.apply_subscriptions(commit.instance, commit.subscriptions, commit.now_ms);
        if let Some(entry) = commit.journal {
            self.journal
                .entry(commit.instance)
                .or_default()
                .push(*entry);
        }
        self.apply_pull(commit.instance, commit.pull);
        self.apply_outbox(commit.instance, commit.outbox, commit.now_ms);
        self.apply_user_tasks(commit.instance, commit.user_tasks);
        self.apply_audit(
            commit.instance,
            commit.audit,
            commit.expected_fence,
            fence,
            commit.now_ms,
        );
        CommitOutcome::Applied { fence }
    }

    /// Moves a schedule on to its next occurrence, or deletes it after its last (the
    /// caller has checked that the fired occurrence is the row's).
    fn advance_schedule(&mut self, deployment: DeploymentId, advance: ScheduleAdvance) {
        let key = (deployment, advance.node);
        match advance.next {
            Some((due_at_ms, remaining)) => {
                self.schedules.insert(
                    key,
                    ScheduleRow {
                        due_at_ms,
                        remaining,
                        leased_until_ms: None,
                    },
                );
            }
            None => {
                self.schedules.remove(&key);
            }
        }
    }

    fn apply_timers(&mut self, instance: InstanceId, timers: TimerWrites) {
        // Resolves before arms: a step that replaces a timer resolves the old incarnation
        // and arms the new one, and the new one must survive.
        for timer in timers.resolve {
            let key = (instance, timer.name);
            if self.timers.get(&key).map(|row| row.incarnation) == Some(timer.incarnation) {
                self.remove_timer(&key);
            }
        }
        for timer in timers.arm {
            let key = (instance, timer.name);
            self.remove_timer(&key);
            self.timers_by_due
                .insert((timer.due_at_ms, key.0, key.1.clone()));
            self.timers.insert(
                key,
                TimerRow {
                    due_at_ms: timer.due_at_ms,
                    incarnation: timer.incarnation,
                    lease_owner: None,
                    leased_until_ms: None,
                },
            );
        }
    }

    fn apply_incidents(&mut self, instance: InstanceId, incidents: IncidentWrites, now_ms: i64) {
        // All moves at once, each incident by the node it had: a mapping may rename `a`
        // to `b` and `b` to `c` in one migration.
        if !incidents.moved.is_empty() {
            for incident in self
                .incidents
                .iter_mut()
                .filter(|i| i.instance == instance && i.resolved_at_ms.is_none())
            {
                if let Some((_, to)) = incidents.moved.iter().find(|(f, _)| *f == incident.node) {
                    incident.node = to.clone();
                }
            }
        }
        // Resolves before opens, for the same reason as timers.
        for node in &incidents.resolve_on {
            for incident in self
                .incidents
                .iter_mut()
                .filter(|i| i.instance == instance && &i.node == node && i.resolved_at_ms.is_none())
            {
                incident.resolved_at_ms = Some(now_ms);
            }
        }
        for incident in incidents.open {
            self.incident_ids += 1;
            let id = self.incident_ids;
            self.incidents.push(IncidentRecord {
                id,
                instance,
                node: incident.node,
                code: incident.code,
                message: incident.message,
                opened_at_ms: now_ms,
                resolved_at_ms: None,
            });
        }
    }

    fn apply_subscriptions(
        &mut self,
        instance: InstanceId,
        writes: SubscriptionWrites,
        now_ms: i64,
    ) {
        // Closes before opens, for the same reason as timers.
        for node in writes.close {
            self.remove_subscription(&(instance, node));
        }
        for s in writes.open {
            let key = (instance, s.node.clone());
            self.remove_subscription(&key);
            self.subscriptions_by_key.insert((
                s.message.clone(),
                s.key.clone(),
                now_ms,
                instance,
                s.node.clone(),
            ));
            self.subscriptions.insert(
                key,
                SubscriptionRecord {
                    instance,
                    node: s.node,
                    message: s.message,
                    key: s.key,
                    opened_at_ms: now_ms,
                },
            );
        }
    }

    fn remove_subscription(&mut self, key: &(InstanceId, String)) -> bool {
        match self.subscriptions.remove(key) {
            Some(s) => {
                self.subscriptions_by_key.remove(&(
                    s.message,
                    s.key,
                    s.opened_at_ms,
                    s.instance,
                    s.node,
                ));
                true
            }
            None => false,
        }
    }

    fn apply_audit(
        &mut self,
        instance: InstanceId,
        audit: Vec<AuditEntry>,
        fence_before: Option<u64>,
        fence_after: u64,
        at_ms: i64,
    ) {
        for entry in audit {
            self.audit_ids += 1;
            let id = self.audit_ids;
            self.audit.push(AuditRecord {
                id,
                instance,
                at_ms,
                actor: entry.actor,
                action: entry.action,
                detail: entry.detail,
                fence_before,
                fence_after,
            });
        }
    }

    /// Deletes one batch of retention: see [`Store::purge_finished`].
    fn purge(&mut self, request: PurgeRequest) -> PurgeOutcome {
        let limit = request.limit.min(crate::PURGE_LIMIT_MAX) as usize;
        let doomed: Vec<(i64, InstanceId)> = self
            .ended
            .iter()
            .take_while(|(end, _)| *end < request.ended_before_ms)
            .filter(|(_, id)| {
                self.instances.get(id).map(|s| &s.record).is_some_and(|i| {
                    i.status.has_ended() && request.deployment.is_none_or(|d| i.deployment == d)
                })
            })
            .take(limit)
            .copied()
            .collect();
        let mut out = PurgeOutcome::default();
        if doomed.is_empty() {
            return out;
        }
        let ids: BTreeSet<InstanceId> = doomed.iter().map(|(_, id)| *id).collect();
        for key in &doomed {
            self.ended.remove(key);
            if let Some(gone) = self.instances.remove(&key.1) {
                out.attempts += gone.attempts;
                if let Some(k) = gone.record.business_key {
                    self.business_keys.remove(&(gone.record.deployment, k));
                }
            }
            out.instances += 1;
            out.journal += self.journal.remove(&key.1).map_or(0, |j| j.len() as u64);
            // Pull rows of an ended instance would be residue (its last step withdrew
            // them); they go with it like timer residue.
            let pulls: Vec<(InstanceId, String)> = self
                .pull
                .range((key.1, String::new())..)
                .take_while(|((i, _), _)| *i == key.1)
                .map(|(k, _)| k.clone())
                .collect();
            out.timers += pulls.len() as u64;
            for k in &pulls {
                self.remove_pull(k);
            }
            // Outbox rows go with their instance whatever their state: nobody is left to
            // answer a delivery for it.
            let rows = self.outbox_keys(key.1, None);
            out.outbox += rows.len() as u64;
            for k in &rows {
                self.remove_outbox(k);
            }
            // User-task rows too: the ending commit withdrew them.
            let tasks: Vec<(InstanceId, String)> = self
                .user_tasks
                .range((key.1, String::new())..)
                .take_while(|((i, _), _)| *i == key.1)
                .map(|(k, _)| k.clone())
                .collect();
            out.timers += tasks.len() as u64;
            for k in &tasks {
                self.remove_user_task(k);
            }
        }
        for id in &ids {
            let names: Vec<KeyName> = self
                .keys
                .range(KeyName::instance(*id)..)
                .take_while(|(name, _)| name.instance == *id)
                .map(|(name, _)| name.clone())
                .collect();
            for name in names {
                if let Some(key) = self.keys.remove(&name) {
                    self.key_names.remove(&key);
                    out.keys += 1;
                }
            }
        }
        let before = self.incidents.len();
        self.incidents.retain(|i| !ids.contains(&i.instance));
        out.incidents = (before - self.incidents.len()) as u64;
        let residue: Vec<(InstanceId, String)> = self
            .subscriptions
            .keys()
            .filter(|(i, _)| ids.contains(i))
            .cloned()
            .collect();
        for key in &residue {
            self.remove_subscription(key);
        }
        out.subscriptions = residue.len() as u64;
        let before = self.audit.len();
        self.audit.retain(|a| !ids.contains(&a.instance));
        out.audit = (before - self.audit.len()) as u64;
        let residue: Vec<TimerKey> = ids
            .iter()
            .flat_map(|id| {
                self.timers
                    .range((*id, TimerName::new(TimerKind::Boundary, ""))..)
                    .take_while(move |((i, _), _)| i == id)
                    .map(|(key, _)| key.clone())
            })
            .collect();
        out.timers += residue.len() as u64;
        for key in &residue {
            self.remove_timer(key);
        }
        out
    }

    fn apply_pull(&mut self, instance: InstanceId, pull: PullWrites) {
        if pull.is_empty() {
            return;
        }
        for node in pull.withdraw {
            self.retire_keys(instance, KeyKind::Job, &node);
            self.remove_pull(&(instance, node));
        }
        for row in pull.offer {
            let key = (instance, row.node.clone());
            self.remove_pull(&key);
            if row.worker.is_none() {
                self.pull_offered.insert((
                    row.topic.clone(),
                    row.offered_at_ms,
                    instance,
                    row.node.clone(),
                ));
            }
            self.pull.insert(key, PullTaskRecord { instance, ..row });
        }
    }

    fn apply_user_tasks(&mut self, instance: InstanceId, writes: UserTaskWrites) {
        if writes.is_empty() {
            return;
        }
        for node in writes.withdraw {
            self.retire_keys(instance, KeyKind::UserTask, &node);
            self.remove_user_task(&(instance, node));
        }
        for row in writes.offer {
            let key = (instance, row.node.clone());
            self.remove_user_task(&key);
            self.user_tasks_by_created
                .insert((row.created_at_ms, instance, row.node.clone()));
            self.user_tasks
                .insert(key, UserTaskRecord { instance, ..row });
        }
        for (node, assignee) in writes.assign {
            if let Some(row) = self.user_tasks.get_mut(&(instance, node)) {
                row.assignee = assignee;
            }
        }
    }

    fn remove_user_task(&mut self, key: &(InstanceId, String)) {
        if let Some(old) = self.user_tasks.remove(key) {
            self.user_tasks_by_created
                .remove(&(old.created_at_ms, key.0, key.1.clone()));
        }
    }

    /// Drops the Camunda 8 keys of kind `kind` the node `node` of `instance` was given
    /// (a withdrawn task's): what is offered there next gets keys of its own.
    fn retire_keys(&mut self, instance: InstanceId, kind: KeyKind, node: &str) {
        let from = KeyName {
            instance,
            kind,
            node: node.to_owned(),
            attempt: 0,
        };
        let gone: Vec<KeyName> = self
            .keys
            .range(from..)
            .take_while(|(name, _)| {
                name.instance == instance && name.kind == kind && name.node == node
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            if let Some(key) = self.keys.remove(&name) {
                self.key_names.remove(&key);
            }
        }
    }

    fn remove_pull(&mut self, key: &(InstanceId, String)) {
        if let Some(old) = self.pull.remove(key) {
            self.pull_offered
                .remove(&(old.topic, old.offered_at_ms, key.0, key.1.clone()));
        }
    }

    /// Withdrawals before emissions: a node whose dead attempt is withdrawn and whose
    /// next attempt is emitted in one commit keeps the new row.
    fn apply_outbox(&mut self, instance: InstanceId, writes: OutboxWrites, now_ms: i64) {
        if writes.is_empty() {
            return;
        }
        for node in &writes.withdraw {
            for key in self.outbox_keys(instance, Some(node)) {
                let undelivered = self
                    .outbox
                    .get(&key)
                    .is_some_and(|row| row.record.state != OutboxState::Delivered);
                if undelivered {
                    self.remove_outbox(&key);
                }
            }
        }
        for key in &writes.answered {
            let Some(row) = self.outbox.get_mut(key) else {
                continue;
            };
            if row.record.state != OutboxState::Pending {
                continue;
            }
            row.lease_owner = None;
            row.lease_until_ms = None;
            row.record.state = OutboxState::Delivered;
            row.record.deliveries = row.record.deliveries.saturating_add(1);
            let due = row.record.due_at_ms;
            self.outbox_due.remove(&(due, key.clone()));
        }
        for new in writes.emit {
            if self.outbox.contains_key(&new.key) {
                continue;
            }
            self.outbox_due.insert((now_ms, new.key.clone()));
            self.outbox_by_node
                .insert((instance, new.node.clone(), new.key.clone()));
            let record = OutboxRecord {
                key: new.key,
                instance,
                node: new.node,
                channel: new.channel,
                attempt: new.attempt,
                call_id: new.call_id,
                body: new.body,
                created_at_ms: now_ms,
                state: OutboxState::Pending,
                deliveries: 0,
                due_at_ms: now_ms,
                last_error: None,
            };
            self.outbox.insert(
                record.key.clone(),
                OutboxRow {
                    record,
                    lease_owner: None,
                    lease_until_ms: None,
                },
            );
        }
    }

    /// The keys of the outbox rows of `instance`, of one node or of all.
    fn outbox_keys(&self, instance: InstanceId, node: Option<&str>) -> Vec<String> {
        let from = (instance, node.unwrap_or("").to_owned(), String::new());
        self.outbox_by_node
            .range(from..)
            .take_while(|(i, n, _)| *i == instance && node.is_none_or(|node| n == node))
            .map(|(_, _, key)| key.clone())
            .collect()
    }

    fn remove_outbox(&mut self, key: &str) {
        if let Some(old) = self.outbox.remove(key) {
            let r = old.record;
            self.outbox_due.remove(&(r.due_at_ms, r.key.clone()));
            self.outbox_by_node.remove(&(r.instance, r.node, r.key));
        }
    }

    fn claim_due_outbox(&mut self, claim: TimerClaim<'_>) -> StoreResult<Vec<OutboxRecord>> {
        let limit = effective_outbox_claim_limit(claim.limit) as usize;
        let mut claimed = Vec::new();
        for (due_at_ms, key) in &self.outbox_due {
            if claimed.len() >= limit || *due_at_ms > claim.now_ms {
                break;
            }
            let Some(row) = self.outbox.get_mut(key) else {
                return Err(StoreError::Corrupt(format!(
                    "outbox due index names a missing row {key:?}"
                )));
            };
            // A lease holds up to and including `lease_until_ms`.
            if row
                .lease_until_ms
                .is_some_and(|until| until >= claim.now_ms)
            {
                continue;
            }
            row.lease_owner = Some(claim.owner.to_owned());
            row.lease_until_ms = Some(claim.now_ms.saturating_add(claim.lease_ms));
            claimed.push(row.record.clone());
        }
        Ok(claimed)
    }

    fn record_delivery(
        &mut self,
        key: &str,
        owner: &str,
        now_ms: i64,
        record: DeliveryRecord,
    ) -> bool {
        let Some(row) = self.outbox.get_mut(key) else {
            return false;
        };
        if row.record.state != OutboxState::Pending || row.lease_owner.as_deref() != Some(owner) {
            return false;
        }
        let old_due = row.record.due_at_ms;
        row.lease_owner = None;
        row.lease_until_ms = None;
        let r = &mut row.record;
        r.deliveries = r.deliveries.saturating_add(1);
        r.state = record.state();
        if let Some(error) = record.error() {
            r.last_error = Some(error.to_owned());
        }
        if let Some(at) = record.retry_at_ms() {
            r.due_at_ms = at;
        }
        let (instance, node, state, due, deliveries) = (
            r.instance,
            r.node.clone(),
            r.state,
            r.due_at_ms,
            r.deliveries,
        );
        self.outbox_due.remove(&(old_due, key.to_owned()));
        if state == OutboxState::Pending {
            self.outbox_due.insert((due, key.to_owned()));
        }
        if let DeliveryRecord::Poisoned { error } = &record {
            let incident = NewIncident {
                node,
                code: POISONED_INCIDENT_CODE.to_owned(),
                message: poisoned_message(error, deliveries),
            };
            let writes = IncidentWrites {
                open: vec![incident],
                ..IncidentWrites::default()
            };
            self.apply_incidents(instance, writes, now_ms);
        }
        true
    }

    fn remove_timer(&mut self, key: &TimerKey) {
        if let Some(old) = self.timers.remove(key) {
            self.timers_by_due
                .remove(&(old.due_at_ms, key.0, key.1.clone()));
        }
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn is_durable(&self) -> bool {
        false
    }

    async fn deploy(&self, new: NewDeployment<'_>) -> StoreResult<DeploymentRecord> {
        let mut state = self.lock();
        if let Some(existing) = state
            .deployments
            .iter()
            .find(|d| d.content_hash == new.content_hash)
        {
            return Ok(existing.clone());
        }
        let version = i64::try_from(state.deployments.len())
            .map_err(|_| StoreError::Corrupt("too many deployments".to_string()))?
            + 1;
        let record = DeploymentRecord {
            id: DeploymentId(version),
            process_id: new.process_id.to_string(),
            content_hash: new.content_hash.to_string(),
            source: new.source.to_string(),
            deployed_at_ms: new.deployed_at_ms,
            retired: false,
        };
        let same_process: BTreeSet<DeploymentId> = state
            .deployments
            .iter()
            .filter(|d| d.process_id == new.process_id)
            .map(|d| d.id)
            .collect();
        state
            .schedules
            .retain(|(deployment, _), _| !same_process.contains(deployment));
        for s in new.schedules {
            state.schedules.insert(
                (record.id, s.node.clone()),
                ScheduleRow {
                    due_at_ms: s.due_at_ms,
                    remaining: s.remaining,
                    leased_until_ms: None,
                },
            );
        }
        state.deployments.push(record.clone());
        Ok(record)
    }

    async fn deployment(&self, id: DeploymentId) -> StoreResult<Option<DeploymentRecord>> {
        Ok(self.lock().deployment(id).cloned())
    }

    async fn deployments(&self) -> StoreResult<Vec<DeploymentRecord>> {
        Ok(self.lock().deployments.clone())
    }

    async fn retire(&self, id: DeploymentId) -> StoreResult<RetireOutcome> {
        let mut state = self.lock();
        if state.deployment(id).is_none() {
            return Ok(RetireOutcome::NotFound);
        }
        let blocking_instances = state
            .instances
            .values()
            .map(|s| &s.record)
            .filter(|i| i.deployment == id && !i.status.releases_deployment())
            .count() as u64;
        if blocking_instances > 0 {
            return Ok(RetireOutcome::Refused { blocking_instances });
        }
        let index = (id.0 - 1) as usize;
        state.deployments[index].retired = true;
        state
            .schedules
            .retain(|(deployment, _), _| *deployment != id);
        Ok(RetireOutcome::Retired)
    }

    async fn commit(&self, batch: Vec<Commit>) -> StoreResult<Vec<CommitOutcome>> {
        let mut state = self.lock();
        // Validate the whole batch first so a bad deployment id writes nothing at all,
        // exactly as a failed transaction would in the durable stores.
        if let Some(bad) = batch
            .iter()
            .find(|c| state.deployment(c.deployment).is_none())
        {
            return Err(StoreError::UnknownDeployment(bad.deployment));
        }
        Ok(batch.into_iter().map(|c| state.apply(c)).collect())
    }

    async fn instance(&self, id: InstanceId) -> StoreResult<Option<InstanceRecord>> {
        Ok(self.lock().instances.get(&id).map(|s| s.record.clone()))
    }

    async fn instances(&self, filter: &InstanceFilter) -> StoreResult<Vec<InstanceRecord>> {
        let state = self.lock();
        let mut rows: Vec<&InstanceRecord> = state
            .instances
            .values()
            .map(|s| &s.record)
            .filter(|i| filter.deployment.is_none_or(|d| i.deployment == d))
            .filter(|i| filter.status.is_none_or(|s| i.status == s))
            .filter(|i| {
                filter
                    .failure_code
                    .as_ref()
                    .is_none_or(|code| i.failure_code.as_ref() == Some(code))
            })
            .filter(|i| {
                filter
                    .business_key
                    .as_ref()
                    .is_none_or(|key| i.business_key.as_ref() == Some(key))
            })
            .filter(|i| filter.created_from_ms.is_none_or(|t| i.created_at_ms >= t))
            .filter(|i| filter.created_to_ms.is_none_or(|t| i.created_at_ms < t))
            .filter(|i| {
                filter
                    .ended_from_ms
                    .is_none_or(|t| i.ended_at_ms.is_some_and(|e| e >= t))
            })
            .filter(|i| {
                filter
                    .ended_to_ms
                    .is_none_or(|t| i.ended_at_ms.is_some_and(|e| e < t))
            })
            .filter(|i| {
                filter
                    .node
                    .as_deref()
                    .is_none_or(|node| state.stands_at(i.id, node))
            })
            .filter(|i| {
                filter
                    .after
                    .is_none_or(|after| (i.created_at_ms, i.id) > after)
            })
            .collect();
        rows.sort_by_key(|i| (i.created_at_ms, i.id));
        rows.truncate(effective_instances_limit(filter.limit) as usize);
        Ok(rows.into_iter().cloned().collect())
    }

    async fn claim_due_schedules(&self, claim: TimerClaim<'_>) -> StoreResult<Vec<ScheduleRecord>> {
        let mut state = self.lock();
        let mut due: Vec<(i64, DeploymentId, String)> = state
            .schedules
            .iter()
            .filter(|(_, row)| row.due_at_ms <= claim.now_ms)
            // A lease holds up to and including `leased_until_ms`.
            .filter(|(_, row)| row.leased_until_ms.is_none_or(|until| until < claim.now_ms))
            .map(|((deployment, node), row)| (row.due_at_ms, *deployment, node.clone()))
            .collect();
        due.sort();
        due.truncate(claim.limit as usize);
        let mut claimed = Vec::with_capacity(due.len());
        for (due_at_ms, deployment, node) in due {
            let key = (deployment, node);
            if let Some(row) = state.schedules.get_mut(&key) {
                row.leased_until_ms = Some(claim.now_ms.saturating_add(claim.lease_ms));
                claimed.push(ScheduleRecord {
                    deployment,
                    node: key.1,
                    due_at_ms,
                    remaining: row.remaining,
                });
            }
        }
        Ok(claimed)
    }

    async fn advance_schedule(
        &self,
        deployment: DeploymentId,
        advance: &ScheduleAdvance,
    ) -> StoreResult<bool> {
        let mut state = self.lock();
        let key = (deployment, advance.node.clone());
        if state.schedules.get(&key).map(|r| r.due_at_ms) != Some(advance.fired_at_ms) {
            return Ok(false);
        }
        state.advance_schedule(deployment, advance.clone());
        Ok(true)
    }

    async fn schedules(
        &self,
        deployment: Option<DeploymentId>,
    ) -> StoreResult<Vec<ScheduleRecord>> {
        let state = self.lock();
        Ok(state
            .schedules
            .iter()
            .filter(|((d, _), _)| deployment.is_none_or(|want| *d == want))
            .map(|((d, node), row)| ScheduleRecord {
                deployment: *d,
                node: node.clone(),
                due_at_ms: row.due_at_ms,
                remaining: row.remaining,
            })
            .collect())
    }

    async fn claim_due_timers(&self, claim: TimerClaim<'_>) -> StoreResult<Vec<TimerRecord>> {
        let mut state = self.lock();
        let state = &mut *state;
        let mut claimed = Vec::new();
        for (due_at_ms, instance, name) in &state.timers_by_due {
            if claimed.len() >= claim.limit as usize || *due_at_ms > claim.now_ms {
                break;
            }
            let key = (*instance, name.clone());
            let Some(row) = state.timers.get_mut(&key) else {
                return Err(StoreError::Corrupt(format!(
                    "timer due index names a missing timer {instance}/{name}"
                )));
            };
            // A lease holds up to and including `leased_until_ms`.
            if row
                .leased_until_ms
                .is_some_and(|until| until >= claim.now_ms)
            {
                continue;
            }
            row.lease_owner = Some(claim.owner.to_string());
            row.leased_until_ms = Some(claim.now_ms.saturating_add(claim.lease_ms));
            claimed.push(TimerRecord {
                instance: *instance,
                name: name.clone(),
                due_at_ms: *due_at_ms,
                incarnation: row.incarnation,
            });
        }
        Ok(claimed)
    }

    async fn next_timer_due(&self) -> StoreResult<Option<i64>> {
        Ok(self.lock().timers_by_due.first().map(|(due, _, _)| *due))
    }

    async fn timers(&self, instance: InstanceId) -> StoreResult<Vec<TimerRecord>> {
        let state = self.lock();
        Ok(state
            .timers
            // `b:` sorts before every name the engine writes (`b:…`, `c:…`, `r:…`, `t:…`,
            // `~run`), so the range starts at this instance's first timer.
            .range((instance, TimerName::new(TimerKind::Boundary, ""))..)
            .take_while(|((i, _), _)| *i == instance)
            .map(|((i, name), row)| TimerRecord {
                instance: *i,
                name: name.clone(),
                due_at_ms: row.due_at_ms,
                incarnation: row.incarnation,
            })
            .collect())
    }

    async fn incidents(&self, instance: Option<InstanceId>) -> StoreResult<Vec<IncidentRecord>> {
        let state = self.lock();
        Ok(state
            .incidents
            .iter()
            .filter(|i| instance.is_none_or(|id| i.instance == id))
            .cloned()
            .collect())
    }

    async fn latest_incidents(
        &self,
        limit: u32,
        open_only: bool,
    ) -> StoreResult<Vec<IncidentRecord>> {
        let limit = effective_instances_limit(limit) as usize;
        let state = self.lock();
        Ok(state
            .incidents
            .iter()
            .rev()
            .filter(|i| !open_only || i.resolved_at_ms.is_none())
            .take(limit)
            .cloned()
            .collect())
    }

    async fn subscriptions(
        &self,
        message: &str,
        key: &str,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        let limit = effective_subscriptions_limit(limit) as usize;
        let state = self.lock();
        let from = (message.to_owned(), key.to_owned(), i64::MIN);
        Ok(state
            .subscriptions_by_key
            .range((from.0, from.1, from.2, InstanceId::nil(), String::new())..)
            .take_while(|(m, k, ..)| m == message && k == key)
            .take(limit)
            .filter_map(|(_, _, _, instance, node)| {
                state.subscriptions.get(&(*instance, node.clone())).cloned()
            })
            .collect())
    }

    async fn subscriptions_after(
        &self,
        message: &str,
        key: &str,
        after: &SubscriptionRecord,
        limit: u32,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        use std::ops::Bound;
        let limit = effective_subscriptions_limit(limit) as usize;
        let state = self.lock();
        let from = (
            message.to_owned(),
            key.to_owned(),
            after.opened_at_ms,
            after.instance,
            after.node.clone(),
        );
        Ok(state
            .subscriptions_by_key
            .range((Bound::Excluded(from), Bound::Unbounded))
            .take_while(|(m, k, ..)| m == message && k == key)
            .take(limit)
            .filter_map(|(_, _, _, instance, node)| {
                state.subscriptions.get(&(*instance, node.clone())).cloned()
            })
            .collect())
    }

    async fn instance_subscriptions(
        &self,
        instance: InstanceId,
    ) -> StoreResult<Vec<SubscriptionRecord>> {
        let state = self.lock();
        Ok(state
            .subscriptions
            .range((instance, String::new())..)
            .take_while(|((i, _), _)| *i == instance)
            .map(|(_, s)| s.clone())
            .collect())
    }

    async fn instance_counts(
        &self,
        deployment: Option<DeploymentId>,
    ) -> StoreResult<Vec<(InstanceStatus, u64)>> {
        let state = self.lock();
        Ok(InstanceStatus::ALL
            .into_iter()
            .map(|s| {
                let n = state
                    .instances
                    .values()
                    .map(|slot| &slot.record)
                    .filter(|i| i.status == s && deployment.is_none_or(|d| i.deployment == d))
                    .count();
                (s, n as u64)
            })
            .collect())
    }

    async fn audit(
        &self,
        instance: Option<InstanceId>,
        limit: u32,
    ) -> StoreResult<Vec<AuditRecord>> {
        let state = self.lock();
        let rows: Vec<AuditRecord> = state
            .audit
            .iter()
            .filter(|a| instance.is_none_or(|i| a.instance == i))
            .cloned()
            .collect();
        let keep = effective_instances_limit(limit) as usize;
        Ok(rows[rows.len().saturating_sub(keep)..].to_vec())
    }

    async fn purge_finished(&self, request: PurgeRequest) -> StoreResult<PurgeOutcome> {
        Ok(self.lock().purge(request))
    }

    async fn offered_pull_tasks(&self, query: PullQuery<'_>) -> StoreResult<Vec<PullTaskRecord>> {
        let state = self.lock();
        let limit = query.limit.min(PULL_QUERY_LIMIT_MAX) as usize;
        let mut out: Vec<PullTaskRecord> = Vec::new();
        for topic in query.topics {
            let from = (topic.clone(), i64::MIN, InstanceId::nil(), String::new());
            let rows = state
                .pull_offered
                .range(from..)
                .take_while(|(t, ..)| t == topic)
                .take(limit)
                .filter_map(|(_, _, id, node)| state.pull.get(&(*id, node.clone())));
            out.extend(rows.cloned());
        }
        out.sort_by(|a, b| {
            (a.offered_at_ms, a.instance, &a.node).cmp(&(b.offered_at_ms, b.instance, &b.node))
        });
        out.dedup_by(|a, b| a.instance == b.instance && a.node == b.node);
        out.truncate(limit);
        Ok(out)
    }

    async fn pull_tasks(&self, instance: InstanceId) -> StoreResult<Vec<PullTaskRecord>> {
        let state = self.lock();
        Ok(state
            .pull
            .range((instance, String::new())..)
            .take_while(|((i, _), _)| *i == instance)
            .map(|(_, row)| row.clone())
            .collect())
    }

    /// Walks the listing order from the cursor and filters: a test store, so the walk
    /// may pass rows the durable stores' indexes skip.
    async fn user_tasks(&self, query: &UserTaskQuery) -> StoreResult<Vec<UserTaskRecord>> {
        use std::ops::Bound;
        let state = self.lock();
        let from = match &query.after {
            Some((at, id, node)) => Bound::Excluded((*at, *id, node.clone())),
            None => Bound::Unbounded,
        };
        Ok(state
            .user_tasks_by_created
            .range((from, Bound::Unbounded))
            .filter_map(|(_, id, node)| state.user_tasks.get(&(*id, node.clone())))
            .filter(|row| query.matches(row))
            .take(query.effective_limit() as usize)
            .cloned()
            .collect())
    }

    async fn instance_user_tasks(&self, instance: InstanceId) -> StoreResult<Vec<UserTaskRecord>> {
        let state = self.lock();
        Ok(state
            .user_tasks
            .range((instance, String::new())..)
            .take_while(|((i, _), _)| *i == instance)
            .map(|(_, row)| row.clone())
            .collect())
    }

    async fn attempts(&self, instance: InstanceId) -> StoreResult<Vec<AttemptRecord>> {
        match self.lock().instances.get(&instance) {
            Some(slot) => crate::history::unpack(instance, &slot.history),
            None => Ok(Vec::new()),
        }
    }

    async fn journal(
        &self,
        instance: InstanceId,
        after: u64,
        limit: u32,
    ) -> StoreResult<Vec<JournalEntry>> {
        let limit = match limit {
            0 => crate::JOURNAL_PAGE_MAX,
            n => n.min(crate::JOURNAL_PAGE_MAX),
        } as usize;
        Ok(self
            .lock()
            .journal
            .get(&instance)
            .map_or_else(Vec::new, |rows| {
                rows.iter()
                    .filter(|r| r.seq > after)
                    .take(limit)
                    .cloned()
                    .collect()
            }))
    }

    async fn claim_due_outbox(&self, claim: TimerClaim<'_>) -> StoreResult<Vec<OutboxRecord>> {
        self.lock().claim_due_outbox(claim)
    }

    async fn record_delivery(
        &self,
        key: &str,
        owner: &str,
        now_ms: i64,
        record: DeliveryRecord,
    ) -> StoreResult<bool> {
        Ok(self.lock().record_delivery(key, owner, now_ms, record))
    }

    async fn next_outbox_due(&self) -> StoreResult<Option<i64>> {
        Ok(self.lock().outbox_due.first().map(|(due, _)| *due))
    }

    async fn outbox_row(&self, key: &str) -> StoreResult<Option<OutboxRecord>> {
        Ok(self.lock().outbox.get(key).map(|row| row.record.clone()))
    }

    async fn outbox(&self, instance: InstanceId) -> StoreResult<Vec<OutboxRecord>> {
        let state = self.lock();
        let mut rows: Vec<OutboxRecord> = state
            .outbox_keys(instance, None)
            .iter()
            .filter_map(|key| state.outbox.get(key))
            .map(|row| row.record.clone())
            .collect();
        rows.sort_by(|a, b| (a.created_at_ms, &a.key).cmp(&(b.created_at_ms, &b.key)));
        Ok(rows)
    }
    async fn camunda_keys(&self, names: &[KeyName]) -> StoreResult<Vec<i64>> {
        if names.len() > CAMUNDA_KEYS_MAX {
            return Err(StoreError::Corrupt(format!(
                "{} names asked for Camunda keys at once; at most {CAMUNDA_KEYS_MAX}",
                names.len()
            )));
        }
        let mut state = self.lock();
        let mut out = Vec::with_capacity(names.len());
        if let Some(name) = names
            .iter()
            .find(|n| !state.keys.contains_key(*n) && !state.instances.contains_key(&n.instance))
        {
            return Err(StoreError::UnknownInstance(name.instance));
        }
        for name in names {
            if let Some(key) = state.keys.get(name) {
                out.push(*key);
                continue;
            }
            let key = if state.last_key == 0 {
                CAMUNDA_KEY_FIRST
            } else {
                state.last_key + 1
            };
            state.last_key = key;
            state.keys.insert(name.clone(), key);
            state.key_names.insert(key, name.clone());
            out.push(key);
        }
        Ok(out)
    }

    async fn buffer_message(&self, message: &NewBufferedMessage) -> StoreResult<BufferOutcome> {
        let mut state = self.lock();
        if let Some(id) = &message.message_id {
            let same: Vec<i64> = state
                .buffered_by_key
                .range(
                    (
                        message.name.clone(),
                        message.correlation_key.clone(),
                        i64::MIN,
                    )
                        ..=(
                            message.name.clone(),
                            message.correlation_key.clone(),
                            i64::MAX,
                        ),
                )
                .map(|(_, _, row)| *row)
                .filter(|row| state.buffered[row].message_id.as_ref() == Some(id))
                .collect();
            for row in same {
                let found = &state.buffered[&row];
                if found.expires_at_ms > message.published_at_ms {
                    return Ok(BufferOutcome::Duplicate { key: found.key });
                }
                state.unbuffer(row);
            }
        }
        state.buffered_ids += 1;
        let id = state.buffered_ids;
        state
            .buffered_by_key
            .insert((message.name.clone(), message.correlation_key.clone(), id));
        state.buffered_by_expiry.insert((message.expires_at_ms, id));
        state.buffered.insert(
            id,
            BufferedMessage {
                id,
                key: message.key,
                name: message.name.clone(),
                correlation_key: message.correlation_key.clone(),
                message_id: message.message_id.clone(),
                variables: message.variables.clone(),
                published_at_ms: message.published_at_ms,
                expires_at_ms: message.expires_at_ms,
                takers: Vec::new(),
            },
        );
        Ok(BufferOutcome::Buffered { id })
    }

    async fn buffered_messages(&self, query: BufferQuery<'_>) -> StoreResult<Vec<BufferedMessage>> {
        let state = self.lock();
        let limit = effective_buffered_limit(query.limit) as usize;
        let live = |m: &&BufferedMessage| m.expires_at_ms > query.now_ms;
        let after = query.after.saturating_add(1);
        Ok(match query.name_and_key {
            Some((name, key)) => state
                .buffered_by_key
                .range(
                    (name.to_owned(), key.to_owned(), after)
                        ..=(name.to_owned(), key.to_owned(), i64::MAX),
                )
                .map(|(_, _, id)| &state.buffered[id])
                .filter(live)
                .take(limit)
                .cloned()
                .collect(),
            None => state
                .buffered
                .range(after..)
                .map(|(_, m)| m)
                .filter(live)
                .take(limit)
                .cloned()
                .collect(),
        })
    }

    async fn expire_messages(&self, now_ms: i64, limit: u32) -> StoreResult<u64> {
        let mut state = self.lock();
        let expired: Vec<i64> = state
            .buffered_by_expiry
            .range(..=(now_ms, i64::MAX))
            .take(limit as usize)
            .map(|(_, id)| *id)
            .collect();
        for &id in &expired {
            state.unbuffer(id);
        }
        Ok(expired.len() as u64)
    }

    async fn camunda_key(&self, key: i64) -> StoreResult<Option<KeyName>> {
        Ok(self.lock().key_names.get(&key).cloned())
    }
}
