//! History queries: filters, bounds, ordering and opaque page cursors.
//!
//! A query never touches group state. Filters AND together. A filter names a
//! field — an event field (`type`, `key`, `partition`, `id`), a lineage key
//! (`correlation_id` … read from metadata), a nested path (`payload.a.b`,
//! `metadata.a.b`) or a bare name (a top-level payload key) — and a
//! condition: JSON equality, `$in`, `$gt`/`$gte`/`$lt`/`$lte` on numbers or
//! strings, or `$exists`.
//!
//! Pages are ordered by one field (sequence or timestamp, either direction);
//! ties are broken by partition ascending, then sequence. A cursor records,
//! per partition, the ordering key of the last event returned from that
//! partition. Within one partition the ordering key is strictly monotonic in
//! the page order, so "after the cursor position in each partition seen, and
//! anything in partitions not yet seen" is exactly the set of events not yet
//! returned: following cursors never skips or repeats, on any partition count.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

use super::{Event, LINEAGE_KEYS, Timestamp, ValidationError, validate_sequence};

/// Events per page when the caller gives no limit.
pub const DEFAULT_QUERY_LIMIT: u32 = 100;
/// Most events per page (also for `read`).
pub const MAX_QUERY_LIMIT: u32 = 1000;
/// Deepest nested path a filter may name.
pub const MAX_PATH_DEPTH: usize = 16;

/// An event field that filters address directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventField {
    /// `id`
    Id,
    /// `type`
    Type,
    /// `key`
    Key,
    /// `partition`
    Partition,
}

/// What a filter looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldRef {
    /// A field of the event itself.
    Event(EventField),
    /// A (nested) path inside the payload.
    Payload(Vec<String>),
    /// A (nested) path inside the metadata.
    Metadata(Vec<String>),
}

impl FieldRef {
    /// Resolves a filter name (`docs/log.md#filters`).
    pub fn parse(name: &str) -> Result<Self, ValidationError> {
        let field = format!("where.{name}");
        // Quotes and backslashes would need escaping in SQL JSON paths; no
        // sensible key needs them, so they are refused everywhere: in path
        // segments and in bare names.
        let quoted = |key: &str| -> Result<(), ValidationError> {
            if key.contains(['"', '\\']) {
                return Err(ValidationError::new(
                    &field,
                    "field names and path segments may not contain '\"' or '\\'",
                ));
            }
            Ok(())
        };
        let path = |rest: &str| -> Result<Vec<String>, ValidationError> {
            let parts: Vec<String> = rest.split('.').map(str::to_owned).collect();
            if parts.iter().any(String::is_empty) {
                return Err(ValidationError::new(&field, "path has an empty segment"));
            }
            parts.iter().try_for_each(|p| quoted(p))?;
            if parts.len() > MAX_PATH_DEPTH {
                return Err(ValidationError::new(
                    &field,
                    format!("paths are at most {MAX_PATH_DEPTH} segments deep"),
                ));
            }
            Ok(parts)
        };
        Ok(match name {
            "" => return Err(ValidationError::new("where", "empty field name")),
            "id" => FieldRef::Event(EventField::Id),
            "type" => FieldRef::Event(EventField::Type),
            "key" => FieldRef::Event(EventField::Key),
            "partition" => FieldRef::Event(EventField::Partition),
            lineage if LINEAGE_KEYS.contains(&lineage) => {
                FieldRef::Metadata(vec![lineage.to_owned()])
            }
            _ => {
                if let Some(rest) = name.strip_prefix("payload.") {
                    FieldRef::Payload(path(rest)?)
                } else if let Some(rest) = name.strip_prefix("metadata.") {
                    FieldRef::Metadata(path(rest)?)
                } else {
                    quoted(name)?;
                    FieldRef::Payload(vec![name.to_owned()])
                }
            }
        })
    }

