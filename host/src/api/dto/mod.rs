//! The request and response bodies of the HTTP API.
//!
//! These are the wire format, kept apart from the model so that a change to
//! a domain type cannot silently change what clients see. Requests refuse
//! unknown fields (a misspelt option is an error, not a silent default);
//! conversions into model requests validate what serde cannot.
//! Partition-keyed maps are `BTreeMap<u32, _>`, which serde_json writes with
//! string keys (`"0"`) in numeric order. Timestamps are the model's
//! [`Timestamp`](crate::model::Timestamp): RFC 3339 UTC with milliseconds.

mod events;
mod groups;
#[cfg(feature = "wasm")]
mod handlers;
mod leases;
pub(crate) mod schema;
mod whole;

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

pub(crate) use events::{
    AppendBatchBody, AppendedBatchBody, AppendedBody, CreateStreamBody, EventBody, EventInputBody,
    EventListBody, PatchStreamBody, QueryBody, QueryPageBody, ReadParams, StreamBody,
    StreamListBody,
};
pub(crate) use groups::{
    CreateGroupBody, DeadLetterPageBody, DeadLetterParams, GroupBody, GroupInfoBody, GroupListBody,
    LagBody, LagParams, QuarantineBody, RedriveBody, RedrivenBody, ReleaseBody, ReleasedBody,
    ReopenedBody, ReplayBody, ResetBody,
};
#[cfg(feature = "wasm")]
pub(crate) use handlers::{
    DeployForm, HandlerBody, HandlerListBody, HandlerLogsBody, HistoryBody, LogGapBody,
    LogLineBody, LogsParams, SwapParams, TrialBody, TrialForm, WasmModule,
};
pub(crate) use leases::{
    AckBody, FetchBody, LeaseBody, LeaseListBody, LeasePageBody, LeasePageParams, NackBody,
    RejectBody, RenewBody, SettleBody, SettleResultsBody,
};

use super::error::ApiError;
use crate::backend::Partitions;
use crate::model::{MAX_SEQUENCE, StartAfter, StartPosition, Timestamp};

/// `{"ok": true}`: the answer of operations with nothing else to say.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct OkBody {
    /// Always true.
    ok: bool,
}

impl OkBody {
    /// The one value.
    pub(crate) const YES: OkBody = OkBody { ok: true };
}

/// Any JSON object.
// Names the schema in the OpenAPI document: one `JsonObject` instead of an
// anonymous inline object per field, which client generators name after the
// field (docs/http.md#generated-clients). The wire type is
// `crate::model::JsonObject`.
#[derive(ToSchema)]
#[schema(as = JsonObject, value_type = Object)]
#[allow(dead_code, reason = "describes the document; never built")]
pub(crate) struct JsonObjectSchema(Value);

/// Where to start: after this sequence in every partition (an integer), or
/// after a sequence per partition (`{"0": 41}`).
// Describes `start_after` in the OpenAPI document as `oneOf` its two forms,
// so a generated client can send either (docs/http.md#generated-clients).
// The field itself is read as JSON by `start_position`, whose errors name
// the offending key.
pub(crate) struct StartAfterSchema;

impl utoipa::PartialSchema for StartAfterSchema {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        schema::start_after().into()
    }
}

impl ToSchema for StartAfterSchema {
    fn name() -> std::borrow::Cow<'static, str> {
        "StartAfter".into()
    }
}

/// Sequences keyed by partition number (as a string): `{"0": 41, "2": 7}`.
pub(crate) struct PartitionSequences;

impl utoipa::PartialSchema for PartitionSequences {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::Schema::Object(schema::partition_sequences()).into()
    }
}

impl ToSchema for PartitionSequences {
    fn name() -> std::borrow::Cow<'static, str> {
        "PartitionSequences".into()
    }
}

/// A partition list from a body: absent means all partitions, `[]` none.
pub(crate) fn partitions(list: Option<Vec<u32>>) -> Partitions {
    list.map_or(Partitions::All, Partitions::Only)
}

/// Why a `start_after` value that is no `u64` is refused.
fn not_a_sequence() -> String {
    format!("must be an integer between 0 and {MAX_SEQUENCE}")
}

/// A start point from `start_after` (an integer, or a map of partition to
/// sequence) and `start_at` (a timestamp); at most one may be given. The
/// range of each sequence is checked with the rest of the request, by
/// [`StartPosition::validate`]; numbers no `u64` holds are refused here.
pub(crate) fn start_position(
    start_after: Option<Value>,
    start_at: Option<Timestamp>,
) -> Result<StartPosition, ApiError> {
    match (start_after, start_at) {
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "start_after",
            "give start_after or start_at, not both",
        )),
        (None, Some(at)) => Ok(StartPosition::At(at)),
        (None, None) => Ok(StartPosition::Beginning),
        (Some(number @ Value::Number(_)), None) => whole::of::<u64>(&number).map_or_else(
            || Err(ApiError::invalid("start_after", not_a_sequence())),
            |seq| Ok(StartPosition::After(StartAfter::All(seq))),
        ),
        (Some(Value::Object(map)), None) => {
            let mut per_partition = BTreeMap::new();
            for (key, value) in map {
                // Nine digits at most, as `schema::PARTITION_KEY_PATTERN`
                // says: every partition, and always a `u32`.
                let digits =
                    (1..=9).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_digit());
                let partition = digits
                    .then(|| key.parse::<u32>().ok())
                    .flatten()
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "start_after",
                            format!("map keys are partition numbers (got {key:?})"),
                        )
                    })?;
                let seq = whole::of::<u64>(&value).ok_or_else(|| {
                    ApiError::invalid(format!("start_after.{key}"), not_a_sequence())
                })?;
                per_partition.insert(partition, seq);
            }
            Ok(StartPosition::After(StartAfter::PerPartition(
                per_partition,
            )))
        }
        (Some(_), None) => Err(ApiError::invalid(
            "start_after",
            "must be a sequence number or a map of partition to sequence, e.g. {\"0\": 41}",
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn start_points_accept_both_forms_of_start_after_or_a_time() {
        assert_eq!(
            start_position(Some(json!(7)), None).unwrap(),
            StartPosition::After(StartAfter::All(7))
        );
        assert_eq!(
            start_position(Some(json!({"0": 3, "2": 9})), None).unwrap(),
            StartPosition::After(StartAfter::PerPartition(BTreeMap::from([(0, 3), (2, 9)])))
        );
        let t = Timestamp::from_millis(1_000);
        assert_eq!(start_position(None, Some(t)).unwrap(), StartPosition::At(t));
        assert_eq!(
            start_position(None, None).unwrap(),
            StartPosition::Beginning
        );
    }

    #[test]
    fn bad_start_points_name_the_field() {
        let code = |r: Result<StartPosition, ApiError>| r.unwrap_err().code();
        let t = Timestamp::from_millis(0);
        assert_eq!(code(start_position(Some(json!(1)), Some(t))), "invalid");
        assert_eq!(code(start_position(Some(json!(-1)), None)), "invalid");
        assert_eq!(code(start_position(Some(json!({"x": 1})), None)), "invalid");
        assert_eq!(
            code(start_position(Some(json!({"0": "1"})), None)),
            "invalid"
        );
        assert_eq!(code(start_position(Some(json!("1")), None)), "invalid");
    }
}
