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

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use qflow_loader::{load, LoadOptions};

mod common;
use common::{corpus, synthetic};

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
