//! The differential test (issue 13): the same models with the same scripted inputs through
//! qflow's simulator and through the JavaScript engine `bpmn-engine`
//! (`scripts/differential/peer.mjs`), comparing the tasks each engine completed (with
//! counts), the end state, and for a run that stops waiting, where it waits.
//!
//! The peer is not an oracle. Every difference the test sees must be listed in
//! `golden/differential/differences.json` with the BPMN 2.0.2 section that says which
//! engine is right; an unlisted difference fails the test, and so does a listed one that
//! no longer shows (it was fixed on one side, so its entry must go). `docs/differential.md`
//! has the models, the rules of the comparison and every judgement.
//!
//! When `node` or the installed peer (`npm ci --prefix scripts/differential`) is missing,
//! the test prints `skipped: …` on stderr and passes, unless `QFLOW_DIFFERENTIAL=required`
//! is set, as CI does after installing the peer: then a missing peer is a failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use qflow_core::sim::Trace;
use qflow_core::{Effect, Input, Snapshot};
use qflow_golden::{load_model, scenario};
use qflow_loader::model::{Definition, NodeKind, TaskKind};
use serde::Deserialize;

/// The golden cases that stay inside the control-flow subset the peer can be driven
/// through (no retry policies, `q:timeout`s, I/O mappings, cancels or operator events):
/// their scenarios run in both engines unchanged.
const GOLDEN_CASES: &[&str] = &[
    "activity_instances_compensation_of_two_completions",
    "activity_instances_event_sub_process_message_twice",
    "activity_instances_event_sub_process_signal_twice",
    "compensation_from_error_event_sub_process",
    "compensation_saga_rolls_back",
    "error_boundary_by_code",
    "error_boundary_catch_all",
    "error_end_event",
    "error_end_in_subprocess_cancels_sibling",
    "error_end_in_subprocess_caught",
    "event_based_gateway_timer_wins",
    "event_sub_process_error_in_subprocess",
    "event_sub_process_escalation_non_interrupting",
    "event_sub_process_signal_non_interrupting",
    "exclusive_condition_taken",
    "exclusive_default_flow",
    "inclusive_gateway_two_of_three",
    "inclusive_join_two_tokens_one_flow",
    "linear_three_tasks",
    "message_catch",
    "parallel_fork_join",
    "parallel_user_tasks_reverse_order",
    "pass_through_tasks",
    "receive_task_message",
    "signal_boundary_non_interrupting",
    "signal_throw_reaches_own_catch",
    "subprocess_timer_boundary",
    "terminate_end",
    "terminate_end_in_subprocess",
    "timer_boundary_interrupting",
    "timer_boundary_non_interrupting",
    "timer_boundary_not_reached",
    "timer_catch_duration",
    "timer_catch_two_in_a_row",
    "uncaught_bpmn_error",
    "user_task_completion",
];

/// Fewer subjects than this means the lists above or the directories silently shrank.
const SUBJECTS_MIN: usize = 30;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the golden crate sits inside the workspace")
        .to_path_buf()
}

fn differential_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("differential")
}

/// One model with one scenario, run in both engines.
struct Subject {
    /// `golden/<case>`, `model/<name>` or `corpus/<path>`: the key in differences.json.
    name: String,
    model: PathBuf,
    scenario: PathBuf,
}

/// A corpus model and the scenario it runs with (`golden/differential/corpus.json`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CorpusEntry {
    file: String,
    /// Why this file is in the control-flow subset; read by people, not by the test.
    #[allow(dead_code)]
    uses: String,
    scenario: serde_json::Value,
}

/// One known difference and its judgement (`golden/differential/differences.json`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Known {
    subject: String,
    difference: String,
    /// `qflow`, `peer` or `either` (the specification leaves it open).
    right: String,
    /// The BPMN 2.0.2 section that decides it.
    spec: String,
    #[allow(dead_code)]
    judgement: String,
}

/// What the peer script prints.
#[derive(Deserialize)]
struct PeerRun {
    peer: String,
    state: String,
    failure_code: Option<String>,
    completed: BTreeMap<String, u32>,
    waiting: Vec<String>,
}

