//! Helpers shared by the end-to-end tests: JSON requests, error codes, the
//! example guests, multipart handler deploys, bounded polling.

use std::time::{Duration, Instant};

use rheo_e2e::{Server, answer};
use serde_json::Value;
use ureq::Agent;

pub(crate) mod chaos;
pub(crate) mod guests;
pub(crate) mod restart;

/// Status and JSON body of a response.
pub(crate) type Answer = (u16, Value);

/// `GET path`.
pub(crate) fn get(http: &Agent, server: &Server, path: &str) -> Answer {
    answer(http.get(server.url(path)).call())
}

/// `POST path` with a JSON body.
pub(crate) fn post(http: &Agent, server: &Server, path: &str, body: &Value) -> Answer {
    answer(http.post(server.url(path)).send_json(body))
}

/// `POST path` with `Authorization: Bearer <token>`.
pub(crate) fn post_with_token(
    http: &Agent,
    server: &Server,
    token: &str,
    path: &str,
    body: &Value,
) -> Answer {
    answer(
        http.post(server.url(path))
            .header("Authorization", &format!("Bearer {token}"))
            .send_json(body),
    )
}

/// `GET path` with `Authorization: Bearer <token>`.
pub(crate) fn get_with_token(http: &Agent, server: &Server, token: &str, path: &str) -> Answer {
    answer(
        http.get(server.url(path))
            .header("Authorization", &format!("Bearer {token}"))
            .call(),
    )
}

/// `POST path` with no body at all.
pub(crate) fn post_empty(http: &Agent, server: &Server, path: &str) -> Answer {
    answer(http.post(server.url(path)).send_empty())
}

/// `POST path` with raw bytes and an optional content type.
pub(crate) fn post_raw(
    http: &Agent,
    server: &Server,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Answer {
    let mut request = http.post(server.url(path));
    if let Some(ct) = content_type {
        request = request.header("Content-Type", ct);
    }
    answer(request.send(body))
}

/// `DELETE path`.
pub(crate) fn delete(http: &Agent, server: &Server, path: &str) -> Answer {
    answer(http.delete(server.url(path)).call())
}

/// The `error.code` of an error body (`""` when there is none).
pub(crate) fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_default()
}

