//! The ops commands (`rheo stream …`, `rheo event append|query`,
//! `rheo group …`, `rheo handler …`, `rheo nodes`, `rheo context …`;
//! docs/cli.md#grammar), and the spellings of earlier releases,
//! run as a user would: the real binary against a real `rheo serve` on a
//! SQLite file. Deliveries are fetched and settled over HTTP where a test
//! needs leases or dead letters.

use std::path::{Path, PathBuf};

use rheo_e2e::{Run, Server, ServerOptions, agent, answer, run_rheo_with};
use serde_json::{Value, json};

/// Runs `rheo ARGS --server <server>`.
fn rheo(server: &Server, args: &[&str]) -> Run {
    let mut all = args.to_vec();
    all.extend(["--server", server.base()]);
    run_rheo_with(&all, &[], None)
}

/// Like [`rheo`], and the run must succeed; returns stdout.
fn ok(server: &Server, args: &[&str]) -> String {
    let run = rheo(server, args);
    assert_eq!(run.code, Some(0), "rheo {args:?} failed: {}", run.stderr);
    run.stdout
}

/// Like [`ok`] with `--json`; returns the parsed answer.
fn ok_json(server: &Server, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let text = ok(server, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The whitespace-separated cells of the table line whose first cell is `first`.
fn row(table: &str, first: &str) -> Vec<String> {
    table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .find(|cells| cells.first().map(String::as_str) == Some(first))
        .unwrap_or_else(|| panic!("no row {first:?} in:\n{table}"))
}

fn start() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &ServerOptions::default());
    (dir, server)
}

/// Runs `rheo stream create orders --partition-count 3`.
fn create_orders(server: &Server) {
    assert!(
        ok(
            server,
            &["stream", "create", "orders", "--partition-count", "3"]
        )
        .contains("orders")
    );
}

/// The `rheo append` of event `o-1` from flags (partition 1, key `alice`).
const APPEND_O1: [&str; 15] = [
    "event",
    "append",
    "orders",
    "--id",
    "o-1",
    "--type",
    "order.created",
    "--key",
    "alice",
    "--partition",
    "1",
    "--payload",
    r#"{"total": 12}"#,
    "--metadata",
    r#"{"producer": "cli"}"#,
];

/// Writes `<dir>/events.jsonl`: 1,200 `bulk` events `e-{n}` with payload
/// `{"n": n}` over seven keys.
fn bulk_file(dir: &Path) -> PathBuf {
    let file = dir.join("events.jsonl");
    let lines: Vec<String> = (0..1200)
        .map(|i| json!({"id": format!("e-{i}"), "type": "bulk", "key": format!("k{}", i % 7), "payload": {"n": i}}).to_string())
        .collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    file
}

/// Stream `orders` holding `o-1` and the 1,200 events of [`bulk_file`]:
/// 1,201 events to query.
fn orders_to_query(dir: &Path, server: &Server) {
    create_orders(server);
    ok(server, &APPEND_O1);
    let file = bulk_file(dir);
    ok(
        server,
        &[
            "event",
            "append",
            "orders",
            "--file",
            file.to_str().unwrap(),
        ],
    );
}

/// Each kind of failure ends with its own exit code
/// (docs/cli.md#exit-codes), so that a script can tell them apart.
#[test]
fn each_kind_of_failure_has_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions {
        args: vec!["--auth-token".into(), "s3cret".into()],
        ..ServerOptions::default()
    };
    let server = Server::start(dir.path(), &options);
    let with_token = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--auth-token", "s3cret"]);
        rheo(&server, &all)
    };
    let code = |run: Run| (run.code, run.stderr);
    assert_eq!(with_token(&["stream"]).code, Some(0));
    let (unauthorized, stderr) = code(rheo(&server, &["stream"]));
    assert_eq!(unauthorized, Some(6), "no token: {stderr}");
    let (invalid, stderr) = code(with_token(&["stream", "create", "no spaces"]));
    assert_eq!(invalid, Some(2), "a name the server refuses: {stderr}");
    let (missing, stderr) = code(with_token(&["group", "lag", "nope", "g"]));
    assert_eq!(missing, Some(4), "{stderr}");
    with_token(&["stream", "create", "orders"]);
    let (conflict, stderr) = code(with_token(&["stream", "create", "orders"]));
    assert_eq!(conflict, Some(5), "{stderr}");
    let nobody = run_rheo_with(&["stream", "--server", "http://127.0.0.1:9"], &[], None);
    assert_eq!(nobody.code, Some(3), "unreachable: {}", nobody.stderr);
    let usage = run_rheo_with(&["stream", "--no-such-flag"], &[], None);
    assert_eq!(usage.code, Some(2), "a usage error: {}", usage.stderr);
}

