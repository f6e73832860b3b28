//! `-o yaml`: a server's JSON answer written as YAML 1.2 block style.
//!
//! Every JSON value has a YAML spelling, so no YAML library is needed:
//! maps become `key: value` lines, arrays `- item` lines, and a string is
//! written bare only when YAML would read it back as the same string,
//! else double-quoted with JSON's escapes (which YAML shares).

use serde_json::Value;

/// `value` as a YAML document (ending in a newline).
pub(crate) fn to_string(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => write_map(&mut out, map, 0),
        Value::Array(items) if !items.is_empty() => write_seq(&mut out, items, 0),
        scalar => {
            out.push_str(&inline(scalar));
            out.push('\n');
        }
    }
    out
}

fn write_map(out: &mut String, map: &serde_json::Map<String, Value>, indent: usize) {
    for (key, value) in map {
        out.push_str(&" ".repeat(indent));
        out.push_str(&string(key));
        out.push(':');
        write_value(out, value, indent);
    }
}

fn write_seq(out: &mut String, items: &[Value], indent: usize) {
    for item in items {
        out.push_str(&" ".repeat(indent));
        out.push('-');
        match item {
            // A map's first key goes on the dash's line, the rest below it.
            Value::Object(map) if !map.is_empty() => {
                let mut inner = String::new();
                write_map(&mut inner, map, indent + 2);
                out.push(' ');
                out.push_str(&inner[indent + 2..]);
            }
            other => write_value(out, other, indent),
        }
    }
}

/// What follows `key:` or `-`: a scalar on the same line, or a nested
/// block on the next ones.
fn write_value(out: &mut String, value: &Value, indent: usize) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            write_map(out, map, indent + 2);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            write_seq(out, items, indent + 2);
        }
        scalar => {
            out.push(' ');
            out.push_str(&inline(scalar));
            out.push('\n');
        }
    }
}

fn inline(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => string(s),
        Value::Array(_) => "[]".to_owned(),
        Value::Object(_) => "{}".to_owned(),
    }
}

/// A string bare when that reads back as the same string, else quoted.
fn string(text: &str) -> String {
    if plain(text) {
        text.to_owned()
    } else {
        Value::String(text.to_owned()).to_string()
    }
}

/// Whether `text` can be a plain YAML scalar that reads back as this
/// string: not empty, no leading or trailing space, nothing YAML gives a
/// meaning (indicators, `: `, ` #`), no leading digit, and not a word
/// YAML would read as another type.
fn plain(text: &str) -> bool {
    let Some(first) = text.chars().next() else {
        return false;
    };
    if text.trim() != text
        || "-?:,[]{}#&*!|>'\"%@`".contains(first)
        // Numbers, and times YAML 1.1 readers turn into timestamps.
        || first.is_ascii_digit()
        || text.contains(": ")
        || text.contains(" #")
        || text.ends_with(':')
        || text.chars().any(|c| c.is_control())
    {
        return false;
    }
    let lower = text.to_ascii_lowercase();
    let typed = matches!(
        lower.as_str(),
        "null" | "~" | "true" | "false" | "yes" | "no" | "on" | "off" | ".inf" | ".nan"
    ) || text.parse::<f64>().is_ok()
        || text.starts_with("0x")
        || text.starts_with("0o");
    !typed
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn maps_sequences_and_scalars_in_block_style() {
        let answer = json!({
            "stream": "orders",
            "lag": 3,
            "partitions": {"0": {"frontier": 2, "lag": 1}},
            "leases": [{"event_id": "o-1", "attempt": 1}, {"event_id": "o-2", "attempt": 2}],
            "tags": ["a", "b"],
            "empty": [],
            "none": null,
        });
        assert_eq!(
            to_string(&answer),
            // Keys in the order the answer holds them (serde_json's: sorted).
            "empty: []\nlag: 3\nleases:\n  - attempt: 1\n    event_id: o-1\n  \
             - attempt: 2\n    event_id: o-2\nnone: null\npartitions:\n  \"0\":\n    \
             frontier: 2\n    lag: 1\nstream: orders\ntags:\n  - a\n  - b\n"
        );
    }

    #[test]
    fn strings_yaml_would_read_otherwise_are_quoted() {
        for text in [
            "",
            "true",
            "No",
            "12",
            "1.5",
            "null",
            "- x",
            "a: b",
            "a #b",
            " x",
            "x:",
            "{}",
            "line\nbreak",
            "0x1F",
            "2026-12-06T18:00:00Z",
        ] {
            assert_eq!(string(text), json!(text).to_string(), "{text:?}");
        }
        for text in ["orders", "o-1", "a:b", "C#", "x y"] {
            assert_eq!(string(text), text);
        }
    }
}
