//! Tests of the handler host with the real example guests from `guests/`
//! (the `rheo-example-guests` crate). Nothing here is mocked: every test
//! compiles a real component and runs it on a real engine; appends go to
//! the memory backend.

mod batches;
mod capture;
mod failures;
mod modules;
mod outcomes;
mod sandbox;

use std::sync::Arc;

use serde_json::Value;

use super::{HandlerEnv, HandlerModule, HandlerRunner, Limits};
use crate::backend::Backend;
use crate::backend::memory::MemoryBackend;
use crate::clock::{FrozenClock, SharedClock};
use crate::model::{
    ConsumerId, Event, EventId, GroupName, HandlerName, JsonObject, Lease, LeaseId, StreamName,
    Timestamp,
};
pub(crate) use crate::testing::{engine, guest, small_pool};

/// Compiles guest `name` on the shared engine.
async fn module(name: &str) -> HandlerModule {
    engine()
        .load(guest(name), None)
        .await
        .unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

/// A frozen clock at a fixed, recognisable instant.
fn frozen() -> Arc<FrozenClock> {
    FrozenClock::new(Timestamp::from_millis(1_750_000_000_123))
}

/// A memory backend on `clock`.
fn backend(clock: SharedClock) -> Arc<dyn Backend> {
    Arc::new(MemoryBackend::new(clock))
}

/// A runner of guest `name` with `config`, on a fresh memory backend.
async fn runner(name: &str, config: &[(&str, &str)], limits: Limits) -> HandlerRunner {
    let env = HandlerEnv::new(HandlerName::parse(name).unwrap(), backend(frozen())).with_config(
        config
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    HandlerRunner::new(module(name).await, env, limits).expect("valid limits")
}

/// A JSON object from a `json!` literal.
fn obj(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

/// A lease on event `id` of stream `in` with `payload`, at `attempt`.
fn lease(id: &str, payload: Value, attempt: u32) -> Lease {
    lease_with(id, payload, obj(serde_json::json!({})), attempt)
}

/// Like [`lease`], with metadata and a type.
fn lease_with(id: &str, payload: Value, metadata: JsonObject, attempt: u32) -> Lease {
    let stream = StreamName::parse("in").unwrap();
    let event = Event {
        id: EventId::parse(id).unwrap(),
        stream: stream.clone(),
        partition: 0,
        sequence: 1,
        key: None,
        event_type: Some("order.created".into()),
        timestamp: Timestamp::from_millis(1_700_000_000_000),
        payload: obj(payload),
        metadata,
    };
    Lease {
        lease_id: LeaseId::generate(),
        receipt: None,
        stream,
        group: GroupName::parse("g").unwrap(),
        event_id: event.id.clone(),
        consumer_id: ConsumerId::generate(),
        attempt,
        leased_at: Timestamp::from_millis(1_700_000_000_000),
        expires_at: Timestamp::from_millis(1_700_000_030_000),
        event: Arc::new(event),
    }
}
