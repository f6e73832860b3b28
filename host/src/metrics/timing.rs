//! [`Timing`]: a latency histogram updated with atomics only (the
//! `prometheus-client` histogram takes a mutex per observation), so the
//! delivery and request paths never wait on one another to record.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Bucket bounds (seconds) of HTTP requests: long polls wait up to 30 s.
pub const REQUEST_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Bucket bounds (seconds) of guest calls, backend operations and
/// compiles: from a warm guest call (a few µs) to a timed-out one.
pub const CALL_BUCKETS: &[f64] = &[
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A histogram of durations; clones share the counts.
#[derive(Debug, Clone)]
pub struct Timing(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative); the last is `+Inf`.
    counts: Box<[AtomicU64]>,
    sum_nanos: AtomicU64,
}

impl Timing {
    /// An empty histogram over `bounds` (ascending, in seconds).
    pub fn new(bounds: &'static [f64]) -> Self {
        let counts = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Self(Arc::new(Inner {
            bounds,
            counts,
            sum_nanos: AtomicU64::new(0),
        }))
    }

    /// Records one duration.
    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let i = self
            .0
            .bounds
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(self.0.bounds.len());
        self.0.counts[i].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.0.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// How many durations were recorded.
    pub fn count(&self) -> u64 {
        self.0
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// (sum in seconds, count, each bucket's bound and own count — the
    /// encoder makes them cumulative).
    fn read(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut total = 0;
        let mut buckets = Vec::with_capacity(self.0.counts.len());
        for (i, c) in self.0.counts.iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            total += n;
            let bound = self.0.bounds.get(i).copied().unwrap_or(f64::INFINITY);
            buckets.push((bound, n));
        }
        let sum = self.0.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        (sum, total, buckets)
    }

    /// Writes the histogram into `encoder` (a family member or a whole
    /// metric).
    pub(crate) fn write(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        let (sum, count, buckets) = self.read();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }
}

impl TypedMetric for Timing {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Timing {
    fn encode(&self, encoder: MetricEncoder) -> std::fmt::Result {
        self.write(encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}
