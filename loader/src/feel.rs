//! Zeebe FEEL conditions (`=expr`) and Camunda 7 / Activiti / Flowable JUEL conditions
//! (`${expr}`) → CEL, for the subset that maps one-to-one (L8).
//!
//! FEEL accepted: literals (numbers, strings, `true`, `false`, `null`), variable paths
//! (`order.total`), comparisons (`=`, `!=`, `<`, `<=`, `>`, `>=`), `and`, `or`, `not(…)`,
//! parentheses, `+` / `-` between variable paths and whole-number literals
//! (`loopAmount + 1`), `+` between strings and paths holding strings (concatenation),
//! list literals (`["ubuntu", "windows"]`, the same list in CEL; a multi-instance input
//! collection is often one), context literals (`{total: a, "the label": b}`, a CEL map),
//! `if c then a else b` (CEL's `c ? a : b`) and the quantifiers `some x in xs satisfies
//! c` / `every x in xs satisfies c` (CEL's `exists` / `all` macros), the functions
//! `contains`, `starts with`, `ends with`, `count` and `string join` (a function of
//! `crate::expr::feel_support`), list filters and indexes
//! (`items[type = "x"]`, `items[item.price > 10]`, `items[1]`, `items[-1].total`: CEL's
//! `filter` macro and indexing, DMN 1.3 §10.3.2.5, see `P::filter`) and Camunda's
//! `is defined(path)` (see `P::is_defined` and `crate::expr::feel_support`).
//! Everything else — other arithmetic, decimal literals in a sum, other function calls,
//! ranges, `in` outside a quantifier, `between`, `for`, names with spaces, a filter whose
//! condition might be a number, a projection (`items[x > 1].price`) — is refused with a
//! message, never approximated; the messages of the filters and `is defined` give the
//! offset in the FEEL text. Each added construct
//! gives FEEL's value or fails the evaluation where FEEL would give another one (null,
//! mostly): the functions below and `docs/vendor-mappings.md` say where.
//!
//! Sums are exact or fail, never a different value: FEEL numbers are decimals, CEL's
//! `int` and `double` are not, and JSON integers reach CEL as `int` (`crate::expr`). So a
//! sum is translated under a guard that every path in it holds an `int`: `a + 1` becomes
//! `(type(a) == int) ? (a + 1) : feel_sum_needs_whole_numbers()`. On whole numbers CEL's
//! checked `int` arithmetic gives FEEL's value; a decimal, a string, null or a value past
//! the 64-bit range fails the evaluation (`EXPRESSION_FAILED`) where FEEL would give a
//! value (a decimal sum, or null) — the one function in the else branch does not exist,
//! so the failure names it.
//!
//! JUEL accepted, inside one `${…}` (or `#{…}`) that is the whole condition: the same
//! literals (strings in single or double quotes), variable paths, comparisons (`==`,
//! `!=`, `<`, `<=`, `>`, `>=` and their word forms `eq`, `ne`, `lt`, `le`, `gt`, `ge`),
//! `&&` / `and`, `||` / `or`, `!` / `not`, and parentheses. Refused: arithmetic, method
//! calls (`execution.getVariable(…)`, `a.equals(b)`), `empty`, indexing, the ternary
//! operator, and text around the `${…}`. Two differences stay, documented for authors
//! (`docs/diagnostics.md`, Q202): JUEL coerces the operands of a comparison, CEL does not
//! — `==` between values of different types is false there (`${approved == 'true'}` with
//! a boolean `approved`), `!=` true, and an ordering (`<`) fails the instance with
//! `EXPRESSION_FAILED`; and a missing map key reads as null in JUEL but fails in CEL.
//!
//! This is a translator, not an evaluator: the result is CEL text that the CEL compiler
//! then checks.

/// Most nested parentheses (and JUEL negations) accepted (mirrors the CEL bracket cap).
const MAX_NESTING: usize = 16;

/// Most terms in one FEEL sum (`a + b - 1` has three).
const MAX_SUM_TERMS: usize = 8;

/// Longest FEEL or JUEL text translated, in bytes: the translation is checked against
/// the loader's expression length cap only after it is made, so the input is bounded
/// first (a 4 MiB model can otherwise hold one condition of millions of tokens).
pub const SOURCE_BYTES_MAX: usize = 16 * 1024;

/// Which foreign language a condition is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Feel,
    Juel,
}

