//! A seeded fault simulation of the runtime (issue 8): real `Runtime` replicas, lanes,
//! poller and handlers, on one tokio current-thread scheduler, a [`ManualClock`] and a
//! fault-injecting store ([`store::FaultyStore`]) over the in-memory store. Everything a
//! run chooses — models, handler scripts, fault rates, crash points, clock moves, a
//! second replica — is drawn from the seed, and the scheduler is deterministic (one
//! thread, no I/O, no wall clock, `biased` selects wherever the harness waits), so a seed
//! replays exactly: [`Report::digest`] fingerprints the final store.
//!
//! A run has three phases. *Faults*: the harness interleaves starting instances, letting
//! the system run, small clock moves and large jumps, crashes (`Runtime::abort` after a
//! seeded number of scheduler turns, so it lands mid-round, mid-commit or mid-handler)
//! with a new replica on the same store, and a second replica beside the first (fence
//! conflicts), while the store fails commits, reads and timer claims. *Drain*: faults off,
//! the clock moved to the next due timer (at most 5 s at a time) until every instance has
//! ended, within a bound — not ending is a hang, reported with the seed. *Checks*: the
//! store's ledger (checked as commits were applied) and the end of every instance against
//! its script ([`models::check_instance`]).
//!
//! Nothing here sleeps on the wall clock; the bounds are counted in scheduler turns and
//! drain rounds.

pub mod models;
pub mod rng;
pub mod store;

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Once};

use qflow_core::Snapshot;
use qflow_runtime::{AsyncHandlers, Clock, ManualClock, Runtime, RuntimeConfig, TaskCall};
use qflow_runtime::{Stats, TaskOutcome};
use qflow_store::{DeploymentId, InstanceFilter, InstanceId, InstanceStatus, Store};

use models::{draw_script, Ending, ModelKind, Script, Scripted, MODELS, SCRIPTED_PANIC};
use rng::{Digest, Rng};
use store::{Breakage, FaultCounts, FaultRates, FaultyStore};

/// The manual clock's start: an ordinary instant.
pub const T0: i64 = 1_700_000_000_000;
/// Scheduler turns with no store call after which the system counts as idle.
const QUIET_TURNS: u32 = 16;
/// Scheduler turns one settle may take before the system counts as livelocked.
const SETTLE_TURNS_MAX: u32 = 100_000;
/// Scheduler turns a start may take before it counts as hung.
const START_TURNS_MAX: u32 = 100_000;
/// Drain rounds (settle, then move the clock) before unfinished instances are a hang.
const DRAIN_ROUNDS_MAX: u32 = 5_000;
/// The longest clock move of one drain round.
const DRAIN_STEP_MS_MAX: i64 = 5_000;
/// Replicas alive at once.
const REPLICAS_MAX: usize = 2;
/// Start attempts per instance before the harness gives up on it.
const START_TRIES_MAX: u32 = 50;
/// The handler names the models use.
const HANDLERS: [&str; 6] = ["a", "b", "c", "d", "p1", "p2"];

/// What to run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    pub seed: u64,
    pub breakage: Breakage,
}

/// What one seed did and found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub seed: u64,
    pub breakage: Breakage,
    pub instances: u64,
    pub completed: u64,
    pub failed: u64,
    pub faults: FaultCounts,
    pub crashes: u64,
    pub replicas_started: u64,
    pub clock_jumps: u64,
    /// Scripted attempt endings drawn, by [`Ending`] (ok, fail, fatal, bpmn, panic, hang).
    pub scripted: [u64; 6],
    pub handler_calls: u64,
    pub conflicts: u64,
    pub steps: u64,
    pub drain_rounds: u32,
    /// Fingerprint of the final store: equal for two runs of one seed.
    pub digest: u64,
    /// Invariant violations, hangs and panics; empty when the seed passed.
    pub failures: Vec<String>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// The one-line command that replays this seed.
    pub fn replay_command(&self) -> String {
        match self.breakage {
            Breakage::None => format!("scripts/fault-sim --seed {}", self.seed),
            b => format!(
                "scripts/fault-sim --seed {} --break {}",
                self.seed,
                b.as_str()
            ),
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "seed {}: {} instances ({} completed, {} failed), store faults {} \
             (commit {} / ambiguous {} / read {} / claim {}), crashes {}, replicas {}, \
             jumps {}, handler calls {}, conflicts {}, steps {}, digest {:016x}",
            self.seed,
            self.instances,
            self.completed,
            self.failed,
            self.faults.store_faults(),
            self.faults.commits_failed,
            self.faults.commits_ambiguous,
            self.faults.reads_failed,
            self.faults.claims_lost,
            self.crashes,
            self.replicas_started,
            self.clock_jumps,
            self.handler_calls,
            self.conflicts,
            self.steps,
            self.digest
        )
    }
}

