//! Filters, ordering, cursors and bounds of history queries.

use serde_json::json;

use super::*;
use crate::model::{EventId, StreamName};

fn event(partition: u32, sequence: u64, ts: i64, payload: Value) -> Event {
    Event {
        id: EventId::parse(format!("e{partition}-{sequence}")).unwrap(),
        stream: StreamName::parse("s").unwrap(),
        partition,
        sequence,
        key: Some("k1".into()),
        event_type: Some("t".into()),
        timestamp: Timestamp::from_millis(ts),
        payload: payload.as_object().unwrap().clone(),
        metadata: json!({"correlation_id": "c1", "trace": {"span": 7}})
            .as_object()
            .unwrap()
            .clone(),
    }
}

fn passes(filter: Value, e: &Event) -> bool {
    parse_where(&filter).unwrap().iter().all(|f| f.matches(e))
}

#[test]
fn field_names_resolve_as_documented() {
    assert_eq!(
        FieldRef::parse("type").unwrap(),
        FieldRef::Event(EventField::Type)
    );
    assert_eq!(
        FieldRef::parse("causation_id").unwrap(),
        FieldRef::Metadata(vec!["causation_id".into()])
    );
    assert_eq!(
        FieldRef::parse("payload.a.b").unwrap(),
        FieldRef::Payload(vec!["a".into(), "b".into()])
    );
    assert_eq!(
        FieldRef::parse("metadata.trace.span").unwrap(),
        FieldRef::Metadata(vec!["trace".into(), "span".into()])
    );
    assert_eq!(
        FieldRef::parse("currency").unwrap(),
        FieldRef::Payload(vec!["currency".into()])
    );
    assert!(FieldRef::parse("payload.a..b").is_err());
    assert!(FieldRef::parse("payload.a\"b").is_err());
    assert!(FieldRef::parse("").is_err());
}

#[test]
fn conditions_follow_json_semantics() {
    let e = event(
        0,
        1,
        10,
        json!({"n": 3, "s": "b", "nested": {"x": [1, 2]}, "z": null}),
    );
    assert!(passes(json!({"n": 3.0}), &e));
    assert!(passes(json!({"payload.nested.x": [1, 2]}), &e));
    assert!(passes(json!({"n": {"$gt": 2, "$lte": 3}}), &e));
    assert!(!passes(json!({"n": {"$gt": 3}}), &e));
    assert!(passes(json!({"s": {"$in": ["a", "b"]}}), &e));
    assert!(passes(json!({"s": {"$gte": "b", "$lt": "c"}}), &e));
    assert!(
        !passes(json!({"s": {"$gt": 1}}), &e),
        "string vs number never matches"
    );
    assert!(passes(
        json!({"z": {"$exists": true}, "missing": {"$exists": false}}),
        &e
    ));
    assert!(passes(
        json!({"type": "t", "key": "k1", "partition": 0, "id": "e0-1"}),
        &e
    ));
    assert!(passes(
        json!({"correlation_id": "c1", "metadata.trace.span": 7}),
        &e
    ));
    assert!(!passes(json!({"correlation_id": "c2"}), &e));
    assert!(!passes(json!({"missing": 1}), &e));
}

#[test]
fn bad_filters_name_the_problem() {
    let err = parse_where(&json!({"n": {"$regex": "x"}})).unwrap_err();
    assert_eq!(err.field, "where.n");
    assert!(err.message.contains("unknown operator $regex"), "{err}");
    assert!(parse_where(&json!({"n": {"$in": 3}})).is_err());
    assert!(parse_where(&json!({"n": {"$exists": 1}})).is_err());
    assert!(parse_where(&json!({"n": {"$gt": [1]}})).is_err());
    assert!(parse_where(&json!({"n": {"$gt": 1, "plain": 2}})).is_err());
    assert!(parse_where(&json!([1])).is_err());
}

