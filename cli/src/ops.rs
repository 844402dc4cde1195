//! Operator commands (`qflow instances …`, `qflow deployments`, `qflow incidents`): thin
//! front ends over `qflow_ops::Ops`, working on the store directly — beside a running
//! `qflow run` on the same file, or before one starts. Human tables by default,
//! `--format json` for scripts. Exit status 1 when the operation was refused (nothing
//! changed) — for `migrate`, when any instance was refused, even if others moved — 2 when
//! it could not be attempted.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use qflow_core::Budget;
use qflow_ops::{parse_instance_id, InstanceQuery, Ops};
use qflow_persistence::{PgStore, SqliteStore, StoreFile};
use qflow_store::Store;
use serde::Serialize;

/// Which store the command works on.
#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    /// The SQLite file (the one `qflow run` writes by default). It must exist.
    #[arg(long, global = true, default_value = "qflow-run.sqlite")]
    db: PathBuf,
    /// A PostgreSQL URL to work on instead of a SQLite file.
    #[arg(long, global = true)]
    database_url: Option<String>,
    /// `human` tables, or `json` (one document on stdout).
    #[arg(long, global = true, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Who the audit log names for a change (default: `$USER@cli`).
    #[arg(long, global = true)]
    actor: Option<String>,
    /// The `qflow.toml` the server runs with: its `[delegates]` routes are the ones
    /// deployments are made and loaded under (a deployment made under other routes is
    /// refused, never run as another model), and its `[journal]` journals the steps an
    /// operator takes as the server would.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Journal the steps this command takes (SPEC G3, docs/replay.md), as `qflow run
    /// --journal` and `qflow serve --journal` do theirs, so that a repair leaves no gap
    /// in a journaled instance's history.
    #[arg(long, global = true)]
    journal: bool,
}

