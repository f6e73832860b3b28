//! Streams: named, partitioned, append-only logs.

use serde::{Deserialize, Serialize};

use super::{StreamName, Timestamp};

/// Most partitions a stream may have. Partition-scoped state is kept per
/// partition in every backend, so the bound keeps one group's state small.
pub const MAX_PARTITIONS: u32 = 1024;

/// A stream and the high watermark (last sequence) of each partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stream {
    /// Its name.
    pub name: StreamName,
    /// Fixed at creation.
    pub partition_count: u32,
    /// When it was created.
    pub created_at: Timestamp,
    /// Last allocated sequence per partition (index = partition; 0 = empty).
    pub high_watermarks: Vec<u64>,
}
