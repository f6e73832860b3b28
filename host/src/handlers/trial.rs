//! Dry runs (`docs/handlers.md#dry-runs`): a candidate module runs over a
//! page of the handler's history next to the version that is live, and the
//! two are compared event by event.
//!
//! Both run in the sandbox and under the limits production uses (the
//! handler's manifest: limits, configuration, the streams it may append
//! to), on runners of their own: the live version's runner, which settles
//! and writes, is never called. Each event is handed to each version as a
//! first delivery to the handler's group, holding no lease; what a version
//! returns is reported, never settled, and what it appends is checked as a
//! real append would be and kept in the report instead of being written.
//! No group, lease, frontier, attempt or dead letter changes, and nothing
//! is appended.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Manifest;
use crate::model::{Event, HandlerName, Page, StreamName};
use crate::settle::{HandlerFailure, HandlerOutcome};
use crate::wasm::{AppendCapture, CapturedAppend, Digest, HandlerRunner};

/// One of the two versions a dry run compares, ready to run.
pub(super) struct TrialRunner {
    pub(super) runner: HandlerRunner,
    pub(super) capture: Arc<AppendCapture>,
}

/// What a dry run found.
#[derive(Debug, Clone)]
pub struct TrialReport {
    /// The handler.
    pub handler: HandlerName,
    /// Its stream, where the events came from.
    pub stream: StreamName,
    /// The candidate's digest.
    pub candidate_digest: Digest,
    /// The live version's number and digest; `None` when none runs.
    pub current: Option<(u64, Digest)>,
    /// Per event: differences first, then in the query's order.
    pub events: Vec<TrialEvent>,
    /// The candidate's totals.
    pub candidate_totals: TrialTotals,
    /// The live version's totals (`None` when none runs).
    pub current_totals: Option<TrialTotals>,
    /// Where the next page of events starts (the query's cursor).
    pub next_cursor: Option<String>,
}

/// One event of a dry run and what each version did with it.
#[derive(Debug, Clone)]
pub struct TrialEvent {
    /// The event (shown by id, partition and sequence).
    pub event: Event,
    /// What the candidate did.
    pub candidate: TrialRun,
    /// What the live version did (`None` when none runs).
    pub current: Option<TrialRun>,
}

impl TrialEvent {
    /// Whether the two versions disagree: another outcome, reason or delay,
    /// or other appends (latency does not count). Always false without a
    /// live version.
    pub fn differs(&self) -> bool {
        self.current
            .as_ref()
            .is_some_and(|current| !current.same_result(&self.candidate))
    }
}

/// What one version did with one event.
#[derive(Debug, Clone)]
pub struct TrialRun {
    /// What it returned, or how it failed.
    pub outcome: HandlerOutcome,
    /// How long the call took.
    pub latency: Duration,
    /// What it appended (kept, not written), in order.
    pub appends: Vec<CapturedAppend>,
    /// How many appends it tried that a real append would have refused
    /// (the guest was answered with that error).
    pub refused_appends: u64,
}

impl TrialRun {
    /// The outcome's name: `ack`, `retry`, `reject`, `trap`, `timeout`,
    /// `memory_limit`, `out_of_fuel` or `batch_mismatch` (a trial calls
    /// `handle`, one event at a time, so never the last).
    pub fn outcome_name(&self) -> &'static str {
        match &self.outcome {
            HandlerOutcome::Ack => "ack",
            HandlerOutcome::Retry { .. } => "retry",
            HandlerOutcome::Reject { .. } => "reject",
            HandlerOutcome::Failed(HandlerFailure::Trap(_)) => "trap",
            HandlerOutcome::Failed(HandlerFailure::Timeout { .. }) => "timeout",
            HandlerOutcome::Failed(HandlerFailure::MemoryLimit { .. }) => "memory_limit",
            HandlerOutcome::Failed(HandlerFailure::OutOfFuel) => "out_of_fuel",
            HandlerOutcome::Failed(HandlerFailure::BatchMismatch { .. }) => "batch_mismatch",
        }
    }

    /// The reason: the guest's for a retry or reject, the failure's for a
    /// trap, timeout or limit; none for an ack.
    pub fn reason(&self) -> Option<String> {
        match &self.outcome {
            HandlerOutcome::Ack => None,
            HandlerOutcome::Retry { reason, .. } | HandlerOutcome::Reject { reason } => {
                Some(reason.clone())
            }
            HandlerOutcome::Failed(failure) => Some(failure.reason()),
        }
    }

    /// The delay a retry asked for.
    pub fn delay_ms(&self) -> Option<u64> {
        match &self.outcome {
            HandlerOutcome::Retry { delay_ms, .. } => *delay_ms,
            _ => None,
        }
    }

    fn same_result(&self, other: &TrialRun) -> bool {
        self.outcome == other.outcome
            && self.appends == other.appends
            && self.refused_appends == other.refused_appends
    }
}

