//! The deployed handlers of one server: deploy, swap, roll back, pause,
//! resume, remove, and keeping the handlers directory in step.
//!
//! # Locks (`docs/handlers.md#slow-compiles`)
//!
//! A Python or JavaScript module takes seconds to compile, so no lock that
//! anything else needs is held while one compiles:
//!
//! * **One operation per handler** ([`OpLocks`]): a deploy, swap, rollback,
//!   pause, resume or removal of a handler, or a directory reload's look at
//!   it, holds that handler's lock from start to end, compile included. Two
//!   deploys of one handler therefore run one after the other and get
//!   consecutive version numbers; operations on other handlers do not wait.
//! * **The entries** (`entries`): what the API shows. Held only to read or
//!   record, never across an `await` — never while compiling, draining a
//!   worker or writing files — so listing handlers answers at once.
//!
//! Compiling runs on a blocking thread (never on an async worker that runs
//! deliveries), and a module compiled before is mapped from the on-disk
//! cache by digest instead ([`ModuleCache`]). Files are read and written on
//! blocking threads too.

mod canary;
mod cluster;

pub use canary::watch_canaries;
pub use cluster::watch_cluster;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::OwnedMutexGuard;

use self::cluster::Install;
use super::deploys::{self, By, DeployStep, StepAction};
use super::store::{PreviousRecord, Recorded, Store};
use super::trial::{self, TrialReport, TrialRunner};
use super::versions::{Entry, Loaded};
use super::{CanaryView, HandlerView, Manifest, RegistryError};
use crate::backend::Backend;
use crate::cluster::{ClusterStore, MembershipSettings};
use crate::handler_logs::HandlerLogs;
use crate::model::{ConsumerId, HandlerName, Query, Timestamp};
use crate::runtime::{Runtime, Version};
use crate::wasm::{
    AppendCapture, Digest, HandlerEnv, HandlerModule, HandlerRunner, ModuleCache, WasmEngine,
};

/// The deployed handlers of one server.
#[derive(Debug)]
pub struct HandlerRegistry {
    engine: WasmEngine,
    cache: Option<ModuleCache>,
    backend: Arc<dyn Backend>,
    runtime: Runtime,
    store: Option<Store>,
    /// In cluster mode, where every node's handlers are recorded
    /// (`cluster.rs`); the directory is then only imported from.
    pub(super) cluster: Option<Arc<dyn ClusterStore>>,
    /// Prefix of this server's consumer ids (`<handler>@<server_id>`): its
    /// node id.
    server_id: String,
    /// Every handler's record. Never held across an `await` (see the
    /// module doc): readers never wait for a compile.
    entries: Mutex<BTreeMap<HandlerName, Entry>>,
    /// One operation at a time per handler, held across the compile.
    ops: OpLocks,
    /// Every handler's last log lines (`docs/handlers.md#handler-logs`):
    /// kept across versions, dropped with the handler.
    logs: HandlerLogs,
    /// Called on the compile thread before each compile (tests hold a
    /// compile with it).
    #[cfg(test)]
    compile_hook: Mutex<Option<CompileHook>>,
}

/// A test's hook into compiling: called with the handler's name on the
/// thread that is about to compile its module.
#[cfg(test)]
#[derive(Clone)]
pub(crate) struct CompileHook(pub(crate) Arc<dyn Fn(&HandlerName) + Send + Sync>);

#[cfg(test)]
impl std::fmt::Debug for CompileHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CompileHook")
    }
}

/// A version compiled, validated and started once, not yet running.
pub(super) struct Prepared {
    pub(super) manifest: Manifest,
    runner: HandlerRunner,
    pub(super) digest: Digest,
    pub(super) bytes: Arc<[u8]>,
}

/// What the handlers directory keeps of a running handler.
struct Files {
    manifest: Manifest,
    current: Loaded,
    previous: Option<Loaded>,
    history: Vec<DeployStep>,
}

impl Files {
    fn of(entry: &Entry) -> Option<Self> {
        Some(Self {
            manifest: entry.manifest.clone(),
            current: entry.current.clone()?,
            previous: entry.previous.clone(),
            history: entry.history.clone(),
        })
    }
}

