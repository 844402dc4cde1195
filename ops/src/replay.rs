//! Replay (SPEC G3, `docs/replay.md`): runs journaled instances' recorded inputs through
//! this build's step function from their start, against the deployment each step ran
//! on, and compares what each step writes with what the journal recorded.
//!
//! Read-only: a replay reads instance rows and journal rows, never a claim, and writes
//! nothing, so it runs beside a live server. Bounded: instances are read a page at a
//! time, journal rows a page at a time, and one instance's state is held at once; the
//! report keeps the details of at most [`DETAILS_MAX`] instances (the counts cover all).
//!
//! What a step is judged on, in order:
//! 1. the row itself: its sequence number follows the last one (a gap is history the
//!    journal did not see), it matches its own hash, and the snapshot its delta rebuilds
//!    matches the recorded snapshot hash — a row that fails any of these is reported as
//!    damaged, never trusted, and the instance is not replayable from there;
//! 2. the input parses in this build (a recorded input this build cannot read is a
//!    divergence: an upgrade would refuse it too);
//! 3. the step runs (an error where the recorded step was applied is a divergence);
//! 4. the snapshot bytes are the recorded ones — or, when they differ, decode to the same
//!    state (a deliberate re-encoding: "re-encoded, same meaning", not a divergence);
//! 5. the effects hash to the recorded hash.

use std::collections::BTreeMap;
use std::sync::Arc;

use qflow_core::journal::{self, HashKind};
use qflow_core::{Definition, Effect, Input, Snapshot, Step};
use qflow_store::{
    DeploymentId, InstanceFilter, InstanceId, InstanceRecord, InstanceStatus, JournalEntry,
};
use serde::Serialize;
use serde_json::Value as Json;

use crate::{Error, Ops, Result};

/// Instances whose details a report keeps (the counts cover every instance).
pub const DETAILS_MAX: usize = 100;

/// Most instances one replay looks at, whatever the request says.
pub const INSTANCES_MAX: u32 = 1_000_000;

/// Journal rows read per store call.
const PAGE_ROWS: u32 = 1_000;

/// Instance rows read per store call.
const PAGE_INSTANCES: u32 = 1_000;

/// The step function a replay runs: [`qflow_core::step`], or a test's hand-modified one.
pub type StepFn =
    fn(&Definition, &str, Snapshot, Input, i64) -> std::result::Result<Step, qflow_core::Error>;

/// Which instances to replay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayRequest {
    /// This instance alone (the filters below are then ignored).
    pub instance: Option<InstanceId>,
    pub deployment: Option<i64>,
    /// `running`, `completed`, `failed` or `cancelled`.
    pub status: Option<String>,
    /// Only instances created at or after this instant.
    pub created_from_ms: Option<i64>,
    /// Only instances created before this instant.
    pub created_to_ms: Option<i64>,
    /// At most this many instances (0: [`INSTANCES_MAX`]).
    pub limit: u32,
}

/// How one instance's replay came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every step wrote the recorded bytes.
    Identical,
    /// Every step wrote the recorded state; some in other bytes that decode to the same
    /// state (a deliberate change of the encoding).
    Reencoded,
    /// A step wrote something else (see [`Divergence`]).
    Divergent,
    /// The journal cannot be replayed (see `reason`): it starts after the instance's
    /// creation, has a gap, a damaged row, or names a deployment that is gone.
    NotReplayable,
    /// The instance has no journal rows (the journal was off while it ran).
    NotJournaled,
}

/// One instance's replay.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct InstanceReplay {
    pub instance: String,
    pub deployment: i64,
    pub outcome: Outcome,
    /// Steps replayed.
    pub steps: u64,
    /// Steps whose bytes differ but whose state is the recorded one.
    pub reencoded_steps: u64,
    /// Why the instance is not replayable (or where a replay stopped short).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub divergence: Option<Divergence>,
}

/// What part of a step diverged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DivergenceKind {
    /// This build does not read the recorded input.
    Input,
    /// This build's step refused the input the recorded step took.
    Error,
    /// The snapshot's state differs.
    Snapshot,
    /// The snapshot is the recorded one; the effects are not.
    Effects,
}

/// The first step of an instance whose replay differs from its record.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Divergence {
    /// The step's number in the instance's history (the fence its commit wrote).
    pub seq: u64,
    pub at_ms: i64,
    pub kind: DivergenceKind,
    /// The recorded input.
    #[schema(value_type = Object)]
    pub input: Json,
    /// The first top-level snapshot key whose value differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The first byte of the snapshot where the bytes differ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<usize>,
    /// The recorded value of `key` (for `effects`: the recorded hash).
    #[schema(value_type = Object)]
    pub recorded: Json,
    /// This build's value of `key` (for `effects`: the effects; for `error` and
    /// `input`: the message).
    #[schema(value_type = Object)]
    pub replayed: Json,
}

