//! Migration (O2): moving instances of one deployment onto another under a plan that
//! renames nodes, with a dry run, answered as one report (`MigrationReport`) that the
//! CLI, the API and the console all render.

use qflow_core::Input;
use qflow_store::{AuditEntry, DeploymentId, InstanceFilter, InstanceId, InstanceStatus};
use serde::Serialize;

use crate::{json, parse_instance_id, Error, Ops, Result};

/// A migration plan (O2): which instances of `source` move onto `target`, and how their
/// nodes are renamed (an id the mapping does not name keeps its id).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MigrationPlan {
    #[serde(deserialize_with = "json::integer")]
    pub source: i64,
    #[serde(deserialize_with = "json::integer")]
    pub target: i64,
    #[serde(default)]
    pub mapping: std::collections::BTreeMap<String, String>,
    /// Only these instances (default: every FAILED or running instance of `source`).
    #[serde(default)]
    pub instances: Option<Vec<String>>,
}

/// A migration's outcome for one instance: `migrated`, `would_migrate` (a dry run) or
/// `refused`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MigrationOutcome {
    /// The instance moved onto the target (its fence moved).
    Migrated,
    /// A dry run: the instance would move; nothing was written.
    WouldMigrate,
    /// The instance was left as it was; the result's `reason` says why.
    Refused,
}

impl MigrationOutcome {
    /// The outcome as the JSON spells it (`would_migrate`).
    pub fn as_str(self) -> &'static str {
        match self {
            MigrationOutcome::Migrated => "migrated",
            MigrationOutcome::WouldMigrate => "would_migrate",
            MigrationOutcome::Refused => "refused",
        }
    }

    /// The outcome in words (`would migrate`), for text and pages.
    pub fn words(self) -> &'static str {
        match self {
            MigrationOutcome::Migrated => "migrated",
            MigrationOutcome::WouldMigrate => "would migrate",
            MigrationOutcome::Refused => "refused",
        }
    }
}

/// What a migration did, or would do, to one instance.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct MigrationResult {
    pub instance: String,
    pub outcome: MigrationOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What changes in the decoded snapshot, one line per changed part (`frontier:
    /// ["pay"] -> ["charge"]`); the instance row's deployment changes too.
    pub changes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence_after: Option<u64>,
}

/// How many of a migration's instances ended in each outcome. `total` is their sum; a
/// migration with `refused > 0` left those instances exactly as they were, whatever
/// happened to the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, utoipa::ToSchema)]
pub struct MigrationSummary {
    pub total: u64,
    pub migrated: u64,
    pub would_migrate: u64,
    pub refused: u64,
}

impl MigrationSummary {
    /// The counts of `results`, one per instance.
    pub fn of(results: &[MigrationResult]) -> Self {
        let mut summary = MigrationSummary::default();
        for r in results {
            summary.total += 1;
            match r.outcome {
                MigrationOutcome::Migrated => summary.migrated += 1,
                MigrationOutcome::WouldMigrate => summary.would_migrate += 1,
                MigrationOutcome::Refused => summary.refused += 1,
            }
        }
        summary
    }
}

/// `2 instances: 1 migrated, 1 refused` (only the outcomes that occurred; `0 instances`
/// for a plan that covered none): the line the CLI ends with and the console shows.
impl std::fmt::Display for MigrationSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let noun = if self.total == 1 {
            "instance"
        } else {
            "instances"
        };
        write!(f, "{} {noun}", self.total)?;
        let counts = [
            (self.migrated, MigrationOutcome::Migrated),
            (self.would_migrate, MigrationOutcome::WouldMigrate),
            (self.refused, MigrationOutcome::Refused),
        ];
        let mut sep = ": ";
        for (n, outcome) in counts.into_iter().filter(|(n, _)| *n > 0) {
            write!(f, "{sep}{n} {}", outcome.words())?;
            sep = ", ";
        }
        Ok(())
    }
}

/// A migration's answer (O2): the counts first, so a refusal cannot hide in a long list,
/// then each instance's result in the order the plan covered them.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct MigrationReport {
    pub summary: MigrationSummary,
    pub results: Vec<MigrationResult>,
}

impl MigrationReport {
    /// The report of `results`, counted once here for every front end.
    pub fn new(results: Vec<MigrationResult>) -> Self {
        MigrationReport {
            summary: MigrationSummary::of(&results),
            results,
        }
    }

    /// Whether any instance was (or, in a dry run, would be) refused.
    pub fn any_refused(&self) -> bool {
        self.summary.refused > 0
    }
}

