//! The deployed handlers of one server: deploy, swap, roll back, pause,
//! resume, remove, and keeping the handlers directory in step.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tokio::sync::Mutex;

use super::store::{PreviousRecord, Recorded, Store};
use super::versions::{Entry, Loaded};
use super::{HandlerView, Manifest, RegistryError};
use crate::backend::Backend;
use crate::model::{ConsumerId, HandlerName};
use crate::runtime::{Runtime, Version};
use crate::wasm::{Digest, HandlerEnv, HandlerRunner, ModuleCache, WasmEngine};

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

    /// Compiles, validates and starts `bytes` as version `number` of `name`
    /// (the next number when `None`), then records it. When compiling,
    /// validating or starting fails, nothing has changed: what ran keeps
    /// running. A directory that cannot be written is reported after the
    /// new version took over (the registry still says what runs).
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
        let number = number.unwrap_or_else(|| entry.map_or(1, Entry::next_number));
        let paused = entry.is_some_and(|e| e.paused);
        let version = Version {
            number,
            handler: Arc::new(runner),
        };
        let settings = manifest.settings(self.consumer_id(name));
        self.runtime.run(name, settings, version, paused).await?;
        let loaded = Loaded {
            number,
            digest: module.digest(),
            bytes,
        };
        let entry = entries
            .entry(name.clone())
            .or_insert_with(|| Entry::new(manifest.clone()));
        entry.installed(manifest, loaded, self.backend.clock().now());
        self.persist(name, entry)
    }

    /// Writes a running handler's files and record, when there is a
    /// directory.
    fn persist(&self, name: &HandlerName, entry: &Entry) -> Result<(), RegistryError> {
        let (Some(store), Some(current)) = (&self.store, &entry.current) else {
            return Ok(());
        };
        let io = RegistryError::Storage;
        if let Some(p) = &entry.previous {
            store
                .keep_module(&p.digest.to_hex(), &p.bytes)
                .map_err(io)?;
        }
        store
            .write(name, &entry.manifest, &current.bytes)
            .map_err(io)?;
        let record = Recorded {
            version: current.number,
            digest: current.digest.to_hex(),
            previous: entry.previous.as_ref().map(|p| PreviousRecord {
                version: p.number,
                digest: p.digest.to_hex(),
            }),
        };
        store.record(name, record).map_err(io)
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
        Ok((self.view(&name, found(&entries, &name)?), created))
    }

    /// Hot-swaps a handler's module, keeping its manifest. A refused module
    /// is recorded as the handler's `last_error`.
    pub async fn swap_module(
        &self,
        name: &HandlerName,
        module: Vec<u8>,
    ) -> Result<HandlerView, RegistryError> {
        let mut entries = self.entries.lock().await;
        let manifest = found(&entries, name)?.manifest.clone();
        let result = self
            .install(&mut entries, name, manifest, module.into(), None)
            .await;
        if let Err(e) = &result
            && let Some(entry) = entries.get_mut(name)
        {
            entry.last_error = Some(e.to_string());
        }
        result?;
        Ok(self.view(name, found(&entries, name)?))
    }

    /// Brings the previous version back (the current one becomes the
    /// previous, so a second rollback undoes the first).
    pub async fn rollback(&self, name: &HandlerName) -> Result<HandlerView, RegistryError> {
        let mut entries = self.entries.lock().await;
        let entry = found(&entries, name)?;
        let previous = entry
            .previous
            .clone()
            .ok_or_else(|| RegistryError::NoPrevious(name.clone()))?;
        let manifest = entry.manifest.clone();
        self.install(
            &mut entries,
            name,
            manifest,
            previous.bytes,
            Some(previous.number),
        )
        .await?;
        Ok(self.view(name, found(&entries, name)?))
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
        let mut entries = self.entries.lock().await;
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
        let mut entries = self.entries.lock().await;
        let entry = found(&entries, name)?;
        let view = self.view(name, entry);
        if entry.current.is_some() {
            self.runtime.stop(name).await?;
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
        Ok(self.view(name, found(&entries, name)?))
    }

    /// Every handler, by name.
    pub async fn list(&self) -> Vec<HandlerView> {
        let entries = self.entries.lock().await;
        entries.iter().map(|(n, e)| self.view(n, e)).collect()
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
        // The directory is listed under the lock: a deploy holds it while it
        // compiles (seconds for a Python module) and writes its files before
        // letting go, so a listing taken earlier could miss a handler
        // deployed meanwhile and drain it as removed.
        let mut entries = self.entries.lock().await;
        let files = match store.manifests() {
            Ok(files) => files,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the handlers directory");
                return 0;
            }
        };
        let records = store.records();
        let mut changed = 0;
        for (name, path) in &files {
            let (manifest, bytes) = match store.read(path) {
                Ok(found) => found,
                Err(e) => {
                    note_failure(&mut entries, name, None, e);
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
            let number = match (entries.contains_key(name), records.get(name)) {
                (false, Some(record)) => {
                    let (entry, number) = restore(store, record, manifest.clone(), digest);
                    entries.insert(name.clone(), entry);
                    Some(number)
                }
                _ => None,
            };
            match self
                .install(&mut entries, name, manifest.clone(), bytes.into(), number)
                .await
            {
                Ok(()) => {
                    changed += 1;
                    tracing::info!(handler = %name, file = %path.display(), "handler loaded from the handlers directory");
                }
                Err(e) => note_failure(&mut entries, name, Some(manifest), e.to_string()),
            }
        }
        let gone: Vec<HandlerName> = entries
            .keys()
            .filter(|n| !files.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            tracing::info!(handler = %name, "manifest removed: draining the handler");
            if entries.remove(&name).is_some_and(|e| e.current.is_some()) {
                let _ = self.runtime.stop(&name).await;
            }
            changed += 1;
        }
        changed
    }

    /// Drains every handler.
    pub async fn shutdown(&self) {
        self.runtime.shutdown().await;
    }
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
/// version back when its module was kept, and the number the module in the
/// directory (of `digest`) runs as — the recorded one if it is the recorded
/// module, else the next.
fn restore(store: &Store, record: &Recorded, manifest: Manifest, digest: Digest) -> (Entry, u64) {
    let mut entry = Entry::new(manifest);
    entry.previous = record.previous.as_ref().and_then(|p| {
        let bytes = store.kept_module(&p.digest)?;
        Some(Loaded {
            number: p.version,
            digest: Digest::of(&bytes),
            bytes: bytes.into(),
        })
    });
    let number = if record.digest == digest.to_hex() {
        record.version
    } else {
        let highest = record.previous.as_ref().map_or(0, |p| p.version);
        record.version.max(highest) + 1
    };
    (entry, number)
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
