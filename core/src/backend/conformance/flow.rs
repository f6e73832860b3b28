//! Flow control (`docs/groups.md#flow`): under `flow.key_concurrency = N`
//! at most N deliveries of a key are out or handed out at once, in any
//! order, whichever consumers claim them; under `flow.key_rate` every
//! claim of a key takes a token of its bucket, and one that finds none
//! waits for its slot. Every backend keeps both.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::ordering::{append_keys, held, interleaved_keys, pairs};
use super::*;
use crate::backend::{Error, Redrive, Replay, ResetRequest};
use crate::model::{Flow, GroupOrdering};

fn limit(n: u32) -> Flow {
    Flow {
        key_concurrency: Some(n),
        ..Flow::default()
    }
}

/// Group `g` on `stream`, unordered, with `key_concurrency = n`.
async fn limited(h: &Harness, stream: &StreamName, n: u32, max_attempts: u32) -> GroupName {
    let mut spec = GroupSpec::new(gn("g"));
    spec.flow = limit(n);
    spec.max_attempts = max_attempts;
    let group = h
        .b()
        .create_group(stream, spec)
        .await
        .expect("create group");
    assert_eq!(group.flow, limit(n));
    group.name
}

pub async fn key_concurrency_needs_no_ordering_and_shows_on_the_group(h: &Harness) {
    let s = h.stream("s", 1).await;
    for (ordering, n) in [
        (GroupOrdering::Key, 2),
        (GroupOrdering::Partition, 1),
        (GroupOrdering::None, 0),
    ] {
        let mut spec = GroupSpec::new(gn("bad"));
        spec.ordering = ordering;
        spec.flow = limit(n);
        match h.b().create_group(&s, spec).await {
            Err(Error::Invalid(e)) => assert_eq!(e.field, "flow.key_concurrency", "{e}"),
            other => panic!("{ordering:?} with key_concurrency {n} was not refused: {other:?}"),
        }
    }
    assert!(h.b().list_groups(&s).await.unwrap().is_empty());
    let g = limited(h, &s, 3, 5).await;
    let info = h.b().group_info(&s, &g).await.unwrap();
    assert_eq!(info.flow, limit(3));
    let listed = h.b().list_groups(&s).await.unwrap();
    assert_eq!(listed[0].flow, limit(3));
    let plain = h.group(&s, "plain").await;
    let info = h.b().group_info(&s, &plain).await.unwrap();
    assert!(info.flow.is_off());
}

pub async fn key_concurrency_keeps_at_most_n_of_a_key_out(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = limited(h, &s, 2, 5).await;
    append_keys(h, &s, &["a", "a", "a", "b", "", "a", "b", ""]).await;
    let first = h.fetch(&s, &g, 10).await;
    assert_eq!(
        held(&first),
        pairs(&[("a", 1), ("a", 2), ("b", 4), ("", 5), ("b", 7), ("", 8)]),
        "two of a, both of b, every keyless event"
    );
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "a is full");
    // An ack frees a slot for a's lowest waiting event.
    h.ack(&first[0]).await.unwrap();
    let next = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&next), pairs(&[("a", 3)]));
    // A retry waiting for its delay keeps its slot.
    h.nack(&first[1], "later", Some(1_000)).await.unwrap();
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "a2 waits in its slot");
    h.clock.advance(1_000);
    let again = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&again), pairs(&[("a", 2)]));
    assert_eq!(again[0].attempt, 2);
    // An expired lease is handed out again in its own slot.
    h.clock.advance(30_001);
    let expired = h.fetch(&s, &g, 10).await;
    let mut got = held(&expired);
    got.sort();
    assert_eq!(
        got,
        pairs(&[("", 5), ("", 8), ("a", 2), ("a", 3), ("b", 4), ("b", 7)]),
        "every lease out expired; a6 still waits"
    );
    for lease in &expired {
        h.ack(lease).await.unwrap();
    }
    let last = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&last), pairs(&[("a", 6)]));
    h.ack(&last[0]).await.unwrap();
    let lag = h.lag(&s, &g).await;
    assert_eq!((lag.lag, lag.inflight, lag.pending), (0, 0, 0));
}

