//! What the SQL backends share: the dialect switch, a statement builder that
//! only ever adds bound parameters for values, the translation of history
//! queries (filters, bounds, cursors, ordering) into SQL, and the mapping of
//! driver errors into the portable vocabulary.
//!
//! User input never becomes SQL text: field names resolve to a fixed set of
//! columns or to JSON paths passed as bound parameters, and every value is
//! a parameter.

mod plan;
mod query;

pub(crate) use plan::{
    GroupConfig, LagBuilder, OpenCounts, Write, plain_acks, plan_append, settle_write,
};
pub(crate) use query::events_query;

use std::fmt::Write as _;

use crate::backend::Error;
use crate::model::Timestamp;

/// Which SQL dialect a statement is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

/// A value bound to a placeholder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bind {
    Text(String),
    Int(i64),
    Float(f64),
    /// JSON text (`jsonb` on PostgreSQL).
    Json(String),
    /// A text array (PostgreSQL only).
    TextArray(Vec<String>),
    Time(Timestamp),
}

/// A statement under construction: SQL text plus its parameters in order.
#[derive(Debug)]
pub(crate) struct Builder {
    pub(crate) dialect: Dialect,
    pub(crate) sql: String,
    pub(crate) binds: Vec<Bind>,
}

impl Builder {
    pub(crate) fn new(dialect: Dialect) -> Self {
        Self {
            dialect,
            sql: String::with_capacity(256),
            binds: Vec::new(),
        }
    }

    /// Appends fixed SQL text (never user input).
    pub(crate) fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    /// Appends a placeholder for `value`.
    pub(crate) fn bind(&mut self, value: Bind) -> &mut Self {
        self.binds.push(value);
        match self.dialect {
            Dialect::Sqlite => self.sql.push('?'),
            Dialect::Postgres => {
                let _ = write!(self.sql, "${}", self.binds.len());
            }
        }
        self
    }
}

/// Which part of an operation failed, to tell "nothing happened" from
/// "it may have happened".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Reading, or before anything was sent: a failure means nothing changed.
    Read,
    /// Inside a write transaction: a lost connection may have lost the commit too.
    Write,
}

/// Maps a driver error to the portable vocabulary.
pub(crate) fn map_error(e: sqlx::Error, phase: Phase) -> Error {
    use sqlx::Error as E;
    match e {
        E::PoolTimedOut | E::PoolClosed => Error::BackendUnavailable(e.to_string()),
        E::Io(_) | E::Tls(_) | E::Protocol(_) | E::WorkerCrashed => match phase {
            Phase::Read => Error::BackendUnavailable(e.to_string()),
            Phase::Write => Error::Ambiguous(e.to_string()),
        },
        E::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            match code.as_str() {
                // PostgreSQL: connection failure classes and admin shutdown.
                c if c.starts_with("08") || c == "57P01" || c == "57P02" || c == "57P03" => {
                    match phase {
                        Phase::Read => Error::BackendUnavailable(db.to_string()),
                        Phase::Write => Error::Ambiguous(db.to_string()),
                    }
                }
                // PostgreSQL statement timeout / cancel: the write may be half-way.
                "57014" => match phase {
                    Phase::Read => Error::BackendUnavailable(db.to_string()),
                    Phase::Write => Error::Ambiguous(db.to_string()),
                },
                // SQLite busy / locked past the busy timeout: nothing was written.
                "5" | "6" | "261" | "517" => Error::BackendUnavailable(db.to_string()),
                _ => Error::Failed(db.to_string()),
            }
        }
        other => Error::Failed(other.to_string()),
    }
}

/// "0001 streams and events"-style names of the migrations in `after` but
/// not in `before` (versions read from `_sqlx_migrations`).
pub(crate) fn newly_applied(
    migrator: &sqlx::migrate::Migrator,
    before: &[i64],
    after: &[i64],
) -> Vec<String> {
    migrator
        .iter()
        .filter(|m| after.contains(&m.version) && !before.contains(&m.version))
        .map(|m| format!("{:04} {}", m.version, m.description))
        .collect()
}

