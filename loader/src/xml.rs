//! Bytes → a positioned, namespace-resolved element tree, with the hostile-input limits.
//!
//! This is the only place that touches raw XML. It checks the size limit before parsing,
//! UTF-8 validity (with the position of the first bad byte), nesting depth and element
//! counts while streaming, and refuses any DOCTYPE outright — entities are never declared,
//! so they are never expanded. Positions are computed from byte offsets by a forward-only
//! cursor, so the cost stays linear in the input size.
//!
//! It must never panic on input, never allocate more than a small multiple of the input,
//! and never keep subtrees the loader ignores (diagram interchange, documentation, foreign
//! extension namespaces): those are parsed for well-formedness and dropped.

use quick_xml::events::attributes::AttrError;
use quick_xml::events::{BytesStart, Event};
use quick_xml::name::{Namespace, ResolveResult};
use quick_xml::NsReader;

use crate::diag::Diagnostic;
use crate::model::Pos;
use crate::LoadOptions;

pub const BPMN_NS: &str = "http://www.omg.org/spec/BPMN/20100524/MODEL";
pub const Q_NS: &str = "urn:qflow:bpmn:1";
pub const CAMUNDA_NS: &str = "http://camunda.org/schema/1.0/bpmn";
/// Activiti's namespace, which Camunda 7 itself still reads as its own (Camunda began as
/// a fork of Activiti): read as Camunda's, so `activiti:class` is refused as `camunda:class`
/// is, and `activiti:assignee` is a user task's assignee as `camunda:assignee` is.
pub const ACTIVITI_NS: &str = "http://activiti.org/bpmn";
/// Flowable's namespace (also an Activiti fork, with the same attribute and element
/// names): read as Camunda's for the same reason, so nothing of it that runs code loads.
pub const FLOWABLE_NS: &str = "http://flowable.org/bpmn";
pub const ZEEBE_NS: &str = "http://camunda.org/schema/zeebe/1.0";
/// Camunda Modeler's own namespace: `modeler:executionPlatform` on `<definitions>` records
/// the engine a file was drawn for. Only its attributes are read.
pub const MODELER_NS: &str = "http://camunda.org/schema/modeler/1.0";

/// The namespaces the loader tells apart; everything else is `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ns {
    Bpmn,
    Q,
    Camunda,
    Zeebe,
    /// Camunda Modeler's namespace ([`MODELER_NS`]); its elements are dropped.
    Modeler,
    /// A namespace the loader ignores (diagram interchange, other vendors).
    Other,
    /// No namespace (unprefixed attributes, or elements outside any default namespace).
    None,
}

#[derive(Debug, Clone)]
pub struct Attr {
    pub ns: Ns,
    pub local: String,
    pub value: String,
    pub pos: Pos,
}

#[derive(Debug, Clone)]
pub struct Element {
    pub ns: Ns,
    pub local: String,
    /// Position of the `<`.
    pub pos: Pos,
    pub attrs: Vec<Attr>,
    pub children: Vec<Element>,
    /// Concatenated text and CDATA content, unescaped.
    pub text: String,
    /// Position of the first non-blank character of `text` (or of the element if none).
    pub text_pos: Pos,
    /// The text as written (entities not expanded), to map columns inside `text` back to
    /// columns in the file.
    pub text_raw: String,
}

impl Element {
    /// Maps a position inside the trimmed, unescaped `text` (as computed from `text_pos`
    /// counting unescaped characters) back to the file, where entities such as `&gt;`
    /// take several columns. Only the first line needs it: later lines restart at column 1
    /// and are rarely used by expressions.
    pub fn text_file_pos(&self, p: Pos) -> Pos {
        if p.line != self.text_pos.line || p.col < self.text_pos.col {
            return p;
        }
        let wanted = (p.col - self.text_pos.col) as usize;
        let mut raw_cols = 0u32;
        let mut seen = 0usize;
        let mut chars = self.text_raw.trim_start().chars();
        while seen < wanted {
            match chars.next() {
                None | Some('\n') => break,
                Some('&') => {
                    raw_cols += 1;
                    for c in chars.by_ref() {
                        raw_cols += 1;
                        if c == ';' {
                            break;
                        }
                    }
                }
                Some(_) => raw_cols += 1,
            }
            seen += 1;
        }
        Pos {
            line: p.line,
            col: self.text_pos.col + raw_cols,
        }
    }

