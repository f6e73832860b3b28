//! The MongoDB backend against a MongoDB-compatible server
//! (`TEST_MONGODB_URL`; `scripts/test` starts the SecantusDB stand-in):
//! the conformance suite, the two-node suite and a lost connection. Each
//! test has a database of its own, dropped when its backend is dropped.

use std::sync::Arc;

use super::MongoBackend;
use rheo_core::backend::Backend;
use rheo_core::backend::conformance::service_url;
use rheo_core::clock::SharedClock;

/// The store timeout of the tests' backends (the driver's commit and
/// connect limits derive from it): a minute, not the server's default of
/// ten seconds, because the stand-in these tests run against takes
/// seconds for one commit at times when every test binary of a CI run
/// shares it. The deadline itself is checked with a bound of its own
/// (`a_stalled_connection_answers_within_the_deadline_and_recovers`).
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

pub(super) use rheo_core::backend::conformance::Janitor;

/// Drops `database` when dropped (the end of the test, passed or failed).
pub(super) fn janitor(url: &str, database: &str) -> Janitor {
    let (url, database) = (url.to_owned(), database.to_owned());
    Janitor::new(move || async move {
        if let Ok(client) = mongodb::Client::with_uri_str(&url).await {
            let _ = client.database(&database).drop().await;
        }
    })
}

