//! The handler routes (`docs/handlers.md`) against the real `rheo serve`:
//! deploys over multipart and what they refuse; hot swaps under load (a
//! refused module leaves the old version running), rollback, pause, resume
//! and delete; a restart on the same SQLite file and handlers directory
//! that keeps streams, groups, dead letters and handlers; dry runs
//! (`try`) that change nothing; canaries rolled back and promoted, and the
//! deploy history. Each test starts a server of its own. Handler progress
//! is asynchronous, so it is polled with a deadline.

use crate::support;

use std::path::Path;
use std::time::Duration;

use rheo_e2e::{Server, ServerOptions, agent, answer};
use serde_json::{Value, json};
use support::{
    append_batch, assert_error, delete, deploy, eventually, get, guest, handler, lag, lease_ref,
    multipart, post, post_empty, stream, strings, swap_module,
};
use tempfile::TempDir;
use ureq::Agent;

/// How long a handler may take to catch up.
const CATCH_UP: Duration = Duration::from_secs(120);

/// Not a component: the magic number, then garbage.
const GARBAGE: &[u8] = b"\0asm\x0d\0\x01\0 this is not a component";

/// A `rheo serve` with default options in a temp dir of its own, and an
/// agent. Bind as `(_dir, server, http)`: the server is dropped first.
fn start() -> (TempDir, Server, Agent) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &ServerOptions::default());
    (dir, server, agent())
}

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

// Deploys and what the routes refuse.

/// The manifest of handler `h`: stream `in`, group `g`.
fn h_manifest() -> Value {
    json!({"stream": "in", "group": "g"})
}

/// Stream `in` and handler `h` (echo) at version 1; returns the deploy answer.
fn in_with_h_deployed(http: &Agent, server: &Server) -> Value {
    stream(http, server, "in", 1);
    let (status, v1) = deploy(http, server, "h", &h_manifest(), &guest("echo"));
    assert_eq!(status, 201, "{v1}");
    v1
}

