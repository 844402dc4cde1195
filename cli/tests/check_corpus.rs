//! `qflow check` over the whole outside corpus (`../shared/corpus`), in both formats: the
//! binary must render every real diagnostic (tabs, long lines, non-ASCII) without
//! failing, agree with itself between the formats, and exit 1 (some files are refused,
//! none is unreadable). Prints "skipped" when the corpus is absent.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "../../loader/tests/support/corpus.rs"]
mod support;

/// The corpus directory and every model in it, relative to it and sorted.
fn corpus() -> Option<(PathBuf, Vec<String>)> {
    let dir = support::corpus_dir()?;
    let files = support::bpmn_files(&dir)
        .iter()
        .map(|p| p.strip_prefix(&dir).unwrap_or(p).display().to_string())
        .collect();
    Some((dir, files))
}

fn qflow_check(dir: &Path, args: &[&str], files: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qflow"))
        .arg("check")
        .args(args)
        .args(files)
        .current_dir(dir)
        .output()
        .expect("the qflow binary runs")
}

#[test]
fn the_whole_corpus_checks_in_both_formats_and_they_agree() {
    let Some((dir, files)) = corpus() else { return };

    let json = qflow_check(&dir, &["--format", "json", "--explain"], &files);
    assert_eq!(json.status.code(), Some(1), "some corpus files are refused");
    assert!(
        json.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).expect("one JSON document");
    assert_eq!(doc["summary"]["files"], files.len());
    assert_eq!(doc["summary"]["unreadable"], 0);

    let human = qflow_check(&dir, &["--explain"], &files);
    assert_eq!(human.status.code(), Some(1));
    assert!(
        human.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&human.stderr)
    );
    let text = String::from_utf8(human.stdout).expect("UTF-8 output");

    for file in doc["files"].as_array().unwrap() {
        let name = file["file"].as_str().unwrap();
        let diagnostics = file["diagnostics"].as_array().unwrap();
        for d in diagnostics {
            let (line, col) = (d["line"].as_u64().unwrap(), d["col"].as_u64().unwrap());
            assert!(line > 0, "{name}: {d}");
            // Every JSON diagnostic appears in the human output with the same header.
            let header = format!(
                "{name}:{line}:{col}: {}[{}]: {}",
                d["severity"].as_str().unwrap(),
                d["code"].as_str().unwrap(),
                d["message"].as_str().unwrap()
            );
            assert!(
                text.contains(&header),
                "missing from human output: {header}"
            );
        }
        match file["status"].as_str().unwrap() {
            "refused" => assert!(
                text.contains(&format!("{name}: refused: ")),
                "{name} has no refusal line"
            ),
            "loaded" => {
                for process in file["processes"].as_array().unwrap() {
                    let id = process["id"].as_str().unwrap();
                    assert!(
                        text.contains(&format!("{name}: process `{id}`: ")),
                        "{name}: no summary line for {id}"
                    );
                }
            }
            other => panic!("{name}: unexpected status {other}"),
        }
    }
}
