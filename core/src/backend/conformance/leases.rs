//! Conformance checks: what a group has out — the leases it lists
//! (`docs/groups.md#what-is-out-leases`).

use super::{Harness, cid, code, gn, sn};
use crate::backend::{LeasesRequest, Partitions, RenewRequest, Replay, ResetRequest, Result};
use crate::model::{
    GroupName, GroupOrdering, GroupSpec, HeldLease, Lease, LeaseCursor, LeasePage, StreamName,
};

// ---------------------------------------------------------------------------
// private helpers

/// A page of `limit` leases after `after`.
async fn page(
    h: &Harness,
    s: &StreamName,
    g: &GroupName,
    limit: u32,
    after: Option<LeaseCursor>,
) -> Result<LeasePage> {
    h.b()
        .leases(LeasesRequest {
            stream: s.clone(),
            group: g.clone(),
            limit,
            after,
        })
        .await
}

/// Every lease the group has out, in one page.
async fn all(h: &Harness, s: &StreamName, g: &GroupName) -> Vec<HeldLease> {
    let page = page(h, s, g, 1000, None).await.expect("leases");
    assert_eq!(page.next, None, "one page holds them all");
    assert_eq!(page.now, h.now(), "judged by the store's clock");
    page.leases
}

/// (partition, sequence) of each listed lease.
fn positions(leases: &[HeldLease]) -> Vec<(u32, u64)> {
    leases.iter().map(|l| (l.partition, l.sequence)).collect()
}

/// What the listing must say of a lease a fetch returned, judged at `now`.
fn listed(lease: &Lease, expired: bool) -> HeldLease {
    HeldLease {
        lease_id: lease.lease_id.clone(),
        event_id: lease.event_id.clone(),
        partition: lease.event.partition,
        sequence: lease.event.sequence,
        consumer_id: lease.consumer_id.clone(),
        attempt: lease.attempt,
        leased_at: lease.leased_at,
        expires_at: lease.expires_at,
        expired,
        reason: None,
    }
}

/// Walks every page of `limit` leases; the pages' leases in order.
async fn walk(h: &Harness, s: &StreamName, g: &GroupName, limit: u32) -> Vec<HeldLease> {
    let mut out = Vec::new();
    let mut after = None;
    for _ in 0..100 {
        let page = page(h, s, g, limit, after).await.expect("page");
        assert!(
            page.leases.len() <= limit as usize,
            "a page holds at most its limit"
        );
        let last = page.leases.last().map(|l| LeaseCursor {
            partition: l.partition,
            sequence: l.sequence,
        });
        out.extend(page.leases);
        match page.next {
            None => return out,
            Some(next) => {
                assert_eq!(Some(next), last, "next is the page's last position");
                after = Some(next);
            }
        }
    }
    panic!("paging never ended")
}

// ---------------------------------------------------------------------------
// checks

/// Fetch 3 of 5 events: exactly those 3 are listed, each with its lease
/// id, event, position, holder, attempt, claim time and expiry, as many as
/// group info counts in flight.
pub async fn leases_list_what_is_out_with_holder_attempt_and_expiry(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    let other = h.group(&s, "other").await;
    h.append_n(&s, 5).await;
    assert!(
        all(h, &s, &g).await.is_empty(),
        "nothing out before a fetch"
    );
    h.clock.advance(250);
    let out = h.fetch_as(&s, &g, 3, "worker-1", 7_000).await;
    assert_eq!(out.len(), 3);
    h.clock.advance(1_000);
    let leases = all(h, &s, &g).await;
    let want: Vec<HeldLease> = out.iter().map(|l| listed(l, false)).collect();
    assert_eq!(leases, want);
    assert_eq!(positions(&leases), [(0, 1), (0, 2), (0, 3)]);
    assert!(leases.iter().all(|l| l.consumer_id == cid("worker-1")));
    assert!(leases.iter().all(|l| l.attempt == 1));
    assert!(
        leases
            .iter()
            .all(|l| l.expires_at == l.leased_at.add_ms(7_000)
                && l.leased_at == h.now().sub_ms(1_000))
    );
    let info = h.b().group_info(&s, &g).await.expect("info");
    assert_eq!(info.inflight, 3, "the same deliveries group info counts");
    assert!(
        all(h, &s, &other).await.is_empty(),
        "another group's leases are its own"
    );
}

