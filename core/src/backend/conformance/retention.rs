//! Retention (`docs/log.md#retention`): a round of the core's trimmer
//! ([`trim_stream`]) against every store, on the frozen clock.

use super::{Harness, code, eid, sn};
use crate::backend::retention::{TRIM_BATCH, TrimReport, trim_stream};
use crate::backend::{CreateStream, DeadLettersRequest, Partitions, ReadRequest, Redrive, Replay};
use crate::model::{
    EventInput, GroupOrdering, GroupSpec, Lease, Query, Retention, RetentionPolicy, StreamName,
};

fn keep_newest(n: u64) -> Retention {
    Retention {
        max_events: Some(n),
        ..Retention::default()
    }
}

async fn stream_with(h: &Harness, name: &str, partitions: u32, retention: Retention) -> StreamName {
    let mut req = CreateStream::new(sn(name), partitions);
    req.retention = Some(retention);
    let created = h.b().create_stream(req).await.expect("create stream");
    assert_eq!(created.retention, Some(retention));
    created.name
}

async fn trim(h: &Harness, s: &StreamName) -> TrimReport {
    trim_stream(h.b(), s, TRIM_BATCH).await.expect("trim")
}

async fn firsts(h: &Harness, s: &StreamName) -> Vec<u64> {
    h.b().get_stream(s).await.expect("stream").first_sequences
}

async fn read_all(h: &Harness, s: &StreamName, partition: u32) -> Vec<u64> {
    let req = ReadRequest {
        stream: s.clone(),
        partition,
        after: 0,
        limit: 1000,
    };
    let events = h.b().read(req).await.expect("read");
    events.iter().map(|e| e.sequence).collect()
}

fn seqs(leases: &[Lease]) -> Vec<u64> {
    leases.iter().map(|l| l.event.sequence).collect()
}

/// `max_events` keeps each partition's newest events; reads and queries
/// start at the new log start, and appends carry on from the high watermark.
pub async fn retention_by_count_keeps_the_newest_events(h: &Harness) {
    let s = stream_with(h, "s", 2, keep_newest(3)).await;
    assert_eq!(firsts(h, &s).await, [1, 1], "a new stream starts at 1");
    h.append_to(&s, 0, 10).await;
    h.append_to(&s, 1, 2).await;
    let report = trim(h, &s).await;
    assert_eq!(report.removed, 7);
    assert!(!report.more);
    let stream = h.b().get_stream(&s).await.expect("stream");
    assert_eq!(stream.first_sequences, [8, 1]);
    assert_eq!(stream.high_watermarks, [10, 2]);
    assert_eq!(read_all(h, &s, 0).await, [8, 9, 10]);
    let page = h.b().query(&s, &Query::default()).await.expect("query");
    assert_eq!(page.events.len(), 5, "three of partition 0, two of 1");
    let next = h.append_to(&s, 0, 1).await;
    assert_eq!(next[0].sequence, 11, "sequences are never reused");
    assert_eq!(trim(h, &s).await.removed, 1);
    assert_eq!(firsts(h, &s).await, [9, 1]);
    assert_eq!(
        trim(h, &s).await,
        TrimReport::default(),
        "nothing more to do"
    );
}

/// `max_age_ms` removes the events older than the age, by their
/// timestamps on the store's clock, from the front of each partition.
pub async fn retention_by_age_removes_old_events(h: &Harness) {
    let age = Retention {
        max_age_ms: Some(60_000),
        ..Retention::default()
    };
    let s = stream_with(h, "s", 1, age).await;
    h.append_n(&s, 3).await;
    h.clock.advance(30_000);
    h.append_n(&s, 2).await;
    assert_eq!(trim(h, &s).await.removed, 0, "nothing is a minute old yet");
    h.clock.advance(40_000);
    assert_eq!(
        trim(h, &s).await.removed,
        3,
        "70 s old: gone; 40 s old: kept"
    );
    assert_eq!(read_all(h, &s, 0).await, [4, 5]);
    h.clock.advance(60_000);
    assert_eq!(trim(h, &s).await.removed, 2);
    let stream = h.b().get_stream(&s).await.expect("stream");
    assert_eq!(
        (stream.first_sequences, stream.high_watermarks),
        (vec![6], vec![5])
    );
    assert!(read_all(h, &s, 0).await.is_empty());
}

