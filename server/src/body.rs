//! Request bodies and query strings, refused as problem details that point at the fault.
//!
//! axum's own `Json` rejects with plain text; these extractors say the same things as
//! RFC 9457 documents: a body over the limit is 413, a body that is not JSON or not the
//! expected shape is 400 with a JSON pointer to the field (or the line and column of a
//! syntax error), and a body without `Content-Type: application/json` is 415.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use serde::de::DeserializeOwned;

use crate::problem::{pointer_of, Place, Problem};

/// A JSON request body of type `T`.
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        let is_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| {
                let v = v.trim();
                v.eq_ignore_ascii_case("application/json")
                    || (v.starts_with("application/") && v.ends_with("+json"))
            });
        if !is_json {
            return Err(Problem::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the body must be JSON, sent with `Content-Type: application/json`",
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                Problem::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    "the body is larger than this server accepts (`limits.body_bytes`)",
                )
            } else {
                Problem::new(
                    StatusCode::BAD_REQUEST,
                    "malformed_body",
                    format!("the body could not be read: {}", rejection.body_text()),
                )
            }
        })?;
        parse(&bytes).map(JsonBody)
    }
}

/// A JSON request body of type `T` that may be absent: an empty body or JSON `null` is
/// `None`, whatever its `Content-Type` (Camunda 8 clients send some requests with no
/// body at all); any other body is read as [`JsonBody`] reads one.
pub struct OptionalJsonBody<T>(pub Option<T>);

impl<S, T> FromRequest<S> for OptionalJsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        let (parts, body) = req.into_parts();
        let bytes = Bytes::from_request(Request::from_parts(parts.clone(), body), state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    Problem::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "body_too_large",
                        "the body is larger than this server accepts (`limits.body_bytes`)",
                    )
                } else {
                    Problem::new(
                        StatusCode::BAD_REQUEST,
                        "malformed_body",
                        format!("the body could not be read: {}", rejection.body_text()),
                    )
                }
            })?;
        // No body, or JSON `null` (Camunda's optional bodies are `object | null`).
        if bytes.trim_ascii().is_empty() || bytes.trim_ascii() == b"null" {
            return Ok(OptionalJsonBody(None));
        }
        let req = Request::from_parts(parts, axum::body::Body::from(bytes));
        JsonBody::<T>::from_request(req, state)
            .await
            .map(|JsonBody(v)| OptionalJsonBody(Some(v)))
    }
}

/// Parses `bytes` as one JSON document of type `T`, or says where it is wrong. Every
/// request body of this API is a JSON object: a top-level array is refused before it
/// is read (serde would read an array into a struct by position).
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            "malformed_body",
            "the body must be a JSON object, not an array",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: Result<T, Problem> = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let inner = e.inner();
        if inner.is_syntax() || inner.is_eof() {
            return malformed(inner);
        }
        let segments: Vec<String> = e
            .path()
            .iter()
            .filter_map(|s| match s {
                serde_path_to_error::Segment::Seq { index } => Some(index.to_string()),
                serde_path_to_error::Segment::Map { key } => Some(key.clone()),
                serde_path_to_error::Segment::Enum { variant } => Some(variant.clone()),
                serde_path_to_error::Segment::Unknown => None,
            })
            .collect();
        let pointer = pointer_of(segments.iter().map(String::as_str));
        // serde's message carries its own "at line N column M"; the pointer says where.
        let message = strip_position(&inner.to_string());
        let mut problem = Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid",
            format!(
                "{}: {message}",
                if pointer.is_empty() { "/" } else { &pointer }
            ),
        );
        problem.errors.push(crate::problem::FieldError {
            pointer: Some(pointer),
            parameter: None,
            detail: message,
        });
        problem
    });
    let value = value?;
    de.end().map_err(|e| malformed(&e))?;
    Ok(value)
}

fn malformed(e: &serde_json::Error) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "malformed_json",
        format!(
            "the body is not valid JSON: {} (line {}, column {})",
            strip_position(&e.to_string()),
            e.line(),
            e.column()
        ),
    )
}

fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

/// A query string of type `T`.
pub struct QueryParams<T>(pub T);

impl<S, T> FromRequestParts<S> for QueryParams<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Problem> {
        query_params(parts.uri.query().unwrap_or("")).map(QueryParams)
    }
}

/// Parses a query string as `T`, or says which parameter is wrong (a handler that takes
/// a repeated parameter out first, then parses the rest).
pub fn query_params<T: DeserializeOwned>(query: &str) -> Result<T, Problem> {
    let de = serde_urlencoded_de(query);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let parameter = e.path().to_string();
        let detail = e.inner().to_string();
        let problem = Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid",
            format!("query parameter `{parameter}`: {detail}"),
        );
        problem.at(Place::Query, &parameter, detail)
    })
}

fn serde_urlencoded_de(query: &str) -> serde_urlencoded::Deserializer<'_> {
    serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Shape {
        budget: String,
        list: Vec<u32>,
    }

    #[test]
    fn a_wrong_field_is_pointed_at() {
        let p = parse::<Shape>(br#"{"budget": "keep", "list": [1, "x"]}"#).unwrap_err();
        assert_eq!(p.status, 400);
        assert_eq!(p.errors[0].pointer.as_deref(), Some("/list/1"));
        let p = parse::<Shape>(br#"{"budget": "keep", "list": [], "extra": 1}"#).unwrap_err();
        assert!(p.detail.contains("unknown field `extra`"), "{}", p.detail);
    }

    #[test]
    fn a_syntax_error_names_line_and_column() {
        let p = parse::<Shape>(b"{\n  \"budget\": ").unwrap_err();
        assert_eq!(p.code, "malformed_json");
        assert!(p.detail.contains("line 2"), "{}", p.detail);
        let p = parse::<Shape>(br#"{"budget": "keep", "list": []} trailing"#).unwrap_err();
        assert_eq!(p.code, "malformed_json");
    }
}
