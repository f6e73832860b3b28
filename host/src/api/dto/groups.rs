//! Groups, lag, replay, reset and dead letters on the wire.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::events::{EventBody, QueryBody};
use crate::api::error::ApiError;
use crate::backend::quarantine::Parked;
use crate::backend::{Partitions, Redrive, Replay};
use crate::model::{
    DeadLetter, DeadLetterPage, EventId, Flow, Group, GroupInfo, GroupName, GroupOrdering, Lag,
    OnExhausted, ParkedKey, PartitionLag, StreamName, Timestamp,
};

/// Create a consumer group.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateGroupBody {
    /// 1–128 characters of `[A-Za-z0-9._-]`, not only dots.
    #[schema(value_type = String, example = "billing")]
    pub(crate) name: GroupName,
    /// Claims per delivery before a failure dead-letters it (default 5).
    #[serde(default, deserialize_with = "super::whole::opt")]
    pub(crate) max_attempts: Option<u32>,
    /// Start after this sequence: an integer for every partition, or `{"0": 41}`.
    #[schema(value_type = Option<super::StartAfterSchema>)]
    pub(crate) start_after: Option<Value>,
    /// Start at the first event at or after this time, per partition.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) start_at: Option<Timestamp>,
    /// Retry delays for nacks without one, by attempt; the last repeats (default none).
    #[serde(default, deserialize_with = "super::whole::opt_vec")]
    pub(crate) retry_backoff_ms: Option<Vec<u64>>,
    /// `none` (default), `key`: one delivery per key out at a time, in
    /// sequence order, or `partition`: one per partition
    /// (`docs/groups.md#ordering`).
    pub(crate) ordering: Option<GroupOrdering>,
    /// `dead_letter` (default), or `quarantine`: under an ordering, a head
    /// that exhausts its attempts parks its key until released
    /// (`docs/groups.md#quarantine`).
    pub(crate) on_exhausted: Option<OnExhausted>,
    /// Flow control (`docs/groups.md#flow`): `{"key_concurrency": N}` lets
    /// at most N deliveries of a key out at once (needs `ordering` `none`);
    /// `{"key_rate": {"per_second": R, "burst": B}}` at most R claims of a
    /// key a second (any ordering). Default: no limit.
    pub(crate) flow: Option<Flow>,
}

/// A consumer group.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GroupBody {
    /// The stream it consumes.
    #[schema(value_type = String)]
    stream: StreamName,
    /// Its name.
    #[schema(value_type = String)]
    name: GroupName,
    /// Claims allowed per delivery.
    max_attempts: u32,
    /// Retry schedule.
    retry_backoff_ms: Vec<u64>,
    /// Which deliveries may be out at once.
    ordering: GroupOrdering,
    /// What a head that exhausts its attempts does.
    on_exhausted: OnExhausted,
    /// Its flow control (`{}`: none).
    flow: Flow,
    /// When it was created.
    #[schema(value_type = String, format = DateTime)]
    created_at: Timestamp,
}

impl From<Group> for GroupBody {
    fn from(g: Group) -> Self {
        Self {
            stream: g.stream,
            name: g.name,
            max_attempts: g.max_attempts,
            retry_backoff_ms: g.retry_backoff_ms,
            ordering: g.ordering,
            on_exhausted: g.on_exhausted,
            flow: g.flow,
            created_at: g.created_at,
        }
    }
}

/// A stream's groups, sorted by name.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GroupListBody {
    /// The groups.
    pub(crate) groups: Vec<GroupBody>,
}

/// Which partitions to report.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct LagParams {
    /// Comma-separated partition numbers, e.g. `0,1` (default all; empty selects none).
    partitions: Option<String>,
}

/// Digits in one partition number of a `partitions` query parameter:
/// enough for any partition (fewer than `MAX_PARTITIONS`), few enough that
/// the number always fits a `u32`.
const MAX_PARTITION_DIGITS: usize = 9;

/// The `partitions` query parameter: empty, or partition numbers separated
/// by commas, with spaces around them if you like.
pub(crate) const PARTITION_LIST_PATTERN: &str = "^( *[0-9]{1,9} *(, *[0-9]{1,9} *)*)?$";

