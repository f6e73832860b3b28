//! A backend whose every call fails with one error (or panics, or never
//! answers), to see how the API answers an unavailable, broken or silent
//! store: 503 (with `Retry-After`) or 500, with a generic message, counted
//! in the metrics, `/readyz` not ready; a silent one within the request
//! timeout (`docs/http.md#request-timeout`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::http::{StatusCode, header};
use serde_json::json;

use super::{START, TestApp, code};
use crate::api::ApiSettings;
use crate::backend::{
    Backend, Capabilities, CreateStream, DeadLettersRequest, DeleteGroup, DeleteStream, Error,
    FetchRequest, LeasesRequest, Notifier, Partitions, ReadRequest, Redrive, RenewRequest, Replay,
    ResetRequest, Result, TrimRequest, Trimmed,
};
use crate::clock::{FrozenClock, SharedClock};
use crate::model::{
    Appended, DeadLetterPage, Event, EventInput, Group, GroupInfo, GroupName, GroupSpec, Lag,
    Lease, LeasePage, Page, Query, Retention, SettleTarget, Settlement, Stream, StreamName,
    Timestamp,
};

#[derive(Debug)]
struct DownBackend {
    /// `None`: panic instead of answering.
    error: Option<Error>,
    /// Never answer at all.
    silent: bool,
    clock: SharedClock,
    notifier: Notifier,
}

impl DownBackend {
    async fn fail<T>(&self) -> Result<T> {
        if self.silent {
            std::future::pending::<()>().await;
        }
        match &self.error {
            Some(error) => Err(error.clone()),
            None => panic!("the backend exploded"),
        }
    }
}

#[async_trait]
impl Backend for DownBackend {
    fn kind(&self) -> &'static str {
        "down"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            durable: false,
            multi_node: false,
            cross_process_wakeups: false,
        }
    }
    fn clock(&self) -> &SharedClock {
        &self.clock
    }
    async fn ping(&self) -> Result<()> {
        self.fail().await
    }
    async fn create_stream(&self, _: CreateStream) -> Result<Stream> {
        self.fail().await
    }
    async fn list_streams(&self) -> Result<Vec<Stream>> {
        self.fail().await
    }
    async fn get_stream(&self, _: &StreamName) -> Result<Stream> {
        self.fail().await
    }
    async fn append(&self, _: &StreamName, _: Vec<EventInput>) -> Result<Vec<Appended>> {
        self.fail().await
    }
    async fn read(&self, _: ReadRequest) -> Result<Vec<Event>> {
        self.fail().await
    }
    async fn query(&self, _: &StreamName, _: &Query) -> Result<Page> {
        self.fail().await
    }
    async fn create_group(&self, _: &StreamName, _: GroupSpec) -> Result<Group> {
        self.fail().await
    }
    async fn list_groups(&self, _: &StreamName) -> Result<Vec<Group>> {
        self.fail().await
    }
    async fn fetch(&self, _: FetchRequest) -> Result<Vec<Lease>> {
        self.fail().await
    }
    async fn renew(&self, _: RenewRequest) -> Result<Lease> {
        self.fail().await
    }
    async fn renew_many(
        &self,
        _: &StreamName,
        _: &GroupName,
        _: Vec<SettleTarget>,
        _: u64,
    ) -> Result<Vec<Result<Timestamp>>> {
        self.fail().await
    }
    async fn settle(
        &self,
        _: &StreamName,
        _: &GroupName,
        _: Vec<Settlement>,
    ) -> Result<Vec<Result<()>>> {
        self.fail().await
    }
    async fn lag(&self, _: &StreamName, _: &GroupName, _: &Partitions) -> Result<Lag> {
        self.fail().await
    }
    async fn group_info(&self, _: &StreamName, _: &GroupName) -> Result<GroupInfo> {
        self.fail().await
    }
    async fn dead_letters(&self, _: DeadLettersRequest) -> Result<DeadLetterPage> {
        self.fail().await
    }
    async fn leases(&self, _: LeasesRequest) -> Result<LeasePage> {
        self.fail().await
    }
    async fn redrive(&self, _: &StreamName, _: &GroupName, _: Redrive) -> Result<u64> {
        self.fail().await
    }
    async fn replay(&self, _: &StreamName, _: &GroupName, _: Replay) -> Result<u64> {
        self.fail().await
    }
    async fn reset(&self, _: ResetRequest) -> Result<()> {
        self.fail().await
    }
    async fn set_retention(&self, _: &StreamName, _: Option<Retention>) -> Result<Stream> {
        self.fail().await
    }
    async fn trim(&self, _: TrimRequest) -> Result<Trimmed> {
        self.fail().await
    }
    async fn delete_stream(&self, _: DeleteStream) -> Result<()> {
        self.fail().await
    }
    async fn delete_group(&self, _: DeleteGroup) -> Result<()> {
        self.fail().await
    }
    fn notifier(&self) -> &Notifier {
        &self.notifier
    }
    async fn next_due(
        &self,
        _: &StreamName,
        _: &GroupName,
        _: &Partitions,
    ) -> Result<Option<Timestamp>> {
        self.fail().await
    }
}

fn app_failing_with(error: impl Into<Option<Error>>) -> TestApp {
    let clock = FrozenClock::new(START);
    let backend = Arc::new(DownBackend {
        error: error.into(),
        silent: false,
        clock: clock.clone(),
        notifier: Notifier::default(),
    });
    TestApp::over(backend, clock, ApiSettings::default(), true)
}

