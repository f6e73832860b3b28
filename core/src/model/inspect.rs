//! Read-only views of a group: lag, group info, dead letters and leases.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ConsumerId, Event, EventId, GroupName, LeaseId, StreamName, Timestamp};

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
    /// What a gated head that exhausts its attempts does.
    pub on_exhausted: super::OnExhausted,
    /// Its flow control (`docs/groups.md#flow`).
    #[serde(default)]
    pub flow: super::Flow,
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

/// Where a page of a group's leases starts: after this partition and
/// sequence, in (partition, sequence) order
/// (`docs/groups.md#what-is-out-leases`). On the wire it is
/// `"<partition>:<sequence>"`, e.g. `"0:41"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LeaseCursor {
    /// The partition of the last lease of the previous page.
    pub partition: u32,
    /// Its sequence.
    pub sequence: u64,
}

/// What a lease cursor on the wire looks like: two runs of digits around
/// a colon (the OpenAPI document states it).
pub const LEASE_CURSOR_PATTERN: &str = "^[0-9]{1,20}:[0-9]{1,20}$";

impl LeaseCursor {
    /// Its wire form, `"<partition>:<sequence>"`.
    pub fn encode(&self) -> String {
        format!("{}:{}", self.partition, self.sequence)
    }

    /// Reads `"<partition>:<sequence>"` ([`LEASE_CURSOR_PATTERN`]). A
    /// number past what the stream can hold reads as the end of it: a
    /// partition past `u32::MAX` as the last one there can be, a sequence
    /// past [`MAX_SEQUENCE`](super::MAX_SEQUENCE) as that (nothing lies
    /// beyond either), so every text of the pattern is a cursor.
    pub fn parse(text: &str) -> Result<Self, super::ValidationError> {
        let bad = || {
            super::ValidationError::new(
                "after",
                format!(
                    "a lease cursor is \"<partition>:<sequence>\", e.g. \"0:41\" \
                     (pass the previous page's next; got {text:?})"
                ),
            )
        };
        let (p, seq) = text.split_once(':').ok_or_else(bad)?;
        let digits = |s: &str| (1..=20).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(p) || !digits(seq) {
            return Err(bad());
        }
        // Twenty digits hold any u64 but not every u128 of twenty digits
        // is one: read wide, then saturate.
        let wide = |s: &str| s.parse::<u128>().map_err(|_| bad());
        Ok(LeaseCursor {
            partition: u32::try_from(wide(p)?).unwrap_or(u32::MAX),
            sequence: u64::try_from(wide(seq)?)
                .unwrap_or(u64::MAX)
                .min(super::MAX_SEQUENCE),
        })
    }
}

impl TryFrom<String> for LeaseCursor {
    type Error = super::ValidationError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::parse(&text)
    }
}

impl From<LeaseCursor> for String {
    fn from(at: LeaseCursor) -> String {
        at.encode()
    }
}

impl std::fmt::Display for LeaseCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.partition, self.sequence)
    }
}

/// A lease a group has out now (`docs/groups.md#what-is-out-leases`): a
/// delivery leased and not settled, claimed again or dead-lettered since.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldLease {
    /// The fencing token.
    pub lease_id: LeaseId,
    /// The leased event's id.
    pub event_id: EventId,
    /// Its partition.
    pub partition: u32,
    /// Its sequence.
    pub sequence: u64,
    /// Who holds it: the `consumer_id` of the fetch that claimed it.
    pub consumer_id: ConsumerId,
    /// Claims of this delivery so far, this one included.
    pub attempt: u32,
    /// When it was claimed.
    pub leased_at: Timestamp,
    /// When others may claim it (a renewal moves it).
    pub expires_at: Timestamp,
    /// `expires_at` has passed on the store's clock: the next fetch may
    /// claim the delivery again (or, on its last attempt, dead-letter it),
    /// but until one does the holder may still settle or renew it.
    pub expired: bool,
    /// Why a head held by quarantine is parked (`docs/groups.md#quarantine`):
    /// its last failure. `None` for a consumer's lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A key parked behind a head that exhausted its attempts
/// (`docs/groups.md#quarantine`): nothing of it goes out until released.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParkedKey {
    /// The key (`None` under `ordering = "partition"`, which parks the
    /// whole partition).
    pub key: Option<String>,
    /// The head's partition.
    pub partition: u32,
    /// The head's sequence: the key's events from here on wait.
    pub sequence: u64,
    /// The head's event id.
    pub event_id: EventId,
    /// Claims the head had.
    pub attempt: u32,
    /// Its last failure.
    pub reason: String,
    /// When it was parked.
    pub parked_at: Timestamp,
}

/// A page of a group's leases, in (partition, sequence) order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeasePage {
    /// The store clock's time the page was read at: what `expired` was
    /// judged by.
    pub now: Timestamp,
    /// The leases.
    pub leases: Vec<HeldLease>,
    /// Pass as `after` for the next page; `None` when no lease follows.
    pub next: Option<LeaseCursor>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_cursors_read_back_what_they_write_and_saturate_past_the_end() {
        let at = LeaseCursor {
            partition: 3,
            sequence: 41,
        };
        assert_eq!(at.encode(), "3:41");
        assert_eq!(LeaseCursor::parse("3:41").unwrap(), at);
        assert_eq!(LeaseCursor::parse("003:0041").unwrap(), at);
        let end = LeaseCursor::parse("99999999999999999999:99999999999999999999").unwrap();
        assert_eq!(
            (end.partition, end.sequence),
            (u32::MAX, super::super::MAX_SEQUENCE)
        );
        for bad in ["", "3", "3:", ":4", "a:1", "1:-1", "1:2:3", " 1:2", "1:2 "] {
            let e = LeaseCursor::parse(bad).unwrap_err();
            assert_eq!(e.field, "after", "{bad:?}");
        }
        // Every text of the pattern is a cursor (twenty digits of nines included).
        assert_eq!(LEASE_CURSOR_PATTERN, "^[0-9]{1,20}:[0-9]{1,20}$");
    }
}
