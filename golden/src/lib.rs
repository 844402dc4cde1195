//! The golden snapshot corpus (SPEC G1–G2): models plus scripted scenarios, with the exact
//! snapshot bytes every step persisted committed beside them, so that any change to what
//! the engine writes is caught byte for byte.
//!
//! A case is a directory `cases/<name>/` holding `model.bpmn`, `scenario.json` (the same
//! file format `qflow simulate` reads, parsed by [`scenario`]), `expect.json` (the end
//! state the case's author meant, checked on every run so that a bless cannot quietly
//! record a wrong outcome) and `steps/NNNN.msgpack`, one file per step. The test in
//! `tests/golden.rs` re-runs every case and compares bytes; [`bless`] rewrites the step
//! files and is only ever run on purpose (see `docs/golden.md`).
//!
//! This crate never changes a committed file unless a bless was asked for.

pub mod diff;
pub mod scenario;
pub mod view;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use qflow_core::sim::{self, Trace};
use qflow_loader::model::Definition;
use serde::{Deserialize, Serialize};

/// Everything that can go wrong reading, running or blessing a case.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: the model does not load:\n{diagnostics}")]
    Model { path: PathBuf, diagnostics: String },
    #[error("{path}: {problems}")]
    Scenario { path: PathBuf, problems: String },
    #[error("{path}: {message}")]
    Expect { path: PathBuf, message: String },
    #[error("the simulation stopped: {0}")]
    Sim(#[from] qflow_core::Error),
}

/// One golden case on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    pub name: String,
    pub dir: PathBuf,
}

/// The end state a case's author intended. Every field present is checked.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// `completed`, `failed`, `running`, ...
    pub state: String,
    #[serde(default)]
    pub failure_code: Option<String>,
    /// Attempts per node, exactly as the summary reports them (nodes absent from the map
    /// are not checked).
    #[serde(default)]
    pub attempts: BTreeMap<String, u32>,
}

/// The corpus root: `golden/cases`.
pub fn cases_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cases")
}

/// Every case under `root`, sorted by name so that runs and reports are in a stable order.
pub fn discover(root: &Path) -> Result<Vec<Case>, Error> {
    let entries = fs::read_dir(root).map_err(|source| io(root, source))?;
    let mut cases = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| io(root, source))?;
        let dir = entry.path();
        if dir.join("model.bpmn").is_file() {
            let name = entry.file_name().to_string_lossy().into_owned();
            cases.push(Case { name, dir });
        }
    }
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(cases)
}

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_owned(),
        source,
    }
}

fn read_text(path: &Path) -> Result<String, Error> {
    fs::read_to_string(path).map_err(|source| io(path, source))
}

impl Case {
    pub fn steps_dir(&self) -> PathBuf {
        self.dir.join("steps")
    }

    /// Loads the model and the scenario and runs the simulator.
    pub fn run(&self) -> Result<Trace, Error> {
        let model_path = self.dir.join("model.bpmn");
        let xml = read_text(&model_path)?;
        let definition = load_model(&xml).map_err(|diagnostics| Error::Model {
            path: model_path.clone(),
            diagnostics,
        })?;
        let targets = self.targets()?;
        let scenario_path = self.dir.join("scenario.json");
        let text = read_text(&scenario_path)?;
        let scenario = scenario::parse_with(&text, &definition, &targets).map_err(|problems| {
            Error::Scenario {
                path: scenario_path,
                problems: problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("\n"),
            }
        })?;
        Ok(sim::run_with(&definition, &scenario, &targets)?)
    }

    /// The definitions the case's `migrate` events move onto: each `target-<name>.bpmn`
    /// beside the model is the target `<name>`.
    pub fn targets(&self) -> Result<sim::Targets, Error> {
        let mut targets = sim::Targets::new();
        let entries = fs::read_dir(&self.dir).map_err(|source| io(&self.dir, source))?;
        for entry in entries {
            let path = entry.map_err(|source| io(&self.dir, source))?.path();
            let file = path.file_name().map(|f| f.to_string_lossy().into_owned());
            let Some(name) = file
                .as_deref()
                .and_then(|f| f.strip_prefix("target-"))
                .and_then(|f| f.strip_suffix(".bpmn"))
            else {
                continue;
            };
            let xml = read_text(&path)?;
            let def = load_model(&xml).map_err(|diagnostics| Error::Model {
                path: path.clone(),
                diagnostics,
            })?;
            targets.insert(name.to_owned(), def);
        }
        Ok(targets)
    }

    /// The author's intended end state.
    pub fn expect(&self) -> Result<Expect, Error> {
        let path = self.dir.join("expect.json");
        let text = read_text(&path)?;
        serde_json::from_str(&text).map_err(|err| Error::Expect {
            path,
            message: err.to_string(),
        })
    }

