//! The consumer-group routes (`docs/groups.md`) against the real `rheo serve` on
//! SQLite with `--test-clock`: groups, lag, fetch (with long polls), ack,
//! nack, reject, renew, batch settle, the fencing story, the poison guard,
//! replay, reset, dead letters and redrive. Each test starts its own server
//! in its own directory. Expiry is reached by moving the server's clock over
//! `POST /v1/test/clock`, never by sleeping.

use crate::support;

use std::time::{Duration, Instant};

use rheo_e2e::{Server, ServerOptions, agent};
use serde_json::{Value, json};
use support::{
    assert_error, get, get_with_token, lease_ref, post, post_empty, post_with_token, stream,
    strings, wait_for_in_flight,
};
use ureq::Agent;

/// Where every test sets the server's clock first.
const T0: &str = "2026-01-01T00:00:00.000Z";

/// A server on a frozen clock set to [`T0`].
fn start(dir: &std::path::Path) -> Server {
    let server = Server::start(
        dir,
        &ServerOptions {
            test_clock: true,
            ..ServerOptions::default()
        },
    );
    let (status, now) = post(&agent(), &server, "/v1/test/clock", &json!({"set": T0}));
    assert_eq!((status, now), (200, json!({"now": T0})));
    server
}

/// A folder, a server in it (see [`start`]) and an HTTP agent; the folder
/// outlives the server.
fn fresh() -> (tempfile::TempDir, Server, Agent) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    (dir, server, agent())
}

/// Moves the server's clock forward.
fn advance(http: &Agent, server: &Server, ms: u64) -> Value {
    let (status, now) = post(http, server, "/v1/test/clock", &json!({"advance_ms": ms}));
    assert_eq!(status, 200, "{now}");
    now
}

/// Appends one event; returns it.
fn append(http: &Agent, server: &Server, stream: &str, event: Value) -> Value {
    let (status, body) = post(
        http,
        server,
        &format!("/v1/streams/{stream}/events"),
        &event,
    );
    assert_eq!(status, 201, "{body}");
    body
}

/// Creates a group with `options` (merged with its name).
fn group(http: &Agent, server: &Server, stream: &str, name: &str, options: Value) -> Value {
    let mut body = json!({ "name": name });
    for (k, v) in options.as_object().cloned().unwrap_or_default() {
        body[k] = v;
    }
    let (status, created) = post(http, server, &format!("/v1/streams/{stream}/groups"), &body);
    assert_eq!(status, 201, "{created}");
    created
}

/// `POST …/fetch`; asserts 200 and returns the leases.
fn fetch(http: &Agent, server: &Server, path: &str, body: Value) -> Vec<Value> {
    let (status, answer) = post(http, server, &format!("{path}/fetch"), &body);
    assert_eq!(status, 200, "{answer}");
    answer["leases"].as_array().cloned().unwrap_or_default()
}

/// The `event_id`s of leases.
fn ids(leases: &[Value]) -> Vec<&str> {
    leases
        .iter()
        .map(|l| l["event_id"].as_str().unwrap_or_default())
        .collect()
}

/// Acks every lease; asserts each ack is accepted.
fn ack_all(http: &Agent, server: &Server, path: &str, leases: &[Value]) {
    for lease in leases {
        let (status, body) = post(
            http,
            server,
            &format!("{path}/ack"),
            &lease_ref(lease, &json!({})),
        );
        assert_eq!((status, body), (200, json!({"ok": true})));
    }
}

/// Fetches everything claimable and acks it; returns the ids.
fn consume_all(http: &Agent, server: &Server, path: &str) -> Vec<String> {
    let leases = fetch(http, server, path, json!({"limit": 1000}));
    ack_all(http, server, path, &leases);
    ids(&leases).into_iter().map(str::to_owned).collect()
}

/// Stream `s` (two partitions) with three events in partition 0 and two in
/// partition 1.
fn two_partition_stream(http: &Agent, server: &Server) {
    stream(http, server, "s", 2);
    for p in [0, 0, 0, 1, 1] {
        append(http, server, "s", json!({"partition": p}));
    }
}

/// Group `a` on stream `s`: three attempts, two backoffs, and partition 0
/// started after its second event.
fn group_a(http: &Agent, server: &Server) -> Value {
    group(
        http,
        server,
        "s",
        "a",
        json!({"max_attempts": 3, "retry_backoff_ms": [100, 1000], "start_after": {"0": 2}}),
    )
}

#[test]
fn a_group_is_created_with_default_or_given_options() {
    let (_dir, server, http) = fresh();
    two_partition_stream(&http, &server);

    let b = group(&http, &server, "s", "b", json!({}));
    assert_eq!(
        b,
        json!({"stream": "s", "name": "b", "max_attempts": 5, "retry_backoff_ms": [], "ordering": "none", "on_exhausted": "dead_letter", "flow": {}, "created_at": T0})
    );
    let a = group_a(&http, &server);
    assert_eq!(
        (a["max_attempts"].clone(), a["retry_backoff_ms"].clone()),
        (json!(3), json!([100, 1000]))
    );
}

#[test]
fn creating_a_group_refuses_duplicates_unknown_streams_and_bad_options() {
    let (_dir, server, http) = fresh();
    two_partition_stream(&http, &server);
    group_a(&http, &server);

    let dup = post(
        &http,
        &server,
        "/v1/streams/s/groups",
        &json!({"name": "a"}),
    );
    assert_error(&dup, 409, "already_exists");
    let nope = post(
        &http,
        &server,
        "/v1/streams/nope/groups",
        &json!({"name": "a"}),
    );
    assert_error(&nope, 404, "stream_not_found");
    for (body, expected) in [
        (json!({"name": "h", "max_attempts": 0}), "invalid"),
        (
            json!({"name": "h", "start_after": {"5": 1}}),
            "invalid_partition",
        ),
        (json!({"name": "h", "start_after": "1"}), "invalid"),
        (
            json!({"name": "h", "start_after": 1, "start_at": T0}),
            "invalid",
        ),
        (json!({"name": "bad name"}), "invalid"),
        (json!({"nam": "h"}), "invalid"),
    ] {
        let refused = post(&http, &server, "/v1/streams/s/groups", &body);
        assert_error(&refused, 400, expected);
    }
}

#[test]
fn groups_are_listed_sorted_and_inspected_with_their_settings_and_cursors() {
    let (_dir, server, http) = fresh();
    two_partition_stream(&http, &server);
    group(&http, &server, "s", "b", json!({}));
    group_a(&http, &server);

    // The list is sorted; unknown streams are 404.
    let (status, list) = get(&http, &server, "/v1/streams/s/groups");
    assert_eq!(status, 200);
    assert_eq!(strings(&list, "groups", "name"), ["a", "b"]);
    assert_error(
        &get(&http, &server, "/v1/streams/nope/groups"),
        404,
        "stream_not_found",
    );

    // Group info: the start point is the frontier and the cursor.
    let (status, info) = get(&http, &server, "/v1/streams/s/groups/a");
    assert_eq!(status, 200, "{info}");
    assert_eq!(
        (info["stream"].clone(), info["group"].clone()),
        (json!("s"), json!("a"))
    );
    assert_eq!(info["max_attempts"], 3);
    assert_eq!(info["retry_backoff_ms"], json!([100, 1000]));
    assert_eq!(
        (info["inflight"].clone(), info["dead_letters"].clone()),
        (json!(0), json!(0))
    );
    assert_eq!(info["cursors"], json!({"0": 3, "1": 1}));
    assert_eq!(info["lag"]["lag"], 3);
    assert_error(
        &get(&http, &server, "/v1/streams/s/groups/nope"),
        404,
        "group_not_found",
    );
    assert_error(
        &get(&http, &server, "/v1/streams/nope/groups/nope"),
        404,
        "stream_not_found",
    );
}

