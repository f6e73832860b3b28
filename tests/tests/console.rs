//! The web console (`/ui`, docs/console.md) in a real browser: each test
//! starts `rheo serve`, prepares state over the HTTP API, then runs
//! `node tests/browser/console.mjs` (playwright-core driving the system
//! Chromium, `/usr/bin/chromium`) with the server's URL and a scenario
//! name, and asserts it exits 0. Its output is printed.
//!
//! Without Chromium or Node.js the tests skip, saying why — unless
//! `REQUIRE_BROWSER` is set (CI sets `chromium`): then they fail.
//! `tests/browser/node_modules` is installed with `npm ci` when missing.
//! The pages' screenshots go to `target/tmp/console-screenshots/`;
//! `RHEO_UPDATE_SCREENSHOTS=1` copies them over `docs/console/*.png`.

use crate::support;

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rheo_e2e::{Server, ServerOptions, agent, answer, repo_root};
use serde_json::{Value, json};
use support::{
    deploy, eventually, guest, lag, lease_ref, multipart, post, post_empty, post_with_token, stream,
};

/// Where the system browser is (`CHROMIUM` overrides).
fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

fn browser_dir() -> PathBuf {
    repo_root().join("tests/browser")
}

/// Whether the browser tests can run: `None` (and a printed reason) when
/// not; a panic instead when `REQUIRE_BROWSER` is set.
fn browser_ready() -> Option<()> {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    let ready = READY.get_or_init(|| {
        if !chromium().exists() {
            return Err(format!(
                "{} is missing (apt-get install chromium)",
                chromium().display()
            ));
        }
        if !works("node", &["--version"]) {
            return Err("node is not installed".into());
        }
        let module = browser_dir().join("node_modules/playwright-core");
        if !module.exists() {
            eprintln!("installing playwright-core: npm ci in tests/browser");
            let ok = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(browser_dir())
                // playwright-core downloads nothing; this says so twice.
                .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
                .status()
                .is_ok_and(|s| s.success());
            if !ok || !module.exists() {
                return Err("npm ci in tests/browser failed".into());
            }
        }
        Ok(())
    });
    match ready {
        Ok(()) => Some(()),
        Err(why) => {
            if std::env::var("REQUIRE_BROWSER").is_ok_and(|v| !v.trim().is_empty()) {
                panic!("REQUIRE_BROWSER is set, but the browser tests cannot run: {why}");
            }
            eprintln!("skipping the browser test: {why}");
            None
        }
    }
}

fn works(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Where the scenarios write their screenshots.
fn screenshots() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots")
}

/// Runs the browser scenario `name` against `server` with `env`; asserts
/// it passed. One browser at a time: the machines running this have few
/// cores, and the waits are generous but bounded.
fn run_scenario(server: &Server, name: &str, env: &[(&str, &OsStr)]) {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    std::fs::create_dir_all(screenshots()).expect("the screenshots folder");
    let started = Instant::now();
    let out = Command::new("node")
        .arg(browser_dir().join("console.mjs"))
        .env("RHEO_URL", server.base())
        .env("RHEO_SCENARIO", name)
        .env("RHEO_SCREENSHOTS_DIR", screenshots())
        .env("CHROMIUM", chromium())
        .envs(env.iter().copied())
        .output()
        .expect("run node tests/browser/console.mjs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!(
        "--- browser scenario {name} ({:.1} s) ---\n{stdout}{stderr}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "browser scenario {name} failed:\n{stdout}{stderr}\n--- server log ---\n{}",
        server.log_text()
    );
}

/// A fresh server on SQLite in a temporary folder and an HTTP agent, or
/// `None` where the browser cannot run (the test then returns;
/// `browser_ready` says why, or fails when the browser is required).
fn fresh() -> Option<(tempfile::TempDir, Server, ureq::Agent)> {
    browser_ready()?;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &ServerOptions::default());
    Some((dir, server, agent()))
}

/// Creates a group on `stream` as `body` (name and settings) says.
fn group(http: &ureq::Agent, server: &Server, stream: &str, body: Value) {
    let path = format!("/v1/streams/{stream}/groups");
    let (status, answer) = post(http, server, &path, &body);
    assert_eq!(status, 201, "{answer}");
}

/// Appends `events` (JSON event inputs) to `stream` in one batch.
fn append(http: &ureq::Agent, server: &Server, stream: &str, events: Vec<Value>) {
    let (status, body) = post(
        http,
        server,
        &format!("/v1/streams/{stream}/events/batch"),
        &json!({ "events": events }),
    );
    assert_eq!(status, 201, "{body}");
}

