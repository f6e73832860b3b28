//! Sending work back through a group: replay, reset, and the dead letters
//! with their redrive. None of these copies or changes an event, and none
//! touches another group.

use axum::Json;
use axum::extract::State;
use serde_json::Value;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::{
    self, DeadLetterPageBody, DeadLetterParams, OkBody, QuarantineBody, RedriveBody, RedrivenBody,
    ReleaseBody, ReleasedBody, ReopenedBody, ReplayBody, ResetBody,
};
use crate::api::error::{ApiError, ErrorBody};
use crate::api::extract::{AnyJson, AppJson, AppQuery, GroupPath};
use crate::api::state::AppState;
use crate::backend::quarantine::{self, ReleaseRequest};
use crate::backend::{DeadLettersRequest, Error, ResetRequest};
use crate::model::DEFAULT_QUERY_LIMIT;

/// The replay, reset and dead-letter routes.
pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(group_replay))
        .routes(routes!(group_reset))
        .routes(routes!(dead_letter_list))
        .routes(routes!(dead_letter_redrive))
        .routes(routes!(quarantine_list))
        .routes(routes!(quarantine_release))
}

/// Re-open deliveries (attempts kept; current holders become stale) and
/// rewind the frontier.
#[utoipa::path(post, path = "/v1/streams/{stream}/groups/{group}/replay", tag = "recovery",
    params(
        ("stream" = String, Path, description = "Stream name"),
        ("group" = String, Path, description = "Group name"),
    ),
    request_body = ReplayBody,
    responses(
        (status = 200, description = "How many deliveries were re-opened", body = ReopenedBody),
        (status = 400, description = "invalid_replay_opts (not exactly one selector), or a bad selector", body = ErrorBody),
        (status = 404, description = "No such stream or group", body = ErrorBody),
    ))]
async fn group_replay(
    State(state): State<AppState>,
    GroupPath(stream, group): GroupPath,
    AnyJson(raw): AnyJson,
) -> Result<Json<ReopenedBody>, ApiError> {
    // Any replay body that is JSON but not a valid set of options (unknown
    // keys, wrong types) is `invalid_replay_opts`, like a wrong number of
    // selectors.
    let body: ReplayBody = serde_json::from_value(raw)
        .map_err(|e| ApiError::Refused(Error::InvalidReplayOpts(e.to_string())))?;
    let how = body.into_replay()?;
    let reopened = state.backend.replay(&stream, &group, how).await?;
    Ok(Json(ReopenedBody { reopened }))
}

/// Forget the group's delivery state in the selected partitions and start
/// them again; with `ordering` or `flow`, in every partition and under
/// those from now on. Needs `confirm: true`, checked before anything else.
#[utoipa::path(post, path = "/v1/streams/{stream}/groups/{group}/reset", tag = "recovery",
    params(
        ("stream" = String, Path, description = "Stream name"),
        ("group" = String, Path, description = "Group name"),
    ),
    request_body = ResetBody,
    responses(
        (status = 200, body = OkBody),
        (status = 400, description = "confirm_required, or a bad start point, partition, ordering or flow (an ordering or flow change resets every partition; the flow must fit the ordering)", body = ErrorBody),
        (status = 404, description = "No such stream or group", body = ErrorBody),
    ))]
async fn group_reset(
    State(state): State<AppState>,
    GroupPath(stream, group): GroupPath,
    AnyJson(raw): AnyJson,
) -> Result<Json<OkBody>, ApiError> {
    let body: ResetBody = confirmed(raw, "reset")?;
    state
        .backend
        .reset(ResetRequest {
            stream,
            group,
            confirm: body.confirm,
            start: dto::start_position(body.start_after, body.start_at)?,
            partitions: dto::partitions(body.partitions),
            ordering: body.ordering,
            flow: body.flow,
        })
        .await?;
    Ok(Json(OkBody::YES))
}

/// A page of dead letters in sequence order.
#[utoipa::path(get, path = "/v1/streams/{stream}/groups/{group}/dead-letters", tag = "recovery",
    params(
        ("stream" = String, Path, description = "Stream name"),
        ("group" = String, Path, description = "Group name"),
        DeadLetterParams,
    ),
    responses(
        (status = 200, body = DeadLetterPageBody),
        (status = 400, description = "Bad limit, or cursor_not_found for an unknown `after`", body = ErrorBody),
        (status = 404, description = "No such stream or group", body = ErrorBody),
    ))]