    /// An attribute without namespace (the BPMN schema's own attributes).
    pub fn attr(&self, local: &str) -> Option<&Attr> {
        self.attrs
            .iter()
            .find(|a| a.ns == Ns::None && a.local == local)
    }

    /// The value of an attribute without namespace.
    pub fn value(&self, local: &str) -> Option<&str> {
        self.attr(local).map(|a| a.value.as_str())
    }

    /// An attribute in namespace `ns`.
    pub fn attr_ns(&self, ns: Ns, local: &str) -> Option<&Attr> {
        self.attrs.iter().find(|a| a.ns == ns && a.local == local)
    }

    /// Child elements in namespace `ns` with this local name.
    pub fn children_named<'a>(
        &'a self,
        ns: Ns,
        local: &'a str,
    ) -> impl Iterator<Item = &'a Element> + 'a {
        self.children
            .iter()
            .filter(move |c| c.ns == ns && c.local == local)
    }

    /// The first child element in namespace `ns` with this local name.
    pub fn child<'a>(&'a self, ns: Ns, local: &'a str) -> Option<&'a Element> {
        self.children_named(ns, local).next()
    }

    pub fn is(&self, ns: Ns, local: &str) -> bool {
        self.ns == ns && self.local == local
    }
}

/// A parsed document: its root element.
#[derive(Debug, Clone)]
pub struct Document {
    pub root: Element,
}

/// Forward-only byte offset → line:col cursor. Columns count characters.
struct Cursor<'a> {
    src: &'a [u8],
    off: usize,
    line: u32,
    col: u32,
}

impl<'a> Cursor<'a> {
    fn new(src: &'a [u8]) -> Self {
        Cursor {
            src,
            off: 0,
            line: 1,
            col: 1,
        }
    }

    fn at(&mut self, target: usize) -> Pos {
        let target = target.min(self.src.len());
        if target < self.off {
            // Requests arrive in document order; going back restarts the scan (rare).
            *self = Cursor::new(self.src);
        }
        for &b in &self.src[self.off..target] {
            if b == b'\n' {
                self.line += 1;
                self.col = 1;
            } else if b & 0xC0 != 0x80 {
                self.col += 1;
            }
        }
        self.off = target;
        Pos {
            line: self.line,
            col: self.col,
        }
    }
}

fn classify_ns(ns: &[u8]) -> Ns {
    match ns {
        b if b == BPMN_NS.as_bytes() => Ns::Bpmn,
        b if b == Q_NS.as_bytes() => Ns::Q,
        b if b == CAMUNDA_NS.as_bytes()
            || b == ACTIVITI_NS.as_bytes()
            || b == FLOWABLE_NS.as_bytes() =>
        {
            Ns::Camunda
        }
        b if b == ZEEBE_NS.as_bytes() => Ns::Zeebe,
        b if b == MODELER_NS.as_bytes() => Ns::Modeler,
        _ => Ns::Other,
    }
}

fn resolved(r: &ResolveResult<'_>) -> Result<Ns, String> {
    match r {
        ResolveResult::Bound(Namespace(ns)) => Ok(classify_ns(ns)),
        ResolveResult::Unbound => Ok(Ns::None),
        ResolveResult::Unknown(p) => Err(format!(
            "the namespace prefix `{}` is not declared",
            String::from_utf8_lossy(p)
        )),
    }
}

/// Parses `src` into a [`Document`], or returns the one fatal diagnostic that stopped it.
pub fn parse(src: &[u8], opts: &LoadOptions) -> Result<Document, Diagnostic> {
    let start = Pos { line: 1, col: 1 };
    if src.len() > opts.max_bytes {
        return Err(Diagnostic::error(
            "Q003",
            start,
            format!(
                "the input is {} bytes; the limit is {} bytes",
                src.len(),
                opts.max_bytes
            ),
        )
        .with_help("split the file, or raise LoadOptions::max_bytes if the model is genuine"));
    }
    let text = match std::str::from_utf8(src) {
        Ok(t) => t,
        Err(e) => {
            let pos = Cursor::new(src).at(e.valid_up_to());
            return Err(Diagnostic::error(
                "Q005",
                pos,
                format!("invalid UTF-8 at byte offset {}", e.valid_up_to()),
            )
            .with_help("save the file as UTF-8"));
        }
    };
    if let Some((off, c)) = first_forbidden(text) {
        let pos = Cursor::new(src).at(off);
        return Err(Diagnostic::error(
            "Q008",
            pos,
            format!("{} is a character XML does not allow", char_name(c)),
        )
        .with_help(FORBIDDEN_HELP));
    }
    Parser::new(text, opts).run()
}