/// A replay's summary and the instances worth reading.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ReplayReport {
    /// Instances looked at.
    pub instances: u64,
    /// Instances replayed: to the end of their journal (identical, re-encoded) or to
    /// their first divergent step (divergent).
    pub replayed: u64,
    pub identical: u64,
    pub reencoded: u64,
    pub divergent: u64,
    pub not_replayable: u64,
    pub not_journaled: u64,
    /// Steps replayed, over all instances.
    pub steps: u64,
    /// Journal bytes read (the rows' fields), over all instances.
    pub journal_bytes: u64,
    /// The divergent, not replayable and re-encoded instances, at most [`DETAILS_MAX`]:
    /// divergent and not replayable ones first in line (a re-encoded one makes room).
    pub details: Vec<InstanceReplay>,
    /// Instances left out of `details` beyond [`DETAILS_MAX`].
    pub details_left_out: u64,
}

impl ReplayReport {
    fn add(&mut self, r: InstanceReplay) {
        self.instances += 1;
        self.steps += r.steps;
        match r.outcome {
            Outcome::Identical => self.identical += 1,
            Outcome::Reencoded => self.reencoded += 1,
            Outcome::Divergent => self.divergent += 1,
            Outcome::NotReplayable => self.not_replayable += 1,
            Outcome::NotJournaled => self.not_journaled += 1,
        }
        if matches!(
            r.outcome,
            Outcome::Identical | Outcome::Reencoded | Outcome::Divergent
        ) {
            self.replayed += 1;
        }
        if matches!(r.outcome, Outcome::Identical | Outcome::NotJournaled) {
            return;
        }
        if self.details.len() < DETAILS_MAX {
            self.details.push(r);
            return;
        }
        // Full: a divergent or not replayable instance takes the place of a re-encoded
        // one (after a format change every instance is re-encoded, and the list must
        // still show what needs reading).
        let evict = (r.outcome != Outcome::Reencoded)
            .then(|| {
                self.details
                    .iter()
                    .rposition(|d| d.outcome == Outcome::Reencoded)
            })
            .flatten();
        if let Some(i) = evict {
            self.details.remove(i);
            self.details.push(r);
        }
        self.details_left_out += 1;
    }

    /// Whether the replay found a divergence (what a front end's exit status says).
    pub fn diverged(&self) -> bool {
        self.divergent > 0
    }
}

impl Ops {
    /// Replays the instances `request` selects through this build's step function
    /// ([`qflow_core::step`]). `progress` sees each instance's result as it is known.
    pub async fn replay(
        &self,
        request: &ReplayRequest,
        progress: &mut (dyn FnMut(&InstanceReplay) + Send),
    ) -> Result<ReplayReport> {
        self.replay_with(request, qflow_core::step, progress).await
    }

    /// [`Ops::replay`] with another step function: how a test shows that a changed step
    /// is caught, at the step and key it changes.
    pub async fn replay_with(
        &self,
        request: &ReplayRequest,
        step: StepFn,
        progress: &mut (dyn FnMut(&InstanceReplay) + Send),
    ) -> Result<ReplayReport> {
        let mut report = ReplayReport::default();
        let mut defs = Defs::default();
        if let Some(id) = request.instance {
            let record = self
                .store()
                .instance(id)
                .await?
                .ok_or_else(|| Error::NotFound {
                    what: "instance",
                    id: id.to_string(),
                })?;
            let r = self
                .replay_one(&record, step, &mut defs, &mut report)
                .await?;
            progress(&r);
            report.add(r);
            return Ok(report);
        }
        let status = match &request.status {
            None => None,
            Some(s) => Some(InstanceStatus::parse(s).ok_or_else(|| Error::Invalid {
                field: "status",
                why: format!("`{s}` is not one of running, completed, failed, cancelled"),
            })?),
        };
        let mut left = match request.limit {
            0 => INSTANCES_MAX,
            n => n.min(INSTANCES_MAX),
        };
        let mut after = None;
        while left > 0 {
            let filter = InstanceFilter {
                deployment: request.deployment.map(DeploymentId),
                status,
                failure_code: None,
                business_key: None,
                created_from_ms: request.created_from_ms,
                created_to_ms: request.created_to_ms,
                ended_from_ms: None,
                ended_to_ms: None,
                node: None,
                after,
                limit: left.min(PAGE_INSTANCES),
            };
            let rows = self.store().instances(&filter).await?;
            let full = rows.len() == filter.limit as usize;
            for record in &rows {
                let r = self
                    .replay_one(record, step, &mut defs, &mut report)
                    .await?;
                progress(&r);
                report.add(r);
            }
            left -= rows.len() as u32;
            match rows.last() {
                Some(last) if full => after = Some((last.created_at_ms, last.id)),
                _ => break,
            }
        }
        Ok(report)
    }

