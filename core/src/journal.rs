//! The input journal's pure half (SPEC G3, `docs/replay.md`): what one step's journal row
//! holds and how a replay judges a step against it.
//!
//! A row records the step's input and `now`, and what the step wrote: the snapshot as a
//! *delta* against the snapshot before it (the top-level keys that changed, with their
//! new value bytes, and the keys removed), a hash of the whole snapshot after it and a
//! hash of its effects. A replay rebuilds each recorded snapshot by applying the deltas
//! in order from the empty snapshot, checks it against the recorded hash (a row that
//! does not agree with itself is reported as damaged, never trusted), steps the input
//! through the current step function and compares bytes: the first differing top-level
//! key, the byte offset in the snapshot, and both values decoded.
//!
//! A row's hashes are made with one [`HashKind`], told by their length: XXH3-64 since
//! the journal's second format, the first 16 bytes of SHA-256 in the rows the first
//! builds wrote (still read, so their journals still replay). They guard against damage
//! and against a build that writes other bytes, not against somebody who can write the
//! database (they can rewrite the row and its hashes alike, whatever the hash), so a
//! fast non-cryptographic hash serves as well as a cryptographic one and costs a step a
//! fraction of it (`docs/performance.md`, "The input journal").
//!
//! Everything here is pure: no clock, no I/O, no panic on any input bytes.

use std::collections::BTreeMap;

use serde_json::Value as Json;
use sha2::{Digest, Sha256};

use crate::snapshot::{mp, Snapshot};
use crate::Effect;

/// How a journal row's hashes (of the snapshot, of the effects, of the row) are made.
/// A row's kind is told by the length of its hashes: every kind has its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashKind {
    /// The first 16 bytes of SHA-256; effects hashed as their JSON. The rows of the
    /// journal's first format (qflow 0.1.0 up to bc66e07), read, no longer written.
    Sha256First16,
    /// XXH3-64, 8 bytes big-endian; effects hashed as their compact MessagePack
    /// (`rmp_serde::encode::write`: structs as arrays, without field names). What this
    /// build writes.
    Xxh3,
}

impl HashKind {
    /// The kind this build writes.
    pub const CURRENT: HashKind = HashKind::Xxh3;

    /// The length of each hash of this kind.
    pub fn hash_len(self) -> usize {
        match self {
            HashKind::Sha256First16 => 16,
            HashKind::Xxh3 => 8,
        }
    }

    /// The kind whose hashes are `len` bytes long, if any.
    pub fn of_len(len: usize) -> Option<HashKind> {
        [HashKind::Sha256First16, HashKind::Xxh3]
            .into_iter()
            .find(|k| k.hash_len() == len)
    }

    /// A hasher of this kind.
    pub fn hasher(self) -> Hasher {
        self.hasher_for(256)
    }

    /// A hasher of this kind that expects about `bytes` bytes (its one allocation, when
    /// the kind gathers its parts).
    pub fn hasher_for(self, bytes: usize) -> Hasher {
        match self {
            HashKind::Sha256First16 => Hasher::Sha256(Sha256::new()),
            HashKind::Xxh3 => Hasher::Xxh3(Vec::with_capacity(bytes)),
        }
    }

    /// The hash of `bytes`.
    pub fn hash(self, bytes: &[u8]) -> Vec<u8> {
        match self {
            HashKind::Sha256First16 => Sha256::digest(bytes)[..16].to_vec(),
            HashKind::Xxh3 => xxhash_rust::xxh3::xxh3_64(bytes).to_be_bytes().to_vec(),
        }
    }

    /// The hash of a step's effects, in the order the step emitted them, serialized
    /// straight into the hasher (serde's output for the engine's own types is
    /// deterministic: maps are sorted, floats exact).
    pub fn effects_hash(self, effects: &[Effect]) -> Vec<u8> {
        let mut h = self.hasher();
        // Serializing the engine's own types cannot fail, and this writer never does.
        match self {
            HashKind::Sha256First16 => {
                let _ = serde_json::to_writer(&mut h, effects);
            }
            HashKind::Xxh3 => {
                let _ = rmp_serde::encode::write(&mut h, effects);
            }
        }
        h.finish()
    }
}

/// Nesting deeper than this in a recorded value is shown as an error, not recursed into.
const VALUE_DEPTH_MAX: usize = 64;

/// [`HashKind::hash`] of the kind this build writes.
pub fn hash(bytes: &[u8]) -> Vec<u8> {
    HashKind::CURRENT.hash(bytes)
}

