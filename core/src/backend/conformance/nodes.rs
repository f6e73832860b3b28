//! Checks for stores that several Rheo servers share (`Capabilities::multi_node`):
//! two backends opened on one store act as two nodes, and must agree.
//!
//! ```ignore
//! async fn nodes(clock: SharedClock) -> Option<(Arc<dyn Backend>, Arc<dyn Backend>)> { … }
//! rheo::shared_store_conformance!(nodes);
//! ```

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::{Harness, START, cid, gn, sn};
use crate::backend::{Backend, CreateStream, FetchRequest, Partitions};
use crate::clock::{FrozenClock, SharedClock};
use crate::model::{EventId, EventInput, GroupSpec};

/// Two nodes on one store, reading one frozen clock.
#[derive(Debug)]
pub struct Nodes {
    pub a: Harness,
    pub b: Harness,
}

impl Nodes {
    /// Opens both nodes; `None` when the factory skips.
    pub async fn start<F, Fut>(factory: F) -> Option<Nodes>
    where
        F: FnOnce(SharedClock) -> Fut,
        Fut: Future<Output = Option<(Arc<dyn Backend>, Arc<dyn Backend>)>>,
    {
        let clock = FrozenClock::new(START);
        let (a, b) = factory(clock.clone()).await?;
        let harness = |backend| Harness::on(backend, clock.clone());
        Some(Nodes {
            a: harness(a),
            b: harness(b),
        })
    }
}

