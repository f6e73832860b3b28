//! Conformance checks: Streams and the event log: create, append, read, query.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::{Harness, START, code, eid, gn, obj, sn};
use crate::backend::{
    CreateStream, DeadLettersRequest, LeasesRequest, Partitions, ReadRequest, Redrive,
    RenewRequest, Replay, ResetRequest, Result,
};
use crate::model::{
    Direction, Event, EventInput, GroupName, GroupSpec, JsonObject, LeaseId, MAX_KEY_LEN,
    MAX_TYPE_LEN, OrderBy, OrderField, Page, Query, QueryCursor, SettleTarget, Settlement,
    StreamName, Timestamp, json_eq, kafka_partition, parse_where,
};

// ---------------------------------------------------------------- helpers

/// `START + offset_ms`.
fn at(offset_ms: i64) -> Timestamp {
    Timestamp::from_millis(START.as_millis() + offset_ms)
}

/// An input with only a payload.
fn input(payload: Value) -> EventInput {
    EventInput::with_payload(obj(payload))
}

/// An input with a type and a payload.
fn typed(event_type: &str, payload: Value) -> EventInput {
    EventInput {
        event_type: Some(event_type.to_owned()),
        ..input(payload)
    }
}

/// An input with an explicit id (and partition 0 unless routed otherwise).
fn with_id(id: &str, payload: Value) -> EventInput {
    EventInput {
        id: Some(eid(id)),
        ..input(payload)
    }
}

fn seqs(events: &[Event]) -> Vec<u64> {
    events.iter().map(|e| e.sequence).collect()
}

fn ids(events: &[Event]) -> Vec<String> {
    events.iter().map(|e| e.id.as_str().to_owned()).collect()
}

/// A query with the filters of a `where` object and the maximum page size.
fn q(filter: Value) -> Query {
    Query {
        filters: parse_where(&filter).expect("valid where"),
        limit: 1000,
        ..Query::default()
    }
}

/// Runs a query, expecting success.
async fn run(h: &Harness, s: &StreamName, query: &Query) -> Page {
    h.b().query(s, query).await.expect("query")
}

/// Ids of the events a `where` object matches (one page of up to 1000).
async fn found(h: &Harness, s: &StreamName, filter: Value) -> Vec<String> {
    let page = run(h, s, &q(filter)).await;
    assert_eq!(page.next_cursor, None);
    ids(&page.events)
}

/// Decodes a text cursor for the query's order as the API does, then runs it.
async fn run_with_cursor(h: &Harness, s: &StreamName, query: &Query, text: &str) -> Result<Page> {
    let cursor = QueryCursor::decode(text, query.order)?;
    let query = Query {
        cursor: Some(cursor),
        ..query.clone()
    };
    h.b().query(s, &query).await
}

/// Follows cursors from `query` to the end; every page but the last must be
/// full and carry a cursor, the last must be short and carry none.
/// Returns the pages.
async fn all_pages(h: &Harness, s: &StreamName, query: &Query) -> Vec<Vec<Event>> {
    let mut pages = Vec::new();
    let mut page = run(h, s, query).await;
    loop {
        let full = page.events.len() == query.limit as usize;
        assert!(page.events.len() <= query.limit as usize, "page over limit");
        assert_eq!(
            page.next_cursor.is_some(),
            full,
            "next_cursor must be Some exactly when the page is full ({} of {})",
            page.events.len(),
            query.limit
        );
        pages.push(page.events);
        let Some(text) = page.next_cursor else {
            return pages;
        };
        assert!(pages.len() <= 10_000, "paging does not terminate");
        page = run_with_cursor(h, s, query, &text)
            .await
            .expect("query next page");
    }
}

/// The group-scoped operations with their error codes, in a fixed order.
async fn group_op_codes(
    h: &Harness,
    s: &StreamName,
    g: &GroupName,
) -> Vec<(&'static str, &'static str)> {
    let b = h.b();
    let target = SettleTarget {
        event_id: eid("e1"),
        lease_id: LeaseId::parse("l1").expect("lease id"),
        receipt: None,
    };
    let ack = Settlement::ack(target.clone());
    let renew = RenewRequest {
        stream: s.clone(),
        group: g.clone(),
        target,
        lease_ms: 30_000,
    };
    let dead = DeadLettersRequest {
        stream: s.clone(),
        group: g.clone(),
        limit: 10,
        after: None,
    };
    let leases = LeasesRequest {
        stream: s.clone(),
        group: g.clone(),
        limit: 10,
        after: None,
    };
    let reset = ResetRequest::to_the_beginning(s, g);
    let replay = Replay::FromSequence {
        after: 0,
        partitions: Partitions::All,
    };
    vec![
        ("fetch", code(b.fetch(h.fetch_req(s, g, 10)).await)),
        ("lag", code(b.lag(s, g, &Partitions::All).await)),
        ("group_info", code(b.group_info(s, g).await)),
        ("settle", code(b.settle(s, g, vec![ack]).await)),
        ("settle_empty", code(b.settle(s, g, Vec::new()).await)),
        ("renew", code(b.renew(renew).await)),
        ("dead_letters", code(b.dead_letters(dead).await)),
        ("leases", code(b.leases(leases).await)),
        ("replay", code(b.replay(s, g, replay).await)),
        ("redrive", code(b.redrive(s, g, Redrive::All).await)),
        ("reset", code(b.reset(reset).await)),
        ("next_due", code(b.next_due(s, g, &Partitions::All).await)),
    ]
}

fn assert_all_codes(codes: &[(&'static str, &'static str)], expected: &str) {
    for (op, got) in codes {
        assert_eq!(*got, expected, "{op}");
    }
}

async fn read(h: &Harness, s: &StreamName, partition: u32, after: u64, limit: u32) -> Vec<Event> {
    h.b()
        .read(ReadRequest {
            stream: s.clone(),
            partition,
            after,
            limit,
        })
        .await
        .expect("read")
}

async fn hw(h: &Harness, s: &StreamName) -> Vec<u64> {
    h.b()
        .get_stream(s)
        .await
        .expect("get stream")
        .high_watermarks
}

// ---------------------------------------------------------------- streams

pub async fn ping_succeeds(h: &Harness) {
    h.b().ping().await.expect("ping");
    assert_eq!(h.b().list_streams().await.expect("list"), Vec::new());
    h.b().ping().await.expect("second ping");
}

/// Factories hand out migrated stores: migrating again applies nothing and
/// keeps what is there.
/// Once migrated, a store reports each of this build's migrations
/// applied, none pending and none unknown, and the same after another
/// `migrate` (`rheo migrate --status`).
pub async fn a_migrated_store_reports_every_migration_applied(h: &Harness) {
    h.b().migrate().await.expect("migrate");
    let status = h.b().migration_status().await.expect("status");
    assert_eq!(status.pending, Vec::<String>::new(), "{status:?}");
    assert_eq!(status.unknown, Vec::<String>::new(), "{status:?}");
    status
        .check_not_newer()
        .expect("a store this build migrated");
    h.b().migrate().await.expect("migrate");
    assert_eq!(h.b().migration_status().await.expect("status"), status);
}

