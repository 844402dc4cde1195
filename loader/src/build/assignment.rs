//! A user task's assignment (L8): who may work on it, for the task list. Read from
//! Camunda 7's `camunda:assignee`, `camunda:candidateGroups` and `camunda:candidateUsers`
//! attributes (Activiti's and Flowable's namespaces read as Camunda's) and from Zeebe's
//! `<zeebe:assignmentDefinition assignee candidateGroups candidateUsers>`.
//!
//! Each value is static or an expression, as the vendor writes it:
//! - Camunda: a JUEL `${…}` (or `#{…}`) is an expression; anything else is a static
//!   name. `candidateGroups`/`candidateUsers` are comma-separated lists whose items may
//!   each be a static name or one `${…}` (a comma inside `${…}` does not split).
//! - Zeebe: a value starting with `=` is one FEEL expression for the whole attribute;
//!   otherwise a static name (assignee) or a comma-separated list of names.
//!
//! Expressions go through the JUEL or FEEL subset translation onto CEL (`crate::feel`);
//! anything outside it is refused (`Q210`), never approximated. Static names are bounded
//! (1 to [`ASSIGNMENT_NAME_CHARS_MAX`] characters, no control characters) and so is the
//! number of candidates ([`CANDIDATES_MAX`] groups, as many users): over a bound, or a
//! part given twice, is `Q211`. Evaluated names are bounded the same way when a token
//! enters the task (the core's `EXPRESSION_FAILED` otherwise).

use crate::expr::Expression;
use crate::feel::{feel_to_cel, juel_to_cel};
use crate::model::*;
use crate::xml::{Attr, Element, Ns};

use super::ProcessBuilder;

/// Which vendor wrote a value: decides what an expression looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Camunda,
    Zeebe,
}

/// The three parts of an assignment, as diagnostics name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Assignee,
    Groups,
    Users,
}

impl Part {
    fn attr(self) -> &'static str {
        match self {
            Part::Assignee => "assignee",
            Part::Groups => "candidateGroups",
            Part::Users => "candidateUsers",
        }
    }
}

impl<'a, 'd> ProcessBuilder<'a, 'd> {
    /// The assignment of the user task `el`, every problem reported; a part with a
    /// problem is left out (the definition is refused anyway).
    pub(super) fn assignment(&mut self, el: &Element) -> Assignment {
        let zeebe: Vec<&Element> = el
            .child(Ns::Bpmn, "extensionElements")
            .map(|x| {
                x.children_named(Ns::Zeebe, "assignmentDefinition")
                    .collect()
            })
            .unwrap_or_default();
        if let Some(second) = zeebe.get(1) {
            self.help(
                "Q211",
                second.pos,
                "zeebe:assignmentDefinition appears twice",
                "keep one zeebe:assignmentDefinition",
            );
        }
        let mut out = Assignment::default();
        for part in [Part::Assignee, Part::Groups, Part::Users] {
            let camunda = el.attr_ns(Ns::Camunda, part.attr());
            let zeebe = zeebe.first().and_then(|z| z.attr(part.attr()));
            let (attr, dialect) = match (camunda, zeebe) {
                (Some(c), Some(z)) => {
                    self.help(
                        "Q211",
                        z.pos,
                        format!(
                            "the {} of the user task is given twice: by camunda:{} (at {}) and \
                             by zeebe:assignmentDefinition",
                            part.attr(),
                            part.attr(),
                            c.pos
                        ),
                        "keep one of them",
                    );
                    continue;
                }
                (Some(c), None) => (c, Dialect::Camunda),
                (None, Some(z)) => (z, Dialect::Zeebe),
                (None, None) => continue,
            };
            match part {
                Part::Assignee => out.assignee = self.assignee(attr, dialect),
                Part::Groups => out.candidate_groups = self.candidates(attr, dialect, part),
                Part::Users => out.candidate_users = self.candidates(attr, dialect, part),
            }
        }
        out
    }

    /// The assignee: one static name or one expression. An empty value names nobody.
    fn assignee(&mut self, a: &Attr, dialect: Dialect) -> Option<NameSource> {
        let v = a.value.trim();
        if v.is_empty() {
            return None;
        }
        match dialect {
            Dialect::Zeebe if v.starts_with('=') => self.feel(a, Part::Assignee),
            Dialect::Camunda if has_juel(v) => self.juel(a, v, Part::Assignee),
            _ => self.static_name(a, v, Part::Assignee),
        }
    }

