//! Byte comparison of a fresh run against the committed golden files, reporting the first
//! place they part so a failure names the case, the step and the byte offset at once.
//!
//! This module only compares; it never writes. Blessing lives in [`crate::bless`].

use std::fmt;

/// Why a case no longer matches its committed bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// The run produced a different number of steps than there are committed files.
    StepCount { committed: usize, produced: usize },
    /// Step `step` (1-based) differs; `offset` is the first differing byte (or the length
    /// of the shorter side when one is a prefix of the other).
    Bytes {
        step: usize,
        offset: usize,
        committed: Option<u8>,
        produced: Option<u8>,
        committed_len: usize,
        produced_len: usize,
    },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::StepCount {
                committed,
                produced,
            } => write!(
                f,
                "the run produced {produced} steps, {committed} are committed"
            ),
            Mismatch::Bytes {
                step,
                offset,
                committed,
                produced,
                committed_len,
                produced_len,
            } => write!(
                f,
                "step {step:04}: first differing byte at offset {offset} \
                 (committed {}, produced {}; lengths {committed_len} vs {produced_len})",
                byte_text(*committed),
                byte_text(*produced),
            ),
        }
    }
}

fn byte_text(b: Option<u8>) -> String {
    match b {
        Some(b) => format!("0x{b:02x}"),
        None => "end of file".to_owned(),
    }
}

/// The offset of the first byte where `a` and `b` differ, or `None` when they are equal.
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => Some(i),
        None if a.len() == b.len() => None,
        None => Some(a.len().min(b.len())),
    }
}

/// Compares committed step files with produced ones, step by step; the first mismatch in
/// step order wins because later steps usually differ only as a consequence of it.
pub fn compare(committed: &[Vec<u8>], produced: &[Vec<u8>]) -> Option<Mismatch> {
    for (i, (c, p)) in committed.iter().zip(produced).enumerate() {
        if let Some(offset) = first_difference(c, p) {
            return Some(Mismatch::Bytes {
                step: i + 1,
                offset,
                committed: c.get(offset).copied(),
                produced: p.get(offset).copied(),
                committed_len: c.len(),
                produced_len: p.len(),
            });
        }
    }
    (committed.len() != produced.len()).then_some(Mismatch::StepCount {
        committed: committed.len(),
        produced: produced.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_runs_do_not_mismatch() {
        let steps = vec![vec![1, 2, 3], vec![4]];
        assert_eq!(compare(&steps, &steps.clone()), None);
    }

    #[test]
    fn the_first_differing_byte_of_the_first_differing_step_is_named() {
        let committed = vec![vec![1, 2, 3], vec![4, 5, 6], vec![7]];
        let produced = vec![vec![1, 2, 3], vec![4, 9, 6], vec![8]];
        let m = compare(&committed, &produced).unwrap();
        assert_eq!(
            m.to_string(),
            "step 0002: first differing byte at offset 1 (committed 0x05, produced 0x09; \
             lengths 3 vs 3)"
        );
    }

    #[test]
    fn a_prefix_differs_at_the_shorter_length() {
        let m = compare(&[vec![1, 2]], &[vec![1, 2, 3]]).unwrap();
        assert_eq!(
            m,
            Mismatch::Bytes {
                step: 1,
                offset: 2,
                committed: None,
                produced: Some(3),
                committed_len: 2,
                produced_len: 3
            }
        );
    }

    #[test]
    fn extra_or_missing_steps_are_a_mismatch() {
        let m = compare(&[vec![1]], &[vec![1], vec![2]]).unwrap();
        assert_eq!(
            m,
            Mismatch::StepCount {
                committed: 1,
                produced: 2
            }
        );
    }
}
