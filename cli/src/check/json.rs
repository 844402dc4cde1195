//! `qflow check --format json`: one JSON document for tools.
//!
//! Field names are a stable interface (scripts/corpus-table reads them):
//!
//! ```text
//! { "version": 1,
//!   "summary": { "files", "loaded", "refused", "unreadable" },
//!   "files": [ { "file", "status": "loaded" | "refused" | "unreadable",
//!                "error"?:       "<I/O error, unreadable only>",
//!                "processes":    [ { "id", "nodes", "stateful", "reasons", "retry_timelines"? } ],
//!                "diagnostics":  [ { "file", "line", "col", "severity", "code", "message", "help" } ] } ] }
//! ```
//!
//! `help` is `null` when the loader has no advice; `retry_timelines` is present only
//! with `--explain`. New fields may be added; existing ones never change meaning.

use std::io::{self, Write};

use qflow_loader::diag::Diagnostic;
use qflow_loader::model::{Classification, Definition};
use serde::Serialize;

use super::explain::{self, Timeline};
use super::{severity_label, FileReport, Verdict};

const FORMAT_VERSION: u32 = 1;

#[derive(Serialize)]
struct Document<'a> {
    version: u32,
    summary: Summary,
    files: Vec<FileJson<'a>>,
}

#[derive(Serialize, Default)]
struct Summary {
    files: usize,
    loaded: usize,
    refused: usize,
    unreadable: usize,
}

#[derive(Serialize)]
struct FileJson<'a> {
    file: &'a str,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    processes: Vec<ProcessJson>,
    diagnostics: Vec<DiagnosticJson<'a>>,
}

#[derive(Serialize)]
struct ProcessJson {
    id: String,
    nodes: usize,
    stateful: bool,
    reasons: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_timelines: Option<Vec<Timeline>>,
}

#[derive(Serialize)]
pub(crate) struct DiagnosticJson<'a> {
    file: &'a str,
    line: u32,
    col: u32,
    severity: &'static str,
    code: &'static str,
    message: &'a str,
    help: Option<&'a str>,
}

fn diagnostic<'a>(file: &'a str, d: &'a Diagnostic) -> DiagnosticJson<'a> {
    DiagnosticJson {
        file,
        line: d.pos.line,
        col: d.pos.col,
        severity: severity_label(d.severity),
        code: d.code,
        message: &d.message,
        help: d.help.as_deref(),
    }
}

fn process(definition: &Definition, explain: bool) -> ProcessJson {
    let reasons = match &definition.class {
        Classification::Stateless => Vec::new(),
        Classification::Stateful { reasons } => reasons.clone(),
    };
    ProcessJson {
        id: definition.id.clone(),
        nodes: definition.process.nodes.len(),
        stateful: definition.class.is_stateful(),
        reasons,
        retry_timelines: explain.then(|| explain::timelines(definition)),
    }
}

pub(crate) fn write_document(
    out: &mut impl Write,
    reports: &[FileReport],
    explain: bool,
) -> io::Result<()> {
    let mut summary = Summary {
        files: reports.len(),
        ..Summary::default()
    };
    let files = reports
        .iter()
        .map(|report| {
            let file = report.path.as_str();
            match &report.verdict {
                Verdict::Unreadable(err) => {
                    summary.unreadable += 1;
                    FileJson {
                        file,
                        status: "unreadable",
                        error: Some(err.to_string()),
                        processes: Vec::new(),
                        diagnostics: Vec::new(),
                    }
                }
                Verdict::Refused { diagnostics, .. } => {
                    summary.refused += 1;
                    FileJson {
                        file,
                        status: "refused",
                        error: None,
                        processes: Vec::new(),
                        diagnostics: diagnostics.iter().map(|d| diagnostic(file, d)).collect(),
                    }
                }
                Verdict::Loaded {
                    definitions,
                    warnings,
                    ..
                } => {
                    summary.loaded += 1;
                    FileJson {
                        file,
                        status: "loaded",
                        error: None,
                        processes: definitions.iter().map(|d| process(d, explain)).collect(),
                        diagnostics: warnings.iter().map(|d| diagnostic(file, d)).collect(),
                    }
                }
            }
        })
        .collect();
    let document = Document {
        version: FORMAT_VERSION,
        summary,
        files,
    };
    let text = serde_json::to_string_pretty(&document).map_err(io::Error::from)?;
    // The model's text may hold characters serde_json leaves raw (C1 controls).
    writeln!(out, "{}", crate::text::escape_json(&text))
}
