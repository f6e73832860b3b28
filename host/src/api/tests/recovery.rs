//! Replay, reset, dead letters and redrive.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{TestApp, code, lease_ref, lease_ref_with};

/// Fetches everything and acks it.
async fn consume_all(app: &TestApp) {
    for lease in app.fetch("s", "g", json!({"limit": 100})).await {
        let a = app
            .post("/v1/streams/s/groups/g/ack", lease_ref(&lease))
            .await;
        assert_eq!(a.status, StatusCode::OK);
    }
}

/// Fetches everything and rejects it.
async fn reject_all(app: &TestApp) {
    for lease in app.fetch("s", "g", json!({"limit": 100})).await {
        let body = lease_ref_with(&lease, json!({"reason": "nope"}));
        let a = app.post("/v1/streams/s/groups/g/reject", body).await;
        assert_eq!(a.status, StatusCode::OK);
    }
}

#[tokio::test]
async fn replay_from_a_sequence_reopens_and_rewinds_lag() {
    let app = TestApp::new();
    app.stream_with_group(4).await;
    consume_all(&app).await;
    let a = app
        .post("/v1/streams/s/groups/g/replay", json!({"from_sequence": 2}))
        .await;
    assert_eq!((a.status, a.body), (StatusCode::OK, json!({"reopened": 2})));
    let lag = app.get("/v1/streams/s/groups/g/lag").await;
    assert_eq!(lag.body["lag"], 2);
    let again = app.fetch("s", "g", json!({})).await;
    let ids: Vec<&str> = again
        .iter()
        .map(|l| l["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["e3", "e4"]);
    assert_eq!(again[0]["attempt"], 2, "attempts are kept");
}

#[tokio::test]
async fn replay_by_time_query_or_ids() {
    let app = TestApp::new();
    app.stream_with_group(3).await;
    consume_all(&app).await;
    let by_ids = app
        .post(
            "/v1/streams/s/groups/g/replay",
            json!({"event_ids": ["e2"]}),
        )
        .await;
    assert_eq!(by_ids.body["reopened"], 1);
    consume_all(&app).await;
    let by_query = app
        .post(
            "/v1/streams/s/groups/g/replay",
            json!({"query": {"where": {"i": {"$gte": 2}}, "limit": 1}}),
        )
        .await;
    assert_eq!(by_query.body["reopened"], 2, "a replay query ignores limit");
    consume_all(&app).await;
    let by_time = app
        .post(
            "/v1/streams/s/groups/g/replay",
            json!({"from": "2026-01-01T00:00:00Z", "partitions": [0]}),
        )
        .await;
    assert_eq!(by_time.body["reopened"], 3);
}

#[tokio::test]
async fn replay_needs_exactly_one_selector() {
    let app = TestApp::new();
    app.stream_with_group(1).await;
    let cases = [
        json!({}),
        json!({"from_sequence": 0, "event_ids": ["e1"]}),
        json!({"from": "2026-01-01T00:00:00Z", "query": {}}),
        json!({"event_ids": ["e1"], "partitions": [0]}),
        json!({"partitions": [0]}),
        json!({"from_seq": 3}),
        json!({"from_sequence": "three"}),
        json!([1]),
    ];
    for body in cases {
        let a = app
            .post("/v1/streams/s/groups/g/replay", body.clone())
            .await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::BAD_REQUEST, "invalid_replay_opts"),
            "{body}"
        );
    }
    let unknown_id = app
        .post(
            "/v1/streams/s/groups/g/replay",
            json!({"event_ids": ["nope"]}),
        )
        .await;
    assert_eq!(code(&unknown_id), "invalid");
    let missing = app
        .post(
            "/v1/streams/s/groups/nope/replay",
            json!({"from_sequence": 0}),
        )
        .await;
    assert_eq!(code(&missing), "group_not_found");
}

#[tokio::test]
async fn reset_needs_confirm_true_before_anything_else() {
    let app = TestApp::new();
    app.stream_with_group(2).await;
    for body in [
        json!({}),
        json!({"confirm": false}),
        json!({"confirm": "true"}),
        json!({"confirm": 1}),
        json!([true]),
        json!({"start_after": "garbage"}),
    ] {
        let a = app.post("/v1/streams/s/groups/g/reset", body.clone()).await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::BAD_REQUEST, "confirm_required"),
            "{body}"
        );
    }
    let unknown = app
        .post("/v1/streams/nope/groups/g/reset", json!({"confirm": false}))
        .await;
    assert_eq!(
        code(&unknown),
        "confirm_required",
        "checked before the stream"
    );
    let missing = app
        .post("/v1/streams/nope/groups/g/reset", json!({"confirm": true}))
        .await;
    assert_eq!(code(&missing), "stream_not_found");
}

