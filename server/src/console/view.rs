//! The console's page frame and small pieces every page uses. maud escapes every value
//! it is given, so ids, codes and variables from models and callers cannot become markup.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};

use super::{assets, Viewer};
use crate::auth::Scope;

/// Which navigation entry a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Instances,
    Incidents,
    Deployments,
    Migrate,
    None,
}

/// A whole page: the frame (skip link, navigation, who is signed in) around `body`.
pub fn page(title: &str, viewer: Option<&Viewer>, nav: Nav, body: Markup) -> Markup {
    page_with_head(title, viewer, nav, html! {}, body)
}

/// [`page`] with more in the head (the diagram's stylesheets).
pub fn page_with_head(
    title: &str,
    viewer: Option<&Viewer>,
    nav: Nav,
    head: Markup,
    body: Markup,
) -> Markup {
    let entry = |target: Nav, href: &str, label: &str| {
        html! {
            li { a href=(href) aria-current=[(nav == target).then_some("page")] { (label) } }
        }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · qflow console" }
                link rel="stylesheet" href=(assets::href("console.css"));
                (head)
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/console/" { "qflow" }
                    @if let Some(v) = viewer {
                        nav aria-label="Console" {
                            ul {
                                (entry(Nav::Instances, "/console/instances", "Instances"))
                                (entry(Nav::Incidents, "/console/incidents", "Incidents"))
                                (entry(Nav::Deployments, "/console/deployments", "Deployments"))
                                (entry(Nav::Migrate, "/console/migrate", "Migrate"))
                            }
                        }
                        div.who {
                            span { "Signed in as " strong.id { (v.session.name) } " (" (scopes(v)) ")" }
                            form method="post" action="/console/sign-out" {
                                (csrf(v))
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main #main tabindex="-1" { (body) }
            }
        }
    }
}

fn scopes(v: &Viewer) -> String {
    Scope::ALL
        .iter()
        .filter(|s| v.can(**s))
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The hidden CSRF field every state-changing form carries.
pub fn csrf(v: &Viewer) -> Markup {
    html! { input type="hidden" name="csrf" value=(v.session.csrf); }
}

/// A page as a response, with the HTML content type.
pub fn respond(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        )],
        markup.into_string(),
    )
        .into_response()
}

/// A page saying why something was refused, with `status`.
pub fn refusal(status: StatusCode, title: &str, why: &str) -> Response {
    let body = html! {
        h1 { (title) }
        p.notice.bad role="alert" { (why) }
        p { a href="/console/" { "Back to the console" } }
    };
    respond(status, page(title, None, Nav::None, body))
}

/// The page for an error from an operation: refusals and conflicts say why (409), a
/// missing instance or deployment is a 404, a bad parameter a 400, and a store failure
/// a 503 whose details stay in the server log.
pub fn ops_error(viewer: &Viewer, e: qflow_ops::Error, back: &str) -> Response {
    use qflow_ops::Error as E;
    let (status, title, why) = match &e {
        E::NotFound { .. } => (StatusCode::NOT_FOUND, "Not found", e.to_string()),
        E::Invalid { .. } => (StatusCode::BAD_REQUEST, "Not accepted", e.to_string()),
        E::Refused(_) => (StatusCode::CONFLICT, "Refused", e.to_string()),
        E::Conflict(_) => (StatusCode::CONFLICT, "Conflict", e.to_string()),
        E::Store(_) => {
            tracing::error!(error = %e, "console: the store failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "Store unavailable",
                "The store did not answer; the details are in the server log.".to_owned(),
            )
        }
    };
    let body = html! {
        h1 { (title) }
        p.notice.bad role="alert" { (why) }
        p { "Nothing was changed. " a href=(back) { "Back" } }
    };
    respond(status, page(title, Some(viewer), Nav::None, body))
}

/// An instant (ms since the epoch) as UTC ISO 8601 with milliseconds.
pub fn instant(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let milli = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{milli:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's
/// algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A `time` element for an instant.
pub fn time(ms: i64) -> Markup {
    let text = instant(ms);
    html! { time datetime=(text.replace(' ', "T")) { (text) } }
}

/// An instance state as a badge.
pub fn status(s: &str) -> Markup {
    html! { span class={ "badge s-" (s) } { (s.to_uppercase()) } }
}

/// A query string from pairs, each value encoded; empty values are left out.
pub fn query(pairs: &[(&str, Option<&str>)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            q.append_pair(k, v);
        }
    }
    q.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_are_utc_iso_8601() {
        assert_eq!(instant(0), "1970-01-01 00:00:00.000Z");
        assert_eq!(instant(1_700_000_000_123), "2023-11-14 22:13:20.123Z");
        assert_eq!(instant(-1), "1969-12-31 23:59:59.999Z");
        assert_eq!(instant(951_782_400_000), "2000-02-29 00:00:00.000Z");
    }
}
