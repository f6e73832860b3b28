//! The SQLite backend: the embedded default (`sqlite://rheo.db`), and
//! `sqlite::memory:` for tests.
//!
//! One writer connection, so every write transaction (`BEGIN IMMEDIATE`)
//! is serialized in process instead of spinning on SQLite's busy handler;
//! a small pool of readers serves lag, queries and listings concurrently
//! thanks to WAL. `synchronous = FULL` makes every commit durable before
//! the call returns. Timestamps are fixed-width RFC 3339 text, so they
//! compare and sort as text. The schema is in `migrations/sqlite/`; static
//! statements are in `sql/`, one per file.

mod groups;
mod log;

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{Row, Sqlite};

use super::sql::{Bind, GroupConfig, Phase, map_error, newly_applied};
use super::{
    Capabilities, CreateStream, DeadLettersRequest, Error, FetchRequest, Notifier, Partitions,
    ReadRequest, Redrive, RenewRequest, Replay, ResetRequest, Result, Wakeup,
};
use crate::clock::SharedClock;
use crate::model::{
    Appended, DeadLetterPage, Event, EventId, EventInput, Group, GroupInfo, GroupName, GroupSpec,
    JsonObject, Lag, Lease, Page, Query, Settlement, Stream, StreamName, Timestamp,
};

/// The embedded migrations for this dialect.
pub(crate) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// How long a statement waits for SQLite's file lock (held by another
/// process) before giving up with `backend_unavailable`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Read connections for a file database.
const READERS: u32 = 4;

/// Streams and groups in one SQLite database file.
#[derive(Debug)]
pub struct SqliteBackend {
    writer: SqlitePool,
    reader: SqlitePool,
    clock: SharedClock,
    notifier: Notifier,
    /// Streams never change or disappear once created, so what was read
    /// once is cached (never a negative answer).
    streams: RwLock<HashMap<StreamName, StreamMeta>>,
    /// Groups cannot be changed or deleted, so their settings are cached
    /// like streams (never a negative answer).
    groups: RwLock<HashMap<(StreamName, GroupName), GroupConfig>>,
    /// Where each group's next fetch starts its round-robin.
    rotation: Mutex<HashMap<(StreamName, GroupName), usize>>,
}

#[derive(Debug, Clone, Copy)]
struct StreamMeta {
    partition_count: u32,
    created_at: Timestamp,
}

impl SqliteBackend {
    /// Opens (creating if missing) the database at `url` and, with
    /// `migrate`, brings its schema up to date.
    pub async fn open(url: &str, clock: SharedClock, migrate: bool) -> Result<Self> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| Error::invalid("backend", format!("{url:?}: {e}")))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true)
            // 64 MiB of page cache per connection (the default is 2 MiB):
            // with millions of events the B-tree interiors and the hot
            // leaves of the claim indexes stay in memory, so claim and
            // settle cost does not grow with history.
            .pragma("cache_size", "-65536");
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let single = |options: SqliteConnectOptions| {
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                // An in-memory database lives as long as its one connection.
                .idle_timeout(None)
                .max_lifetime(None)
                .connect_with(options)
        };
        let writer = single(options.clone())
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let backend_reader = if in_memory {
            writer.clone()
        } else {
            SqlitePoolOptions::new()
                .max_connections(READERS)
                .connect_with(options.read_only(true))
                .await
                .map_err(|e| map_error(e, Phase::Read))?
        };
        let backend = Self {
            writer,
            reader: backend_reader,
            clock,
            notifier: Notifier::default(),
            streams: RwLock::new(HashMap::new()),
            groups: RwLock::new(HashMap::new()),
            rotation: Mutex::new(HashMap::new()),
        };
        if migrate {
            backend.migrate().await?;
        }
        Ok(backend)
    }

    /// Applies pending migrations (idempotent); returns the ones applied now.
    pub async fn migrate(&self) -> Result<Vec<String>> {
        let before = self.applied_versions().await;
        MIGRATOR
            .run(&self.writer)
            .await
            .map_err(|e| Error::Failed(format!("migration failed: {e}")))?;
        Ok(newly_applied(
            &MIGRATOR,
            &before,
            &self.applied_versions().await,
        ))
    }

    async fn applied_versions(&self) -> Vec<i64> {
        // Before the first migration the table does not exist: nothing applied.
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
            .fetch_all(&self.writer)
            .await
            .unwrap_or_default()
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The stream's fixed facts, or `stream_not_found`.
    async fn meta(&self, stream: &StreamName) -> Result<StreamMeta> {
        if let Some(meta) = self.streams.read().get(stream) {
            return Ok(*meta);
        }
        let row = sqlx::query(include_str!("sql/stream_meta.sql"))
            .bind(stream.as_str())
            .fetch_optional(&self.reader)
            .await
            .map_err(read_err)?
            .ok_or_else(|| Error::StreamNotFound(stream.clone()))?;
        let meta = StreamMeta {
            partition_count: u32_col(&row, 0)?,
            created_at: ts_col(&row, 1)?,
        };
        self.streams.write().insert(stream.clone(), meta);
        Ok(meta)
    }

    /// The next round-robin start for a group.
    fn rotate(&self, stream: &StreamName, group: &GroupName) -> usize {
        let mut rotation = self.rotation.lock();
        let next = rotation.entry((stream.clone(), group.clone())).or_insert(0);
        let current = *next;
        *next = next.wrapping_add(1);
        current
    }
}

pub(super) fn read_err(e: sqlx::Error) -> Error {
    map_error(e, Phase::Read)
}

pub(super) fn write_err(e: sqlx::Error) -> Error {
    map_error(e, Phase::Write)
}

