//! The constraints the server enforces, as JSON Schema for the OpenAPI
//! document (`docs/http.md#contract`).
//!
//! Each function builds a schema from the constants its validator uses
//! (`crate::model`, the API's own limits), so the document cannot state a
//! different limit from the one a request meets. [`rules`] says which
//! field or parameter each one describes; `openapi::Document` lays them
//! over the schemas utoipa derived (keeping their descriptions) and a unit
//! test checks that each found its place. The `_or_null` variants are for
//! optional request fields, which accept `null` as "not given".

use serde_json::{Value, json};
use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, ArrayItems, KnownFormat, Object, ObjectBuilder, Schema,
    SchemaFormat, SchemaType, Type,
};
use utoipa::openapi::{OneOfBuilder, Ref, RefOr};

use crate::model::{
    ID_PATTERN, LEASE_CURSOR_PATTERN, MAX_BACKOFF_STEPS, MAX_DELAY_MS, MAX_FETCH_LIMIT, MAX_ID_LEN,
    MAX_KEY_LEN, MAX_LEASE_MS, MAX_MAX_ATTEMPTS, MAX_NAME_LEN, MAX_PARTITIONS, MAX_PATH_DEPTH,
    MAX_QUERY_LIMIT, MAX_SEQUENCE, MAX_SETTLE_BATCH, MAX_TYPE_LEN, NAME_PATTERN,
};

/// `type` alone, or with `null` for an optional request field.
fn types(kind: Type, nullable: bool) -> SchemaType {
    if nullable {
        SchemaType::from_iter([kind, Type::Null])
    } else {
        SchemaType::new(kind)
    }
}

fn integer(format: KnownFormat, min: u64, max: u64, nullable: bool) -> Object {
    ObjectBuilder::new()
        .schema_type(types(Type::Integer, nullable))
        .format(Some(SchemaFormat::KnownFormat(format)))
        .minimum(Some(min))
        .maximum(Some(max))
        .build()
}

fn string(min: usize, max: usize, pattern: &str, nullable: bool) -> Object {
    ObjectBuilder::new()
        .schema_type(types(Type::String, nullable))
        .min_length(Some(min))
        .max_length(Some(max))
        .pattern(Some(pattern))
        .build()
}

fn array(items: impl Into<RefOr<Schema>>, max: usize, nullable: bool) -> Schema {
    Schema::Array(
        ArrayBuilder::new()
            .schema_type(types(Type::Array, nullable))
            .items(ArrayItems::RefOrSchema(Box::new(items.into())))
            .max_items(Some(max))
            .build(),
    )
}

/// A stream, group or handler name (`crate::model::StreamName`).
pub(crate) fn name() -> Object {
    string(1, MAX_NAME_LEN, NAME_PATTERN, false)
}

/// An event id, consumer id or lease id (`crate::model::EventId`).
pub(crate) fn id() -> Object {
    string(1, MAX_ID_LEN, ID_PATTERN, false)
}

/// An optional id.
pub(crate) fn id_or_null() -> Object {
    string(1, MAX_ID_LEN, ID_PATTERN, true)
}

/// Optional ids, e.g. the events of a replay or a redrive.
pub(crate) fn ids_or_null() -> Schema {
    Schema::Array(
        ArrayBuilder::new()
            .schema_type(types(Type::Array, true))
            .items(id())
            .build(),
    )
}

/// An event `type`.
pub(crate) fn event_type_or_null() -> Object {
    ObjectBuilder::new()
        .schema_type(types(Type::String, true))
        .min_length(Some(1))
        .max_length(Some(MAX_TYPE_LEN))
        .build()
}

/// A routing `key`.
pub(crate) fn key_or_null() -> Object {
    ObjectBuilder::new()
        .schema_type(types(Type::String, true))
        .max_length(Some(MAX_KEY_LEN))
        .build()
}

/// A partition number: below [`MAX_PARTITIONS`] (a stream's own count is
/// checked when the request reaches it: 400 `invalid_partition`).
fn partition_schema(nullable: bool) -> Object {
    integer(
        KnownFormat::Int32,
        0,
        u64::from(MAX_PARTITIONS - 1),
        nullable,
    )
}

/// An optional partition number.
pub(crate) fn partition_or_null() -> Object {
    partition_schema(true)
}

/// An optional list of partitions (absent: all; `[]`: none).
pub(crate) fn partitions_or_null() -> Schema {
    Schema::Array(
        ArrayBuilder::new()
            .schema_type(types(Type::Array, true))
            .items(partition_schema(false))
            .build(),
    )
}

