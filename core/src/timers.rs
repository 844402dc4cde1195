//! Timer names: the strings the store persists for each timer row, and what they mean.
//!
//! A name is `<kind>:<node id>`; the kind letter says which machinery armed it:
//! `r` a retry park (E4), `t` a route-less `q:timeout` window (L5), `b` a timer boundary
//! event (the id is the boundary's) or the timer start of an event sub-process (the id is
//! the start event's: it is a boundary of the enclosing scope in all but name), `c` an
//! intermediate timer catch event. The node id
//! follows the first colon verbatim, so ids containing colons round-trip.

use qflow_loader::iso8601;
use qflow_loader::model::{BoundaryTrigger, DurationMs, NodeIdx, NodeKind, TimeKind, TimerDef};
use serde::{Deserialize, Serialize};

use super::run::Run;
use super::{codes, Effect, Variables};

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
    /// `l:<task>`: the lock a worker holds on a pull task's attempt expires (P1).
    Lock,
    /// `~run`: the shell's in-flight lease of an instance (C7a). The core never arms it;
    /// the runtime turns its firing into [`crate::Input::Redrive`].
    Lease,
}

impl TimerKind {
    fn letter(self) -> char {
        match self {
            TimerKind::Retry => 'r',
            TimerKind::Timeout => 't',
            TimerKind::Boundary => 'b',
            TimerKind::Catch => 'c',
            TimerKind::Lock => 'l',
            TimerKind::Lease => '~',
        }
    }
}

/// The one rendering of the lease timer's name.
const LEASE: &str = "~run";

/// A timer's name, typed: its kind and the node it belongs to. Stored (in snapshots and
/// timer rows) as its rendering `<letter>:<node id>`, or `~run` for the lease; the node
/// id follows the first colon verbatim, so ids containing colons round-trip. Holds the
/// rendering, so handing the name to a store costs nothing.
#[derive(Debug, Clone)]
pub struct TimerName {
    rendered: String,
    kind: TimerKind,
}

impl TimerName {
    /// The timer of `kind` for `node`. For [`TimerKind::Lease`] use [`TimerName::lease`].
    pub fn new(kind: TimerKind, node: &str) -> TimerName {
        if kind == TimerKind::Lease {
            return TimerName::lease();
        }
        let mut rendered = String::with_capacity(2 + node.len());
        rendered.push(kind.letter());
        rendered.push(':');
        rendered.push_str(node);
        TimerName { rendered, kind }
    }

    /// The instance's in-flight lease timer.
    pub fn lease() -> TimerName {
        TimerName {
            rendered: LEASE.to_owned(),
            kind: TimerKind::Lease,
        }
    }

    /// `None` for a name no engine version writes.
    pub fn parse(name: &str) -> Option<TimerName> {
        if name == LEASE {
            return Some(TimerName::lease());
        }
        let (kind, _) = name.split_once(':')?;
        let kind = match kind {
            "r" => TimerKind::Retry,
            "t" => TimerKind::Timeout,
            "b" => TimerKind::Boundary,
            "c" => TimerKind::Catch,
            "l" => TimerKind::Lock,
            _ => return None,
        };
        Some(TimerName {
            rendered: name.to_owned(),
            kind,
        })
    }

    pub fn kind(&self) -> TimerKind {
        self.kind
    }

    /// The node the timer belongs to; `None` for the lease, which belongs to the instance.
    pub fn node(&self) -> Option<&str> {
        match self.kind {
            TimerKind::Lease => None,
            _ => Some(&self.rendered[2..]),
        }
    }

    /// The stored rendering.
    pub fn as_str(&self) -> &str {
        &self.rendered
    }
}

// Equality, order and hash are the rendering's (the kind follows from it), so a name can
// be looked up by its stored text.
impl PartialEq for TimerName {
    fn eq(&self, other: &TimerName) -> bool {
        self.rendered == other.rendered
    }
}

impl Eq for TimerName {}

impl PartialEq<str> for TimerName {
    fn eq(&self, other: &str) -> bool {
        self.rendered == other
    }
}

