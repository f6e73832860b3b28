//! The example handlers in every guest language behave alike: the same
//! cases run against the Rust guests (`guests/`, embedded in `rheo`) and
//! their Python and JavaScript twins (`guests/python/examples/`,
//! `guests/js/examples/`), each set deployed to a fresh `rheo serve`
//! (SQLite, on the test clock) and driven over HTTP.
//!
//! The Python and JavaScript components are built by each language's
//! `guests/<language>/build.sh`, which does nothing when they are up to date
//! (`scripts/test` builds them first). Without the language's toolchain
//! (Python, Node) its tests skip and say why — unless `REQUIRE_GUESTS` (set
//! by CI) lists the language (`python`, `js`), in which case they fail.
//!
//! A Python component takes seconds to compile in the host, so each
//! language deploys each module once and every case reuses it; time moves
//! only through `POST /v1/test/clock`, never by sleeping.

use crate::support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use rheo_e2e::{Server, ServerOptions};
use serde_json::{Value, json};
use support::guests::{Guest, read_module};
use support::{deploy, eventually, get, handler, lag, post, stream, strings};
use ureq::Agent;

/// The test clock's start: 2026-01-01T00:00:00Z.
const T0: &str = "2026-01-01T00:00:00.000Z";
const T0_MS: u64 = 1_767_225_600_000;

/// How long handlers may take to settle what a case appended.
const SETTLE: Duration = Duration::from_secs(120);

/// The example handlers every language provides, by the name of their
/// `.wasm` file.
const EXAMPLES: [&str; 5] = ["batch", "echo", "flaky", "poison", "transform"];

#[test]
fn rust_examples_pass_the_shared_cases() {
    let modules = EXAMPLES
        .iter()
        .map(|name| {
            let bytes = rheo_example_guests::get(name)
                .unwrap_or_else(|| panic!("no embedded example guest {name}"));
            (*name, bytes.to_vec())
        })
        .collect();
    shared_cases("rust", &modules);
}

#[test]
fn python_examples_pass_the_shared_cases() {
    guest_examples_pass_the_shared_cases(Guest::Python);
}

#[test]
fn js_examples_pass_the_shared_cases() {
    guest_examples_pass_the_shared_cases(Guest::Js);
}

fn guest_examples_pass_the_shared_cases(language: Guest) {
    let Some(dir) = language.built() else { return };
    let modules = EXAMPLES
        .iter()
        .map(|name| (*name, read_module(dir, name)))
        .collect();
    shared_cases(language.name(), &modules);
}

/// The SDK from inside a real component (`guests/python/tests/sdk_check`):
/// what a handler sees, what becomes of exceptions and of values that are
/// not outcomes, the host functions, and the sandbox as Python meets it.
#[test]
fn python_sdk_in_a_component() {
    let cases = [
        "raise",
        "return_none",
        "return_text",
        "bad_delay",
        "append_list",
        "append_missing",
        "append_invalid",
        "append",
        "config",
        "now",
        "delivery",
        "log",
        "sandbox",
        "ack",
    ];
    let Some(check) = SdkCheck::run(Guest::Python, &cases) else {
        return;
    };
    assert_eq!(
        counters(
            &check.view,
            &["acked", "retried", "rejected", "trapped", "timed_out"]
        ),
        json!([2, 5, 7, 0, 0]),
        "exceptions and bad results are retries, never traps: {}",
        check.view
    );

    assert_eq!(check.reason("raise"), "max_attempts: ValueError: boom 0");
    assert_eq!(
        check.reason("return_none"),
        "max_attempts: rheo_handler: the handler returned None (NoneType), \
         not Ack(), Retry(reason) or Reject(reason)"
    );
    check.reason_starts_with(
        "return_text",
        "max_attempts: rheo_handler: the handler returned 'ack' (str)",
    );
    check.reason_starts_with(
        "bad_delay",
        "max_attempts: later (rheo_handler: delay_ms -5 is not",
    );
    assert_eq!(
        check.reason("append_list"),
        "max_attempts: TypeError: append: payload must be a dict, not list"
    );
    assert_eq!(check.reason("append_missing"), "stream_not_found||False");
    let invalid = check.reason("append_invalid");
    assert!(
        invalid.starts_with("invalid|")
            && invalid.contains("partition")
            && invalid.ends_with("|False"),
        "{invalid}"
    );
    assert_eq!(check.reason("config"), "'hi' None");
    assert_eq!(check.reason("sandbox"), "sandbox: sealed");
    check.assert_shared(&[
        "sdk-check info line",
        "sdk-check warn line",
        "sdk-check error line",
        "sdk-check stdout line",
        "handler raised on event c-raise (attempt 1)",
        "ValueError: boom 0",
    ]);
}

