use std::time::Duration;

use prometheus_parse::{Scrape, Value};

use super::*;
use crate::backend::memory::MemoryBackend;
use crate::backend::{CreateStream, Error, FetchRequest, Partitions};
use crate::clock::FrozenClock;
use crate::model::{ConsumerId, EventInput, GroupName, GroupSpec, StreamName};

/// Parses `text` as the Prometheus text format, after checking each line
/// is a comment or `name[{labels}] value`.
pub(crate) fn parse(text: &str) -> Scrape {
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (_, value) = line.rsplit_once(' ').expect("`series value`");
        let ok = value.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&value);
        assert!(ok, "bad value in {line:?}");
        let name_end = line.find(['{', ' ']).unwrap();
        let name = &line[..name_end];
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad name in {line:?}"
        );
    }
    Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("a Prometheus exposition")
}

/// The value of the sample `name` whose labels include `labels`.
pub(crate) fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
            Value::Summary(_) => f64::NAN,
        })
}

fn stream() -> StreamName {
    StreamName::parse("orders").unwrap()
}

fn group() -> GroupName {
    GroupName::parse("billing").unwrap()
}

/// A memory backend measured by `metrics`, holding the stream `orders`
/// with `partitions` partitions (created through the measured backend).
async fn with_stream(metrics: &Metrics, partitions: u32) -> Arc<dyn crate::backend::Backend> {
    let backend = metrics.measured(Arc::new(MemoryBackend::new(FrozenClock::at_system_time())));
    backend
        .create_stream(CreateStream {
            name: stream(),
            partition_count: partitions,
            retention: None,
        })
        .await
        .unwrap();
    backend
}

