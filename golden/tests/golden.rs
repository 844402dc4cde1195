//! G1/G2: every case under `golden/cases/` re-run through the engine's simulator, its
//! snapshot bytes compared exactly with the committed step files, its end state compared
//! with `expect.json`, and its decoded per-step view compared with the insta snapshot in
//! `tests/snapshots/`.
//!
//! `QFLOW_BLESS=1` rewrites the step files and the insta snapshots instead of failing
//! (`QFLOW_BLESS=name` or `QFLOW_BLESS=a,b` re-blesses only those cases). See
//! `docs/golden.md`: a bless is a deliberate act whose diff a reviewer reads.

use std::path::Path;

use qflow_core::sim::Trace;
use qflow_golden::{bless, discover, expectation_mismatch, readable, Case};
use qflow_loader::model::{NodeKind, TaskKind};

/// At least this many cases must exist: a corpus that silently shrank is a failure too.
const MIN_CASES: usize = 15;

#[test]
fn every_golden_case_reproduces_its_committed_bytes() {
    let cases = discover(&qflow_golden::cases_root()).expect("golden/cases is readable");
    assert!(
        cases.len() >= MIN_CASES,
        "only {} golden cases found under golden/cases (expected at least {MIN_CASES})",
        cases.len()
    );
    let bless_filter = std::env::var("QFLOW_BLESS").ok().filter(|v| !v.is_empty());
    if bless_filter.is_some() {
        // insta reads its update mode once, at its first assertion: set it before that so
        // the blessed cases' views are written in place rather than as `.snap.new` files.
        std::env::set_var("INSTA_UPDATE", "always");
    }
    let mut failures = Vec::new();
    for case in &cases {
        let blessing = match bless_filter.as_deref() {
            Some("1") | Some("all") => true,
            Some(names) => names.split(',').any(|n| n.trim() == case.name),
            None => false,
        };
        if let Err(message) = check(case, blessing, bless_filter.is_some()) {
            failures.push(format!("golden case `{}`: {message}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} golden cases failed:\n{}\n\nIf the change to persisted bytes is intended, \
         re-bless with `QFLOW_BLESS=<case> cargo test -p qflow-golden` and give the reason \
         in the commit message (docs/golden.md).",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Runs one case; `Err` carries a message naming what differs.
fn check(case: &Case, blessing: bool, bless_mode: bool) -> Result<(), String> {
    let run = case.run().map_err(|e| e.to_string())?;
    let expect = case.expect().map_err(|e| e.to_string())?;
    // The author's intent is checked even while blessing: a bless must never record a run
    // that ends somewhere the case was not written to end.
    if let Some(problem) = expectation_mismatch(&expect, &run) {
        return Err(format!("end state differs from expect.json: {problem}"));
    }
    if blessing {
        let report = bless(case, &run).map_err(|e| e.to_string())?;
        eprintln!(
            "blessed `{}`: {} unchanged, {} changed, {} added, {} removed",
            case.name, report.unchanged, report.changed, report.added, report.removed
        );
    } else {
        compare_bytes(case, &run)?;
    }
    if bless_mode && !blessing {
        // While another case is being blessed insta writes every view in place; this case's
        // bytes were checked above, and its view is left for the next ordinary run.
        return Ok(());
    }
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings.set_description(format!("golden case {}: decoded state per step", case.name));
    let view = readable(&run);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        settings.bind(|| insta::assert_yaml_snapshot!(case.name.as_str(), view));
    }));
    outcome.map_err(|_| "the decoded view differs from its insta snapshot (see above)".to_owned())
}

/// The byte half of the check: committed step files against the run's snapshots.
fn compare_bytes(case: &Case, run: &Trace) -> Result<(), String> {
    let committed = case.committed_steps().map_err(|e| e.to_string())?;
    if committed.is_empty() {
        return Err(format!(
            "no committed step files in {}; bless the new case with \
             `QFLOW_BLESS={} cargo test -p qflow-golden`",
            case.steps_dir().display(),
            case.name
        ));
    }
    let produced: Vec<Vec<u8>> = run.steps.iter().map(|s| s.snapshot.clone()).collect();
    match qflow_golden::diff::compare(&committed, &produced) {
        Some(mismatch) => Err(format!("snapshot bytes differ: {mismatch}")),
        None => Ok(()),
    }
}

/// E3 seen from the corpus: a case whose model has no `q:retry` (and no pull task, which
/// has its own budget, and no operator resume, which counts the attempt it starts) never
/// persists a retry
/// key family (`a/` attempt counter, `m/` backoff marker, `e/` first-failure instant; see
/// docs/snapshot-format.md) and never arms a retry park (`r:` timer).
#[test]
fn cases_without_a_retry_policy_never_write_a_retry_key() {
    let cases = discover(&qflow_golden::cases_root()).expect("golden/cases is readable");
    let mut checked = 0;
    for case in &cases {
        let xml = std::fs::read_to_string(case.dir.join("model.bpmn")).unwrap();
        let def = qflow_golden::load_model(&xml).unwrap();
        let has_policy = def
            .process
            .nodes
            .iter()
            .any(|n| matches!(&n.kind, NodeKind::Task(t) if t.retry.is_some()));
        // A pull task has its own budget (P1): its failures and expired locks move the
        // attempt counter and may park it, with or without `q:retry` (which L6 refuses
        // on it anyway).
        let has_pull = def.process.nodes.iter().any(
            |n| matches!(&n.kind, NodeKind::Task(t) if matches!(t.kind, TaskKind::Pull { .. })),
        );
        // An operator's resume starts a further attempt of the failed task, and counts it
        // (O3): the attempt counter is the record of that, policy or not.
        let scenario: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(case.dir.join("scenario.json")).unwrap())
                .unwrap();
        let resumed = scenario["events"]
            .as_array()
            .is_some_and(|events| events.iter().any(|e| e["event"] == "resume"));
        // A compensation handler's later owed runs number their attempts on from the
        // earlier runs' (`docs/compensation.md`): the counter records that, policy or not.
        let reruns_handler = !def.process.compensations.is_empty();
        if has_policy || has_pull || resumed || reruns_handler {
            continue;
        }
        checked += 1;
        for (i, bytes) in case.committed_steps().unwrap().iter().enumerate() {
            let view = qflow_golden::view::decode(bytes);
            let keys: Vec<&String> = view.as_object().expect("a map").keys().collect();
            assert!(
                !keys
                    .iter()
                    .any(|k| ["a/", "m/", "e/"].iter().any(|p| k.starts_with(p))),
                "golden case `{}` step {}: a retry key in a model without q:retry: {keys:?}",
                case.name,
                i + 1
            );
            let timers = view.get("k").and_then(|k| k.as_object());
            assert!(
                !timers.is_some_and(|t| t.keys().any(|name| name.starts_with("r:"))),
                "golden case `{}` step {}: a retry park in a model without q:retry",
                case.name,
                i + 1
            );
        }
    }
    assert!(checked >= MIN_CASES, "only {checked} cases without q:retry");
}

/// The failure a reviewer sees when a persisted byte changes: case, step and offset.
#[test]
fn a_changed_byte_is_reported_with_case_step_and_offset() {
    let source = qflow_golden::cases_root().join("linear_three_tasks");
    let scratch = std::env::temp_dir().join(format!("qflow-golden-flip-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    copy_dir(&source, &scratch);
    let step = scratch.join("steps").join(qflow_golden::step_file_name(2));
    let mut bytes = std::fs::read(&step).unwrap();
    let offset = bytes.len() / 2;
    bytes[offset] ^= 0x01;
    std::fs::write(&step, &bytes).unwrap();

    let case = Case {
        name: "linear_three_tasks".into(),
        dir: scratch.clone(),
    };
    let run = case.run().unwrap();
    let err = compare_bytes(&case, &run).unwrap_err();
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(
        err.contains(&format!(
            "step 0002: first differing byte at offset {offset}"
        )),
        "{err}"
    );

    // A missing last step file is a step-count mismatch, not a pass.
    let shorter = Case {
        name: case.name.clone(),
        dir: qflow_golden::cases_root().join("linear_three_tasks"),
    };
    let mut run = shorter.run().unwrap();
    run.steps.pop();
    let err = compare_bytes(&shorter, &run).unwrap_err();
    assert!(err.contains("steps, "), "{err}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