/// The JavaScript SDK from inside a real component
/// (`guests/js/tests/sdk_check`): the same checks as Python's, plus what is
/// JavaScript's own — thrown values that are not Errors, a Promise returned
/// by an async handler, delays out of u64's range or given as a BigInt, a
/// lone surrogate in a reason — each of which the bindings alone would turn
/// into a trap.
#[test]
fn js_sdk_in_a_component() {
    let cases = [
        "raise",
        "throw_text",
        "return_none",
        "return_text",
        "return_promise",
        "bad_delay",
        "big_delay",
        "bigint_delay",
        "append_list",
        "append_missing",
        "append_invalid",
        "append",
        "config",
        "now",
        "delivery",
        "log",
        "sandbox",
        "surrogate",
        "ack",
    ];
    let Some(check) = SdkCheck::run(Guest::Js, &cases) else {
        return;
    };
    assert_eq!(
        counters(
            &check.view,
            &["acked", "retried", "rejected", "trapped", "timed_out"]
        ),
        json!([2, 9, 8, 0, 0]),
        "exceptions and bad results are retries, never traps: {}",
        check.view
    );

    assert_eq!(check.reason("raise"), "max_attempts: RangeError: boom 0");
    assert_eq!(
        check.reason("throw_text"),
        "max_attempts: a thrown string: \"plain text\""
    );
    assert_eq!(
        check.reason("return_none"),
        "max_attempts: rheo-handler: the handler returned undefined (a missing return?), \
         not Ack(), Retry(reason) or Reject(reason)"
    );
    check.reason_starts_with(
        "return_text",
        "max_attempts: rheo-handler: the handler returned \"ack\" (string)",
    );
    check.reason_starts_with(
        "return_promise",
        "max_attempts: rheo-handler: the handler returned a Promise (an async function?)",
    );
    check.reason_starts_with(
        "bad_delay",
        "max_attempts: later (rheo-handler: delayMs -5 is not a whole number",
    );
    check.reason_starts_with(
        "big_delay",
        "max_attempts: much later (rheo-handler: delayMs 18446744073709552000 is not",
    );
    // A BigInt delay is taken as it is: no note, no trap.
    let (attempt, reason) = &check.reasons["c-bigint_delay"];
    assert_eq!((*attempt, reason.as_str()), (1, "max_attempts: bigint"));
    assert_eq!(
        check.reason("append_list"),
        "max_attempts: TypeError: append: payload must be an object, not array"
    );
    assert_eq!(check.reason("append_missing"), "stream_not_found||false");
    let invalid = check.reason("append_invalid");
    assert!(
        invalid.starts_with("invalid|")
            && invalid.contains("partition")
            && invalid.ends_with("|false"),
        "{invalid}"
    );
    assert_eq!(check.reason("config"), "\"hi\" null");
    assert_eq!(check.reason("sandbox"), "sandbox: sealed");
    assert_eq!(check.reason("surrogate"), "bad \u{fffd} byte");
    check.assert_shared(&[
        "sdk-check info line",
        "sdk-check warn line",
        "sdk-check error line",
        "sdk-check console line {\"n\":1}",
        "handler threw on event c-raise (attempt 1): RangeError: boom 0",
    ]);
}

/// A language's `tests/sdk_check` handler run once per case, in order, in a
/// group with one attempt (a retry is dead-lettered at once, with its
/// reason), with what it left behind.
struct SdkCheck {
    language: Guest,
    cases: Vec<String>,
    server: Server,
    http: Agent,
    _dir: tempfile::TempDir,
    /// The handler's view once every case was processed.
    view: Value,
    /// Dead letters: event id (`c-<case>`) → (attempt, reason).
    reasons: BTreeMap<String, (u64, String)>,
    started: Instant,
}

