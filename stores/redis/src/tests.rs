//! The Redis backend against a real Redis (`TEST_REDIS_URL`): URL parsing,
//! the guarded script, streams, appends (idempotent, gap-free under
//! concurrent writers), reads, claims, settles, rewinds and queries, the
//! conformance suites and a lost connection. Each test (each conformance
//! check too) keys under a prefix of its own, deleted when its backend is
//! dropped; prefixes left by a crashed run are deleted by the first test of
//! the next run after an hour.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use super::{Applied, Cas, RedisBackend, RedisUrl};
use rheo_core::backend::conformance::{code, service_url};
use rheo_core::backend::{
    CreateStream, DeadLettersRequest, FetchRequest, Partitions, ReadRequest, Redrive, Replay,
    ResetRequest,
};
use rheo_core::clock::FrozenClock;
use rheo_core::model::{
    ConsumerId, Direction, EventId, EventInput, GroupName, GroupSpec, Lease, LeaseId, OrderBy,
    OrderField, Query, QueryCursor, SettleOp, SettleTarget, Settlement, StartAfter, StartPosition,
    StreamName, Timestamp, parse_where,
};

const START: Timestamp = Timestamp::from_millis(1_767_225_600_000);

/// The store timeout of the tests' backends: the server's default.
const TIMEOUT: std::time::Duration = rheo_core::backend::DEFAULT_STORE_TIMEOUT;

/// A backend under a fresh prefix, or `None` (with a note) when
/// `TEST_REDIS_URL` is unset and Redis is not required.
async fn backend() -> Option<RedisBackend> {
    Some(clocked().await?.0)
}

/// The same, with its frozen clock.
async fn clocked() -> Option<(RedisBackend, Arc<FrozenClock>)> {
    let clock = FrozenClock::new(START);
    Some((connect_fresh(clock.clone()).await?, clock))
}

/// A backend on `TEST_REDIS_URL` under a fresh prefix whose keys are
/// deleted when the backend's last clone is dropped.
async fn connect_fresh(clock: rheo_core::clock::SharedClock) -> Option<RedisBackend> {
    let url = service_url("TEST_REDIS_URL", "redis")?;
    let prefix = fresh_prefix(&url).await;
    let sep = if url.contains('?') { '&' } else { '?' };
    let mut backend = RedisBackend::connect(&format!("{url}{sep}prefix={prefix}"), clock, TIMEOUT)
        .await
        .expect("connect to TEST_REDIS_URL");
    backend.janitor = Some(Arc::new(janitor(&url, backend.keys.all())));
    // As `rheo serve` opens it.
    backend.migrate_layout().await.expect("migrate");
    Some(backend)
}

pub(super) use rheo_core::backend::conformance::Janitor;

/// Deletes every key matching `pattern` when dropped (the end of a test,
/// passed or failed).
fn janitor(url: &str, pattern: String) -> Janitor {
    let url = url.to_owned();
    Janitor::new(move || async move {
        let Ok(client) = redis::Client::open(url.as_str()) else {
            return;
        };
        let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
            return;
        };
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(&pattern)
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        for chunk in keys.chunks(500) {
            let _: redis::RedisResult<()> =
                redis::cmd("DEL").arg(chunk).query_async(&mut conn).await;
        }
    })
}

/// A prefix of its own for one test (`rheo_t_<unix secs>_<random>`); the
/// first call of a run deletes the keys of prefixes older than an hour.
async fn fresh_prefix(url: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    drop_stale_prefixes(url, now).await;
    format!("rheo_t_{now}_{:08x}", rand::random::<u32>())
}

/// Deletes the keys of test prefixes older than an hour (once per run).
async fn drop_stale_prefixes(url: &str, now: u64) {
    static CLEANED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    CLEANED
        .get_or_init(|| async {
            let client = redis::Client::open(url).expect("a Redis URL");
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .expect("connect to TEST_REDIS_URL");
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("rheo_t_*")
                .query_async(&mut conn)
                .await
                .expect("list test keys");
            let stale: Vec<&String> = keys
                .iter()
                .filter(|k| {
                    let created: u64 = k
                        .split('_')
                        .nth(2)
                        .and_then(|t| t.parse().ok())
                        .unwrap_or(0);
                    created + 3600 < now
                })
                .collect();
            if !stale.is_empty() {
                let _: redis::RedisResult<()> =
                    redis::cmd("DEL").arg(&stale).query_async(&mut conn).await;
            }
        })
        .await;
}

fn sn(s: &str) -> StreamName {
    StreamName::parse(s).unwrap()
}

fn with_id(id: &str, partition: u32) -> EventInput {
    EventInput {
        id: Some(EventId::parse(id).unwrap()),
        partition: Some(partition),
        ..EventInput::default()
    }
}

async fn stream(b: &RedisBackend, name: &str, partitions: u32) -> StreamName {
    let name = sn(name);
    b.create_stream(CreateStream {
        name: name.clone(),
        partition_count: partitions,
        retention: None,
    })
    .await
    .expect("create stream");
    name
}

/// Creates group `name` on `s`.
async fn group(b: &RedisBackend, s: &StreamName, name: &str) -> GroupName {
    let spec = GroupSpec::new(GroupName::parse(name).unwrap());
    b.create_group(s, spec).await.unwrap().name
}

#[test]
fn urls_keep_their_prefix_apart_from_what_the_driver_sees() {
    let u = RedisUrl::parse("redis://127.0.0.1:6379/2?prefix=tenant-a").unwrap();
    assert_eq!(
        (u.connect.as_str(), u.prefix.as_str()),
        ("redis://127.0.0.1:6379/2", "tenant-a")
    );
    let u = RedisUrl::parse("redis://h?protocol=resp3&prefix=x.y").unwrap();
    assert_eq!(
        (u.connect.as_str(), u.prefix.as_str()),
        ("redis://h?protocol=resp3", "x.y")
    );
    let u = RedisUrl::parse("redis://h:1").unwrap();
    assert_eq!(u.prefix, "rheo", "the default prefix");
    for bad in [
        "redis://h?prefix=",
        "redis://h?prefix=a:b",
        "redis://h?prefix=a{b}",
        "mongodb://h",
    ] {
        assert_eq!(code(RedisUrl::parse(bad)), "invalid", "{bad}");
    }
}

#[tokio::test]
async fn the_script_writes_everything_or_nothing() {
    let Some(b) = backend().await else { return };
    let key = format!("{}:scratch", b.keys.prefix);
    let mut first = Cas::default();
    first.hget_is(&key, "a", None);
    first.write(&["HSET", &key, "a", "1"]);
    first.write(&["HSET", &key, "b", "2"]);
    assert_eq!(b.apply(&first).await.unwrap(), Applied::Yes);

    let mut stale = Cas::default();
    stale.hget_is(&key, "b", Some("2"));
    stale.hget_is(&key, "a", None);
    stale.write(&["HSET", &key, "c", "3"]);
    assert_eq!(b.apply(&stale).await.unwrap(), Applied::Conflict);

    let mut refused = Cas::default();
    refused.write(&["HSET", &key, "d", "4"]);
    refused.write(&["FLUSHALL"]);
    assert!(
        b.apply(&refused).await.is_err(),
        "a command outside the list"
    );

    let all: std::collections::BTreeMap<String, String> = b
        .run(&redis::cmd("HGETALL").arg(&key).clone(), super::Phase::Read)
        .await
        .unwrap();
    assert_eq!(
        all,
        [("a".into(), "1".into()), ("b".into(), "2".into())].into()
    );
}

/// The guard on a key rate's TATs (`rates.rs`): of two writers that read
/// one TAT, the second finds it moved and writes nothing, so a token is
/// never spent twice; the set's time to live only grows.
#[tokio::test]
async fn a_tat_guard_lets_one_of_two_writers_through() {
    let Some(b) = backend().await else { return };
    let key = format!("{}:tats", b.keys.prefix);
    let ttl = |b: RedisBackend, key: String| async move {
        let cmd = redis::cmd("PTTL").arg(key).clone();
        b.run::<i64>(&cmd, super::Phase::Read).await.unwrap()
    };
    // Both read: no TAT of "a", 1767225600000000 for "b".
    let mut seed = Cas::default();
    seed.write(&["ZADD", &key, "1767225600000000", "b"]);
    assert_eq!(b.apply(&seed).await.unwrap(), Applied::Yes);
    let writer = |tat: &str, ttl: &str| {
        let mut cas = Cas::default();
        cas.zscore_is(&key, "a", None);
        cas.zscore_is(&key, "b", Some(1_767_225_600_000_000));
        cas.write(&["ZREMRANGEBYSCORE", &key, "-inf", "(0"]);
        cas.write(&["ZADD", &key, tat, "a", tat, "b"]);
        cas.write(&["PEXPIRE>", &key, ttl]);
        cas
    };
    let (one, two) = (
        writer("1767225601000000", "60000"),
        writer("1767225602000000", "1000"),
    );
    assert_eq!(b.apply(&one).await.unwrap(), Applied::Yes);
    assert_eq!(b.apply(&two).await.unwrap(), Applied::Conflict);
    let cmd = redis::cmd("ZRANGE")
        .arg(&key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .clone();
    let read: Vec<(String, String)> = b.run(&cmd, super::Phase::Read).await.unwrap();
    let scores: Vec<(String, f64)> = read
        .into_iter()
        .map(|(m, s)| (m, s.parse().unwrap()))
        .collect();
    let tat = 1_767_225_601_000_000.0;
    assert_eq!(scores, [("a".to_owned(), tat), ("b".to_owned(), tat)]);
    assert!(ttl(b.clone(), key.clone()).await > 59_000);
    let mut shorter = Cas::default();
    shorter.zscore_is(&key, "a", Some(1_767_225_601_000_000));
    shorter.write(&["PEXPIRE>", &key, "1000"]);
    assert_eq!(b.apply(&shorter).await.unwrap(), Applied::Yes);
    assert!(ttl(b.clone(), key.clone()).await > 59_000, "it only grows");
}

#[tokio::test]
async fn streams_are_created_once_listed_sorted_and_found() {
    let Some(b) = backend().await else { return };
    let zed = stream(&b, "zed", 3).await;
    let alpha = stream(&b, "alpha", 1).await;
    let again = b
        .create_stream(CreateStream {
            name: zed.clone(),
            partition_count: 1,
            retention: None,
        })
        .await;
    assert_eq!(code(again), "already_exists");
    let bad = b
        .create_stream(CreateStream {
            name: sn("none"),
            partition_count: 0,
            retention: None,
        })
        .await;
    assert_eq!(code(bad), "invalid_partition_count");

    let listed = b.list_streams().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["alpha", "zed"]);
    let got = b.get_stream(&zed).await.unwrap();
    assert_eq!(
        (got.partition_count, got.created_at, got.high_watermarks),
        (3, START, vec![0, 0, 0])
    );
    assert_eq!(b.get_stream(&alpha).await.unwrap().partition_count, 1);
    assert_eq!(code(b.get_stream(&sn("nope")).await), "stream_not_found");
}

