//! Camunda 8 keys (issue 28, `docs/workers.md` "Keys"): the 64-bit integers Camunda's
//! API names process instances, element instances, jobs, user tasks and incidents by,
//! kept by the store beside qflow's own names (`Store::camunda_keys`). A name gets its
//! key the first time the Camunda surface hands it out and keeps it (a job's and a user
//! task's until the task is withdrawn); a key reads back to its name in one indexed
//! read. qflow's own APIs never show these keys.
//!
//! Messages and signals are not kept anywhere a key could name: their keys are minted
//! (`minted_key`) in the upper half of partition 1's range, which the store's sequence
//! would take 2^50 keys to reach, so they never equal a stored key.

use qflow_store::{KeyKind, KeyName, CAMUNDA_KEYS_MAX};

use crate::pull::TaskId;
use crate::{Error, Ops, Result};

impl Ops {
    /// The Camunda 8 key of each name, in order, given now where a name has none yet.
    pub async fn camunda_keys(&self, names: &[KeyName]) -> Result<Vec<i64>> {
        let mut out = Vec::with_capacity(names.len());
        for chunk in names.chunks(CAMUNDA_KEYS_MAX) {
            out.extend(self.store().camunda_keys(chunk).await?);
        }
        Ok(out)
    }

    /// The name `key` was given to; `what` names the kind a caller expects, for the
    /// "not found" of a key that names nothing or another kind of thing.
    pub async fn camunda_key(
        &self,
        key: i64,
        kind: KeyKind,
        what: &'static str,
    ) -> Result<KeyName> {
        match self.store().camunda_key(key).await? {
            Some(name) if name.kind == kind => Ok(name),
            _ => Err(Error::NotFound {
                what,
                id: key.to_string(),
            }),
        }
    }

    /// The pull-task attempt a job key names.
    pub async fn job_of_key(&self, key: i64) -> Result<TaskId> {
        let name = self.camunda_key(key, KeyKind::Job, "job").await?;
        let attempt = qflow_core::Attempt::new(name.attempt).ok_or_else(|| Error::NotFound {
            what: "job",
            id: key.to_string(),
        })?;
        Ok(TaskId {
            instance: name.instance,
            attempt,
            node: name.node,
        })
    }
}

/// A key for a message or signal, which nothing can look up: partition 1's upper half
/// (`1 << 51 | 1 << 50`) and 50 random bits. Partition 1, so a client that reads the
/// partition off a key sees the one partition the topology shows.
pub fn minted_key() -> i64 {
    let random = uuid::Uuid::new_v4().as_u64_pair().0 & ((1 << 50) - 1);
    ((1_i64 << 51) | (1 << 50)) | random as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_keys_are_partition_one_and_never_in_the_stored_sequence_range() {
        for _ in 0..1_000 {
            let key = minted_key();
            assert_eq!(key >> 51, 1, "{key}");
            assert!(key >= (1 << 51) | (1 << 50), "{key}");
            assert!(key > qflow_store::CAMUNDA_KEY_FIRST);
        }
    }
}
