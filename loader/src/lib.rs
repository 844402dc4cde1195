//! qflow's loader: BPMN 2.0 XML with the `q:` extension namespace in, validated and
//! immutable [`model::Definition`]s out (SPEC §2, L1–L8).
//!
//! The loader never panics on input and never accepts a model silently: every problem
//! is a positioned [`diag::Diagnostic`] with a stable code, and every diagnostic is
//! collected (sorted by position) rather than stopping at the first.

pub mod diag;
pub mod expr;
pub mod model;
