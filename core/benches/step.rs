//! Engine core benchmarks (SPEC E1, issue 3): steps per second of a 10-service-task
//! linear process with the snapshot decoded before and encoded after every step — what
//! a durable shell does — and the snapshot size at a wait state.
//!
//! Run: `cargo bench -p qflow-engine --bench step`. Figures go to docs/performance.md.

use criterion::{black_box, criterion_group, Criterion, Throughput};
use qflow_core::{step, Attempt, Effect, FailureKind, Input, Snapshot};
use qflow_loader::model::{DurationMs, Jitter, RetryPolicy, Variables};

#[path = "../tests/common/build.rs"]
mod build;

fn vars() -> Variables {
    Variables::from([
        ("amount".to_owned(), 250.into()),
        ("currency".to_owned(), "EUR".into()),
        ("ok".to_owned(), true.into()),
    ])
}

/// One whole instance: Start, then each task's completion; every step decodes the
/// previous bytes and encodes the next. Returns the number of steps.
fn run_instance(def: &qflow_loader::model::Definition, n: usize) -> usize {
    let mut bytes = Snapshot::new().encode();
    let mut input = Input::Start {
        variables: vars(),
        start: None,
    };
    let mut steps = 0;
    loop {
        let snap = Snapshot::decode(&bytes).expect("decodes");
        let out = step(def, "bench-instance", snap, input, 1_000).expect("steps");
        bytes.clear();
        out.snapshot.encode_into(&mut bytes);
        steps += 1;
        let next = out.effects.into_iter().find_map(|e| match e {
            Effect::RunTask { node, attempt, .. } => Some(Input::TaskCompleted {
                node,
                attempt,
                outputs: Variables::new(),
            }),
            _ => None,
        });
        match next {
            Some(i) => input = i,
            None => break,
        }
    }
    assert_eq!(steps, n + 1);
    black_box(bytes);
    steps
}

fn bench_linear(c: &mut Criterion) {
    let def = build::linear_def(10, None);
    let mut group = c.benchmark_group("linear10");
    group.throughput(Throughput::Elements(11));
    group.bench_function("instance_11_steps_with_snapshot_round_trip", |b| {
        b.iter(|| run_instance(&def, 10))
    });
    let retry = RetryPolicy {
        initial_interval: DurationMs(1_000),
        jitter: Jitter::Full,
        ..RetryPolicy::default()
    };
    let def_retry = build::linear_def(10, Some(retry));
    group.bench_function("instance_11_steps_with_policy_unused", |b| {
        b.iter(|| run_instance(&def_retry, 10))
    });
    group.finish();

    // The snapshot alone: decode + encode of an instance waiting at a task.
    let waiting = step(
        &def,
        "bench-instance",
        Snapshot::new(),
        Input::Start {
            variables: vars(),
            start: None,
        },
        0,
    )
    .expect("starts")
    .snapshot
    .encode();
    let mut group = c.benchmark_group("snapshot");
    group.throughput(Throughput::Elements(1));
    group.bench_function("decode_encode_wait_state", |b| {
        b.iter(|| {
            Snapshot::decode(black_box(&waiting))
                .expect("decodes")
                .encode()
        })
    });
    group.finish();
}

/// Prints the sizes that docs/performance.md records (not a timing).
fn report_sizes(_: &mut Criterion) {
    let def = build::linear_def(10, None);
    let start = |vars: Variables| {
        step(
            &def,
            "bench-instance",
            Snapshot::new(),
            Input::Start {
                variables: vars,
                start: None,
            },
            0,
        )
        .expect("starts")
        .snapshot
        .encode()
    };
    let none = start(Variables::new());
    let few = start(vars());
    eprintln!(
        "snapshot bytes, one token at `t1`, no variables: {}",
        none.len()
    );
    eprintln!(
        "snapshot bytes, one token at `t1`, {{amount: 250, currency: EUR, ok: true}}: {}",
        few.len()
    );
    // In a backoff window: attempt counter, marker and park timer added.
    let retry_def = build::linear_def(10, Some(RetryPolicy::default()));
    let started = step(
        &retry_def,
        "bench-instance",
        Snapshot::new(),
        Input::Start {
            variables: vars(),
            start: None,
        },
        0,
    )
    .expect("starts");
    let parked = step(
        &retry_def,
        "bench-instance",
        started.snapshot,
        Input::TaskFailed {
            node: "t1".into(),
            attempt: Attempt::FIRST,
            kind: FailureKind::Failed,
            code: "HANDLER_FAILED".into(),
            message: String::new(),
        },
        0,
    )
    .expect("parks")
    .snapshot
    .encode();
    eprintln!(
        "snapshot bytes, same instance parked in a backoff window: {}",
        parked.len()
    );
}

criterion_group!(benches, bench_linear, report_sizes);

/// `QFLOW_BENCH_INSTANCES=N` runs N instances of the linear process and exits, for
/// instruction counting under `valgrind --tool=callgrind` (repeatable on a busy
/// machine, unlike wall time): the difference between two N divided by the extra steps
/// is the cost of one step.
fn main() {
    if let Some(n) = std::env::var("QFLOW_BENCH_INSTANCES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        // QFLOW_BENCH_POLICY=1: every task carries a (never used) retry policy.
        let policy = std::env::var_os("QFLOW_BENCH_POLICY").map(|_| RetryPolicy::default());
        let def = build::linear_def(10, policy);
        let steps: usize = (0..n).map(|_| run_instance(&def, 10)).sum();
        eprintln!("ran {n} instances, {steps} steps");
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
