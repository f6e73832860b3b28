//! The `bindgen!` calls: Rust types and traits for the `rheo:handler`
//! worlds in `wit/` (`docs/handlers.md#batches`).
//!
//! - `rheo:handler/handler@0.1.0` (`wit/deps/handler-0.1.0/`): exports
//!   `handle`. It generates the `types` and the `host` imports, which
//!   every version shares.
//! - `rheo:handler/handler@0.2.0` (`wit/handler.wit`, module [`batch`]):
//!   exports `handle` and `handle-batch`, over the same imports and types
//!   (mapped with `with`, so both worlds use one set of Rust types and one
//!   linker).
//!
//! Configuration, and why:
//! - the exports are `async` on the host side, so a guest runs on a
//!   wasmtime fiber that can yield to tokio at every epoch tick and be
//!   dropped at its deadline, instead of pinning a worker thread;
//! - of the imports only `append` is `async`: it awaits the backend. `log`,
//!   `config-get` and `now-ms` answer from memory and stay plain functions,
//!   which keeps them cheap;
//! - no import is `trappable`: the host never kills a guest for calling it
//!   badly, it answers with a value (`append-error`, `none`) instead.
//!
//! Everything generated is re-exported through [`super`] under the names the
//! rest of the host uses; nothing outside `wasm` sees these types.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "rheo:handler/handler@0.1.0",
    imports: {
        "rheo:handler/host.append": async,
    },
    exports: {
        default: async,
    },
});

/// The 0.2.0 world: `handle` and `handle-batch`.
pub(crate) mod batch {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "rheo:handler/handler@0.2.0",
        exports: {
            default: async,
        },
        with: {
            "rheo:handler/types@0.1.0": super::rheo::handler0_1_0::types,
            "rheo:handler/host@0.1.0": super::rheo::handler0_1_0::host,
        },
    });
}

pub(crate) use self::rheo::handler0_1_0::host::{Host, add_to_linker as add_host_to_linker};
// `Delivery` and `Outcome` are generated at the top level too (the world
// `use`s them); the rest come from the `types` interface.
pub(crate) use self::rheo::handler0_1_0::types::{AppendError, Event, EventInput, EventRef, Level};
