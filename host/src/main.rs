//! The `rheo` command: parse the command line, set up logging, run.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = rheo::cli::Cli::parse();
    rheo::telemetry::init(cli.verbosity());
    rheo::cli::main(cli)
}
