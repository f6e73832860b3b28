//! Deletes on MongoDB (`docs/operations.md#deleting-streams-and-groups`):
//! no document of a deleted stream or group is left in any collection, a
//! delete that died after its first step is finished by the next create of
//! the name, and a node that still keeps a deleted stream or group (it has
//! not read the catalog generation again) finds it gone all the same.

use std::sync::Arc;
use std::time::Duration;

use mongodb::bson::{Document, doc};

use super::{connect_fresh, nodes_checking};
use crate::MongoBackend;
use rheo_core::backend::conformance::lifecycle::{delete_group, delete_stream};
use rheo_core::backend::conformance::{Harness, START, code, gn, nodes};
use rheo_core::backend::{Backend, CreateStream};
use rheo_core::clock::FrozenClock;
use rheo_core::model::{EventInput, GroupName, GroupOrdering, GroupSpec, StreamName};

/// Per collection of the database, how many documents `filter` selects
/// (collections with none left out).
async fn documents(b: &MongoBackend, filter: Document) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for name in b.db.list_collection_names().await.expect("collections") {
        let n = (b.coll(&name).count_documents(filter.clone()).await).expect("count");
        if n > 0 {
            out.push((name, n));
        }
    }
    out.sort();
    out
}

/// The documents of stream `s`: its own, and every one keyed by it.
fn of_stream(s: &StreamName) -> Document {
    doc! {"$or": [{"_id": s.as_str()}, {"s": s.as_str()}]}
}

fn of_group(s: &StreamName, g: &GroupName) -> Document {
    doc! {"s": s.as_str(), "g": g.as_str()}
}

/// A stream of two partitions with a plain group (leases out, a dead
/// letter) and a key-ordered one (heads leased, the rest parked behind
/// their gates): documents in every collection.
async fn busy_stream(h: &Harness, name: &str) -> (StreamName, GroupName, GroupName) {
    let s = h.stream(name, 2).await;
    let plain = h.group(&s, "plain").await;
    let spec = GroupSpec {
        ordering: GroupOrdering::Key,
        ..GroupSpec::new(gn("ordered"))
    };
    let ordered = h.group_with(&s, spec).await;
    let inputs = (0..6)
        .map(|i| EventInput {
            partition: Some(i % 2),
            key: Some(format!("k{}", i % 3)),
            ..EventInput::default()
        })
        .collect();
    h.append_inputs(&s, inputs).await;
    let leases = h.fetch(&s, &plain, 3).await;
    h.reject(&leases[0], "dead").await.expect("reject");
    assert!(!h.fetch(&s, &ordered, 10).await.is_empty());
    (s, plain, ordered)
}

