//! `qflow simulate MODEL --scenario FILE` (SPEC S1): the production step function on a
//! virtual clock, driven by a scripted scenario, printed as a JSON-lines trace and a
//! final summary line. Formats: `docs/simulate.md`.
//!
//! This module only reads the two files, reports what is wrong with them, and prints. The
//! scenario format lives in `qflow-golden` (`scenario`) and the driver in `qflow-core`
//! (`sim`, streamed through `qflow_golden::stream`), shared with the golden corpus so that
//! every golden case is a scenario an author can run here. Steps are printed as they are
//! taken and never kept. It never reads the wall clock into the run and never touches a
//! store.

use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use qflow_core::sim::{DeliveryTry, Summary, TraceStep};
use qflow_core::{Attempt, Effect, Input, PathEvent};
use qflow_golden::scenario;
use qflow_loader::diag::Diagnostic;
use qflow_loader::model::Definition;
use serde::Serialize;

use crate::check::render::{write_diagnostic, LineIndex};
use crate::text::{escape, escape_json, plural};
use crate::{EXIT_REFUSED, EXIT_USAGE};

/// Largest scenario file read, in bytes: scenarios are hand-written scripts.
const SCENARIO_MAX_BYTES: u64 = 4 << 20;
/// Largest model file read, in bytes (the loader's own default limit).
const MODEL_MAX_BYTES: u64 = 16 << 20;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The BPMN 2.0 model: one executable process, or several (a collaboration) with
    /// `--process` naming the one to run.
    #[arg(value_name = "MODEL")]
    model: PathBuf,
    /// The id of the process to simulate, when the model (or a `--target` model) has
    /// several executable processes. Default: the model's only process.
    #[arg(long, value_name = "ID")]
    process: Option<String>,
    /// The scenario file (JSON): start variables, handler outcomes per attempt, events,
    /// horizon.
    #[arg(long, value_name = "FILE")]
    scenario: PathBuf,
    /// Print only the step lines, not the summary line.
    #[arg(long, conflicts_with = "summary_only")]
    trace_only: bool,
    /// Print only the summary line.
    #[arg(long)]
    summary_only: bool,
    /// Add each step's persisted snapshot bytes (hex) to its trace line.
    #[arg(long)]
    snapshots: bool,
    /// A model the scenario's `migrate` events may move the instance onto, as
    /// `NAME=FILE` (the event's `target` is `NAME`). Repeat for several.
    #[arg(long = "target", value_name = "NAME=FILE", value_parser = target_arg)]
    targets: Vec<(String, PathBuf)>,
}

fn target_arg(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok((name.to_owned(), PathBuf::from(file)))
        }
        _ => Err(format!("`{text}` is not NAME=FILE (e.g. v2=order-v2.bpmn)")),
    }
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let model_text = match read_text(&args.model, MODEL_MAX_BYTES) {
        Ok(text) => text,
        Err(err) => return Ok(usage_error(&args.model, err)),
    };
    let process = args.process.as_deref();
    let definition = match load_model(&args.model, &model_text, Pick::Model(process)) {
        Ok(def) => def,
        Err(code) => return Ok(code),
    };
    let mut targets = qflow_core::sim::Targets::new();
    for (name, path) in &args.targets {
        let text = match read_text(path, MODEL_MAX_BYTES) {
            Ok(text) => text,
            Err(err) => return Ok(usage_error(path, err)),
        };
        match load_model(path, &text, Pick::Target(process)) {
            Ok(def) => {
                if targets.insert(name.clone(), def).is_some() {
                    say_err!("qflow: --target {name}: given twice");
                    return Ok(ExitCode::from(EXIT_REFUSED));
                }
            }
            Err(code) => return Ok(code),
        }
    }
    let scenario_text = match read_text(&args.scenario, SCENARIO_MAX_BYTES) {
        Ok(text) => text,
        Err(err) => return Ok(usage_error(&args.scenario, err)),
    };
    let scenario = match scenario::parse_with(&scenario_text, &definition, &targets) {
        Ok(s) => s,
        Err(problems) => {
            let shown = args.scenario.display();
            for problem in &problems {
                // Keys and node ids quoted here are the scenario's and the model's text.
                say_err!("{shown}: error: {}", escape(&problem.to_string()));
            }
            say_err!(
                "{shown}: refused: {} (format: docs/simulate.md)",
                plural(problems.len(), "error")
            );
            return Ok(ExitCode::from(EXIT_REFUSED));
        }
    };
    let simulating = || format!("simulating `{}`", args.model.display());
    // Each step is printed as it is taken and then dropped: memory stays flat however
    // many steps the scenario runs.
    let mut steps =
        qflow_core::sim::steps_with(&definition, &scenario, &targets).with_context(simulating)?;
    let mut out = BufWriter::new(io::stdout().lock());
    // The end events reached, each once, in the order first reached: bounded by the
    // model's size however many steps run.
    let mut ends: Vec<String> = Vec::new();
    for step in &mut steps {
        let step = step.with_context(simulating)?;
        for event in &step.path {
            if let PathEvent::End { node, .. } = event {
                if !ends.contains(node) {
                    ends.push(node.clone());
                }
            }
        }
        if !args.summary_only {
            write_line(&mut out, &trace_line(&step, args.snapshots))?;
        }
    }
    let summary = steps.finish().with_context(simulating)?;
    if !args.trace_only {
        let summary = SummaryFields {
            summary: &summary,
            ends: &ends,
        };
        write_line(&mut out, &SummaryLine { summary })?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// One JSON line. Node ids and messages in it are the model's and the scenario's text:
/// characters serde_json leaves raw but a terminal acts on are escaped.
fn write_line(out: &mut impl Write, value: &impl Serialize) -> io::Result<()> {
    let line = serde_json::to_string(value)?;
    out.write_all(escape_json(&line).as_bytes())?;
    out.write_all(b"\n")
}

/// One trace line: the step as the engine's trace records it, with the snapshot shown as
/// its size (and, with `--snapshots`, its bytes in hex). A struct rather than a JSON map
/// so that the fields print in this order.
#[derive(Serialize)]
struct TraceLine<'a> {
    seq: u32,
    at_ms: i64,
    input: &'a Input,
    node: Option<&'a str>,
    attempt: Option<Attempt>,
    effects: &'a [Effect],
    /// The path the step took: flows, decisions, events thrown and caught, ends reached.
    path: &'a [PathEvent],
    /// The failed delivery tries of channel requests since the previous step.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    deliveries: &'a [DeliveryTry],
    snapshot_bytes: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshot: Option<String>,
}

