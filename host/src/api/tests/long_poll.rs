//! Long-polling fetches: woken by appends and by the clock reaching an
//! expiry, ended by their deadline or by shutdown.
//!
//! A waiting fetch is spawned, then the test yields so it runs up to its
//! wait before the test acts. (If it had not got there yet, its first fetch
//! would find the work directly: the tests would still pass, they would
//! just not be exercising the wake-up.) Time only moves by the frozen
//! clock, or by tokio's paused clock for the deadline.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::{Answer, TestApp, json_request};

/// Starts `POST …/fetch` with `body` in the background.
fn spawn_fetch(app: &TestApp, body: Value) -> JoinHandle<Answer> {
    let request = json_request(Method::POST, "/v1/streams/s/groups/g/fetch", Some(body));
    let app = app.clone();
    tokio::spawn(async move { app.call(request).await })
}

/// Lets spawned tasks run until they block.
async fn settle_tasks() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// Awaits a spawned fetch, failing (not hanging) if it never answers.
async fn answer(fetch: JoinHandle<Answer>) -> Answer {
    tokio::time::timeout(Duration::from_secs(10), fetch)
        .await
        .expect("the long poll answered")
        .expect("the fetch task did not panic")
}

#[tokio::test]
async fn a_waiting_fetch_wakes_when_an_event_is_appended() {
    let app = TestApp::new();
    app.stream_with_group(0).await;
    let fetch = spawn_fetch(&app, json!({"wait_ms": 30_000}));
    settle_tasks().await;
    assert!(!fetch.is_finished(), "nothing to claim yet, so it waits");

    app.append("s", json!({"id": "late"})).await;
    let a = answer(fetch).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.body["leases"][0]["event_id"], "late");
}

#[tokio::test]
async fn a_waiting_fetch_wakes_when_the_clock_reaches_a_lease_expiry() {
    let app = TestApp::new();
    app.stream_with_group(1).await;
    let first = app.fetch("s", "g", json!({"lease_ms": 1000})).await;
    assert_eq!(first.len(), 1);
    let fetch = spawn_fetch(&app, json!({"wait_ms": 30_000}));
    settle_tasks().await;
    assert!(!fetch.is_finished());

    app.post("/v1/test/clock", json!({"advance_ms": 999})).await;
    settle_tasks().await;
    assert!(!fetch.is_finished(), "not expired yet");
    app.post("/v1/test/clock", json!({"advance_ms": 1})).await;
    let a = answer(fetch).await;
    assert_eq!(a.body["leases"][0]["event_id"], "e1");
    assert_eq!(a.body["leases"][0]["attempt"], 2);
}

#[tokio::test]
async fn a_waiting_fetch_wakes_when_a_nack_delay_ends() {
    let app = TestApp::new();
    app.stream_with_group(1).await;
    let lease = app.fetch("s", "g", json!({})).await.remove(0);
    let nack = super::lease_ref_with(&lease, json!({"delay_ms": 250}));
    app.post("/v1/streams/s/groups/g/nack", nack).await;
    let fetch = spawn_fetch(&app, json!({"wait_ms": 30_000}));
    settle_tasks().await;
    assert!(!fetch.is_finished());
    app.clock.advance(250);
    let a = answer(fetch).await;
    assert_eq!(a.body["leases"][0]["attempt"], 2);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_fetch_answers_empty_at_its_deadline() {
    let app = TestApp::new();
    app.stream_with_group(0).await;
    let started = tokio::time::Instant::now();
    let leases = app.fetch("s", "g", json!({"wait_ms": 1500})).await;
    assert!(leases.is_empty());
    // Tokio's paused clock jumped straight to the deadline: no real sleep.
    assert_eq!(started.elapsed(), Duration::from_millis(1500));
}

#[tokio::test]
async fn without_wait_ms_an_empty_fetch_answers_at_once() {
    let app = TestApp::new();
    app.stream_with_group(0).await;
    let fetch = spawn_fetch(&app, json!({}));
    let a = answer(fetch).await;
    assert_eq!(a.body, json!({"leases": []}));
}

#[tokio::test]
async fn shutdown_ends_waiting_fetches_with_what_they_have() {
    let app = TestApp::new();
    app.stream_with_group(0).await;
    let fetch = spawn_fetch(&app, json!({"wait_ms": 30_000}));
    settle_tasks().await;
    assert!(!fetch.is_finished());
    app.state.start_draining();
    let a = answer(fetch).await;
    assert_eq!((a.status, a.body), (StatusCode::OK, json!({"leases": []})));
}

#[tokio::test]
async fn an_append_to_another_stream_does_not_satisfy_the_wait() {
    let app = TestApp::new();
    app.stream_with_group(0).await;
    app.stream("other", 1).await;
    let fetch = spawn_fetch(&app, json!({"wait_ms": 30_000}));
    settle_tasks().await;
    app.append("other", json!({})).await;
    settle_tasks().await;
    assert!(!fetch.is_finished(), "still waiting for its own stream");
    app.append("s", json!({"id": "mine"})).await;
    assert_eq!(answer(fetch).await.body["leases"][0]["event_id"], "mine");
}