/// A group whose frontier lies below the new log start moves to it: the
/// events it had not settled are counted, never silently lost, and what
/// is left is delivered as usual.
pub async fn a_group_behind_the_log_start_moves_to_it_counting_what_it_skipped(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    h.append_n(&s, 10).await;
    let leases = h.fetch(&s, &g, 3).await;
    h.ack(&leases[0]).await.expect("ack 1");
    h.ack(&leases[2]).await.expect("ack 3");
    let set = h.b().set_retention(&s, Some(keep_newest(2))).await;
    assert_eq!(set.expect("set retention").retention, Some(keep_newest(2)));
    let report = trim(h, &s).await;
    assert_eq!(report.removed, 8);
    // 2 (leased), 4 to 8 (never delivered); 1 and 3 were acked.
    assert_eq!(report.skipped.get(&g), Some(&6));
    let info = h.b().group_info(&s, &g).await.expect("info");
    assert_eq!(info.skipped_by_retention, 6);
    assert_eq!(info.lag.partitions[&0].frontier, 8);
    assert_eq!(info.lag.lag, 2);
    assert_eq!(info.inflight, 0, "the lease of 2 went with its event");
    let rest = h.fetch(&s, &g, 10).await;
    assert_eq!(seqs(&rest), [9, 10]);
    assert!(rest.iter().all(|l| l.attempt == 1));
}

/// A settle or renew of a lease whose event was removed answers
/// `event_removed`, and changes nothing.
pub async fn a_settle_of_a_removed_event_is_event_removed(h: &Harness) {
    let s = stream_with(h, "s", 1, keep_newest(1)).await;
    let g = h.group(&s, "g").await;
    h.append_n(&s, 2).await;
    let leases = h.fetch(&s, &g, 2).await;
    assert_eq!(trim(h, &s).await.removed, 1);
    assert_eq!(code(h.ack(&leases[0]).await), "event_removed");
    assert_eq!(
        code(h.nack(&leases[0], "again", None).await),
        "event_removed"
    );
    let renew = crate::backend::RenewRequest {
        stream: s.clone(),
        group: g.clone(),
        target: leases[0].target(),
        lease_ms: 10_000,
    };
    assert_eq!(code(h.b().renew(renew).await), "event_removed");
    h.ack(&leases[1])
        .await
        .expect("the kept event's lease is good");
    assert_eq!(h.lag(&s, &g).await.lag, 0);
}

/// A dead letter outlives its event: it is still listed, by the event's
/// id, without the event; a redrive has nothing to send again.
pub async fn dead_letters_keep_what_retention_removed(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    h.append_inputs(
        &s,
        ["a", "b", "c"]
            .map(|id| EventInput {
                id: Some(eid(id)),
                ..EventInput::default()
            })
            .to_vec(),
    )
    .await;
    let leases = h.fetch(&s, &g, 3).await;
    h.reject(&leases[0], "bad").await.expect("reject a");
    h.reject(&leases[1], "bad").await.expect("reject b");
    h.b()
        .set_retention(&s, Some(keep_newest(1)))
        .await
        .expect("set");
    trim(h, &s).await;
    let page = |after| DeadLettersRequest {
        stream: s.clone(),
        group: g.clone(),
        limit: 1,
        after,
    };
    let first = h.b().dead_letters(page(None)).await.expect("dead letters");
    assert_eq!(first.dead_letters.len(), 1);
    let dead = &first.dead_letters[0];
    assert_eq!((dead.event_id.as_str(), dead.sequence), ("a", 1));
    assert_eq!((dead.reason.as_str(), dead.event.is_none()), ("bad", true));
    let second = (h.b().dead_letters(page(first.next.clone())).await).expect("the next page");
    assert_eq!(second.dead_letters[0].event_id.as_str(), "b");
    let redriven = h.b().redrive(&s, &g, Redrive::All).await.expect("redrive");
    assert_eq!(redriven, 0, "nothing left to deliver");
    let info = h.b().group_info(&s, &g).await.expect("info");
    assert_eq!(info.dead_letters, 2);
    assert_eq!(info.skipped_by_retention, 0, "dead letters are settled");
}

/// `interest`: an event goes once every group has settled it; a stream
/// without groups keeps everything.
pub async fn interest_removes_what_every_group_settled(h: &Harness) {
    let interest = Retention {
        policy: RetentionPolicy::Interest,
        ..Retention::default()
    };
    let s = stream_with(h, "s", 1, interest).await;
    h.append_n(&s, 5).await;
    assert_eq!(trim(h, &s).await.removed, 0, "no groups: everything stays");
    let fast = h.group(&s, "fast").await;
    let slow = h.group(&s, "slow").await;
    for lease in h.fetch(&s, &fast, 4).await {
        h.ack(&lease).await.expect("ack");
    }
    let slow_leases = h.fetch(&s, &slow, 3).await;
    h.ack(&slow_leases[0]).await.expect("ack");
    h.reject(&slow_leases[1], "bad").await.expect("reject");
    assert_eq!(
        trim(h, &s).await.removed,
        2,
        "1 acked, 2 dead-lettered by both"
    );
    assert_eq!(firsts(h, &s).await, [3]);
    h.ack(&slow_leases[2]).await.expect("ack 3");
    assert_eq!(trim(h, &s).await.removed, 1);
    let info = h.b().group_info(&s, &slow).await.expect("info");
    assert_eq!(info.skipped_by_retention, 0, "interest skips nothing");
    let capped = Retention {
        max_events: Some(1),
        ..interest
    };
    h.b().set_retention(&s, Some(capped)).await.expect("set");
    assert_eq!(
        trim(h, &s).await.removed,
        1,
        "the cap removes 4, unsettled by slow"
    );
    let info = h.b().group_info(&s, &slow).await.expect("info");
    assert_eq!(info.skipped_by_retention, 1);
}

