//! PostgreSQL tests: the shared conformance suite, the shared-store suite
//! (two nodes on one schema), and a connection lost mid-way.
//!
//! Each test gets its own schema (`rheo_t_<unix secs>_<random>`), dropped
//! when the test ends, passed or failed (its [`Janitor`]); schemas older
//! than an hour (a test killed mid-way) are dropped by the first test of a
//! run.

use std::sync::Arc;
use std::time::Duration;

use super::{PostgresBackend, PostgresOptions};
use rheo_core::backend::Backend;
use rheo_core::backend::conformance::{Janitor, outage, service_url};
use rheo_core::clock::{FrozenClock, SharedClock};

fn url() -> Option<String> {
    service_url("TEST_POSTGRES_URL", "postgres")
}

/// A fresh schema name; the first call of a run drops stale ones.
async fn fresh_schema(url: &str) -> String {
    static CLEANED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    CLEANED
        .get_or_init(|| async {
            let pool = sqlx::PgPool::connect(url)
                .await
                .expect("connect to TEST_POSTGRES_URL");
            let schemas: Vec<String> = sqlx::query_scalar(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'rheo\\_t\\_%'",
            )
            .fetch_all(&pool)
            .await
            .expect("list test schemas");
            for schema in schemas {
                let created: u64 = schema
                    .split('_')
                    .nth(2)
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(0);
                if created + 3600 < now {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                    )))
                    .execute(&pool)
                    .await;
                }
            }
        })
        .await;
    format!("rheo_t_{now}_{:08x}", rand::random::<u32>())
}

/// Drops `schema` when dropped.
fn janitor(url: &str, schema: &str) -> Arc<Janitor> {
    let (url, schema) = (url.to_owned(), schema.to_owned());
    Arc::new(Janitor::new(move || async move {
        use sqlx::Connection as _;
        let Ok(mut conn) = sqlx::PgConnection::connect(&url).await else {
            return;
        };
        // A session the test left mid-transaction must not hold the drop
        // for long: the stale sweep of a later run takes what is left.
        let _ = sqlx::query("SET lock_timeout = '10s'")
            .execute(&mut conn)
            .await;
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
        )))
        .execute(&mut conn)
        .await;
    }))
}

fn options(schema: &str) -> PostgresOptions {
    PostgresOptions {
        schema: Some(schema.to_owned()),
        max_connections: 4,
        ..PostgresOptions::default()
    }
}

/// A backend on a fresh schema (migrated), which goes with it.
async fn one_node(clock: SharedClock) -> Option<PostgresBackend> {
    Some(one_node_at(clock).await?.0)
}

/// [`one_node`], with the URL and the schema it is in (for a session of
/// the test's own beside it).
async fn one_node_at(clock: SharedClock) -> Option<(PostgresBackend, String, String)> {
    let url = url()?;
    let schema = fresh_schema(&url).await;
    let mut backend = PostgresBackend::connect_with(&url, options(&schema), clock, true)
        .await
        .expect("connect to TEST_POSTGRES_URL and migrate");
    backend.janitor = Some(janitor(&url, &schema));
    Some((backend, url, schema))
}

async fn factory(clock: SharedClock) -> Option<Arc<dyn Backend>> {
    Some(Arc::new(one_node(clock).await?))
}

rheo_core::backend_conformance!(factory);

/// Two backends (two servers) on a fresh schema, which goes with the
/// last; a migrates it. Both are opened with what `tune` makes of the
/// tests' options.
async fn two_nodes(
    clock: SharedClock,
    tune: impl FnOnce(PostgresOptions) -> PostgresOptions,
) -> Option<(Arc<PostgresBackend>, Arc<PostgresBackend>)> {
    let url = url()?;
    let schema = fresh_schema(&url).await;
    let options = tune(options(&schema));
    let open =
        |migrate| PostgresBackend::connect_with(&url, options.clone(), clock.clone(), migrate);
    let mut a = open(true).await.expect("connect node a and migrate");
    let mut b = open(false).await.expect("connect node b");
    let janitor = janitor(&url, &schema);
    (a.janitor, b.janitor) = (Some(janitor.clone()), Some(janitor));
    Some((Arc::new(a), Arc::new(b)))
}

