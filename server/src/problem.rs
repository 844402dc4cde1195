//! Errors as RFC 9457 problem details: `application/problem+json` with a stable `code`
//! (the same codes the CLI prints) and, for a bad field, a JSON pointer into the request
//! body or the name of the query or path parameter.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// A problem details document (RFC 9457).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem: `urn:qflow:problem:<code>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary of the kind of problem.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong with this request.
    pub detail: String,
    /// A stable machine-readable code: `unauthorized`, `forbidden`, `not_found`,
    /// `invalid`, `malformed_json`, `unsupported_media_type`, `body_too_large`,
    /// `refused`, `conflict`, `model_refused`, `timeout`, `store_unavailable`.
    pub code: String,
    /// The fields at fault, when the problem is about particular fields.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
    /// The request's path (RFC 9457's `instance`: this occurrence), filled in as the
    /// answer leaves the server (`with_instance`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

/// One field at fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct FieldError {
    /// A JSON pointer (RFC 6901) into the request body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    /// The query or path parameter at fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameter: Option<String>,
    pub detail: String,
}

/// Where a field named by an error lives in the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Body,
    Query,
    Path,
}

impl Problem {
    pub fn new(status: StatusCode, code: &str, detail: impl Into<String>) -> Problem {
        Problem {
            kind: format!("urn:qflow:problem:{code}"),
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            status: status.as_u16(),
            detail: detail.into(),
            code: code.to_owned(),
            errors: Vec::new(),
            instance: None,
        }
    }

    /// The same problem, naming `field` (a top-level body field or a parameter) as the
    /// one at fault.
    pub fn at(mut self, place: Place, field: &str, detail: impl Into<String>) -> Problem {
        let (pointer, parameter) = match place {
            Place::Body => (Some(pointer_of([field])), None),
            Place::Query | Place::Path => (None, Some(field.to_owned())),
        };
        self.errors.push(FieldError {
            pointer,
            parameter,
            detail: detail.into(),
        });
        self
    }

    /// The same problem, naming the body member at `path` (from the body's top, e.g.
    /// `["changeset", "timeout"]`) as the one at fault.
    pub fn at_pointer<'a>(
        mut self,
        path: impl IntoIterator<Item = &'a str>,
        detail: impl Into<String>,
    ) -> Problem {
        self.errors.push(FieldError {
            pointer: Some(pointer_of(path)),
            parameter: None,
            detail: detail.into(),
        });
        self
    }

    pub fn unauthorized(detail: &str) -> Problem {
        Problem::new(StatusCode::UNAUTHORIZED, "unauthorized", detail)
    }

    /// An operation error of `qflow_ops`, as the HTTP status that says the same thing.
    /// `place` says where the fields it names come from in this request.
    pub fn from_ops(e: qflow_ops::Error, place: Place) -> Problem {
        use qflow_ops::Error as E;
        match e {
            E::NotFound { .. } => Problem::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
            E::Invalid { field, ref why } => {
                let why = why.clone();
                Problem::new(StatusCode::BAD_REQUEST, "invalid", e.to_string())
                    .at(place, field, why)
            }
            E::Refused(why) => Problem::new(StatusCode::CONFLICT, "refused", why),
            E::Conflict(why) => Problem::new(StatusCode::CONFLICT, "conflict", why),
            E::Store(why) => {
                // The store's own words stay in the log: they can name hosts and files.
                tracing::error!(error = %why, "store error while serving a request");
                Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    "the store failed to answer; the server log says why",
                )
            }
        }
    }
}

/// A JSON pointer (RFC 6901) from path segments.
pub fn pointer_of<'a>(segments: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for s in segments {
        out.push('/');
        out.push_str(&s.replace('~', "~0").replace('/', "~1"));
    }
    out
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        // Kept beside the body, so `with_instance` can name the request without reading
        // the body back.
        response.extensions_mut().insert(self);
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"qflow\""),
            );
        }
        response
    }
}

/// `response` naming `path` as its problem's `instance`, when it is a problem document
/// that does not name one yet (Camunda's clients read `instance` off every error).
pub fn with_instance(response: Response, path: &str) -> Response {
    let Some(problem) = response.extensions().get::<Problem>() else {
        return response;
    };
    if problem.instance.is_some() {
        return response;
    }
    let mut problem = problem.clone();
    problem.instance = Some(path.to_owned());
    let (mut parts, _) = response.into_parts();
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.extensions.insert(problem);
    Response::from_parts(parts, axum::body::Body::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_escape_tilde_and_slash() {
        assert_eq!(pointer_of(["variables", "a/b~c"]), "/variables/a~1b~0c");
        assert_eq!(pointer_of([]), "");
    }
}
