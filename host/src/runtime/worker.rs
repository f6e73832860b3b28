//! One handler's claim loop, its dispatches, its settler and its lease
//! renewer (`docs/handlers.md#the-runtime-loop`).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::counters::{Counters, Fate};
use super::{HandlerSettings, Version};
use crate::backend::{Backend, FetchRequest};
use crate::model::{
    EventId, HandlerName, Lease, MAX_SETTLE_BATCH, SettleOp, SettleTarget, Settlement,
};
use crate::settle::{self, Action, HandlerOutcome, SettleFailure};

/// Starts and stops handler loops.
#[derive(Debug)]
pub struct Worker;

/// Pauses, resumes and stops one running worker.
#[derive(Debug, Clone)]
pub struct WorkerControl {
    paused: Arc<watch::Sender<bool>>,
    stop: CancellationToken,
}

impl WorkerControl {
    /// Paused: stops fetching (leases already held still run and settle).
    /// Not paused: fetches again.
    pub fn set_paused(&self, paused: bool) {
        self.paused.send_replace(paused);
    }

    /// Asks the worker to drain and stop; await its join handle to know when
    /// it has.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

/// Held leases, for the renewer and for dropping lost ones. foldhash, as
/// the memory store's id index: fast on short ids and seeded per process
/// (SipHash was 2.6% of a memory end-to-end run, docs/benchmarks.md).
type Inflight = Arc<Mutex<HashMap<EventId, Tracked, foldhash::fast::RandomState>>>;

#[derive(Debug)]
struct Tracked {
    target: SettleTarget,
    /// Renewal found the lease taken: do not settle the result.
    lost: bool,
}

/// Everything the worker's tasks share.
#[derive(Debug)]
struct Shared {
    /// The handler's name, for the span of each delivery.
    handler: HandlerName,
    backend: Arc<dyn Backend>,
    settings: HandlerSettings,
    version: Arc<ArcSwap<Version>>,
    counters: Arc<Counters>,
    inflight: Inflight,
    /// Outcomes on their way to the settler, which writes them in batches.
    settles: mpsc::UnboundedSender<SettleRequest>,
    /// Leases held: fetched and not yet settled or given up.
    held: AtomicUsize,
    /// Signalled each time a held lease is let go.
    released: Notify,
}

/// Most settlements the settler writes in one backend call.
const SETTLE_BATCH: usize = 256;

/// One outcome to settle, and what to count once it is written.
#[derive(Debug)]
struct SettleRequest {
    target: SettleTarget,
    op: SettleOp,
    fate: Fate,
    version: u64,
    outcome: HandlerOutcome,
}

impl Shared {
    /// Starts tracking freshly fetched leases.
    fn hold(&self, leases: &[Lease]) {
        let mut inflight = self.inflight.lock();
        for lease in leases {
            let target = lease.target();
            let tracked = Tracked {
                target,
                lost: false,
            };
            inflight.insert(lease.event_id.clone(), tracked);
        }
        self.held.fetch_add(leases.len(), Ordering::AcqRel);
    }

    /// Lets go of one lease: counts what became of it and frees its place.
    fn release(&self, target: &SettleTarget, version: u64, outcome: &HandlerOutcome, fate: Fate) {
        {
            // Entries are keyed by event, and the same event may be leased
            // again (after this delivery's nack) before this lease is let
            // go: only the entry of this very lease is removed.
            let mut inflight = self.inflight.lock();
            if inflight
                .get(&target.event_id)
                .is_some_and(|t| t.target.lease_id == target.lease_id)
            {
                inflight.remove(&target.event_id);
            }
        }
        self.counters.record(version, outcome, fate);
        self.counters.finished();
        self.held.fetch_sub(1, Ordering::AcqRel);
        self.released.notify_one();
    }

    fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}

impl Worker {
    /// Spawns the loop for one handler, paused or not. It runs until
    /// [`WorkerControl::stop`], then drains (bounded by
    /// `settings.drain_timeout`) and returns.
    pub fn spawn(
        handler: HandlerName,
        backend: Arc<dyn Backend>,
        settings: HandlerSettings,
        version: Arc<ArcSwap<Version>>,
        counters: Arc<Counters>,
        paused: bool,
    ) -> (JoinHandle<()>, WorkerControl) {
        let control = WorkerControl {
            paused: Arc::new(watch::Sender::new(paused)),
            stop: CancellationToken::new(),
        };
        let (settles, requests) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            handler,
            backend,
            settings,
            version,
            counters,
            inflight: Arc::default(),
            settles,
            held: AtomicUsize::new(0),
            released: Notify::new(),
        });
        let handle = tokio::spawn(run(shared, requests, control.clone()));
        (handle, control)
    }
}

/// A wait before the next fetch: after an empty fetch (ended early by a
/// wake-up) or after a failed one (not).
struct Rest {
    until: Pin<Box<dyn Future<Output = ()> + Send>>,
    wakes: bool,
}

/// The claim loop's state: leases fetched but not started, deliveries
/// running, and the fetch in flight.
struct Claims {
    shared: Arc<Shared>,
    ready: VecDeque<Lease>,
    /// When the oldest lease in `ready` came: a short batch waits for more
    /// until `batch_wait` after it.
    ready_since: Option<tokio::time::Instant>,
    running: JoinSet<()>,
    fetching: Option<JoinHandle<crate::backend::Result<Vec<Lease>>>>,
}

impl Claims {
    /// Most leases one call takes: the handler's `batch_size` if the
    /// current version takes batches, else 1.
    fn batch_size(&self) -> usize {
        let size = self.shared.settings.batch_size.max(1);
        if size > 1 && self.shared.version.load().handler.batches() {
            size
        } else {
            1
        }
    }

    /// When a short batch stops waiting for more leases, if one waits.
    fn batch_due(&self) -> Option<tokio::time::Instant> {
        let concurrency = self.shared.settings.concurrency.max(1);
        let waits = !self.ready.is_empty()
            && self.running.len() < concurrency
            && self.ready.len() < self.batch_size();
        waits
            .then(|| {
                self.ready_since
                    .map(|t| t + self.shared.settings.batch_wait)
            })
            .flatten()
    }

    /// Starts held leases while fewer than `concurrency` calls run: one
    /// lease a call, or up to `batch_size` for a handler that takes
    /// batches. A batch shorter than that waits until `batch_wait` after
    /// its oldest lease came, unless `now` (draining).
    fn dispatch(&mut self, now: bool) {
        let concurrency = self.shared.settings.concurrency.max(1);
        let size = self.batch_size();
        while self.running.len() < concurrency && !self.ready.is_empty() {
            if size == 1 {
                let Some(lease) = self.ready.pop_front() else {
                    break;
                };
                self.shared.counters.started();
                self.running
                    .spawn(dispatch(Arc::clone(&self.shared), lease));
                continue;
            }
            let due = self
                .ready_since
                .is_none_or(|t| t + self.shared.settings.batch_wait <= tokio::time::Instant::now());
            if self.ready.len() < size && !due && !now {
                break;
            }
            let take = size.min(self.ready.len());
            let batch: Vec<Lease> = self.ready.drain(..take).collect();
            for _ in &batch {
                self.shared.counters.started();
            }
            self.running
                .spawn(dispatch_batch(Arc::clone(&self.shared), batch));
        }
        if self.ready.is_empty() {
            self.ready_since = None;
        }
    }

    /// Fetches up to `limit` leases in the background.
    fn fetch(&mut self, limit: usize) {
        let shared = Arc::clone(&self.shared);
        let s = &shared.settings;
        let req = FetchRequest {
            stream: s.stream.clone(),
            group: s.group.clone(),
            limit: u32::try_from(limit)
                .unwrap_or(u32::MAX)
                .min(crate::model::MAX_FETCH_LIMIT),
            consumer_id: s.consumer_id.clone(),
            lease_ms: s.lease_ms,
            partitions: s.partitions.clone(),
        };
        self.fetching = Some(tokio::spawn(async move { shared.backend.fetch(req).await }));
    }

