//! Operating a real `rheo serve` (`docs/operations.md`): `/metrics` during
//! and after a handler run agrees with the API; JSON log lines of a guest
//! carry its delivery; delivery spans reach an OTLP collector.

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

use prometheus_parse::{Scrape, Value as Sample};
use rheo_e2e::{Server, ServerOptions, agent};
use serde_json::{Value, json};
use support::{append_batch, deploy, eventually, get, guest, handler, lag, post, stream};
use ureq::Agent;

/// `GET /metrics`, parsed as the Prometheus text format.
fn scrape(http: &Agent, server: &Server) -> Scrape {
    let mut response = http.get(server.url("/metrics")).call().expect("metrics");
    assert_eq!(response.status(), 200);
    let text = response.body_mut().read_to_string().expect("metrics text");
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (_, value) = line.rsplit_once(' ').expect("`series value`");
        assert!(
            value.parse::<f64>().is_ok() || value == "+Inf",
            "not a sample line: {line:?}"
        );
    }
    Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("a Prometheus exposition")
}

/// The value of series `name` with (at least) `labels`; a histogram's
/// count.
fn sample(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Sample::Counter(v) | Sample::Gauge(v) | Sample::Untyped(v) => *v,
            Sample::Histogram(b) => b.last().map_or(0.0, |b| b.count),
            Sample::Summary(_) => f64::NAN,
        })
}

fn start(dir: &std::path::Path, args: &[&str]) -> Server {
    Server::start(
        dir,
        &ServerOptions {
            backend: Some("memory://".into()),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            ..ServerOptions::default()
        },
    )
}

#[test]
fn metrics_during_and_after_a_handler_run_match_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &["--metrics-interval-ms", "100"]);
    let http = agent();
    stream(&http, &server, "orders", 3);
    let manifest = json!({"stream": "orders", "group": "billing", "concurrency": 4});
    let (status, body) = deploy(&http, &server, "gate", &manifest, &guest("poison"));
    assert_eq!(status, 201, "{body}");

    // 1,000 events, every 50th a poison one the guest rejects.
    let events: Vec<Value> = (0..1000)
        .map(|i| {
            let poison = i % 50 == 0;
            json!({"id": format!("e{i}"), "key": format!("k{i}"), "payload": {"poison": poison}})
        })
        .collect();
    let (status, body) = post(
        &http,
        &server,
        "/v1/streams/orders/events/batch",
        &json!({ "events": events }),
    );
    assert_eq!(status, 201, "{body}");

    // During the run: the exposition parses and the handler is there.
    let during = scrape(&http, &server);
    assert_eq!(
        sample(&during, "rheo_handler_version", &[("handler", "gate")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&during, "rheo_handler_running", &[("handler", "gate")]),
        Some(1.0)
    );

    eventually("the group drains", Duration::from_secs(60), || {
        (lag(&http, &server, "orders", "billing")["lag"] == 0).then_some(())
    });
    let api = handler(&http, &server, "gate");
    let counters = &api["counters"];
    assert_eq!(counters["processed"], 1000, "{api}");
    assert_eq!(counters["rejected"], 20, "{api}");
    let (status, info) = get(&http, &server, "/v1/streams/orders/groups/billing");
    assert_eq!(status, 200, "{info}");

    // Once the sampler has seen the drained group, every series agrees. A
    // sample from before the append shows lag 0 too (and no dead letters):
    // the drained group is the one with its 20 dead letters.
    let after = eventually(
        "the group series show lag 0 and 20 dead letters",
        Duration::from_secs(20),
        || {
            let s = scrape(&http, &server);
            let group = [("stream", "orders"), ("group", "billing")];
            let drained = sample(&s, "rheo_group_lag", &group) == Some(0.0)
                && sample(&s, "rheo_group_dead_letters", &group) == Some(20.0);
            drained.then_some(s)
        },
    );
    let group = [("stream", "orders"), ("group", "billing")];
    let n = |v: &Value| v.as_u64().map(|n| n as f64);
    assert_eq!(sample(&after, "rheo_group_pending", &group), Some(0.0));
    assert_eq!(
        sample(&after, "rheo_group_dead_letters", &group),
        n(&info["dead_letters"])
    );
    assert_eq!(
        sample(&after, "rheo_group_dead_letters", &group),
        Some(20.0)
    );
    for (outcome, field) in [
        ("acked", "acked"),
        ("rejected", "rejected"),
        ("retried", "retried"),
    ] {
        assert_eq!(
            sample(
                &after,
                "rheo_handler_outcomes_total",
                &[("handler", "gate"), ("outcome", outcome)]
            ),
            n(&counters[field]),
            "{outcome}"
        );
    }
    assert_eq!(
        sample(
            &after,
            "rheo_handler_deliveries_total",
            &[("handler", "gate")]
        ),
        Some(1000.0)
    );
    assert_eq!(
        sample(
            &after,
            "rheo_handler_call_duration_seconds",
            &[("handler", "gate")]
        ),
        Some(1000.0),
        "one guest call per delivery"
    );
    assert_eq!(
        sample(&after, "rheo_handler_in_flight", &[("handler", "gate")]),
        Some(0.0)
    );
    for op in ["append", "fetch", "settle", "group_info"] {
        let calls = sample(
            &after,
            "rheo_backend_operation_duration_seconds",
            &[("backend", "memory"), ("op", op)],
        );
        assert!(calls.is_some_and(|c| c >= 1.0), "{op}: {calls:?}");
    }
    assert!(sample(&after, "rheo_handler_compile_duration_seconds", &[]).is_some_and(|c| c >= 1.0));

    // A hot swap is counted, and the version follows.
    let (status, body) = support::swap_module(&http, &server, "gate", &guest("echo"));
    assert_eq!(status, 200, "{body}");
    let swapped = scrape(&http, &server);
    assert_eq!(
        sample(&swapped, "rheo_handler_swaps_total", &[("handler", "gate")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&swapped, "rheo_handler_version", &[("handler", "gate")]),
        Some(2.0)
    );
}

#[test]
fn json_log_lines_of_a_guest_carry_its_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &["--log-format", "json"]);
    let http = agent();
    stream(&http, &server, "orders", 2);
    let manifest = json!({"stream": "orders", "group": "billing"});
    let (status, body) = deploy(&http, &server, "gate", &manifest, &guest("poison"));
    assert_eq!(status, 201, "{body}");
    append_batch(&http, &server, "orders", "ok-", 0..3);
    let (status, body) = post(
        &http,
        &server,
        "/v1/streams/orders/events",
        &json!({
            "id": "evt-bad",
            "payload": {"poison": true, "reason": "bad card"},
            "metadata": {"correlation_id": "order-42"}
        }),
    );
    assert_eq!(status, 201, "{body}");
    let partition = body["partition"].clone();
    let sequence = body["sequence"].clone();

    let line = eventually(
        "the guest's warning in the log",
        Duration::from_secs(30),
        || {
            server.log_text().lines().find_map(|l| {
                let v: Value = serde_json::from_str(l).ok()?;
                (v["target"] == "rheo::handler"
                    && v["fields"]["message"]
                        .as_str()?
                        .contains("rejecting evt-bad"))
                .then_some(v)
            })
        },
    );
    assert_eq!(line["level"], "WARN", "{line}");
    assert_eq!(line["fields"]["handler"], "gate", "{line}");
    let span = &line["span"];
    assert_eq!(span["name"], "delivery", "{line}");
    assert_eq!(span["event_id"], "evt-bad", "{line}");
    assert_eq!(span["attempt"], 1, "{line}");
    assert_eq!(span["handler"], "gate", "{line}");
    assert_eq!(span["stream"], "orders", "{line}");
    assert_eq!(span["group"], "billing", "{line}");
    assert_eq!(span["partition"], partition, "{line}");
    assert_eq!(span["sequence"], sequence, "{line}");
    assert_eq!(span["version"], 1, "{line}");
    assert_eq!(span["correlation_id"], "order-42", "{line}");
    assert!(span["lease_id"].as_str().is_some_and(|l| !l.is_empty()));

    // Every line the server wrote is a JSON object.
    for l in server.log_text().lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"));
        assert!(v["timestamp"].is_string() && v["level"].is_string(), "{l}");
    }
}

