//! Helpers shared by the SQLite and PostgreSQL stores: batch partitioning, integer
//! conversions with corruption checks, and error mapping. Nothing here touches a database.

use std::collections::HashMap;

use qflow_store::{Commit, CommitOutcome, InstanceId, InstanceStatus, StoreError};

/// Wraps a driver error as the store contract's backend error.
pub(crate) fn backend(e: sqlx::Error) -> StoreError {
    StoreError::Backend(Box::new(e))
}

/// Splits a batch into rounds in which every instance appears at most once, keeping batch
/// order. The contract asks for distinct instances per batch; a caller that repeats one
/// still gets the sequential meaning (the second commit sees the first one's fence),
/// because each round is applied completely before the next starts.
pub(crate) fn rounds(batch: &[Commit]) -> Vec<Vec<usize>> {
    let mut seen: HashMap<InstanceId, usize> = HashMap::with_capacity(batch.len());
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    for (index, commit) in batch.iter().enumerate() {
        let round = seen.entry(commit.instance).or_insert(0);
        if rounds.len() <= *round {
            rounds.push(Vec::new());
        }
        rounds[*round].push(index);
        *round += 1;
    }
    rounds
}

/// Takes the creations refused for a retired deployment out of a round and records
/// their outcome.
pub(crate) fn refuse_retired(
    round: Vec<usize>,
    retired: &std::collections::HashSet<usize>,
    outcomes: &mut [CommitOutcome],
) -> Vec<usize> {
    round
        .into_iter()
        .filter(|index| {
            let refused = retired.contains(index);
            if refused {
                outcomes[*index] = CommitOutcome::DeploymentRetired;
            }
            !refused
        })
        .collect()
}

pub(crate) fn fence_to_db(fence: u64) -> Result<i64, StoreError> {
    i64::try_from(fence).map_err(|_| StoreError::Corrupt(format!("fence {fence} out of range")))
}

pub(crate) fn fence_from_db(fence: i64) -> Result<u64, StoreError> {
    u64::try_from(fence)
        .ok()
        .filter(|f| *f >= 1)
        .ok_or_else(|| StoreError::Corrupt(format!("stored fence {fence} is not positive")))
}

pub(crate) fn u32_from_db(what: &str, value: i64) -> Result<u32, StoreError> {
    u32::try_from(value)
        .map_err(|_| StoreError::Corrupt(format!("stored {what} {value} out of range")))
}

pub(crate) fn status_from_db(status: &str) -> Result<InstanceStatus, StoreError> {
    InstanceStatus::parse(status)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown instance status {status:?}")))
}

/// Timer arms of one commit with repeated names collapsed to the last one: PostgreSQL
/// refuses to upsert the same key twice in one statement, and the last arm wins anyway.
pub(crate) fn last_arm_per_name(commit: &Commit) -> Vec<&qflow_store::TimerRecord> {
    let mut out: Vec<&qflow_store::TimerRecord> = Vec::with_capacity(commit.arm_timers.len());
    for timer in &commit.arm_timers {
        if let Some(slot) = out.iter_mut().find(|t| t.name == timer.name) {
            *slot = timer;
        } else {
            out.push(timer);
        }
    }
    out
}
