//! One guest instance in its own store, and the pool of warm ones.
//!
//! Every instance lives in a [`Store`] of its own: wasmtime frees instances
//! only with their store, and a store with one instance can be dropped as a
//! whole the moment the instance misbehaves. The store carries the memory
//! limiter (for its whole life, so memory a warm instance piled up counts
//! against later calls too), the epoch deadline callback, and fuel.
//!
//! Deadlines: the store's epoch deadline is always one tick ahead. At every
//! tick the callback compares the clock with the call's deadline: before it,
//! the guest yields to tokio (so a long call never pins a worker thread)
//! and continues; at or past it, the call traps with [`DeadlineReached`].

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use wasmtime::{Store, UpdateDeadline};

use super::bindings::{Delivery, Handler, Outcome, batch};
use super::host::{HandlerEnv, HostState};
use super::limits::Limits;
use super::module::{HandlerModule, Pre};

/// The error a guest traps with when its call passes its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeadlineReached;

impl fmt::Display for DeadlineReached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the call's deadline passed")
    }
}

impl std::error::Error for DeadlineReached {}

/// A live guest instance and the store it lives in.
pub(crate) struct Instance {
    store: Store<HostState>,
    handler: Exports,
    /// Whether the engine meters fuel (then every call must be given some).
    fuel: bool,
    /// Calls served so far.
    pub(crate) calls: u64,
}

impl fmt::Debug for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Instance")
            .field("calls", &self.calls)
            .finish_non_exhaustive()
    }
}

impl Instance {
    /// Instantiates `module` in a new store. Start-up code runs under the
    /// same `deadline` and fuel as a call.
    pub(crate) async fn new(
        module: &HandlerModule,
        env: &Arc<HandlerEnv>,
        limits: &Limits,
        deadline: Instant,
    ) -> wasmtime::Result<Self> {
        let engine = module.engine();
        let state = HostState::new(env.clone(), limits.memory_bytes());
        let mut store = Store::new(engine.engine(), state);
        store.limiter(|state| &mut state.limiter);
        store.epoch_deadline_callback(|ctx| {
            if Instant::now() >= ctx.data().deadline {
                Err(DeadlineReached.into())
            } else {
                Ok(UpdateDeadline::YieldCustom(
                    1,
                    Box::pin(tokio::task::yield_now()),
                ))
            }
        });
        let fuel = engine.options().fuel;
        arm(&mut store, limits, deadline, fuel)?;
        let handler = match module.pre() {
            Pre::Single(pre) => Exports::Single(pre.instantiate_async(&mut store).await?),
            Pre::Batch(pre) => Exports::Batch(pre.instantiate_async(&mut store).await?),
        };
        Ok(Self {
            store,
            handler,
            fuel,
            calls: 0,
        })
    }

    /// Calls the guest's `handle` under `limits`, to stop at `deadline`.
    pub(crate) async fn call(
        &mut self,
        delivery: &Delivery,
        limits: &Limits,
        deadline: Instant,
    ) -> wasmtime::Result<Outcome> {
        arm(&mut self.store, limits, deadline, self.fuel)?;
        self.calls += 1;
        // A warm instance serves many deliveries: its lines belong to this
        // one until the call returns. (A call that is cut short takes the
        // instance with it.)
        self.store.data().set_delivery(Some(delivery));
        let outcome = match &self.handler {
            Exports::Single(h) => h.call_handle(&mut self.store, delivery).await,
            Exports::Batch(h) => h.call_handle(&mut self.store, delivery).await,
        };
        self.store.data().set_delivery(None);
        outcome
    }

    /// One call of `handle-batch` (the module must export it:
    /// [`HandlerModule::batches`]). Lines the guest logs during the call
    /// belong to no single delivery.
    pub(crate) async fn call_batch(
        &mut self,
        deliveries: &[Delivery],
        limits: &Limits,
        deadline: Instant,
    ) -> wasmtime::Result<Vec<Outcome>> {
        let Exports::Batch(handler) = &self.handler else {
            wasmtime::bail!("the module exports no handle-batch");
        };
        arm(&mut self.store, limits, deadline, self.fuel)?;
        self.calls += 1;
        handler.call_handle_batch(&mut self.store, deliveries).await
    }
}

/// What an instance exports: the 0.1.0 world or the 0.2.0 one.
enum Exports {
    Single(Handler),
    Batch(batch::Handler),
}

/// Sets the deadline, the next epoch check and the fuel of a call.
fn arm(
    store: &mut Store<HostState>,
    limits: &Limits,
    deadline: Instant,
    fuel_enabled: bool,
) -> wasmtime::Result<()> {
    store.data_mut().deadline = deadline;
    store.set_epoch_deadline(1);
    if fuel_enabled {
        store.set_fuel(limits.fuel.unwrap_or(u64::MAX))?;
    }
    Ok(())
}

/// When a call that starts now must stop.
pub(crate) fn deadline_after(limits: &Limits) -> Instant {
    Instant::now() + Duration::from_millis(limits.timeout_ms)
}

/// Warm instances of one handler version, waiting for their next call.
///
/// Only instances whose last call returned normally come back here; any
/// instance that trapped, timed out or hit a limit was dropped by the
/// runner, so nothing here can be in a poisoned state.
#[derive(Debug)]
pub(crate) struct WarmPool {
    idle: Mutex<Vec<Instance>>,
    max: usize,
}

impl WarmPool {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            idle: Mutex::new(Vec::with_capacity(max)),
            max,
        }
    }

    /// A warm instance, most recently used first (its pages are hottest).
    pub(crate) fn take(&self) -> Option<Instance> {
        self.idle.lock().pop()
    }

    /// Keeps `instance` for a later call; `false` (and the instance
    /// dropped) when enough are warm already.
    pub(crate) fn put(&self, instance: Instance) -> bool {
        let mut idle = self.idle.lock();
        if idle.len() < self.max {
            idle.push(instance);
            return true;
        }
        drop(idle);
        // Dropped outside the lock: freeing a store is not free.
        drop(instance);
        false
    }

    /// How many are waiting.
    pub(crate) fn len(&self) -> usize {
        self.idle.lock().len()
    }
}
