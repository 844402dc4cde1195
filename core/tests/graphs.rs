//! Random process graphs (built in code, so shapes the loader would refuse are included)
//! driven by random scenarios: the step never panics, stays deterministic, and every
//! snapshot it writes round-trips. A robustness net under the hand-written cases.

mod common;

use std::collections::BTreeMap;

use common::build::{registered, Builder};
use proptest::prelude::*;
use qflow_core::sim::{self, Scenario, Scripted, ScriptedEvent};
use qflow_core::{PathEvent, Snapshot};
use qflow_loader::model::{
    Boundary, BoundaryTrigger, CatchTrigger, Definition, DurationMs, EndKind, MappingStyle,
    NodeKind, RetryPolicy, Task, TaskKind, TimerDef, Variables,
};

#[derive(Debug, Clone)]
enum Kind {
    Service {
        retry: bool,
    },
    /// An embedded sub-process around one service task (with or without a policy): two
    /// tokens entering it run two insides.
    Sub {
        retry: bool,
    },
    /// An embedded sub-process whose inside gets stuck: an exclusive split takes its
    /// first flow, into a service task, and both its flows meet at a parallel join, so
    /// the task's token waits there for ever. Nothing inside can move it; a boundary or
    /// live work elsewhere may.
    StuckSub {
        retry: bool,
    },
    User,
    Pass,
    Exclusive,
    Parallel,
    Inclusive,
    Wait(u64),
    End,
    Terminate,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        3 => any::<bool>().prop_map(|retry| Kind::Service { retry }),
        1 => any::<bool>().prop_map(|retry| Kind::Sub { retry }),
        1 => any::<bool>().prop_map(|retry| Kind::StuckSub { retry }),
        1 => Just(Kind::User),
        1 => Just(Kind::Pass),
        1 => Just(Kind::Exclusive),
        2 => Just(Kind::Parallel),
        1 => Just(Kind::Inclusive),
        1 => (1u64..20_000).prop_map(Kind::Wait),
        1 => Just(Kind::End),
        1 => Just(Kind::Terminate),
    ]
}

/// Nodes, forward flows `(from, to)` (indices into nodes, start is -1 → 0), a few back
/// edges, and which tasks get a timer boundary (and whether it interrupts).
#[derive(Debug, Clone)]
struct Shape {
    kinds: Vec<Kind>,
    flows: Vec<(usize, usize)>,
    boundaries: Vec<(usize, bool, u64)>,
    /// A process-level non-interrupting timer-cycle event sub-process around a service
    /// task with a policy, firing every this many ms (its runs may overlap).
    esp: Option<u64>,
}

fn shape() -> impl Strategy<Value = Shape> {
    proptest::collection::vec(kind(), 2..9).prop_flat_map(|kinds| {
        let n = kinds.len();
        (
            Just(kinds),
            proptest::collection::vec((0..n, 0..n), 1..(2 * n)),
            proptest::collection::vec((0..n, any::<bool>(), 1u64..30_000), 0..3),
            proptest::option::of(500u64..10_000),
        )
            .prop_map(|(kinds, flows, boundaries, esp)| Shape {
                kinds,
                flows,
                boundaries,
                esp,
            })
    })
}

fn policy(retry: bool) -> Option<RetryPolicy> {
    retry.then(|| RetryPolicy {
        max_attempts: std::num::NonZeroU32::new(3).unwrap(),
        ..RetryPolicy::default()
    })
}

/// A start event, a registered task `<id>t` and an end event inside the sub-process `sp`.
fn fill(b: &mut Builder, sp: qflow_loader::model::NodeIdx, id: &str, start: NodeKind, retry: bool) {
    let s = b.node(&format!("{id}s"), start);
    let t = b.node(
        &format!("{id}t"),
        registered(&format!("{id}t"), policy(retry)),
    );
    let e = b.node(&format!("{id}e"), NodeKind::EndEvent(EndKind::None));
    for n in [s, t, e] {
        b.inside(n, sp);
    }
    b.flow(s, t);
    b.flow(t, e);
}

