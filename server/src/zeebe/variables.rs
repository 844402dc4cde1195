//! Camunda 8 variables: `POST /v2/variables/search` and `GET /v2/variables/{variableKey}`,
//! over an instance's variables as its snapshot holds them (`ops::Ops::variables`).
//!
//! qflow keeps an instance's variables in its snapshot, not in a table: a search names
//! its instance (`processInstanceKey`, or a `variableKey`, which names one), and one that
//! does not is refused (400) rather than read every instance. The scope of every
//! variable is its instance (`scopeKey` = `processInstanceKey`): the locals a sub-process
//! instance holds while it runs are not listed. A variable's key names the variable by
//! its instance and name (`KeyKind::Variable`). Values are JSON text, as Camunda sends
//! them; a search cuts one longer than 8,191 characters there (`isTruncated`), as
//! Camunda's default threshold does, and `GET` gives it whole.

use axum::extract::{Path, State};
use axum::Json;
use qflow_store::{InstanceId, KeyKind, KeyName};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::search::{self, one_order, PageView, SearchPage};
use super::{path_key, Result, DEFAULT_TENANT};
use crate::auth::{Caller, ReadScope};
use crate::problem::{Place, Problem};
use crate::AppState;

/// The longest value a search answers whole, in characters (Camunda's default
/// `variableSizeThreshold`).
const VALUE_CHARS_IN_SEARCH: usize = 8_191;

/// Camunda 8's `VariableSearchResult` (and, with the whole value and no
/// `isTruncated`, its `VariableResult`).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VariableView {
    pub name: String,
    /// The value as JSON text.
    pub value: String,
    /// Whether `value` was cut (searches only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_truncated: Option<bool>,
    pub tenant_id: &'static str,
    #[schema(pattern = "^[0-9]+$")]
    pub variable_key: String,
    /// The instance: qflow lists an instance's own variables.
    #[schema(pattern = "^[0-9]+$")]
    pub scope_key: String,
    #[schema(pattern = "^[0-9]+$")]
    pub process_instance_key: String,
    /// Always null (Camunda 8.9 and 8.10 send it).
    #[schema(value_type = Option<String>)]
    pub root_process_instance_key: Option<String>,
}

/// The variables of one instance with their keys, by name.
async fn of_instance(
    state: &AppState,
    instance: InstanceId,
    place: Place,
) -> Result<Vec<(String, Value, i64, i64)>> {
    let variables = state
        .ops
        .variables(instance)
        .await
        .map_err(|e| Problem::from_ops(e, place))?;
    let mut names = vec![KeyName::instance(instance)];
    names.extend(variables.keys().map(|name| KeyName {
        instance,
        kind: KeyKind::Variable,
        node: name.clone(),
        attempt: 0,
    }));
    let keys = state
        .ops
        .camunda_keys(&names)
        .await
        .map_err(|e| Problem::from_ops(e, place))?;
    Ok(variables
        .into_iter()
        .zip(keys[1..].iter())
        .map(|((name, value), key)| (name, value, *key, keys[0]))
        .collect())
}

fn view(name: String, value: &Value, key: i64, instance_key: i64, cut: bool) -> VariableView {
    let mut text = value.to_string();
    let mut truncated = false;
    if cut && text.chars().count() > VALUE_CHARS_IN_SEARCH {
        text = text.chars().take(VALUE_CHARS_IN_SEARCH).collect();
        truncated = true;
    }
    VariableView {
        name,
        value: text,
        is_truncated: cut.then_some(truncated),
        tenant_id: DEFAULT_TENANT,
        variable_key: key.to_string(),
        scope_key: instance_key.to_string(),
        process_instance_key: instance_key.to_string(),
        root_process_instance_key: None,
    }
}

/// One variable, its value whole (Camunda 8 `GET /v2/variables/{variableKey}`).
#[utoipa::path(get, path = "/v2/variables/{variableKey}", tag = "zeebe jobs",
    params(("variableKey" = String, Path, pattern = "^-?[0-9]{1,18}$", description = "The key a search answered")),
    responses(
        (status = 200, description = "The variable", body = VariableView),
        (status = 404, description = "No such variable (or its instance no longer has it)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["read"])))]
pub async fn get(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    Path(key): Path<String>,
) -> Result<Json<VariableView>> {
    let key = path_key("variableKey", &key)?;
    let name = state
        .ops
        .camunda_key(key, KeyKind::Variable, "variable")
        .await
        .map_err(|e| Problem::from_ops(e, Place::Path))?;
    let all = of_instance(&state, name.instance, Place::Path).await?;
    let (var, value, key, instance_key) = all
        .into_iter()
        .find(|(n, ..)| *n == name.node)
        .ok_or_else(|| {
            Problem::from_ops(
                qflow_ops::Error::NotFound {
                    what: "variable",
                    id: key.to_string(),
                },
                Place::Path,
            )
        })?;
    Ok(Json(view(var, &value, key, instance_key, false)))
}

one_order!(VariableSort, VariableSortField, "name");

/// Camunda 8's `VariableSearchQuery`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VariableSearchBody {
    /// Only `name` ascending, or none (the same order).
    #[serde(default, deserialize_with = "search::optional_objects")]
    pub sort: Option<Vec<VariableSort>>,
    #[serde(default, deserialize_with = "search::optional_object")]
    pub filter: Option<VariableFilter>,
    #[serde(default, deserialize_with = "search::optional_object")]
    pub page: Option<SearchPage>,
}

/// Camunda 8's `VariableFilter`: `processInstanceKey` (or a `variableKey`) is required.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VariableFilter {
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^-?[0-9]{1,18}$")]
    pub process_instance_key: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^-?[0-9]{1,18}$")]
    pub variable_key: Option<Value>,
    /// The instance's key too: every variable qflow lists is the instance's.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^-?[0-9]{1,18}$")]
    pub scope_key: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub name: Option<Value>,
    /// The value as JSON text (`"\"EUR\""`, `"42"`).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub value: Option<Value>,
    #[serde(default)]
    pub is_truncated: Option<bool>,
    /// Only `<default>`.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^<default>$")]
    pub tenant_id: Option<Value>,
}

