//! Numbers at the edge of what every store holds: sequences and instants
//! past the representable range are 400 `invalid` naming the field, and
//! payload numbers of any size come back exactly as sent.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{TestApp, code};

/// Parses JSON text whose numbers `json!` cannot write (past `u64`).
fn body(text: &str) -> Value {
    serde_json::from_str(text).expect("valid JSON")
}

#[tokio::test]
async fn out_of_range_start_points_are_400_on_create_and_reset() {
    let app = TestApp::new();
    app.stream_with_group(2).await;
    let cases = [
        (r#"{"start_after": 18446744073709551615}"#, "start_after"),
        (r#"{"start_after": 9007199254740992}"#, "start_after"),
        (r#"{"start_after": 18446744073709551616}"#, "start_after"),
        // Not a whole number (`1e3` is one: 1000, as JSON Schema counts).
        (r#"{"start_after": 1000.5}"#, "start_after"),
        (
            r#"{"start_after": {"0": 18446744073709551615}}"#,
            "start_after.0",
        ),
        // refused by the timestamp parser, which names no field
        (r#"{"start_at": "+10000-01-01T00:00:00Z"}"#, ""),
    ];
    for (options, field) in cases {
        let mut create = body(options);
        create["name"] = json!("h");
        let mut reset = body(options);
        reset["confirm"] = json!(true);
        for (uri, request) in [
            ("/v1/streams/s/groups", create),
            ("/v1/streams/s/groups/g/reset", reset),
        ] {
            let a = app.post(uri, request).await;
            assert_eq!(
                (a.status, code(&a)),
                (StatusCode::BAD_REQUEST, "invalid"),
                "{uri} {options}"
            );
            let message = a.body["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains(field), "{uri} {options}: {message}");
        }
    }
    let groups = app.get("/v1/streams/s/groups").await;
    assert_eq!(groups.body["groups"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        app.fetch("s", "g", json!({})).await.len(),
        2,
        "g is untouched"
    );

    let at_max = app
        .post(
            "/v1/streams/s/groups",
            json!({"name": "h", "start_after": 9_007_199_254_740_991_u64}),
        )
        .await;
    assert_eq!(at_max.status, StatusCode::CREATED, "{}", at_max.body);
    let lag = app.get("/v1/streams/s/groups/h/lag").await;
    assert_eq!(
        lag.body["partitions"]["0"],
        json!({"frontier": 9_007_199_254_740_991_u64, "high_watermark": 2, "lag": 0})
    );
    assert!(app.fetch("s", "h", json!({})).await.is_empty());
}

#[tokio::test]
async fn out_of_range_positions_are_400_naming_the_field() {
    let app = TestApp::new();
    app.stream_with_group(2).await;
    let beyond = "18446744073709551615";
    let reads = [
        (format!("/v1/streams/s/events?after={beyond}"), "after"),
        (
            "/v1/streams/s/events?after=9007199254740992".into(),
            "after",
        ),
        (format!("/v1/streams/s/events?after={beyond}0"), ""),
    ];
    for (uri, field) in reads {
        let a = app.get(&uri).await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::BAD_REQUEST, "invalid"),
            "{uri}"
        );
        assert!(
            a.body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains(field)
        );
    }
    let posts = [
        (
            "query",
            format!(r#"{{"after_sequence": {beyond}}}"#),
            "after_sequence",
        ),
        (
            "query",
            format!(r#"{{"until_sequence": {beyond}}}"#),
            "until_sequence",
        ),
        ("query", format!(r#"{{"after_sequence": {beyond}0}}"#), ""),
        ("query", r#"{"to": "+10000-01-01T00:00:00Z"}"#.into(), ""),
        (
            "groups/g/replay",
            format!(r#"{{"from_sequence": {beyond}}}"#),
            "from_sequence",
        ),
        (
            "groups/g/replay",
            format!(r#"{{"query": {{"until_sequence": {beyond}}}}}"#),
            "until_sequence",
        ),
    ];
    for (path, request, field) in posts {
        let a = app
            .post(&format!("/v1/streams/s/{path}"), body(&request))
            .await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::BAD_REQUEST, "invalid"),
            "{path} {request}"
        );
        let message = a.body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(field), "{path} {request}: {message}");
    }
    assert_eq!(
        app.fetch("s", "g", json!({})).await.len(),
        2,
        "nothing moved"
    );
}

/// The payload and metadata of the exact-number test, as sent.
const PAYLOAD: &str = r#"{"f":1.5,"n":18446744073709551617,"neg":-18446744073709551617}"#;
const METADATA: &str = r#"{"big":123456789012345678901234567890,"correlation_id":"c1"}"#;

#[tokio::test]
async fn payload_numbers_read_back_exactly_from_every_route() {
    let app = TestApp::new();
    app.stream_with_group(0).await;
    let event = format!(r#"{{"id": "big", "payload": {PAYLOAD}, "metadata": {METADATA}}}"#);
    let appended = app.append("s", body(&event)).await;
    let read = app.get("/v1/streams/s/events").await.body;
    let queried = app.post("/v1/streams/s/query", json!({})).await.body;
    let filtered = app
        .post(
            "/v1/streams/s/query",
            json!({"where": {"correlation_id": "c1"}}),
        )
        .await
        .body;
    let leases = app.fetch("s", "g", json!({})).await;
    let seen = [
        ("append", &appended),
        ("read", &read["events"][0]),
        ("query", &queried["events"][0]),
        ("filtered query", &filtered["events"][0]),
        ("fetch", &leases[0]["event"]),
    ];
    for (route, event) in seen {
        assert_eq!(event["payload"].to_string(), PAYLOAD, "{route}");
        assert_eq!(event["metadata"].to_string(), METADATA, "{route}");
    }
}
