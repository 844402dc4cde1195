//! Text from outside the binary — a model's ids and names, a scenario's keys, a store's
//! codes and messages — made safe to print on a terminal.
//!
//! A model is input, and an id like `pay\u{1b}[2J` would otherwise clear the screen of
//! whoever runs `qflow check` on it, or forge a line of output. Control characters (C0,
//! DEL, C1) and the bidirectional overrides that reorder what a reader sees are shown
//! escaped, Rust style (`\u{1b}`); every other character, ordinary text included, prints
//! as it is. This module only formats; JSON output needs none of it (serde_json escapes
//! control characters itself).

use std::borrow::Cow;
use std::fmt::Write as _;

/// `n` and `word`, with an `s` unless `n` is 1: `1 lane`, `2 lanes`.
pub(crate) fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// `text` with every control character and bidirectional override escaped as `\u{..}`.
/// Text without them is returned as it is, without a copy.
pub(crate) fn escape(text: &str) -> Cow<'_, str> {
    escape_except(text, &[])
}

/// Like [`escape`], but keeps line breaks and tabs: for messages that are several lines
/// by design (an error carrying a model's diagnostics).
pub(crate) fn escape_lines(text: &str) -> Cow<'_, str> {
    escape_except(text, &['\n', '\t'])
}

/// Serialized JSON with the characters serde_json leaves raw but a terminal acts on (DEL,
/// C1 controls, bidirectional overrides) written as `\uXXXX` escapes: the same JSON
/// value, safe to print. Outside strings JSON text is ASCII, so every such character is
/// inside a string, where the escape means the same character.
pub(crate) fn escape_json(json: &str) -> Cow<'_, str> {
    // C0 controls serde_json escapes itself inside strings; outside them they are the
    // layout's line breaks and indentation, which must stay.
    let left_raw = |c: char| is_unsafe(c) && c >= '\u{7f}';
    if !json.chars().any(left_raw) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if left_raw(c) {
            // Every unsafe character is in the Basic Multilingual Plane: one escape.
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn escape_except<'a>(text: &'a str, keep: &[char]) -> Cow<'a, str> {
    let unsafe_char = |c: char| is_unsafe(c) && !keep.contains(&c);
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Characters a terminal acts on instead of showing: C0 controls, DEL and C1 controls
/// (ESC and CSI start escape sequences; CR and BS overwrite), and the bidirectional
/// embeddings, overrides and isolates that make text read differently than it is.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_text_is_unchanged_and_not_copied() {
        for text in ["pay", "Prüfung `é` 支付 \\x1b", "a\"b'c", ""] {
            assert!(matches!(escape(text), Cow::Borrowed(t) if t == text));
        }
    }

    #[test]
    fn controls_and_overrides_are_escaped() {
        assert_eq!(escape("pay\u{1b}[2J"), "pay\\u{1b}[2J");
        assert_eq!(escape("a\u{0}b\u{7f}c\u{9b}d"), "a\\u{0}b\\u{7f}c\\u{9b}d");
        assert_eq!(escape("x\r\ny\tz"), "x\\u{d}\\u{a}y\\u{9}z");
        assert_eq!(escape("abc\u{202e}fed"), "abc\\u{202e}fed");
    }

    #[test]
    fn escaped_json_is_the_same_value() {
        let value = serde_json::json!({ "id": "a\u{9b}2J\u{202e}b\u{7f}\u{1b}", "n": 1 });
        let json = serde_json::to_string_pretty(&value).unwrap();
        let shown = escape_json(&json);
        assert!(!shown.chars().any(|c| is_unsafe(c) && c != '\n'), "{shown}");
        assert!(
            shown.contains("a\\u009b2J\\u202eb\\u007f\\u001b"),
            "{shown}"
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&shown).unwrap(),
            value
        );
        assert!(matches!(escape_json("{\"a\": \"b\"}"), Cow::Borrowed(_)));
    }

    #[test]
    fn escape_lines_keeps_line_breaks_and_tabs() {
        assert_eq!(escape_lines("one\n\ttwo\u{1b}"), "one\n\ttwo\\u{1b}");
    }
}
