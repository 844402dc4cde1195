//! qflow's engine: the pure deterministic step core and the runtime shell around it.
//!
//! Code map: [`core`] is the pure step (no clock, no I/O, no randomness); [`snapshot`]
//! is the byte-stable instance state; [`handler`] is the host's task code and the one
//! place a handler call becomes an input; [`sim`] drives the production step on a
//! virtual clock; [`store`] is the durable-storage contract the runtime shell uses.

pub mod core;
pub mod error;
pub mod handler;
pub mod memory;
pub mod runtime;
pub mod sim;
pub mod snapshot;
pub mod store;

pub use crate::core::{step, AttemptOutcome, Effect, Input, Step};
pub use crate::error::Error;
pub use crate::handler::{run_handler, Handlers, TaskContext, TaskHandler, TaskOutcome};
pub use crate::snapshot::{Snapshot, Status};
