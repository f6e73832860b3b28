//! Group series, sampled on an interval: a scrape reads the last sample
//! and never queries the backend, however often it comes. Each round also
//! goes into the [`History`] the console's plots start from
//! (`GET /v1/metrics/samples`), with the handlers' counters read at the
//! same moment.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::{ArcSwap, ArcSwapOption};
use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

use super::history::{HandlerSample, History};
use crate::backend::Backend;
use crate::backend::quarantine::parked_keys_under;
use crate::model::{GroupInfo, OnExhausted};

/// At most this many groups are sampled (the first by stream and group
/// name); past it, a warning says so once per round.
pub const MAX_SAMPLED_GROUPS: usize = 1000;

/// How often groups are sampled unless `rheo serve --metrics-interval`
/// says otherwise.
pub const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

/// Reads every handler's counters, without waiting (the handler
/// registry's; set once it exists).
pub type HandlerSource = Box<dyn Fn() -> Vec<HandlerSample> + Send + Sync>;

/// The last sample of every group, and the recent ones.
#[derive(Default)]
pub(crate) struct GroupSamples {
    last: ArcSwap<Sample>,
    history: Mutex<History>,
    handlers: ArcSwapOption<HandlerSource>,
    /// The sampling interval in milliseconds; 0 until [`GroupSamples::run`].
    interval_ms: AtomicU64,
}

impl std::fmt::Debug for GroupSamples {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupSamples").finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Sample {
    groups: Vec<GroupInfo>,
    /// Per group of `groups`, the keys it has parked
    /// (`docs/groups.md#quarantine`): 0 for a group that dead-letters.
    parked: Vec<u64>,
    /// How long the round took (seconds), and whether it has run at all.
    took: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GroupLabels {
    stream: String,
    group: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PartitionLabels {
    stream: String,
    group: String,
    partition: u32,
}

impl GroupSamples {
    /// Reads every group once and keeps the result. A stream or group that
    /// goes away mid-round is skipped; a backend that fails keeps the
    /// previous sample (and says why in the log).
    pub(crate) async fn refresh(&self, backend: &dyn Backend) {
        let started = Instant::now();
        let streams = match backend.list_streams().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: could not list streams; group series keep their last sample");
                return;
            }
        };
        let mut groups = Vec::new();
        let mut skipped = 0usize;
        for stream in &streams {
            let Ok(list) = backend.list_groups(&stream.name).await else {
                continue;
            };
            for group in list {
                if groups.len() >= MAX_SAMPLED_GROUPS {
                    skipped += 1;
                    continue;
                }
                if let Ok(info) = backend.group_info(&stream.name, &group.name).await {
                    groups.push(info);
                }
            }
        }
        if skipped > 0 {
            tracing::warn!(
                sampled = MAX_SAMPLED_GROUPS,
                skipped,
                "metrics: too many groups; the rest have no group series"
            );
        }
        // Only a group that quarantines can park a key; counting its holds
        // reads its leases.
        let mut parked = Vec::with_capacity(groups.len());
        for g in &groups {
            let n = match g.on_exhausted {
                OnExhausted::DeadLetter => 0,
                OnExhausted::Quarantine => {
                    parked_keys_under(backend, &g.stream, &g.group, g.ordering)
                        .await
                        .map_or(0, |p| p.len() as u64)
                }
            };
            parked.push(n);
        }
        let handlers = self
            .handlers
            .load()
            .as_ref()
            .map(|source| source())
            .unwrap_or_default();
        let total = |g: &GroupInfo, f: fn(&crate::model::PartitionLag) -> u64| {
            g.lag.partitions.values().map(f).sum::<u64>()
        };
        self.history.lock().push(
            backend.clock().now(),
            groups.iter().map(|g| {
                (
                    g.stream.to_string(),
                    g.group.to_string(),
                    g.lag.lag,
                    total(g, |p| p.frontier),
                    total(g, |p| p.high_watermark),
                )
            }),
            handlers,
        );
        self.last.store(Arc::new(Sample {
            groups,
            parked,
            took: Some(started.elapsed().as_secs_f64()),
        }));
    }

