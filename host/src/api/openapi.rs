//! The OpenAPI 3 document, served at `GET /v1/openapi.json`.
//!
//! Paths and schemas are not listed here: each handler carries its own
//! `#[utoipa::path]` annotation and is registered with `routes!`, which
//! adds the route to the router and the operation to the document in one
//! step, so the two cannot drift apart. This file only adds what belongs
//! to the document as a whole: title, tags, the bearer scheme, the failures
//! every route shares, the rule of the `{stream}`, `{group}` and
//! `{handler}` path parameters, and the rules that tie a body's fields
//! together (exactly one replay selector, …), which the field annotations
//! cannot state. The document is exact: whatever the server refuses, it
//! says (`docs/http.md#contract`).

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use utoipa::openapi::path::{Parameter, ParameterIn};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    Content, OpenApi as OpenApiDoc, Ref, RefOr, Response as ResponseDoc, ResponseBuilder,
    SecurityRequirement,
};
use utoipa::{Modify, OpenApi};

use super::dto::schema;

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
    // Named by `StartAfter`'s schema, built by hand (`dto::schema`).
    components(schemas(super::dto::PartitionSequences)),
    tags(
        (name = "streams", description = "Streams and their events: create, append, read, query"),
        (name = "groups", description = "Consumer groups: create, inspect, lag"),
        (name = "leases", description = "Claiming and settling deliveries"),
        (name = "recovery", description = "Replay, reset, dead letters and redrive"),
        (name = "handlers", description = "WebAssembly handlers: deploy, hot swap, rollback"),
        (name = "nodes", description = "The servers sharing the backend (cluster mode) and what each runs"),
        (name = "access", description = "What the caller's token may do"),
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

/// Adds the failures any route can answer with — auth, bad parameters,
/// body size and type, an unavailable backend — so each handler's
/// annotation lists only its own.
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
            (&mut item.get, true),
            (&mut item.put, false),
            (&mut item.post, false),
            (&mut item.delete, false),
            (&mut item.patch, false),
        ];
        for (operation, read) in operations {
            let Some(operation) = operation else { continue };
            let has_body = operation.request_body.is_some();
            let has_parameters = operation
                .parameters
                .as_ref()
                .is_some_and(|parameters| !parameters.is_empty());
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
                if !read {
                    add(
                        "403",
                        "forbidden: the read token (--read-token) on a route that changes something",
                    );
                }
                add("503", "backend_unavailable or ambiguous: retry later");
            }
            if has_parameters {
                add(
                    "400",
                    "invalid: a path, query or header parameter breaks its rule",
                );
            }
            if has_body {
                add("400", "Malformed JSON, or a field of the wrong type");
                add("413", "The body exceeds the server's size limit");
                add("415", "The body is not application/json");
            }
        }
    }
}

/// On a server without `--auth-token` nothing needs a token: the document
/// requires none (the bearer scheme stays declared, and 401 listed, for
/// clients that talk to servers of both kinds). Schemathesis holds a
/// server to its requirement (`ignored_auth`), so this keeps it exact.
pub(crate) fn no_token_needed(doc: &mut OpenApiDoc) {
    doc.security = None;
}

/// Every operation of the document, whatever its method.
fn operations_mut(
    doc: &mut OpenApiDoc,
) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    doc.paths.paths.values_mut().flat_map(|item| {
        [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
    })
}

/// The path parameters that name a stream, a group or a handler: each has
/// the one rule of names (`crate::model::StreamName`).
pub(crate) fn name_parameters(doc: &mut OpenApiDoc) {
    for operation in operations_mut(doc) {
        for parameter in operation.parameters.iter_mut().flatten() {
            if is_name(parameter) {
                parameter.schema = Some(schema::name().into());
            }
        }
    }
}

