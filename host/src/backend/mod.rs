//! The [`Backend`] trait and the rest of `rheo_core::backend`, re-exported
//! whole; the stores of their own crates (`rheo-sql`, `rheo-redis`,
//! `rheo-mongo`), by feature; and [`open`] to pick one by URL
//! (`docs/backends.md`).

#[cfg(feature = "mongodb")]
pub use rheo_mongo as mongo;
#[cfg(feature = "redis")]
pub use rheo_redis as redis;
#[cfg(feature = "postgres")]
pub use rheo_sql::postgres;
#[cfg(feature = "sqlite")]
pub use rheo_sql::sqlite;

use std::sync::Arc;

pub use rheo_core::backend::*;

use crate::clock::SharedClock;

/// Opens the backend a URL names — `memory://`, `sqlite://path.db` (or
/// `sqlite::memory:`), `postgres://…[?schema=name]`,
/// `redis://host:port[/db][?prefix=name]`, `mongodb://host:port/[database][?options]`
/// — applying pending migrations, with the default store timeout.
pub async fn open(url: &str, clock: SharedClock) -> Result<Arc<dyn Backend>> {
    connect(url, clock, true).await
}

/// Opens the backend a URL names; with `migrate` false the schema is left
/// as it is (see [`Backend::migrate`]). Calls have the default store
/// timeout ([`connect_with`]).
pub async fn connect(url: &str, clock: SharedClock, migrate: bool) -> Result<Arc<dyn Backend>> {
    connect_with(url, clock, migrate, DEFAULT_STORE_TIMEOUT).await
}

/// Opens the backend a URL names, every call of it [`bounded`] by
/// `timeout` (`--store-timeout-ms`); a networked store also derives its
/// driver's and server's timeouts from it
/// (`docs/cluster.md#a-node-cut-off-from-the-store`).
pub async fn connect_with(
    url: &str,
    clock: SharedClock,
    migrate: bool,
    timeout: std::time::Duration,
) -> Result<Arc<dyn Backend>> {
    let store = connect_store(url, clock, migrate, timeout).await?;
    Ok(bounded(store, timeout))
}

async fn connect_store(
    url: &str,
    clock: SharedClock,
    // Unused in a build with no store but memory.
    #[allow(unused_variables)] migrate: bool,
    #[allow(unused_variables)] timeout: std::time::Duration,
) -> Result<Arc<dyn Backend>> {
    let scheme = url
        .split_once("://")
        .map(|(s, _)| s)
        .or_else(|| url.split_once(':').map(|(s, _)| s));
    match scheme {
        Some("memory") => Ok(Arc::new(memory::MemoryBackend::new(clock))),
        #[cfg(feature = "sqlite")]
        Some("sqlite") => Ok(Arc::new(
            sqlite::SqliteBackend::open(url, clock, migrate).await?,
        )),
        #[cfg(feature = "postgres")]
        Some("postgres" | "postgresql") => Ok(Arc::new(
            postgres::PostgresBackend::connect(url, clock, migrate, timeout).await?,
        )),
        #[cfg(feature = "redis")]
        Some("redis") => {
            let backend = redis::RedisBackend::connect(url, clock, timeout).await?;
            if migrate {
                backend.migrate_layout().await?;
            }
            Ok(Arc::new(backend))
        }
        #[cfg(feature = "mongodb")]
        Some("mongodb") => Ok(Arc::new(
            mongo::MongoBackend::connect(url, clock, migrate, timeout).await?,
        )),
        Some(other) => Err(Error::invalid(
            "backend",
            format!(
                "no backend for {other:?} URLs in this build (known: memory://, sqlite://, postgres://, redis://, mongodb://)"
            ),
        )),
        None => Err(Error::invalid(
            "backend",
            format!(
                "{:?} is not a backend URL (try memory:// or sqlite://rheo.db)",
                redact_url(url)
            ),
        )),
    }
}