    /// Reads the handlers' counters with every round from now on.
    pub(crate) fn sample_handlers(&self, source: HandlerSource) {
        self.handlers.store(Some(Arc::new(source)));
    }

    /// Runs `read` on the recent rounds.
    pub(crate) fn history<T>(&self, read: impl FnOnce(&History) -> T) -> T {
        read(&self.history.lock())
    }

    /// How often rounds are taken; `None` when no sampling runs.
    pub(crate) fn interval(&self) -> Option<Duration> {
        match self.interval_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// Samples every `interval` until the task is dropped or aborted.
    pub(crate) async fn run(self: Arc<Self>, backend: Arc<dyn Backend>, interval: Duration) {
        self.interval_ms.store(
            u64::try_from(interval.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
            Ordering::Relaxed,
        );
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            self.refresh(backend.as_ref()).await;
        }
    }
}

/// Writes one gauge per group of `sample`.
fn per_group(
    encoder: &mut DescriptorEncoder,
    sample: &Sample,
    name: &str,
    help: &str,
    value: impl Fn(&GroupInfo) -> Option<f64>,
) -> std::fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for g in &sample.groups {
        if let Some(v) = value(g) {
            let labels = GroupLabels {
                stream: g.stream.to_string(),
                group: g.group.to_string(),
            };
            ConstGauge::new(v).encode(metric.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

impl Collector for GroupSamples {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let sample = self.last.load();
        let s = sample.as_ref();
        per_group(
            &mut encoder,
            s,
            "rheo_group_lag",
            "Events after the group's ack frontier, over all partitions",
            |g| Some(g.lag.lag as f64),
        )?;
        per_group(
            &mut encoder,
            s,
            "rheo_group_pending",
            "Events the group has never been handed",
            |g| Some(g.lag.pending as f64),
        )?;
        per_group(
            &mut encoder,
            s,
            "rheo_group_inflight",
            "Deliveries leased right now",
            |g| Some(g.inflight as f64),
        )?;
        per_group(
            &mut encoder,
            s,
            "rheo_group_waiting_retry",
            "Nacked deliveries whose retry is not due yet",
            |g| Some(g.lag.waiting_retry as f64),
        )?;
        per_group(
            &mut encoder,
            s,
            "rheo_group_dead_letters",
            "Deliveries dead-lettered",
            |g| Some(g.dead_letters as f64),
        )?;
        {
            let mut metric = encoder.encode_descriptor(
                "rheo_group_parked_keys",
                "Keys parked behind a head that exhausted its attempts (on_exhausted = quarantine)",
                None,
                MetricType::Gauge,
            )?;
            for (g, n) in s.groups.iter().zip(&s.parked) {
                let labels = GroupLabels {
                    stream: g.stream.to_string(),
                    group: g.group.to_string(),
                };
                ConstGauge::new(*n as f64).encode(metric.encode_family(&labels)?)?;
            }
        }
        per_group(
            &mut encoder,
            s,
            "rheo_group_oldest_unacked_age_seconds",
            "Age of the oldest event not yet settled (absent when none is)",
            |g| g.lag.oldest_unacked_age_ms.map(|ms| ms as f64 / 1000.0),
        )?;
        {
            let mut metric = encoder.encode_descriptor(
                "rheo_group_partition_lag",
                "Events after the group's ack frontier, per partition",
                None,
                MetricType::Gauge,
            )?;
            for g in &s.groups {
                for (partition, p) in &g.lag.partitions {
                    let labels = PartitionLabels {
                        stream: g.stream.to_string(),
                        group: g.group.to_string(),
                        partition: *partition,
                    };
                    ConstGauge::new(p.lag as f64).encode(metric.encode_family(&labels)?)?;
                }
            }
        }
        if let Some(took) = s.took {
            let metric = encoder.encode_descriptor(
                "rheo_group_sample_duration_seconds",
                "How long the last sampling of every group took",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(took).encode(metric)?;
        }
        Ok(())
    }
}
