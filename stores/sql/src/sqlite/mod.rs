//! The SQLite dialect: the embedded default (`sqlite://rheo.db`), and
//! `sqlite::memory:` for tests.
//!
//! One writer connection, so every write transaction (`BEGIN IMMEDIATE`)
//! is serialized in process instead of spinning on SQLite's busy handler;
//! a small pool of readers serves lag, queries and listings concurrently
//! thanks to WAL. `synchronous = FULL` makes every commit durable before
//! the call returns. Timestamps are fixed-width RFC 3339 text, so they
//! compare and sort as text. Lists and rows travel as one JSON parameter
//! read with `json_each`, so every statement stays static whatever the
//! batch size. The schema is in `migrations/sqlite/`; statements in `sql/`.

mod backup;
mod json;
mod lock;

use std::borrow::Cow;
use std::fmt::Write as _;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteAutoVacuum, SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{Row as _, SqlSafeStr};

pub use self::backup::{BackupSummary, backup, restore};
pub use self::lock::{LockError, StoreLock, lock_store};
use super::sql::{
    Access, Arg, Builder, Column, Dialect, Phase, SqlBackend, map_error, run_migrations,
    statement_files, with_statements,
};
use rheo_core::backend::catalog::Catalog;
use rheo_core::backend::{Capabilities, Error, Notifier, Result};
use rheo_core::clock::SharedClock;
use rheo_core::model::{Condition, JsonObject, Timestamp};

/// The embedded migrations for this dialect.
pub(crate) static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");

/// How long a statement waits for SQLite's file lock (held by another
/// process) before giving up with `backend_unavailable`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Read connections for a file database.
const READERS: u32 = 4;

/// One step of [`Dialect::reclaim`]: at most 1000 free pages (a few MiB)
/// given back in one short write, so appends and settles go on in between.
const RECLAIM: &str = "PRAGMA incremental_vacuum(1000)";

/// Steps of [`Dialect::reclaim`] per call, at most: what is left waits
/// for the next call.
const RECLAIM_STEPS: u32 = 64;

/// Whether the SQLite URL `url` names an in-memory database (it lives in
/// its one connection: no file, nothing to share, lock or back up).
pub fn is_in_memory(url: &str) -> bool {
    url.contains(":memory:") || url.contains("mode=memory")
}

/// Whether `url` names a SQLite database file.
pub fn is_file_store(url: &str) -> bool {
    url.starts_with("sqlite:") && !is_in_memory(url)
}

/// Streams and groups in one SQLite database file.
pub type SqliteBackend = SqlBackend<SqliteDialect>;

/// SQLite's pools: one writer, several readers (the writer alone for an
/// in-memory database, which lives in its one connection).
#[derive(Debug)]
pub struct SqliteDialect {
    writer: SqlitePool,
    reader: SqlitePool,
    /// The folder of a database opened with [`SqlBackend::open_temporary`],
    /// deleted with the backend.
    _folder: Option<tempfile::TempDir>,
}

impl SqlBackend<SqliteDialect> {
    /// Opens (creating if missing) the database at `url` and, with
    /// `migrate`, brings its schema up to date.
    pub async fn open(url: &str, clock: SharedClock, migrate: bool) -> Result<Self> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| {
                Error::invalid(
                    "backend",
                    format!("{:?}: {e}", rheo_core::backend::redact_url(url)),
                )
            })?
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
        let in_memory = is_in_memory(url);
        // Pages trims free go back to the filesystem by `reclaim`
        // (docs/log.md#retention). Set before the first table of a new
        // file, where it takes effect (sqlx sets it before the journal
        // mode, which writes the file's first page). A file created before
        // keeps its mode and reuses freed pages (`PRAGMA auto_vacuum =
        // INCREMENTAL; VACUUM;` switches it). The writer creates the file:
        // the readers open it read-only.
        let writer_options = options.clone().auto_vacuum(SqliteAutoVacuum::Incremental);
        // No ping before a pooled connection is handed out: an embedded
        // database has no link to lose, and the ping is a call on the
        // connection's thread, some 40 µs, before every write
        // (docs/benchmarks.md#sqlite-calls-on-the-writers-thread).
        let writer = SqlitePoolOptions::new()
            .test_before_acquire(false)
            .max_connections(1)
            .min_connections(1)
            // An in-memory database lives as long as its one connection.
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(writer_options)
            .await
            .map_err(|e| map_error(e, Phase::Read))?;
        let reader = if in_memory {
            writer.clone()
        } else {
            SqlitePoolOptions::new()
                .test_before_acquire(false)
                .max_connections(READERS)
                .connect_with(options.read_only(true))
                .await
                .map_err(|e| map_error(e, Phase::Read))?
        };
        let backend = Self::new(
            SqliteDialect {
                writer,
                reader,
                _folder: None,
            },
            clock,
            Arc::new(Notifier::default()),
            // One server owns the file (`lock_store`): only its own
            // deletes change what it keeps.
            Catalog::local(),
        );
        if migrate {
            backend.dialect.migrate().await?;
        }
        Ok(backend)
    }
}

