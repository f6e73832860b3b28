//! The MongoDB query translation: the documents it builds, and, against a
//! real server (`TEST_MONGODB_URL`), that what they select is a superset of
//! what `Query::matches` accepts, in `OrderBy::compare`'s order.

use std::collections::{BTreeMap, HashSet};

use futures::TryStreamExt as _;
use mongodb::bson::{Bson, Document, doc};
use serde_json::{Value, json};

use super::{filter, sort};
use crate::json::exact_doc;
use rheo_core::backend::conformance::service_url;
use rheo_core::model::{
    Direction, Event, EventId, JsonObject, OrderBy, OrderField, Position, Query, QueryCursor,
    StreamName, Timestamp, parse_where,
};

const T0: i64 = 1_767_225_600_000;

fn stream() -> StreamName {
    StreamName::parse("orders").unwrap()
}

fn order(field: OrderField, dir: Direction) -> OrderBy {
    OrderBy { field, dir }
}

/// A query with the filters of a `where` object.
fn query(where_: Value) -> Query {
    Query {
        filters: parse_where(&where_).unwrap(),
        ..Query::default()
    }
}

/// The clauses after the stream's of the filter for `q`.
fn clauses(q: &Query, with_cursor: bool) -> Vec<Document> {
    let built = filter(&stream(), q, with_cursor);
    assert_eq!(built.len(), 1, "{built}");
    let all: Vec<Document> = built
        .get_array("$and")
        .unwrap()
        .iter()
        .map(|c| c.as_document().unwrap().clone())
        .collect();
    assert_eq!(all[0], doc! { "s": "orders" });
    all[1..].to_vec()
}

/// The same clauses in any order (`where` objects may or may not keep
/// their key order, depending on serde_json's features).
fn assert_same<const N: usize>(got: Vec<Document>, want: [Document; N]) {
    let text = |list: &[Document]| {
        let mut list: Vec<String> = list.iter().map(Document::to_string).collect();
        list.sort();
        list
    };
    assert_eq!(text(&got), text(&want));
}

/// `{$or: [{raw: true}, test]}`: a payload or metadata condition.
fn body(test: Document) -> Document {
    doc! { "$or": [{ "raw": true }, test] }
}

#[test]
fn a_bare_query_selects_the_stream() {
    assert_eq!(
        filter(&stream(), &Query::default(), true),
        doc! { "$and": [{ "s": "orders" }] }
    );
}

#[test]
fn bounds_are_inclusive_on_time_and_half_open_on_sequence() {
    let q = Query {
        from: Some(Timestamp::from_millis(T0)),
        to: Some(Timestamp::from_millis(T0 + 5)),
        after_sequence: Some(3),
        until_sequence: Some(9),
        ..Query::default()
    };
    assert_eq!(
        clauses(&q, true),
        [
            doc! { "ts": { "$gte": T0 } },
            doc! { "ts": { "$lte": T0 + 5 } },
            doc! { "q": { "$gt": 3_i64 } },
            doc! { "q": { "$lte": 9_i64 } },
        ]
    );
    let huge = Query {
        after_sequence: Some(u64::MAX),
        ..Query::default()
    };
    assert_eq!(clauses(&huge, true), [doc! { "q": { "$gt": i64::MAX } }]);
}

#[test]
fn event_fields_are_top_level_and_never_raw() {
    let q = query(json!({
        "id": "e1",
        "type": "order.placed",
        "key": {"$in": ["k1", ""]},
        "partition": {"$gte": 1},
    }));
    assert_same(
        clauses(&q, true),
        [
            doc! { "id": "e1" },
            doc! { "key": { "$in": ["k1", ""] } },
            doc! { "p": { "$gte": 1_i64 } },
            doc! { "type": "order.placed" },
        ],
    );
}

#[test]
fn body_paths_resolve_like_field_ref_and_let_raw_events_through() {
    let q = query(json!({
        "total": 5,
        "payload.a.b": "x",
        "correlation_id": "c1",
        "metadata.trace.span": {"$lt": 2.5},
    }));
    assert_same(
        clauses(&q, true),
        [
            body(doc! { "metadata.correlation_id": "c1" }),
            body(doc! { "metadata.trace.span": { "$lt": 2.5 } }),
            body(doc! { "payload.a.b": "x" }),
            body(doc! { "payload.total": 5_i64 }),
        ],
    );
}

