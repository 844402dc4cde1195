//! Loader throughput in MB/s: parse + build + validate + classify, the whole `load`.
//!
//! Groups (criterion reports bytes/s through `Throughput::Bytes`):
//! - `corpus/all`: every model under `../shared/corpus/`, loaded one after another —
//!   accepted and refused alike (a refusal still parses and validates the whole file).
//! - `corpus/loaded`: only the files that load, i.e. the full pipeline to a Definition.
//! - `synthetic/linear_2000`: one generated model of 2,000 registered tasks with retry
//!   policies, conditions and mappings, so the figure does not depend on the corpus.
//!
//! Run: `cargo bench -p qflow-loader --bench load`. Target (issue 2): ≥ 50 MB/s.
//! Results are recorded in docs/performance.md ("Loader").

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use qflow_loader::{load, LoadOptions};

fn corpus() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus");
    let mut pending = vec![dir];
    let mut files = Vec::new();
    while let Some(next) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&next) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "bpmn") {
                files.push(path);
            }
        }
    }
    files.sort();
    files.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// A long linear process: start, `tasks` registered tasks each with a retry policy, a
/// timeout and an output mapping, an exclusive gateway with a condition every 10 tasks,
/// then an end event.
fn synthetic(tasks: usize) -> Vec<u8> {
    let mut xml = String::from(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:q="urn:qflow:bpmn:1" id="bench">
  <process id="linear" isExecutable="true">
    <startEvent id="start"/>
"#,
    );
    let mut previous = "start".to_string();
    for i in 0..tasks {
        let id = format!("task_{i}");
        xml.push_str(&format!(
            r#"    <sequenceFlow id="to_{id}" sourceRef="{previous}" targetRef="{id}"/>
    <serviceTask id="{id}" name="Task number {i}" q:task="work_{i}">
      <extensionElements>
        <q:retry maxAttempts="5" initialInterval="PT1S" backoffMultiplier="2" maxInterval="PT1M" nonRetryableCodes="HANDLER_PANICKED"/>
        <q:timeout duration="PT30S"/>
      </extensionElements>
    </serviceTask>
"#
        ));
        previous = id;
        if i % 10 == 9 {
            let gw = format!("gw_{i}");
            xml.push_str(&format!(
                r#"    <sequenceFlow id="to_{gw}" sourceRef="{previous}" targetRef="{gw}"/>
    <exclusiveGateway id="{gw}" default="{gw}_default"/>
    <sequenceFlow id="{gw}_cond" sourceRef="{gw}" targetRef="{gw}_join">
      <conditionExpression>amount &gt; {i} &amp;&amp; status == "open"</conditionExpression>
    </sequenceFlow>
    <sequenceFlow id="{gw}_default" sourceRef="{gw}" targetRef="{gw}_join"/>
    <exclusiveGateway id="{gw}_join"/>
"#
            ));
            previous = format!("{gw}_join");
        }
    }
    xml.push_str(&format!(
        r#"    <sequenceFlow id="to_end" sourceRef="{previous}" targetRef="end"/>
    <endEvent id="end"/>
  </process>
</definitions>
"#
    ));
    xml.into_bytes()
}

fn bench_files(c: &mut Criterion, name: &str, files: &[Vec<u8>]) {
    if files.is_empty() {
        eprintln!("skipped {name}: no input files");
        return;
    }
    let opts = LoadOptions::default();
    let bytes: usize = files.iter().map(Vec::len).sum();
    let mut group = c.benchmark_group(name.split('/').next().unwrap_or(name));
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function(name.split('/').nth(1).unwrap_or(name), |b| {
        b.iter(|| {
            for file in files {
                let _ = black_box(load(black_box(file), &opts));
            }
        })
    });
    group.finish();
}

fn loader(c: &mut Criterion) {
    let opts = LoadOptions::default();
    let all = corpus();
    let loaded: Vec<Vec<u8>> = all
        .iter()
        .filter(|f| load(f, &opts).is_ok())
        .cloned()
        .collect();
    eprintln!(
        "corpus: {} files, {} bytes; {} load, {} bytes",
        all.len(),
        all.iter().map(Vec::len).sum::<usize>(),
        loaded.len(),
        loaded.iter().map(Vec::len).sum::<usize>()
    );
    bench_files(c, "corpus/all", &all);
    bench_files(c, "corpus/loaded", &loaded);

    let model = synthetic(2_000);
    match load(&model, &opts) {
        Ok(_) => {}
        Err(diagnostics) => panic!("the synthetic model must load: {diagnostics:?}"),
    }
    bench_files(c, "synthetic/linear_2000", &[model]);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = loader
}
criterion_main!(benches);