async fn harness() -> Option<(Harness, MongoBackend)> {
    let clock = FrozenClock::new(START);
    let b = connect_fresh(clock.clone()).await?;
    let h = Harness::on(Arc::new(b.clone()), clock);
    Some((h, b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_stream_leaves_no_document() {
    let Some((h, b)) = harness().await else {
        return;
    };
    let (s, _, _) = busy_stream(&h, "doomed").await;
    let (kept, _, _) = busy_stream(&h, "kept").await;
    let before = documents(&b, of_stream(&s)).await;
    for coll in [
        crate::STREAMS,
        crate::EVENTS,
        crate::GROUPS,
        crate::DELIVERIES,
        crate::GATES,
    ] {
        assert!(
            before.iter().any(|(name, _)| name == coll),
            "{coll} has documents of the stream: {before:?}"
        );
    }
    let kept_before = documents(&b, of_stream(&kept)).await;

    delete_stream(h.b(), &s, true).await.expect("delete");
    assert_eq!(documents(&b, of_stream(&s)).await, []);
    assert_eq!(documents(&b, of_stream(&kept)).await, kept_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_group_leaves_no_document() {
    let Some((h, b)) = harness().await else {
        return;
    };
    let (s, plain, ordered) = busy_stream(&h, "s").await;
    for g in [&plain, &ordered] {
        let others = documents(&b, of_stream(&s)).await;
        assert_ne!(documents(&b, of_group(&s, g)).await, []);
        delete_group(h.b(), &s, g, true).await.expect("delete");
        assert_eq!(documents(&b, of_group(&s, g)).await, [], "{g:?}");
        // Only the group's documents went.
        let left = documents(&b, of_stream(&s)).await;
        assert!(
            left.iter().any(|(name, _)| name == crate::EVENTS),
            "{left:?}"
        );
        assert_ne!(left, others);
    }
    let stream = h.b().get_stream(&s).await.expect("the stream stays");
    assert_eq!(stream.high_watermarks, [3, 3]);
}

/// A delete that died after its first step (the stream's document gone,
/// the tombstone left, the rest not removed yet) is finished by the next
/// create of the name, which starts empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_finishes_a_delete_that_died_half_way() {
    let Some((h, b)) = harness().await else {
        return;
    };
    let (s, plain, _) = busy_stream(&h, "s").await;
    b.retire_group(&s, &plain).await.expect("first step");
    assert_ne!(documents(&b, of_group(&s, &plain)).await, []);
    let g = h.group(&s, "plain").await;
    let info = h.b().group_info(&s, &g).await.expect("info");
    assert_eq!((info.inflight, info.dead_letters), (0, 0));
    assert_eq!(
        h.fetch(&s, &g, 10).await.len(),
        6,
        "the group starts afresh"
    );

    b.retire_stream(&s).await.expect("first step");
    assert_eq!(code(h.b().get_stream(&s).await), "stream_not_found");
    assert!(
        documents(&b, of_stream(&s)).await.len() > 1,
        "documents and the tombstone are left"
    );
    let created = h
        .b()
        .create_stream(CreateStream {
            name: s.clone(),
            partition_count: 1,
            retention: None,
        })
        .await
        .expect("create again");
    assert_eq!(created.high_watermarks, [0]);
    assert_eq!(
        documents(&b, of_stream(&s)).await,
        [(crate::STREAMS.to_owned(), 1)],
        "only the new stream's document"
    );
    assert!(h.b().list_groups(&s).await.expect("groups").is_empty());
}

/// Two nodes where b reads the catalog generation once only: what it keeps
/// of a deleted stream or group stays, and its calls find them gone all
/// the same.
async fn stale_nodes(
    clock: rheo_core::clock::SharedClock,
) -> Option<(Arc<dyn Backend>, Arc<dyn Backend>)> {
    nodes_checking(clock, Duration::from_secs(3600)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_that_keeps_a_deleted_stream_finds_it_gone() {
    if let Some(n) = nodes::Nodes::start(stale_nodes).await {
        nodes::a_stream_deleted_on_one_node_is_gone_on_the_other(&n).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_that_keeps_a_deleted_group_finds_it_gone() {
    if let Some(n) = nodes::Nodes::start(stale_nodes).await {
        nodes::a_group_deleted_on_one_node_is_gone_on_the_other(&n).await;
    }
}

/// b keeps a stream of two partitions; a deletes it and creates one of
/// three under the name: b's calls with what it kept answer
/// `stream_not_found` once, write nothing, and then serve the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_that_keeps_a_stream_created_again_writes_nothing_to_it() {
    let Some(n) = nodes::Nodes::start(stale_nodes).await else {
        return;
    };
    let s = n.a.stream("s", 2).await;
    let g = n.a.group(&s, "g").await;
    n.b.append_n(&s, 1).await;
    assert_eq!(n.b.fetch(&s, &g, 10).await.len(), 1);
    delete_stream(n.a.b(), &s, true).await.expect("delete");
    n.a.stream("s", 3).await;
    let g = n.a.group(&s, "g").await;

    let input = EventInput {
        partition: Some(1),
        ..EventInput::default()
    };
    let r = n.b.backend.append(&s, vec![input.clone()]).await;
    assert_eq!(
        code(r),
        "stream_not_found",
        "b's append, routed for the old"
    );
    let stream = n.a.b().get_stream(&s).await.expect("stream");
    assert_eq!(stream.high_watermarks, [0, 0, 0]);
    let appended = n.b.backend.append(&s, vec![input]).await.expect("append");
    assert_eq!(appended[0].event.sequence, 1);
    let leases = n.b.fetch(&s, &g, 10).await;
    assert_eq!(leases.len(), 1);
    assert_eq!((leases[0].event.partition, leases[0].attempt), (1, 1));
}