/// Inside the sub-process `sp`: a start event, an exclusive split `<id>x` whose first
/// flow enters the registered task `<id>t` and whose second goes straight on, a parallel
/// join `<id>j` of both, and an end event. Only one branch ever reaches the join.
fn fill_stuck(b: &mut Builder, sp: qflow_loader::model::NodeIdx, id: &str, retry: bool) {
    let s = b.node(&format!("{id}s"), NodeKind::StartEvent);
    let x = b.node(
        &format!("{id}x"),
        NodeKind::ExclusiveGateway { default: None },
    );
    let t = b.node(
        &format!("{id}t"),
        registered(&format!("{id}t"), policy(retry)),
    );
    let j = b.node(&format!("{id}j"), NodeKind::ParallelGateway);
    let e = b.node(&format!("{id}e"), NodeKind::EndEvent(EndKind::None));
    for n in [s, x, t, j, e] {
        b.inside(n, sp);
    }
    b.flow(s, x);
    b.flow(x, t);
    b.flow(x, j);
    b.flow(t, j);
    b.flow(j, e);
}

fn build(shape: &Shape) -> Definition {
    let mut b = Builder::default();
    let start = b.node("start", NodeKind::StartEvent);
    let mut ids = Vec::new();
    let mut subs = Vec::new();
    for (i, k) in shape.kinds.iter().enumerate() {
        let id = format!("n{i}");
        let kind = match k {
            Kind::Sub { retry } => {
                subs.push((i, *retry, false));
                NodeKind::SubProcess
            }
            Kind::StuckSub { retry } => {
                subs.push((i, *retry, true));
                NodeKind::SubProcess
            }
            Kind::Service { retry } => registered(
                &id,
                retry.then(|| RetryPolicy {
                    max_attempts: std::num::NonZeroU32::new(3).unwrap(),
                    ..RetryPolicy::default()
                }),
            ),
            Kind::User => NodeKind::Task(Task {
                kind: TaskKind::User {
                    assignment: Box::default(),
                },
                retry: None,
                timeout: None,
                inputs: Vec::new(),
                outputs: Vec::new(),
                respond: false,
                mapping_style: MappingStyle::Q,
                headers: Vec::new(),
                delegate: None,
            }),
            Kind::Pass => NodeKind::Task(Task {
                kind: TaskKind::PassThrough,
                retry: None,
                timeout: None,
                inputs: Vec::new(),
                outputs: Vec::new(),
                respond: false,
                mapping_style: MappingStyle::Q,
                headers: Vec::new(),
                delegate: None,
            }),
            Kind::Exclusive => NodeKind::ExclusiveGateway { default: None },
            Kind::Parallel => NodeKind::ParallelGateway,
            Kind::Inclusive => NodeKind::InclusiveGateway { default: None },
            Kind::Wait(ms) => NodeKind::IntermediateCatch(CatchTrigger::Timer(TimerDef::Duration(
                DurationMs(*ms),
            ))),
            Kind::End => NodeKind::EndEvent(EndKind::None),
            Kind::Terminate => NodeKind::EndEvent(EndKind::Terminate),
        };
        ids.push(b.node(&id, kind));
    }
    for (i, retry, stuck) in subs {
        let id = format!("n{i}");
        if stuck {
            fill_stuck(&mut b, ids[i], &id, retry);
        } else {
            fill(&mut b, ids[i], &id, NodeKind::StartEvent, retry);
        }
    }
    if let Some(every) = shape.esp {
        let x = b.node("x", NodeKind::SubProcess);
        let trigger = qflow_loader::model::StartTrigger::Timer(TimerDef::Cycle {
            repetitions: Some(3),
            interval: DurationMs(every),
        });
        fill(&mut b, x, "x", NodeKind::TriggeredStart(trigger), true);
        let start = b.find_node("xs");
        b.event_sub(x, start, false);
    }
    b.flow(start, ids[0]);
    for (from, to) in &shape.flows {
        if matches!(shape.kinds[*from], Kind::End | Kind::Terminate) {
            continue;
        }
        b.flow(ids[*from], ids[*to]);
    }
    for (i, (host, interrupting, ms)) in shape.boundaries.iter().enumerate() {
        if !matches!(
            shape.kinds[*host],
            Kind::Service { .. } | Kind::User | Kind::Sub { .. } | Kind::StuckSub { .. }
        ) {
            continue;
        }
        let bd = b.node(
            &format!("b{i}"),
            NodeKind::Boundary(Boundary {
                attached_to: ids[*host],
                interrupting: *interrupting,
                trigger: BoundaryTrigger::Timer(TimerDef::Duration(DurationMs(*ms))),
            }),
        );
        let end = b.node(&format!("be{i}"), NodeKind::EndEvent(EndKind::None));
        b.flow(bd, end);
    }
    b.build("random")
}

