//! Groups: create, list, info, lag.

use axum::http::StatusCode;
use serde_json::json;

use super::{TestApp, code};
use crate::api::ApiSettings;

#[tokio::test]
async fn create_answers_201_with_the_group() {
    let app = TestApp::new();
    app.stream("s", 1).await;
    let a = app
        .post(
            "/v1/streams/s/groups",
            json!({"name": "g", "max_attempts": 3, "retry_backoff_ms": [100, 1000]}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED);
    assert_eq!(
        a.body,
        json!({
            "stream": "s", "name": "g", "max_attempts": 3,
            "retry_backoff_ms": [100, 1000], "ordering": "none",
            "on_exhausted": "dead_letter", "flow": {}, "created_at": "2026-01-01T00:00:00.000Z",
        })
    );
}

#[tokio::test]
async fn a_key_rate_is_taken_with_its_default_burst_and_its_ranges_checked() {
    let app = TestApp::new();
    app.stream("s", 1).await;
    let a = app
        .post(
            "/v1/streams/s/groups",
            json!({"name": "g", "ordering": "key", "flow": {"key_rate": {"per_second": 0.5}}}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    let rate = json!({"key_rate": {"per_second": 0.5, "burst": 1}});
    assert_eq!(a.body["flow"], rate);
    assert_eq!(app.get("/v1/streams/s/groups/g").await.body["flow"], rate);
    for (bad, field) in [
        (
            json!({"name": "h", "flow": {"key_rate": {"per_second": 0}}}),
            "flow.key_rate.per_second",
        ),
        (
            json!({"name": "h", "flow": {"key_rate": {"per_second": 1, "burst": 0}}}),
            "flow.key_rate.burst",
        ),
        (
            json!({"name": "h", "flow": {"key_rate": {"per_sec": 1}}}),
            "per_sec",
        ),
    ] {
        let a = app.post("/v1/streams/s/groups", bad.clone()).await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::BAD_REQUEST, "invalid"),
            "{bad}: {}",
            a.body
        );
        let message = a.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{bad}: {message}");
    }
}

#[tokio::test]
async fn a_flow_is_taken_at_creation_shown_and_changed_by_a_reset_of_every_partition() {
    let app = TestApp::new();
    app.stream("s", 2).await;
    let a = app
        .post(
            "/v1/streams/s/groups",
            json!({"name": "g", "flow": {"key_concurrency": 3}}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    assert_eq!(a.body["flow"], json!({"key_concurrency": 3}));
    let info = app.get("/v1/streams/s/groups/g").await;
    assert_eq!(info.body["flow"], json!({"key_concurrency": 3}));
    let list = app.get("/v1/streams/s/groups").await;
    assert_eq!(
        list.body["groups"][0]["flow"],
        json!({"key_concurrency": 3})
    );
    for (bad, field) in [
        (
            json!({"name": "h", "flow": {"key_concurrency": 0}}),
            "flow.key_concurrency",
        ),
        (
            json!({"name": "h", "ordering": "key", "flow": {"key_concurrency": 2}}),
            "flow.key_concurrency",
        ),
        (json!({"name": "h", "flow": {"key_concurency": 2}}), ""),
        (json!({"name": "h", "flow": {"key_concurrency": -1}}), ""),
    ] {
        let a = app.post("/v1/streams/s/groups", bad.clone()).await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::BAD_REQUEST, "invalid"),
            "{bad}: {}",
            a.body
        );
        assert!(
            a.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(if field.is_empty() {
                    "key_concur"
                } else {
                    field
                }),
            "{}",
            a.body
        );
    }
    // A reset changes it for every partition, or refuses and changes nothing.
    let partial = app
        .post(
            "/v1/streams/s/groups/g/reset",
            json!({"confirm": true, "partitions": [0], "flow": {}}),
        )
        .await;
    assert_eq!(
        (partial.status, code(&partial)),
        (StatusCode::BAD_REQUEST, "invalid")
    );
    let keyed = app
        .post(
            "/v1/streams/s/groups/g/reset",
            json!({"confirm": true, "ordering": "key"}),
        )
        .await;
    assert_eq!(
        (keyed.status, code(&keyed)),
        (StatusCode::BAD_REQUEST, "invalid")
    );
    let info = app.get("/v1/streams/s/groups/g").await;
    assert_eq!(
        (info.body["ordering"].clone(), info.body["flow"].clone()),
        (json!("none"), json!({"key_concurrency": 3}))
    );
    let both = app
        .post(
            "/v1/streams/s/groups/g/reset",
            json!({"confirm": true, "ordering": "key", "flow": {}}),
        )
        .await;
    assert_eq!(both.status, StatusCode::OK, "{}", both.body);
    let info = app.get("/v1/streams/s/groups/g").await;
    assert_eq!(
        (info.body["ordering"].clone(), info.body["flow"].clone()),
        (json!("key"), json!({}))
    );
}

#[tokio::test]
async fn an_ordering_is_taken_at_creation_and_shown() {
    let app = TestApp::new();
    app.stream("s", 1).await;
    let a = app
        .post(
            "/v1/streams/s/groups",
            json!({"name": "g", "ordering": "key"}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    assert_eq!(a.body["ordering"], "key");
    let info = app.get("/v1/streams/s/groups/g").await;
    assert_eq!(info.body["ordering"], "key");
    let list = app.get("/v1/streams/s/groups").await;
    assert_eq!(list.body["groups"][0]["ordering"], "key");
    for bad in [json!("Key"), json!("keys"), json!(1), json!(null)] {
        let a = app
            .post(
                "/v1/streams/s/groups",
                json!({"name": "h", "ordering": bad}),
            )
            .await;
        if bad.is_null() {
            // null is "not given": the default.
            assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
            assert_eq!(a.body["ordering"], "none");
            continue;
        }
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::BAD_REQUEST, "invalid"),
            "{bad}: {}",
            a.body
        );
    }
}

#[tokio::test]
async fn create_refuses_duplicates_unknown_streams_and_bad_options() {
    let app = TestApp::new();
    app.stream("s", 2).await;
    app.group("s", "g").await;
    let dup = app.post("/v1/streams/s/groups", json!({"name": "g"})).await;
    assert_eq!(
        (dup.status, code(&dup)),
        (StatusCode::CONFLICT, "already_exists")
    );
    let missing = app
        .post("/v1/streams/nope/groups", json!({"name": "g"}))
        .await;
    assert_eq!(
        (missing.status, code(&missing)),
        (StatusCode::NOT_FOUND, "stream_not_found")
    );
    let cases = [
        (json!({"name": "h", "max_attempts": 0}), "invalid"),
        (
            json!({"name": "h", "start_after": 1, "start_at": "2026-01-01T00:00:00Z"}),
            "invalid",
        ),
        (json!({"name": "h", "start_after": "1"}), "invalid"),
        (
            json!({"name": "h", "start_after": {"5": 1}}),
            "invalid_partition",
        ),
        (
            json!({"name": "h", "retry_backoff_ms": [86_400_001]}),
            "invalid",
        ),
        (json!({"name": "bad name"}), "invalid"),
        (json!({"nam": "h"}), "invalid"),
    ];
    for (body, expected) in cases {
        let a = app.post("/v1/streams/s/groups", body.clone()).await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::BAD_REQUEST, expected),
            "{body}"
        );
    }
}