#[test]
fn console_shows_streams_events_and_a_group_draining_to_zero_lag() {
    if browser_ready().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Sampled often, so the plots have the server's samples to start from
    // after a reload (GET /v1/metrics/samples keeps one a second).
    let server = Server::start(
        dir.path(),
        &ServerOptions {
            args: vec!["--metrics-interval".into(), "250ms".into()],
            ..ServerOptions::default()
        },
    );
    let http = agent();
    stream(&http, &server, "orders", 3);
    // The poison guest acks everything but the events marked poison, which
    // it rejects (and logs): three dead letters once the group has drained.
    let manifest = json!({"stream": "orders", "group": "billing", "concurrency": 4});
    let (status, body) = deploy(&http, &server, "billing", &manifest, &guest("poison"));
    assert!(status == 200 || status == 201, "{status} {body}");
    let (status, body) = post_empty(&http, &server, "/v1/handlers/billing/pause");
    assert_eq!(status, 200, "{body}");
    let events = (0..300)
        .map(|i| {
            let kind = if i % 2 == 0 {
                "order.placed"
            } else {
                "order.paid"
            };
            let mut payload = json!({"total": 10 + (i * 37) % 400, "currency": "EUR"});
            if i % 100 == 42 {
                payload["poison"] = json!(true);
                payload["reason"] = json!("total does not match the lines");
            }
            json!({"id": format!("o-{i}"), "type": kind, "key": format!("customer-{}", i % 7),
                   "payload": payload, "metadata": {"correlation_id": format!("checkout-{}", i / 2)}})
        })
        .collect();
    append(&http, &server, "orders", events);
    assert_eq!(lag(&http, &server, "orders", "billing")["lag"], 300);

    run_scenario(&server, "drain", &[]);

    // The page saw what the API says.
    let after = lag(&http, &server, "orders", "billing");
    assert_eq!(after["lag"], 0, "{after}");
    update_screenshots(&["streams", "events", "group", "handler", "handlers", "nodes"]);
}

/// With `RHEO_UPDATE_SCREENSHOTS=1`, copies the scenario's screenshots of
/// `pages` over `docs/console/*.png`.
fn update_screenshots(pages: &[&str]) {
    if std::env::var("RHEO_UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1") {
        let docs = repo_root().join("docs/console");
        std::fs::create_dir_all(&docs).unwrap();
        for page in pages {
            let from = screenshots().join(format!("{page}.png"));
            std::fs::copy(&from, docs.join(format!("{page}.png")))
                .unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
        }
        println!("updated docs/console/{{{}}}.png", pages.join(","));
    }
}

#[test]
fn console_redrives_dead_letters_and_deletes_the_group() {
    let Some((_dir, server, http)) = fresh() else {
        return;
    };
    stream(&http, &server, "payments", 1);
    group(
        &http,
        &server,
        "payments",
        json!({"name": "audit", "max_attempts": 5}),
    );
    let events = (1..=3)
        .map(|i| json!({"id": format!("p-{i}"), "type": "payment.captured", "payload": {"amount": i * 25}}))
        .collect();
    append(&http, &server, "payments", events);
    let (status, body) = post(
        &http,
        &server,
        "/v1/streams/payments/groups/audit/fetch",
        &json!({"limit": 3, "lease_ms": 600_000}),
    );
    assert_eq!(status, 200, "{body}");
    let leases = body["leases"].as_array().expect("leases").clone();
    assert_eq!(leases.len(), 3, "{body}");
    for lease in &leases {
        let (path, extra) = match lease["event_id"].as_str() {
            Some("p-1") => ("reject", json!({"reason": "card declined"})),
            Some("p-2") => ("reject", json!({"reason": "card expired"})),
            _ => ("ack", json!({})),
        };
        let (status, body) = post(
            &http,
            &server,
            &format!("/v1/streams/payments/groups/audit/{path}"),
            &lease_ref(lease, &extra),
        );
        assert_eq!(status, 200, "{path}: {body}");
    }

    run_scenario(&server, "redrive", &[]);

    // The page deleted the group, and only the group.
    let (status, body) = support::get(&http, &server, "/v1/streams/payments/groups/audit");
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "group_not_found", "{body}");
    let (status, body) = support::get(&http, &server, "/v1/streams/payments");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["partitions"]["0"]["high_watermark"], 3, "{body}");
}

