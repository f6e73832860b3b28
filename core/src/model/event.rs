//! Events: the immutable records of a stream, and what a producer sends.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{EventId, StreamName, Timestamp, ValidationError};

/// A JSON object (payloads and metadata are always objects).
pub type JsonObject = Map<String, Value>;

/// Metadata keys with a meaning across services: queryable as bare filter
/// names (`correlation_id: "x"` means `metadata.correlation_id == "x"`).
pub const LINEAGE_KEYS: [&str; 5] = [
    "correlation_id",
    "causation_id",
    "producer",
    "schema",
    "schema_version",
];

/// Longest `type`, in characters (as JSON Schema's `maxLength` counts them;
/// at most 1 KiB of UTF-8).
pub const MAX_TYPE_LEN: usize = 256;
/// Longest routing `key`, in characters: at most 2 KiB of UTF-8, which with
/// the stream name stays under PostgreSQL's limit on an index entry (the
/// key is indexed).
pub const MAX_KEY_LEN: usize = 512;

/// The largest sequence a partition can reach, and so the largest one a
/// caller may name (as a start point, a replay or read position, a query
/// bound): 2^53 − 1. Every store must hold it exactly — the SQL stores keep
/// an `i64`, a Lua-scripted store a double — and so must every JSON client
/// (it is JavaScript's `Number.MAX_SAFE_INTEGER`). A value above it could
/// never name an event, and a store that cannot represent it would clamp or
/// wrap it into a different position, so it is refused, on every backend alike.
pub const MAX_SEQUENCE: u64 = (1 << 53) - 1;

/// Checks a sequence a caller named in `field`: at most [`MAX_SEQUENCE`].
pub fn validate_sequence(field: &str, sequence: u64) -> Result<(), ValidationError> {
    if sequence <= MAX_SEQUENCE {
        Ok(())
    } else {
        Err(ValidationError::new(
            field,
            format!("must be at most {MAX_SEQUENCE} (got {sequence})"),
        ))
    }
}

/// One immutable record of a stream. Consumption never changes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Unique within the stream; producers may choose it to make appends idempotent.
    pub id: EventId,
    /// The stream it belongs to.
    pub stream: StreamName,
    /// The partition it was routed to.
    pub partition: u32,
    /// Position within the partition: starts at 1, contiguous, never reused.
    pub sequence: u64,
    /// Routing key, if the producer gave one.
    pub key: Option<String>,
    /// Event type, if the producer gave one.
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    /// When it happened (the producer's value, else the append time).
    pub timestamp: Timestamp,
    /// The body.
    pub payload: JsonObject,
    /// Lineage and other metadata.
    pub metadata: JsonObject,
}

/// What a producer sends for one event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventInput {
    /// Caller-chosen id; a known id makes the append a no-op returning the stored event.
    pub id: Option<EventId>,
    /// Event type.
    pub event_type: Option<String>,
    /// Routing key (Kafka-compatible murmur2 partitioning).
    pub key: Option<String>,
    /// Explicit partition; wins over the key.
    pub partition: Option<u32>,
    /// Explicit timestamp; defaults to the append time.
    pub timestamp: Option<Timestamp>,
    /// The body (default `{}`).
    pub payload: JsonObject,
    /// Metadata (default `{}`).
    pub metadata: JsonObject,
}

impl EventInput {
    /// An input with only a payload.
    pub fn with_payload(payload: JsonObject) -> Self {
        Self {
            payload,
            ..Self::default()
        }
    }

    /// Checks the free-text fields and the timestamp's range. Partitions
    /// are checked by [`route`] because the valid range depends on the stream.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if let Some(t) = self.timestamp {
            t.validate("timestamp")?;
        }
        if let Some(t) = &self.event_type
            && (t.is_empty() || t.chars().count() > MAX_TYPE_LEN)
        {
            return Err(ValidationError::new(
                "type",
                format!("must be 1–{MAX_TYPE_LEN} characters"),
            ));
        }
        if let Some(k) = &self.key
            && k.chars().count() > MAX_KEY_LEN
        {
            return Err(ValidationError::new(
                "key",
                format!("must be at most {MAX_KEY_LEN} characters"),
            ));
        }
        Ok(())
    }

    /// Builds the stored event once routing and sequencing are decided.
    pub fn into_event(
        self,
        id: EventId,
        stream: StreamName,
        partition: u32,
        sequence: u64,
        now: Timestamp,
    ) -> Event {
        Event {
            id,
            stream,
            partition,
            sequence,
            key: self.key,
            event_type: self.event_type,
            timestamp: self.timestamp.unwrap_or(now),
            payload: self.payload,
            metadata: self.metadata,
        }
    }
}