pub async fn key_concurrency_dead_letters_free_a_slot(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = limited(h, &s, 1, 1).await;
    append_keys(h, &s, &["a", "a", "a"]).await;
    let first = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&first), pairs(&[("a", 1)]));
    // Out of attempts: dead-lettered (a limit never quarantines).
    h.nack(&first[0], "boom", None).await.unwrap();
    let second = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&second), pairs(&[("a", 2)]));
    h.reject(&second[0], "bad").await.unwrap();
    let third = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&third), pairs(&[("a", 3)]));
    // The poison guard frees the slot too.
    h.clock.advance(30_001);
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    let info = h.b().group_info(&s, &g).await.unwrap();
    assert_eq!((info.dead_letters, info.inflight), (3, 0));
}

pub async fn key_concurrency_replay_and_redrive_wait_for_a_free_slot(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = limited(h, &s, 2, 5).await;
    append_keys(h, &s, &["a", "a", "a", "a"]).await;
    let first = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&first), pairs(&[("a", 1), ("a", 2)]));
    h.ack(&first[0]).await.unwrap();
    let second = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&second), pairs(&[("a", 3)]));
    // Two out (a2, a3): the replayed a1 waits, then goes before a4.
    let replayed = h
        .b()
        .replay(&s, &g, Replay::EventIds(vec![first[0].event.id.clone()]))
        .await
        .unwrap();
    assert_eq!(replayed, 1);
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "both slots are out");
    h.reject(&first[1], "bad").await.unwrap();
    let third = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&third), pairs(&[("a", 1)]), "the lowest open one");
    // The redriven a2 waits for a slot as well.
    let redriven = h
        .b()
        .redrive(&s, &g, Redrive::Events(vec![first[1].event.id.clone()]))
        .await
        .unwrap();
    assert_eq!(redriven, 1);
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "a1 and a3 are out");
    h.ack(&second[0]).await.unwrap();
    let fourth = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&fourth), pairs(&[("a", 2)]));
    h.ack(&third[0]).await.unwrap();
    let last = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&last), pairs(&[("a", 4)]));
}

pub async fn competing_consumers_never_hold_more_than_n_of_a_key(h: &Harness) {
    const N: usize = 2;
    const KEYS: usize = 6;
    const PER_KEY: usize = 10;
    let s = h.stream("s", 2).await;
    let g = limited(h, &s, N as u32, 5).await;
    h.append_inputs(&s, interleaved_keys(KEYS, PER_KEY)).await;
    let out = Arc::new(parking_lot::Mutex::new(
        BTreeMap::<(u32, String), usize>::new(),
    ));
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut consumers = Vec::new();
    for c in 0..3 {
        let (backend, s, g) = (Arc::clone(&h.backend), s.clone(), g.clone());
        let (out, done) = (Arc::clone(&out), Arc::clone(&done));
        consumers.push(tokio::spawn(async move {
            use std::sync::atomic::Ordering::SeqCst;
            for _ in 0..100_000 {
                if done.load(SeqCst) == KEYS * PER_KEY {
                    return;
                }
                let req = FetchRequest {
                    stream: s.clone(),
                    group: g.clone(),
                    limit: 5,
                    consumer_id: cid(&format!("c{c}")),
                    lease_ms: 60_000,
                    partitions: Partitions::All,
                };
                let leases = backend.fetch(req).await.expect("fetch");
                for lease in &leases {
                    let key = (lease.event.partition, lease.event.key.clone().unwrap());
                    let mut out = out.lock();
                    let n = out.entry(key.clone()).or_default();
                    *n += 1;
                    assert!(*n <= N, "{n} of {key:?} out at once");
                }
                tokio::task::yield_now().await;
                for lease in &leases {
                    let key = (lease.event.partition, lease.event.key.clone().unwrap());
                    // Counted down before the ack: once acked, the next of
                    // the key may go out to another consumer.
                    *out.lock().get_mut(&key).expect("counted") -= 1;
                    backend
                        .ack(&lease.stream, &lease.group, lease.target())
                        .await
                        .expect("ack");
                    done.fetch_add(1, SeqCst);
                }
            }
            panic!("consumer c{c} gave up before every event was processed");
        }));
    }
    for consumer in consumers {
        consumer.await.expect("consumer");
    }
    // Whether N of a key are ever out together here depends on how the
    // consumers interleave; `key_concurrency_keeps_at_most_n_of_a_key_out`
    // shows the limit reached, deterministically.
    let lag = h.lag(&s, &g).await;
    assert_eq!((lag.lag, lag.inflight), (0, 0));
}