#[test]
fn console_releases_parked_keys() {
    let Some((_dir, server, http)) = fresh() else {
        return;
    };
    stream(&http, &server, "accounts", 1);
    group(
        &http,
        &server,
        "accounts",
        json!({"name": "ledger", "ordering": "key", "on_exhausted": "quarantine", "max_attempts": 1}),
    );
    let events = ["acct-7", "acct-9", "acct-7"]
        .iter()
        .map(|key| json!({"type": "entry.posted", "key": key}))
        .collect();
    append(&http, &server, "accounts", events);
    let (status, body) = post(
        &http,
        &server,
        "/v1/streams/accounts/groups/ledger/fetch",
        &json!({"limit": 10}),
    );
    assert_eq!(status, 200, "{body}");
    let leases = body["leases"].as_array().expect("leases").clone();
    assert_eq!(leases.len(), 2, "one head per key: {body}");
    for lease in &leases {
        let (status, body) = post(
            &http,
            &server,
            "/v1/streams/accounts/groups/ledger/nack",
            &lease_ref(lease, &json!({"reason": "ledger locked"})),
        );
        assert_eq!(status, 200, "{body}");
    }

    run_scenario(&server, "quarantine", &[]);

    // acct-7 went on with its next event; acct-9's head is out again.
    let (status, body) = post(
        &http,
        &server,
        "/v1/streams/accounts/groups/ledger/fetch",
        &json!({"limit": 10}),
    );
    assert_eq!(status, 200, "{body}");
    let mut out: Vec<(String, u64)> = (body["leases"].as_array().into_iter().flatten())
        .map(|l| {
            (
                l["event"]["key"].as_str().unwrap().to_owned(),
                l["attempt"].as_u64().unwrap(),
            )
        })
        .collect();
    out.sort();
    assert_eq!(
        out,
        [("acct-7".to_owned(), 1), ("acct-9".to_owned(), 1)],
        "{body}"
    );
}

#[test]
fn console_swaps_a_handler_module_from_a_file() {
    let Some((dir, server, http)) = fresh() else {
        return;
    };
    stream(&http, &server, "jobs", 1);
    let manifest = json!({"stream": "jobs", "group": "workers"});
    let (status, body) = deploy(&http, &server, "swapper", &manifest, &guest("echo"));
    assert!(status == 200 || status == 201, "{status} {body}");
    let wasm = dir.path().join("poison.wasm");
    std::fs::write(&wasm, guest("poison")).unwrap();

    run_scenario(&server, "swap", &[("RHEO_SWAP_WASM", wasm.as_os_str())]);

    // The API agrees: rolled back to the first module.
    let view = eventually("the handler back on echo", Duration::from_secs(30), || {
        let view = support::handler(&http, &server, "swapper");
        (view["status"] == "running").then_some(view)
    });
    assert!(view["previous_version"].is_u64(), "{view}");
    let fresh = support::handler(&http, &server, "fresh");
    assert_eq!(
        (&fresh["stream"], &fresh["group"]),
        (&json!("jobs"), &json!("fresh-group")),
        "{fresh}"
    );
}

/// The write forms: a stream created, events appended (a duplicate id
/// appends nothing), two groups created with their options — and the
/// server holds what the page said; the groups page polls one route.
#[test]
fn console_creates_a_stream_appends_events_and_creates_groups() {
    let Some((_dir, server, http)) = fresh() else {
        return;
    };

    run_scenario(&server, "write", &[]);

    let (status, ledger) = support::get(&http, &server, "/v1/streams/ledger");
    assert_eq!(status, 200, "{ledger}");
    assert_eq!(ledger["partition_count"], 2, "{ledger}");
    let (status, found) = post(
        &http,
        &server,
        "/v1/streams/ledger/query",
        &json!({"limit": 10}),
    );
    assert_eq!(status, 200, "{found}");
    let events = found["events"].as_array().expect("events");
    assert_eq!(events.len(), 2, "the duplicate appended nothing: {found}");
    let first = events.iter().find(|e| e["id"] == "e-1").expect("e-1");
    assert_eq!(
        (&first["type"], &first["key"], &first["payload"]),
        (
            &json!("entry.posted"),
            &json!("acct-1"),
            &json!({"amount": 42, "currency": "EUR"})
        ),
        "{first}"
    );
    let (status, audit) = support::get(&http, &server, "/v1/streams/ledger/groups/audit");
    assert_eq!(status, 200, "{audit}");
    assert_eq!(
        (
            &audit["max_attempts"],
            &audit["ordering"],
            &audit["retry_backoff_ms"],
            &audit["lag"]["lag"]
        ),
        (&json!(3), &json!("key"), &json!([1000, 5000]), &json!(2)),
        "{audit}"
    );
    // New events only: each partition starts after its last event.
    let (status, tail) = support::get(&http, &server, "/v1/streams/ledger/groups/tail");
    assert_eq!(status, 200, "{tail}");
    assert_eq!(tail["lag"]["lag"], 0, "{tail}");
    assert_eq!(tail["max_attempts"], 5, "{tail}");
    assert_eq!(
        tail["flow"],
        json!({"key_concurrency": 4, "key_rate": {"per_second": 2.5, "burst": 5}}),
        "{tail}"
    );
    for (p, mark) in ledger["partitions"].as_object().unwrap() {
        let next = mark["high_watermark"].as_u64().unwrap() + 1;
        assert_eq!(tail["cursors"][p], next, "partition {p}: {tail}");
    }
}

