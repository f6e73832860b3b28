//! Deleting streams and groups (`docs/operations.md#deleting-streams-and-groups`).

use super::{Harness, code, eid, gn, sn};
use crate::backend::{
    Backend, CreateStream, DeadLettersRequest, DeleteGroup, DeleteStream, LeasesRequest,
    Partitions, ReadRequest, Replay, Result,
};
use crate::model::{EventInput, GroupName, GroupSpec, Query, StartPosition, StreamName};

pub async fn delete_stream(b: &dyn Backend, stream: &StreamName, confirm: bool) -> Result<()> {
    b.delete_stream(DeleteStream {
        stream: stream.clone(),
        confirm,
    })
    .await
}

pub async fn delete_group(
    b: &dyn Backend,
    stream: &StreamName,
    group: &GroupName,
    confirm: bool,
) -> Result<()> {
    b.delete_group(DeleteGroup {
        stream: stream.clone(),
        group: group.clone(),
        confirm,
    })
    .await
}

/// The first page of the group's leases.
fn leases_req(s: &StreamName, g: &GroupName) -> LeasesRequest {
    LeasesRequest {
        stream: s.clone(),
        group: g.clone(),
        limit: 10,
        after: None,
    }
}

fn with_id(id: &str) -> EventInput {
    EventInput {
        id: Some(eid(id)),
        partition: Some(0),
        ..EventInput::default()
    }
}

/// A delete needs `confirm`, checked before the names; without it nothing
/// changes.
pub async fn deletes_require_confirm(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    h.append_n(&s, 2).await;
    let leases = h.fetch(&s, &g, 1).await;
    for r in [
        delete_stream(h.b(), &s, false).await,
        delete_stream(h.b(), &sn("nope"), false).await,
        delete_group(h.b(), &s, &g, false).await,
        delete_group(h.b(), &sn("nope"), &gn("nope"), false).await,
    ] {
        assert_eq!(code(r), "confirm_required");
    }
    assert_eq!(
        h.b().get_stream(&s).await.expect("kept").high_watermarks,
        [2]
    );
    h.ack(&leases[0])
        .await
        .expect("the held lease is still good");
    assert_eq!(h.fetch(&s, &g, 10).await.len(), 1);
}

/// Unknown names: the stream is checked before the group.
pub async fn deleting_what_does_not_exist_is_not_found(h: &Harness) {
    let s = h.stream("s", 1).await;
    let r = delete_stream(h.b(), &sn("nope"), true).await;
    assert_eq!(code(r), "stream_not_found");
    let r = delete_group(h.b(), &sn("nope"), &gn("g"), true).await;
    assert_eq!(code(r), "stream_not_found");
    let r = delete_group(h.b(), &s, &gn("nope"), true).await;
    assert_eq!(code(r), "group_not_found");
    let g = h.group(&s, "g").await;
    delete_group(h.b(), &s, &g, true).await.expect("delete");
    let r = delete_group(h.b(), &s, &g, true).await;
    assert_eq!(code(r), "group_not_found", "a second delete finds nothing");
    delete_stream(h.b(), &s, true).await.expect("delete");
    let r = delete_stream(h.b(), &s, true).await;
    assert_eq!(code(r), "stream_not_found", "a second delete finds nothing");
}

/// A deleted stream is gone everywhere, with its groups and their leases,
/// and not brought back by a restart.
pub async fn a_deleted_stream_is_gone_everywhere(h: &Harness) {
    let s = h.stream("s", 2).await;
    let keep = h.stream("keep", 1).await;
    let g = h.group(&s, "g").await;
    let kept_group = h.group(&keep, "g").await;
    h.append_n(&s, 3).await;
    h.append_n(&keep, 2).await;
    let leases = h.fetch(&s, &g, 2).await;
    h.reject(&leases[1], "dead").await.expect("reject");
    delete_stream(h.b(), &s, true).await.expect("delete");

    let b = match &h.reopen {
        Some(reopen) => reopen.open().await,
        None => h.backend.clone(),
    };
    let b = &*b;
    let gone = |r: Result<()>| assert_eq!(code(r), "stream_not_found");
    gone(b.get_stream(&s).await.map(drop));
    gone(b.list_groups(&s).await.map(drop));
    gone(b.append(&s, vec![EventInput::default()]).await.map(drop));
    let read = ReadRequest {
        stream: s.clone(),
        partition: 0,
        after: 0,
        limit: 10,
    };
    gone(b.read(read).await.map(drop));
    gone(b.query(&s, &Query::default()).await.map(drop));
    gone(b.group_info(&s, &g).await.map(drop));
    gone(b.leases(leases_req(&s, &g)).await.map(drop));
    gone(b.fetch(h.fetch_req(&s, &g, 10)).await.map(drop));
    gone(b.ack(&s, &g, leases[0].target()).await);
    let names: Vec<_> = (b.list_streams().await.expect("list").into_iter())
        .map(|s| s.name)
        .collect();
    assert_eq!(
        names,
        std::slice::from_ref(&keep),
        "the other stream is left alone"
    );
    let info = b.group_info(&keep, &kept_group).await.expect("kept group");
    assert_eq!(info.lag.pending, 2);
}

