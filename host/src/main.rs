//! The `rheo` command: parse the command line, set up logging, run.

use clap::Parser;

/// mimalloc rather than the system allocator: deliveries allocate (events,
/// leases, guest buffers) on every call, and it is measurably faster there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = rheo::cli::Cli::parse();
    rheo::telemetry::init(cli.verbosity());
    rheo::cli::main(cli)
}
