//! `/v1/streams…`: create, list and inspect streams; append, read and
//! query events.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::dto::{
    AppendBatchBody, AppendedBatchBody, AppendedBody, CreateStreamBody, EventBody, EventInputBody,
    EventListBody, PatchStreamBody, QueryBody, QueryPageBody, ReadParams, StreamBody,
    StreamListBody,
};
use super::error::{ApiError, ErrorBody};
use super::extract::{AppJson, AppQuery, JsonOrEmpty, StreamPath};
use super::state::AppState;
use crate::backend::{CreateStream, ReadRequest};
use crate::model::DEFAULT_QUERY_LIMIT;

/// Most events in one batch append, like the other batch limits.
pub(crate) const MAX_APPEND_BATCH: usize = 1000;

/// The stream and event routes.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(stream_create, stream_list))
        .routes(routes!(stream_get, stream_patch))
        .routes(routes!(event_append, event_read))
        .routes(routes!(event_append_batch))
        .routes(routes!(event_query))
}

/// Create a stream.
#[utoipa::path(post, path = "/v1/streams", tag = "streams",
    request_body = CreateStreamBody,
    responses(
        (status = 201, description = "Created", body = StreamBody),
        (status = 400, description = "Bad name, partition_count or retention", body = ErrorBody),
        (status = 409, description = "A stream of that name exists", body = ErrorBody),
    ))]
async fn stream_create(
    State(state): State<AppState>,
    AppJson(body): AppJson<CreateStreamBody>,
) -> Result<(StatusCode, Json<StreamBody>), ApiError> {
    let stream = state
        .backend
        .create_stream(CreateStream {
            name: body.name,
            partition_count: body.partition_count.unwrap_or(1),
            retention: body.retention.map(Into::into),
        })
        .await?;
    Ok((StatusCode::CREATED, Json(stream.into())))
}

/// Change a stream's retention (`{"retention": {...}}`, or `null` to keep
/// every event again); the next trim round applies it
/// (`docs/log.md#retention`).
#[utoipa::path(patch, path = "/v1/streams/{stream}", tag = "streams",
    params(("stream" = String, Path, description = "Stream name")),
    request_body = PatchStreamBody,
    responses(
        (status = 200, body = StreamBody),
        (status = 400, description = "Bad retention", body = ErrorBody),
        (status = 404, description = "No such stream", body = ErrorBody),
    ))]
async fn stream_patch(
    State(state): State<AppState>,
    StreamPath(stream): StreamPath,
    AppJson(body): AppJson<PatchStreamBody>,
) -> Result<Json<StreamBody>, ApiError> {
    let retention = body.retention.map(Into::into);
    let updated = state.backend.set_retention(&stream, retention).await?;
    Ok(Json(updated.into()))
}

/// List streams, sorted by name.
#[utoipa::path(get, path = "/v1/streams", tag = "streams",
    responses((status = 200, body = StreamListBody)))]
async fn stream_list(State(state): State<AppState>) -> Result<Json<StreamListBody>, ApiError> {
    let streams = state.backend.list_streams().await?;
    Ok(Json(StreamListBody {
        streams: streams.into_iter().map(Into::into).collect(),
    }))
}

/// One stream with its retention and, per partition, its high watermark
/// and first stored sequence.
#[utoipa::path(get, path = "/v1/streams/{stream}", tag = "streams",
    params(("stream" = String, Path, description = "Stream name")),
    responses(
        (status = 200, body = StreamBody),
        (status = 404, description = "No such stream", body = ErrorBody),
    ))]
async fn stream_get(
    State(state): State<AppState>,
    StreamPath(stream): StreamPath,
) -> Result<Json<StreamBody>, ApiError> {
    Ok(Json(state.backend.get_stream(&stream).await?.into()))
}