/// A reset of every partition to the beginning, changing the flow.
fn reset_flow(s: &StreamName, g: &GroupName, flow: Flow) -> ResetRequest {
    ResetRequest {
        flow: Some(flow),
        ..ResetRequest::to_the_beginning(s, g)
    }
}

pub async fn a_reset_of_every_partition_changes_the_flow(h: &Harness) {
    let s = h.stream("s", 2).await;
    let g = limited(h, &s, 2, 5).await;
    append_keys(h, &s, &["a", "a", "a"]).await;
    assert_eq!(h.fetch(&s, &g, 10).await.len(), 2);

    // Some partitions only: refused, nothing changes.
    let mut some = reset_flow(&s, &g, limit(1));
    some.partitions = Partitions::Only(vec![0]);
    match h.b().reset(some).await {
        Err(Error::Invalid(e)) => assert_eq!(e.field, "flow", "{e}"),
        other => panic!("a partial reset changed the flow: {other:?}"),
    }
    // An ordering that the kept flow does not fit: refused, nothing changes.
    let keyed = ResetRequest {
        ordering: Some(GroupOrdering::Key),
        ..ResetRequest::to_the_beginning(&s, &g)
    };
    match h.b().reset(keyed).await {
        Err(Error::Invalid(e)) => assert_eq!(e.field, "flow.key_concurrency", "{e}"),
        other => panic!("key ordering with key_concurrency was not refused: {other:?}"),
    }
    let info = h.b().group_info(&s, &g).await.unwrap();
    assert_eq!((info.flow, info.ordering), (limit(2), GroupOrdering::None));
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "nothing was reset");

    h.b().reset(reset_flow(&s, &g, limit(1))).await.unwrap();
    assert_eq!(h.b().group_info(&s, &g).await.unwrap().flow, limit(1));
    let one = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&one), pairs(&[("a", 1)]));

    // Off again: every event goes out at once.
    h.b()
        .reset(reset_flow(&s, &g, Flow::default()))
        .await
        .unwrap();
    assert!(h.b().list_groups(&s).await.unwrap()[0].flow.is_off());
    assert_eq!(h.fetch(&s, &g, 10).await.len(), 3);
    assert_eq!(h.ack(&one[0]).await.unwrap_err().code(), "stale_lease");
}

fn rate(per_second: f64, burst: u32) -> Flow {
    Flow::paced(per_second, burst)
}

/// Group `g` on `stream` with `flow`, `ordering` and up to five attempts.
async fn flowing(
    h: &Harness,
    stream: &StreamName,
    ordering: GroupOrdering,
    flow: Flow,
) -> GroupName {
    let mut spec = GroupSpec::new(gn("g"));
    spec.flow = flow;
    spec.ordering = ordering;
    spec.max_attempts = 5;
    let group = h
        .b()
        .create_group(stream, spec)
        .await
        .expect("create group");
    assert_eq!(group.flow, flow);
    group.name
}

pub async fn key_rate_is_checked_and_shows_on_the_group(h: &Harness) {
    let s = h.stream("s", 1).await;
    for (flow, field) in [
        (rate(0.0, 1), "flow.key_rate.per_second"),
        (rate(1.0, 0), "flow.key_rate.burst"),
    ] {
        let mut spec = GroupSpec::new(gn("bad"));
        spec.flow = flow;
        match h.b().create_group(&s, spec).await {
            Err(Error::Invalid(e)) => assert_eq!(e.field, field, "{e}"),
            other => panic!("{flow:?} was not refused: {other:?}"),
        }
    }
    assert!(h.b().list_groups(&s).await.unwrap().is_empty());
    let both = Flow {
        key_concurrency: Some(2),
        ..rate(0.5, 3)
    };
    let g = flowing(h, &s, GroupOrdering::None, both).await;
    assert_eq!(h.b().group_info(&s, &g).await.unwrap().flow, both);
    assert_eq!(h.b().list_groups(&s).await.unwrap()[0].flow, both);
    let s2 = h.stream("s2", 1).await;
    let keyed = flowing(h, &s2, GroupOrdering::Key, rate(2.0, 1)).await;
    let info = h.b().group_info(&s2, &keyed).await.unwrap();
    assert_eq!(
        (info.ordering, info.flow),
        (GroupOrdering::Key, rate(2.0, 1))
    );
}

