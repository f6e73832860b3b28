//! The domain model: streams, events, groups, leases, lag, dead letters and
//! queries as plain types with their validation rules.
//!
//! Nothing here knows about storage, HTTP or WebAssembly; backends, the API
//! and the runtime convert to and from these types at their edges.

mod event;
mod group;
mod inspect;
mod lease;
mod name;
mod query;
mod stream;
mod time;

pub use event::{
    Appended, Event, EventInput, JsonObject, LINEAGE_KEYS, MAX_KEY_LEN, MAX_TYPE_LEN,
    PartitionOutOfRange, kafka_partition, murmur2, route,
};
pub use group::{
    DEFAULT_MAX_ATTEMPTS, Group, GroupSpec, MAX_BACKOFF_STEPS, MAX_DELAY_MS, MAX_MAX_ATTEMPTS,
    StartAfter, StartPosition, backoff_ms, validate_backoff,
};
pub use inspect::{DeadLetter, DeadLetterPage, GroupInfo, Lag, PartitionLag};
pub use lease::{
    DEFAULT_FETCH_LIMIT, DEFAULT_LEASE_MS, Lease, MAX_FETCH_LIMIT, MAX_LEASE_MS, MAX_REASON_LEN,
    MAX_SETTLE_BATCH, SettleOp, SettleTarget, Settlement, clip_reason, validate_lease_ms,
    validate_limit,
};
pub use name::{
    ConsumerId, EventId, GroupName, HandlerName, LeaseId, MAX_ID_LEN, MAX_NAME_LEN, StreamName,
    ValidationError,
};
pub use query::{
    Condition, DEFAULT_QUERY_LIMIT, Direction, EventField, FieldRef, Filter, MAX_PATH_DEPTH,
    MAX_QUERY_LIMIT, OrderBy, OrderField, Page, Position, Query, QueryCursor, RangeOp, json_cmp,
    json_eq, parse_where,
};
pub use stream::{MAX_PARTITIONS, Stream};
pub use time::Timestamp;

/// 128 random bits as URL-safe base64 without padding (22 characters).
pub(crate) fn random_token() -> std::sync::Arc<str> {
    use base64::Engine;
    let bytes: [u8; 16] = rand::random();
    let mut text = [0u8; 22];
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode_slice(bytes, &mut text)
        .expect("16 bytes encode to exactly 22 characters");
    std::str::from_utf8(&text).expect("base64 is ASCII").into()
}
