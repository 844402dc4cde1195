//! Gateways: exclusive and inclusive routing, parallel and inclusive joins.
//!
//! An exclusive gateway takes the first true flow in document order, then the default,
//! else the instance FAILs with `NO_FLOW_TAKEN`. Joins keep their arrivals in the
//! snapshot (`j/<gateway>`, one flow id per waiting token), and both kinds consume one
//! token per incoming flow when they fire. A parallel join fires once every incoming
//! flow holds a token; an inclusive join once at least one does and no token elsewhere
//! can still reach an empty one (§13.4.3). Nothing here reads the clock or iterates a
//! hash map.

use qflow_loader::model::{FlowIdx, NodeIdx, NodeKind};

use super::codes;
use super::instances;
use super::run::Run;

impl Run<'_> {
    /// Exclusive gateway: the first flow in document order whose condition holds (an
    /// unconditioned non-default flow always holds), else the default, else FAILED.
    pub(super) fn route_exclusive(&mut self, idx: NodeIdx, default: Option<FlowIdx>) {
        let outgoing = &self.p.node(idx).outgoing;
        for f in outgoing {
            if Some(*f) == default {
                continue;
            }
            match self.condition_holds(idx, *f) {
                Ok(true) => {
                    self.record_decision(idx, &[*f], false);
                    return self.take(idx, *f);
                }
                Ok(false) => {}
                Err(e) => return self.fail(codes::EXPRESSION_FAILED, Some(idx), None, e),
            }
        }
        match default {
            Some(d) => {
                self.record_decision(idx, &[d], true);
                self.take(idx, d)
            }
            None => {
                let message = format!(
                    "exclusive gateway `{}`: no condition is true and there is no default flow",
                    self.id(idx)
                );
                self.fail(codes::NO_FLOW_TAKEN, Some(idx), None, message);
            }
        }
    }

    /// Inclusive gateway (fork side): every flow whose condition holds, else the
    /// default, else FAILED.
    pub(super) fn route_inclusive(&mut self, idx: NodeIdx, default: Option<FlowIdx>) {
        let outgoing = &self.p.node(idx).outgoing;
        match self.true_flows(idx, outgoing, default) {
            Ok(flows) if !flows.is_empty() => {
                self.record_decision(idx, &flows, false);
                flows.into_iter().for_each(|f| self.take(idx, f));
            }
            Ok(_) => match default {
                Some(d) => {
                    self.record_decision(idx, &[d], true);
                    self.take(idx, d)
                }
                None => {
                    let message = format!(
                        "inclusive gateway `{}`: no condition is true and there is no default flow",
                        self.id(idx)
                    );
                    self.fail(codes::NO_FLOW_TAKEN, Some(idx), None, message);
                }
            },
            Err(e) => self.fail(codes::EXPRESSION_FAILED, Some(idx), None, e),
        }
    }

    pub(super) fn arrive_at_join(&mut self, idx: NodeIdx, via: Option<FlowIdx>) {
        let flow_id = via.map(|f| self.p.flow(f).id.clone()).unwrap_or_default();
        let arrivals = self
            .snap
            .joins
            .entry(self.id(idx).into_owned())
            .or_default();
        let at = arrivals.partition_point(|a| *a <= flow_id);
        arrivals.insert(at, flow_id);
    }

    /// A parallel join fires once a token has arrived on every incoming flow; it
    /// consumes one arrival per flow.
    pub(super) fn try_parallel_join(&mut self, idx: NodeIdx) {
        let node = self.p.node(idx);
        let Some(arrivals) = self.snap.joins.get(&*self.id(idx)) else {
            return;
        };
        let complete = node
            .incoming
            .iter()
            .all(|f| arrivals.contains(&self.p.flow(*f).id));
        if !complete {
            return;
        }
        let arrivals = self
            .snap
            .joins
            .get_mut(&*self.id(idx))
            .expect("checked above");
        for f in &node.incoming {
            let id = &self.p.flow(*f).id;
            if let Some(pos) = arrivals.iter().position(|a| a == id) {
                arrivals.remove(pos);
            }
        }
        if arrivals.is_empty() {
            self.snap.joins.remove(&*self.id(idx));
        }
        self.record(|r| super::path::PathEvent::Join {
            node: r.id(idx).into_owned(),
            flows: node
                .incoming
                .iter()
                .map(|f| r.p.flow(*f).id.clone())
                .collect(),
        });
        self.take_all(idx);
    }

    /// Fires the first inclusive join (by id) that is enabled, consuming one arrival per
    /// flow that holds one; arrivals left over stay and may enable it again.
    pub(super) fn fire_ready_inclusive_join(&mut self) -> bool {
        let ready = self.snap.joins.keys().find_map(|gw| {
            let idx = self.p.find(gw)?;
            let NodeKind::InclusiveGateway { default } = self.p.node(idx).kind else {
                return None;
            };
            self.inclusive_join_enabled(idx).then_some((idx, default))
        });
        let Some((idx, default)) = ready else {
            return false;
        };
        let flows = self.take_one_arrival_per_flow(idx);
        self.record(|r| super::path::PathEvent::Join {
            node: r.id(idx).into_owned(),
            flows,
        });
        self.route_inclusive(idx, default);
        true
    }

    /// An inclusive join is enabled (BPMN 2.0.2 §13.4.3) when a token waits on at least
    /// one of its incoming flows and no token elsewhere in the instance can still reach
    /// an incoming flow that holds none. A path through the join itself does not count:
    /// a token downstream of the join, or one of its own leftover arrivals, would reach
    /// it only by firing it first.
    fn inclusive_join_enabled(&self, idx: NodeIdx) -> bool {
        let node = self.p.node(idx);
        let Some(arrivals) = self.snap.joins.get(&*self.id(idx)) else {
            return false;
        };
        if arrivals.is_empty() {
            return false;
        }
        let reached = self.reached_by_others(idx);
        node.incoming.iter().all(|f| {
            let flow = self.p.flow(*f);
            let waiting = arrivals.contains(&flow.id);
            let reachable = flow.source != idx && reached[flow.source.0 as usize];
            waiting || !reachable
        })
    }

    /// Consumes one arrival of each flow the join `idx` holds arrivals on (one token per
    /// incoming flow; an arrival over no incoming flow, as a resumed join re-enters, is
    /// a flow of its own), and forgets the join once nothing is left. Returns the flows
    /// consumed (an arrival over no flow is an empty id).
    fn take_one_arrival_per_flow(&mut self, idx: NodeIdx) -> Vec<String> {
        let gw_key = self.id(idx);
        let gw: &str = &gw_key;
        let Some(arrivals) = self.snap.joins.get_mut(gw) else {
            return Vec::new();
        };
        let mut taken: Vec<String> = Vec::new();
        arrivals.retain(|a| {
            if taken.contains(a) {
                return true;
            }
            taken.push(a.clone());
            false
        });
        if arrivals.is_empty() {
            self.snap.joins.remove(gw);
        }
        taken
    }

    /// Which nodes every token, and every other join's arrivals, can still reach, without
    /// passing through `target` (which is marked reached but not followed).
    fn reached_by_others(&self, target: NodeIdx) -> Vec<bool> {
        let mut seen = vec![false; self.p.nodes.len()];
        let mut todo: Vec<NodeIdx> = Vec::new();
        let sources = self
            .snap
            .tokens
            .iter()
            .chain(self.snap.joins.keys().filter(|g| *g != &*self.id(target)));
        // Inside a sub-process, a token in another instance of it (`sub@2/…`) reaches
        // that instance's join, never this one's.
        let scope = self.scope_of(target);
        let elsewhere =
            |src: NodeIdx| scope.is_some_and(|sp| instances::in_other_instance(self.p, src, sp));
        for s in sources {
            // Reckoned over plain nodes: no inclusive gateway is inside a multi-instance
            // sub-process (Q132), and an inner instance leaves through its body.
            let found = self.p.find(s).filter(|i| !elsewhere(*i));
            if let Some(mut idx) = found.map(NodeIdx::plain) {
                todo.push(idx);
                // A token inside a sub-process also leaves through its enclosing ones.
                while let Some(sp) = self.p.node(idx).scope {
                    todo.push(sp);
                    idx = sp;
                }
            }
        }
        while let Some(idx) = todo.pop() {
            if std::mem::replace(&mut seen[idx.0 as usize], true) || idx == target {
                continue;
            }
            let node = self.p.node(idx);
            todo.extend(node.outgoing.iter().map(|f| self.p.flow(*f).target));
            todo.extend(self.p.boundaries_of(idx));
        }
        seen
    }
}
