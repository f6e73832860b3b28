//! Rheo: durable, searchable, replayable consumer groups over storage you
//! already run, with handlers as sandboxed WebAssembly components.
//!
//! Crate map:
//! - [`model`]   — pure domain types (streams, events, groups, leases, queries) and their validation.
//! - [`backend`] — the [`backend::Backend`] trait, the portable error vocabulary, the backends, the conformance suite.
//! - [`clock`]   — the injectable clock (system or frozen) every expiry is measured by.
//! - [`settle`]  — the settle policy: handler outcome → ack / nack / reject, settle failures, fetch backoff.
//! - [`wasm`]    — the WebAssembly handler host: engine, sandbox, compile + validate, invoke (feature `wasm`).

pub mod backend;
pub mod clock;
pub mod model;
pub mod settle;
#[cfg(feature = "wasm")]
pub mod wasm;
