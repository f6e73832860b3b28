//! Group ordering (`docs/groups.md#ordering`): under `key` one delivery of
//! a key is out at a time, in sequence order; under `partition` one per
//! partition. Every backend keeps both.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::*;
use crate::backend::{Error, Redrive, Replay, ResetRequest};
use crate::model::{GroupOrdering, Lease};

/// Creates group `name` with `ordering` (and `max_attempts`) on `stream`.
/// Every backend keeps every ordering.
async fn ordered(
    h: &Harness,
    stream: &StreamName,
    name: &str,
    ordering: GroupOrdering,
    max_attempts: u32,
) -> GroupName {
    let mut spec = GroupSpec::new(gn(name));
    spec.ordering = ordering;
    spec.max_attempts = max_attempts;
    let group = h
        .b()
        .create_group(stream, spec)
        .await
        .expect("an ordered group");
    assert_eq!(group.ordering, ordering);
    group.name
}

/// An input with `key` (none: `""`) on partition 0.
fn keyed(key: &str) -> EventInput {
    EventInput {
        partition: Some(0),
        key: (!key.is_empty()).then(|| key.to_owned()),
        ..EventInput::default()
    }
}

/// Appends events with these keys to partition 0 of `stream`.
pub(super) async fn append_keys(h: &Harness, stream: &StreamName, keys: &[&str]) -> Vec<Event> {
    h.append_inputs(stream, keys.iter().map(|k| keyed(k)).collect())
        .await
}

/// The leases as (key, sequence), keyless as `""`.
pub(super) fn held(leases: &[Lease]) -> Vec<(String, u64)> {
    leases
        .iter()
        .map(|l| (l.event.key.clone().unwrap_or_default(), l.event.sequence))
        .collect()
}

/// `per_key` events of each of `keys` keys (`k0`, `k1`, …), interleaved
/// (k0, k1, …, k0, k1, …) and routed by key.
pub fn interleaved_keys(keys: usize, per_key: usize) -> Vec<EventInput> {
    (0..per_key)
        .flat_map(|_| {
            (0..keys).map(|k| EventInput {
                key: Some(format!("k{k}")),
                ..EventInput::default()
            })
        })
        .collect()
}

/// Checks `done` — (partition, key, sequence) in the order processed —
/// holds every one of `keys` × `per_key` events once, each key's in
/// sequence order.
pub fn assert_each_key_in_order(done: Vec<(u32, String, u64)>, keys: usize, per_key: usize) {
    assert_eq!(done.len(), keys * per_key, "every event processed once");
    let mut per: BTreeMap<(u32, String), Vec<u64>> = BTreeMap::new();
    for (p, k, seq) in done {
        per.entry((p, k)).or_default().push(seq);
    }
    assert_eq!(per.len(), keys, "every key processed");
    for (key, seqs) in per {
        assert!(seqs.is_sorted(), "{key:?} out of order: {seqs:?}");
        assert_eq!(seqs.len(), per_key, "{key:?}: {seqs:?}");
    }
}

pub(super) fn pairs(list: &[(&str, u64)]) -> Vec<(String, u64)> {
    list.iter().map(|(k, s)| ((*k).to_owned(), *s)).collect()
}

pub async fn groups_show_their_ordering(h: &Harness) {
    let s = h.stream("s", 1).await;
    let plain = h.group(&s, "plain").await;
    let info = h.b().group_info(&s, &plain).await.expect("group info");
    assert_eq!(info.ordering, GroupOrdering::None);
    let keyed = ordered(h, &s, "keyed", GroupOrdering::Key, 5).await;
    let info = h.b().group_info(&s, &keyed).await.expect("group info");
    assert_eq!(info.ordering, GroupOrdering::Key);
    let listed: BTreeMap<String, GroupOrdering> = h
        .b()
        .list_groups(&s)
        .await
        .expect("list groups")
        .into_iter()
        .map(|g| (g.name.as_str().to_owned(), g.ordering))
        .collect();
    assert_eq!(listed["plain"], GroupOrdering::None);
    assert_eq!(listed["keyed"], GroupOrdering::Key);
}

