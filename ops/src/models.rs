//! What a front end needs of a deployment beyond its summary: the BPMN source as
//! deployed (the console renders its diagram interchange), its nodes (the choices of a
//! migration mapping) and the retry timelines of its `q:retry` policies — the numbers
//! `qflow check --explain` prints, from [`qflow_loader::explain`], never recomputed.

use qflow_loader::explain::{self, Timeline};
use qflow_loader::model::NodeKind;
use qflow_store::DeploymentId;
use serde::Serialize;

use crate::{Error, Ops, Result};

/// One node of a deployment's process, as a migration mapping chooses among them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeInfo {
    pub id: String,
    pub name: Option<String>,
    /// `task`, `start`, `end`, `gateway`, `catch`, `throw`, `boundary`, `subprocess`,
    /// `call`.
    pub kind: &'static str,
}

fn kind_of(kind: &NodeKind) -> &'static str {
    match kind {
        NodeKind::StartEvent | NodeKind::TriggeredStart(_) => "start",
        NodeKind::EndEvent(_) => "end",
        NodeKind::Task(t) if matches!(t.kind, qflow_loader::model::TaskKind::Call(_)) => "call",
        NodeKind::Task(_) => "task",
        NodeKind::ExclusiveGateway { .. }
        | NodeKind::InclusiveGateway { .. }
        | NodeKind::ParallelGateway
        | NodeKind::EventBasedGateway => "gateway",
        NodeKind::IntermediateCatch(_) => "catch",
        NodeKind::IntermediateThrow(_) => "throw",
        NodeKind::Boundary(_) => "boundary",
        NodeKind::SubProcess => "subprocess",
    }
}

impl Ops {
    /// The BPMN XML of deployment `id`, exactly as deployed.
    pub async fn deployment_source(&self, id: i64) -> Result<String> {
        Ok(self.deployment_record(id).await?.source)
    }

    /// The nodes of deployment `id`'s process, in document order.
    pub async fn deployment_nodes(&self, id: i64) -> Result<Vec<NodeInfo>> {
        let definition = self.definition_of(id).await?;
        Ok(definition
            .process
            .nodes
            .iter()
            .map(|n| NodeInfo {
                id: n.id.clone(),
                name: n.name.clone(),
                kind: kind_of(&n.kind),
            })
            .collect())
    }

    /// The retry timeline of every `q:retry` task of deployment `id`, in document order:
    /// the same numbers as `qflow check --explain` on its source.
    pub async fn retry_timelines(&self, id: i64) -> Result<Vec<Timeline>> {
        let definition = self.definition_of(id).await?;
        Ok(explain::timelines(&definition))
    }

    async fn definition_of(&self, id: i64) -> Result<std::sync::Arc<qflow_core::Definition>> {
        self.deployment_record(id).await?;
        self.shared
            .stepper
            .definition(DeploymentId(id))
            .await
            .map_err(Error::from)
    }
}
