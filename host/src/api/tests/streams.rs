//! Streams and events: create, list, get, append, batch append, read, query.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{TestApp, code};
use crate::model::kafka_partition;

#[tokio::test]
async fn create_answers_201_with_the_stream_and_its_partition_map() {
    let app = TestApp::new();
    let a = app
        .post(
            "/v1/streams",
            json!({"name": "orders", "partition_count": 2}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    assert_eq!(
        a.body,
        json!({
            "name": "orders",
            "partition_count": 2,
            "created_at": "2026-01-01T00:00:00.000Z",
            "partitions": {
                "0": {"high_watermark": 0, "first_sequence": 1},
                "1": {"high_watermark": 0, "first_sequence": 1},
            },
            "retention": null,
        })
    );
    let single = app.post("/v1/streams", json!({"name": "one"})).await;
    assert_eq!(
        single.body["partition_count"], 1,
        "defaults to one partition"
    );
}

#[tokio::test]
async fn create_refuses_duplicates_bad_names_and_bad_partition_counts() {
    let app = TestApp::new();
    app.stream("orders", 1).await;
    let dup = app.post("/v1/streams", json!({"name": "orders"})).await;
    assert_eq!(
        (dup.status, code(&dup)),
        (StatusCode::CONFLICT, "already_exists")
    );

    let bad = app.post("/v1/streams", json!({"name": "no spaces"})).await;
    assert_eq!(
        (bad.status, code(&bad)),
        (StatusCode::BAD_REQUEST, "invalid")
    );
    assert!(
        bad.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("' '")
    );

    let zero = app
        .post("/v1/streams", json!({"name": "z", "partition_count": 0}))
        .await;
    assert_eq!(
        (zero.status, code(&zero)),
        (StatusCode::BAD_REQUEST, "invalid_partition_count")
    );
    let negative = app
        .post("/v1/streams", json!({"name": "z", "partition_count": -1}))
        .await;
    assert_eq!(code(&negative), "invalid");
    let unknown = app
        .post("/v1/streams", json!({"name": "z", "partitions": 2}))
        .await;
    assert_eq!(code(&unknown), "invalid", "unknown fields are refused");
    assert!(
        unknown.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("partitions")
    );
}

#[tokio::test]
async fn list_is_sorted_by_name_and_get_shows_high_watermarks() {
    let app = TestApp::new();
    app.stream("b", 1).await;
    app.stream("a", 2).await;
    app.append("a", json!({"partition": 1})).await;
    let list = app.get("/v1/streams").await;
    assert_eq!(list.status, StatusCode::OK);
    let names: Vec<&str> = list.body["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);

    let a = app.get("/v1/streams/a").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.body["partitions"]["0"]["high_watermark"], 0);
    assert_eq!(a.body["partitions"]["1"]["high_watermark"], 1);

    let missing = app.get("/v1/streams/nope").await;
    assert_eq!(
        (missing.status, code(&missing)),
        (StatusCode::NOT_FOUND, "stream_not_found")
    );
    let bad = app.get("/v1/streams/bad%20name").await;
    assert_eq!(
        (bad.status, code(&bad)),
        (StatusCode::BAD_REQUEST, "invalid")
    );
}

#[tokio::test]
async fn append_answers_201_then_200_with_duplicate_for_a_known_id() {
    let app = TestApp::new();
    app.stream("s", 4).await;
    let event = json!({
        "id": "order-1", "type": "placed", "key": "customer-7",
        "payload": {"amount": 12}, "metadata": {"correlation_id": "c1"},
    });
    let first = app.post("/v1/streams/s/events", event.clone()).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(
        first.body,
        json!({
            "id": "order-1", "stream": "s",
            "partition": kafka_partition(b"customer-7", 4), "sequence": 1,
            "key": "customer-7", "type": "placed",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "payload": {"amount": 12}, "metadata": {"correlation_id": "c1"},
            "duplicate": false,
        })
    );
    let again = app.post("/v1/streams/s/events", event).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.body["duplicate"], true);
    assert_eq!(again.body["sequence"], 1, "nothing new was appended");

    let defaults = app.post("/v1/streams/s/events", json!({})).await;
    assert_eq!(defaults.status, StatusCode::CREATED);
    assert_eq!(defaults.body["partition"], 0);
    assert_eq!(defaults.body["payload"], json!({}));
    assert!(!defaults.body["id"].as_str().unwrap().is_empty());
}

#[tokio::test]
async fn append_refuses_bad_events_and_unknown_streams() {
    let app = TestApp::new();
    app.stream("s", 2).await;
    let cases = [
        (json!({"partition": 2}), "invalid_partition"),
        (json!({"payload": [1, 2]}), "invalid"),
        (json!({"payload": "text"}), "invalid"),
        (json!({"type": ""}), "invalid"),
        (json!({"timestamp": "yesterday"}), "invalid"),
        (json!({"id": ""}), "invalid"),
        (json!({"data": {}}), "invalid"),
    ];
    for (event, expected) in cases {
        let a = app.post("/v1/streams/s/events", event.clone()).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{event}");
        assert_eq!(code(&a), expected, "{event}: {}", a.body);
    }
    let missing = app.post("/v1/streams/nope/events", json!({})).await;
    assert_eq!(
        (missing.status, code(&missing)),
        (StatusCode::NOT_FOUND, "stream_not_found")
    );
}

#[tokio::test]
async fn batch_append_keeps_input_order_flags_duplicates_and_is_atomic() {
    let app = TestApp::new();
    app.stream("s", 2).await;
    app.append("s", json!({"id": "old"})).await;
    let a = app
        .post(
            "/v1/streams/s/events/batch",
            json!({"events": [
                {"id": "x", "partition": 1},
                {"id": "old"},
                {"id": "y", "partition": 0},
            ]}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    let events = a.body["events"].as_array().unwrap();
    let summary: Vec<(&str, u64, bool)> = events
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap(),
                e["sequence"].as_u64().unwrap(),
                e["duplicate"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [("x", 1, false), ("old", 1, true), ("y", 2, false)]
    );

    let refused = app
        .post(
            "/v1/streams/s/events/batch",
            json!({"events": [{"id": "z"}, {"partition": 9}]}),
        )
        .await;
    assert_eq!(code(&refused), "invalid_partition");
    let stream = app.get("/v1/streams/s").await;
    assert_eq!(
        stream.body["partitions"]["0"]["high_watermark"], 2,
        "z not written"
    );

    let empty = app
        .post("/v1/streams/s/events/batch", json!({"events": []}))
        .await;
    assert_eq!(empty.body, json!({"events": []}));
}

#[tokio::test]
async fn batch_append_refuses_more_than_1000_events() {
    let app = TestApp::new();
    app.stream("s", 1).await;
    let events: Vec<Value> = (0..1001).map(|_| json!({})).collect();
    let a = app
        .post("/v1/streams/s/events/batch", json!({"events": events}))
        .await;
    assert_eq!((a.status, code(&a)), (StatusCode::BAD_REQUEST, "invalid"));
    assert!(
        a.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1000")
    );
    let stream = app.get("/v1/streams/s").await;
    assert_eq!(stream.body["partitions"]["0"]["high_watermark"], 0);
}

#[tokio::test]
async fn read_pages_through_one_partition() {
    let app = TestApp::new();
    app.stream("s", 2).await;
    for i in 0..5 {
        app.append("s", json!({"id": format!("e{i}")})).await;
    }
    app.append("s", json!({"partition": 1})).await;
    let a = app.get("/v1/streams/s/events?after=1&limit=2").await;
    assert_eq!(a.status, StatusCode::OK);
    let ids: Vec<&str> = a.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["e1", "e2"]);
    let p1 = app.get("/v1/streams/s/events?partition=1").await;
    assert_eq!(p1.body["events"].as_array().unwrap().len(), 1);

    let cases = [
        ("/v1/streams/s/events?limit=0", "invalid"),
        ("/v1/streams/s/events?limit=1001", "invalid"),
        ("/v1/streams/s/events?limit=ten", "invalid"),
        ("/v1/streams/s/events?partition=2", "invalid_partition"),
        ("/v1/streams/s/events?partiton=1", "invalid"),
    ];
    for (uri, expected) in cases {
        let a = app.get(uri).await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::BAD_REQUEST, expected),
            "{uri}"
        );
    }
}

