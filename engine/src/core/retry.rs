//! What a failed attempt means (SPEC E4–E6).
//!
//! This commit holds only the policy-less path: a failed attempt of a task without
//! `q:retry` lands the instance in FAILED with the handler's code. The retry park lands
//! separately so that the golden corpus can pin the no-retry bytes first (E3).

use qflow_loader::model::NodeIdx;

use super::flow::Run;

impl Run<'_> {
    /// The attempt in flight at `idx` failed with `code`.
    pub(super) fn attempt_failed(&mut self, idx: NodeIdx, code: String, message: String) {
        self.fail(&code, Some(idx), None, message);
    }

    /// A retry park came due. Only a task with a policy arms one.
    pub(super) fn redrive(&mut self, idx: NodeIdx) {
        let _ = idx;
    }
}
