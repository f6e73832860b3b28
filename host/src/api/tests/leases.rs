//! Leases: fetch, ack, nack, reject, renew, batch settle, fencing.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{TestApp, code, lease_ref, lease_ref_with};

#[tokio::test]
async fn fetch_hands_out_leases_with_receipt_and_the_full_event() {
    let app = TestApp::new();
    app.stream_with_group(2).await;
    let leases = app
        .fetch(
            "s",
            "g",
            json!({"limit": 1, "consumer_id": "worker-1", "lease_ms": 5000}),
        )
        .await;
    assert_eq!(leases.len(), 1);
    let lease = &leases[0];
    assert_eq!(lease["stream"], "s");
    assert_eq!(lease["group"], "g");
    assert_eq!(lease["event_id"], "e1");
    assert_eq!(lease["consumer_id"], "worker-1");
    assert_eq!(lease["attempt"], 1);
    assert_eq!(lease["leased_at"], "2026-01-01T00:00:00.000Z");
    assert_eq!(lease["expires_at"], "2026-01-01T00:00:05.000Z");
    assert!(lease["lease_id"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(lease["receipt"].is_string());
    assert_eq!(lease["event"]["id"], "e1");
    assert_eq!(lease["event"]["payload"], json!({"i": 1}));
    assert_eq!(lease["event"]["sequence"], 1);
}

#[tokio::test]
async fn fetch_without_a_body_uses_the_defaults() {
    let app = TestApp::new();
    app.stream_with_group(12).await;
    let a = app
        .call(super::json_request(
            axum::http::Method::POST,
            "/v1/streams/s/groups/g/fetch",
            None,
        ))
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let leases = a.body["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 10, "default limit");
    assert_eq!(
        leases[0]["expires_at"], "2026-01-01T00:00:30.000Z",
        "default lease"
    );
    assert!(leases[0]["consumer_id"].as_str().unwrap().starts_with("c-"));
}

#[tokio::test]
async fn fetch_refuses_bad_options() {
    let app = TestApp::new();
    app.stream_with_group(1).await;
    let cases = [
        (json!({"limit": 0}), "invalid"),
        (json!({"limit": 1001}), "invalid"),
        (json!({"lease_ms": 0}), "invalid"),
        (json!({"wait_ms": 30_001}), "invalid"),
        (json!({"partitions": [1]}), "invalid_partition"),
        (json!({"consumer_id": ""}), "invalid"),
        (json!({"limit": "ten"}), "invalid"),
    ];
    for (body, expected) in cases {
        let a = app.post("/v1/streams/s/groups/g/fetch", body.clone()).await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::BAD_REQUEST, expected),
            "{body}"
        );
    }
    let none = app
        .fetch("s", "g", json!({"partitions": [], "wait_ms": 30_000}))
        .await;
    assert!(none.is_empty(), "[] selects nothing, at once");
    let missing = app.post("/v1/streams/s/groups/nope/fetch", json!({})).await;
    assert_eq!(
        (missing.status, code(&missing)),
        (StatusCode::NOT_FOUND, "group_not_found")
    );
}

#[tokio::test]
async fn ack_settles_once_and_then_the_lease_is_stale() {
    let app = TestApp::new();
    app.stream_with_group(1).await;
    let lease = app.fetch("s", "g", json!({})).await.remove(0);
    let ack = app
        .post("/v1/streams/s/groups/g/ack", lease_ref(&lease))
        .await;
    assert_eq!(
        (ack.status, ack.body.clone()),
        (StatusCode::OK, json!({"ok": true}))
    );
    let lag = app.get("/v1/streams/s/groups/g/lag").await;
    assert_eq!(lag.body["lag"], 0);

    let again = app
        .post("/v1/streams/s/groups/g/ack", lease_ref(&lease))
        .await;
    assert_eq!(
        (again.status, code(&again)),
        (StatusCode::CONFLICT, "stale_lease")
    );
    let forged = app
        .post(
            "/v1/streams/s/groups/g/ack",
            json!({"event_id": "e1", "lease_id": "forged"}),
        )
        .await;
    assert_eq!(code(&forged), "stale_lease");
    let malformed = app
        .post("/v1/streams/s/groups/g/ack", json!({"event_id": "e1"}))
        .await;
    assert_eq!(
        (malformed.status, code(&malformed)),
        (StatusCode::BAD_REQUEST, "invalid")
    );
}

#[tokio::test]
async fn a_wrong_receipt_is_a_conflict_and_changes_nothing() {
    let app = TestApp::new();
    app.stream_with_group(1).await;
    let lease = app.fetch("s", "g", json!({})).await.remove(0);
    let body = json!({"event_id": "e1", "lease_id": lease["lease_id"], "receipt": "not-it"});
    let a = app.post("/v1/streams/s/groups/g/ack", body).await;
    assert_eq!(
        (a.status, code(&a)),
        (StatusCode::CONFLICT, "receipt_mismatch")
    );
    let ok = app
        .post("/v1/streams/s/groups/g/ack", lease_ref(&lease))
        .await;
    assert_eq!(ok.status, StatusCode::OK);
}

#[tokio::test]
async fn nack_with_a_delay_makes_the_event_due_again_only_after_it() {
    let app = TestApp::new();
    app.stream_with_group(1).await;
    let lease = app.fetch("s", "g", json!({})).await.remove(0);
    let nack = app
        .post(
            "/v1/streams/s/groups/g/nack",
            lease_ref_with(&lease, json!({"reason": "busy", "delay_ms": 1000})),
        )
        .await;
    assert_eq!(nack.status, StatusCode::OK, "{}", nack.body);
    assert!(app.fetch("s", "g", json!({})).await.is_empty());
    let lag = app.get("/v1/streams/s/groups/g/lag").await;
    assert_eq!(lag.body["waiting_retry"], 1);
    app.clock.advance(1000);
    let retried = app.fetch("s", "g", json!({})).await;
    assert_eq!(retried[0]["attempt"], 2);

    let too_long = app
        .post(
            "/v1/streams/s/groups/g/nack",
            lease_ref_with(&retried[0], json!({"delay_ms": 86_400_001})),
        )
        .await;
    assert_eq!(
        (too_long.status, code(&too_long)),
        (StatusCode::BAD_REQUEST, "invalid")
    );
}

#[tokio::test]
async fn reject_dead_letters_the_delivery_with_its_reason() {
    let app = TestApp::new();
    app.stream_with_group(1).await;
    let lease = app.fetch("s", "g", json!({})).await.remove(0);
    let reject = app
        .post(
            "/v1/streams/s/groups/g/reject",
            lease_ref_with(&lease, json!({"reason": "malformed"})),
        )
        .await;
    assert_eq!(reject.status, StatusCode::OK);
    let dead = app.get("/v1/streams/s/groups/g/dead-letters").await;
    assert_eq!(dead.body["dead_letters"][0]["reason"], "malformed");
    let with_delay = app
        .post(
            "/v1/streams/s/groups/g/reject",
            lease_ref_with(&lease, json!({"delay_ms": 5})),
        )
        .await;
    assert_eq!(code(&with_delay), "invalid", "reject takes no delay");
}

#[tokio::test]
async fn renew_moves_the_expiry_and_is_fenced() {
    let app = TestApp::new();
    app.stream_with_group(1).await;
    let lease = app
        .fetch("s", "g", json!({"lease_ms": 1000}))
        .await
        .remove(0);
    app.clock.advance(500);
    let renewed = app
        .post(
            "/v1/streams/s/groups/g/renew",
            lease_ref_with(&lease, json!({"lease_ms": 2000})),
        )
        .await;
    assert_eq!(renewed.status, StatusCode::OK, "{}", renewed.body);
    assert_eq!(renewed.body["expires_at"], "2026-01-01T00:00:02.500Z");
    assert_eq!(renewed.body["lease_id"], lease["lease_id"]);
    assert_eq!(renewed.body["event"]["id"], "e1");

    let bad = app
        .post(
            "/v1/streams/s/groups/g/renew",
            lease_ref_with(&lease, json!({"lease_ms": 0})),
        )
        .await;
    assert_eq!(code(&bad), "invalid");
    app.post("/v1/streams/s/groups/g/ack", lease_ref(&lease))
        .await;
    let stale = app
        .post("/v1/streams/s/groups/g/renew", lease_ref(&lease))
        .await;
    assert_eq!(
        (stale.status, code(&stale)),
        (StatusCode::CONFLICT, "stale_lease")
    );
}

#[tokio::test]
async fn the_fencing_story_an_expired_lease_reclaimed_elsewhere_cannot_be_acked() {
    let app = TestApp::new();
    app.stream_with_group(1).await;
    let first = app
        .fetch("s", "g", json!({"consumer_id": "a", "lease_ms": 1000}))
        .await
        .remove(0);
    assert!(
        app.fetch("s", "g", json!({"consumer_id": "b"}))
            .await
            .is_empty()
    );

    let moved = app
        .post("/v1/test/clock", json!({"advance_ms": 1000}))
        .await;
    assert_eq!(moved.body["now"], "2026-01-01T00:00:01.000Z");
    let second = app
        .fetch("s", "g", json!({"consumer_id": "b"}))
        .await
        .remove(0);
    assert_eq!(second["event_id"], "e1");
    assert_eq!(second["attempt"], 2);
    assert_ne!(second["lease_id"], first["lease_id"]);

    let stale = app
        .post("/v1/streams/s/groups/g/ack", lease_ref(&first))
        .await;
    assert_eq!(
        (stale.status, code(&stale)),
        (StatusCode::CONFLICT, "stale_lease")
    );
    let ok = app
        .post("/v1/streams/s/groups/g/ack", lease_ref(&second))
        .await;
    assert_eq!(ok.status, StatusCode::OK);
}

#[tokio::test]
async fn an_expired_lease_nobody_reclaimed_can_still_be_acked() {
    let app = TestApp::new();
    app.stream_with_group(1).await;
    let lease = app
        .fetch("s", "g", json!({"lease_ms": 1000}))
        .await
        .remove(0);
    app.clock.advance(5000);
    let ok = app
        .post("/v1/streams/s/groups/g/ack", lease_ref(&lease))
        .await;
    assert_eq!(ok.status, StatusCode::OK);
}

#[tokio::test]
async fn batch_settle_gives_each_operation_its_own_result() {
    let app = TestApp::new();
    app.stream_with_group(3).await;
    let leases = app.fetch("s", "g", json!({})).await;
    let op = |op: &str, lease: &Value, extra: Value| {
        let mut item = lease_ref_with(lease, extra);
        item["op"] = json!(op);
        item
    };
    let body = json!({"settlements": [
        op("ack", &leases[0], json!({})),
        op("nack", &leases[1], json!({"reason": "later", "delay_ms": 10})),
        op("reject", &leases[2], json!({"reason": "bad"})),
        op("ack", &leases[0], json!({})),
    ]});
    let a = app.post("/v1/streams/s/groups/g/settle", body).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let results = a.body["results"].as_array().unwrap();
    assert_eq!(results[0], json!({"event_id": "e1", "ok": true}));
    assert_eq!(results[1], json!({"event_id": "e2", "ok": true}));
    assert_eq!(results[2], json!({"event_id": "e3", "ok": true}));
    assert_eq!(results[3]["ok"], false);
    assert_eq!(results[3]["error"]["code"], "stale_lease");
}

#[tokio::test]
async fn batch_settle_refuses_malformed_operations_and_oversized_batches() {
    let app = TestApp::new();
    app.stream_with_group(1).await;
    let lease = app.fetch("s", "g", json!({})).await.remove(0);
    let with = |extra: Value| json!({"settlements": [lease_ref_with(&lease, extra)]});
    for body in [
        with(json!({"op": "ack", "reason": "x"})),
        with(json!({"op": "explode"})),
        with(json!({})),
        json!({"ops": []}),
    ] {
        let a = app
            .post("/v1/streams/s/groups/g/settle", body.clone())
            .await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::BAD_REQUEST, "invalid"),
            "{body}"
        );
    }
    let item = lease_ref_with(&lease, json!({"op": "ack"}));
    let many: Vec<Value> = (0..1001).map(|_| item.clone()).collect();
    let a = app
        .post(
            "/v1/streams/s/groups/g/settle",
            json!({"settlements": many}),
        )
        .await;
    assert_eq!((a.status, code(&a)), (StatusCode::BAD_REQUEST, "invalid"));
    assert!(
        a.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1000")
    );
    let still_leased = app
        .post("/v1/streams/s/groups/g/ack", lease_ref(&lease))
        .await;
    assert_eq!(
        still_leased.status,
        StatusCode::OK,
        "the refused batch changed nothing"
    );
}
