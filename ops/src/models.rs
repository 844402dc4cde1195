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

/// An element instance an instance holds now: a token of its wait frontier — an
/// activity instance waiting or running (`pay`, `pay@2`, `sub@2/pay`, `quote#3`), a
/// sub-process or multi-instance body holding tokens of its own, a catch waiting. A token
/// at a Zeebe execution listener's task (`pay~start-1`) is shown as the element it
/// listens on (`element_id` `pay`, its name and type), keeping its own `name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActiveElement {
    /// The activity-instance name (`docs/activity-instances.md`): unique in its instance
    /// while it is active.
    pub name: String,
    /// The BPMN id of its node.
    pub element_id: String,
    pub element_name: Option<String>,
    /// Camunda 8's element type: `SERVICE_TASK`, `USER_TASK`, `SUB_PROCESS`,
    /// `MULTI_INSTANCE_BODY`, … (`UNKNOWN` for a name the deployment does not have).
    pub kind: &'static str,
}

/// An instance with the element instances its snapshot holds now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceElements {
    pub instance: crate::InstanceSummary,
    /// The BPMN process id and name of the deployment it runs on.
    pub process_id: String,
    pub process_name: Option<String>,
    /// In frontier order, then a FAILED instance's failure node when no token stands
    /// there (a gateway no flow left): where its incident is. Empty once the instance
    /// has ended.
    pub active: Vec<ActiveElement>,
}

/// Camunda 8's element type of a task-like node written as `element`, where its kind
/// would say otherwise (`BpmnElementType`'s names).
fn element_type(element: &str) -> Option<&'static str> {
    Some(match element {
        "sendTask" => "SEND_TASK",
        "businessRuleTask" => "BUSINESS_RULE_TASK",
        "manualTask" => "MANUAL_TASK",
        "scriptTask" => "SCRIPT_TASK",
        "endEvent" => "END_EVENT",
        "intermediateThrowEvent" => "INTERMEDIATE_THROW_EVENT",
        _ => return None,
    })
}

/// The element a token at `idx` (named `name`) is shown as: itself, or for a node the
/// loader added beside an element (a Zeebe execution listener's task, a gateway's forking
/// half) that element, as Zeebe shows the element while its listener's job runs.
fn shown_element<'n>(
    process: &qflow_loader::model::Process,
    idx: qflow_loader::model::NodeIdx,
    name: &'n str,
) -> (qflow_loader::model::NodeIdx, &'n str) {
    let element = qflow_loader::model::written_element(name);
    if element == process.node(idx).id {
        return (idx, name);
    }
    process
        .find(element)
        .map_or((idx, name), |written| (written, element))
}

/// Camunda 8's element type of `node` for a token named `name`.
fn camunda_type(
    process: &qflow_loader::model::Process,
    idx: qflow_loader::model::NodeIdx,
    name: &str,
) -> &'static str {
    use qflow_loader::model::TaskKind;
    let node = process.node(idx);
    match &node.kind {
        NodeKind::StartEvent | NodeKind::TriggeredStart(_) => "START_EVENT",
        NodeKind::EndEvent(_) => "END_EVENT",
        // What it was written as, where that differs from how it runs (a send task or a
        // message event run by a worker, a none throw event passed through).
        NodeKind::Task(t) => match element_type(node.element) {
            Some(written) => written,
            None => match t.kind {
                TaskKind::Registered { .. } | TaskKind::Channel { .. } | TaskKind::Pull { .. } => {
                    "SERVICE_TASK"
                }
                TaskKind::User { .. } => "USER_TASK",
                TaskKind::PassThrough => "TASK",
                TaskKind::Script { .. } => "SCRIPT_TASK",
                TaskKind::Send { .. } => "SEND_TASK",
                TaskKind::Receive { .. } => "RECEIVE_TASK",
                TaskKind::Call(_) => "CALL_ACTIVITY",
            },
        },
        NodeKind::ExclusiveGateway { .. } => "EXCLUSIVE_GATEWAY",
        NodeKind::InclusiveGateway { .. } => "INCLUSIVE_GATEWAY",
        NodeKind::ParallelGateway => "PARALLEL_GATEWAY",
        NodeKind::EventBasedGateway => "EVENT_BASED_GATEWAY",
        NodeKind::IntermediateCatch(_) => "INTERMEDIATE_CATCH_EVENT",
        NodeKind::IntermediateThrow(_) => "INTERMEDIATE_THROW_EVENT",
        NodeKind::Boundary(_) => "BOUNDARY_EVENT",
        NodeKind::SubProcess => {
            let last = name.rsplit('/').next().unwrap_or(name);
            if process.multi_instance(idx).is_some() && !last.contains('#') {
                "MULTI_INSTANCE_BODY"
            } else if process.event_sub_processes.iter().any(|e| e.node == idx) {
                "EVENT_SUB_PROCESS"
            } else if process.ad_hoc(idx).is_some() {
                "AD_HOC_SUB_PROCESS"
            } else {
                "SUB_PROCESS"
            }
        }
    }
}