pub async fn migrating_again_applies_nothing(h: &Harness) {
    let s = h.stream("s", 1).await;
    h.append_n(&s, 1).await;
    assert_eq!(
        h.b().migrate().await.expect("migrate"),
        Vec::<String>::new()
    );
    assert_eq!(
        h.b().migrate().await.expect("migrate"),
        Vec::<String>::new()
    );
    let stream = h.b().get_stream(&s).await.expect("get stream");
    assert_eq!(stream.high_watermarks, [1]);
}

pub async fn create_stream_returns_the_stream(h: &Harness) {
    h.clock.advance(1234);
    let created = h
        .b()
        .create_stream(CreateStream {
            name: sn("orders"),
            partition_count: 3,
            retention: None,
        })
        .await
        .expect("create stream");
    assert_eq!(created.name, sn("orders"));
    assert_eq!(created.partition_count, 3);
    assert_eq!(created.created_at, at(1234));
    assert_eq!(created.high_watermarks, vec![0, 0, 0]);
    h.clock.advance(5000);
    let got = h.b().get_stream(&sn("orders")).await.expect("get stream");
    assert_eq!(got, created, "get_stream returns what create returned");
    assert_eq!(h.b().list_streams().await.expect("list"), vec![created]);
}

pub async fn create_stream_twice_is_already_exists(h: &Harness) {
    let s = h.stream("orders", 2).await;
    let again = h
        .b()
        .create_stream(CreateStream {
            name: s.clone(),
            partition_count: 5,
            retention: None,
        })
        .await;
    assert_eq!(code(again), "already_exists");
    h.append_to(&s, 1, 1).await;
    let again = h
        .b()
        .create_stream(CreateStream {
            name: s.clone(),
            partition_count: 2,
            retention: None,
        })
        .await;
    assert_eq!(code(again), "already_exists");
    let stream = h.b().get_stream(&s).await.expect("get stream");
    assert_eq!(stream.partition_count, 2, "the original is kept");
    assert_eq!(stream.high_watermarks, vec![0, 1], "its events are kept");
    assert_eq!(h.b().list_streams().await.expect("list").len(), 1);
}

pub async fn create_stream_with_bad_partition_count_is_refused(h: &Harness) {
    for count in [0, 1025, u32::MAX] {
        let r = h
            .b()
            .create_stream(CreateStream {
                name: sn("s"),
                partition_count: count,
                retention: None,
            })
            .await;
        assert_eq!(code(r), "invalid_partition_count", "{count}");
    }
    assert_eq!(h.b().list_streams().await.expect("list"), Vec::new());
    assert_eq!(code(h.b().get_stream(&sn("s")).await), "stream_not_found");
    // The bounds themselves are allowed.
    let max = h.stream("max", 1024).await;
    assert_eq!(hw(h, &max).await, vec![0; 1024]);
    let min = h.stream("s", 1).await;
    assert_eq!(hw(h, &min).await, vec![0]);
}

pub async fn list_streams_is_sorted_by_name(h: &Harness) {
    h.stream("b", 2).await;
    h.stream("a", 1).await;
    h.stream("c", 3).await;
    h.stream("B.x", 1).await;
    let list = h.b().list_streams().await.expect("list");
    let names: Vec<&str> = list.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["B.x", "a", "b", "c"]);
    let counts: Vec<u32> = list.iter().map(|s| s.partition_count).collect();
    assert_eq!(counts, [1, 1, 2, 3]);
}

pub async fn unknown_stream_is_stream_not_found_everywhere(h: &Harness) {
    // Another stream with a group of the same name exists: names are not global.
    let other = h.stream("other", 1).await;
    let g = h.group(&other, "g").await;
    let s = sn("nope");
    let b = h.b();
    assert_eq!(code(b.get_stream(&s).await), "stream_not_found");
    assert_eq!(
        code(b.append(&s, vec![input(json!({}))]).await),
        "stream_not_found"
    );
    let req = ReadRequest {
        stream: s.clone(),
        partition: 0,
        after: 0,
        limit: 10,
    };
    assert_eq!(code(b.read(req).await), "stream_not_found");
    assert_eq!(
        code(b.query(&s, &Query::default()).await),
        "stream_not_found"
    );
    let spec = GroupSpec::new(gn("g2"));
    assert_eq!(code(b.create_group(&s, spec).await), "stream_not_found");
    assert_eq!(code(b.list_groups(&s).await), "stream_not_found");
    assert_all_codes(&group_op_codes(h, &s, &g).await, "stream_not_found");
    // Nothing was created on the way.
    let names: Vec<StreamName> = b
        .list_streams()
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, vec![other]);
}

pub async fn stream_is_checked_before_group(h: &Harness) {
    let s = h.stream("s", 2).await;
    h.append_n(&s, 2).await;
    h.group(&s, "other").await;
    let elsewhere = h.stream("t", 1).await;
    let g = h.group(&elsewhere, "g").await;
    // Unknown stream and unknown group: the stream is reported.
    assert_all_codes(
        &group_op_codes(h, &sn("nope"), &gn("missing")).await,
        "stream_not_found",
    );
    // Known stream, unknown group (it exists on another stream only).
    assert_all_codes(&group_op_codes(h, &s, &g).await, "group_not_found");
    assert_all_codes(
        &group_op_codes(h, &s, &gn("missing")).await,
        "group_not_found",
    );
    // Nothing changed for the stream.
    assert_eq!(hw(h, &s).await, vec![2, 0]);
    let groups = h.b().list_groups(&s).await.expect("list groups");
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].name, gn("other"));
}

// ---------------------------------------------------------------- append

pub async fn append_batch_assigns_contiguous_sequences(h: &Harness) {
    let s = h.stream("s", 1).await;
    let batch = vec![
        typed("a", json!({})),
        typed("b", json!({})),
        typed("c", json!({})),
    ];
    let out = h.b().append(&s, batch).await.expect("append");
    let events: Vec<Event> = out.iter().map(|a| (*a.event).clone()).collect();
    assert_eq!(seqs(&events), [1, 2, 3]);
    assert!(out.iter().all(|a| !a.duplicate));
    assert!(events.iter().all(|e| e.stream == s && e.partition == 0));
    let types: Vec<_> = events.iter().map(|e| e.event_type.as_deref()).collect();
    assert_eq!(types, [Some("a"), Some("b"), Some("c")], "input order");
    let more = h
        .append_inputs(&s, vec![typed("d", json!({})), typed("e", json!({}))])
        .await;
    assert_eq!(seqs(&more), [4, 5]);
    let one = h.append_inputs(&s, vec![typed("f", json!({}))]).await;
    assert_eq!(seqs(&one), [6]);
    assert_eq!(hw(h, &s).await, vec![6]);
    assert_eq!(seqs(&read(h, &s, 0, 0, 100).await), [1, 2, 3, 4, 5, 6]);
}