    async fn replay_one(
        &self,
        record: &InstanceRecord,
        step: StepFn,
        defs: &mut Defs,
        report: &mut ReplayReport,
    ) -> Result<InstanceReplay> {
        let mut out = InstanceReplay {
            instance: record.id.to_string(),
            deployment: record.deployment.0,
            outcome: Outcome::Identical,
            steps: 0,
            reencoded_steps: 0,
            reason: None,
            divergence: None,
        };
        let not_replayable = |mut out: InstanceReplay, why: String| {
            out.outcome = Outcome::NotReplayable;
            out.reason = Some(why);
            Ok(out)
        };
        let id = record.id.to_string();
        // Rows up to the fence read with the instance: a step committed since then is
        // the next replay's (its row and the instance row are one transaction).
        let fence = record.fence;
        let mut recorded: Vec<u8> = Vec::new();
        let mut snapshot = Snapshot::new();
        let mut expected = 1u64;
        let mut after = 0u64;
        'pages: loop {
            let rows = self.store().journal(record.id, after, PAGE_ROWS).await?;
            let full = rows.len() == PAGE_ROWS as usize;
            for row in &rows {
                if row.seq > fence {
                    break 'pages;
                }
                report.journal_bytes += row.size_bytes() as u64;
                if row.seq != expected {
                    let why = if expected == 1 {
                        format!(
                            "the journal starts at step {}: the instance was created before \
                             the journal was switched on for it, so its start is not recorded",
                            row.seq
                        )
                    } else {
                        format!(
                            "steps {expected}..={} are not in the journal (it was switched \
                             off meanwhile, or rows are missing)",
                            row.seq - 1
                        )
                    };
                    return not_replayable(out, why);
                }
                let rebuilt = match check_row(row, &recorded) {
                    Ok(bytes) => bytes,
                    Err(why) => return not_replayable(out, why),
                };
                let def = match defs.get(self, row.deployment).await {
                    Ok(def) => def,
                    Err(why) => {
                        return not_replayable(out, format!("step {}: {why}", row.seq));
                    }
                };
                let verdict = judge(&def, &id, row, &rebuilt, snapshot, step);
                out.steps += 1;
                match verdict {
                    Verdict::Same(next) => snapshot = next,
                    Verdict::Reencoded(next) => {
                        out.reencoded_steps += 1;
                        snapshot = next;
                    }
                    Verdict::Diverged(d) => {
                        out.outcome = Outcome::Divergent;
                        out.divergence = Some(*d);
                        return Ok(out);
                    }
                }
                recorded = rebuilt;
                expected += 1;
                after = row.seq;
            }
            if !full {
                break;
            }
        }
        if expected <= fence && self.store().instance(record.id).await?.is_none() {
            // Retention purged it (rows and all) since its row was read.
            return not_replayable(
                out,
                "it was purged by retention while the replay ran".to_owned(),
            );
        }
        if expected == 1 {
            out.outcome = Outcome::NotJournaled;
            return Ok(out);
        }
        if expected <= fence {
            return not_replayable(
                out,
                format!(
                    "the journal stops at step {} and the instance is at step {fence}: it \
                     was switched off while the instance ran (steps 1..={} replayed)",
                    expected - 1,
                    expected - 1
                ),
            );
        }
        if recorded != record.snapshot {
            return not_replayable(
                out,
                format!(
                    "the journal's last snapshot (step {fence}) is not the instance's stored \
                     snapshot: the instance row was changed outside the engine"
                ),
            );
        }
        if out.reencoded_steps > 0 {
            out.outcome = Outcome::Reencoded;
        }
        Ok(out)
    }
}

