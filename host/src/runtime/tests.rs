//! Runtime tests with in-process handlers over the memory backend and a
//! frozen clock. (The WebAssembly handlers are tested end to end with real
//! guests in `rheo_wasm::testing` and the `tests/` crate.)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Semaphore;

use super::{CountersSnapshot, Handler, HandlerSettings, Runtime, Version};
use crate::backend::conformance::ordering::{assert_each_key_in_order, interleaved_keys};
use crate::backend::memory::MemoryBackend;
use crate::backend::{Backend, CreateStream, DeadLettersRequest, Partitions, Replay};
use crate::clock::FrozenClock;
use crate::model::{
    ConsumerId, EventInput, GroupName, GroupOrdering, GroupSpec, HandlerName, Lease, StreamName,
    Timestamp,
};
use crate::settle::{HandlerFailure, HandlerOutcome};

/// A handler made of a closure.
struct FnHandler<F>(F);

impl<F> std::fmt::Debug for FnHandler<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FnHandler")
    }
}

#[async_trait]
impl<F> Handler for FnHandler<F>
where
    F: Fn(&Lease) -> HandlerOutcome + Send + Sync + 'static,
{
    async fn handle(&self, lease: &Lease) -> HandlerOutcome {
        (self.0)(lease)
    }
}

/// A handler that waits for a permit per delivery, then acks.
#[derive(Debug)]
struct Gated {
    gate: Arc<Semaphore>,
    started: Arc<AtomicUsize>,
}

#[async_trait]
impl Handler for Gated {
    async fn handle(&self, _: &Lease) -> HandlerOutcome {
        self.started.fetch_add(1, Ordering::SeqCst);
        self.gate.acquire().await.expect("gate open").forget();
        HandlerOutcome::Ack
    }
}

struct Env {
    backend: Arc<MemoryBackend>,
    clock: Arc<FrozenClock>,
    runtime: Runtime,
    stream: StreamName,
    group: GroupName,
}

async fn env() -> Env {
    let clock = FrozenClock::new(Timestamp::from_millis(1_767_225_600_000));
    let backend = Arc::new(MemoryBackend::new(clock.clone()));
    let stream = StreamName::parse("orders").unwrap();
    backend
        .create_stream(CreateStream {
            name: stream.clone(),
            partition_count: 2,
            retention: None,
        })
        .await
        .unwrap();
    Env {
        runtime: Runtime::new(backend.clone()),
        backend,
        clock,
        stream,
        group: GroupName::parse("workers").unwrap(),
    }
}

impl Env {
    fn settings(&self) -> HandlerSettings {
        let mut s = HandlerSettings::new(
            self.stream.clone(),
            self.group.clone(),
            ConsumerId::parse("test-worker").unwrap(),
        );
        s.concurrency = 4;
        s
    }

    async fn append(&self, n: usize) {
        self.backend
            .append(&self.stream, vec![EventInput::default(); n])
            .await
            .unwrap();
    }

    fn counters(&self, h: &HandlerName) -> CountersSnapshot {
        self.runtime.counters(h).expect("running").snapshot()
    }

    fn by_version(&self, h: &HandlerName) -> BTreeMap<u64, CountersSnapshot> {
        self.runtime.counters(h).expect("running").by_version()
    }

    async fn lag(&self) -> u64 {
        self.backend
            .lag(&self.stream, &self.group, &Partitions::All)
            .await
            .unwrap()
            .lag
    }
}

fn version(number: u64, handler: impl Handler) -> Version {
    Version::new(number, Arc::new(handler))
}

fn name(s: &str) -> HandlerName {
    HandlerName::parse(s).unwrap()
}

