//! The domain model: streams, events, groups, leases, lag, dead letters and
//! queries as plain types with their validation rules.
//!
//! Nothing here knows about storage, HTTP or WebAssembly; backends, the API
//! and the runtime convert to and from these types at their edges.

mod event;
mod flow;
mod group;
mod inspect;
mod lease;
mod name;
mod query;
mod stream;
mod time;

pub use event::{
    Appended, Event, EventInput, JsonObject, LINEAGE_KEYS, MAX_KEY_LEN, MAX_SEQUENCE, MAX_TYPE_LEN,
    PartitionOutOfRange, kafka_partition, murmur2, route, validate_sequence,
};
pub use flow::{Flow, KeyRate, MAX_KEY_BURST, MAX_KEY_CONCURRENCY, MAX_KEY_RATE, MIN_KEY_RATE};
pub use group::{
    DEFAULT_MAX_ATTEMPTS, Group, GroupOrdering, GroupSpec, MAX_BACKOFF_STEPS, MAX_DELAY_MS,
    MAX_MAX_ATTEMPTS, OnExhausted, StartAfter, StartPosition, backoff_ms, validate_backoff,
};
pub use inspect::{
    DeadLetter, DeadLetterPage, GroupInfo, HeldLease, LEASE_CURSOR_PATTERN, Lag, LeaseCursor,
    LeasePage, ParkedKey, PartitionLag,
};
pub use lease::{
    DEFAULT_FETCH_LIMIT, DEFAULT_LEASE_MS, Lease, MAX_FETCH_LIMIT, MAX_LEASE_MS, MAX_REASON_LEN,
    MAX_SETTLE_BATCH, SettleOp, SettleTarget, Settlement, clip_reason, validate_lease_ms,
    validate_limit,
};
pub use name::{
    ConsumerId, EventId, GroupName, HandlerName, ID_PATTERN, LeaseId, MAX_ID_LEN, MAX_NAME_LEN,
    NAME_PATTERN, StreamName, ValidationError,
};
pub use query::{
    Condition, DEFAULT_QUERY_LIMIT, Direction, EventField, FieldRef, Filter, MAX_PATH_DEPTH,
    MAX_QUERY_LIMIT, OrderBy, OrderField, Page, Position, Query, QueryCursor, RangeOp, json_cmp,
    json_eq, parse_where,
};
pub use stream::{MAX_PARTITIONS, MAX_RETENTION_AGE_MS, Retention, RetentionPolicy, Stream};
pub use time::{Timestamp, human_ms};

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

/// A fresh UUIDv7 (RFC 9562) in its 36-character text form: 48 bits of Unix
/// milliseconds, then 74 random bits. Ids made later sort after earlier ones,
/// so generated event ids land next to each other in the id indexes instead
/// of on random pages of a large history.
pub(crate) fn time_ordered_token() -> std::sync::Arc<str> {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    uuid_v7_text(ms, rand::random()).into()
}

/// The text of the UUIDv7 made of `ms` (low 48 bits) and `random` (74 of its
/// 80 bits are used; the version and variant bits take the rest).
fn uuid_v7_text(ms: u64, random: [u8; 10]) -> String {
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    bytes[6..].copy_from_slice(&random);
    bytes[6] = 0x70 | (bytes[6] & 0x0f);
    bytes[8] = 0x80 | (bytes[8] & 0x3f);
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(36);
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            text.push('-');
        }
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_v7_text_has_the_rfc_layout() {
        let text = uuid_v7_text(0x0190_1234_5678, [0xff; 10]);
        assert_eq!(text, "01901234-5678-7fff-bfff-ffffffffffff");
        let text = uuid_v7_text(u64::MAX, [0; 10]);
        assert_eq!(text, "ffffffff-ffff-7000-8000-000000000000");
    }

    #[test]
    fn uuid_v7_text_sorts_by_time_whatever_the_random_part() {
        let earlier = uuid_v7_text(1_700_000_000_000, [0xff; 10]);
        let later = uuid_v7_text(1_700_000_000_001, [0; 10]);
        assert!(earlier < later, "{earlier} !< {later}");
    }

    #[test]
    fn time_ordered_tokens_are_distinct_version_7_uuids() {
        let a = time_ordered_token();
        let b = time_ordered_token();
        assert_ne!(a, b);
        for t in [&a, &b] {
            assert_eq!(t.len(), 36);
            assert_eq!(&t[14..15], "7", "{t}");
            assert!(matches!(&t[19..20], "8" | "9" | "a" | "b"), "{t}");
        }
    }
}
