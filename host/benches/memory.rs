//! Memory backend throughput: batched append, batched fetch+ack on an empty
//! stream, and the same with one million events of already-consumed history
//! (the claim path must not get slower as history grows).
//!
//! Run: `cargo bench -p rheo --bench memory`

// criterion's macros generate undocumented public functions.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rheo::backend::memory::MemoryBackend;
use rheo::backend::{Backend, CreateStream};
use rheo::clock::SystemClock;
use rheo::model::{ConsumerId, EventInput, GroupName, GroupSpec, StreamName};
use serde_json::json;

const BATCH: usize = 50;

fn input(i: usize) -> EventInput {
    EventInput {
        event_type: Some("order.created".into()),
        payload: json!({"order": i, "amount": 42.5, "currency": "EUR"})
            .as_object()
            .unwrap()
            .clone(),
        ..EventInput::default()
    }
}

struct Fixture {
    backend: Arc<MemoryBackend>,
    stream: StreamName,
    group: GroupName,
}

async fn fixture(history: usize) -> Fixture {
    let backend = Arc::new(MemoryBackend::new(SystemClock::shared()));
    let stream = StreamName::parse("bench").unwrap();
    let group = GroupName::parse("workers").unwrap();
    backend
        .create_stream(CreateStream {
            name: stream.clone(),
            partition_count: 1,
            retention: None,
        })
        .await
        .unwrap();
    backend
        .create_group(&stream, GroupSpec::new(group.clone()))
        .await
        .unwrap();
    let f = Fixture {
        backend,
        stream,
        group,
    };
    for chunk in 0..history / 1000 {
        let batch = (0..1000).map(|i| input(chunk * 1000 + i)).collect();
        f.backend.append(&f.stream, batch).await.unwrap();
    }
    let mut remaining = history;
    while remaining > 0 {
        remaining -= consume_batch(&f, 1000).await;
    }
    f
}

/// Fetches up to `limit` leases and acks them in one batch settle.
async fn consume_batch(f: &Fixture, limit: u32) -> usize {
    let consumer = ConsumerId::parse("bench").unwrap();
    rheo::bench::fetch_and_ack(&*f.backend, (&f.stream, &f.group), &consumer, limit)
        .await
        .unwrap()
}

/// Times fetch+ack of `iters` batches; appending them is not timed.
async fn time_fetch_ack(f: &Fixture, iters: u64) -> Duration {
    for _ in 0..iters {
        let batch = (0..BATCH).map(input).collect();
        f.backend.append(&f.stream, batch).await.unwrap();
    }
    let start = Instant::now();
    for _ in 0..iters {
        let n = consume_batch(f, BATCH as u32).await;
        assert_eq!(n, BATCH);
    }
    start.elapsed()
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("memory");
    g.throughput(Throughput::Elements(BATCH as u64));

    let f = rt.block_on(fixture(0));
    g.bench_function("append_batch_50", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let batches: Vec<Vec<EventInput>> = (0..iters)
                    .map(|_| (0..BATCH).map(input).collect())
                    .collect();
                let start = Instant::now();
                for batch in batches {
                    f.backend.append(&f.stream, batch).await.unwrap();
                }
                start.elapsed()
            })
        })
    });

    let f = rt.block_on(fixture(0));
    g.bench_function("fetch_ack_batch_50_empty_history", |b| {
        b.iter_custom(|iters| rt.block_on(time_fetch_ack(&f, iters)))
    });

    let f = rt.block_on(fixture(1_000_000));
    g.bench_function("fetch_ack_batch_50_1m_history", |b| {
        b.iter_custom(|iters| rt.block_on(time_fetch_ack(&f, iters)))
    });
    g.finish();
}

criterion_group!(memory, benches);
criterion_main!(memory);
