//! `/v1/handlers…`: deploy, hot-swap, roll back, pause, resume and remove
//! WebAssembly handlers, and read or follow their log lines.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::multipart::MultipartRejection;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Multipart, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::watch;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::dto::{
    DeployForm, HandlerBody, HandlerListBody, HandlerLogsBody, HistoryBody, LogGapBody,
    LogLineBody, LogsParams, QueryBody, SwapParams, TrialBody, TrialForm, WasmModule,
};
use super::error::{ApiError, ErrorBody};
use super::extract::{AppQuery, an_object};
use super::state::AppState;
use crate::handler_logs::{Followed, Follower, LogLine};
use crate::handlers::{By, HandlerRegistry, Manifest};
use crate::model::HandlerName;
use crate::wasm::MAX_COMPONENT_BYTES;

/// The handler routes. Their bodies carry modules, so they accept up to the
/// largest component (64 MiB) plus room for the manifest.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(handler_list))
        .routes(routes!(handler_get, handler_deploy, handler_delete))
        .routes(routes!(handler_swap_module))
        .routes(routes!(handler_try))
        .routes(routes!(handler_rollback))
        .routes(routes!(handler_promote))
        .routes(routes!(handler_history))
        .routes(routes!(handler_pause))
        .routes(routes!(handler_resume))
        .routes(routes!(handler_logs))
        .layer(DefaultBodyLimit::max(MAX_COMPONENT_BYTES + (1 << 20)))
}

/// The `{handler}` path parameter, validated.
#[derive(Debug)]
pub(crate) struct HandlerPath(HandlerName);

impl<S: Send + Sync> FromRequestParts<S> for HandlerPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let params = axum::extract::RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|r| ApiError::invalid("path", r.body_text()))?;
        let raw = params
            .iter()
            .find(|(k, _)| *k == "handler")
            .map(|(_, v)| v)
            .ok_or_else(|| ApiError::invalid("handler", "missing"))?;
        Ok(Self(HandlerName::parse(raw)?))
    }
}

/// Who a change is recorded as made by: the request's token name.
fn by(caller: &Caller) -> By {
    caller.name().map_or_else(By::unknown, By::token)
}

fn registry(state: &AppState) -> Result<&Arc<HandlerRegistry>, ApiError> {
    state
        .handlers
        .as_ref()
        .ok_or_else(|| ApiError::NotFound("handlers are not enabled on this server".into()))
}

/// Every deployed handler.
#[utoipa::path(get, path = "/v1/handlers", tag = "handlers",
    responses(
        (status = 200, body = HandlerListBody),
        (status = 404, description = "Handlers are not enabled on this server", body = ErrorBody),
    ))]
async fn handler_list(State(state): State<AppState>) -> Result<Json<HandlerListBody>, ApiError> {
    let handlers = registry(&state)?.list().await;
    Ok(Json(HandlerListBody {
        handlers: handlers.into_iter().map(Into::into).collect(),
    }))
}

/// One handler: version, digest, status, counters.
#[utoipa::path(get, path = "/v1/handlers/{handler}", tag = "handlers",
    params(("handler" = String, Path, description = "Handler name")),
    responses(
        (status = 200, body = HandlerBody),
        (status = 404, description = "No such handler", body = ErrorBody),
    ))]
async fn handler_get(
    State(state): State<AppState>,
    HandlerPath(name): HandlerPath,
) -> Result<Json<HandlerBody>, ApiError> {
    Ok(Json(registry(&state)?.get(&name).await?.into()))
}

/// Deploy or replace a handler: multipart with a `manifest` part (JSON, or
/// TOML with content type `application/toml`) and a `module` part (the
/// `.wasm` component). The module is compiled and validated before it
/// replaces anything; a refused module leaves the running version alone.
#[utoipa::path(put, path = "/v1/handlers/{handler}", tag = "handlers",
    params(("handler" = String, Path, description = "Handler name")),
    request_body(content = DeployForm, content_type = "multipart/form-data",
        description = "`manifest` and `module` parts"),
    responses(
        (status = 201, description = "Deployed", body = HandlerBody),
        (status = 200, description = "Replaced (new version)", body = HandlerBody),
        (status = 400, description = "Bad manifest or module", body = ErrorBody),
        (status = 404, description = "The manifest's stream does not exist", body = ErrorBody),
        (status = 415, description = "Not multipart/form-data", body = ErrorBody),
    ))]