#[test]
fn order_is_field_then_partition_then_sequence() {
    let a = event(1, 5, 100, json!({}));
    let b = event(0, 5, 200, json!({}));
    let c = event(0, 6, 100, json!({}));
    let seq_asc = OrderBy::default();
    assert_eq!(seq_asc.compare(&b, &a), Ordering::Less);
    assert_eq!(seq_asc.compare(&a, &c), Ordering::Less);
    let ts_desc = OrderBy::parse("timestamp", Some("desc")).unwrap();
    assert_eq!(ts_desc.compare(&b, &a), Ordering::Less);
    assert_eq!(
        ts_desc.compare(&c, &a),
        Ordering::Less,
        "tie on timestamp → partition asc"
    );
    assert!(OrderBy::parse("type", None).is_err());
    assert!(OrderBy::parse("sequence", Some("sideways")).is_err());
}

#[test]
fn cursors_round_trip_and_refuse_garbage() {
    let order = OrderBy::parse("timestamp", Some("desc")).unwrap();
    let cursor = QueryCursor {
        order,
        positions: BTreeMap::from([
            (
                0,
                Position {
                    timestamp: 5,
                    sequence: 9,
                },
            ),
            (
                3,
                Position {
                    timestamp: 7,
                    sequence: 1,
                },
            ),
        ]),
    };
    let text = cursor.encode();
    assert_eq!(QueryCursor::decode(&text, order).unwrap(), cursor);
    assert!(QueryCursor::decode(&text, OrderBy::default()).is_err());
    assert_eq!(
        QueryCursor::decode("!!!", order).unwrap_err().field,
        "cursor"
    );
    assert!(
        QueryCursor::decode(&URL_SAFE_NO_PAD.encode("c1|sa|0:x:1"), OrderBy::default()).is_err()
    );
}

#[test]
fn bounds_and_cursors_beyond_the_representable_range_are_refused() {
    use crate::model::MAX_SEQUENCE;
    let (seq, time) = (Some(MAX_SEQUENCE), Some(Timestamp::MAX));
    let at_max = Query {
        after_sequence: seq,
        until_sequence: seq,
        from: time,
        to: time,
        ..Query::default()
    };
    assert_eq!(at_max.validate(), Ok(()));
    let spoiled = [
        Query {
            after_sequence: Some(MAX_SEQUENCE + 1),
            ..at_max.clone()
        },
        Query {
            until_sequence: Some(u64::MAX),
            ..at_max.clone()
        },
        Query {
            from: Some(Timestamp::from_millis(-1)),
            ..at_max.clone()
        },
        Query {
            to: Some(Timestamp::from_millis(i64::MAX)),
            ..at_max.clone()
        },
    ];
    let names = ["after_sequence", "until_sequence", "from", "to"];
    for (q, name) in spoiled.iter().zip(names) {
        assert_eq!(q.validate().unwrap_err().field, name);
    }
    for (timestamp, sequence) in [(0, MAX_SEQUENCE + 1), (-1, 1), (i64::MAX, 1)] {
        let position = Position {
            timestamp,
            sequence,
        };
        let cursor = QueryCursor {
            order: OrderBy::default(),
            positions: BTreeMap::from([(0, position)]),
        };
        let refused = QueryCursor::decode(&cursor.encode(), cursor.order);
        assert_eq!(refused.unwrap_err().field, "cursor");
        let q = Query {
            cursor: Some(cursor),
            ..Query::default()
        };
        assert_eq!(q.validate().unwrap_err().field, "cursor");
    }
}

#[test]
fn a_full_page_yields_a_cursor_that_admits_only_the_rest() {
    let q = Query {
        limit: 2,
        ..Query::default()
    };
    let page = q.page(vec![event(0, 1, 0, json!({})), event(1, 1, 0, json!({}))]);
    let cursor = QueryCursor::decode(page.next_cursor.as_deref().unwrap(), q.order).unwrap();
    assert!(!cursor.admits(&event(0, 1, 0, json!({}))));
    assert!(cursor.admits(&event(0, 2, 0, json!({}))));
    assert!(cursor.admits(&event(2, 1, 0, json!({}))));
    let short = q.page(vec![event(0, 1, 0, json!({}))]);
    assert_eq!(short.next_cursor, None);
}
