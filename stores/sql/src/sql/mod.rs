//! The SQL engine: every transaction of the SQL backends, written once
//! over a [`Dialect`].
//!
//! [`SqlBackend<D>`] implements [`Backend`](rheo_core::backend::Backend) for
//! any dialect. Its transactions (append, fetch/claim, settle, renew,
//! replay/redrive/reset, lag, group info, dead letters, leases, query, deletes,
//! retention trims) live in this folder and call the shared rules of [`policy`](rheo_core::backend::policy); they
//! never name a driver type. A dialect supplies the rest:
//!
//! * its statements: one `.sql` file per [`Statement`], named the same in
//!   every dialect (`stores/sql/src/<dialect>/sql/<name>.sql`), taking
//!   the same arguments in the same order ([`Arg`]) and returning the same
//!   columns. A file holding only comments means "nothing to do here" (the
//!   PostgreSQL scan floors and partition locks have no SQLite
//!   counterpart, for example) and is skipped;
//! * binding: scalars as they are; a [`Arg::List`] as one array parameter
//!   (or a JSON array); a [`Arg::Rows`] (always the last argument) as one
//!   array parameter per column (or one JSON array of rows);
//! * decoding of its column types into ours;
//! * how a read snapshot and a write transaction begin, and which pool
//!   answers each;
//! * hooks: wake-ups sent inside a transaction (`NOTIFY`), table growth
//!   (statistics refresh), and the JSON-path expressions of history queries.
//!
//! Adding a third SQL dialect therefore means writing its statements, a
//! migration folder with the same numbers, and one module implementing
//! [`Dialect`] — no transaction. User input never becomes SQL text: field
//! names resolve to fixed columns or to JSON paths passed as parameters,
//! and every value is a parameter.

mod claim;
mod delete;
mod engine;
#[cfg(feature = "postgres")]
pub(crate) use engine::begin_whole;
mod groups;
mod inspect;
mod log;
pub(crate) mod query;
mod retention;
mod rewind;
mod settle;

pub(crate) use engine::Row;
pub use engine::SqlBackend;
pub(crate) use query::Builder;

use std::borrow::Cow;
use std::future::Future;

use futures::future::BoxFuture;

use rheo_core::backend::{Capabilities, Error};
use rheo_core::model::{
    Condition, ConsumerId, EventId, GroupName, JsonObject, LeaseId, StreamName, Timestamp,
};

/// The database connection type of a dialect.
pub(crate) type Conn<D> = <<D as Dialect>::Db as sqlx::Database>::Connection;
/// The row type of a dialect.
pub(crate) type DbRow<D> = <<D as Dialect>::Db as sqlx::Database>::Row;
/// A transaction of a dialect.
pub(crate) type Tx<D> = sqlx::Transaction<'static, <D as Dialect>::Db>;
/// A statement with its arguments bound, ready to run.
pub(crate) type Query<'q, Db> = sqlx::query::Query<'q, Db, <Db as sqlx::Database>::Arguments>;

/// Runs bound statements on a connection; every sqlx connection type has it.
pub(crate) trait Execute<Db: sqlx::Database>: Send {
    /// The rows a statement returns.
    fn rows<'a>(&'a mut self, q: Query<'a, Db>)
    -> BoxFuture<'a, Result<Vec<Db::Row>, sqlx::Error>>;
    /// What a statement did.
    fn execute<'a>(
        &'a mut self,
        q: Query<'a, Db>,
    ) -> BoxFuture<'a, Result<Db::QueryResult, sqlx::Error>>;
}

impl<Db: sqlx::Database, C: Send> Execute<Db> for C
where
    for<'c> &'c mut C: sqlx::Executor<'c, Database = Db>,
    Db::Arguments: sqlx::IntoArguments<Db>,
{
    fn rows<'a>(
        &'a mut self,
        q: Query<'a, Db>,
    ) -> BoxFuture<'a, Result<Vec<Db::Row>, sqlx::Error>> {
        Box::pin(q.fetch_all(self))
    }

    fn execute<'a>(
        &'a mut self,
        q: Query<'a, Db>,
    ) -> BoxFuture<'a, Result<Db::QueryResult, sqlx::Error>> {
        Box::pin(q.execute(self))
    }
}

