//! The packed attempt history (O1a): an instance's finished attempts, oldest first, as
//! one byte string that grows by appending. The SQLite and PostgreSQL stores keep it in
//! the instance row (`instances.history`; migrations `sqlite/0019_attempts_in_row.sql` and
//! `postgres/0017_attempts_in_row.sql`), appended to in the statement each commit already
//! makes of the row, so a step's history costs no row or page of its own
//! (docs/performance.md, "Attempt history in the instance row" and "PostgreSQL: attempt
//! history in the instance row"); the memory store keeps
//! each instance's history the same way, some 10 bytes a record instead of a record of
//! 136 bytes and a string of its own (docs/performance.md, "The memory store's attempt
//! history, packed").
//!
//! Two record layouts, every integer an LEB128 varint, instants and durations zigzagged
//! unless said otherwise. Records of both may follow each other in one history: a row
//! written before the compact layout keeps its records and takes compact ones after
//! them. The bytes are in users' databases: never change a layout once written; add one
//! with a first byte of its own.
//!
//! * **Layout 1** (written until 2026-12; read for ever): node length, node bytes,
//!   attempt, finished_at_ms, the attempt's duration (finished minus started), the
//!   outcome as one byte ([`outcome_byte`]), then code, message and worker each as `0`
//!   (none) or length + 1 followed by the bytes — 17 bytes for the first attempt of a task
//!   named `svc1` that went well. Its first byte is the node's length, never 0: node ids
//!   are never empty (the loader gives an element without one a name of its own).
//! * **Layout 2, compact** (written now): the byte [`COMPACT`] (0), a flags byte (the
//!   outcome in its low three bits; [`HAS_CODE`], [`HAS_MESSAGE`], [`HAS_WORKER`],
//!   [`FIRST_ATTEMPT`] above them; the top bit 0), node length, node bytes, the attempt
//!   unless it is the first, finished_at_ms less the instant in the instance id's UUIDv7
//!   time field ([`base_ms`]: the instance's start, so this is the instance's age; not
//!   zigzagged: one byte under 128 ms, two under 16 s, three under 34 minutes, ten if a
//!   clock went back; an id of another version counts from the epoch, as layout 1), the
//!   duration, then each text the flags name as length + bytes — 9 or 10 bytes for
//!   the same attempt. Whatever the id and the instant, it comes back exactly (wrapping
//!   arithmetic).
//!
//! The records are concatenated with no header: whoever keeps the bytes counts them
//! (docs/performance.md, "A compact attempt record").

use crate::varint::{read_varint, unzigzag, varint, zigzag};
use crate::{Attempt, AttemptOutcome, AttemptRecord, InstanceId, StoreError};

/// The outcome byte of a record. Never renumber: the bytes are in users' databases. The
/// match is exhaustive, so a new outcome cannot be written before it has a byte.
fn outcome_byte(o: AttemptOutcome) -> u8 {
    match o {
        AttemptOutcome::Ok => 0,
        AttemptOutcome::Failed => 1,
        AttemptOutcome::Panicked => 2,
        AttemptOutcome::BpmnError => 3,
        AttemptOutcome::TimedOut => 4,
        AttemptOutcome::Interrupted => 5,
        AttemptOutcome::Poisoned => 6,
    }
}

/// The outcome [`outcome_byte`] gives `b`.
fn outcome_of(b: u8) -> Option<AttemptOutcome> {
    AttemptOutcome::ALL
        .into_iter()
        .find(|o| outcome_byte(*o) == b)
}

/// The first byte of a compact record (layout 2). A layout 1 record starts with its
/// node's length, which is never 0.
const COMPACT: u8 = 0;
/// Flags of a compact record, above the outcome's three bits ([`OUTCOME_MASK`]).
const HAS_CODE: u8 = 1 << 3;
const HAS_MESSAGE: u8 = 1 << 4;
const HAS_WORKER: u8 = 1 << 5;
/// The attempt is the first: its number is not written.
const FIRST_ATTEMPT: u8 = 1 << 6;
const OUTCOME_MASK: u8 = 0b111;
/// Bits no compact record sets; a record with one is damaged (or of a later build).
const UNKNOWN_FLAGS: u8 = 1 << 7;

