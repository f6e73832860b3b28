//! The set of running handlers: deploy, swap, roll back, pause, remove.

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use serde::Serialize;
use tokio::task::JoinHandle;

use super::counters::{Counters, CountersSnapshot};
use super::worker::{Worker, WorkerControl};
use super::{HandlerSettings, Version};
use crate::backend::{Backend, Error as BackendError};
use crate::model::{GroupName, GroupSpec, HandlerName, StreamName, Timestamp};

/// Why a runtime operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// No handler of that name is deployed.
    #[error("handler {:?} not found", .0.as_str())]
    NotFound(HandlerName),
    /// There is no previous version to roll back to.
    #[error("handler {:?} has no previous version to roll back to", .0.as_str())]
    NoPrevious(HandlerName),
    /// The backend refused (e.g. the handler's stream does not exist).
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// What the API shows about one handler.
#[derive(Debug, Clone, Serialize)]
pub struct HandlerStatus {
    /// Its name.
    pub name: HandlerName,
    /// Stream it consumes.
    pub stream: StreamName,
    /// Group it consumes as.
    pub group: GroupName,
    /// `running` or `paused`.
    pub status: &'static str,
    /// Current version number.
    pub version: u64,
    /// Current version's digest.
    pub digest: String,
    /// When the current version was deployed.
    pub deployed_at: Timestamp,
    /// The version a rollback would restore.
    pub previous_version: Option<u64>,
    /// Totals over all versions.
    pub counters: CountersSnapshot,
    /// Per version number.
    pub counters_by_version: BTreeMap<u64, CountersSnapshot>,
}

#[derive(Debug)]
struct Running {
    settings: HandlerSettings,
    current: Arc<ArcSwap<Version>>,
    previous: Option<Arc<Version>>,
    counters: Arc<Counters>,
    control: WorkerControl,
    join: Option<JoinHandle<()>>,
}

impl Running {
    fn status(&self, name: &HandlerName) -> HandlerStatus {
        let current = self.current.load();
        HandlerStatus {
            name: name.clone(),
            stream: self.settings.stream.clone(),
            group: self.settings.group.clone(),
            status: if self.control.is_paused() {
                "paused"
            } else {
                "running"
            },
            version: current.number,
            digest: current.digest.clone(),
            deployed_at: current.deployed_at,
            previous_version: self.previous.as_ref().map(|p| p.number),
            counters: self.counters.snapshot(),
            counters_by_version: self.counters.by_version(),
        }
    }

    async fn stop(mut self) {
        self.control.stop();
        if let Some(join) = self.join.take() {
            let _ = join.await;
        }
    }
}

/// The running handlers of one server.
#[derive(Debug)]
pub struct Runtime {
    backend: Arc<dyn Backend>,
    handlers: Mutex<BTreeMap<HandlerName, Running>>,
}