/// The parameters of `GET /v1/handlers/{handler}/logs`: `limit` up to the
/// lines this server keeps per handler (`rheo serve --handler-log-lines`),
/// `Last-Event-ID` a line's `seq`.
#[cfg(feature = "wasm")]
pub(crate) fn handler_log_parameters(doc: &mut OpenApiDoc, kept: usize) {
    use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, SchemaType, Type};
    let Some(operation) = doc
        .paths
        .paths
        .get_mut("/v1/handlers/{handler}/logs")
        .and_then(|item| item.get.as_mut())
    else {
        return;
    };
    for parameter in operation.parameters.iter_mut().flatten() {
        let schema = match parameter.name.as_str() {
            "limit" => ObjectBuilder::new()
                .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int32)))
                .minimum(Some(1))
                .maximum(Some(kept as u64))
                .build(),
            "Last-Event-ID" => ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(super::handlers::LAST_EVENT_ID_PATTERN))
                .build(),
            _ => continue,
        };
        parameter.schema = Some(schema.into());
    }
}

fn is_name(parameter: &Parameter) -> bool {
    parameter.parameter_in == ParameterIn::Path
        && matches!(parameter.name.as_str(), "stream" | "group" | "handler")
}

/// The operations whose body may be left out: an empty body means the
/// defaults (`extract::JsonOrEmpty`).
const OPTIONAL_BODIES: [&str; 3] = ["lease_fetch", "event_query", "clock_move"];

/// `{"not": {"type": "null"}}`: given, and not as `null`.
fn given() -> Value {
    json!({"not": {"type": "null"}})
}

/// Schema: the object has `field`, not `null`.
fn has(field: &str) -> Value {
    let mut properties = serde_json::Map::new();
    properties.insert(field.to_owned(), given());
    json!({"required": [field], "properties": properties})
}

/// Schema: these fields are absent or `null`.
fn lacks(fields: &[&str]) -> Value {
    let properties: serde_json::Map<String, Value> = fields
        .iter()
        .map(|f| ((*f).to_owned(), json!({"type": "null"})))
        .collect();
    json!({"properties": properties})
}

/// Schema: `a` and `b` are not both given.
fn not_both(a: &str, b: &str) -> Value {
    json!({"not": {"allOf": [has(a), has(b)]}})
}

/// Lays each of [`schema::rules`] over the field or parameter it
/// describes, keeping the description and example utoipa took from the
/// code; returns the rules that found nothing to describe.
pub(crate) fn apply_rules(doc: &mut Value) -> Vec<schema::Target> {
    let mut unplaced = Vec::new();
    for (target, rule) in schema::rules() {
        let Ok(mut rule) = serde_json::to_value(rule) else {
            unplaced.push(target);
            continue;
        };
        let slot = match target {
            schema::Target::Property(name, property) => {
                doc.pointer_mut(&format!("/components/schemas/{name}/properties/{property}"))
            }
            schema::Target::Parameter(operation_id, name) => {
                parameter(doc, operation_id, name).and_then(|parameter| parameter.get_mut("schema"))
            }
        };
        let Some(slot) = slot else {
            unplaced.push(target);
            continue;
        };
        for key in ["description", "example", "examples", "default"] {
            if let Some(kept) = slot.get(key) {
                rule[key] = kept.clone();
            }
        }
        *slot = rule;
    }
    unplaced
}

/// The parameter `name` of the operation `operation_id`.
fn parameter<'a>(doc: &'a mut Value, operation_id: &str, name: &str) -> Option<&'a mut Value> {
    doc["paths"]
        .as_object_mut()?
        .values_mut()
        .filter_map(Value::as_object_mut)
        .flat_map(|item| item.values_mut())
        .find(|operation| operation["operationId"] == operation_id)?
        .get_mut("parameters")?
        .as_array_mut()?
        .iter_mut()
        .find(|parameter| parameter["name"] == name)
}