impl StoreArgs {
    fn actor(&self) -> String {
        self.actor.clone().unwrap_or_else(|| {
            let user = std::env::var("USER").unwrap_or_else(|_| "unknown".to_owned());
            format!("{user}@cli")
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Human,
    Json,
}

#[derive(Debug, clap::Subcommand)]
pub enum InstancesCommand {
    /// List instances, oldest first.
    List {
        /// Only instances of this deployment version.
        #[arg(long)]
        deployment: Option<i64>,
        /// Only instances in this state: running, completed, failed, cancelled.
        #[arg(long)]
        state: Option<String>,
        /// Only FAILED instances with this failure code.
        #[arg(long)]
        code: Option<String>,
        /// At most this many (the store caps it at 10,000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Only the instance with this business key.
        #[arg(long)]
        business_key: Option<String>,
        /// Continue a listing after the page that printed this cursor.
        #[arg(long)]
        cursor: Option<String>,
        /// Only instances that stand at this node: an open incident on it, a retry park,
        /// `q:timeout` window or timer catch of it, or a message subscription at it.
        #[arg(long)]
        node: Option<String>,
        /// Only instances that ended (completed or cancelled) at or after this instant
        /// (ms since the epoch).
        #[arg(long)]
        ended_from: Option<i64>,
        /// Only instances that ended before this instant.
        #[arg(long)]
        ended_to: Option<i64>,
    },
    /// Show one instance decoded: state, failure, wait frontier, variables, attempt
    /// counters, backoff markers, timers with their due instants, incidents.
    Show { id: String },
    /// Every attempt of every task of an instance, with outcome, code and timing.
    History { id: String },
    /// Resume a FAILED instance: its failed task runs a new attempt. Refused for any
    /// instance that is not FAILED.
    Resume {
        id: String,
        /// Start the failed task's retry budget over (default: the attempts burned count).
        #[arg(long)]
        reset_budget: bool,
    },
    /// Run the next attempt of a task in a backoff window now, without touching its
    /// attempt counter. Refused when no backoff is pending.
    RetryNow {
        id: String,
        /// The task to retry (default: every task of the instance in a backoff window).
        #[arg(long)]
        node: Option<String>,
    },
    /// Cancel a running or FAILED instance (a FAILED one's incident is resolved).
    Cancel { id: String },
    /// Complete a waiting user task, with variables merged into the instance's.
    Complete {
        id: String,
        /// The user task's id in the model.
        node: String,
        /// A JSON object of variables.
        #[arg(long, default_value = "{}")]
        variables: String,
        /// Who completes it: refused while somebody else holds the task.
        #[arg(long)]
        assignee: Option<String>,
    },
    /// Deliver a message to an instance: what waits for it there completes.
    Message {
        id: String,
        /// The message name.
        name: String,
        /// A JSON object of variables.
        #[arg(long, default_value = "{}")]
        variables: String,
    },
    /// Publish a message by name and correlation key: the one instance whose wait for it
    /// opened a subscription under this key (`q:correlationKey`) receives it.
    Correlate {
        /// The message name.
        name: String,
        /// The correlation key the waiting instance's key evaluated to.
        key: String,
        /// A JSON object of variables.
        #[arg(long, default_value = "{}")]
        variables: String,
        /// Deliver to every waiting instance with this key, not exactly one.
        #[arg(long)]
        all: bool,
        /// Keep the message this many milliseconds for waits that open later under the
        /// name and key, each process taking it once (docs/messages.md).
        #[arg(long, default_value_t = 0)]
        time_to_live_ms: i64,
        /// With a time to live: refused while a message with this id, name and key is
        /// kept.
        #[arg(long)]
        message_id: Option<String>,
    },
}

/// `--variables`, parsed: a JSON object, or a refusal naming the flag.
fn variables_arg(text: &str) -> Result<qflow_core::Variables, qflow_ops::Error> {
    serde_json::from_str::<qflow_core::Variables>(text).map_err(|e| qflow_ops::Error::Invalid {
        field: "--variables",
        why: format!("not a JSON object: {e}"),
    })
}

#[derive(Debug, clap::Args)]
pub struct InstancesArgs {
    #[command(subcommand)]
    command: InstancesCommand,
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// Only the actions on this instance.
    #[arg(long)]
    instance: Option<String>,
    /// At most this many, the newest.
    #[arg(long, default_value_t = 100)]
    limit: u32,
    #[command(flatten)]
    store: StoreArgs,
}

/// The optional `--instance` of a command, parsed.
fn instance_arg(arg: &Option<String>) -> Result<Option<qflow_store::InstanceId>, qflow_ops::Error> {
    arg.as_deref().map(parse_instance_id).transpose()
}

pub fn audit(args: &AuditArgs) -> Result<ExitCode> {
    with_ops(&args.store, |ops| async move {
        let instance = instance_arg(&args.instance)?;
        let rows = ops.audit(instance, args.limit).await?;
        emit(args.store.format, &rows, |w| {
            for a in &rows {
                let before = a.fence_before.map_or("-".to_owned(), |f| f.to_string());
                writeln!(
                    w,
                    "{:>13}  {:<16} {:<10} {} fence {before} -> {}  {}",
                    a.at_ms, a.actor, a.action, a.instance, a.fence_after, a.detail
                )?;
            }
            writeln!(w, "{} actions", rows.len())
        })
    })
}

#[derive(Debug, clap::Args)]
pub struct IncidentsArgs {
    #[command(subcommand)]
    command: Option<IncidentsCommand>,
    /// Only the incidents of this instance.
    #[arg(long)]
    instance: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Debug, clap::Subcommand)]
enum IncidentsCommand {
    /// List incidents (the default): `qflow incidents [--instance ID]`.
    List,
    /// Resolve the open incidents of an instance on a node by hand (audited).
    Resolve {
        id: String,
        /// The node the incident is on.
        node: String,
    },
}

pub fn instances(args: &InstancesArgs) -> Result<ExitCode> {
    with_ops(&args.store, |ops| async move {
        let format = args.store.format;
        match &args.command {
            InstancesCommand::List {
                deployment,
                state,
                code,
                limit,
                cursor,
                business_key,
                node,
                ended_from,
                ended_to,
            } => {
                let query = InstanceQuery {
                    deployment: *deployment,
                    status: state.clone(),
                    failure_code: code.clone(),
                    cursor: cursor.clone(),
                    business_key: business_key.clone(),
                    node: node.clone(),
                    ended_from_ms: *ended_from,
                    ended_to_ms: *ended_to,
                    limit: *limit,
                    ..InstanceQuery::default()
                };
                let page = ops.instances(&query).await?;
                if let Some(next) = &page.next {
                    // On stderr, so `--format json` stays one array on stdout.
                    say_err!("qflow: more instances follow: add `--cursor {next}`");
                }
                let rows = page.items;
                emit(format, &rows, |w| {
                    writeln!(
                        w,
                        "{:<36}  {:>10}  {:<9}  code",
                        "instance", "deployment", "state"
                    )?;
                    for r in &rows {
                        let code = r.failure_code.as_deref().unwrap_or("");
                        writeln!(
                            w,
                            "{:<36}  {:>10}  {:<9}  {code}",
                            r.id, r.deployment, r.status
                        )?;
                    }
                    writeln!(w, "{} instances", rows.len())
                })
            }
            InstancesCommand::Show { id } => {
                let view = ops.inspect(parse_instance_id(id)?).await?;
                emit(format, &view, |w| {
                    let i = &view.instance;
                    writeln!(w, "instance    {}", i.id)?;
                    let d = &view.deployment;
                    writeln!(
                        w,
                        "deployment  {} ({}, version {})",
                        d.process_id, d.content_hash, d.id
                    )?;
                    let code = i
                        .failure_code
                        .as_deref()
                        .map(|c| format!(" {c}"))
                        .unwrap_or_default();
                    writeln!(w, "state       {}{code} (fence {})", i.status, i.fence)?;
                    writeln!(
                        w,
                        "snapshot    {}",
                        serde_json::to_string_pretty(&view.snapshot)?
                    )?;
                    for t in &view.timers {
                        writeln!(
                            w,
                            "timer       {} due {} (incarnation {})",
                            t.name, t.due_at_ms, t.incarnation
                        )?;
                    }
                    for x in &view.incidents {
                        let state = if x.resolved_at_ms.is_some() {
                            "resolved"
                        } else {
                            "open"
                        };
                        writeln!(
                            w,
                            "incident    #{} {state} at `{}`: {} {}",
                            x.id, x.node, x.code, x.message
                        )?;
                    }
                    Ok(())
                })
            }
            InstancesCommand::History { id } => {
                let rows = ops.history(parse_instance_id(id)?).await?;
                emit(format, &rows, |w| {
                    writeln!(
                        w,
                        "{:<16} {:>7}  {:<11} {:>13} {:>13}  code",
                        "node", "attempt", "outcome", "started", "finished"
                    )?;
                    for a in &rows {
                        let code = a.code.as_deref().unwrap_or("");
                        writeln!(
                            w,
                            "{:<16} {:>7}  {:<11} {:>13} {:>13}  {code}",
                            a.node, a.attempt, a.outcome, a.started_at_ms, a.finished_at_ms
                        )?;
                    }
                    Ok(())
                })
            }
            InstancesCommand::Resume { id, reset_budget } => {
                let budget = if *reset_budget {
                    Budget::Reset
                } else {
                    Budget::Keep
                };
                let done = ops.resume(parse_instance_id(id)?, budget).await?;
                emit(format, &done, |w| applied(w, "resumed", &done))
            }
            InstancesCommand::RetryNow { id, node } => {
                let done = ops.retry_now(parse_instance_id(id)?, node.clone()).await?;
                emit(format, &done, |w| applied(w, "retrying now", &done))
            }
            InstancesCommand::Cancel { id } => {
                let done = ops.cancel(parse_instance_id(id)?).await?;
                emit(format, &done, |w| applied(w, "cancelled", &done))
            }
            InstancesCommand::Complete {
                id,
                node,
                variables,
                assignee,
            } => {
                let id = parse_instance_id(id)?;
                let vars = variables_arg(variables)?;
                let done = ops
                    .complete_user_task(id, node, vars, assignee.as_deref())
                    .await?;
                emit(format, &done, |w| {
                    applied(w, "completed the user task", &done)
                })
            }
            InstancesCommand::Message {
                id,
                name,
                variables,
            } => {
                let id = parse_instance_id(id)?;
                let vars = variables_arg(variables)?;
                let done = ops.deliver_message(id, name, vars).await?;
                emit(format, &done, |w| applied(w, "delivered", &done))
            }
            InstancesCommand::Correlate {
                name,
                key,
                variables,
                all,
                time_to_live_ms,
                message_id,
            } => {
                let request = qflow_ops::MessageRequest {
                    name: name.clone(),
                    correlation_key: key.clone(),
                    variables: variables_arg(variables)?,
                    all: *all,
                    time_to_live_ms: Some(*time_to_live_ms),
                    message_id: message_id.clone(),
                };
                let done = ops.correlate(request).await?;
                emit(format, &done, |w| {
                    for d in &done.deliveries {
                        match &d.applied {
                            // Node ids and reasons are the model's text: escaped.
                            Some(a) => {
                                let what =
                                    format!("delivered at `{}`", crate::text::escape(&d.node));
                                applied(w, &what, a)?
                            }
                            None => writeln!(
                                w,
                                "{}: not delivered at `{}`: {}",
                                d.instance,
                                crate::text::escape(&d.node),
                                crate::text::escape(d.reason.as_deref().unwrap_or(""))
                            )?,
                        }
                    }
                    if let Some(kept) = &done.buffered {
                        writeln!(
                            w,
                            "kept as message {} until {} ms, for waits that open later",
                            kept.key, kept.expires_at_ms
                        )?;
                    }
                    Ok(())
                })
            }
        }
    })
}

#[derive(Debug, clap::Args)]
pub struct UserTasksArgs {
    #[command(subcommand)]
    command: UserTasksCommand,
    #[command(flatten)]
    store: StoreArgs,
}

/// The task list (docs/workers.md, "User tasks"): thin front ends over `qflow_ops`.
#[derive(Debug, clap::Subcommand)]
pub enum UserTasksCommand {
    /// List waiting user tasks, oldest first. Every filter given must hold.
    List {
        /// Only tasks this person holds.
        #[arg(long)]
        assignee: Option<String>,
        /// Only tasks offered to this group; repeat for any of several.
        #[arg(long = "candidate-group")]
        candidate_groups: Vec<String>,
        /// Only tasks offered to this person by name.
        #[arg(long)]
        candidate_user: Option<String>,
        /// Only tasks of instances on this deployment version.
        #[arg(long)]
        deployment: Option<i64>,
        /// Only tasks nobody holds.
        #[arg(long, conflicts_with = "assigned")]
        unassigned: bool,
        /// Only tasks somebody holds.
        #[arg(long)]
        assigned: bool,
        /// Continue a listing after the page that printed this cursor.
        #[arg(long)]
        cursor: Option<String>,
        /// At most this many (1..=1,000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Show one waiting user task with its assignment and variables.
    Show {
        id: String,
        /// The user task's id in the model.
        node: String,
    },
    /// Claim a waiting user task for a person: refused while somebody else holds it,
    /// unless `--force`.
    Claim {
        id: String,
        node: String,
        /// Who claims it.
        assignee: String,
        /// Take it over from whoever holds it.
        #[arg(long)]
        force: bool,
    },
    /// Give a waiting user task back: nobody holds it.
    Unclaim {
        id: String,
        node: String,
        /// Refused unless this person holds it (default: whoever does).
        #[arg(long)]
        assignee: Option<String>,
    },
    /// Offer again every waiting user task that has no row in the task list: run once
    /// after upgrading a store whose instances waited at user tasks before the task
    /// list existed (audited as `offer_user_tasks`).
    Backfill,
    /// Complete a waiting user task with variables.
    Complete {
        id: String,
        node: String,
        /// A JSON object of variables.
        #[arg(long, default_value = "{}")]
        variables: String,
        /// Who completes it: refused while somebody else holds the task.
        #[arg(long)]
        assignee: Option<String>,
    },
}

pub fn user_tasks(args: &UserTasksArgs) -> Result<ExitCode> {
    use crate::text::escape;
    with_ops(&args.store, |ops| async move {
        let format = args.store.format;
        match &args.command {
            UserTasksCommand::List {
                assignee,
                candidate_groups,
                candidate_user,
                deployment,
                unassigned,
                assigned,
                cursor,
                limit,
            } => {
                let query = qflow_ops::UserTaskListQuery {
                    assignee: assignee.clone(),
                    candidate_groups: candidate_groups.clone(),
                    candidate_user: candidate_user.clone(),
                    deployment: *deployment,
                    assigned: match (assigned, unassigned) {
                        (true, _) => Some(true),
                        (_, true) => Some(false),
                        _ => None,
                    },
                    cursor: cursor.clone(),
                    limit: *limit,
                };
                let page = ops.user_tasks(&query).await?;
                if let Some(next) = &page.next {
                    say_err!("qflow: more user tasks follow: add `--cursor {next}`");
                }
                let rows = page.items;
                emit(format, &rows, |w| {
                    writeln!(
                        w,
                        "{:<36}  {:<20} {:<16} {:>13}  candidates",
                        "instance", "task", "assignee", "created"
                    )?;
                    for t in &rows {
                        let mut candidates: Vec<String> = t.candidate_groups.clone();
                        candidates.extend(t.candidate_users.iter().map(|u| format!("@{u}")));
                        writeln!(
                            w,
                            "{:<36}  {:<20} {:<16} {:>13}  {}",
                            t.instance,
                            t.node,
                            t.assignee.as_deref().unwrap_or("-"),
                            t.created_at_ms,
                            candidates.join(", ")
                        )?;
                    }
                    writeln!(w, "{} user tasks", rows.len())
                })
            }
            UserTasksCommand::Show { id, node } => {
                let task = ops.user_task(parse_instance_id(id)?, node).await?;
                emit(format, &task, |w| {
                    let t = &task.task;
                    writeln!(w, "instance    {}", t.instance)?;
                    match &t.name {
                        Some(n) => writeln!(w, "task        {} ({})", t.node, escape(n))?,
                        None => writeln!(w, "task        {}", t.node)?,
                    }
                    writeln!(w, "process     {} (version {})", t.process_id, t.deployment)?;
                    writeln!(w, "assignee    {}", t.assignee.as_deref().unwrap_or("-"))?;
                    writeln!(w, "groups      {}", t.candidate_groups.join(", "))?;
                    writeln!(w, "users       {}", t.candidate_users.join(", "))?;
                    writeln!(w, "created     {}", t.created_at_ms)?;
                    writeln!(
                        w,
                        "variables   {}",
                        serde_json::to_string_pretty(&task.variables)?
                    )
                })
            }
            UserTasksCommand::Backfill => {
                let done = ops.backfill_user_tasks().await?;
                emit(format, &done, |w| {
                    writeln!(
                        w,
                        "{} running instances examined; user tasks offered again on {}; {} moved on meanwhile",
                        done.examined,
                        done.offered.len(),
                        done.skipped
                    )?;
                    for id in &done.offered {
                        writeln!(w, "  {id}")?;
                    }
                    Ok(())
                })
            }
            UserTasksCommand::Claim {
                id,
                node,
                assignee,
                force,
            } => {
                let id = parse_instance_id(id)?;
                let done = ops.claim_user_task(id, node, assignee, *force).await?;
                emit(format, &done, |w| {
                    applied(w, "claimed the user task", &done)
                })
            }
            UserTasksCommand::Unclaim { id, node, assignee } => {
                let id = parse_instance_id(id)?;
                let done = ops.unclaim_user_task(id, node, assignee.as_deref()).await?;
                emit(format, &done, |w| {
                    applied(w, "gave the user task back", &done)
                })
            }
            UserTasksCommand::Complete {
                id,
                node,
                variables,
                assignee,
            } => {
                let id = parse_instance_id(id)?;
                let vars = variables_arg(variables)?;
                let done = ops
                    .complete_user_task(id, node, vars, assignee.as_deref())
                    .await?;
                emit(format, &done, |w| {
                    applied(w, "completed the user task", &done)
                })
            }
        }
    })
}

#[derive(Debug, clap::Args)]
pub struct DeployArgs {
    /// The BPMN file.
    file: PathBuf,
    /// The executable process to deploy, when the file has several.
    #[arg(long)]
    process: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Debug, clap::Args)]
pub struct RetireArgs {
    /// The deployment version.
    version: i64,
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The plan, a JSON file: `{"source": 1, "target": 2, "mapping": {"pay": "charge"},
    /// "instances": ["…"]}` (`instances` optional: every FAILED or running instance of
    /// the source).
    plan: PathBuf,
    /// Show per instance what would change, and write nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    store: StoreArgs,
}

pub fn migrate(args: &MigrateArgs) -> Result<ExitCode> {
    let text = std::fs::read_to_string(&args.plan)
        .with_context(|| format!("reading {}", args.plan.display()))?;
    let plan: qflow_ops::MigrationPlan = match serde_json::from_str(&text) {
        Ok(plan) => plan,
        Err(e) => {
            say_err!("qflow: invalid: {}: {e}", args.plan.display());
            return Ok(ExitCode::from(crate::EXIT_REFUSED));
        }
    };
    with_ops_status(&args.store, |ops| async move {
        let report = ops.migrate(&plan, args.dry_run).await?;
        let rendered = emit(args.store.format, &report, |w| {
            for r in &report.results {
                writeln!(w, "{} {}", r.instance, r.outcome.words())?;
                if let Some(why) = &r.reason {
                    for line in why.lines() {
                        writeln!(w, "    {line}")?;
                    }
                }
                for c in &r.changes {
                    writeln!(w, "    {c}")?;
                }
            }
            // Last, where a reader of the terminal looks first.
            writeln!(w, "{}", report.summary)
        })?;
        // A refused instance is left as it was while the others moved (or, in a dry run,
        // would): the plan did not do all it says, so a script must not read success.
        let status = if report.any_refused() {
            ExitCode::from(crate::EXIT_REFUSED)
        } else {
            ExitCode::SUCCESS
        };
        Ok((rendered, status))
    })
}

pub fn deploy(args: &DeployArgs) -> Result<ExitCode> {
    let source = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    with_ops(&args.store, |ops| async move {
        let d = ops.deploy(&source, args.process.as_deref()).await?;
        emit(args.store.format, &d, |w| {
            writeln!(
                w,
                "deployed {} as version {} ({})",
                d.process_id, d.id, d.content_hash
            )?;
            for t in &d.topics {
                let by = if t.bindings.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", t.bindings.join(", "))
                };
                writeln!(
                    w,
                    "  needs a worker on topic `{}`: {}{by}",
                    t.topic,
                    t.tasks.join(", ")
                )?;
            }
            Ok(())
        })
    })
}

pub fn retire(args: &RetireArgs) -> Result<ExitCode> {
    with_ops(&args.store, |ops| async move {
        let d = ops.retire(args.version).await?;
        emit(args.store.format, &d, |w| {
            writeln!(w, "retired version {} of {}", d.id, d.process_id)
        })
    })
}

pub fn deployments(args: &StoreArgs) -> Result<ExitCode> {
    with_ops(args, |ops| async move {
        let rows = ops.deployments().await?;
        emit(args.format, &rows, |w| {
            writeln!(
                w,
                "{:>7}  {:<24} {:<13} {:<8} hash",
                "version", "process", "deployed", "state"
            )?;
            for d in &rows {
                let state = if d.retired { "retired" } else { "live" };
                writeln!(
                    w,
                    "{:>7}  {:<24} {:<13} {state:<8} {}",
                    d.id, d.process_id, d.deployed_at_ms, d.content_hash
                )?;
                for s in &d.schedules {
                    let left = s
                        .remaining
                        .map_or("unbounded".to_owned(), |r| format!("{r} left"));
                    writeln!(
                        w,
                        "{:>9}timer start `{}`: next at {} ({left})",
                        "", s.start_event, s.next_start_at_ms
                    )?;
                }
            }
            Ok(())
        })
    })
}

pub fn incidents(args: &IncidentsArgs) -> Result<ExitCode> {
    with_ops(&args.store, |ops| async move {
        if let Some(IncidentsCommand::Resolve { id, node }) = &args.command {
            let done = ops.resolve_incident(parse_instance_id(id)?, node).await?;
            return emit(args.store.format, &done, |w| {
                applied(w, "resolved the incident", &done)
            });
        }
        let instance = instance_arg(&args.instance)?;
        let rows = ops.incidents(instance, 0).await?;
        emit(args.store.format, &rows, |w| {
            for x in &rows {
                let state = if x.resolved_at_ms.is_some() {
                    "resolved"
                } else {
                    "open"
                };
                writeln!(
                    w,
                    "#{:<5} {state:<8} {} `{}`: {} {}",
                    x.id, x.instance, x.node, x.code, x.message
                )?;
            }
            writeln!(w, "{} incidents", rows.len())
        })
    })
}

fn applied(w: &mut dyn Write, what: &str, done: &qflow_ops::Applied) -> std::io::Result<()> {
    writeln!(
        w,
        "{what}: instance {} is {} (fence {} -> {})",
        done.instance, done.status, done.fence_before, done.fence_after
    )?;
    if !done.attempts_started.is_empty() {
        writeln!(
            w,
            "attempts handed to the runtime serving the store: {}",
            done.attempts_started.join(", ")
        )?;
    }
    Ok(())
}

/// Renders `value` as JSON, or with `human` as a table.
fn emit<T: Serialize>(
    format: Format,
    value: &T,
    human: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<Vec<u8>, qflow_ops::Error> {
    let mut out = Vec::new();
    let written = match format {
        Format::Json => serde_json::to_writer_pretty(&mut out, value)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out)),
        Format::Human => human(&mut out),
    };
    written.map_err(|e| qflow_ops::Error::Store(format!("rendering the output: {e}")))?;
    Ok(out)
}

/// Opens the store, runs `op` on a current-thread runtime, prints what it rendered and
/// maps its result to the exit status: a refusal (or an unknown instance) is 1 with the
/// reason on stderr.
fn with_ops<F, Fut>(args: &StoreArgs, op: F) -> Result<ExitCode>
where
    F: FnOnce(Ops) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<u8>, qflow_ops::Error>>,
{
    with_ops_status(args, move |ops| async move {
        op(ops).await.map(|rendered| (rendered, ExitCode::SUCCESS))
    })
}

/// [`with_ops`] for an operation whose answer carries its own exit status (a migration
/// that refused some instances prints its report and exits 1).
fn with_ops_status<F, Fut>(args: &StoreArgs, op: F) -> Result<ExitCode>
where
    F: FnOnce(Ops) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<u8>, ExitCode), qflow_ops::Error>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let store = open_store(args).await?;
        let clock: Arc<dyn Fn() -> i64 + Send + Sync> = Arc::new(|| {
            use qflow_runtime::Clock;
            qflow_runtime::SystemClock.now_ms()
        });
        let mut ops = Ops::new(store.clone(), clock, args.actor());
        if let Some(path) = &args.config {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let config =
                qflow_server::config::ServerConfig::from_toml(&text, &path.display().to_string())?;
            ops = ops
                .with_delegates(config.delegates)
                .with_journal(config.journal);
        }
        if args.journal {
            ops = ops.with_journal(qflow_runtime::journal::JournalPolicy::All);
        }
        let outcome = op(ops).await;
        // Closed, a SQLite file is whole on its own: the WAL is folded into it and the
        // `-wal` and `-shm` files beside it are removed.
        store.close().await;
        match outcome {
            Ok((rendered, status)) => {
                // Node ids, codes and messages come from models and handlers: their
                // control characters are escaped, in JSON as JSON escapes.
                let rendered = String::from_utf8_lossy(&rendered);
                let shown = match args.format {
                    Format::Human => crate::text::escape_lines(&rendered),
                    Format::Json => crate::text::escape_json(&rendered),
                };
                std::io::stdout().lock().write_all(shown.as_bytes())?;
                Ok(status)
            }
            Err(e @ qflow_ops::Error::Store(_)) => Err(anyhow::Error::new(e)),
            Err(e) => {
                let message = e.to_string();
                say_err!("qflow: {}: {}", e.code(), crate::text::escape(&message));
                Ok(ExitCode::from(crate::EXIT_REFUSED))
            }
        }
    })
}