/// The tests' frozen clock.
fn frozen() -> Arc<FrozenClock> {
    FrozenClock::new(rheo_core::model::Timestamp::from_millis(1_767_225_600_000))
}

/// Two nodes that each read the catalog generation before every call, so
/// that what one deletes is gone on the other at once (a server reads it
/// at most every `catalog::CHECK_EVERY`).
async fn nodes(clock: SharedClock) -> Option<(Arc<dyn Backend>, Arc<dyn Backend>)> {
    let every_call = |o: PostgresOptions| PostgresOptions {
        catalog_check_every: Duration::ZERO,
        ..o
    };
    let (a, b) = two_nodes(clock, every_call).await?;
    Some((a, b))
}

rheo_core::shared_store_conformance!(nodes);

/// Node b reads the catalog generation once, at its first call, and not
/// again for an hour: it has not seen a's deletes, and finds what they
/// deleted gone all the same (`sql/stale_nodes.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_node_finds_deletes_and_leaves_nothing_behind() {
    let clock = frozen();
    let once_an_hour = |o: PostgresOptions| PostgresOptions {
        catalog_check_every: Duration::from_secs(3600),
        ..o
    };
    let Some((a, b)) = two_nodes(clock.clone(), once_an_hour).await else {
        return;
    };
    crate::sql::stale_nodes::a_stale_node_finds_deletes_and_leaves_nothing_behind(clock, a, b)
        .await;
}

/// Node a changes a group's flow while node b keeps the old one
/// (`sql/flow_nodes.rs`).
#[tokio::test]
async fn a_flow_changed_on_one_node_holds_on_the_other() {
    let clock = frozen();
    let Some((a, b)) = two_nodes(clock.clone(), |o| o).await else {
        return;
    };
    crate::sql::flow_nodes::a_flow_changed_on_one_node_holds_on_the_other(clock, a, b).await;
}

/// Where `flow.key_rate` keeps its buckets and paced marks, and when they
/// go (`sql/key_rates.rs`).
#[tokio::test]
async fn key_rate_buckets_are_rows_that_go_with_their_group() {
    let clock = frozen();
    let Some(b) = one_node(clock.clone()).await else {
        return;
    };
    crate::sql::key_rates::key_rate_buckets_are_rows_that_go_with_their_group(clock, Arc::new(b))
        .await;
}

/// Room for the four writers of `sql/racing.rs` and the check's own calls.
fn eight_connections(o: PostgresOptions) -> PostgresOptions {
    PostgresOptions {
        max_connections: 8,
        ..o
    }
}

/// Writers on two nodes race deletes (`sql/stale_nodes.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_racing_a_delete_leave_nothing_behind() {
    let clock = frozen();
    let Some((a, b)) = two_nodes(clock.clone(), eight_connections).await else {
        return;
    };
    crate::sql::stale_nodes::writes_racing_a_delete_leave_nothing_behind(clock, a, b).await;
}

/// What a trim leaves in the tables (`sql/retention_rows.rs`).
#[tokio::test]
async fn a_trim_leaves_no_row_of_what_it_removed() {
    let clock = frozen();
    let Some(b) = one_node(clock.clone()).await else {
        return;
    };
    crate::sql::retention_rows::a_trim_leaves_no_row_of_what_it_removed(clock, Arc::new(b)).await;
}