/// Adds what ties the fields of a body together, on the rendered
/// document: JSON Schema's `not`, `oneOf` over required fields and
/// `const`, which utoipa's types do not carry.
fn add_body_rules(doc: &mut Value) {
    let schemas = &mut doc["components"]["schemas"];
    let mut extend = |name: &str, rules: Value| {
        if let (Some(schema), Value::Object(rules)) = (schemas[name].as_object_mut(), rules) {
            schema.extend(rules);
        }
    };
    // dto::start_position: one start point at most.
    extend(
        "CreateGroupBody",
        json!({"allOf": [not_both("start_after", "start_at")]}),
    );
    // groups::recovery::group_reset: `confirm` is exactly `true`, checked
    // first; that `const` goes on the property itself (below): in an
    // `allOf` beside the property's `boolean` it is a merge some
    // generators refuse.
    extend(
        "ResetBody",
        json!({"allOf": [not_both("start_after", "start_at")]}),
    );
    // model::Retention::validate: `limits` needs at least one limit.
    extend(
        "RetentionBody",
        json!({"anyOf": [
            has("max_age_ms"),
            has("max_events"),
            {"required": ["policy"], "properties": {"policy": {"const": "interest"}}},
        ]}),
    );
    // dto::ReplayBody::into_replay: exactly one selector; partitions only
    // with a sequence or a time.
    let selectors = ["from_sequence", "from", "query", "event_ids"];
    let only = |selector: &str, partitions: bool| {
        let mut others: Vec<&str> = selectors.into_iter().filter(|s| *s != selector).collect();
        if !partitions {
            others.push("partitions");
        }
        json!({"allOf": [has(selector), lacks(&others)]})
    };
    extend(
        "ReplayBody",
        json!({"oneOf": [
            only("from_sequence", true),
            only("from", true),
            only("query", false),
            only("event_ids", false),
        ]}),
    );
    // dto::RedriveBody::into_redrive: these events, or all of them.
    extend(
        "RedriveBody",
        json!({"oneOf": [
            {"allOf": [has("event_ids"), lacks(&["all"])]},
            {"allOf": [{"required": ["all"], "properties": {"all": {"const": true}}},
                       lacks(&["event_ids"])]},
        ]}),
    );
    // dto::ReleaseBody::parked: keys, event ids or all of them
    // (`docs/groups.md#quarantine`).
    extend(
        "ReleaseBody",
        json!({"oneOf": [
            {"allOf": [has("keys"), lacks(&["event_ids", "all"])]},
            {"allOf": [has("event_ids"), lacks(&["keys", "all"])]},
            {"allOf": [{"required": ["all"], "properties": {"all": {"const": true}}},
                       lacks(&["keys", "event_ids"])]},
        ]}),
    );
    // dto::SettleBody::into_settlements: what each operation takes.
    extend(
        "SettlementBody",
        json!({"oneOf": [
            {"allOf": [{"properties": {"op": {"const": "ack"}}}, lacks(&["reason", "delay_ms"])]},
            {"properties": {"op": {"const": "nack"}}},
            {"allOf": [{"properties": {"op": {"const": "reject"}}}, lacks(&["delay_ms"])]},
        ]}),
    );
    for body in ["ResetBody", "ReleaseBody"] {
        let confirm = &mut doc["components"]["schemas"][body]["properties"]["confirm"];
        if let Some(confirm) = confirm.as_object_mut() {
            confirm.insert("const".into(), json!(true));
        }
    }
    for path in doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|p| p.values_mut())
    {
        for operation in path
            .as_object_mut()
            .into_iter()
            .flat_map(|o| o.values_mut())
        {
            let id = operation["operationId"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let id = id.as_str();
            // delete::confirmed: a delete needs `confirm=true`.
            if matches!(id, "stream_delete" | "group_delete") {
                for param in (operation["parameters"].as_array_mut().into_iter()).flatten() {
                    if param["name"] == "confirm" {
                        param["required"] = Value::Bool(true);
                        param["schema"]["const"] = json!(true);
                    }
                }
            }
            if OPTIONAL_BODIES.contains(&id)
                && let Some(body) = operation["requestBody"].as_object_mut()
            {
                body.insert("required".into(), Value::Bool(false));
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
    for operation in operations_mut(doc) {
        if let Some(security) = &mut operation.security
            && security
                .iter()
                .all(|requirement| *requirement == SecurityRequirement::default())
        {
            security.clear();
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
        let mut value = serde_json::to_value(doc).unwrap_or_else(|_| json!({}));
        let unplaced = apply_rules(&mut value);
        debug_assert!(
            unplaced.is_empty(),
            "rules of dto::schema::rules() found no field or parameter: {unplaced:?}"
        );
        add_body_rules(&mut value);
        let json = serde_json::to_string_pretty(&value).unwrap_or_else(|_| "{}".into());
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
