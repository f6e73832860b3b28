//! Chaos tests (docs/operations.md#chaos-tests): `rheo serve` under faults,
//! each test bounded by deadlines and stopping by itself.
//!
//! * **SIGKILL loop** on SQLite and on PostgreSQL (a fresh schema): a
//!   producer appends while the transform handler consumes, and the server
//!   is killed at seeded random moments and started again on the same
//!   store, at least ten times. Every event is then stored once, acked,
//!   transformed once, and no delivery acked before a kill came back
//!   (`support::chaos::sigkill_loop`).
//! * **Database outage** on PostgreSQL (a database of the test's own, closed
//!   to connections): the API answers `backend_unavailable`, the runtime
//!   backs off instead of spinning, nothing panics, and once the database
//!   is open again the run completes.
//! * **Disk full** on SQLite (the database on a small tmpfs, filled up):
//!   appends are refused with `storage_full`, nothing acknowledged is lost,
//!   and once space is freed the same server takes appends again and the
//!   handler catches up.
//!
//! * **Network partitions** on PostgreSQL and on Redis
//!   (`chaos/partition.rs`): one node's traffic to the store is dropped
//!   silently by a proxy — while idle, inside a fetch, inside an append,
//!   with a write in flight, under a handler workload — and healed; the
//!   other node never stalls, the cut node answers within its deadlines
//!   and serves again, and nothing is lost.
//!
//! The servers run on frozen test clocks: leases pass only when the test
//! moves a clock, never by waiting. `CHAOS_SEED` repeats a run's random
//! choices; CI (`REQUIRE_BACKENDS`) fails rather than skips a test whose
//! service or fault cannot be set up.

use crate::support;

mod cuts;
mod partition;
mod proxy;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rheo_e2e::{Server, ServerOptions, agent, service_url};
use serde_json::{Value, json};
use support::chaos::{
    self, PgDatabase, Round, SetOnDrop, Target, Tmpfs, append_until_stored, assert_all_acked,
    assert_each_once, assert_no_panic, assert_nothing_acked_came_back, deliveries, drain, events,
    frontiers, pass_leases,
};
use support::restart::fetch_retries;
use support::{assert_error, eventually, get, post};
use ureq::Agent;

/// Kills per SIGKILL loop.
const KILLS: usize = 12;

#[test]
fn sigkill_loop_on_sqlite_loses_nothing_and_redelivers_nothing_acked() {
    chaos::sigkill_loop("sqlite SIGKILL loop", None, KILLS);
}

#[test]
fn sigkill_loop_on_postgres_loses_nothing_and_redelivers_nothing_acked() {
    let Some(schema) = rheo_e2e::PgSchema::fresh() else {
        return;
    };
    let backend = schema.url().to_owned();
    chaos::sigkill_loop("postgres SIGKILL loop", Some(backend), KILLS);
}

