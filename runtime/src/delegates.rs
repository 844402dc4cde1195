//! Routes for Camunda 7 Java bindings (`[delegates]` in `qflow.toml`).
//!
//! The loader reads a service task bound to Java code (`camunda:class`,
//! `camunda:delegateExpression`, `camunda:expression`) as a pull task whose topic it
//! derives from the binding (`qflow_loader::model::delegate_topic`). A route sends the
//! binding elsewhere: to another topic, or to a handler the host registered. Routes are
//! applied where a definition is loaded — at deploy and whenever a replica loads a
//! deployment again — and the routes a deployment was made with are part of its
//! identity: its content hash carries their digest (`<sha-256>.<routes digest>`), so the
//! same model deployed under other routes is another deployment, and a replica that
//! would load a deployment under other routes than it was made with refuses to (an
//! instance never changes how a task runs under it).

use std::collections::BTreeMap;

use qflow_loader::model::{Definition, NodeKind, TaskKind};
use sha2::{Digest, Sha256};

/// Where a routed binding runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DelegateRoute {
    /// A pull task of this topic instead of the derived one.
    Topic(String),
    /// A handler the host registered under this name (`q:task`).
    Task(String),
}

impl std::fmt::Display for DelegateRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DelegateRoute::Topic(t) => write!(f, "topic `{t}`"),
            DelegateRoute::Task(t) => write!(f, "handler `{t}`"),
        }
    }
}

/// Routes by binding text as the model writes it, trimmed (`com.acme.ChargeCard`,
/// `${chargeCard}`).
pub type DelegateRoutes = BTreeMap<String, DelegateRoute>;

/// Applies `routes` to the tasks of `def` bound to Java code and returns what it applied,
/// one `(binding, route)` per distinct binding in binding order (empty: no route
/// applies, and the definition is as the loader made it).
pub fn apply(def: &mut Definition, routes: &DelegateRoutes) -> Vec<(String, DelegateRoute)> {
    let mut applied: BTreeMap<String, DelegateRoute> = BTreeMap::new();
    if routes.is_empty() {
        return Vec::new();
    }
    for node in &mut def.process.nodes {
        let NodeKind::Task(task) = &mut node.kind else {
            continue;
        };
        let Some(route) = task.delegate.as_ref().and_then(|d| routes.get(&d.text)) else {
            continue;
        };
        let text = task
            .delegate
            .as_ref()
            .map(|d| d.text.clone())
            .unwrap_or_default();
        match route {
            DelegateRoute::Topic(topic) => {
                if let TaskKind::Pull { topic: t, .. } = &mut task.kind {
                    *t = topic.clone();
                }
            }
            DelegateRoute::Task(name) => {
                task.kind = TaskKind::Registered { name: name.clone() };
                task.headers.clear();
            }
        }
        applied.insert(text, route.clone());
    }
    applied.into_iter().collect()
}

/// The content hash of a deployment of `process_id` from `source` under the routes that
/// applied to it: the SHA-256 of the process id and source, and when routes applied a
/// `.` and the first 16 hex digits of their digest.
pub fn content_hash(process_id: &str, source: &str, applied: &[(String, DelegateRoute)]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(process_id.as_bytes());
    hasher.update([0u8]);
    hasher.update(source.as_bytes());
    let base = hex::encode(hasher.finalize());
    match routes_digest(applied) {
        Some(d) => format!("{base}.{d}"),
        None => base,
    }
}

/// The digest of the routes part of a content hash, `None` when none applied.
fn routes_digest(applied: &[(String, DelegateRoute)]) -> Option<String> {
    if applied.is_empty() {
        return None;
    }
    let mut hasher = Sha256::new();
    for (binding, route) in applied {
        let (kind, target) = match route {
            DelegateRoute::Topic(t) => ("topic", t),
            DelegateRoute::Task(t) => ("task", t),
        };
        for part in [binding.as_str(), kind, target.as_str()] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
    }
    Some(hex::encode(&hasher.finalize()[..8]))
}

