//! An event as one JSON text: how the Redis and MongoDB backends keep an
//! event's body, so that reading it back is one parse and every number
//! keeps its exact text (`docs/backends.md`). The stream, partition and
//! sequence are not in the text: each store keeps them where it indexes
//! them.

use crate::model::{Event, EventId, JsonObject, StreamName, Timestamp};

/// The stored form (type, key and empty metadata are left out).
#[derive(serde::Serialize)]
struct Entry<'a> {
    id: &'a str,
    ts: i64,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    event_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    payload: &'a JsonObject,
    #[serde(skip_serializing_if = "JsonObject::is_empty")]
    metadata: &'a JsonObject,
}

/// [`Entry`], read back.
#[derive(serde::Deserialize)]
struct ReadEntry {
    id: EventId,
    ts: i64,
    #[serde(rename = "type", default)]
    event_type: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    payload: JsonObject,
    #[serde(default)]
    metadata: JsonObject,
}

/// The JSON text of `event`.
pub fn encode(event: &Event) -> serde_json::Result<String> {
    serde_json::to_string(&Entry {
        id: event.id.as_str(),
        ts: event.timestamp.as_millis(),
        event_type: event.event_type.as_deref(),
        key: event.key.as_deref(),
        payload: &event.payload,
        metadata: &event.metadata,
    })
}

/// The event at `(partition, sequence)` of `stream` whose text is `body`.
pub fn decode(
    stream: &StreamName,
    partition: u32,
    sequence: u64,
    body: &str,
) -> serde_json::Result<Event> {
    let read: ReadEntry = serde_json::from_str(body)?;
    Ok(Event {
        id: read.id,
        stream: stream.clone(),
        partition,
        sequence,
        event_type: read.event_type,
        key: read.key,
        timestamp: Timestamp::from_millis(read.ts),
        payload: read.payload,
        metadata: read.metadata,
    })
}
