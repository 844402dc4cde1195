//! CEL expressions for conditions and mappings (SPEC L3).

use crate::model::Pos;

/// A compiled expression with its source text and position.
#[derive(Debug, Clone)]
pub struct Expression {
    pub source: String,
    pub pos: Pos,
}