impl PartialEq<&str> for TimerName {
    fn eq(&self, other: &&str) -> bool {
        self.rendered == *other
    }
}

impl PartialOrd for TimerName {
    fn partial_cmp(&self, other: &TimerName) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TimerName {
    fn cmp(&self, other: &TimerName) -> std::cmp::Ordering {
        self.rendered.cmp(&other.rendered)
    }
}

impl std::hash::Hash for TimerName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.rendered.hash(state)
    }
}

impl std::borrow::Borrow<str> for TimerName {
    fn borrow(&self) -> &str {
        &self.rendered
    }
}

impl std::fmt::Display for TimerName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.rendered)
    }
}

impl std::str::FromStr for TimerName {
    type Err = String;

    fn from_str(s: &str) -> Result<TimerName, String> {
        TimerName::parse(s).ok_or_else(|| {
            format!("`{s}` is not a timer name (`r:`, `t:`, `b:`, `c:` or `l:` and a node id, or `~run`)")
        })
    }
}

impl Serialize for TimerName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.rendered)
    }
}

impl<'de> Deserialize<'de> for TimerName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<TimerName, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The timer's definition as it stands over `vars`: a computed one evaluated and read as
/// the ISO-8601 text of its kind; any other as it is.
pub(crate) fn resolve(timer: &TimerDef, vars: &Variables) -> Result<TimerDef, String> {
    let TimerDef::Computed { kind, expression } = timer else {
        return Ok(timer.clone());
    };
    let source = expression.source();
    let text = match expression.eval(vars) {
        Ok(serde_json::Value::String(text)) => text,
        Ok(other) => {
            return Err(format!(
                "the timer expression `{source}` gave {other}, not ISO-8601 text"
            ))
        }
        Err(e) => return Err(format!("the timer expression `{source}`: {e}")),
    };
    let read = match kind {
        TimeKind::Duration => iso8601::parse_duration(&text).map(TimerDef::Duration),
        TimeKind::Date => {
            iso8601::parse_date_time(&text).map(|epoch_ms| TimerDef::Date { epoch_ms })
        }
        TimeKind::Cycle => TimerDef::cycle_from_text(&text),
    };
    read.map_err(|why| format!("the timer expression `{source}` gave `{text}`: {why}"))
}

