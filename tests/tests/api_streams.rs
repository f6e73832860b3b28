//! The stream, event and query routes (`docs/log.md`) against the real
//! `rheo serve` on SQLite, plus what every route shares: JSON errors for bad
//! requests, unknown routes and methods, the body limit, bearer-token auth,
//! the probes and metrics, and the test clock routes being absent without
//! `--test-clock`.

use crate::support;

use rheo_e2e::{Server, ServerOptions, agent, answer};
use serde_json::{Value, json};
use support::{assert_error, code, delete, get, post, post_empty, post_raw, strings};
use ureq::Agent;

/// A bad request and its expected answer: path, content type, body, status, code.
type BadRequest<'a> = (&'a str, Option<&'a str>, &'a [u8], u16, &'a str);

/// `true` when `text` is an RFC 3339 UTC timestamp with milliseconds.
fn is_timestamp_ms_utc(text: &str) -> bool {
    // 2026-01-01T00:00:00.000Z
    let b = text.as_bytes();
    b.len() == 24
        && b[4] == b'-'
        && b[10] == b'T'
        && b[19] == b'.'
        && b[23] == b'Z'
        && b[20..23].iter().all(u8::is_ascii_digit)
}

#[test]
fn streams_are_created_listed_and_inspected() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &ServerOptions::default());
    let http = agent();

    let (status, orders) = post(
        &http,
        &server,
        "/v1/streams",
        &json!({"name": "orders", "partition_count": 3}),
    );
    assert_eq!(status, 201, "{orders}");
    assert_eq!(orders["name"], "orders");
    assert_eq!(orders["partition_count"], 3);
    assert_eq!(
        orders["partitions"],
        json!({
            "0": {"high_watermark": 0, "first_sequence": 1},
            "1": {"high_watermark": 0, "first_sequence": 1},
            "2": {"high_watermark": 0, "first_sequence": 1},
        })
    );
    let created_at = orders["created_at"].as_str().unwrap_or_default();
    assert!(is_timestamp_ms_utc(created_at), "{created_at}");

    let (status, audit) = post(&http, &server, "/v1/streams", &json!({"name": "audit"}));
    assert_eq!((status, audit["partition_count"].clone()), (201, json!(1)));

    // Errors: duplicate, bad name, bad partition count, unknown field.
    let dup = post(&http, &server, "/v1/streams", &json!({"name": "orders"}));
    assert_error(&dup, 409, "already_exists");
    let bad_name = post(&http, &server, "/v1/streams", &json!({"name": "no spaces"}));
    assert_error(&bad_name, 400, "invalid");
    let long_name = post(
        &http,
        &server,
        "/v1/streams",
        &json!({"name": "x".repeat(129)}),
    );
    assert_error(&long_name, 400, "invalid");
    let zero = post(
        &http,
        &server,
        "/v1/streams",
        &json!({"name": "z", "partition_count": 0}),
    );
    assert_error(&zero, 400, "invalid_partition_count");
    let typo = post(
        &http,
        &server,
        "/v1/streams",
        &json!({"name": "z", "partitions": 2}),
    );
    assert_error(&typo, 400, "invalid");

    // The list is sorted by name and holds only what was created.
    let (status, list) = get(&http, &server, "/v1/streams");
    assert_eq!(status, 200);
    assert_eq!(strings(&list, "streams", "name"), ["audit", "orders"]);

    let (status, one) = get(&http, &server, "/v1/streams/orders");
    assert_eq!((status, one), (200, orders));
    assert_error(
        &get(&http, &server, "/v1/streams/nope"),
        404,
        "stream_not_found",
    );
    assert_error(
        &get(&http, &server, "/v1/streams/bad%20name"),
        400,
        "invalid",
    );
}

/// A server in a temp dir of its own with stream `s` of `partitions`
/// partitions.
fn server_with_stream(partitions: u32) -> (tempfile::TempDir, Server, Agent) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &ServerOptions::default());
    let http = agent();
    support::stream(&http, &server, "s", partitions);
    (dir, server, http)
}