#[test]
fn a_fresh_server_lists_no_handlers_and_refuses_unknown_or_invalid_names() {
    let (_dir, server, http) = start();
    let (status, list) = get(&http, &server, "/v1/handlers");
    assert_eq!((status, list), (200, json!({"handlers": []})));

    // Unknown handler: 404 handler_not_found on every route.
    assert_error(
        &get(&http, &server, "/v1/handlers/ghost"),
        404,
        "handler_not_found",
    );
    assert_error(
        &swap_module(&http, &server, "ghost", &guest("echo")),
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
    // Not a handler name at all: 400.
    assert_error(
        &get(&http, &server, "/v1/handlers/bad%20name"),
        400,
        "invalid",
    );
}

#[test]
fn refused_deploys_name_the_problem_and_leave_nothing_behind() {
    let (_dir, server, http) = start();
    stream(&http, &server, "in", 1);
    let echo = guest("echo");
    let manifest = h_manifest();

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
    let (_, list) = get(&http, &server, "/v1/handlers");
    assert_eq!(list, json!({"handlers": []}), "nothing was deployed");
}

#[test]
fn a_first_deploy_answers_201_at_version_1_with_nothing_to_roll_back() {
    let (_dir, server, http) = start();
    stream(&http, &server, "in", 1);
    let (status, v1) = deploy(&http, &server, "h", &h_manifest(), &guest("echo"));
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
}

/// A swap is application/wasm or application/octet-stream (what generated
/// clients send, docs/http.md).
#[test]
fn a_swap_must_be_wasm_or_octets_and_a_broken_module_leaves_the_running_version() {
    let (_dir, server, http) = start();
    let v1 = in_with_h_deployed(&http, &server);
    let as_json = answer(
        http.put(server.url("/v1/handlers/h/module"))
            .header("Content-Type", "application/json")
            .send(&guest("echo")[..]),
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
}

#[test]
fn a_redeploy_over_multipart_answers_200_with_the_next_version_and_digest() {
    let (_dir, server, http) = start();
    let v1 = in_with_h_deployed(&http, &server);
    let (status, v2) = deploy(&http, &server, "h", &h_manifest(), &guest("poison"));
    assert_eq!(status, 200, "{v2}");
    assert_eq!(
        (v2["version"].clone(), v2["previous_version"].clone()),
        (json!(2), json!(1))
    );
    assert_ne!(v2["digest"], v1["digest"]);
}

#[test]
fn a_toml_manifest_deploys_with_its_config_and_delete_removes_that_handler() {
    let (_dir, server, http) = start();
    in_with_h_deployed(&http, &server);
    let (content_type, body) = multipart(&[
        (
            "manifest",
            "application/toml",
            b"stream = \"in\"\ngroup = \"t\"\n[config]\nk = \"v\"\n",
        ),
        ("module", "application/wasm", &guest("echo")),
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

// Hot swaps under load, rollback, pause, resume and delete.

/// Handler `worker` with `module` at version 1, on a new stream `x` (2
/// partitions), group `workers`; returns the deploy answer.
fn worker_on_x(http: &Agent, server: &Server, module: &[u8]) -> Value {
    stream(http, server, "x", 2);
    let manifest = json!({
        "stream": "x", "group": "workers", "concurrency": 4, "max_demand": 100,
        // Only the flaky guest reads it: succeed on the first attempt.
        "config": {"succeed_on_attempt": "1"},
    });
    let (status, v1) = deploy(http, server, "worker", &manifest, module);
    assert_eq!(status, 201, "{v1}");
    v1
}

/// Swaps `worker`'s module (`PUT …/module`); asserts 200 and returns the answer.
fn swapped(http: &Agent, server: &Server, module: &[u8]) -> Value {
    let (status, view) = swap_module(http, server, "worker", module);
    assert_eq!(status, 200, "{view}");
    view
}

/// Batch `n` of the load: events `e{250n}` to `e{250n+249}` on `x`.
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

/// Waits until `version` of `worker` has acked something.
fn wait_version_acks(http: &Agent, server: &Server, version: u64) {
    eventually(&format!("version {version} acks"), CATCH_UP, || {
        (by_version(&handler(http, server, "worker"), version, "acked") > 0).then_some(())
    });
}

/// Echo, then flaky (succeeding on attempt 1), then poison (which acks
/// events that are not poison), each swapped in while events arrive; a
/// refused swap in between (its answer is checked by the next test).
#[test]
fn hot_swaps_under_load_ack_every_event_once_across_three_versions() {
    let (_dir, server, http) = start();
    let v1 = worker_on_x(&http, &server, &guest("echo"));
    assert_eq!(v1["version"], 1);
    let batch = |n: usize| load_batch(&http, &server, n);
    for n in 0..4 {
        batch(n);
    }
    wait_version_acks(&http, &server, 1);

    let (status, v2) = swap_while_appending(&http, &server, &guest("flaky"), 4..8);
    assert_eq!(status, 200, "{v2}");
    assert_eq!(
        (v2["version"].clone(), v2["previous_version"].clone()),
        (json!(2), json!(1))
    );
    batch(8);
    wait_version_acks(&http, &server, 2);
    let (status, _) = swap_while_appending(&http, &server, GARBAGE, 9..12);
    assert_eq!(status, 400, "garbage is refused");
    batch(12);
    let (status, v3) = swap_while_appending(&http, &server, &guest("poison"), 13..17);
    assert_eq!(status, 200, "{v3}");
    assert_eq!(
        (v3["version"].clone(), v3["previous_version"].clone()),
        (json!(3), json!(2))
    );
    batch(17);
    wait_version_acks(&http, &server, 3);
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
}

#[test]
fn a_refused_swap_under_load_keeps_the_running_version_until_a_good_swap_clears_its_error() {
    let (_dir, server, http) = start();
    worker_on_x(&http, &server, &guest("echo"));
    let v2 = swapped(&http, &server, &guest("flaky"));
    load_batch(&http, &server, 0);

    let refused = swap_while_appending(&http, &server, GARBAGE, 1..4);
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

    let (status, v3) = swap_while_appending(&http, &server, &guest("poison"), 4..6);
    assert_eq!(status, 200, "{v3}");
    assert_eq!(
        v3["last_error"],
        Value::Null,
        "a good swap clears the error"
    );
}

#[test]
fn a_rollback_runs_the_previous_module_again_with_the_newer_one_as_previous() {
    let (_dir, server, http) = start();
    worker_on_x(&http, &server, &guest("echo"));
    let v2 = swapped(&http, &server, &guest("flaky"));
    swapped(&http, &server, &guest("poison"));

    // Version 2 again (same digest); version 3 becomes the previous.
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

    // The rolled-back version 2 consumes what arrives next.
    let v2_before = by_version(&handler(&http, &server, "worker"), 2, "acked");
    append_batch(&http, &server, "x", "p", 0..20);
    let view = wait_caught_up(&http, &server, "worker", ("x", "workers"), 20);
    assert_eq!(by_version(&view, 2, "acked"), v2_before + 20, "{view}");
}

#[test]
fn a_paused_handler_leaves_new_events_pending_until_it_is_resumed() {
    let (_dir, server, http) = start();
    worker_on_x(&http, &server, &guest("echo"));
    load_batch(&http, &server, 0);
    wait_caught_up(&http, &server, "worker", ("x", "workers"), 250);

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
        250
    );

    // Resume: the same version consumes them.
    let v1_before = by_version(&handler(&http, &server, "worker"), 1, "acked");
    let (status, resumed) = post_empty(&http, &server, "/v1/handlers/worker/resume");
    assert_eq!((status, resumed["status"].clone()), (200, json!("running")));
    let view = wait_caught_up(&http, &server, "worker", ("x", "workers"), 270);
    assert_eq!(by_version(&view, 1, "acked"), v1_before + 20, "{view}");
}

/// Delete drains (no lease left behind), answers 200, then the handler is
/// gone and nobody consumes its group any more.
#[test]
fn deleting_a_handler_drains_it_and_forgets_it() {
    let (dir, server, http) = start();
    worker_on_x(&http, &server, &guest("echo"));
    load_batch(&http, &server, 0);
    wait_caught_up(&http, &server, "worker", ("x", "workers"), 250);

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
    // What was left stays pending.
    append_batch(&http, &server, "x", "z", 0..1);
    let lag_now = lag(&http, &server, "x", "workers");
    assert_eq!(lag_now["lag"], lag_after["lag"].as_u64().unwrap() + 1);
}

// A restart on the same folder.

/// Handler `shipper` on the existing stream `orders` (group `shipping`,
/// config `region = eu`) at version 2 (poison; version 1 was echo), caught
/// up on the stream's 10 events.
fn shipper_at_version_2(http: &Agent, server: &Server) {
    let manifest = json!({"stream": "orders", "group": "shipping", "config": {"region": "eu"}});
    assert_eq!(
        deploy(http, server, "shipper", &manifest, &guest("echo")).0,
        201
    );
    let (status, v2) = swap_module(http, server, "shipper", &guest("poison"));
    assert_eq!((status, v2["version"].clone()), (200, json!(2)));
    wait_caught_up(http, server, "shipper", ("orders", "shipping"), 10);
}

/// Stream `orders` (2 partitions) with events `o0`–`o9`.
fn orders_with_ten_events(http: &Agent, server: &Server) {
    stream(http, server, "orders", 2);
    append_batch(http, server, "orders", "o", 0..10);
}

/// Streams `orders` and `audit`; on `orders` the groups `billing` (3
/// attempts) and `ops`, 10 events, one dead letter in `billing` ("bad
/// order"), and [`shipper_at_version_2`].
fn orders_groups_a_dead_letter_and_a_handler(http: &Agent, server: &Server) {
    stream(http, server, "orders", 2);
    stream(http, server, "audit", 1);
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
            post(http, server, "/v1/streams/orders/groups", &body).0,
            201
        );
    }
    append_batch(http, server, "orders", "o", 0..10);
    let (_, fetched) = post(
        http,
        server,
        "/v1/streams/orders/groups/billing/fetch",
        &json!({"limit": 1}),
    );
    let reject = lease_ref(&fetched["leases"][0], &json!({"reason": "bad order"}));
    let path = "/v1/streams/orders/groups/billing/reject";
    assert_eq!(post(http, server, path, &reject).0, 200);
    shipper_at_version_2(http, server);
}

/// Stops `server` with SIGTERM, which it must exit cleanly on, and starts
/// another on the same folder (SQLite file and handlers directory).
fn restarted(mut server: Server, dir: &Path) -> Server {
    let status = server.terminate();
    assert!(
        status.success(),
        "exit status {status:?}\n{}",
        server.log_text()
    );
    drop(server);
    Server::start(dir, &ServerOptions::default())
}

/// The streams, `orders`' groups, `billing`'s info and dead letters,
/// `shipping`'s lag and the events of `orders`, as the API reads them, with
/// the age of the oldest unacked event (a reading of the clock) left out.
fn snapshot(http: &Agent, server: &Server) -> Vec<Value> {
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
            let (status, mut body) = if path.ends_with("/query") {
                post(http, server, path, &json!({}))
            } else {
                get(http, server, path)
            };
            assert_eq!(status, 200, "{path}: {body}");
            if let Some(lag) = body.get_mut("lag").and_then(Value::as_object_mut) {
                lag.remove("oldest_unacked_age_ms");
            }
            if let Some(obj) = body.as_object_mut() {
                obj.remove("oldest_unacked_age_ms");
            }
            body
        })
        .collect()
}

