//! The cuts of the partition tests (`docs/cluster.md#a-node-cut-off-from-the-store`):
//! two `rheo serve` nodes on one store, node `a` reaching it through a
//! [`Proxy`] that cuts its traffic silently (nothing forwarded, sockets
//! left open) and heals it; node `b` reaches the store directly.
//!
//! Each cut checks what the issue asks: `b`'s fetch and append succeed
//! within 15 s of the cut; `a`'s request in flight at the cut answers
//! within the store timeout (plus a margin for a loaded machine) with the
//! code that says whether its write landed, and so do its other requests;
//! once healed, `a` serves again without a restart, its old leases are
//! stale where `b` took over, and nothing is lost or stored twice. Leases
//! pass by moving the test clocks; only the store timeouts (short here:
//! [`STORE_TIMEOUT_MS`]) are waited for.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rheo_e2e::{Server, ServerOptions, agent};
use serde_json::{Value, json};
use ureq::Agent;

use super::proxy::{Proxy, Trigger};
use super::support::chaos::{assert_each_once, clock_now, pass_leases};
use super::support::{Answer, code, get, lease_ref, post};

/// The store timeout of both nodes: every number of the store's own
/// (PostgreSQL's idle-in-transaction timeout: half of it) follows.
pub(crate) const STORE_TIMEOUT_MS: u64 = 4_000;
/// Slack for a loaded machine on top of a deadline.
const MARGIN: Duration = Duration::from_secs(3);
/// The other node's fetch and append succeed within this of a cut.
pub(crate) const PEERS_WITHIN: Duration = Duration::from_secs(15);
/// Lease of every fetch here, in ms of the test clocks.
const LEASE_MS: u64 = 5_000;

/// Node `a` (through the proxy) and node `b` on one store, stream `s`
/// (two partitions) with group `g`, and the ids appended to `s`.
pub(crate) struct Pair {
    pub(crate) a: Server,
    pub(crate) b: Server,
    pub(crate) proxy: Proxy,
    pub(crate) http: Agent,
    ids: Mutex<BTreeSet<String>>,
    _dirs: [tempfile::TempDir; 2],
}

impl Pair {
    /// `b` on `direct`, then `a` on `proxied` through `proxy`.
    pub(crate) fn start(direct: &str, proxied: &str, proxy: Proxy) -> Pair {
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let node = |id: &str, url: &str, dir: &tempfile::TempDir| {
            let options = ServerOptions {
                backend: Some(url.to_owned()),
                test_clock: true,
                args: [
                    "--node-id",
                    id,
                    "--store-timeout-ms",
                    &STORE_TIMEOUT_MS.to_string(),
                    "--handler-log-lines",
                    "100000",
                ]
                .map(str::to_owned)
                .to_vec(),
                ..ServerOptions::default()
            };
            Server::start(dir.path(), &options)
        };
        let b = node("b", direct, &dirs[0]);
        let a = node("a", proxied, &dirs[1]);
        let http = agent();
        let (status, body) = post(
            &http,
            &b,
            "/v1/streams",
            &json!({"name": "s", "partition_count": 2}),
        );
        assert_eq!(status, 201, "{body}");
        let (status, body) = post(&http, &b, "/v1/streams/s/groups", &json!({"name": "g"}));
        assert_eq!(status, 201, "{body}");
        Pair {
            a,
            b,
            proxy,
            http,
            ids: Mutex::default(),
            _dirs: dirs,
        }
    }

    /// `POST /v1/streams/s/events` on `server`: event `id` in partition 0.
    fn append(&self, server: &Server, id: &str) -> Answer {
        let event = json!({"id": id, "partition": 0, "payload": {}});
        post(&self.http, server, "/v1/streams/s/events", &event)
    }

    /// `POST …/fetch` on `server` as `consumer`.
    fn fetch(&self, server: &Server, consumer: &str) -> Answer {
        let body = json!({"consumer_id": consumer, "limit": 100, "lease_ms": LEASE_MS});
        post(&self.http, server, "/v1/streams/s/groups/g/fetch", &body)
    }