#[tokio::test]
async fn start_points_set_the_frontier_so_lag_is_right_at_once() {
    let app = TestApp::new();
    app.stream("s", 2).await;
    for p in [0, 0, 0, 1, 1] {
        app.append("s", json!({"partition": p})).await;
    }
    let after_map = app
        .post(
            "/v1/streams/s/groups",
            json!({"name": "m", "start_after": {"0": 2}}),
        )
        .await;
    assert_eq!(after_map.status, StatusCode::CREATED, "{}", after_map.body);
    let lag = app.get("/v1/streams/s/groups/m/lag").await;
    assert_eq!(lag.body["partitions"]["0"]["frontier"], 2);
    assert_eq!(lag.body["partitions"]["1"]["frontier"], 0);
    assert_eq!(lag.body["lag"], 3);

    app.clock.advance(1_000);
    app.post(
        "/v1/streams/s/groups",
        json!({"name": "new", "start_at": "2026-01-01T00:00:01Z"}),
    )
    .await;
    let lag = app.get("/v1/streams/s/groups/new/lag").await;
    assert_eq!(lag.body["lag"], 0, "only events from now on");
}

#[tokio::test]
async fn list_is_sorted_and_info_has_lag_cursors_and_counts() {
    let app = TestApp::new();
    app.stream("s", 2).await;
    app.group("s", "b").await;
    app.group("s", "a").await;
    app.append("s", json!({"partition": 1})).await;
    let list = app.get("/v1/streams/s/groups").await;
    let names: Vec<&str> = list.body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);

    let leases = app.fetch("s", "a", json!({})).await;
    assert_eq!(leases.len(), 1);
    let info = app.get("/v1/streams/s/groups/a").await;
    assert_eq!(info.status, StatusCode::OK);
    assert_eq!(info.body["group"], "a");
    assert_eq!(info.body["max_attempts"], 5);
    assert_eq!(info.body["inflight"], 1);
    assert_eq!(info.body["dead_letters"], 0);
    assert_eq!(info.body["cursors"], json!({"0": 1, "1": 2}));
    assert_eq!(info.body["lag"]["lag"], 1);
    assert_eq!(info.body["lag"]["inflight"], 1);
}