/// Ack, nack and reject each take their lease off the list; a delivery
/// claimed again shows its new lease, holder and attempt.
pub async fn settled_leases_leave_the_list(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    h.append_n(&s, 4).await;
    let out = h.fetch_as(&s, &g, 3, "c1", 30_000).await;
    h.ack(&out[0]).await.expect("ack");
    assert_eq!(positions(&all(h, &s, &g).await), [(0, 2), (0, 3)]);
    h.nack(&out[1], "again", Some(0)).await.expect("nack");
    assert_eq!(positions(&all(h, &s, &g).await), [(0, 3)]);
    h.reject(&out[2], "never").await.expect("reject");
    assert!(all(h, &s, &g).await.is_empty());

    let again = h.fetch_as(&s, &g, 10, "c2", 5_000).await;
    assert_eq!(again.len(), 2, "the nacked one and the fourth");
    let leases = all(h, &s, &g).await;
    let want: Vec<HeldLease> = again.iter().map(|l| listed(l, false)).collect();
    assert_eq!(leases, want);
    assert_eq!(
        (
            leases[0].sequence,
            leases[0].attempt,
            &leases[0].consumer_id
        ),
        (2, 2, &cid("c2")),
        "the retried delivery under its new lease"
    );
    assert_ne!(leases[0].lease_id, out[1].lease_id);
}

/// Pages run in (partition, sequence) order; walking them with any limit
/// lists every lease once, even when the lease a cursor names is settled
/// between pages; a cursor past the end gives an empty last page.
pub async fn leases_page_in_partition_then_sequence_order(h: &Harness) {
    let s = h.stream("s", 3).await;
    let g = h.group(&s, "g").await;
    for (p, n) in [(0, 3), (1, 1), (2, 4)] {
        h.append_to(&s, p, n).await;
    }
    let out = h.fetch(&s, &g, 7).await;
    assert_eq!(out.len(), 7);
    let every = all(h, &s, &g).await;
    assert_eq!(
        positions(&every),
        [(0, 1), (0, 2), (0, 3), (1, 1), (2, 1), (2, 2), (2, 3)]
    );
    for limit in [1, 2, 3, 7, 8] {
        assert_eq!(walk(h, &s, &g, limit).await, every, "limit {limit}");
    }
    let first = page(h, &s, &g, 3, None).await.expect("page");
    let next = first.next.expect("more follow");
    assert_eq!((next.partition, next.sequence), (0, 3));
    // The lease the cursor names is settled: the next page still starts
    // right after its position.
    let at_cursor = (out.iter())
        .find(|l| (l.event.partition, l.event.sequence) == (0, 3))
        .expect("lease at 0:3");
    h.ack(at_cursor).await.expect("ack");
    let second = page(h, &s, &g, 3, Some(next)).await.expect("page");
    assert_eq!(positions(&second.leases), [(1, 1), (2, 1), (2, 2)]);
    let next = second.next.expect("one more");
    let third = page(h, &s, &g, 3, Some(next)).await.expect("page");
    assert_eq!(positions(&third.leases), [(2, 3)]);
    assert_eq!(third.next, None, "nothing follows the last lease");
    // A cursor between leases, and cursors past the end.
    let mid = LeaseCursor {
        partition: 0,
        sequence: 2,
    };
    let from_mid = page(h, &s, &g, 2, Some(mid)).await.expect("page");
    assert_eq!(positions(&from_mid.leases), [(1, 1), (2, 1)]);
    for end in ["2:3", "2:9007199254740991", "3:0", "99999999999999999999:1"] {
        let end = LeaseCursor::parse(end).expect("cursor");
        let last = page(h, &s, &g, 5, Some(end)).await.expect("page");
        assert!(last.leases.is_empty() && last.next.is_none(), "{end}");
    }
}