    /// Takes what a finished fetch brought, queued to run one partition
    /// after another (each partition's leases keep their order): a batch
    /// comes sorted by partition, and a slow handler must not work through
    /// all of one partition's share before the next partition gets a turn.
    fn fetched(&mut self, leases: Vec<Lease>) {
        self.shared.hold(&leases);
        if self.ready.is_empty() {
            self.ready_since = Some(tokio::time::Instant::now());
        }
        self.ready.extend(interleave(leases));
    }

    /// Whether nothing is held, running or being fetched.
    fn is_empty(&self) -> bool {
        self.ready.is_empty()
            && self.running.is_empty()
            && self.fetching.is_none()
            && self.shared.held() == 0
    }
}

/// `leases` reordered round-robin by partition, each partition's leases in
/// the order given.
fn interleave(leases: Vec<Lease>) -> Vec<Lease> {
    let mut by_partition: Vec<VecDeque<Lease>> = Vec::new();
    for lease in leases {
        let p = lease.event.partition;
        match by_partition.iter_mut().find(|q| q[0].event.partition == p) {
            Some(queue) => queue.push_back(lease),
            None => by_partition.push(VecDeque::from([lease])),
        }
    }
    let mut out = Vec::new();
    while !by_partition.is_empty() {
        by_partition.retain_mut(|queue| match queue.pop_front() {
            Some(lease) => {
                out.push(lease);
                true
            }
            None => false,
        });
    }
    out
}

/// Waits for the fetch in flight, if any.
async fn fetch_done(
    fetching: &mut Option<JoinHandle<crate::backend::Result<Vec<Lease>>>>,
) -> crate::backend::Result<Vec<Lease>> {
    match fetching.as_mut() {
        Some(handle) => match handle.await {
            Ok(result) => result,
            Err(e) => Err(crate::backend::Error::Failed(format!(
                "the fetch task ended: {e}"
            ))),
        },
        None => std::future::pending().await,
    }
}

