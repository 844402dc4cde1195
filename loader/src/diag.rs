//! Diagnostics: what the loader says about a model, positioned like a compiler's.
//!
//! Codes are stable (`Q101`…); tests and docs refer to them. A diagnostic never carries
//! a Rust error's `Debug` text: the message says what is wrong and what to change.

use crate::model::Pos;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Error,
    Warning,
    /// What the loader decided on the author's behalf, for them to know (a Java binding
    /// read as a pull topic): nothing to fix.
    Note,
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

impl Diagnostic {
    /// An error with `code` at `pos`.
    pub fn error(code: &'static str, pos: Pos, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            code,
            severity: Severity::Error,
            pos,
            message: message.into(),
            help: None,
        }
    }

    /// A warning with `code` at `pos`: the model loads, but the author should look.
    pub fn warning(code: &'static str, pos: Pos, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, pos, message)
        }
    }

    /// A note with `code` at `pos`: the model loads as the note says.
    pub fn note(code: &'static str, pos: Pos, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Note,
            ..Diagnostic::error(code, pos, message)
        }
    }

    /// Adds the "what to change" line.
    pub fn with_help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        })
    }
}

impl std::fmt::Display for Diagnostic {
    /// `line:col: error[Q101]: message` — the file name is the caller's to prepend.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}[{}]: {}",
            self.pos, self.severity, self.code, self.message
        )?;
        if let Some(help) = &self.help {
            write!(f, " (help: {help})")?;
        }
        Ok(())
    }
}
