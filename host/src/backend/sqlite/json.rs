//! History-query conditions on JSON paths, in SQLite's JSON functions.

use serde_json::Value;

use crate::backend::sql::Builder;
use crate::backend::sql::query::{Bind, lineage_key, number, range_op};
use crate::model::Condition;

/// SQLite: `json_type(doc, path)` tells the JSON type (NULL when absent,
/// `'null'` for a JSON null); `json_extract` gives the SQL value.
pub(super) fn condition(b: &mut Builder, doc: &str, path: &[String], condition: &Condition) {
    // Lineage keys use a literal path so the expression indexes apply; the
    // literal comes from the fixed list, never from input.
    let lineage = lineage_key(doc, path);
    let json_path = {
        let mut p = String::from("$");
        for segment in path {
            p.push_str(".\"");
            p.push_str(segment);
            p.push('"');
        }
        p
    };
    let call = |b: &mut Builder, func: &str| {
        b.push(func).push("(").push(doc).push(", ");
        match lineage {
            Some(key) => {
                b.push("'$.").push(key).push("'");
            }
            None => {
                b.bind(Bind::Text(json_path.clone()));
            }
        }
        b.push(")");
    };
    let eq = |b: &mut Builder, v: &Value| match v {
        Value::Null => {
            call(b, "json_type");
            b.push(" = 'null'");
        }
        Value::Bool(flag) => {
            call(b, "json_type");
            b.push(if *flag { " = 'true'" } else { " = 'false'" });
        }
        Value::Number(n) => {
            call(b, "json_type");
            b.push(" IN ('integer', 'real') AND ");
            call(b, "json_extract");
            b.push(" = ").bind(number(n));
        }
        Value::String(s) => {
            call(b, "json_extract");
            b.push(" = ").bind(Bind::Text(s.clone())).push(" AND ");
            call(b, "json_type");
            b.push(" = 'text'");
        }
        Value::Array(_) | Value::Object(_) => {
            // Stored JSON is written with sorted keys, so equal values have
            // equal text.
            call(b, "json_type");
            b.push(" IN ('array', 'object') AND ");
            call(b, "json_extract");
            b.push(" = ").bind(Bind::Text(v.to_string()));
        }
    };
    match condition {
        Condition::Eq(v) => eq(b, v),
        Condition::In(options) => {
            if options.is_empty() {
                b.push("1 = 0");
            }
            for (i, v) in options.iter().enumerate() {
                if i > 0 {
                    b.push(" OR ");
                }
                b.push("(");
                eq(b, v);
                b.push(")");
            }
        }
        Condition::Range(op, Value::Number(n)) => {
            call(b, "json_type");
            b.push(" IN ('integer', 'real') AND ");
            call(b, "json_extract");
            b.push(range_op(*op)).bind(number(n));
        }
        Condition::Range(op, Value::String(s)) => {
            call(b, "json_type");
            b.push(" = 'text' AND ");
            call(b, "json_extract");
            b.push(range_op(*op)).bind(Bind::Text(s.clone()));
        }
        Condition::Range(..) => {
            b.push("1 = 0");
        }
        Condition::Exists(present) => {
            call(b, "json_type");
            b.push(if *present { " IS NOT NULL" } else { " IS NULL" });
        }
    }
}