impl Ops {
    /// Instance `id` with the element instances it holds now (its snapshot's frontier),
    /// for Camunda 8's element-instance search: qflow keeps no record of element
    /// instances that ended, only of the instance's attempts (`history`).
    pub async fn elements(&self, id: qflow_store::InstanceId) -> Result<InstanceElements> {
        let record = self.record(id).await?;
        let definition = self.definition_of(record.deployment.0).await?;
        let snapshot = qflow_core::Snapshot::decode(&record.snapshot).map_err(|e| {
            Error::Store(format!("instance {id}: its snapshot does not decode: {e}"))
        })?;
        let process = &definition.process;
        let mut names: Vec<String> = if record.status.has_ended() {
            Vec::new()
        } else {
            snapshot.tokens().to_vec()
        };
        if let Some(node) = snapshot.failure().and_then(|f| f.node) {
            if !names.contains(&node) {
                names.push(node);
            }
        }
        let active = names
            .iter()
            .map(|name| match process.find(name) {
                Some(idx) => {
                    let (shown, shown_name) = shown_element(process, idx, name);
                    ActiveElement {
                        name: name.clone(),
                        element_id: process.node(shown).id.clone(),
                        element_name: process.node(shown).name.clone(),
                        kind: camunda_type(process, shown, shown_name),
                    }
                }
                None => ActiveElement {
                    name: name.clone(),
                    element_id: qflow_loader::model::written_element(name).to_owned(),
                    element_name: None,
                    kind: "UNKNOWN",
                },
            })
            .collect();
        Ok(InstanceElements {
            instance: crate::InstanceSummary::from(&record),
            process_id: definition.id.clone(),
            process_name: definition.name.clone(),
            active,
        })
    }

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

#[cfg(test)]
mod tests {
    use super::{camunda_type, shown_element};

    /// A token at an execution listener's task is shown as its element.
    #[test]
    fn a_listener_task_is_shown_as_the_element_it_listens_on() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="t">
  <process id="p" isExecutable="true">
    <startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="g"/>
    <exclusiveGateway id="g"><extensionElements><zeebe:executionListeners>
      <zeebe:executionListener eventType="start" type="score"/>
    </zeebe:executionListeners></extensionElements></exclusiveGateway>
    <sequenceFlow id="f2" sourceRef="g" targetRef="work"/>
    <serviceTask id="work" name="Work"><extensionElements><zeebe:taskDefinition type="work"/></extensionElements></serviceTask>
    <sequenceFlow id="f3" sourceRef="work" targetRef="e"/><endEvent id="e"/>
  </process>
</definitions>"#;
        let def = qflow_loader::load_str(xml)
            .expect("loads")
            .definitions
            .remove(0);
        let p = &def.process;
        let shown = |name: &str| {
            let (idx, n) = shown_element(p, p.find(name).expect("a node"), name);
            (p.node(idx).id.clone(), camunda_type(p, idx, n))
        };
        assert_eq!(shown("g~start-1"), ("g".to_owned(), "EXCLUSIVE_GATEWAY"));
        assert_eq!(shown("work"), ("work".to_owned(), "SERVICE_TASK"));
    }

    /// The element type Camunda 8 names is what the element was written as, also where
    /// qflow runs it as something else (a send task or a message end event run by a
    /// worker is a pull task inside; a none throw event a pass-through).
    #[test]
    fn element_types_follow_the_written_element() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="t">
  <process id="p" isExecutable="true">
    <startEvent id="s"/>
    <sequenceFlow id="f1" sourceRef="s" targetRef="mail"/>
    <sendTask id="mail"><extensionElements><zeebe:taskDefinition type="mail"/></extensionElements></sendTask>
    <sequenceFlow id="f2" sourceRef="mail" targetRef="work"/>
    <serviceTask id="work"><extensionElements><zeebe:taskDefinition type="work"/></extensionElements></serviceTask>
    <sequenceFlow id="f3" sourceRef="work" targetRef="mark"/>
    <intermediateThrowEvent id="mark"/>
    <sequenceFlow id="f4" sourceRef="mark" targetRef="tell"/>
    <endEvent id="tell"><extensionElements><zeebe:taskDefinition type="tell"/></extensionElements><messageEventDefinition/></endEvent>
  </process>
</definitions>"#;
        let def = qflow_loader::load_str(xml)
            .expect("loads")
            .definitions
            .remove(0);
        let p = &def.process;
        let ty = |id: &str| camunda_type(p, p.find(id).expect("a node"), id);
        assert_eq!(ty("mail"), "SEND_TASK");
        assert_eq!(ty("work"), "SERVICE_TASK");
        assert_eq!(ty("mark"), "INTERMEDIATE_THROW_EVENT");
        assert_eq!(ty("tell"), "END_EVENT");
        assert_eq!(ty("s"), "START_EVENT");
    }
}
