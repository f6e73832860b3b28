//! The PostgreSQL dialect (`postgres://…`): the shared store several Rheo
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
//! Each server keeps what it read of streams and groups. A delete bumps the
//! store's catalog generation (`migrations/postgres/0006_catalog_generation.sql`)
//! in its transaction; every server reads it at most every
//! [`PostgresOptions::catalog_check_every`] before it trusts what it keeps,
//! and in between a call that finds the rows of what it kept gone answers
//! `stream_not_found` or `group_not_found`
//! (`docs/operations.md#deleting-streams-and-groups`).
//!
//! Optional `schema=<name>` in the URL keeps Rheo's tables in their own
//! schema (created on migrate); the rest of the URL goes to the driver.

mod cluster;
mod json;
mod session;
mod stats;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgRow};
use sqlx::types::Json;
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row as _, SqlSafeStr, TypeInfo, ValueRef};

use self::cluster::{HANDLERS_CHANGED, PgCluster};
pub(crate) use self::session::Timeouts;
use self::stats::Growth;
use super::sql::{
    Access, Arg, Builder, Column, Conn, Dialect, Phase, SqlBackend, Table, map_error,
    run_migrations, statement_files, with_statements,
};
use rheo_core::backend::catalog::{CHECK_EVERY, Catalog};
use rheo_core::backend::{Capabilities, Error, Notifier, Result};
use rheo_core::clock::SharedClock;
use rheo_core::model::{Condition, JsonObject, StreamName, Timestamp};

/// The embedded migrations for this dialect.
pub(crate) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");

/// Connection settings beyond the URL.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// Schema for Rheo's tables (default: the server's search_path, usually `public`).
    pub schema: Option<String>,
    /// Pool size, the LISTEN connection included.
    pub max_connections: u32,
    /// The sessions' and the pool's timeouts, derived from the store
    /// timeout (`session.rs`).
    pub(crate) timeouts: Timeouts,
    /// Shown in `pg_stat_activity`.
    pub(crate) application_name: String,
    /// How often, at most, the store's catalog generation is read, to learn
    /// of streams and groups other servers deleted
    /// (`docs/operations.md#deleting-streams-and-groups`); zero reads it
    /// before every call that uses what this server keeps of them.
    pub catalog_check_every: Duration,
}

impl PostgresOptions {
    /// The defaults, with every timeout derived from store timeout `t`.
    pub fn with_store_timeout(t: Duration) -> Self {
        Self {
            schema: None,
            max_connections: 10,
            timeouts: Timeouts::derived(t),
            application_name: "rheo".into(),
            catalog_check_every: CHECK_EVERY,
        }
    }
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self::with_store_timeout(rheo_core::backend::DEFAULT_STORE_TIMEOUT)
    }
}

/// Streams and groups in a PostgreSQL database.
pub type PostgresBackend = SqlBackend<PostgresDialect>;

/// The pool, the wake-up channel and the growth counters of one backend.
#[derive(Debug)]
pub struct PostgresDialect {
    pool: PgPool,
    schema: Option<String>,
    /// The NOTIFY channel, named after the schema so tenants do not wake each other.
    channel: String,
    /// How a migration session connects (no statement, lock or idle timeout).
    migrations: PgConnectOptions,
    listener: tokio::task::JoinHandle<()>,
    /// Nodes and handler records of the servers sharing the database.
    cluster: Arc<PgCluster>,
    /// Events appended and deliveries created by this process.
    events_growth: Growth,
    deliveries_growth: Growth,
}

impl PostgresDialect {
    /// A session of its own for migrations, without the statement, lock
    /// and idle timeouts of the pool's (session.rs).
    async fn migration_session(&self) -> Result<sqlx::PgPool> {
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(self.migrations.clone())
            .await
            .map_err(|e| map_error(e, Phase::Connect))
    }
}

impl Drop for PostgresDialect {
    fn drop(&mut self) {
        // The listener holds a pool handle; stopping it lets the pool close.
        self.listener.abort();
    }
}

