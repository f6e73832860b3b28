//! Logs and traces (`docs/operations.md`).
//!
//! - Log lines go to stderr, as text (coloured at a terminal) or as one
//!   JSON object per line (`rheo serve --log-format json`), filtered by
//!   `RUST_LOG` when it is set, else by the command's verbosity.
//! - Every delivery a handler runs is a span ([`delivery_span`]): the
//!   guest's own log lines are events inside it, so each carries the
//!   handler, stream, group, partition, sequence, event id, attempt and
//!   lease id (in JSON under `"span"`).
//! - With an OTLP endpoint (`rheo serve --otlp-endpoint`), the spans are
//!   also exported as OpenTelemetry traces (protobuf over HTTP), the
//!   event's `correlation_id` and `causation_id` among their attributes.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Context;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde::{Deserialize, Serialize};
use tracing::Span;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::model::{HandlerName, Lease};

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// For people: `time level span{fields}: message fields`.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `fields`
    /// (`message` among them), `target`, and `span` (the delivery's
    /// fields, for a line logged during one).
    Json,
}

/// What [`init`] set up that must be shut down at exit: the trace
/// exporter, which sends what it still holds.
#[derive(Debug, Default)]
#[must_use = "dropping it stops nothing; call shutdown() before exiting"]
pub struct Telemetry {
    traces: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans still queued (bounded by a few seconds) and stops
    /// the exporter.
    pub fn shutdown(self) {
        if let Some(provider) = self.traces
            && let Err(e) = provider.shutdown_with_timeout(Duration::from_secs(5))
        {
            eprintln!("warning: OTLP export did not finish: {e}");
        }
    }
}

/// Installs the global subscriber: log lines in `format`, filtered by
/// `RUST_LOG` or else `default` (e.g. `"info"`); with `otlp`, spans are
/// exported there too. Only the first call in a process takes effect.
pub fn init(default: &str, format: LogFormat, otlp: Option<&str>) -> anyhow::Result<Telemetry> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let (traces, otel) = match otlp {
        Some(endpoint) => {
            let provider = otlp_provider(endpoint)?;
            let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("rheo"));
            (Some(provider), Some(layer))
        }
        None => (None, None),
    };
    let text = (format == LogFormat::Text).then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(RedactedStderr)
            // Colours only for a person at a terminal, not in log files.
            .with_ansi(std::io::stderr().is_terminal())
            .with_target(false)
    });
    let json = (format == LogFormat::Json).then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(RedactedStderr)
            .with_current_span(true)
            .with_span_list(false)
    });
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(text)
        .with(json)
        .with(otel)
        .try_init();
    Ok(Telemetry { traces })
}

/// Standard error, one whole log line at a time, with every URL's
/// password masked on the way (docs/backends.md#secrets-in-backend-urls):
/// whatever a driver's error or a guest's message says, no backend
/// password reaches the log.
#[derive(Debug, Clone, Copy)]
struct RedactedStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RedactedStderr {
    type Writer = RedactedLine;

    fn make_writer(&'a self) -> RedactedLine {
        RedactedLine(Vec::with_capacity(256))
    }
}

/// One log line, written to stderr (redacted) when dropped.
#[derive(Debug)]
struct RedactedLine(Vec<u8>);

impl std::io::Write for RedactedLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RedactedLine {
    fn drop(&mut self) {
        use std::io::Write as _;
        let line = if self.0.windows(3).any(|w| w == b"://") {
            crate::backend::redact_urls_in(&String::from_utf8_lossy(&self.0)).into_bytes()
        } else {
            std::mem::take(&mut self.0)
        };
        // A log line that cannot be written has nowhere to be reported.
        let _ = std::io::stderr().lock().write_all(&line);
    }
}

/// The URL traces are sent to: `endpoint` itself when it names a path,
/// else its `/v1/traces` (what a collector's OTLP/HTTP receiver serves).
pub fn traces_url(endpoint: &str) -> anyhow::Result<String> {
    let uri: axum::http::Uri = endpoint
        .parse()
        .with_context(|| format!("--otlp-endpoint {endpoint:?} is not a URL"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            anyhow::bail!(
                "--otlp-endpoint: https is not supported yet; use http:// (a local collector or agent)"
            )
        }
        _ => anyhow::bail!("--otlp-endpoint {endpoint:?} must start with http://"),
    }
    if uri.host().is_none() {
        anyhow::bail!("--otlp-endpoint {endpoint:?} names no host");
    }
    Ok(match uri.path() {
        "" | "/" => format!("{}/v1/traces", endpoint.trim_end_matches('/')),
        _ => endpoint.to_owned(),
    })
}

