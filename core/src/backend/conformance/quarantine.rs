//! Quarantine (`docs/groups.md#quarantine`): under `on_exhausted =
//! "quarantine"` a gated head out of attempts parks its key, in order,
//! until it is released. Every backend keeps it.

use super::ordering::{append_keys, held, pairs};
use super::*;
use crate::backend::quarantine::{Parked, ReleaseRequest, parked_keys, release};
use crate::backend::{DeadLettersRequest, Error};
use crate::model::{GroupOrdering, OnExhausted};

/// A group of `ordering` that quarantines after `max_attempts`.
async fn quarantining(
    h: &Harness,
    stream: &StreamName,
    ordering: GroupOrdering,
    max_attempts: u32,
) -> GroupName {
    let mut spec = GroupSpec::new(gn("g"));
    spec.ordering = ordering;
    spec.max_attempts = max_attempts;
    spec.on_exhausted = OnExhausted::Quarantine;
    let group = h
        .b()
        .create_group(stream, spec)
        .await
        .expect("create group");
    assert_eq!(group.on_exhausted, OnExhausted::Quarantine);
    group.name
}

fn releasing(stream: &StreamName, which: Parked, skip_head: bool) -> ReleaseRequest {
    ReleaseRequest {
        stream: stream.clone(),
        group: gn("g"),
        which,
        skip_head,
        confirm: true,
    }
}

pub async fn quarantine_needs_an_ordering_and_shows_on_the_group(h: &Harness) {
    let s = h.stream("s", 1).await;
    let mut spec = GroupSpec::new(gn("plain"));
    spec.on_exhausted = OnExhausted::Quarantine;
    let err = h.b().create_group(&s, spec).await.unwrap_err();
    assert_eq!(err.code(), "invalid");
    assert!(err.to_string().contains("on_exhausted"), "{err}");
    let g = quarantining(h, &s, GroupOrdering::Key, 3).await;
    let info = h.b().group_info(&s, &g).await.unwrap();
    assert_eq!(info.on_exhausted, OnExhausted::Quarantine);
    let listed = h.b().list_groups(&s).await.unwrap();
    assert_eq!(listed[0].on_exhausted, OnExhausted::Quarantine);
    let plain = h.group(&s, "other").await;
    let info = h.b().group_info(&s, &plain).await.unwrap();
    assert_eq!(info.on_exhausted, OnExhausted::DeadLetter);
    // No fetch may pose as the quarantine.
    let mut req = h.fetch_req(&s, &g, 1);
    req.consumer_id = cid(crate::backend::policy::QUARANTINE_CONSUMER);
    assert_eq!(code(h.b().fetch(req).await), "invalid");
}

pub async fn a_head_out_of_attempts_parks_its_key_until_released(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = quarantining(h, &s, GroupOrdering::Key, 2).await;
    append_keys(h, &s, &["a", "b", "a", "a"]).await;
    let first = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&first), pairs(&[("a", 1), ("b", 2)]));
    h.nack(&first[0], "boom", None).await.unwrap();
    let again = h.fetch(&s, &g, 10).await;
    assert_eq!((held(&again), again[0].attempt), (pairs(&[("a", 1)]), 2));
    h.nack(&again[0], "boom", None).await.unwrap();
    // The holder's lease is gone: the quarantine holds the head.
    assert_eq!(code(h.ack(&again[0]).await), "stale_lease");
    h.ack(&first[1]).await.unwrap();
    append_keys(h, &s, &["b"]).await;
    let next = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&next), pairs(&[("b", 5)]), "a waits, b flows");
    h.ack(&next[0]).await.unwrap();
    // Time does not release it.
    h.clock.advance(7 * 86_400_000);
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    let parked = parked_keys(h.b(), &s, &g).await.unwrap();
    assert_eq!(parked.len(), 1, "{parked:?}");
    let p = &parked[0];
    assert_eq!(
        (p.key.as_deref(), p.partition, p.sequence, p.attempt),
        (Some("a"), 0, 1, 2)
    );
    assert_eq!(p.reason, "max_attempts: boom");
    let info = h.b().group_info(&s, &g).await.unwrap();
    assert_eq!(info.dead_letters, 0, "nothing was dead-lettered");
    assert_eq!(h.lag(&s, &g).await.partitions[&0].frontier, 0);
    // A release of what is not parked changes nothing.
    let none = release(h.b(), releasing(&s, Parked::Keys(vec!["b".into()]), false))
        .await
        .unwrap();
    assert!(none.released.is_empty());
    assert_eq!(none.not_parked, vec!["b".to_owned()]);
    let mut unconfirmed = releasing(&s, Parked::All, false);
    unconfirmed.confirm = false;
    assert_eq!(
        release(h.b(), unconfirmed).await.unwrap_err(),
        Error::ConfirmRequired
    );
    // Released: the head goes out first, its attempts started over, then
    // the rest of its key in order.
    let done = release(h.b(), releasing(&s, Parked::Keys(vec!["a".into()]), false))
        .await
        .unwrap();
    assert_eq!(done.released.len(), 1);
    assert!(parked_keys(h.b(), &s, &g).await.unwrap().is_empty());
    let mut order = Vec::new();
    loop {
        let leases = h.fetch(&s, &g, 10).await;
        if leases.is_empty() {
            break;
        }
        assert_eq!(leases.len(), 1, "one of a at a time");
        if leases[0].event.sequence == 1 {
            assert_eq!(leases[0].attempt, 1, "a released head starts over");
        }
        order.push(leases[0].event.sequence);
        h.ack(&leases[0]).await.unwrap();
    }
    assert_eq!(order, vec![1, 3, 4]);
    assert_eq!(h.lag(&s, &g).await.lag, 0);
}