fn scripted() -> impl Strategy<Value = Scripted> {
    prop_oneof![
        (0u64..3_000).prop_map(|after_ms| Scripted::Ok {
            outputs: Variables::new(),
            after_ms
        }),
        (0u64..3_000).prop_map(|after_ms| Scripted::Fail {
            code: "HANDLER_FAILED".into(),
            message: String::new(),
            after_ms
        }),
        Just(Scripted::BpmnError {
            code: "E".into(),
            message: String::new(),
            after_ms: 0
        }),
        Just(Scripted::Hang),
    ]
}

fn scenario(shape: &Shape) -> impl Strategy<Value = Scenario> {
    let n = shape.kinds.len();
    let mut services: Vec<String> = (0..n)
        .filter_map(|i| match shape.kinds[i] {
            Kind::Service { .. } => Some(format!("n{i}")),
            Kind::Sub { .. } | Kind::StuckSub { .. } => Some(format!("n{i}t")),
            _ => None,
        })
        .collect();
    if shape.esp.is_some() {
        services.push("xt".to_owned());
    }
    let users: Vec<usize> = (0..n)
        .filter(|i| matches!(shape.kinds[*i], Kind::User))
        .collect();
    (
        proptest::collection::vec(proptest::collection::vec(scripted(), 1..4), services.len()),
        proptest::collection::vec(0i64..60_000, users.len()),
    )
        .prop_map(move |(scripts, times)| Scenario {
            instance: "g".into(),
            start_at_ms: 0,
            variables: Variables::new(),
            start_event: None,
            tasks: services
                .iter()
                .zip(scripts)
                .map(|(i, s)| (i.clone(), s))
                .collect::<BTreeMap<_, _>>(),
            channels: BTreeMap::new(),
            delivery_curves: BTreeMap::new(),
            events: users
                .iter()
                .zip(times)
                .map(|(i, at_ms)| ScriptedEvent::CompleteUserTask {
                    at_ms,
                    node: format!("n{i}"),
                    variables: Variables::new(),
                    assignee: None,
                })
                .collect(),
            horizon_ms: Some(300_000),
            max_steps: Some(500),
            inputs: None,
        })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(96),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_graphs_never_panic_and_stay_deterministic(
        (shape, sc) in shape().prop_flat_map(|s| { let sc = scenario(&s); (Just(s), sc) })
    ) {
        let def = build(&shape);
        let one = sim::run(&def, &sc);
        let two = sim::run(&def, &sc);
        prop_assert_eq!(&one, &two);
        if let Ok(trace) = one {
            for s in &trace.steps {
                let snap = Snapshot::decode(&s.snapshot).unwrap();
                prop_assert_eq!(snap.encode(), s.snapshot.clone());
            }
        }
    }

    /// The simulator steps with `step_traced`; replaying its inputs through the untraced
    /// `step` the runtime calls gives the same bytes and effects, so recording the path
    /// changes nothing the shell sees. And the path names only what the model has: every
    /// flow with its own ends, every end an end event.
    #[test]
    fn recording_the_path_changes_no_byte_and_no_effect(
        (shape, sc) in shape().prop_flat_map(|s| { let sc = scenario(&s); (Just(s), sc) })
    ) {
        let def = build(&shape);
        let Ok(trace) = sim::run(&def, &sc) else { return Ok(()); };
        let mut bytes = Snapshot::new().encode();
        for s in &trace.steps {
            let snap = Snapshot::decode(&bytes).unwrap();
            let out = qflow_core::step(&def, &sc.instance, snap, s.input.clone(), s.at_ms).unwrap();
            bytes = out.snapshot.encode();
            prop_assert_eq!(&bytes, &s.snapshot, "step {}", s.seq);
            prop_assert_eq!(&out.effects, &s.effects, "step {}", s.seq);
            let p = &def.process;
            for e in &s.path {
                match e {
                    PathEvent::Flow { flow, from, to } => {
                        let f = p.flows.iter().find(|f| f.id == *flow);
                        prop_assert!(f.is_some(), "no flow {}", flow);
                        let f = f.unwrap();
                        // A flow leaves an activity instance (`n@2`, E9) and arrives in
                        // the same scope instance (`x@2/xt`): both name their nodes.
                        let source = p.find(from).map(|i| p.node(i).id.as_str());
                        prop_assert_eq!(Some(p.node(f.source).id.as_str()), source);
                        let target = p.find(to).map(|i| p.node(i).id.as_str());
                        prop_assert_eq!(Some(p.node(f.target).id.as_str()), target);
                    }
                    PathEvent::End { node, .. } => {
                        let idx = p.find(node).unwrap();
                        prop_assert!(matches!(p.node(idx).kind, NodeKind::EndEvent(_)));
                    }
                    _ => {}
                }
            }
        }
    }

    /// No silent stall (E10) and distinct handler calls (E9), over generated splits,
    /// merges of every gateway kind, boundaries, timer waits, sub-processes that get
    /// stuck at a join inside, and retries with generated outcomes: the core's stall
    /// detector never fires (it finds defects, and a model does not cause one); a run
    /// that goes idle while RUNNING has a wait open that only the outside can end (a user
    /// task, a handler that never answers) — a sub-process whose inside cannot move is
    /// no such wait; an instance fails `STUCK_AT_JOIN` only with nothing but
    /// sub-processes left, at a join that holds arrivals; and no handler call is asked
    /// for while another with the same node and attempt is outstanding — two tokens in
    /// one task are two activity instances, never one name twice.
    #[test]
    fn no_run_stalls_and_no_two_handler_calls_are_indistinguishable(
        (shape, sc) in shape().prop_flat_map(|s| { let sc = scenario(&s); (Just(s), sc) })
    ) {
        let def = build(&shape);
        let Ok(trace) = sim::run(&def, &sc) else { return Ok(()); };
        prop_assert_ne!(trace.summary.failure_code.as_deref(), Some("STALLED"));
        if trace.summary.failure_code.as_deref() == Some("STUCK_AT_JOIN") {
            let end = trace.final_snapshot().unwrap();
            let p = &def.process;
            let scopes_only = end.tokens().iter().all(|t| {
                p.find(t).is_some_and(|i| matches!(p.node(i).kind, NodeKind::SubProcess))
            });
            prop_assert!(scopes_only, "stuck with live tokens: {:?}", end.tokens());
            let join = trace.summary.failure_node.clone().unwrap_or_default();
            prop_assert!(end.join_arrivals().contains_key(&join), "no arrivals at {}", join);
        }
        let mut outstanding: std::collections::BTreeSet<(String, u32)> = Default::default();
        for s in &trace.steps {
            match &s.input {
                qflow_core::Input::TaskCompleted { node, attempt, .. }
                | qflow_core::Input::TaskFailed { node, attempt, .. }
                | qflow_core::Input::TaskBpmnError { node, attempt, .. } => {
                    outstanding.remove(&(node.clone(), attempt.get()));
                }
                _ => {}
            }
            for e in &s.effects {
                match e {
                    qflow_core::Effect::AttemptFinished { node, attempt, .. } => {
                        outstanding.remove(&(node.clone(), attempt.get()));
                    }
                    qflow_core::Effect::RunTask { node, attempt, .. } => {
                        let fresh = outstanding.insert((node.clone(), attempt.get()));
                        prop_assert!(fresh, "step {}: a second call of {} attempt {}", s.seq, node, attempt);
                    }
                    _ => {}
                }
            }
        }
        if trace.summary.status == "running" && trace.summary.stop == sim::Stop::Idle {
            let end = trace.final_snapshot().unwrap();
            let p = &def.process;
            let open = end.tokens().iter().any(|t| {
                let Some(idx) = p.find(t) else { return false };
                match &p.node(idx).kind {
                    NodeKind::Task(Task { kind: TaskKind::User { .. }, .. }) => true,
                    // A handler that never answers (`hang`) holds its attempt in flight.
                    NodeKind::Task(Task { kind: TaskKind::Registered { .. }, .. }) => {
                        end.marker(t).is_none()
                    }
                    _ => false,
                }
            });
            prop_assert!(open, "idle while running with nothing open: {:?}", end.tokens());
        }
    }
}
