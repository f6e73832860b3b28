//! [`HandlerRunner`]: runs one handler version's guest for a lease and
//! turns whatever happened into a [`HandlerOutcome`].
//!
//! A runner is one (module, environment, limits) triple: a version of a
//! handler. The runtime keeps one per version behind an `Arc`, calls
//! [`HandlerRunner::invoke`] from as many tasks as the handler's
//! concurrency allows, and swaps in a new runner to deploy a new module or
//! configuration; calls already running keep the old runner (and its warm
//! instances) alive until they finish.
//!
//! Every call has two stops. The epoch callback traps a guest that computes
//! past its deadline; an async timeout at the same deadline drops a call
//! that is waiting in a host function (an `append` to a slow backend),
//! which epochs cannot interrupt. Either way the result is
//! `Failed(Timeout)` and the instance is gone.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use wasmtime::Trap;

use super::WasmError;
use super::bindings::{Delivery, Event as WitEvent, Outcome};
use super::host::HandlerEnv;
use super::instance::{DeadlineReached, Instance, WarmPool, deadline_after};
use super::limits::{InstanceMode, Limits, MemoryCapReached};
use super::module::HandlerModule;
use crate::model::{Event, GroupName, Lease, clip_reason};
use crate::settle::{HandlerFailure, HandlerOutcome};

/// Runs one handler version. Cheap to share (`Arc`) and to call
/// concurrently: each concurrent call gets an instance of its own.
#[derive(Debug)]
pub struct HandlerRunner {
    module: HandlerModule,
    env: Arc<HandlerEnv>,
    limits: Limits,
    warm: WarmPool,
    counters: Counters,
}

/// What a runner has done so far. The runtime derives its per-handler
/// counters (trapped, timed out, …) from these or from the outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunnerStats {
    /// Calls made (each `invoke`).
    pub calls: u64,
    /// Instances created.
    pub instantiations: u64,
    /// Instances thrown away after a trap, timeout or limit stop.
    pub discarded: u64,
    /// Instances dropped after a call that returned normally: in `fresh`
    /// mode every one; in `reuse` mode after `max_invocations` calls, or
    /// when enough others were warm already.
    pub retired: u64,
    /// Calls that ended in a trap (panics included).
    pub traps: u64,
    /// Calls stopped at their deadline.
    pub timeouts: u64,
    /// Calls stopped at the memory cap.
    pub memory_limits: u64,
    /// Calls that ran out of fuel.
    pub out_of_fuel: u64,
    /// Instances warm right now.
    pub warm: usize,
}

#[derive(Debug, Default)]
struct Counters {
    calls: AtomicU64,
    instantiations: AtomicU64,
    discarded: AtomicU64,
    retired: AtomicU64,
    traps: AtomicU64,
    timeouts: AtomicU64,
    memory_limits: AtomicU64,
    out_of_fuel: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl HandlerRunner {
    /// A runner for `module` with `env`'s capabilities under `limits`.
    /// Refuses limits the module's engine cannot enforce.
    pub fn new(module: HandlerModule, env: HandlerEnv, limits: Limits) -> Result<Self, WasmError> {
        let engine = module.engine();
        limits.validate(engine.options().fuel, engine.max_memory_mb())?;
        let max_warm = match limits.instance {
            InstanceMode::Reuse => limits.max_warm,
            InstanceMode::Fresh => 0,
        };
        Ok(Self {
            module,
            env: Arc::new(env),
            limits,
            warm: WarmPool::new(max_warm),
            counters: Counters::default(),
        })
    }

    /// The module it runs.
    pub fn module(&self) -> &HandlerModule {
        &self.module
    }

    /// What the guest may use.
    pub fn env(&self) -> &HandlerEnv {
        &self.env
    }

    /// Its limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Counters so far.
    pub fn stats(&self) -> RunnerStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RunnerStats {
            calls: get(&c.calls),
            instantiations: get(&c.instantiations),
            discarded: get(&c.discarded),
            retired: get(&c.retired),
            traps: get(&c.traps),
            timeouts: get(&c.timeouts),
            memory_limits: get(&c.memory_limits),
            out_of_fuel: get(&c.out_of_fuel),
            warm: self.warm.len(),
        }
    }

    /// Runs the guest's `handle` for `lease` and says what happened. Never
    /// returns an error: a guest that misbehaves is a
    /// [`HandlerOutcome::Failed`].
    ///
    /// Must run inside a tokio runtime with the time driver enabled (as
    /// `#[tokio::main]` and `#[tokio::test]` set up): the deadline of time
    /// spent in host calls is a tokio timer.
    pub async fn invoke(&self, lease: &Lease) -> HandlerOutcome {
        let delivery = delivery_of(
            &lease.event,
            &lease.group,
            lease.attempt,
            lease.lease_id.as_str(),
        );
        self.invoke_delivery(&delivery).await
    }

