//! The upgrade check (SPEC G3, docs/replay.md): every journal a release recorded in
//! `golden/journals/` replays through this build identical, or re-encoded with the same
//! meaning — never divergent, never unreadable.

use std::path::PathBuf;
use std::process::Command;

fn journals() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../golden/journals");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "sqlite"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_recorded_journal_replays_without_divergence() {
    let files = journals();
    assert!(
        !files.is_empty(),
        "golden/journals holds at least one recorded journal"
    );
    for file in files {
        // On a copy: opening a store of an older release migrates its schema.
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("journal.sqlite");
        std::fs::copy(&file, &db).expect("copies the journal");
        let out = Command::new(env!("CARGO_BIN_EXE_qflow"))
            .args(["replay", "--format", "json", "--db"])
            .arg(&db)
            .output()
            .expect("runs qflow replay");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: qflow replay exited {:?}\n{stdout}\n{}",
            file.display(),
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_str(&stdout).expect("JSON report");
        let n = |k: &str| {
            report[k]
                .as_u64()
                .unwrap_or_else(|| panic!("{k} in {report}"))
        };
        assert!(
            n("instances") >= 1 && n("steps") >= n("instances"),
            "{report}"
        );
        assert_eq!(
            n("identical") + n("reencoded"),
            n("instances"),
            "{}: every instance replays identical or re-encoded: {report:#}",
            file.display()
        );
        assert_eq!(n("divergent") + n("not_replayable") + n("not_journaled"), 0);
    }
}