/// Trims on one node race writers on two (`sql/retention_rows.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn trims_racing_writers_leave_every_group_consistent() {
    let clock = frozen();
    let Some((a, b)) = two_nodes(clock.clone(), eight_connections).await else {
        return;
    };
    crate::sql::retention_rows::trims_racing_writers_leave_every_group_consistent(clock, a, b)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_connection_is_unavailable_or_ambiguous_and_recovers() {
    let Some(url) = url() else { return };
    let schema = fresh_schema(&url).await;
    let _janitor = janitor(&url, &schema);
    outage::a_lost_connection_is_unavailable_or_ambiguous_and_recovers(&url, |relayed, clock| {
        let opts = PostgresOptions {
            timeouts: super::Timeouts::derived(Duration::from_secs(1)),
            ..options(&schema)
        };
        async move {
            let b = PostgresBackend::connect_with(&relayed, opts, clock, true).await;
            Arc::new(b.expect("connect through the relay")) as Arc<dyn Backend>
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_connection_answers_within_the_deadline_and_recovers() {
    let Some(url) = url() else { return };
    let schema = fresh_schema(&url).await;
    let _janitor = janitor(&url, &schema);
    let timeout = Duration::from_millis(1_500);
    outage::a_stalled_store_answers_within_the_deadline_and_recovers(
        &url,
        timeout,
        |relayed, clock, timeout| {
            let opts = PostgresOptions {
                timeouts: super::Timeouts::derived(timeout),
                ..options(&schema)
            };
            async move {
                let b = PostgresBackend::connect_with(&relayed, opts, clock, true).await;
                Arc::new(b.expect("connect through the relay")) as Arc<dyn Backend>
            }
        },
    )
    .await;
}

/// Two servers' cluster stores on one schema. The backends live as long
/// as the stores (each one's LISTEN task carries the other's
/// notifications), and the schema goes with them.
#[allow(clippy::type_complexity)]
async fn cluster_pair(
    clock: SharedClock,
) -> Option<(
    Arc<dyn rheo_core::cluster::ClusterStore>,
    Arc<dyn rheo_core::cluster::ClusterStore>,
    (Arc<dyn Backend>, Arc<dyn Backend>),
)> {
    let (a, b) = nodes(clock).await?;
    Some((
        a.cluster().expect("a cluster store"),
        b.cluster().expect("a cluster store"),
        (a, b),
    ))
}

rheo_core::cluster_conformance!(cluster_pair);

/// A database that refuses connections (`ALLOW_CONNECTIONS false`, its
/// sessions ended: what an operator does before maintenance) is
/// `backend_unavailable`, for reads and writes alike — not `failed`: the
/// server answers the connection with an error of its own (55000), which
/// means nothing more than that the store cannot be reached now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_closed_to_connections_is_unavailable_and_recovers() {
    use rheo_core::backend::CreateStream;
    use rheo_core::model::{EventInput, StreamName};
    let Some(url) = url() else { return };
    let admin = sqlx::PgPool::connect(&url)
        .await
        .expect("connect to TEST_POSTGRES_URL");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    let db = format!("rheo_closed_{now}_{:08x}", rand::random::<u32>());
    let run = |sql: String| {
        let admin = admin.clone();
        async move {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&admin)
                .await
                .expect("admin statement");
        }
    };
    run(format!("CREATE DATABASE {db}")).await;
    let mut db_url = url::Url::parse(&url).expect("a URL");
    db_url.set_path(&db);
    let clock = rheo_core::clock::SystemClock::shared();
    let backend = PostgresBackend::connect_with(
        db_url.as_str(),
        PostgresOptions {
            max_connections: 2,
            ..PostgresOptions::with_store_timeout(Duration::from_secs(4))
        },
        clock,
        true,
    )
    .await
    .expect("connect and migrate");
    let stream = StreamName::parse("s").unwrap();
    backend
        .create_stream(CreateStream {
            name: stream.clone(),
            partition_count: 1,
            retention: None,
        })
        .await
        .expect("create the stream");

    run(format!("ALTER DATABASE {db} ALLOW_CONNECTIONS false")).await;
    run(format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = '{db}' AND pid <> pg_backend_pid()"
    ))
    .await;
    let read = backend.get_stream(&stream).await;
    let write = backend.append_one(&stream, EventInput::default()).await;
    run(format!("ALTER DATABASE {db} ALLOW_CONNECTIONS true")).await;
    let again = backend.append_one(&stream, EventInput::default()).await;
    drop(backend);
    run(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")).await;

    for (what, got) in [("read", read.map(|_| ())), ("write", write.map(|_| ()))] {
        let e = got.expect_err(what);
        assert_eq!(e.code(), "backend_unavailable", "{what}: {e}");
    }
    again.expect("an append once the database is open again");
}

/// A batch settle PostgreSQL rolls back to break a deadlock is run again,
/// and every item of it holds: the caller never sees the conflict.
///
/// Another transaction holds the row of the batch's second delivery while
/// the batch, which has written its first, waits for it; that transaction
/// then asks for the first row. PostgreSQL aborts the batch (it has waited
/// longest: this session's own `deadlock_timeout` is far longer), the other
/// transaction commits, and the batch runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_rolled_back_to_break_a_deadlock_runs_again() {
    use rheo_core::backend::conformance::Harness;
    use rheo_core::model::{SettleOp, Settlement};
    let Some(url) = url() else { return };
    let schema = fresh_schema(&url).await;
    let _janitor = janitor(&url, &schema);
    let open = |clock| {
        let (url, schema) = (url.clone(), schema.clone());
        async move {
            let backend = PostgresBackend::connect_with(&url, options(&schema), clock, true)
                .await
                .expect("connect to TEST_POSTGRES_URL and migrate");
            Some(Arc::new(backend) as Arc<dyn Backend>)
        }
    };
    let h = Harness::start(open).await.expect("a backend");
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    h.append_n(&s, 2).await;
    let leases = h.fetch(&s, &g, 2).await;
    assert_eq!(leases.len(), 2);
    let (first, second) = (&leases[0], &leases[1]);

    let other = sqlx::PgPool::connect(&url).await.expect("connect");
    let mut tx = other.begin().await.expect("begin");
    let touch = |id: &str| {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE \"{schema}\".rheo_deliveries SET reason = reason WHERE event_id = '{id}'"
        )))
    };
    sqlx::query("SET LOCAL deadlock_timeout = '60s'")
        .execute(&mut *tx)
        .await
        .expect("set deadlock_timeout");
    touch(second.event.id.as_str())
        .execute(&mut *tx)
        .await
        .expect("lock the second row");

    let batch = vec![
        Settlement {
            target: first.target(),
            op: SettleOp::Nack {
                reason: Some("again".into()),
                delay_ms: Some(0),
            },
        },
        Settlement::ack(second.target()),
    ];
    let backend = Arc::clone(&h.backend);
    let (s2, g2) = (s.clone(), g.clone());
    let settle = tokio::spawn(async move { backend.settle(&s2, &g2, batch).await });

    // Once the batch waits for this transaction, ask for its first row.
    let mut waited = 0;
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE pg_backend_pid() = ANY (pg_blocking_pids(pid))",
        )
        .fetch_one(&mut *tx)
        .await
        .expect("who waits");
        if waiting > 0 {
            break;
        }
        waited += 1;
        assert!(waited < 500, "the batch never waited for the second row");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    touch(first.event.id.as_str())
        .execute(&mut *tx)
        .await
        .expect("the deadlock's survivor gets the first row");
    tx.commit().await.expect("commit");

    let results = settle.await.expect("join").expect("the batch settles");
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    let again = h.fetch(&s, &g, 2).await;
    let ids: Vec<&str> = again.iter().map(|l| l.event.id.as_str()).collect();
    assert_eq!(
        ids,
        [first.event.id.as_str()],
        "the nacked one comes back alone"
    );
}

