//! Conformance checks: Groups, fetch, leases and fencing, nack/reject, dead letters, batch settle, redrive.

use std::collections::{BTreeMap, HashSet};

use serde_json::json;

use super::{Harness, START, cid, code, eid, gn, obj, sn};
use crate::backend::{
    DeadLettersRequest, FetchRequest, Partitions, Redrive, RenewRequest, Replay, Result,
};
use crate::model::{
    DeadLetter, DeadLetterPage, Event, EventInput, Group, GroupName, GroupOrdering, GroupSpec,
    Lease, LeaseId, SettleOp, SettleTarget, Settlement, StartAfter, StartPosition, StreamName,
};

// ---------------------------------------------------------------------------
// private helpers

/// `"ok"` for `Ok`, else the error code.
fn outcome<T>(r: Result<T>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => e.code(),
    }
}

/// (partition, sequence) of each lease, in the order returned.
fn pos(leases: &[Lease]) -> Vec<(u32, u64)> {
    leases
        .iter()
        .map(|l| (l.event.partition, l.event.sequence))
        .collect()
}

/// The attempt of each lease, in the order returned.
fn attempts(leases: &[Lease]) -> Vec<u32> {
    leases.iter().map(|l| l.attempt).collect()
}

/// A group spec with `max_attempts` and a backoff schedule.
fn spec(name: &str, max_attempts: u32, backoff: &[u64]) -> GroupSpec {
    let mut s = GroupSpec::new(gn(name));
    s.max_attempts = max_attempts;
    s.retry_backoff_ms = backoff.to_vec();
    s
}

/// Stream "s" (`partitions` partitions), group "g" with `spec`, `n` events in partition 0.
async fn setup_with(
    h: &Harness,
    partitions: u32,
    spec: GroupSpec,
    n: usize,
) -> (StreamName, GroupName, Vec<Event>) {
    let s = h.stream("s", partitions).await;
    let g = h.group_with(&s, spec).await;
    let events = h.append_n(&s, n).await;
    (s, g, events)
}

/// Stream "s" with one partition, default group "g", `n` events.
async fn setup(h: &Harness, n: usize) -> (StreamName, GroupName, Vec<Event>) {
    setup_with(h, 1, GroupSpec::new(gn("g")), n).await
}

/// Fetch (consumer `c1`, 30 s) from the given partitions.
async fn fetch_in(
    h: &Harness,
    s: &StreamName,
    g: &GroupName,
    limit: u32,
    partitions: Vec<u32>,
) -> Vec<Lease> {
    let mut req = h.fetch_req(s, g, limit);
    req.partitions = Partitions::Only(partitions);
    h.b().fetch(req).await.expect("fetch")
}

/// Renews `target` on `lease`'s stream and group.
async fn renew(h: &Harness, lease: &Lease, target: SettleTarget, lease_ms: u64) -> Result<Lease> {
    h.b()
        .renew(RenewRequest {
            stream: lease.stream.clone(),
            group: lease.group.clone(),
            target,
            lease_ms,
        })
        .await
}

/// ack / nack / reject / renew outcomes for `target` (each applied in turn).
async fn every_op(h: &Harness, lease: &Lease, target: &SettleTarget) -> [&'static str; 4] {
    let (s, g) = (&lease.stream, &lease.group);
    let b = h.b();
    [
        outcome(b.ack(s, g, target.clone()).await),
        outcome(b.nack(s, g, target.clone(), Some("x".into()), None).await),
        outcome(b.reject(s, g, target.clone(), Some("x".into())).await),
        outcome(renew(h, lease, target.clone(), 1000).await),
    ]
}

/// `lease`'s target with another lease id and receipt.
fn forge(lease: &Lease, lease_id: &str, receipt: Option<&str>) -> SettleTarget {
    SettleTarget {
        event_id: lease.event_id.clone(),
        lease_id: LeaseId::parse(lease_id).expect("valid lease id"),
        receipt: receipt.map(str::to_owned),
    }
}

async fn dead_page(
    h: &Harness,
    s: &StreamName,
    g: &GroupName,
    limit: u32,
    after: Option<&Event>,
) -> Result<DeadLetterPage> {
    h.b()
        .dead_letters(DeadLettersRequest {
            stream: s.clone(),
            group: g.clone(),
            limit,
            after: after.map(|e| e.id.clone()),
        })
        .await
}

/// All dead letters (one page of 1000).
async fn dead_all(h: &Harness, s: &StreamName, g: &GroupName) -> Vec<DeadLetter> {
    dead_page(h, s, g, 1000, None)
        .await
        .expect("dead letters")
        .dead_letters
}

/// (event id, attempt, reason) of every dead letter.
async fn dead_summary(h: &Harness, s: &StreamName, g: &GroupName) -> Vec<(String, u32, String)> {
    dead_all(h, s, g)
        .await
        .into_iter()
        .map(|d| (d.event_id.as_str().to_owned(), d.attempt, d.reason))
        .collect()
}

fn dl(e: &Event, attempt: u32, reason: &str) -> (String, u32, String) {
    (e.id.as_str().to_owned(), attempt, reason.to_owned())
}

fn settlement(target: SettleTarget, op: SettleOp) -> Settlement {
    Settlement { target, op }
}

// ---------------------------------------------------------------------------
// groups

pub async fn create_group_twice_is_already_exists(h: &Harness) {
    let s = h.stream("s", 1).await;
    let created = h
        .b()
        .create_group(&s, spec("g", 3, &[100]))
        .await
        .expect("create group");
    let expected = Group {
        stream: s.clone(),
        name: gn("g"),
        max_attempts: 3,
        retry_backoff_ms: vec![100],
        ordering: GroupOrdering::None,
        on_exhausted: crate::model::OnExhausted::DeadLetter,
        flow: crate::model::Flow::default(),
        created_at: START,
    };
    assert_eq!(created, expected);

    h.clock.advance(10);
    let again = h.b().create_group(&s, GroupSpec::new(gn("g"))).await;
    assert_eq!(code(again), "already_exists");
    // The first group's options are kept.
    assert_eq!(h.b().list_groups(&s).await.unwrap(), vec![expected]);

    // The same name on another stream is a different group.
    let other = h.stream("other", 1).await;
    h.group(&other, "g").await;
    assert_eq!(h.b().list_groups(&other).await.unwrap().len(), 1);
}

pub async fn list_groups_is_sorted(h: &Harness) {
    let s = h.stream("s", 1).await;
    let empty = h.stream("empty", 1).await;
    h.group_with(&s, spec("other", 2, &[100, 200])).await;
    h.group_with(&s, GroupSpec::new(gn("g"))).await;
    h.group_with(&s, spec("a", 7, &[5])).await;

    let groups = h.b().list_groups(&s).await.expect("list groups");
    let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["a", "g", "other"]);
    let opts: Vec<(u32, Vec<u64>)> = groups
        .iter()
        .map(|g| (g.max_attempts, g.retry_backoff_ms.clone()))
        .collect();
    assert_eq!(
        opts,
        [(7, vec![5]), (5, vec![]), (2, vec![100, 200])],
        "max_attempts / retry_backoff_ms as given (defaults: 5, [])"
    );
    assert!(groups.iter().all(|g| g.stream == s));
    assert!(h.b().list_groups(&empty).await.unwrap().is_empty());
}

