//! Ordering per key end to end (`docs/groups.md#ordering`): a `rheo serve`
//! on SQLite, and one on PostgreSQL (`TEST_POSTGRES_URL`, a fresh schema),
//! runs the `transform` WASM handler at concurrency 16 over a group created
//! with `"ordering": "key"`: 20 keys × 200 events, every seventh of a key
//! retried once. The derived events land in a one-partition stream in the
//! order the handler ran, so each key's derived events must come in
//! sequence order, each once. (Under `"ordering": "none"` the event after
//! a retried one runs first, and the check fails.)

use crate::support;

use std::time::Duration;

use rheo_e2e::{Server, ServerOptions, agent};
use serde_json::{Value, json};
use support::{deploy, eventually_progressing, get, guest, post};
use ureq::Agent;

const KEYS: usize = 20;
const PER_KEY: usize = 200;

#[test]
fn on_sqlite_a_handler_of_concurrency_16_runs_each_key_in_sequence_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &ServerOptions::default());
    each_key_in_sequence_order(&server);
}

#[test]
fn on_postgres_a_handler_of_concurrency_16_runs_each_key_in_sequence_order() {
    let Some(schema) = rheo_e2e::PgSchema::fresh() else {
        return;
    };
    let options = ServerOptions {
        backend: Some(schema.url().to_owned()),
        ..ServerOptions::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &options);
    each_key_in_sequence_order(&server);
}

fn each_key_in_sequence_order(server: &Server) {
    let http = agent();
    for (name, partitions) in [("orders", 4), ("out", 1)] {
        let body = json!({"name": name, "partition_count": partitions});
        let (status, body) = post(&http, server, "/v1/streams", &body);
        assert_eq!(status, 201, "{body}");
    }
    let group = json!({"name": "g", "ordering": "key", "retry_backoff_ms": [20]});
    let (status, body) = post(&http, server, "/v1/streams/orders/groups", &group);
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["ordering"], "key", "{body}");

    // Interleaved (k0, k1, …, k0, k1, …), routed by key.
    let events: Vec<Value> = (0..PER_KEY)
        .flat_map(|n| {
            (0..KEYS).map(move |k| {
                json!({
                    "id": format!("k{k}-{n}"),
                    "key": format!("k{k}"),
                    "payload": {"k": k, "n": n, "retry_once": n % 7 == 3},
                })
            })
        })
        .collect();
    for batch in events.chunks(500) {
        let body = json!({ "events": batch });
        let (status, body) = post(&http, server, "/v1/streams/orders/events/batch", &body);
        assert_eq!(status, 201, "{body}");
    }
    let manifest = json!({
        "stream": "orders",
        "group": "g",
        "concurrency": 16,
        "config": {"target_stream": "out"},
    });
    let (status, body) = deploy(&http, server, "transform", &manifest, &guest("transform"));
    assert!(status == 200 || status == 201, "{status} {body}");

    let total = KEYS * PER_KEY;
    let derived =
        eventually_progressing("every event transformed", Duration::from_secs(60), || {
            let derived = read_all(&http, server, "out");
            let (status, lag) = get(&http, server, "/v1/streams/orders/groups/g/lag");
            assert_eq!(status, 200, "{lag}");
            if derived.len() == total && lag["lag"] == 0 {
                Ok(derived)
            } else {
                Err((derived.len(), lag["lag"].clone()))
            }
        });

    // In the order the handler appended them: each key's n goes 0, 1, 2, …
    let mut next = vec![0_u64; KEYS];
    for event in &derived {
        let payload = &event["payload"];
        let (k, n) = (
            payload["k"].as_u64().unwrap(),
            payload["n"].as_u64().unwrap(),
        );
        assert_eq!(
            n, next[k as usize],
            "key k{k}: event {n} ran where {} was due",
            next[k as usize]
        );
        next[k as usize] += 1;
    }
    assert!(next.iter().all(|&n| n == PER_KEY as u64), "{next:?}");

    let (status, handler) = get(&http, server, "/v1/handlers/transform");
    assert_eq!(status, 200, "{handler}");
    let counters = &handler["counters"];
    let retried = (0..PER_KEY).filter(|n| n % 7 == 3).count() * KEYS;
    // A retry beyond the planned ones is the guest's answer to an append
    // that failed, a settle error one of the store's: the server's
    // warnings say why.
    let log = server.log_text();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    let counters = format!("{counters}; the server warned: {warnings:#?}");
    assert_eq!(handler["counters"]["retried"], retried as u64, "{counters}");
    assert_eq!(handler["counters"]["acked"], total as u64, "{counters}");
    for counter in ["rejected", "lost", "settle_errors", "trapped"] {
        assert_eq!(handler["counters"][counter], 0, "{counter}: {counters}");
    }
    let (status, info) = get(&http, server, "/v1/streams/orders/groups/g");
    assert_eq!(status, 200, "{info}");
    assert_eq!(
        (info["inflight"].as_u64(), info["dead_letters"].as_u64()),
        (Some(0), Some(0))
    );
}

/// Every event of one-partition stream `stream`, in sequence order.
fn read_all(http: &Agent, server: &Server, stream: &str) -> Vec<Value> {
    let mut all = Vec::new();
    loop {
        let after = all.len();
        let path = format!("/v1/streams/{stream}/events?partition=0&after={after}&limit=1000");
        let (status, body) = get(http, server, &path);
        assert_eq!(status, 200, "{body}");
        let page = body["events"].as_array().unwrap().clone();
        if page.is_empty() {
            return all;
        }
        all.extend(page);
    }
}
