//! History-query conditions on JSON paths, in PostgreSQL's jsonb operators.

use serde_json::Value;

use crate::sql::Builder;
use crate::sql::query::{Bind, lineage_key, range_op};
use rheo_core::model::Condition;

/// PostgreSQL: `doc #> path` is the jsonb value (SQL NULL when absent).
/// jsonb equality compares numbers by value and objects by content.
pub(super) fn condition(b: &mut Builder, doc: &str, path: &[String], condition: &Condition) {
    // Lineage keys use the literal expression of their index; the literal
    // comes from the fixed list, never from input.
    let lineage = lineage_key(doc, path);
    let value = |b: &mut Builder| match lineage {
        Some(key) => {
            b.push("(metadata -> '").push(key).push("')");
        }
        None => {
            b.push("(")
                .push(doc)
                .push(" #> ")
                .bind(Bind::TextArray(path.to_vec()))
                .push("::text[])");
        }
    };
    match condition {
        Condition::Eq(v) => {
            value(b);
            b.push(" = ")
                .bind(Bind::Text(v.to_string()))
                .push("::jsonb");
        }
        Condition::In(options) => {
            value(b);
            b.push(" = ANY(")
                .bind(Bind::TextArray(
                    options.iter().map(Value::to_string).collect(),
                ))
                .push("::text[]::jsonb[])");
        }
        Condition::Range(op, v @ Value::Number(_)) => {
            b.push("jsonb_typeof(");
            value(b);
            b.push(") = 'number' AND ");
            value(b);
            b.push(range_op(*op))
                .bind(Bind::Text(v.to_string()))
                .push("::jsonb");
        }
        Condition::Range(op, Value::String(s)) => {
            b.push("jsonb_typeof(");
            value(b);
            b.push(") = 'string' AND (");
            value(b);
            b.push(" #>> '{}') COLLATE \"C\"")
                .push(range_op(*op))
                .bind(Bind::Text(s.clone()))
                .push(" COLLATE \"C\"");
        }
        Condition::Range(..) => {
            b.push("1 = 0");
        }
        Condition::Exists(present) => {
            value(b);
            b.push(if *present { " IS NOT NULL" } else { " IS NULL" });
        }
    }
}