#[tokio::test]
async fn reset_restarts_the_group_at_the_given_point() {
    let app = TestApp::new();
    app.stream_with_group(3).await;
    consume_all(&app).await;
    let a = app
        .post(
            "/v1/streams/s/groups/g/reset",
            json!({"confirm": true, "start_after": 1}),
        )
        .await;
    assert_eq!((a.status, a.body), (StatusCode::OK, json!({"ok": true})));
    let leases = app.fetch("s", "g", json!({})).await;
    let ids: Vec<&str> = leases
        .iter()
        .map(|l| l["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["e2", "e3"]);
    assert_eq!(leases[0]["attempt"], 1, "attempts start again");

    let bad = app
        .post(
            "/v1/streams/s/groups/g/reset",
            json!({"confirm": true, "partitions": [3]}),
        )
        .await;
    assert_eq!(code(&bad), "invalid_partition");
    let unknown_field = app
        .post(
            "/v1/streams/s/groups/g/reset",
            json!({"confirm": true, "everything": true}),
        )
        .await;
    assert_eq!(code(&unknown_field), "invalid");
}

#[tokio::test]
async fn dead_letters_page_in_sequence_order() {
    let app = TestApp::new();
    app.stream_with_group(3).await;
    reject_all(&app).await;
    let page = app.get("/v1/streams/s/groups/g/dead-letters?limit=2").await;
    assert_eq!(page.status, StatusCode::OK);
    let letters = page.body["dead_letters"].as_array().unwrap();
    assert_eq!(letters.len(), 2);
    let first = &letters[0];
    assert_eq!(first["event_id"], "e1");
    assert_eq!(first["partition"], 0);
    assert_eq!(first["sequence"], 1);
    assert_eq!(first["attempt"], 1);
    assert_eq!(first["reason"], "nope");
    assert_eq!(first["dead_lettered_at"], "2026-01-01T00:00:00.000Z");
    assert_eq!(first["event"]["id"], "e1");
    assert_eq!(page.body["next"], "e2");

    let rest = app
        .get("/v1/streams/s/groups/g/dead-letters?limit=2&after=e2")
        .await;
    assert_eq!(rest.body["dead_letters"][0]["event_id"], "e3");
    assert_eq!(rest.body["next"], Value::Null);

    let unknown = app
        .get("/v1/streams/s/groups/g/dead-letters?after=zzz")
        .await;
    assert_eq!(
        (unknown.status, code(&unknown)),
        (StatusCode::BAD_REQUEST, "cursor_not_found")
    );
    let bad_limit = app.get("/v1/streams/s/groups/g/dead-letters?limit=0").await;
    assert_eq!(code(&bad_limit), "invalid");
}

#[tokio::test]
async fn redrive_by_ids_or_all_resets_attempts() {
    let app = TestApp::new();
    app.stream_with_group(3).await;
    reject_all(&app).await;
    let some = app
        .post(
            "/v1/streams/s/groups/g/dead-letters/redrive",
            json!({"event_ids": ["e2"]}),
        )
        .await;
    assert_eq!(
        (some.status, some.body),
        (StatusCode::OK, json!({"redriven": 1}))
    );
    let lease = app.fetch("s", "g", json!({})).await;
    assert_eq!(lease[0]["event_id"], "e2");
    assert_eq!(lease[0]["attempt"], 1);

    let all = app
        .post(
            "/v1/streams/s/groups/g/dead-letters/redrive",
            json!({"all": true}),
        )
        .await;
    assert_eq!(all.body["redriven"], 2);
    for body in [
        json!({}),
        json!({"all": false}),
        json!({"all": true, "event_ids": []}),
    ] {
        let a = app
            .post("/v1/streams/s/groups/g/dead-letters/redrive", body.clone())
            .await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::BAD_REQUEST, "invalid"),
            "{body}"
        );
    }
}

#[tokio::test]
async fn a_quarantined_key_is_listed_and_released_over_http() {
    let app = TestApp::new();
    app.stream("s", 1).await;
    let created = app
        .post(
            "/v1/streams/s/groups",
            json!({"name": "g", "ordering": "key", "on_exhausted": "quarantine", "max_attempts": 1}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    assert_eq!(created.body["on_exhausted"], "quarantine");
    let plain = app
        .post(
            "/v1/streams/s/groups",
            json!({"name": "h", "on_exhausted": "quarantine"}),
        )
        .await;
    assert_eq!(plain.status, StatusCode::BAD_REQUEST);
    assert!(
        plain.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ordering")
    );
    for id in ["a1", "a2"] {
        app.append("s", json!({"id": id, "key": "a"})).await;
    }
    let out = app.fetch("s", "g", json!({"limit": 10})).await;
    assert_eq!(out.len(), 1);
    let nack = lease_ref_with(&out[0], json!({"reason": "downstream 500"}));
    let a = app.post("/v1/streams/s/groups/g/nack", nack).await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(app.fetch("s", "g", json!({"limit": 10})).await.is_empty());

    let listed = app.get("/v1/streams/s/groups/g/quarantine").await;
    assert_eq!(listed.status, StatusCode::OK);
    let parked = &listed.body["parked"][0];
    assert_eq!(parked["key"], "a");
    assert_eq!(parked["event_id"], "a1");
    assert_eq!(parked["reason"], "max_attempts: downstream 500");
    let info = app.get("/v1/streams/s/groups/g").await;
    assert_eq!(info.body["on_exhausted"], "quarantine");
    let leases = app.get("/v1/streams/s/groups/g/leases").await;
    assert_eq!(leases.body["leases"][0]["consumer_id"], "rheo:quarantine");
    assert_eq!(
        leases.body["leases"][0]["reason"],
        "max_attempts: downstream 500"
    );

    let unconfirmed = app
        .post(
            "/v1/streams/s/groups/g/quarantine/release",
            json!({"keys": ["a"]}),
        )
        .await;
    assert_eq!(code(&unconfirmed), "confirm_required");
    let both = app
        .post(
            "/v1/streams/s/groups/g/quarantine/release",
            json!({"confirm": true, "keys": ["a"], "all": true}),
        )
        .await;
    assert_eq!(code(&both), "invalid");
    let released = app
        .post(
            "/v1/streams/s/groups/g/quarantine/release",
            json!({"confirm": true, "keys": ["a", "zz"]}),
        )
        .await;
    assert_eq!(released.status, StatusCode::OK);
    assert_eq!(released.body["released"][0]["event_id"], "a1");
    assert_eq!(released.body["not_parked"], json!(["zz"]));
    let again = app.fetch("s", "g", json!({"limit": 10})).await;
    assert_eq!(again[0]["event_id"], "a1");
    assert_eq!(again[0]["attempt"], 1, "a released head starts over");
}
