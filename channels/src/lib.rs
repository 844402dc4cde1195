//! Outbox dispatcher and channel adapters (SPEC §5, C1–C8).
//!
//! Nothing lives here yet: channel calls are loaded and validated by `qflow-loader`, but
//! delivery is a later issue. This crate must never reach into the engine core's state;
//! it only carries `Effect`s out and relays responses back in as `Input`s.