pub async fn append_sets_fields_and_generates_ids(h: &Harness) {
    let s = h.stream("s", 1).await;
    h.clock.advance(42);
    let metadata = json!({
        "correlation_id": "corr-1", "causation_id": "cause-1",
        "producer": "pricing-service-v3", "schema": "curve", "schema_version": 2
    });
    let full = EventInput {
        event_type: Some("curve_update".into()),
        key: Some("EUR-3M".into()),
        metadata: obj(metadata.clone()),
        ..input(json!({"currency": "EUR", "price": 1.5}))
    };
    let out = h
        .b()
        .append(&s, vec![full.clone(), full, EventInput::default()])
        .await
        .expect("append");
    assert!(out.iter().all(|a| !a.duplicate));
    let (a, b, bare) = (&out[0].event, &out[1].event, &out[2].event);
    assert_eq!(a.event_type.as_deref(), Some("curve_update"));
    assert_eq!(a.key.as_deref(), Some("EUR-3M"));
    assert_eq!(a.payload, obj(json!({"currency": "EUR", "price": 1.5})));
    assert_eq!(a.metadata, obj(metadata));
    assert_eq!(
        (a.stream.clone(), a.partition, a.sequence),
        (s.clone(), 0, 1)
    );
    assert!(out.iter().all(|x| x.event.timestamp == at(42)));
    let distinct: BTreeSet<&str> = out.iter().map(|x| x.event.id.as_str()).collect();
    assert_eq!(distinct.len(), 3, "generated ids are distinct");
    assert!(distinct.iter().all(|id| !id.is_empty()));
    assert_eq!((b.payload.clone(), b.sequence), (a.payload.clone(), 2));
    assert_eq!((bare.event_type.clone(), bare.key.clone()), (None, None));
    assert!(bare.payload.is_empty() && bare.metadata.is_empty());
    let stored = read(h, &s, 0, 0, 10).await;
    assert_eq!(
        stored,
        out.into_iter()
            .map(|x| (*x.event).clone())
            .collect::<Vec<_>>()
    );
}

pub async fn append_keeps_explicit_id_and_timestamp(h: &Harness) {
    let s = h.stream("s", 2).await;
    let past = Timestamp::from_millis(1_700_000_000_123);
    let future = at(86_400_000 + 7);
    let inputs = vec![
        EventInput {
            id: Some(eid("order-42")),
            timestamp: Some(past),
            partition: Some(1),
            ..input(json!({"n": 1}))
        },
        EventInput {
            id: Some(eid("urn:uuid:0f8fad5b-d9cb-469f-a165-70867728950e")),
            timestamp: Some(future),
            ..input(json!({"n": 2}))
        },
    ];
    let out = h.append_inputs(&s, inputs).await;
    assert_eq!(out[0].id, eid("order-42"));
    assert_eq!(out[0].timestamp, past);
    assert_eq!((out[0].partition, out[0].sequence), (1, 1));
    assert_eq!(
        out[1].id,
        eid("urn:uuid:0f8fad5b-d9cb-469f-a165-70867728950e")
    );
    assert_eq!(out[1].timestamp, future);
    assert_eq!(read(h, &s, 1, 0, 10).await, vec![out[0].clone()]);
    assert_eq!(read(h, &s, 0, 0, 10).await, vec![out[1].clone()]);
}

pub async fn append_empty_batch_is_empty(h: &Harness) {
    let s = h.stream("s", 2).await;
    assert_eq!(h.b().append(&s, Vec::new()).await.expect("append"), vec![]);
    assert_eq!(hw(h, &s).await, vec![0, 0]);
    h.append_to(&s, 1, 2).await;
    assert_eq!(h.b().append(&s, Vec::new()).await.expect("append"), vec![]);
    assert_eq!(hw(h, &s).await, vec![0, 2]);
    let next = h.append_to(&s, 1, 1).await;
    assert_eq!(seqs(&next), [3], "an empty batch allocates no sequence");
}

pub async fn append_with_partition_out_of_range_writes_nothing(h: &Harness) {
    let s = h.stream("s", 3).await;
    for bad in [99, 3, u32::MAX] {
        let batch = vec![
            EventInput {
                id: Some(eid("x")),
                partition: Some(1),
                ..input(json!({"ok": true}))
            },
            EventInput {
                key: Some("k".into()),
                ..input(json!({"ok": true}))
            },
            EventInput {
                partition: Some(bad),
                ..input(json!({"ok": false}))
            },
        ];
        assert_eq!(
            code(h.b().append(&s, batch).await),
            "invalid_partition",
            "{bad}"
        );
        assert_eq!(hw(h, &s).await, vec![0, 0, 0], "nothing written ({bad})");
    }
    let q_all = run(h, &s, &q(json!({}))).await;
    assert!(q_all.events.is_empty());
    let out = h
        .b()
        .append(&s, vec![with_id("x", json!({"n": 1}))])
        .await
        .expect("append");
    assert!(!out[0].duplicate, "the refused batch did not store id x");
    assert_eq!((out[0].event.partition, out[0].event.sequence), (0, 1));
    let last = h.append_to(&s, 2, 1).await;
    assert_eq!((last[0].partition, last[0].sequence), (2, 1));
}

pub async fn append_with_invalid_field_writes_nothing(h: &Harness) {
    let s = h.stream("s", 1).await;
    let good = || with_id("ok1", json!({"n": 1}));
    let bad_inputs = [
        ("empty type", typed("", json!({}))),
        ("long type", typed(&"t".repeat(MAX_TYPE_LEN + 1), json!({}))),
        (
            "long key",
            EventInput {
                key: Some("k".repeat(MAX_KEY_LEN + 1)),
                ..input(json!({}))
            },
        ),
    ];
    for (what, bad) in bad_inputs {
        let r = h.b().append(&s, vec![good(), bad]).await;
        assert_eq!(code(r), "invalid", "{what}");
        assert_eq!(hw(h, &s).await, vec![0], "nothing written ({what})");
    }
    // The limits themselves are fine.
    let edge = EventInput {
        event_type: Some("t".repeat(MAX_TYPE_LEN)),
        key: Some("k".repeat(MAX_KEY_LEN)),
        ..good()
    };
    let out = h.b().append(&s, vec![edge]).await.expect("append");
    assert!(!out[0].duplicate, "the refused batches did not store ok1");
    assert_eq!(out[0].event.sequence, 1);
    assert_eq!(out[0].event.key.as_deref().map(str::len), Some(MAX_KEY_LEN));
    assert_eq!(hw(h, &s).await, vec![1]);
}

