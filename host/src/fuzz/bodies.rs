//! Target `bodies`: the JSON request bodies of the HTTP API
//! (`api/dto`, `docs/http.md`) and event input validation
//! (`docs/log.md#events`). Any bytes are read as every request type and,
//! where they deserialize, converted and checked as the handlers do,
//! without a panic. An event input that validates is stored (in memory:
//! `into_event`), written as the API writes events, and that body read back
//! as an input gives the same event.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::{any_json, config, corpus, mutant, run};
use crate::api::dto::{
    self, AckBody, AppendBatchBody, CreateGroupBody, CreateStreamBody, EventBody, EventInputBody,
    FetchBody, NackBody, QueryBody, RedriveBody, RejectBody, RenewBody, ReplayBody, ResetBody,
    SettleBody,
};
use crate::backend::policy::route_batch;
use crate::backend::{CreateStream, FetchRequest, ResetRequest, validate_settlements};
use crate::model::{
    ConsumerId, Event, EventId, EventInput, GroupName, GroupSpec, MAX_ID_LEN, MAX_KEY_LEN,
    MAX_TYPE_LEN, StreamName, Timestamp,
};

/// Partitions of the stream events are routed on.
const PARTITIONS: u32 = 3;

/// The append time of inputs without a timestamp.
const NOW: Timestamp = Timestamp::from_millis(1_767_225_600_000);

fn names() -> (StreamName, GroupName) {
    (
        StreamName::parse("s").unwrap(),
        GroupName::parse("g").unwrap(),
    )
}

/// Deserializes `bytes` as `T`, as the API's JSON extractor does.
fn read<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    serde_json::from_slice(bytes).ok()
}

/// The target's property for one input: every request type reads it or
/// refuses it, and converts and checks what it read, without a panic;
/// events that validate round-trip.
fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
    let (stream, group) = names();
    if let Some(b) = read::<CreateStreamBody>(bytes) {
        let create = CreateStream {
            name: b.name,
            partition_count: b.partition_count.unwrap_or(1),
            retention: None,
        };
        let _ = create.validate();
    }
    if let Some(b) = read::<EventInputBody>(bytes) {
        events_round_trip(vec![b.into()])?;
    }
    if let Some(b) = read::<AppendBatchBody>(bytes) {
        events_round_trip(b.events.into_iter().map(Into::into).collect())?;
    }
    if let Some(b) = read::<QueryBody>(bytes)
        && let Ok(query) = b.into_query()
    {
        let _ = query.validate();
    }
    if let Some(b) = read::<CreateGroupBody>(bytes)
        && let Ok(start) = dto::start_position(b.start_after, b.start_at)
    {
        let spec = GroupSpec {
            start,
            max_attempts: b.max_attempts.unwrap_or(5),
            retry_backoff_ms: b.retry_backoff_ms.unwrap_or_default(),
            ordering: b.ordering.unwrap_or_default(),
            on_exhausted: b.on_exhausted.unwrap_or_default(),
            flow: b.flow.unwrap_or_default(),
            name: b.name,
        };
        let _ = spec.validate();
    }
    if let Some(b) = read::<ReplayBody>(bytes)
        && let Ok(replay) = b.into_replay()
    {
        let _ = replay.validate();
    }
    if let Some(b) = read::<ResetBody>(bytes)
        && let Ok(start) = dto::start_position(b.start_after, b.start_at)
    {
        let reset = ResetRequest {
            stream: stream.clone(),
            group: group.clone(),
            confirm: b.confirm,
            start,
            partitions: dto::partitions(b.partitions),
            ordering: b.ordering,
            flow: b.flow,
        };
        let _ = reset.validate();
    }
    if let Some(b) = read::<RedriveBody>(bytes) {
        let _ = b.into_redrive();
    }
    if let Some(b) = read::<FetchBody>(bytes) {
        let fetch = FetchRequest {
            stream: stream.clone(),
            group: group.clone(),
            limit: b.limit.unwrap_or(10),
            consumer_id: b.consumer_id.unwrap_or_else(ConsumerId::generate),
            lease_ms: b.lease_ms.unwrap_or(30_000),
            partitions: dto::partitions(b.partitions),
        };
        let _ = fetch.validate();
    }
    if let Some(b) = read::<SettleBody>(bytes)
        && let Ok(settlements) = b.into_settlements()
    {
        let _ = validate_settlements(&settlements);
    }
    let _ = read::<AckBody>(bytes).map(|b| b.target());
    let _ = read::<NackBody>(bytes).map(|b| b.target());
    let _ = read::<RejectBody>(bytes).map(|b| b.target());
    let _ = read::<RenewBody>(bytes).map(|b| b.target());
    Ok(())
}

