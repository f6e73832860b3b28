//! Handlers end to end inside one process: real guests from `guests/`,
//! compiled and run by the real engine, consuming through the runtime from
//! the memory backend. Nothing is mocked.

mod canary;
mod cluster;
mod deploy;
mod guests;
mod locks;
mod swap;
mod trial;
mod versions;

use std::sync::Arc;
use std::time::Duration;

use crate::backend::memory::MemoryBackend;
use crate::backend::{Backend, CreateStream, DeadLettersRequest, Partitions};
use crate::clock::FrozenClock;
use crate::handlers::{HandlerRegistry, HandlerView, Manifest};
use crate::model::{
    DeadLetter, EventInput, GroupName, GroupSpec, HandlerName, JsonObject, StreamName, Timestamp,
};
use rheo_wasm::testing::{engine, guest};

/// A memory backend (on a frozen clock: delays come from the manifests'
/// zero backoff, never from time passing) with stream `in` (2 partitions), a registry over it,
/// and the handlers directory (kept alive with the fixture).
struct Fixture {
    backend: Arc<MemoryBackend>,
    clock: Arc<FrozenClock>,
    registry: HandlerRegistry,
    dir: tempfile::TempDir,
}

impl Fixture {
    async fn new() -> Self {
        let clock = FrozenClock::new(Timestamp::from_millis(1_767_225_600_000));
        let backend = Arc::new(MemoryBackend::new(clock.clone()));
        backend
            .create_stream(CreateStream {
                name: sn("in"),
                partition_count: 2,
                retention: None,
            })
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let registry = HandlerRegistry::new(engine(), backend.clone(), Some(dir.path())).unwrap();
        Fixture {
            backend,
            clock,
            registry,
            dir,
        }
    }

    /// Another registry over the same backend and handlers directory: the
    /// server started again.
    fn restarted(&self) -> HandlerRegistry {
        HandlerRegistry::new(engine(), self.backend.clone(), Some(self.dir.path())).unwrap()
    }

    /// A manifest consuming `in` as `group`.
    fn manifest(&self, group: &str) -> Manifest {
        let mut m = Manifest::new(sn("in"), gn(group));
        m.concurrency = 4;
        m
    }

    async fn deploy(&self, name: &str, manifest: Manifest, guest_name: &str) -> HandlerView {
        self.registry
            .deploy(hn(name), manifest, guest(guest_name))
            .await
            .unwrap_or_else(|e| panic!("deploying {guest_name}: {e}"))
            .0
    }

    async fn append(&self, payloads: Vec<serde_json::Value>) {
        let inputs = payloads
            .into_iter()
            .map(|p| EventInput::with_payload(obj(p)))
            .collect();
        self.backend.append(&sn("in"), inputs).await.unwrap();
    }

    async fn lag(&self, group: &str) -> u64 {
        self.backend
            .lag(&sn("in"), &gn(group), &Partitions::All)
            .await
            .unwrap()
            .lag
    }

    async fn dead_letters(&self, group: &str) -> Vec<DeadLetter> {
        self.backend
            .dead_letters(DeadLettersRequest {
                stream: sn("in"),
                group: gn(group),
                limit: 1000,
                after: None,
            })
            .await
            .unwrap()
            .dead_letters
    }

    async fn create_group(&self, group: &str, max_attempts: u32) {
        self.backend
            .create_group(
                &sn("in"),
                GroupSpec {
                    max_attempts,
                    ..GroupSpec::new(gn(group))
                },
            )
            .await
            .unwrap();
    }

    async fn view(&self, name: &str) -> HandlerView {
        self.registry.get(&hn(name)).await.unwrap()
    }
}

fn sn(s: &str) -> StreamName {
    StreamName::parse(s).unwrap()
}

fn gn(s: &str) -> GroupName {
    GroupName::parse(s).unwrap()
}

fn hn(s: &str) -> HandlerName {
    HandlerName::parse(s).unwrap()
}

fn obj(v: serde_json::Value) -> JsonObject {
    v.as_object().cloned().expect("a JSON object")
}

/// Waits (in real time, bounded) for a condition the handlers make true.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    for _ in 0..3000 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}
