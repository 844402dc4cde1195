//! libFuzzer target: arbitrary bytes into the CEL expression compiler and evaluator
//! (`qflow_loader::Expression`, SPEC L3, issue 8).
//!
//! Input layout: byte 0 picks the shape of the built-in variables (bits 0–2: the length
//! of the lists `xs`, `ys` and the map `m`, up to the documented cap of 4,096; bits 3–4:
//! the length of the string `s`, up to 1 MiB; bit 5: the source is FEEL and goes through
//! the loader's translation first). Then the expression source up to the first NUL byte,
//! then, optionally, a JSON object whose entries replace or add variables.
//!
//! The source is compiled exactly as the loader compiles a model's condition or mapping
//! (`Expression::compile` with `LoadOptions::default().max_expr_len`, the static
//! estimate included) and evaluated under the budget. What counts as a finding:
//! - a panic anywhere, including one the loader catches around the `cel` crate (libFuzzer's
//!   panic hook aborts before `catch_unwind` sees it);
//! - an evaluation that escapes the budget: it shows as libFuzzer's `-timeout=` or
//!   `-rss_limit_mb=` (scripts/fuzz-target passes 2 s and 512 MB), never as an assertion
//!   on the clock here;
//! - a refusal with `Q209` ("far over the budget at the caps") of an expression that, on
//!   inputs at the caps (every name it reads bound to a list of 4,096 integers), evaluates
//!   to a value within the budget: the estimate claims a lower bound, and that input
//!   would refute it.
//!
//! This target never writes files itself.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use qflow_loader::model::{Pos, Variables};
use qflow_loader::{Expression, LoadOptions};
use serde_json::{json, Value};

const LIST_LENS: [usize; 8] = [0, 1, 2, 3, 8, 64, 1024, qflow_loader::expr::MAX_INPUT_ITEMS];
const STRING_LENS: [usize; 4] = [0, 1, 1000, 1 << 20];
const AT: Pos = Pos { line: 1, col: 1 };

/// The built-in variables for one shape byte (bits 0–4), built once per shape.
fn base_vars(shape: u8) -> &'static Variables {
    static CACHE: [OnceLock<Variables>; 32] = [const { OnceLock::new() }; 32];
    let shape = usize::from(shape & 0x1f);
    CACHE[shape].get_or_init(|| {
        let n = LIST_LENS[shape & 0x07];
        let len = STRING_LENS[shape >> 3];
        let xs: Vec<i64> = (0..n as i64).collect();
        let ys: Vec<String> = (0..n).map(|i| format!("y{i}")).collect();
        let m: serde_json::Map<String, Value> =
            (0..n).map(|i| (format!("k{i}"), json!(i))).collect();
        let vars = json!({
            "xs": xs,
            "ys": ys,
            "m": m,
            "s": "x".repeat(len),
            "n": n,
            "f": 1.5,
            "b": true,
            "o": {"a": {"b": 2}, "items": xs, "name": "order"},
        });
        serde_json::from_value(vars).expect("the built-in variables are an object")
    })
}

/// Every name `e` reads bound to a list of 4,096 integers: an input at the caps.
fn at_the_caps(e: &Expression) -> Variables {
    let full = base_vars(0x07)["xs"].clone();
    e.reads()
        .iter()
        .map(|name| (name.clone(), full.clone()))
        .collect()
}

/// What an expression the estimate refused does at the caps: it must not come out as a
/// value (a failure of any kind — over budget, a type error — is consistent with the
/// refusal; a value within the budget is not).
fn check_refusal(source: &str, max_len: usize) {
    let e = Expression::compile_without_estimate(source, AT, max_len)
        .expect("Q209 is the only check compile_without_estimate skips");
    if let Ok(v) = e.eval(&at_the_caps(&e)) {
        panic!("refused with Q209, yet at the caps `{source}` evaluates within the budget to {v}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    let (text, doc) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let source = if shape & 0x20 != 0 {
        // As the loader does for a FEEL condition: strip `=`, translate, compile the CEL.
        match qflow_loader::feel::feel_to_cel(text.strip_prefix('=').unwrap_or(text)) {
            Ok(cel) => cel,
            Err(_) => return,
        }
    } else {
        text.to_string()
    };
    let max_len = LoadOptions::default().max_expr_len;
    let e = match Expression::compile(&source, AT, max_len) {
        Ok(e) => e,
        Err(err) => {
            assert!(
                err.code == "Q201" || err.code == "Q209",
                "unexpected code {}: {err:?}",
                err.code
            );
            assert!(!err.message.trim().is_empty(), "refusal without a message");
            if err.code == "Q209" {
                check_refusal(&source, max_len);
            }
            return;
        }
    };
    let base = base_vars(shape);
    let extra = doc
        .and_then(|d| serde_json::from_slice::<Variables>(d).ok())
        .filter(|v| !v.is_empty());
    let result = match extra {
        Some(extra) => {
            let mut vars = base.clone();
            vars.extend(extra);
            e.eval(&vars)
        }
        None => e.eval(base),
    };
    if let Err(err) = result {
        assert!(
            !err.message.trim().is_empty(),
            "an evaluation error without a message"
        );
    }
});