/// A call dropped while its BEGIN is on the way (a store deadline, a
/// client gone, a handler worker woken from its rest) leaves no
/// transaction behind: the BEGIN runs to its end and is rolled back, and
/// the calls after it get connections outside any transaction
/// (`sql/engine.rs`, `begin_whole`). The relay lets the BEGIN through and
/// holds back its answer until the call was dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_during_its_begin_leaves_no_transaction_behind() {
    use crate::sql::{Access, Dialect, begin_whole};
    use rheo_core::backend::CreateStream;
    use rheo_core::model::{EventInput, StreamName};
    let Some(url) = url() else { return };
    let schema = fresh_schema(&url).await;
    let _janitor = janitor(&url, &schema);
    let relay = outage::Relay::start(&url).await;
    let app = format!("rheo-begin-{schema}");
    let opts = PostgresOptions {
        application_name: app.clone(),
        ..options(&schema)
    };
    let b = PostgresBackend::connect_with(&relay.url, opts, frozen(), true)
        .await
        .expect("connect through the relay and migrate");
    let s = StreamName::parse("s").unwrap();
    b.create_stream(CreateStream::new(s.clone(), 1))
        .await
        .expect("create the stream");

    let watcher = sqlx::PgPool::connect(&url).await.expect("connect");
    let in_transaction = || {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE application_name = $1 AND state LIKE 'idle in transaction%'",
        )
        .bind(&app)
        .fetch_one(&watcher)
    };
    let conn = b.conn(Access::Read).await.expect("a connection");
    relay.hold_answers();
    let begin = begin_whole(conn, super::PostgresDialect::BEGIN_READ);
    let dropped = tokio::time::timeout(Duration::from_millis(200), begin).await;
    assert!(
        dropped.is_err(),
        "the BEGIN was answered through a held relay"
    );
    let mut waited = 0;
    while in_transaction().await.expect("sessions") == 0 {
        waited += 1;
        assert!(waited < 500, "the BEGIN never reached the server");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    relay.release_answers();

    // The session leaves its transaction long before the server's own
    // idle-in-transaction timeout (5 s here) would end it.
    let mut waited = 0;
    while in_transaction().await.expect("sessions") > 0 {
        waited += 1;
        assert!(
            waited < 200,
            "a pooled session stayed inside the dropped call's transaction"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for n in 0..4 {
        let mut payload = rheo_core::model::JsonObject::new();
        payload.insert("n".into(), n.into());
        let event = EventInput::with_payload(payload);
        b.append(&s, vec![event])
            .await
            .expect("an append after the dropped call");
    }
}

/// The statistics refresh (`stats.rs`) never queues for a table's lock: a
/// vacuum holding it (here a session holding the same lock) makes it skip
/// at once. Queued behind autovacuum it would have cancelled it, and a
/// trimmed table would never have been vacuumed.
#[tokio::test]
async fn a_statistics_refresh_skips_a_table_a_vacuum_holds() {
    use sqlx::Connection as _;
    let Some(b) = one_node(frozen()).await else {
        return;
    };
    let url = url().expect("a URL");
    let schema = b.dialect.schema.clone().expect("a schema");
    let mut vacuum = sqlx::PgConnection::connect(&url).await.expect("connect");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "BEGIN; LOCK TABLE \"{schema}\".rheo_events IN SHARE UPDATE EXCLUSIVE MODE"
    )))
    .execute(&mut vacuum)
    .await
    .expect("take the lock a vacuum takes");
    let refresh = super::stats::refresh(&b.dialect.pool, crate::sql::Table::Events);
    let refreshed = tokio::time::timeout(Duration::from_secs(3), refresh).await;
    sqlx::raw_sql("COMMIT")
        .execute(&mut vacuum)
        .await
        .expect("let go of the lock");
    let refreshed = refreshed.expect("the refresh waited for the vacuum's lock");
    refreshed.expect("a skipped refresh is no error");
    // With the table free, it runs.
    super::stats::refresh(&b.dialect.pool, crate::sql::Table::Events)
        .await
        .expect("refresh");
}

