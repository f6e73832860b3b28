//! `config-get(key)`: a value of the handler's configuration.
//!
//! The configuration is the manifest's string map, fixed for a handler
//! version: a warm instance that cached a value never sees a stale one,
//! because a configuration change makes a new version with new instances.

use std::collections::BTreeMap;

/// The value of `key`, if the handler's configuration has it.
pub(crate) fn get(config: &BTreeMap<String, String>, key: &str) -> Option<String> {
    config.get(key).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_keys_answer_and_unknown_keys_are_none() {
        let config = BTreeMap::from([("target_stream".to_owned(), "out".to_owned())]);
        assert_eq!(get(&config, "target_stream").as_deref(), Some("out"));
        assert_eq!(get(&config, "missing"), None);
    }
}
