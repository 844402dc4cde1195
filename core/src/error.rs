//! The core's one error type.
//!
//! An `Error` means misuse (an input that can never be valid for this instance), a
//! corrupt snapshot, a scenario that does not fit its model, or a bug. The runtime's
//! errors (store, refusals, conflicts) are `qflow_runtime::Error`, which wraps this one.
//! A business outcome — a failed handler, a BPMN error, a timeout — is never an
//! `Error`: it is an [`crate::Input`] the core decides on.

/// What went wrong, with enough context to act on it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The bytes are not a MessagePack map with string keys, so nothing can be recovered.
    #[error("snapshot is not decodable: {0}")]
    SnapshotUndecodable(String),
    /// The snapshot was written by a newer engine whose format this one does not know.
    #[error("snapshot format version {found} is newer than this engine's {supported}")]
    SnapshotTooNew { found: u64, supported: u64 },
    /// `Start` was given to an instance that has already started.
    #[error("instance already started")]
    AlreadyStarted,
    /// An input other than `Start` was given to an instance that has not started.
    #[error("instance has not started; the first input must be Start")]
    NotStarted,
    /// The process has no none start event at process level.
    #[error("process `{0}` has no none start event")]
    NoStartEvent(String),
    /// `Start` named a start event the process does not have as a triggered start.
    #[error("process `{process}` has no start event `{start}` with a trigger")]
    UnknownStart { process: String, start: String },
    /// Variables an input brings are over a bound of `crate::limits`; nothing changed.
    #[error("variables refused: {0}")]
    VariablesRefused(String),
    /// A scenario given to the simulator does not fit the definition it runs against.
    #[error("scenario: {0}")]
    Scenario(String),
}
