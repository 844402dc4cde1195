//! The runtime's one error type: the core's misuse errors plus what the shell adds (the
//! store, refusals, conflicts, shutdown).
//!
//! A business outcome — a failed handler, a BPMN error, a timeout — is never an `Error`:
//! it is an input the core decides on.

use qflow_store::StoreError;

/// What went wrong, with enough context to act on it. Nothing of a request that ends in
/// an `Error` was written.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The core refused the input (a second `Start`, an undecodable snapshot, ...).
    #[error(transparent)]
    Core(#[from] qflow_core::Error),
    /// The store failed; nothing of the request was written.
    #[error("store: {0}")]
    Store(String),
    /// A commit batch failed as a whole; the message is the store's.
    #[error("commit failed, nothing was written: {0}")]
    StoreFailed(String),
    /// A request the runtime will not carry out, and why. Nothing was changed.
    #[error("{what} refused: {why}")]
    Refused { what: String, why: String },
    /// The store refused a start (or a migration) because the deployment already has an
    /// instance with the same business key: `existing`. Nothing was changed.
    #[error("business key already used on this deployment by instance {existing}")]
    DuplicateBusinessKey { existing: qflow_store::InstanceId },
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

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        Error::Store(e.to_string())
    }
}
