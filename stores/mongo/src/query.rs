//! History queries as MongoDB filters and sorts
//! (`docs/log.md#reading-and-querying`).
//!
//! The filter selects a superset of what [`Query::matches`] accepts, never
//! less: the caller checks every event it reads with `Query::matches`, so an
//! extra event costs a read, while a missed one would be a wrong answer.
//! Wherever MongoDB's matching differs from Rheo's the condition is dropped,
//! which only widens the selection:
//!
//! * Rheo's JSON equality is exact (`docs/log.md#operators`): `{"f": 1}`
//!   matches the number 1, not an array holding it, and objects compare
//!   regardless of key order. MongoDB's `{f: 1}` also matches arrays holding
//!   1 (an extra match, so kept), but its object equality depends on key
//!   order, so equality with an array or an object is dropped (`$in` too).
//! * MongoDB walks paths through arrays (`a.b` finds `b` in the objects of
//!   an array `a`); Rheo walks objects only. Positive conditions just gain
//!   matches, but `$exists: false` would lose some, so it is dropped.
//! * `{f: null}` also matches a missing field in MongoDB: an extra match.
//! * Rheo compares an integer with a decimal as doubles, MongoDB compares
//!   them exactly; the two agree unless a number is at least 2^53 in size,
//!   so a condition on such a number is dropped.
//! * Events whose payload or metadata does not convert to BSON exactly are
//!   stored `raw: true` without them (`json.rs`): every payload or metadata
//!   condition lets raw events through.
//!
//! User input never becomes an operator or a field name MongoDB would read
//! as one: field paths come from [`FieldRef`] and a condition on a segment
//! that is empty, starts with `$` or holds `.` or NUL is dropped (an exact
//! payload cannot hold such a key anyway), and values are BSON built by
//! [`json::exact`], scalars only.

use mongodb::bson::{Bson, Document, doc};
use serde_json::Value;

use super::json;
use rheo_core::model::{
    Condition, Direction, EventField, FieldRef, Filter, OrderBy, OrderField, Position, Query,
    QueryCursor, RangeOp, StreamName,
};

/// 2^53: below it in size, every integer is a double exactly, so Rheo's
/// comparisons (as doubles when one side is a decimal) and MongoDB's (exact)
/// agree.
const EXACT_DOUBLE_LIMIT: f64 = 9_007_199_254_740_992.0;

/// The MongoDB filter selecting events of `stream` for `query`: its time
/// bounds (inclusive, on `ts`), sequence bounds (`after_sequence`
/// exclusive, `until_sequence` inclusive, on `q`), the filters it can
/// express and, when `with_cursor`, its cursor. A superset of the events
/// `query.matches` accepts (see the module notes).
pub(super) fn filter(stream: &StreamName, query: &Query, with_cursor: bool) -> Document {
    let mut all = vec![doc! { "s": stream.as_str() }];
    if let Some(from) = query.from {
        all.push(doc! { "ts": { "$gte": from.as_millis() } });
    }
    if let Some(to) = query.to {
        all.push(doc! { "ts": { "$lte": to.as_millis() } });
    }
    if let Some(after) = query.after_sequence {
        all.push(doc! { "q": { "$gt": sequence(after) } });
    }
    if let Some(until) = query.until_sequence {
        all.push(doc! { "q": { "$lte": sequence(until) } });
    }
    all.extend(query.filters.iter().filter_map(condition));
    if with_cursor && let Some(cursor) = &query.cursor {
        all.push(beyond(cursor));
    }
    doc! { "$and": all }
}

/// The sort giving exactly [`OrderBy::compare`]'s order: the field in the
/// page direction, then partition ascending, then sequence in the page
/// direction (under sequence order that last key never decides).
pub(super) fn sort(order: OrderBy) -> Document {
    let dir = match order.dir {
        Direction::Asc => 1,
        Direction::Desc => -1,
    };
    match order.field {
        OrderField::Sequence => doc! { "q": dir, "p": 1 },
        OrderField::Timestamp => doc! { "ts": dir, "p": 1, "q": dir },
    }
}