/// A stream's partition count.
pub(crate) fn partition_count_or_null() -> Object {
    integer(KnownFormat::Int32, 1, u64::from(MAX_PARTITIONS), true)
}

/// A sequence a caller names: at most [`MAX_SEQUENCE`].
pub(crate) fn sequence() -> Object {
    integer(KnownFormat::Int64, 0, MAX_SEQUENCE, false)
}

/// An optional sequence.
pub(crate) fn sequence_or_null() -> Object {
    integer(KnownFormat::Int64, 0, MAX_SEQUENCE, true)
}

/// The `after` of a page of leases (`crate::model::LeaseCursor::parse`:
/// every text of the pattern is a cursor).
pub(crate) fn lease_cursor_or_null() -> Object {
    ObjectBuilder::new()
        .schema_type(types(Type::String, true))
        .pattern(Some(LEASE_CURSOR_PATTERN))
        .build()
}

/// A page limit of a read, a query or a dead-letter list.
pub(crate) fn query_limit_or_null() -> Object {
    integer(KnownFormat::Int32, 1, u64::from(MAX_QUERY_LIMIT), true)
}

/// How many leases one fetch may claim.
pub(crate) fn fetch_limit_or_null() -> Object {
    integer(KnownFormat::Int32, 1, u64::from(MAX_FETCH_LIMIT), true)
}

/// A lease duration.
pub(crate) fn lease_ms_or_null() -> Object {
    integer(KnownFormat::Int64, 1, MAX_LEASE_MS, true)
}

/// A retry delay.
pub(crate) fn delay_ms_or_null() -> Object {
    integer(KnownFormat::Int64, 0, MAX_DELAY_MS, true)
}

/// A long poll's wait.
pub(crate) fn wait_ms_or_null() -> Object {
    integer(KnownFormat::Int64, 0, crate::api::groups::MAX_WAIT_MS, true)
}

/// A group's `max_attempts`.
pub(crate) fn max_attempts_or_null() -> Object {
    integer(KnownFormat::Int32, 1, u64::from(MAX_MAX_ATTEMPTS), true)
}

/// A retry schedule.
pub(crate) fn backoff_or_null() -> Schema {
    array(
        integer(KnownFormat::Int64, 0, MAX_DELAY_MS, false),
        MAX_BACKOFF_STEPS,
        true,
    )
}

/// The events of a batch append.
pub(crate) fn append_batch() -> Schema {
    array(
        RefOr::Ref(Ref::from_schema_name("EventInputBody")),
        crate::api::streams::MAX_APPEND_BATCH,
        false,
    )
}

/// The operations of a batch settle.
pub(crate) fn settlements() -> Schema {
    array(
        RefOr::Ref(Ref::from_schema_name("SettlementBody")),
        MAX_SETTLE_BATCH,
        false,
    )
}

/// `start_after`: a sequence for every partition, or one per partition (the
/// named schema `StartAfter`).
pub(crate) fn start_after() -> Schema {
    Schema::OneOf(
        OneOfBuilder::new()
            .item(sequence())
            .item(RefOr::Ref(Ref::from_schema_name("PartitionSequences")))
            .build(),
    )
}

/// Sequences keyed by partition number (the named schema
/// `PartitionSequences`).
pub(crate) fn partition_sequences() -> Object {
    let partition_key = ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(PARTITION_KEY_PATTERN))
        .build();
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property_names(Some(partition_key))
        .additional_properties(Some(AdditionalProperties::RefOr(RefOr::T(Schema::Object(
            sequence(),
        )))))
        .build()
}

/// A partition number as a JSON object key, as `dto::start_position` reads
/// it (a partition the stream lacks is refused with the stream).
pub(crate) const PARTITION_KEY_PATTERN: &str = "^[0-9]{1,9}$";

/// An instant a caller names: RFC 3339 from 1970 to 9999
/// (`crate::model::Timestamp::validate`). The pattern states the year; an
/// offset that moves 1970-01-01 or 9999-12-31 across the range is the one
/// case it cannot state.
fn timestamp(nullable: bool) -> Object {
    ObjectBuilder::new()
        .schema_type(types(Type::String, nullable))
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
        .pattern(Some(YEAR_PATTERN))
        .build()
}

/// The years the server accepts, 1970–9999, at the start of a timestamp.
pub(crate) const YEAR_PATTERN: &str = "^(19[7-9][0-9]|[2-9][0-9]{3})-";

