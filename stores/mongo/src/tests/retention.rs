//! Retention on MongoDB (`docs/log.md#retention`, `retention.rs`): after a
//! trim no document of a removed event is left, and of the groups'
//! deliveries below the log start only dead letters stay (with their
//! event's id); the gates of removed heads have let their next delivery
//! out.

use std::sync::Arc;

use mongodb::bson::{Document, doc};

use crate::MongoBackend;
use crate::tests::connect_fresh;
use rheo_core::backend::conformance::{Harness, START, gn};
use rheo_core::backend::retention::{TRIM_BATCH, trim_stream};
use rheo_core::clock::FrozenClock;
use rheo_core::model::{EventInput, GroupOrdering, GroupSpec, Retention};

async fn count(b: &MongoBackend, coll: &str, filter: Document) -> u64 {
    (b.coll(coll).count_documents(filter).await).expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trim_leaves_no_document_of_the_removed_events_but_dead_letters() {
    let clock = FrozenClock::new(START);
    let Some(b) = connect_fresh(clock.clone()).await else {
        return;
    };
    let h = Harness::on(Arc::new(b.clone()), clock);
    let s = h.stream("s", 1).await;
    let plain = h.group(&s, "plain").await;
    let spec = GroupSpec {
        ordering: GroupOrdering::Key,
        ..GroupSpec::new(gn("ordered"))
    };
    let ordered = h.group_with(&s, spec).await;
    let inputs = (0..10)
        .map(|i| EventInput {
            key: Some(format!("k{}", i % 3)),
            ..EventInput::default()
        })
        .collect();
    let events = h.append_inputs(&s, inputs).await;
    // plain: 1 acked, 2 dead, 3 and 4 leased, 5 on never delivered.
    let leases = h.fetch(&s, &plain, 4).await;
    h.ack(&leases[0]).await.expect("ack");
    h.reject(&leases[1], "bad").await.expect("reject");
    // ordered: the heads 1, 2, 3 leased, the rest parked; 1 acked lets 4 out.
    let heads = h.fetch(&s, &ordered, 10).await;
    assert_eq!(heads.len(), 3);
    h.ack(&heads[0]).await.expect("ack");

    let keep = Retention {
        max_events: Some(3),
        ..Retention::default()
    };
    h.b().set_retention(&s, Some(keep)).await.expect("set");
    let report = trim_stream(h.b(), &s, TRIM_BATCH).await.expect("trim");
    assert_eq!(report.removed, 7);
    assert_eq!(
        report.skipped.get(&plain),
        Some(&5),
        "3, 4 leased; 5 to 7 never"
    );
    assert_eq!(report.skipped.get(&ordered), Some(&6), "2 to 7 open");

    let below = doc! {"s": s.as_str(), "q": {"$lt": 8_i64}};
    assert_eq!(count(&b, crate::EVENTS, below.clone()).await, 0);
    assert_eq!(count(&b, crate::EVENTS, doc! {"s": s.as_str()}).await, 3);
    let left = (b.find_all(crate::DELIVERIES, below, None, 0).await).expect("deliveries");
    assert_eq!(left.len(), 1, "only the dead letter: {left:?}");
    let dead = &left[0];
    assert_eq!(dead.get_str("g").ok(), Some(plain.as_str()));
    assert_eq!(dead.get_str("st").ok(), Some(crate::claims::DEAD));
    assert_eq!(dead.get_str("e").ok(), Some(events[1].id.as_str()));

    let stream = (b
        .find_all(crate::STREAMS, doc! {"_id": s.as_str()}, None, 0)
        .await)
        .expect("stream");
    let first = stream[0].get_document("first").expect("first");
    assert_eq!(crate::int(first, "0").ok(), Some(8));
    for (g, skipped, cursor) in [(&plain, 5, 8), (&ordered, 6, 11)] {
        let d = (b
            .find_all(crate::GROUPS, crate::groups::group_key(&s, g), None, 0)
            .await)
            .expect("group");
        assert_eq!(crate::int(&d[0], "skipped").ok(), Some(skipped), "{g:?}");
        let at = crate::int(d[0].get_document("cursor").expect("cursor"), "0");
        assert_eq!(at.ok(), Some(cursor), "{g:?}");
    }
    // Each key's next event is its gate's head now: three gates, three heads.
    let of_ordered = doc! {"s": s.as_str(), "g": ordered.as_str()};
    assert_eq!(count(&b, crate::GATES, of_ordered.clone()).await, 3);
    let mut heads = of_ordered;
    heads.insert("st", crate::claims::AVAILABLE);
    assert_eq!(count(&b, crate::DELIVERIES, heads).await, 3);
    let next: Vec<u64> = (h.fetch(&s, &ordered, 10).await.iter())
        .map(|l| l.event.sequence)
        .collect();
    assert_eq!(next, [8, 9, 10]);
}