/// The URL parameters the driver understands (libpq's names and sqlx's
/// spellings of them); `schema` is Rheo's own.
const DRIVER_PARAMETERS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// Splits Rheo's own `schema=` parameter off a PostgreSQL URL, and drops
/// (with a warning naming them) the parameters the driver does not know.
pub(crate) fn split_schema(url: &str) -> Result<(String, Option<String>)> {
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
            None if kv.is_empty() => false,
            None => {
                let key = kv.split_once('=').map_or(*kv, |(k, _)| k);
                let known = DRIVER_PARAMETERS.contains(&key) || key.starts_with("options[");
                if !known {
                    // Dropped here with its name only: the driver would log
                    // its value too, and it may be a secret (`sslpassword`).
                    tracing::warn!("ignoring the unknown PostgreSQL URL parameter {key:?}");
                }
                known
            }
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

impl SqlBackend<PostgresDialect> {
    /// Connects to `url` (which may carry `schema=`), with timeouts derived
    /// from store timeout `t`, and with `migrate` creates the schema and
    /// applies pending migrations.
    pub async fn connect(
        url: &str,
        clock: SharedClock,
        migrate: bool,
        t: Duration,
    ) -> Result<Self> {
        let (url, schema) = split_schema(url)?;
        let options = PostgresOptions {
            schema,
            ..PostgresOptions::with_store_timeout(t)
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
        let timeouts = &options.timeouts;
        let session = timeouts.session_options();
        let mut connect = PgConnectOptions::from_str(url)
            .map_err(|e| Error::invalid("backend", format!("not a PostgreSQL URL: {e}")))?
            .application_name(&options.application_name)
            .options([
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
                // No JIT compilation: what `enable_seqscan = off` leaves as
                // a sequential scan (the one-row catalog generation, read
                // every second) is costed at 10^10, far above the JIT's
                // threshold, so it was compiled on every execution: 60-70 ms
                // the first time on a connection and 6 ms after, a call in
                // a hundred (docs/benchmarks.md). Nothing here runs long
                // enough for compiled code to pay.
                ("jit", "off"),
            ])
            // No session may hold locks for long, or wait for ever
            // (session.rs, docs/cluster.md#a-node-cut-off-from-the-store).
            .options(session.iter().map(|(k, v)| (*k, v.as_str())));
        if let Some(schema) = &options.schema {
            connect = connect.options([("search_path", schema.as_str())]);
        }
        // One plain connection first: a refused connection or a bad password
        // is reported as such, not as a pool timeout.
        PgConnection::connect_with(&connect)
            .await
            .map_err(read_err)?
            .close()
            .await
            .map_err(read_err)?;
        let migrations = session::for_migrations(&connect);
        let pool = timeouts
            .pool(options.max_connections.max(2))
            .connect_with(connect)
            .await
            .map_err(read_err)?;
        let channel = format!("rheo.{}", options.schema.as_deref().unwrap_or("public"));
        let notifier = Arc::new(Notifier::default());
        let cluster = Arc::new(PgCluster::new(pool.clone(), channel.clone()));
        let listener = tokio::spawn(listen(
            pool.clone(),
            channel.clone(),
            notifier.clone(),
            Arc::clone(&cluster),
            timeouts.user_timeout,
        ));
        let dialect = PostgresDialect {
            pool,
            schema: options.schema,
            channel,
            migrations,
            listener,
            cluster,
            events_growth: Growth::new(),
            deliveries_growth: Growth::new(),
        };
        let catalog = Catalog::shared_every(options.catalog_check_every);
        let backend = Self::new(dialect, clock, notifier, catalog);
        if migrate {
            backend.dialect.migrate().await?;
        }
        backend.dialect.check_autovacuum().await;
        Ok(backend)
    }
}

impl PostgresDialect {
    /// Says so when the server's autovacuum is off: rheo leaves reusing
    /// the space of trimmed events, deleted streams and settled deliveries
    /// to it, so without it (and without a VACUUM run by hand) the tables
    /// only grow (docs/log.md#retention).
    async fn check_autovacuum(&self) {
        let setting = sqlx::query_scalar::<_, String>("SHOW autovacuum")
            .fetch_one(&self.pool)
            .await;
        if let Ok(setting) = setting
            && setting == "off"
        {
            tracing::warn!(
                "autovacuum is off on this PostgreSQL server: the space of trimmed events, \
                 deleted streams and settled deliveries is not reused until a VACUUM runs \
                 (docs/log.md#retention)"
            );
        }
    }
}

/// Turns NOTIFYs into local wake-ups until the backend is dropped: a
/// stream's name wakes its waiters, [`HANDLERS_CHANGED`] the cluster's
/// watchers. Whatever was announced before LISTEN took effect (at start,
/// or while a lost connection was down) is missed, so each LISTEN that
/// takes effect, and each lost connection, wakes every waiter and watcher.
///
/// A LISTEN connection only reads, so a server that went silent (a cut
/// network that never reset the socket) would leave it waiting for ever:
/// after `quiet` without a message it asks the server for a `SELECT 1`,
/// and a connection that does not answer within half of that is replaced
/// (docs/cluster.md#a-node-cut-off-from-the-store).
async fn listen(
    pool: PgPool,
    channel: String,
    notifier: Arc<Notifier>,
    cluster: Arc<PgCluster>,
    quiet: Duration,
) {
    loop {
        let started = tokio::time::timeout(quiet, async {
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.listen(&channel).await?;
            Ok::<_, sqlx::Error>(listener)
        });
        let mut listener = match started.await {
            Ok(Ok(listener)) => listener,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "postgres: LISTEN failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Err(_) => {
                tracing::warn!("postgres: LISTEN got no answer; retrying");
                continue;
            }
        };
        notifier.notify_all();
        cluster.changed();
        loop {
            let received = match tokio::time::timeout(quiet, listener.try_recv()).await {
                Ok(received) => received,
                Err(_) => {
                    let probe = sqlx::query("SELECT 1").execute(&mut listener);
                    match tokio::time::timeout(quiet / 2, probe).await {
                        Ok(Ok(_)) => continue,
                        Ok(Err(e)) => Err(e),
                        Err(_) => Err(sqlx::Error::Io(std::io::ErrorKind::TimedOut.into())),
                    }
                }
            };
            match received {
                Ok(Some(n)) if n.payload() == HANDLERS_CHANGED => cluster.changed(),
                Ok(Some(n)) => {
                    if let Ok(stream) = StreamName::parse(n.payload()) {
                        notifier.notify(&stream);
                    }
                }
                Ok(None) => {
                    notifier.notify_all();
                    cluster.changed();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "postgres: LISTEN connection lost; reconnecting");
                    notifier.notify_all();
                    cluster.changed();
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    break;
                }
            }
        }
    }
}