/// A sequence as stored (Int64). Stored sequences are at most
/// `MAX_SEQUENCE`, so holding a larger bound at `i64::MAX` selects the same.
fn sequence(sequence: u64) -> i64 {
    i64::try_from(sequence).unwrap_or(i64::MAX)
}

/// One filter as a MongoDB condition, or `None` when it is dropped.
fn condition(filter: &Filter) -> Option<Document> {
    let (path, in_body) = match &filter.field {
        FieldRef::Event(field) => (event_field(*field).to_owned(), false),
        FieldRef::Payload(segments) => (path("payload", segments)?, true),
        FieldRef::Metadata(segments) => (path("metadata", segments)?, true),
    };
    let test = match &filter.condition {
        Condition::Eq(value) => scalar(value)?,
        Condition::In(options) => {
            let options = options.iter().map(scalar).collect::<Option<Vec<_>>>()?;
            Bson::Document(doc! { "$in": options })
        }
        Condition::Range(op, bound @ (Value::Number(_) | Value::String(_))) => {
            Bson::Document(doc! { range_operator(*op): scalar(bound)? })
        }
        Condition::Range(..) | Condition::Exists(false) => return None,
        Condition::Exists(true) => Bson::Document(doc! { "$exists": true }),
    };
    let mut test_doc = Document::new();
    test_doc.insert(path, test);
    Some(if in_body {
        doc! { "$or": [{ "raw": true }, test_doc] }
    } else {
        test_doc
    })
}

/// Where an event field is stored.
fn event_field(field: EventField) -> &'static str {
    match field {
        EventField::Id => "id",
        EventField::Type => "type",
        EventField::Key => "key",
        EventField::Partition => "p",
    }
}

/// `root.a.b` for the segments `[a, b]`, or `None` when a segment is not a
/// plain key (MongoDB would read it as a path, an operator or nothing).
fn path(root: &str, segments: &[String]) -> Option<String> {
    if !segments.iter().all(|s| json::plain_key(s)) {
        return None;
    }
    Some(format!("{root}.{}", segments.join(".")))
}

fn range_operator(op: RangeOp) -> &'static str {
    match op {
        RangeOp::Gt => "$gt",
        RangeOp::Gte => "$gte",
        RangeOp::Lt => "$lt",
        RangeOp::Lte => "$lte",
    }
}

/// A scalar operand as BSON, or `None` when MongoDB would compare it
/// differently than Rheo: an array or object, a number that is not exact
/// in BSON, or one at least 2^53 in size.
fn scalar(value: &Value) -> Option<Bson> {
    match value {
        Value::Array(_) | Value::Object(_) => None,
        Value::Number(n) if !n.as_f64().is_some_and(|f| f.abs() < EXACT_DOUBLE_LIMIT) => None,
        _ => json::exact(value),
    }
}

/// The events beyond `cursor` ([`QueryCursor::admits`]): in each partition
/// it names, those after its position; in every other partition, all.
fn beyond(cursor: &QueryCursor) -> Document {
    let mut any: Vec<Document> = cursor
        .positions
        .iter()
        .map(|(&partition, &position)| {
            let mut after = doc! { "p": i64::from(partition) };
            after.extend(after_position(cursor.order, position));
            after
        })
        .collect();
    let seen: Vec<i64> = cursor.positions.keys().map(|&p| i64::from(p)).collect();
    any.push(doc! { "p": { "$nin": seen } });
    doc! { "$or": any }
}

/// Events of one partition after `position` in `order`
/// ([`OrderBy::is_after`]): their key (timestamp, sequence) compares past
/// it in the page direction. Under sequence order the key's timestamp is 0,
/// as a cursor writes it; a cursor saying otherwise was altered, and its
/// whole partition is selected (the caller's check decides).
fn after_position(order: OrderBy, position: Position) -> Document {
    let past = match order.dir {
        Direction::Asc => "$gt",
        Direction::Desc => "$lt",
    };
    let (ts, q) = (position.timestamp, sequence(position.sequence));
    match order.field {
        OrderField::Sequence if ts == 0 => doc! { "q": { past: q } },
        OrderField::Sequence => Document::new(),
        OrderField::Timestamp => doc! {
            "$or": [{ "ts": { past: ts } }, { "ts": ts, "q": { past: q } }],
        },
    }
}

#[cfg(test)]
mod tests;