/// Camunda 8's `VariableSearchQueryResult`.
#[derive(Debug, Serialize, ToSchema)]
pub struct VariableSearchView {
    pub items: Vec<VariableView>,
    pub page: PageView,
}

/// Searches one instance's variables (Camunda 8 `POST /v2/variables/search`), by name,
/// page by page (`page.after`: the previous `endCursor`).
#[utoipa::path(post, path = "/v2/variables/search", tag = "zeebe jobs",
    request_body = VariableSearchBody,
    responses(
        (status = 200, description = "One page of the instance's variables the filter selects", body = VariableSearchView),
        (status = 422, description = "No instance named (`processInstanceKey`, `scopeKey` or `variableKey`), or `page.after` is not an `endCursor` this search answered", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = ["read"])))]
pub async fn search(
    State(state): State<AppState>,
    _caller: Caller<ReadScope>,
    crate::body::JsonBody(body): crate::body::JsonBody<VariableSearchBody>,
) -> Result<Json<VariableSearchView>> {
    let paging = search::paging(body.page)?;
    let f = body.filter.unwrap_or_default();
    let path = |field: &'static str| ["filter", field];
    search::filter_tenant(&path("tenantId"), &f.tenant_id)?;
    let instance_key = search::filter_key(&path("processInstanceKey"), &f.process_instance_key)?;
    let scope_key = search::filter_key(&path("scopeKey"), &f.scope_key)?;
    let variable_key = search::filter_key(&path("variableKey"), &f.variable_key)?;
    let name = search::filter_string(&path("name"), &f.name)?;
    // The value as JSON text, compared as the value it spells (`"42"` and `" 42"` alike);
    // text that is no JSON matches nothing.
    let value = search::filter_string(&path("value"), &f.value)?
        .map(|text| serde_json::from_str::<Value>(&text).ok());
    let empty = || {
        Json(VariableSearchView {
            items: Vec::new(),
            page: search::page_view(0, None),
        })
    };
    // The instance: named by its key, its scope's, or a variable's.
    let mut instance: Option<InstanceId> = None;
    for (key, kind, what) in [
        (instance_key, KeyKind::Instance, "process instance"),
        (scope_key, KeyKind::Instance, "process instance"),
        (variable_key, KeyKind::Variable, "variable"),
    ] {
        let Some(key) = key else { continue };
        match state.ops.camunda_key(key, kind, what).await {
            Ok(found) if instance.is_none_or(|i| i == found.instance) => {
                instance = Some(found.instance)
            }
            _ => return Ok(empty()),
        }
    }
    // A well-formed search qflow cannot answer without reading every instance: 422.
    let Some(instance) = instance else {
        let why = "a variable search names its instance (`processInstanceKey`, `scopeKey` \
                   or `variableKey`): qflow keeps variables with their instance";
        return Err(search::instance_required(why));
    };
    let after = paging.cursor;
    let mut items = Vec::new();
    let mut more = None;
    let all = match of_instance(&state, instance, Place::Body).await {
        Ok(all) => all,
        Err(p) if p.status == 404 => return Ok(empty()),
        Err(p) => return Err(p),
    };
    for (var, val, key, instance_key) in all {
        if after.as_ref().is_some_and(|a| var <= *a)
            || name.as_ref().is_some_and(|n| *n != var)
            || value.as_ref().is_some_and(|v| v.as_ref() != Some(&val))
            || variable_key.is_some_and(|k| k != key)
        {
            continue;
        }
        let item = view(var, &val, key, instance_key, true);
        if f.is_truncated.is_some_and(|t| item.is_truncated != Some(t)) {
            continue;
        }
        if items.len() == paging.limit as usize {
            more = items.last().map(|v: &VariableView| v.name.clone());
            break;
        }
        items.push(item);
    }
    Ok(Json(VariableSearchView {
        page: search::page_view(items.len(), more),
        items,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_value_is_cut_in_a_search_only() {
        let long = Value::String("x".repeat(10_000));
        let cut = view("v".into(), &long, 7, 9, true);
        assert_eq!(cut.is_truncated, Some(true));
        assert_eq!(cut.value.chars().count(), VALUE_CHARS_IN_SEARCH);
        let whole = view("v".into(), &long, 7, 9, false);
        assert_eq!(whole.is_truncated, None);
        assert_eq!(whole.value, long.to_string());
        let short = view("n".into(), &Value::from(42), 8, 9, true);
        assert_eq!(
            (short.value.as_str(), short.is_truncated),
            ("42", Some(false))
        );
        assert_eq!(cut.scope_key, "9");
    }
}
