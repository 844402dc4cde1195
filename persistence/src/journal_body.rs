//! A journal row's fields packed into one value: the `body` column of SQLite's journal
//! (`migrations/sqlite/0015_journal_packed.sql`, `0018_journal_rounds.sql`). The store's
//! own layout, never seen outside it. Two layouts, told by the body's first byte:
//!
//! **An entry** ([`LAYOUT`], rows written by builds from `0015` until `0018`): what the
//! contract's [`JournalEntry`] holds, without `seq` (a column of its own), in this order:
//!
//! | field | encoding |
//! |---|---|
//! | layout | one byte, [`LAYOUT`] |
//! | `deployment`, `at_ms` | each a zigzag LEB128 varint of the `i64` |
//! | `input`, `delta`, `snapshot_hash`, `effects_hash`, `row_hash` | each an LEB128 varint length, then the bytes |
//!
//! **A round** ([`ROUND`], every row written since `0018`): the journaled steps of one
//! commit round, whose instances are distinct — one row a round instead of one a step,
//! which is what the journal cost SQLite's one writer (docs/performance.md, "The input
//! journal"). Its entries, in the round's order:
//!
//! | field | encoding |
//! |---|---|
//! | layout | one byte, [`ROUND`] |
//! | entry count | a varint |
//! | per entry: instance | its UUID's 16 bytes |
//! | per entry: `prev` | a varint: the instance's journal row before this one, 0 for none |
//! | per entry: `seq` | a varint |
//! | per entry: the step | a varint length, then the step's entry body as above |
//!
//! An instance's history is a chain: `instances.journal_last` names the row of its
//! newest step, and each of its entries names the row of the one before (`prev`, a
//! column in an entry row, inside the body in a round).
//!
//! The bytes of each field are the entry's own, so the row hash (over the fields, not
//! over this layout) is unchanged by the packing. Public for tools and tests that read
//! or change a store file directly (replay's tests damage rows with it); the store
//! itself is the only writer a running system has. Reading is checked: a body that ends
//! early, holds a length past its end, bytes after its last field, input that is not
//! UTF-8 or a layout this build does not know is a corrupt row, named by its id.

use qflow_store::varint::{read_varint, unzigzag, varint, zigzag};
use qflow_store::{DeploymentId, InstanceId, JournalEntry, StoreError};

/// The layout byte of a body holding one entry.
pub const LAYOUT: u8 = 1;
/// The layout byte of a body holding a commit round's entries.
pub const ROUND: u8 = 2;

/// The body of `entry`.
pub fn pack(entry: &JournalEntry) -> Vec<u8> {
    let mut out = Vec::with_capacity(entry.size_bytes() + 16);
    pack_into(&mut out, entry);
    out
}

/// How many bytes [`pack`] writes for `entry`.
fn packed_len(entry: &JournalEntry) -> usize {
    let parts = [
        entry.input.len(),
        entry.delta.len(),
        entry.snapshot_hash.len(),
        entry.effects_hash.len(),
        entry.row_hash.len(),
    ];
    1 + varint_len(zigzag(entry.deployment.0))
        + varint_len(zigzag(entry.at_ms))
        + parts
            .iter()
            .map(|&len| varint_len(len as u64) + len)
            .sum::<usize>()
}

fn pack_into(out: &mut Vec<u8>, entry: &JournalEntry) {
    out.push(LAYOUT);
    varint(out, zigzag(entry.deployment.0));
    varint(out, zigzag(entry.at_ms));
    for part in [
        entry.input.as_bytes(),
        &entry.delta,
        &entry.snapshot_hash,
        &entry.effects_hash,
        &entry.row_hash,
    ] {
        varint(out, part.len() as u64);
        out.extend_from_slice(part);
    }
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

/// One step of a round row, as [`pack_round`] takes it.
#[derive(Debug, Clone, Copy)]
pub struct RoundStep<'a> {
    pub instance: InstanceId,
    /// The instance's journal row before this step's, if any.
    pub prev: Option<i64>,
    pub entry: &'a JournalEntry,
}

