//! The WebAssembly handler host: compiles handler components, runs them for
//! leases in a sandbox, and turns what they did into a
//! [`HandlerOutcome`](crate::settle::HandlerOutcome).
//!
//! # The sandbox model
//!
//! A handler is untrusted code. It gets exactly what the `rheo:handler`
//! world (`wit/handler.wit`) offers and nothing else:
//!
//! * **Capabilities are imports.** The guest can log (into `tracing`,
//!   tagged with its handler's name), read its own configuration, read the
//!   host's clock, and append events — to the backend the handler was
//!   given, optionally only to an allow-list of streams. There is no other
//!   door: no host memory, no other handler's state.
//! * **WASI is linked but denied.** Language runtimes import WASI whether
//!   they use it or not, so it must be there for Python and JavaScript
//!   components to instantiate; but there are no preopened directories (no
//!   file can be named), no environment, no arguments, no network (TCP and
//!   UDP off, every address refused, no name lookup) and stdin is closed.
//!   stdout and stderr become log lines. Clocks and random numbers are
//!   allowed; they leak nothing.
//! * **Every call is bounded.** A deadline (epoch interruption, checked
//!   every tick, plus an async timeout for time spent waiting in host
//!   calls), a memory cap summed over all of an instance's memories, fixed
//!   caps on tables and instances, and optional fuel. Hitting any of them
//!   is a [`HandlerFailure`](crate::settle::HandlerFailure), never a crash
//!   of the host.
//! * **A misbehaving instance is thrown away.** Each instance lives in its
//!   own store. After a trap, timeout or limit stop the store is dropped
//!   (wasmtime forbids re-entering a trapped instance anyway), so no call
//!   ever sees state a failed call left behind. In `reuse` mode, warm
//!   instances are also retired after `max_invocations` calls; in `fresh`
//!   mode every call gets a new instance and nothing carries over at all.
//! * **Compiling is validation.** A module becomes runnable only after it
//!   compiled, every import resolved against the linker and the `handle`
//!   export type-checked. A failed module is an error value: whoever tried
//!   to deploy it keeps the version that was running.
//!
//! # Using it
//!
//! One [`WasmEngine`] per process. [`WasmEngine::load`] turns bytes into a
//! [`HandlerModule`] (off the async workers; cached on disk by digest with
//! a [`ModuleCache`]). A [`HandlerRunner`] binds a module to a
//! [`HandlerEnv`] (name, config, backend, clock, stream allow-list) and
//! [`Limits`], and [`HandlerRunner::invoke`] runs one lease. A runner is a
//! handler *version*: hot reload builds a new runner and swaps the `Arc`.
//!
//! # Layout
//!
//! - `engine`   — the engine, linker and epoch ticker.
//! - `bindings` — the one `bindgen!` call.
//! - `host/`    — host state and one file per capability (log, config,
//!   append, clock, WASI).
//! - `module`   — compile and validate.
//! - `cache`    — content digests and precompiled modules on disk by digest
//!   (the one `unsafe` block).
//! - `limits`   — per-handler limits and the memory limiter.
//! - `instance` — one instance in its store; the warm pool.
//! - `invoke`   — the runner: lease in, outcome out.

// The core's modules, under the names the server uses for them.
use rheo_core::{backend, clock, handler_logs, model, settle};

mod bindings;
mod cache;
mod engine;
mod host;
mod instance;
mod invoke;
mod limits;
mod module;

#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;

pub use cache::{Digest, ModuleCache};
pub use engine::{EngineOptions, PoolingOptions, WasmEngine};
pub use host::{AppendCapture, CapturedAppend, HandlerEnv, LOG_TARGET, MAX_LINE_BYTES};
pub use invoke::{HandlerRunner, RunnerStats};
pub use limits::{
    DEFAULT_MAX_INVOCATIONS, DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_MS, InstanceMode, Limits,
    MAX_TIMEOUT_MS,
};
pub use module::{HandlerModule, MAX_COMPONENT_BYTES};

/// Why a module could not be loaded or a runner not built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WasmError {
    /// The engine could not be built (configuration, address space).
    #[error("wasm engine: {0}")]
    Engine(String),
    /// The bytes are not a WebAssembly component.
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(String),
    /// The component did not compile.
    #[error("compiling the component failed: {0}")]
    Compile(String),
    /// The component imports something the host does not offer.
    #[error("the component's imports cannot be satisfied: {0}")]
    Imports(String),
    /// The component does not export `handle` as `rheo:handler@0.1.0`
    /// defines it (nor `handle-batch` as 0.2.0 does, when it exports one).
    #[error(
        "the component does not export `handle: func(delivery) -> outcome` of rheo:handler@0.1.0, \
         or `handle-batch: func(list<delivery>) -> list<outcome>` of 0.2.0 beside it: {0}"
    )]
    Exports(String),
    /// The precompiled-module cache failed.
    #[error("module cache: {0}")]
    Cache(String),
    /// The handler's limits are out of range for this engine.
    #[error("invalid limits: {0}")]
    Limits(String),
}