impl SdkCheck {
    /// Deploys `language`'s `sdk_check` and appends one event per case
    /// (`{"do": case, "n": index}`, id `c-<case>`); `None` when the
    /// language's guests are not available (see [`Guest::built`]).
    fn run(language: Guest, cases: &[&str]) -> Option<SdkCheck> {
        let module = read_module(language.built()?, "sdk_check");
        let (server, http, dir) = start_server();
        stream(&http, &server, "checks", 1);
        stream(&http, &server, "sdk-out", 1);
        let (status, body) = post(
            &http,
            &server,
            "/v1/streams/checks/groups",
            &json!({"name": "sdk", "max_attempts": 1}),
        );
        assert_eq!(status, 201, "{body}");
        let manifest = json!({
            "stream": "checks", "group": "sdk",
            "config": {"greeting": "hi"},
        });
        deploy_timed(
            &http,
            &server,
            language.name(),
            "sdk_check",
            &manifest,
            &module,
        );
        let events: Vec<Value> = cases
            .iter()
            .enumerate()
            .map(|(n, case)| {
                json!({
                    "id": format!("c-{case}"), "key": "k-7", "type": "check",
                    "payload": {"do": case, "n": n},
                    "metadata": {"correlation_id": "corr-1"},
                })
            })
            .collect();
        append_events(&http, &server, "checks", events);
        let started = Instant::now();
        let view = wait_processed(&http, &server, "sdk_check", ("checks", "sdk"), cases.len());
        let reasons = dead_letter_reasons(&http, &server, "checks", "sdk");
        Some(SdkCheck {
            language,
            cases: cases.iter().map(|c| (*c).to_owned()).collect(),
            server,
            http,
            _dir: dir,
            view,
            reasons,
            started,
        })
    }

    /// The dead-letter reason of `case`.
    fn reason(&self, case: &str) -> &str {
        self.reasons
            .get(&format!("c-{case}"))
            .map(|(_, reason)| reason.as_str())
            .unwrap_or_else(|| panic!("no dead letter for {case}: {:?}", self.reasons))
    }

    fn reason_starts_with(&self, case: &str, prefix: &str) {
        let reason = self.reason(case);
        assert!(reason.starts_with(prefix), "{case}: {reason:?}");
    }

