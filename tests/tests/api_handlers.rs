//! The handler routes (`docs/handlers.md`) against the real `rheo serve`: deploys
//! over multipart, hot swaps under load (a refused module leaves the old
//! version running), rollback, pause, resume and delete; and a restart on
//! the same SQLite file and handlers directory that keeps streams, groups,
//! dead letters and handlers; canaries rolled back and promoted, and the
//! deploy history. Handler progress is asynchronous, so it is
//! polled with a deadline.

mod support;

use std::time::Duration;

use rheo_e2e::{Server, ServerOptions, agent, answer};
use serde_json::{Value, json};
use support::{
    append_batch, assert_error, delete, deploy, eventually, get, guest, handler, lag, lease_ref,
    multipart, post, post_empty, stream, strings, swap_module,
};
use ureq::Agent;

/// How long a handler may take to catch up.
const CATCH_UP: Duration = Duration::from_secs(120);

/// Not a component: the magic number, then garbage.
const GARBAGE: &[u8] = b"\0asm\x0d\0\x01\0 this is not a component";

/// Waits until the group has no lag and the handler has acked `acked` in total.
fn wait_caught_up(
    http: &Agent,
    server: &Server,
    name: &str,
    group: (&str, &str),
    acked: u64,
) -> Value {
    eventually(&format!("{name} acked {acked} and lag 0"), CATCH_UP, || {
        let view = handler(http, server, name);
        let done = view["counters"]["acked"] == acked
            && view["counters"]["inflight"] == 0
            && lag(http, server, group.0, group.1)["lag"] == 0;
        done.then_some(view)
    })
}

/// The `u64` at `view.versions[version][counter]` (0 when absent).
fn by_version(view: &Value, version: u64, counter: &str) -> u64 {
    view["versions"][version.to_string()][counter]
        .as_u64()
        .unwrap_or(0)
}

/// Batch `n` of the load test: events `e{250n}` to `e{250n+249}`.
fn load_batch(http: &Agent, server: &Server, n: usize) {
    append_batch(http, server, "x", "e", n * 250..(n + 1) * 250);
}

/// Swaps `worker`'s module while this thread appends `batches`: the swap
/// compiles on the server while events arrive and are consumed.
fn swap_while_appending(
    http: &Agent,
    server: &Server,
    module: &[u8],
    batches: std::ops::Range<usize>,
) -> support::Answer {
    std::thread::scope(|scope| {
        let swapping = scope.spawn(|| swap_module(http, server, "worker", module));
        for n in batches {
            load_batch(http, server, n);
        }
        swapping.join().expect("the swap thread")
    })
}

