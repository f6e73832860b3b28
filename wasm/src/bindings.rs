//! The one `bindgen!` call: Rust types and traits for `wit/handler.wit`.
//!
//! Configuration, and why:
//! - the export `handle` is `async` on the host side, so a guest runs on a
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
    world: "handler",
    imports: {
        "rheo:handler/host.append": async,
    },
    exports: {
        default: async,
    },
});

pub(crate) use self::rheo::handler::host::{Host, add_to_linker as add_host_to_linker};
// `Delivery` and `Outcome` are generated at the top level too (the world
// `use`s them); the rest come from the `types` interface.
pub(crate) use self::rheo::handler::types::{AppendError, Event, EventInput, EventRef, Level};
