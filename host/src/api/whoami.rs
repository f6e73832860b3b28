//! `GET /v1/whoami`: what the caller's token may do
//! (docs/http.md#authentication), so that a client offers only what it may
//! do: the console hides its write controls from a read-only token.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::error::ErrorBody;
use super::state::AppState;

/// The route.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(whoami))
}

/// What the caller may do.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WhoAmIBody {
    /// Whether this server asks for a bearer token on its `/v1` routes.
    auth_required: bool,
    /// Whether the caller may change things (any method), or only read
    /// (`GET` and `HEAD`; anything else answers 403 `forbidden`).
    may_write: bool,
    /// The name of the caller's token (`--token NAME=SECRET`), under which
    /// its changes are recorded; `null` for an unnamed token or no auth.
    token_name: Option<String>,
}

/// The caller's access: whether a token is needed, whether the caller
/// may change things, and its name.
#[utoipa::path(get, path = "/v1/whoami", tag = "access",
    responses(
        (status = 200, body = WhoAmIBody),
        (status = 401, description = "A bearer token is required", body = ErrorBody),
    ))]
async fn whoami(State(state): State<AppState>, caller: Caller) -> Json<WhoAmIBody> {
    Json(WhoAmIBody {
        auth_required: state.settings.auth_required(),
        may_write: !caller.read_only(),
        token_name: caller.name().map(str::to_owned),
    })
}
