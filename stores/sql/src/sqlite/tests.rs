//! SQLite tests: the shared conformance suite on a database file (WAL,
//! the real writer and reader pools), the in-memory variant, and restart.

use std::sync::Arc;

use parking_lot::Mutex;

use super::SqliteBackend;
use rheo_core::backend::conformance::{Opened, Reopen};
use rheo_core::backend::{Backend, CreateStream, DeadLettersRequest, FetchRequest, Partitions};
use rheo_core::clock::{FrozenClock, SharedClock};
use rheo_core::model::{ConsumerId, EventInput, GroupName, GroupSpec, StreamName, Timestamp};

/// A backend on a new database file, and how to restart on that file:
/// close the last backend's connections (as a process exit would) and
/// open the file again, so the model check can restart at random steps.
async fn factory(clock: SharedClock) -> Option<Opened> {
    let folder = Arc::new(tempfile::tempdir().expect("a temporary folder"));
    let url = format!("sqlite://{}", folder.path().join("rheo.db").display());
    let first = SqliteBackend::open(&url, clock.clone(), true)
        .await
        .expect("open a SQLite database file");
    let last = Arc::new(Mutex::new(Arc::new(first)));
    let backend: Arc<dyn Backend> = last.lock().clone();
    let reopen = Reopen::new(move || {
        // The folder goes with the harness, after every backend on it.
        let _folder = &folder;
        let (url, clock, last) = (url.clone(), clock.clone(), Arc::clone(&last));
        Box::pin(async move {
            let previous = last.lock().clone();
            previous.dialect.writer.close().await;
            previous.dialect.reader.close().await;
            let next = SqliteBackend::open(&url, clock, true)
                .await
                .expect("open the SQLite database file again");
            let next = Arc::new(next);
            *last.lock() = Arc::clone(&next);
            next as Arc<dyn Backend>
        })
    });
    Some(Opened {
        backend,
        reopen: Some(reopen),
        divisor: 1,
    })
}

rheo_core::backend_conformance!(factory);

fn names() -> (StreamName, GroupName) {
    (
        StreamName::parse("orders").unwrap(),
        GroupName::parse("billing").unwrap(),
    )
}

fn fetch(limit: u32) -> FetchRequest {
    let (s, g) = names();
    FetchRequest {
        stream: s,
        group: g,
        limit,
        consumer_id: ConsumerId::parse("c1").unwrap(),
        lease_ms: 60_000,
        partitions: Partitions::All,
    }
}

/// Stream `orders` with `partitions` partitions, and group `billing`.
async fn stream_and_group(b: &SqliteBackend, partitions: u32) {
    let (s, g) = names();
    let stream = CreateStream {
        name: s.clone(),
        partition_count: partitions,
        retention: None,
    };
    b.create_stream(stream).await.unwrap();
    b.create_group(&s, GroupSpec::new(g)).await.unwrap();
}

/// Stream `orders` (two partitions) with three events, group `billing`.
async fn three_events_and_a_group(b: &SqliteBackend) -> Vec<rheo_core::model::Appended> {
    stream_and_group(b, 2).await;
    b.append(&names().0, vec![EventInput::default(); 3])
        .await
        .unwrap()
}

/// `sqlite::memory:` (one connection serves reads and writes) works too.
#[tokio::test]
async fn an_in_memory_database_serves_reads_and_writes() {
    let clock = FrozenClock::new(Timestamp::from_millis(1_767_225_600_000));
    let b = SqliteBackend::open("sqlite::memory:", clock, true)
        .await
        .unwrap();
    let (s, g) = names();
    three_events_and_a_group(&b).await;
    let leases = b.fetch(fetch(10)).await.unwrap();
    assert_eq!(leases.len(), 3);
    for lease in leases {
        b.ack(&s, &g, lease.into_target()).await.unwrap();
    }
    let lag = b.lag(&s, &g, &Partitions::All).await.unwrap();
    assert_eq!((lag.lag, lag.inflight), (0, 0));
}

