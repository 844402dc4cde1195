//! The readable view of persisted snapshot bytes: MessagePack decoded generically into
//! JSON so that a reviewer can read what a step wrote (the insta half of G1).
//!
//! The view deliberately does not use the engine's own snapshot decoder: it shows the
//! bytes as they are, including keys the current engine would not understand, so a
//! re-bless diff reveals every change to what is persisted. It must never panic on
//! any input; bytes that do not decode are shown as an error string plus hex.

use rmpv::Value as Mp;
use serde_json::{Map, Number, Value};

/// Decodes `bytes` (one MessagePack value, nothing after it) into a JSON view.
pub fn decode(bytes: &[u8]) -> Value {
    let mut rest = bytes;
    match rmpv::decode::read_value(&mut rest) {
        Ok(value) if rest.is_empty() => to_json(&value),
        Ok(_) => Value::String(format!(
            "<{} trailing bytes after the snapshot value> {}",
            rest.len(),
            hex::encode(bytes)
        )),
        Err(err) => Value::String(format!("<not MessagePack: {err}> {}", hex::encode(bytes))),
    }
}

fn to_json(value: &Mp) -> Value {
    match value {
        Mp::Nil => Value::Null,
        Mp::Boolean(b) => Value::Bool(*b),
        Mp::Integer(i) => match (i.as_u64(), i.as_i64()) {
            (Some(u), _) => Value::Number(u.into()),
            (None, Some(s)) => Value::Number(s.into()),
            (None, None) => Value::String(i.to_string()),
        },
        Mp::F32(f) => float(f64::from(*f)),
        Mp::F64(f) => float(*f),
        Mp::String(s) => match s.as_str() {
            Some(text) => Value::String(text.to_owned()),
            None => Value::String(format!("<invalid utf-8> {}", hex::encode(s.as_bytes()))),
        },
        Mp::Binary(b) => Value::String(format!("bin:{}", hex::encode(b))),
        Mp::Array(items) => Value::Array(items.iter().map(to_json).collect()),
        // The view lists keys sorted (serde_json's map); the order the bytes have is
        // pinned by the byte comparison, not by this view. `preserve_order` must not be
        // enabled here: the feature would unify into the engine's serde_json too.
        Mp::Map(entries) => {
            let mut out = Map::new();
            for (key, val) in entries {
                out.insert(key_text(key), to_json(val));
            }
            Value::Object(out)
        }
        Mp::Ext(tag, data) => Value::String(format!("ext({tag}):{}", hex::encode(data))),
    }
}

fn key_text(key: &Mp) -> String {
    match key {
        Mp::String(s) => s
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("<invalid utf-8> {}", hex::encode(s.as_bytes()))),
        other => other.to_string(),
    }
}

fn float(f: f64) -> Value {
    Number::from_f64(f)
        .map(Value::Number)
        .unwrap_or_else(|| Value::String(f.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_decodes_with_nested_values() {
        // {"v": 1, "a": [true, nil], "b": bin[0x01, 0xff]}
        let bytes = [
            0x83, 0xa1, b'v', 0x01, 0xa1, b'a', 0x92, 0xc3, 0xc0, 0xa1, b'b', 0xc4, 0x02, 0x01,
            0xff,
        ];
        let view = decode(&bytes);
        assert_eq!(
            serde_json::to_string(&view).unwrap(),
            r#"{"a":[true,null],"b":"bin:01ff","v":1}"#
        );
    }

    #[test]
    fn garbage_is_shown_not_panicked_on() {
        // A five-byte string with one byte present.
        let view = decode(&[0xa5, b'a']);
        assert!(view.as_str().unwrap().starts_with("<not MessagePack"));
        let view = decode(&[0x01, 0x02]);
        assert!(view.as_str().unwrap().starts_with("<1 trailing bytes"));
        let view = decode(&[]);
        assert!(view.as_str().unwrap().starts_with("<not MessagePack"));
    }
}