/// `POST /v1/streams/s/events` with `event`; asserts 201, returns the event.
fn append(http: &Agent, server: &Server, event: &Value) -> Value {
    let (status, body) = post(http, server, "/v1/streams/s/events", event);
    assert_eq!(status, 201, "{body}");
    body
}

/// The high watermark of `partition` of stream `s`.
fn high_watermark(http: &Agent, server: &Server, partition: u32) -> u64 {
    let (status, stream) = get(http, server, "/v1/streams/s");
    assert_eq!(status, 200, "{stream}");
    stream["partitions"][partition.to_string()]["high_watermark"]
        .as_u64()
        .unwrap_or_else(|| panic!("no partition {partition} in {stream}"))
}

#[test]
fn an_event_is_appended_once_and_its_id_again_returns_the_stored_event() {
    let (_dir, server, http) = server_with_stream(2);

    // One event: 201, then 200 + duplicate for the same id (nothing new).
    let event = json!({
        "id": "o-1", "type": "placed", "partition": 1,
        "payload": {"amount": 12}, "metadata": {"correlation_id": "c-1"},
    });
    let first = append(&http, &server, &event);
    assert_eq!(first["id"], "o-1");
    assert_eq!(first["stream"], "s");
    assert_eq!(
        (first["partition"].clone(), first["sequence"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(first["type"], "placed");
    assert_eq!(first["payload"], json!({"amount": 12}));
    assert_eq!(first["metadata"], json!({"correlation_id": "c-1"}));
    assert_eq!(first["duplicate"], false);
    assert!(is_timestamp_ms_utc(
        first["timestamp"].as_str().unwrap_or_default()
    ));
    let retry = json!({"id": "o-1", "partition": 1, "payload": {"amount": 99}});
    let (status, again) = post(&http, &server, "/v1/streams/s/events", &retry);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["sequence"], 1);
    assert_eq!(again["payload"], json!({"amount": 12}), "the stored event");
}

#[test]
fn an_empty_event_gets_a_generated_id_partition_0_and_empty_payload_and_metadata() {
    let (_dir, server, http) = server_with_stream(2);
    let defaults = append(&http, &server, &json!({}));
    assert_eq!(defaults["partition"], 0);
    assert_eq!(
        (defaults["payload"].clone(), defaults["metadata"].clone()),
        (json!({}), json!({}))
    );
    assert!(defaults["id"].as_str().is_some_and(|id| !id.is_empty()));
}

#[test]
fn events_with_one_key_go_to_one_partition_with_contiguous_sequences() {
    let (_dir, server, http) = server_with_stream(2);
    let k1 = append(&http, &server, &json!({"key": "customer-7"}));
    let k2 = append(&http, &server, &json!({"key": "customer-7"}));
    assert_eq!(k1["partition"], k2["partition"]);
    assert_eq!(
        k2["sequence"].as_u64().unwrap(),
        k1["sequence"].as_u64().unwrap() + 1
    );
    assert_eq!(k1["key"], "customer-7");
}

#[test]
fn a_single_append_with_a_bad_field_or_to_an_unknown_stream_is_refused() {
    let (_dir, server, http) = server_with_stream(2);
    for (event, expected) in [
        (json!({"partition": 2}), "invalid_partition"),
        (json!({"payload": [1]}), "invalid"),
        (json!({"timestamp": "yesterday"}), "invalid"),
    ] {
        let refused = post(&http, &server, "/v1/streams/s/events", &event);
        assert_error(&refused, 400, expected);
    }
    let missing = post(&http, &server, "/v1/streams/nope/events", &json!({}));
    assert_error(&missing, 404, "stream_not_found");
}

#[test]
fn a_batch_keeps_input_order_flags_duplicates_and_assigns_contiguous_sequences() {
    let (_dir, server, http) = server_with_stream(2);
    append(&http, &server, &json!({"id": "o-1", "partition": 1}));
    append(&http, &server, &json!({"partition": 0}));
    let (p0, p1) = (
        high_watermark(&http, &server, 0),
        high_watermark(&http, &server, 1),
    );
    let (status, batch) = post(
        &http,
        &server,
        "/v1/streams/s/events/batch",
        &json!({"events": [
            {"id": "b-1", "partition": 0},
            {"id": "o-1"},
            {"id": "b-2", "partition": 1},
            {"id": "b-3", "partition": 0},
        ]}),
    );
    assert_eq!(status, 201, "{batch}");
    let summary: Vec<(String, u64, u64, bool)> = batch["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_owned(),
                e["partition"].as_u64().unwrap(),
                e["sequence"].as_u64().unwrap(),
                e["duplicate"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("b-1".to_owned(), 0, p0 + 1, false),
            ("o-1".to_owned(), 1, 1, true),
            ("b-2".to_owned(), 1, p1 + 1, false),
            ("b-3".to_owned(), 0, p0 + 2, false),
        ]
    );
}

#[test]
fn a_batch_with_one_bad_event_stores_nothing() {
    let (_dir, server, http) = server_with_stream(2);
    append(&http, &server, &json!({"partition": 0}));
    let p0 = high_watermark(&http, &server, 0);
    let refused = post(
        &http,
        &server,
        "/v1/streams/s/events/batch",
        &json!({"events": [{"id": "z-1"}, {"id": "z-2", "partition": 9}]}),
    );
    assert_error(&refused, 400, "invalid_partition");
    assert_eq!(high_watermark(&http, &server, 0), p0, "z-1 not stored");
    let (_, found) = post(
        &http,
        &server,
        "/v1/streams/s/query",
        &json!({"where": {"id": "z-1"}}),
    );
    assert_eq!(found["events"], json!([]));
}

#[test]
fn a_batch_over_1000_events_or_to_an_unknown_stream_is_refused_and_an_empty_one_is_fine() {
    let (_dir, server, http) = server_with_stream(2);
    let too_many: Vec<Value> = (0..1001).map(|_| json!({})).collect();
    let over = post(
        &http,
        &server,
        "/v1/streams/s/events/batch",
        &json!({ "events": too_many }),
    );
    assert_error(&over, 400, "invalid");
    let (status, empty) = post(
        &http,
        &server,
        "/v1/streams/s/events/batch",
        &json!({"events": []}),
    );
    assert_eq!((status, empty), (201, json!({"events": []})));
    let missing = post(
        &http,
        &server,
        "/v1/streams/nope/events/batch",
        &json!({"events": []}),
    );
    assert_error(&missing, 404, "stream_not_found");
}

#[test]
fn events_are_read_back_by_partition_after_a_sequence_up_to_a_limit() {
    let (_dir, server, http) = server_with_stream(2);
    append(&http, &server, &json!({"id": "o-1", "partition": 1}));
    append(&http, &server, &json!({"partition": 1}));
    for _ in 0..4 {
        append(&http, &server, &json!({"partition": 0}));
    }

    // One partition, after (exclusive), limit.
    let (status, page) = get(
        &http,
        &server,
        "/v1/streams/s/events?partition=0&after=1&limit=2",
    );
    assert_eq!(status, 200, "{page}");
    let sequences: Vec<u64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, [2, 3]);
    assert!(
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["partition"] == 0)
    );
    let (_, p1_events) = get(&http, &server, "/v1/streams/s/events?partition=1");
    assert_eq!(strings(&p1_events, "events", "id")[0], "o-1");
    assert_eq!(
        p1_events["events"].as_array().unwrap().len() as u64,
        high_watermark(&http, &server, 1),
        "default: from the start, everything up to 100"
    );
}