pub async fn append_known_id_returns_the_stored_event(h: &Harness) {
    let s = h.stream("s", 2).await;
    let first = EventInput {
        id: Some(eid("e1")),
        event_type: Some("a".into()),
        partition: Some(1),
        ..input(json!({"v": "A"}))
    };
    let stored = h.b().append_one(&s, first).await.expect("append");
    assert!(!stored.duplicate);
    h.clock.advance(1000);
    let retry = EventInput {
        id: Some(eid("e1")),
        event_type: Some("b".into()),
        partition: Some(0),
        ..input(json!({"v": "B"}))
    };
    let again = h.b().append_one(&s, retry).await.expect("append again");
    assert!(again.duplicate);
    assert_eq!(again.event, stored.event, "the stored event, unchanged");
    assert_eq!(hw(h, &s).await, vec![0, 1]);
    // In a later batch next to a new event: only the new one is written.
    let batch = vec![
        with_id("e1", json!({"v": "C"})),
        with_id("e2", json!({"v": "D"})),
    ];
    let out = h.b().append(&s, batch).await.expect("append batch");
    assert_eq!((out[0].duplicate, out[1].duplicate), (true, false));
    assert_eq!(out[0].event, stored.event);
    assert_eq!((out[1].event.partition, out[1].event.sequence), (0, 1));
    assert_eq!(hw(h, &s).await, vec![1, 1]);
    assert_eq!(read(h, &s, 1, 0, 10).await, vec![(*stored.event).clone()]);
    assert_eq!(found(h, &s, json!({"id": "e1"})).await, ["e1"]);
}

pub async fn append_duplicate_ids_within_a_batch(h: &Harness) {
    let s = h.stream("s", 1).await;
    let batch = vec![
        with_id("x", json!({"v": 1})),
        with_id("y", json!({"v": 2})),
        with_id("x", json!({"v": 3})),
    ];
    let out = h.b().append(&s, batch).await.expect("append");
    let got: Vec<(&str, u64, bool)> = out
        .iter()
        .map(|a| (a.event.id.as_str(), a.event.sequence, a.duplicate))
        .collect();
    assert_eq!(got, [("x", 1, false), ("y", 2, false), ("x", 1, true)]);
    assert_eq!(out[2].event, out[0].event, "the first x is kept");
    assert_eq!(out[2].event.payload, obj(json!({"v": 1})));
    assert_eq!(hw(h, &s).await, vec![2]);
    assert_eq!(ids(&read(h, &s, 0, 0, 10).await), ["x", "y"]);
}

pub async fn append_routes_keys_like_kafka(h: &Harness) {
    // Kafka's murmur2 of "21" is -973932308 → toPositive 1173551340.
    assert_eq!(kafka_partition(b"21", 7), 1_173_551_340 % 7);
    let s = h.stream("s", 7).await;
    let keys: Vec<String> = ["21", "foobar", "abc", "a-little-bit-long-string", "", "é"]
        .into_iter()
        .map(str::to_owned)
        .chain((0..30).map(|i| format!("user-{i}")))
        .collect();
    let inputs = keys
        .iter()
        .map(|k| EventInput {
            key: Some(k.clone()),
            ..input(json!({}))
        })
        .collect();
    let out = h.append_inputs(&s, inputs).await;
    let mut used = BTreeSet::new();
    for (key, event) in keys.iter().zip(&out) {
        assert_eq!(
            event.partition,
            kafka_partition(key.as_bytes(), 7),
            "key {key:?}"
        );
        assert_eq!(event.key.as_deref(), Some(key.as_str()));
        used.insert(event.partition);
    }
    assert!(used.len() >= 4, "keys spread over partitions: {used:?}");
    // An explicit partition wins over the key; no key and no partition → 0.
    let explicit = (kafka_partition(b"21", 7) + 1) % 7;
    let out = h
        .append_inputs(
            &s,
            vec![
                EventInput {
                    key: Some("21".into()),
                    partition: Some(explicit),
                    ..input(json!({}))
                },
                input(json!({})),
            ],
        )
        .await;
    assert_eq!((out[0].partition, out[1].partition), (explicit, 0));
}

pub async fn same_key_lands_in_one_partition_contiguously(h: &Harness) {
    let s = h.stream("s", 3).await;
    let keys: Vec<String> = (0..6).map(|i| format!("account-{i}")).collect();
    let mut appended = Vec::new();
    for round in 0..4 {
        if round % 2 == 0 {
            let batch = keys
                .iter()
                .map(|k| EventInput {
                    key: Some(k.clone()),
                    ..input(json!({ "round": round }))
                })
                .collect();
            appended.extend(h.append_inputs(&s, batch).await);
        } else {
            for k in keys.iter().rev() {
                let one = EventInput {
                    key: Some(k.clone()),
                    ..input(json!({ "round": round }))
                };
                appended.extend(h.append_inputs(&s, vec![one]).await);
            }
        }
    }
    let mut home: BTreeMap<String, u32> = BTreeMap::new();
    let mut per_partition: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for e in &appended {
        let key = e.key.clone().expect("key");
        let p = *home.entry(key.clone()).or_insert(e.partition);
        assert_eq!(e.partition, p, "key {key} moved partitions");
        per_partition.entry(p).or_default().push(e.sequence);
    }
    let watermarks = hw(h, &s).await;
    for (p, sequences) in &per_partition {
        let expected: Vec<u64> = (1..=sequences.len() as u64).collect();
        assert_eq!(sequences, &expected, "partition {p} is contiguous");
        assert_eq!(watermarks[*p as usize], sequences.len() as u64);
    }
    assert_eq!(watermarks.iter().sum::<u64>(), 24);
}

pub async fn per_partition_sequences_are_independent(h: &Harness) {
    let s = h.stream("s", 3).await;
    let two = h.append_to(&s, 2, 4).await;
    assert_eq!(seqs(&two), [1, 2, 3, 4]);
    assert!(two.iter().all(|e| e.partition == 2));
    let zero = h.append_to(&s, 0, 1).await;
    assert_eq!((zero[0].partition, zero[0].sequence), (0, 1));
    let mixed = h
        .append_inputs(
            &s,
            vec![
                EventInput {
                    partition: Some(2),
                    ..input(json!({}))
                },
                EventInput {
                    partition: Some(1),
                    ..input(json!({}))
                },
                EventInput {
                    partition: Some(0),
                    ..input(json!({}))
                },
                EventInput {
                    partition: Some(2),
                    ..input(json!({}))
                },
            ],
        )
        .await;
    let got: Vec<(u32, u64)> = mixed.iter().map(|e| (e.partition, e.sequence)).collect();
    assert_eq!(got, [(2, 5), (1, 1), (0, 2), (2, 6)]);
    assert_eq!(hw(h, &s).await, vec![2, 1, 6]);
    assert_eq!(seqs(&read(h, &s, 2, 0, 100).await), [1, 2, 3, 4, 5, 6]);
}

pub async fn high_watermarks_track_appends(h: &Harness) {
    let s = h.stream("s", 3).await;
    assert_eq!(hw(h, &s).await, vec![0, 0, 0]);
    h.append_to(&s, 1, 2).await;
    assert_eq!(hw(h, &s).await, vec![0, 2, 0]);
    let batch = [0, 2, 2, 1]
        .into_iter()
        .enumerate()
        .map(|(i, p)| EventInput {
            partition: Some(p),
            ..with_id(&format!("id-{i}"), json!({}))
        })
        .collect::<Vec<_>>();
    h.b().append(&s, batch).await.expect("append");
    assert_eq!(hw(h, &s).await, vec![1, 3, 2]);
    // Duplicates and refused batches leave them alone.
    h.b()
        .append(&s, vec![with_id("id-3", json!({}))])
        .await
        .expect("duplicate append");
    let refused = vec![
        input(json!({})),
        EventInput {
            partition: Some(3),
            ..input(json!({}))
        },
    ];
    assert_eq!(code(h.b().append(&s, refused).await), "invalid_partition");
    assert_eq!(hw(h, &s).await, vec![1, 3, 2]);
    let listed = h.b().list_streams().await.expect("list");
    assert_eq!(listed[0].high_watermarks, vec![1, 3, 2]);
}

