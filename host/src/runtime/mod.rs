//! The handler runtime: one loop per deployed handler that claims leases,
//! runs the handler on them, and settles what it returns.
//!
//! ```text
//!            ┌──────── wake-up (append, nack, replay…) / due time / idle poll
//!            ▼
//!   fetch(free of max_demand) ──▶ held ──▶ dispatch (≤ concurrency) ──▶ handler
//!            ▲                      │                                    │
//!            │   renew_many(held) every max(lease_ms / 2, 50 ms)         ▼
//!            └────────────── settler: one settle call per batch ◀──── outcome
//! ```
//!
//! * **Claiming.** A worker holds at most `max_demand` leases (fetched,
//!   not yet settled) and runs at most `concurrency` at once. It fetches
//!   again when half of `max_demand` is free — one claim call for all the
//!   free places, in the background while held leases run — so a durable
//!   store sees one transaction per batch, not per finished delivery.
//!   When a fetch comes back empty it asks the backend when something next
//!   becomes due (a lease expiring, a retry delay ending) and rests until
//!   then, or until the backend's wake-up hook fires, or at most an idle
//!   interval — never a busy loop. Failed fetches back off 100 ms doubling
//!   to 5 s.
//! * **Leases stay alive** while held: a renewer extends every held lease
//!   each half lease in one `renew_many` call. A renewal that finds the
//!   lease taken (`stale_lease`) marks it lost; its handler's result is
//!   then dropped unsettled, since someone else owns the delivery now.
//! * **Settling** follows [`crate::settle`]: the outcome becomes ack, nack
//!   (with the guest's delay, clamped) or reject; a failed settle is lost,
//!   left to expire, or nacked, by its error. One settler task per worker
//!   writes outcomes in batches — whatever finished while the previous
//!   batch was being written, acks, nacks and rejects together (a group
//!   commit) — each item with its own result. A delivery's place in
//!   `concurrency` is free once its handler returned; its place in
//!   `max_demand` once its outcome is written.
//! * **Versions.** The runtime runs the one version it was last given and
//!   keeps no history: which version is current, which one a rollback
//!   restores and whether a handler is paused are the caller's to know
//!   ([`crate::handlers`] owns them) and to tell. The handler to call is
//!   read from an atomic cell at the start of each delivery; running a new
//!   version swaps the cell, so deliveries already running finish on the
//!   version they started with and new ones get the new one. Nothing is
//!   paused for a swap. A version may carry a canary that takes a share
//!   of the first attempts ([`CanaryVersion`], `docs/handlers.md#canaries`);
//!   judging it is the caller's, from the counts it keeps.
//! * **Draining.** Stop fetching, let held leases run and settle (a fetch
//!   in flight included), bounded by a timeout; what is still running then is abandoned
//!   and its leases expire (at-least-once: another consumer gets them).

mod canary;
mod counters;
mod supervisor;
mod worker;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use canary::{CanaryCounts, CanaryTally, CanaryVersion, SHARE_SCALE};
pub use counters::{Counters, CountersSnapshot};
pub use supervisor::{Runtime, RuntimeError};
pub use worker::{Worker, WorkerControl};

use crate::backend::Partitions;
use crate::model::{ConsumerId, GroupName, GroupOrdering, Lease, StreamName};
use crate::settle::HandlerOutcome;

/// Something that handles one delivery. The WebAssembly runner implements
/// it; so can anything else that turns a lease into an outcome.
#[async_trait]
pub trait Handler: Send + Sync + std::fmt::Debug + 'static {
    /// Runs on one leased delivery and says what to do with it.
    async fn handle(&self, lease: &Lease) -> HandlerOutcome;

    /// Whether it takes several deliveries in one call
    /// ([`Handler::handle_batch`]): the worker then hands it up to the
    /// handler's `batch_size` at a time (`docs/handlers.md#batches`).
    fn batches(&self) -> bool {
        false
    }

    /// Runs on several leased deliveries and says what to do with each, in
    /// the same order; one outcome per lease. By default, [`Handler::handle`]
    /// on each in turn.
    async fn handle_batch(&self, leases: &[Lease]) -> Vec<HandlerOutcome> {
        let mut outcomes = Vec::with_capacity(leases.len());
        for lease in leases {
            outcomes.push(self.handle(lease).await);
        }
        outcomes
    }
}

/// The code a handler runs, and the number its deliveries are counted under.
#[derive(Debug, Clone)]
pub struct Version {
    /// The version number the caller gave it (counters are kept per number).
    pub number: u64,
    /// The code.
    pub handler: Arc<dyn Handler>,
    /// A canary taking a share of the first attempts, if one runs.
    pub canary: Option<CanaryVersion>,
}