#[tokio::test]
async fn query_filters_orders_and_pages_with_cursors() {
    let app = TestApp::new();
    app.stream("s", 2).await;
    for i in 0..6 {
        let event =
            json!({"id": format!("e{i}"), "partition": i % 2, "type": "t", "payload": {"n": i}});
        app.append("s", event).await;
    }
    let all = app.post("/v1/streams/s/query", json!({})).await;
    assert_eq!(all.body["events"].as_array().unwrap().len(), 6);
    assert_eq!(all.body["next_cursor"], Value::Null);

    let filter = json!({
        "where": {"n": {"$gte": 1}, "type": "t"},
        "order_by": [{"field": "sequence", "dir": "desc"}],
        "limit": 2,
    });
    let mut seen = Vec::new();
    let mut body = filter.clone();
    loop {
        let page = app.post("/v1/streams/s/query", body.clone()).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        for e in page.body["events"].as_array().unwrap() {
            seen.push(e["id"].as_str().unwrap().to_owned());
        }
        match page.body["next_cursor"].as_str() {
            Some(cursor) => body["cursor"] = json!(cursor),
            None => break,
        }
    }
    assert_eq!(seen, ["e4", "e5", "e2", "e3", "e1"]);
}

#[tokio::test]
async fn query_refuses_bad_filters_orders_and_cursors() {
    let app = TestApp::new();
    app.stream("s", 1).await;
    let cases = [
        json!({"where": {"n": {"$regex": "x"}}}),
        json!({"where": [1]}),
        json!({"order_by": [{"field": "type"}]}),
        json!({"order_by": [{"field": "sequence"}, {"field": "timestamp"}]}),
        json!({"cursor": "garbage!"}),
        json!({"limit": 0}),
        json!({"from": "not a time"}),
    ];
    for body in cases {
        let a = app.post("/v1/streams/s/query", body.clone()).await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::BAD_REQUEST, "invalid"),
            "{body}"
        );
    }
    let missing = app.post("/v1/streams/nope/query", json!({})).await;
    assert_eq!(code(&missing), "stream_not_found");
}