/// A [`HashKind::hash`] fed in parts: the same hash as of the parts joined.
///
/// XXH3's parts are gathered and hashed in one call at the end (the same value as its
/// streaming form): a row or a step's effects arrive as dozens of writes of a few bytes,
/// and each streaming update costs more than the bytes it hashes (measured under
/// callgrind: 7,600 instructions a journaled step streamed, docs/performance.md).
pub enum Hasher {
    Sha256(Sha256),
    Xxh3(Vec<u8>),
}

impl Hasher {
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::Xxh3(buf) => buf.extend_from_slice(bytes),
        }
    }

    pub fn finish(self) -> Vec<u8> {
        match self {
            Hasher::Sha256(h) => h.finalize()[..16].to_vec(),
            Hasher::Xxh3(buf) => xxhash_rust::xxh3::xxh3_64(&buf).to_be_bytes().to_vec(),
        }
    }
}

impl std::io::Write for Hasher {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A snapshot whose bytes are not a string-keyed MessagePack map (the journal's deltas
/// and replays need the top-level keys).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

/// The top-level entries of snapshot bytes: key → the value's bytes, verbatim.
pub fn entries(bytes: &[u8]) -> Result<BTreeMap<&str, &[u8]>, Malformed> {
    let mut out = BTreeMap::new();
    for (key, value) in entry_list(bytes)? {
        if out.insert(key, value).is_some() {
            return Err(Malformed(format!("the key `{key}` appears twice")));
        }
    }
    Ok(out)
}

/// [`entries`] in the order the bytes hold them, without building a map: what a step's
/// delta walks (canonical bytes hold their keys in byte order).
fn entry_list(bytes: &[u8]) -> Result<Vec<(&str, &[u8])>, Malformed> {
    if bytes.is_empty() {
        // The snapshot before `Start`: nothing recorded yet.
        return Ok(Vec::new());
    }
    let mut rest = bytes;
    let len = map_len(&mut rest).ok_or_else(|| Malformed("top level is not a map".into()))?;
    // Each entry takes at least two bytes: a length from the header is not trusted
    // beyond what the bytes can hold.
    let mut out = Vec::with_capacity(len.min(rest.len() / 2));
    for _ in 0..len {
        let key = read_str(&mut rest)
            .ok_or_else(|| Malformed("a top-level key is not a UTF-8 string".into()))?;
        let before = rest;
        skip_value(&mut rest, VALUE_DEPTH_MAX)
            .ok_or_else(|| Malformed(format!("the value of `{key}` is not MessagePack")))?;
        out.push((key, &before[..before.len() - rest.len()]));
    }
    if !rest.is_empty() {
        return Err(Malformed(format!(
            "{} trailing bytes after the map",
            rest.len()
        )));
    }
    Ok(out)
}

/// Moves `rest` past one MessagePack value, nested at most `depth` levels; `None` when
/// the bytes end first, nest deeper, or hold a reserved byte.
fn skip_value(rest: &mut &[u8], depth: usize) -> Option<()> {
    if depth == 0 {
        return None;
    }
    let first = *rest.first()?;
    *rest = &rest[1..];
    let (skip, items) = match first {
        0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
        0x80..=0x8f => (0, 2 * (first & 0x0f) as usize),
        0x90..=0x9f => (0, (first & 0x0f) as usize),
        0xa0..=0xbf => ((first & 0x1f) as usize, 0),
        0xc4 | 0xd9 => (be_len(rest, 1)?, 0),
        0xc5 | 0xda => (be_len(rest, 2)?, 0),
        0xc6 | 0xdb => (be_len(rest, 4)?, 0),
        0xc7 => (be_len(rest, 1)?.checked_add(1)?, 0),
        0xc8 => (be_len(rest, 2)?.checked_add(1)?, 0),
        0xc9 => (be_len(rest, 4)?.checked_add(1)?, 0),
        0xca => (4, 0),
        0xcb => (8, 0),
        0xcc | 0xd0 => (1, 0),
        0xcd | 0xd1 => (2, 0),
        0xce | 0xd2 => (4, 0),
        0xcf | 0xd3 => (8, 0),
        0xd4 => (2, 0),
        0xd5 => (3, 0),
        0xd6 => (5, 0),
        0xd7 => (9, 0),
        0xd8 => (17, 0),
        0xdc => (0, be_len(rest, 2)?),
        0xdd => (0, be_len(rest, 4)?),
        0xde => (0, be_len(rest, 2)?.checked_mul(2)?),
        0xdf => (0, be_len(rest, 4)?.checked_mul(2)?),
        0xc1 => return None,
    };
    take(rest, skip)?;
    for _ in 0..items {
        skip_value(rest, depth - 1)?;
    }
    Some(())
}

/// The canonical bytes of a map of top-level entries (keys in byte order, the smallest
/// headers): what [`Snapshot::encode`] writes for the same entries.
pub fn join(entries: &BTreeMap<&str, &[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.values().map(|v| v.len() + 8).sum::<usize>() + 5);
    mp::map_len(&mut out, entries.len());
    for (key, value) in entries {
        mp::str(&mut out, key);
        out.extend_from_slice(value);
    }
    out
}

/// The delta from snapshot bytes `before` to `after`: a MessagePack array of
/// `[key, value]` pairs in key order, `value` the new value's bytes as `bin`, or `nil`
/// for a key removed.
pub fn delta(before: &[u8], after: &[u8]) -> Result<Vec<u8>, Malformed> {
    let old = entry_list(before)?;
    let new = entry_list(after)?;
    let mut changes: Vec<(&str, Option<&[u8]>)> = Vec::new();
    let sorted = |list: &[(&str, &[u8])]| {
        list.windows(2)
            .all(|w| w[0].0.as_bytes() < w[1].0.as_bytes())
    };
    if sorted(&old) && sorted(&new) {
        // Canonical bytes on both sides: one merge walk.
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < new.len() {
            match (old.get(i), new.get(j)) {
                (Some(o), Some(n)) if o.0 == n.0 => {
                    if o.1 != n.1 {
                        changes.push((n.0, Some(n.1)));
                    }
                    i += 1;
                    j += 1;
                }
                (Some(o), Some(n)) if o.0.as_bytes() < n.0.as_bytes() => {
                    changes.push((o.0, None));
                    i += 1;
                }
                (Some(o), None) => {
                    changes.push((o.0, None));
                    i += 1;
                }
                (_, Some(n)) => {
                    changes.push((n.0, Some(n.1)));
                    j += 1;
                }
                (None, None) => break,
            }
        }
    } else {
        let old = entries(before)?;
        let new = entries(after)?;
        for (key, value) in &new {
            if old.get(key) != Some(value) {
                changes.push((key, Some(value)));
            }
        }
        for key in old.keys() {
            if !new.contains_key(key) {
                changes.push((key, None));
            }
        }
        changes.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    }
    let mut out = Vec::with_capacity(
        16 + changes
            .iter()
            .map(|c| c.0.len() + c.1.map_or(1, |v| v.len() + 5))
            .sum::<usize>(),
    );
    mp::array_len(&mut out, changes.len());
    for (key, value) in changes {
        mp::array_len(&mut out, 2);
        mp::str(&mut out, key);
        match value {
            Some(bytes) => bin(&mut out, bytes),
            None => out.push(0xc0),
        }
    }
    Ok(out)
}

/// [`HashKind::effects_hash`] of the kind this build writes.
pub fn effects_hash(effects: &[Effect]) -> Vec<u8> {
    HashKind::CURRENT.effects_hash(effects)
}

/// The snapshot bytes `delta` makes of `before`.
pub fn apply(before: &[u8], delta: &[u8]) -> Result<Vec<u8>, Malformed> {
    let mut map = entries(before)?;
    let mut rest = delta;
    let len = array_len(&mut rest).ok_or_else(|| Malformed("a delta is an array".into()))?;
    for _ in 0..len {
        if array_len(&mut rest) != Some(2) {
            return Err(Malformed("a delta entry is a [key, value] pair".into()));
        }
        let key = read_str(&mut rest)
            .ok_or_else(|| Malformed("a delta entry's key is not a string".into()))?;
        match rest.first() {
            Some(0xc0) => {
                rest = &rest[1..];
                map.remove(key);
            }
            _ => {
                let value = read_bin(&mut rest).ok_or_else(|| {
                    Malformed(format!("the delta's value of `{key}` is not bytes"))
                })?;
                map.insert(key, value);
            }
        }
    }
    if !rest.is_empty() {
        return Err(Malformed(format!(
            "{} trailing bytes after the delta",
            rest.len()
        )));
    }
    Ok(join(&map))
}

/// Where two snapshots' bytes part.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// The first byte where they differ (the length of the shorter when one is a prefix
    /// of the other).
    pub offset: usize,
    /// The first top-level key (in byte order) whose value differs or is on one side
    /// only; `None` when both have the same entries and only the framing differs.
    pub key: Option<String>,
    /// The key's value in the recorded snapshot, decoded (`null` when absent there).
    pub recorded: Json,
    /// The key's value in the replayed snapshot, decoded.
    pub replayed: Json,
}

/// Where `recorded` and `replayed` part, or `None` when they are the same bytes.
pub fn difference(recorded: &[u8], replayed: &[u8]) -> Option<Difference> {
    let offset = first_difference(recorded, replayed)?;
    let (old, new) = match (entries(recorded), entries(replayed)) {
        (Ok(old), Ok(new)) => (old, new),
        _ => {
            return Some(Difference {
                offset,
                key: None,
                recorded: value_json(recorded),
                replayed: value_json(replayed),
            })
        }
    };
    let key = old
        .keys()
        .chain(new.keys())
        .filter(|k| old.get(*k) != new.get(*k))
        .min_by(|a, b| a.as_bytes().cmp(b.as_bytes()))
        .copied();
    Some(Difference {
        offset,
        key: key.map(str::to_owned),
        recorded: key
            .and_then(|k| old.get(k))
            .map_or(Json::Null, |v| value_json(v)),
        replayed: key
            .and_then(|k| new.get(k))
            .map_or(Json::Null, |v| value_json(v)),
    })
}

/// Whether two snapshots that differ in bytes decode to the same state: a deliberate
/// change of the encoding (a format version with a decoder for the old one), not a
/// change of meaning. The format version key `v` is set aside: a re-encoding bumps it.
pub fn same_meaning(recorded: &[u8], replayed: &[u8]) -> bool {
    match (Snapshot::decode(recorded), Snapshot::decode(replayed)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// The offset of the first byte where `a` and `b` differ.
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => Some(i),
        None if a.len() == b.len() => None,
        None => Some(a.len().min(b.len())),
    }
}

/// One MessagePack value as JSON, for people: binaries as `bin:<hex>`, anything that
/// does not decode as a string saying so.
pub fn value_json(bytes: &[u8]) -> Json {
    let mut rest = bytes;
    match rmpv::decode::read_value_with_max_depth(&mut rest, VALUE_DEPTH_MAX) {
        Ok(v) if rest.is_empty() => to_json(&v),
        Ok(_) => Json::String(format!("<trailing bytes> {}", hex::encode(bytes))),
        Err(e) => Json::String(format!("<not MessagePack: {e}> {}", hex::encode(bytes))),
    }
}

fn to_json(v: &rmpv::Value) -> Json {
    use rmpv::Value as Mp;
    match v {
        Mp::Nil => Json::Null,
        Mp::Boolean(b) => Json::Bool(*b),
        Mp::Integer(i) => match (i.as_u64(), i.as_i64()) {
            (Some(u), _) => Json::from(u),
            (None, Some(s)) => Json::from(s),
            _ => Json::String(i.to_string()),
        },
        Mp::F32(f) => float(f64::from(*f)),
        Mp::F64(f) => float(*f),
        Mp::String(s) => Json::String(
            s.as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("<invalid utf-8> {}", hex::encode(s.as_bytes()))),
        ),
        Mp::Binary(b) => Json::String(format!("bin:{}", hex::encode(b))),
        Mp::Array(items) => Json::Array(items.iter().map(to_json).collect()),
        Mp::Map(pairs) => Json::Object(
            pairs
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        Mp::String(s) => s.as_str().unwrap_or("<invalid utf-8>").to_owned(),
                        other => other.to_string(),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        Mp::Ext(tag, data) => Json::String(format!("ext({tag}):{}", hex::encode(data))),
    }
}

fn float(f: f64) -> Json {
    serde_json::Number::from_f64(f).map_or_else(|| Json::String(f.to_string()), Json::Number)
}

fn bin(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = bytes.len();
    if len <= u8::MAX as usize {
        out.extend_from_slice(&[0xc4, len as u8]);
    } else if len <= u16::MAX as usize {
        out.push(0xc5);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xc6);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(bytes);
}

fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if n > rest.len() {
        return None;
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Some(head)
}

fn be_len(rest: &mut &[u8], width: usize) -> Option<usize> {
    let bytes = take(rest, width)?;
    Some(bytes.iter().fold(0usize, |acc, b| (acc << 8) | *b as usize))
}

fn header(rest: &mut &[u8], fix: u8, fix_max: u8, w16: u8, w32: u8) -> Option<usize> {
    let first = *rest.first()?;
    let len = if (fix..=fix | fix_max).contains(&first) {
        *rest = &rest[1..];
        (first & fix_max) as usize
    } else if first == w16 {
        *rest = &rest[1..];
        be_len(rest, 2)?
    } else if first == w32 {
        *rest = &rest[1..];
        be_len(rest, 4)?
    } else {
        return None;
    };
    Some(len)
}

fn map_len(rest: &mut &[u8]) -> Option<usize> {
    header(rest, 0x80, 0x0f, 0xde, 0xdf)
}

fn array_len(rest: &mut &[u8]) -> Option<usize> {
    header(rest, 0x90, 0x0f, 0xdc, 0xdd)
}

fn read_str<'a>(rest: &mut &'a [u8]) -> Option<&'a str> {
    let first = *rest.first()?;
    let len = match first {
        0xa0..=0xbf => {
            *rest = &rest[1..];
            (first & 0x1f) as usize
        }
        0xd9 => {
            *rest = &rest[1..];
            be_len(rest, 1)?
        }
        0xda => {
            *rest = &rest[1..];
            be_len(rest, 2)?
        }
        0xdb => {
            *rest = &rest[1..];
            be_len(rest, 4)?
        }
        _ => return None,
    };
    std::str::from_utf8(take(rest, len)?).ok()
}