#[test]
fn a_read_with_a_bad_parameter_or_of_an_unknown_stream_is_refused() {
    let (_dir, server, http) = server_with_stream(2);
    for (uri, expected) in [
        ("/v1/streams/s/events?limit=0", "invalid"),
        ("/v1/streams/s/events?limit=1001", "invalid"),
        ("/v1/streams/s/events?after=minus", "invalid"),
        ("/v1/streams/s/events?partition=2", "invalid_partition"),
        ("/v1/streams/s/events?partiton=1", "invalid"),
    ] {
        assert_error(&get(&http, &server, uri), 400, expected);
    }
    assert_error(
        &get(&http, &server, "/v1/streams/nope/events"),
        404,
        "stream_not_found",
    );
}

#[test]
fn queries_filter_order_and_page_with_cursors_across_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &ServerOptions::default());
    let http = agent();
    let created = post(
        &http,
        &server,
        "/v1/streams",
        &json!({"name": "q", "partition_count": 3}),
    );
    assert_eq!(created.0, 201);
    // Event i: partition i % 3, sequence i / 3 + 1.
    let events: Vec<Value> = (0..30)
        .map(|i| {
            json!({
                "id": format!("e{i}"),
                "partition": i % 3,
                "type": if i % 2 == 0 { "even" } else { "odd" },
                "payload": {"n": i, "deep": {"x": i % 4}},
                "metadata": if i % 10 == 0 { json!({"correlation_id": "c-10"}) } else { json!({}) },
            })
        })
        .collect();
    let (status, _) = post(
        &http,
        &server,
        "/v1/streams/q/events/batch",
        &json!({ "events": events }),
    );
    assert_eq!(status, 201);

    // Everything, default order (sequence asc, ties by partition asc).
    let (status, all) = post(&http, &server, "/v1/streams/q/query", &json!({}));
    assert_eq!(status, 200, "{all}");
    let ids = strings(&all, "events", "id");
    let expected: Vec<String> = (0..30).map(|i| format!("e{i}")).collect();
    assert_eq!(ids, expected);
    assert_eq!(all["next_cursor"], Value::Null);

    // where + order desc + cursor paging: never skips, never repeats.
    let filter = json!({
        "where": {"n": {"$gte": 10}, "type": "even"},
        "order_by": [{"field": "sequence", "dir": "desc"}],
        "limit": 4,
    });
    let mut expected: Vec<usize> = (10..30).filter(|i| i % 2 == 0).collect();
    expected.sort_by_key(|i| (std::cmp::Reverse(i / 3 + 1), i % 3));
    let expected: Vec<String> = expected.iter().map(|i| format!("e{i}")).collect();
    let mut seen = Vec::new();
    let mut body = filter.clone();
    let mut pages = 0;
    loop {
        let (status, page) = post(&http, &server, "/v1/streams/q/query", &body);
        assert_eq!(status, 200, "{page}");
        pages += 1;
        seen.extend(strings(&page, "events", "id"));
        match page["next_cursor"].as_str() {
            Some(cursor) => body["cursor"] = json!(cursor),
            None => break,
        }
        assert!(pages < 10, "the cursor never ends");
    }
    assert_eq!(seen, expected);
    assert_eq!(pages, 3, "10 matches in pages of 4");

    // Operators, lineage keys, nested paths and sequence bounds.
    let cases = [
        (json!({"where": {"n": {"$in": [1, 2, 3]}}}), vec![1, 2, 3]),
        (json!({"where": {"n": {"$lt": 2}}}), vec![0, 1]),
        (
            json!({"where": {"correlation_id": "c-10"}}),
            vec![0, 10, 20],
        ),
        (
            json!({"where": {"payload.deep.x": 3, "n": {"$lte": 11}}}),
            vec![3, 7, 11],
        ),
        (json!({"where": {"missing": {"$exists": true}}}), vec![]),
        (
            json!({"where": {"partition": 2, "n": {"$gt": 20}}}),
            vec![23, 26, 29],
        ),
        (
            json!({"after_sequence": 7, "until_sequence": 9}),
            vec![21, 22, 23, 24, 25, 26],
        ),
    ];
    for (query, matches) in cases {
        let (status, page) = post(&http, &server, "/v1/streams/q/query", &query);
        assert_eq!(status, 200, "{query}: {page}");
        let expected: Vec<String> = matches.iter().map(|i| format!("e{i}")).collect();
        assert_eq!(strings(&page, "events", "id"), expected, "{query}");
    }

    // Refusals: unknown operator, malformed cursor, bad order, bad limit.
    for query in [
        json!({"where": {"n": {"$regex": "1"}}}),
        json!({"where": [1]}),
        json!({"cursor": "garbage!"}),
        json!({"cursor": ""}),
        json!({"order_by": [{"field": "type"}]}),
        json!({"order_by": [{"field": "sequence", "dir": "sideways"}]}),
        json!({"limit": 0}),
        json!({"limit": 1001}),
        json!({"from": "not a time"}),
        json!({"sort": "sequence"}),
    ] {
        let a = post(&http, &server, "/v1/streams/q/query", &query);
        assert_error(&a, 400, "invalid");
    }
    assert_error(
        &post(&http, &server, "/v1/streams/nope/query", &json!({})),
        404,
        "stream_not_found",
    );
    // A query never touches group state: there is still no group.
    let (_, groups) = get(&http, &server, "/v1/streams/q/groups");
    assert_eq!(groups, json!({"groups": []}));
}

