//! One handler's claim loop, its dispatches and its lease renewer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use super::counters::{Counters, Fate};
use super::{HandlerSettings, Version};
use crate::backend::{Backend, FetchRequest, RenewRequest};
use crate::model::{EventId, Lease, SettleOp, SettleTarget, Settlement};
use crate::settle::{self, Action, SettleFailure};

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
    /// Paused: stops fetching (in-flight deliveries still finish).
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

/// In-flight leases, for the renewer and for dropping lost ones.
type Inflight = Arc<Mutex<HashMap<EventId, Tracked>>>;

#[derive(Debug)]
struct Tracked {
    target: SettleTarget,
    /// Renewal found the lease taken: do not settle the result.
    lost: bool,
}

/// Everything a dispatch needs, shared by the worker's tasks.
#[derive(Debug)]
struct Shared {
    backend: Arc<dyn Backend>,
    settings: HandlerSettings,
    version: Arc<ArcSwap<Version>>,
    counters: Arc<Counters>,
    inflight: Inflight,
    /// Outcomes on their way to the settler, which writes them in batches.
    settles: mpsc::UnboundedSender<SettleRequest>,
}

/// Most settlements the settler writes in one backend call.
const SETTLE_BATCH: usize = 256;

/// One outcome to settle, and where to say what became of it.
#[derive(Debug)]
struct SettleRequest {
    target: SettleTarget,
    op: SettleOp,
    fate: Fate,
    reply: oneshot::Sender<Fate>,
}