pub async fn create_group_validates_options(h: &Harness) {
    let s = h.stream("s", 2).await;
    let b = h.b();
    assert_eq!(code(b.create_group(&s, spec("g", 0, &[])).await), "invalid");
    let too_long = spec("g", 5, &[100, 86_400_001]);
    assert_eq!(code(b.create_group(&s, too_long).await), "invalid");
    let mut bad_map = GroupSpec::new(gn("g"));
    bad_map.start =
        StartPosition::After(StartAfter::PerPartition(BTreeMap::from([(0, 0), (2, 0)])));
    assert_eq!(code(b.create_group(&s, bad_map).await), "invalid_partition");
    assert!(
        b.list_groups(&s).await.unwrap().is_empty(),
        "nothing created"
    );

    // Boundaries are accepted, and the name was never taken.
    let mut ok = spec("g", 1, &[86_400_000]);
    ok.start = StartPosition::After(StartAfter::PerPartition(BTreeMap::from([(1, 0)])));
    b.create_group(&s, ok).await.expect("valid options");
    let groups = b.list_groups(&s).await.unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(
        (groups[0].max_attempts, groups[0].retry_backoff_ms.clone()),
        (1, vec![86_400_000])
    );
}

pub async fn groups_are_independent(h: &Harness) {
    let s = h.stream("s", 1).await;
    let a = h.group(&s, "a").await;
    let b = h.group(&s, "b").await;
    let events = h.append_n(&s, 4).await;

    for lease in h.fetch(&s, &a, 10).await {
        h.ack(&lease).await.expect("ack on a");
    }
    assert!(h.fetch(&s, &a, 10).await.is_empty());

    let leases = h.fetch(&s, &b, 10).await;
    let ids: Vec<_> = leases.iter().map(|l| l.event_id.clone()).collect();
    let want: Vec<_> = events.iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids, want, "b still gets every event");
    assert_eq!(attempts(&leases), [1, 1, 1, 1]);
    assert!(leases.iter().all(|l| l.group == b));
    assert_eq!(h.lag(&s, &b).await.lag, 4);
    assert_eq!(h.lag(&s, &a).await.lag, 0);
}

// ---------------------------------------------------------------------------
// fetch

pub async fn fetch_respects_limit(h: &Harness) {
    let (s, g, _) = setup(h, 5).await;
    assert_eq!(pos(&h.fetch(&s, &g, 2).await), [(0, 1), (0, 2)]);
    assert_eq!(h.fetch(&s, &g, 1000).await.len(), 3, "the rest");

    let big = h.stream("big", 1).await;
    let g2 = h.group(&big, "g").await;
    h.append_n(&big, 30).await;
    let leases = h.fetch(&big, &g2, 5).await;
    assert_eq!(pos(&leases), (1..=5).map(|q| (0, q)).collect::<Vec<_>>());
}

pub async fn first_lease_has_its_fields_and_ack_finishes_it(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    h.clock.advance(1234);
    let input = EventInput {
        event_type: Some("curve_update".into()),
        key: Some("EUR".into()),
        payload: obj(json!({ "currency": "EUR", "price": 1 })),
        metadata: obj(json!({ "correlation_id": "abc" })),
        ..EventInput::default()
    };
    let event = h.append_inputs(&s, vec![input]).await.remove(0);
    h.clock.advance(10);

    let leases = h.fetch_as(&s, &g, 10, "c1", 7_000).await;
    assert_eq!(leases.len(), 1);
    let l = &leases[0];
    assert_eq!(l.attempt, 1);
    assert_eq!(l.consumer_id, cid("c1"));
    assert_eq!((&l.stream, &l.group), (&s, &g));
    assert_eq!(l.event_id, event.id);
    assert_eq!(*l.event, event);
    assert_eq!(l.leased_at, h.now());
    assert_eq!(l.expires_at, h.now().add_ms(7_000));

    h.ack(l).await.expect("ack");
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    assert_eq!(h.lag(&s, &g).await.lag, 0);
}

pub async fn held_leases_are_not_fetched_again(h: &Harness) {
    let (s, g, _) = setup(h, 3).await;
    let first = h.fetch_as(&s, &g, 2, "c1", 1000).await;
    assert_eq!(pos(&first), [(0, 1), (0, 2)]);
    let rest = h.fetch(&s, &g, 10).await;
    assert_eq!(pos(&rest), [(0, 3)], "only the events not held");
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "all held");

    h.ack(&first[0]).await.expect("ack");
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "acked never returns");
    h.clock.advance(999);
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "not expired yet");
    h.clock.advance(1);
    let back = h.fetch(&s, &g, 10).await;
    assert_eq!(pos(&back), [(0, 2)], "claimable once expires_at <= now");
    assert_eq!(attempts(&back), [2]);
}

pub async fn fetch_with_no_partitions_selects_nothing(h: &Harness) {
    let s = h.stream("s", 3).await;
    let g = h.group(&s, "g").await;
    for p in 0..3 {
        h.append_to(&s, p, 1).await;
    }
    assert!(fetch_in(h, &s, &g, 10, vec![]).await.is_empty());
    let all = h.fetch(&s, &g, 10).await;
    assert_eq!(pos(&all), [(0, 1), (1, 1), (2, 1)]);
    assert_eq!(attempts(&all), [1, 1, 1], "the empty fetch claimed nothing");
}

pub async fn fetch_returns_sorted_leases_with_distinct_ids(h: &Harness) {
    let (s, g, events) = setup(h, 3).await;
    let leases = h.fetch(&s, &g, 10).await;
    assert_eq!(pos(&leases), [(0, 1), (0, 2), (0, 3)]);
    let ids: Vec<_> = leases.iter().map(|l| l.event_id.clone()).collect();
    assert_eq!(ids, events.iter().map(|e| e.id.clone()).collect::<Vec<_>>());
    let mut lease_ids: HashSet<LeaseId> = leases.iter().map(|l| l.lease_id.clone()).collect();
    assert_eq!(lease_ids.len(), 3, "distinct lease ids");

    let m = h.stream("multi", 3).await;
    let gm = h.group(&m, "g").await;
    let inputs = [2, 0, 1, 2, 0, 1, 2]
        .iter()
        .map(|p| EventInput {
            partition: Some(*p),
            ..EventInput::default()
        })
        .collect();
    h.append_inputs(&m, inputs).await;
    let page1 = h.fetch(&m, &gm, 4).await;
    let page2 = h.fetch(&m, &gm, 100).await;
    for page in [&page1, &page2] {
        let p = pos(page);
        let mut sorted = p.clone();
        sorted.sort_unstable();
        assert_eq!(p, sorted, "sorted by (partition, sequence)");
    }
    let mut all = pos(&page1);
    all.extend(pos(&page2));
    all.sort_unstable();
    assert_eq!(
        all,
        [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1), (2, 2), (2, 3)]
    );
    lease_ids.extend(page1.iter().chain(&page2).map(|l| l.lease_id.clone()));
    assert_eq!(lease_ids.len(), 10, "distinct lease ids");
}

