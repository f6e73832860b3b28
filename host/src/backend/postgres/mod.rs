//! The PostgreSQL backend (`postgres://…`): the shared store several Rheo
//! servers can use at once.
//!
//! Claims take delivery rows with `FOR UPDATE SKIP LOCKED`, so competing
//! fetchers on any node never wait for or double-claim each other's rows;
//! creating deliveries past a group's cursor locks that partition's cursor
//! row, so two nodes never create the same delivery. Every settle is one
//! conditional `UPDATE` on (status, lease_id). Sequences are allocated and
//! events inserted in one transaction; the allocator row lock makes appends
//! to one partition commit in sequence order.
//!
//! Reads of open deliveries (claims, the poison guard, the frontier, lag and
//! the next due time) start at each group partition's stored *floor*, a
//! lower bound of its open sequences that fetches raise and re-opens lower
//! (see `migrations/postgres/0003_scan_floors.sql`). An update leaves the
//! row's old index entries behind until VACUUM, so without the floor those
//! reads would step over one dead entry per delivery ever settled.
//!
//! Appends (and anything else that makes work claimable) `NOTIFY` a channel
//! named after the schema; a `LISTEN` connection per backend turns those
//! into wake-ups, so handlers on every node wake for appends made anywhere.
//!
//! Optional `schema=<name>` in the URL keeps Rheo's tables in their own
//! schema (created on migrate); the rest of the URL goes to the driver.

mod groups;
mod log;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use sqlx::postgres::{PgArguments, PgConnectOptions, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::types::Json;
use sqlx::{AssertSqlSafe, Connection, PgConnection, Postgres, Row};

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
pub(crate) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

/// Connection settings beyond the URL.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// Schema for Rheo's tables (default: the server's search_path, usually `public`).
    pub schema: Option<String>,
    /// Pool size, the LISTEN connection included.
    pub max_connections: u32,
    /// How long a call waits for a connection before `backend_unavailable`.
    pub acquire_timeout: Duration,
    /// Server-side limit on any one statement; a write that hits it is `ambiguous`.
    pub statement_timeout: Duration,
    /// Shown in `pg_stat_activity`.
    pub application_name: String,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            schema: None,
            max_connections: 10,
            acquire_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(30),
            application_name: "rheo".into(),
        }
    }
}

/// Streams and groups in a PostgreSQL database.
#[derive(Debug)]
pub struct PostgresBackend {
    pool: PgPool,
    schema: Option<String>,
    clock: SharedClock,
    notifier: std::sync::Arc<Notifier>,
    /// The NOTIFY channel, named after the schema so tenants do not wake each other.
    channel: String,
    listener: tokio::task::JoinHandle<()>,
    /// Streams never change or disappear once created, so what was read
    /// once is cached (never a negative answer).
    streams: RwLock<HashMap<StreamName, StreamMeta>>,
    /// Groups cannot be changed or deleted, so their settings are cached
    /// like streams (never a negative answer).
    groups: RwLock<HashMap<(StreamName, GroupName), GroupConfig>>,
    /// Where each group's next fetch starts its round-robin.
    rotation: Mutex<HashMap<(StreamName, GroupName), usize>>,
    /// Events appended and deliveries created by this process, to refresh
    /// the planner's statistics of each table as it grows.
    events_growth: Growth,
    deliveries_growth: Growth,
}

/// Rows written to one table, and the count at which its statistics are
/// next refreshed.
#[derive(Debug)]
struct Growth {
    written: AtomicU64,
    next: AtomicU64,
}

impl Growth {
    fn new() -> Self {
        Self {
            written: AtomicU64::new(0),
            next: AtomicU64::new(ANALYZE_FIRST),
        }
    }

    /// Adds `rows`; the new total (once) when a refresh is due.
    fn grew(&self, rows: u64) -> Option<u64> {
        let total = self.written.fetch_add(rows, Ordering::Relaxed) + rows;
        let next = self.next.load(Ordering::Relaxed);
        if total < next {
            return None;
        }
        let after = (total * 2).min(total + ANALYZE_EVERY_MAX);
        self.next
            .compare_exchange(next, after, Ordering::Relaxed, Ordering::Relaxed)
            .ok()
            .map(|_| total)
    }
}

/// Which table grew.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Table {
    Events,
    Deliveries,
}

/// First statistics refresh after this many rows written; then each time
/// the count doubles, and at least every [`ANALYZE_EVERY_MAX`] rows.
const ANALYZE_FIRST: u64 = 1_000;
/// Longest gap between statistics refreshes, in rows written.
const ANALYZE_EVERY_MAX: u64 = 200_000;

#[derive(Debug, Clone, Copy)]
struct StreamMeta {
    partition_count: u32,
    created_at: Timestamp,
}

impl Drop for PostgresBackend {
    fn drop(&mut self) {
        // The listener holds a pool handle; stopping it lets the pool close.
        self.listener.abort();
    }
}

