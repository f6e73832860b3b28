//! Throughput and latency measurements behind `rheo bench`.
//!
//! Each workload runs against a fresh stream on the chosen backend and
//! reports events per second and per-call latency percentiles. Benchmarks
//! measure; nothing in the test suite depends on these numbers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::json;

use crate::backend::{Backend, CreateStream, FetchRequest, Partitions, Result};
use crate::model::{
    ConsumerId, EventInput, GroupName, GroupOrdering, GroupSpec, HandlerName, Lease, Settlement,
    StreamName,
};
use crate::runtime::{CountersSnapshot, Handler, HandlerSettings, Runtime, Version};
use crate::settle::HandlerOutcome;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    /// Events per batched workload.
    pub events: usize,
    /// Events per append batch and leases per fetch.
    pub batch: usize,
    /// Events appended one call at a time.
    pub single_appends: usize,
    /// Events appended and consumed before measuring again (0: skip).
    pub history: usize,
    /// Partitions of the bench stream.
    pub partitions: u32,
}

/// One workload's figures.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadResult {
    /// Workload name.
    pub name: String,
    /// Events processed.
    pub events: usize,
    /// Events per second over the whole workload.
    pub events_per_sec: f64,
    /// Median latency of one call (one append, or one fetch+settle round).
    pub p50_ms: f64,
    /// 99th percentile latency of one call.
    pub p99_ms: f64,
}

/// What bringing a handler up costs before it handles anything: its
/// component's size, compiling it from the bytes (no cache, as a first
/// deploy does) and its cold start.
#[derive(Debug, Clone, Serialize)]
pub struct HandlerStartup {
    /// The handler, as the workloads name it (e.g. `echo`).
    pub handler: String,
    /// Size of the component, in bytes.
    pub size_bytes: usize,
    /// Compile and validation of the component, without the on-disk cache.
    pub compile_ms: f64,
    /// Time to the first completed call of a new instance: instantiation
    /// plus one call (see [`cold_start`]).
    pub cold_start_ms: f64,
}

/// Latency samples of one workload.
#[derive(Debug, Default)]
pub struct Samples(Vec<Duration>);

impl Samples {
    /// Records one call's latency.
    pub fn push(&mut self, took: Duration) {
        self.0.push(took);
    }

    /// The workload's figures: `events` processed in `total`, with the
    /// percentiles of the recorded calls.
    pub fn result(mut self, name: &str, events: usize, total: Duration) -> WorkloadResult {
        self.0.sort_unstable();
        let pct = |p: f64| {
            let i = ((self.0.len() as f64 - 1.0) * p).round() as usize;
            self.0.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
        };
        WorkloadResult {
            name: name.to_owned(),
            events,
            events_per_sec: events as f64 / total.as_secs_f64().max(1e-9),
            p50_ms: pct(0.50),
            p99_ms: pct(0.99),
        }
    }
}

/// The `i`-th event every workload appends: a type, one of 1,000 keys and
/// a small order payload.
pub fn input(i: usize) -> EventInput {
    keyed_input(i, 1000)
}