pub async fn key_rate_lets_a_burst_through_then_one_claim_an_interval(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = flowing(h, &s, GroupOrdering::None, rate(1.0, 2)).await;
    append_keys(h, &s, &["a", "a", "a", "a", "b", ""]).await;
    let first = h.fetch(&s, &g, 10).await;
    assert_eq!(
        held(&first),
        pairs(&[("a", 1), ("a", 2), ("b", 5), ("", 6)]),
        "a's burst of two, b, the keyless"
    );
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "a has no token left");
    let lag = h.lag(&s, &g).await;
    assert_eq!(
        (lag.inflight, lag.waiting_retry, lag.pending),
        (4, 2, 0),
        "a3 and a4 wait for their slots"
    );
    h.clock.advance(999);
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "a3's slot is at 1 s");
    h.clock.advance(1);
    let lag = h.lag(&s, &g).await;
    assert_eq!(
        (lag.inflight, lag.waiting_retry, lag.pending),
        (4, 1, 1),
        "a3 is due: never handed out, so pending; a4 still waits"
    );
    let second = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&second), pairs(&[("a", 3)]));
    assert_eq!(second[0].attempt, 1, "waiting for a token is no attempt");
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    h.clock.advance(1_000);
    let third = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&third), pairs(&[("a", 4)]));
    // A quiet spell fills the bucket again, to its burst and no more.
    h.clock.advance(10_000);
    for lease in first.iter().chain(&second).chain(&third) {
        h.ack(lease).await.unwrap();
    }
    append_keys(h, &s, &["a", "a", "a"]).await;
    let later = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&later), pairs(&[("a", 7), ("a", 8)]));
    h.clock.advance(1_000);
    let last = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&last), pairs(&[("a", 9)]));
}

pub async fn key_rate_paces_retries_and_counts_expired_leases(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = flowing(h, &s, GroupOrdering::None, rate(1.0, 1)).await;
    append_keys(h, &s, &["a", "a"]).await;
    let first = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&first), pairs(&[("a", 1)]), "a2 waits for 1 s");
    // A retry due at once still needs a token: after a2's slot.
    h.nack(&first[0], "again", Some(0)).await.unwrap();
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    h.clock.advance(1_000);
    let second = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&second), pairs(&[("a", 2)]));
    h.clock.advance(1_000);
    let third = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&third), pairs(&[("a", 1)]));
    assert_eq!(third[0].attempt, 2);
    // Both leases expire: they go out again at once, each in its own
    // slot, but they count: the key's next event waits for two tokens.
    h.clock.advance(30_000);
    append_keys(h, &s, &["a"]).await;
    let mut again = held(&h.fetch(&s, &g, 10).await);
    again.sort();
    assert_eq!(again, pairs(&[("a", 1), ("a", 2)]), "a3 is paced");
    h.clock.advance(1_000);
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "a3's slot is at 2 s");
    h.clock.advance(1_000);
    let last = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&last), pairs(&[("a", 3)]));
    assert_eq!(h.ack(&second[0]).await.unwrap_err().code(), "stale_lease");
}