/// Calls `$callback!((args) name, name, …)` with every statement name.
macro_rules! with_statements {
    ($callback:ident ! ( $($args:tt)* )) => {
        $callback!(($($args)*)
            stream_meta, create_stream, create_stream_partitions, list_streams,
            all_high_watermarks, high_watermarks, read, append_find_ids,
            append_lock_partitions, append_allocate, append_insert,
            group_config, create_group, create_group_partitions, list_groups, group_positions,
            first_at_or_after, events_at, locate_events,
            fetch_poison, fetch_candidates, fetch_lock_cursors, fetch_claim, fetch_materialize,
            fetch_open, fetch_lease,
            fetch_window, gates_busy, fetch_park, release_gates, regate,
            pace_candidates, pace_tats, pace_sweep, pace_store, pace_insert, pace_update,
            advance_cursors, delivery_by_event, lease_by_event, renew,
            settle_acks, settle_retry, settle_dead, settle_quarantine,
            lag_open, dead_count, dead_letters, leases, claimable_now, next_due,
            redrive_all, redrive_events, reopen_insert, reopen_update, reopen_undelay,
            lower_floors, reset_partitions, set_cursors, set_ordering,
            catalog_generation, bump_generation, lock_stream, lock_group, lock_group_reset,
            delete_lock_stream, delete_lock_groups, delete_lock_group,
            delete_stream_partitions, delete_stream_events, delete_stream_deliveries,
            delete_stream_cursors, delete_stream_groups, delete_stream_row,
            delete_group_deliveries, delete_group_cursors, delete_group_row,
            reset_rates, delete_group_rates, delete_stream_rates,
            set_retention, trim_lock_stream, trim_lock_groups, trim_lock_partition,
            trim_deliveries, trim_lock_cursors, trim_events, trim_partition, trim_cursors,
            store_size
        );
    };
}
pub(crate) use with_statements;

macro_rules! define_statements {
    (() $($name:ident),*) => {
        /// Every statement the engine runs; each dialect has a file per name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[allow(non_camel_case_types)]
        pub(crate) enum Statement {
            $(
                #[doc = concat!("`", stringify!($name), ".sql`")]
                $name,
            )*
        }

        impl Statement {
            /// All of them.
            #[cfg(test)]
            pub(crate) const ALL: &'static [Statement] = &[$(Statement::$name),*];

            /// The file name, `<name>.sql`.
            #[cfg(test)]
            pub(crate) fn file_name(self) -> &'static str {
                match self {
                    $(Statement::$name => concat!(stringify!($name), ".sql"),)*
                }
            }
        }
    };
}
with_statements!(define_statements!());

/// Expands to a dialect's `fn statement(Statement) -> &'static str` reading
/// `stores/sql/src/<dir>/sql/<name>.sql` at compile time.
macro_rules! statement_files {
    (($dir:literal) $($name:ident),*) => {
        fn statement(s: $crate::sql::Statement) -> &'static str {
            use $crate::sql::Statement;
            match s {
                $(Statement::$name => include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"), "/src/", $dir, "/sql/", stringify!($name), ".sql"
                )),)*
            }
        }
    };
}
pub(crate) use statement_files;

/// Whether a statement file has SQL in it (not only comments).
pub(crate) fn has_sql(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim();
        !l.is_empty() && !l.starts_with("--")
    })
}

/// A value bound to a statement's next placeholder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arg<'a> {
    Text(Cow<'a, str>),
    /// Text or NULL.
    OptText(Option<Cow<'a, str>>),
    /// Partitions, attempts and other small integers (`integer` columns).
    I32(i32),
    /// Sequences, counts and limits (`bigint` columns).
    I64(i64),
    F64(f64),
    Time(Timestamp),
    OptTime(Option<Timestamp>),
    /// A list as one parameter: an array, or a JSON array.
    List(Column),
    /// Rows as columns of equal length; always the last argument.
    Rows(Vec<Column>),
}

/// One column of values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Column {
    I32(Vec<i32>),
    I64(Vec<i64>),
    Text(Vec<String>),
    OptText(Vec<Option<String>>),
    Time(Vec<Timestamp>),
    /// JSON documents, as text.
    Json(Vec<String>),
}

impl Column {
    /// How many values (SQLite binds rows value by value).
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn len(&self) -> usize {
        match self {
            Column::I32(v) => v.len(),
            Column::I64(v) => v.len(),
            Column::Text(v) => v.len(),
            Column::OptText(v) => v.len(),
            Column::Time(v) => v.len(),
            Column::Json(v) => v.len(),
        }
    }
}

/// Arguments in order: `args![stream, group, now, small(p)]`.
macro_rules! args {
    ($($arg:expr),* $(,)?) => { vec![$($crate::sql::Arg::from($arg)),*] };
}
pub(crate) use args;