/// The reason recorded for a canary stopped by a rollback request.
pub(super) const BY_HAND: &str = "rolled back by hand";

/// A step of the deploy history, to record as it is taken.
#[derive(Debug, Clone)]
pub(super) struct Step {
    action: StepAction,
    by: By,
    reason: Option<String>,
}

impl Step {
    pub(super) fn new(action: StepAction, by: By) -> Self {
        Self {
            action,
            by,
            reason: None,
        }
    }

    pub(super) fn because(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Adds the step, taken at `at` through `node` on `version`, to
    /// `history`.
    pub(super) fn record(
        self,
        history: &mut Vec<DeployStep>,
        at: Timestamp,
        node: &str,
        version: &Loaded,
    ) {
        let step = self.taken(at, node, version.number, version.digest.to_hex());
        deploys::push(history, step);
    }

    /// The step, taken at `at` through `node`, on version `version` of
    /// module `digest`.
    pub(super) fn taken(
        self,
        at: Timestamp,
        node: &str,
        version: u64,
        digest: String,
    ) -> DeployStep {
        DeployStep {
            at,
            action: self.action,
            version,
            digest,
            by: self.by.name(),
            node: node.to_owned(),
            reason: self.reason,
        }
    }
}

impl HandlerRegistry {
    /// A registry over `backend`; with `dir`, handlers are kept as files
    /// there (and compiled modules cached under it).
    pub fn new(
        engine: WasmEngine,
        backend: Arc<dyn Backend>,
        dir: Option<&Path>,
    ) -> Result<Self, RegistryError> {
        let store = dir
            .map(Store::open)
            .transpose()
            .map_err(RegistryError::Storage)?;
        let cache = store
            .as_ref()
            .map(|s| ModuleCache::open(s.cache_dir()))
            .transpose()
            .map_err(|e| RegistryError::Storage(e.to_string()))?;
        Ok(Self {
            engine,
            cache,
            runtime: Runtime::new(Arc::clone(&backend)),
            backend,
            store,
            cluster: None,
            server_id: MembershipSettings::default_id(),
            entries: Mutex::new(BTreeMap::new()),
            ops: OpLocks::default(),
            logs: HandlerLogs::default(),
            #[cfg(test)]
            compile_hook: Mutex::new(None),
        })
    }

    /// Names this server `node_id` in its consumer ids (`<handler>@<node>`).
    pub fn with_node_id(mut self, node_id: &str) -> Self {
        self.server_id = node_id.to_owned();
        self
    }

    /// Cluster mode: handlers are recorded in `cluster`, and every change
    /// made through any node runs on every node (`docs/cluster.md`). The
    /// handlers directory, if any, is only imported from (a handler the
    /// cluster does not have yet) and keeps the compile cache.
    pub fn with_cluster(mut self, cluster: Arc<dyn ClusterStore>) -> Self {
        self.cluster = Some(cluster);
        self
    }

    /// Keeps the last `lines` log lines of each handler (by default
    /// [`DEFAULT_LOG_LINES`](crate::handler_logs::DEFAULT_LOG_LINES)).
    pub fn with_log_lines(mut self, lines: usize) -> Self {
        self.logs = HandlerLogs::new(lines);
        self
    }

    /// Every handler's last log lines on this server.
    pub fn logs(&self) -> &HandlerLogs {
        &self.logs
    }

    /// Whether handlers are shared with other nodes.
    pub fn clustered(&self) -> bool {
        self.cluster.is_some()
    }

    /// The handlers directory, if there is one.
    pub fn directory(&self) -> Option<&Path> {
        self.store.as_ref().map(Store::dir)
    }

    /// Sets (or clears) the hook every later compile calls first.
    #[cfg(test)]
    pub(crate) fn set_compile_hook(&self, hook: Option<CompileHook>) {
        *self.compile_hook.lock() = hook;
    }

    fn consumer_id(&self, name: &HandlerName) -> ConsumerId {
        ConsumerId::parse(format!("{name}@{}", self.server_id))
            .unwrap_or_else(|_| ConsumerId::generate())
    }

