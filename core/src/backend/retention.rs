//! Applying a stream's retention (`docs/log.md#retention`): where each
//! partition may start is decided by [`policy::trim_point`](super::policy::trim_point)
//! from what the store reports, and the store removes the events below it
//! with [`Backend::trim`], one bounded batch per partition per round. The
//! server runs [`trim_stream`] for every stream with a retention in the
//! background; nothing here waits on a clock.

use std::collections::BTreeMap;

use super::policy::{TrimInputs, trim_point};
use super::{Backend, Partitions, ReadRequest, Result, TrimRequest};
use crate::model::{GroupName, MAX_QUERY_LIMIT, StreamName};

/// Events removed per partition per round, at most: one trim is one
/// transaction (or script) of the store, and a round never holds a
/// partition's appends and fetches back for longer than that.
pub const TRIM_BATCH: u32 = 1000;

/// What one round removed from a stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrimReport {
    /// Events removed, over all partitions.
    pub removed: u64,
    /// Per group, the events removed before it settled them.
    pub skipped: BTreeMap<GroupName, u64>,
    /// Some partition has more to remove than this round took: run
    /// another round soon.
    pub more: bool,
}

/// One round of `stream`'s retention: per partition, the trim point and at
/// most `batch` (≤ 1000) events removed below it. A stream without a
/// retention is left alone.
pub async fn trim_stream(
    backend: &dyn Backend,
    stream: &StreamName,
    batch: u32,
) -> Result<TrimReport> {
    let batch = batch.clamp(1, MAX_QUERY_LIMIT);
    let mut report = TrimReport::default();
    let info = backend.get_stream(stream).await?;
    let Some(retention) = info.retention else {
        return Ok(report);
    };
    let now = backend.clock().now();
    // Interest: each partition's frontier in every group.
    let mut frontiers: Vec<Vec<u64>> = vec![Vec::new(); info.partition_count as usize];
    if retention.policy == crate::model::RetentionPolicy::Interest {
        for group in backend.list_groups(stream).await? {
            let lag = backend.lag(stream, &group.name, &Partitions::All).await?;
            for (p, part) in lag.partitions {
                if let Some(list) = frontiers.get_mut(p as usize) {
                    list.push(part.frontier);
                }
            }
        }
    }
    for p in 0..info.partition_count {
        let index = p as usize;
        let first = info.first_sequences[index];
        let high_watermark = info.high_watermarks[index];
        if first > high_watermark {
            continue;
        }
        let oldest: Vec<_> = if retention.max_age_ms.is_some() {
            let page = backend
                .read(ReadRequest {
                    stream: stream.clone(),
                    partition: p,
                    after: first - 1,
                    limit: batch,
                })
                .await?;
            page.iter().map(|e| (e.sequence, e.timestamp)).collect()
        } else {
            Vec::new()
        };
        let point = trim_point(
            &retention,
            &TrimInputs {
                first_sequence: first,
                high_watermark,
                oldest: &oldest,
                frontiers: &frontiers[index],
                now,
            },
        );
        if point <= first {
            continue;
        }
        let trimmed = backend
            .trim(TrimRequest {
                stream: stream.clone(),
                partition: p,
                before: point,
                limit: batch,
            })
            .await?;
        report.removed += trimmed.removed;
        for (group, n) in trimmed.skipped {
            *report.skipped.entry(group).or_default() += n;
        }
        // The count or interest point lies further on, or the age page
        // was old all the way through.
        let page_all_old = oldest.len() == batch as usize
            && oldest.last().is_some_and(|(seq, _)| seq + 1 == point);
        if (trimmed.first_sequence < point || page_all_old)
            && trimmed.first_sequence <= high_watermark
        {
            report.more = true;
        }
    }
    Ok(report)
}