/// The instant a compact record's `finished_at_ms` is written against: for a UUIDv7 id (as
/// the runtime makes them) its time field, the milliseconds of the instance's start; for
/// any other id 0, so its records cost what layout 1's do.
fn base_ms(instance: InstanceId) -> i64 {
    if instance.get_version_num() == 7 {
        (instance.as_u128() >> 80) as i64
    } else {
        0
    }
}

/// Appends the records of `instance` to `out`, in the compact layout.
pub fn pack_into(out: &mut Vec<u8>, instance: InstanceId, records: &[AttemptRecord]) {
    let base = base_ms(instance);
    for r in records {
        let first = r.attempt.get() == 1;
        let mut flags = outcome_byte(r.outcome);
        for (text, flag) in [
            (&r.code, HAS_CODE),
            (&r.message, HAS_MESSAGE),
            (&r.worker, HAS_WORKER),
        ] {
            if text.is_some() {
                flags |= flag;
            }
        }
        if first {
            flags |= FIRST_ATTEMPT;
        }
        out.push(COMPACT);
        out.push(flags);
        bytes(out, r.node.as_bytes());
        if !first {
            varint(out, u64::from(r.attempt.get()));
        }
        varint(out, r.finished_at_ms.wrapping_sub(base) as u64);
        varint(out, zigzag(r.finished_at_ms.wrapping_sub(r.started_at_ms)));
        for t in [&r.code, &r.message, &r.worker].into_iter().flatten() {
            bytes(out, t.as_bytes());
        }
    }
}

/// The records of `instance` packed, or `None` when there are none (the column is then
/// left as it is).
pub fn pack(instance: InstanceId, records: &[AttemptRecord]) -> Option<Vec<u8>> {
    if records.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(records.len() * 16);
    pack_into(&mut out, instance, records);
    Some(out)
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// The records of `instance` packed in `body` (either layout, in any mix), oldest first.
/// Damaged bytes are [`StoreError::Corrupt`], never a panic.
pub fn unpack(instance: InstanceId, body: &[u8]) -> Result<Vec<AttemptRecord>, StoreError> {
    let corrupt = |what: &str| {
        StoreError::Corrupt(format!(
            "the attempt history of instance {instance} is damaged: {what}"
        ))
    };
    let base = base_ms(instance);
    let mut rest = body;
    let mut out = Vec::new();
    while let Some((&first, tail)) = rest.split_first() {
        let record = if first == COMPACT {
            rest = tail;
            compact(&mut rest, instance, base)
        } else {
            layout_1(&mut rest, instance)
        };
        out.push(record.map_err(corrupt)?);
    }
    Ok(out)
}

/// One compact record, after its [`COMPACT`] byte.
fn compact(
    rest: &mut &[u8],
    instance: InstanceId,
    base: i64,
) -> Result<AttemptRecord, &'static str> {
    let (&flags, tail) = rest.split_first().ok_or("a record's flags")?;
    *rest = tail;
    if flags & UNKNOWN_FLAGS != 0 {
        return Err("a record's flags");
    }
    let outcome = outcome_of(flags & OUTCOME_MASK).ok_or("an outcome")?;
    let node = text(rest).ok_or("a node name")?;
    let attempt = if flags & FIRST_ATTEMPT != 0 {
        Some(1)
    } else {
        read_varint(rest).and_then(|a| u32::try_from(a).ok())
    };
    let attempt = attempt.and_then(Attempt::new).ok_or("an attempt number")?;
    let finished_at_ms = read_varint(rest)
        .map(|d| base.wrapping_add(d as i64))
        .ok_or("an end instant")?;
    let duration = read_varint(rest).ok_or("a duration")?;
    let mut texts = [None, None, None];
    for (slot, flag) in texts.iter_mut().zip([HAS_CODE, HAS_MESSAGE, HAS_WORKER]) {
        if flags & flag != 0 {
            *slot = Some(text(rest).ok_or("a text")?);
        }
    }
    Ok(assemble(
        instance,
        node,
        attempt,
        finished_at_ms,
        duration,
        outcome,
        texts,
    ))
}

