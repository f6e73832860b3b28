//! The last log lines of every handler, kept in memory
//! (`docs/handlers.md#handler-logs`).
//!
//! Each handler name has one [`HandlerLog`]: a ring of its last N lines and
//! a broadcast channel for followers. A line is numbered (`seq`, 1, 2, …)
//! by the log it goes into, so numbers keep growing across hot swaps and
//! rollbacks (which keep the log) and start again only when the handler is
//! deleted and deployed anew. The ring and the channel sit behind the
//! handler's own lock: handlers never wait for each other to log, and the
//! map of logs ([`HandlerLogs`]) is only locked to find or drop a log, never
//! by a guest writing a line.
//!
//! Each server keeps its own lines; in a cluster a handler's log on one
//! node holds only what ran there.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::model::{HandlerName, Timestamp};

/// Lines kept per handler when nothing else is configured.
pub const DEFAULT_LOG_LINES: usize = 1000;

/// Most lines a handler's log may be configured to keep.
pub const MAX_LOG_LINES: usize = 100_000;

/// Most lines a follower may fall behind before it is told it missed some.
const MAX_FOLLOW_BACKLOG: usize = 1024;

/// How important a line is, as the guest said (`log`) or by its stream
/// (stdout: info, stderr: warn).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Finest detail.
    Trace,
    /// Debugging.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected.
    Warn,
    /// A failure.
    Error,
}

impl LogLevel {
    /// `trace` … `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// Where a guest's line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogSource {
    /// The `log` import.
    Log,
    /// WASI stdout.
    Stdout,
    /// WASI stderr.
    Stderr,
}

impl LogSource {
    /// `log`, `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogSource::Log => "log",
            LogSource::Stdout => "stdout",
            LogSource::Stderr => "stderr",
        }
    }
}

/// The delivery a guest was handling when it wrote a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogDelivery {
    /// The event's id.
    pub event_id: String,
    /// Its stream.
    pub stream: String,
    /// Its partition.
    pub partition: u32,
    /// Its sequence in the partition.
    pub sequence: u64,
    /// Which attempt this was (1 = first).
    pub attempt: u32,
}

/// A line as written, before the log numbers it.
#[derive(Debug, Clone)]
pub struct NewLine {
    /// When the server received it (its clock).
    pub at: Timestamp,
    /// Its level.
    pub level: LogLevel,
    /// Where it came from.
    pub source: LogSource,
    /// The text, already cut to the longest line kept.
    pub message: String,
    /// The handler version that wrote it; `None` while a new version is
    /// started to be validated, before it has a number.
    pub version: Option<u64>,
    /// The delivery being handled; `None` outside one (start-up code).
    pub delivery: Option<Arc<LogDelivery>>,
}

/// A line in a handler's log.
#[derive(Debug, Clone)]
pub struct LogLine {
    /// Its number in the handler's log: 1, 2, …, never reused while the
    /// handler exists.
    pub seq: u64,
    /// What was written.
    pub line: NewLine,
}

/// What a follower gets next.
#[derive(Debug, Clone)]
pub enum Followed {
    /// A line.
    Line(Arc<LogLine>),
    /// This many lines went by that the follower will never see.
    Gap(u64),
    /// The handler was deleted: nothing more will come.
    Closed,
}

/// The ring of a handler's last lines.
#[derive(Debug)]
struct Ring {
    lines: VecDeque<Arc<LogLine>>,
    capacity: usize,
    next_seq: u64,
}

/// One handler's log: its last lines and the channel followers listen on.
#[derive(Debug)]
pub struct HandlerLog {
    ring: Mutex<Ring>,
    sender: broadcast::Sender<Arc<LogLine>>,
    closed: CancellationToken,
}