fn trace_line(step: &TraceStep, with_bytes: bool) -> TraceLine<'_> {
    TraceLine {
        seq: step.seq,
        at_ms: step.at_ms,
        input: &step.input,
        node: step.node.as_deref(),
        attempt: attempt_of(step),
        effects: &step.effects,
        path: &step.path,
        deliveries: &step.deliveries,
        snapshot_bytes: step.snapshot.len(),
        snapshot: with_bytes.then(|| hex_text(&step.snapshot)),
    }
}

/// The last line: `{"summary": {...}}`, fields in the engine's order, then the end
/// events the run reached.
#[derive(Serialize)]
struct SummaryLine<'a> {
    summary: SummaryFields<'a>,
}

#[derive(Serialize)]
struct SummaryFields<'a> {
    #[serde(flatten)]
    summary: &'a Summary,
    /// Every end event a token reached, once each, in the order first reached.
    ends: &'a [String],
}

/// The attempt a step reports on (a handler result) or, failing that, the attempt it
/// starts (a re-drive or the first run of a task): what an author looks for in a trace.
fn attempt_of(step: &TraceStep) -> Option<Attempt> {
    step.attempt.or_else(|| {
        step.effects.iter().find_map(|e| match e {
            Effect::RunTask { attempt, .. } => Some(*attempt),
            _ => None,
        })
    })
}

fn hex_text(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Which process of a file to run, as `--process` says.
#[derive(Clone, Copy)]
enum Pick<'a> {
    /// The model: the process named, else its only one.
    Model(Option<&'a str>),
    /// A `--target` model: its only process whatever its id (a migration may move onto
    /// a process of another id), else the one named.
    Target(Option<&'a str>),
}

/// Loads the model and picks the process to run; on refusal prints the diagnostics
/// compiler-style (as `qflow check` does) and returns the exit code to use.
fn load_model(path: &Path, text: &str, pick: Pick<'_>) -> Result<Definition, ExitCode> {
    let shown = path.display();
    match qflow_loader::load_str(text) {
        Ok(loaded) => {
            for warning in &loaded.warnings {
                print_diagnostic(&shown.to_string(), text, warning);
            }
            choose_process(loaded.definitions, pick).map_err(|why| {
                // Process ids are the model's text.
                say_err!("{shown}: error: {}", escape(&why));
                ExitCode::from(EXIT_USAGE)
            })
        }
        Err(diagnostics) => {
            for d in &diagnostics {
                print_diagnostic(&shown.to_string(), text, d);
            }
            let errors = diagnostics.iter().filter(|d| d.is_error()).count();
            say_err!("{shown}: refused: {}", plural(errors, "error"));
            Err(ExitCode::from(EXIT_REFUSED))
        }
    }
}

/// The process a simulation runs (see [`Pick`]). `Err` says why none can be chosen,
/// naming every executable process of the file.
fn choose_process(mut defs: Vec<Definition>, pick: Pick<'_>) -> Result<Definition, String> {
    let process = match pick {
        Pick::Target(_) if defs.len() == 1 => return Ok(defs.remove(0)),
        Pick::Model(p) | Pick::Target(p) => p,
    };
    let ids = || {
        defs.iter()
            .map(|d| format!("`{}`", d.id))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match process {
        Some(id) => match defs.iter().position(|d| d.id == id) {
            Some(at) => Ok(defs.swap_remove(at)),
            None => Err(format!(
                "--process {id}: the model has no executable process `{id}`; its executable \
                 processes: {}",
                ids()
            )),
        },
        None if defs.len() == 1 => Ok(defs.remove(0)),
        None => Err(format!(
            "a simulation runs one process and this model has {} executable processes: {}; \
             choose one with --process ID",
            defs.len(),
            ids()
        )),
    }
}

/// The diagnostic exactly as `qflow check` renders it (shared code), on stderr: stdout is
/// reserved for the trace.
fn print_diagnostic(path: &str, text: &str, d: &Diagnostic) {
    let index = LineIndex::new(text.as_bytes());
    let _ = write_diagnostic(&mut io::stderr().lock(), path, &index, d);
}

fn read_text(path: &Path, max_bytes: u64) -> io::Result<String> {
    let file = std::fs::File::open(path)?;
    if file.metadata()?.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is a directory",
        ));
    }
    let mut bytes = Vec::new();
    file.take(max_bytes + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than the {max_bytes}-byte limit"),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("not UTF-8: {e}")))
}

fn usage_error(path: &Path, err: io::Error) -> ExitCode {
    say_err!("qflow: error: cannot read `{}`: {err}", path.display());
    ExitCode::from(EXIT_USAGE)
}