async fn run(
    shared: Arc<Shared>,
    requests: mpsc::UnboundedReceiver<SettleRequest>,
    control: WorkerControl,
) {
    let s = &shared.settings;
    let renewer = tokio::spawn(renew_loop(Arc::clone(&shared)));
    let settler = tokio::spawn(settle_loop(Arc::clone(&shared), requests));
    let mut paused = control.paused.subscribe();
    let mut wakeup = shared.backend.subscribe(&s.stream);
    let (hold, refill) = (s.hold(), s.refill());
    let mut claims = Claims {
        shared: Arc::clone(&shared),
        ready: VecDeque::new(),
        ready_since: None,
        running: JoinSet::new(),
        fetching: None,
    };
    let mut rest: Option<Rest> = None;
    let mut failures = 0u32;
    tracing::info!(stream = %s.stream, group = %s.group, consumer = %s.consumer_id, "handler worker started");

    loop {
        while claims.running.try_join_next().is_some() {}
        if control.stop.is_cancelled() {
            break;
        }
        claims.dispatch(false);
        let free = hold.saturating_sub(shared.held());
        if claims.fetching.is_none()
            && rest.is_none()
            && !*paused.borrow_and_update()
            && free >= refill
        {
            wakeup.mark_seen();
            claims.fetch(free);
        }
        let resting = rest.is_some();
        let wakes = rest.as_ref().is_some_and(|r| r.wakes);
        let batch_due = claims.batch_due();
        tokio::select! {
            _ = tokio::time::sleep_until(batch_due.unwrap_or_else(tokio::time::Instant::now)), if batch_due.is_some() => {}
            _ = control.stop.cancelled() => break,
            _ = paused.changed() => {}
            Some(_) = claims.running.join_next(), if !claims.running.is_empty() => {}
            _ = shared.released.notified() => {}
            fetched = fetch_done(&mut claims.fetching) => {
                claims.fetching = None;
                match fetched {
                    Ok(leases) if !leases.is_empty() => {
                        failures = 0;
                        claims.fetched(leases);
                    }
                    Ok(_) => {
                        failures = 0;
                        rest = Some(Rest { until: Box::pin(idle(Arc::clone(&shared))), wakes: true });
                    }
                    Err(e) => {
                        failures = failures.saturating_add(1);
                        let delay = settle::fetch_backoff(failures);
                        tracing::warn!(stream = %s.stream, group = %s.group, error = %e, retry_in_ms = delay.as_millis() as u64, "fetch failed");
                        rest = Some(Rest { until: Box::pin(tokio::time::sleep(delay)), wakes: false });
                    }
                }
            }
            _ = async { if let Some(r) = rest.as_mut() { r.until.as_mut().await } }, if resting => {
                rest = None;
            }
            _ = wakeup.changed(), if wakes => {
                rest = None;
            }
        }
    }

    // Drain: no new fetches; what is held (and what a fetch in flight
    // brings) runs and settles, within the drain timeout.
    let held = shared.held();
    if held > 0 || claims.fetching.is_some() {
        tracing::info!(stream = %s.stream, group = %s.group, held, fetching = claims.fetching.is_some(), "draining: finishing and settling the leases held");
    }
    let drained = tokio::time::timeout(s.drain_timeout, async {
        if claims.fetching.is_some() {
            let fetched = fetch_done(&mut claims.fetching).await;
            claims.fetching = None;
            if let Ok(leases) = fetched {
                claims.fetched(leases);
            }
        }
        loop {
            while claims.running.try_join_next().is_some() {}
            claims.dispatch(true);
            if claims.is_empty() {
                break;
            }
            tokio::select! {
                Some(_) = claims.running.join_next(), if !claims.running.is_empty() => {}
                _ = shared.released.notified() => {}
            }
        }
    })
    .await;
    if drained.is_err() {
        let abandoned = shared.held();
        tracing::warn!(stream = %s.stream, group = %s.group, abandoned, "drain timed out; abandoned leases will expire");
        claims.running.abort_all();
        if let Some(fetching) = claims.fetching.take() {
            fetching.abort();
        }
    }
    renewer.abort();
    settler.abort();
    tracing::info!(stream = %s.stream, group = %s.group, held_at_stop = held, "handler worker stopped");
}

/// After an empty fetch: sleeps until something becomes claimable by time
/// (a lease expiring, a retry falling due) or at most the idle poll; when
/// something is claimable already but another consumer holds it for a
/// moment, 20 ms — never a busy loop. A wake-up ends the rest early.
async fn idle(shared: Arc<Shared>) {
    let s = &shared.settings;
    let now = shared.backend.clock().now();
    let due = shared
        .backend
        .next_due(&s.stream, &s.group, &s.partitions)
        .await
        .unwrap_or(None);
    let longest = match due {
        Some(t) if t <= now => Duration::from_millis(20),
        _ => s.idle_poll,
    };
    let until_due = async {
        match due {
            Some(t) if t > now => shared.backend.clock().sleep_until(t).await,
            _ => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = until_due => {}
        _ = tokio::time::sleep(longest) => {}
    }
}

/// Runs the current version on one lease and hands the outcome to the
/// settler; the delivery's place in `concurrency` is free once the
/// handler returned.
async fn dispatch(shared: Arc<Shared>, lease: Lease) {
    let version = shared.version.load_full();
    let (handler, number, by_canary) = version.pick(&lease);
    let span = crate::telemetry::delivery_span(&shared.handler, &lease, number);
    let started = std::time::Instant::now();
    let outcome = handler.handle(&lease).instrument(span.clone()).await;
    shared.counters.called(started.elapsed());
    conclude(&shared, &version, lease, number, by_canary, outcome, span);
}

/// Runs the current version on a batch of leases in one call
/// (`handle-batch`), and hands each outcome to the settler. With a canary,
/// the first attempts it takes go to it in a call of their own.
async fn dispatch_batch(shared: Arc<Shared>, leases: Vec<Lease>) {
    let version = shared.version.load_full();
    // The leases by the version `pick` gives each (the current one, or a
    // canary taking a share of first attempts), with what it said of them.
    type Part<'v> = (
        &'v Arc<dyn super::Handler>,
        u64,
        Vec<Lease>,
        Vec<Option<bool>>,
    );
    let mut parts: Vec<Part<'_>> = Vec::with_capacity(2);
    for lease in leases {
        let (handler, number, by_canary) = version.pick(&lease);
        let at = match parts.iter().position(|(_, n, _, _)| *n == number) {
            Some(at) => at,
            None => {
                parts.push((handler, number, Vec::new(), Vec::new()));
                parts.len() - 1
            }
        };
        parts[at].2.push(lease);
        parts[at].3.push(by_canary);
    }
    for (handler, number, part, by_canary) in parts {
        let span = crate::telemetry::batch_span(&shared.handler, &part, number);
        let started = std::time::Instant::now();
        let outcomes = handler.handle_batch(&part).instrument(span).await;
        shared.counters.called(started.elapsed());
        // A `Handler` that broke its contract fails the leases it left out.
        let mut outcomes = outcomes.into_iter();
        for (lease, by_canary) in part.into_iter().zip(by_canary) {
            let outcome = outcomes.next().unwrap_or_else(|| {
                HandlerOutcome::Failed(crate::settle::HandlerFailure::Trap(
                    "the handler returned fewer outcomes than deliveries".into(),
                ))
            });
            let span = crate::telemetry::delivery_span(&shared.handler, &lease, number);
            conclude(&shared, &version, lease, number, by_canary, outcome, span);
        }
    }
}

