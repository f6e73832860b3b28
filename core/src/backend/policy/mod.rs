//! The semantic rules every backend follows, as pure functions.
//!
//! A backend stores and makes atomic; it decides nothing on its own. Where a
//! batch of events lands and which of its ids are new, where a group starts,
//! what an ack, nack or reject writes, when an expired lease is poison, how
//! claims are shared among partitions ([`Share`]), which delivery heads a
//! gate ([`regate`], [`GateWalk`]), whether a lease still holds
//! ([`fence`]), where the frontier stands and how lag adds up, what a
//! page of leases shows ([`lease_page`]): each is
//! decided here once, table-tested here, and called by every store.
//! The rules themselves are described in `docs/groups.md` and `docs/log.md`.

mod fence;
mod gates;
mod leases;
mod pace;
mod retention;
mod share;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

pub use fence::{Held, fence};
pub use gates::{GateState, GateView, GateWalk, Gating, Regate, WALK_PER_CLAIM, regate};
pub use leases::{LeaseRow, lease_expired, lease_page};
pub use pace::{Candidate, Pace, Pacer, pace, take_token};
pub use retention::{TrimInputs, skipped_by_trim, trim_point};
pub use share::{Share, claim_capacity, round_robin};

use super::{Error, Result};
use crate::model::{
    Appended, ConsumerId, Event, EventId, EventInput, Group, GroupName, Lag, LeaseId, OnExhausted,
    PartitionLag, SettleOp, Settlement, StartAfter, StartPosition, StreamName, Timestamp,
    backoff_ms, route,
};

/// Validates every input of an append batch and picks its partition
/// (`docs/log.md#append`); one bad event refuses the whole batch.
pub fn route_batch(
    events: Vec<EventInput>,
    partition_count: u32,
) -> Result<Vec<(EventInput, u32)>> {
    events
        .into_iter()
        .map(|input| {
            input.validate()?;
            let partition = route(&input, partition_count)?;
            Ok((input, partition))
        })
        .collect()
}

/// Which inputs of a routed batch are new, and how many sequences each
/// partition needs.
#[derive(Debug)]
pub struct AppendPlan {
    /// Per input: true when it must be written (false: its id is known, or
    /// repeats an earlier input of the batch; either way it is a duplicate).
    pub fresh: Vec<bool>,
    /// New events per partition.
    pub per_partition: BTreeMap<u32, u64>,
}

/// Plans a routed batch given the ids that already exist in the stream.
pub fn plan_append(routed: &[(EventInput, u32)], known: &HashSet<EventId>) -> AppendPlan {
    let mut seen: HashSet<&EventId> = HashSet::new();
    let mut per_partition = BTreeMap::new();
    let fresh = routed
        .iter()
        .map(|(input, partition)| {
            let fresh = match &input.id {
                Some(id) => !known.contains(id) && seen.insert(id),
                None => true,
            };
            if fresh {
                *per_partition.entry(*partition).or_insert(0) += 1;
            }
            fresh
        })
        .collect();
    AppendPlan {
        fresh,
        per_partition,
    }
}

/// The answer of an append: per input, the event stored now (`Ok`) or, for
/// a duplicate (`Err(id)`), the one stored before under that id — found in
/// `known`, which holds the stream's earlier events and this batch's.
pub fn appended(
    slots: Vec<std::result::Result<Arc<Event>, EventId>>,
    known: &HashMap<EventId, Arc<Event>>,
) -> Vec<Appended> {
    slots
        .into_iter()
        .map(|slot| match slot {
            Ok(event) => Appended {
                event,
                duplicate: false,
            },
            Err(id) => Appended {
                event: Arc::clone(&known[&id]),
                duplicate: true,
            },
        })
        .collect()
}

