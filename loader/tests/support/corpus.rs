//! Finding the outside corpus (`../shared/corpus`) for tests and benchmarks.
//!
//! Included by `#[path]` from every test and benchmark that reads the corpus, so they all
//! see the same files in the same order. It resolves the directory from the including
//! crate's manifest, which sits one level below the workspace in every case.

use std::path::{Path, PathBuf};

/// The corpus directory, or `None` (after printing `skipped: …`) when it is absent.
pub fn corpus_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!("skipped: no corpus at {}", dir.display());
        None
    }
}

/// Every `.bpmn` file under `dir`, sorted by path so that output and failures are stable.
pub fn bpmn_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        let entries = std::fs::read_dir(&next).expect("corpus directory is readable");
        for entry in entries {
            let path = entry.expect("corpus entry is readable").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "bpmn") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}
