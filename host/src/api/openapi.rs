//! The OpenAPI 3 document, served at `GET /v1/openapi.json`.
//!
//! Paths and schemas are not listed here: each handler carries its own
//! `#[utoipa::path]` annotation and is registered with `routes!`, which
//! adds the route to the router and the operation to the document in one
//! step, so the two cannot drift apart. This file only adds what belongs
//! to the document as a whole: title, tags, the bearer scheme.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    Content, OpenApi as OpenApiDoc, Ref, RefOr, Response as ResponseDoc, ResponseBuilder,
    SecurityRequirement,
};
use utoipa::{Modify, OpenApi};

/// The document's frame; `router()` fills in the paths.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Rheo",
        description = "Durable, searchable, replayable consumer groups over storage you already run. \
                       Errors are `{\"error\": {\"code\", \"message\"}}`; timestamps are RFC 3339 UTC \
                       with milliseconds; partition-keyed maps use string keys (\"0\")."
    ),
    modifiers(&BearerAuth),
    tags(
        (name = "streams", description = "Streams and their events: create, append, read, query"),
        (name = "groups", description = "Consumer groups: create, inspect, lag"),
        (name = "leases", description = "Claiming and settling deliveries"),
        (name = "recovery", description = "Replay, reset, dead letters and redrive"),
        (name = "handlers", description = "WebAssembly handlers: deploy, hot swap, rollback"),
        (name = "nodes", description = "The servers sharing the backend (cluster mode) and what each runs"),
        (name = "health", description = "Probes and metrics (no auth)"),
        (name = "test clock", description = "Only with rheo serve --test-clock"),
    )
)]
pub(crate) struct ApiDoc;

/// Declares the bearer scheme and requires it everywhere; the health
/// routes opt out with `security(())`.
#[derive(Debug)]
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, doc: &mut OpenApiDoc) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "Needed on /v1 routes when the server has --auth-token",
                    ))
                    .build(),
            ),
        );
        doc.security = Some(vec![SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
    }
}

/// Adds the failures any route can answer with — auth, body size and type,
/// an unavailable backend — so each handler's annotation lists only its own.
pub(crate) fn add_common_responses(doc: &mut OpenApiDoc) {
    let error = |description: &str| -> RefOr<ResponseDoc> {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                Content::new(Some(Ref::from_schema_name("ErrorBody"))),
            )
            .build()
            .into()
    };
    for (path, item) in &mut doc.paths.paths {
        let on_v1 = path.starts_with("/v1/");
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ];
        for operation in operations.into_iter().flatten() {
            let has_body = operation.request_body.is_some();
            let responses = &mut operation.responses.responses;
            let mut add = |status: &str, description: &str| {
                responses
                    .entry(status.to_owned())
                    .or_insert_with(|| error(description));
            };
            if on_v1 {
                add(
                    "401",
                    "Missing or wrong bearer token (servers with --auth-token)",
                );
                add("503", "backend_unavailable or ambiguous: retry later");
            }
            if has_body {
                add("400", "Malformed JSON, or a field of the wrong type");
                add("413", "The body exceeds the server's size limit");
                add("415", "The body is not application/json");
            }
        }
    }
}

/// Writes the open routes' `security(())` — which utoipa renders `[{}]`,
/// "auth optional" — as `[]`, "no auth". Both let a client call without a
/// token, but generators read a non-empty list as "needs a token":
/// openapi-python-client would type `/healthz` as taking only an
/// `AuthenticatedClient` (docs/http.md#generated-clients).
pub(crate) fn open_routes_need_no_auth(doc: &mut OpenApiDoc) {
    for item in doc.paths.paths.values_mut() {
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ];
        for operation in operations.into_iter().flatten() {
            if let Some(security) = &mut operation.security
                && security
                    .iter()
                    .all(|requirement| *requirement == SecurityRequirement::default())
            {
                security.clear();
            }
        }
    }
}

/// The finished document, rendered once at startup.
#[derive(Debug, Clone)]
pub(crate) struct Document(std::sync::Arc<str>);

impl Document {
    /// Renders `doc` as JSON.
    pub(crate) fn new(doc: &OpenApiDoc) -> Self {
        // Rendering a document of plain strings and maps cannot fail; if it
        // somehow did, an empty document is a better answer than a crash.
        let json = doc.to_pretty_json().unwrap_or_else(|_| "{}".into());
        Self(json.into())
    }
}

impl IntoResponse for Document {
    fn into_response(self) -> Response {
        (
            [(header::CONTENT_TYPE, "application/json")],
            self.0.to_string(),
        )
            .into_response()
    }
}
