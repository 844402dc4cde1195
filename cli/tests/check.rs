//! End-to-end tests of `qflow check`: the real binary on the fixture models under
//! `tests/check_fixtures/`, asserting exit codes and (with insta) the exact output.
//!
//! Every test goes through [`qflow_check`], which runs the binary with the fixtures
//! directory as working directory, so paths in the output are short and stable.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/check_fixtures")
}

/// Runs `qflow check ARGS` in the fixtures directory.
fn qflow_check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qflow"))
        .arg("check")
        .args(args)
        .current_dir(fixtures())
        .output()
        .expect("the qflow binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("stderr is UTF-8")
}

#[test]
fn a_valid_model_exits_0_with_one_summary_line_per_process() {
    let out = qflow_check(&["simple.bpmn"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    insta::assert_snapshot!(stdout(&out), @"simple.bpmn: process `greet`: 3 nodes, stateless");
    assert_eq!(stderr(&out), "");
}

#[test]
fn a_stateful_model_says_why() {
    let out = qflow_check(&["retry.bpmn"]);
    assert_eq!(out.status.code(), Some(0), "stdout: {}", stdout(&out));
    insta::assert_snapshot!("stateful_summary", stdout(&out));
}

#[test]
fn a_refused_model_exits_1_with_positioned_diagnostics_and_carets() {
    let out = qflow_check(&["broken.bpmn"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.starts_with("broken.bpmn:"), "{text}");
    insta::assert_snapshot!("refused_human", text);
}

#[test]
fn truncated_xml_is_refused_with_a_position() {
    let out = qflow_check(&["truncated.bpmn"]);
    assert_eq!(out.status.code(), Some(1));
    insta::assert_snapshot!("truncated_human", stdout(&out));
}

#[test]
fn one_refused_file_among_valid_ones_exits_1_and_all_are_reported() {
    let out = qflow_check(&["simple.bpmn", "broken.bpmn", "retry.bpmn"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("simple.bpmn: process `greet`"), "{text}");
    assert!(text.contains("broken.bpmn: refused"), "{text}");
    assert!(text.contains("retry.bpmn: process `order`"), "{text}");
}

#[test]
fn a_missing_file_is_an_io_error_exit_2_but_the_others_are_still_checked() {
    let out = qflow_check(&["no-such-file.bpmn", "simple.bpmn"]);
    assert_eq!(out.status.code(), Some(2));
    insta::assert_snapshot!(
        stderr(&out),
        @"qflow: error: cannot read `no-such-file.bpmn`: No such file or directory (os error 2)"
    );
    assert!(stdout(&out).contains("simple.bpmn: process `greet`"));
}

#[test]
fn a_directory_is_an_io_error_exit_2() {
    let out = qflow_check(&["."]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot read `.`: is a directory"),
        "{}",
        stderr(&out)
    );
}

/// The CLI reads at most one byte past the loader's size limit, so a huge file is
/// refused by the loader's own positioned diagnostic instead of filling memory.
#[test]
fn an_oversized_file_is_refused_by_the_size_rule() {
    let path = std::env::temp_dir().join(format!("qflow-check-big-{}.bpmn", std::process::id()));
    let limit = qflow_loader::LoadOptions::default().max_bytes;
    let mut big = b"<definitions>".to_vec();
    big.resize(limit + 4096, b' ');
    std::fs::write(&path, &big).expect("temp file");
    let out = qflow_check(&["--format", "json", path.to_str().unwrap()]);
    std::fs::remove_file(&path).ok();
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["files"][0]["diagnostics"][0]["code"], "Q003");
}

#[test]
fn usage_errors_exit_2() {
    let no_files = qflow_check(&[]);
    assert_eq!(no_files.status.code(), Some(2));
    assert!(
        stderr(&no_files).contains("<FILE>..."),
        "{}",
        stderr(&no_files)
    );

    let bad_format = qflow_check(&["--format", "yaml", "simple.bpmn"]);
    assert_eq!(bad_format.status.code(), Some(2));

    let no_command = Command::new(env!("CARGO_BIN_EXE_qflow"))
        .output()
        .expect("runs");
    assert_eq!(no_command.status.code(), Some(2));
}

#[test]
fn help_exits_0() {
    let out = qflow_check(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("--explain"));
}

#[test]
fn json_output_is_one_document_with_stable_fields() {
    let out = qflow_check(&["--format", "json", "simple.bpmn", "broken.bpmn"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["summary"]["loaded"], 1);
    assert_eq!(doc["summary"]["refused"], 1);
    let refused = &doc["files"][1];
    assert_eq!(refused["status"], "refused");
    for d in refused["diagnostics"]
        .as_array()
        .expect("diagnostics array")
    {
        let keys: Vec<&str> = d.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["code", "col", "file", "help", "line", "message", "severity"],
            "field names are a stable interface"
        );
        assert_eq!(d["file"], "broken.bpmn");
        assert!(d["line"].as_u64().unwrap() > 0);
    }
    insta::assert_snapshot!("json_document", stdout(&out));
}

#[test]
fn json_reports_unreadable_files_and_exits_2() {
    let out = qflow_check(&["--format", "json", "missing.bpmn"]);
    assert_eq!(out.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["files"][0]["status"], "unreadable");
    assert!(doc["files"][0]["error"]
        .as_str()
        .unwrap()
        .contains("No such file"));
}

#[test]
fn explain_prints_each_retry_timeline() {
    let out = qflow_check(&["--explain", "retry.bpmn"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    insta::assert_snapshot!("explain_human", stdout(&out));
}

#[test]
fn explain_adds_nothing_for_a_model_without_retry() {
    let plain = qflow_check(&["simple.bpmn"]);
    let explained = qflow_check(&["--explain", "simple.bpmn"]);
    assert_eq!(explained.status.code(), Some(0));
    assert_eq!(stdout(&plain), stdout(&explained));
}

#[test]
fn explain_in_json_carries_the_same_numbers() {
    let out = qflow_check(&["--explain", "--format", "json", "retry.bpmn"]);
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let timelines = doc["files"][0]["processes"][0]["retry_timelines"]
        .as_array()
        .expect("timelines with --explain");
    let nodes: Vec<&str> = timelines
        .iter()
        .map(|t| t["node"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["charge", "reserve", "ship"]);
    // `reserve`: 10s, 15s, 22.5s, 30s (capped) with no jitter, each attempt up to 20s.
    let reserve = &timelines[1];
    let starts: Vec<(u64, u64)> = reserve["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["earliest_start_ms"].as_u64().unwrap(),
                a["latest_start_ms"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        starts,
        [
            (10_000, 10_000),
            (25_000, 45_000),
            (47_500, 87_500),
            (77_500, 137_500)
        ]
    );
    // Attempt 6 could start at 107.5s at the earliest: past maxElapsed (100s), so never.
    assert_eq!(reserve["never_from"], 6);
    // Attempt 5 starts by 100s at the latest, then runs up to its 20s timeout.
    assert_eq!(reserve["worst_case_failed_ms"], 120_000);
}

/// A reader that goes away early (`qflow check … | head -1`) is not an error.
#[test]
fn a_broken_pipe_is_not_an_error() {
    let mut args = vec!["check"];
    // Enough output to fill any pipe buffer several times over.
    args.extend(std::iter::repeat_n("broken.bpmn", 2_000));
    let mut child = Command::new(env!("CARGO_BIN_EXE_qflow"))
        .args(&args)
        .current_dir(fixtures())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawns");
    let mut first = [0u8; 16];
    let mut stdout = child.stdout.take().expect("piped stdout");
    stdout.read_exact(&mut first).expect("some output");
    drop(stdout);
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut err)
        .expect("stderr");
    let status = child.wait().expect("exits");
    assert_eq!(err, "", "nothing on stderr after the pipe closed");
    assert_eq!(status.code(), Some(0), "a closed pipe ends the run quietly");
}