/// One record of layout 1.
fn layout_1(rest: &mut &[u8], instance: InstanceId) -> Result<AttemptRecord, &'static str> {
    let node = text(rest).ok_or("a node name")?;
    let attempt = read_varint(rest)
        .and_then(|a| u32::try_from(a).ok())
        .and_then(Attempt::new)
        .ok_or("an attempt number")?;
    let finished_at_ms = read_varint(rest).map(unzigzag).ok_or("an end instant")?;
    let duration = read_varint(rest).ok_or("a duration")?;
    let (&byte, tail) = rest.split_first().ok_or("an outcome")?;
    let outcome = outcome_of(byte).ok_or("an outcome")?;
    *rest = tail;
    let mut texts = [None, None, None];
    for slot in &mut texts {
        let n = read_varint(rest).ok_or("a text's length")?;
        if n > 0 {
            *slot = Some(take_text(rest, n - 1).ok_or("a text")?);
        }
    }
    Ok(assemble(
        instance,
        node,
        attempt,
        finished_at_ms,
        duration,
        outcome,
        texts,
    ))
}

/// The record both layouts read: `duration` as written (zigzagged), `texts` the code,
/// message and worker.
fn assemble(
    instance: InstanceId,
    node: String,
    attempt: Attempt,
    finished_at_ms: i64,
    duration: u64,
    outcome: AttemptOutcome,
    texts: [Option<String>; 3],
) -> AttemptRecord {
    let [code, message, worker] = texts;
    AttemptRecord {
        instance,
        node,
        attempt,
        started_at_ms: finished_at_ms.wrapping_sub(unzigzag(duration)),
        finished_at_ms,
        outcome,
        code,
        message,
        worker,
    }
}

fn text(rest: &mut &[u8]) -> Option<String> {
    let n = read_varint(rest)?;
    take_text(rest, n)
}