    /// Remembers that `s` holds `id`.
    fn stored(&self, id: &str) {
        self.ids.lock().unwrap().insert(id.to_owned());
    }

    /// `b` appends `id` (asserting it is new) and remembers it.
    fn b_appends(&self, id: &str) {
        let (status, body) = self.append(&self.b, id);
        assert_eq!(status, 201, "{body}");
        self.stored(id);
    }

    /// Waits until `a` answers a read again (no restart).
    fn a_serves_again(&self) {
        let back = Instant::now();
        let answer = until_ok("a serves again", back, Duration::from_secs(30), || {
            get(&self.http, &self.a, "/v1/streams/s/groups/g/lag")
        });
        println!(
            "a serves again {:.1} s after the heal: {answer}",
            secs(back)
        );
    }
}

/// Calls `call` until it answers 2xx, while it answers 503; fails when it
/// answers anything else, or not within `limit` of `since`.
#[track_caller]
fn until_ok(
    what: &str,
    since: Instant,
    limit: Duration,
    mut call: impl FnMut() -> Answer,
) -> Value {
    loop {
        let (status, body) = call();
        match status {
            200..=299 => return body,
            503 if since.elapsed() < limit => std::thread::sleep(Duration::from_millis(50)),
            _ => panic!("{what}: {status} {body} after {:.1} s", secs(since)),
        }
    }
}

fn secs(since: Instant) -> f64 {
    since.elapsed().as_secs_f64()
}

/// `call` on another thread, timed.
fn timed(call: impl FnOnce() -> Answer + Send) -> impl FnOnce() -> (Answer, Duration) {
    move || {
        let started = Instant::now();
        let answer = call();
        (answer, started.elapsed())
    }
}

/// What `a`'s request in flight at the cut answered: 503 with `expected`,
/// within the store timeout and a margin.
#[track_caller]
fn assert_in_flight_answer(((status, body), took): (Answer, Duration), expected: &str) {
    assert_eq!((status, code(&body)), (503, expected), "{body}");
    let limit = Duration::from_millis(STORE_TIMEOUT_MS) + MARGIN;
    assert!(
        took <= limit,
        "a answered after {took:?}, more than {limit:?}"
    );
    println!(
        "a's request in flight answered {expected} after {:.1} s",
        took.as_secs_f64()
    );
}

