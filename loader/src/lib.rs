//! qflow's loader: BPMN 2.0 XML with the `q:` extension namespace in, validated and
//! immutable [`model::Definition`]s out (SPEC §2, L1–L8).
//!
//! The loader never panics on input and never accepts a model silently: every problem
//! is a positioned [`diag::Diagnostic`] with a stable code, and every diagnostic is
//! collected (sorted by position) rather than stopping at the first. It never expands an
//! entity, never follows a reference outside the bytes it is given, and never does I/O.
//!
//! Pipeline: [`xml`] (bytes → positioned element tree, hostile-input limits) →
//! `build` (tree → model, element support, vendor dialects, expressions; split into
//! `build/{events,tasks,flows,vendor,extensions}.rs` by concern) → `validate` (graph and
//! design rules of L6) → `classify` (L7).

use sha2::{Digest, Sha256};

pub mod cron;
pub mod diag;
pub mod explain;
pub mod expr;
pub mod feel;
pub mod iso8601;
pub mod model;
pub mod xml;

mod build;
mod classify;
mod rules;
mod validate;

pub use diag::{Diagnostic, Severity};
pub use expr::{EvalError, ExprError, Expression};
pub use model::Definition;
pub use rules::rules;

/// Limits applied while loading. Every limit exists so that hostile input costs bounded
/// time and memory; the defaults are far above any real model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadOptions {
    /// Largest input accepted, in bytes, checked before parsing starts.
    /// Default: 16 MiB (the largest corpus model is under 200 KiB).
    pub max_bytes: usize,
    /// Deepest element nesting accepted. Default: 256 (real models stay under 20).
    pub max_depth: usize,
    /// Longest condition or mapping expression, in bytes. Default: 4096.
    pub max_expr_len: usize,
    /// Most elements accepted in one file (bounds the tree's memory on inputs made of
    /// tiny elements). Default: 200,000 (the largest corpus model has about 3,000).
    pub max_elements: usize,
    /// Most attributes on one element. Default: 256.
    pub max_attributes: usize,
    /// Most attributes kept in one file, over all elements (bounds the tree's memory on
    /// inputs made of attributes). Default: 500,000.
    pub max_total_attributes: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            max_bytes: 16 << 20,
            max_depth: 256,
            max_expr_len: 4096,
            max_elements: 200_000,
            max_attributes: 256,
            max_total_attributes: 500_000,
        }
    }
}

/// A successful load: one definition per executable process, plus warnings.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub definitions: Vec<Definition>,
    pub warnings: Vec<Diagnostic>,
}

/// Misuse of the loader's API (as opposed to a bad model, which is a [`Diagnostic`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Expr(#[from] ExprError),
    #[error(transparent)]
    Eval(#[from] EvalError),
}

/// Loads every executable process of one BPMN file.
///
/// `Err` carries all diagnostics (errors and warnings), sorted by position, and at least
/// one of them is an error. Which processes load: every `process` whose `isExecutable`
/// is not `"false"`; if the file has none, every process that has flow nodes (a warning
/// says so — modelers mark everything non-executable by default). Processes without any
/// flow node (black-box pools) are skipped.
pub fn load(src: &[u8], opts: &LoadOptions) -> Result<Loaded, Vec<Diagnostic>> {
    let mut diags = Vec::new();
    let definitions = match xml::parse(src, opts) {
        Ok(doc) => {
            // Hashed only after the size limit passed: hashing is the costliest step on
            // a huge input.
            let content_hash = hex::encode(Sha256::digest(src));
            let built = build::build(&doc, &content_hash, opts, &mut diags);
            built
                .into_iter()
                .map(|b| {
                    let mut def = b.def;
                    validate::validate(&def, &b.meta, &mut diags);
                    def.class = classify::classify(&def);
                    model::expand_multi_instances(&mut def.process);
                    def
                })
                .collect()
        }
        Err(d) => {
            diags.push(d);
            Vec::new()
        }
    };
    for d in diags.iter_mut().filter(|d| d.help.is_none()) {
        d.help = rules::default_help(d.code).map(str::to_string);
    }
    diags.sort_by(|a, b| (a.pos, a.code).cmp(&(b.pos, b.code)));
    diags.dedup();
    if diags.iter().any(Diagnostic::is_error) {
        Err(diags)
    } else {
        Ok(Loaded {
            definitions,
            warnings: diags,
        })
    }
}

/// [`load`] with [`LoadOptions::default`].
pub fn load_str(src: &str) -> Result<Loaded, Vec<Diagnostic>> {
    load(src.as_bytes(), &LoadOptions::default())
}