#[test]
fn handler_routes_refuse_unknown_names_bad_manifests_and_broken_modules() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &ServerOptions::default());
    let http = agent();
    stream(&http, &server, "in", 1);
    let echo = guest("echo");
    let manifest = json!({"stream": "in", "group": "g"});

    let (status, list) = get(&http, &server, "/v1/handlers");
    assert_eq!((status, list), (200, json!({"handlers": []})));

    // Unknown handler: 404 handler_not_found on every route.
    assert_error(
        &get(&http, &server, "/v1/handlers/ghost"),
        404,
        "handler_not_found",
    );
    assert_error(
        &swap_module(&http, &server, "ghost", &echo),
        404,
        "handler_not_found",
    );
    for action in ["rollback", "pause", "resume"] {
        let a = post_empty(&http, &server, &format!("/v1/handlers/ghost/{action}"));
        assert_error(&a, 404, "handler_not_found");
    }
    assert_error(
        &delete(&http, &server, "/v1/handlers/ghost"),
        404,
        "handler_not_found",
    );

    // Refused deploys leave nothing behind.
    assert_error(
        &deploy(&http, &server, "h", &manifest, GARBAGE),
        400,
        "invalid_module",
    );
    assert_error(
        &deploy(&http, &server, "h", &manifest, b""),
        400,
        "invalid_module",
    );
    let unknown_stream = json!({"stream": "nope", "group": "g"});
    assert_error(
        &deploy(&http, &server, "h", &unknown_stream, &echo),
        404,
        "stream_not_found",
    );
    let zero = json!({"stream": "in", "group": "g", "concurrency": 0});
    assert_error(
        &deploy(&http, &server, "h", &zero, &echo),
        400,
        "invalid_manifest",
    );
    let other_name = json!({"name": "other", "stream": "in", "group": "g"});
    assert_error(
        &deploy(&http, &server, "h", &other_name, &echo),
        400,
        "invalid_manifest",
    );
    let typo = json!({"stream": "in", "group": "g", "concurency": 2});
    assert_error(&deploy(&http, &server, "h", &typo, &echo), 400, "invalid");
    let (content_type, only_manifest) = multipart(&[(
        "manifest",
        "application/json",
        br#"{"stream":"in","group":"g"}"#,
    )]);
    let missing_module = answer(
        http.put(server.url("/v1/handlers/h"))
            .header("Content-Type", &content_type)
            .send(&only_manifest[..]),
    );
    assert_error(&missing_module, 400, "invalid");
    let not_multipart = answer(
        http.put(server.url("/v1/handlers/h"))
            .header("Content-Type", "application/json")
            .send(&b"{}"[..]),
    );
    assert!(
        (400..500).contains(&not_multipart.0) && !support::code(&not_multipart.1).is_empty(),
        "a deploy that is not multipart is a JSON client error: {not_multipart:?}"
    );
    assert_error(
        &get(&http, &server, "/v1/handlers/bad%20name"),
        400,
        "invalid",
    );
    let (_, list) = get(&http, &server, "/v1/handlers");
    assert_eq!(list, json!({"handlers": []}), "nothing was deployed");

    // A good deploy: 201 with version 1, no previous version.
    let (status, v1) = deploy(&http, &server, "h", &manifest, &echo);
    assert_eq!(status, 201, "{v1}");
    assert_eq!(
        (
            v1["name"].clone(),
            v1["stream"].clone(),
            v1["group"].clone()
        ),
        (json!("h"), json!("in"), json!("g"))
    );
    assert_eq!(
        (v1["version"].clone(), v1["previous_version"].clone()),
        (json!(1), Value::Null)
    );
    assert_eq!(v1["status"], "running");
    let digest = v1["digest"].as_str().unwrap_or_default();
    assert!(
        digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
        "{digest}"
    );
    assert_eq!(v1["counters"]["processed"], 0);

    // No previous version to roll back to: 409.
    assert_error(
        &post_empty(&http, &server, "/v1/handlers/h/rollback"),
        409,
        "no_previous_version",
    );

    // A swap is application/wasm or application/octet-stream (what
    // generated clients send, docs/http.md); a broken module is refused
    // and the running version stays.
    let as_json = answer(
        http.put(server.url("/v1/handlers/h/module"))
            .header("Content-Type", "application/json")
            .send(&echo[..]),
    );
    assert_error(&as_json, 415, "unsupported_media_type");
    assert_error(
        &swap_module(&http, &server, "h", GARBAGE),
        400,
        "invalid_module",
    );
    let as_octets = answer(
        http.put(server.url("/v1/handlers/h/module"))
            .header("Content-Type", "application/octet-stream")
            .send(GARBAGE),
    );
    assert_error(&as_octets, 400, "invalid_module");
    let view = handler(&http, &server, "h");
    assert_eq!(
        (view["version"].clone(), view["digest"].clone()),
        (json!(1), v1["digest"].clone())
    );
    assert!(
        view["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("invalid module")),
        "{view}"
    );

    // A redeploy over multipart replaces it: 200 and version 2. A TOML
    // manifest works too.
    let (status, v2) = deploy(&http, &server, "h", &manifest, &guest("poison"));
    assert_eq!(status, 200, "{v2}");
    assert_eq!(
        (v2["version"].clone(), v2["previous_version"].clone()),
        (json!(2), json!(1))
    );
    assert_ne!(v2["digest"], v1["digest"]);
    let (content_type, body) = multipart(&[
        (
            "manifest",
            "application/toml",
            b"stream = \"in\"\ngroup = \"t\"\n[config]\nk = \"v\"\n",
        ),
        ("module", "application/wasm", &echo),
    ]);
    let toml = answer(
        http.put(server.url("/v1/handlers/t"))
            .header("Content-Type", &content_type)
            .send(&body[..]),
    );
    assert_eq!(toml.0, 201, "{}", toml.1);
    assert_eq!(toml.1["config"], json!({"k": "v"}));
    let (_, list) = get(&http, &server, "/v1/handlers");
    assert_eq!(strings(&list, "handlers", "name"), ["h", "t"]);
    let (status, removed) = delete(&http, &server, "/v1/handlers/t");
    assert_eq!((status, removed["name"].clone()), (200, json!("t")));
}

