//! The background trimmer (`docs/log.md#retention`): every
//! `--retention-interval-ms`, each stream with a retention gets rounds of
//! the core's [`trim_stream`] until nothing is left to remove or its share
//! of the round's time is used up. Every trim is one bounded step of the
//! store, so appends and fetches go on between them. Each node of a
//! cluster runs it; two nodes trimming one stream at once remove each
//! event once (the store's step decides).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::retention::{TRIM_BATCH, trim_stream};
use crate::backend::{Backend, Error};
use crate::metrics::Metrics;

/// How often streams are trimmed by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// The most one stream's rounds may take per tick before the next stream
/// gets its turn (it continues at the next tick).
const SHARE_PER_STREAM: Duration = Duration::from_millis(500);

/// Trims every stream with a retention every `interval`, for ever (the
/// caller aborts the task).
pub async fn run(backend: Arc<dyn Backend>, metrics: Arc<Metrics>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        tick(&*backend, &metrics).await;
    }
}

/// One pass over the streams; returns how many events it removed.
pub async fn tick(backend: &dyn Backend, metrics: &Metrics) -> u64 {
    let streams = match backend.list_streams().await {
        Ok(streams) => streams,
        Err(e) => {
            tracing::warn!(error = %e, "retention: cannot list the streams; trying again next round");
            return 0;
        }
    };
    let mut removed = 0;
    for stream in streams.into_iter().filter(|s| s.retention.is_some()) {
        let started = Instant::now();
        loop {
            match trim_stream(backend, &stream.name, TRIM_BATCH).await {
                Ok(report) => {
                    removed += report.removed;
                    metrics.retention_removed(&stream.name, report.removed);
                    for (group, skipped) in &report.skipped {
                        metrics.retention_skipped(&stream.name, group, *skipped);
                        tracing::warn!(
                            stream = %stream.name,
                            group = %group,
                            skipped,
                            "retention removed events this group had not settled"
                        );
                    }
                    if !report.more || started.elapsed() >= SHARE_PER_STREAM {
                        break;
                    }
                }
                // Deleted meanwhile.
                Err(Error::StreamNotFound(_)) => break,
                Err(e) => {
                    tracing::warn!(stream = %stream.name, error = %e, "retention: trimming failed; trying again next round");
                    break;
                }
            }
        }
    }
    if removed > 0
        && let Err(e) = backend.reclaim().await
    {
        tracing::warn!(error = %e, "retention: giving freed space back failed");
    }
    removed
}
