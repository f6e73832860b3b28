//! Two `rheo serve` processes on one Redis (`TEST_REDIS_URL`), the same
//! handler deployed to both, consume one group together: every event is
//! acked exactly once, by one server or the other, and both take part.

mod support;

use std::time::Duration;

use rheo_e2e::{Server, ServerOptions, agent, service_url};
use serde_json::{Value, json};
use support::{append_batch, deploy, eventually, get, guest, post};

const EVENTS: usize = 5_000;

/// Deletes every key under `prefix` (best effort, with `redis-cli`).
fn delete_keys(url: &str, prefix: &str) {
    let keys = std::process::Command::new("redis-cli")
        .args(["-u", url, "--scan", "--pattern", &format!("{prefix}:*")])
        .output();
    let Ok(keys) = keys else { return };
    let keys = String::from_utf8_lossy(&keys.stdout);
    for chunk in keys.lines().collect::<Vec<_>>().chunks(500) {
        let _ = std::process::Command::new("redis-cli")
            .args(["-u", url, "del"])
            .args(chunk)
            .output();
    }
}

#[test]
fn two_servers_on_one_redis_ack_every_event_exactly_once() {
    let Some(url) = service_url("TEST_REDIS_URL", "redis") else {
        return;
    };
    let prefix = format!("rheo_e2e_{}_{:08x}", std::process::id(), rand_suffix());
    let sep = if url.contains('?') { '&' } else { '?' };
    let backend = format!("{url}{sep}prefix={prefix}");
    let options = ServerOptions {
        backend: Some(backend),
        ..ServerOptions::default()
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Server::start(dir_a.path(), &options);
    let b = Server::start(dir_b.path(), &options);
    let http = agent();

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
    for n in 0..EVENTS / 500 {
        append_batch(&http, &a, "orders", "e", n * 500..(n + 1) * 500);
    }

    let counters = |server: &Server| -> Value {
        let (status, body) = get(&http, server, "/v1/handlers/worker");
        assert_eq!(status, 200, "{body}");
        body["counters"].clone()
    };
    let (ca, cb) = eventually("both servers caught up", Duration::from_secs(120), || {
        let (ca, cb) = (counters(&a), counters(&b));
        let acked = ca["acked"].as_u64()? + cb["acked"].as_u64()?;
        let (status, lag) = get(&http, &b, "/v1/streams/orders/groups/g/lag");
        assert_eq!(status, 200, "{lag}");
        (acked >= EVENTS as u64 && lag["lag"] == 0).then_some((ca, cb))
    });
    let acked = |c: &Value| c["acked"].as_u64().unwrap();
    assert_eq!(
        acked(&ca) + acked(&cb),
        EVENTS as u64,
        "each event acked once"
    );
    for c in [&ca, &cb] {
        assert!(acked(c) > 0, "both servers took part: {ca} / {cb}");
        for counter in ["retried", "rejected", "lost", "settle_errors", "trapped"] {
            assert_eq!(c[counter], 0, "{counter}: {c}");
        }
    }
    let (status, info) = get(&http, &a, "/v1/streams/orders/groups/g");
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["dead_letters"], 0, "{info}");
    drop((a, b));
    delete_keys(&url, &prefix);
}

/// A few random bits without another dependency.
fn rand_suffix() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    t.subsec_nanos() ^ (t.as_secs() as u32)
}