/// Decides by the settle policy what becomes of `lease` after `outcome`,
/// counts it for a canary, and hands it to the settler (or lets it go if
/// the lease was lost meanwhile).
fn conclude(
    shared: &Shared,
    version: &Version,
    lease: Lease,
    number: u64,
    by_canary: Option<bool>,
    outcome: HandlerOutcome,
    span: tracing::Span,
) {
    let mut decision = settle::decide(&outcome, shared.settings.max_retry_delay_ms);
    if let (Some(canary), Some(by_canary)) = (&version.canary, by_canary) {
        let failed = !matches!(decision.action, Action::Ack);
        canary.tally.record(by_canary, failed);
        // A canary never dead-letters: the current version gets the retry
        // and the last word (`canary.rs`).
        if by_canary && let Action::Reject { reason } = decision.action {
            decision.action = Action::Nack {
                reason: format!("the canary (version {number}) rejected it: {reason}"),
                delay_ms: None,
            };
        }
    }
    let target = lease.target();
    let lost = shared
        .inflight
        .lock()
        .get(&lease.event_id)
        .filter(|t| t.target.lease_id == lease.lease_id)
        .is_none_or(|t| t.lost);
    if lost {
        span.record("outcome", "lost");
        shared.release(&target, number, &outcome, Fate::Lost);
        return;
    }
    let (op, fate) = match decision.action {
        Action::Ack => (SettleOp::Ack, Fate::Acked),
        Action::Nack { reason, delay_ms } => (
            SettleOp::Nack {
                reason: Some(reason),
                delay_ms,
            },
            Fate::Retried,
        ),
        Action::Reject { reason } => (
            SettleOp::Reject {
                reason: Some(reason),
            },
            Fate::Rejected,
        ),
    };
    span.record(
        "outcome",
        match fate {
            Fate::Acked => "ack",
            Fate::Retried => "nack",
            _ => "reject",
        },
    );
    drop(span);
    let request = SettleRequest {
        target,
        op,
        fate,
        version: number,
        outcome,
    };
    if let Err(mpsc::error::SendError(r)) = shared.settles.send(request) {
        // The settler only goes away once the worker has stopped; the
        // lease then expires and the delivery comes back.
        shared.release(&r.target, r.version, &r.outcome, Fate::SettleError);
    }
}

