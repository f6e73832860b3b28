//! Fetching, settling, renewing and listing leases on the wire.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::events::EventBody;
use crate::api::error::{ApiError, ErrorDetail};
use crate::backend;
use crate::model::{
    ConsumerId, EventId, GroupName, HeldLease, Lease, LeaseCursor, LeaseId, LeasePage, SettleOp,
    SettleTarget, Settlement, StreamName, Timestamp,
};

/// Claim leases. Every field is optional; an empty body means the defaults.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FetchBody {
    /// At most this many leases (default 10, max 1000).
    #[serde(default, deserialize_with = "super::whole::opt")]
    pub(crate) limit: Option<u32>,
    /// Who holds them (default: a generated id).
    #[schema(value_type = Option<String>)]
    pub(crate) consumer_id: Option<ConsumerId>,
    /// How long they last (default 30000).
    #[serde(default, deserialize_with = "super::whole::opt")]
    pub(crate) lease_ms: Option<u64>,
    /// Where to claim from (default all; `[]` selects nothing).
    #[serde(default, deserialize_with = "super::whole::opt_vec")]
    pub(crate) partitions: Option<Vec<u32>>,
    /// When nothing is claimable, wait up to this long for new events or
    /// expiries (default 0, max 30000).
    #[serde(default, deserialize_with = "super::whole::opt")]
    pub(crate) wait_ms: Option<u64>,
}

/// A lease: the right to settle one delivery until `expires_at`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LeaseBody {
    /// The fencing token.
    #[schema(value_type = String)]
    lease_id: LeaseId,
    /// Backend-native settle identity; pass it back with the lease id.
    receipt: Option<String>,
    /// The stream.
    #[schema(value_type = String)]
    stream: StreamName,
    /// The group.
    #[schema(value_type = String)]
    group: GroupName,
    /// The leased event's id.
    #[schema(value_type = String)]
    event_id: EventId,
    /// Who holds it.
    #[schema(value_type = String)]
    consumer_id: ConsumerId,
    /// Claims of this delivery so far, this one included.
    attempt: u32,
    /// When it was claimed.
    #[schema(value_type = String, format = DateTime)]
    leased_at: Timestamp,
    /// When others may claim it.
    #[schema(value_type = String, format = DateTime)]
    expires_at: Timestamp,
    /// The event.
    event: EventBody,
}

impl From<Lease> for LeaseBody {
    fn from(l: Lease) -> Self {
        Self {
            event: EventBody::from(l.event.as_ref()),
            lease_id: l.lease_id,
            receipt: l.receipt,
            stream: l.stream,
            group: l.group,
            event_id: l.event_id,
            consumer_id: l.consumer_id,
            attempt: l.attempt,
            leased_at: l.leased_at,
            expires_at: l.expires_at,
        }
    }
}

/// Claimed leases, sorted by (partition, sequence).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LeaseListBody {
    /// The leases.
    pub(crate) leases: Vec<LeaseBody>,
}

/// The lease fields every settle body starts with: the event, the fencing
/// token and, if the caller kept it, the receipt. (Written out in each body
/// rather than flattened: serde cannot refuse unknown fields through
/// `flatten`.)
macro_rules! lease_body {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Deserialize, ToSchema)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct $name {
            /// The leased event.
            #[schema(value_type = String)]
            pub(crate) event_id: EventId,
            /// The lease's fencing token.
            #[schema(value_type = String)]
            pub(crate) lease_id: LeaseId,
            /// The lease's receipt, if kept.
            pub(crate) receipt: Option<String>,
            $($(#[$fdoc])* pub(crate) $field: $ty,)*
        }

        impl $name {
            /// The lease it names.
            pub(crate) fn target(&self) -> SettleTarget {
                SettleTarget {
                    event_id: self.event_id.clone(),
                    lease_id: self.lease_id.clone(),
                    receipt: self.receipt.clone(),
                }
            }
        }
    };
}

lease_body!(
    /// Acknowledge a lease.
    AckBody {}
);

lease_body!(
    /// Give a lease back for a retry.
    NackBody {
        /// Why (kept with a dead letter if attempts are used up).
        reason: Option<String>,
        /// Retry after this long (default: the group's backoff).
        #[serde(default, deserialize_with = "super::whole::opt")]
        delay_ms: Option<u64>,
    }
);

lease_body!(
    /// Dead-letter a lease.
    RejectBody {
        /// Why.
        reason: Option<String>,
    }
);

lease_body!(
    /// Extend a lease.
    RenewBody {
        /// New duration from now (default 30000).
        #[serde(default, deserialize_with = "super::whole::opt")]
        lease_ms: Option<u64>,
    }
);

/// What to do with a lease in a batch settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SettleOpName {
    /// Done.
    Ack,
    /// Retry.
    Nack,
    /// Dead-letter.
    Reject,
}

/// One operation of a batch settle.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SettlementBody {
    /// `ack`, `nack` or `reject`.
    op: SettleOpName,
    /// The leased event.
    #[schema(value_type = String)]
    event_id: EventId,
    /// The lease's fencing token.
    #[schema(value_type = String)]
    lease_id: LeaseId,
    /// The lease's receipt, if kept.
    receipt: Option<String>,
    /// Nack and reject: why.
    reason: Option<String>,
    /// Nack only: retry after this long.
    #[serde(default, deserialize_with = "super::whole::opt")]
    delay_ms: Option<u64>,
}

/// Many settle operations in one request (at most 1000).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SettleBody {
    /// Applied in order; each gets its own result.
    pub(crate) settlements: Vec<SettlementBody>,
}

