//! History queries as SQL (`docs/log.md#reading-and-querying`): filters,
//! bounds, cursors and ordering, with every value a bound parameter. The
//! JSON-path conditions are the dialect's ([`Dialect::json_condition`]).

use std::borrow::Cow;
use std::fmt::Write as _;

use serde_json::Value;

use super::{Arg, Dialect};
use rheo_core::model::{
    Condition, Direction, EventField, FieldRef, Filter, LINEAGE_KEYS, OrderField, Query, RangeOp,
    StreamName, Timestamp,
};

/// The columns every event-returning statement selects, in this order.
pub(crate) const EVENT_COLUMNS: &str = "partition, sequence, id, key, type, ts, payload, metadata";

/// A statement under construction: SQL text plus its parameters in order.
#[derive(Debug)]
pub(crate) struct Builder {
    pub(crate) sql: String,
    pub(crate) binds: Vec<Arg<'static>>,
    placeholder: char,
    byte_collation: &'static str,
    json_condition: fn(&mut Builder, &str, &[String], &Condition),
}

/// A value to bind.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bind {
    Text(String),
    Int(i64),
    Float(f64),
    Time(Timestamp),
    /// A text array (a list parameter): PostgreSQL's JSON paths.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    TextArray(Vec<String>),
}

impl Builder {
    pub(crate) fn new<D: Dialect>() -> Self {
        Self {
            sql: String::with_capacity(256),
            binds: Vec::new(),
            placeholder: D::PLACEHOLDER,
            byte_collation: D::BYTE_COLLATION,
            json_condition: D::JSON_CONDITION,
        }
    }

    /// Appends fixed SQL text (never user input).
    pub(crate) fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    /// Appends a placeholder for `value`.
    pub(crate) fn bind(&mut self, value: Bind) -> &mut Self {
        self.binds.push(match value {
            Bind::Text(s) => Arg::Text(Cow::Owned(s)),
            Bind::Int(i) => Arg::I64(i),
            Bind::Float(f) => Arg::F64(f),
            Bind::Time(t) => Arg::Time(t),
            Bind::TextArray(v) => Arg::List(super::Column::Text(v)),
        });
        let _ = write!(self.sql, "{}{}", self.placeholder, self.binds.len());
        self
    }
}

/// `SELECT` of the events `query` matches on `stream`, ordered as the query
/// asks. With `paged`, the cursor applies and the limit is bound; without,
/// every match is returned (replay by query).
pub(crate) fn events_query<D: Dialect>(stream: &StreamName, query: &Query, paged: bool) -> Builder {
    let mut b = Builder::new::<D>();
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
fn push_cursor(b: &mut Builder, query: &Query, cursor: &rheo_core::model::QueryCursor) {
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
        FieldRef::Payload(path) => (b.json_condition)(b, "payload", path, &filter.condition),
        FieldRef::Metadata(path) => (b.json_condition)(b, "metadata", path, &filter.condition),
    }
}

/// A text column (`id`, `type`, `key`): only strings can match.
fn push_text_column(b: &mut Builder, column: &str, condition: &Condition) {
    let collate = b.byte_collation;
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
                .bind(Bind::Text(s.clone()))
                // Compare bytes, as every backend does, not the database's collation.
                .push(collate);
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

pub(crate) fn range_op(op: RangeOp) -> &'static str {
    match op {
        RangeOp::Gt => " > ",
        RangeOp::Gte => " >= ",
        RangeOp::Lt => " < ",
        RangeOp::Lte => " <= ",
    }
}

/// The lineage key a metadata path names, if it is exactly one.
pub(crate) fn lineage_key(doc: &str, path: &[String]) -> Option<&'static str> {
    match path {
        [key] if doc == "metadata" => LINEAGE_KEYS.iter().copied().find(|k| k == key),
        _ => None,
    }
}

/// The parameter for a JSON number (SQLite's JSON conditions).
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) fn number(v: &serde_json::Number) -> Bind {
    match v.as_i64() {
        Some(i) => Bind::Int(i),
        None => Bind::Float(v.as_f64().unwrap_or(f64::NAN)),
    }
}

pub(crate) trait AsStrRef {
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
mod tests;
