//! Logging setup: human-readable lines on stderr, filtered by `RUST_LOG`
//! when it is set, else by the command's verbosity.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `default` is used when `RUST_LOG` is unset
/// (e.g. `"info"`, or `"rheo=debug,info"`).
pub fn init(default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal, not in log files.
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}
