//! JSON to BSON, only where the conversion is exact.
//!
//! An event's payload and metadata are stored as BSON documents so that
//! queries can look inside them, but only when BSON holds them without
//! change: numbers that BSON would round or clamp (integers past `i64`,
//! decimals whose text a double does not print back to), and object keys
//! MongoDB reads as paths or operators, would make MongoDB compare other
//! values than Rheo does. Such an event keeps only its JSON text (`body`)
//! and is marked `raw`; query filters always include raw events and Rheo
//! checks them itself (see `query.rs`). The event is always decoded from its
//! `body`, so the BSON copy is never read back, only searched: numbers keep
//! their exact text (`docs/log.md#events`) whatever happens here.

use mongodb::bson::{Bson, Document};
use serde_json::{Number, Value};

use rheo_core::model::JsonObject;

/// The most nested objects and arrays a converted value may hold. MongoDB
/// refuses documents nested more than 100 levels deep; the event document
/// around a payload adds a level, and this leaves ample room.
const MAX_DEPTH: usize = 64;

/// BSON for a JSON value when it converts exactly, else `None`.
///
/// Exact means: every number is an integer that fits `i64` (always stored as
/// Int64) or a decimal whose `f64` prints back, in serde_json's own
/// formatting, to the very text of the JSON number (so `0.1` and `1.5`
/// convert, `1e2`, `0.10` and `1.00000000000000000001` do not); every object
/// key is non-empty, free of `.` and NUL and does not start with `$`; and
/// objects and arrays nest at most [`MAX_DEPTH`] levels.
pub(super) fn exact(value: &Value) -> Option<Bson> {
    convert(value, 0)
}

/// A payload or metadata object as a BSON document, or `None` when not exact.
pub(super) fn exact_doc(object: &JsonObject) -> Option<Document> {
    object_doc(object, 0)
}

fn convert(value: &Value, depth: usize) -> Option<Bson> {
    Some(match value {
        Value::Null => Bson::Null,
        Value::Bool(b) => Bson::Boolean(*b),
        Value::String(s) => Bson::String(s.clone()),
        Value::Number(n) => number(n)?,
        Value::Array(items) => {
            let depth = nested(depth)?;
            Bson::Array(
                items
                    .iter()
                    .map(|item| convert(item, depth))
                    .collect::<Option<_>>()?,
            )
        }
        Value::Object(object) => Bson::Document(object_doc(object, depth)?),
    })
}

fn object_doc(object: &JsonObject, depth: usize) -> Option<Document> {
    let depth = nested(depth)?;
    let mut doc = Document::new();
    for (key, value) in object {
        if !plain_key(key) {
            return None;
        }
        doc.insert(key.clone(), convert(value, depth)?);
    }
    Some(doc)
}

/// One level deeper, or `None` past [`MAX_DEPTH`].
fn nested(depth: usize) -> Option<usize> {
    (depth < MAX_DEPTH).then_some(depth + 1)
}

/// A key MongoDB stores and matches as just that name.
pub(super) fn plain_key(key: &str) -> bool {
    !key.is_empty() && !key.starts_with('$') && !key.contains(['.', '\0'])
}

fn number(n: &Number) -> Option<Bson> {
    if let Some(i) = n.as_i64() {
        return Some(Bson::Int64(i));
    }
    let f = n.as_f64()?;
    // serde_json keeps the number's text (arbitrary_precision): the double
    // is exact when it prints back to that very text.
    let printed = Number::from_f64(f)?;
    (printed.to_string() == n.to_string()).then_some(Bson::Double(f))
}

#[cfg(test)]
mod tests {
    use mongodb::bson::{Bson, bson, doc};
    use serde_json::{Value, json};

