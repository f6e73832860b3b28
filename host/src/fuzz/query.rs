//! Target `query`: the query language (`docs/log.md#query`) as the API reads
//! it — a JSON body, `QueryBody::into_query`, `Query::validate` — and the
//! matcher. Any input parses or is refused without a panic; a query that
//! parses prints back (with the printer below) to a body that parses to
//! the same query; cursors round-trip through their text form.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::{any_json, config, corpus, mutant, number, run, string, value};
use crate::api::dto::QueryBody;
use crate::model::{
    Condition, Direction, Event, EventField, EventId, FieldRef, LINEAGE_KEYS, OrderBy, OrderField,
    Position, Query, QueryCursor, RangeOp, StreamName, Timestamp,
};

/// 2026-01-01T00:00:00Z, the fixtures' first timestamp.
pub(super) const T0: i64 = 1_767_225_600_000;

/// Filter names: event fields, lineage keys, paths, bare payload keys
/// (one with a dot).
pub(super) const FIELDS: [&str; 20] = [
    "id",
    "type",
    "key",
    "partition",
    "correlation_id",
    "causation_id",
    "schema_version",
    "payload.a",
    "payload.a.b",
    "payload.n",
    "payload.tags",
    "metadata.m",
    "metadata.m.n",
    "metadata.correlation_id",
    "a",
    "n",
    "s",
    "tags",
    "b.c",
    "payload.a.b.c",
];