#[tokio::test]
async fn appends_number_each_partition_and_keep_ids_once() {
    let Some(b) = backend().await else { return };
    let s = stream(&b, "orders", 2).await;
    let payload = json!({"big": 18446744073709551617u128, "name": "a"});
    let first = EventInput {
        event_type: Some("order.created".into()),
        key: Some("customer-1".into()),
        payload: payload.as_object().cloned().unwrap(),
        ..with_id("e1", 1)
    };
    let out = b
        .append(
            &s,
            vec![first, with_id("e2", 1), with_id("e3", 0), with_id("e1", 0)],
        )
        .await
        .unwrap();
    let got: Vec<(&str, u32, u64, bool)> = out
        .iter()
        .map(|a| {
            (
                a.event.id.as_str(),
                a.event.partition,
                a.event.sequence,
                a.duplicate,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("e1", 1, 1, false),
            ("e2", 1, 2, false),
            ("e3", 0, 1, false),
            ("e1", 1, 1, true)
        ],
        "a repeated id in one batch is a duplicate of the first"
    );

    let again = b
        .append(&s, vec![with_id("e2", 0), with_id("e4", 1)])
        .await
        .unwrap();
    assert!(again[0].duplicate);
    assert_eq!((again[0].event.partition, again[0].event.sequence), (1, 2));
    assert_eq!((again[1].event.sequence, again[1].duplicate), (3, false));
    assert_eq!(b.get_stream(&s).await.unwrap().high_watermarks, [1, 3]);

    let read = b
        .read(ReadRequest {
            stream: s.clone(),
            partition: 1,
            after: 0,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(read.len(), 3);
    assert_eq!(read[0], *out[0].event, "read back exactly as appended");
    assert_eq!(read[0].payload["big"].to_string(), "18446744073709551617");
    assert_eq!(read[0].timestamp, START);
    let tail = b
        .read(ReadRequest {
            stream: s.clone(),
            partition: 1,
            after: 1,
            limit: 1,
        })
        .await
        .unwrap();
    assert_eq!(
        tail.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["e2"]
    );

    assert_eq!(
        code(b.append(&sn("nope"), vec![EventInput::default()]).await),
        "stream_not_found"
    );
    let out_of_range = b.append(&s, vec![with_id("e9", 2)]).await;
    assert_eq!(code(out_of_range), "invalid_partition");
    let bad_read = b
        .read(ReadRequest {
            stream: s.clone(),
            partition: 2,
            after: 0,
            limit: 1,
        })
        .await;
    assert_eq!(code(bad_read), "invalid_partition");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_leave_no_gap_and_no_duplicate() {
    let Some(b) = backend().await else { return };
    let s = stream(&b, "busy", 1).await;
    // Two "nodes" (their own connections) and a shared set of ids.
    let other = RedisBackend::connect_like(&b).await;
    let writers = [Arc::new(b.clone()), Arc::new(other)];
    let mut tasks = Vec::new();
    for (w, node) in writers.iter().enumerate() {
        for round in 0..20 {
            let (node, s) = (Arc::clone(node), s.clone());
            tasks.push(tokio::spawn(async move {
                let batch = (0..5)
                    .map(|i| with_id(&format!("id-{round}-{i}"), 0))
                    .chain([EventInput::default()])
                    .collect();
                let _ = w;
                node.append(&s, batch).await.expect("append")
            }));
        }
    }
    let mut stored = 0;
    for task in tasks {
        stored += task.await.unwrap().iter().filter(|a| !a.duplicate).count();
    }
    // 20 rounds × 5 shared ids + 40 generated ids.
    assert_eq!(stored, 140, "each shared id stored once");
    assert_eq!(
        sequences(&b, &s).await,
        (1..=140).collect::<Vec<_>>(),
        "no gap, no repeat"
    );
}

/// The sequences partition 0 of `s` holds (its first 1,000).
async fn sequences(b: &RedisBackend, s: &StreamName) -> Vec<u64> {
    let read = b
        .read(ReadRequest {
            stream: s.clone(),
            partition: 0,
            after: 0,
            limit: 1000,
        })
        .await
        .unwrap();
    read.iter().map(|e| e.sequence).collect()
}

#[tokio::test]
async fn groups_start_where_the_policy_says_and_are_listed_sorted() {
    let Some(b) = backend().await else { return };
    let s = stream(&b, "orders", 2).await;
    // Partition 0: sequences 1..=3 at START+30, +10, +20; partition 1 empty.
    let at = |ms: i64| EventInput {
        timestamp: Some(Timestamp::from_millis(START.as_millis() + ms)),
        partition: Some(0),
        ..EventInput::default()
    };
    b.append(&s, vec![at(30), at(10), at(20)]).await.unwrap();
    let cursors = async |g: &str| -> Vec<u64> {
        let key = b.keys.cursors(&s, &GroupName::parse(g).unwrap());
        let all: std::collections::BTreeMap<u32, u64> = b
            .run(&redis::cmd("HGETALL").arg(key).clone(), super::Phase::Read)
            .await
            .unwrap();
        all.into_values().collect()
    };
    let spec = |name: &str, start: StartPosition| GroupSpec {
        start,
        ..GroupSpec::new(GroupName::parse(name).unwrap())
    };
    let cases = [
        ("all", StartPosition::Beginning, vec![1, 1]),
        (
            "after",
            StartPosition::After(StartAfter::All(2)),
            vec![3, 3],
        ),
        (
            "mapped",
            StartPosition::After(StartAfter::PerPartition([(1, 5)].into())),
            vec![1, 6],
        ),
        // The lowest sequence stamped at or after +15 is 1 (stamped +30);
        // an empty partition starts at its end.
        (
            "timed",
            StartPosition::At(Timestamp::from_millis(START.as_millis() + 15)),
            vec![1, 1],
        ),
        (
            "late",
            StartPosition::At(Timestamp::from_millis(START.as_millis() + 31)),
            vec![4, 1],
        ),
    ];
    for (name, start, expected) in cases {
        let group = b.create_group(&s, spec(name, start)).await.unwrap();
        assert_eq!((group.created_at, group.max_attempts), (START, 5), "{name}");
        assert_eq!(cursors(name).await, expected, "{name}");
    }
    let twice = b
        .create_group(&s, spec("all", StartPosition::Beginning))
        .await;
    assert_eq!(code(twice), "already_exists");
    let outside = StartPosition::After(StartAfter::PerPartition([(2, 1)].into()));
    assert_eq!(
        code(b.create_group(&s, spec("x", outside)).await),
        "invalid_partition"
    );
    let nowhere = b
        .create_group(&sn("nope"), spec("x", StartPosition::Beginning))
        .await;
    assert_eq!(code(nowhere), "stream_not_found");
    let mut bad = spec("bad", StartPosition::Beginning);
    bad.max_attempts = 0;
    assert_eq!(code(b.create_group(&s, bad).await), "invalid");

    let mut retrying = spec("retrying", StartPosition::Beginning);
    retrying.retry_backoff_ms = vec![100, 2000];
    b.create_group(&s, retrying).await.unwrap();
    let listed = b.list_groups(&s).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(
        names,
        ["after", "all", "late", "mapped", "retrying", "timed"]
    );
    assert_eq!(listed[4].retry_backoff_ms, [100, 2000]);
    assert_eq!(code(b.list_groups(&sn("nope")).await), "stream_not_found");
}

/// The time index keeps the first sequence of each run of equal
/// timestamps in an append (`RedisBackend::write_event`); the lowest
/// sequence stamped at or after an instant is found among them, before
/// and after trims that cut a run.
#[tokio::test]
async fn the_time_index_keeps_the_first_of_each_run_and_finds_every_start() {
    use rheo_core::backend::{Backend, TrimRequest};
    let Some(b) = backend().await else { return };
    let s = stream(&b, "stamped", 1).await;
    let at = |ms: i64| EventInput {
        timestamp: Some(Timestamp::from_millis(START.as_millis() + ms)),
        ..EventInput::default()
    };
    // Sequences 1..=6 stamped +10 +10 +20 +20 +20 +10 in one append, then
    // 7 and 8 at +20 in another.
    let stamps = [10, 10, 20, 20, 20, 10];
    b.append(&s, stamps.map(at).to_vec()).await.unwrap();
    b.append(&s, vec![at(20), at(20)]).await.unwrap();
    let times = b.keys.times(&s, 0);
    let mut kept = members(&b, times.clone()).await;
    kept.sort_by_key(|m| m.parse::<u64>().unwrap());
    assert_eq!(kept, ["1", "3", "6", "7"]);
    let first = async |ms: i64| {
        let t = Timestamp::from_millis(START.as_millis() + ms);
        b.first_at_or_after(&s, 0, t).await.unwrap()
    };
    // Every event's own stamp, checked against a scan of all of them.
    let all = [10, 10, 20, 20, 20, 10, 20, 20];
    let scan = |ms: i64| {
        (1u64..)
            .zip(all)
            .find(|(_, t)| *t >= ms)
            .map(|(seq, _)| seq)
    };
    for ms in [0, 10, 11, 20, 21] {
        assert_eq!(first(ms).await, scan(ms), "+{ms}");
    }
    // A trim before 2 cuts the run 1..=2; one before 5 cuts 3..=5.
    let trim = async |before: u64| {
        let req = TrimRequest {
            stream: s.clone(),
            partition: 0,
            before,
            limit: 1000,
        };
        Backend::trim(&b, req).await.expect("trim");
    };
    trim(2).await;
    assert_eq!(
        (first(0).await, first(10).await, first(20).await),
        (Some(2), Some(2), Some(3))
    );
    trim(5).await;
    // 5 (+20) and 6 (+10) are left of the first append, 7 and 8 (+20).
    assert_eq!(
        (first(0).await, first(10).await, first(20).await),
        (Some(5), Some(5), Some(5))
    );
    trim(6).await;
    assert_eq!(
        (first(10).await, first(11).await, first(21).await),
        (Some(6), Some(7), None)
    );
    let mut kept = members(&b, times).await;
    kept.sort_by_key(|m| m.parse::<u64>().unwrap());
    assert_eq!(kept, ["6", "7"]);
}

/// Stream `s` (`partitions`), group `g` (`max_attempts`), `per` events in
/// every partition.
async fn consuming(
    b: &RedisBackend,
    partitions: u32,
    per: u32,
    max_attempts: u32,
) -> (StreamName, GroupName) {
    let s = stream(b, "s", partitions).await;
    let inputs = (0..partitions)
        .flat_map(|p| (0..per).map(move |_| p))
        .map(|p| EventInput {
            partition: Some(p),
            ..EventInput::default()
        })
        .collect();
    b.append(&s, inputs).await.unwrap();
    let g = GroupName::parse("g").unwrap();
    let mut spec = GroupSpec::new(g.clone());
    spec.max_attempts = max_attempts;
    b.create_group(&s, spec).await.unwrap();
    (s, g)
}

async fn fetch(b: &RedisBackend, s: &StreamName, g: &GroupName, limit: u32) -> Vec<Lease> {
    b.fetch(fetch_req(s, g, limit)).await.expect("fetch")
}

fn positions(leases: &[Lease]) -> Vec<(u32, u64, u32)> {
    leases
        .iter()
        .map(|l| (l.event.partition, l.event.sequence, l.attempt))
        .collect()
}

async fn settle(b: &RedisBackend, l: &Lease, op: SettleOp) -> &'static str {
    let item = Settlement {
        target: l.target(),
        op,
    };
    let mut results = b.settle(&l.stream, &l.group, vec![item]).await.unwrap();
    results.pop().unwrap().map_or_else(|e| e.code(), |()| "ok")
}

/// The dead set's members, in order.
async fn dead(b: &RedisBackend, s: &StreamName, g: &GroupName) -> Vec<String> {
    b.run(
        &redis::cmd("ZRANGE")
            .arg(b.keys.dead(s, g))
            .arg(0)
            .arg(-1)
            .clone(),
        super::Phase::Read,
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn fetches_share_the_limit_across_partitions_and_skip_held_leases() {
    let Some(b) = backend().await else { return };
    let (s, g) = consuming(&b, 2, 3, 5).await;
    let first = fetch(&b, &s, &g, 3).await;
    assert_eq!(positions(&first), [(0, 1, 1), (0, 2, 1), (1, 1, 1)]);
    let leases: std::collections::HashSet<&LeaseId> = first.iter().map(|l| &l.lease_id).collect();
    assert_eq!(leases.len(), 3, "a fresh lease id per lease");
    let receipts: Vec<Option<&str>> = first.iter().map(|l| l.receipt.as_deref()).collect();
    assert_eq!(
        receipts,
        [Some("1-0"), Some("2-0"), Some("1-0")],
        "the receipt is the entry id"
    );
    assert_eq!(
        (first[0].leased_at, first[0].expires_at),
        (START, START.add_ms(1000))
    );
    // The rotation starts the next fetch at the other partition.
    let second = fetch(&b, &s, &g, 10).await;
    assert_eq!(positions(&second), [(0, 3, 1), (1, 2, 1), (1, 3, 1)]);
    assert!(fetch(&b, &s, &g, 10).await.is_empty(), "everything is held");
    let nowhere = b
        .fetch(FetchRequest {
            group: GroupName::parse("nope").unwrap(),
            ..FetchRequest {
                stream: s.clone(),
                group: g.clone(),
                limit: 1,
                consumer_id: ConsumerId::parse("c1").unwrap(),
                lease_ms: 1000,
                partitions: Partitions::All,
            }
        })
        .await;
    assert_eq!(code(nowhere), "group_not_found");
}

#[tokio::test]
async fn settles_follow_the_policy_and_are_fenced() {
    let Some((b, clock)) = clocked().await else {
        return;
    };
    let (s, g) = consuming(&b, 1, 5, 2).await;
    let l = fetch(&b, &s, &g, 5).await;
    let nack = |delay_ms| SettleOp::Nack {
        reason: Some("later".into()),
        delay_ms,
    };
    assert_eq!(settle(&b, &l[0], SettleOp::Ack).await, "ok");
    assert_eq!(
        settle(&b, &l[0], SettleOp::Ack).await,
        "stale_lease",
        "acked once"
    );
    assert_eq!(settle(&b, &l[1], nack(Some(500))).await, "ok");
    assert_eq!(
        settle(
            &b,
            &l[2],
            SettleOp::Reject {
                reason: Some("bad".into())
            }
        )
        .await,
        "ok"
    );
    assert_eq!(settle(&b, &l[3], nack(None)).await, "ok");
    let mut forged = l[4].target();
    forged.lease_id = LeaseId::parse("forged").unwrap();
    let mut mismatched = l[4].target();
    mismatched.receipt = Some("not-it".into());
    let batch = vec![
        Settlement::ack(forged),
        Settlement::ack(mismatched),
        Settlement::ack(l[4].target()),
        Settlement::ack(l[4].target()),
    ];
    let results: Vec<&str> = b
        .settle(&s, &g, batch)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.map_or_else(|e| e.code(), |()| "ok"))
        .collect();
    assert_eq!(
        results,
        ["stale_lease", "receipt_mismatch", "ok", "stale_lease"]
    );

    // The immediate nack is back at once; the delayed one when due.
    assert_eq!(positions(&fetch(&b, &s, &g, 10).await), [(0, 4, 2)]);
    clock.advance(500);
    let again = fetch(&b, &s, &g, 10).await;
    assert_eq!(positions(&again), [(0, 2, 2)]);
    // Its second nack is past max_attempts 2: a dead letter.
    assert_eq!(settle(&b, &again[0], nack(None)).await, "ok");
    assert_eq!(
        dead(&b, &s, &g).await,
        [
            super::claims::dead_member(0, 2),
            super::claims::dead_member(0, 3)
        ]
    );
}

#[tokio::test]
async fn expired_leases_come_back_and_an_expired_last_attempt_is_dead() {
    let Some((b, clock)) = clocked().await else {
        return;
    };
    let (s, g) = consuming(&b, 1, 2, 2).await;
    let first = fetch(&b, &s, &g, 10).await;
    // Renewed in one call: the first lease outlives its first expiry.
    let renewed = b
        .renew_many(&s, &g, vec![first[0].target(), first[1].target()], 5000)
        .await
        .unwrap();
    assert!(renewed.iter().all(Result::is_ok));
    clock.advance(1500);
    assert!(
        fetch(&b, &s, &g, 10).await.is_empty(),
        "renewed leases are held"
    );
    clock.advance(4000);
    let second = fetch(&b, &s, &g, 10).await;
    assert_eq!(positions(&second), [(0, 1, 2), (0, 2, 2)]);
    let stale = b
        .renew_many(&s, &g, vec![first[0].target()], 1000)
        .await
        .unwrap();
    assert_eq!(stale[0].as_ref().map_err(|e| e.code()), Err("stale_lease"));
    assert_eq!(code(settle_err(&b, &first[0]).await), "stale_lease");
    // The second attempt was the last: expiring, it is dead, not claimed.
    clock.advance(1000);
    assert!(fetch(&b, &s, &g, 10).await.is_empty());
    assert_eq!(dead(&b, &s, &g).await.len(), 2);
    let record: String = b
        .run(
            &redis::cmd("HGET")
                .arg(b.keys.deliveries(&s, &g, 0))
                .arg(1)
                .clone(),
            super::Phase::Read,
        )
        .await
        .unwrap();
    let record = super::claims::Delivery::decode(&record).unwrap();
    assert_eq!(record.reason.as_deref(), Some("max_attempts_expired"));
}

#[tokio::test]
async fn lag_group_info_and_the_next_due_time_follow_the_deliveries() {
    let Some((b, clock)) = clocked().await else {
        return;
    };
    let (s, g) = consuming(&b, 2, 3, 5).await;
    let all = Partitions::All;
    let lag = b.lag(&s, &g, &all).await.unwrap();
    assert_eq!(
        (lag.lag, lag.pending, lag.inflight, lag.waiting_retry),
        (6, 6, 0, 0)
    );
    assert_eq!(
        b.next_due(&s, &g, &all).await.unwrap(),
        Some(START),
        "events never delivered"
    );

    let l = fetch(&b, &s, &g, 6).await;
    assert_eq!(
        b.next_due(&s, &g, &all).await.unwrap(),
        Some(START.add_ms(1000))
    );
    let by_pos = |p: u32, q: u64| {
        l.iter()
            .find(|x| (x.event.partition, x.event.sequence) == (p, q))
            .unwrap()
    };
    assert_eq!(settle(&b, by_pos(0, 1), SettleOp::Ack).await, "ok");
    assert_eq!(settle(&b, by_pos(0, 3), SettleOp::Ack).await, "ok");
    let nack = SettleOp::Nack {
        reason: None,
        delay_ms: Some(300),
    };
    assert_eq!(settle(&b, by_pos(1, 1), nack).await, "ok");
    assert_eq!(
        settle(&b, by_pos(1, 2), SettleOp::Reject { reason: None }).await,
        "ok"
    );
    clock.advance(100);

    let lag = b.lag(&s, &g, &all).await.unwrap();
    // Partition 0: 2 still leased, frontier 1; partition 1: 1 waiting a
    // retry, 1 dead (settled), 1 leased, frontier 0.
    assert_eq!(
        (lag.partitions[&0].frontier, lag.partitions[&1].frontier),
        (1, 0)
    );
    assert_eq!(
        (lag.lag, lag.pending, lag.inflight, lag.waiting_retry),
        (5, 0, 2, 1)
    );
    assert_eq!(lag.oldest_unacked_age_ms, Some(100));
    let only_0 = b.lag(&s, &g, &Partitions::Only(vec![0])).await.unwrap();
    assert_eq!(only_0.lag, 2);
    assert_eq!(
        b.next_due(&s, &g, &all).await.unwrap(),
        Some(START.add_ms(300)),
        "the retry"
    );

    let info = b.group_info(&s, &g).await.unwrap();
    assert_eq!(
        (info.inflight, info.dead_letters, info.max_attempts),
        (2, 1, 5)
    );
    assert_eq!(info.cursors, [(0, 4), (1, 4)].into());
    assert_eq!(info.lag, lag);
    assert_eq!(
        code(b.group_info(&s, &GroupName::parse("nope").unwrap()).await),
        "group_not_found"
    );
    b.ping().await.unwrap();
}

#[tokio::test]
async fn dead_letters_page_in_sequence_order_and_redrive_with_fresh_attempts() {
    let Some(b) = backend().await else { return };
    let (s, g) = consuming(&b, 2, 2, 1).await;
    for l in fetch(&b, &s, &g, 10).await {
        let reason = Some(format!("bad {}", l.event.sequence));
        assert_eq!(settle(&b, &l, SettleOp::Reject { reason }).await, "ok");
    }
    let page = |after: Option<EventId>| {
        let req = DeadLettersRequest {
            stream: s.clone(),
            group: g.clone(),
            limit: 3,
            after,
        };
        b.dead_letters(req)
    };
    let first = page(None).await.unwrap();
    let got: Vec<(u64, u32, &str)> = first
        .dead_letters
        .iter()
        .map(|d| (d.sequence, d.partition, d.reason.as_str()))
        .collect();
    assert_eq!(got, [(1, 0, "bad 1"), (1, 1, "bad 1"), (2, 0, "bad 2")]);
    assert_eq!(first.dead_letters[0].attempt, 1);
    assert_eq!(first.dead_letters[0].dead_lettered_at, START);
    let second = page(first.next.clone()).await.unwrap();
    let rest: Vec<(u64, u32)> = second
        .dead_letters
        .iter()
        .map(|d| (d.sequence, d.partition))
        .collect();
    assert_eq!((rest, second.next), (vec![(2, 1)], None));
    let unknown = page(Some(EventId::parse("nope").unwrap())).await;
    assert_eq!(code(unknown), "cursor_not_found");

    let one = first.dead_letters[0].event_id.clone();
    assert_eq!(
        b.redrive(&s, &g, Redrive::Events(vec![one.clone()]))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        b.redrive(&s, &g, Redrive::Events(vec![one])).await.unwrap(),
        0,
        "no longer dead"
    );
    let missing = b
        .redrive(&s, &g, Redrive::Events(vec![EventId::parse("zz").unwrap()]))
        .await;
    assert_eq!(code(missing), "invalid");
    assert_eq!(b.redrive(&s, &g, Redrive::All).await.unwrap(), 3);
    let info = b.group_info(&s, &g).await.unwrap();
    assert_eq!((info.dead_letters, info.lag.pending), (0, 4), "fresh again");
    let again = fetch(&b, &s, &g, 10).await;
    assert_eq!(
        again.iter().map(|l| l.attempt).collect::<Vec<_>>(),
        [1, 1, 1, 1]
    );
}

/// The fields of a partition's delivery records.
async fn record_fields(b: &RedisBackend, s: &StreamName, g: &GroupName) -> Vec<String> {
    let mut fields: Vec<String> = b
        .run(
            &redis::cmd("HKEYS").arg(b.keys.deliveries(s, g, 0)).clone(),
            super::Phase::Read,
        )
        .await
        .unwrap();
    fields.sort_unstable();
    fields
}

#[tokio::test]
async fn an_ack_keeps_a_record_only_after_a_retry_and_replay_counts_on() {
    let Some((b, clock)) = clocked().await else {
        return;
    };
    let (s, g) = consuming(&b, 1, 3, 5).await;
    let first = fetch(&b, &s, &g, 3).await;
    // Sequence 2 expires and is claimed again: attempt 2.
    for l in [&first[0], &first[2]] {
        assert_eq!(settle(&b, l, SettleOp::Ack).await, "ok");
    }
    clock.advance(1000);
    let again = fetch(&b, &s, &g, 3).await;
    assert_eq!(positions(&again), [(0, 2, 2)]);
    // All acks of leases this node fetched: one unread, guarded batch.
    let acks = vec![Settlement::ack(again[0].target())];
    assert!(b.settle(&s, &g, acks).await.unwrap()[0].is_ok());
    assert_eq!(
        record_fields(&b, &s, &g).await,
        ["2"],
        "a first-attempt ack leaves no record; a later one keeps its attempts"
    );
    // The old lease of sequence 2 is stale, on the guarded path too.
    assert_eq!(settle(&b, &first[1], SettleOp::Ack).await, "stale_lease");

    let all = Replay::FromSequence {
        after: 0,
        partitions: Partitions::All,
    };
    assert_eq!(b.replay(&s, &g, all).await.unwrap(), 3);
    let replayed = fetch(&b, &s, &g, 3).await;
    assert_eq!(
        positions(&replayed),
        [(0, 1, 2), (0, 2, 3), (0, 3, 2)],
        "attempts count on"
    );
}

#[tokio::test]
async fn replay_reopens_and_reset_starts_over() {
    let Some(b) = backend().await else { return };
    let s = stream(&b, "s", 1).await;
    let typed = |t: &str| EventInput {
        event_type: Some(t.into()),
        ..EventInput::default()
    };
    let appended = b
        .append(
            &s,
            vec![typed("a"), typed("b"), typed("a"), typed("b"), typed("a")],
        )
        .await
        .unwrap();
    let g = GroupName::parse("g").unwrap();
    let mut spec = GroupSpec::new(g.clone());
    spec.start = StartPosition::After(StartAfter::All(1));
    b.create_group(&s, spec).await.unwrap();
    for l in fetch(&b, &s, &g, 10).await {
        assert_eq!(settle(&b, &l, SettleOp::Ack).await, "ok");
    }
    let seqs = |leases: &[Lease]| {
        leases
            .iter()
            .map(|l| (l.event.sequence, l.attempt))
            .collect::<Vec<_>>()
    };

    let after_3 = Replay::FromSequence {
        after: 3,
        partitions: Partitions::All,
    };
    assert_eq!(b.replay(&s, &g, after_3).await.unwrap(), 2);
    assert_eq!(
        b.lag(&s, &g, &Partitions::All).await.unwrap().partitions[&0].frontier,
        3
    );
    assert_eq!(seqs(&fetch(&b, &s, &g, 10).await), [(4, 2), (5, 2)]);

    // Sequence 1 lies before the group's start: replaying it by id gives
    // the group a delivery for it.
    let by_id = Replay::EventIds(vec![appended[0].event.id.clone()]);
    assert_eq!(b.replay(&s, &g, by_id).await.unwrap(), 1);
    let by_type = Replay::Query(Query {
        filters: parse_where(&json!({"type": "a"})).unwrap(),
        limit: 1,
        ..Query::default()
    });
    assert_eq!(
        b.replay(&s, &g, by_type).await.unwrap(),
        2,
        "3 and 5 (held: reopened); 1 already open"
    );
    assert_eq!(seqs(&fetch(&b, &s, &g, 10).await), [(1, 1), (3, 2), (5, 3)]);

    b.reset(ResetRequest::to_the_beginning(&s, &g))
        .await
        .unwrap();
    let info = b.group_info(&s, &g).await.unwrap();
    assert_eq!((info.cursors[&0], info.inflight, info.lag.lag), (1, 0, 5));
    assert_eq!(
        seqs(&fetch(&b, &s, &g, 10).await),
        [(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]
    );
}

#[tokio::test]
async fn queries_filter_order_and_page_like_every_backend() {
    let Some(b) = backend().await else { return };
    let s = stream(&b, "s", 2).await;
    let inputs = (0..12u32)
        .map(|i| EventInput {
            event_type: Some(if i % 3 == 0 { "x" } else { "y" }.into()),
            partition: Some(i % 2),
            timestamp: Some(Timestamp::from_millis(
                START.as_millis() + i64::from(100 - i),
            )),
            ..EventInput::default()
        })
        .collect();
    b.append(&s, inputs).await.unwrap();
    let where_x = parse_where(&json!({"type": "x"})).unwrap();
    let all = b
        .query(
            &s,
            &Query {
                filters: where_x.clone(),
                limit: 100,
                ..Query::default()
            },
        )
        .await
        .unwrap();
    let got: Vec<(u32, u64)> = all
        .events
        .iter()
        .map(|e| (e.partition, e.sequence))
        .collect();
    // Types x: i = 0, 3, 6, 9 → (0,1), (1,2), (0,4), (1,5); sequence order
    // across partitions.
    assert_eq!(got, [(0, 1), (1, 2), (0, 4), (1, 5)]);
    assert_eq!(all.next_cursor, None);

    let newest_first = Query {
        filters: where_x,
        order: OrderBy {
            field: OrderField::Sequence,
            dir: Direction::Desc,
        },
        limit: 2,
        ..Query::default()
    };
    let page = b.query(&s, &newest_first).await.unwrap();
    let got: Vec<(u32, u64)> = page
        .events
        .iter()
        .map(|e| (e.partition, e.sequence))
        .collect();
    assert_eq!(got, [(1, 5), (0, 4)]);
    let cursor =
        QueryCursor::decode(page.next_cursor.as_deref().unwrap(), newest_first.order).unwrap();
    let next = b
        .query(
            &s,
            &Query {
                cursor: Some(cursor),
                ..newest_first.clone()
            },
        )
        .await
        .unwrap();
    let got: Vec<(u32, u64)> = next
        .events
        .iter()
        .map(|e| (e.partition, e.sequence))
        .collect();
    assert_eq!(got, [(1, 2), (0, 1)]);

    let by_time = Query {
        order: OrderBy {
            field: OrderField::Timestamp,
            dir: Direction::Asc,
        },
        limit: 3,
        ..Query::default()
    };
    let page = b.query(&s, &by_time).await.unwrap();
    // The latest appended carry the earliest stamps: i = 11, 10, 9.
    let got: Vec<(u32, u64)> = page
        .events
        .iter()
        .map(|e| (e.partition, e.sequence))
        .collect();
    assert_eq!(got, [(1, 6), (0, 6), (1, 5)]);
    assert_eq!(
        code(b.query(&sn("nope"), &by_time).await),
        "stream_not_found"
    );
}

async fn settle_err(b: &RedisBackend, l: &Lease) -> rheo_core::backend::Result<()> {
    let item = Settlement::ack(SettleTarget { ..l.target() });
    b.settle(&l.stream, &l.group, vec![item])
        .await?
        .pop()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_claim_every_event_exactly_once() {
    let Some(b) = backend().await else { return };
    let (s, g) = consuming(&b, 3, 40, 5).await;
    let other = RedisBackend::connect_like(&b).await;
    let mut tasks = Vec::new();
    for node in [Arc::new(b.clone()), Arc::new(other)] {
        for _ in 0..3 {
            let (node, s, g) = (Arc::clone(&node), s.clone(), g.clone());
            tasks.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let leases = fetch(&node, &s, &g, 7).await;
                    if leases.is_empty() {
                        return mine;
                    }
                    for l in &leases {
                        assert_eq!(settle(&node, l, SettleOp::Ack).await, "ok");
                        mine.push((l.event.partition, l.event.sequence));
                    }
                }
            }));
        }
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all.sort_unstable();
    let expected: Vec<(u32, u64)> = (0..3).flat_map(|p| (1..=40).map(move |q| (p, q))).collect();
    assert_eq!(all, expected, "each event acked exactly once");
}

impl RedisBackend {
    /// Another backend on the same Redis and prefix (a second node).
    async fn connect_like(b: &RedisBackend) -> RedisBackend {
        let url = std::env::var("TEST_REDIS_URL").expect("set when a backend exists");
        let sep = if url.contains('?') { '&' } else { '?' };
        let url = format!("{url}{sep}prefix={}", b.keys.prefix);
        let mut other = RedisBackend::connect(&url, b.clock.clone(), TIMEOUT)
            .await
            .expect("connect");
        other.janitor = b.janitor.clone();
        other
    }

    /// A second node that reads the catalog generation on its first call
    /// only (and again an hour later): it keeps what it has seen.
    async fn stale_like(b: &RedisBackend) -> RedisBackend {
        RedisBackend::connect_like(b)
            .await
            .check_catalog_every(std::time::Duration::from_secs(3600))
    }
}

async fn factory(
    clock: rheo_core::clock::SharedClock,
) -> Option<Arc<dyn rheo_core::backend::Backend>> {
    Some(Arc::new(connect_fresh(clock).await?))
}

mod conformance {
    use super::factory;
    rheo_core::backend_conformance!(factory);
}

/// Two backends (two servers) on one Redis and prefix, each reading the
/// catalog generation before every use, so that each sees the other's
/// deletes at once.
async fn nodes(
    clock: rheo_core::clock::SharedClock,
) -> Option<(
    Arc<dyn rheo_core::backend::Backend>,
    Arc<dyn rheo_core::backend::Backend>,
)> {
    let every = std::time::Duration::ZERO;
    let a = connect_fresh(clock).await?.check_catalog_every(every);
    // One prefix: b shares a's janitor, so the keys go with the last node.
    let b = RedisBackend::connect_like(&a)
        .await
        .check_catalog_every(every);
    Some((Arc::new(a), Arc::new(b)))
}

mod nodes {
    use super::nodes;
    rheo_core::shared_store_conformance!(nodes);
}

/// Two servers' cluster stores on one prefix. The backends live as long
/// as the stores (each one's pub/sub listener carries the other's handler
/// writes), and the prefix's keys go with them.
#[allow(clippy::type_complexity)]
async fn cluster_pair(
    clock: rheo_core::clock::SharedClock,
) -> Option<(
    Arc<dyn rheo_core::cluster::ClusterStore>,
    Arc<dyn rheo_core::cluster::ClusterStore>,
    (
        Arc<dyn rheo_core::backend::Backend>,
        Arc<dyn rheo_core::backend::Backend>,
    ),
)> {
    let (a, b) = nodes(clock).await?;
    Some((
        a.cluster().expect("a cluster store"),
        b.cluster().expect("a cluster store"),
        (a, b),
    ))
}

rheo_core::cluster_conformance!(cluster_pair);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_connection_is_unavailable_or_ambiguous_and_recovers() {
    let Some(url) = service_url("TEST_REDIS_URL", "redis") else {
        return;
    };
    let prefix = fresh_prefix(&url).await;
    let janitor = janitor(&url, format!("{prefix}:*"));
    rheo_core::backend::conformance::outage::a_lost_connection_is_unavailable_or_ambiguous_and_recovers(
        &url,
        |relayed, clock| async move {
            let sep = if relayed.contains('?') { '&' } else { '?' };
            let url = format!("{relayed}{sep}prefix={prefix}");
            let b = RedisBackend::connect(&url, clock, TIMEOUT).await;
            Arc::new(b.expect("connect through the relay")) as Arc<dyn rheo_core::backend::Backend>
        },
    )
    .await;
    drop(janitor);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_connection_answers_within_the_deadline_and_recovers() {
    let Some(url) = service_url("TEST_REDIS_URL", "redis") else {
        return;
    };
    let prefix = fresh_prefix(&url).await;
    let janitor = janitor(&url, format!("{prefix}:*"));
    rheo_core::backend::conformance::outage::a_stalled_store_answers_within_the_deadline_and_recovers(
        &url,
        std::time::Duration::from_millis(1_500),
        |relayed, clock, timeout| async move {
            let sep = if relayed.contains('?') { '&' } else { '?' };
            let url = format!("{relayed}{sep}prefix={prefix}");
            let b = RedisBackend::connect(&url, clock, timeout).await;
            Arc::new(b.expect("connect through the relay")) as Arc<dyn rheo_core::backend::Backend>
        },
    )
    .await;
    drop(janitor);
}

/// A store written before gates were counted (an ordered group with a key
/// held and events parked behind it, and no gate counts): the migration
/// counts every gate, and the group goes on by the rules; running the
/// migrations again applies nothing.
#[tokio::test]
async fn the_gate_count_migration_counts_a_store_written_without_them() {
    use rheo_core::model::{GroupOrdering, GroupSpec};
    let Some(b) = backend().await else { return };
    let s = stream(&b, "s", 1).await;
    let mut spec = GroupSpec::new(GroupName::parse("g").unwrap());
    spec.ordering = GroupOrdering::Key;
    let g = b.create_group(&s, spec).await.unwrap().name;
    let inputs = ["a", "a", "a", "b"]
        .iter()
        .map(|k| EventInput {
            partition: Some(0),
            key: Some((*k).to_owned()),
            ..EventInput::default()
        })
        .collect();
    b.append(&s, inputs).await.unwrap();
    let first = fetch(&b, &s, &g, 10).await;
    assert_eq!(
        positions(&first),
        [(0, 1, 1), (0, 4, 1)],
        "a's 2 and 3 parked"
    );

    // As an older version left it: no counts, no migrations recorded.
    let counts = b.keys.counts(&s, &g, 0);
    let mut conn = b.conn.clone();
    let _: () = redis::cmd("DEL")
        .arg(&counts)
        .arg(b.keys.migrations())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(b.migrate_layout().await.unwrap(), ["0001_gate_counts"]);
    let rebuilt: BTreeMap<String, u64> = redis::cmd("HGETALL")
        .arg(&counts)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(rebuilt, BTreeMap::from([("a".into(), 3), ("b".into(), 1)]));
    assert!(b.migrate_layout().await.unwrap().is_empty(), "applied once");

    // The group goes on: each ack lets the key's next through, in order.
    assert_eq!(settle(&b, &first[1], SettleOp::Ack).await, "ok");
    let mut order = Vec::new();
    let mut lease = first[0].clone();
    loop {
        assert_eq!(settle(&b, &lease, SettleOp::Ack).await, "ok");
        let next = fetch(&b, &s, &g, 10).await;
        if next.is_empty() {
            break;
        }
        assert_eq!(next.len(), 1, "one of a at a time");
        order.push(next[0].event.sequence);
        lease = next[0].clone();
    }
    assert_eq!(order, [2, 3]);
    let left: BTreeMap<String, u64> = redis::cmd("HGETALL")
        .arg(&counts)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(left.is_empty(), "every gate closed: {left:?}");
}

/// A layout step a newer rheo recorded is unknown here, and refused.
#[tokio::test]
async fn a_layout_step_this_build_lacks_is_unknown_and_refused() {
    let Some(b) = backend().await else { return };
    let status = b.layout_status().await.expect("status");
    assert_eq!(status.applied, ["0001_gate_counts"]);
    assert!(
        status.pending.is_empty() && status.unknown.is_empty(),
        "{status:?}"
    );
    let record = redis::cmd("HSET")
        .arg(b.keys.migrations())
        .arg("9999_future")
        .arg(0)
        .clone();
    b.run::<i64>(&record, super::Phase::Write)
        .await
        .expect("record a future step");
    let status = b.layout_status().await.expect("status");
    assert_eq!(status.unknown, ["9999_future"]);
    let refused = status
        .check_not_newer()
        .expect_err("a newer store")
        .to_string();
    assert!(refused.contains("at migration 9999_future"), "{refused}");
    assert!(
        refused.contains("its newest is 0001_gate_counts"),
        "{refused}"
    );
}

/// The keys under `b`'s prefix that match `pattern` (after the prefix and
/// `:`), by `SCAN`.
async fn scan(b: &RedisBackend, pattern: &str) -> Vec<String> {
    let mut conn = b.conn.clone();
    let pattern = format!("{}:{pattern}", b.keys.prefix);
    let (mut cursor, mut keys) = (0u64, Vec::new());
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .expect("scan");
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Whether stream `s` is in the streams hash (and group `g` in its groups
/// hash).
async fn listed(b: &RedisBackend, s: &StreamName, g: Option<&GroupName>) -> bool {
    let (key, field) = match g {
        None => (b.keys.streams(), s.as_str()),
        Some(g) => (b.keys.groups(s), g.as_str()),
    };
    let cmd = redis::cmd("HEXISTS").arg(key).arg(field).clone();
    b.run::<bool>(&cmd, super::Phase::Read).await.unwrap()
}

/// A group with every kind of state: leased, parked (under an ordering),
/// delayed and dead deliveries, records of retried and acked ones.
async fn busy_group(b: &RedisBackend, s: &StreamName, name: &str, ordered: bool) -> GroupName {
    use rheo_core::model::GroupOrdering;
    let mut spec = GroupSpec::new(GroupName::parse(name).unwrap());
    if ordered {
        spec.ordering = GroupOrdering::Key;
    }
    let g = b.create_group(s, spec).await.unwrap().name;
    let leases = fetch(b, s, &g, 100).await;
    assert!(leases.len() >= 3, "{name}: {}", leases.len());
    let reject = SettleOp::Reject {
        reason: Some("no".into()),
    };
    let later = SettleOp::Nack {
        reason: None,
        delay_ms: Some(60_000),
    };
    assert_eq!(settle(b, &leases[0], reject).await, "ok");
    assert_eq!(settle(b, &leases[1], later).await, "ok");
    assert_eq!(settle(b, &leases[2], SettleOp::Ack).await, "ok");
    g
}

/// Twelve events on `s` (`e0` to `e11`, alternating between partitions 0
/// and 1, keys `a` then `b`), and two busy groups of them: `plain`, and
/// `ordered` by key.
async fn busy_groups(b: &RedisBackend, s: &StreamName) -> (GroupName, GroupName) {
    let inputs = (0..12)
        .map(|i| EventInput {
            id: Some(EventId::parse(format!("e{i}")).unwrap()),
            partition: Some(i % 2),
            key: Some(if i < 6 { "a" } else { "b" }.to_owned()),
            ..EventInput::default()
        })
        .collect();
    b.append(s, inputs).await.unwrap();
    let plain = busy_group(b, s, "plain", false).await;
    let ordered = busy_group(b, s, "ordered", true).await;
    (plain, ordered)
}

/// A delete removes every key of the group, or of the stream and all its
/// groups, under the prefix, and nothing of what it leaves alone.
#[tokio::test]
async fn a_delete_leaves_no_key_of_what_it_deleted() {
    use rheo_core::backend::{Backend, DeleteGroup, DeleteStream};
    let Some(b) = backend().await else { return };
    let s = stream(&b, "s", 2).await;
    let keep = stream(&b, "keep", 1).await;
    b.append(&keep, vec![EventInput::default()]).await.unwrap();
    let kept_group = group(&b, &keep, "g").await;
    let (plain, ordered) = busy_groups(&b, &s).await;
    let of_group = |g: &GroupName| format!("{{{s}}}:g:{g}:*");
    for g in [&plain, &ordered] {
        assert!(scan(&b, &of_group(g)).await.len() >= 8, "{g:?} has state");
    }
    let kept_keys = scan(&b, &format!("{{{keep}}}:*")).await;
    assert!(!kept_keys.is_empty());

    let req = DeleteGroup {
        stream: s.clone(),
        group: ordered.clone(),
        confirm: true,
    };
    Backend::delete_group(&b, req).await.expect("delete group");
    assert_eq!(scan(&b, &of_group(&ordered)).await, Vec::<String>::new());
    assert!(!listed(&b, &s, Some(&ordered)).await);
    assert!(
        !scan(&b, &of_group(&plain)).await.is_empty(),
        "the other group"
    );
    Backend::group_info(&b, &s, &plain)
        .await
        .expect("the other group goes on");

    let req = DeleteStream {
        stream: s.clone(),
        confirm: true,
    };
    Backend::delete_stream(&b, req)
        .await
        .expect("delete stream");
    assert_eq!(scan(&b, &format!("{{{s}}}:*")).await, Vec::<String>::new());
    assert!(!listed(&b, &s, None).await);
    assert_eq!(scan(&b, &format!("{{{keep}}}:*")).await, kept_keys);
    assert!(listed(&b, &keep, Some(&kept_group)).await);
    let generation: u64 = b
        .run(
            &redis::cmd("GET").arg(b.keys.generation()).clone(),
            super::Phase::Read,
        )
        .await
        .unwrap();
    assert_eq!(
        generation, 2,
        "each delete counts the catalog generation up"
    );
}

/// A node that still keeps a stream or group another node deleted (it has
/// not read the catalog generation since): every call on it answers not
/// found, and none writes a key of it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_keeps_what_another_deleted_finds_it_gone_and_writes_nothing() {
    use rheo_core::backend::{Backend, DeleteGroup, DeleteStream};
    let Some(a) = backend().await else { return };
    let b = RedisBackend::stale_like(&a).await;
    let g = GroupName::parse("g").unwrap();
    let group_calls = [
        "fetch",
        "ack",
        "nack",
        "renew",
        "renew_many",
        "lag",
        "group_info",
        "next_due",
        "dead_letters",
        "leases",
        "redrive",
        "replay",
        "reset",
    ];
    let stream_calls = [
        "append",
        "create_group",
        "read",
        "get_stream",
        "list_groups",
        "query",
    ];
    let mut round = 0;
    for whole_stream in [true, false] {
        let calls = group_calls
            .iter()
            .chain(whole_stream.then_some(&stream_calls).into_iter().flatten());
        for &call in calls {
            // b serves the stream and group (and keeps them), a deletes.
            round += 1;
            let s = stream(&a, &format!("s{round}"), 2).await;
            a.create_group(&s, GroupSpec::new(g.clone())).await.unwrap();
            let inputs = vec![with_id("x", 0), with_id("y", 1), with_id("z", 0)];
            Backend::append(&b, &s, inputs).await.unwrap();
            let held = Backend::fetch(&b, fetch_req(&s, &g, 2)).await.unwrap();
            Backend::fetch(&b, fetch_req(&s, &g, 1)).await.unwrap();
            let (dead_gone, expected) = if whole_stream {
                let req = DeleteStream {
                    stream: s.clone(),
                    confirm: true,
                };
                Backend::delete_stream(&a, req).await.unwrap();
                (format!("{{{s}}}:*"), "stream_not_found")
            } else {
                let req = DeleteGroup {
                    stream: s.clone(),
                    group: g.clone(),
                    confirm: true,
                };
                Backend::delete_group(&a, req).await.unwrap();
                (format!("{{{s}}}:g:{g}:*"), "group_not_found")
            };
            let item = |op| Settlement {
                target: held[0].target(),
                op,
            };
            let nack = SettleOp::Nack {
                reason: None,
                delay_ms: Some(0),
            };
            let all = Partitions::All;
            let r = match call {
                "fetch" => Backend::fetch(&b, fetch_req(&s, &g, 10)).await.map(drop),
                "ack" => Backend::settle(&b, &s, &g, vec![item(SettleOp::Ack)])
                    .await
                    .map(drop),
                "nack" => Backend::settle(&b, &s, &g, vec![item(nack)])
                    .await
                    .map(drop),
                "renew" => {
                    let req = rheo_core::backend::RenewRequest {
                        stream: s.clone(),
                        group: g.clone(),
                        target: held[0].target(),
                        lease_ms: 1000,
                    };
                    Backend::renew(&b, req).await.map(drop)
                }
                "renew_many" => {
                    let targets = vec![held[0].target(), held[1].target()];
                    (Backend::renew_many(&b, &s, &g, targets, 1000).await).map(drop)
                }
                "lag" => Backend::lag(&b, &s, &g, &all).await.map(drop),
                "group_info" => Backend::group_info(&b, &s, &g).await.map(drop),
                "next_due" => Backend::next_due(&b, &s, &g, &all).await.map(drop),
                "dead_letters" => {
                    let req = DeadLettersRequest {
                        stream: s.clone(),
                        group: g.clone(),
                        limit: 10,
                        after: None,
                    };
                    Backend::dead_letters(&b, req).await.map(drop)
                }
                "leases" => {
                    let req = rheo_core::backend::LeasesRequest {
                        stream: s.clone(),
                        group: g.clone(),
                        limit: 10,
                        after: None,
                    };
                    Backend::leases(&b, req).await.map(drop)
                }
                "redrive" => Backend::redrive(&b, &s, &g, Redrive::All).await.map(drop),
                "replay" => {
                    let how = Replay::FromSequence {
                        after: 0,
                        partitions: Partitions::All,
                    };
                    Backend::replay(&b, &s, &g, how).await.map(drop)
                }
                "reset" => Backend::reset(&b, ResetRequest::to_the_beginning(&s, &g)).await,
                "append" => Backend::append(&b, &s, vec![with_id("w", 1)])
                    .await
                    .map(drop),
                "create_group" => {
                    let spec = GroupSpec::new(GroupName::parse("h").unwrap());
                    Backend::create_group(&b, &s, spec).await.map(drop)
                }
                "read" => {
                    let req = ReadRequest {
                        stream: s.clone(),
                        partition: 0,
                        after: 0,
                        limit: 10,
                    };
                    Backend::read(&b, req).await.map(drop)
                }
                "get_stream" => Backend::get_stream(&b, &s).await.map(drop),
                "list_groups" => Backend::list_groups(&b, &s).await.map(drop),
                "query" => Backend::query(&b, &s, &Query::default()).await.map(drop),
                other => unreachable!("{other}"),
            };
            let what = if whole_stream { "stream" } else { "group" };
            assert_eq!(code(r), expected, "{call} on a deleted {what}");
            assert_eq!(
                scan(&a, &dead_gone).await,
                Vec::<String>::new(),
                "{call} on a deleted {what} wrote none of its keys"
            );
            assert!(!listed(&a, &s, (!whole_stream).then_some(&g)).await);
            if !whole_stream {
                let req = DeleteStream {
                    stream: s.clone(),
                    confirm: true,
                };
                Backend::delete_stream(&a, req).await.unwrap();
            }
        }
    }
}

/// A node that kept a group's view (a plan of its next fetch) and
/// settings serves a group created again under the name from its own
/// start, skipping nothing; likewise a stream created again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_created_again_is_served_afresh_by_a_node_that_kept_the_old() {
    use rheo_core::backend::{Backend, DeleteGroup, DeleteStream};
    let Some(a) = backend().await else { return };
    let b = RedisBackend::stale_like(&a).await;
    let s = stream(&a, "s", 1).await;
    let g = GroupName::parse("g").unwrap();
    a.create_group(&s, GroupSpec::new(g.clone())).await.unwrap();
    let inputs = (0..20).map(|_| with_id_less(0)).collect();
    a.append(&s, inputs).await.unwrap();
    // b's fetches leave it a view of the group to plan the next one on.
    for _ in 0..3 {
        for l in Backend::fetch(&b, fetch_req(&s, &g, 2)).await.unwrap() {
            assert_eq!(settle(&b, &l, SettleOp::Ack).await, "ok");
        }
    }
    let req = DeleteGroup {
        stream: s.clone(),
        group: g.clone(),
        confirm: true,
    };
    Backend::delete_group(&a, req).await.unwrap();
    a.create_group(&s, GroupSpec::new(g.clone())).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..20 {
        match Backend::fetch(&b, fetch_req(&s, &g, 2)).await {
            Ok(leases) if leases.is_empty() => break,
            Ok(leases) => {
                for l in leases {
                    assert_eq!(l.attempt, 1);
                    seen.push(l.event.sequence);
                    assert_eq!(settle(&b, &l, SettleOp::Ack).await, "ok");
                }
            }
            // What b kept was of the deleted group: once.
            Err(e) => assert!(seen.is_empty() && e.code() == "group_not_found", "{e}"),
        }
    }
    assert_eq!(seen, (1..=20).collect::<Vec<u64>>(), "nothing skipped");

    let req = DeleteStream {
        stream: s.clone(),
        confirm: true,
    };
    Backend::delete_stream(&a, req).await.unwrap();
    stream(&a, "s", 1).await;
    let again = match Backend::append(&b, &s, vec![with_id("x", 0)]).await {
        // What b kept was of the deleted stream: once.
        Err(e) if e.code() == "stream_not_found" => Backend::append(&b, &s, vec![with_id("x", 0)])
            .await
            .unwrap(),
        other => other.unwrap(),
    };
    assert_eq!((again[0].event.sequence, again[0].duplicate), (1, false));
    assert_eq!(a.get_stream(&s).await.unwrap().high_watermarks, [1]);
}

fn with_id_less(partition: u32) -> EventInput {
    EventInput {
        partition: Some(partition),
        ..EventInput::default()
    }
}

fn fetch_req(s: &StreamName, g: &GroupName, limit: u32) -> FetchRequest {
    FetchRequest {
        stream: s.clone(),
        group: g.clone(),
        limit,
        consumer_id: ConsumerId::parse("c1").unwrap(),
        lease_ms: 1000,
        partitions: Partitions::All,
    }
}

/// Every field of hash `key`.
async fn hash(b: &RedisBackend, key: String) -> BTreeMap<String, String> {
    let cmd = redis::cmd("HGETALL").arg(key).clone();
    b.run(&cmd, super::Phase::Read).await.unwrap()
}

/// Every member of sorted set `key`, in order.
async fn members(b: &RedisBackend, key: String) -> Vec<String> {
    let cmd = redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).clone();
    b.run(&cmd, super::Phase::Read).await.unwrap()
}

/// The log entries of partition `p` of `s`.
async fn log(b: &RedisBackend, s: &StreamName, p: u32) -> Vec<super::claims::Entry> {
    let cmd = redis::cmd("XRANGE")
        .arg(b.keys.log(s, p))
        .arg("-")
        .arg("+")
        .clone();
    b.run(&cmd, super::Phase::Read).await.unwrap()
}

/// What a group keeps of one partition: its records and every index.
async fn group_part(
    b: &RedisBackend,
    s: &StreamName,
    g: &GroupName,
    p: u32,
) -> (BTreeMap<String, String>, Vec<Vec<String>>) {
    let k = b.keys.partition(s, g, p);
    let mut indexes = Vec::new();
    for key in [
        k.ready, k.delayed, k.leased, k.open, k.fresh, k.paced, k.gates,
    ] {
        indexes.push(members(b, key).await);
    }
    (hash(b, k.records).await, indexes)
}

/// A trim removes the events' log entries, id and time index entries, and
/// every group's records and index entries of them but its dead letters'
/// (which keep the event's id); it leaves the other partition alone.
#[tokio::test]
async fn a_trim_leaves_no_key_or_field_of_the_events_it_removed() {
    use rheo_core::backend::{Backend, TrimRequest};
    let Some(b) = backend().await else { return };
    let s = stream(&b, "s", 2).await;
    // Dead, delayed, leased, acked and (ordered) parked deliveries.
    let (plain, ordered) = busy_groups(&b, &s).await;
    // Acked on a second attempt: a record of it stays.
    let retried = group(&b, &s, "retried").await;
    let again = SettleOp::Nack {
        reason: None,
        delay_ms: None,
    };
    for lease in fetch(&b, &s, &retried, 12).await {
        assert_eq!(settle(&b, &lease, again.clone()).await, "ok");
    }
    for lease in fetch(&b, &s, &retried, 12).await {
        assert_eq!(lease.attempt, 2);
        assert_eq!(settle(&b, &lease, SettleOp::Ack).await, "ok");
    }
    // Never fetched.
    let idle = group(&b, &s, "idle").await;
    let groups = [&plain, &ordered, &retried, &idle];
    let mut other_partition = Vec::new();
    for g in groups {
        other_partition.push(group_part(&b, &s, g, 1).await);
    }
    let other_log = log(&b, &s, 1).await;

    // Partition 0 holds e0, e2, …, e10 at sequences 1 to 6.
    let req = TrimRequest {
        stream: s.clone(),
        partition: 0,
        before: 5,
        limit: 1000,
    };
    let trimmed = Backend::trim(&b, req).await.expect("trim");
    assert_eq!((trimmed.removed, trimmed.first_sequence), (4, 5));
    let skipped: BTreeMap<String, u64> = (trimmed.skipped.iter())
        .map(|(g, n)| (g.as_str().to_owned(), *n))
        .collect();
    // plain: 2 (delayed) and 4 (leased); ordered: 2 (its head once 1 was
    // dead), 3 (parked) and 4 (delayed); idle: all four.
    let expected = [("idle", 4), ("ordered", 3), ("plain", 2)];
    assert_eq!(skipped, expected.map(|(g, n)| (g.to_owned(), n)).into());

    let entries = log(&b, &s, 0).await;
    let entries: Vec<&str> = entries.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(entries, ["5-0", "6-0"]);
    let ids = hash(&b, b.keys.ids(&s)).await;
    let mut kept: Vec<&str> = ids.keys().map(String::as_str).collect();
    kept.sort_by_key(|id| id[1..].parse::<u32>().unwrap());
    assert_eq!(kept, ["e1", "e3", "e5", "e7", "e8", "e9", "e10", "e11"]);
    // The time index keeps the first of each run of equal timestamps: the
    // six events were stamped alike, so 5 is the first kept.
    assert_eq!(members(&b, b.keys.times(&s, 0)).await, ["5"]);
    let hw = hash(&b, b.keys.high_watermarks(&s)).await;
    assert_eq!(hw.get("first:0").map(String::as_str), Some("5"));
    assert_eq!(hw.get("first:1"), None, "partition 1 starts at 1");

    let seq_of = |field: &str| -> u64 { field.parse().unwrap() };
    let seq_of_member = |m: &str| -> u64 { m.rsplit(':').next().unwrap().parse().unwrap() };
    for g in groups {
        let (records, indexes) = group_part(&b, &s, g, 0).await;
        for (field, record) in &records {
            if seq_of(field) < 5 {
                assert!(record.starts_with('D'), "{g:?}: {field} {record:?}");
            }
        }
        for index in &indexes {
            for m in index {
                assert!(seq_of_member(m) >= 5, "{g:?}: {m} in {indexes:?}");
            }
        }
        let cursors = hash(&b, b.keys.cursors(&s, g)).await;
        assert!(seq_of(&cursors["0"]) >= 5, "{g:?}: {cursors:?}");
    }
    for (g, before) in groups.iter().zip(other_partition) {
        assert_eq!(group_part(&b, &s, g, 1).await, before, "{g:?}");
    }
    let log_1 = log(&b, &s, 1).await;
    assert_eq!(log_1, other_log);

    // The dead letters of e0 stay, with the event's id.
    for g in [&plain, &ordered] {
        assert_eq!(dead(&b, &s, g).await[0], "0000000000000001:00000");
        let gone = hash(&b, b.keys.gone(&s, g)).await;
        let expected = [("0:1", "e0"), ("id:e0", "0:1")];
        assert_eq!(
            gone,
            expected.map(|(f, v)| (f.to_owned(), v.to_owned())).into()
        );
    }
    // The ordered group's gates: `a` lost all its open deliveries, `b`
    // its head (4), and let the next one (5) out.
    let k = b.keys.partition(&s, &ordered, 0);
    let gates = members(&b, k.gates.clone()).await;
    assert_eq!(gates.len(), 2, "{gates:?}");
    let counts = hash(&b, k.counts.clone()).await;
    assert_eq!(counts, [("b".to_owned(), "2".to_owned())].into());
    assert_eq!(members(&b, k.ready).await, ["5"]);
    let info = Backend::group_info(&b, &s, &ordered).await.unwrap();
    assert_eq!(info.skipped_by_retention, 3);
}

/// A retention set by one node changes nothing of the stream for another
/// node that keeps it: its writes, guarded on the stream's identity, go on.
#[tokio::test]
async fn a_retention_set_on_one_node_leaves_the_stream_to_another() {
    use rheo_core::backend::Backend;
    use rheo_core::model::Retention;
    let Some(a) = backend().await else { return };
    let b = RedisBackend::stale_like(&a).await;
    let s = stream(&a, "s", 1).await;
    let g = group(&a, &s, "g").await;
    b.append(&s, vec![EventInput::default()]).await.unwrap();
    let leases = fetch(&b, &s, &g, 10).await;
    let keep = Retention {
        max_events: Some(5),
        ..Retention::default()
    };
    let set = Backend::set_retention(&a, &s, Some(keep)).await.unwrap();
    assert_eq!(set.retention, Some(keep));
    b.append(&s, vec![EventInput::default()]).await.unwrap();
    assert_eq!(settle(&b, &leases[0], SettleOp::Ack).await, "ok");
    assert_eq!(positions(&fetch(&b, &s, &g, 10).await), [(0, 2, 1)]);
    assert_eq!(
        Backend::get_stream(&b, &s).await.unwrap().retention,
        Some(keep)
    );
    Backend::set_retention(&b, &s, None).await.unwrap();
    a.append(&s, vec![EventInput::default()]).await.unwrap();
    assert_eq!(Backend::get_stream(&a, &s).await.unwrap().retention, None);
}

/// Sixteen fetches of one group at once from one process take turns
/// (`RedisBackend::fetch_turn`) instead of racing: when they raced, each
/// read what the others were about to change and lost again and again,
/// and under `rheo-compare --clients 16` a fetch gave up ("lost 64 races
/// in a row"). Each consumer fetches and acks until nothing is left: no
/// call fails, and every event is acked exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_fetchers_of_one_partition_take_turns_and_never_give_up() {
    use rheo_core::backend::Backend as _;
    let Some(b) = backend().await else { return };
    let (s, g) = consuming(&b, 1, 960, 5).await;
    let b = Arc::new(b);
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (b, s, g) = (Arc::clone(&b), s.clone(), g.clone());
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            loop {
                let mut req = fetch_req(&s, &g, 10);
                req.consumer_id = ConsumerId::parse(format!("c{i}")).unwrap();
                req.lease_ms = 60_000;
                let leases = b.fetch(req).await.expect("a fetch among sixteen");
                if leases.is_empty() {
                    break;
                }
                for lease in &leases {
                    b.ack(&s, &g, lease.target()).await.expect("ack");
                    acked.push(lease.event.sequence);
                }
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for task in tasks {
        acked.extend(task.await.unwrap());
    }
    acked.sort_unstable();
    assert_eq!(
        acked,
        (1..=960).collect::<Vec<u64>>(),
        "each event acked once"
    );
    let lost = b.lost_races.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(lost, 0, "fetches of one process took turns");
}

/// Appends to one stream from one process take turns as fetches do: each
/// is guarded on the high watermarks it read, and sixteen at once made one
/// another read again (`rheo-compare --only redis-append --clients 16`:
/// p99 188 ms). No append loses a race, and the sequences have no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_appenders_to_one_stream_take_turns() {
    let Some(b) = backend().await else { return };
    let s = stream(&b, "appended", 1).await;
    let b = Arc::new(b);
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (b, s) = (Arc::clone(&b), s.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let batch = (0..5).map(|_| EventInput::default()).collect();
                b.append(&s, batch).await.expect("an append among sixteen");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let lost = b.lost_races.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(lost, 0, "appends of one process took turns");
    assert_eq!(
        sequences(&b, &s).await,
        (1..=800).collect::<Vec<_>>(),
        "no gap, no repeat"
    );
}

/// An append plans from the high watermarks this process's last append
/// wrote (one round trip, `RedisBackend::marks`). When another node
/// appended in between, the guard on them fails and the append reads them
/// and goes again at once: no gap, no repeat, and no race counted as
/// lost. A stream deleted and created again under its name starts over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_plan_from_kept_watermarks_and_read_them_when_another_node_moved_them() {
    let Some(a) = backend().await else { return };
    let b = RedisBackend::connect_like(&a).await;
    let s = stream(&a, "kept", 2).await;
    let on = |p: u32, n: usize| -> Vec<EventInput> {
        (0..n)
            .map(|_| EventInput {
                partition: Some(p),
                ..EventInput::default()
            })
            .collect()
    };
    a.append(&s, on(0, 3)).await.expect("a appends");
    a.append(&s, on(1, 1))
        .await
        .expect("a appends to the other partition");
    b.append(&s, on(0, 2)).await.expect("b appends");
    let appended = a.append(&s, on(0, 2)).await.expect("a appends again");
    let placed: Vec<u64> = appended.iter().map(|r| r.event.sequence).collect();
    assert_eq!(placed, [6, 7], "after b's two");
    a.append(&s, on(0, 1)).await.expect("and again");
    assert_eq!(sequences(&a, &s).await, (1..=8).collect::<Vec<_>>());
    let lost = a.lost_races.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(lost, 0, "old watermarks are not a lost race");

    let req = rheo_core::backend::DeleteStream {
        stream: s.clone(),
        confirm: true,
    };
    rheo_core::backend::Backend::delete_stream(&b, req)
        .await
        .expect("b deletes it");
    stream(&b, "kept", 2).await;
    // `a` has not read the catalog since: its first call finds the stream
    // it knew gone (docs/backends.md#redis), and forgets what it kept.
    assert_eq!(code(a.append(&s, on(0, 1)).await), "stream_not_found");
    let appended = a
        .append(&s, on(0, 1))
        .await
        .expect("a appends to the new one");
    assert_eq!(appended[0].event.sequence, 1);
}

/// A group with `flow.key_concurrency = n` on `s`.
async fn limited(b: &RedisBackend, s: &StreamName, name: &str, n: u32) -> GroupName {
    let mut spec = GroupSpec::new(GroupName::parse(name).unwrap());
    spec.flow = rheo_core::model::Flow {
        key_concurrency: Some(n),
        ..rheo_core::model::Flow::default()
    };
    b.create_group(s, spec).await.unwrap().name
}

/// A group's settings stored before flow control existed (no `flow`
/// field) read as no flow; one stored with a flow keeps it.
#[test]
fn settings_without_a_flow_read_as_none() {
    use super::groups::decode_group;
    let (s, g) = (sn("s"), GroupName::parse("g").unwrap());
    let old = json!({
        "max_attempts": 5,
        "retry_backoff_ms": [],
        "ordering": "none",
        "on_exhausted": "dead_letter",
        "created_at": 1,
        "incarnation": "00",
    });
    let group = decode_group(&s, g.clone(), &old.to_string()).unwrap();
    assert!(group.flow.is_off());
    let mut new = old.clone();
    new["flow"] = json!({"key_concurrency": 3});
    let group = decode_group(&s, g.clone(), &new.to_string()).unwrap();
    assert_eq!(group.flow.key_concurrency, Some(3));
    new["flow"] = json!({"key_concurency": 3});
    assert!(decode_group(&s, g, &new.to_string()).is_err());
}

/// A trim that closes heads of a limited key lets as many of its parked
/// deliveries through, counted and guarded like any gate change.
#[tokio::test]
async fn a_trim_lets_a_limited_key_through_for_each_head_it_closes() {
    use rheo_core::backend::{Backend, TrimRequest};
    let Some(b) = backend().await else { return };
    let s = stream(&b, "s", 1).await;
    let g = limited(&b, &s, "g", 2).await;
    append_keyed(&b, &s, &["a", "a", "a", "a", "a", "b"]).await;
    let first = fetch(&b, &s, &g, 10).await;
    assert_eq!(positions(&first), [(0, 1, 1), (0, 2, 1), (0, 6, 1)]);
    let k = b.keys.partition(&s, &g, 0);
    let counts = hash(&b, k.counts.clone()).await;
    let expected = [("a", "5"), ("b", "1")].map(|(g, n)| (g.to_owned(), n.to_owned()));
    assert_eq!(counts, expected.into());
    let req = TrimRequest {
        stream: s.clone(),
        partition: 0,
        before: 3,
        limit: 1000,
    };
    assert_eq!(Backend::trim(&b, req).await.expect("trim").removed, 2);
    let counts = hash(&b, k.counts.clone()).await;
    let expected = [("a", "3"), ("b", "1")].map(|(g, n)| (g.to_owned(), n.to_owned()));
    assert_eq!(counts, expected.into());
    assert_eq!(members(&b, k.ready.clone()).await, ["3", "4"]);
    let next = fetch(&b, &s, &g, 10).await;
    assert_eq!(positions(&next), [(0, 3, 1), (0, 4, 1)]);
    assert!(fetch(&b, &s, &g, 10).await.is_empty(), "a is full again");
}

/// Several heads of one limited key settled in one batch are decided
/// from one read of their gate: the acks, the retry that keeps its slot
/// and the parked deliveries let through, written at once.
#[tokio::test]
async fn one_batch_settles_several_heads_of_a_limited_key() {
    let Some(b) = backend().await else { return };
    let s = stream(&b, "s", 1).await;
    let g = limited(&b, &s, "g", 3).await;
    let keyed = EventInput {
        key: Some("a".to_owned()),
        ..EventInput::default()
    };
    b.append(&s, vec![keyed; 7]).await.unwrap();
    let first = fetch(&b, &s, &g, 10).await;
    assert_eq!(positions(&first), [(0, 1, 1), (0, 2, 1), (0, 3, 1)]);
    let again = SettleOp::Nack {
        reason: None,
        delay_ms: Some(60_000),
    };
    let items = vec![
        Settlement::ack(first[0].target()),
        Settlement {
            target: first[1].target(),
            op: again,
        },
        Settlement::ack(first[2].target()),
    ];
    let results = b.settle(&s, &g, items).await.unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    // 2 waits for its delay in its slot; 4 and 5 took the two freed.
    let next = fetch(&b, &s, &g, 10).await;
    assert_eq!(positions(&next), [(0, 4, 1), (0, 5, 1)]);
    let k = b.keys.partition(&s, &g, 0);
    assert_eq!(hash(&b, k.counts.clone()).await["a"], "5");
    // Both acked at once (the plain-ack path): 6 and 7 go out.
    let acks = next.iter().map(|l| Settlement::ack(l.target())).collect();
    let results = b.settle(&s, &g, acks).await.unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let last = fetch(&b, &s, &g, 10).await;
    assert_eq!(positions(&last), [(0, 6, 1), (0, 7, 1)]);
}

/// Four consumers, two per node, drain a group with `key_concurrency = 3`
/// while some deliveries are retried and some settled, alone or in
/// batches, through the other node: no more than three deliveries of one
/// key are ever out at once, every event is acked once, and the gates are
/// empty at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_never_hold_more_than_n_of_one_key() {
    use std::collections::HashMap;
    const N: usize = 3;
    const KEYS: usize = 8;
    const PER_KEY: usize = 15;
    let Some(b) = backend().await else { return };
    let s = stream(&b, "s", 2).await;
    let g = limited(&b, &s, "g", N as u32).await;
    let inputs = rheo_core::backend::conformance::ordering::interleaved_keys(KEYS, PER_KEY);
    b.append(&s, inputs).await.unwrap();
    let other = RedisBackend::connect_like(&b).await;
    let nodes = [Arc::new(b.clone()), Arc::new(other)];
    let out = Arc::new(parking_lot::Mutex::new(
        HashMap::<(u32, String), usize>::new(),
    ));
    let done = Arc::new(parking_lot::Mutex::new(Vec::<(u32, u64)>::new()));
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for node in 0..2 {
        for w in 0..2 {
            let (s, g) = (s.clone(), g.clone());
            let (mine, theirs) = (Arc::clone(&nodes[node]), Arc::clone(&nodes[1 - node]));
            let (out, done, most) = (Arc::clone(&out), Arc::clone(&done), Arc::clone(&most));
            workers.push(tokio::spawn(async move {
                let mut req = fetch_req(&s, &g, 1);
                req.consumer_id = ConsumerId::parse(format!("n{node}w{w}")).unwrap();
                req.lease_ms = 60_000;
                for _ in 0..100_000 {
                    if done.lock().len() == KEYS * PER_KEY {
                        return;
                    }
                    req.limit = 1 + rand::random::<u32>() % 7;
                    let leases = mine.fetch(req.clone()).await.expect("fetch");
                    for lease in &leases {
                        let key = (lease.event.partition, lease.event.key.clone().unwrap());
                        let mut out = out.lock();
                        let n = out.entry(key.clone()).or_default();
                        *n += 1;
                        assert!(*n <= N, "{n} of {key:?} out at once");
                        most.fetch_max(*n, std::sync::atomic::Ordering::SeqCst);
                    }
                    tokio::task::yield_now().await;
                    let via = if rand::random::<bool>() {
                        &mine
                    } else {
                        &theirs
                    };
                    let mut items = Vec::new();
                    for lease in &leases {
                        let key = (lease.event.partition, lease.event.key.clone().unwrap());
                        // Counted down before the settle: once settled, the
                        // key's next delivery may go out to anyone.
                        *out.lock().get_mut(&key).expect("counted") -= 1;
                        if lease.attempt == 1 && rand::random::<u32>().is_multiple_of(4) {
                            let op = SettleOp::Nack {
                                reason: Some("again".into()),
                                delay_ms: Some(0),
                            };
                            items.push(Settlement {
                                target: lease.target(),
                                op,
                            });
                            continue;
                        }
                        done.lock()
                            .push((lease.event.partition, lease.event.sequence));
                        items.push(Settlement::ack(lease.target()));
                    }
                    if items.is_empty() {
                        continue;
                    }
                    let results = if rand::random::<bool>() {
                        via.settle(&s, &g, items).await.expect("settle")
                    } else {
                        let mut results = Vec::new();
                        for item in items {
                            results.extend(via.settle(&s, &g, vec![item]).await.expect("settle"));
                        }
                        results
                    };
                    assert!(results.iter().all(Result::is_ok), "{results:?}");
                }
                panic!("consumer n{node}w{w} gave up before every event was processed");
            }));
        }
    }
    for w in workers {
        w.await.expect("worker");
    }
    let mut all = done.lock().clone();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), KEYS * PER_KEY, "every event acked once");
    assert!(
        most.load(std::sync::atomic::Ordering::SeqCst) > 1,
        "a key had several out"
    );
    for node in &nodes {
        let lag = node.lag(&s, &g, &Partitions::All).await.unwrap();
        assert_eq!((lag.lag, lag.inflight, lag.pending), (0, 0, 0));
    }
    for p in 0..2 {
        let k = b.keys.partition(&s, &g, p);
        assert!(members(&b, k.gates).await.is_empty());
        assert!(hash(&b, k.counts).await.is_empty());
    }
}