/// `-v` shows each HTTP call with its answer's status; `--timeout` gives
/// up on a server that accepted the connection but never answers
/// (docs/cli.md#reaching-a-server).
#[test]
fn verbose_shows_the_http_calls_and_timeout_gives_up_on_a_silent_server() {
    let (_dir, server) = start();
    let run = rheo(&server, &["stream", "-v"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let call = format!("GET {}/v1/streams -> 200 in ", server.base());
    assert!(run.stderr.contains(&call), "{call:?} in {}", run.stderr);

    // Accepts connections and reads nothing: no answer ever comes.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let held = std::thread::spawn(move || silent.accept().map(|(socket, _)| socket));
    let run = run_rheo_with(
        &["stream", "--server", &url, "--timeout", "300ms"],
        &[],
        None,
    );
    assert_eq!(run.code, Some(3), "{}", run.stderr);
    assert!(run.stderr.contains("timed out"), "{}", run.stderr);
    drop(held.join());
}

#[test]
fn streams_are_listed_created_and_a_duplicate_is_refused() {
    let (_dir, server) = start();
    assert!(ok(&server, &["stream"]).contains("no streams yet"));
    create_orders(&server);
    assert_eq!(
        row(&ok(&server, &["stream"]), "orders")[..2],
        ["orders", "3"]
    );
    // `list` says the same; `--partition-count` is the count's spelling.
    ok(
        &server,
        &["stream", "create", "audit", "--partition-count", "2"],
    );
    let listed = ok(&server, &["stream", "list"]);
    assert_eq!(row(&listed, "orders")[..2], ["orders", "3"]);
    assert_eq!(row(&listed, "audit")[..2], ["audit", "2"]);
    let again = rheo(&server, &["stream", "create", "orders"]);
    // 5: a conflict with what is there (docs/cli.md#exit-codes).
    assert_eq!(again.code, Some(5));
    assert!(
        again.stderr.starts_with("error: ") && again.stderr.contains("(already_exists)"),
        "{}",
        again.stderr
    );
}

#[test]
fn a_group_and_a_stream_are_deleted_only_with_confirm() {
    let (_dir, server) = start();
    create_orders(&server);
    ok(&server, &["group", "create", "orders", "billing"]);
    ok(&server, &["group", "create", "orders", "audit"]);
    for args in [
        &["group", "delete", "orders", "billing"][..],
        &["stream", "delete", "orders"][..],
    ] {
        let refused = rheo(&server, args);
        // 2: refused as invalid, before anything is sent.
        assert_eq!(refused.code, Some(2), "{args:?}");
        assert!(
            refused.stderr.contains("without --confirm")
                && refused.stderr.contains("(confirm_required)"),
            "{}",
            refused.stderr
        );
    }
    let out = ok(
        &server,
        &["group", "delete", "orders", "billing", "--confirm"],
    );
    assert_eq!(out.trim(), "deleted group billing of stream orders");
    let groups = ok(&server, &["group", "list", "orders"]);
    assert!(
        !groups.contains("billing") && groups.contains("audit"),
        "{groups}"
    );
    assert_eq!(ok(&server, &["group", "list", "orders"]), groups);
    let missing = rheo(
        &server,
        &["group", "delete", "orders", "billing", "--confirm"],
    );
    assert!(
        missing.stderr.contains("(group_not_found)"),
        "{}",
        missing.stderr
    );

    let out = ok(&server, &["stream", "delete", "orders", "--confirm"]);
    assert_eq!(out.trim(), "deleted stream orders");
    assert!(ok(&server, &["stream"]).contains("no streams yet"));
    ok(&server, &["stream", "create", "orders"]);
    let answer = ok_json(&server, &["stream", "delete", "orders", "--confirm"]);
    assert_eq!(answer, json!({"deleted": true, "removed_handlers": []}));
}

/// Retention from the command line: created with the stream, changed and
/// cleared, applied by the server's trimmer (a short interval; the test
/// clock makes events old), and what a group skipped shown by group-info.
#[test]
fn a_retention_is_set_from_flags_and_the_server_trims_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions {
        test_clock: true,
        args: vec!["--retention-interval-ms".into(), "20".into()],
        ..ServerOptions::default()
    };
    let server = Server::start(dir.path(), &options);
    let out = ok(
        &server,
        &[
            "stream",
            "create",
            "logs",
            "--max-events",
            "3",
            "--max-age",
            "1h",
        ],
    );
    assert_eq!(
        out.trim(),
        "created stream logs with 1 partition(s); retention limits: max age 1h 00m, at most 3 events per partition"
    );
    ok(&server, &["group", "create", "logs", "audit"]);
    for i in 0..5 {
        ok(
            &server,
            &[
                "event",
                "append",
                "logs",
                "--id",
                &format!("l{i}"),
                "--payload",
                "{}",
            ],
        );
    }
    let stored = |server: &Server| row(&ok(server, &["stream"]), "logs")[2].clone();
    let trimmed = (0..500).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        stored(&server) == "3"
    });
    assert!(
        trimmed,
        "the trimmer keeps the newest 3: {}",
        ok(&server, &["stream"])
    );
    let info = ok(&server, &["group", "info", "logs", "audit"]);
    assert_eq!(row(&info, "skipped")[3], "2", "{info}");

    // Two hours later by the server's clock: the age limit removes the rest.
    let http = agent();
    let moved = answer(
        http.post(&format!("{}/v1/test/clock", server.base()))
            .send_json(json!({"advance_ms": 7_200_000})),
    );
    assert_eq!(moved.0, 200, "{}", moved.1);
    let emptied = (0..500).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        stored(&server) == "0"
    });
    assert!(emptied, "{}", ok(&server, &["stream"]));

    let out = ok(
        &server,
        &["stream", "retention", "logs", "--retention", "interest"],
    );
    assert_eq!(
        out.trim(),
        "stream logs: retention interest: events every group settled"
    );
    let out = ok(&server, &["stream", "retention", "logs", "--keep-all"]);
    assert_eq!(out.trim(), "stream logs: keeps every event");
    let refused = rheo(
        &server,
        &["stream", "retention", "logs", "--max-events", "0"],
    );
    assert!(refused.stderr.contains("(invalid)"), "{}", refused.stderr);
}

#[test]
fn groups_are_created_and_listed_with_their_settings() {
    let (_dir, server) = start();
    create_orders(&server);
    ok(
        &server,
        &[
            "group",
            "create",
            "orders",
            "billing",
            "--max-attempts",
            "2",
        ],
    );
    ok(
        &server,
        &[
            "group",
            "create",
            "orders",
            "audit",
            "--after-sequence",
            "0",
        ],
    );
    let groups = ok(&server, &["group", "list", "orders"]);
    assert_eq!(row(&groups, "NAME")[..2], ["NAME", "MAX-ATTEMPTS"]);
    assert_eq!(row(&groups, "billing")[..3], ["billing", "2", "immediate"]);
    assert_eq!(row(&groups, "audit")[1], "5");
}

#[test]
fn an_event_appended_from_flags_is_not_appended_again_for_the_same_id() {
    let (_dir, server) = start();
    create_orders(&server);
    let out = ok(&server, &APPEND_O1);
    assert_eq!(out.trim(), "appended event o-1 at partition 1 sequence 1");
    let out = ok(&server, &APPEND_O1);
    assert!(
        out.contains("already exists") && out.contains("nothing appended"),
        "{out}"
    );
}

#[test]
fn a_file_append_sends_batches_of_500_quietly_and_counts_duplicates() {
    let (dir, server) = start();
    create_orders(&server);
    // 1,200 lines: three batches of 500 at most, no progress bar noise
    // when stderr is not a terminal.
    let file = bulk_file(dir.path());
    let path = file.to_str().unwrap();
    let run = rheo(&server, &["event", "append", "orders", "--file", path]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "appended 1200 events");
    assert_eq!(run.stderr, "");
    let again = ok_json(&server, &["event", "append", "orders", "-f", path]);
    assert_eq!(
        again,
        json!({"appended": 1200, "duplicates": 1200, "batches": 3})
    );
    // The streams table sums the events over the partitions.
    let streams = ok(&server, &["stream"]);
    assert_eq!(row(&streams, "orders")[..3], ["orders", "3", "1200"]);
}