/// The recorded snapshot `row` rebuilds on `previous` (the recorded snapshot before it),
/// or why the row is not to be trusted.
fn check_row(row: &JournalEntry, previous: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let damaged = |what: String| {
        format!(
            "step {}: the journal row is damaged ({what}); not trusted",
            row.seq
        )
    };
    if !row.is_intact() {
        return Err(damaged("it does not match its own hash".to_owned()));
    }
    // The writer took the delta against the bytes the store held before the step (a
    // creation: against nothing), which the previous row rebuilt: so does this, whatever
    // encoding the build that wrote them used.
    let base: &[u8] = if row.seq == 1 { &[] } else { previous };
    let rebuilt =
        journal::apply(base, &row.delta).map_err(|e| damaged(format!("its delta: {e}")))?;
    // An intact row's hashes are of a kind this build knows.
    let kind = row.hash_kind().unwrap_or(HashKind::CURRENT);
    if kind.hash(&rebuilt) != row.snapshot_hash {
        return Err(damaged(
            "the snapshot its delta rebuilds does not match the recorded snapshot hash".to_owned(),
        ));
    }
    Ok(rebuilt)
}

enum Verdict {
    Same(Snapshot),
    Reencoded(Snapshot),
    Diverged(Box<Divergence>),
}

/// Steps `row`'s input on `snapshot` and compares with `recorded`, the snapshot the
/// row rebuilt.
fn judge(
    def: &Definition,
    id: &str,
    row: &JournalEntry,
    recorded: &[u8],
    snapshot: Snapshot,
    step: StepFn,
) -> Verdict {
    let input_json: Json =
        serde_json::from_str(&row.input).unwrap_or_else(|_| Json::String(row.input.clone()));
    let diverged = |kind, key, offset, recorded, replayed| {
        Verdict::Diverged(Box::new(Divergence {
            seq: row.seq,
            at_ms: row.at_ms,
            kind,
            input: input_json.clone(),
            key,
            offset,
            recorded,
            replayed,
        }))
    };
    let input: Input = match serde_json::from_str(&row.input) {
        Ok(input) => input,
        Err(e) => {
            return diverged(
                DivergenceKind::Input,
                None,
                None,
                Json::Null,
                Json::String(format!("this build does not read the recorded input: {e}")),
            )
        }
    };
    let stepped = match step(def, id, snapshot, input, row.at_ms) {
        Ok(stepped) => stepped,
        Err(e) => {
            return diverged(
                DivergenceKind::Error,
                None,
                None,
                Json::Null,
                Json::String(format!("this build refused the step: {e}")),
            )
        }
    };
    let bytes = stepped.snapshot.encode();
    let mut reencoded = false;
    if bytes != recorded {
        if journal::same_meaning(recorded, &bytes) {
            reencoded = true;
        } else {
            let d = journal::difference(recorded, &bytes);
            return diverged(
                DivergenceKind::Snapshot,
                d.as_ref().and_then(|d| d.key.clone()),
                d.as_ref().map(|d| d.offset),
                d.as_ref().map_or(Json::Null, |d| d.recorded.clone()),
                d.map_or(Json::Null, |d| d.replayed),
            );
        }
    }
    let kind = row.hash_kind().unwrap_or(HashKind::CURRENT);
    if kind.effects_hash(&stepped.effects) != row.effects_hash {
        return diverged(
            DivergenceKind::Effects,
            None,
            None,
            Json::String(format!("effects hash {}", hex(&row.effects_hash))),
            effects_json(&stepped.effects),
        );
    }
    if reencoded {
        Verdict::Reencoded(stepped.snapshot)
    } else {
        Verdict::Same(stepped.snapshot)
    }
}

