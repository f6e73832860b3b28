//! History queries as SQL.

use serde_json::Value;

use super::{Bind, Builder, Dialect};
use crate::model::{
    Condition, Direction, EventField, FieldRef, Filter, LINEAGE_KEYS, OrderField, Query, RangeOp,
    StreamName, Timestamp,
};

/// The columns every event-returning statement selects, in this order.
pub(crate) const EVENT_COLUMNS: &str = "partition, sequence, id, key, type, ts, payload, metadata";

/// `SELECT` of the events `query` matches on `stream`, ordered as the query
/// asks. With `paged`, the cursor applies and the limit is bound; without,
/// every match is returned (replay by query).
pub(crate) fn events_query(
    dialect: Dialect,
    stream: &StreamName,
    query: &Query,
    paged: bool,
) -> Builder {
    let mut b = Builder::new(dialect);
    b.push("SELECT ")
        .push(EVENT_COLUMNS)
        .push(" FROM rheo_events WHERE stream = ")
        .bind(Bind::Text(stream.as_str().to_owned()));
    if let Some(from) = query.from {
        b.push(" AND ts >= ").bind(Bind::Time(from));
    }
    if let Some(to) = query.to {
        b.push(" AND ts <= ").bind(Bind::Time(to));
    }
    if let Some(after) = query.after_sequence {
        b.push(" AND sequence > ").bind(int(after));
    }
    if let Some(until) = query.until_sequence {
        b.push(" AND sequence <= ").bind(int(until));
    }
    for filter in &query.filters {
        b.push(" AND (");
        push_filter(&mut b, filter);
        b.push(")");
    }
    if paged && let Some(cursor) = &query.cursor {
        push_cursor(&mut b, query, cursor);
    }
    b.push(match (query.order.field, query.order.dir) {
        (OrderField::Sequence, Direction::Asc) => " ORDER BY sequence ASC, partition ASC",
        (OrderField::Sequence, Direction::Desc) => " ORDER BY sequence DESC, partition ASC",
        (OrderField::Timestamp, Direction::Asc) => " ORDER BY ts ASC, partition ASC, sequence ASC",
        (OrderField::Timestamp, Direction::Desc) => {
            " ORDER BY ts DESC, partition ASC, sequence DESC"
        }
    });
    if paged {
        b.push(" LIMIT ").bind(Bind::Int(i64::from(query.limit)));
    }
    b
}

fn int(n: u64) -> Bind {
    Bind::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// `(partition = p AND key > position) OR … OR partition NOT IN (…)`.
fn push_cursor(b: &mut Builder, query: &Query, cursor: &crate::model::QueryCursor) {
    let op = match query.order.dir {
        Direction::Asc => " > ",
        Direction::Desc => " < ",
    };
    b.push(" AND (");
    for (i, (partition, pos)) in cursor.positions.iter().enumerate() {
        if i > 0 {
            b.push(" OR ");
        }
        b.push("(partition = ")
            .bind(Bind::Int(i64::from(*partition)));
        match query.order.field {
            OrderField::Sequence => {
                b.push(" AND sequence").push(op).bind(int(pos.sequence));
            }
            OrderField::Timestamp => {
                b.push(" AND (ts, sequence)")
                    .push(op)
                    .push("(")
                    .bind(Bind::Time(Timestamp::from_millis(pos.timestamp)))
                    .push(", ")
                    .bind(int(pos.sequence))
                    .push(")");
            }
        }
        b.push(")");
    }
    if !cursor.positions.is_empty() {
        b.push(" OR ");
    }
    b.push("partition NOT IN (");
    if cursor.positions.is_empty() {
        b.push("-1");
    }
    for (i, partition) in cursor.positions.keys().enumerate() {
        if i > 0 {
            b.push(", ");
        }
        b.bind(Bind::Int(i64::from(*partition)));
    }
    b.push("))");
}

fn push_filter(b: &mut Builder, filter: &Filter) {
    match &filter.field {
        FieldRef::Event(EventField::Partition) => push_partition(b, &filter.condition),
        FieldRef::Event(field) => {
            let column = match field {
                EventField::Id => "id",
                EventField::Type => "type",
                EventField::Key => "key",
                EventField::Partition => unreachable!("handled above"),
            };
            push_text_column(b, column, &filter.condition);
        }
        FieldRef::Payload(path) => push_json(b, "payload", path, &filter.condition),
        FieldRef::Metadata(path) => push_json(b, "metadata", path, &filter.condition),
    }
}

/// A text column (`id`, `type`, `key`): only strings can match.
fn push_text_column(b: &mut Builder, column: &str, condition: &Condition) {
    let collate = match b.dialect {
        Dialect::Sqlite => "",
        Dialect::Postgres => " COLLATE \"C\"",
    };
    match condition {
        Condition::Eq(Value::String(s)) => {
            b.push(column).push(" = ").bind(Bind::Text(s.clone()));
        }
        Condition::In(options) => {
            let strings: Vec<&String> = options.iter().filter_map(Value::as_str_ref).collect();
            if strings.is_empty() {
                b.push("1 = 0");
            }
            for (i, s) in strings.into_iter().enumerate() {
                if i > 0 {
                    b.push(" OR ");
                }
                b.push(column).push(" = ").bind(Bind::Text(s.clone()));
            }
        }
        Condition::Range(op, Value::String(s)) => {
            b.push(column)
                .push(collate)
                .push(range_op(*op))
                .bind(Bind::Text(s.clone()));
            if b.dialect == Dialect::Postgres {
                // Compare bytes, as every backend does, not the database's collation.
                b.push(" COLLATE \"C\"");
            }
        }
        Condition::Exists(true) => {
            b.push(column).push(" IS NOT NULL");
        }
        Condition::Exists(false) => {
            b.push(column).push(" IS NULL");
        }
        Condition::Eq(_) | Condition::Range(..) => {
            b.push("1 = 0");
        }
    }
}

/// `partition`: only numbers with an integral value can match.
fn push_partition(b: &mut Builder, condition: &Condition) {
    let integral = |v: &Value| -> Option<i64> {
        let f = v.as_f64()?;
        (f.fract() == 0.0 && f >= 0.0 && f <= f64::from(u32::MAX)).then_some(f as i64)
    };
    match condition {
        Condition::Eq(v) => match integral(v) {
            Some(p) => {
                b.push("partition = ").bind(Bind::Int(p));
            }
            None => {
                b.push("1 = 0");
            }
        },
        Condition::In(options) => {
            let parts: Vec<i64> = options.iter().filter_map(integral).collect();
            if parts.is_empty() {
                b.push("1 = 0");
            }
            for (i, p) in parts.into_iter().enumerate() {
                if i > 0 {
                    b.push(" OR ");
                }
                b.push("partition = ").bind(Bind::Int(p));
            }
        }
        Condition::Range(op, v) if v.is_number() => {
            b.push("partition")
                .push(range_op(*op))
                .bind(Bind::Float(v.as_f64().unwrap_or(0.0)));
        }
        Condition::Range(..) | Condition::Exists(false) => {
            b.push("1 = 0");
        }
        Condition::Exists(true) => {
            b.push("1 = 1");
        }
    }
}

fn range_op(op: RangeOp) -> &'static str {
    match op {
        RangeOp::Gt => " > ",
        RangeOp::Gte => " >= ",
        RangeOp::Lt => " < ",
        RangeOp::Lte => " <= ",
    }
}

