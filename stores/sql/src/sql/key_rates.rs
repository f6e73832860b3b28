//! Where `flow.key_rate` keeps its buckets (`docs/groups.md#flow`): one
//! row per (group, partition, key) in `rheo_key_rates`, its TAT, written
//! by the fetches that change it and deleted once it has passed (by the
//! next fetch that stores a TAT in the partition), by a reset of its
//! partition, and with its group or stream; and the `paced` mark of a
//! delivery, set while it waits for its slot and cleared when it is
//! leased or re-opened. The conformance checks see only the answers;
//! this looks at the rows. Each dialect's tests run it.

use std::sync::Arc;

use super::retention_rows::count;
use super::{Dialect, SqlBackend};
use rheo_core::backend::conformance::{Harness, gn};
use rheo_core::backend::{Backend, DeleteGroup, DeleteStream, Replay, ResetRequest};
use rheo_core::clock::FrozenClock;
use rheo_core::model::{EventInput, Flow, GroupName, GroupSpec, Lease, StreamName};

/// The stream's buckets, and its deliveries with their paced mark set.
async fn rows<D: Dialect>(b: &SqlBackend<D>, s: &StreamName) -> (u64, u64) {
    let buckets = count(b, "rheo_key_rates WHERE stream = {p}1", super::args![s]).await;
    let paced = "rheo_deliveries WHERE stream = {p}1 AND paced IS NOT NULL";
    (buckets, count(b, paced, super::args![s]).await)
}

fn keyed(keys: &[&str]) -> Vec<EventInput> {
    keys.iter()
        .map(|k| EventInput {
            key: (!k.is_empty()).then(|| (*k).to_owned()),
            ..EventInput::default()
        })
        .collect()
}

fn held(leases: &[Lease]) -> Vec<(Option<String>, u64)> {
    let mut held: Vec<_> = leases
        .iter()
        .map(|l| (l.event.key.clone(), l.event.sequence))
        .collect();
    held.sort();
    held
}

fn key(k: &str, seq: u64) -> (Option<String>, u64) {
    (Some(k.to_owned()), seq)
}

async fn paced_group(h: &Harness, s: &StreamName) -> GroupName {
    let spec = GroupSpec {
        flow: Flow::paced(1.0, 1),
        ..GroupSpec::new(gn("g"))
    };
    h.group_with(s, spec).await
}

pub(crate) async fn key_rate_buckets_are_rows_that_go_with_their_group<D: Dialect>(
    clock: Arc<FrozenClock>,
    b: Arc<SqlBackend<D>>,
) {
    let h = Harness::on(b.clone() as Arc<dyn Backend>, clock.clone());
    let s = h.stream("s", 1).await;
    let g = paced_group(&h, &s).await;
    let events = h.append_inputs(&s, keyed(&["a", "a", "b", ""])).await;
    let first = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&first), [(None, 4), key("a", 1), key("b", 3)]);
    assert_eq!(rows(&b, &s).await, (2, 1), "a's and b's buckets; a2 paced");

    // A replay re-opens a2, due now, and clears its mark: it takes a token
    // again, and finds the next one at 2 s, past the slot it had.
    let a2 = Replay::EventIds(vec![events[1].id.clone()]);
    assert_eq!(b.replay(&s, &g, a2).await.expect("replay"), 0);
    assert_eq!(rows(&b, &s).await, (2, 0), "re-opened: no mark");
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    assert_eq!(rows(&b, &s).await, (2, 1), "paced again");
    clock.advance(1_000);
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "its slot is at 2 s");
    clock.advance(1_000);
    let second = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&second), [key("a", 2)], "its slot, reserved");
    assert_eq!(second[0].attempt, 1, "waiting for a token is no attempt");
    assert_eq!(rows(&b, &s).await, (2, 0), "leased: no mark");

    // Buckets full again are forgotten when the partition's next fetch
    // stores one: b's (1 s) has passed, a's (3 s) has not.
    clock.advance(500);
    h.append_inputs(&s, keyed(&["c"])).await;
    assert_eq!(held(&h.fetch(&s, &g, 10).await), [key("c", 5)]);
    let left = count(
        &*b,
        "rheo_key_rates WHERE stream = {p}1 AND key IN ('a', 'c')",
        super::args![&s],
    )
    .await;
    assert_eq!((rows(&b, &s).await.0, left), (2, 2), "b's is gone");

    // A reset forgets them: every key starts with a full bucket.
    b.reset(ResetRequest::to_the_beginning(&s, &g))
        .await
        .expect("reset");
    assert_eq!(rows(&b, &s).await, (0, 0));
    let again = h.fetch(&s, &g, 10).await;
    assert_eq!(
        held(&again),
        [(None, 4), key("a", 1), key("b", 3), key("c", 5)]
    );
    assert_eq!(rows(&b, &s).await, (3, 1), "a2 paced again");

    // So does deleting the group: created again, it starts full.
    let delete = DeleteGroup {
        stream: s.clone(),
        group: g.clone(),
        confirm: true,
    };
    b.delete_group(delete).await.expect("delete the group");
    assert_eq!(rows(&b, &s).await, (0, 0));
    let g = paced_group(&h, &s).await;
    assert_eq!(h.fetch(&s, &g, 10).await.len(), 4, "a1, b, c, the keyless");
    assert_eq!(rows(&b, &s).await, (3, 1));

    // And deleting the stream.
    let delete = DeleteStream {
        stream: s.clone(),
        confirm: true,
    };
    b.delete_stream(delete).await.expect("delete the stream");
    assert_eq!(rows(&b, &s).await, (0, 0));
}
