//! The command line: one file per subcommand, each with its arguments and
//! a `run`. Library errors are turned into messages (with `anyhow` context)
//! here and nowhere else.

mod bench;
#[cfg(all(feature = "sqlite", feature = "wasm"))]
mod demo;
#[cfg(feature = "wasm")]
mod guests;
mod migrate;
mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Where Rheo keeps its data when no backend is given: a SQLite file in the
/// current directory.
pub const DEFAULT_BACKEND: &str = "sqlite://rheo.db";

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
    /// Measure append, fetch+ack and end-to-end handler throughput and
    /// latency on a backend.
    Bench(bench::BenchArgs),
    /// The whole story in one command, on SQLite in a temporary folder:
    /// streams, appends, WebAssembly handlers acking, retrying and
    /// dead-lettering, lag, queries, replay, hot swap and redrive.
    #[cfg(all(feature = "sqlite", feature = "wasm"))]
    Demo(demo::DemoArgs),
}

/// Runs the parsed command line and turns the outcome into an exit code.
pub fn main(cli: Cli) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => args.run().await,
            Command::Migrate(args) => args.run().await,
            Command::Bench(args) => args.run().await,
            #[cfg(all(feature = "sqlite", feature = "wasm"))]
            Command::Demo(args) => args.run().await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