const FORBIDDEN_HELP: &str = "remove it: XML 1.0 allows no control character but tab, line \
     feed and carriage return, raw or as a character reference (`&#1;`)";

/// XML 1.0's `Char` production: what a document may contain, raw or referenced.
fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
}

/// `U+001B` — never the character itself, which may be a terminal escape.
fn char_name(c: char) -> String {
    format!("U+{:04X}", c as u32)
}

/// The first character of `s` that XML forbids, with its byte offset.
///
/// In UTF-8 such a character starts either with an ASCII control byte or with `0xEF`
/// (U+FFFE and U+FFFF; surrogates cannot occur in a `str`), and both are lead bytes, so
/// only there is a character decoded. Each 64-byte chunk is first tested without an early
/// exit, which the compiler vectorizes: decoding every character instead made this scan
/// the loader's most expensive step on ordinary models (docs/performance.md, "Loader").
fn first_forbidden(s: &str) -> Option<(usize, char)> {
    let suspect = |b: u8| b == 0xEF || (b < 0x20 && b != b'\t' && b != b'\n' && b != b'\r');
    let bytes = s.as_bytes();
    let mut from = 0;
    while from < bytes.len() {
        let chunk = &bytes[from..bytes.len().min(from + 64)];
        if !chunk.iter().fold(false, |any, &b| any | suspect(b)) {
            from += chunk.len();
            continue;
        }
        let at = from + chunk.iter().position(|&b| suspect(b)).unwrap_or(0);
        let c = s[at..].chars().next()?;
        if !is_xml_char(c) {
            return Some((at, c));
        }
        from = at + c.len_utf8();
    }
    None
}

/// A character XML forbids that an unescaped text or attribute value holds: it can only
/// have come from a character reference (raw ones are refused before parsing).
fn forbidden_in(value: &str) -> Option<char> {
    first_forbidden(value).map(|(_, c)| c)
}

/// `&#0;`, which quick-xml refuses itself; reported as the other forbidden references are.
fn is_nul_reference(err: &quick_xml::Error) -> bool {
    use quick_xml::escape::{EscapeError, ParseCharRefError};
    matches!(
        err,
        quick_xml::Error::Escape(EscapeError::InvalidCharRef(
            ParseCharRefError::IllegalCharacter(0)
        ))
    )
}

/// Q008 for a character reference to `c` in `place` (`attribute `id``, `this text`).
fn forbidden_reference(pos: Pos, place: &str, c: char) -> Diagnostic {
    Diagnostic::error(
        "Q008",
        pos,
        format!(
            "a character reference in {place} stands for {}, a character XML does not allow",
            char_name(c)
        ),
    )
    .with_help(FORBIDDEN_HELP)
}

