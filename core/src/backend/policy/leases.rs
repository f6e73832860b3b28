//! What a page of a group's leases shows (`docs/groups.md#what-is-out-leases`):
//! a store reads the leased deliveries after the cursor, and this decides
//! their order, where the page ends, what `next` is and which leases have
//! expired, the same way for every store.

use crate::model::{ConsumerId, EventId, HeldLease, LeaseCursor, LeaseId, LeasePage, Timestamp};

/// One leased delivery as a store read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    /// Its partition.
    pub partition: u32,
    /// Its sequence.
    pub sequence: u64,
    /// The event's id.
    pub event_id: EventId,
    /// The fencing token.
    pub lease_id: LeaseId,
    /// The consumer the claiming fetch named.
    pub consumer_id: ConsumerId,
    /// Claims so far, this one included.
    pub attempt: u32,
    /// When it was claimed.
    pub leased_at: Timestamp,
    /// When it expires.
    pub expires_at: Timestamp,
    /// Why it is held, kept for a quarantined head
    /// (`docs/groups.md#quarantine`); a store may leave it `None` for a
    /// consumer's lease, and the page shows it only for the quarantine's.
    pub reason: Option<String>,
}

/// Whether a lease expiring at `expires_at` has expired at `now`: from
/// `expires_at` on the delivery is claimable again (`docs/groups.md#claims`).
pub fn lease_expired(expires_at: Timestamp, now: Timestamp) -> bool {
    expires_at <= now
}

/// The page of at most `limit` leases after `after` (exclusive; `None`:
/// from the start) in (partition, sequence) order, judged at `now`.
/// `rows` are leased deliveries a store read, in any order, rows at or
/// before the cursor ignored: every one after it, or at least the first
/// `limit + 1` of them, so that `next` is set exactly when a lease follows
/// the page.
pub fn lease_page(
    rows: Vec<LeaseRow>,
    after: Option<LeaseCursor>,
    limit: u32,
    now: Timestamp,
) -> LeasePage {
    let position = |r: &LeaseRow| LeaseCursor {
        partition: r.partition,
        sequence: r.sequence,
    };
    let mut rows: Vec<LeaseRow> = rows
        .into_iter()
        .filter(|r| after.is_none_or(|a| position(r) > a))
        .collect();
    rows.sort_unstable_by_key(position);
    rows.dedup_by_key(|r| position(r));
    // At least one: the request's validation refuses 0.
    let limit = (limit as usize).max(1);
    let next = (rows.len() > limit).then(|| position(&rows[limit - 1]));
    rows.truncate(limit);
    let leases = rows
        .into_iter()
        .map(|r| HeldLease {
            reason: r.reason.filter(|_| super::is_quarantine(&r.consumer_id)),
            expired: lease_expired(r.expires_at, now),
            lease_id: r.lease_id,
            event_id: r.event_id,
            partition: r.partition,
            sequence: r.sequence,
            consumer_id: r.consumer_id,
            attempt: r.attempt,
            leased_at: r.leased_at,
            expires_at: r.expires_at,
        })
        .collect();
    LeasePage { now, leases, next }
}