async fn handler_deploy(
    State(state): State<AppState>,
    HandlerPath(name): HandlerPath,
    caller: Caller,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<(StatusCode, Json<HandlerBody>), ApiError> {
    let parts = form_parts(multipart, "a deploy", &["manifest", "module"]).await?;
    let registry = registry(&state)?;
    let mut manifest = None;
    let mut module = None;
    for part in parts {
        match part.name.as_str() {
            "manifest" => {
                let toml = part.content_type.is_some_and(|c| c.contains("toml"));
                manifest = Some(
                    if toml {
                        let text = std::str::from_utf8(&part.bytes)
                            .map_err(|_| ApiError::invalid("manifest", "not UTF-8"))?;
                        Manifest::from_toml(text)
                    } else {
                        Manifest::from_json(&part.bytes)
                    }
                    .map_err(|e| ApiError::invalid("manifest", e.0))?,
                );
            }
            _ => module = Some(part.bytes.to_vec()),
        }
    }
    let manifest =
        manifest.ok_or_else(|| ApiError::invalid("manifest", "the `manifest` part is missing"))?;
    let module =
        module.ok_or_else(|| ApiError::invalid("module", "the `module` part is missing"))?;
    let (view, created) = registry
        .deploy_by(name, manifest, module, by(&caller))
        .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(view.into())))
}

/// One part of a multipart form.
struct FormPart {
    name: String,
    content_type: Option<String>,
    bytes: Bytes,
}

/// The parts of `what`'s multipart form (415 when it is not one), each
/// named one of `names` (400 for any other).
async fn form_parts(
    multipart: Result<Multipart, MultipartRejection>,
    what: &str,
    names: &[&str],
) -> Result<Vec<FormPart>, ApiError> {
    let listed = names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(" and ");
    let mut multipart = multipart.map_err(|e| {
        ApiError::UnsupportedMediaType(format!(
            "{what} is multipart/form-data with parts {listed}: {}",
            e.body_text()
        ))
    })?;
    let mut parts = Vec::new();
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|e| ApiError::invalid("body", e.body_text()))?
    {
        let name = field.name().unwrap_or_default().to_owned();
        if !names.contains(&name.as_str()) {
            return Err(ApiError::invalid(
                "body",
                format!("unexpected part {name:?}; send {listed}"),
            ));
        }
        let content_type = field.content_type().map(str::to_owned);
        let bytes = field
            .bytes()
            .await
            .map_err(|e| ApiError::invalid(&name, e.body_text()))?;
        parts.push(FormPart {
            name,
            content_type,
            bytes,
        });
    }
    Ok(parts)
}

/// Hot-swap a handler's module, keeping its manifest. Deliveries in flight
/// finish on the old version.
///
/// With `canary`, the module runs instead as a canary on that share of
/// first attempts, beside the current version, until it is promoted or
/// rolled back, automatically by its failure rate or by hand
/// (docs/handlers.md#canaries).
///
/// The body is the component, sent as `application/wasm` or as
/// `application/octet-stream`. The document names only the second: it is
/// the binary type OpenAPI client generators can send (docs/http.md).
#[utoipa::path(put, path = "/v1/handlers/{handler}/module", tag = "handlers",
    params(("handler" = String, Path, description = "Handler name"), SwapParams),
    request_body(content = inline(WasmModule), content_type = "application/octet-stream",
        description = "The component (`Content-Type: application/wasm` is accepted too)"),
    responses(
        (status = 200, body = HandlerBody),
        (status = 400, description = "The module or the canary's plan was refused; the old version keeps running", body = ErrorBody),
        (status = 404, description = "No such handler", body = ErrorBody),
        (status = 409, description = "A canary runs already", body = ErrorBody),
        (status = 415, description = "Neither application/wasm nor application/octet-stream", body = ErrorBody),
    ))]