async fn open_store(args: &StoreArgs) -> Result<Arc<dyn Store>> {
    if let Some(url) = &args.database_url {
        let store = PgStore::connect(url)
            .await
            .context("connecting to PostgreSQL")?;
        return Ok(Arc::new(store));
    }
    // The same judgement `qflow run` and `SqliteStore::open` make, stricter: an operator
    // command never creates a store, in a missing file or an empty one.
    match SqliteStore::inspect(&args.db).await? {
        StoreFile::Qflow => {}
        StoreFile::Missing | StoreFile::Empty => bail!(
            "no qflow store at {}: `qflow run` creates one, or name another with --db",
            args.db.display()
        ),
        StoreFile::Foreign(found) => bail!(
            "{} is not a qflow store: it is {found}; name a qflow store with --db",
            args.db.display()
        ),
    }
    // The error names the file.
    let store = SqliteStore::open(&args.db).await?;
    Ok(Arc::new(store))
}

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Replay this instance alone.
    #[arg(long)]
    instance: Option<String>,
    /// Only instances of this deployment (its version number).
    #[arg(long)]
    deployment: Option<i64>,
    /// Only instances in this status: running, completed, failed or cancelled.
    #[arg(long)]
    status: Option<String>,
    /// Only instances created at or after this instant (ms since the epoch).
    #[arg(long)]
    created_from_ms: Option<i64>,
    /// Only instances created before this instant (ms since the epoch).
    #[arg(long)]
    created_to_ms: Option<i64>,
    /// At most this many instances (default: every one, up to a million).
    #[arg(long, default_value_t = 0)]
    limit: u32,
    /// Instead of replaying: write this instance's journal as files `qflow simulate`
    /// plays (model.bpmn, scenario.json, target-v<N>.bpmn for each deployment it migrated
    /// onto, expect.json: a golden case's layout) into `--out`.
    #[arg(long, requires = "out")]
    export_scenario: Option<String>,
    /// The directory `--export-scenario` writes; created, and refused when it exists and
    /// is not empty.
    #[arg(long, requires = "export_scenario")]
    out: Option<PathBuf>,
    #[command(flatten)]
    store: StoreArgs,
}

