//! What a failed attempt means (SPEC E4–E8): a durable retry park, or FAILED.
//!
//! A failed attempt of a task with `q:retry` and budget left is a park, never a sleep:
//! the token stays at the task, the attempt counter `a/<node>` moves to the next attempt,
//! the backoff-window marker `m/<node>` records the failure class, and the timer
//! `r:<node>` is armed at `now + RetryPolicy::delay_ms(attempt, jitter_ppb(instance,
//! node, attempt))` — the one backoff formula `qflow check --explain` also uses. When
//! the park fires, the marker goes and the next attempt runs.
//!
//! Exhaustion, a `nonRetryableCodes` hit, or a next attempt that would start later
//! than `maxElapsed` after the first failure all land in the same FAILED state, carrying
//! the failure's own code and keeping the attempt counter. A task without a policy never
//! touches any of these keys (E3).

use qflow_loader::model::{jitter_ppb, NodeIdx, RetryPolicy};

use super::run::Run;
use super::timers::{TimerKind, TimerName};
use super::{Attempt, FailureKind};

/// `fd` details of a FAILED snapshot that the retry machinery wrote.
pub mod details {
    /// Every attempt of the policy was spent.
    pub const EXHAUSTED: &str = "exhausted";
    /// The failure's code is in `nonRetryableCodes`.
    pub const NON_RETRYABLE: &str = "non_retryable";
    /// The next attempt would start later than `maxElapsed` after the first failure.
    pub const MAX_ELAPSED: &str = "max_elapsed";
}

impl Run<'_> {
    /// The attempt in flight at `idx` failed (`kind`) with `code`: park for a retry when
    /// the policy allows one, else FAILED. The marker records the kind's class; the code
    /// only decides `nonRetryableCodes`.
    pub(super) fn attempt_failed(
        &mut self,
        idx: NodeIdx,
        kind: FailureKind,
        code: String,
        message: String,
    ) {
        // A channel call's dead attempt takes its undelivered requests with it (C6),
        // whether a retry follows or the instance fails.
        self.withdraw_requests(idx);
        let Some(policy) = self.policy(idx) else {
            return self.fail(&code, Some(idx), None, message);
        };
        let node_key = self.id(idx);
        let node: &str = &node_key;
        let attempt = self.snap.attempt_in_progress(node);
        // The counter is written even on the fatal paths: a FAILED instance shows how
        // many attempts it burned.
        self.snap.set_attempt(node, attempt);
        if policy.non_retryable_codes.contains(&code) {
            return self.fail(
                &code,
                Some(idx),
                Some(details::NON_RETRYABLE.into()),
                message,
            );
        }
        // Attempts burned before an operator reset the budget do not count (O3).
        let counted = attempt.get() - self.snap.budget_base(node).min(attempt.get() - 1);
        if counted >= policy.max_attempts.get() {
            return self.fail(&code, Some(idx), Some(details::EXHAUSTED.into()), message);
        }
        let due_at_ms = self.backoff_instant(policy, node, attempt.get(), counted);
        if let Some(max) = policy.max_elapsed {
            let first = *self
                .snap
                .first_failure_ms
                .entry(node.to_string())
                .or_insert(self.now_ms);
            if due_at_ms.saturating_sub(first) > i64::try_from(max.0).unwrap_or(i64::MAX) {
                return self.fail(&code, Some(idx), Some(details::MAX_ELAPSED.into()), message);
            }
        }
        self.park(idx, attempt.next(), kind.class(), due_at_ms);
    }

    /// The instant the next attempt may start after `failed_attempt` failed, the
    /// `counted`-th attempt of the budget (the same number unless the budget was reset).
    /// The jitter follows the attempt, the curve the budget.
    fn backoff_instant(
        &self,
        policy: &RetryPolicy,
        node: &str,
        failed_attempt: u32,
        counted: u32,
    ) -> i64 {
        let jitter = jitter_ppb(self.instance, node, failed_attempt);
        let delay = policy.delay_ms(counted, jitter);
        self.now_ms
            .saturating_add(i64::try_from(delay).unwrap_or(i64::MAX))
    }

    /// Enters the backoff window: the token stays, the counter names the next attempt,
    /// the marker carries the class, the attempt's timeout window closes and the park
    /// timer is armed. Timer boundaries stay armed: they span all attempts (E7).
    fn park(&mut self, idx: NodeIdx, next_attempt: Attempt, class: &str, due_at_ms: i64) {
        let node_key = self.id(idx);
        let node: &str = &node_key;
        self.snap.set_attempt(node, next_attempt);
        self.snap.markers.insert(node.to_string(), class.to_owned());
        self.resolve(&TimerName::new(TimerKind::Timeout, node));
        self.arm(TimerName::new(TimerKind::Retry, node), due_at_ms);
    }

    /// A retry park came due: leave the backoff window and run the next attempt.
    pub(super) fn redrive(&mut self, idx: NodeIdx) {
        let node_key = self.id(idx);
        let node: &str = &node_key;
        // Only a parked task arms `r:`, so the marker is there (unless it was malformed
        // on decode; re-driving is still the only way forward then).
        self.snap.markers.remove(node);
        let attempt = self.snap.attempt_in_progress(node);
        self.run_attempt(idx, attempt);
    }
}