    /// What every language's `sdk_check` answers alike: the delivery as
    /// the handler saw it, two appends with one id, the clock, and `log`
    /// lines (`log_lines`, in the language's words) in the server's log.
    fn assert_shared(&self, log_lines: &[&str]) {
        let (http, server) = (&self.http, &self.server);
        assert_eq!(self.reason("now"), T0_MS.to_string());

        // The delivery as the handler saw it, against the stored event.
        let seen: Value =
            serde_json::from_str(self.reason("delivery")).expect("the delivery as JSON");
        let stored = query(http, server, "checks")
            .into_iter()
            .find(|e| e["id"] == "c-delivery")
            .expect("the stored event");
        let n = self
            .cases
            .iter()
            .position(|c| c == "delivery")
            .expect("a delivery case");
        assert_eq!(seen["id"], json!("c-delivery"));
        assert_eq!(seen["stream"], json!("checks"));
        assert_eq!(seen["partition"], stored["partition"], "{stored}");
        assert_eq!(seen["sequence"], stored["sequence"], "{stored}");
        assert_eq!(seen["key"], json!("k-7"));
        assert_eq!(seen["type"], json!("check"));
        assert_eq!(seen["timestamp_ms"], json!(T0_MS));
        assert_eq!(seen["payload"], json!({"do": "delivery", "n": n}));
        assert_eq!(seen["metadata"], json!({"correlation_id": "corr-1"}));
        assert_eq!(seen["group"], json!("sdk"));
        assert_eq!(seen["attempt"], json!(1));
        assert!(
            seen["lease_id"].as_str().is_some_and(|l| !l.is_empty()),
            "{seen}"
        );

        // Two appends with one id: written once, the second a duplicate.
        let appended: Value =
            serde_json::from_str(self.reason("append")).expect("the refs as JSON");
        assert_eq!(
            appended,
            json!({"id": "c-append:out", "stream": "sdk-out", "partition": 0, "sequence": 1,
                   "duplicate": false, "again_duplicate": true, "again_sequence": 1})
        );
        let out = query(http, server, "sdk-out");
        assert_eq!(out.len(), 1, "{out:?}");
        let event = &out[0];
        assert_eq!(
            [&event["id"], &event["type"], &event["key"]],
            [&json!("c-append:out"), &json!("checked"), &json!("k-1")]
        );
        assert_eq!(
            event["payload"],
            json!({"from": "c-append", "text": "héllo ✓"})
        );
        assert_eq!(event["metadata"], json!({"correlation_id": "c-9"}));

        // Log lines and stdout reach the server's log; so does the
        // exception's trace.
        let log = server.log_text();
        for line in log_lines {
            assert!(log.contains(line), "{line:?} not in the server log:\n{log}");
        }
        eprintln!(
            "{}: the SDK checks passed in {:.1} s after the deploy",
            self.language.name(),
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// The SDK's own unit tests (`guests/python/tests/test_sdk.py`), on stub
/// bindings outside WebAssembly: bad JSON, outcome mapping, `append`'s
/// argument checks and error mapping.
#[test]
fn python_sdk_unit_tests() {
    if Guest::Python.built().is_none() {
        return;
    }
    let python_dir = Guest::Python.dir();
    let out = Command::new(python_dir.join(".venv/bin/python"))
        .args(["-m", "unittest", "discover", "-s"])
        .arg(python_dir.join("tests"))
        .current_dir(&python_dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run the venv's python");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the SDK's unit tests failed:\n{text}");
    assert!(text.contains("\nOK"), "{text}");
}

/// The JavaScript SDK's own unit tests (`guests/js/tests/sdk.test.js`), on
/// a fake host outside WebAssembly, with `node --test`.
#[test]
fn js_sdk_unit_tests() {
    if Guest::Js.built().is_none() {
        return;
    }
    let js_dir = Guest::Js.dir();
    let node = std::env::var("NODE").unwrap_or_else(|_| "node".into());
    let out = Command::new(node)
        .args(["--test", "tests/sdk.test.js"])
        .current_dir(&js_dir)
        .output()
        .expect("run node");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the SDK's unit tests failed:\n{text}");
    assert!(text.contains("\n# fail 0"), "{text}");
}

/// The cases every language's examples must pass, on one fresh server:
/// `modules` maps each name of [`EXAMPLES`] to its component.
fn shared_cases(language: &str, modules: &BTreeMap<&str, Vec<u8>>) {
    let (server, http, _dir) = start_server();
    let started = Instant::now();
    for (name, partitions) in [
        ("orders", 2),
        ("jobs", 1),
        ("mixed", 1),
        ("signups", 2),
        ("enriched", 1),
        ("broken-in", 1),
        ("tasks", 1),
    ] {
        stream(&http, &server, name, partitions);
    }
    // Two attempts, no backoff: the failing transform is redelivered once,
    // at once, then dead-lettered.
    let (status, body) = post(
        &http,
        &server,
        "/v1/streams/broken-in/groups",
        &json!({"name": "enrich", "max_attempts": 2}),
    );
    assert_eq!(status, 201, "{body}");
    // One attempt: a retry is dead-lettered at once, with its reason.
    let (status, body) = post(
        &http,
        &server,
        "/v1/streams/tasks/groups",
        &json!({"name": "batcher", "max_attempts": 1}),
    );
    assert_eq!(status, 201, "{body}");

    let deploys = [
        (
            "batch",
            "batch",
            json!({"stream": "tasks", "group": "batcher", "batch_size": 10, "max_demand": 20}),
        ),
        (
            "echo",
            "echo",
            json!({"stream": "orders", "group": "billing"}),
        ),
        (
            "flaky",
            "flaky",
            json!({"stream": "jobs", "group": "workers",
                   "config": {"retry_delay_ms": "60000"}}),
        ),
        (
            "poison",
            "poison",
            json!({"stream": "mixed", "group": "checker"}),
        ),
        (
            "transform",
            "transform",
            json!({"stream": "signups", "group": "enrich", "append_to": ["enriched"],
                   "config": {"target_stream": "enriched"}}),
        ),
        // The same module again (a compile-cache hit), aimed at a stream
        // that does not exist.
        (
            "transform-broken",
            "transform",
            json!({"stream": "broken-in", "group": "enrich",
                   "config": {"target_stream": "missing"}}),
        ),
    ];
    for (name, module, manifest) in &deploys {
        deploy_timed(&http, &server, language, name, manifest, &modules[module]);
    }

    echo_acks_everything(&http, &server);
    batch_settles_each_delivery_of_one_call(&http, &server);
    poison_dead_letters_the_marked_events(&http, &server);
    transform_derives_each_event_once(&http, &server);
    transform_retries_a_failed_append(&http, &server);
    // Last: it moves the clock, which the other cases do not expect.
    flaky_retries_after_its_delay_then_acks(&http, &server);
    eprintln!(
        "{language}: the shared cases passed in {:.1} s, deploys included",
        started.elapsed().as_secs_f64()
    );
}

fn echo_acks_everything(http: &Agent, server: &Server) {
    append_events(
        http,
        server,
        "orders",
        vec![
            json!({"id": "e-1", "key": "customer-1", "type": "order.placed",
                   "payload": {"total": 12.5, "items": ["a", "b"]},
                   "metadata": {"correlation_id": "c-1"}}),
            json!({"id": "e-2", "payload": {}}),
            json!({"id": "e-3", "payload": {"text": "héllo ✓ 😀", "nested": {"deep": [1, {"x": null}]}}}),
            json!({"id": "e-4", "payload": {"big": 123_456_789_012_345_678_u64, "neg": -1}}),
            json!({"id": "e-5", "partition": 1, "payload": {"n": 5}}),
        ],
    );
    let view = wait_settled(http, server, "echo", ("orders", "billing"), 5);
    assert_eq!(
        counters(&view, &["acked", "retried", "rejected", "trapped"]),
        json!([5, 0, 0, 0]),
        "{view}"
    );
    assert!(dead_letter_reasons(http, server, "orders", "billing").is_empty());
}

/// `handle-batch` (`docs/handlers.md#batches`): the nine events of one
/// append come in one call (a reason names the call's size), and each is
/// settled by its own outcome.
fn batch_settles_each_delivery_of_one_call(http: &Agent, server: &Server) {
    let events = (1..=9)
        .map(|i| {
            let action = ["ack", "retry", "reject"][i % 3];
            json!({"id": format!("b-{i}"), "payload": {"do": action}})
        })
        .collect();
    append_events(http, server, "tasks", events);
    let view = wait_processed(http, server, "batch", ("tasks", "batcher"), 9);
    assert_eq!(
        counters(&view, &["acked", "retried", "rejected", "trapped"]),
        json!([3, 3, 3, 0]),
        "{view}"
    );
    let dead = dead_letter_reasons(http, server, "tasks", "batcher");
    let expected: BTreeMap<String, (u64, String)> = (1..=9)
        .filter(|i| i % 3 != 0)
        .map(|i| {
            let reason = if i % 3 == 1 {
                "max_attempts: retry in a batch of 9"
            } else {
                "reject in a batch of 9"
            };
            (format!("b-{i}"), (1, reason.to_owned()))
        })
        .collect();
    assert_eq!(dead, expected);
}

fn poison_dead_letters_the_marked_events(http: &Agent, server: &Server) {
    append_events(
        http,
        server,
        "mixed",
        vec![
            json!({"id": "p-1", "payload": {"poison": true, "reason": "bad data"}}),
            json!({"id": "p-2", "payload": {"poison": true}}),
            json!({"id": "p-3", "payload": {"n": 3}}),
            json!({"id": "p-4", "payload": {"poison": "yes"}}),
            json!({"id": "p-5", "payload": {"poison": true, "reason": 7}}),
            json!({"id": "p-6", "payload": {"poison": false, "reason": "fine"}}),
        ],
    );
    let view = wait_settled(http, server, "poison", ("mixed", "checker"), 3);
    assert_eq!(
        counters(&view, &["acked", "retried", "rejected", "trapped"]),
        json!([3, 0, 3, 0]),
        "{view}"
    );
    let dead = dead_letter_reasons(http, server, "mixed", "checker");
    let expected: BTreeMap<String, (u64, String)> = [
        ("p-1", "bad data"),
        ("p-2", "poison event"),
        ("p-5", "poison event"),
    ]
    .into_iter()
    .map(|(id, reason)| (id.to_owned(), (1, reason.to_owned())))
    .collect();
    assert_eq!(dead, expected);
}

fn transform_derives_each_event_once(http: &Agent, server: &Server) {
    append_events(
        http,
        server,
        "signups",
        vec![
            json!({"id": "s-1", "type": "user.signed_up", "key": "user-1",
                   "payload": {"n": 1}, "metadata": {"correlation_id": "batch-1"}}),
            json!({"id": "s-2", "type": "user.signed_up", "key": "user-2",
                   "payload": {"n": 2, "source": "overwritten"},
                   "metadata": {"correlation_id": "batch-1", "other": true}}),
            json!({"id": "s-3", "payload": {"nested": {"a": [1, 2]}}}),
        ],
    );
    wait_settled(http, server, "transform", ("signups", "enrich"), 3);
    let expected = [
        json!({"id": "s-1:transformed", "type": "user.signed_up.transformed",
               "payload": {"n": 1, "source": "s-1"},
               "metadata": {"causation_id": "s-1", "correlation_id": "batch-1",
                            "transformed_at_ms": T0_MS}}),
        json!({"id": "s-2:transformed", "type": "user.signed_up.transformed",
               "payload": {"n": 2, "source": "s-2"},
               "metadata": {"causation_id": "s-2", "correlation_id": "batch-1",
                            "transformed_at_ms": T0_MS}}),
        json!({"id": "s-3:transformed", "type": "transformed",
               "payload": {"nested": {"a": [1, 2]}, "source": "s-3"},
               "metadata": {"causation_id": "s-3", "transformed_at_ms": T0_MS}}),
    ];
    let derived = |events: &[Value]| -> Vec<Value> {
        let mut shown: Vec<Value> = events
            .iter()
            .map(|e| json!({"id": e["id"], "type": e["type"], "payload": e["payload"], "metadata": e["metadata"]}))
            .collect();
        shown.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
        shown
    };
    let first = query(http, server, "enriched");
    assert_eq!(derived(&first), expected);

    // Deliver everything again: each append is answered as a duplicate, so
    // the derived stream is unchanged.
    let (status, body) = post(
        http,
        server,
        "/v1/streams/signups/groups/enrich/replay",
        &json!({"from_sequence": 0}),
    );
    assert_eq!((status, &body["reopened"]), (200, &json!(3)), "{body}");
    let view = wait_settled(http, server, "transform", ("signups", "enrich"), 6);
    assert_eq!(
        counters(&view, &["retried", "rejected", "trapped"]),
        json!([0, 0, 0]),
        "{view}"
    );
    let again = query(http, server, "enriched");
    assert_eq!(again, first, "a redelivered event is transformed once");
}

fn transform_retries_a_failed_append(http: &Agent, server: &Server) {
    append_events(
        http,
        server,
        "broken-in",
        vec![json!({"id": "b-1", "payload": {"n": 1}})],
    );
    let dead = eventually("b-1 dead-lettered", SETTLE, || {
        let dead = dead_letter_reasons(http, server, "broken-in", "enrich");
        (!dead.is_empty()).then_some(dead)
    });
    let (attempt, reason) = &dead["b-1"];
    assert_eq!(*attempt, 2, "retried once, then out of attempts");
    assert!(
        reason.starts_with("max_attempts: transform: append to missing failed: "),
        "{reason}"
    );
    let view = handler(http, server, "transform-broken");
    assert_eq!(
        counters(&view, &["acked", "retried", "rejected", "trapped"]),
        json!([0, 2, 0, 0]),
        "{view}"
    );
}

fn flaky_retries_after_its_delay_then_acks(http: &Agent, server: &Server) {
    let jobs = ("jobs", "workers");
    append_events(
        http,
        server,
        "jobs",
        vec![json!({"id": "j-1", "payload": {}})],
    );
    for attempt in 1..=2 {
        // Attempt `attempt` asked for 60 s: the delivery waits for the
        // clock, not for the backoff.
        eventually(&format!("flaky retried {attempt}"), SETTLE, || {
            let view = handler(http, server, "flaky");
            let waiting = lag(http, server, jobs.0, jobs.1)["waiting_retry"] == 1;
            (view["counters"]["retried"] == attempt && waiting).then_some(())
        });
        let view = handler(http, server, "flaky");
        assert_eq!(view["counters"]["acked"], json!(0), "{view}");
        let (status, now) = post(
            http,
            server,
            "/v1/test/clock",
            &json!({"advance_ms": 60_000}),
        );
        assert_eq!(status, 200, "{now}");
    }
    let view = wait_settled(http, server, "flaky", jobs, 1);
    assert_eq!(
        counters(
            &view,
            &["processed", "acked", "retried", "rejected", "trapped"]
        ),
        json!([3, 1, 2, 0, 0]),
        "acked on attempt 3: {view}"
    );
    assert!(dead_letter_reasons(http, server, "jobs", "workers").is_empty());
}

// --- Server helpers -----------------------------------------------------------

/// A fresh server on the test clock, set to [`T0`], and an agent patient
/// enough for deploys: a Python component compiles for seconds (longer in
/// a debug build, on a busy machine). The folder outlives the server.
fn start_server() -> (Server, Agent, tempfile::TempDir) {
    let started = Instant::now();
    rheo_e2e::rheo_binary();
    eprintln!(
        "the rheo binary is ready after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(
        dir.path(),
        &ServerOptions {
            test_clock: true,
            ..ServerOptions::default()
        },
    );
    let http: Agent = Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(600)))
        .build()
        .into();
    let (status, now) = post(&http, &server, "/v1/test/clock", &json!({"set": T0}));
    assert_eq!((status, now), (200, json!({"now": T0})));
    (server, http, dir)
}

/// Deploys `module` as handler `name`; asserts version 1 and prints how
/// long the deploy (a compile, for a new module) took.
fn deploy_timed(
    http: &Agent,
    server: &Server,
    language: &str,
    name: &str,
    manifest: &Value,
    module: &[u8],
) {
    let started = Instant::now();
    let (status, body) = deploy(http, server, name, manifest, module);
    assert_eq!(status, 201, "deploying {language} {name}: {body}");
    assert_eq!(body["version"], json!(1), "{body}");
    eprintln!(
        "{language}: deployed {name} ({} KiB) in {:.1} s",
        module.len() / 1024,
        started.elapsed().as_secs_f64()
    );
}

fn append_events(http: &Agent, server: &Server, stream: &str, events: Vec<Value>) {
    let count = events.len();
    let (status, body) = post(
        http,
        server,
        &format!("/v1/streams/{stream}/events/batch"),
        &json!({ "events": events }),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["events"].as_array().map(Vec::len), Some(count));
}

/// The handler's `counters` named by `names`, as a JSON array.
fn counters(view: &Value, names: &[&str]) -> Value {
    names.iter().map(|n| view["counters"][n].clone()).collect()
}

/// Waits until `name` has acked `acked` in total, holds nothing and its
/// group has no lag; returns the handler's view.
fn wait_settled(
    http: &Agent,
    server: &Server,
    name: &str,
    group: (&str, &str),
    acked: u64,
) -> Value {
    eventually(&format!("{name} acked {acked}, lag 0"), SETTLE, || {
        let view = handler(http, server, name);
        let done = view["counters"]["acked"] == acked
            && view["counters"]["inflight"] == 0
            && lag(http, server, group.0, group.1)["lag"] == 0;
        done.then_some(view)
    })
}

/// Waits until `name` has processed `count` deliveries, holds none and its
/// group has no lag (so every outcome is written, dead letters included).
fn wait_processed(
    http: &Agent,
    server: &Server,
    name: &str,
    group: (&str, &str),
    count: usize,
) -> Value {
    eventually(&format!("{name} processed {count}, lag 0"), SETTLE, || {
        let view = handler(http, server, name);
        let done = view["counters"]["processed"] == count
            && view["counters"]["inflight"] == 0
            && lag(http, server, group.0, group.1)["lag"] == 0;
        done.then_some(view)
    })
}

/// The group's dead letters: event id → (attempt, reason).
fn dead_letter_reasons(
    http: &Agent,
    server: &Server,
    stream: &str,
    group: &str,
) -> BTreeMap<String, (u64, String)> {
    let (status, body) = get(
        http,
        server,
        &format!("/v1/streams/{stream}/groups/{group}/dead-letters?limit=1000"),
    );
    assert_eq!(status, 200, "{body}");
    let ids = strings(&body, "dead_letters", "event_id");
    let reasons = strings(&body, "dead_letters", "reason");
    let attempts = body["dead_letters"]
        .as_array()
        .expect("dead letters")
        .iter()
        .map(|d| d["attempt"].as_u64().expect("attempt"));
    ids.into_iter().zip(attempts.zip(reasons)).collect()
}

/// Every event of `stream`, in order.
fn query(http: &Agent, server: &Server, stream: &str) -> Vec<Value> {
    let (status, page) = post(
        http,
        server,
        &format!("/v1/streams/{stream}/query"),
        &json!({"limit": 1000}),
    );
    assert_eq!(status, 200, "{page}");
    page["events"].as_array().expect("events").clone()
}
