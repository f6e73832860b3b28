//! Router tests: the whole app, driven with `tower::ServiceExt::oneshot`
//! (no socket) over the memory backend and a frozen clock. Expiry is
//! reached by moving the clock, never by sleeping.
//!
//! One file per resource; this one holds the harness.

mod clock;
mod contract;
mod delete;
mod down;
mod groups;
#[cfg(feature = "wasm")]
mod handler_logs;
mod health;
mod http;
mod leases;
mod long_poll;
mod nodes;
mod ranges;
mod recovery;
mod retention;
mod streams;

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::{ApiSettings, AppState, router};
use crate::backend::Backend;
use crate::backend::memory::MemoryBackend;
use crate::clock::FrozenClock;
use crate::model::Timestamp;

/// Where every test clock starts: 2026-01-01T00:00:00Z.
pub(super) const START: Timestamp = Timestamp::from_millis(1_767_225_600_000);

/// An app over a fresh memory backend.
#[derive(Clone)]
pub(super) struct TestApp {
    pub(super) router: Router,
    pub(super) state: AppState,
    pub(super) clock: Arc<FrozenClock>,
}

/// A response: status, headers and body (JSON when it parses, else a string).
pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: Value,
}

impl TestApp {
    /// Default settings, test clock routes on.
    pub(super) fn new() -> Self {
        Self::build(ApiSettings::default(), true)
    }

    /// These settings, test clock routes on.
    pub(super) fn with_settings(settings: ApiSettings) -> Self {
        Self::build(settings, true)
    }

    /// A server on the (still frozen) clock but without the test clock routes.
    pub(super) fn without_test_clock() -> Self {
        Self::build(ApiSettings::default(), false)
    }

    fn build(settings: ApiSettings, test_clock_routes: bool) -> Self {
        let clock = FrozenClock::new(START);
        let backend: Arc<dyn Backend> = Arc::new(MemoryBackend::new(clock.clone()));
        Self::over(backend, clock, settings, test_clock_routes)
    }

    /// An app over any backend.
    pub(super) fn over(
        backend: Arc<dyn Backend>,
        clock: Arc<FrozenClock>,
        settings: ApiSettings,
        test_clock_routes: bool,
    ) -> Self {
        let mut state = AppState::new(backend, settings);
        if test_clock_routes {
            state = state.with_test_clock(clock.clone());
        }
        Self {
            router: router(state.clone()),
            state,
            clock,
        }
    }

    /// Sends a request.
    pub(super) async fn call(&self, request: Request<Body>) -> Answer {
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router is infallible");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("a complete body");
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Answer {
            status,
            headers,
            body,
        }
    }

    /// Sends `method uri` with an optional JSON body.
    pub(super) async fn send(&self, method: Method, uri: &str, body: Option<Value>) -> Answer {
        self.call(json_request(method, uri, body)).await
    }

    /// `GET uri`.
    pub(super) async fn get(&self, uri: &str) -> Answer {
        self.send(Method::GET, uri, None).await
    }

    /// `POST uri` with a JSON body.
    pub(super) async fn post(&self, uri: &str, body: Value) -> Answer {
        self.send(Method::POST, uri, Some(body)).await
    }

    /// Creates a stream, asserting success.
    pub(super) async fn stream(&self, name: &str, partitions: u32) {
        let a = self
            .post(
                "/v1/streams",
                json!({"name": name, "partition_count": partitions}),
            )
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    }

    /// Appends one event, asserting success; returns it.
    pub(super) async fn append(&self, stream: &str, event: Value) -> Value {
        let a = self
            .post(&format!("/v1/streams/{stream}/events"), event)
            .await;
        assert!(a.status.is_success(), "{}", a.body);
        a.body
    }

    /// Creates a group, asserting success.
    pub(super) async fn group(&self, stream: &str, name: &str) {
        let a = self
            .post(
                &format!("/v1/streams/{stream}/groups"),
                json!({"name": name}),
            )
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    }

    /// Fetches, asserting success; returns the leases.
    pub(super) async fn fetch(&self, stream: &str, group: &str, body: Value) -> Vec<Value> {
        let a = self
            .post(&format!("/v1/streams/{stream}/groups/{group}/fetch"), body)
            .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        a.body["leases"].as_array().cloned().unwrap_or_default()
    }

    /// A stream `s` with one group `g` and events `e1..=n` in partition 0.
    pub(super) async fn stream_with_group(&self, n: usize) {
        self.stream("s", 1).await;
        self.group("s", "g").await;
        for i in 1..=n {
            self.append("s", json!({"id": format!("e{i}"), "payload": {"i": i}}))
                .await;
        }
    }
}

/// A request with a JSON body (and its content type) when `body` is given.
pub(super) fn json_request(method: Method, uri: &str, body: Option<Value>) -> Request<Body> {
    let builder = Request::builder().method(method).uri(uri);
    let request = match body {
        Some(body) => builder
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string())),
        None => builder.body(Body::empty()),
    };
    request.expect("a valid request")
}

/// The error code of an error answer.
pub(super) fn code(answer: &Answer) -> &str {
    answer.body["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error body: {}", answer.body))
}

/// The settle fields naming a lease.
pub(super) fn lease_ref(lease: &Value) -> Value {
    json!({
        "event_id": lease["event_id"],
        "lease_id": lease["lease_id"],
        "receipt": lease["receipt"],
    })
}

/// `lease_ref` plus extra fields.
pub(super) fn lease_ref_with(lease: &Value, extra: Value) -> Value {
    let mut body = lease_ref(lease);
    if let (Some(target), Some(more)) = (body.as_object_mut(), extra.as_object()) {
        target.extend(more.clone());
    }
    body
}