impl HandlerLog {
    /// An empty log keeping the last `capacity` lines (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let (sender, _) = broadcast::channel(capacity.min(MAX_FOLLOW_BACKLOG));
        Self {
            ring: Mutex::new(Ring {
                lines: VecDeque::with_capacity(capacity.min(MAX_FOLLOW_BACKLOG)),
                capacity,
                next_seq: 1,
            }),
            sender,
            closed: CancellationToken::new(),
        }
    }

    /// How many lines it keeps.
    pub fn capacity(&self) -> usize {
        self.ring.lock().capacity
    }

    /// Numbers `line`, keeps it (dropping the oldest when full) and hands
    /// it to the followers. Never waits for a follower.
    pub fn push(&self, line: NewLine) -> u64 {
        let mut ring = self.ring.lock();
        let seq = ring.next_seq;
        ring.next_seq += 1;
        let line = Arc::new(LogLine { seq, line });
        if ring.lines.len() == ring.capacity {
            ring.lines.pop_front();
        }
        ring.lines.push_back(Arc::clone(&line));
        // Sent under the lock, so a follower that subscribes and copies the
        // ring under it sees every line exactly once. No receiver is fine.
        let _ = self.sender.send(line);
        seq
    }

    /// The last `limit` lines, oldest first.
    pub fn tail(&self, limit: usize) -> Vec<Arc<LogLine>> {
        let ring = self.ring.lock();
        let skip = ring.lines.len().saturating_sub(limit);
        ring.lines.iter().skip(skip).cloned().collect()
    }

    /// Starts following: the lines to send first and a [`Follower`] for
    /// what comes after them. With `after` (the last `seq` the reader has),
    /// every line after it still kept, and how many after it are no longer
    /// kept (`missed`); without (or with a number this log never gave, as
    /// after a restart), the last `limit` lines.
    pub fn follow(&self, after: Option<u64>, limit: usize) -> Backlog {
        let ring = self.ring.lock();
        let receiver = self.sender.subscribe();
        let first_kept = ring.lines.front().map_or(ring.next_seq, |l| l.seq);
        let (lines, missed): (Vec<Arc<LogLine>>, u64) = match after {
            Some(after) if after < ring.next_seq => {
                let missed = first_kept.saturating_sub(after + 1);
                let lines = ring
                    .lines
                    .iter()
                    .filter(|l| l.seq > after)
                    .cloned()
                    .collect();
                (lines, missed)
            }
            _ => {
                let skip = ring.lines.len().saturating_sub(limit);
                (ring.lines.iter().skip(skip).cloned().collect(), 0)
            }
        };
        let last = lines.last().map_or(ring.next_seq - 1, |l| l.seq);
        Backlog {
            missed,
            lines,
            follower: Follower {
                receiver,
                closed: self.closed.clone(),
                last,
            },
        }
    }

    /// Ends every follower: the handler is gone.
    pub fn close(&self) {
        self.closed.cancel();
    }

    /// Whether [`HandlerLog::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }
}

/// Where a follower starts.
#[derive(Debug)]
pub struct Backlog {
    /// Lines asked for that are no longer kept (say so before `lines`).
    pub missed: u64,
    /// Lines to send first, oldest first.
    pub lines: Vec<Arc<LogLine>>,
    /// What comes after them.
    pub follower: Follower,
}

/// Receives a handler's new lines as they are written.
#[derive(Debug)]
pub struct Follower {
    receiver: broadcast::Receiver<Arc<LogLine>>,
    closed: CancellationToken,
    /// The last `seq` handed out (or already in the backlog).
    last: u64,
}

