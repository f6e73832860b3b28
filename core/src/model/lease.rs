//! Deliveries, leases and fencing.
//!
//! Every (group, event) pair has one *delivery*, created lazily the first
//! time the group's cursor passes the event. A delivery moves through:
//!
//! ```text
//!                 fetch (attempt += 1, fresh lease_id)
//!   available ───────────────────────────────────────▶ leased
//!      ▲  ▲                                              │ │ │
//!      │  └──────── nack below max_attempts ─────────────┘ │ │
//!      │            (due after delay / backoff)            │ │
//!      │                                                   │ │
//!      │  replay / redrive            ack ◀────────────────┘ │
//!      └──────────────────────────  (terminal)               │
//!                                                            ▼
//!                       reject, nack at max_attempts, expiry at max_attempts
//!                                 ▶ dead-lettered (terminal)
//! ```
//!
//! A lease is the right to settle one delivery. It is identified by a
//! `lease_id` minted fresh on every claim, and every mutation of a leased
//! delivery (ack, nack, reject, renew) is one atomic compare-and-set on
//! (status = leased, lease_id, receipt). That is the fencing rule: once a
//! lease has been superseded (re-claimed after expiry, replayed, reset),
//! its holder's settle fails with `stale_lease` and changes nothing.
//!
//! Expiry alone does not fence. A lease past its `expires_at` that nobody
//! re-claimed can still be settled by its holder; it only makes the delivery
//! *claimable* again. A delivery whose lease expires while it is on its last
//! allowed attempt is dead-lettered (`max_attempts_expired`) instead of being
//! claimed again — the poison guard, so a handler that kills its worker
//! cannot loop forever.
//!
//! The *frontier* of a partition is the highest F such that every sequence
//! from the group's start to F is terminal. It only moves forward by a walk
//! after an ack or dead-letter, and backwards only by replay, redrive or
//! reset. Lag is `high_watermark − frontier`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{
    ConsumerId, Event, EventId, GroupName, LeaseId, StreamName, Timestamp, ValidationError,
};

/// Lease duration when the caller gives none.
pub const DEFAULT_LEASE_MS: u64 = 30_000;
/// Longest lease (12 hours, as SQS's longest visibility timeout): a holder
/// that needs more renews.
pub const MAX_LEASE_MS: u64 = 43_200_000;
/// Leases claimed per fetch when the caller gives no limit.
pub const DEFAULT_FETCH_LIMIT: u32 = 10;
/// Most leases one fetch may claim.
pub const MAX_FETCH_LIMIT: u32 = 1000;
/// Most operations in one batch settle.
pub const MAX_SETTLE_BATCH: usize = 1000;
/// Longest diagnostic reason kept with a nack or dead letter; longer ones are cut.
pub const MAX_REASON_LEN: usize = 1000;

/// A claim on one delivery, handed to one consumer until `expires_at`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    /// The fencing token.
    pub lease_id: LeaseId,
    /// Backend-native settle identity (the lease id on most backends).
    pub receipt: Option<String>,
    /// The stream.
    pub stream: StreamName,
    /// The group.
    pub group: GroupName,
    /// The leased event's id.
    pub event_id: EventId,
    /// Who holds it.
    pub consumer_id: ConsumerId,
    /// How many times this delivery has been claimed, this claim included.
    pub attempt: u32,
    /// When it was claimed.
    pub leased_at: Timestamp,
    /// When it becomes claimable by others.
    pub expires_at: Timestamp,
    /// The event itself (shared: events are immutable).
    pub event: Arc<Event>,
}

impl Lease {
    /// The lease `lease_id` on `event` for `group`, held by `consumer_id`
    /// on its `attempt`th claim. Its receipt is the lease id: backends with
    /// a native settle identity set their own.
    pub fn new(
        group: GroupName,
        event: Arc<Event>,
        lease_id: LeaseId,
        consumer_id: ConsumerId,
        attempt: u32,
        leased_at: Timestamp,
        expires_at: Timestamp,
    ) -> Self {
        Lease {
            receipt: Some(lease_id.as_str().to_owned()),
            lease_id,
            stream: event.stream.clone(),
            group,
            event_id: event.id.clone(),
            consumer_id,
            attempt,
            leased_at,
            expires_at,
            event,
        }
    }

