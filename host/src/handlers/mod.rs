//! Deployed handlers: manifests plus WebAssembly modules, compiled off the
//! hot path, validated, and swapped into the runtime atomically.
//!
//! A deploy (through the API, or a file changing in the handlers
//! directory) compiles the module on a blocking thread, checks its imports
//! and exports, instantiates it once under its own limits, and only then
//! tells the runtime to run the new version. Anything that fails on the way
//! is an error *value*: the version that was running keeps running, and the
//! error is shown on the handler (`last_error`). Each version gets the next
//! number and its content digest; the previous one is kept (in memory and,
//! with a handlers directory, on disk) for a one-call rollback. Compiled
//! modules are cached on disk by digest, so a restart does not recompile.
//!
//! The registry is the one owner of a handler's versions, status and pause
//! (`versions`): swap, rollback, pause and resume go through it, and it
//! tells the [`Runtime`](crate::runtime::Runtime) what to run. The runtime
//! only runs it, and counts what each version did.

mod deploys;
mod manifest;
pub(crate) mod metrics;
mod registry;
mod store;
mod trial;
mod versions;
mod watch;

pub use deploys::{
    By, CanaryPlan, DEFAULT_MARGIN_PERCENT, DEFAULT_MIN_DELIVERIES, DEFAULT_SHARE_PERCENT,
    DEFAULT_WINDOW_MS, DeployStep, HISTORY_STEPS, MAX_MIN_DELIVERIES, MAX_WINDOW_MS,
    MIN_SHARE_PERCENT, StepAction, Verdict, judge,
};
pub use manifest::{
    InstanceSetting, MAX_BATCH_WAIT_MS, MAX_CONCURRENCY, MAX_CONFIG_BYTES, MAX_CONFIG_ENTRIES,
    Manifest, ManifestError,
};
pub use registry::{HandlerRegistry, watch_canaries, watch_cluster};
pub use trial::{TrialEvent, TrialReport, TrialRun, TrialTotals, append_json};
pub use versions::HandlerStatus;
pub use watch::watch_directory;

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::Serialize;

use crate::backend::Error as BackendError;
use crate::model::{HandlerName, Lease, Timestamp};
use crate::runtime::{CanaryCounts, CountersSnapshot, Handler, RuntimeError};
use crate::settle::HandlerOutcome;
use crate::wasm::HandlerRunner;

/// Why a handler operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No handler of that name.
    #[error("handler {:?} not found", .0.as_str())]
    NotFound(HandlerName),
    /// The manifest is unusable.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The module did not compile, validate or start under its limits.
    #[error("invalid module: {0}")]
    Module(String),
    /// There is no previous version to roll back to.
    #[error("handler {:?} has no previous version to roll back to", .0.as_str())]
    NoPrevious(HandlerName),
    /// The backend refused (the handler's stream does not exist, …).
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A canary was asked for that cannot run (its plan, the group).
    #[error("{0}")]
    InvalidCanary(String),
    /// A canary of the handler runs already.
    #[error("a canary (version {version}) of handler {:?} runs already: promote it or roll it back first", .name.as_str())]
    CanaryRunning {
        /// The handler.
        name: HandlerName,
        /// The canary's version.
        version: u64,
    },
    /// No canary of the handler runs.
    #[error("handler {:?} has no canary to promote", .0.as_str())]
    NoCanary(HandlerName),
    /// The handlers directory could not be written.
    #[error("handlers directory: {0}")]
    Storage(String),
}

impl From<RuntimeError> for RegistryError {
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::NotFound(n) => RegistryError::NotFound(n),
            RuntimeError::Backend(b) => RegistryError::Backend(b),
        }
    }
}

/// A handler as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct HandlerView {
    /// Its name.
    pub name: HandlerName,
    /// Its manifest.
    pub manifest: Manifest,
    /// Running, paused, or failed (never started: see `last_error`).
    pub status: HandlerStatus,
    /// Current version.
    pub version: Option<u64>,
    /// Current version's content digest (sha256 hex).
    pub digest: Option<String>,
    /// When the current version was deployed.
    pub deployed_at: Option<Timestamp>,
    /// The version a rollback restores.
    pub previous_version: Option<u64>,
    /// Counters over all versions.
    pub counters: CountersSnapshot,
    /// Counters per version.
    pub counters_by_version: BTreeMap<u64, CountersSnapshot>,
    /// Why the last deploy or reload was refused, if it was.
    pub last_error: Option<String>,
    /// Times another version took over while one ran (hot swaps and
    /// rollbacks), on this server.
    pub swaps: u64,
    /// The canary beside the current version, if one runs.
    pub canary: Option<CanaryView>,
}

/// A canary as the API shows it (`docs/handlers.md#canaries`).
#[derive(Debug, Clone, Serialize)]
pub struct CanaryView {
    /// Its version number.
    pub version: u64,
    /// Its content digest (sha256 hex).
    pub digest: String,
    /// What it must show.
    pub plan: CanaryPlan,
    /// When it started.
    pub started_at: Timestamp,
    /// When its window ends (it is promoted then, if it has the evidence
    /// and is within the margin).
    pub ends_at: Timestamp,
    /// What both versions did with their first attempts on this server.
    pub counts: CanaryCounts,
}

/// A version of a handler: the WebAssembly runner.
#[async_trait]
impl Handler for HandlerRunner {
    async fn handle(&self, lease: &Lease) -> HandlerOutcome {
        self.invoke(lease).await
    }

    fn batches(&self) -> bool {
        HandlerRunner::batches(self)
    }

    async fn handle_batch(&self, leases: &[Lease]) -> Vec<HandlerOutcome> {
        self.invoke_batch(leases).await
    }
}

#[cfg(test)]
mod tests;
