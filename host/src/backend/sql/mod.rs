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