    /// What a settle call needs to name this lease, taking it apart.
    pub fn into_target(self) -> SettleTarget {
        SettleTarget {
            event_id: self.event_id,
            lease_id: self.lease_id,
            receipt: self.receipt,
        }
    }

    /// What a settle call needs to name this lease.
    pub fn target(&self) -> SettleTarget {
        SettleTarget {
            event_id: self.event_id.clone(),
            lease_id: self.lease_id.clone(),
            receipt: self.receipt.clone(),
        }
    }
}

/// The lease a settle or renew applies to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettleTarget {
    /// The event.
    pub event_id: EventId,
    /// The fencing token from the fetch.
    pub lease_id: LeaseId,
    /// The receipt from the fetch, if the caller kept it.
    pub receipt: Option<String>,
}

/// What to do with a leased delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleOp {
    /// Done: terminal, advances the frontier.
    Ack,
    /// Failed, try again: available after `delay_ms` (else the group's
    /// backoff), or dead-lettered when attempts are used up.
    Nack {
        /// Diagnostic.
        reason: Option<String>,
        /// Explicit delay, overriding the group's backoff.
        delay_ms: Option<u64>,
    },
    /// Never going to work: dead-letter it for this group.
    Reject {
        /// Diagnostic.
        reason: Option<String>,
    },
}

impl SettleOp {
    /// The wire name of the operation.
    pub fn name(&self) -> &'static str {
        match self {
            SettleOp::Ack => "ack",
            SettleOp::Nack { .. } => "nack",
            SettleOp::Reject { .. } => "reject",
        }
    }
}

/// One operation of a (batch) settle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// Which lease.
    pub target: SettleTarget,
    /// What to do.
    pub op: SettleOp,
}

impl Settlement {
    /// An ack of `target`.
    pub fn ack(target: SettleTarget) -> Self {
        Self {
            target,
            op: SettleOp::Ack,
        }
    }

    /// Checks reason length and delay bounds.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if let SettleOp::Nack {
            delay_ms: Some(d), ..
        } = self.op
            && d > super::MAX_DELAY_MS
        {
            return Err(ValidationError::new(
                "delay_ms",
                format!("{d} exceeds the maximum of {} ms", super::MAX_DELAY_MS),
            ));
        }
        Ok(())
    }
}

/// Cuts a diagnostic reason to [`MAX_REASON_LEN`] bytes on a char boundary.
pub fn clip_reason(reason: &str) -> String {
    if reason.len() <= MAX_REASON_LEN {
        return reason.to_owned();
    }
    let mut end = MAX_REASON_LEN;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason[..end].to_owned()
}

/// Checks a lease duration.
pub fn validate_lease_ms(lease_ms: u64) -> Result<(), ValidationError> {
    if (1..=MAX_LEASE_MS).contains(&lease_ms) {
        Ok(())
    } else {
        Err(ValidationError::new(
            "lease_ms",
            format!("must be between 1 and {MAX_LEASE_MS} (got {lease_ms})"),
        ))
    }
}

/// Checks a page or batch limit against `max`.
pub fn validate_limit(limit: u32, max: u32) -> Result<(), ValidationError> {
    if (1..=max).contains(&limit) {
        Ok(())
    } else {
        Err(ValidationError::new(
            "limit",
            format!("must be between 1 and {max} (got {limit})"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_clipped_on_a_char_boundary() {
        let long = "é".repeat(MAX_REASON_LEN);
        let clipped = clip_reason(&long);
        assert!(clipped.len() <= MAX_REASON_LEN);
        assert!(clipped.chars().all(|c| c == 'é'));
        assert_eq!(clip_reason("short"), "short");
    }

    #[test]
    fn limits_and_lease_durations_are_bounded() {
        assert!(validate_limit(0, 1000).is_err());
        assert!(validate_limit(1001, 1000).is_err());
        assert!(validate_limit(1000, 1000).is_ok());
        assert!(validate_lease_ms(0).is_err());
        assert!(validate_lease_ms(MAX_LEASE_MS + 1).is_err());
        assert!(validate_lease_ms(DEFAULT_LEASE_MS).is_ok());
    }
}
