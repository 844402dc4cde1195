//! The instance tree (SPEC E9): the scope instances, activity instances and tokens of one
//! process instance, read off its token frontier.
//!
//! An instance's state names every activity instance by its key (`Process::key`): the
//! node's id for the first instance of a node in its scope instance, `<id>@<c>` for a
//! further one, `<body>#<k>` for a multi-instance activity's inner instance, and a
//! `sub@2/` prefix per enclosing scope instance that is not the first. A token is such a
//! key in the sorted frontier (`Snapshot::tokens`); a scope instance is a sub-process (or
//! event sub-process) token together with everything whose key it prefixes.
//!
//! This module is the one place that decides which instance a token becomes and what lies
//! inside a scope instance. It knows the model and the frontier, nothing else: it neither
//! moves tokens through the graph, nor fails an instance, nor emits an effect. The element
//! modules (`flow`, `scope`, `gateway`, `multi`, `event_sub`, `compensation`, `stall`)
//! call it through `Run` or directly; it calls none of them.

use qflow_loader::model::{NodeIdx, NodeKind, Process};

use crate::codes;

/// Most instances of one node that may run at once in one scope instance (`pay`,
/// `pay@2`, … `pay@1000`): beyond it a token arriving fails the instance with
/// `ACTIVITY_INSTANCE_LIMIT` rather than let the frontier grow without bound.
pub const ACTIVITY_INSTANCES_MAX: u32 = 1_000;

/// Whether a token stands at the activity instance `idx`.
pub(crate) fn holds(p: &Process, tokens: &[String], idx: NodeIdx) -> bool {
    let key = p.key(idx);
    tokens.binary_search_by(|t| t.as_str().cmp(&key)).is_ok()
}

/// Puts a token at `idx`, keeping the frontier sorted (a repeated key goes after its
/// equals, so that an old snapshot's two tokens under one name stay neighbours).
pub(crate) fn insert(p: &Process, tokens: &mut Vec<String>, idx: NodeIdx) {
    let key = p.key(idx);
    let at = tokens.partition_point(|t| t.as_str() <= &*key);
    tokens.insert(at, key.into_owned());
}

/// Takes one token away from `idx`; `false` when none stood there.
pub(crate) fn remove(p: &Process, tokens: &mut Vec<String>, idx: NodeIdx) -> bool {
    let key = p.key(idx);
    match tokens.iter().position(|t| *t == key) {
        Some(pos) => {
            tokens.remove(pos);
            true
        }
        None => false,
    }
}

/// What a token arriving at a node becomes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// This activity (or scope) instance: the node itself when no token stands there,
    /// else the first numbered instance `<id>@<c>` no token holds.
    At(NodeIdx),
    /// No instance can take the token: the process instance must fail with `code`.
    Refused { code: &'static str, message: String },
}

/// The activity instance a token arriving at `idx` becomes. A node that keeps no state
/// per instance (a gateway, an end event, a throw) takes any number of tokens under its
/// own key; a node that does (`Process::takes_copies`) takes one per instance. Refused:
/// a second run of a multi-instance body (its inner instances `i/<body>` are one set), a
/// second run of a sub-process nested deeper than `NodeIdx::RUN_LEVELS`, and more than
/// [`ACTIVITY_INSTANCES_MAX`] instances of one node at once.
pub(crate) fn arriving(p: &Process, tokens: &[String], idx: NodeIdx) -> Arrival {
    if !holds(p, tokens, idx) {
        return Arrival::At(idx);
    }
    if matches!(p.node(idx).kind, NodeKind::SubProcess) {
        let why = if p.multi_instance(idx).is_some() {
            Some("a multi-instance activity entered again while its inner instances run")
        } else if p.level(idx) >= NodeIdx::RUN_LEVELS {
            Some("a sub-process nested this deep runs one instance at a time")
        } else {
            None
        };
        if let Some(why) = why {
            return Arrival::Refused {
                code: codes::UNSUPPORTED_ELEMENT,
                message: format!(
                    "a second token entered `{}` while it runs: {why} \
                     (docs/activity-instances.md)",
                    p.key(idx)
                ),
            };
        }
    }
    if !p.takes_copies(idx) {
        return Arrival::At(idx);
    }
    match (2..=ACTIVITY_INSTANCES_MAX)
        .map(|c| idx.with_copy(c))
        .find(|i| !holds(p, tokens, *i))
    {
        Some(free) => Arrival::At(free),
        None => Arrival::Refused {
            code: codes::ACTIVITY_INSTANCE_LIMIT,
            message: format!(
                "a token arrived at `{}` while {ACTIVITY_INSTANCES_MAX} instances of it \
                 run at once",
                p.key(idx)
            ),
        },
    }
}