/// What both engines are compared on, restricted to what both can observe.
#[derive(Debug, PartialEq)]
struct Observed {
    /// `completed`, `failed`, `cancelled` or `running`; a failure carries its code in
    /// parentheses (`failed (STUCK_AT_JOIN)`).
    state: String,
    completed: BTreeMap<String, u32>,
    waiting: Vec<String>,
}

fn subjects() -> Vec<Subject> {
    let mut out = Vec::new();
    let cases = qflow_golden::cases_root();
    for case in GOLDEN_CASES {
        out.push(Subject {
            name: format!("golden/{case}"),
            model: cases.join(case).join("model.bpmn"),
            scenario: cases.join(case).join("scenario.json"),
        });
    }
    let models = differential_dir().join("models");
    let mut names: Vec<_> = std::fs::read_dir(&models)
        .expect("golden/differential/models is readable")
        .map(|e| e.expect("a readable entry").file_name())
        .collect();
    names.sort();
    for name in names {
        let dir = models.join(&name);
        out.push(Subject {
            name: format!("model/{}", name.to_string_lossy()),
            model: dir.join("model.bpmn"),
            scenario: dir.join("scenario.json"),
        });
    }
    out
}

/// The corpus subjects, or none (with a note) when `../shared/corpus` is absent.
fn corpus_subjects() -> Vec<Subject> {
    let corpus = workspace().join("../shared/corpus");
    if !corpus.is_dir() {
        say(&format!(
            "skipped: differential corpus part: no corpus at {}",
            corpus.display()
        ));
        return Vec::new();
    }
    let text = std::fs::read_to_string(differential_dir().join("corpus.json"))
        .expect("golden/differential/corpus.json is readable");
    let entries: Vec<CorpusEntry> =
        serde_json::from_str(&text).expect("golden/differential/corpus.json is well formed");
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("differential");
    std::fs::create_dir_all(&tmp).expect("the target tmp dir is writable");
    entries
        .into_iter()
        .map(|entry| {
            let scenario = tmp.join(format!("{}.json", entry.file.replace('/', "__")));
            std::fs::write(&scenario, entry.scenario.to_string()).expect("scenario written");
            Subject {
                name: format!("corpus/{}", entry.file),
                model: corpus.join(&entry.file),
                scenario,
            }
        })
        .collect()
}

/// Writes a line straight to the process's stderr. The test harness captures what
/// `eprintln!` prints in a passing test, and a skip must be seen.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Why the peer cannot run here, if it cannot.
fn peer_missing() -> Option<String> {
    let installed = workspace().join("scripts/differential/node_modules/bpmn-engine/package.json");
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        _ => return Some("`node` is not on PATH".to_owned()),
    }
    (!installed.is_file()).then(|| {
        format!(
            "the peer is not installed ({} is missing; run `npm ci --prefix scripts/differential`)",
            installed.display()
        )
    })
}