pub async fn fetch_validates_its_input(h: &Harness) {
    let s = h.stream("s", 2).await;
    let g = h.group(&s, "g").await;
    h.append_to(&s, 0, 1).await;
    h.append_to(&s, 1, 1).await;
    let with = |f: &dyn Fn(&mut FetchRequest)| {
        let mut req = h.fetch_req(&s, &g, 10);
        f(&mut req);
        req
    };
    let cases: [(FetchRequest, &str); 6] = [
        (with(&|r| r.limit = 0), "invalid"),
        (with(&|r| r.limit = 1001), "invalid"),
        (with(&|r| r.lease_ms = 0), "invalid"),
        (with(&|r| r.lease_ms = 43_200_001), "invalid"),
        (
            with(&|r| r.partitions = Partitions::Only(vec![2])),
            "invalid_partition",
        ),
        (
            with(&|r| r.partitions = Partitions::Only(vec![0, 5])),
            "invalid_partition",
        ),
    ];
    for (req, want) in cases {
        let debug = format!("{req:?}");
        assert_eq!(code(h.b().fetch(req).await), want, "{debug}");
    }

    let ok = with(&|r| {
        r.limit = 1000;
        r.lease_ms = 43_200_000;
    });
    let leases = h.b().fetch(ok).await.expect("bounds are valid");
    assert_eq!(pos(&leases), [(0, 1), (1, 1)]);
    assert_eq!(attempts(&leases), [1, 1], "nothing was claimed before");
    assert_eq!(leases[0].expires_at, h.now().add_ms(43_200_000));
}

pub async fn fetch_is_fair_across_partitions(h: &Harness) {
    let s = h.stream("two", 2).await;
    for p in 0..2 {
        h.append_to(&s, p, 10).await;
    }
    let g1 = h.group(&s, "g1").await;
    assert_eq!(pos(&h.fetch(&s, &g1, 2).await), [(0, 1), (1, 1)]);

    let g2 = h.group(&s, "g2").await;
    let mut singles = Vec::new();
    for _ in 0..6 {
        singles.extend(pos(&h.fetch(&s, &g2, 1).await));
    }
    assert_eq!(singles.len(), 6);
    assert!(
        singles.windows(2).all(|w| w[0].0 != w[1].0),
        "limit-1 fetches alternate partitions: {singles:?}"
    );
    for p in 0..2 {
        let seqs: Vec<u64> = singles.iter().filter(|x| x.0 == p).map(|x| x.1).collect();
        assert_eq!(seqs, [1, 2, 3], "lowest sequence first in partition {p}");
    }

    let g3 = h.group(&s, "g3").await;
    assert_eq!(
        pos(&h.fetch(&s, &g3, 4).await),
        [(0, 1), (0, 2), (1, 1), (1, 2)]
    );

    // Three partitions: one each; a partition that runs dry leaves its share to others.
    let t = h.stream("three", 3).await;
    h.append_to(&t, 0, 1).await;
    h.append_to(&t, 1, 10).await;
    h.append_to(&t, 2, 10).await;
    let gt = h.group(&t, "g").await;
    assert_eq!(pos(&h.fetch(&t, &gt, 3).await), [(0, 1), (1, 1), (2, 1)]);
    assert_eq!(
        pos(&h.fetch(&t, &gt, 4).await),
        [(1, 2), (1, 3), (2, 2), (2, 3)]
    );
}

/// Each partition gives its lowest claimable deliveries even when another
/// partition holds many lower sequences: a partition's expired leases
/// come before its unclaimed events, whatever the other partitions hold.
pub async fn fetch_reclaims_each_partitions_lowest_first(h: &Harness) {
    let s = h.stream("two", 2).await;
    h.append_to(&s, 0, 4).await;
    h.append_to(&s, 1, 8).await;
    let g = h.group(&s, "g").await;
    let leases = h.fetch_as(&s, &g, 100, "c1", 1_000).await;
    assert_eq!(leases.len(), 12);
    // Partition 1 settles its first four; its unsettled leases are then
    // all above partition 0's.
    for lease in leases
        .iter()
        .filter(|l| l.event.partition == 1 && l.event.sequence <= 4)
    {
        h.ack(lease).await.expect("ack");
    }
    h.append_to(&s, 1, 2).await;
    h.clock.advance(1_000);
    // Partition 0 re-offers 1–4, partition 1 re-offers 5–8 before its new 9.
    assert_eq!(pos(&h.fetch(&s, &g, 2).await), [(0, 1), (1, 5)]);
    assert_eq!(
        pos(&h.fetch(&s, &g, 4).await),
        [(0, 2), (0, 3), (1, 6), (1, 7)]
    );
}

pub async fn fetch_partition_scope(h: &Harness) {
    let s = h.stream("s", 3).await;
    let g = h.group(&s, "g").await;
    let mut events = Vec::new();
    for p in 0..3 {
        events.extend(h.append_to(&s, p, 1).await);
    }
    let only1 = fetch_in(h, &s, &g, 10, vec![1]).await;
    assert_eq!(pos(&only1), [(1, 1)]);
    assert_eq!(only1[0].event_id, events[1].id);
    assert_eq!(
        pos(&fetch_in(h, &s, &g, 10, vec![2, 0]).await),
        [(0, 1), (2, 1)]
    );
    assert!(h.fetch(&s, &g, 10).await.is_empty());
}

pub async fn leases_carry_a_receipt(h: &Harness) {
    let s = h.stream("s", 2).await;
    let g = h.group(&s, "g").await;
    h.append_to(&s, 0, 2).await;
    h.append_to(&s, 1, 2).await;
    let leases = h.fetch_as(&s, &g, 10, "c1", 100).await;
    assert_eq!(leases.len(), 4);
    for l in &leases {
        assert!(l.receipt.as_deref().is_some_and(|r| !r.is_empty()), "{l:?}");
    }
    h.clock.advance(100);
    let again = h.fetch(&s, &g, 10).await;
    assert_eq!(again.len(), 4);
    assert!(again.iter().all(|l| l.receipt.is_some()), "re-claims too");
    let renewed = renew(h, &again[0], again[0].target(), 1000).await.unwrap();
    assert!(renewed.receipt.is_some(), "renew returns a receipt");
    for l in &again[1..] {
        h.ack(l).await.expect("ack with the receipt");
    }
    h.ack(&renewed).await.expect("ack the renewed lease");
}

