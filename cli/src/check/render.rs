//! Human output of `qflow check`: compiler-style diagnostics and per-process summaries.
//!
//! A diagnostic is `file:line:col: error[Q101]: message`, then the source line with a
//! caret under the column, then `= help: …` when the loader has advice. Columns count
//! characters (as the loader's positions do); tabs are shown as four spaces and the caret
//! moves with them. Very long lines (minified XML) are cut to a window around the column.
//! This module only formats; it never decides whether a model is acceptable.

use std::io::{self, Write};

use qflow_loader::diag::Diagnostic;
use qflow_loader::model::{Classification, Definition};

use super::{explain, severity_label, FileReport, Verdict};

/// Tabs are expanded to this many spaces so the caret lines up in any terminal.
const TAB_WIDTH: usize = 4;
/// Characters of a source line shown before the caret, at most.
const WINDOW_BEFORE_CHARS: usize = 60;
/// Characters of a source line shown from the caret on, at most.
const WINDOW_AFTER_CHARS: usize = 100;

pub(crate) fn write_report(
    out: &mut impl Write,
    report: &FileReport,
    explain: bool,
) -> io::Result<()> {
    let path = &report.path;
    match &report.verdict {
        // Reported on stderr by the caller: stdout stays a clean list of verdicts.
        Verdict::Unreadable(_) => Ok(()),
        Verdict::Refused {
            source,
            diagnostics,
        } => {
            let index = LineIndex::new(source);
            for diagnostic in diagnostics {
                write_diagnostic(out, path, &index, diagnostic)?;
            }
            let errors = diagnostics
                .iter()
                .filter(|d| d.severity == qflow_loader::diag::Severity::Error)
                .count();
            let warnings = diagnostics.len() - errors;
            writeln!(
                out,
                "{path}: refused: {}{}",
                plural(errors, "error"),
                if warnings > 0 {
                    format!(", {}", plural(warnings, "warning"))
                } else {
                    String::new()
                }
            )
        }
        Verdict::Loaded {
            source,
            definitions,
            warnings,
        } => {
            let index = LineIndex::new(source);
            for warning in warnings {
                write_diagnostic(out, path, &index, warning)?;
            }
            for definition in definitions {
                writeln!(out, "{path}: {}", summary_line(definition))?;
            }
            if explain {
                for definition in definitions {
                    explain::write_definition(out, definition)?;
                }
            }
            Ok(())
        }
    }
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// `process `order`: 12 nodes, stateful (node `pay`: q:retry; …)`.
pub(crate) fn summary_line(definition: &Definition) -> String {
    let nodes = plural(definition.process.nodes.len(), "node");
    let class = match &definition.class {
        Classification::Stateless => "stateless".to_string(),
        Classification::Stateful { reasons } => {
            format!("stateful ({})", reasons.join("; "))
        }
    };
    format!("process `{}`: {nodes}, {class}", definition.id)
}

pub(crate) fn write_diagnostic(
    out: &mut impl Write,
    path: &str,
    index: &LineIndex<'_>,
    d: &Diagnostic,
) -> io::Result<()> {
    let label = severity_label(d.severity);
    let (line, col) = (d.pos.line, d.pos.col);
    if line == 0 {
        // A file-level diagnostic (no position): no snippet to show.
        writeln!(out, "{path}: {label}[{}]: {}", d.code, d.message)?;
    } else {
        writeln!(
            out,
            "{path}:{line}:{col}: {label}[{}]: {}",
            d.code, d.message
        )?;
        if let Some(text) = index.line(line) {
            let (shown, caret_at) = snippet(&text, col);
            let gutter = line.to_string();
            let pad = " ".repeat(gutter.len());
            writeln!(out, " {pad} |")?;
            writeln!(out, " {gutter} | {shown}")?;
            writeln!(out, " {pad} | {}^", " ".repeat(caret_at))?;
        }
    }
    if let Some(help) = &d.help {
        let pad = " ".repeat(if line == 0 { 0 } else { line.to_string().len() });
        writeln!(out, " {pad} = help: {help}")?;
    }
    Ok(())
}

/// The source line as displayed (tabs expanded, long lines windowed) and the display
/// offset of the caret for 1-based character column `col`.
fn snippet(text: &str, col: u32) -> (String, usize) {
    let chars: Vec<char> = text.chars().collect();
    // A column past the end (e.g. "missing `>` at end of line") points just after it.
    let caret_char = (col.max(1) as usize - 1).min(chars.len());
    let start = caret_char.saturating_sub(WINDOW_BEFORE_CHARS);
    let end = (caret_char + WINDOW_AFTER_CHARS).min(chars.len());
    let mut shown = String::new();
    let mut caret_at = 0;
    if start > 0 {
        shown.push('…');
    }
    for (i, c) in chars[start..end].iter().enumerate() {
        if start + i == caret_char {
            caret_at = shown.chars().count();
        }
        match c {
            '\t' => shown.push_str(&" ".repeat(TAB_WIDTH)),
            c if c.is_control() => shown.push(' '),
            c => shown.push(*c),
        }
    }
    if caret_char >= end {
        caret_at = shown.chars().count();
    }
    if end < chars.len() {
        shown.push('…');
    }
    (shown, caret_at)
}

/// Byte offsets of line starts, built once per file so that many diagnostics in one big
/// file do not rescan it.
pub(crate) struct LineIndex<'a> {
    source: &'a [u8],
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub(crate) fn new(source: &'a [u8]) -> Self {
        let mut starts = vec![0];
        starts.extend(
            source
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        );
        LineIndex { source, starts }
    }

    /// Line `line` (1-based) without its line ending; invalid UTF-8 is shown as U+FFFD.
    pub(crate) fn line(&self, line: u32) -> Option<String> {
        let start = *self.starts.get(line.checked_sub(1)? as usize)?;
        let end = self
            .starts
            .get(line as usize)
            .map_or(self.source.len(), |next| next - 1);
        let bytes = &self.source[start..end.max(start)];
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        Some(String::from_utf8_lossy(bytes).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caret_follows_expanded_tabs() {
        let (shown, at) = snippet("\t<task id=\"a\">", 2);
        assert_eq!(shown, "    <task id=\"a\">");
        assert_eq!(at, 4);
    }

    #[test]
    fn column_past_the_end_points_after_the_line() {
        let (shown, at) = snippet("<a>", 9);
        assert_eq!(shown, "<a>");
        assert_eq!(at, 3);
    }

    #[test]
    fn long_lines_are_windowed_around_the_column() {
        let line = "x".repeat(500);
        let (shown, at) = snippet(&line, 300);
        assert!(shown.starts_with('…') && shown.ends_with('…'));
        assert_eq!(
            shown.chars().count(),
            1 + WINDOW_BEFORE_CHARS + WINDOW_AFTER_CHARS + 1
        );
        assert_eq!(at, 1 + WINDOW_BEFORE_CHARS);
    }

    #[test]
    fn line_index_handles_crlf_and_missing_lines() {
        let index = LineIndex::new(b"one\r\ntwo\nthree");
        assert_eq!(index.line(1).as_deref(), Some("one"));
        assert_eq!(index.line(2).as_deref(), Some("two"));
        assert_eq!(index.line(3).as_deref(), Some("three"));
        assert_eq!(index.line(4), None);
        assert_eq!(index.line(0), None);
    }
}
