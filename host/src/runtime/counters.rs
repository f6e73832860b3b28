//! Per-handler counters, in total and per version (so a hot swap shows how
//! much each version handled).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::Serialize;

use crate::metrics::{CALL_BUCKETS, Timing};
use crate::settle::{HandlerFailure, HandlerOutcome};

/// Counts for one handler; cheap to update from many tasks.
#[derive(Debug)]
pub struct Counters {
    total: Tally,
    inflight: AtomicU64,
    versions: Mutex<BTreeMap<u64, Arc<Tally>>>,
    /// How long each guest call took.
    calls: Timing,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            total: Tally::default(),
            inflight: AtomicU64::new(0),
            versions: Mutex::default(),
            calls: Timing::new(CALL_BUCKETS),
        }
    }
}

#[derive(Debug, Default)]
struct Tally {
    processed: AtomicU64,
    acked: AtomicU64,
    retried: AtomicU64,
    rejected: AtomicU64,
    trapped: AtomicU64,
    timed_out: AtomicU64,
    lost: AtomicU64,
    settle_errors: AtomicU64,
}

/// A point-in-time copy of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CountersSnapshot {
    /// Deliveries the handler finished (whatever the outcome).
    pub processed: u64,
    /// Acked.
    pub acked: u64,
    /// Nacked for a retry (the handler asked, or it failed).
    pub retried: u64,
    /// Rejected to the dead letters by the handler.
    pub rejected: u64,
    /// Trapped, panicked, or hit a memory or fuel limit.
    pub trapped: u64,
    /// Stopped at the handler's timeout.
    pub timed_out: u64,
    /// Leases lost to another consumer before settling (result dropped).
    pub lost: u64,
    /// Settles that failed and were left to expire or nacked.
    pub settle_errors: u64,
    /// Deliveries being handled right now (totals only).
    pub inflight: u64,
}

/// What became of one delivery, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Acked,
    Retried,
    Rejected,
    Lost,
    SettleError,
}

impl Tally {
    fn snapshot(&self) -> CountersSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CountersSnapshot {
            processed: get(&self.processed),
            acked: get(&self.acked),
            retried: get(&self.retried),
            rejected: get(&self.rejected),
            trapped: get(&self.trapped),
            timed_out: get(&self.timed_out),
            lost: get(&self.lost),
            settle_errors: get(&self.settle_errors),
            inflight: 0,
        }
    }

    fn record(&self, outcome: &HandlerOutcome, fate: Fate) {
        let bump = |c: &AtomicU64| {
            c.fetch_add(1, Ordering::Relaxed);
        };
        bump(&self.processed);
        match outcome {
            HandlerOutcome::Failed(HandlerFailure::Timeout { .. }) => bump(&self.timed_out),
            HandlerOutcome::Failed(_) => bump(&self.trapped),
            _ => {}
        }
        match fate {
            Fate::Acked => bump(&self.acked),
            Fate::Retried => bump(&self.retried),
            Fate::Rejected => bump(&self.rejected),
            Fate::Lost => bump(&self.lost),
            Fate::SettleError => bump(&self.settle_errors),
        }
    }
}

impl Counters {
    /// Counts one finished delivery, run by `version`.
    pub(crate) fn record(&self, version: u64, outcome: &HandlerOutcome, fate: Fate) {
        self.total.record(outcome, fate);
        let tally = Arc::clone(self.versions.lock().entry(version).or_default());
        tally.record(outcome, fate);
    }

    /// Records how long one guest call took.
    pub(crate) fn called(&self, elapsed: std::time::Duration) {
        self.calls.observe(elapsed);
    }

    /// How long the guest calls took.
    pub fn call_times(&self) -> &Timing {
        &self.calls
    }

    pub(crate) fn started(&self) {
        self.inflight.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn finished(&self) {
        self.inflight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Totals over every version.
    pub fn snapshot(&self) -> CountersSnapshot {
        CountersSnapshot {
            inflight: self.inflight.load(Ordering::Relaxed),
            ..self.total.snapshot()
        }
    }

    /// Per version number.
    pub fn by_version(&self) -> BTreeMap<u64, CountersSnapshot> {
        self.versions
            .lock()
            .iter()
            .map(|(v, t)| (*v, t.snapshot()))
            .collect()
    }
}