/// Append one event. A known `id` returns the stored event with 200 and
/// `duplicate: true` instead of appending again.
#[utoipa::path(post, path = "/v1/streams/{stream}/events", tag = "streams",
    params(("stream" = String, Path, description = "Stream name")),
    request_body = EventInputBody,
    responses(
        (status = 201, description = "Appended", body = AppendedBody),
        (status = 200, description = "Known id: the stored event, duplicate: true", body = AppendedBody),
        (status = 400, description = "Bad input or partition", body = ErrorBody),
        (status = 404, description = "No such stream", body = ErrorBody),
    ))]
async fn event_append(
    State(state): State<AppState>,
    StreamPath(stream): StreamPath,
    AppJson(body): AppJson<EventInputBody>,
) -> Result<(StatusCode, Json<AppendedBody>), ApiError> {
    let appended = state.backend.append_one(&stream, body.into()).await?;
    let status = if appended.duplicate {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(AppendedBody::from(&appended))))
}

/// Append events atomically (all or none); results are in input order.
#[utoipa::path(post, path = "/v1/streams/{stream}/events/batch", tag = "streams",
    params(("stream" = String, Path, description = "Stream name")),
    request_body = AppendBatchBody,
    responses(
        (status = 201, description = "Appended (known ids are flagged duplicate)", body = AppendedBatchBody),
        (status = 400, description = "Bad input, bad partition or over 1000 events; nothing written", body = ErrorBody),
        (status = 404, description = "No such stream", body = ErrorBody),
    ))]
async fn event_append_batch(
    State(state): State<AppState>,
    StreamPath(stream): StreamPath,
    AppJson(body): AppJson<AppendBatchBody>,
) -> Result<(StatusCode, Json<AppendedBatchBody>), ApiError> {
    if body.events.len() > MAX_APPEND_BATCH {
        return Err(ApiError::invalid(
            "events",
            format!(
                "at most {MAX_APPEND_BATCH} events per batch (got {})",
                body.events.len()
            ),
        ));
    }
    let inputs = body.events.into_iter().map(Into::into).collect();
    let appended = state.backend.append(&stream, inputs).await?;
    let events = appended.iter().map(AppendedBody::from).collect();
    Ok((StatusCode::CREATED, Json(AppendedBatchBody { events })))
}

/// Read one partition in sequence order.
#[utoipa::path(get, path = "/v1/streams/{stream}/events", tag = "streams",
    params(("stream" = String, Path, description = "Stream name"), ReadParams),
    responses(
        (status = 200, body = EventListBody),
        (status = 400, description = "Bad limit or partition", body = ErrorBody),
        (status = 404, description = "No such stream", body = ErrorBody),
    ))]
async fn event_read(
    State(state): State<AppState>,
    StreamPath(stream): StreamPath,
    AppQuery(params): AppQuery<ReadParams>,
) -> Result<Json<EventListBody>, ApiError> {
    let events = state
        .backend
        .read(ReadRequest {
            stream,
            partition: params.partition.unwrap_or(0),
            after: params.after.unwrap_or(0),
            limit: params.limit.unwrap_or(DEFAULT_QUERY_LIMIT),
        })
        .await?;
    Ok(Json(EventListBody {
        events: events.iter().map(EventBody::from).collect(),
    }))
}

/// Search the stream's history (never touches group state).
#[utoipa::path(post, path = "/v1/streams/{stream}/query", tag = "streams",
    params(("stream" = String, Path, description = "Stream name")),
    request_body = QueryBody,
    responses(
        (status = 200, body = QueryPageBody),
        (status = 400, description = "Bad filter, order, limit or cursor", body = ErrorBody),
        (status = 404, description = "No such stream", body = ErrorBody),
    ))]
async fn event_query(
    State(state): State<AppState>,
    StreamPath(stream): StreamPath,
    JsonOrEmpty(body): JsonOrEmpty<QueryBody>,
) -> Result<Json<QueryPageBody>, ApiError> {
    let query = body.into_query()?;
    Ok(Json(state.backend.query(&stream, &query).await?.into()))
}
