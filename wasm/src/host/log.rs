//! `log(level, message)`: a guest's log line becomes a `tracing` event,
//! and a line in the handler's in-memory log (`docs/handlers.md#handler-logs`).
//!
//! Events use the target [`LOG_TARGET`] and carry the handler's name in the
//! `handler` field, so an operator can filter one handler's output
//! (`RUST_LOG=rheo::handler=debug`) and tell handlers apart. Lines are cut
//! at [`MAX_LINE_BYTES`]: a guest must not be able to make the host buffer
//! or ship unbounded text.
//!
//! The in-memory line also says which version wrote it and, inside a call,
//! which delivery it was handling: each store's [`LogSink`] holds the
//! delivery of the call running in it, set by the instance per call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tracing::{Level as TraceLevel, debug, error, info, trace, warn};

use crate::bindings::{Delivery, Level};
use crate::clock::SharedClock;
pub(crate) use crate::handler_logs::LogSource as Source;
use crate::handler_logs::{HandlerLog, LogDelivery, LogLevel, NewLine};
use crate::model::HandlerName;

/// The `tracing` target of every line a handler logs (`log` and stdio).
pub const LOG_TARGET: &str = "rheo::handler";

/// Longest log line kept, in bytes; the rest is cut.
pub const MAX_LINE_BYTES: usize = 4096;

/// Where one store's lines go: `tracing` (by handler name) and, when the
/// handler has one, its in-memory log, with the version and the delivery
/// of the running call. Shared by the store's state and its stdout and
/// stderr; only that store's one call at a time touches the delivery slot.
#[derive(Debug, Clone)]
pub(crate) struct LogSink {
    handler: HandlerName,
    log: Option<Arc<HandlerLog>>,
    clock: SharedClock,
    /// The version number (0 until it has one).
    version: Arc<AtomicU64>,
    delivery: Arc<Mutex<Option<Arc<LogDelivery>>>>,
}

impl LogSink {
    /// A sink for `handler`'s lines; with `log`, kept there too.
    pub(crate) fn new(
        handler: HandlerName,
        log: Option<Arc<HandlerLog>>,
        clock: SharedClock,
        version: Arc<AtomicU64>,
    ) -> Self {
        Self {
            handler,
            log,
            clock,
            version,
            delivery: Arc::new(Mutex::new(None)),
        }
    }

    /// Lines from now on belong to `delivery` (`None`: to no delivery).
    pub(crate) fn set_delivery(&self, delivery: Option<&Delivery>) {
        if self.log.is_none() {
            return;
        }
        let delivery = delivery.map(|d| {
            Arc::new(LogDelivery {
                event_id: d.event.id.clone(),
                stream: d.event.stream.clone(),
                partition: d.event.partition,
                sequence: d.event.sequence,
                attempt: d.attempt,
            })
        });
        *self.delivery.lock() = delivery;
    }
}

/// Logs a line of the `log` import.
pub(crate) fn write(sink: &LogSink, level: Level, message: &str) {
    let level = match level {
        Level::Trace => TraceLevel::TRACE,
        Level::Debug => TraceLevel::DEBUG,
        Level::Info => TraceLevel::INFO,
        Level::Warn => TraceLevel::WARN,
        Level::Error => TraceLevel::ERROR,
    };
    emit(sink, Source::Log, level, message);
}

/// Logs one line from any source at `level`, cut to [`MAX_LINE_BYTES`].
pub(crate) fn emit(sink: &LogSink, source: Source, level: TraceLevel, line: &str) {
    let line = clip(line);
    keep(sink, source, level, line);
    let handler = sink.handler.as_str();
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

/// Puts the line into the handler's log, if it has one.
fn keep(sink: &LogSink, source: Source, level: TraceLevel, line: &str) {
    let Some(log) = &sink.log else {
        return;
    };
    let level = match level {
        TraceLevel::TRACE => LogLevel::Trace,
        TraceLevel::DEBUG => LogLevel::Debug,
        TraceLevel::INFO => LogLevel::Info,
        TraceLevel::WARN => LogLevel::Warn,
        _ => LogLevel::Error,
    };
    let version = sink.version.load(Ordering::Relaxed);
    log.push(NewLine {
        at: sink.clock.now(),
        level,
        source,
        message: line.to_owned(),
        version: (version != 0).then_some(version),
        delivery: sink.delivery.lock().clone(),
    });
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