/// The positions of event ids an operation names (redrive, replay by ids):
/// every id must be in the stream, else the call is `invalid` and names
/// the ones that are not. `found` pairs each id with its position, if any.
pub fn all_located<'a>(
    found: impl IntoIterator<Item = (&'a str, Option<(u32, u64)>)>,
) -> Result<Vec<(u32, u64)>> {
    let mut out = Vec::new();
    let mut unknown = Vec::new();
    for (id, position) in found {
        match position {
            Some(position) => out.push(position),
            None => unknown.push(id),
        }
    }
    if unknown.is_empty() {
        Ok(out)
    } else {
        Err(Error::invalid(
            "event_ids",
            format!("not in this stream: {}", unknown.join(", ")),
        ))
    }
}

/// Checks a start position against the stream (`docs/groups.md#groups-and-start-positions`):
/// a per-partition map may only name partitions the stream has. Returns
/// the instant whose per-partition [`Marks`] the caller must look up before
/// calling [`start_points`], for a `start_at`.
pub fn start_lookup(start: &StartPosition, partition_count: u32) -> Result<Option<Timestamp>> {
    match start {
        StartPosition::After(StartAfter::PerPartition(map)) => {
            match map.keys().find(|p| **p >= partition_count) {
                Some(p) => Err(Error::InvalidPartition {
                    partition: *p,
                    partition_count,
                }),
                None => Ok(None),
            }
        }
        StartPosition::At(t) => Ok(Some(*t)),
        StartPosition::Beginning | StartPosition::After(StartAfter::All(_)) => Ok(None),
    }
}

/// What a `start_at` needs to know of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Marks {
    /// The first sequence whose timestamp is at or after the instant.
    pub first_at_or_after: Option<u64>,
    /// The partition's last sequence.
    pub high_watermark: u64,
}

/// The exclusive start sequence of every partition: the group's cursor
/// starts one past it, and so does its frontier. `marks[p]` is read only
/// for a `start_at` (see [`start_lookup`]); a partition with no event at or
/// after the instant starts at its end, so only new events reach the group.
pub fn start_points(start: &StartPosition, partition_count: u32, marks: &[Marks]) -> Vec<u64> {
    (0..partition_count)
        .map(|p| match start {
            StartPosition::Beginning => 0,
            StartPosition::After(after) => after.for_partition(p),
            StartPosition::At(_) => {
                let m = marks.get(p as usize).copied().unwrap_or_default();
                m.first_at_or_after.map_or(m.high_watermark, |seq| seq - 1)
            }
        })
        .collect()
}

/// Start points below the log start raised to it (`docs/log.md#retention`):
/// a group (or a reset) starting before the first stored event of a
/// partition starts just before it. `firsts[p]` is the partition's first
/// stored sequence.
pub fn clamp_starts(starts: Vec<u64>, firsts: &[u64]) -> Vec<u64> {
    starts
        .into_iter()
        .enumerate()
        .map(|(p, start)| start.max(firsts.get(p).map_or(0, |f| f - 1)))
        .collect()
}

/// What a settle or renew of an event the stream does not hold answers:
/// `event_removed` once retention has removed events of the stream (any
/// first sequence past 1: the event is most likely one of them),
/// `stale_lease` otherwise (`docs/log.md#retention`).
pub fn unknown_event(id: &EventId, firsts: &[u64]) -> Error {
    if firsts.iter().any(|f| *f > 1) {
        Error::EventRemoved(id.as_str().to_owned())
    } else {
        Error::StaleLease
    }
}

/// A group's retry policy, as settles and the poison guard need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// Deliveries an event gets before it is dead-lettered.
    pub max_attempts: u32,
    /// The delay before each retry, the last one repeating.
    pub retry_backoff_ms: Vec<u64>,
    /// Which deliveries may be out together (`docs/groups.md#ordering`).
    pub ordering: crate::model::GroupOrdering,
    /// What a gated head that exhausts its attempts does
    /// (`docs/groups.md#quarantine`).
    pub on_exhausted: OnExhausted,
    /// Its flow control (`docs/groups.md#flow`).
    pub flow: crate::model::Flow,
}

impl GroupConfig {
    /// How its deliveries pass gates: its ordering's, or its flow's.
    pub fn gating(&self) -> Gating {
        Gating::new(self.ordering, &self.flow)
    }
}