pub async fn key_ordering_holds_a_keys_next_event_until_it_settles(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = ordered(h, &s, "g", GroupOrdering::Key, 5).await;
    append_keys(h, &s, &["a", "b", "a", "", "b", "a", ""]).await;
    let first = h.fetch(&s, &g, 10).await;
    // Each key's lowest; keyless events are not ordered.
    assert_eq!(held(&first), pairs(&[("a", 1), ("b", 2), ("", 4), ("", 7)]));
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "a and b are out");
    h.ack(&first[0]).await.unwrap();
    let next = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&next), pairs(&[("a", 3)]));
    h.ack(&first[1]).await.unwrap();
    h.ack(&next[0]).await.unwrap();
    let next = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&next), pairs(&[("b", 5), ("a", 6)]));
    for lease in first[2..].iter().chain(&next) {
        h.ack(lease).await.unwrap();
    }
    let lag = h.lag(&s, &g).await;
    assert_eq!((lag.lag, lag.inflight), (0, 0));
}

pub async fn key_ordering_expiry_hands_out_the_same_head_again(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = ordered(h, &s, "g", GroupOrdering::Key, 5).await;
    append_keys(h, &s, &["a", "a"]).await;
    let first = h.fetch_as(&s, &g, 10, "c1", 1_000).await;
    assert_eq!(held(&first), pairs(&[("a", 1)]));
    h.clock.advance(1_000);
    let again = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&again), pairs(&[("a", 1)]), "the head, not the next");
    assert_eq!(again[0].attempt, 2);
    assert!(matches!(h.ack(&first[0]).await, Err(Error::StaleLease)));
    h.ack(&again[0]).await.unwrap();
    assert_eq!(held(&h.fetch(&s, &g, 10).await), pairs(&[("a", 2)]));
}

pub async fn key_ordering_nack_with_delay_holds_back_only_its_key(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = ordered(h, &s, "g", GroupOrdering::Key, 5).await;
    append_keys(h, &s, &["a", "b", "a", "b"]).await;
    let first = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&first), pairs(&[("a", 1), ("b", 2)]));
    h.nack(&first[0], "later", Some(1_000)).await.unwrap();
    h.ack(&first[1]).await.unwrap();
    let next = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&next), pairs(&[("b", 4)]), "a waits for its head");
    h.clock.advance(999);
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    h.clock.advance(1);
    let retry = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&retry), pairs(&[("a", 1)]));
    assert_eq!(retry[0].attempt, 2);
    // An immediate nack keeps the head too.
    h.nack(&retry[0], "again", None).await.unwrap();
    let retry = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&retry), pairs(&[("a", 1)]));
    h.ack(&retry[0]).await.unwrap();
    assert_eq!(held(&h.fetch(&s, &g, 10).await), pairs(&[("a", 3)]));
}

pub async fn key_ordering_dead_letters_a_stuck_head_and_moves_on(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = ordered(h, &s, "g", GroupOrdering::Key, 2).await;
    append_keys(h, &s, &["a", "a", "a"]).await;
    // Out of attempts through nacks…
    let lease = h.fetch(&s, &g, 10).await;
    h.nack(&lease[0], "bad", None).await.unwrap();
    let lease = h.fetch(&s, &g, 10).await;
    assert_eq!((held(&lease), lease[0].attempt), (pairs(&[("a", 1)]), 2));
    h.nack(&lease[0], "bad", None).await.unwrap();
    // …and through the poison guard (the last attempt's lease expired).
    let lease = h.fetch_as(&s, &g, 10, "c1", 1_000).await;
    assert_eq!(
        held(&lease),
        pairs(&[("a", 2)]),
        "the dead head let a go on"
    );
    h.nack(&lease[0], "bad", None).await.unwrap();
    let lease = h.fetch_as(&s, &g, 10, "c1", 1_000).await;
    assert_eq!((held(&lease), lease[0].attempt), (pairs(&[("a", 2)]), 2));
    h.clock.advance(1_000);
    let lease = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&lease), pairs(&[("a", 3)]));
    let info = h.b().group_info(&s, &g).await.unwrap();
    assert_eq!(info.dead_letters, 2);
}

