//! libFuzzer target: arbitrary bytes into `qflow_loader::load`.
//!
//! The property is the loader's contract on hostile input (issue 2, L6): it returns, it
//! never panics, and a refusal is a non-empty list of labelled diagnostics — a code from
//! the published rule table, a position with line > 0 and a message. Seeded from
//! ../shared/corpus by scripts/fuzz-loader. This target never writes files itself.

#![no_main]

use libfuzzer_sys::fuzz_target;
use qflow_loader::diag::Diagnostic;
use qflow_loader::LoadOptions;

fn assert_labelled(d: &Diagnostic) {
    assert!(
        qflow_loader::rules()
            .iter()
            .any(|(code, _)| *code == d.code),
        "unpublished code {} in {d:?}",
        d.code
    );
    assert!(d.pos.line > 0, "diagnostic without a line: {d:?}");
    assert!(
        !d.message.trim().is_empty(),
        "diagnostic without a message: {d:?}"
    );
}

fuzz_target!(|data: &[u8]| {
    match qflow_loader::load(data, &LoadOptions::default()) {
        Ok(loaded) => loaded.warnings.iter().for_each(assert_labelled),
        Err(diagnostics) => {
            assert!(!diagnostics.is_empty(), "refused without a diagnostic");
            diagnostics.iter().for_each(assert_labelled);
        }
    }
});