async fn handler_swap_module(
    State(state): State<AppState>,
    HandlerPath(name): HandlerPath,
    caller: Caller,
    AppQuery(params): AppQuery<SwapParams>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<HandlerBody>, ApiError> {
    let plan = params
        .plan()
        .map_err(|(field, why)| ApiError::invalid(field, why))?;
    let binary = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.starts_with("application/wasm") || v.starts_with("application/octet-stream")
        });
    if !binary {
        return Err(ApiError::UnsupportedMediaType(
            "send the module with Content-Type: application/wasm (or application/octet-stream)"
                .into(),
        ));
    }
    let registry = registry(&state)?;
    let view = match plan {
        Some(plan) => {
            registry
                .canary(&name, body.to_vec(), plan, by(&caller))
                .await?
        }
        None => {
            registry
                .swap_module_by(&name, body.to_vec(), by(&caller))
                .await?
        }
    };
    Ok(Json(view.into()))
}

/// Dry-run a candidate module (`docs/handlers.md#dry-runs`): it and the
/// live version run over events of the handler's stream, in the sandbox
/// and limits production uses, and the answer compares them event by
/// event, differences first. Nothing is settled and nothing is appended
/// (appends are checked, then kept in the answer): no group changes.
///
/// Multipart with a `module` part (the `.wasm` component) and an optional
/// `query` part: a query body as JSON (as `POST /v1/streams/{stream}/query`
/// takes; by default the first 100 events).
#[utoipa::path(post, path = "/v1/handlers/{handler}/try", tag = "handlers",
    params(("handler" = String, Path, description = "Handler name")),
    request_body(content = TrialForm, content_type = "multipart/form-data",
        description = "`module` and, optionally, `query` parts"),
    responses(
        (status = 200, body = TrialBody),
        (status = 400, description = "Bad module or query", body = ErrorBody),
        (status = 404, description = "No such handler", body = ErrorBody),
        (status = 415, description = "Not multipart/form-data", body = ErrorBody),
    ))]
async fn handler_try(
    State(state): State<AppState>,
    HandlerPath(name): HandlerPath,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Json<TrialBody>, ApiError> {
    let parts = form_parts(multipart, "a dry run", &["module", "query"]).await?;
    let registry = registry(&state)?;
    let mut module = None;
    let mut query = None;
    for part in parts {
        match part.name.as_str() {
            "module" => module = Some(part.bytes.to_vec()),
            // `null`, as the document allows, is no query.
            _ if part.bytes.trim_ascii() == b"null" => query = None,
            _ => {
                an_object(&part.bytes)?;
                let Json(body) = Json::<QueryBody>::from_bytes(&part.bytes)?;
                query = Some(body.into_query()?);
            }
        }
    }
    let module =
        module.ok_or_else(|| ApiError::invalid("module", "the `module` part is missing"))?;
    let report = registry
        .trial(&name, module, query.unwrap_or_default())
        .await?;
    Ok(Json(TrialBody::from(&report)))
}

/// Bring back the previous version; while a canary runs, stop the canary
/// instead (the current version stays).
#[utoipa::path(post, path = "/v1/handlers/{handler}/rollback", tag = "handlers",
    params(("handler" = String, Path, description = "Handler name")),
    responses(
        (status = 200, body = HandlerBody),
        (status = 404, description = "No such handler", body = ErrorBody),
        (status = 409, description = "No previous version", body = ErrorBody),
    ))]
async fn handler_rollback(
    State(state): State<AppState>,
    HandlerPath(name): HandlerPath,
    caller: Caller,
) -> Result<Json<HandlerBody>, ApiError> {
    let view = registry(&state)?.rollback_by(&name, by(&caller)).await?;
    Ok(Json(view.into()))
}

