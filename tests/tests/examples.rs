//! The runnable examples of `examples/`, each run as its README says
//! against a fresh `rheo serve` (SQLite, the default backend), then checked
//! by what it printed and by the state it left on the server.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use rheo_e2e::{Server, ServerOptions, agent, repo_root, rheo_binary};
use serde_json::{Value, json};
use support::{get, post};

/// Runs `examples/<script>` with bash, `args` and `env` (on top of an
/// environment without a server or token of the caller's); asserts it
/// succeeded and returns its stdout.
fn run_example(script: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let path = repo_root().join("examples").join(script);
    let out = Command::new("bash")
        .arg(&path)
        .args(args)
        .env_remove("RHEO_SERVER")
        .env_remove("RHEO_AUTH_TOKEN")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        path.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The answer line the script printed right after the request line that
/// starts with `request`.
fn answer_to<'a>(output: &'a str, request: &str) -> &'a str {
    let mut lines = output.lines();
    lines
        .find(|line| line.starts_with(request))
        .unwrap_or_else(|| panic!("no request {request:?} in:\n{output}"));
    lines
        .next()
        .unwrap_or_else(|| panic!("no answer to {request:?}"))
}

/// The `id`s of the events of a query page.
fn ids(page: &Value) -> BTreeSet<String> {
    support::strings(page, "events", "id").into_iter().collect()
}

#[test]
fn http_consumer_example_produces_and_consumes_with_curl() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path(), &ServerOptions::default());
    let out = run_example("http-consumer/run.sh", &[], &[("RHEO_URL", server.base())]);

    // The known id came back as a duplicate, and the old lease was fenced.
    let again = answer_to(
        &out,
        "POST /v1/streams/orders/events {\"id\": \"o-1\", \"type\": \"order.placed\", \"key\": \"customer-7\", \"payload\": {\"total\": 120}}",
    );
    assert!(again.starts_with("  -> 200 "), "{again}");
    assert!(again.contains("\"duplicate\":true"), "{again}");
    assert!(
        out.contains("  -> 409 {\"error\":{\"code\":\"stale_lease\""),
        "{out}"
    );
    let empty = answer_to(
        &out,
        "POST /v1/streams/orders/groups/billing/fetch {\"limit\": 10}",
    );
    assert_eq!(empty, "  -> 200 {\"leases\":[]}");
    let rich = answer_to(
        &out,
        "POST /v1/streams/orders/query {\"where\": {\"payload.total\"",
    );
    assert!(
        rich.contains("\"id\":\"o-1\"") && !rich.contains("\"id\":\"o-2\""),
        "{rich}"
    );
    assert!(out.contains("\ndone: "), "{out}");

    let http = agent();
    let (_, stream) = get(&http, &server, "/v1/streams/orders");
    assert_eq!(
        stream["partitions"],
        json!({
            "0": {"high_watermark": 1, "first_sequence": 1},
            "1": {"high_watermark": 2, "first_sequence": 1},
        }),
        "o-1 stored once; both customer-7 orders in one partition"
    );
    let (_, lag) = get(&http, &server, "/v1/streams/orders/groups/billing/lag");
    assert_eq!(
        lag["partitions"],
        json!({"0": {"frontier": 0, "high_watermark": 1, "lag": 1},
               "1": {"frontier": 2, "high_watermark": 2, "lag": 0}}),
        "{lag}"
    );
    let counts = ["lag", "pending", "inflight", "waiting_retry"].map(|k| lag[k].clone());
    assert_eq!(counts, [json!(1), json!(0), json!(0), json!(1)], "{lag}");
    let (_, dead) = get(
        &http,
        &server,
        "/v1/streams/orders/groups/billing/dead-letters",
    );
    let dead = &dead["dead_letters"];
    assert_eq!(dead.as_array().map(Vec::len), Some(1), "{dead}");
    assert_eq!(
        (
            &dead[0]["event_id"],
            &dead[0]["attempt"],
            &dead[0]["reason"]
        ),
        (&json!("o-3"), &json!(1), &json!("total must be positive"))
    );
}

#[test]
fn handler_pipeline_example_fills_the_output_stream() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path(), &ServerOptions::default());
    // The one place this test learns where the example guest is.
    let module = dir.path().join("transform.wasm");
    std::fs::write(&module, support::guest("transform")).expect("write transform.wasm");
    let out = run_example(
        "handler-pipeline/run.sh",
        &[path_str(&module)],
        &[
            ("RHEO_URL", server.base()),
            ("RHEO", path_str(rheo_binary())),
        ],
    );
    assert!(out.contains("deployed"), "{out}");

    let http = agent();
    let (status, page) = post(
        &http,
        &server,
        "/v1/streams/signups-enriched/query",
        &json!({"limit": 1000}),
    );
    assert_eq!(status, 200, "{page}");
    let expected: BTreeSet<String> = (1..=20).map(|i| format!("s-{i}:transformed")).collect();
    assert_eq!(ids(&page), expected, "one derived event per source event");
    for event in page["events"].as_array().expect("events") {
        let id = event["id"].as_str().expect("id");
        let source = id.strip_suffix(":transformed").expect("derived id");
        assert_eq!(event["metadata"]["causation_id"], json!(source), "{event}");
        assert_eq!(
            event["metadata"]["correlation_id"],
            json!("batch-1"),
            "{event}"
        );
        assert_eq!(
            event["type"],
            json!("user.signed_up.transformed"),
            "{event}"
        );
    }
    let (_, lag) = get(&http, &server, "/v1/streams/signups/groups/enrich/lag");
    assert_eq!(lag["lag"], json!(0), "{lag}");
    let (_, handler) = get(&http, &server, "/v1/handlers/enrich");
    assert_eq!(handler["counters"]["acked"], json!(20), "{handler}");
    assert_eq!(handler["version"], json!(1), "{handler}");
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}