    /// Compiles (or maps from the cache) and validates `bytes` on a
    /// blocking thread.
    async fn compile(
        &self,
        name: &HandlerName,
        bytes: Arc<[u8]>,
    ) -> Result<HandlerModule, RegistryError> {
        let engine = self.engine.clone();
        let cache = self.cache.clone();
        #[cfg(test)]
        let hook = self
            .compile_hook
            .lock()
            .clone()
            .map(|hook| (hook, name.clone()));
        #[cfg(not(test))]
        let _ = name;
        tokio::task::spawn_blocking(move || {
            #[cfg(test)]
            if let Some((hook, name)) = hook {
                (hook.0)(&name);
            }
            let started = std::time::Instant::now();
            let loaded = engine.load_blocking(&bytes, cache.as_ref());
            super::metrics::COMPILE_TIME.observe(started.elapsed());
            loaded
        })
        .await
        .map_err(|e| RegistryError::Module(format!("the compile task failed: {e}")))?
        .map_err(|e| RegistryError::Module(e.to_string()))
    }

    /// Compiles, validates and starts `bytes` as version `number` of `name`
    /// (the next number when `None`), then records it. The caller holds
    /// the handler's operation lock. When compiling, validating or starting
    /// fails, nothing has changed: what ran keeps running. A directory that
    /// cannot be written is reported after the new version took over (the
    /// registry still says what runs).
    async fn install(
        &self,
        name: &HandlerName,
        manifest: Manifest,
        bytes: Arc<[u8]>,
        number: Option<u64>,
        step: Option<Step>,
    ) -> Result<(), RegistryError> {
        let prepared = self.prepare(name, manifest, bytes).await?;
        self.activate(name, prepared, number, None, step).await
    }

    /// Compiles (or maps from the cache) and validates `bytes`, and starts
    /// an instance under the manifest's limits, with no lock but the
    /// handler's held: the slow part of a deploy. Nothing runs it yet.
    pub(super) async fn prepare(
        &self,
        name: &HandlerName,
        manifest: Manifest,
        bytes: Arc<[u8]>,
    ) -> Result<Prepared, RegistryError> {
        manifest.validate(name)?;
        let env =
            HandlerEnv::new(name.clone(), Arc::clone(&self.backend)).with_log(self.logs.log(name));
        let runner = self.started(name, &manifest, bytes.clone(), env).await?;
        Ok(Prepared {
            manifest,
            digest: runner.module().digest(),
            runner,
            bytes,
        })
    }

    /// Compiles (or maps from the cache) `bytes` and starts one instance
    /// of it under `manifest`'s limits, configuration and append streams,
    /// in `env`.
    async fn started(
        &self,
        name: &HandlerName,
        manifest: &Manifest,
        bytes: Arc<[u8]>,
        mut env: HandlerEnv,
    ) -> Result<HandlerRunner, RegistryError> {
        let module = self.compile(name, bytes).await?;
        module
            .check_batch_size(manifest.batch_size)
            .map_err(RegistryError::Module)?;
        env = env.with_config(manifest.config.clone());
        if let Some(streams) = &manifest.append_to {
            env = env.with_append_streams(streams.iter().cloned());
        }
        let runner = HandlerRunner::new(module, env, manifest.limits())
            .map_err(|e| RegistryError::Module(e.to_string()))?;
        runner.prewarm().await.map_err(|f| {
            RegistryError::Module(format!(
                "it does not start under its limits: {}",
                f.reason()
            ))
        })?;
        Ok(runner)
    }

    /// A dry run (`docs/handlers.md#dry-runs`): runs `module` and the live
    /// version of `name` over the page of its stream `query` selects, and
    /// compares them. Settles nothing and writes nothing; needs no
    /// operation lock, so deliveries, deploys and swaps go on meanwhile.
    pub async fn trial(
        &self,
        name: &HandlerName,
        module: Vec<u8>,
        query: Query,
    ) -> Result<TrialReport, RegistryError> {
        let (manifest, current) = {
            let entries = self.entries.lock();
            let entry = found(&entries, name)?;
            (entry.manifest.clone(), entry.current.clone())
        };
        let page = self.backend.query(&manifest.stream, &query).await?;
        let candidate = self.trial_runner(name, &manifest, module.into()).await?;
        let current = match current {
            Some(live) => Some((
                live.number,
                self.trial_runner(name, &manifest, live.bytes).await?,
            )),
            None => None,
        };
        Ok(trial::run(name, &manifest, candidate, current, page).await)
    }