#[test]
fn a_restart_keeps_streams_groups_events_cursors_and_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let http = agent();
    let first = Server::start(dir.path(), &ServerOptions::default());
    orders_groups_a_dead_letter_and_a_handler(&http, &first);
    let before = snapshot(&http, &first);
    assert_eq!(strings(&before[3], "dead_letters", "event_id").len(), 1);
    assert_eq!(before[3]["dead_letters"][0]["reason"], "bad order");

    let again = restarted(first, dir.path());
    let after = snapshot(&http, &again);
    assert_eq!(strings(&after[0], "streams", "name"), ["audit", "orders"]);
    assert_eq!(
        strings(&after[1], "groups", "name"),
        ["billing", "ops", "shipping"]
    );
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_eq!(b, a, "snapshot {i} changed across the restart");
    }
}

#[test]
fn a_restart_keeps_each_handler_with_its_version_config_and_rollback_target() {
    let dir = tempfile::tempdir().unwrap();
    let http = agent();
    let first = Server::start(dir.path(), &ServerOptions::default());
    orders_with_ten_events(&http, &first);
    shipper_at_version_2(&http, &first);
    let before = handler(&http, &first, "shipper");
    assert_eq!(
        (
            before["version"].clone(),
            before["previous_version"].clone()
        ),
        (json!(2), json!(1)),
        "{before}"
    );

    let again = restarted(first, dir.path());
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
        assert_eq!(view[field], before[field], "{field}: {view}");
    }
    assert_eq!(
        (view["version"].clone(), view["previous_version"].clone()),
        (json!(2), json!(1))
    );
    let (status, rolled) = post_empty(&http, &again, "/v1/handlers/shipper/rollback");
    assert_eq!((status, rolled["version"].clone()), (200, json!(1)));
}