/// The sum of the `rheo_backend_errors_total` series of `op` in
/// `/metrics` (`docs/operations.md#backend`).
fn backend_errors(http: &Agent, server: &Server, op: &str) -> f64 {
    let mut response = http.get(server.url("/metrics")).call().expect("metrics");
    let text = response.body_mut().read_to_string().expect("metrics text");
    let label = format!("op=\"{op}\"");
    text.lines()
        .filter(|l| l.starts_with("rheo_backend_errors_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn postgres_outage_answers_unavailable_backs_off_and_recovers() {
    const BEFORE: usize = 600;
    const AFTER: usize = 400;
    let Some(admin) = service_url("TEST_POSTGRES_URL", "postgres") else {
        return;
    };
    let Some(db) = PgDatabase::create(&admin) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &chaos::options(Some(db.url.clone())));
    let http = agent();
    chaos::set_up_pipeline(&http, &server, 4);
    let target = Target::new(&server);
    let long = Duration::from_secs(60);
    for start in (0..BEFORE).step_by(200) {
        append_until_stored(&target, "in", &events(start, 200, 40), long);
    }
    eventually("the handler is running", long, || {
        (chaos::events_in(&http, &server, "out") > 50).then_some(())
    });

    // What was acked before the outage, then what the log showed.
    let before = Round {
        frontier_at_end: frontiers(&http, &server),
        seen: deliveries(&http, &server),
    };
    let last_line = before.seen.iter().map(|s| s.seq).max().unwrap_or(0);
    let fetch_errors = backend_errors(&http, &server, "fetch");
    let log_lines = server.log_text().lines().count();

    db.close();
    let down = Instant::now();
    // The API answers, and says the store is unavailable.
    let lag = eventually("the API notices the outage", long, || {
        let answer = get(&http, &server, "/v1/streams/in/groups/t/lag");
        (answer.0 != 200).then_some(answer)
    });
    assert_error(&lag, 503, "backend_unavailable");
    let (status, body) = post(
        &http,
        &server,
        "/v1/streams/in/events",
        &json!({"id": "while-down", "payload": {}}),
    );
    assert_eq!(status, 503, "{body}");
    assert!(
        ["backend_unavailable", "ambiguous"].contains(&support::code(&body)),
        "{body}"
    );
    // A producer keeps trying while the database is closed.
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let _stop = SetOnDrop(&stop);
        let producer = scope.spawn(|| {
            append_until_stored(&target, "in", &events(BEFORE, 200, 40), long);
            // Until the test lets it go: the rest after the outage.
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
            for start in (BEFORE + 200..BEFORE + AFTER).step_by(100) {
                append_until_stored(&target, "in", &events(start, 100, 40), long);
            }
        });
        // The runtime's fetches back off: 100, 200, 400, 800 ms…
        let retries = eventually("fetches back off", long, || {
            let log = server.log_text();
            let retries =
                fetch_retries(&log.lines().skip(log_lines).collect::<Vec<_>>().join("\n"));
            (retries.len() >= 5).then_some(retries)
        });
        assert!(
            retries.windows(2).take(4).all(|w| w[1] > w[0]),
            "each fetch retry waits longer: {retries:?}"
        );
        // No tight loop anywhere: few failed calls and log lines a second.
        let secs = down.elapsed().as_secs_f64();
        let failed = backend_errors(&http, &server, "fetch") - fetch_errors;
        // Lines of the server's own doing: not the ones about answers to
        // the test's requests (the producer retries every 25 ms), which
        // name their route or are the HTTP layer's "response failed".
        let lines = server
            .log_text()
            .lines()
            .skip(log_lines)
            .filter(|l| !l.contains("route=") && !l.contains("response failed"))
            .count();
        println!(
            "outage: {secs:.1} s, {failed} failed fetches, {lines} log lines, fetch retries {retries:?}"
        );
        assert!(
            failed <= 2.0 * secs + 5.0,
            "{failed} failed fetches in {secs:.1} s"
        );
        assert!(
            (lines as f64) <= 10.0 * secs + 20.0,
            "{lines} log lines in {secs:.1} s:\n{}",
            server.log_text()
        );
        let (status, health) = get(&http, &server, "/healthz");
        assert_eq!(status, 200, "the server itself is up: {health}");

        db.open();
        stop.store(true, Ordering::SeqCst);
        producer.join().expect("the producer");
    });
    // The append sent while the database was closed was stored then or
    // not at all; the producer's resend makes it stored once either way.
    append_until_stored(
        &target,
        "in",
        &[json!({"id": "while-down", "payload": {}})],
        long,
    );
    pass_leases(&http, &server, None);
    let total = BEFORE + AFTER + 1;
    drain(&http, &server, total as u64, Duration::from_secs(120));
    let after = Round {
        seen: deliveries(&http, &server)
            .into_iter()
            .filter(|s| s.seq > last_line)
            .collect(),
        ..Round::default()
    };
    assert_nothing_acked_came_back(&[before, after]);
    let ids = || (0..BEFORE + AFTER).map(|i| format!("e{i}"));
    assert_each_once(&http, &server, "in", ids().chain(["while-down".to_owned()]));
    assert_each_once(
        &http,
        &server,
        "out",
        ids()
            .chain(["while-down".to_owned()])
            .map(|id| format!("{id}:transformed")),
    );
    assert_all_acked(&http, &server);
    assert_no_panic(std::slice::from_ref(&server.log));
    println!("outage test done in {:.1} s", down.elapsed().as_secs_f64());
}