/// Waits (at most 20 s) for the proxy to cut `a`'s request `call`; when it did.
fn wait_for_cut(p: &Pair, call: &std::thread::ScopedJoinHandle<'_, (Answer, Duration)>) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(at) = p.proxy.cut_at() {
            return at;
        }
        assert!(
            !call.is_finished() && Instant::now() < deadline,
            "the proxy did not cut a's request (finished: {})",
            call.is_finished()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `b` fetches and appends within [`PEERS_WITHIN`] of `cut`.
fn peers_proceed(p: &Pair, cut: Instant, id: &str) {
    until_ok("b fetches", cut, PEERS_WITHIN, || p.fetch(&p.b, "b"));
    let fetched = secs(cut);
    until_ok("b appends", cut, PEERS_WITHIN, || p.append(&p.b, id));
    p.stored(id);
    println!(
        "b fetched {fetched:.1} s and appended {:.1} s after the cut",
        secs(cut)
    );
}

/// A cut while `a` is idle: `a` answers 503 in time, `b` carries on and
/// takes over `a`'s lease once it expires, and after the heal `a`'s
/// settle of that lease is stale.
pub(crate) fn cut_while_idle(p: &Pair) {
    p.b_appends("idle-1");
    let (status, body) = p.fetch(&p.a, "a");
    assert_eq!(status, 200, "{body}");
    let lease = body["leases"][0].clone();
    assert_eq!(lease["event_id"], "idle-1", "{body}");

    p.proxy.cut();
    let cut = Instant::now();
    std::thread::scope(|scope| {
        let reading = scope.spawn(timed(|| get(&p.http, &p.a, "/v1/streams/s/groups/g/lag")));
        peers_proceed(p, cut, "idle-2");
        assert_in_flight_answer(reading.join().unwrap(), "backend_unavailable");
    });
    // a's clock reads without the store; b's moves past a's lease.
    let a_now = clock_now(&p.http, &p.a);
    pass_leases(&p.http, &p.b, Some(&a_now));
    let taken = until_ok("b takes a's lease", cut, PEERS_WITHIN, || {
        p.fetch(&p.b, "b")
    });
    assert!(
        taken["leases"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["event_id"] == "idle-1"),
        "{taken}"
    );

    p.proxy.heal();
    p.a_serves_again();
    let (status, body) = post(
        &p.http,
        &p.a,
        "/v1/streams/s/groups/g/ack",
        &lease_ref(&lease, &json!({})),
    );
    assert_eq!((status, code(&body)), (409, "stale_lease"), "{body}");
}

/// A cut while `a` runs a fetch, at `trigger`: `a`'s fetch answers
/// `expected`, `b` fetches and appends meanwhile.
pub(crate) fn cut_inside_fetch(p: &Pair, trigger: Trigger, expected: &str) {
    for id in ["f-1", "f-2", "f-3"] {
        p.b_appends(id);
    }
    p.proxy.arm(trigger);
    std::thread::scope(|scope| {
        let fetching = scope.spawn(timed(|| p.fetch(&p.a, "a-cut")));
        let cut = wait_for_cut(p, &fetching);
        peers_proceed(p, cut, "f-peer");
        assert_in_flight_answer(fetching.join().unwrap(), expected);
    });
    p.proxy.heal();
    p.a_serves_again();
}

/// A cut while `a` appends `id`, at `trigger`: `a` answers `expected`,
/// `b` appends (to the same partition) and fetches meanwhile, and `id`
/// was stored — once — exactly when `landed`.
pub(crate) fn cut_inside_append(
    p: &Pair,
    trigger: Trigger,
    expected: &str,
    id: &str,
    landed: bool,
) {
    p.proxy.arm(trigger);
    std::thread::scope(|scope| {
        let appending = scope.spawn(timed(|| p.append(&p.a, id)));
        let cut = wait_for_cut(p, &appending);
        peers_proceed(p, cut, &format!("{id}-peer"));
        assert_in_flight_answer(appending.join().unwrap(), expected);
    });
    // Sent again through b: a duplicate exactly when a's append landed.
    let (status, body) = p.append(&p.b, id);
    assert!(status == 200 || status == 201, "{status} {body}");
    assert_eq!(body["duplicate"], landed, "{id}: {body}");
    p.stored(id);
    p.proxy.heal();
    p.a_serves_again();
    let (status, body) = p.append(&p.a, id);
    assert_eq!((status, &body["duplicate"]), (200, &json!(true)), "{body}");
}

/// After the cuts: `s` holds every id once, and `b` drains the group
/// (moving its clock past every lease): nothing was lost.
pub(crate) fn nothing_lost(p: &Pair) {
    let ids = p.ids.lock().unwrap().clone();
    assert_each_once(&p.http, &p.b, "s", ids);
    let started = Instant::now();
    loop {
        let (status, lag) = get(&p.http, &p.b, "/v1/streams/s/groups/g/lag");
        assert_eq!(status, 200, "{lag}");
        if lag["lag"] == 0 {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not drained: {lag}"
        );
        pass_leases(&p.http, &p.b, Some(&clock_now(&p.http, &p.a)));
        let (status, body) = p.fetch(&p.b, "b");
        assert_eq!(status, 200, "{body}");
        for lease in body["leases"].as_array().unwrap() {
            let (status, body) = post(
                &p.http,
                &p.b,
                "/v1/streams/s/groups/g/ack",
                &lease_ref(lease, &json!({})),
            );
            assert_eq!(status, 200, "{body}");
        }
    }
}