/// A settle reads only a gate's first members: a lease out above the
/// ones read (deliveries a replay re-opened below it are parked) is
/// counted from the gate's count, so an ack lets through only the slots
/// it frees.
#[tokio::test]
async fn a_limited_key_counts_its_leases_above_the_members_a_settle_reads() {
    let Some(b) = backend().await else { return };
    let s = stream(&b, "s", 1).await;
    let g = limited(&b, &s, "g", 2).await;
    let keyed = EventInput {
        key: Some("a".to_owned()),
        ..EventInput::default()
    };
    b.append(&s, vec![keyed; 10]).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let pair = fetch(&b, &s, &g, 10).await;
        assert_eq!(pair.len(), 2);
        for lease in &pair {
            ids.push(lease.event.id.clone());
            assert_eq!(settle(&b, lease, SettleOp::Ack).await, "ok");
        }
    }
    let out = fetch(&b, &s, &g, 10).await;
    assert_eq!(positions(&out), [(0, 5, 1), (0, 6, 1)]);
    // 1 to 4 again: parked below the two out.
    let replayed = b.replay(&s, &g, Replay::EventIds(ids)).await.unwrap();
    assert_eq!(replayed, 4);
    assert!(fetch(&b, &s, &g, 10).await.is_empty(), "both slots are out");
    // The read of 6's gate holds 1 to 4 only: 5 is still out, so one
    // slot is free.
    assert_eq!(settle(&b, &out[1], SettleOp::Ack).await, "ok");
    let one = fetch(&b, &s, &g, 10).await;
    assert_eq!(positions(&one), [(0, 1, 2)]);
    assert_eq!(settle(&b, &out[0], SettleOp::Ack).await, "ok");
    let two = fetch(&b, &s, &g, 10).await;
    assert_eq!(positions(&two), [(0, 2, 2)]);
    let k = b.keys.partition(&s, &g, 0);
    assert_eq!(hash(&b, k.counts.clone()).await["a"], "8");
}