/// An app over a backend that never answers, with `request_timeout`.
fn app_over_a_silent_store(request_timeout: Duration) -> TestApp {
    let clock = FrozenClock::new(START);
    let backend = Arc::new(DownBackend {
        error: None,
        silent: true,
        clock: clock.clone(),
        notifier: Notifier::default(),
    });
    let settings = ApiSettings {
        request_timeout,
        ..ApiSettings::default()
    };
    TestApp::over(backend, clock, settings, true)
}

#[tokio::test(start_paused = true)]
async fn a_request_the_store_never_answers_is_503_at_the_request_timeout() {
    let limit = Duration::from_millis(700);
    let app = app_over_a_silent_store(limit);
    let started = tokio::time::Instant::now();
    let read = app.get("/v1/streams/s").await;
    assert_eq!(started.elapsed(), limit);
    assert_eq!(
        (read.status, code(&read)),
        (StatusCode::SERVICE_UNAVAILABLE, "backend_unavailable"),
        "a read changed nothing: {}",
        read.body
    );
    assert_eq!(read.headers[header::RETRY_AFTER], "1");
    let write = app
        .post("/v1/streams/s/events", json!({"payload": {}}))
        .await;
    assert_eq!(
        (write.status, code(&write)),
        (StatusCode::SERVICE_UNAVAILABLE, "ambiguous"),
        "a write may have been applied: {}",
        write.body
    );
    assert_eq!(write.headers[header::RETRY_AFTER], "1");
    // The server answers other requests meanwhile, and counts these.
    let metrics = app.get("/metrics").await;
    let text = metrics.body.as_str().unwrap();
    assert!(
        text.contains("route=\"/v1/streams/{stream}/events\",status=\"503\"} 1"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_gets_its_wait_on_top_of_the_request_timeout() {
    let limit = Duration::from_millis(700);
    let app = app_over_a_silent_store(limit);
    let started = tokio::time::Instant::now();
    let fetch = app
        .post("/v1/streams/s/groups/g/fetch", json!({"wait_ms": 2_000}))
        .await;
    assert_eq!(
        fetch.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        fetch.body
    );
    assert_eq!(started.elapsed(), limit + Duration::from_millis(2_000));
}

#[tokio::test]
async fn an_unavailable_backend_is_503_with_retry_after_and_no_driver_detail() {
    let app = app_failing_with(Error::BackendUnavailable(
        "connection refused to db.internal:5432".into(),
    ));
    let a = app.get("/v1/streams").await;
    assert_eq!(
        (a.status, code(&a)),
        (StatusCode::SERVICE_UNAVAILABLE, "backend_unavailable")
    );
    assert_eq!(a.headers[header::RETRY_AFTER], "1");
    let message = a.body["error"]["message"].as_str().unwrap();
    assert!(!message.contains("db.internal"), "{message}");

    let ambiguous = app_failing_with(Error::Ambiguous("commit lost".into()));
    let a = ambiguous.post("/v1/streams", json!({"name": "s"})).await;
    assert_eq!(
        (a.status, code(&a)),
        (StatusCode::SERVICE_UNAVAILABLE, "ambiguous")
    );
}

#[tokio::test]
async fn a_failed_backend_call_is_500_with_a_generic_message() {
    let app = app_failing_with(Error::Failed("constraint xyz violated".into()));
    let a = app.post("/v1/streams/s/groups/g/fetch", json!({})).await;
    assert_eq!(
        (a.status, code(&a)),
        (StatusCode::INTERNAL_SERVER_ERROR, "failed")
    );
    assert_eq!(
        a.body["error"]["message"],
        "internal error; see the server log"
    );
}

#[tokio::test]
async fn readyz_is_503_when_the_backend_does_not_answer_but_healthz_stays_200() {
    let app = app_failing_with(Error::BackendUnavailable("down".into()));
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code(&ready), "backend_unavailable");
    assert_eq!(app.get("/healthz").await.status, StatusCode::OK);

    let broken = app_failing_with(Error::Failed("disk".into()));
    assert_eq!(
        broken.get("/readyz").await.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "any ping failure means not ready"
    );
}

#[tokio::test]
async fn backend_errors_are_counted_by_route_and_code() {
    let app = app_failing_with(Error::BackendUnavailable("down".into()));
    app.get("/v1/streams/s").await;
    app.get("/v1/streams/s").await;
    let metrics = app.get("/metrics").await;
    let text = metrics.body.as_str().unwrap();
    assert!(
        text.contains(
            "rheo_http_backend_errors_total{route=\"/v1/streams/{stream}\",code=\"backend_unavailable\"} 2"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn a_panic_is_a_counted_500_json_answer_and_the_server_carries_on() {
    let app = app_failing_with(None);
    let a = app.get("/v1/streams").await;
    assert_eq!(
        (a.status, code(&a)),
        (StatusCode::INTERNAL_SERVER_ERROR, "internal")
    );
    assert!(
        !a.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exploded")
    );
    let metrics = app.get("/metrics").await;
    let text = metrics.body.as_str().unwrap();
    assert!(
        text.contains(
            "rheo_http_requests_total{method=\"GET\",route=\"/v1/streams\",status=\"500\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains("rheo_http_requests_in_flight 1"),
        "only the metrics request"
    );
}