impl From<&Group> for GroupConfig {
    fn from(g: &Group) -> Self {
        Self {
            max_attempts: g.max_attempts,
            retry_backoff_ms: g.retry_backoff_ms.clone(),
            ordering: g.ordering,
            on_exhausted: g.on_exhausted,
            flow: g.flow,
        }
    }
}

/// The write a settle operation turns into (`docs/groups.md#settle-policy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Terminal: acked.
    Ack,
    /// Back to available, due at `due` (`None`: claimable at once).
    Retry {
        /// When it may go out again (`None`: at once).
        due: Option<Timestamp>,
        /// Why it was not acked, kept on the delivery.
        reason: String,
    },
    /// Terminal: dead-lettered with this reason.
    Dead(String),
    /// The head exhausted its attempts under `on_exhausted = "quarantine"`
    /// (`docs/groups.md#quarantine`): it stays leased, to
    /// [`QUARANTINE_CONSUMER`] until [`quarantine_until`] under a fresh
    /// lease id, with this reason kept, so its gate stays shut.
    Quarantine(String),
}

impl Write {
    /// Whether the write makes the delivery claimable right away (so
    /// waiting consumers should be woken).
    pub fn requeues(&self) -> bool {
        matches!(self, Write::Retry { due: None, .. })
    }
}

/// Whether a settle batch is the common case: acks of distinct events
/// with no receipt to check (or the lease's own), which a backend may apply
/// with one fenced bulk write instead of item by item.
pub fn plain_acks(items: &[Settlement]) -> bool {
    let mut seen = HashSet::new();
    !items.is_empty()
        && items.iter().all(|i| {
            i.op == SettleOp::Ack
                && i.target
                    .receipt
                    .as_deref()
                    .is_none_or(|r| r == i.target.lease_id.as_str())
                && seen.insert(i.target.event_id.as_str())
        })
}

/// What `op` on a leased delivery at `attempt` writes under `config`;
/// `gated`: the delivery belongs to a gate (`docs/groups.md#ordering`).
pub fn settle_write(
    op: SettleOp,
    attempt: u32,
    gated: bool,
    config: &GroupConfig,
    now: Timestamp,
) -> Write {
    match op {
        SettleOp::Ack => Write::Ack,
        SettleOp::Reject { reason } => Write::Dead(reason.unwrap_or_else(|| "rejected".into())),
        SettleOp::Nack { reason, delay_ms } => {
            let reason = reason.unwrap_or_else(|| "retry".into());
            if attempt >= config.max_attempts {
                return exhausted(format!("max_attempts: {reason}"), gated, config);
            }
            let delay = delay_ms.unwrap_or_else(|| backoff_ms(&config.retry_backoff_ms, attempt));
            Write::Retry {
                due: (delay > 0).then(|| now.add_ms(delay)),
                reason,
            }
        }
    }
}

/// The dead-letter reason of the poison guard (`docs/groups.md#poison-guard`).
pub const POISON_REASON: &str = "max_attempts_expired";

/// The consumer that holds a quarantined head (`docs/groups.md#quarantine`);
/// no fetch may name it.
pub const QUARANTINE_CONSUMER: &str = "rheo:quarantine";

/// Whether `consumer` is the quarantine's.
pub fn is_quarantine(consumer: &ConsumerId) -> bool {
    consumer.as_str() == QUARANTINE_CONSUMER
}

/// The quarantine's consumer id.
pub fn quarantine_consumer() -> ConsumerId {
    ConsumerId::parse(QUARANTINE_CONSUMER).expect("a valid consumer id")
}

/// When a quarantine's hold on a head expires: never, in practice
/// (9999-12-31T23:59:59.999Z, the last instant a timestamp may name).
pub fn quarantine_until() -> Timestamp {
    Timestamp::MAX
}

/// The quarantine's hold on a head (`docs/groups.md#quarantine`): what a
/// store writes over the delivery's lease when [`Write::Quarantine`] says
/// to, so that every store holds a head the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// A fresh fencing token: the former holder's lease is stale.
    pub lease_id: LeaseId,
    /// [`QUARANTINE_CONSUMER`].
    pub consumer_id: ConsumerId,
    /// When it was parked.
    pub leased_at: Timestamp,
    /// [`quarantine_until`]: never, so no claim and no poison guard takes it.
    pub expires_at: Timestamp,
    /// The head's last failure, clipped as every reason is.
    pub reason: String,
}

