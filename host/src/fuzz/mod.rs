//! Fuzz targets, run as property tests inside the ordinary test build
//! (`docs/testing.md`): the query language and its SQL translation, handler
//! manifests and the configuration file, and the JSON request bodies.
//!
//! Each target first replays its checked-in seed corpus
//! (`host/fuzz/corpus/<target>/`), then runs a bounded number of generated
//! cases: [`config`] sizes them (`RHEO_FUZZ_CASES` raises the count for a
//! long local campaign). A case proptest finds failing is shrunk, and its
//! seed kept in `host/proptest-regressions/fuzz/<target>.txt`, which later
//! runs replay first; such a file is checked in with the fix.

mod bodies;
#[cfg(feature = "wasm")]
mod manifest;
mod query;
#[cfg(feature = "sqlite")]
mod sql;

use std::path::PathBuf;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value};

/// The seed corpus of `target`, sorted by file name: `(name, bytes)`.
pub(crate) fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read the corpus {}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("a corpus entry").path();
            let bytes = std::fs::read(&path).expect("a readable corpus file");
            let name = path
                .file_name()
                .expect("a file name")
                .to_string_lossy()
                .into_owned();
            (name, bytes)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "the corpus {} is empty", dir.display());
    files
}

/// `default_cases` generated cases, or `RHEO_FUZZ_CASES` when set; failures
/// are kept under `host/proptest-regressions/` by `source_file` (the
/// target's `file!()`).
pub(crate) fn config(default_cases: u32, source_file: &'static str) -> Config {
    let cases = std::env::var("RHEO_FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default_cases);
    Config {
        cases,
        source_file: Some(source_file),
        // Generated inputs are small; a failure shrinks within this bound.
        max_shrink_iters: 2048,
        ..Config::default()
    }
}

/// Runs `test` on `cases` generated values of `strategy`; a failure panics
/// with the shrunk input.
pub(crate) fn run<S: Strategy>(
    config: Config,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let mut runner = TestRunner::new(config);
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{e}");
    }
}

/// `bytes` with a few edits (overwrite, insert or delete one byte): the
/// mutations a coverage fuzzer would start from, applied to corpus entries.
pub(crate) fn mutate(bytes: &[u8], edits: &[(usize, u8, u8)]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for &(at, byte, kind) in edits {
        let at = if out.is_empty() {
            0
        } else {
            at % (out.len() + 1)
        };
        match kind % 3 {
            0 if at < out.len() => out[at] = byte,
            1 if at < out.len() => {
                out.remove(at);
            }
            _ => out.insert(at, byte),
        }
    }
    out
}

/// Edits for [`mutate`]: the bytes are drawn mostly from JSON and TOML
/// punctuation, digits and letters, so mutants stay near the grammar.
pub(crate) fn edits() -> impl Strategy<Value = Vec<(usize, u8, u8)>> {
    let byte = prop_oneof![
        3 => proptest::sample::select(b"{}[]\":,.$=#'\\- 0123456789eEntfalsrue\n".to_vec()),
        1 => any::<u8>(),
    ];
    proptest::collection::vec((any::<usize>(), byte, 0..3u8), 1..6)
}

/// A corpus entry of `target` with a few edits.
pub(crate) fn mutant(target: &str) -> impl Strategy<Value = Vec<u8>> + use<> {
    let seeds = corpus(target);
    (0..seeds.len(), edits()).prop_map(move |(i, e)| mutate(&seeds[i].1, &e))
}

/// Strings of the query language's alphabet: names with dots, operators,
/// a few non-ASCII letters, quotes and backslashes.
pub(crate) const STRINGS: [&str; 12] = [
    "",
    "a",
    "b",
    "ab",
    "B",
    "é",
    "k1",
    "a b",
    "order.placed",
    "$gt",
    "q\"x",
    "b\\s",
];

/// Numbers as JSON text (kept as written: `arbitrary_precision`), all
/// exact as 64-bit floats: integers, halves, `-0.0`, an exponent.
pub(crate) const NUMBERS: [&str; 12] = [
    "0", "1", "2", "-1", "-3", "100", "0.5", "-1.5", "2.0", "-0.0", "1e2", "1E0",
];

/// A number of [`NUMBERS`].
pub(crate) fn number() -> impl Strategy<Value = Value> {
    proptest::sample::select(NUMBERS.to_vec())
        .prop_map(|text| serde_json::from_str(text).expect("a JSON number"))
}

/// A string of [`STRINGS`].
pub(crate) fn string() -> impl Strategy<Value = Value> {
    proptest::sample::select(STRINGS.to_vec()).prop_map(Value::from)
}

/// A JSON scalar.
pub(crate) fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        3 => number(),
        3 => string(),
    ]
}

/// A small JSON value: scalars, and arrays and objects (keys `a`, `b`,
/// `c`) of them, two levels deep.
pub(crate) fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            proptest::collection::btree_map(
                proptest::sample::select(vec!["a", "b", "c"]),
                inner,
                0..3
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

/// Any JSON value: unrestricted strings, keys and numbers (huge, tiny,
/// negative, exponents), nested four levels.
pub(crate) fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "-?[0-9]{1,30}(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,4})?"
            .prop_filter_map("a JSON number", |t| serde_json::from_str::<Value>(&t).ok()),
        any::<String>().prop_map(Value::String),
        string(),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

/// Object keys: the API's field names and operators, or anything.
pub(crate) fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(vec![
            "where", "from", "to", "after_sequence", "until_sequence", "order_by", "limit",
            "cursor", "field", "dir", "id", "type", "key", "partition", "timestamp", "payload",
            "metadata", "events", "name", "partition_count", "max_attempts", "start_after",
            "start_at", "retry_backoff_ms", "confirm", "partitions", "query", "event_ids",
            "from_sequence", "all", "settlements", "op", "lease_id", "event_id", "receipt",
            "reason", "delay_ms", "lease_ms", "consumer_id", "wait_ms", "$eq", "$in", "$gt",
            "$gte", "$lt", "$lte", "$exists", "payload.a", "correlation_id", "0",
        ])
        .prop_map(str::to_owned),
        1 => any::<String>(),
    ]
}
