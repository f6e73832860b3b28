//! Bearer-token authentication for the `/v1` routes.
//!
//! The check is by path prefix, not per route, so routers merged in later
//! (the handler routes) are protected without opting in, and an unknown
//! `/v1` path answers 401 rather than revealing which routes exist. The
//! health and metrics endpoints stay open for probes and scrapers.
//!
//! Two scopes (docs/http.md#authentication): the auth token may do
//! everything; the read token, when the server has one, may only read —
//! `GET` and `HEAD` — and any other method answers 403 `forbidden`. A
//! fetch is a `POST`: it takes leases, so a consumer needs the auth token.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::state::AppState;

/// Middleware: with a token configured, refuses `/v1` requests that do not
/// carry `Authorization: Bearer <token>` with a token allowed to make them.
pub(crate) async fn require_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let settings = &state.settings;
    let Some(full) = settings.auth_token.as_deref() else {
        return next.run(request).await;
    };
    if !is_protected(request.uri().path()) {
        return next.run(request).await;
    }
    let Some(given) = bearer_token(request.headers()) else {
        return ApiError::Unauthorized("this route needs an Authorization: Bearer <token> header")
            .into_response();
    };
    match scope_of(given, full, settings.read_token.as_deref()) {
        Some(Scope::All) => next.run(request).await,
        Some(Scope::Read) if reads_only(request.method()) => next.run(request).await,
        Some(Scope::Read) => ApiError::Forbidden(
            "the read token may only read (GET); this request needs the auth token",
        )
        .into_response(),
        None => ApiError::Unauthorized("invalid bearer token").into_response(),
    }
}

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    All,
    Read,
}

/// The scope of the `given` token, or `None` when it is neither the auth
/// token nor the read token. Both are compared in full, in constant time,
/// so the comparison does not leak how much of a guessed token was right
/// (the length may leak; tokens are random).
fn scope_of(given: &str, full: &str, read: Option<&str>) -> Option<Scope> {
    let is = |expected: &str| bool::from(given.as_bytes().ct_eq(expected.as_bytes()));
    let all = is(full);
    let read = read.is_some_and(is);
    if all {
        Some(Scope::All)
    } else if read {
        Some(Scope::Read)
    } else {
        None
    }
}

/// Methods that change nothing on the server.
fn reads_only(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD)
}

fn is_protected(path: &str) -> bool {
    path == "/v1" || path.starts_with("/v1/")
}

/// The token of an `Authorization: Bearer <token>` header (scheme matched
/// case-insensitively, as RFC 7235 says).
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
        h
    }

    #[test]
    fn bearer_tokens_are_parsed_leniently_about_case_and_spacing() {
        assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("bearer   abc ")), Some("abc"));
        assert_eq!(bearer_token(&headers("Basic abc")), None);
        assert_eq!(bearer_token(&headers("Bearer")), None);
        assert_eq!(bearer_token(&headers("Bearer ")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    #[test]
    fn each_token_has_its_scope() {
        assert_eq!(scope_of("all", "all", Some("read")), Some(Scope::All));
        assert_eq!(scope_of("read", "all", Some("read")), Some(Scope::Read));
        assert_eq!(scope_of("read", "all", None), None);
        assert_eq!(scope_of("other", "all", Some("read")), None);
        assert_eq!(scope_of("", "all", Some("read")), None);
        assert!(reads_only(&Method::GET) && reads_only(&Method::HEAD));
        for method in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
            assert!(!reads_only(&method), "{method}");
        }
    }

    #[test]
    fn only_v1_paths_are_protected() {
        assert!(is_protected("/v1/streams"));
        assert!(is_protected("/v1"));
        assert!(!is_protected("/v1streams"));
        assert!(!is_protected("/healthz"));
        assert!(!is_protected("/metrics"));
    }
}