pub async fn expired_lease_is_redelivered_with_the_next_attempt(h: &Harness) {
    let (s, g, events) = setup(h, 1).await;
    let old = h.fetch_as(&s, &g, 10, "c1", 100).await.remove(0);
    assert_eq!(old.attempt, 1);
    h.clock.advance(99);
    assert!(h.fetch_as(&s, &g, 10, "c2", 1000).await.is_empty());
    h.clock.advance(101);

    let new = h.fetch_as(&s, &g, 10, "c2", 1000).await;
    assert_eq!(new.len(), 1);
    let new = &new[0];
    assert_eq!(new.event_id, events[0].id);
    assert_eq!(new.attempt, 2);
    assert_ne!(new.lease_id, old.lease_id);
    assert_eq!(new.consumer_id, cid("c2"));
    assert_eq!(
        (new.leased_at, new.expires_at),
        (h.now(), h.now().add_ms(1000))
    );
    assert_eq!(*new.event, events[0]);
}

pub async fn stale_lease_is_fenced_for_every_operation(h: &Harness) {
    let (s, g, _) = setup(h, 1).await;
    let old = h.fetch_as(&s, &g, 10, "old", 50).await.remove(0);
    h.clock.advance(100);
    let new = h.fetch_as(&s, &g, 10, "new", 30_000).await.remove(0);
    assert_eq!(new.attempt, 2);

    let got = every_op(h, &old, &old.target()).await;
    assert_eq!(got, ["stale_lease"; 4]);

    // Nothing changed: still held by `new`, not requeued, not dead-lettered.
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    assert!(dead_all(h, &s, &g).await.is_empty());
    assert_eq!(h.lag(&s, &g).await.lag, 1);
    h.clock.advance(1500);
    assert!(
        h.fetch(&s, &g, 10).await.is_empty(),
        "old renew had no effect"
    );
    h.ack(&new).await.expect("new lease acks");
    assert_eq!(h.lag(&s, &g).await.lag, 0);
}

pub async fn duplicate_ack_is_stale(h: &Harness) {
    let (s, g, _) = setup(h, 2).await;
    let leases = h.fetch(&s, &g, 10).await;
    h.ack(&leases[0]).await.expect("first ack");
    assert_eq!(code(h.ack(&leases[0]).await), "stale_lease");
    let mut no_receipt = leases[0].target();
    no_receipt.receipt = None;
    assert_eq!(code(h.b().ack(&s, &g, no_receipt).await), "stale_lease");
    assert_eq!(code(h.nack(&leases[0], "x", None).await), "stale_lease");
    assert_eq!(code(h.reject(&leases[0], "x").await), "stale_lease");
    assert!(dead_all(h, &s, &g).await.is_empty());
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "acked stays acked");
    h.ack(&leases[1]).await.expect("the other lease");
    assert_eq!(h.lag(&s, &g).await.lag, 0);
}

pub async fn renew_extends_the_expiry(h: &Harness) {
    let (s, g, _) = setup(h, 1).await;
    let lease = h.fetch_as(&s, &g, 10, "c1", 200).await.remove(0);
    h.clock.advance(50);
    for bad in [0, 43_200_001] {
        assert_eq!(code(renew(h, &lease, lease.target(), bad).await), "invalid");
    }

    let renewed = renew(h, &lease, lease.target(), 5000).await.expect("renew");
    assert_eq!(renewed.lease_id, lease.lease_id);
    assert_eq!(renewed.event_id, lease.event_id);
    assert_eq!((renewed.attempt, &renewed.consumer_id), (1, &cid("c1")));
    assert_eq!(renewed.leased_at, START, "renew is not a new claim");
    assert_eq!(renewed.expires_at, h.now().add_ms(5000));
    assert_eq!(renewed.event, lease.event);

    h.clock.advance(300);
    assert!(h.fetch_as(&s, &g, 10, "other", 1000).await.is_empty());
    h.ack(&renewed).await.expect("ack renewed");
    assert_eq!(h.lag(&s, &g).await.lag, 0);
}

pub async fn renew_after_ack_is_stale(h: &Harness) {
    let (s, g, _) = setup(h, 3).await;
    let l = h.fetch(&s, &g, 10).await;
    h.ack(&l[0]).await.unwrap();
    h.nack(&l[1], "later", Some(60_000)).await.unwrap();
    h.reject(&l[2], "bad").await.unwrap();
    for lease in &l {
        let r = renew(h, lease, lease.target(), 1000).await;
        assert_eq!(code(r), "stale_lease", "after settle: {lease:?}");
    }
    h.clock.advance(60_000);
    assert_eq!(
        pos(&h.fetch(&s, &g, 10).await),
        [(0, 2)],
        "renew changed nothing"
    );
}

/// One call renews several leases, each fenced on its own: live ones are
/// extended, stale, forged and mismatched ones answer their error and
/// change nothing.
pub async fn renew_many_has_per_item_results(h: &Harness) {
    let (s, g, _) = setup(h, 4).await;
    let l = h.fetch_as(&s, &g, 10, "c1", 200).await;
    h.ack(&l[3]).await.unwrap();
    let b = h.b();
    assert!(b.renew_many(&s, &g, vec![], 1000).await.unwrap().is_empty());
    for bad in [0, 43_200_001] {
        let r = b.renew_many(&s, &g, vec![l[0].target()], bad).await;
        assert_eq!(code(r), "invalid", "lease_ms {bad}");
    }
    let too_many = vec![l[0].target(); crate::model::MAX_SETTLE_BATCH + 1];
    assert_eq!(code(b.renew_many(&s, &g, too_many, 1000).await), "invalid");
    assert_eq!(
        code(b.renew_many(&sn("nope"), &g, vec![], 1000).await),
        "stream_not_found"
    );
    assert_eq!(
        code(b.renew_many(&s, &gn("nope"), vec![], 1000).await),
        "group_not_found"
    );

    h.clock.advance(50);
    let mut mismatched = l[2].target();
    mismatched.receipt = Some("not-the-receipt".into());
    let targets = vec![
        l[0].target(),
        forge(&l[1], "forged", None),
        mismatched,
        l[3].target(),
        l[1].target(),
    ];
    let results = b
        .renew_many(&s, &g, targets, 5000)
        .await
        .expect("renew_many");
    let got: Vec<&str> = results
        .iter()
        .map(|r| r.as_ref().map_or_else(|e| e.code(), |_| "ok"))
        .collect();
    assert_eq!(
        got,
        ["ok", "stale_lease", "receipt_mismatch", "stale_lease", "ok"]
    );
    let expiry = h.now().add_ms(5000);
    assert_eq!(results[0].as_ref().ok(), Some(&expiry));
    assert_eq!(results[4].as_ref().ok(), Some(&expiry));

    // Past the first expiry: only the lease that was not renewed comes back.
    h.clock.advance(300);
    let again = h.fetch_as(&s, &g, 10, "other", 1000).await;
    assert_eq!(pos(&again), [(0, 3)]);
    for lease in [&l[0], &l[1]] {
        h.ack(lease).await.expect("renewed leases still ack");
    }
}

