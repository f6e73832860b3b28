//! The example guests of `guests/` as this library finds them: the table
//! the `rheo` binary hands over at start-up ([`provide`]), from the
//! `rheo-example-guests` crate that compiles and embeds them. The server
//! library does not depend on that crate, so a guest edit rebuilds it and
//! relinks the binary, never the server (`docs/architecture.md`).
//!
//! `rheo demo` and `rheo bench` run them; without a table (a library user
//! that provided none), they have no guest to run and say so.

use std::sync::OnceLock;

/// Each example guest by name, with its component (a `.wasm` file's bytes).
pub type Table = &'static [(&'static str, &'static [u8])];

static TABLE: OnceLock<Table> = OnceLock::new();

/// Makes `table` the example guests of this process; the first call wins.
pub fn provide(table: Table) {
    let _ = TABLE.set(table);
}

/// The names of the example guests, as provided.
pub fn names() -> impl Iterator<Item = &'static str> {
    TABLE
        .get()
        .copied()
        .unwrap_or_default()
        .iter()
        .map(|(name, _)| *name)
}

/// The component of the example guest `name`, if one by that name was
/// provided.
pub fn get(name: &str) -> Option<&'static [u8]> {
    TABLE
        .get()
        .copied()
        .unwrap_or_default()
        .iter()
        .find(|(candidate, _)| *candidate == name)
        .map(|(_, bytes)| *bytes)
}
