//! Camunda 8 element instances: `GET /v2/element-instances/{elementInstanceKey}` and
//! `POST /v2/element-instances/search`, over the element instances an instance holds
//! now (`ops::Ops::elements`: its snapshot's frontier).
//!
//! qflow keeps an instance's state in its snapshot and no record of the element
//! instances that ended (the attempt history keeps a task's attempts, `GET
//! /v1/instances/{id}/history`). So a search names its instance (`processInstanceKey`,
//! or an `elementInstanceKey`) and one that does not is refused (422) rather than read
//! every instance; what it finds is the instance itself (type `PROCESS`, its element
//! instance key the process instance key, `ACTIVE`, `COMPLETED` or `TERMINATED`) and the
//! element instances active in it: tasks, catches, sub-processes and multi-instance
//! bodies holding tokens, and the node a FAILED instance failed at where no token stands
//! (a gateway no flow left), with its incident — never the completed ones. An element
//! instance's key names its
//! activity instance (`KeyKind::Element`, `docs/activity-instances.md`): a task entered
//! again after its instance ended (a loop) is named, and keyed, as before. qflow does not
//! record when a token entered its element: `startDate` is null for all but the process.

use axum::extract::{Path, State};
use axum::Json;
use qflow_ops::{IncidentView, InstanceElements};
use qflow_store::{InstanceId, KeyKind, KeyName};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;

use super::search::{self, one_order, PageView, SearchPage};
use super::{path_key, Result, DEFAULT_TENANT};
use crate::auth::{Caller, ReadScope};
use crate::problem::{Place, Problem};
use crate::AppState;

/// Camunda 8's `ElementInstanceResult`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ElementInstanceResult {
    pub process_definition_id: String,
    /// The instance's creation for the process; null for the others (qflow does not
    /// record when a token entered its element).
    #[schema(value_type = Option<String>)]
    pub start_date: Option<String>,
    /// The instance's end, for an ended process; null otherwise.
    #[schema(value_type = Option<String>)]
    pub end_date: Option<String>,
    pub element_id: String,
    /// The element's name, or its id when it has none.
    pub element_name: String,
    /// `PROCESS`, `SERVICE_TASK`, `USER_TASK`, `SUB_PROCESS`, `MULTI_INSTANCE_BODY`, …
    #[serde(rename = "type")]
    pub element_type: &'static str,
    /// `ACTIVE`, or for the process of an ended instance `COMPLETED` or `TERMINATED`.
    pub state: &'static str,
    /// An open incident on this element instance (for the process: on any of its).
    pub has_incident: bool,
    pub tenant_id: &'static str,
    #[schema(pattern = "^[0-9]+$")]
    pub element_instance_key: String,
    #[schema(pattern = "^[0-9]+$")]
    pub process_instance_key: String,
    #[schema(pattern = "^[0-9]+$")]
    pub process_definition_key: String,
    /// The open incident on this element instance, when it has one.
    #[schema(value_type = Option<String>, pattern = "^[0-9]+$")]
    pub incident_key: Option<String>,
    /// Always null (Camunda 8.9 and 8.10 send it).
    #[schema(value_type = Option<String>)]
    pub root_process_instance_key: Option<String>,
}

/// The element instances of one instance (the process and its active elements), by key.
async fn of_instance(
    state: &AppState,
    instance: InstanceId,
    place: Place,
) -> Result<Vec<ElementInstanceResult>> {
    let elements = state
        .ops
        .elements(instance)
        .await
        .map_err(|e| Problem::from_ops(e, place))?;
    let incidents: Vec<IncidentView> = state
        .ops
        .incidents(Some(instance), 0)
        .await
        .map_err(|e| Problem::from_ops(e, place))?
        .into_iter()
        .filter(|i| i.resolved_at_ms.is_none())
        .collect();
    let mut names = vec![KeyName::instance(instance)];
    names.extend(elements.active.iter().map(|e| KeyName {
        instance,
        kind: KeyKind::Element,
        node: e.name.clone(),
        attempt: 0,
    }));
    names.extend(incidents.iter().map(|i| KeyName {
        instance,
        kind: KeyKind::Incident,
        node: i.id.to_string(),
        attempt: 0,
    }));
    let keys = state
        .ops
        .camunda_keys(&names)
        .await
        .map_err(|e| Problem::from_ops(e, place))?;
    Ok(results(&elements, &incidents, &keys))
}

