//! The engine crate's one error type.
//!
//! An `Error` means misuse (an input that can never be valid for this instance), a
//! corrupt snapshot, or a bug. A business outcome — a failed handler, a BPMN error, a
//! timeout — is never an `Error`: it is an [`crate::Input`] the core decides on.

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
    /// A scenario given to the simulator does not fit the definition it runs against.
    #[error("scenario: {0}")]
    Scenario(String),
    /// The store failed; nothing of the request was written.
    #[error("store: {0}")]
    Store(String),
    /// A commit batch failed as a whole; the message is the store's.
    #[error("commit failed, nothing was written: {0}")]
    StoreFailed(String),
    /// A request the runtime will not carry out, and why. Nothing was changed.
    #[error("{what} refused: {why}")]
    Refused { what: String, why: String },
    #[error("no instance {0}")]
    UnknownInstance(String),
    #[error("no deployment {0}")]
    UnknownDeployment(i64),
    /// The instance kept changing under the request; nothing of it was written.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The runtime is shutting down and takes no new requests.
    #[error("the runtime is shutting down")]
    ShuttingDown,
}

impl From<crate::store::StoreError> for Error {
    fn from(e: crate::store::StoreError) -> Self {
        Error::Store(e.to_string())
    }
}
