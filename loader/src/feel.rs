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
//! c` / `every x in xs satisfies c` (CEL's `exists` / `all` macros), and the functions
//! `contains`, `starts with`, `ends with` and `count`. Everything else —
//! indexing and filters (`items[1]`, `items[x > 1]`), other arithmetic, decimal literals
//! in a sum, function calls, ranges, `in` outside a quantifier, `between`, `for`, names
//! with spaces — is refused with a message, never approximated. Each added construct
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
    let toks = lex(src, dialect)?;
    let mut p = P {
        toks: &toks,
        i: 0,
        depth: 0,
        dialect,
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
    }
}

fn lex(src: &str, dialect: Dialect) -> Result<Vec<Tok>, String> {
    let subset = match dialect {
        Dialect::Feel => "the supported FEEL subset (comparisons, and/or/not, literals, lists, contexts, paths, whole-number sums, string concatenation, if-then-else, some/every)",
        Dialect::Juel => "the supported JUEL subset (comparisons, &&/||/!, literals, paths)",
    };
    let chars: Vec<(usize, char)> = src.char_indices().collect();
    let mut out = Vec::new();
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
                let mut j = i + 1;
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
                        if !word.is_ascii() || word.split('.').any(is_cel_reserved) {
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
        i += len;
    }
    Ok(out)
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

struct P<'a> {
    toks: &'a [Tok],
    i: usize,
    depth: usize,
    dialect: Dialect,
}

impl P<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.i)
    }

    fn or(&mut self) -> Result<String, String> {
        let mut left = self.and()?;
        while self.peek() == Some(&Tok::Or) {
            self.i += 1;
            let right = self.and()?;
            left = format!("{left} || {right}");
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<String, String> {
        let mut left = self.cmp()?;
        while self.peek() == Some(&Tok::And) {
            self.i += 1;
            let right = self.cmp()?;
            left = format!("{left} && {right}");
        }
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
            Tok::Path(p) if self.i == at + 1 => {
                if !paths.contains(p) {
                    paths.push(p.clone());
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

    fn atom(&mut self) -> Result<String, String> {
        let dialect = self.dialect.name();
        let tok = self
            .peek()
            .cloned()
            .ok_or_else(|| format!("the {dialect} condition ends too early"))?;
        self.i += 1;
        match tok {
            Tok::Num(n) => Ok(n),
            Tok::Str(s) => Ok(format!("\"{s}\"")),
            Tok::Path(p) => {
                if self.dialect == Dialect::Feel {
                    // `starts with(…)`, `ends with(…)`: FEEL names with a space.
                    let spaced = matches!(p.as_str(), "starts" | "ends")
                        && self.peek() == Some(&Tok::Path("with".into()))
                        && self.toks.get(self.i + 1) == Some(&Tok::LParen);
                    if spaced {
                        self.i += 1;
                        let name = format!("{p} with");
                        return self.nested(|s| s.function(&name));
                    }
                    if matches!(p.as_str(), "contains" | "count")
                        && self.peek() == Some(&Tok::LParen)
                    {
                        return self.nested(|s| s.function(&p));
                    }
                }
                if self.peek() == Some(&Tok::LParen) {
                    return Err(format!(
                        "function call `{p}(…)` is outside the supported {dialect} subset"
                    ));
                }
                Ok(p)
            }
            Tok::True => Ok("true".into()),
            Tok::False => Ok("false".into()),
            Tok::Null => Ok("null".into()),
            Tok::Not => {
                if self.peek() != Some(&Tok::LParen) {
                    return Err("`not` must be written as a call: not(…)".into());
                }
                self.i += 1;
                let inner = self.group()?;
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
                Ok(format!("!{operand}"))
            }
            Tok::LParen => {
                let inner = self.group()?;
                Ok(format!("({inner})"))
            }
            Tok::LBracket => self.list(),
            Tok::LBrace => self.context(),
            Tok::Kw("if") => self.nested(Self::if_then_else),
            Tok::Kw(q @ ("some" | "every")) => self.nested(|p| p.quantified(q)),
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
        let cond = self.or()?;
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
    fn feel_list_literals_translate_and_indexing_stays_refused() {
        assert_eq!(
            feel_to_cel(r#"["ubuntu", "windows", 3, [a.b]]"#).unwrap(),
            r#"["ubuntu", "windows", 3, [a.b]]"#
        );
        assert_eq!(feel_to_cel("[]").unwrap(), "[]");
        for refused in ["items[1]", "[1, 2", "[1 2]", "items[x > 1]", "[1,]"] {
            assert!(feel_to_cel(refused).is_err(), "{refused}");
        }
        assert!(juel_to_cel("${[1]}").is_err());
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
        for refused in [
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

    #[test]
    fn translated_conditions_compile_as_cel() {
        let cel = feel_to_cel("(x > 1 or y < 2) and not(z = \"a\")").unwrap();
        crate::expr::Expression::compile(&cel, crate::model::Pos::default(), 4096).unwrap();
    }
}