/// A tracer provider exporting in batches, from its own thread, to
/// `endpoint`.
fn otlp_provider(endpoint: &str) -> anyhow::Result<SdkTracerProvider> {
    use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};

    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url(endpoint)?)
        .with_timeout(Duration::from_secs(10))
        .with_http_client(OtlpClient::new())
        .build()
        .context("setting up the OTLP exporter")?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("rheo")
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// The exporter's HTTP client: ureq (which the CLI already uses), called
/// from the batch exporter's own thread, where blocking is fine.
#[derive(Debug)]
struct OtlpClient(ureq::Agent);

impl OtlpClient {
    fn new() -> Self {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build();
        Self(ureq::Agent::new_with_config(config))
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OtlpClient {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<
        opentelemetry_http::Response<opentelemetry_http::Bytes>,
        opentelemetry_http::HttpError,
    > {
        let (parts, body) = request.into_parts();
        let request = opentelemetry_http::Request::from_parts(parts, body.to_vec());
        let response = self.0.run(request)?;
        let (parts, mut body) = response.into_parts();
        let body = body.with_config().limit(4 << 20).read_to_vec()?;
        Ok(opentelemetry_http::Response::from_parts(parts, body.into()))
    }
}

/// The `tracing` target of the delivery spans: `RUST_LOG=info,rheo::delivery=off`
/// turns them off (a guest's lines then lack the delivery's fields).
pub const DELIVERY_TARGET: &str = "rheo::delivery";

/// The span of one delivery of `lease` to version `version` of `handler`.
/// Its `outcome` (ack, nack, reject or lost) is recorded once decided; the
/// event's `correlation_id` and `causation_id`, when its metadata has
/// them as strings, are among its fields.
pub fn delivery_span(handler: &HandlerName, lease: &Lease, version: u64) -> Span {
    let metadata = &lease.event.metadata;
    let lineage = |key: &str| metadata.get(key).and_then(|v| v.as_str());
    let span = tracing::info_span!(
        target: DELIVERY_TARGET,
        "delivery",
        handler = handler.as_str(),
        version = i64::try_from(version).unwrap_or(i64::MAX),
        stream = lease.stream.as_str(),
        group = lease.group.as_str(),
        // Signed: OpenTelemetry has no unsigned integers (an unsigned
        // field would be exported as a string).
        partition = i64::from(lease.event.partition),
        sequence = i64::try_from(lease.event.sequence).unwrap_or(i64::MAX),
        event_id = lease.event_id.as_str(),
        attempt = i64::from(lease.attempt),
        lease_id = lease.lease_id.as_str(),
        correlation_id = tracing::field::Empty,
        causation_id = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    if let Some(id) = lineage("correlation_id") {
        span.record("correlation_id", id);
    }
    if let Some(id) = lineage("causation_id") {
        span.record("causation_id", id);
    }
    span
}

/// The span of one `handle-batch` call (`docs/handlers.md#batches`):
/// the handler, its version, the group and how many deliveries, from
/// which event to which. Each delivery of the batch still gets its
/// `delivery` span, with its outcome.
pub fn batch_span(handler: &HandlerName, leases: &[Lease], version: u64) -> Span {
    let first = leases.first();
    tracing::info_span!(
        target: DELIVERY_TARGET,
        "batch",
        handler = handler.as_str(),
        version = i64::try_from(version).unwrap_or(i64::MAX),
        stream = first.map_or("", |l| l.stream.as_str()),
        group = first.map_or("", |l| l.group.as_str()),
        deliveries = i64::try_from(leases.len()).unwrap_or(i64::MAX),
        first_event_id = first.map_or("", |l| l.event_id.as_str()),
        last_event_id = leases.last().map_or("", |l| l.event_id.as_str()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_url_is_the_endpoint_or_its_v1_traces() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/custom/path").unwrap(),
            "http://collector:4318/custom/path"
        );
        for bad in [
            "collector:4318",
            "https://collector:4318",
            "ftp://x",
            "not a url",
        ] {
            assert!(traces_url(bad).is_err(), "{bad}");
        }
    }
}
