//! `GET /v1/handlers/{handler}/logs`: real guests run by the real engine
//! write lines; the API serves them, with the delivery they belong to, and
//! follows them as server-sent events (`docs/handlers.md#handler-logs`).
//! Waits are bounded by a timeout that only a failure reaches.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use futures::StreamExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::{START, TestApp, code};
use crate::api::{ApiSettings, AppState, router};
use crate::backend::Backend;
use crate::backend::memory::MemoryBackend;
use crate::clock::FrozenClock;
use crate::handlers::{HandlerRegistry, Manifest};
use crate::model::{GroupName, HandlerName, StreamName};
use rheo_wasm::testing::{engine, guest};

/// What no passing test waits for.
const PATIENCE: Duration = Duration::from_secs(60);

/// An app with handlers keeping `lines` log lines each, and stream `s`
/// (one partition) with group `g` (retries at once, two attempts).
async fn app(lines: usize) -> (TestApp, Arc<HandlerRegistry>) {
    let clock = FrozenClock::new(START);
    let backend: Arc<dyn Backend> = Arc::new(MemoryBackend::new(clock.clone()));
    let registry = Arc::new(
        HandlerRegistry::new(engine(), Arc::clone(&backend), None)
            .unwrap()
            .with_log_lines(lines),
    );
    let state = AppState::new(backend, ApiSettings::default())
        .with_test_clock(clock.clone())
        .with_handlers(Arc::clone(&registry));
    let app = TestApp {
        router: router(state.clone()),
        state,
        clock,
    };
    app.stream("s", 1).await;
    let a = app
        .post(
            "/v1/streams/s/groups",
            json!({"name": "g", "max_attempts": 2, "retry_backoff_ms": [0]}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    (app, registry)
}

/// Deploys example guest `guest_name` as handler `name` on `s`/`g`.
async fn deploy(registry: &HandlerRegistry, name: &str, guest_name: &str) {
    let manifest = Manifest::new(
        StreamName::parse("s").unwrap(),
        GroupName::parse("g").unwrap(),
    );
    registry
        .deploy(
            HandlerName::parse(name).unwrap(),
            manifest,
            guest(guest_name),
        )
        .await
        .unwrap_or_else(|e| panic!("deploying {guest_name}: {e}"));
}

/// The lines of `GET uri`, asserting 200.
async fn lines(app: &TestApp, uri: &str) -> Vec<Value> {
    let a = app.get(uri).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    a.body["lines"].as_array().cloned().unwrap_or_default()
}

/// Polls `uri` until some line satisfies `found`; returns all lines.
async fn until_line(app: &TestApp, uri: &str, found: impl Fn(&Value) -> bool) -> Vec<Value> {
    let poll = async {
        loop {
            let lines = lines(app, uri).await;
            if lines.iter().any(&found) {
                return lines;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(PATIENCE, poll)
        .await
        .unwrap_or_else(|_| panic!("no such line in {uri}"))
}

#[tokio::test]
async fn lines_carry_their_delivery_version_source_and_the_server_clock() {
    let (app, registry) = app(100).await;
    deploy(&registry, "probe", "probe").await;
    app.append("s", json!({"id": "e1", "payload": {}})).await;
    let all = until_line(&app, "/v1/handlers/probe/logs", |l| l["source"] == "stdout").await;
    let passwd = all
        .iter()
        .find(|l| {
            l["message"]
                .as_str()
                .unwrap()
                .starts_with("read /etc/passwd")
        })
        .expect("the probe logged its file read");
    assert_eq!(passwd["source"], "log");
    assert_eq!(passwd["level"], "info");
    assert_eq!(passwd["event_id"], "e1");
    assert_eq!(passwd["stream"], "s");
    assert_eq!(passwd["partition"], 0);
    assert_eq!(passwd["sequence"], 1);
    assert_eq!(passwd["attempt"], 1);
    assert_eq!(passwd["version"], 1);
    assert_eq!(passwd["at"], "2026-01-01T00:00:00.000Z");
    let stdout = all.iter().find(|l| l["source"] == "stdout").unwrap();
    assert_eq!(stdout["message"], "probe finished: 0 leak(s)");
    assert_eq!(stdout["event_id"], "e1");
    // Numbered 1, 2, … oldest first.
    let seqs: Vec<u64> = all.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());

    // A hot swap keeps the log; numbers go on, lines name the new version.
    let swapped = app
        .call(
            Request::builder()
                .method(Method::PUT)
                .uri("/v1/handlers/probe/module")
                .header(header::CONTENT_TYPE, "application/wasm")
                .body(Body::from(guest("probe")))
                .unwrap(),
        )
        .await;
    assert_eq!(swapped.status, StatusCode::OK, "{}", swapped.body);
    app.clock.advance(1500);
    app.append("s", json!({"id": "e2", "payload": {}})).await;
    let all = until_line(&app, "/v1/handlers/probe/logs", |l| {
        l["event_id"] == "e2" && l["source"] == "stdout"
    })
    .await;
    let e2: Vec<&Value> = all.iter().filter(|l| l["event_id"] == "e2").collect();
    assert!(e2.iter().all(|l| l["version"] == 2), "{e2:?}");
    assert!(e2.iter().all(|l| l["at"] == "2026-01-01T00:00:01.500Z"));
    assert!(e2[0]["seq"].as_u64().unwrap() > seqs.len() as u64);
}

#[tokio::test]
async fn each_attempt_is_told_apart() {
    let (app, registry) = app(100).await;
    deploy(&registry, "crash", "crash").await;
    app.append("s", json!({"id": "boom", "payload": {"panic": true}}))
        .await;
    // A panic goes to stderr; the group retries at once, up to attempt 2.
    let all = until_line(&app, "/v1/handlers/crash/logs", |l| l["attempt"] == 2).await;
    for attempt in [1, 2] {
        let line = all
            .iter()
            .find(|l| {
                l["attempt"] == attempt
                    && l["message"]
                        .as_str()
                        .unwrap()
                        .contains("crash: asked to panic by event boom")
            })
            .unwrap_or_else(|| panic!("no panic line for attempt {attempt}: {all:?}"));
        assert_eq!(line["source"], "stderr");
        assert_eq!(line["level"], "warn");
        assert_eq!(line["event_id"], "boom");
    }
}

#[tokio::test]
async fn limit_picks_the_last_lines_and_bad_requests_are_refused() {
    let (app, registry) = app(20).await;
    deploy(&registry, "probe", "probe").await;
    for i in 1..=5 {
        app.append("s", json!({"id": format!("e{i}"), "payload": {}}))
            .await;
    }
    // Five lines a delivery, 20 kept: 21..=25 once all five ran.
    let all = until_line(&app, "/v1/handlers/probe/logs?limit=20", |l| l["seq"] == 25).await;
    assert_eq!(all.len(), 20);
    assert_eq!(all[0]["seq"], 6);
    let last = lines(&app, "/v1/handlers/probe/logs?limit=3").await;
    let seqs: Vec<u64> = last.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [23, 24, 25]);
    let a = app.get("/v1/handlers/probe/logs").await;
    assert_eq!(a.body["handler"], "probe");
    assert_eq!(a.body["lines"].as_array().unwrap().len(), 20);

    for bad in [
        "limit=0",
        "limit=21",
        "limit=x",
        "limit=-1",
        "follow=maybe",
        "tail=3",
    ] {
        let a = app.get(&format!("/v1/handlers/probe/logs?{bad}")).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{bad}: {}", a.body);
        code(&a);
    }
    let a = app.get("/v1/handlers/nope/logs").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.body);
    assert_eq!(code(&a), "handler_not_found");

    // Deleted: gone with its handler.
    let a = app.send(Method::DELETE, "/v1/handlers/probe", None).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert!(
        registry
            .logs()
            .get(&HandlerName::parse("probe").unwrap())
            .is_none()
    );
    let a = app.get("/v1/handlers/probe/logs").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.body);
}

/// One server-sent event.
#[derive(Debug)]
struct SseEvent {
    event: String,
    id: Option<String>,
    data: String,
}

/// Reads server-sent events off a response body as they arrive.
struct SseReader {
    body: axum::body::BodyDataStream,
    buffer: String,
}

impl SseReader {
    /// Sends `GET uri` (with `headers`) and checks it is an event stream.
    async fn open(app: &TestApp, uri: &str, headers: &[(&str, &str)]) -> Self {
        let mut request = Request::builder().uri(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = app
            .router
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/event-stream"
        );
        Self {
            body: response.into_body().into_data_stream(),
            buffer: String::new(),
        }
    }

    /// The next event (comments skipped), `None` once the stream ended.
    async fn next(&mut self) -> Option<SseEvent> {
        let read = async {
            loop {
                if let Some(end) = self.buffer.find("\n\n") {
                    let block: String = self.buffer.drain(..end + 2).collect();
                    let mut event = SseEvent {
                        event: "message".into(),
                        id: None,
                        data: String::new(),
                    };
                    let mut fields = false;
                    for line in block.lines() {
                        if let Some((name, value)) = line.split_once(':') {
                            let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
                            match name {
                                "event" => event.event = value,
                                "id" => event.id = Some(value),
                                "data" => event.data.push_str(&value),
                                _ => continue,
                            }
                            fields = true;
                        }
                    }
                    if fields {
                        return Some(event);
                    }
                    continue;
                }
                let chunk = self.body.next().await?.expect("a readable body");
                self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        };
        tokio::time::timeout(PATIENCE, read)
            .await
            .expect("an event (or the end) in time")
    }

    /// The next event, which must be a line; returns it parsed.
    async fn line(&mut self) -> Value {
        let event = self.next().await.expect("a line, not the end");
        assert_eq!(event.event, "line", "{event:?}");
        let line: Value = serde_json::from_str(&event.data).unwrap();
        assert_eq!(event.id.as_deref(), Some(line["seq"].to_string().as_str()));
        line
    }
}

#[tokio::test]
async fn follow_sends_the_tail_then_new_lines_and_ends_with_the_handler() {
    let (app, registry) = app(100).await;
    deploy(&registry, "probe", "probe").await;
    app.append("s", json!({"id": "e1", "payload": {}})).await;
    until_line(&app, "/v1/handlers/probe/logs", |l| l["seq"] == 5).await;

    let mut sse = SseReader::open(&app, "/v1/handlers/probe/logs?follow=true&limit=2", &[]).await;
    assert_eq!(sse.line().await["seq"], 4);
    assert_eq!(sse.line().await["seq"], 5);
    // Appended after the follower connected.
    app.append("s", json!({"id": "e2", "payload": {}})).await;
    let line = sse.line().await;
    assert_eq!(
        (line["seq"].as_u64(), line["event_id"].as_str()),
        (Some(6), Some("e2"))
    );
    for seq in 7..=10 {
        assert_eq!(sse.line().await["seq"], seq);
    }

    // Resuming after seq 8 gets 9 and 10 again.
    let mut resumed = SseReader::open(
        &app,
        "/v1/handlers/probe/logs?follow=true",
        &[("last-event-id", "8")],
    )
    .await;
    assert_eq!(resumed.line().await["seq"], 9);
    assert_eq!(resumed.line().await["seq"], 10);

    let a = app.send(Method::DELETE, "/v1/handlers/probe", None).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert!(
        sse.next().await.is_none(),
        "the stream ends with the handler"
    );
    assert!(resumed.next().await.is_none());
}

#[tokio::test]
async fn a_resume_past_what_is_kept_starts_with_a_gap_and_draining_ends_the_stream() {
    let (app, registry) = app(4).await;
    deploy(&registry, "probe", "probe").await;
    app.append("s", json!({"id": "e1", "payload": {}})).await;
    until_line(&app, "/v1/handlers/probe/logs", |l| l["seq"] == 5).await;

    // 2..=5 are kept: after 0, line 1 is gone.
    let mut sse = SseReader::open(
        &app,
        "/v1/handlers/probe/logs?follow=true",
        &[("last-event-id", "0")],
    )
    .await;
    let gap = sse.next().await.unwrap();
    assert_eq!(gap.event, "gap");
    assert_eq!(
        serde_json::from_str::<Value>(&gap.data).unwrap(),
        json!({"missed": 1})
    );
    for seq in 2..=5 {
        assert_eq!(sse.line().await["seq"], seq);
    }
    let bad = app
        .call(
            Request::builder()
                .uri("/v1/handlers/probe/logs?follow=true")
                .header("last-event-id", "x")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.body);

    app.state.start_draining();
    assert!(
        sse.next().await.is_none(),
        "the stream ends when the server drains"
    );
}
