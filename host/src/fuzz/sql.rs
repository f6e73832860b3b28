//! Target `sql`: the SQL translation of queries (`stores/sql/src/sql/query.rs` and
//! each dialect's JSON conditions), differentially. Random valid queries run
//! over random small event sets on SQLite — and on PostgreSQL when
//! `TEST_POSTGRES_URL` is set — must return, page after page, exactly what
//! filtering with `Query::matches` and ordering with `OrderBy::compare`
//! gives (`docs/log.md#query`), and never fail.
//!
//! Numbers are kept to values a 64-bit float holds exactly: past 2^53 the
//! backends may differ, as `docs/log.md#events` says.

use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use serde_json::{Value, json};

use super::query::{T0, parse, query_body};
use super::{config, corpus, run, value};
use crate::backend::sqlite::SqliteBackend;
use crate::backend::{Backend, CreateStream};
use crate::clock::FrozenClock;
use crate::model::{Event, EventId, EventInput, JsonObject, QueryCursor, StreamName, Timestamp};

/// Partitions of every generated stream.
const PARTITIONS: u32 = 3;

/// An object with keys from `keys` and small values.
fn object(keys: Vec<&'static str>, max: usize) -> impl Strategy<Value = JsonObject> {
    proptest::collection::btree_map(proptest::sample::select(keys), value(), 0..max)
        .prop_map(|m| m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// Up to `max` events with explicit ids, partitions and timestamps, so that
/// ties and reversals of time within and across partitions occur.
fn events(max: usize) -> impl Strategy<Value = Vec<EventInput>> {
    let one = (
        0..PARTITIONS,
        proptest::sample::select(vec![None, Some("k1"), Some("k2"), Some(""), Some("é")]),
        proptest::sample::select(vec![None, Some("order.placed"), Some("t"), Some("$gt")]),
        0..6i64,
        object(vec!["a", "n", "s", "tags", "b.c", "q\"x"], 5),
        object(
            vec!["m", "correlation_id", "causation_id", "schema_version"],
            3,
        ),
    );
    proptest::collection::vec(one, 0..max).prop_map(|list| {
        list.into_iter()
            .enumerate()
            .map(
                |(i, (partition, key, kind, second, payload, metadata))| EventInput {
                    id: Some(EventId::parse(format!("e{i:02}")).unwrap()),
                    event_type: kind.map(str::to_owned),
                    key: key.map(str::to_owned),
                    partition: Some(partition),
                    timestamp: Some(Timestamp::from_millis(T0 + second * 1000)),
                    payload,
                    metadata,
                },
            )
            .collect()
    })
}

/// The fixed events the corpus queries run over: every payload shape the
/// corpus names, in three partitions, with time ties and reversals.
fn fixture() -> Vec<EventInput> {
    let payloads = [
        json!({"n": 1, "s": "apple", "a": {"b": 1}}),
        json!({"n": 1.0, "s": "Banana", "a": [{"b": 1}]}),
        json!({"n": 1.5, "s": "é", "a": {"b": [1, 2]}}),
        json!({"n": "5", "s": "", "a": {"b": null}}),
        json!({"n": [1, 2, 3], "s": "banana", "tags": ["x", "y"]}),
        json!({"n": null, "a": {"c": 1}}),
        json!({"n": true, "s": "apple pie", "q\"x": 1}),
        json!({"n": {"x": 1, "y": 2}, "b.c": 2}),
        json!({"n": -3, "tags": [1, 2.0]}),
        json!({"n": 100, "tags": [{"a": 1}]}),
        json!({"n": -0.0, "a": {"b": {"c": 1}}}),
        json!({}),
    ];
    let metadata = [
        json!({}),
        json!({"correlation_id": "c1"}),
        json!({"correlation_id": "c2", "m": {"n": 2}}),
        json!({"m": {"n": 2.0}, "schema_version": 3}),
    ];
    (0..30)
        .map(|i: usize| EventInput {
            id: Some(EventId::parse(format!("e{i:02}")).unwrap()),
            event_type: [Some("order.placed"), Some("order.paid"), None][(i / 3) % 3]
                .map(str::to_owned),
            key: [Some("k1"), None, Some("k2"), Some("")][i % 4].map(str::to_owned),
            partition: Some((i % 3) as u32),
            timestamp: Some(Timestamp::from_millis(T0 + ((i * 7) % 13) as i64 * 1000)),
            payload: payloads[i % payloads.len()].as_object().unwrap().clone(),
            metadata: metadata[i % metadata.len()].as_object().unwrap().clone(),
        })
        .collect()
}

/// A fresh stream name per case.
fn next_stream() -> StreamName {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    StreamName::parse(format!("f{}", NEXT.fetch_add(1, Ordering::Relaxed))).unwrap()
}

fn fail(what: &str, e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(format!("{what}: {e}"))
}

/// Appends `inputs` to a new stream of `backend`, then runs every query of
/// `bodies` and follows its cursors to the end, comparing each page with
/// the matcher's. `exact`: also compare the events field by field (a store
/// that rewrites number text, as PostgreSQL does, compares ids only).
async fn differential(
    backend: &dyn Backend,
    inputs: Vec<EventInput>,
    bodies: &[Value],
    exact: bool,
) -> Result<(), TestCaseError> {
    let stream = next_stream();
    let create = CreateStream {
        name: stream.clone(),
        partition_count: PARTITIONS,
        retention: None,
    };
    backend
        .create_stream(create)
        .await
        .map_err(|e| fail("create", e))?;
    let stored: Vec<Event> = backend
        .append(&stream, inputs)
        .await
        .map_err(|e| fail("append", e))?
        .into_iter()
        .map(|a| Event::clone(&a.event))
        .collect();
    for body in bodies {
        let Some(mut query) = parse(&serde_json::to_vec(body).unwrap()) else {
            return Err(fail("a generated query is refused", body));
        };
        for _ in 0..=stored.len() + 1 {
            let mut expected: Vec<Event> = stored
                .iter()
                .filter(|e| query.matches(e))
                .cloned()
                .collect();
            expected.sort_by(|a, b| query.order.compare(a, b));
            expected.truncate(query.limit as usize);
            let want = query.page(expected);
            let got = backend
                .query(&stream, &query)
                .await
                .map_err(|e| fail(&format!("query {body}"), e))?;
            let ids = |events: &[Event]| -> Vec<String> {
                events.iter().map(|e| e.id.to_string()).collect()
            };
            prop_assert_eq!(ids(&got.events), ids(&want.events), "query {}", body);
            if exact {
                prop_assert_eq!(&got.events, &want.events, "query {}", body);
            }
            prop_assert_eq!(&got.next_cursor, &want.next_cursor, "query {}", body);
            let Some(next) = got.next_cursor else {
                break;
            };
            query.cursor =
                Some(QueryCursor::decode(&next, query.order).map_err(|e| fail("cursor", e))?);
        }
    }
    Ok(())
}

/// Every query of the `sql` corpus over the fixture on `backend`.
async fn replay_corpus(backend: &dyn Backend, exact: bool) {
    for (name, bytes) in corpus("sql") {
        let body: Value =
            serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{name} is no JSON: {e}"));
        if let Err(e) = differential(backend, fixture(), &[body], exact).await {
            panic!("{name}: {e}");
        }
    }
}

/// The generated cases: an event set and a few queries over it.
fn cases() -> impl Strategy<Value = (Vec<EventInput>, Vec<Value>)> {
    (events(14), proptest::collection::vec(query_body(), 1..5))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn clock() -> crate::clock::SharedClock {
    FrozenClock::new(Timestamp::from_millis(T0 + 3_600_000))
}

#[test]
fn sqlite_query_results_equal_the_matcher() {
    let rt = runtime();
    let backend = rt
        .block_on(SqliteBackend::open("sqlite::memory:", clock(), true))
        .expect("open an in-memory SQLite database");
    rt.block_on(replay_corpus(&backend, true));
    run(config(300, file!()), cases(), |(inputs, bodies)| {
        rt.block_on(differential(&backend, inputs, &bodies, true))
    });
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_query_results_equal_the_matcher() {
    use std::sync::Arc;

    use crate::backend::conformance::service_url;
    use crate::backend::postgres::{PostgresBackend, PostgresOptions};

    let Some(url) = service_url("TEST_POSTGRES_URL", "postgres") else {
        eprintln!("the PostgreSQL half of the sql fuzz target did not run");
        return;
    };
    let rt = runtime();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    // Named like the PostgreSQL tests' schemas (a left-over one is dropped
    // by their clean-up after an hour), and dropped when the test ends,
    // passed or failed.
    let schema = format!("rheo_t_{now}_{:08x}", rand::random::<u32>());
    let _janitor = {
        let (url, schema) = (url.clone(), schema.clone());
        crate::backend::conformance::Janitor::new(move || async move {
            if let Ok(pool) = sqlx::PgPool::connect(&url).await {
                let drop = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
                let _ = sqlx::query(sqlx::AssertSqlSafe(drop)).execute(&pool).await;
            }
        })
    };
    let mut options = PostgresOptions::with_store_timeout(crate::backend::DEFAULT_STORE_TIMEOUT);
    options.schema = Some(schema.clone());
    options.max_connections = 2;
    let backend: Arc<dyn Backend> = Arc::new(
        rt.block_on(PostgresBackend::connect_with(&url, options, clock(), true))
            .expect("connect to TEST_POSTGRES_URL and migrate"),
    );
    rt.block_on(replay_corpus(backend.as_ref(), false));
    run(config(100, file!()), cases(), |(inputs, bodies)| {
        rt.block_on(differential(backend.as_ref(), inputs, &bodies, false))
    });
    drop(backend);
}