/// `qflow replay`: runs journaled instances through this build's step function and
/// names the first step, key and byte where what it writes differs from the journal
/// (docs/replay.md). Exits 1 on any divergence.
pub fn replay(args: &ReplayArgs) -> Result<ExitCode> {
    use std::io::IsTerminal;
    if let (Some(id), Some(out)) = (&args.export_scenario, &args.out) {
        return export_scenario(args, id, out);
    }
    with_ops_status(&args.store, |ops| async move {
        let request = qflow_ops::replay::ReplayRequest {
            instance: instance_arg(&args.instance)?,
            deployment: args.deployment,
            status: args.status.clone(),
            created_from_ms: args.created_from_ms,
            created_to_ms: args.created_to_ms,
            limit: args.limit,
        };
        // Progress on a terminal only, on stderr, at most every half second.
        let tty = std::io::stderr().is_terminal();
        let mut seen = 0u64;
        let mut last = std::time::Instant::now();
        let mut progress = |_: &qflow_ops::replay::InstanceReplay| {
            seen += 1;
            if tty && last.elapsed() >= std::time::Duration::from_millis(500) {
                last = std::time::Instant::now();
                eprint!("\rqflow replay: {seen} instances replayed");
            }
        };
        let report = ops.replay(&request, &mut progress).await?;
        if tty && seen > 0 {
            say_err!("\rqflow replay: {seen} instances replayed");
        }
        let rendered = emit(args.store.format, &report, |w| write_replay(w, &report))?;
        let status = if report.diverged() {
            ExitCode::from(crate::EXIT_REFUSED)
        } else {
            ExitCode::SUCCESS
        };
        Ok((rendered, status))
    })
}

