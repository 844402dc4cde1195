//! Element tree → definition model (L1, L2, L4, L5, L8). Work in progress.

use crate::diag::Diagnostic;
use crate::model::Definition;
use crate::xml::Document;
use crate::LoadOptions;

pub(crate) fn build(
    doc: &Document,
    _content_hash: &str,
    _opts: &LoadOptions,
    diags: &mut Vec<Diagnostic>,
) -> Vec<Definition> {
    diags.push(Diagnostic::error(
        "Q006",
        doc.root.pos,
        "the model builder is not implemented yet",
    ));
    Vec::new()
}
