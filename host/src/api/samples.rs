//! `GET /v1/metrics/samples`: the last five minutes of what the server
//! samples every `--metrics-interval` (`crate::metrics::history`) — per
//! group its lag, settled and appended counts, per handler its processed
//! and acked counts — so the console's plots start from them and a reload
//! keeps them (`docs/console.md#plots`).

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ErrorBody;
use super::extract::AppQuery;
use super::state::AppState;
use crate::metrics::history::{GroupPoint, HandlerPoint, WINDOW};
use crate::model::Timestamp;

/// The route.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(metric_samples))
}

/// Which series: each parameter given narrows them.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct SamplesParams {
    /// Only groups of this stream, and handlers consuming it.
    stream: Option<String>,
    /// Only groups of this name, and handlers consuming them.
    group: Option<String>,
    /// Only this handler, and the group it consumes.
    handler: Option<String>,
}

/// The sampled series.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SamplesBody {
    /// The server's time now: a client whose clock differs shifts the
    /// samples' times by the difference.
    #[schema(value_type = String, format = DateTime)]
    now: Timestamp,
    /// How often the server samples (`rheo serve --metrics-interval`);
    /// `null` when it does not.
    interval_ms: Option<u64>,
    /// How far back the series reach.
    window_ms: u64,
    /// Per group, by stream and group name.
    groups: Vec<GroupSeriesBody>,
    /// Per handler, by name.
    handlers: Vec<HandlerSeriesBody>,
}

/// One group's samples, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GroupSeriesBody {
    stream: String,
    group: String,
    samples: Vec<GroupSampleBody>,
}

/// A group at one moment.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GroupSampleBody {
    #[schema(value_type = String, format = DateTime)]
    at: Timestamp,
    /// Events after the frontier, over all partitions.
    lag: u64,
    /// The partitions' frontiers added up: events settled.
    settled: u64,
    /// The partitions' high watermarks added up: events appended.
    appended: u64,
}

impl From<&GroupPoint> for GroupSampleBody {
    fn from(p: &GroupPoint) -> Self {
        Self {
            at: p.at,
            lag: p.lag,
            settled: p.settled,
            appended: p.appended,
        }
    }
}

/// One handler's samples on this server, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HandlerSeriesBody {
    handler: String,
    /// The stream it consumes.
    stream: String,
    /// The group it consumes.
    group: String,
    samples: Vec<HandlerSampleBody>,
}

/// A handler's counters (every version, this server) at one moment.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HandlerSampleBody {
    #[schema(value_type = String, format = DateTime)]
    at: Timestamp,
    /// Deliveries handled.
    processed: u64,
    /// Deliveries acked.
    acked: u64,
}

impl From<&HandlerPoint> for HandlerSampleBody {
    fn from(p: &HandlerPoint) -> Self {
        Self {
            at: p.at,
            processed: p.processed,
            acked: p.acked,
        }
    }
}

/// The server's samples of the last five minutes, at most one a second:
/// each group's lag, settled and appended counts, each handler's processed
/// and acked counts. Kept in memory only; a restart starts afresh.
#[utoipa::path(get, path = "/v1/metrics/samples", tag = "groups",
    params(SamplesParams),
    responses(
        (status = 200, body = SamplesBody),
        (status = 401, description = "A bearer token is required", body = ErrorBody),
    ))]
async fn metric_samples(
    State(state): State<AppState>,
    AppQuery(params): AppQuery<SamplesParams>,
) -> Json<SamplesBody> {
    let samples = &state.metrics.groups;
    let wanted =
        |value: &str, filter: &Option<String>| filter.as_deref().is_none_or(|f| f == value);
    let (groups, handlers) = samples.history(|history| {
        let handlers: Vec<HandlerSeriesBody> = history
            .handlers()
            .iter()
            .filter(|(name, series)| {
                wanted(name, &params.handler)
                    && wanted(&series.stream, &params.stream)
                    && wanted(&series.group, &params.group)
            })
            .map(|(name, series)| HandlerSeriesBody {
                handler: name.clone(),
                stream: series.stream.clone(),
                group: series.group.clone(),
                samples: series.points.iter().map(Into::into).collect(),
            })
            .collect();
        let groups = history
            .groups()
            .iter()
            .filter(|((stream, group), _)| {
                wanted(stream, &params.stream)
                    && wanted(group, &params.group)
                    && (params.handler.is_none()
                        || handlers
                            .iter()
                            .any(|h| &h.stream == stream && &h.group == group))
            })
            .map(|((stream, group), points)| GroupSeriesBody {
                stream: stream.clone(),
                group: group.clone(),
                samples: points.iter().map(Into::into).collect(),
            })
            .collect();
        (groups, handlers)
    });
    Json(SamplesBody {
        now: state.backend.clock().now(),
        interval_ms: samples
            .interval()
            .map(|i| u64::try_from(i.as_millis()).unwrap_or(u64::MAX)),
        window_ms: WINDOW.as_millis() as u64,
        groups,
        handlers,
    })
}