/// The scope instance `idx` runs in: its sub-process or event sub-process, in the run
/// and inner instance `idx` belongs to; `None` at the process level.
pub(crate) fn scope_of(p: &Process, idx: NodeIdx) -> Option<NodeIdx> {
    p.scope_instance(idx)
}

/// Whether `node` lies (at any depth) inside the scope instance `sp`. Reckoned per
/// instance: `task#2` is inside `sub#2`, not `sub#1`, and `sub@2/task` inside `sub@2`.
pub(crate) fn inside(p: &Process, node: NodeIdx, sp: NodeIdx) -> bool {
    let mut cur = node;
    while let Some(s) = scope_of(p, cur) {
        if s == sp {
            return true;
        }
        cur = s;
    }
    false
}

/// Whether `node` lies inside another instance of the sub-process that holds the scope
/// instance `sp` (`sub@2/task` when `sp` is `sub`): such a token reaches that instance's
/// joins and ends, never those of `sp`.
pub(crate) fn in_other_instance(p: &Process, node: NodeIdx, sp: NodeIdx) -> bool {
    let mut cur = scope_of(p, node);
    while let Some(a) = cur {
        if a.plain() == sp.plain() {
            return a != sp;
        }
        cur = scope_of(p, a);
    }
    false
}

/// The first of `keys` (frontier order) that names a node inside the scope instance `sp`.
pub(crate) fn first_inside<'k>(
    p: &Process,
    keys: impl IntoIterator<Item = &'k String>,
    sp: NodeIdx,
) -> Option<NodeIdx> {
    keys.into_iter()
        .filter_map(|k| p.find(k))
        .find(|i| inside(p, *i, sp))
}

