//! `log(level, message)`: a guest's log line becomes a `tracing` event.
//!
//! Events use the target [`LOG_TARGET`] and carry the handler's name in the
//! `handler` field, so an operator can filter one handler's output
//! (`RUST_LOG=rheo::handler=debug`) and tell handlers apart. Lines are cut
//! at [`MAX_LINE_BYTES`]: a guest must not be able to make the host buffer
//! or ship unbounded text.

use tracing::{Level as TraceLevel, debug, error, info, trace, warn};

use crate::model::HandlerName;
use crate::wasm::bindings::Level;

/// The `tracing` target of every line a handler logs (`log` and stdio).
pub const LOG_TARGET: &str = "rheo::handler";

/// Longest log line kept, in bytes; the rest is cut.
pub const MAX_LINE_BYTES: usize = 4096;

/// Where a guest's line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The `log` import.
    Log,
    /// WASI stdout.
    Stdout,
    /// WASI stderr.
    Stderr,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Log => "log",
            Source::Stdout => "stdout",
            Source::Stderr => "stderr",
        }
    }
}

/// Logs a line of the `log` import.
pub(crate) fn write(handler: &HandlerName, level: Level, message: &str) {
    let level = match level {
        Level::Trace => TraceLevel::TRACE,
        Level::Debug => TraceLevel::DEBUG,
        Level::Info => TraceLevel::INFO,
        Level::Warn => TraceLevel::WARN,
        Level::Error => TraceLevel::ERROR,
    };
    emit(handler, Source::Log, level, message);
}

/// Logs one line from any source at `level`, cut to [`MAX_LINE_BYTES`].
pub(crate) fn emit(handler: &HandlerName, source: Source, level: TraceLevel, line: &str) {
    let line = clip(line);
    let handler = handler.as_str();
    let source = source.as_str();
    // `tracing` needs the level at compile time, hence one call per level.
    match level {
        TraceLevel::TRACE => trace!(target: LOG_TARGET, handler, source, "{line}"),
        TraceLevel::DEBUG => debug!(target: LOG_TARGET, handler, source, "{line}"),
        TraceLevel::INFO => info!(target: LOG_TARGET, handler, source, "{line}"),
        TraceLevel::WARN => warn!(target: LOG_TARGET, handler, source, "{line}"),
        _ => error!(target: LOG_TARGET, handler, source, "{line}"),
    }
}

/// Cuts `line` to [`MAX_LINE_BYTES`] on a char boundary.
fn clip(line: &str) -> &str {
    if line.len() <= MAX_LINE_BYTES {
        return line;
    }
    let mut end = MAX_LINE_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_LINE_BYTES);
        let cut = clip(&long);
        assert!(cut.len() <= MAX_LINE_BYTES);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(clip("short"), "short");
    }
}