/// A version's totals over a dry run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrialTotals {
    /// Events it handled.
    pub events: u64,
    /// Acks.
    pub acked: u64,
    /// Retries.
    pub retried: u64,
    /// Rejects.
    pub rejected: u64,
    /// Traps (panics included).
    pub trapped: u64,
    /// Calls stopped at the deadline.
    pub timed_out: u64,
    /// Calls stopped at the memory cap or out of fuel.
    pub limited: u64,
    /// Events it appended (kept, not written).
    pub appended: u64,
    /// The median call latency.
    pub p50: Duration,
    /// The slowest call.
    pub max: Duration,
}

impl TrialTotals {
    fn of<'a>(runs: impl Iterator<Item = &'a TrialRun>) -> Self {
        let mut totals = TrialTotals::default();
        let mut latencies = Vec::new();
        for run in runs {
            totals.events += 1;
            match &run.outcome {
                HandlerOutcome::Ack => totals.acked += 1,
                HandlerOutcome::Retry { .. } => totals.retried += 1,
                HandlerOutcome::Reject { .. } => totals.rejected += 1,
                HandlerOutcome::Failed(
                    HandlerFailure::Trap(_) | HandlerFailure::BatchMismatch { .. },
                ) => totals.trapped += 1,
                HandlerOutcome::Failed(HandlerFailure::Timeout { .. }) => totals.timed_out += 1,
                HandlerOutcome::Failed(_) => totals.limited += 1,
            }
            totals.appended += run.appends.len() as u64;
            latencies.push(run.latency);
        }
        latencies.sort_unstable();
        totals.p50 = latencies
            .get(latencies.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or_default();
        totals.max = latencies.last().copied().unwrap_or_default();
        totals
    }
}

/// Runs one version on one event.
async fn run_one(version: &TrialRunner, event: &Event, manifest: &Manifest) -> TrialRun {
    version.capture.take();
    let refused_before = version.capture.refused();
    let started = Instant::now();
    let outcome = version.runner.invoke_unleased(event, &manifest.group).await;
    let latency = started.elapsed();
    TrialRun {
        outcome,
        latency,
        appends: version.capture.take(),
        refused_appends: version.capture.refused() - refused_before,
    }
}

/// Runs `candidate` and `current` (when there is one) over the page's events, one
/// event at a time, and builds the report: events where the versions
/// differ first, the rest in the order they came.
pub(super) async fn run(
    handler: &HandlerName,
    manifest: &Manifest,
    candidate: TrialRunner,
    current: Option<(u64, TrialRunner)>,
    page: Page,
) -> TrialReport {
    let mut ran = Vec::with_capacity(page.events.len());
    for event in page.events {
        let candidate_run = run_one(&candidate, &event, manifest).await;
        let current_run = match &current {
            Some((_, version)) => Some(run_one(version, &event, manifest).await),
            None => None,
        };
        ran.push(TrialEvent {
            event,
            candidate: candidate_run,
            current: current_run,
        });
    }
    // Stable: within each half, the query's order stays.
    ran.sort_by_key(|e| !e.differs());
    TrialReport {
        handler: handler.clone(),
        stream: manifest.stream.clone(),
        candidate_digest: candidate.runner.module().digest(),
        current: current
            .as_ref()
            .map(|(number, v)| (*number, v.runner.module().digest())),
        candidate_totals: TrialTotals::of(ran.iter().map(|e| &e.candidate)),
        current_totals: current
            .as_ref()
            .map(|_| TrialTotals::of(ran.iter().filter_map(|e| e.current.as_ref()))),
        events: ran,
        next_cursor: page.next_cursor,
    }
}

/// An appended event as JSON, for reports.
pub fn append_json(append: &CapturedAppend) -> Value {
    let input = &append.input;
    serde_json::json!({
        "stream": append.stream.as_str(),
        "partition": append.partition,
        "id": input.id.as_ref().map(|id| id.as_str()),
        "type": input.event_type,
        "key": input.key,
        "payload": input.payload,
        "metadata": input.metadata,
    })
}