/// The nodes a token at `idx` may wait at, in order: the node itself, the catches racing
/// after it (an event-based gateway), then its boundary events (an activity), each in
/// the activity instance of `idx` (`b:late@2` for `pay@2`).
pub(crate) fn waits_of(p: &Process, idx: NodeIdx) -> Vec<NodeIdx> {
    let node = p.node(idx);
    let mut waits: Vec<NodeIdx> = if matches!(node.kind, NodeKind::EventBasedGateway) {
        node.outgoing
            .iter()
            .map(|f| p.attached(idx, p.flow(*f).target))
            .collect()
    } else {
        vec![idx]
    };
    waits.extend(p.boundaries_of(idx.plain()).map(|b| p.attached(idx, b)));
    waits
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A split into one sub-process that holds a task and a gateway, and a split into one
    /// gateway at the process level.
    const MODEL: &str = r#"<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
        xmlns:q="urn:qflow:bpmn:1" id="d" targetNamespace="urn:t">
      <process id="p" isExecutable="true">
        <startEvent id="s"/>
        <sequenceFlow id="f1" sourceRef="s" targetRef="split"/>
        <parallelGateway id="split"/>
        <sequenceFlow id="f2" sourceRef="split" targetRef="sub"/>
        <sequenceFlow id="f3" sourceRef="split" targetRef="sub"/>
        <sequenceFlow id="f4" sourceRef="split" targetRef="merge"/>
        <subProcess id="sub">
          <startEvent id="in"/>
          <sequenceFlow id="g1" sourceRef="in" targetRef="pay"/>
          <serviceTask id="pay" q:task="pay"/>
          <sequenceFlow id="g2" sourceRef="pay" targetRef="out"/>
          <endEvent id="out"/>
        </subProcess>
        <sequenceFlow id="f5" sourceRef="sub" targetRef="merge"/>
        <exclusiveGateway id="merge"/>
        <sequenceFlow id="f6" sourceRef="merge" targetRef="e"/>
        <endEvent id="e"/>
      </process>
    </definitions>"#;

    fn process() -> Process {
        let loaded = qflow_loader::load_str(MODEL).expect("the model loads");
        loaded.definitions[0].process.clone()
    }

    fn at(p: &Process, tokens: &[String], name: &str) -> NodeIdx {
        let idx = p.find(name).expect("a node of the model");
        match arriving(p, tokens, idx) {
            Arrival::At(i) => i,
            Arrival::Refused { message, .. } => panic!("refused: {message}"),
        }
    }

    #[test]
    fn a_second_token_at_an_activity_is_its_next_free_instance() {
        let p = process();
        let mut tokens = Vec::new();
        for expected in ["pay", "pay@2", "pay@3"] {
            let i = at(&p, &tokens, "pay");
            assert_eq!(p.key(i), expected);
            insert(&p, &mut tokens, i);
        }
        // The freed second instance is the next one taken, and the frontier stays sorted.
        assert!(remove(&p, &mut tokens, p.find("pay@2").unwrap()));
        assert!(!remove(&p, &mut tokens, p.find("pay@2").unwrap()));
        assert_eq!(p.key(at(&p, &tokens, "pay")), "pay@2");
        assert_eq!(tokens, ["pay", "pay@3"]);
        // A gateway keeps no state per instance: its tokens share its name.
        let merge = p.find("merge").unwrap();
        insert(&p, &mut tokens, merge);
        assert_eq!(at(&p, &tokens, "merge"), merge);
    }

    #[test]
    fn a_second_run_of_a_sub_process_has_its_own_inside() {
        let p = process();
        let mut tokens = Vec::new();
        let first = at(&p, &tokens, "sub");
        insert(&p, &mut tokens, first);
        let second = at(&p, &tokens, "sub");
        assert_eq!(p.key(second), "sub@2");
        insert(&p, &mut tokens, second);
        let pay = p.child(first, p.find("pay").unwrap());
        let pay2 = p.child(second, p.find("pay").unwrap());
        assert_eq!((&*p.key(pay), &*p.key(pay2)), ("pay", "sub@2/pay"));
        assert_eq!(scope_of(&p, pay2), Some(second));
        assert!(inside(&p, pay, first) && !inside(&p, pay, second));
        assert!(inside(&p, pay2, second) && !inside(&p, pay2, first));
        assert!(in_other_instance(&p, pay2, first) && !in_other_instance(&p, pay, first));
        insert(&p, &mut tokens, pay2);
        assert_eq!(first_inside(&p, &tokens, first), None);
        assert_eq!(first_inside(&p, &tokens, second), Some(pay2));
        // Two runs of the inside's task are two instances of it in that run.
        assert_eq!(p.key(at(&p, &tokens, "sub@2/pay")), "sub@2/pay@2");
    }

    #[test]
    fn more_instances_than_the_bound_are_refused_with_the_limit_code() {
        let p = process();
        let pay = p.find("pay").unwrap();
        let mut tokens = vec![p.key(pay).into_owned()];
        tokens.extend((2..=ACTIVITY_INSTANCES_MAX).map(|c| p.key(pay.with_copy(c)).into_owned()));
        tokens.sort();
        match arriving(&p, &tokens, pay) {
            Arrival::Refused { code, message } => {
                assert_eq!(code, codes::ACTIVITY_INSTANCE_LIMIT);
                assert!(message.contains("`pay`"), "{message}");
            }
            other => panic!("not refused: {other:?}"),
        }
    }
}