impl SqlBackend<SqliteDialect> {
    /// A new database file in a fresh temporary folder, migrated; the
    /// folder is deleted when the backend is dropped.
    #[cfg(test)]
    pub(crate) async fn open_temporary(clock: SharedClock) -> Result<Self> {
        let folder = tempfile::tempdir()
            .map_err(|e| Error::Failed(format!("cannot create a temporary folder: {e}")))?;
        let url = format!("sqlite://{}", folder.path().join("rheo.db").display());
        let mut backend = Self::open(&url, clock, true).await?;
        backend.dialect._folder = Some(folder);
        Ok(backend)
    }
}

type Query<'q> = sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>;

/// Text, timestamps (fixed-width RFC 3339), lists (one JSON array) and
/// rows (one JSON array of arrays) as the text SQLite stores or reads with
/// `json_each`; `None` binds NULL.
fn as_text(arg: Arg<'_>) -> Option<Cow<'_, str>> {
    let json = |rows: usize, cell: &mut dyn FnMut(&mut String, usize)| {
        let mut out = String::with_capacity(rows * 24 + 2);
        out.push('[');
        for i in 0..rows {
            if i > 0 {
                out.push(',');
            }
            cell(&mut out, i);
        }
        out.push(']');
        out
    };
    Some(match arg {
        Arg::Text(s) => s,
        Arg::OptText(s) => s?,
        Arg::Time(t) => t.to_rfc3339().into(),
        Arg::OptTime(t) => t?.to_rfc3339().into(),
        Arg::List(column) => json(column.len(), &mut |out, i| json_cell(out, &column, i)).into(),
        Arg::Rows(columns) => {
            let rows = columns.first().map_or(0, Column::len);
            json(rows, &mut |out, i| {
                out.push('[');
                for (c, column) in columns.iter().enumerate() {
                    if c > 0 {
                        out.push(',');
                    }
                    json_cell(out, column, i);
                }
                out.push(']');
            })
            .into()
        }
        Arg::I32(_) | Arg::I64(_) | Arg::F64(_) => unreachable!("bound as numbers"),
    })
}

/// Writes value `i` of `column` as JSON; a JSON document is embedded as is.
fn json_cell(out: &mut String, column: &Column, i: usize) {
    let string = |out: &mut String, s: &str| {
        out.push_str(&serde_json::Value::from(s).to_string());
    };
    match column {
        Column::I32(v) => {
            let _ = write!(out, "{}", v[i]);
        }
        Column::I64(v) => {
            let _ = write!(out, "{}", v[i]);
        }
        Column::Text(v) => string(out, &v[i]),
        Column::OptText(v) => match &v[i] {
            Some(s) => string(out, s),
            None => out.push_str("null"),
        },
        Column::Time(v) => string(out, &v[i].to_rfc3339()),
        Column::Json(v) => out.push_str(&v[i]),
    }
}

fn read_err(e: sqlx::Error) -> Error {
    map_error(e, Phase::Read)
}

impl Dialect for SqliteDialect {
    type Db = sqlx::Sqlite;

    const KIND: &'static str = "sqlite";
    const CAPABILITIES: Capabilities = Capabilities::EMBEDDED;

    fn pool(&self, access: Access) -> &SqlitePool {
        match access {
            Access::Read => &self.reader,
            Access::Write => &self.writer,
        }
    }

    /// The writer takes the database's write lock at once, so a write
    /// transaction never fails half-way on a lock upgrade.
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";
    const BEGIN_READ: &'static str = "BEGIN";
    /// Each statement the fetch's two calls stand for is a call of its own
    /// on the connection's thread otherwise, some 40 µs each
    /// (docs/benchmarks.md#sqlite-calls-on-the-writers-thread).
    const FETCH_IN_TWO_STATEMENTS: bool = true;

    /// Binds our arguments as SQLite's own storage classes: integers,
    /// reals, and text for the rest (see [`as_text`]).
    fn bind<'q>(sql: impl SqlSafeStr, args: Vec<Arg<'q>>) -> Query<'q> {
        args.into_iter().fold(sqlx::query(sql), |q, arg| match arg {
            Arg::I32(n) => q.bind(i64::from(n)),
            Arg::I64(n) => q.bind(n),
            Arg::F64(f) => q.bind(f),
            other => q.bind(as_text(other)),
        })
    }

    fn rows_affected(done: &sqlx::sqlite::SqliteQueryResult) -> u64 {
        done.rows_affected()
    }

    fn int(row: &SqliteRow, i: usize) -> Result<Option<i64>> {
        row.try_get(i).map_err(read_err)
    }

    fn text(row: &SqliteRow, i: usize) -> Result<Option<String>> {
        row.try_get(i).map_err(read_err)
    }

    fn time(row: &SqliteRow, i: usize) -> Result<Option<Timestamp>> {
        let text: Option<String> = row.try_get(i).map_err(read_err)?;
        text.map(|t| Timestamp::parse_rfc3339(&t).map_err(|e| super::sql::corrupt("timestamp", e)))
            .transpose()
    }

    fn json(row: &SqliteRow, i: usize) -> Result<JsonObject> {
        let text: String = row.try_get(i).map_err(read_err)?;
        serde_json::from_str(&text).map_err(|e| super::sql::corrupt("JSON", e))
    }

    fn int_list(row: &SqliteRow, i: usize) -> Result<Vec<i64>> {
        let text: String = row.try_get(i).map_err(read_err)?;
        serde_json::from_str(&text).map_err(|e| super::sql::corrupt("JSON list", e))
    }

    async fn migrate(&self) -> Result<Vec<String>> {
        run_migrations(&MIGRATOR, &self.writer).await
    }

    async fn migration_status(&self) -> Result<rheo_core::backend::MigrationStatus> {
        super::sql::migration_status(&MIGRATOR, &self.writer).await
    }

    /// `PRAGMA incremental_vacuum` in steps of [`RECLAIM`], each on its
    /// own (no transaction), until the free list is empty. A store without
    /// `auto_vacuum = INCREMENTAL` (one created before retention) gives
    /// nothing back: it reuses its free pages for new rows.
    async fn reclaim(&self) -> Result<()> {
        for _ in 0..RECLAIM_STEPS {
            let acquired = self.writer.acquire().await;
            let mut conn = acquired.map_err(|e| map_error(e, Phase::Connect))?;
            if sqlx::Connection::is_in_transaction(&*conn) {
                // Stuck inside a transaction (see `SqlBackend::conn`): the
                // next call gets a fresh connection.
                let _ = conn.close().await;
                return Ok(());
            }
            let pragma = |sql| sqlx::query_scalar::<_, i64>(sql);
            // 2: INCREMENTAL.
            if pragma("PRAGMA auto_vacuum")
                .fetch_one(&mut *conn)
                .await
                .map_err(read_err)?
                != 2
            {
                return Ok(());
            }
            (sqlx::query(RECLAIM).execute(&mut *conn).await).map_err(read_err)?;
            if pragma("PRAGMA freelist_count")
                .fetch_one(&mut *conn)
                .await
                .map_err(read_err)?
                == 0
            {
                return Ok(());
            }
        }
        Ok(())
    }

    const PLACEHOLDER: char = '?';
    const BYTE_COLLATION: &'static str = "";
    const JSON_CONDITION: fn(&mut Builder, &str, &[String], &Condition) = json::condition;

    // `fn statement`: the files in `sql/`.
    with_statements!(statement_files!("sqlite"));
}

#[cfg(test)]
mod tests;
