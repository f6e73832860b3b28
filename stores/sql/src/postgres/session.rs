//! What every PostgreSQL session of a backend is told at connect, and how
//! its pool checks a connection going out and coming back: the PostgreSQL
//! half of `docs/cluster.md#a-node-cut-off-from-the-store`.
//!
//! A node cut off from the database (its packets dropped, its sockets left
//! open) must not hold locks that stall the other nodes, and its own calls
//! must end. Every number here is derived from the store timeout `T`
//! (`--store-timeout-ms`, 10 s by default), which bounds each store call
//! on the client ([`rheo_core::backend::bounded`]):
//!
//! | Setting | Of `T` | Default | Why |
//! |---|---|---|---|
//! | `idle_in_transaction_session_timeout` | ½ | 5 s | Rheo sends each statement of a transaction as soon as the last one answered, so a session idle inside a transaction belongs to a node that is gone: the server ends it and releases its locks. Peers wait at most this long behind a cut node. |
//! | `lock_timeout` | 8⁄10 | 8 s | Longer than the above, so a wait behind a cut node's idle transaction ends in the lock, not in an error; shorter than the statement timeout, so a wait behind a session stuck in a statement fails as "nothing done" (`backend_unavailable`) before the client gives up. |
//! | `statement_timeout` | 9⁄10 | 9 s | The server stops a statement before the client abandons it at `T`. |
//! | `tcp_keepalives_idle` / `_interval` / `_count` | ½, ⅒, 3 | 5 s, 1 s, 3 | The server drops an idle session whose client stopped answering after about 8 s (a real network; a cut behind a proxy that keeps the socket open is only caught by the timeouts above). |
//! | `tcp_user_timeout` | 1 | 10 s | The server drops a session whose client has not acknowledged what it sent for `T` (a statement blocked writing its result to a cut node, which no statement timeout interrupts). |
//! | pool acquire timeout | ½ | 5 s | A call that cannot get a working connection (each is pinged on its way out, unless it answered its release ping within the last 100 ms) answers `backend_unavailable` in half the store timeout: a cut node answers new calls within 5 s. |
//! | release check | ½ | 5 s | A connection going back to the pool must answer a ping within this, else it is closed: a call dropped at its deadline leaves its connection mid-statement or mid-transaction, and such a connection never serves another call. |
//!
//! All are session settings any user may set, sent as startup options
//! like the others (PostgreSQL ≥ 12 for `tcp_user_timeout`). Migrations
//! run on a session of their own with the statement, lock and idle
//! timeouts off: they may build indexes over large tables, and they wait
//! for another node's migration behind its lock.

use std::time::Duration;

use sqlx::Connection as _;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

/// A connection that answered its release ping this recently goes out
/// again without another ([`Timeouts::pool`]): a call made within this
/// long of a cut may wait for the store timeout rather than half of it.
pub(crate) const FRESH: Duration = Duration::from_millis(100);

/// The timeouts of a backend's sessions and pool (module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// How long a call waits for a connection.
    pub(crate) acquire: Duration,
    /// `statement_timeout`.
    pub(crate) statement: Duration,
    /// `lock_timeout`.
    pub(crate) lock: Duration,
    /// `idle_in_transaction_session_timeout`.
    pub(crate) idle_in_transaction: Duration,
    /// `tcp_keepalives_idle` (whole seconds).
    pub(crate) keepalive_idle: Duration,
    /// `tcp_keepalives_interval` (whole seconds).
    pub(crate) keepalive_interval: Duration,
    /// `tcp_keepalives_count`.
    pub(crate) keepalive_count: u32,
    /// `tcp_user_timeout`.
    pub(crate) user_timeout: Duration,
    /// How long a connection coming back to the pool has to answer a ping.
    pub(crate) release: Duration,
}

impl Timeouts {
    /// The timeouts for store timeout `t` (module doc).
    pub(crate) fn derived(t: Duration) -> Self {
        let part = |tenths: u32| t * tenths / 10;
        let whole_seconds = |d: Duration| Duration::from_secs(d.as_secs().max(1));
        Self {
            acquire: part(5),
            statement: part(9),
            lock: part(8),
            idle_in_transaction: part(5),
            keepalive_idle: whole_seconds(part(5)),
            keepalive_interval: whole_seconds(part(1)),
            keepalive_count: 3,
            user_timeout: t,
            release: part(5),
        }
    }

