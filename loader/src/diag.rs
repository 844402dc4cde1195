//! Diagnostics: what the loader says about a model, positioned like a compiler's.
//!
//! Codes are stable (`Q101`…); tests and docs refer to them. A diagnostic never carries
//! a Rust error's `Debug` text: the message says what is wrong and what to change.

use crate::model::Pos;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Stable rule code, e.g. `Q101`.
    pub code: &'static str,
    pub severity: Severity,
    pub pos: Pos,
    /// What is wrong, in one sentence.
    pub message: String,
    /// What to change, when there is something useful to say.
    pub help: Option<String>,
}
