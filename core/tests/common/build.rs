//! Builds `Definition`s in code, without XML: for laws and benches that must not depend
//! on the loader's dialect, and for shapes the XML helpers make awkward.

use std::collections::BTreeMap;

use qflow_loader::model::{
    Classification, Definition, Flow, FlowIdx, MappingStyle, Node, NodeIdx, NodeKind, Pos, Process,
    RetryPolicy, Task, TaskKind,
};

#[derive(Default)]
pub struct Builder {
    nodes: Vec<Node>,
    flows: Vec<Flow>,
    event_subs: Vec<qflow_loader::model::EventSubProcess>,
}

impl Builder {
    pub fn node(&mut self, id: &str, kind: NodeKind) -> NodeIdx {
        self.nodes.push(Node {
            id: id.to_owned(),
            name: None,
            pos: Pos::default(),
            element: "",
            scope: None,
            kind,
            outgoing: Vec::new(),
            incoming: Vec::new(),
        });
        NodeIdx::at(self.nodes.len() - 1)
    }

    /// The node named `id` (built so far).
    #[allow(dead_code)] // the step bench shares this file and builds no scopes
    pub fn find_node(&self, id: &str) -> NodeIdx {
        NodeIdx::at(
            self.nodes
                .iter()
                .position(|n| n.id == id)
                .expect("a node of that id"),
        )
    }

    /// Puts `node` inside the sub-process `scope`.
    #[allow(dead_code)] // the step bench shares this file and builds no scopes
    pub fn inside(&mut self, node: NodeIdx, scope: NodeIdx) {
        self.nodes[node.position()].scope = Some(scope);
    }

    /// Makes the sub-process `node` an event sub-process started at `start`.
    #[allow(dead_code)] // the step bench shares this file and builds no scopes
    pub fn event_sub(&mut self, node: NodeIdx, start: NodeIdx, interrupting: bool) {
        self.event_subs.push(qflow_loader::model::EventSubProcess {
            node,
            start,
            interrupting,
        });
    }

    pub fn flow(&mut self, from: NodeIdx, to: NodeIdx) -> FlowIdx {
        let idx = FlowIdx(self.flows.len() as u32);
        self.flows.push(Flow {
            id: format!("f{}", idx.0),
            source: from,
            target: to,
            condition: None,
            pos: Pos::default(),
        });
        self.nodes[from.0 as usize].outgoing.push(idx);
        self.nodes[to.0 as usize].incoming.push(idx);
        idx
    }

    pub fn build(self, id: &str) -> Definition {
        let by_id = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id.clone(), NodeIdx::at(i)))
            .collect();
        Definition {
            id: id.to_owned(),
            name: None,
            content_hash: String::new(),
            process: Process {
                nodes: self.nodes,
                flows: self.flows,
                by_id,
                event_mappings: BTreeMap::new(),
                sub_process_mappings: BTreeMap::new(),
                event_sub_processes: self.event_subs,
                multi_instances: BTreeMap::new(),
                compensations: BTreeMap::new(),
                ad_hocs: BTreeMap::new(),
                activity_defaults: BTreeMap::new(),
                conditionals: Vec::new(),
            },
            errors: BTreeMap::new(),
            messages: BTreeMap::new(),
            correlation_keys: BTreeMap::new(),
            waits_for_signals: false,
            initiator: None,
            class: Classification::Stateless,
        }
    }
}

pub fn registered(name: &str, retry: Option<RetryPolicy>) -> NodeKind {
    NodeKind::Task(Task {
        kind: TaskKind::Registered {
            name: name.to_owned(),
        },
        retry,
        timeout: None,
        inputs: Vec::new(),
        outputs: Vec::new(),
        respond: false,
        mapping_style: MappingStyle::Q,
        headers: Vec::new(),
        delegate: None,
    })
}

/// start → t1 … tn (registered tasks named like their ids) → end.
pub fn linear_def(n: usize, retry: Option<RetryPolicy>) -> Definition {
    let mut b = Builder::default();
    let mut prev = b.node("start", NodeKind::StartEvent);
    for i in 1..=n {
        let id = format!("t{i}");
        let t = b.node(&id, registered(&id, retry.clone()));
        b.flow(prev, t);
        prev = t;
    }
    let end = b.node(
        "end",
        NodeKind::EndEvent(qflow_loader::model::EndKind::None),
    );
    b.flow(prev, end);
    b.build("linear")
}
