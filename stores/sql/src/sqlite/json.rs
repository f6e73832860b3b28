//! History-query conditions on JSON paths, in SQLite's JSON functions.

use serde_json::Value;

use crate::sql::Builder;
use crate::sql::query::{Bind, lineage_key, number, range_op};
use rheo_core::model::Condition;

/// A JSON value inside a document column: the column and the path to it.
struct At<'a> {
    doc: &'a str,
    /// A lineage key, written as a literal path so the expression indexes
    /// apply; the literal comes from the fixed list, never from input.
    lineage: Option<&'static str>,
    /// The JSON path (`$."a"."b"[0]`), bound as a parameter.
    path: String,
}

impl At<'_> {
    /// `func(doc, path)`.
    fn call(&self, b: &mut Builder, func: &str) {
        b.push(func).push("(").push(self.doc).push(", ");
        match self.lineage {
            Some(key) => {
                b.push("'$.").push(key).push("'");
            }
            None => {
                b.bind(Bind::Text(self.path.clone()));
            }
        }
        b.push(")");
    }

    /// The element `index` of this array.
    fn index(&self, index: usize) -> At<'_> {
        At {
            doc: self.doc,
            lineage: None,
            path: format!("{}[{index}]", self.path_text()),
        }
    }

    /// The member `key` of this object.
    fn member(&self, key: &str) -> At<'_> {
        At {
            doc: self.doc,
            lineage: None,
            path: format!("{}.\"{key}\"", self.path_text()),
        }
    }

    fn path_text(&self) -> String {
        match self.lineage {
            Some(key) => format!("$.\"{key}\""),
            None => self.path.clone(),
        }
    }
}

/// SQLite: `json_type(doc, path)` tells the JSON type (NULL when absent,
/// `'null'` for a JSON null); `json_extract` gives the SQL value.
pub(super) fn condition(b: &mut Builder, doc: &str, path: &[String], condition: &Condition) {
    let mut json_path = String::from("$");
    for segment in path {
        json_path.push_str(".\"");
        json_path.push_str(segment);
        json_path.push('"');
    }
    let at = At {
        doc,
        lineage: lineage_key(doc, path),
        path: json_path,
    };
    match condition {
        Condition::Eq(v) => eq(b, &at, v),
        Condition::In(options) => {
            if options.is_empty() {
                b.push("1 = 0");
            }
            for (i, v) in options.iter().enumerate() {
                if i > 0 {
                    b.push(" OR ");
                }
                b.push("(");
                eq(b, &at, v);
                b.push(")");
            }
        }
        Condition::Range(op, Value::Number(n)) => {
            at.call(b, "json_type");
            b.push(" IN ('integer', 'real') AND ");
            at.call(b, "json_extract");
            b.push(range_op(*op)).bind(number(n));
        }
        Condition::Range(op, Value::String(s)) => {
            at.call(b, "json_type");
            b.push(" = 'text' AND ");
            at.call(b, "json_extract");
            b.push(range_op(*op)).bind(Bind::Text(s.clone()));
        }
        Condition::Range(..) => {
            b.push("1 = 0");
        }
        Condition::Exists(present) => {
            at.call(b, "json_type");
            b.push(if *present { " IS NOT NULL" } else { " IS NULL" });
        }
    }
}

/// JSON equality at `at` (`docs/log.md#operators`): numbers by value, also
/// inside arrays and objects, which are compared element by element and
/// member by member (their text would tell `2` from `2.0`).
fn eq(b: &mut Builder, at: &At<'_>, v: &Value) {
    match v {
        Value::Null => {
            at.call(b, "json_type");
            b.push(" = 'null'");
        }
        Value::Bool(flag) => {
            at.call(b, "json_type");
            b.push(if *flag { " = 'true'" } else { " = 'false'" });
        }
        Value::Number(n) => {
            at.call(b, "json_type");
            b.push(" IN ('integer', 'real') AND ");
            at.call(b, "json_extract");
            b.push(" = ").bind(number(n));
        }
        Value::String(s) => {
            at.call(b, "json_extract");
            b.push(" = ").bind(Bind::Text(s.clone())).push(" AND ");
            at.call(b, "json_type");
            b.push(" = 'text'");
        }
        Value::Array(items) => {
            at.call(b, "json_type");
            b.push(" = 'array' AND ");
            at.call(b, "json_array_length");
            b.push(" = ")
                .bind(Bind::Int(i64::try_from(items.len()).unwrap_or(i64::MAX)));
            for (i, item) in items.iter().enumerate() {
                b.push(" AND ");
                eq(b, &at.index(i), item);
            }
        }
        // A key with a quote or backslash cannot be written in a path:
        // the object is compared as text (stored objects have sorted keys).
        Value::Object(members) if members.keys().any(|k| k.contains(['"', '\\'])) => {
            at.call(b, "json_type");
            b.push(" = 'object' AND ");
            at.call(b, "json_extract");
            b.push(" = ").bind(Bind::Text(v.to_string()));
        }
        Value::Object(members) => {
            at.call(b, "json_type");
            b.push(" = 'object' AND (SELECT count(*) FROM json_each(")
                .push(at.doc)
                .push(", ")
                .bind(Bind::Text(at.path_text()))
                .push(")) = ")
                .bind(Bind::Int(i64::try_from(members.len()).unwrap_or(i64::MAX)));
            for (key, member) in members {
                b.push(" AND ");
                eq(b, &at.member(key), member);
            }
        }
    }
}