/// No statement of a store's sessions is JIT-compiled. `enable_seqscan =
/// off` costs a sequential scan at 10^10, far above the JIT's threshold:
/// the catalog generation read (a one-row table, read every second) was
/// compiled on every call, 60-70 ms the first time on a connection and
/// 6 ms after (docs/benchmarks.md).
#[tokio::test]
async fn no_statement_is_jit_compiled() {
    use crate::sql::{Access, Dialect, Statement};
    let Some(b) = one_node(frozen()).await else {
        return;
    };
    let mut conn = b.conn(Access::Read).await.expect("a connection");
    let sql = super::PostgresDialect::statement(Statement::catalog_generation);
    let explain = format!("EXPLAIN (ANALYZE, COSTS ON) {sql}");
    let plan: Vec<String> = sqlx::raw_sql(sqlx::AssertSqlSafe(explain))
        .fetch_all(&mut *conn)
        .await
        .expect("explain the catalog generation read")
        .iter()
        .map(|row| sqlx::Row::get::<String, _>(row, 0))
        .collect();
    let plan = plan.join("\n");
    // The premise: the scan is costed above the JIT's default threshold
    // (100,000), as every forced sequential scan is.
    assert!(plan.contains("cost=10000000000"), "{plan}");
    assert!(!plan.contains("JIT"), "compiled: {plan}");
}

