//! The test clock routes, with and without `--test-clock`.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::json;

use super::{START, TestApp, code};
use crate::clock::Clock;

#[tokio::test]
async fn the_test_clock_can_be_read_set_and_advanced() {
    let app = TestApp::new();
    let now = app.get("/v1/test/clock").await;
    assert_eq!(
        (now.status, now.body),
        (StatusCode::OK, json!({"now": "2026-01-01T00:00:00.000Z"}))
    );
    let advanced = app
        .post("/v1/test/clock", json!({"advance_ms": 1500}))
        .await;
    assert_eq!(advanced.body["now"], "2026-01-01T00:00:01.500Z");
    assert_eq!(
        app.clock.now(),
        START.add_ms(1500),
        "the backend's clock moved"
    );

    let set = app
        .post(
            "/v1/test/clock",
            json!({"set": "2030-06-01T12:00:00+02:00", "advance_ms": 1}),
        )
        .await;
    assert_eq!(
        set.body["now"], "2030-06-01T10:00:00.001Z",
        "set, then advance"
    );

    let empty = Request::builder()
        .method(Method::POST)
        .uri("/v1/test/clock")
        .body(Body::empty())
        .expect("a valid request");
    let unchanged = app.call(empty).await;
    assert_eq!(unchanged.body["now"], "2030-06-01T10:00:00.001Z");
}

#[tokio::test]
async fn bad_clock_moves_are_400() {
    let app = TestApp::new();
    for body in [
        json!({"set": "noon"}),
        json!({"advance_ms": -5}),
        json!({"rewind_ms": 5}),
    ] {
        let a = app.post("/v1/test/clock", body.clone()).await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::BAD_REQUEST, "invalid"),
            "{body}"
        );
    }
    assert_eq!(app.clock.now(), START);
}

#[tokio::test]
async fn the_test_clock_never_leaves_the_printable_range() {
    let app = TestApp::new();
    let refused = |a: &super::Answer| (a.status, code(a).to_owned(), a.body["error"].clone());
    for body in [
        json!({"advance_ms": u64::MAX}),
        json!({"advance_ms": i64::MAX}),
        json!({"set": "9999-12-31T23:59:59.999Z", "advance_ms": 1}),
    ] {
        let a = app.post("/v1/test/clock", body.clone()).await;
        let (status, code, error) = refused(&a);
        assert_eq!(
            (status, code.as_str()),
            (StatusCode::BAD_REQUEST, "invalid")
        );
        assert!(error.to_string().contains("advance_ms"), "{body}: {error}");
        assert_eq!(app.clock.now(), START, "a refused move changes nothing");
    }
    for set in ["+10000-01-01T00:00:00Z", "1969-12-31T23:59:59Z"] {
        let a = app.post("/v1/test/clock", json!({ "set": set })).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{set}: {}", a.body);
    }
    let last = app
        .post(
            "/v1/test/clock",
            json!({"set": "9999-12-31T23:59:58.999Z", "advance_ms": 1000}),
        )
        .await;
    assert_eq!(
        (last.status, last.body),
        (StatusCode::OK, json!({"now": "9999-12-31T23:59:59.999Z"}))
    );
    let read = app.get("/v1/test/clock").await;
    assert_eq!(read.body["now"], "9999-12-31T23:59:59.999Z");
}

#[tokio::test]
async fn without_the_test_clock_the_routes_are_404() {
    let app = TestApp::without_test_clock();
    let get = app.get("/v1/test/clock").await;
    assert_eq!(
        (get.status, code(&get)),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let post = app
        .post("/v1/test/clock", json!({"advance_ms": 1000}))
        .await;
    assert_eq!(
        (post.status, code(&post)),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let garbage = Request::builder()
        .method(Method::POST)
        .uri("/v1/test/clock")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from("tick"))
        .expect("a valid request");
    assert_eq!(app.call(garbage).await.status, StatusCode::NOT_FOUND);
    assert_eq!(app.clock.now(), START, "nothing moved");
}
