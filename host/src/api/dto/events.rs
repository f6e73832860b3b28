//! Streams, events, appends, reads and queries on the wire.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::api::error::ApiError;
use crate::model::{
    Appended, DEFAULT_QUERY_LIMIT, Event, EventId, EventInput, JsonObject, OrderBy, Page, Query,
    QueryCursor, Retention, RetentionPolicy, Stream, StreamName, Timestamp, parse_where,
};

/// Create a stream.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateStreamBody {
    /// 1–128 characters of `[A-Za-z0-9._-]`, not only dots.
    #[schema(value_type = String, example = "orders")]
    pub(crate) name: StreamName,
    /// Partitions, fixed for life (default 1).
    #[schema(minimum = 1, maximum = 1024)]
    #[serde(default, deserialize_with = "super::whole::opt")]
    pub(crate) partition_count: Option<u32>,
    /// How long it keeps events (`docs/log.md#retention`); leave it out
    /// to keep every event.
    #[serde(default)]
    pub(crate) retention: Option<RetentionBody>,
}

/// A change of a stream: its retention (`null` keeps every event again).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PatchStreamBody {
    /// The new retention, or `null`.
    pub(crate) retention: Option<RetentionBody>,
}

/// How long a stream keeps events (`docs/log.md#retention`): what
/// [`Retention`] holds, with whole numbers read as JSON counts them.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RetentionBody {
    /// Events older than this (by their timestamp) are removed.
    #[serde(default, deserialize_with = "super::whole::opt")]
    #[schema(minimum = 1, maximum = 3_153_600_000_000_u64)]
    max_age_ms: Option<u64>,
    /// Each partition keeps at most its newest this many events.
    #[serde(default, deserialize_with = "super::whole::opt")]
    #[schema(minimum = 1, maximum = 9_007_199_254_740_991_u64)]
    max_events: Option<u64>,
    /// `limits` (default): the limits alone decide and one is needed;
    /// `interest`: also every event all groups have settled.
    #[serde(default)]
    policy: RetentionPolicy,
}

impl From<RetentionBody> for Retention {
    fn from(body: RetentionBody) -> Self {
        Retention {
            max_age_ms: body.max_age_ms,
            max_events: body.max_events,
            policy: body.policy,
        }
    }
}

/// One partition's high watermark and log start.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PartitionWatermark {
    /// Last sequence appended (0 when empty).
    high_watermark: u64,
    /// The lowest sequence still stored: 1 until retention removes events,
    /// `high_watermark + 1` when it removed them all. Reads from `after=0`
    /// start here.
    first_sequence: u64,
}

/// A stream.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct StreamBody {
    /// Its name.
    #[schema(value_type = String)]
    name: StreamName,
    /// Fixed at creation.
    partition_count: u32,
    /// When it was created.
    #[schema(value_type = String, format = DateTime)]
    created_at: Timestamp,
    /// Per partition (keys are partition numbers as strings).
    #[schema(value_type = std::collections::HashMap<String, PartitionWatermark>)]
    partitions: BTreeMap<u32, PartitionWatermark>,
    /// How long it keeps events; `null`: for ever.
    retention: Option<Retention>,
}

impl From<Stream> for StreamBody {
    fn from(s: Stream) -> Self {
        let partitions = (0..s.partition_count)
            .map(|p| {
                let high_watermark = s.high_watermarks.get(p as usize).copied().unwrap_or(0);
                let first_sequence = s.first_sequences.get(p as usize).copied().unwrap_or(1);
                (
                    p,
                    PartitionWatermark {
                        high_watermark,
                        first_sequence,
                    },
                )
            })
            .collect();
        Self {
            name: s.name,
            partition_count: s.partition_count,
            created_at: s.created_at,
            partitions,
            retention: s.retention,
        }
    }
}

/// All streams, sorted by name.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct StreamListBody {
    /// The streams.
    pub(crate) streams: Vec<StreamBody>,
}

/// One event to append.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventInputBody {
    /// Unique in the stream; a known id returns the stored event (idempotent
    /// append). Default: a new time-ordered UUIDv7.
    #[schema(value_type = Option<String>)]
    id: Option<EventId>,
    /// Event type.
    #[serde(rename = "type")]
    event_type: Option<String>,
    /// Routing key (Kafka's murmur2 partitioner).
    key: Option<String>,
    /// Explicit partition; wins over the key.
    #[serde(default, deserialize_with = "super::whole::opt")]
    partition: Option<u32>,
    /// When it happened (default: the append time).
    #[schema(value_type = Option<String>, format = DateTime)]
    timestamp: Option<Timestamp>,
    /// The body, a JSON object (default `{}`).
    #[schema(value_type = Option<super::JsonObjectSchema>)]
    payload: Option<JsonObject>,
    /// Metadata, a JSON object (default `{}`).
    #[schema(value_type = Option<super::JsonObjectSchema>)]
    metadata: Option<JsonObject>,
}

impl From<EventInputBody> for EventInput {
    fn from(body: EventInputBody) -> Self {
        EventInput {
            id: body.id,
            event_type: body.event_type,
            key: body.key,
            partition: body.partition,
            timestamp: body.timestamp,
            payload: body.payload.unwrap_or_default(),
            metadata: body.metadata.unwrap_or_default(),
        }
    }
}

/// Append several events atomically.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AppendBatchBody {
    /// At most 1000.
    pub(crate) events: Vec<EventInputBody>,
}