#[tokio::test]
async fn lag_reports_selected_partitions_and_refuses_bad_lists() {
    let app = TestApp::new();
    app.stream("s", 3).await;
    app.group("s", "g").await;
    for p in [0, 1, 1, 2] {
        app.append("s", json!({"partition": p})).await;
    }
    let lag = app.get("/v1/streams/s/groups/g/lag?partitions=1,2").await;
    assert_eq!(lag.status, StatusCode::OK);
    assert_eq!(
        lag.body["partitions"],
        json!({
            "1": {"frontier": 0, "high_watermark": 2, "lag": 2},
            "2": {"frontier": 0, "high_watermark": 1, "lag": 1},
        })
    );
    assert_eq!(lag.body["lag"], 3);
    assert_eq!(lag.body["pending"], 3);
    assert_eq!(lag.body["oldest_unacked_age_ms"], 0);
    let none = app.get("/v1/streams/s/groups/g/lag?partitions=").await;
    assert_eq!(none.body["lag"], 0);
    assert_eq!(none.body["partitions"], json!({}));

    let bad = app.get("/v1/streams/s/groups/g/lag?partitions=one").await;
    assert_eq!(
        (bad.status, code(&bad)),
        (StatusCode::BAD_REQUEST, "invalid")
    );
    let out_of_range = app.get("/v1/streams/s/groups/g/lag?partitions=3").await;
    assert_eq!(code(&out_of_range), "invalid_partition");
}

#[tokio::test]
async fn unknown_groups_and_streams_are_404_with_the_stream_checked_first() {
    let app = TestApp::new();
    app.stream("s", 1).await;
    for uri in [
        "/v1/streams/s/groups/nope",
        "/v1/streams/s/groups/nope/lag",
        "/v1/streams/s/groups/nope/dead-letters",
    ] {
        let a = app.get(uri).await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::NOT_FOUND, "group_not_found"),
            "{uri}"
        );
    }
    let a = app.get("/v1/streams/nope/groups/nope").await;
    assert_eq!(code(&a), "stream_not_found");
    let listed = app.get("/v1/streams/nope/groups").await;
    assert_eq!(code(&listed), "stream_not_found");
}

#[tokio::test]
async fn the_configured_default_max_attempts_applies_to_new_groups() {
    let app = TestApp::with_settings(ApiSettings {
        default_max_attempts: 2,
        ..ApiSettings::default()
    });
    app.stream("s", 1).await;
    app.group("s", "g").await;
    let info = app.get("/v1/streams/s/groups/g").await;
    assert_eq!(info.body["max_attempts"], 2);
}

/// `GET …/leases`: what the group has out, with holder, attempt, age and
/// expiry, a page at a time; expired leases stay listed, marked.
#[tokio::test]
async fn leases_answer_what_is_out_a_page_at_a_time() {
    let app = TestApp::new();
    app.stream_with_group(3).await;
    let leases = app
        .fetch(
            "s",
            "g",
            json!({"limit": 2, "consumer_id": "w-1", "lease_ms": 5000}),
        )
        .await;
    app.clock.advance(1_000);
    let a = app.get("/v1/streams/s/groups/g/leases").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let listed = |i: usize, expired: bool, left: u64| {
        json!({
            "lease_id": leases[i]["lease_id"], "event_id": format!("e{}", i + 1),
            "partition": 0, "sequence": i + 1, "consumer_id": "w-1", "attempt": 1,
            "leased_at": "2026-01-01T00:00:00.000Z",
            "expires_at": "2026-01-01T00:00:05.000Z",
            "age_ms": 5_000 - left, "expires_in_ms": left, "expired": expired,
        })
    };
    assert_eq!(
        a.body,
        json!({
            "now": "2026-01-01T00:00:01.000Z",
            "leases": [listed(0, false, 4_000), listed(1, false, 4_000)],
            "next": null,
        })
    );
    let first = app.get("/v1/streams/s/groups/g/leases?limit=1").await;
    assert_eq!(first.body["next"], "0:1");
    assert_eq!(first.body["leases"], json!([listed(0, false, 4_000)]));
    let second = app
        .get("/v1/streams/s/groups/g/leases?limit=1&after=0:1")
        .await;
    assert_eq!(
        (second.body["leases"].clone(), second.body["next"].clone()),
        (json!([listed(1, false, 4_000)]), json!(null))
    );
    app.clock.advance(4_000);
    let a = app.get("/v1/streams/s/groups/g/leases").await;
    assert_eq!(
        a.body["leases"],
        json!([listed(0, true, 0), listed(1, true, 0)])
    );

    for (uri, status, expected) in [
        ("/v1/streams/s/groups/g/leases?limit=0", 400, "invalid"),
        ("/v1/streams/s/groups/g/leases?limit=1001", 400, "invalid"),
        ("/v1/streams/s/groups/g/leases?after=1", 400, "invalid"),
        ("/v1/streams/s/groups/g/leases?after=a:1", 400, "invalid"),
        ("/v1/streams/s/groups/g/leases?other=1", 400, "invalid"),
        ("/v1/streams/s/groups/nope/leases", 404, "group_not_found"),
        ("/v1/streams/nope/groups/g/leases", 404, "stream_not_found"),
    ] {
        let a = app.get(uri).await;
        assert_eq!((a.status.as_u16(), code(&a)), (status, expected), "{uri}");
    }
}
