//! Rheo's core: what every store and the server share, and nothing that
//! needs a database driver, the WebAssembly host or the HTTP server.
//!
//! - [`model`]   — pure domain types (streams, events, groups, leases, queries) and their validation.
//! - [`clock`]   — the injectable clock (system or frozen) every expiry is measured by.
//! - [`settle`]  — the settle policy: handler outcome → ack / nack / reject, settle failures, fetch backoff.
//! - [`backend`] — the [`backend::Backend`] trait, the portable error vocabulary, the shared gate, share and fence decisions (`backend::policy`), the in-memory store, store deadlines, the conformance suite.
//! - [`handler_logs`] — the last log lines of every handler, in memory, with followers: the WebAssembly host writes them, the API reads them.
//! - [`cluster`] — the trait of servers sharing one store (node membership, shared handler records), its in-memory implementation and conformance checks.

pub mod backend;
pub mod clock;
pub mod cluster;
pub mod handler_logs;
pub mod model;
pub mod settle;
