//! A Python handler hot-swapped under load (issue 13's acceptance): the
//! Python `echo` example runs as handler `worker` (concurrency 16) on a real
//! `rheo serve` (SQLite) while events keep arriving; with at least 2,000
//! events unacked it is swapped for the Python `transform` example — a
//! seconds-long compile, during which `echo` keeps consuming — and every
//! event is acked exactly once: nothing retried, rejected, trapped, timed
//! out, lost or dead-lettered, by either version, and `transform` derived
//! exactly one event for each delivery it handled.
//!
//! The components come from `guests/python/build.sh` (`support::guests`).
//! Without Python the test skips and says why — unless `REQUIRE_GUESTS`
//! (set by CI) lists `python`, in which case it fails.
//!
//! It also prints how fast `echo` acked before, during and after the swap's
//! compile (`docs/benchmarks.md#hot-swap-of-a-python-handler`): measured,
//! not asserted.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rheo_e2e::{Server, ServerOptions};
use serde_json::{Value, json};
use support::guests::{python_guests, read_module};
use support::{append_batch, deploy, eventually, get, swap_module};
use ureq::Agent;

/// Events appended before the swap.
const EVENTS: usize = 5_000;
/// Unacked events the swap starts with, at least; appends keep the lag
/// above it while the new version compiles.
const IN_FLIGHT: u64 = 2_000;
/// Events per append.
const BATCH: usize = 250;
/// Longest wait for anything: a Python compile takes seconds (tens in a
/// debug build on a busy machine).
const WAIT: Duration = Duration::from_secs(600);
const GROUP: (&str, &str) = ("orders", "workers");

#[test]
fn a_python_handler_is_hot_swapped_under_load_without_failing_a_delivery() {
    let Some(dir) = python_guests() else { return };
    let (echo, transform) = (read_module(dir, "echo"), read_module(dir, "transform"));
    let tmp = tempfile::tempdir().expect("temp dir");
    let server = Server::start(tmp.path(), &ServerOptions::default());
    let http: Agent = Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(WAIT))
        .build()
        .into();
    let load = Load {
        http: &http,
        server: &server,
    };
    load.stream("orders", 4);
    load.stream("derived", 1);

    // Version 1: echo. The config and append_to are for transform, which
    // keeps this manifest when it is swapped in; echo ignores them.
    let manifest = json!({
        "stream": "orders", "group": "workers",
        "concurrency": 16, "max_demand": 64,
        "config": {"target_stream": "derived"}, "append_to": ["derived"],
    });
    let started = Instant::now();
    let (status, v1) = deploy(&http, &server, "worker", &manifest, &echo);
    assert_eq!(status, 201, "{v1}");
    assert_eq!(v1["version"], 1, "{v1}");
    assert_eq!(v1["digest"], support::sha256_hex(&echo), "{v1}");
    eprintln!(
        "deployed the Python echo ({} KiB) in {:.1} s",
        echo.len() / 1024,
        started.elapsed().as_secs_f64()
    );

    let mut appended = 0;
    while appended < EVENTS {
        appended = load.append(appended);
    }
    eventually("echo acks", WAIT, || (load.acked(1) > 0).then_some(()));

    // The swap, while appends keep at least IN_FLIGHT unacked.
    let swapping = AtomicBool::new(true);
    let t0 = Instant::now();
    let (swap, feed) = thread::scope(|s| {
        let feeder = s.spawn(|| load.feed(t0, appended, &swapping));
        // Swap only once the lag is there (the feeder tops it up).
        let lag_at_swap = eventually("the lag at the swap", WAIT, || {
            let lag = load.lag()["lag"].as_u64().expect("lag");
            (lag >= IN_FLIGHT).then_some(lag)
        });
        let started = t0.elapsed();
        let (status, body) = swap_module(&http, &server, "worker", &transform);
        let took = (started, t0.elapsed());
        // Keep appending until transform has had some of the load too.
        eventually("transform acks", WAIT, || {
            (load.acked(2) >= BATCH as u64).then_some(())
        });
        swapping.store(false, Ordering::Release);
        let feed = feeder.join().expect("the feeder");
        ((status, body, lag_at_swap, took), feed)
    });
    let (status, swapped, lag_at_swap, took) = swap;
    let took = (took.0.as_secs_f64(), took.1.as_secs_f64());
    let appended = feed.appended;
    assert_eq!(status, 200, "{swapped}");
    assert!(lag_at_swap >= IN_FLIGHT, "{lag_at_swap}");
    assert_eq!(
        (&swapped["version"], &swapped["previous_version"]),
        (&json!(2), &json!(1)),
        "{swapped}"
    );
    assert_eq!(swapped["digest"], support::sha256_hex(&transform));
    assert_ne!(swapped["digest"], v1["digest"]);
    eprintln!(
        "swapped to the Python transform in {:.1} s with {lag_at_swap} events unacked; \
         {appended} events appended in all",
        took.1 - took.0
    );
    feed.report(took);

    // Everything settles: each event acked once, nothing failed.
    let view = eventually("every event acked, lag 0", WAIT, || {
        let view = load.handler();
        let lag = load.lag();
        let done = view["counters"]["acked"] == appended
            && view["counters"]["inflight"] == 0
            && lag["lag"] == 0
            && lag["inflight"] == 0;
        done.then_some(view)
    });
    assert_eq!(
        (&view["version"], &view["digest"]),
        (&json!(2), &swapped["digest"])
    );
    let failures = [
        "retried",
        "rejected",
        "trapped",
        "timed_out",
        "lost",
        "settle_errors",
    ];
    let c = &view["counters"];
    assert_eq!(
        (&c["processed"], &c["acked"]),
        (&json!(appended), &json!(appended)),
        "{view}"
    );
    let mut by_version = 0;
    for version in ["1", "2"] {
        let c = &by_version_of(&view)[version];
        assert!(
            c["acked"].as_u64().is_some_and(|n| n > 0),
            "version {version} worked: {view}"
        );
        assert_eq!(c["processed"], c["acked"], "version {version}: {view}");
        for failure in failures {
            assert_eq!(c[failure], 0, "version {version} {failure}: {view}");
        }
        by_version += c["acked"].as_u64().unwrap();
    }
    assert_eq!(by_version, appended as u64, "{view}");
    let (status, dead) = get(
        &http,
        &server,
        "/v1/streams/orders/groups/workers/dead-letters",
    );
    assert_eq!(status, 200, "{dead}");
    assert_eq!(dead["dead_letters"], json!([]), "{dead}");

    // transform derived one event per delivery it handled (ids
    // "<source>:transformed"; a second delivery of one event would have
    // shown in `processed` above).
    let (status, derived) = get(&http, &server, "/v1/streams/derived");
    assert_eq!(status, 200, "{derived}");
    assert_eq!(
        derived["partitions"]["0"]["high_watermark"],
        by_version_of(&view)["2"]["acked"],
        "{derived}"
    );
    let log = server.log_text();
    assert!(!log.contains("panicked"), "no panic:\n{log}");
}