/// Make the canary the current version now, whatever its counts say.
#[utoipa::path(post, path = "/v1/handlers/{handler}/promote", tag = "handlers",
    params(("handler" = String, Path, description = "Handler name")),
    responses(
        (status = 200, body = HandlerBody),
        (status = 404, description = "No such handler", body = ErrorBody),
        (status = 409, description = "No canary runs", body = ErrorBody),
    ))]
async fn handler_promote(
    State(state): State<AppState>,
    HandlerPath(name): HandlerPath,
    caller: Caller,
) -> Result<Json<HandlerBody>, ApiError> {
    let view = registry(&state)?.promote(&name, by(&caller)).await?;
    Ok(Json(view.into()))
}

/// Every deploy, swap, canary, promotion and rollback of the handler,
/// oldest first: when, who, which version and digest, and why
/// (docs/handlers.md#deploy-history).
#[utoipa::path(get, path = "/v1/handlers/{handler}/history", tag = "handlers",
    params(("handler" = String, Path, description = "Handler name")),
    responses(
        (status = 200, body = HistoryBody),
        (status = 404, description = "No such handler", body = ErrorBody),
    ))]
async fn handler_history(
    State(state): State<AppState>,
    HandlerPath(name): HandlerPath,
) -> Result<Json<HistoryBody>, ApiError> {
    let steps = registry(&state)?.history(&name).await?;
    Ok(Json(HistoryBody::new(name.to_string(), steps)))
}

/// Stop fetching (deliveries in flight finish).
#[utoipa::path(post, path = "/v1/handlers/{handler}/pause", tag = "handlers",
    params(("handler" = String, Path, description = "Handler name")),
    responses((status = 200, body = HandlerBody), (status = 404, body = ErrorBody)))]
async fn handler_pause(
    State(state): State<AppState>,
    HandlerPath(name): HandlerPath,
) -> Result<Json<HandlerBody>, ApiError> {
    Ok(Json(registry(&state)?.pause(&name).await?.into()))
}

/// Fetch again.
#[utoipa::path(post, path = "/v1/handlers/{handler}/resume", tag = "handlers",
    params(("handler" = String, Path, description = "Handler name")),
    responses((status = 200, body = HandlerBody), (status = 404, body = ErrorBody)))]
async fn handler_resume(
    State(state): State<AppState>,
    HandlerPath(name): HandlerPath,
) -> Result<Json<HandlerBody>, ApiError> {
    Ok(Json(registry(&state)?.resume(&name).await?.into()))
}

/// Remove a handler: drains it first (in-flight deliveries finish and are
/// settled), then deletes it.
#[utoipa::path(delete, path = "/v1/handlers/{handler}", tag = "handlers",
    params(("handler" = String, Path, description = "Handler name")),
    responses((status = 200, description = "Removed; its last state", body = HandlerBody), (status = 404, body = ErrorBody)))]
async fn handler_delete(
    State(state): State<AppState>,
    HandlerPath(name): HandlerPath,
) -> Result<Json<HandlerBody>, ApiError> {
    Ok(Json(registry(&state)?.remove(&name).await?.into()))
}

/// Lines a log request answers with when it names no `limit`.
const DEFAULT_LOG_LIMIT: usize = 100;

/// Digits of a `Last-Event-ID`: a line's `seq`, which always fits a `u64`
/// in 19 digits.
const MAX_SEQ_DIGITS: usize = 19;

/// The `Last-Event-ID` header as the document states it.
pub(crate) const LAST_EVENT_ID_PATTERN: &str = "^[0-9]{1,19}$";