impl Hold {
    /// The hold written at `now` for a head that failed with `reason`.
    pub fn new(reason: &str, now: Timestamp) -> Self {
        Hold {
            lease_id: LeaseId::generate(),
            consumer_id: quarantine_consumer(),
            leased_at: now,
            expires_at: quarantine_until(),
            reason: crate::model::clip_reason(reason),
        }
    }
}

/// What a delivery that used its last attempt writes (a nack on it, or
/// its lease expiring: the poison guard): a dead letter with `reason`,
/// or, when it is gated and its group quarantines, a quarantine that
/// keeps its gate shut (`docs/groups.md#quarantine`).
pub fn exhausted(reason: String, gated: bool, config: &GroupConfig) -> Write {
    if gated && config.on_exhausted == OnExhausted::Quarantine {
        Write::Quarantine(reason)
    } else {
        Write::Dead(reason)
    }
}

/// What the poison guard writes for an expired lease on its last attempt
/// ([`poisoned`]): see [`exhausted`].
pub fn poison_write(gated: bool, config: &GroupConfig) -> Write {
    exhausted(POISON_REASON.to_owned(), gated, config)
}

/// Whether an expired lease on its `attempt`th claim is poison: it goes to
/// the dead letters instead of being claimed again. SQL stores apply the
/// same comparison in their statement (`attempt >= max_attempts`).
pub fn poisoned(attempt: u32, max_attempts: u32) -> bool {
    attempt >= max_attempts
}

/// The frontier of a partition (`docs/groups.md#frontier-and-lag`): one
/// less than its lowest open delivery, or than the cursor when none is
/// open. Every sequence below the cursor that belongs to the group has a
/// delivery; one without lies before the group's start and counts as settled.
pub fn frontier(first_open: Option<u64>, cursor: u64) -> u64 {
    first_open.unwrap_or(cursor).min(cursor).saturating_sub(1)
}

/// Open deliveries of one partition, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenCounts {
    /// Lowest open (available or leased) sequence.
    pub first_open: Option<u64>,
    /// Leased, expired or not.
    pub leased: u64,
    /// Available and never delivered.
    pub fresh: u64,
    /// Available but not due yet.
    pub waiting: u64,
}

/// Builds a [`Lag`] partition by partition.
#[derive(Debug)]
pub struct LagBuilder {
    /// What has been added so far.
    pub lag: Lag,
}

impl LagBuilder {
    /// An empty lag of `group` on `stream`.
    pub fn new(stream: &StreamName, group: &GroupName) -> Self {
        Self {
            lag: Lag {
                stream: stream.clone(),
                group: group.clone(),
                lag: 0,
                partitions: BTreeMap::new(),
                pending: 0,
                inflight: 0,
                waiting_retry: 0,
                oldest_unacked_age_ms: None,
            },
        }
    }

    /// Adds a partition with cursor `cursor` and high watermark `hw`;
    /// returns its frontier. Pending counts the events past the cursor and
    /// the available deliveries never handed out.
    pub fn add(&mut self, partition: u32, cursor: u64, hw: u64, open: OpenCounts) -> u64 {
        let frontier = frontier(open.first_open, cursor);
        let entry = PartitionLag::new(frontier, hw);
        self.lag.lag += entry.lag;
        self.lag.partitions.insert(partition, entry);
        self.lag.pending += hw.saturating_sub(cursor.saturating_sub(1)) + open.fresh;
        self.lag.inflight += open.leased;
        self.lag.waiting_retry += open.waiting;
        frontier
    }

    /// Records the timestamp of a partition's first unsettled event.
    pub fn unsettled_since(&mut self, event_time: Timestamp, now: Timestamp) {
        let age = now.ms_since(event_time);
        self.lag.oldest_unacked_age_ms =
            Some(self.lag.oldest_unacked_age_ms.map_or(age, |a| a.max(age)));
    }
}

#[cfg(test)]
mod tests;