/// A stream created again under a deleted one's name starts empty, with
/// its own partition count, no groups, and every event id free again.
pub async fn a_stream_created_again_starts_empty(h: &Harness) {
    let s = h.stream("s", 2).await;
    let g = h.group(&s, "g").await;
    h.append_inputs(&s, vec![with_id("a"), with_id("b")]).await;
    let old = h.fetch(&s, &g, 2).await;
    delete_stream(h.b(), &s, true).await.expect("delete");

    let created = h
        .b()
        .create_stream(CreateStream {
            name: s.clone(),
            partition_count: 3,
            retention: None,
        })
        .await
        .expect("create again");
    assert_eq!(created.partition_count, 3);
    assert_eq!(created.high_watermarks, [0, 0, 0]);
    assert!(h.b().list_groups(&s).await.expect("groups").is_empty());
    let r = h.b().group_info(&s, &g).await;
    assert_eq!(code(r), "group_not_found");
    let again = h.b().append(&s, vec![with_id("b")]).await.expect("append");
    assert!(!again[0].duplicate, "the old event's id is free");
    assert_eq!(again[0].event.sequence, 1);
    assert_eq!(again[0].event.partition, 0);

    let g = h.group(&s, "g").await;
    let r = h.ack(&old[0]).await;
    assert!(r.is_err(), "a lease of the deleted stream settles nothing");
    let leases = h.fetch(&s, &g, 10).await;
    assert_eq!(leases.len(), 1);
    assert_eq!((leases[0].event.id.as_str(), leases[0].attempt), ("b", 1));
    h.ack(&leases[0]).await.expect("ack");
    assert_eq!(h.lag(&s, &g).await.lag, 0);
}

/// Deleting a group removes its state only: the stream, its events and
/// the other groups carry on.
pub async fn deleting_a_group_leaves_the_stream_and_other_groups(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    let other = h.group(&s, "other").await;
    h.append_n(&s, 3).await;
    let mine = h.fetch(&s, &g, 3).await;
    h.reject(&mine[0], "dead").await.expect("reject");
    let theirs = h.fetch(&s, &other, 1).await;
    delete_group(h.b(), &s, &g, true).await.expect("delete");

    let gone = |r: Result<()>| assert_eq!(code(r), "group_not_found");
    gone(h.b().group_info(&s, &g).await.map(drop));
    gone(h.b().fetch(h.fetch_req(&s, &g, 10)).await.map(drop));
    gone(h.b().lag(&s, &g, &Partitions::All).await.map(drop));
    gone(h.b().leases(leases_req(&s, &g)).await.map(drop));
    gone(h.ack(&mine[1]).await);
    let dead = DeadLettersRequest {
        stream: s.clone(),
        group: g.clone(),
        limit: 10,
        after: None,
    };
    gone(h.b().dead_letters(dead).await.map(drop));
    let replay = Replay::FromSequence {
        after: 0,
        partitions: Partitions::All,
    };
    gone(h.b().replay(&s, &g, replay).await.map(drop));
    let groups: Vec<_> = (h.b().list_groups(&s).await.expect("groups").into_iter())
        .map(|g| g.name)
        .collect();
    assert_eq!(groups, std::slice::from_ref(&other));
    assert_eq!(
        h.b().get_stream(&s).await.expect("stream").high_watermarks,
        [3]
    );
    h.ack(&theirs[0])
        .await
        .expect("the other group's lease is still good");
    assert_eq!(h.lag(&s, &other).await.lag, 2);
}

/// A group created again under a deleted one's name starts from its own
/// start position with fresh attempts and no dead letters.
pub async fn a_group_created_again_starts_afresh(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    h.append_n(&s, 3).await;
    let first = h.fetch(&s, &g, 3).await;
    h.ack(&first[0]).await.expect("ack");
    h.reject(&first[1], "dead").await.expect("reject");
    delete_group(h.b(), &s, &g, true).await.expect("delete");

    let spec = GroupSpec {
        start: StartPosition::Beginning,
        max_attempts: 2,
        ..GroupSpec::new(g.clone())
    };
    let g = h.group_with(&s, spec).await;
    let r = h.ack(&first[2]).await;
    assert!(r.is_err(), "a lease of the deleted group settles nothing");
    let info = h.b().group_info(&s, &g).await.expect("info");
    assert_eq!((info.dead_letters, info.lag.lag), (0, 3));
    let again = h.fetch(&s, &g, 10).await;
    let seen: Vec<_> = again
        .iter()
        .map(|l| (l.event.sequence, l.attempt))
        .collect();
    assert_eq!(seen, [(1, 1), (2, 1), (3, 1)]);
    h.nack(&again[0], "once", Some(0)).await.expect("nack");
    let retry = h.fetch(&s, &g, 1).await;
    h.nack(&retry[0], "twice", Some(0)).await.expect("nack");
    let info = h.b().group_info(&s, &g).await.expect("info");
    assert_eq!(info.dead_letters, 1, "the new group's max_attempts applies");
}
