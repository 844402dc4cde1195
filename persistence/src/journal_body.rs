//! A journal row's fields packed into one value: the `body` column of SQLite's journal
//! (`migrations/sqlite/0015_journal_packed.sql`). The store's own layout, never seen
//! outside it: what the contract's [`JournalEntry`] holds, without `seq` (a column of
//! its own), in this order:
//!
//! | field | encoding |
//! |---|---|
//! | layout | one byte, [`LAYOUT`] |
//! | `deployment`, `at_ms` | each a zigzag LEB128 varint of the `i64` |
//! | `input`, `delta`, `snapshot_hash`, `effects_hash`, `row_hash` | each an LEB128 varint length, then the bytes |
//!
//! The bytes of each field are the entry's own, so the row hash (over the fields, not
//! over this layout) is unchanged by the packing. Public for tools and tests that read
//! or change a store file directly (replay's tests damage rows with it); the store
//! itself is the only writer a running system has. Reading is checked: a body that ends
//! early, holds a length past its end, bytes after its last field, input that is not
//! UTF-8 or a layout this build does not know is a corrupt row, named by its id.

use qflow_store::{DeploymentId, JournalEntry, StoreError};

/// The layout byte this build writes and reads.
const LAYOUT: u8 = 1;

/// The body of `entry`.
pub fn pack(entry: &JournalEntry) -> Vec<u8> {
    let mut out = Vec::with_capacity(entry.size_bytes() + 16);
    out.push(LAYOUT);
    varint(&mut out, zigzag(entry.deployment.0));
    varint(&mut out, zigzag(entry.at_ms));
    for part in [
        entry.input.as_bytes(),
        &entry.delta,
        &entry.snapshot_hash,
        &entry.effects_hash,
        &entry.row_hash,
    ] {
        varint(&mut out, part.len() as u64);
        out.extend_from_slice(part);
    }
    out
}

/// The entry of row `id` whose `seq` column is `seq` and whose body is `body`.
pub fn unpack(id: i64, seq: u64, body: &[u8]) -> Result<JournalEntry, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("journal row {id}: body {what}"));
    let mut rest = body;
    match rest.split_first() {
        Some((&LAYOUT, tail)) => rest = tail,
        Some((other, _)) => return Err(corrupt(&format!("has unknown layout {other}"))),
        None => return Err(corrupt("is empty")),
    }
    let deployment = unzigzag(read_varint(&mut rest).ok_or_else(|| corrupt("ends early"))?);
    let at_ms = unzigzag(read_varint(&mut rest).ok_or_else(|| corrupt("ends early"))?);
    let mut part = || -> Result<Vec<u8>, StoreError> {
        let len = read_varint(&mut rest).ok_or_else(|| corrupt("ends early"))?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&len| len <= rest.len())
            .ok_or_else(|| corrupt("holds a length past its end"))?;
        let (bytes, tail) = rest.split_at(len);
        rest = tail;
        Ok(bytes.to_vec())
    };
    let input = String::from_utf8(part()?).map_err(|_| corrupt("holds input that is not UTF-8"))?;
    let delta = part()?;
    let snapshot_hash = part()?;
    let effects_hash = part()?;
    let row_hash = part()?;
    if !rest.is_empty() {
        return Err(corrupt(&format!(
            "has {} bytes after its last field",
            rest.len()
        )));
    }
    Ok(JournalEntry {
        seq,
        deployment: DeploymentId(deployment),
        at_ms,
        input,
        delta,
        snapshot_hash,
        effects_hash,
        row_hash,
    })
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// An LEB128 varint of at most ten bytes whose value fits a `u64`.
fn read_varint(rest: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, &byte) in rest.iter().enumerate().take(10) {
        let bits = u64::from(byte & 0x7f);
        // The tenth byte may carry only the top bit of a u64.
        if i == 9 && bits > 1 {
            return None;
        }
        value |= bits << (7 * i);
        if byte & 0x80 == 0 {
            *rest = &rest[i + 1..];
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> JournalEntry {
        JournalEntry {
            seq: 7,
            deployment: DeploymentId(3),
            at_ms: 1_764_806_400_000,
            input: r#"{"type":"task_completed","node":"réserve","attempt":1}"#.into(),
            delta: vec![0x81, 0xa1, b'a', 0x01],
            snapshot_hash: vec![1; 8],
            effects_hash: vec![2; 8],
            row_hash: vec![3; 16],
        }
    }

    #[test]
    fn a_packed_entry_unpacks_to_itself() {
        let e = entry();
        assert_eq!(unpack(1, 7, &pack(&e)).unwrap(), e);
        for (deployment, at_ms) in [(0, 0), (i64::MAX, i64::MIN), (-1, -300), (i64::MIN, 1)] {
            let e = JournalEntry {
                deployment: DeploymentId(deployment),
                at_ms,
                input: String::new(),
                delta: Vec::new(),
                ..entry()
            };
            assert_eq!(unpack(1, 7, &pack(&e)).unwrap(), e);
        }
    }

    #[test]
    fn a_packed_entry_is_its_fields_with_a_few_bytes_of_framing() {
        let e = entry();
        // Layout, two varints (1 and 6 bytes), five one-byte lengths.
        assert_eq!(pack(&e).len(), e.size_bytes() - 24 + 1 + 1 + 6 + 5);
    }

    #[test]
    fn every_damaged_body_is_refused_with_the_row_id() {
        let body = pack(&entry());
        // Every truncation, and every prefix with bytes appended.
        for cut in 0..body.len() {
            let err = unpack(42, 7, &body[..cut]).unwrap_err().to_string();
            assert!(err.contains("journal row 42"), "{cut}: {err}");
        }
        let mut longer = body.clone();
        longer.push(0);
        assert!(unpack(42, 7, &longer)
            .unwrap_err()
            .to_string()
            .contains("1 bytes after its last field"));
        let mut layout = body.clone();
        layout[0] = 9;
        assert!(unpack(42, 7, &layout)
            .unwrap_err()
            .to_string()
            .contains("unknown layout 9"));
        // A length past the end, and a varint longer than a u64.
        assert!(unpack(42, 7, &[LAYOUT, 0, 0, 0x7f]).is_err());
        assert!(unpack(
            42,
            7,
            &[LAYOUT, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]
        )
        .is_err());
        // Input that is not UTF-8.
        assert!(unpack(42, 7, &[LAYOUT, 0, 0, 1, 0xff, 0, 0, 0, 0])
            .unwrap_err()
            .to_string()
            .contains("not UTF-8"));
    }

    #[test]
    fn no_byte_string_panics_the_reader() {
        // Every body of up to two bytes, every three-byte one of this layout, and every
        // one-byte change of a real one.
        for len in 0..=2u32 {
            for n in 0..(1u32 << (8 * len)) {
                let _ = unpack(1, 1, &n.to_le_bytes()[..len as usize]);
            }
        }
        for n in 0..=u16::MAX {
            let [a, b] = n.to_le_bytes();
            let _ = unpack(1, 1, &[LAYOUT, a, b]);
        }
        let body = pack(&entry());
        for i in 0..body.len() {
            for b in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut changed = body.clone();
                changed[i] = b;
                let _ = unpack(1, 1, &changed);
            }
        }
    }
}