#[test]
fn lag_is_reported_for_all_partitions_or_selected_ones() {
    let (_dir, server, http) = fresh();
    two_partition_stream(&http, &server);
    group_a(&http, &server);

    let (status, lag) = get(&http, &server, "/v1/streams/s/groups/a/lag");
    assert_eq!(status, 200, "{lag}");
    assert_eq!(
        lag["partitions"],
        json!({
            "0": {"frontier": 2, "high_watermark": 3, "lag": 1},
            "1": {"frontier": 0, "high_watermark": 2, "lag": 2},
        })
    );
    assert_eq!(
        (
            lag["lag"].clone(),
            lag["pending"].clone(),
            lag["inflight"].clone(),
            lag["waiting_retry"].clone()
        ),
        (json!(3), json!(3), json!(0), json!(0))
    );
    assert_eq!(lag["oldest_unacked_age_ms"], 0, "the clock has not moved");
    let (_, one) = get(&http, &server, "/v1/streams/s/groups/a/lag?partitions=1");
    assert_eq!(
        one["partitions"],
        json!({"1": {"frontier": 0, "high_watermark": 2, "lag": 2}})
    );
    assert_eq!(one["lag"], 2);
    assert_error(
        &get(&http, &server, "/v1/streams/s/groups/a/lag?partitions=5"),
        400,
        "invalid_partition",
    );
    assert_error(
        &get(&http, &server, "/v1/streams/s/groups/a/lag?partitions=one"),
        400,
        "invalid",
    );
    assert_error(
        &get(&http, &server, "/v1/streams/s/groups/nope/lag"),
        404,
        "group_not_found",
    );
}

#[test]
fn a_group_started_at_a_time_counts_only_later_events_and_lag_ages_with_the_clock() {
    let (_dir, server, http) = fresh();
    two_partition_stream(&http, &server);
    group(&http, &server, "s", "b", json!({}));

    advance(&http, &server, 1000);
    let late = group(
        &http,
        &server,
        "s",
        "late",
        json!({"start_at": "2026-01-01T00:00:01Z"}),
    );
    assert_eq!(late["name"], "late");
    let (_, lag) = get(&http, &server, "/v1/streams/s/groups/late/lag");
    assert_eq!(lag["lag"], 0, "{lag}");
    append(&http, &server, "s", json!({"id": "new", "partition": 1}));
    let leases = fetch(&http, &server, "/v1/streams/s/groups/late", json!({}));
    assert_eq!(ids(&leases), ["new"]);
    // The group from the start counts all six; the oldest is a second old.
    let (_, lag) = get(&http, &server, "/v1/streams/s/groups/b/lag");
    assert_eq!(
        (lag["lag"].clone(), lag["oldest_unacked_age_ms"].clone()),
        (json!(6), json!(1000)),
        "{lag}"
    );
}

/// Stream `s` (one partition) with an event `e{i}` (payload `{"i": i}`) for
/// each `i` of `events`, then group `g` on it; returns the group's path.
fn one_partition_group(
    http: &Agent,
    server: &Server,
    events: std::ops::RangeInclusive<u32>,
) -> &'static str {
    stream(http, server, "s", 1);
    for i in events {
        append(
            http,
            server,
            "s",
            json!({"id": format!("e{i}"), "payload": {"i": i}}),
        );
    }
    group(http, server, "s", "g", json!({}));
    "/v1/streams/s/groups/g"
}

#[test]
fn fetch_refuses_bad_options_and_unknown_groups_and_no_partitions_select_nothing() {
    let (_dir, server, http) = fresh();
    let g = one_partition_group(&http, &server, 1..=1);

    for (body, expected) in [
        (json!({"limit": 0}), "invalid"),
        (json!({"limit": 1001}), "invalid"),
        (json!({"lease_ms": 0}), "invalid"),
        (json!({"wait_ms": 30_001}), "invalid"),
        (json!({"partitions": [1]}), "invalid_partition"),
        (json!({"consumer_id": ""}), "invalid"),
        (json!({"limit": "ten"}), "invalid"),
    ] {
        assert_error(
            &post(&http, &server, &format!("{g}/fetch"), &body),
            400,
            expected,
        );
    }
    assert_error(
        &post(
            &http,
            &server,
            "/v1/streams/s/groups/nope/fetch",
            &json!({}),
        ),
        404,
        "group_not_found",
    );
    assert_error(
        &post(
            &http,
            &server,
            "/v1/streams/nope/groups/g/fetch",
            &json!({}),
        ),
        404,
        "stream_not_found",
    );
    assert!(
        fetch(&http, &server, g, json!({"partitions": []})).is_empty(),
        "[] selects nothing"
    );
}

