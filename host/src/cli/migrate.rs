//! `rheo migrate`: apply the embedded schema migrations to a backend.

use anyhow::Context;
use clap::Args;

use crate::backend;
use crate::clock::SystemClock;

/// Arguments of `rheo migrate`.
#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// Backend URL: sqlite://path.db, postgres://user@host/db[?schema=name],
    /// redis://host:port[/db][?prefix=name], mongodb://host:port/database, memory://
    #[arg(long, env = "RHEO_BACKEND", default_value = crate::config::DEFAULT_BACKEND)]
    backend: String,
}

impl MigrateArgs {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        let store = backend::connect(&self.backend, SystemClock::shared(), false)
            .await
            .with_context(|| format!("cannot open backend {}", redact(&self.backend)))?;
        let applied = store
            .migrate()
            .await
            .with_context(|| format!("migrating {}", redact(&self.backend)))?;
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

/// A backend URL safe to print: any password is masked.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_masked_in_messages() {
        assert_eq!(
            redact("postgres://rheo:s3cret@db:5432/x"),
            "postgres://rheo:***@db:5432/x"
        );
        assert_eq!(redact("postgres://rheo@db/x"), "postgres://rheo@db/x");
        assert_eq!(redact("sqlite://rheo.db"), "sqlite://rheo.db");
    }
}