fn take_text(rest: &mut &[u8], n: u64) -> Option<String> {
    let n = usize::try_from(n).ok().filter(|n| *n <= rest.len())?;
    let (head, tail) = rest.split_at(n);
    let t = std::str::from_utf8(head).ok()?.to_owned();
    *rest = tail;
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An id as the runtime makes them: UUIDv7 with `start_ms` in its time field.
    fn v7(start_ms: u64) -> InstanceId {
        uuid::Builder::from_unix_timestamp_millis(start_ms, &[7; 10]).into_uuid()
    }

    fn record(node: &str, attempt: u32, code: Option<&str>) -> AttemptRecord {
        AttemptRecord {
            instance: InstanceId::from_u128(7),
            node: node.to_owned(),
            attempt: Attempt::new(attempt).unwrap(),
            started_at_ms: -5,
            finished_at_ms: 1_733_000_000_000,
            outcome: if code.is_some() {
                AttemptOutcome::Failed
            } else {
                AttemptOutcome::Ok
            },
            code: code.map(str::to_owned),
            message: code.map(|c| format!("{c}: é, \u{0} and all")),
            worker: Some(String::new()),
        }
    }

    /// Layout 1 as builds before the compact layout wrote it (kept here to make the bytes
    /// such a build left in a database).
    fn layout_1_bytes(records: &[AttemptRecord]) -> Vec<u8> {
        let mut out = Vec::new();
        for r in records {
            bytes(&mut out, r.node.as_bytes());
            varint(&mut out, u64::from(r.attempt.get()));
            varint(&mut out, zigzag(r.finished_at_ms));
            varint(
                &mut out,
                zigzag(r.finished_at_ms.wrapping_sub(r.started_at_ms)),
            );
            out.push(outcome_byte(r.outcome));
            for text in [&r.code, &r.message, &r.worker] {
                match text {
                    None => varint(&mut out, 0),
                    Some(t) => {
                        varint(&mut out, t.len() as u64 + 1);
                        out.extend_from_slice(t.as_bytes());
                    }
                }
            }
        }
        out
    }

    #[test]
    fn records_round_trip_in_order() {
        let id = InstanceId::from_u128(7);
        let records = vec![
            record("pay", 1, Some("DECLINED")),
            record("pay", 2, None),
            record("ship@2", 1, None),
        ];
        let mut body = pack(id, &records[..1]).unwrap();
        pack_into(&mut body, id, &records[1..]);
        assert_eq!(unpack(id, &body).unwrap(), records);
        assert_eq!(pack(id, &[]), None);
        assert!(unpack(id, &[]).unwrap().is_empty());
    }

    /// Bytes a build of 2026-12-06 wrote to a SQLite store (the first attempt of `svc1`,
    /// taken from a `qflow.db` of the write-breakdown run) still read back.
    #[test]
    fn a_layout_1_record_from_a_real_database_reads_back() {
        let body = b"\x04svc1\x01\xe4\xa9\xd3\xd6\xc9h\x00\x00\x00\x00\x00";
        let id = v7(1_796_595_149_300);
        let got = unpack(id, body).unwrap();
        assert_eq!(got.len(), 1);
        let r = &got[0];
        assert_eq!((r.node.as_str(), r.attempt.get()), ("svc1", 1));
        assert_eq!(
            r.finished_at_ms, 1_796_595_149_426,
            "2026-12-06 22:12:29.426 UTC"
        );
        assert_eq!(r.started_at_ms, r.finished_at_ms);
        assert_eq!(r.outcome, AttemptOutcome::Ok);
        assert_eq!((&r.code, &r.message, &r.worker), (&None, &None, &None));
        assert_eq!(r.instance, id);
    }

    /// A row written before the compact layout keeps its records and takes compact ones
    /// after them: the history reads back whole and in order.
    #[test]
    fn layouts_mix_in_one_history() {
        let id = v7(1_733_000_000_000 - 40);
        let old = [record("pay", 1, Some("DECLINED")), record("pay", 2, None)];
        let new = [record("pay", 3, Some("X")), record("ship", 1, None)];
        let mut body = layout_1_bytes(&old);
        pack_into(&mut body, id, &new);
        let want: Vec<_> = old
            .iter()
            .chain(&new)
            .map(|r| AttemptRecord {
                instance: id,
                ..r.clone()
            })
            .collect();
        assert_eq!(unpack(id, &body).unwrap(), want);
    }

    /// The point of the compact layout: the first attempt of `svc1` that went well, 100 ms
    /// into an instance with a runtime-made id, is 9 bytes (layout 1: 17); 10 s in, 10.
    #[test]
    fn a_first_attempt_that_went_well_is_nine_bytes() {
        let start = 1_796_000_000_000;
        let r = AttemptRecord {
            instance: v7(start),
            node: "svc1".into(),
            attempt: Attempt::new(1).unwrap(),
            started_at_ms: start as i64 + 99,
            finished_at_ms: start as i64 + 100,
            outcome: AttemptOutcome::Ok,
            code: None,
            message: None,
            worker: None,
        };
        let body = pack(v7(start), std::slice::from_ref(&r)).unwrap();
        assert_eq!(body.len(), 9, "{body:x?}");
        assert_eq!(layout_1_bytes(std::slice::from_ref(&r)).len(), 17);
        assert_eq!(unpack(v7(start), &body).unwrap(), vec![r.clone()]);
        let later = AttemptRecord {
            started_at_ms: start as i64 + 9_999,
            finished_at_ms: start as i64 + 10_000,
            ..r
        };
        assert_eq!(
            pack(v7(start), std::slice::from_ref(&later)).unwrap().len(),
            10
        );
    }

    #[test]
    fn every_outcome_has_its_own_byte() {
        let bytes: std::collections::BTreeSet<u8> =
            AttemptOutcome::ALL.into_iter().map(outcome_byte).collect();
        assert_eq!(bytes.len(), AttemptOutcome::ALL.len());
        for o in AttemptOutcome::ALL {
            assert_eq!(outcome_of(outcome_byte(o)), Some(o));
            assert_eq!(
                outcome_byte(o) & !OUTCOME_MASK,
                0,
                "{o:?} fits the flags byte"
            );
        }
    }

    #[test]
    fn damaged_bytes_are_corrupt_not_a_panic() {
        let id = InstanceId::from_u128(7);
        for body in [
            pack(id, &[record("pay", 2, Some("X"))]).unwrap(),
            layout_1_bytes(&[record("pay", 2, Some("X"))]),
        ] {
            for cut in 0..body.len() {
                let r = unpack(id, &body[..cut]);
                assert!(cut == 0 || r.is_err(), "cut at {cut} decoded: {r:?}");
            }
        }
        let body = pack(id, &[record("pay", 2, Some("X"))]).unwrap();
        // Compact: COMPACT, flags, `\x03pay`, then the attempt.
        assert_eq!(body[1] & OUTCOME_MASK, 1, "the outcome of Failed");
        for (at, byte, what) in [
            (1, body[1] | 7, "an outcome"),
            (1, body[1] | UNKNOWN_FLAGS, "a record's flags"),
            (6, 0, "an attempt number"),
        ] {
            let mut damaged = body.clone();
            damaged[at] = byte;
            let err = unpack(id, &damaged).unwrap_err().to_string();
            assert!(err.contains(what), "byte {at} = {byte}: {err}");
        }
        let old = layout_1_bytes(&[record("pay", 1, Some("X"))]);
        let mut zero_attempt = old.clone();
        zero_attempt[4] = 0; // the attempt number after `\x03pay`
        assert!(unpack(id, &zero_attempt).is_err());
    }

    fn any_record() -> impl Strategy<Value = AttemptRecord> {
        let text = proptest::option::of(".{0,12}");
        (
            ".{0,10}",
            1u32..=u32::MAX,
            any::<i64>(),
            any::<i64>(),
            proptest::sample::select(AttemptOutcome::ALL.to_vec()),
            (text.clone(), text.clone(), text),
        )
            .prop_map(
                |(node, attempt, started, finished, outcome, (code, message, worker))| {
                    AttemptRecord {
                        instance: InstanceId::nil(),
                        node,
                        attempt: Attempt::new(attempt).unwrap(),
                        started_at_ms: started,
                        finished_at_ms: finished,
                        outcome,
                        code,
                        message,
                        worker,
                    }
                },
            )
    }

    proptest! {
        /// Any records of any instance come back as they went in, appended in any number
        /// of pieces, after any layout 1 records with non-empty node names.
        #[test]
        fn any_history_round_trips(
            id in any::<u128>(),
            old in proptest::collection::vec(any_record(), 0..4),
            new in proptest::collection::vec(any_record(), 0..6),
            split in 0usize..6,
        ) {
            let id = InstanceId::from_u128(id);
            let old: Vec<_> = old
                .into_iter()
                .map(|r| AttemptRecord { node: format!("n{}", r.node), ..r })
                .collect();
            let mut body = layout_1_bytes(&old);
            let split = split.min(new.len());
            pack_into(&mut body, id, &new[..split]);
            pack_into(&mut body, id, &new[split..]);
            let want: Vec<_> = old
                .iter()
                .chain(&new)
                .map(|r| AttemptRecord { instance: id, ..r.clone() })
                .collect();
            prop_assert_eq!(unpack(id, &body).unwrap(), want);
        }

        /// Any bytes at all: records or an error, never a panic.
        #[test]
        fn any_bytes_decode_or_fail(body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = unpack(InstanceId::from_u128(7), &body);
        }
    }
}