fn write_replay(w: &mut dyn Write, r: &qflow_ops::replay::ReplayReport) -> std::io::Result<()> {
    use qflow_ops::replay::Outcome;
    for d in &r.details {
        let outcome = match d.outcome {
            Outcome::Identical => "identical",
            Outcome::Reencoded => "re-encoded, same meaning",
            Outcome::Divergent => "DIVERGENT",
            Outcome::NotReplayable => "not replayable",
            Outcome::NotJournaled => "not journaled",
        };
        writeln!(
            w,
            "{} (deployment {}): {outcome} after {} step(s)",
            d.instance, d.deployment, d.steps
        )?;
        if d.reencoded_steps > 0 {
            writeln!(
                w,
                "    {} step(s) re-encoded with the same meaning",
                d.reencoded_steps
            )?;
        }
        if let Some(why) = &d.reason {
            writeln!(w, "    {why}")?;
        }
        if let Some(div) = &d.divergence {
            let kind = serde_json::to_value(div.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            writeln!(
                w,
                "    first divergent step: {} at {} ms ({kind})",
                div.seq, div.at_ms
            )?;
            writeln!(w, "    input:    {}", div.input)?;
            if let Some(key) = &div.key {
                let at = div.offset.map_or(String::new(), |o| format!(", byte {o}"));
                writeln!(w, "    key:      {key}{at}")?;
            } else if let Some(o) = div.offset {
                writeln!(w, "    byte:     {o}")?;
            }
            writeln!(w, "    recorded: {}", div.recorded)?;
            writeln!(w, "    replayed: {}", div.replayed)?;
        }
    }
    if r.details_left_out > 0 {
        writeln!(w, "({} more instances not shown)", r.details_left_out)?;
    }
    writeln!(
        w,
        "{} instances: {} replayed ({} identical, {} re-encoded, {} divergent), {} not \
         replayable, {} not journaled; {} steps, {} journal bytes",
        r.instances,
        r.replayed,
        r.identical,
        r.reencoded,
        r.divergent,
        r.not_replayable,
        r.not_journaled,
        r.steps,
        r.journal_bytes
    )
}

fn export_scenario(args: &ReplayArgs, id: &str, out: &Path) -> Result<ExitCode> {
    if out.exists()
        && std::fs::read_dir(out)
            .with_context(|| format!("reading {}", out.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{} exists and is not empty: name a new directory",
            out.display()
        );
    }
    with_ops(&args.store, |ops| async move {
        let id = parse_instance_id(id)?;
        let exported = ops.export_scenario(id).await?;
        let write = |name: &str, text: &str| {
            std::fs::write(out.join(name), text).map_err(|e| {
                qflow_ops::Error::Store(format!("writing {}: {e}", out.join(name).display()))
            })
        };
        std::fs::create_dir_all(out)
            .map_err(|e| qflow_ops::Error::Store(format!("creating {}: {e}", out.display())))?;
        let scenario = serde_json::to_string_pretty(&exported.scenario)
            .map_err(|e| qflow_ops::Error::Store(format!("rendering the scenario: {e}")))?;
        write("model.bpmn", &exported.model)?;
        write("scenario.json", &format!("{scenario}\n"))?;
        write("expect.json", &format!("{}\n", exported.expect))?;
        let mut targets = String::new();
        for (name, source) in &exported.targets {
            write(&format!("target-{name}.bpmn"), source)?;
            targets.push_str(&format!(
                " --target {name}={}/target-{name}.bpmn",
                out.display()
            ));
        }
        let steps = exported.scenario.inputs.as_ref().map_or(0, Vec::len);
        let mut text = Vec::new();
        writeln!(
            text,
            "wrote {steps} recorded inputs of {id} to {}; play them with:\n  qflow simulate \
             {dir}/model.bpmn --scenario {dir}/scenario.json --process {}{targets}",
            out.display(),
            exported.process_id,
            dir = out.display()
        )
        .map_err(|e| qflow_ops::Error::Store(e.to_string()))?;
        Ok(text)
    })
}
