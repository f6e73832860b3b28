//! `/v1/streams/{stream}/groups…`: consumer groups.
//!
//! This file has the group lifecycle and inspection routes (info, lag, and
//! the leases a group has out); claiming and settling leases live in
//! [`fetch`] (claiming, with long polls) and [`settle`] (ack, nack, reject,
//! renew, batch settle), and the ways to send work back through a group in
//! [`recovery`] (replay, reset, dead letters, redrive).

mod fetch;
mod recovery;
mod settle;

pub(crate) use fetch::MAX_WAIT_MS;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::dto::{
    self, CreateGroupBody, GroupBody, GroupInfoBody, GroupListBody, LagBody, LagParams,
    LeasePageBody, LeasePageParams,
};
use super::error::{ApiError, ErrorBody};
use super::extract::{AppJson, AppQuery, GroupPath, StreamPath};
use super::state::AppState;
use crate::backend::LeasesRequest;
use crate::model::{DEFAULT_QUERY_LIMIT, GroupSpec};

/// The group routes.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(group_create, group_list))
        .routes(routes!(group_info))
        .routes(routes!(group_lag))
        .routes(routes!(group_leases))
        .merge(fetch::router())
        .merge(settle::router())
        .merge(recovery::router())
}

/// Create a consumer group; its cursor and frontier start at the start point.
#[utoipa::path(post, path = "/v1/streams/{stream}/groups", tag = "groups",
    params(("stream" = String, Path, description = "Stream name")),
    request_body = CreateGroupBody,
    responses(
        (status = 201, description = "Created", body = GroupBody),
        (status = 400, description = "Bad name, option or start point", body = ErrorBody),
        (status = 404, description = "No such stream", body = ErrorBody),
        (status = 409, description = "A group of that name exists", body = ErrorBody),
    ))]
async fn group_create(
    State(state): State<AppState>,
    StreamPath(stream): StreamPath,
    AppJson(body): AppJson<CreateGroupBody>,
) -> Result<(StatusCode, Json<GroupBody>), ApiError> {
    let spec = GroupSpec {
        start: dto::start_position(body.start_after, body.start_at)?,
        max_attempts: body
            .max_attempts
            .unwrap_or(state.settings.default_max_attempts),
        retry_backoff_ms: body.retry_backoff_ms.unwrap_or_default(),
        ordering: body.ordering.unwrap_or_default(),
        on_exhausted: body.on_exhausted.unwrap_or_default(),
        flow: body.flow.unwrap_or_default(),
        name: body.name,
    };
    let group = state.backend.create_group(&stream, spec).await?;
    Ok((StatusCode::CREATED, Json(group.into())))
}

/// The stream's groups, sorted by name.
#[utoipa::path(get, path = "/v1/streams/{stream}/groups", tag = "groups",
    params(("stream" = String, Path, description = "Stream name")),
    responses(
        (status = 200, body = GroupListBody),
        (status = 404, description = "No such stream", body = ErrorBody),
    ))]
async fn group_list(
    State(state): State<AppState>,
    StreamPath(stream): StreamPath,
) -> Result<Json<GroupListBody>, ApiError> {
    let groups = state.backend.list_groups(&stream).await?;
    Ok(Json(GroupListBody {
        groups: groups.into_iter().map(Into::into).collect(),
    }))
}

/// Lag, inflight, dead letters and cursors of one group.
#[utoipa::path(get, path = "/v1/streams/{stream}/groups/{group}", tag = "groups",
    params(
        ("stream" = String, Path, description = "Stream name"),
        ("group" = String, Path, description = "Group name"),
    ),
    responses(
        (status = 200, body = GroupInfoBody),
        (status = 404, description = "No such stream or group", body = ErrorBody),
    ))]
async fn group_info(
    State(state): State<AppState>,
    GroupPath(stream, group): GroupPath,
) -> Result<Json<GroupInfoBody>, ApiError> {
    Ok(Json(
        state.backend.group_info(&stream, &group).await?.into(),
    ))
}

/// Per-partition frontier, high watermark and lag, with delivery counts.
#[utoipa::path(get, path = "/v1/streams/{stream}/groups/{group}/lag", tag = "groups",
    params(
        ("stream" = String, Path, description = "Stream name"),
        ("group" = String, Path, description = "Group name"),
        LagParams,
    ),
    responses(
        (status = 200, body = LagBody),
        (status = 400, description = "Bad partition list", body = ErrorBody),
        (status = 404, description = "No such stream or group", body = ErrorBody),
    ))]
async fn group_lag(
    State(state): State<AppState>,
    GroupPath(stream, group): GroupPath,
    AppQuery(params): AppQuery<LagParams>,
) -> Result<Json<LagBody>, ApiError> {
    let partitions = params.partitions()?;
    Ok(Json(
        state
            .backend
            .lag(&stream, &group, &partitions)
            .await?
            .into(),
    ))
}

/// The leases the group has out now, a page at a time.
///
/// In (partition, sequence) order: who holds what, on which attempt, since
/// when and until when. Expired leases nobody has claimed again are
/// listed, marked `expired` (`docs/groups.md#what-is-out-leases`).
#[utoipa::path(get, path = "/v1/streams/{stream}/groups/{group}/leases", tag = "groups",
    params(
        ("stream" = String, Path, description = "Stream name"),
        ("group" = String, Path, description = "Group name"),
        LeasePageParams,
    ),
    responses(
        (status = 200, body = LeasePageBody),
        (status = 400, description = "Bad limit or `after`", body = ErrorBody),
        (status = 404, description = "No such stream or group", body = ErrorBody),
    ))]
async fn group_leases(
    State(state): State<AppState>,
    GroupPath(stream, group): GroupPath,
    AppQuery(params): AppQuery<LeasePageParams>,
) -> Result<Json<LeasePageBody>, ApiError> {
    let after = params.after()?;
    let page = state
        .backend
        .leases(LeasesRequest {
            stream,
            group,
            limit: params.limit.unwrap_or(DEFAULT_QUERY_LIMIT),
            after,
        })
        .await?;
    Ok(Json(page.into()))
}