/// Version 2 is the poison guest: it rejects the poisoned event.
#[test]
fn a_restarted_handler_consumes_with_the_version_it_ran_before() {
    let dir = tempfile::tempdir().unwrap();
    let http = agent();
    let first = Server::start(dir.path(), &ServerOptions::default());
    orders_with_ten_events(&http, &first);
    shipper_at_version_2(&http, &first);

    let again = restarted(first, dir.path());
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
}

// Dry runs (`try`) of the poison guest where echo is live.

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

/// Stream `in` (2 partitions) with events `e0`–`e23`, of which `e4`, `e9`
/// and `e17` are poison (reason `bad {id}`); handler `worker` (echo, group
/// `g`) caught up on them; and group `m` mid-flight: three deliveries
/// leased, one of them rejected.
fn echo_live_over_poisoned_events(http: &Agent, server: &Server) {
    stream(http, server, "in", 2);
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
    let path = "/v1/streams/in/events/batch";
    let (status, body) = post(http, server, path, &json!({"events": events}));
    assert_eq!(status, 201, "{body}");
    let manifest = json!({"stream": "in", "group": "g"});
    let (status, body) = deploy(http, server, "worker", &manifest, &guest("echo"));
    assert_eq!(status, 201, "{body}");
    wait_caught_up(http, server, "worker", ("in", "g"), 24);
    let group = json!({"name": "m", "max_attempts": 2});
    let (status, body) = post(http, server, "/v1/streams/in/groups", &group);
    assert_eq!(status, 201, "{body}");
    let path = "/v1/streams/in/groups/m/fetch";
    let (status, leases) = post(http, server, path, &json!({"limit": 3}));
    assert_eq!(status, 200, "{leases}");
    let first = &leases["leases"][0];
    let (status, body) = post(
        http,
        server,
        "/v1/streams/in/groups/m/reject",
        &lease_ref(first, &json!({"reason": "by hand"})),
    );
    assert!(status == 200 || status == 204, "{status} {body}");
}