impl Ops {
    /// Migrates the plan's instances (O2), or with `dry_run` shows what it would do and
    /// writes nothing. The plan is checked against both definitions before any instance
    /// is touched; each instance then moves atomically under its fence (a race with a
    /// running lane is settled by the fence), audited, and its result is reported. An
    /// instance refused is an outcome in the report, not an error: the others still move.
    pub async fn migrate(&self, plan: &MigrationPlan, dry_run: bool) -> Result<MigrationReport> {
        let source = self.deployment_record(plan.source).await?;
        let target = self.deployment_record(plan.target).await?;
        if target.retired {
            return Err(Error::Refused(format!(
                "target deployment {} is retired",
                plan.target
            )));
        }
        if plan.source == plan.target {
            return Err(Error::Invalid {
                field: "target",
                why: "the target is the source deployment".to_owned(),
            });
        }
        let from = self.shared.stepper.definition(source.id).await?;
        let to = self.shared.stepper.definition(target.id).await?;
        let mut wrong = Vec::new();
        // A mapping renames nodes; their instances (`pay@2`, `quote#3`, `sub@2/pay`)
        // follow their node, and are not names a plan may map on their own.
        let node_id =
            |p: &qflow_loader::model::Process, id: &str| p.nodes.iter().any(|n| n.id == id);
        for (old, new) in &plan.mapping {
            if from.process.find(old).is_some() && !node_id(&from.process, old) {
                wrong.push(format!(
                    "mapping.{old}: `{old}` names an instance of a node, not a node; map the \
                     node and its instances follow"
                ));
                continue;
            }
            if to.process.find(new).is_some() && !node_id(&to.process, new) {
                wrong.push(format!(
                    "mapping.{old}: `{new}` names an instance of a node, not a node of \
                     deployment {}",
                    plan.target
                ));
                continue;
            }
            if from.process.find(old).is_none() {
                wrong.push(format!(
                    "mapping.{old}: deployment {} has no node `{old}`",
                    plan.source
                ));
            }
            if to.process.find(new).is_none() {
                wrong.push(format!(
                    "mapping.{old}: deployment {} has no node `{new}`",
                    plan.target
                ));
            }
        }
        if !wrong.is_empty() {
            return Err(Error::Invalid {
                field: "mapping",
                why: wrong.join("; "),
            });
        }
        let ids: Vec<InstanceId> = match &plan.instances {
            Some(list) => list
                .iter()
                .map(|s| parse_instance_id(s))
                .collect::<Result<_>>()?,
            None => {
                let mut ids = Vec::new();
                for status in [InstanceStatus::Failed, InstanceStatus::Running] {
                    let filter = InstanceFilter {
                        deployment: Some(source.id),
                        status: Some(status),
                        ..InstanceFilter::default()
                    };
                    ids.extend(self.store().instances(&filter).await?.iter().map(|r| r.id));
                }
                ids
            }
        };
        let mut results = Vec::with_capacity(ids.len());
        for id in ids {
            results.push(self.migrate_one(id, plan, &from, dry_run).await?);
        }
        Ok(MigrationReport::new(results))
    }

    async fn migrate_one(
        &self,
        id: InstanceId,
        plan: &MigrationPlan,
        from: &qflow_core::Definition,
        dry_run: bool,
    ) -> Result<MigrationResult> {
        let refused = |reason: String| MigrationResult {
            instance: id.to_string(),
            outcome: MigrationOutcome::Refused,
            reason: Some(reason),
            changes: Vec::new(),
            fence_after: None,
        };
        let before = self.shared.stepper.claim(id).await?;
        if before.deployment.0 != plan.source {
            return Ok(refused(format!(
                "instance is on deployment {}, not {}",
                before.deployment.0, plan.source
            )));
        }
        if before.snapshot.status() == qflow_core::Status::Running
            && qflow_core::any_attempt_in_flight(from, &before.snapshot)
        {
            return Ok(refused(
                "an attempt is in flight; migrate once it has an outcome or is in a backoff \
                 window"
                    .to_owned(),
            ));
        }
        let timers = self.store().timers(id).await?;
        // The task list's rows, which the step withdraws unless it offers them again.
        let user_tasks = self.store().instance_user_tasks(id).await?;
        let input = Input::Migrate {
            mapping: plan.mapping.clone(),
            timers: timers
                .iter()
                .map(|t| (t.name.to_string(), t.due_at_ms))
                .collect(),
            user_tasks: user_tasks.into_iter().map(|r| r.node).collect(),
        };
        let audit = AuditEntry {
            actor: self.actor.to_string(),
            action: "migrate".to_owned(),
            detail: format!(
                "from={} to={} mapping={:?}",
                plan.source, plan.target, plan.mapping
            ),
        };
        let target = DeploymentId(plan.target);
        let now = (self.shared.now_ms)();
        match self
            .shared
            .stepper
            .migrate(id, target, input, now, Some(&audit), dry_run)
            .await
        {
            Ok(stepped) => {
                // A wait the migration opened may have a kept message due.
                if let Some(runtime) = &self.shared.runtime {
                    runtime.waits_opened(&stepped.opened);
                }
                Ok(MigrationResult {
                    instance: id.to_string(),
                    outcome: if dry_run {
                        MigrationOutcome::WouldMigrate
                    } else {
                        MigrationOutcome::Migrated
                    },
                    reason: None,
                    changes: changes(
                        &before.snapshot.inspect(),
                        &stepped.claim.snapshot.inspect(),
                    ),
                    fence_after: (!dry_run).then_some(stepped.fence),
                })
            }
            Err(qflow_runtime::Error::Refused { why, .. }) => Ok(refused(why)),
            Err(e) => Err(e.into()),
        }
    }
}

/// The parts of a decoded snapshot that differ, one line each: `key: before -> after`.
fn changes(before: &serde_json::Value, after: &serde_json::Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let b = before.as_object().unwrap_or(&empty);
    let a = after.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = b.keys().chain(a.keys()).collect();
    keys.sort();
    keys.dedup();
    let show = |v: Option<&serde_json::Value>| v.map_or("(none)".to_owned(), |v| v.to_string());
    keys.into_iter()
        .filter(|k| b.get(*k) != a.get(*k))
        .map(|k| format!("{k}: {} -> {}", show(b.get(k)), show(a.get(k))))
        .collect()
}