pub async fn forged_lease_is_stale(h: &Harness) {
    let (s, g, _) = setup(h, 1).await;
    let lease = h.fetch(&s, &g, 10).await.remove(0);
    let forged = forge(&lease, "forged", None);
    assert_eq!(every_op(h, &lease, &forged).await, ["stale_lease"; 4]);

    let mut unknown = lease.target();
    unknown.event_id = eid("no-such-event");
    assert_eq!(every_op(h, &lease, &unknown).await, ["stale_lease"; 4]);

    assert!(h.fetch(&s, &g, 10).await.is_empty(), "still held");
    assert!(dead_all(h, &s, &g).await.is_empty());
    h.ack(&lease).await.expect("the real lease still acks");
    assert_eq!(h.lag(&s, &g).await.lag, 0);
}

pub async fn receipt_mismatch_is_detected(h: &Harness) {
    let (s, g, _) = setup(h, 2).await;
    let l = h.fetch(&s, &g, 10).await;
    let (a, b) = (&l[0], &l[1]);

    let tampered = forge(a, a.lease_id.as_str(), Some("tampered"));
    assert_eq!(every_op(h, a, &tampered).await, ["receipt_mismatch"; 4]);
    let both_wrong = forge(a, "forged", Some("tampered"));
    assert_eq!(
        code(h.b().ack(&s, &g, both_wrong).await),
        "stale_lease",
        "the lease id is checked first"
    );
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "nothing changed");
    assert!(dead_all(h, &s, &g).await.is_empty());

    let no_receipt = forge(a, a.lease_id.as_str(), None);
    h.b()
        .ack(&s, &g, no_receipt)
        .await
        .expect("no receipt is accepted");
    h.ack(b).await.expect("genuine ack");
    assert_eq!(h.lag(&s, &g).await.lag, 0);
}

pub async fn expiry_alone_does_not_fence(h: &Harness) {
    let (s, g, _) = setup(h, 3).await;
    let l = h.fetch_as(&s, &g, 10, "c1", 100).await;
    h.clock.advance(500);
    // A fetch after the expiry re-claims only sequence 1.
    let re = h.fetch_as(&s, &g, 1, "c2", 1000).await;
    assert_eq!((pos(&re), attempts(&re)), (vec![(0, 1)], vec![2]));

    assert_eq!(code(h.ack(&l[0]).await), "stale_lease", "re-claimed");
    h.ack(&l[1])
        .await
        .expect("expired, not re-claimed: still the holder's");
    let renewed = renew(h, &l[2], l[2].target(), 1000).await.expect("renew");
    assert_eq!(renewed.expires_at, h.now().add_ms(1000));
    assert_eq!(renewed.attempt, 1);

    assert!(h.fetch_as(&s, &g, 10, "c2", 1000).await.is_empty());
    h.ack(&renewed).await.expect("ack renewed");
    h.ack(&re[0]).await.expect("ack re-claimed");
    assert_eq!(h.lag(&s, &g).await.lag, 0);
}

pub async fn poison_guard_dead_letters_an_expired_last_attempt(h: &Harness) {
    let (s, g, events) = setup_with(h, 1, spec("g", 2, &[]), 1).await;
    let first = h.fetch_as(&s, &g, 10, "c1", 100).await;
    assert_eq!(attempts(&first), [1]);
    h.clock.advance(100);
    let second = h.fetch_as(&s, &g, 10, "c1", 100).await;
    assert_eq!(attempts(&second), [2]);
    h.clock.advance(100);
    assert!(h.fetch_as(&s, &g, 10, "c1", 100).await.is_empty());

    let dead = dead_all(h, &s, &g).await;
    assert_eq!(dead.len(), 1);
    let d = &dead[0];
    assert_eq!((&d.event_id, d.attempt), (&events[0].id, 2));
    assert_eq!(d.reason, "max_attempts_expired");
    assert_eq!(d.dead_lettered_at, h.now());
    assert_eq!(h.lag(&s, &g).await.lag, 0, "dead letters are terminal");
    assert_eq!(code(h.ack(&second[0]).await), "stale_lease");
    let info = h.b().group_info(&s, &g).await.unwrap();
    assert_eq!((info.inflight, info.dead_letters), (0, 1));
}

// ---------------------------------------------------------------------------
// nack, reject, max_attempts, delays

pub async fn retry_then_reject(h: &Harness) {
    let (s, g, events) = setup(h, 1).await;
    let first = h.fetch(&s, &g, 10).await.remove(0);
    h.nack(&first, "tmp", None).await.expect("nack");
    let second = h.fetch(&s, &g, 10).await;
    assert_eq!(second.len(), 1);
    assert_eq!((&second[0].event_id, second[0].attempt), (&events[0].id, 2));
    assert_ne!(second[0].lease_id, first.lease_id);
    h.reject(&second[0], "bad").await.expect("reject");
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    assert_eq!(dead_summary(h, &s, &g).await, [dl(&events[0], 2, "bad")]);
    assert_eq!(h.lag(&s, &g).await.lag, 0);
}

pub async fn max_attempts_one_dead_letters_the_first_nack(h: &Harness) {
    let (s, g, events) = setup_with(h, 1, spec("g", 1, &[]), 2).await;
    let l = h.fetch(&s, &g, 10).await;
    h.nack(&l[0], "boom", None).await.expect("nack");
    h.b()
        .nack(&s, &g, l[1].target(), None, None)
        .await
        .expect("nack without reason");
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    assert_eq!(
        dead_summary(h, &s, &g).await,
        [
            dl(&events[0], 1, "max_attempts: boom"),
            dl(&events[1], 1, "max_attempts: retry"),
        ]
    );
    assert_eq!(h.lag(&s, &g).await.lag, 0);
}

pub async fn max_attempts_three_allows_three_deliveries(h: &Harness) {
    let (s, g, events) = setup_with(h, 1, spec("g", 3, &[]), 1).await;
    for attempt in 1..=3 {
        let l = h.fetch(&s, &g, 10).await;
        assert_eq!(attempts(&l), [attempt]);
        h.nack(&l[0], &format!("r{attempt}"), None)
            .await
            .expect("nack");
    }
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    assert_eq!(
        dead_summary(h, &s, &g).await,
        [dl(&events[0], 3, "max_attempts: r3")]
    );
}