    /// A runner of `bytes` for a dry run: its appends are kept, its log
    /// lines go to the server's log only.
    async fn trial_runner(
        &self,
        name: &HandlerName,
        manifest: &Manifest,
        bytes: Arc<[u8]>,
    ) -> Result<TrialRunner, RegistryError> {
        let capture = Arc::new(AppendCapture::default());
        let env = HandlerEnv::new(name.clone(), Arc::clone(&self.backend))
            .with_captured_appends(Arc::clone(&capture));
        let runner = self.started(name, manifest, bytes, env).await?;
        Ok(TrialRunner { runner, capture })
    }

    /// Runs a prepared version as number `number` (the next one when
    /// `None`), paused or not as `paused` says (as the handler was when
    /// `None`), and records it (with `step` in its history). A canary, if
    /// one ran, is over. The caller holds the handler's operation lock.
    pub(super) async fn activate(
        &self,
        name: &HandlerName,
        prepared: Prepared,
        number: Option<u64>,
        paused: Option<bool>,
        step: Option<Step>,
    ) -> Result<(), RegistryError> {
        let Prepared {
            manifest,
            runner,
            digest,
            bytes,
        } = prepared;
        // Only this handler's operations change its entry, and they wait
        // for this one: what is read here still holds when it is recorded.
        let (number, paused) = {
            let entries = self.entries.lock();
            let entry = entries.get(name);
            (
                number.unwrap_or_else(|| entry.map_or(1, Entry::next_number)),
                paused.unwrap_or_else(|| entry.is_some_and(|e| e.paused)),
            )
        };
        runner.env().set_version(number);
        let version = Version::new(number, Arc::new(runner));
        let settings = manifest.settings(self.consumer_id(name));
        self.runtime.run(name, settings, version, paused).await?;
        let loaded = Loaded {
            number,
            digest,
            bytes,
        };
        let now = self.backend.clock().now();
        let mut next = self
            .entries
            .lock()
            .get(name)
            .cloned()
            .unwrap_or_else(|| Entry::new(manifest.clone()));
        if let Some(step) = step {
            let step = match &next.canary {
                Some(c) => step.because(format!("ends the canary of version {}", c.version.number)),
                None => step,
            };
            step.record(&mut next.history, now, &self.server_id, &loaded);
        }
        next.installed(manifest, loaded, now);
        next.paused = paused;
        // The files first: once the registry shows the new version, the
        // directory has it too (a reload, or someone editing the files,
        // never sees them change behind what was shown).
        let written = self.persist(name, Files::of(&next)).await;
        self.entries.lock().insert(name.clone(), next);
        written
    }

    /// Writes a running handler's files and record (on a blocking thread),
    /// when there is a directory.
    async fn persist(&self, name: &HandlerName, files: Option<Files>) -> Result<(), RegistryError> {
        if self.cluster.is_some() {
            // The cluster store keeps the handler (`cluster.rs`).
            return Ok(());
        }
        let (Some(store), Some(files)) = (self.store.clone(), files) else {
            return Ok(());
        };
        let name = name.clone();
        tokio::task::spawn_blocking(move || write_files(&store, &name, &files))
            .await
            .map_err(|e| RegistryError::Storage(format!("the write task failed: {e}")))?
            .map_err(RegistryError::Storage)
    }

    /// The view of `name`, or `NotFound`.
    fn view_of(&self, name: &HandlerName) -> Result<HandlerView, RegistryError> {
        let entries = self.entries.lock();
        Ok(self.view(name, found(&entries, name)?))
    }

    /// Deploys (or replaces) a handler from a manifest and a module.
    /// Returns the handler and whether it was new.
    pub async fn deploy(
        &self,
        name: HandlerName,
        manifest: Manifest,
        module: Vec<u8>,
    ) -> Result<(HandlerView, bool), RegistryError> {
        self.deploy_by(name, manifest, module, By::unknown()).await
    }

