//! Retention over HTTP (`docs/log.md#retention`): set on creation and by
//! `PATCH`, shown on the stream, applied by the server's trimmer (one
//! tick run here), and what the groups see afterwards.

use axum::http::{Method, StatusCode};
use serde_json::json;

use super::{TestApp, code, lease_ref};

async fn tick(app: &TestApp) -> u64 {
    crate::retention::tick(&**app.state.backend(), &app.state.metrics).await
}

#[tokio::test]
async fn a_stream_is_created_with_a_retention_and_shows_it() {
    let app = TestApp::new();
    let a = app
        .post(
            "/v1/streams",
            json!({"name": "s", "partition_count": 2,
                   "retention": {"max_age_ms": 604_800_000, "max_events": 1000}}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    let want = json!({"max_age_ms": 604_800_000, "max_events": 1000, "policy": "limits"});
    assert_eq!(a.body["retention"], want);
    assert_eq!(a.body["partitions"]["1"]["first_sequence"], 1);
    for bad in [
        json!({"name": "t", "retention": {}}),
        json!({"name": "t", "retention": {"max_events": 0}}),
        json!({"name": "t", "retention": {"max_events": 5, "policy": "forever"}}),
        json!({"name": "t", "retention": {"max_events": 5, "keep": true}}),
    ] {
        let a = app.post("/v1/streams", bad.clone()).await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::BAD_REQUEST, "invalid"),
            "{bad}"
        );
    }
    assert_eq!(
        app.get("/v1/streams").await.body["streams"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn patch_changes_and_clears_the_retention() {
    let app = TestApp::new();
    app.stream("s", 1).await;
    assert_eq!(
        app.get("/v1/streams/s").await.body["retention"],
        json!(null)
    );
    let patch = |body| app.send(Method::PATCH, "/v1/streams/s", Some(body));
    let a = patch(json!({"retention": {"policy": "interest"}})).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(a.body["retention"], json!({"policy": "interest"}));
    let a = patch(json!({"retention": {"policy": "limits"}})).await;
    assert_eq!(code(&a), "invalid", "limits without a limit");
    let a = patch(json!({"retention": null})).await;
    assert_eq!(
        (a.status, &a.body["retention"]),
        (StatusCode::OK, &json!(null))
    );
    let a = app
        .send(
            Method::PATCH,
            "/v1/streams/nope",
            Some(json!({"retention": null})),
        )
        .await;
    assert_eq!(code(&a), "stream_not_found");
}

#[tokio::test]
async fn the_trimmer_removes_events_and_groups_see_what_it_skipped() {
    let app = TestApp::new();
    app.stream_with_group(5).await;
    let leases = app.fetch("s", "g", json!({"limit": 2})).await;
    let a = app
        .post("/v1/streams/s/groups/g/reject", lease_ref(&leases[0]))
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let a = app
        .send(
            Method::PATCH,
            "/v1/streams/s",
            Some(json!({"retention": {"max_events": 2}})),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(tick(&app).await, 3);

    let s = app.get("/v1/streams/s").await.body;
    assert_eq!(
        s["partitions"]["0"],
        json!({"high_watermark": 5, "first_sequence": 4})
    );
    let info = app.get("/v1/streams/s/groups/g").await.body;
    // e2 was leased, e3 never delivered; e1 was dead-lettered.
    assert_eq!(info["skipped_by_retention"], 2);
    assert_eq!(info["lag"]["lag"], 2);
    let dead = app.get("/v1/streams/s/groups/g/dead-letters").await.body;
    assert_eq!(dead["dead_letters"][0]["event_id"], "e1");
    assert_eq!(dead["dead_letters"][0]["event"], json!(null));
    let a = app
        .post("/v1/streams/s/groups/g/ack", lease_ref(&leases[1]))
        .await;
    assert_eq!((a.status, code(&a)), (StatusCode::GONE, "event_removed"));
    let events = app.get("/v1/streams/s/events?partition=0").await.body;
    let ids: Vec<_> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].clone())
        .collect();
    assert_eq!(ids, [json!("e4"), json!("e5")]);
    let metrics = app.get("/metrics").await.body;
    let text = metrics.as_str().unwrap_or_default();
    assert!(
        text.contains("rheo_retention_removed_events_total{stream=\"s\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("rheo_retention_skipped_events_total{stream=\"s\",group=\"g\"} 2"),
        "{text}"
    );
}