impl Runtime {
    /// An empty runtime over `backend`.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Self {
            backend,
            handlers: Mutex::new(BTreeMap::new()),
        }
    }

    /// Starts `name` with `version`, or replaces it. A handler already
    /// running with the same stream, group and settings just swaps versions
    /// (in-flight deliveries finish on the old one); otherwise its worker is
    /// drained and a new one started. The group is created if missing.
    pub async fn deploy(
        &self,
        name: HandlerName,
        settings: HandlerSettings,
        version: Version,
    ) -> Result<HandlerStatus, RuntimeError> {
        match self
            .backend
            .create_group(&settings.stream, GroupSpec::new(settings.group.clone()))
            .await
        {
            Ok(_) | Err(BackendError::AlreadyExists(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let version = Arc::new(version);
        let replaced = {
            let mut handlers = self.handlers.lock();
            if let Some(running) = handlers.get_mut(&name)
                && same_consumption(&running.settings, &settings)
            {
                let old = running.current.swap(Arc::clone(&version));
                running.previous = Some(old);
                return Ok(running.status(&name));
            }
            handlers.remove(&name)
        };
        let (previous, counters) = match &replaced {
            Some(old) => (Some(old.current.load_full()), Arc::clone(&old.counters)),
            None => (None, Arc::new(Counters::default())),
        };
        if let Some(old) = replaced {
            old.stop().await;
        }
        let current = Arc::new(ArcSwap::new(version));
        let (join, control) = Worker::spawn(
            Arc::clone(&self.backend),
            settings.clone(),
            Arc::clone(&current),
            Arc::clone(&counters),
        );
        let running = Running {
            settings,
            current,
            previous,
            counters,
            control,
            join: Some(join),
        };
        let status = running.status(&name);
        self.handlers.lock().insert(name, running);
        Ok(status)
    }

    /// Swaps in a new version of a running handler's code.
    pub fn swap(
        &self,
        name: &HandlerName,
        version: Version,
    ) -> Result<HandlerStatus, RuntimeError> {
        let mut handlers = self.handlers.lock();
        let running = handlers
            .get_mut(name)
            .ok_or_else(|| RuntimeError::NotFound(name.clone()))?;
        let old = running.current.swap(Arc::new(version));
        running.previous = Some(old);
        Ok(running.status(name))
    }

    /// Swaps the previous version back in (and keeps the current one as the
    /// new "previous", so a second rollback undoes the first).
    pub fn rollback(&self, name: &HandlerName) -> Result<HandlerStatus, RuntimeError> {
        let mut handlers = self.handlers.lock();
        let running = handlers
            .get_mut(name)
            .ok_or_else(|| RuntimeError::NotFound(name.clone()))?;
        let previous = running
            .previous
            .take()
            .ok_or_else(|| RuntimeError::NoPrevious(name.clone()))?;
        let old = running.current.swap(previous);
        running.previous = Some(old);
        Ok(running.status(name))
    }

    /// Stops fetching for `name` (in-flight work finishes).
    pub fn pause(&self, name: &HandlerName) -> Result<HandlerStatus, RuntimeError> {
        self.with(name, |r| r.control.pause())
    }

    /// Fetches again for `name`.
    pub fn resume(&self, name: &HandlerName) -> Result<HandlerStatus, RuntimeError> {
        self.with(name, |r| r.control.resume())
    }

    fn with(
        &self,
        name: &HandlerName,
        f: impl FnOnce(&Running),
    ) -> Result<HandlerStatus, RuntimeError> {
        let handlers = self.handlers.lock();
        let running = handlers
            .get(name)
            .ok_or_else(|| RuntimeError::NotFound(name.clone()))?;
        f(running);
        Ok(running.status(name))
    }

    /// Drains and stops `name`.
    pub async fn remove(&self, name: &HandlerName) -> Result<HandlerStatus, RuntimeError> {
        let running = self
            .handlers
            .lock()
            .remove(name)
            .ok_or_else(|| RuntimeError::NotFound(name.clone()))?;
        let status = running.status(name);
        running.stop().await;
        Ok(status)
    }

    /// One handler's status.
    pub fn get(&self, name: &HandlerName) -> Result<HandlerStatus, RuntimeError> {
        self.with(name, |_| {})
    }

    /// Every handler's status, by name.
    pub fn list(&self) -> Vec<HandlerStatus> {
        self.handlers
            .lock()
            .iter()
            .map(|(name, r)| r.status(name))
            .collect()
    }

    /// The settings `name` runs with.
    pub fn settings(&self, name: &HandlerName) -> Option<HandlerSettings> {
        self.handlers.lock().get(name).map(|r| r.settings.clone())
    }

    /// Drains and stops every handler (concurrently).
    pub async fn shutdown(&self) {
        let all: Vec<Running> = std::mem::take(&mut *self.handlers.lock())
            .into_values()
            .collect();
        for r in &all {
            r.control.stop();
        }
        futures::future::join_all(all.into_iter().map(Running::stop)).await;
    }
}

/// Whether two settings consume the same way (so a deploy can swap code
/// without restarting the worker).
fn same_consumption(a: &HandlerSettings, b: &HandlerSettings) -> bool {
    a.stream == b.stream
        && a.group == b.group
        && a.partitions == b.partitions
        && a.concurrency == b.concurrency
        && a.max_demand == b.max_demand
        && a.lease_ms == b.lease_ms
        && a.max_retry_delay_ms == b.max_retry_delay_ms
}
