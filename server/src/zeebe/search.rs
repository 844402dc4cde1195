//! What the Camunda 8 searches (`POST /v2/…/search`) share: the `page` (a limit, and
//! the `endCursor` of the page before as `after`), the `sort` (only the order qflow
//! lists in), filter properties (a value, or `{"$eq": value}`), the answer's `page`, and
//! dates in RFC 3339.
//!
//! qflow lists by keyset, never by offset: `from` is only 0 and `before` only null, and
//! a search asks for more with the answer's `endCursor` (present while more may follow).
//! A filter operator other than `$eq` (`$in`, `$like`, `$gt`, …) and a filter field
//! qflow does not keep are refused with a 400 naming the field, never ignored: a filter
//! that was ignored would answer a question nobody asked.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::{invalid_at, unsupported, Result, DEFAULT_TENANT};
use crate::problem::Problem;

/// Camunda's default page size.
const PAGE_LIMIT_DEFAULT: u32 = 100;
/// The largest page qflow answers.
pub(super) const PAGE_LIMIT_MAX: u32 = 1_000;

/// Camunda 8's `SearchQueryPageRequest`, the forms qflow pages by.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SearchPage {
    /// Only 0, null or absent: qflow pages by cursor (`after`), not by offset.
    #[serde(default, deserialize_with = "qflow_ops::json::optional_integer")]
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 0)]
    pub from: Option<i64>,
    /// At most this many items (1 to 1,000; Camunda's default, 100, when absent).
    #[serde(default, deserialize_with = "qflow_ops::json::optional_integer")]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// The `endCursor` of the page before: the search continues after it.
    #[serde(default)]
    #[schema(min_length = 2, max_length = 300, pattern = "^[0-9a-f]*$")]
    pub after: Option<String>,
    /// Only null: qflow pages forwards.
    #[serde(default)]
    #[schema(schema_with = super::only_null)]
    pub before: Option<String>,
}

/// A search's sort request for a search that answers in one order, by `$field`
/// ascending: Camunda's `{field, order}` with only that field and `ASC` (or no order).
/// Any other is refused where it is read, naming the value and the one accepted.
macro_rules! one_order {
    ($sort:ident, $field:ident, $name:literal) => {
        #[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        pub struct $sort {
            pub field: $field,
            #[serde(default)]
            pub order: Option<super::search::Ascending>,
        }

        #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
        pub enum $field {
            #[serde(rename = $name)]
            #[schema(rename = $name)]
            Natural,
        }
    };
}
pub(super) use one_order;

/// The one sort order qflow answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
pub enum Ascending {
    #[serde(rename = "ASC")]
    #[schema(rename = "ASC")]
    Asc,
}

/// Reads an optional member that must be a JSON object (or null): serde's derive would
/// also read a struct from an array, by position, which Camunda's schema does not allow.
pub(super) fn optional_object<'de, D, T>(d: D) -> std::result::Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::Error;
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Object(_)) => serde_path_to_error::deserialize(v)
            .map(Some)
            .map_err(|e| D::Error::custom(at_path(&e))),
        Some(_) => Err(D::Error::custom("expected an object")),
    }
}

/// An error inside a member read by [`optional_object`], with the path to its field.
fn at_path(e: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = e.path().to_string();
    if path == "." {
        e.inner().to_string()
    } else {
        format!("{path}: {}", e.inner())
    }
}

/// [`optional_object`] for a list of objects (a search's `sort`).
pub(super) fn optional_objects<'de, D, T>(d: D) -> std::result::Result<Option<Vec<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::Error;
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::Object(_) => serde_path_to_error::deserialize(v)
                    .map_err(|e| D::Error::custom(format!("{i}.{}", at_path(&e)))),
                _ => Err(D::Error::custom(format!("{i}: expected an object"))),
            })
            .collect::<std::result::Result<Vec<T>, D::Error>>()
            .map(Some),
        Some(_) => Err(D::Error::custom("expected an array")),
    }
}