fn read_bin<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let width = match *rest.first()? {
        0xc4 => 1,
        0xc5 => 2,
        0xc6 => 4,
        _ => return None,
    };
    *rest = &rest[1..];
    let len = be_len(rest, width)?;
    take(rest, len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn snapshot(vars: Json, tokens: &[&str]) -> Vec<u8> {
        let mut s = Snapshot::new();
        s.status = crate::Status::Running;
        s.tokens = tokens.iter().map(|t| (*t).to_owned()).collect();
        s.vars = serde_json::from_value(vars).unwrap();
        s.encode()
    }

    #[test]
    fn entries_and_join_give_back_the_encoder_s_bytes() {
        let bytes = snapshot(
            json!({"amount": 42, "order": {"lines": [1, 2.5, "x"]}}),
            &["pay"],
        );
        let map = entries(&bytes).unwrap();
        assert!(map.contains_key("v"));
        assert_eq!(join(&map), bytes);
        assert_eq!(join(&entries(&[]).unwrap()), vec![0x80]);
    }

    #[test]
    fn a_delta_carries_the_changed_keys_and_rebuilds_the_after_bytes() {
        let a = snapshot(json!({"amount": 42}), &["pay"]);
        let b = snapshot(json!({"amount": 42, "receipt": "r-1"}), &["ship"]);
        let d = delta(&a, &b).unwrap();
        assert_eq!(apply(&a, &d).unwrap(), b);
        // Only the changed keys travel: `v` and `s` are the same on both sides.
        let changed: Vec<String> = match rmpv::decode::read_value(&mut &d[..]).unwrap() {
            rmpv::Value::Array(pairs) => pairs
                .iter()
                .map(|p| p[0].as_str().unwrap().to_owned())
                .collect(),
            other => panic!("{other}"),
        };
        assert!(!changed.contains(&"v".to_owned()), "{changed:?}");
        // From the empty snapshot (the creation) and back to it.
        assert_eq!(apply(&[], &delta(&[], &a).unwrap()).unwrap(), a);
        let gone = delta(&a, &snapshot(json!({}), &[])).unwrap();
        assert_eq!(apply(&a, &gone).unwrap(), snapshot(json!({}), &[]));
    }

    #[test]
    fn damaged_bytes_are_refused_not_panicked_on() {
        let a = snapshot(json!({"amount": 42}), &["pay"]);
        for cut in 0..a.len() {
            let _ = entries(&a[..cut]);
            let _ = apply(&a, &a[..cut]);
            let _ = apply(&a[..cut], &[0x90]);
        }
        assert!(apply(&a, &[0x91, 0x92, 0xa1, b'x', 0x01]).is_err());
        assert!(entries(&[0x81, 0x01, 0x01]).is_err());
        assert!(entries(&[0x82, 0xa1, b'x', 0x01, 0xa1, b'x', 0x02]).is_err());
        // A header claiming more entries than there are bytes, nesting past the bound.
        assert!(entries(&[0xdf, 0xff, 0xff, 0xff, 0xff]).is_err());
        let mut deep = vec![0x81, 0xa1, b'x'];
        deep.extend(std::iter::repeat_n(0x91, 100));
        deep.push(0x01);
        assert!(entries(&deep).is_err());
    }

    #[test]
    fn the_skip_parser_agrees_with_rmpv_on_every_kind_of_value() {
        let values = [
            rmpv::Value::Nil,
            rmpv::Value::from(true),
            rmpv::Value::from(-3),
            rmpv::Value::from(300),
            rmpv::Value::from(70_000),
            rmpv::Value::from(u64::MAX),
            rmpv::Value::from(i64::MIN),
            rmpv::Value::F32(1.5),
            rmpv::Value::F64(2.5),
            rmpv::Value::from("x".repeat(40)),
            rmpv::Value::from("y".repeat(300)),
            rmpv::Value::Binary(vec![1; 300]),
            rmpv::Value::Ext(3, vec![1, 2, 3, 4]),
            rmpv::Value::Ext(4, vec![9; 20]),
            rmpv::Value::Array((0..20).map(rmpv::Value::from).collect()),
            rmpv::Value::Map(
                (0..20)
                    .map(|i| (rmpv::Value::from(format!("k{i}")), rmpv::Value::from(i)))
                    .collect(),
            ),
        ];
        for v in values {
            let mut bytes = Vec::new();
            rmpv::encode::write_value(&mut bytes, &v).unwrap();
            let mut rest = &bytes[..];
            assert_eq!(skip_value(&mut rest, VALUE_DEPTH_MAX), Some(()), "{v}");
            assert!(rest.is_empty(), "{v}");
            for cut in 0..bytes.len() {
                let mut rest = &bytes[..cut];
                assert_eq!(
                    skip_value(&mut rest, VALUE_DEPTH_MAX),
                    None,
                    "{v} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn the_effects_hash_is_the_hash_of_their_serialized_bytes() {
        let effects = vec![Effect::Stale { reason: "x".into() }];
        let json = serde_json::to_vec(&effects).unwrap();
        let compact = rmp_serde::to_vec(&effects).unwrap();
        assert_eq!(
            HashKind::Sha256First16.effects_hash(&effects),
            HashKind::Sha256First16.hash(&json)
        );
        assert_eq!(
            HashKind::Xxh3.effects_hash(&effects),
            HashKind::Xxh3.hash(&compact)
        );
        assert_eq!(effects_hash(&effects), HashKind::Xxh3.hash(&compact));
    }

    #[test]
    fn each_hash_kind_is_told_by_its_length() {
        for kind in [HashKind::Sha256First16, HashKind::Xxh3] {
            assert_eq!(kind.hash(b"qflow").len(), kind.hash_len());
            assert_eq!(HashKind::of_len(kind.hash_len()), Some(kind));
            let mut h = kind.hasher();
            h.update(b"qf");
            h.update(b"low");
            assert_eq!(h.finish(), kind.hash(b"qflow"));
        }
        assert_eq!(HashKind::of_len(32), None);
        assert_eq!(HashKind::of_len(0), None);
        // Fixed values: a change of either function would stop old rows verifying.
        assert_eq!(
            hex(&HashKind::Sha256First16.hash(b"")),
            "e3b0c44298fc1c149afbf4c8996fb924"
        );
        assert_eq!(hex(&HashKind::Xxh3.hash(b"")), "2d06800538d394c2");
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn a_difference_names_the_first_key_the_offset_and_both_values() {
        let a = snapshot(json!({"amount": 42}), &["pay"]);
        let b = snapshot(json!({"amount": 43}), &["pay"]);
        let d = difference(&a, &b).unwrap();
        assert_eq!(d.key.as_deref(), Some("d"), "{d:?}");
        assert_eq!(d.recorded, json!({"amount": 42}));
        assert_eq!(d.replayed, json!({"amount": 43}));
        assert_ne!(a[d.offset], b[d.offset]);
        assert_eq!(a[..d.offset], b[..d.offset]);
        assert_eq!(difference(&a, &a), None);
    }

    #[test]
    fn a_re_encoding_with_the_same_meaning_is_told_apart() {
        let a = snapshot(json!({"n": 5}), &["pay"]);
        // The same state with the status written as a 16-bit integer: other bytes, one
        // meaning (as an old format version decoded by today's engine would be).
        let mut map = entries(&a).unwrap();
        let wide = [0xcd, 0x00, 0x01];
        map.insert("s", &wide);
        let b = join(&map);
        assert_ne!(a, b);
        assert!(same_meaning(&a, &b));
        assert!(!same_meaning(&a, &snapshot(json!({"n": 6}), &["pay"])));
    }
}
