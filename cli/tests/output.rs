//! What the binary prints (issue 8, defect 8): a model's text never drives the terminal,
//! a database error says its cause once, and Ctrl-C during `qflow run` says what it
//! interrupted and how to finish it.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The C1 control CSI (U+009B): XML allows it, and terminals that honour C1 controls read
/// it as ESC `[`.
const CSI: char = '\u{9b}';

const MODEL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:q="urn:qflow:bpmn:1" id="defs" targetNamespace="urn:test">
  <process id="PROC" isExecutable="true">
    <startEvent id="start"/>
    <sequenceFlow id="f1" sourceRef="start" targetRef="TASK"/>
    <serviceTask id="TASK" q:task="pay">
      <extensionElements><q:retry maxAttempts="2"/></extensionElements>
    </serviceTask>
    <sequenceFlow id="f2" sourceRef="TASK" targetRef="end"/>
    <endEvent id="end"/>
  </process>
</definitions>
"#;

fn qflow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qflow"))
        .args(args)
        .output()
        .expect("run qflow")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8 output")
}

fn assert_no_raw_controls(what: &str, out: &str) {
    let raw: Vec<char> = out
        .chars()
        .filter(|c| c.is_control() && *c != '\n')
        .collect();
    assert!(raw.is_empty(), "{what}: raw {raw:?} in:\n{out}");
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn check_escapes_control_characters_of_the_model_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    // Loads: the process id and the task id appear in the summary and the timeline.
    let loads = MODEL
        .replace("PROC", &format!("p{CSI}2J"))
        .replace("TASK", &format!("t{CSI}31m"));
    let loads = write(dir.path(), "loads.bpmn", &loads);
    // Refused: the flow names a node that does not exist, quoted in the message.
    let refused = MODEL
        .replace("PROC", "p")
        .replace("targetRef=\"end\"", &format!("targetRef=\"e{CSI}2Jnd\""))
        .replace("TASK", "t");
    let refused = write(dir.path(), "refused.bpmn", &refused);

    let out = qflow(&["check", "--explain", &loads, &refused]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert_no_raw_controls("check --explain", &stdout);
    for want in [
        "process `p\\u{9b}2J`: 3 nodes",
        "retry timeline of task `t\\u{9b}31m` in process `p\\u{9b}2J`",
        "targetRef `e\\u{9b}2Jnd` names no node",
    ] {
        assert!(stdout.contains(want), "missing `{want}` in:\n{stdout}");
    }

    let out = qflow(&["check", "--format", "json", &loads, &refused]);
    let stdout = text(&out.stdout);
    assert_no_raw_controls("check --format json", &stdout);
    assert!(stdout.contains("e\\u009b2Jnd"), "{stdout}");
    let document: serde_json::Value = serde_json::from_str(&stdout).expect("still JSON");
    assert!(
        document.to_string().contains(&format!("e{CSI}2Jnd")),
        "the JSON value is the model's text"
    );
}

#[test]
fn check_refuses_an_escape_sequence_in_an_id_without_printing_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = MODEL
        .replace("PROC", "p")
        .replacen("TASK", "t\u{1b}[2J", 1)
        .replace("TASK", "t");
    let path = write(dir.path(), "esc.bpmn", &model);
    let out = qflow(&["check", &path]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert_no_raw_controls("check", &stdout);
    assert!(
        stdout.contains(":6:57: error[Q008]: U+001B is a character XML does not allow"),
        "{stdout}"
    );
}

#[test]
fn simulate_escapes_the_scenario_text_it_quotes() {
    let dir = tempfile::tempdir().unwrap();
    let model = write(
        dir.path(),
        "m.bpmn",
        &MODEL.replace("PROC", "p").replace("TASK", "t"),
    );
    let scenario = write(
        dir.path(),
        "s.json",
        r#"{ "tasks": { "t\u001b[2J": [{ "outcome": "ok" }] } }"#,
    );
    let out = qflow(&["simulate", &model, "--scenario", &scenario]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert_no_raw_controls("simulate", &stderr);
    assert!(
        stderr.contains("at tasks.t\\u{1b}[2J: no node `t\\u{1b}[2J` in process `p`"),
        "{stderr}"
    );
}

#[test]
fn a_database_error_prints_its_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("no-such-dir").join("run.sqlite");
    let out = Command::new(env!("CARGO_BIN_EXE_qflow"))
        .args(["run", "--instances", "1", "--db"])
        .arg(&db)
        .output()
        .expect("run qflow");
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr.matches("unable to open database file").count(),
        1,
        "{stderr}"
    );
    assert_eq!(stderr.matches("run.sqlite").count(), 1, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// Sends SIGINT to a `qflow run` with far more instances than it can finish, then checks
/// what it said and that a rerun on the same file finishes what it left.
#[test]
fn ctrl_c_during_run_says_what_was_interrupted_and_a_rerun_resumes_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("run.sqlite");
    let mut child = Command::new(env!("CARGO_BIN_EXE_qflow"))
        .args(["run", "--instances", "100000", "--db"])
        .arg(&db)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start qflow run");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let seen = seen.clone();
        let mut stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                seen.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        })
    };
    let stderr_now = || String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
    // Bounded waits: this test must fail, not hang, if the binary misbehaves.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stderr_now().contains("qflow run: orders on") {
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!("qflow run did not get going:\n{}", stderr_now());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let it start instances and park some of them on backoff timers.
    std::thread::sleep(Duration::from_millis(500));
    let pid = child.id().to_string();
    let sent = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(sent.success());
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("qflow run did not stop on SIGINT:\n{}", stderr_now());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    reader.join().unwrap();
    let stderr = stderr_now();
    assert_eq!(status.code(), Some(130), "{stderr}");
    let shown = db.display().to_string();
    for want in [
        "qflow run: interrupted (Ctrl-C) after starting ".to_owned(),
        "of 100000 instance(s)".to_owned(),
        format!("unfinished instance(s) are saved in {shown}"),
        format!("A rerun on the same file resumes them: `qflow run --db {shown} --instances 0`"),
    ] {
        assert!(stderr.contains(&want), "missing `{want}` in:\n{stderr}");
    }
    // The rerun the message proposes finishes what the interrupted run left.
    let out = Command::new(env!("CARGO_BIN_EXE_qflow"))
        .args(["run", "--instances", "0", "--db"])
        .arg(&db)
        .output()
        .expect("rerun qflow");
    let rerun = text(&out.stderr);
    assert!(out.status.success(), "{rerun}");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("attempt counts that differ from the script: 0"),
        "{stdout}"
    );
    // The graceful shutdown may have finished a few; the rest are resumed.
    let resumed: u64 = rerun
        .split("resuming ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of resumed instances in:\n{rerun}"));
    assert!(
        resumed > 0,
        "SIGINT half a second in leaves parked instances: {rerun}"
    );
    assert!(
        stdout.contains(&format!(
            "{resumed} instance(s) resumed from an earlier run on this file finished too"
        )),
        "{stdout}"
    );
}