/// `rheo handler try worker --module poison.wasm` (written into `dir`),
/// with `extra` arguments; asserts exit code 0 and returns stdout.
fn try_poison_with_cli(dir: &Path, server: &Server, extra: &[&str]) -> String {
    let poison = dir.join("poison.wasm");
    std::fs::write(&poison, guest("poison")).unwrap();
    let module = poison.to_str().unwrap();
    let mut args = vec!["handler", "try", "worker", "--module", module];
    args.extend_from_slice(&["--server", server.base()]);
    args.extend_from_slice(extra);
    let run = rheo_e2e::run_rheo_with(&args, &[], None);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    run.stdout
}

/// `POST /v1/handlers/worker/try` of the poison guest with a query part
/// that chooses the poisoned events.
fn try_poison_on_poisoned_events(http: &Agent, server: &Server) -> support::Answer {
    let query = serde_json::to_vec(&json!({"where": {"payload.poison": true}})).unwrap();
    try_module(
        http,
        server,
        "worker",
        &[
            ("module", "application/wasm", &guest("poison")),
            ("query", "application/json", &query),
        ],
    )
}

#[test]
fn a_dry_run_in_json_lists_every_event_with_the_candidates_rejects_first() {
    let (dir, server, http) = start();
    echo_live_over_poisoned_events(&http, &server);
    let stdout = try_poison_with_cli(dir.path(), &server, &["--json"]);
    let report: Value = serde_json::from_str(&stdout).expect("--json prints JSON");
    assert_eq!(report["differing"], 3, "{report:#}");
    assert_eq!(report["current"]["version"], 1);
    let listed = report["events"].as_array().unwrap();
    assert_eq!(listed.len(), 24);
    let mut differing: Vec<&str> = listed
        .iter()
        .filter(|e| e["differs"] == true)
        .map(|e| e["event_id"].as_str().unwrap())
        .collect();
    differing.sort_unstable();
    assert_eq!(differing, ["e17", "e4", "e9"], "{report:#}");
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
}

#[test]
fn a_dry_run_table_marks_the_events_where_the_candidate_differs() {
    let (dir, server, http) = start();
    echo_live_over_poisoned_events(&http, &server);
    let stdout = try_poison_with_cli(dir.path(), &server, &[]);
    assert!(
        stdout.contains("24 events, 3 where the candidate differs"),
        "{stdout}"
    );
    let marked: Vec<&str> = stdout.lines().filter(|l| l.starts_with('*')).collect();
    assert_eq!(marked.len(), 3, "{stdout}");
    assert!(
        marked.iter().all(|l| l.contains("reject: bad e")),
        "{stdout}"
    );
}

#[test]
fn a_dry_run_over_http_tries_only_the_events_its_query_chooses() {
    let (_dir, server, http) = start();
    echo_live_over_poisoned_events(&http, &server);
    let (status, report) = try_poison_on_poisoned_events(&http, &server);
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["events"].as_array().unwrap().len(), 3);
    assert_eq!(report["differing"], 3);
}

