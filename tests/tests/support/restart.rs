//! The scenario the store-restart tests share (`redis_restart`,
//! `mongo_restart`): the store is stopped in the middle of a handler run
//! and started again. While it is down the API answers
//! `backend_unavailable` and the runtime backs off (its log shows the fetch
//! retries spreading out), nothing panics, and once the store is back the
//! run finishes with every event acked and no dead letter.
//!
//! Each test keeps what is its store's own: how its process is started,
//! stopped and addressed ([`OwnStore`]), the backend URL and the event
//! counts ([`Restart`]).

use std::ops::Range;
use std::time::{Duration, Instant};

use rheo_e2e::{Server, ServerOptions, agent};
use serde_json::{Value, json};
use ureq::Agent;

use super::{
    append_batch, assert_error, code, deploy, eventually, eventually_progressing, get, guest, post,
};

/// A store process of a test's own, which the scenario stops and starts
/// again without disturbing anything else.
pub(crate) trait OwnStore {
    /// Starts the process (again: on the same port and storage as before)
    /// and waits until it answers.
    fn spawn(&mut self);

    /// Stops the process the way an operator's restart does (every write it
    /// acknowledged is kept) and waits for it to exit cleanly.
    fn stop(&mut self);
}

/// What one store's restart test sets.
pub(crate) struct Restart {
    /// The store, as messages name it ("Redis", "MongoDB").
    pub(crate) store: &'static str,
    /// `rheo serve`'s backend: the test's own store.
    pub(crate) backend: String,
    /// Events appended before the stop.
    pub(crate) before: usize,
    /// Events appended after the restart.
    pub(crate) after: usize,
    /// The most events one append batch carries.
    pub(crate) batch: usize,
    /// How long an append sent while the store is down may take to answer.
    pub(crate) down_append_timeout: Duration,
    /// How long the runtime may take to log its first fetch retries.
    pub(crate) backoff_wait: Duration,
}

/// How long the lag may stay the same after the restart before the test
/// moves the frozen clock past a lease.
const STILL_FOR: Duration = Duration::from_secs(10);

/// A free TCP port on 127.0.0.1 for a store of a test's own.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Every `retry_in_ms=` the runtime logged for a failed fetch, in order.
pub(crate) fn fetch_retries(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|line| line.contains("fetch failed"))
        .filter_map(|line| {
            let (_, rest) = line.split_once("retry_in_ms=")?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// Appends the events `range` to `orders`, `batch` at the most at a time.
fn append_in_batches(http: &Agent, server: &Server, range: Range<usize>, batch: usize) {
    let mut start = range.start;
    while start < range.end {
        let end = (start + batch).min(range.end);
        append_batch(http, server, "orders", "e", start..end);
        start = end;
    }
}

/// Runs the scenario on a `rheo serve` (with `--test-clock`) of its own
/// over `store`, which is running: the handler is running when the store
/// stops, and everything is checked once it is back. The server has
/// stopped when this returns; the store still runs.
pub(crate) fn restart_mid_run(store: &mut impl OwnStore, restart: Restart) {
    let Restart {
        store: name,
        backend,
        before,
        after,
        batch,
        down_append_timeout,
        backoff_wait,
    } = restart;
    let options = ServerOptions {
        backend: Some(backend),
        test_clock: true,
        // The store has its own process here, not one the library tests
        // share: the default bound on a store call holds, and it is what
        // makes the append below answer while the store is down.
        args: vec!["--store-timeout-ms".into(), "10000".into()],
        ..ServerOptions::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &options);
    let http = agent();

    let (status, body) = post(
        &http,
        &server,
        "/v1/streams",
        &json!({"name": "orders", "partition_count": 2}),
    );
    assert_eq!(status, 201, "{body}");
    let manifest = json!({"stream": "orders", "group": "g", "concurrency": 4, "lease_ms": 5000});
    let (status, body) = deploy(&http, &server, "worker", &manifest, &guest("echo"));
    assert!(status == 200 || status == 201, "{status} {body}");
    append_in_batches(&http, &server, 0..before, batch);
    let acked = || -> u64 {
        let (status, body) = get(&http, &server, "/v1/handlers/worker");
        assert_eq!(status, 200, "{body}");
        body["counters"]["acked"].as_u64().unwrap_or(0)
    };
    eventually("the handler is running", Duration::from_secs(60), || {
        (acked() > 0).then_some(())
    });

    store.stop();
    let lag = get(&http, &server, "/v1/streams/orders/groups/g/lag");
    assert_error(&lag, 503, "backend_unavailable");
    // An answer, not a hang.
    let impatient: Agent = Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(down_append_timeout))
        .build()
        .into();
    let sent = impatient
        .post(server.url("/v1/streams/orders/events"))
        .send_json(json!({"id": "while-down", "payload": {}}));
    if let Err(ureq::Error::Timeout(_)) = &sent {
        panic!(
            "an append while {name} is down got no answer within {} s",
            down_append_timeout.as_secs()
        );
    }
    let append = rheo_e2e::answer(sent);
    // A write sent on a connection the store just closed may have landed:
    // that one is `ambiguous`; a write refused outright is unavailable.
    assert_eq!(append.0, 503, "{}", append.1);
    assert!(
        ["backend_unavailable", "ambiguous"].contains(&code(&append.1)),
        "{}",
        append.1
    );
    // The runtime keeps trying, further apart each time: 100, 200, 400 ms…
    let retries = eventually("fetches back off", backoff_wait, || {
        let retries = fetch_retries(&server.log_text());
        (retries.len() >= 4).then_some(retries)
    });
    assert!(
        retries.windows(2).take(3).all(|w| w[1] > w[0]),
        "each retry waits longer: {retries:?}"
    );

    store.spawn();
    append_in_batches(&http, &server, before..before + after, batch);
    // Deliveries whose settle was lost with the connection come back when
    // their lease expires.
    // So do those of a settle sent on a pooled connection the restart
    // broke, after the store was back: whenever the run stops moving for a
    // while, the frozen clock moves past a lease, as real time would.
    let past_a_lease = || {
        let (status, body) = post(
            &http,
            &server,
            "/v1/test/clock",
            &json!({"advance_ms": 6000}),
        );
        assert_eq!(status, 200, "{body}");
    };
    past_a_lease();
    let mut unchanged: Option<(Value, Instant)> = None;
    let lag: Value = eventually_progressing("every event acked", Duration::from_secs(120), || {
        let (status, lag) = get(&http, &server, "/v1/streams/orders/groups/g/lag");
        if status == 200 && lag["lag"] == 0 {
            return Ok(lag);
        }
        let now = Instant::now();
        match &unchanged {
            Some((seen, since)) if *seen == lag => {
                if now.duration_since(*since) >= STILL_FOR {
                    past_a_lease();
                    unchanged = Some((lag.clone(), now));
                }
            }
            _ => unchanged = Some((lag.clone(), now)),
        }
        Err(lag)
    });
    assert_eq!(lag["inflight"], 0, "{lag}");
    let (status, info) = get(&http, &server, "/v1/streams/orders/groups/g");
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["dead_letters"], 0, "{info}");
    let (status, stream) = get(&http, &server, "/v1/streams/orders");
    assert_eq!(status, 200, "{stream}");
    let total: u64 = stream["partitions"]
        .as_object()
        .expect("partitions")
        .values()
        .map(|p| p["high_watermark"].as_u64().expect("a high watermark"))
        .sum();
    assert_eq!(
        total,
        (before + after) as u64,
        "every append before and after the restart kept: {stream}"
    );
    let log = server.log_text();
    assert!(!log.contains("panicked"), "no panic:\n{log}");
}
