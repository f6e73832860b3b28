//! `GET /v1/groups`: every group of every stream with its figures, in one
//! answer — what the console's groups page shows (`docs/console.md`),
//! instead of one request for the streams, one per stream for its groups
//! and one per group, every poll of every open page.

use axum::Json;
use axum::extract::State;
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::dto::GroupInfoBody;
use super::error::{ApiError, ErrorBody};
use super::state::AppState;
use crate::backend::Error;

/// The route.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(all_groups))
}

/// Groups read from the store at once while the answer is put together.
const AT_ONCE: usize = 8;

/// Every group of every stream.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AllGroupsBody {
    /// By stream name, then group name; each as
    /// `GET /v1/streams/{stream}/groups/{group}` answers.
    groups: Vec<GroupInfoBody>,
}

/// Every group of every stream, sorted by stream and group name, each with
/// its lag (per partition: frontier, high watermark), pending, in-flight
/// and waiting-retry counts, dead letters and cursors. A stream or group
/// deleted while the answer is put together is left out.
#[utoipa::path(get, path = "/v1/groups", tag = "groups",
    responses(
        (status = 200, body = AllGroupsBody),
        (status = 401, description = "A bearer token is required", body = ErrorBody),
    ))]
async fn all_groups(State(state): State<AppState>) -> Result<Json<AllGroupsBody>, ApiError> {
    let backend = &state.backend;
    let mut streams = backend.list_streams().await?;
    streams.sort_by(|a, b| a.name.cmp(&b.name));
    let mut names = Vec::new();
    for stream in streams {
        match backend.list_groups(&stream.name).await {
            Ok(groups) => names.extend(groups.into_iter().map(|g| (g.stream, g.name))),
            Err(Error::StreamNotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let infos: Vec<_> = futures::stream::iter(names)
        .map(|(stream, group)| async move {
            match backend.group_info(&stream, &group).await {
                Ok(info) => Ok(Some(GroupInfoBody::from(info))),
                Err(Error::StreamNotFound(_) | Error::GroupNotFound { .. }) => Ok(None),
                Err(e) => Err(ApiError::from(e)),
            }
        })
        .buffered(AT_ONCE)
        .try_collect()
        .await?;
    Ok(Json(AllGroupsBody {
        groups: infos.into_iter().flatten().collect(),
    }))
}