/// [`input`] with `keys` keys instead of 1,000.
pub fn keyed_input(i: usize, keys: usize) -> EventInput {
    EventInput {
        event_type: Some("bench.order".into()),
        key: Some(format!("customer-{}", i % keys.max(1))),
        payload: json!({"order": i, "amount": 42.5, "currency": "EUR"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        ..EventInput::default()
    }
}

/// A fresh stream and group for one run.
pub async fn bench_stream(
    backend: &dyn Backend,
    partitions: u32,
) -> Result<(StreamName, GroupName)> {
    let suffix: u32 = rand::random();
    let stream = StreamName::parse(format!("bench-{suffix:08x}"))?;
    let group = GroupName::parse("bench")?;
    backend
        .create_stream(CreateStream {
            name: stream.clone(),
            partition_count: partitions,
            retention: None,
        })
        .await?;
    backend
        .create_group(&stream, GroupSpec::new(group.clone()))
        .await?;
    Ok((stream, group))
}

/// Appends `count` events one call at a time.
pub async fn append_single(
    backend: &dyn Backend,
    stream: &StreamName,
    count: usize,
    keys: usize,
) -> Result<WorkloadResult> {
    let mut samples = Samples::default();
    let start = Instant::now();
    for i in 0..count {
        let t = Instant::now();
        backend.append_one(stream, keyed_input(i, keys)).await?;
        samples.push(t.elapsed());
    }
    Ok(samples.result("append (single)", count, start.elapsed()))
}

/// Appends `count` events over `keys` keys in batches of `batch`;
/// `progress` is told how many were done after each batch.
pub async fn append_batched(
    backend: &dyn Backend,
    stream: &StreamName,
    (count, keys): (usize, usize),
    batch: usize,
    mut progress: impl FnMut(usize),
) -> Result<WorkloadResult> {
    let mut samples = Samples::default();
    let start = Instant::now();
    let mut done = 0;
    while done < count {
        let n = batch.min(count - done);
        let inputs = (done..done + n).map(|i| keyed_input(i, keys)).collect();
        let t = Instant::now();
        backend.append(stream, inputs).await?;
        samples.push(t.elapsed());
        done += n;
        progress(done);
    }
    Ok(samples.result(&format!("append (batch {batch})"), count, start.elapsed()))
}

/// Fetches up to `batch` leases and acks them in one batch settle, until
/// `count` events are consumed.
pub async fn fetch_ack(
    backend: &dyn Backend,
    stream: &StreamName,
    group: &GroupName,
    count: usize,
    batch: usize,
    mut progress: impl FnMut(usize),
) -> Result<WorkloadResult> {
    let consumer = ConsumerId::parse("bench")?;
    let mut samples = Samples::default();
    let start = Instant::now();
    let mut done = 0;
    while done < count {
        let t = Instant::now();
        let n = fetch_and_ack(backend, (stream, group), &consumer, batch as u32).await?;
        if n == 0 {
            break;
        }
        samples.push(t.elapsed());
        done += n;
        progress(done);
    }
    Ok(samples.result(&format!("fetch+ack (batch {batch})"), done, start.elapsed()))
}

/// One round of [`fetch_ack`]: fetches up to `limit` leases as `consumer`
/// (leases of a minute) and acks them in one batch settle; how many.
pub async fn fetch_and_ack(
    backend: &dyn Backend,
    (stream, group): (&StreamName, &GroupName),
    consumer: &ConsumerId,
    limit: u32,
) -> Result<usize> {
    let leases = backend
        .fetch(FetchRequest {
            stream: stream.clone(),
            group: group.clone(),
            limit,
            consumer_id: consumer.clone(),
            lease_ms: 60_000,
            partitions: Partitions::All,
        })
        .await?;
    let n = leases.len();
    if n == 0 {
        return Ok(0);
    }
    let acks = leases
        .into_iter()
        .map(|l| Settlement::ack(l.into_target()))
        .collect();
    for r in backend.settle(stream, group, acks).await? {
        r?;
    }
    Ok(n)
}

/// How to run the end-to-end handler workload.
#[derive(Debug, Clone)]
pub struct HandlerWorkload {
    /// Label, e.g. `echo (reuse)`.
    pub name: String,
    /// Events appended first, then consumed through the handler.
    pub events: usize,
    /// Deliveries handled at once.
    pub concurrency: usize,
    /// Leases held at most.
    pub max_demand: usize,
    /// Partitions of the stream.
    pub partitions: u32,
    /// The events' keys: `customer-0` … `customer-{keys - 1}`, in turn.
    pub keys: usize,
    /// The group's ordering (`docs/groups.md#ordering`).
    pub ordering: GroupOrdering,
    /// The group's flow control (`docs/groups.md#flow`).
    pub flow: crate::model::Flow,
    /// Most deliveries a call (the manifest's `batch_size`; 1: `handle`,
    /// one a call; above 1 the handler must take batches).
    pub batch_size: usize,
}

/// Times every call of the handler it wraps.
#[derive(Debug)]
struct Timed {
    inner: Arc<dyn Handler>,
    samples: Mutex<Vec<Duration>>,
}

#[async_trait]
impl Handler for Timed {
    async fn handle(&self, lease: &Lease) -> HandlerOutcome {
        let t = Instant::now();
        let outcome = self.inner.handle(lease).await;
        let took = t.elapsed();
        self.samples.lock().push(took);
        outcome
    }

    fn batches(&self) -> bool {
        self.inner.batches()
    }

    async fn handle_batch(&self, leases: &[Lease]) -> Vec<HandlerOutcome> {
        let t = Instant::now();
        let outcomes = self.inner.handle_batch(leases).await;
        let took = t.elapsed();
        self.samples.lock().push(took);
        outcomes
    }
}

/// End to end through a handler: appends `events` events (not timed), then
/// starts the real runtime loop on them — fetch, dispatch, settle, exactly
/// as `rheo serve` runs a deployed handler — and times until every event is
/// processed. Latency percentiles are per handler call (a call of a batch
/// handler takes up to `batch_size` deliveries). Fails if a delivery was
/// not acked.
pub async fn through_handler(
    backend: Arc<dyn Backend>,
    handler: Arc<dyn Handler>,
    workload: &HandlerWorkload,
    mut progress: impl FnMut(usize),
) -> Result<WorkloadResult> {
    let (stream, _) = bench_stream(&*backend, workload.partitions).await?;
    let mut done = 0;
    while done < workload.events {
        let n = 1000.min(workload.events - done);
        let batch = (done..done + n)
            .map(|i| keyed_input(i, workload.keys))
            .collect();
        backend.append(&stream, batch).await?;
        done += n;
    }
    let group = GroupName::parse("handler")?;
    let spec = GroupSpec {
        ordering: workload.ordering,
        flow: workload.flow,
        ..GroupSpec::new(group.clone())
    };
    backend.create_group(&stream, spec).await?;
    let timed = Arc::new(Timed {
        inner: handler,
        samples: Mutex::new(Vec::with_capacity(workload.events)),
    });
    let mut settings = HandlerSettings::new(stream, group, ConsumerId::parse("bench")?);
    settings.concurrency = workload.concurrency;
    settings.max_demand = workload.max_demand;
    settings.batch_size = workload.batch_size;
    let name = HandlerName::parse("bench")?;
    let runtime = Runtime::new(Arc::clone(&backend));
    let version = Version::new(1, timed.clone());
    let start = Instant::now();
    let deployed = runtime.run(&name, settings, version, false).await;
    let mut counters = CountersSnapshot::default();
    let outcome = match deployed {
        Err(e) => Err(crate::backend::Error::Failed(format!(
            "cannot start the handler: {e}"
        ))),
        Ok(_) => loop {
            tokio::time::sleep(Duration::from_millis(2)).await;
            match runtime.counters(&name) {
                Some(running) => counters = running.snapshot(),
                None => {
                    break Err(crate::backend::Error::Failed(
                        "the handler stopped running".into(),
                    ));
                }
            }
            progress(counters.processed as usize);
            if counters.processed as usize >= workload.events {
                break Ok(start.elapsed());
            }
        },
    };
    runtime.shutdown().await;
    let elapsed = outcome?;
    if counters.acked as usize != workload.events {
        return Err(crate::backend::Error::Failed(format!(
            "the handler acked {} of {} events ({counters:?})",
            counters.acked, workload.events
        )));
    }
    let samples = Samples(std::mem::take(&mut *timed.samples.lock()));
    Ok(samples.result(&workload.name, workload.events, elapsed))
}

/// Time to the first completed call of a new instance: appends one event
/// to a fresh stream (not timed), claims it, and times `handler`'s call on
/// it; the caller hands over a handler that has no warm instance, so the
/// time is the instantiation plus the first call. The delivery is then
/// acked. Fails unless the handler acked.
pub async fn cold_start(backend: &dyn Backend, handler: &dyn Handler) -> Result<Duration> {
    let (stream, group) = bench_stream(backend, 1).await?;
    backend.append_one(&stream, input(0)).await?;
    let lease = backend
        .fetch(FetchRequest {
            stream: stream.clone(),
            group: group.clone(),
            limit: 1,
            consumer_id: ConsumerId::parse("bench")?,
            lease_ms: 60_000,
            partitions: Partitions::All,
        })
        .await?
        .pop()
        .ok_or_else(|| crate::backend::Error::Failed("the event was not delivered".into()))?;
    let start = Instant::now();
    let outcome = handler.handle(&lease).await;
    let took = start.elapsed();
    if outcome != HandlerOutcome::Ack {
        return Err(crate::backend::Error::Failed(format!(
            "the handler's first call did not ack: {outcome:?}"
        )));
    }
    let ack = Settlement::ack(lease.into_target());
    for r in backend.settle(&stream, &group, vec![ack]).await? {
        r?;
    }
    Ok(took)
}

/// One point of a retention run: where the stream and the store stood.
#[derive(Debug, Clone, Serialize)]
pub struct SizePoint {
    /// Events appended so far.
    pub appended: u64,
    /// Events stored then (high watermark − first sequence + 1, summed).
    pub stored: u64,
    /// The store's size then, where it can tell ([`Backend::size`]).
    pub bytes: Option<u64>,
    /// Seconds since the run started.
    pub elapsed_s: f64,
}

/// What a retention run measured (`docs/benchmarks.md#retention`).
#[derive(Debug, Clone, Serialize)]
pub struct RetentionRun {
    /// Size over time while appending.
    pub points: Vec<SizePoint>,
    /// The appends, at the pace the store took them with trims running.
    pub append: WorkloadResult,
    /// Events the trims removed.
    pub removed: u64,
    /// Fetch+ack of the events left in the trimmed stream.
    pub trimmed: WorkloadResult,
    /// Fetch+ack of as many events in a stream that never trimmed.
    pub untrimmed: WorkloadResult,
}

/// Appends `total` events in batches of `batch` to a fresh stream keeping
/// its newest `max_events` per partition while the core's trimmer runs
/// beside it (as the server runs it), noting the store's size `points`
/// times; then consumes what is left, and as many events from a stream
/// that never trimmed, to compare fetch+ack at the same live size.
pub async fn retention_run(
    backend: Arc<dyn Backend>,
    total: usize,
    max_events: u64,
    partitions: u32,
    batch: usize,
    points: usize,
    mut progress: impl FnMut(usize),
) -> Result<RetentionRun> {
    use crate::backend::retention::{TRIM_BATCH, trim_stream};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let suffix: u32 = rand::random();
    let stream = StreamName::parse(format!("bench-retention-{suffix:08x}"))?;
    let mut create = CreateStream::new(stream.clone(), partitions);
    create.retention = Some(crate::model::Retention {
        max_events: Some(max_events),
        ..crate::model::Retention::default()
    });
    backend.create_stream(create).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let removed = Arc::new(AtomicU64::new(0));
    let trimmer = {
        let (backend, stream) = (Arc::clone(&backend), stream.clone());
        let (stop, removed) = (Arc::clone(&stop), Arc::clone(&removed));
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                match trim_stream(&*backend, &stream, TRIM_BATCH).await {
                    Ok(report) => {
                        removed.fetch_add(report.removed, Ordering::SeqCst);
                        if report.removed > 0 {
                            backend.reclaim().await?;
                        }
                        if !report.more {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok::<(), crate::backend::Error>(())
        })
    };

    let started = Instant::now();
    let every = (total / points.max(1)).max(1);
    let mut samples = Samples::default();
    let mut size_points = Vec::new();
    let mut appended = 0;
    while appended < total {
        let n = batch.min(total - appended);
        let events = (appended..appended + n).map(input).collect();
        let t = Instant::now();
        backend.append(&stream, events).await?;
        samples.push(t.elapsed());
        let before = appended;
        appended += n;
        progress(appended);
        if appended / every != before / every || appended == total {
            size_points.push(size_point(&*backend, &stream, appended, started).await?);
        }
    }
    let append = samples.result(&format!("append (batch {batch})"), total, started.elapsed());
    stop.store(true, Ordering::SeqCst);
    trimmer
        .await
        .map_err(|e| crate::backend::Error::Failed(format!("the trimmer failed: {e}")))??;
    // What the trimmer had left to do.
    loop {
        let report = trim_stream(&*backend, &stream, TRIM_BATCH).await?;
        removed.fetch_add(report.removed, Ordering::SeqCst);
        if !report.more {
            break;
        }
    }
    backend.reclaim().await?;
    size_points.push(size_point(&*backend, &stream, appended, started).await?);

    let live = (max_events * u64::from(partitions)).min(total as u64) as usize;
    let group = GroupName::parse("bench")?;
    backend
        .create_group(&stream, GroupSpec::new(group.clone()))
        .await?;
    let trimmed = fetch_ack(&*backend, &stream, &group, live, batch, |_| {}).await?;
    let (fresh, fresh_group) = bench_stream(&*backend, partitions).await?;
    append_batched(&*backend, &fresh, (live, 1000), batch, |_| {}).await?;
    let untrimmed = fetch_ack(&*backend, &fresh, &fresh_group, live, batch, |_| {}).await?;
    Ok(RetentionRun {
        points: size_points,
        append,
        removed: removed.load(Ordering::SeqCst),
        trimmed,
        untrimmed,
    })
}

async fn size_point(
    backend: &dyn Backend,
    stream: &StreamName,
    appended: usize,
    started: Instant,
) -> Result<SizePoint> {
    let info = backend.get_stream(stream).await?;
    let stored = (info.high_watermarks.iter().zip(&info.first_sequences))
        .map(|(hw, first)| (hw + 1).saturating_sub(*first))
        .sum();
    Ok(SizePoint {
        appended: appended as u64,
        stored,
        bytes: backend.size().await?,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod retention_tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::clock::SystemClock;

    #[tokio::test]
    async fn a_retention_run_levels_off_and_consumes_the_live_events() {
        let backend: Arc<dyn Backend> = Arc::new(MemoryBackend::new(SystemClock::shared()));
        let run = retention_run(Arc::clone(&backend), 5_000, 300, 2, 100, 5, |_| {})
            .await
            .expect("a retention run");
        assert_eq!(
            run.removed,
            5_000 - 600,
            "each partition keeps its newest 300"
        );
        assert_eq!(run.points.last().map(|p| p.stored), Some(600));
        assert!(run.points.len() >= 5, "{:?}", run.points);
        assert_eq!((run.trimmed.events, run.untrimmed.events), (600, 600));
        assert_eq!(run.append.events, 5_000);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::clock::SystemClock;

    /// Sleeps, counts its calls and answers `outcome`.
    #[derive(Debug)]
    struct Slow {
        outcome: HandlerOutcome,
        calls: AtomicUsize,
    }

    #[async_trait]
    impl Handler for Slow {
        async fn handle(&self, _lease: &Lease) -> HandlerOutcome {
            self.calls.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(20)).await;
            self.outcome.clone()
        }
    }

    fn slow(outcome: HandlerOutcome) -> Slow {
        Slow {
            outcome,
            calls: AtomicUsize::new(0),
        }
    }

    #[tokio::test]
    async fn cold_start_times_one_call_and_acks_it() {
        let backend = MemoryBackend::new(SystemClock::shared());
        let handler = slow(HandlerOutcome::Ack);
        let took = cold_start(&backend, &handler).await.unwrap();
        assert_eq!(handler.calls.load(Ordering::Relaxed), 1);
        // The handler's own 20 ms are inside the figure.
        assert!(took >= Duration::from_millis(20), "{took:?}");
        let streams = backend.list_streams().await.unwrap();
        assert_eq!(streams.len(), 1);
        let lag = backend
            .lag(
                &streams[0].name,
                &GroupName::parse("bench").unwrap(),
                &Partitions::All,
            )
            .await
            .unwrap();
        assert_eq!((lag.lag, lag.inflight), (0, 0), "the delivery was acked");
    }

    #[tokio::test]
    async fn cold_start_fails_unless_the_handler_acks() {
        let backend = MemoryBackend::new(SystemClock::shared());
        let handler = slow(HandlerOutcome::Reject {
            reason: "no".into(),
        });
        let error = cold_start(&backend, &handler).await.unwrap_err();
        assert!(error.to_string().contains("did not ack"), "{error}");
    }
}
