//! Graph and design rules of L6 over a built definition. Work in progress.

use crate::diag::Diagnostic;
use crate::model::Definition;

pub(crate) fn validate(_def: &Definition, _diags: &mut Vec<Diagnostic>) {}