/// An optional instant.
pub(crate) fn timestamp_or_null() -> Object {
    timestamp(true)
}

/// What a query can be ordered by (`crate::model::OrderBy::parse`).
pub(crate) fn order_field() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["sequence", "timestamp"]))
        .build()
}

/// Which way (`null`: ascending).
pub(crate) fn order_dir_or_null() -> Object {
    ObjectBuilder::new()
        .schema_type(types(Type::String, true))
        .enum_values(Some([json!("asc"), json!("desc"), Value::Null]))
        .build()
}

/// The `partitions` query parameter of a lag request.
pub(crate) fn partition_list_or_null() -> Object {
    ObjectBuilder::new()
        .schema_type(types(Type::String, true))
        .pattern(Some(super::groups::PARTITION_LIST_PATTERN))
        .build()
}

/// One ordering key at most (ties are broken by partition, then sequence).
pub(crate) fn order_by_or_null() -> Schema {
    array(RefOr::Ref(Ref::from_schema_name("OrderKeyBody")), 1, true)
}

/// A schema as JSON.
fn v(schema: impl serde::Serialize) -> Value {
    serde_json::to_value(schema).unwrap_or(Value::Null)
}

/// The filters of a query (`crate::model::parse_where`): field names, and
/// per field a value to equal, a plain object to equal, or operators.
fn filter_or_null() -> Value {
    // `payload.` and `metadata.` paths: non-empty segments without quotes
    // or backslashes, at most MAX_PATH_DEPTH of them; any other name, a
    // top-level key, without quotes or backslashes (`FieldRef::parse`).
    let segment = r#"[^."\\]+"#;
    let path = format!(
        "^(payload|metadata)\\.{segment}(\\.{segment}){{0,{}}}$",
        MAX_PATH_DEPTH - 1
    );
    let range = json!({"type": ["number", "string"]});
    json!({
        "type": ["object", "null"],
        "propertyNames": {
            "type": "string",
            "minLength": 1,
            "anyOf": [
                {"pattern": path},
                {
                    "pattern": r#"^[^"\\]*$"#,
                    "not": {"pattern": "^(payload|metadata)\\."},
                },
            ],
        },
        "additionalProperties": {
            "anyOf": [
                {"not": {"type": "object"}},
                {"type": "object", "propertyNames": {"type": "string", "not": {"pattern": "^\\$"}}},
                {
                    "type": "object",
                    "minProperties": 1,
                    "additionalProperties": false,
                    "properties": {
                        "$eq": {},
                        "$in": {"type": "array", "items": {}},
                        "$gt": range, "$gte": range, "$lt": range, "$lte": range,
                        "$exists": {"type": "boolean"},
                    },
                },
            ],
        },
    })
}

/// Where a rule of [`rules`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// A property of a named schema of the document's components.
    Property(&'static str, &'static str),
    /// A query or header parameter of an operation, by operation id.
    Parameter(&'static str, &'static str),
}

/// Every field and parameter whose values the server checks beyond their
/// JSON type, with the schema that states the check. (Path parameters
/// naming a stream, group or handler are `openapi::name_parameters`'
/// business; the rules that tie fields together are
/// `openapi::add_body_rules`'.)
/// A canary's share and margin (percent), window and evidence, as
/// `CanaryPlan::validate` bounds them.
#[cfg(feature = "wasm")]
fn canary_rules() -> [(Target, Value); 4] {
    use crate::handlers::{MAX_MIN_DELIVERIES, MAX_WINDOW_MS, MIN_SHARE_PERCENT};
    let swap = "handler_swap_module";
    [
        (
            Target::Parameter(swap, "canary"),
            v(number(MIN_SHARE_PERCENT, 100.0, true)),
        ),
        (
            Target::Parameter(swap, "window_ms"),
            v(integer(KnownFormat::Int64, 1, MAX_WINDOW_MS, true)),
        ),
        (
            Target::Parameter(swap, "margin"),
            v(number(0.0, 100.0, true)),
        ),
        (
            Target::Parameter(swap, "min_deliveries"),
            v(integer(KnownFormat::Int64, 1, MAX_MIN_DELIVERIES, true)),
        ),
    ]
}

/// A number from `min` to `max`.
#[cfg(feature = "wasm")]
fn number(min: f64, max: f64, nullable: bool) -> Object {
    ObjectBuilder::new()
        .schema_type(types(Type::Number, nullable))
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Double)))
        .minimum(Some(min))
        .maximum(Some(max))
        .build()
}

