//! Read-only views of a group: lag, group info and dead letters.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Event, EventId, GroupName, StreamName, Timestamp};

/// Lag of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionLag {
    /// Highest sequence up to which everything (from the group's start) is settled.
    pub frontier: u64,
    /// Last sequence appended to the partition.
    pub high_watermark: u64,
    /// `max(high_watermark − frontier, 0)`.
    pub lag: u64,
}

impl PartitionLag {
    /// Builds the entry, computing `lag`.
    pub fn new(frontier: u64, high_watermark: u64) -> Self {
        Self {
            frontier,
            high_watermark,
            lag: high_watermark.saturating_sub(frontier),
        }
    }
}

/// How far a group is behind, and what its outstanding work looks like.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lag {
    /// The stream.
    pub stream: StreamName,
    /// The group.
    pub group: GroupName,
    /// Sum of the partitions' lag.
    pub lag: u64,
    /// Per selected partition.
    pub partitions: BTreeMap<u32, PartitionLag>,
    /// Events the group has never been handed.
    pub pending: u64,
    /// Deliveries currently leased (expired leases included until re-claimed).
    pub inflight: u64,
    /// Nacked deliveries whose retry is not due yet.
    pub waiting_retry: u64,
    /// Age of the oldest event not yet settled, if any.
    pub oldest_unacked_age_ms: Option<u64>,
}

/// Everything about a group at a glance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupInfo {
    /// The stream.
    pub stream: StreamName,
    /// The group.
    pub group: GroupName,
    /// Attempts allowed per delivery.
    pub max_attempts: u32,
    /// Retry schedule for nacks without a delay.
    pub retry_backoff_ms: Vec<u64>,
    /// Which deliveries may be out at once.
    pub ordering: super::GroupOrdering,
    /// Lag over all partitions.
    pub lag: Lag,
    /// Deliveries currently leased.
    pub inflight: u64,
    /// Deliveries dead-lettered.
    pub dead_letters: u64,
    /// Events the stream's retention removed before this group settled
    /// them (`docs/log.md#retention`), over all partitions.
    pub skipped_by_retention: u64,
    /// Per partition: the next sequence the group will look at.
    pub cursors: BTreeMap<u32, u64>,
}

/// A delivery that will not be retried (rejected, or out of attempts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// The event's id.
    pub event_id: EventId,
    /// Its partition.
    pub partition: u32,
    /// Its sequence.
    pub sequence: u64,
    /// Attempts made.
    pub attempt: u32,
    /// Why (`max_attempts: …`, `max_attempts_expired`, or the rejecter's reason).
    pub reason: String,
    /// When.
    pub dead_lettered_at: Timestamp,
    /// The event itself; `None` once the stream's retention removed it
    /// (`docs/log.md#retention`).
    pub event: Option<Event>,
}

/// A page of dead letters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetterPage {
    /// In (sequence, partition) order.
    pub dead_letters: Vec<DeadLetter>,
    /// Pass as `after` for the next page; `None` when this page was the last.
    pub next: Option<EventId>,
}