impl LagParams {
    /// The selected partitions; the list is read exactly as
    /// [`PARTITION_LIST_PATTERN`] says.
    pub(crate) fn partitions(&self) -> Result<Partitions, ApiError> {
        let Some(list) = self.partitions.as_deref() else {
            return Ok(Partitions::All);
        };
        if list.is_empty() {
            return Ok(Partitions::Only(Vec::new()));
        }
        list.split(',')
            .map(|item| {
                let p = item.trim_matches(' ');
                let digits = !p.is_empty()
                    && p.len() <= MAX_PARTITION_DIGITS
                    && p.bytes().all(|b| b.is_ascii_digit());
                digits
                    .then(|| p.parse::<u32>().ok())
                    .flatten()
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "partitions",
                            format!("{p:?} is not a partition number (give e.g. `0,2`)"),
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Partitions::Only)
    }
}

/// Lag of one partition.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PartitionLagBody {
    /// Everything up to here (from the group's start) is settled.
    frontier: u64,
    /// Last sequence appended.
    high_watermark: u64,
    /// `high_watermark − frontier`.
    lag: u64,
}

impl From<PartitionLag> for PartitionLagBody {
    fn from(p: PartitionLag) -> Self {
        Self {
            frontier: p.frontier,
            high_watermark: p.high_watermark,
            lag: p.lag,
        }
    }
}

/// How far a group is behind.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LagBody {
    /// The stream.
    #[schema(value_type = String)]
    stream: StreamName,
    /// The group.
    #[schema(value_type = String)]
    group: GroupName,
    /// Sum over the partitions.
    lag: u64,
    /// Per partition (keys are partition numbers as strings).
    #[schema(value_type = std::collections::HashMap<String, PartitionLagBody>)]
    partitions: BTreeMap<u32, PartitionLagBody>,
    /// Events never handed out.
    pending: u64,
    /// Deliveries leased now.
    inflight: u64,
    /// Nacked deliveries not yet due.
    waiting_retry: u64,
    /// Age of the oldest unsettled event.
    oldest_unacked_age_ms: Option<u64>,
}

impl From<Lag> for LagBody {
    fn from(l: Lag) -> Self {
        Self {
            stream: l.stream,
            group: l.group,
            lag: l.lag,
            partitions: l
                .partitions
                .into_iter()
                .map(|(p, lag)| (p, lag.into()))
                .collect(),
            pending: l.pending,
            inflight: l.inflight,
            waiting_retry: l.waiting_retry,
            oldest_unacked_age_ms: l.oldest_unacked_age_ms,
        }
    }
}

/// Everything about a group.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GroupInfoBody {
    /// The stream.
    #[schema(value_type = String)]
    stream: StreamName,
    /// The group.
    #[schema(value_type = String)]
    group: GroupName,
    /// Claims allowed per delivery.
    max_attempts: u32,
    /// Retry schedule.
    retry_backoff_ms: Vec<u64>,
    /// Which deliveries may be out at once.
    ordering: GroupOrdering,
    /// What a head that exhausts its attempts does.
    on_exhausted: OnExhausted,
    /// Its flow control (`{}`: none).
    flow: Flow,
    /// Lag over all partitions.
    lag: LagBody,
    /// Deliveries leased now.
    inflight: u64,
    /// Deliveries dead-lettered.
    dead_letters: u64,
    /// Events the stream's retention removed before this group settled
    /// them (`docs/log.md#retention`).
    skipped_by_retention: u64,
    /// Per partition, the next sequence the group will hand out.
    #[schema(value_type = std::collections::HashMap<String, u64>)]
    cursors: BTreeMap<u32, u64>,
}

impl From<GroupInfo> for GroupInfoBody {
    fn from(i: GroupInfo) -> Self {
        Self {
            stream: i.stream,
            group: i.group,
            max_attempts: i.max_attempts,
            retry_backoff_ms: i.retry_backoff_ms,
            ordering: i.ordering,
            on_exhausted: i.on_exhausted,
            flow: i.flow,
            lag: i.lag.into(),
            inflight: i.inflight,
            dead_letters: i.dead_letters,
            skipped_by_retention: i.skipped_by_retention,
            cursors: i.cursors,
        }
    }
}