pub async fn max_attempts_two_moves_on_to_the_next_event(h: &Harness) {
    let (s, g, events) = setup_with(h, 1, spec("g", 2, &[]), 3).await;
    let a = h.fetch(&s, &g, 1).await;
    assert_eq!((pos(&a), attempts(&a)), (vec![(0, 1)], vec![1]));
    h.nack(&a[0], "x", None).await.unwrap();
    let b = h.fetch(&s, &g, 1).await;
    assert_eq!((pos(&b), attempts(&b)), (vec![(0, 1)], vec![2]));
    h.nack(&b[0], "x", None).await.unwrap();
    let c = h.fetch(&s, &g, 1).await;
    assert_eq!((pos(&c), attempts(&c)), (vec![(0, 2)], vec![1]));
    assert_eq!(
        dead_summary(h, &s, &g).await,
        [dl(&events[0], 2, "max_attempts: x")]
    );
}

pub async fn nack_delay_defers_redelivery(h: &Harness) {
    let (s, g, _) = setup(h, 2).await;
    let first = h.fetch(&s, &g, 1).await;
    h.nack(&first[0], "later", Some(1000)).await.unwrap();
    let other = h.fetch(&s, &g, 10).await;
    assert_eq!(
        pos(&other),
        [(0, 2)],
        "a delayed retry does not block the rest"
    );
    h.ack(&other[0]).await.unwrap();

    h.clock.advance(999);
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    h.clock.advance(1);
    let back = h.fetch(&s, &g, 10).await;
    assert_eq!((pos(&back), attempts(&back)), (vec![(0, 1)], vec![2]));
}

pub async fn group_backoff_schedule_applies_to_nacks(h: &Harness) {
    let (s, g, _) = setup_with(h, 1, spec("g", 5, &[100, 1000]), 1).await;
    let mut lease = h.fetch(&s, &g, 10).await.remove(0);
    // After attempt 1: 100 ms; after 2: 1000; after 3: 1000 (the last repeats).
    for (attempt, wait) in [(1, 100), (2, 1000), (3, 1000)] {
        assert_eq!(lease.attempt, attempt);
        h.nack(&lease, "x", None).await.unwrap();
        assert!(h.fetch(&s, &g, 10).await.is_empty());
        h.clock.advance(wait - 1);
        assert!(h.fetch(&s, &g, 10).await.is_empty(), "before {wait} ms");
        h.clock.advance(1);
        let next = h.fetch(&s, &g, 10).await;
        assert_eq!(next.len(), 1, "due after {wait} ms");
        lease = next.into_iter().next().unwrap();
    }
    assert_eq!(lease.attempt, 4);
    h.nack(&lease, "x", Some(0)).await.unwrap();
    let now = h.fetch(&s, &g, 10).await;
    assert_eq!(attempts(&now), [5], "delay_ms 0 overrides the schedule");
}

pub async fn nack_delay_over_the_maximum_is_refused(h: &Harness) {
    let (s, g, _) = setup(h, 3).await;
    let l = h.fetch(&s, &g, 10).await;
    assert_eq!(code(h.nack(&l[0], "x", Some(86_400_001)).await), "invalid");
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "still held");
    h.ack(&l[0]).await.expect("ack after the refused nack");

    // Per item in a batch: the bad nack fails alone.
    let items = vec![
        settlement(
            l[1].target(),
            SettleOp::Nack {
                reason: None,
                delay_ms: Some(86_400_001),
            },
        ),
        settlement(
            l[2].target(),
            SettleOp::Nack {
                reason: None,
                delay_ms: Some(86_400_000),
            },
        ),
    ];
    let results = h.b().settle(&s, &g, items).await.expect("settle");
    let got: Vec<&str> = results.into_iter().map(outcome).collect();
    assert_eq!(got, ["invalid", "ok"]);
    h.ack(&l[1])
        .await
        .expect("still held after the refused item");

    h.clock.advance(86_399_999);
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    h.clock.advance(1);
    assert_eq!(pos(&h.fetch(&s, &g, 10).await), [(0, 3)]);
}

// ---------------------------------------------------------------------------
// batch settle

pub async fn batch_settle_has_per_item_results(h: &Harness) {
    let (s, g, events) = setup(h, 3).await;
    let l = h.fetch(&s, &g, 10).await;
    assert!(h.b().settle(&s, &g, vec![]).await.unwrap().is_empty());
    let items = vec![
        settlement(l[0].target(), SettleOp::Ack),
        settlement(
            l[1].target(),
            SettleOp::Nack {
                reason: Some("later".into()),
                delay_ms: None,
            },
        ),
        settlement(
            l[2].target(),
            SettleOp::Reject {
                reason: Some("bad".into()),
            },
        ),
        settlement(forge(&l[0], "forged", None), SettleOp::Ack),
        settlement(l[0].target(), SettleOp::Ack),
    ];
    let results = h.b().settle(&s, &g, items).await.expect("settle");
    let got: Vec<&str> = results.into_iter().map(outcome).collect();
    assert_eq!(got, ["ok", "ok", "ok", "stale_lease", "stale_lease"]);

    let again = h.fetch(&s, &g, 10).await;
    assert_eq!((pos(&again), attempts(&again)), (vec![(0, 2)], vec![2]));
    assert_eq!(dead_summary(h, &s, &g).await, [dl(&events[2], 1, "bad")]);
    let lag = h.lag(&s, &g).await;
    assert_eq!((lag.partitions[&0].frontier, lag.lag), (1, 2));
}

/// A second operation on a lease the same batch already settled is
/// `stale_lease`, even when its receipt is wrong too: the lease id is
/// checked first (found by the model-based check on Redis,
/// `docs/groups.md#the-model-based-check`).
pub async fn batch_settle_after_a_settle_is_stale_whatever_the_receipt(h: &Harness) {
    let (s, g, _) = setup(h, 2).await;
    let l = h.fetch(&s, &g, 10).await;
    let tampered = forge(&l[0], l[0].lease_id.as_str(), Some("tampered"));
    let items = vec![
        Settlement {
            target: l[0].target(),
            op: SettleOp::Nack {
                reason: None,
                delay_ms: None,
            },
        },
        Settlement::ack(tampered.clone()),
        Settlement::ack(l[1].target()),
    ];
    let results = h.b().settle(&s, &g, items).await.expect("settle");
    let got: Vec<&str> = results.into_iter().map(outcome).collect();
    assert_eq!(got, ["ok", "stale_lease", "ok"]);
    assert_eq!(code(h.b().ack(&s, &g, tampered).await), "stale_lease");
    let again = h.fetch(&s, &g, 10).await;
    assert_eq!((pos(&again), attempts(&again)), (vec![(0, 1)], vec![2]));
}