/// The generic plan PostgreSQL makes of `sql` with `args` (SQL literals),
/// on a fresh migrated schema whose tables are empty and were never
/// analyzed — the plan a connection caches when a store is new.
async fn generic_plan(url: &str, schema: &str, sql: &str, args: &str) -> Vec<String> {
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    for setup in [
        format!("SET search_path = \"{schema}\""),
        "SET plan_cache_mode = force_generic_plan".to_owned(),
        format!("PREPARE hot AS {sql}"),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(setup))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let explain = format!("EXPLAIN EXECUTE hot({args})");
    sqlx::raw_sql(sqlx::AssertSqlSafe(explain))
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .iter()
        .map(|row| sqlx::Row::get::<String, _>(row, 0))
        .collect()
}

/// The two statements of an unordered group's fetch reach the group's
/// deliveries and the stream's events by key in their generic plans, made
/// on empty tables without statistics (or read nothing, behind a one-time
/// filter, when a batch has nothing for them): a cached plan that walked
/// the group made each call of a growing group slower than the last until
/// the next ANALYZE replaced it (docs/benchmarks.md). Acks go through
/// `rheo_ack`, whose one statement is an equality on a unique key.
#[tokio::test]
async fn hot_statements_reach_rows_by_key_in_generic_plans() {
    use crate::sql::{Dialect, Statement};
    let Some((_backend, url, schema)) = one_node_at(frozen()).await else {
        return;
    };
    let (s, g, ts) = ("'s'", "'g'", "'2026-01-01T00:00:00Z'");
    let hot = [
        (
            Statement::fetch_open,
            format!("{s}, {g}, ARRAY[0,1], {ts}, 50, 3, 'poison'"),
        ),
        (
            Statement::fetch_lease,
            format!(
                "ARRAY[0,1,2], ARRAY[0,0,0], ARRAY[1,2,3]::bigint[], ARRAY['l1','l2',''], \
                 {s}, {g}, 'c', {ts}, {ts}, 'none'"
            ),
        ),
    ];
    let mut wrong = Vec::new();
    for (statement, args) in hot {
        let sql = super::PostgresDialect::statement(statement);
        let plan = generic_plan(&url, &schema, sql, &args).await;
        let text = plan.join("\n");
        let mut scans = 0;
        for (i, line) in plan.iter().enumerate() {
            let on_history = line.contains("Scan using rheo_deliveries")
                || line.contains("Scan using rheo_events")
                || line.contains("Seq Scan on rheo_deliveries")
                || line.contains("Seq Scan on rheo_events");
            if !on_history || gated(&plan, i) {
                continue;
            }
            scans += 1;
            // The scan's condition: the first after it, before the next node.
            let cond = plan[i + 1..]
                .iter()
                .take_while(|l| !l.contains("->"))
                .find(|l| l.contains("Index Cond:"));
            let by_key = !line.contains("Seq Scan")
                && cond.is_some_and(|cond| {
                    ["partition", "sequence", "event_id", "(id "]
                        .iter()
                        .any(|key| cond.contains(key))
                });
            if !by_key {
                wrong.push(format!(
                    "{statement:?} reaches rows by stream and group alone:\n{text}"
                ));
            }
        }
        if scans == 0 {
            wrong.push(format!("{statement:?}: no index scan in\n{text}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// Whether the plan node at `line` runs only when a one-time filter above
/// it passes (a `Result` gating its subtree on an init plan's answer).
fn gated(plan: &[String], line: usize) -> bool {
    let depth = |l: &str| l.len() - l.trim_start().len();
    let mut at = depth(&plan[line]);
    for i in (0..line).rev() {
        let l = &plan[i];
        if depth(l) >= at || l.trim_start().starts_with("InitPlan") {
            continue;
        }
        at = depth(l);
        let gate = plan[i + 1..line]
            .iter()
            .take_while(|n| !n.contains("->"))
            .any(|n| n.contains("One-Time Filter"));
        if gate {
            return true;
        }
    }
    false
}

/// Stream `orders` (one partition) holding `events` events, and the name
/// `billing` for a group of it.
async fn orders(
    b: &PostgresBackend,
    events: usize,
) -> (
    rheo_core::model::StreamName,
    rheo_core::model::GroupName,
    Vec<rheo_core::model::Appended>,
) {
    use rheo_core::backend::CreateStream;
    use rheo_core::model::{EventInput, GroupName, StreamName};
    let s = StreamName::parse("orders").unwrap();
    let stream = CreateStream {
        name: s.clone(),
        partition_count: 1,
        retention: None,
    };
    b.create_stream(stream).await.unwrap();
    let appended = (b.append(&s, vec![EventInput::default(); events]).await).unwrap();
    (s, GroupName::parse("billing").unwrap(), appended)
}

/// A fetch of up to `limit` by consumer `c1`, leased for a minute.
fn fetch_by_c1(
    s: &rheo_core::model::StreamName,
    g: &rheo_core::model::GroupName,
    limit: u32,
) -> rheo_core::backend::FetchRequest {
    rheo_core::backend::FetchRequest {
        stream: s.clone(),
        group: g.clone(),
        limit,
        consumer_id: rheo_core::model::ConsumerId::parse("c1").unwrap(),
        lease_ms: 60_000,
        partitions: rheo_core::backend::Partitions::All,
    }
}

/// An ack on a delivery's first attempt deletes its row, one on a later
/// attempt keeps it as 'acked', and a delivery at or before the group's
/// start keeps it whatever its attempt
/// (`migrations/postgres/0009_first_acks_leave_no_row.sql`). Single acks
/// and batch acks alike.
#[tokio::test]
async fn first_attempt_acks_leave_no_row() {
    use rheo_core::backend::Replay;
    use rheo_core::model::{GroupSpec, Settlement, StartAfter, StartPosition};
    let Some(b) = one_node(frozen()).await else {
        return;
    };
    let pool = b.dialect.pool.clone();
    let rows = || async {
        let rows: Vec<(i64, String, i32)> = sqlx::query_as(
            "SELECT sequence, status, attempt FROM rheo_deliveries ORDER BY sequence",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        rows
    };
    let row = |seq: i64, status: &str, attempt: i32| (seq, status.to_owned(), attempt);
    let (s, g, appended) = orders(&b, 5).await;
    let mut spec = GroupSpec::new(g.clone());
    spec.start = StartPosition::After(StartAfter::All(1));
    b.create_group(&s, spec).await.unwrap();
    let fetch = |limit| fetch_by_c1(&s, &g, limit);
    let leases = b.fetch(fetch(4)).await.unwrap();
    b.ack(&s, &g, leases[0].target()).await.unwrap();
    b.nack(&s, &g, leases[1].target(), None, None)
        .await
        .unwrap();
    let batch = leases[2..]
        .iter()
        .map(|l| Settlement::ack(l.target()))
        .collect();
    for result in b.settle(&s, &g, batch).await.unwrap() {
        result.unwrap();
    }
    assert_eq!(
        rows().await,
        vec![row(3, "available", 1)],
        "first attempts leave no row"
    );
    let again = b.fetch(fetch(4)).await.unwrap();
    assert_eq!(again[0].attempt, 2);
    b.ack(&s, &g, again[0].target()).await.unwrap();
    assert_eq!(rows().await, vec![row(3, "acked", 2)]);
    // The event before the start comes back never delivered, is claimed
    // once and acked: it keeps its row, or a second replay would take it
    // for never delivered again.
    let before = Replay::EventIds(vec![appended[0].event.id.clone()]);
    assert_eq!(b.replay(&s, &g, before).await.unwrap(), 1);
    let first = b.fetch(fetch(4)).await.unwrap();
    assert_eq!(first[0].attempt, 1);
    b.ack(&s, &g, first[0].target()).await.unwrap();
    assert_eq!(rows().await, vec![row(1, "acked", 1), row(3, "acked", 2)]);
}

/// A batch ack, and a single settle's fence, read one index entry of the
/// deliveries per lease, whatever the statistics say: after first-attempt
/// acks (their rows deleted, their index entries left until a vacuum) and
/// an `ANALYZE` that saw the table empty, a lookup by (stream, group,
/// event id) was planned as a walk of every entry of the group — here,
/// 100 acks before, 2,600 entries read for 50 acks
/// (`migrations/postgres/0010_acks_by_position.sql`, `lease_by_event.sql`).
/// Counted with the server's index statistics, on a session set up as the
/// store's are.
#[tokio::test]
async fn a_batch_ack_reads_one_index_entry_per_ack_after_an_empty_analyze() {
    use crate::sql::{Dialect, Statement};
    use rheo_core::model::{GroupSpec, Settlement};
    use sqlx::Connection as _;
    let Some((b, url, schema)) = one_node_at(frozen()).await else {
        return;
    };
    let (s, g, _) = orders(&b, 150).await;
    b.create_group(&s, GroupSpec::new(g.clone())).await.unwrap();
    let fetch = |limit| fetch_by_c1(&s, &g, limit);
    // 100 first acks: no row left, 100 dead entries in each index.
    for _ in 0..2 {
        let leases = b.fetch(fetch(50)).await.unwrap();
        let batch = leases.iter().map(|l| Settlement::ack(l.target())).collect();
        for result in b.settle(&s, &g, batch).await.unwrap() {
            result.unwrap();
        }
    }
    // A session like the store's, whose plans are made after an ANALYZE
    // that saw no delivery (and one that saw the log as it is).
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    for setup in [
        format!("SET search_path = \"{schema}\""),
        "SET plan_cache_mode = force_generic_plan".to_owned(),
        "SET enable_seqscan = off".to_owned(),
        "SET jit = off".to_owned(),
        "SET stats_fetch_consistency = none".to_owned(),
        "ANALYZE rheo_deliveries".to_owned(),
        "ANALYZE rheo_events".to_owned(),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(setup))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let entries_read = async |conn: &mut sqlx::PgConnection| -> i64 {
        sqlx::raw_sql("SELECT pg_stat_force_next_flush()")
            .execute(&mut *conn)
            .await
            .unwrap();
        sqlx::query_scalar(
            "SELECT sum(idx_tup_read)::bigint FROM pg_stat_user_indexes \
             WHERE schemaname = current_schema() AND relname = 'rheo_deliveries'",
        )
        .fetch_one(conn)
        .await
        .unwrap()
    };
    let leases = b.fetch(fetch(50)).await.unwrap();
    assert_eq!(leases.len(), 50);
    // The fence of a single settle or renew, for each lease.
    let fence = super::PostgresDialect::statement(Statement::lease_by_event);
    let before = entries_read(&mut conn).await;
    for lease in &leases {
        let row = sqlx::query(sqlx::AssertSqlSafe(fence))
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(lease.event_id.as_str())
            .fetch_optional(&mut conn)
            .await
            .unwrap();
        assert!(row.is_some(), "the fence finds {}", lease.event_id);
    }
    let read = entries_read(&mut conn).await - before;
    assert!(read <= 100, "50 fences read {read} index entries");

    let before = entries_read(&mut conn).await;
    let events: Vec<&str> = leases.iter().map(|l| l.event_id.as_str()).collect();
    let lease_ids: Vec<&str> = leases.iter().map(|l| l.lease_id.as_str()).collect();
    let acked: Vec<(String,)> = sqlx::query_as("SELECT event_id FROM rheo_ack($1, $2, $3, $4)")
        .bind(s.as_str())
        .bind(g.as_str())
        .bind(&events)
        .bind(&lease_ids)
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert_eq!(acked.len(), 50, "every lease acked");
    let read = entries_read(&mut conn).await - before;
    assert!(read <= 100, "50 acks read {read} index entries");
}
