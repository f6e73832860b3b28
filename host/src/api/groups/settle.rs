//! Settling leases: ack, nack, reject, renew, and many at once.
//!
//! Every one of these is fenced by the backend: a lease that has been
//! superseded (re-claimed after expiry, replayed, reset) answers 409
//! `stale_lease` and changes nothing. Expiry alone does not fence.

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::dto::{
    AckBody, LeaseBody, NackBody, OkBody, RejectBody, RenewBody, SettleBody, SettleResultsBody,
};
use crate::api::error::{ApiError, ErrorBody};
use crate::api::extract::{AppJson, GroupPath};
use crate::api::state::AppState;
use crate::backend::RenewRequest;
use crate::model::MAX_SETTLE_BATCH;

/// The settle routes.
pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(lease_ack))
        .routes(routes!(lease_nack))
        .routes(routes!(lease_reject))
        .routes(routes!(lease_renew))
        .routes(routes!(lease_settle))
}

/// Mark a delivery done; the frontier advances over it.
#[utoipa::path(post, path = "/v1/streams/{stream}/groups/{group}/ack", tag = "leases",
    params(
        ("stream" = String, Path, description = "Stream name"),
        ("group" = String, Path, description = "Group name"),
    ),
    request_body = AckBody,
    responses(
        (status = 200, body = OkBody),
        (status = 404, description = "No such stream or group", body = ErrorBody),
        (status = 409, description = "stale_lease or receipt_mismatch: nothing changed", body = ErrorBody),
    ))]
async fn lease_ack(
    State(state): State<AppState>,
    GroupPath(stream, group): GroupPath,
    AppJson(body): AppJson<AckBody>,
) -> Result<Json<OkBody>, ApiError> {
    state.backend.ack(&stream, &group, body.target()).await?;
    Ok(Json(OkBody::YES))
}

/// Give a delivery back for a retry after `delay_ms` (or the group's
/// backoff); on the last attempt it is dead-lettered instead.
#[utoipa::path(post, path = "/v1/streams/{stream}/groups/{group}/nack", tag = "leases",
    params(
        ("stream" = String, Path, description = "Stream name"),
        ("group" = String, Path, description = "Group name"),
    ),
    request_body = NackBody,
    responses(
        (status = 200, body = OkBody),
        (status = 400, description = "delay_ms too long", body = ErrorBody),
        (status = 404, description = "No such stream or group", body = ErrorBody),
        (status = 409, description = "stale_lease or receipt_mismatch: nothing changed", body = ErrorBody),
    ))]
async fn lease_nack(
    State(state): State<AppState>,
    GroupPath(stream, group): GroupPath,
    AppJson(body): AppJson<NackBody>,
) -> Result<Json<OkBody>, ApiError> {
    let target = body.target();
    state
        .backend
        .nack(&stream, &group, target, body.reason, body.delay_ms)
        .await?;
    Ok(Json(OkBody::YES))
}

/// Dead-letter this group's delivery; other groups are unaffected.
#[utoipa::path(post, path = "/v1/streams/{stream}/groups/{group}/reject", tag = "leases",
    params(
        ("stream" = String, Path, description = "Stream name"),
        ("group" = String, Path, description = "Group name"),
    ),
    request_body = RejectBody,
    responses(
        (status = 200, body = OkBody),
        (status = 404, description = "No such stream or group", body = ErrorBody),
        (status = 409, description = "stale_lease or receipt_mismatch: nothing changed", body = ErrorBody),
    ))]
async fn lease_reject(
    State(state): State<AppState>,
    GroupPath(stream, group): GroupPath,
    AppJson(body): AppJson<RejectBody>,
) -> Result<Json<OkBody>, ApiError> {
    let target = body.target();
    state
        .backend
        .reject(&stream, &group, target, body.reason)
        .await?;
    Ok(Json(OkBody::YES))
}

/// Extend a lease to `lease_ms` from now.
#[utoipa::path(post, path = "/v1/streams/{stream}/groups/{group}/renew", tag = "leases",
    params(
        ("stream" = String, Path, description = "Stream name"),
        ("group" = String, Path, description = "Group name"),
    ),
    request_body = RenewBody,
    responses(
        (status = 200, description = "The lease with its new expiry", body = LeaseBody),
        (status = 400, description = "Bad lease_ms", body = ErrorBody),
        (status = 404, description = "No such stream or group", body = ErrorBody),
        (status = 409, description = "stale_lease or receipt_mismatch: nothing changed", body = ErrorBody),
    ))]
async fn lease_renew(
    State(state): State<AppState>,
    GroupPath(stream, group): GroupPath,
    AppJson(body): AppJson<RenewBody>,
) -> Result<Json<LeaseBody>, ApiError> {
    let lease = state
        .backend
        .renew(RenewRequest {
            stream,
            group,
            target: body.target(),
            lease_ms: body.lease_ms.unwrap_or(state.settings.default_lease_ms),
        })
        .await?;
    Ok(Json(lease.into()))
}

/// Apply many acks, nacks and rejects; each gets its own result.
#[utoipa::path(post, path = "/v1/streams/{stream}/groups/{group}/settle", tag = "leases",
    params(
        ("stream" = String, Path, description = "Stream name"),
        ("group" = String, Path, description = "Group name"),
    ),
    request_body = SettleBody,
    responses(
        (status = 200, description = "Per-operation results, in request order", body = SettleResultsBody),
        (status = 400, description = "Malformed operation or over 1000 of them", body = ErrorBody),
        (status = 404, description = "No such stream or group", body = ErrorBody),
    ))]
async fn lease_settle(
    State(state): State<AppState>,
    GroupPath(stream, group): GroupPath,
    AppJson(body): AppJson<SettleBody>,
) -> Result<Json<SettleResultsBody>, ApiError> {
    if body.settlements.len() > MAX_SETTLE_BATCH {
        return Err(ApiError::invalid(
            "settlements",
            format!(
                "at most {MAX_SETTLE_BATCH} per request (got {})",
                body.settlements.len()
            ),
        ));
    }
    let settlements = body.into_settlements()?;
    let event_ids = settlements
        .iter()
        .map(|s| s.target.event_id.clone())
        .collect();
    let results = state.backend.settle(&stream, &group, settlements).await?;
    Ok(Json(SettleResultsBody::new(event_ids, results)))
}