/// Runs one seed to its end and reports; never panics (a panic is a failure).
pub fn run(options: Options) -> Report {
    quiet_scripted_panics();
    let mut report = Report {
        seed: options.seed,
        breakage: options.breakage,
        ..Report::default()
    };
    let scheduler = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(s) => s,
        Err(e) => {
            report.failures.push(format!("no tokio runtime: {e}"));
            return report;
        }
    };
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
        scheduler.block_on(Sim::new(options).run())
    }));
    match outcome {
        Ok(r) => r,
        Err(panic) => {
            let message = qflow_core::handler::panic_message(panic.as_ref())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            report
                .failures
                .push(format!("the simulation panicked: {message}"));
            report
        }
    }
}

/// A scripted panic is an outcome, not news: keep it off stderr. Every other panic is
/// printed as usual.
fn quiet_scripted_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let scripted = payload
                .downcast_ref::<&str>()
                .is_some_and(|s| s.starts_with(SCRIPTED_PANIC))
                || payload
                    .downcast_ref::<String>()
                    .is_some_and(|s| s.starts_with(SCRIPTED_PANIC));
            if !scripted {
                previous(info);
            }
        }));
    });
}

/// One instance the run will start.
struct Plan {
    id: InstanceId,
    model: ModelKind,
    script: Script,
}

struct Replica {
    rt: Runtime,
    stats: Arc<Stats>,
}

struct Sim {
    report: Report,
    /// The harness's own choices: actions, crash points, clock moves, replica settings.
    rng: Rng,
    store: Arc<FaultyStore>,
    clock: Arc<ManualClock>,
    handlers: AsyncHandlers,
    plans: Vec<Plan>,
    deployments: BTreeMap<ModelKind, DeploymentId>,
    pending: VecDeque<usize>,
    replicas: Vec<Replica>,
}

impl Sim {
    fn new(options: Options) -> Sim {
        let root = Rng::new(options.seed);
        let mut plan_rng = root.fork(1);
        let rates = FaultRates {
            commit_fails_per_mille: plan_rng.range(0, 60),
            commit_ambiguous_per_mille: plan_rng.range(0, 60),
            read_fails_per_mille: plan_rng.range(0, 40),
        };
        let store = Arc::new(FaultyStore::new(root.fork(3), rates, options.breakage));
        let clock = Arc::new(ManualClock::new(T0));
        let mut report = Report {
            seed: options.seed,
            breakage: options.breakage,
            ..Report::default()
        };
        let count = plan_rng.range(3, 10);
        let plans: Vec<Plan> = (0..count)
            .map(|i| {
                let model = *plan_rng.pick(&MODELS);
                let script = draw_script(model, &mut plan_rng);
                for attempts in script.values() {
                    for s in attempts {
                        report.scripted[ending_index(s.ending)] += 1;
                    }
                }
                // Ids follow the seed, and with them lanes and store order.
                let id = InstanceId::from_u64_pair(options.seed, i);
                Plan { id, model, script }
            })
            .collect();
        report.instances = count;
        let scripts: BTreeMap<InstanceId, Script> =
            plans.iter().map(|p| (p.id, p.script.clone())).collect();
        let handlers = scripted_handlers(Arc::new(scripts), clock.clone());
        Sim {
            report,
            rng: root.fork(2),
            store,
            clock,
            handlers,
            pending: (0..plans.len()).collect(),
            plans,
            deployments: BTreeMap::new(),
            replicas: Vec::new(),
        }
    }