/// One entry of a round row as [`round`] reads it, the step's body not yet unpacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundEntry<'a> {
    pub instance: InstanceId,
    /// The instance's journal row before this step's, if any.
    pub prev: Option<i64>,
    pub seq: u64,
    /// The step's entry body ([`LAYOUT`]).
    pub body: &'a [u8],
}

impl RoundEntry<'_> {
    /// The step, read from round row `row`.
    pub fn unpack(&self, row: i64) -> Result<JournalEntry, StoreError> {
        unpack(row, self.seq, self.body)
    }
}

/// Whether `body` is a round row's.
pub fn is_round(body: &[u8]) -> bool {
    body.first() == Some(&ROUND)
}

/// The body of a round row holding `steps`, in their order.
pub fn pack_round(steps: &[RoundStep<'_>]) -> Vec<u8> {
    let lens: Vec<usize> = steps.iter().map(|s| packed_len(s.entry)).collect();
    let size = 1
        + 10
        + lens
            .iter()
            .map(|len| 16 + 10 + 10 + 10 + len)
            .sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.push(ROUND);
    varint(&mut out, steps.len() as u64);
    for (step, &len) in steps.iter().zip(&lens) {
        round_head(&mut out, step.instance, step.prev, step.entry.seq);
        varint(&mut out, len as u64);
        pack_into(&mut out, step.entry);
    }
    out
}

/// The body of a round row holding `entries` as read: what a purge writes back when it
/// takes some of a round's entries out.
pub fn join_round(entries: &[RoundEntry<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    out.push(ROUND);
    varint(&mut out, entries.len() as u64);
    for entry in entries {
        round_head(&mut out, entry.instance, entry.prev, entry.seq);
        varint(&mut out, entry.body.len() as u64);
        out.extend_from_slice(entry.body);
    }
    out
}

fn round_head(out: &mut Vec<u8>, instance: InstanceId, prev: Option<i64>, seq: u64) {
    out.extend_from_slice(instance.as_bytes());
    // Row ids are positive: 0 is free to say "none".
    varint(out, prev.map_or(0, |p| p.max(0) as u64));
    varint(out, seq);
}

/// The entries of round row `id`, in their order. Each entry's own body is checked only
/// when it is unpacked.
pub fn round(id: i64, body: &[u8]) -> Result<Vec<RoundEntry<'_>>, StoreError> {
    let mut reader = RoundReader::new(id, body)?;
    // Every entry takes at least 19 bytes: a count from the body is not trusted further.
    let mut out = Vec::with_capacity(reader.left.min(body.len() / 19));
    while let Some(entry) = reader.next_entry()? {
        out.push(entry);
    }
    Ok(out)
}

/// The entry of `instance` in round row `id`, if it has one; reads no further than it.
pub fn round_step(
    id: i64,
    body: &[u8],
    instance: InstanceId,
) -> Result<Option<RoundEntry<'_>>, StoreError> {
    let mut reader = RoundReader::new(id, body)?;
    while let Some(entry) = reader.next_entry()? {
        if entry.instance == instance {
            return Ok(Some(entry));
        }
    }
    Ok(None)
}

/// Walks a round row's entries, checking the framing as it goes.
struct RoundReader<'a> {
    id: i64,
    rest: &'a [u8],
    left: usize,
}

impl<'a> RoundReader<'a> {
    fn new(id: i64, body: &'a [u8]) -> Result<Self, StoreError> {
        let corrupt = |what: &str| StoreError::Corrupt(format!("journal row {id}: body {what}"));
        let mut rest = match body.split_first() {
            Some((&ROUND, tail)) => tail,
            Some((other, _)) => return Err(corrupt(&format!("is not a round (layout {other})"))),
            None => return Err(corrupt("is empty")),
        };
        let left = read_varint(&mut rest)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| corrupt("ends early"))?;
        Ok(RoundReader { id, rest, left })
    }

    fn corrupt(&self, what: &str) -> StoreError {
        StoreError::Corrupt(format!("journal row {}: body {what}", self.id))
    }

    fn next_entry(&mut self) -> Result<Option<RoundEntry<'a>>, StoreError> {
        if self.left == 0 {
            return if self.rest.is_empty() {
                Ok(None)
            } else {
                Err(self.corrupt(&format!(
                    "has {} bytes after its last entry",
                    self.rest.len()
                )))
            };
        }
        self.left -= 1;
        let early = || self.corrupt("ends early");
        let (instance, mut rest) = self
            .rest
            .split_first_chunk::<16>()
            .map(|(uuid, tail)| (InstanceId::from_bytes(*uuid), tail))
            .ok_or_else(early)?;
        let prev = read_varint(&mut rest).ok_or_else(early)?;
        let prev = match prev {
            0 => None,
            p => Some(i64::try_from(p).map_err(|_| self.corrupt("holds a link past any row"))?),
        };
        let seq = read_varint(&mut rest).ok_or_else(early)?;
        let len = read_varint(&mut rest).ok_or_else(early)?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&len| len <= rest.len())
            .ok_or_else(|| self.corrupt("holds a length past its end"))?;
        let (body, tail) = rest.split_at(len);
        self.rest = tail;
        Ok(Some(RoundEntry {
            instance,
            prev,
            seq,
            body,
        }))
    }
}

fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
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

    fn steps() -> Vec<(InstanceId, Option<i64>, JournalEntry)> {
        (1..=3u8)
            .map(|n| {
                let mut e = entry();
                e.seq = u64::from(n) * 1000;
                e.input = format!("{{\"n\":{n}}}");
                (
                    InstanceId::from_u128(u128::from(n) << 64 | 7),
                    (n > 1).then_some(i64::from(n) * 300),
                    e,
                )
            })
            .collect()
    }

    fn round_of(steps: &[(InstanceId, Option<i64>, JournalEntry)]) -> Vec<u8> {
        let steps: Vec<RoundStep<'_>> = steps
            .iter()
            .map(|(instance, prev, entry)| RoundStep {
                instance: *instance,
                prev: *prev,
                entry,
            })
            .collect();
        pack_round(&steps)
    }

    #[test]
    fn a_round_holds_each_step_with_its_instance_and_link() {
        let steps = steps();
        let body = round_of(&steps);
        assert!(is_round(&body) && !is_round(&pack(&entry())));
        let read = round(900, &body).unwrap();
        assert_eq!(read.len(), 3);
        for ((instance, prev, e), got) in steps.iter().zip(&read) {
            assert_eq!((got.instance, got.prev, got.seq), (*instance, *prev, e.seq));
            assert_eq!(got.unpack(900).unwrap(), *e);
            let found = round_step(900, &body, *instance).unwrap().unwrap();
            assert_eq!(found, *got);
        }
        assert_eq!(
            round_step(900, &body, InstanceId::from_u128(5)).unwrap(),
            None
        );
        // What a purge writes back: the round without one entry, as if packed without it.
        let kept = [read[0], read[2]];
        assert_eq!(
            join_round(&kept),
            round_of(&[steps[0].clone(), steps[2].clone()])
        );
        assert_eq!(join_round(&read), body);
        // The entry body's length is what `packed_len` says.
        assert_eq!(packed_len(&steps[0].2), pack(&steps[0].2).len());
    }

    #[test]
    fn every_damaged_round_is_refused_with_the_row_id() {
        let body = round_of(&steps());
        for cut in 0..body.len() {
            let err = round(42, &body[..cut]).unwrap_err().to_string();
            assert!(err.contains("journal row 42"), "{cut}: {err}");
        }
        let mut longer = body.clone();
        longer.push(0);
        assert!(round(42, &longer)
            .unwrap_err()
            .to_string()
            .contains("after its last entry"));
        assert!(round(42, &pack(&entry()))
            .unwrap_err()
            .to_string()
            .contains("not a round"));
        // A link past any row id.
        let mut far = vec![ROUND, 1];
        far.extend_from_slice(&[0; 16]);
        far.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        far.extend_from_slice(&[1, 0]);
        assert!(round(42, &far)
            .unwrap_err()
            .to_string()
            .contains("link past any row"));
        // Every one-byte change reads or is refused, never panics; a count that lies
        // about the entries allocates nothing for them.
        for i in 0..body.len() {
            for b in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut changed = body.clone();
                changed[i] = b;
                if let Ok(entries) = round(1, &changed) {
                    for e in entries {
                        let _ = e.unpack(1);
                    }
                }
            }
        }
        assert!(round(1, &[ROUND, 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
    }
}
