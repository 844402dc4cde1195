//! G1/G2: every case under `golden/cases/` re-run through the engine's simulator, its
//! snapshot bytes compared exactly with the committed step files, its end state compared
//! with `expect.json`, and its decoded per-step view compared with the insta snapshot in
//! `tests/snapshots/`.
//!
//! `QFLOW_BLESS=1` rewrites the step files and the insta snapshots instead of failing
//! (`QFLOW_BLESS=name` or `QFLOW_BLESS=a,b` re-blesses only those cases). See
//! `docs/golden.md`: a bless is a deliberate act whose diff a reviewer reads.

use qflow_golden::{bless, discover, expectation_mismatch, readable, Case};

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
        if let Some(mismatch) = qflow_golden::diff::compare(&committed, &produced) {
            return Err(format!("snapshot bytes differ: {mismatch}"));
        }
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