/// A server with a 4096-byte body limit, stream `s` and its group `g`.
fn server_with_a_body_limit() -> (tempfile::TempDir, Server, Agent) {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions {
        args: vec!["--body-limit".into(), "4096".into()],
        ..ServerOptions::default()
    };
    let server = Server::start(dir.path(), &options);
    let http = agent();
    support::stream(&http, &server, "s", 1);
    let group = post(
        &http,
        &server,
        "/v1/streams/s/groups",
        &json!({"name": "g"}),
    );
    assert_eq!(group.0, 201);
    (dir, server, http)
}

/// Asserts that the server's metrics hold each of `lines`.
fn assert_metrics(http: &Agent, server: &Server, lines: &[&str]) {
    let mut metrics = http.get(server.url("/metrics")).call().expect("metrics");
    assert_eq!(metrics.status(), 200);
    let text = metrics.body_mut().read_to_string().unwrap();
    for line in lines {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}

#[test]
fn malformed_bodies_and_wrong_content_types_are_json_errors_and_the_server_keeps_serving() {
    let (_dir, server, http) = server_with_a_body_limit();
    let json_ct = Some("application/json");

    // Garbage JSON, wrong JSON types, an empty body where one is required.
    let cases: [BadRequest<'_>; 11] = [
        ("/v1/streams", json_ct, b"{\"name\":", 400, "invalid"),
        ("/v1/streams", json_ct, b"not json at all", 400, "invalid"),
        ("/v1/streams", json_ct, b"{\"name\": 5}", 400, "invalid"),
        ("/v1/streams", json_ct, b"[\"s2\"]", 400, "invalid"),
        ("/v1/streams", json_ct, b"", 400, "invalid"),
        (
            "/v1/streams",
            json_ct,
            b"{\"name\": \"x\", \"partition_count\": \"two\"}",
            400,
            "invalid",
        ),
        (
            "/v1/streams/s/events",
            json_ct,
            b"{\"payload\": \"text\"}",
            400,
            "invalid",
        ),
        (
            "/v1/streams/s/groups/g/fetch",
            json_ct,
            b"{\"limit\": \"ten\"}",
            400,
            "invalid",
        ),
        (
            "/v1/streams/s/groups/g/fetch",
            json_ct,
            b"{\"limit\"",
            400,
            "invalid",
        ),
        // Wrong or missing content type.
        (
            "/v1/streams",
            Some("text/plain"),
            b"{\"name\": \"x\"}",
            415,
            "unsupported_media_type",
        ),
        (
            "/v1/streams",
            None,
            b"{\"name\": \"x\"}",
            415,
            "unsupported_media_type",
        ),
    ];
    for (path, content_type, body, status, expected) in cases {
        let a = post_raw(&http, &server, path, content_type, body);
        assert_error(&a, status, expected);
        // The server still answers right after each bad request.
        let (status, _) = get(&http, &server, "/v1/streams/s");
        assert_eq!(
            status,
            200,
            "after {path} {}",
            String::from_utf8_lossy(body)
        );
    }
    let form = post_raw(
        &http,
        &server,
        "/v1/streams/s/groups/g/fetch",
        Some("application/x-www-form-urlencoded"),
        b"limit=1",
    );
    assert_error(&form, 415, "unsupported_media_type");

    // Still serving, and everything above was counted.
    let again = post(&http, &server, "/v1/streams", &json!({"name": "after"}));
    assert_eq!(again.0, 201, "{}", again.1);
    assert_metrics(
        &http,
        &server,
        &[
            "rheo_http_requests_total{method=\"POST\",route=\"/v1/streams\",status=\"400\"} 6",
            "rheo_http_requests_total{method=\"POST\",route=\"/v1/streams\",status=\"415\"} 2",
            "rheo_http_requests_total{method=\"POST\",route=\"/v1/streams\",status=\"201\"} 2",
        ],
    );
}

#[test]
fn a_body_over_the_limit_is_refused_with_413_and_nothing_is_stored() {
    let (_dir, server, http) = server_with_a_body_limit();
    // Over the body limit (4096 bytes here): 413, nothing stored.
    let big = json!({"id": "big", "payload": {"blob": "x".repeat(20_000)}});
    let too_large = post(&http, &server, "/v1/streams/s/events", &big);
    assert_error(&too_large, 413, "payload_too_large");
    let spaces = post_raw(
        &http,
        &server,
        "/v1/streams/s/groups/g/fetch",
        Some("application/json"),
        " ".repeat(10_000).as_bytes(),
    );
    assert_error(&spaces, 413, "payload_too_large");
    let (_, stream) = get(&http, &server, "/v1/streams/s");
    assert_eq!(stream["partitions"]["0"]["high_watermark"], 0);
    let small = post(
        &http,
        &server,
        "/v1/streams/s/events",
        &json!({"payload": {"a": 1}}),
    );
    assert_eq!(small.0, 201, "a body under the limit still works");
    assert_metrics(
        &http,
        &server,
        &[
            "rheo_http_requests_total{method=\"POST\",route=\"/v1/streams/{stream}/events\",status=\"413\"} 1",
        ],
    );
}

#[test]
fn unknown_routes_are_404_and_wrong_methods_405_as_json_errors() {
    let (_dir, server, http) = server_with_a_body_limit();
    // Unknown routes: 404 JSON.
    for path in [
        "/nope",
        "/v1",
        "/v1/nope",
        "/v1/streams/s/unknown",
        "/v2/streams",
    ] {
        assert_error(&get(&http, &server, path), 404, "not_found");
    }
    assert_error(
        &post(&http, &server, "/v1/streams/s/groups/g/explode", &json!({})),
        404,
        "not_found",
    );

    // Known paths, wrong methods: 405 JSON.
    assert_error(
        &delete(&http, &server, "/v1/streams"),
        405,
        "method_not_allowed",
    );
    assert_error(
        &answer(http.put(server.url("/v1/streams/s")).send_empty()),
        405,
        "method_not_allowed",
    );
    assert_error(
        &get(&http, &server, "/v1/streams/s/groups/g/ack"),
        405,
        "method_not_allowed",
    );
    assert_error(
        &delete(&http, &server, "/v1/streams/s/events"),
        405,
        "method_not_allowed",
    );
    assert_error(
        &post_empty(&http, &server, "/healthz"),
        405,
        "method_not_allowed",
    );
}

#[test]
fn by_default_the_test_clock_routes_are_absent_and_an_authorization_header_is_ignored() {
    let (_dir, server, http) = server_with_a_body_limit();
    // Without --test-clock the clock routes do not exist.
    assert_error(&get(&http, &server, "/v1/test/clock"), 404, "not_found");
    assert_error(
        &post(
            &http,
            &server,
            "/v1/test/clock",
            &json!({"advance_ms": 1000}),
        ),
        404,
        "not_found",
    );

    // Without --auth-token no header is needed, and any header is ignored.
    let any = answer(
        http.get(server.url("/v1/streams"))
            .header("Authorization", "Bearer whatever")
            .call(),
    );
    assert_eq!(any.0, 200);
}

#[test]
fn probes_and_metrics_answer_without_a_test_clock() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &ServerOptions::default());
    let http = agent();
    assert_eq!(
        get(&http, &server, "/healthz"),
        (200, json!({"status": "ok"}))
    );
    assert_eq!(
        get(&http, &server, "/readyz"),
        (200, json!({"status": "ready", "backend": "sqlite"}))
    );
    assert_eq!(
        post(&http, &server, "/v1/streams", &json!({"name": "m"})).0,
        201
    );
    assert_error(
        &get(&http, &server, "/v1/streams/missing"),
        404,
        "stream_not_found",
    );
    let mut metrics = http.get(server.url("/metrics")).call().expect("metrics");
    assert_eq!(metrics.status(), 200);
    let content_type = metrics
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = metrics.body_mut().read_to_string().unwrap();
    for line in [
        "rheo_http_requests_total{method=\"GET\",route=\"/healthz\",status=\"200\"} 1",
        "rheo_http_requests_total{method=\"POST\",route=\"/v1/streams\",status=\"201\"} 1",
        "rheo_http_requests_total{method=\"GET\",route=\"/v1/streams/{stream}\",status=\"404\"} 1",
        "rheo_http_backend_errors_total{route=\"/v1/streams/{stream}\",code=\"stream_not_found\"} 1",
        "rheo_backend_operation_duration_seconds_count{backend=\"sqlite\",op=\"create_stream\"} 1",
        "# TYPE rheo_http_request_duration_seconds histogram",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    let (status, doc) = get(&http, &server, "/v1/openapi.json");
    assert_eq!(status, 200);
    assert!(doc["paths"]["/v1/handlers/{handler}/module"]["put"].is_object());
}

