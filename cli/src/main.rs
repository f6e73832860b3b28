//! The `rheo` command: parse the command line and run it (which sets up
//! logging).

use clap::Parser;

/// mimalloc rather than the system allocator: deliveries allocate (events,
/// leases, guest buffers) on every call, and it is measurably faster there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    rheo::cli::main(rheo::cli::Cli::parse())
}
