//! Instruction-count program for the CI cost gate (issue 26 point 4, `scripts/cost-gate`,
//! docs/performance.md "Cost gate in CI"); not a test and not a timing.
//!
//! It drives what one lane round does with a batch, on the in-memory store, in the
//! lane's own parts: for each of `BATCH_INSTANCES` instances of the 10-service-task
//! linear model (`cli/benches/linear.bpmn`) it steps the cached claim with
//! `claim::plan_into` (the pure step, the commit plan built in the batch's vector, the
//! lease decision), as the lane's round does, then commits the whole batch in one
//! `Store::commit` and takes the next claims from the applied commits, as the lane's
//! cache does. One wave is 11 such batches — the starts, nine
//! rounds of task completions, the completions that end the instances — and
//! `QFLOW_COST_WAVES=N` runs N waves and exits.
//!
//! What it leaves out, on purpose: the lane itself is a tokio task whose round reads the
//! wall clock, selects over its inbox and running handlers, and spawns handler futures;
//! its batches depend on what is ready when, so their instruction counts are not
//! repeatable. Here nothing in the measured region reads a clock, draws randomness or
//! waits: instance ids are `Uuid::from_u128(k)`, `now` is a counter, the handler's
//! answer is the `TaskCompleted` input the `RunTask` call asks for, and the store's
//! futures never suspend (its state is one mutex, never held across an await), so
//! `futures::executor::block_on` runs them on this thread. Under
//! `valgrind --tool=callgrind`, (Ir(2N) − Ir(N)) / (11 · N) is the cost of one batch.

use std::sync::Arc;

use qflow_runtime::claim::{plan_into, Claim, LeaseRules};
use qflow_runtime::journal::JournalPolicy;
use qflow_runtime::{Input, RuntimeConfig};
use qflow_store::memory::MemoryStore;
use qflow_store::{CommitOutcome, DeploymentId, NewDeployment, Store};

const MODEL: &str = include_str!("../../cli/benches/linear.bpmn");
/// Instances stepped in each batch (one step each, as a lane round takes at most one step
/// per instance).
const BATCH_INSTANCES: u128 = 64;
/// Batches one instance of the model takes: its start and ten task completions.
const BATCHES_PER_WAVE: usize = 11;
/// The most waves one run accepts (bounds the store's growth).
const WAVES_MAX: usize = 10_000;

fn main() {
    let waves: usize = std::env::var("QFLOW_COST_WAVES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    assert!(
        (1..=WAVES_MAX).contains(&waves),
        "QFLOW_COST_WAVES: 1..={WAVES_MAX}"
    );
    let store = MemoryStore::new();
    let def = Arc::new(load());
    let deployment = futures::executor::block_on(store.deploy(NewDeployment {
        process_id: "linear",
        content_hash: "cost-gate-linear",
        source: MODEL,
        deployed_at_ms: 0,
        schedules: &[],
    }))
    .expect("deploys")
    .id;
    let rules = LeaseRules {
        lease_ms: RuntimeConfig::default().inflight_lease_ms,
        refresh_divisor: 2,
        handing_over: false,
    };
    let mut now = 1_000;
    let mut batches = 0;
    for wave in 0..waves {
        batches += run_wave(&store, &def, deployment, rules, wave, &mut now);
    }
    eprintln!(
        "ran {waves} waves, {batches} batches of {BATCH_INSTANCES} instances on the memory store"
    );
}

fn load() -> qflow_loader::model::Definition {
    let mut loaded = qflow_loader::load_str(MODEL).expect("the linear model loads");
    assert_eq!(loaded.definitions.len(), 1, "one executable process");
    loaded.definitions.remove(0)
}

/// `BATCH_INSTANCES` fresh instances from start to end, one batch per step. Returns the
/// number of batches committed.
fn run_wave(
    store: &MemoryStore,
    def: &Arc<qflow_loader::model::Definition>,
    deployment: DeploymentId,
    rules: LeaseRules,
    wave: usize,
    now: &mut i64,
) -> usize {
    let first = wave as u128 * BATCH_INSTANCES;
    let mut work: Vec<(Claim, Input)> = (first..first + BATCH_INSTANCES)
        .map(|k| {
            let claim = Claim::fresh(uuid::Uuid::from_u128(k + 1), deployment, def.clone());
            let input = Input::Start {
                variables: Default::default(),
                start: None,
            };
            (claim, input)
        })
        .collect();
    // `QFLOW_COST_JOURNAL=1`: every step writes its journal row (not part of the gate's
    // figure; what docs/replay.md prices the journal's instructions with).
    let journal = &if std::env::var_os("QFLOW_COST_JOURNAL").is_some() {
        JournalPolicy::All
    } else {
        JournalPolicy::Off
    };
    let mut batches = 0;
    while !work.is_empty() {
        *now += 1;
        let mut commits = Vec::with_capacity(work.len());
        let mut thens = Vec::with_capacity(work.len());
        for (claim, input) in work.drain(..) {
            let then = plan_into(&mut commits, claim, input, None, *now, *now, rules, journal)
                .expect("plans");
            thens.push(then);
        }
        let outcomes = futures::executor::block_on(store.commit(commits)).expect("commits");
        batches += 1;
        for (then, outcome) in thens.into_iter().zip(outcomes) {
            let CommitOutcome::Applied { fence } = outcome else {
                panic!("commit not applied: {outcome:?}");
            };
            // The handler's answer to the one call the step asked for; none once ended.
            if let Some(call) = then.calls.into_iter().next() {
                let next = Claim {
                    fence: Some(fence),
                    ..then.next
                };
                let input = Input::TaskCompleted {
                    node: call.node,
                    attempt: call.attempt,
                    outputs: Default::default(),
                };
                work.push((next, input));
            } else {
                assert!(then.finished_now, "an instance without a call has ended");
            }
        }
    }
    assert_eq!(batches, BATCHES_PER_WAVE, "one batch per step of the model");
    batches
}