#[test]
fn a_lease_carries_its_consumer_attempt_expiry_and_the_full_event() {
    let (_dir, server, http) = fresh();
    let g = one_partition_group(&http, &server, 1..=1);

    let e1 = fetch(
        &http,
        &server,
        g,
        json!({"limit": 1, "consumer_id": "w-1", "lease_ms": 5000}),
    )
    .remove(0);
    assert_eq!(
        (
            e1["stream"].clone(),
            e1["group"].clone(),
            e1["event_id"].clone()
        ),
        (json!("s"), json!("g"), json!("e1"))
    );
    assert_eq!(
        (e1["consumer_id"].clone(), e1["attempt"].clone()),
        (json!("w-1"), json!(1))
    );
    assert_eq!(e1["leased_at"], T0);
    assert_eq!(e1["expires_at"], "2026-01-01T00:00:05.000Z");
    assert!(e1["lease_id"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(
        (e1["event"]["id"].clone(), e1["event"]["payload"].clone()),
        (json!("e1"), json!({"i": 1}))
    );
}

#[test]
fn an_ack_is_fenced_by_the_lease_and_its_receipt() {
    let (_dir, server, http) = fresh();
    let g = one_partition_group(&http, &server, 1..=2);
    let e1 = fetch(&http, &server, g, json!({"limit": 1})).remove(0);

    // A malformed body and a wrong receipt are refused.
    assert_error(
        &post(
            &http,
            &server,
            &format!("{g}/ack"),
            &json!({"event_id": "e1"}),
        ),
        400,
        "invalid",
    );
    let wrong_receipt = lease_ref(&e1, &json!({"receipt": "not-it"}));
    assert_error(
        &post(&http, &server, &format!("{g}/ack"), &wrong_receipt),
        409,
        "receipt_mismatch",
    );
    // The holder's ack is taken once; a second one and a forged one are stale.
    let (status, ok) = post(
        &http,
        &server,
        &format!("{g}/ack"),
        &lease_ref(&e1, &json!({})),
    );
    assert_eq!((status, ok), (200, json!({"ok": true})));
    assert_error(
        &post(
            &http,
            &server,
            &format!("{g}/ack"),
            &lease_ref(&e1, &json!({})),
        ),
        409,
        "stale_lease",
    );
    let forged = json!({"event_id": "e2", "lease_id": "forged"});
    assert_error(
        &post(&http, &server, &format!("{g}/ack"), &forged),
        409,
        "stale_lease",
    );
    assert_error(
        &post(
            &http,
            &server,
            "/v1/streams/s/groups/nope/ack",
            &lease_ref(&e1, &json!({})),
        ),
        404,
        "group_not_found",
    );
}

#[test]
fn a_nack_with_a_delay_holds_the_event_back_until_the_clock_passes_it() {
    let (_dir, server, http) = fresh();
    let g = one_partition_group(&http, &server, 2..=3);

    let e2 = fetch(&http, &server, g, json!({"limit": 1})).remove(0);
    assert_eq!(e2["event_id"], "e2");
    assert_eq!(
        e2["expires_at"], "2026-01-01T00:00:30.000Z",
        "default lease"
    );
    let too_long = lease_ref(&e2, &json!({"delay_ms": 86_400_001}));
    assert_error(
        &post(&http, &server, &format!("{g}/nack"), &too_long),
        400,
        "invalid",
    );
    let nack = lease_ref(&e2, &json!({"reason": "busy", "delay_ms": 1000}));
    let (status, ok) = post(&http, &server, &format!("{g}/nack"), &nack);
    assert_eq!((status, ok), (200, json!({"ok": true})));
    assert_error(
        &post(&http, &server, &format!("{g}/nack"), &nack),
        409,
        "stale_lease",
    );
    let (_, lag) = get(&http, &server, &format!("{g}/lag"));
    assert_eq!(lag["waiting_retry"], 1, "{lag}");
    let e3 = fetch(&http, &server, g, json!({"limit": 1})).remove(0);
    assert_eq!(e3["event_id"], "e3", "e2 is not due yet");

    // e2's delay ends: it comes back with attempt 2.
    advance(&http, &server, 1000);
    let (_, lag) = get(&http, &server, &format!("{g}/lag"));
    assert_eq!(
        (lag["waiting_retry"].clone(), lag["inflight"].clone()),
        (json!(0), json!(1)),
        "{lag}"
    );
    let again = fetch(&http, &server, g, json!({"limit": 1}));
    assert_eq!(
        (again[0]["event_id"].clone(), again[0]["attempt"].clone()),
        (json!("e2"), json!(2))
    );
    ack_all(&http, &server, g, &again);
}

#[test]
fn a_renew_moves_the_expiry_from_now_and_keeps_the_lease_id() {
    let (_dir, server, http) = fresh();
    let g = one_partition_group(&http, &server, 3..=3);
    let e3 = fetch(&http, &server, g, json!({"limit": 1, "lease_ms": 1000})).remove(0);

    advance(&http, &server, 500);
    let renew = lease_ref(&e3, &json!({"lease_ms": 2000}));
    let (status, renewed) = post(&http, &server, &format!("{g}/renew"), &renew);
    assert_eq!(status, 200, "{renewed}");
    assert_eq!(renewed["expires_at"], "2026-01-01T00:00:02.500Z");
    assert_eq!(renewed["lease_id"], e3["lease_id"]);
    assert_eq!(renewed["event"]["id"], "e3");
    let zero = lease_ref(&e3, &json!({"lease_ms": 0}));
    assert_error(
        &post(&http, &server, &format!("{g}/renew"), &zero),
        400,
        "invalid",
    );
}

#[test]
fn a_reject_dead_letters_the_event_with_its_reason_and_leaves_the_lease_stale() {
    let (_dir, server, http) = fresh();
    let g = one_partition_group(&http, &server, 3..=3);
    let e3 = fetch(&http, &server, g, json!({"limit": 1, "lease_ms": 1000})).remove(0);

    let with_delay = lease_ref(&e3, &json!({"delay_ms": 5}));
    assert_error(
        &post(&http, &server, &format!("{g}/reject"), &with_delay),
        400,
        "invalid",
    );
    let reject = lease_ref(&e3, &json!({"reason": "malformed"}));
    let (status, ok) = post(&http, &server, &format!("{g}/reject"), &reject);
    assert_eq!((status, ok), (200, json!({"ok": true})));
    assert_error(
        &post(&http, &server, &format!("{g}/reject"), &reject),
        409,
        "stale_lease",
    );
    let renew = lease_ref(&e3, &json!({"lease_ms": 2000}));
    assert_error(
        &post(&http, &server, &format!("{g}/renew"), &renew),
        409,
        "stale_lease",
    );
    let (_, dead) = get(&http, &server, &format!("{g}/dead-letters"));
    assert_eq!(strings(&dead, "dead_letters", "event_id"), ["e3"]);
    assert_eq!(dead["dead_letters"][0]["reason"], "malformed");
    let (_, info) = get(&http, &server, g);
    assert_eq!(info["lag"]["lag"], 0, "{info}");
    assert_eq!(
        (info["dead_letters"].clone(), info["inflight"].clone()),
        (json!(1), json!(0))
    );
}

#[test]
fn a_batch_settle_gives_each_operation_its_own_result() {
    let (_dir, server, http) = fresh();
    let g = one_partition_group(&http, &server, 4..=6);
    let leases = fetch(&http, &server, g, json!({"limit": 3}));
    assert_eq!(ids(&leases), ["e4", "e5", "e6"]);
    let op = |op: &str, lease: &Value, extra: Value| {
        let mut item = lease_ref(lease, &extra);
        item["op"] = json!(op);
        item
    };

    // A malformed item or an unknown operation refuses the whole batch.
    let malformed = json!({"settlements": [op("ack", &leases[0], json!({"reason": "x"}))]});
    assert_error(
        &post(&http, &server, &format!("{g}/settle"), &malformed),
        400,
        "invalid",
    );
    let unknown_op = json!({"settlements": [op("explode", &leases[0], json!({}))]});
    assert_error(
        &post(&http, &server, &format!("{g}/settle"), &unknown_op),
        400,
        "invalid",
    );

    let mut forged = op("ack", &leases[1], json!({}));
    forged["lease_id"] = json!("forged");
    forged["receipt"] = Value::Null;
    let body = json!({"settlements": [
        op("ack", &leases[0], json!({})),
        forged,
        op("nack", &leases[2], json!({"reason": "later", "delay_ms": 10})),
    ]});
    let (status, settled) = post(&http, &server, &format!("{g}/settle"), &body);
    assert_eq!(status, 200, "{settled}");
    let results = settled["results"].as_array().unwrap();
    assert_eq!(results[0], json!({"event_id": "e4", "ok": true}));
    assert_eq!(results[1]["event_id"], "e5");
    assert_eq!(results[1]["ok"], false);
    assert_eq!(results[1]["error"]["code"], "stale_lease");
    assert_eq!(results[2], json!({"event_id": "e6", "ok": true}));
    // The refused item changed nothing: e5 is still leased and can be acked.
    ack_all(&http, &server, g, &leases[1..2]);
    advance(&http, &server, 10);
    let e6 = fetch(&http, &server, g, json!({}));
    assert_eq!((ids(&e6), e6[0]["attempt"].clone()), (vec!["e6"], json!(2)));
    ack_all(&http, &server, g, &e6);

    let (_, info) = get(&http, &server, g);
    assert_eq!(info["lag"]["lag"], 0, "{info}");
    assert_eq!(
        (info["dead_letters"].clone(), info["inflight"].clone()),
        (json!(0), json!(0))
    );
}

/// Stream `f` (one partition) and group `g` on it with two attempts at
/// most; returns the group's path.
fn two_attempt_group(http: &Agent, server: &Server) -> &'static str {
    stream(http, server, "f", 1);
    group(http, server, "f", "g", json!({"max_attempts": 2}));
    "/v1/streams/f/groups/g"
}

#[test]
fn an_expired_lease_goes_to_the_next_consumer_and_fences_the_old_holder() {
    let (_dir, server, http) = fresh();
    let g = two_attempt_group(&http, &server);

    // Consumer a leases x; b finds nothing while the lease runs.
    append(&http, &server, "f", json!({"id": "x"}));
    let first = fetch(
        &http,
        &server,
        g,
        json!({"consumer_id": "a", "lease_ms": 1000}),
    )
    .remove(0);
    assert_eq!(
        (first["event_id"].clone(), first["attempt"].clone()),
        (json!("x"), json!(1))
    );
    assert!(fetch(&http, &server, g, json!({"consumer_id": "b"})).is_empty());
    advance(&http, &server, 999);
    assert!(
        fetch(&http, &server, g, json!({"consumer_id": "b"})).is_empty(),
        "not expired yet"
    );

    // Past the expiry, b gets it again with attempt 2 and a new lease id.
    let now = advance(&http, &server, 1);
    assert_eq!(now["now"], "2026-01-01T00:00:01.000Z");
    let (status, clock) = get(&http, &server, "/v1/test/clock");
    assert_eq!((status, clock), (200, now));
    let second = fetch(
        &http,
        &server,
        g,
        json!({"consumer_id": "b", "lease_ms": 1000}),
    )
    .remove(0);
    assert_eq!(
        (second["event_id"].clone(), second["attempt"].clone()),
        (json!("x"), json!(2))
    );
    assert_eq!(second["consumer_id"], "b");
    assert_ne!(second["lease_id"], first["lease_id"]);

    // a's stale lease is refused for every operation; b's works.
    for op in ["ack", "nack", "reject", "renew"] {
        let refused = post(
            &http,
            &server,
            &format!("{g}/{op}"),
            &lease_ref(&first, &json!({})),
        );
        assert_error(&refused, 409, "stale_lease");
    }
    let (status, ok) = post(
        &http,
        &server,
        &format!("{g}/ack"),
        &lease_ref(&second, &json!({})),
    );
    assert_eq!((status, ok), (200, json!({"ok": true})));
    let (_, lag) = get(&http, &server, &format!("{g}/lag"));
    assert_eq!(lag["lag"], 0);
}

#[test]
fn an_expired_lease_nobody_reclaimed_can_still_be_acked() {
    let (_dir, server, http) = fresh();
    let g = two_attempt_group(&http, &server);

    append(&http, &server, "f", json!({"id": "late-ack"}));
    let lease = fetch(&http, &server, g, json!({"lease_ms": 1000})).remove(0);
    advance(&http, &server, 5000);
    let (status, _) = post(
        &http,
        &server,
        &format!("{g}/ack"),
        &lease_ref(&lease, &json!({})),
    );
    assert_eq!(status, 200);
}

/// `GET {g}/leases`, with `query` after a `?` if given; asserts 200 and
/// returns the page.
fn leases(http: &Agent, server: &Server, g: &str, query: &str) -> Value {
    let path = match query {
        "" => format!("{g}/leases"),
        query => format!("{g}/leases?{query}"),
    };
    let (status, page) = get(http, server, &path);
    assert_eq!(status, 200, "{page}");
    page
}

/// `(event_id, consumer_id, attempt, expired)` of each lease of a page.
fn held(page: &Value) -> Vec<(String, String, u64, bool)> {
    (page["leases"].as_array().unwrap().iter())
        .map(|l| {
            (
                l["event_id"].as_str().unwrap().to_owned(),
                l["consumer_id"].as_str().unwrap().to_owned(),
                l["attempt"].as_u64().unwrap(),
                l["expired"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn leases_list_what_is_out_a_page_at_a_time_and_mark_the_expired() {
    let (_dir, server, http) = fresh();
    let g = one_partition_group(&http, &server, 1..=5);
    let page = leases(&http, &server, g, "");
    assert_eq!(page, json!({"now": T0, "leases": [], "next": null}));

    // Three of five out: exactly those, with holder, attempt, age, expiry.
    let out = fetch(
        &http,
        &server,
        g,
        json!({"limit": 3, "consumer_id": "w-1", "lease_ms": 5000}),
    );
    advance(&http, &server, 1000);
    let page = leases(&http, &server, g, "");
    assert_eq!(page["now"], "2026-01-01T00:00:01.000Z");
    assert_eq!(page["next"], Value::Null);
    let first = &page["leases"][0];
    assert_eq!(
        first,
        &json!({
            "lease_id": out[0]["lease_id"], "event_id": "e1", "partition": 0, "sequence": 1,
            "consumer_id": "w-1", "attempt": 1,
            "leased_at": T0, "expires_at": "2026-01-01T00:00:05.000Z",
            "age_ms": 1000, "expires_in_ms": 4000, "expired": false,
        })
    );
    let w1 = |id: &str| (id.to_owned(), "w-1".to_owned(), 1, false);
    assert_eq!(held(&page), [w1("e1"), w1("e2"), w1("e3")]);
    let (_, info) = get(&http, &server, g);
    assert_eq!(info["inflight"], 3, "the ones group info counts");

    // An ack takes one off; pages of one walk the rest.
    let (status, _) = post(
        &http,
        &server,
        &format!("{g}/ack"),
        &lease_ref(&out[0], &json!({})),
    );
    assert_eq!(status, 200);
    let one = leases(&http, &server, g, "limit=1");
    assert_eq!(
        (held(&one), one["next"].clone()),
        (vec![w1("e2")], json!("0:2"))
    );
    let two = leases(&http, &server, g, "limit=1&after=0:2");
    assert_eq!(
        (held(&two), two["next"].clone()),
        (vec![w1("e3")], json!(null))
    );

    // Expired, still out (its holder may settle it), until a fetch takes it.
    advance(&http, &server, 4000);
    let page = leases(&http, &server, g, "");
    let expired = |id: &str| (id.to_owned(), "w-1".to_owned(), 1, true);
    assert_eq!(held(&page), [expired("e2"), expired("e3")]);
    assert_eq!(page["leases"][0]["expires_in_ms"], 0);
    let again = fetch(&http, &server, g, json!({"limit": 1, "consumer_id": "w-2"}));
    assert_eq!(again[0]["event_id"], "e2");
    let page = leases(&http, &server, g, "");
    assert_eq!(
        held(&page),
        [("e2".into(), "w-2".into(), 2, false), expired("e3")]
    );
    assert_ne!(page["leases"][0]["lease_id"], out[1]["lease_id"]);
}

#[test]
fn leases_refuse_bad_pages_and_unknown_groups() {
    let (_dir, server, http) = fresh();
    let g = one_partition_group(&http, &server, 1..=1);
    for query in [
        "limit=0",
        "limit=1001",
        "limit=x",
        "after=7",
        "after=0:x",
        "nope=1",
    ] {
        let answer = get(&http, &server, &format!("{g}/leases?{query}"));
        assert_error(&answer, 400, "invalid");
    }
    assert_eq!(
        leases(&http, &server, g, "limit=1000&after=0:0")["leases"],
        json!([])
    );
    let group_gone = get(&http, &server, "/v1/streams/s/groups/nope/leases");
    assert_error(&group_gone, 404, "group_not_found");
    let stream_gone = get(&http, &server, "/v1/streams/nope/groups/g/leases");
    assert_error(&stream_gone, 404, "stream_not_found");
}

#[test]
fn a_read_only_token_may_list_leases() {
    let dir = tempfile::tempdir().unwrap();
    let (token, read) = ("leases-e2e-write", "leases-e2e-read");
    let server = Server::start(dir.path(), &ServerOptions::with_read_token(token, read));
    let http = agent();
    let post_as = |path: &str, body: Value| post_with_token(&http, &server, token, path, &body);
    let (status, body) = post_as("/v1/streams", json!({"name": "s", "partition_count": 1}));
    assert_eq!(status, 201, "{body}");
    let (status, body) = post_as("/v1/streams/s/groups", json!({"name": "g"}));
    assert_eq!(status, 201, "{body}");
    let (status, body) = post_as("/v1/streams/s/events", json!({"id": "e1"}));
    assert_eq!(status, 201, "{body}");
    let (status, body) = post_as(
        "/v1/streams/s/groups/g/fetch",
        json!({"consumer_id": "w-1"}),
    );
    assert_eq!(status, 200, "{body}");

    let path = "/v1/streams/s/groups/g/leases";
    let read_get = http
        .get(server.url(path))
        .header("Authorization", &format!("Bearer {read}"));
    let (status, page) = rheo_e2e::answer(read_get.call());
    assert_eq!(status, 200, "{page}");
    assert_eq!(held(&page), [("e1".into(), "w-1".into(), 1, false)]);
    let (status, _) = rheo_e2e::answer(http.get(server.url(path)).call());
    assert_eq!(status, 401, "a token is needed");
}

#[test]
fn the_poison_guard_dead_letters_an_event_whose_attempts_expired_or_were_nacked() {
    let (_dir, server, http) = fresh();
    let g = two_attempt_group(&http, &server);

    // max_attempts used up by expiries: dead-lettered instead of claimed.
    append(&http, &server, "f", json!({"id": "poison"}));
    let one = fetch(&http, &server, g, json!({"lease_ms": 1000}));
    assert_eq!(one[0]["attempt"], 1);
    advance(&http, &server, 1000);
    let two = fetch(&http, &server, g, json!({"lease_ms": 1000}));
    assert_eq!(
        (ids(&two), two[0]["attempt"].clone()),
        (vec!["poison"], json!(2))
    );
    advance(&http, &server, 1000);
    assert!(
        fetch(&http, &server, g, json!({})).is_empty(),
        "the poison guard"
    );
    let stale = post(
        &http,
        &server,
        &format!("{g}/ack"),
        &lease_ref(&two[0], &json!({})),
    );
    assert_error(&stale, 409, "stale_lease");

    // max_attempts used up by nacks: the last nack dead-letters.
    append(&http, &server, "f", json!({"id": "failing"}));
    for attempt in 1..=2 {
        let lease = fetch(&http, &server, g, json!({})).remove(0);
        assert_eq!(
            (lease["event_id"].clone(), lease["attempt"].clone()),
            (json!("failing"), json!(attempt))
        );
        let nack = lease_ref(&lease, &json!({"reason": "boom"}));
        assert_eq!(post(&http, &server, &format!("{g}/nack"), &nack).0, 200);
    }
    assert!(fetch(&http, &server, g, json!({})).is_empty());

    let (status, dead) = get(&http, &server, &format!("{g}/dead-letters"));
    assert_eq!(status, 200);
    let letters = dead["dead_letters"].as_array().unwrap();
    let summary: Vec<(&str, u64, &str)> = letters
        .iter()
        .map(|d| {
            (
                d["event_id"].as_str().unwrap(),
                d["attempt"].as_u64().unwrap(),
                d["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("poison", 2, "max_attempts_expired"),
            ("failing", 2, "max_attempts: boom")
        ]
    );
    let (_, info) = get(&http, &server, g);
    assert_eq!(
        (info["dead_letters"].clone(), info["lag"]["lag"].clone()),
        (json!(2), json!(0))
    );
}

#[test]
fn bad_test_clock_moves_are_refused_and_move_nothing() {
    let (_dir, server, http) = fresh();
    let now = advance(&http, &server, 8000);
    assert_eq!(now["now"], "2026-01-01T00:00:08.000Z");

    for body in [
        json!({"set": "noon"}),
        json!({"advance_ms": -5}),
        json!({"rewind_ms": 5}),
    ] {
        assert_error(
            &post(&http, &server, "/v1/test/clock", &body),
            400,
            "invalid",
        );
    }
    let (_, unchanged) = post_empty(&http, &server, "/v1/test/clock");
    assert_eq!(unchanged["now"], "2026-01-01T00:00:08.000Z");
}

#[test]
fn a_long_poll_returns_when_another_thread_appends_or_a_lease_expires() {
    let (_dir, server, http) = fresh();
    stream(&http, &server, "lp", 2);
    group(&http, &server, "lp", "g", json!({}));
    let fetch_url = server.url("/v1/streams/lp/groups/g/fetch");

    // Nothing to claim and no wait: an empty answer at once.
    assert!(fetch(&http, &server, "/v1/streams/lp/groups/g", json!({})).is_empty());

    // A waiting fetch is answered by an append from this thread.
    let started = Instant::now();
    let waiting = {
        let (http, url) = (http.clone(), fetch_url.clone());
        std::thread::spawn(move || {
            rheo_e2e::answer(http.post(&url).send_json(json!({"wait_ms": 30_000})))
        })
    };
    wait_for_in_flight(&http, &server, 2);
    append(&http, &server, "lp", json!({"id": "late", "partition": 1}));
    let (status, body) = waiting.join().expect("the long poll thread");
    assert_eq!(status, 200, "{body}");
    assert_eq!(strings(&body, "leases", "event_id"), ["late"]);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "woken by the append, not by its deadline: {:?}",
        started.elapsed()
    );

    // A waiting fetch is answered when the clock passes a lease's expiry.
    append(&http, &server, "lp", json!({"id": "held"}));
    let held = fetch(
        &http,
        &server,
        "/v1/streams/lp/groups/g",
        json!({"lease_ms": 1000}),
    );
    assert_eq!(ids(&held), ["held"]);
    let waiting = {
        let (http, url) = (http.clone(), fetch_url.clone());
        std::thread::spawn(move || {
            rheo_e2e::answer(http.post(&url).send_json(json!({"wait_ms": 30_000})))
        })
    };
    wait_for_in_flight(&http, &server, 2);
    advance(&http, &server, 1000);
    let (status, body) = waiting.join().expect("the long poll thread");
    assert_eq!(status, 200, "{body}");
    assert_eq!(strings(&body, "leases", "event_id"), ["held"]);
    assert_eq!(body["leases"][0]["attempt"], 2);

    // A short wait with nothing to claim ends empty at its deadline.
    let started = Instant::now();
    let empty = fetch(
        &http,
        &server,
        "/v1/streams/lp/groups/g",
        json!({"wait_ms": 200, "partitions": [0]}),
    );
    assert!(empty.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(200), "it waited");
    // An empty partition selection answers at once, whatever the wait.
    let started = Instant::now();
    assert!(
        fetch(
            &http,
            &server,
            "/v1/streams/lp/groups/g",
            json!({"partitions": [], "wait_ms": 30_000})
        )
        .is_empty()
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Stream `r` (two partitions) with events `r1`..`r6` (payload `{"i": i}`):
/// r1, r3, r5 in partition 0 and r2, r4, r6 in partition 1 (sequences 1 to
/// 3), r5 and r6 a second after the others; then groups `g` and `other`.
/// Returns g's path; the clock is left at one second past [`T0`].
fn replay_stream(http: &Agent, server: &Server) -> &'static str {
    stream(http, server, "r", 2);
    for i in 1..=6 {
        if i == 5 {
            advance(http, server, 1000);
        }
        append(
            http,
            server,
            "r",
            json!({"id": format!("r{i}"), "partition": (i + 1) % 2, "payload": {"i": i}}),
        );
    }
    group(http, server, "r", "g", json!({}));
    group(http, server, "r", "other", json!({}));
    "/v1/streams/r/groups/g"
}

/// [`replay_stream`] with every event consumed by `g`.
fn consumed_replay_stream(http: &Agent, server: &Server) -> &'static str {
    let g = replay_stream(http, server);
    // Leases come sorted by (partition, sequence).
    assert_eq!(
        consume_all(http, server, g),
        ["r1", "r3", "r5", "r2", "r4", "r6"]
    );
    g
}

/// [`replay_stream`] with every event rejected by `g` (reason "nope"): six
/// dead letters.
fn dead_lettered_replay_stream(http: &Agent, server: &Server) -> &'static str {
    let g = replay_stream(http, server);
    let leases = fetch(http, server, g, json!({"limit": 100}));
    assert_eq!(leases.len(), 6);
    for lease in &leases {
        let body = lease_ref(lease, &json!({"reason": "nope"}));
        assert_eq!(post(http, server, &format!("{g}/reject"), &body).0, 200);
    }
    g
}

#[test]
fn replay_from_a_sequence_reopens_later_events_of_selected_partitions_and_keeps_attempts() {
    let (_dir, server, http) = fresh();
    let g = consumed_replay_stream(&http, &server);

    // from_sequence is exclusive.
    let (status, reopened) = post(
        &http,
        &server,
        &format!("{g}/replay"),
        &json!({"from_sequence": 1, "partitions": [0]}),
    );
    assert_eq!((status, reopened), (200, json!({"reopened": 2})));
    let (_, lag) = get(&http, &server, &format!("{g}/lag"));
    assert_eq!(lag["lag"], 2, "the frontier rewound: {lag}");
    let leases = fetch(&http, &server, g, json!({}));
    assert_eq!(ids(&leases), ["r3", "r5"]);
    assert_eq!(leases[0]["attempt"], 2);
    ack_all(&http, &server, g, &leases);
}

#[test]
fn replay_from_a_time_reopens_later_events_of_every_partition() {
    let (_dir, server, http) = fresh();
    let g = consumed_replay_stream(&http, &server);

    let (status, reopened) = post(
        &http,
        &server,
        &format!("{g}/replay"),
        &json!({"from": "2026-01-01T00:00:01Z"}),
    );
    assert_eq!((status, reopened), (200, json!({"reopened": 2})));
    assert_eq!(consume_all(&http, &server, g), ["r5", "r6"]);
}

#[test]
fn replay_by_query_reopens_its_matches_whatever_its_limit() {
    let (_dir, server, http) = fresh();
    let g = consumed_replay_stream(&http, &server);

    let (status, reopened) = post(
        &http,
        &server,
        &format!("{g}/replay"),
        &json!({"query": {"where": {"i": {"$in": [2, 4]}}, "limit": 1}}),
    );
    assert_eq!((status, reopened), (200, json!({"reopened": 2})));
    assert_eq!(consume_all(&http, &server, g), ["r2", "r4"]);
}

#[test]
fn replay_by_event_ids_makes_the_current_holder_stale_and_spares_other_groups() {
    let (_dir, server, http) = fresh();
    let g = consumed_replay_stream(&http, &server);
    let replay = |body: Value| post(&http, &server, &format!("{g}/replay"), &body);

    let (_, reopened) = replay(json!({"event_ids": ["r1"]}));
    assert_eq!(reopened, json!({"reopened": 1}));
    let held = fetch(&http, &server, g, json!({}));
    assert_eq!(ids(&held), ["r1"]);
    let (_, reopened) = replay(json!({"event_ids": ["r1"]}));
    assert_eq!(reopened, json!({"reopened": 1}));
    let stale = post(
        &http,
        &server,
        &format!("{g}/ack"),
        &lease_ref(&held[0], &json!({})),
    );
    assert_error(&stale, 409, "stale_lease");
    assert_eq!(consume_all(&http, &server, g), ["r1"]);

    // Replay never touches another group.
    let (_, other) = get(&http, &server, "/v1/streams/r/groups/other/lag");
    assert_eq!(other["pending"], 6);
}

#[test]
fn replay_refuses_bad_options_and_unknown_groups() {
    let (_dir, server, http) = fresh();
    let g = replay_stream(&http, &server);

    for body in [
        json!({}),
        json!({"from_sequence": 0, "event_ids": ["r1"]}),
        json!({"from": "2026-01-01T00:00:00Z", "query": {}}),
        json!({"event_ids": ["r1"], "partitions": [0]}),
        json!({"partitions": [0]}),
        json!({"from_seq": 3}),
        json!({"from_sequence": "three"}),
    ] {
        assert_error(
            &post(&http, &server, &format!("{g}/replay"), &body),
            400,
            "invalid_replay_opts",
        );
    }
    assert_error(
        &post(
            &http,
            &server,
            "/v1/streams/r/groups/nope/replay",
            &json!({"from_sequence": 0}),
        ),
        404,
        "group_not_found",
    );
}

#[test]
fn reset_requires_confirmation_then_a_known_stream_and_partitions() {
    let (_dir, server, http) = fresh();
    let g = replay_stream(&http, &server);
    let reset = |body: Value| post(&http, &server, &format!("{g}/reset"), &body);

    for body in [
        json!({}),
        json!({"confirm": false}),
        json!({"confirm": "true"}),
        json!({"confirm": 1}),
        json!({"start_after": 1}),
    ] {
        assert_error(&reset(body), 400, "confirm_required");
    }
    assert_error(
        &post(
            &http,
            &server,
            "/v1/streams/nope/groups/g/reset",
            &json!({}),
        ),
        400,
        "confirm_required",
    );
    assert_error(
        &post(
            &http,
            &server,
            "/v1/streams/nope/groups/g/reset",
            &json!({"confirm": true}),
        ),
        404,
        "stream_not_found",
    );
    assert_error(
        &reset(json!({"confirm": true, "partitions": [5]})),
        400,
        "invalid_partition",
    );
}

#[test]
fn a_reset_changes_the_ordering_of_every_partition_and_names_a_bad_one() {
    let (_dir, server, http) = fresh();
    let g = replay_stream(&http, &server);
    let reset = |body: Value| post(&http, &server, &format!("{g}/reset"), &body);

    let refused = reset(json!({"confirm": true, "ordering": "key", "partitions": [0]}));
    assert_error(&refused, 400, "invalid");
    assert!(
        refused.1["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ordering"),
        "{}",
        refused.1
    );
    assert_error(
        &reset(json!({"confirm": true, "ordering": "keys"})),
        400,
        "invalid",
    );
    let (_, info) = get(&http, &server, g);
    assert_eq!(info["ordering"], "none", "{info}");
    let (status, ok) = reset(json!({"confirm": true, "ordering": "key"}));
    assert_eq!((status, ok), (200, json!({"ok": true})));
    let (_, info) = get(&http, &server, g);
    assert_eq!(info["ordering"], "key", "{info}");
    assert_eq!(reset(json!({"confirm": true, "ordering": "none"})).0, 200);
}

#[test]
fn a_reset_moves_the_start_point_and_attempts_start_again() {
    let (_dir, server, http) = fresh();
    let g = consumed_replay_stream(&http, &server);
    let reset = |body: Value| post(&http, &server, &format!("{g}/reset"), &body);
    // A replay of everything: each event's last attempt was its second.
    let (status, reopened) = post(
        &http,
        &server,
        &format!("{g}/replay"),
        &json!({"from_sequence": 0}),
    );
    assert_eq!((status, reopened), (200, json!({"reopened": 6})));
    consume_all(&http, &server, g);

    let (status, ok) = reset(json!({"confirm": true, "start_after": 2}));
    assert_eq!((status, ok), (200, json!({"ok": true})));
    let (_, lag) = get(&http, &server, &format!("{g}/lag"));
    assert_eq!(lag["lag"], 2, "{lag}");
    let leases = fetch(&http, &server, g, json!({}));
    assert_eq!(ids(&leases), ["r5", "r6"]);
    assert_eq!(leases[0]["attempt"], 1);
    ack_all(&http, &server, g, &leases);

    // Back to the beginning: all six again.
    assert_eq!(reset(json!({"confirm": true})).0, 200);
    let leases = fetch(&http, &server, g, json!({"limit": 100}));
    assert_eq!(leases.len(), 6);
}

#[test]
fn dead_letters_are_listed_in_sequence_order_and_paged_by_event_id() {
    let (_dir, server, http) = fresh();
    let g = dead_lettered_replay_stream(&http, &server);

    let (status, page) = get(&http, &server, &format!("{g}/dead-letters?limit=4"));
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        strings(&page, "dead_letters", "event_id"),
        ["r1", "r2", "r3", "r4"]
    );
    assert_eq!(page["next"], "r4");
    let first = &page["dead_letters"][0];
    assert_eq!(
        (
            first["partition"].clone(),
            first["sequence"].clone(),
            first["attempt"].clone(),
            first["reason"].clone()
        ),
        (json!(0), json!(1), json!(1), json!("nope"))
    );
    assert_eq!(first["dead_lettered_at"], "2026-01-01T00:00:01.000Z");
    assert_eq!(first["event"]["payload"], json!({"i": 1}));
    let (_, rest) = get(
        &http,
        &server,
        &format!("{g}/dead-letters?limit=4&after=r4"),
    );
    assert_eq!(strings(&rest, "dead_letters", "event_id"), ["r5", "r6"]);
    assert_eq!(rest["next"], Value::Null);
    assert_error(
        &get(&http, &server, &format!("{g}/dead-letters?after=zzz")),
        400,
        "cursor_not_found",
    );
    assert_error(
        &get(&http, &server, &format!("{g}/dead-letters?limit=0")),
        400,
        "invalid",
    );
    assert_error(
        &get(&http, &server, "/v1/streams/r/groups/nope/dead-letters"),
        404,
        "group_not_found",
    );
    let (_, other) = get(&http, &server, "/v1/streams/r/groups/other/dead-letters");
    assert_eq!(
        other["dead_letters"],
        json!([]),
        "other groups are unaffected"
    );
}

#[test]
fn a_redrive_by_ids_restarts_attempts_and_a_redrive_of_all_empties_the_dead_letters() {
    let (_dir, server, http) = fresh();
    let g = dead_lettered_replay_stream(&http, &server);
    let redrive = |body: Value| post(&http, &server, &format!("{g}/dead-letters/redrive"), &body);

    // By ids: attempt back to 0, so the next claim is attempt 1.
    let (status, redriven) = redrive(json!({"event_ids": ["r3"]}));
    assert_eq!((status, redriven), (200, json!({"redriven": 1})));
    let (_, info) = get(&http, &server, g);
    assert_eq!(
        (info["dead_letters"].clone(), info["lag"]["lag"].clone()),
        (json!(5), json!(2)),
        "{info}"
    );
    let leases = fetch(&http, &server, g, json!({}));
    assert_eq!(
        (ids(&leases), leases[0]["attempt"].clone()),
        (vec!["r3"], json!(1))
    );
    ack_all(&http, &server, g, &leases);

    // All of them.
    let (status, redriven) = redrive(json!({"all": true}));
    assert_eq!((status, redriven), (200, json!({"redriven": 5})));
    assert_eq!(
        consume_all(&http, &server, g),
        ["r1", "r5", "r2", "r4", "r6"]
    );
    let (_, info) = get(&http, &server, g);
    assert_eq!(
        (info["dead_letters"].clone(), info["lag"]["lag"].clone()),
        (json!(0), json!(0)),
        "{info}"
    );
}

#[test]
fn a_redrive_refuses_bad_options_and_unknown_groups() {
    let (_dir, server, http) = fresh();
    let g = dead_lettered_replay_stream(&http, &server);

    for body in [
        json!({}),
        json!({"all": false}),
        json!({"all": true, "event_ids": []}),
    ] {
        assert_error(
            &post(&http, &server, &format!("{g}/dead-letters/redrive"), &body),
            400,
            "invalid",
        );
    }
    assert_error(
        &post(
            &http,
            &server,
            "/v1/streams/r/groups/nope/dead-letters/redrive",
            &json!({"all": true}),
        ),
        404,
        "group_not_found",
    );
}

#[test]
fn every_group_of_every_stream_comes_in_one_answer_as_each_group_reads() {
    let (_dir, server, http) = fresh();
    let (status, none) = get(&http, &server, "/v1/groups");
    assert_eq!((status, none), (200, json!({"groups": []})));

    two_partition_stream(&http, &server);
    group(&http, &server, "s", "b", json!({}));
    group_a(&http, &server);
    stream(&http, &server, "empty", 1);
    stream(&http, &server, "r", 1);
    group(&http, &server, "r", "c", json!({"ordering": "key"}));
    append(&http, &server, "r", json!({"id": "r1"}));
    append(&http, &server, "r", json!({"id": "r2"}));
    // One lease out, one dead letter: the figures the groups page shows.
    let leases = fetch(
        &http,
        &server,
        "/v1/streams/r/groups/c",
        json!({"limit": 2}),
    );
    assert_eq!(leases.len(), 2);
    let (status, body) = post(
        &http,
        &server,
        "/v1/streams/r/groups/c/reject",
        &lease_ref(&leases[0], &json!({"reason": "no"})),
    );
    assert_eq!(status, 200, "{body}");

    let (status, all) = get(&http, &server, "/v1/groups");
    assert_eq!(status, 200, "{all}");
    let names: Vec<(String, String)> = all["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["stream"].to_string(), g["group"].to_string()))
        .collect();
    assert_eq!(
        names,
        [("\"r\"", "\"c\""), ("\"s\"", "\"a\""), ("\"s\"", "\"b\"")]
            .map(|(s, g)| (s.to_owned(), g.to_owned()))
    );
    // Each exactly as its own route answers.
    for g in all["groups"].as_array().unwrap() {
        let path = format!(
            "/v1/streams/{}/groups/{}",
            g["stream"].as_str().unwrap(),
            g["group"].as_str().unwrap()
        );
        let (status, one) = get(&http, &server, &path);
        assert_eq!((status, &one), (200, g), "{path}");
    }
    let c = &all["groups"][0];
    assert_eq!(
        (
            c["inflight"].clone(),
            c["dead_letters"].clone(),
            c["lag"]["lag"].clone(),
            c["ordering"].clone()
        ),
        // The dead letter is settled: the frontier passed it.
        (json!(1), json!(1), json!(1), json!("key")),
        "{c}"
    );

    // A deleted group is gone from it.
    let (status, body) = support::delete(&http, &server, "/v1/streams/s/groups/b?confirm=true");
    assert_eq!(status, 200, "{body}");
    let (_, all) = get(&http, &server, "/v1/groups");
    assert_eq!(all["groups"].as_array().unwrap().len(), 2, "{all}");

    // In the document, a read.
    let (_, doc) = get(&http, &server, "/v1/openapi.json");
    let op = &doc["paths"]["/v1/groups"]["get"];
    assert_eq!(op["operationId"], "all_groups", "{op}");
    assert!(op["responses"]["403"].is_null(), "a read: {op}");
    assert_eq!(
        op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/AllGroupsBody"
    );
}

#[test]
fn the_read_token_lists_every_group_and_the_samples() {
    let dir = tempfile::tempdir().unwrap();
    let (token, read) = ("groups-write-token", "groups-read-token");
    let server = Server::start(dir.path(), &ServerOptions::with_read_token(token, read));
    let http = agent();
    let (status, body) = post_with_token(
        &http,
        &server,
        token,
        "/v1/streams",
        &json!({"name": "s", "partition_count": 1}),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = post_with_token(
        &http,
        &server,
        token,
        "/v1/streams/s/groups",
        &json!({"name": "g"}),
    );
    assert_eq!(status, 201, "{body}");
    for path in ["/v1/groups", "/v1/metrics/samples"] {
        assert_eq!(get(&http, &server, path).0, 401, "{path}");
        let (status, body) = get_with_token(&http, &server, read, path);
        assert_eq!(status, 200, "{path}: {body}");
    }
    let (_, all) = get_with_token(&http, &server, read, "/v1/groups");
    assert_eq!(all["groups"][0]["group"], "g", "{all}");
}

#[test]
fn the_samples_keep_the_last_minutes_of_each_group_one_a_second_at_most() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &ServerOptions {
            test_clock: true,
            args: vec!["--metrics-interval".into(), "100ms".into()],
            ..ServerOptions::default()
        },
    );
    let http = agent();
    let (status, _) = post(&http, &server, "/v1/test/clock", &json!({"set": T0}));
    assert_eq!(status, 200);
    stream(&http, &server, "s", 2);
    group(&http, &server, "s", "g", json!({}));
    stream(&http, &server, "other", 1);
    group(&http, &server, "other", "h", json!({}));
    for p in [0, 0, 1] {
        append(&http, &server, "s", json!({"partition": p}));
    }
    let samples = |query: &str| {
        let (status, body) = get(&http, &server, &format!("/v1/metrics/samples{query}"));
        assert_eq!(status, 200, "{body}");
        body
    };
    let series = |body: &Value, stream: &str, group: &str| -> Vec<Value> {
        body["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["stream"] == stream && g["group"] == group)
            .map(|g| g["samples"].as_array().unwrap().clone())
            .unwrap_or_default()
    };

    // The clock stands still: the sampler runs every 100 ms, and one point
    // a second is kept — so one point, whatever it saw first.
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        let body = samples("");
        let points = series(&body, "s", "g");
        if !points.is_empty() {
            break body;
        }
        assert!(Instant::now() < deadline, "no sample: {body}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(first["now"], T0, "{first}");
    assert_eq!(first["interval_ms"], 100, "{first}");
    assert_eq!(first["window_ms"], 300_000, "{first}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(series(&samples(""), "s", "g").len(), 1);

    // Two seconds later on the server's clock, the next round is kept: it
    // sees the events settled since.
    let leases = fetch(
        &http,
        &server,
        "/v1/streams/s/groups/g",
        json!({"limit": 3}),
    );
    ack_all(&http, &server, "/v1/streams/s/groups/g", &leases);
    advance(&http, &server, 2000);
    let deadline = Instant::now() + Duration::from_secs(30);
    let points = loop {
        let points = series(&samples(""), "s", "g");
        if points.len() == 2 {
            break points;
        }
        assert!(Instant::now() < deadline, "no second point: {points:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        points[1],
        json!({"at": "2026-01-01T00:00:02.000Z", "lag": 0, "settled": 3, "appended": 3})
    );

    // Narrowed to a stream, or to a group.
    let only = samples("?stream=other");
    assert_eq!(only["groups"].as_array().unwrap().len(), 1, "{only}");
    assert_eq!(only["groups"][0]["group"], "h");
    let only = samples("?stream=s&group=g");
    assert_eq!(series(&only, "s", "g").len(), 2, "{only}");
    assert_eq!(only["groups"].as_array().unwrap().len(), 1, "{only}");
    let none = samples("?handler=nobody");
    assert_eq!(
        (none["groups"].clone(), none["handlers"].clone()),
        (json!([]), json!([])),
        "{none}"
    );
    assert_error(
        &get(&http, &server, "/v1/metrics/samples?nope=1"),
        400,
        "invalid",
    );
}