#[test]
fn a_bad_line_is_reported_by_number_and_only_the_lines_before_it_are_appended() {
    let (dir, server) = start();
    create_orders(&server);
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"id\": \"b-1\"}\n\n{\"id\": \"b-2\"}\n{\"id\": \"b-3\", \"pay\": {}}\n{\"id\": \"b-4\"}\n",
    )
    .unwrap();
    let run = rheo(
        &server,
        &["event", "append", "orders", "-f", bad.to_str().unwrap()],
    );
    assert_eq!(run.code, Some(2), "a bad line is invalid input");
    assert!(
        run.stderr
            .contains("bad.jsonl line 4: unknown field \"pay\""),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("appended before it: 2 events"),
        "{}",
        run.stderr
    );
    // Nothing after the bad line was sent.
    let streams = ok(&server, &["stream"]);
    assert_eq!(row(&streams, "orders")[..3], ["orders", "3", "2"]);
}

#[test]
fn events_are_appended_from_standard_input() {
    let (_dir, server) = start();
    create_orders(&server);
    let stdin = b"{\"id\": \"s-1\", \"type\": \"piped\", \"payload\": {\"via\": \"stdin\"}}\n";
    let run = run_rheo_with(
        &["event", "append", "orders", "-f", "-"],
        &[("RHEO_SERVER", server.base())],
        Some(stdin),
    );
    assert_eq!(
        (run.code, run.stdout.trim()),
        (Some(0), "appended 1 event"),
        "{}",
        run.stderr
    );
    let streams = ok(&server, &["stream"]);
    assert_eq!(row(&streams, "orders")[..3], ["orders", "3", "1"]);
}