#[test]
fn hot_swaps_under_load_lose_nothing_and_pause_resume_rollback_delete_work() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &ServerOptions::default());
    let http = agent();
    stream(&http, &server, "x", 2);
    let manifest = json!({
        "stream": "x", "group": "workers", "concurrency": 4, "max_demand": 100,
        // Only the flaky guest reads it: succeed on the first attempt.
        "config": {"succeed_on_attempt": "1"},
    });
    let (status, v1) = deploy(&http, &server, "worker", &manifest, &guest("echo"));
    assert_eq!(status, 201, "{v1}");
    assert_eq!(v1["version"], 1);
    let batch = |n: usize| load_batch(&http, &server, n);

    let flaky = guest("flaky");
    let poison = guest("poison");

    for n in 0..4 {
        batch(n);
    }
    eventually("version 1 acks", CATCH_UP, || {
        (by_version(&handler(&http, &server, "worker"), 1, "acked") > 0).then_some(())
    });

    // Version 2: the flaky guest, succeeding on attempt 1.
    let (status, v2) = swap_while_appending(&http, &server, &flaky, 4..8);
    assert_eq!(status, 200, "{v2}");
    assert_eq!(
        (v2["version"].clone(), v2["previous_version"].clone()),
        (json!(2), json!(1))
    );
    batch(8);
    eventually("version 2 acks", CATCH_UP, || {
        (by_version(&handler(&http, &server, "worker"), 2, "acked") > 0).then_some(())
    });

    // Garbage: refused, version 2 keeps running and says why.
    let refused = swap_while_appending(&http, &server, GARBAGE, 9..12);
    assert_error(&refused, 400, "invalid_module");
    let view = handler(&http, &server, "worker");
    assert_eq!(
        (view["version"].clone(), view["digest"].clone()),
        (json!(2), v2["digest"].clone())
    );
    assert_eq!(view["status"], "running");
    assert!(
        view["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("invalid module")),
        "{view}"
    );
    batch(12);

    // Version 3: the poison guest (acks events that are not poison).
    let (status, v3) = swap_while_appending(&http, &server, &poison, 13..17);
    assert_eq!(status, 200, "{v3}");
    assert_eq!(
        (v3["version"].clone(), v3["previous_version"].clone()),
        (json!(3), json!(2))
    );
    assert_eq!(
        v3["last_error"],
        Value::Null,
        "a good swap clears the error"
    );
    batch(17);
    eventually("version 3 acks", CATCH_UP, || {
        (by_version(&handler(&http, &server, "worker"), 3, "acked") > 0).then_some(())
    });
    batch(18);
    batch(19);

    // 20 batches of 250: everything acked once, nothing retried or trapped.
    let view = wait_caught_up(&http, &server, "worker", ("x", "workers"), 5000);
    let c = &view["counters"];
    for (counter, expected) in [
        ("processed", 5000),
        ("acked", 5000),
        ("retried", 0),
        ("rejected", 0),
        ("trapped", 0),
        ("timed_out", 0),
        ("lost", 0),
        ("settle_errors", 0),
    ] {
        assert_eq!(c[counter], expected, "{counter}: {view}");
    }
    let per_version: u64 = (1..=3).map(|v| by_version(&view, v, "acked")).sum();
    assert_eq!(per_version, 5000, "{view}");
    let processed: u64 = (1..=3).map(|v| by_version(&view, v, "processed")).sum();
    assert_eq!(processed, 5000, "{view}");
    for v in 1..=3 {
        assert!(
            by_version(&view, v, "acked") > 0,
            "version {v} worked: {view}"
        );
    }
    let (_, info) = get(&http, &server, "/v1/streams/x/groups/workers");
    assert_eq!(
        (info["dead_letters"].clone(), info["inflight"].clone()),
        (json!(0), json!(0)),
        "{info}"
    );

    // Rollback: version 2 again (same digest); version 3 becomes the previous.
    let (status, rolled) = post_empty(&http, &server, "/v1/handlers/worker/rollback");
    assert_eq!(status, 200, "{rolled}");
    assert_eq!(
        (
            rolled["version"].clone(),
            rolled["previous_version"].clone()
        ),
        (json!(2), json!(3))
    );
    assert_eq!(rolled["digest"], v2["digest"]);

    // Pause: appended events stay pending.
    let (status, paused) = post_empty(&http, &server, "/v1/handlers/worker/pause");
    assert_eq!((status, paused["status"].clone()), (200, json!("paused")));
    append_batch(&http, &server, "x", "p", 0..20);
    // Observe for a while (a negative: nothing may happen).
    for _ in 0..15 {
        std::thread::sleep(Duration::from_millis(20));
        let lag = lag(&http, &server, "x", "workers");
        assert_eq!(
            (lag["lag"].clone(), lag["pending"].clone()),
            (json!(20), json!(20)),
            "paused: {lag}"
        );
    }
    assert_eq!(
        handler(&http, &server, "worker")["counters"]["processed"],
        5000
    );

    // Resume: the rolled-back version 2 consumes them.
    let v2_before = by_version(&handler(&http, &server, "worker"), 2, "acked");
    let (status, resumed) = post_empty(&http, &server, "/v1/handlers/worker/resume");
    assert_eq!((status, resumed["status"].clone()), (200, json!("running")));
    let view = wait_caught_up(&http, &server, "worker", ("x", "workers"), 5020);
    assert_eq!(by_version(&view, 2, "acked"), v2_before + 20, "{view}");

    // Delete: drains (no lease left behind), answers 200, then it is gone.
    append_batch(&http, &server, "x", "d", 0..500);
    let (status, removed) = delete(&http, &server, "/v1/handlers/worker");
    assert_eq!((status, removed["name"].clone()), (200, json!("worker")));
    let lag_after = lag(&http, &server, "x", "workers");
    assert_eq!(lag_after["inflight"], 0, "drained: {lag_after}");
    assert_error(
        &get(&http, &server, "/v1/handlers/worker"),
        404,
        "handler_not_found",
    );
    let (_, list) = get(&http, &server, "/v1/handlers");
    assert_eq!(list, json!({"handlers": []}));
    assert!(!dir.path().join("handlers").join("worker.toml").exists());
    // Nobody consumes any more: what was left stays pending.
    append_batch(&http, &server, "x", "z", 0..1);
    let lag_now = lag(&http, &server, "x", "workers");
    assert_eq!(lag_now["lag"], lag_after["lag"].as_u64().unwrap() + 1);
}