struct Parser<'a> {
    text: &'a str,
    base: usize,
    reader: NsReader<&'a [u8]>,
    cursor: Cursor<'a>,
    opts: &'a LoadOptions,
    /// Open elements that are kept; `None` marks an open element inside a skipped subtree.
    stack: Vec<Option<Element>>,
    /// Names and positions of every open element, for truncation messages.
    open: Vec<(String, Pos)>,
    root: Option<Element>,
    elements: usize,
    attributes: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str, opts: &'a LoadOptions) -> Self {
        let bytes = text.as_bytes();
        let mut reader = NsReader::from_reader(bytes);
        let cfg = reader.config_mut();
        cfg.check_end_names = true;
        cfg.expand_empty_elements = false;
        Parser {
            text,
            base: bytes.as_ptr() as usize,
            reader,
            cursor: Cursor::new(bytes),
            opts,
            stack: Vec::new(),
            open: Vec::new(),
            root: None,
            elements: 0,
            attributes: 0,
        }
    }

    fn err(&mut self, code: &'static str, off: usize, msg: impl Into<String>) -> Diagnostic {
        let pos = self.cursor.at(off);
        Diagnostic::error(code, pos, msg)
    }

    /// Offset of a slice borrowed from the input, or `fallback` if it is not borrowed.
    fn offset_of(&self, s: &[u8], fallback: usize) -> usize {
        let p = s.as_ptr() as usize;
        if p >= self.base && p <= self.base + self.text.len() {
            p - self.base
        } else {
            fallback
        }
    }

    fn run(mut self) -> Result<Document, Diagnostic> {
        loop {
            let off = self.reader.buffer_position() as usize;
            let event = match self.reader.read_resolved_event() {
                Ok((ns, ev)) => (resolved(&ns), ev),
                Err(e) => {
                    let at = self.reader.error_position() as usize;
                    return Err(self
                        .err("Q001", at, format!("malformed XML: {e}"))
                        .with_help("fix the XML syntax at this position"));
                }
            };
            match event {
                (ns, Event::Start(e)) => self.open_element(ns, &e, off, false)?,
                (ns, Event::Empty(e)) => self.open_element(ns, &e, off, true)?,
                (_, Event::End(_)) => self.close_element(),
                (_, Event::Text(t)) => {
                    let raw: &[u8] = t.as_ref();
                    if self.stack.is_empty() {
                        if !raw.iter().all(u8::is_ascii_whitespace) {
                            return Err(self.err(
                                "Q001",
                                off,
                                "malformed XML: text outside the root element",
                            ));
                        }
                        continue;
                    }
                    if !matches!(self.stack.last(), Some(Some(_))) {
                        continue;
                    }
                    let lead = raw.len() - raw.trim_ascii_start().len();
                    let at = self.offset_of(raw, off) + lead;
                    let s = match t.unescape() {
                        Ok(s) => s.into_owned(),
                        Err(e) if is_nul_reference(&e) => {
                            let pos = self.cursor.at(at);
                            return Err(forbidden_reference(pos, "this text", '\0'));
                        }
                        Err(e) => {
                            return Err(self
                                .err("Q001", at, format!("malformed XML text: {e}"))
                                .with_help(
                                    "only the five predefined entities and character references are allowed",
                                ))
                        }
                    };
                    if let Some(c) = forbidden_in(&s) {
                        let pos = self.cursor.at(at);
                        return Err(forbidden_reference(pos, "this text", c));
                    }
                    let raw = String::from_utf8_lossy(raw).into_owned();
                    self.push_text(&s, &raw, at, lead < raw.len());
                }
                (_, Event::CData(c)) => {
                    let raw: &[u8] = c.as_ref();
                    let at = self.offset_of(raw, off);
                    let s = String::from_utf8_lossy(raw).into_owned();
                    if matches!(self.stack.last(), Some(Some(_))) {
                        self.push_text(&s, &s, at, !s.trim().is_empty());
                    }
                }
                (_, Event::DocType(_)) => {
                    return Err(self
                        .err(
                            "Q002",
                            off,
                            "a DOCTYPE declaration is present; DTDs and entity declarations are refused and never expanded",
                        )
                        .with_help("remove the <!DOCTYPE ...> declaration"));
                }
                (_, Event::Eof) => break,
                (_, Event::Decl(_) | Event::PI(_) | Event::Comment(_)) => {}
            }
        }
        if let Some((name, pos)) = self.open.last().cloned() {
            let end = self.text.len();
            return Err(self
                .err(
                    "Q001",
                    end,
                    format!(
                        "unexpected end of input: <{name}> opened at {pos} is never closed (truncated file?)"
                    ),
                )
                .with_help("the file looks truncated; save it again from the modeler"));
        }
        match self.root.take() {
            Some(root) => Ok(Document { root }),
            None => Err(self.err("Q001", self.text.len(), "the input contains no XML element")),
        }
    }

    fn push_text(&mut self, s: &str, raw: &str, at: usize, has_content: bool) {
        let pos = if has_content {
            Some(self.cursor.at(at))
        } else {
            None
        };
        if let Some(Some(el)) = self.stack.last_mut() {
            // `text_pos` still at the element's own `<` means no content has arrived yet
            // (content always sits after the start tag). Checking that instead of
            // trimming the accumulated text keeps an element with very many
            // whitespace-separated children linear, not quadratic.
            if el.text_pos == el.pos {
                if let Some(p) = pos {
                    el.text_pos = p;
                }
            }
            el.text.push_str(s);
            el.text_raw.push_str(raw);
        }
    }

    fn open_element(
        &mut self,
        ns: Result<Ns, String>,
        e: &BytesStart<'_>,
        off: usize,
        empty: bool,
    ) -> Result<(), Diagnostic> {
        let pos = self.cursor.at(off);
        let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
        if self.root.is_some() {
            return Err(Diagnostic::error(
                "Q001",
                pos,
                format!("malformed XML: <{name}> after the end of the root element"),
            ));
        }
        self.elements += 1;
        if self.elements > self.opts.max_elements {
            return Err(Diagnostic::error(
                "Q004",
                pos,
                format!("the file has more than {} elements", self.opts.max_elements),
            ));
        }
        if self.open.len() + 1 > self.opts.max_depth {
            return Err(Diagnostic::error(
                "Q004",
                pos,
                format!("elements nest deeper than {} levels", self.opts.max_depth),
            )
            .with_help("real models nest a few dozen levels at most; check the file"));
        }
        let ens = ns.map_err(|m| Diagnostic::error("Q001", pos, m))?;
        let local = String::from_utf8_lossy(e.local_name().as_ref()).into_owned();
        let parent_kept = self.stack.is_empty() || matches!(self.stack.last(), Some(Some(_)));
        // The root is always kept so that the builder can say what it is.
        let keep = self.stack.is_empty() || (parent_kept && keep_element(ens, &local));
        let el = if keep {
            Some(Element {
                ns: ens,
                local,
                pos,
                attrs: self.attributes(e, off, pos)?,
                children: Vec::new(),
                text: String::new(),
                text_pos: pos,
                text_raw: String::new(),
            })
        } else {
            // Still check the attributes for well-formedness, without keeping them.
            for (n, a) in e.attributes().with_checks(true).enumerate() {
                if let Err(err) = a {
                    return Err(self.attr_error(e, off, &err));
                }
                if n >= self.opts.max_attributes {
                    return Err(Diagnostic::error(
                        "Q004",
                        pos,
                        format!(
                            "an element has more than {} attributes",
                            self.opts.max_attributes
                        ),
                    ));
                }
            }
            None
        };
        self.stack.push(el);
        self.open.push((name, pos));
        if empty {
            self.close_element();
        }
        Ok(())
    }

    /// Q001 for a malformed attribute of the start tag `e` whose `<` is at `off`, with the
    /// caret under the attribute it is about. quick-xml counts its positions from the byte
    /// after `<` and gives the place the syntax broke: a duplicate's own name, but for a
    /// missing `=` or value the token after the name, which is walked back to the name.
    fn attr_error(&mut self, e: &BytesStart<'_>, off: usize, err: &AttrError) -> Diagnostic {
        let tag: &[u8] = e;
        let base = self.offset_of(tag, off + 1);
        let (at, what, help) = match *err {
            AttrError::Duplicated(at, first) => {
                let first = self.cursor.at(base + first);
                let name = name_at(tag, at);
                let what = format!("`{name}` appears twice in one element (first at {first})");
                (at, what, "keep one of them")
            }
            AttrError::ExpectedEq(at) => {
                let at = name_before(tag, at);
                let what = format!("`{}` has no `=` and value", name_at(tag, at));
                (at, what, "write the attribute as name=\"value\"")
            }
            AttrError::ExpectedValue(at) => {
                let at = name_before(tag, at);
                let what = format!("`{}` has `=` but no value", name_at(tag, at));
                (at, what, "write the attribute as name=\"value\"")
            }
            AttrError::UnquotedValue(at) => {
                let at = name_before(tag, at);
                let what = format!("the value of `{}` is not in quotes", name_at(tag, at));
                (at, what, "put the value in quotes: name=\"value\"")
            }
            AttrError::ExpectedQuote(at, quote) => {
                let what = format!("a value has no closing `{}`", char::from(quote));
                (at, what, "close the value with the quote it opens with")
            }
        };
        self.err(
            "Q001",
            base + at.min(tag.len()),
            format!("malformed XML attribute: {what}"),
        )
        .with_help(help)
    }

    fn attributes(
        &mut self,
        e: &BytesStart<'_>,
        off: usize,
        el_pos: Pos,
    ) -> Result<Vec<Attr>, Diagnostic> {
        let mut out = Vec::new();
        for (n, a) in e.attributes().with_checks(true).enumerate() {
            let a = match a {
                Ok(a) => a,
                Err(err) => return Err(self.attr_error(e, off, &err)),
            };
            if n >= self.opts.max_attributes {
                return Err(Diagnostic::error(
                    "Q004",
                    el_pos,
                    format!(
                        "an element has more than {} attributes",
                        self.opts.max_attributes
                    ),
                ));
            }
            let key = a.key;
            let raw_key = key.as_ref();
            if raw_key == b"xmlns" || raw_key.starts_with(b"xmlns:") {
                continue;
            }
            let at = self.offset_of(raw_key, off);
            let pos = self.cursor.at(at);
            self.attributes += 1;
            if self.attributes > self.opts.max_total_attributes {
                return Err(Diagnostic::error(
                    "Q004",
                    pos,
                    format!(
                        "the file has more than {} attributes",
                        self.opts.max_total_attributes
                    ),
                ));
            }
            let (rr, local) = self.reader.resolve_attribute(key);
            let ns = resolved(&rr).map_err(|m| Diagnostic::error("Q001", pos, m))?;
            let local = String::from_utf8_lossy(local.as_ref()).into_owned();
            let value = match a.unescape_value() {
                Ok(v) => v.into_owned(),
                Err(err) if is_nul_reference(&err) => {
                    return Err(forbidden_reference(
                        pos,
                        &format!("attribute `{local}`"),
                        '\0',
                    ))
                }
                Err(err) => {
                    return Err(Diagnostic::error(
                        "Q001",
                        pos,
                        format!("malformed XML attribute value: {err}"),
                    ))
                }
            };
            if let Some(c) = forbidden_in(&value) {
                return Err(forbidden_reference(pos, &format!("attribute `{local}`"), c));
            }
            out.push(Attr {
                ns,
                local,
                value,
                pos,
            });
        }
        Ok(out)
    }

    fn close_element(&mut self) {
        self.open.pop();
        let Some(top) = self.stack.pop() else { return };
        let Some(el) = top else { return };
        match self.stack.last_mut() {
            Some(Some(parent)) => parent.children.push(el),
            Some(None) => {}
            None => self.root = Some(el),
        }
    }
}