/// Splits Rheo's own `schema=` parameter off a PostgreSQL URL.
pub fn split_schema(url: &str) -> Result<(String, Option<String>)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut schema = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|kv| match kv.strip_prefix("schema=") {
            Some(name) => {
                schema = Some(name.to_owned());
                false
            }
            None => !kv.is_empty(),
        })
        .collect();
    if let Some(name) = &schema {
        validate_schema(name)?;
    }
    let url = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((url, schema))
}

/// Schema names are plain identifiers (they are interpolated, quoted, into
/// `CREATE SCHEMA` and the NOTIFY channel name, whose limit is 63 bytes).
fn validate_schema(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 50
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "schema",
            format!("{name:?}: use 1–50 characters of [A-Za-z0-9_], not starting with a digit"),
        ))
    }
}

impl PostgresBackend {
    /// Counts rows written and, as the tables grow, refreshes their planner
    /// statistics in the background. Statements keep generic plans per
    /// connection; a plan made while the tables were nearly empty (and
    /// without statistics) can pick an index that walks a whole group, so
    /// fresh statistics — which also invalidate the cached plans — must not
    /// wait for autovacuum's next round during a burst of writes.
    pub(crate) fn wrote(&self, table: Table, rows: u64) {
        let (growth, statement) = match table {
            Table::Events => (&self.events_growth, "ANALYZE rheo_events"),
            Table::Deliveries => (&self.deliveries_growth, "ANALYZE rheo_deliveries"),
        };
        let Some(total) = growth.grew(rows) else {
            return;
        };
        let pool = self.pool.clone();
        tokio::spawn(async move {
            let analyzed = sqlx::query(statement).execute(&pool).await;
            match analyzed {
                Ok(_) => tracing::debug!(statement, rows = total, "planner statistics refreshed"),
                Err(e) => tracing::debug!(error = %e, "ANALYZE failed; autovacuum will do it"),
            }
        });
    }

    /// Connects to `url` (which may carry `schema=`), and with `migrate`
    /// creates the schema and applies pending migrations.
    pub async fn connect(url: &str, clock: SharedClock, migrate: bool) -> Result<Self> {
        let (url, schema) = split_schema(url)?;
        let options = PostgresOptions {
            schema,
            ..PostgresOptions::default()
        };
        Self::connect_with(&url, options, clock, migrate).await
    }

    /// Connects with explicit options.
    pub async fn connect_with(
        url: &str,
        options: PostgresOptions,
        clock: SharedClock,
        migrate: bool,
    ) -> Result<Self> {
        if let Some(schema) = &options.schema {
            validate_schema(schema)?;
        }
        let timeout = format!("{}ms", options.statement_timeout.as_millis());
        let mut connect = PgConnectOptions::from_str(url)
            .map_err(|e| Error::invalid("backend", format!("not a PostgreSQL URL: {e}")))?
            .application_name(&options.application_name)
            .options([
                ("statement_timeout", timeout.as_str()),
                // Plan each prepared statement once per connection: every
                // statement here is an index walk keyed by (stream, group),
                // and re-planning on each call costs more than it runs.
                ("plan_cache_mode", "force_generic_plan"),
                // A plan made while a table was small must not become a
                // sequential scan once it holds millions of rows: every
                // statement here has an index (or ctid) path, so make the
                // planner take it whatever the statistics said at planning
                // time. Without an index path a scan is still possible.
                ("enable_seqscan", "off"),
            ]);
        if let Some(schema) = &options.schema {
            connect = connect.options([("search_path", schema.as_str())]);
        }
        // One plain connection first: a refused connection or a bad password
        // is reported as such, not as a pool timeout.
        PgConnection::connect_with(&connect)
            .await
            .map_err(|e| map_error(e, Phase::Read))?
            .close()
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(2))
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let channel = format!("rheo.{}", options.schema.as_deref().unwrap_or("public"));
        let notifier = std::sync::Arc::new(Notifier::default());
        let listener = tokio::spawn(listen(pool.clone(), channel.clone(), notifier.clone()));
        let backend = Self {
            pool,
            schema: options.schema,
            clock,
            notifier,
            channel,
            listener,
            streams: RwLock::new(HashMap::new()),
            groups: RwLock::new(HashMap::new()),
            rotation: Mutex::new(HashMap::new()),
            events_growth: Growth::new(),
            deliveries_growth: Growth::new(),
        };
        if migrate {
            backend.migrate().await?;
        }
        Ok(backend)
    }

    /// Creates the schema if needed and applies pending migrations
    /// (idempotent); returns the ones applied now.
    pub async fn migrate(&self) -> Result<Vec<String>> {
        if let Some(schema) = &self.schema {
            // The name was validated as a plain identifier.
            sqlx::query(AssertSqlSafe(format!(
                "CREATE SCHEMA IF NOT EXISTS \"{schema}\""
            )))
            .execute(&self.pool)
            .await
            .map_err(write_err)?;
        }
        let before = self.applied_versions().await;
        MIGRATOR
            .run(&self.pool)
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
            .fetch_all(&self.pool)
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
            .fetch_optional(&self.pool)
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

    /// Wakes handlers of `stream` on every node once the transaction commits.
    async fn notify_in(&self, conn: &mut sqlx::PgConnection, stream: &StreamName) -> Result<()> {
        sqlx::query(include_str!("sql/append_notify.sql"))
            .bind(&self.channel)
            .bind(stream.as_str())
            .execute(conn)
            .await
            .map(|_| ())
            .map_err(write_err)
    }
}

