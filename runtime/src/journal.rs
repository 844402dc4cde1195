//! The input journal's writing half (SPEC G3, `docs/replay.md`): which steps are
//! journaled, and the row a step's commit carries ([`qflow_store::JournalEntry`]).
//!
//! Off by default. When it is on for a process, every step of its instances — in a
//! lane or outside one (an operator's resume, a migration) — writes one row in the
//! commit of the step, so a row exists exactly when the step took effect. The row is
//! built in [`crate::claim::plan`], which is pure: what it holds is a function of the
//! claim, the input and `now`, like the rest of the commit.

use std::collections::BTreeSet;

use qflow_core::journal;
use qflow_core::{Effect, Input};
use qflow_loader::model::Definition;
use qflow_store::{DeploymentId, JournalEntry};

/// Which instances' steps are journaled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum JournalPolicy {
    /// None (the default).
    #[default]
    Off,
    /// Every instance's.
    All,
    /// The instances of these processes (BPMN process ids), whichever deployment of the
    /// process they run on.
    Processes(BTreeSet<String>),
}

impl JournalPolicy {
    /// Whether the steps of instances of `def` are journaled.
    pub fn covers(&self, def: &Definition) -> bool {
        match self {
            JournalPolicy::Off => false,
            JournalPolicy::All => true,
            JournalPolicy::Processes(ids) => ids.contains(&def.id),
        }
    }

    /// Whether anything is journaled at all.
    pub fn is_on(&self) -> bool {
        match self {
            JournalPolicy::Off => false,
            JournalPolicy::All => true,
            JournalPolicy::Processes(ids) => !ids.is_empty(),
        }
    }
}

/// What a journaled step keeps from before it runs: the input's JSON and the snapshot
/// bytes the delta is taken against.
pub(crate) struct Before {
    input: String,
    snapshot: Vec<u8>,
}

impl Before {
    /// Taken before the step consumes `input`. A creation's delta is taken against no
    /// bytes at all (a replay starts from nothing); every other step's against the bytes
    /// the store holds (`stored`), which the previous row's delta rebuilt — whatever
    /// build wrote them. Only a claim that does not know them (a cached claim from
    /// before the journal covered its process) encodes its decoded snapshot, which is
    /// the same bytes when this build wrote them.
    pub(crate) fn take(
        input: &Input,
        snapshot: &qflow_core::Snapshot,
        stored: Option<Vec<u8>>,
        creation: bool,
    ) -> Before {
        Before {
            // The engine's own input type always serializes.
            input: serde_json::to_string(input).unwrap_or_default(),
            snapshot: match (creation, stored) {
                (true, _) => Vec::new(),
                (false, Some(bytes)) => bytes,
                (false, None) => snapshot.encode(),
            },
        }
    }

    /// The row of the step that wrote `after` and `effects` as commit `seq`.
    pub(crate) fn entry(
        self,
        seq: u64,
        deployment: DeploymentId,
        at_ms: i64,
        after: &[u8],
        effects: &[Effect],
    ) -> JournalEntry {
        // The engine's own bytes always split; a failure would be a bug that replay then
        // reports as a damaged row rather than a lost commit.
        let delta = journal::delta(&self.snapshot, after).unwrap_or_default();
        let mut entry = JournalEntry {
            seq,
            deployment,
            at_ms,
            input: self.input,
            delta,
            snapshot_hash: journal::hash(after),
            effects_hash: journal::effects_hash(effects),
            row_hash: Vec::new(),
        };
        entry.row_hash = entry.row_hash_of();
        entry
    }
}