impl SettleBody {
    /// The backend's settlements; a field that does not fit its operation
    /// refuses the whole request (it is a malformed request, not an outcome).
    pub(crate) fn into_settlements(self) -> Result<Vec<Settlement>, ApiError> {
        self.settlements
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let op = match s.op {
                    SettleOpName::Ack if s.reason.is_some() || s.delay_ms.is_some() => {
                        return Err(ApiError::invalid(
                            format!("settlements[{i}]"),
                            "ack takes no reason or delay_ms",
                        ));
                    }
                    SettleOpName::Reject if s.delay_ms.is_some() => {
                        return Err(ApiError::invalid(
                            format!("settlements[{i}]"),
                            "reject takes no delay_ms",
                        ));
                    }
                    SettleOpName::Ack => SettleOp::Ack,
                    SettleOpName::Nack => SettleOp::Nack {
                        reason: s.reason,
                        delay_ms: s.delay_ms,
                    },
                    SettleOpName::Reject => SettleOp::Reject { reason: s.reason },
                };
                let target = SettleTarget {
                    event_id: s.event_id,
                    lease_id: s.lease_id,
                    receipt: s.receipt,
                };
                Ok(Settlement { target, op })
            })
            .collect()
    }
}

/// The outcome of one settle operation.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SettleResultBody {
    /// The event it was for.
    #[schema(value_type = String)]
    event_id: EventId,
    /// Whether it was applied.
    ok: bool,
    /// Why not (absent when applied).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorDetail>,
}

/// Per-operation outcomes, in request order.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SettleResultsBody {
    /// One per settlement.
    results: Vec<SettleResultBody>,
}

impl SettleResultsBody {
    /// Pairs each settlement's event with its result.
    pub(crate) fn new(event_ids: Vec<EventId>, results: Vec<backend::Result<()>>) -> Self {
        let results = event_ids
            .into_iter()
            .zip(results)
            .map(|(event_id, result)| match result {
                Ok(()) => SettleResultBody {
                    event_id,
                    ok: true,
                    error: None,
                },
                Err(e) => SettleResultBody {
                    event_id,
                    ok: false,
                    error: Some(ErrorDetail::of(&ApiError::Backend(e))),
                },
            })
            .collect();
        Self { results }
    }
}

/// A page of the leases a group has out (`docs/groups.md#what-is-out-leases`).
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct LeasePageParams {
    /// Page size (default 100, max 1000).
    pub(crate) limit: Option<u32>,
    /// The previous page's `next`, `<partition>:<sequence>` (e.g. `0:41`):
    /// the page starts after that position.
    pub(crate) after: Option<String>,
}

impl LeasePageParams {
    /// Where the page starts (`None`: at the first lease).
    pub(crate) fn after(&self) -> Result<Option<LeaseCursor>, ApiError> {
        Ok(self.after.as_deref().map(LeaseCursor::parse).transpose()?)
    }
}

/// A lease a group has out now: a delivery leased and not settled,
/// claimed again or dead-lettered since.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HeldLeaseBody {
    /// The fencing token.
    #[schema(value_type = String)]
    lease_id: LeaseId,
    /// The leased event's id.
    #[schema(value_type = String)]
    event_id: EventId,
    /// Its partition.
    partition: u32,
    /// Its sequence.
    sequence: u64,
    /// Who holds it: the `consumer_id` of the fetch that claimed it.
    #[schema(value_type = String)]
    consumer_id: ConsumerId,
    /// Claims of this delivery so far, this one included.
    attempt: u32,
    /// When it was claimed.
    #[schema(value_type = String, format = DateTime)]
    leased_at: Timestamp,
    /// When others may claim it (a renewal moves it).
    #[schema(value_type = String, format = DateTime)]
    expires_at: Timestamp,
    /// Milliseconds from `leased_at` to the page's `now`.
    age_ms: u64,
    /// Milliseconds from the page's `now` to `expires_at`; 0 once expired.
    expires_in_ms: u64,
    /// `expires_at` has passed: the next fetch may claim the delivery again
    /// (or dead-letter it on its last attempt), but until one does the
    /// holder may still ack, nack, reject or renew it.
    expired: bool,
    /// Only on a head the quarantine holds (`consumer_id`
    /// `rheo:quarantine`): its last failure (`docs/groups.md#quarantine`).
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

impl HeldLeaseBody {
    fn new(l: HeldLease, now: Timestamp) -> Self {
        Self {
            age_ms: now.ms_since(l.leased_at),
            expires_in_ms: l.expires_at.ms_since(now),
            lease_id: l.lease_id,
            event_id: l.event_id,
            partition: l.partition,
            sequence: l.sequence,
            consumer_id: l.consumer_id,
            attempt: l.attempt,
            leased_at: l.leased_at,
            expires_at: l.expires_at,
            expired: l.expired,
            reason: l.reason,
        }
    }
}

/// A page of a group's leases, in (partition, sequence) order.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LeasePageBody {
    /// The server's clock when the page was read: what `age_ms`,
    /// `expires_in_ms` and `expired` are measured against.
    #[schema(value_type = String, format = DateTime)]
    now: Timestamp,
    /// The leases.
    leases: Vec<HeldLeaseBody>,
    /// Pass as `after` for the next page; null when no lease follows.
    #[schema(value_type = Option<String>)]
    next: Option<LeaseCursor>,
}

impl From<LeasePage> for LeasePageBody {
    fn from(page: LeasePage) -> Self {
        let now = page.now;
        Self {
            now,
            leases: (page.leases.into_iter())
                .map(|l| HeldLeaseBody::new(l, now))
                .collect(),
            next: page.next,
        }
    }
}
