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

/// Runs `qflow check model.bpmn` on `xml`, written to a scratch directory of its own that
/// is the working directory (so the output names the file `model.bpmn`); returns the exit
/// status and stdout.
fn check_model(test: &str, xml: &str) -> (Option<i32>, String) {
    let dir = std::env::temp_dir().join(format!("qflow-check-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    std::fs::write(dir.join("model.bpmn"), xml).expect("scratch model");
    let out = Command::new(env!("CARGO_BIN_EXE_qflow"))
        .args(["check", "model.bpmn"])
        .current_dir(&dir)
        .output()
        .expect("the qflow binary runs");
    std::fs::remove_dir_all(&dir).ok();
    (out.status.code(), stdout(&out))
}

/// A model whose one task carries `ext` inside `<extensionElements>`, on a line of its own
/// (line 9), and whose start event is `start` (line 5).
fn task_model(start: &str, ext: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:q="urn:qflow:bpmn:1" id="defs" targetNamespace="urn:test">
  <process id="p" isExecutable="true">
    {start}
    <sequenceFlow id="f1" sourceRef="start" targetRef="pay"/>
    <serviceTask id="pay" q:task="pay">
      <extensionElements>
        {ext}
      </extensionElements>
    </serviceTask>
    <sequenceFlow id="f2" sourceRef="pay" targetRef="end"/>
    <endEvent id="end"/>
  </process>
</definitions>
"#
    )
}

/// Each diagnostic of the human output as (code, the shown source line from its caret
/// on).
fn carets(text: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(code) = line
            .split("error[")
            .nth(1)
            .and_then(|r| r.split(']').next())
        else {
            continue;
        };
        let after_bar = |l: &str| l.split_once("| ").map(|(_, r)| r.to_owned());
        let shown = after_bar(lines[i + 2]).expect("a source line");
        let caret = after_bar(lines[i + 3]).expect("a caret line");
        assert!(caret.ends_with('^'), "{caret:?}");
        let at = caret.chars().count() - 1;
        found.push((code.to_owned(), shown.chars().skip(at).collect()));
    }
    found
}

/// Issue 27, point 3: four diagnostics on one line, each caret under the attribute its
/// diagnostic is about (the last two on a window of the line, cut before the caret).
#[test]
fn each_diagnostic_on_one_line_has_its_caret_under_its_own_attribute() {
    let retry = r#"<q:retry maxAttempts="0" initial="PT1S" initialInterval="PT1S" maxInterval="PT0S" maxi="x"/>"#;
    let (code, text) = check_model(
        "same-line",
        &task_model(r#"<startEvent id="start"/>"#, retry),
    );
    assert_eq!(code, Some(1), "{text}");
    let want = [
        ("Q301", "maxAttempts="),
        ("Q309", "initial=\"PT"),
        ("Q301", "maxInterval="),
        ("Q309", "maxi=\"x\"/>"),
    ];
    let shown = carets(&text);
    assert_eq!(shown.len(), want.len(), "{text}");
    for ((code, from_caret), (want_code, attribute)) in shown.iter().zip(want) {
        assert_eq!(code, want_code, "{text}");
        assert!(
            from_caret.starts_with(attribute),
            "{code} at {from_caret:?}:\n{text}"
        );
    }
    insta::assert_snapshot!(text, @r#"
    model.bpmn:9:18: error[Q301]: maxAttempts `0` must be a whole number from 1 to 1000
       |
     9 |         <q:retry maxAttempts="0" initial="PT1S" initialInterval="PT1S" maxInterval="PT0S" maxi="x"/>
       |                  ^
       = help: maxAttempts counts executions including the first, e.g. 3
    model.bpmn:9:34: error[Q309]: unknown attribute `initial` on q:retry
       |
     9 |         <q:retry maxAttempts="0" initial="PT1S" initialInterval="PT1S" maxInterval="PT0S" maxi="x"/>
       |                                  ^
       = help: the attributes of q:retry are: maxAttempts, initialInterval, backoffMultiplier, maxInterval, jitter, nonRetryableCodes, maxElapsed
    model.bpmn:9:72: error[Q301]: maxInterval must be longer than zero
       |
     9 | …retry maxAttempts="0" initial="PT1S" initialInterval="PT1S" maxInterval="PT0S" maxi="x"/>
       |                                                              ^
       = help: write a positive duration, e.g. PT1S
    model.bpmn:9:91: error[Q309]: unknown attribute `maxi` on q:retry
       |
     9 | …0" initial="PT1S" initialInterval="PT1S" maxInterval="PT0S" maxi="x"/>
       |                                                              ^
       = help: the attributes of q:retry are: maxAttempts, initialInterval, backoffMultiplier, maxInterval, jitter, nonRetryableCodes, maxElapsed
    model.bpmn: refused: 4 errors
    "#);
}

/// Issue 27, point 3: a malformed attribute (Q001) is shown with the caret under that
/// attribute — a duplicate's second occurrence, a name without `=` or value — not under
/// the element's `<`, in a kept element and in a dropped foreign one, and on a later line
/// of a start tag.
#[test]
fn a_malformed_attribute_has_its_caret_under_that_attribute() {
    let retry = r#"<q:retry maxAttempts="3"/>"#;
    for (test, start, message, attribute) in [
        (
            "twice",
            r#"<startEvent id="start" name="a" name="b"/>"#,
            "model.bpmn:5:37: error[Q001]: malformed XML attribute: `name` appears twice in one \
             element (first at 5:28)",
            "name=\"b\"",
        ),
        (
            "twice-later-line",
            "<startEvent id=\"start\" name=\"a\"\n                name=\"b\"/>",
            "model.bpmn:6:17: error[Q001]: malformed XML attribute: `name` appears twice in one \
             element (first at 5:28)",
            "name=\"b\"",
        ),
        (
            "no-value",
            r#"<startEvent id="start" name/>"#,
            "model.bpmn:5:28: error[Q001]: malformed XML attribute: `name` has no `=` and value",
            "name/>",
        ),
        (
            "unquoted",
            r#"<startEvent id="start" name=a/>"#,
            "model.bpmn:5:28: error[Q001]: malformed XML attribute: the value of `name` is not \
             in quotes",
            "name=a",
        ),
        (
            "foreign",
            r#"<startEvent id="start"/><x:note xmlns:x="urn:x" a="1" a="2"/>"#,
            "model.bpmn:5:59: error[Q001]: malformed XML attribute: `a` appears twice in one \
             element (first at 5:53)",
            "a=\"2\"",
        ),
    ] {
        let (code, text) = check_model(test, &task_model(start, retry));
        assert_eq!(code, Some(1), "{test}: {text}");
        assert!(text.starts_with(message), "{test}: {text}");
        let shown = carets(&text);
        assert_eq!(shown.len(), 1, "{test}: {text}");
        assert_eq!(shown[0].0, "Q001", "{test}: {text}");
        assert!(shown[0].1.starts_with(attribute), "{test}: {text}");
    }
}
