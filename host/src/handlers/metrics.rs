//! Handler series, read at scrape time from the registry and the
//! runtime's counters (atomics): nothing is copied on the delivery path.
//! `/metrics` shows them through [`crate::metrics::Metrics::show_handlers`].

use std::sync::{Arc, LazyLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::handlers::{HandlerRegistry, HandlerStatus};
use crate::metrics::{CALL_BUCKETS, Timing};
use crate::runtime::CountersSnapshot;

/// How long preparing a module took (compiling it, or loading it from the
/// compile cache, and validating it), over every handler of the process.
pub(crate) static COMPILE_TIME: LazyLock<Timing> = LazyLock::new(|| Timing::new(CALL_BUCKETS));

/// Shorthand for the label set of one label.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct HandlerLabel {
    handler: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    handler: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct FailureLabels {
    handler: String,
    kind: &'static str,
}

/// The handlers of a registry, as `/metrics` shows them.
#[derive(Debug)]
pub(crate) struct HandlerCollector(pub(crate) Arc<HandlerRegistry>);

/// One handler as a scrape sees it.
struct Row {
    name: String,
    version: Option<u64>,
    running: bool,
    swaps: u64,
    counters: CountersSnapshot,
    calls: Option<Timing>,
}

impl Collector for HandlerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let metric = encoder.encode_descriptor(
            "rheo_handler_compile_duration_seconds",
            "How long preparing a handler module took: compiling (or loading from the cache) and validating it",
            None,
            MetricType::Histogram,
        )?;
        COMPILE_TIME.write(metric)?;
        let registry = &self.0;
        let rows: Vec<Row> = registry
            .views()
            .into_iter()
            .map(|v| Row {
                calls: registry.call_times(&v.name),
                name: v.name.to_string(),
                version: v.version,
                running: v.status == HandlerStatus::Running,
                swaps: v.swaps,
                counters: v.counters,
            })
            .collect();
        let label = |r: &Row| HandlerLabel {
            handler: r.name.clone(),
        };

        let mut m = encoder.encode_descriptor(
            "rheo_handler_deliveries",
            "Deliveries a handler finished, whatever the outcome",
            None,
            MetricType::Counter,
        )?;
        for r in &rows {
            ConstCounter::new(r.counters.processed).encode(m.encode_family(&label(r))?)?;
        }

        let mut m = encoder.encode_descriptor(
            "rheo_handler_outcomes",
            "What became of a handler's deliveries: acked, retried, rejected, lost (lease lost before settling) or settle_error",
            None,
            MetricType::Counter,
        )?;
        for r in &rows {
            let c = &r.counters;
            for (outcome, n) in [
                ("acked", c.acked),
                ("retried", c.retried),
                ("rejected", c.rejected),
                ("lost", c.lost),
                ("settle_error", c.settle_errors),
            ] {
                let labels = OutcomeLabels {
                    handler: r.name.clone(),
                    outcome,
                };
                ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
            }
        }

        let mut m = encoder.encode_descriptor(
            "rheo_handler_failures",
            "Guest calls that failed, by kind: trap (a trap, panic, or memory or fuel limit) or timeout",
            None,
            MetricType::Counter,
        )?;
        for r in &rows {
            for (kind, n) in [
                ("trap", r.counters.trapped),
                ("timeout", r.counters.timed_out),
            ] {
                let labels = FailureLabels {
                    handler: r.name.clone(),
                    kind,
                };
                ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
            }
        }

        let mut m = encoder.encode_descriptor(
            "rheo_handler_in_flight",
            "Deliveries a handler is working on right now",
            None,
            MetricType::Gauge,
        )?;
        for r in &rows {
            ConstGauge::new(r.counters.inflight as i64).encode(m.encode_family(&label(r))?)?;
        }

        let mut m = encoder.encode_descriptor(
            "rheo_handler_version",
            "The version number a handler runs",
            None,
            MetricType::Gauge,
        )?;
        for r in &rows {
            if let Some(v) = r.version {
                ConstGauge::new(v as i64).encode(m.encode_family(&label(r))?)?;
            }
        }

        let mut m = encoder.encode_descriptor(
            "rheo_handler_running",
            "1 while a handler runs, 0 while it is paused or failed",
            None,
            MetricType::Gauge,
        )?;
        for r in &rows {
            ConstGauge::new(i64::from(r.running)).encode(m.encode_family(&label(r))?)?;
        }

        let mut m = encoder.encode_descriptor(
            "rheo_handler_swaps",
            "Times another version took over a running handler (hot swaps and rollbacks) on this server",
            None,
            MetricType::Counter,
        )?;
        for r in &rows {
            ConstCounter::new(r.swaps).encode(m.encode_family(&label(r))?)?;
        }

        let mut m = encoder.encode_descriptor(
            "rheo_handler_call_duration_seconds",
            "How long a handler's guest call took: one delivery, or one batch for a batch handler (its count is the calls made)",
            None,
            MetricType::Histogram,
        )?;
        for r in &rows {
            if let Some(calls) = &r.calls {
                calls.write(m.encode_family(&label(r))?)?;
            }
        }
        Ok(())
    }
}
