//! The set of running handlers. Each runs the one version it was last
//! given, paused or not, until it is told otherwise: the runtime keeps no
//! version history and makes no version decisions (see the module doc).

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::task::JoinHandle;

use super::counters::Counters;
use super::worker::{Worker, WorkerControl};
use super::{CanaryVersion, HandlerSettings, Version};
use crate::backend::{Backend, Error as BackendError};
use crate::model::{GroupSpec, HandlerName};

/// Why a runtime operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// No handler of that name is running.
    #[error("handler {:?} not found", .0.as_str())]
    NotFound(HandlerName),
    /// The backend refused (e.g. the handler's stream does not exist).
    #[error(transparent)]
    Backend(#[from] BackendError),
}

#[derive(Debug)]
struct Running {
    settings: HandlerSettings,
    version: Arc<ArcSwap<Version>>,
    counters: Arc<Counters>,
    control: WorkerControl,
    join: Option<JoinHandle<()>>,
}

impl Running {
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

    /// Creates the group of `settings` if it is missing; refuses one that
    /// exists with another ordering than the settings ask for.
    async fn ensure_group(&self, settings: &HandlerSettings) -> Result<(), RuntimeError> {
        let (s, g) = (&settings.stream, &settings.group);
        let spec = GroupSpec {
            ordering: settings.ordering.unwrap_or_default(),
            on_exhausted: settings.on_exhausted.unwrap_or_default(),
            flow: settings.flow.unwrap_or_default(),
            ..GroupSpec::new(g.clone())
        };
        match self.backend.create_group(s, spec).await {
            Ok(_) => return Ok(()),
            Err(BackendError::AlreadyExists(_)) => {}
            Err(e) => return Err(e.into()),
        }
        if settings.ordering.is_none() && settings.on_exhausted.is_none() && settings.flow.is_none()
        {
            return Ok(());
        }
        let groups = self.backend.list_groups(s).await?;
        let Some(group) = groups.iter().find(|group| &group.name == g) else {
            return Ok(());
        };
        if let Some(wanted) = settings.on_exhausted
            && group.on_exhausted != wanted
        {
            return Err(BackendError::invalid(
                "on_exhausted",
                format!(
                    "group {:?} of stream {:?} exists with on_exhausted {:?}, not {:?}: \
                     a group gets it at creation; consume as a new group, or leave \
                     on_exhausted unset to take the group's",
                    g.as_str(),
                    s.as_str(),
                    group.on_exhausted.as_str(),
                    wanted.as_str()
                ),
            )
            .into());
        }
        if let Some(wanted) = settings.flow
            && group.flow != wanted
        {
            return Err(BackendError::invalid(
                "flow",
                format!(
                    "group {:?} of stream {:?} exists with flow {}, not {}; change it with a \
                     reset of every partition (rheo group reset {} {} --confirm --flow '{}'), \
                     consume as a new group, or leave flow unset to take the group's",
                    g.as_str(),
                    s.as_str(),
                    group.flow.to_json(),
                    wanted.to_json(),
                    s.as_str(),
                    g.as_str(),
                    wanted.to_json()
                ),
            )
            .into());
        }
        let Some(wanted) = settings.ordering else {
            return Ok(());
        };
        if group.ordering == wanted {
            return Ok(());
        }
        Err(BackendError::invalid(
            "ordering",
            format!(
                "group {:?} of stream {:?} exists with ordering {:?}, not {:?}; \
                 change it with a reset of every partition (rheo group reset {} {} --confirm --ordering {}), \
                 consume as a new group, or leave ordering unset to take the group's",
                g.as_str(),
                s.as_str(),
                group.ordering.as_str(),
                wanted.as_str(),
                s.as_str(),
                g.as_str(),
                wanted.as_str()
            ),
        )
        .into())
    }

    /// Runs `version` as `name`, paused or not. A handler already running
    /// with the same stream, group and settings just swaps versions
    /// (in-flight deliveries finish on the old one); otherwise its worker is
    /// drained and a new one started, keeping the counters. The group is
    /// created if missing, with the settings' ordering; an existing group
    /// must have that ordering. When either fails, what ran before keeps
    /// running.
    pub async fn run(
        &self,
        name: &HandlerName,
        settings: HandlerSettings,
        version: Version,
        paused: bool,
    ) -> Result<(), RuntimeError> {
        self.ensure_group(&settings).await?;
        let version = Arc::new(version);
        let replaced = {
            let mut handlers = self.handlers.lock();
            if let Some(running) = handlers.get_mut(name)
                && same_consumption(&running.settings, &settings)
            {
                running.version.store(version);
                running.control.set_paused(paused);
                return Ok(());
            }
            handlers.remove(name)
        };
        let counters = match replaced {
            Some(old) => {
                let counters = Arc::clone(&old.counters);
                old.stop().await;
                counters
            }
            None => Arc::default(),
        };
        let version = Arc::new(ArcSwap::new(version));
        let (join, control) = Worker::spawn(
            name.clone(),
            Arc::clone(&self.backend),
            settings.clone(),
            Arc::clone(&version),
            Arc::clone(&counters),
            paused,
        );
        let running = Running {
            settings,
            version,
            counters,
            control,
            join: Some(join),
        };
        self.handlers.lock().insert(name.clone(), running);
        Ok(())
    }

    /// Paused: `name` stops fetching (in-flight work finishes). Not paused:
    /// it fetches again.
    pub fn set_paused(&self, name: &HandlerName, paused: bool) -> Result<(), RuntimeError> {
        self.handlers
            .lock()
            .get(name)
            .ok_or_else(|| RuntimeError::NotFound(name.clone()))?
            .control
            .set_paused(paused);
        Ok(())
    }

    /// Starts (`Some`) or ends (`None`) a canary beside `name`'s current
    /// version, which keeps running: deliveries already running finish on
    /// the version they started with.
    pub fn set_canary(
        &self,
        name: &HandlerName,
        canary: Option<CanaryVersion>,
    ) -> Result<(), RuntimeError> {
        let handlers = self.handlers.lock();
        let running = handlers
            .get(name)
            .ok_or_else(|| RuntimeError::NotFound(name.clone()))?;
        let current = running.version.load_full();
        running.version.store(Arc::new(Version {
            canary,
            ..Version::clone(&current)
        }));
        Ok(())
    }

    /// Drains and stops `name`.
    pub async fn stop(&self, name: &HandlerName) -> Result<(), RuntimeError> {
        let running = self
            .handlers
            .lock()
            .remove(name)
            .ok_or_else(|| RuntimeError::NotFound(name.clone()))?;
        running.stop().await;
        Ok(())
    }

    /// What `name` has done so far, in total and per version number.
    pub fn counters(&self, name: &HandlerName) -> Option<Arc<Counters>> {
        self.handlers
            .lock()
            .get(name)
            .map(|r| Arc::clone(&r.counters))
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
        && a.ordering == b.ordering
        && a.on_exhausted == b.on_exhausted
        && a.flow == b.flow
        && a.partitions == b.partitions
        && a.concurrency == b.concurrency
        && a.max_demand == b.max_demand
        && a.lease_ms == b.lease_ms
        && a.max_retry_delay_ms == b.max_retry_delay_ms
}