// ---------------------------------------------------------------- read

pub async fn read_pages_by_sequence(h: &Harness) {
    let s = h.stream("s", 2).await;
    let written = h
        .append_inputs(
            &s,
            vec![
                typed("a", json!({})),
                typed("b", json!({})),
                typed("c", json!({})),
            ],
        )
        .await;
    let other = h.append_to(&s, 1, 1).await;
    let first = read(h, &s, 0, 0, 2).await;
    assert_eq!(first, written[..2].to_vec());
    let rest = read(h, &s, 0, 2, 10).await;
    assert_eq!(rest, written[2..].to_vec());
    assert_eq!(rest[0].event_type.as_deref(), Some("c"));
    assert_eq!(read(h, &s, 0, 3, 10).await, vec![]);
    assert_eq!(read(h, &s, 0, 100, 10).await, vec![]);
    assert_eq!(read(h, &s, 0, 1, 1).await, written[1..2].to_vec());
    assert_eq!(read(h, &s, 1, 0, 10).await, other, "one partition only");
}

pub async fn read_validates_limit_and_partition(h: &Harness) {
    let s = h.stream("s", 2).await;
    h.append_n(&s, 3).await;
    let req = |partition, limit| ReadRequest {
        stream: s.clone(),
        partition,
        after: 0,
        limit,
    };
    assert_eq!(code(h.b().read(req(0, 0)).await), "invalid");
    assert_eq!(code(h.b().read(req(0, 1001)).await), "invalid");
    assert_eq!(code(h.b().read(req(2, 10)).await), "invalid_partition");
    assert_eq!(code(h.b().read(req(99, 10)).await), "invalid_partition");
    assert_eq!(h.b().read(req(0, 1000)).await.expect("read").len(), 3);
    assert_eq!(h.b().read(req(1, 1)).await.expect("read"), vec![]);
}

pub async fn events_are_immutable_after_consumption(h: &Harness) {
    let s = h.stream("s", 1).await;
    let inputs = (0..3)
        .map(|i| EventInput {
            event_type: Some("curve_update".into()),
            metadata: obj(json!({"correlation_id": "abc", "i": i})),
            ..input(json!({"currency": "EUR", "price": i}))
        })
        .collect();
    let written = h.append_inputs(&s, inputs).await;
    let g = h.group(&s, "g").await;
    let g2 = h.group(&s, "g2").await;
    let leases = h.fetch(&s, &g, 10).await;
    assert_eq!(leases.len(), 3);
    h.ack(&leases[0]).await.expect("ack");
    h.nack(&leases[1], "retry", None).await.expect("nack");
    h.reject(&leases[2], "bad").await.expect("reject");
    h.clock.advance(1000);
    let again = h.fetch(&s, &g, 10).await;
    assert_eq!(again.len(), 1);
    assert_eq!(*again[0].event, written[1], "redelivered unchanged");
    h.ack(&again[0]).await.expect("ack");
    for lease in h.fetch(&s, &g2, 10).await {
        h.reject(&lease, "other group").await.expect("reject");
    }
    assert_eq!(read(h, &s, 0, 0, 10).await, written);
    let page = run(h, &s, &q(json!({"type": "curve_update"}))).await;
    assert_eq!(page.events, written);
    assert_eq!(run(h, &s, &q(json!({"correlation_id": "abc"}))).await, page);
}

pub async fn nested_payload_and_metadata_are_preserved(h: &Harness) {
    let s = h.stream("s", 1).await;
    let payload = json!({
        "type": "inner-type",
        "metadata": {"schema": "not-the-real-one"},
        "bag": {"n": 1, "list": [1, "two", {"three": [3.5, null, true]}, []], "empty": {}},
        "text": "€ ü 日本語 🚀 \"quoted\" \\ \n tab\t",
        "numbers": [0, -1, 2.5, -0.25, 2.718e10, 1e-7, 9007199254740993_i64,
                    i64::MAX, i64::MIN],
        "a.b": {"$ref": "#/x"},
        "flag": false, "nothing": null
    });
    let metadata = json!({
        "schema": "v1", "schema_version": 3, "correlation_id": "c-ü",
        "trace": {"spans": [{"id": 1, "tags": {"k": "v"}}]}
    });
    let inp = EventInput {
        metadata: obj(metadata.clone()),
        ..input(payload.clone())
    };
    // Numbers compare by value: PostgreSQL's jsonb keeps every value
    // exactly but writes an exponent out (1e-7 comes back as 0.0000001).
    let same = |stored: &JsonObject, sent: &Value| {
        let stored = Value::Object(stored.clone());
        assert!(json_eq(&stored, sent), "stored {stored}\n   sent {sent}");
    };
    let out = h.append_inputs(&s, vec![inp]).await;
    same(&out[0].payload, &payload);
    same(&out[0].metadata, &metadata);
    assert_eq!(
        out[0].event_type, None,
        "a payload field named type is just data"
    );
    let stored = read(h, &s, 0, 0, 10).await;
    same(&stored[0].payload, &payload);
    same(&stored[0].metadata, &metadata);
    let queried = run(h, &s, &q(json!({"schema": "v1", "payload.bag.n": 1}))).await;
    assert_eq!(queried.events, stored);
    let g = h.group(&s, "g").await;
    let leases = h.fetch(&s, &g, 10).await;
    assert_eq!(leases.len(), 1);
    assert_eq!(*leases[0].event, stored[0]);
}

// ---------------------------------------------------------------- query

pub async fn query_by_type_and_payload_field(h: &Harness) {
    let s = h.stream("s", 1).await;
    let written = h
        .append_inputs(
            &s,
            vec![
                typed("curve_update", json!({"currency": "EUR", "price": 1})),
                typed("curve_update", json!({"currency": "USD", "price": 2})),
                typed("other", json!({"currency": "EUR"})),
            ],
        )
        .await;
    let id = |i: usize| written[i].id.as_str().to_owned();
    let page = run(
        h,
        &s,
        &q(json!({"type": "curve_update", "currency": "EUR"})),
    )
    .await;
    assert_eq!(page.events, vec![written[0].clone()]);
    assert_eq!(page.next_cursor, None);
    let same = found(
        h,
        &s,
        json!({"type": "curve_update", "payload.currency": "EUR"}),
    )
    .await;
    assert_eq!(same, [id(0)]);
    assert_eq!(
        found(h, &s, json!({"type": "curve_update"})).await,
        [id(0), id(1)]
    );
    assert_eq!(
        found(h, &s, json!({"currency": "EUR"})).await,
        [id(0), id(2)]
    );
    assert_eq!(found(h, &s, json!({"price": 2})).await, [id(1)]);
    assert_eq!(
        found(h, &s, json!({"price": "2"})).await,
        Vec::<String>::new()
    );
    assert_eq!(
        found(h, &s, json!({"type": "nope"})).await,
        Vec::<String>::new()
    );
    assert_eq!(found(h, &s, json!({})).await, ids(&written));
}

