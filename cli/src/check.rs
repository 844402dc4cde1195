//! `qflow check FILE...`: load each file with the production loader and report what it
//! says, like a compiler (SPEC L1–L8, issue 2 items 3 and 4).
//!
//! Output goes to stdout: positioned diagnostics with the offending source line and a
//! caret, then one summary line per loaded process (`--format human`, the default), or
//! one JSON document for tools (`--format json`). `--explain` adds each `q:retry` task's
//! retry timeline, computed with the model's own backoff functions.
//!
//! Exit status: 0 when every file loads, 1 when any file is refused, 2 when a file cannot
//! be read (missing, a directory, permission denied) — an I/O problem is a usage error,
//! not a verdict on a model. Every file is checked even after a failure.
//!
//! This module never changes a file and never judges a model itself: what is accepted
//! is the loader's decision alone.

use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use qflow_loader::diag::{Diagnostic, Severity};
use qflow_loader::model::Definition;
use qflow_loader::LoadOptions;

use crate::{EXIT_REFUSED, EXIT_USAGE};

mod explain;
mod json;
pub(crate) mod render;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: 0 when every file loads, 1 when any file is refused, \
                        2 when a file cannot be read or the arguments are wrong."
)]
pub struct Args {
    /// BPMN 2.0 XML files to check.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Output format: `human` (compiler-style, the default) or `json` (one document).
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Also print the retry timeline of every task with `q:retry`.
    #[arg(long)]
    explain: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Human,
    Json,
}

/// What checking one file came to.
pub(crate) struct FileReport {
    /// The path as the user wrote it, so that output matches the command line.
    pub path: String,
    pub verdict: Verdict,
}

pub(crate) enum Verdict {
    /// The file could not be read; nothing was loaded.
    Unreadable(io::Error),
    Loaded {
        source: Vec<u8>,
        definitions: Vec<Definition>,
        warnings: Vec<Diagnostic>,
    },
    Refused {
        source: Vec<u8>,
        diagnostics: Vec<Diagnostic>,
    },
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let opts = LoadOptions::default();
    let mut out = BufWriter::new(io::stdout().lock());
    let mut reports = Vec::new();
    let mut any_refused = false;
    let mut any_unreadable = false;
    for path in &args.files {
        let report = check_file(path, &opts);
        match &report.verdict {
            Verdict::Unreadable(err) => {
                // On stderr in both formats, so a script piping the JSON still sees it.
                say_err!("qflow: error: cannot read `{}`: {err}", report.path);
                any_unreadable = true;
            }
            Verdict::Refused { .. } => any_refused = true,
            Verdict::Loaded { .. } => {}
        }
        match args.format {
            // Human output streams file by file so that a long run shows progress.
            Format::Human => {
                render::write_report(&mut out, &report, args.explain)?;
                out.flush()?;
            }
            Format::Json => reports.push(report),
        }
    }
    if args.format == Format::Json {
        json::write_document(&mut out, &reports, args.explain)?;
    }
    out.flush()?;
    Ok(ExitCode::from(exit_status(any_refused, any_unreadable)))
}

/// Usage/I-O errors outrank refusals: a run that could not read all its inputs did not
/// finish its job, whatever the other files said.
fn exit_status(any_refused: bool, any_unreadable: bool) -> u8 {
    if any_unreadable {
        EXIT_USAGE
    } else if any_refused {
        EXIT_REFUSED
    } else {
        0
    }
}

fn check_file(path: &Path, opts: &LoadOptions) -> FileReport {
    let shown = path.display().to_string();
    let source = match read_source(path, opts.max_bytes) {
        Ok(source) => source,
        Err(err) => {
            return FileReport {
                path: shown,
                verdict: Verdict::Unreadable(err),
            }
        }
    };
    let verdict = match qflow_loader::load(&source, opts) {
        Ok(loaded) => Verdict::Loaded {
            source,
            definitions: loaded.definitions,
            warnings: loaded.warnings,
        },
        Err(diagnostics) => Verdict::Refused {
            source,
            diagnostics,
        },
    };
    FileReport {
        path: shown,
        verdict,
    }
}

/// Reads at most one byte more than the loader accepts: that is enough for the loader to
/// refuse the file with its own positioned size diagnostic (L6), and a stray
/// multi-gigabyte argument cannot exhaust memory before the loader is even asked.
fn read_source(path: &Path, max_bytes: usize) -> io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    if file.metadata()?.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is a directory, not a BPMN file",
        ));
    }
    let mut source = Vec::new();
    let limit = u64::try_from(max_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    file.take(limit).read_to_end(&mut source)?;
    Ok(source)
}

pub(crate) fn severity_label(severity: Severity) -> &'static str {
    match severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Note => "note",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_outranks_refused() {
        assert_eq!(exit_status(false, false), 0);
        assert_eq!(exit_status(true, false), EXIT_REFUSED);
        assert_eq!(exit_status(true, true), EXIT_USAGE);
        assert_eq!(exit_status(false, true), EXIT_USAGE);
    }
}
