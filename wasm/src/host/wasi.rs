//! WASI for handlers: linked, because language runtimes import it (Python
//! and JavaScript components import filesystem, sockets, clocks and random;
//! Rust's std imports the CLI interfaces), and denied by configuration.
//!
//! - no preopened directories: every path lookup fails, there is no root;
//! - no environment variables and no arguments;
//! - no network: TCP and UDP are switched off, every socket address is
//!   refused by the address check anyway, and name lookup is off;
//! - stdin is closed;
//! - stdout and stderr are captured line by line into the host's log,
//!   tagged with the handler's name (stdout at info, stderr at warn);
//! - clocks and random numbers are the host's (harmless, and runtimes need
//!   them to start).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use tracing::Level as TraceLevel;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder};

use super::log::{self, LogSink, MAX_LINE_BYTES, Source};

/// A WASI context that grants nothing but clocks, random and a log.
pub(crate) fn denied_context(sink: &LogSink) -> WasiCtx {
    WasiCtxBuilder::new()
        .stdout(LogStream::new(sink, Source::Stdout))
        .stderr(LogStream::new(sink, Source::Stderr))
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }))
        .build()
}

/// A guest output stream that becomes log lines.
#[derive(Debug, Clone)]
struct LogStream {
    sink: LogSink,
    source: Source,
}

impl LogStream {
    fn new(sink: &LogSink, source: Source) -> Self {
        Self {
            sink: sink.clone(),
            source,
        }
    }

    fn writer(&self) -> LineWriter {
        LineWriter {
            sink: self.sink.clone(),
            source: self.source,
            level: match self.source {
                Source::Stderr => TraceLevel::WARN,
                _ => TraceLevel::INFO,
            },
            pending: Vec::new(),
        }
    }
}

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.writer())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.writer())
    }
}

/// Splits written bytes into lines and logs each complete one. A line
/// longer than [`MAX_LINE_BYTES`] is logged in pieces, so a guest writing
/// without newlines cannot grow the buffer; what is left when the stream is
/// dropped is logged then.
#[derive(Debug)]
struct LineWriter {
    sink: LogSink,
    source: Source,
    level: TraceLevel,
    pending: Vec<u8>,
}

impl LineWriter {
    fn push(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let room = MAX_LINE_BYTES - self.pending.len();
            match bytes.iter().take(room).position(|b| *b == b'\n') {
                Some(newline) => {
                    self.pending.extend_from_slice(&bytes[..newline]);
                    self.emit();
                    bytes = &bytes[newline + 1..];
                }
                None => {
                    let take = bytes.len().min(room);
                    self.pending.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if self.pending.len() == MAX_LINE_BYTES {
                        self.emit();
                    }
                }
            }
        }
    }

    fn emit(&mut self) {
        let line = String::from_utf8_lossy(&self.pending);
        let line = line.strip_suffix('\r').unwrap_or(&line);
        log::emit(&self.sink, self.source, self.level, line);
        self.pending.clear();
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            self.emit();
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LineWriter {
    async fn ready(&mut self) {}
}

impl OutputStream for LineWriter {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Logging never blocks: accept any amount.
        Ok(64 * 1024)
    }
}

impl AsyncWrite for LineWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Arc;

    use crate::clock::SystemClock;
    use crate::model::HandlerName;

    fn writer() -> LineWriter {
        let sink = LogSink::new(
            HandlerName::parse("h").unwrap(),
            None,
            SystemClock::shared(),
            Arc::default(),
        );
        LogStream::new(&sink, Source::Stdout).writer()
    }

    #[test]
    fn complete_lines_are_emitted_and_the_rest_kept() {
        let mut w = writer();
        w.push(b"one\ntw");
        assert_eq!(w.pending, b"tw");
        w.push(b"o\r\nthree");
        assert_eq!(w.pending, b"three");
    }

    #[test]
    fn over_long_lines_are_emitted_in_pieces() {
        let mut w = writer();
        w.push(&vec![b'x'; MAX_LINE_BYTES * 2 + 5]);
        assert_eq!(w.pending.len(), 5);
    }
}
