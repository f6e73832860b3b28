//! Bearer-token authentication for the `/v1` routes.
//!
//! The check is by path prefix, not per route, so routers merged in later
//! (the handler routes) are protected without opting in, and an unknown
//! `/v1` path answers 401 rather than revealing which routes exist. The
//! health and metrics endpoints stay open for probes and scrapers.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::state::AppState;

/// Middleware: with a token configured, refuses `/v1` requests that do not
/// carry `Authorization: Bearer <token>`.
pub(crate) async fn require_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(expected) = state.settings.auth_token.as_deref() else {
        return next.run(request).await;
    };
    if !is_protected(request.uri().path()) {
        return next.run(request).await;
    }
    match bearer_token(request.headers()) {
        None => ApiError::Unauthorized("this route needs an Authorization: Bearer <token> header")
            .into_response(),
        // Constant time, so the comparison does not leak how much of a
        // guessed token was right. (The length may leak; tokens are random.)
        Some(given) if bool::from(given.as_bytes().ct_eq(expected.as_bytes())) => {
            next.run(request).await
        }
        Some(_) => ApiError::Unauthorized("invalid bearer token").into_response(),
    }
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
    fn only_v1_paths_are_protected() {
        assert!(is_protected("/v1/streams"));
        assert!(is_protected("/v1"));
        assert!(!is_protected("/v1streams"));
        assert!(!is_protected("/healthz"));
        assert!(!is_protected("/metrics"));
    }
}