impl Dialect {
    fn name(self) -> &'static str {
        match self {
            Dialect::Feel => "FEEL",
            Dialect::Juel => "JUEL",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(String),
    Str(String),
    Path(String),
    Op(&'static str),
    And,
    Or,
    Not,
    /// JUEL's prefix negation, `!` or `not`.
    Bang,
    /// FEEL's binary `+` or `-`.
    Arith(char),
    LParen,
    RParen,
    /// FEEL's list literal: `[`, `,`, `]` (only as a list of values, never an index or
    /// a filter).
    LBracket,
    Comma,
    RBracket,
    True,
    False,
    Null,
    /// FEEL's `if`, `then`, `else`, `some`, `every`, `in`, `satisfies`.
    Kw(&'static str),
    /// FEEL's context literal: `{`, `:`, `}`.
    LBrace,
    Colon,
    RBrace,
    /// FEEL's path after an index, `.total` in `orders[1].total` (without the dot).
    Field(String),
}

/// Translates a FEEL expression (without the leading `=`) into CEL source.
/// The error names the first construct outside the subset and its character offset.
pub fn feel_to_cel(src: &str) -> Result<String, String> {
    translate(src, Dialect::Feel)
}

/// Translates a JUEL condition, `${…}` or `#{…}` included, into CEL source. The error
/// names the first construct outside the subset.
pub fn juel_to_cel(text: &str) -> Result<String, String> {
    let t = text.trim();
    let inner = t
        .strip_prefix("${")
        .or_else(|| t.strip_prefix("#{"))
        .and_then(|rest| rest.strip_suffix('}'))
        .ok_or_else(|| "a JUEL condition must be one `${…}` and nothing around it".to_string())?;
    if inner.contains("${") || inner.contains("#{") || inner.contains('}') {
        return Err("a JUEL condition must be one `${…}` and nothing around it".to_string());
    }
    translate(inner, Dialect::Juel)
}

fn translate(src: &str, dialect: Dialect) -> Result<String, String> {
    if src.len() > SOURCE_BYTES_MAX {
        return Err(format!(
            "the {} text is {} bytes long; at most {SOURCE_BYTES_MAX} are translated",
            dialect.name(),
            src.len()
        ));
    }
    let (toks, offsets) = lex(src, dialect)?;
    let taken: Vec<String> = toks
        .iter()
        .filter_map(|t| match t {
            Tok::Path(p) => Some(p.split('.').next().unwrap_or(p).to_owned()),
            _ => None,
        })
        .collect();
    let mut p = P {
        toks: &toks,
        offsets: &offsets,
        end: src.len(),
        i: 0,
        depth: 0,
        dialect,
        scopes: Vec::new(),
        taken,
        items: 0,
        boolean: false,
    };
    let out = p.or()?;
    if p.i != toks.len() {
        return Err(format!(
            "unexpected `{}` in the {} condition",
            show(&toks[p.i]),
            dialect.name()
        ));
    }
    Ok(out)
}

fn show(t: &Tok) -> String {
    match t {
        Tok::Num(s) | Tok::Path(s) => s.clone(),
        Tok::Str(s) => format!("\"{s}\""),
        Tok::Op(o) => (*o).to_string(),
        Tok::And => "and".into(),
        Tok::Or => "or".into(),
        Tok::Not => "not".into(),
        Tok::Bang => "!".into(),
        Tok::Arith(c) => c.to_string(),
        Tok::LParen => "(".into(),
        Tok::RParen => ")".into(),
        Tok::LBracket => "[".into(),
        Tok::Comma => ",".into(),
        Tok::RBracket => "]".into(),
        Tok::True => "true".into(),
        Tok::False => "false".into(),
        Tok::Null => "null".into(),
        Tok::Kw(k) => (*k).to_string(),
        Tok::LBrace => "{".into(),
        Tok::Colon => ":".into(),
        Tok::RBrace => "}".into(),
        Tok::Field(f) => format!(".{f}"),
    }
}

/// The tokens of `src` and the byte offset of each (for the messages).
fn lex(src: &str, dialect: Dialect) -> Result<(Vec<Tok>, Vec<usize>), String> {
    let subset = match dialect {
        Dialect::Feel => "the supported FEEL subset (comparisons, and/or/not, literals, lists, contexts, paths, whole-number sums, string concatenation, if-then-else, some/every, filters, is defined)",
        Dialect::Juel => "the supported JUEL subset (comparisons, &&/||/!, literals, paths)",
    };
    let chars: Vec<(usize, char)> = src.char_indices().collect();
    let mut out = Vec::new();
    let mut offsets = Vec::new();
    // The end of the name starting at `from`: letters, digits, `_`, and dots between them.
    let name_end = |from: usize| {
        let mut j = from + 1;
        while j < chars.len() {
            let d = chars[j].1;
            let path_dot = d == '.'
                && chars
                    .get(j + 1)
                    .is_some_and(|x| x.1.is_alphabetic() || x.1 == '_');
            if d.is_alphanumeric() || d == '_' || path_dot {
                j += 1;
            } else {
                break;
            }
        }
        j
    };
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let two = chars.get(i + 1).map(|x| x.1);
        let juel = dialect == Dialect::Juel;
        // After an operand, FEEL's `-` subtracts (`a -1` is `a - 1`).
        let after_operand = matches!(
            out.last(),
            Some(
                Tok::Num(_)
                    | Tok::Str(_)
                    | Tok::Path(_)
                    | Tok::RParen
                    | Tok::True
                    | Tok::False
                    | Tok::Null
            )
        );
        let (tok, len) = match c {
            '+' if !juel => (Tok::Arith('+'), 1),
            '-' if !juel && (after_operand || !two.is_some_and(|d| d.is_ascii_digit())) => {
                (Tok::Arith('-'), 1)
            }
            '(' => (Tok::LParen, 1),
            ')' => (Tok::RParen, 1),
            '[' if !juel => (Tok::LBracket, 1),
            ',' if !juel => (Tok::Comma, 1),
            ']' if !juel => (Tok::RBracket, 1),
            '{' if !juel => (Tok::LBrace, 1),
            ':' if !juel => (Tok::Colon, 1),
            '}' if !juel => (Tok::RBrace, 1),
            // `orders[1].total`: a path after a `]`.
            '.' if !juel
                && matches!(out.last(), Some(Tok::RBracket))
                && two.is_some_and(|d| d.is_alphabetic() || d == '_') =>
            {
                let j = name_end(i + 1);
                let field: String = chars[i + 1..j].iter().map(|x| x.1).collect();
                if !field.is_ascii() || field.split('.').any(is_cel_reserved) {
                    return Err(format!("the name `{field}` cannot be used in a condition"));
                }
                (Tok::Field(field), j - i)
            }
            '=' if juel && two == Some('=') => (Tok::Op("=="), 2),
            '=' if juel => return Err(format!("`=` at offset {at}: JUEL compares with `==`")),
            '=' => (Tok::Op("=="), 1),
            '&' if juel && two == Some('&') => (Tok::And, 2),
            '|' if juel && two == Some('|') => (Tok::Or, 2),
            '!' if two == Some('=') => (Tok::Op("!="), 2),
            '!' if juel => (Tok::Bang, 1),
            '<' if two == Some('=') => (Tok::Op("<="), 2),
            '>' if two == Some('=') => (Tok::Op(">="), 2),
            '<' => (Tok::Op("<"), 1),
            '>' => (Tok::Op(">"), 1),
            '"' | '\'' if c == '"' || juel => {
                let mut s = String::new();
                let mut j = i + 1;
                loop {
                    match chars.get(j) {
                        None => return Err(format!("unterminated string starting at offset {at}")),
                        Some((_, q)) if *q == c => break,
                        Some((_, '\\')) => {
                            return Err(format!(
                                "escape sequences in {} strings are not supported (offset {at})",
                                dialect.name()
                            ))
                        }
                        // CEL reads the text between double quotes.
                        Some((_, '"')) => {
                            return Err(format!(
                                "a double quote inside a string is not supported (offset {at})"
                            ))
                        }
                        Some((_, ch)) => s.push(*ch),
                    }
                    j += 1;
                }
                (Tok::Str(s), j + 1 - i)
            }
            c if c.is_ascii_digit() || (c == '-' && two.is_some_and(|d| d.is_ascii_digit())) => {
                let mut j = i + 1;
                while j < chars.len() && (chars[j].1.is_ascii_digit() || chars[j].1 == '.') {
                    j += 1;
                }
                let s: String = chars[i..j].iter().map(|x| x.1).collect();
                if s.matches('.').count() > 1 || s.ends_with('.') {
                    return Err(format!("malformed number `{s}` at offset {at}"));
                }
                (Tok::Num(s), j - i)
            }
            c if c.is_alphabetic() || c == '_' => {
                let j = name_end(i);
                let word: String = chars[i..j].iter().map(|x| x.1).collect();
                let tok = match (dialect, word.as_str()) {
                    (_, "and") => Tok::And,
                    (_, "or") => Tok::Or,
                    (Dialect::Feel, "not") => Tok::Not,
                    (Dialect::Juel, "not") => Tok::Bang,
                    (_, "true") => Tok::True,
                    (_, "false") => Tok::False,
                    (_, "null") => Tok::Null,
                    (Dialect::Juel, "eq") => Tok::Op("=="),
                    (Dialect::Juel, "ne") => Tok::Op("!="),
                    (Dialect::Juel, "lt") => Tok::Op("<"),
                    (Dialect::Juel, "le") => Tok::Op("<="),
                    (Dialect::Juel, "gt") => Tok::Op(">"),
                    (Dialect::Juel, "ge") => Tok::Op(">="),
                    (Dialect::Feel, "if") => Tok::Kw("if"),
                    (Dialect::Feel, "then") => Tok::Kw("then"),
                    (Dialect::Feel, "else") => Tok::Kw("else"),
                    (Dialect::Feel, "some") => Tok::Kw("some"),
                    (Dialect::Feel, "every") => Tok::Kw("every"),
                    (Dialect::Feel, "in") => Tok::Kw("in"),
                    (Dialect::Feel, "satisfies") => Tok::Kw("satisfies"),
                    (Dialect::Feel, "between" | "for" | "return" | "instance" | "function")
                    | (Dialect::Juel, "empty" | "instanceof" | "div" | "mod") => {
                        return Err(format!("{} `{word}` is outside {subset}", dialect.name()))
                    }
                    _ => {
                        // A reserved word after the first segment is read by index
                        // (`content.output["break"]`, `resolve`); a variable by that name
                        // has no CEL spelling.
                        let root = word.split('.').next().unwrap_or(&word);
                        if !word.is_ascii() || is_cel_reserved(root) {
                            return Err(format!("the name `{word}` cannot be used in a condition"));
                        }
                        Tok::Path(word)
                    }
                };
                (tok, j - i)
            }
            other => return Err(format!("`{other}` at offset {at} is outside {subset}")),
        };
        out.push(tok);
        offsets.push(at);
        i += len;
    }
    Ok((out, offsets))
}

/// Names CEL reads as its types when no variable holds them.
const CEL_TYPE_NAMES: [&str; 13] = [
    "bool",
    "bytes",
    "double",
    "duration",
    "dyn",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "timestamp",
    "type",
    "uint",
];

/// The members `a.b.c` of a path after its root, in CEL: `.b.c`, with a member whose name
/// CEL reserves (`break`, `in`, …) selected by index (`["break"]`), which on a map (every
/// variable's object) reads the same entry and fails the same way when it is missing.
fn cel_members(rest: &str) -> String {
    let mut out = String::with_capacity(rest.len() + 1);
    for segment in rest.split('.') {
        if is_cel_reserved(segment) {
            out.push_str(&format!("[\"{segment}\"]"));
        } else {
            out.push('.');
            out.push_str(segment);
        }
    }
    out
}

pub(crate) fn is_cel_reserved(w: &str) -> bool {
    matches!(
        w,
        "as" | "break"
            | "const"
            | "continue"
            | "else"
            | "for"
            | "function"
            | "if"
            | "import"
            | "let"
            | "loop"
            | "package"
            | "namespace"
            | "return"
            | "var"
            | "void"
            | "while"
            | "in"
    )
}

/// A name FEEL binds inside the expression, innermost last in [`P::scopes`].
#[derive(Debug, Clone)]
enum Scope {
    /// `some x in … satisfies` / `every x in …`: `x`, bound by CEL's macro too.
    Iteration(String),
    /// A filter's element, bound in CEL by the `filter` macro to this variable: `item`
    /// and the element's entries by name (DMN 1.3 §10.3.2.5).
    Filter(String),
}

struct P<'a> {
    toks: &'a [Tok],
    /// The byte offset of each token in the FEEL text, for the messages.
    offsets: &'a [usize],
    /// The length of the FEEL text, the offset of a message about its end.
    end: usize,
    i: usize,
    depth: usize,
    dialect: Dialect,
    /// The names bound where the parser is, outermost first.
    scopes: Vec<Scope>,
    /// The first segments of every path in the text: a filter's CEL variable is none.
    taken: Vec<String>,
    /// Filter variables made so far (their names count up).
    items: usize,
    /// Whether the expression just parsed is a comparison, `and`/`or`, `not(…)`, a
    /// quantifier, a boolean literal or a function of a boolean result: one whose value
    /// is never a number, which a filter needs (see [`P::filter`]).
    boolean: bool,
}

impl P<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.i)
    }

    /// The byte offset of the current token in the FEEL text (its end past the last).
    fn offset(&self) -> usize {
        self.offsets.get(self.i).copied().unwrap_or(self.end)
    }

    fn or(&mut self) -> Result<String, String> {
        let mut left = self.and()?;
        let mut boolean = self.boolean;
        while self.peek() == Some(&Tok::Or) {
            self.i += 1;
            let right = self.and()?;
            left = format!("{left} || {right}");
            boolean = true;
        }
        self.boolean = boolean;
        Ok(left)
    }

    fn and(&mut self) -> Result<String, String> {
        let mut left = self.cmp()?;
        let mut boolean = self.boolean;
        while self.peek() == Some(&Tok::And) {
            self.i += 1;
            let right = self.cmp()?;
            left = format!("{left} && {right}");
            boolean = true;
        }
        self.boolean = boolean;
        Ok(left)
    }

    fn cmp(&mut self) -> Result<String, String> {
        let left = self.sum()?;
        if let Some(Tok::Op(op)) = self.peek().cloned() {
            self.i += 1;
            let right = self.sum()?;
            if let Some(Tok::Op(_)) = self.peek() {
                return Err("chained comparisons are not supported; use `and`".into());
            }
            self.boolean = true;
            return Ok(format!("{left} {op} {right}"));
        }
        Ok(left)
    }

    /// An atom, or a FEEL sum of paths and whole-number literals under the guard the
    /// module doc describes.
    fn sum(&mut self) -> Result<String, String> {
        let start = self.i;
        let first = self.atom()?;
        if !matches!(self.peek(), Some(Tok::Arith(_))) {
            return Ok(first);
        }
        let mut paths: Vec<String> = Vec::new();
        let mut strings = false;
        let mut ops: Vec<char> = Vec::new();
        let mut text = self.term(start, first, &mut paths, &mut strings)?;
        let mut terms = 1;
        while let Some(Tok::Arith(op)) = self.peek().cloned() {
            self.i += 1;
            terms += 1;
            if terms > MAX_SUM_TERMS {
                return Err(format!(
                    "a sum of more than {MAX_SUM_TERMS} terms is not supported"
                ));
            }
            ops.push(op);
            let at = self.i;
            let atom = self.atom()?;
            let term = self.term(at, atom, &mut paths, &mut strings)?;
            text = format!("{text} {op} {term}");
        }
        self.boolean = false;
        if strings {
            // FEEL's `+` of strings concatenates (DMN 1.3 §10.3.2.3.3, Table 45); of a
            // string and anything else it is null: the guard fails there instead.
            if ops.contains(&'-') {
                return Err("`-` of strings: FEEL subtracts numbers only".to_owned());
            }
            if self.toks[start..self.i]
                .iter()
                .any(|t| matches!(t, Tok::Num(_)))
            {
                return Err("`+` of a string and a number is null in FEEL".to_owned());
            }
            if paths.is_empty() {
                return Ok(format!("({text})"));
            }
            let guard: Vec<String> = paths
                .iter()
                .map(|p| format!("type({p}) == string"))
                .collect();
            return Ok(format!(
                "({} ? ({text}) : feel_concatenation_needs_strings())",
                guard.join(" && ")
            ));
        }
        if paths.is_empty() {
            return Ok(format!("({text})"));
        }
        let guard: Vec<String> = paths.iter().map(|p| format!("type({p}) == int")).collect();
        Ok(format!(
            "({} ? ({text}) : feel_sum_needs_whole_numbers())",
            guard.join(" && ")
        ))
    }

    /// One term of a sum, the atom parsed from token `at`: a variable path (remembered in
    /// `paths`) or a whole-number literal; anything else is refused.
    fn term(
        &self,
        at: usize,
        atom: String,
        paths: &mut Vec<String>,
        strings: &mut bool,
    ) -> Result<String, String> {
        match &self.toks[at] {
            // The path as translated: inside a filter a name may be the element's entry.
            Tok::Path(_) if self.i == at + 1 => {
                if !paths.contains(&atom) {
                    paths.push(atom.clone());
                }
                Ok(atom)
            }
            Tok::Str(_) if self.i == at + 1 && self.dialect == Dialect::Feel => {
                *strings = true;
                Ok(atom)
            }
            Tok::Num(n) if self.i == at + 1 && !n.contains('.') => Ok(atom),
            Tok::Num(n) if self.i == at + 1 => Err(format!(
                "`{n}` in a sum: only whole numbers are added exactly (FEEL decimals are not CEL doubles)"
            )),
            _ => Err(
                "`+` and `-` take variable paths and whole-number literals only".to_owned(),
            ),
        }
    }

    /// An operand and what follows it in FEEL: a filter or an index in `[…]` (DMN 1.3
    /// §10.3.2.5), and a path after an index (`orders[1].total`).
    fn atom(&mut self) -> Result<String, String> {
        let filterable = self.dialect == Dialect::Feel
            && matches!(
                self.peek(),
                Some(Tok::Path(_) | Tok::LParen | Tok::LBracket)
            );
        let mut out = self.primary()?;
        if !filterable {
            return Ok(out);
        }
        let mut indexed = false;
        let mut any = false;
        loop {
            match self.peek().cloned() {
                Some(Tok::LBracket) => {
                    let at = self.offset();
                    self.i += 1;
                    let (text, index) = self.filter(&out, at)?;
                    out = text;
                    indexed = index;
                }
                Some(Tok::Field(f)) if indexed => {
                    self.i += 1;
                    out = format!("{out}.{f}");
                    indexed = false;
                }
                Some(Tok::Field(f)) => {
                    return Err(format!(
                        "`.{f}` at offset {} follows a list: FEEL's projection (the list of every element's `{f}`) is not supported; index the list first (`…[1].{f}`) or name `item.{f}` inside the filter",
                        self.offset()
                    ))
                }
                _ => break,
            }
            any = true;
        }
        if any {
            self.boolean = false;
        }
        Ok(out)
    }

    fn primary(&mut self) -> Result<String, String> {
        let dialect = self.dialect.name();
        let tok = self
            .peek()
            .cloned()
            .ok_or_else(|| format!("the {dialect} condition ends too early"))?;
        self.i += 1;
        // Most operands are not booleans; the branches that are say so.
        self.boolean = false;
        match tok {
            Tok::Num(n) => Ok(n),
            Tok::Str(s) => Ok(format!("\"{s}\"")),
            Tok::Path(p) => {
                if self.dialect == Dialect::Feel {
                    // `is defined(…)`, Camunda's built-in (a name with a space).
                    let is_defined = p == "is"
                        && self.peek() == Some(&Tok::Path("defined".into()))
                        && self.toks.get(self.i + 1) == Some(&Tok::LParen);
                    if is_defined {
                        self.i += 1;
                        let out = self.nested(Self::is_defined)?;
                        self.boolean = true;
                        return Ok(out);
                    }
                    // `starts with(…)`, `ends with(…)`: FEEL names with a space.
                    let spaced = matches!(p.as_str(), "starts" | "ends")
                        && self.peek() == Some(&Tok::Path("with".into()))
                        && self.toks.get(self.i + 1) == Some(&Tok::LParen);
                    if spaced {
                        self.i += 1;
                        let name = format!("{p} with");
                        let out = self.nested(|s| s.function(&name))?;
                        self.boolean = true;
                        return Ok(out);
                    }
                    // `string join(…)` (DMN 1.4 §10.3.4.4), a name with a space.
                    let join = p == "string"
                        && self.peek() == Some(&Tok::Path("join".into()))
                        && self.toks.get(self.i + 1) == Some(&Tok::LParen);
                    if join {
                        self.i += 1;
                        return self.nested(|s| s.function("string join"));
                    }
                    if matches!(p.as_str(), "contains" | "count")
                        && self.peek() == Some(&Tok::LParen)
                    {
                        let out = self.nested(|s| s.function(&p))?;
                        self.boolean = p == "contains";
                        return Ok(out);
                    }
                }
                if self.peek() == Some(&Tok::LParen) {
                    return Err(format!(
                        "function call `{p}(…)` is outside the supported {dialect} subset"
                    ));
                }
                Ok(self.resolve(&p))
            }
            Tok::True => {
                self.boolean = true;
                Ok("true".into())
            }
            Tok::False => {
                self.boolean = true;
                Ok("false".into())
            }
            Tok::Null => Ok("null".into()),
            Tok::Not => {
                if self.peek() != Some(&Tok::LParen) {
                    return Err("`not` must be written as a call: not(…)".into());
                }
                self.i += 1;
                let inner = self.group()?;
                self.boolean = true;
                Ok(format!("!({inner})"))
            }
            Tok::Bang => {
                // Counted like a parenthesis: `!!!…a` must not recurse without a bound.
                self.depth += 1;
                if self.depth > MAX_NESTING {
                    return Err(format!("negations nest deeper than {MAX_NESTING} levels"));
                }
                let operand = self.atom()?;
                self.depth -= 1;
                self.boolean = true;
                Ok(format!("!{operand}"))
            }
            // The group's own shape stays (`(a > 1)` is a comparison).
            Tok::LParen => {
                let inner = self.group()?;
                Ok(format!("({inner})"))
            }
            Tok::LBracket => {
                let out = self.list()?;
                self.boolean = false;
                Ok(out)
            }
            Tok::LBrace => {
                let out = self.context()?;
                self.boolean = false;
                Ok(out)
            }
            Tok::Kw("if") => {
                let out = self.nested(Self::if_then_else)?;
                self.boolean = false;
                Ok(out)
            }
            Tok::Kw(q @ ("some" | "every")) => {
                let out = self.nested(|p| p.quantified(q))?;
                self.boolean = true;
                Ok(out)
            }
            other => Err(format!(
                "unexpected `{}` in the {dialect} condition",
                show(&other)
            )),
        }
    }

    /// Runs `inner` one nesting level down (the constructs below recurse through it).
    fn nested(
        &mut self,
        inner: impl FnOnce(&mut Self) -> Result<String, String>,
    ) -> Result<String, String> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(format!("expressions nest deeper than {MAX_NESTING} levels"));
        }
        let out = inner(self)?;
        self.depth -= 1;
        Ok(out)
    }

    /// After a FEEL function's name, at its `(`: the string functions `contains`,
    /// `starts with`, `ends with` (DMN 1.3 §10.3.4.3) and the list function `count`
    /// (§10.3.4.4), positional arguments only, as CEL's `contains`, `startsWith`,
    /// `endsWith` and `size` under a guard on the arguments' types: FEEL gives null for
    /// other types (and reads a non-list as a one-item list for `count`), CEL fails there —
    /// never a different value.
    fn function(&mut self, name: &str) -> Result<String, String> {
        self.i += 1; // `(`
        let mut args = Vec::new();
        if self.peek() != Some(&Tok::RParen) {
            loop {
                args.push(self.or()?);
                match self.peek() {
                    Some(Tok::Comma) => self.i += 1,
                    Some(Tok::RParen) => break,
                    _ => {
                        return Err(format!(
                            "`{name}(…)` takes positional arguments, closed with `)`"
                        ))
                    }
                }
            }
        }
        self.i += 1; // `)`
        if name == "string join" {
            // One argument joins with no delimiter (DMN 1.4), two with the second.
            return match args.as_slice() {
                [list] => Ok(format!(
                    "{}({list}, \"\")",
                    crate::expr::feel_support::STRING_JOIN
                )),
                [list, delimiter] => Ok(format!(
                    "{}({list}, {delimiter})",
                    crate::expr::feel_support::STRING_JOIN
                )),
                _ => Err(format!(
                    "`string join(…)` takes a list and a delimiter, not {} argument(s)",
                    args.len()
                )),
            };
        }
        let arity = if name == "count" { 1 } else { 2 };
        if args.len() != arity {
            return Err(format!(
                "`{name}(…)` takes {arity} argument(s), not {}",
                args.len()
            ));
        }
        Ok(match name {
            "count" => format!(
                "(type({a}) == list ? size({a}) : feel_count_needs_a_list())",
                a = args[0]
            ),
            _ => {
                let method = match name {
                    "contains" => "contains",
                    "starts with" => "startsWith",
                    _ => "endsWith",
                };
                format!(
                    "(type({s}) == string && type({t}) == string ? ({s}).{method}({t}) : feel_{f}_needs_strings())",
                    s = args[0],
                    t = args[1],
                    f = name.replace(' ', "_"),
                )
            }
        })
    }

    /// A variable path as CEL reads it where the parser is. Outside a filter it is the
    /// path itself. Inside one (DMN 1.3 §10.3.2.5) a name is the element's entry when the
    /// element is a context holding it, else `item` is the element, else the name is
    /// resolved outside the filter — as Camunda's FEEL engine puts the element's entries
    /// over `item` over the outer names (feel-scala `FeelInterpreter.filterContext`):
    /// `type` in `items[type = "x"]` becomes
    /// `(type(f) == type({}) && "type" in f ? f.type : feel_var("type"))`.
    fn resolve(&self, path: &str) -> String {
        let (root, rest) = match path.split_once('.') {
            Some((root, rest)) => (root, cel_members(rest)),
            None => (path, String::new()),
        };
        if !self.scopes.iter().any(|s| matches!(s, Scope::Filter(_)))
            && !CEL_TYPE_NAMES.contains(&root)
        {
            return format!("{root}{rest}");
        }
        let base = self.resolve_root(root, self.scopes.len());
        if rest.is_empty() {
            base
        } else {
            format!("{base}{rest}")
        }
    }

    /// The name `root` as the scopes below `depth` (outermost first) bind it.
    fn resolve_root(&self, root: &str, depth: usize) -> String {
        let Some(d) = depth.checked_sub(1) else {
            // Outside every scope: the variable. A name that is also a CEL type (`type`,
            // `int`, …) would read as the type where no variable holds it, so it is read by
            // name (`feel_var` fails without a variable, as CEL does for any other name).
            if CEL_TYPE_NAMES.contains(&root) {
                return format!("feel_var(\"{root}\")");
            }
            return root.to_owned();
        };
        match &self.scopes[d] {
            Scope::Iteration(name) if name == root => root.to_owned(),
            Scope::Iteration(_) => self.resolve_root(root, d),
            Scope::Filter(f) => {
                let outside = if root == "item" {
                    f.clone()
                } else {
                    self.resolve_root(root, d)
                };
                format!("(type({f}) == type({{}}) && \"{root}\" in {f} ? {f}.{root} : {outside})")
            }
        }
    }

    /// After `is defined`, at its `(`: Camunda's `is defined(path)` (a Camunda extension,
    /// not among the built-in functions of DMN 1.3 §10.3.4; Camunda 8 docs, "Boolean
    /// functions"). `false` when the path's variable or an entry on the way is missing,
    /// `true` when it holds a value; a null value fails the evaluation, as Camunda's
    /// versions disagree there (see `expr::feel_support`). Its argument must be a path.
    fn is_defined(&mut self) -> Result<String, String> {
        let at = self.offset();
        self.i += 1; // `(`
        let path = match (self.peek().cloned(), self.toks.get(self.i + 1)) {
            (Some(Tok::Path(p)), Some(Tok::RParen)) => p,
            _ => {
                return Err(format!(
                    "`is defined(…)` at offset {at} takes one variable path, as in `is defined(order.total)`"
                ))
            }
        };
        self.i += 2;
        let (root, rest) = path.split_once('.').unwrap_or((path.as_str(), ""));
        Ok(self.defined_root(root, rest, self.scopes.len()))
    }

    /// `is defined(root.rest)` as the scopes below `depth` bind `root`.
    fn defined_root(&self, root: &str, rest: &str, depth: usize) -> String {
        let Some(d) = depth.checked_sub(1) else {
            let path = if rest.is_empty() {
                root.to_owned()
            } else {
                format!("{root}.{rest}")
            };
            return format!("feel_is_defined(\"{path}\")");
        };
        match &self.scopes[d] {
            Scope::Iteration(name) if name == root => {
                format!("feel_is_defined_in({root}, \"{rest}\")")
            }
            Scope::Iteration(_) => self.defined_root(root, rest, d),
            Scope::Filter(f) => {
                let outside = if root == "item" {
                    format!("feel_is_defined_in({f}, \"{rest}\")")
                } else {
                    self.defined_root(root, rest, d)
                };
                format!(
                    "(type({f}) == type({{}}) && \"{root}\" in {f} ? feel_is_defined_in({f}.{root}, \"{rest}\") : {outside})"
                )
            }
        }
    }

    /// A CEL variable for a filter's element that no path in the text names.
    fn fresh_item(&mut self) -> String {
        loop {
            let name = format!("item{}", self.items);
            self.items += 1;
            if !self.taken.contains(&name) {
                return name;
            }
        }
    }

    /// After the `[` (at offset `at`) following the list `list`: FEEL's filter or index
    /// (DMN 1.3 §10.3.2.5). The text, and whether it is an index (one element).
    ///
    /// - A whole-number literal is an index, 1-based, negative from the end (`xs[1]`,
    ///   `xs[-1]`): CEL's `xs[0]`, `xs[size(xs) - 1]`. FEEL gives null past either end,
    ///   CEL fails there; `[0]` (always null) and a decimal are refused.
    /// - A boolean condition keeps the elements for which it is `true`: CEL's
    ///   `xs.filter(f, c)`. Where FEEL drops an element because the condition is null or
    ///   not a boolean, CEL fails. The condition must be a comparison, `and`/`or`,
    ///   `not(…)`, a quantifier, a predicate function or a boolean literal: Camunda's
    ///   engine evaluates any other condition once outside the filter first, and a number
    ///   there makes it an index (feel-scala `FeelInterpreter`, `Filter`), which a
    ///   translation cannot know.
    /// - Anything but a list fails (FEEL gives null; CEL would index a map's keys).
    fn filter(&mut self, list: &str, at: usize) -> Result<(String, bool), String> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(format!("filters nest deeper than {MAX_NESTING} levels"));
        }
        if let (Some(Tok::Num(n)), Some(Tok::RBracket)) =
            (self.peek().cloned(), self.toks.get(self.i + 1))
        {
            self.i += 2;
            self.depth -= 1;
            return Ok((Self::index(list, &n, at)?, true));
        }
        let item = self.fresh_item();
        self.scopes.push(Scope::Filter(item.clone()));
        let cond = self.or();
        self.scopes.pop();
        let cond = cond?;
        if !self.boolean {
            return Err(format!(
                "the filter at offset {at} is not a comparison or another condition: FEEL would take a number there as an index, so write `[item = …]`, `[item.active = true]` or an index literal (`[1]`)"
            ));
        }
        if self.peek() != Some(&Tok::RBracket) {
            return Err(format!("the filter at offset {at} is not closed with `]`"));
        }
        self.i += 1;
        self.depth -= 1;
        Ok((
            format!(
                "(type({list}) == type([]) ? ({list}).filter({item}, {cond}) : feel_filter_needs_a_list())"
            ),
            false,
        ))
    }

    /// FEEL's `list[n]` for the literal `n`: see [`P::filter`].
    fn index(list: &str, n: &str, at: usize) -> Result<String, String> {
        if n.contains('.') {
            return Err(format!(
                "the index `{n}` at offset {at} is not a whole number"
            ));
        }
        let k: i64 = n
            .parse()
            .map_err(|_| format!("the index `{n}` at offset {at} is too large"))?;
        let element = match k {
            0 => {
                return Err(format!(
                    "the index `[0]` at offset {at} is always null: FEEL counts from 1 (`[1]` is the first element, `[-1]` the last)"
                ))
            }
            k if k > 0 => format!("({list})[{}]", k - 1),
            k => format!("({list})[size({list}) - {}]", k.unsigned_abs()),
        };
        Ok(format!(
            "(type({list}) == type([]) ? {element} : feel_index_needs_a_list())"
        ))
    }

    fn expect_kw(&mut self, kw: &'static str, construct: &str) -> Result<(), String> {
        if self.peek() != Some(&Tok::Kw(kw)) {
            return Err(format!("`{construct}` without its `{kw}`"));
        }
        self.i += 1;
        Ok(())
    }

    /// After `if`: FEEL's `if c then a else b` (DMN 1.3 §10.3.2.6, grammar rule 47) as
    /// CEL's `c ? a : b`. FEEL takes the else branch when `c` is false *or not a boolean*
    /// (null included); CEL fails on a condition that is not a boolean: the evaluation
    /// fails where FEEL gives the else branch, never a different value.
    fn if_then_else(&mut self) -> Result<String, String> {
        let c = self.or()?;
        self.expect_kw("then", "if")?;
        let a = self.or()?;
        self.expect_kw("else", "if")?;
        let b = self.or()?;
        Ok(format!("({c} ? {a} : {b})"))
    }

    /// After `some` or `every`: FEEL's quantified expression `some x in xs satisfies c`
    /// (DMN 1.3 §10.3.2.6, grammar rule 48; Table 57) as CEL's `xs.exists(x, c)` or
    /// `xs.all(x, c)`. CEL's macros absorb an error where the answer is already known (a
    /// `true` for `exists`, a `false` for `all`), as FEEL's quantifiers do with null; where
    /// FEEL would give null (no element decides) CEL fails. One iteration context only.
    fn quantified(&mut self, q: &str) -> Result<String, String> {
        let name = match self.peek().cloned() {
            Some(Tok::Path(n)) if !n.contains('.') => n,
            _ => {
                return Err(format!(
                    "`{q}` must name its variable: {q} x in … satisfies …"
                ))
            }
        };
        self.i += 1;
        self.expect_kw("in", q)?;
        let list = self.or()?;
        if self.peek() == Some(&Tok::Comma) {
            return Err(format!("`{q}` over more than one list is not supported"));
        }
        self.expect_kw("satisfies", q)?;
        self.scopes.push(Scope::Iteration(name.clone()));
        let cond = self.or();
        self.scopes.pop();
        let cond = cond?;
        let mac = if q == "some" { "exists" } else { "all" };
        // CEL iterates a map's keys; FEEL never quantifies over a context's keys: anything
        // but a list fails.
        Ok(format!(
            "(type({list}) == list ? ({list}).{mac}({name}, {cond}) : feel_quantifier_needs_a_list())"
        ))
    }

    /// After `{`: a FEEL context literal (DMN 1.3 §10.3.2.7, grammar rule 59), its keys
    /// names or strings, as a CEL map with string keys. A FEEL entry may read the entries
    /// before it; a CEL map cannot, so such an entry is refused, as are repeated keys.
    fn context(&mut self) -> Result<String, String> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(format!("contexts nest deeper than {MAX_NESTING} levels"));
        }
        let mut keys: Vec<String> = Vec::new();
        let mut entries = Vec::new();
        if self.peek() == Some(&Tok::RBrace) {
            self.i += 1;
        } else {
            loop {
                let key = match self.peek().cloned() {
                    Some(Tok::Path(k)) if !k.contains('.') => k,
                    Some(Tok::Str(k)) => k,
                    _ => return Err("a context key is a name or a string".into()),
                };
                self.i += 1;
                if keys.contains(&key) {
                    return Err(format!("the context key `{key}` appears twice"));
                }
                if self.peek() != Some(&Tok::Colon) {
                    return Err(format!("the context key `{key}` has no `:`"));
                }
                self.i += 1;
                let start = self.i;
                let value = self.or()?;
                let reads_earlier = self.toks[start..self.i].iter().find_map(|t| match t {
                    Tok::Path(p) => {
                        let root = p.split('.').next().unwrap_or(p);
                        keys.iter().find(|k| *k == root)
                    }
                    _ => None,
                });
                if let Some(k) = reads_earlier {
                    return Err(format!(
                        "the context entry `{key}` reads the entry `{k}` before it, which a CEL map cannot"
                    ));
                }
                entries.push(format!("\"{key}\": {value}"));
                keys.push(key);
                match self.peek() {
                    Some(Tok::Comma) => self.i += 1,
                    Some(Tok::RBrace) => {
                        self.i += 1;
                        break;
                    }
                    _ => return Err("a context is not closed with `}`".into()),
                }
            }
        }
        self.depth -= 1;
        Ok(format!("{{{}}}", entries.join(", ")))
    }

    /// After `[`: a FEEL list literal, its items separated by `,`, up to `]` — the same
    /// list in CEL. Nested like a parenthesis.
    fn list(&mut self) -> Result<String, String> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(format!("lists nest deeper than {MAX_NESTING} levels"));
        }
        let mut items = Vec::new();
        if self.peek() == Some(&Tok::RBracket) {
            self.i += 1;
        } else {
            loop {
                items.push(self.or()?);
                match self.peek() {
                    Some(Tok::Comma) => self.i += 1,
                    Some(Tok::RBracket) => {
                        self.i += 1;
                        break;
                    }
                    _ => return Err("a list is not closed with `]`".into()),
                }
            }
        }
        self.depth -= 1;
        Ok(format!("[{}]", items.join(", ")))
    }

    /// After an opening parenthesis: an expression and its closing parenthesis.
    fn group(&mut self) -> Result<String, String> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(format!("parentheses nest deeper than {MAX_NESTING} levels"));
        }
        let inner = self.or()?;
        if self.peek() != Some(&Tok::RParen) {
            return Err("a parenthesis is not closed".into());
        }
        self.i += 1;
        self.depth -= 1;
        Ok(inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feel_list_literals_translate() {
        assert_eq!(
            feel_to_cel(r#"["ubuntu", "windows", 3, [a.b]]"#).unwrap(),
            r#"["ubuntu", "windows", 3, [a.b]]"#
        );
        assert_eq!(feel_to_cel("[]").unwrap(), "[]");
        for refused in ["[1, 2", "[1 2]", "[1,]", "items[0]", "items[x]"] {
            assert!(feel_to_cel(refused).is_err(), "{refused}");
        }
        assert!(juel_to_cel("${[1]}").is_err());
    }

    #[test]
    fn members_named_like_cel_keywords_are_read_by_index() {
        assert_eq!(
            juel_to_cel("${content.output.break}").as_deref(),
            Ok(r#"content.output["break"]"#)
        );
        assert_eq!(
            feel_to_cel("order.in.total > 1").as_deref(),
            Ok(r#"order["in"].total > 1"#)
        );
        // A variable by such a name has no CEL spelling.
        assert!(juel_to_cel("${break.x}").is_err());
        assert!(feel_to_cel("in = 1").is_err());
    }

    #[test]
    fn subset_translates_one_to_one() {
        let cases = [
            ("x = 1", "x == 1"),
            ("amount > 100", "amount > 100"),
            ("order.total <= 9.5", "order.total <= 9.5"),
            ("a != \"gold\"", "a != \"gold\""),
            ("ok = true and n >= -3", "ok == true && n >= -3"),
            ("a or b and c", "a || b && c"),
            ("not(done)", "!(done)"),
            (
                "(x > 1 or y < 2) and z = null",
                "(x > 1 || y < 2) && z == null",
            ),
        ];
        for (feel, cel) in cases {
            assert_eq!(feel_to_cel(feel).as_deref(), Ok(cel), "{feel}");
        }
    }

    #[test]
    fn everything_else_is_refused() {
        for feel in [
            "x * 2 > 2",
            "x + 0.5",
            "x + \"a\" + 1",
            "\"a\" - x",
            "(a + b) + c",
            "a + (b)",
            "-x",
            "sum(items) > 0",
            "x in [1,2]",
            "x between 1 and 3",
            "some i, j in xs satisfies i > 1",
            "some i.j in xs satisfies i > 1",
            "some i in xs",
            "if a then b",
            "if a else b",
            "{a: 1, a: 2}",
            "{a: 1, b: a + 1}",
            "{a.b: 1}",
            "{a 1}",
            "{a: 1",
            "for x in xs return x",
            "date(\"2020-01-01\") < now()",
            "a < b < c",
            "(a",
            "not a",
            "\"unterminated",
            "a = 1 b",
            "",
            "first name = \"x\"",
        ] {
            assert!(feel_to_cel(feel).is_err(), "{feel} should be refused");
        }
    }

    #[test]
    fn the_juel_subset_translates_one_to_one() {
        let cases = [
            ("${approved == true}", "approved == true"),
            ("${!rejected}", "!rejected"),
            ("${amount > 1000 && vip}", "amount > 1000 && vip"),
            (
                "#{a eq 'gold' or b ne \"x\"}",
                "a == \"gold\" || b != \"x\"",
            ),
            ("${not (a lt 1) and b ge -2.5}", "!(a < 1) && b >= -2.5"),
            (
                "  ${order.total <= 9.5 || x == null}  ",
                "order.total <= 9.5 || x == null",
            ),
        ];
        for (juel, cel) in cases {
            assert_eq!(juel_to_cel(juel).as_deref(), Ok(cel), "{juel}");
            crate::expr::Expression::compile(cel, crate::model::Pos::default(), 4096)
                .unwrap_or_else(|e| panic!("{cel}: {e:?}"));
        }
    }

    #[test]
    fn juel_outside_the_subset_is_refused() {
        for juel in [
            "${amount + 1 > 2}",
            "${execution.getVariable('x') == 1}",
            "${a.equals(b)}",
            "${empty list}",
            "${a ? b : c}",
            "${xs[0] > 1}",
            "${a = 1}",
            "${a} and ${b}",
            "x ${a}",
            "${a",
            "${'it\\'s'}",
            "${'say \"hi\"' == a}",
            "${}",
            "${a mod 2 == 0}",
        ] {
            assert!(juel_to_cel(juel).is_err(), "{juel} should be refused");
        }
        // Hostile sizes are refused quickly, without recursing or copying without bound.
        assert!(juel_to_cel(&format!("${{{}a}}", "!".repeat(16))).is_ok());
        for hostile in [
            format!("${{{}a}}", "!".repeat(17)),
            format!("${{{}a}}", "!".repeat(1_000_000)),
            format!("${{{}}}", ["a"; 10_000].join(" && ")),
        ] {
            assert!(juel_to_cel(&hostile).is_err(), "{} bytes", hostile.len());
        }
        assert!(feel_to_cel(&["a"; 10_000].join(" and ")).is_err());
    }

    /// What the documentation says of comparisons across types, checked against the CEL
    /// evaluator: `==` is false and `!=` true, an ordering fails; a missing key fails.
    #[test]
    fn comparisons_across_types_behave_as_documented() {
        use crate::expr::Expression;
        let vars: crate::model::Variables =
            serde_json::from_str(r#"{"approved": true, "n": 1, "order": {}}"#).unwrap();
        let eval = |juel: &str| {
            let cel = juel_to_cel(juel).unwrap();
            Expression::compile(&cel, crate::model::Pos::default(), 4096)
                .unwrap()
                .eval_bool(&vars)
        };
        assert_eq!(eval("${approved == 'true'}").ok(), Some(false));
        assert_eq!(eval("${approved != 'true'}").ok(), Some(true));
        assert!(eval("${n < 'x'}").is_err());
        assert!(eval("${order.discount == null}").is_err());
    }

    /// A sum gives FEEL's value on whole numbers and fails on anything else: never a
    /// different value.
    #[test]
    fn sums_are_exact_on_whole_numbers_and_fail_otherwise() {
        use crate::expr::Expression;
        assert_eq!(
            feel_to_cel("loopAmount + 1").as_deref(),
            Ok("(type(loopAmount) == int ? (loopAmount + 1) : feel_sum_needs_whole_numbers())")
        );
        let eval = |feel: &str, vars: &str| {
            let cel = feel_to_cel(feel).unwrap();
            let vars: crate::model::Variables = serde_json::from_str(vars).unwrap();
            Expression::compile(&cel, crate::model::Pos::default(), 4096)
                .unwrap_or_else(|e| panic!("{cel}: {e:?}"))
                .eval(&vars)
        };
        let n = |v: i64| Ok(serde_json::json!(v));
        assert_eq!(eval("loopAmount + 1", r#"{"loopAmount": 0}"#), n(1));
        assert_eq!(eval("a - b - 1", r#"{"a": 10, "b": 3}"#), n(6));
        assert_eq!(eval("a -1", r#"{"a": 10}"#), n(9));
        assert_eq!(eval("a - -1", r#"{"a": 10}"#), n(11));
        assert_eq!(eval("o.n + o.n", r#"{"o": {"n": 2}}"#), n(4));
        assert_eq!(eval("2 + 3", "{}"), n(5));
        assert_eq!(
            eval("a + 1 > 2 and b - 1 = 0", r#"{"a": 2, "b": 1}"#),
            Ok(serde_json::json!(true))
        );
        for vars in [
            r#"{"a": 1.5}"#,
            r#"{"a": 1.0}"#,
            r#"{"a": "x"}"#,
            r#"{"a": null}"#,
            r#"{"a": [1]}"#,
            r#"{"a": 9223372036854775807}"#,
            r#"{"a": 18446744073709551615}"#,
            "{}",
        ] {
            assert!(eval("a + 1", vars).is_err(), "a + 1 over {vars}");
        }
        assert!(feel_to_cel(&["a"; 9].join(" + ")).is_err());
        assert!(feel_to_cel(&["a"; 8].join(" + ")).is_ok());
        assert!(juel_to_cel("${a + 1}").is_err());
    }

    /// The FEEL constructs of 2026-12 give FEEL's value where FEEL has one that is not
    /// null, and fail otherwise: never a different value.
    #[test]
    fn conditionals_quantifiers_contexts_and_concatenation_give_feels_values() {
        use crate::expr::Expression;
        let eval = |feel: &str, vars: &str| {
            let cel = feel_to_cel(feel).unwrap_or_else(|e| panic!("{feel}: {e}"));
            let vars: crate::model::Variables = serde_json::from_str(vars).unwrap();
            Expression::compile(&cel, crate::model::Pos::default(), 4096)
                .unwrap_or_else(|e| panic!("{cel}: {e:?}"))
                .eval(&vars)
        };
        let j = |v: serde_json::Value| Ok(v);
        use serde_json::json;
        // if-then-else: the branch by a boolean; a condition that is not one fails.
        assert_eq!(
            feel_to_cel("if amount > 100 then \"big\" else \"small\"").as_deref(),
            Ok("(amount > 100 ? \"big\" : \"small\")")
        );
        let size = "if amount > 100 then \"big\" else \"small\"";
        assert_eq!(eval(size, r#"{"amount": 150}"#), j(json!("big")));
        assert_eq!(eval(size, r#"{"amount": 5}"#), j(json!("small")));
        assert!(eval("if flag then 1 else 2", r#"{"flag": null}"#).is_err());
        assert_eq!(
            eval(
                "if a then if b then 1 else 2 else 3",
                r#"{"a": true, "b": false}"#
            ),
            j(json!(2))
        );
        // some / every over a list.
        let red = "some risk in riskLevels satisfies risk = \"red\"";
        assert_eq!(
            feel_to_cel(red).as_deref(),
            Ok("(type(riskLevels) == list ? (riskLevels).exists(risk, risk == \"red\") : feel_quantifier_needs_a_list())")
        );
        assert_eq!(
            eval(red, r#"{"riskLevels": ["green", "red"]}"#),
            j(json!(true))
        );
        assert_eq!(eval(red, r#"{"riskLevels": ["green"]}"#), j(json!(false)));
        assert_eq!(eval(red, r#"{"riskLevels": []}"#), j(json!(false)));
        let all = "every r in riskLevels satisfies r = \"yellow\"";
        assert_eq!(
            eval(all, r#"{"riskLevels": ["yellow", "yellow"]}"#),
            j(json!(true))
        );
        assert_eq!(
            eval(all, r#"{"riskLevels": ["yellow", "red"]}"#),
            j(json!(false))
        );
        assert_eq!(eval(all, r#"{"riskLevels": []}"#), j(json!(true)));
        assert_eq!(
            eval("some x in [1, 2, 3] satisfies x > 2", "{}"),
            j(json!(true))
        );
        assert!(eval(red, r#"{"riskLevels": "red"}"#).is_err(), "not a list");
        // A context is not quantified over its keys (CEL would iterate a map's keys).
        let keys = "some x in order satisfies x = \"total\"";
        assert!(eval(keys, r#"{"order": {"total": 5}}"#).is_err());
        assert!(eval("some x in {a: 1} satisfies x = \"a\"", "{}").is_err());
        // The quantifier's variable shadows an outer one, as in FEEL.
        assert_eq!(
            eval(
                "some x in xs satisfies x > 1",
                r#"{"x": 100, "xs": [0, 1]}"#
            ),
            j(json!(false))
        );
        // `if` inside `and`/`or` takes its else branch as far as it goes.
        assert_eq!(
            eval(
                "a and if b then false else true or c",
                r#"{"a": true, "b": false, "c": false}"#
            ),
            j(json!(true))
        );
        assert_eq!(eval("if a then 1 else -1", r#"{"a": false}"#), j(json!(-1)));
        assert_eq!(eval("{n: -1}", "{}"), j(json!({"n": -1})));
        // Context literals.
        assert_eq!(
            feel_to_cel("{total: a + 1, \"the label\": name, inner: {ok: true}}").as_deref(),
            Ok("{\"total\": (type(a) == int ? (a + 1) : feel_sum_needs_whole_numbers()), \"the label\": name, \"inner\": {\"ok\": true}}")
        );
        assert_eq!(
            eval("{total: a + 1, label: name}", r#"{"a": 1, "name": "x"}"#),
            j(json!({"total": 2, "label": "x"}))
        );
        assert_eq!(eval("{}", "{}"), j(json!({})));
        // String concatenation.
        assert_eq!(
            eval("\"Hi \" + name + \"!\"", r#"{"name": "Ada"}"#),
            j(json!("Hi Ada!"))
        );
        assert!(eval("\"n=\" + n", r#"{"n": 1}"#).is_err(), "FEEL: null");
        assert_eq!(eval("\"a\" + \"b\"", "{}"), j(json!("ab")));
        // String and list functions.
        let v = r#"{"s": "order-17", "xs": [1, 2, 3], "n": 5}"#;
        assert_eq!(eval("contains(s, \"-1\")", v), j(json!(true)));
        assert_eq!(eval("starts with(s, \"order\")", v), j(json!(true)));
        assert_eq!(eval("ends with(s, \"18\")", v), j(json!(false)));
        assert_eq!(eval("count(xs) = 3 and count([]) = 0", v), j(json!(true)));
        for fails in [
            "contains(n, \"5\")",
            "contains(xs, 1)",
            "count(n)",
            "starts with(s, 1)",
        ] {
            assert!(
                eval(fails, v).is_err(),
                "{fails}: FEEL gives null (or 1 for count)"
            );
        }
        // `string join` (DMN 1.4 §10.3.4.4): nulls left out, a null delimiter as none.
        let w = r#"{"risks": ["fire", null, "flood"], "none": [], "mixed": ["a", 1], "s": "x"}"#;
        assert_eq!(
            eval("string join(risks, \", \")", w),
            j(json!("fire, flood"))
        );
        assert_eq!(eval("string join(risks)", w), j(json!("fireflood")));
        assert_eq!(eval("string join(risks, null)", w), j(json!("fireflood")));
        assert_eq!(eval("string join(none, \"-\")", w), j(json!("")));
        assert_eq!(eval("string join([\"a\", \"b\"], \"\")", w), j(json!("ab")));
        for fails in [
            "string join(mixed, \",\")",
            "string join(s, \",\")",
            "string join(risks, 1)",
        ] {
            assert!(eval(fails, w).is_err(), "{fails}: FEEL gives null");
        }
        for refused in [
            "string join()",
            "string join(risks, \",\", \"[\", \"]\")",
            "contains(s)",
            "count(xs, 1)",
            "contains(string: s, match: \"x\")",
            "string length(s)",
            "upper case(s)",
            "starts(s, \"x\")",
        ] {
            assert!(feel_to_cel(refused).is_err(), "{refused}");
        }
    }

    /// A variable named like a CEL type (`type`, `int`, …) is that variable everywhere,
    /// not only inside a filter: unbound, CEL would read the type (`type = null` was
    /// false where FEEL's missing variable is null, and qflow fails a missing variable).
    #[test]
    fn a_variable_named_like_a_cel_type_is_the_variable() {
        use serde_json::json;
        assert_eq!(
            feel_to_cel("type = \"gold\"").as_deref(),
            Ok("feel_var(\"type\") == \"gold\"")
        );
        assert_eq!(
            feel_to_cel("int.value > 1").as_deref(),
            Ok("feel_var(\"int\").value > 1")
        );
        assert_eq!(
            eval_feel("type = \"gold\"", r#"{"type": "gold"}"#),
            Ok(json!(true))
        );
        assert_eq!(
            eval_feel("type = null", r#"{"type": null}"#),
            Ok(json!(true))
        );
        assert_eq!(
            eval_feel("int.value > 1", r#"{"int": {"value": 2}}"#),
            Ok(json!(true))
        );
        // Missing: a failure, as for every other missing variable, never CEL's type.
        assert!(eval_feel("type = null", "{}").is_err());
        assert!(eval_feel("some x in [1] satisfies type = null", "{}").is_err());
        // A quantifier's own variable of that name is the element.
        assert_eq!(
            eval_feel("some type in [1, 2] satisfies type > 1", "{}"),
            Ok(json!(true))
        );
    }

    /// Translates `feel`, compiles the CEL and evaluates it over the JSON `vars`.
    fn eval_feel(feel: &str, vars: &str) -> Result<serde_json::Value, crate::expr::EvalError> {
        let cel = feel_to_cel(feel).unwrap_or_else(|e| panic!("{feel}: {e}"));
        let vars: crate::model::Variables = serde_json::from_str(vars).unwrap();
        crate::expr::Expression::compile(&cel, crate::model::Pos::default(), 4096)
            .unwrap_or_else(|e| panic!("{cel}: {e:?}"))
            .eval(&vars)
    }

    /// `is defined(path)`: false for a missing variable or entry (a null or a scalar on
    /// the way included), true for a value, and a failure for a null value, where
    /// Camunda's versions disagree (true before feel-scala 1.17, false since).
    #[test]
    fn is_defined_tells_a_missing_path_from_a_value() {
        use serde_json::json;
        assert_eq!(
            feel_to_cel("is defined(order.total)").as_deref(),
            Ok("feel_is_defined(\"order.total\")")
        );
        let ok = |feel: &str, vars: &str, want: bool| {
            assert_eq!(eval_feel(feel, vars), Ok(json!(want)), "{feel} over {vars}");
        };
        ok("is defined(x)", "{}", false);
        ok("is defined(x)", r#"{"x": 0}"#, true);
        ok("is defined(x)", r#"{"x": false}"#, true);
        ok("is defined(x)", r#"{"x": {}}"#, true);
        ok("not(is defined(x))", r#"{"y": 1}"#, true);
        ok("is defined(x.y)", r#"{"x": {"y": 1}}"#, true);
        ok("is defined(x.y.z)", r#"{"x": {"y": {"z": "s"}}}"#, true);
        ok("is defined(x.z)", r#"{"x": {"y": 1}}"#, false);
        ok("is defined(x.y)", "{}", false);
        ok("is defined(x.y)", r#"{"x": null}"#, false);
        ok("is defined(x.y)", r#"{"x": 5}"#, false);
        ok("is defined(x.y.z)", r#"{"x": {"y": "s"}}"#, false);
        // A name that is also a CEL type is still a variable.
        ok("is defined(type)", "{}", false);
        ok("is defined(type)", r#"{"type": "a"}"#, true);
        // Inside a quantifier the iteration variable exists; below it is tested.
        ok(
            "every o in orders satisfies is defined(o.id)",
            r#"{"orders": [{"id": 1}, {"n": 2}]}"#,
            false,
        );
        ok(
            "if is defined(limit) then n > limit else true",
            r#"{"n": 5}"#,
            true,
        );
        // Where FEEL's answer depends on the version, or is a projection: fails.
        for (feel, vars) in [
            ("is defined(x)", r#"{"x": null}"#),
            ("is defined(x.y)", r#"{"x": {"y": null}}"#),
            ("is defined(x.y)", r#"{"x": [{"y": 1}]}"#),
        ] {
            assert!(eval_feel(feel, vars).is_err(), "{feel} over {vars}");
        }
        // The variable is read (and so bound) though CEL sees only a string.
        let cel = feel_to_cel("is defined(order.total) and is defined(type)").unwrap();
        let e = crate::expr::Expression::compile(&cel, crate::model::Pos::default(), 4096).unwrap();
        assert_eq!(e.read_names(), ["order", "type"]);
        for refused in [
            "is defined(1)",
            "is defined(a, b)",
            "is defined(a + 1)",
            "is defined()",
            "is defined(xs[1])",
        ] {
            let e = feel_to_cel(refused).expect_err(refused);
            assert!(e.contains("offset"), "{refused}: {e}");
        }
    }

    /// Filters and indexes (DMN 1.3 §10.3.2.5) give FEEL's list or element, or fail
    /// where FEEL would drop an element for a null condition or give null.
    #[test]
    fn filters_and_indexes_give_feels_values() {
        use serde_json::json;
        let items = r#"{"items": [{"type": "x", "price": 5}, {"type": "y", "price": 20}, {"type": "x", "price": 12}]}"#;
        let is = |feel: &str, vars: &str, want: serde_json::Value| {
            assert_eq!(eval_feel(feel, vars), Ok(want), "{feel} over {vars}");
        };
        assert_eq!(
            feel_to_cel("items[item.price > 10]").as_deref(),
            Ok("(type(items) == type([]) ? (items).filter(item0, (type(item0) == type({}) && \"item\" in item0 ? item0.item : item0).price > 10) : feel_filter_needs_a_list())")
        );
        is(
            "items[type = \"x\"]",
            items,
            json!([{"type": "x", "price": 5}, {"type": "x", "price": 12}]),
        );
        is(
            "items[item.price > 10]",
            items,
            json!([{"type": "y", "price": 20}, {"type": "x", "price": 12}]),
        );
        is(
            "items[type = \"x\" and price > 10]",
            items,
            json!([{"type": "x", "price": 12}]),
        );
        is(
            "count(items[price > limit]) = 1",
            r#"{"items": [{"price": 5}, {"price": 20}], "limit": 10}"#,
            json!(true),
        );
        // The specification's examples.
        is("[1, 2, 3, 4][item > 2]", "{}", json!([3, 4]));
        is(
            "[{x: 1, y: 2}, {x: 2, y: 3}][x = 1]",
            "{}",
            json!([{"x": 1, "y": 2}]),
        );
        // FEEL drops the element whose `x` is null ([{x: 1, y: 2}]); CEL fails.
        assert!(eval_feel("[{x: 1, y: 2}, {x: null, y: 3}][x < 2]", "{}").is_err());
        // The element's entry wins over an outer name, `item` included; an outer name
        // is read where the element has no such entry.
        is(
            "items[n = 1]",
            r#"{"n": 2, "items": [{"n": 1}, {"m": 1}]}"#,
            json!([{"n": 1}]),
        );
        is(
            "items[n = 2]",
            r#"{"n": 2, "items": [{"n": 1}, {"m": 1}]}"#,
            json!([{"m": 1}]),
        );
        is(
            "[{item: 5}, {item: 6}][item = 5]",
            "{}",
            json!([{"item": 5}]),
        );
        is(
            "items[type = \"x\"]",
            r#"{"type": "x", "items": [{"t": 1}]}"#,
            json!([{"t": 1}]),
        );
        // An element without the entry and no variable of that name: FEEL compares null
        // (the element is dropped); CEL fails, whatever the name (`type` is a CEL type).
        assert!(eval_feel("items[type = \"x\"]", r#"{"items": [{"t": 1}]}"#).is_err());
        assert!(eval_feel("items[kind = \"x\"]", r#"{"items": [{"t": 1}]}"#).is_err());
        // Inside a quantifier, the element's entry shadows the iteration variable.
        is(
            "some x in xs satisfies count(items[x = 1]) > 0",
            r#"{"xs": [5], "items": [{"x": 1}]}"#,
            json!(true),
        );
        is(
            "some o in orders satisfies count(o.lines[qty > 1]) > 0",
            r#"{"orders": [{"lines": [{"qty": 1}]}, {"lines": [{"qty": 3}]}]}"#,
            json!(true),
        );
        is(
            "items[is defined(price)]",
            r#"{"items": [{"price": 1}, {"name": "a"}]}"#,
            json!([{"price": 1}]),
        );
        is(
            "items[is defined(price)]",
            r#"{"price": 0, "items": [{"price": 1}, {"name": "a"}]}"#,
            json!([{"price": 1}, {"name": "a"}]),
        );
        // Indexes: 1-based, negative from the end, then a path on the element.
        is("items[1].price", items, json!(5));
        is("items[-1].price", items, json!(12));
        is("items[type = \"x\"][-1].price", items, json!(12));
        is("[\"a\", \"b\"][2]", "{}", json!("b"));
        // Past either end FEEL gives null; CEL fails. Not a list: FEEL null, CEL fails.
        for (feel, vars) in [
            ("items[4]", items),
            ("items[-4]", items),
            ("items[1]", r#"{"items": []}"#),
            ("items[1]", r#"{"items": {"a": 1}}"#),
            ("items[a = 1]", r#"{"items": {"a": 1}}"#),
            ("items[a = 1]", r#"{"items": "a"}"#),
            ("items[1].missing", items),
        ] {
            assert!(eval_feel(feel, vars).is_err(), "{feel} over {vars}");
        }
        // Refused, with the offset: a condition that may be a number (FEEL would index
        // by it), `[0]`, a decimal index, a projection after a filter.
        for refused in [
            "items[active]",
            "items[item.active]",
            "items[n + 1]",
            "items[if a then 1 else 2]",
            "items[count(xs)]",
            "items[0]",
            "items[1.5]",
            "items[99999999999999999999]",
            "items[a > 1].price",
            "items[a > 1",
        ] {
            let e = feel_to_cel(refused).expect_err(refused);
            assert!(e.contains("offset"), "{refused}: {e}");
        }
    }

    /// Every FEEL seed of the `expr` fuzz target is in the subset, so the fuzzer starts
    /// from translations that compile rather than from refusals.
    #[test]
    fn the_fuzz_seeds_translate_and_compile() {
        let seeds = include_str!("../../fuzz/feel.seeds");
        for line in seeds
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            let feel = line.strip_prefix('=').unwrap_or(line);
            let cel = feel_to_cel(feel).unwrap_or_else(|e| panic!("{line}: {e}"));
            crate::expr::Expression::compile(&cel, crate::model::Pos::default(), 4096)
                .unwrap_or_else(|e| panic!("{line} as {cel}: {e:?}"));
        }
    }

    #[test]
    fn translated_conditions_compile_as_cel() {
        let cel = feel_to_cel("(x > 1 or y < 2) and not(z = \"a\")").unwrap();
        crate::expr::Expression::compile(&cel, crate::model::Pos::default(), 4096).unwrap();
    }
}
