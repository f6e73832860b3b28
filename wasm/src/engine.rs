//! The one wasmtime [`Engine`] of a Rheo process, its [`Linker`], and the
//! epoch ticker that gives every guest call a deadline.
//!
//! An engine is expensive (it owns compiled code, the pooling allocator's
//! address-space reservation and a thread) and is meant to be created once
//! and shared: [`WasmEngine`] is a cheap `Clone`. Every compiled
//! [`HandlerModule`](super::HandlerModule) keeps its engine alive, so the
//! ticker keeps running as long as anything can still call a guest, and it
//! stops (its thread exits) once the last clone is dropped.
//!
//! The ticker bumps the engine's epoch every [`EngineOptions::epoch_tick`]
//! while at least one call is running and parks otherwise, so an idle server
//! costs no wake-ups.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, EngineWeak, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::WasmError;
use super::bindings;
use super::host::HostState;

/// How the engine is built. One set per process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineOptions {
    /// How often the epoch advances while guests run: the resolution of
    /// timeouts and of yields back to the async runtime.
    pub epoch_tick: Duration,
    /// Instrument guests for fuel. Costs ~20% per call for every handler, so
    /// it is off unless some handler sets a `fuel` limit.
    pub fuel: bool,
    /// Pre-reserved instance slots (fast instantiation, ~10 µs instead of
    /// ~24 µs); `None` allocates on demand.
    pub pooling: Option<PoolingOptions>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            epoch_tick: Duration::from_millis(10),
            fuel: false,
            pooling: Some(PoolingOptions::default()),
        }
    }
}

/// Sizes of the pooling allocator. Every slot is reserved up front (virtual
/// address space: about `total_memories` × (`max_memory_mb` + guard)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolingOptions {
    /// Live component instances across all handlers (warm and running).
    pub total_component_instances: u32,
    /// Live core instances; Python and JavaScript components hold several each.
    pub total_core_instances: u32,
    /// Live linear memories.
    pub total_memories: u32,
    /// Live tables.
    pub total_tables: u32,
    /// Largest linear memory any handler may use, in MiB. A handler's
    /// `memory_mb` may not exceed it.
    pub max_memory_mb: u64,
    /// Most core instances inside one component.
    pub max_core_instances_per_component: u32,
    /// Most elements of one table.
    pub table_elements: usize,
}

impl Default for PoolingOptions {
    fn default() -> Self {
        Self {
            total_component_instances: 1000,
            total_core_instances: 4000,
            total_memories: 2000,
            total_tables: 2000,
            max_memory_mb: 4096,
            max_core_instances_per_component: 200,
            table_elements: 100_000,
        }
    }
}

/// A shared wasmtime engine with Rheo's configuration and linker.
#[derive(Debug, Clone)]
pub struct WasmEngine {
    inner: Arc<EngineInner>,
}

struct EngineInner {
    engine: Engine,
    linker: Linker<HostState>,
    options: EngineOptions,
    pooling: bool,
    ticker: Ticker,
}

impl std::fmt::Debug for EngineInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmEngine")
            .field("options", &self.options)
            .field("pooling", &self.pooling)
            .finish_non_exhaustive()
    }
}

impl WasmEngine {
    /// Builds the engine, links WASI (denied, see [`super::host`]) and the
    /// `rheo:handler/host` imports, and starts the epoch ticker.
    pub fn new(options: EngineOptions) -> Result<Self, WasmError> {
        let (engine, pooling) = match build(&options, true) {
            Ok(engine) => (engine, options.pooling.is_some()),
            // The pool reserves address space up front; where that is
            // refused (a `ulimit -v`, a 39-bit address space) run with the
            // on-demand allocator rather than not at all.
            Err(e) if options.pooling.is_some() => {
                tracing::warn!(error = %format!("{e:#}"),
                    "the pooling allocator is unavailable; allocating instances on demand");
                (build(&options, false)?, false)
            }
            Err(e) => return Err(e),
        };

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| WasmError::Engine(format!("linking WASI: {e:#}")))?;
        bindings::add_host_to_linker::<_, HasSelf<_>>(&mut linker, |state| state)
            .map_err(|e| WasmError::Engine(format!("linking rheo:handler/host: {e:#}")))?;