/// Asserts an error answer: status, code, and a non-empty message.
#[track_caller]
pub(crate) fn assert_error(got: &Answer, status: u16, expected_code: &str) {
    assert_eq!(
        (got.0, code(&got.1)),
        (status, expected_code),
        "unexpected answer: {} {}",
        got.0,
        got.1
    );
    assert!(
        got.1["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "an error carries a message: {}",
        got.1
    );
}

/// `POST /v1/streams`: creates stream `name`; asserts 201.
pub(crate) fn stream(http: &Agent, server: &Server, name: &str, partitions: u32) {
    let (status, body) = post(
        http,
        server,
        "/v1/streams",
        &serde_json::json!({"name": name, "partition_count": partitions}),
    );
    assert_eq!(status, 201, "{body}");
}

/// `GET /v1/handlers/{name}`; asserts 200.
pub(crate) fn handler(http: &Agent, server: &Server, name: &str) -> Value {
    let (status, body) = get(http, server, &format!("/v1/handlers/{name}"));
    assert_eq!(status, 200, "{body}");
    body
}

/// `GET …/groups/{group}/lag`; asserts 200.
pub(crate) fn lag(http: &Agent, server: &Server, stream: &str, group: &str) -> Value {
    let (status, body) = get(
        http,
        server,
        &format!("/v1/streams/{stream}/groups/{group}/lag"),
    );
    assert_eq!(status, 200, "{body}");
    body
}

/// The `event_id` / `lease_id` / `receipt` of a lease, plus `extra` fields.
pub(crate) fn lease_ref(lease: &Value, extra: &Value) -> Value {
    let mut body = serde_json::json!({
        "event_id": lease["event_id"],
        "lease_id": lease["lease_id"],
        "receipt": lease["receipt"],
    });
    if let Some(fields) = extra.as_object() {
        for (k, v) in fields {
            body[k] = v.clone();
        }
    }
    body
}

/// The string field `field` of each item of the array `body[list]`.
pub(crate) fn strings(body: &Value, list: &str, field: &str) -> Vec<String> {
    body[list]
        .as_array()
        .unwrap_or_else(|| panic!("no array {list:?} in {body}"))
        .iter()
        .map(|item| {
            item[field]
                .as_str()
                .unwrap_or_else(|| panic!("no string {field:?} in {item}"))
                .to_owned()
        })
        .collect()
}

/// Polls `check` (every 20 ms, for at most `limit`) until it returns `Some`.
#[track_caller]
pub(crate) fn eventually<T>(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How long [`eventually_progressing`] waits in all, however steadily the
/// run moves: a bound for CI, far above what a loaded machine needs.
const PROGRESSING_CAP: Duration = Duration::from_secs(20 * 60);

/// Polls `check` (every 20 ms) until it returns `Ok`; `Err(progress)` says
/// how far the run has got. Fails when `progress` has not changed for
/// `stall` (the run stopped moving), or after [`PROGRESSING_CAP`] in all.
/// For waits whose length is the machine's speed times the work (a slow
/// stand-in store, a loaded CI run): a slow run only waits longer, a stuck
/// one still fails.
#[track_caller]
pub(crate) fn eventually_progressing<T, P: PartialEq + std::fmt::Debug>(
    what: &str,
    stall: Duration,
    mut check: impl FnMut() -> Result<T, P>,
) -> T {
    let started = Instant::now();
    let mut last: Option<(P, Instant)> = None;
    loop {
        let progress = match check() {
            Ok(found) => return found,
            Err(progress) => progress,
        };
        let now = Instant::now();
        match &last {
            Some((seen, since)) if *seen == progress => assert!(
                now.duration_since(*since) < stall,
                "no progress for {} s waiting for: {what} (stuck at {progress:?})",
                stall.as_secs()
            ),
            _ => last = Some((progress, now)),
        }
        assert!(
            now.duration_since(started) < PROGRESSING_CAP,
            "still not done after {} s, though moving: {what}",
            PROGRESSING_CAP.as_secs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `n` HTTP requests are in flight on `server` (the metrics
/// request itself counts as one).
pub(crate) fn wait_for_in_flight(http: &Agent, server: &Server, n: u32) {
    let expected = format!("rheo_http_requests_in_flight {n}");
    eventually(&expected, Duration::from_secs(20), || {
        let mut response = http.get(server.url("/metrics")).call().expect("metrics");
        let text = response.body_mut().read_to_string().expect("metrics text");
        text.contains(&expected).then_some(())
    });
}

/// The `.wasm` bytes of the example guest `name` (see `rheo_example_guests`).
pub(crate) fn guest(name: &str) -> Vec<u8> {
    rheo_example_guests::get(name)
        .unwrap_or_else(|| panic!("no example guest {name}"))
        .to_vec()
}

/// A `multipart/form-data` body of named parts `(name, content type, bytes)`;
/// returns the Content-Type header and the body.
pub(crate) fn multipart(parts: &[(&str, &str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "rheo-e2e-boundary-7MA4YWxkTrZu0gW";
    let mut body = Vec::new();
    for (name, content_type, bytes) in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        body.extend_from_slice(
            format!(
                "Content-Disposition: form-data; name=\"{name}\"; filename=\"{name}\"\r\n\
                 Content-Type: {content_type}\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// `PUT /v1/handlers/{name}` with a JSON manifest and a module.
pub(crate) fn deploy(
    http: &Agent,
    server: &Server,
    name: &str,
    manifest: &Value,
    module: &[u8],
) -> Answer {
    let manifest = serde_json::to_vec(manifest).expect("manifest JSON");
    let (content_type, body) = multipart(&[
        ("manifest", "application/json", &manifest),
        ("module", "application/wasm", module),
    ]);
    answer(
        http.put(server.url(&format!("/v1/handlers/{name}")))
            .header("Content-Type", &content_type)
            .send(&body[..]),
    )
}

/// `PUT /v1/handlers/{name}/module` with an `application/wasm` body.
pub(crate) fn swap_module(http: &Agent, server: &Server, name: &str, module: &[u8]) -> Answer {
    answer(
        http.put(server.url(&format!("/v1/handlers/{name}/module")))
            .header("Content-Type", "application/wasm")
            .send(module),
    )
}

/// Appends `count` events with ids `{prefix}{i}` in one batch; asserts 201.
pub(crate) fn append_batch(
    http: &Agent,
    server: &Server,
    stream: &str,
    prefix: &str,
    range: std::ops::Range<usize>,
) {
    let events: Vec<Value> = range
        .map(|i| serde_json::json!({"id": format!("{prefix}{i}"), "payload": {"n": i}}))
        .collect();
    let count = events.len();
    let (status, body) = post(
        http,
        server,
        &format!("/v1/streams/{stream}/events/batch"),
        &serde_json::json!({ "events": events }),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["events"].as_array().map(Vec::len), Some(count));
}

/// Two `rheo serve` processes on one shared store (`backend`), the `echo`
/// handler deployed to both, consume one group of `events` events
/// together: every event is acked exactly once, by one server or the
/// other (nothing retried, rejected, lost or dead: no delivery was leased
/// to both), both take part, and neither panics. Waits for them to catch
/// up as long as the acks keep coming, failing when none came for `stall`.
pub(crate) fn two_servers_ack_each_event_once(backend: String, events: usize, stall: Duration) {
    use serde_json::json;
    let options = rheo_e2e::ServerOptions {
        backend: Some(backend),
        ..rheo_e2e::ServerOptions::default()
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Server::start(dir_a.path(), &options);
    let b = Server::start(dir_b.path(), &options);
    let http = rheo_e2e::agent();

    let (status, body) = post(
        &http,
        &a,
        "/v1/streams",
        &json!({"name": "orders", "partition_count": 4}),
    );
    assert_eq!(status, 201, "{body}");
    let manifest = json!({"stream": "orders", "group": "g", "concurrency": 4});
    for server in [&a, &b] {
        let (status, body) = deploy(&http, server, "worker", &manifest, &guest("echo"));
        assert!(status == 200 || status == 201, "{status} {body}");
    }
    for n in 0..events.div_ceil(500) {
        append_batch(
            &http,
            &a,
            "orders",
            "e",
            n * 500..((n + 1) * 500).min(events),
        );
    }

    let counters = |server: &Server| -> Value {
        let (status, body) = get(&http, server, "/v1/handlers/worker");
        assert_eq!(status, 200, "{body}");
        body["counters"].clone()
    };
    let (ca, cb) = eventually_progressing("both servers caught up", stall, || {
        let (ca, cb) = (counters(&a), counters(&b));
        let acked = ca["acked"].as_u64().unwrap_or(0) + cb["acked"].as_u64().unwrap_or(0);
        let (status, lag) = get(&http, &b, "/v1/streams/orders/groups/g/lag");
        assert_eq!(status, 200, "{lag}");
        if acked >= events as u64 && lag["lag"] == 0 {
            Ok((ca, cb))
        } else {
            Err((acked, lag["lag"].clone()))
        }
    });
    let acked = |c: &Value| c["acked"].as_u64().unwrap();
    assert_eq!(
        acked(&ca) + acked(&cb),
        events as u64,
        "each event acked once"
    );
    for c in [&ca, &cb] {
        assert!(acked(c) > 0, "both servers took part: {ca} / {cb}");
        for counter in ["retried", "rejected", "lost", "settle_errors", "trapped"] {
            assert_eq!(c[counter], 0, "{counter}: {c}");
        }
    }
    let (status, lag) = get(&http, &a, "/v1/streams/orders/groups/g/lag");
    assert_eq!(status, 200, "{lag}");
    assert_eq!(
        (lag["lag"].as_u64(), lag["inflight"].as_u64()),
        (Some(0), Some(0)),
        "{lag}"
    );
    let (status, info) = get(&http, &a, "/v1/streams/orders/groups/g");
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["dead_letters"], 0, "{info}");
    for server in [&a, &b] {
        let log = server.log_text();
        assert!(!log.contains("panicked"), "no panic:\n{log}");
    }
}

/// A few random bits without another dependency.
pub(crate) fn rand_suffix() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    t.subsec_nanos() ^ (t.as_secs() as u32)
}

/// The SHA-256 of `bytes` in lower-case hex: a module's digest as the API
/// reports it.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