pub async fn query_order_desc_with_limit(h: &Harness) {
    let s = h.stream("s", 1).await;
    let written = h.append_n(&s, 3).await;
    let desc = Query {
        order: OrderBy {
            field: OrderField::Sequence,
            dir: Direction::Desc,
        },
        limit: 1,
        ..Query::default()
    };
    let page = run(h, &s, &desc).await;
    assert_eq!(page.events, vec![written[2].clone()]);
    let cursor = page.next_cursor.expect("a full page has a cursor");
    let next = run_with_cursor(h, &s, &desc, &cursor)
        .await
        .expect("page 2");
    assert_eq!(next.events, vec![written[1].clone()]);
    let big = Query { limit: 10, ..desc };
    assert_eq!(seqs(&run(h, &s, &big).await.events), [3, 2, 1]);
    let asc = Query {
        limit: 1,
        ..Query::default()
    };
    assert_eq!(run(h, &s, &asc).await.events, vec![written[0].clone()]);
}

pub async fn query_sequence_bounds(h: &Harness) {
    let s = h.stream("s", 1).await;
    h.append_n(&s, 5).await;
    let bounded = |after: Option<u64>, until: Option<u64>| Query {
        after_sequence: after,
        until_sequence: until,
        ..q(json!({}))
    };
    let cases: [(Option<u64>, Option<u64>, &[u64]); 8] = [
        (Some(1), Some(3), &[2, 3]),
        (Some(1), Some(2), &[2]),
        (Some(3), None, &[4, 5]),
        (None, Some(2), &[1, 2]),
        (Some(3), Some(3), &[]),
        (Some(5), None, &[]),
        (None, Some(0), &[]),
        (Some(0), Some(99), &[1, 2, 3, 4, 5]),
    ];
    for (after, until, expected) in cases {
        let got = seqs(&run(h, &s, &bounded(after, until)).await.events);
        assert_eq!(got, expected, "after {after:?} until {until:?}");
    }
    let desc = Query {
        order: OrderBy {
            field: OrderField::Sequence,
            dir: Direction::Desc,
        },
        ..bounded(Some(1), Some(4))
    };
    assert_eq!(seqs(&run(h, &s, &desc).await.events), [4, 3, 2]);
}

pub async fn query_pages_with_cursor(h: &Harness) {
    let s = h.stream("s", 1).await;
    let written = h.append_n(&s, 5).await;
    let query = Query {
        limit: 2,
        ..Query::default()
    };
    let first = run(h, &s, &query).await;
    assert_eq!(first.events, written[0..2].to_vec());
    let c1 = first.next_cursor.expect("cursor after page 1");
    let second = run_with_cursor(h, &s, &query, &c1).await.expect("page 2");
    assert_eq!(second.events, written[2..4].to_vec());
    let c2 = second.next_cursor.expect("cursor after page 2");
    let third = run_with_cursor(h, &s, &query, &c2).await.expect("page 3");
    assert_eq!(third.events, written[4..].to_vec());
    assert_eq!(third.next_cursor, None);
    // A cursor can be used again (it is a position, not a session).
    let again = run_with_cursor(h, &s, &query, &c1)
        .await
        .expect("page 2 again");
    assert_eq!(again.events, second.events);
    // Events appended later show up on the page after the cursor.
    let late = h.append_n(&s, 1).await;
    let after = run_with_cursor(h, &s, &query, &c2)
        .await
        .expect("page 3 again");
    assert_eq!(after.events, vec![written[4].clone(), late[0].clone()]);
}

pub async fn query_paging_never_skips_or_repeats(h: &Harness) {
    for n in 0..=12 {
        let s = h.stream(&format!("s{n}"), 1).await;
        let written = h.append_n(&s, n).await;
        for size in 1..=5_u32 {
            for dir in [Direction::Asc, Direction::Desc] {
                let query = Query {
                    limit: size,
                    order: OrderBy {
                        field: OrderField::Sequence,
                        dir,
                    },
                    ..Query::default()
                };
                let pages = all_pages(h, &s, &query).await;
                let mut expected = ids(&written);
                if dir == Direction::Desc {
                    expected.reverse();
                }
                let got: Vec<String> = pages.iter().flat_map(|p| ids(p)).collect();
                assert_eq!(got, expected, "n {n}, page size {size}, {dir:?}");
                let want_pages = n / size as usize + 1;
                assert_eq!(pages.len(), want_pages, "n {n}, size {size}");
                if n > 0 && n % size as usize == 0 {
                    assert!(pages.last().expect("a page").is_empty());
                }
            }
        }
    }
}

pub async fn query_paging_across_partitions(h: &Harness) {
    let s = h.stream("s", 4).await;
    let inputs = (0..40)
        .map(|i| EventInput {
            key: Some(format!("key-{}", i % 13)),
            ..input(json!({ "i": i }))
        })
        .collect();
    let mut written = h.append_inputs(&s, inputs).await;
    let used: BTreeSet<u32> = written.iter().map(|e| e.partition).collect();
    assert!(used.len() >= 3, "keys spread over partitions: {used:?}");
    written.sort_by_key(|e| (e.sequence, e.partition));
    let query = Query {
        limit: 10,
        ..Query::default()
    };
    let pages = all_pages(h, &s, &query).await;
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, [10, 10, 10, 10, 0]);
    let got: Vec<Event> = pages.into_iter().flatten().collect();
    assert_eq!(ids(&got), ids(&written), "(sequence, partition) order");
    let once = run(h, &s, &q(json!({}))).await;
    assert_eq!(ids(&once.events), ids(&written));
    // Descending, odd page size: sequence desc, then partition asc.
    let desc = Query {
        limit: 7,
        order: OrderBy {
            field: OrderField::Sequence,
            dir: Direction::Desc,
        },
        ..Query::default()
    };
    written.sort_by_key(|e| (std::cmp::Reverse(e.sequence), e.partition));
    let got: Vec<Event> = all_pages(h, &s, &desc)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(ids(&got), ids(&written));
}