/// The results of `elements`, given the keys of the instance, its active elements and
/// its open `incidents`, in that order.
fn results(
    elements: &InstanceElements,
    incidents: &[IncidentView],
    keys: &[i64],
) -> Vec<ElementInstanceResult> {
    let instance = &elements.instance;
    let active = elements.active.len();
    let incident_keys = &keys[1 + active..];
    let base = |key: i64| ElementInstanceResult {
        process_definition_id: elements.process_id.clone(),
        start_date: None,
        end_date: None,
        element_id: elements.process_id.clone(),
        element_name: elements.process_id.clone(),
        element_type: "PROCESS",
        state: "ACTIVE",
        has_incident: false,
        tenant_id: DEFAULT_TENANT,
        element_instance_key: key.to_string(),
        process_instance_key: keys[0].to_string(),
        process_definition_key: instance.deployment.to_string(),
        incident_key: None,
        root_process_instance_key: None,
    };
    // An incident at no node (a stall) is the process's.
    let process_incident = incidents
        .iter()
        .zip(incident_keys)
        .find(|(i, _)| i.node.is_empty())
        .map(|(_, k)| k.to_string());
    let mut out = vec![ElementInstanceResult {
        start_date: Some(search::date(instance.created_at_ms)),
        end_date: instance.ended_at_ms.map(search::date),
        incident_key: process_incident,
        element_name: elements
            .process_name
            .clone()
            .unwrap_or_else(|| elements.process_id.clone()),
        state: match instance.status {
            "completed" => "COMPLETED",
            "cancelled" => "TERMINATED",
            _ => "ACTIVE",
        },
        has_incident: !incidents.is_empty(),
        ..base(keys[0])
    }];
    for (e, key) in elements.active.iter().zip(&keys[1..=active]) {
        let incident = incidents
            .iter()
            .zip(incident_keys)
            .find(|(i, _)| i.node == e.name)
            .map(|(_, k)| k.to_string());
        out.push(ElementInstanceResult {
            element_id: e.element_id.clone(),
            element_name: e
                .element_name
                .clone()
                .unwrap_or_else(|| e.element_id.clone()),
            element_type: e.kind,
            has_incident: incident.is_some(),
            incident_key: incident,
            ..base(*key)
        });
    }
    out.sort_by_key(|r| r.element_instance_key.parse::<i64>().unwrap_or(i64::MAX));
    out
}

/// One element instance (Camunda 8 `GET /v2/element-instances/{elementInstanceKey}`):
/// one active now, or an instance's process element (its key is the process instance
/// key). An element instance that has ended is not found.
#[utoipa::path(get, path = "/v2/element-instances/{elementInstanceKey}", tag = "zeebe jobs",
    params(("elementInstanceKey" = String, Path, pattern = "^-?[0-9]{1,18}$", description = "The key a search, a job or an incident answered")),
    responses(
        (status = 200, description = "The element instance", body = ElementInstanceResult),
        (status = 404, description = "No such element instance active now", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["read"])))]
pub async fn get(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    Path(key): Path<String>,
) -> Result<Json<ElementInstanceResult>> {
    let key = path_key("elementInstanceKey", &key)?;
    let name = named_by(&state, key)
        .await
        .map_err(|e| Problem::from_ops(e, Place::Path))?;
    let all = of_instance(&state, name.instance, Place::Path).await?;
    all.into_iter()
        .find(|r| r.element_instance_key == key.to_string())
        .map(Json)
        .ok_or_else(|| {
            Problem::from_ops(
                qflow_ops::Error::NotFound {
                    what: "element instance",
                    id: format!("{key} (qflow keeps the active ones only)"),
                },
                Place::Path,
            )
        })
}

/// The name `key` was given to: an element instance's, or an instance's (its process
/// element).
async fn named_by(state: &AppState, key: i64) -> qflow_ops::Result<KeyName> {
    match state
        .ops
        .camunda_key(key, KeyKind::Element, "element instance")
        .await
    {
        Err(qflow_ops::Error::NotFound { .. }) => {
            state
                .ops
                .camunda_key(key, KeyKind::Instance, "element instance")
                .await
        }
        other => other,
    }
}

one_order!(
    ElementInstanceSort,
    ElementInstanceSortField,
    "elementInstanceKey"
);

/// Camunda 8's `ElementInstanceSearchQuery`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ElementInstanceSearchBody {
    /// Only `elementInstanceKey` ascending, or none (the same order).
    #[serde(default, deserialize_with = "search::optional_objects")]
    pub sort: Option<Vec<ElementInstanceSort>>,
    #[serde(default, deserialize_with = "search::optional_object")]
    pub filter: Option<ElementInstanceFilter>,
    #[serde(default, deserialize_with = "search::optional_object")]
    pub page: Option<SearchPage>,
}

/// Camunda 8's `ElementInstanceFilter`: `processInstanceKey` (or an
/// `elementInstanceKey`) is required; Camunda's other fields only null.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ElementInstanceFilter {
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^-?[0-9]{1,18}$")]
    pub process_instance_key: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^-?[0-9]{1,18}$")]
    pub element_instance_key: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub process_definition_id: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^-?[0-9]{1,18}$")]
    pub process_definition_key: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^(ACTIVE|COMPLETED|TERMINATED)$")]
    pub state: Option<Value>,
    #[serde(default, rename = "type")]
    #[schema(value_type = Option<String>)]
    pub element_type: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub element_id: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub element_name: Option<Value>,
    #[serde(default)]
    pub has_incident: Option<bool>,
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^-?[0-9]{1,18}$")]
    pub incident_key: Option<Value>,
    /// Only `<default>`.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^<default>$")]
    pub tenant_id: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    pub rest: BTreeMap<String, Value>,
}

pub(crate) const OTHER_FILTER_FIELDS: &[&str] =
    &["startDate", "endDate", "elementInstanceScopeKey"];