    /// [`deploy`](Self::deploy), recorded in the history as done `by`.
    pub async fn deploy_by(
        &self,
        name: HandlerName,
        manifest: Manifest,
        module: Vec<u8>,
        by: By,
    ) -> Result<(HandlerView, bool), RegistryError> {
        let _op = self.ops.lock(&name).await;
        let step = Step::new(StepAction::Deploy, by);
        let result = match &self.cluster {
            Some(cluster) => {
                self.cluster_install(
                    cluster,
                    &name,
                    Some(manifest),
                    module.into(),
                    Install::Deploy,
                    step,
                )
                .await
            }
            None => {
                let created = !self.entries.lock().contains_key(&name);
                self.install(&name, manifest, module.into(), None, Some(step))
                    .await
                    .map(|()| created)
            }
        };
        if result.is_err() && !self.entries.lock().contains_key(&name) {
            // A handler refused at its first deploy does not exist: neither
            // does its log (what its start-up wrote went to `tracing`).
            self.logs.remove(&name);
        }
        let created = result?;
        Ok((self.view_of(&name)?, created))
    }

    /// Hot-swaps a handler's module, keeping its manifest. A refused module
    /// is recorded as the handler's `last_error`.
    pub async fn swap_module(
        &self,
        name: &HandlerName,
        module: Vec<u8>,
    ) -> Result<HandlerView, RegistryError> {
        self.swap_module_by(name, module, By::unknown()).await
    }

    /// [`swap_module`](Self::swap_module), recorded as done `by`.
    pub async fn swap_module_by(
        &self,
        name: &HandlerName,
        module: Vec<u8>,
        by: By,
    ) -> Result<HandlerView, RegistryError> {
        let _op = self.ops.lock(name).await;
        let step = Step::new(StepAction::Swap, by);
        let result = match &self.cluster {
            Some(cluster) => self
                .cluster_install(cluster, name, None, module.into(), Install::Swap, step)
                .await
                .map(|_| ()),
            None => {
                let manifest = found(&self.entries.lock(), name)?.manifest.clone();
                self.install(name, manifest, module.into(), None, Some(step))
                    .await
            }
        };
        if let Err(e) = &result
            && let Some(entry) = self.entries.lock().get_mut(name)
        {
            entry.last_error = Some(e.to_string());
        }
        result?;
        self.view_of(name)
    }

    /// Brings the previous version back (the current one becomes the
    /// previous, so a second rollback undoes the first). Its compiled code
    /// comes from the cache. While a canary runs, a rollback stops the
    /// canary instead, and the current version stays.
    pub async fn rollback(&self, name: &HandlerName) -> Result<HandlerView, RegistryError> {
        self.rollback_by(name, By::unknown()).await
    }

    /// [`rollback`](Self::rollback), recorded as done `by`.
    pub async fn rollback_by(
        &self,
        name: &HandlerName,
        by: By,
    ) -> Result<HandlerView, RegistryError> {
        let _op = self.ops.lock(name).await;
        let step = Step::new(StepAction::Rollback, by);
        if let Some(cluster) = &self.cluster {
            self.cluster_rollback(cluster, name, step).await?;
            return self.view_of(name);
        }
        if self.canary_id(name).is_some() {
            let verdict = deploys::Verdict::Rollback(BY_HAND.to_owned());
            self.decide(name, None, verdict, step.by).await?;
            return self.view_of(name);
        }
        let (manifest, previous) = {
            let entries = self.entries.lock();
            let entry = found(&entries, name)?;
            let previous = entry
                .previous
                .clone()
                .ok_or_else(|| RegistryError::NoPrevious(name.clone()))?;
            (entry.manifest.clone(), previous)
        };
        self.install(
            name,
            manifest,
            previous.bytes,
            Some(previous.number),
            Some(step),
        )
        .await?;
        self.view_of(name)
    }

    /// Stops fetching for a handler; it stays paused across swaps until
    /// resumed.
    pub async fn pause(&self, name: &HandlerName) -> Result<HandlerView, RegistryError> {
        self.set_paused(name, true).await
    }

    /// Fetches again for a handler.
    pub async fn resume(&self, name: &HandlerName) -> Result<HandlerView, RegistryError> {
        self.set_paused(name, false).await
    }