/// What to replay: exactly one of `from_sequence` (with optional
/// `partitions`), `from` (with optional `partitions`), `query`, `event_ids`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReplayBody {
    /// Re-open everything after this sequence (exclusive).
    #[serde(default, deserialize_with = "super::whole::opt")]
    from_sequence: Option<u64>,
    /// Re-open everything from the first event at or after this time.
    #[schema(value_type = Option<String>, format = DateTime)]
    from: Option<Timestamp>,
    /// Re-open what this query matches (its limit, cursor and order are ignored).
    query: Option<QueryBody>,
    /// Re-open these events.
    #[schema(value_type = Option<Vec<String>>)]
    event_ids: Option<Vec<EventId>>,
    /// With `from_sequence` or `from`: the partitions to rewind (default all).
    #[serde(default, deserialize_with = "super::whole::opt_vec")]
    partitions: Option<Vec<u32>>,
}

impl ReplayBody {
    /// The backend's replay selector.
    pub(crate) fn into_replay(self) -> Result<Replay, ApiError> {
        let chosen = [
            self.from_sequence.is_some(),
            self.from.is_some(),
            self.query.is_some(),
            self.event_ids.is_some(),
        ]
        .into_iter()
        .filter(|given| *given)
        .count();
        if chosen != 1 {
            return Err(refuse(
                "give exactly one of from_sequence, from, query or event_ids",
            ));
        }
        let partitions = super::partitions(self.partitions);
        if partitions != Partitions::All && (self.query.is_some() || self.event_ids.is_some()) {
            return Err(refuse(
                "partitions only go with from_sequence or from (a query can filter on partition)",
            ));
        }
        if let Some(after) = self.from_sequence {
            Ok(Replay::FromSequence { after, partitions })
        } else if let Some(from) = self.from {
            Ok(Replay::FromTime { from, partitions })
        } else if let Some(query) = self.query {
            // Checked whole, as the document describes a query; then its
            // order, limit and cursor are ignored.
            let checked = query.into_query()?;
            Ok(Replay::Query(crate::model::Query {
                order: crate::model::OrderBy::default(),
                limit: crate::model::Query::default().limit,
                cursor: None,
                ..checked
            }))
        } else {
            Ok(Replay::EventIds(self.event_ids.unwrap_or_default()))
        }
    }
}

fn refuse(message: &str) -> ApiError {
    ApiError::Refused(crate::backend::Error::InvalidReplayOpts(message.to_owned()))
}

/// How many deliveries a replay re-opened.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReopenedBody {
    /// Deliveries made available again.
    pub(crate) reopened: u64,
}

/// Reset a group (after `confirm: true`, checked first).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResetBody {
    /// Must be exactly `true`.
    pub(crate) confirm: bool,
    /// Start again after this sequence (integer or per-partition map).
    #[schema(value_type = Option<super::StartAfterSchema>)]
    pub(crate) start_after: Option<Value>,
    /// Start again at the first event at or after this time.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) start_at: Option<Timestamp>,
    /// Partitions to reset (default all).
    #[serde(default, deserialize_with = "super::whole::opt_vec")]
    pub(crate) partitions: Option<Vec<u32>>,
    /// The group's ordering from now on (`none`, `key` or `partition`);
    /// default: unchanged. Needs every partition reset.
    pub(crate) ordering: Option<GroupOrdering>,
    /// The group's flow control from now on (`docs/groups.md#flow`; `{}`
    /// turns every limit off); default: unchanged. Needs every partition
    /// reset, and must fit the ordering after the reset.
    pub(crate) flow: Option<Flow>,
}

/// A page of dead letters.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct DeadLetterParams {
    /// Page size (default 100, max 1000).
    pub(crate) limit: Option<u32>,
    /// The previous page's `next` (an event id).
    #[param(value_type = Option<String>)]
    pub(crate) after: Option<EventId>,
}

/// A dead-lettered delivery.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DeadLetterBody {
    /// The event's id.
    #[schema(value_type = String)]
    event_id: EventId,
    /// Its partition.
    partition: u32,
    /// Its sequence.
    sequence: u64,
    /// Attempts made.
    attempt: u32,
    /// Why it was dead-lettered.
    reason: String,
    /// When.
    #[schema(value_type = String, format = DateTime)]
    dead_lettered_at: Timestamp,
    /// The event; `null` once the stream's retention removed it
    /// (`docs/log.md#retention`).
    event: Option<EventBody>,
}

impl From<DeadLetter> for DeadLetterBody {
    fn from(d: DeadLetter) -> Self {
        Self {
            event: d.event.as_ref().map(EventBody::from),
            event_id: d.event_id,
            partition: d.partition,
            sequence: d.sequence,
            attempt: d.attempt,
            reason: d.reason,
            dead_lettered_at: d.dead_lettered_at,
        }
    }
}

