//! libFuzzer target: arbitrary bytes into `qflow_core::Snapshot::decode` (SPEC E2, issue
//! 8). The property: decoding returns — it never panics, never allocates what a lying
//! length asks for — and what decodes re-encodes to bytes that decode to the same state
//! (whatever the engine reads, it can write back and read again).

#![no_main]

use libfuzzer_sys::fuzz_target;
use qflow_core::Snapshot;

fuzz_target!(|data: &[u8]| {
    if let Ok(snap) = Snapshot::decode(data) {
        let bytes = snap.encode();
        let again = Snapshot::decode(&bytes).expect("what was re-encoded decodes");
        assert_eq!(again.encode(), bytes, "re-encoding is stable");
    }
});
