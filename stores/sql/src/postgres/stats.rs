//! Planner statistics that keep up with growth.
//!
//! Statements keep generic plans per connection; a plan made while the
//! tables were nearly empty (and without statistics) can pick an index that
//! walks a whole group, so fresh statistics — which also invalidate the
//! cached plans — must not wait for autovacuum's next round during a burst
//! of writes. Each backend counts the rows it writes and, as the tables
//! grow, runs `ANALYZE` in the background.
//!
//! That `ANALYZE` never waits for a table's lock: while autovacuum works on
//! the table it is skipped. Waiting would cancel autovacuum (PostgreSQL
//! gives its lock to whoever waits for it more than a second), and on a
//! busy table with retention, whose trims leave dead rows only a vacuum
//! makes room of, autovacuum then never finished and the table grew
//! without bound (docs/log.md#retention).

use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::PgPool;

use crate::sql::Table;

/// First statistics refresh after this many rows written; then each time
/// the count doubles, and at least every [`ANALYZE_EVERY_MAX`] rows.
const ANALYZE_FIRST: u64 = 1_000;
/// Longest gap between statistics refreshes, in rows written.
const ANALYZE_EVERY_MAX: u64 = 200_000;

/// Rows written to one table, and the count at which its statistics are
/// next refreshed.
#[derive(Debug)]
pub(super) struct Growth {
    written: AtomicU64,
    next: AtomicU64,
}

impl Growth {
    pub(super) fn new() -> Self {
        Self {
            written: AtomicU64::new(0),
            next: AtomicU64::new(ANALYZE_FIRST),
        }
    }

    /// Adds `rows`; returns the new total (once) when a refresh is due.
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

    /// Counts `rows` written to `table`, refreshing its statistics in the
    /// background when due.
    pub(super) fn wrote(&self, pool: &PgPool, table: Table, rows: u64) {
        let Some(total) = self.grew(rows) else {
            return;
        };
        let pool = pool.clone();
        tokio::spawn(async move {
            match refresh(&pool, table).await {
                Ok(()) => tracing::debug!(?table, rows = total, "planner statistics refreshed"),
                Err(e) => tracing::debug!(error = %e, "ANALYZE failed; autovacuum will do it"),
            }
        });
    }
}

/// Refreshes `table`'s statistics, or skips it at once when someone (a
/// vacuum) holds its lock.
pub(super) async fn refresh(pool: &PgPool, table: Table) -> Result<(), sqlx::Error> {
    // One implicit transaction: the server's "skipping analyze" warning is
    // not sent (a skipped refresh is expected, not news).
    let statement = match table {
        Table::Events => "SET LOCAL client_min_messages = error; ANALYZE (SKIP_LOCKED) rheo_events",
        Table::Deliveries => {
            "SET LOCAL client_min_messages = error; ANALYZE (SKIP_LOCKED) rheo_deliveries"
        }
    };
    sqlx::raw_sql(statement).execute(pool).await.map(|_| ())
}
