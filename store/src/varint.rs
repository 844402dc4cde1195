//! LEB128 varints and zigzag, the integers of qflow's packed formats (the attempt history,
//! [`crate::history`], and the SQLite store's journal bodies).

/// A signed integer as an unsigned one, small magnitudes staying small.
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag`].
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Appends `v` as an LEB128 varint (at most ten bytes).
pub fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// An LEB128 varint of at most ten bytes whose value fits a `u64`.
pub fn read_varint(rest: &mut &[u8]) -> Option<u64> {
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
