//! `DELETE /v1/streams/{stream}` and `DELETE /v1/streams/{stream}/groups/{group}`
//! (`docs/operations.md#deleting-streams-and-groups`).
//!
//! Both need `?confirm=true`, checked first. A handler consuming what would
//! be deleted makes the delete a 409 `handler_bound` naming it, unless
//! `force=true`, which removes the handler (it drains first) and then deletes.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiError, ErrorBody};
use super::extract::{AppQuery, GroupPath, StreamPath};
use super::state::AppState;
use crate::backend::{DeleteGroup, DeleteStream, Error};
use crate::model::{GroupName, StreamName};

/// The delete routes.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(stream_delete))
        .routes(routes!(group_delete))
}

/// What a delete needs.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct DeleteParams {
    /// Must be `true`: a delete cannot be undone.
    confirm: Option<bool>,
    /// `true` removes the handlers consuming it first (each drains its
    /// leases); without it, a handler bound to it makes the delete a 409.
    force: Option<bool>,
}

/// What a delete removed.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DeletedBody {
    /// Always true.
    deleted: bool,
    /// The handlers removed first (with `force=true`), by name.
    removed_handlers: Vec<String>,
}

/// Delete a stream with its events, its groups and all their state. Needs
/// `confirm=true`; a stream a handler consumes needs `force=true` too,
/// which removes the handler first. A stream created again under the name
/// starts empty.
#[utoipa::path(delete, path = "/v1/streams/{stream}", tag = "streams",
    params(("stream" = String, Path, description = "Stream name"), DeleteParams),
    responses(
        (status = 200, description = "Deleted", body = DeletedBody),
        (status = 400, description = "confirm_required", body = ErrorBody),
        (status = 404, description = "No such stream", body = ErrorBody),
        (status = 409, description = "handler_bound: a handler consumes the stream (see force)", body = ErrorBody),
    ))]
async fn stream_delete(
    State(state): State<AppState>,
    StreamPath(stream): StreamPath,
    AppQuery(params): AppQuery<DeleteParams>,
) -> Result<Json<DeletedBody>, ApiError> {
    confirmed(&params)?;
    // Unknown names answer 404 before any handler is touched.
    state.backend.get_stream(&stream).await?;
    let removed_handlers = release(&state, &stream, None, &params).await?;
    state
        .backend
        .delete_stream(DeleteStream {
            stream,
            confirm: true,
        })
        .await?;
    Ok(Json(DeletedBody {
        deleted: true,
        removed_handlers,
    }))
}

/// Delete a group with its cursors, deliveries, leases and dead letters;
/// the stream and its other groups are left alone. Needs `confirm=true`;
/// a group a handler consumes needs `force=true` too, which removes the
/// handler first.
#[utoipa::path(delete, path = "/v1/streams/{stream}/groups/{group}", tag = "groups",
    params(
        ("stream" = String, Path, description = "Stream name"),
        ("group" = String, Path, description = "Group name"),
        DeleteParams,
    ),
    responses(
        (status = 200, description = "Deleted", body = DeletedBody),
        (status = 400, description = "confirm_required", body = ErrorBody),
        (status = 404, description = "No such stream or group", body = ErrorBody),
        (status = 409, description = "handler_bound: a handler consumes the group (see force)", body = ErrorBody),
    ))]
async fn group_delete(
    State(state): State<AppState>,
    GroupPath(stream, group): GroupPath,
    AppQuery(params): AppQuery<DeleteParams>,
) -> Result<Json<DeletedBody>, ApiError> {
    confirmed(&params)?;
    let groups = state.backend.list_groups(&stream).await?;
    if !groups.iter().any(|g| g.name == group) {
        return Err(ApiError::Backend(Error::GroupNotFound { stream, group }));
    }
    let removed_handlers = release(&state, &stream, Some(&group), &params).await?;
    state
        .backend
        .delete_group(DeleteGroup {
            stream,
            group,
            confirm: true,
        })
        .await?;
    Ok(Json(DeletedBody {
        deleted: true,
        removed_handlers,
    }))
}

fn confirmed(params: &DeleteParams) -> Result<(), ApiError> {
    if params.confirm == Some(true) {
        Ok(())
    } else {
        Err(ApiError::Refused(Error::ConfirmRequired))
    }
}

/// The handlers consuming `stream` (or only its `group`): a 409 naming
/// them, or with `force`, removed (each drains first); returns the names
/// removed.
#[cfg(feature = "wasm")]
async fn release(
    state: &AppState,
    stream: &StreamName,
    group: Option<&GroupName>,
    params: &DeleteParams,
) -> Result<Vec<String>, ApiError> {
    let Some(registry) = &state.handlers else {
        return Ok(Vec::new());
    };
    let bound: Vec<_> = (registry.list().await.into_iter())
        .filter(|h| &h.manifest.stream == stream && group.is_none_or(|g| &h.manifest.group == g))
        .map(|h| h.name)
        .collect();
    if bound.is_empty() {
        return Ok(Vec::new());
    }
    if params.force != Some(true) {
        let names: Vec<_> = bound.iter().map(|n| n.as_str()).collect();
        let what = match group {
            Some(g) => format!("group {:?} of stream {:?}", g.as_str(), stream.as_str()),
            None => format!("stream {:?}", stream.as_str()),
        };
        return Err(ApiError::HandlerBound(format!(
            "handler {} consumes {what}: remove it first, or delete with force=true, \
             which removes it (it drains its leases first)",
            names.join(", ")
        )));
    }
    let mut removed = Vec::new();
    for name in bound {
        registry.remove(&name).await.map_err(ApiError::Handler)?;
        tracing::info!(handler = %name, "removed the handler to delete what it consumed");
        removed.push(name.to_string());
    }
    Ok(removed)
}

/// A build without WebAssembly runs no handlers: nothing is bound, and
/// `force` has nothing to remove.
#[cfg(not(feature = "wasm"))]
async fn release(
    _: &AppState,
    _: &StreamName,
    _: Option<&GroupName>,
    params: &DeleteParams,
) -> Result<Vec<String>, ApiError> {
    let _nothing_to_remove = params.force;
    Ok(Vec::new())
}
