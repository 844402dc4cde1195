//! qflow's engine: the pure deterministic step core and the runtime shell around it.

pub mod memory;
pub mod store;
