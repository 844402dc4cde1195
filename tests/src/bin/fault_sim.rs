//! `qflow-fault-sim`: runs the seeded fault simulation (`qflow_tests::fault_sim`).
//!
//! `qflow-fault-sim --seed N [--break fence|ambiguous]` replays one seed and prints its
//! report; `qflow-fault-sim --seconds S [--first-seed N]` runs consecutive seeds from a
//! random (or given) start until S seconds have passed, prints a summary, and exits 1
//! if any seed failed, naming each failing seed with its replay command.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use qflow_tests::fault_sim::store::{Breakage, FaultCounts};
use qflow_tests::fault_sim::{run, Options, Report};

fn main() -> ExitCode {
    match cli() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("qflow-fault-sim: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn cli() -> anyhow::Result<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut seed = None;
    let mut seconds = None;
    let mut first_seed = None;
    let mut breakage = Breakage::None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--seed" => seed = Some(value()?.parse::<u64>().context("--seed")?),
            "--seconds" => seconds = Some(value()?.parse::<u64>().context("--seconds")?),
            "--first-seed" => first_seed = Some(value()?.parse::<u64>().context("--first-seed")?),
            "--break" => {
                let v = value()?;
                breakage = Breakage::parse(v)
                    .with_context(|| format!("--break takes none, fence or ambiguous, not {v}"))?
            }
            other => bail!(
                "unknown argument {other}; usage: --seed N [--break fence|ambiguous] | \
                 --seconds S [--first-seed N]"
            ),
        }
    }
    match (seed, seconds) {
        (Some(seed), None) => Ok(replay(seed, breakage)),
        (None, Some(seconds)) => Ok(soak(seconds, first_seed, breakage)),
        _ => bail!("give either --seed N or --seconds S"),
    }
}

fn replay(seed: u64, breakage: Breakage) -> ExitCode {
    let report = run(Options { seed, breakage });
    println!("{}", report.summary());
    print_failures(&report);
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_failures(report: &Report) {
    for f in &report.failures {
        println!("  FAILED seed {}: {f}", report.seed);
    }
    if !report.passed() {
        println!("  replay: {}", report.replay_command());
    }
}

fn soak(seconds: u64, first_seed: Option<u64>, breakage: Breakage) -> ExitCode {
    // The start of the seed range is the one thing drawn from the host; every seed then
    // replays on its own.
    let first = first_seed.unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        (nanos ^ u64::from(std::process::id()).rotate_left(32)) & 0x0000_FFFF_FFFF_FFFF
    });
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut totals = Report::default();
    let mut seeds = 0u64;
    let mut failing = Vec::new();
    let mut seed = first;
    let started = Instant::now();
    while Instant::now() < deadline {
        let report = run(Options { seed, breakage });
        seeds += 1;
        add(&mut totals, &report);
        if !report.passed() {
            println!("{}", report.summary());
            print_failures(&report);
            failing.push(seed);
        }
        seed = seed.wrapping_add(1);
    }
    let f = totals.faults;
    println!(
        "fault-sim: {seeds} seeds ({first}..={last}) in {:.0} s, {} instances \
         ({} completed, {} failed as scripted), store faults {} (commit failed {}, \
         ambiguous {}, read failed {}, claim lost {}), crashes {}, replicas started {}, \
         clock jumps {}, scripted endings [ok, fail, fatal, bpmn, panic, hang] {:?}, \
         handler calls {}, fence conflicts {}, steps {}; failing seeds: {:?}",
        started.elapsed().as_secs_f64(),
        totals.instances,
        totals.completed,
        totals.failed,
        f.store_faults(),
        f.commits_failed,
        f.commits_ambiguous,
        f.reads_failed,
        f.claims_lost,
        totals.crashes,
        totals.replicas_started,
        totals.clock_jumps,
        totals.scripted,
        totals.handler_calls,
        totals.conflicts,
        totals.steps,
        failing,
        last = seed.wrapping_sub(1),
    );
    if failing.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn add(t: &mut Report, r: &Report) {
    t.instances += r.instances;
    t.completed += r.completed;
    t.failed += r.failed;
    let mut f: FaultCounts = t.faults;
    f.add(&r.faults);
    t.faults = f;
    t.crashes += r.crashes;
    t.replicas_started += r.replicas_started;
    t.clock_jumps += r.clock_jumps;
    for (a, b) in t.scripted.iter_mut().zip(r.scripted) {
        *a += b;
    }
    t.handler_calls += r.handler_calls;
    t.conflicts += r.conflicts;
    t.steps += r.steps;
}