#[test]
fn scalar_conditions_translate() {
    let cases = [
        (json!({"f": null}), doc! { "payload.f": Bson::Null }),
        (json!({"f": true}), doc! { "payload.f": true }),
        (json!({"f": ""}), doc! { "payload.f": "" }),
        (json!({"f": -1.5}), doc! { "payload.f": -1.5 }),
        (json!({"f": {"$eq": "$not"}}), doc! { "payload.f": "$not" }),
        (
            json!({"f": {"$in": [1, "a", null, false, 0.5]}}),
            doc! { "payload.f": { "$in": [1_i64, "a", Bson::Null, false, 0.5] } },
        ),
        (
            json!({"f": {"$in": []}}),
            doc! { "payload.f": { "$in": [] } },
        ),
        (
            json!({"f": {"$gt": 1}}),
            doc! { "payload.f": { "$gt": 1_i64 } },
        ),
        (
            json!({"f": {"$gte": "b"}}),
            doc! { "payload.f": { "$gte": "b" } },
        ),
        (
            json!({"f": {"$lt": -7}}),
            doc! { "payload.f": { "$lt": -7_i64 } },
        ),
        (
            json!({"f": {"$lte": 0.25}}),
            doc! { "payload.f": { "$lte": 0.25 } },
        ),
        (
            json!({"f": {"$exists": true}}),
            doc! { "payload.f": { "$exists": true } },
        ),
        (
            json!({"f": 9_007_199_254_740_991_i64}),
            doc! { "payload.f": 9_007_199_254_740_991_i64 },
        ),
    ];
    for (where_, want) in cases {
        assert_eq!(
            clauses(&query(where_.clone()), true),
            [body(want)],
            "{where_}"
        );
    }
}