#[test]
fn a_query_prints_a_table_with_a_next_page_hint() {
    let (dir, server) = start();
    orders_to_query(dir.path(), &server);
    let page = ok(
        &server,
        &[
            "event",
            "query",
            "orders",
            "--where",
            r#"{"type": "order.created"}"#,
        ],
    );
    let event = row(&page, "o-1");
    assert_eq!(
        event,
        ["o-1", "1/1", "order.created", "alice", r#"{"total":12}"#]
    );
    let page = ok(
        &server,
        &[
            "event",
            "query",
            "orders",
            "--where",
            r#"{"type": "bulk"}"#,
            "--limit",
            "2",
        ],
    );
    assert_eq!(page.lines().count(), 4, "{page}");
    assert!(page.contains("next page: --cursor "), "{page}");
}

#[test]
fn a_query_as_json_gives_a_cursor_to_the_next_page() {
    let (dir, server) = start();
    orders_to_query(dir.path(), &server);
    let json = ok_json(
        &server,
        &[
            "event", "query", "orders", "--limit", "2", "--order", "desc",
        ],
    );
    assert_eq!(json["events"].as_array().unwrap().len(), 2);
    let cursor = json["next_cursor"].as_str().expect("a next cursor");
    let next = ok_json(
        &server,
        &[
            "event", "query", "orders", "--limit", "2", "--order", "desc", "--cursor", cursor,
        ],
    );
    assert_ne!(next["events"][0]["id"], json["events"][0]["id"]);
}

#[test]
fn a_query_with_all_follows_every_cursor_without_repeating_an_event() {
    let (dir, server) = start();
    orders_to_query(dir.path(), &server);
    let all = ok_json(
        &server,
        &["event", "query", "orders", "--all", "--limit", "100"],
    );
    assert_eq!(all["events"].as_array().unwrap().len(), 1201);
    assert_eq!(all["next_cursor"], Value::Null);
    let ids: std::collections::HashSet<&str> = all["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 1201, "following cursors never repeats an event");
    let table = ok(
        &server,
        &[
            "event",
            "query",
            "orders",
            "--all",
            "--where",
            r#"{"n": {"$lt": 10}}"#,
        ],
    );
    assert_eq!(
        table.lines().count(),
        11,
        "a header and ten events:\n{table}"
    );
}

/// Fetches up to `limit` leases of `partitions` over HTTP.
fn fetch(server: &Server, group: &str, partitions: &[u32], limit: u32) -> Vec<Value> {
    let url = server.url(&format!("/v1/streams/pay/groups/{group}/fetch"));
    let (status, body) = answer(
        agent()
            .post(&url)
            .send_json(json!({"limit": limit, "partitions": partitions})),
    );
    assert_eq!(status, 200, "{body}");
    body["leases"].as_array().unwrap().clone()
}

/// Settles a lease over HTTP with `op` (`ack` or `reject`).
fn settle(server: &Server, group: &str, op: &str, lease: &Value) {
    let url = server.url(&format!("/v1/streams/pay/groups/{group}/{op}"));
    let mut body = json!({"event_id": lease["event_id"], "lease_id": lease["lease_id"], "receipt": lease["receipt"]});
    if op == "reject" {
        body["reason"] = json!("bad data");
    }
    let (status, answer) = answer(agent().post(&url).send_json(body));
    assert_eq!(status, 200, "{answer}");
}

/// Stream `pay` with events `a1`–`a3` on partition 0 and `b1`, `b2` on
/// partition 1.
fn pay_with_five_events(server: &Server) {
    ok(
        server,
        &["stream", "create", "pay", "--partition-count", "2"],
    );
    for (id, partition) in [
        ("a1", "0"),
        ("a2", "0"),
        ("a3", "0"),
        ("b1", "1"),
        ("b2", "1"),
    ] {
        ok(
            server,
            &[
                "event",
                "append",
                "pay",
                "--id",
                id,
                "--partition",
                partition,
                "--type",
                "t",
            ],
        );
    }
}

/// [`pay_with_five_events`] and group `billing` (3 attempts at most):
/// `a1` and `a2` rejected (dead letters), a lease held on `b1`.
fn billing_with_dead_letters(server: &Server) {
    pay_with_five_events(server);
    ok(
        server,
        &["group", "create", "pay", "billing", "--max-attempts", "3"],
    );
    for lease in fetch(server, "billing", &[0], 2) {
        settle(server, "billing", "reject", &lease);
    }
    assert_eq!(fetch(server, "billing", &[1], 1).len(), 1);
}

/// [`pay_with_five_events`] and group `replayed` that acked all five.
fn replayed_all_acked(server: &Server) {
    pay_with_five_events(server);
    ok(server, &["group", "create", "pay", "replayed"]);
    let leases = fetch(server, "replayed", &[0, 1], 10);
    assert_eq!(leases.len(), 5);
    for lease in &leases {
        settle(server, "replayed", "ack", lease);
    }
    assert!(ok(server, &["group", "lag", "pay", "replayed"]).contains("lag 0:"));
}

#[test]
fn lag_shows_each_partition_and_the_group_totals() {
    let (_dir, server) = start();
    billing_with_dead_letters(&server);
    let lag = ok(&server, &["group", "lag", "pay", "billing"]);
    assert_eq!(
        row(&lag, "PARTITION"),
        ["PARTITION", "FRONTIER", "HIGH-WATERMARK", "LAG"]
    );
    assert_eq!(row(&lag, "0"), ["0", "2", "3", "1"]);
    assert_eq!(row(&lag, "1"), ["1", "0", "2", "2"]);
    assert!(
        lag.contains("lag 3: pending 2, inflight 1, waiting_retry 0, oldest unacked "),
        "{lag}"
    );
    let only = ok(
        &server,
        &["group", "lag", "pay", "billing", "--partitions", "1"],
    );
    assert!(
        only.lines().all(|l| !l.trim_start().starts_with("0 ")),
        "{only}"
    );
    let json = ok_json(&server, &["group", "lag", "pay", "billing"]);
    assert_eq!(
        json["partitions"]["0"],
        json!({"frontier": 2, "high_watermark": 3, "lag": 1})
    );
}

#[test]
fn group_info_shows_settings_dead_letters_inflight_and_cursors() {
    let (_dir, server) = start();
    billing_with_dead_letters(&server);
    let info = ok(&server, &["group", "info", "pay", "billing"]);
    assert_eq!(row(&info, "max"), ["max", "attempts", "3"]);
    assert_eq!(row(&info, "dead"), ["dead", "letters", "2"]);
    assert_eq!(row(&info, "inflight"), ["inflight", "1"]);
    assert_eq!(row(&info, "PARTITION")[1], "CURSOR");
    assert_eq!(row(&info, "0")[2..], ["2", "3", "1"]);

    let missing = rheo(&server, &["group", "info", "pay", "nope"]);
    assert_eq!(missing.code, Some(4), "not found");
    assert!(
        missing.stderr.contains("(group_not_found)"),
        "{}",
        missing.stderr
    );
}

#[test]
fn dead_letters_are_listed_and_paged_after_an_event_id() {
    let (_dir, server) = start();
    billing_with_dead_letters(&server);
    let letters = ok(&server, &["group", "dead-letters", "pay", "billing"]);
    assert_eq!(
        row(&letters, "EVENT-ID"),
        [
            "EVENT-ID",
            "PARTITION",
            "SEQ",
            "ATTEMPT",
            "REASON",
            "DEAD-LETTERED"
        ]
    );
    assert_eq!(
        row(&letters, "a1")[..6],
        ["a1", "0", "1", "1", "bad", "data"]
    );
    assert_eq!(row(&letters, "a2")[..3], ["a2", "0", "2"]);
    let first = ok(
        &server,
        &["group", "dead-letters", "pay", "billing", "--limit", "1"],
    );
    assert!(
        first.contains("more: rheo group dead-letters pay billing --after a1"),
        "{first}"
    );
    let rest = ok_json(
        &server,
        &["group", "dead-letters", "pay", "billing", "--after", "a1"],
    );
    assert_eq!(rest["dead_letters"][0]["event_id"], "a2");
}

#[test]
fn dead_letters_are_redriven_by_id_rewinding_the_frontier_or_all_at_once() {
    let (_dir, server) = start();
    billing_with_dead_letters(&server);
    let out = ok(&server, &["group", "redrive", "pay", "billing", "a1"]);
    assert!(out.starts_with("redriven 1 dead letter:"), "{out}");
    assert_eq!(
        row(&ok(&server, &["group", "lag", "pay", "billing"]), "0"),
        ["0", "0", "3", "3"]
    );
    let out = ok_json(&server, &["group", "redrive", "pay", "billing", "--all"]);
    assert_eq!(out, json!({"redriven": 1}));
    assert!(ok(&server, &["group", "dead-letters", "pay", "billing"]).contains("no dead letters"));
}

#[test]
fn acked_deliveries_are_replayed_by_sequence_by_event_ids_or_by_a_query() {
    let (_dir, server) = start();
    replayed_all_acked(&server);
    let out = ok(
        &server,
        &[
            "group",
            "replay",
            "pay",
            "replayed",
            "--after-sequence",
            "1",
            "--partitions",
            "0",
        ],
    );
    assert_eq!(out.trim(), "reopened 2 deliveries for group replayed");
    assert_eq!(
        row(&ok(&server, &["group", "lag", "pay", "replayed"]), "0"),
        ["0", "1", "3", "2"]
    );
    let out = ok(
        &server,
        &["group", "replay", "pay", "replayed", "--event-ids", "b1"],
    );
    assert_eq!(out.trim(), "reopened 1 delivery for group replayed");
    let out = ok_json(
        &server,
        &[
            "group",
            "replay",
            "pay",
            "replayed",
            "--query",
            r#"{"where": {"partition": 1}}"#,
        ],
    );
    // b1 is open already; only b2 is re-opened.
    assert_eq!(out["reopened"], 1);
}

#[test]
fn a_reset_is_refused_without_confirm_and_with_it_moves_every_cursor() {
    let (_dir, server) = start();
    replayed_all_acked(&server);
    // Refused without --confirm, before anything is sent.
    let refused = rheo(&server, &["group", "reset", "pay", "replayed"]);
    assert_eq!(refused.code, Some(2));
    assert!(
        refused.stderr.contains("without --confirm"),
        "{}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("(confirm_required)"),
        "{}",
        refused.stderr
    );
    let out = ok(
        &server,
        &[
            "group",
            "reset",
            "pay",
            "replayed",
            "--confirm",
            "--after-sequence",
            "1",
        ],
    );
    assert_eq!(out.trim(), "reset group replayed on stream pay");
    let lag = ok(&server, &["group", "lag", "pay", "replayed"]);
    assert_eq!(row(&lag, "0"), ["0", "1", "3", "2"]);
    assert_eq!(row(&lag, "1"), ["1", "1", "2", "1"]);
}

#[test]
fn a_reset_changes_the_ordering_of_every_partition_only() {
    let (_dir, server) = start();
    replayed_all_acked(&server);
    let partial = rheo(
        &server,
        &[
            "group",
            "reset",
            "pay",
            "replayed",
            "--confirm",
            "--ordering",
            "key",
            "--partitions",
            "0",
        ],
    );
    assert_eq!(partial.code, Some(2), "{}", partial.stderr);
    let out = ok(
        &server,
        &[
            "group",
            "reset",
            "pay",
            "replayed",
            "--confirm",
            "--ordering",
            "key",
        ],
    );
    assert_eq!(
        out.trim(),
        "reset group replayed on stream pay (ordering key)"
    );
    let info = ok(&server, &["group", "info", "pay", "replayed"]);
    assert_eq!(row(&info, "ordering"), ["ordering", "key"]);
}

/// Writes the example guest `name` (see `rheo_example_guests`) to
/// `<dir>/<name>.wasm`, the file the CLI uploads.
fn guest(dir: &Path, name: &str) -> PathBuf {
    let bytes = rheo_example_guests::get(name).unwrap_or_else(|| panic!("no example guest {name}"));
    let path = dir.join(format!("{name}.wasm"));
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn handlers_are_deployed_swapped_rolled_back_paused_and_deleted() {
    let (dir, server) = start();
    // Outside the server's folder, where nothing else reads them.
    let modules = tempfile::tempdir().unwrap();
    let echo = guest(modules.path(), "echo");
    let flaky = guest(modules.path(), "flaky");
    ok(&server, &["stream", "create", "jobs"]);
    for i in 0..3 {
        ok(
            &server,
            &["event", "append", "jobs", "--id", &format!("j{i}")],
        );
    }
    // The manifest as it would sit in a handlers directory.
    let manifest = dir.path().join("echo.toml");
    std::fs::write(
        &manifest,
        "stream = \"jobs\"\ngroup = \"workers\"\nmodule = \"echo.wasm\"\n\n[config]\ngreeting = \"hello\"\n",
    )
    .unwrap();
    assert!(ok(&server, &["handler", "list"]).contains("no handlers deployed"));

    let deployed = ok(
        &server,
        &[
            "handler",
            "deploy",
            "echo",
            "--manifest",
            manifest.to_str().unwrap(),
            "--module",
            echo.to_str().unwrap(),
        ],
    );
    assert!(
        deployed.starts_with("handler echo deployed: version 1 (digest "),
        "{deployed}"
    );
    assert!(deployed.contains("running on jobs/workers"), "{deployed}");
    let json = ok_json(&server, &["handler", "get", "echo"]);
    let echo_digest = json["digest"].as_str().unwrap().to_owned();
    assert_eq!(json["config"], json!({"greeting": "hello"}));
    assert!(deployed.contains(&echo_digest[..12]));

    let list = ok(&server, &["handler", "list"]);
    assert_eq!(
        row(&list, "NAME"),
        [
            "NAME",
            "STREAM",
            "GROUP",
            "STATUS",
            "VERSION",
            "DIGEST",
            "PROCESSED",
            "ACKED",
            "RETRIED",
            "REJECTED"
        ]
    );
    assert_eq!(
        row(&list, "echo")[..6],
        [
            "echo",
            "jobs",
            "workers",
            "running",
            "1",
            &echo_digest[..12]
        ]
    );
    let details = ok(&server, &["handler", "get", "echo"]);
    assert_eq!(row(&details, "digest"), ["digest", echo_digest.as_str()]);
    assert_eq!(row(&details, "config"), ["config", "greeting=hello"]);

    let swapped = ok(
        &server,
        &[
            "handler",
            "swap",
            "echo",
            "--module",
            flaky.to_str().unwrap(),
        ],
    );
    assert!(
        swapped.starts_with("handler echo swapped: version 2 "),
        "{swapped}"
    );
    assert!(swapped.contains("previous version 1"), "{swapped}");
    assert!(!swapped.contains(&echo_digest[..12]), "{swapped}");

    let rolled = ok(&server, &["handler", "rollback", "echo"]);
    assert!(
        rolled.starts_with("handler echo rolled back: version 1 "),
        "{rolled}"
    );
    assert!(rolled.contains(&echo_digest[..12]), "{rolled}");

    // On SQLite the server is a node of its own, listed with what it runs.
    let nodes = ok(&server, &["nodes"]);
    assert!(
        nodes.ends_with("single node: the backend is not shared (docs/cluster.md)\n"),
        "{nodes}"
    );
    let me = ok_json(&server, &["nodes"]);
    assert_eq!(me["clustered"], false, "{me}");
    assert_eq!(me["nodes"][0]["id"], me["this_node"], "{me}");
    assert_eq!(me["nodes"][0]["address"], server.base(), "{me}");
    assert_eq!(me["nodes"][0]["handlers"][0]["name"], "echo", "{me}");
    assert_eq!(
        me["nodes"][0]["handlers"][0]["digest"],
        json!(echo_digest),
        "{me}"
    );
    let me_row = row(&nodes, me["this_node"].as_str().unwrap()).join(" ");
    assert!(
        me_row.contains(" * ") && me_row.ends_with("echo v1"),
        "{nodes}"
    );

    let paused = ok(&server, &["handler", "pause", "echo"]);
    assert!(paused.contains(", paused on jobs/workers"), "{paused}");
    assert_eq!(row(&ok(&server, &["handler", "list"]), "echo")[3], "paused");
    let resumed = ok(&server, &["handler", "resume", "echo"]);
    assert!(resumed.contains(", running on jobs/workers"), "{resumed}");

    // A file that is not a component is refused; the running version stays.
    let refused = rheo(
        &server,
        &["handler", "swap", "echo", manifest.to_str().unwrap()],
    );
    assert_eq!(refused.code, Some(2), "invalid: {}", refused.stderr);
    assert!(refused.stderr.starts_with("error: "), "{}", refused.stderr);
    assert_eq!(
        ok_json(&server, &["handler", "get", "echo"])["digest"],
        json!(echo_digest)
    );

    assert_eq!(
        ok(&server, &["handler", "delete", "echo"]).trim(),
        "deleted handler echo"
    );
    let gone = rheo(&server, &["handler", "get", "echo"]);
    assert_eq!(gone.code, Some(4));
    assert!(
        gone.stderr.contains("(handler_not_found)"),
        "{}",
        gone.stderr
    );
}

#[test]
fn a_token_is_sent_when_the_server_requires_one() {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions {
        auth_token: Some("s3cret".into()),
        ..ServerOptions::default()
    };
    let server = Server::start(dir.path(), &options);
    let without = rheo(&server, &["stream"]);
    assert_eq!(without.code, Some(6));
    assert!(
        without.stderr.contains("(unauthorized)"),
        "{}",
        without.stderr
    );
    let wrong = rheo(&server, &["stream", "--auth-token", "guess"]);
    assert!(
        wrong.stderr.contains("invalid bearer token (unauthorized)"),
        "{}",
        wrong.stderr
    );

    ok(
        &server,
        &["stream", "create", "private", "--auth-token", "s3cret"],
    );
    let from_env = run_rheo_with(
        &["stream"],
        &[
            ("RHEO_SERVER", server.base()),
            ("RHEO_AUTH_TOKEN", "s3cret"),
        ],
        None,
    );
    assert_eq!(from_env.code, Some(0), "{}", from_env.stderr);
    assert_eq!(row(&from_env.stdout, "private")[1], "1");
}

#[test]
fn an_unreachable_server_is_exit_code_3_with_a_hint() {
    let run = run_rheo_with(&["stream", "--server", "http://127.0.0.1:1"], &[], None);
    assert_eq!(run.code, Some(3));
    assert!(
        run.stderr
            .starts_with("error: cannot reach the Rheo server at http://127.0.0.1:1: "),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("is `rheo serve` running? set --server or RHEO_SERVER")
    );
    assert_eq!(run.stdout, "");

    // https is spoken (docs/http.md#https): a server that does not answer
    // is the same error.
    let https = run_rheo_with(
        &["group", "lag", "s", "g", "--server", "https://127.0.0.1:1"],
        &[],
        None,
    );
    assert_eq!(https.code, Some(3));
    assert!(
        https
            .stderr
            .starts_with("error: cannot reach the Rheo server at https://127.0.0.1:1: "),
        "{}",
        https.stderr
    );
}

#[test]
fn usage_errors_exit_with_code_2_before_any_request() {
    // No server runs at this address: a usage error never gets that far.
    let server = ["--server", "http://127.0.0.1:1"];
    let cases: [&[&str]; 6] = [
        &["group", "redrive", "s", "g"],
        &["group", "replay", "s", "g"],
        &[
            "group",
            "replay",
            "s",
            "g",
            "--after-sequence",
            "1",
            "--event-ids",
            "a",
        ],
        &["event", "append", "s", "--payload", "[1]"],
        &["event", "append", "s", "--file", "x.jsonl", "--key", "k"],
        &["handler"],
    ];
    for args in cases {
        let all: Vec<&str> = args.iter().chain(&server).copied().collect();
        let run = run_rheo_with(&all, &[], None);
        assert_eq!(run.code, Some(2), "rheo {args:?}: {}", run.stderr);
        assert!(!run.stderr.contains("cannot reach"), "{}", run.stderr);
    }
}

/// With stderr on a terminal (util-linux `script` provides one), a file
/// append draws a progress bar there, then clears it for the final count.
#[cfg(target_os = "linux")]
#[test]
fn a_file_append_shows_progress_on_a_terminal() {
    let (dir, server) = start();
    ok(&server, &["stream", "create", "bulk"]);
    let file = dir.path().join("events.jsonl");
    let lines: Vec<String> = (0..1200)
        .map(|i| json!({"payload": {"n": i}}).to_string())
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let command = format!(
        "{} append bulk --file {} --server {}",
        rheo_e2e::rheo_binary().display(),
        file.display(),
        server.base()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env_remove("RHEO_SERVER")
        .env_remove("RHEO_AUTH_TOKEN")
        .output()
        .expect("run rheo under script(1) (util-linux)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // Redraws are rate-limited, so which counts show varies; a bar shows.
    assert!(
        text.contains("%  ") && text.contains(" events appended"),
        "{text}"
    );
    assert!(text.contains("appended 1200 events"), "{text}");
}

/// `rheo handler logs NAME --json` until some line satisfies `found`
/// (the handler runs in the background); returns the lines.
fn logs_until(server: &Server, args: &[&str], found: impl Fn(&Value) -> bool) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let text = ok(server, args);
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect();
        if lines.iter().any(&found) {
            return lines;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no such line: {lines:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn handler_logs_are_printed_limited_and_followed() {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions {
        test_clock: true,
        args: vec!["--handler-log-lines".into(), "8".into()],
        ..ServerOptions::default()
    };
    let server = Server::start(dir.path(), &options);
    let modules = tempfile::tempdir().unwrap();
    let probe = guest(modules.path(), "probe");
    ok(&server, &["stream", "create", "jobs"]);
    let manifest = modules.path().join("probe.toml");
    std::fs::write(&manifest, "stream = \"jobs\"\ngroup = \"workers\"\n").unwrap();
    let (m, p) = (manifest.to_str().unwrap(), probe.to_str().unwrap());
    ok(
        &server,
        &["handler", "deploy", "probe", "--manifest", m, "--module", p],
    );
    ok(&server, &["event", "append", "jobs", "--id", "j1"]);

    // The probe logs four lines and prints one per delivery.
    let lines = logs_until(&server, &["handler", "logs", "probe", "--json"], |l| {
        l["source"] == "stdout"
    });
    assert_eq!(lines.len(), 5, "{lines:?}");
    for line in &lines {
        assert_eq!(line["event_id"], "j1", "{line}");
        assert_eq!(line["attempt"], 1, "{line}");
        assert_eq!(line["version"], 1, "{line}");
    }
    let last = ok(
        &server,
        &["handler", "logs", "probe", "--json", "--limit", "2"],
    );
    let seqs: Vec<u64> = last
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, [4, 5]);
    let human = ok(&server, &["handler", "logs", "probe", "--limit", "1"]);
    assert!(
        human.ends_with(" INFO  v1 j1 #1 [stdout] probe finished: 0 leak(s)\n"),
        "{human}"
    );
    let too_many = rheo(&server, &["handler", "logs", "probe", "--limit", "9"]);
    assert_eq!(too_many.code, Some(2), "{}", too_many.stderr);
    assert!(too_many.stderr.contains("limit"), "{}", too_many.stderr);
    let unknown = rheo(&server, &["handler", "logs", "nope"]);
    assert_eq!(unknown.code, Some(4));
    assert!(
        unknown.stderr.contains("(handler_not_found)"),
        "{}",
        unknown.stderr
    );

    // --follow: the last line, then what comes, until the handler goes.
    let mut follow = std::process::Command::new(rheo_e2e::rheo_binary())
        .args([
            "handler", "logs", "probe", "--follow", "--json", "--limit", "1",
        ])
        .args(["--server", server.base()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    let next = || -> Value {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("a followed line in time");
        serde_json::from_str(&line).unwrap()
    };
    assert_eq!(next()["seq"], 5);
    ok(&server, &["event", "append", "jobs", "--id", "j2"]);
    let line = next();
    assert_eq!(
        (line["seq"].as_u64(), line["event_id"].as_str()),
        (Some(6), Some("j2"))
    );
    for seq in 7..=10 {
        assert_eq!(next()["seq"], seq);
    }
    ok(&server, &["handler", "delete", "probe"]);
    let status = follow.wait().unwrap();
    assert!(
        status.success(),
        "the follower ends cleanly with the handler"
    );
}

/// The spellings of earlier releases still work, hidden from `--help`
/// (docs/cli.md#grammar): bare verbs, `streams` / `groups`, `--token`,
/// `--start-after`, `--from-sequence`, `--partitions` as a count, and
/// `--json`.
#[test]
fn the_spellings_of_earlier_releases_still_work() {
    let (_dir, server) = start();
    ok(&server, &["streams", "create", "old", "--partitions", "2"]);
    ok(&server, &["append", "old", "--id", "a", "--partition", "0"]);
    ok(&server, &["append", "old", "--id", "b", "--partition", "1"]);
    ok(
        &server,
        &[
            "groups",
            "create",
            "old",
            "g",
            "--start-after",
            "0",
            "--retry-backoff-ms",
            "100,1000",
        ],
    );
    assert_eq!(row(&ok(&server, &["groups", "old"]), "g")[2], "100ms,");
    let queried = ok_json(&server, &["query", "old"]);
    assert_eq!(
        queried["events"].as_array().map(Vec::len),
        Some(2),
        "{queried}"
    );
    assert_eq!(
        ageless(ok_json(&server, &["lag", "old", "g"])),
        ageless(ok_json(&server, &["group", "lag", "old", "g"]))
    );
    assert_eq!(
        ageless(ok_json(&server, &["group-info", "old", "g"])),
        ageless(ok_json(&server, &["group", "info", "old", "g"]))
    );
    assert!(ok(&server, &["dead-letters", "old", "g"]).contains("no dead letters"));
    ok(&server, &["redrive", "old", "g", "--all"]);
    ok(&server, &["replay", "old", "g", "--from-sequence", "0"]);
    ok(
        &server,
        &["reset", "old", "g", "--confirm", "--start-after", "1"],
    );
    assert!(row(&ok(&server, &["streams", "list"]), "old").contains(&"2".to_owned()));

    // Hidden: `rheo --help` names only the new grammar.
    let help = run_rheo_with(&["--help"], &[], None).stdout;
    for noun in ["stream", "event", "group", "handler", "context"] {
        assert!(help.contains(&format!("\n  {noun} ")), "{noun}: {help}");
    }
    for old in [
        "streams",
        "groups",
        "lag",
        "group-info",
        "dead-letters",
        "redrive",
        "append",
        "query",
    ] {
        assert!(
            !help.contains(&format!("\n  {old} ")),
            "{old} shows: {help}"
        );
    }
}

/// A lag or group info answer without the age of its oldest unacked
/// event, which grows between two calls.
fn ageless(mut answer: Value) -> Value {
    if let Some(fields) = answer.as_object_mut() {
        fields.remove("oldest_unacked_age_ms");
        if let Some(lag) = fields.get_mut("lag").and_then(Value::as_object_mut) {
            lag.remove("oldest_unacked_age_ms");
        }
    }
    answer
}

/// `-o json` is `--json`, `-o yaml` the same answer as YAML, `-o wide`
/// more columns; the verbs of `rheo group` and `rheo event` answer as
/// the bare verbs did.
#[test]
fn output_formats_and_the_noun_verb_grammar() {
    let (_dir, server) = start();
    ok(
        &server,
        &["stream", "create", "orders", "--partition-count", "2"],
    );
    ok(
        &server,
        &[
            "event",
            "append",
            "orders",
            "--id",
            "o-1",
            "--partition",
            "1",
        ],
    );
    ok(
        &server,
        &[
            "group",
            "create",
            "orders",
            "billing",
            "--retry-backoff",
            "100ms,1s",
        ],
    );
    let lag = ok(
        &server,
        &["group", "lag", "orders", "billing", "-o", "json"],
    );
    let lag: Value = serde_json::from_str(&lag).expect("-o json prints JSON");
    assert_eq!(
        ageless(lag.clone()),
        ageless(ok_json(&server, &["group", "lag", "orders", "billing"]))
    );
    assert_eq!(lag["lag"], 1, "{lag}");
    assert_eq!(lag["partitions"]["1"]["high_watermark"], 1, "{lag}");

    let yaml = ok(
        &server,
        &["group", "lag", "orders", "billing", "-o", "yaml"],
    );
    assert!(
        yaml.contains("\nlag: 1\n") || yaml.starts_with("lag: 1\n"),
        "{yaml}"
    );
    assert!(yaml.contains("partitions:\n  \"0\":\n"), "{yaml}");
    let info = ok_json(&server, &["group", "info", "orders", "billing"]);
    assert_eq!(info["retry_backoff_ms"], json!([100, 1000]), "{info}");

    let stream = ok(&server, &["stream", "get", "orders"]);
    assert_eq!(row(&stream, "1"), ["1", "1", "1", "1"], "{stream}");
    let conflicting = rheo(&server, &["stream", "list", "--json", "-o", "yaml"]);
    assert_eq!(conflicting.code, Some(2), "{}", conflicting.stderr);
    let unknown = rheo(&server, &["stream", "list", "-o", "xml"]);
    assert_eq!(unknown.code, Some(2), "{}", unknown.stderr);
    assert!(unknown.stderr.contains("yaml"), "{}", unknown.stderr);
}

/// Saved contexts: the current one is used where no flag or variable
/// names a server, `--context` picks another, a flag wins, and a context
/// that does not exist is refused rather than quietly replaced.
#[test]
fn contexts_save_a_server_with_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &ServerOptions {
            auth_token: Some("s3cret".into()),
            ..ServerOptions::default()
        },
    );
    let config = dir.path().join("config");
    let config = config.to_str().unwrap();
    let env = [("RHEO_CONFIG_DIR", config)];
    let run = |args: &[&str]| run_rheo_with(args, &env, None);
    let must = |args: &[&str]| {
        let run = run(args);
        assert_eq!(run.code, Some(0), "rheo {args:?}: {}", run.stderr);
        run.stdout
    };
    assert!(must(&["context", "list"]).contains("no contexts saved"));
    let saved = must(&[
        "context",
        "add",
        "local",
        "--server",
        server.base(),
        "--auth-token",
        "s3cret",
    ]);
    assert_eq!(saved, "saved context local (current)\n");
    must(&[
        "context",
        "add",
        "nowhere",
        "--server",
        "http://127.0.0.1:9",
    ]);
    let list = must(&["context", "list"]);
    assert!(!list.contains("s3cret"), "tokens are never printed: {list}");
    assert_eq!(
        row(&list, "*")[1..3],
        ["local".to_owned(), server.base().to_owned()]
    );

    // The current context: its server and token.
    must(&["stream", "create", "orders"]);
    assert!(must(&["stream"]).contains("orders"));
    // Another, for one command: nothing answers there.
    assert_eq!(run(&["stream", "--context", "nowhere"]).code, Some(3));
    // A flag wins over the context (this one lacks the token).
    let flag = run(&["stream", "--server", server.base(), "--auth-token", "wrong"]);
    assert_eq!(flag.code, Some(6), "{}", flag.stderr);
    // A context that does not exist.
    let missing = run(&["stream", "--context", "prod"]);
    assert_eq!(missing.code, Some(2), "{}", missing.stderr);
    assert!(
        missing.stderr.contains("no context named prod"),
        "{}",
        missing.stderr
    );

    assert_eq!(
        must(&["context", "use", "nowhere"]),
        "now using context nowhere\n"
    );
    assert_eq!(run(&["stream"]).code, Some(3));
    must(&["context", "remove", "nowhere"]);
    // No current context left: the default server, where nothing listens here.
    assert!(
        must(&["context", "list"])
            .lines()
            .all(|l| !l.starts_with('*'))
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let file = std::path::Path::new(config).join("contexts.toml");
        let mode = std::fs::metadata(file).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "readable by its owner only: {mode:o}");
    }
}

/// `rheo handler example` writes an embedded example as a .wasm file,
/// which deploys with a manifest and no build.
#[test]
fn an_embedded_example_deploys_without_a_build() {
    let (dir, server) = start();
    // It needs no server.
    let local = |args: &[&str]| {
        let run = run_rheo_with(args, &[], None);
        assert_eq!(run.code, Some(0), "rheo {args:?}: {}", run.stderr);
        run.stdout
    };
    let listed = local(&["handler", "example"]);
    assert!(listed.lines().any(|l| l == "echo"), "{listed}");
    let file = dir.path().join("echo.wasm");
    let wrote = local(&["handler", "example", "echo", "--to", file.to_str().unwrap()]);
    assert!(
        wrote.starts_with(&format!("wrote {}", file.display())),
        "{wrote}"
    );
    let manifest = dir.path().join("echo.toml");
    std::fs::write(&manifest, "stream = \"jobs\"\ngroup = \"workers\"\n").unwrap();
    ok(&server, &["stream", "create", "jobs"]);
    ok(
        &server,
        &[
            "handler",
            "deploy",
            "echo",
            "--manifest",
            manifest.to_str().unwrap(),
            "--module",
            file.to_str().unwrap(),
        ],
    );
    ok(&server, &["event", "append", "jobs", "--id", "j1"]);
    let acked = (0..200).any(|_| {
        let lag = ok_json(&server, &["group", "lag", "jobs", "workers"]);
        lag["lag"] == 0 || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            false
        }
    });
    assert!(acked, "the example acked the event");
    let unknown = run_rheo_with(&["handler", "example", "nope"], &[], None);
    assert_eq!(unknown.code, Some(2), "{}", unknown.stderr);
    assert!(
        unknown.stderr.contains("echo"),
        "lists what there is: {}",
        unknown.stderr
    );
}

/// `rheo group leases` lists what a group has out, with the attempt and
/// expiry; `-o wide` adds the holder and the lease id, `--limit` pages
/// with a hint to the next page.
#[test]
fn leases_show_what_a_group_has_out() {
    let (_dir, server) = start();
    pay_with_five_events(&server);
    ok(&server, &["group", "create", "pay", "billing"]);
    assert!(
        ok(&server, &["group", "leases", "pay", "billing"]).contains("has nothing out"),
        "nothing fetched yet"
    );
    let leases = fetch(&server, "billing", &[0, 1], 3);
    assert_eq!(leases.len(), 3);
    settle(&server, "billing", "ack", &leases[0]);

    let table = ok(&server, &["group", "leases", "pay", "billing"]);
    assert_eq!(
        table.lines().count(),
        3,
        "a header and two leases:\n{table}"
    );
    let event = leases[1]["event_id"].as_str().unwrap();
    let second: Vec<&str> = (table.lines())
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.get(2) == Some(&event))
        .unwrap_or_else(|| panic!("no lease of {event}:\n{table}"));
    assert_eq!(second[3], "1", "the first attempt: {table}");
    assert!(second.join(" ").contains("in "), "expires in …: {table}");

    let wide = ok(
        &server,
        &["group", "leases", "pay", "billing", "-o", "wide"],
    );
    let lease_id = leases[2]["lease_id"].as_str().unwrap();
    assert!(wide.contains(lease_id), "{wide}");
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header[header.len() - 2..], ["HOLDER", "LEASE"], "{wide}");

    let page = ok(
        &server,
        &["group", "leases", "pay", "billing", "--limit", "1"],
    );
    let hint = page.lines().last().unwrap();
    let after = hint
        .strip_prefix("more: rheo group leases pay billing --after ")
        .unwrap_or_else(|| panic!("a hint to the next page: {page}"));
    let rest = ok_json(
        &server,
        &["group", "leases", "pay", "billing", "--after", after],
    );
    assert_eq!(
        rest["leases"][0]["lease_id"], leases[2]["lease_id"],
        "{rest}"
    );
    assert_eq!(rest["next"], Value::Null, "{rest}");

    let missing = rheo(&server, &["group", "leases", "pay", "nope"]);
    assert_eq!(missing.code, Some(4), "{}", missing.stderr);
}
