//! Conformance checks: Concurrent callers and wake-ups.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::sync::Barrier;
use tokio::task::JoinHandle;

use super::{Harness, cid, code, gn};
use crate::backend::{
    Backend, FetchRequest, Partitions, Redrive, Replay, ResetRequest, Result, Wakeup,
};
use crate::model::{EventId, EventInput, GroupName, Lease, StreamName, Timestamp};

// ---------------------------------------------------------------------------
// private helpers

fn fetch_req(s: &StreamName, g: &GroupName, limit: u32, consumer: &str) -> FetchRequest {
    FetchRequest {
        stream: s.clone(),
        group: g.clone(),
        limit,
        consumer_id: cid(consumer),
        lease_ms: 30_000,
        partitions: Partitions::All,
    }
}

async fn ack_on(b: &dyn Backend, lease: &Lease) -> Result<()> {
    b.ack(&lease.stream, &lease.group, lease.target()).await
}

/// Starts `tasks` concurrent single fetches (released together by a barrier)
/// and returns every lease they got.
async fn concurrent_fetches(
    h: &Harness,
    s: &StreamName,
    g: &GroupName,
    tasks: usize,
    limit: u32,
) -> Vec<Lease> {
    let barrier = Arc::new(Barrier::new(tasks));
    let handles: Vec<JoinHandle<Vec<Lease>>> = (0..tasks)
        .map(|i| {
            let b = h.backend.clone();
            let barrier = barrier.clone();
            let req = fetch_req(s, g, limit, &format!("c{i}"));
            tokio::spawn(async move {
                barrier.wait().await;
                b.fetch(req).await.expect("fetch")
            })
        })
        .collect();
    let mut out = Vec::new();
    for handle in handles {
        out.extend(handle.await.expect("fetch task"));
    }
    out
}

fn sorted_ids(leases: &[Lease]) -> Vec<EventId> {
    let mut ids: Vec<EventId> = leases.iter().map(|l| l.event_id.clone()).collect();
    ids.sort();
    ids
}

/// Waits (bounded in real time, only as a safety net) for a wake-up.
async fn woke(w: &mut Wakeup, what: &str) {
    tokio::time::timeout(Duration::from_secs(5), w.changed())
        .await
        .unwrap_or_else(|_| panic!("{what} did not wake the subscriber"));
}

// ---------------------------------------------------------------------------
// concurrent callers

pub async fn concurrent_fetchers_never_share_an_event(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    let events = h.append_n(&s, 50).await;
    let leases = concurrent_fetches(h, &s, &g, 10, 10).await;
    assert_eq!(leases.len(), 50, "10 fetches of 10 claim all 50 events");
    let mut appended: Vec<EventId> = events.iter().map(|e| e.id.clone()).collect();
    appended.sort();
    assert_eq!(
        sorted_ids(&leases),
        appended,
        "each event handed out exactly once"
    );
    let lease_ids: BTreeSet<_> = leases.iter().map(|l| l.lease_id.clone()).collect();
    assert_eq!(lease_ids.len(), 50);
    assert!(leases.iter().all(|l| l.attempt == 1));
    assert!(h.fetch(&s, &g, 10).await.is_empty());
}

pub async fn concurrent_fetch_rounds_never_duplicate(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    for round in 0..5 {
        let events = h.append_n(&s, 20).await;
        let mut leases = concurrent_fetches(h, &s, &g, 8, 3).await;
        let ids = sorted_ids(&leases);
        let distinct: BTreeSet<_> = ids.iter().cloned().collect();
        assert_eq!(
            distinct.len(),
            ids.len(),
            "round {round}: an event was handed out twice"
        );
        // anything the racing fetches left is picked up afterwards
        leases.extend(h.fetch(&s, &g, 100).await);
        let mut appended: Vec<EventId> = events.iter().map(|e| e.id.clone()).collect();
        appended.sort();
        assert_eq!(sorted_ids(&leases), appended, "round {round}");
        for l in &leases {
            h.ack(l).await.expect("ack");
        }
        assert_eq!(h.lag(&s, &g).await.lag, 0, "round {round}");
    }
}