impl<'a> From<&'a str> for Arg<'a> {
    fn from(s: &'a str) -> Self {
        Arg::Text(Cow::Borrowed(s))
    }
}

impl From<String> for Arg<'_> {
    fn from(s: String) -> Self {
        Arg::Text(Cow::Owned(s))
    }
}

impl From<Timestamp> for Arg<'_> {
    fn from(t: Timestamp) -> Self {
        Arg::Time(t)
    }
}

/// Names and ids bind as their text.
macro_rules! text_args {
    ($($name:ty),*) => {$(
        impl<'a> From<&'a $name> for Arg<'a> {
            fn from(v: &'a $name) -> Self {
                Arg::Text(Cow::Borrowed(v.as_str()))
            }
        }
    )*};
}
text_args!(StreamName, GroupName, EventId, LeaseId, ConsumerId);

/// A partition (or attempt count) as stored.
pub(crate) fn small(n: u32) -> Arg<'static> {
    Arg::I32(i32::try_from(n).unwrap_or(i32::MAX))
}

/// A sequence, count or limit as stored.
pub(crate) fn big(n: u64) -> Arg<'static> {
    Arg::I64(int(n))
}

/// A sequence as stored.
pub(crate) fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Partitions as a list argument.
pub(crate) fn partitions(list: &[u32]) -> Arg<'static> {
    Arg::List(Column::I32(
        list.iter()
            .map(|p| i32::try_from(*p).unwrap_or(i32::MAX))
            .collect(),
    ))
}

/// Which pool and transaction mode a call needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Reads: a consistent snapshot where the dialect offers one.
    Read,
    /// Writes: the dialect's write transaction.
    Write,
}

/// A table whose growth a dialect may want to hear of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Table {
    Events,
    Deliveries,
}

/// What one SQL database needs beyond the engine. See the module doc.
pub(crate) trait Dialect: Send + Sync + std::fmt::Debug + Sized + 'static {
    /// The sqlx driver.
    type Db: sqlx::Database<Connection: Execute<Self::Db>>;

    /// Short name for logs and errors.
    const KIND: &'static str;
    /// What the backend promises.
    const CAPABILITIES: Capabilities;

    /// The text of a statement in this dialect.
    fn statement(s: Statement) -> &'static str;

    /// Whether an unordered group's fetch runs as `fetch_open.sql` and
    /// `fetch_lease.sql`, two calls that each stand for several statements
    /// (on PostgreSQL one statement writing several tables, on SQLite
    /// several statements in one call on the connection's thread), instead
    /// of the statements one at a time (`sql/claim.rs`): each call saved
    /// is a round trip (docs/benchmarks.md).
    const FETCH_IN_TWO_STATEMENTS: bool = false;

    /// How a read snapshot begins.
    const BEGIN_READ: &'static str;
    /// How a write transaction begins.
    const BEGIN_WRITE: &'static str;

    /// The pool that serves `access`.
    fn pool(&self, access: Access) -> &sqlx::Pool<Self::Db>;

    /// Binds `args` to `sql`, as this dialect passes lists and rows.
    fn bind<'q>(sql: impl sqlx::SqlSafeStr, args: Vec<Arg<'q>>) -> Query<'q, Self::Db>;

    /// How many rows a statement changed.
    fn rows_affected(done: &<Self::Db as sqlx::Database>::QueryResult) -> u64;

    /// An integer column (any width).
    fn int(row: &DbRow<Self>, i: usize) -> Result<Option<i64>, Error>;
    /// A text column.
    fn text(row: &DbRow<Self>, i: usize) -> Result<Option<String>, Error>;
    /// A timestamp column.
    fn time(row: &DbRow<Self>, i: usize) -> Result<Option<Timestamp>, Error>;
    /// A JSON object column.
    fn json(row: &DbRow<Self>, i: usize) -> Result<JsonObject, Error>;
    /// An integer list column (a group's retry backoff).
    fn int_list(row: &DbRow<Self>, i: usize) -> Result<Vec<i64>, Error>;

    /// Applies pending migrations; returns the ones applied now.
    fn migrate(&self) -> impl Future<Output = Result<Vec<String>, Error>> + Send;

    /// Applied, pending and unknown migrations.
    fn migration_status(
        &self,
    ) -> impl Future<Output = Result<rheo_core::backend::MigrationStatus, Error>> + Send;

    /// Wakes handlers of `stream` on every node once the transaction
    /// commits (PostgreSQL `NOTIFY`); nothing where wake-ups stay in process.
    fn notify_in<'a>(
        &'a self,
        _conn: &'a mut Conn<Self>,
        _stream: &'a StreamName,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send + 'a {
        async { Ok(()) }
    }

    /// `rows` were written to `table` (a dialect may refresh statistics).
    fn wrote(&self, _table: Table, _rows: u64) {}

    /// Gives the pages trims and deletes freed back to the filesystem
    /// where the database does not reuse them by itself (SQLite's
    /// incremental vacuum), outside any transaction; nothing by default.
    fn reclaim(&self) -> impl Future<Output = Result<(), Error>> + Send {
        async { Ok(()) }
    }

    /// The cluster store of a dialect several servers share.
    fn cluster(&self) -> Option<std::sync::Arc<dyn rheo_core::cluster::ClusterStore>> {
        None
    }

    /// Placeholders of built queries: this character and the parameter's
    /// number (1-based).
    const PLACEHOLDER: char;
    /// The collation that makes text compare by bytes (`""` when it already does).
    const BYTE_COLLATION: &'static str;
    /// Appends the condition on the JSON value at `path` inside `doc`
    /// (`payload` or `metadata`) of a history query.
    const JSON_CONDITION: fn(&mut Builder, &str, &[String], &Condition);
}