/// After dry runs through the CLI (JSON and table) and over HTTP.
#[test]
fn a_dry_run_changes_no_stream_group_dead_letter_or_handler_counter() {
    let (dir, server, http) = start();
    echo_live_over_poisoned_events(&http, &server);
    let before = untouched(&http, &server, &["g", "m"]);
    let acked = handler(&http, &server, "worker")["counters"]["acked"].clone();

    try_poison_with_cli(dir.path(), &server, &["--json"]);
    try_poison_with_cli(dir.path(), &server, &[]);
    let (status, report) = try_poison_on_poisoned_events(&http, &server);
    assert_eq!(status, 200, "{report}");

    assert_eq!(untouched(&http, &server, &["g", "m"]), before);
    let view = handler(&http, &server, "worker");
    assert_eq!(
        (&view["counters"]["acked"], &view["version"]),
        (&acked, &json!(1))
    );
}

/// A broken module, a part other than `module` and `query`, and a handler
/// that does not exist; the live handler records no error.
#[test]
fn a_dry_run_refuses_bad_input_and_leaves_the_live_handler_alone() {
    let (_dir, server, http) = start();
    stream(&http, &server, "in", 2);
    let manifest = json!({"stream": "in", "group": "g"});
    let (status, body) = deploy(&http, &server, "worker", &manifest, &guest("echo"));
    assert_eq!(status, 201, "{body}");
    let poison = guest("poison");

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
            ("module", "application/wasm", &poison),
            ("manifest", "application/json", b"{}"),
        ],
    );
    assert_error(&extra, 400, "invalid");
    let missing = try_module(
        &http,
        &server,
        "nobody",
        &[("module", "application/wasm", &poison)],
    );
    assert_error(&missing, 404, "handler_not_found");
    assert_eq!(handler(&http, &server, "worker")["last_error"], Value::Null);
}

// Canaries and the deploy history.

/// The token with every permission, named `alice`.
const ALICE: &str = "alice-secret";

/// The read-only token, named `dash`.
const DASH: &str = "dash-secret";

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

/// A server with tokens `alice` and `dash` (read only) and the test clock;
/// stream `in` (2 partitions) and handler `worker` (echo, group `g`,
/// concurrency 4), deployed by alice through the CLI. Its folder holds the
/// manifest and modules the CLI reads.
struct Canaries {
    server: Server,
    dir: TempDir,
    http: Agent,
}

impl Canaries {
    fn start() -> Canaries {
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
        let it = Canaries {
            server,
            dir,
            http: agent(),
        };
        let stream = json!({"name": "in", "partition_count": 2});
        let (status, body) = it.post("/v1/streams", &stream);
        assert_eq!(status, 201, "{body}");
        let manifest = it.file(
            "worker.toml",
            b"stream = \"in\"\ngroup = \"g\"\nconcurrency = 4\n",
        );
        let echo = it.file("echo.wasm", &guest("echo"));
        it.file("crash.wasm", &guest("crash"));
        it.rheo(&[
            "handler",
            "deploy",
            "worker",
            "--manifest",
            &manifest,
            "--module",
            &echo,
        ]);
        it
    }