/// Most characters of an attribute name quoted in a message: a hostile file may write
/// one of megabytes.
const QUOTED_NAME_CHARS_MAX: usize = 64;

/// The attribute name starting at `at` in a start tag's bytes (up to `=` or a space),
/// shortened to [`QUOTED_NAME_CHARS_MAX`] characters.
fn name_at(tag: &[u8], at: usize) -> String {
    let rest = tag.get(at..).unwrap_or_default();
    let end = rest
        .iter()
        .position(|&b| b == b'=' || b.is_ascii_whitespace())
        .unwrap_or(rest.len());
    let name = String::from_utf8_lossy(&rest[..end]);
    match name.char_indices().nth(QUOTED_NAME_CHARS_MAX) {
        Some((cut, _)) => format!("{}…", &name[..cut]),
        None => name.into_owned(),
    }
}

/// The start of the attribute name that the token at `at` follows: back over spaces, an
/// `=` and spaces, then over the name (`name = value`, `name another`, `name` at the end).
fn name_before(tag: &[u8], at: usize) -> usize {
    let mut i = at.min(tag.len());
    let skip_spaces = |i: &mut usize| {
        while *i > 0 && tag[*i - 1].is_ascii_whitespace() {
            *i -= 1;
        }
    };
    skip_spaces(&mut i);
    if i > 0 && tag[i - 1] == b'=' {
        i -= 1;
        skip_spaces(&mut i);
    }
    while i > 0 && !tag[i - 1].is_ascii_whitespace() && tag[i - 1] != b'=' {
        i -= 1;
    }
    i
}