/// Which part of an operation failed, to tell "nothing happened" from
/// "it may have happened".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Getting a connection from the pool (opening one if need be): nothing
    /// was sent, and whatever the server answered — PostgreSQL's "database
    /// is not currently accepting connections", a closed pool — means the
    /// store cannot be reached now (`backend_unavailable`).
    Connect,
    /// Reading, or inside a transaction that has not committed: a failure
    /// means nothing changed.
    Read,
    /// A commit, or a statement that commits on its own: a lost connection
    /// may have lost the answer but not the write.
    Write,
}

/// Maps a driver error to the portable vocabulary.
pub(crate) fn map_error(e: sqlx::Error, phase: Phase) -> Error {
    use sqlx::Error as E;
    let lost = |detail: String| match phase {
        Phase::Connect | Phase::Read => Error::BackendUnavailable(detail),
        Phase::Write => Error::Ambiguous(detail),
    };
    let mapped = match e {
        E::PoolTimedOut | E::PoolClosed => Error::BackendUnavailable(e.to_string()),
        E::Io(_) | E::Tls(_) | E::Protocol(_) | E::WorkerCrashed => lost(e.to_string()),
        E::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            match code.as_str() {
                // PostgreSQL: connection failure classes, admin shutdown,
                // statement timeout / cancel (a write may be half-way), and
                // a session the server ended for idling in a transaction or
                // at all (docs/cluster.md#a-node-cut-off-from-the-store).
                c if c.starts_with("08")
                    || matches!(c, "57P01" | "57P02" | "57P03" | "57014" | "25P03" | "57P05") =>
                {
                    lost(db.to_string())
                }
                // PostgreSQL's lock_timeout: the statement waited too long
                // for a lock (held by a node that is gone, say) and was
                // stopped before it changed anything; the transaction is
                // rolled back.
                "55P03" => Error::BackendUnavailable(db.to_string()),
                // SQLite busy / locked past the busy timeout: nothing was written.
                "5" | "6" | "261" | "517" => Error::BackendUnavailable(db.to_string()),
                // PostgreSQL aborted the transaction for a deadlock or a
                // serialization failure: nothing was written, and the same
                // transaction may well succeed when run again
                // ([`is_conflict`]).
                "40P01" | "40001" => Error::BackendUnavailable(format!("{CONFLICT}: {db}")),
                // No space left: SQLite's SQLITE_FULL, PostgreSQL's disk_full.
                // Either rolls the whole transaction back, commit included.
                "13" | "53100" => Error::StorageFull(db.to_string()),
                _ => Error::Failed(db.to_string()),
            }
        }
        other => Error::Failed(other.to_string()),
    };
    match (phase, mapped) {
        (Phase::Connect, Error::Failed(detail)) => Error::BackendUnavailable(detail),
        (_, mapped) => mapped,
    }
}

/// How [`map_error`] and [`conflict`] begin the detail of a transaction
/// that may simply run again.
const CONFLICT: &str = "transaction aborted by a conflict";

/// A transaction given up because what it read went stale (a group's
/// ordering or flow changed): it runs again like one the database aborted.
pub(crate) fn conflict(detail: String) -> Error {
    Error::BackendUnavailable(format!("{CONFLICT}: {detail}"))
}

/// Whether `e` is a transaction the database aborted for a deadlock or a
/// serialization failure, or one given up because what it read went
/// stale ([`conflict`]): nothing was written, so it may run again.
pub(crate) fn is_conflict(e: &Error) -> bool {
    matches!(e, Error::BackendUnavailable(detail) if detail.starts_with(CONFLICT))
}

