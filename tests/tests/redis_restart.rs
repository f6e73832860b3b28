//! Redis restarted in the middle of a handler run: while it is down the API
//! answers `backend_unavailable` and the runtime backs off (its log shows
//! the fetch retries spreading out), nothing panics, and once Redis is back
//! the run finishes with every event acked and no dead letter.
//!
//! The test starts its own `redis-server` (on a free port, append-only file
//! synced on every write, in a temporary folder) so that it can stop and
//! restart it without disturbing anything else; it runs wherever
//! `TEST_REDIS_URL` is set (CI sets it, and fails if `redis-server` is
//! missing). The server runs on `--test-clock`: leases whose settle was
//! lost with the connection are expired by moving that clock, never by
//! sleeping.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rheo_e2e::{Server, ServerOptions, agent, service_url};
use serde_json::{Value, json};
use support::{append_batch, assert_error, deploy, eventually, get, guest, post};

/// A `redis-server` of this test's own.
struct OwnRedis {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl OwnRedis {
    fn start(dir: &Path, port: u16) -> Self {
        let mut redis = Self {
            child: None,
            port,
            dir: dir.to_owned(),
        };
        redis.spawn();
        redis
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed where TEST_REDIS_URL is set");
        self.child = Some(child);
        eventually("redis-server answers", Duration::from_secs(20), || {
            self.cli(&["ping"]).filter(|out| out.trim() == "PONG")
        });
    }

    fn cli(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Stops the server the way an operator's restart does; every write it
    /// acknowledged is in the append-only file.
    fn stop(&mut self) {
        let _ = self.cli(&["shutdown"]);
        if let Some(mut child) = self.child.take() {
            let status = child.wait().expect("wait for redis-server");
            assert!(status.success(), "redis-server stopped cleanly: {status}");
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Every `retry_in_ms=` the runtime logged for a failed fetch, in order.
fn fetch_retries(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|line| line.contains("fetch failed"))
        .filter_map(|line| {
            let (_, rest) = line.split_once("retry_in_ms=")?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

#[test]
fn a_redis_restart_mid_run_is_unavailable_then_backs_off_and_finishes() {
    if service_url("TEST_REDIS_URL", "redis").is_none() {
        return;
    }
    let redis_dir = tempfile::tempdir().unwrap();
    let mut redis = OwnRedis::start(redis_dir.path(), free_port());
    let options = ServerOptions {
        backend: Some(format!("redis://127.0.0.1:{}?prefix=restart", redis.port)),
        test_clock: true,
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
    for n in 0..4 {
        append_batch(&http, &server, "orders", "e", n * 500..(n + 1) * 500);
    }
    let acked = || -> u64 {
        let (status, body) = get(&http, &server, "/v1/handlers/worker");
        assert_eq!(status, 200, "{body}");
        body["counters"]["acked"].as_u64().unwrap_or(0)
    };
    eventually("the handler is running", Duration::from_secs(60), || {
        (acked() > 0).then_some(())
    });

    redis.stop();
    let lag = get(&http, &server, "/v1/streams/orders/groups/g/lag");
    assert_error(&lag, 503, "backend_unavailable");
    let append = post(
        &http,
        &server,
        "/v1/streams/orders/events",
        &json!({"id": "while-down", "payload": {}}),
    );
    // A write sent on the connection Redis just closed may have landed:
    // that one is `ambiguous`; a write refused outright is unavailable.
    assert_eq!(append.0, 503, "{}", append.1);
    assert!(
        ["backend_unavailable", "ambiguous"].contains(&support::code(&append.1)),
        "{}",
        append.1
    );
    // The runtime keeps trying, further apart each time: 100, 200, 400 ms…
    let retries = eventually("fetches back off", Duration::from_secs(30), || {
        let retries = fetch_retries(&server.log_text());
        (retries.len() >= 4).then_some(retries)
    });
    assert!(
        retries.windows(2).take(3).all(|w| w[1] > w[0]),
        "each retry waits longer: {retries:?}"
    );

    redis.spawn();
    for n in 4..6 {
        append_batch(&http, &server, "orders", "e", n * 500..(n + 1) * 500);
    }
    // Deliveries whose settle was lost with the connection come back when
    // their lease expires.
    let (status, body) = post(
        &http,
        &server,
        "/v1/test/clock",
        &json!({"advance_ms": 6000}),
    );
    assert_eq!(status, 200, "{body}");
    let lag: Value = eventually("every event acked", Duration::from_secs(120), || {
        let (status, lag) = get(&http, &server, "/v1/streams/orders/groups/g/lag");
        (status == 200 && lag["lag"] == 0).then_some(lag)
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
        total, 3000,
        "every append before and after the restart kept: {stream}"
    );
    let log = server.log_text();
    assert!(!log.contains("panicked"), "no panic:\n{log}");
}
