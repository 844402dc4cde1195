//! Two engine processes on one SQLite file (issue 8, defect 5): they cooperate. Each
//! may step the other's instances (the fence lets one commit win every step); each
//! finishes once its own instances have ended, whoever ended them, and every instance
//! ends exactly as its script says.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn two_runs_on_one_file_both_finish_with_every_instance_as_scripted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("shared.sqlite");
    // Create the store first, so both processes open an existing qflow file.
    let first = Command::new(env!("CARGO_BIN_EXE_qflow"))
        .args(["run", "--instances", "1", "--db"])
        .arg(&db)
        .output()
        .expect("runs qflow");
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_qflow"))
            .args(["run", "--instances", "150", "--db"])
            .arg(&db)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawns qflow")
    };
    let mut children = [spawn(), spawn()];
    // A bound, not a timing assertion: a hang (the defect) is stopped and reported.
    let deadline = Instant::now() + Duration::from_secs(180);
    while children
        .iter_mut()
        .any(|c| c.try_wait().expect("waits").is_none())
    {
        if Instant::now() > deadline {
            for c in &mut children {
                let _ = c.kill();
            }
            panic!("two qflow runs on one file did not both finish within 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for child in children {
        let out = child.wait_with_output().expect("collects output");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("150 instances in"), "{stdout}");
        assert!(
            stdout.contains("attempt counts that differ from the script: 0"),
            "{stdout}"
        );
    }
}