/// A handler view's counters per version (`counters_by_version`, or
/// `versions` where the API names it so).
fn by_version_of(view: &Value) -> Value {
    match &view["versions"] {
        Value::Object(_) => view["versions"].clone(),
        _ => view["counters_by_version"].clone(),
    }
}

/// The server, seen from a producer and an operator.
struct Load<'a> {
    http: &'a Agent,
    server: &'a Server,
}

/// What the feeder appended, and saw while the swap went on: `(seconds
/// since it started, acked by version 1, by version 2, lag)`.
struct Feed {
    appended: usize,
    samples: Vec<(f64, u64, u64, u64)>,
}

impl Load<'_> {
    fn stream(&self, name: &str, partitions: u32) {
        let (status, body) = support::post(
            self.http,
            self.server,
            "/v1/streams",
            &json!({"name": name, "partition_count": partitions}),
        );
        assert_eq!(status, 201, "{body}");
    }

    /// Appends one batch after the first `from` events; the new total.
    fn append(&self, from: usize) -> usize {
        append_batch(self.http, self.server, "orders", "o-", from..from + BATCH);
        from + BATCH
    }

    fn handler(&self) -> Value {
        let (status, body) = get(self.http, self.server, "/v1/handlers/worker");
        assert_eq!(status, 200, "{body}");
        body
    }

    fn lag(&self) -> Value {
        let (status, body) = get(
            self.http,
            self.server,
            &format!("/v1/streams/{}/groups/{}/lag", GROUP.0, GROUP.1),
        );
        assert_eq!(status, 200, "{body}");
        body
    }

    /// What `version` has acked so far.
    fn acked(&self, version: u64) -> u64 {
        by_version_of(&self.handler())[version.to_string()]["acked"]
            .as_u64()
            .unwrap_or(0)
    }

    /// Until `swapping` turns false: appends whenever fewer than
    /// `IN_FLIGHT + BATCH` events are unacked, and samples the counters.
    fn feed(&self, started: Instant, mut appended: usize, swapping: &AtomicBool) -> Feed {
        let mut samples = Vec::new();
        while swapping.load(Ordering::Acquire) {
            let lag = self.lag()["lag"].as_u64().expect("lag");
            let view = self.handler();
            let acked = |v: &str| by_version_of(&view)[v]["acked"].as_u64().unwrap_or(0);
            samples.push((started.elapsed().as_secs_f64(), acked("1"), acked("2"), lag));
            if lag < IN_FLIGHT + BATCH as u64 {
                appended = self.append(appended);
            } else {
                // Polling, not waiting for anything to expire.
                thread::sleep(Duration::from_millis(20));
            }
        }
        Feed { appended, samples }
    }
}

impl Feed {
    /// Prints acks per second of each version, second by second, marking
    /// the seconds of the swap request (`swap`: its start and end).
    fn report(&self, swap: (f64, f64)) {
        let mut last: Option<(f64, u64, u64)> = None;
        let mut lines = String::new();
        for &(t, v1, v2, lag) in &self.samples {
            match last {
                Some((t0, a1, a2)) if t - t0 >= 1.0 => {
                    let dt = t - t0;
                    let phase = if t0 >= swap.1 {
                        "swapped"
                    } else if t > swap.0 {
                        "compiling"
                    } else {
                        "before"
                    };
                    lines.push_str(&format!(
                        "  {t0:5.1}–{t:5.1} s  {phase:9}  v1 {:6.0}/s  v2 {:6.0}/s  lag {lag}\n",
                        (v1 - a1) as f64 / dt,
                        (v2 - a2) as f64 / dt,
                    ));
                    last = Some((t, v1, v2));
                }
                None => last = Some((t, v1, v2)),
                _ => {}
            }
        }
        eprintln!(
            "acks per second (the swap request ran from {:.1} s to {:.1} s):\n{lines}",
            swap.0, swap.1
        );
    }
}