/// Writes outcomes in batches: whatever queued while the previous batch
/// was being written goes in the next call (a group commit) — acks, nacks
/// and rejects alike — so a handler on a durable store is not bound to one
/// transaction per delivery. Each item keeps its own result: a failure is
/// handled per the policy.
async fn settle_loop(shared: Arc<Shared>, mut requests: mpsc::UnboundedReceiver<SettleRequest>) {
    let s = &shared.settings;
    let mut batch: Vec<SettleRequest> = Vec::with_capacity(SETTLE_BATCH);
    while requests.recv_many(&mut batch, SETTLE_BATCH).await > 0 {
        let items = batch
            .iter()
            .map(|r| Settlement {
                target: r.target.clone(),
                op: r.op.clone(),
            })
            .collect();
        let results = match shared.backend.settle(&s.stream, &s.group, items).await {
            Ok(results) if results.len() != batch.len() => {
                Err(crate::backend::Error::Failed(format!(
                    "the backend answered {} results for {} settlements",
                    results.len(),
                    batch.len()
                )))
            }
            other => other,
        };
        let results: Vec<crate::backend::Result<()>> = match results {
            Ok(results) => results,
            Err(error) => batch.iter().map(|_| Err(error.clone())).collect(),
        };
        for (request, result) in batch.drain(..).zip(results) {
            let fate = match result {
                Ok(()) => request.fate,
                Err(error) => settle_failed(&shared, &request.target, &error).await,
            };
            shared.release(&request.target, request.version, &request.outcome, fate);
        }
    }
}

/// What to do when settling `target` failed, per the policy.
async fn settle_failed(
    shared: &Shared,
    target: &SettleTarget,
    error: &crate::backend::Error,
) -> Fate {
    let s = &shared.settings;
    match settle::on_settle_error(error) {
        SettleFailure::LeaseLost => Fate::Lost,
        SettleFailure::LeaveToExpire => {
            tracing::warn!(event = %target.event_id, error = %error, "settle failed; the lease will expire and the delivery come back");
            Fate::SettleError
        }
        SettleFailure::NackNow { reason } => {
            tracing::warn!(event = %target.event_id, error = %error, "settle failed; nacking for redelivery");
            let nack = shared
                .backend
                .nack(&s.stream, &s.group, target.clone(), Some(reason), Some(0))
                .await;
            if let Err(e) = nack {
                tracing::warn!(event = %target.event_id, error = %e, "nack after a failed settle failed too; the lease will expire");
            }
            Fate::SettleError
        }
    }
}

/// Extends every held lease each half lease, in one backend call per
/// round (per [`MAX_SETTLE_BATCH`] leases); marks lost ones. It runs until
/// the worker aborts it after draining, so held leases stay alive during
/// a drain too.
async fn renew_loop(shared: Arc<Shared>) {
    let s = &shared.settings;
    let mut tick = tokio::time::interval(s.renew_every());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let targets: Vec<SettleTarget> = shared
            .inflight
            .lock()
            .values()
            .filter(|t| !t.lost)
            .map(|t| t.target.clone())
            .collect();
        for chunk in targets.chunks(MAX_SETTLE_BATCH) {
            let renewed = shared
                .backend
                .renew_many(&s.stream, &s.group, chunk.to_vec(), s.lease_ms)
                .await;
            let results = match renewed {
                Ok(results) => results,
                Err(e) => {
                    tracing::debug!(stream = %s.stream, group = %s.group, error = %e, "lease renewal failed; retrying next round");
                    continue;
                }
            };
            let mut inflight = shared.inflight.lock();
            for (target, result) in chunk.iter().zip(results) {
                let Err(e) = result else { continue };
                if settle::on_settle_error(&e) != SettleFailure::LeaseLost {
                    tracing::debug!(event = %target.event_id, error = %e, "lease renewal failed; retrying next round");
                    continue;
                }
                if let Some(t) = inflight.get_mut(&target.event_id)
                    && t.target.lease_id == target.lease_id
                {
                    t.lost = true;
                }
            }
        }
    }
}