/// The value of one `where` entry: a plain value (equality) or an object
/// of operators.
fn spec() -> impl Strategy<Value = Value> {
    let range = proptest::sample::select(vec!["$gt", "$gte", "$lt", "$lte"]);
    let op = prop_oneof![
        value().prop_map(|v| ("$eq", v)),
        proptest::collection::vec(value(), 0..4).prop_map(|v| ("$in", Value::Array(v))),
        (range, prop_oneof![number(), string()]).prop_map(|(op, v)| (op, v)),
        any::<bool>().prop_map(|b| ("$exists", Value::Bool(b))),
    ];
    prop_oneof![
        2 => value(),
        3 => proptest::collection::vec(op, 1..3).prop_map(|ops| {
            Value::Object(ops.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
        }),
    ]
}

/// A valid `where` object of up to four entries.
pub(super) fn where_object() -> impl Strategy<Value = Value> {
    proptest::collection::btree_map(proptest::sample::select(FIELDS.to_vec()), spec(), 0..4)
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
}

/// A timestamp near [`T0`], as RFC 3339 text (some with an offset or
/// sub-millisecond digits).
fn time_text() -> impl Strategy<Value = String> {
    prop_oneof![
        (0..6i64).prop_map(|s| Timestamp::from_millis(T0 + s * 1000).to_string()),
        Just("2026-01-01T01:00:02+01:00".to_owned()),
        Just("2026-01-01T00:00:02.0009Z".to_owned()),
    ]
}

/// One of the four orderings.
fn order() -> impl Strategy<Value = OrderBy> {
    (any::<bool>(), any::<bool>()).prop_map(|(ts, desc)| OrderBy {
        field: if ts {
            OrderField::Timestamp
        } else {
            OrderField::Sequence
        },
        dir: if desc {
            Direction::Desc
        } else {
            Direction::Asc
        },
    })
}

/// `positions` as a cursor for `order` records them: no timestamp when
/// ordering by sequence.
fn for_order(order: OrderBy, mut positions: BTreeMap<u32, Position>) -> QueryCursor {
    if order.field == OrderField::Sequence {
        positions.values_mut().for_each(|p| p.timestamp = 0);
    }
    QueryCursor { order, positions }
}

/// Cursor positions near the fixtures'.
fn positions() -> impl Strategy<Value = BTreeMap<u32, Position>> {
    proptest::collection::btree_map(
        0..4u32,
        (0..6i64, 0..8u64).prop_map(|(s, sequence)| Position {
            timestamp: T0 + s * 1000,
            sequence,
        }),
        0..4,
    )
}

/// A valid query body: filters, bounds, an ordering, a limit and
/// sometimes a cursor made for that ordering.
pub(super) fn query_body() -> impl Strategy<Value = Value> {
    (
        where_object(),
        proptest::option::of(time_text()),
        proptest::option::of(time_text()),
        proptest::option::of(0..7u64),
        proptest::option::of(0..7u64),
        proptest::option::of(order()),
        proptest::option::of(1..8u32),
        proptest::option::weighted(0.3, positions()),
    )
        .prop_map(|(w, from, to, after, until, order, limit, positions)| {
            let mut body = Map::new();
            body.insert("where".into(), w);
            let mut put = |k: &str, v: Option<Value>| {
                if let Some(v) = v {
                    body.insert(k.into(), v);
                }
            };
            put("from", from.map(Value::from));
            put("to", to.map(Value::from));
            put("after_sequence", after.map(Value::from));
            put("until_sequence", until.map(Value::from));
            put("order_by", order.map(|o| order_by(&o)));
            put("limit", limit.map(Value::from));
            put(
                "cursor",
                positions.map(|p| Value::from(for_order(order.unwrap_or_default(), p).encode())),
            );
            Value::Object(body)
        })
}

fn order_by(order: &OrderBy) -> Value {
    let field = match order.field {
        OrderField::Sequence => "sequence",
        OrderField::Timestamp => "timestamp",
    };
    let dir = match order.dir {
        Direction::Asc => "asc",
        Direction::Desc => "desc",
    };
    json!([{"field": field, "dir": dir}])
}

/// A query body as the API parses it (`POST /v1/streams/{s}/query`): JSON,
/// then the model query, then its checks. `None` when refused.
pub(super) fn parse(bytes: &[u8]) -> Option<Query> {
    let body: QueryBody = serde_json::from_slice(bytes).ok()?;
    let query = body.into_query().ok()?;
    query.validate().ok()?;
    Some(query)
}

/// The name a filter on `field` is written with, if any name resolves to it.
fn field_name(field: &FieldRef) -> Option<String> {
    let reserved = |k: &str| {
        ["id", "type", "key", "partition"].contains(&k)
            || LINEAGE_KEYS.contains(&k)
            || k.starts_with("payload.")
            || k.starts_with("metadata.")
    };
    Some(match field {
        FieldRef::Event(EventField::Id) => "id".into(),
        FieldRef::Event(EventField::Type) => "type".into(),
        FieldRef::Event(EventField::Key) => "key".into(),
        FieldRef::Event(EventField::Partition) => "partition".into(),
        FieldRef::Payload(path) => match path.as_slice() {
            [bare] if !bare.is_empty() && !reserved(bare) => bare.clone(),
            [one] if one.contains('.') => return None,
            _ => format!("payload.{}", path.join(".")),
        },
        FieldRef::Metadata(path) => format!("metadata.{}", path.join(".")),
    })
}

/// The body of a query: the inverse of [`parse`], or `None` when two
/// filters on one field use one operator (no single object holds both).
pub(super) fn print(query: &Query) -> Option<Value> {
    let mut fields: Vec<(String, Vec<(&'static str, Value)>)> = Vec::new();
    for filter in &query.filters {
        let name = field_name(&filter.field)?;
        let (op, operand) = match &filter.condition {
            Condition::Eq(v) => ("$eq", v.clone()),
            Condition::In(v) => ("$in", Value::Array(v.clone())),
            Condition::Range(RangeOp::Gt, v) => ("$gt", v.clone()),
            Condition::Range(RangeOp::Gte, v) => ("$gte", v.clone()),
            Condition::Range(RangeOp::Lt, v) => ("$lt", v.clone()),
            Condition::Range(RangeOp::Lte, v) => ("$lte", v.clone()),
            Condition::Exists(b) => ("$exists", Value::Bool(*b)),
        };
        match fields.iter_mut().find(|(n, _)| *n == name) {
            Some((_, ops)) if ops.iter().any(|(o, _)| *o == op) => return None,
            Some((_, ops)) => ops.push((op, operand)),
            None => fields.push((name, vec![(op, operand)])),
        }
    }
    let mut filter = Map::new();
    for (name, mut ops) in fields {
        let plain = ops.len() == 1 && ops[0].0 == "$eq" && !ops[0].1.is_object();
        let spec = if plain {
            ops.remove(0).1
        } else {
            Value::Object(ops.into_iter().map(|(o, v)| (o.to_owned(), v)).collect())
        };
        filter.insert(name, spec);
    }
    let mut body = Map::new();
    if !filter.is_empty() {
        body.insert("where".into(), Value::Object(filter));
    }
    let time = |t: Timestamp| Value::from(t.to_string());
    if let Some(t) = query.from {
        body.insert("from".into(), time(t));
    }
    if let Some(t) = query.to {
        body.insert("to".into(), time(t));
    }
    if let Some(s) = query.after_sequence {
        body.insert("after_sequence".into(), s.into());
    }
    if let Some(s) = query.until_sequence {
        body.insert("until_sequence".into(), s.into());
    }
    body.insert("order_by".into(), order_by(&query.order));
    body.insert("limit".into(), query.limit.into());
    if let Some(cursor) = &query.cursor {
        body.insert("cursor".into(), cursor.encode().into());
    }
    Some(Value::Object(body))
}

/// `query` with its filters in a canonical order (a `where` object's
/// entries are ANDed, so their order carries no meaning).
fn canonical(mut query: Query) -> Query {
    query.filters.sort_by_cached_key(|f| format!("{f:?}"));
    query
}

/// Events with every kind of field the filters look at.
fn probes() -> Vec<Event> {
    let payloads = [
        json!({"a": {"b": 1}, "n": 1, "s": "a", "tags": ["a", 1], "b.c": true, "q\"x": null}),
        json!({"a": [1, 2.0], "n": -0.0, "s": "é", "tags": []}),
        json!({"a": {"b": {"c": "b"}}, "n": 100}),
        json!({}),
    ];
    payloads
        .iter()
        .enumerate()
        .map(|(i, payload)| Event {
            id: EventId::parse(format!("e{i}")).unwrap(),
            stream: StreamName::parse("s").unwrap(),
            partition: i as u32 % 2,
            sequence: 1 + i as u64,
            key: ["k1", ""].get(i).map(|k| (*k).to_owned()),
            event_type: ["order.placed", "t"].get(i % 3).map(|t| (*t).to_owned()),
            timestamp: Timestamp::from_millis(T0 + 1000 * i as i64),
            payload: payload.as_object().unwrap().clone(),
            metadata: json!({"correlation_id": "a", "m": {"n": 2}, "schema_version": 1})
                .as_object()
                .unwrap()
                .clone(),
        })
        .collect()
}

/// The target's property, for one input: parsing never panics; a parsed
/// query matches events without panicking and survives print ∘ parse.
fn check(bytes: &[u8], events: &[Event]) -> Result<(), TestCaseError> {
    let Some(query) = parse(bytes) else {
        return Ok(());
    };
    for event in events {
        let _ = query.matches(event);
    }
    if let Some(printed) = print(&query) {
        let text = serde_json::to_vec(&printed).unwrap();
        let again = parse(&text);
        prop_assert!(again.is_some(), "{printed} does not parse");
        prop_assert_eq!(
            canonical(again.unwrap()),
            canonical(query),
            "printed as {}",
            printed
        );
    }
    Ok(())
}

#[test]
fn corpus_queries_parse_and_round_trip() {
    let events = probes();
    for (name, bytes) in corpus("query") {
        check(&bytes, &events).unwrap_or_else(|e| panic!("{name}: {e}"));
        // The corpus holds the docs' examples (valid-*) and refusals (invalid-*).
        let parsed = parse(&bytes).is_some();
        if name.starts_with("valid-") {
            assert!(parsed, "{name} is refused");
        } else if name.starts_with("invalid-") {
            assert!(!parsed, "{name} is accepted");
        }
    }
}

#[test]
fn arbitrary_query_input_is_parsed_or_refused() {
    let events = probes();
    let input = prop_oneof![
        any::<Vec<u8>>(),
        "[{}\\[\\]\":,.$a-z0-9 _-]{0,60}".prop_map(String::into_bytes),
        mutant("query"),
        any_json().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        any_json().prop_map(|v| serde_json::to_vec(&json!({"where": v})).unwrap()),
        any_json().prop_map(|v| serde_json::to_vec(&json!({"where": {"payload.a": v}})).unwrap()),
    ];
    run(config(8000, file!()), input, |bytes| check(&bytes, &events));
}

#[test]
fn generated_queries_parse_and_round_trip() {
    let events = probes();
    run(config(8000, file!()), query_body(), |body| {
        let text = serde_json::to_vec(&body).unwrap();
        prop_assert!(parse(&text).is_some(), "a valid query is refused: {}", body);
        check(&text, &events)
    });
}

#[test]
fn cursors_round_trip_and_garbage_is_refused() {
    let input = (order(), positions(), any::<String>());
    run(
        config(4000, file!()),
        input,
        |(order, positions, garbage)| {
            let cursor = for_order(order, positions);
            let text = cursor.encode();
            prop_assert_eq!(QueryCursor::decode(&text, order), Ok(cursor));
            if let Ok(decoded) = QueryCursor::decode(&garbage, order) {
                prop_assert_eq!(QueryCursor::decode(&decoded.encode(), order), Ok(decoded));
            }
            Ok(())
        },
    );
}

/// A bare name with a quote made SQLite's JSON path malformed (`$."q"x"`)
/// and the query failed. Such names are refused, like path segments with
/// one (`docs/log.md#filters`).
#[test]
fn names_with_quotes_or_backslashes_are_refused() {
    for name in ["q\"x", "b\\s", "payload.q\"x", "metadata.b\\s"] {
        let body = serde_json::to_vec(&json!({"where": {name: 1}})).unwrap();
        assert!(parse(&body).is_none(), "{name}");
    }
    let body = serde_json::to_vec(&json!({"where": {"q x": 1, "a.b": 2}})).unwrap();
    assert!(parse(&body).is_some());
}

/// Found by the `sql` target: a sequence-ordered cursor altered to carry a
/// timestamp was accepted, and SQL and `Query::matches` read it
/// differently. An altered cursor is refused (`docs/log.md#cursors`).
#[test]
fn a_sequence_cursor_with_a_timestamp_is_refused() {
    let altered = json!({
        "cursor": "YzF8c2R8MDoxNzY3MjI1NjAwMDAwOjA",
        "order_by": [{"field": "sequence", "dir": "desc"}],
    });
    assert!(parse(&serde_json::to_vec(&altered).unwrap()).is_none());
    let order = OrderBy {
        field: OrderField::Sequence,
        dir: Direction::Desc,
    };
    let position = Position {
        timestamp: T0,
        sequence: 3,
    };
    let sent = json!({
        "cursor": for_order(order, BTreeMap::from([(0, position)])).encode(),
        "order_by": [{"field": "sequence", "dir": "desc"}],
    });
    assert!(parse(&serde_json::to_vec(&sent).unwrap()).is_some());
}