/// A stored event.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventBody {
    /// Unique in the stream.
    #[schema(value_type = String)]
    id: EventId,
    /// Its stream.
    #[schema(value_type = String)]
    stream: StreamName,
    /// Its partition.
    partition: u32,
    /// Position in the partition, from 1.
    sequence: u64,
    /// Routing key.
    key: Option<String>,
    /// Event type.
    #[serde(rename = "type")]
    event_type: Option<String>,
    /// When it happened.
    #[schema(value_type = String, format = DateTime)]
    timestamp: Timestamp,
    /// The body.
    #[schema(value_type = super::JsonObjectSchema)]
    payload: JsonObject,
    /// Metadata.
    #[schema(value_type = super::JsonObjectSchema)]
    metadata: JsonObject,
}

impl From<&Event> for EventBody {
    fn from(e: &Event) -> Self {
        Self {
            id: e.id.clone(),
            stream: e.stream.clone(),
            partition: e.partition,
            sequence: e.sequence,
            key: e.key.clone(),
            event_type: e.event_type.clone(),
            timestamp: e.timestamp,
            payload: e.payload.clone(),
            metadata: e.metadata.clone(),
        }
    }
}

/// The result of an append: the event, and whether it existed already.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AppendedBody {
    /// The stored event (the earlier one for a duplicate).
    #[serde(flatten)]
    event: EventBody,
    /// True when an event with this id existed and nothing was written.
    pub(crate) duplicate: bool,
}

impl From<&Appended> for AppendedBody {
    fn from(a: &Appended) -> Self {
        Self {
            event: EventBody::from(a.event.as_ref()),
            duplicate: a.duplicate,
        }
    }
}

/// The results of a batch append, in input order.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AppendedBatchBody {
    /// One per input event.
    pub(crate) events: Vec<AppendedBody>,
}

/// Where to read.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ReadParams {
    /// The partition (default 0).
    pub(crate) partition: Option<u32>,
    /// Exclusive lower bound on sequence (default 0).
    pub(crate) after: Option<u64>,
    /// At most this many (default 100, max 1000).
    pub(crate) limit: Option<u32>,
}

/// Events in order.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventListBody {
    /// The events.
    pub(crate) events: Vec<EventBody>,
}

/// One ordering key; only one is supported.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OrderKeyBody {
    /// `sequence` or `timestamp`.
    field: String,
    /// `asc` (default) or `desc`.
    dir: Option<String>,
}

/// A history query: filters, bounds, order and a page cursor.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct QueryBody {
    /// Filters, ANDed: `{"type": "x", "amount": {"$gt": 10}, "payload.a.b": {"$exists": true}}`.
    #[serde(rename = "where")]
    #[schema(value_type = Option<super::JsonObjectSchema>)]
    filter: Option<Value>,
    /// Inclusive lower bound on timestamp.
    #[schema(value_type = Option<String>, format = DateTime)]
    from: Option<Timestamp>,
    /// Inclusive upper bound on timestamp.
    #[schema(value_type = Option<String>, format = DateTime)]
    to: Option<Timestamp>,
    /// Exclusive lower bound on sequence.
    #[serde(default, deserialize_with = "super::whole::opt")]
    after_sequence: Option<u64>,
    /// Inclusive upper bound on sequence.
    #[serde(default, deserialize_with = "super::whole::opt")]
    until_sequence: Option<u64>,
    /// `[{"field": "sequence"|"timestamp", "dir": "asc"|"desc"}]` (default sequence asc).
    order_by: Option<Vec<OrderKeyBody>>,
    /// Page size (default 100, max 1000).
    #[serde(default, deserialize_with = "super::whole::opt")]
    limit: Option<u32>,
    /// The previous page's `next_cursor`.
    cursor: Option<String>,
}

impl QueryBody {
    /// The filters and bounds only (what a replay uses; paging is ignored).
    pub(crate) fn into_selection(self) -> Result<Query, ApiError> {
        Ok(Query {
            filters: parse_where(self.filter.as_ref().unwrap_or(&Value::Null))?,
            from: self.from,
            to: self.to,
            after_sequence: self.after_sequence,
            until_sequence: self.until_sequence,
            ..Query::default()
        })
    }

    /// The full query with ordering, limit and cursor.
    pub(crate) fn into_query(mut self) -> Result<Query, ApiError> {
        let order = match self.order_by.take().unwrap_or_default().as_slice() {
            [] => OrderBy::default(),
            [key] => OrderBy::parse(&key.field, key.dir.as_deref())?,
            _ => {
                return Err(ApiError::invalid(
                    "order_by",
                    "takes one field (ties are broken by partition, then sequence)",
                ));
            }
        };
        let limit = self.limit.take().unwrap_or(DEFAULT_QUERY_LIMIT);
        let cursor = match self.cursor.take() {
            Some(text) => Some(QueryCursor::decode(&text, order)?),
            None => None,
        };
        Ok(Query {
            order,
            limit,
            cursor,
            ..self.into_selection()?
        })
    }
}

/// A page of query results.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct QueryPageBody {
    /// The events, in the query's order.
    events: Vec<EventBody>,
    /// Pass back as `cursor` for the next page; null when this page was the last.
    next_cursor: Option<String>,
}

impl From<Page> for QueryPageBody {
    fn from(page: Page) -> Self {
        Self {
            events: page.events.iter().map(EventBody::from).collect(),
            next_cursor: page.next_cursor,
        }
    }
}
