//! Rheo's SQL stores (`docs/backends.md#sql-backends`): one engine
//! ([`sql`]) over two dialects, SQLite, the embedded default, and
//! PostgreSQL, the shared one. Each implements `rheo_core::backend::Backend`
//! and passes its conformance suite.

#[cfg(feature = "postgres")]
pub mod postgres;
// `SqlBackend<D: Dialect>` is public as the stores' type, while what a
// dialect is (the `Dialect` trait and its statements) stays this crate's:
// every impl of the engine is bounded by a crate-private trait.
#[allow(private_bounds)]
pub mod sql;
#[cfg(feature = "sqlite")]
pub mod sqlite;