/// A restarted process finds streams, events, groups, leases and dead
/// letters as they were.
#[tokio::test]
async fn everything_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("rheo.db").display());
    let clock = FrozenClock::new(Timestamp::from_millis(1_767_225_600_000));
    let (s, g) = names();
    let (appended, held) = {
        let b = SqliteBackend::open(&url, clock.clone(), true)
            .await
            .unwrap();
        let appended = three_events_and_a_group(&b).await;
        let mut leases = b.fetch(fetch(2)).await.unwrap();
        let rejected = leases.remove(0);
        b.reject(&s, &g, rejected.target(), Some("bad".into()))
            .await
            .unwrap();
        (appended, leases.remove(0))
    };

    let b = SqliteBackend::open(&url, clock.clone(), true)
        .await
        .unwrap();
    let stream = b.get_stream(&s).await.unwrap();
    assert_eq!(stream.partition_count, 2);
    assert_eq!(stream.high_watermarks.iter().sum::<u64>(), 3);
    let groups = b.list_groups(&s).await.unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].name, g);
    let dead = b
        .dead_letters(DeadLettersRequest {
            stream: s.clone(),
            group: g.clone(),
            limit: 10,
            after: None,
        })
        .await
        .unwrap();
    assert_eq!(dead.dead_letters.len(), 1);
    assert_eq!(dead.dead_letters[0].reason, "bad");
    let info = b.group_info(&s, &g).await.unwrap();
    assert_eq!((info.inflight, info.dead_letters), (1, 1));
    // The lease taken before the restart is still the live one.
    b.ack(&s, &g, held.target()).await.unwrap();
    let rest = b.fetch(fetch(2)).await.unwrap();
    assert_eq!(rest.len(), 1);
    let mut ids: Vec<_> = appended.iter().map(|a| a.event.id.clone()).collect();
    ids.retain(|id| *id == rest[0].event_id);
    assert_eq!(ids.len(), 1, "the third event, unchanged");
}

/// The plan SQLite makes of each of `statements` (the detail of each
/// step), read on the writer of a new migrated database.
async fn plans(
    statements: impl IntoIterator<Item = crate::sql::Statement>,
) -> Vec<(crate::sql::Statement, Vec<String>)> {
    use super::SqliteDialect;
    use crate::sql::Dialect;
    let clock = FrozenClock::new(Timestamp::from_millis(1_767_225_600_000));
    let b = SqliteBackend::open_temporary(clock).await.unwrap();
    let mut conn = b.dialect.writer.acquire().await.unwrap();
    let mut plans = Vec::new();
    for statement in statements {
        // A file of several statements (one call on the connection's
        // thread): the plan of each, one after the other.
        let mut plan = Vec::new();
        for part in parts(SqliteDialect::statement(statement)) {
            let sql = format!("EXPLAIN QUERY PLAN {part}");
            let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .fetch_all(&mut *conn)
                .await
                .unwrap();
            plan.extend(rows.iter().map(|row| sqlx::Row::get::<String, _>(row, 3)));
        }
        plans.push((statement, plan));
    }
    plans
}

/// The statements of a statement file, in order (each ends with `;` at the
/// end of a line, the last one may not).
fn parts(sql: &str) -> Vec<&str> {
    sql.split(";\n")
        .filter(|part| crate::sql::has_sql(part))
        .collect()
}

/// The parameters (`?N`) a statement names, in ascending order.
fn parameters(statement: &str) -> Vec<usize> {
    let mut named: Vec<usize> = statement
        .split('?')
        .skip(1)
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect();
    named.sort_unstable();
    named.dedup();
    named
}

/// sqlx binds a call of several statements one statement at a time: a
/// named parameter `?N` takes the call's N-th argument, but each gap below
/// a statement's highest parameter takes the next argument from a count
/// that runs on across statements, and once that count passes the last
/// argument it stops binding the statement's remaining parameters, which
/// are then NULL (a fetch whose events read nothing). So every statement
/// after the first of a file names its parameters `?1…?k` without a gap;
/// the callers order their arguments to allow it (`sql/claim.rs`).
#[test]
fn several_statements_in_one_call_bind_every_parameter() {
    use super::SqliteDialect;
    use crate::sql::{Dialect, Statement};
    let mut several = 0;
    macro_rules! check {
        (() $($name:ident),*) => {
            $(
                let statements = parts(SqliteDialect::statement(Statement::$name));
                if statements.len() > 1 {
                    several += 1;
                }
                for (i, part) in statements.iter().enumerate().skip(1) {
                    let named = parameters(part);
                    let gapless: Vec<usize> = (1..=named.len()).collect();
                    assert_eq!(
                        named, gapless,
                        "statement {} of {}.sql names its parameters with a gap",
                        i + 1,
                        stringify!($name)
                    );
                }
            )*
        };
    }
    crate::sql::with_statements!(check!());
    assert_eq!(several, 2, "fetch_open.sql and fetch_lease.sql");
    assert_eq!(parameters("a = ?3 AND b = ?12 AND c = ?3"), vec![3, 12]);
}