    /// Only a handler with a running version can be paused or resumed.
    async fn set_paused(
        &self,
        name: &HandlerName,
        paused: bool,
    ) -> Result<HandlerView, RegistryError> {
        let _op = self.ops.lock(name).await;
        if let Some(cluster) = &self.cluster {
            self.cluster_set_paused(cluster, name, paused).await?;
            return self.view_of(name);
        }
        let mut entries = self.entries.lock();
        let entry = entries
            .get_mut(name)
            .filter(|e| e.current.is_some())
            .ok_or_else(|| RegistryError::NotFound(name.clone()))?;
        self.runtime.set_paused(name, paused)?;
        entry.paused = paused;
        Ok(self.view(name, entry))
    }

    /// Drains and removes a handler (and its files).
    pub async fn remove(&self, name: &HandlerName) -> Result<HandlerView, RegistryError> {
        let _op = self.ops.lock(name).await;
        if let Some(cluster) = &self.cluster {
            // In line with the record first, so the answer shows what was
            // removed even if this node had not caught up.
            self.follow(cluster, name).await;
            let view = self.view_of(name);
            self.cluster_remove(cluster, name).await?;
            return view;
        }
        let (view, running) = {
            let entries = self.entries.lock();
            let entry = found(&entries, name)?;
            (self.view(name, entry), entry.current.is_some())
        };
        if running {
            self.runtime.stop(name).await?;
        }
        self.entries.lock().remove(name);
        self.logs.remove(name);
        if let Some(store) = self.store.clone() {
            let name = name.clone();
            tokio::task::spawn_blocking(move || store.remove(&name))
                .await
                .map_err(|e| RegistryError::Storage(format!("the remove task failed: {e}")))?
                .map_err(RegistryError::Storage)?;
        }
        Ok(view)
    }

    /// Every deploy, swap, canary, promotion and rollback of `name`,
    /// oldest first (`docs/handlers.md#deploy-history`). In cluster mode,
    /// as the cluster's record has it now.
    pub async fn history(&self, name: &HandlerName) -> Result<Vec<DeployStep>, RegistryError> {
        if let Some(cluster) = &self.cluster {
            return self.cluster_history(cluster, name).await;
        }
        Ok(found(&self.entries.lock(), name)?.history.clone())
    }

    /// One handler.
    pub async fn get(&self, name: &HandlerName) -> Result<HandlerView, RegistryError> {
        self.view_of(name)
    }

    /// Every handler, by name.
    pub async fn list(&self) -> Vec<HandlerView> {
        self.views()
    }

    /// Every handler, by name, without waiting (what a metrics scrape
    /// reads).
    pub(crate) fn views(&self) -> Vec<HandlerView> {
        let entries = self.entries.lock();
        entries.iter().map(|(n, e)| self.view(n, e)).collect()
    }

    /// How long `name`'s guest calls took, if it ever ran here.
    pub(crate) fn call_times(&self, name: &HandlerName) -> Option<crate::metrics::Timing> {
        self.runtime.counters(name).map(|c| c.call_times().clone())
    }

    /// The handler as recorded here, with what the runtime counted.
    fn view(&self, name: &HandlerName, entry: &Entry) -> HandlerView {
        let counters = self.runtime.counters(name);
        let current = entry.current.as_ref();
        HandlerView {
            name: name.clone(),
            manifest: entry.manifest.clone(),
            status: entry.status(),
            version: current.map(|c| c.number),
            digest: current.map(|c| c.digest.to_hex()),
            deployed_at: entry.deployed_at,
            previous_version: entry.previous.as_ref().map(|p| p.number),
            counters: counters.as_ref().map(|c| c.snapshot()).unwrap_or_default(),
            counters_by_version: counters.map(|c| c.by_version()).unwrap_or_default(),
            last_error: entry.last_error.clone(),
            swaps: entry.swaps,
            canary: entry.canary.as_ref().map(|c| CanaryView {
                version: c.version.number,
                digest: c.version.digest.to_hex(),
                plan: c.plan,
                started_at: c.started_at,
                ends_at: c.started_at.add_ms(c.plan.window_ms),
                counts: c.tally.counts(),
            }),
        }
    }