/// How often a followed log sends a comment to keep the connection open.
const LOG_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// A handler's last log lines, kept in memory by the server that answers
/// (in a cluster, each node has the lines of what ran on it); oldest first.
///
/// With `follow=true` the answer is `text/event-stream`: first the last
/// `limit` lines (or, with a `Last-Event-ID` header, every line after that
/// `seq` still kept), then new lines as they come. Each line is an event
/// `line` with `id` its `seq` and the line as JSON `data`; `event: gap` with
/// `{"missed": n}` says n lines will never come (no longer kept, or the
/// reader fell behind). The stream ends when the handler is deleted or the
/// server shuts down; a comment every 15 s keeps it open
/// (docs/handlers.md#handler-logs).
#[utoipa::path(get, path = "/v1/handlers/{handler}/logs", tag = "handlers",
    params(("handler" = String, Path, description = "Handler name"), LogsParams,
        ("Last-Event-ID" = Option<String>, Header,
            description = "With `follow=true`: resume after this `seq`")),
    responses(
        (status = 200, description = "The lines (`follow=true`: server-sent events `line` and `gap`)",
            content(
                (HandlerLogsBody = "application/json"),
                (String = "text/event-stream"),
            )),
        (status = 400, description = "Bad `limit`", body = ErrorBody),
        (status = 404, description = "No such handler", body = ErrorBody),
    ))]
async fn handler_logs(
    State(state): State<AppState>,
    HandlerPath(name): HandlerPath,
    AppQuery(params): AppQuery<LogsParams>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let registry = registry(&state)?;
    // 404 for a handler that does not exist (its log may not either).
    registry.get(&name).await?;
    let kept = registry.logs().capacity();
    let limit = match params.limit {
        None => DEFAULT_LOG_LIMIT.min(kept),
        Some(n) if n == 0 || n as usize > kept => {
            return Err(ApiError::invalid(
                "limit",
                format!("must be between 1 and {kept} (the lines kept per handler)"),
            ));
        }
        Some(n) => n as usize,
    };
    // Checked whether or not the log is followed: a bad header is bad input.
    let after = match headers.get("last-event-id") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .map(str::trim)
                .filter(|v| (1..=MAX_SEQ_DIGITS).contains(&v.len()))
                .filter(|v| v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| ApiError::invalid("Last-Event-ID", "must be the `seq` of a line"))?,
        ),
    };
    let log = registry.logs().log(&name);
    if !params.follow.unwrap_or(false) {
        let lines = log.tail(limit);
        return Ok(Json(HandlerLogsBody {
            handler: name.to_string(),
            lines: lines.iter().map(|l| LogLineBody::from(&**l)).collect(),
        })
        .into_response());
    }
    let backlog = log.follow(after, limit);
    let mut first = VecDeque::with_capacity(backlog.lines.len() + 1);
    if backlog.missed > 0 {
        first.push_back(gap_event(backlog.missed));
    }
    first.extend(backlog.lines.iter().map(|l| line_event(l)));
    let following = Following {
        first,
        follower: backlog.follower,
        draining: state.draining(),
    };
    let events = futures::stream::unfold(following, Following::next);
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(LOG_KEEP_ALIVE))
        .into_response())
}

/// A followed log: what to send first, then new lines until the handler is
/// deleted or the server drains.
struct Following {
    first: VecDeque<Event>,
    follower: Follower,
    draining: watch::Receiver<bool>,
}

impl Following {
    async fn next(mut self) -> Option<(Result<Event, Infallible>, Self)> {
        if let Some(event) = self.first.pop_front() {
            return Some((Ok(event), self));
        }
        let followed = tokio::select! {
            followed = self.follower.next() => followed,
            // Shutting down (or the state is gone): end the stream, as long
            // polls answer, so the drain is not held up.
            _ = self.draining.wait_for(|draining| *draining) => return None,
        };
        let event = match followed {
            Followed::Line(line) => line_event(&line),
            Followed::Gap(missed) => gap_event(missed),
            Followed::Closed => return None,
        };
        Some((Ok(event), self))
    }
}

/// `event: line`, `id: <seq>`, `data: <the line as JSON>`.
fn line_event(line: &LogLine) -> Event {
    let data = serde_json::to_string(&LogLineBody::from(line)).unwrap_or_default();
    Event::default()
        .event("line")
        .id(line.seq.to_string())
        .data(data)
}

/// `event: gap`, `data: {"missed": n}`.
fn gap_event(missed: u64) -> Event {
    let data = serde_json::to_string(&LogGapBody { missed }).unwrap_or_default();
    Event::default().event("gap").data(data)
}
