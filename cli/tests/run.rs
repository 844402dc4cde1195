//! `qflow run`, the main job: it must finish, every instance must end as its script says,
//! and a second run on the same file must deploy the same version and start afresh.

mod common;

use std::process::Command;

fn run(db: &std::path::Path, instances: u32) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_qflow"))
        .args(["run", "--instances", &instances.to_string(), "--db"])
        .arg(db)
        .output()
        .expect("run qflow");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_main_job_runs_every_instance_as_scripted_on_a_fresh_and_a_reused_file() {
    let dir = std::env::temp_dir().join(format!("qflow-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let db = dir.join("run.sqlite");
    let _ = std::fs::remove_file(&db);

    for round in 0..2 {
        let (ok, stdout, stderr) = run(&db, 40);
        assert!(ok, "round {round}: qflow run failed:\n{stderr}");
        assert!(
            stdout.contains("40 instances in"),
            "round {round}: no summary:\n{stdout}"
        );
        assert!(
            stdout.contains("attempt counts that differ from the script: 0"),
            "round {round}: attempts differ from the script:\n{stdout}"
        );
        assert!(
            stderr.contains("(deployment 1, 1 lane)"),
            "round {round}: same content must deploy to the same version, on one lane \
             (SQLite's default, qflow_runtime::default_lanes):\n{stderr}"
        );
        assert!(
            stderr.contains("resuming 0 unfinished instance(s)"),
            "round {round}: a finished run leaves nothing to resume:\n{stderr}"
        );
        // The run closes its store: the WAL is folded into the file and removed.
        common::assert_store_closed(&db, &format!("round {round}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