/// Fills the file system of `dir` with `dir/filler`; its size.
fn fill(dir: &std::path::Path) -> u64 {
    use std::io::Write;
    let mut file = std::fs::File::create(dir.join("filler")).expect("filler");
    let mut written = 0;
    for chunk in [1 << 20, 4096, 512] {
        let bytes = vec![0u8; chunk];
        while file.write_all(&bytes).is_ok() {
            written += chunk as u64;
        }
    }
    let _ = file.flush();
    written
}

#[test]
fn sqlite_disk_full_refuses_appends_clearly_keeps_what_was_acked_and_recovers() {
    const FIRST: usize = 400;
    const BATCH: usize = 200;
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let Some(fs) = Tmpfs::mount(&dir.path().join("db"), "8m") else {
        return;
    };
    let options = ServerOptions {
        backend: Some(format!("sqlite://{}", fs.path.join("rheo.db").display())),
        // Only the database is on the small file system.
        handlers_dir: Some(dir.path().join("handlers")),
        ..chaos::options(None)
    };
    let server = Server::start(dir.path(), &options);
    let http = agent();
    chaos::set_up_pipeline(&http, &server, 2);
    let target = Target::new(&server);
    let long = Duration::from_secs(60);
    for start in (0..FIRST).step_by(BATCH) {
        append_until_stored(&target, "in", &events(start, BATCH, 300), long);
    }
    drain(&http, &server, FIRST as u64, long);
    let before = Round {
        frontier_at_end: frontiers(&http, &server),
        seen: deliveries(&http, &server),
    };
    let last_line = before.seen.iter().map(|s| s.seq).max().unwrap_or(0);

    let filler = fill(&fs.path);
    // Appends go on until the store needs space it cannot get; then they
    // are refused, saying why.
    let mut stored = FIRST;
    let refused: (u16, Value) = loop {
        assert!(
            stored < FIRST + 100 * BATCH,
            "{} events appended to a full disk ({filler} bytes of filler)",
            stored - FIRST
        );
        let (status, body) = post(
            &http,
            &server,
            "/v1/streams/in/events/batch",
            &json!({"events": events(stored, BATCH, 1000)}),
        );
        if status == 201 {
            stored += BATCH;
        } else {
            break (status, body);
        }
    };
    if refused.0 != 507 {
        // Which error the store gave is in the server's log.
        let log = server.log_text();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        println!("the server's log ends:\n{tail:#?}");
    }
    assert_error(&refused, 507, "storage_full");
    println!(
        "disk full after {} more events: {}",
        stored - FIRST,
        refused.1
    );
    // Reads still work, and every append acknowledged so far is there.
    assert_each_once(&http, &server, "in", (0..stored).map(|i| format!("e{i}")));

    std::fs::remove_file(fs.path.join("filler")).expect("remove the filler");
    // The refused batch goes through now, on the same server.
    let resent = eventually("the refused batch is stored", long, || {
        let (status, body) = post(
            &http,
            &server,
            "/v1/streams/in/events/batch",
            &json!({"events": events(stored, BATCH, 1000)}),
        );
        match status {
            201 | 200 => Some(body),
            503 => None,
            _ => {
                let log = server.log_text();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                panic!(
                    "after the filler was removed: {status} {body}; the server's log ends:\n{tail:#?}"
                )
            }
        }
    });
    assert!(
        resent["events"]
            .as_array()
            .is_some_and(|e| e.iter().all(|e| e["duplicate"] == false)),
        "the refused batch had stored nothing: {resent}"
    );
    stored += BATCH;
    append_until_stored(&target, "in", &events(stored, BATCH, 40), long);
    stored += BATCH;
    pass_leases(&http, &server, None);
    drain(&http, &server, stored as u64, Duration::from_secs(120));
    let after = Round {
        seen: deliveries(&http, &server)
            .into_iter()
            .filter(|s| s.seq > last_line)
            .collect(),
        ..Round::default()
    };
    assert_nothing_acked_came_back(&[before, after]);
    assert_each_once(&http, &server, "in", (0..stored).map(|i| format!("e{i}")));
    assert_each_once(
        &http,
        &server,
        "out",
        (0..stored).map(|i| format!("e{i}:transformed")),
    );
    assert_all_acked(&http, &server);
    assert_no_panic(std::slice::from_ref(&server.log));
    drop(server);
    drop(fs);
    println!(
        "disk full test done in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