/// Camunda 8's `ElementInstanceSearchQueryResult`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ElementInstanceSearchView {
    pub items: Vec<ElementInstanceResult>,
    pub page: PageView,
}

/// Searches one instance's element instances (Camunda 8
/// `POST /v2/element-instances/search`): the process and the elements active now, by
/// key, page by page (`page.after`: the previous `endCursor`).
#[utoipa::path(post, path = "/v2/element-instances/search", tag = "zeebe jobs",
    request_body = ElementInstanceSearchBody,
    responses(
        (status = 200, description = "One page of the instance's element instances the filter selects", body = ElementInstanceSearchView),
        (status = 422, description = "No instance named (`processInstanceKey` or `elementInstanceKey`), or `page.after` is not an `endCursor` this search answered", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["read"])))]
pub async fn search(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    crate::body::JsonBody(body): crate::body::JsonBody<ElementInstanceSearchBody>,
) -> Result<Json<ElementInstanceSearchView>> {
    let paging = search::paging(body.page)?;
    let f = body.filter.unwrap_or_default();
    let path = |field: &'static str| ["filter", field];
    search::filter_tenant(&path("tenantId"), &f.tenant_id)?;
    search::refuse_rest("filter", &f.rest, OTHER_FILTER_FIELDS)?;
    let instance_key = search::filter_key(&path("processInstanceKey"), &f.process_instance_key)?;
    let element_key = search::filter_key(&path("elementInstanceKey"), &f.element_instance_key)?;
    let definition_key =
        search::filter_key(&path("processDefinitionKey"), &f.process_definition_key)?;
    let incident_key = search::filter_key(&path("incidentKey"), &f.incident_key)?;
    let definition_id =
        search::filter_string(&path("processDefinitionId"), &f.process_definition_id)?;
    let wanted_state = search::filter_string(&path("state"), &f.state)?;
    if let Some(s) = &wanted_state {
        if !["ACTIVE", "COMPLETED", "TERMINATED"].contains(&s.as_str()) {
            return Err(super::invalid_at(
                &path("state"),
                "is ACTIVE, COMPLETED or TERMINATED",
            ));
        }
    }
    let element_type = search::filter_string(&path("type"), &f.element_type)?;
    let element_id = search::filter_string(&path("elementId"), &f.element_id)?;
    let element_name = search::filter_string(&path("elementName"), &f.element_name)?;
    let empty = || {
        Json(ElementInstanceSearchView {
            items: Vec::new(),
            page: search::page_view(0, None),
        })
    };
    // The instance: named by its key or an element instance's.
    let mut instance: Option<InstanceId> = None;
    if let Some(key) = instance_key {
        match state
            .ops
            .camunda_key(key, KeyKind::Instance, "process instance")
            .await
        {
            Ok(found) => instance = Some(found.instance),
            Err(qflow_ops::Error::NotFound { .. }) => return Ok(empty()),
            Err(e) => return Err(Problem::from_ops(e, Place::Body)),
        }
    }
    if let Some(key) = element_key {
        match named_by(&state, key).await {
            Ok(found) if instance.is_none_or(|i| i == found.instance) => {
                instance = Some(found.instance)
            }
            Ok(_) | Err(qflow_ops::Error::NotFound { .. }) => return Ok(empty()),
            Err(e) => return Err(Problem::from_ops(e, Place::Body)),
        }
    }
    let Some(instance) = instance else {
        let why = "an element-instance search names its instance (`processInstanceKey` or \
                   `elementInstanceKey`): qflow keeps element instances with their instance";
        return Err(search::instance_required(why));
    };
    let after = match &paging.cursor {
        Some(c) => Some(search::parse_key(c).ok_or_else(search::unknown_cursor)?),
        None => None,
    };
    let all = match of_instance(&state, instance, Place::Body).await {
        Ok(all) => all,
        Err(p) if p.status == 404 => return Ok(empty()),
        Err(p) => return Err(p),
    };
    let mut items = Vec::new();
    let mut more = None;
    for r in all {
        let key: i64 = r.element_instance_key.parse().unwrap_or(i64::MAX);
        let same = |want: &Option<String>, have: &str| want.as_ref().is_none_or(|w| w == have);
        let keep = after.is_none_or(|a| key > a)
            && element_key.is_none_or(|k| k == key)
            && definition_key.is_none_or(|k| k.to_string() == r.process_definition_key)
            && incident_key.is_none_or(|k| r.incident_key.as_deref() == Some(&k.to_string()))
            && f.has_incident.is_none_or(|h| h == r.has_incident)
            && same(&definition_id, &r.process_definition_id)
            && same(&wanted_state, r.state)
            && same(&element_type, r.element_type)
            && same(&element_id, &r.element_id)
            && same(&element_name, &r.element_name);
        if !keep {
            continue;
        }
        if items.len() == paging.limit as usize {
            more = items
                .last()
                .map(|l: &ElementInstanceResult| l.element_instance_key.clone());
            break;
        }
        items.push(r);
    }
    Ok(Json(ElementInstanceSearchView {
        page: search::page_view(items.len(), more),
        items,
    }))
}