/// Replay from a sequence and from the start, then a reset the page lets
/// through only once the group's name is typed: the server's cursor is
/// back at the start.
#[test]
fn console_replays_and_resets_a_group() {
    let Some((_dir, server, http)) = fresh() else {
        return;
    };
    stream(&http, &server, "orders", 1);
    group(&http, &server, "orders", json!({"name": "billing"}));
    append(
        &http,
        &server,
        "orders",
        (1..=5).map(|i| json!({"id": format!("o-{i}")})).collect(),
    );
    let (status, body) = post(
        &http,
        &server,
        "/v1/streams/orders/groups/billing/fetch",
        &json!({"limit": 5}),
    );
    assert_eq!(status, 200, "{body}");
    for lease in body["leases"].as_array().unwrap() {
        let (status, body) = post(
            &http,
            &server,
            "/v1/streams/orders/groups/billing/ack",
            &lease_ref(lease, &json!({})),
        );
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(lag(&http, &server, "orders", "billing")["lag"], 0);

    run_scenario(&server, "recovery", &[]);

    let (status, info) = support::get(&http, &server, "/v1/streams/orders/groups/billing");
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["cursors"], json!({"0": 1}), "{info}");
    assert_eq!(
        (
            &info["lag"]["lag"],
            &info["lag"]["partitions"]["0"]["frontier"]
        ),
        (&json!(5), &json!(0)),
        "{info}"
    );
}

/// A group's leases in the in-flight table, page by page, each with its
/// holder, attempt and expiry, as `GET …/leases` lists them.
#[test]
fn console_lists_a_groups_leases_page_by_page() {
    let Some((_dir, server, http)) = fresh() else {
        return;
    };
    stream(&http, &server, "queue", 1);
    group(&http, &server, "queue", json!({"name": "workers"}));
    append(
        &http,
        &server,
        "queue",
        (1..=30).map(|i| json!({"id": format!("q-{i}")})).collect(),
    );
    // 28 held for ten minutes by worker-7, two for a second by slow-1.
    for (consumer, limit, lease_ms) in [("worker-7", 28, 600_000), ("slow-1", 2, 1000)] {
        let (status, body) = post(
            &http,
            &server,
            "/v1/streams/queue/groups/workers/fetch",
            &json!({"limit": limit, "consumer_id": consumer, "lease_ms": lease_ms}),
        );
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["leases"].as_array().unwrap().len(), limit, "{body}");
    }

    run_scenario(&server, "inflight", &[]);

    // Reading changed nothing: all 30 still out.
    let (status, info) = support::get(&http, &server, "/v1/streams/queue/groups/workers");
    assert_eq!((status, &info["inflight"]), (200, &json!(30)), "{info}");
}

/// A dry run of a candidate shown as a comparison, a canary started,
/// stopped, started again and promoted, and the deploy history.
#[test]
fn console_dry_runs_a_module_and_runs_a_canary() {
    let Some((dir, server, http)) = fresh() else {
        return;
    };
    stream(&http, &server, "jobs", 1);
    let manifest = json!({"stream": "jobs", "group": "workers"});
    let (status, body) = deploy(&http, &server, "worker", &manifest, &guest("echo"));
    assert!(status == 200 || status == 201, "{status} {body}");
    // Twenty events, two of which the candidate (poison) rejects.
    append(
        &http,
        &server,
        "jobs",
        (0..20)
            .map(|i| {
                let mut payload = json!({"n": i});
                if i % 10 == 3 {
                    payload["poison"] = json!(true);
                }
                json!({"id": format!("j-{i}"), "payload": payload})
            })
            .collect(),
    );
    let poison = guest("poison");
    let wasm = dir.path().join("poison.wasm");
    std::fs::write(&wasm, &poison).unwrap();

    run_scenario(&server, "canary", &[("RHEO_SWAP_WASM", wasm.as_os_str())]);
    update_screenshots(&["canary"]);

    let view = support::handler(&http, &server, "worker");
    assert!(view["canary"].is_null(), "{view}");
    assert_eq!(view["digest"], support::sha256_hex(&poison), "{view}");
    let (status, history) = support::get(&http, &server, "/v1/handlers/worker/history");
    assert_eq!(status, 200, "{history}");
    let actions: Vec<&str> = history["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["deploy", "canary", "rollback", "canary", "promote"],
        "{history}"
    );
}