/// Waits (in real time, bounded) for a condition the runtime makes true.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    for _ in 0..2000 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out waiting for: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_every_event_and_counts_them() {
    let e = env().await;
    e.append(100).await;
    let h = name("echo");
    e.runtime
        .run(
            &h,
            e.settings(),
            version(1, FnHandler(|_: &Lease| HandlerOutcome::Ack)),
            false,
        )
        .await
        .unwrap();
    eventually("all acked", async || e.lag().await == 0).await;
    eventually("counted", async || e.counters(&h).acked == 100).await;
    let counters = e.counters(&h);
    assert_eq!((counters.processed, counters.inflight), (100, 0));
    assert_eq!(
        e.by_version(&h)[&1].acked,
        100,
        "counted under the version it ran"
    );
    e.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_a_delay_waits_for_the_clock() {
    let e = env().await;
    e.append(1).await;
    let h = name("flaky");
    let handler = FnHandler(|l: &Lease| {
        if l.attempt < 2 {
            HandlerOutcome::Retry {
                reason: "not yet".into(),
                delay_ms: Some(5_000),
            }
        } else {
            HandlerOutcome::Ack
        }
    });
    e.runtime
        .run(&h, e.settings(), version(1, handler), false)
        .await
        .unwrap();
    eventually("retried", async || e.counters(&h).retried == 1).await;
    let lag = e
        .backend
        .lag(&e.stream, &e.group, &Partitions::All)
        .await
        .unwrap();
    assert_eq!(lag.waiting_retry, 1, "waiting on the frozen clock");
    e.clock.advance(5_000);
    eventually("acked on attempt 2", async || e.lag().await == 0).await;
    let c = e.counters(&h);
    assert_eq!((c.retried, c.acked, c.processed), (1, 1, 2));
    e.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejects_and_failures_reach_the_dead_letters() {
    let e = env().await;
    e.backend
        .create_group(
            &e.stream,
            GroupSpec {
                max_attempts: 2,
                ..GroupSpec::new(e.group.clone())
            },
        )
        .await
        .unwrap();
    e.backend
        .append(
            &e.stream,
            vec![
                EventInput {
                    event_type: Some("poison".into()),
                    ..EventInput::default()
                },
                EventInput {
                    event_type: Some("crash".into()),
                    ..EventInput::default()
                },
            ],
        )
        .await
        .unwrap();
    let h = name("picky");
    let handler = FnHandler(|l: &Lease| match l.event.event_type.as_deref() {
        Some("poison") => HandlerOutcome::Reject {
            reason: "poison event".into(),
        },
        _ => HandlerOutcome::Failed(HandlerFailure::Trap("boom".into())),
    });
    e.runtime
        .run(&h, e.settings(), version(1, handler), false)
        .await
        .unwrap();
    eventually("both dead", async || e.lag().await == 0).await;
    let page = e
        .backend
        .dead_letters(DeadLettersRequest {
            stream: e.stream.clone(),
            group: e.group.clone(),
            limit: 10,
            after: None,
        })
        .await
        .unwrap();
    let mut reasons: Vec<_> = page.dead_letters.iter().map(|d| d.reason.clone()).collect();
    reasons.sort();
    assert_eq!(
        reasons,
        ["max_attempts: handler_error: trap: boom", "poison event"]
    );
    eventually("counted", async || e.counters(&h).processed == 3).await;
    let c = e.counters(&h);
    assert_eq!((c.rejected, c.trapped, c.retried), (1, 2, 2));
    e.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_mid_flight_is_not_settled() {
    let e = env().await;
    e.append(1).await;
    let gate = Arc::new(Semaphore::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let h = name("slow");
    let handler = Gated {
        gate: gate.clone(),
        started: started.clone(),
    };
    e.runtime
        .run(&h, e.settings(), version(1, handler), false)
        .await
        .unwrap();
    eventually("started", async || started.load(Ordering::SeqCst) == 1).await;
    // Paused first, so the worker does not claim the replayed delivery again.
    e.runtime.set_paused(&h, true).unwrap();
    // An operator replays the group: the worker's lease is superseded.
    let n = e
        .backend
        .replay(
            &e.stream,
            &e.group,
            Replay::FromSequence {
                after: 0,
                partitions: Partitions::All,
            },
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    gate.add_permits(1);
    eventually("lost", async || e.counters(&h).lost == 1).await;
    let c = e.counters(&h);
    assert_eq!(c.acked, 0, "the stale result was dropped, not acked");
    assert_eq!(e.lag().await, 1, "the delivery is still open");
    e.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_swap_lets_in_flight_work_finish_on_the_old_version() {
    let e = env().await;
    e.append(1).await;
    let gate = Arc::new(Semaphore::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let h = name("swappy");
    let mut settings = e.settings();
    settings.concurrency = 1;
    let v1 = Gated {
        gate: gate.clone(),
        started: started.clone(),
    };
    e.runtime
        .run(&h, settings.clone(), version(1, v1), false)
        .await
        .unwrap();
    eventually("v1 started", async || started.load(Ordering::SeqCst) == 1).await;
    e.runtime
        .run(
            &h,
            settings,
            version(2, FnHandler(|_: &Lease| HandlerOutcome::Ack)),
            false,
        )
        .await
        .unwrap();
    e.append(3).await;
    gate.add_permits(1);
    eventually("all acked", async || e.lag().await == 0).await;
    eventually("counted", async || e.counters(&h).acked == 4).await;
    let by_version = e.by_version(&h);
    assert_eq!(
        by_version[&1].acked, 1,
        "the in-flight delivery finished on v1"
    );
    assert_eq!(by_version[&2].acked, 3);
    e.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_handler_drains_in_flight_work_first() {
    let e = env().await;
    e.append(2).await;
    let gate = Arc::new(Semaphore::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let h = name("drainer");
    let handler = Gated {
        gate: gate.clone(),
        started: started.clone(),
    };
    e.runtime
        .run(&h, e.settings(), version(1, handler), false)
        .await
        .unwrap();
    eventually("both started", async || started.load(Ordering::SeqCst) == 2).await;
    let runtime = Arc::new(e.runtime);
    let removing = tokio::spawn({
        let runtime = runtime.clone();
        let h = h.clone();
        async move { runtime.stop(&h).await }
    });
    gate.add_permits(2);
    removing.await.unwrap().unwrap();
    let lag = e
        .backend
        .lag(&e.stream, &e.group, &Partitions::All)
        .await
        .unwrap();
    assert_eq!((lag.lag, lag.inflight), (0, 0), "drained work was settled");
    assert!(runtime.counters(&h).is_none(), "gone after removal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_that_times_out_abandons_its_leases() {
    let e = env().await;
    e.append(1).await;
    let gate = Arc::new(Semaphore::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let h = name("stuck");
    let mut settings = e.settings();
    settings.drain_timeout = Duration::from_millis(50);
    let handler = Gated {
        gate,
        started: started.clone(),
    };
    e.runtime
        .run(&h, settings, version(1, handler), false)
        .await
        .unwrap();
    eventually("started", async || started.load(Ordering::SeqCst) == 1).await;
    e.runtime.stop(&h).await.unwrap();
    let lag = e
        .backend
        .lag(&e.stream, &e.group, &Partitions::All)
        .await
        .unwrap();
    assert_eq!(lag.inflight, 1, "the lease is left to expire");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploying_on_a_missing_stream_is_refused() {
    let e = env().await;
    let mut settings = e.settings();
    settings.stream = StreamName::parse("nope").unwrap();
    let h = name("x");
    let err = e
        .runtime
        .run(
            &h,
            settings,
            version(1, FnHandler(|_: &Lease| HandlerOutcome::Ack)),
            false,
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("stream \"nope\" not found"),
        "{err}"
    );
    assert!(e.runtime.counters(&h).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_handler_fetches_nothing_until_resumed() {
    let e = env().await;
    let h = name("pausable");
    let ack = || version(1, FnHandler(|_: &Lease| HandlerOutcome::Ack));
    e.runtime.run(&h, e.settings(), ack(), false).await.unwrap();
    e.runtime.set_paused(&h, true).unwrap();
    // New settings restart the worker: it starts in the state it is told.
    let mut settings = e.settings();
    settings.concurrency = 2;
    e.runtime.run(&h, settings, ack(), true).await.unwrap();
    e.append(5).await;
    // A paused worker's wait has no timeout to miss: give it real time to
    // (wrongly) act, then check nothing was claimed.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lag = e
        .backend
        .lag(&e.stream, &e.group, &Partitions::All)
        .await
        .unwrap();
    assert_eq!((lag.pending, lag.inflight), (5, 0));
    e.runtime.set_paused(&h, false).unwrap();
    eventually("resumed and acked", async || e.lag().await == 0).await;
    e.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetched_batch_runs_partition_by_partition() {
    let e = env().await;
    let inputs = (0..6)
        .map(|i| EventInput {
            partition: Some(i / 3),
            ..EventInput::default()
        })
        .collect();
    e.backend.append(&e.stream, inputs).await.unwrap();
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let record = {
        let seen = seen.clone();
        FnHandler(move |l: &Lease| {
            seen.lock().push((l.event.partition, l.event.sequence));
            HandlerOutcome::Ack
        })
    };
    let mut settings = e.settings();
    settings.concurrency = 1;
    let h = name("fair");
    e.runtime
        .run(&h, settings, version(1, record), false)
        .await
        .unwrap();
    eventually("all acked", async || e.lag().await == 0).await;
    assert_eq!(
        *seen.lock(),
        [(0, 1), (1, 1), (0, 2), (1, 2), (0, 3), (1, 3)],
        "one fetch of both partitions, run in turns, each in order"
    );
    e.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_leases_are_renewed_while_they_wait_to_run() {
    let e = env().await;
    e.append(3).await;
    let gate = Arc::new(Semaphore::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let handler = Gated {
        gate: gate.clone(),
        started: started.clone(),
    };
    let mut settings = e.settings();
    (settings.concurrency, settings.max_demand, settings.lease_ms) = (1, 3, 100);
    let h = name("patient");
    e.runtime
        .run(&h, settings, version(1, handler), false)
        .await
        .unwrap();
    eventually("one runs", async || started.load(Ordering::SeqCst) == 1).await;
    let lag = e
        .backend
        .lag(&e.stream, &e.group, &Partitions::All)
        .await
        .unwrap();
    assert_eq!(lag.inflight, 3, "one lease runs, two wait, all held");
    // Each step moves the clock past most of a lease; the renewer (one
    // call for all three) pushes the earliest expiry to `now + 100`.
    for _ in 0..3 {
        let renewed = Some(e.clock.advance(60).add_ms(100));
        eventually("renewed", async || {
            let due = e.backend.next_due(&e.stream, &e.group, &Partitions::All);
            due.await.unwrap() == renewed
        })
        .await;
    }
    gate.add_permits(3);
    eventually("all acked", async || e.counters(&h).acked == 3).await;
    assert_eq!(e.counters(&h).lost, 0, "no held lease expired");
    assert_eq!(e.lag().await, 0);
    e.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_takes_its_share_of_first_attempts_and_its_rejects_are_retried_on_the_current_version()
 {
    use super::{CanaryTally, CanaryVersion};

    let e = env().await;
    let h = name("canaried");
    e.runtime
        .run(
            &h,
            e.settings(),
            version(1, FnHandler(|_: &Lease| HandlerOutcome::Ack)),
            false,
        )
        .await
        .unwrap();
    let tally = Arc::new(CanaryTally::default());
    let canary = CanaryVersion {
        number: 2,
        handler: Arc::new(FnHandler(|l: &Lease| {
            assert_eq!(l.attempt, 1, "a retry never goes to the canary");
            HandlerOutcome::Reject {
                reason: "the canary dislikes it".into(),
            }
        })),
        share: 2_500,
        tally: Arc::clone(&tally),
    };
    e.runtime.set_canary(&h, Some(canary)).unwrap();
    e.append(400).await;
    eventually("all acked", async || e.lag().await == 0).await;
    eventually("counted", async || e.counters(&h).acked == 400).await;

    let counts = tally.counts();
    assert_eq!(counts.canary_handled + counts.current_handled, 400);
    assert_eq!(counts.canary_failed, counts.canary_handled);
    assert_eq!(counts.current_failed, 0, "retries are not counted");
    // About a quarter, by the hash of the event id (5 standard deviations).
    assert!(
        (100_i64 - counts.canary_handled as i64).abs() < 45,
        "{counts:?}"
    );
    let by_version = e.by_version(&h);
    assert_eq!(by_version[&2].retried, counts.canary_handled);
    assert_eq!(by_version[&2].rejected, 0, "held back as a retry");
    assert_eq!(by_version[&1].acked, 400);
    let dead = e
        .backend
        .dead_letters(DeadLettersRequest {
            stream: e.stream.clone(),
            group: e.group.clone(),
            limit: 10,
            after: None,
        })
        .await
        .unwrap();
    assert!(dead.dead_letters.is_empty());

    // Without the canary, the current version takes every first attempt.
    e.runtime.set_canary(&h, None).unwrap();
    e.append(50).await;
    eventually("all acked", async || e.counters(&h).acked == 450).await;
    assert_eq!(tally.counts().canary_handled, counts.canary_handled);
    e.runtime.shutdown().await;
}

/// Notes each delivery's key while it runs: two of one key at once fail
/// the test; every ack is recorded in the order it happened.
#[derive(Debug, Default)]
struct KeyWatch {
    out: parking_lot::Mutex<std::collections::HashSet<(u32, String)>>,
    acked: parking_lot::Mutex<Vec<(u32, String, u64)>>,
    overlaps: AtomicUsize,
}

#[async_trait]
impl Handler for Arc<KeyWatch> {
    async fn handle(&self, lease: &Lease) -> HandlerOutcome {
        let event = &lease.event;
        let key = (event.partition, event.key.clone().expect("a key"));
        if !self.out.lock().insert(key.clone()) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        // Let the other deliveries of the batch run meanwhile.
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        self.out.lock().remove(&key);
        if event.sequence.is_multiple_of(7) && lease.attempt == 1 {
            return HandlerOutcome::Retry {
                reason: "once more".into(),
                delay_ms: None,
            };
        }
        self.acked.lock().push((key.0, key.1, event.sequence));
        HandlerOutcome::Ack
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_key_ordering_a_handler_of_concurrency_16_runs_each_key_in_sequence_order() {
    let e = env().await;
    const KEYS: usize = 20;
    const PER_KEY: usize = 100;
    e.backend
        .append(&e.stream, interleaved_keys(KEYS, PER_KEY))
        .await
        .unwrap();
    let watch = Arc::new(KeyWatch::default());
    let h = name("ordered");
    let mut settings = e.settings();
    settings.concurrency = 16;
    // The runtime creates the group with the settings' ordering.
    settings.ordering = Some(GroupOrdering::Key);
    e.runtime
        .run(&h, settings, version(1, Arc::clone(&watch)), false)
        .await
        .unwrap();
    let groups = e.backend.list_groups(&e.stream).await.unwrap();
    assert_eq!(groups[0].ordering, GroupOrdering::Key);
    eventually("every event acked", async || e.lag().await == 0).await;
    let c = e.counters(&h);
    e.runtime.shutdown().await;
    assert!(c.retried > 0, "some retries happened: {c:?}");
    assert_eq!(
        watch.overlaps.load(Ordering::SeqCst),
        0,
        "two of a key ran at once"
    );
    assert_each_key_in_order(watch.acked.lock().clone(), KEYS, PER_KEY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_asking_for_another_ordering_than_its_group_has_is_refused() {
    let e = env().await;
    e.backend
        .create_group(&e.stream, GroupSpec::new(e.group.clone()))
        .await
        .unwrap();
    e.append(3).await;
    let h = name("keyed");
    let mut keyed = e.settings();
    keyed.ordering = Some(GroupOrdering::Key);
    let refused = e
        .runtime
        .run(
            &h,
            keyed,
            version(1, FnHandler(|_: &Lease| HandlerOutcome::Ack)),
            false,
        )
        .await
        .expect_err("a group without ordering cannot serve a keyed handler");
    let message = refused.to_string();
    assert!(
        message.contains("ordering") && message.contains("\"none\"") && message.contains("\"key\""),
        "{message}"
    );
    assert!(e.runtime.counters(&h).is_none(), "nothing runs");
    assert_eq!(e.lag().await, 3, "nothing was consumed");

    // The group's own ordering, named or left unset, runs.
    for ordering in [Some(GroupOrdering::None), None] {
        let mut settings = e.settings();
        settings.ordering = ordering;
        let handler = FnHandler(|_: &Lease| HandlerOutcome::Ack);
        e.runtime
            .run(&h, settings, version(1, handler), false)
            .await
            .unwrap();
    }
    eventually("consumed", async || e.lag().await == 0).await;
    e.runtime.shutdown().await;
}

/// A handler that takes batches: records each call's size, then rejects
/// events whose sequence is a multiple of 4 and acks the rest.
#[derive(Debug, Default)]
struct Batched {
    calls: parking_lot::Mutex<Vec<usize>>,
}

#[async_trait]
impl Handler for Arc<Batched> {
    async fn handle(&self, lease: &Lease) -> HandlerOutcome {
        self.handle_batch(std::slice::from_ref(lease))
            .await
            .remove(0)
    }

    fn batches(&self) -> bool {
        true
    }

    async fn handle_batch(&self, leases: &[Lease]) -> Vec<HandlerOutcome> {
        self.calls.lock().push(leases.len());
        leases
            .iter()
            .map(|l| {
                if l.event.sequence % 4 == 0 {
                    HandlerOutcome::Reject {
                        reason: "a multiple of 4".into(),
                    }
                } else {
                    HandlerOutcome::Ack
                }
            })
            .collect()
    }
}

/// Runs a [`Batched`] handler `h` with one call at a time, `batch_size`
/// deliveries a call at most, `max_demand` leases held and `batch_wait`.
async fn run_batched(
    e: &Env,
    h: &HandlerName,
    (batch_size, max_demand): (usize, usize),
    batch_wait: Duration,
) -> Arc<Batched> {
    let handler = Arc::new(Batched::default());
    let mut settings = e.settings();
    (settings.batch_size, settings.max_demand) = (batch_size, max_demand);
    (settings.concurrency, settings.batch_wait) = (1, batch_wait);
    e.runtime
        .run(h, settings, version(1, Arc::clone(&handler)), false)
        .await
        .unwrap();
    handler
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_handler_gets_up_to_batch_size_leases_a_call_and_each_is_settled_by_its_outcome() {
    let e = env().await;
    e.append(40).await;
    let h = name("batched");
    let handler = run_batched(&e, &h, (8, 16), Duration::ZERO).await;
    eventually("all settled", async || e.lag().await == 0).await;
    eventually("counted", async || e.counters(&h).processed == 40).await;
    let calls = handler.calls.lock().clone();
    assert_eq!(calls.iter().sum::<usize>(), 40, "{calls:?}");
    assert!(calls.iter().all(|&n| (1..=8).contains(&n)), "{calls:?}");
    assert!(calls.contains(&8), "full batches: {calls:?}");
    // Two partitions of 20: sequences 4, 8, … 20 of each, 5 each.
    let c = e.counters(&h);
    assert_eq!((c.acked, c.rejected), (30, 10));
    let dead = e
        .backend
        .dead_letters(DeadLettersRequest {
            stream: e.stream.clone(),
            group: e.group.clone(),
            limit: 100,
            after: None,
        })
        .await
        .unwrap();
    assert_eq!(dead.dead_letters.len(), 10);
    assert!(
        dead.dead_letters
            .iter()
            .all(|d| d.reason == "a multiple of 4")
    );
    e.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_batch_waits_for_batch_wait_and_a_drain_hands_it_over() {
    let e = env().await;
    let h = name("batched");
    let handler = run_batched(&e, &h, (10, 10), Duration::from_secs(3600)).await;
    e.append(3).await;
    let inflight = async || {
        e.backend
            .lag(&e.stream, &e.group, &Partitions::All)
            .await
            .unwrap()
            .inflight
    };
    eventually("3 leased", async || inflight().await == 3).await;
    assert!(handler.calls.lock().is_empty(), "3 of 10 wait for more");
    e.append(7).await;
    eventually("one call of 10", async || {
        handler.calls.lock().as_slice() == [10]
    })
    .await;
    eventually("settled", async || e.lag().await == 0).await;
    // A short batch still waiting when the handler stops goes out in the
    // drain.
    e.append(2).await;
    eventually("2 leased", async || inflight().await == 2).await;
    assert_eq!(handler.calls.lock().as_slice(), [10]);
    e.runtime.stop(&h).await.unwrap();
    assert_eq!(handler.calls.lock().as_slice(), [10, 2]);
    assert_eq!(e.lag().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_takes_no_batches_gets_one_lease_a_call_whatever_batch_size() {
    let e = env().await;
    e.append(12).await;
    let h = name("single");
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let handler = FnHandler(move |_: &Lease| {
        counted.fetch_add(1, Ordering::SeqCst);
        HandlerOutcome::Ack
    });
    let mut settings = e.settings();
    (settings.batch_size, settings.max_demand) = (5, 10);
    e.runtime
        .run(&h, settings, version(1, handler), false)
        .await
        .unwrap();
    eventually("all acked", async || e.lag().await == 0).await;
    assert_eq!(calls.load(Ordering::SeqCst), 12);
    e.runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_failing_one_key_parks_it_and_a_release_resumes_it_in_order() {
    use crate::backend::quarantine::{Parked, ReleaseRequest, parked_keys, release};
    use crate::model::OnExhausted;
    use std::sync::atomic::AtomicBool;
    let e = env().await;
    let keyed = |key: &str| EventInput {
        key: Some(key.to_owned()),
        partition: Some(0),
        ..EventInput::default()
    };
    let inputs = ["bad", "good", "bad", "good", "good"].map(keyed).to_vec();
    e.backend.append(&e.stream, inputs).await.unwrap();
    let fixed = Arc::new(AtomicBool::new(false));
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let handler = {
        let (fixed, order) = (Arc::clone(&fixed), Arc::clone(&order));
        FnHandler(move |l: &Lease| {
            if l.event.key.as_deref() == Some("bad") && !fixed.load(Ordering::SeqCst) {
                return HandlerOutcome::Retry {
                    reason: "downstream 500".into(),
                    delay_ms: Some(0),
                };
            }
            order.lock().push(l.event.sequence);
            HandlerOutcome::Ack
        })
    };
    let h = name("parking");
    let mut settings = e.settings();
    // The runtime creates the group so: a failing key parks.
    settings.ordering = Some(GroupOrdering::Key);
    settings.on_exhausted = Some(OnExhausted::Quarantine);
    e.runtime
        .run(&h, settings, version(1, handler), false)
        .await
        .unwrap();
    let parked = async || parked_keys(&*e.backend, &e.stream, &e.group).await.unwrap();
    eventually("bad parked, good done", async || {
        parked().await.len() == 1 && order.lock().len() == 3
    })
    .await;
    // The frontier waits below the parked head.
    assert_eq!(e.lag().await, 5);
    let head = parked().await.remove(0);
    assert_eq!((head.key.as_deref(), head.sequence), (Some("bad"), 1));
    assert_eq!(head.reason, "max_attempts: downstream 500");
    assert_eq!(*order.lock(), vec![2, 4, 5], "the other key flowed");
    assert_eq!(
        e.backend
            .group_info(&e.stream, &e.group)
            .await
            .unwrap()
            .dead_letters,
        0
    );
    fixed.store(true, Ordering::SeqCst);
    let released = release(
        &*e.backend,
        ReleaseRequest {
            stream: e.stream.clone(),
            group: e.group.clone(),
            which: Parked::Keys(vec!["bad".into()]),
            skip_head: false,
            confirm: true,
        },
    )
    .await
    .unwrap();
    assert_eq!(released.released.len(), 1);
    eventually("resumed", async || e.lag().await == 0).await;
    assert_eq!(*order.lock(), vec![2, 4, 5, 1, 3], "bad resumed in order");
    e.runtime.shutdown().await;
}
