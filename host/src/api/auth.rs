//! Bearer-token authentication for the `/v1` routes.
//!
//! The check is by path prefix, not per route, so routers merged in later
//! (the handler routes) are protected without opting in, and an unknown
//! `/v1` path answers 401 rather than revealing which routes exist. The
//! health and metrics endpoints stay open for probes and scrapers.
//!
//! Two scopes (docs/http.md#authentication): the auth token may do
//! everything; the read token, when the server has one, may only read —
//! `GET` and `HEAD`, and a history query (`POST …/query`, a `POST` only
//! because its filters are a body; it never touches group state) — and
//! anything else answers 403 `forbidden`. A fetch is a `POST`: it takes
//! leases, so a consumer needs the auth token.
//! Named tokens (`--token NAME=SECRET`, `NAME:read=SECRET`) have one of
//! the two scopes and a name: a change made with one is recorded as made
//! by that name (a handler's deploy history), through the request's
//! [`Caller`].

use std::convert::Infallible;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::state::{ApiSettings, AppState, NamedToken};

/// Middleware: with a token configured, refuses `/v1` requests that do not
/// carry `Authorization: Bearer <token>` with a token allowed to make them,
/// and names the [`Caller`] of those it lets through.
pub(crate) async fn require_token(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let settings = &state.settings;
    if !settings.auth_required() || !is_protected(request.uri().path()) {
        return next.run(request).await;
    }
    let Some(given) = bearer_token(request.headers()) else {
        return ApiError::Unauthorized("this route needs an Authorization: Bearer <token> header")
            .into_response();
    };
    let Some((scope, name)) = scope_of(given, settings) else {
        return ApiError::Unauthorized("invalid bearer token").into_response();
    };
    if scope == Scope::Read && !reads_only(request.method(), request.uri().path()) {
        return ApiError::Forbidden(
            "this token may only read (GET, and POST …/query); this request needs a token that may change things",
        )
        .into_response();
    }
    request.extensions_mut().insert(Caller {
        name,
        read_only: scope == Scope::Read,
    });
    next.run(request).await
}

/// Who made a request: the name of the token it carried, when that token
/// has one, and whether that token may only read. Any handler can take it;
/// without auth it names nobody and may do everything.
#[derive(Debug, Clone, Default)]
pub(crate) struct Caller {
    name: Option<String>,
    read_only: bool,
}

impl Caller {
    /// The name of the token the request carried, if it has one.
    pub(crate) fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Whether the request's token may only read (`GET`, `HEAD`).
    pub(crate) fn read_only(&self) -> bool {
        self.read_only
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<Caller>()
            .cloned()
            .unwrap_or_default())
    }
}

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    All,
    Read,
}

/// The scope and name of the `given` token, or `None` when the server has
/// no such token. Every token is compared in full, in constant time, so
/// the comparison does not leak which token a guess was near or how much
/// of it was right (the length may leak; tokens are random).
fn scope_of(given: &str, settings: &ApiSettings) -> Option<(Scope, Option<String>)> {
    let is = |expected: &str| bool::from(given.as_bytes().ct_eq(expected.as_bytes()));
    let mut found = None;
    let unnamed = [
        (settings.auth_token.as_deref(), Scope::All),
        (settings.read_token.as_deref(), Scope::Read),
    ];
    for (secret, scope) in unnamed {
        if secret.is_some_and(is) && found.is_none() {
            found = Some((scope, None));
        }
    }
    for NamedToken {
        name,
        secret,
        read_only,
    } in &settings.tokens
    {
        if is(secret) && found.is_none() {
            let scope = if *read_only { Scope::Read } else { Scope::All };
            found = Some((scope, Some(name.clone())));
        }
    }
    found
}

/// Requests that change nothing on the server: `GET`, `HEAD`, and a
/// stream's history query, `POST /v1/streams/{stream}/query`.
fn reads_only(method: &Method, path: &str) -> bool {
    let query = || {
        let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
        matches!(segments[..], ["", "v1", "streams", stream, "query"] if !stream.is_empty())
    };
    matches!(*method, Method::GET | Method::HEAD) || (*method == Method::POST && query())
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
    fn each_token_has_its_scope_and_named_ones_their_name() {
        let mut settings = ApiSettings {
            auth_token: Some("all".into()),
            read_token: Some("read".into()),
            ..ApiSettings::default()
        };
        assert_eq!(scope_of("all", &settings), Some((Scope::All, None)));
        assert_eq!(scope_of("read", &settings), Some((Scope::Read, None)));
        assert_eq!(scope_of("other", &settings), None);
        assert_eq!(scope_of("", &settings), None);
        settings.read_token = None;
        assert_eq!(scope_of("read", &settings), None);
        settings.tokens = vec![
            NamedToken {
                name: "ci".into(),
                secret: "ci-secret".into(),
                read_only: false,
            },
            NamedToken {
                name: "dash".into(),
                secret: "dash-secret".into(),
                read_only: true,
            },
        ];
        assert_eq!(
            scope_of("ci-secret", &settings),
            Some((Scope::All, Some("ci".into())))
        );
        assert_eq!(
            scope_of("dash-secret", &settings),
            Some((Scope::Read, Some("dash".into())))
        );
        assert_eq!(scope_of("ci-secre", &settings), None);
        assert!(reads_only(&Method::GET, "/v1/x") && reads_only(&Method::HEAD, "/v1/x"));
        for method in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
            assert!(!reads_only(&method, "/v1/streams/s/events"), "{method}");
        }
        // A history query reads; a fetch (a POST too) takes leases.
        assert!(reads_only(&Method::POST, "/v1/streams/orders/query"));
        assert!(!reads_only(&Method::DELETE, "/v1/streams/orders/query"));
        for path in [
            "/v1/streams/orders/groups/g/fetch",
            "/v1/streams//query",
            "/v1/streams/orders/query/x",
            "/v1/streams/query",
        ] {
            assert!(!reads_only(&Method::POST, path), "{path}");
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