pub async fn key_rate_paces_the_heads_of_an_ordering_and_of_key_concurrency(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = flowing(h, &s, GroupOrdering::Key, rate(1.0, 1)).await;
    append_keys(h, &s, &["a", "a", "b"]).await;
    let first = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&first), pairs(&[("a", 1), ("b", 3)]));
    // a2 is a's head once a1 is acked, and waits for a's next token.
    h.ack(&first[0]).await.unwrap();
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    h.clock.advance(1_000);
    let second = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&second), pairs(&[("a", 2)]));

    let s = h.stream("s2", 1).await;
    let both = Flow {
        key_concurrency: Some(2),
        ..rate(1.0, 1)
    };
    let g = flowing(h, &s, GroupOrdering::None, both).await;
    append_keys(h, &s, &["a", "a", "a", "a"]).await;
    let first = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&first), pairs(&[("a", 1)]), "a2 is paced, in a slot");
    h.clock.advance(1_000);
    let second = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&second), pairs(&[("a", 2)]));
    h.clock.advance(1_000);
    assert!(
        h.fetch(&s, &g, 10).await.is_empty(),
        "a token, but both slots are out"
    );
    h.ack(&first[0]).await.unwrap();
    let third = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&third), pairs(&[("a", 3)]));
}

pub async fn competing_consumers_share_one_bucket_per_key(h: &Harness) {
    const KEYS: usize = 4;
    const PER_KEY: usize = 6;
    let s = h.stream("s", 2).await;
    let g = flowing(h, &s, GroupOrdering::None, rate(1.0, 2)).await;
    h.append_inputs(&s, interleaved_keys(KEYS, PER_KEY)).await;
    // At each instant of the frozen clock, consumers race; in all, each
    // key gets its burst at once, then one claim a second.
    let mut got = BTreeMap::<String, usize>::new();
    for round in 0..PER_KEY - 1 {
        let mut racers = Vec::new();
        for c in 0..3 {
            let (backend, req) = (Arc::clone(&h.backend), h.fetch_req(&s, &g, 3));
            let req = FetchRequest {
                consumer_id: cid(&format!("c{c}")),
                ..req
            };
            racers.push(tokio::spawn(async move { backend.fetch(req).await }));
        }
        let mut now = BTreeMap::<String, usize>::new();
        for racer in racers {
            for lease in racer.await.expect("consumer").expect("fetch") {
                *now.entry(lease.event.key.clone().unwrap()).or_default() += 1;
                h.ack(&lease).await.unwrap();
            }
        }
        // Whatever a round's racers left, the next fetch takes once due.
        for lease in h.fetch(&s, &g, 20).await {
            *now.entry(lease.event.key.clone().unwrap()).or_default() += 1;
            h.ack(&lease).await.unwrap();
        }
        let want = if round == 0 { 2 } else { 1 };
        for (key, n) in &now {
            assert_eq!(*n, want, "round {round}: {n} claims of {key}");
        }
        assert_eq!(now.len(), KEYS, "round {round}: every key had a token");
        for (key, n) in now {
            *got.entry(key).or_default() += n;
        }
        h.clock.advance(1_000);
    }
    assert!(got.values().all(|n| *n == PER_KEY));
    let lag = h.lag(&s, &g).await;
    assert_eq!((lag.lag, lag.inflight, lag.waiting_retry), (0, 0, 0));
}

pub async fn key_rate_keeps_sequence_order_past_paced_deliveries(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = flowing(h, &s, GroupOrdering::None, rate(1.0, 1)).await;
    append_keys(h, &s, &["a", "a", "b"]).await;
    let first = h.fetch(&s, &g, 10).await;
    assert_eq!(
        held(&first),
        pairs(&[("a", 1), ("b", 3)]),
        "a2 paced to 1 s"
    );
    // a1 retries at once but its key's next slot is after a2's; b3 in 1 s.
    h.nack(&first[0], "again", Some(0)).await.unwrap();
    h.nack(&first[1], "later", Some(1_000)).await.unwrap();
    append_keys(h, &s, &["c"]).await;
    h.clock.advance(1_000);
    // In sequence order: a1 finds no token and is paced, a2's slot has
    // come, b3 has a token; c4, later than all of them, waits its turn.
    let second = h.fetch(&s, &g, 2).await;
    assert_eq!(held(&second), pairs(&[("a", 2), ("b", 3)]));
    let third = h.fetch(&s, &g, 2).await;
    assert_eq!(held(&third), pairs(&[("c", 4)]), "a1 waits for 2 s");
    h.clock.advance(1_000);
    let last = h.fetch(&s, &g, 2).await;
    assert_eq!(held(&last), pairs(&[("a", 1)]));
    assert_eq!(last[0].attempt, 2);
}
