//! The fault simulation in CI (issue 8): a fixed list of seeds must hold every invariant,
//! a seed must replay to the same store, and a build with a broken fence must be caught.
//! `scripts/fault-sim SECONDS` runs random seeds for longer; `docs/testing.md` says what a
//! run injects and checks.

use qflow_tests::fault_sim::store::Breakage;
use qflow_tests::fault_sim::{run, Options, Report};

/// The CI seeds: `0..CI_SEEDS`. About 10 s in a debug build on one core.
const CI_SEEDS: u64 = 1_500;
/// Seeds run against each deliberately broken build.
const BROKEN_SEEDS: u64 = 200;

fn run_seeds(seeds: std::ops::Range<u64>, breakage: Breakage) -> Vec<Report> {
    seeds.map(|seed| run(Options { seed, breakage })).collect()
}

fn describe(failing: &[&Report]) -> String {
    failing
        .iter()
        .map(|r| {
            format!(
                "{}\n  {}\n  replay: {}",
                r.summary(),
                r.failures.join("\n  "),
                r.replay_command()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_ci_seeds_hold_every_invariant() {
    let reports = run_seeds(0..CI_SEEDS, Breakage::None);
    let failing: Vec<&Report> = reports.iter().filter(|r| !r.passed()).collect();
    assert!(failing.is_empty(), "failing seeds:\n{}", describe(&failing));
    // The seeds exercise what they are meant to.
    let sum = |f: fn(&Report) -> u64| reports.iter().map(f).sum::<u64>();
    assert!(sum(|r| r.faults.commits_failed) > 100);
    assert!(sum(|r| r.faults.commits_ambiguous) > 100);
    assert!(sum(|r| r.faults.reads_failed) > 100);
    assert!(sum(|r| r.crashes) > 1_000);
    assert!(sum(|r| r.conflicts) > 100);
    assert!(sum(|r| r.completed) > 1_000 && sum(|r| r.failed) > 500);
}

#[test]
fn a_seed_replays_to_the_same_store() {
    for seed in [3, 17, 41, 1_000_003] {
        let first = run(Options {
            seed,
            breakage: Breakage::None,
        });
        let again = run(Options {
            seed,
            breakage: Breakage::None,
        });
        assert_eq!(first.summary(), again.summary(), "seed {seed}");
        assert_eq!(first.digest, again.digest, "seed {seed}");
    }
}

#[test]
fn a_build_whose_fence_lets_stale_commits_through_is_caught() {
    assert_caught(Breakage::StaleCommitsPass);
}

#[test]
fn a_build_that_applies_an_ambiguous_commit_again_is_caught() {
    assert_caught(Breakage::AmbiguousReapplied);
}

/// Some seed of the first `BROKEN_SEEDS` fails on `breakage`, and on an invariant about
/// outcomes, not on a harness error.
fn assert_caught(breakage: Breakage) {
    let reports = run_seeds(0..BROKEN_SEEDS, breakage);
    let caught: Vec<&Report> = reports.iter().filter(|r| !r.passed()).collect();
    assert!(
        !caught.is_empty(),
        "no seed noticed the broken build ({})",
        breakage.as_str()
    );
    assert!(
        caught
            .iter()
            .flat_map(|r| &r.failures)
            .any(|f| f.contains("committed twice")),
        "caught, but not by the outcome ledger:\n{}",
        describe(&caught)
    );
}