/// A group with `flow.key_rate = {per_second, burst}` on `s`.
/// Appends one event per key of `keys`, in order.
async fn append_keyed(b: &RedisBackend, s: &StreamName, keys: &[&str]) {
    let inputs = keys
        .iter()
        .map(|k| EventInput {
            key: Some((*k).to_owned()),
            ..EventInput::default()
        })
        .collect();
    b.append(s, inputs).await.unwrap();
}

async fn rated(
    b: &RedisBackend,
    s: &StreamName,
    name: &str,
    per_second: f64,
    burst: u32,
) -> GroupName {
    let mut spec = GroupSpec::new(GroupName::parse(name).unwrap());
    spec.flow = rheo_core::model::Flow::paced(per_second, burst);
    b.create_group(s, spec).await.unwrap().name
}

/// `flow.key_rate` on Redis (`rates.rs`): a partition's TATs are one
/// sorted set that lives until its last TAT has passed (and a grace); a
/// fetch drops the TATs long passed; a paced delivery's record carries
/// its mark, which a replay clears (it takes a token again); a reset and
/// a delete of the group remove the TATs, so the buckets start full.
#[tokio::test]
async fn key_rate_tats_expire_and_go_with_a_reset_or_a_delete() {
    use rheo_core::backend::{Backend, DeleteGroup};
    let Some((b, clock)) = clocked().await else {
        return;
    };
    let s = stream(&b, "s", 1).await;
    let g = rated(&b, &s, "g", 1.0, 1).await;
    append_keyed(&b, &s, &["a", "a", "b"]).await;
    let first = fetch(&b, &s, &g, 10).await;
    assert_eq!(positions(&first), [(0, 1, 1), (0, 3, 1)], "a2 is paced");
    let k = b.keys.partition(&s, &g, 0);
    let start_us = START.as_millis() * 1000;
    let scores = || async {
        let cmd = redis::cmd("ZRANGE")
            .arg(&k.tats)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .clone();
        let read: Vec<(String, f64)> = b.run(&cmd, super::Phase::Read).await.unwrap();
        read.into_iter()
            .map(|(key, tat)| (key, tat as i64 - start_us))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        scores().await,
        [("b".to_owned(), 1_000_000), ("a".to_owned(), 2_000_000)],
        "a's TAT is past a2's reserved slot"
    );
    let ttl: i64 = b
        .run(&redis::cmd("PTTL").arg(&k.tats).clone(), super::Phase::Read)
        .await
        .unwrap();
    let most = 2_001 + super::TAT_GRACE_MS;
    assert!((most - 1_000..=most).contains(&ttl), "{ttl}");
    let record = hash(&b, k.records.clone()).await["2"].clone();
    let paced = super::claims::Delivery::decode(&record).unwrap();
    assert!(paced.paced, "{record:?}");
    assert_eq!(
        (paced.available_at, paced.attempt),
        (Some(START.as_millis() + 1_000), 0)
    );
    assert_eq!(members(&b, k.delayed.clone()).await, ["2"]);
    assert!(members(&b, k.fresh.clone()).await.is_empty(), "waiting");

    // Re-opened, a2 and b3 take a token again: both wait.
    let after_1 = Replay::FromSequence {
        after: 1,
        partitions: Partitions::All,
    };
    assert_eq!(b.replay(&s, &g, after_1).await.unwrap(), 1);
    assert!(fetch(&b, &s, &g, 10).await.is_empty());
    assert_eq!(
        scores().await,
        [("b".to_owned(), 2_000_000), ("a".to_owned(), 3_000_000)]
    );

    // Long after: the paced ones go out at their slots, c takes a token,
    // and the TATs long passed are dropped.
    assert_eq!(settle(&b, &first[0], SettleOp::Ack).await, "ok");
    clock.advance(60_000);
    append_keyed(&b, &s, &["c"]).await;
    let later = fetch(&b, &s, &g, 10).await;
    assert_eq!(positions(&later), [(0, 2, 1), (0, 3, 2), (0, 4, 1)]);
    assert_eq!(scores().await, [("c".to_owned(), 61_000_000)]);

    b.reset(ResetRequest::to_the_beginning(&s, &g))
        .await
        .unwrap();
    assert!(members(&b, k.tats.clone()).await.is_empty(), "full again");
    let again = fetch(&b, &s, &g, 10).await;
    assert_eq!(positions(&again), [(0, 1, 1), (0, 3, 1), (0, 4, 1)]);
    assert!(!members(&b, k.tats.clone()).await.is_empty());

    let req = DeleteGroup {
        stream: s.clone(),
        group: g.clone(),
        confirm: true,
    };
    Backend::delete_group(&b, req).await.expect("delete group");
    assert!(members(&b, k.tats.clone()).await.is_empty());
}