/// Routes a batch as an append does; if it validates, each event, stored
/// and written as the API writes it, reads back as the same input.
fn events_round_trip(inputs: Vec<EventInput>) -> Result<(), TestCaseError> {
    let Ok(routed) = route_batch(inputs, PARTITIONS) else {
        return Ok(());
    };
    for (sequence, (input, partition)) in (1..).zip(routed) {
        let id = input.id.clone().unwrap_or_else(EventId::generate);
        let (stream, _) = names();
        let event = input
            .clone()
            .into_event(id.clone(), stream, partition, sequence, NOW);
        // What validates keeps the documented limits (docs/log.md#events).
        prop_assert!(event.timestamp.validate("timestamp").is_ok());
        prop_assert!((1..=MAX_ID_LEN).contains(&id.as_str().chars().count()));
        if let Some(kind) = &event.event_type {
            prop_assert!((1..=MAX_TYPE_LEN).contains(&kind.chars().count()));
        }
        if let Some(key) = &event.key {
            prop_assert!(key.chars().count() <= MAX_KEY_LEN);
        }
        // The API's event body, less what the store adds, is an input again.
        let mut written = serde_json::to_value(EventBody::from(&event)).unwrap();
        let fields = written.as_object_mut().unwrap();
        prop_assert_eq!(fields.remove("stream"), Some(json!("s")));
        prop_assert_eq!(fields.remove("sequence"), Some(json!(sequence)));
        // Read back from text, as the API reads a body: `from_value` would
        // turn an integer -0 into 0 (serde_json visits it as an integer),
        // which no request ever goes through.
        let again: EventInput = serde_json::from_str::<EventInputBody>(&written.to_string())
            .map_err(|e| TestCaseError::fail(format!("{written} does not read back: {e}")))?
            .into();
        let expected = EventInput {
            id: Some(id),
            partition: Some(partition),
            timestamp: Some(event.timestamp),
            ..input
        };
        prop_assert_eq!(&again, &expected);
        prop_assert!(again.validate().is_ok());
        // The stored form (the model's serde) round-trips too.
        let text = serde_json::to_string(&event).unwrap();
        prop_assert_eq!(serde_json::from_str::<Event>(&text).ok(), Some(event));
    }
    Ok(())
}

/// Text of `len` bytes (`é` twice as wide): the limits' edges.
fn sized() -> impl Strategy<Value = String> {
    let len = proptest::sample::select(vec![
        0usize, 1, 36, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025,
    ]);
    (len, any::<bool>()).prop_map(|(len, wide)| {
        if wide {
            "é".repeat(len / 2) + &"a".repeat(len % 2)
        } else {
            "a".repeat(len)
        }
    })
}

/// Timestamps around the accepted range, with offsets and fractions.
fn timestamp() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(vec![
            "1970-01-01T00:00:00Z",
            "1969-12-31T23:59:59.999Z",
            "1969-12-31T23:59:59.9999Z",
            "1970-01-01T00:59:59.999+01:00",
            "9999-12-31T23:59:59.999Z",
            "9999-12-31T23:59:59.9999999Z",
            "9999-12-31T23:00:00-01:00",
            "0000-01-01T00:00:00Z",
            "2026-01-01T00:00:00+14:00",
            "2026-02-30T00:00:00Z",
            "2026-01-01T00:00:60Z",
            "2026-01-01t00:00:00z",
            "2026-01-01 00:00:00Z",
            "2026-01-01T00:00:00",
        ])
        .prop_map(str::to_owned),
        "[0-9]{4}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9](\\.[0-9]{1,12})?(Z|[+-][0-2][0-9]:[0-5][0-9])",
    ]
}

/// An event input body: each field absent, of its type at the limits'
/// edges, or of another type.
fn event_input() -> impl Strategy<Value = Value> {
    let text = || {
        prop_oneof![
            4 => sized().prop_map(Value::from),
            1 => "[\\x00-\\x1f\u{7f}\u{85}a]{1,3}".prop_map(Value::from),
            1 => any_json(),
        ]
    };
    let object = || {
        prop_oneof![
            4 => proptest::collection::btree_map("[a-z.$]{0,3}", any_json(), 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            1 => any_json(),
        ]
    };
    let partition = prop_oneof![
        (0..5u32).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        Just(json!(1.0)),
        Just(json!("1")),
    ];
    let time = prop_oneof![
        4 => timestamp().prop_map(Value::from),
        1 => any_json(),
    ];
    (
        proptest::option::of(text()),
        proptest::option::of(text()),
        proptest::option::of(text()),
        proptest::option::of(partition),
        proptest::option::of(time),
        proptest::option::of(object()),
        proptest::option::of(object()),
    )
        .prop_map(|(id, kind, key, partition, timestamp, payload, metadata)| {
            let mut body = Map::new();
            for (name, value) in [
                ("id", id),
                ("type", kind),
                ("key", key),
                ("partition", partition),
                ("timestamp", timestamp),
                ("payload", payload),
                ("metadata", metadata),
            ] {
                if let Some(v) = value {
                    body.insert(name.into(), v);
                }
            }
            Value::Object(body)
        })
}

#[test]
fn corpus_bodies_are_read_or_refused() {
    for (name, bytes) in corpus("bodies") {
        check(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn arbitrary_bodies_are_read_or_refused() {
    let input = prop_oneof![
        any::<Vec<u8>>(),
        mutant("bodies"),
        any_json().prop_map(|v| serde_json::to_vec(&v).unwrap()),
    ];
    run(config(8000, file!()), input, |bytes| check(&bytes));
}

#[test]
fn event_inputs_validate_or_are_refused_and_round_trip() {
    let input = prop_oneof![
        3 => event_input(),
        1 => proptest::collection::vec(event_input(), 0..4).prop_map(|e| json!({"events": e})),
    ];
    run(config(8000, file!()), input, |body| {
        check(&serde_json::to_vec(&body).unwrap())
    });
}
