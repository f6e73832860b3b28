//! `GET /v1/nodes`: the servers sharing this one's backend and what each
//! runs (`docs/cluster.md`). On a backend one server owns, that server alone.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiError, ErrorBody};
use super::state::AppState;
use crate::cluster::NodeRecord;

/// The nodes route.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_nodes))
}

/// The live nodes.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct NodesBody {
    /// Whether this server shares its handlers with other nodes (cluster
    /// mode), or owns its backend alone.
    clustered: bool,
    /// The id of the node that answered.
    this_node: String,
    /// Every node heard from within the node timeout, by id.
    nodes: Vec<NodeRecord>,
}

/// The nodes that sent a heartbeat within the node timeout (by the
/// answering node's clock), each with the handlers it runs.
#[utoipa::path(get, path = "/v1/nodes", tag = "nodes",
    responses(
        (status = 200, body = NodesBody),
        (status = 401, description = "A bearer token is required", body = ErrorBody),
        (status = 503, description = "The backend does not answer", body = ErrorBody),
    ))]
async fn list_nodes(State(state): State<AppState>) -> Result<Json<NodesBody>, ApiError> {
    let membership = &state.membership;
    Ok(Json(NodesBody {
        clustered: membership.clustered(),
        this_node: membership.id().to_owned(),
        nodes: membership.nodes().await?,
    }))
}
