//! Loader throughput by CPU time as well as wall time, for a busy machine.
//!
//! Criterion (benches/load.rs) measures wall time, which on a shared 2-core machine with
//! other builds running mostly measures how often the benchmark was descheduled. This
//! harness loads the same inputs in a loop for a few seconds and divides the bytes by
//! both the wall time and the CPU time the process spent (user + system, from
//! `/proc/self/stat`, so the CEL parser thread is included). The CPU figure is what the
//! loader costs; the wall figure is what this run happened to see.
//!
//! Run: `cargo bench -p qflow-loader --bench load_cpu` (Linux; elsewhere only the wall
//! figure is printed). `QFLOW_BENCH_SECS` sets the duration per input set (default 5).
//! For instruction counts that do not depend on load at all, `QFLOW_BENCH_ROUNDS=N`
//! runs exactly N rounds and `QFLOW_BENCH_ONLY=corpus/all` picks one input set; run it
//! under `valgrind --tool=callgrind` with two round counts and divide the difference by
//! the bytes (docs/performance.md, "Loader").

use std::hint::black_box;
use std::time::{Duration, Instant};

use qflow_loader::{load, LoadOptions};

mod common;
use common::{corpus, synthetic};

/// User + system CPU time of this process so far, if the platform tells.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // Linux reports clock ticks; USER_HZ is 100 on every mainstream configuration.
    Some(Duration::from_millis((utime + stime) * 10))
}

fn mib_per_s(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / time.as_secs_f64()
}

/// How long to load one input set: for a duration, or for an exact number of rounds.
#[derive(Clone, Copy)]
enum Budget {
    Time(Duration),
    Rounds(u64),
}

fn measure(name: &str, files: &[Vec<u8>], budget: Budget) {
    let only = std::env::var("QFLOW_BENCH_ONLY").ok();
    if only.is_some_and(|only| only != name) {
        return;
    }
    if files.is_empty() {
        println!("{name:<24} skipped: no input files");
        return;
    }
    let opts = LoadOptions::default();
    let per_round: u64 = files.iter().map(|f| f.len() as u64).sum();
    // One warm-up round so lazily started parts (the CEL parser thread) are running.
    for f in files {
        let _ = black_box(load(f, &opts));
    }
    let (wall_start, cpu_start) = (Instant::now(), cpu_time());
    let mut rounds = 0u64;
    while match budget {
        Budget::Time(run_for) => wall_start.elapsed() < run_for,
        Budget::Rounds(n) => rounds < n,
    } {
        for f in files {
            let _ = black_box(load(black_box(f), &opts));
        }
        rounds += 1;
    }
    let wall = wall_start.elapsed();
    let bytes = per_round * rounds;
    let cpu = cpu_start.zip(cpu_time()).map(|(a, b)| b.saturating_sub(a));
    match cpu {
        Some(cpu) if !cpu.is_zero() => println!(
            "{name:<24} {:>8.1} MiB/s by CPU time  {:>8.1} MiB/s by wall time  ({rounds} rounds of {per_round} bytes)",
            mib_per_s(bytes, cpu),
            mib_per_s(bytes, wall),
        ),
        _ => println!(
            "{name:<24} {:>8.1} MiB/s by wall time  ({rounds} rounds of {per_round} bytes)",
            mib_per_s(bytes, wall),
        ),
    }
}

fn main() {
    // Arguments (`--bench` from cargo) are ignored; the knobs are environment variables.
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let run_for = match env("QFLOW_BENCH_ROUNDS") {
        Some(rounds) => Budget::Rounds(rounds),
        None => Budget::Time(Duration::from_secs(env("QFLOW_BENCH_SECS").unwrap_or(5))),
    };
    let opts = LoadOptions::default();
    let all = corpus();
    let loaded: Vec<Vec<u8>> = all
        .iter()
        .filter(|f| load(f, &opts).is_ok())
        .cloned()
        .collect();
    measure("corpus/all", &all, run_for);
    measure("corpus/loaded", &loaded, run_for);
    measure("synthetic/linear_2000", &[synthetic(2_000)], run_for);
}
