//! The golden snapshot corpus (SPEC G1–G2).
