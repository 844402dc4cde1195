//! The `qflow` binary: a thin dispatcher from command-line arguments to one module per
//! subcommand.
//!
//! `main` only parses arguments, calls [`run`] and turns its result into an exit code
//! (0 success, 1 a checked input was refused, 2 usage or I/O error), ripgrep style. A
//! broken pipe on stdout (`qflow check … | head`) is a normal way to stop, not an error.
//! Nothing here knows what a subcommand does: adding one is a variant in [`Command`] and
//! an arm in [`run`].

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// `eprintln!` that cannot panic: with stderr closed (`qflow simulate … 2>&1 | head -1`)
/// the line is lost instead of the command aborting with a panic (exit 101).
macro_rules! say_err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod check;
mod ops;
mod run;
mod serve;
mod simulate;
mod text;

/// Exit status for "a checked input was refused" (the command itself worked).
pub const EXIT_REFUSED: u8 = 1;
/// Exit status for usage and I/O errors: the command could not do its job.
pub const EXIT_USAGE: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "qflow",
    version,
    about = "A deterministic BPMN-style process engine"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Load BPMN files and print diagnostics like a compiler (SPEC L1–L8).
    Check(check::Args),
    /// The main job: deploy the bundled order model with a flaky payment task on the
    /// embedded SQLite store, run instances, and show attempts, parks and completions.
    Run(run::Args),
    /// Serve the HTTP API (SPEC O1–O5; docs/api.md) on the embedded SQLite store or
    /// PostgreSQL; `--demo` adds the bundled order model and its scripted handlers.
    Serve(serve::Args),
    /// Make a token for `qflow.toml`, or hash one.
    Token(serve::TokenArgs),
    /// Run a model against a scripted scenario on a virtual clock and print the trace as
    /// JSON lines (SPEC S1; formats in docs/simulate.md).
    Simulate(simulate::Args),
    /// Inspect and repair instances on a store: list, show, history, resume, retry-now,
    /// cancel (SPEC O1–O4a; docs/operations.md).
    Instances(ops::InstancesArgs),
    /// Deploy a BPMN model on a store (same content, same version).
    Deploy(ops::DeployArgs),
    /// List the deployments of a store.
    Deployments(ops::StoreArgs),
    /// Retire a deployment: no new instance starts on it (refused while instances
    /// reference it).
    Retire(ops::RetireArgs),
    /// Move FAILED or parked instances onto another deployment with a node mapping;
    /// `--dry-run` shows the per-instance diff and writes nothing (SPEC O2). Ends with the
    /// counts by outcome; exits 1 when any instance was (or would be) refused.
    Migrate(ops::MigrateArgs),
    /// List incidents, of one instance or of all.
    Incidents(ops::IncidentsArgs),
    /// The task list: list waiting user tasks by assignee, candidate group or user;
    /// claim, unclaim and complete them (docs/workers.md, "User tasks").
    UserTasks(ops::UserTasksArgs),
    /// The audit log of operator actions: who changed which instance, when, how.
    Audit(ops::AuditArgs),
    /// Run journaled instances through this build's step function and name the first
    /// step, key and byte where it writes other bytes than the journal recorded (SPEC
    /// G3; docs/replay.md). Read-only; exits 1 on any divergence.
    Replay(ops::ReplayArgs),
}

/// mimalloc instead of the system allocator: a step allocates and frees many small values
/// (maps of the snapshot, effects, bound statement arguments), and glibc's malloc was a
/// sixth of the process's CPU time (docs/performance.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // `--help` and `--version` also arrive here; clap knows which stream and which
            // status they deserve (0 for those, 2 for real usage errors).
            let _ = err.print();
            return ExitCode::from(if err.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            say_err!("qflow: error: {}", text::escape_lines(&error_text(&err)));
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Check(args) => check::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Simulate(args) => simulate::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Token(args) => serve::token(&args),
        Command::Instances(args) => ops::instances(&args),
        Command::Deploy(args) => ops::deploy(&args),
        Command::Deployments(args) => ops::deployments(&args),
        Command::Retire(args) => ops::retire(&args),
        Command::Migrate(args) => ops::migrate(&args),
        Command::Incidents(args) => ops::incidents(&args),
        Command::UserTasks(args) => ops::user_tasks(&args),
        Command::Audit(args) => ops::audit(&args),
        Command::Replay(args) => ops::replay(&args),
    }
}

/// The error and its causes, each said once, joined by `: `. A cause whose text is already
/// part of what was said is left out: thiserror messages that embed their `{source}`
/// (the persistence and store errors) and sqlx's own ("error returned from database:
/// {inner}") would otherwise print the same cause two or three times.
fn error_text(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let said = cause.to_string();
        if text.contains(&said) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&said);
    }
    text
}

/// A reader that went away (`| head`) ends the output early; that is what the user asked
/// for, so it must not print an error or change the exit status.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