/// Timestamps as stored: fixed-width RFC 3339.
pub(super) fn ts_text(t: Timestamp) -> String {
    t.to_rfc3339()
}

fn corrupt(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::Failed(format!("unreadable {what} in the database: {detail}"))
}

pub(super) fn ts_col(row: &SqliteRow, i: usize) -> Result<Timestamp> {
    let text: String = row.try_get(i).map_err(read_err)?;
    Timestamp::parse_rfc3339(&text).map_err(|e| corrupt("timestamp", e))
}

pub(super) fn opt_ts_col(row: &SqliteRow, i: usize) -> Result<Option<Timestamp>> {
    let text: Option<String> = row.try_get(i).map_err(read_err)?;
    text.map(|t| Timestamp::parse_rfc3339(&t).map_err(|e| corrupt("timestamp", e)))
        .transpose()
}

pub(super) fn u64_col(row: &SqliteRow, i: usize) -> Result<u64> {
    let n: i64 = row.try_get(i).map_err(read_err)?;
    u64::try_from(n).map_err(|e| corrupt("number", e))
}

pub(super) fn u32_col(row: &SqliteRow, i: usize) -> Result<u32> {
    let n: i64 = row.try_get(i).map_err(read_err)?;
    u32::try_from(n).map_err(|e| corrupt("number", e))
}

pub(super) fn json_col(row: &SqliteRow, i: usize) -> Result<JsonObject> {
    let text: String = row.try_get(i).map_err(read_err)?;
    serde_json::from_str(&text).map_err(|e| corrupt("JSON", e))
}

/// Reads an event from the columns `partition, sequence, id, key, type,
/// ts, payload, metadata` starting at `at`.
pub(super) fn event_at(stream: &StreamName, row: &SqliteRow, at: usize) -> Result<Event> {
    let id: String = row.try_get(at + 2).map_err(read_err)?;
    Ok(Event {
        id: EventId::parse(id).map_err(|e| corrupt("event id", e))?,
        stream: stream.clone(),
        partition: u32_col(row, at)?,
        sequence: u64_col(row, at + 1)?,
        key: row.try_get(at + 3).map_err(read_err)?,
        event_type: row.try_get(at + 4).map_err(read_err)?,
        timestamp: ts_col(row, at + 5)?,
        payload: json_col(row, at + 6)?,
        metadata: json_col(row, at + 7)?,
    })
}

/// Binds builder values to a SQLite statement.
pub(super) fn bind_all(
    mut q: sqlx::query::Query<'static, Sqlite, SqliteArguments>,
    binds: Vec<Bind>,
) -> sqlx::query::Query<'static, Sqlite, SqliteArguments> {
    for b in binds {
        q = match b {
            Bind::Text(s) | Bind::Json(s) => q.bind(s),
            Bind::Int(i) => q.bind(i),
            Bind::Float(f) => q.bind(f),
            Bind::Time(t) => q.bind(ts_text(t)),
            Bind::TextArray(_) => {
                unreachable!("the SQLite dialect never binds arrays")
            }
        };
    }
    q
}

/// Rows for a statement that reads them with `json_each(?)`: one JSON
/// array of arrays. One parameter whatever the batch size, so statements
/// stay static and cached.
pub(super) fn json_rows<T: serde::Serialize>(rows: &[T]) -> String {
    serde_json::to_string(rows).unwrap_or_else(|_| "[]".to_owned())
}

/// A position as SQLite stores it.
pub(super) fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

crate::backend::sql::sql_backend!(
    SqliteBackend,
    "sqlite",
    Capabilities {
        durable: true,
        multi_node: false,
        cross_process_wakeups: false,
    },
    reader
);

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::SqliteBackend;
    use crate::backend::Backend;
    use crate::clock::SharedClock;

    async fn factory(clock: SharedClock) -> Option<Arc<dyn Backend>> {
        let backend = SqliteBackend::open("sqlite::memory:", clock, true)
            .await
            .expect("open an in-memory SQLite database");
        Some(Arc::new(backend))
    }

    crate::backend_conformance!(factory);

    /// A restarted process finds streams, events, groups, leases and dead
    /// letters as they were.
    #[tokio::test]
    async fn everything_survives_a_restart() {
        use crate::backend::{DeadLettersRequest, FetchRequest, Partitions};
        use crate::clock::FrozenClock;
        use crate::model::{ConsumerId, EventInput, GroupName, GroupSpec, StreamName, Timestamp};

        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("rheo.db").display());
        let clock = FrozenClock::new(Timestamp::from_millis(1_767_225_600_000));
        let (s, g) = (
            StreamName::parse("orders").unwrap(),
            GroupName::parse("billing").unwrap(),
        );
        let fetch = FetchRequest {
            stream: s.clone(),
            group: g.clone(),
            limit: 2,
            consumer_id: ConsumerId::parse("c1").unwrap(),
            lease_ms: 60_000,
            partitions: Partitions::All,
        };
        let (appended, held) = {
            let b = SqliteBackend::open(&url, clock.clone(), true)
                .await
                .unwrap();
            b.create_stream(crate::backend::CreateStream {
                name: s.clone(),
                partition_count: 2,
            })
            .await
            .unwrap();
            b.create_group(&s, GroupSpec::new(g.clone())).await.unwrap();
            let appended = b.append(&s, vec![EventInput::default(); 3]).await.unwrap();
            let mut leases = b.fetch(fetch.clone()).await.unwrap();
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
        let rest = b.fetch(fetch).await.unwrap();
        assert_eq!(rest.len(), 1);
        let mut ids: Vec<_> = appended.iter().map(|a| a.event.id.clone()).collect();
        ids.retain(|id| *id == rest[0].event_id);
        assert_eq!(ids.len(), 1, "the third event, unchanged");
    }
}