/// The statements a fetch, a settle or an append runs reach rows by key
/// (SQLite's planner, without statistics, will otherwise happily walk a
/// stream's events or a group's deliveries for each row of a batch). The
/// plans are read from SQLite itself on a migrated database.
#[tokio::test]
async fn hot_statements_reach_rows_by_key_not_by_walking_history() {
    use crate::sql::Statement;
    let hot = [
        Statement::append_find_ids,
        Statement::append_allocate,
        Statement::append_insert,
        Statement::fetch_candidates,
        Statement::fetch_lock_cursors,
        Statement::fetch_open,
        Statement::fetch_lease,
        Statement::fetch_claim,
        Statement::fetch_materialize,
        Statement::fetch_window,
        Statement::gates_busy,
        Statement::fetch_park,
        Statement::pace_candidates,
        Statement::pace_tats,
        Statement::pace_sweep,
        Statement::pace_store,
        Statement::pace_insert,
        Statement::pace_update,
        Statement::release_gates,
        Statement::advance_cursors,
        Statement::events_at,
        Statement::delivery_by_event,
        Statement::lease_by_event,
        Statement::renew,
        Statement::settle_acks,
        Statement::settle_retry,
        Statement::settle_dead,
        Statement::locate_events,
    ];
    for (statement, plan) in plans(hot).await {
        for step in &plan {
            let walks = step.starts_with("SCAN rheo_")
                || step.ends_with("(stream=?)")
                || step.ends_with("(stream=? AND group_name=?)");
            assert!(!walks, "{statement:?} walks a table: {step}\n{plan:#?}");
        }
    }
}

/// A trim reaches what it removes by key, however long the stream: each
/// group's range of deliveries and the partition's range of events (only
/// the stream's cursor rows, one per group and partition, are walked).
/// The plans are read from SQLite itself on a migrated database.
#[tokio::test]
async fn a_trim_reaches_its_rows_by_key() {
    use crate::sql::Statement;
    let statements = [
        Statement::trim_lock_partition,
        Statement::trim_deliveries,
        Statement::trim_events,
        Statement::trim_partition,
        Statement::trim_cursors,
        Statement::dead_letters,
        Statement::group_positions,
        Statement::high_watermarks,
    ];
    for (statement, plan) in plans(statements).await {
        for step in &plan {
            let history = step.contains("rheo_deliveries") || step.contains("rheo_events");
            let walks = step.starts_with("SCAN rheo_")
                || (history
                    && (step.ends_with("(stream=?)")
                        || step.ends_with("(stream=? AND group_name=?)")));
            assert!(!walks, "{statement:?} walks a table: {step}\n{plan:#?}");
        }
    }
}

/// A store a newer rheo migrated (a migration this build lacks) reports
/// it as unknown, and is refused naming its schema and ours.
#[tokio::test]
async fn a_migration_this_build_lacks_is_unknown_and_refused() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let url = format!("sqlite://{}", folder.path().join("rheo.db").display());
    let clock: SharedClock = FrozenClock::new(Timestamp::from_millis(0));
    let backend = SqliteBackend::open(&url, clock, true)
        .await
        .expect("open and migrate");
    let before = backend.migration_status().await.expect("status");
    assert_eq!(before.applied.len(), super::MIGRATOR.iter().count());
    assert_eq!(before.applied[0], "0001 streams and events");
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from the future', 1, x'00', 0)",
    )
    .execute(&backend.dialect.writer)
    .await
    .expect("record a future migration");
    let after = backend.migration_status().await.expect("status");
    assert_eq!(after.unknown, ["9999"]);
    assert_eq!(after.applied, before.applied);
    let refused = after
        .check_not_newer()
        .expect_err("a newer store")
        .to_string();
    let newest = before.applied.last().expect("applied");
    assert!(refused.contains("at migration 9999"), "{refused}");
    assert!(
        refused.contains(&format!("its newest is {newest}")),
        "{refused}"
    );
}

