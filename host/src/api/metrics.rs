//! The HTTP series of `/metrics` (`crate::metrics` holds them): every
//! request counted by method, *route template* (`/v1/streams/{stream}`,
//! never the raw path, so their number stays bounded whatever clients
//! send; unknown paths share the label `unmatched`) and status, timed, and
//! its backend error counted by code.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::metrics::gauge::Gauge;

use super::error::ErrorReport;
use crate::metrics::{Metrics, RequestLabels, RouteErrorLabels, RouteLabels};

/// Counts a request as in flight until dropped, so a request abandoned by
/// its client (its future dropped mid-way) is still counted out.
struct InFlight<'a>(&'a Gauge);

impl<'a> InFlight<'a> {
    fn enter(gauge: &'a Gauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
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
    let http = &metrics.http;
    let in_flight = InFlight::enter(&http.in_flight);
    let response = next.run(request).await;
    drop(in_flight);
    let report = response.extensions().get::<ErrorReport>();
    if let Some(report) = report
        && response.status().is_server_error()
    {
        tracing::error!(%method, route, code = report.code, "{}", report.detail);
    }
    let method = method.to_string();
    http.requests
        .get_or_create(&RequestLabels {
            method: method.clone(),
            route: route.clone(),
            status: response.status().as_u16(),
        })
        .inc();
    http.latency
        .get_or_create(&RouteLabels {
            method,
            route: route.clone(),
        })
        .observe(started.elapsed());
    if let Some(report) = report.filter(|r| r.from_backend) {
        http.route_errors
            .get_or_create(&RouteErrorLabels {
                route,
                code: report.code,
            })
            .inc();
    }
    response
}