pub async fn parallel_acks_never_lose_a_frontier_step(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    h.append_n(&s, 500).await;
    let mut leases = h.fetch(&s, &g, 500).await;
    assert_eq!(leases.len(), 500);
    leases.shuffle(&mut StdRng::seed_from_u64(7));
    let tasks = 10;
    let barrier = Arc::new(Barrier::new(tasks));
    let handles: Vec<JoinHandle<()>> = (0..tasks)
        .map(|t| {
            let b = h.backend.clone();
            let barrier = barrier.clone();
            let mine: Vec<Lease> = leases.iter().skip(t).step_by(tasks).cloned().collect();
            tokio::spawn(async move {
                barrier.wait().await;
                for l in &mine {
                    ack_on(&*b, l).await.expect("ack");
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.expect("ack task");
    }
    let lag = h.lag(&s, &g).await;
    assert_eq!(lag.partitions[&0].frontier, 500);
    assert_eq!(lag.lag, 0);
    assert_eq!((lag.pending, lag.inflight), (0, 0));
}

/// 1000 events over 4 partitions (fewer on a slow stand-in:
/// [`Harness::scaled`]), 8 consumers fetching (random limits) and
/// acking until the group is drained; with `nack_rate` > 0 some first
/// attempts are nacked (immediately due) instead. Returns the acked ids and
/// the appended ids (both sorted) and how many nacks were made.
async fn drain_with_competing_consumers(
    h: &Harness,
    stream: &str,
    nack_rate: f64,
) -> (Vec<EventId>, Vec<EventId>, u64) {
    let s = h.stream(stream, 4).await;
    let g = h.group(&s, "g").await;
    let mut appended = Vec::new();
    for p in 0..4 {
        let n = h.scaled(250);
        appended.extend(h.append_to(&s, p, n).await.into_iter().map(|e| e.id));
    }
    let handles: Vec<JoinHandle<(Vec<EventId>, u64)>> = (0..8u64)
        .map(|t| {
            let b = h.backend.clone();
            let (s, g) = (s.clone(), g.clone());
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(t);
                let (mut acked, mut nacks) = (Vec::new(), 0);
                loop {
                    let limit = rng.random_range(1..20);
                    let leases = b
                        .fetch(fetch_req(&s, &g, limit, &format!("c{t}")))
                        .await
                        .expect("fetch");
                    if leases.is_empty() {
                        break;
                    }
                    for l in leases {
                        if l.attempt == 1 && rng.random_bool(nack_rate) {
                            b.nack(&s, &g, l.target(), None, None).await.expect("nack");
                            nacks += 1;
                        } else {
                            ack_on(&*b, &l).await.expect("ack");
                            acked.push(l.event_id);
                        }
                    }
                }
                (acked, nacks)
            })
        })
        .collect();
    let (mut acked, mut nacks) = (Vec::new(), 0);
    for handle in handles {
        let (ids, n) = handle.await.expect("consumer task");
        acked.extend(ids);
        nacks += n;
    }
    let lag = h.lag(&s, &g).await;
    assert_eq!((lag.lag, lag.pending, lag.inflight), (0, 0, 0), "{stream}");
    let info = h.b().group_info(&s, &g).await.expect("group info");
    assert_eq!(info.dead_letters, 0, "{stream}");
    acked.sort();
    appended.sort();
    (acked, appended, nacks)
}

pub async fn competing_consumers_ack_every_event_exactly_once(h: &Harness) {
    let (acked, appended, nacks) = drain_with_competing_consumers(h, "plain", 0.0).await;
    assert_eq!(nacks, 0);
    assert_eq!(acked.len(), 4 * h.scaled(250));
    assert_eq!(acked, appended, "every event acked exactly once");

    let (acked, appended, nacks) = drain_with_competing_consumers(h, "nacking", 0.1).await;
    assert!(nacks > 0, "the scenario must nack some deliveries");
    assert_eq!(acked.len(), 4 * h.scaled(250));
    assert_eq!(
        acked, appended,
        "every event acked exactly once despite nacks"
    );
}

pub async fn concurrent_appends_keep_sequences_contiguous(h: &Harness) {
    let s = h.stream("s", 2).await;
    let tasks = 10u32;
    let per_task = h.scaled(100) as u32;
    let barrier = Arc::new(Barrier::new(tasks as usize));
    let handles: Vec<JoinHandle<Vec<(u32, u64, EventId)>>> = (0..tasks)
        .map(|t| {
            let b = h.backend.clone();
            let (s, barrier) = (s.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let mut out = Vec::new();
                for i in 0..per_task {
                    let input = EventInput {
                        partition: Some((t + i) % 2),
                        ..EventInput::default()
                    };
                    let e = b.append_one(&s, input).await.expect("append").event;
                    out.push((e.partition, e.sequence, e.id.clone()));
                }
                out
            })
        })
        .collect();
    let mut per_partition: BTreeMap<u32, Vec<(u64, EventId)>> = BTreeMap::new();
    for handle in handles {
        for (p, seq, id) in handle.await.expect("append task") {
            per_partition.entry(p).or_default().push((seq, id));
        }
    }
    let stream = h.b().get_stream(&s).await.expect("get stream");
    for p in 0..2u32 {
        let mut got = per_partition.remove(&p).unwrap_or_default();
        got.sort();
        let half = 5 * per_task as usize;
        assert_eq!(got.len(), half, "partition {p}");
        let seqs: Vec<u64> = got.iter().map(|(seq, _)| *seq).collect();
        assert_eq!(
            seqs,
            (1..=half as u64).collect::<Vec<u64>>(),
            "partition {p}: gaps or duplicates"
        );
        assert_eq!(stream.high_watermarks[p as usize], half as u64);
        let read = h
            .b()
            .read(crate::backend::ReadRequest {
                stream: s.clone(),
                partition: p,
                after: 0,
                limit: 1000,
            })
            .await
            .expect("read");
        let read: Vec<(u64, EventId)> = read.into_iter().map(|e| (e.sequence, e.id)).collect();
        assert_eq!(
            read, got,
            "partition {p}: the log holds what was acknowledged"
        );
    }
}

// ---------------------------------------------------------------------------
// wake-ups and due times

pub async fn append_wakes_subscribers(h: &Harness) {
    let s = h.stream("s", 1).await;
    let mut w = h.backend.subscribe(&s);
    w.mark_seen();
    // a waiter in another task is woken by the append
    let waiter = tokio::spawn(async move {
        woke(&mut w, "append (other task)").await;
        w
    });
    h.append_n(&s, 1).await;
    let mut w = waiter.await.expect("waiter");
    w.mark_seen();
    h.append_n(&s, 1).await;
    woke(&mut w, "a second append").await;

    // a subscriber created before its stream exists
    let later = super::sn("later");
    let mut early = h.backend.subscribe(&later);
    h.stream("later", 1).await;
    early.mark_seen();
    h.append_n(&later, 1).await;
    woke(&mut early, "append to a stream created after subscribing").await;
}

pub async fn immediate_nack_wakes_subscribers(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    h.append_n(&s, 1).await;
    let mut w = h.backend.subscribe(&s);

    let lease = h.fetch(&s, &g, 1).await.remove(0);
    w.mark_seen();
    h.nack(&lease, "retry", None).await.expect("nack");
    woke(&mut w, "an immediate nack").await;

    let lease = h.fetch(&s, &g, 1).await.remove(0);
    h.ack(&lease).await.expect("ack");
    w.mark_seen();
    let replay = Replay::FromSequence {
        after: 0,
        partitions: Partitions::All,
    };
    assert_eq!(h.b().replay(&s, &g, replay).await.expect("replay"), 1);
    woke(&mut w, "a replay").await;

    let lease = h.fetch(&s, &g, 1).await.remove(0);
    h.reject(&lease, "bad").await.expect("reject");
    w.mark_seen();
    assert_eq!(
        h.b().redrive(&s, &g, Redrive::All).await.expect("redrive"),
        1
    );
    woke(&mut w, "a redrive").await;

    w.mark_seen();
    h.b()
        .reset(ResetRequest::to_the_beginning(&s, &g))
        .await
        .expect("reset");
    woke(&mut w, "a reset").await;
}

pub async fn next_due_reports_expiry_and_retry_times(h: &Harness) {
    let s = h.stream("s", 2).await;
    let g = h.group(&s, "g").await;
    let due = |p: Partitions| {
        let (s, g) = (s.clone(), g.clone());
        async move { h.b().next_due(&s, &g, &p).await.expect("next_due") }
    };
    let at = |ms: u64| -> Timestamp { super::START.add_ms(ms) };
    assert_eq!(due(Partitions::All).await, None, "nothing to wait for");
    h.append_to(&s, 0, 2).await;
    assert_eq!(due(Partitions::All).await, Some(h.now()), "claimable now");
    assert_eq!(
        due(Partitions::Only(vec![1])).await,
        None,
        "partition 1 is empty"
    );
    assert_eq!(due(Partitions::Only(vec![])).await, None);
    let leases = h.fetch_as(&s, &g, 10, "c1", 1000).await;
    assert_eq!(leases.len(), 2);
    assert_eq!(
        due(Partitions::All).await,
        Some(at(1000)),
        "the lease expiry"
    );
    h.nack(&leases[0], "later", Some(300)).await.expect("nack");
    assert_eq!(
        due(Partitions::All).await,
        Some(at(300)),
        "the retry due time"
    );
    h.clock.advance(301);
    assert_eq!(
        due(Partitions::All).await,
        Some(at(301)),
        "the retry is due: now"
    );
    let retried = h.fetch_as(&s, &g, 10, "c1", 1000).await;
    assert_eq!(retried.len(), 1);
    assert_eq!(
        due(Partitions::All).await,
        Some(at(1000)),
        "earliest of two expiries"
    );
    h.clock.advance(699);
    assert_eq!(
        due(Partitions::All).await,
        Some(at(1000)),
        "expired lease: claimable now"
    );
    h.ack(&leases[1])
        .await
        .expect("expiry alone does not fence");
    assert_eq!(due(Partitions::All).await, Some(at(1301)));
    h.ack(&retried[0]).await.expect("ack");
    assert_eq!(due(Partitions::All).await, None, "everything settled");
    let r = h.b().next_due(&s, &gn("nope"), &Partitions::All).await;
    assert_eq!(code(r), "group_not_found");
}

/// Settles of one lease racing each other — single acks and batch settles
/// holding it, released together — let exactly one win; every other one
/// answers `stale_lease` (docs/groups.md#leases-and-fencing), under every
/// ordering.
pub async fn racing_settles_of_one_lease_let_exactly_one_win(h: &Harness) {
    use crate::model::{GroupOrdering, GroupSpec, Settlement};
    for ordering in [GroupOrdering::None, GroupOrdering::Key] {
        let s = h.stream(&format!("race-{}", ordering.as_str()), 1).await;
        let mut spec = GroupSpec::new(gn("g"));
        spec.ordering = ordering;
        let g = h.group_with(&s, spec).await;
        const ROUNDS: usize = 6;
        let inputs = (0..ROUNDS)
            .map(|i| EventInput {
                partition: Some(0),
                key: Some(format!("k{i}")),
                ..EventInput::default()
            })
            .collect();
        h.append_inputs(&s, inputs).await;
        let leases = h.fetch(&s, &g, ROUNDS as u32).await;
        assert_eq!(leases.len(), ROUNDS);
        for (round, lease) in leases.iter().enumerate() {
            let racers = 2 + round % 3;
            let barrier = Arc::new(Barrier::new(racers));
            let tasks: Vec<JoinHandle<Result<()>>> = (0..racers)
                .map(|i| {
                    let (b, barrier, lease) =
                        (Arc::clone(&h.backend), Arc::clone(&barrier), lease.clone());
                    tokio::spawn(async move {
                        barrier.wait().await;
                        if i % 2 == 0 {
                            ack_on(&*b, &lease).await
                        } else {
                            let item = Settlement::ack(lease.target());
                            let results = b.settle(&lease.stream, &lease.group, vec![item]);
                            results.await?.pop().expect("one result")
                        }
                    })
                })
                .collect();
            let mut won = 0;
            let mut stale = 0;
            for task in tasks {
                match task.await.expect("racer") {
                    Ok(()) => won += 1,
                    Err(e) if e.code() == "stale_lease" => stale += 1,
                    Err(e) => panic!("{ordering:?} round {round}: {e}"),
                }
            }
            assert_eq!(
                (won, stale),
                (1, racers - 1),
                "{ordering:?} round {round}: {racers} racing acks of one lease"
            );
        }
        assert_eq!(h.lag(&s, &g).await.lag, 0, "{ordering:?}");
    }
}