pub async fn the_poison_guard_parks_too_and_a_skip_dead_letters_the_head(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = quarantining(h, &s, GroupOrdering::Key, 1).await;
    append_keys(h, &s, &["a", "a", "b"]).await;
    let out = h.fetch_as(&s, &g, 10, "c1", 1_000).await;
    assert_eq!(held(&out), pairs(&[("a", 1), ("b", 3)]));
    h.ack(&out[1]).await.unwrap();
    h.clock.advance(1_000);
    assert!(h.fetch(&s, &g, 10).await.is_empty(), "a is parked");
    let parked = parked_keys(h.b(), &s, &g).await.unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].reason, crate::backend::policy::POISON_REASON);
    assert_eq!(parked[0].parked_at, h.now());
    // The leases page shows the hold, with its reason.
    let page = h
        .b()
        .leases(crate::backend::LeasesRequest {
            stream: s.clone(),
            group: g.clone(),
            limit: 10,
            after: None,
        })
        .await
        .unwrap();
    assert_eq!(page.leases.len(), 1);
    let hold = &page.leases[0];
    assert_eq!(
        hold.consumer_id.as_str(),
        crate::backend::policy::QUARANTINE_CONSUMER
    );
    assert!(!hold.expired);
    assert_eq!(
        hold.reason.as_deref(),
        Some(crate::backend::policy::POISON_REASON)
    );
    let done = release(
        h.b(),
        releasing(&s, Parked::Events(vec![parked[0].event_id.clone()]), true),
    )
    .await
    .unwrap();
    assert_eq!(done.released.len(), 1);
    let dead = h
        .b()
        .dead_letters(DeadLettersRequest {
            stream: s.clone(),
            group: g.clone(),
            limit: 10,
            after: None,
        })
        .await
        .unwrap();
    assert_eq!(dead.dead_letters.len(), 1);
    assert_eq!(dead.dead_letters[0].sequence, 1);
    assert_eq!(
        dead.dead_letters[0].reason,
        "skipped from quarantine: max_attempts_expired"
    );
    let next = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&next), pairs(&[("a", 2)]), "the key moves on");
    // A second skip finds nothing parked.
    let again = release(h.b(), releasing(&s, Parked::All, true))
        .await
        .unwrap();
    assert!(again.released.is_empty());
}

pub async fn what_is_not_gated_is_dead_lettered_and_rejects_still_dead_letter(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = quarantining(h, &s, GroupOrdering::Key, 1).await;
    append_keys(h, &s, &["", "a", "a"]).await;
    let out = h.fetch(&s, &g, 10).await;
    assert_eq!(held(&out), pairs(&[("", 1), ("a", 2)]));
    // A keyless event is not ordered: out of attempts, it is dead.
    h.nack(&out[0], "boom", None).await.unwrap();
    // A reject is a handler's verdict, not an exhaustion: dead, and the
    // key moves on.
    h.reject(&out[1], "bad input").await.unwrap();
    assert!(parked_keys(h.b(), &s, &g).await.unwrap().is_empty());
    assert_eq!(h.b().group_info(&s, &g).await.unwrap().dead_letters, 2);
    assert_eq!(held(&h.fetch(&s, &g, 10).await), pairs(&[("a", 3)]));
}

pub async fn partition_ordering_parks_the_whole_partition(h: &Harness) {
    let s = h.stream("s", 2).await;
    let g = quarantining(h, &s, GroupOrdering::Partition, 1).await;
    h.append_to(&s, 0, 2).await;
    h.append_to(&s, 1, 2).await;
    let out = h.fetch(&s, &g, 10).await;
    assert_eq!(out.len(), 2);
    let p0 = out.iter().find(|l| l.event.partition == 0).unwrap();
    let p1 = out.iter().find(|l| l.event.partition == 1).unwrap();
    h.nack(p0, "boom", None).await.unwrap();
    h.ack(p1).await.unwrap();
    let next = h.fetch(&s, &g, 10).await;
    assert_eq!(
        next.iter()
            .map(|l| (l.event.partition, l.event.sequence))
            .collect::<Vec<_>>(),
        vec![(1, 2)],
        "partition 0 is parked"
    );
    let parked = parked_keys(h.b(), &s, &g).await.unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!((parked[0].key.as_deref(), parked[0].partition), (None, 0));
    release(h.b(), releasing(&s, Parked::All, false))
        .await
        .unwrap();
    let resumed = h.fetch(&s, &g, 10).await;
    assert_eq!(
        resumed
            .iter()
            .map(|l| (l.event.partition, l.event.sequence, l.attempt))
            .collect::<Vec<_>>(),
        vec![(0, 1, 1)]
    );
}