/// A paced delivery's mark is stored with its due time and cleared by a
/// lease.
#[test]
fn a_paced_record_keeps_its_mark_through_encoding() {
    use super::claims::Delivery;
    let paced = Delivery::fresh().paced(START);
    let raw = paced.encode();
    assert!(raw.contains(&format!("p{}", START.as_millis())), "{raw:?}");
    assert_eq!(Delivery::decode(&raw).unwrap(), paced);
    let leased = paced.leased(
        &LeaseId::generate(),
        &ConsumerId::parse("c").unwrap(),
        START,
        START.add_ms(1),
    );
    assert!(!leased.paced);
    assert_eq!(Delivery::decode(&leased.encode()).unwrap(), leased);
}

/// `flow.key_rate` on Redis: a paced delivery never handed out is in the
/// `paced` index by its due time, so the lag counts it waiting until then
/// and pending once due, before any fetch moves it; its claim, a reset and
/// a delete take it out.
#[tokio::test]
async fn a_paced_delivery_never_handed_out_is_indexed_by_its_due_time() {
    use rheo_core::backend::{Backend, DeleteGroup};
    let Some((b, clock)) = clocked().await else {
        return;
    };
    let s = stream(&b, "s", 1).await;
    let g = rated(&b, &s, "g", 1.0, 1).await;
    append_keyed(&b, &s, &["a", "a", "a"]).await;
    let first = fetch(&b, &s, &g, 10).await;
    assert_eq!(positions(&first), [(0, 1, 1)]);
    let k = b.keys.partition(&s, &g, 0);
    let scored = || async {
        let cmd = redis::cmd("ZRANGE")
            .arg(&k.paced)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .clone();
        let read: Vec<(String, i64)> = b.run(&cmd, super::Phase::Read).await.unwrap();
        read
    };
    let slot = |s: i64| START.as_millis() + s * 1_000;
    assert_eq!(
        scored().await,
        [("2".to_owned(), slot(1)), ("3".to_owned(), slot(2))]
    );
    let counts = || async {
        let lag = b.lag(&s, &g, &Partitions::All).await.unwrap();
        (lag.inflight, lag.waiting_retry, lag.pending)
    };
    assert_eq!(counts().await, (1, 2, 0));
    // A retry waiting for its delay is no fresh delivery: not indexed.
    let later = SettleOp::Nack {
        reason: None,
        delay_ms: Some(5_000),
    };
    assert_eq!(settle(&b, &first[0], later).await, "ok");
    assert_eq!(scored().await.len(), 2);
    assert_eq!(counts().await, (0, 3, 0));
    clock.advance(1_000);
    assert_eq!(counts().await, (0, 2, 1), "a2 is due, never handed out");
    let info = b.group_info(&s, &g).await.unwrap();
    assert_eq!((info.lag.waiting_retry, info.lag.pending), (2, 1));
    let second = fetch(&b, &s, &g, 10).await;
    assert_eq!(positions(&second), [(0, 2, 1)]);
    assert_eq!(scored().await, [("3".to_owned(), slot(2))], "a2 is out");
    assert_eq!(counts().await, (1, 2, 0));
    b.reset(ResetRequest::to_the_beginning(&s, &g))
        .await
        .unwrap();
    assert!(scored().await.is_empty(), "reset");
    fetch(&b, &s, &g, 10).await;
    assert_eq!(scored().await.len(), 2);
    let req = DeleteGroup {
        stream: s.clone(),
        group: g.clone(),
        confirm: true,
    };
    Backend::delete_group(&b, req).await.expect("delete group");
    assert!(scored().await.is_empty(), "delete");
}