pub(crate) fn rules() -> Vec<(Target, Value)> {
    use Target::{Parameter as Param, Property as Prop};
    let ids = |schema: &'static str| {
        [
            (Prop(schema, "event_id"), v(id())),
            (Prop(schema, "lease_id"), v(id())),
        ]
    };
    let mut rules: Vec<(Target, Value)> = vec![
        (Prop("QueryBody", "where"), filter_or_null()),
        (Prop("CreateStreamBody", "name"), v(name())),
        (
            Prop("CreateStreamBody", "partition_count"),
            v(partition_count_or_null()),
        ),
        (Prop("EventInputBody", "id"), v(id_or_null())),
        (Prop("EventInputBody", "type"), v(event_type_or_null())),
        (Prop("EventInputBody", "key"), v(key_or_null())),
        (Prop("EventInputBody", "partition"), v(partition_or_null())),
        (Prop("EventInputBody", "timestamp"), v(timestamp_or_null())),
        (Prop("AppendBatchBody", "events"), v(append_batch())),
        (Param("event_read", "partition"), v(partition_or_null())),
        (Param("event_read", "after"), v(sequence_or_null())),
        (Param("event_read", "limit"), v(query_limit_or_null())),
        (Prop("OrderKeyBody", "field"), v(order_field())),
        (Prop("OrderKeyBody", "dir"), v(order_dir_or_null())),
        (Prop("QueryBody", "from"), v(timestamp_or_null())),
        (Prop("QueryBody", "to"), v(timestamp_or_null())),
        (Prop("QueryBody", "after_sequence"), v(sequence_or_null())),
        (Prop("QueryBody", "until_sequence"), v(sequence_or_null())),
        (Prop("QueryBody", "order_by"), v(order_by_or_null())),
        (Prop("QueryBody", "limit"), v(query_limit_or_null())),
        (Prop("CreateGroupBody", "name"), v(name())),
        (
            Prop("CreateGroupBody", "max_attempts"),
            v(max_attempts_or_null()),
        ),
        (Prop("CreateGroupBody", "start_at"), v(timestamp_or_null())),
        (
            Prop("CreateGroupBody", "retry_backoff_ms"),
            v(backoff_or_null()),
        ),
        (
            Param("group_lag", "partitions"),
            v(partition_list_or_null()),
        ),
        (Prop("FetchBody", "limit"), v(fetch_limit_or_null())),
        (Prop("FetchBody", "consumer_id"), v(id_or_null())),
        (Prop("FetchBody", "lease_ms"), v(lease_ms_or_null())),
        (Prop("FetchBody", "partitions"), v(partitions_or_null())),
        (Prop("FetchBody", "wait_ms"), v(wait_ms_or_null())),
        (Prop("NackBody", "delay_ms"), v(delay_ms_or_null())),
        (Prop("RenewBody", "lease_ms"), v(lease_ms_or_null())),
        (Prop("SettleBody", "settlements"), v(settlements())),
        (Prop("SettlementBody", "delay_ms"), v(delay_ms_or_null())),
        (Prop("ReplayBody", "from_sequence"), v(sequence_or_null())),
        (Prop("ReplayBody", "from"), v(timestamp_or_null())),
        (Prop("ReplayBody", "event_ids"), v(ids_or_null())),
        (Prop("ReplayBody", "partitions"), v(partitions_or_null())),
        (Prop("ResetBody", "start_at"), v(timestamp_or_null())),
        (Prop("ResetBody", "partitions"), v(partitions_or_null())),
        (Prop("RedriveBody", "event_ids"), v(ids_or_null())),
        (Prop("ReleaseBody", "event_ids"), v(ids_or_null())),
        (Param("dead_letter_list", "limit"), v(query_limit_or_null())),
        (Param("dead_letter_list", "after"), v(id_or_null())),
        (Param("group_leases", "limit"), v(query_limit_or_null())),
        (Param("group_leases", "after"), v(lease_cursor_or_null())),
        (Prop("ClockMoveBody", "set"), v(timestamp_or_null())),
    ];
    #[cfg(feature = "wasm")]
    rules.extend(canary_rules());
    for body in [
        "AckBody",
        "NackBody",
        "RejectBody",
        "RenewBody",
        "SettlementBody",
    ] {
        rules.extend(ids(body));
    }
    rules
}