    /// Whether [`HandlerRunner::invoke_batch`] makes one guest call for
    /// the batch (the module exports `handle-batch`) rather than one per
    /// delivery.
    pub fn batches(&self) -> bool {
        self.module.batches()
    }

    /// Runs the guest's `handle-batch` for `leases` (in this order) and
    /// says what became of each, in the same order. A call that fails
    /// (trap, timeout, limit), or returns a list of another length, fails
    /// every delivery with the same [`HandlerFailure`]. A module without
    /// `handle-batch` gets one `handle` call per lease, one after another.
    pub async fn invoke_batch(&self, leases: &[Lease]) -> Vec<HandlerOutcome> {
        if !self.batches() {
            let mut outcomes = Vec::with_capacity(leases.len());
            for lease in leases {
                outcomes.push(self.invoke(lease).await);
            }
            return outcomes;
        }
        let deliveries: Vec<Delivery> = leases
            .iter()
            .map(|l| delivery_of(&l.event, &l.group, l.attempt, l.lease_id.as_str()))
            .collect();
        let failure = match self.guarded(|d| self.call_batch(&deliveries, d)).await {
            Ok(outcomes) if outcomes.len() == deliveries.len() => {
                return outcomes.into_iter().map(outcome_of).collect();
            }
            Ok(outcomes) => HandlerFailure::BatchMismatch {
                deliveries: deliveries.len(),
                outcomes: outcomes.len(),
            },
            Err(failure) => failure,
        };
        tracing::warn!(
            target: super::LOG_TARGET,
            handler = %self.env.name(),
            digest = %self.module.digest(),
            deliveries = deliveries.len(),
            first_event_id = %deliveries.first().map_or("", |d| d.event.id.as_str()),
            failure = %failure.reason(),
            "handler batch call failed; every delivery of it is nacked"
        );
        leases
            .iter()
            .map(|_| HandlerOutcome::Failed(failure.clone()))
            .collect()
    }

    /// Runs the guest's `handle` for `event` as a first delivery to
    /// `group` that holds no lease (its `lease-id` is `dry-run`): what a
    /// dry run (`docs/handlers.md#dry-runs`) calls. Nothing is settled.
    pub async fn invoke_unleased(&self, event: &Event, group: &GroupName) -> HandlerOutcome {
        self.invoke_delivery(&delivery_of(event, group, 1, "dry-run"))
            .await
    }

    /// Instantiates once under the handler's limits, keeping the instance
    /// warm (in `Reuse` mode). Catches a module that traps or exhausts its
    /// memory while starting, before any delivery depends on it.
    pub async fn prewarm(&self) -> Result<(), HandlerFailure> {
        let _running = self.module.engine().running();
        let deadline = deadline_after(&self.limits);
        let start = Instance::new(&self.module, &self.env, &self.limits, deadline);
        match tokio::time::timeout_at(deadline.into(), start).await {
            Ok(Ok(instance)) => {
                bump(&self.counters.instantiations);
                self.check_in(instance);
                Ok(())
            }
            Ok(Err(error)) => Err(self.classify(&error)),
            Err(_elapsed) => Err(self.timed_out()),
        }
    }

    async fn invoke_delivery(&self, delivery: &Delivery) -> HandlerOutcome {
        let failure = match self.guarded(|d| self.call(delivery, d)).await {
            Ok(outcome) => return outcome_of(outcome),
            Err(failure) => failure,
        };
        tracing::warn!(
            target: super::LOG_TARGET,
            handler = %self.env.name(),
            digest = %self.module.digest(),
            event_id = %delivery.event.id,
            failure = %failure.reason(),
            "handler call failed; its instance was discarded"
        );
        HandlerOutcome::Failed(failure)
    }

