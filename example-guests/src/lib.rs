//! The example guests of `guests/` (`echo`, `flaky`, `poison`, … — what
//! each does is in `guests/README.md`), compiled by the build script
//! (`build/main.rs`) and embedded in this crate.
//!
//! This is the one place anything finds them: the `rheo` binary (which
//! hands them to `rheo::example_guests` for `rheo demo` and `rheo bench`),
//! the WebAssembly tests, the benches and the end-to-end tests. Being
//! embedded, an installed `rheo` binary needs no source tree to run them.

include!(concat!(env!("OUT_DIR"), "/example_guests.rs"));

/// Each example guest by name (sorted), with its component.
pub const ALL: &[(&str, &[u8])] = &EMBEDDED;

/// The names of the example guests, sorted.
pub fn names() -> impl Iterator<Item = &'static str> {
    EMBEDDED.iter().map(|(name, _)| *name)
}

/// The component of the example guest `name` (a `.wasm` file's bytes), if
/// there is one by that name.
pub fn get(name: &str) -> Option<&'static [u8]> {
    EMBEDDED
        .iter()
        .find(|(candidate, _)| *candidate == name)
        .map(|(_, bytes)| *bytes)
}

#[cfg(test)]
mod tests {
    use super::{get, names};

    #[test]
    fn every_example_guest_is_an_embedded_component() {
        let names: Vec<&str> = names().collect();
        for expected in [
            "batch",
            "classic",
            "crash",
            "echo",
            "flaky",
            "hog",
            "poison",
            "probe",
            "spin",
            "transform",
        ] {
            assert!(
                names.contains(&expected),
                "{expected} missing from {names:?}"
            );
        }
        assert!(
            !names.contains(&"rheo-guest"),
            "the helper library is no guest"
        );
        for name in names {
            let bytes = get(name).expect("listed guests are embedded");
            // A component's preamble: magic, then layer 1 (not a core module).
            assert_eq!(&bytes[..4], b"\0asm", "{name}");
            assert_eq!(&bytes[6..8], &[1, 0], "{name} is a component");
        }
        assert_eq!(get("no-such-guest"), None);
    }
}
