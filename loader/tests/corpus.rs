//! The outside corpus (`../shared/corpus/`: MIWG reference models, bpmn-engine's and
//! Camunda's test models) through the real loader.
//!
//! Law: every file either loads or is refused with labelled diagnostics — a published
//! Qnnn code, a position with line > 0 and a message — and never panics. The models that
//! use only the L2 subset must load; docs/corpus.md says why each one is on the list and
//! why the others are refused. When the corpus is absent (a checkout without `shared/`)
//! the tests say "skipped" and pass: the corpus is outside input, not part of the repo.

use std::panic::{catch_unwind, AssertUnwindSafe};

use qflow_loader::{load, Diagnostic, LoadOptions, Loaded};

/// Files (relative to the corpus root) that use only the L2 subset and must load.
/// Each entry is justified in docs/corpus.md.
const MUST_LOAD: &[&str] = &[
    "miwg/A.1.0.bpmn",
    "miwg/A.2.0.bpmn",
    "miwg/A.4.0.bpmn",
    "miwg/A.4.1.bpmn",
    "miwg/C.9.1.bpmn",
    "miwg/C.2.0.bpmn",
    "bpmn-engine/boundary-non-interupting-timer.bpmn",
    "bpmn-engine/call-activity.bpmn",
    "bpmn-engine/issue-139.bpmn",
    "bpmn-engine/timer-event.bpmn",
    "bpmn-engine/forms.bpmn",
    "bpmn-engine/send-signal.bpmn",
];

#[path = "support/corpus.rs"]
mod support;

use support::{bpmn_files as model_files, corpus_dir};

/// What is wrong with a diagnostic's labelling, if anything.
fn label_problem(d: &Diagnostic) -> Option<String> {
    let published = qflow_loader::rules()
        .iter()
        .any(|(code, _)| *code == d.code);
    if !published {
        return Some(format!("code {} is not in rules()", d.code));
    }
    if d.pos.line == 0 {
        return Some(format!("{} has no line", d.code));
    }
    if d.message.trim().is_empty() {
        return Some(format!("{} has an empty message", d.code));
    }
    None
}

type Outcome = Result<Loaded, Vec<Diagnostic>>;

fn load_guarded(bytes: &[u8]) -> Result<Outcome, String> {
    catch_unwind(AssertUnwindSafe(|| load(bytes, &LoadOptions::default()))).map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "non-string panic".to_string())
    })
}

#[test]
fn every_corpus_file_loads_or_is_refused_with_labelled_diagnostics() {
    let Some(dir) = corpus_dir() else { return };
    let files = model_files(&dir);
    assert!(
        files.len() >= 100,
        "corpus looks incomplete: {} files",
        files.len()
    );
    let mut problems = Vec::new();
    let (mut loaded, mut refused) = (0, 0);
    for path in &files {
        let name = path.strip_prefix(&dir).unwrap().display().to_string();
        let bytes = std::fs::read(path).expect("corpus file is readable");
        match load_guarded(&bytes) {
            Err(panic) => problems.push(format!("{name}: PANIC: {panic}")),
            Ok(Ok(ok)) => {
                loaded += 1;
                if ok.definitions.is_empty() {
                    problems.push(format!("{name}: loaded with no definition"));
                }
                for w in &ok.warnings {
                    if let Some(p) = label_problem(w) {
                        problems.push(format!("{name}: warning {p}"));
                    }
                }
            }
            Ok(Err(diagnostics)) => {
                refused += 1;
                if !diagnostics.iter().any(Diagnostic::is_error) {
                    problems.push(format!("{name}: refused without an error diagnostic"));
                }
                for d in &diagnostics {
                    if let Some(p) = label_problem(d) {
                        problems.push(format!("{name}: {p}"));
                    }
                }
            }
        }
    }
    println!(
        "corpus: {} files, {loaded} loaded, {refused} refused",
        files.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn l2_subset_models_from_miwg_and_bpmn_engine_load() {
    let Some(dir) = corpus_dir() else { return };
    let mut problems = Vec::new();
    for name in MUST_LOAD {
        let bytes = std::fs::read(dir.join(name)).expect("listed corpus file exists");
        match load_guarded(&bytes) {
            Err(panic) => problems.push(format!("{name}: PANIC: {panic}")),
            Ok(Ok(loaded)) if !loaded.definitions.is_empty() => {}
            Ok(Ok(_)) => problems.push(format!("{name}: loaded no definition")),
            Ok(Err(diagnostics)) => {
                let shown: Vec<String> = diagnostics.iter().map(|d| format!("  {d}")).collect();
                problems.push(format!("{name}: refused\n{}", shown.join("\n")));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The number of corpus files that load never falls below what docs/corpus.md reports
/// (75 of 121 since the Java delegates of 2026-12), and every Java-bound service task
/// that loads is a pull task on the topic its note names.
#[test]
fn at_least_75_corpus_files_load_and_java_bindings_are_pull_tasks() {
    use qflow_loader::model::{NodeKind, TaskKind};
    let Some(dir) = corpus_dir() else { return };
    let mut loaded = 0;
    let mut bindings = 0;
    for path in model_files(&dir) {
        let bytes = std::fs::read(&path).expect("corpus file is readable");
        let Ok(Ok(l)) = load_guarded(&bytes) else {
            continue;
        };
        loaded += 1;
        let notes: Vec<&Diagnostic> = l.warnings.iter().filter(|d| d.code == "Q950").collect();
        for def in &l.definitions {
            for n in &def.process.nodes {
                let NodeKind::Task(t) = &n.kind else { continue };
                let Some(d) = &t.delegate else { continue };
                bindings += 1;
                assert_eq!(
                    t.kind,
                    TaskKind::Pull {
                        topic: d.topic.clone(),
                        retries: None
                    },
                    "{}: {}",
                    path.display(),
                    n.id
                );
                assert!(
                    notes
                        .iter()
                        .any(|w| w.pos == d.pos && w.message.contains(&format!("`{}`", d.topic))),
                    "{}: {} has no note naming its topic",
                    path.display(),
                    n.id
                );
            }
        }
    }
    assert!(loaded >= 75, "only {loaded} corpus files load");
    assert!(bindings >= 35, "only {bindings} Java-bound tasks");
}

/// Loading is a pure function of the bytes: two loads give the same verdict, the same
/// diagnostics and the same definitions.
#[test]
fn loading_the_corpus_twice_gives_the_same_result() {
    let Some(dir) = corpus_dir() else { return };
    for path in model_files(&dir) {
        let bytes = std::fs::read(&path).expect("corpus file is readable");
        let (Ok(first), Ok(second)) = (load_guarded(&bytes), load_guarded(&bytes)) else {
            // A panic is reported by the first test, with the file name.
            continue;
        };
        let same = match (&first, &second) {
            (Ok(a), Ok(b)) => {
                a.warnings == b.warnings
                    && format!("{:?}", a.definitions) == format!("{:?}", b.definitions)
            }
            (Err(a), Err(b)) => a == b,
            _ => false,
        };
        assert!(same, "{} loads differently twice", path.display());
    }
}