/// The [`Backend`](crate::backend::Backend) impl of a SQL backend, whose
/// operations live in its `log` and `groups` modules with the same names.
/// Only the name, the capabilities and the pool that answers pings differ,
/// so both dialects share this one delegation.
macro_rules! sql_backend {
    ($ty:ty, $kind:literal, $caps:expr, $ping_pool:ident) => {
        #[async_trait::async_trait]
        impl $crate::backend::Backend for $ty {
            fn kind(&self) -> &'static str {
                $kind
            }

            fn capabilities(&self) -> $crate::backend::Capabilities {
                $caps
            }

            fn clock(&self) -> &SharedClock {
                &self.clock
            }

            async fn migrate(&self) -> Result<Vec<String>> {
                <$ty>::migrate(self).await
            }

            async fn ping(&self) -> Result<()> {
                sqlx::query("SELECT 1")
                    .execute(&self.$ping_pool)
                    .await
                    .map(|_| ())
                    .map_err(|e| {
                        $crate::backend::sql::map_error(e, $crate::backend::sql::Phase::Read)
                    })
            }

            async fn create_stream(&self, req: CreateStream) -> Result<Stream> {
                log::create_stream(self, req).await
            }

            async fn list_streams(&self) -> Result<Vec<Stream>> {
                log::list_streams(self).await
            }

            async fn get_stream(&self, stream: &StreamName) -> Result<Stream> {
                log::get_stream(self, stream).await
            }

            async fn append(
                &self,
                stream: &StreamName,
                events: Vec<EventInput>,
            ) -> Result<Vec<Appended>> {
                let appended = log::append(self, stream, events).await?;
                if appended.iter().any(|a| !a.duplicate) {
                    self.notifier.notify(stream);
                }
                Ok(appended)
            }

            async fn read(&self, req: ReadRequest) -> Result<Vec<Event>> {
                log::read(self, req).await
            }

            async fn query(&self, stream: &StreamName, query: &Query) -> Result<Page> {
                log::query(self, stream, query).await
            }

            async fn create_group(&self, stream: &StreamName, spec: GroupSpec) -> Result<Group> {
                groups::create_group(self, stream, spec).await
            }

            async fn list_groups(&self, stream: &StreamName) -> Result<Vec<Group>> {
                groups::list_groups(self, stream).await
            }

            async fn fetch(&self, req: FetchRequest) -> Result<Vec<Lease>> {
                groups::fetch(self, req).await
            }

            async fn renew(&self, req: RenewRequest) -> Result<Lease> {
                groups::renew(self, req).await
            }

            async fn settle(
                &self,
                stream: &StreamName,
                group: &GroupName,
                items: Vec<Settlement>,
            ) -> Result<Vec<Result<()>>> {
                let (results, requeued) = groups::settle(self, stream, group, items).await?;
                if requeued {
                    self.notifier.notify(stream);
                }
                Ok(results)
            }

            async fn lag(
                &self,
                stream: &StreamName,
                group: &GroupName,
                partitions: &Partitions,
            ) -> Result<Lag> {
                groups::lag(self, stream, group, partitions).await
            }

            async fn group_info(
                &self,
                stream: &StreamName,
                group: &GroupName,
            ) -> Result<GroupInfo> {
                groups::group_info(self, stream, group).await
            }

            async fn dead_letters(&self, req: DeadLettersRequest) -> Result<DeadLetterPage> {
                groups::dead_letters(self, req).await
            }

            async fn redrive(
                &self,
                stream: &StreamName,
                group: &GroupName,
                which: Redrive,
            ) -> Result<u64> {
                let n = groups::redrive(self, stream, group, which).await?;
                if n > 0 {
                    self.notifier.notify(stream);
                }
                Ok(n)
            }

            async fn replay(
                &self,
                stream: &StreamName,
                group: &GroupName,
                how: Replay,
            ) -> Result<u64> {
                let n = groups::replay(self, stream, group, how).await?;
                self.notifier.notify(stream);
                Ok(n)
            }

            async fn reset(&self, req: ResetRequest) -> Result<()> {
                let stream = req.stream.clone();
                groups::reset(self, req).await?;
                self.notifier.notify(&stream);
                Ok(())
            }

            fn subscribe(&self, stream: &StreamName) -> Wakeup {
                self.notifier.subscribe(stream)
            }

            async fn next_due(
                &self,
                stream: &StreamName,
                group: &GroupName,
                partitions: &Partitions,
            ) -> Result<Option<Timestamp>> {
                groups::next_due(self, stream, group, partitions).await
            }
        }
    };
}
pub(crate) use sql_backend;

/// Whether `e` is a unique-constraint violation.
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// Shares `limit` claims among partitions one at a time in rotation,
/// starting at `first` (an index into `capacity`): `capacity[i]` is how
/// many partition `i` can give. Returns how many to take from each.
pub(crate) fn round_robin(capacity: &[usize], limit: usize, first: usize) -> Vec<usize> {
    let n = capacity.len();
    let mut take = vec![0; n];
    if n == 0 {
        return take;
    }
    let mut left = limit;
    let mut progressed = true;
    while left > 0 && progressed {
        progressed = false;
        for step in 0..n {
            let i = (first + step) % n;
            if left > 0 && take[i] < capacity[i] {
                take[i] += 1;
                left -= 1;
                progressed = true;
            }
        }
    }
    take
}

#[cfg(test)]
mod tests {
    use super::round_robin;

    #[test]
    fn round_robin_shares_fairly_and_rotates() {
        assert_eq!(round_robin(&[10, 10], 2, 0), [1, 1]);
        assert_eq!(round_robin(&[10, 10], 1, 0), [1, 0]);
        assert_eq!(round_robin(&[10, 10], 1, 1), [0, 1]);
        assert_eq!(round_robin(&[1, 10, 0], 6, 0), [1, 5, 0]);
        assert_eq!(round_robin(&[2, 2], 10, 0), [2, 2]);
        assert_eq!(round_robin(&[], 3, 0), Vec::<usize>::new());
    }
}
