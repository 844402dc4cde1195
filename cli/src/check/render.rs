//! Human output of `qflow check`: compiler-style diagnostics and per-process summaries.
//!
//! A diagnostic is `file:line:col: error[Q101]: message`, then the source line with a
//! caret under the column, then `= help: …` when the loader has advice. Columns count
//! characters (as the loader's positions do); tabs are shown as four spaces and the caret
//! moves with them. Very long lines (minified XML) are cut to a window around the column.
//! A model's own text (ids, names, values quoted in messages) is printed with its control
//! characters escaped (`crate::text`), so that a model cannot drive the terminal.
//! This module only formats; it never decides whether a model is acceptable.

use std::cell::Cell;
use std::io::{self, Write};

use qflow_loader::diag::Diagnostic;
use qflow_loader::model::{Classification, Definition};

use super::{explain, severity_label, FileReport, Verdict};
use crate::text::{escape, plural};

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

/// `process `order`: 12 nodes, stateful (node `pay`: q:retry; …)`.
pub(crate) fn summary_line(definition: &Definition) -> String {
    let nodes = plural(definition.process.nodes.len(), "node");
    let class = match &definition.class {
        Classification::Stateless => "stateless".to_string(),
        Classification::Stateful { reasons } => {
            format!("stateful ({})", reasons.join("; "))
        }
    };
    // The id and the reasons (which quote node ids) are the model's text.
    escape(&format!("process `{}`: {nodes}, {class}", definition.id)).into_owned()
}

pub(crate) fn write_diagnostic(
    out: &mut impl Write,
    path: &str,
    index: &LineIndex<'_>,
    d: &Diagnostic,
) -> io::Result<()> {
    let label = severity_label(d.severity);
    let (line, col) = (d.pos.line, d.pos.col);
    // Messages and help quote the model's ids and values; the source line shown below
    // has its control characters blanked by `push_display`.
    let message = escape(&d.message);
    if line == 0 {
        // A file-level diagnostic (no position): no snippet to show.
        writeln!(out, "{path}: {label}[{}]: {message}", d.code)?;
    } else {
        writeln!(out, "{path}:{line}:{col}: {label}[{}]: {message}", d.code)?;
        if let Some((shown, caret_at)) = index.snippet(line, col) {
            let gutter = line.to_string();
            let pad = " ".repeat(gutter.len());
            writeln!(out, " {pad} |")?;
            writeln!(out, " {gutter} | {shown}")?;
            writeln!(out, " {pad} | {}^", " ".repeat(caret_at))?;
        }
    }
    if let Some(help) = &d.help {
        let pad = " ".repeat(if line == 0 { 0 } else { line.to_string().len() });
        writeln!(out, " {pad} = help: {}", escape(help))?;
    }
    Ok(())
}

/// Byte offsets of line starts, built once per file, plus a cursor that remembers where
/// the last caret was. Diagnostics arrive sorted by position, so the cursor only moves
/// forward and showing many diagnostics on one huge line (minified XML) costs one pass
/// over that line, not one pass per diagnostic.
pub(crate) struct LineIndex<'a> {
    source: &'a [u8],
    starts: Vec<usize>,
    /// (line, character index within it, byte offset of that character). A `Cell` so
    /// that rendering stays a `&self` operation for callers.
    cursor: Cell<(u32, usize, usize)>,
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
        LineIndex {
            source,
            starts,
            cursor: Cell::new((0, 0, 0)),
        }
    }

    /// Byte range of line `line` (1-based) without its line ending.
    fn line_range(&self, line: u32) -> Option<(usize, usize)> {
        let start = *self.starts.get(line.checked_sub(1)? as usize)?;
        let mut end = self
            .starts
            .get(line as usize)
            .map_or(self.source.len(), |next| next - 1)
            .max(start);
        if end > start && self.source[end - 1] == b'\r' {
            end -= 1;
        }
        Some((start, end))
    }

    /// The source line as displayed (tabs expanded, long lines windowed) and the display
    /// offset of the caret for 1-based character column `col`. Invalid UTF-8 shows as
    /// U+FFFD. A column past the end of the line points just after it.
    pub(crate) fn snippet(&self, line: u32, col: u32) -> Option<(String, usize)> {
        let (start, end) = self.line_range(line)?;
        let bytes = self.source;
        let wanted = col.max(1) as usize - 1;
        let (mut chars, mut at) = match self.cursor.get() {
            (l, c, b) if l == line && c <= wanted => (c, b),
            _ => (0, start),
        };
        while chars < wanted && at < end {
            at = next_char(bytes, at, end);
            chars += 1;
        }
        self.cursor.set((line, chars, at));
        let caret = at;
        let mut from = caret;
        for _ in 0..WINDOW_BEFORE_CHARS {
            if from == start {
                break;
            }
            from = previous_char(bytes, from, start);
        }
        let mut to = caret;
        for _ in 0..WINDOW_AFTER_CHARS {
            if to == end {
                break;
            }
            to = next_char(bytes, to, end);
        }
        let mut shown = String::new();
        if from > start {
            shown.push('…');
        }
        push_display(&mut shown, &bytes[from..caret]);
        let caret_at = shown.chars().count();
        push_display(&mut shown, &bytes[caret..to]);
        if to < end {
            shown.push('…');
        }
        Some((shown, caret_at))
    }
}