pub async fn key_ordering_replay_reopens_each_key_in_order(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = ordered(h, &s, "g", GroupOrdering::Key, 5).await;
    append_keys(h, &s, &["a", "b", "a", "a"]).await;
    loop {
        let leases = h.fetch(&s, &g, 10).await;
        if leases.is_empty() {
            break;
        }
        for lease in &leases {
            h.ack(lease).await.unwrap();
        }
    }
    let replay = Replay::FromSequence {
        after: 0,
        partitions: Partitions::All,
    };
    assert_eq!(h.b().replay(&s, &g, replay).await.unwrap(), 4);
    let mut order = Vec::new();
    loop {
        let leases = h.fetch(&s, &g, 10).await;
        if leases.is_empty() {
            break;
        }
        let keys: BTreeSet<String> = held(&leases).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys.len(), leases.len(), "one per key: {:?}", held(&leases));
        for lease in &leases {
            order.push((lease.event.key.clone().unwrap(), lease.event.sequence));
            h.ack(lease).await.unwrap();
        }
    }
    assert_eq!(order, pairs(&[("a", 1), ("b", 2), ("a", 3), ("a", 4)]));
}

pub async fn key_ordering_replay_waits_for_the_delivery_out(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = ordered(h, &s, "g", GroupOrdering::Key, 5).await;
    append_keys(h, &s, &["a", "a", "a"]).await;
    let one = h.fetch(&s, &g, 10).await;
    h.ack(&one[0]).await.unwrap();
    let two = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&two), pairs(&[("a", 2)]));
    // Replaying 1 while 2 is out: 1 comes after 2 settles, before 3.
    let ids = vec![one[0].event.id.clone()];
    assert_eq!(
        h.b().replay(&s, &g, Replay::EventIds(ids)).await.unwrap(),
        1
    );
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    h.ack(&two[0]).await.unwrap();
    let next = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&next), pairs(&[("a", 1)]));
    h.ack(&next[0]).await.unwrap();
    assert_eq!(held(&h.fetch(&s, &g, 10).await), pairs(&[("a", 3)]));
}

pub async fn key_ordering_redrive_goes_back_in_key_order(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = ordered(h, &s, "g", GroupOrdering::Key, 5).await;
    append_keys(h, &s, &["a", "a", "a"]).await;
    let one = h.fetch(&s, &g, 10).await;
    h.reject(&one[0], "poison").await.unwrap();
    let two = h.fetch(&s, &g, 10).await;
    assert_eq!(
        held(&two),
        pairs(&[("a", 2)]),
        "a dead letter settles its key"
    );
    assert_eq!(h.b().redrive(&s, &g, Redrive::All).await.unwrap(), 1);
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "2 is still out");
    h.ack(&two[0]).await.unwrap();
    let redriven = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&redriven), pairs(&[("a", 1)]), "before 3");
    assert_eq!(redriven[0].attempt, 1);
    h.ack(&redriven[0]).await.unwrap();
    assert_eq!(held(&h.fetch(&s, &g, 10).await), pairs(&[("a", 3)]));
}

pub async fn key_ordering_is_fair_across_keys(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = ordered(h, &s, "g", GroupOrdering::Key, 5).await;
    // A long run of one key ahead of the others does not starve them.
    let mut keys = vec!["hot"; 50];
    keys.extend(["x", "y", "z"]);
    append_keys(h, &s, &keys).await;
    let first = h.fetch(&s, &g, 10).await;
    assert_eq!(
        held(&first),
        pairs(&[("hot", 1), ("x", 51), ("y", 52), ("z", 53)])
    );
}

pub async fn partition_ordering_hands_out_each_partitions_lowest_alone(h: &Harness) {
    let s = h.stream("s", 2).await;
    let g = ordered(h, &s, "g", GroupOrdering::Partition, 5).await;
    h.append_to(&s, 0, 3).await;
    h.append_to(&s, 1, 2).await;
    let first = h.fetch(&s, &g, 10).await;
    let at = |l: &[Lease]| -> Vec<(u32, u64)> {
        l.iter()
            .map(|l| (l.event.partition, l.event.sequence))
            .collect()
    };
    assert_eq!(at(&first), [(0, 1), (1, 1)]);
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    // A delayed head holds back its whole partition, not the other one.
    h.nack(&first[0], "later", Some(500)).await.unwrap();
    h.ack(&first[1]).await.unwrap();
    let next = h.fetch(&s, &g, 10).await;
    assert_eq!(at(&next), [(1, 2)]);
    h.clock.advance(500);
    let retry = h.fetch(&s, &g, 10).await;
    assert_eq!(at(&retry), [(0, 1)]);
    h.ack(&retry[0]).await.unwrap();
    assert_eq!(at(&h.fetch(&s, &g, 10).await), [(0, 2)]);
}

