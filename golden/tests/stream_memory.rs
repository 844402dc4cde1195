//! Streaming a simulation keeps no step (issue 8, defect 4): the most memory a run through
//! `qflow_golden::stream` holds at once does not grow with the number of steps, while the
//! collecting `simulate` holds every step's snapshot. Measured with a counting allocator,
//! so this file is its own test binary with a single test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

/// Counts live heap bytes and their high-water mark.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let now = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; only counters are
// updated beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, layout, new_size) };
        if !q.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most heap `f` held at once beyond what was live when it started, in bytes.
fn peak_during(f: impl FnOnce()) -> usize {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    f();
    PEAK.load(Ordering::Relaxed).saturating_sub(base)
}

/// A task in a loop with no way out: a scenario runs exactly `max_steps` steps.
const LOOP: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
             xmlns:q="urn:qflow:bpmn:1" id="defs" targetNamespace="urn:test">
  <process id="loop" isExecutable="true">
    <startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="t"/>
    <serviceTask id="t" q:task="t"/>
    <sequenceFlow id="f2" sourceRef="t" targetRef="x"/>
    <exclusiveGateway id="x" default="back"/>
    <sequenceFlow id="back" sourceRef="x" targetRef="t"/>
    <sequenceFlow id="out" sourceRef="x" targetRef="e"><conditionExpression>false</conditionExpression></sequenceFlow>
    <endEvent id="e"/>
  </process>
</definitions>"#;

const SNAPSHOT_BYTES: usize = 20_000;

#[test]
fn a_streamed_run_holds_the_same_memory_for_500_steps_as_for_2000() {
    let def = qflow_golden::load_model(LOOP).expect("the loop model loads");
    let scenario = |steps: u32| {
        let text = json!({
            "variables": { "blob": "x".repeat(SNAPSHOT_BYTES) },
            "max_steps": steps,
        })
        .to_string();
        qflow_golden::scenario::parse(&text, &def).expect("the scenario parses")
    };
    let (short, long) = (scenario(500), scenario(2_000));
    let streamed = |s: &qflow_golden::scenario::Scenario| {
        peak_during(|| {
            let mut steps = qflow_golden::stream(&def, s).unwrap();
            for step in &mut steps {
                assert!(step.unwrap().snapshot.len() > SNAPSHOT_BYTES);
            }
            assert_eq!(steps.finish().unwrap().steps, s.max_steps.unwrap());
        })
    };
    let collected = |s: &qflow_golden::scenario::Scenario| {
        peak_during(|| {
            let trace = qflow_golden::simulate(&def, s).unwrap();
            assert_eq!(trace.steps.len() as u32, s.max_steps.unwrap());
        })
    };

    let (streamed_short, streamed_long) = (streamed(&short), streamed(&long));
    // Four times the steps: within a few snapshots' worth of the same peak.
    assert!(
        streamed_long < streamed_short + 4 * SNAPSHOT_BYTES,
        "streamed: {streamed_short} B for 500 steps, {streamed_long} B for 2000"
    );
    assert!(streamed_long < 1 << 20, "streamed peak {streamed_long} B");
    // The measure is sharp enough to see a kept trace: 1,500 more snapshots.
    let (collected_short, collected_long) = (collected(&short), collected(&long));
    assert!(
        collected_long > collected_short + 1_500 * SNAPSHOT_BYTES,
        "collected: {collected_short} B for 500 steps, {collected_long} B for 2000"
    );
}