#[test]
fn qflow_and_the_peer_agree_or_the_difference_is_judged() {
    if let Some(why) = peer_missing() {
        if std::env::var("QFLOW_DIFFERENTIAL").as_deref() == Ok("required") {
            panic!("QFLOW_DIFFERENTIAL=required but {why}");
        }
        say(&format!(
            "skipped: differential test against bpmn-engine: {why}"
        ));
        return;
    }
    let mut all = subjects();
    all.extend(corpus_subjects());
    assert!(
        all.len() >= SUBJECTS_MIN || !workspace().join("../shared/corpus").is_dir(),
        "only {} differential subjects (expected at least {SUBJECTS_MIN})",
        all.len()
    );
    let known = known_differences();
    let mut seen = Vec::new();
    let mut problems = Vec::new();
    let mut peer_version = String::new();
    for subject in &all {
        match compare(subject, &mut peer_version) {
            Ok(differences) => {
                for d in differences {
                    seen.push((subject.name.clone(), d));
                }
            }
            Err(e) => problems.push(format!("{}: {e}", subject.name)),
        }
    }
    for (subject, difference) in &seen {
        if !known
            .iter()
            .any(|k| &k.subject == subject && &k.difference == difference)
        {
            problems.push(format!(
                "{subject}: unlisted difference: {difference}\n    judge it against BPMN 2.0.2 \
                 and list it in golden/differential/differences.json (docs/differential.md)"
            ));
        }
    }
    for k in &known {
        if !seen
            .iter()
            .any(|(s, d)| s == &k.subject && d == &k.difference)
        {
            problems.push(format!(
                "{}: listed difference no longer seen (remove it from differences.json): {}",
                k.subject, k.difference
            ));
        }
    }
    say(&format!(
        "differential: {} subjects against {peer_version}, {} differences, all judged: {}",
        all.len(),
        seen.len(),
        problems.is_empty()
    ));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn known_differences() -> Vec<Known> {
    let text = std::fs::read_to_string(differential_dir().join("differences.json"))
        .expect("golden/differential/differences.json is readable");
    let known: Vec<Known> =
        serde_json::from_str(&text).expect("golden/differential/differences.json is well formed");
    for k in &known {
        assert!(
            ["qflow", "peer", "either"].contains(&k.right.as_str()),
            "{}: `right` is `{}`, expected qflow, peer or either",
            k.subject,
            k.right
        );
        assert!(
            k.spec.starts_with("BPMN 2.0.2 "),
            "{}: `spec` must name a BPMN 2.0.2 section, got `{}`",
            k.subject,
            k.spec
        );
    }
    known
}

/// Runs one subject in both engines; `Ok` holds the differences, one line each.
fn compare(subject: &Subject, peer_version: &mut String) -> Result<Vec<String>, String> {
    let def = qflow_definition(&subject.model)?;
    let text = std::fs::read_to_string(&subject.scenario)
        .map_err(|e| format!("{}: {e}", subject.scenario.display()))?;
    let scenario = scenario::parse(&text, &def).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        format!("scenario refused: {}", lines.join("; "))
    })?;
    let trace = qflow_golden::simulate(&def, &scenario).map_err(|e| e.to_string())?;
    let ours = observe_qflow(&def, &trace);
    let peer = run_peer(subject)?;
    peer_version.clone_from(&peer.peer);
    let theirs = observe_peer(&def, peer);
    Ok(differences(&ours, &theirs))
}

/// The model's one process, with every task that the peer completes without outside help
/// (abstract, manual, send, pull and channel tasks) made a registered task named after its
/// id: the simulator completes it at once with no outputs, as the peer does, and the
/// completion becomes visible in the trace. Control flow is unchanged.
fn qflow_definition(model: &Path) -> Result<Definition, String> {
    let xml = std::fs::read_to_string(model).map_err(|e| format!("{}: {e}", model.display()))?;
    let mut def = load_model(&xml).map_err(|d| format!("the model does not load: {d}"))?;
    for node in &mut def.process.nodes {
        if let NodeKind::Task(task) = &mut node.kind {
            let visible = matches!(
                task.kind,
                TaskKind::Registered { .. } | TaskKind::User { .. } | TaskKind::Receive { .. }
            );
            if !visible {
                task.kind = TaskKind::Registered {
                    name: node.id.clone(),
                };
            }
        }
    }
    Ok(def)
}

fn is_task(def: &Definition, id: &str) -> bool {
    def.process
        .find(id)
        .is_some_and(|i| matches!(def.process.node(i).kind, NodeKind::Task(_)))
}

fn is_wait(def: &Definition, id: &str) -> bool {
    def.process.find(id).is_some_and(|i| {
        matches!(
            def.process.node(i).kind,
            NodeKind::Task(_) | NodeKind::IntermediateCatch(_)
        )
    })
}

/// The element a qflow name stands for: an activity instance `pay@2` (E9) or an inner
/// instance `pay#2` is an execution of the element `pay`, which is all the peer names.
fn element(def: &Definition, key: &str) -> String {
    def.process
        .find(key)
        .map_or_else(|| key.to_owned(), |i| def.process.node(i).id.clone())
}