    /// The value this field has in `event`, if present.
    pub fn extract<'a>(
        &self,
        event: &'a Event,
        scratch: &'a mut Option<Value>,
    ) -> Option<&'a Value> {
        match self {
            FieldRef::Event(EventField::Id) => {
                *scratch = Some(Value::String(event.id.as_str().to_owned()));
                scratch.as_ref()
            }
            FieldRef::Event(EventField::Type) => {
                *scratch = event.event_type.clone().map(Value::String);
                scratch.as_ref()
            }
            FieldRef::Event(EventField::Key) => {
                *scratch = event.key.clone().map(Value::String);
                scratch.as_ref()
            }
            FieldRef::Event(EventField::Partition) => {
                *scratch = Some(Value::from(event.partition));
                scratch.as_ref()
            }
            FieldRef::Payload(path) => walk(&event.payload, path),
            FieldRef::Metadata(path) => walk(&event.metadata, path),
        }
    }
}

fn walk<'a>(root: &'a serde_json::Map<String, Value>, path: &[String]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    let mut current = root.get(first)?;
    for segment in rest {
        current = current.as_object()?.get(segment)?;
    }
    Some(current)
}

/// A comparison operator for ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeOp {
    /// `$gt`
    Gt,
    /// `$gte`
    Gte,
    /// `$lt`
    Lt,
    /// `$lte`
    Lte,
}

/// What a filter requires of its field.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// JSON equality (numbers compare by value).
    Eq(Value),
    /// Equal to one of these.
    In(Vec<Value>),
    /// Ordered comparison with a number or a string.
    Range(RangeOp, Value),
    /// Present (any value, `null` included) or absent.
    Exists(bool),
}

impl Condition {
    /// Whether `value` (the field's value, `None` when absent) satisfies this.
    pub fn holds(&self, value: Option<&Value>) -> bool {
        match (self, value) {
            (Condition::Exists(want), v) => v.is_some() == *want,
            (_, None) => false,
            (Condition::Eq(expected), Some(v)) => json_eq(v, expected),
            (Condition::In(options), Some(v)) => options.iter().any(|o| json_eq(v, o)),
            (Condition::Range(op, bound), Some(v)) => match json_cmp(v, bound) {
                Some(ord) => match op {
                    RangeOp::Gt => ord == Ordering::Greater,
                    RangeOp::Gte => ord != Ordering::Less,
                    RangeOp::Lt => ord == Ordering::Less,
                    RangeOp::Lte => ord != Ordering::Greater,
                },
                None => false,
            },
        }
    }
}

/// One filter: a field and a condition on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    /// The field.
    pub field: FieldRef,
    /// The condition.
    pub condition: Condition,
}

impl Filter {
    /// Whether `event` passes.
    pub fn matches(&self, event: &Event) -> bool {
        let mut scratch = None;
        let value = self.field.extract(event, &mut scratch);
        self.condition.holds(value)
    }
}

/// Parses a `where` object into filters (ANDed).
pub fn parse_where(value: &Value) -> Result<Vec<Filter>, ValidationError> {
    let object = match value {
        Value::Null => return Ok(Vec::new()),
        Value::Object(o) => o,
        _ => return Err(ValidationError::new("where", "must be an object")),
    };
    let mut filters = Vec::new();
    for (name, spec) in object {
        let field = FieldRef::parse(name)?;
        let at = format!("where.{name}");
        match spec {
            Value::Object(ops) if ops.keys().any(|k| k.starts_with('$')) => {
                if ops.keys().any(|k| !k.starts_with('$')) {
                    return Err(ValidationError::new(
                        &at,
                        "mixes operators ($…) with plain keys; use {\"$eq\"…} style or a plain object, not both",
                    ));
                }
                for (op, operand) in ops {
                    filters.push(Filter {
                        field: field.clone(),
                        condition: parse_operator(&at, op, operand)?,
                    });
                }
            }
            other => filters.push(Filter {
                field: field.clone(),
                condition: Condition::Eq(other.clone()),
            }),
        }
    }
    Ok(filters)
}