impl Worker {
    /// Spawns the loop for one handler, paused or not. It runs until
    /// [`WorkerControl::stop`], then drains (bounded by
    /// `settings.drain_timeout`) and returns.
    pub fn spawn(
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
            backend,
            settings,
            version,
            counters,
            inflight: Arc::default(),
            settles,
        });
        let handle = tokio::spawn(run(shared, requests, control.clone()));
        (handle, control)
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
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut failures = 0u32;
    let window = s.window();
    tracing::info!(stream = %s.stream, group = %s.group, consumer = %s.consumer_id, "handler worker started");

    loop {
        while tasks.try_join_next().is_some() {}
        if control.stop.is_cancelled() {
            break;
        }
        if *paused.borrow_and_update() {
            tokio::select! {
                _ = control.stop.cancelled() => break,
                _ = paused.changed() => continue,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            }
        }
        let free = window.saturating_sub(tasks.len());
        if free == 0 {
            tokio::select! {
                _ = control.stop.cancelled() => break,
                Some(_) = tasks.join_next() => continue,
            }
        }
        wakeup.mark_seen();
        let fetched = shared
            .backend
            .fetch(FetchRequest {
                stream: s.stream.clone(),
                group: s.group.clone(),
                limit: u32::try_from(free)
                    .unwrap_or(u32::MAX)
                    .min(crate::model::MAX_FETCH_LIMIT),
                consumer_id: s.consumer_id.clone(),
                lease_ms: s.lease_ms,
                partitions: s.partitions.clone(),
            })
            .await;
        match fetched {
            Ok(leases) if !leases.is_empty() => {
                failures = 0;
                for lease in leases {
                    shared.inflight.lock().insert(
                        lease.event_id.clone(),
                        Tracked {
                            target: lease.target(),
                            lost: false,
                        },
                    );
                    shared.counters.started();
                    tasks.spawn(dispatch(Arc::clone(&shared), lease));
                }
            }
            Ok(_) => {
                failures = 0;
                let now = shared.backend.clock().now();
                let due = shared
                    .backend
                    .next_due(&s.stream, &s.group, &s.partitions)
                    .await
                    .unwrap_or(None);
                // Something is claimable yet nothing came back (other
                // consumers hold it for a moment): pause briefly, don't spin.
                let idle = match due {
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
                    _ = control.stop.cancelled() => break,
                    _ = wakeup.changed() => {}
                    _ = until_due => {}
                    _ = tokio::time::sleep(idle) => {}
                    _ = paused.changed() => {}
                    Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                }
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let delay = settle::fetch_backoff(failures);
                tracing::warn!(stream = %s.stream, group = %s.group, error = %e, retry_in_ms = delay.as_millis() as u64, "fetch failed");
                tokio::select! {
                    _ = control.stop.cancelled() => break,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }

    // Drain: no more fetches; give in-flight deliveries time to finish.
    let drained = tokio::time::timeout(s.drain_timeout, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(stream = %s.stream, group = %s.group, abandoned = tasks.len(), "drain timed out; abandoned leases will expire");
        tasks.abort_all();
    }
    renewer.abort();
    settler.abort();
    tracing::info!(stream = %s.stream, group = %s.group, "handler worker stopped");
}

/// Runs the current version on one lease and settles the outcome.
async fn dispatch(shared: Arc<Shared>, lease: Lease) {
    let version = shared.version.load_full();
    let outcome = version.handler.handle(&lease).await;
    let decision = settle::decide(&outcome, shared.settings.max_retry_delay_ms);
    // Entries are keyed by event, and the same event may be leased again
    // (after this delivery's nack) before this task finishes: only the
    // entry of this very lease counts, and only it is removed.
    let mine = |t: &Tracked| t.target.lease_id == lease.lease_id;
    let lost = shared
        .inflight
        .lock()
        .get(&lease.event_id)
        .filter(|t| mine(t))
        .is_none_or(|t| t.lost);
    let fate = if lost {
        Fate::Lost
    } else {
        settle_outcome(&shared, &lease, decision.action).await
    };
    {
        let mut inflight = shared.inflight.lock();
        if inflight.get(&lease.event_id).is_some_and(mine) {
            inflight.remove(&lease.event_id);
        }
    }
    shared.counters.record(version.number, &outcome, fate);
    shared.counters.finished();
}

/// Hands the outcome to the settler and waits for what became of it.
async fn settle_outcome(shared: &Shared, lease: &Lease, action: Action) -> Fate {
    let (op, fate) = match action {
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
    let (reply, fate_of) = oneshot::channel();
    let request = SettleRequest {
        target: lease.target(),
        op,
        fate,
        reply,
    };
    if shared.settles.send(request).is_err() {
        return Fate::SettleError;
    }
    // The settler only goes away once the worker has stopped; the lease
    // then expires and the delivery comes back.
    fate_of.await.unwrap_or(Fate::SettleError)
}

/// Writes outcomes in batches: whatever queued while the previous batch
/// was being written goes in the next call (a group commit), so a handler
/// on a durable store is not bound to one transaction per delivery.
/// Each item keeps its own result: a failure is handled per the policy.
async fn settle_loop(shared: Arc<Shared>, mut requests: mpsc::UnboundedReceiver<SettleRequest>) {
    let s = &shared.settings;
    let mut batch: Vec<SettleRequest> = Vec::with_capacity(SETTLE_BATCH);
    while requests.recv_many(&mut batch, SETTLE_BATCH).await > 0 {
        // Acks go in one call; retries and rejects (rarer, and each moving
        // a delivery elsewhere) one call each.
        let (acks, others): (Vec<SettleRequest>, Vec<SettleRequest>) =
            batch.drain(..).partition(|r| matches!(r.op, SettleOp::Ack));
        if !acks.is_empty() {
            let items = acks
                .iter()
                .map(|r| Settlement {
                    target: r.target.clone(),
                    op: r.op.clone(),
                })
                .collect();
            let results = match shared.backend.settle(&s.stream, &s.group, items).await {
                Ok(results) if results.len() != acks.len() => {
                    Err(crate::backend::Error::Failed(format!(
                        "the backend answered {} results for {} settlements",
                        results.len(),
                        acks.len()
                    )))
                }
                other => other,
            };
            match results {
                Ok(results) => {
                    for (request, result) in acks.into_iter().zip(results) {
                        let fate = match result {
                            Ok(()) => request.fate,
                            Err(error) => settle_failed(&shared, &request.target, &error).await,
                        };
                        let _ = request.reply.send(fate);
                    }
                }
                Err(error) => {
                    for request in acks {
                        let fate = settle_failed(&shared, &request.target, &error).await;
                        let _ = request.reply.send(fate);
                    }
                }
            }
        }
        for request in others {
            let result = shared
                .backend
                .settle_one(
                    &s.stream,
                    &s.group,
                    request.target.clone(),
                    request.op.clone(),
                )
                .await;
            let fate = match result {
                Ok(()) => request.fate,
                Err(error) => settle_failed(&shared, &request.target, &error).await,
            };
            let _ = request.reply.send(fate);
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

/// Extends every in-flight lease each half lease; marks lost ones.
/// It runs until the worker aborts it after draining, so in-flight work
/// keeps its leases during a drain too.
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
        for target in targets {
            let renewed = shared
                .backend
                .renew(RenewRequest {
                    stream: s.stream.clone(),
                    group: s.group.clone(),
                    target: target.clone(),
                    lease_ms: s.lease_ms,
                })
                .await;
            if let Err(e) = renewed {
                if settle::on_settle_error(&e) == SettleFailure::LeaseLost {
                    if let Some(t) = shared.inflight.lock().get_mut(&target.event_id)
                        && t.target.lease_id == target.lease_id
                    {
                        t.lost = true;
                    }
                } else {
                    tracing::debug!(event = %target.event_id, error = %e, "lease renewal failed; retrying next round");
                }
            }
        }
    }
}
