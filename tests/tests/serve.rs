//! `rheo serve`, started as a user would: on port 0 with a SQLite file,
//! driven over real HTTP, stopped with SIGTERM.

use std::time::{Duration, Instant};

use rheo_e2e::{Server, ServerOptions, agent, answer, run_rheo};
use serde_json::json;
use ureq::Agent;

/// Waits until `n` requests are in flight (the metrics request itself is
/// one of them), so a signal is known to arrive while the others run.
fn wait_for_in_flight(http: &Agent, server: &Server, n: u32) {
    let expected = format!("rheo_http_requests_in_flight {n}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut response = http.get(server.url("/metrics")).call().expect("metrics");
        let text = response.body_mut().read_to_string().expect("metrics text");
        if text.contains(&expected) {
            return;
        }
        assert!(Instant::now() < deadline, "never saw {expected:?}:\n{text}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn serve_answers_http_on_sqlite_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions {
        test_clock: true,
        ..ServerOptions::default()
    };
    let mut server = Server::start(dir.path(), &options);
    let http = agent();

    let (status, body) = answer(http.get(server.url("/healthz")).call());
    assert_eq!((status, body), (200, json!({"status": "ok"})));
    let (status, body) = answer(http.get(server.url("/readyz")).call());
    assert_eq!((status, body["backend"].clone()), (200, json!("sqlite")));

    let (status, _) = answer(
        http.post(server.url("/v1/streams"))
            .send_json(json!({"name": "orders", "partition_count": 2})),
    );
    assert_eq!(status, 201);
    let (status, event) = answer(
        http.post(server.url("/v1/streams/orders/events"))
            .send_json(json!({"id": "o-1", "partition": 1, "payload": {"total": 12}})),
    );
    assert_eq!((status, event["sequence"].clone()), (201, json!(1)));
    let (status, _) = answer(
        http.post(server.url("/v1/streams/orders/groups"))
            .send_json(json!({"name": "billing"})),
    );
    assert_eq!(status, 201);

    // The fencing story over HTTP, with the server's test clock.
    let fetch = server.url("/v1/streams/orders/groups/billing/fetch");
    let (_, first) = answer(http.post(&fetch).send_json(json!({"lease_ms": 1000})));
    let first = first["leases"][0].clone();
    assert_eq!(first["event"]["payload"]["total"], 12);
    let (status, _) = answer(
        http.post(server.url("/v1/test/clock"))
            .send_json(json!({"advance_ms": 1000})),
    );
    assert_eq!(status, 200);
    let (_, second) = answer(http.post(&fetch).send_json(json!({})));
    assert_eq!(second["leases"][0]["attempt"], 2);
    let ack = server.url("/v1/streams/orders/groups/billing/ack");
    let stale = json!({"event_id": "o-1", "lease_id": first["lease_id"]});
    let (status, body) = answer(http.post(&ack).send_json(stale));
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (409, json!("stale_lease"))
    );
    let current = json!({"event_id": "o-1", "lease_id": second["leases"][0]["lease_id"]});
    assert_eq!(answer(http.post(&ack).send_json(current)).0, 200);
    let (_, lag) = answer(
        http.get(server.url("/v1/streams/orders/groups/billing/lag"))
            .call(),
    );
    assert_eq!(lag["lag"], 0);

    // A browser pointed at the server lands on the console.
    let plain = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build();
    let root = ureq::Agent::from(plain)
        .get(server.url("/"))
        .call()
        .expect("/");
    assert_eq!(root.status().as_u16(), 307);
    assert_eq!(root.headers()["location"], "/ui/");

    let (status, body) = answer(http.get(server.url("/v1/nope")).call());
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (404, json!("not_found"))
    );

    // A long poll in flight when SIGTERM arrives answers (empty) and the
    // server still exits 0.
    let waiting = {
        let http = http.clone();
        let fetch = fetch.clone();
        std::thread::spawn(move || answer(http.post(&fetch).send_json(json!({"wait_ms": 30_000}))))
    };
    wait_for_in_flight(&http, &server, 2);
    let status = server.terminate();
    assert!(status.success(), "exit status {status:?}");
    let (status, body) = waiting.join().expect("the long poll thread");
    assert_eq!((status, body), (200, json!({"leases": []})));
    let stderr = server.log_text();
    assert!(stderr.contains("received SIGTERM"), "{stderr}");
    assert!(stderr.contains("backend: sqlite"), "{stderr}");
    let console = format!("the console is at {}", server.url("/ui/"));
    assert!(stderr.contains(&console), "{console:?} in {stderr}");

    // The data survives a restart on the same file.
    let mut again = Server::start(dir.path(), &options);
    let (_, stream) = answer(http.get(again.url("/v1/streams/orders")).call());
    assert_eq!(stream["partitions"]["1"]["high_watermark"], 1);
    assert!(again.terminate().success());
}

/// One server owns a SQLite store: a second `rheo serve` on the same file
/// refuses to start and names the first one's process; once the first is
/// gone (killed: the lock goes with the process), a new one starts.
#[test]
fn a_second_server_on_one_sqlite_store_is_refused_and_names_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rheo.db");
    let url = format!("sqlite://{}", db.display());
    let mut first = Server::start(dir.path(), &ServerOptions::default());

    let (ok, _, err) = run_rheo(&["serve", "--listen", "127.0.0.1:0", "--backend", &url]);
    assert!(!ok, "a second server started:\n{err}");
    assert!(
        err.contains(&format!(
            "in use by another rheo serve (pid {}",
            first.pid()
        )),
        "the refusal names the first server:\n{err}"
    );
    assert!(err.contains(&format!("{}.lock", db.display())), "{err}");
    // The first one never noticed.
    let (status, _) = answer(agent().get(first.url("/readyz")).call());
    assert_eq!(status, 200);

    first.kill();
    let second = Server::start(dir.path(), &ServerOptions::default());
    let (status, _) = answer(agent().get(second.url("/readyz")).call());
    assert_eq!(status, 200);
}