/// Several nacks of one partition in one batch, mixed with acks and a
/// reject: each delivery gets its own outcome, the immediate ones come back
/// in sequence order, the delayed one only when due.
pub async fn batch_settle_with_several_nacks_in_one_partition(h: &Harness) {
    let (s, g, events) = setup(h, 6).await;
    let l = h.fetch(&s, &g, 10).await;
    let nack = |delay_ms: Option<u64>| SettleOp::Nack {
        reason: Some("again".into()),
        delay_ms,
    };
    let items = vec![
        settlement(l[0].target(), nack(None)),
        settlement(l[1].target(), nack(Some(1000))),
        settlement(l[2].target(), SettleOp::Ack),
        settlement(l[3].target(), nack(None)),
        settlement(
            l[4].target(),
            SettleOp::Reject {
                reason: Some("bad".into()),
            },
        ),
        settlement(l[5].target(), nack(None)),
    ];
    let results = h.b().settle(&s, &g, items).await.expect("settle");
    let got: Vec<&str> = results.into_iter().map(outcome).collect();
    assert_eq!(got, ["ok"; 6]);
    let lag = h.lag(&s, &g).await;
    assert_eq!((lag.partitions[&0].frontier, lag.lag), (0, 6));

    let again = h.fetch(&s, &g, 10).await;
    assert_eq!(
        (pos(&again), attempts(&again)),
        (vec![(0, 1), (0, 4), (0, 6)], vec![2, 2, 2])
    );
    h.clock.advance(1000);
    let due = h.fetch(&s, &g, 10).await;
    assert_eq!((pos(&due), attempts(&due)), (vec![(0, 2)], vec![2]));
    for lease in again.iter().chain(&due) {
        h.ack(lease).await.expect("ack");
    }
    assert_eq!(dead_summary(h, &s, &g).await, [dl(&events[4], 1, "bad")]);
    let lag = h.lag(&s, &g).await;
    assert_eq!((lag.partitions[&0].frontier, lag.lag), (6, 0));
}

pub async fn batch_settle_over_the_maximum_is_refused(h: &Harness) {
    let (s, g, _) = setup(h, 1).await;
    let lease = h.fetch(&s, &g, 10).await.remove(0);
    let acks = |n: usize| vec![settlement(lease.target(), SettleOp::Ack); n];
    assert_eq!(code(h.b().settle(&s, &g, acks(1001)).await), "invalid");
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "still held");
    assert_eq!(h.lag(&s, &g).await.lag, 1, "nothing applied");

    let results = h
        .b()
        .settle(&s, &g, acks(1000))
        .await
        .expect("1000 is allowed");
    let got: Vec<&str> = results.into_iter().map(outcome).collect();
    assert_eq!(got.len(), 1000);
    assert_eq!(got[0], "ok");
    assert!(got[1..].iter().all(|c| *c == "stale_lease"));
    assert_eq!(h.lag(&s, &g).await.lag, 0);
}

// ---------------------------------------------------------------------------
// dead letters

pub async fn dead_letters_list_with_reason_and_event(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    let other = h.group(&s, "other").await;
    let input = EventInput {
        event_type: Some("t".into()),
        key: Some("k".into()),
        payload: obj(json!({ "a": { "b": [1, 2] } })),
        ..EventInput::default()
    };
    let mut events = h.append_inputs(&s, vec![input]).await;
    events.extend(h.append_n(&s, 1).await);
    let l = h.fetch(&s, &g, 10).await;
    h.reject(&l[0], "bad").await.unwrap();
    h.clock.advance(10);
    h.b().reject(&s, &g, l[1].target(), None).await.unwrap();

    let page = dead_page(h, &s, &g, 10, None).await.expect("dead letters");
    let want = |e: &Event, reason: &str, at| DeadLetter {
        event_id: e.id.clone(),
        partition: 0,
        sequence: e.sequence,
        attempt: 1,
        reason: reason.into(),
        dead_lettered_at: at,
        event: Some(e.clone()),
    };
    let expected = vec![
        want(&events[0], "bad", START),
        want(&events[1], "rejected", START.add_ms(10)),
    ];
    assert_eq!(page.dead_letters, expected);
    assert_eq!(page.next, None);
    assert!(dead_all(h, &s, &other).await.is_empty(), "per group");
}

pub async fn dead_letters_paginate_in_sequence_order(h: &Harness) {
    let s = h.stream("s", 2).await;
    let g = h.group(&s, "g").await;
    let p0 = h.append_to(&s, 0, 3).await;
    let p1 = h.append_to(&s, 1, 3).await;
    let l = h.fetch(&s, &g, 10).await;
    assert_eq!(l.len(), 6);
    // Leases are (0,1),(0,2),(0,3),(1,1),(1,2),(1,3); dead-letter five of them out of order.
    for i in [4, 0, 2, 3, 1] {
        h.reject(&l[i], "bad").await.unwrap();
    }
    h.ack(&l[5]).await.unwrap();
    // (sequence, partition) order.
    let order = [&p0[0], &p1[0], &p0[1], &p1[1], &p0[2]];
    let ids = |p: &DeadLetterPage| -> Vec<_> {
        p.dead_letters.iter().map(|d| d.event_id.clone()).collect()
    };
    let want = |es: &[&Event]| -> Vec<_> { es.iter().map(|e| e.id.clone()).collect() };

    let page1 = dead_page(h, &s, &g, 2, None).await.unwrap();
    assert_eq!(ids(&page1), want(&order[0..2]));
    assert_eq!(page1.next.as_ref(), Some(&order[1].id));
    let page2 = dead_page(h, &s, &g, 2, Some(order[1])).await.unwrap();
    assert_eq!(ids(&page2), want(&order[2..4]));
    assert_eq!(page2.next.as_ref(), Some(&order[3].id));
    let page3 = dead_page(h, &s, &g, 2, Some(order[3])).await.unwrap();
    assert_eq!(ids(&page3), want(&order[4..]));
    assert_eq!(page3.next, None, "last page is not full");

    let full = dead_page(h, &s, &g, 5, None).await.unwrap();
    assert_eq!(
        full.next.as_ref(),
        Some(&order[4].id),
        "a full page has next"
    );
    let after_end = dead_page(h, &s, &g, 5, Some(order[4])).await.unwrap();
    assert!(after_end.dead_letters.is_empty() && after_end.next.is_none());

    // A cursor whose event is no longer dead-lettered still marks a position.
    let n = h
        .b()
        .redrive(&s, &g, Redrive::Events(vec![order[1].id.clone()]));
    assert_eq!(n.await.unwrap(), 1);
    let cont = dead_page(h, &s, &g, 2, Some(order[1])).await.unwrap();
    assert_eq!(ids(&cont), want(&order[2..4]));
    let acked = dead_page(h, &s, &g, 10, Some(&p1[2])).await.unwrap();
    assert!(acked.dead_letters.is_empty(), "after the last position");
}