/// A search's page, read: how many, and the listing's own cursor to continue after.
#[derive(Debug)]
pub(super) struct Paging {
    pub limit: u32,
    pub cursor: Option<String>,
}

/// Reads `page` (a search's `sort` is read by its type: the one order qflow answers in).
pub(super) fn paging(page: Option<SearchPage>) -> Result<Paging> {
    let page = page.unwrap_or_default();
    if page.from.is_some_and(|f| f != 0) {
        return Err(unsupported(
            &["page", "from"],
            page.from.map(Value::from),
            "qflow pages by cursor: pass the answer's `endCursor` as `after`",
        ));
    }
    if let Some(before) = page.before {
        return Err(unsupported(
            &["page", "before"],
            Some(Value::String(before)),
            "qflow pages forwards only, with `after`",
        ));
    }
    let limit = match page.limit {
        None => PAGE_LIMIT_DEFAULT,
        Some(n) => u32::try_from(n)
            .ok()
            .filter(|n| (1..=PAGE_LIMIT_MAX).contains(n))
            .ok_or_else(|| {
                invalid_at(
                    &["page", "limit"],
                    &format!("{n} is outside 1..={PAGE_LIMIT_MAX}"),
                )
            })?,
    };
    let cursor = page.after.map(|c| cursor_from_api(&c)).transpose()?;
    Ok(Paging { limit, cursor })
}

/// The listing's cursor as the API sends it: Camunda's cursors are base64 text, and
/// hex is base64's alphabet in a length base64 allows.
pub(super) fn cursor_to_api(cursor: &str) -> String {
    hex::encode(cursor.as_bytes())
}

/// A cursor as sent back: a 422 when it is not hex of a cursor (a well-formed value
/// that names no position; the listing refuses one whose position does not parse the
/// same way).
fn cursor_from_api(text: &str) -> Result<String> {
    hex::decode(text)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|c| !c.is_empty())
        .ok_or_else(unknown_cursor)
}

/// The problem of a page cursor this server did not answer.
pub(super) fn unknown_cursor() -> Problem {
    Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid",
        "`page.after`: is not an `endCursor` this search answered",
    )
    .at_pointer(
        ["page", "after"],
        "is not an `endCursor` this search answered",
    )
}

/// The refusal of a well-formed search that names no instance where qflow keeps what it
/// searches with the instance (variables, element instances): a 422 at
/// `/filter/processInstanceKey`, `why` saying which filters name one.
pub(super) fn instance_required(why: &str) -> Problem {
    Problem::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid",
        format!("`filter.processInstanceKey`: {why}"),
    )
    .at_pointer(["filter", "processInstanceKey"], why)
}

/// A listing's refusal as a search answers it: a cursor the listing cannot read is one
/// this search did not answer (422 at `/page/after`).
pub(super) fn listing_problem(e: qflow_ops::Error) -> Problem {
    match e {
        qflow_ops::Error::Invalid {
            field: "cursor", ..
        } => unknown_cursor(),
        e => Problem::from_ops(e, crate::problem::Place::Body),
    }
}

/// Camunda 8's `SearchQueryPageResponse`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PageView {
    /// The items of this page, plus one when more may follow (`hasMoreTotalItems`):
    /// qflow counts what it read, never the whole result.
    pub total_items: u64,
    /// Whether more items may follow this page.
    pub has_more_total_items: bool,
    /// Always null: qflow pages forwards only.
    #[schema(value_type = Option<String>)]
    pub start_cursor: Option<String>,
    /// Pass as `page.after` to get the next page; null on the last page.
    #[schema(pattern = "^[0-9a-f]*$")]
    pub end_cursor: Option<String>,
}

/// The answer's page for `items` found, and the listing's cursor when more may follow.
pub(super) fn page_view(items: usize, next: Option<String>) -> PageView {
    PageView {
        total_items: items as u64 + u64::from(next.is_some()),
        has_more_total_items: next.is_some(),
        start_cursor: None,
        end_cursor: next.as_deref().map(cursor_to_api),
    }
}