    /// Writes `bytes` to `name` in the folder; returns its path.
    fn file(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// Runs `rheo args` as alice; asserts exit code 0 and returns stdout.
    fn rheo(&self, args: &[&str]) -> String {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--server", self.server.base(), "--token", ALICE]);
        let run = rheo_e2e::run_rheo_with(&all, &[], None);
        assert_eq!(run.code, Some(0), "rheo {args:?}: {}", run.stderr);
        run.stdout
    }

    /// `POST path` as alice.
    fn post(&self, path: &str, body: &Value) -> support::Answer {
        post_as(&self.http, &self.server, ALICE, path, body)
    }

    /// `GET path` as alice.
    fn get(&self, path: &str) -> support::Answer {
        get_as(&self.http, &self.server, ALICE, path)
    }

    /// Appends events `e{from}`–`e{to - 1}`; with `trap_every: Some(n)`,
    /// each one whose number `n` divides makes the crash guest trap.
    fn append(&self, from: usize, to: usize, trap_every: Option<usize>) {
        let events: Vec<Value> = (from..to)
            .map(|i| {
                let panic = trap_every.is_some_and(|n| i % n == 0);
                json!({"id": format!("e{i}"), "payload": {"n": i, "panic": panic}})
            })
            .collect();
        let (status, body) = self.post("/v1/streams/in/events/batch", &json!({ "events": events }));
        assert_eq!(status, 201, "{body}");
    }

    /// `GET /v1/handlers/worker`.
    fn view(&self) -> Value {
        self.get("/v1/handlers/worker").1
    }

    /// Waits until `worker` has acked `acked` in all and `g` has no lag.
    fn caught_up(&self, acked: u64) -> Value {
        eventually(&format!("{acked} acked, lag 0"), CATCH_UP, || {
            let lag = self.get("/v1/streams/in/groups/g/lag").1;
            let v = self.view();
            (v["counters"]["acked"] == acked && v["counters"]["inflight"] == 0 && lag["lag"] == 0)
                .then_some(v)
        })
    }

    /// Waits until `worker` has no canary (it was judged).
    fn judged(&self, what: &str) -> Value {
        eventually(what, CATCH_UP, || {
            let v = self.view();
            v["canary"].is_null().then_some(v)
        })
    }

    /// `rheo handler swap worker crash.wasm` as a canary on 50% of the
    /// first attempts, judged after a one-minute window and 20 deliveries.
    fn swap_canary(&self) -> String {
        let crash = self.dir.path().join("crash.wasm");
        self.rheo(&[
            "handler",
            "swap",
            "worker",
            crash.to_str().unwrap(),
            "--canary",
            "50%",
            "--window",
            "1m",
            "--min-deliveries",
            "20",
        ])
    }

    /// A canary (version 2) and 400 events of which one in five traps in
    /// it; returns what the CLI said, the view once the canary was judged,
    /// and the view once all 400 were acked.
    fn trapping_canary(&self) -> (String, Value, Value) {
        let said = self.swap_canary();
        self.append(0, 400, Some(5));
        let judged = self.judged("the trapping canary rolled back");
        (said, judged, self.caught_up(400))
    }

    /// After [`Canaries::trapping_canary`]: another canary (version 3) and
    /// 200 events that do not trap; returns the view once all 600 were acked
    /// and the canary has handled at least 20.
    fn healthy_canary_with_evidence(&self) -> Value {
        self.swap_canary();
        self.append(400, 600, None);
        eventually("the canary's evidence", CATCH_UP, || {
            let v = self.caught_up(600);
            (v["canary"]["counts"]["canary_handled"].as_u64() >= Some(20)).then_some(v)
        })
    }

    /// Moves the test clock past the canary's one-minute window.
    fn end_the_window(&self) {
        let (status, body) = self.post("/v1/test/clock", &json!({"advance_ms": 60_000}));
        assert_eq!(status, 200, "{body}");
    }
}

#[test]
fn a_canary_that_traps_is_rolled_back_without_losing_an_event() {
    let c = Canaries::start();
    let (said, judged, caught_up) = c.trapping_canary();
    assert!(said.contains("canary version 2"), "{said}");
    assert!(said.contains("version 1 stays current"), "{said}");
    assert_eq!(judged["version"], 1, "{judged:#}");
    assert!(by_version(&caught_up, 2, "trapped") > 0, "{caught_up:#}");
    let (_, dead) = c.get("/v1/streams/in/groups/g/dead-letters");
    assert_eq!(
        dead["dead_letters"],
        json!([]),
        "nothing lost to the canary"
    );
}

/// After a canary that was rolled back (version 2): the next (version 3)
/// waits out its window, then replaces version 1, the last good one.
#[test]
fn a_healthy_canary_is_promoted_when_its_window_ends_not_before() {
    let c = Canaries::start();
    c.trapping_canary();
    let v = c.healthy_canary_with_evidence();
    assert_eq!(v["canary"]["version"], 3, "{v:#}");
    c.end_the_window();
    let v = c.judged("the healthy canary promoted");
    assert_eq!(
        (&v["version"], &v["previous_version"]),
        (&json!(3), &json!(1))
    );
}

/// After a deploy, a canary rolled back and one promoted.
#[test]
fn the_history_names_each_step_with_its_digest_who_and_why() {
    let c = Canaries::start();
    c.trapping_canary();
    c.healthy_canary_with_evidence();
    c.end_the_window();
    c.judged("the healthy canary promoted");

    let history: Value = serde_json::from_str(&c.rheo(&["handler", "history", "worker", "--json"]))
        .expect("--json prints JSON");
    let digest = |name: &str| support::sha256_hex(&guest(name));
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
    let table = c.rheo(&["handler", "history", "worker"]);
    assert!(
        table.contains(&digest("crash")[..12]) && table.contains("promote"),
        "{table}"
    );
}

#[test]
fn a_read_token_reads_the_history_but_may_not_promote() {
    let c = Canaries::start();
    let (status, _) = get_as(&c.http, &c.server, DASH, "/v1/handlers/worker/history");
    assert_eq!(status, 200);
    let refused = post_as(
        &c.http,
        &c.server,
        DASH,
        "/v1/handlers/worker/promote",
        &json!({}),
    );
    assert_error(&refused, 403, "forbidden");
}

#[test]
fn promoting_a_handler_without_a_canary_is_a_conflict() {
    let c = Canaries::start();
    let refused = c.post("/v1/handlers/worker/promote", &json!({}));
    assert_error(&refused, 409, "no_canary");
}

/// A handler whose key exhausts its attempts parks it (the group was
/// created from the manifest to quarantine); `rheo handler try
/// --parked-key` dry-runs a fix over what the key holds back, and a key
/// that is not parked is refused (docs/groups.md#quarantine).
#[test]
fn a_dry_run_over_a_parked_key_tries_its_head_and_what_waits_behind_it() {
    let (dir, server, http) = start();
    stream(&http, &server, "ledger", 1);
    let manifest = json!({"stream": "ledger", "group": "posting",
        "ordering": "key", "on_exhausted": "quarantine"});
    let (status, body) = deploy(&http, &server, "poster", &manifest, &guest("batch"));
    assert!(status == 200 || status == 201, "{status} {body}");
    let events = json!({"events": [
        {"id": "l1", "key": "acct-7", "payload": {"do": "retry", "delay_ms": 0}},
        {"id": "l2", "key": "acct-9"},
        {"id": "l3", "key": "acct-7"},
    ]});
    let (status, body) = post(&http, &server, "/v1/streams/ledger/events/batch", &events);
    assert_eq!(status, 201, "{body}");
    let parked = eventually("acct-7 parked", CATCH_UP, || {
        let (_, body) = get(
            &http,
            &server,
            "/v1/streams/ledger/groups/posting/quarantine",
        );
        (body["parked"].as_array()?.len() == 1).then_some(body)
    });
    assert_eq!(parked["parked"][0]["key"], "acct-7", "{parked}");
    assert_eq!(parked["parked"][0]["attempt"], 5, "{parked}");
    assert_eq!(
        parked["parked"][0]["reason"], "max_attempts: retry in a batch of 1",
        "{parked}"
    );

    let echo = dir.path().join("echo.wasm");
    std::fs::write(&echo, guest("echo")).unwrap();
    let try_on = |key: &str| {
        let module = echo.to_str().unwrap();
        let args = [
            "handler",
            "try",
            "poster",
            "--module",
            module,
            "--parked-key",
            key,
            "--json",
            "--server",
            server.base(),
        ];
        rheo_e2e::run_rheo_with(&args, &[], None)
    };
    let run = try_on("acct-7");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).expect("--json prints JSON");
    let ids: Vec<&str> = (report["events"].as_array().unwrap().iter())
        .map(|e| e["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["l1", "l3"], "{report:#}");
    assert_eq!(report["differing"], 1, "{report:#}");
    assert_eq!(report["candidate"]["totals"]["acked"], 2, "{report:#}");

    let run = try_on("acct-9");
    assert_eq!(run.code, Some(2), "{}", run.stdout);
    assert!(
        run.stderr
            .contains("key \"acct-9\" is not parked in group posting"),
        "{}",
        run.stderr
    );
}
