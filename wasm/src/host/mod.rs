//! What a guest can reach: the `rheo:handler/host` imports (one file per
//! capability) and a WASI that is linked but denied.
//!
//! Each store holds a [`HostState`]: the per-handler [`HandlerEnv`] (shared
//! by all of the handler's instances), the store's WASI context and resource
//! table, the memory limiter and the deadline of the running call.

mod append;
mod clock;
mod config;
mod log;
mod wasi;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use self::log::LogSink;
pub use self::log::{LOG_TARGET, MAX_LINE_BYTES};
use super::bindings::{AppendError, Delivery, EventInput, EventRef, Host, Level};
use super::limits::GuestLimiter;
use crate::backend::Backend;
use crate::clock::SharedClock;
use crate::handler_logs::HandlerLog;
use crate::model::{EventInput as ModelEventInput, HandlerName, StreamName};

/// What a handler's guest code may use on the host: its name (for logs),
/// its configuration, the backend it appends to, the clock and which
/// streams it may append to. Built once per handler version and shared by
/// all of its instances.
#[derive(Debug, Clone)]
pub struct HandlerEnv {
    name: HandlerName,
    config: BTreeMap<String, String>,
    backend: Arc<dyn Backend>,
    clock: SharedClock,
    append_streams: Option<BTreeSet<StreamName>>,
    /// The handler's in-memory log, if its lines are kept.
    log: Option<Arc<HandlerLog>>,
    /// This version's number, once it has one (0 before).
    version: Arc<AtomicU64>,
    /// In a dry run, where appends go instead of the backend.
    capture: Option<Arc<AppendCapture>>,
}

/// The appends of a dry run (`docs/handlers.md#dry-runs`): checked as a
/// real append is (the stream exists and may be appended to, the event is
/// valid and routes to a partition), then kept here instead of written.
#[derive(Debug, Default)]
pub struct AppendCapture {
    appends: parking_lot::Mutex<Vec<CapturedAppend>>,
    refused: AtomicU64,
}

/// One append a dry run kept instead of writing.
#[derive(Debug, Clone, PartialEq)]
pub struct CapturedAppend {
    /// The stream it was for.
    pub stream: StreamName,
    /// The partition it would have gone to.
    pub partition: u32,
    /// The event as the guest gave it (an id it did not give stays `None`:
    /// the id the guest was answered with is made up for the dry run).
    pub input: ModelEventInput,
}

impl AppendCapture {
    /// Takes what was captured so far, oldest first.
    pub fn take(&self) -> Vec<CapturedAppend> {
        std::mem::take(&mut *self.appends.lock())
    }

    /// Appends refused so far (the guest got the error a real append
    /// would have given).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    pub(crate) fn push(&self, append: CapturedAppend) {
        self.appends.lock().push(append);
    }

    pub(crate) fn note_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }
}

impl HandlerEnv {
    /// A handler named `name` that appends to `backend` and reads the
    /// backend's clock; no configuration; may append to any stream.
    pub fn new(name: HandlerName, backend: Arc<dyn Backend>) -> Self {
        let clock = Arc::clone(backend.clock());
        Self {
            name,
            config: BTreeMap::new(),
            backend,
            clock,
            append_streams: None,
            log: None,
            version: Arc::new(AtomicU64::new(0)),
            capture: None,
        }
    }

    /// A dry run's environment: `append` checks each event as it would be
    /// written, then keeps it in `capture` instead of writing it.
    pub fn with_captured_appends(mut self, capture: Arc<AppendCapture>) -> Self {
        self.capture = Some(capture);
        self
    }

    /// Keeps the guest's log lines in `log` too (they always go to
    /// `tracing`).
    pub fn with_log(mut self, log: Arc<HandlerLog>) -> Self {
        self.log = Some(log);
        self
    }

    /// Numbers this version: its log lines from now on carry `number`.
    pub fn set_version(&self, number: u64) {
        self.version.store(number, Ordering::Relaxed);
    }

    /// Sets the configuration `config-get` answers from.
    pub fn with_config(mut self, config: BTreeMap<String, String>) -> Self {
        self.config = config;
        self
    }

    /// Sets the clock `now-ms` reads (by default the backend's).
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Restricts `append` to these streams (by default any stream).
    pub fn with_append_streams(mut self, streams: impl IntoIterator<Item = StreamName>) -> Self {
        self.append_streams = Some(streams.into_iter().collect());
        self
    }

    /// The handler's name.
    pub fn name(&self) -> &HandlerName {
        &self.name
    }

    /// The handler's configuration.
    pub fn config(&self) -> &BTreeMap<String, String> {
        &self.config
    }
}

/// The data of one store: everything host functions may touch.
pub(crate) struct HostState {
    env: Arc<HandlerEnv>,
    sink: LogSink,
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: GuestLimiter,
    /// When the running call must stop; read by the epoch callback.
    pub(crate) deadline: Instant,
}

impl HostState {
    /// Fresh state for one store of `env`'s handler, with a memory cap.
    pub(crate) fn new(env: Arc<HandlerEnv>, memory_cap_bytes: usize) -> Self {
        let sink = LogSink::new(
            env.name.clone(),
            env.log.clone(),
            Arc::clone(&env.clock),
            Arc::clone(&env.version),
        );
        let wasi = wasi::denied_context(&sink);
        Self {
            env,
            sink,
            wasi,
            table: ResourceTable::new(),
            limiter: GuestLimiter::new(memory_cap_bytes),
            deadline: Instant::now(),
        }
    }

    /// The guest's lines from now on belong to `delivery` (a warm instance
    /// serves many: set per call).
    pub(crate) fn set_delivery(&self, delivery: Option<&Delivery>) {
        self.sink.set_delivery(delivery);
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl Host for HostState {
    fn log(&mut self, level: Level, message: String) {
        log::write(&self.sink, level, &message);
    }

    fn config_get(&mut self, key: String) -> Option<String> {
        config::get(&self.env.config, &key)
    }

    async fn append(&mut self, stream: String, event: EventInput) -> Result<EventRef, AppendError> {
        append::append(&self.env, &stream, event).await
    }

    fn now_ms(&mut self) -> u64 {
        clock::now_ms(&self.env.clock)
    }
}