#[test]
fn a_restart_keeps_streams_groups_dead_letters_and_handlers() {
    let dir = tempfile::tempdir().unwrap();
    let http = agent();
    let mut first = Server::start(dir.path(), &ServerOptions::default());
    stream(&http, &first, "orders", 2);
    stream(&http, &first, "audit", 1);
    for (name, options) in [
        (
            "billing",
            json!({"max_attempts": 3, "retry_backoff_ms": [10]}),
        ),
        ("ops", json!({})),
    ] {
        let mut body = options;
        body["name"] = json!(name);
        assert_eq!(
            post(&http, &first, "/v1/streams/orders/groups", &body).0,
            201
        );
    }
    append_batch(&http, &first, "orders", "o", 0..10);

    // One dead letter: fetch, reject.
    let (_, fetched) = post(
        &http,
        &first,
        "/v1/streams/orders/groups/billing/fetch",
        &json!({"limit": 1}),
    );
    let lease = &fetched["leases"][0];
    let reject = lease_ref(lease, &json!({"reason": "bad order"}));
    assert_eq!(
        post(
            &http,
            &first,
            "/v1/streams/orders/groups/billing/reject",
            &reject
        )
        .0,
        200
    );

    // A handler at version 2 (previous 1) that has caught up.
    let manifest = json!({"stream": "orders", "group": "shipping", "config": {"region": "eu"}});
    assert_eq!(
        deploy(&http, &first, "shipper", &manifest, &guest("echo")).0,
        201
    );
    let (status, v2) = swap_module(&http, &first, "shipper", &guest("poison"));
    assert_eq!((status, v2["version"].clone()), (200, json!(2)));
    wait_caught_up(&http, &first, "shipper", ("orders", "shipping"), 10);

    let snapshot = |server: &Server| {
        let paths = [
            "/v1/streams",
            "/v1/streams/orders/groups",
            "/v1/streams/orders/groups/billing",
            "/v1/streams/orders/groups/billing/dead-letters",
            "/v1/streams/orders/groups/shipping/lag",
            "/v1/streams/orders/query",
        ];
        paths
            .iter()
            .map(|path| {
                let (status, body) = if path.ends_with("/query") {
                    post(&http, server, path, &json!({}))
                } else {
                    get(&http, server, path)
                };
                assert_eq!(status, 200, "{path}: {body}");
                body
            })
            .collect::<Vec<Value>>()
    };
    let before = snapshot(&first);
    assert_eq!(strings(&before[3], "dead_letters", "event_id").len(), 1);
    assert_eq!(before[3]["dead_letters"][0]["reason"], "bad order");
    let handler_before = handler(&http, &first, "shipper");
    assert_eq!(
        (
            handler_before["version"].clone(),
            handler_before["previous_version"].clone()
        ),
        (json!(2), json!(1)),
        "{handler_before}"
    );

    let status = first.terminate();
    assert!(
        status.success(),
        "exit status {status:?}\n{}",
        first.log_text()
    );

    // The same folder again: everything is there.
    let again = Server::start(dir.path(), &ServerOptions::default());
    let after = snapshot(&again);
    assert_eq!(strings(&after[0], "streams", "name"), ["audit", "orders"]);
    assert_eq!(
        strings(&after[1], "groups", "name"),
        ["billing", "ops", "shipping"]
    );
    // Lag timestamps age with the real clock; compare the rest exactly.
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        let (mut b, mut a) = (b.clone(), a.clone());
        for v in [&mut b, &mut a] {
            if let Some(lag) = v.get_mut("lag").and_then(Value::as_object_mut) {
                lag.remove("oldest_unacked_age_ms");
            }
            if let Some(obj) = v.as_object_mut() {
                obj.remove("oldest_unacked_age_ms");
            }
        }
        assert_eq!(b, a, "snapshot {i} changed across the restart");
    }
    let view = handler(&http, &again, "shipper");
    for field in [
        "version",
        "digest",
        "previous_version",
        "stream",
        "group",
        "config",
        "status",
    ] {
        assert_eq!(view[field], handler_before[field], "{field}: {view}");
    }
    assert_eq!(
        (view["version"].clone(), view["previous_version"].clone()),
        (json!(2), json!(1))
    );

    // It still consumes, with version 2 (the poison guest rejects poison).
    let (status, _) = post(
        &http,
        &again,
        "/v1/streams/orders/events/batch",
        &json!({"events": [
            {"id": "n-1"}, {"id": "n-2", "payload": {"poison": true, "reason": "recalled"}}, {"id": "n-3"},
        ]}),
    );
    assert_eq!(status, 201);
    let view = eventually("the restarted handler consumes", CATCH_UP, || {
        let view = handler(&http, &again, "shipper");
        let lag = lag(&http, &again, "orders", "shipping");
        (view["counters"]["processed"] == 3 && lag["lag"] == 0).then_some(view)
    });
    assert_eq!(
        (
            view["counters"]["acked"].clone(),
            view["counters"]["rejected"].clone()
        ),
        (json!(2), json!(1))
    );
    assert_eq!(by_version(&view, 2, "processed"), 3, "{view}");
    let (_, dead) = get(
        &http,
        &again,
        "/v1/streams/orders/groups/shipping/dead-letters",
    );
    assert_eq!(strings(&dead, "dead_letters", "event_id"), ["n-2"]);
    assert_eq!(dead["dead_letters"][0]["reason"], "recalled");
    // The rollback target survived too.
    let (status, rolled) = post_empty(&http, &again, "/v1/handlers/shipper/rollback");
    assert_eq!((status, rolled["version"].clone()), (200, json!(1)));
}