/// Tasks completed in qflow's trace: a registered task whose attempt finished ok, a user
/// task whose completion was not stale, a receive task whose token a message moved on.
/// Counted per element: the executions of all its activity instances.
fn observe_qflow(def: &Definition, trace: &Trace) -> Observed {
    let mut completed = BTreeMap::new();
    let mut tokens_before: Vec<String> = Vec::new();
    for step in &trace.steps {
        let tokens_after = Snapshot::decode(&step.snapshot)
            .map(|s| s.tokens().to_vec())
            .unwrap_or_default();
        let stale = step
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Stale { .. }));
        for effect in &step.effects {
            if let Effect::AttemptFinished { node, outcome, .. } = effect {
                if *outcome == qflow_core::AttemptOutcome::Ok {
                    *completed.entry(element(def, node)).or_insert(0) += 1;
                }
            }
        }
        match &step.input {
            Input::UserTaskCompleted { node, .. } if !stale => {
                *completed.entry(element(def, node)).or_insert(0) += 1;
            }
            Input::MessageReceived { .. } if !stale => {
                for node in left(&tokens_before, &tokens_after) {
                    let receive = def.process.find(&node).is_some_and(|i| {
                        matches!(&def.process.node(i).kind,
                            NodeKind::Task(t) if matches!(t.kind, TaskKind::Receive { .. }))
                    });
                    if receive {
                        *completed.entry(element(def, &node)).or_insert(0) += 1;
                    }
                }
            }
            _ => {}
        }
        tokens_before = tokens_after;
    }
    let state = match &trace.summary.failure_code {
        Some(code) => format!("{} ({code})", trace.summary.status),
        None => trace.summary.status.clone(),
    };
    let waiting = if trace.summary.status == "running" {
        let mut w: Vec<String> = tokens_before
            .into_iter()
            .filter(|id| is_wait(def, id))
            .map(|id| element(def, &id))
            .collect();
        w.sort();
        w
    } else {
        Vec::new()
    };
    Observed {
        state,
        completed,
        waiting,
    }
}

/// The ids in `before` that occur fewer times in `after` (once per token lost).
fn left(before: &[String], after: &[String]) -> Vec<String> {
    let mut remaining = after.to_vec();
    let mut gone = Vec::new();
    for id in before {
        if let Some(i) = remaining.iter().position(|a| a == id) {
            remaining.swap_remove(i);
        } else {
            gone.push(id.clone());
        }
    }
    gone
}

/// The peer's run, restricted to the nodes qflow observes (tasks; catch events for a
/// waiting run).
fn observe_peer(def: &Definition, peer: PeerRun) -> Observed {
    let completed = peer
        .completed
        .into_iter()
        .filter(|(id, _)| is_task(def, id))
        .collect();
    let mut waiting: Vec<String> = peer
        .waiting
        .into_iter()
        .filter(|id| is_wait(def, id))
        .collect();
    waiting.sort();
    let state = match peer.failure_code {
        Some(code) => format!("{} ({code})", peer.state),
        None => peer.state,
    };
    Observed {
        state,
        completed,
        waiting,
    }
}

fn run_peer(subject: &Subject) -> Result<PeerRun, String> {
    let script = workspace().join("scripts/differential/peer.mjs");
    let out = Command::new("node")
        .arg(&script)
        .arg(&subject.model)
        .arg(&subject.scenario)
        .output()
        .map_err(|e| format!("cannot run node: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "the peer script failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "the peer printed something unreadable ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Every way the two observations differ, one stable line each.
fn differences(ours: &Observed, theirs: &Observed) -> Vec<String> {
    let mut out = Vec::new();
    // The failure codes are each engine's own vocabulary (qflow's UNCAUGHT_BPMN_ERROR,
    // the peer's thrown error code): the states are compared, the codes only shown.
    let bare = |state: &str| state.split(" (").next().unwrap_or_default().to_owned();
    if bare(&ours.state) != bare(&theirs.state) {
        out.push(format!(
            "state: qflow {}, peer {}",
            ours.state, theirs.state
        ));
    }
    let ids: std::collections::BTreeSet<&String> = ours
        .completed
        .keys()
        .chain(theirs.completed.keys())
        .collect();
    for id in ids {
        let a = ours.completed.get(id).copied().unwrap_or(0);
        let b = theirs.completed.get(id).copied().unwrap_or(0);
        if a != b {
            out.push(format!("completed `{id}`: qflow {a}, peer {b}"));
        }
    }
    if ours.waiting != theirs.waiting {
        out.push(format!(
            "waiting: qflow {:?}, peer {:?}",
            ours.waiting, theirs.waiting
        ));
    }
    out
}