/// Under `flow.key_rate` a paced claim does not count toward the fetch's
/// limit, so the fetch reads ready deliveries past the first `limit` (in
/// growing batches) before it takes any unseen event: sequence order holds
/// past a run of paced ones.
#[tokio::test]
async fn a_key_rate_fetch_reads_past_a_run_of_paced_ready_deliveries() {
    let Some((b, clock)) = clocked().await else {
        return;
    };
    let s = stream(&b, "s", 1).await;
    let g = rated(&b, &s, "g", 1.0, 1).await;
    append_keyed(&b, &s, &["a", "a", "a", "a", "a", "a", "a", "b", "c"]).await;
    let mut out = 0;
    for _ in 0..2 {
        for lease in fetch(&b, &s, &g, 10).await {
            assert_eq!(settle(&b, &lease, SettleOp::Ack).await, "ok");
            out += 1;
        }
        clock.advance(60_000);
    }
    assert_eq!(out, 9);
    // Every delivery ready again, the lowest first; the buckets full.
    let all = Replay::FromSequence {
        after: 0,
        partitions: Partitions::All,
    };
    assert_eq!(b.replay(&s, &g, all).await.unwrap(), 9);
    assert_eq!(
        members(&b, b.keys.ready(&s, &g, 0)).await.len(),
        9,
        "all ready"
    );
    // a1 has a token; a2 to a7 are paced (read two, then four, then
    // eight); b8 has a token; c9 is past the limit.
    let first = fetch(&b, &s, &g, 2).await;
    assert_eq!(positions(&first), [(0, 1, 2), (0, 8, 2)]);
    let k = b.keys.partition(&s, &g, 0);
    assert_eq!(members(&b, k.delayed.clone()).await.len(), 6, "a2 to a7");
    let lag = b.lag(&s, &g, &Partitions::All).await.unwrap();
    assert_eq!((lag.inflight, lag.waiting_retry, lag.pending), (2, 6, 0));
    let second = fetch(&b, &s, &g, 2).await;
    assert_eq!(positions(&second), [(0, 9, 2)]);
    for lease in first.iter().chain(&second) {
        assert_eq!(settle(&b, lease, SettleOp::Ack).await, "ok");
    }
    clock.advance(1_000);
    let third = fetch(&b, &s, &g, 2).await;
    assert_eq!(positions(&third), [(0, 2, 2)]);
}
