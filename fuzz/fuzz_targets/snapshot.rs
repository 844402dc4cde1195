//! libFuzzer target: arbitrary bytes into `qflow_core::Snapshot::decode` (SPEC E2, issue
//! 8). The property: decoding returns — it never panics, never allocates what a lying
//! length asks for — and what decodes re-encodes to bytes that decode to the same state
//! (whatever the engine reads, it can write back and read again).
//!
//! The same bytes go through the input journal's byte functions (SPEC G3,
//! `qflow_core::journal`), which replay runs on rows read from a store that may be
//! damaged: split at the middle, the first half as a snapshot and the second as a delta.
//! They return errors, never panic; a delta taken between two snapshots rebuilds the
//! second; and bytes that split into entries join back to bytes that split the same.

#![no_main]

use libfuzzer_sys::fuzz_target;
use qflow_core::journal;
use qflow_core::Snapshot;

fuzz_target!(|data: &[u8]| {
    if let Ok(snap) = Snapshot::decode(data) {
        let bytes = snap.encode();
        let again = Snapshot::decode(&bytes).expect("what was re-encoded decodes");
        assert_eq!(again.encode(), bytes, "re-encoding is stable");
    }
    let (a, b) = data.split_at(data.len() / 2);
    if let Ok(entries) = journal::entries(data) {
        let joined = journal::join(&entries);
        assert_eq!(journal::entries(&joined).expect("joined bytes split"), entries);
    }
    if let Ok(rebuilt) = journal::apply(a, b) {
        journal::entries(&rebuilt).expect("a rebuilt snapshot splits");
    }
    if let Ok(d) = journal::delta(a, b) {
        let rebuilt = journal::apply(a, &d).expect("a delta applies to its base");
        assert_eq!(
            journal::entries(&rebuilt).unwrap(),
            journal::entries(b).unwrap(),
            "a delta rebuilds its target's entries"
        );
    }
    let _ = journal::difference(a, b);
    let _ = journal::same_meaning(a, b);
});