    /// Candidate groups or users: a list of static names and expressions, bounded.
    fn candidates(&mut self, a: &Attr, dialect: Dialect, part: Part) -> Vec<NameSource> {
        let v = a.value.trim();
        if v.is_empty() {
            return Vec::new();
        }
        if dialect == Dialect::Zeebe && v.starts_with('=') {
            return self.feel(a, part).into_iter().collect();
        }
        let items = match dialect {
            Dialect::Camunda => match split_juel_list(v) {
                Ok(items) => items,
                Err(why) => {
                    self.help(
                        "Q210",
                        a.pos,
                        format!("{} `{v}`: {why}", part.attr()),
                        "close every ${…}, or write the names without expressions",
                    );
                    return Vec::new();
                }
            },
            Dialect::Zeebe => v.split(',').map(str::trim).collect(),
        };
        if items.len() > CANDIDATES_MAX {
            self.help(
                "Q211",
                a.pos,
                format!(
                    "{} names {} entries; a user task has at most {CANDIDATES_MAX}",
                    part.attr(),
                    items.len()
                ),
                "give the task fewer candidates, or one group that holds them",
            );
            return Vec::new();
        }
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for item in items {
            let source = if dialect == Dialect::Camunda && has_juel(item) {
                self.juel(a, item, part)
            } else {
                self.static_name(a, item, part)
            };
            match source {
                Some(s) => out.push(s),
                None => ok = false,
            }
        }
        if ok {
            out
        } else {
            Vec::new()
        }
    }

    /// A static name, checked against the bounds.
    fn static_name(&mut self, a: &Attr, name: &str, part: Part) -> Option<NameSource> {
        let chars = name.chars().count();
        let why = if name.is_empty() {
            "an empty name in the list".to_owned()
        } else if chars > ASSIGNMENT_NAME_CHARS_MAX {
            format!(
                "the name `{}…` is {chars} characters long; at most {ASSIGNMENT_NAME_CHARS_MAX}",
                name.chars().take(24).collect::<String>()
            )
        } else if name.chars().any(char::is_control) {
            "a name holds a control character".to_owned()
        } else {
            return Some(NameSource::Static(name.to_owned()));
        };
        self.help(
            "Q211",
            a.pos,
            format!("{}: {why}", part.attr()),
            "write names of 1 to 128 characters, separated by commas",
        );
        None
    }

    /// A JUEL expression (Camunda), translated onto CEL.
    fn juel(&mut self, a: &Attr, text: &str, part: Part) -> Option<NameSource> {
        match juel_to_cel(text) {
            Ok(cel) => self.compiled_name(a, &cel, part),
            Err(why) => {
                self.help(
                    "Q210",
                    a.pos,
                    format!("the {} expression `{text}`: {why}", part.attr()),
                    "keep to a variable path such as ${initiator} or ${order.owner}, or write \
                     the names as static values",
                );
                None
            }
        }
    }

    /// A FEEL expression (Zeebe, the whole value after `=`), translated onto CEL.
    fn feel(&mut self, a: &Attr, part: Part) -> Option<NameSource> {
        let text = a.value.trim();
        match feel_to_cel(text.strip_prefix('=').unwrap_or(text)) {
            Ok(cel) => self.compiled_name(a, &cel, part),
            Err(why) => {
                self.help(
                    "Q210",
                    a.pos,
                    format!("the {} expression `{text}`: {why}", part.attr()),
                    "keep to a variable path such as = order.owner, or write the names as \
                     static values (comma-separated)",
                );
                None
            }
        }
    }

    fn compiled_name(&mut self, a: &Attr, cel: &str, part: Part) -> Option<NameSource> {
        match Expression::compile(cel, a.pos, self.ctx.opts.max_expr_len) {
            Ok(e) => Some(NameSource::Expression(e)),
            Err(e) => {
                self.help(
                    e.code,
                    a.pos,
                    format!("the {} expression: {}", part.attr(), e.message),
                    "fix the expression",
                );
                None
            }
        }
    }
}

/// Whether a Camunda value holds JUEL: it is then read as an expression, and one with
/// text around its `${…}` (Camunda's composite `user-${id}`) is refused by the
/// translation as outside the subset.
fn has_juel(v: &str) -> bool {
    v.contains("${") || v.contains("#{")
}

/// Splits a Camunda candidate list at the commas outside `${…}` / `#{…}`, trimming
/// each item. An unclosed `${` is an error.
fn split_juel_list(v: &str) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let mut start = 0;
    let mut depth = 0usize;
    let bytes = v.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'$' | b'#' if bytes.get(i + 1) == Some(&b'{') => {
                depth += 1;
                i += 1;
            }
            b'{' if depth > 0 => depth += 1,
            b'}' if depth > 0 => depth -= 1,
            b',' if depth == 0 => {
                items.push(v[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if depth > 0 {
        return Err("a `${` is not closed".to_owned());
    }
    items.push(v[start..].trim());
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camunda_lists_split_outside_expressions() {
        assert_eq!(split_juel_list("a, b ,c"), Ok(vec!["a", "b", "c"]));
        assert_eq!(
            split_juel_list("${x == 'a,b'}, sales"),
            Ok(vec!["${x == 'a,b'}", "sales"])
        );
        assert_eq!(split_juel_list("a,,b"), Ok(vec!["a", "", "b"]));
        assert!(split_juel_list("${a, b").is_err());
    }
}
