//! Flow control on MongoDB (`docs/groups.md#flow`): a gate's slots travel
//! with its deliveries (`n`), so a node that still keeps a group's old
//! `key_concurrency` (another node's reset changed it) lets through no
//! more than the group's limit now when it settles; `flow.key_rate`'s
//! buckets are documents of `rheo_rates`, which a reset and a delete
//! remove, and a fetch reads a partition's claimable deliveries on past
//! those it paces, in sequence order.

use std::sync::Arc;

use mongodb::bson::doc;

use super::{connect_fresh, nodes};
use rheo_core::backend::ResetRequest;
use rheo_core::backend::conformance::lifecycle::delete_group;
use rheo_core::backend::conformance::{Harness, START, gn, nodes::Nodes};
use rheo_core::clock::FrozenClock;
use rheo_core::model::{EventInput, Flow, GroupName, GroupSpec, Lease, StreamName};

fn limit(n: u32) -> Flow {
    Flow {
        key_concurrency: Some(n),
        ..Flow::default()
    }
}

fn sequences(leases: &[Lease]) -> Vec<u64> {
    leases.iter().map(|l| l.event.sequence).collect()
}

/// Stream `s` (one partition) with four events of key `x` and group `g`
/// limited to `n` of a key.
async fn keyed(h: &Harness, n: u32) -> (StreamName, GroupName) {
    let s = h.stream("s", 1).await;
    let spec = GroupSpec {
        flow: limit(n),
        ..GroupSpec::new(gn("g"))
    };
    let g = h.group_with(&s, spec).await;
    let x = || EventInput {
        key: Some("x".to_owned()),
        ..EventInput::default()
    };
    h.append_inputs(&s, vec![x(), x(), x(), x()]).await;
    (s, g)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_keeping_an_old_limit_settles_by_the_new_one() {
    let Some(n) = Nodes::start(nodes).await else {
        return;
    };
    let (s, g) = keyed(&n.a, 3).await;
    // Node b serves the group with three of a key: it keeps that.
    assert_eq!(sequences(&n.b.fetch(&s, &g, 10).await), [1, 2, 3]);
    let one = ResetRequest {
        flow: Some(limit(1)),
        ..ResetRequest::to_the_beginning(&s, &g)
    };
    n.a.backend.reset(one).await.expect("reset to one of a key");
    let head = n.a.fetch(&s, &g, 10).await;
    assert_eq!(sequences(&head), [1]);
    // Node b settles under its old limit: the gate still lets one through.
    n.b.ack(&head[0]).await.expect("ack on node b");
    assert_eq!(sequences(&n.a.fetch(&s, &g, 10).await), [2], "one of x");
    assert!(
        n.b.fetch(&s, &g, 10).await.is_empty(),
        "b reads the new limit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flow_is_stored_with_the_group_and_the_slots_with_gated_deliveries() {
    let clock = FrozenClock::new(START);
    let Some(b) = connect_fresh(clock.clone()).await else {
        return;
    };
    let h = Harness::on(Arc::new(b.clone()), clock);
    let (s, g) = keyed(&h, 2).await;
    assert_eq!(sequences(&h.fetch(&s, &g, 10).await), [1, 2]);
    let group = doc! {"s": s.as_str(), "g": g.as_str()};
    let stored = b.coll(crate::GROUPS).find_one(group.clone()).await;
    let stored = stored.expect("read").expect("the group");
    assert_eq!(
        stored.get_str("flow").ok(),
        Some(r#"{"key_concurrency":2}"#)
    );
    let mut gated = group.clone();
    gated.insert("k", "x");
    let deliveries = b.find_all(crate::DELIVERIES, gated, None, 0).await;
    let slots: Vec<i64> = (deliveries.expect("read").iter())
        .map(|d| crate::int(d, "n").expect("slots"))
        .collect();
    assert_eq!(slots, [2, 2, 2, 2], "two leased, two parked");

    // A group stored before flows existed has none.
    let plain = h.group(&s, "plain").await;
    let old = doc! {"s": s.as_str(), "g": plain.as_str()};
    (b.coll(crate::GROUPS))
        .update_one(old, doc! {"$unset": {"flow": ""}})
        .await
        .expect("unset");
    b.forget_group(&s, &plain);
    let info = h.b().group_info(&s, &plain).await.expect("group info");
    assert!(info.flow.is_off());
    assert_eq!(h.fetch(&s, &plain, 10).await.len(), 4, "no limit");
}

/// The buckets of group `g` as stored: (key's document id's last part, TAT).
async fn buckets(b: &crate::MongoBackend, s: &StreamName, g: &GroupName) -> Vec<(String, i64)> {
    let of = doc! {"s": s.as_str(), "g": g.as_str()};
    let found = b.find_all(crate::RATES, of, None, 0).await.expect("read");
    found
        .iter()
        .map(|d| {
            let id = d.get_str("_id").expect("id");
            let key = id.rsplit('\u{1f}').next().expect("key").to_owned();
            (key, crate::int(d, "t").expect("tat"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_rate_buckets_are_stored_per_key_and_go_with_a_reset_and_a_delete() {
    let clock = FrozenClock::new(START);
    let Some(b) = connect_fresh(clock.clone()).await else {
        return;
    };
    let h = Harness::on(Arc::new(b.clone()), clock);
    let s = h.stream("s", 1).await;
    let spec = || GroupSpec {
        flow: Flow::paced(1.0, 1),
        ..GroupSpec::new(gn("g"))
    };
    let g = h.group_with(&s, spec()).await;
    let x = || EventInput {
        key: Some("x".to_owned()),
        ..EventInput::default()
    };
    h.append_inputs(&s, vec![x(), x(), x(), EventInput::default()])
        .await;
    assert_eq!(sequences(&h.fetch(&s, &g, 10).await), [1, 4]);
    let stored = doc! {"s": s.as_str(), "g": g.as_str()};
    assert_eq!(
        (b.coll(crate::GROUPS).find_one(stored.clone()).await)
            .expect("read")
            .expect("the group")
            .get_str("flow")
            .ok(),
        Some(r#"{"key_rate":{"per_second":1.0,"burst":1}}"#)
    );
    // x's TAT: one claim and two slots reserved, a second each.
    let now_us = START.as_millis() * 1000;
    assert_eq!(
        buckets(&b, &s, &g).await,
        [("x".to_owned(), now_us + 3_000_000)]
    );
    let mut paced = stored.clone();
    paced.insert("pc", true);
    let marked: Vec<(i64, i64, i64)> =
        (b.find_all(crate::DELIVERIES, paced, Some(doc! {"q": 1}), 0))
            .await
            .expect("read")
            .iter()
            .map(|d| {
                let field = |f| crate::int(d, f).expect(f);
                (field("q"), field("due"), field("a"))
            })
            .collect();
    let at = |ms| START.as_millis() + ms;
    assert_eq!(
        marked,
        [(2, at(1_000), 0), (3, at(2_000), 0)],
        "paced, no attempt"
    );

    // A reset: full buckets again.
    (h.b().reset(ResetRequest::to_the_beginning(&s, &g)))
        .await
        .expect("reset");
    assert!(buckets(&b, &s, &g).await.is_empty());
    assert_eq!(sequences(&h.fetch(&s, &g, 10).await), [1, 4]);
    assert_eq!(buckets(&b, &s, &g).await.len(), 1);

    // A delete removes them; the group created again starts full.
    delete_group(h.b(), &s, &g, true).await.expect("delete");
    assert!(buckets(&b, &s, &g).await.is_empty());
    let g = h.group_with(&s, spec()).await;
    assert_eq!(sequences(&h.fetch(&s, &g, 10).await), [1, 4]);
}

/// A fetch goes through a partition's claimable deliveries in sequence
/// order past those it paces, reading them in growing batches and merging
/// the available ones with the expired leases, before it takes an unseen
/// event (`docs/groups.md#flow`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_rate_claims_read_on_past_paced_deliveries_in_sequence_order() {
    let clock = FrozenClock::new(START);
    let Some(b) = connect_fresh(clock.clone()).await else {
        return;
    };
    let h = Harness::on(Arc::new(b.clone()), clock.clone());
    let s = h.stream("s", 1).await;
    // A token every ten seconds, six at once.
    let spec = GroupSpec {
        flow: Flow::paced(0.1, 6),
        ..GroupSpec::new(gn("g"))
    };
    let g = h.group_with(&s, spec).await;
    let keyed = |key: &str| EventInput {
        key: Some(key.to_owned()),
        ..EventInput::default()
    };
    let mut events: Vec<EventInput> = (0..6).map(|_| keyed("a")).collect();
    events.extend([keyed("b"), keyed("e")]);
    h.append_inputs(&s, events).await;
    let first = h.fetch(&s, &g, 7).await;
    assert_eq!(sequences(&first), [1, 2, 3, 4, 5, 6, 7], "a's burst, b");
    let short = h.fetch_as(&s, &g, 1, "c2", 1_000).await;
    assert_eq!(sequences(&short), [8]);
    // a's six retries are due at once but a has no token left; b7's retry
    // comes after them, e8's expired lease after it; c9 is unseen.
    for lease in &first {
        h.nack(lease, "again", Some(0)).await.expect("nack");
    }
    h.append_inputs(&s, vec![keyed("c")]).await;
    clock.advance(1_000);
    let again = h.fetch(&s, &g, 1).await;
    assert_eq!(sequences(&again), [7], "past a's six paced retries");
    assert_eq!(again[0].attempt, 2);
    assert_eq!(sequences(&h.fetch(&s, &g, 1).await), [8], "expired");
    assert_eq!(sequences(&h.fetch(&s, &g, 1).await), [9]);
    assert!(
        h.fetch(&s, &g, 10).await.is_empty(),
        "a waits for its slots"
    );
    let lag = h.lag(&s, &g).await;
    assert_eq!((lag.inflight, lag.waiting_retry, lag.pending), (3, 6, 0));
}
