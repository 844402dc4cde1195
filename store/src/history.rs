//! The packed attempt history (O1a): an instance's finished attempts, oldest first, as
//! one byte string that grows by appending. The SQLite and PostgreSQL stores keep it in
//! the instance row (`instances.history`; migrations `sqlite/0019_attempts_in_row.sql` and
//! `postgres/0017_attempts_in_row.sql`), appended to in the statement each commit already
//! makes of the row, so a step's history costs no row or page of its own
//! (docs/performance.md, "Attempt history in the instance row" and "PostgreSQL: attempt
//! history in the instance row"); the memory store keeps
//! each instance's history the same way, some 20 bytes a record instead of a record of
//! 136 bytes and a string of its own (docs/performance.md, "The memory store's attempt
//! history, packed").
//!
//! Layout of one record, every integer an LEB128 varint (signed ones zigzagged): node
//! length, node bytes, attempt, finished_at_ms, the attempt's duration (finished minus
//! started), the outcome as one byte ([`outcome_byte`]), then code, message and
//! worker each as `0` (none) or length + 1 followed by the bytes — some 20 bytes for a
//! task's attempt that went well. The records are concatenated with no header: whoever
//! keeps the bytes counts them. The bytes are in users' databases: never change the
//! layout of a record once written.

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

/// Appends `records` to `out`.
pub fn pack_into(out: &mut Vec<u8>, records: &[AttemptRecord]) {
    for r in records {
        bytes(out, r.node.as_bytes());
        varint(out, u64::from(r.attempt.get()));
        varint(out, zigzag(r.finished_at_ms));
        varint(out, zigzag(r.finished_at_ms.wrapping_sub(r.started_at_ms)));
        out.push(outcome_byte(r.outcome));
        for text in [&r.code, &r.message, &r.worker] {
            match text {
                None => varint(out, 0),
                Some(t) => {
                    varint(out, t.len() as u64 + 1);
                    out.extend_from_slice(t.as_bytes());
                }
            }
        }
    }
}

/// `records` packed, or `None` when there are none (the column is then left as it is).
pub fn pack(records: &[AttemptRecord]) -> Option<Vec<u8>> {
    if records.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(records.len() * 32);
    pack_into(&mut out, records);
    Some(out)
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// The records of `instance` packed in `body`, oldest first. Damaged bytes are
/// [`StoreError::Corrupt`], never a panic.
pub fn unpack(instance: InstanceId, body: &[u8]) -> Result<Vec<AttemptRecord>, StoreError> {
    let corrupt = |what: &str| {
        StoreError::Corrupt(format!(
            "the attempt history of instance {instance} is damaged: {what}"
        ))
    };
    let mut rest = body;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let node = text(&mut rest).ok_or_else(|| corrupt("a node name"))?;
        let attempt = read_varint(&mut rest)
            .and_then(|a| u32::try_from(a).ok())
            .and_then(Attempt::new)
            .ok_or_else(|| corrupt("an attempt number"))?;
        let finished_at_ms = read_varint(&mut rest)
            .map(unzigzag)
            .ok_or_else(|| corrupt("an end instant"))?;
        let started_at_ms = read_varint(&mut rest)
            .map(|d| finished_at_ms.wrapping_sub(unzigzag(d)))
            .ok_or_else(|| corrupt("a duration"))?;
        let (&byte, tail) = rest.split_first().ok_or_else(|| corrupt("an outcome"))?;
        let outcome = outcome_of(byte).ok_or_else(|| corrupt("an outcome"))?;
        rest = tail;
        let mut optional = [None, None, None];
        for slot in &mut optional {
            let n = read_varint(&mut rest).ok_or_else(|| corrupt("a text's length"))?;
            if n > 0 {
                *slot = Some(take_text(&mut rest, n - 1).ok_or_else(|| corrupt("a text"))?);
            }
        }
        let [code, message, worker] = optional;
        out.push(AttemptRecord {
            instance,
            node,
            attempt,
            started_at_ms,
            finished_at_ms,
            outcome,
            code,
            message,
            worker,
        });
    }
    Ok(out)
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

    #[test]
    fn records_round_trip_in_order() {
        let records = vec![
            record("pay", 1, Some("DECLINED")),
            record("pay", 2, None),
            record("ship@2", 1, None),
        ];
        let mut body = pack(&records[..1]).unwrap();
        pack_into(&mut body, &records[1..]);
        assert_eq!(unpack(InstanceId::from_u128(7), &body).unwrap(), records);
        assert_eq!(pack(&[]), None);
        assert!(unpack(InstanceId::from_u128(7), &[]).unwrap().is_empty());
    }

    #[test]
    fn every_outcome_has_its_own_byte() {
        let bytes: std::collections::BTreeSet<u8> =
            AttemptOutcome::ALL.into_iter().map(outcome_byte).collect();
        assert_eq!(bytes.len(), AttemptOutcome::ALL.len());
        for o in AttemptOutcome::ALL {
            assert_eq!(outcome_of(outcome_byte(o)), Some(o));
        }
    }

    #[test]
    fn damaged_bytes_are_corrupt_not_a_panic() {
        let body = pack(&[record("pay", 1, Some("X"))]).unwrap();
        for cut in 0..body.len() {
            let r = unpack(InstanceId::from_u128(7), &body[..cut]);
            assert!(cut == 0 || r.is_err(), "cut at {cut} decoded: {r:?}");
        }
        let mut unknown_outcome = body.clone();
        // From the end: worker (1 byte), message (1 + 16), code (1 + 1), then the outcome.
        let at = body.len() - 1 - (1 + "X: é, \u{0} and all".len()) - 2 - 1;
        assert_eq!(body[at], 1, "the outcome byte of Failed");
        unknown_outcome[at] = 7;
        assert!(unpack(InstanceId::from_u128(7), &unknown_outcome).is_err());
        let mut zero_attempt = body.clone();
        zero_attempt[4] = 0; // the attempt number after `\x03pay`
        assert!(unpack(InstanceId::from_u128(7), &zero_attempt).is_err());
    }
}
