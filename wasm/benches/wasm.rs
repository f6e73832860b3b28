//! Cost of one handler call through the WebAssembly host: a warm instance
//! (`reuse`), a new instance per call (`fresh`), and a warm `transform`
//! guest whose call appends an event to the memory backend.
//!
//! Run: `cargo bench -p rheo-wasm --bench wasm` (the example guests come from
//! `rheo-example-guests`).

// criterion's macros generate undocumented public functions.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Instant;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rheo_core::backend::memory::MemoryBackend;
use rheo_core::backend::{Backend, CreateStream};
use rheo_core::clock::SystemClock;
use rheo_core::model::{
    ConsumerId, Event, EventId, GroupName, HandlerName, Lease, LeaseId, StreamName, Timestamp,
};
use rheo_core::settle::HandlerOutcome;
use rheo_wasm::{EngineOptions, HandlerEnv, HandlerRunner, InstanceMode, Limits, WasmEngine};
use serde_json::json;

/// The bytes of the example guest `name`.
fn guest(name: &str) -> Vec<u8> {
    rheo_example_guests::get(name)
        .unwrap_or_else(|| panic!("no example guest {name}"))
        .to_vec()
}

/// A lease on an event like the ones the memory benchmark appends.
fn lease(i: u64) -> Lease {
    let stream = StreamName::parse("in").unwrap();
    let payload = json!({"order": i, "amount": 42.5, "currency": "EUR"});
    let event = Event {
        id: EventId::parse(format!("e-{i}")).unwrap(),
        stream: stream.clone(),
        partition: 0,
        sequence: i + 1,
        key: None,
        event_type: Some("order.created".into()),
        timestamp: Timestamp::from_millis(1_700_000_000_000),
        payload: payload.as_object().unwrap().clone(),
        metadata: json!({"correlation_id": "c-1"})
            .as_object()
            .unwrap()
            .clone(),
    };
    Lease {
        lease_id: LeaseId::generate(),
        receipt: None,
        stream,
        group: GroupName::parse("g").unwrap(),
        event_id: event.id.clone(),
        consumer_id: ConsumerId::generate(),
        attempt: 1,
        leased_at: Timestamp::from_millis(1_700_000_000_000),
        expires_at: Timestamp::from_millis(1_700_000_030_000),
        event: Arc::new(event),
    }
}

fn runner(
    engine: &WasmEngine,
    rt: &tokio::runtime::Runtime,
    name: &str,
    backend: Arc<dyn Backend>,
    instance: InstanceMode,
) -> HandlerRunner {
    let module = rt.block_on(engine.load(guest(name), None)).unwrap();
    let env = HandlerEnv::new(HandlerName::parse(name).unwrap(), backend)
        .with_config([("target_stream".to_owned(), "out".to_owned())].into());
    let limits = Limits {
        instance,
        max_invocations: u64::MAX,
        ..Limits::default()
    };
    HandlerRunner::new(module, env, limits).unwrap()
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let engine = WasmEngine::new(EngineOptions::default()).unwrap();
    let backend: Arc<dyn Backend> = Arc::new(MemoryBackend::new(SystemClock::shared()));
    rt.block_on(backend.create_stream(CreateStream {
        name: StreamName::parse("out").unwrap(),
        partition_count: 1,
        retention: None,
    }))
    .unwrap();

    let mut g = c.benchmark_group("wasm");
    g.throughput(Throughput::Elements(1));
    let cases = [
        ("echo_reuse", "echo", InstanceMode::Reuse),
        ("echo_fresh", "echo", InstanceMode::Fresh),
        ("transform_reuse", "transform", InstanceMode::Reuse),
    ];
    let mut next = 0u64;
    for (label, name, mode) in cases {
        let runner = runner(&engine, &rt, name, Arc::clone(&backend), mode);
        g.bench_function(label, |b| {
            b.iter_custom(|iters| {
                let leases: Vec<Lease> = (0..iters).map(|i| lease(next + i)).collect();
                next += iters;
                rt.block_on(async {
                    let start = Instant::now();
                    for l in &leases {
                        let outcome = runner.invoke(l).await;
                        assert_eq!(outcome, HandlerOutcome::Ack);
                    }
                    start.elapsed()
                })
            })
        });
    }
    g.finish();
}

criterion_group!(wasm, benches);
criterion_main!(wasm);
