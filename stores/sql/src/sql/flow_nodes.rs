//! A group's flow changed by a reset on one node while another keeps its
//! old settings (`docs/groups.md#flow`): the other node holds to the flow
//! as stored wherever a gate is decided — a fetch reads it with the
//! cursor rows it locks (on the two-statement path of a group without
//! gates too), and a settle's release reads the gate's slots with them —
//! so no key ever has more deliveries out than the stored limit.
//!
//! Each dialect's tests open two backends on one store and run this check.

use std::sync::Arc;

use super::{Dialect, SqlBackend};
use rheo_core::backend::conformance::Harness;
use rheo_core::backend::{Backend, ResetRequest};
use rheo_core::clock::FrozenClock;
use rheo_core::model::{EventInput, Flow, GroupName, Lease, StreamName};

fn sequences(leases: &[Lease]) -> Vec<u64> {
    let mut seqs: Vec<u64> = leases.iter().map(|l| l.event.sequence).collect();
    seqs.sort_unstable();
    seqs
}

/// A reset of every partition to the beginning setting `key_concurrency`
/// to `n` (`None`: off).
fn reset_to(s: &StreamName, g: &GroupName, n: Option<u32>) -> ResetRequest {
    ResetRequest {
        flow: Some(Flow {
            key_concurrency: n,
            ..Flow::default()
        }),
        ..ResetRequest::to_the_beginning(s, g)
    }
}

pub(crate) async fn a_flow_changed_on_one_node_holds_on_the_other<D: Dialect>(
    clock: Arc<FrozenClock>,
    a: Arc<SqlBackend<D>>,
    b: Arc<SqlBackend<D>>,
) {
    let ha = Harness::on(a.clone() as Arc<dyn Backend>, clock.clone());
    let hb = Harness::on(b.clone() as Arc<dyn Backend>, clock);
    let s = ha.stream("s", 1).await;
    let g = ha.group(&s, "g").await;
    let keyed = || EventInput {
        key: Some("k".to_owned()),
        ..EventInput::default()
    };
    ha.append_inputs(&s, (0..5).map(|_| keyed()).collect())
        .await;
    // Node b serves the group without gates: it keeps it so from now on.
    assert_eq!(sequences(&hb.fetch(&s, &g, 1).await), [1]);

    // Two of a key at once: b's next fetch finds the flow with the cursor
    // rows (its two-statement path) and runs again under it.
    a.reset(reset_to(&s, &g, Some(2)))
        .await
        .expect("reset to 2");
    assert_eq!(sequences(&hb.fetch(&s, &g, 10).await), [1, 2]);
    assert!(ha.fetch(&s, &g, 10).await.is_empty(), "k is full");

    // Three: b, which keeps two, leases three.
    a.reset(reset_to(&s, &g, Some(3)))
        .await
        .expect("reset to 3");
    assert_eq!(sequences(&hb.fetch(&s, &g, 10).await), [1, 2, 3]);

    // One: a holds the head; b, which keeps three, acks it, and its
    // release lets one through, not three.
    a.reset(reset_to(&s, &g, Some(1)))
        .await
        .expect("reset to 1");
    let head = ha.fetch(&s, &g, 10).await;
    assert_eq!(sequences(&head), [1]);
    hb.ack(&head[0]).await.expect("ack on node b");
    let next = ha.fetch(&s, &g, 10).await;
    assert_eq!(sequences(&next), [2], "one of k at a time");

    // Off again: b, which keeps one, hands out every event left.
    a.reset(reset_to(&s, &g, None)).await.expect("reset to off");
    assert_eq!(sequences(&hb.fetch(&s, &g, 10).await), [1, 2, 3, 4, 5]);
    let info = a.group_info(&s, &g).await.expect("group info");
    assert!(info.flow.is_off());
}