    /// The committed step files, in step order.
    pub fn committed_steps(&self) -> Result<Vec<Vec<u8>>, Error> {
        let dir = self.steps_dir();
        let mut files = Vec::new();
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(io(&dir, source)),
        };
        for entry in entries {
            let path = entry.map_err(|source| io(&dir, source))?.path();
            if path.extension().is_some_and(|e| e == "msgpack") {
                files.push(path);
            }
        }
        files.sort();
        files
            .iter()
            .map(|p| fs::read(p).map_err(|source| io(p, source)))
            .collect()
    }
}

/// The file name of step `n` (1-based).
pub fn step_file_name(n: usize) -> String {
    format!("{n:04}.msgpack")
}

/// Checks a run's summary against the author's [`Expect`]; `None` when it matches.
pub fn expectation_mismatch(expect: &Expect, run: &Trace) -> Option<String> {
    let summary = &run.summary;
    let mut problems = Vec::new();
    if summary.status != expect.state {
        problems.push(format!(
            "state is `{}`, expected `{}`",
            summary.status, expect.state
        ));
    }
    if summary.failure_code != expect.failure_code {
        problems.push(format!(
            "failure code is {:?}, expected {:?}",
            summary.failure_code, expect.failure_code
        ));
    }
    for (node, want) in &expect.attempts {
        let got = summary.attempts.get(node).copied().unwrap_or(0);
        if got != *want {
            problems.push(format!("node `{node}` ran {got} attempts, expected {want}"));
        }
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// Rewrites `case`'s step files from `run`: removes every old `.msgpack` step file, then
/// writes one per step. Returns how many files changed, were added or were removed.
pub fn bless(case: &Case, run: &Trace) -> Result<BlessReport, Error> {
    let before = case.committed_steps()?;
    let dir = case.steps_dir();
    fs::create_dir_all(&dir).map_err(|source| io(&dir, source))?;
    let entries = fs::read_dir(&dir).map_err(|source| io(&dir, source))?;
    for entry in entries {
        let path = entry.map_err(|source| io(&dir, source))?.path();
        if path.extension().is_some_and(|e| e == "msgpack") {
            fs::remove_file(&path).map_err(|source| io(&path, source))?;
        }
    }
    for (i, step) in run.steps.iter().enumerate() {
        let path = dir.join(step_file_name(i + 1));
        fs::write(&path, &step.snapshot).map_err(|source| io(&path, source))?;
    }
    let mut report = BlessReport::default();
    for i in 0..before.len().max(run.steps.len()) {
        match (before.get(i), run.steps.get(i)) {
            (Some(old), Some(new)) if *old != new.snapshot => report.changed += 1,
            (Some(_), Some(_)) => report.unchanged += 1,
            (None, Some(_)) => report.added += 1,
            (Some(_), None) => report.removed += 1,
            (None, None) => {}
        }
    }
    Ok(report)
}

/// What a bless did to one case's step files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlessReport {
    pub unchanged: usize,
    pub changed: usize,
    pub added: usize,
    pub removed: usize,
}

/// The readable view of a whole run, one entry per step: what the insta snapshot holds.
/// The snapshot bytes appear decoded (see [`view`]), never as hex.
pub fn readable(run: &Trace) -> serde_json::Value {
    let steps: Vec<serde_json::Value> = run
        .steps
        .iter()
        .map(|step| {
            let mut line = serde_json::json!({
                "seq": step.seq,
                "at_ms": step.at_ms,
                "input": step.input,
                "node": step.node,
                "attempt": step.attempt,
                "effects": step.effects,
                "snapshot_bytes": step.snapshot.len(),
                "snapshot": view::decode(&step.snapshot),
            });
            // Only steps after failed delivery tries show them, so the views of every
            // case without `delivery_fails` keep their text.
            if !step.deliveries.is_empty() {
                line["deliveries"] = serde_json::json!(step.deliveries);
            }
            line
        })
        .collect();
    serde_json::json!({ "steps": steps, "summary": run.summary })
}

/// Loads a one-process model; `Err` is the diagnostics, one per line.
pub fn load_model(xml: &str) -> Result<Definition, String> {
    match qflow_loader::load_str(xml) {
        Ok(loaded) => {
            let mut defs = loaded.definitions;
            if defs.len() == 1 {
                Ok(defs.remove(0))
            } else {
                Err(format!(
                    "a scenario runs exactly one process; the model has {} executable processes",
                    defs.len()
                ))
            }
        }
        Err(diags) => Err(diags
            .iter()
            .map(|d| format!("{}:{}: [{}] {}", d.pos.line, d.pos.col, d.code, d.message))
            .collect::<Vec<_>>()
            .join("\n")),
    }
}

/// Runs a parsed scenario through the engine's simulator (a thin re-export, so that the
/// CLI and the golden test name one entry point).
pub fn simulate(definition: &Definition, scenario: &scenario::Scenario) -> Result<Trace, Error> {
    Ok(sim::run(definition, scenario)?)
}

/// The same run one step at a time, keeping none ([`sim::steps`]): what `qflow simulate`
/// prints from, so that its memory does not grow with the number of steps.
pub fn stream<'a>(
    definition: &'a Definition,
    scenario: &'a scenario::Scenario,
) -> Result<sim::Steps<'a>, Error> {
    Ok(sim::steps(definition, scenario)?)
}