    async fn run(mut self) -> Report {
        self.start_replica();
        if let Err(e) = self.deploy().await {
            self.report.failures.push(e);
            return self.finish().await;
        }
        self.store.set_faults(true);
        self.fault_phase().await;
        self.store.set_faults(false);
        self.drain().await;
        self.check().await;
        self.finish().await
    }

    async fn deploy(&mut self) -> Result<(), String> {
        for model in MODELS {
            let rt = &self.replicas[0].rt;
            let record = rt
                .deploy(model.xml(), None)
                .await
                .map_err(|e| format!("model `{}` does not deploy: {e}", model.name()))?;
            self.deployments.insert(model, record.id);
        }
        Ok(())
    }

    fn start_replica(&mut self) {
        let n = self.report.replicas_started;
        self.report.replicas_started += 1;
        let config = RuntimeConfig {
            lanes: self.rng.range(1, 2) as usize,
            batch_max: *self.rng.pick(&[1, 3, 256]),
            poll_interval_ms: *self.rng.pick(&[1, 50, 1_000]),
            handler_time_limit_ms: 30_000,
            inflight_lease_ms: 40_000,
            timer_lease_ms: 30_000,
            replica_id: format!("replica-{n}"),
            ..RuntimeConfig::default()
        };
        let rt = Runtime::start(
            self.store.clone() as Arc<dyn Store>,
            self.handlers.clone(),
            self.clock.clone() as Arc<dyn Clock>,
            config,
        );
        self.replicas.push(Replica {
            stats: rt.stats(),
            rt,
        });
    }

    fn crash(&mut self, index: usize) {
        let replica = self.replicas.remove(index);
        self.count_stats(&replica.stats);
        replica.rt.abort();
        self.report.crashes += 1;
    }

    fn count_stats(&mut self, stats: &Stats) {
        let v = stats.view();
        self.report.handler_calls += v.handler_calls;
        self.report.conflicts += v.conflicts;
        self.report.steps += v.steps;
    }

    async fn fault_phase(&mut self) {
        let actions = self.rng.range(40, 160);
        for _ in 0..actions {
            match self.rng.below(100) {
                0..=29 => {
                    self.settle().await;
                }
                30..=54 => {
                    let by = self.rng.range(1, 3_000) as i64;
                    self.clock.advance_ms(by);
                }
                55..=62 => {
                    let by = self.rng.range(20_000, 120_000) as i64;
                    self.clock.advance_ms(by);
                    self.report.clock_jumps += 1;
                }
                63..=69 => {
                    // Mid-flight: a seeded number of scheduler turns after the last move.
                    let turns = self.rng.below(40) as u32;
                    turns_of_the_scheduler(turns).await;
                    let victim = self.rng.below(self.replicas.len() as u64) as usize;
                    self.crash(victim);
                    if self.replicas.is_empty() || self.rng.chance(500) {
                        self.start_replica();
                    }
                }
                70..=74 => {
                    if self.replicas.len() < REPLICAS_MAX {
                        self.start_replica();
                    }
                }
                _ => {
                    if self.replicas.is_empty() {
                        self.start_replica();
                    }
                    if let Some(i) = self.pending.pop_front() {
                        if !self.try_start(i).await {
                            self.pending.push_back(i);
                        }
                    }
                }
            }
            if self.replicas.is_empty() {
                self.start_replica();
            }
        }
    }

    /// Starts plan `i` through a replica; whether it exists afterwards. A start whose
    /// commit was reported failed may have been applied: the store says.
    async fn try_start(&mut self, i: usize) -> bool {
        let plan = &self.plans[i];
        let replica = self.rng.below(self.replicas.len() as u64) as usize;
        let rt = &self.replicas[replica].rt;
        let start =
            rt.start_instance_with_id(plan.id, self.deployments[&plan.model], Default::default());
        match bounded(start, START_TURNS_MAX).await {
            Some(Ok(())) => return true,
            Some(Err(_)) => {}
            None => {
                let id = plan.id;
                self.report
                    .failures
                    .push(format!("hang: the start of {id} never answered"));
            }
        }
        matches!(self.store.inner().instance(plan.id).await, Ok(Some(_)))
    }