/// Two backends on one new database file (the first migrates it), which
/// a server never does (`lock_store`), as the nodes of a shared store; the
/// file goes with the folder.
async fn two_nodes_on_one_file() -> (
    tempfile::TempDir,
    Arc<FrozenClock>,
    Arc<SqliteBackend>,
    Arc<SqliteBackend>,
) {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let url = format!("sqlite://{}", folder.path().join("rheo.db").display());
    let clock = FrozenClock::new(Timestamp::from_millis(1_767_225_600_000));
    let a = SqliteBackend::open(&url, clock.clone(), true)
        .await
        .expect("open and migrate");
    let b = SqliteBackend::open(&url, clock.clone(), false)
        .await
        .expect("open again");
    (folder, clock, Arc::new(a), Arc::new(b))
}

/// Two backends on one file as the nodes of a shared store that has not
/// seen the other's deletes: every call of the second finds what the
/// first deleted gone all the same, as it must when a delete commits between a call's read of what
/// it keeps and its transaction (`sql/stale_nodes.rs`).
#[tokio::test]
async fn a_stale_node_finds_deletes_and_leaves_nothing_behind() {
    let (_folder, clock, a, b) = two_nodes_on_one_file().await;
    crate::sql::stale_nodes::a_stale_node_finds_deletes_and_leaves_nothing_behind(clock, a, b)
        .await;
}

/// Node a changes a group's flow while node b keeps the old one
/// (`sql/flow_nodes.rs`).
#[tokio::test]
async fn a_flow_changed_on_one_node_holds_on_the_other() {
    let (_folder, clock, a, b) = two_nodes_on_one_file().await;
    crate::sql::flow_nodes::a_flow_changed_on_one_node_holds_on_the_other(clock, a, b).await;
}

/// Where `flow.key_rate` keeps its buckets and paced marks, and when they
/// go (`sql/key_rates.rs`).
#[tokio::test]
async fn key_rate_buckets_are_rows_that_go_with_their_group() {
    let clock = FrozenClock::new(Timestamp::from_millis(1_767_225_600_000));
    let b = SqliteBackend::open_temporary(clock.clone()).await.unwrap();
    crate::sql::key_rates::key_rate_buckets_are_rows_that_go_with_their_group(clock, Arc::new(b))
        .await;
}

/// Writers on two backends of one file race deletes (`sql/stale_nodes.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_racing_a_delete_leave_nothing_behind() {
    let (_folder, clock, a, b) = two_nodes_on_one_file().await;
    crate::sql::stale_nodes::writes_racing_a_delete_leave_nothing_behind(clock, a, b).await;
}

/// What a trim leaves in the tables (`sql/retention_rows.rs`).
#[tokio::test]
async fn a_trim_leaves_no_row_of_what_it_removed() {
    let clock = FrozenClock::new(Timestamp::from_millis(1_767_225_600_000));
    let b = SqliteBackend::open_temporary(clock.clone()).await.unwrap();
    crate::sql::retention_rows::a_trim_leaves_no_row_of_what_it_removed(clock, Arc::new(b)).await;
}

/// A pragma's number, read on the writer (which sees the latest pages).
async fn pragma(b: &SqliteBackend, name: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("PRAGMA {name}")))
        .fetch_one(&b.dialect.writer)
        .await
        .unwrap()
}

/// Appends `n` events of about 2 KiB each, with ids `{tag}-{i}`, and acks
/// them in group `billing`: every round writes the same rows.
async fn append_and_ack(b: &SqliteBackend, tag: &str, n: usize) {
    let (s, g) = names();
    let payload = rheo_core::model::JsonObject::from_iter([(
        "blob".to_owned(),
        serde_json::Value::from("x".repeat(2048)),
    )]);
    let inputs: Vec<EventInput> = (0..n)
        .map(|i| EventInput {
            id: Some(rheo_core::model::EventId::parse(format!("{tag}-{i:04}")).unwrap()),
            payload: payload.clone(),
            ..EventInput::default()
        })
        .collect();
    for batch in inputs.chunks(100) {
        b.append(&s, batch.to_vec()).await.unwrap();
    }
    loop {
        let leases = b.fetch(fetch(100)).await.unwrap();
        if leases.is_empty() {
            break;
        }
        let acks = leases.into_iter().map(|l| rheo_core::model::Settlement {
            target: l.into_target(),
            op: rheo_core::model::SettleOp::Ack,
        });
        for result in b.settle(&s, &g, acks.collect()).await.unwrap() {
            result.unwrap();
        }
    }
}