/// Whether `e` is a unique-constraint violation.
fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// A migration as `rheo migrate` names it: "0001 streams and events".
fn migration_name(m: &sqlx::migrate::Migration) -> String {
    format!("{:04} {}", m.version, m.description)
}

/// Applies `migrator`'s pending migrations on `pool`; returns the ones
/// applied now, as "0001 streams and events".
pub(crate) async fn run_migrations<Db: sqlx::Database>(
    migrator: &sqlx::migrate::Migrator,
    pool: &sqlx::Pool<Db>,
) -> Result<Vec<String>, Error>
where
    Db::Connection: sqlx::migrate::Migrate,
{
    let before = applied_versions(migrator, pool).await;
    (migrator.run(pool).await).map_err(|e| Error::Failed(format!("migration failed: {e}")))?;
    let after = applied_versions(migrator, pool).await;
    Ok(migrator
        .iter()
        .filter(|m| after.contains(&m.version) && !before.contains(&m.version))
        .map(migration_name)
        .collect())
}

/// Where the store on `pool` stands against `migrator`'s migrations.
pub(crate) async fn migration_status<Db: sqlx::Database>(
    migrator: &sqlx::migrate::Migrator,
    pool: &sqlx::Pool<Db>,
) -> Result<rheo_core::backend::MigrationStatus, Error>
where
    Db::Connection: sqlx::migrate::Migrate,
{
    use sqlx::migrate::Migrate as _;
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| Error::BackendUnavailable(format!("reading the migrations: {e}")))?;
    // Read only: a store no rheo migrated yet has no table (or schema),
    // and reading it fails: nothing is applied there.
    let applied: Vec<i64> = conn
        .list_applied_migrations(&migrator.table_name)
        .await
        .map_or_else(
            |_| Vec::new(),
            |a| a.into_iter().map(|m| m.version).collect(),
        );
    let known = migrator
        .iter()
        .filter(|m| m.migration_type.is_up_migration())
        .map(|m| (m.version, migration_name(m)));
    Ok(rheo_core::backend::MigrationStatus::split(
        known,
        applied,
        |v| format!("{v:04}"),
    ))
}

/// The versions applied so far (none before the first migration).
async fn applied_versions<Db: sqlx::Database>(
    migrator: &sqlx::migrate::Migrator,
    pool: &sqlx::Pool<Db>,
) -> Vec<i64>
where
    Db::Connection: sqlx::migrate::Migrate,
{
    let Ok(mut conn) = pool.acquire().await else {
        return Vec::new();
    };
    let applied =
        sqlx::migrate::Migrate::list_applied_migrations(&mut *conn, &migrator.table_name).await;
    applied.map_or_else(
        |_| Vec::new(),
        |a| a.into_iter().map(|m| m.version).collect(),
    )
}

/// An unreadable stored value.
pub(crate) fn corrupt(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::Failed(format!("unreadable {what} in the database: {detail}"))
}

/// A group's ordering as stored.
pub(crate) fn ordering(stored: String) -> Result<rheo_core::model::GroupOrdering, Error> {
    stored.parse().map_err(|e| corrupt("group ordering", e))
}

/// A group's flow as stored (`Flow::to_json`; `docs/groups.md#flow`).
pub(crate) fn flow(stored: String) -> Result<rheo_core::model::Flow, Error> {
    rheo_core::model::Flow::from_json(&stored).map_err(|e| corrupt("group flow", e))
}

/// How a group's deliveries pass gates, from its ordering and flow as
/// stored.
pub(crate) fn gating(
    ordering: String,
    flow: String,
) -> Result<rheo_core::backend::policy::Gating, Error> {
    Ok(rheo_core::backend::policy::Gating::new(
        self::ordering(ordering)?,
        &self::flow(flow)?,
    ))
}

/// A group's stored `on_exhausted` (`docs/groups.md#quarantine`).
pub(crate) fn on_exhausted(stored: String) -> Result<rheo_core::model::OnExhausted, Error> {
    stored.parse().map_err(|e| corrupt("group on_exhausted", e))
}

#[cfg(test)]
pub(crate) mod flow_nodes;
#[cfg(test)]
pub(crate) mod key_rates;
#[cfg(test)]
mod racing;
#[cfg(test)]
pub(crate) mod retention_rows;
#[cfg(test)]
pub(crate) mod stale_nodes;
#[cfg(test)]
mod tests;