    /// Lets the scheduler run until no store call happened for a while. `false`: still
    /// busy after the bound (a livelock).
    async fn settle(&self) -> bool {
        let mut quiet = 0;
        for _ in 0..SETTLE_TURNS_MAX {
            let before = self.store.calls();
            tokio::task::yield_now().await;
            if self.store.calls() == before {
                quiet += 1;
                if quiet >= QUIET_TURNS {
                    return true;
                }
            } else {
                quiet = 0;
            }
        }
        false
    }

    async fn drain(&mut self) {
        if self.replicas.is_empty() {
            self.start_replica();
        }
        while let Some(i) = self.pending.pop_front() {
            let mut started = false;
            for _ in 0..START_TRIES_MAX {
                if self.try_start(i).await {
                    started = true;
                    break;
                }
                self.settle().await;
            }
            if !started {
                let id = self.plans[i].id;
                self.report
                    .failures
                    .push(format!("instance {id} could not be started without faults"));
            }
        }
        for round in 0..DRAIN_ROUNDS_MAX {
            self.report.drain_rounds = round;
            if !self.settle().await {
                self.report.failures.push(format!(
                    "livelock: still busy after {SETTLE_TURNS_MAX} scheduler turns"
                ));
                return;
            }
            if self.running().await.is_empty() {
                return;
            }
            let now = self.clock.now_ms();
            match self.store.inner().next_timer_due().await {
                Ok(Some(due)) if due > now => {
                    self.clock.set_ms(due.min(now + DRAIN_STEP_MS_MAX));
                }
                _ => self.clock.advance_ms(1_000),
            }
        }
        let running = self.running().await;
        self.report.failures.push(format!(
            "hang: {} instances still running after {DRAIN_ROUNDS_MAX} drain rounds: {:?}",
            running.len(),
            running
        ));
    }

    /// The planned instances that have not ended (or are missing).
    async fn running(&self) -> Vec<InstanceId> {
        let mut out = Vec::new();
        for plan in &self.plans {
            match self.store.inner().instance(plan.id).await {
                Ok(Some(r)) if r.status != InstanceStatus::Running => {}
                _ => out.push(plan.id),
            }
        }
        out
    }

    async fn check(&mut self) {
        self.report.failures.extend(self.store.violations());
        let inner = self.store.inner();
        for plan in &self.plans {
            let id = plan.id;
            let name = plan.model.name();
            let record = match inner.instance(id).await {
                Ok(Some(r)) => r,
                _ => {
                    self.report
                        .failures
                        .push(format!("instance {id} ({name}) is not in the store"));
                    continue;
                }
            };
            match record.status {
                InstanceStatus::Completed => self.report.completed += 1,
                InstanceStatus::Failed => self.report.failed += 1,
                _ => {}
            }
            if let Err(e) = Snapshot::decode(&record.snapshot) {
                self.report.failures.push(format!(
                    "instance {id} ({name}): the stored snapshot does not decode: {e}"
                ));
            }
            let rows = inner.attempts(id).await.unwrap_or_default();
            if let Err(e) = models::check_instance(plan.model, &plan.script, &record, &rows) {
                self.report.failures.push(format!(
                    "instance {id} ({name}): {e}; script {:?}; history {:?}",
                    plan.script,
                    rows.iter()
                        .map(|r| (
                            r.node.as_str(),
                            r.attempt.get(),
                            r.outcome.as_str(),
                            r.code.as_deref()
                        ))
                        .collect::<Vec<_>>()
                ));
            }
            let timers = inner.timers(id).await.unwrap_or_default();
            if record.status != InstanceStatus::Running && !timers.is_empty() {
                self.report.failures.push(format!(
                    "instance {id} ({name}) ended {:?} with timer rows left: {:?}",
                    record.status,
                    timers
                        .iter()
                        .map(|t| t.name.to_string())
                        .collect::<Vec<_>>()
                ));
            }
        }
        let all = inner
            .instances(&InstanceFilter::default())
            .await
            .unwrap_or_default();
        if all.len() != self.plans.len() {
            self.report.failures.push(format!(
                "the store holds {} instances, the run started {}",
                all.len(),
                self.plans.len()
            ));
        }
    }

