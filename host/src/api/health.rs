//! Probes and metrics: `/healthz` (the process answers), `/readyz` (the
//! backend answers too), `/metrics` (Prometheus). These stay open when an
//! auth token is configured, for load balancers and scrapers.

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiError, ErrorBody};
use super::state::AppState;
use crate::backend::Error;

/// The probe and metrics routes.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(health_live))
        .routes(routes!(health_ready))
        .routes(routes!(health_metrics))
}

/// A probe's answer.
#[derive(Debug, Serialize, ToSchema)]
struct StatusBody {
    /// `ok` or `ready`.
    status: &'static str,
    /// The backend kind (`/readyz` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    backend: Option<&'static str>,
}

/// Liveness: 200 whenever the process can answer.
#[utoipa::path(get, path = "/healthz", tag = "health", security(()),
    responses((status = 200, body = StatusBody)))]
async fn health_live() -> Json<StatusBody> {
    Json(StatusBody {
        status: "ok",
        backend: None,
    })
}

/// Readiness: 200 when the backend answers a ping, else 503.
#[utoipa::path(get, path = "/readyz", tag = "health", security(()),
    responses(
        (status = 200, body = StatusBody),
        (status = 503, description = "The backend does not answer", body = ErrorBody),
    ))]
async fn health_ready(State(state): State<AppState>) -> Result<Json<StatusBody>, ApiError> {
    // Whatever the ping's failure, the answer to "ready?" is no: 503.
    state.backend.ping().await.map_err(|e| match e {
        Error::BackendUnavailable(_) => e,
        other => Error::BackendUnavailable(other.to_string()),
    })?;
    Ok(Json(StatusBody {
        status: "ready",
        backend: Some(state.backend.kind()),
    }))
}

/// Every series (HTTP, backend, handlers, groups) in the Prometheus text
/// format; `docs/operations.md` lists them.
#[utoipa::path(get, path = "/metrics", tag = "health", security(()),
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")))]
async fn health_metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        state.metrics.render(),
    )
}