    /// Brings the running handlers in line with the handlers directory:
    /// deploys new or changed manifests and modules, removes handlers whose
    /// manifest is gone. A file that cannot be used leaves the running
    /// version alone and sets `last_error`. Returns how many changed.
    pub async fn sync_directory(&self) -> usize {
        let Some(store) = &self.store else {
            return 0;
        };
        if let Some(cluster) = &self.cluster {
            return self.import_directory(cluster, store).await;
        }
        let mut names: BTreeSet<HandlerName> = match store.manifests() {
            Ok(files) => files.into_keys().collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the handlers directory");
                return 0;
            }
        };
        names.extend(self.entries.lock().keys().cloned());
        // Each handler is looked at under its own operation lock, and its
        // files are read only then: a deploy, swap or removal of it is
        // wholly before or wholly after, so a listing taken here never
        // drains a handler deployed since (it is not in the list, or its
        // manifest is there by the time it is looked at), and a file read
        // before a swap never replaces what the swap installed.
        let mut changed = 0;
        for name in names {
            let _op = self.ops.lock(&name).await;
            if self.reload(store, &name).await {
                changed += 1;
            }
        }
        changed
    }

    /// Brings one handler in line with its files; whether it changed. The
    /// caller holds its operation lock.
    async fn reload(&self, store: &Store, name: &HandlerName) -> bool {
        let read = {
            let (store, name) = (store.clone(), name.clone());
            // A module is up to 64 MiB: read and hash it off the workers.
            tokio::task::spawn_blocking(move || {
                let path = store.manifest_path(&name);
                if !path.exists() {
                    return Ok(None);
                }
                let (manifest, bytes) = store.read(&path)?;
                let digest = Digest::of(&bytes);
                Ok(Some((manifest, bytes, digest)))
            })
            .await
            .unwrap_or_else(|e| Err(format!("the read task failed: {e}")))
        };
        let (manifest, bytes, digest) = match read {
            Ok(Some(found)) => found,
            Ok(None) => {
                let Some(entry) = self.entries.lock().remove(name) else {
                    return false;
                };
                tracing::info!(handler = %name, "manifest removed: draining the handler");
                if entry.current.is_some() {
                    let _ = self.runtime.stop(name).await;
                }
                self.logs.remove(name);
                return true;
            }
            Err(e) => {
                note_failure(&mut self.entries.lock(), name, None, e);
                return false;
            }
        };
        let (unchanged, known) = {
            let entries = self.entries.lock();
            let entry = entries.get(name);
            let unchanged = entry.is_some_and(|e| {
                e.manifest.same_settings(&manifest)
                    && e.current.as_ref().is_some_and(|c| c.digest == digest)
            });
            (unchanged, entry.is_some())
        };
        if unchanged {
            return false;
        }
        // A handler seen for the first time since a start: its record says
        // which number its module runs as and what a rollback restores.
        let record = if known {
            None
        } else {
            store.records().remove(name)
        };
        let (node, now) = (self.server_id.clone(), self.backend.clock().now());
        let mut step = Some(Step::new(StepAction::Deploy, By::server("directory")));
        let number = match record {
            Some(record) => {
                let (store, m) = (store.clone(), manifest.clone());
                let restored = tokio::task::spawn_blocking(move || {
                    restore(&store, &record, m, digest, &node, now)
                })
                .await;
                match restored {
                    Ok((entry, number, same)) => {
                        self.entries.lock().insert(name.clone(), entry);
                        if same {
                            // The module it ran before the restart: no new step.
                            step = None;
                        }
                        Some(number)
                    }
                    Err(e) => {
                        let error = format!("the restore task failed: {e}");
                        note_failure(&mut self.entries.lock(), name, Some(manifest), error);
                        return false;
                    }
                }
            }
            None => None,
        };
        match self
            .install(name, manifest.clone(), bytes.into(), number, step)
            .await
        {
            Ok(()) => {
                tracing::info!(handler = %name, "handler loaded from the handlers directory");
                true
            }
            Err(e) => {
                note_failure(
                    &mut self.entries.lock(),
                    name,
                    Some(manifest),
                    e.to_string(),
                );
                false
            }
        }
    }

    /// Drains every handler.
    pub async fn shutdown(&self) {
        self.runtime.shutdown().await;
    }
}