/// With a read-only token the console shows the pages but none of the
/// controls that change something (redrive, replay, reset, delete,
/// create, append, swap, canary, dry run), and says it is read-only;
/// with the full token they are back (`GET /v1/whoami`).
#[test]
fn console_hides_write_controls_from_a_read_only_token() {
    if browser_ready().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (token, read) = ("console-e2e-write-7c2d", "console-e2e-read-3b9e");
    let server = Server::start(dir.path(), &ServerOptions::with_read_token(token, read));
    let http = agent();
    let authed = |path: &str, body: Value| post_with_token(&http, &server, token, path, &body);
    let (status, body) = authed(
        "/v1/streams",
        json!({"name": "payments", "partition_count": 1}),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = authed("/v1/streams/payments/groups", json!({"name": "audit"}));
    assert_eq!(status, 201, "{body}");
    let (status, body) = authed("/v1/streams/payments/events", json!({"id": "p-1"}));
    assert_eq!(status, 201, "{body}");
    let (status, body) = authed(
        "/v1/streams/payments/groups/audit/fetch",
        json!({"limit": 1}),
    );
    assert_eq!(status, 200, "{body}");
    let lease = &body["leases"][0];
    let (status, body) = authed(
        "/v1/streams/payments/groups/audit/reject",
        lease_ref(lease, &json!({"reason": "card declined"})),
    );
    assert_eq!(status, 200, "{body}");
    let manifest = serde_json::to_vec(&json!({"stream": "payments", "group": "readers"})).unwrap();
    let (content_type, form) = multipart(&[
        ("manifest", "application/json", &manifest),
        ("module", "application/wasm", &guest("echo")),
    ]);
    let (status, body) = answer(
        http.put(server.url("/v1/handlers/reader"))
            .header("Authorization", &format!("Bearer {token}"))
            .header("Content-Type", &content_type)
            .send(&form[..]),
    );
    assert_eq!(status, 201, "{body}");

    run_scenario(
        &server,
        "readonly",
        &[
            ("RHEO_TOKEN", OsStr::new(token)),
            ("RHEO_READ_TOKEN", OsStr::new(read)),
        ],
    );
    // The read-only visit changed nothing.
    let (status, group) = answer(
        http.get(server.url("/v1/streams/payments/groups/audit"))
            .header("Authorization", &format!("Bearer {token}"))
            .call(),
    );
    assert_eq!(
        (status, group["dead_letters"].as_u64()),
        (200, Some(1)),
        "{group}"
    );
}

#[test]
fn console_asks_for_the_token_and_then_works() {
    if browser_ready().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let token = "console-e2e-token-5a1f";
    let server = Server::start(
        dir.path(),
        &ServerOptions {
            auth_token: Some(token.into()),
            ..ServerOptions::default()
        },
    );
    let http = agent();
    let authed = |path: &str, body: Value| post_with_token(&http, &server, token, path, &body);
    let (status, body) = authed(
        "/v1/streams",
        json!({"name": "secrets", "partition_count": 1}),
    );
    assert_eq!(status, 201, "{body}");
    let events: Vec<Value> = (0..5).map(|i| json!({"id": format!("s-{i}")})).collect();
    let (status, body) = authed(
        "/v1/streams/secrets/events/batch",
        json!({ "events": events }),
    );
    assert_eq!(status, 201, "{body}");
    // The page itself needs no token; the API does.
    let page = http.get(server.url("/ui/")).call().expect("GET /ui/");
    assert_eq!(page.status(), 200);
    let (status, _) = answer(http.get(server.url("/v1/streams")).call());
    assert_eq!(status, 401);

    run_scenario(&server, "token", &[("RHEO_TOKEN", OsStr::new(token))]);
}
