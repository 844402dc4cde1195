//! The journal's delta over the whole corpus (SPEC G3, docs/replay.md): for every
//! committed step of every golden case, the snapshot splits into its top-level entries
//! and joins back to the same bytes, decodes and encodes back to the same bytes (what a
//! replay's rebuild of each step's base relies on), and the chain of deltas from the
//! empty snapshot rebuilds every step exactly.

use qflow_core::journal;
use qflow_core::Snapshot;

#[test]
fn every_committed_step_rebuilds_from_its_delta_chain() {
    let cases = qflow_golden::discover(&qflow_golden::cases_root()).expect("discovers");
    let mut steps = 0;
    for case in &cases {
        let committed = case.committed_steps().expect("reads the steps");
        let mut previous: Vec<u8> = Vec::new();
        for (i, bytes) in committed.iter().enumerate() {
            let at = format!("{} step {}", case.name, i + 1);
            let entries = journal::entries(bytes).unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(&journal::join(&entries), bytes, "{at}: split and joined");
            let decoded = Snapshot::decode(bytes).unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(&decoded.encode(), bytes, "{at}: decoded and encoded");
            // The base a writer took the delta against: nothing for the first step, the
            // previous step's state encoded again for every other.
            let base = if i == 0 {
                Vec::new()
            } else {
                Snapshot::decode(&previous).unwrap().encode()
            };
            let delta = journal::delta(&base, bytes).unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(
                &journal::apply(&base, &delta).unwrap(),
                bytes,
                "{at}: rebuilt"
            );
            let removed = journal::entries(&base).unwrap().len();
            assert!(
                delta.len() <= bytes.len() + base.len() + 8 * (entries.len() + removed) + 8,
                "{at}: a delta carries each changed entry once and each removed key"
            );
            previous = bytes.clone();
            steps += 1;
        }
    }
    assert!(steps > 500, "the corpus has its steps ({steps})");
}