fn read_err(e: sqlx::Error) -> Error {
    map_error(e, Phase::Read)
}

/// A timestamp as PostgreSQL takes it.
fn pg_ts(t: Timestamp) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_millis(t.as_millis()).unwrap_or_default()
}

type Query<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

fn bind_column(q: Query<'_>, column: Column) -> Query<'_> {
    match column {
        Column::I32(v) => q.bind(v),
        Column::I64(v) => q.bind(v),
        Column::Text(v) | Column::Json(v) => q.bind(v),
        Column::OptText(v) => q.bind(v),
        Column::Time(v) => q.bind(v.into_iter().map(pg_ts).collect::<Vec<_>>()),
    }
}

impl Dialect for PostgresDialect {
    type Db = sqlx::Postgres;

    const KIND: &'static str = "postgres";
    const CAPABILITIES: Capabilities = Capabilities::SHARED;

    fn pool(&self, _access: Access) -> &PgPool {
        &self.pool
    }

    /// A consistent snapshot for multi-statement reads.
    const BEGIN_READ: &'static str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
    const BEGIN_WRITE: &'static str = "BEGIN";
    const FETCH_IN_TWO_STATEMENTS: bool = true;

    /// Binds our arguments: a list as one array, rows as one array per column.
    fn bind<'q>(sql: impl SqlSafeStr, args: Vec<Arg<'q>>) -> Query<'q> {
        let mut q = sqlx::query(sql);
        for arg in args {
            q = match arg {
                Arg::Text(s) => q.bind(s.into_owned()),
                Arg::OptText(s) => q.bind(s.map(std::borrow::Cow::into_owned)),
                Arg::I32(n) => q.bind(n),
                Arg::I64(n) => q.bind(n),
                Arg::F64(f) => q.bind(f),
                Arg::Time(t) => q.bind(pg_ts(t)),
                Arg::OptTime(t) => q.bind(t.map(pg_ts)),
                Arg::List(column) => bind_column(q, column),
                Arg::Rows(columns) => columns.into_iter().fold(q, bind_column),
            };
        }
        q
    }

    fn rows_affected(done: &sqlx::postgres::PgQueryResult) -> u64 {
        done.rows_affected()
    }

    fn int(row: &PgRow, i: usize) -> Result<Option<i64>> {
        let raw = row.try_get_raw(i).map_err(read_err)?;
        if raw.is_null() {
            return Ok(None);
        }
        let wide = raw.type_info().name() == "INT8";
        if wide {
            row.try_get(i).map_err(read_err)
        } else {
            let n: Option<i32> = row.try_get(i).map_err(read_err)?;
            Ok(n.map(i64::from))
        }
    }

    fn text(row: &PgRow, i: usize) -> Result<Option<String>> {
        row.try_get(i).map_err(read_err)
    }

    fn time(row: &PgRow, i: usize) -> Result<Option<Timestamp>> {
        let t: Option<chrono::DateTime<chrono::Utc>> = row.try_get(i).map_err(read_err)?;
        Ok(t.map(|t| Timestamp::from_millis(t.timestamp_millis())))
    }

    fn json(row: &PgRow, i: usize) -> Result<JsonObject> {
        let doc: Json<JsonObject> = row.try_get(i).map_err(read_err)?;
        Ok(doc.0)
    }

    fn int_list(row: &PgRow, i: usize) -> Result<Vec<i64>> {
        row.try_get(i).map_err(read_err)
    }

    async fn migrate(&self) -> Result<Vec<String>> {
        let pool = self.migration_session().await?;
        if let Some(schema) = &self.schema {
            // The name was validated as a plain identifier.
            sqlx::query(AssertSqlSafe(format!(
                "CREATE SCHEMA IF NOT EXISTS \"{schema}\""
            )))
            .execute(&pool)
            .await
            .map_err(|e| map_error(e, Phase::Write))?;
        }
        let applied = run_migrations(&MIGRATOR, &pool).await;
        pool.close().await;
        applied
    }

    async fn migration_status(&self) -> Result<rheo_core::backend::MigrationStatus> {
        let pool = self.migration_session().await?;
        let status = super::sql::migration_status(&MIGRATOR, &pool).await;
        pool.close().await;
        status
    }

    async fn notify_in<'a>(
        &'a self,
        conn: &'a mut Conn<Self>,
        stream: &'a StreamName,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(include_str!("notify.sql"))
            .bind(&self.channel)
            .bind(stream.as_str())
            .execute(conn)
            .await
            .map(|_| ())
    }

    fn cluster(&self) -> Option<Arc<dyn rheo_core::cluster::ClusterStore>> {
        Some(Arc::clone(&self.cluster) as Arc<dyn rheo_core::cluster::ClusterStore>)
    }

    fn wrote(&self, table: Table, rows: u64) {
        let growth = match table {
            Table::Events => &self.events_growth,
            Table::Deliveries => &self.deliveries_growth,
        };
        growth.wrote(&self.pool, table, rows);
    }

    const PLACEHOLDER: char = '$';
    const BYTE_COLLATION: &'static str = " COLLATE \"C\"";
    const JSON_CONDITION: fn(&mut Builder, &str, &[String], &Condition) = json::condition;

    // `fn statement`: the files in `sql/`.
    with_statements!(statement_files!("postgres"));
}

#[cfg(test)]
mod tests;