/// A collector stand-in: answers every POST with 200 and hands over the
/// path and body.
fn collector() -> (String, mpsc::Receiver<(String, Vec<u8>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let path = request_line
                .split_whitespace()
                .nth(1)
                .unwrap_or("")
                .to_owned();
            let mut length = 0usize;
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                    break;
                }
                if let Some((k, v)) = header.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            if tx.send((path, body)).is_err() {
                return;
            }
        }
    });
    (url, rx)
}

#[test]
fn delivery_spans_reach_an_otlp_collector_with_their_lineage() {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message;

    let (url, exports) = collector();
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(dir.path(), &["--otlp-endpoint", &url]);
    let http = agent();
    stream(&http, &server, "orders", 1);
    let manifest = json!({"stream": "orders", "group": "billing"});
    let (status, body) = deploy(&http, &server, "gate", &manifest, &guest("echo"));
    assert_eq!(status, 201, "{body}");
    let (status, body) = post(
        &http,
        &server,
        "/v1/streams/orders/events",
        &json!({
            "id": "evt-1",
            "metadata": {"correlation_id": "order-42", "causation_id": "evt-0"}
        }),
    );
    assert_eq!(status, 201, "{body}");
    eventually("the event is acked", Duration::from_secs(30), || {
        (handler(&http, &server, "gate")["counters"]["acked"] == 1).then_some(())
    });
    // Shutting down sends what the batch exporter still holds.
    assert!(server.terminate().success());

    let mut spans = Vec::new();
    while let Ok((path, body)) = exports.recv_timeout(Duration::from_secs(10)) {
        assert_eq!(path, "/v1/traces");
        let request = ExportTraceServiceRequest::decode(&body[..]).expect("OTLP protobuf");
        for resource in request.resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .and_then(|a| a.value.clone()?.value);
            assert_eq!(service, Some(Any::StringValue("rheo".into())));
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
        if spans.iter().any(|s| s.name == "delivery") {
            break;
        }
    }
    let delivery = spans
        .iter()
        .find(|s| s.name == "delivery")
        .expect("a delivery span was exported");
    let attribute = |key: &str| {
        delivery
            .attributes
            .iter()
            .find(|a| a.key == key)
            .and_then(|a| a.value.clone()?.value)
    };
    let text = |s: &str| Some(Any::StringValue(s.into()));
    assert_eq!(attribute("event_id"), text("evt-1"));
    assert_eq!(attribute("correlation_id"), text("order-42"));
    assert_eq!(attribute("causation_id"), text("evt-0"));
    assert_eq!(attribute("handler"), text("gate"));
    assert_eq!(attribute("outcome"), text("ack"));
    assert_eq!(attribute("attempt"), Some(Any::IntValue(1)));
    assert_eq!(attribute("sequence"), Some(Any::IntValue(1)));
    assert_eq!(attribute("version"), Some(Any::IntValue(1)));
}