#[test]
fn a_timing_counts_each_duration_in_its_bucket_and_sums_them() {
    let metrics = Metrics::new();
    let timing = metrics
        .http
        .latency
        .get_or_create(&RouteLabels {
            method: "GET".into(),
            route: "/v1/streams".into(),
        })
        .clone();
    timing.observe(Duration::from_micros(500));
    timing.observe(Duration::from_millis(20));
    timing.observe(Duration::from_secs(60));
    assert_eq!(timing.count(), 3);
    let text = metrics.render();
    for line in [
        "rheo_http_request_duration_seconds_bucket{method=\"GET\",route=\"/v1/streams\",le=\"0.001\"} 1",
        "rheo_http_request_duration_seconds_bucket{method=\"GET\",route=\"/v1/streams\",le=\"0.025\"} 2",
        "rheo_http_request_duration_seconds_bucket{method=\"GET\",route=\"/v1/streams\",le=\"30\"} 2",
        "rheo_http_request_duration_seconds_bucket{method=\"GET\",route=\"/v1/streams\",le=\"+Inf\"} 3",
        "rheo_http_request_duration_seconds_sum{method=\"GET\",route=\"/v1/streams\"} 60.0205",
        "rheo_http_request_duration_seconds_count{method=\"GET\",route=\"/v1/streams\"} 3",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    let scrape = parse(&text);
    assert_eq!(
        value(
            &scrape,
            "rheo_http_request_duration_seconds",
            &[("route", "/v1/streams")]
        ),
        Some(3.0)
    );
}

#[tokio::test]
async fn backend_operations_are_timed_and_their_errors_counted_by_code() {
    let metrics = Metrics::new();
    let backend = with_stream(&metrics, 2).await;
    assert_eq!(backend.kind(), "memory");
    backend.get_stream(&stream()).await.unwrap();
    let missing = StreamName::parse("missing").unwrap();
    assert!(matches!(
        backend.get_stream(&missing).await,
        Err(Error::StreamNotFound(_))
    ));
    let scrape = parse(&metrics.render());
    let ops = |op| {
        value(
            &scrape,
            "rheo_backend_operation_duration_seconds",
            &[("backend", "memory"), ("op", op)],
        )
    };
    assert_eq!(ops("create_stream"), Some(1.0));
    assert_eq!(ops("get_stream"), Some(2.0));
    assert_eq!(ops("fetch"), None, "no series for what never ran");
    assert_eq!(
        value(
            &scrape,
            "rheo_backend_errors_total",
            &[
                ("backend", "memory"),
                ("op", "get_stream"),
                ("code", "stream_not_found")
            ]
        ),
        Some(1.0)
    );
}

#[tokio::test]
async fn group_series_show_the_last_sample_not_the_live_state() {
    let metrics = Metrics::new();
    let backend = with_stream(&metrics, 2).await;
    backend
        .create_group(&stream(), GroupSpec::new(group()))
        .await
        .unwrap();
    let events = (0..5)
        .map(|i| EventInput {
            key: Some(format!("k{i}")),
            ..EventInput::default()
        })
        .collect();
    backend.append(&stream(), events).await.unwrap();

    let before = parse(&metrics.render());
    assert_eq!(
        value(&before, "rheo_group_lag", &[("group", "billing")]),
        None,
        "nothing sampled yet"
    );

    metrics.groups.refresh(backend.as_ref()).await;
    let info = backend.group_info(&stream(), &group()).await.unwrap();
    let sampled = parse(&metrics.render());
    let labels = [("stream", "orders"), ("group", "billing")];
    assert_eq!(value(&sampled, "rheo_group_lag", &labels), Some(5.0));
    assert_eq!(
        value(&sampled, "rheo_group_lag", &labels),
        Some(info.lag.lag as f64)
    );
    assert_eq!(value(&sampled, "rheo_group_pending", &labels), Some(5.0));
    assert_eq!(
        value(&sampled, "rheo_group_dead_letters", &labels),
        Some(0.0)
    );
    assert_eq!(value(&sampled, "rheo_group_inflight", &labels), Some(0.0));
    let per_partition: f64 = info
        .lag
        .partitions
        .keys()
        .map(|p| {
            value(
                &sampled,
                "rheo_group_partition_lag",
                &[("group", "billing"), ("partition", &p.to_string())],
            )
            .unwrap()
        })
        .sum();
    assert_eq!(per_partition, 5.0);

    // Appends after the sample show up only in the next one.
    backend
        .append(&stream(), vec![EventInput::default()])
        .await
        .unwrap();
    let stale = parse(&metrics.render());
    assert_eq!(value(&stale, "rheo_group_lag", &labels), Some(5.0));
    metrics.groups.refresh(backend.as_ref()).await;
    let fresh = parse(&metrics.render());
    assert_eq!(value(&fresh, "rheo_group_lag", &labels), Some(6.0));
}

#[tokio::test]
async fn a_scrape_does_not_touch_the_backend() {
    let metrics = Metrics::new();
    let backend = with_stream(&metrics, 1).await;
    metrics.groups.refresh(backend.as_ref()).await;
    let count = |text: &str| {
        value(
            &parse(text),
            "rheo_backend_operation_duration_seconds",
            &[("op", "list_streams")],
        )
    };
    let first = metrics.render();
    let second = metrics.render();
    assert_eq!(count(&first), Some(1.0));
    assert_eq!(count(&second), Some(1.0));
}

#[tokio::test]
async fn parked_keys_are_sampled_for_a_group_that_quarantines() {
    use crate::model::{GroupOrdering, OnExhausted};
    let metrics = Metrics::new();
    let backend = with_stream(&metrics, 1).await;
    let spec = GroupSpec {
        ordering: GroupOrdering::Key,
        on_exhausted: OnExhausted::Quarantine,
        max_attempts: 1,
        ..GroupSpec::new(group())
    };
    backend.create_group(&stream(), spec).await.unwrap();
    backend
        .create_group(
            &stream(),
            GroupSpec::new(GroupName::parse("plain").unwrap()),
        )
        .await
        .unwrap();
    let keyed = |k: &str| EventInput {
        key: Some(k.to_owned()),
        ..EventInput::default()
    };
    backend
        .append(&stream(), vec![keyed("a"), keyed("b"), keyed("c")])
        .await
        .unwrap();
    let leases = backend
        .fetch(FetchRequest {
            stream: stream(),
            group: group(),
            limit: 10,
            consumer_id: ConsumerId::parse("c1").unwrap(),
            lease_ms: 30_000,
            partitions: Partitions::All,
        })
        .await
        .unwrap();
    for lease in leases
        .iter()
        .filter(|l| l.event.key.as_deref() != Some("c"))
    {
        backend
            .nack(&stream(), &group(), lease.target(), None, None)
            .await
            .unwrap();
    }
    metrics.groups.refresh(backend.as_ref()).await;
    let sampled = parse(&metrics.render());
    let labels = [("stream", "orders"), ("group", "billing")];
    assert_eq!(
        value(&sampled, "rheo_group_parked_keys", &labels),
        Some(2.0)
    );
    let plain = [("stream", "orders"), ("group", "plain")];
    assert_eq!(value(&sampled, "rheo_group_parked_keys", &plain), Some(0.0));
}