/// A page of dead letters in sequence order.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DeadLetterPageBody {
    /// The dead letters.
    dead_letters: Vec<DeadLetterBody>,
    /// Pass as `after` for the next page; null when this page was the last.
    #[schema(value_type = Option<String>)]
    next: Option<EventId>,
}

impl From<DeadLetterPage> for DeadLetterPageBody {
    fn from(page: DeadLetterPage) -> Self {
        Self {
            dead_letters: page.dead_letters.into_iter().map(Into::into).collect(),
            next: page.next,
        }
    }
}

/// Which dead letters to redrive: `{"event_ids": [...]}` or `{"all": true}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RedriveBody {
    /// These events.
    #[schema(value_type = Option<Vec<String>>)]
    event_ids: Option<Vec<EventId>>,
    /// Every dead letter of the group.
    all: Option<bool>,
}

impl RedriveBody {
    /// The backend's selector.
    pub(crate) fn into_redrive(self) -> Result<Redrive, ApiError> {
        match (self.event_ids, self.all) {
            (Some(ids), None) => Ok(Redrive::Events(ids)),
            (None, Some(true)) => Ok(Redrive::All),
            _ => Err(ApiError::invalid(
                "redrive",
                "give either {\"event_ids\": [...]} or {\"all\": true}",
            )),
        }
    }
}

/// How many dead letters were made available again.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RedrivenBody {
    /// The count.
    pub(crate) redriven: u64,
}

/// A key parked behind a head that exhausted its attempts
/// (`docs/groups.md#quarantine`).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ParkedKeyBody {
    /// The key; null under `ordering = "partition"`, which parks the whole
    /// partition.
    key: Option<String>,
    /// The head's partition.
    partition: u32,
    /// The head's sequence: the key's events from here on wait.
    sequence: u64,
    /// The head's event id.
    #[schema(value_type = String)]
    event_id: EventId,
    /// Claims the head had.
    attempt: u32,
    /// Its last failure.
    reason: String,
    /// When it was parked.
    #[schema(value_type = String, format = DateTime)]
    parked_at: Timestamp,
}

impl From<ParkedKey> for ParkedKeyBody {
    fn from(p: ParkedKey) -> Self {
        Self {
            key: p.key,
            partition: p.partition,
            sequence: p.sequence,
            event_id: p.event_id,
            attempt: p.attempt,
            reason: p.reason,
            parked_at: p.parked_at,
        }
    }
}

/// The keys a group has parked, in (partition, sequence) order of their heads.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct QuarantineBody {
    /// The parked keys.
    pub(crate) parked: Vec<ParkedKeyBody>,
}

/// Release parked keys: `confirm: true` and exactly one of `keys`,
/// `event_ids` (the parked heads) or `all: true`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReleaseBody {
    /// Must be exactly `true`.
    pub(crate) confirm: bool,
    /// These keys.
    keys: Option<Vec<String>>,
    /// The keys whose parked heads are these events (the way to name a
    /// partition parked under `ordering = "partition"`).
    #[schema(value_type = Option<Vec<String>>)]
    event_ids: Option<Vec<EventId>>,
    /// Every parked key.
    all: Option<bool>,
    /// Send each head to the dead letters and go on with the key's next
    /// event, instead of handing the head out again with its attempts
    /// started over (default false).
    #[serde(default)]
    pub(crate) skip_head: bool,
}

impl ReleaseBody {
    /// Which parked keys.
    pub(crate) fn parked(&self) -> Result<Parked, ApiError> {
        match (&self.keys, &self.event_ids, self.all) {
            (Some(keys), None, None) => Ok(Parked::Keys(keys.clone())),
            (None, Some(ids), None) => Ok(Parked::Events(ids.clone())),
            (None, None, Some(true)) => Ok(Parked::All),
            _ => Err(ApiError::invalid(
                "release",
                "give exactly one of {\"keys\": [...]}, {\"event_ids\": [...]} or {\"all\": true}",
            )),
        }
    }
}

/// What a release did.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReleasedBody {
    /// The keys released, as they were listed.
    pub(crate) released: Vec<ParkedKeyBody>,
    /// Named keys (or event ids) that were not parked: left alone.
    pub(crate) not_parked: Vec<String>,
}