    /// The startup options that set them in each session.
    pub(crate) fn session_options(&self) -> Vec<(&'static str, String)> {
        let ms = |d: Duration| format!("{}ms", d.as_millis().max(1));
        let s = |d: Duration| d.as_secs().to_string();
        vec![
            ("statement_timeout", ms(self.statement)),
            ("lock_timeout", ms(self.lock)),
            (
                "idle_in_transaction_session_timeout",
                ms(self.idle_in_transaction),
            ),
            ("tcp_keepalives_idle", s(self.keepalive_idle)),
            ("tcp_keepalives_interval", s(self.keepalive_interval)),
            ("tcp_keepalives_count", self.keepalive_count.to_string()),
            ("tcp_user_timeout", ms(self.user_timeout)),
        ]
    }

    /// The pool: at most `max` connections; each one must answer a ping
    /// within [`release`](Self::release) when it comes back, or be closed,
    /// and is pinged again before it goes out (within the acquire timeout:
    /// a call on a cut node fails in `T/2`) unless it came back less than
    /// [`FRESH`] ago. sqlx pings a connection coming back too, but without
    /// a deadline; under load a connection goes out again within
    /// microseconds of its release ping, and a second ping then was one
    /// round trip per call for nothing (`docs/benchmarks.md`).
    pub(crate) fn pool(&self, max: u32) -> PgPoolOptions {
        let release = self.release;
        PgPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(self.acquire)
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for < FRESH {
                        return Ok(true);
                    }
                    // An error closes the connection; acquire tries another.
                    conn.ping().await.map(|()| true)
                })
            })
            .after_release(move |conn, _| {
                Box::pin(async move {
                    match tokio::time::timeout(release, conn.ping()).await {
                        Ok(answered) => answered.map(|()| true),
                        // Closed (without a goodbye the server would not
                        // read): a fresh connection replaces it once the
                        // server answers again.
                        Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "a connection back from a call did not answer a ping in time",
                        ))),
                    }
                })
            })
    }
}

/// `options` for the session that runs migrations: no statement, lock or
/// idle timeout (module doc).
pub(crate) fn for_migrations(options: &PgConnectOptions) -> PgConnectOptions {
    options.clone().options([
        ("statement_timeout", "0"),
        ("lock_timeout", "0"),
        ("idle_in_transaction_session_timeout", "0"),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_documented_numbers() {
        let t = Timeouts::derived(Duration::from_secs(10));
        let secs = |s: u64| Duration::from_secs(s);
        assert_eq!(t.acquire, secs(5));
        assert_eq!(t.idle_in_transaction, secs(5));
        assert_eq!(t.lock, secs(8));
        assert_eq!(t.statement, secs(9));
        assert_eq!((t.keepalive_idle, t.keepalive_interval), (secs(5), secs(1)));
        assert_eq!(t.user_timeout, secs(10));
        assert_eq!(t.release, secs(5));
    }

    #[test]
    fn a_wait_behind_a_gone_node_ends_before_the_lock_and_statement_timeouts() {
        for ms in [500, 3_000, 10_000, 60_000] {
            let t = Timeouts::derived(Duration::from_millis(ms));
            assert!(t.idle_in_transaction < t.lock, "{t:?}");
            assert!(t.lock < t.statement, "{t:?}");
            assert!(t.statement < t.user_timeout, "{t:?}");
            assert!(t.acquire < t.user_timeout, "{t:?}");
        }
    }

    #[test]
    fn short_timeouts_keep_whole_seconds_of_keepalive() {
        let t = Timeouts::derived(Duration::from_millis(500));
        assert_eq!(t.keepalive_idle, Duration::from_secs(1));
        assert_eq!(t.keepalive_interval, Duration::from_secs(1));
        let options = t.session_options();
        assert!(options.contains(&("lock_timeout", "400ms".to_owned())));
        assert!(options.contains(&("tcp_keepalives_idle", "1".to_owned())));
    }
}
