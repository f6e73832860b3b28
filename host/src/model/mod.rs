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
/// A ULID-style id: 48 bits of Unix milliseconds then 80 random bits, as 26
/// Crockford base32 characters, so ids sort by creation time. Generated
/// event ids use it: consecutive appends then land next to each other in
/// the id indexes instead of on random pages, which keeps SQL stores'
/// write cost flat as history grows.
pub(crate) fn time_ordered_token() -> std::sync::Arc<str> {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    ulid_text(ms, rand::random())
}

/// `ms` (low 48 bits) and `random` (low 80 bits) as a 26-character ULID.
pub(crate) fn ulid_text(ms: u64, random: u128) -> std::sync::Arc<str> {
    const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let ms = u128::from(ms & ((1 << 48) - 1));
    let value = (ms << 80) | (random & ((1 << 80) - 1));
    let text: String = (0..26)
        .map(|i| ALPHABET[((value >> (125 - 5 * i)) & 31) as usize] as char)
        .collect();
    text.into()
}

pub(crate) fn random_token() -> std::sync::Arc<str> {
    use base64::Engine;
    let bytes: [u8; 16] = rand::random();
    let mut text = [0u8; 22];
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode_slice(bytes, &mut text)
        .expect("16 bytes encode to exactly 22 characters");
    std::str::from_utf8(&text).expect("base64 is ASCII").into()
}