/// Offset of the character after the one at `at` (a lone or invalid byte counts as one).
fn next_char(bytes: &[u8], at: usize, end: usize) -> usize {
    let width = match bytes[at] {
        b if b < 0x80 => 1,
        b if b >= 0xF0 => 4,
        b if b >= 0xE0 => 3,
        b if b >= 0xC0 => 2,
        _ => 1,
    };
    (at + width).min(end)
}

/// Offset of the character before `at`, stepping over UTF-8 continuation bytes.
fn previous_char(bytes: &[u8], at: usize, start: usize) -> usize {
    let mut back = at - 1;
    while back > start && bytes[back] & 0xC0 == 0x80 && at - back < 4 {
        back -= 1;
    }
    back
}

/// Appends source bytes for display: tabs become spaces, other control characters a
/// space, invalid UTF-8 U+FFFD.
fn push_display(shown: &mut String, bytes: &[u8]) {
    for c in String::from_utf8_lossy(bytes).chars() {
        match c {
            '\t' => shown.push_str(&" ".repeat(TAB_WIDTH)),
            c if c.is_control() => shown.push(' '),
            c => shown.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snippet(line: &str, col: u32) -> (String, usize) {
        LineIndex::new(line.as_bytes())
            .snippet(1, col)
            .expect("line 1 exists")
    }

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
    fn columns_count_characters_not_bytes() {
        let (shown, at) = snippet("<task name=\"Prüfung\" id=\"é\"/>", 22);
        assert_eq!(shown, "<task name=\"Prüfung\" id=\"é\"/>");
        assert_eq!(&shown.chars().skip(at).collect::<String>()[..4], "id=\"");
    }

    #[test]
    fn long_lines_are_windowed_around_the_column() {
        let line = "ä".repeat(500);
        let (shown, at) = snippet(&line, 300);
        assert!(shown.starts_with('…') && shown.ends_with('…'));
        assert_eq!(
            shown.chars().count(),
            1 + WINDOW_BEFORE_CHARS + WINDOW_AFTER_CHARS + 1
        );
        assert_eq!(at, 1 + WINDOW_BEFORE_CHARS);
    }

    #[test]
    fn the_cursor_moves_forward_and_restarts_when_asked_to_go_back() {
        let source = "x".repeat(50) + "\n" + &"y".repeat(50);
        let index = LineIndex::new(source.as_bytes());
        assert_eq!(index.snippet(1, 40).unwrap().1, 39);
        assert_eq!(index.snippet(1, 45).unwrap().1, 44);
        assert_eq!(index.snippet(1, 10).unwrap().1, 9);
        let (shown, at) = index.snippet(2, 3).unwrap();
        assert!(shown.starts_with("yy"));
        assert_eq!(at, 2);
    }

    #[test]
    fn line_index_handles_crlf_invalid_utf8_and_missing_lines() {
        let index = LineIndex::new(b"one\r\ntw\xffo\nthree");
        assert_eq!(index.snippet(1, 1).unwrap().0, "one");
        assert_eq!(index.snippet(2, 1).unwrap().0, "tw\u{fffd}o");
        assert_eq!(index.snippet(3, 1).unwrap().0, "three");
        assert_eq!(index.snippet(4, 1), None);
        assert_eq!(index.snippet(0, 1), None);
    }
}