/// An instant (ms since the epoch) in RFC 3339, UTC (`Z`), with its fraction of a
/// second when it has one.
pub(super) fn date(ms: i64) -> String {
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    at.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// A filter property's value: the value itself, or the `$eq` of `{"$eq": value}`;
/// `None` for null. Any other operator is a 400 at `path`.
pub(super) fn filter_eq<'a>(path: &[&str], value: &'a Value) -> Result<Option<&'a Value>> {
    match value {
        Value::Null => Ok(None),
        Value::Object(map) => match map.get("$eq") {
            Some(v) if map.len() == 1 => Ok(Some(v).filter(|v| !v.is_null())),
            _ => Err(unsupported(
                path,
                Some(value.clone()),
                "a filter takes a value or `{\"$eq\": value}`; qflow has no other operator",
            )),
        },
        v => Ok(Some(v)),
    }
}

/// A string filter property.
pub(super) fn filter_string(path: &[&str], value: &Option<Value>) -> Result<Option<String>> {
    let Some(value) = value else { return Ok(None) };
    match filter_eq(path, value)? {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(invalid_at(path, "is a string or `{\"$eq\": string}`")),
    }
}

/// An integer filter property (a version).
pub(super) fn filter_int(path: &[&str], value: &Option<Value>) -> Result<Option<i64>> {
    let Some(value) = value else { return Ok(None) };
    match filter_eq(path, value)? {
        None => Ok(None),
        // JSON Schema counts an integral float (`7.0`) as an integer.
        Some(v) => v
            .as_i64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
                    .map(|f| f as i64)
            })
            .map(Some)
            .ok_or_else(|| invalid_at(path, "is an integer or `{\"$eq\": integer}`")),
    }
}