    async fn finish(mut self) -> Report {
        for replica in std::mem::take(&mut self.replicas) {
            self.count_stats(&replica.stats);
            replica.rt.abort();
        }
        self.report.faults = self.store.counts();
        self.report.digest = digest(self.store.inner()).await;
        self.report
    }
}

fn ending_index(e: Ending) -> usize {
    match e {
        Ending::Ok => 0,
        Ending::Fail => 1,
        Ending::Fatal => 2,
        Ending::Bpmn => 3,
        Ending::Panic => 4,
        Ending::Hang => 5,
    }
}

/// A handler per name that answers what the instance's script says for the attempt,
/// after the scripted delay on the clock.
fn scripted_handlers(
    scripts: Arc<BTreeMap<InstanceId, Script>>,
    clock: Arc<ManualClock>,
) -> AsyncHandlers {
    let mut handlers = AsyncHandlers::new();
    for name in HANDLERS {
        let scripts = scripts.clone();
        let clock = clock.clone();
        handlers = handlers.with_async(name, move |call: TaskCall| {
            let scripted = call
                .instance_id
                .parse::<InstanceId>()
                .ok()
                .and_then(|id| scripts.get(&id))
                .and_then(|s| s.get(call.node.as_str()))
                .and_then(|attempts| attempts.get(call.attempt.get() as usize - 1))
                .copied()
                .unwrap_or(Scripted::OK_AT_ONCE);
            let wait = clock.sleep_until(clock.now_ms().saturating_add(scripted.delay_ms as i64));
            async move {
                wait.await;
                match scripted.ending {
                    Ending::Ok => TaskOutcome::Ok(Default::default()),
                    Ending::Fail => TaskOutcome::Fail {
                        code: models::FLAKY.into(),
                        message: "scripted failure".into(),
                    },
                    Ending::Fatal => TaskOutcome::Fail {
                        code: models::FATAL.into(),
                        message: "scripted fatal failure".into(),
                    },
                    Ending::Bpmn => TaskOutcome::BpmnError {
                        code: models::REJECTED.into(),
                        message: "scripted BPMN error".into(),
                    },
                    Ending::Panic => panic!("{SCRIPTED_PANIC}"),
                    Ending::Hang => futures::future::pending::<TaskOutcome>().await,
                }
            }
        });
    }
    handlers
}

/// `turns` turns of the scheduler for everything else.
async fn turns_of_the_scheduler(turns: u32) {
    for _ in 0..turns {
        tokio::task::yield_now().await;
    }
}

/// `fut`, or `None` when it has not finished within `turns` scheduler turns.
async fn bounded<F: Future>(fut: F, turns: u32) -> Option<F::Output> {
    tokio::select! {
        biased;
        out = fut => Some(out),
        _ = turns_of_the_scheduler(turns) => None,
    }
}

/// A fingerprint of everything the store holds about instances.
async fn digest(store: &dyn Store) -> u64 {
    let mut d = Digest::default();
    let all = store
        .instances(&InstanceFilter::default())
        .await
        .unwrap_or_default();
    for r in &all {
        d.str(&r.id.to_string());
        d.u64(r.fence);
        d.str(r.status.as_str());
        d.str(r.failure_code.as_deref().unwrap_or(""));
        d.bytes(&r.snapshot);
        d.u64(r.updated_at_ms as u64);
        for t in store.timers(r.id).await.unwrap_or_default() {
            d.str(&t.name.to_string());
            d.u64(t.due_at_ms as u64);
            d.u64(u64::from(t.incarnation));
        }
        for a in store.attempts(r.id).await.unwrap_or_default() {
            d.str(&a.node);
            d.u64(u64::from(a.attempt.get()));
            d.str(a.outcome.as_str());
            d.str(a.code.as_deref().unwrap_or(""));
            d.u64(a.started_at_ms as u64);
            d.u64(a.finished_at_ms as u64);
        }
    }
    d.finish()
}