    /// One guest call (`call`, given the deadline) under the handler's
    /// deadline, counted: what it returned, or how it failed. A call still
    /// running at the deadline is dropped, with its instance.
    async fn guarded<T, F>(&self, call: impl FnOnce(Instant) -> F) -> Result<T, HandlerFailure>
    where
        F: Future<Output = wasmtime::Result<T>>,
    {
        bump(&self.counters.calls);
        let _running = self.module.engine().running();
        let deadline = deadline_after(&self.limits);
        match tokio::time::timeout_at(deadline.into(), call(deadline)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                tracing::debug!(
                    target: super::LOG_TARGET,
                    handler = %self.env.name(),
                    error = ?error,
                    "handler call failed"
                );
                Err(self.classify(&error))
            }
            // The call future, and the instance inside it, are dropped.
            Err(_elapsed) => {
                bump(&self.counters.discarded);
                Err(self.timed_out())
            }
        }
    }

    /// One call on a warm or new instance; the instance goes back to the
    /// pool only if the call returned normally.
    async fn call(&self, delivery: &Delivery, deadline: Instant) -> wasmtime::Result<Outcome> {
        let mut instance = self.checkout(deadline).await?;
        match instance.call(delivery, &self.limits, deadline).await {
            Ok(outcome) => {
                self.check_in(instance);
                Ok(outcome)
            }
            Err(error) => {
                // A trapped instance must never be entered again.
                drop(instance);
                bump(&self.counters.discarded);
                Err(error)
            }
        }
    }

    /// [`Self::call`] for `handle-batch`.
    async fn call_batch(
        &self,
        deliveries: &[Delivery],
        deadline: Instant,
    ) -> wasmtime::Result<Vec<Outcome>> {
        let mut instance = self.checkout(deadline).await?;
        match instance
            .call_batch(deliveries, &self.limits, deadline)
            .await
        {
            Ok(outcomes) => {
                self.check_in(instance);
                Ok(outcomes)
            }
            Err(error) => {
                drop(instance);
                bump(&self.counters.discarded);
                Err(error)
            }
        }
    }

    /// A warm instance, or a new one.
    async fn checkout(&self, deadline: Instant) -> wasmtime::Result<Instance> {
        match self.warm.take() {
            Some(instance) => Ok(instance),
            None => {
                bump(&self.counters.instantiations);
                Instance::new(&self.module, &self.env, &self.limits, deadline)
                    .await
                    .inspect_err(|_| bump(&self.counters.discarded))
            }
        }
    }

    fn check_in(&self, instance: Instance) {
        let reusable = self.limits.instance == InstanceMode::Reuse
            && instance.calls < self.limits.max_invocations;
        if reusable && self.warm.put(instance) {
            return;
        }
        bump(&self.counters.retired);
    }

    fn timed_out(&self) -> HandlerFailure {
        bump(&self.counters.timeouts);
        HandlerFailure::Timeout {
            timeout_ms: self.limits.timeout_ms,
        }
    }

    /// Tells the ways a call can fail apart, by error type.
    fn classify(&self, error: &wasmtime::Error) -> HandlerFailure {
        let trap = error.downcast_ref::<Trap>();
        if error.is::<DeadlineReached>() || trap == Some(&Trap::Interrupt) {
            return self.timed_out();
        }
        if error.is::<MemoryCapReached>() {
            bump(&self.counters.memory_limits);
            return HandlerFailure::MemoryLimit {
                memory_mb: self.limits.memory_mb,
            };
        }
        if trap == Some(&Trap::OutOfFuel) {
            bump(&self.counters.out_of_fuel);
            return HandlerFailure::OutOfFuel;
        }
        bump(&self.counters.traps);
        HandlerFailure::Trap(describe(error))
    }
}

/// The error's chain on one line, cut to what a nack reason keeps. The
/// wasm backtrace wasmtime attaches is left out: it is many lines of
/// function indices, useful in the log (where it goes) but noise in a
/// dead letter's reason.
fn describe(error: &wasmtime::Error) -> String {
    let text: Vec<String> = error
        .chain()
        .map(ToString::to_string)
        .filter(|part| !part.starts_with("error while executing at wasm backtrace"))
        .map(|part| part.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    clip_reason(&text.join(": "))
}

/// The guest's answer as a value. Reasons are cut to what a nack or dead
/// letter keeps: a guest can return a string as large as its memory cap.
/// Delays are passed on as asked; the settle policy clamps them.
fn outcome_of(outcome: Outcome) -> HandlerOutcome {
    match outcome {
        Outcome::Ack => HandlerOutcome::Ack,
        Outcome::Retry(retry) => HandlerOutcome::Retry {
            reason: clip_reason(&retry.reason),
            delay_ms: retry.delay_ms,
        },
        Outcome::Reject(reason) => HandlerOutcome::Reject {
            reason: clip_reason(&reason),
        },
    }
}

/// The WIT view of a delivery: the event with JSON as text.
fn delivery_of(event: &Event, group: &GroupName, attempt: u32, lease_id: &str) -> Delivery {
    // Serializing a map of JSON values cannot fail; "{}" keeps the
    // contract (always an object) even if it somehow did.
    let json = |map| serde_json::to_string(map).unwrap_or_else(|_| "{}".to_owned());
    Delivery {
        event: WitEvent {
            id: event.id.to_string(),
            stream: event.stream.to_string(),
            partition: event.partition,
            sequence: event.sequence,
            key: event.key.clone(),
            type_: event.event_type.clone(),
            timestamp_ms: u64::try_from(event.timestamp.as_millis()).unwrap_or(0),
            payload: json(&event.payload),
            metadata: json(&event.metadata),
        },
        group: group.to_string(),
        attempt,
        lease_id: lease_id.to_owned(),
    }
}