fn effects_json(effects: &[Effect]) -> Json {
    serde_json::to_value(effects).unwrap_or(Json::Null)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The definitions a replay has loaded, by deployment (and the deployments it could not).
#[derive(Default)]
struct Defs {
    loaded: BTreeMap<DeploymentId, std::result::Result<Arc<Definition>, String>>,
}

impl Defs {
    async fn get(
        &mut self,
        ops: &Ops,
        id: DeploymentId,
    ) -> std::result::Result<Arc<Definition>, String> {
        if let Some(known) = self.loaded.get(&id) {
            return known.clone();
        }
        let got = ops
            .shared
            .stepper
            .definition(id)
            .await
            .map_err(|e| format!("deployment {} cannot be loaded: {e}", id.0));
        self.loaded.insert(id, got.clone());
        got
    }
}

/// A journaled instance as files `qflow simulate` plays (SPEC G3): its model, the models
/// it migrated onto, the scenario of its recorded inputs and what it ended as — a golden
/// case's layout (`docs/golden.md`).
#[derive(Debug, Clone, PartialEq)]
pub struct ExportedScenario {
    /// The process the instance runs (`qflow simulate --process`).
    pub process_id: String,
    /// The BPMN source of the deployment it started on (`model.bpmn`).
    pub model: String,
    /// The deployments it migrated onto, by the target name its `migrate` inputs give
    /// (`target-<name>.bpmn`, `--target <name>=FILE`): `v<deployment>`.
    pub targets: BTreeMap<String, String>,
    /// The scenario (`scenario.json`): the recorded inputs at their instants.
    pub scenario: qflow_core::sim::Scenario,
    /// What the instance stood as at the journal's last step (`expect.json`).
    pub expect: Json,
}

impl Ops {
    /// The scenario that plays `instance`'s journal in `qflow simulate`, refused when the
    /// journal cannot be trusted to reproduce it (it does not start at the creation, has
    /// a gap or a damaged row, or a deployment was made under `[delegates]` routes the
    /// simulator does not apply).
    pub async fn export_scenario(&self, instance: InstanceId) -> Result<ExportedScenario> {
        use qflow_core::sim::{RecordedInput, Scenario};
        let record = self
            .store()
            .instance(instance)
            .await?
            .ok_or_else(|| Error::NotFound {
                what: "instance",
                id: instance.to_string(),
            })?;
        let refuse = |why: String| Err(Error::Refused(format!("instance {instance}: {why}")));
        let mut inputs = Vec::new();
        let mut deployments: Vec<DeploymentId> = Vec::new();
        let mut previous: Vec<u8> = Vec::new();
        let mut after = 0u64;
        'pages: loop {
            let rows = self.store().journal(instance, after, PAGE_ROWS).await?;
            let full = rows.len() == PAGE_ROWS as usize;
            for row in &rows {
                if row.seq > record.fence {
                    break 'pages;
                }
                if row.seq != after + 1 {
                    return refuse(if after == 0 {
                        format!(
                            "the journal starts at step {}: the instance was created before \
                             the journal was switched on for it",
                            row.seq
                        )
                    } else {
                        format!(
                            "steps {}..={} are not in the journal",
                            after + 1,
                            row.seq - 1
                        )
                    });
                }
                previous = match check_row(row, &previous) {
                    Ok(bytes) => bytes,
                    Err(why) => return refuse(why),
                };
                let input: Input = serde_json::from_str(&row.input).map_err(|e| {
                    Error::Refused(format!(
                        "instance {instance}: step {}: this build does not read the recorded \
                         input: {e}",
                        row.seq
                    ))
                })?;
                let mut entry = RecordedInput::new(row.at_ms, input);
                match deployments.last() {
                    None => deployments.push(row.deployment),
                    Some(last) if *last == row.deployment => {}
                    Some(_) => {
                        deployments.push(row.deployment);
                        entry.target = Some(format!("v{}", row.deployment.0));
                    }
                }
                inputs.push(entry);
                after = row.seq;
            }
            if !full {
                break;
            }
        }
        if inputs.is_empty() {
            return refuse("it has no journal rows (the journal was off while it ran)".into());
        }
        let mut sources = Vec::new();
        for id in &deployments {
            let d = self
                .store()
                .deployment(*id)
                .await?
                .ok_or_else(|| Error::NotFound {
                    what: "deployment",
                    id: id.0.to_string(),
                })?;
            if d.content_hash.contains('.') {
                return refuse(format!(
                    "deployment {} was made under [delegates] routes, which `qflow simulate` \
                     does not apply: its scenario would run another model",
                    id.0
                ));
            }
            sources.push(d);
        }
        let first = sources.remove(0);
        let targets = sources
            .into_iter()
            .map(|d| (format!("v{}", d.id.0), d.source))
            .collect();
        if after == record.fence && previous != record.snapshot {
            return refuse(format!(
                "the journal's last snapshot (step {after}) is not the instance's stored \
                 snapshot: the instance row was changed outside the engine"
            ));
        }
        let mut expect = serde_json::json!({ "state": record.status.as_str() });
        if after == record.fence {
            if let Some(code) = &record.failure_code {
                expect["failure_code"] = Json::String(code.clone());
            }
        } else {
            // The journal stops short of the instance (switched off since): the state is
            // the one its last journaled step left, which the instance row no longer is.
            let snapshot = Snapshot::decode(&previous).map_err(|e| Error::Store(e.to_string()))?;
            let status = qflow_runtime::claim::store_status(snapshot.status());
            expect = serde_json::json!({ "state": status.as_str() });
            if let Some(f) = snapshot.failure() {
                expect["failure_code"] = Json::String(f.code);
            }
        }
        Ok(ExportedScenario {
            process_id: first.process_id,
            model: first.source,
            targets,
            scenario: Scenario::recorded(instance.to_string(), inputs),
            expect,
        })
    }
}