/// Trims every event of partition 0 appended so far.
async fn trim_all(b: &SqliteBackend) -> u64 {
    let (s, _) = names();
    let req = rheo_core::backend::TrimRequest {
        stream: s,
        partition: 0,
        before: u64::MAX,
        limit: 1000,
    };
    b.trim(req).await.unwrap().removed
}

/// A new store is created with `auto_vacuum = INCREMENTAL`: the pages a
/// trim frees are on the free list, reused by the next appends, and
/// `reclaim` gives them back to the filesystem, so a store that removes
/// what it appends stops growing (`docs/log.md#retention`). Counted in
/// pages, not bytes or time.
#[tokio::test]
async fn trimmed_pages_are_reused_and_reclaim_gives_them_back() {
    let clock = FrozenClock::new(Timestamp::from_millis(1_767_225_600_000));
    let b = SqliteBackend::open_temporary(clock).await.unwrap();
    assert_eq!(pragma(&b, "auto_vacuum").await, 2, "INCREMENTAL");
    stream_and_group(&b, 1).await;
    let empty = pragma(&b, "page_count").await;

    // Without reclaim: the freed pages are reused, the file stops growing.
    let mut peaks = Vec::new();
    for round in 0..3 {
        append_and_ack(&b, &format!("a{round}"), 300).await;
        peaks.push(pragma(&b, "page_count").await);
        assert_eq!(trim_all(&b).await, 300);
        assert!(pragma(&b, "freelist_count").await > 100, "round {round}");
    }
    assert!(peaks[0] > empty + 100, "{empty} → {peaks:?}");
    // A page or two of b-tree layout aside (where a split falls moves with
    // the rows' size: 0014's paced column moved it by one): a round that
    // reused nothing would add as many as the first.
    assert!(peaks[1..].iter().all(|p| *p <= peaks[0] + 2), "{peaks:?}");

    // reclaim gives every free page back.
    let before = pragma(&b, "page_count").await;
    b.reclaim().await.unwrap();
    assert_eq!(pragma(&b, "freelist_count").await, 0);
    let after = pragma(&b, "page_count").await;
    assert!(after < before - 100, "{before} → {after}");
    for round in 0..2 {
        append_and_ack(&b, &format!("b{round}"), 300).await;
        assert_eq!(trim_all(&b).await, 300);
        b.reclaim().await.unwrap();
        assert_eq!(pragma(&b, "freelist_count").await, 0);
        assert_eq!(pragma(&b, "page_count").await, after, "round {round}");
    }
    assert_eq!(after, empty, "what is left is what an empty stream takes");
}

/// Trims race writers on two backends of one file (`sql/retention_rows.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trims_racing_writers_leave_every_group_consistent() {
    let (_folder, clock, a, b) = two_nodes_on_one_file().await;
    crate::sql::retention_rows::trims_racing_writers_leave_every_group_consistent(clock, a, b)
        .await;
}

/// A store file created before retention (no auto_vacuum) keeps its mode
/// when opened: trims free pages for reuse, and `reclaim` gives nothing
/// back and fails nothing.
#[tokio::test]
async fn a_store_without_auto_vacuum_keeps_its_mode() {
    use sqlx::ConnectOptions as _;
    let folder = tempfile::tempdir().expect("a temporary folder");
    let path = folder.path().join("rheo.db");
    let mut old = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .connect()
        .await
        .unwrap();
    sqlx::query("CREATE TABLE before_retention (x INTEGER)")
        .execute(&mut old)
        .await
        .unwrap();
    sqlx::Connection::close(old).await.unwrap();
    let url = format!("sqlite://{}", path.display());
    let clock = FrozenClock::new(Timestamp::from_millis(1_767_225_600_000));
    let b = SqliteBackend::open(&url, clock, true).await.unwrap();
    assert_eq!(pragma(&b, "auto_vacuum").await, 0, "NONE, as it was");
    stream_and_group(&b, 1).await;
    append_and_ack(&b, "a", 100).await;
    assert_eq!(trim_all(&b).await, 100);
    let free = pragma(&b, "freelist_count").await;
    assert!(free > 0);
    b.reclaim().await.unwrap();
    assert_eq!(pragma(&b, "freelist_count").await, free, "kept for reuse");
}