/// `POST /v1/handlers/{name}/try` with these multipart parts.
fn try_module(
    http: &Agent,
    server: &Server,
    name: &str,
    parts: &[(&str, &str, &[u8])],
) -> support::Answer {
    let (content_type, body) = multipart(parts);
    answer(
        http.post(server.url(&format!("/v1/handlers/{name}/try")))
            .header("Content-Type", &content_type)
            .send(&body[..]),
    )
}

/// What a dry run must leave alone, read over HTTP: the stream's
/// watermarks, and each group's info (lag, cursors, in flight, dead-letter
/// count; not the age of its oldest unacked event, which grows by itself)
/// and dead letters (attempts, reasons).
fn untouched(http: &Agent, server: &Server, groups: &[&str]) -> Vec<Value> {
    let mut state = vec![get(http, server, "/v1/streams/in").1];
    for group in groups {
        let mut info = get(http, server, &format!("/v1/streams/in/groups/{group}")).1;
        // A reading of the clock, not of the group.
        info["lag"]["oldest_unacked_age_ms"] = Value::Null;
        state.push(info);
        state.push(
            get(
                http,
                server,
                &format!("/v1/streams/in/groups/{group}/dead-letters"),
            )
            .1,
        );
    }
    state
}

#[test]
fn a_dry_run_of_poison_where_echo_is_live_lists_its_rejects_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &ServerOptions::default());
    let http = agent();
    stream(&http, &server, "in", 2);
    let poisoned = ["e4", "e9", "e17"];
    let events: Vec<Value> = (0..24)
        .map(|i| {
            let id = format!("e{i}");
            let payload = if poisoned.contains(&id.as_str()) {
                json!({"n": i, "poison": true, "reason": format!("bad {id}")})
            } else {
                json!({"n": i})
            };
            json!({"id": id, "key": format!("k{}", i % 5), "payload": payload})
        })
        .collect();
    let (status, body) = post(
        &http,
        &server,
        "/v1/streams/in/events/batch",
        &json!({"events": events}),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = deploy(
        &http,
        &server,
        "worker",
        &json!({"stream": "in", "group": "g"}),
        &guest("echo"),
    );
    assert_eq!(status, 201, "{body}");
    wait_caught_up(&http, &server, "worker", ("in", "g"), 24);
    // A group mid-flight: three deliveries leased, one of them rejected.
    let (status, body) = post(
        &http,
        &server,
        "/v1/streams/in/groups",
        &json!({"name": "m", "max_attempts": 2}),
    );
    assert_eq!(status, 201, "{body}");
    let (status, leases) = post(
        &http,
        &server,
        "/v1/streams/in/groups/m/fetch",
        &json!({"limit": 3}),
    );
    assert_eq!(status, 200, "{leases}");
    let first = &leases["leases"][0];
    let (status, body) = post(
        &http,
        &server,
        "/v1/streams/in/groups/m/reject",
        &lease_ref(first, &json!({"reason": "by hand"})),
    );
    assert!(status == 200 || status == 204, "{status} {body}");
    let before = untouched(&http, &server, &["g", "m"]);
    let acked = handler(&http, &server, "worker")["counters"]["acked"].clone();

    // The CLI, as a script reads it.
    let poison = dir.path().join("poison.wasm");
    std::fs::write(&poison, guest("poison")).unwrap();
    let module = poison.to_str().unwrap();
    let try_poison = |extra: &[&str]| {
        let mut args = vec!["handler", "try", "worker", "--module", module];
        args.extend_from_slice(&["--server", server.base()]);
        args.extend_from_slice(extra);
        rheo_e2e::run_rheo_with(&args, &[], None)
    };
    let run = try_poison(&["--json"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).expect("--json prints JSON");
    assert_eq!(report["differing"], 3, "{report:#}");
    assert_eq!(report["current"]["version"], 1);
    let listed = report["events"].as_array().unwrap();
    assert_eq!(listed.len(), 24);
    let differing: Vec<&str> = listed
        .iter()
        .filter(|e| e["differs"] == true)
        .map(|e| e["event_id"].as_str().unwrap())
        .collect();
    let mut sorted = differing.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ["e17", "e4", "e9"], "{report:#}");
    // Differences first.
    assert!(listed[..3].iter().all(|e| e["differs"] == true));
    for e in &listed[..3] {
        let id = e["event_id"].as_str().unwrap();
        assert_eq!(e["candidate"]["outcome"], "reject");
        assert_eq!(e["candidate"]["reason"], format!("bad {id}"));
        assert_eq!(e["current"]["outcome"], "ack");
    }
    assert_eq!(report["candidate"]["totals"]["rejected"], 3);
    assert_eq!(report["current"]["totals"]["acked"], 24);

    // The table marks the differences.
    let run = try_poison(&[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stdout
            .contains("24 events, 3 where the candidate differs"),
        "{}",
        run.stdout
    );
    let marked: Vec<&str> = run.stdout.lines().filter(|l| l.starts_with('*')).collect();
    assert_eq!(marked.len(), 3, "{}", run.stdout);
    assert!(
        marked.iter().all(|l| l.contains("reject: bad e")),
        "{}",
        run.stdout
    );

    // The query part chooses the events: over HTTP, only the poisoned ones.
    let query = serde_json::to_vec(&json!({"where": {"payload.poison": true}})).unwrap();
    let poison_bytes = guest("poison");
    let (status, report) = try_module(
        &http,
        &server,
        "worker",
        &[
            ("module", "application/wasm", &poison_bytes),
            ("query", "application/json", &query),
        ],
    );
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["events"].as_array().unwrap().len(), 3);
    assert_eq!(report["differing"], 3);

    // Nothing changed: no group, no stream, no handler counter.
    assert_eq!(untouched(&http, &server, &["g", "m"]), before);
    let view = handler(&http, &server, "worker");
    assert_eq!(
        (&view["counters"]["acked"], &view["version"]),
        (&acked, &json!(1))
    );

    // Bad input is refused with nothing changed.
    let refused = try_module(
        &http,
        &server,
        "worker",
        &[("module", "application/wasm", GARBAGE)],
    );
    assert_error(&refused, 400, "invalid_module");
    let extra = try_module(
        &http,
        &server,
        "worker",
        &[
            ("module", "application/wasm", &poison_bytes),
            ("manifest", "application/json", b"{}"),
        ],
    );
    assert_error(&extra, 400, "invalid");
    let missing = try_module(
        &http,
        &server,
        "nobody",
        &[("module", "application/wasm", &poison_bytes)],
    );
    assert_error(&missing, 404, "handler_not_found");
    assert_eq!(handler(&http, &server, "worker")["last_error"], Value::Null);
}