impl Follower {
    /// The next line, a gap when this follower fell so far behind that
    /// lines were dropped for it, or `Closed` once the handler is deleted
    /// (after the lines written before that).
    pub async fn next(&mut self) -> Followed {
        loop {
            let received = tokio::select! {
                biased;
                received = self.receiver.recv() => received,
                () = self.closed.cancelled() => return Followed::Closed,
            };
            match received {
                // Lines already in the backlog are skipped.
                Ok(line) if line.seq <= self.last => {}
                Ok(line) => {
                    self.last = line.seq;
                    return Followed::Line(line);
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => return Followed::Gap(missed),
                Err(broadcast::error::RecvError::Closed) => return Followed::Closed,
            }
        }
    }
}

/// Every handler's log on this server, by handler name.
#[derive(Debug)]
pub struct HandlerLogs {
    capacity: usize,
    logs: Mutex<HashMap<HandlerName, Arc<HandlerLog>>>,
}

impl Default for HandlerLogs {
    fn default() -> Self {
        Self::new(DEFAULT_LOG_LINES)
    }
}

impl HandlerLogs {
    /// Logs keeping `capacity` lines each.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            logs: Mutex::new(HashMap::new()),
        }
    }

    /// Lines kept per handler.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// `name`'s log, made empty on first use.
    pub fn log(&self, name: &HandlerName) -> Arc<HandlerLog> {
        let mut logs = self.logs.lock();
        Arc::clone(
            logs.entry(name.clone())
                .or_insert_with(|| Arc::new(HandlerLog::new(self.capacity))),
        )
    }

    /// `name`'s log if it has one.
    pub fn get(&self, name: &HandlerName) -> Option<Arc<HandlerLog>> {
        self.logs.lock().get(name).cloned()
    }

    /// Drops `name`'s log and ends its followers (the handler was deleted).
    pub fn remove(&self, name: &HandlerName) {
        if let Some(log) = self.logs.lock().remove(name) {
            log.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(message: &str) -> NewLine {
        NewLine {
            at: Timestamp::from_millis(1_767_225_600_000),
            level: LogLevel::Info,
            source: LogSource::Log,
            message: message.to_owned(),
            version: Some(1),
            delivery: None,
        }
    }

    fn messages(lines: &[Arc<LogLine>]) -> Vec<String> {
        lines.iter().map(|l| l.line.message.clone()).collect()
    }

    fn seqs(lines: &[Arc<LogLine>]) -> Vec<u64> {
        lines.iter().map(|l| l.seq).collect()
    }

    #[test]
    fn the_ring_keeps_the_last_n_lines_numbered_in_order() {
        let log = HandlerLog::new(3);
        for i in 1..=5 {
            assert_eq!(log.push(line(&format!("m{i}"))), i);
        }
        assert_eq!(messages(&log.tail(10)), ["m3", "m4", "m5"]);
        assert_eq!(seqs(&log.tail(10)), [3, 4, 5]);
        assert_eq!(messages(&log.tail(2)), ["m4", "m5"]);
        assert!(log.tail(0).is_empty());
        log.push(line("m6"));
        assert_eq!(seqs(&log.tail(3)), [4, 5, 6]);
    }

    #[test]
    fn a_log_outlives_versions_and_goes_with_the_handler() {
        let logs = HandlerLogs::new(10);
        let name = HandlerName::parse("h").unwrap();
        logs.log(&name).push(line("v1"));
        // A new version takes the same log: numbers go on.
        assert_eq!(logs.log(&name).push(line("v2")), 2);
        let old = logs.get(&name).unwrap();
        logs.remove(&name);
        assert!(old.is_closed());
        assert!(logs.get(&name).is_none());
        // Deployed again: a new log.
        assert_eq!(logs.log(&name).push(line("again")), 1);
    }

    #[test]
    fn resuming_after_a_seq_sends_the_rest_and_counts_what_was_dropped() {
        let log = HandlerLog::new(3);
        for i in 1..=6 {
            log.push(line(&format!("m{i}")));
        }
        // 4, 5, 6 are kept: after 4, nothing missed.
        let b = log.follow(Some(4), 100);
        assert_eq!((b.missed, seqs(&b.lines)), (0, vec![5, 6]));
        // After 1: 2 and 3 are gone.
        let b = log.follow(Some(1), 100);
        assert_eq!((b.missed, seqs(&b.lines)), (2, vec![4, 5, 6]));
        // Up to date.
        let b = log.follow(Some(6), 100);
        assert_eq!((b.missed, b.lines.len()), (0, 0));
        // A number this log never gave (a restart): the last `limit`.
        let b = log.follow(Some(99), 2);
        assert_eq!((b.missed, seqs(&b.lines)), (0, vec![5, 6]));
        let b = log.follow(None, 2);
        assert_eq!((b.missed, seqs(&b.lines)), (0, vec![5, 6]));
    }

    #[tokio::test]
    async fn followers_get_new_lines_once_then_closed() {
        let log = HandlerLog::new(10);
        log.push(line("old"));
        let mut backlog = log.follow(None, 10);
        assert_eq!(messages(&backlog.lines), ["old"]);
        log.push(line("new"));
        match backlog.follower.next().await {
            Followed::Line(l) => assert_eq!((l.seq, l.line.message.as_str()), (2, "new")),
            other => panic!("expected a line, got {other:?}"),
        }
        log.push(line("last"));
        log.close();
        // Lines written before the close still come, then the end.
        assert!(matches!(backlog.follower.next().await, Followed::Line(l) if l.seq == 3));
        assert!(matches!(backlog.follower.next().await, Followed::Closed));
    }

    #[tokio::test]
    async fn a_follower_that_falls_behind_is_told_how_many_it_missed() {
        let log = HandlerLog::new(4);
        let mut backlog = log.follow(None, 4);
        for i in 1..=10 {
            log.push(line(&format!("m{i}")));
        }
        // The channel holds 4: 6 were dropped for this follower.
        assert!(matches!(backlog.follower.next().await, Followed::Gap(6)));
        assert!(matches!(backlog.follower.next().await, Followed::Line(l) if l.seq == 7));
    }
}