/// A key as Camunda writes one: a 64-bit integer in decimal, an optional `-` and digits
/// only (no `+`, no spaces, which `str::parse` would take).
pub(super) fn parse_key(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A name filter property (an assignee, a candidate): 1 to 128 characters without
/// control characters, as the task list's names are.
pub(super) fn filter_name(path: &[&str], value: &Option<Value>) -> Result<Option<String>> {
    let name = filter_string(path, value)?;
    if let Some(n) = &name {
        let max = qflow_core::ASSIGNMENT_NAME_CHARS_MAX;
        let chars = n.chars().count();
        if chars == 0 || chars > max {
            return Err(invalid_at(
                path,
                &format!("is 1 to {max} characters, this one is {chars}"),
            ));
        }
        if n.chars().any(char::is_control) {
            return Err(invalid_at(path, "may not hold control characters"));
        }
    }
    Ok(name)
}

/// A key filter property: a key in decimal in a string, as Camunda's keys are sent.
pub(super) fn filter_key(path: &[&str], value: &Option<Value>) -> Result<Option<i64>> {
    let Some(value) = value else { return Ok(None) };
    let key = match filter_eq(path, value)? {
        None => return Ok(None),
        Some(Value::String(s)) => parse_key(s),
        Some(_) => None,
    };
    key.map(Some)
        .ok_or_else(|| invalid_at(path, "is a key: a 64-bit integer in decimal, in a string"))
}

/// The tenant filter: only `<default>`.
pub(super) fn filter_tenant(path: &[&str], value: &Option<Value>) -> Result<()> {
    match filter_string(path, value)? {
        Some(t) if t != DEFAULT_TENANT => Err(unsupported(
            path,
            Some(Value::String(t)),
            "qflow has one tenant, `<default>`",
        )),
        _ => Ok(()),
    }
}

/// The fields of a Camunda filter qflow does not keep (`rest`, what the filter's
/// struct did not read): null is accepted, anything else is a 400 naming the field; a
/// field Camunda's filter does not have either is a 400 too.
pub(super) fn refuse_rest(
    filter: &str,
    rest: &BTreeMap<String, Value>,
    camunda_fields: &[&str],
) -> Result<()> {
    for (name, value) in rest {
        if !camunda_fields.contains(&name.as_str()) {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "invalid",
                format!("{filter}.{name}: unknown field `{name}`"),
            )
            .at(
                crate::problem::Place::Body,
                "filter",
                format!("unknown field `{name}`"),
            ));
        }
        if !value.is_null() {
            return Err(unsupported(
                &[filter, name],
                Some(value.clone()),
                "qflow keeps nothing this filter could be judged against",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dates_are_rfc_3339_in_utc() {
        assert_eq!(date(0), "1970-01-01T00:00:00Z");
        assert_eq!(date(1_764_905_400_123), "2025-12-05T03:30:00.123Z");
    }

    #[test]
    fn cursors_round_trip_as_base64_alphabet() {
        let c = "1764905400123.0190c7a2-5b1e-7c3d-9f00-3a4b5c6d7e8f";
        let api = cursor_to_api(c);
        assert!(api.len().is_multiple_of(2) && api.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(cursor_from_api(&api).unwrap(), c);
        assert!(cursor_from_api("zz").is_err());
        assert!(cursor_from_api("").is_err());
    }

    #[test]
    fn filter_properties_take_a_value_or_eq_only() {
        let p = &["filter", "state"];
        assert_eq!(
            filter_string(p, &Some(json!("ACTIVE"))).unwrap().as_deref(),
            Some("ACTIVE")
        );
        assert_eq!(
            filter_string(p, &Some(json!({"$eq": "ACTIVE"})))
                .unwrap()
                .as_deref(),
            Some("ACTIVE")
        );
        assert_eq!(filter_string(p, &Some(json!(null))).unwrap(), None);
        assert_eq!(filter_string(p, &None).unwrap(), None);
        for bad in [
            json!({"$in": ["ACTIVE"]}),
            json!({"$eq": "A", "$neq": "B"}),
            json!(7),
        ] {
            assert!(filter_string(p, &Some(bad.clone())).is_err(), "{bad}");
        }
        assert_eq!(
            filter_key(p, &Some(json!("2251799813685249"))).unwrap(),
            Some(2251799813685249)
        );
        assert!(filter_key(p, &Some(json!("x"))).is_err());
        assert!(filter_key(p, &Some(json!("+5"))).is_err());
        assert!(filter_key(p, &Some(json!(" 5"))).is_err());
        assert!(filter_key(p, &Some(json!(5))).is_err());
        assert_eq!(filter_key(p, &Some(json!("-1"))).unwrap(), Some(-1));
        assert!(filter_key(p, &Some(json!("9223372036854775808"))).is_err());
        assert_eq!(filter_int(p, &Some(json!({"$eq": 3}))).unwrap(), Some(3));
        assert_eq!(filter_int(p, &Some(json!(-4.0))).unwrap(), Some(-4));
        assert!(filter_int(p, &Some(json!(4.5))).is_err());
    }

    #[test]
    fn paging_reads_limits_and_cursors() {
        let p = paging(None).unwrap();
        assert_eq!((p.limit, p.cursor), (100, None));
        let page = SearchPage {
            limit: Some(5),
            after: Some(cursor_to_api("7.x")),
            ..SearchPage::default()
        };
        let p = paging(Some(page)).unwrap();
        assert_eq!((p.limit, p.cursor.as_deref()), (5, Some("7.x")));
        for page in [
            SearchPage {
                from: Some(10),
                ..SearchPage::default()
            },
            SearchPage {
                limit: Some(0),
                ..SearchPage::default()
            },
            SearchPage {
                limit: Some(1001),
                ..SearchPage::default()
            },
            SearchPage {
                before: Some("ab".into()),
                ..SearchPage::default()
            },
        ] {
            assert!(paging(Some(page)).is_err());
        }
        let after = SearchPage {
            after: Some("b7c57d1d64e0".into()),
            ..SearchPage::default()
        };
        assert_eq!(paging(Some(after)).unwrap_err().status, 422);
    }
}