impl Version {
    /// `handler` as version `number`, alone.
    pub fn new(number: u64, handler: Arc<dyn Handler>) -> Self {
        Self {
            number,
            handler,
            canary: None,
        }
    }

    /// The code that runs `lease`, its number, and whether it is the
    /// canary; `None` for the last when the delivery is not counted for a
    /// canary (no canary runs, or it is a retry).
    fn pick(&self, lease: &Lease) -> (&Arc<dyn Handler>, u64, Option<bool>) {
        match &self.canary {
            Some(canary) if lease.attempt <= 1 => {
                if canary.takes(&lease.event_id) {
                    (&canary.handler, canary.number, Some(true))
                } else {
                    (&self.handler, self.number, Some(false))
                }
            }
            _ => (&self.handler, self.number, None),
        }
    }
}

/// Longest retry delay a handler may ask for (1 hour); longer requests are clamped.
pub const DEFAULT_MAX_RETRY_DELAY_MS: u64 = 3_600_000;
/// How long a drain waits for in-flight deliveries by default.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest idle sleep between fetches when nothing wakes the worker: a
/// safety net for wake-ups a backend cannot deliver (another process's
/// append on a store without notifications).
pub const DEFAULT_IDLE_POLL: Duration = Duration::from_secs(1);

/// How a handler consumes its group.
#[derive(Debug, Clone)]
pub struct HandlerSettings {
    /// Stream to consume.
    pub stream: StreamName,
    /// Group to consume as.
    pub group: GroupName,
    /// The ordering the group is created with, and must have if it
    /// exists; `None`: whatever it has (a new one: `none`).
    pub ordering: Option<GroupOrdering>,
    /// What a head that exhausts its attempts does, for a new group; an
    /// existing one must have it. `None`: whatever it has.
    pub on_exhausted: Option<crate::model::OnExhausted>,
    /// The flow control a new group gets; an existing one must have it.
    /// `None`: whatever it has.
    pub flow: Option<crate::model::Flow>,
    /// Partitions to claim from.
    pub partitions: Partitions,
    /// Deliveries handled at the same time (calls, when the handler takes
    /// batches).
    pub concurrency: usize,
    /// Most deliveries in one call of a handler that takes batches
    /// ([`Handler::batches`]); 1: one at a time.
    pub batch_size: usize,
    /// How long a batch shorter than `batch_size` waits for more leases
    /// before it is handed over anyway.
    pub batch_wait: Duration,
    /// Leases held at most (fetched but not settled).
    pub max_demand: usize,
    /// Lease duration; renewed every half.
    pub lease_ms: u64,
    /// Longest retry delay a handler may request.
    pub max_retry_delay_ms: u64,
    /// How long a drain waits for in-flight work.
    pub drain_timeout: Duration,
    /// Idle safety-net poll interval.
    pub idle_poll: Duration,
    /// Who the leases are for.
    pub consumer_id: ConsumerId,
}

impl HandlerSettings {
    /// Settings with the manifest's defaults (`docs/handlers.md#manifest`):
    /// concurrency 1, max_demand 10, 30 s leases, all partitions.
    pub fn new(stream: StreamName, group: GroupName, consumer_id: ConsumerId) -> Self {
        Self {
            stream,
            group,
            ordering: None,
            on_exhausted: None,
            flow: None,
            partitions: Partitions::All,
            concurrency: 1,
            batch_size: 1,
            batch_wait: Duration::ZERO,
            max_demand: 10,
            lease_ms: crate::model::DEFAULT_LEASE_MS,
            max_retry_delay_ms: DEFAULT_MAX_RETRY_DELAY_MS,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            idle_poll: DEFAULT_IDLE_POLL,
            consumer_id,
        }
    }

    /// Leases held at once (fetched and not yet settled): `max_demand`.
    pub(crate) fn hold(&self) -> usize {
        self.max_demand.max(1)
    }

    /// How many places must be free before the next fetch: half of
    /// [`Self::hold`], so a durable store sees one claim transaction per
    /// batch rather than one per finished delivery.
    pub(crate) fn refill(&self) -> usize {
        (self.hold() / 2).max(1)
    }

    /// Interval between renewals: half a lease, at least 50 ms.
    pub(crate) fn renew_every(&self) -> Duration {
        Duration::from_millis((self.lease_ms / 2).max(50))
    }
}