/// The lineage key a metadata path names, if it is exactly one.
fn lineage_key(doc: &str, path: &[String]) -> Option<&'static str> {
    match path {
        [key] if doc == "metadata" => LINEAGE_KEYS.iter().copied().find(|k| k == key),
        _ => None,
    }
}

/// The number bound for a JSON number.
fn number(v: &serde_json::Number) -> Bind {
    match v.as_i64() {
        Some(i) => Bind::Int(i),
        None => Bind::Float(v.as_f64().unwrap_or(f64::NAN)),
    }
}

/// A JSON path inside `payload` or `metadata`.
fn push_json(b: &mut Builder, doc: &str, path: &[String], condition: &Condition) {
    match b.dialect {
        Dialect::Postgres => push_json_pg(b, doc, path, condition),
        Dialect::Sqlite => push_json_sqlite(b, doc, path, condition),
    }
}

/// PostgreSQL: `doc #> path` is the jsonb value (SQL NULL when absent).
/// jsonb equality compares numbers by value and objects by content.
fn push_json_pg(b: &mut Builder, doc: &str, path: &[String], condition: &Condition) {
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
                .bind(Bind::Json(v.to_string()))
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
                .bind(Bind::Json(v.to_string()))
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

/// SQLite: `json_type(doc, path)` tells the JSON type (NULL when absent,
/// `'null'` for a JSON null); `json_extract` gives the SQL value.
fn push_json_sqlite(b: &mut Builder, doc: &str, path: &[String], condition: &Condition) {
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

trait AsStrRef {
    fn as_str_ref(&self) -> Option<&String>;
}

impl AsStrRef for Value {
    fn as_str_ref(&self) -> Option<&String> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::parse_where;

    fn build(dialect: Dialect, filter: Value) -> Builder {
        let query = Query {
            filters: parse_where(&filter).unwrap(),
            ..Query::default()
        };
        events_query(dialect, &StreamName::parse("s").unwrap(), &query, true)
    }

    #[test]
    fn values_are_always_bound_never_inlined() {
        let evil = "x'; DROP TABLE rheo_events; --";
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            let b = build(
                dialect,
                json!({ "type": evil, "payload.a": evil, "key": {"$gt": evil} }),
            );
            assert!(!b.sql.contains("DROP"), "{}", b.sql);
            assert!(b.binds.contains(&Bind::Text(evil.into())));
        }
    }

    #[test]
    fn postgres_placeholders_are_numbered_in_bind_order() {
        let b = build(Dialect::Postgres, json!({"type": "t", "key": "k"}));
        assert_eq!(b.binds.len(), 4, "stream, type, key, limit");
        assert!(b.sql.contains("$1") && b.sql.contains("$4") && !b.sql.contains("$5"));
        assert!(!b.sql.contains('?'));
    }

    #[test]
    fn lineage_keys_use_the_indexed_expression_on_sqlite() {
        let b = build(Dialect::Sqlite, json!({"correlation_id": "c"}));
        assert!(
            b.sql.contains("json_extract(metadata, '$.correlation_id')"),
            "{}",
            b.sql
        );
        let b = build(Dialect::Sqlite, json!({"payload.a.b": 1}));
        assert!(b.binds.contains(&Bind::Text("$.\"a\".\"b\"".into())));
    }
}