async fn dead_letter_list(
    State(state): State<AppState>,
    GroupPath(stream, group): GroupPath,
    AppQuery(params): AppQuery<DeadLetterParams>,
) -> Result<Json<DeadLetterPageBody>, ApiError> {
    let page = state
        .backend
        .dead_letters(DeadLettersRequest {
            stream,
            group,
            limit: params.limit.unwrap_or(DEFAULT_QUERY_LIMIT),
            after: params.after,
        })
        .await?;
    Ok(Json(page.into()))
}

/// Make dead letters available again, attempts reset to 0.
#[utoipa::path(post, path = "/v1/streams/{stream}/groups/{group}/dead-letters/redrive", tag = "recovery",
    params(
        ("stream" = String, Path, description = "Stream name"),
        ("group" = String, Path, description = "Group name"),
    ),
    request_body = RedriveBody,
    responses(
        (status = 200, description = "How many were redriven", body = RedrivenBody),
        (status = 400, description = "Neither or both of event_ids and all, or an unknown event id", body = ErrorBody),
        (status = 404, description = "No such stream or group", body = ErrorBody),
    ))]
async fn dead_letter_redrive(
    State(state): State<AppState>,
    GroupPath(stream, group): GroupPath,
    AppJson(body): AppJson<RedriveBody>,
) -> Result<Json<RedrivenBody>, ApiError> {
    let which = body.into_redrive()?;
    let redriven = state.backend.redrive(&stream, &group, which).await?;
    Ok(Json(RedrivenBody { redriven }))
}

/// The keys the group has parked: each behind a head that exhausted its
/// attempts under `on_exhausted = "quarantine"` (`docs/groups.md#quarantine`).
#[utoipa::path(get, path = "/v1/streams/{stream}/groups/{group}/quarantine", tag = "recovery",
    params(
        ("stream" = String, Path, description = "Stream name"),
        ("group" = String, Path, description = "Group name"),
    ),
    responses(
        (status = 200, body = QuarantineBody),
        (status = 404, description = "No such stream or group", body = ErrorBody),
    ))]
async fn quarantine_list(
    State(state): State<AppState>,
    GroupPath(stream, group): GroupPath,
) -> Result<Json<QuarantineBody>, ApiError> {
    let parked = quarantine::parked_keys(&*state.backend, &stream, &group).await?;
    Ok(Json(QuarantineBody {
        parked: parked.into_iter().map(Into::into).collect(),
    }))
}

/// Release parked keys: each head goes out again first, its attempts
/// started over, then the rest of its key in order; with `skip_head`, the
/// head goes to the dead letters and the key goes on with its next event.
/// Needs `confirm: true`, checked before anything else.
#[utoipa::path(post, path = "/v1/streams/{stream}/groups/{group}/quarantine/release", tag = "recovery",
    params(
        ("stream" = String, Path, description = "Stream name"),
        ("group" = String, Path, description = "Group name"),
    ),
    request_body = ReleaseBody,
    responses(
        (status = 200, description = "What was released, and what named was not parked", body = ReleasedBody),
        (status = 400, description = "confirm_required, or not exactly one of keys, event_ids and all", body = ErrorBody),
        (status = 404, description = "No such stream or group", body = ErrorBody),
    ))]
async fn quarantine_release(
    State(state): State<AppState>,
    GroupPath(stream, group): GroupPath,
    AnyJson(raw): AnyJson,
) -> Result<Json<ReleasedBody>, ApiError> {
    let body: ReleaseBody = confirmed(raw, "release")?;
    let released = quarantine::release(
        &*state.backend,
        ReleaseRequest {
            stream,
            group,
            which: body.parked()?,
            skip_head: body.skip_head,
            confirm: body.confirm,
        },
    )
    .await?;
    Ok(Json(ReleasedBody {
        released: released.released.into_iter().map(Into::into).collect(),
        not_parked: released.not_parked,
    }))
}

/// The body of a `what` that needs `confirm: true`, read loosely first:
/// whatever else is wrong with it, a missing or non-`true` confirm is the
/// answer (`"true"` or `1` do not count).
fn confirmed<T: serde::de::DeserializeOwned>(raw: Value, what: &str) -> Result<T, ApiError> {
    if raw.get("confirm") != Some(&Value::Bool(true)) {
        return Err(ApiError::Refused(Error::ConfirmRequired));
    }
    serde_json::from_value(raw)
        .map_err(|e| ApiError::invalid("body", format!("bad {what} request: {e}")))
}