fn parse_operator(at: &str, op: &str, operand: &Value) -> Result<Condition, ValidationError> {
    let range = |op| match operand {
        Value::Number(_) | Value::String(_) => Ok(Condition::Range(op, operand.clone())),
        _ => Err(ValidationError::new(
            at,
            "range operators compare with a number or a string",
        )),
    };
    match op {
        "$eq" => Ok(Condition::Eq(operand.clone())),
        "$in" => match operand {
            Value::Array(items) => Ok(Condition::In(items.clone())),
            _ => Err(ValidationError::new(at, "$in takes an array")),
        },
        "$gt" => range(RangeOp::Gt),
        "$gte" => range(RangeOp::Gte),
        "$lt" => range(RangeOp::Lt),
        "$lte" => range(RangeOp::Lte),
        "$exists" => match operand {
            Value::Bool(b) => Ok(Condition::Exists(*b)),
            _ => Err(ValidationError::new(at, "$exists takes true or false")),
        },
        unknown => Err(ValidationError::new(
            at,
            format!(
                "unknown operator {unknown}; supported: $eq, $in, $gt, $gte, $lt, $lte, $exists"
            ),
        )),
    }
}

/// JSON equality where numbers compare by value (`1` equals `1.0`).
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => json_cmp(a, b) == Some(Ordering::Equal),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Orders two numbers or two strings; `None` for anything else.
pub fn json_cmp(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let int = |n: &serde_json::Number| {
                n.as_i64()
                    .map(i128::from)
                    .or_else(|| n.as_u64().map(i128::from))
            };
            match (int(x), int(y)) {
                (Some(i), Some(j)) => Some(i.cmp(&j)),
                _ => x.as_f64()?.partial_cmp(&y.as_f64()?),
            }
        }
        (Value::String(x), Value::String(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        _ => None,
    }
}

/// The field a page is ordered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OrderField {
    /// Sequence (ties across partitions broken by partition).
    #[default]
    Sequence,
    /// Event timestamp (ties broken by partition, then sequence).
    Timestamp,
}

/// Ascending or descending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// Smallest first.
    #[default]
    Asc,
    /// Largest first.
    Desc,
}

/// How a page is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OrderBy {
    /// The field.
    pub field: OrderField,
    /// The direction.
    pub dir: Direction,
}

impl OrderBy {
    /// Parses `field` and `dir` names (`sequence`|`timestamp`, `asc`|`desc`).
    pub fn parse(field: &str, dir: Option<&str>) -> Result<Self, ValidationError> {
        let field = match field {
            "sequence" => OrderField::Sequence,
            "timestamp" => OrderField::Timestamp,
            other => {
                return Err(ValidationError::new(
                    "order_by",
                    format!("cannot order by {other:?}; use \"sequence\" or \"timestamp\""),
                ));
            }
        };
        let dir = match dir.unwrap_or("asc") {
            "asc" => Direction::Asc,
            "desc" => Direction::Desc,
            other => {
                return Err(ValidationError::new(
                    "order_by",
                    format!("invalid direction {other:?}; use \"asc\" or \"desc\""),
                ));
            }
        };
        Ok(Self { field, dir })
    }

    fn tag(self) -> &'static str {
        match (self.field, self.dir) {
            (OrderField::Sequence, Direction::Asc) => "sa",
            (OrderField::Sequence, Direction::Desc) => "sd",
            (OrderField::Timestamp, Direction::Asc) => "ta",
            (OrderField::Timestamp, Direction::Desc) => "td",
        }
    }

    fn from_tag(tag: &str) -> Option<Self> {
        let (field, dir) = match tag {
            "sa" => (OrderField::Sequence, Direction::Asc),
            "sd" => (OrderField::Sequence, Direction::Desc),
            "ta" => (OrderField::Timestamp, Direction::Asc),
            "td" => (OrderField::Timestamp, Direction::Desc),
            _ => return None,
        };
        Some(Self { field, dir })
    }

    /// The key that orders events of one partition under this ordering.
    pub fn position(self, event: &Event) -> Position {
        Position {
            timestamp: match self.field {
                OrderField::Sequence => 0,
                OrderField::Timestamp => event.timestamp.as_millis(),
            },
            sequence: event.sequence,
        }
    }

    /// The total page order: the field in this direction, then partition
    /// ascending, then sequence in this direction.
    pub fn compare(self, a: &Event, b: &Event) -> Ordering {
        let primary = match self.field {
            OrderField::Sequence => a.sequence.cmp(&b.sequence),
            OrderField::Timestamp => a.timestamp.cmp(&b.timestamp),
        };
        let primary = self.directed(primary);
        primary
            .then(a.partition.cmp(&b.partition))
            .then_with(|| self.directed(a.sequence.cmp(&b.sequence)))
    }

    fn directed(self, ord: Ordering) -> Ordering {
        match self.dir {
            Direction::Asc => ord,
            Direction::Desc => ord.reverse(),
        }
    }

    /// Whether `event` comes after `position` (within its partition) in this order.
    pub fn is_after(self, event: &Event, position: Position) -> bool {
        let ord = self.position(event).cmp(&position);
        self.directed(ord) == Ordering::Greater
    }
}