pub async fn dead_letters_unknown_cursor_is_cursor_not_found(h: &Harness) {
    let (s, g, _) = setup(h, 1).await;
    let l = h.fetch(&s, &g, 10).await;
    h.reject(&l[0], "bad").await.unwrap();
    let elsewhere = h.stream("elsewhere", 1).await;
    let foreign = h.append_n(&elsewhere, 1).await.remove(0);

    let mut req = DeadLettersRequest {
        stream: s.clone(),
        group: g.clone(),
        limit: 10,
        after: Some(eid("missing-cursor")),
    };
    assert_eq!(
        code(h.b().dead_letters(req.clone()).await),
        "cursor_not_found"
    );
    req.after = Some(foreign.id);
    assert_eq!(
        code(h.b().dead_letters(req.clone()).await),
        "cursor_not_found",
        "an id from another stream is unknown here"
    );
    req.after = None;
    for bad in [0, 1001] {
        req.limit = bad;
        assert_eq!(code(h.b().dead_letters(req.clone()).await), "invalid");
    }
    req.limit = 1000;
    assert_eq!(h.b().dead_letters(req).await.unwrap().dead_letters.len(), 1);
}

// ---------------------------------------------------------------------------
// group info, redrive

pub async fn group_info_reports_counts(h: &Harness) {
    let s = h.stream("s", 2).await;
    let g = h.group_with(&s, spec("g", 4, &[10, 20])).await;
    h.append_n(&s, 2).await;
    let info = h.b().group_info(&s, &g).await.expect("group info");
    assert_eq!((&info.stream, &info.group), (&s, &g));
    assert_eq!(
        (info.max_attempts, info.retry_backoff_ms.clone()),
        (4, vec![10, 20])
    );
    assert_eq!((info.lag.lag, info.inflight, info.dead_letters), (2, 0, 0));
    assert_eq!(info.cursors, BTreeMap::from([(0, 1), (1, 1)]));

    let l = h.fetch(&s, &g, 1).await;
    let info = h.b().group_info(&s, &g).await.unwrap();
    assert_eq!((info.lag.lag, info.inflight, info.dead_letters), (2, 1, 0));
    assert_eq!(info.cursors, BTreeMap::from([(0, 2), (1, 1)]));

    h.reject(&l[0], "bad").await.unwrap();
    let info = h.b().group_info(&s, &g).await.unwrap();
    assert_eq!((info.lag.lag, info.inflight, info.dead_letters), (1, 0, 1));
    assert_eq!(info.lag.partitions[&0].frontier, 1);
    assert_eq!(info.cursors, BTreeMap::from([(0, 2), (1, 1)]));

    let mut late = GroupSpec::new(gn("late"));
    late.start = StartPosition::After(StartAfter::PerPartition(BTreeMap::from([(0, 1)])));
    let late = h.group_with(&s, late).await;
    let info = h.b().group_info(&s, &late).await.unwrap();
    assert_eq!(info.cursors, BTreeMap::from([(0, 2), (1, 1)]), "start + 1");
    assert_eq!((info.lag.lag, info.max_attempts), (1, 5));
}

pub async fn redrive_selected_dead_letters_with_fresh_attempts(h: &Harness) {
    let (s, g, e) = setup(h, 3).await;
    let l = h.fetch(&s, &g, 10).await;
    h.reject(&l[0], "bad").await.unwrap();
    h.reject(&l[1], "bad").await.unwrap();
    h.ack(&l[2]).await.unwrap();

    let ids = |es: &[&Event]| Redrive::Events(es.iter().map(|e| e.id.clone()).collect());
    assert_eq!(h.b().redrive(&s, &g, ids(&[&e[0]])).await.unwrap(), 1);
    let back = h.fetch(&s, &g, 10).await;
    assert_eq!(back.len(), 1);
    assert_eq!((&back[0].event_id, back[0].attempt), (&e[0].id, 1));
    assert_eq!(dead_summary(h, &s, &g).await, [dl(&e[1], 1, "bad")]);

    let unknown = Redrive::Events(vec![eid("not-in-stream"), e[1].id.clone()]);
    assert_eq!(code(h.b().redrive(&s, &g, unknown).await), "invalid");
    assert_eq!(
        dead_summary(h, &s, &g).await,
        [dl(&e[1], 1, "bad")],
        "unchanged"
    );
    assert!(h.fetch(&s, &g, 10).await.is_empty());

    // Acked or leased events are not dead letters: counted 0, left alone.
    assert_eq!(
        h.b().redrive(&s, &g, ids(&[&e[2], &e[0]])).await.unwrap(),
        0
    );
    assert_eq!(
        h.b()
            .redrive(&s, &g, Redrive::Events(vec![]))
            .await
            .unwrap(),
        0
    );
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    h.ack(&back[0])
        .await
        .expect("the redriven lease is still held");
}

/// An event named twice in a redrive or a replay is one delivery,
/// re-opened and counted once (found by the model-based check on Redis,
/// `docs/groups.md#the-model-based-check`).
pub async fn an_event_named_twice_is_reopened_once(h: &Harness) {
    let (s, g, e) = setup(h, 2).await;
    let l = h.fetch(&s, &g, 10).await;
    h.reject(&l[0], "bad").await.unwrap();
    h.ack(&l[1]).await.unwrap();
    let twice = |e: &Event| vec![e.id.clone(), e.id.clone()];
    let n = h.b().redrive(&s, &g, Redrive::Events(twice(&e[0]))).await;
    assert_eq!(n.expect("redrive"), 1);
    let n = h.b().replay(&s, &g, Replay::EventIds(twice(&e[1]))).await;
    assert_eq!(n.expect("replay"), 1);
    let again = h.fetch(&s, &g, 10).await;
    assert_eq!(
        (pos(&again), attempts(&again)),
        (vec![(0, 1), (0, 2)], vec![1, 2])
    );
}

pub async fn redrive_all_dead_letters(h: &Harness) {
    let (s, g, e) = setup_with(h, 1, spec("g", 1, &[]), 3).await;
    let l = h.fetch(&s, &g, 10).await;
    h.nack(&l[0], "x", None).await.unwrap();
    h.reject(&l[1], "bad").await.unwrap();
    h.reject(&l[2], "bad").await.unwrap();
    assert_eq!(dead_all(h, &s, &g).await.len(), 3);

    assert_eq!(h.b().redrive(&s, &g, Redrive::All).await.unwrap(), 3);
    assert!(dead_all(h, &s, &g).await.is_empty());
    let back = h.fetch(&s, &g, 10).await;
    let ids: Vec<_> = back.iter().map(|l| l.event_id.clone()).collect();
    assert_eq!(ids, e.iter().map(|e| e.id.clone()).collect::<Vec<_>>());
    assert_eq!(attempts(&back), [1, 1, 1]);
    assert_eq!(h.b().redrive(&s, &g, Redrive::All).await.unwrap(), 0);

    // Attempts really restarted: with max_attempts 1 a nack dead-letters at attempt 1.
    h.nack(&back[0], "again", None).await.unwrap();
    assert_eq!(
        dead_summary(h, &s, &g).await,
        [dl(&e[0], 1, "max_attempts: again")]
    );
}
