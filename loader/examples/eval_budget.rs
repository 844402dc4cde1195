//! Measures the evaluation budget on hostile expressions (issue 8, defect 2).
//!
//! `cargo run --release -p qflow-loader --example eval_budget -- [N]` compiles and
//! evaluates expression N of [`HOSTILE`] (all of them without N) over inputs at the
//! documented caps, and prints the outcome and the time taken; run one N under
//! `/usr/bin/time -v` for its peak RSS. Figures are recorded in docs/performance.md.
//! Timing lives here, never in tests.

use std::time::Instant;

use qflow_loader::expr::Expression;
use qflow_loader::model::{Pos, Variables};
use serde_json::json;

/// The worst expressions found, each with the inputs it reads.
const HOSTILE: &[&str] = &[
    "size(xs.map(a, xs.map(b, xs)))",
    "xs.map(a, s)",
    "xs.map(a, [s, s, s, s])",
    "xs.map(a, xs)",
    "xs.filter(a, xs.exists(b, b > a + 5000))",
    "ys.filter(a, ys.exists(b, b == a + 'x'))",
    "ys.map(a, ys.map(b, a + b))",
    "xs.exists(a, xs.all(b, a * b >= 0) && false) || true",
    "s + s + s + s",
    "ys.map(a, s + a)",
    "xs.all(a, ys.all(b, b.contains(s)))",
];

fn main() {
    let xs: Vec<i64> = (0..4096).collect();
    let ys: Vec<String> = (0..4096).map(|i| format!("{i:01024}")).collect();
    let vars: Variables = serde_json::from_value(json!({
        "xs": xs,
        "ys": ys,
        "s": "x".repeat(4 << 20),
    }))
    .expect("an object");
    let pick: Option<usize> = std::env::args().nth(1).and_then(|a| a.parse().ok());
    for (i, src) in HOSTILE.iter().enumerate() {
        if pick.is_some_and(|p| p != i) {
            continue;
        }
        let t = Instant::now();
        let outcome = match Expression::compile(src, Pos { line: 1, col: 1 }, 4096) {
            Err(e) => format!("refused at load: {} {}", e.code, e.pos),
            Ok(e) => match e.eval(&vars) {
                Ok(v) => format!("ok ({} bytes of JSON)", v.to_string().len()),
                Err(e) => format!("failed: {}", e.message),
            },
        };
        let ms = t.elapsed().as_secs_f64() * 1e3;
        println!("{i:2} {ms:8.1} ms  {src}\n             {outcome}");
    }
}