/// Below the log start there is nothing: a group starting at the
/// beginning starts at the log start, a replay or reset to before it
/// clamps to it, queries and reads return what is stored.
pub async fn below_the_log_start_everything_clamps_to_it(h: &Harness) {
    let s = stream_with(h, "s", 1, keep_newest(3)).await;
    h.append_n(&s, 10).await;
    trim(h, &s).await;
    let g = h.group(&s, "g").await;
    assert_eq!(h.lag(&s, &g).await.partitions[&0].frontier, 7);
    let leases = h.fetch(&s, &g, 10).await;
    assert_eq!(seqs(&leases), [8, 9, 10]);
    for lease in &leases {
        h.ack(lease).await.expect("ack");
    }
    let replay = Replay::FromSequence {
        after: 0,
        partitions: Partitions::All,
    };
    assert_eq!(h.b().replay(&s, &g, replay).await.expect("replay"), 3);
    assert_eq!(h.lag(&s, &g).await.partitions[&0].frontier, 7);
    assert_eq!(seqs(&h.fetch(&s, &g, 10).await), [8, 9, 10]);
    let reset = crate::backend::ResetRequest::to_the_beginning(&s, &g);
    h.b().reset(reset).await.expect("reset");
    assert_eq!(h.lag(&s, &g).await.partitions[&0].frontier, 7);
    let bounded = Query {
        after_sequence: Some(0),
        ..Query::default()
    };
    let page = h.b().query(&s, &bounded).await.expect("query");
    let found: Vec<u64> = page.events.iter().map(|e| e.sequence).collect();
    assert_eq!(found, [8, 9, 10]);
}

/// Under key ordering, removing a key's head lets the key's next event
/// out.
pub async fn a_removed_head_lets_its_keys_next_event_out(h: &Harness) {
    let s = h.stream("s", 1).await;
    let spec = GroupSpec {
        ordering: GroupOrdering::Key,
        ..GroupSpec::new(super::gn("g"))
    };
    let g = h.group_with(&s, spec).await;
    let keyed = |key: &str| EventInput {
        key: Some(key.to_owned()),
        ..EventInput::default()
    };
    h.append_inputs(&s, vec![keyed("a"), keyed("a"), keyed("a")])
        .await;
    assert_eq!(
        seqs(&h.fetch(&s, &g, 10).await),
        [1],
        "one of key a at a time"
    );
    h.b()
        .set_retention(&s, Some(keep_newest(2)))
        .await
        .expect("set");
    trim(h, &s).await;
    assert_eq!(seqs(&h.fetch(&s, &g, 10).await), [2], "the next of key a");
}

/// A retention is set, changed and cleared, and a bad one is refused
/// with nothing changed; it survives a restart.
pub async fn retention_is_set_changed_and_cleared(h: &Harness) {
    let s = h.stream("s", 1).await;
    assert_eq!(h.b().get_stream(&s).await.expect("stream").retention, None);
    let bad = Retention::default();
    assert_eq!(code(h.b().set_retention(&s, Some(bad)).await), "invalid");
    let r = h.b().set_retention(&sn("nope"), Some(keep_newest(1))).await;
    assert_eq!(code(r), "stream_not_found");
    let mut req = CreateStream::new(sn("bad"), 1);
    req.retention = Some(Retention {
        max_events: Some(0),
        ..Retention::default()
    });
    assert_eq!(code(h.b().create_stream(req).await), "invalid");
    let week = Retention {
        max_age_ms: Some(7 * 86_400_000),
        max_events: Some(1_000_000),
        policy: RetentionPolicy::Interest,
    };
    h.b().set_retention(&s, Some(week)).await.expect("set");
    let b = match &h.reopen {
        Some(reopen) => reopen.open().await,
        None => h.backend.clone(),
    };
    assert_eq!(
        b.get_stream(&s).await.expect("stream").retention,
        Some(week)
    );
    let listed = b.list_streams().await.expect("list");
    assert_eq!(listed[0].retention, Some(week));
    let cleared = b.set_retention(&s, None).await.expect("clear");
    assert_eq!(cleared.retention, None);
}