/// The result of appending one event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Appended {
    /// The stored event (the earlier one when `duplicate`). Shared, since
    /// events are immutable.
    pub event: Arc<Event>,
    /// True when an event with this id already existed and nothing was written.
    pub duplicate: bool,
}

/// Why an event could not be routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOutOfRange {
    /// The partition asked for.
    pub partition: u32,
    /// How many the stream has.
    pub partition_count: u32,
}

/// Picks the partition for `input` on a stream with `partition_count`
/// partitions: the explicit partition (which must exist), else the key's
/// Kafka partition, else 0.
pub fn route(input: &EventInput, partition_count: u32) -> Result<u32, PartitionOutOfRange> {
    match (input.partition, &input.key) {
        (Some(p), _) if p < partition_count => Ok(p),
        (Some(p), _) => Err(PartitionOutOfRange {
            partition: p,
            partition_count,
        }),
        (None, Some(key)) => Ok(kafka_partition(key.as_bytes(), partition_count)),
        (None, None) => Ok(0),
    }
}

/// Kafka's default partitioner: `(murmur2(key) & 0x7fffffff) % n`, so a
/// Kafka producer and Rheo send a key to the same partition number.
pub fn kafka_partition(key: &[u8], partition_count: u32) -> u32 {
    let positive = (murmur2(key) as u32) & 0x7fff_ffff;
    positive % partition_count.max(1)
}

/// MurmurHash2 (32-bit) with Kafka's seed `0x9747b28c`.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = 0x9747_b28c ^ (len as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        if rest.len() >= 3 {
            h ^= u32::from(rest[2]) << 16;
        }
        if rest.len() >= 2 {
            h ^= u32::from(rest[1]) << 8;
        }
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_reference_values() {
        // The cases of Kafka's own UtilsTest.testMurmur2.
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (input, expected) in cases {
            assert_eq!(
                murmur2(input),
                expected,
                "{}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn key_routing_is_kafkas() {
        // toPositive(-973932308) = 1173551340; % 4 = 0, % 3 = 0, % 7 = 2
        assert_eq!(kafka_partition(b"21", 4), 1_173_551_340 % 4);
        assert_eq!(kafka_partition(b"21", 7), 1_173_551_340 % 7);
        assert_eq!(kafka_partition(b"anything", 1), 0);
    }

    #[test]
    fn explicit_partition_wins_and_must_exist() {
        let mut input = EventInput {
            key: Some("k".into()),
            partition: Some(2),
            ..EventInput::default()
        };
        assert_eq!(route(&input, 3), Ok(2));
        input.partition = Some(3);
        assert_eq!(
            route(&input, 3),
            Err(PartitionOutOfRange {
                partition: 3,
                partition_count: 3
            })
        );
        input.partition = None;
        assert_eq!(route(&input, 3), Ok(kafka_partition(b"k", 3)));
        assert_eq!(route(&EventInput::default(), 3), Ok(0));
    }

    #[test]
    fn sequences_are_bounded_by_what_every_store_holds_exactly() {
        assert!(validate_sequence("after", 0).is_ok());
        assert!(validate_sequence("after", MAX_SEQUENCE).is_ok());
        assert_eq!(
            MAX_SEQUENCE as f64 as u64, MAX_SEQUENCE,
            "exact as a double"
        );
        assert!(i64::try_from(MAX_SEQUENCE).is_ok());
        for bad in [MAX_SEQUENCE + 1, u64::MAX] {
            let err = validate_sequence("start_after", bad).unwrap_err();
            assert_eq!(err.field, "start_after");
            assert!(err.message.contains(&bad.to_string()), "{err}");
        }
    }

    #[test]
    fn free_text_fields_are_bounded() {
        let long_type = EventInput {
            event_type: Some("t".repeat(MAX_TYPE_LEN + 1)),
            ..EventInput::default()
        };
        assert_eq!(long_type.validate().unwrap_err().field, "type");
        let empty_type = EventInput {
            event_type: Some(String::new()),
            ..EventInput::default()
        };
        assert!(empty_type.validate().is_err());
        let long_key = EventInput {
            key: Some("k".repeat(MAX_KEY_LEN + 1)),
            ..EventInput::default()
        };
        assert_eq!(long_key.validate().unwrap_err().field, "key");
        let far_future = EventInput {
            timestamp: Some(Timestamp::from_millis(i64::MAX)),
            ..EventInput::default()
        };
        assert_eq!(far_future.validate().unwrap_err().field, "timestamp");
    }
}
