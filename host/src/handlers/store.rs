//! The handlers directory: manifests and modules as files, so handlers
//! deployed through the API survive a restart and handlers dropped in by
//! hand get deployed.
//!
//! ```text
//! <dir>/<name>.toml              manifest (module = "<name>.wasm" when written by Rheo)
//! <dir>/<name>.wasm              current module
//! <dir>/.rheo/state.json         version numbers and previous digests
//! <dir>/.rheo/modules/<hex>.wasm previous modules, for rollback after a restart
//! <dir>/.rheo/cache/             compiled modules, by digest
//! ```
//!
//! Every file is replaced by writing a temporary file and renaming it, so a
//! reader (or the watcher) never sees half a file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use serde::{Deserialize, Serialize};

use super::deploys::DeployStep;
use super::manifest::Manifest;
use crate::model::HandlerName;

/// What the store remembers of a handler besides its files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Recorded {
    pub(crate) version: u64,
    pub(crate) digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) previous: Option<PreviousRecord>,
    /// The deploy history (`docs/handlers.md#deploy-history`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) history: Vec<DeployStep>,
}

/// The version a rollback would restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PreviousRecord {
    pub(crate) version: u64,
    pub(crate) digest: String,
}

/// A handlers directory.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    dir: PathBuf,
    /// `state.json` holds every handler's record: its read-modify-writes
    /// (operations on different handlers run at the same time) take turns.
    records: Arc<Mutex<()>>,
}

/// Makes temporary file names unique within the process: two writers of
/// one file (two handlers keeping the same previous module) never share one.
static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

fn io_error(path: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", path.display())
}

impl Store {
    /// Uses (creating it if needed) `dir`.
    pub(crate) fn open(dir: impl Into<PathBuf>) -> Result<Self, String> {
        let dir = dir.into();
        let modules = dir.join(".rheo").join("modules");
        std::fs::create_dir_all(&modules).map_err(|e| io_error(&modules, e))?;
        Ok(Self {
            dir,
            records: Arc::default(),
        })
    }

    /// The directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where compiled modules are cached.
    pub(crate) fn cache_dir(&self) -> PathBuf {
        self.dir.join(".rheo").join("cache")
    }

    /// Where the manifest of `name` is.
    pub(crate) fn manifest_path(&self, name: &HandlerName) -> PathBuf {
        self.dir.join(format!("{name}.toml"))
    }

    /// Every manifest in the directory, by handler name (the file stem).
    pub(crate) fn manifests(&self) -> Result<BTreeMap<HandlerName, PathBuf>, String> {
        let mut out = BTreeMap::new();
        let entries = std::fs::read_dir(&self.dir).map_err(|e| io_error(&self.dir, e))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "toml")
                && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
            {
                match HandlerName::parse(stem) {
                    Ok(name) => {
                        out.insert(name, path);
                    }
                    Err(e) => {
                        tracing::warn!(file = %path.display(), error = %e, "ignoring a manifest whose file name is not a handler name")
                    }
                }
            }
        }
        Ok(out)
    }

    /// Reads a manifest and the module it names.
    pub(crate) fn read(&self, manifest_path: &Path) -> Result<(Manifest, Vec<u8>), String> {
        let text =
            std::fs::read_to_string(manifest_path).map_err(|e| io_error(manifest_path, e))?;
        let manifest =
            Manifest::from_toml(&text).map_err(|e| format!("{}: {e}", manifest_path.display()))?;
        let module = manifest.module.as_deref().ok_or_else(|| {
            format!(
                "{}: `module` is missing (the .wasm file to run)",
                manifest_path.display()
            )
        })?;
        let module_path = manifest_path.parent().unwrap_or(&self.dir).join(module);
        let bytes = std::fs::read(&module_path).map_err(|e| io_error(&module_path, e))?;
        Ok((manifest, bytes))
    }

    /// Writes `<name>.toml` and `<name>.wasm`.
    pub(crate) fn write(
        &self,
        name: &HandlerName,
        manifest: &Manifest,
        module: &[u8],
    ) -> Result<(), String> {
        let mut manifest = manifest.clone();
        manifest.name = None;
        manifest.module = Some(format!("{name}.wasm"));
        self.replace(&self.dir.join(format!("{name}.wasm")), module)?;
        self.replace(
            &self.dir.join(format!("{name}.toml")),
            manifest.to_toml().as_bytes(),
        )
    }

    /// Keeps a module for a later rollback.
    pub(crate) fn keep_module(&self, digest: &str, module: &[u8]) -> Result<(), String> {
        let path = self.module_path(digest);
        if path.exists() {
            return Ok(());
        }
        self.replace(&path, module)
    }

    /// A kept module.
    pub(crate) fn kept_module(&self, digest: &str) -> Option<Vec<u8>> {
        std::fs::read(self.module_path(digest)).ok()
    }

    fn module_path(&self, digest: &str) -> PathBuf {
        self.dir
            .join(".rheo")
            .join("modules")
            .join(format!("{digest}.wasm"))
    }

    /// Deletes a handler's files and its record.
    pub(crate) fn remove(&self, name: &HandlerName) -> Result<(), String> {
        for ext in ["toml", "wasm"] {
            let path = self.dir.join(format!("{name}.{ext}"));
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error(&path, e)),
            }
        }
        let _turn = self.records.lock();
        let mut records = self.records();
        records.remove(name);
        self.save_records(&records)
    }

    /// Version records, by handler.
    pub(crate) fn records(&self) -> BTreeMap<HandlerName, Recorded> {
        std::fs::read(self.state_path())
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Saves one handler's record.
    pub(crate) fn record(&self, name: &HandlerName, record: Recorded) -> Result<(), String> {
        let _turn = self.records.lock();
        let mut records = self.records();
        records.insert(name.clone(), record);
        self.save_records(&records)
    }

    fn save_records(&self, records: &BTreeMap<HandlerName, Recorded>) -> Result<(), String> {
        let json = serde_json::to_vec_pretty(records).map_err(|e| e.to_string())?;
        self.replace(&self.state_path(), &json)
    }

    fn state_path(&self) -> PathBuf {
        self.dir.join(".rheo").join("state.json")
    }

    /// Writes `bytes` to `path` through a temporary file and a rename.
    fn replace(&self, path: &Path, bytes: &[u8]) -> Result<(), String> {
        let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp-{}-{n}", std::process::id()));
        std::fs::write(&tmp, bytes).map_err(|e| io_error(&tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| io_error(path, e))
    }
}
