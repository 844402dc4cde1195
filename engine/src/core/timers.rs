//! Timer names: the strings the store persists for each timer row, and what they mean.
//!
//! A name is `<kind>:<node id>`; the kind letter says which machinery armed it:
//! `r` a retry park (E4), `t` a route-less `q:timeout` window (L5), `b` a timer boundary
//! event (the id is the boundary's), `c` an intermediate timer catch event. The node id
//! follows the first colon verbatim, so ids containing colons round-trip.

use serde::Serialize;

/// Which machinery a timer belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimerKind {
    /// `r:<task>`: the backoff park of a failed attempt; firing re-drives the task.
    Retry,
    /// `t:<task>`: the route-less timeout window of the attempt in flight.
    Timeout,
    /// `b:<boundary>`: a timer boundary event attached to an activity.
    Boundary,
    /// `c:<event>`: an intermediate timer catch event.
    Catch,
}

impl TimerKind {
    fn letter(self) -> char {
        match self {
            TimerKind::Retry => 'r',
            TimerKind::Timeout => 't',
            TimerKind::Boundary => 'b',
            TimerKind::Catch => 'c',
        }
    }
}

/// A parsed timer name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerName<'a> {
    pub kind: TimerKind,
    pub node: &'a str,
}

impl<'a> TimerName<'a> {
    pub fn new(kind: TimerKind, node: &'a str) -> TimerName<'a> {
        TimerName { kind, node }
    }

    /// `None` for a name no engine version writes.
    pub fn parse(name: &'a str) -> Option<TimerName<'a>> {
        let (kind, node) = name.split_once(':')?;
        let kind = match kind {
            "r" => TimerKind::Retry,
            "t" => TimerKind::Timeout,
            "b" => TimerKind::Boundary,
            "c" => TimerKind::Catch,
            _ => return None,
        };
        Some(TimerName { kind, node })
    }

    pub fn render(&self) -> String {
        let mut s = String::with_capacity(2 + self.node.len());
        s.push(self.kind.letter());
        s.push(':');
        s.push_str(self.node);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_even_with_colons_in_ids() {
        for kind in [
            TimerKind::Retry,
            TimerKind::Timeout,
            TimerKind::Boundary,
            TimerKind::Catch,
        ] {
            let name = TimerName::new(kind, "a:b").render();
            assert_eq!(TimerName::parse(&name), Some(TimerName::new(kind, "a:b")));
        }
        assert_eq!(TimerName::parse("x:node"), None);
        assert_eq!(TimerName::parse("nocolon"), None);
    }
}