pub async fn competing_consumers_never_hold_two_of_one_key(h: &Harness) {
    let s = h.stream("s", 2).await;
    let g = ordered(h, &s, "g", GroupOrdering::Key, 5).await;
    const KEYS: usize = 8;
    const PER_KEY: usize = 12;
    h.append_inputs(&s, interleaved_keys(KEYS, PER_KEY)).await;
    let out = Arc::new(parking_lot::Mutex::new(BTreeSet::<(u32, String)>::new()));
    let done = Arc::new(parking_lot::Mutex::new(Vec::<(u32, String, u64)>::new()));
    let mut consumers = Vec::new();
    for c in 0..3 {
        let (backend, s, g) = (Arc::clone(&h.backend), s.clone(), g.clone());
        let (out, done) = (Arc::clone(&out), Arc::clone(&done));
        consumers.push(tokio::spawn(async move {
            let total = KEYS * PER_KEY;
            for _ in 0..100_000 {
                if done.lock().len() == total {
                    return;
                }
                let req = FetchRequest {
                    stream: s.clone(),
                    group: g.clone(),
                    limit: 4,
                    consumer_id: cid(&format!("c{c}")),
                    lease_ms: 60_000,
                    partitions: Partitions::All,
                };
                let leases = backend.fetch(req).await.expect("fetch");
                for lease in &leases {
                    let key = (lease.event.partition, lease.event.key.clone().unwrap());
                    assert!(out.lock().insert(key.clone()), "two of {key:?} out at once");
                }
                tokio::task::yield_now().await;
                for lease in &leases {
                    let key = (lease.event.partition, lease.event.key.clone().unwrap());
                    // Recorded before the ack: once acked, the next of the
                    // key may go out to another consumer.
                    done.lock()
                        .push((key.0, key.1.clone(), lease.event.sequence));
                    out.lock().remove(&key);
                    backend
                        .ack(&lease.stream, &lease.group, lease.target())
                        .await
                        .expect("ack");
                }
            }
            panic!("consumer c{c} gave up before every event was processed");
        }));
    }
    for consumer in consumers {
        consumer.await.expect("consumer");
    }
    assert_each_key_in_order(done.lock().clone(), KEYS, PER_KEY);
    let lag = h.lag(&s, &g).await;
    assert_eq!((lag.lag, lag.inflight), (0, 0));
}

/// A reset of every partition to the beginning, changing the ordering.
pub(super) fn reset_to(s: &StreamName, g: &GroupName, ordering: GroupOrdering) -> ResetRequest {
    ResetRequest {
        ordering: Some(ordering),
        ..ResetRequest::to_the_beginning(s, g)
    }
}

/// The group's ordering as listed.
async fn ordering_of(h: &Harness, s: &StreamName, g: &GroupName) -> GroupOrdering {
    let groups = h.b().list_groups(s).await.expect("list groups");
    groups
        .iter()
        .find(|group| &group.name == g)
        .expect("the group")
        .ordering
}

pub async fn a_reset_of_every_partition_changes_the_ordering(h: &Harness) {
    let s = h.stream("s", 2).await;
    let g = h.group(&s, "g").await;
    append_keys(h, &s, &["a", "a", "b", "a"]).await;
    assert_eq!(h.fetch(&s, &g, 10).await.len(), 4, "unordered: all at once");

    // Some partitions only: refused whatever the backend, nothing changes.
    let mut some = reset_to(&s, &g, GroupOrdering::Key);
    some.partitions = Partitions::Only(vec![0]);
    match h.b().reset(some).await {
        Err(Error::Invalid(e)) => assert_eq!(e.field, "ordering", "{e}"),
        other => panic!("a partial reset changed the ordering: {other:?}"),
    }
    assert_eq!(ordering_of(h, &s, &g).await, GroupOrdering::None);
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "nothing was reset");

    let keyed = h.b().reset(reset_to(&s, &g, GroupOrdering::Key)).await;
    keyed.expect("a reset to key");
    assert_eq!(ordering_of(h, &s, &g).await, GroupOrdering::Key);
    let first = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&first), pairs(&[("a", 1), ("b", 3)]));
    h.ack(&first[0]).await.unwrap();
    let next = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&next), pairs(&[("a", 2)]));

    // And back: every delivery out is forgotten, all go out at once.
    h.b()
        .reset(reset_to(&s, &g, GroupOrdering::None))
        .await
        .expect("a reset to none");
    assert_eq!(ordering_of(h, &s, &g).await, GroupOrdering::None);
    assert_eq!(h.fetch(&s, &g, 10).await.len(), 4);
    assert_eq!(h.ack(&next[0]).await.unwrap_err().code(), "stale_lease");
}

