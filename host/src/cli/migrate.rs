//! `rheo migrate`: apply the embedded schema migrations to a backend, or
//! (`--status`) list which are applied and which pending.

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

    /// List the applied and pending migrations (and any a newer rheo
    /// applied) without changing anything.
    #[arg(long)]
    status: bool,
}

impl MigrateArgs {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let store = backend::connect(&self.backend, SystemClock::shared(), false)
            .await
            .with_context(|| format!("cannot open backend {}", redact_url(&self.backend)))?;
        let status = store
            .migration_status()
            .await
            .with_context(|| format!("reading the migrations of {}", redact_url(&self.backend)))?;
        if self.status {
            print_status(store.kind(), &status);
            return Ok(());
        }
        status.check_not_newer()?;
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

/// `rheo migrate --status`: a summary line, then one line a migration.
fn print_status(kind: &str, status: &crate::backend::MigrationStatus) {
    println!(
        "{kind}: {} applied, {} pending{}",
        status.applied.len(),
        status.pending.len(),
        match status.unknown.len() {
            0 => String::new(),
            n => format!(", {n} unknown to this rheo (a newer one applied them)"),
        }
    );
    for (state, names) in [
        ("applied", &status.applied),
        ("pending", &status.pending),
        ("unknown", &status.unknown),
    ] {
        for name in names {
            println!("  {state:<8} {name}");
        }
    }
}