/// A store migrated before 0011 (its deliveries indexed by event id) takes
/// 0011 with its leases and dead letters in place: a lease taken before
/// the migration is acked after it, and its dead letters page by the id of
/// an event retention removed (`delivery_by_event`, on the index 0011
/// keeps for dead letters).
#[tokio::test]
async fn a_store_from_before_0011_keeps_its_leases_and_dead_letters() {
    use crate::sql::Dialect;
    use rheo_core::backend::retention::{TRIM_BATCH, trim_stream};
    use rheo_core::model::{EventId, Retention};
    let clock = FrozenClock::new(Timestamp::from_millis(1_767_225_600_000));
    let folder = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", folder.path().join("rheo.db").display());
    let b = SqliteBackend::open(&url, clock, false).await.unwrap();
    super::MIGRATOR.run_to(7, &b.dialect.writer).await.unwrap();
    let indexes = || async {
        let rows = sqlx::query(
            "SELECT name FROM sqlite_master WHERE type = 'index' \
             AND tbl_name = 'rheo_deliveries' AND name LIKE '%by_event'",
        )
        .fetch_all(&b.dialect.writer)
        .await
        .unwrap();
        let names: Vec<String> = rows.iter().map(|r| sqlx::Row::get(r, 0)).collect();
        names
    };
    assert_eq!(indexes().await, ["rheo_deliveries_by_event"]);
    // Today's statements read the columns 0012 and 0013 add: lent for the
    // writes before the migration, and taken back before it runs.
    let writer = &b.dialect.writer;
    let shim = |sql: &'static str| async move {
        sqlx::query(sql).execute(writer).await.unwrap();
    };
    shim("ALTER TABLE rheo_groups ADD COLUMN on_exhausted TEXT NOT NULL DEFAULT 'dead_letter'")
        .await;
    shim("ALTER TABLE rheo_groups ADD COLUMN flow TEXT NOT NULL DEFAULT '{}'").await;

    let (s, g) = names();
    stream_and_group(&b, 1).await;
    let ids = ["a", "b", "c", "d"];
    let inputs = ids.map(|id| EventInput {
        id: Some(EventId::parse(id).unwrap()),
        ..EventInput::default()
    });
    b.append(&s, inputs.to_vec()).await.unwrap();
    let mut leases = b.fetch(fetch(4)).await.unwrap();
    for lease in leases.drain(..2) {
        let reason = Some("bad".to_owned());
        b.reject(&s, &g, lease.into_target(), reason).await.unwrap();
    }
    let retention = Retention {
        max_events: Some(2),
        ..Retention::default()
    };
    b.set_retention(&s, Some(retention)).await.unwrap();
    assert_eq!(trim_stream(&b, &s, TRIM_BATCH).await.unwrap().removed, 2);

    shim("ALTER TABLE rheo_groups DROP COLUMN on_exhausted").await;
    shim("ALTER TABLE rheo_groups DROP COLUMN flow").await;
    let applied = b.dialect.migrate().await.unwrap();
    assert_eq!(
        applied,
        [
            "0011 settles by position",
            "0012 quarantine",
            "0013 flow",
            "0014 key rate"
        ]
    );
    assert_eq!(indexes().await, ["rheo_deliveries_dead_by_event"]);

    // Taken before the migration, settled after it.
    let (c, d) = (leases.remove(0), leases.remove(0));
    b.ack(&s, &g, c.into_target()).await.unwrap();
    b.nack(&s, &g, d.target(), None, None).await.unwrap();
    let stale = b.ack(&s, &g, d.into_target()).await.unwrap_err();
    assert_eq!(stale.code(), "stale_lease");
    let page = |after| DeadLettersRequest {
        stream: s.clone(),
        group: g.clone(),
        limit: 1,
        after,
    };
    let first = b.dead_letters(page(None)).await.unwrap();
    assert_eq!(first.dead_letters[0].event_id.as_str(), "a");
    assert!(
        first.dead_letters[0].event.is_none(),
        "retention removed it"
    );
    let second = b.dead_letters(page(first.next.clone())).await.unwrap();
    assert_eq!(second.dead_letters[0].event_id.as_str(), "b");
}