/// Six consumers, three per node, drain one group: every event is acked
/// once, none is held by two consumers at a time, and both nodes see the
/// group caught up.
pub async fn two_nodes_ack_every_event_exactly_once(n: &Nodes) {
    const EVENTS: usize = 1000;
    let s = n.a.stream("orders", 4).await;
    let g = n.b.group(&s, "billing").await;
    let mut ids = HashSet::new();
    for chunk in 0..EVENTS / 100 {
        let batch = (0..100)
            .map(|i| EventInput {
                key: Some(format!("k{}", chunk * 100 + i)),
                ..EventInput::default()
            })
            .collect();
        for event in n.a.append_inputs(&s, batch).await {
            ids.insert(event.id);
        }
    }

    let held = Arc::new(Mutex::new(HashSet::new()));
    let acked: Arc<Mutex<HashMap<EventId, usize>>> = Arc::default();
    let done = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for (node, backend) in [&n.a.backend, &n.b.backend].into_iter().enumerate() {
        for w in 0..3 {
            let (backend, s, g) = (backend.clone(), s.clone(), g.clone());
            let (held, acked, done) = (held.clone(), acked.clone(), done.clone());
            workers.push(tokio::spawn(async move {
                let consumer = cid(&format!("node{node}-w{w}"));
                while done.load(Ordering::SeqCst) < EVENTS {
                    let leases = backend
                        .fetch(FetchRequest {
                            stream: s.clone(),
                            group: g.clone(),
                            limit: 1 + rand::random::<u32>() % 25,
                            consumer_id: consumer.clone(),
                            lease_ms: 60_000,
                            partitions: Partitions::All,
                        })
                        .await
                        .expect("fetch");
                    if leases.is_empty() {
                        tokio::task::yield_now().await;
                        continue;
                    }
                    for lease in &leases {
                        let first = held.lock().insert(lease.event_id.clone());
                        assert!(first, "{} leased to two consumers", lease.event_id);
                    }
                    for lease in leases {
                        let id = lease.event_id.clone();
                        backend.ack(&s, &g, lease.into_target()).await.expect("ack");
                        held.lock().remove(&id);
                        *acked.lock().entry(id).or_insert(0) += 1;
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }));
        }
    }
    for w in workers {
        w.await.expect("worker");
    }
    let acked = acked.lock().clone();
    assert!(acked.values().all(|n| *n == 1), "each event acked once");
    assert_eq!(acked.into_keys().collect::<HashSet<_>>(), ids);
    for node in [&n.a, &n.b] {
        let lag = node.lag(&s, &g).await;
        assert_eq!((lag.lag, lag.inflight, lag.pending), (0, 0, 0));
    }
}

/// The same id appended on both nodes at once is stored once: one node
/// gets it as new, the other as a duplicate, with the same sequence.
pub async fn concurrent_appends_of_one_id_store_it_once(n: &Nodes) {
    let s = n.a.stream("s", 2).await;
    for round in 0..20 {
        let input = EventInput {
            id: Some(EventId::parse(format!("e-{round}")).unwrap()),
            key: Some(format!("k{round}")),
            ..EventInput::default()
        };
        let (a, b) = tokio::join!(
            n.a.backend.append(&s, vec![input.clone()]),
            n.b.backend.append(&s, vec![input]),
        );
        let (a, b) = (
            a.expect("append on a").remove(0),
            b.expect("append on b").remove(0),
        );
        assert_ne!(
            a.duplicate, b.duplicate,
            "round {round}: exactly one is new"
        );
        assert_eq!(a.event, b.event, "round {round}: both see the stored event");
    }
    let stream = n.b.backend.get_stream(&s).await.expect("get stream");
    assert_eq!(stream.high_watermarks.iter().sum::<u64>(), 20);
}

/// An append on one node wakes a subscriber on the other, where the store
/// carries wake-ups between processes.
pub async fn an_append_on_one_node_wakes_the_other(n: &Nodes) {
    if !n.b.backend.capabilities().cross_process_wakeups {
        return;
    }
    let s = n.a.stream("s", 1).await;
    n.b.backend
        .get_stream(&s)
        .await
        .expect("the other node sees the stream");
    let mut w = n.b.backend.subscribe(&s);
    w.mark_seen();
    n.a.append_n(&s, 1).await;
    tokio::time::timeout(Duration::from_secs(10), w.changed())
        .await
        .expect("an append on node a wakes node b");
}

/// A group created on one node is served by the other.
pub async fn a_group_created_on_one_node_is_served_by_the_other(n: &Nodes) {
    n.a.backend
        .create_stream(CreateStream {
            name: sn("s"),
            partition_count: 1,
            retention: None,
        })
        .await
        .expect("create stream");
    n.a.backend
        .create_group(&sn("s"), GroupSpec::new(gn("g")))
        .await
        .expect("create group");
    n.a.append_n(&sn("s"), 2).await;
    let leases = n.b.fetch(&sn("s"), &gn("g"), 10).await;
    assert_eq!(leases.len(), 2);
    let groups =
        n.b.backend
            .list_groups(&sn("s"))
            .await
            .expect("list groups");
    assert_eq!(groups.len(), 1);
}

/// One node changes a group's ordering with a reset while the other has
/// served the group under the old one: the other keeps the new ordering
/// from its next fetch on, and its acks let each key's next event through.
pub async fn an_ordering_changed_on_one_node_holds_on_the_other(n: &Nodes) {
    use crate::backend::conformance::ordering::reset_to;
    use crate::model::GroupOrdering;
    let s = sn("s");
    n.a.backend
        .create_stream(CreateStream {
            name: s.clone(),
            partition_count: 1,
            retention: None,
        })
        .await
        .expect("create stream");
    let g = n.a.group(&s, "g").await;
    let keyed = |key: &str| EventInput {
        key: Some(key.to_owned()),
        ..EventInput::default()
    };
    n.a.append_inputs(&s, vec![keyed("a"), keyed("a"), keyed("a")])
        .await;
    let reset = |ordering| reset_to(&s, &g, ordering);
    let sequences = |leases: &[crate::model::Lease]| {
        leases.iter().map(|l| l.event.sequence).collect::<Vec<_>>()
    };
    // Node b serves the group unordered: it knows it as such from now on.
    assert_eq!(n.b.fetch(&s, &g, 1).await.len(), 1);
    n.a.backend
        .reset(reset(GroupOrdering::Key))
        .await
        .expect("a reset to key ordering");
    // Its next fetch keeps the new ordering.
    let first = n.b.fetch(&s, &g, 10).await;
    assert_eq!(sequences(&first), [1], "one of key a at a time");
    assert!(n.a.fetch(&s, &g, 10).await.is_empty(), "a is out");

    // Unordered again, and node b serves it so.
    n.a.backend
        .reset(reset(GroupOrdering::None))
        .await
        .expect("a reset to none");
    assert_eq!(n.b.fetch(&s, &g, 10).await.len(), 3);
    n.a.backend
        .reset(reset(GroupOrdering::Key))
        .await
        .expect("a reset to key ordering");
    // Node a hands out the head; node b, which knows the group unordered,
    // acks it: the key's next event goes out.
    let head = n.a.fetch(&s, &g, 10).await;
    assert_eq!(sequences(&head), [1]);
    n.b.ack(&head[0]).await.expect("ack on node b");
    let next = n.a.fetch(&s, &g, 10).await;
    assert_eq!(sequences(&next), [2]);
}

/// Node b has served a stream; node a deletes it: b's next calls find it
/// gone, whatever b kept of it, and once a creates it again b serves the
/// new one from its first event (`docs/operations.md#deleting-streams-and-groups`).
pub async fn a_stream_deleted_on_one_node_is_gone_on_the_other(n: &Nodes) {
    use crate::backend::conformance::{code, lifecycle::delete_stream};
    let s = n.a.stream("s", 2).await;
    let g = n.a.group(&s, "g").await;
    n.b.append_n(&s, 3).await;
    let held = n.b.fetch(&s, &g, 1).await;
    delete_stream(n.a.b(), &s, true).await.expect("delete on a");

    let r = n.b.backend.append(&s, vec![EventInput::default()]).await;
    assert_eq!(code(r), "stream_not_found", "append on b");
    let r = n.b.backend.fetch(n.b.fetch_req(&s, &g, 10)).await;
    assert_eq!(code(r), "stream_not_found", "fetch on b");
    let r = n.b.ack(&held[0]).await;
    assert_eq!(code(r), "stream_not_found", "ack on b");
    let r = n.b.backend.group_info(&s, &g).await;
    assert_eq!(code(r), "stream_not_found", "group info on b");

    let s = n.a.stream("s", 2).await;
    let g = n.a.group(&s, "g").await;
    n.b.append_n(&s, 1).await;
    let leases = n.b.fetch(&s, &g, 10).await;
    let seen: Vec<_> = leases
        .iter()
        .map(|l| (l.event.sequence, l.attempt))
        .collect();
    assert_eq!(seen, [(1, 1)], "b serves the new stream");
    n.b.ack(&leases[0]).await.expect("ack on b");
    assert_eq!(n.a.lag(&s, &g).await.lag, 0);
}

/// Node b has served a group; node a deletes it: b's calls on it find it
/// gone, and a group created again under the name starts afresh on b.
pub async fn a_group_deleted_on_one_node_is_gone_on_the_other(n: &Nodes) {
    use crate::backend::conformance::{code, lifecycle::delete_group};
    let s = n.a.stream("s", 1).await;
    let g = n.a.group(&s, "g").await;
    n.a.append_n(&s, 2).await;
    let held = n.b.fetch(&s, &g, 1).await;
    delete_group(n.a.b(), &s, &g, true)
        .await
        .expect("delete on a");

    let r = n.b.backend.fetch(n.b.fetch_req(&s, &g, 10)).await;
    assert_eq!(code(r), "group_not_found", "fetch on b");
    let r = n.b.ack(&held[0]).await;
    assert_eq!(code(r), "group_not_found", "ack on b");

    let g = n.a.group(&s, "g").await;
    let leases = n.b.fetch(&s, &g, 10).await;
    let seen: Vec<_> = leases
        .iter()
        .map(|l| (l.event.sequence, l.attempt))
        .collect();
    assert_eq!(seen, [(1, 1), (2, 1)], "b serves the new group");
    let r = n.b.ack(&held[0]).await;
    assert!(r.is_err(), "the old group's lease settles nothing");
}

/// Four consumers, two per node, drain a key-ordered group while some
/// deliveries are retried and some settled through the other node: no two
/// deliveries of one key are ever out at once, and each key's events are
/// processed in sequence order (`docs/groups.md#ordering`).
pub async fn two_nodes_never_hold_two_of_one_key(n: &Nodes) {
    use crate::backend::conformance::ordering::{assert_each_key_in_order, interleaved_keys};
    use crate::model::GroupOrdering;
    const KEYS: usize = 10;
    const PER_KEY: usize = 20;
    let s = n.a.stream("orders", 2).await;
    let mut spec = GroupSpec::new(gn("keyed"));
    spec.ordering = GroupOrdering::Key;
    let g =
        n.b.backend
            .create_group(&s, spec)
            .await
            .expect("group")
            .name;
    n.a.append_inputs(&s, interleaved_keys(KEYS, PER_KEY)).await;

    let out = Arc::new(Mutex::new(HashSet::<(u32, String)>::new()));
    let done = Arc::new(Mutex::new(Vec::<(u32, String, u64)>::new()));
    let backends = [n.a.backend.clone(), n.b.backend.clone()];
    let mut workers = Vec::new();
    for (node, backend) in backends.iter().enumerate() {
        for w in 0..2 {
            let (s, g) = (s.clone(), g.clone());
            let (backend, other) = (backend.clone(), backends[1 - node].clone());
            let (out, done) = (out.clone(), done.clone());
            workers.push(tokio::spawn(async move {
                let consumer = cid(&format!("node{node}-w{w}"));
                for _ in 0..100_000 {
                    if done.lock().len() == KEYS * PER_KEY {
                        return;
                    }
                    let leases = backend
                        .fetch(FetchRequest {
                            stream: s.clone(),
                            group: g.clone(),
                            limit: 1 + rand::random::<u32>() % 6,
                            consumer_id: consumer.clone(),
                            lease_ms: 60_000,
                            partitions: Partitions::All,
                        })
                        .await
                        .expect("fetch");
                    for lease in &leases {
                        let key = (lease.event.partition, lease.event.key.clone().unwrap());
                        assert!(out.lock().insert(key.clone()), "two of {key:?} out at once");
                    }
                    tokio::task::yield_now().await;
                    for lease in leases {
                        let key = (lease.event.partition, lease.event.key.clone().unwrap());
                        // Settled through either node, whichever fetched it.
                        let via = if rand::random::<bool>() {
                            &backend
                        } else {
                            &other
                        };
                        out.lock().remove(&key);
                        if lease.attempt == 1 && rand::random::<u32>().is_multiple_of(4) {
                            via.nack(&s, &g, lease.target(), Some("again".into()), Some(0))
                                .await
                                .expect("nack");
                            continue;
                        }
                        // Recorded before the ack: once acked, the key's
                        // next event may go out to another consumer.
                        done.lock().push((key.0, key.1, lease.event.sequence));
                        via.ack(&s, &g, lease.into_target()).await.expect("ack");
                    }
                }
                panic!("consumer node{node}-w{w} gave up before every event was processed");
            }));
        }
    }
    for w in workers {
        w.await.expect("worker");
    }
    assert_each_key_in_order(done.lock().clone(), KEYS, PER_KEY);
    for node in [&n.a, &n.b] {
        let lag = node.lag(&s, &g).await;
        assert_eq!((lag.lag, lag.inflight, lag.pending), (0, 0, 0));
    }
}

/// Under `flow.key_rate` both nodes take tokens from one bucket per key,
/// kept in the store: racing fetches on both get a key's burst, not one
/// each, then one claim per interval between them.
pub async fn two_nodes_share_a_keys_rate(n: &Nodes) {
    use crate::model::{Flow, KeyRate};
    let s = n.a.stream("paced", 1).await;
    let mut spec = GroupSpec::new(gn("paced"));
    spec.flow = Flow {
        key_rate: Some(KeyRate {
            per_second: 1.0,
            burst: 2,
        }),
        ..Flow::default()
    };
    let g =
        n.a.backend
            .create_group(&s, spec)
            .await
            .expect("group")
            .name;
    let inputs = (0..8)
        .map(|_| EventInput {
            key: Some("a".into()),
            ..EventInput::default()
        })
        .collect();
    n.b.append_inputs(&s, inputs).await;
    for round in 0..4 {
        let (a, b) = (n.a.backend.clone(), n.b.backend.clone());
        let (ra, rb) = (n.a.fetch_req(&s, &g, 4), n.b.fetch_req(&s, &g, 4));
        let (got_a, got_b) = tokio::join!(
            tokio::spawn(async move { a.fetch(ra).await }),
            tokio::spawn(async move { b.fetch(rb).await })
        );
        let leases: Vec<_> = [got_a, got_b]
            .into_iter()
            .flat_map(|got| got.expect("node").expect("fetch"))
            .collect();
        let want = if round == 0 { 2 } else { 1 };
        assert_eq!(leases.len(), want, "round {round}: {leases:?}");
        for lease in &leases {
            n.b.ack(lease).await.expect("ack");
        }
        n.a.clock.advance(1_000);
    }
    let lag = n.b.lag(&s, &g).await;
    assert_eq!((lag.inflight, lag.lag), (0, 3), "three left, paced");
}

/// Expands to one `#[tokio::test]` per shared-store check for a factory
/// `async fn(SharedClock) -> Option<(Arc<dyn Backend>, Arc<dyn Backend>)>`
/// that opens two backends on one store.
#[macro_export]
macro_rules! shared_store_conformance {
    ($factory:path) => {
        $crate::__shared_store_tests!($factory [
            two_nodes_ack_every_event_exactly_once,
            concurrent_appends_of_one_id_store_it_once,
            an_append_on_one_node_wakes_the_other,
            a_group_created_on_one_node_is_served_by_the_other,
            an_ordering_changed_on_one_node_holds_on_the_other,
            two_nodes_never_hold_two_of_one_key,
            two_nodes_share_a_keys_rate,
            a_stream_deleted_on_one_node_is_gone_on_the_other,
            a_group_deleted_on_one_node_is_gone_on_the_other,
        ]);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __shared_store_tests {
    ($factory:path [ $($check:ident),* $(,)? ]) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                use $crate::backend::conformance::nodes;
                if let Some(n) = nodes::Nodes::start($factory).await {
                    nodes::$check(&n).await;
                }
            }
        )*
    };
}