/// Whether a stored deployment's content hash says it was made under the routes that
/// apply now. A hash without a routes part was made with none (or by a tool that wrote
/// its own hash): it agrees when none apply now.
pub fn agrees(stored_hash: &str, applied: &[(String, DelegateRoute)]) -> bool {
    let stored = stored_hash.split_once('.').map(|(_, d)| d);
    stored == routes_digest(applied).as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODEL: &str = r#"<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"
        xmlns:camunda="http://camunda.org/schema/1.0/bpmn" targetNamespace="t">
      <process id="p" isExecutable="true">
        <startEvent id="s"/>
        <serviceTask id="charge" camunda:class="com.acme.ChargeCard"/>
        <serviceTask id="mail" camunda:delegateExpression="${mailer}"/>
        <serviceTask id="again" camunda:class="com.acme.ChargeCard"/>
        <endEvent id="e"/>
        <sequenceFlow id="f1" sourceRef="s" targetRef="charge"/>
        <sequenceFlow id="f2" sourceRef="charge" targetRef="mail"/>
        <sequenceFlow id="f3" sourceRef="mail" targetRef="again"/>
        <sequenceFlow id="f4" sourceRef="again" targetRef="e"/>
      </process>
    </definitions>"#;

    fn kinds(def: &Definition) -> Vec<(String, TaskKind)> {
        def.process
            .nodes
            .iter()
            .filter_map(|n| match &n.kind {
                NodeKind::Task(t) => Some((n.id.clone(), t.kind.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn routes_replace_the_derived_topic_or_make_a_registered_task() {
        let mut def = qflow_loader::load_str(MODEL).unwrap().definitions.remove(0);
        let pull = |t: &str| TaskKind::Pull {
            topic: t.into(),
            retries: None,
        };
        assert_eq!(
            kinds(&def),
            [
                ("charge".into(), pull("chargeCard")),
                ("mail".into(), pull("mailer")),
                ("again".into(), pull("chargeCard")),
            ]
        );
        let routes: DelegateRoutes = [
            (
                "com.acme.ChargeCard".to_owned(),
                DelegateRoute::Topic("payments".into()),
            ),
            (
                "${mailer}".to_owned(),
                DelegateRoute::Task("send-mail".into()),
            ),
            ("${unused}".to_owned(), DelegateRoute::Topic("x".into())),
        ]
        .into();
        let applied = apply(&mut def, &routes);
        assert_eq!(
            kinds(&def),
            [
                ("charge".into(), pull("payments")),
                (
                    "mail".into(),
                    TaskKind::Registered {
                        name: "send-mail".into()
                    }
                ),
                ("again".into(), pull("payments")),
            ]
        );
        // Each binding once, and only those that applied.
        assert_eq!(
            applied,
            [
                (
                    "${mailer}".to_owned(),
                    DelegateRoute::Task("send-mail".into())
                ),
                (
                    "com.acme.ChargeCard".to_owned(),
                    DelegateRoute::Topic("payments".into())
                ),
            ]
        );
    }

    #[test]
    fn the_hash_carries_the_routes_and_a_stored_hash_is_checked_against_them() {
        let plain = content_hash("p", MODEL, &[]);
        assert_eq!(plain.len(), 64);
        assert!(agrees(&plain, &[]));
        let one = [(
            "com.acme.ChargeCard".to_owned(),
            DelegateRoute::Topic("payments".into()),
        )];
        let other = [(
            "com.acme.ChargeCard".to_owned(),
            DelegateRoute::Topic("billing".into()),
        )];
        let routed = content_hash("p", MODEL, &one);
        assert!(routed.starts_with(&plain) && routed.len() == 64 + 1 + 16);
        assert_ne!(routed, content_hash("p", MODEL, &other));
        assert!(agrees(&routed, &one));
        assert!(!agrees(&routed, &other), "other routes than at deploy");
        assert!(!agrees(&routed, &[]), "the routes were removed");
        assert!(!agrees(&plain, &one), "a route was added");
        // A hash some tool wrote itself, with no routes part, agrees while none apply.
        assert!(agrees("bench-parked-timers", &[]));
    }
}