        let ticker = Ticker::start(engine.weak(), options.epoch_tick)?;
        Ok(Self {
            inner: Arc::new(EngineInner {
                engine,
                linker,
                options,
                pooling,
                ticker,
            }),
        })
    }

    /// Whether instances come from the pooling allocator (false when it
    /// was not asked for, or could not reserve its address space).
    pub fn is_pooling(&self) -> bool {
        self.inner.pooling
    }

    /// The options it was built with.
    pub fn options(&self) -> &EngineOptions {
        &self.inner.options
    }

    /// The wasmtime engine.
    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The linker every handler is instantiated with.
    pub(crate) fn linker(&self) -> &Linker<HostState> {
        &self.inner.linker
    }

    /// Marks a guest call as running until the guard drops, so the ticker
    /// advances the epoch.
    pub(crate) fn running(&self) -> RunningGuard {
        let shared = &self.inner.ticker.shared;
        if shared.running.fetch_add(1, Ordering::AcqRel) == 0
            && let Some(thread) = &self.inner.ticker.thread
        {
            thread.thread().unpark();
        }
        RunningGuard {
            shared: Arc::clone(shared),
        }
    }

    /// Largest `memory_mb` a handler may ask for on this engine: the pool's
    /// slot size, else what a 32-bit memory can address.
    pub(crate) fn max_memory_mb(&self) -> u64 {
        match (&self.inner.options.pooling, self.inner.pooling) {
            (Some(pool), true) => pool.max_memory_mb,
            _ => 4096,
        }
    }
}

/// A wasmtime engine for `options`, with or without the pool.
fn build(options: &EngineOptions, with_pool: bool) -> Result<Engine, WasmError> {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.consume_fuel(options.fuel);
    if let Some(pool) = options.pooling.as_ref().filter(|_| with_pool) {
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling_config(pool)));
    }
    Engine::new(&config).map_err(|e| WasmError::Engine(format!("{e:#}")))
}

fn pooling_config(options: &PoolingOptions) -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(options.total_component_instances)
        .total_core_instances(options.total_core_instances)
        .total_memories(options.total_memories)
        .total_tables(options.total_tables)
        // One fiber stack per running async call.
        .total_stacks(options.total_component_instances)
        .max_memory_size(usize::try_from(options.max_memory_mb << 20).unwrap_or(usize::MAX))
        .max_core_instances_per_component(options.max_core_instances_per_component)
        // Guest languages with runtimes (Python, JavaScript) define several
        // memories and tables per component and module.
        .max_memories_per_component(options.max_core_instances_per_component)
        .max_tables_per_component(options.max_core_instances_per_component)
        .max_tables_per_module(8)
        .table_elements(options.table_elements);
    pool
}

/// Keeps the ticker advancing while a guest call runs.
#[derive(Debug)]
pub(crate) struct RunningGuard {
    shared: Arc<TickerShared>,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.shared.running.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Debug, Default)]
struct TickerShared {
    stop: AtomicBool,
    running: AtomicUsize,
}

/// The thread that advances the epoch.
struct Ticker {
    shared: Arc<TickerShared>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    fn start(engine: EngineWeak, tick: Duration) -> Result<Self, WasmError> {
        let shared = Arc::new(TickerShared::default());
        let state = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("rheo-wasm-epoch".into())
            .spawn(move || {
                while !state.stop.load(Ordering::Acquire) {
                    if state.running.load(Ordering::Acquire) == 0 {
                        // Woken by `WasmEngine::running` or by drop.
                        std::thread::park();
                        continue;
                    }
                    std::thread::sleep(tick);
                    // A weak handle: the ticker must not keep the engine
                    // alive, or the engine would never drop.
                    match engine.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(|e| WasmError::Engine(format!("starting the epoch ticker: {e}")))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            // The loop sleeps at most one tick before it sees `stop`.
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ticker_thread_ends_with_the_engine() {
        let engine = WasmEngine::new(EngineOptions {
            pooling: None,
            ..EngineOptions::default()
        })
        .unwrap();
        let shared = Arc::clone(&engine.inner.ticker.shared);
        let guard = engine.running();
        assert_eq!(shared.running.load(Ordering::Acquire), 1);
        drop(guard);
        // Three holders: the engine, the ticker thread, this test.
        assert_eq!(Arc::strong_count(&shared), 3);
        drop(engine);
        // Dropping the engine joined the thread, which released its handle.
        assert_eq!(Arc::strong_count(&shared), 1);
    }
}
