//! A channel's delivery curve (SPEC C2): how often the outbox tries to deliver one
//! request before it gives up.
//!
//! The curve and its arithmetic live in the pure core ([`qflow_core::delivery`]), so
//! that the simulator plays out a scenario's failed deliveries with the very function
//! the dispatcher uses; this module re-exports them under the path this crate has always
//! offered (`qflow_channels::curve::DeliveryCurve`, `qflow_channels::DeliveryCurve`).

pub use qflow_core::delivery::{AfterFailure, DeliveryCurve};