/// Arming and resolving timers of a step in progress.
impl Run<'_> {
    /// `now + span`, saturating: a span beyond the i64 range lands at the end of time.
    pub(super) fn after(&self, span: DurationMs) -> i64 {
        self.now_ms
            .saturating_add(i64::try_from(span.0).unwrap_or(i64::MAX))
    }

    /// The timer's definition as it stands now at node `at`: a computed one evaluated
    /// over the instance variables (with the locals of the scopes `at` runs in over them,
    /// `locals::event_vars`) and read as the ISO-8601 text of its kind.
    pub(super) fn resolve_timer(&self, at: NodeIdx, timer: &TimerDef) -> Result<TimerDef, String> {
        if !matches!(timer, TimerDef::Computed { .. }) {
            return resolve(timer, &self.snap.vars);
        }
        resolve(timer, &super::locals::event_vars(self.p, &self.snap, at))
    }

    /// When `timer`, armed now at node `at`, is due; `None` when a computed timer does
    /// not evaluate, after failing the instance at `at` (`EXPRESSION_FAILED`).
    pub(super) fn due_at(&mut self, at: NodeIdx, timer: &TimerDef) -> Option<i64> {
        match self.resolve_timer(at, timer) {
            Ok(TimerDef::Duration(d)) => Some(self.after(d)),
            Ok(TimerDef::Date { epoch_ms }) => Some(epoch_ms),
            Ok(TimerDef::Cycle { interval, .. }) => Some(self.after(interval)),
            // A schedule with no instant left (past the year 9999) never fires.
            Ok(TimerDef::Cron(cron)) => Some(cron.next_after(self.now_ms).unwrap_or(i64::MAX)),
            Ok(TimerDef::Computed { .. }) => None,
            Err(message) => {
                self.fail(codes::EXPRESSION_FAILED, Some(at), None, message);
                None
            }
        }
    }

    /// Arms the timer boundaries of `host` (and, for a sub-process, the timer starts of
    /// its event sub-processes). All their dues are worked out first: if a computed one
    /// does not evaluate, the instance has failed, nothing is armed, and the caller must
    /// stop (`false`).
    #[must_use]
    pub(super) fn arm_boundaries(&mut self, host: NodeIdx) -> bool {
        let boundaries: Vec<NodeIdx> = self
            .p
            .boundaries_of(host.plain())
            .map(|b| self.p.attached(host, b))
            .collect();
        let mut dues = Vec::new();
        for &b in &boundaries {
            if let NodeKind::Boundary(bd) = &self.p.node(b).kind {
                if let BoundaryTrigger::Timer(timer) = &bd.trigger {
                    match self.due_at(b, timer) {
                        Some(due) => dues.push((b, due)),
                        None => return false,
                    }
                }
            }
        }
        for (b, due) in dues {
            let name = TimerName::new(TimerKind::Boundary, &self.id(b));
            // A resume does not arm again what had fired for good before the failure.
            if !self.snap.spent.iter().any(|s| s == name.as_str()) {
                self.arm(name, due);
            }
        }
        if !self.p.conditionals.is_empty() {
            for b in boundaries {
                self.condition_armed(b);
            }
        }
        if matches!(self.p.node(host).kind, NodeKind::SubProcess) {
            return self.arm_event_starts(Some(host));
        }
        true
    }

    /// Arms (or re-arms) the timer `name` with a fresh incarnation.
    pub(super) fn arm(&mut self, name: TimerName, due_at_ms: i64) {
        // u32 incarnations last 4 billion arms per instance; saturating keeps it total.
        let incarnation = self.snap.incarnation.saturating_add(1);
        self.snap.incarnation = incarnation;
        if let Some(old) = self
            .snap
            .timers
            .insert(name.as_str().to_owned(), incarnation)
        {
            // The store's row is upserted: should this arm be taken back in this step,
            // the row it replaced is the one to resolve.
            self.rearmed
                .push((name.as_str().to_owned(), old, incarnation));
        }
        self.effects.push(Effect::ArmTimer {
            name,
            due_at_ms,
            incarnation,
        });
    }

    /// Resolves the live timer `name`, if any.
    pub(super) fn resolve(&mut self, name: &TimerName) {
        if let Some(incarnation) = self.snap.timers.remove(name.as_str()) {
            self.snap.cycles.remove(name.as_str());
            self.push_resolve(name.clone(), incarnation);
        }
    }

    pub(super) fn resolve_all_timers(&mut self) {
        let live = std::mem::take(&mut self.snap.timers);
        for (name, incarnation) in live {
            // Every key was written by `arm`; one that does not parse names no row.
            if let Some(name) = TimerName::parse(&name) {
                self.push_resolve(name, incarnation);
            }
        }
        self.snap.cycles.clear();
    }

    /// Resolves the row of timer `name` at `incarnation`, netted against this step's
    /// own arms: a timer armed earlier in the same step never reaches the store (its
    /// `ArmTimer` is taken back — stores apply resolves before arms, so resolving it
    /// would leave the armed row behind), and the row that arm would have replaced, if
    /// any, is resolved instead.
    fn push_resolve(&mut self, name: TimerName, incarnation: u32) {
        let armed_here = self.effects.iter().position(|e| {
            matches!(e, Effect::ArmTimer { name: n, incarnation: i, .. }
                if *i == incarnation && n == &name)
        });
        let Some(at) = armed_here else {
            self.effects
                .push(Effect::ResolveTimer { name, incarnation });
            return;
        };
        self.effects.remove(at);
        let replaced = self
            .rearmed
            .iter()
            .find(|(n, _, new)| *new == incarnation && n == name.as_str())
            .map(|(_, old, _)| *old);
        if let Some(old) = replaced {
            self.push_resolve(name, old);
        }
    }

    /// Resolves every timer that belongs to the activity `idx`: its timeout window, its
    /// retry park, its catch timer, its boundary timers and, for a sub-process, the timer
    /// starts of its event sub-processes.
    pub(super) fn disarm(&mut self, idx: NodeIdx) {
        if !self.snap.conditions.is_empty() {
            self.forget_conditions_of(idx);
        }
        if self.snap.timers.is_empty() {
            return;
        }
        let node_key = self.id(idx);
        let node: &str = &node_key;
        for kind in [
            TimerKind::Retry,
            TimerKind::Timeout,
            TimerKind::Catch,
            TimerKind::Lock,
        ] {
            self.resolve(&TimerName::new(kind, node));
        }
        let boundaries: Vec<NodeIdx> = self
            .p
            .boundaries_of(idx.plain())
            .map(|b| self.p.attached(idx, b))
            .collect();
        for b in boundaries {
            self.resolve(&TimerName::new(TimerKind::Boundary, &self.id(b)));
        }
        if matches!(self.p.node(idx).kind, NodeKind::SubProcess) {
            self.disarm_event_starts(Some(idx));
        }
        if matches!(self.p.node(idx).kind, NodeKind::EventBasedGateway) {
            let outgoing = &self.p.node(idx).outgoing;
            for f in outgoing {
                let target_key = self.id(self.p.attached(idx, self.p.flow(*f).target));
                let target: &str = &target_key;
                self.resolve(&TimerName::new(TimerKind::Catch, target));
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
            TimerKind::Lock,
        ] {
            let name = TimerName::new(kind, "a:b");
            assert_eq!(TimerName::parse(name.as_str()).as_ref(), Some(&name));
            assert_eq!(name.node(), Some("a:b"));
            assert_eq!(name.kind(), kind);
        }
        assert_eq!(TimerName::parse("~run"), Some(TimerName::lease()));
        assert_eq!(TimerName::lease().node(), None);
        assert_eq!(TimerName::new(TimerKind::Lease, "x"), TimerName::lease());
        assert_eq!(TimerName::parse("x:node"), None);
        assert_eq!(TimerName::parse("nocolon"), None);
        assert_eq!(TimerName::parse("~run:x"), None);
        assert!("q:x".parse::<TimerName>().unwrap_err().contains("`q:x`"));
    }

    /// The trait impls agree with the rendering: maps keyed by `TimerName` are looked up
    /// by `&str` (`Borrow`), which is only sound when equality, order and hash are the
    /// rendering's too.
    #[test]
    fn equality_order_hash_and_borrow_are_the_renderings() {
        use std::collections::{BTreeMap, HashSet};
        use std::hash::{BuildHasher, RandomState};

        let retry = TimerName::new(TimerKind::Retry, "pay");
        let boundary = TimerName::new(TimerKind::Boundary, "late");
        assert!(retry == "r:pay" && retry != "r:other");
        assert!(retry == *"r:pay" && retry != *"t:pay");
        assert_eq!(retry.partial_cmp(&boundary), Some("r:pay".cmp("b:late")));
        assert!(boundary < retry, "ordered by rendering: b: before r:");
        let hasher = RandomState::new();
        assert_eq!(hasher.hash_one(&retry), hasher.hash_one("r:pay"));
        assert_ne!(hasher.hash_one(&retry), hasher.hash_one(&boundary));
        let by_name = BTreeMap::from([(retry.clone(), 1), (boundary.clone(), 2)]);
        assert_eq!(by_name.get("r:pay"), Some(&1));
        assert_eq!(by_name.get("b:late"), Some(&2));
        assert_eq!(by_name.get("xyzzy"), None);
        let set: HashSet<TimerName> = HashSet::from([retry.clone()]);
        assert!(set.contains("r:pay") && !set.contains(""));
        let borrowed: &str = std::borrow::Borrow::borrow(&retry);
        assert_eq!(borrowed, "r:pay");
    }
}