pub async fn query_by_lineage_metadata(h: &Harness) {
    let s = h.stream("s", 2).await;
    let meta = |corr: &str, cause: &str, producer: &str, schema: &str, version: u32| {
        obj(json!({
            "correlation_id": corr, "causation_id": cause, "producer": producer,
            "schema": schema, "schema_version": version
        }))
    };
    let inputs = vec![
        EventInput {
            id: Some(eid("e1")),
            metadata: meta("abc", "root", "pricing-service-v3", "curve", 1),
            ..input(json!({}))
        },
        EventInput {
            id: Some(eid("e2")),
            partition: Some(1),
            metadata: meta("def", "e1", "other", "curve", 2),
            ..input(json!({}))
        },
        EventInput {
            id: Some(eid("e3")),
            metadata: meta("abc", "e2", "pricing-service-v3", "quote", 1),
            ..input(json!({}))
        },
        // Lineage names read metadata, never the payload.
        with_id("e4", json!({"correlation_id": "abc", "producer": "other"})),
    ];
    h.append_inputs(&s, inputs).await;
    assert_eq!(
        found(h, &s, json!({"correlation_id": "abc"})).await,
        ["e1", "e3"]
    );
    assert_eq!(
        found(h, &s, json!({"producer": "pricing-service-v3"})).await,
        ["e1", "e3"]
    );
    assert_eq!(found(h, &s, json!({"producer": "other"})).await, ["e2"]);
    assert_eq!(found(h, &s, json!({"causation_id": "e1"})).await, ["e2"]);
    assert_eq!(
        found(h, &s, json!({"schema": "curve", "schema_version": 2})).await,
        ["e2"]
    );
    assert_eq!(
        found(h, &s, json!({"schema_version": 1})).await,
        ["e1", "e3"]
    );
    assert_eq!(
        found(h, &s, json!({"metadata.correlation_id": "def"})).await,
        ["e2"]
    );
    assert_eq!(
        found(h, &s, json!({"payload.correlation_id": "abc"})).await,
        ["e4"]
    );
    // Consuming them changes nothing.
    let g = h.group(&s, "g").await;
    for lease in h.fetch(&s, &g, 10).await {
        h.ack(&lease).await.expect("ack");
    }
    assert_eq!(h.lag(&s, &g).await.lag, 0);
    assert_eq!(
        found(h, &s, json!({"correlation_id": "abc"})).await,
        ["e1", "e3"]
    );
}

pub async fn query_time_range_is_inclusive(h: &Harness) {
    let s = h.stream("s", 1).await;
    let (t0, t1, t2) = (at(-5000), at(1000), at(2001));
    // Appended out of time order so time and sequence disagree.
    let inputs = [("e1", t1), ("e0", t0), ("e2", t2)]
        .into_iter()
        .map(|(id, t)| EventInput {
            timestamp: Some(t),
            ..with_id(id, json!({}))
        })
        .collect();
    h.append_inputs(&s, inputs).await;
    let window = |from: Option<Timestamp>, to: Option<Timestamp>| Query {
        from,
        to,
        ..q(json!({}))
    };
    let ms = |t: Timestamp, d: i64| Timestamp::from_millis(t.as_millis() + d);
    let cases: [(Option<Timestamp>, Option<Timestamp>, &[&str]); 9] = [
        (Some(t1), Some(t2), &["e1", "e2"]),
        (Some(t1), None, &["e1", "e2"]),
        (None, Some(t0), &["e0"]),
        (Some(ms(t1, 1)), None, &["e2"]),
        (None, Some(ms(t1, -1)), &["e0"]),
        (Some(t0), Some(t0), &["e0"]),
        (Some(ms(t0, 1)), Some(ms(t2, -1)), &["e1"]),
        (Some(ms(t2, 1)), None, &[]),
        (Some(t2), Some(t0), &[]),
    ];
    for (from, to, expected) in cases {
        let got = ids(&run(h, &s, &window(from, to)).await.events);
        assert_eq!(got, expected, "from {from:?} to {to:?}");
    }
}

pub async fn query_filters_on_key_partition_id_and_paths(h: &Harness) {
    let s = h.stream("s", 2).await;
    let event = |id: &str, key: &str, partition: u32, payload: Value, meta: Value| EventInput {
        id: Some(eid(id)),
        key: Some(key.to_owned()),
        partition: Some(partition),
        metadata: obj(meta),
        ..input(payload)
    };
    h.append_inputs(
        &s,
        vec![
            event(
                "a",
                "alpha",
                0,
                json!({"a": {"b": 1}}),
                json!({"x": {"y": "p"}}),
            ),
            event(
                "b",
                "beta",
                1,
                json!({"a": {"b": 2}}),
                json!({"x": {"y": "q"}}),
            ),
            event(
                "c",
                "alpha",
                1,
                json!({"a": {"b": 1, "c": true}}),
                json!({"x": {"y": "q"}}),
            ),
        ],
    )
    .await;
    let none: &[&str] = &[];
    let cases: [(Value, &[&str]); 11] = [
        (json!({"key": "alpha"}), &["a", "c"]),
        (json!({"partition": 1}), &["b", "c"]),
        (json!({"partition": 0}), &["a"]),
        (json!({"id": "b"}), &["b"]),
        (json!({"payload.a.b": 1}), &["a", "c"]),
        (json!({"metadata.x.y": "q"}), &["b", "c"]),
        (json!({"key": "alpha", "partition": 1}), &["c"]),
        (json!({"payload.a": {"b": 2}}), &["b"]),
        (json!({"a": {"b": 1}}), &["a"]),
        (json!({"payload.a.b.c": 1}), none),
        (json!({"key": "gamma"}), none),
    ];
    for (filter, expected) in cases {
        assert_eq!(found(h, &s, filter.clone()).await, expected, "{filter}");
    }
}

pub async fn query_operators(h: &Harness) {
    let s = h.stream("s", 1).await;
    let inputs = vec![
        with_id("e1", json!({"n": 1, "s": "apple", "z": null})),
        with_id("e2", json!({"n": 2.5, "s": "banana"})),
        with_id("e3", json!({"n": 10, "s": "cherry", "nested": {"v": 3}})),
        with_id("e4", json!({"n": "5", "s": 7})),
        with_id("e5", json!({})),
    ];
    h.append_inputs(&s, inputs).await;
    let none: &[&str] = &[];
    let cases: [(Value, &[&str]); 22] = [
        (json!({"n": {"$in": [1, 10]}}), &["e1", "e3"]),
        (json!({"n": {"$in": [1.0]}}), &["e1"]),
        (json!({"n": {"$in": []}}), none),
        (json!({"s": {"$in": ["banana", 7]}}), &["e2", "e4"]),
        (json!({"n": 1.0}), &["e1"]),
        (json!({"n": {"$eq": 10}}), &["e3"]),
        (json!({"n": {"$gt": 1}}), &["e2", "e3"]),
        (json!({"n": {"$gt": 1.0}}), &["e2", "e3"]),
        (json!({"n": {"$gte": 1}}), &["e1", "e2", "e3"]),
        (json!({"n": {"$gte": 1.0}}), &["e1", "e2", "e3"]),
        (json!({"n": {"$lt": 2.5}}), &["e1"]),
        (json!({"n": {"$lte": 2.5}}), &["e1", "e2"]),
        (json!({"n": {"$gt": 1, "$lt": 10}}), &["e2"]),
        (json!({"n": {"$gt": "0"}}), &["e4"]),
        (json!({"s": {"$gt": "banana"}}), &["e3"]),
        (json!({"s": {"$gte": "banana"}}), &["e2", "e3"]),
        (json!({"s": {"$lt": "b"}}), &["e1"]),
        (json!({"s": {"$lt": 100}}), &["e4"]),
        (json!({"z": {"$exists": true}}), &["e1"]),
        (json!({"z": {"$exists": false}}), &["e2", "e3", "e4", "e5"]),
        (json!({"payload.nested.v": {"$exists": true}}), &["e3"]),
        (
            json!({"n": {"$exists": false}, "s": {"$exists": false}}),
            &["e5"],
        ),
    ];
    for (filter, expected) in cases {
        assert_eq!(found(h, &s, filter.clone()).await, expected, "{filter}");
    }
}