#[test]
fn with_an_auth_token_v1_needs_the_bearer_and_health_stays_open() {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions {
        auth_token: Some("s3cret-token".into()),
        test_clock: true,
        ..ServerOptions::default()
    };
    let server = Server::start(dir.path(), &options);
    let http = agent();
    let with = |value: &str| {
        answer(
            http.get(server.url("/v1/streams"))
                .header("Authorization", value)
                .call(),
        )
    };

    // No header: 401 JSON with a Bearer challenge.
    let mut response = http
        .get(server.url("/v1/streams"))
        .call()
        .expect("a response");
    assert_eq!(response.status(), 401);
    let challenge = response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert_eq!(challenge, "Bearer");
    let body: Value = response.body_mut().read_json().expect("a JSON error");
    assert_eq!(code(&body), "unauthorized");

    // Wrong tokens or schemes: 401 too (the server never answers 403).
    for wrong in [
        "Bearer nope",
        "Bearer s3cret-token2",
        "Bearer s3cret-toke",
        "Basic s3cret-token",
        "s3cret-token",
        "Bearer ",
    ] {
        assert_error(&with(wrong), 401, "unauthorized");
    }
    // Every /v1 route is guarded, unknown ones and the test clock included,
    // and a refused write changes nothing.
    assert_error(&get(&http, &server, "/v1/nope"), 401, "unauthorized");
    assert_error(&get(&http, &server, "/v1/test/clock"), 401, "unauthorized");
    assert_error(
        &post(&http, &server, "/v1/streams", &json!({"name": "sneaky"})),
        401,
        "unauthorized",
    );

    // The right token works (scheme case-insensitive).
    let (status, list) = with("Bearer s3cret-token");
    assert_eq!((status, list), (200, json!({"streams": []})));
    let created = answer(
        http.post(server.url("/v1/streams"))
            .header("Authorization", "bearer s3cret-token")
            .send_json(json!({"name": "guarded"})),
    );
    assert_eq!(created.0, 201, "{}", created.1);
    let (_, list) = with("Bearer s3cret-token");
    assert_eq!(strings(&list, "streams", "name"), ["guarded"]);
    let clock = answer(
        http.get(server.url("/v1/test/clock"))
            .header("Authorization", "Bearer s3cret-token")
            .call(),
    );
    assert_eq!(clock.0, 200);

    // Probes and metrics stay open.
    assert_eq!(get(&http, &server, "/healthz").0, 200);
    assert_eq!(get(&http, &server, "/readyz").0, 200);
    let metrics = http.get(server.url("/metrics")).call().expect("metrics");
    assert_eq!(metrics.status(), 200);
}
