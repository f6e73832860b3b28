//! Rheo: durable, searchable, replayable consumer groups over storage you
//! already run, with handlers as sandboxed WebAssembly components.
//!
//! Crate map (`docs/architecture.md`); [`model`], [`clock`], [`settle`],
//! [`cluster`], [`handler_logs`] and most of [`backend`] are `rheo-core`'s
//! and [`wasm`] is `rheo-wasm`, re-exported here:
//! - [`api`]     — the HTTP API (axum): routers per resource, errors, OpenAPI, `serve`.
//! - [`handlers`] — deployed handlers: manifests, compile + validate + swap, versions, status and rollback (their one owner), the handlers directory and its watcher.
//! - [`metrics`] — the Prometheus series of `/metrics`: HTTP, backend operations, handlers, sampled groups.
//! - [`model`]   — pure domain types (streams, events, groups, leases, queries) and their validation.
//! - [`backend`] — the [`backend::Backend`] trait, the portable error vocabulary and the memory store (`rheo-core`); the SQLite, PostgreSQL, Redis and MongoDB stores and `open` by URL (here).
//! - [`clock`]   — the injectable clock (system or frozen) every expiry is measured by.
//! - [`cluster`] — servers sharing one store: node membership and heartbeats, the shared handler records (`docs/cluster.md`).
//! - [`runtime`] — the per-handler claim / dispatch / renew / settle loops; runs the version it is given (hot swap), counts per version.
//! - [`settle`]  — the settle policy: handler outcome → ack / nack / reject, settle failures, fetch backoff.
//! - [`bench`]   — the workloads behind `rheo bench`.
//! - [`server`]  — a whole server in the library: `server::run(config, listener, shutdown)`.
//! - [`cli`]     — the `rheo` command line (one module per subcommand); `rheo serve` reads its arguments and calls `server::run`.
//! - [`example_guests`] — the example guests as the `rheo` binary provides them (built and embedded by `rheo-example-guests`).
//! - [`handler_logs`] — the last log lines of every handler, in memory, with followers (`rheo-core`).
//! - [`config`]  — `rheo serve` settings: flags > `RHEO_*` env > TOML file > defaults.
//! - [`telemetry`] — logs (text or JSON), the span per delivery, OTLP trace export.
//! - [`wasm`]    — the WebAssembly handler host: engine, sandbox, compile + validate, invoke (the `rheo-wasm` crate, feature `wasm`).

pub use rheo_core::{clock, cluster, handler_logs, model, settle};
#[cfg(feature = "wasm")]
pub use rheo_wasm as wasm;

pub mod api;
pub mod backend;
pub mod bench;
pub mod cli;
pub mod config;
pub mod example_guests;
#[cfg(test)]
mod fuzz;
#[cfg(feature = "wasm")]
pub mod handlers;
pub mod metrics;
pub mod retention;
pub mod runtime;
pub mod server;
pub mod telemetry;
