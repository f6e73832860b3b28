//! What the chaos tests (`tests/tests/chaos.rs`) share: a seeded random
//! source, a producer that resends an append whose answer was lost, the
//! deliveries a handler reports in its log, and the checks every scenario
//! ends with (each event stored once, every delivery acked, nothing acked
//! handed out again, the transform's output without a duplicate).
//!
//! The handler is the `transform` example (`docs/handlers.md#the-contract`):
//! for each event `e` of stream `in` it appends `e:transformed` to `out`
//! and logs one line inside the delivery, so the handler's log
//! (`docs/handlers.md#handler-logs`) names every delivery it finished,
//! with its partition, sequence and attempt.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rheo_e2e::{Server, ServerOptions};
use serde_json::{Value, json};
use ureq::Agent;

use super::{deploy, get, guest, post};

/// Every handler lease of the chaos tests, in milliseconds of the test clock.
pub(crate) const LEASE_MS: u64 = 5_000;

/// The handler (and its group): `transform`, from `in` to `out`.
pub(crate) const HANDLER: &str = "t";

/// A small seeded generator (xorshift64*): the seed is printed, and
/// `CHAOS_SEED=<seed>` makes a run take the same random choices again.
#[derive(Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    /// The seed from `CHAOS_SEED`, else from the time; printed with `what`.
    pub(crate) fn seeded(what: &str) -> Rng {
        let seed = std::env::var("CHAOS_SEED")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or_else(|| {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap();
                t.as_secs() ^ (u64::from(t.subsec_nanos()) << 20)
            });
        println!("{what}: chaos seed {seed} (CHAOS_SEED={seed} repeats its choices)");
        Rng::new(seed)
    }

    /// A generator started from `seed`.
    pub(crate) fn new(seed: u64) -> Rng {
        Rng((seed ^ 0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `low..=high`.
    pub(crate) fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high - low + 1)
    }
}

/// `rheo serve` options of a chaos test: a frozen test clock (leases pass
/// only when the test moves it) and a handler log long enough to keep
/// every line of a run.
pub(crate) fn options(backend: Option<String>) -> ServerOptions {
    ServerOptions {
        backend,
        test_clock: true,
        args: vec!["--handler-log-lines".into(), "100000".into()],
        ..ServerOptions::default()
    }
}

/// Streams `in` and `out` (`partitions` each) and the transform handler
/// from one to the other, deployed through `server`.
pub(crate) fn set_up_pipeline(http: &Agent, server: &Server, partitions: u32) {
    for name in ["in", "out"] {
        let (status, body) = post(
            http,
            server,
            "/v1/streams",
            &json!({"name": name, "partition_count": partitions}),
        );
        assert_eq!(status, 201, "{body}");
    }
    let manifest = json!({
        "stream": "in", "group": HANDLER, "concurrency": 4, "lease_ms": LEASE_MS,
        "config": {"target_stream": "out"},
    });
    let (status, body) = deploy(http, server, HANDLER, &manifest, &guest("transform"));
    assert_eq!(status, 201, "{body}");
}

/// `n` events with the ids `e<first>`…, keyed so they spread over the
/// partitions, each with `pad` bytes of payload text.
pub(crate) fn events(first: usize, n: usize, pad: usize) -> Vec<Value> {
    (first..first + n)
        .map(|i| {
            json!({
                "id": format!("e{i}"), "key": format!("k{}", i % 13),
                "payload": {"n": i, "pad": "x".repeat(pad)},
            })
        })
        .collect()
}

/// The base URL of the server a test talks to right now (it changes with
/// each restart).
#[derive(Debug)]
pub(crate) struct Target(Mutex<String>);

impl Target {
    pub(crate) fn new(server: &Server) -> Target {
        Target(Mutex::new(server.base().to_owned()))
    }

    pub(crate) fn set(&self, server: &Server) {
        *self.0.lock().unwrap() = server.base().to_owned();
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.0.lock().unwrap())
    }
}

/// How one batch got stored.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Stored {
    /// Times it was sent (1 when the first answer came back).
    pub(crate) sends: u32,
    /// Events the answer called duplicates: a resend after an answer that
    /// was lost although the append had been stored.
    pub(crate) duplicates: usize,
}