/// Where a page stopped in one partition: the ordering key of the last event
/// returned from it. `timestamp` is 0 when ordering by sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    /// Event timestamp in ms (ordering by timestamp only).
    pub timestamp: i64,
    /// Event sequence.
    pub sequence: u64,
}

impl Position {
    /// Checks that the position names an event that can exist: a sequence
    /// of at most [`MAX_SEQUENCE`](super::MAX_SEQUENCE) and an instant in
    /// the accepted range.
    fn validate(self) -> Result<(), ValidationError> {
        validate_sequence("cursor", self.sequence)?;
        Timestamp::from_millis(self.timestamp).validate("cursor")?;
        Ok(())
    }
}

/// A decoded page cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryCursor {
    /// The ordering the cursor was made for.
    pub order: OrderBy,
    /// Per partition, where the previous pages stopped.
    pub positions: BTreeMap<u32, Position>,
}

const CURSOR_VERSION: &str = "c1";

impl QueryCursor {
    /// The opaque text form.
    pub fn encode(&self) -> String {
        let mut text = format!("{CURSOR_VERSION}|{}|", self.order.tag());
        let parts: Vec<String> = self
            .positions
            .iter()
            .map(|(p, pos)| format!("{p}:{}:{}", pos.timestamp, pos.sequence))
            .collect();
        text.push_str(&parts.join(","));
        URL_SAFE_NO_PAD.encode(text)
    }

    /// Decodes a cursor and checks it was made for `order`.
    pub fn decode(text: &str, order: OrderBy) -> Result<Self, ValidationError> {
        let bad = || {
            ValidationError::new(
                "cursor",
                "malformed cursor (pass next_cursor back unchanged)",
            )
        };
        let raw = URL_SAFE_NO_PAD.decode(text).map_err(|_| bad())?;
        let raw = String::from_utf8(raw).map_err(|_| bad())?;
        let mut fields = raw.splitn(3, '|');
        if fields.next() != Some(CURSOR_VERSION) {
            return Err(bad());
        }
        let cursor_order = fields.next().and_then(OrderBy::from_tag).ok_or_else(bad)?;
        if cursor_order != order {
            return Err(ValidationError::new(
                "cursor",
                "the cursor was made for a different order_by",
            ));
        }
        let mut positions = BTreeMap::new();
        for part in fields
            .next()
            .ok_or_else(bad)?
            .split(',')
            .filter(|s| !s.is_empty())
        {
            let mut nums = part.split(':');
            let partition = nums.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            let timestamp = nums.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            let sequence = nums.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
            let position = Position {
                timestamp,
                sequence,
            };
            // A sequence-ordered cursor records no timestamp: one that
            // carries one was altered (`docs/log.md#cursors`).
            let altered = order.field == OrderField::Sequence && timestamp != 0;
            if nums.next().is_some() || altered || position.validate().is_err() {
                return Err(bad());
            }
            positions.insert(partition, position);
        }
        Ok(Self { order, positions })
    }

    /// Whether `event` lies beyond this cursor (not yet returned).
    pub fn admits(&self, event: &Event) -> bool {
        match self.positions.get(&event.partition) {
            Some(pos) => self.order.is_after(event, *pos),
            None => true,
        }
    }
}

/// A history query over one stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// ANDed filters.
    pub filters: Vec<Filter>,
    /// Inclusive lower bound on timestamp.
    pub from: Option<Timestamp>,
    /// Inclusive upper bound on timestamp.
    pub to: Option<Timestamp>,
    /// Exclusive lower bound on sequence.
    pub after_sequence: Option<u64>,
    /// Inclusive upper bound on sequence.
    pub until_sequence: Option<u64>,
    /// Page order.
    pub order: OrderBy,
    /// Page size.
    pub limit: u32,
    /// Where the previous page stopped.
    pub cursor: Option<QueryCursor>,
}

