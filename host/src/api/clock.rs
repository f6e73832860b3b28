//! `/v1/test/clock`: read and move the frozen clock of a server started
//! with `--test-clock`, so expiry behaviour can be tested from outside
//! without sleeping. Without the test clock these routes answer 404, as if
//! they did not exist.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiError, ErrorBody};
use super::extract::JsonOrEmpty;
use super::state::AppState;
use crate::clock::{Clock, FrozenClock};
use crate::model::Timestamp;

/// The test clock routes.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(clock_get, clock_move))
}

/// Move the test clock: `set` first, then `advance_ms`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ClockMoveBody {
    /// Jump to this instant (backwards too).
    #[schema(value_type = Option<String>, format = DateTime)]
    set: Option<Timestamp>,
    /// Then move forward this many milliseconds, waking what became due
    /// (never past 9999-12-31T23:59:59.999Z).
    advance_ms: Option<u64>,
}

/// The test clock's time.
#[derive(Debug, Serialize, ToSchema)]
struct ClockBody {
    /// The current instant.
    #[schema(value_type = String, format = DateTime)]
    now: Timestamp,
}

fn test_clock(state: &AppState) -> Result<&Arc<FrozenClock>, ApiError> {
    state.test_clock.as_ref().ok_or_else(|| {
        ApiError::NotFound("no such route (the test clock needs rheo serve --test-clock)".into())
    })
}

/// The test clock's time.
#[utoipa::path(get, path = "/v1/test/clock", tag = "test clock",
    responses(
        (status = 200, body = ClockBody),
        (status = 404, description = "The server runs on the system clock", body = ErrorBody),
    ))]
async fn clock_get(State(state): State<AppState>) -> Result<Json<ClockBody>, ApiError> {
    let clock = test_clock(&state)?;
    Ok(Json(ClockBody { now: clock.now() }))
}

/// Set and/or advance the test clock; answers the new time.
#[utoipa::path(post, path = "/v1/test/clock", tag = "test clock",
    request_body = ClockMoveBody,
    responses(
        (status = 200, body = ClockBody),
        (status = 400, description = "Bad timestamp or advance_ms", body = ErrorBody),
        (status = 404, description = "The server runs on the system clock", body = ErrorBody),
    ))]
async fn clock_move(
    State(state): State<AppState>,
    body: Result<JsonOrEmpty<ClockMoveBody>, ApiError>,
) -> Result<Json<ClockBody>, ApiError> {
    // Without the test clock the route does not exist, whatever the body.
    let clock = test_clock(&state)?;
    let JsonOrEmpty(body) = body?;
    // Checked before anything moves, so a refused request changes nothing.
    let base = body.set.unwrap_or_else(|| clock.now());
    if let Some(ms) = body.advance_ms
        && base.checked_add_ms(ms).is_none()
    {
        return Err(ApiError::invalid(
            "advance_ms",
            format!("{ms} ms after {base} is past {}", Timestamp::MAX),
        ));
    }
    if let Some(at) = body.set {
        clock.set(at);
    }
    if let Some(ms) = body.advance_ms {
        clock.advance(ms);
    }
    Ok(Json(ClockBody { now: clock.now() }))
}
