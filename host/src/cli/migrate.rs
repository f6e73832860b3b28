//! `rheo migrate`: apply the embedded schema migrations to a backend.

use anyhow::Context;
use clap::Args;

use crate::backend::{self, redact_url};
use crate::clock::SystemClock;

/// Arguments of `rheo migrate`.
#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// Backend URL: sqlite://path.db, postgres://user@host/db[?schema=name],
    /// redis://host:port[/db][?prefix=name], mongodb://host:port/database, memory://
    #[arg(long, env = "RHEO_BACKEND", hide_env_values = true, default_value = crate::config::DEFAULT_BACKEND)]
    backend: String,
}

impl MigrateArgs {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let store = backend::connect(&self.backend, SystemClock::shared(), false)
            .await
            .with_context(|| format!("cannot open backend {}", redact_url(&self.backend)))?;
        let applied = store
            .migrate()
            .await
            .with_context(|| format!("migrating {}", redact_url(&self.backend)))?;
        if applied.is_empty() {
            println!("{}: schema is up to date, nothing to apply", store.kind());
        } else {
            println!("{}: applied {} migration(s)", store.kind(), applied.len());
            for name in applied {
                println!("  {name}");
            }
        }
        Ok(())
    }
}