impl Default for Query {
    fn default() -> Self {
        Self {
            filters: Vec::new(),
            from: None,
            to: None,
            after_sequence: None,
            until_sequence: None,
            order: OrderBy::default(),
            limit: DEFAULT_QUERY_LIMIT,
            cursor: None,
        }
    }
}

impl Query {
    /// Checks the limit, the bounds (see [`Query::validate_bounds`]), and
    /// that the cursor was made for this ordering and names positions that
    /// can exist.
    pub fn validate(&self) -> Result<(), ValidationError> {
        super::validate_limit(self.limit, MAX_QUERY_LIMIT)?;
        self.validate_bounds()?;
        let Some(cursor) = &self.cursor else {
            return Ok(());
        };
        if cursor.order != self.order {
            return Err(ValidationError::new(
                "cursor",
                "the cursor was made for a different order_by",
            ));
        }
        cursor
            .positions
            .values()
            .try_for_each(|position| position.validate())
    }

    /// Checks the sequence bounds (at most
    /// [`MAX_SEQUENCE`](super::MAX_SEQUENCE)) and the time bounds (in the
    /// accepted range): all a replay by query uses, since it ignores the
    /// limit and the cursor.
    pub fn validate_bounds(&self) -> Result<(), ValidationError> {
        if let Some(after) = self.after_sequence {
            validate_sequence("after_sequence", after)?;
        }
        if let Some(until) = self.until_sequence {
            validate_sequence("until_sequence", until)?;
        }
        if let Some(from) = self.from {
            from.validate("from")?;
        }
        if let Some(to) = self.to {
            to.validate("to")?;
        }
        Ok(())
    }

    /// Whether `event` passes the bounds, the filters and the cursor.
    pub fn matches(&self, event: &Event) -> bool {
        self.within_bounds(event)
            && self.cursor.as_ref().is_none_or(|c| c.admits(event))
            && self.filters.iter().all(|f| f.matches(event))
    }

    /// Whether `event` passes the time and sequence bounds.
    pub fn within_bounds(&self, event: &Event) -> bool {
        self.from.is_none_or(|f| event.timestamp >= f)
            && self.to.is_none_or(|t| event.timestamp <= t)
            && self.after_sequence.is_none_or(|a| event.sequence > a)
            && self.until_sequence.is_none_or(|u| event.sequence <= u)
    }

    /// The sequences of `partition` (whose high watermark is
    /// `high_watermark`) this query can match, from its sequence bounds and
    /// a sequence-ordered cursor: `None` when there are none.
    pub fn sequence_range(&self, partition: u32, high_watermark: u64) -> Option<(u64, u64)> {
        let mut lo = self.after_sequence.map_or(1, |a| a.saturating_add(1));
        let mut hi = self.until_sequence.unwrap_or(u64::MAX).min(high_watermark);
        if let Some(pos) = self
            .cursor
            .as_ref()
            .filter(|c| c.order.field == OrderField::Sequence)
            .and_then(|c| c.positions.get(&partition))
        {
            match self.order.dir {
                Direction::Asc => lo = lo.max(pos.sequence.saturating_add(1)),
                Direction::Desc => hi = hi.min(pos.sequence.saturating_sub(1)),
            }
        }
        (lo <= hi).then_some((lo, hi))
    }

    /// Builds the page for `events` (already filtered, ordered and cut to
    /// `limit`): the cursor is `None` when the page is not full.
    pub fn page(&self, events: Vec<Event>) -> Page {
        let next_cursor = (events.len() as u64 == u64::from(self.limit)).then(|| {
            let mut cursor = self.cursor.clone().unwrap_or(QueryCursor {
                order: self.order,
                positions: BTreeMap::new(),
            });
            for event in &events {
                cursor
                    .positions
                    .insert(event.partition, self.order.position(event));
            }
            cursor.encode()
        });
        Page {
            events,
            next_cursor,
        }
    }
}

/// One page of query results.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// The events, in the query's order.
    pub events: Vec<Event>,
    /// Pass back as `cursor` for the next page; `None` when done.
    pub next_cursor: Option<String>,
}

#[cfg(test)]
mod tests;
