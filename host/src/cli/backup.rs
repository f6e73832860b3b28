//! `rheo backup` and `rheo restore`: a single node's state — its SQLite
//! store and its handlers — in one file, and back
//! (`docs/operations.md#backup-and-restore`). The backup is made from the
//! live store (a server may be running: it goes on serving), restored
//! into a place no store is in yet.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;

use crate::backend::sqlite;
use crate::config::{ServeConfig, ServeOptions};

/// Where a single node keeps its state, read as `rheo serve` reads it.
#[derive(Debug, Args)]
pub(crate) struct Place {
    /// The node's data folder (its SQLite store DIR/rheo.db and handlers
    /// DIR/handlers), as `rheo serve --data-dir`
    #[arg(long, env = "RHEO_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// The SQLite store, as `rheo serve --backend` [default: sqlite://rheo.db,
    /// or sqlite://DIR/rheo.db with --data-dir]
    #[arg(long, env = "RHEO_BACKEND", hide_env_values = true, value_name = "URL")]
    backend: Option<String>,
    /// The handlers folder, as `rheo serve --handlers-dir` [default:
    /// rheo-handlers, or DIR/handlers with --data-dir]
    #[arg(long, env = "RHEO_HANDLERS_DIR", value_name = "DIR")]
    handlers_dir: Option<PathBuf>,
}

impl Place {
    /// The store's URL and the handlers folder.
    fn resolve(&self) -> anyhow::Result<(String, PathBuf)> {
        let config = ServeConfig::resolve(ServeOptions {
            data_dir: self.data_dir.clone(),
            backend: self.backend.clone(),
            handlers_dir: self.handlers_dir.clone(),
            ..ServeOptions::default()
        })?;
        let url = config.backend;
        if !sqlite::is_file_store(&url) {
            bail!(
                "rheo backup and restore copy a SQLite store, not {}: back PostgreSQL, Redis \
                 and MongoDB up with their own tools (docs/operations.md#backup-and-restore)",
                crate::backend::redact_url(&url)
            );
        }
        Ok((url, config.handlers_dir))
    }
}

/// Arguments of `rheo backup`.
#[derive(Debug, Args)]
pub(crate) struct BackupArgs {
    /// The backup file to write (it must not exist)
    #[arg(long, value_name = "FILE")]
    to: PathBuf,
    #[command(flatten)]
    place: Place,
}

/// Arguments of `rheo restore`.
#[derive(Debug, Args)]
pub(crate) struct RestoreArgs {
    /// The backup file (`rheo backup --to FILE` made it)
    #[arg(value_name = "FILE")]
    from: PathBuf,
    #[command(flatten)]
    place: Place,
}

impl BackupArgs {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let (url, handlers) = self.place.resolve()?;
        let files = read_folder(&handlers)?;
        let summary = sqlite::backup(&url, &self.to, &files)
            .await
            .with_context(|| format!("backing up {}", crate::backend::redact_url(&url)))?;
        println!(
            "backed up {} stream(s), {} event(s) and {} handler file(s) from {} to {} ({} bytes)",
            summary.streams,
            summary.events,
            summary.files,
            handlers.display(),
            self.to.display(),
            summary.bytes
        );
        Ok(())
    }
}

impl RestoreArgs {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let (url, handlers) = self.place.resolve()?;
        if std::fs::read_dir(&handlers).is_ok_and(|mut entries| entries.next().is_some()) {
            bail!(
                "{} is not empty: restore into a new place (or move those handlers away first)",
                handlers.display()
            );
        }
        // No server may start on the store while it is being put in place.
        let _lock = sqlite::lock_store(&url)?;
        let (summary, files) = sqlite::restore(&self.from, &url)
            .await
            .with_context(|| format!("restoring {}", self.from.display()))?;
        for (path, body) in &files {
            let target = handlers.join(path);
            if let Some(folder) = target.parent() {
                std::fs::create_dir_all(folder)
                    .with_context(|| format!("cannot create {}", folder.display()))?;
            }
            std::fs::write(&target, body)
                .with_context(|| format!("cannot write {}", target.display()))?;
        }
        println!(
            "restored {} stream(s), {} event(s) into {} and {} handler file(s) into {}",
            summary.streams,
            summary.events,
            crate::backend::redact_url(&url),
            files.len(),
            handlers.display()
        );
        Ok(())
    }
}

/// Every file under `folder` (none when it does not exist), by path
/// relative to it with `/` between names.
fn read_folder(folder: &Path) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    let mut pending = vec![folder.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir == folder => break,
            Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
        };
        for entry in entries {
            let path = entry
                .with_context(|| format!("cannot list {}", dir.display()))?
                .path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let relative = path
                .strip_prefix(folder)
                .expect("under the folder")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            let body =
                std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
            files.push((relative, body));
        }
    }
    files.sort();
    Ok(files)
}
