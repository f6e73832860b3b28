//! Request metrics in the Prometheus text format, without a metrics crate.
//!
//! Series are labelled by the *route template* (`/v1/streams/{stream}`),
//! never the raw path, so their number stays bounded whatever clients send;
//! unknown paths share the label `unmatched`. One mutex guards the
//! registry: it is held for a few map updates per request, never across an
//! await.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use parking_lot::Mutex;

use super::error::ErrorReport;

/// Upper bounds (seconds) of the latency histogram buckets; long polls
/// wait up to 30 s, hence the top bucket.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Counters and histograms of the HTTP API.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    registry: Mutex<Registry>,
    in_flight: AtomicI64,
}

#[derive(Debug, Default)]
struct Registry {
    /// (method, route, status) → requests.
    requests: BTreeMap<(String, String, u16), u64>,
    /// (method, route) → latency.
    latency: BTreeMap<(String, String), Histogram>,
    /// (route, code) → errors that came out of a backend call.
    backend_errors: BTreeMap<(String, &'static str), u64>,
}

#[derive(Debug, Default)]
struct Histogram {
    /// Cumulative counts per bucket of [`BUCKETS`].
    buckets: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        for (bound, bucket) in BUCKETS.iter().zip(self.buckets.iter_mut()) {
            if seconds <= *bound {
                *bucket += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }
}

impl Metrics {
    /// Records one finished request.
    fn record(
        &self,
        method: &Method,
        route: &str,
        status: StatusCode,
        elapsed: Duration,
        error: Option<&ErrorReport>,
    ) {
        let mut registry = self.registry.lock();
        *registry
            .requests
            .entry((method.to_string(), route.to_owned(), status.as_u16()))
            .or_default() += 1;
        registry
            .latency
            .entry((method.to_string(), route.to_owned()))
            .or_default()
            .observe(elapsed.as_secs_f64());
        if let Some(report) = error.filter(|r| r.from_backend) {
            *registry
                .backend_errors
                .entry((route.to_owned(), report.code))
                .or_default() += 1;
        }
    }

    /// The registry in the Prometheus text exposition format (0.0.4).
    pub(crate) fn render(&self) -> String {
        let registry = self.registry.lock();
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "# HELP rheo_http_requests_total HTTP requests by method, route and status.\n\
             # TYPE rheo_http_requests_total counter"
        );
        for ((method, route, status), n) in &registry.requests {
            let _ = writeln!(
                out,
                "rheo_http_requests_total{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {n}",
                escape(route)
            );
        }
        let _ = writeln!(
            out,
            "# HELP rheo_http_request_duration_seconds HTTP request latency by method and route.\n\
             # TYPE rheo_http_request_duration_seconds histogram"
        );
        for ((method, route), h) in &registry.latency {
            let labels = format!("method=\"{method}\",route=\"{}\"", escape(route));
            for (bound, n) in BUCKETS.iter().zip(h.buckets) {
                let _ = writeln!(
                    out,
                    "rheo_http_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {n}"
                );
            }
            let _ = writeln!(
                out,
                "rheo_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}\n\
                 rheo_http_request_duration_seconds_sum{{{labels}}} {}\n\
                 rheo_http_request_duration_seconds_count{{{labels}}} {}",
                h.count, h.sum, h.count
            );
        }
        let _ = writeln!(
            out,
            "# HELP rheo_backend_errors_total Backend operations that failed, by route and error code.\n\
             # TYPE rheo_backend_errors_total counter"
        );
        for ((route, code), n) in &registry.backend_errors {
            let _ = writeln!(
                out,
                "rheo_backend_errors_total{{route=\"{}\",code=\"{code}\"}} {n}",
                escape(route)
            );
        }
        let _ = writeln!(
            out,
            "# HELP rheo_http_requests_in_flight HTTP requests being served.\n\
             # TYPE rheo_http_requests_in_flight gauge\n\
             rheo_http_requests_in_flight {}",
            self.in_flight.load(Ordering::Relaxed)
        );
        out
    }
}

/// Label values are route templates, but escape anyway.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Counts a request as in flight until dropped, so a request abandoned by
/// its client (its future dropped mid-way) is still counted out.
struct InFlight<'a>(&'a AtomicI64);

impl<'a> InFlight<'a> {
    fn enter(gauge: &'a AtomicI64) -> Self {
        gauge.fetch_add(1, Ordering::Relaxed);
        Self(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Middleware: counts and times every request, and logs server-side errors
/// with the detail their response withheld.
pub(crate) async fn track(
    State(metrics): State<Arc<Metrics>>,
    request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |m| m.as_str().to_owned());
    let method = request.method().clone();
    let started = Instant::now();
    let in_flight = InFlight::enter(&metrics.in_flight);
    let response = next.run(request).await;
    drop(in_flight);
    let report = response.extensions().get::<ErrorReport>();
    if let Some(report) = report
        && response.status().is_server_error()
    {
        tracing::error!(%method, route, code = report.code, "{}", report.detail);
    }
    metrics.record(
        &method,
        &route,
        response.status(),
        started.elapsed(),
        report,
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histograms_and_backend_errors() {
        let metrics = Metrics::default();
        let report = ErrorReport {
            code: "stream_not_found",
            from_backend: true,
            detail: String::new(),
        };
        metrics.record(
            &Method::GET,
            "/v1/streams/{stream}",
            StatusCode::NOT_FOUND,
            Duration::from_millis(3),
            Some(&report),
        );
        metrics.record(
            &Method::GET,
            "/v1/streams/{stream}",
            StatusCode::OK,
            Duration::from_millis(20),
            None,
        );
        let text = metrics.render();
        assert!(text.contains(
            "rheo_http_requests_total{method=\"GET\",route=\"/v1/streams/{stream}\",status=\"404\"} 1"
        ));
        assert!(text.contains(
            "rheo_http_request_duration_seconds_bucket{method=\"GET\",route=\"/v1/streams/{stream}\",le=\"0.005\"} 1"
        ));
        assert!(text.contains(
            "rheo_http_request_duration_seconds_count{method=\"GET\",route=\"/v1/streams/{stream}\"} 2"
        ));
        assert!(text.contains(
            "rheo_backend_errors_total{route=\"/v1/streams/{stream}\",code=\"stream_not_found\"} 1"
        ));
        assert!(text.contains("rheo_http_requests_in_flight 0"));
    }
}