/// One async lock per handler name, made on first use and dropped once
/// nobody holds or waits for it.
#[derive(Debug, Default)]
struct OpLocks(Mutex<HashMap<HandlerName, Arc<tokio::sync::Mutex<()>>>>);

impl OpLocks {
    /// Waits for `name`'s lock.
    async fn lock(&self, name: &HandlerName) -> OpGuard<'_> {
        let lock = Arc::clone(self.0.lock().entry(name.clone()).or_default());
        let guard = lock.lock_owned().await;
        OpGuard {
            locks: self,
            name: name.clone(),
            guard: Some(guard),
        }
    }
}

/// Holds one handler's operation lock.
struct OpGuard<'a> {
    locks: &'a OpLocks,
    name: HandlerName,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Drop for OpGuard<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        // Clones are only taken under the map's lock: one holder left
        // means the map's own, so nobody holds or waits.
        let mut locks = self.locks.0.lock();
        if locks
            .get(&self.name)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            locks.remove(&self.name);
        }
    }
}

/// Writes a handler's files and its record.
fn write_files(store: &Store, name: &HandlerName, files: &Files) -> Result<(), String> {
    if let Some(p) = &files.previous {
        store.keep_module(&p.digest.to_hex(), &p.bytes)?;
    }
    store.write(name, &files.manifest, &files.current.bytes)?;
    let record = Recorded {
        version: files.current.number,
        digest: files.current.digest.to_hex(),
        previous: files.previous.as_ref().map(|p| PreviousRecord {
            version: p.number,
            digest: p.digest.to_hex(),
        }),
        history: files.history.clone(),
    };
    store.record(name, record)
}

/// The entry of `name`, or `NotFound`.
fn found<'a>(
    entries: &'a BTreeMap<HandlerName, Entry>,
    name: &HandlerName,
) -> Result<&'a Entry, RegistryError> {
    entries
        .get(name)
        .ok_or_else(|| RegistryError::NotFound(name.clone()))
}

/// After a restart: the handler as its record left it, with the previous
/// version back when its module was kept and its history, the number the
/// module in the directory (of `digest`) runs as — the recorded one if it
/// is the recorded module, else the next — and whether it is the recorded
/// module. A canary is not kept across a restart: one that ran is recorded
/// as rolled back, at `now` through `node`.
fn restore(
    store: &Store,
    record: &Recorded,
    manifest: Manifest,
    digest: Digest,
    node: &str,
    now: Timestamp,
) -> (Entry, u64, bool) {
    let mut entry = Entry::new(manifest);
    entry.history = record.history.clone();
    if let Some(last) = entry.history.last()
        && last.action == StepAction::Canary
    {
        let step = DeployStep {
            at: now,
            action: StepAction::Rollback,
            by: By::server("rheo").name(),
            node: node.to_owned(),
            reason: Some("the server restarted before the canary was judged".to_owned()),
            ..last.clone()
        };
        deploys::push(&mut entry.history, step);
    }
    entry.previous = record.previous.as_ref().and_then(|p| {
        let bytes = store.kept_module(&p.digest)?;
        Some(Loaded {
            number: p.version,
            digest: Digest::of(&bytes),
            bytes: bytes.into(),
        })
    });
    let same = record.digest == digest.to_hex();
    let number = if same {
        record.version
    } else {
        let highest = record.previous.as_ref().map_or(0, |p| p.version);
        entry.next_number().max(record.version.max(highest) + 1)
    };
    (entry, number, same)
}

/// Records why `name` was not (re)loaded; a handler seen for the first
/// time is kept, failed, with its manifest.
fn note_failure(
    entries: &mut BTreeMap<HandlerName, Entry>,
    name: &HandlerName,
    manifest: Option<Manifest>,
    error: String,
) {
    tracing::warn!(handler = %name, error = %error, "handler not (re)loaded; the running version, if any, keeps running");
    match entries.get_mut(name) {
        Some(entry) => entry.last_error = Some(error),
        None => {
            if let Some(manifest) = manifest {
                let mut entry = Entry::new(manifest);
                entry.last_error = Some(error);
                entries.insert(name.clone(), entry);
            }
        }
    }
}