/// Appends `events` to `stream` at `target`, sending the same batch (same
/// ids: the store keeps each id once, `docs/log.md#idempotent-ids`) again
/// after an answer that never came (a killed server, a refused connection)
/// or said to try again (`backend_unavailable`, `ambiguous`,
/// `storage_full`), for at most `limit`. Any other answer fails the test.
pub(crate) fn append_until_stored(
    target: &Target,
    stream: &str,
    events: &[Value],
    limit: Duration,
) -> Stored {
    // Short timeouts: a request to a killed server fails at once, one to
    // a live server answers in far less.
    let http: Agent = Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into();
    let deadline = Instant::now() + limit;
    let body = json!({ "events": events });
    let mut stored = Stored::default();
    loop {
        stored.sends += 1;
        let url = target.url(&format!("/v1/streams/{stream}/events/batch"));
        let failure = match http.post(&url).send_json(&body) {
            Ok(mut response) => {
                let status = response.status().as_u16();
                let answer: Value = response.body_mut().read_json().unwrap_or(Value::Null);
                let code = answer["error"]["code"].as_str().unwrap_or_default();
                match (status, code) {
                    (200 | 201, _) => {
                        let stored_events = answer["events"].as_array().expect("events");
                        assert_eq!(stored_events.len(), events.len(), "{answer}");
                        for (sent, got) in events.iter().zip(stored_events) {
                            assert_eq!(sent["id"], got["id"], "in order: {answer}");
                        }
                        stored.duplicates = stored_events
                            .iter()
                            .filter(|e| e["duplicate"] == true)
                            .count();
                        return stored;
                    }
                    (503, "backend_unavailable" | "ambiguous") | (507, "storage_full") => {
                        format!("{status} {code}")
                    }
                    _ => panic!("append to {url}: unexpected answer {status} {answer}"),
                }
            }
            Err(e) => e.to_string(),
        };
        assert!(
            Instant::now() < deadline,
            "an append to {stream} was not stored within {limit:?}; last failure: {failure}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// What a [`produce`] run appended.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Produced {
    /// Events `e0`…: every one stored.
    pub(crate) events: usize,
    /// Batches sent more than once.
    pub(crate) resent: usize,
    /// Events a resend found stored already.
    pub(crate) duplicates: usize,
}

/// Appends batches of 1–40 events to `in` (ids `e<first>`, `e<first+1>`…)
/// at whatever server `target` names, a few milliseconds apart, until
/// `stop` is set; each batch is resent until stored.
pub(crate) fn produce(target: &Target, first: usize, stop: &AtomicBool, seed: u64) -> Produced {
    let mut rng = Rng::new(seed);
    let mut produced = Produced {
        events: first,
        ..Produced::default()
    };
    while !stop.load(Ordering::SeqCst) {
        let n = rng.between(1, 40) as usize;
        let batch = events(produced.events, n, 40);
        let stored = append_until_stored(target, "in", &batch, Duration::from_secs(60));
        produced.events += n;
        produced.resent += usize::from(stored.sends > 1);
        produced.duplicates += stored.duplicates;
        std::thread::sleep(Duration::from_millis(rng.between(5, 40)));
    }
    produced
}

/// Sets a flag when dropped: stops a producer thread when the test fails.
#[derive(Debug)]
pub(crate) struct SetOnDrop<'a>(pub(crate) &'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// One delivery the handler finished, as its log line says.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Seen {
    /// The line's number in the handler's log.
    pub(crate) seq: u64,
    pub(crate) event_id: String,
    pub(crate) partition: u64,
    pub(crate) sequence: u64,
    pub(crate) attempt: u64,
}

/// The deliveries in the handler's log on `server` (none when the handler
/// is not running there yet).
pub(crate) fn deliveries(http: &Agent, server: &Server) -> Vec<Seen> {
    let (status, body) = get(
        http,
        server,
        &format!("/v1/handlers/{HANDLER}/logs?limit=100000"),
    );
    if status == 404 {
        return Vec::new();
    }
    assert_eq!(status, 200, "{body}");
    body["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .filter(|line| line["event_id"].is_string())
        .map(|line| {
            let n = |field: &str| {
                line[field]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{field} in {line}"))
            };
            Seen {
                seq: n("seq"),
                event_id: line["event_id"].as_str().unwrap().to_owned(),
                partition: n("partition"),
                sequence: n("sequence"),
                attempt: n("attempt"),
            }
        })
        .collect()
}

/// The group's frontier in each partition (`docs/groups.md#frontier-and-lag`):
/// every sequence up to it is settled.
pub(crate) fn frontiers(http: &Agent, server: &Server) -> BTreeMap<u64, u64> {
    let (status, lag) = get(
        http,
        server,
        &format!("/v1/streams/in/groups/{HANDLER}/lag"),
    );
    assert_eq!(status, 200, "{lag}");
    lag["partitions"]
        .as_object()
        .expect("partitions")
        .iter()
        .map(|(p, v)| (p.parse().unwrap(), v["frontier"].as_u64().unwrap()))
        .collect()
}

/// A stretch of a run: the deliveries seen in it, and the frontiers read
/// before it ended (by a kill or a fault).
#[derive(Debug, Default)]
pub(crate) struct Round {
    pub(crate) seen: Vec<Seen>,
    pub(crate) frontier_at_end: BTreeMap<u64, u64>,
}

/// No delivery acked before a round ended was handed out in a later round
/// (each delivery of a later round lies past the frontier read before the
/// earlier one ended: no dead letters, so everything up to it was acked),
/// and each event's attempts only grow: no claim handed out was forgotten.
/// Returns the deliveries seen and how many were redeliveries.
pub(crate) fn assert_nothing_acked_came_back(rounds: &[Round]) -> (usize, usize) {
    let mut floor: BTreeMap<u64, u64> = BTreeMap::new();
    let mut attempts: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
    let (mut total, mut again) = (0, 0);
    for (r, round) in rounds.iter().enumerate() {
        let mut seen: Vec<&Seen> = round.seen.iter().collect();
        seen.sort_by_key(|s| (s.attempt, s.seq));
        for s in seen {
            let acked_up_to = floor.get(&s.partition).copied().unwrap_or(0);
            assert!(
                s.sequence > acked_up_to,
                "round {r}: {s:?} was delivered again although every sequence up to \
                 {acked_up_to} of partition {} was acked before round {} ended",
                s.partition,
                r.saturating_sub(1),
            );
            if let Some((r0, a0)) = attempts.get(s.event_id.as_str()) {
                assert!(
                    s.attempt > *a0,
                    "{} handed out as attempt {} in round {r} after attempt {a0} in round {r0}",
                    s.event_id,
                    s.attempt,
                );
            }
            attempts.insert(s.event_id.as_str(), (r, s.attempt));
            total += 1;
            again += usize::from(s.attempt > 1);
        }
        for (&p, &f) in &round.frontier_at_end {
            let at = floor.entry(p).or_insert(0);
            assert!(f >= *at, "the frontier of partition {p} moved back");
            *at = f;
        }
    }
    (total, again)
}

/// Every event id of `stream`, read page by page (`docs/log.md#query`).
pub(crate) fn ids_in(http: &Agent, server: &Server, stream: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor = Value::Null;
    loop {
        let mut query = json!({"limit": 1000});
        if !cursor.is_null() {
            query["cursor"] = cursor.clone();
        }
        let (status, page) = post(http, server, &format!("/v1/streams/{stream}/query"), &query);
        assert_eq!(status, 200, "{page}");
        for event in page["events"].as_array().expect("events") {
            ids.push(event["id"].as_str().unwrap().to_owned());
        }
        cursor = page["next_cursor"].clone();
        if cursor.is_null() {
            return ids;
        }
    }
}

/// Events in `stream` (the sum of its high watermarks).
pub(crate) fn events_in(http: &Agent, server: &Server, stream: &str) -> u64 {
    let (status, body) = get(http, server, &format!("/v1/streams/{stream}"));
    assert_eq!(status, 200, "{body}");
    body["partitions"]
        .as_object()
        .expect("partitions")
        .values()
        .map(|p| p["high_watermark"].as_u64().unwrap())
        .sum()
}

/// `stream` holds exactly the ids `expected`, each once: as many sequences
/// as ids, and no id twice or missing.
#[track_caller]
pub(crate) fn assert_each_once(
    http: &Agent,
    server: &Server,
    stream: &str,
    expected: impl IntoIterator<Item = String>,
) {
    let expected: BTreeSet<String> = expected.into_iter().collect();
    let ids = ids_in(http, server, stream);
    let stored: BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(ids.len(), stored.len(), "an id stored twice in {stream}");
    let missing: Vec<_> = expected.difference(&stored).take(10).collect();
    let extra: Vec<_> = stored.difference(&expected).take(10).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{stream}: missing {missing:?}, unexpected {extra:?} ({} stored, {} expected)",
        stored.len(),
        expected.len()
    );
    assert_eq!(
        events_in(http, server, stream),
        expected.len() as u64,
        "{stream}: one sequence per event"
    );
}

/// The test clock's time (RFC 3339, as the server writes it).
pub(crate) fn clock_now(http: &Agent, server: &Server) -> String {
    let (status, body) = get(http, server, "/v1/test/clock");
    assert_eq!(status, 200, "{body}");
    body["now"].as_str().unwrap().to_owned()
}

/// Moves `server`'s test clock past every lease taken up to `since` (a
/// time of an earlier clock: each start freezes the clock at the wall
/// clock's time, which may lie before it) and up to its own now.
pub(crate) fn pass_leases(http: &Agent, server: &Server, since: Option<&str>) {
    let now = clock_now(http, server);
    // One format from one server: the text orders as the time.
    let base = since.filter(|s| *s > now.as_str()).unwrap_or(now.as_str());
    let (status, body) = post(
        http,
        server,
        "/v1/test/clock",
        &json!({"set": base, "advance_ms": LEASE_MS + 1_000}),
    );
    assert_eq!(status, 200, "{body}");
}

/// Waits (at most `limit`) until the group has acked all `events` events
/// and `out` holds one derived event each, moving the test clock past the
/// leases whenever 5 s pass without that (a settle the store did not
/// confirm leaves its lease to expire: `docs/handlers.md#outcomes`).
pub(crate) fn drain(http: &Agent, server: &Server, events: u64, limit: Duration) {
    let deadline = Instant::now() + limit;
    let mut moved = Instant::now();
    loop {
        let (status, lag) = get(
            http,
            server,
            &format!("/v1/streams/in/groups/{HANDLER}/lag"),
        );
        assert_eq!(status, 200, "{lag}");
        if lag["lag"] == 0 && events_in(http, server, "out") == events {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not drained within {limit:?}: {lag}, {} of {events} in out",
            events_in(http, server, "out")
        );
        if moved.elapsed() > Duration::from_secs(5) {
            pass_leases(http, server, None);
            moved = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every delivery of the group is acked: no lag, nothing pending, leased
/// or waiting for a retry, no dead letter.
#[track_caller]
pub(crate) fn assert_all_acked(http: &Agent, server: &Server) {
    let path = format!("/v1/streams/in/groups/{HANDLER}");
    let (status, lag) = get(http, server, &format!("{path}/lag"));
    assert_eq!(status, 200, "{lag}");
    for field in ["lag", "pending", "inflight", "waiting_retry"] {
        assert_eq!(lag[field], 0, "{field}: {lag}");
    }
    let (status, info) = get(http, server, &path);
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["dead_letters"], 0, "{info}");
}

/// No line of the logs at `paths` says a thread panicked.
#[track_caller]
pub(crate) fn assert_no_panic(paths: &[PathBuf]) {
    for path in paths {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            !log.contains("panicked"),
            "{} shows a panic:\n{log}",
            path.display()
        );
    }
}

/// The SIGKILL loop: a producer appends to `in` and the transform handler
/// consumes while `rheo serve` (on `backend`) is killed with SIGKILL
/// `kills` times at random moments and started again on the same store.
/// Before each kill the test reads the group's frontiers and the
/// deliveries in the handler's log; after each start it moves the new
/// server's clock past the leases the killed one held. At the end every
/// event is stored once, acked, transformed once, and no delivery acked
/// before a kill came back after it.
pub(crate) fn sigkill_loop(what: &str, backend: Option<String>, kills: usize) {
    let started = Instant::now();
    let mut rng = Rng::seeded(what);
    let producer_seed = rng.next_u64();
    let dir = tempfile::tempdir().unwrap();
    let options = options(backend);
    let http = rheo_e2e::agent();
    let mut server = Server::start(dir.path(), &options);
    set_up_pipeline(&http, &server, 4);
    let target = Target::new(&server);
    let stop = AtomicBool::new(false);
    let mut rounds = Vec::new();
    let mut logs = Vec::new();
    let produced = std::thread::scope(|scope| {
        let _stop = SetOnDrop(&stop);
        let producer = scope.spawn(|| produce(&target, 0, &stop, producer_seed));
        for _ in 0..kills {
            std::thread::sleep(Duration::from_millis(rng.between(200, 1_500)));
            // The frontier first: whatever the log shows later was
            // delivered after it was read.
            let frontier_at_end = frontiers(&http, &server);
            let seen = deliveries(&http, &server);
            let clock = clock_now(&http, &server);
            std::thread::sleep(Duration::from_millis(rng.between(0, 50)));
            server.kill();
            rounds.push(Round {
                seen,
                frontier_at_end,
            });
            logs.push(server.log.clone());
            let restart = Instant::now();
            server = Server::start(dir.path(), &options);
            target.set(&server);
            pass_leases(&http, &server, Some(&clock));
            eprintln!(
                "{what}: restarted in {:.1} s",
                restart.elapsed().as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(rng.between(300, 1_000)));
        stop.store(true, Ordering::SeqCst);
        producer.join().expect("the producer")
    });
    let n = produced.events;
    let draining = Instant::now();
    eprintln!(
        "{what}: kills done after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    drain(&http, &server, n as u64, Duration::from_secs(120));
    eprintln!(
        "{what}: drained in {:.1} s",
        draining.elapsed().as_secs_f64()
    );
    rounds.push(Round {
        seen: deliveries(&http, &server),
        frontier_at_end: BTreeMap::new(),
    });
    logs.push(server.log.clone());

    assert_eq!(rounds.len(), kills + 1);
    let (seen, again) = assert_nothing_acked_came_back(&rounds);
    assert_each_once(&http, &server, "in", (0..n).map(|i| format!("e{i}")));
    assert_each_once(
        &http,
        &server,
        "out",
        (0..n).map(|i| format!("e{i}:transformed")),
    );
    assert_all_acked(&http, &server);
    assert_no_panic(&logs);
    println!(
        "{what}: {kills} kills, {n} events ({} batches resent, {} events found stored by a resend), \
         {seen} deliveries seen ({again} redeliveries), {:.1} s",
        produced.resent,
        produced.duplicates,
        started.elapsed().as_secs_f64()
    );
}

/// Whether `REQUIRE_BACKENDS` (set by CI) is set: a chaos test that cannot
/// set up its fault then fails instead of skipping.
pub(crate) fn backends_required() -> bool {
    std::env::var("REQUIRE_BACKENDS").is_ok_and(|v| !v.trim().is_empty())
}

/// Skips (`None`, with the reason printed) or, under `REQUIRE_BACKENDS`,
/// fails.
pub(crate) fn skip<T>(why: &str) -> Option<T> {
    assert!(!backends_required(), "{why}, but REQUIRE_BACKENDS is set");
    eprintln!("skipping: {why}");
    None
}

/// A size-limited tmpfs mounted on a folder, unmounted when dropped (also
/// when the test fails).
#[derive(Debug)]
pub(crate) struct Tmpfs {
    pub(crate) path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`mount -o size=…`) on `path` (created);
    /// `None` (skip) when that is not possible here.
    pub(crate) fn mount(path: &Path, size: &str) -> Option<Tmpfs> {
        let uid = Command::new("id").arg("-u").output().ok()?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return skip("mounting a tmpfs needs root");
        }
        std::fs::create_dir_all(path).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .output()
            .expect("run mount");
        if !out.status.success() {
            return skip(&format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Some(Tmpfs {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.path)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            // Still busy (a process holding a file): detach it now, it goes
            // once the last file is closed.
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
    }
}

/// Runs `sql` with `psql` on `url`; its output, or why it failed.
pub(crate) fn psql(url: &str, sql: &str) -> Result<String, String> {
    let out = Command::new("psql")
        .args([
            url,
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .output()
        .map_err(|e| format!("cannot run psql: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// A PostgreSQL database of a test's own, which the test can close to
/// every connection without disturbing other tests on the same server;
/// dropped with the value.
#[derive(Debug)]
pub(crate) struct PgDatabase {
    admin: String,
    name: String,
    /// The URL `rheo serve` uses.
    pub(crate) url: String,
}

impl PgDatabase {
    /// Creates a fresh database on the server of `admin` (a URL whose
    /// database stays open); `None` (skip) without `psql`.
    pub(crate) fn create(admin: &str) -> Option<PgDatabase> {
        if Command::new("psql").arg("--version").output().is_err() {
            return skip("the PostgreSQL outage test needs psql");
        }
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let name = format!("rheo_chaos_{secs}_{:08x}", super::rand_suffix());
        psql(admin, &format!("CREATE DATABASE {name}")).expect("CREATE DATABASE");
        let (base, query) = match admin.split_once('?') {
            Some((base, query)) => (base, format!("?{query}")),
            None => (admin, String::new()),
        };
        let host_end = base
            .find("://")
            .map(|i| i + 3)
            .and_then(|start| base[start..].find('/').map(|i| start + i))
            .unwrap_or(base.len());
        let url = format!("{}/{name}{query}", &base[..host_end]);
        Some(PgDatabase {
            admin: admin.to_owned(),
            name,
            url,
        })
    }

    /// Makes the database unavailable: no new connection is accepted and
    /// every open one is closed by the server.
    pub(crate) fn close(&self) {
        let name = &self.name;
        psql(
            &self.admin,
            &format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"),
        )
        .expect("ALTER DATABASE");
        psql(
            &self.admin,
            &format!(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE datname = '{name}' AND pid <> pg_backend_pid()"
            ),
        )
        .expect("pg_terminate_backend");
    }

    /// Accepts connections again.
    pub(crate) fn open(&self) {
        psql(
            &self.admin,
            &format!("ALTER DATABASE {} ALLOW_CONNECTIONS true", self.name),
        )
        .expect("ALTER DATABASE");
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let _ = psql(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}