/// Which elements the tree keeps. Foreign namespaces (diagram interchange, other vendors)
/// and BPMN documentation are dropped with their whole subtree.
fn keep_element(ns: Ns, local: &str) -> bool {
    match ns {
        Ns::Bpmn => !matches!(local, "documentation" | "BPMNDiagram"),
        Ns::Q | Ns::Camunda | Ns::Zeebe => true,
        Ns::Modeler | Ns::Other | Ns::None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<Document, Diagnostic> {
        parse(s.as_bytes(), &LoadOptions::default())
    }

    #[test]
    fn positions_count_characters_and_lines() {
        let doc = parse_str(&format!(
            "<?xml version=\"1.0\"?>\n<d xmlns=\"{BPMN_NS}\">\n  <é/><process  id=\"p\"/>\n</d>"
        ))
        .unwrap();
        let p = &doc.root.children[1];
        assert_eq!(p.local, "process");
        assert_eq!(p.pos, Pos { line: 3, col: 7 });
        assert_eq!(p.attr("id").unwrap().pos, Pos { line: 3, col: 17 });
    }

    #[test]
    fn foreign_subtrees_are_dropped() {
        let doc = parse_str(&format!(
            "<d xmlns=\"{BPMN_NS}\" xmlns:x=\"urn:x\"><x:a><process/></x:a><documentation>t</documentation></d>"
        ))
        .unwrap();
        assert!(doc.root.children.is_empty());
    }

    #[test]
    fn text_keeps_its_position_and_unescapes() {
        let doc = parse_str(&format!("<d xmlns=\"{BPMN_NS}\"><c>\n   a &lt; 3</c></d>")).unwrap();
        let c = &doc.root.children[0];
        assert_eq!(c.text.trim(), "a < 3");
        assert_eq!(c.text_pos, Pos { line: 2, col: 4 });
    }

    #[test]
    fn the_byte_scan_finds_what_the_char_production_forbids() {
        let reference = |s: &str| s.char_indices().find(|(_, c)| !is_xml_char(*c));
        let edges = [
            '\0',
            '\u{1}',
            '\t',
            '\n',
            '\u{b}',
            '\r',
            '\u{1f}',
            ' ',
            '\u{7f}',
            'é',
            '\u{d7ff}',
            '\u{e000}',
            '\u{efff}',
            '\u{fefe}',
            '\u{fffd}',
            '\u{fffe}',
            '\u{ffff}',
            '\u{10000}',
            '\u{10ffff}',
        ];
        let mut cases = vec![String::new()];
        for a in edges {
            for b in edges {
                cases.push(format!("x{a}y{b}"));
                cases.push(format!("{a}{b}z"));
                // Across and inside the scan's 64-byte chunks.
                for pad in [62, 63, 64, 127, 130] {
                    cases.push(format!("{}{a}{b}", "p".repeat(pad)));
                }
            }
        }
        for s in &cases {
            assert_eq!(first_forbidden(s), reference(s), "{s:?}");
        }
    }

    /// Issue 27, point 3: a malformed attribute is placed at its name, not at the `<` of
    /// its element, whether the element is kept or dropped (foreign).
    #[test]
    fn a_malformed_attribute_is_placed_at_its_name() {
        let d = format!("<d xmlns=\"{BPMN_NS}\" xmlns:x=\"urn:x\">\n");
        for (tag, col, message) in [
            (
                "<process id=\"p\" a=\"1\" a=\"2\"/>",
                23,
                "`a` appears twice in one element (first at 2:17)",
            ),
            (
                "<x:n id=\"p\" a=\"1\"  a=\"2\"/>",
                20,
                "`a` appears twice in one element (first at 2:13)",
            ),
            (
                "<process id=\"p\" name/>",
                17,
                "`name` has no `=` and value",
            ),
            (
                "<process id=\"p\" name  other=\"x\"/>",
                17,
                "`name` has no `=` and value",
            ),
            (
                "<process id=\"p\" name = />",
                17,
                "`name` has `=` but no value",
            ),
            (
                "<process id=\"p\" name=v/>",
                17,
                "the value of `name` is not in quotes",
            ),
        ] {
            let err = parse_str(&format!("{d}{tag}</d>")).unwrap_err();
            assert_eq!(err.code, "Q001", "{tag}");
            assert_eq!(err.pos, Pos { line: 2, col }, "{tag}: {}", err.message);
            assert_eq!(
                err.message,
                format!("malformed XML attribute: {message}"),
                "{tag}"
            );
        }
        let long = "n".repeat(200);
        let err = parse_str(&format!("{d}<process {long}/></d>")).unwrap_err();
        assert!(
            err.message.contains(&format!("`{}…`", "n".repeat(64))),
            "{}",
            err.message
        );
    }

    #[test]
    fn undeclared_prefix_is_an_error() {
        let err = parse_str("<a:b/>").unwrap_err();
        assert_eq!(err.code, "Q001");
    }
}
