//! What `/metrics` shows, in the Prometheus text format (0.0.4), through
//! `prometheus-client` (`docs/operations.md` lists every series).
//!
//! - HTTP: requests by method, route template and status; latency; in
//!   flight (`api::metrics` records them).
//! - Backend: each [`Backend`] operation's latency and its errors by code
//!   ([`Measured`] wraps the backend the server uses).
//! - Handlers: the runtime's counters, read at scrape time (atomics, no
//!   copy kept here), the guest call latency, version, hot swaps, and how
//!   long modules take to compile. The handler registry's own collector
//!   (`handlers::metrics`) draws them; this module only shows it
//!   ([`Metrics::show_handlers`]), so it depends on neither the registry
//!   nor the runtime.
//! - Groups: lag, pending, in flight, oldest unacked age and dead letters,
//!   sampled by [`Metrics::sample_groups`] on an interval, so a scrape costs
//!   no query. The last five minutes of rounds stay in memory
//!   ([`history`]), with the handlers' counters, for the console's plots.
//!
//! Label values are route templates, backend operation names, error codes
//! and the names of things that exist (handlers, streams, groups): never
//! raw client input, so the number of series stays bounded. Nothing here
//! takes a lock shared by all requests: counters and histograms are
//! atomics; a family's map is read-locked (shared) once its series exists.

mod backend;
mod groups;
pub mod history;
mod timing;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use arc_swap::ArcSwapOption;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub use self::backend::Measured;
pub(crate) use self::groups::GroupSamples;
pub use self::groups::{DEFAULT_SAMPLE_INTERVAL, HandlerSource, MAX_SAMPLED_GROUPS};
pub use self::timing::{CALL_BUCKETS, REQUEST_BUCKETS, Timing};

/// The `Content-Type` of what [`Metrics::render`] writes.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Labels of an HTTP request count.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub(crate) method: String,
    pub(crate) route: String,
    pub(crate) status: u16,
}

/// Labels of an HTTP latency.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct RouteLabels {
    pub(crate) method: String,
    pub(crate) route: String,
}

/// Labels of a backend error seen by an HTTP route.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct RouteErrorLabels {
    pub(crate) route: String,
    pub(crate) code: &'static str,
}

/// The HTTP API's series.
#[derive(Debug)]
pub(crate) struct HttpMetrics {
    pub(crate) requests: Family<RequestLabels, Counter>,
    pub(crate) latency: Family<RouteLabels, Timing, fn() -> Timing>,
    pub(crate) route_errors: Family<RouteErrorLabels, Counter>,
    pub(crate) in_flight: Gauge<i64, AtomicI64>,
}

/// Labels of a stream's retention series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct StreamLabels {
    pub(crate) stream: String,
}

/// Labels of a group's retention series.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct StreamGroupLabels {
    pub(crate) stream: String,
    pub(crate) group: String,
}

/// What retention removed (`docs/log.md#retention`).
#[derive(Debug, Default)]
pub(crate) struct RetentionMetrics {
    pub(crate) removed: Family<StreamLabels, Counter>,
    pub(crate) skipped: Family<StreamGroupLabels, Counter>,
}

/// Every series of one server.
pub struct Metrics {
    registry: Registry,
    pub(crate) http: HttpMetrics,
    pub(crate) retention: RetentionMetrics,
    pub(crate) backend: Arc<backend::BackendMetrics>,
    pub(crate) groups: Arc<GroupSamples>,
    handlers: Arc<ArcSwapOption<Box<dyn Collector>>>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every series declared (and none yet recorded).
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let http = HttpMetrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(|| Timing::new(REQUEST_BUCKETS)),
            route_errors: Family::default(),
            in_flight: Gauge::default(),
        };
        registry.register(
            "rheo_http_requests",
            "HTTP requests by method, route template and status",
            http.requests.clone(),
        );
        registry.register(
            "rheo_http_request_duration_seconds",
            "HTTP request latency by method and route template",
            http.latency.clone(),
        );
        registry.register(
            "rheo_http_backend_errors",
            "HTTP requests answered with a backend error, by route template and error code",
            http.route_errors.clone(),
        );
        registry.register(
            "rheo_http_requests_in_flight",
            "HTTP requests being served",
            http.in_flight.clone(),
        );
        let retention = RetentionMetrics::default();
        registry.register(
            "rheo_retention_removed_events",
            "Events the stream's retention removed, by stream",
            retention.removed.clone(),
        );
        registry.register(
            "rheo_retention_skipped_events",
            "Events retention removed before the group settled them, by stream and group",
            retention.skipped.clone(),
        );
        let backend = Arc::new(backend::BackendMetrics::default());
        backend.register(&mut registry);
        let groups = Arc::new(GroupSamples::default());
        registry.register_collector(Box::new(Arc::clone(&groups)));
        let handlers = Arc::new(ArcSwapOption::empty());
        registry.register_collector(Box::new(Late(Arc::clone(&handlers))));
        Self {
            registry,
            http,
            retention,
            backend,
            groups,
            handlers,
        }
    }

    /// `backend`, with each operation timed and its errors counted here.
    pub fn measured(
        &self,
        backend: Arc<dyn crate::backend::Backend>,
    ) -> Arc<dyn crate::backend::Backend> {
        Arc::new(Measured::new(backend, Arc::clone(&self.backend)))
    }

    /// Shows the handlers' series, as `collector` draws them, from now on
    /// (the handler registry's, created after these metrics).
    pub fn show_handlers(&self, collector: Box<dyn Collector>) {
        self.handlers.store(Some(Arc::new(collector)));
    }

    /// Reads the handlers' counters into the sampled history
    /// ([`history`]) with every round from now on.
    pub fn sample_handlers(&self, source: HandlerSource) {
        self.groups.sample_handlers(source);
    }

    /// Counts events retention removed from `stream`.
    pub fn retention_removed(&self, stream: &crate::model::StreamName, n: u64) {
        if n > 0 {
            let labels = StreamLabels {
                stream: stream.to_string(),
            };
            self.retention.removed.get_or_create(&labels).inc_by(n);
        }
    }

    /// Counts events retention removed before `group` settled them.
    pub fn retention_skipped(
        &self,
        stream: &crate::model::StreamName,
        group: &crate::model::GroupName,
        n: u64,
    ) {
        let labels = StreamGroupLabels {
            stream: stream.to_string(),
            group: group.to_string(),
        };
        self.retention.skipped.get_or_create(&labels).inc_by(n);
    }

    /// Every series, in the Prometheus text format (0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        // Writing into a String cannot fail; a collector never fails.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

/// A collector set after the registry was built; draws nothing until then.
#[derive(Debug)]
struct Late(Arc<ArcSwapOption<Box<dyn Collector>>>);

impl Collector for Late {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        match self.0.load_full() {
            Some(collector) => collector.encode(encoder),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
