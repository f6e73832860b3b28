//! `rheo-compare` runs each pair end to end and reports what it measured
//! (tiny runs: these check behaviour, never speed).

use std::process::Command;

use serde_json::Value;

/// Runs the binary with `args` and `--json`; returns its pairs.
fn compare(args: &[&str]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_rheo-compare"))
        .args([
            "--events", "120", "--batch", "25", "--rounds", "1", "--json",
        ])
        .args(args)
        .output()
        .expect("rheo-compare runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rheo-compare failed:\n{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    doc.as_array().expect("an array of pairs").clone()
}

/// Both sides consumed every event, and the ratio is theirs.
fn assert_measured(pair: &Value) {
    assert_eq!(pair["error"], Value::Null, "{pair}");
    let rheo = pair["rheo_result"]["events_per_sec"].as_f64().unwrap();
    let raw = pair["raw_result"]["events_per_sec"].as_f64().unwrap();
    assert_eq!(pair["rheo_result"]["events"], 120, "{pair}");
    assert_eq!(pair["raw_result"]["events"], 120, "{pair}");
    let ratio = pair["ratio"].as_f64().unwrap();
    assert!((ratio - rheo / raw).abs() < 1e-9, "{pair}");
}

#[test]
fn sqlite_pair_is_measured() {
    let pairs = compare(&["--only", "sqlite"]);
    assert_eq!(pairs.len(), 1);
    assert_eq!(pairs[0]["peer"], "sqlite");
    assert_measured(&pairs[0]);
}

#[test]
fn postgres_pair_is_measured_and_cleans_up() {
    let Ok(url) = std::env::var("TEST_POSTGRES_URL") else {
        assert!(
            !required("postgres"),
            "TEST_POSTGRES_URL is unset but PostgreSQL is required"
        );
        eprintln!("skipped: TEST_POSTGRES_URL is not set");
        return;
    };
    let pairs = compare(&["--only", "postgres", "--postgres", &url]);
    assert_eq!(pairs[0]["peer"], "postgres");
    assert_measured(&pairs[0]);
    let left = Command::new("psql")
        .args([&url, "-tAc"])
        .arg("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'rheo_compare_%'")
        .output();
    if let Ok(left) = left
        && left.status.success()
    {
        assert_eq!(
            String::from_utf8_lossy(&left.stdout).trim(),
            "0",
            "schemas dropped"
        );
    }
}

#[test]
fn redis_pair_is_measured_and_cleans_up() {
    let Ok(url) = std::env::var("TEST_REDIS_URL") else {
        assert!(
            !required("redis"),
            "TEST_REDIS_URL is unset but Redis is required"
        );
        eprintln!("skipped: TEST_REDIS_URL is not set");
        return;
    };
    let pairs = compare(&["--only", "redis,redis-append", "--redis", &url]);
    assert_eq!(pairs[0]["peer"], "redis");
    assert_eq!(pairs[1]["peer"], "redis-append");
    assert_measured(&pairs[0]);
    assert_measured(&pairs[1]);
    let left = Command::new("redis-cli")
        .args(["-u", &url, "--scan", "--pattern", "rheo_compare_*"])
        .output();
    if let Ok(left) = left
        && left.status.success()
    {
        assert_eq!(
            String::from_utf8_lossy(&left.stdout).trim(),
            "",
            "keys deleted"
        );
    }
}

#[test]
fn an_unreachable_peer_is_reported_not_measured() {
    let out = Command::new(env!("CARGO_BIN_EXE_rheo-compare"))
        .args(["--events", "50", "--rounds", "1", "--json"])
        .args(["--only", "sqlite,jetstream", "--nats", "nats://127.0.0.1:1"])
        .output()
        .expect("rheo-compare runs");
    assert!(out.status.success(), "one pair was measured");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc[1]["peer"], "jetstream");
    let error = doc[1]["error"].as_str().expect("an error");
    assert!(
        error.contains("cannot connect to NATS at nats://127.0.0.1:1"),
        "{error}"
    );
    assert_eq!(doc[1]["ratio"], Value::Null);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("JetStream: not measured"), "{stderr}");
}

/// Whether CI requires `backend` (`REQUIRE_BACKENDS`).
fn required(backend: &str) -> bool {
    std::env::var("REQUIRE_BACKENDS").is_ok_and(|list| list.split(',').any(|b| b.trim() == backend))
}

#[test]
fn jetstream_pair_is_measured() {
    let url = std::env::var("TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let addr = url.trim_start_matches("nats://");
    if std::net::TcpStream::connect(addr).is_err() {
        eprintln!("skipped: no NATS server answers at {url}");
        return;
    }
    let pairs = compare(&["--only", "jetstream", "--nats", &url]);
    assert_eq!(pairs[0]["peer"], "jetstream");
    assert_measured(&pairs[0]);
}

#[test]
fn each_client_count_is_a_pair_of_its_own() {
    let pairs = compare(&["--only", "sqlite", "--clients", "1,3"]);
    assert_eq!(pairs.len(), 2);
    for (pair, clients) in pairs.iter().zip([1, 3]) {
        assert_eq!(pair["peer"], "sqlite");
        assert_eq!(pair["clients"], clients);
        assert_measured(pair);
    }
    let name = pairs[1]["rheo_result"]["name"].as_str().unwrap();
    assert!(name.ends_with("3 clients"), "{name}");
}

#[test]
fn a_client_count_out_of_range_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_rheo-compare"))
        .args(["--only", "sqlite", "--clients", "0"])
        .output()
        .expect("rheo-compare runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--clients must be between 1 and 64"),
        "{stderr}"
    );
}

#[test]
fn jetstream_against_redis_is_measured_with_several_clients() {
    let Ok(redis) = std::env::var("TEST_REDIS_URL") else {
        assert!(
            !required("redis"),
            "TEST_REDIS_URL is unset but Redis is required"
        );
        eprintln!("skipped: TEST_REDIS_URL is not set");
        return;
    };
    let url = std::env::var("TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let addr = url.trim_start_matches("nats://");
    if std::net::TcpStream::connect(addr).is_err() {
        eprintln!("skipped: no NATS server answers at {url}");
        return;
    }
    let pairs = compare(&[
        "--only",
        "jetstream-redis",
        "--clients",
        "2",
        "--nats",
        &url,
        "--redis",
        &redis,
    ]);
    assert_eq!(pairs[0]["peer"], "jetstream-redis");
    assert_eq!(pairs[0]["rheo"], "Rheo on Redis");
    assert_eq!(pairs[0]["clients"], 2);
    assert_measured(&pairs[0]);
}