pub async fn query_order_by_timestamp_pages(h: &Harness) {
    let s = h.stream("s", 2).await;
    let layout: [(u32, &[i64]); 2] = [(0, &[30, 10, 20, 10, 40]), (1, &[10, 30, 30, 5])];
    for (p, times) in layout {
        let inputs = times
            .iter()
            .enumerate()
            .map(|(i, t)| EventInput {
                partition: Some(p),
                timestamp: Some(at(*t)),
                ..with_id(&format!("p{p}s{}", i + 1), json!({}))
            })
            .collect();
        h.append_inputs(&s, inputs).await;
    }
    let asc_expected = [
        "p1s4", "p0s2", "p0s4", "p1s1", "p0s3", "p0s1", "p1s2", "p1s3", "p0s5",
    ];
    // Descending: timestamp desc, ties by partition asc, then sequence desc.
    let desc_expected = [
        "p0s5", "p0s1", "p1s3", "p1s2", "p0s3", "p0s4", "p0s2", "p1s1", "p1s4",
    ];
    for (dir, expected) in [
        (Direction::Asc, asc_expected),
        (Direction::Desc, desc_expected),
    ] {
        for size in 1..=4 {
            let query = Query {
                order: OrderBy {
                    field: OrderField::Timestamp,
                    dir,
                },
                limit: size,
                ..Query::default()
            };
            let pages = all_pages(h, &s, &query).await;
            let got: Vec<String> = pages.iter().flat_map(|p| ids(p)).collect();
            assert_eq!(got, expected, "{dir:?}, page size {size}");
        }
    }
    let window = Query {
        order: OrderBy {
            field: OrderField::Timestamp,
            dir: Direction::Asc,
        },
        from: Some(at(10)),
        to: Some(at(30)),
        limit: 3,
        ..Query::default()
    };
    let got: Vec<String> = all_pages(h, &s, &window)
        .await
        .iter()
        .flat_map(|p| ids(p))
        .collect();
    assert_eq!(got, asc_expected[1..8]);
}

pub async fn query_refuses_bad_limit_and_cursor(h: &Harness) {
    let s = h.stream("s", 2).await;
    h.append_n(&s, 5).await;
    for limit in [0, 1001] {
        let query = Query {
            limit,
            ..Query::default()
        };
        assert_eq!(code(h.b().query(&s, &query).await), "invalid", "{limit}");
    }
    let max = Query {
        limit: 1000,
        ..Query::default()
    };
    assert_eq!(run(h, &s, &max).await.events.len(), 5);
    let seq_asc = Query {
        limit: 2,
        ..Query::default()
    };
    let cursor = run(h, &s, &seq_asc).await.next_cursor.expect("cursor");
    use base64::Engine as _;
    let b64 = |text: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text);
    let garbage = [
        "garbage!!".to_owned(),
        String::new(),
        b64("c1|sa|0:x:1"),
        b64("hello"),
        cursor[1..].to_owned(),
    ];
    for garbage in &garbage {
        let r = run_with_cursor(h, &s, &seq_asc, garbage).await;
        assert_eq!(code(r), "invalid", "{garbage:?}");
    }
    for (field, dir) in [
        (OrderField::Timestamp, Direction::Asc),
        (OrderField::Sequence, Direction::Desc),
    ] {
        let other = Query {
            order: OrderBy { field, dir },
            ..seq_asc.clone()
        };
        let r = run_with_cursor(h, &s, &other, &cursor).await;
        assert_eq!(code(r), "invalid", "{field:?} {dir:?}");
    }
    let ok = run_with_cursor(h, &s, &seq_asc, &cursor).await.expect("ok");
    assert_eq!(ok.events.len(), 2);
}

pub async fn query_unknown_stream_is_stream_not_found(h: &Harness) {
    let known = h.stream("Orders", 1).await;
    h.append_n(&known, 2).await;
    for name in ["nope", "orders", "Orders.x"] {
        let r = h.b().query(&sn(name), &q(json!({}))).await;
        assert_eq!(code(r), "stream_not_found", "{name}");
        let filtered = h.b().query(&sn(name), &q(json!({"type": "x"}))).await;
        assert_eq!(code(filtered), "stream_not_found", "{name}");
    }
    assert_eq!(run(h, &known, &q(json!({}))).await.events.len(), 2);
}

pub async fn query_does_not_touch_group_state(h: &Harness) {
    let s = h.stream("s", 2).await;
    let written = h.append_to(&s, 0, 3).await;
    h.append_to(&s, 1, 3).await;
    let g = h.group(&s, "g").await;
    let fresh = h.group(&s, "fresh").await;
    let held = h.fetch(&s, &g, 2).await;
    h.ack(&held[0]).await.expect("ack");
    let lag_before = h.lag(&s, &g).await;
    let info_before = h.b().group_info(&s, &g).await.expect("group info");
    let fresh_before = h.lag(&s, &fresh).await;
    let queries = [
        q(json!({})),
        q(json!({"n": 1})),
        Query {
            limit: 1,
            ..Query::default()
        },
        Query {
            order: OrderBy {
                field: OrderField::Timestamp,
                dir: Direction::Desc,
            },
            limit: 2,
            ..Query::default()
        },
    ];
    for query in &queries {
        all_pages(h, &s, query).await;
    }
    assert_eq!(h.lag(&s, &g).await, lag_before);
    assert_eq!(h.b().group_info(&s, &g).await.expect("info"), info_before);
    assert_eq!(h.lag(&s, &fresh).await, fresh_before);
    assert_eq!(fresh_before.pending, 6);
    // The held lease is still valid; fetch hands out exactly the rest.
    h.ack(&held[1]).await.expect("ack the held lease");
    let rest = h.fetch(&s, &g, 10).await;
    let held_pos: BTreeSet<(u32, u64)> = held
        .iter()
        .map(|l| (l.event.partition, l.event.sequence))
        .collect();
    assert_eq!(held_pos.len(), 2);
    let mut got: Vec<(u32, u64, u32)> = rest
        .iter()
        .map(|l| (l.event.partition, l.event.sequence, l.attempt))
        .collect();
    got.sort_unstable();
    let expected: Vec<(u32, u64, u32)> = (0..2)
        .flat_map(|p| (1..=3).map(move |sq| (p, sq, 1)))
        .filter(|(p, sq, _)| !held_pos.contains(&(*p, *sq)))
        .collect();
    assert_eq!(
        got, expected,
        "exactly the events nobody holds, first attempts"
    );
    assert_eq!(h.fetch(&s, &fresh, 10).await.len(), 6);
    assert_eq!(read(h, &s, 0, 0, 10).await, written);
}
