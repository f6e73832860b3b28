//! The command line: one file per subcommand, each with its arguments and
//! a `run`. Library errors are turned into messages (with `anyhow` context)
//! here and nowhere else.
//!
//! `serve`, `migrate`, `backup`, `restore`, `bench` and `demo` run on a tokio runtime; the ops commands
//! (`ops/`) are blocking HTTP clients of a running server and run before
//! any runtime exists, sharing `client` (HTTP), `table` (aligned output)
//! and `multipart` (handler uploads).

#[cfg(feature = "sqlite")]
mod backup;
mod bench;
mod client;
mod context;
#[cfg(all(feature = "sqlite", feature = "wasm"))]
mod demo;
mod migrate;
mod multipart;
mod ops;
mod project;
#[cfg(test)]
mod reference;
mod serve;
mod shell;
mod table;

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// Durable, searchable, replayable consumer groups with WebAssembly handlers.
#[derive(Debug, Parser)]
#[command(name = "rheo", version, about, long_about = None)]
pub struct Cli {
    /// More log output (-v: debug, -vv: trace). `RUST_LOG` overrides it.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,

    /// Less output: errors only.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,

    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// The default log filter for the chosen verbosity.
    pub fn verbosity(&self) -> &'static str {
        // The demo narrates on stdout; only warnings (a guest's own warnings
        // among them) interleave with it.
        #[cfg(all(feature = "sqlite", feature = "wasm"))]
        if matches!(self.command, Command::Demo(_)) && !self.quiet && self.verbose == 0 {
            return "warn";
        }
        // Likewise the bench table.
        if matches!(self.command, Command::Bench(_)) && !self.quiet && self.verbose == 0 {
            return "warn,sqlx=error";
        }
        match (self.quiet, self.verbose) {
            (true, _) => "error",
            // sqlx reports PostgreSQL notices ("already exists, skipping") at info.
            (false, 0) => "info,sqlx=warn",
            (false, 1) => "rheo=debug,info,sqlx=warn",
            (false, _) => "rheo=trace,debug",
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP API and run the deployed WebAssembly handlers.
    Serve(serve::ServeArgs),
    /// Create or update the database schema of a backend.
    Migrate(migrate::MigrateArgs),
    /// Copy a single node's SQLite store (live: a server may be running)
    /// and its handlers into one backup file.
    #[cfg(feature = "sqlite")]
    Backup(backup::BackupArgs),
    /// Restore a backup file (`rheo backup`) into a new data folder or
    /// store and handlers folder.
    #[cfg(feature = "sqlite")]
    Restore(backup::RestoreArgs),
    /// Measure append, fetch+ack and end-to-end handler throughput and
    /// latency on a backend.
    Bench(bench::BenchArgs),
    /// The whole story in one command, on SQLite in a temporary folder:
    /// streams, appends, WebAssembly handlers acking, retrying and
    /// dead-lettering, lag, queries, replay, hot swap and redrive.
    #[cfg(all(feature = "sqlite", feature = "wasm"))]
    Demo(demo::DemoArgs),
    /// Print a completion script for a shell (bash, zsh, fish, elvish,
    /// powershell).
    Completions(shell::CompletionsArgs),
    /// Print the manual page, or write one per command into a folder.
    Man(shell::ManArgs),
    /// Saved servers (with token and CA): add, use, list, remove.
    Context(context::ContextArgs),
    #[command(flatten)]
    Ops(ops::OpsCommand),
}

/// Runs the parsed command line and turns the outcome into an exit code.
pub fn main(cli: Cli) -> ExitCode {
    let verbosity = cli.verbosity();
    // The server sets up its own logging once its configuration is read
    // (the log format and the trace exporter are part of it).
    if !matches!(cli.command, Command::Serve(_)) {
        let _ = crate::telemetry::init(verbosity, crate::telemetry::LogFormat::Text, None);
    }
    let result = match cli.command {
        // Blocking HTTP clients: no runtime for them to block.
        Command::Ops(command) => command.run(),
        Command::Serve(args) => on_runtime(args.run(verbosity)),
        Command::Migrate(args) => on_runtime(args.run()),
        #[cfg(feature = "sqlite")]
        Command::Backup(args) => on_runtime(args.run()),
        #[cfg(feature = "sqlite")]
        Command::Restore(args) => on_runtime(args.run()),
        Command::Bench(args) => on_runtime(args.run()),
        Command::Completions(args) => args.run(),
        Command::Man(args) => args.run(),
        Command::Context(args) => args.run(),
        #[cfg(all(feature = "sqlite", feature = "wasm"))]
        Command::Demo(args) => on_runtime(args.run()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Whatever a driver or parser put in the message, a backend
            // password is not shown (docs/backends.md#secrets-in-backend-urls).
            eprintln!(
                "error: {}",
                crate::backend::redact_urls_in(&format!("{e:#}"))
            );
            ExitCode::from(exit_code(&e))
        }
    }
}

/// What kind of failure `error` is, as an exit code
/// (docs/cli.md#exit-codes): the server's answer or the CLI's own refusal
/// wherever in the chain of causes it is, else 1.
fn exit_code(error: &anyhow::Error) -> u8 {
    error
        .chain()
        .find_map(|cause| {
            if let Some(e) = cause.downcast_ref::<client::ClientError>() {
                Some(e.exit_code())
            } else {
                cause
                    .downcast_ref::<ops::Invalid>()
                    .map(|_| client::exit::INVALID)
            }
        })
        .unwrap_or(client::exit::FAILED)
}

/// Runs `command` to completion on a new multi-threaded runtime.
fn on_runtime(command: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(command)
}