/// The leases as (partition, sequence).
fn positions(leases: &[Lease]) -> Vec<(u32, u64)> {
    leases
        .iter()
        .map(|l| (l.event.partition, l.event.sequence))
        .collect()
}

/// Appends one event per key, in order, to `partition`.
async fn keys_to(h: &Harness, s: &StreamName, partition: u32, keys: &[&str]) {
    let inputs = keys
        .iter()
        .map(|k| EventInput {
            partition: Some(partition),
            key: Some((*k).to_owned()),
            ..EventInput::default()
        })
        .collect();
    h.append_inputs(s, inputs).await;
}

/// A partition whose unclaimed events all wait behind a busy gate leaves
/// its share of a fetch to the others (docs/groups.md#fairness): fetches of
/// one come back full while another partition has claimable heads.
pub async fn a_partition_held_by_its_gates_leaves_its_share_to_the_others(h: &Harness) {
    for ordering in [GroupOrdering::Key, GroupOrdering::Partition] {
        let s = h.stream(&format!("s-{}", ordering.as_str()), 2).await;
        let g = ordered(h, &s, "g", ordering, 5).await;
        keys_to(h, &s, 0, &["a", "a"]).await;
        let eight = ["k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"];
        keys_to(h, &s, 1, &eight).await;
        // Lease partition 0's first event: its second waits behind it.
        let mut req = h.fetch_req(&s, &g, 1);
        req.partitions = Partitions::Only(vec![0]);
        let head = h.b().fetch(req).await.expect("fetch");
        assert_eq!(positions(&head), [(0, 1)]);
        // Under `key` every event of partition 1 is a head of its own key;
        // under `partition` only its lowest is, one at a time.
        let mut got = Vec::new();
        for _ in 0..8 {
            let one = h.fetch(&s, &g, 1).await;
            assert_eq!(
                one.len(),
                1,
                "{ordering:?}: partition 1 still has a claimable head, after {got:?}"
            );
            got.extend(positions(&one));
            if ordering == GroupOrdering::Partition {
                h.ack(&one[0]).await.unwrap();
            }
        }
        let want: Vec<(u32, u64)> = (1..=8).map(|seq| (1, seq)).collect();
        assert_eq!(got, want, "{ordering:?}");
        assert!(h.fetch(&s, &g, 1).await.is_empty(), "{ordering:?}");
    }
}