#[test]
fn conditions_mongodb_would_judge_differently_are_dropped() {
    let big: Value = serde_json::from_str(r#"{"f": 9007199254740992.0}"#).unwrap();
    let not_exact: Value = serde_json::from_str(r#"{"f": {"$gt": 1e2}}"#).unwrap();
    let past_u64: Value = serde_json::from_str(r#"{"f": 18446744073709551617}"#).unwrap();
    for where_ in [
        json!({"f": [1, 2]}),
        json!({"f": {"x": 1}}),
        json!({"f": {"$eq": {"$gt": 1}}}),
        json!({"f": {"$in": [1, [1]]}}),
        json!({"f": {"$in": [{"x": 1}]}}),
        json!({"f": {"$exists": false}}),
        json!({"type": {"$exists": false}}),
        json!({"f": 9_007_199_254_740_992_i64}),
        json!({"f": {"$lt": -9_007_199_254_740_993_i64}}),
        json!({"f": {"$in": ["a", 9_223_372_036_854_775_807_i64]}}),
        big,
        not_exact,
        past_u64,
        // Segments MongoDB would read as a path or an operator.
        json!({"a.b": 1}),
        json!({"$where": "sleep(1000)"}),
        json!({"payload.a.$gt": 1}),
        json!({"metadata.$x": {"$exists": true}}),
        json!({"payload.a\u{0}b": 1}),
    ] {
        assert_eq!(clauses(&query(where_.clone()), true), [], "{where_}");
    }
}

#[test]
fn the_cursor_applies_only_when_asked() {
    let mut q = Query {
        cursor: Some(QueryCursor {
            order: OrderBy::default(),
            positions: BTreeMap::from([(
                0,
                Position {
                    timestamp: 0,
                    sequence: 4,
                },
            )]),
        }),
        ..Query::default()
    };
    assert_eq!(clauses(&q, false), []);
    assert_eq!(
        clauses(&q, true),
        [doc! { "$or": [
            { "p": 0_i64, "q": { "$gt": 4_i64 } },
            { "p": { "$nin": [0_i64] } },
        ] }]
    );
    q.cursor.as_mut().unwrap().positions.clear();
    assert_eq!(
        clauses(&q, true),
        [doc! { "$or": [{ "p": { "$nin": [] } }] }]
    );
}

#[test]
fn cursor_positions_follow_is_after() {
    let positions = BTreeMap::from([
        (
            0,
            Position {
                timestamp: 0,
                sequence: 7,
            },
        ),
        (
            2,
            Position {
                timestamp: 0,
                sequence: 3,
            },
        ),
    ]);
    let timed = BTreeMap::from([(
        1,
        Position {
            timestamp: T0,
            sequence: 5,
        },
    )]);
    let cases = [
        (
            order(OrderField::Sequence, Direction::Asc),
            positions.clone(),
            doc! { "$or": [
                { "p": 0_i64, "q": { "$gt": 7_i64 } },
                { "p": 2_i64, "q": { "$gt": 3_i64 } },
                { "p": { "$nin": [0_i64, 2_i64] } },
            ] },
        ),
        (
            order(OrderField::Sequence, Direction::Desc),
            positions,
            doc! { "$or": [
                { "p": 0_i64, "q": { "$lt": 7_i64 } },
                { "p": 2_i64, "q": { "$lt": 3_i64 } },
                { "p": { "$nin": [0_i64, 2_i64] } },
            ] },
        ),
        (
            order(OrderField::Timestamp, Direction::Asc),
            timed.clone(),
            doc! { "$or": [
                { "p": 1_i64, "$or": [
                    { "ts": { "$gt": T0 } },
                    { "ts": T0, "q": { "$gt": 5_i64 } },
                ] },
                { "p": { "$nin": [1_i64] } },
            ] },
        ),
        (
            order(OrderField::Timestamp, Direction::Desc),
            timed,
            doc! { "$or": [
                { "p": 1_i64, "$or": [
                    { "ts": { "$lt": T0 } },
                    { "ts": T0, "q": { "$lt": 5_i64 } },
                ] },
                { "p": { "$nin": [1_i64] } },
            ] },
        ),
        // A sequence cursor with a timestamp was altered: its whole
        // partition is selected, and Query::matches decides.
        (
            order(OrderField::Sequence, Direction::Asc),
            BTreeMap::from([(
                3,
                Position {
                    timestamp: 9,
                    sequence: 1,
                },
            )]),
            doc! { "$or": [{ "p": 3_i64 }, { "p": { "$nin": [3_i64] } }] },
        ),
    ];
    for (order, positions, want) in cases {
        let q = Query {
            order,
            cursor: Some(QueryCursor { order, positions }),
            ..Query::default()
        };
        assert_eq!(clauses(&q, true), [want], "{order:?}");
    }
}

#[test]
fn sorts_follow_compare_key_by_key() {
    let keys = |o: OrderBy| -> Vec<(String, Bson)> { sort(o).into_iter().collect() };
    let pairs = |list: &[(&str, i32)]| -> Vec<(String, Bson)> {
        list.iter()
            .map(|&(k, v)| (k.to_owned(), Bson::Int32(v)))
            .collect()
    };
    use Direction::{Asc, Desc};
    use OrderField::{Sequence, Timestamp as Ts};
    assert_eq!(keys(order(Sequence, Asc)), pairs(&[("q", 1), ("p", 1)]));
    assert_eq!(keys(order(Sequence, Desc)), pairs(&[("q", -1), ("p", 1)]));
    assert_eq!(
        keys(order(Ts, Asc)),
        pairs(&[("ts", 1), ("p", 1), ("q", 1)])
    );
    assert_eq!(
        keys(order(Ts, Desc)),
        pairs(&[("ts", -1), ("p", 1), ("q", -1)])
    );
}

// ---------------------------------------------------------------------------
// Against a real server.

/// Payloads, as JSON text so numbers keep their digits. Some are not exact
/// in BSON (stored `raw`): a number past i64, `1e2`, keys with `.` or `$`.
const PAYLOADS: [&str; 20] = [
    r#"{"n": 1, "name": "apple", "a": {"b": 1}}"#,
    r#"{"n": 1.0, "name": "Banana", "a": [{"b": 1}]}"#,
    r#"{"n": 1.5, "name": "é", "a": {"b": [1, 2]}}"#,
    r#"{"n": "5", "name": "", "a": {"b": null}}"#,
    r#"{"n": [1, 2, 3], "name": "banana"}"#,
    r#"{"n": null, "a": {"c": 1}}"#,
    r#"{"n": true, "name": "apple pie"}"#,
    r#"{"n": {"x": 1, "y": 2}, "o": {"x": 1, "y": 2}}"#,
    r#"{"n": 7, "o": {"y": 2, "x": 1}}"#,
    r#"{"n": -3, "big": 9007199254740993}"#,
    r#"{"n": 5, "big": 9007199254740992.0}"#,
    r#"{"n": 5.5, "big": 18446744073709551617}"#,
    r#"{"n": 100, "big": 1e2}"#,
    r#"{"a.b": 1, "n": 2}"#,
    r#"{"$x": 1, "n": 3}"#,
    r#"{}"#,
    r#"{"n": 0.1, "tags": ["x", "y"]}"#,
    r#"{"n": 9223372036854775807, "name": "zeta"}"#,
    r#"{"n": "apple", "a": {"b": {"c": 1}}}"#,
    r#"{"n": -0.0, "big": -9007199254740993}"#,
];

const METADATA: [&str; 7] = [
    r#"{}"#,
    r#"{"correlation_id": "c1"}"#,
    r#"{"correlation_id": "c2", "nested": {"level": 2}}"#,
    r#"{"correlation_id": ["c1"]}"#,
    r#"{"nested": {"level": 2.0}, "schema_version": 3}"#,
    r#"{"nested": [{"level": 2}]}"#,
    r#"{"correlation_id": "c1", "odd.key": true}"#,
];

fn object(text: &str) -> JsonObject {
    serde_json::from_str(text).expect("fixture JSON is an object")
}

/// `count` events of `stream` over three partitions, with ties and
/// reversals of timestamps within and across partitions.
fn fixture(stream: &StreamName, count: usize) -> Vec<Event> {
    let mut next = [0u64; 3];
    (0..count)
        .map(|i| {
            let partition = i % 3;
            next[partition] += 1;
            Event {
                id: EventId::parse(format!("{stream}-{i:02}")).unwrap(),
                stream: stream.clone(),
                partition: partition as u32,
                sequence: next[partition],
                key: [Some("k1"), None, Some("k2"), Some("")][i % 4].map(str::to_owned),
                event_type: [Some("order.placed"), Some("order.paid"), None][(i / 3) % 3]
                    .map(str::to_owned),
                timestamp: Timestamp::from_millis(T0 + ((i * 7) % 13) as i64 * 1000),
                payload: object(PAYLOADS[i % PAYLOADS.len()]),
                metadata: object(METADATA[i % METADATA.len()]),
            }
        })
        .collect()
}

/// The event as the backend stores it (`mod.rs` layout).
fn stored(event: &Event) -> Document {
    let mut d = doc! {
        "s": event.stream.as_str(),
        "p": i32::try_from(event.partition).unwrap(),
        "q": i64::try_from(event.sequence).unwrap(),
        "id": event.id.as_str(),
        "ts": event.timestamp.as_millis(),
    };
    if let Some(t) = &event.event_type {
        d.insert("type", t.as_str());
    }
    if let Some(k) = &event.key {
        d.insert("key", k.as_str());
    }
    match (exact_doc(&event.payload), exact_doc(&event.metadata)) {
        (Some(payload), Some(metadata)) => {
            d.insert("payload", payload);
            d.insert("metadata", metadata);
        }
        _ => {
            d.insert("raw", true);
        }
    }
    d.insert("body", serde_json::to_string(event).unwrap());
    d
}

/// Which events a case's filter may select beyond what `matches` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Extra {
    /// None: the translation is exact.
    None,
    /// Only raw events (those MongoDB cannot look into).
    Raw,
    /// Any (a condition was dropped, or MongoDB's matching is wider).
    Any,
}

struct Case {
    name: &'static str,
    query: Query,
    extra: Extra,
}

fn case(name: &'static str, where_: Value, extra: Extra) -> Case {
    Case {
        name,
        query: query(where_),
        extra,
    }
}

fn number_case(name: &'static str, where_: &str, extra: Extra) -> Case {
    case(name, serde_json::from_str(where_).unwrap(), extra)
}

fn ordered(mut c: Case, field: OrderField, dir: Direction) -> Case {
    c.query.order = order(field, dir);
    c
}

/// `c` continued after a page of `page` events of its own results.
fn after_page(mut c: Case, events: &[Event], page: usize) -> Case {
    let mut first = c.query.clone();
    first.limit = u32::try_from(page).unwrap();
    let mut matched: Vec<Event> = events
        .iter()
        .filter(|e| first.matches(e))
        .cloned()
        .collect();
    matched.sort_by(|a, b| first.order.compare(a, b));
    matched.truncate(page);
    let cursor = first.page(matched).next_cursor.expect("a full page");
    c.query.cursor = Some(QueryCursor::decode(&cursor, c.query.order).unwrap());
    c
}

fn cases(events: &[Event]) -> Vec<Case> {
    use Direction::{Asc, Desc};
    use Extra::{Any, None, Raw};
    use OrderField::{Sequence, Timestamp as Ts};
    let mut cases = vec![
        case("everything", json!({}), None),
        case("type", json!({"type": "order.placed"}), None),
        case(
            "type null (never present as null)",
            json!({"type": null}),
            Any,
        ),
        case("type exists", json!({"type": {"$exists": true}}), None),
        case("type missing", json!({"type": {"$exists": false}}), Any),
        case("key in", json!({"key": {"$in": ["k1", ""]}}), None),
        case("key null", json!({"key": null}), Any),
        case("partition", json!({"partition": 1}), None),
        case(
            "partition range",
            json!({"partition": {"$gte": 1, "$lt": 1.5}}),
            None,
        ),
        case("id", json!({"id": "orders-07"}), None),
        case(
            "n = 1 (1.0 too; MongoDB adds [1,2,3])",
            json!({"n": 1}),
            Any,
        ),
        case("n = 1.5", json!({"n": 1.5}), Raw),
        case("n = 0 (-0.0 too)", json!({"n": 0}), Raw),
        case("n in (1, 5]", json!({"n": {"$gt": 1, "$lte": 5}}), Any),
        case(
            "n in [-3, 0.5)",
            json!({"n": {"$gte": -3, "$lt": 0.5}}),
            Raw,
        ),
        case("n > \"a\"", json!({"n": {"$gt": "a"}}), Raw),
        case(
            "name in [B, b)",
            json!({"name": {"$gte": "B", "$lt": "b"}}),
            Raw,
        ),
        case("name > z (bytes)", json!({"name": {"$gt": "z"}}), Raw),
        case("name = \"\"", json!({"name": ""}), Raw),
        case("n null (MongoDB adds missing)", json!({"n": null}), Any),
        case("n true", json!({"n": true}), Raw),
        case("n array (dropped)", json!({"n": [1, 2, 3]}), Any),
        case(
            "o object in other key order (dropped)",
            json!({"o": {"y": 2, "x": 1}}),
            Any,
        ),
        case(
            "n in scalars and null",
            json!({"n": {"$in": [1, "5", true, null]}}),
            Any,
        ),
        case("n in two", json!({"n": {"$in": [1.5, "apple"]}}), Raw),
        case(
            "n in with an array (dropped)",
            json!({"n": {"$in": [[1, 2, 3], 7]}}),
            Any,
        ),
        case("n exists", json!({"n": {"$exists": true}}), Raw),
        case("n missing (dropped)", json!({"n": {"$exists": false}}), Any),
        case(
            "a.b = 1 (MongoDB adds arrays)",
            json!({"payload.a.b": 1}),
            Any,
        ),
        case("a.b null", json!({"payload.a.b": null}), Any),
        case("a.b.c = 1", json!({"payload.a.b.c": 1}), Raw),
        case(
            "a.b missing (dropped)",
            json!({"payload.a.b": {"$exists": false}}),
            Any,
        ),
        number_case(
            "big = 2^53 + 1 (dropped)",
            r#"{"big": 9007199254740993}"#,
            Any,
        ),
        number_case(
            "big <= 2^53 as a double (dropped)",
            r#"{"big": {"$lte": 9007199254740992.0}}"#,
            Any,
        ),
        number_case(
            "big > -2^53 - 2 (dropped)",
            r#"{"big": {"$gt": -9007199254740995}}"#,
            Any,
        ),
        number_case(
            "big > u64::MAX (dropped)",
            r#"{"big": {"$gt": 18446744073709551615}}"#,
            Any,
        ),
        number_case(
            "n = i64::MAX (dropped)",
            r#"{"n": 9223372036854775807}"#,
            Any,
        ),
        number_case("n = 1e2 (dropped)", r#"{"n": 1e2}"#, Any),
        case("bare key a.b (dropped)", json!({"a.b": 1}), Any),
        case("$x (dropped)", json!({"payload.$x": 1}), Any),
        case(
            "correlation_id (MongoDB adds arrays)",
            json!({"correlation_id": "c1"}),
            Any,
        ),
        case(
            "metadata.nested.level",
            json!({"metadata.nested.level": 2}),
            Any,
        ),
        case(
            "schema_version < 4",
            json!({"schema_version": {"$lt": 4}}),
            Raw,
        ),
        case(
            "tags = x (MongoDB matches the array)",
            json!({"tags": "x"}),
            Any,
        ),
        ordered(
            case("paid by sequence desc", json!({"type": "order.paid"}), None),
            Sequence,
            Desc,
        ),
        ordered(case("all by timestamp asc", json!({}), None), Ts, Asc),
        ordered(case("all by timestamp desc", json!({}), None), Ts, Desc),
        ordered(
            case(
                "a mix by timestamp desc",
                json!({"type": "order.paid", "n": {"$gte": 1}, "partition": {"$in": [0, 2]}}),
                Any,
            ),
            Ts,
            Desc,
        ),
    ];
    let mut bounded = case("bounds", json!({}), None);
    bounded.query.from = Some(Timestamp::from_millis(T0 + 3000));
    bounded.query.to = Some(Timestamp::from_millis(T0 + 9000));
    bounded.query.after_sequence = Some(2);
    bounded.query.until_sequence = Some(11);
    cases.push(ordered(bounded, Ts, Asc));
    for (field, dir) in [(Sequence, Asc), (Sequence, Desc), (Ts, Asc), (Ts, Desc)] {
        for page in [2, 7] {
            let c = ordered(case("cursor", json!({}), None), field, dir);
            cases.push(after_page(c, events, page));
        }
        let c = ordered(
            case("cursor, filtered", json!({"n": {"$gte": 1}}), Any),
            field,
            dir,
        );
        cases.push(after_page(c, events, 3));
    }
    let mut altered = case("altered sequence cursor", json!({}), Any);
    altered.query.cursor = Some(QueryCursor {
        order: OrderBy::default(),
        positions: BTreeMap::from([(
            1,
            Position {
                timestamp: 5,
                sequence: 2,
            },
        )]),
    });
    cases.push(altered);
    cases
}

#[tokio::test]
async fn mongodb_selects_a_superset_in_page_order() {
    let Some(url) = service_url("TEST_MONGODB_URL", "mongodb") else {
        return;
    };
    let client = mongodb::Client::with_uri_str(&url)
        .await
        .expect("connect to TEST_MONGODB_URL");
    let name = format!("rheo_t_{:016x}", rand::random::<u64>());
    // Dropped at the end, passed or failed.
    let _janitor = crate::tests::janitor(&url, &name);
    let db = client.database(&name);
    let coll = db.collection::<Document>("rheo_events");

    let events = fixture(&stream(), 42);
    let other = fixture(&StreamName::parse("other").unwrap(), 9);
    let raw: HashSet<String> = events
        .iter()
        .map(stored)
        .filter(|d| d.contains_key("raw"))
        .map(|d| d.get_str("id").unwrap().to_owned())
        .collect();
    assert!(raw.len() >= 5 && raw.len() < events.len() / 2, "{raw:?}");
    coll.insert_many(events.iter().chain(&other).map(stored))
        .await
        .expect("insert the fixture");

    let mut failures = Vec::new();
    for case in cases(&events) {
        let Case { name, query, extra } = case;
        let found = match coll
            .find(filter(&stream(), &query, true))
            .sort(sort(query.order))
            .await
        {
            Ok(cursor) => cursor.try_collect::<Vec<_>>().await,
            Err(e) => Err(e),
        };
        let found: Vec<Event> = match found {
            Ok(docs) => docs
                .iter()
                .map(|d| serde_json::from_str(d.get_str("body").unwrap()).unwrap())
                .collect(),
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let mut expected: Vec<&Event> = events.iter().filter(|e| query.matches(e)).collect();
        expected.sort_by(|a, b| query.order.compare(a, b));
        let ids =
            |list: &[&Event]| -> Vec<String> { list.iter().map(|e| e.id.to_string()).collect() };
        let kept: Vec<&Event> = found.iter().filter(|e| query.matches(e)).collect();
        let extras: Vec<&Event> = found.iter().filter(|e| !query.matches(e)).collect();
        eprintln!(
            "{name} ({:?}): {} expected, {} selected",
            query.order,
            expected.len(),
            found.len()
        );
        if found.iter().any(|e| e.stream != stream()) {
            failures.push(format!("{name}: selected another stream's events"));
        }
        let missing: Vec<&&Event> = expected
            .iter()
            .filter(|e| !found.iter().any(|f| f.id == e.id))
            .collect();
        if !missing.is_empty() {
            let missing: Vec<&str> = missing.iter().map(|e| e.id.as_str()).collect();
            failures.push(format!("{name}: missed {missing:?}"));
        } else if kept != expected {
            failures.push(format!(
                "{name}: order {:?}, want {:?}",
                ids(&kept),
                ids(&expected)
            ));
        }
        let unexpected: Vec<String> = match extra {
            Extra::None => ids(&extras),
            Extra::Raw => ids(&extras)
                .into_iter()
                .filter(|id| !raw.contains(id))
                .collect(),
            Extra::Any => Vec::new(),
        };
        if !unexpected.is_empty() {
            failures.push(format!("{name}: also selected {unexpected:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
