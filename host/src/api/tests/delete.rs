//! `DELETE /v1/streams/{stream}` and `DELETE /v1/streams/{stream}/groups/{group}`
//! (`docs/operations.md#deleting-streams-and-groups`).

use axum::http::{Method, StatusCode};
use serde_json::json;

use super::{TestApp, code, lease_ref};

async fn delete(app: &TestApp, uri: &str) -> super::Answer {
    app.send(Method::DELETE, uri, None).await
}

#[tokio::test]
async fn a_delete_without_confirm_is_refused_and_changes_nothing() {
    let app = TestApp::new();
    app.stream_with_group(2).await;
    for uri in [
        "/v1/streams/s",
        "/v1/streams/s?confirm=false",
        "/v1/streams/nope",
        "/v1/streams/s/groups/g",
        "/v1/streams/s/groups/g?force=true",
    ] {
        let a = delete(&app, uri).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{uri}: {}", a.body);
        assert_eq!(code(&a), "confirm_required", "{uri}");
    }
    let a = delete(&app, "/v1/streams/s?confirm=yes").await;
    assert_eq!((a.status, code(&a)), (StatusCode::BAD_REQUEST, "invalid"));
    assert_eq!(app.get("/v1/streams/s/groups/g/lag").await.body["lag"], 2);
}

#[tokio::test]
async fn unknown_names_are_404() {
    let app = TestApp::new();
    app.stream("s", 1).await;
    let a = delete(&app, "/v1/streams/nope?confirm=true").await;
    assert_eq!(
        (a.status, code(&a)),
        (StatusCode::NOT_FOUND, "stream_not_found")
    );
    let a = delete(&app, "/v1/streams/s/groups/nope?confirm=true").await;
    assert_eq!(
        (a.status, code(&a)),
        (StatusCode::NOT_FOUND, "group_not_found")
    );
}

#[tokio::test]
async fn deleting_a_group_forgets_it_and_a_new_one_starts_afresh() {
    let app = TestApp::new();
    app.stream_with_group(3).await;
    let leases = app.fetch("s", "g", json!({"limit": 3})).await;
    let a = delete(&app, "/v1/streams/s/groups/g?confirm=true").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(a.body, json!({"deleted": true, "removed_handlers": []}));
    let a = app.get("/v1/streams/s/groups/g").await;
    assert_eq!(code(&a), "group_not_found");
    let a = app
        .post("/v1/streams/s/groups/g/ack", lease_ref(&leases[0]))
        .await;
    assert_eq!(code(&a), "group_not_found");
    app.group("s", "g").await;
    assert_eq!(app.get("/v1/streams/s/groups/g/lag").await.body["lag"], 3);
}

#[tokio::test]
async fn deleting_a_stream_and_creating_it_again_starts_empty() {
    let app = TestApp::new();
    app.stream_with_group(3).await;
    let a = delete(&app, "/v1/streams/s?confirm=true").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(app.get("/v1/streams").await.body["streams"], json!([]));
    let a = app.get("/v1/streams/s/groups").await;
    assert_eq!(code(&a), "stream_not_found");
    app.stream("s", 2).await;
    let s = app.get("/v1/streams/s").await.body;
    assert_eq!(s["partition_count"], 2);
    assert_eq!(s["partitions"]["0"]["high_watermark"], 0);
    assert_eq!(
        app.get("/v1/streams/s/groups").await.body["groups"],
        json!([])
    );
}

/// A handler consuming a group: deleting the group or its stream is a 409
/// naming it, until `force=true` removes it first.
#[cfg(feature = "wasm")]
#[tokio::test]
async fn a_handler_bound_to_it_holds_a_delete_back_until_forced() {
    use std::sync::Arc;

    use crate::api::{ApiSettings, AppState, router};
    use crate::backend::Backend;
    use crate::backend::memory::MemoryBackend;
    use crate::clock::FrozenClock;
    use crate::handlers::{HandlerRegistry, Manifest};
    use crate::model::{GroupName, HandlerName, StreamName};
    use rheo_wasm::testing::{engine, guest};

    let clock = FrozenClock::new(super::START);
    let backend: Arc<dyn Backend> = Arc::new(MemoryBackend::new(clock.clone()));
    let registry = Arc::new(HandlerRegistry::new(engine(), Arc::clone(&backend), None).unwrap());
    let state = AppState::new(backend, ApiSettings::default())
        .with_test_clock(clock.clone())
        .with_handlers(Arc::clone(&registry));
    let app = TestApp {
        router: router(state.clone()),
        state,
        clock,
    };
    app.stream_with_group(2).await;
    app.group("s", "other").await;
    let manifest = Manifest::new(
        StreamName::parse("s").unwrap(),
        GroupName::parse("g").unwrap(),
    );
    let worker = HandlerName::parse("worker").unwrap();
    (registry
        .deploy(worker.clone(), manifest, guest("echo"))
        .await)
        .expect("deploy");

    for uri in [
        "/v1/streams/s?confirm=true",
        "/v1/streams/s/groups/g?confirm=true",
    ] {
        let a = delete(&app, uri).await;
        assert_eq!(
            (a.status, code(&a)),
            (StatusCode::CONFLICT, "handler_bound"),
            "{uri}"
        );
        let message = a.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("worker") && message.contains("force=true"),
            "{message}"
        );
    }
    let a = delete(&app, "/v1/streams/s/groups/other?confirm=true").await;
    assert_eq!(
        a.status,
        StatusCode::OK,
        "another group of the stream: {}",
        a.body
    );
    assert!(
        registry.get(&worker).await.is_ok(),
        "the handler is still there"
    );

    let a = delete(&app, "/v1/streams/s/groups/g?confirm=true&force=true").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(a.body["removed_handlers"], json!(["worker"]));
    assert!(
        registry.get(&worker).await.is_err(),
        "the handler was removed"
    );
    assert_eq!(
        code(&app.get("/v1/streams/s/groups/g").await),
        "group_not_found"
    );
    let a = delete(&app, "/v1/streams/s?confirm=true").await;
    assert_eq!(
        a.status,
        StatusCode::OK,
        "nothing consumes it now: {}",
        a.body
    );
}