/// A fetch over several partitions gives as many leases as there are
/// claimable heads, up to its limit, whatever holds some partitions back.
pub async fn an_ordered_fetch_is_as_long_as_the_claimable_heads_allow(h: &Harness) {
    let s = h.stream("s", 3).await;
    let g = ordered(h, &s, "g", GroupOrdering::Key, 5).await;
    // Partition 0: one key, 30 events (one claimable head). Partition 1:
    // 30 events of 30 keys. Partition 2: 10 keys twice (10 heads).
    keys_to(h, &s, 0, &["hot"; 30]).await;
    let thirty: Vec<String> = (0..30).map(|k| format!("p1-{k}")).collect();
    keys_to(
        h,
        &s,
        1,
        &thirty.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    let twice: Vec<String> = (0..20).map(|k| format!("p2-{}", k % 10)).collect();
    keys_to(
        h,
        &s,
        2,
        &twice.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    let leases = h.fetch(&s, &g, 50).await;
    let per = |p: u32| leases.iter().filter(|l| l.event.partition == p).count();
    assert_eq!(
        (leases.len(), per(0), per(1), per(2)),
        (41, 1, 30, 10),
        "every claimable head: {:?}",
        positions(&leases)
    );
    // And a limit below that is filled, shared round-robin: the held
    // partition gives its one, the others share the rest evenly.
    h.b()
        .reset(ResetRequest::to_the_beginning(&s, &g))
        .await
        .expect("reset");
    let leases = h.fetch(&s, &g, 21).await;
    let per = |p: u32| leases.iter().filter(|l| l.event.partition == p).count();
    assert_eq!((leases.len(), per(0), per(1), per(2)), (21, 1, 10, 10));
}

/// A retried head goes back behind a lower delivery of its key that a
/// replay or a redrive re-opened while it was out (docs/groups.md#ordering:
/// re-opened deliveries go before the rest of the key once the holder
/// settles — a nack settles it too).
pub async fn key_ordering_a_retry_goes_behind_a_lower_reopened_delivery(h: &Harness) {
    for (i, dead) in [false, true].into_iter().enumerate() {
        let s = h.stream(&format!("s{i}"), 1).await;
        let g = ordered(h, &s, "g", GroupOrdering::Key, 5).await;
        append_keys(h, &s, &["a", "a", "a"]).await;
        let one = h.fetch(&s, &g, 10).await;
        assert_eq!(held(&one), pairs(&[("a", 1)]));
        if dead {
            h.reject(&one[0], "poison").await.unwrap();
        } else {
            h.ack(&one[0]).await.unwrap();
        }
        let two = h.fetch(&s, &g, 10).await;
        assert_eq!(held(&two), pairs(&[("a", 2)]));
        let reopened = if dead {
            h.b().redrive(&s, &g, Redrive::All).await.unwrap()
        } else {
            let ids = vec![one[0].event.id.clone()];
            h.b().replay(&s, &g, Replay::EventIds(ids)).await.unwrap()
        };
        assert_eq!(reopened, 1);
        assert!(h.fetch(&s, &g, 10).await.is_empty(), "2 is out");
        h.nack(&two[0], "again", None).await.unwrap();
        let next = h.fetch(&s, &g, 10).await;
        assert_eq!(
            held(&next),
            pairs(&[("a", 1)]),
            "redrive {dead}: the re-opened 1 goes before the retried 2"
        );
        h.ack(&next[0]).await.unwrap();
        let next = h.fetch(&s, &g, 10).await;
        assert_eq!(held(&next), pairs(&[("a", 2)]));
        assert_eq!(next[0].attempt, 2);
        h.ack(&next[0]).await.unwrap();
        assert_eq!(held(&h.fetch(&s, &g, 10).await), pairs(&[("a", 3)]));
    }
}

/// A replay counts what it re-opened: a delivery parked behind its key's
/// head is open already, however far the store's cursor has gone.
pub async fn key_ordering_a_replay_counts_only_what_it_reopened(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = ordered(h, &s, "g", GroupOrdering::Key, 5).await;
    let events = append_keys(h, &s, &["a", "a"]).await;
    let first = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&first), pairs(&[("a", 1)]));
    let second = vec![events[1].id.clone()];
    let replayed = h.b().replay(&s, &g, Replay::EventIds(second)).await;
    assert_eq!(replayed.unwrap(), 0, "2 waits open behind 1");
    let all = Replay::FromSequence {
        after: 0,
        partitions: Partitions::All,
    };
    assert_eq!(
        h.b().replay(&s, &g, all).await.unwrap(),
        1,
        "only 1 was out"
    );
    let next = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&next), pairs(&[("a", 1)]));
    assert_eq!(next[0].attempt, 2);
}

/// When the poison guard dead-letters a head at the start of a fetch, the
/// key's next delivery goes out in that same fetch if its retry is due.
pub async fn key_ordering_a_poisoned_head_lets_a_due_retry_out_in_the_same_fetch(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = ordered(h, &s, "g", GroupOrdering::Key, 2).await;
    let events = append_keys(h, &s, &["a", "a"]).await;
    let one = h.fetch(&s, &g, 10).await;
    h.ack(&one[0]).await.unwrap();
    let two = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&two), pairs(&[("a", 2)]));
    h.nack(&two[0], "later", Some(1_000)).await.unwrap();
    let ids = vec![events[0].id.clone()];
    assert_eq!(
        h.b().replay(&s, &g, Replay::EventIds(ids)).await.unwrap(),
        1
    );
    h.clock.advance(1_000);
    let again = h.fetch_as(&s, &g, 10, "c1", 1_000).await;
    assert_eq!(held(&again), pairs(&[("a", 1)]), "the re-opened 1 first");
    assert_eq!(again[0].attempt, 2, "its last attempt");
    h.clock.advance(1_000);
    let next = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&next), pairs(&[("a", 2)]), "1 is poison: 2 goes out");
    assert_eq!(next[0].attempt, 2);
    let dead = h
        .b()
        .group_info(&s, &g)
        .await
        .expect("group info")
        .dead_letters;
    assert_eq!(dead, 1);
}
