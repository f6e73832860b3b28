//! The `rheo` command: hands the library the example guests, reads the
//! command line and runs it (`rheo::cli`, which sets up logging).

use clap::{CommandFactory, FromArgMatches};

/// mimalloc rather than the system allocator: deliveries allocate (events,
/// leases, guest buffers) on every call, and it is measurably faster there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `rheo --version`: the package version and the commit built from.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("RHEO_COMMIT"), ")");

fn main() -> std::process::ExitCode {
    #[cfg(feature = "wasm")]
    rheo::example_guests::provide(rheo_example_guests::ALL);
    let matches = rheo::cli::Cli::command().version(VERSION).get_matches();
    let cli = rheo::cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    rheo::cli::main(cli)
}