/// `GET path` with `Authorization: Bearer token`.
fn get_as(http: &Agent, server: &Server, token: &str, path: &str) -> support::Answer {
    answer(
        http.get(server.url(path))
            .header("Authorization", &format!("Bearer {token}"))
            .call(),
    )
}

/// `POST path` with a JSON body and `Authorization: Bearer token`.
fn post_as(
    http: &Agent,
    server: &Server,
    token: &str,
    path: &str,
    body: &Value,
) -> support::Answer {
    answer(
        http.post(server.url(path))
            .header("Authorization", &format!("Bearer {token}"))
            .send_json(body),
    )
}

#[test]
fn a_trapping_canary_is_rolled_back_a_healthy_one_promoted_and_the_history_names_each_step() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = [
        "--token",
        "alice=alice-secret",
        "--token",
        "dash:read=dash-secret",
    ];
    let options = ServerOptions {
        test_clock: true,
        args: tokens.iter().map(|t| (*t).to_owned()).collect(),
        ..ServerOptions::default()
    };
    let server = Server::start(dir.path(), &options);
    let http = agent();
    let alice = "alice-secret";
    let (status, body) = post_as(
        &http,
        &server,
        alice,
        "/v1/streams",
        &json!({"name": "in", "partition_count": 2}),
    );
    assert_eq!(status, 201, "{body}");
    let file = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let manifest = file(
        "worker.toml",
        b"stream = \"in\"\ngroup = \"g\"\nconcurrency = 4\n",
    );
    let (echo, crash) = (
        file("echo.wasm", &guest("echo")),
        file("crash.wasm", &guest("crash")),
    );
    let rheo = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--server", server.base(), "--token", alice]);
        let run = rheo_e2e::run_rheo_with(&all, &[], None);
        assert_eq!(run.code, Some(0), "rheo {args:?}: {}", run.stderr);
        run.stdout
    };
    let append = |from: usize, to: usize, trap_every: Option<usize>| {
        let events: Vec<Value> = (from..to)
            .map(|i| {
                let panic = trap_every.is_some_and(|n| i % n == 0);
                json!({"id": format!("e{i}"), "payload": {"n": i, "panic": panic}})
            })
            .collect();
        let (status, body) = post_as(
            &http,
            &server,
            alice,
            "/v1/streams/in/events/batch",
            &json!({ "events": events }),
        );
        assert_eq!(status, 201, "{body}");
    };
    let view = || get_as(&http, &server, alice, "/v1/handlers/worker").1;
    let caught_up = |acked: u64| {
        eventually(&format!("{acked} acked, lag 0"), CATCH_UP, || {
            let lag = get_as(&http, &server, alice, "/v1/streams/in/groups/g/lag").1;
            let v = view();
            (v["counters"]["acked"] == acked && v["counters"]["inflight"] == 0 && lag["lag"] == 0)
                .then_some(v)
        })
    };
    let judged = |what: &str| {
        eventually(what, CATCH_UP, || {
            let v = view();
            v["canary"].is_null().then_some(v)
        })
    };
    rheo(&[
        "handler",
        "deploy",
        "worker",
        "--manifest",
        &manifest,
        "--module",
        &echo,
    ]);

    // A canary that traps on one event in five, on half the first attempts.
    let canary = [
        "handler",
        "swap",
        "worker",
        &crash,
        "--canary",
        "50%",
        "--window",
        "1m",
        "--min-deliveries",
        "20",
    ];
    let said = rheo(&canary);
    assert!(said.contains("canary version 2"), "{said}");
    assert!(said.contains("version 1 stays current"), "{said}");
    append(0, 400, Some(5));
    let v = judged("the trapping canary rolled back");
    assert_eq!(v["version"], 1, "{v:#}");
    let v = caught_up(400);
    assert!(by_version(&v, 2, "trapped") > 0, "{v:#}");
    let (_, dead) = get_as(
        &http,
        &server,
        alice,
        "/v1/streams/in/groups/g/dead-letters",
    );
    assert_eq!(
        dead["dead_letters"],
        json!([]),
        "nothing lost to the canary"
    );

    // A healthy canary is promoted when its window ends, not before.
    rheo(&canary);
    append(400, 600, None);
    let v = eventually("the canary's evidence", CATCH_UP, || {
        let v = caught_up(600);
        (v["canary"]["counts"]["canary_handled"].as_u64() >= Some(20)).then_some(v)
    });
    assert_eq!(v["canary"]["version"], 3, "{v:#}");
    let (status, body) = post_as(
        &http,
        &server,
        alice,
        "/v1/test/clock",
        &json!({"advance_ms": 60_000}),
    );
    assert_eq!(status, 200, "{body}");
    let v = judged("the healthy canary promoted");
    assert_eq!(
        (&v["version"], &v["previous_version"]),
        (&json!(3), &json!(1))
    );

    // The history: each step with its digest, who and why.
    let history: Value = serde_json::from_str(&rheo(&["handler", "history", "worker", "--json"]))
        .expect("--json prints JSON");
    let digest = |name: &str| rheo::wasm::Digest::of(&guest(name)).to_hex();
    let steps: Vec<(String, u64, String, String)> = history["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["action"].as_str().unwrap().to_owned(),
                s["version"].as_u64().unwrap(),
                s["digest"].as_str().unwrap().to_owned(),
                s["by"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    let step = |a: &str, v: u64, g: &str, by: &str| (a.to_owned(), v, digest(g), by.to_owned());
    assert_eq!(
        steps,
        [
            step("deploy", 1, "echo", "alice"),
            step("canary", 2, "crash", "alice"),
            step("rollback", 2, "crash", "rheo"),
            step("canary", 3, "crash", "alice"),
            step("promote", 3, "crash", "rheo"),
        ]
    );
    let rollback = history["steps"][2]["reason"].as_str().unwrap();
    assert!(rollback.ends_with("more than 5 points worse"), "{rollback}");
    let table = rheo(&["handler", "history", "worker"]);
    assert!(
        table.contains(&digest("crash")[..12]) && table.contains("promote"),
        "{table}"
    );

    // The read token reads the history and may not promote.
    let (status, _) = get_as(&http, &server, "dash-secret", "/v1/handlers/worker/history");
    assert_eq!(status, 200);
    let refused = post_as(
        &http,
        &server,
        "dash-secret",
        "/v1/handlers/worker/promote",
        &json!({}),
    );
    assert_error(&refused, 403, "forbidden");
    let refused = post_as(
        &http,
        &server,
        alice,
        "/v1/handlers/worker/promote",
        &json!({}),
    );
    assert_error(&refused, 409, "no_canary");
}
