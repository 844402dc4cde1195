//! Bounds on the values that enter an instance (SPEC E2: a snapshot must never become
//! unloadable). Whatever the engine writes it must be able to read, so a value is
//! checked where it enters — start variables, handler outputs, user-task completions,
//! message variables, output mappings' results — not when it is written: an input that
//! is over a bound is refused (nothing changes) or, when it comes from a handler or a
//! mapping, fails the attempt or the instance with a structured code.
//!
//! The checks walk values with an explicit stack, so a value nested deeper than any
//! limit (a host can build one in Rust) costs no recursion.

use qflow_loader::model::Variables;
use serde_json::Value;

/// The deepest a variable's value may nest: a scalar is depth 1, `[1]` depth 2. Half the
/// snapshot decoder's limit, so a value written is always a value read.
pub const VALUE_DEPTH_MAX: usize = 32;

/// The most bytes one input may bring into the variables, counted as the length of the
/// values' text (strings, keys, numbers). Keeps one request from growing a snapshot
/// without bound.
pub const INPUT_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Checks the values of `vars` against [`VALUE_DEPTH_MAX`] and [`INPUT_BYTES_MAX`]; the
/// error names the first offending value by its path (`order.items[3]`).
pub fn check_variables(vars: &Variables) -> Result<(), String> {
    let mut bytes = 0usize;
    for (name, value) in vars {
        bytes = bytes.saturating_add(name.len());
        check_value(name, value, &mut bytes)?;
    }
    Ok(())
}

fn check_value(name: &str, value: &Value, bytes: &mut usize) -> Result<(), String> {
    // (value, depth, path step that led here)
    let mut stack: Vec<(&Value, usize, String)> = vec![(value, 1, name.to_owned())];
    while let Some((v, depth, path)) = stack.pop() {
        if depth > VALUE_DEPTH_MAX {
            return Err(format!(
                "`{path}` nests deeper than {VALUE_DEPTH_MAX} levels; a variable may nest \
                 {VALUE_DEPTH_MAX} levels at most"
            ));
        }
        *bytes = bytes.saturating_add(match v {
            Value::String(s) => s.len(),
            Value::Number(_) => 8,
            _ => 1,
        });
        if *bytes > INPUT_BYTES_MAX {
            return Err(format!(
                "the values reach more than {INPUT_BYTES_MAX} bytes at `{path}`; one input \
                 may bring {INPUT_BYTES_MAX} bytes at most"
            ));
        }
        match v {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate().rev() {
                    stack.push((item, depth + 1, format!("{path}[{i}]")));
                }
            }
            Value::Object(map) => {
                for (k, item) in map.iter().rev() {
                    *bytes = bytes.saturating_add(k.len());
                    stack.push((item, depth + 1, format!("{path}.{k}")));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> Value {
        let mut v = Value::from(1);
        for _ in 1..depth {
            v = Value::Array(vec![v]);
        }
        v
    }

    #[test]
    fn depth_and_size_are_bounded_with_a_path() {
        let ok = Variables::from([("x".to_owned(), nested(VALUE_DEPTH_MAX))]);
        assert!(check_variables(&ok).is_ok());
        let deep = Variables::from([("x".to_owned(), nested(VALUE_DEPTH_MAX + 1))]);
        let err = check_variables(&deep).unwrap_err();
        assert!(err.contains("`x[0][0]"), "{err}");
        // Far deeper than any stack would take recursively.
        let abyss = Variables::from([("x".to_owned(), nested(2_000))]);
        assert!(check_variables(&abyss).is_err());
        let big = Variables::from([("blob".to_owned(), Value::from("a".repeat(INPUT_BYTES_MAX)))]);
        assert!(check_variables(&big).unwrap_err().contains("`blob`"));
    }
}