/// `url` with its database replaced by `database`.
pub(super) fn with_database(url: &str, database: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a mongodb:// URL");
    let (hosts, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let query = tail.split_once('?').map_or("", |(_, q)| q);
    match query {
        "" => format!("{scheme}://{hosts}/{database}"),
        q => format!("{scheme}://{hosts}/{database}?{q}"),
    }
}

/// A fresh database name.
pub(super) fn fresh_database() -> String {
    format!("rheo_t_{:016x}", rand::random::<u64>())
}

/// A backend on a fresh database of `TEST_MONGODB_URL`, or `None` (with a
/// note) when it is unset and MongoDB is not required.
async fn connect_fresh(clock: SharedClock) -> Option<MongoBackend> {
    let url = service_url("TEST_MONGODB_URL", "mongodb")?;
    let database = fresh_database();
    let mut backend = MongoBackend::connect(&with_database(&url, &database), clock, true, TIMEOUT)
        .await
        .expect("connect to TEST_MONGODB_URL and migrate");
    let janitor = Arc::new(janitor(&url, &database));
    let _ = backend.cluster.janitor.set(Arc::clone(&janitor));
    backend.janitor = Some(janitor);
    Some(backend)
}

async fn factory(clock: SharedClock) -> Option<Arc<dyn Backend>> {
    Some(Arc::new(connect_fresh(clock).await?))
}

mod deletes;
mod flow;
mod retention;

/// The conformance factory: the stand-in commits tens of writes a second,
/// so the checks that drive a thousand single calls at once run a quarter
/// of them (docs/testing.md#where-cis-time-goes).
async fn slow_factory(clock: SharedClock) -> Option<rheo_core::backend::conformance::Opened> {
    let backend = factory(clock).await?;
    Some(rheo_core::backend::conformance::Opened::from(backend).slow_writes(4))
}

mod conformance {
    use super::slow_factory;
    rheo_core::backend_conformance!(slow_factory);
}

/// Two backends (two servers) on one database. Each reads the catalog
/// generation before every use of what it keeps, so that a delete on one
/// is seen by the other's next call (in production, within
/// `catalog::CHECK_EVERY`; `deletes.rs` checks nodes that read it once).
async fn nodes(clock: SharedClock) -> Option<(Arc<dyn Backend>, Arc<dyn Backend>)> {
    nodes_checking(clock, std::time::Duration::ZERO).await
}

/// Two backends on one database, reading the catalog generation at most
/// every `every`.
async fn nodes_checking(
    clock: SharedClock,
    every: std::time::Duration,
) -> Option<(Arc<dyn Backend>, Arc<dyn Backend>)> {
    let a = connect_fresh(clock.clone())
        .await?
        .check_catalog_every(every);
    let url = std::env::var("TEST_MONGODB_URL").expect("set when a backend exists");
    let url = with_database(&url, a.db.name());
    let mut b = MongoBackend::connect(&url, clock, false, TIMEOUT)
        .await
        .expect("node b")
        .check_catalog_every(every);
    // One database: b shares a's janitor, so it goes with the last node.
    b.janitor = a.janitor.clone();
    if let Some(janitor) = &b.janitor {
        let _ = b.cluster.janitor.set(Arc::clone(janitor));
    }
    Some((Arc::new(a), Arc::new(b)))
}

mod nodes {
    use super::nodes;
    rheo_core::shared_store_conformance!(nodes);
}

/// Two servers' cluster stores on one database. Each store keeps the
/// database's janitor: it is dropped with the last of them.
async fn cluster_pair(
    clock: SharedClock,
) -> Option<(
    Arc<dyn rheo_core::cluster::ClusterStore>,
    Arc<dyn rheo_core::cluster::ClusterStore>,
)> {
    let (a, b) = nodes(clock).await?;
    Some((
        a.cluster().expect("a cluster store"),
        b.cluster().expect("a cluster store"),
    ))
}

rheo_core::cluster_conformance!(cluster_pair);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_module_past_the_document_limit_is_stored_in_parts() {
    use rheo_core::backend::conformance::START;
    use rheo_core::clock::FrozenClock;
    use rheo_core::model::Timestamp;

    let Some(backend) = connect_fresh(FrozenClock::new(START)).await else {
        return;
    };
    let store = backend.cluster().expect("a cluster store");
    // Past MongoDB's 16 MiB document limit, like a Python handler.
    let bytes: Vec<u8> = (0..17 << 20).map(|i: u32| (i % 251) as u8).collect();
    store.put_module("big", &bytes, START).await.unwrap();
    store.put_module("big", b"other", START).await.unwrap();
    assert!(store.module("big").await.unwrap() == Some(bytes));
    let parts = backend.coll(super::cluster::MODULE_PARTS);
    assert_eq!(
        parts.count_documents(mongodb::bson::doc! {}).await.unwrap(),
        5
    );

    let later = Timestamp::from_millis(START.as_millis() + 1);
    assert_eq!(store.forget_modules(&[], later).await.unwrap(), 1);
    assert_eq!(store.module("big").await.unwrap(), None);
    assert_eq!(
        parts.count_documents(mongodb::bson::doc! {}).await.unwrap(),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_connection_is_unavailable_or_ambiguous_and_recovers() {
    let Some(url) = service_url("TEST_MONGODB_URL", "mongodb") else {
        return;
    };
    let database = fresh_database();
    let janitor = janitor(&url, &database);
    rheo_core::backend::conformance::outage::a_lost_connection_is_unavailable_or_ambiguous_and_recovers(
        &url,
        |relayed, clock| async move {
            let url = with_database(&relayed, &database);
            let b = MongoBackend::connect(&url, clock, true, TIMEOUT).await;
            Arc::new(b.expect("connect through the relay")) as Arc<dyn Backend>
        },
    )
    .await;
    drop(janitor);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_connection_answers_within_the_deadline_and_recovers() {
    let Some(url) = service_url("TEST_MONGODB_URL", "mongodb") else {
        return;
    };
    let database = fresh_database();
    let janitor = janitor(&url, &database);
    // The stand-in takes tens of milliseconds a write: a roomier timeout.
    rheo_core::backend::conformance::outage::a_stalled_store_answers_within_the_deadline_and_recovers(
        &url,
        std::time::Duration::from_secs(3),
        |relayed, clock, timeout| async move {
            let url = with_database(&relayed, &database);
            let b = MongoBackend::connect(&url, clock, true, timeout).await;
            Arc::new(b.expect("connect through the relay")) as Arc<dyn Backend>
        },
    )
    .await;
    drop(janitor);
}

#[test]
fn a_url_gets_the_database_it_is_given() {
    let url = "mongodb://127.0.0.1:27018/?directConnection=true";
    assert_eq!(
        with_database(url, "x"),
        "mongodb://127.0.0.1:27018/x?directConnection=true"
    );
    assert_eq!(with_database("mongodb://h:1", "y"), "mongodb://h:1/y");
    assert_eq!(
        with_database("mongodb://h:1/old?a=b&c=d", "z"),
        "mongodb://h:1/z?a=b&c=d"
    );
}

/// A step a newer rheo recorded is unknown here, and refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_this_build_lacks_is_unknown_and_refused() {
    use rheo_core::clock::FrozenClock;
    use rheo_core::model::Timestamp;
    let Some(b) = connect_fresh(FrozenClock::new(Timestamp::from_millis(0))).await else {
        return;
    };
    let status = b.migration_status().await.expect("status");
    assert!(
        status.pending.is_empty() && status.unknown.is_empty(),
        "{status:?}"
    );
    let newest = status.applied.last().expect("applied steps").clone();
    b.coll(super::MIGRATIONS)
        .insert_one(mongodb::bson::doc! {"_id": "9999_future", "applied_at": 0_i64})
        .await
        .expect("record a future step");
    let status = b.migration_status().await.expect("status");
    assert_eq!(status.unknown, ["9999_future"]);
    let refused = status
        .check_not_newer()
        .expect_err("a newer store")
        .to_string();
    assert!(refused.contains("at migration 9999_future"), "{refused}");
    assert!(
        refused.contains(&format!("its newest is {newest}")),
        "{refused}"
    );
}

/// Transactions of one process take turns per stream and per group
/// (`Turn`), not one at a time for the whole process: while an append to
/// stream `a` waits for its turn, an append to `b` goes through; the
/// append to `a` goes through once the turn is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_of_other_streams_do_not_wait_for_each_other() {
    use super::Turn;
    use rheo_core::backend::CreateStream;
    use rheo_core::backend::conformance::sn;
    use rheo_core::clock::FrozenClock;
    use rheo_core::model::{EventInput, Timestamp};
    let Some(b) = connect_fresh(FrozenClock::new(Timestamp::from_millis(0))).await else {
        return;
    };
    let (a, other) = (sn("a"), sn("b"));
    for s in [&a, &other] {
        b.create_stream(CreateStream::new(s.clone(), 1))
            .await
            .expect("create");
    }
    let held = b.turns.take(&Turn::Stream(a.clone())).await;
    let waiting = tokio::spawn({
        let (b, a) = (b.clone(), a.clone());
        async move { b.append(&a, vec![EventInput::default()]).await }
    });
    // A deadlock guard, not a wait for time to pass: with one turn for the
    // whole process this append never finishes while `held` lives.
    let appended = tokio::time::timeout(TIMEOUT, b.append(&other, vec![EventInput::default()]))
        .await
        .expect("an append to another stream goes on")
        .expect("append to b");
    assert_eq!(appended.len(), 1);
    assert!(
        !waiting.is_finished(),
        "the append to `a` waits for its turn"
    );
    drop(held);
    let appended = waiting.await.expect("task").expect("append to a");
    assert_eq!(appended.len(), 1);
}
