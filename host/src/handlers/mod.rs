//! Deployed handlers: manifests plus WebAssembly modules, compiled off the
//! hot path, validated, and swapped into the runtime atomically.
//!
//! A deploy (through the API, or a file changing in the handlers
//! directory) compiles the module on a blocking thread, checks its imports
//! and exports, instantiates it once under its own limits, and only then
//! hands the new version to the runtime. Anything that fails on the way is
//! an error *value*: the version that was running keeps running, and the
//! error is shown on the handler (`last_error`). Each version gets the next
//! number and its content digest; the previous one is kept (in memory and,
//! with a handlers directory, on disk) for a one-call rollback. Compiled
//! modules are cached on disk by digest, so a restart does not recompile.

mod manifest;
mod store;
mod watch;

pub use manifest::{
    InstanceSetting, MAX_CONCURRENCY, MAX_CONFIG_BYTES, MAX_CONFIG_ENTRIES, Manifest, ManifestError,
};
pub use watch::watch_directory;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use tokio::sync::Mutex;

use self::store::{PreviousRecord, Recorded, Store};
use crate::backend::{Backend, Error as BackendError};
use crate::model::{ConsumerId, HandlerName, Lease, Timestamp};
use crate::runtime::{CountersSnapshot, Handler, Runtime, RuntimeError, Version};
use crate::settle::HandlerOutcome;
use crate::wasm::{Digest, HandlerEnv, HandlerRunner, ModuleCache, WasmEngine};

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
    /// The handlers directory could not be written.
    #[error("handlers directory: {0}")]
    Storage(String),
}

impl From<RuntimeError> for RegistryError {
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::NotFound(n) => RegistryError::NotFound(n),
            RuntimeError::NoPrevious(n) => RegistryError::NoPrevious(n),
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
    /// `running`, `paused`, or `failed` (never started: see `last_error`).
    pub status: String,
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
}

/// One deployed module.
#[derive(Debug, Clone)]
struct Loaded {
    version: u64,
    digest: Digest,
    bytes: Arc<[u8]>,
}

#[derive(Debug)]
struct Entry {
    manifest: Manifest,
    current: Option<Loaded>,
    previous: Option<Loaded>,
    last_error: Option<String>,
}

/// A version of a handler: the WebAssembly runner.
#[async_trait]
impl Handler for HandlerRunner {
    async fn handle(&self, lease: &Lease) -> HandlerOutcome {
        self.invoke(lease).await
    }
}