/// An expired lease nobody claimed again is still out — its holder may
/// still settle it — and is listed with `expired`, judged by the store's
/// clock; a renewal makes it current again, and a claim by another
/// consumer replaces it with the new lease.
pub async fn an_expired_lease_is_listed_as_expired_until_claimed_again(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    h.append_n(&s, 1).await;
    let old = h.fetch_as(&s, &g, 1, "c1", 1_000).await.remove(0);
    h.clock.advance(999);
    assert_eq!(all(h, &s, &g).await, [listed(&old, false)]);
    h.clock.advance(1);
    assert_eq!(
        all(h, &s, &g).await,
        [listed(&old, true)],
        "expired from expires_at on"
    );
    assert_eq!(h.b().group_info(&s, &g).await.expect("info").inflight, 1);

    let renewed = h
        .b()
        .renew(RenewRequest {
            stream: s.clone(),
            group: g.clone(),
            target: old.target(),
            lease_ms: 2_000,
        })
        .await
        .expect("expiry alone does not fence");
    let leases = all(h, &s, &g).await;
    assert_eq!(leases, [listed(&renewed, false)]);
    assert_eq!(leases[0].expires_at, h.now().add_ms(2_000));

    h.clock.advance(2_000);
    assert!(all(h, &s, &g).await[0].expired);
    let new = h.fetch_as(&s, &g, 1, "c2", 1_000).await.remove(0);
    let leases = all(h, &s, &g).await;
    assert_eq!(leases, [listed(&new, false)]);
    assert_eq!((leases[0].attempt, &leases[0].consumer_id), (2, &cid("c2")));
    assert_ne!(leases[0].lease_id, old.lease_id, "the old lease is gone");
}

/// An expired lease on its last attempt stays listed (expired) until a
/// fetch's poison guard dead-letters it; then it is not out any more.
pub async fn a_poisoned_lease_leaves_the_list_when_dead_lettered(h: &Harness) {
    let s = h.stream("s", 1).await;
    let mut spec = GroupSpec::new(gn("g"));
    spec.max_attempts = 1;
    let g = h.group_with(&s, spec).await;
    h.append_n(&s, 1).await;
    let lease = h.fetch_as(&s, &g, 1, "c1", 100).await.remove(0);
    h.clock.advance(100);
    assert_eq!(all(h, &s, &g).await, [listed(&lease, true)]);
    assert!(
        h.fetch(&s, &g, 10).await.is_empty(),
        "poisoned, not claimed"
    );
    assert!(all(h, &s, &g).await.is_empty());
    let info = h.b().group_info(&s, &g).await.expect("info");
    assert_eq!((info.inflight, info.dead_letters), (0, 1));
}

/// A replay or a reset makes the holders stale: their leases are not out
/// any more. Under an ordering, deliveries parked behind their gate's head
/// are not out either.
pub async fn replay_reset_and_parked_deliveries_are_not_out(h: &Harness) {
    let s = h.stream("s", 2).await;
    let g = h.group(&s, "g").await;
    h.append_to(&s, 0, 2).await;
    h.append_to(&s, 1, 2).await;
    h.fetch(&s, &g, 4).await;
    let replay = Replay::FromSequence {
        after: 1,
        partitions: Partitions::Only(vec![0]),
    };
    h.b().replay(&s, &g, replay).await.expect("replay");
    assert_eq!(positions(&all(h, &s, &g).await), [(0, 1), (1, 1), (1, 2)]);
    let mut reset = ResetRequest::to_the_beginning(&s, &g);
    reset.partitions = Partitions::Only(vec![1]);
    h.b().reset(reset).await.expect("reset");
    assert_eq!(positions(&all(h, &s, &g).await), [(0, 1)]);

    let mut spec = GroupSpec::new(gn("ordered"));
    spec.ordering = GroupOrdering::Partition;
    let ordered = h.group_with(&s, spec).await;
    h.fetch(&s, &ordered, 10).await;
    assert_eq!(
        positions(&all(h, &s, &ordered).await),
        [(0, 1), (1, 1)],
        "one per partition is out"
    );
}

/// The limit is 1–1000; an unknown stream or group is not found, the
/// stream checked first.
pub async fn leases_validate_the_limit_and_find_the_group(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    for limit in [0, 1001] {
        assert_eq!(
            code(page(h, &s, &g, limit, None).await),
            "invalid",
            "{limit}"
        );
    }
    assert!(page(h, &s, &g, 1000, None).await.is_ok());
    assert_eq!(
        code(page(h, &s, &gn("missing"), 10, None).await),
        "group_not_found"
    );
    assert_eq!(
        code(page(h, &sn("nope"), &gn("missing"), 10, None).await),
        "stream_not_found"
    );
    let elsewhere = h.stream("t", 1).await;
    let only_there = h.group(&elsewhere, "h").await;
    assert_eq!(
        code(page(h, &s, &only_there, 10, None).await),
        "group_not_found",
        "a group of another stream"
    );
}