/// Turns NOTIFYs into local wake-ups until the backend is dropped. A lost
/// connection may have lost notifications, so it wakes every waiter.
async fn listen(pool: PgPool, channel: String, notifier: std::sync::Arc<Notifier>) {
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "postgres: LISTEN connection failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if let Err(e) = listener.listen(&channel).await {
            tracing::warn!(error = %e, "postgres: LISTEN failed; retrying");
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        loop {
            match listener.try_recv().await {
                Ok(Some(n)) => {
                    if let Ok(stream) = StreamName::parse(n.payload()) {
                        notifier.notify(&stream);
                    }
                }
                Ok(None) => notifier.notify_all(),
                Err(e) => {
                    tracing::warn!(error = %e, "postgres: LISTEN connection lost; reconnecting");
                    notifier.notify_all();
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    break;
                }
            }
        }
    }
}

pub(super) fn read_err(e: sqlx::Error) -> Error {
    map_error(e, Phase::Read)
}

pub(super) fn write_err(e: sqlx::Error) -> Error {
    map_error(e, Phase::Write)
}

fn corrupt(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::Failed(format!("unreadable {what} in the database: {detail}"))
}

/// A timestamp as PostgreSQL takes it.
pub(super) fn pg_ts(t: Timestamp) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_millis(t.as_millis()).unwrap_or_default()
}

pub(super) fn ts_col(row: &PgRow, i: usize) -> Result<Timestamp> {
    let t: chrono::DateTime<chrono::Utc> = row.try_get(i).map_err(read_err)?;
    Ok(Timestamp::from_millis(t.timestamp_millis()))
}

pub(super) fn opt_ts_col(row: &PgRow, i: usize) -> Result<Option<Timestamp>> {
    let t: Option<chrono::DateTime<chrono::Utc>> = row.try_get(i).map_err(read_err)?;
    Ok(t.map(|t| Timestamp::from_millis(t.timestamp_millis())))
}

pub(super) fn u64_col(row: &PgRow, i: usize) -> Result<u64> {
    let n: i64 = row.try_get(i).map_err(read_err)?;
    u64::try_from(n).map_err(|e| corrupt("number", e))
}

pub(super) fn u32_col(row: &PgRow, i: usize) -> Result<u32> {
    let n: i32 = row.try_get(i).map_err(read_err)?;
    u32::try_from(n).map_err(|e| corrupt("number", e))
}

/// Reads an event from the columns `partition, sequence, id, key, type,
/// ts, payload, metadata` starting at `at`.
pub(super) fn event_at(stream: &StreamName, row: &PgRow, at: usize) -> Result<Event> {
    let id: String = row.try_get(at + 2).map_err(read_err)?;
    let payload: Json<JsonObject> = row.try_get(at + 6).map_err(read_err)?;
    let metadata: Json<JsonObject> = row.try_get(at + 7).map_err(read_err)?;
    Ok(Event {
        id: EventId::parse(id).map_err(|e| corrupt("event id", e))?,
        stream: stream.clone(),
        partition: u32_col(row, at)?,
        sequence: u64_col(row, at + 1)?,
        key: row.try_get(at + 3).map_err(read_err)?,
        event_type: row.try_get(at + 4).map_err(read_err)?,
        timestamp: ts_col(row, at + 5)?,
        payload: payload.0,
        metadata: metadata.0,
    })
}

/// Binds builder values to a PostgreSQL statement.
pub(super) fn bind_all(
    mut q: sqlx::query::Query<'static, Postgres, PgArguments>,
    binds: Vec<Bind>,
) -> sqlx::query::Query<'static, Postgres, PgArguments> {
    for b in binds {
        q = match b {
            Bind::Text(s) | Bind::Json(s) => q.bind(s),
            Bind::Int(i) => q.bind(i),
            Bind::Float(f) => q.bind(f),
            Bind::Time(t) => q.bind(pg_ts(t)),
            Bind::TextArray(v) => q.bind(v),
        };
    }
    q
}

/// A sequence as PostgreSQL stores it.
pub(super) fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Partitions as PostgreSQL stores them.
pub(super) fn parts(list: &[u32]) -> Vec<i32> {
    list.iter().map(|p| *p as i32).collect()
}

crate::backend::sql::sql_backend!(
    PostgresBackend,
    "postgres",
    Capabilities {
        durable: true,
        multi_node: true,
        cross_process_wakeups: true,
    },
    pool
);

#[cfg(test)]
pub(crate) mod tests;