/// The deployed handlers of one server.
#[derive(Debug)]
pub struct HandlerRegistry {
    engine: WasmEngine,
    cache: Option<ModuleCache>,
    backend: Arc<dyn Backend>,
    runtime: Runtime,
    store: Option<Store>,
    /// Prefix of this server's consumer ids (`<handler>@<server_id>`).
    server_id: String,
    // One operation at a time: deploys compile while holding it, so a
    // reload and an API deploy of the same handler cannot interleave.
    entries: Mutex<BTreeMap<HandlerName, Entry>>,
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
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "rheo".into());
        let suffix: u16 = rand::random();
        Ok(Self {
            engine,
            cache,
            runtime: Runtime::new(Arc::clone(&backend)),
            backend,
            store,
            server_id: format!("{host}-{suffix:04x}"),
            entries: Mutex::new(BTreeMap::new()),
        })
    }

    /// The handlers directory, if there is one.
    pub fn directory(&self) -> Option<&Path> {
        self.store.as_ref().map(Store::dir)
    }

    fn consumer_id(&self, name: &HandlerName) -> ConsumerId {
        ConsumerId::parse(format!("{name}@{}", self.server_id))
            .unwrap_or_else(|_| ConsumerId::generate())
    }

    /// Compiles, validates and starts a version; updates `entry`.
    async fn install(
        &self,
        entries: &mut BTreeMap<HandlerName, Entry>,
        name: &HandlerName,
        manifest: Manifest,
        bytes: Arc<[u8]>,
        number: Option<u64>,
    ) -> Result<(), RegistryError> {
        manifest.validate(name)?;
        let module = self
            .engine
            .load(Arc::clone(&bytes), self.cache.as_ref())
            .await
            .map_err(|e| RegistryError::Module(e.to_string()))?;
        let mut env = HandlerEnv::new(name.clone(), Arc::clone(&self.backend))
            .with_config(manifest.config.clone());
        if let Some(streams) = &manifest.append_to {
            env = env.with_append_streams(streams.iter().cloned());
        }
        let runner = HandlerRunner::new(module.clone(), env, manifest.limits())
            .map_err(|e| RegistryError::Module(e.to_string()))?;
        runner.prewarm().await.map_err(|f| {
            RegistryError::Module(format!(
                "it does not start under its limits: {}",
                f.reason()
            ))
        })?;
        let entry = entries.get(name);
        let number = number.unwrap_or_else(|| {
            entry
                .and_then(|e| e.current.as_ref().map(|c| c.version))
                .map_or(1, |v| v + 1)
        });
        let digest = module.digest();
        let version = Version {
            number,
            digest: digest.to_hex(),
            deployed_at: self.backend.clock().now(),
            handler: Arc::new(runner),
        };
        self.runtime
            .deploy(
                name.clone(),
                manifest.settings(self.consumer_id(name)),
                version,
            )
            .await?;
        let loaded = Loaded {
            version: number,
            digest,
            bytes,
        };
        let previous = entries
            .remove(name)
            .and_then(|e| e.current)
            .filter(|c| c.version != number);
        self.persist(name, &manifest, &loaded, previous.as_ref())?;
        entries.insert(
            name.clone(),
            Entry {
                manifest,
                current: Some(loaded),
                previous,
                last_error: None,
            },
        );
        Ok(())
    }

    /// Writes a handler's files and record, when there is a directory.
    fn persist(
        &self,
        name: &HandlerName,
        manifest: &Manifest,
        current: &Loaded,
        previous: Option<&Loaded>,
    ) -> Result<(), RegistryError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let io = RegistryError::Storage;
        if let Some(p) = previous {
            store
                .keep_module(&p.digest.to_hex(), &p.bytes)
                .map_err(io)?;
        }
        store.write(name, manifest, &current.bytes).map_err(io)?;
        store
            .record(
                name,
                Recorded {
                    version: current.version,
                    digest: current.digest.to_hex(),
                    previous: previous.map(|p| PreviousRecord {
                        version: p.version,
                        digest: p.digest.to_hex(),
                    }),
                },
            )
            .map_err(io)
    }

    /// Deploys (or replaces) a handler from a manifest and a module.
    /// Returns the handler and whether it was new.
    pub async fn deploy(
        &self,
        name: HandlerName,
        manifest: Manifest,
        module: Vec<u8>,
    ) -> Result<(HandlerView, bool), RegistryError> {
        let mut entries = self.entries.lock().await;
        let created = !entries.contains_key(&name);
        self.install(&mut entries, &name, manifest, module.into(), None)
            .await?;
        Ok((self.view(&entries, &name)?, created))
    }

    /// Hot-swaps a handler's module, keeping its manifest.
    pub async fn swap_module(
        &self,
        name: &HandlerName,
        module: Vec<u8>,
    ) -> Result<HandlerView, RegistryError> {
        let mut entries = self.entries.lock().await;
        let manifest = entries
            .get(name)
            .ok_or_else(|| RegistryError::NotFound(name.clone()))?
            .manifest
            .clone();
        let result = self
            .install(&mut entries, name, manifest, module.into(), None)
            .await;
        if let Err(e) = &result
            && let Some(entry) = entries.get_mut(name)
        {
            entry.last_error = Some(e.to_string());
        }
        result?;
        self.view(&entries, name)
    }

    /// Brings the previous version back (the current one becomes the
    /// previous, so a second rollback undoes the first).
    pub async fn rollback(&self, name: &HandlerName) -> Result<HandlerView, RegistryError> {
        let mut entries = self.entries.lock().await;
        let entry = entries
            .get(name)
            .ok_or_else(|| RegistryError::NotFound(name.clone()))?;
        let previous = entry
            .previous
            .clone()
            .ok_or_else(|| RegistryError::NoPrevious(name.clone()))?;
        let manifest = entry.manifest.clone();
        let number = previous.version;
        self.install(&mut entries, name, manifest, previous.bytes, Some(number))
            .await?;
        self.view(&entries, name)
    }

    /// Stops fetching for a handler.
    pub async fn pause(&self, name: &HandlerName) -> Result<HandlerView, RegistryError> {
        let entries = self.entries.lock().await;
        self.runtime.pause(name)?;
        self.view(&entries, name)
    }

    /// Fetches again for a handler.
    pub async fn resume(&self, name: &HandlerName) -> Result<HandlerView, RegistryError> {
        let entries = self.entries.lock().await;
        self.runtime.resume(name)?;
        self.view(&entries, name)
    }

    /// Drains and removes a handler (and its files).
    pub async fn remove(&self, name: &HandlerName) -> Result<HandlerView, RegistryError> {
        let mut entries = self.entries.lock().await;
        let view = self.view(&entries, name)?;
        match self.runtime.remove(name).await {
            Ok(_) | Err(RuntimeError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
        entries.remove(name);
        if let Some(store) = &self.store {
            store.remove(name).map_err(RegistryError::Storage)?;
        }
        Ok(view)
    }

    /// One handler.
    pub async fn get(&self, name: &HandlerName) -> Result<HandlerView, RegistryError> {
        let entries = self.entries.lock().await;
        self.view(&entries, name)
    }

    /// Every handler, by name.
    pub async fn list(&self) -> Vec<HandlerView> {
        let entries = self.entries.lock().await;
        entries
            .keys()
            .filter_map(|n| self.view(&entries, n).ok())
            .collect()
    }

    fn view(
        &self,
        entries: &BTreeMap<HandlerName, Entry>,
        name: &HandlerName,
    ) -> Result<HandlerView, RegistryError> {
        let entry = entries
            .get(name)
            .ok_or_else(|| RegistryError::NotFound(name.clone()))?;
        let running = self.runtime.get(name).ok();
        Ok(HandlerView {
            name: name.clone(),
            manifest: entry.manifest.clone(),
            status: running.as_ref().map_or("failed", |r| r.status).to_owned(),
            version: running.as_ref().map(|r| r.version),
            digest: running.as_ref().map(|r| r.digest.clone()),
            deployed_at: running.as_ref().map(|r| r.deployed_at),
            previous_version: entry.previous.as_ref().map(|p| p.version),
            counters: running.as_ref().map(|r| r.counters).unwrap_or_default(),
            counters_by_version: running.map(|r| r.counters_by_version).unwrap_or_default(),
            last_error: entry.last_error.clone(),
        })
    }

    /// Brings the running handlers in line with the handlers directory:
    /// deploys new or changed manifests and modules, removes handlers whose
    /// manifest is gone. A file that cannot be used leaves the running
    /// version alone and sets `last_error`. Returns how many changed.
    pub async fn sync_directory(&self) -> usize {
        let Some(store) = &self.store else {
            return 0;
        };
        let files = match store.manifests() {
            Ok(files) => files,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the handlers directory");
                return 0;
            }
        };
        let records = store.records();
        let mut entries = self.entries.lock().await;
        let mut changed = 0;
        for (name, path) in &files {
            let read = store.read(path);
            let (manifest, bytes) = match read {
                Ok(found) => found,
                Err(e) => {
                    self.note_failure(&mut entries, name, None, e);
                    continue;
                }
            };
            let digest = Digest::of(&bytes);
            let unchanged = entries.get(name).is_some_and(|e| {
                e.manifest.same_settings(&manifest)
                    && e.current.as_ref().is_some_and(|c| c.digest == digest)
            });
            if unchanged {
                continue;
            }
            // After a restart, keep the recorded version numbers.
            let record = records.get(name).filter(|_| !entries.contains_key(name));
            let number = record.map(|r| {
                if r.digest == digest.to_hex() {
                    r.version
                } else {
                    r.version + 1
                }
            });
            match self
                .install(&mut entries, name, manifest.clone(), bytes.into(), number)
                .await
            {
                Ok(()) => {
                    changed += 1;
                    if let Some(prev) = record.and_then(|r| r.previous.as_ref())
                        && let Some(bytes) = store.kept_module(&prev.digest)
                        && let Some(entry) = entries.get_mut(name)
                        && entry.previous.is_none()
                    {
                        entry.previous = Some(Loaded {
                            version: prev.version,
                            digest: Digest::of(&bytes),
                            bytes: bytes.into(),
                        });
                    }
                    tracing::info!(handler = %name, file = %path.display(), "handler loaded from the handlers directory");
                }
                Err(e) => self.note_failure(&mut entries, name, Some(manifest), e.to_string()),
            }
        }
        let gone: Vec<HandlerName> = entries
            .keys()
            .filter(|n| !files.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            tracing::info!(handler = %name, "manifest removed: draining the handler");
            let _ = self.runtime.remove(&name).await;
            entries.remove(&name);
            changed += 1;
        }
        changed
    }

    fn note_failure(
        &self,
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
                    entries.insert(
                        name.clone(),
                        Entry {
                            manifest,
                            current: None,
                            previous: None,
                            last_error: Some(error),
                        },
                    );
                }
            }
        }
    }

    /// Drains every handler.
    pub async fn shutdown(&self) {
        self.runtime.shutdown().await;
    }
}

#[cfg(test)]
mod tests;