    use super::{MAX_DEPTH, exact, exact_doc};

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).expect("test JSON parses")
    }

    #[test]
    fn scalars_convert_to_their_bson() {
        assert_eq!(exact(&json!(null)), Some(Bson::Null));
        assert_eq!(exact(&json!(true)), Some(Bson::Boolean(true)));
        assert_eq!(exact(&json!("a\0b")), Some(Bson::String("a\0b".into())));
        assert_eq!(exact(&json!("")), Some(Bson::String(String::new())));
    }

    #[test]
    fn integers_that_fit_i64_are_int64() {
        for (text, want) in [
            ("0", 0),
            ("-0", 0),
            ("7", 7),
            ("-7", -7),
            ("9007199254740993", 9_007_199_254_740_993),
            ("9223372036854775807", i64::MAX),
            ("-9223372036854775808", i64::MIN),
        ] {
            assert_eq!(exact(&parse(text)), Some(Bson::Int64(want)), "{text}");
        }
    }

    #[test]
    fn integers_past_i64_are_not_exact() {
        for text in [
            "9223372036854775808",
            "18446744073709551615",
            "18446744073709551617",
            "-9223372036854775809",
            "123456789012345678901234567890",
        ] {
            assert_eq!(exact(&parse(text)), None, "{text}");
        }
    }

    #[test]
    fn decimals_are_exact_only_when_they_print_back() {
        for (text, want) in [
            ("1.5", 1.5),
            ("0.1", 0.1),
            ("-2.25", -2.25),
            ("100.0", 100.0),
            ("-0.0", -0.0),
        ] {
            assert_eq!(exact(&parse(text)), Some(Bson::Double(want)), "{text}");
        }
        // The same values in other digits, and values a double rounds.
        for text in [
            "1e2",
            "1E2",
            "0.10",
            "1.50",
            "1.00000000000000000001",
            "0.30000000000000000001",
            "1e400",
            "-1e400",
        ] {
            assert_eq!(exact(&parse(text)), None, "{text}");
        }
    }

    #[test]
    fn keys_that_mongodb_reads_as_paths_or_operators_are_not_exact() {
        for key in ["a.b", "$x", "a\0b", "", "."] {
            let mut object = serde_json::Map::new();
            object.insert(key.to_owned(), json!(1));
            assert_eq!(exact_doc(&object), None, "{key:?}");
            assert_eq!(
                exact(&json!({ "ok": [{ "deep": Value::Object(object) }] })),
                None
            );
        }
        let object = json!({"a$": 1, "x-y z": 2, "é": 3, "0": 4});
        assert_eq!(
            exact(&object),
            Some(bson!({"a$": 1_i64, "x-y z": 2_i64, "é": 3_i64, "0": 4_i64}))
        );
    }

    #[test]
    fn nested_arrays_and_objects_convert() {
        let value = parse(r#"{"z": [1, [2.5, {"b": null}], {"c": "d"}], "a": {"e": [], "f": {}}}"#);
        let Value::Object(object) = &value else {
            unreachable!()
        };
        let want = doc! {
            "z": [1_i64, [2.5, {"b": Bson::Null}], {"c": "d"}],
            "a": {"e": [], "f": {}},
        };
        assert_eq!(exact_doc(object), Some(want.clone()));
        assert_eq!(exact(&value), Some(Bson::Document(want)));
        // One inexact number anywhere makes the whole value inexact.
        assert_eq!(exact(&parse(r#"{"a": [1, {"b": [1e2]}]}"#)), None);
    }

    #[test]
    fn nesting_is_bounded() {
        let wrap = |levels: usize| {
            let mut value = json!(1);
            for _ in 0..levels {
                value = json!([value]);
            }
            value
        };
        assert!(exact(&wrap(MAX_DEPTH)).is_some());
        assert_eq!(exact(&wrap(MAX_DEPTH + 1)), None);
        let mut object = serde_json::Map::new();
        object.insert("a".into(), wrap(MAX_DEPTH - 1));
        assert!(exact_doc(&object).is_some());
        object.insert("a".into(), wrap(MAX_DEPTH));
        assert_eq!(exact_doc(&object), None);
    }
}
