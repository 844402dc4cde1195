//! Timer names: the strings the store persists for each timer row, and what they mean.
//!
//! A name is `<kind>:<node id>`; the kind letter says which machinery armed it:
//! `r` a retry park (E4), `t` a route-less `q:timeout` window (L5), `b` a timer boundary
//! event (the id is the boundary's), `c` an intermediate timer catch event. The node id
//! follows the first colon verbatim, so ids containing colons round-trip.

use qflow_loader::model::{BoundaryTrigger, DurationMs, NodeIdx, NodeKind, TimerDef};
use serde::Serialize;

use super::flow::Run;
use super::Effect;

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

/// Arming and resolving timers of a step in progress.
impl Run<'_> {
    /// `now + span`, saturating: a span beyond the i64 range lands at the end of time.
    pub(super) fn after(&self, span: DurationMs) -> i64 {
        self.now_ms
            .saturating_add(i64::try_from(span.0).unwrap_or(i64::MAX))
    }

    pub(super) fn due_at(&self, timer: &TimerDef) -> i64 {
        match timer {
            TimerDef::Duration(d) => self.after(*d),
            TimerDef::Date { epoch_ms } => *epoch_ms,
            TimerDef::Cycle { interval, .. } => self.after(*interval),
        }
    }

    pub(super) fn arm_boundaries(&mut self, host: NodeIdx) {
        let boundaries: Vec<NodeIdx> = self.p.boundaries_of(host).collect();
        for b in boundaries {
            if let NodeKind::Boundary(bd) = &self.p.node(b).kind {
                if let BoundaryTrigger::Timer(timer) = &bd.trigger {
                    let due = self.due_at(timer);
                    self.arm(
                        TimerName::new(TimerKind::Boundary, self.id(b)).render(),
                        due,
                    );
                }
            }
        }
    }

    /// Arms (or re-arms) the timer `name` with a fresh incarnation.
    pub(super) fn arm(&mut self, name: String, due_at_ms: i64) {
        // u32 incarnations last 4 billion arms per instance; saturating keeps it total.
        let incarnation = self.snap.incarnation.saturating_add(1);
        self.snap.incarnation = incarnation;
        self.snap.timers.insert(name.clone(), incarnation);
        self.effects.push(Effect::ArmTimer {
            name,
            due_at_ms,
            incarnation,
        });
    }

    /// Resolves the live timer `name`, if any.
    pub(super) fn resolve(&mut self, name: &str) {
        if let Some(incarnation) = self.snap.timers.remove(name) {
            self.snap.cycles.remove(name);
            self.effects.push(Effect::ResolveTimer {
                name: name.to_owned(),
                incarnation,
            });
        }
    }

    pub(super) fn resolve_all_timers(&mut self) {
        let live = std::mem::take(&mut self.snap.timers);
        for (name, incarnation) in live {
            self.effects
                .push(Effect::ResolveTimer { name, incarnation });
        }
        self.snap.cycles.clear();
    }

    /// Resolves every timer that belongs to the activity `idx`: its timeout window, its
    /// retry park, its catch timer and its boundary timers.
    pub(super) fn disarm(&mut self, idx: NodeIdx) {
        if self.snap.timers.is_empty() {
            return;
        }
        let node = self.id(idx);
        for kind in [TimerKind::Retry, TimerKind::Timeout, TimerKind::Catch] {
            self.resolve(&TimerName::new(kind, node).render());
        }
        let boundaries: Vec<NodeIdx> = self.p.boundaries_of(idx).collect();
        for b in boundaries {
            self.resolve(&TimerName::new(TimerKind::Boundary, self.id(b)).render());
        }
        if matches!(self.p.node(idx).kind, NodeKind::EventBasedGateway) {
            let outgoing = &self.p.node(idx).outgoing;
            for f in outgoing {
                let target = self.id(self.p.flow(*f).target);
                self.resolve(&TimerName::new(TimerKind::Catch, target).render());
            }
        }
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
